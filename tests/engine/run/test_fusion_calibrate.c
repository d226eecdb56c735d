/* test_fusion_calibrate.c - AdapterFusion calibration (engine/run/fusion_calibrate.c) and the saved
 * pruning it writes, applied on load (engine/task/load_fusion.c).
 *
 * The reference fixtures carry `fusion_mean_attn` (n_fusion_layers, N): the mean softmax weight each
 * fused adapter receives over all valid tokens, computed by the PyTorch oracle. Calibration on the
 * same inputs must reproduce it (1e-5), and the pruning file must survive a reload. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/task.h"
#include "engine/fusion.h"
#include "engine/run.h"
#include "io/safetensors.h"
#include "io/tensor_file.h"
#include "math/blas.h"
#include "ref_case.h"
#include "test_tmp.h"

static void load_case_p(const char *name, eng_model **m, eng_task **t, const char *fusion_dir_override, int keep_pruned) {
    char dir[PATH_MAX], msg[512];
    snprintf(dir, sizeof dir, "%s/adapters/bert-tiny/%s", ADAPTERD_FIXTURES, name);
    ref_case c;
    cr_assert_eq(ref_case_open(&c, ADAPTERD_FIXTURES, dir, msg, sizeof msg), 0, "%s", msg);
    eng_err e = {0};
    cr_assert_eq(eng_model_load(c.backbone, m, &e), 0, "%s", e.msg);
    eng_task_params p = ref_case_params(&c);
    if (fusion_dir_override) p.fusion_dir = fusion_dir_override;
    p.keep_pruned = keep_pruned;
    cr_assert_eq(ref_case_load_task(&c, *m, &p, t, &e), 0, "%s", e.msg);
    ref_case_close(&c);
}

static void load_case(const char *name, eng_model **m, eng_task **t, const char *fusion_dir_override) {
    load_case_p(name, m, t, fusion_dir_override, 0);
}

Test(fusion_calibrate, calibration_matches_reference_attention) {
    const char *cases[] = {"fusion_dynamic_n3", "fusion_static_n4", "fusion_dynamic_n8"};
    for (int c = 0; c < 3; c++) {
        eng_model *m;
        eng_task *t;
        load_case(cases[c], &m, &t, NULL);
        char p[1200];
        snprintf(p, sizeof p, "%s/adapters/bert-tiny/%s/expected/skip0.safetensors", ADAPTERD_FIXTURES, cases[c]);
        eng_st_file *f;
        eng_err e = {0};
        cr_assert_eq(eng__st_open(p, &f, &e), 0, "%s", e.msg);
        const eng_st_tensor *ids = eng__st_find(f, "input_ids"), *lens = eng__st_find(f, "seq_lens"),
                            *ty = eng__st_find(f, "token_type_ids"), *ma = eng__st_find(f, "fusion_mean_attn");
        cr_assert(ids && lens && ty && ma, "%s lacks inputs or fusion_mean_attn", p);
        int n_seq = (int)lens->numel, L = eng_model_config(m)->n_layers;
        const char *const *names;
        int N = eng_task_fusion_children(t, &names);
        cr_assert_eq(N, (int)ma->shape[1]);
        const int32_t *id = ids->data, *ln = lens->data, *tt = ty->data;
        eng_input in[16];
        int off = 0;
        for (int s = 0; s < n_seq; s++) {
            in[s] = (eng_input){.ids = id + off, .type_ids = tt + off, .len = ln[s]};
            off += ln[s];
        }
        double *mean = calloc((size_t)L * N, sizeof *mean);
        eng_state *st = eng_state_new(2);
        cr_assert_eq(eng_fusion_calibrate(m, st, t, in, n_seq, mean, &e), 0, "%s", e.msg);
        const float *want = ma->data;
        for (int l = 0; l < (int)ma->shape[0]; l++)
            for (int i = 0; i < N; i++)
                cr_assert_float_eq(mean[(size_t)l * N + i], want[(size_t)l * N + i], 1e-5, "%s layer %d adapter %d: %g vs %g",
                                   cases[c], l, i, mean[(size_t)l * N + i], want[(size_t)l * N + i]);
        /* choose k = 2 and check it takes the two largest totals */
        uint8_t keep[16];
        eng_fusion_choose(mean, L, N, 2, keep);
        int kept = 0;
        double min_kept = 1e9, max_dropped = -1;
        for (int i = 0; i < N; i++) {
            double tot = 0;
            for (int l = 0; l < L; l++) tot += mean[(size_t)l * N + i];
            if (keep[i]) kept++, min_kept = tot < min_kept ? tot : min_kept;
            else max_dropped = tot > max_dropped ? tot : max_dropped;
        }
        cr_assert_eq(kept, 2);
        cr_assert_geq(min_kept, max_dropped);
        free(mean);
        eng_state_free(st);
        eng__st_close(f);
        eng_task_free(t);
        eng_model_free(m);
    }
}

Test(fusion_calibrate, saved_pruning_is_applied_on_load_and_changes_outputs) {
    /* copy the fusion folder to a temp dir, prune to 1 of 3, reload, compare outputs */
    char tmp[1024];
    cr_assert(mkdtemp(test_tmp_template(tmp, sizeof tmp, "prune")));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/adapters/bert-tiny/fusion_dynamic_n3/fusion/* %s/", ADAPTERD_FIXTURES, tmp);
    cr_assert_eq(system(cmd), 0);
    eng_model *m;
    eng_task *t;
    load_case("fusion_dynamic_n3", &m, &t, tmp);
    const char *const *names;
    int N = eng_task_fusion_children(t, &names);
    cr_assert_eq(N, 3);
    int32_t ids[] = {101, 17, 400, 23, 9, 102}, len = 6;
    eng_task_req req = {t, 0};
    eng_input in = {.ids = ids, .len = len, .tasks = &req, .n_tasks = 1};
    eng_state *st = eng_state_new(2);
    eng_task_out full, pruned, reloaded;
    eng_err e = {0};
    cr_assert_eq(eng_run(m, st, &in, 1, &full, NULL, &e), 0, "%s", e.msg);
    uint8_t keep[3] = {0, 1, 0};
    double mean[64] = {0};
    cr_assert_eq(eng_task_prune_fusion(t, keep, 3, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_run(m, st, &in, 1, &pruned, NULL, &e), 0, "%s", e.msg);
    /* calibration runs every child but leaves the loaded (pruned) task as it was */
    double probe_mean[64] = {0};
    cr_assert_leq(eng_model_config(m)->n_layers * N, 64);
    cr_assert_eq(eng_fusion_calibrate(m, st, t, &in, 1, probe_mean, &e), 0, "%s", e.msg);
    int dropped_seen = 0;
    for (int l = 0; l < eng_model_config(m)->n_layers; l++) dropped_seen |= probe_mean[(size_t)l * N] > 0;
    cr_assert(dropped_seen, "calibration of a pruned task gave no attention to a dropped child");
    eng_task_out again;
    cr_assert_eq(eng_run(m, st, &in, 1, &again, NULL, &e), 0, "%s", e.msg);
    for (int i = 0; i < pruned.num_labels; i++)
        cr_assert_eq(again.logits[i], pruned.logits[i], "calibration changed the task it read");
    eng_task_outs_free(&again, 1);
    cr_assert_eq(eng_fusion_save_pruning(t, tmp, mean, eng_model_config(m)->n_layers, keep, 0, &e), 0, "%s", e.msg);
    eng_task_free(t);
    eng_model_free(m);
    load_case("fusion_dynamic_n3", &m, &t, tmp);
    req.task = t;
    cr_assert_eq(eng_run(m, st, &in, 1, &reloaded, NULL, &e), 0, "%s", e.msg);
    float dmax = 0;
    for (int i = 0; i < full.num_labels; i++) {
        cr_assert_float_eq(reloaded.logits[i], pruned.logits[i], 1e-6, "reloaded pruning differs");
        float d = full.logits[i] - pruned.logits[i];
        dmax = d < 0 ? -d > dmax ? -d : dmax : d > dmax ? d : dmax;
    }
    cr_assert_gt(dmax, 1e-4, "pruning 2 of 3 adapters changed nothing");
    eng_task_outs_free(&full, 1), eng_task_outs_free(&pruned, 1), eng_task_outs_free(&reloaded, 1);
    eng_state_free(st);
    eng_task_free(t);
    eng_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    cr_assert_eq(system(cmd), 0);
}

/* Float32 bytes of every tensor in an adapter folder's weights file: what loading it costs. The
 * projections are held packed for the row products (task/load.c): panels of 48 output features, the
 * last one zero-padded, from 48 features up. */
static size_t adapter_file_bytes(const char *dir) {
    static const char *const files[] = {"adapter.safetensors", "pytorch_adapter.bin", NULL};
    eng_st_file *f;
    eng_err e = {0};
    cr_assert_eq(eng__tensors_open_first(dir, files, &f, &e), 0, "%s", e.msg);
    size_t b = 0;
    for (size_t i = 0; i < eng__st_count(f); i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        int proj = strstr(t->name, "adapter_down.0.weight") || strstr(t->name, "adapter_up.weight");
        if (proj && eng__gemm_rows_packs((int)t->shape[0]))
            b += eng__packed_floats((int)t->shape[0], (int)t->shape[1]) * sizeof(float);
        else
            b += (size_t)t->numel * sizeof(float);
    }
    eng__st_close(f);
    return b;
}

Test(fusion_calibrate, pruned_children_are_freed_at_load) {
    char tmp[1024], cmd[2048];
    cr_assert(mkdtemp(test_tmp_template(tmp, sizeof tmp, "prunefree")));
    snprintf(cmd, sizeof cmd, "cp %s/adapters/bert-tiny/fusion_dynamic_n3/fusion/* %s/", ADAPTERD_FIXTURES, tmp);
    cr_assert_eq(system(cmd), 0);
    eng_model *m0, *m;
    eng_task *whole, *kept, *freed;
    eng_err e = {0};
    load_case("fusion_dynamic_n3", &m0, &whole, tmp);
    uint8_t keep[3] = {0, 1, 0};
    double mean[64] = {0};
    cr_assert_eq(eng_fusion_save_pruning(whole, tmp, mean, eng_model_config(m0)->n_layers, keep, 0, &e), 0, "%s", e.msg);
    load_case_p("fusion_dynamic_n3", &m, &kept, tmp, 1);
    eng_model *m2;
    load_case_p("fusion_dynamic_n3", &m2, &freed, tmp, 0);

    /* what each load says it runs */
    const uint8_t *k1 = eng_task_fusion_kept(kept), *k2 = eng_task_fusion_kept(freed);
    cr_assert(k1 && k2);
    for (int i = 0; i < 3; i++) cr_assert(k1[i] == keep[i] && k2[i] == keep[i], "child %d", i);
    cr_assert(!eng_task_fusion_freed(kept) && eng_task_fusion_freed(freed));
    cr_assert_eq(eng_task_bytes(whole), eng_task_bytes(kept), "keep_pruned holds every child");

    /* the bytes that go are exactly those of the two dropped adapters' files */
    char d0[1200], d2[1200];
    snprintf(d0, sizeof d0, "%s/adapters/bert-tiny/fusion_dynamic_n3/adapters/t0", ADAPTERD_FIXTURES);
    snprintf(d2, sizeof d2, "%s/adapters/bert-tiny/fusion_dynamic_n3/adapters/t2", ADAPTERD_FIXTURES);
    size_t dropped = adapter_file_bytes(d0) + adapter_file_bytes(d2);
    cr_log_info("fusion of 3, 1 kept: %zu bytes held, %zu with the pruned children", eng_task_bytes(freed),
                eng_task_bytes(kept));
    cr_assert_gt(dropped, 0);
    cr_assert_eq(eng_task_bytes(kept) - eng_task_bytes(freed), dropped, "freed %zu bytes, the dropped files hold %zu",
                 eng_task_bytes(kept) - eng_task_bytes(freed), dropped);

    /* the freed task computes what the pruned one does */
    int32_t ids[] = {101, 17, 400, 23, 9, 102};
    eng_task_req r1 = {kept, 0}, r2 = {freed, 1};
    eng_input in1 = {.ids = ids, .len = 6, .tasks = &r1, .n_tasks = 1}, in2 = in1;
    in2.tasks = &r2;
    eng_state *st = eng_state_new(2);
    eng_task_out o1, o2;
    cr_assert_eq(eng_task_set_skips(freed, (eng_skip_range){0, 1, 0}, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_task_set_skips(kept, (eng_skip_range){0, 1, 0}, &e), 0, "%s", e.msg);
    for (int skip = 0; skip < 2; skip++) {
        r1.skip = r2.skip = skip;
        cr_assert_eq(eng_run(m, st, &in1, 1, &o1, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(eng_run(m2, st, &in2, 1, &o2, NULL, &e), 0, "%s", e.msg);
        for (int i = 0; i < o1.num_labels; i++)
            cr_assert_eq(o1.logits[i], o2.logits[i], "skip %d logit %d: %g vs %g", skip, i, o1.logits[i], o2.logits[i]);
        eng_task_outs_free(&o1, 1), eng_task_outs_free(&o2, 1);
    }

    /* what needs the dropped weights is refused, not run on freed memory */
    double probe[64];
    eng_err e2 = {0};
    cr_assert_eq(eng_fusion_calibrate(m2, st, freed, &in2, 1, probe, &e2), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e2.msg, "keep_pruned"), "%s", e2.msg);
    uint8_t all[3] = {1, 1, 1};
    cr_assert_eq(eng_task_prune_fusion(freed, all, 3, &e2), ENG_INVALID_ARGUMENT);
    cr_assert_eq(eng_task_prune_fusion(kept, all, 3, &e), 0, "%s", e.msg); /* kept weights: undone */
    cr_assert_eq(eng_fusion_calibrate(m, st, kept, &in1, 1, probe, &e), 0, "%s", e.msg);

    eng_state_free(st);
    eng_task_free(whole), eng_task_free(kept), eng_task_free(freed);
    eng_model_free(m0), eng_model_free(m), eng_model_free(m2);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    cr_assert_eq(system(cmd), 0);
}
