/* task_check.c - see task_check.h. */
#include "task_check.h"

#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/task.h"
#include "engine/run.h"
#include "io/safetensors.h"
#include "ref_case.h"

static int check_file(const eng_model *m, eng_state *st, const eng_task *t, const char *path, int skip, float tol,
                      task_check_result *res, char *msg, size_t msg_len) {
    eng_err e = {0};
    eng_st_file *f;
    if (eng__st_open(path, &f, &e)) {
        snprintf(msg, msg_len, "%s", e.msg);
        return -1;
    }
    const eng_st_tensor *ids = eng__st_find(f, "input_ids"), *types = eng__st_find(f, "token_type_ids"),
                        *lens = eng__st_find(f, "seq_lens"), *lg = eng__st_find(f, "logits");
    int rc = -1;
    if (!ids || !types || !lens || !lg || lg->dtype != ENG_DT_F32) {
        snprintf(msg, msg_len, "%s: needs input_ids, token_type_ids, seq_lens and F32 logits", path);
        eng__st_close(f);
        return -1;
    }
    int n_seq = (int)lens->numel;
    int32_t *id = malloc(ids->nbytes), *ty = malloc(types->nbytes), *ln = malloc(lens->nbytes);
    float *want = malloc(lg->nbytes);
    eng_input *in = calloc((size_t)n_seq, sizeof *in);
    eng_task_out *outs = calloc((size_t)n_seq, sizeof *outs);
    eng_task_req req = {t, skip};
    if (!id || !ty || !ln || !want || !in || !outs) goto done;
    memcpy(id, ids->data, ids->nbytes);
    memcpy(ty, types->data, types->nbytes);
    memcpy(ln, lens->data, lens->nbytes);
    memcpy(want, lg->data, lg->nbytes);
    int off = 0;
    for (int s = 0; s < n_seq; s++) {
        in[s] = (eng_input){.ids = id + off, .type_ids = ty + off, .len = ln[s], .tasks = &req, .n_tasks = 1};
        off += ln[s];
    }
    if (eng_run(m, st, in, n_seq, outs, NULL, &e)) {
        snprintf(msg, msg_len, "%s: %s", path, e.msg);
        goto done;
    }
    size_t k = 0, total = (size_t)(lg->numel);
    float md = 0;
    for (int s = 0; s < n_seq; s++) {
        size_t n = (size_t)outs[s].n_rows * outs[s].num_labels;
        if (k + n > total) {
            snprintf(msg, msg_len, "%s: engine gives more logits than the reference (%zu)", path, total);
            eng_task_outs_free(outs, n_seq);
            goto done;
        }
        for (size_t j = 0; j < n; j++) {
            float d = fabsf(outs[s].logits[j] - want[k + j]);
            md = d > md || isnan(d) ? d : md;
            if (fabsf(want[k + j]) > res->max_logit) res->max_logit = fabsf(want[k + j]);
        }
        k += n;
    }
    eng_task_outs_free(outs, n_seq);
    if (k != total) {
        snprintf(msg, msg_len, "%s: engine gives %zu logits, the reference %zu", path, k, total);
        goto done;
    }
    if (md > res->max_diff) res->max_diff = md;
    if (!(md <= tol)) {
        snprintf(msg, msg_len, "%s: max |logit diff| %g > %g", path, md, tol);
        goto done;
    }
    res->files++;
    rc = 0;
done:
    free(id), free(ty), free(ln), free(want), free(in), free(outs);
    eng__st_close(f);
    return rc;
}

/* Optional "labels" in setup.json: the label names the head must report, in logit order. */
static int check_labels(const json_t *setup, const eng_task *t, const char *case_dir, char *msg, size_t msg_len) {
    json_t *want = json_object_get(setup, "labels");
    if (!json_is_array(want)) return 0;
    const eng_head *h = eng_task_head(t);
    if (!h || h->num_labels != (int)json_array_size(want)) {
        snprintf(msg, msg_len, "%s: head has %d labels, setup.json lists %zu", case_dir, h ? h->num_labels : 0,
                 json_array_size(want));
        return -1;
    }
    for (int j = 0; j < h->num_labels; j++) {
        const char *w = json_string_value(json_array_get(want, (size_t)j));
        const char *got = h->labels ? h->labels[j] : NULL;
        if (!w || !got || strcmp(w, got)) {
            snprintf(msg, msg_len, "%s: label %d is \"%s\", the reference says \"%s\"", case_dir, j,
                     got ? got : "(none)", w ? w : "(none)");
            return -1;
        }
    }
    return 0;
}

int task_check(const char *root, const char *case_dir, int threads, float tol, task_check_result *res, char *msg,
               size_t msg_len) {
    return task_check_sparse(root, case_dir, threads, tol, eng_task_default_params().sparse_threshold, res, msg, msg_len);
}

int task_check_sparse(const char *root, const char *case_dir, int threads, float tol, float sparse_threshold,
                      task_check_result *res, char *msg, size_t msg_len) {
    memset(res, 0, sizeof *res);
    ref_case rc_case;
    if (ref_case_open(&rc_case, root, case_dir, msg, msg_len)) return -1;
    json_t *setup = rc_case.setup;
    char p[PATH_MAX];
    int rc = -1;
    eng_model *m = NULL;
    eng_task *t = NULL;
    eng_state *st = NULL;
    eng_err e = {0};
    if (eng_model_load(rc_case.backbone, &m, &e)) {
        snprintf(msg, msg_len, "%s", e.msg);
        goto done;
    }
    eng_task_params tp = ref_case_params(&rc_case);
    tp.sparse_threshold = sparse_threshold;
    if (ref_case_load_task(&rc_case, m, &tp, &t, &e)) {
        snprintf(msg, msg_len, "%s: %s", case_dir, e.msg);
        goto done;
    }
    if (check_labels(setup, t, case_dir, msg, msg_len)) goto done;
    st = eng_state_new(threads);
    if (!st) {
        snprintf(msg, msg_len, "out of memory");
        goto done;
    }
    snprintf(p, sizeof p, "%s/expected", case_dir);
    DIR *d = opendir(p);
    if (!d) {
        snprintf(msg, msg_len, "%s: cannot open", p);
        goto done;
    }
    struct dirent *de;
    rc = 0;
    while (!rc && (de = readdir(d))) {
        int skip;
        if (sscanf(de->d_name, "skip%d.safetensors", &skip) != 1) continue;
        char fp[PATH_MAX + 300];
        snprintf(fp, sizeof fp, "%s/%s", p, de->d_name);
        rc = check_file(m, st, t, fp, skip, tol, res, msg, msg_len);
    }
    closedir(d);
    if (!rc && res->files == 0) {
        snprintf(msg, msg_len, "%s: no expected files", p);
        rc = -1;
    }
done:
    eng_state_free(st);
    eng_task_free(t);
    eng_model_free(m);
    ref_case_close(&rc_case);
    return rc;
}
