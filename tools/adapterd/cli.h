/* cli.h - subcommands of the adapterd binary and the small helpers they share.
 *
 * Each subcommand is `int cmd_NAME(int argc, char **argv)` with argv[0] the subcommand name; it
 * prints its result to stdout, errors to stderr, and returns the process exit code (0 ok, 1 runtime
 * error, 2 usage error). `--help` prints usage and returns 0. */
#ifndef ADAPTERD_TOOLS_CLI_H
#define ADAPTERD_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

int cmd_version(int argc, char **argv);
int cmd_encode(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_fusion_prune(int argc, char **argv);
int cmd_sparsify(int argc, char **argv);
int cmd_rollout(int argc, char **argv);

/* Parses "101,2023,102" into a malloc'd array; returns the count, or -1 on a malformed list
 * (message on stderr). The caller frees *out. */
int cli_parse_ids(const char *s, int32_t **out);

/* Tokenizes text (and pair, may be NULL) with the tokenizer of model_dir, truncating to max_length
 * (0: the model's limit, at most 512). On success *ids and *types are malloc'd arrays of *n entries
 * (the caller frees them) and 0 is returned; else a negative eng_status with err set. */
int cli_tokenize(const char *model_dir, const char *text, const char *pair, int max_length, int32_t **ids,
                 int32_t **types, int *n, eng_err *err);

/* The input of encode / predict: --ids (parsed, types NULL) or --text [+ --text-pair] (tokenized with
 * model_dir's tokenizer, see cli_tokenize). Returns 0, 2 for a malformed --ids (message printed), or a
 * negative eng_status with err set. The caller frees *ids and *types. */
int cli_read_input(const char *model_dir, const char *ids_arg, const char *text, const char *pair, int max_length,
                   int32_t **ids, int32_t **types, int *n, eng_err *err);

/* Loads the model in model_dir in `precision` ("fp32", "bf16", "int8"; NULL: the one model.json
 * beside it names, else fp32). Returns 0 and sets *out (free with eng_model_free), or a negative
 * eng_status with err set (a precision this CPU has no fast kernel for is refused, naming what is
 * missing). */
struct eng_model;
int cli_model_load(const char *model_dir, const char *precision, struct eng_model **out, eng_err *err);

/* Prints a JSON string literal (with quotes, escaped) to stdout. */
void cli_print_json_string(const char *s, size_t len);

/* Applies the process-wide BLAS settings (--threads, --blas-core); see main.c. */
int cli_blas_setup(int n_threads, const char *core);

#endif
