/* answer.c - one task's engine output as the wire's result: the head's probabilities, the label,
 * the value, tagged tokens or entities, the QA span (engine/answer.h), into a proto_task_result.
 * The server (respond.c, every input of a job) and `adapterd predict` (tools/adapterd) both call
 * it, so the command line answers as POST /v1/predict does by construction, not by a test keeping
 * two copies equal. Depends on engine/ and proto's types only (no job, no store). */
#include "server/answer.h"

#include <stdlib.h>
#include <string.h>

#include "engine/answer.h"

proto_head_kind srv__wire_head_kind(int head_type) {
    switch (head_type) {
    case ENG_HEAD_MULTILABEL: return PROTO_HEAD_MULTILABEL;
    case ENG_HEAD_REGRESSION: return PROTO_HEAD_REGRESSION;
    case ENG_HEAD_TAGGING: return PROTO_HEAD_TAGGING;
    case ENG_HEAD_QA: return PROTO_HEAD_QA;
    default: return PROTO_HEAD_CLASSIFICATION;
    }
}

void srv_answer_free(srv_answer_bufs *b) {
    free(b->probs), free(b->tags), free(b->ents), free(b->groups), free(b->subword);
    free(b->qa_wins), free(b->qa_best), free(b->qa_answers), free(b->qa_words), free(b->spans), free(b->win_probs);
    memset(b, 0, sizeof *b);
}

/* The "context" rule: eng_qa_best_span over the first window's context (the pair), mapped to code
 * point offsets and the bytes of the pair. */
static void qa_answer_context(const srv_answer_input *in, const float *lg, proto_task_result *r) {
    const eng_tok_encoding *e = in->enc;
    eng_qa_span sp;
    if (!in->text || !in->pair || eng_qa_best_span(lg, e->seq_ids, (int)e->n, 1, ENG_QA_MAX_ANSWER_TOKENS, &sp)) return;
    r->has_answer = 1;
    r->ans_start = e->offsets[2 * sp.start];
    r->ans_end = e->offsets[2 * sp.end + 1];
    r->ans_score = sp.score;
    int32_t b0 = e->byte_offsets[2 * sp.start], b1 = e->byte_offsets[2 * sp.end + 1];
    r->ans_text = in->pair + b0;
    r->ans_text_len = b1 > b0 ? (size_t)(b1 - b0) : 0;
}

/* The pipeline's answers (eng_qa_answers) over every window of the input, each mapped through its
 * window's offsets into the original context; the first is the answer, all of them the list when
 * top_k > 1. Returns 0 or ENG_NO_MEMORY. */
static int qa_answer(const srv_answer_input *in, const eng_task_out *o, srv_answer_bufs *b, proto_task_result *r) {
    if (!in->text || !in->pair) return 0;
    eng_qa_params qp = in->qa.top_k > 0 ? in->qa : eng_qa_default_params();
    int nw = in->n_windows > 1 ? in->n_windows : 1;
    b->qa_wins = calloc((size_t)nw, sizeof *b->qa_wins);
    b->qa_best = calloc((size_t)qp.top_k, sizeof *b->qa_best);
    b->qa_answers = calloc((size_t)qp.top_k, sizeof *b->qa_answers);
    if (!b->qa_wins || !b->qa_best || !b->qa_answers) return ENG_NO_MEMORY;
    size_t longest = 1;
    for (int w = 0; w < nw; w++) longest = in->enc[w].n > longest ? in->enc[w].n : longest;
    if (!(b->qa_words = calloc(longest, 1))) return ENG_NO_MEMORY;
    for (int w = 0; w < nw; w++) {
        const eng_task_out *ow = o + (size_t)w * (nw > 1 ? in->out_stride : 0);
        const eng_tok_encoding *e = &in->enc[w];
        if (ow->num_labels != 2 || (size_t)ow->n_rows != e->n) return 0;
        b->qa_wins[w] = (eng_qa_window){.logits = ow->logits, .ids = e->ids, .seq_ids = e->seq_ids, .n = (int)e->n};
    }
    int32_t cls = in->tok ? eng_tokenizer_cls_id(in->tok) : -1;
    int n = eng_qa_answers(b->qa_wins, nw, 1, cls, &qp, b->qa_best);
    if (n < 0) return 0;
    for (int i = 0; i < n; i++) {
        const eng_qa_answer *a = &b->qa_best[i];
        proto_qa_answer *x = &b->qa_answers[i];
        *x = (proto_qa_answer){.score = a->score, .text = in->pair};
        if (a->window < 0) continue; /* the no-answer: (0, 0), "" */
        const eng_tok_encoding *e = &in->enc[a->window];
        int s = a->start, t = a->end;
        if (!in->qa_no_align && in->tok) {
            /* the pipeline's token_to_word / word_to_chars: the words the span's ends are in, as far as
             * this window holds them */
            eng_tok_word_starts(in->tok, e, in->text, in->text_len, in->pair, in->pair_len, b->qa_words);
            while (s > 0 && !b->qa_words[s] && e->seq_ids[s - 1] == e->seq_ids[s]) s--;
            while ((size_t)t + 1 < e->n && !b->qa_words[t + 1] && e->seq_ids[t + 1] == e->seq_ids[t]) t++;
        }
        x->start = e->offsets[2 * s];
        x->end = e->offsets[2 * t + 1];
        int32_t b0 = e->byte_offsets[2 * s], b1 = e->byte_offsets[2 * t + 1];
        x->text = in->pair + b0;
        x->text_len = b1 > b0 ? (size_t)(b1 - b0) : 0;
    }
    if (n > 0) {
        r->has_answer = 1;
        r->ans_start = b->qa_answers[0].start;
        r->ans_end = b->qa_answers[0].end;
        r->ans_score = b->qa_answers[0].score;
        r->ans_text = b->qa_answers[0].text;
        r->ans_text_len = b->qa_answers[0].text_len;
    }
    if (qp.top_k > 1) r->answers = b->qa_answers, r->n_answers = n;
    return 0;
}

/* Tagging: every token but the special ones (aggregation "tokens"), or entities grouped by
 * eng_tag_entities with offsets and words (an ids input has no text: no subwords, no words). */
static int tag_answer(const srv_answer_input *in, const float *p, int n, int k, proto_aggregation agg, srv_answer_bufs *b,
                      proto_task_result *r) {
    const eng_tok_encoding *e = in->enc;
    r->aggregation = agg;
    if (agg == PROTO_AGG_TOKENS) {
        if (!(b->tags = calloc((size_t)n + 1, sizeof *b->tags))) return ENG_NO_MEMORY;
        for (int row = 0; row < n; row++) {
            if (e->special_mask[row]) continue;
            const float *pr = p + (size_t)row * k;
            int lb = eng_argmax(pr, k);
            b->tags[r->n_tags++] = (proto_tag){e->offsets[2 * row], e->offsets[2 * row + 1], e->seq_ids[row] > 0 ? e->seq_ids[row] : 0,
                                               lb, pr[lb]};
        }
        r->tags = b->tags;
        return 0;
    }
    b->ents = calloc((size_t)n + 1, sizeof *b->ents);
    b->groups = calloc((size_t)n + 1, sizeof *b->groups);
    b->subword = calloc((size_t)n + 1, 1);
    if (!b->ents || !b->groups || !b->subword) return ENG_NO_MEMORY;
    if (in->text && in->tok && (size_t)n == e->n)
        eng_tok_subword_flags(in->tok, e, in->text, in->text_len, in->pair, in->pair_len, b->subword);
    eng_tag_aggregation a = agg == PROTO_AGG_SIMPLE ? ENG_TAG_AGG_SIMPLE : agg == PROTO_AGG_FIRST ? ENG_TAG_AGG_FIRST : ENG_TAG_AGG_NONE;
    const char *const *labels = r->labels;
    int m = eng_tag_entities(p, n, k, e->special_mask, b->subword, e->seq_ids, labels, a, b->groups);
    for (int x = 0; x < m; x++) {
        const eng_tag_entity *g = &b->groups[x];
        const char *src = g->seq == 1 ? in->pair : in->text;
        int32_t b0 = e->byte_offsets[2 * g->first], b1 = e->byte_offsets[2 * g->last + 1];
        b->ents[x] = (proto_entity){.name = a == ENG_TAG_AGG_NONE ? labels[g->label] : eng_tag_group_name(labels[g->label]),
                                    .score = g->score, .start = e->offsets[2 * g->first], .end = e->offsets[2 * g->last + 1],
                                    .seq = g->seq, .word = src && b1 > b0 ? src + b0 : NULL,
                                    .word_len = src && b1 > b0 ? (size_t)(b1 - b0) : 0};
    }
    r->entities = b->ents;
    r->n_entities = m;
    return 0;
}

/* Tagging over windows (the token-classification pipeline with a stride): each window's entities as
 * tag_answer groups them, offsets into the original text, then merged where windows overlap
 * (eng_tag_merge_windows). */
static int tag_answer_windows(const eng_head *h, const eng_task_out *o, const srv_answer_input *in, proto_aggregation agg,
                              srv_answer_bufs *b, proto_task_result *r) {
    int nw = in->n_windows, k = o->num_labels;
    size_t total = 0, longest = 1;
    for (int w = 0; w < nw; w++) {
        total += in->enc[w].n;
        longest = in->enc[w].n > longest ? in->enc[w].n : longest;
    }
    b->ents = calloc(total + 1, sizeof *b->ents);
    b->groups = calloc(longest + 1, sizeof *b->groups);
    b->subword = calloc(longest + 1, 1);
    b->spans = calloc(2 * total + 2, sizeof *b->spans);
    b->win_probs = malloc((longest * (size_t)k + 1) * sizeof *b->win_probs);
    if (!b->ents || !b->groups || !b->subword || !b->spans || !b->win_probs) return ENG_NO_MEMORY;
    eng_tag_aggregation a = agg == PROTO_AGG_SIMPLE ? ENG_TAG_AGG_SIMPLE : agg == PROTO_AGG_FIRST ? ENG_TAG_AGG_FIRST : ENG_TAG_AGG_NONE;
    const char *const *labels = r->labels;
    int cnt = 0;
    for (int w = 0; w < nw; w++) {
        const eng_task_out *ow = o + (size_t)w * in->out_stride;
        const eng_tok_encoding *e = &in->enc[w];
        int n = (int)e->n < ow->n_rows ? (int)e->n : ow->n_rows;
        eng_head_probs(h, ow->logits, n, b->win_probs);
        if (in->text && in->tok) eng_tok_subword_flags(in->tok, e, in->text, in->text_len, in->pair, in->pair_len, b->subword);
        int m = eng_tag_entities(b->win_probs, n, k, e->special_mask, b->subword, e->seq_ids, labels, a, b->groups);
        for (int x = 0; x < m; x++) {
            const eng_tag_entity *g = &b->groups[x];
            const char *src = g->seq == 1 ? in->pair : in->text;
            int32_t b0 = e->byte_offsets[2 * g->first], b1 = e->byte_offsets[2 * g->last + 1];
            b->ents[cnt] = (proto_entity){.name = a == ENG_TAG_AGG_NONE ? labels[g->label] : eng_tag_group_name(labels[g->label]),
                                          .score = g->score, .start = e->offsets[2 * g->first], .end = e->offsets[2 * g->last + 1],
                                          .seq = g->seq, .word = src && b1 > b0 ? src + b0 : NULL,
                                          .word_len = src && b1 > b0 ? (size_t)(b1 - b0) : 0};
            b->spans[cnt] = (eng_tag_span){.start = b->ents[cnt].start, .end = b->ents[cnt].end, .score = g->score, .id = cnt};
            cnt++;
        }
    }
    int kept = eng_tag_merge_windows(b->spans, cnt, b->spans + total + 1);
    proto_entity *out = calloc((size_t)kept + 1, sizeof *out);
    if (!out) return ENG_NO_MEMORY;
    for (int x = 0; x < kept; x++) out[x] = b->ents[b->spans[x].id];
    free(b->ents);
    b->ents = out;
    r->aggregation = agg;
    r->entities = out;
    r->n_entities = kept;
    return 0;
}

/* "long" chunks: the windows' logits (one row each) as their mean (chunks 1) or max (2) per label, in
 * b->win_probs; the head's probabilities are then taken of that row, as of one window's. */
static const float *chunk_logits(const eng_task_out *o, const srv_answer_input *in, srv_answer_bufs *b) {
    int k = o->num_labels, nw = in->n_windows;
    if (!(b->win_probs = malloc(((size_t)k + 1) * sizeof *b->win_probs))) return NULL;
    for (int c = 0; c < k; c++) {
        double acc = o->logits[c];
        for (int w = 1; w < nw; w++) {
            float x = o[(size_t)w * in->out_stride].logits[c];
            acc = in->chunks == 2 ? (x > acc ? x : acc) : acc + x;
        }
        b->win_probs[c] = in->chunks == 2 ? (float)acc : (float)(acc / nw);
    }
    return b->win_probs;
}

int srv_answer_task(const eng_head *h, const eng_task_out *o, const srv_answer_input *in, proto_aggregation agg,
                    srv_answer_bufs *b, proto_task_result *r) {
    const eng_tok_encoding *e = in->enc;
    int n = o->n_rows, k = o->num_labels;
    r->kind = srv__wire_head_kind(h->type);
    r->n_rows = n;
    const float *logits = o->logits;
    int pooled = r->kind == PROTO_HEAD_CLASSIFICATION || r->kind == PROTO_HEAD_MULTILABEL || r->kind == PROTO_HEAD_REGRESSION;
    if (pooled && in->chunks && in->n_windows > 1) {
        if (!(logits = chunk_logits(o, in, b))) return ENG_NO_MEMORY;
        if (r->logits) r->logits = logits;
    }
    if (!(b->probs = malloc(((size_t)n * k + 1) * sizeof *b->probs))) return ENG_NO_MEMORY;
    eng_head_probs(h, logits, n, b->probs);
    const float *p = b->probs;
    switch (r->kind) {
    case PROTO_HEAD_CLASSIFICATION:
        r->scores = p;
        r->label = eng_argmax(p, k);
        r->score = p[r->label];
        break;
    case PROTO_HEAD_MULTILABEL: r->scores = p; break;
    case PROTO_HEAD_REGRESSION: r->value = logits[0]; break;
    case PROTO_HEAD_TAGGING:
        if (in->n_windows > 1 && (agg == PROTO_AGG_SIMPLE || agg == PROTO_AGG_FIRST)) return tag_answer_windows(h, o, in, agg, b, r);
        return tag_answer(in, p, (int)e->n < n ? (int)e->n : n, k, agg, b, r);
    case PROTO_HEAD_QA:
        if (in->qa_context_rule) {
            if (k == 2 && (size_t)n == e->n) qa_answer_context(in, o->logits, r);
        } else {
            return qa_answer(in, o, b, r);
        }
        break;
    }
    return 0;
}
