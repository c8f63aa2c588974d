/* The allreduce-mode gradient mean (sl_grad_allreduce.h): dense, or by rows through
 * src/embed/sl_sparse_allreduce.h (the Baidu paper's section III-A: U_g, the sorted
 * union of the touched rows, summed; or the allgather baseline). Must not touch the
 * parameters or the model-averaging state: gradients in, gradients out. */
#include "sync/sl_grad_allreduce.h"

#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "embed/sl_sparse_allreduce.h"
#include "transport/sl_collective.h"

struct sl_grad_allreduce {
    sl_sync_env_t env;
    float *saved;                /* (nparams) this step's gradients, for an attempt again */
    int32_t *sel;                /* (max_rows) the absolute touched rows of a shard */
    sl_sparse_allreduce_t **sar; /* (ncomps) for the components that go by rows */
};

/* One step's gradient mean: the attempt's inputs. */
typedef struct {
    sl_grad_allreduce_t *g;
    float *grads;
    long step;
    sl_rowset_t *touched; /* emptied by the caller once the mean is done */
    sl_sync_stat_t *stat;
} mean_job_t;

sl_status_t
sl_grad_allreduce_new(sl_grad_allreduce_t **out, const sl_sync_env_t *env)
{
    sl_grad_allreduce_t *g;
    long max_rows = 0;
    sl_status_t st;

    *out = NULL;
    if (env->algo != SL_SYNC_ALLREDUCE || env->size < 2 || !env->tr)
        return sl_err_set(SL_ERR_INVALID, "sync: no gradient allreduce for %s on %d nodes",
                          sl_sync_algorithm_name(env->algo), env->size);
    SL_TRY(SL_CALLOC(&g, 1, "gradient allreduce"));
    g->env = *env;
    SL_TRY_GOTO(SL_ALLOC(&g->saved, env->nparams, "gradient allreduce"), st, fail);
    for (int c = 0; c < env->ncomps; c++)
        if (sl_sync_by_rows(&env->comps[c], env->exchange) && env->comps[c].rows > max_rows)
            max_rows = env->comps[c].rows;
    if (max_rows > 0) {
        SL_TRY_GOTO(SL_ALLOC(&g->sel, (size_t)max_rows, "exchanged rows"), st, fail);
        SL_TRY_GOTO(SL_CALLOC(&g->sar, (size_t)env->ncomps, "sparse allreduce"), st, fail);
        for (int c = 0; c < env->ncomps; c++)
            if (sl_sync_by_rows(&env->comps[c], env->exchange))
                SL_TRY_GOTO(sl_sparse_allreduce_new(&g->sar[c], &env->comps[c], env->size), st,
                            fail);
    }
    *out = g;
    return SL_OK;
fail:
    sl_grad_allreduce_destroy(&g);
    return st;
}

void
sl_grad_allreduce_destroy(sl_grad_allreduce_t **gp)
{
    sl_grad_allreduce_t *g = gp ? *gp : NULL;

    if (!g)
        return;
    for (int c = 0; g->sar && c < g->env.ncomps; c++)
        sl_sparse_allreduce_destroy(&g->sar[c]);
    sl_free(g->sar);
    sl_free(g->sel);
    sl_free(g->saved);
    sl_free(g);
    *gp = NULL;
}

/* Each row shard's gradient summed by its touched rows (round = step); the other
 * components by allreduces, one for each run of them that lie side by side in grads
 * (the LSTM layers and their projections), as component SL_GRAD_COMPONENT(ncomps, c)
 * of the run's first c, round step: on a slow link every allreduce costs 2 log2 n
 * latencies or more, whatever its size. Each (kind, component) advances by one round a
 * step, as the mailbox's window of rounds ahead wants. */
static sl_status_t
sum_by_rows(const mean_job_t *j, const sl_collective_opts_t *o)
{
    sl_grad_allreduce_t *g = j->g;
    const sl_sync_env_t *e = &g->env;

    for (int c = 0; c < e->ncomps; c++) {
        const sl_component_t *cp = &e->comps[c];
        double t0 = sl_clock_now();
        sl_sync_stat_t *stat = &j->stat[c];
        sl_status_t st;

        if (!sl_sync_by_rows(cp, e->exchange)) {
            int first = c;
            size_t count = cp->count;

            /* with the components that also go whole and follow it in grads */
            while (c + 1 < e->ncomps && !sl_sync_by_rows(&e->comps[c + 1], e->exchange) &&
                   e->comps[c + 1].offset == cp->offset + count)
                count += e->comps[++c].count;
            st = sl_allreduce_sum(e->tr, SL_GRAD_COMPONENT(e->ncomps, first), (uint64_t)j->step,
                                  j->grads + cp->offset, count, o);
        } else {
            sl_sparse_stats_t ss;
            size_t n = 0;

            for (long r = 0; r < cp->rows; r++)
                if (sl_rowset_has(&j->touched[c], r))
                    g->sel[n++] = (int32_t)(cp->row_begin + r);
            st = sl_sparse_allreduce(g->sar[c], e->tr, (uint32_t)c, (uint64_t)j->step, e->exchange,
                                     g->sel, (int)n, j->grads + cp->offset, o);
            sl_sparse_allreduce_stats(g->sar[c], &ss);
            stat->rounds++;
            stat->rows_own += ss.local_rows;
            stat->rows_merged += e->exchange == SL_EXCHANGE_UNIQUE ? ss.union_rows : ss.gather_rows;
            sl_sync_fill_bytes(stat, e->tr, (uint32_t)c);
            stat->time_s += sl_clock_now() - t0;
        }
        if (st != SL_OK)
            return st;
    }
    return SL_OK;
}

/* One attempt over group gr: the gradients as they were at the start of the step, summed
 * over the members and divided by their count. */
static sl_status_t
mean_over(void *ctx, const sl_group_t *gr, size_t *count)
{
    const mean_job_t *j = ctx;
    const sl_sync_env_t *e = &j->g->env;
    sl_collective_opts_t o = {.timeout_ms = e->timeout_ms, .codec = e->codec, .group = gr};
    float inv = 1.0f / (float)gr->n;

    (void)count; /* all nparams */
    memcpy(j->grads, j->g->saved, e->nparams * sizeof *j->grads);
    if (e->exchange == SL_EXCHANGE_DENSE)
        SL_TRY(sl_allreduce_sum(e->tr, (uint32_t)e->ncomps, (uint64_t)j->step, j->grads, e->nparams,
                                &o));
    else
        SL_TRY(sum_by_rows(j, &o));
    for (size_t i = 0; i < e->nparams; i++)
        j->grads[i] *= inv;
    return SL_OK;
}

sl_status_t
sl_grad_allreduce_mean(sl_grad_allreduce_t *g, float *grads, long step, sl_rowset_t *touched,
                       sl_sync_stat_t *stat)
{
    const sl_sync_env_t *e = &g->env;
    mean_job_t j = {g, grads, step, touched, stat};
    char what[96];
    size_t count = e->nparams;
    int nodes;
    sl_status_t st;

    memcpy(g->saved, grads, e->nparams * sizeof *grads);
    snprintf(what, sizeof what, "the gradient allreduce of step %ld", step);
    st = sl_members_run(e->members, mean_over, &j, grads, &count, &nodes, what);
    if (st != SL_OK)
        return sl_sync_collective_failed(st, e->algo, "of the gradients", step);
    for (int c = 0; touched && c < e->ncomps; c++)
        if (sl_sync_by_rows(&e->comps[c], e->exchange))
            sl_rowset_clear(&touched[c]);
    return SL_OK;
}
