/* tei.c - the answers only Hugging Face's text-embeddings-inference (TEI) has: GET /info, and the
 * prompts of a model's sentence-transformers config that "prompt_name" picks. TEI's embed and
 * tokenize bodies are the ones /v1/embed and /v1/tokenize already speak (parse.c, v1.c); its
 * error shape is json.c's proto_error_encode_as. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

char *proto_tei_info_encode(const proto_tei_info *i, size_t *len) {
    return proto__dump(json_pack("{s:s,s:n,s:s,s:{s:{s:s}},s:i,s:i,s:i,s:i,s:i,s:s}", "model_id", i->model_id, "model_sha",
                                 "model_dtype", i->dtype, "model_type", "embedding", "pooling", i->pooling,
                                 "max_concurrent_requests", i->max_concurrent, "max_input_length", i->max_input_length,
                                 "max_batch_tokens", i->max_batch_tokens, "max_client_batch_size", i->max_client_batch,
                                 "tokenization_workers", 1, "version", i->version),
                       len);
}

char *proto_tei_prompt(const char *json, size_t n, const char *name, size_t *plen, eng_err *err) {
    if (err) err->code = 0;
    json_t *c = json ? json_loadb(json, n, 0, NULL) : NULL;
    json_t *prompts = json_object_get(c, "prompts");
    const char *want = name ? name : json_string_value(json_object_get(c, "default_prompt_name"));
    char *out = NULL;
    if (want) {
        json_t *p = json_object_get(prompts, want);
        if (!json_is_string(p)) {
            if (name)
                eng_err_set(err, ENG_INVALID_ARGUMENT,
                            "\"prompt_name\": the model has no prompt \"%.80s\" (its config_sentence_transformers.json "
                            "lists its prompts)",
                            name);
        } else if ((out = malloc(json_string_length(p) + 1))) {
            memcpy(out, json_string_value(p), json_string_length(p) + 1);
            *plen = json_string_length(p);
        } else {
            eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        }
    }
    json_decref(c);
    return out;
}
