/* The allreduce-mode gradient mean (sl_grad_allreduce.h): dense, or by rows through
 * src/embed/sl_sparse_allreduce.h (the Baidu paper's section III-A: U_g, the sorted
 * union of the touched rows, summed; or the allgather baseline), every row shard and the
 * other components in the same collectives. Must not touch the
 * parameters or the model-averaging state: gradients in, gradients out. */
#include "sync/sl_grad_allreduce.h"

#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_log.h"
#include "embed/sl_sparse_allreduce.h"
#include "transport/sl_collective.h"

struct sl_grad_allreduce {
    sl_sync_env_t env;
    float *saved; /* (nparams) this step's gradients, for an attempt again */
    /* by rows: the row shards and the other components' runs in one call */
    sl_sparse_allreduce_t *sar;
    int nshards, nspans;
    int *shard_comp;         /* (nshards) the row shards' components */
    int32_t *sel;            /* (their rows summed) each shard's absolute touched rows */
    sl_sparse_part_t *parts; /* (nshards) */
    sl_sparse_span_t *spans; /* (nspans) a run of the other components side by side */
    size_t *span_at;         /* (nspans) where each run starts in the gradients */
};

/* One step's gradient mean: the attempt's inputs. */
typedef struct {
    sl_grad_allreduce_t *g;
    float *grads;
    long step;
    sl_rowset_t *touched; /* emptied by the caller once the mean is done */
    sl_sync_stat_t *stat;
} mean_job_t;

/* The runs of components that go whole and lie side by side in the gradients (the LSTM
 * layers and their projections one, the softmax bias another) into g->spans and
 * g->span_at, or, spans NULL, only counted; returns how many. */
static int
whole_runs(sl_grad_allreduce_t *g, size_t *floats)
{
    const sl_sync_env_t *e = &g->env;
    int n = 0;

    *floats = 0;
    for (int c = 0; c < e->ncomps; c++) {
        const sl_component_t *cp = &e->comps[c];
        size_t count = cp->count;

        if (sl_sync_by_rows(cp, e->exchange))
            continue;
        while (c + 1 < e->ncomps && !sl_sync_by_rows(&e->comps[c + 1], e->exchange) &&
               e->comps[c + 1].offset == cp->offset + count)
            count += e->comps[++c].count;
        if (g->spans) {
            g->spans[n] = (sl_sparse_span_t){NULL, count};
            g->span_at[n] = cp->offset;
        }
        *floats += count;
        n++;
    }
    return n;
}

/* The one sparse allreduce context of a run by rows, for its row shards and runs. */
static sl_status_t
setup_by_rows(sl_grad_allreduce_t *g)
{
    const sl_sync_env_t *e = &g->env;
    const sl_component_t **shards;
    size_t rows = 0, dense;
    sl_status_t st;

    for (int c = 0; c < e->ncomps; c++)
        if (sl_sync_by_rows(&e->comps[c], e->exchange)) {
            g->nshards++;
            rows += (size_t)e->comps[c].rows;
        }
    if (g->nshards == 0)
        return SL_OK;
    g->nspans = whole_runs(g, &dense);
    SL_TRY(SL_ALLOC(&g->shard_comp, (size_t)g->nshards, "gradient allreduce"));
    SL_TRY(SL_ALLOC(&g->parts, (size_t)g->nshards, "gradient allreduce"));
    SL_TRY(SL_ALLOC(&g->sel, rows, "exchanged rows"));
    if (g->nspans > 0) {
        SL_TRY(SL_ALLOC(&g->spans, (size_t)g->nspans, "gradient allreduce"));
        SL_TRY(SL_ALLOC(&g->span_at, (size_t)g->nspans, "gradient allreduce"));
        whole_runs(g, &dense);
    }
    SL_TRY(SL_ALLOC(&shards, (size_t)g->nshards, "gradient allreduce"));
    for (int c = 0, p = 0; c < e->ncomps; c++)
        if (sl_sync_by_rows(&e->comps[c], e->exchange)) {
            g->shard_comp[p] = c;
            shards[p++] = &e->comps[c];
        }
    st = sl_sparse_allreduce_new_shards(&g->sar, shards, g->nshards, dense, e->size);
    sl_free(shards);
    if (st == SL_OK && e->rank == 0)
        sl_log_info("sync",
                    "the touched rows of %d row shards and the other %zu gradients in one "
                    "exchange a step (their bytes on the gradients line of metrics.jsonl)",
                    g->nshards, dense);
    return st;
}

sl_status_t
sl_grad_allreduce_new(sl_grad_allreduce_t **out, const sl_sync_env_t *env)
{
    sl_grad_allreduce_t *g;
    sl_status_t st;

    *out = NULL;
    if (env->algo != SL_SYNC_ALLREDUCE || env->size < 2 || !env->tr)
        return sl_err_set(SL_ERR_INVALID, "sync: no gradient allreduce for %s on %d nodes",
                          sl_sync_algorithm_name(env->algo), env->size);
    SL_TRY(SL_CALLOC(&g, 1, "gradient allreduce"));
    g->env = *env;
    SL_TRY_GOTO(SL_ALLOC(&g->saved, env->nparams, "gradient allreduce"), st, fail);
    if (env->exchange != SL_EXCHANGE_DENSE)
        SL_TRY_GOTO(setup_by_rows(g), st, fail);
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
    sl_sparse_allreduce_destroy(&g->sar);
    sl_free(g->span_at);
    sl_free(g->spans);
    sl_free(g->parts);
    sl_free(g->sel);
    sl_free(g->shard_comp);
    sl_free(g->saved);
    sl_free(g);
    *gp = NULL;
}

/* Every row shard's gradient summed by its touched rows and the other components' with
 * them, in one sl_sparse_allreduce_shards call (component ncomps, round step): on a
 * slow link every collective costs log2 n latencies or more, whatever its size. */
static sl_status_t
sum_by_rows(const mean_job_t *j, const sl_collective_opts_t *o)
{
    sl_grad_allreduce_t *g = j->g;
    const sl_sync_env_t *e = &g->env;
    int32_t *sel = g->sel;
    sl_status_t st;

    for (int p = 0; p < g->nshards; p++) {
        const sl_component_t *cp = &e->comps[g->shard_comp[p]];
        int n = 0;

        for (long r = 0; r < cp->rows; r++)
            if (sl_rowset_has(&j->touched[g->shard_comp[p]], r))
                sel[n++] = (int32_t)(cp->row_begin + r);
        g->parts[p] = (sl_sparse_part_t){sel, n, j->grads + cp->offset};
        sel += cp->rows;
    }
    for (int i = 0; i < g->nspans; i++)
        g->spans[i].x = j->grads + g->span_at[i];
    st = sl_sparse_allreduce_shards(g->sar, e->tr, (uint32_t)e->ncomps, (uint64_t)j->step,
                                    e->exchange, g->parts, g->spans, g->nspans, o);
    for (int p = 0; p < g->nshards && st == SL_OK; p++) {
        sl_sync_stat_t *stat = &j->stat[g->shard_comp[p]];
        sl_sparse_stats_t ss;

        sl_sparse_allreduce_shard_stats(g->sar, p, &ss);
        stat->rounds++;
        stat->rows_own += ss.local_rows;
        stat->rows_merged += e->exchange == SL_EXCHANGE_UNIQUE ? ss.union_rows : ss.gather_rows;
    }
    return st;
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
    if (!j->g->sar) /* dense, or no row shards */
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
