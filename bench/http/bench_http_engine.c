/* bench_http_engine.c - the engine's own batched throughput on exactly what bench/http sends the
 * server, so the HTTP numbers have a ceiling measured in the same run.
 *
 *   bench_http_engine --registry DIR --text STR [--tasks a,b,...] [--batches 1,8,64] [--reps R] [--threads N]
 *
 * Loads the registry the server loads (adapters_store), tokenizes the text with the model's
 * tokenizer the way the server does, and times eng_run over B copies of the input x every task
 * (default: all tasks), at each task's default skip, for each batch size B: one warm-up run, then
 * --reps runs. Prints one JSON line per B: {"batch":B,"ms":median,"inputs_per_s":B/median}. No
 * HTTP, no JSON, no queue: what is left when the front end costs nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine/run.h"
#include "adapters_store/store.h"
#include "engine/tokenizer.h"

int main(int argc, char **argv) {
    const char *reg_dir = NULL, *text = NULL, *tasks_arg = NULL, *batches = "1,8,64";
    int reps = 3, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--registry")) reg_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--text")) text = argv[i + 1];
        else if (!strcmp(argv[i], "--tasks")) tasks_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--batches")) batches = argv[i + 1];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_http_engine: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!reg_dir || !text || reps < 1 || threads < 1) {
        fprintf(stderr, "usage: bench_http_engine --registry DIR --text STR [--tasks a,b] [--batches 1,8,64] [--reps R] [--threads N]\n");
        return 2;
    }
    eng_err err = {0};
    store_params sp = store_default_params();
    sp.verbose = 0;
    store_registry *reg;
    if (store_open(reg_dir, &sp, &reg, &err)) {
        fprintf(stderr, "bench_http_engine: %s\n", err.msg);
        return 1;
    }
    store_task **all = NULL;
    int n_all = store_tasks_acquire(reg, &all), n_tasks = 0;
    if (n_all < 0) n_all = 0;
    store_task **ts = calloc((size_t)n_all + 1, sizeof *ts);
    eng_task_req *treqs = calloc((size_t)n_all + 1, sizeof *treqs);
    for (int i = 0; i < n_all; i++) {
        store_task *t = all[i]; /* each reference kept in ts or released here */
        if (tasks_arg) {
            const char *nm = store_task_name(t);
            size_t nl = strlen(nm);
            const char *p = strstr(tasks_arg, nm);
            int hit = 0;
            for (; p && !hit; p = strstr(p + 1, nm))
                hit = (p == tasks_arg || p[-1] == ',') && (p[nl] == ',' || p[nl] == '\0');
            if (!hit) {
                store_task_release(t);
                continue;
            }
        }
        ts[n_tasks] = t;
        treqs[n_tasks] = (eng_task_req){store_task_engine(t), store_task_skip_default(t)};
        n_tasks++;
    }
    free(all);
    if (!n_tasks) {
        fprintf(stderr, "bench_http_engine: no task\n");
        return 1;
    }
    store_model *sm = store_task_model(ts[0]);
    const eng_model *m = store_model_engine(sm);
    eng_tok_params tp = eng_tok_default_params();
    tp.max_length = store_model_max_tokens(sm);
    eng_tok_encoding enc;
    if (eng_tok_encode(store_model_tokenizer(sm), text, strlen(text), NULL, 0, &tp, &enc, &err)) {
        fprintf(stderr, "bench_http_engine: %s\n", err.msg);
        return 1;
    }
    eng_state *st = eng_state_new(threads);
    int rc = 0;
    for (const char *b = batches; *b && !rc;) {
        int B = atoi(b);
        eng_input *in = calloc((size_t)B, sizeof *in);
        eng_task_out *outs = calloc((size_t)B * n_tasks, sizeof *outs);
        double *ms = calloc((size_t)reps, sizeof *ms);
        for (int i = 0; i < B; i++)
            in[i] = (eng_input){.ids = enc.ids, .type_ids = enc.type_ids, .len = (int)enc.n, .tasks = treqs, .n_tasks = n_tasks};
        for (int r = -1; r < reps && !rc; r++) {
            double t0 = bench_now_ms();
            if ((rc = eng_run(m, st, in, B, outs, NULL, &err))) break;
            double dt = bench_now_ms() - t0;
            eng_task_outs_free(outs, B * n_tasks);
            if (r >= 0) ms[r] = dt;
        }
        if (!rc) {
            double med = bench_median(ms, reps);
            printf("{\"batch\":%d,\"tasks\":%d,\"tokens\":%zu,\"threads\":%d,\"ms\":%.3f,\"inputs_per_s\":%.3f}\n", B,
                   n_tasks, enc.n, threads, med, B * 1e3 / med);
            fflush(stdout);
        }
        free(in), free(outs), free(ms);
        b = strchr(b, ',');
        b = b ? b + 1 : "";
    }
    if (rc) fprintf(stderr, "bench_http_engine: %s\n", err.msg);
    eng_state_free(st);
    eng_tok_encoding_free(&enc);
    for (int i = 0; i < n_tasks; i++) store_task_release(ts[i]);
    free(ts), free(treqs);
    store_free(reg);
    return rc ? 1 : 0;
}
