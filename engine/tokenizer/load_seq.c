/* load_seq.c - tokenizer.json sections of the SentencePiece family and of newer models: the
 * Unigram model, the Metaspace pre-tokenizer, and normalizer sequences (NFC/NFD/NFKC/NFKD,
 * Precompiled, Replace, Strip, Lowercase, Sequence).
 *
 * A Unigram tokenizer.json follows Hugging Face's rules (tok->spm_exact false): every vocabulary
 * entry is a lattice piece with its double score, the unknown score is the lowest score minus 10,
 * and ids are the vocabulary's positions. Types not listed are refused with ENG_UNSUPPORTED. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define MAX_PIECES ((1 << 22) - 16)

static int b64val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 s[0, n) into a new buffer (*out, *len). Returns 0, ENG_FORMAT or ENG_NO_MEMORY. */
static int b64_decode(const char *s, size_t n, uint8_t **out, size_t *len) {
    uint8_t *o = malloc(n / 4 * 3 + 3);
    if (!o) return ENG_NO_MEMORY;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        int v = b64val((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return ENG_FORMAT;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (uint8_t)(acc >> bits);
        }
    }
    *out = o;
    *len = k;
    return 0;
}

static int add_step(eng_tokenizer *tok, eng__nstep st, eng_err *err) {
    eng__nstep *v = realloc(tok->nsteps, (size_t)(tok->n_nsteps + 1) * sizeof *v);
    if (!v) {
        if (st.re) pcre2_code_free(st.re);
        free(st.content);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    tok->nsteps = v;
    v[tok->n_nsteps++] = st;
    return 0;
}

static int parse_one(eng_tokenizer *tok, const json_t *n, int depth, eng_err *err) {
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: normalizer has no type");
    eng__nstep st = {0};
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list) || depth > 4)
            return eng_err_set(err, ENG_FORMAT, "tokenizer.json: normalizer Sequence needs a list of normalizers");
        size_t i;
        const json_t *x;
        json_array_foreach(list, i, x) {
            int rc = parse_one(tok, x, depth + 1, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "NFC")) st.kind = ENG__NS_NFC;
    else if (!strcmp(type, "NFD")) st.kind = ENG__NS_NFD;
    else if (!strcmp(type, "NFKC")) st.kind = ENG__NS_NFKC;
    else if (!strcmp(type, "NFKD")) st.kind = ENG__NS_NFKD;
    else if (!strcmp(type, "Lowercase")) st.kind = ENG__NS_LOWERCASE;
    else if (!strcmp(type, "Strip")) {
        st.kind = ENG__NS_STRIP;
        st.left = json_is_true(json_object_get(n, "strip_left"));
        st.right = json_is_true(json_object_get(n, "strip_right"));
    } else if (!strcmp(type, "Precompiled")) {
        const json_t *cm = json_object_get(n, "precompiled_charsmap");
        if (json_is_null(cm) || !cm) return 0; /* no charsmap: the identity, as Hugging Face */
        if (!json_is_string(cm)) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: precompiled_charsmap is not a string");
        if (tok->charsmap.units)
            return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: two Precompiled normalizers");
        uint8_t *blob;
        size_t len;
        int rc = b64_decode(json_string_value(cm), json_string_length(cm), &blob, &len);
        if (!rc) {
            rc = eng__charsmap_init(&tok->charsmap, blob, len);
            free(blob);
        }
        if (rc) return eng_err_set(err, rc, "tokenizer.json: malformed precompiled_charsmap");
        st.kind = ENG__NS_PRECOMPILED;
    } else if (!strcmp(type, "Replace")) {
        const json_t *pat = json_object_get(n, "pattern");
        const char *content = json_string_value(json_object_get(n, "content"));
        const char *re = json_string_value(json_object_get(pat, "Regex"));
        const char *lit = json_string_value(json_object_get(pat, "String"));
        if (!content || (!re && !lit))
            return eng_err_set(err, ENG_FORMAT, "tokenizer.json: Replace needs a String or Regex pattern and content");
        int ec;
        PCRE2_SIZE eo;
        const char *src = re ? re : lit;
        st.re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | (re ? 0 : PCRE2_LITERAL),
                              &ec, &eo, NULL);
        if (!st.re) return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: Replace pattern %s does not compile", src);
        (void)pcre2_jit_compile(st.re, PCRE2_JIT_COMPLETE);
        st.content = strdup(content);
        if (!st.content) {
            pcre2_code_free(st.re);
            return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        }
        st.kind = ENG__NS_REPLACE;
    } else {
        return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: normalizer type %s is not supported", type);
    }
    return add_step(tok, st, err);
}

int eng__parse_seq_normalizer(eng_tokenizer *tok, const json_t *n, eng_err *err);
int eng__parse_seq_normalizer(eng_tokenizer *tok, const json_t *n, eng_err *err) {
    tok->norm = ENG__NORM_SEQ;
    return parse_one(tok, n, 0, err);
}

int eng__parse_metaspace(eng_tokenizer *tok, const json_t *p, eng_err *err);
int eng__parse_metaspace(eng_tokenizer *tok, const json_t *p, eng_err *err) {
    const char *rep = json_string_value(json_object_get(p, "replacement"));
    uint32_t cp = 0x2581;
    if (rep && (!*rep || eng__utf8_decode((const uint8_t *)rep, strlen(rep), &cp) != (int)strlen(rep)))
        return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: Metaspace replacement must be one character");
    tok->pretok = ENG__PRETOK_METASPACE;
    tok->meta_rep = cp;
    const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
    const json_t *aps = json_object_get(p, "add_prefix_space"); /* the older spelling */
    if (scheme) {
        if (!strcmp(scheme, "always")) tok->meta_prepend = 2;
        else if (!strcmp(scheme, "first")) tok->meta_prepend = 1;
        else if (!strcmp(scheme, "never")) tok->meta_prepend = 0;
        else return eng_err_set(err, ENG_UNSUPPORTED, "tokenizer.json: Metaspace prepend_scheme %s", scheme);
    } else {
        tok->meta_prepend = json_is_false(aps) ? 0 : 2;
    }
    const json_t *split = json_object_get(p, "split");
    tok->meta_split = !json_is_false(split);
    return 0;
}

int eng__parse_unigram(eng_tokenizer *tok, const json_t *model, eng_err *err);
int eng__parse_unigram(eng_tokenizer *tok, const json_t *model, eng_err *err) {
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_array(vocab)) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: Unigram vocab is not a list");
    size_t n = json_array_size(vocab);
    if (!n || n > MAX_PIECES) return eng_err_set(err, ENG_FORMAT, "tokenizer.json: Unigram vocab has %zu entries", n);
    tok->kind = ENG_TOK_UNIGRAM;
    tok->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    tok->score = malloc(n * sizeof *tok->score);
    tok->ptype = malloc(n);
    tok->out_id = malloc(n * sizeof *tok->out_id);
    const char **names = malloc(n * sizeof *names);
    uint32_t *lens = malloc(n * sizeof *lens);
    int rc = 0;
    if (!tok->score || !tok->ptype || !tok->out_id || !names || !lens) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        const json_t *e = json_array_get(vocab, i);
        const json_t *s = json_array_get(e, 0), *sc = json_array_get(e, 1);
        if (!json_is_array(e) || !json_is_string(s) || !json_is_number(sc)) {
            rc = eng_err_set(err, ENG_FORMAT, "tokenizer.json: Unigram vocab entry %zu is not [piece, score]", i);
            break;
        }
        names[i] = json_string_value(s);
        lens[i] = (uint32_t)json_string_length(s);
        tok->score[i] = json_number_value(sc);
        tok->ptype[i] = ENG__SP_NORMAL;
        tok->out_id[i] = (int32_t)i;
        int64_t x = eng__strmap_intern(&tok->vocab, names[i], lens[i], (int32_t)i, NULL);
        if (x < 0) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    if (!rc) {
        tok->n_pieces = (int32_t)n;
        tok->n_ids = tok->n_ids > (int32_t)n ? tok->n_ids : (int32_t)n;
        rc = eng__pieces_index(tok, names, lens, err);
    }
    const json_t *unk = json_object_get(model, "unk_id");
    if (!rc && json_is_integer(unk)) {
        json_int_t u = json_integer_value(unk);
        if (u < 0 || (size_t)u >= n) rc = eng_err_set(err, ENG_FORMAT, "tokenizer.json: Unigram unk_id %lld is out of range", (long long)u);
        else tok->sp_unk = (int32_t)u, tok->unk_id = (int32_t)u;
    }
    free(names);
    free(lens);
    return rc;
}
