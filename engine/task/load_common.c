/* load_common.c - what the task loaders share: config fields, activation names, AdapterHub's
 * module names for the two bottleneck sites. */
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "engine/files.h"
#include "io/tensor_file.h"
#include "task/task_impl.h"

const char *eng__jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

int eng__jbool(json_t *o, const char *k, int def) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* o[k] as a number, def when absent or not a number. */
static double jnum(json_t *o, const char *k, double def) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

int eng__jint(json_t *o, const char *k, int def) {
    double v = jnum(o, k, def);
    return v >= (double)INT_MAX ? INT_MAX : v <= (double)INT_MIN ? INT_MIN : (int)v;
}

float eng__jfloat(json_t *o, const char *k, float def) {
    double v = jnum(o, k, def);
    return v >= (double)FLT_MAX ? FLT_MAX : v <= -(double)FLT_MAX ? -FLT_MAX : (float)v;
}

int eng__parse_act(const char *name, int legacy, eng_act *out, const char *where, eng_err *err) {
    if (!name) {
        *out = ENG_ACT_IDENTITY;
        return 0;
    }
    /* configs saved without a "version" key used "gelu" for the tanh form (docs/ADAPTER_FORMATS.md §2.1) */
    if (legacy && !strcmp(name, "gelu")) name = "gelu_new";
    else if (legacy && !strcmp(name, "gelu_orig")) name = "gelu";
    int a = eng_act_from_name(name);
    if (a < 0) return eng_err_set(err, ENG_UNSUPPORTED, "%s: activation '%s' is not supported", where, name);
    *out = (eng_act)a;
    return 0;
}

int eng__parse_site(const char *k, const char *mid, const char **rest) {
    static const struct {
        const char *path;
        eng_site_pos site;
    } map[] = {
        {"attention.output.", ENG_SITE_ATTN},
        {"attention_adapters.", ENG_SITE_ATTN},
        {"output.", ENG_SITE_FFN},
        {"output_adapters.", ENG_SITE_FFN},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i].path);
        if (!strncmp(k, map[i].path, n) && !strncmp(k + n, mid, strlen(mid))) {
            *rest = k + n + strlen(mid);
            return (int)map[i].site;
        }
    }
    return -1;
}

/* A config file of a task folder: from the texts given in memory when one matches, else read from disk. */
json_t *eng__task_config(const eng_load_ctx *x, const char *dir, const char *name) {
    for (int i = 0; i < x->n_texts; i++) {
        const eng__task_text *g = &x->texts[i];
        if (!strcmp(g->dir, dir) && !strcmp(g->name, name)) {
            char label[PATH_MAX];
            snprintf(label, sizeof label, "%s/%s", dir, name);
            return eng__json_object_parse(g->text, g->len, label, x->err);
        }
    }
    return eng__json_object_load(dir, name, x->err);
}

int eng__task_has_config(const eng_load_ctx *x, const char *dir, const char *name) {
    for (int i = 0; i < x->n_texts; i++)
        if (!strcmp(x->texts[i].dir, dir) && !strcmp(x->texts[i].name, name)) return 1;
    return eng_file_exists_in(dir, name);
}
