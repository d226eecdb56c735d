/* answer.c - QA answer spans and tagging entities from head outputs (see engine/answer.h).
 *
 * The QA search keeps the score in logit space while it searches (maximizing p_start * p_end over
 * the context is maximizing start logit + end logit, the normalizers being constants) and turns the
 * winner into a probability once, in double precision. Tagging mirrors the token-classification
 * pipeline step by step (tokens, then words for FIRST, then groups) so the Python reference in
 * tools/reference/heads.py can be read side by side with it. */
#include "engine/answer.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/status.h"

int eng_qa_best_span(const float *logits, const int8_t *seq_ids, int n, int context_seq, int max_tokens,
                     eng_qa_span *out) {
    if (max_tokens < 1) return ENG_INVALID_ARGUMENT;
    float ms = -INFINITY, me = -INFINITY;
    int any = 0;
    for (int i = 0; i < n; i++)
        if (seq_ids[i] == context_seq) {
            any = 1;
            if (logits[2 * i] > ms) ms = logits[2 * i];
            if (logits[2 * i + 1] > me) me = logits[2 * i + 1];
        }
    if (!any) return ENG_NOT_FOUND;
    double zs = 0, ze = 0;
    for (int i = 0; i < n; i++)
        if (seq_ids[i] == context_seq) zs += exp((double)logits[2 * i] - ms), ze += exp((double)logits[2 * i + 1] - me);
    double best = -INFINITY;
    int bs = -1, be = -1;
    for (int s = 0; s < n; s++) {
        if (seq_ids[s] != context_seq) continue;
        for (int e = s; e < n && e < s + max_tokens && seq_ids[e] == context_seq; e++) {
            double v = (double)logits[2 * s] + logits[2 * e + 1];
            if (v > best || bs < 0) best = v, bs = s, be = e;
        }
    }
    out->start = bs;
    out->end = be;
    out->score = (float)(exp((double)logits[2 * bs] - ms) / zs * (exp((double)logits[2 * be + 1] - me) / ze));
    return 0;
}

eng_qa_params eng_qa_default_params(void) {
    return (eng_qa_params){.max_answer_len = ENG_QA_MAX_ANSWER_LEN, .top_k = 1, .handle_impossible = 0};
}

/* The pipeline's masked logit: -10000 for tokens that can be no part of an answer. */
#define QA_MASKED (-10000.0)

static double qa_value(const eng_qa_window *w, int i, int c, int context_seq, int32_t cls_id) {
    int keep = w->seq_ids[i] == context_seq || (cls_id >= 0 && w->ids[i] == cls_id);
    return keep ? (double)w->logits[2 * i + c] : QA_MASKED;
}

/* Inserts a into the k best (n of them, best first), after every answer scoring at least as much, so
 * candidates offered in window, start, end order keep that order on equal scores. */
static void qa_offer(eng_qa_answer *best, int *n, int k, eng_qa_answer a) {
    if (*n == k && !(a.score > best[k - 1].score)) return;
    int at = *n < k ? *n : k - 1;
    while (at > 0 && best[at - 1].score < a.score) {
        best[at] = best[at - 1];
        at--;
    }
    best[at] = a;
    if (*n < k) (*n)++;
}

int eng_qa_answers(const eng_qa_window *w, int n_windows, int context_seq, int32_t cls_id, const eng_qa_params *p,
                   eng_qa_answer *out) {
    if (p->max_answer_len < 1 || p->top_k < 1 || p->top_k > ENG_QA_MAX_TOP_K) return ENG_INVALID_ARGUMENT;
    int n_out = 0;
    double min_null = 1e6; /* the pipeline's start: large and positive */
    for (int x = 0; x < n_windows; x++) {
        const eng_qa_window *win = &w[x];
        if (win->n < 1) continue;
        /* softmax over every token, the masked ones at -10000 */
        double ms = -INFINITY, me = -INFINITY, zs = 0, ze = 0;
        for (int i = 0; i < win->n; i++) {
            ms = fmax(ms, qa_value(win, i, 0, context_seq, cls_id));
            me = fmax(me, qa_value(win, i, 1, context_seq, cls_id));
        }
        for (int i = 0; i < win->n; i++) {
            zs += exp(qa_value(win, i, 0, context_seq, cls_id) - ms);
            ze += exp(qa_value(win, i, 1, context_seq, cls_id) - me);
        }
        double null = exp(qa_value(win, 0, 0, context_seq, cls_id) - ms) / zs * (exp(qa_value(win, 0, 1, context_seq, cls_id) - me) / ze);
        if (null < min_null) min_null = null;
        for (int s = 1; s < win->n; s++) { /* token 0's probabilities are zeroed: no span starts there */
            if (win->seq_ids[s] != context_seq) continue;
            double ps = exp((double)win->logits[2 * s] - ms) / zs;
            for (int e = s; e < win->n && e < s + p->max_answer_len && win->seq_ids[e] == context_seq; e++) {
                double pe = exp((double)win->logits[2 * e + 1] - me) / ze;
                qa_offer(out, &n_out, p->top_k, (eng_qa_answer){.window = x, .start = s, .end = e, .score = (float)(ps * pe)});
            }
        }
    }
    if (p->handle_impossible && n_windows > 0)
        qa_offer(out, &n_out, p->top_k, (eng_qa_answer){.window = -1, .start = 0, .end = 0, .score = (float)min_null});
    return n_out;
}

const char *eng_tag_aggregation_name(eng_tag_aggregation a) {
    switch (a) {
    case ENG_TAG_AGG_NONE: return "none";
    case ENG_TAG_AGG_SIMPLE: return "simple";
    case ENG_TAG_AGG_FIRST: return "first";
    }
    return "none";
}

int eng_tag_aggregation_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "none")) return ENG_TAG_AGG_NONE;
    if (!strcmp(s, "simple")) return ENG_TAG_AGG_SIMPLE;
    if (!strcmp(s, "first")) return ENG_TAG_AGG_FIRST;
    return -1;
}

const char *eng_tag_group_name(const char *label) {
    const char *d = strchr(label, '-');
    return d ? d + 1 : label;
}

static int argmax_row(const float *p, int k) {
    int b = 0;
    for (int j = 1; j < k; j++)
        if (p[j] > p[b]) b = j;
    return b;
}

/* The pipeline's get_tag: "B-x" -> (B, x), "I-x" -> (I, x), anything else -> (I, itself). */
static const char *tag_of(const char *label, int *is_b) {
    *is_b = label[0] == 'B' && label[1] == '-';
    return (label[0] == 'B' || label[0] == 'I') && label[1] == '-' ? label + 2 : label;
}

/* Merges the entities of `ents` (n_ents, token or word level) into groups, in place; each group's
 * score is the nanmean of its members' scores. Returns the number of groups. */
static int group(eng_tag_entity *ents, int n_ents, const char *const *labels) {
    int n_groups = 0;
    for (int i = 0; i < n_ents;) {
        eng_tag_entity g = ents[i];
        double sum = 0;
        int cnt = 0;
        int j = i;
        for (; j < n_ents; j++) {
            if (j > i) {
                int b, lb;
                const char *t = tag_of(labels[ents[j].label], &b);
                const char *lt = tag_of(labels[ents[j - 1].label], &lb);
                if (b || strcmp(t, lt) || ents[j].seq != ents[j - 1].seq) break;
            }
            if (!isnan(ents[j].score)) sum += ents[j].score, cnt++;
        }
        g.last = ents[j - 1].last;
        g.score = cnt ? (float)(sum / cnt) : NAN;
        ents[n_groups++] = g;
        i = j;
    }
    return n_groups;
}

int eng_tag_entities(const float *probs, int n, int k, const uint8_t *skip, const uint8_t *subword, const int8_t *seq_ids,
                     const char *const *labels, eng_tag_aggregation agg, eng_tag_entity *out) {
    int m = 0;
    /* tokens (NONE, SIMPLE) or words (FIRST) */
    for (int i = 0; i < n; i++) {
        if (skip[i]) continue;
        const float *p = probs + (size_t)i * k;
        int seq = seq_ids[i] > 0 ? seq_ids[i] : 0;
        if (agg == ENG_TAG_AGG_FIRST && m > 0 && subword[i] && out[m - 1].seq == seq) {
            out[m - 1].last = i; /* the word keeps its first token's label and score */
            continue;
        }
        int lb = argmax_row(p, k);
        out[m++] = (eng_tag_entity){.label = lb, .score = p[lb], .first = i, .last = i, .seq = seq};
    }
    if (agg != ENG_TAG_AGG_NONE) m = group(out, m, labels);
    /* leave out "O" (NONE: the label; grouped: the group's name) */
    int kept = 0;
    for (int i = 0; i < m; i++) {
        const char *name = agg == ENG_TAG_AGG_NONE ? labels[out[i].label] : eng_tag_group_name(labels[out[i].label]);
        if (strcmp(name, "O")) out[kept++] = out[i];
    }
    return kept;
}

/* Stable merge sort by start (the pipeline's sorted() is stable). */
static void span_sort(eng_tag_span *s, eng_tag_span *tmp, int n) {
    if (n < 2) return;
    int h = n / 2;
    span_sort(s, tmp, h);
    span_sort(s + h, tmp, n - h);
    int a = 0, b = h, k = 0;
    while (a < h && b < n) tmp[k++] = s[b].start < s[a].start ? s[b++] : s[a++];
    while (a < h) tmp[k++] = s[a++];
    while (b < n) tmp[k++] = s[b++];
    memcpy(s, tmp, (size_t)n * sizeof *s);
}

int eng_tag_merge_windows(eng_tag_span *s, int n, eng_tag_span *scratch) {
    if (n < 1) return 0;
    span_sort(s, scratch, n);
    int kept = 0;
    eng_tag_span prev = s[0];
    for (int i = 0; i < n; i++) {
        eng_tag_span e = s[i];
        if (prev.start <= e.start && e.start < prev.end) {
            int32_t cur = e.end - e.start, was = prev.end - prev.start;
            if (cur > was || (cur == was && e.score > prev.score)) prev = e;
        } else {
            s[kept++] = prev;
            prev = e;
        }
    }
    s[kept++] = prev;
    return kept;
}
