/* embed.c - POST /v1/embed and POST /v1/tokenize, the two routes users of Hugging Face's
 * text-embeddings-inference (TEI) expect, with its request and answer shapes (bare JSON arrays).
 *
 * An embed is a pass with no task: the job carries the inputs' tokens and goes through the same
 * scheduler as predictions (bounded queue, dynamic batching, engine workers), but the worker runs
 * eng_encode - the encoder alone, which gives every row's last hidden state and the pooler output -
 * and only batches embeds together (scheduler.c). Pooling and normalization happen on the worker
 * (respond.c). The pooling a request does not name is the model's: its sentence-transformers
 * folder `1_Pooling/config.json` says mean or CLS; without one, CLS.
 *
 * The same handler serves text-embeddings-inference's own paths (POST / and /embed as /v1/embed,
 * /embed_all as "pooling": "none" without normalization) and OpenAI's POST /v1/embeddings (its
 * request parser and answer, proto/openai.c); the route decides the error shape (http.c). TEI's
 * request fields are /v1/embed's: "prompt_name" puts the named prompt of the model's
 * sentence-transformers config (config_sentence_transformers.json; its default_prompt_name when not
 * named) before each text, "truncation_direction": "left" cuts a text's start (tokenized whole, then
 * the first tokens after the leading special tokens dropped), "dimensions" keeps the first N
 * values of each vector before normalizing (Matryoshka).
 *
 * Tokenizing costs about as much as parsing the request, so /v1/tokenize answers on the MHD thread
 * like the quick routes. */
#define _GNU_SOURCE
#include "embed.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http.h"
#include "http_status.h"
#include "models.h"
#include "predict.h"
#include "respond.h"

/* Bytes of a path to a model's pooling config. */
#define POOLING_PATH_MAX 1400

/* A new reference to the model the request names, or to the registry's only model (models.c's
 * rule); NULL with an error answered. r->model_id is the name to answer with. */
static store_model *pick_model(srv_request *r, const char *name, enum MHD_Result *ans) {
    eng_status code = ENG_OK;
    char msg[SRV_MODEL_MSG_MAX];
    store_model *m = srv__model_resolve(r->srv, name, SRV_MODEL_ONLY, &r->model_id, &code, msg, sizeof msg);
    if (!m) *ans = srv__send_error(r, code, "%s", msg);
    return m;
}

/* The model's own pooling: sentence-transformers' 1_Pooling/config.json in its folder
 * (pooling_mode_mean_tokens or pooling_mode_cls_token), else CLS. */
static proto_pooling model_pooling(const srv_server *s, const store_model *m) {
    char path[POOLING_PATH_MAX];
    snprintf(path, sizeof path, "%s/models/%s/1_Pooling/config.json", s->cfg.registry, store_model_name(m));
    json_t *c = json_load_file(path, 0, NULL);
    proto_pooling p = PROTO_POOL_CLS;
    if (c && json_is_true(json_object_get(c, "pooling_mode_mean_tokens"))) p = PROTO_POOL_MEAN;
    json_decref(c);
    return p;
}

/* Bytes of a sentence-transformers config read for its prompts. */
#define ST_CONFIG_MAX (1 << 20)

/* Puts the model's prompt ("prompt_name", else its default_prompt_name) before each text input.
 * Returns 0, or an error status with msg set. */
static int apply_prompt(srv_request *r, const store_model *m, const proto_limits *lim, char *msg, size_t msz) {
    char path[POOLING_PATH_MAX];
    snprintf(path, sizeof path, "%s/models/%s/config_sentence_transformers.json", r->srv->cfg.registry, store_model_name(m));
    char *text = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    bool found = f != NULL;
    if (f) {
        if ((text = malloc(ST_CONFIG_MAX))) n = fread(text, 1, ST_CONFIG_MAX, f);
        fclose(f);
    }
    eng_err e = {0};
    size_t plen = 0;
    char *prompt = proto_tei_prompt(text, n, r->preq.prompt_name, &plen, &e);
    free(text);
    if (!prompt && r->preq.prompt_name && !found) {
        snprintf(msg, msz, "\"prompt_name\": model %s has no sentence-transformers prompts (no config_sentence_transformers.json)",
                 store_model_name(m));
        return ENG_INVALID_ARGUMENT;
    }
    if (!prompt) {
        snprintf(msg, msz, "%s", e.msg);
        return e.code;
    }
    int rc = 0;
    for (int i = 0; !rc && i < r->preq.n_inputs; i++) {
        if (!r->preq.inputs[i].ids) rc = proto_req_prefix_text(&r->preq, i, prompt, plen, lim, &e);
        else if (r->preq.prompt_name) rc = eng_err_set(&e, ENG_INVALID_ARGUMENT, "inputs[%d]: \"prompt_name\" applies to texts, not token ids", i);
    }
    free(prompt);
    if (rc) snprintf(msg, msz, "%s", e.msg);
    return rc;
}

/* "truncation_direction": "left": each text over max_len tokens is tokenized whole and keeps its
 * leading special tokens and its last tokens, as token ids. Returns 0, or an error status with msg
 * set. */
static int truncate_left(srv_request *r, const store_model *m, char *msg, size_t msz) {
    int max_len = store_model_max_tokens(m);
    if (r->srv->cfg.max_seq_len > 0 && r->srv->cfg.max_seq_len < max_len) max_len = r->srv->cfg.max_seq_len;
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    for (int i = 0; i < r->preq.n_inputs; i++) {
        const proto_text *x = &r->preq.inputs[i];
        if (x->ids) continue;
        if (x->pair) {
            snprintf(msg, msz, "inputs[%d]: \"truncation_direction\": \"left\" is for single texts, not pairs", i);
            return ENG_INVALID_ARGUMENT;
        }
        eng_tok_encoding e = {0};
        eng_err te = {0};
        int rc = eng_tok_encode(store_model_tokenizer(m), x->text, x->len, NULL, 0, &tp, &e, &te);
        if (rc) {
            snprintf(msg, msz, "inputs[%d]: %s", i, te.msg);
            return srv_status_of_tokenize(rc);
        }
        size_t lead = 0, cut = e.n > (size_t)max_len ? e.n - (size_t)max_len : 0;
        while (lead < e.n && e.special_mask[lead]) lead++;
        if (cut) {
            memmove(e.ids + lead, e.ids + lead + cut, (e.n - lead - cut) * sizeof *e.ids);
            memmove(e.type_ids + lead, e.type_ids + lead + cut, (e.n - lead - cut) * sizeof *e.type_ids);
            rc = proto_req_set_ids(&r->preq, i, e.ids, e.type_ids, (int)(e.n - cut));
        }
        eng_tok_encoding_free(&e);
        if (rc) {
            snprintf(msg, msz, "out of memory");
            return ENG_NO_MEMORY;
        }
    }
    return 0;
}

/* Answers 415 or 413 when the body is not JSON or was over the limit; returns whether it did. */
enum MHD_Result srv__embed(srv_request *r) {
    srv_server *s = r->srv;
    enum MHD_Result ans = MHD_YES;
    if (srv__refuse_unready(r, &ans) || srv__refuse_json_body(r, &ans) || srv__refuse_busy(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(s);
    eng_err pe = {0};
    bool openai = r->route == SRV_ROUTE_OPENAI_EMBEDDINGS, all = r->route == SRV_ROUTE_TEI_EMBED_ALL;
    int rc = (openai ? proto_openai_embed_parse : proto_embed_parse)(r->body ? r->body : "", r->body_len, &lim, &r->preq, &pe);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    if (all && (r->preq.pooling != PROTO_POOL_DEFAULT || r->preq.dimensions))
        return srv__send_error(r, ENG_INVALID_ARGUMENT, "/embed_all answers every token's vector: no \"pooling\" or \"dimensions\"");
    if (all) r->preq.pooling = PROTO_POOL_NONE, r->preq.normalize = 0;
    store_model *m = pick_model(r, r->preq.model, &ans);
    if (!m) return ans;
    char emsg[600];
    int H = eng_model_config(store_model_engine(m))->hidden;
    if (r->preq.dimensions > H) rc = ENG_INVALID_ARGUMENT, snprintf(emsg, sizeof emsg, "\"dimensions\" is %d, over the model's %d",
                                                                     r->preq.dimensions, H);
    if (!rc) rc = apply_prompt(r, m, &lim, emsg, sizeof emsg);
    if (!rc && r->preq.truncate && r->preq.truncate_left) rc = truncate_left(r, m, emsg, sizeof emsg);
    if (rc) {
        store_model_release(m);
        return srv__send_error(r, (eng_status)rc, "%s", emsg);
    }
    srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        store_model_release(m);
        return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    }
    r->job = j;
    j->form = SRV_ANSWER_EMBED;
    j->model = j->model_ref = m;
    j->model_id = r->model_id;
    j->req = r;
    j->request_id = r->id;
    j->t_request = r->t0;
    j->texts = r->preq.inputs;
    j->n_inputs = r->preq.n_inputs;
    j->latency_ms = j->predicted_ms = -1;
    j->normalize = r->preq.normalize;
    j->dimensions = r->preq.dimensions;
    j->openai = openai, j->base64 = r->preq.base64;
    j->dialect = srv__route_dialect(r->route);
    j->pooling = r->preq.pooling != PROTO_POOL_DEFAULT ? r->preq.pooling : model_pooling(s, m);
    if (j->pooling == PROTO_POOL_POOLER && !eng_model_config(store_model_engine(m))->has_pooler)
        return srv__send_error(r, ENG_INVALID_ARGUMENT, "model %s has no pooler; use \"pooling\": \"cls\" or \"mean\"",
                               store_model_name(m));
    if (!(j->enc = calloc((size_t)j->n_inputs, sizeof *j->enc)) || !(j->truncated = calloc((size_t)j->n_inputs, sizeof(int))))
        return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    eng_status code = ENG_OK;
    char msg[600];
    if (srv__job_tokenize(s, j, &r->preq, &code, msg, sizeof msg)) return srv__send_error(r, code, "%s", msg);
    /* counted like predict's: hook_done takes it off when the job is done */
    atomic_fetch_add(&s->n_suspended, 1);
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    r->admitted = false; /* the job holds the place from here on */
    srv__sched_submit(s->sched, j);
    return MHD_YES;
}

enum MHD_Result srv__tokenize(srv_request *r) {
    srv_server *s = r->srv;
    enum MHD_Result ans = MHD_YES;
    if (srv__refuse_json_body(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(s);
    eng_err pe = {0};
    int rc = proto_tokenize_parse(r->body ? r->body : "", r->body_len, &lim, &r->preq, &pe);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    store_model *m = pick_model(r, r->preq.model, &ans);
    if (!m) return ans;
    const eng_tokenizer *tok = store_model_tokenizer(m);
    int n = r->preq.n_inputs;
    eng_tok_encoding *enc = calloc((size_t)n, sizeof *enc);
    proto_tokens *pt = calloc((size_t)n, sizeof *pt);
    const char **names = NULL;
    size_t total = 0;
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    tp.add_special_tokens = r->preq.add_special_tokens;
    eng_status code = ENG_OK;
    char msg[ENG_ERR_MSG_MAX + 32] = "out of memory";
    if (!enc || !pt) code = ENG_NO_MEMORY;
    for (int i = 0; code == ENG_OK && i < n; i++) {
        const proto_text *x = &r->preq.inputs[i];
        eng_err e = {0};
        int trc = eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &tp, &enc[i], &e);
        if (trc) {
            code = srv_status_of_tokenize(trc);
            snprintf(msg, sizeof msg, "inputs[%d]: %s", i, e.msg);
        }
        total += enc[i].n;
    }
    if (code == ENG_OK && !(names = calloc(total + 1, sizeof *names))) code = ENG_NO_MEMORY;
    char *body = NULL;
    size_t len = 0;
    if (code == ENG_OK) {
        const char **nm = names;
        for (int i = 0; i < n; i++) {
            const eng_tok_encoding *e = &enc[i];
            for (size_t k = 0; k < e->n; k++) {
                const char *t = eng_tok_id_to_token(tok, e->ids[k]);
                nm[k] = t ? t : "";
            }
            pt[i] = (proto_tokens){.n = (int)e->n, .ids = e->ids, .tokens = nm, .offsets = e->offsets,
                                   .byte_offsets = e->byte_offsets, .seq_ids = e->seq_ids, .special = e->special_mask,
                                   .text = r->preq.inputs[i].text, .pair = r->preq.inputs[i].pair};
            nm += e->n;
        }
        if (!(body = proto_tokenize_encode(pt, n, &len))) code = ENG_NO_MEMORY;
    }
    for (int i = 0; enc && i < n; i++) eng_tok_encoding_free(&enc[i]);
    free(enc), free(pt), free(names);
    store_model_release(m);
    if (code != ENG_OK) return srv__send_error(r, code, "%s", msg);
    return srv__send_json(r, 200, body, len);
}

enum MHD_Result srv__tei_info(srv_request *r) {
    srv_server *s = r->srv;
    const char *id = NULL;
    eng_status code = ENG_OK;
    char msg[SRV_MODEL_MSG_MAX];
    store_model *m = srv__model_resolve(s, NULL, SRV_MODEL_FIRST, &id, &code, msg, sizeof msg);
    if (!m) return srv__send_error(r, code, "%s", msg);
    proto_tei_info ti = {.model_id = id, .dtype = eng_model_precision(store_model_engine(m)).name,
                         .pooling = proto_pooling_name(model_pooling(s, m)), .version = ADAPTERD_VERSION_STRING,
                         .max_concurrent = s->cfg.max_queue, .max_input_length = store_model_max_tokens(m),
                         .max_batch_tokens = s->cfg.max_batch_tokens, .max_client_batch = s->cfg.max_inputs};
    size_t len = 0;
    char *j = proto_tei_info_encode(&ti, &len);
    store_model_release(m);
    return srv__send_json(r, 200, j, len);
}

enum MHD_Result srv__tei_decode(srv_request *r) {
    enum MHD_Result ans = MHD_YES;
    if (srv__refuse_json_body(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(r->srv);
    eng_err pe = {0};
    int rc = proto_tei_decode_parse(r->body ? r->body : "", r->body_len, &lim, &r->preq, &pe);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    store_model *m = pick_model(r, NULL, &ans);
    if (!m) return ans;
    int n = r->preq.n_inputs, bad = -1, at = 0;
    char **texts = calloc((size_t)n, sizeof *texts);
    bool oom = !texts;
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    oom |= !lens;
    /* the engine's decoder for the model's tokenizer kind (WordPiece, byte-level BPE, SentencePiece) */
    for (int i = 0; !oom && bad < 0 && i < n; i++) {
        const proto_text *x = &r->preq.inputs[i];
        int dr = eng_tok_decode(store_model_tokenizer(m), x->ids, x->n_ids, !r->preq.add_special_tokens, &texts[i], &lens[i], &bad);
        oom = dr == ENG_NO_MEMORY;
        at = i;
    }
    size_t len = 0;
    char *body = oom || bad >= 0 ? NULL : proto_tei_decode_encode((const char *const *)texts, lens, n, &len);
    free(lens);
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    store_model_release(m);
    if (bad >= 0)
        return srv__send_error(r, ENG_INVALID_ARGUMENT, "ids[%d][%d] is not in the model's vocabulary", at, bad);
    return srv__send_json(r, 200, body, len);
}
