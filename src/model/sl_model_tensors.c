/* Named tensor views of the model's flat parameter buffer (sl_model_tensors.h), laid
 * out as sl_model.c's layout() does and checked against sl_lm_layout. */
#include "model/sl_model_tensors.h"

#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "model/sl_model.h"

static sl_lm_tensor_t *
add(sl_lm_tensor_t *t, int *n, const char *name, size_t rows, size_t cols, size_t *off)
{
    sl_lm_tensor_t *x = &t[(*n)++];

    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = cols ? 2 : 1;
    x->shape[0] = rows;
    x->shape[1] = cols;
    x->offset = *off;
    x->count = cols ? rows * cols : rows;
    *off += x->count;
    return x;
}

sl_status_t
sl_lm_tensors(const sl_config_t *cfg, int vocab, sl_lm_tensor_t *t, int *n, size_t *nparams)
{
    sl_component_t comp[SL_LM_MAX_COMPONENTS(1)];
    size_t off = 0, in = (size_t)cfg->model.embedding, v = (size_t)vocab, want;
    int ncomp;
    char name[48];

    *n = 0;
    SL_TRY(sl_lm_layout(cfg, vocab, 1, comp, (int)(sizeof comp / sizeof comp[0]), &ncomp, &want));
    add(t, n, "encoder.weight", v, in, &off);
    for (int l = 0; l < cfg->model.nlayers; l++) {
        size_t h = (size_t)cfg->model.layers[l].hidden, p = (size_t)cfg->model.layers[l].projection;
        size_t r = p ? p : h, bias;

        snprintf(name, sizeof name, "rnns.%d.weight_ih_l0", l);
        add(t, n, name, 4 * h, in, &off);
        snprintf(name, sizeof name, "rnns.%d.weight_hh_l0", l);
        add(t, n, name, 4 * h, r, &off);
        bias = off;
        snprintf(name, sizeof name, "rnns.%d.bias_ih_l0", l);
        add(t, n, name, 4 * h, 0, &off);
        snprintf(name, sizeof name, "rnns.%d.bias_hh_l0", l);
        add(t, n, name, 4 * h, 0, &off)->zeros = 1;
        t[*n - 1].offset = bias;
        off = bias + 4 * h;
        if (p) {
            snprintf(name, sizeof name, "rnns.%d.weight_hr_l0", l);
            add(t, n, name, p, h, &off);
        }
        in = r;
    }
    add(t, n, "decoder.weight", v, in, &off);
    add(t, n, "decoder.bias", v, 0, &off);
    /* the same buffer sl_model.c lays out, or this file is out of step with it */
    SL_ASSERT(off == want);
    *nparams = off;
    return SL_OK;
}
