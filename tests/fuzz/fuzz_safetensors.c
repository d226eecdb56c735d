/* fuzz_safetensors.c - the safetensors header and layout validation (engine/io/safetensors.c),
 * on an in-memory image. A file that opens promises bounds-checked tensors: the harness reads
 * every byte of every tensor and every metadata lookup, so a validation gap shows under ASan. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    eng_st_file *f = NULL;
    eng_err err;
    if (eng__st_open_buffer(data, size, "fuzz.safetensors", &f, &err)) {
        fuzz_keep((unsigned)strlen(err.msg));
        return 0;
    }
    unsigned h = 0;
    for (size_t i = 0; i < eng__st_count(f); i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) h += p[k];
        if (eng__st_find(f, t->name) == NULL) __builtin_trap();
        if ((size_t)t->numel * eng__dtype_size(t->dtype) != t->nbytes) __builtin_trap();
        if (t->numel <= 4096) {
            float buf[4096];
            eng__convert_to_f32(t->dtype, t->data, (size_t)t->numel, buf);
        }
    }
    fuzz_keep(h + (eng__st_metadata(f, "format") != NULL));
    eng__st_close(f);
    return 0;
}
