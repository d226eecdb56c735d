/* ref_case.h - one reference case folder (setup.json) read the way adapterd loads a task.
 *
 * A case written by tools/reference/gen_adapters.py holds setup.json: "backbone" (relative to the
 * fixtures root, or absolute), "adapters" (a list of folders), "fusion" and "head" (a folder or
 * null), optionally "labels", and expected/skip<N>.safetensors. Folder paths are relative to the
 * case folder or absolute (real checkpoints read in place). Every test and parity driver that
 * needs a case goes through this one reader. */
#ifndef ADAPTERD_TESTS_REF_CASE_H
#define ADAPTERD_TESTS_REF_CASE_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

#include "engine/model.h"
#include "engine/task.h"

typedef struct {
    char dir[PATH_MAX];                    /* the case folder */
    char backbone[PATH_MAX];               /* model folder, resolved */
    int n_adapters;
    char adapters[ENG_MAX_FUSE][PATH_MAX]; /* adapter folders, resolved, in setup.json's order */
    const char *adapter_ptrs[ENG_MAX_FUSE];
    char fusion[PATH_MAX];                 /* "" when the case has none */
    char head[PATH_MAX];                   /* "" when the head is saved with the (last) adapter */
    json_t *setup;                         /* the parsed setup.json, for optional fields */
} ref_case;

/* Reads case_dir/setup.json; root is the folder a relative backbone path starts from. Returns 0,
 * or -1 with a message in msg. Release with ref_case_close. */
int ref_case_open(ref_case *c, const char *root, const char *case_dir, char *msg, size_t msg_len);
void ref_case_close(ref_case *c);

/* eng_task_default_params() with the case's fusion and head folders (pointers into c). */
eng_task_params ref_case_params(const ref_case *c);

/* Loads the case's task on m with p (NULL: ref_case_params(c)); returns eng_task_load's status. */
int ref_case_load_task(const ref_case *c, const eng_model *m, const eng_task_params *p, eng_task **out,
                       eng_err *err);

#endif
