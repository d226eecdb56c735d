/* tensor_file.h - what every loader does with a tensor file, done once.
 *
 * Opening a weights file of either format (safetensors or torch.save .bin, chosen by content),
 * picking the first of a list of candidate names in a folder, and copying a tensor to float32
 * after checking its shape: the model loader and every task loader go through these, so a shape
 * error reads the same wherever it happens ("<label>: tensor 'x' has shape (a, b), expected (c, d)"). */
#ifndef ADAPTERD_ENGINE_IO_TENSOR_FILE_H
#define ADAPTERD_ENGINE_IO_TENSOR_FILE_H

#include <jansson.h>
#include <stdint.h>

#include "engine/status.h"
#include "io/safetensors.h"

/* Opens a tensor file of either format, chosen by content: a file that starts with the zip local-header
 * magic "PK\x03\x04" is read as a torch.save archive (eng__torchbin_open), anything else as safetensors
 * (eng__st_open). (A safetensors header length whose low four bytes spell that magic would be 67 MB of JSON;
 * no real file has one.) Returns what the chosen reader returns; ENG_IO if the file cannot be read. */
int eng__tensors_open(const char *path, eng_st_file **out, eng_err *err);

/* Opens dir/names[i] for the first i whose file exists (names is NULL-terminated); ENG_NOT_FOUND
 * naming the candidates when none does. */
int eng__tensors_open_first(const char *dir, const char *const *names, eng_st_file **out, eng_err *err);

/* Does t have shape (d0, d1)? d1 == 0 asks for a vector of d0 values (any length when d0 < 0); a
 * single value of any rank also counts as a vector of 1. Returns 0, or ENG_SHAPE with the message
 * above (label, when not NULL, opens it). */
int eng__tensor_check_shape(const eng_st_tensor *t, int64_t d0, int64_t d1, const char *label, eng_err *err);

/* eng__tensor_check_shape, then converts t into dst (t->numel floats). ENG_UNSUPPORTED for a
 * dtype that does not convert. */
int eng__tensor_load_f32(const eng_st_tensor *t, int64_t d0, int64_t d1, const char *label, float *dst, eng_err *err);

/* Parses len bytes of text, which must hold a JSON object; returns it (release with json_decref) or
 * NULL with ENG_FORMAT (bad JSON, not an object) in err, label opening the message. */
json_t *eng__json_object_parse(const char *text, size_t len, const char *label, eng_err *err);

/* Reads dir/name (eng_file_read, up to 64 MiB) and parses it with eng__json_object_parse, the file's
 * path as the label; ENG_NOT_FOUND when there is no such file. */
json_t *eng__json_object_load(const char *dir, const char *name, eng_err *err);

#endif
