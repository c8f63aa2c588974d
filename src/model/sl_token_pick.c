/* Token choice for generation: greedy, temperature, top-k and top-p (sl_token_pick.h). */
#include "model/sl_token_pick.h"

#include <math.h>
#include <stdlib.h>

#include "common/sl_alloc.h"

void
sl_pick_opts_init(sl_pick_opts_t *o)
{
    o->temperature = 1.0;
    o->top_k = 0;
    o->top_p = 1.0;
}

sl_status_t
sl_pick_opts_check(const sl_pick_opts_t *o)
{
    if (!(o->temperature >= 0 && isfinite(o->temperature)))
        return sl_err_set(SL_ERR_INVALID, "--temperature must be 0 or more, not %g",
                          o->temperature);
    if (o->top_k < 0)
        return sl_err_set(SL_ERR_INVALID, "--top-k must be 0 (no limit) or more, not %d", o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1))
        return sl_err_set(SL_ERR_INVALID, "--top-p must be in (0, 1], not %g", o->top_p);
    return SL_OK;
}

sl_status_t
sl_picker_init(sl_picker_t *p, int V)
{
    p->V = V;
    p->order = NULL;
    p->logit = NULL;
    p->prob = NULL;
    if (SL_ALLOC(&p->order, (size_t)V, "token order") != SL_OK ||
        SL_ALLOC(&p->logit, (size_t)V, "token logits") != SL_OK ||
        SL_ALLOC(&p->prob, (size_t)V, "token probabilities") != SL_OK) {
        sl_picker_fini(p);
        return SL_ERR_NOMEM;
    }
    return SL_OK;
}

void
sl_picker_fini(sl_picker_t *p)
{
    sl_free(p->order);
    sl_free(p->logit);
    sl_free(p->prob);
    p->order = NULL;
    p->logit = NULL;
    p->prob = NULL;
}

/* a before b: the larger logit, then the lower id */
static int
before(float la, int ia, float lb, int ib)
{
    return la > lb || (la == lb && ia < ib);
}

/* Sorts order[0..n) (with logit[] alongside) by `before`: heapsort, no allocation. */
static void
sort_by_logit(int *order, float *logit, int n)
{
    for (int end = n, start = n / 2; end > 1;) {
        int root, id;
        float l;

        if (start > 0) {
            root = --start;
        } else {
            --end;
            id = order[end], l = logit[end];
            order[end] = order[0], logit[end] = logit[0];
            order[0] = id, logit[0] = l;
            root = 0;
        }
        id = order[root], l = logit[root];
        for (int child; (child = 2 * root + 1) < end; root = child) {
            /* a min-heap by `before`, so that the sorted array ends up most likely first */
            if (child + 1 < end &&
                before(logit[child], order[child], logit[child + 1], order[child + 1]))
                child++;
            if (!before(l, id, logit[child], order[child]))
                break;
            order[root] = order[child], logit[root] = logit[child];
        }
        order[root] = id, logit[root] = l;
    }
}

int
sl_picker_allowed(sl_picker_t *p, const float *logits, const sl_pick_opts_t *o)
{
    int n = p->V, best = 0;
    double sum = 0, cum = 0;

    if (o->temperature == 0) {
        for (int i = 1; i < p->V; i++)
            if (before(logits[i], i, logits[best], best))
                best = i;
        p->order[0] = best;
        p->prob[0] = 1.0;
        return 1;
    }
    for (int i = 0; i < n; i++) {
        p->order[i] = i;
        p->logit[i] = logits[i];
    }
    sort_by_logit(p->order, p->logit, n);
    if (o->top_k > 0 && o->top_k < n)
        n = o->top_k;
    for (int i = 0; i < n; i++) {
        p->prob[i] = exp(((double)p->logit[i] - p->logit[0]) / o->temperature);
        sum += p->prob[i];
    }
    for (int i = 0; i < n; i++)
        p->prob[i] /= sum;
    if (o->top_p < 1) {
        int keep = 0;
        while (keep < n && cum < o->top_p)
            cum += p->prob[keep++];
        n = keep > 0 ? keep : 1;
        for (int i = 0; i < n; i++)
            p->prob[i] /= cum > 0 ? cum : 1;
    }
    return n;
}

int
sl_picker_pick(sl_picker_t *p, const float *logits, const sl_pick_opts_t *o, sl_rng_t *rng)
{
    int n = sl_picker_allowed(p, logits, o);
    double u = sl_rng_double(rng), cum = 0;

    for (int i = 0; i < n - 1; i++) {
        cum += p->prob[i];
        if (u < cum)
            return p->order[i];
    }
    return p->order[n - 1];
}
