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
#include "predict.h"
#include "respond.h"

/* Longest model name quoted back in an error. */
#define QUOTED_MODEL_MAX 100
/* Bytes of a path to a model's pooling config. */
#define POOLING_PATH_MAX 1400

/* A new reference to the model the request names, or to the registry's only model; NULL with an
 * error answered. */
static store_model *pick_model(srv_request *r, const char *name, enum MHD_Result *ans) {
    store_registry *reg = r->srv->reg;
    int n = store_n_models(reg);
    for (int i = 0; i < n && (name || n == 1); i++) {
        store_model *m = store_model_acquire_at(reg, i);
        if (m && (!name || !strcmp(store_model_name(m), name))) return m;
        store_model_release(m);
    }
    if (name)
        *ans = srv__send_error(r, ENG_NOT_FOUND, "unknown model \"%.*s\" (GET /v1/models lists them)", QUOTED_MODEL_MAX, name);
    else
        *ans = srv__send_error(r, ENG_INVALID_ARGUMENT, "the registry serves %d models; name one in \"model\" (GET /v1/models)", n);
    return NULL;
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

/* Answers 415 or 413 when the body is not JSON or was over the limit; returns whether it did. */
enum MHD_Result srv__embed(srv_request *r) {
    srv_server *s = r->srv;
    enum MHD_Result ans = MHD_YES;
    if (srv__refuse_unready(r, &ans) || srv__refuse_json_body(r, &ans) || srv__refuse_busy(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(s);
    eng_err pe = {0};
    int rc = proto_embed_parse(r->body ? r->body : "", r->body_len, &lim, &r->preq, &pe);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    store_model *m = pick_model(r, r->preq.model, &ans);
    if (!m) return ans;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        store_model_release(m);
        return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    }
    r->job = j;
    j->form = SRV_ANSWER_EMBED;
    j->model = j->model_ref = m;
    j->req = r;
    j->request_id = r->id;
    j->t_request = r->t0;
    j->texts = r->preq.inputs;
    j->n_inputs = r->preq.n_inputs;
    j->latency_ms = j->predicted_ms = -1;
    j->normalize = r->preq.normalize;
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
