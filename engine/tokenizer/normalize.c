/* normalize.c - UTF-8 handling and the BERT normalizer.
 *
 * The BertNormalizer is applied as transformers.js applies it, in four passes over one section of
 * text: clean_text (drop NUL, U+FFFD and control/format/private-use characters except \t\n\r; turn
 * JavaScript whitespace into ' '), CJK spacing (BMP ideographs only: transformers.js looks at UTF-16
 * units, so supplementary-plane ideographs are not spaced - the Python library spaces them; we follow
 * transformers.js), lowercase (simple case mapping from utf8proc plus the two context rules of
 * String.prototype.toLowerCase: U+0130 -> "i\u0307" and the final sigma), then accent stripping
 * (canonical decomposition, canonical ordering, and removal of Mn characters).
 *
 * Every output code point remembers the byte span of the original character it came from, which
 * is how token offsets survive decomposition and case mapping. Unicode tables come from utf8proc;
 * its Unicode version (15 for 2.8) may lag Node's ICU for characters assigned since. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

int eng__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        uint32_t v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 0;
        *cp = v;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (v < 0x10000 || v > 0x10FFFF) return 0;
        *cp = v;
        return 4;
    }
    return 0;
}

int eng__utf8_invalid(const uint8_t *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        /* ASCII runs 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = eng__utf8_decode(s + i, n - i, &cp);
        if (!k) {
            *bad = i;
            return 1;
        }
        i += (size_t)k;
    }
    return 0;
}

int eng__utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* JavaScript's \s (WhiteSpace + LineTerminator): what transformers.js splits and trims on. It is
 * not Unicode White_Space: it has U+FEFF and lacks U+0085. */
bool eng__is_js_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
    case 0xFEFF:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

static int nt_reserve(eng__ntext *t, size_t n) {
    if (n <= t->cap) return 0;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < n) cap *= 2;
    uint32_t *a = realloc(t->cps, cap * sizeof *a);
    if (!a) return -1;
    t->cps = a;
    a = realloc(t->os, cap * sizeof *a);
    if (!a) return -1;
    t->os = a;
    a = realloc(t->oe, cap * sizeof *a);
    if (!a) return -1;
    t->oe = a;
    a = realloc(t->boff, (cap + 1) * sizeof *a);
    if (!a) return -1;
    t->boff = a;
    t->cap = cap;
    return 0;
}

static inline int nt_push(eng__ntext *t, uint32_t cp, uint32_t os, uint32_t oe) {
    if (t->n == t->cap && nt_reserve(t, t->n + 1)) return -1;
    t->cps[t->n] = cp;
    t->os[t->n] = os;
    t->oe[t->n] = oe;
    t->n++;
    return 0;
}

static bool is_bert_control(uint32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO ||
           c == UTF8PROC_CATEGORY_CS;
}

/* transformers.js tests UTF-16 units, so only BMP ideographs qualify (see the file comment). */
static bool is_bmp_chinese(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0xF900 && cp <= 0xFAFF);
}

static bool is_cased(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return true;
    return utf8proc_tolower((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp ||
           utf8proc_toupper((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp;
}

static bool is_case_ignorable(uint32_t cp) {
    switch (cp) {
    case '\'': case '.': case ':': case '^': case '`': case 0xA8: case 0xAD: case 0xAF: case 0xB4:
    case 0xB7: case 0xB8: case 0x2018: case 0x2019: case 0x2024: case 0x2027: case 0xFE13:
    case 0xFE52: case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
        return true;
    default:
        break;
    }
    if (cp < 0x80) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK;
}

/* Unicode's Final_Sigma condition on t->cps around index i. */
static bool final_sigma(const eng__ntext *t, size_t i) {
    size_t j = i;
    bool before = false;
    while (j > 0) {
        uint32_t c = t->cps[--j];
        if (is_case_ignorable(c)) continue;
        before = is_cased(c);
        break;
    }
    if (!before) return false;
    for (j = i + 1; j < t->n; j++) {
        uint32_t c = t->cps[j];
        if (is_case_ignorable(c)) continue;
        return !is_cased(c);
    }
    return true;
}

/* Appends the canonical decomposition of cp (recursively, Hangul included) without Mn marks when
 * strip is set, then restores canonical order of the trailing combining marks. */
static int push_decomposed(eng__ntext *o, uint32_t cp, uint32_t os, uint32_t oe) {
    utf8proc_int32_t d[32];
    int last = 0;
    utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)cp, d, 32, UTF8PROC_DECOMPOSE, &last);
    if (k < 0 || k > 32) {
        d[0] = (utf8proc_int32_t)cp;
        k = 1;
    }
    for (utf8proc_ssize_t i = 0; i < k; i++) {
        uint32_t c = (uint32_t)d[i];
        const utf8proc_property_t *p = utf8proc_get_property(d[i]);
        if (p->category == UTF8PROC_CATEGORY_MN) continue;
        if (nt_push(o, c, os, oe)) return -1;
        /* canonical ordering: bubble a combining mark left past marks of a higher class */
        int cc = p->combining_class;
        if (!cc) continue;
        size_t j = o->n - 1;
        while (j > 0) {
            int pc = utf8proc_get_property((utf8proc_int32_t)o->cps[j - 1])->combining_class;
            if (pc <= cc) break;
            uint32_t t0 = o->cps[j], t1 = o->os[j], t2 = o->oe[j];
            o->cps[j] = o->cps[j - 1];
            o->os[j] = o->os[j - 1];
            o->oe[j] = o->oe[j - 1];
            o->cps[j - 1] = t0;
            o->os[j - 1] = t1;
            o->oe[j - 1] = t2;
            j--;
        }
    }
    return 0;
}

int eng__bert_normalize(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *orig, uint32_t s0,
                        uint32_t s1) {
    eng__ntext *a = &ctx->t1, *o = &ctx->t2;
    a->n = 0;
    o->n = 0;
    /* one code point per byte at most, plus two spaces per ideograph (grown on demand) */
    if (nt_reserve(a, (size_t)(s1 - s0) + 1)) return ENG_NO_MEMORY;

    /* pass 1: decode, clean_text, CJK spacing */
    for (uint32_t i = s0; i < s1;) {
        uint32_t cp;
        int k = orig[i] < 0x80 ? (cp = orig[i], 1) : eng__utf8_decode(orig + i, s1 - i, &cp);
        if (!k) return ENG_INTERNAL; /* validated by the caller */
        uint32_t b = i, e = i + (uint32_t)k;
        i = e;
        if (tok->clean_text) {
            if (cp == 0 || cp == 0xFFFD || is_bert_control(cp)) continue;
            if (eng__is_js_space(cp)) cp = ' ';
        }
        size_t m = a->n;
        if (m + 3 > a->cap && nt_reserve(a, m + 3)) return ENG_NO_MEMORY;
        if (tok->handle_chinese_chars && cp >= 0x3400 && is_bmp_chinese(cp)) {
            a->cps[m] = ' ', a->os[m] = b, a->oe[m] = e;
            a->cps[m + 1] = cp, a->os[m + 1] = b, a->oe[m + 1] = e;
            a->cps[m + 2] = ' ', a->os[m + 2] = b, a->oe[m + 2] = e;
            a->n += 3;
        } else {
            a->cps[m] = cp, a->os[m] = b, a->oe[m] = e;
            a->n++;
        }
    }

    /* pass 2: lowercase and strip accents; accents are stripped when the flag says so or, when it
     * is unset (null in tokenizer.json), when lowercasing - resolved by the loader */
    if (nt_reserve(o, a->n + 16)) return ENG_NO_MEMORY;
    for (size_t i = 0; i < a->n; i++) {
        uint32_t cp = a->cps[i], os = a->os[i], oe = a->oe[i];
        if (cp < 0x80) {
            if (tok->lowercase && cp >= 'A' && cp <= 'Z') cp += 32;
            if (nt_push(o, cp, os, oe)) return ENG_NO_MEMORY;
            continue;
        }
        if (tok->lowercase) {
            if (cp == 0x130) { /* İ -> i + combining dot above (unconditional special casing) */
                if (nt_push(o, 'i', os, oe)) return ENG_NO_MEMORY;
                cp = 0x307;
            } else if (cp == 0x3A3) {
                cp = final_sigma(a, i) ? 0x3C2 : 0x3C3;
            } else {
                cp = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            }
        }
        if (tok->strip_accents) {
            if (push_decomposed(o, cp, os, oe)) return ENG_NO_MEMORY;
        } else if (nt_push(o, cp, os, oe)) {
            return ENG_NO_MEMORY;
        }
    }

    return eng__ntext_bytes(o);
}

int eng__ntext_push(eng__ntext *t, uint32_t cp, uint32_t os, uint32_t oe) {
    return nt_push(t, cp, os, oe) ? ENG_NO_MEMORY : 0;
}

int eng__ntext_bytes(eng__ntext *o) {
    if (nt_reserve(o, o->n + 1)) return ENG_NO_MEMORY; /* boff has n + 1 entries */
    size_t need = o->n * 4 + 1;
    if (need > o->capb) {
        char *b = realloc(o->b, need);
        if (!b) return ENG_NO_MEMORY;
        o->b = b;
        o->capb = need;
    }
    size_t nb = 0;
    for (size_t i = 0; i < o->n; i++) {
        o->boff[i] = (uint32_t)nb;
        uint32_t cp = o->cps[i];
        if (cp < 0x80) o->b[nb++] = (char)cp;
        else nb += (size_t)eng__utf8_encode(cp, o->b + nb);
    }
    o->boff[o->n] = (uint32_t)nb;
    o->b[nb] = 0;
    o->nb = nb;
    return 0;
}

void eng__ntext_free(eng__ntext *t) {
    free(t->cps);
    free(t->os);
    free(t->oe);
    free(t->boff);
    free(t->b);
    memset(t, 0, sizeof *t);
}
