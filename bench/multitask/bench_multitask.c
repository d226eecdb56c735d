/* bench_multitask.c - many tasks on the same input in one packed pass (bench/multitask).
 *
 *   bench_multitask --model DIR --tasks DIR [--threads N] [--reps R] [--batch-reps R] [--counts 1,2,4,8,16]
 *                   [--skips 0,5] [--batch 8] [--len 128] [--fusion-ks 8,4,2] [--profile T,SKIP]
 *                   [--precision fp32|bf16|int8] [--json]
 *
 * --tasks DIR holds task00..task15 (seq_bn + head) and fusion8/ as bench/multitask/gen_tasks.py writes them.
 * For every T in --counts and skip in --skips, on random 128-token inputs (1 input: latency; --batch inputs:
 * throughput), after a warm-up run:
 *   joint:    one eng_run whose inputs each carry the T tasks (the planner shares layers < skip, packs the rest);
 *   separate: T eng_run calls, each with one task (what a server without the planner would do).
 * The two give the same logits (checked here: max |diff| printed). The plan's work comes from eng_plan_stats
 * (gflop per layer: backbone, attention and adapter products); achieved GFLOP/s = plan GFLOP / median ms, next
 * to the sgemm peak measured in this run through the engine's own split (as bench/encoder does). The "floor" of a
 * plan is its GFLOP at that peak. Fusion: the fusion8 task (8 adapters) at each skip, pruned to the first k
 * children with eng_task_prune_fusion (the cost does not depend on which k are kept; bench/fusion calibrates).
 * --profile T,SKIP prints the per-layer stats of that joint throughput plan. --precision runs the backbone's
 * Linear layers in bf16 or int8 (engine/model.h; adapters and heads stay float32, attention as README's Precision
 * says); the setup line then
 * also gives the instruction peak of that precision (bench_isa_peak), measured after the sgemm peak, and a
 * last line ("kind":"peak_after") measures it again after the plans, so run.sh states each precision's share
 * of the better of the two. One JSON object per line with --json (run.sh collects
 * them), else a table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine/task.h"
#include "math/state.h"
#include "math/blas.h"
#include "engine/model.h"
#include "engine/run.h"

#define MAX_TASKS 16

/* Same measurement as bench/encoder: best of reps of a 2048x3072x768 product through the engine's split. */
typedef struct {
    const eng_model *m;
    eng_state *st;
    int32_t *ids; /* (batch, len) */
    int len;
} ctx;

static double sum_gflop(const eng_plan_stats *s) {
    double g = 0;
    for (int l = 0; l < s->n_layers; l++) g += s->gflop[l];
    return g;
}

/* One joint eng_run of n_in inputs x n_tasks tasks; fills outs (n_in * n_tasks) and stats. */
static int run_joint(ctx *c, int n_in, const eng_task *const *tasks, int n_tasks, int skip, eng_task_out *outs,
                     eng_plan_stats *stats) {
    eng_task_req reqs[MAX_TASKS];
    eng_input in[64];
    for (int k = 0; k < n_tasks; k++) reqs[k] = (eng_task_req){tasks[k], skip};
    for (int i = 0; i < n_in; i++)
        in[i] = (eng_input){.ids = c->ids + (size_t)i * c->len, .len = c->len, .tasks = reqs, .n_tasks = n_tasks};
    eng_err e;
    if (eng_run(c->m, c->st, in, n_in, outs, stats, &e)) {
        fprintf(stderr, "bench: eng_run: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* T separate eng_run calls (one task each, all n_in inputs); outs laid out like run_joint's. */
static int run_separate(ctx *c, int n_in, const eng_task *const *tasks, int n_tasks, int skip, eng_task_out *outs,
                        double *gflop) {
    eng_task_out tmp[64];
    *gflop = 0;
    for (int k = 0; k < n_tasks; k++) {
        eng_plan_stats s;
        if (run_joint(c, n_in, &tasks[k], 1, skip, tmp, &s)) return -1;
        *gflop += sum_gflop(&s);
        eng_plan_stats_free(&s);
        for (int i = 0; i < n_in; i++) outs[(size_t)i * n_tasks + k] = tmp[i];
    }
    return 0;
}

static double max_diff(const eng_task_out *a, const eng_task_out *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < a[i].n_rows * a[i].num_labels; j++) { /* not fmax: GCC 12 for aarch64 ICEs vectorizing it */
            double e = fabs(a[i].logits[j] - b[i].logits[j]);
            d = e > d ? e : d;
        }
    return d;
}

typedef struct {
    double joint_ms, sep_ms, gflop, sep_gflop, diff;
    eng_plan_stats stats; /* of the last joint run */
} result;

static int measure(ctx *c, int n_in, const eng_task *const *tasks, int n_tasks, int skip, int reps, int do_sep,
                   result *r) {
    int n_out = n_in * n_tasks;
    eng_task_out *o1 = calloc((size_t)n_out, sizeof *o1), *o2 = calloc((size_t)n_out, sizeof *o2);
    double *tj = malloc(sizeof(double) * reps), *ts = malloc(sizeof(double) * reps);
    memset(r, 0, sizeof *r);
    if (!o1 || !o2 || !tj || !ts) return -1;
    /* warm-up (latency only: a throughput run is long enough to be its own warm-up) */
    if (n_in == 1) {
        if (run_joint(c, n_in, tasks, n_tasks, skip, o1, NULL)) return -1;
        eng_task_outs_free(o1, n_out);
    }
    /* interleaved repetitions so that load changes hit both ways alike; the first one also checks that the
     * two ways give the same logits */
    for (int k = 0; k < reps; k++) {
        eng_plan_stats s;
        double t0 = bench_now_ms();
        if (run_joint(c, n_in, tasks, n_tasks, skip, o1, &s)) return -1;
        tj[k] = bench_now_ms() - t0;
        if (k == reps - 1) r->stats = s;
        else eng_plan_stats_free(&s);
        if (do_sep) {
            double g;
            t0 = bench_now_ms();
            if (run_separate(c, n_in, tasks, n_tasks, skip, o2, &g)) return -1;
            ts[k] = bench_now_ms() - t0;
            r->sep_gflop = g;
            if (k == 0) r->diff = max_diff(o1, o2, n_out);
            eng_task_outs_free(o2, n_out);
        }
        eng_task_outs_free(o1, n_out);
    }
    r->joint_ms = bench_median(tj, reps);
    r->sep_ms = do_sep ? bench_median(ts, reps) : 0;
    r->gflop = sum_gflop(&r->stats);
    free(o1), free(o2), free(tj), free(ts);
    return 0;
}

static void print_profile(const char *what, const result *r, double peak) {
    const eng_plan_stats *s = &r->stats;
    printf("profile %s: embed %.2f ms, heads %.2f ms, total %.2f ms (one run), %d tokens\n", what, s->embed_ms,
           s->heads_ms, s->total_ms, s->tokens);
    printf("  layer   rows  streams trunks   GFLOP      ms   GFLOP/s  %%peak\n");
    for (int l = 0; l < s->n_layers; l++)
        printf("  %5d %6d %8d %6d %7.2f %7.2f %9.1f %5.0f%%\n", l, s->rows[l], s->streams[l], s->trunks[l],
               s->gflop[l], s->ms[l], s->gflop[l] / s->ms[l] * 1e3, 100.0 * s->gflop[l] / s->ms[l] * 1e3 / peak);
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *tasks_dir = NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 3, batch_reps = 2, json = 0, batch = 8, len = 128;
    int counts[8] = {1, 2, 4, 8, 16}, n_counts = 5, skips[8] = {0, 5}, n_skips = 2, ks[8] = {8, 4, 2}, n_ks = 3;
    int prof_t = 8, prof_skip = 5;
    const char *prec = "fp32";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model_dir = argv[++i];
        else if (!strcmp(argv[i], "--tasks") && i + 1 < argc) tasks_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch-reps") && i + 1 < argc) batch_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--len") && i + 1 < argc) len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--counts") && i + 1 < argc) n_counts = bench_parse_list(argv[++i], counts, 8);
        else if (!strcmp(argv[i], "--skips") && i + 1 < argc) n_skips = bench_parse_list(argv[++i], skips, 8);
        else if (!strcmp(argv[i], "--fusion-ks") && i + 1 < argc) n_ks = bench_parse_list(argv[++i], ks, 8);
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            int v[2] = {-1, -1};
            bench_parse_list(argv[++i], v, 2);
            prof_t = v[0], prof_skip = v[1];
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) prec = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: bench_multitask --model DIR --tasks DIR [--threads N] [--reps R] [--batch-reps R] "
                            "[--counts 1,2,4,8,16] [--skips 0,5] [--batch 8] [--len 128] [--fusion-ks 8,4,2] "
                            "[--profile T,SKIP] [--precision fp32|bf16|int8] [--json]\n");
            return 2;
        }
    }
    if (!model_dir || !tasks_dir || reps < 1 || batch_reps < 1 || batch < 1 || batch > 64 || eng_precision_parse(prec) < 0)
        return 2;
    eng_model *m;
    eng_err e;
    eng_model_params mp = eng_model_default_params();
    mp.precision = (eng_precision)eng_precision_parse(prec);
    if (eng_model_load_params(model_dir, &mp, &m, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    const eng_config *cfg = eng_model_config(m);
    int max_t = 0;
    for (int i = 0; i < n_counts; i++) max_t = counts[i] > max_t ? counts[i] : max_t;
    if (max_t > MAX_TASKS) return 2;
    eng_task *tasks[MAX_TASKS] = {0}, *fusion = NULL;
    eng_task_params p = eng_task_default_params();
    char path[4096];
    for (int k = 0; k < max_t; k++) {
        snprintf(path, sizeof path, "%s/task%02d", tasks_dir, k);
        const char *d = path;
        if (eng_task_load(m, &d, 1, &p, &tasks[k], &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
    }
    if (n_ks > 0) {
        char dirs[8][4096], fdir[4096], hdir[4096];
        const char *dp[8];
        for (int k = 0; k < 8; k++) {
            snprintf(dirs[k], sizeof dirs[k], "%s/fusion8/adapters/t%d", tasks_dir, k);
            dp[k] = dirs[k];
        }
        snprintf(fdir, sizeof fdir, "%s/fusion8/fusion", tasks_dir);
        snprintf(hdir, sizeof hdir, "%s/fusion8/head", tasks_dir);
        eng_task_params fp = p;
        fp.fusion_dir = fdir;
        fp.head_dir = hdir;
        fp.keep_pruned = 1; /* prunes to each k in turn: every child stays loaded */
        if (eng_task_load(m, dp, 8, &fp, &fusion, &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
    }
    eng_state *st = eng_state_new(threads);
    if (!st) return 1;
    double peak = bench_sgemm_peak(eng__state_pool(st), 5);
    eng_model_precision_info pi = eng_model_precision(m);
    double isa = bench_isa_peak(eng__state_pool(st), pi.precision);
    ctx c = {m, st, malloc(sizeof(int32_t) * (size_t)batch * len), len};
    bench_random_ids(c.ids, batch * len, 42, 1000, cfg->vocab);
    for (int i = 0; i < batch; i++) c.ids[(size_t)i * len] = 101, c.ids[(size_t)i * len + len - 1] = 102;
    if (json)
        printf("{\"kind\":\"setup\",\"blas_core\":\"%s\",\"threads\":%d,\"sgemm_peak_gflops\":%.1f,\"batch\":%d,"
               "\"len\":%d,\"task_kind\":\"%s\",\"task_mb\":%.2f,\"precision\":\"%s\",\"kernel\":\"%s\","
               "\"precision_peak_gops\":%.1f}\n",
               eng_blas_core(), threads, peak, batch, len, eng_task_kind(tasks[0]), eng_task_bytes(tasks[0]) / 1e6,
               pi.name, pi.kernel, isa);
    else
        printf("adapterd %s (%s), core %s, %d threads, sgemm peak %.1f GFLOP/s, %s instruction peak %.1f G/s; inputs of "
               "%d tokens; tasks %s (%.2f MB each)\n",
               pi.name, pi.kernel, eng_blas_core(), threads, peak, pi.name, isa, len, eng_task_kind(tasks[0]),
               eng_task_bytes(tasks[0]) / 1e6);
    if (!json)
        printf("%-9s %3s %4s %3s  %10s %10s %8s  %8s %8s %6s  %9s %8s\n", "workload", "T", "skip", "in", "joint ms",
               "separate", "speedup", "GFLOP", "GFLOP/s", "%peak", "floor ms", "max|d|");
    for (int si = 0; si < n_skips; si++)
        for (int ci = 0; ci < n_counts; ci++)
            for (int w = 0; w < 2; w++) {
                int n_in = w ? batch : 1, T = counts[ci], skip = skips[si];
                result r;
                if (measure(&c, n_in, (const eng_task *const *)tasks, T, skip, w ? batch_reps : reps, 1, &r)) return 1;
                double gfs = r.gflop / r.joint_ms * 1e3;
                if (json)
                    printf("{\"kind\":\"multitask\",\"workload\":\"%s\",\"T\":%d,\"skip\":%d,\"inputs\":%d,"
                           "\"joint_ms\":%.3f,\"separate_ms\":%.3f,\"plan_gflop\":%.4f,\"separate_gflop\":%.4f,"
                           "\"gflops\":%.2f,\"floor_ms\":%.3f,\"max_diff\":%.3g,\"layer_rows\":[",
                           w ? "throughput" : "latency", T, skip, n_in, r.joint_ms, r.sep_ms, r.gflop, r.sep_gflop,
                           gfs, r.gflop / peak * 1e3, r.diff);
                else
                    printf("%-9s %3d %4d %3d  %10.2f %10.2f %7.2fx  %8.2f %8.1f %5.0f%%  %9.2f %8.1e\n",
                           w ? "through" : "latency", T, skip, n_in, r.joint_ms, r.sep_ms, r.sep_ms / r.joint_ms,
                           r.gflop, gfs, 100 * gfs / peak, r.gflop / peak * 1e3, r.diff);
                if (json) {
                    for (int l = 0; l < r.stats.n_layers; l++) printf("%s%d", l ? "," : "", r.stats.rows[l]);
                    printf("],\"layer_ms\":[");
                    for (int l = 0; l < r.stats.n_layers; l++) printf("%s%.3f", l ? "," : "", r.stats.ms[l]);
                    printf("],\"layer_gflop\":[");
                    for (int l = 0; l < r.stats.n_layers; l++) printf("%s%.4f", l ? "," : "", r.stats.gflop[l]);
                    printf("],\"embed_ms\":%.3f,\"heads_ms\":%.3f,\"total_ms\":%.3f}\n", r.stats.embed_ms,
                           r.stats.heads_ms, r.stats.total_ms);
                }
                if (!json && w && T == prof_t && skip == prof_skip) {
                    char what[64];
                    snprintf(what, sizeof what, "T=%d skip=%d %d inputs", T, skip, n_in);
                    print_profile(what, &r, peak);
                }
                eng_plan_stats_free(&r.stats);
                fflush(stdout);
            }
    /* fusion of 8, pruned to the first k */
    const char *const *names;
    int n_children = fusion ? eng_task_fusion_children(fusion, &names) : 0;
    for (int si = 0; si < n_skips && fusion; si++)
        for (int ki = 0; ki < n_ks; ki++)
            for (int w = 0; w < 2; w++) {
                uint8_t keep[ENG_MAX_FUSE] = {0};
                for (int i = 0; i < n_children; i++) keep[i] = i < ks[ki];
                if (eng_task_prune_fusion(fusion, keep, n_children, &e)) {
                    fprintf(stderr, "bench: %s\n", e.msg);
                    return 1;
                }
                int n_in = w ? batch : 1, skip = skips[si];
                result r;
                const eng_task *ft = fusion;
                if (measure(&c, n_in, &ft, 1, skip, w ? batch_reps : reps, 0, &r)) return 1;
                double gfs = r.gflop / r.joint_ms * 1e3;
                if (json)
                    printf("{\"kind\":\"fusion\",\"workload\":\"%s\",\"k\":%d,\"n\":%d,\"skip\":%d,\"inputs\":%d,"
                           "\"ms\":%.3f,\"plan_gflop\":%.4f,\"gflops\":%.2f,\"floor_ms\":%.3f}\n",
                           w ? "throughput" : "latency", ks[ki], n_children, skip, n_in, r.joint_ms, r.gflop, gfs,
                           r.gflop / peak * 1e3);
                else
                    printf("fusion %s k=%d/%d skip %d, %d inputs: %.2f ms, %.2f GFLOP, %.1f GFLOP/s (%.0f%% of peak)\n",
                           w ? "through" : "latency", ks[ki], n_children, skip, n_in, r.joint_ms, r.gflop, gfs,
                           100 * gfs / peak);
                eng_plan_stats_free(&r.stats);
                fflush(stdout);
            }
    double isa2 = bench_isa_peak(eng__state_pool(st), pi.precision);
    if (json) printf("{\"kind\":\"peak_after\",\"precision_peak_gops\":%.1f}\n", isa2);
    else printf("%s instruction peak after the plans: %.1f G/s\n", pi.name, isa2);
    for (int k = 0; k < max_t; k++) eng_task_free(tasks[k]);
    eng_task_free(fusion);
    free(c.ids);
    eng_state_free(st);
    eng_model_free(m);
    return 0;
}
