/* fuzz_torch_bin.c - the torch.save reader (engine/io/zip.c, pickle.c, torch_bin.c) on an
 * in-memory archive: central directory, ZIP64, local headers, the restricted unpickler and the
 * tensor views. Every byte of every tensor returned is read, so a storage or stride check that
 * lets a view past its entry shows under ASan. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"

#include "io/torch_bin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    eng_st_file *f = NULL;
    eng_err err;
    if (eng__torchbin_open_buffer(data, size, "fuzz.bin", &f, &err)) {
        fuzz_keep((unsigned)strlen(err.msg));
        return 0;
    }
    unsigned h = 0;
    for (size_t i = 0; i < eng__st_count(f); i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) h += p[k];
        h += (unsigned)strlen(t->name);
        if ((size_t)t->numel * eng__dtype_size(t->dtype) != t->nbytes) __builtin_trap();
    }
    fuzz_keep(h);
    eng__st_close(f);
    return 0;
}
