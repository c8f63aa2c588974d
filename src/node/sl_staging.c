/* The host mirror of a device's parameters for sync, and the copies through it. Owns
 * the mirror (pinned memory from the backend) and which ranges are copied when; must
 * not touch the sync algorithms' maths or state, nor the training loop's order of
 * operations (sl_train.c decides when each staging call happens). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_staging.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"

struct sl_staging {
    sl_backend_t *be; /* borrowed */
    float *host;      /* (nparams) from be's host_alloc */
    size_t nparams;
};

int
sl_staging_needed(const sl_backend_t *be, int nranks, sl_sync_algorithm_t algorithm)
{
    const char *force = getenv("SHOAL_STAGE_SYNC");

    if (nranks < 2 || algorithm == SL_SYNC_NONE)
        return 0;
    return !sl_backend_on_host(be) || (force && strcmp(force, "1") == 0);
}

sl_status_t
sl_staging_new(sl_staging_t **out, sl_backend_t *be, size_t nparams)
{
    sl_staging_t *s;
    void *host;
    sl_status_t st;

    *out = NULL;
    SL_TRY(SL_CALLOC(&s, 1, "host mirror"));
    st = sl_backend_host_alloc(be, &host, nparams * sizeof(float));
    if (st != SL_OK) {
        sl_err_prefix(st, "host mirror of the parameters");
        sl_free(s);
        return st;
    }
    s->be = be;
    s->host = host;
    s->nparams = nparams;
    *out = s;
    return SL_OK;
}

void
sl_staging_destroy(sl_staging_t **s)
{
    void *host;

    if (!s || !*s)
        return;
    host = (*s)->host;
    sl_backend_host_free((*s)->be, &host);
    sl_free(*s);
    *s = NULL;
}

/* Device -> mirror (to_host != 0) or back, for count floats from offset. */
static sl_status_t
stage(sl_staging_t *s, float *dev, size_t offset, size_t count, int to_host)
{
    size_t bytes = count * sizeof(float);

    SL_ASSERT(offset <= s->nparams && count <= s->nparams - offset);
    if (to_host)
        return s->be->ops->to_host(s->be->ctx, s->host + offset, dev + offset, bytes);
    return s->be->ops->to_device(s->be->ctx, dev + offset, s->host + offset, bytes);
}

sl_status_t
sl_staging_pull(sl_staging_t *s, const float *dev, const float **host)
{
    SL_TRY(s->be->ops->to_host(s->be->ctx, s->host, dev, s->nparams * sizeof(float)));
    *host = s->host;
    return SL_OK;
}

sl_status_t
sl_staging_gradients(sl_staging_t *s, sl_sync_t *sync, float *grads, long step)
{
    SL_TRY(stage(s, grads, 0, s->nparams, 1));
    SL_TRY(sl_sync_gradients(sync, s->host, step));
    return stage(s, grads, 0, s->nparams, 0);
}

sl_status_t
sl_staging_flush(sl_staging_t *s, sl_sync_t *sync, float *params)
{
    SL_TRY(stage(s, params, 0, s->nparams, 1));
    SL_TRY(sl_sync_flush(sync, s->host));
    return stage(s, params, 0, s->nparams, 0);
}

/* The components due after steps_done between the device and the mirror. */
static sl_status_t
stage_due(sl_staging_t *s, const sl_sync_t *sync, float *params, const sl_component_t *comps,
          int nc, long steps_done, int to_host)
{
    for (int c = 0; c < nc;) {
        size_t begin, end;

        if (!sl_sync_due(sync, c, steps_done)) {
            c++;
            continue;
        }
        begin = comps[c].offset;
        end = begin + comps[c].count;
        for (c++; c < nc && sl_sync_due(sync, c, steps_done) && comps[c].offset == end; c++)
            end += comps[c].count;
        SL_TRY(stage(s, params, begin, end - begin, to_host));
    }
    return SL_OK;
}

sl_status_t
sl_staging_after_step(sl_staging_t *s, sl_sync_t *sync, float *params, const sl_component_t *comps,
                      int nc, long steps_done)
{
    SL_TRY(stage_due(s, sync, params, comps, nc, steps_done, 1));
    SL_TRY(sl_sync_after_step(sync, s->host, steps_done));
    return stage_due(s, sync, params, comps, nc, steps_done, 0);
}
