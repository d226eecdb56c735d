/* sparsify.h - a sparse copy of a saved bottleneck adapter (`adapterd sparsify`).
 *
 * SparseAdapter and Large-Sparse adapters are ordinary bottleneck adapter files whose pruned
 * weights are exact zeros (docs/ADAPTER_FORMATS.md §2.5); the task loader keeps such matrices in
 * CSR. This turns a dense adapter into one: in each bottleneck projection matrix (adapter_down's
 * Linear weight, adapter_up's weight) it keeps the round(density * rows * cols) weights of largest
 * magnitude (at least one; ties go to the lower flat index, row-major), sets the others to zero,
 * and leaves every other tensor (biases, LayerNorms, scalings, gates) as saved. The copy is a new
 * folder: adapter.safetensors (whatever the input's format; dtypes kept) plus every other file of
 * the input folder (adapter_config.json, a head saved with the adapter), so it loads wherever the
 * original did.
 *
 * Pruning after training changes predictions (by how much depends on the adapter and the density):
 * compare the copy with the original on held-out data before serving it. */
#ifndef ADAPTERD_ENGINE_SPARSIFY_H
#define ADAPTERD_ENGINE_SPARSIFY_H

#include <stdint.h>

#include "engine/status.h"

typedef struct {
    int matrices;        /* projection matrices pruned */
    int64_t weights;     /* their weights in all */
    int64_t kept;        /* of which kept (non-zero before pruning or not) */
    int tensors;         /* tensors written in all */
} eng_sparsify_report;

/* Reads the AdapterHub bottleneck adapter saved in adapter_dir (adapter.safetensors or
 * pytorch_adapter.bin with adapter_config.json) and writes the pruned copy into out_dir, which is
 * created (its parent must exist) and must not exist already or be empty. 0 < density <= 1.
 * Returns 0 and fills *rep (may be NULL), or a negative eng_status: ENG_INVALID_ARGUMENT (density,
 * out_dir not empty), ENG_UNSUPPORTED (a PEFT folder, AdaMix experts, no bottleneck matrix),
 * ENG_NOT_FOUND, ENG_FORMAT or ENG_IO naming the file. */
int eng_adapter_sparsify(const char *adapter_dir, double density, const char *out_dir, eng_sparsify_report *rep,
                         eng_err *err);

#endif
