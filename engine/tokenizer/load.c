/* load.c - building an eng_tokenizer from a checkpoint directory.
 *
 * tokenizer.json is the source of truth when present: its normalizer, pre_tokenizer, model,
 * post_processor, added_tokens and truncation sections map onto the fields of struct
 * eng_tokenizer. Types outside the BERT/RoBERTa/GPT-2 family are refused with ENG_UNSUPPORTED
 * rather than approximated, because a tokenizer that is almost right gives silently wrong ids.
 * Without tokenizer.json the same structure is built from vocab.txt (WordPiece, the BERT pipeline
 * Hugging Face's converter builds) or vocab.json + merges.txt (byte-level BPE, RoBERTa's template
 * when <s> and </s> exist), with flags and special tokens from tokenizer_config.json.
 *
 * Everything is parsed from memory (eng_tokenizer_load_files); eng_tokenizer_load reads the files
 * the folder has into memory first, so both take the same parse code. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#include "engine/files.h"
#include "tokenizer/tok_internal.h"

#define DEFAULT_MAX_LENGTH 512 /* model_max_length when tokenizer_config.json has none (BERT's) */
/* Largest token id accepted. The id table is sized by the largest id, so one huge id in a small file
 * would allocate gigabytes; real vocabularies of this family stay under 300k. */
#define MAX_TOKEN_ID ((1 << 22) - 1)
/* Largest tokenizer file read (XLM-R's tokenizer.json is 17 MB). */
#define TOKENIZER_FILE_MAX_BYTES ((size_t)1 << 30)

/* ints_as_real: tokenizer_config.json holds model_max_length = 1e30 written as an integer, which
 * jansson refuses as an integer. */
static int load_json(const eng_tok_files *f, const eng_tok_text *src, const char *name, bool ints_as_real, json_t **out,
                     eng_err *err) {
    json_error_t je;
    *out = json_loadb(src->text, src->len, JSON_DECODE_ANY | (ints_as_real ? JSON_DECODE_INT_AS_REAL : 0), &je);
    if (!*out)
        return eng_err_set(err, ENG_FORMAT, "%s%s%s: %s (line %d, column %d)", f->dir ? f->dir : "", f->dir ? "/" : "",
                           name, je.text, je.line, je.column);
    return 0;
}

/* A token name in tokenizer_config.json: a string or {"content": ...}. */
static const char *token_name(const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool cfg_bool(const json_t *cfg, const char *key, bool dflt) {
    const json_t *v = json_object_get(cfg, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* -1 unset (null/missing), 0 false, 1 true */
static int tri_bool(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

/* id is taken wide (a JSON integer) so that an out-of-range value is refused, never truncated. */
static int set_vocab(eng_tokenizer *tok, const char *s, size_t n, int64_t id, eng_err *err) {
    if (id < 0) return eng_err_set(err, ENG_FORMAT, "negative token id %lld", (long long)id);
    if (id > MAX_TOKEN_ID)
        return eng_err_set(err, ENG_FORMAT, "token id %lld is over the limit of %d", (long long)id, MAX_TOKEN_ID);
    bool added;
    int64_t e = eng__strmap_intern(&tok->vocab, s, n, id, &added);
    if (e < 0) return eng_err_set(err, ENG_NO_MEMORY, "out of memory loading the vocabulary");
    tok->vocab.val[e] = id; /* a later duplicate wins, like a JSON object or Python dict */
    if (id >= tok->n_ids) tok->n_ids = id + 1;
    return 0;
}

static int add_added(eng_tokenizer *tok, const char *content, int64_t id, bool lstrip, bool rstrip, bool normalized,
                     bool special, eng_err *err) {
    size_t n = strlen(content);
    if (!n) return 0;
    if (id < 0 || id > MAX_TOKEN_ID) return set_vocab(tok, content, n, id, err); /* refused, with the id */
    for (int i = 0; i < tok->n_added; i++) /* the same content twice: keep the last */
        if (tok->added[i].len == n && !memcmp(tok->added[i].content, content, n)) {
            tok->added[i].id = id;
            tok->added[i].lstrip = lstrip, tok->added[i].rstrip = rstrip;
            tok->added[i].normalized = normalized, tok->added[i].special = special;
            return set_vocab(tok, content, n, id, err);
        }
    eng__added_token *a = realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof *a);
    if (!a) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    tok->added = a;
    char *c = strdup(content);
    if (!c) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    size_t bad;
    if (eng__utf8_invalid((const uint8_t *)c, n, &bad)) {
        free(c);
        return eng_err_set(err, ENG_FORMAT, "added token is not valid UTF-8");
    }
    tok->added[tok->n_added++] = (eng__added_token){c, (uint32_t)n, (int32_t)id, lstrip, rstrip, normalized, special};
    return set_vocab(tok, content, n, id, err);
}

static int32_t vocab_id(const eng_tokenizer *tok, const char *s) {
    if (!s) return -1;
    int64_t e = eng__strmap_find(&tok->vocab, s, strlen(s));
    return e < 0 ? -1 : tok->vocab.val[e];
}

/* ---- templates ---- */

static int tpl_add(eng__template *t, eng__tpl_kind kind, int32_t type_id, const int32_t *ids, int n_ids,
                   eng_err *err) {
    eng__tpl_item *it = realloc(t->items, (size_t)(t->n + 1) * sizeof *it);
    if (!it) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    t->items = it;
    eng__tpl_item x = {kind, type_id, NULL, 0};
    if (kind == ENG__TPL_SPECIAL) {
        x.ids = malloc((size_t)(n_ids ? n_ids : 1) * sizeof *x.ids);
        if (!x.ids) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        memcpy(x.ids, ids, (size_t)n_ids * sizeof *ids);
        x.n_ids = n_ids;
        t->n_special += n_ids;
    }
    t->items[t->n++] = x;
    return 0;
}

static void tpl_free(eng__template *t) {
    for (int i = 0; i < t->n; i++) free(t->items[i].ids);
    free(t->items);
    memset(t, 0, sizeof *t);
}

/* [cls] A [sep] / [cls] A [sep] (mid) B [sep]: BertProcessing (pair type 1) or RobertaProcessing
 * (everything type 0 and </s></s> between, as the Python library). */
static int tpl_cls_sep(eng_tokenizer *tok, int32_t cls, int32_t sep, bool roberta, eng_err *err) {
    int rc = tpl_add(&tok->single, ENG__TPL_SPECIAL, 0, &cls, 1, err);
    if (!rc) rc = tpl_add(&tok->single, ENG__TPL_SEQ_A, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->single, ENG__TPL_SPECIAL, 0, &sep, 1, err);
    int tb = roberta ? 0 : 1;
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SPECIAL, 0, &cls, 1, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SEQ_A, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SPECIAL, 0, &sep, 1, err);
    if (!rc && roberta) rc = tpl_add(&tok->pair, ENG__TPL_SPECIAL, 0, &sep, 1, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SEQ_B, tb, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SPECIAL, tb, &sep, 1, err);
    return rc;
}

/* No post-processor: A, and B with type id 1, nothing added. */
static int tpl_plain(eng_tokenizer *tok, eng_err *err) {
    int rc = tpl_add(&tok->single, ENG__TPL_SEQ_A, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SEQ_A, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SEQ_B, 1, NULL, 0, err);
    return rc;
}

static int parse_pair_spec(const json_t *v, int32_t *id) {
    /* ["[SEP]", 102] */
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 1))) return -1;
    *id = (int32_t)json_integer_value(json_array_get(v, 1));
    return 0;
}

static int parse_template(eng_tokenizer *tok, const json_t *pp, const json_t *list, eng__template *t,
                          eng_err *err) {
    const json_t *specials = json_object_get(pp, "special_tokens");
    size_t i;
    const json_t *item;
    int seen[2] = {0, 0}; /* A, B: the encoder sizes an encoding for each sequence once */
    if (!json_is_array(list)) return eng_err_set(err, ENG_FORMAT, "TemplateProcessing: template is not a list");
    json_array_foreach(list, i, item) {
        const json_t *sp = json_object_get(item, "SpecialToken");
        const json_t *sq = json_object_get(item, "Sequence");
        if (sp) {
            const char *name = json_string_value(json_object_get(sp, "id"));
            const json_t *def = name ? json_object_get(specials, name) : NULL;
            const json_t *ids = json_object_get(def, "ids");
            if (!json_is_array(ids))
                return eng_err_set(err, ENG_FORMAT, "TemplateProcessing: special token %s has no ids",
                                   name ? name : "?");
            int32_t v[16];
            size_t n = json_array_size(ids);
            if (n > 16) return eng_err_set(err, ENG_UNSUPPORTED, "TemplateProcessing: too many ids for %s", name);
            for (size_t j = 0; j < n; j++) v[j] = (int32_t)json_integer_value(json_array_get(ids, j));
            int rc = tpl_add(t, ENG__TPL_SPECIAL, (int32_t)json_integer_value(json_object_get(sp, "type_id")), v,
                             (int)n, err);
            if (rc) return rc;
        } else if (sq) {
            const char *id = json_string_value(json_object_get(sq, "id"));
            if (!id || (strcmp(id, "A") && strcmp(id, "B")))
                return eng_err_set(err, ENG_FORMAT, "TemplateProcessing: sequence id must be A or B");
            if (seen[id[0] == 'B']++)
                return eng_err_set(err, ENG_UNSUPPORTED, "TemplateProcessing: sequence %s appears twice in a template",
                                   id);
            int rc = tpl_add(t, id[0] == 'A' ? ENG__TPL_SEQ_A : ENG__TPL_SEQ_B,
                             (int32_t)json_integer_value(json_object_get(sq, "type_id")), NULL, 0, err);
            if (rc) return rc;
        } else {
            return eng_err_set(err, ENG_FORMAT, "TemplateProcessing: unknown template item");
        }
    }
    (void)tok;
    return 0;
}

static int parse_post_processor(eng_tokenizer *tok, const json_t *pp, eng_err *err) {
    if (!pp || json_is_null(pp)) return tok->single.n ? 0 : tpl_plain(tok, err);
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: post_processor has no type");
    if (!strcmp(type, "Sequence")) {
        size_t i;
        const json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p) {
            int rc = parse_post_processor(tok, p, err);
            if (rc) return rc;
        }
        return tok->single.n ? 0 : tpl_plain(tok, err);
    }
    if (!strcmp(type, "ByteLevel")) {
        tok->trim_offsets = cfg_bool(pp, "trim_offsets", true);
        return 0;
    }
    if (tok->single.n) return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: two templating post-processors");
    if (!strcmp(type, "TemplateProcessing")) {
        int rc = parse_template(tok, pp, json_object_get(pp, "single"), &tok->single, err);
        if (!rc) rc = parse_template(tok, pp, json_object_get(pp, "pair"), &tok->pair, err);
        return rc;
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        if (parse_pair_spec(json_object_get(pp, "cls"), &cls) || parse_pair_spec(json_object_get(pp, "sep"), &sep))
            return eng_err_set(err, ENG_FORMAT, "tokenizer.json: %s needs cls and sep as [token, id]", type);
        bool roberta = type[0] == 'R';
        if (roberta) tok->trim_offsets = cfg_bool(pp, "trim_offsets", true);
        return tpl_cls_sep(tok, cls, sep, roberta, err);
    }
    return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: post_processor type %s is not supported", type);
}

/* ---- models ---- */

static int parse_merge_line(const char *s, size_t n, const char **a, size_t *na, const char **b, size_t *nb) {
    /* "a b": split at spaces and keep the first two parts, as transformers.js's split(" ", 2) */
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s) return -1;
    *a = s;
    *na = (size_t)(sp - s);
    *b = sp + 1;
    const char *sp2 = memchr(*b, ' ', n - *na - 1);
    *nb = sp2 ? (size_t)(sp2 - *b) : n - *na - 1;
    return *nb ? 0 : -1;
}

static int add_merge(eng_tokenizer *tok, const char *a, size_t na, const char *b, size_t nb, int32_t rank,
                     eng_err *err) {
    char stackbuf[256];
    char *ab = na + nb <= sizeof stackbuf ? stackbuf : malloc(na + nb);
    if (!ab) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    memcpy(ab, a, na);
    memcpy(ab + na, b, nb);
    int64_t sa = eng__strmap_intern(&tok->syms, a, na, -1, NULL);
    int64_t sb = eng__strmap_intern(&tok->syms, b, nb, -1, NULL);
    int64_t sm = eng__strmap_intern(&tok->syms, ab, na + nb, -1, NULL);
    if (ab != stackbuf) free(ab);
    if (sa < 0 || sb < 0 || sm < 0 || eng__pairmap_put(&tok->merges, (int32_t)sa, (int32_t)sb, rank, (int32_t)sm))
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory loading merges");
    return 0;
}

/* Symbols start as the vocabulary (so a symbol's value is its id); the 256 byte characters are
 * interned too, whether or not the vocabulary has them. */
static int bpe_init_syms(eng_tokenizer *tok, eng_err *err) {
    for (uint32_t e = 0; e < tok->vocab.n; e++)
        if (eng__strmap_intern(&tok->syms, eng__strmap_key(&tok->vocab, e), tok->vocab.key_len[e], tok->vocab.val[e],
                               NULL) < 0)
            return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = eng__utf8_encode(eng__byte_to_unicode((uint8_t)b), u);
        int64_t s = eng__strmap_intern(&tok->syms, u, (size_t)n, -1, NULL);
        if (s < 0) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        tok->byte_sym[b] = (int32_t)s;
    }
    return 0;
}

int eng__parse_seq_normalizer(eng_tokenizer *tok, const json_t *n, eng_err *err);
int eng__parse_metaspace(eng_tokenizer *tok, const json_t *p, eng_err *err);
int eng__parse_unigram(eng_tokenizer *tok, const json_t *model, eng_err *err);

static int parse_model(eng_tokenizer *tok, const json_t *model, eng_err *err) {
    const char *type = json_string_value(json_object_get(model, "type"));
    const json_t *vocab = json_object_get(model, "vocab");
    if (type && !strcmp(type, "Unigram")) return eng__parse_unigram(tok, model, err);
    if (!type) type = json_object_get(model, "merges") ? "BPE" : "WordPiece";
    if (!json_is_object(vocab)) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: model.vocab is not an object");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)vocab, k, v) {
        if (!json_is_integer(v)) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: vocab id of %s is not an integer", k);
        int rc = set_vocab(tok, k, strlen(k), json_integer_value(v), err);
        if (rc) return rc;
    }
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (!strcmp(type, "WordPiece")) {
        tok->kind = ENG_TOK_WORDPIECE;
        const char *pre = json_string_value(json_object_get(model, "continuing_subword_prefix"));
        if (pre && strcmp(pre, "##"))
            return eng_err_set(err, ENG_UNSUPPORTED, "WordPiece continuing_subword_prefix \"%s\" (only ## is supported)", pre);
        json_t *mx = json_object_get(model, "max_input_chars_per_word");
        if (json_is_integer(mx)) tok->max_input_chars_per_word = (int32_t)json_integer_value(mx);
        tok->unk_id = vocab_id(tok, unk ? unk : "[UNK]");
        if (tok->unk_id < 0) return eng_err_set(err, ENG_FORMAT, "WordPiece: unk token %s is not in the vocabulary", unk ? unk : "[UNK]");
        return 0;
    }
    if (!strcmp(type, "BPE")) {
        tok->kind = ENG_TOK_BPE;
        const char *cs = json_string_value(json_object_get(model, "continuing_subword_prefix"));
        const char *ew = json_string_value(json_object_get(model, "end_of_word_suffix"));
        if ((cs && *cs) || (ew && *ew) || json_is_true(json_object_get(model, "byte_fallback")) ||
            json_is_true(json_object_get(model, "ignore_merges")) ||
            (json_is_number(json_object_get(model, "dropout")) && json_number_value(json_object_get(model, "dropout")) > 0))
            return eng_err_set(err, ENG_UNSUPPORTED,
                               "BPE with subword prefix/suffix, byte_fallback, ignore_merges or dropout is not supported");
        tok->unk_id = unk ? vocab_id(tok, unk) : -1;
        int rc = bpe_init_syms(tok, err);
        if (rc) return rc;
        const json_t *merges = json_object_get(model, "merges");
        if (!json_is_array(merges)) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: BPE merges is not a list");
        size_t i;
        const json_t *m;
        json_array_foreach(merges, i, m) {
            const char *a, *b;
            size_t na, nb;
            if (json_is_string(m)) {
                if (parse_merge_line(json_string_value(m), json_string_length(m), &a, &na, &b, &nb))
                    return eng_err_set(err, ENG_FORMAT, "tokenizer.json: merge %zu is malformed", i);
            } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                       json_is_string(json_array_get(m, 1))) {
                a = json_string_value(json_array_get(m, 0));
                na = json_string_length(json_array_get(m, 0));
                b = json_string_value(json_array_get(m, 1));
                nb = json_string_length(json_array_get(m, 1));
            } else {
                return eng_err_set(err, ENG_FORMAT, "tokenizer.json: merge %zu is malformed", i);
            }
            rc = add_merge(tok, a, na, b, nb, (int32_t)i, err);
            if (rc) return rc;
        }
        return 0;
    }
    return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: model type %s is not supported", type);
}

static void set_bert_flags(eng_tokenizer *tok, bool clean, bool chinese, bool lower, int strip) {
    tok->norm = ENG__NORM_BERT;
    tok->clean_text = clean;
    tok->handle_chinese_chars = chinese;
    tok->lowercase = lower;
    /* transformers.js: lowercase strips unless strip_accents is false; otherwise only if true */
    tok->strip_accents = lower ? strip != 0 : strip == 1;
}

static int parse_normalizer(eng_tokenizer *tok, const json_t *n, eng_err *err) {
    if (!n || json_is_null(n)) return 0;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && !strcmp(type, "BertNormalizer")) {
        set_bert_flags(tok, cfg_bool(n, "clean_text", true), cfg_bool(n, "handle_chinese_chars", true),
                       cfg_bool(n, "lowercase", true), tri_bool(n, "strip_accents"));
        return 0;
    }
    return eng__parse_seq_normalizer(tok, n, err);
}

static int parse_pre_tokenizer(eng_tokenizer *tok, const json_t *p, eng_err *err) {
    const char *type = p && !json_is_null(p) ? json_string_value(json_object_get(p, "type")) : "null";
    if (type && !strcmp(type, "BertPreTokenizer")) {
        tok->pretok = ENG__PRETOK_BERT;
        return 0;
    }
    if (type && !strcmp(type, "ByteLevel")) {
        tok->pretok = ENG__PRETOK_BYTELEVEL;
        tok->add_prefix_space = cfg_bool(p, "add_prefix_space", false);
        tok->use_regex = cfg_bool(p, "use_regex", true);
        return 0;
    }
    if (type && !strcmp(type, "Metaspace")) return eng__parse_metaspace(tok, p, err);
    if (type && !strcmp(type, "Sequence")) {
        /* [WhitespaceSplit, Metaspace] (DeBERTa-v3's and others' conversions) */
        const json_t *list = json_object_get(p, "pretokenizers");
        size_t i;
        const json_t *x;
        bool meta = false;
        json_array_foreach(list, i, x) {
            const char *tt = json_string_value(json_object_get(x, "type"));
            if (tt && !strcmp(tt, "WhitespaceSplit") && !meta) {
                tok->ws_split = true;
            } else if (tt && !strcmp(tt, "Metaspace") && !meta) {
                int rc = eng__parse_metaspace(tok, x, err);
                if (rc) return rc;
                meta = true;
            } else {
                return eng_err_set(err, ENG_UNSUPPORTED,
                                   "tokenizer.json: pre_tokenizer Sequence with %s (only WhitespaceSplit then Metaspace "
                                   "is supported)", tt ? tt : "?");
            }
        }
        if (!meta) return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: pre_tokenizer Sequence without Metaspace");
        return 0;
    }
    if (type && !strcmp(type, "null") && tok->kind == ENG_TOK_UNIGRAM) return 0;
    return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: pre_tokenizer type %s is not supported", type ? type : "?");
}

static int load_tokenizer_json(eng_tokenizer *tok, const eng_tok_files *f, eng_err *err) {
    json_t *j;
    int rc = load_json(f, &f->tokenizer_json, "tokenizer.json", false, &j, err);
    if (rc) return rc;
    rc = parse_model(tok, json_object_get(j, "model"), err);
    if (!rc) rc = parse_normalizer(tok, json_object_get(j, "normalizer"), err);
    if (!rc) rc = parse_pre_tokenizer(tok, json_object_get(j, "pre_tokenizer"), err);
    size_t i;
    const json_t *a;
    if (!rc) json_array_foreach(json_object_get(j, "added_tokens"), i, a) {
        const char *content = json_string_value(json_object_get(a, "content"));
        json_t *id = json_object_get(a, "id");
        if (!content || !json_is_integer(id)) {
            rc = eng_err_set(err, ENG_FORMAT, "tokenizer.json: added token %zu needs content and id", i);
            break;
        }
        bool special = cfg_bool(a, "special", false);
        rc = add_added(tok, content, json_integer_value(id), cfg_bool(a, "lstrip", false),
                       cfg_bool(a, "rstrip", false), cfg_bool(a, "normalized", !special), special, err);
        if (rc) break;
    }
    if (!rc) rc = parse_post_processor(tok, json_object_get(j, "post_processor"), err);
    const json_t *tr = json_object_get(j, "truncation");
    if (!rc && json_is_object(tr)) {
        json_t *ml = json_object_get(tr, "max_length");
        if (json_is_integer(ml) && json_integer_value(ml) > 0 && json_integer_value(ml) < INT32_MAX)
            tok->max_length = (int32_t)json_integer_value(ml);
    }
    if (!rc && tok->kind == ENG_TOK_WORDPIECE && tok->pretok != ENG__PRETOK_BERT)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: WordPiece needs the BertPreTokenizer");
    if (!rc && tok->kind == ENG_TOK_BPE && (tok->pretok != ENG__PRETOK_BYTELEVEL || tok->norm == ENG__NORM_BERT))
        rc = eng_err_set(err, ENG_UNSUPPORTED,
                         "tokenizer.json: BPE is supported with the ByteLevel pre-tokenizer and Unicode normalizers");
    if (!rc && tok->kind == ENG_TOK_UNIGRAM && tok->pretok != ENG__PRETOK_METASPACE && tok->pretok != ENG__PRETOK_NONE)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: Unigram is supported with the Metaspace pre-tokenizer");
    if (!rc && tok->kind == ENG_TOK_UNIGRAM && tok->norm == ENG__NORM_BERT)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: Unigram with the BertNormalizer is not supported");
    if (!rc && tok->kind == ENG_TOK_UNIGRAM && tok->sp_unk < 0)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: Unigram without unk_id is not supported");
    json_decref(j);
    return rc;
}

/* ---- vocab.txt / vocab.json + merges.txt ---- */

/* Added tokens from tokenizer_config.json's added_tokens_decoder, or the given defaults. */
static int config_added(eng_tokenizer *tok, const json_t *cfg, const char *const *defaults, bool normalized,
                        const char *lstrip_one, eng_err *err) {
    const json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    if (json_is_object(dec)) {
        const char *k;
        const json_t *a;
        json_object_foreach((json_t *)dec, k, a) {
            const char *content = json_string_value(json_object_get(a, "content"));
            if (!content) continue;
            bool special = cfg_bool(a, "special", false);
            int rc = add_added(tok, content, strtoll(k, NULL, 10), cfg_bool(a, "lstrip", false),
                               cfg_bool(a, "rstrip", false), cfg_bool(a, "normalized", !special), special, err);
            if (rc) return rc;
        }
        return 0;
    }
    for (int i = 0; defaults[i]; i++) {
        int32_t id = vocab_id(tok, defaults[i]);
        if (id < 0) continue;
        int rc = add_added(tok, defaults[i], id, lstrip_one && !strcmp(lstrip_one, defaults[i]), false, normalized,
                           true, err);
        if (rc) return rc;
    }
    return 0;
}

static int load_vocab_txt(eng_tokenizer *tok, const eng_tok_files *f, const json_t *cfg, eng_err *err) {
    const char *buf = f->vocab_txt.text;
    size_t n = f->vocab_txt.len;
    int rc = 0;
    int32_t id = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i;
        while (j < n && buf[j] != '\n') j++;
        size_t e = j;
        if (e > i && buf[e - 1] == '\r') e--;
        rc = set_vocab(tok, buf + i, e - i, id++, err);
        i = j + 1;
    }
    if (rc) return rc;
    tok->kind = ENG_TOK_WORDPIECE;
    tok->pretok = ENG__PRETOK_BERT;
    set_bert_flags(tok, true, cfg_bool(cfg, "tokenize_chinese_chars", true), cfg_bool(cfg, "do_lower_case", true),
                   tri_bool(cfg, "strip_accents"));
    const char *unk = token_name(cfg, "unk_token");
    tok->unk_id = vocab_id(tok, unk ? unk : "[UNK]");
    if (tok->unk_id < 0) return eng_err_set(err, ENG_FORMAT, "vocab.txt has no unk token");
    static const char *const defaults[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", NULL};
    rc = config_added(tok, cfg, defaults, false, NULL, err);
    if (rc) return rc;
    const char *cls = token_name(cfg, "cls_token"), *sep = token_name(cfg, "sep_token");
    int32_t ci = vocab_id(tok, cls ? cls : "[CLS]"), si = vocab_id(tok, sep ? sep : "[SEP]");
    if (ci < 0 || si < 0) return eng_err_set(err, ENG_FORMAT, "vocab.txt has no [CLS]/[SEP] tokens");
    return tpl_cls_sep(tok, ci, si, false, err);
}

static int load_vocab_json(eng_tokenizer *tok, const eng_tok_files *f, const json_t *cfg, eng_err *err) {
    json_t *v;
    int rc = load_json(f, &f->vocab_json, "vocab.json", false, &v, err);
    if (rc) return rc;
    const char *k;
    json_t *val;
    if (!json_is_object(v)) rc = eng_err_set(err, ENG_FORMAT, "vocab.json is not an object");
    if (!rc) json_object_foreach(v, k, val) {
        if (!json_is_integer(val)) {
            rc = eng_err_set(err, ENG_FORMAT, "vocab.json: id of %s is not an integer", k);
            break;
        }
        rc = set_vocab(tok, k, strlen(k), json_integer_value(val), err);
        if (rc) break;
    }
    json_decref(v);
    if (rc) return rc;
    tok->kind = ENG_TOK_BPE;
    tok->pretok = ENG__PRETOK_BYTELEVEL;
    tok->use_regex = true;
    tok->add_prefix_space = cfg_bool(cfg, "add_prefix_space", false);
    tok->trim_offsets = cfg_bool(cfg, "trim_offsets", true);
    tok->unk_id = -1; /* as converted by Hugging Face: unknown bytes cannot happen in byte-level BPE */
    rc = bpe_init_syms(tok, err);
    if (rc) return rc;
    const char *buf = f->merges_txt.text;
    size_t n = f->merges_txt.len;
    int32_t rank = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i;
        while (j < n && buf[j] != '\n') j++;
        size_t e = j;
        if (e > i && buf[e - 1] == '\r') e--;
        const char *a, *b;
        size_t na, nb;
        bool header = i == 0 && e - i >= 8 && !memcmp(buf + i, "#version", 8);
        if (!header && e > i) {
            if (parse_merge_line(buf + i, e - i, &a, &na, &b, &nb))
                rc = eng_err_set(err, ENG_FORMAT, "merges.txt: malformed line \"%.*s\"", (int)(e - i), buf + i);
            else
                rc = add_merge(tok, a, na, b, nb, rank++, err);
        }
        i = j + 1;
    }
    if (rc) return rc;
    static const char *const defaults[] = {"<s>", "<pad>", "</s>", "<unk>", "<mask>", NULL};
    rc = config_added(tok, cfg, defaults, true, "<mask>", err);
    if (rc) return rc;
    const char *cls = token_name(cfg, "cls_token"), *sep = token_name(cfg, "sep_token");
    int32_t ci = vocab_id(tok, cls ? cls : "<s>"), si = vocab_id(tok, sep ? sep : "</s>");
    if (ci >= 0 && si >= 0) return tpl_cls_sep(tok, ci, si, true, err);
    return tpl_plain(tok, err);
}

/* A SentencePiece model file: fairseq's ids for sentencepiece.bpe.model (CamemBERT when the config
 * says so, else XLM-R), the model's own otherwise; special tokens from tokenizer_config.json; the
 * template is RoBERTa's for fairseq, [CLS] A [SEP] when the config names cls and sep tokens
 * (DeBERTa-v3), else A eos (T5). */
static int load_spm(eng_tokenizer *tok, const eng_tok_files *f, const json_t *cfg, eng_err *err) {
    int fairseq = 0;
    if (f->spm_name && !strcmp(f->spm_name, "sentencepiece.bpe.model")) {
        const char *cls = json_string_value(json_object_get(cfg, "tokenizer_class"));
        json_t *mc = NULL;
        if (f->config_json.text) mc = json_loadb(f->config_json.text, f->config_json.len, JSON_DECODE_ANY, NULL);
        const char *mt = json_string_value(json_object_get(mc, "model_type"));
        fairseq = (cls && strstr(cls, "Camembert")) || (mt && !strcmp(mt, "camembert")) ? 4 : 1;
        json_decref(mc);
    }
    int rc = eng__spm_load(tok, (const uint8_t *)f->spm_model.text, f->spm_model.len, fairseq, err);
    if (rc) return rc;
    static const char *const keys[] = {"cls_token", "sep_token", "pad_token", "unk_token", "mask_token",
                                       "eos_token", "bos_token"};
    const char *defaults[8] = {NULL};
    int nd = 0;
    for (int i = 0; i < 7; i++) {
        const char *nm = token_name(cfg, keys[i]);
        if (nm && vocab_id(tok, nm) >= 0) defaults[nd++] = nm;
    }
    if (fairseq && !nd) defaults[nd++] = "<mask>";
    rc = config_added(tok, cfg, defaults, false, fairseq ? "<mask>" : NULL, err);
    if (rc) return rc;
    /* the slow tokenizers Hugging Face runs on these files split every added token in the raw text */
    for (int i = 0; i < tok->n_added; i++) tok->added[i].normalized = false;
    const char *cls = token_name(cfg, "cls_token"), *sep = token_name(cfg, "sep_token");
    if (fairseq) {
        int32_t ci = vocab_id(tok, cls ? cls : "<s>"), si = vocab_id(tok, sep ? sep : "</s>");
        if (ci >= 0 && si >= 0) return tpl_cls_sep(tok, ci, si, true, err);
        return tpl_plain(tok, err);
    }
    if (cls && sep && vocab_id(tok, cls) >= 0 && vocab_id(tok, sep) >= 0)
        return tpl_cls_sep(tok, vocab_id(tok, cls), vocab_id(tok, sep), false, err);
    const char *eos = token_name(cfg, "eos_token");
    int32_t ei = vocab_id(tok, eos ? eos : "</s>");
    if (ei < 0) return tpl_plain(tok, err);
    rc = tpl_add(&tok->single, ENG__TPL_SEQ_A, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->single, ENG__TPL_SPECIAL, 0, &ei, 1, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SEQ_A, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SPECIAL, 0, &ei, 1, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SEQ_B, 0, NULL, 0, err);
    if (!rc) rc = tpl_add(&tok->pair, ENG__TPL_SPECIAL, 0, &ei, 1, err);
    return rc;
}

/* ---- finishing ---- */

static int build_buckets(eng_tokenizer *tok, bool normalized, int32_t **bucket, eng_err *err) {
    /* one pass to count per first byte, one to fill: the added tokens are read twice, not 512 times */
    int cnt[256] = {0}, fill[256] = {0};
    for (int i = 0; i < tok->n_added; i++) {
        const eng__added_token *a = &tok->added[i];
        bool in_norm = a->normalized && tok->norm != ENG__NORM_NONE;
        if (in_norm == normalized) cnt[(uint8_t)a->content[0]]++;
    }
    for (int c = 0; c < 256; c++) {
        if (!cnt[c]) continue;
        if (!(bucket[c] = malloc((size_t)(cnt[c] + 1) * sizeof *bucket[c])))
            return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        if (normalized) tok->has_norm_added = true;
    }
    for (int i = 0; i < tok->n_added; i++) {
        const eng__added_token *a = &tok->added[i];
        bool in_norm = a->normalized && tok->norm != ENG__NORM_NONE;
        uint8_t c = (uint8_t)a->content[0];
        if (in_norm == normalized) bucket[c][fill[c]++] = i;
    }
    for (int c = 0; c < 256; c++) {
        int32_t *b = bucket[c];
        int k = fill[c];
        if (!b) continue;
        /* longest first, so the first match is the longest (the trie of transformers.js); stable, so
         * tokens of one length keep their order */
        for (int x = 1; x < k; x++)
            for (int y = x; y > 0 && tok->added[b[y]].len > tok->added[b[y - 1]].len; y--) {
                int32_t t = b[y];
                b[y] = b[y - 1];
                b[y - 1] = t;
            }
        b[k] = -1;
    }
    return 0;
}

static int finish(eng_tokenizer *tok, const json_t *cfg, eng_err *err) {
    tok->id_tok = calloc((size_t)(tok->n_ids ? tok->n_ids : 1), sizeof *tok->id_tok);
    if (!tok->id_tok) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    /* an id with two strings keeps the first; added tokens override the vocabulary */
    for (uint32_t e = 0; e < tok->vocab.n; e++)
        if (!tok->id_tok[tok->vocab.val[e]]) tok->id_tok[tok->vocab.val[e]] = eng__strmap_key(&tok->vocab, e);
    for (int i = 0; i < tok->n_added; i++) tok->id_tok[tok->added[i].id] = tok->added[i].content;
    int rc = build_buckets(tok, false, tok->raw_bucket, err);
    if (!rc) rc = build_buckets(tok, true, tok->norm_bucket, err);
    if (rc) return rc;

    if (tok->kind == ENG_TOK_WORDPIECE) {
        for (uint32_t e = 0; e < tok->vocab.n; e++) {
            uint32_t len = tok->vocab.key_len[e];
            const char *s = eng__strmap_key(&tok->vocab, e);
            if (len > tok->wp_max_bytes) tok->wp_max_bytes = len;
            if (len > 2 && s[0] == '#' && s[1] == '#') {
                bool added;
                int64_t x = eng__strmap_intern(&tok->wp_cont, s + 2, len - 2, tok->vocab.val[e], &added);
                if (x < 0) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
                if (len - 2 > tok->wp_cont_max_bytes) tok->wp_cont_max_bytes = len - 2;
            }
        }
    } else if (tok->kind == ENG_TOK_BPE) {
        /* added tokens override symbol ids too, as transformers.js's tokens_to_ids.set does */
        for (int i = 0; i < tok->n_added; i++) {
            int64_t s = eng__strmap_find(&tok->syms, tok->added[i].content, tok->added[i].len);
            if (s >= 0) tok->syms.val[s] = tok->added[i].id;
        }
        static const char pattern[] =
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" ENG__JS_WS "\\p{L}\\p{N}]+|[" ENG__JS_WS
            "]+(?![^" ENG__JS_WS "])|[" ENG__JS_WS "]+";
        int ec;
        PCRE2_SIZE eo;
        tok->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!tok->re) return eng_err_set(err, ENG_INTERNAL, "cannot compile the GPT-2 split pattern (pcre2 error %d)", ec);
        (void)pcre2_jit_compile(tok->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
        tok->cache = eng__bpe_cache_new(tok->n_ids);
        if (!tok->cache) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }

    /* special ids: tokenizer_config.json names, else the kind's usual names */
    bool wp = tok->kind == ENG_TOK_WORDPIECE;
    const char *n;
    tok->cls_id = vocab_id(tok, (n = token_name(cfg, "cls_token")) ? n : wp ? "[CLS]" : "<s>");
    tok->sep_id = vocab_id(tok, (n = token_name(cfg, "sep_token")) ? n : wp ? "[SEP]" : "</s>");
    tok->pad_id = vocab_id(tok, (n = token_name(cfg, "pad_token")) ? n : wp ? "[PAD]" : "<pad>");
    tok->mask_id = vocab_id(tok, (n = token_name(cfg, "mask_token")) ? n : wp ? "[MASK]" : "<mask>");
    tok->special_unk_id = vocab_id(tok, (n = token_name(cfg, "unk_token")) ? n : wp ? "[UNK]" : "<unk>");

    /* the post-processor's special tokens are given by id: each must be one of the vocabulary's */
    const eng__template *tpls[2] = {&tok->single, &tok->pair};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < tpls[k]->n; i++)
            for (int j = 0; j < tpls[k]->items[i].n_ids; j++) {
                int32_t id = tpls[k]->items[i].ids[j];
                if (id < 0 || id >= tok->n_ids)
                    return eng_err_set(err, ENG_FORMAT,
                                       "tokenizer.json: post_processor special token id %d is not in the vocabulary "
                                       "(ids 0..%d)", id, tok->n_ids - 1);
            }

    if (!tok->max_length) {
        const json_t *m = json_object_get(cfg, "model_max_length");
        double v = json_is_number(m) ? json_number_value(m) : 0;
        tok->max_length = v >= 1 && v < 100000 ? (int32_t)v : DEFAULT_MAX_LENGTH;
    }
    return 0;
}

/* A tokenizer file of the folder read whole into *t (its buffer kept in *buf, to free); absent files
 * are left NULL. */
static int read_tok_file(const char *dir, const char *name, eng_tok_text *t, char **buf, eng_err *err) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/%s: path too long", dir, name);
    if (!eng_file_exists(path)) return 0;
    int rc = eng_file_read(path, TOKENIZER_FILE_MAX_BYTES, buf, &t->len, err);
    if (!rc) t->text = *buf;
    return rc;
}

int eng_tokenizer_load(const char *model_dir, eng_tokenizer **out, eng_err *err) {
    if (!out) return eng_err_set(err, ENG_INVALID_ARGUMENT, "eng_tokenizer_load: out is NULL");
    *out = NULL;
    if (!model_dir) return eng_err_set(err, ENG_INVALID_ARGUMENT, "eng_tokenizer_load: model_dir is NULL");
    eng_tok_files f = {.dir = model_dir};
    char *bufs[4] = {NULL, NULL, NULL, NULL};
    /* only the files the precedence below will use are read */
    int rc = read_tok_file(model_dir, "tokenizer_config.json", &f.tokenizer_config_json, &bufs[0], err);
    if (!rc) rc = read_tok_file(model_dir, "tokenizer.json", &f.tokenizer_json, &bufs[1], err);
    if (!rc && !f.tokenizer_json.text) rc = read_tok_file(model_dir, "vocab.txt", &f.vocab_txt, &bufs[1], err);
    if (!rc && !f.tokenizer_json.text && !f.vocab_txt.text && eng_file_exists_in(model_dir, "merges.txt")) {
        rc = read_tok_file(model_dir, "vocab.json", &f.vocab_json, &bufs[1], err);
        if (!rc && f.vocab_json.text) rc = read_tok_file(model_dir, "merges.txt", &f.merges_txt, &bufs[2], err);
    }
    static const char *const spm_names[] = {"spm.model", "spiece.model", "sentencepiece.bpe.model"};
    for (int i = 0; i < 3 && !rc && !f.tokenizer_json.text && !f.vocab_txt.text && !f.vocab_json.text; i++) {
        if (f.spm_model.text) break;
        rc = read_tok_file(model_dir, spm_names[i], &f.spm_model, &bufs[1], err);
        f.spm_name = spm_names[i];
        if (!rc && f.spm_model.text) rc = read_tok_file(model_dir, "config.json", &f.config_json, &bufs[3], err);
    }
    if (!rc) rc = eng_tokenizer_load_files(&f, out, err);
    for (int i = 0; i < 4; i++) free(bufs[i]);
    return rc;
}

int eng_tokenizer_load_files(const eng_tok_files *f, eng_tokenizer **out, eng_err *err) {
    if (!out) return eng_err_set(err, ENG_INVALID_ARGUMENT, "eng_tokenizer_load_files: out is NULL");
    *out = NULL;
    if (!f) return eng_err_set(err, ENG_INVALID_ARGUMENT, "eng_tokenizer_load_files: f is NULL");
    eng_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    tok->unk_id = tok->special_unk_id = tok->cls_id = tok->sep_id = tok->pad_id = tok->mask_id = -1;
    tok->sp_unk = -1;
    tok->max_input_chars_per_word = 100;
    tok->use_regex = true;

    json_t *cfg = NULL;
    int rc = 0;
    if (f->tokenizer_config_json.text) rc = load_json(f, &f->tokenizer_config_json, "tokenizer_config.json", true, &cfg, err);
    if (!rc) {
        if (f->tokenizer_json.text) rc = load_tokenizer_json(tok, f, err);
        else if (f->vocab_txt.text) rc = load_vocab_txt(tok, f, cfg, err);
        else if (f->vocab_json.text && f->merges_txt.text) rc = load_vocab_json(tok, f, cfg, err);
        else if (f->spm_model.text) rc = load_spm(tok, f, cfg, err);
        else
            rc = eng_err_set(err, ENG_NOT_FOUND,
                             "%s: no tokenizer.json, vocab.txt, vocab.json + merges.txt or SentencePiece model "
                             "(spm.model, spiece.model, sentencepiece.bpe.model)", f->dir ? f->dir : "tokenizer");
    }
    if (!rc) rc = finish(tok, cfg, err);
    json_decref(cfg);
    if (rc) {
        eng_tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return 0;
}

void eng_tokenizer_free(eng_tokenizer *tok) {
    if (!tok) return;
    eng__strmap_free(&tok->vocab);
    eng__strmap_free(&tok->wp_cont);
    eng__strmap_free(&tok->syms);
    eng__pairmap_free(&tok->merges);
    eng__bpe_cache_free(tok->cache);
    if (tok->re) pcre2_code_free(tok->re);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    for (int c = 0; c < 256; c++) {
        free(tok->raw_bucket[c]);
        free(tok->norm_bucket[c]);
    }
    tpl_free(&tok->single);
    tpl_free(&tok->pair);
    free(tok->id_tok);
    eng__nsteps_free(tok);
    eng__trie_free(&tok->pieces);
    free(tok->score);
    free(tok->ptype);
    free(tok->out_id);
    free(tok);
}

/* ---- accessors ---- */

const char *eng_tok_id_to_token(const eng_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_ids ? tok->id_tok[id] : NULL;
}

int32_t eng_tok_token_to_id(const eng_tokenizer *tok, const char *token, size_t len) {
    if (!tok || !token) return -1;
    int64_t e = eng__strmap_find(&tok->vocab, token, len);
    return e < 0 ? -1 : tok->vocab.val[e];
}

int32_t eng_tokenizer_vocab_size(const eng_tokenizer *tok) { return tok->n_ids; }
eng_tok_kind eng_tokenizer_kind(const eng_tokenizer *tok) { return tok->kind; }
int32_t eng_tokenizer_max_length(const eng_tokenizer *tok) { return tok->max_length; }
int32_t eng_tokenizer_cls_id(const eng_tokenizer *tok) { return tok->cls_id; }
int32_t eng_tokenizer_sep_id(const eng_tokenizer *tok) { return tok->sep_id; }
int32_t eng_tokenizer_pad_id(const eng_tokenizer *tok) { return tok->pad_id; }
int32_t eng_tokenizer_unk_id(const eng_tokenizer *tok) { return tok->special_unk_id; }
int32_t eng_tokenizer_mask_id(const eng_tokenizer *tok) { return tok->mask_id; }
