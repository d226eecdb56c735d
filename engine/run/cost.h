/* cost.h - the work of a layer and of a task's adapters in GFLOP, counted from shapes alone.
 *
 * A leaf: shared by the planner's statistics (run/planner.c) and the budget's cost model
 * (run/budget.c), depending on neither. Counts multiply-adds as two FLOPs and leave out
 * element-wise work (LayerNorm, activations, softmax), which the products dwarf. */
#ifndef ADAPTERD_ENGINE_RUN_COST_H
#define ADAPTERD_ENGINE_RUN_COST_H

#include "engine/model.h"
#include "model/layer.h"

/* One layer of the backbone (projections, FFN and attention) on a sequence of len rows. */
double eng__layer_gflop(const eng_config *c, int len);

/* One task layer's adapter modules on len rows (pruned fusion children not counted). */
double eng__adapter_gflop(const eng_config *c, const eng_task_layer *a, int len);

#endif
