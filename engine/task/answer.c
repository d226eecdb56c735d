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
