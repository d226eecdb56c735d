/* answer.h - from a head's per-token outputs to what a person reads: the answer span of extractive
 * QA and the entities of token tagging.
 *
 * Both the server and the command line turn engine outputs into answers; they call these functions
 * so the two can never disagree. The functions are pure: they read logits or probabilities and the
 * encoding's per-token arrays (eng_tok_encoding) and write token indexes; mapping tokens to text
 * (offsets) and to JSON is the caller's. No allocation, no locks: safe from any thread.
 *
 *     eng_qa_span s;
 *     if (eng_qa_best_span(out->logits, enc.seq_ids, (int)enc.n, 1, ENG_QA_MAX_ANSWER_TOKENS, &s) == 0)
 *         printf("[%d, %d) p=%g\n", enc.offsets[2 * s.start], enc.offsets[2 * s.end + 1], s.score);
 *
 * QA span, the "context" rule (kept as an option; the pipeline's rule, eng_qa_answers, is the default):
 *   - candidates are the token pairs (s, e) with s <= e < s + max_tokens, both tokens of the context
 *     sequence (seq id context_seq: the text_pair), every token between them too; special tokens
 *     ([CLS], [SEP]) and the question are never part of an answer;
 *   - p_start = softmax of the start logits over the context tokens only, p_end likewise for the
 *     end logits; the span's score is p_start[s] * p_end[e], the probability of the span when start
 *     and end are drawn independently from the context;
 *   - the best span has the highest score; on equal scores the earliest start, then the earliest end.
 *
 * Tagging entities follow the aggregation strategies of Hugging Face's token-classification
 * pipeline (see eng_tag_entities). */
#ifndef ADAPTERD_ENGINE_ANSWER_H
#define ADAPTERD_ENGINE_ANSWER_H

#include <stdint.h>

/* The "context" rule's limit (eng_qa_best_span): the SQuAD scripts' max_answer_length. Not the
 * pipeline's default, which is ENG_QA_MAX_ANSWER_LEN. */
#define ENG_QA_MAX_ANSWER_TOKENS 30

/* Hugging Face's question-answering pipeline's defaults: max_answer_len 15, top_k 1, max_seq_len
 * 384 (or the model's limit when lower), doc_stride 128 (or half of max_seq_len when lower),
 * max_question_len 64. */
#define ENG_QA_MAX_ANSWER_LEN 15
#define ENG_QA_MAX_SEQ_LEN 384
#define ENG_QA_DOC_STRIDE 128
#define ENG_QA_MAX_QUESTION_LEN 64
/* Answers a request may ask for (top_k); the pipeline has no limit, a server needs one. */
#define ENG_QA_MAX_TOP_K 100

typedef struct {
    int start, end; /* token indexes, inclusive: the answer is tokens start..end */
    float score;    /* p_start[start] * p_end[end], in [0, 1] */
} eng_qa_span;

/* Finds the best answer span (definition above). logits: (n, 2) start and end logit per token, as
 * an ENG_HEAD_QA head gives them; seq_ids: (n) the encoding's sequence ids. Returns 0 and fills
 * *out, or ENG_NOT_FOUND when no token belongs to context_seq (an empty context), or
 * ENG_INVALID_ARGUMENT when max_tokens < 1. */
int eng_qa_best_span(const float *logits, const int8_t *seq_ids, int n, int context_seq, int max_tokens,
                     eng_qa_span *out);

/* The pipeline's span choice (the default; docs/API.md says which rule a request gets):
 *   - per window, the start and end logits of every token that is not context (question, special
 *     tokens) are replaced by -10000, except tokens whose id is the tokenizer's [CLS]; softmax over
 *     all the window's tokens, so [CLS] takes its share of the probability;
 *   - the no-answer score of a window is p_start[0] * p_end[0] (its first token, [CLS]); then
 *     p_start[0] = p_end[0] = 0;
 *   - candidates are context spans s <= e < s + max_answer_len inside one window, scored
 *     p_start[s] * p_end[e]; the answers are the top_k best of every window together, ties in window
 *     order, then start, then end (the pipeline's sort is stable over its windows);
 *   - with handle_impossible, the no-answer (window -1) with the smallest no-answer score over the
 *     windows competes with them.
 * Unlike the pipeline, a span never starts at [CLS] (its score is 0 after the zeroing; the pipeline
 * lists such spans only when top_k exceeds every span of the context), and a window without
 * context tokens offers none. */
typedef struct {
    int max_answer_len;    /* tokens, >= 1 */
    int top_k;             /* 1..ENG_QA_MAX_TOP_K */
    int handle_impossible; /* 1: the no-answer competes */
} eng_qa_params;

/* max_answer_len ENG_QA_MAX_ANSWER_LEN, top_k 1, handle_impossible 0. */
eng_qa_params eng_qa_default_params(void);

/* One window's head output and its tokens. */
typedef struct {
    const float *logits;     /* (n, 2) start and end logit per token */
    const int32_t *ids;      /* (n) token ids ([CLS] stays in the softmax) */
    const int8_t *seq_ids;   /* (n) */
    int n;
} eng_qa_window;

typedef struct {
    int window;              /* the window it is in; -1: the no-answer */
    int start, end;          /* token indexes in that window, inclusive (0, 0 for the no-answer) */
    float score;
} eng_qa_answer;

/* The pipeline's answers over windows w (n_windows; definition above) for the context sequence
 * context_seq, cls_id the tokenizer's [CLS] id (-1: none). Writes at most p->top_k answers to out,
 * best first, and returns their number (0: no window has a context token and no no-answer was
 * asked for), or ENG_INVALID_ARGUMENT when a parameter is out of range. No allocation. */
int eng_qa_answers(const eng_qa_window *w, int n_windows, int context_seq, int32_t cls_id, const eng_qa_params *p,
                   eng_qa_answer *out);

/* How tagged tokens become entities, as the token-classification pipeline's aggregation_strategy. */
typedef enum {
    ENG_TAG_AGG_NONE,   /* one entity per token: its argmax label and probability */
    ENG_TAG_AGG_SIMPLE, /* tokens as in NONE, then neighbours grouped by label (B-/I- merged) */
    ENG_TAG_AGG_FIRST,  /* tokens first merged into words, a word taking its first token's label
                           and score; then words grouped as in SIMPLE */
} eng_tag_aggregation;

/* Wire names "none", "simple", "first"; parse returns -1 for anything else. */
const char *eng_tag_aggregation_name(eng_tag_aggregation a);
int eng_tag_aggregation_parse(const char *s);

typedef struct {
    int label;       /* the label of the entity's first token (NONE, SIMPLE) or first word (FIRST);
                        grouped entities are named eng_tag_group_name(labels[label]) */
    float score;     /* NONE: the token's probability; SIMPLE: the mean over the group's tokens;
                        FIRST: the mean over its words of each word's first-token probability */
    int first, last; /* token indexes, inclusive */
    int seq;         /* the sequence the tokens belong to (0 text, 1 text_pair) */
} eng_tag_entity;

/* Groups tagged tokens into entities. probs: (n, k) per-token probabilities (eng_head_probs);
 * skip: (n) 1 for tokens that are never part of an entity (special tokens); subword: (n) 1 for
 * tokens that continue the word of the token before (eng_tok_subword_flags), read by FIRST only;
 * seq_ids: (n); labels: (k) names. As the pipeline does:
 *   - a label's prefix "B-" or "I-" splits it into (B|I, tag); any other label is (I, itself);
 *   - SIMPLE / FIRST: an entity continues the group before it when its tag is the group's last
 *     tag and it is not a B; a group is named after its first member's label without the text
 *     up to the first '-' ("B-PER" -> "PER", "O" -> "O");
 *   - entities labelled (NONE) or named (SIMPLE, FIRST) "O" are left out.
 * Unlike the pipeline (which knows one text only) words and groups never cross from the text to
 * the text_pair. NaN probabilities are left out of means, as numpy's nanmean does.
 * Writes at most n entities to out (n) in token order; returns their number. */
int eng_tag_entities(const float *probs, int n, int k, const uint8_t *skip, const uint8_t *subword, const int8_t *seq_ids,
                     const char *const *labels, eng_tag_aggregation agg, eng_tag_entity *out);

/* An entity of one window of a long text, in characters of the text: what the token-classification
 * pipeline merges over its windows (stride). */
typedef struct {
    int32_t start, end;      /* [start, end) */
    float score;
    int id;                  /* the caller's (which entity of which window) */
} eng_tag_span;

/* The token-classification pipeline's merge of the windows' entities (aggregate_overlapping_entities):
 * sorted by start (stable: window order on equal starts); walking them, an entity that starts inside
 * the one kept before (start <= its start < end) replaces it when it is longer, or as long with a
 * higher score, and is dropped otherwise; an entity that starts after it is kept. In place; returns
 * the number kept. n_scratch: room for n entries, for the stable sort. */
int eng_tag_merge_windows(eng_tag_span *s, int n, eng_tag_span *scratch);

/* The name of a group: label after its first '-' ("B-PER" -> "PER"), the label itself without one.
 * Points into label. */
const char *eng_tag_group_name(const char *label);

#endif
