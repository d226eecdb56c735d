/* fusion.h - AdapterFusion calibration: which children of a fusion a task may drop.
 *
 * Calibrate: run texts through the fusion and average, per fusion layer, the attention each child
 * gets. Choose: keep the k children with the largest mean attention over all fusion layers (one
 * kept set for the whole model: the dropped adapters then cost nothing in any layer). Save: write
 * the choice beside the fusion as fusion_pruning.json, which eng_task_load applies when present.
 *
 * This is an offline step (`adapterd fusion-prune`, bench/fusion): calibration reads a loaded task
 * and never changes it, so a task that workers are serving may be calibrated too. */
#ifndef ADAPTERD_ENGINE_FUSION_H
#define ADAPTERD_ENGINE_FUSION_H

#include <stdint.h>

#include "engine/run.h"
#include "engine/task.h"

/* Runs inputs (their task lists are ignored: t runs at skip 0, with every child of its fusion,
 * whatever its pruning, so t must be loaded with eng_task_params.keep_pruned when a pruning was
 * saved: ENG_INVALID_ARGUMENT otherwise) and fills mean (L, n_children) with each child's mean attention weight per
 * layer (0 for layers without fusion). Returns 0 or a negative eng_status. */
int eng_fusion_calibrate(const eng_model *m, eng_state *st, const eng_task *t, const eng_input *inputs, int n_inputs,
                         double *mean, eng_err *err);

/* Chooses the k children with the largest mean attention summed over layers into keep (n_children). */
void eng_fusion_choose(const double *mean, int n_layers, int n_children, int k, uint8_t *keep);

/* Writes <fusion_dir>/fusion_pruning.json: the statistics, the kept names and k. */
int eng_fusion_save_pruning(const eng_task *t, const char *fusion_dir, const double *mean, int n_layers,
                            const uint8_t *keep, int n_calib, eng_err *err);

#endif
