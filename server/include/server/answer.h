/* answer.h - one task's engine output as the wire's result (server/answer.c): the one converter of
 * the server's answers (respond.c) and of `adapterd predict` (tools/adapterd/cmd_predict.c). */
#ifndef ADAPTERD_SERVER_ANSWER_H
#define ADAPTERD_SERVER_ANSWER_H

#include "engine/answer.h"
#include "engine/run.h"
#include "engine/task.h"
#include "engine/tokenizer.h"
#include "proto/proto.h"

/* The input a task answered: its encoding, and for a text input the text (and pair) it came from,
 * which tagging's words and subwords and QA's answer are taken from. */
typedef struct {
    const eng_tok_encoding *enc; /* (n_windows) the sequences the input was read in */
    const eng_tokenizer *tok;    /* the model's tokenizer (subwords, [CLS]); NULL: none */
    const char *text, *pair;     /* NULL: an ids input, or no pair */
    size_t text_len, pair_len;
    int n_windows;               /* 0 or 1: one sequence; more: window w's output is o[w * out_stride] */
    int out_stride;
    eng_qa_params qa;            /* QA: the pipeline's post-processing parameters; top_k 0: its defaults */
    int qa_context_rule;         /* QA: the "context" rule (eng_qa_best_span) on the first window instead */
    int qa_no_align;             /* QA: answers end at their tokens' offsets (the pipeline widens them to words) */
    int chunks;                  /* classification, multi-label, regression: 0: the first window; 1: the mean of
                                  * the windows' logits per label; 2: their max ("long": chunks) */
} srv_answer_input;

/* What a result borrows until it is encoded: free with srv_answer_free. Starts as {0}. */
typedef struct {
    float *probs;                /* (n_rows, n_labels) the head's probabilities */
    proto_tag *tags;             /* (n_rows + 1) */
    proto_entity *ents;          /* (n_rows + 1) */
    eng_tag_entity *groups;      /* (n_rows + 1) scratch of eng_tag_entities */
    uint8_t *subword;            /* (n_rows + 1) scratch */
    eng_qa_window *qa_wins;      /* (n_windows) */
    eng_qa_answer *qa_best;      /* (top_k) */
    proto_qa_answer *qa_answers; /* (top_k) */
    uint8_t *qa_words;           /* (the longest window's tokens) word starts */
    eng_tag_span *spans;         /* (2 x the windows' tokens) tagging over windows: entities to merge, scratch */
    float *win_probs;            /* (the longest window's tokens, n_labels); "long" chunks: the aggregated logits */
} srv_answer_bufs;

/* The wire kind of an engine head type (eng_head.type, or store_task_head_type); a head not known
 * yet (negative: never loaded) reads as classification, which the caller flags separately. */
proto_head_kind srv__wire_head_kind(int head_type);

/* Fills r's answer from head h's output o for input in: kind and n_rows, then by kind scores, label
 * and score (classification), scores (multi-label), value (regression), tagged tokens or entities
 * grouped by agg (tagging; over every window when there are several, merged as the token-classification
 * pipeline merges them), the pipeline's best span (or top_k spans) of the pair over every window
 * (QA, text inputs with a pair; none else). Classification, multi-label and regression answer from
 * the windows' logits aggregated per label when in->chunks says so, else from the first window. r's
 * labels and n_labels must be set (the names entities take); the rest of r is the caller's.
 * Returns 0, or ENG_NO_MEMORY. */
int srv_answer_task(const eng_head *h, const eng_task_out *o, const srv_answer_input *in, proto_aggregation agg,
                    srv_answer_bufs *b, proto_task_result *r);

void srv_answer_free(srv_answer_bufs *b);

#endif
