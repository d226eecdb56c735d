/* spm_model.c - SentencePiece model files (spm.model, spiece.model, sentencepiece.bpe.model) read
 * directly: a small protobuf reader of ModelProto, and the tokenizer built from it.
 *
 * Only the fields tokenization needs are read; everything else is skipped by wire type, so newer
 * files with more fields load. ModelProto: pieces = 1 (piece = 1, score = 2, type = 3),
 * trainer_spec = 2 (model_type = 3, treat_whitespace_as_suffix = 24, byte_fallback = 35),
 * normalizer_spec = 3 (precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
 * escape_whitespaces = 5; the three flags default to true). Every length is checked against the
 * buffer, so a corrupt file is ENG_FORMAT, never a read past its end.
 *
 * Ids: SentencePiece's own (DeBERTa-v3, T5), or fairseq's dictionary as Hugging Face's CamemBERT and
 * XLM-R tokenizers map them: a fixed table first (<s>NOTUSED/<pad>/</s>NOTUSED/<unk> for CamemBERT,
 * <s>/<pad>/</s>/<unk> for XLM-R), every other piece shifted by the offset (4 or 1), the unknown
 * piece to <unk>'s id, and <mask> after the last piece. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define MAX_PIECES ((1 << 22) - 16)

typedef struct {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *r, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* Reads one field header and its payload: varint in *v, length-delimited in *sub, fixed32 in *v. */
static int pb_field(pb *r, uint32_t *field, uint32_t *wire, uint64_t *v, pb *sub) {
    uint64_t key;
    if (pb_varint(r, &key) || key >> 32) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    switch (*wire) {
    case 0:
        return pb_varint(r, v);
    case 1:
        if (r->end - r->p < 8) return -1;
        r->p += 8;
        return 0;
    case 2:
        if (pb_varint(r, v) || *v > (uint64_t)(r->end - r->p)) return -1;
        sub->p = r->p;
        sub->end = r->p + *v;
        r->p += *v;
        return 0;
    case 5:
        if (r->end - r->p < 4) return -1;
        *v = (uint64_t)r->p[0] | ((uint64_t)r->p[1] << 8) | ((uint64_t)r->p[2] << 16) | ((uint64_t)r->p[3] << 24);
        r->p += 4;
        return 0;
    default:
        return -1;
    }
}

typedef struct {
    const char **name;
    uint32_t *len;
    int32_t n, cap;
    int model_type; /* 1 unigram, 2 bpe */
    bool byte_fallback, ws_suffix;
    const uint8_t *charsmap;
    size_t charsmap_len;
    bool dummy, rm_ws, esc;
} spm_file;

static int parse_piece(eng_tokenizer *tok, spm_file *f, pb r) {
    if (f->n == f->cap) {
        int32_t cap = f->cap ? f->cap * 2 : 1024;
        if (cap > MAX_PIECES) return ENG_FORMAT;
        const char **nm = realloc(f->name, (size_t)cap * sizeof *nm);
        if (!nm) return ENG_NO_MEMORY;
        f->name = nm;
        uint32_t *ln = realloc(f->len, (size_t)cap * sizeof *ln);
        if (!ln) return ENG_NO_MEMORY;
        f->len = ln;
        double *sc = realloc(tok->score, (size_t)cap * sizeof *sc);
        if (!sc) return ENG_NO_MEMORY;
        tok->score = sc;
        uint8_t *ty = realloc(tok->ptype, (size_t)cap);
        if (!ty) return ENG_NO_MEMORY;
        tok->ptype = ty;
        f->cap = cap;
    }
    int32_t i = f->n;
    f->name[i] = "";
    f->len[i] = 0;
    tok->score[i] = 0;
    tok->ptype[i] = ENG__SP_NORMAL;
    while (r.p < r.end) {
        uint32_t field, wire;
        uint64_t v;
        pb sub;
        if (pb_field(&r, &field, &wire, &v, &sub)) return ENG_FORMAT;
        if (field == 1 && wire == 2) {
            size_t bad;
            if (v > 1024 || eng__utf8_invalid(sub.p, v, &bad)) return ENG_FORMAT;
            f->name[i] = (const char *)sub.p;
            f->len[i] = (uint32_t)v;
        } else if (field == 2 && wire == 5) {
            uint32_t bits = (uint32_t)v;
            float s;
            memcpy(&s, &bits, 4);
            if (s != s) return ENG_FORMAT; /* NaN */
            tok->score[i] = s;
        } else if (field == 3 && wire == 0) {
            if (v < 1 || v > 6) return ENG_FORMAT;
            tok->ptype[i] = (uint8_t)v;
        }
    }
    f->n++;
    return 0;
}

static int parse_spec(spm_file *f, pb r, bool trainer) {
    while (r.p < r.end) {
        uint32_t field, wire;
        uint64_t v;
        pb sub;
        if (pb_field(&r, &field, &wire, &v, &sub)) return ENG_FORMAT;
        if (trainer && wire == 0) {
            if (field == 3) f->model_type = (int)v;
            else if (field == 24) f->ws_suffix = v != 0;
            else if (field == 35) f->byte_fallback = v != 0;
        } else if (!trainer) {
            if (field == 2 && wire == 2) f->charsmap = sub.p, f->charsmap_len = (size_t)v;
            else if (field == 3 && wire == 0) f->dummy = v != 0;
            else if (field == 4 && wire == 0) f->rm_ws = v != 0;
            else if (field == 5 && wire == 0) f->esc = v != 0;
        }
    }
    return 0;
}

static int vocab_put(eng_tokenizer *tok, const char *s, size_t n, int32_t id) {
    int64_t e = eng__strmap_intern(&tok->vocab, s, n, id, NULL);
    if (e < 0) return ENG_NO_MEMORY;
    if (id >= tok->n_ids) tok->n_ids = id + 1;
    return 0;
}

static int build_ids(eng_tokenizer *tok, const spm_file *f, int fairseq) {
    static const char *const camembert[] = {"<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>"};
    static const char *const xlmr[] = {"<s>", "<pad>", "</s>", "<unk>"};
    const char *const *table = fairseq == 4 ? camembert : fairseq ? xlmr : NULL;
    tok->out_id = malloc((size_t)(f->n ? f->n : 1) * sizeof *tok->out_id);
    if (!tok->out_id) return ENG_NO_MEMORY;
    for (int32_t i = 0; i < f->n; i++) {
        int32_t id = i + fairseq;
        if (table) {
            if (i == tok->sp_unk) id = 3;
            for (int k = 0; k < 4; k++)
                if (f->len[i] == strlen(table[k]) && !memcmp(f->name[i], table[k], f->len[i])) id = k;
        }
        tok->out_id[i] = id;
        /* a piece name used twice keeps its first id */
        if (eng__strmap_find(&tok->vocab, f->name[i], f->len[i]) < 0 && vocab_put(tok, f->name[i], f->len[i], id))
            return ENG_NO_MEMORY;
    }
    if (table) {
        for (int k = 0; k < 4; k++)
            if (eng__strmap_find(&tok->vocab, table[k], strlen(table[k])) < 0 &&
                vocab_put(tok, table[k], strlen(table[k]), k))
                return ENG_NO_MEMORY;
        if (vocab_put(tok, "<mask>", 6, f->n + fairseq)) return ENG_NO_MEMORY;
    }
    return 0;
}

int eng__spm_load(eng_tokenizer *tok, const uint8_t *buf, size_t n, int fairseq, eng_err *err) {
    spm_file f = {.dummy = true, .rm_ws = true, .esc = true, .model_type = 1};
    pb r = {buf, buf + n};
    int rc = 0;
    while (!rc && r.p < r.end) {
        uint32_t field, wire;
        uint64_t v;
        pb sub;
        if (pb_field(&r, &field, &wire, &v, &sub)) rc = ENG_FORMAT;
        else if (field == 1 && wire == 2) rc = parse_piece(tok, &f, sub);
        else if ((field == 2 || field == 3) && wire == 2) rc = parse_spec(&f, sub, field == 2);
    }
    if (rc == ENG_NO_MEMORY) rc = eng_err_set(err, rc, "out of memory reading the SentencePiece model");
    else if (rc) rc = eng_err_set(err, rc, "SentencePiece model: malformed protobuf (piece %d)", f.n);
    else if (!f.n) rc = eng_err_set(err, ENG_FORMAT, "SentencePiece model: no pieces");
    else if (f.model_type != 1 && f.model_type != 2)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "SentencePiece model type %d (only unigram and bpe are supported)",
                         f.model_type);
    else if (f.ws_suffix)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "SentencePiece treat_whitespace_as_suffix is not supported");
    if (!rc && f.charsmap_len) {
        rc = eng__charsmap_init(&tok->charsmap, f.charsmap, f.charsmap_len);
        if (rc) rc = eng_err_set(err, rc, "SentencePiece model: malformed precompiled_charsmap");
    }
    if (!rc) {
        tok->kind = f.model_type == 2 ? ENG_TOK_SPM_BPE : ENG_TOK_UNIGRAM;
        tok->n_pieces = f.n;
        tok->spm_exact = true;
        tok->byte_fallback = f.byte_fallback;
        tok->spm_dummy_prefix = f.dummy, tok->spm_remove_ws = f.rm_ws, tok->spm_escape_ws = f.esc;
        tok->norm = ENG__NORM_SEQ;
        tok->pretok = ENG__PRETOK_NONE;
        tok->nsteps = calloc(1, sizeof *tok->nsteps);
        if (!tok->nsteps) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    if (!rc) {
        tok->nsteps[0].kind = ENG__NS_SPM;
        tok->n_nsteps = 1;
        rc = eng__pieces_index(tok, f.name, f.len, err);
    }
    if (!rc && tok->sp_unk < 0) rc = eng_err_set(err, ENG_FORMAT, "SentencePiece model has no unknown piece");
    if (!rc && build_ids(tok, &f, fairseq)) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    if (!rc) tok->unk_id = tok->out_id[tok->sp_unk];
    free(f.name);
    free(f.len);
    return rc;
}
