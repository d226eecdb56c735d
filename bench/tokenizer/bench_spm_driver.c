/* bench_spm_driver.c - adapterd's side of bench_spm.py: one SentencePiece tokenizer, timed passes on demand.
 *
 * Loads the tokenizer of a model folder from its SentencePiece file alone (spm.model, spiece.model or
 * sentencepiece.bpe.model, with tokenizer_config.json and config.json; a tokenizer.json next to it is
 * ignored, so T5 runs SentencePiece's rules as python3-sentencepiece does), reads the texts (one a
 * line), and then answers each "pass" line on stdin with one timed single-threaded pass over all texts:
 * "<seconds> <tokens>", tokens being the model's pieces (the template's special tokens not counted,
 * so the count is comparable with sentencepiece's). The first line it prints describes the load:
 * "ready <texts> <bytes> <load_s> <rss_growth_kB> <index_bytes>", index_bytes being the piece index's
 * size (eng__pieces_bytes). The Python side interleaves these passes with python3-sentencepiece's, so
 * both see the same machine load. Usage: bench_spm_driver MODEL_DIR TEXTS_FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tokenizer.h"
#include "tokenizer/tok_internal.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

/* Reads a whole file; NULL when absent or unreadable. */
static char *slurp_path(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got);
    fclose(f);
    *len = n;
    return buf;
}

static char *slurp(const char *dir, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return slurp_path(path, len);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bench_spm_driver MODEL_DIR TEXTS_FILE\n");
        return 2;
    }
    static const char *names[] = {"spm.model", "spiece.model", "sentencepiece.bpe.model"};
    eng_tok_files f;
    memset(&f, 0, sizeof f);
    char *model = NULL;
    for (int i = 0; i < 3 && !model; i++) {
        model = slurp(argv[1], names[i], &f.spm_model.len);
        f.spm_name = names[i];
    }
    if (!model) {
        fprintf(stderr, "bench_spm_driver: no SentencePiece model in %s\n", argv[1]);
        return 1;
    }
    f.spm_model.text = model;
    char *cfg = slurp(argv[1], "tokenizer_config.json", &f.tokenizer_config_json.len);
    char *mcfg = slurp(argv[1], "config.json", &f.config_json.len);
    f.tokenizer_config_json.text = cfg;
    f.config_json.text = mcfg;
    f.dir = argv[1];

    size_t tlen = 0;
    char *texts = slurp_path(argv[2], &tlen);
    if (!texts) {
        fprintf(stderr, "bench_spm_driver: cannot read %s\n", argv[2]);
        return 1;
    }
    size_t nt = 0;
    for (size_t i = 0; i < tlen; i++) nt += texts[i] == '\n';
    char **tx = malloc((nt + 1) * sizeof *tx);
    size_t *tl = malloc((nt + 1) * sizeof *tl);
    if (!tx || !tl) return 1;
    nt = 0;
    for (size_t s = 0, i = 0; i < tlen; i++)
        if (texts[i] == '\n') {
            if (i > s) tx[nt] = texts + s, tl[nt++] = i - s;
            s = i + 1;
        }

    long rss0 = rss_kb();
    double t0 = now();
    eng_tokenizer *tok;
    eng_err err;
    if (eng_tokenizer_load_files(&f, &tok, &err)) {
        fprintf(stderr, "bench_spm_driver: %s\n", err.msg);
        return 1;
    }
    double load_s = now() - t0;
    long grown = rss_kb() - rss0;
    free(model);
    free(cfg);
    free(mcfg);
    size_t bytes = 0;
    for (size_t i = 0; i < nt; i++) bytes += tl[i];
    printf("ready %zu %zu %.4f %ld %zu\n", nt, bytes, load_s, grown, eng__pieces_bytes(tok));
    fflush(stdout);

    eng_tok_params p = eng_tok_default_params();
    p.truncation = ENG_TOK_TRUNCATE_NONE; /* sentencepiece does not truncate */
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "pass", 4)) break;
        long tokens = 0;
        double a = now();
        for (size_t i = 0; i < nt; i++) {
            eng_tok_encoding e;
            if (eng_tok_encode(tok, tx[i], tl[i], NULL, 0, &p, &e, &err)) {
                fprintf(stderr, "bench_spm_driver: text %zu: %s\n", i, err.msg);
                return 1;
            }
            for (size_t k = 0; k < e.n; k++) tokens += !e.special_mask[k];
            eng_tok_encoding_free(&e);
        }
        printf("%.6f %ld\n", now() - a, tokens);
        fflush(stdout);
    }
    eng_tokenizer_free(tok);
    free(tx);
    free(tl);
    free(texts);
    return 0;
}
