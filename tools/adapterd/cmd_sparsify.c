/* cmd_sparsify.c - `adapterd sparsify`: a sparse copy of a saved bottleneck adapter.
 *
 *   adapterd sparsify --adapter DIR --density D --out DIR
 *
 * The pruning rule and the files written are those of engine/sparsify.h; this prints a one-line
 * JSON summary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/sparsify.h"
#include "opts.h"

static void usage(FILE *f) {
    fprintf(f, "usage: adapterd sparsify --adapter DIR --density D --out DIR\n\n"
               "Writes a sparse copy of the AdapterHub bottleneck adapter saved in --adapter (adapter_config.json\n"
               "with adapter.safetensors or pytorch_adapter.bin, as save_adapter writes it) into the new folder\n"
               "--out. In each bottleneck weight matrix (adapter_down's and adapter_up's Linear weights) the\n"
               "round(D x size) weights of largest magnitude are kept (ties: the first in row-major order) and\n"
               "the others set to zero; biases, LayerNorms, scalings and gates are kept as saved. The copy holds\n"
               "adapter.safetensors (same dtypes) and the folder's other files (config, a head saved with the\n"
               "adapter), so it loads as a SparseAdapter: the engine stores a matrix with at least 50%% zeros in\n"
               "CSR (docs/ADAPTER_FORMATS.md section 2.5). Pruning after training changes predictions: check the\n"
               "copy on held-out data before you upload it as a new version (docs/REGISTRY.md).\n\n"
               "  --adapter DIR   the saved adapter folder\n"
               "  --density D     share of each matrix's weights to keep, 0 < D <= 1 (0.2 keeps a fifth)\n"
               "  --out DIR       the folder to write; created, or empty\n");
}

int cmd_sparsify(int argc, char **argv) {
    const char *adapter = NULL, *out = NULL;
    double density = NAN; /* not given */
    const cli_opt opts[] = {
        CLI_OPT_STR("--adapter", &adapter),
        CLI_OPT_STR("--out", &out),
        CLI_OPT_REAL("--density", &density, -HUGE_VAL, HUGE_VAL, 0), /* any number: the engine says 0 < d <= 1 */
        CLI_OPT_END,
    };
    int prc = cli_opts_parse("sparsify", opts, usage, argc, argv);
    if (prc >= 0) return prc;
    if (!adapter || !out || isnan(density)) {
        fprintf(stderr, "adapterd sparsify: need --adapter DIR, --density D and --out DIR\n");
        return 2;
    }
    eng_err err = {0};
    eng_sparsify_report r;
    if (eng_adapter_sparsify(adapter, density, out, &r, &err)) {
        fprintf(stderr, "adapterd sparsify: %s\n", err.msg[0] ? err.msg : eng_status_desc(err.code));
        return 1;
    }
    printf("{\"out\":");
    cli_print_json_string(out, strlen(out));
    printf(",\"density\":%g,\"matrices\":%d,\"weights\":%lld,\"kept\":%lld,\"tensors\":%d}\n", density, r.matrices,
           (long long)r.weights, (long long)r.kept, r.tensors);
    return 0;
}
