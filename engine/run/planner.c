/* planner.c - execution of many (input, task) pairs as one packed pass (see engine/run.h).
 *
 * Streams: every input has a trunk (no adapters) that lives while some task of the input starts
 * later; every task whose start layer s < L gets its own stream, born at layer s as a copy of the
 * trunk - or, when the task's only modules in layer s sit at the output site (Pfeiffer-style
 * adapters), split off inside layer s from the trunk's FFN output (a "late split",
 * model/encoder.h), so that layer's attention and FFN run once for all such tasks. Before a layer
 * where streams are born or die, the live streams are re-packed into a fresh row block (trunks first, then each task's streams together), so that each layer is one
 * eng__layer_forward over contiguous rows with one group per task. Births and deaths happen only at
 * the distinct start layers, so re-packing is rare. A task with a LoRA on the word embeddings,
 * asked at skip 0, is born at layer 0 from its own embedded rows, embedded with the trunks. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "math/state.h"
#include "engine/run.h"
#include "model/encoder.h"
#include "run/cost.h"
#include "model/adapter.h"
#include "task/head.h"

typedef struct {
    int input;
    const eng_task *task; /* NULL: trunk */
    int start;            /* first layer with the task's adapters (0 for trunks) */
    int born;             /* first layer the stream runs as its own rows: start, or start + 1 for a late split */
    int32_t late_row;     /* late split: its rows in the late buffer, -1 otherwise */
    int32_t emb_row;      /* own embeddings (a LoRA on them, skip 0): its rows in the embedded block, else -1 */
    int out;              /* index into outs for task streams */
    int32_t row;          /* first row in the current block, -1 when not live */
    int32_t len;
} stream;

/* The LoRA on the word embeddings a stream born at `born` embeds its own rows with: a task that has
 * one is born at layer 0 exactly when asked at skip 0 (eng_task_split_layer). NULL otherwise. */
static const eng_emb_lora *own_embedding(const eng_task *t, int born) {
    return born == 0 ? eng__task_emb_lora(t) : NULL;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void eng_task_outs_free(eng_task_out *outs, int n) {
    for (int i = 0; outs && i < n; i++) {
        free(outs[i].logits);
        outs[i].logits = NULL;
    }
}

void eng_plan_stats_free(eng_plan_stats *s) {
    if (!s) return;
    free(s->rows);
    free(s->streams);
    free(s->trunks);
    free(s->ms);
    free(s->gflop);
    memset(s, 0, sizeof *s);
}

int eng_run(const eng_model *m, eng_state *st, const eng_input *inputs, int n_inputs, eng_task_out *outs,
            eng_plan_stats *stats, eng_err *err) {
    const eng_config *c = eng_model_config(m);
    int L = c->n_layers, H = c->hidden, rc = 0;
    double t_start = now_ms();
    if (n_inputs < 1) return eng_err_set(err, ENG_INVALID_ARGUMENT, "no inputs");
    int n_outs = 0, n_tokens = 0, n_emb_tokens = 0, n_emb = 0;
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i].len < 1) return eng_err_set(err, ENG_INVALID_ARGUMENT, "input %d is empty", i);
        if (inputs[i].n_tasks < 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "input %d: bad task count", i);
        for (int k = 0; k < inputs[i].n_tasks; k++) {
            const eng_task_req *r = &inputs[i].tasks[k];
            if (!r->task) return eng_err_set(err, ENG_INVALID_ARGUMENT, "input %d, task %d: no task", i, k);
            if (r->skip < 0 || r->skip > L)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "input %d, task '%s': skip %d outside 0..%d", i,
                                   eng_task_name(r->task), r->skip, L);
            if (own_embedding(r->task, eng_task_split_layer(r->task, r->skip))) n_emb_tokens += inputs[i].len, n_emb++;
        }
        n_outs += inputs[i].n_tasks;
        n_tokens += inputs[i].len;
    }
    memset(outs, 0, (size_t)n_outs * sizeof *outs);
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_layers = L;
        stats->rows = calloc((size_t)L, sizeof(int));
        stats->streams = calloc((size_t)L, sizeof(int));
        stats->trunks = calloc((size_t)L, sizeof(int));
        stats->ms = calloc((size_t)L, sizeof(double));
        stats->gflop = calloc((size_t)L, sizeof(double));
        stats->tokens = n_tokens;
        if (!stats->rows || !stats->streams || !stats->trunks || !stats->ms || !stats->gflop) {
            eng_plan_stats_free(stats);
            return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        }
    }
    /* streams: n_inputs trunks, then one per (input, task) that runs adapters */
    int n_streams = n_inputs + n_outs;
    stream *sv = calloc((size_t)n_streams, sizeof *sv);
    int *trunk_until = calloc((size_t)n_inputs, sizeof *trunk_until); /* trunk needed as input of layers < this */
    /* the embedded block: every input once (the trunks), then once more per stream with its own embeddings */
    size_t n_embed = (size_t)n_tokens + (size_t)n_emb_tokens;
    int32_t *ids = malloc(n_embed * sizeof *ids), *types = malloc(n_embed * sizeof *types),
            *lens = malloc((size_t)(n_inputs + n_emb) * sizeof *lens);
    const eng_emb_lora **seq_lora = n_emb ? calloc((size_t)(n_inputs + n_emb), sizeof *seq_lora) : NULL;
    int *order = malloc((size_t)n_streams * sizeof *order);
    eng_seg *segs = malloc((size_t)n_streams * sizeof *segs);
    eng_group *groups = malloc((size_t)(n_streams + 1) * sizeof *groups);
    const eng_task **gtask = malloc((size_t)(n_streams + 1) * sizeof *gtask);
    eng_late_split *late = malloc((size_t)(n_streams + 1) * sizeof *late);
    float *late_buf = NULL;
    size_t max_rows = (size_t)n_tokens * (size_t)(1 + (n_outs > 0 ? n_outs : 0));
    /* row blocks live in the state's scratch: a serving worker reuses them batch after batch */
    float *xa = eng__state_scratch(st, ENG_SCRATCH_X0, max_rows * H), *xb = eng__state_scratch(st, ENG_SCRATCH_X1, max_rows * H);
    if (!sv || !trunk_until || !ids || !types || !lens || !order || !segs || !groups || !gtask || !late || !xa || !xb ||
        (n_emb && !seq_lora)) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory for %d inputs x %d tasks", n_inputs, n_outs);
        goto done;
    }
    /* embed all inputs into xa: trunk i at its packed position */
    int off = 0, o = 0;
    for (int i = 0; i < n_inputs; i++) {
        memcpy(ids + off, inputs[i].ids, (size_t)inputs[i].len * sizeof *ids);
        if (inputs[i].type_ids)
            memcpy(types + off, inputs[i].type_ids, (size_t)inputs[i].len * sizeof *types);
        else
            memset(types + off, 0, (size_t)inputs[i].len * sizeof *types);
        lens[i] = inputs[i].len;
        sv[i] = (stream){.input = i, .task = NULL, .start = 0, .born = 0, .late_row = -1, .emb_row = -1, .out = -1,
                         .row = off, .len = inputs[i].len};
        for (int k = 0; k < inputs[i].n_tasks; k++, o++) {
            const eng_task_req *r = &inputs[i].tasks[k];
            int start = eng_task_first_layer(r->task);
            if (r->skip > start) start = r->skip;
            outs[o].start_layer = start;
            int born = eng_task_split_layer(r->task, r->skip);
            sv[n_inputs + o] = (stream){.input = i, .task = r->task, .start = start, .born = born, .late_row = -1,
                                        .emb_row = -1, .out = o, .row = -1, .len = inputs[i].len};
            if (born > trunk_until[i]) trunk_until[i] = born;
        }
        off += inputs[i].len;
    }
    /* streams with their own embeddings: their input again, after the trunks, with the task's LoRA */
    int n_seq = n_inputs;
    for (int s = n_inputs; s < n_streams; s++) {
        const eng_emb_lora *lo = own_embedding(sv[s].task, sv[s].born);
        if (!lo) continue;
        int from = sv[sv[s].input].row;
        memcpy(ids + off, ids + from, (size_t)sv[s].len * sizeof *ids);
        memcpy(types + off, types + from, (size_t)sv[s].len * sizeof *types);
        lens[n_seq] = sv[s].len;
        seq_lora[n_seq++] = lo;
        sv[s].emb_row = off;
        off += sv[s].len;
    }
    eng_batch b = {.n_seq = n_seq, .ids = ids, .type_ids = types, .seq_len = lens};
    double t0 = now_ms();
    if ((rc = eng__embed_lora(m, st, &b, seq_lora, xa, err))) goto done;
    if (stats) stats->embed_ms = now_ms() - t0;

    int rows = n_tokens, n_groups = 0, n_segs = 0, dirty = 1;
    for (int l = 0; l < L; l++) {
        /* births at l, deaths of trunks no task needs from l on */
        for (int s = n_inputs; s < n_streams; s++)
            if (sv[s].born == l) dirty = 1;
        for (int i = 0; i < n_inputs; i++)
            if (sv[i].row >= 0 && trunk_until[i] <= l) dirty = 1;
        if (dirty) {
            /* re-pack into xb: live trunks, then task streams grouped by task (stable by first appearance) */
            int n = 0;
            for (int i = 0; i < n_inputs; i++)
                if (trunk_until[i] > l) order[n++] = i;
            int n_trunks = n;
            for (int s = n_inputs; s < n_streams; s++) {
                if (sv[s].born > l || sv[s].born >= L) continue;
                int dup = 0;
                for (int q = n_trunks; q < n && !dup; q++) dup = sv[order[q]].task == sv[s].task;
                if (dup) continue;
                for (int q = s; q < n_streams; q++)
                    if (sv[q].task == sv[s].task && sv[q].born <= l && sv[q].born < L) order[n++] = q;
            }
            int row = 0;
            n_groups = n_segs = 0;
            for (int q = 0; q < n; q++) {
                stream *S = &sv[order[q]];
                /* a newborn copies its trunk, or its late-split rows */
                const float *from = S->row >= 0      ? xa + (size_t)S->row * H
                                    : S->late_row >= 0 ? late_buf + (size_t)S->late_row * H
                                    : S->emb_row >= 0  ? xa + (size_t)S->emb_row * H /* only at layer 0 */
                                                       : xa + (size_t)sv[S->input].row * H;
                memcpy(xb + (size_t)row * H, from, (size_t)S->len * H * sizeof(float));
                S->late_row = -1;
                S->emb_row = -1;
                segs[n_segs++] = (eng_seg){row, S->len};
                if (q > 0 && sv[order[q - 1]].task == S->task) {
                    groups[n_groups - 1].rows += S->len;
                } else {
                    gtask[n_groups] = S->task;
                    groups[n_groups++] = (eng_group){row, S->len, NULL};
                }
                row += S->len;
            }
            for (int s = 0; s < n_streams; s++) sv[s].row = -1;
            row = 0;
            for (int q = 0; q < n; q++) {
                sv[order[q]].row = row;
                row += sv[order[q]].len;
            }
            rows = row;
            float *t = xa;
            xa = xb;
            xb = t;
            dirty = 0;
        }
        /* each task group runs its task's adapters of this layer */
        for (int g = 0; g < n_groups; g++) groups[g].ad = gtask[g] ? &eng__task_layers(gtask[g])[l] : NULL;
        /* late splits of this layer: streams whose first adapters sit only at its output site */
        int n_late = 0, late_rows = 0;
        for (int s = n_inputs; s < n_streams; s++)
            if (sv[s].start == l && sv[s].born == l + 1) {
                late[n_late++] = (eng_late_split){sv[s].input >= 0 ? sv[sv[s].input].row : 0, sv[s].len, late_rows,
                                                  &eng__task_layers(sv[s].task)[l]};
                sv[s].late_row = late_rows;
                late_rows += sv[s].len;
            }
        if (n_late && !(late_buf = eng__state_scratch(st, ENG_SCRATCH_X2, (size_t)late_rows * H))) {
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            goto done;
        }
        double tl = now_ms();
        if ((rc = eng__layer_forward(m, st, l, xa, rows, segs, n_segs, groups, n_groups, late, n_late, late_buf, err)))
            goto done;
        if (stats) {
            stats->ms[l] = now_ms() - tl;
            stats->rows[l] = rows;
            stats->streams[l] = n_segs;
            int tr = 0;
            for (int i = 0; i < n_inputs; i++) tr += sv[i].row >= 0;
            stats->trunks[l] = tr;
            double f = 0;
            for (int s = 0; s < n_segs; s++) f += eng__layer_gflop(c, segs[s].len);
            for (int g = 0; g < n_groups; g++)
                if (groups[g].ad) f += eng__adapter_gflop(c, groups[g].ad, groups[g].rows);
            for (int k = 0; k < n_late; k++) f += eng__adapter_gflop(c, late[k].ad, late[k].len);
            stats->gflop[l] = f;
        }
    }
    /* heads */
    double th = now_ms();
    for (int s = n_inputs; s < n_streams && !rc; s++) {
        const eng_head *h = eng_task_head(sv[s].task);
        const float *rows_of = NULL;
        if (sv[s].born < L) rows_of = sv[s].row >= 0 ? xa + (size_t)sv[s].row * H : NULL;
        else if (sv[s].late_row >= 0) rows_of = late_buf + (size_t)sv[s].late_row * H; /* split in the last layer */
        else if (sv[s].start >= L) rows_of = sv[sv[s].input].row >= 0 ? xa + (size_t)sv[sv[s].input].row * H : NULL;
        if (!rows_of) {
            rc = eng_err_set(err, ENG_INTERNAL, "planner lost the rows of task '%s'", eng_task_name(sv[s].task));
            break;
        }
        const stream *src = &sv[s];
        eng_task_out *out = &outs[sv[s].out];
        out->n_rows = h->input == ENG_HEAD_IN_TOKENS ? src->len : 1;
        out->num_labels = h->num_labels;
        out->logits = malloc((size_t)out->n_rows * h->num_labels * sizeof(float));
        if (!out->logits) {
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            break;
        }
        if (h->input == ENG_HEAD_IN_POOLER) {
            float *pooler_out = eng__state_scratch(st, ENG_SCRATCH_POOLER_OUT, (size_t)H);
            eng_seg seg = {0, src->len};
            if (!pooler_out) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory (pooler)");
            else rc = eng__pooler_forward(m, st, rows_of, &seg, 1, pooler_out, err);
            rows_of = pooler_out;
        }
        if (!rc) rc = eng__head_forward(m, st, h, rows_of, src->len, out->logits, err);
    }
    if (stats) {
        stats->heads_ms = now_ms() - th;
        stats->total_ms = now_ms() - t_start;
    }
done:
    if (rc) {
        eng_task_outs_free(outs, n_outs);
        if (stats) eng_plan_stats_free(stats);
    }
    free(sv);
    free(trunk_until);
    free(ids);
    free(types);
    free(lens);
    free(seq_lora);
    free(order);
    free(segs);
    free(groups);
    free(gtask);
    free(late);
    return rc;
}
