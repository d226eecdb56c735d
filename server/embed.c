/* embed.c - the job of an embedding request (POST /v1/embed, TEI's POST /, /embed and /embed_all,
 * OpenAI's POST /v1/embeddings), and the routes answered on the MHD thread beside them: POST
 * /v1/tokenize and TEI's /tokenize, TEI's /decode and GET /info.
 *
 * An embed is a pass with no task: it comes through the front door like a prediction (front.c: one
 * admission, the model acquired once, the same scheduler, bounded queue and dynamic batching), but the
 * worker runs eng_encode - the encoder alone, which gives every row's last hidden state and the pooler
 * output - and only batches embeds together (scheduler.c). Pooling and normalization happen on the
 * worker (respond.c). The pooling a request does not name is the model's: its sentence-transformers
 * folder `1_Pooling/config.json` says mean or CLS; without one, CLS.
 *
 * What a request asks comes decoded by its protocol's codec (proto/: /v1/embed's and TEI's fields,
 * /embed_all as "pooling": "none" without normalization, OpenAI's). "prompt_name" puts the named prompt
 * of the model's sentence-transformers config (config_sentence_transformers.json; its
 * default_prompt_name when not named) before each text, "truncation_direction": "left" cuts a text's
 * start (tokenized whole, then the first tokens after the leading special tokens dropped), "dimensions"
 * keeps the first N values of each vector before normalizing (Matryoshka).
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

/* What an embedding reads from its model's folder, read once at start-up (the registry's models are
 * fixed when it opens), so a request's path never touches the disk: the model's own pooling
 * (sentence-transformers' 1_Pooling/config.json, pooling_mode_mean_tokens or pooling_mode_cls_token;
 * else CLS) and its sentence-transformers config (config_sentence_transformers.json: prompts). */
struct srv_model_files {
    store_model *m;              /* a reference */
    proto_pooling pooling;
    char *st_config;             /* the config's bytes (st_len), or NULL when the model has none */
    size_t st_len;
};

/* Bytes of a sentence-transformers config read for its prompts. */
#define ST_CONFIG_MAX (1 << 20)

int srv__model_files_load(srv_server *s) {
    int n = store_n_models(s->reg);
    if (!(s->model_files = calloc((size_t)n + 1, sizeof *s->model_files))) return ENG_NO_MEMORY;
    for (int i = 0; i < n; i++) {
        store_model *m = store_model_acquire_at(s->reg, i);
        if (!m) continue;
        srv_model_files *mf = &s->model_files[s->n_model_files++];
        mf->m = m;
        char path[POOLING_PATH_MAX];
        snprintf(path, sizeof path, "%s/models/%s/1_Pooling/config.json", s->cfg.registry, store_model_name(m));
        json_t *c = json_load_file(path, 0, NULL);
        mf->pooling = c && json_is_true(json_object_get(c, "pooling_mode_mean_tokens")) ? PROTO_POOL_MEAN : PROTO_POOL_CLS;
        json_decref(c);
        snprintf(path, sizeof path, "%s/models/%s/config_sentence_transformers.json", s->cfg.registry, store_model_name(m));
        FILE *fp = fopen(path, "rb");
        if (!fp) continue;
        char *text = malloc(ST_CONFIG_MAX);
        size_t len = text ? fread(text, 1, ST_CONFIG_MAX, fp) : 0;
        fclose(fp);
        if (!text) return ENG_NO_MEMORY;
        char *fit = realloc(text, len + 1);
        mf->st_config = fit ? fit : text;
        mf->st_len = len;
    }
    return 0;
}

void srv__model_files_free(srv_server *s) {
    for (int i = 0; i < s->n_model_files; i++) {
        store_model_release(s->model_files[i].m);
        free(s->model_files[i].st_config);
    }
    free(s->model_files);
    s->model_files = NULL, s->n_model_files = 0;
}

/* m's files as read at start-up; a model without (none when the server loaded them): CLS, no prompts. */
static srv_model_files files_of(const srv_server *s, const store_model *m) {
    for (int i = 0; i < s->n_model_files; i++)
        if (s->model_files[i].m == m) return s->model_files[i];
    return (srv_model_files){.pooling = PROTO_POOL_CLS};
}

static proto_pooling model_pooling(const srv_server *s, const store_model *m) { return files_of(s, m).pooling; }

/* Puts the model's prompt ("prompt_name", else its default_prompt_name) before each text input.
 * Returns 0, or an error status with msg set. */
static int apply_prompt(srv_front *f, const store_model *m, const proto_limits *lim, char *msg, size_t msz) {
    srv_model_files mf = files_of(f->s, m);
    bool found = mf.st_config != NULL;
    eng_err e = {0};
    size_t plen = 0;
    char *prompt = proto_tei_prompt(mf.st_config, mf.st_len, f->req.prompt_name, &plen, &e);
    if (!prompt && f->req.prompt_name && !found) {
        snprintf(msg, msz, "\"prompt_name\": model %s has no sentence-transformers prompts (no config_sentence_transformers.json)",
                 store_model_name(m));
        return ENG_INVALID_ARGUMENT;
    }
    if (!prompt) {
        snprintf(msg, msz, "%s", e.msg);
        return e.code;
    }
    int rc = 0;
    for (int i = 0; !rc && i < f->req.n_inputs; i++) {
        if (!f->req.inputs[i].ids) rc = proto_req_prefix_text(&f->req, i, prompt, plen, lim, &e);
        else if (f->req.prompt_name) rc = eng_err_set(&e, ENG_INVALID_ARGUMENT, "inputs[%d]: \"prompt_name\" applies to texts, not token ids", i);
    }
    free(prompt);
    if (rc) snprintf(msg, msz, "%s", e.msg);
    return rc;
}

/* "truncation_direction": "left": each text over max_len tokens is tokenized whole and keeps its
 * leading special tokens and its last tokens, as token ids. Returns 0, or an error status with msg
 * set. */
static int truncate_left(srv_front *f, const store_model *m, char *msg, size_t msz) {
    int max_len = store_model_max_tokens(m);
    if (f->s->cfg.max_seq_len > 0 && f->s->cfg.max_seq_len < max_len) max_len = f->s->cfg.max_seq_len;
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    for (int i = 0; i < f->req.n_inputs; i++) {
        const proto_text *x = &f->req.inputs[i];
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
            return srv__status_of_tokenize(rc);
        }
        size_t lead = 0, cut = e.n > (size_t)max_len ? e.n - (size_t)max_len : 0;
        while (lead < e.n && e.special_mask[lead]) lead++;
        if (cut) {
            memmove(e.ids + lead, e.ids + lead + cut, (e.n - lead - cut) * sizeof *e.ids);
            memmove(e.type_ids + lead, e.type_ids + lead + cut, (e.n - lead - cut) * sizeof *e.type_ids);
            rc = proto_req_set_ids(&f->req, i, e.ids, e.type_ids, (int)(e.n - cut));
        }
        eng_tok_encoding_free(&e);
        if (rc) {
            snprintf(msg, msz, "out of memory");
            return ENG_NO_MEMORY;
        }
    }
    return 0;
}

int srv__embed_job(srv_front *f, srv_job *j) {
    srv_server *s = f->s;
    store_model *m = j->model = j->model_ref;
    proto_limits lim = srv__proto_limits(s);
    int H = eng_model_config(store_model_engine(m))->hidden, rc = 0;
    if (f->req.dimensions > H)
        rc = ENG_INVALID_ARGUMENT, snprintf(f->msg, sizeof f->msg, "\"dimensions\" is %d, over the model's %d", f->req.dimensions, H);
    if (!rc) rc = apply_prompt(f, m, &lim, f->msg, sizeof f->msg);
    if (!rc && f->req.truncate && f->req.truncate_left) rc = truncate_left(f, m, f->msg, sizeof f->msg);
    j->texts = f->req.inputs; /* a prompt or a left cut may have replaced an input */
    j->pooling = f->req.pooling != PROTO_POOL_DEFAULT ? f->req.pooling : model_pooling(s, m);
    if (!rc && j->pooling == PROTO_POOL_NONE && f->req.long_read.chunks)
        rc = ENG_INVALID_ARGUMENT,
        snprintf(f->msg, sizeof f->msg, "\"long\" chunks pool each window into one vector: it needs \"pooling\" other than \"none\"");
    if (!rc && j->pooling == PROTO_POOL_POOLER && !eng_model_config(store_model_engine(m))->has_pooler)
        rc = ENG_INVALID_ARGUMENT,
        snprintf(f->msg, sizeof f->msg, "model %s has no pooler; use \"pooling\": \"cls\" or \"mean\"", store_model_name(m));
    if (!rc && (!(j->enc = calloc((size_t)j->n_inputs, sizeof *j->enc)) || !(j->truncated = calloc((size_t)j->n_inputs, sizeof(int)))))
        rc = ENG_NO_MEMORY, snprintf(f->msg, sizeof f->msg, "out of memory");
    if (rc) {
        f->code = (eng_status)rc;
        return -1;
    }
    return srv__job_tokenize(s, j, &f->req, &f->code, f->msg, sizeof f->msg);
}

enum MHD_Result srv__tokenize(srv_request *r) {
    proto_predict_req *q = &r->front.req; /* freed with the request */
    srv_server *s = r->srv;
    enum MHD_Result ans = MHD_YES;
    if (srv__refuse_json_body(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(s);
    eng_err pe = {0};
    int rc = proto_tokenize_parse(r->body ? r->body : "", r->body_len, &lim, q, &pe);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    store_model *m = pick_model(r, q->model, &ans);
    if (!m) return ans;
    const eng_tokenizer *tok = store_model_tokenizer(m);
    int n = q->n_inputs;
    eng_tok_encoding *enc = calloc((size_t)n, sizeof *enc);
    proto_tokens *pt = calloc((size_t)n, sizeof *pt);
    const char **names = NULL;
    size_t total = 0;
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    tp.add_special_tokens = q->add_special_tokens;
    eng_status code = ENG_OK;
    char msg[ENG_ERR_MSG_MAX + 32] = "out of memory";
    if (!enc || !pt) code = ENG_NO_MEMORY;
    for (int i = 0; code == ENG_OK && i < n; i++) {
        const proto_text *x = &q->inputs[i];
        eng_err e = {0};
        int trc = eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &tp, &enc[i], &e);
        if (trc) {
            code = srv__status_of_tokenize(trc);
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
                                   .text = q->inputs[i].text, .pair = q->inputs[i].pair};
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
    proto_predict_req *q = &r->front.req; /* freed with the request */
    enum MHD_Result ans = MHD_YES;
    if (srv__refuse_json_body(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(r->srv);
    eng_err pe = {0};
    int rc = proto_tei_decode_parse(r->body ? r->body : "", r->body_len, &lim, q, &pe);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    store_model *m = pick_model(r, NULL, &ans);
    if (!m) return ans;
    int n = q->n_inputs, bad = -1, at = 0;
    char **texts = calloc((size_t)n, sizeof *texts);
    bool oom = !texts;
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    oom |= !lens;
    /* the engine's decoder for the model's tokenizer kind (WordPiece, byte-level BPE, SentencePiece) */
    for (int i = 0; !oom && bad < 0 && i < n; i++) {
        const proto_text *x = &q->inputs[i];
        int dr = eng_tok_decode(store_model_tokenizer(m), x->ids, x->n_ids, !q->add_special_tokens, &texts[i], &lens[i], &bad);
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
