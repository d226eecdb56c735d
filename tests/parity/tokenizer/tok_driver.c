/* tok_driver.c - batch front end of the tokenizer for the parity test (not installed).
 *
 * Reads lines "HEX(text)[\tHEX(pair)[\tMAX_LENGTH\tSTRATEGY]]" (hex so any byte, newline or NUL can
 * be passed), tokenizes each with eng_tok_encode and prints one JSON line per input:
 * {"ids":[...],"type_ids":[...],"offsets":[s0,e0,s1,e1,...]} or {"error":"STATUS_NAME"}.
 * A missing pair field means no pair; "-" means no pair when a max length follows. MAX_LENGTH 0
 * with STRATEGY none disables truncation. A line "D\tSKIP\tID,ID,..." decodes the ids instead
 * (eng_tok_decode, SKIP 1 leaves special tokens out) and prints {"text":"HEX"} or {"error":"NAME"}.
 * Usage: tok_driver MODEL_DIR < lines > results */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes hex in place; returns the byte count or -1. */
static long unhex(char *s, size_t n) {
    if (n % 2) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int a = hexval((unsigned char)s[2 * i]), b = hexval((unsigned char)s[2 * i + 1]);
        if (a < 0 || b < 0) return -1;
        s[i] = (char)(a * 16 + b);
    }
    return (long)(n / 2);
}

/* "D\tSKIP\tIDS": the ids decoded, as hex. */
static void decode_line(const eng_tokenizer *tok, int skip, char *ids_s) {
    size_t cap = strlen(ids_s) + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    for (char *p = ids_s, *e; ids && *p; p = *e ? e + 1 : e) {
        ids[n++] = (int32_t)strtol(p, &e, 10);
        if (e == p) break;
    }
    char *text = NULL;
    size_t len = 0;
    int bad = -1;
    int rc = ids ? eng_tok_decode(tok, ids, (int)n, skip != 0, &text, &len, &bad) : ENG_NO_MEMORY;
    if (rc) printf("{\"error\":\"%s\"}\n", eng_status_name(rc));
    else {
        fputs("{\"text\":\"", stdout);
        for (size_t i = 0; i < len; i++) printf("%02x", (unsigned char)text[i]);
        fputs("\"}\n", stdout);
    }
    free(text), free(ids);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tok_driver MODEL_DIR < lines\n");
        return 2;
    }
    eng_err err = {0};
    eng_tokenizer *tok;
    if (eng_tokenizer_load(argv[1], &tok, &err)) {
        fprintf(stderr, "tok_driver: %s\n", err.msg);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        if (n && line[n - 1] == '\n') line[--n] = '\0';
        char *f[4] = {line, NULL, NULL, NULL};
        int nf = 1;
        for (char *p = line; *p && nf < 4; p++)
            if (*p == '\t') *p = '\0', f[nf++] = p + 1;
        if (!strcmp(f[0], "D") && nf == 3) {
            decode_line(tok, atoi(f[1]), f[2]);
            continue;
        }
        eng_tok_params prm = eng_tok_default_params();
        prm.truncation = ENG_TOK_TRUNCATE_NONE;
        long tl = unhex(f[0], strlen(f[0]));
        const char *pair = NULL;
        long pl = 0;
        if (nf > 1 && strcmp(f[1], "-")) {
            pl = unhex(f[1], strlen(f[1]));
            pair = f[1];
        }
        if (nf > 3) {
            prm.max_length = atoi(f[2]);
            if (!strcmp(f[3], "longest_first")) prm.truncation = ENG_TOK_TRUNCATE_LONGEST_FIRST;
            else if (!strcmp(f[3], "only_first")) prm.truncation = ENG_TOK_TRUNCATE_ONLY_FIRST;
            else if (!strcmp(f[3], "only_second")) prm.truncation = ENG_TOK_TRUNCATE_ONLY_SECOND;
        }
        if (tl < 0 || pl < 0) {
            fprintf(stderr, "tok_driver: line %ld: bad hex\n", lineno);
            return 2;
        }
        eng_tok_encoding enc;
        if (eng_tok_encode(tok, f[0], (size_t)tl, pair, (size_t)pl, &prm, &enc, &err)) {
            printf("{\"error\":\"%s\"}\n", eng_status_name(err.code));
            continue;
        }
        fputs("{\"ids\":[", stdout);
        for (size_t i = 0; i < enc.n; i++) printf("%s%d", i ? "," : "", enc.ids[i]);
        fputs("],\"type_ids\":[", stdout);
        for (size_t i = 0; i < enc.n; i++) printf("%s%d", i ? "," : "", enc.type_ids[i]);
        fputs("],\"offsets\":[", stdout);
        for (size_t i = 0; i < enc.n; i++) printf("%s%d,%d", i ? "," : "", enc.offsets[2 * i], enc.offsets[2 * i + 1]);
        fputs("]}\n", stdout);
        eng_tok_encoding_free(&enc);
    }
    free(line);
    eng_tokenizer_free(tok);
    return 0;
}
