/* prom_text.h - a strict check of Prometheus's text exposition format (version 0.0.4), for tests.
 *
 * Written from the format's description in the Prometheus documentation ("Exposition formats"):
 * every line ends in a newline; "# HELP name doc" and "# TYPE name type" at most once per metric
 * family, TYPE before the family's first sample; other "#" lines are comments; a sample is
 * `name{label="value",...} value [timestamp]` with the name and label grammar, escapes \\ \" \n in
 * label values, a float value (or +Inf, -Inf, NaN); a family's lines form one group; a histogram
 * family's samples are name_bucket (with "le"), name_sum and name_count. Stricter than Prometheus
 * where it helps: every sample needs its family's TYPE, a series (name and labels) appears once,
 * buckets are cumulative and the +Inf bucket equals _count. */
#ifndef ADAPTERD_TESTS_PROM_TEXT_H
#define ADAPTERD_TESTS_PROM_TEXT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROM_MAX_FAMILIES 256
#define PROM_MAX_SERIES 8192

typedef struct {
    char name[128], type[16];
    int help, done; /* done: another family's lines followed */
} prom_family;

static inline int prom_name_ok(const char *s, size_t n, int metric) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
        if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return 0;
    }
    return 1;
}

static inline prom_family *prom_find(prom_family *f, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(f[i].name) == len && !strncmp(f[i].name, name, len)) return &f[i];
    return NULL;
}

static inline int prom_value_ok(const char *s, const char **end) {
    if (!strncmp(s, "+Inf", 4) || !strncmp(s, "-Inf", 4)) return *end = s + 4, 1;
    if (!strncmp(s, "NaN", 3)) return *end = s + 3, 1;
    char *e;
    strtod(s, &e);
    if (e == s) return 0;
    *end = e;
    return 1;
}

/* Returns 0 when text is valid, else -1 with the first problem (and its line) in msg. */
static inline int prom_check(const char *text, char *msg, size_t ml) {
    static prom_family fam[PROM_MAX_FAMILIES];
    static char *series[PROM_MAX_SERIES];
    static double bucket_last[PROM_MAX_SERIES];
    int nf = 0, ns = 0, rc = 0, lineno = 0;
    prom_family *cur = NULL;
    char line[4096], le_key[4096], prev_le_key[4096] = "";
    double prev_bucket = -1, inf_bucket[64] = {0};
    (void)bucket_last;
    int n_inf = 0;
    char inf_keys[64][256];
    size_t tl = strlen(text);
    if (tl && text[tl - 1] != '\n') return snprintf(msg, ml, "the text does not end in a newline"), -1;
    for (const char *p = text; *p && !rc; ) {
        const char *nl = strchr(p, '\n');
        size_t n = (size_t)(nl - p);
        lineno++;
        if (n >= sizeof line) return snprintf(msg, ml, "line %d too long", lineno), -1;
        memcpy(line, p, n);
        line[n] = '\0';
        p = nl + 1;
        if (!n) continue;
#define PROM_FAIL(...) (snprintf(msg, ml, __VA_ARGS__), rc = -1)
        if (line[0] == '#') {
            int help = !strncmp(line, "# HELP ", 7), type = !strncmp(line, "# TYPE ", 7);
            if (!help && !type) continue; /* a comment */
            const char *nm = line + 7;
            size_t len = strcspn(nm, " ");
            if (!prom_name_ok(nm, len, 1)) { PROM_FAIL("line %d: bad metric name: %.200s", lineno, line); break; }
            prom_family *f = prom_find(fam, nf, nm, len);
            if (!f) {
                if (nf == PROM_MAX_FAMILIES) { PROM_FAIL("too many families"); break; }
                f = &fam[nf++];
                memset(f, 0, sizeof *f);
                snprintf(f->name, sizeof f->name, "%.*s", (int)len, nm);
            }
            if (f->done) { PROM_FAIL("line %d: family %s resumed after another family", lineno, f->name); break; }
            if (cur && cur != f) cur->done = 1;
            cur = f;
            if (help) {
                if (f->help++) { PROM_FAIL("line %d: second HELP for %s", lineno, f->name); break; }
                if (nm[len] != ' ') { PROM_FAIL("line %d: HELP without text", lineno); break; }
            } else {
                if (f->type[0]) { PROM_FAIL("line %d: second TYPE for %s", lineno, f->name); break; }
                const char *t = nm + len + (nm[len] == ' ');
                static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
                int ok = 0;
                for (int i = 0; i < 5; i++) ok |= !strcmp(t, types[i]);
                if (!ok) { PROM_FAIL("line %d: unknown type '%.100s'", lineno, t); break; }
                snprintf(f->type, sizeof f->type, "%.15s", t);
            }
            continue;
        }
        /* a sample */
        size_t len = strcspn(line, "{ ");
        if (!prom_name_ok(line, len, 1)) { PROM_FAIL("line %d: bad sample name: %.200s", lineno, line); break; }
        prom_family *f = prom_find(fam, nf, line, len);
        const char *suffix = "";
        if (!f) {
            static const char *const sfx[] = {"_bucket", "_sum", "_count"};
            for (int i = 0; i < 3 && !f; i++) {
                size_t sl = strlen(sfx[i]);
                if (len > sl && !strncmp(line + len - sl, sfx[i], sl)) {
                    f = prom_find(fam, nf, line, len - sl);
                    if (f && (strcmp(f->type, "histogram") && strcmp(f->type, "summary"))) f = NULL;
                    if (f) suffix = sfx[i];
                }
            }
        } else if (!strcmp(f->type, "histogram")) {
            PROM_FAIL("line %d: histogram %s sample without _bucket/_sum/_count", lineno, f->name);
            break;
        }
        if (!f || !f->type[0]) { PROM_FAIL("line %d: sample of a family without TYPE: %.200s", lineno, line); break; }
        if (f->done) { PROM_FAIL("line %d: family %s resumed after another family", lineno, f->name); break; }
        if (cur && cur != f) cur->done = 1;
        cur = f;
        const char *q = line + len;
        int has_le = 0;
        char le[64] = "";
        size_t key_len = 0;
        le_key[0] = '\0';
        if (*q == '{') {
            q++;
            while (*q != '}') {
                size_t ln = strcspn(q, "=");
                if (!prom_name_ok(q, ln, 0) || q[ln] != '=' || q[ln + 1] != '"') {
                    PROM_FAIL("line %d: bad label: %.200s", lineno, line);
                    break;
                }
                int is_le = ln == 2 && !strncmp(q, "le", 2);
                const char *lstart = q;
                q += ln + 2;
                char val[256];
                size_t vl = 0;
                while (*q && *q != '"') {
                    if (*q == '\\') {
                        if (q[1] != '\\' && q[1] != '"' && q[1] != 'n') { PROM_FAIL("line %d: bad escape", lineno); break; }
                        q++;
                    }
                    if (vl + 1 < sizeof val) val[vl++] = *q;
                    q++;
                }
                if (rc) break;
                val[vl] = '\0';
                if (*q != '"') { PROM_FAIL("line %d: unterminated label value", lineno); break; }
                q++;
                if (is_le) has_le = 1, snprintf(le, sizeof le, "%.60s", val);
                else key_len += (size_t)snprintf(le_key + key_len, sizeof le_key - key_len, "%.*s;", (int)(q - lstart), lstart);
                if (*q == ',') q++;
                else if (*q != '}') { PROM_FAIL("line %d: expected , or } in labels", lineno); break; }
            }
            if (rc) break;
            q++;
        }
        if (*q != ' ') { PROM_FAIL("line %d: no space before the value: %.200s", lineno, line); break; }
        q++;
        const char *e;
        if (!prom_value_ok(q, &e)) { PROM_FAIL("line %d: bad value: %.200s", lineno, line); break; }
        if (*e == ' ') {
            char *te;
            strtoll(e + 1, &te, 10);
            if (te == e + 1 || *te) { PROM_FAIL("line %d: bad timestamp", lineno); break; }
        } else if (*e) { PROM_FAIL("line %d: junk after the value: %.200s", lineno, line); break; }
        double v = strtod(q, NULL);
        if (!strncmp(q, "+Inf", 4)) v = INFINITY;
        /* one series once */
        char *key = strndup(line, (size_t)(q - 1 - line));
        for (int i = 0; key && i < ns; i++)
            if (!strcmp(series[i], key)) { PROM_FAIL("line %d: series given twice: %.200s", lineno, key); break; }
        if (rc || !key || ns == PROM_MAX_SERIES) { free(key); if (!rc) PROM_FAIL("out of series slots"); break; }
        series[ns++] = key;
        /* histograms: cumulative buckets ending in +Inf, which _count equals */
        if (!strcmp(f->type, "histogram")) {
            char fk[512];
            snprintf(fk, sizeof fk, "%.127s|%.380s", f->name, le_key);
            if (!strcmp(suffix, "_bucket")) {
                if (!has_le) { PROM_FAIL("line %d: bucket without le", lineno); break; }
                if (strcmp(fk, prev_le_key)) prev_bucket = -1, snprintf(prev_le_key, sizeof prev_le_key, "%.511s", fk);
                if (v < prev_bucket) { PROM_FAIL("line %d: buckets not cumulative", lineno); break; }
                prev_bucket = v;
                if (!strcmp(le, "+Inf") && n_inf < 64) {
                    snprintf(inf_keys[n_inf], sizeof inf_keys[n_inf], "%.250s", fk);
                    inf_bucket[n_inf++] = v;
                }
            } else if (!strcmp(suffix, "_count")) {
                int found = 0;
                for (int i = 0; i < n_inf; i++)
                    if (!strcmp(inf_keys[i], fk)) {
                        found = 1;
                        if (inf_bucket[i] != v) { PROM_FAIL("line %d: _count %g but +Inf bucket %g", lineno, v, inf_bucket[i]); break; }
                    }
                if (!rc && !found && n_inf < 64) { PROM_FAIL("line %d: _count without a +Inf bucket", lineno); break; }
            }
        }
#undef PROM_FAIL
    }
    for (int i = 0; i < ns; i++) free(series[i]);
    return rc;
}

#endif
