/* windows.c - a long encoding cut into overlapping windows, as the tokenizers library's overflow
 * does when a caller passes `stride` with truncation (return_overflowing_tokens): the sequence being
 * cut is walked in steps of (window - stride) tokens, every window but the last holding `window`
 * tokens, the last ending at the sequence's end; the other sequence (a question) and the special
 * tokens are repeated in every window. The text is tokenized once, untruncated, and windows are
 * slices of that one encoding, so every window keeps offsets into the original text.
 *
 * The plans (eng_tok_plan_qa, eng_tok_plan_text) are the pipelines' arithmetic on top: how many
 * tokens of the cut sequence fit a window once the other sequence and the special tokens are in, and
 * which stride applies. tests/fuzz/fuzz_windows.c checks their invariants on random shapes. */
#include <string.h>

#include "engine/answer.h"
#include "engine/tokenizer.h"

int eng_tok_window_count(int n, int window, int stride) {
    if (window < 1 || n < 0) return ENG_INVALID_ARGUMENT;
    if (n <= window) return 1; /* nothing is cut: the library checks the stride only when it cuts */
    if (stride < 0 || stride >= window) return ENG_INVALID_ARGUMENT;
    int step = window - stride;
    return 1 + (n - window + step - 1) / step;
}

int eng_tok_seq_len(const eng_tok_encoding *e, int seq) {
    int n = 0;
    for (size_t i = 0; i < e->n; i++) n += e->seq_ids[i] == seq;
    return n;
}

int eng_tok_window(const eng_tok_encoding *full, int seq, int start, int len, int keep_other, eng_tok_encoding *out) {
    size_t n = 0;
    int at_seq = 0, at_other = 0;
    for (size_t i = 0; i < full->n; i++) {
        int s = full->seq_ids[i];
        if (s < 0) n++;
        else if (s == seq) n += at_seq >= start && at_seq < start + len, at_seq++;
        else n += keep_other < 0 || at_other < keep_other, at_other++;
    }
    if (eng_tok_encoding_alloc(out, n)) return ENG_NO_MEMORY;
    size_t k = 0;
    at_seq = at_other = 0;
    for (size_t i = 0; i < full->n; i++) {
        int s = full->seq_ids[i], keep;
        if (s < 0) keep = 1;
        else if (s == seq) keep = at_seq >= start && at_seq < start + len, at_seq++;
        else keep = keep_other < 0 || at_other < keep_other, at_other++;
        if (!keep) continue;
        out->ids[k] = full->ids[i];
        out->type_ids[k] = full->type_ids[i];
        memcpy(out->offsets + 2 * k, full->offsets + 2 * i, 2 * sizeof *out->offsets);
        memcpy(out->byte_offsets + 2 * k, full->byte_offsets + 2 * i, 2 * sizeof *out->byte_offsets);
        out->seq_ids[k] = full->seq_ids[i];
        out->special_mask[k] = full->special_mask[i];
        k++;
    }
    return 0;
}

int eng_tok_plan_qa(const eng_tok_encoding *full, int max_seq_len, int doc_stride, int max_question_len,
                    eng_tok_windows *out) {
    int seq_len = max_seq_len > 0 ? max_seq_len : 1;
    int stride = doc_stride >= 0 ? doc_stride : (seq_len / 2 < ENG_QA_DOC_STRIDE ? seq_len / 2 : ENG_QA_DOC_STRIDE);
    int mq = max_question_len > 0 ? max_question_len : ENG_QA_MAX_QUESTION_LEN;
    int qn = eng_tok_seq_len(full, 0), cn = eng_tok_seq_len(full, 1), specials = (int)full->n - qn - cn;
    int qkeep = qn < mq ? qn : mq;
    *out = (eng_tok_windows){.seq = 1, .n = cn, .room = seq_len - specials - qkeep, .stride = stride,
                             .keep_other = qkeep < qn ? qkeep : -1, .specials = specials, .n_windows = 1};
    out->whole = cn <= out->room && qkeep == qn;
    if (out->whole) return 0;
    int nw = eng_tok_window_count(cn, out->room, stride);
    if (nw < 0) return ENG_INVALID_ARGUMENT;
    out->n_windows = nw;
    return 0;
}

int eng_tok_plan_text(const eng_tok_encoding *full, int max_len, int stride, eng_tok_windows *out) {
    int n = eng_tok_seq_len(full, 0), specials = (int)full->n - n;
    *out = (eng_tok_windows){.seq = 0, .n = n, .room = max_len - specials, .stride = stride, .keep_other = -1,
                             .specials = specials, .n_windows = 1};
    out->whole = n <= out->room;
    if (out->whole) return 0;
    int nw = eng_tok_window_count(n, out->room, stride);
    if (nw < 0) return ENG_INVALID_ARGUMENT;
    out->n_windows = nw;
    return 0;
}

int eng_tok_plan_window(const eng_tok_encoding *full, const eng_tok_windows *p, int w, eng_tok_encoding *out) {
    return eng_tok_window(full, p->seq, w * (p->room - p->stride), p->room, p->keep_other, out);
}
