/* fuzz_windows.c - the window planner of long inputs (engine/tokenizer/windows.c: eng_tok_plan_qa,
 * eng_tok_plan_text, eng_tok_plan_window), which the server and `adapterd predict` read every long
 * input with. The input's bytes are the shape of an encoding and the request's limits: question and
 * context token counts (or a single text's), the special tokens' template, max_seq_len / the model's
 * limit, doc_stride / stride, max_question_len. The harness builds that encoding (token i of each
 * sequence carries its index as id and offsets 2i..2i+1) and checks, beyond ASan/UBSan:
 *  - a refused plan is one the pipelines refuse: the cut sequence does not fit and no more than
 *    stride tokens (or none) are left for it in a window;
 *  - a whole input fits the window; otherwise every window holds at most the window's tokens, the
 *    special tokens of the template, the same first keep_other tokens of the other sequence
 *    (QA's question cut to max_question_len, and never more), and a run of the cut sequence's tokens
 *    in order whose offsets increase;
 *  - the windows' runs start at 0, end at the last token, and consecutive ones share exactly stride
 *    tokens (so every token is covered), the count being eng_tok_window_count's.
 * A broken invariant aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/answer.h"
#include "engine/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads 2 bytes as a number below lim (0 past the end). */
static int take(const uint8_t **p, size_t *n, int lim) {
    unsigned v = 0;
    for (int i = 0; i < 2; i++, (*p)++, (*n)--) {
        if (!*n) break;
        v = v << 8 | **p;
    }
    return (int)(v % (unsigned)lim);
}

/* An encoding of the template: pre specials, seq 0 (a tokens), mid specials, seq 1 (b tokens, when b
 * >= 0), post specials. Returns 0 or -1 (no memory). */
static int build(int pre, int a, int mid, int b, int post, eng_tok_encoding *e) {
    size_t n = (size_t)pre + (size_t)a + (b >= 0 ? (size_t)mid + (size_t)b : 0) + (size_t)post;
    if (eng_tok_encoding_alloc(e, n)) return -1;
    size_t k = 0;
    int spans[5][2] = {{-1, pre}, {0, a}, {-1, b >= 0 ? mid : 0}, {1, b >= 0 ? b : 0}, {-1, post}};
    for (int s = 0; s < 5; s++)
        for (int i = 0; i < spans[s][1]; i++, k++) {
            int seq = spans[s][0];
            e->ids[k] = seq < 0 ? 100000 + s : i;
            e->type_ids[k] = seq == 1;
            e->seq_ids[k] = (int8_t)seq;
            e->special_mask[k] = seq < 0;
            e->offsets[2 * k] = e->byte_offsets[2 * k] = seq < 0 ? 0 : 2 * i;
            e->offsets[2 * k + 1] = e->byte_offsets[2 * k + 1] = seq < 0 ? 0 : 2 * i + 1;
        }
    return 0;
}

/* Checks one plan p over full against the limit a window may hold; other is the other sequence's
 * length in full (-1: none). */
static void check(const eng_tok_encoding *full, const eng_tok_windows *p, int rc, int limit, int other) {
    int n = p->n;
    if (rc) {
        if (p->whole) abort();
        if (n <= p->room && p->room >= 1) abort();                     /* it fit: nothing to refuse */
        if (p->room >= 1 && p->stride >= 0 && p->stride < p->room) abort(); /* a valid stride refused */
        return;
    }
    if (p->whole) {
        if ((int)full->n > limit || p->n_windows != 1) abort();
        return;
    }
    if (p->room < 1 || p->n_windows != eng_tok_window_count(n, p->room, p->stride) || p->n_windows < 1) abort();
    if (p->n_windows > 1 && (p->stride < 0 || p->stride >= p->room)) abort();
    if (p->keep_other >= 0 && (other < 0 || p->keep_other >= other)) abort(); /* a cut keeps fewer than all */
    int kept_other = other < 0 ? 0 : p->keep_other >= 0 ? p->keep_other : other;
    int prev_first = -1, prev_last = -1;
    for (int w = 0; w < p->n_windows; w++) {
        eng_tok_encoding e;
        if (eng_tok_plan_window(full, p, w, &e)) return; /* out of memory: nothing to check */
        if ((int)e.n > limit) abort();
        int first = -1, last = -1, specials = 0, others = 0, prev_off = -1;
        for (size_t i = 0; i < e.n; i++) {
            int s = e.seq_ids[i];
            if (s < 0) {
                specials++;
                continue;
            }
            if (s != p->seq) { /* the other sequence: its first tokens, in order */
                if (e.ids[i] != others++) abort();
                continue;
            }
            if (first < 0) first = e.ids[i];
            else if (e.ids[i] != last + 1) abort();   /* a run, in order */
            if (e.offsets[2 * i] <= prev_off) abort(); /* offsets increase */
            prev_off = e.offsets[2 * i];
            last = e.ids[i];
        }
        if (specials != p->specials || others != kept_other) abort();
        if (first < 0 && n > 0) abort(); /* a window of nothing */
        if (w == 0 && n > 0 && first != 0) abort();
        if (w > 0 && (first != prev_first + (p->room - p->stride) || prev_last - first + 1 != p->stride)) abort();
        if (last - first + 1 > p->room) abort();
        prev_first = first, prev_last = last;
        eng_tok_encoding_free(&e);
    }
    if (n > 0 && prev_last != n - 1) abort(); /* the last window ends at the last token */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 1, tmpl = (data[0] >> 1) % 4;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    /* special tokens: none; BERT's [CLS] a [SEP] b [SEP]; RoBERTa's <s> a </s></s> b </s>; a prefix only */
    static const int templ[4][3] = {{0, 0, 0}, {1, 1, 1}, {1, 2, 1}, {2, 0, 0}};
    const int *t = templ[tmpl];
    eng_tok_encoding full;
    eng_tok_windows plan;
    if (mode == 0) { /* QA: question, context */
        int qn = take(&p, &n, 400), cn = take(&p, &n, 6000), seq_len = 1 + take(&p, &n, 1024);
        int stride = take(&p, &n, 700) - 1, mq = take(&p, &n, 300);
        if (build(t[0], qn, t[1], cn, t[2], &full)) return 0;
        int rc = eng_tok_plan_qa(&full, seq_len, stride, mq, &plan);
        int want_stride = stride >= 0 ? stride : (seq_len / 2 < ENG_QA_DOC_STRIDE ? seq_len / 2 : ENG_QA_DOC_STRIDE);
        int want_q = qn < (mq > 0 ? mq : ENG_QA_MAX_QUESTION_LEN) ? qn : (mq > 0 ? mq : ENG_QA_MAX_QUESTION_LEN);
        if (plan.seq != 1 || plan.n != cn || plan.stride != want_stride) abort();
        if ((plan.keep_other >= 0 ? plan.keep_other : qn) != want_q) abort(); /* the question cut to max_question_len */
        check(&full, &plan, rc, seq_len, qn);
    } else { /* a single text */
        int tn = take(&p, &n, 6000), max_len = 1 + take(&p, &n, 1024), stride = take(&p, &n, 1100) - 1;
        if (build(t[0], tn, 0, -1, t[1] + t[2], &full)) return 0;
        int rc = eng_tok_plan_text(&full, max_len, stride, &plan);
        if (plan.seq != 0 || plan.n != tn || plan.keep_other != -1) abort();
        check(&full, &plan, rc, max_len, -1);
    }
    fuzz_keep((unsigned long)plan.n_windows);
    eng_tok_encoding_free(&full);
    return 0;
}
