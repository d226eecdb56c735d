/* test_sparsify.c - `adapterd sparsify` against PyTorch (tools/reference/sparsify_ref.py).
 *
 * For saved bottleneck adapters in both file formats (the committed fixtures: Pfeiffer from
 * pytorch_adapter.bin and from adapter.safetensors, Houlsby with adapters at both sites), at
 * densities 0.2 and 0.5:
 *   1. adapterd writes the sparse copy;
 *   2. PyTorch prunes the original by the same rule, written from engine/sparsify.h's definition,
 *      and requires the copy, read by st.py's own safetensors reader, to hold bit-identical tensors
 *      (so the writer round-trips through Python's reader as well as the engine's);
 *   3. gen_adapters.py computes expected logits (float64) from the PyTorch-pruned dense adapter;
 *   4. the engine loads adapterd's copy, with its matrices in CSR (kind "sparse", fewer bytes than
 *      the dense original), and its logits must match within 1e-4 (the tolerance of every adapter
 *      case; float32 vs the float64 oracle on these 2-layer models is about 1e-6). The original,
 *      unpruned adapter must miss the same expected logits by more than 1e-2, so the comparison sees
 *      the pruning.
 * Needs Debian's python3-torch; skipped without it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/task.h"
#include "task_check.h"
#include "test_tmp.h"

#define PY "/usr/bin/python3"
#define REF ADAPTERD_SOURCE_DIR "/tools/reference"

static char work[512];

static void setup(void) { cr_assert(mkdtemp(test_tmp_template(work, sizeof work, "sparsify"))); }
static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(sparsify, .init = setup, .fini = teardown, .timeout = 300);

/* Runs cmd; returns its exit status and puts its output (stdout + stderr) in out. */
static int run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int have_torch(void) {
    char out[256];
    return run(PY " -c 'import torch' 2>&1", out, sizeof out) == 0;
}

/* setup.json of case_dir with its adapter folder replaced by dir. */
static void point_case_at(const char *case_dir, const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/setup.json", case_dir);
    json_error_t je;
    json_t *s = json_load_file(p, 0, &je);
    cr_assert(s, "%s: %s", p, je.text);
    json_t *a = json_array();
    json_array_append_new(a, json_string(dir));
    json_object_set_new(s, "adapters", a);
    cr_assert_eq(json_dump_file(s, p, JSON_INDENT(1)), 0);
    json_decref(s);
}

static void load_task(const char *dir, eng_model *m, size_t *bytes, char *kind, size_t n) {
    eng_err e = {0};
    eng_task *t = NULL;
    eng_task_params p = eng_task_default_params();
    cr_assert_eq(eng_task_load(m, &dir, 1, &p, &t, &e), 0, "%s: %s", dir, e.msg);
    *bytes = eng_task_bytes(t);
    snprintf(kind, n, "%s", eng_task_kind(t));
    eng_task_free(t);
}

static void check_case(const char *fixture, const char *density) {
    if (!have_torch()) cr_skip_test(PY " cannot import torch (Debian's python3-torch)");
    char src[1024], copy[1024], pyd[1024], cases[1024], cdir[1200], cmd[6000], out[8192], msg[2048];
    snprintf(src, sizeof src, "%s/adapters/bert-tiny/%s/adapters/sst", ADAPTERD_FIXTURES, fixture);
    snprintf(copy, sizeof copy, "%s/%s-%s-c", work, fixture, density);
    snprintf(pyd, sizeof pyd, "%s/%s-%s-py", work, fixture, density);
    snprintf(cases, sizeof cases, "%s/cases", work);
    snprintf(cdir, sizeof cdir, "%s/%s", cases, fixture);

    snprintf(cmd, sizeof cmd, "'%s/tools/adapterd' sparsify --adapter '%s' --density %s --out '%s' 2>&1",
             ADAPTERD_BINARY_DIR, src, density, copy);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "%s\n%s", cmd, out);
    cr_log_info("%s at %s: %s", fixture, density, out);

    snprintf(cmd, sizeof cmd, PY " '%s/sparsify_ref.py' --adapter '%s' --density %s --out '%s' --check-copy '%s' 2>&1",
             REF, src, density, pyd, copy);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "the copy differs from PyTorch's pruning:\n%s", out);

    snprintf(cmd, sizeof cmd,
             PY " '%s/gen_adapters.py' --backbone '%s/models/bert-tiny' --load '%s' --name %s --skips 0,1 --out '%s' 2>&1",
             REF, ADAPTERD_FIXTURES, pyd, fixture, cases);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "%s\n%s", cmd, out);

    /* the unpruned original must not pass: the check sees the pruning */
    task_check_result r = {0};
    point_case_at(cdir, src);
    cr_assert_neq(task_check(ADAPTERD_FIXTURES, cdir, 1, 1e-2f, &r, msg, sizeof msg), 0,
                  "the dense original matches the pruned reference: density %s changes nothing", density);
    cr_assert(strstr(msg, "max |logit diff|"), "the original did not run: %s", msg);
    /* adapterd's copy, as the engine loads it (CSR from 50% zeros on) */
    point_case_at(cdir, copy);
    cr_assert_eq(task_check(ADAPTERD_FIXTURES, cdir, 1, 1e-4f, &r, msg, sizeof msg), 0, "%s", msg);
    cr_log_info("%s at %s: max |logit diff| %.2e over %d files, largest logit %.3f", fixture, density, r.max_diff,
                r.files, r.max_logit);

    eng_model *m = NULL;
    eng_err e = {0};
    char bb[1024], kind_d[128], kind_s[128];
    snprintf(bb, sizeof bb, "%s/models/bert-tiny", ADAPTERD_FIXTURES);
    cr_assert_eq(eng_model_load(bb, &m, &e), 0, "%s", e.msg);
    size_t dense_b, sparse_b;
    load_task(src, m, &dense_b, kind_d, sizeof kind_d);
    load_task(copy, m, &sparse_b, kind_s, sizeof kind_s);
    eng_model_free(m);
    cr_assert(strstr(kind_s, "sparse") && !strstr(kind_d, "sparse"), "kinds: original %s, copy %s", kind_d, kind_s);
    cr_assert_lt(sparse_b, dense_b, "the copy holds %zu bytes, the original %zu", sparse_b, dense_b);
}

Test(sparsify, seq_bn_from_bin_at_0_2) { check_case("seq_bn_bin", "0.2"); }
Test(sparsify, seq_bn_from_safetensors_at_0_2) { check_case("seq_bn_st", "0.2"); }
Test(sparsify, double_seq_bn_at_0_5) { check_case("double_seq_bn_st", "0.5"); }

Test(sparsify, refuses_what_it_cannot_prune) {
    char cmd[2048], out[4096];
    struct {
        const char *adapter, *density, *out, *says;
    } bad[] = {
        {"peft_lora/adapters/peft_task", "0.2", "a", "PEFT"},
        {"adamix_seq_bn/adapters/sst", "0.2", "b", "AdaMix"},
        {"lora_ah/adapters/lora", "0.2", "c", "no bottleneck weight matrix"},
        {"seq_bn_st/adapters/sst", "0", "d", "0 < d <= 1"},
        {"seq_bn_st/adapters/sst", "1.5", "e", "0 < d <= 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "'%s/tools/adapterd' sparsify --adapter '%s/adapters/bert-tiny/%s' --density %s --out '%s/%s' 2>&1",
                 ADAPTERD_BINARY_DIR, ADAPTERD_FIXTURES, bad[i].adapter, bad[i].density, work, bad[i].out);
        cr_expect_eq(run(cmd, out, sizeof out), 1, "%s: %s", bad[i].adapter, out);
        cr_expect(strstr(out, bad[i].says), "%s: says %s", bad[i].adapter, out);
    }
    /* an existing, non-empty folder is never written into */
    snprintf(cmd, sizeof cmd,
             "'%s/tools/adapterd' sparsify --adapter '%s/adapters/bert-tiny/seq_bn_st/adapters/sst' --density 0.2 "
             "--out '%s' 2>&1", ADAPTERD_BINARY_DIR, ADAPTERD_FIXTURES, ADAPTERD_FIXTURES);
    cr_expect_eq(run(cmd, out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "not empty"), "%s", out);
}
