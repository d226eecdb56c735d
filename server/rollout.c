/* rollout.c - the live comparison of a task's candidate version with its current one.
 *
 * A rollout (store.h: kept in the registry state, so every replica follows it) routes in two ways,
 * both decided at the front door where a request's tasks are acquired once (front.c, predict.c):
 *
 *     canary   a share of the requests that name no version is answered by the candidate, chosen by
 *              a bucket of the request (its "route_key", else a hash of its token ids: a retry lands
 *              the same); both versions are acquired up front and the unused one dropped once the
 *              token ids are known
 *     shadow   the candidate runs as one more task stream of the same job, on a sampled share of its
 *              inputs: on the same trunk pass (its shared lower layers are not recomputed), only its
 *              upper layers added; its answers are compared with the current version's here and never
 *              returned; the scheduler drops shadows first under load and holds them to max_share of a
 *              pass's rows (scheduler.c)
 *
 * This file keeps what was compared, per task and rollout, in a table of SRV_ROLLOUTS_MAX slots (the
 * least recently touched forgotten beyond): bounded memory and bounded /metrics cardinality whatever
 * the traffic. One mutex guards the table; it is held for a few hundred instructions per input
 * compared, after the pass, never around inference. The rules (promote after N compared with an
 * agreement of at least X and no more errors; abort on errors or latency) give one verdict per
 * rollout, which the server applies on libuv's pool (server.c) through store_rollout_finish: the
 * state write reaches the other replicas like an activation. */
#define _GNU_SOURCE
#include "rollout.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of an input's text kept with a disagreement (when --rollout-sample-text). */
#define SAMPLE_TEXT_MAX 160
/* Relative tolerance under which two regression values agree. */
#define REGRESSION_TOL 1e-3

typedef struct {
    char id[72];
    int input;
    char cur[96], cand[96];
    char text[SAMPLE_TEXT_MAX + 1];
} sample;

typedef struct {
    bool used;
    char task[160];
    char version[32];
    uint64_t id;
    int mode;
    int kind;                        /* proto_head_kind of the answers compared; -1: none yet */
    uint64_t touched;
    long long compared;
    double agree_sum;                /* per input 0..1 (a label: 0 or 1; entities, spans: their overlap) */
    double diff_sum, diff_max;       /* score difference: probabilities' largest |difference|, a regression's |difference| */
    uint64_t confusion[SRV_ROLLOUT_LABELS][SRV_ROLLOUT_LABELS]; /* [current's label][candidate's] */
    double rows[2];                  /* stream rows of the current version [0] and the candidate [1] in the passes compared */
    long long served[2], errors[2];  /* requests answered by each (canary), or answers built (shadow) */
    double ms[2];                    /* their time: a request's first byte to answer */
    long long dropped;               /* shadow inputs dropped under load or over max_share */
    bool verdict_given;
    sample *ring;                    /* (sample_max) */
    int ring_n, ring_next;
} slot;

struct srv_rollouts {
    pthread_mutex_t mu;
    slot slots[SRV_ROLLOUTS_MAX];
    uint64_t clock;
    int sample_max;
    bool sample_text;
};

srv_rollouts *srv__rollouts_new(int sample_max, bool sample_text) {
    srv_rollouts *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->sample_max = sample_max > 0 ? sample_max : 0;
    t->sample_text = sample_text;
    return t;
}

void srv__rollouts_free(srv_rollouts *t) {
    if (!t) return;
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) free(t->slots[i].ring);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

uint32_t srv__rollout_bucket(const char *route_key, size_t key_len, const int32_t *const *ids, const size_t *lens, int n) {
    uint64_t h = 1469598103934665603ull;
    if (route_key) {
        for (size_t i = 0; i < key_len; i++) h = (h ^ (unsigned char)route_key[i]) * 1099511628211ull;
    } else {
        for (int s = 0; s < n; s++)
            for (size_t i = 0; i < lens[s]; i++) {
                uint32_t v = (uint32_t)ids[s][i];
                for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
            }
    }
    h ^= h >> 29; /* FNV's low bits are weak for short keys: fold the high ones in */
    return (uint32_t)(h % 10000u);
}

/* The slot of task's rollout ro, made (the least recently touched reused) when missing. mu held. */
static slot *slot_of(srv_rollouts *t, const char *task, const store_rollout *ro, bool make) {
    slot *lru = NULL;
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        slot *s = &t->slots[i];
        if (s->used && s->id == ro->id && !strcmp(s->task, task)) {
            s->touched = ++t->clock;
            return s;
        }
        if (!s->used) {
            if (!lru || lru->used) lru = s;
        } else if (!lru || (lru->used && s->touched < lru->touched)) {
            lru = s;
        }
    }
    if (!make || !lru) return NULL;
    sample *ring = lru->ring;
    memset(lru, 0, sizeof *lru);
    lru->ring = ring;
    lru->used = true;
    snprintf(lru->task, sizeof lru->task, "%s", task);
    snprintf(lru->version, sizeof lru->version, "%s", ro->version);
    lru->id = ro->id;
    lru->mode = ro->mode;
    lru->kind = -1;
    lru->touched = ++t->clock;
    if (!lru->ring && t->sample_max) lru->ring = calloc((size_t)t->sample_max, sizeof *lru->ring);
    return lru;
}

/* Largest |difference| of two probability vectors of n labels (0 when either is missing). */
static double max_abs_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int c = 0; a && b && c < n; c++) {
        double d = fabs((double)a[c] - b[c]);
        if (d > m) m = d; /* as fmax: a NaN is passed over (fmax's reduction crashed aarch64 GCC 12) */
    }
    return m;
}

/* Overlap of two spans [a0, a1) and [b0, b1) as F1 of their lengths (1: the same span). */
static double span_f1(int a0, int a1, int b0, int b1) {
    if (a0 == b0 && a1 == b1) return 1;
    int lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1, inter = hi > lo ? hi - lo : 0;
    int la = a1 - a0, lb = b1 - b0;
    return la + lb > 0 ? 2.0 * inter / (la + lb) : 0;
}

/* Entities that match exactly (name, span, sequence) as F1 over both lists (1: the same entities). */
static double entities_f1(const proto_task_result *a, const proto_task_result *b) {
    if (!a->n_entities && !b->n_entities) return 1;
    int match = 0;
    for (int i = 0; i < a->n_entities; i++)
        for (int k = 0; k < b->n_entities; k++) {
            const proto_entity *x = &a->entities[i], *y = &b->entities[k];
            if (x->start == y->start && x->end == y->end && x->seq == y->seq && x->name && y->name && !strcmp(x->name, y->name)) {
                match++;
                break;
            }
        }
    return 2.0 * match / (a->n_entities + b->n_entities);
}

/* A short text of an answer for the sample: its label, value, entities or span. */
static void summarize(const proto_task_result *r, char *out, size_t n) {
    switch (r->kind) {
    case PROTO_HEAD_CLASSIFICATION:
        snprintf(out, n, "%s (%.3f)", r->labels && r->label >= 0 && r->label < r->n_labels ? r->labels[r->label] : "?", r->score);
        break;
    case PROTO_HEAD_REGRESSION: snprintf(out, n, "%.6g", r->value); break;
    case PROTO_HEAD_TAGGING:
        if (r->aggregation == PROTO_AGG_TOKENS) snprintf(out, n, "%d tags", r->n_tags);
        else snprintf(out, n, "%d entities%s%s", r->n_entities, r->n_entities ? ", first " : "",
                      r->n_entities && r->entities[0].name ? r->entities[0].name : "");
        break;
    case PROTO_HEAD_QA: snprintf(out, n, r->has_answer ? "[%d, %d)" : "no answer", r->ans_start, r->ans_end); break;
    default: snprintf(out, n, "(multi-label)"); break;
    }
}

void srv__rollout_compare(srv_rollouts *t, const char *task, const store_rollout *ro, const proto_task_result *cur,
                          const proto_task_result *cand, const char *id, int input, const char *text, size_t text_len,
                          double rows_cur, double rows_cand) {
    double agree = 0, diff = 0;
    int lc = -1, ld = -1;
    switch (cur->kind) {
    case PROTO_HEAD_CLASSIFICATION:
        agree = cur->label == cand->label;
        diff = max_abs_diff(cur->scores, cand->scores, cur->n_labels == cand->n_labels ? cur->n_labels : 0);
        lc = cur->label, ld = cand->label;
        break;
    case PROTO_HEAD_MULTILABEL: {
        /* the first label the two decide differently ends it (written as a search: aarch64 GCC 12's
         * vectorizer crashed on the &= reduction this was) */
        int same = 1;
        for (int c = 0; same && cur->scores && cand->scores && c < cur->n_labels && c < cand->n_labels; c++)
            if ((cur->scores[c] > 0.5f) != (cand->scores[c] > 0.5f)) same = 0;
        agree = same;
        diff = max_abs_diff(cur->scores, cand->scores, cur->n_labels == cand->n_labels ? cur->n_labels : 0);
        break;
    }
    case PROTO_HEAD_REGRESSION:
        diff = fabs((double)cur->value - cand->value);
        agree = diff <= REGRESSION_TOL * fmax(1.0, fabs(cur->value));
        break;
    case PROTO_HEAD_TAGGING:
        if (cur->aggregation == PROTO_AGG_TOKENS) {
            int n = cur->n_tags < cand->n_tags ? cur->n_tags : cand->n_tags, same = 0;
            for (int i = 0; i < n; i++) same += cur->tags[i].label == cand->tags[i].label;
            agree = cur->n_tags + cand->n_tags ? 2.0 * same / (cur->n_tags + cand->n_tags) : 1;
        } else {
            agree = entities_f1(cur, cand);
        }
        diff = 1 - agree;
        break;
    case PROTO_HEAD_QA:
        agree = cur->has_answer != cand->has_answer ? 0
                : cur->has_answer                 ? span_f1(cur->ans_start, cur->ans_end, cand->ans_start, cand->ans_end)
                                                  : 1;
        diff = fabs((double)cur->ans_score - cand->ans_score);
        break;
    }
    pthread_mutex_lock(&t->mu);
    slot *s = slot_of(t, task, ro, true);
    s->kind = (int)cur->kind;
    s->compared++;
    s->agree_sum += agree;
    s->diff_sum += diff;
    if (diff > s->diff_max) s->diff_max = diff;
    s->rows[0] += rows_cur, s->rows[1] += rows_cand;
    s->served[0]++, s->served[1]++; /* both answers built */
    if (cur->kind == PROTO_HEAD_CLASSIFICATION && lc >= 0 && ld >= 0) {
        s->confusion[lc < SRV_ROLLOUT_LABELS ? lc : SRV_ROLLOUT_LABELS - 1][ld < SRV_ROLLOUT_LABELS ? ld : SRV_ROLLOUT_LABELS - 1]++;
    } else if (cur->kind == PROTO_HEAD_TAGGING && cur->aggregation == PROTO_AGG_TOKENS) {
        for (int i = 0; i < cur->n_tags && i < cand->n_tags; i++) {
            int a = cur->tags[i].label, b = cand->tags[i].label;
            if (a >= 0 && b >= 0)
                s->confusion[a < SRV_ROLLOUT_LABELS ? a : SRV_ROLLOUT_LABELS - 1][b < SRV_ROLLOUT_LABELS ? b : SRV_ROLLOUT_LABELS - 1]++;
        }
    }
    if (agree < 1 && s->ring) {
        sample *x = &s->ring[s->ring_next];
        s->ring_next = (s->ring_next + 1) % t->sample_max;
        if (s->ring_n < t->sample_max) s->ring_n++;
        snprintf(x->id, sizeof x->id, "%s", id ? id : "");
        x->input = input;
        summarize(cur, x->cur, sizeof x->cur);
        summarize(cand, x->cand, sizeof x->cand);
        x->text[0] = '\0';
        if (t->sample_text && text) {
            size_t n = text_len < SAMPLE_TEXT_MAX ? text_len : SAMPLE_TEXT_MAX;
            while (n > 0 && n < text_len && ((unsigned char)text[n] & 0xC0) == 0x80) n--; /* whole UTF-8 characters */
            memcpy(x->text, text, n);
            x->text[n] = '\0';
        }
    }
    pthread_mutex_unlock(&t->mu);
}

void srv__rollout_served(srv_rollouts *t, const char *task, const store_rollout *ro, bool candidate, bool error, double ms) {
    pthread_mutex_lock(&t->mu);
    slot *s = slot_of(t, task, ro, true);
    s->served[candidate]++;
    s->errors[candidate] += error;
    if (!error && ms >= 0) s->ms[candidate] += ms;
    pthread_mutex_unlock(&t->mu);
}

void srv__rollout_dropped(srv_rollouts *t, const char *task, const store_rollout *ro, int inputs) {
    pthread_mutex_lock(&t->mu);
    slot *s = slot_of(t, task, ro, true);
    s->dropped += inputs;
    pthread_mutex_unlock(&t->mu);
}

/* The figures the API, the metrics and the rules read from a slot. mu held. */
typedef struct {
    double agreement;        /* -1: none compared */
    double err[2];           /* error rates (0 with nothing served) */
    double lat[2];           /* mean ms (canary), or rows' share of the pass (shadow) */
    double latency_ratio;    /* candidate over current; 0: not known */
    long long seen;          /* what the rules count: inputs compared (shadow), candidate's requests (canary) */
} figures;

static figures figures_of(const slot *s) {
    figures f = {.agreement = s->compared ? s->agree_sum / (double)s->compared : -1};
    for (int v = 0; v < 2; v++) {
        f.err[v] = s->served[v] ? (double)s->errors[v] / (double)s->served[v] : 0;
        if (s->mode == STORE_ROLLOUT_SHADOW) f.lat[v] = s->rows[0] + s->rows[1] > 0 ? s->rows[v] / (s->rows[0] + s->rows[1]) : 0;
        else f.lat[v] = s->served[v] - s->errors[v] > 0 ? s->ms[v] / (double)(s->served[v] - s->errors[v]) : 0;
    }
    f.latency_ratio = f.lat[0] > 0 && f.lat[1] > 0 ? f.lat[1] / f.lat[0] : 0;
    f.seen = s->mode == STORE_ROLLOUT_SHADOW ? s->compared : s->served[1];
    return f;
}

int srv__rollout_verdict(srv_rollouts *t, const char *task, const store_rollout *ro, char *why, size_t wn) {
    if (!ro->promote_after && !ro->abort_error_rate && !ro->abort_latency_ratio) return 0;
    int v = 0;
    pthread_mutex_lock(&t->mu);
    slot *s = slot_of(t, task, ro, false);
    if (s && !s->verdict_given) {
        figures f = figures_of(s);
        long long min = ro->rule_min ? ro->rule_min : ro->promote_after ? ro->promote_after : 100;
        if (f.seen >= min && ro->abort_error_rate > 0 && f.err[1] > ro->abort_error_rate) {
            v = -1;
            snprintf(why, wn, "error rate %.4f over %g after %lld inputs", f.err[1], ro->abort_error_rate, f.seen);
        } else if (f.seen >= min && ro->abort_latency_ratio > 0 && f.latency_ratio > ro->abort_latency_ratio) {
            v = -1;
            snprintf(why, wn, "latency %.3f x the current version's, over %g, after %lld inputs", f.latency_ratio,
                     ro->abort_latency_ratio, f.seen);
        } else if (ro->promote_after > 0 && f.seen >= ro->promote_after && f.err[1] <= f.err[0] &&
                   (f.agreement < 0 || f.agreement >= ro->promote_agreement)) {
            v = 1;
            snprintf(why, wn, "agreement %.4f >= %g after %lld inputs, error rate %.4f <= %.4f", f.agreement < 0 ? 1 : f.agreement,
                     ro->promote_agreement, f.seen, f.err[1], f.err[0]);
        }
        if (v) s->verdict_given = true;
    }
    pthread_mutex_unlock(&t->mu);
    return v;
}

void srv__rollout_summary(srv_rollouts *t, const char *task, const store_rollout *ro, long long *compared, double *agreement) {
    pthread_mutex_lock(&t->mu);
    const slot *s = slot_of(t, task, ro, false);
    *compared = s ? s->compared : 0;
    *agreement = s && s->compared ? s->agree_sum / (double)s->compared : -1;
    pthread_mutex_unlock(&t->mu);
}

json_t *srv__rollout_comparison(srv_rollouts *t, const char *task, const store_rollout *ro, bool with_sample) {
    pthread_mutex_lock(&t->mu);
    slot empty = {.mode = ro->mode, .kind = -1};
    const slot *s = slot_of(t, task, ro, false);
    if (!s) s = &empty;
    figures f = figures_of(s);
    json_t *conf = json_array();
    for (int a = 0; conf && a < SRV_ROLLOUT_LABELS; a++)
        for (int b = 0; b < SRV_ROLLOUT_LABELS; b++)
            if (s->confusion[a][b])
                json_array_append_new(conf, json_pack("{s:i,s:i,s:I}", "current", a, "candidate", b, "count",
                                                      (json_int_t)s->confusion[a][b]));
    double lsum = f.lat[0] + f.lat[1];
    json_t *o = json_pack(
        "{s:I,s:o,s:o,s:f,s:o,s:{s:I,s:I},s:{s:I,s:I},s:{s:f,s:f},s:{s:f,s:f},s:o,s:I}", "compared", (json_int_t)s->compared,
        "agreement", f.agreement >= 0 ? json_real(f.agreement) : json_null(), "mean_score_diff",
        s->compared ? json_real(s->diff_sum / (double)s->compared) : json_null(), "max_score_diff", s->diff_max, "confusion",
        conf ? conf : json_array(), "requests", "current", (json_int_t)s->served[0], "candidate", (json_int_t)s->served[1],
        "errors", "current", (json_int_t)s->errors[0], "candidate", (json_int_t)s->errors[1], "error_rate", "current", f.err[0],
        "candidate", f.err[1], "latency_share", "current", lsum > 0 ? f.lat[0] / lsum : 0, "candidate", lsum > 0 ? f.lat[1] / lsum : 0,
        "latency_ratio",
        f.latency_ratio > 0 ? json_real(f.latency_ratio) : json_null(), "shadow_dropped", (json_int_t)s->dropped);
    if (o && s->kind == PROTO_HEAD_REGRESSION)
        json_object_set_new(o, "mean_abs_diff", s->compared ? json_real(s->diff_sum / (double)s->compared) : json_null());
    if (o && s->mode == STORE_ROLLOUT_CANARY) /* the requests' mean time, first byte to answer */
        json_object_set_new(o, "mean_ms", json_pack("{s:o,s:o}", "current", f.lat[0] > 0 ? json_real(f.lat[0]) : json_null(),
                                                    "candidate", f.lat[1] > 0 ? json_real(f.lat[1]) : json_null()));
    if (o && s->kind >= 0) json_object_set_new(o, "head", json_string(proto_head_kind_name((proto_head_kind)s->kind)));
    if (o && with_sample) {
        json_t *a = json_array();
        int n = s->ring_n, cap = t->sample_max;
        for (int k = 0; a && k < n; k++) {
            const sample *x = &s->ring[(s->ring_next - n + k + cap) % cap];
            json_t *e = json_pack("{s:s,s:i,s:s,s:s}", "request_id", x->id, "input", x->input, "current", x->cur, "candidate", x->cand);
            if (e && t->sample_text) json_object_set_new(e, "text", json_string(x->text));
            json_array_append_new(a, e);
        }
        json_object_set_new(o, "disagreements", a ? a : json_array());
        json_object_set_new(o, "sample", json_pack("{s:i,s:b}", "max", t->sample_max, "text", t->sample_text));
    }
    pthread_mutex_unlock(&t->mu);
    return o;
}

/* ---- /metrics ---- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} mbuf;

static void mput(mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mput(mbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = b->cap * 2 + (size_t)k + 1;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = nc;
    }
}

int srv__rollouts_metrics(srv_rollouts *t, char **text, size_t *len) {
    mbuf b = {.p = *text, .n = *len, .cap = *len + 1};
    static const char *const help =
        "# HELP adapterd_rollout_info A rollout compared on this replica (task, candidate version, mode).\n"
        "# TYPE adapterd_rollout_info gauge\n";
    mput(&b, "%s", help);
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        if (s->used) mput(&b, "adapterd_rollout_info{task=\"%s\",candidate=\"%s\",mode=\"%s\"} 1\n", s->task, s->version,
                          store_rollout_mode_name(s->mode));
    }
    mput(&b, "# HELP adapterd_rollout_compared_total Inputs answered by both versions and compared.\n"
             "# TYPE adapterd_rollout_compared_total counter\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        if (s->used) mput(&b, "adapterd_rollout_compared_total{task=\"%s\",candidate=\"%s\"} %lld\n", s->task, s->version, s->compared);
    }
    mput(&b, "# HELP adapterd_rollout_agreement Mean agreement of the compared answers (labels; entities, spans: overlap; "
             "regression: within 0.1%%).\n# TYPE adapterd_rollout_agreement gauge\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        if (s->used && s->compared)
            mput(&b, "adapterd_rollout_agreement{task=\"%s\",candidate=\"%s\"} %.6g\n", s->task, s->version,
                 s->agree_sum / (double)s->compared);
    }
    mput(&b, "# HELP adapterd_rollout_score_diff Score difference of the compared answers (probabilities' largest, or "
             "regression's absolute), by stat.\n# TYPE adapterd_rollout_score_diff gauge\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        if (s->used && s->compared)
            mput(&b, "adapterd_rollout_score_diff{task=\"%s\",candidate=\"%s\",stat=\"mean\"} %.6g\n"
                     "adapterd_rollout_score_diff{task=\"%s\",candidate=\"%s\",stat=\"max\"} %.6g\n",
                 s->task, s->version, s->diff_sum / (double)s->compared, s->task, s->version, s->diff_max);
    }
    mput(&b, "# HELP adapterd_rollout_confusion_total Compared labels, by the current version's label index and the "
             "candidate's (indexes above 15 counted as 15).\n# TYPE adapterd_rollout_confusion_total counter\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        for (int a = 0; s->used && a < SRV_ROLLOUT_LABELS; a++)
            for (int c = 0; c < SRV_ROLLOUT_LABELS; c++)
                if (s->confusion[a][c])
                    mput(&b, "adapterd_rollout_confusion_total{task=\"%s\",candidate=\"%s\",current_label=\"%d\","
                             "candidate_label=\"%d\"} %llu\n",
                         s->task, s->version, a, c, (unsigned long long)s->confusion[a][c]);
    }
    static const char *const vname[2] = {"current", "candidate"};
    mput(&b, "# HELP adapterd_rollout_requests_total Requests answered by each version (canary), or shadow answers built.\n"
             "# TYPE adapterd_rollout_requests_total counter\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++)
        for (int v = 0; t->slots[i].used && v < 2; v++)
            mput(&b, "adapterd_rollout_requests_total{task=\"%s\",candidate=\"%s\",version=\"%s\"} %lld\n", t->slots[i].task,
                 t->slots[i].version, vname[v], t->slots[i].served[v]);
    mput(&b, "# HELP adapterd_rollout_errors_total Failed requests by the version that ran them.\n"
             "# TYPE adapterd_rollout_errors_total counter\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++)
        for (int v = 0; t->slots[i].used && v < 2; v++)
            mput(&b, "adapterd_rollout_errors_total{task=\"%s\",candidate=\"%s\",version=\"%s\"} %lld\n", t->slots[i].task,
                 t->slots[i].version, vname[v], t->slots[i].errors[v]);
    mput(&b, "# HELP adapterd_rollout_latency_share Each version's share of the latency (shadow: of the pass's rows of the "
             "task; canary: of the mean request time of both).\n# TYPE adapterd_rollout_latency_share gauge\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        if (!s->used) continue;
        figures f = figures_of(s);
        double sum = f.lat[0] + f.lat[1];
        for (int v = 0; v < 2; v++)
            mput(&b, "adapterd_rollout_latency_share{task=\"%s\",candidate=\"%s\",version=\"%s\"} %.6g\n", s->task, s->version,
                 vname[v], sum > 0 ? f.lat[v] / sum : 0);
    }
    mput(&b, "# HELP adapterd_rollout_shadow_dropped_total Shadow inputs dropped under load or over max_share.\n"
             "# TYPE adapterd_rollout_shadow_dropped_total counter\n");
    for (int i = 0; i < SRV_ROLLOUTS_MAX; i++) {
        const slot *s = &t->slots[i];
        if (s->used && s->mode == STORE_ROLLOUT_SHADOW)
            mput(&b, "adapterd_rollout_shadow_dropped_total{task=\"%s\",candidate=\"%s\"} %lld\n", s->task, s->version, s->dropped);
    }
    pthread_mutex_unlock(&t->mu);
    if (b.oom) {
        /* the text as it was: cut back to its length (realloc may have moved it) */
        if (b.p) b.p[*len] = '\0';
        *text = b.p;
        return -1;
    }
    *text = b.p, *len = b.n;
    return 0;
}
