/* encoder_check.c - see encoder_check.h. */
#include "encoder_check.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "io/safetensors.h"

/* Largest |a - t|; *sum (when not NULL) gets the sum of |a - t| added. */
static float max_diff(const float *a, const eng_st_tensor *t, double *sum) {
    float *e = malloc((size_t)t->numel * sizeof *e), m = 0;
    if (!e || eng__convert_to_f32(t->dtype, t->data, (size_t)t->numel, e)) {
        free(e);
        return INFINITY;
    }
    for (int64_t i = 0; i < t->numel; i++) {
        float d = fabsf(a[i] - e[i]);
        m = d > m || isnan(d) ? d : m;
        if (sum) *sum += d;
    }
    free(e);
    return m;
}

static int check_case(const eng_model *m, eng_state *st, const char *path, float tol, float tol_alone,
                      encoder_check_result *res, double *sum, size_t *count, char *msg, size_t msg_len) {
    eng_err e = {0};
    eng_st_file *f;
    if (eng__st_open(path, &f, &e)) {
        snprintf(msg, msg_len, "%s", e.msg);
        return -1;
    }
    const eng_st_tensor *ids = eng__st_find(f, "input_ids"), *types = eng__st_find(f, "token_type_ids"),
                        *lens = eng__st_find(f, "seq_lens"), *hs = eng__st_find(f, "last_hidden_state"),
                        *cls = eng__st_find(f, "cls"), *po = eng__st_find(f, "pooler_output");
    if (!ids || !types || !lens || !hs || !cls) {
        snprintf(msg, msg_len, "%s: missing input_ids, token_type_ids, seq_lens, last_hidden_state or cls", path);
        eng__st_close(f);
        return -1;
    }
    int H = eng_model_config(m)->hidden, n_seq = (int)lens->numel, n_tok = (int)ids->numel, rc = -1;
    int32_t *id = malloc(ids->nbytes), *ty = malloc(types->nbytes), *ln = malloc(lens->nbytes);
    float *out = malloc(sizeof(float) * n_tok * H), *pooled = malloc(sizeof(float) * n_seq * H),
          *one = malloc(sizeof(float) * n_tok * H);
    if (!id || !ty || !ln || !out || !pooled || !one) {
        snprintf(msg, msg_len, "out of memory");
        goto done;
    }
    memcpy(id, ids->data, ids->nbytes);
    memcpy(ty, types->data, types->nbytes);
    memcpy(ln, lens->data, lens->nbytes);
    eng_batch b = {.n_seq = n_seq, .ids = id, .type_ids = ty, .seq_len = ln};
    if (eng_encode(m, st, &b, out, pooled, &e)) {
        snprintf(msg, msg_len, "%s: %s", path, e.msg);
        goto done;
    }
    float dh = max_diff(out, hs, sum), dp = max_diff(pooled, po ? po : cls, NULL);
    *count += (size_t)hs->numel;
    res->max_hidden = dh > res->max_hidden ? dh : res->max_hidden;
    res->max_pooled = dp > res->max_pooled ? dp : res->max_pooled;
    if (!(dh <= tol) || !(dp <= tol)) {
        snprintf(msg, msg_len, "%s: max |diff| hidden %g, pooled %g > %g", path, dh, dp, tol);
        goto done;
    }
    int off = 0;
    for (int s = 0; s < n_seq; s++) {
        eng_batch b1 = {.n_seq = 1, .ids = id + off, .type_ids = ty + off, .seq_len = &ln[s]};
        if (eng_encode(m, st, &b1, one + (size_t)off * H, NULL, &e)) {
            snprintf(msg, msg_len, "%s: %s", path, e.msg);
            goto done;
        }
        off += ln[s];
    }
    float da = 0;
    for (size_t i = 0; i < (size_t)n_tok * H; i++) {
        float d = fabsf(one[i] - out[i]);
        da = d > da || isnan(d) ? d : da;
    }
    res->max_alone = da > res->max_alone ? da : res->max_alone;
    if (!(da <= tol_alone)) {
        snprintf(msg, msg_len, "%s: packed and one-at-a-time differ by %g > %g", path, da, tol_alone);
        goto done;
    }
    res->cases++;
    res->sequences += n_seq;
    rc = 0;
done:
    free(id), free(ty), free(ln), free(out), free(pooled), free(one);
    eng__st_close(f);
    return rc;
}

int encoder_check(const char *model_dir, int threads, float tol, float tol_alone, encoder_check_result *res, char *msg,
                  size_t msg_len) {
    return encoder_check_params(model_dir, NULL, threads, tol, tol_alone, res, msg, msg_len);
}

int encoder_check_params(const char *model_dir, const eng_model_params *p, int threads, float tol, float tol_alone,
                         encoder_check_result *res, char *msg, size_t msg_len) {
    memset(res, 0, sizeof *res);
    eng_model *m;
    eng_err e = {0};
    eng_model_params dp = eng_model_default_params();
    double sum = 0;
    size_t count = 0;
    if (eng_model_load_params(model_dir, p ? p : &dp, &m, &e)) {
        snprintf(msg, msg_len, "%s", e.msg);
        return -1;
    }
    eng_state *st = eng_state_new(threads);
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/expected", model_dir);
    DIR *d = opendir(dir);
    int rc = st && d ? 0 : -1;
    if (rc) snprintf(msg, msg_len, "%s: cannot open (or out of memory)", dir);
    struct dirent *de;
    while (!rc && d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 12 || strcmp(de->d_name + n - 12, ".safetensors")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        rc = check_case(m, st, path, tol, tol_alone, res, &sum, &count, msg, msg_len);
    }
    if (d) closedir(d);
    res->mean_hidden = count ? sum / (double)count : 0;
    if (!rc && res->cases == 0) {
        snprintf(msg, msg_len, "%s: no expected cases", dir);
        rc = -1;
    }
    eng_state_free(st);
    eng_model_free(m);
    return rc;
}

int encoder_load_edited(const char *model_dir, const char *from, const char *to, eng_err *err) {
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char cfg[16384], out[16640];
    size_t n = fread(cfg, 1, sizeof cfg - 1, f);
    cfg[n] = 0;
    fclose(f);
    char *p = strstr(cfg, from);
    if (!p) return -1;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(p - cfg), cfg, to, p + strlen(from));
    eng_model *m = NULL;
    eng_model_params prm = eng_model_default_params();
    int rc = eng_model_load_config(model_dir, out, strlen(out), &prm, &m, err);
    eng_model_free(m);
    return rc;
}
