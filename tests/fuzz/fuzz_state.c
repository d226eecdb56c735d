/* fuzz_state.c - the registry's state (adapters_store/state.c): the one parser every reader uses
 * (store__state_parse for the base .adapterd-state.json, store__state_apply_line for each line of
 * its journal: at start-up, at every rescan, and before every write) and the one writer's text
 * (store__state_format). The input is a base, or else a journal: a base that is not a JSON object
 * is refused with a reason, and the input's lines are then applied one by one to an empty state
 * (a line that is not a task's entry is skipped). Either way the state is written and read back:
 * the second reading must hold the same tasks (sorted, each found by name) with the same current
 * versions, pins and tombstones, and writing it again must give the same text (the writer's
 * output is a fixed point of the parser). Nothing touches the disk. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    eng_err err = {0};
    state_doc a, b;
    int rc = store__state_parse((const char *)data, size, &a, &err);
    fuzz_log("state", rc, err.msg);
    int journal = rc != 0;
    if (rc) {
        if (rc != ENG_FORMAT && rc != ENG_NO_MEMORY) abort();
        if (!err.msg[0]) abort(); /* refused with a reason */
        memset(&a, 0, sizeof a);
        for (size_t at = 0, end; at < size; at = end + 1) { /* the input as a journal */
            const uint8_t *nl = memchr(data + at, '\n', size - at);
            end = nl ? (size_t)(nl - data) : size;
            int k = store__state_apply_line(&a, (const char *)data + at, end - at);
            if (k < -1 || k > 1) abort();
            if (k < 0) { /* out of memory is not expected for these sizes */
                store__state_doc_free(&a);
                return 0;
            }
        }
    }
    for (int i = 0; i < a.n_tasks; i++) {
        /* sorted (equal: a repeated key of a base; a journal's entries are one a name) */
        if (i && strcmp(a.tasks[i - 1].name, a.tasks[i].name) > (journal ? -1 : 0)) abort();
        if (!store__state_find(&a, a.tasks[i].name)) abort();
        if (!a.tasks[i].has_max && a.tasks[i].max != LONG_MAX) abort(); /* no max: the current holds */
    }
    char *text = store__state_format(&a);
    if (!text) abort(); /* out of memory is not expected for these sizes */
    if (store__state_parse(text, strlen(text), &b, &err)) abort();
    if (b.n_tasks > a.n_tasks || b.n_deleted != a.n_deleted) abort();
    for (int i = 0; i < a.n_deleted; i++)
        if (strcmp(a.deleted[i], b.deleted[i])) abort();
    for (int i = 0; i < a.n_tasks; i++) {
        const state_rec *x = &a.tasks[i], *y = store__state_find(&b, x->name);
        if (!y || !same_str(x->current, y->current) || x->pinned != y->pinned) abort();
        if (x->current && (x->has_max != y->has_max || x->max != y->max)) abort();
    }
    char *again = store__state_format(&b);
    if (!again || strcmp(text, again)) abort();
    free(text), free(again);
    store__state_doc_free(&a);
    store__state_doc_free(&b);
    return 0;
}
