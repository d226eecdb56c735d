/* cost.c - GFLOP counts of a layer and of a task layer's adapters (run/cost.h). */
#include "run/cost.h"

double eng__layer_gflop(const eng_config *c, int len) {
    double H = c->hidden, I = c->intermediate;
    /* a GLU's first Linear (ModernBERT's mlp.Wi) has 2I outputs; attention is counted over every key (a
     * local layer's window sees fewer: an upper bound there) */
    return (2.0 * len * (4.0 * H * H + (2.0 + c->glu) * H * I) + 4.0 * (double)len * len * H) / 1e9;
}

double eng__adapter_gflop(const eng_config *c, const eng_task_layer *a, int len) {
    double f = 0, H = c->hidden;
    for (int i = 0; i < ENG_LIN_COUNT; i++)
        if (a->lora[i]) f += 2.0 * len * a->lora[i]->r * (a->lora[i]->in + a->lora[i]->out);
    const eng_site *sites[ENG_SITE_COUNT] = {eng__layer_site(a, ENG_SITE_ATTN), eng__layer_site(a, ENG_SITE_FFN)};
    for (int s = 0; s < ENG_SITE_COUNT; s++) {
        for (int k = 0; k < sites[s]->n_stack; k++) f += 4.0 * len * H * sites[s]->stack[k]->d;
        for (int k = 0; k < sites[s]->n_fuse; k++)
            if (sites[s]->fuse_keep[k]) f += 4.0 * len * H * sites[s]->fuse[k]->d;
        if (sites[s]->n_fuse) f += 6.0 * len * H * H;
    }
    if (a->prefix_len) f += 4.0 * len * (double)a->prefix_len * H;
    return f / 1e9;
}
