/* fusion_calibrate.c - AdapterFusion calibration (engine/fusion.h): statistics, the choice of the
 * kept adapters, and the fusion_pruning.json file that makes the choice survive a restart.
 *
 * Calibration runs the task through the planner with the worker's probe set (math/state.h), so it
 * reads the loaded task and never writes it. Loading a saved choice is task/load_fusion.c's. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "math/state.h"
#include "engine/fusion.h"

int eng_fusion_calibrate(const eng_model *m, eng_state *st, const eng_task *t, const eng_input *inputs, int n_inputs,
                         double *mean, eng_err *err) {
    const char *const *names;
    int n = eng_task_fusion_children(t, &names), L = eng_model_config(m)->n_layers, rc = 0;
    if (n < 1) return eng_err_set(err, ENG_INVALID_ARGUMENT, "task '%s' has no fusion", eng_task_name(t));
    if (eng_task_fusion_freed(t))
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "task '%s': its pruned adapters were freed at load; load it with keep_pruned to calibrate",
                           eng_task_name(t));
    double *sums = calloc((size_t)L * n, sizeof *sums), *rows = calloc((size_t)L, sizeof *rows);
    eng_input *in = malloc((size_t)n_inputs * sizeof *in);
    eng_task_out *outs = calloc((size_t)n_inputs, sizeof *outs);
    eng_task_req req = {t, 0};
    if (!sums || !rows || !in || !outs) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_inputs; i++) {
        in[i] = inputs[i];
        in[i].tasks = &req;
        in[i].n_tasks = 1;
    }
    /* the probe makes every fusion site run all its children, whatever the task's pruning */
    st->probe = (eng_probe){.sums = sums, .rows = rows, .n_children = n};
    rc = eng_run(m, st, in, n_inputs, outs, NULL, err);
    st->probe = (eng_probe){0};
    if (rc) goto done;
    eng_task_outs_free(outs, n_inputs);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < n; i++) mean[(size_t)l * n + i] = rows[l] > 0 ? sums[(size_t)l * n + i] / rows[l] : 0.0;
done:
    free(sums);
    free(rows);
    free(in);
    free(outs);
    return rc;
}

void eng_fusion_choose(const double *mean, int n_layers, int n_children, int k, uint8_t *keep) {
    double total[ENG_MAX_FUSE] = {0};
    if (n_children < 1 || n_children > ENG_MAX_FUSE) return;
    for (int l = 0; l < n_layers; l++)
        for (int i = 0; i < n_children; i++) total[i] += mean[(size_t)l * n_children + i];
    memset(keep, 0, (size_t)n_children);
    if (k < 1) k = 1;
    for (int r = 0; r < k && r < n_children; r++) {
        int best = -1;
        for (int i = 0; i < n_children; i++)
            if (!keep[i] && (best < 0 || total[i] > total[best])) best = i;
        keep[best] = 1;
    }
}

int eng_fusion_save_pruning(const eng_task *t, const char *fusion_dir, const double *mean, int n_layers,
                            const uint8_t *keep, int n_calib, eng_err *err) {
    const char *const *names;
    int n = eng_task_fusion_children(t, &names), kept = 0;
    json_t *root = json_object(), *jn = json_array(), *jk = json_array(), *jm = json_array();
    if (!root || !jn || !jk || !jm) {
        json_decref(root), json_decref(jn), json_decref(jk), json_decref(jm);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        json_array_append_new(jn, json_string(names[i]));
        if (keep[i]) {
            json_array_append_new(jk, json_string(names[i]));
            kept++;
        }
    }
    for (int l = 0; l < n_layers; l++) {
        json_t *row = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(row, json_real(mean[(size_t)l * n + i]));
        json_array_append_new(jm, row);
    }
    json_object_set_new(root, "adapter_names", jn);
    json_object_set_new(root, "keep", jk);
    json_object_set_new(root, "k", json_integer(kept));
    json_object_set_new(root, "criterion", json_string("largest mean attention summed over fusion layers"));
    json_object_set_new(root, "calibration_inputs", json_integer(n_calib));
    json_object_set_new(root, "mean_attention", jm);
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/fusion_pruning.json", fusion_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(root, tmp, JSON_INDENT(2));
    json_decref(root);
    if (rc || rename(tmp, path)) {
        remove(tmp);
        return eng_err_set(err, ENG_IO, "%s: cannot write", path);
    }
    return 0;
}
