/* test_planner.c - the multi-task planner gives every task exactly what it gives alone.
 *
 * Up to 18 tasks of mixed forms (bottleneck, parallel, LoRA, (IA)^3, prefix, MAM, UniPELT, fusion,
 * AdaMix, a LoRA on the word embeddings; classification, multi-label, regression, tagging and QA heads) from the reference
 * fixtures, on several inputs, each input with its own task subset and per-task skips 0..L, all in
 * one eng_run. Each (input, task) output must equal the same task run alone on that input at the
 * same skip (1e-5), and the outputs are checked against the PyTorch reference elsewhere
 * (test_adapters.c), so together they prove the shared pass. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/task.h"
#include "engine/run.h"
#include "ref_case.h"
#include "model/layer.h"
#include "test_rand.h"

static const char *cases[] = {"seq_bn_st",  "double_seq_bn_bin", "par_bn",     "lora_ah",          "ia3",
                              "prefix",     "mam",               "unipelt",    "fusion_dynamic_n3", "adamix_seq_bn",
                              "head_tagging", "head_qa",         "head_regression", "head_multilabel", "peft_lora",
                              "stack_madx", "peft_lora_embedding", "peft_embedding_stack"};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static eng_task *load_task(const eng_model *m, const char *name) {
    char dir[PATH_MAX], msg[512];
    snprintf(dir, sizeof dir, "%s/adapters/bert-tiny/%s", ADAPTERD_FIXTURES, name);
    ref_case c;
    cr_assert_eq(ref_case_open(&c, ADAPTERD_FIXTURES, dir, msg, sizeof msg), 0, "%s", msg);
    eng_task_params tp = ref_case_params(&c);
    tp.name = name;
    eng_task *t;
    eng_err e = {0};
    cr_assert_eq(ref_case_load_task(&c, m, &tp, &t, &e), 0, "%s: %s", name, e.msg);
    ref_case_close(&c);
    return t;
}

/* The planner's stream rule (engine/run.h), counted here from the tasks alone: a task's stream
 * starts at max(first adapter layer, skip); when its only modules in that layer sit at the output
 * site it splits off inside the layer, so the trunk also runs that layer; a task with a LoRA on the
 * word embeddings, at skip 0, has its own stream from layer 0. An input's trunk runs every layer
 * below the latest such point of its tasks. */
static int late_split(const eng_task_layer *a) {
    for (int i = 0; i < ENG_LIN_COUNT; i++)
        if (a->lora[i] || a->ia3[i]) return 0;
    return a->prefix_len == 0 && a->mh.n_stack == 0 && a->mh.n_fuse == 0 && (a->out.n_stack || a->out.n_fuse);
}

static int trunk_until(const eng_input *in, int L) {
    int until = 0;
    for (int k = 0; k < in->n_tasks; k++) {
        const eng_task *t = in->tasks[k].task;
        int start = eng_task_first_layer(t) > in->tasks[k].skip ? eng_task_first_layer(t) : in->tasks[k].skip;
        int own = start < L && late_split(&eng__task_layers(t)[start]) ? start + 1 : start;
        if (in->tasks[k].skip == 0 && eng__task_emb_lora(t)) own = 0; /* embeds its own rows */
        if (own > until) until = own;
    }
    return until;
}

Test(planner, shared_pass_equals_each_task_alone) {
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/models/bert-tiny", ADAPTERD_FIXTURES);
    eng_model *m;
    eng_err e = {0};
    cr_assert_eq(eng_model_load(mp, &m, &e), 0, "%s", e.msg);
    const eng_config *c = eng_model_config(m);
    eng_task *tasks[N_CASES];
    for (int i = 0; i < N_CASES; i++) tasks[i] = load_task(m, cases[i]);
    eng_state *st = eng_state_new(2);
    cr_assert(st);
    unsigned seed = 12345;
    int trunks_seen = 0;
    for (int round = 0; round < 12; round++) {
        enum { MAX_IN = 6 };
        int n_in = 1 + (int)(test_rand_bits(&seed) % MAX_IN), total = 0;
        eng_input in[MAX_IN];
        eng_task_req reqs[MAX_IN][N_CASES];
        int32_t ids[MAX_IN][40];
        for (int i = 0; i < n_in; i++) {
            int len = 1 + (int)(test_rand_bits(&seed) % 30);
            for (int t = 0; t < len; t++) ids[i][t] = (int32_t)(test_rand_bits(&seed) % (unsigned)c->vocab);
            int nt = round == 0 ? N_CASES : 1 + (int)(test_rand_bits(&seed) % N_CASES); /* round 0: every task */
            int start = (int)(test_rand_bits(&seed) % N_CASES);
            for (int k = 0; k < nt; k++)
                reqs[i][k] = (eng_task_req){tasks[(start + k) % N_CASES], (int)(test_rand_bits(&seed) % (unsigned)(c->n_layers + 1))};
            in[i] = (eng_input){.ids = ids[i], .len = len, .tasks = reqs[i], .n_tasks = nt};
            total += nt;
        }
        eng_task_out *outs = calloc((size_t)total, sizeof *outs);
        eng_plan_stats stats;
        cr_assert_eq(eng_run(m, st, in, n_in, outs, &stats, &e), 0, "%s", e.msg);
        int o = 0;
        for (int i = 0; i < n_in; i++)
            for (int k = 0; k < in[i].n_tasks; k++, o++) {
                eng_input one = in[i];
                one.tasks = &reqs[i][k];
                one.n_tasks = 1;
                eng_task_out alone;
                cr_assert_eq(eng_run(m, st, &one, 1, &alone, NULL, &e), 0, "%s", e.msg);
                cr_assert_eq(alone.n_rows * alone.num_labels, outs[o].n_rows * outs[o].num_labels);
                for (int j = 0; j < alone.n_rows * alone.num_labels; j++)
                    cr_assert(fabsf(alone.logits[j] - outs[o].logits[j]) <= 1e-5f,
                              "round %d input %d task %s skip %d: %g shared vs %g alone", round, i,
                              eng_task_name(reqs[i][k].task), reqs[i][k].skip, outs[o].logits[j], alone.logits[j]);
                eng_task_outs_free(&alone, 1);
            }
        /* the trunks are shared: at every layer, one per input whose tasks have not all started */
        for (int l = 0; l < c->n_layers; l++) {
            int want = 0;
            for (int i = 0; i < n_in; i++) want += trunk_until(&in[i], c->n_layers) > l;
            cr_assert_eq(stats.trunks[l], want, "round %d layer %d: %d trunks, the rule says %d", round, l,
                         stats.trunks[l], want);
            trunks_seen += want;
        }
        eng_plan_stats_free(&stats);
        eng_task_outs_free(outs, total);
        free(outs);
    }
    cr_assert_gt(trunks_seen, 0, "no round kept a trunk: the check above proved nothing");
    eng_state_free(st);
    for (int i = 0; i < N_CASES; i++) eng_task_free(tasks[i]);
    eng_model_free(m);
}

Test(planner, rejects_bad_requests_with_the_reason) {
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/models/bert-tiny", ADAPTERD_FIXTURES);
    eng_model *m;
    eng_err e = {0};
    cr_assert_eq(eng_model_load(mp, &m, &e), 0, "%s", e.msg);
    eng_task *t = load_task(m, "seq_bn_st");
    eng_state *st = eng_state_new(1);
    int32_t ids[3] = {1, 2, 3};
    eng_task_req r = {t, eng_model_config(m)->n_layers + 1};
    eng_input in = {.ids = ids, .len = 3, .tasks = &r, .n_tasks = 1};
    eng_task_out out;
    cr_assert_eq(eng_run(m, st, &in, 1, &out, NULL, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "skip"), "%s", e.msg);
    r.skip = 0;
    in.len = 0;
    cr_assert_eq(eng_run(m, st, &in, 1, &out, NULL, &e), ENG_INVALID_ARGUMENT);
    in.len = 3;
    ids[1] = 1 << 30;
    cr_assert_eq(eng_run(m, st, &in, 1, &out, NULL, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "vocabulary"), "%s", e.msg);
    eng_state_free(st);
    eng_task_free(t);
    eng_model_free(m);
}
