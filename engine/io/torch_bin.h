/* torch_bin.h - read-only access to PyTorch `.bin` state dicts (torch.save's zip format), no Python needed.
 *
 * AdapterHub saves adapters and heads with torch.save by default (pytorch_adapter.bin,
 * pytorch_model_head.bin, ...). Such a file is a zip archive holding `<folder>/data.pkl` (a pickle of the state
 * dict) and one STORED entry `<folder>/data/<key>` per tensor storage, raw little-endian. This reader parses the
 * zip's central directory (ZIP64 included), runs a restricted unpickler that knows only what a state dict needs
 * (dicts, tuples, ints, strings, collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter
 * and the torch.*Storage types) and rejects every other global with its name, and returns the tensors as an
 * eng_st_file whose data points straight into the mapped file, so callers treat .bin and safetensors alike.
 *
 * Accepted: a flat dict (or OrderedDict) from string names to tensors whose strides are C-contiguous (dims of
 * size 1 and tensors with no elements may have any stride). Several names may share one storage, at any offset
 * (views and aliases). Rejected with ENG_UNSUPPORTED: DEFLATE-compressed or encrypted entries, forbidden globals,
 * non-contiguous tensors, pickle opcodes a state dict does not use, a big-endian `byteorder` entry. Everything
 * else that does not fit is ENG_FORMAT; exceeding the reader's limits is ENG_LIMIT. CRCs are not checked.
 *
 * Data pointers are not necessarily aligned (torch pads entries to 64 bytes, other zip writers do not);
 * read them with memcpy or eng__convert_to_f32.
 *
 * Usage:
 *     eng_st_file *f; eng_err e;
 *     if (eng__torchbin_open("pytorch_adapter.bin", &f, &e)) { puts(e.msg); return; }
 *     const eng_st_tensor *t = eng__st_find(f, "heads.md.1.weight");
 *     eng__st_close(f); */
#ifndef ADAPTERD_ENGINE_IO_TORCH_BIN_H
#define ADAPTERD_ENGINE_IO_TORCH_BIN_H

#include <stddef.h>

#include "io/safetensors.h"
#include "engine/status.h"

/* Maps and reads the torch.save zip archive at path; on success *out owns the mapping and the tensors
 * (release with eng__st_close) and has no metadata. Returns 0 or a negative eng_status (ENG_NOT_FOUND for a
 * missing file, ENG_IO when it cannot be opened or mapped, ENG_FORMAT / ENG_UNSUPPORTED / ENG_LIMIT as above)
 * with err naming the problem; *out is NULL on failure. */
int eng__torchbin_open(const char *path, eng_st_file **out, eng_err *err);

/* Same as eng__torchbin_open on an in-memory archive of len bytes. The caller keeps buf alive and unchanged
 * until eng__st_close; the file object does not free it. label names the archive in error messages. */
int eng__torchbin_open_buffer(const void *buf, size_t len, const char *label, eng_st_file **out, eng_err *err);

#endif
