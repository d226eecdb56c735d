/* ref_case.c - see ref_case.h. */
#include "ref_case.h"

#include <stdio.h>
#include <string.h>

/* Joins a setup.json path to base unless it is absolute; returns -1 when it does not fit. */
static int resolve(char *out, size_t n, const char *base, const char *p) {
    int w = p[0] == '/' ? snprintf(out, n, "%s", p) : snprintf(out, n, "%s/%s", base, p);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

int ref_case_open(ref_case *c, const char *root, const char *case_dir, char *msg, size_t msg_len) {
    memset(c, 0, sizeof *c);
    char p[PATH_MAX + 16];
    snprintf(c->dir, sizeof c->dir, "%s", case_dir);
    snprintf(p, sizeof p, "%s/setup.json", case_dir);
    json_error_t je;
    c->setup = json_load_file(p, 0, &je);
    if (!c->setup) {
        snprintf(msg, msg_len, "%s: %s", p, je.text);
        return -1;
    }
    const char *bb = json_string_value(json_object_get(c->setup, "backbone"));
    json_t *ads = json_object_get(c->setup, "adapters");
    if (!bb || !json_is_array(ads) || json_array_size(ads) < 1 || json_array_size(ads) > ENG_MAX_FUSE) {
        snprintf(msg, msg_len, "%s: needs backbone and 1..%d adapters", p, ENG_MAX_FUSE);
        ref_case_close(c);
        return -1;
    }
    int bad = resolve(c->backbone, sizeof c->backbone, root, bb);
    c->n_adapters = (int)json_array_size(ads);
    for (int i = 0; i < c->n_adapters && !bad; i++) {
        const char *a = json_string_value(json_array_get(ads, (size_t)i));
        bad = !a || resolve(c->adapters[i], sizeof c->adapters[i], case_dir, a);
        c->adapter_ptrs[i] = c->adapters[i];
    }
    const char *fusion = json_string_value(json_object_get(c->setup, "fusion"));
    const char *head = json_string_value(json_object_get(c->setup, "head"));
    if (!bad && fusion) bad = resolve(c->fusion, sizeof c->fusion, case_dir, fusion);
    if (!bad && head) bad = resolve(c->head, sizeof c->head, case_dir, head);
    if (bad) {
        snprintf(msg, msg_len, "%s: a path is missing or too long", p);
        ref_case_close(c);
        return -1;
    }
    return 0;
}

void ref_case_close(ref_case *c) {
    json_decref(c->setup);
    c->setup = NULL;
}

eng_task_params ref_case_params(const ref_case *c) {
    eng_task_params p = eng_task_default_params();
    if (c->fusion[0]) p.fusion_dir = c->fusion;
    if (c->head[0]) p.head_dir = c->head;
    return p;
}

int ref_case_load_task(const ref_case *c, const eng_model *m, const eng_task_params *p, eng_task **out,
                       eng_err *err) {
    eng_task_params def = ref_case_params(c);
    return eng_task_load(m, c->adapter_ptrs, c->n_adapters, p ? p : &def, out, err);
}
