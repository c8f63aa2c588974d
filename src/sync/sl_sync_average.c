/* The per-step averaging of one component (sl_sync_average.h): the neighbourhood of the
 * gossip schedule or the ring, or all nodes; dense or by rows; then MA or BMUF. Symbols
 * of the gossip-BMUF paper: theta (this node's copy), theta_bar (the mean), q (picks),
 * eta, zeta, omega, Delta. Must not decide when a component syncs, keep the touched
 * rows between syncs, nor declare a peer dead (sl_liveness.h does, from what this file
 * tells it). */
#include "sync/sl_sync_average.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_rng.h"
#include "common/sl_sort.h"
#include "config/sl_config_quant.h"
#include "embed/sl_sparse_allreduce.h"
#include "sync/sl_bmuf.h"
#include "sync/sl_sync_delta.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "transport/sl_collective.h"
#include "transport/sl_gossip.h"

struct sl_sync_average {
    sl_sync_env_t env;
    sl_liveness_t *lv; /* borrowed */
    int is_bmuf;       /* bmuf, local-bmuf, gossip-bmuf */
    int eta_auto;      /* block_momentum auto: 1 - 1/m for the m models of an average */
    int neighbour;     /* local-*, gossip-*: average over a neighbourhood, not everyone */
    sl_bmuf_opts_t bmuf;
    sl_schedule_t sched;
    sl_sync_delta_t *dx;               /* int8 / int4 neighbourhood: deltas per link */
    float *omega, *delta, *start;      /* (nparams) each, *bmuf only */
    float *bar;                        /* (max_count) the average of one component */
    float *recv;                       /* (picks, max_count) snapshots received */
    int *ichosen, *ipullers;           /* (links) from the schedule */
    uint32_t *chosen, *pullers, *from; /* (links) after leaving out the dead */
    size_t *order;                     /* (links) recv's snapshots in their senders' order */
    /* components that go by rows (sl_sparse.h) */
    double top_pct, random_pct; /* exchange_top, exchange_random */
    uint64_t seed;
    int32_t *sel;        /* E_k: (max_rows) a neighbourhood's; all-node, (the row shards'
                            rows summed) each shard's of one sync, one after the other */
    sl_sparse_t *sparse; /* a neighbourhood's exchange; NULL when no component goes by rows */
    uint32_t *asked;     /* (links) pullers answered by a sparse exchange */
    /* all-node: the exchange of the row shards led by c (sl_sync.h's groups), made at c's
     * first sync (ncomps), and a sync's result, each shard's [n][n row ids][n x row_len
     * means], ids as their bits (room for every row shard's worst case) */
    sl_sparse_allreduce_t **sums;
    sl_sparse_part_t *parts; /* (the row shards) each shard's E_k and values in a sync */
    float *packed;
};

/* The neighbourhood's schedule and lists, when the average is over one. */
static sl_status_t
setup_neighbourhood(sl_sync_average_t *a, const sl_config_t *cfg, size_t max_count)
{
    const sl_sync_env_t *e = &a->env;
    int k = cfg->topology.degree > 0 ? cfg->topology.degree : sl_ring_default_degree(e->size);
    int links;

    SL_TRY(sl_ring_links(e->size, k, &links));
    /* local-*: q = every link, so the schedule picks all neighbours, no randomness */
    SL_TRY(sl_schedule_init(
        &a->sched, e->size, k,
        e->algo == SL_SYNC_LOCAL_MA || e->algo == SL_SYNC_LOCAL_BMUF ? links : cfg->sync.neighbours,
        cfg->run.seed));
    /* snapshots of the picks nodes pulled from a round: q for gossip-*, all links for
     * local-*; in gossip this memory does not grow with k */
    SL_TRY(SL_ALLOC(&a->recv, (size_t)a->sched.picks * max_count, "gossip snapshots"));
    SL_TRY(SL_ALLOC(&a->ichosen, (size_t)links, "sync lists"));
    SL_TRY(SL_ALLOC(&a->ipullers, (size_t)links, "sync lists"));
    SL_TRY(SL_ALLOC(&a->chosen, (size_t)links, "sync lists"));
    SL_TRY(SL_ALLOC(&a->pullers, (size_t)links, "sync lists"));
    SL_TRY(SL_ALLOC(&a->from, (size_t)links, "sync lists"));
    SL_TRY(SL_ALLOC(&a->order, (size_t)links, "sync lists"));
    if (sl_compress_is_quant(cfg->sync.compression))
        SL_TRY(sl_sync_delta_new(&a->dx, e, cfg, k, max_count));
    return SL_OK;
}

/* The buffers and exchange object of the components that go by rows, if any. */
static sl_status_t
setup_rows(sl_sync_average_t *a)
{
    const sl_sync_env_t *e = &a->env;
    long max_rows = 0;
    int max_len = 0;
    size_t rows = 0, results = 0, shards = 0;

    for (int c = 0; c < e->ncomps; c++) {
        if (!sl_sync_by_rows(&e->comps[c], e->exchange))
            continue;
        if (e->comps[c].rows > max_rows)
            max_rows = e->comps[c].rows;
        if (e->comps[c].row_len > max_len)
            max_len = e->comps[c].row_len;
        shards++;
        rows += (size_t)e->comps[c].rows;
        results += 1 + (size_t)e->comps[c].rows * (1 + (size_t)e->comps[c].row_len);
    }
    if (max_rows == 0)
        return SL_OK;
    if (a->neighbour) {
        SL_TRY(SL_ALLOC(&a->sel, (size_t)max_rows, "exchanged rows"));
        SL_TRY(SL_ALLOC(&a->asked, (size_t)a->sched.links, "sync lists"));
        return sl_sparse_new(&a->sparse, max_rows, max_len, a->sched.picks);
    }
    SL_TRY(SL_ALLOC(&a->sel, rows, "exchanged rows"));
    SL_TRY(SL_CALLOC(&a->sums, (size_t)e->ncomps, "sparse exchanges"));
    SL_TRY(SL_ALLOC(&a->parts, shards, "sparse exchanges"));
    return SL_ALLOC(&a->packed, results, "exchanged rows");
}

sl_status_t
sl_sync_average_new(sl_sync_average_t **out, const sl_sync_env_t *env, const sl_config_t *cfg,
                    sl_liveness_t *lv, const float *params)
{
    sl_sync_average_t *a;
    size_t max_count = 1, whole = 0;
    sl_status_t st;

    *out = NULL;
    if (env->size < 2 || !env->tr || env->algo == SL_SYNC_NONE || env->algo == SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_INVALID, "sync: no model average for %s on %d nodes",
                          sl_sync_algorithm_name(env->algo), env->size);
    SL_TRY(SL_CALLOC(&a, 1, "sync average"));
    a->env = *env;
    a->lv = lv;
    a->is_bmuf = sl_sync_is_bmuf(env->algo);
    a->neighbour = sl_sync_is_neighbourhood(env->algo);
    sl_bmuf_opts_from_config(&a->bmuf, cfg);
    a->eta_auto = cfg->sync.block_momentum == SL_CONFIG_AUTO;
    a->top_pct = cfg->sync.exchange_top;
    a->random_pct = cfg->sync.exchange_random;
    a->seed = cfg->run.seed;
    /* components that go by rows have their own buffers (sl_sparse.h); an all-node
     * average may take every whole component at once */
    for (int c = 0; c < env->ncomps; c++) {
        if (sl_sync_by_rows(&env->comps[c], env->exchange))
            continue;
        whole += env->comps[c].count;
        max_count = env->comps[c].count > max_count ? env->comps[c].count : max_count;
    }
    if (!a->neighbour && whole > max_count)
        max_count = whole;
    if (a->neighbour)
        SL_TRY_GOTO(setup_neighbourhood(a, cfg, max_count), st, fail);
    /* block momentum auto is 1 - 1/m for the m models an average takes: every node's
       (n) in bmuf, the node's and its picks' in a neighbourhood. Each node's Delta is
       its own there, and 1 - 1/n let the nodes' momenta run apart on 8 nodes (bench/
       README.md, "Accuracy on other corpora") */
    if (a->eta_auto && a->neighbour)
        a->bmuf.eta = (float)(1.0 - 1.0 / (double)(a->sched.picks + 1));
    SL_TRY_GOTO(SL_ALLOC(&a->bar, max_count, "sync average"), st, fail);
    SL_TRY_GOTO(setup_rows(a), st, fail);
    if (a->is_bmuf) {
        SL_TRY_GOTO(SL_ALLOC(&a->omega, env->nparams, "BMUF omega"), st, fail);
        SL_TRY_GOTO(SL_CALLOC(&a->delta, env->nparams, "BMUF Delta"), st, fail);
        SL_TRY_GOTO(SL_ALLOC(&a->start, env->nparams, "BMUF block start"), st, fail);
        memcpy(a->omega, params, env->nparams * sizeof *params);
        memcpy(a->start, params, env->nparams * sizeof *params);
    }
    *out = a;
    return SL_OK;
fail:
    sl_sync_average_destroy(&a);
    return st;
}

void
sl_sync_average_destroy(sl_sync_average_t **ap)
{
    sl_sync_average_t *a = ap ? *ap : NULL;

    if (!a)
        return;
    sl_free(a->omega);
    sl_free(a->delta);
    sl_free(a->start);
    sl_free(a->bar);
    sl_free(a->recv);
    sl_free(a->ichosen);
    sl_free(a->ipullers);
    sl_free(a->chosen);
    sl_free(a->pullers);
    sl_free(a->from);
    sl_free(a->order);
    sl_free(a->sel);
    sl_free(a->asked);
    sl_free(a->packed);
    for (int c = 0; a->sums && c < a->env.ncomps; c++)
        sl_sparse_allreduce_destroy(&a->sums[c]);
    sl_free(a->sums);
    sl_free(a->parts);
    sl_sparse_destroy(&a->sparse);
    sl_sync_delta_destroy(&a->dx);
    sl_free(a);
    *ap = NULL;
}

void
sl_sync_average_bmuf(sl_sync_average_t *a, float **omega, float **delta, float **start)
{
    *omega = a->omega;
    *delta = a->delta;
    *start = a->start;
}

/* The neighbourhood of component c at round, the dead left out: a->chosen (*nc, the
 * first *ncw waited for) and a->pullers (*np, the first *npw). */
static sl_status_t
pick_peers(sl_sync_average_t *a, int c, uint64_t round, size_t *nc, size_t *ncw, size_t *np,
           size_t *npw)
{
    int nch, npl, rank = a->env.rank;

    SL_TRY(sl_schedule_chosen(&a->sched, round, c, rank, a->ichosen, a->sched.links, &nch));
    SL_TRY(sl_schedule_pullers(&a->sched, round, c, rank, a->ipullers, a->sched.links, &npl));
    *nc = sl_liveness_live(a->lv, a->ichosen, nch, a->chosen, ncw);
    *np = sl_liveness_live(a->lv, a->ipullers, npl, a->pullers, npw);
    return SL_OK;
}

/* The average of component c with the neighbourhood of round: bar, *got peers. */
static sl_status_t
neighbourhood_mean(sl_sync_average_t *a, int c, uint64_t round, const float *theta, size_t count,
                   size_t *nexp, size_t *got)
{
    const sl_sync_env_t *e = &a->env;
    size_t nc, ncw, np, npw;
    sl_status_t st;

    SL_TRY(pick_peers(a, c, round, &nc, &ncw, &np, &npw));
    *got = 0;
    /* pushes need no request: wait for the first ncw chosen only, push to every puller */
    if (a->dx) /* int8 / int4: deltas against what each puller holds of us */
        st = sl_sync_delta_exchange(a->dx, c, round, theta, a->pullers, np, a->chosen, ncw, a->recv,
                                    a->from, got);
    else
        st = sl_gossip_exchange_coded(e->tr, (uint32_t)c, round, theta, count, e->codec, a->pullers,
                                      np, a->chosen, ncw, a->recv, a->from, got, e->timeout_ms);
    if (st != SL_OK && st != SL_ERR_TIMEOUT)
        return sl_err_prefix(st, "sync %s round %" PRIu64, e->comps[c].name, round);
    sl_liveness_tally(a->lv, SL_LIVENESS_CHOSEN, a->chosen, ncw, ncw, a->from, *got,
                      e->comps[c].name, round);
    *nexp = ncw;
    /* by the senders' ranks, not as they came: with overlap the bits must not depend on
     * the network's timing */
    sl_order_by_key(a->from, *got, a->order);
    sl_bmuf_mean_ordered(a->bar, theta, a->recv, a->order, *got, count);
    return SL_OK;
}

/* One all-node average: components cs[0 .. k-1] of params at round, packed in that
 * order in bar (count floats), in one allreduce as component cs[0]. */
typedef struct {
    sl_sync_average_t *a;
    const int *cs;
    int k;
    uint64_t round;
    const float *params;
    size_t count;
} mean_job_t;

/* bar := the mean over group g of the job's components (an allreduce); params are left
 * as they were, so an attempt that failed leaves nothing behind. bmuf with fp16 / bf16:
 * what travels is the change since the block start, which every member holds (the same
 * bits after each all-node block update, and a rejoined node takes them), so the
 * down-cast rounds a small delta, not the weights; bar = start + the mean delta. fp32
 * sends the weights: the same bytes, and the mean of the weights needs no reference. MA
 * keeps no block start that survives a resume on every node alike, so it sends weights
 * too. */
static sl_status_t
mean_over(void *ctx, const sl_group_t *g, size_t *count)
{
    const mean_job_t *j = ctx;
    sl_sync_average_t *a = j->a;
    const sl_sync_env_t *e = &a->env;
    sl_collective_opts_t o = {.timeout_ms = e->timeout_ms, .codec = e->codec, .group = g};
    int deltas = a->is_bmuf && e->codec;
    float inv = 1.0f / (float)g->n, *at = a->bar;

    (void)count; /* all of the components */
    for (int i = 0; i < j->k; at += e->comps[j->cs[i++]].count) {
        const sl_component_t *cp = &e->comps[j->cs[i]];
        const float *theta = j->params + cp->offset, *start = a->start + cp->offset;

        if (deltas)
            for (size_t n = 0; n < cp->count; n++)
                at[n] = theta[n] - start[n];
        else
            memcpy(at, theta, cp->count * sizeof *theta);
    }
    SL_TRY(sl_allreduce_sum(e->tr, (uint32_t)j->cs[0], j->round, a->bar, j->count, &o));
    at = a->bar;
    for (int i = 0; i < j->k; at += e->comps[j->cs[i++]].count) {
        const sl_component_t *cp = &e->comps[j->cs[i]];

        if (deltas)
            sl_bmuf_rebuild(at, a->start + cp->offset, at, 1.0 / (double)g->n, cp->count);
        else
            for (size_t n = 0; n < cp->count; n++)
                at[n] *= inv;
    }
    return SL_OK;
}

/* The average of components cs[0 .. k-1] of params with all members, in one allreduce
 * as component cs[0] (sl_members.h: a member that stops answering is dropped and the
 * average redone over the others): bar, packed, over *nodes. */
static sl_status_t
all_mean(sl_sync_average_t *a, const int *cs, int k, uint64_t round, const float *params,
         int *nodes)
{
    const sl_sync_env_t *e = &a->env;
    mean_job_t j = {a, cs, k, round, params, 0};
    char what[160];
    size_t n;
    sl_status_t st;

    for (int i = 0; i < k; i++)
        j.count += e->comps[cs[i]].count;
    n = j.count;
    snprintf(what, sizeof what, "sync of %s%s (%s, round %" PRIu64 ")", e->comps[cs[0]].name,
             k > 1 ? " and the components due with it" : "", sl_sync_algorithm_name(e->algo),
             round);
    st = sl_members_run(e->members, mean_over, &j, a->bar, &n, nodes, what);
    if (st != SL_OK)
        return sl_sync_collective_failed(st, e->algo, e->comps[cs[0]].name, (long)round);
    return SL_OK;
}

/* One all-node exchange of the row shards cs[0 .. k-1], due together: each shard's E_k
 * and values in parts, in one sl_sparse_allreduce_union_sums as component cs[0]. */
typedef struct {
    sl_sync_average_t *a;
    sl_sparse_allreduce_t *sums;
    const int *cs;
    int k;
    uint64_t round;
    const sl_sparse_part_t *parts;
} rows_job_t;

/* One attempt over group g: the all-node means of the shards' unions, packed into
 * a->packed (*count floats) shard by shard, so that a member that missed its end can be
 * handed them whole (sl_members_run). */
static sl_status_t
rows_over(void *ctx, const sl_group_t *g, size_t *count)
{
    const rows_job_t *j = ctx;
    const sl_sync_env_t *e = &j->a->env;
    sl_collective_opts_t o = {.timeout_ms = e->timeout_ms, .codec = e->codec, .group = g};
    float inv = 1.0f / (float)g->n, *out = j->a->packed;

    SL_TRY(
        sl_sparse_allreduce_union_sums(j->sums, e->tr, (uint32_t)j->cs[0], j->round, j->parts, &o));
    for (int i = 0; i < j->k; i++) {
        const int32_t *rows;
        const float *sums;
        size_t n = sl_sparse_allreduce_union(j->sums, i, &rows, &sums),
               nd = n * (size_t)e->comps[j->cs[i]].row_len;
        uint32_t u = (uint32_t)n;

        memcpy(out, &u, sizeof u);
        memcpy(out + 1, rows, n * sizeof *rows);
        out += 1 + n;
        for (size_t v = 0; v < nd; v++)
            out[v] = sums[v] * inv;
        out += nd;
    }
    *count = (size_t)(out - j->a->packed);
    return SL_OK;
}

/* The exchange of the row shards led by cs[0] (k of them), made at its first sync: the
 * shards as sl_sparse_allreduce takes them, with their rows counted from 0 (E_k is
 * shard-local). */
static sl_status_t
rows_exchange(sl_sync_average_t *a, const int *cs, int k, sl_sparse_allreduce_t **out)
{
    const sl_sync_env_t *e = &a->env;
    sl_component_t *shards;
    const sl_component_t **list;
    sl_status_t st;

    if (!a->sums[cs[0]]) {
        SL_TRY(SL_ALLOC(&shards, (size_t)k, "sparse exchanges"));
        st = SL_ALLOC(&list, (size_t)k, "sparse exchanges");
        for (int i = 0; st == SL_OK && i < k; i++) {
            shards[i] = e->comps[cs[i]];
            shards[i].row_begin = 0;
            list[i] = &shards[i];
        }
        if (st == SL_OK)
            st = sl_sparse_allreduce_new_shards(&a->sums[cs[0]], list, k, 0, e->size);
        sl_free(list);
        sl_free(shards);
        SL_TRY(st);
    }
    *out = a->sums[cs[0]];
    return SL_OK;
}

/* The all-node means of the row shards cs[0 .. k-1] (parts: their E_k and values) over
 * the members (redone over the others when one stops answering), packed in a->packed
 * (*count floats, as rows_over leaves them); *nodes the members they are over. */
static sl_status_t
all_rows(sl_sync_average_t *a, const int *cs, int k, uint64_t round, const sl_sparse_part_t *parts,
         size_t *count, int *nodes)
{
    const sl_sync_env_t *e = &a->env;
    rows_job_t j = {a, NULL, cs, k, round, parts};
    char what[160];
    sl_status_t st;

    SL_TRY(rows_exchange(a, cs, k, &j.sums));
    *count = 0;
    for (int i = 0; i < k; i++)
        *count += 1 + (size_t)e->comps[cs[i]].rows * (1 + (size_t)e->comps[cs[i]].row_len);
    snprintf(what, sizeof what, "sync of %s%s (%s, round %" PRIu64 ")", e->comps[cs[0]].name,
             k > 1 ? " and the row shards due with it" : "", sl_sync_algorithm_name(e->algo),
             round);
    st = sl_members_run(e->members, rows_over, &j, a->packed, count, nodes, what);
    if (st != SL_OK)
        return sl_sync_collective_failed(st, e->algo, e->comps[cs[0]].name, (long)round);
    return SL_OK;
}

/* Whether a sync of a neighbourhood got no copy from any peer (the ones it pulls from
 * are dead or did not answer in time): then it is no sync. theta_bar would be this
 * node's own theta, and the BMUF block update on it is one node's BMUF: block momentum
 * on this node's block gradient alone, 1 / (1 - eta) times (4 for eta 0.75, 10 for 0.9)
 * a progress that no average shrank. A survivor whose chosen neighbour died does that
 * in about half of its rounds (q = 1); its model runs away from the others' and the
 * survivors end far worse than a run that had their number of nodes (issue 16). So
 * the block goes on instead: theta, omega, Delta, the block start and the rows to send
 * stay, and the next sync that gets a copy takes G over the whole time since the last
 * one; a survivor left alone trains as one node does. MA needs nothing: the mean of
 * theta alone is theta. */
static int
no_copy_came(const sl_sync_average_t *a, size_t got)
{
    return a->neighbour && got == 0;
}

/* E_k of row shard c at round into out (shard-local rows, ascending): the touched rows
 * (touched is emptied), the top p%, a random q% keyed by (seed, component, round). */
static size_t
select_rows(const sl_sync_average_t *a, int c, uint64_t round, sl_rowset_t *touched, int32_t *out)
{
    const sl_component_t *cp = &a->env.comps[c];
    uint64_t kw[4] = {a->seed, 'R', (uint64_t)c, round};
    long ntop = (long)ceil(a->top_pct / 100.0 * (double)cp->rows);
    size_t n = sl_sparse_select(touched, ntop, a->random_pct / 100.0, sl_hash_u64s(kw, 4), out);

    sl_rowset_clear(touched);
    return n;
}

/* MA or BMUF on the nres rows of shard c averaged (their ids in rows, or as bits in ids)
 * from their means: the other rows keep their values and BMUF state. */
static sl_status_t
apply_rows(sl_sync_average_t *a, float *params, int c, uint64_t round, const int32_t *rows,
           const float *ids, const float *mean, size_t nres, sl_sync_stat_t *stat)
{
    const sl_component_t *cp = &a->env.comps[c];
    float *theta = params + cp->offset;
    size_t d = (size_t)cp->row_len;
    double dist = 0;

    for (size_t i = 0; i < nres; i++) {
        int32_t r;
        size_t at;
        double err;

        if (rows)
            r = rows[i];
        else
            memcpy(&r, ids + i, sizeof r);
        if (r < 0 || r >= cp->rows)
            return sl_err_set(SL_ERR_INVALID, "sync %s round %" PRIu64 ": row %d of %ld", cp->name,
                              round, (int)r, cp->rows);
        at = (size_t)r * d;
        err = sl_bmuf_distance(theta + at, mean + i * d, d);
        dist += err * err;
        if (a->is_bmuf)
            sl_bmuf_update(&a->bmuf, theta + at, mean + i * d, a->omega + cp->offset + at,
                           a->delta + cp->offset + at, a->start + cp->offset + at, d);
        else
            memcpy(theta + at, mean + i * d, d * sizeof *theta);
    }
    stat->distance = sqrt(dist);
    stat->rows_merged += nres;
    return SL_OK;
}

/* One sync of row shard c at round by its rows with the neighbourhood (sync.exchange
 * unique): E_k, the sparse exchange, then MA or BMUF on the rows averaged. */
static sl_status_t
neighbourhood_rows(sl_sync_average_t *a, float *params, int c, uint64_t round, sl_rowset_t *touched,
                   sl_sync_stat_t *stat, size_t *expected, size_t *got)
{
    const sl_sync_env_t *e = &a->env;
    const sl_component_t *cp = &e->comps[c];
    size_t nsel = select_rows(a, c, round, touched, a->sel), nres, nc, ncw, np, npw;
    sl_sparse_args_t sa = {(uint32_t)c, round,       params + cp->offset,
                           cp->rows,    cp->row_len, a->sel,
                           nsel,        e->codec,    e->timeout_ms};
    const int32_t *rows;
    const float *mean;
    sl_sparse_peers_t p;
    sl_status_t st;

    SL_TRY(pick_peers(a, c, round, &nc, &ncw, &np, &npw));
    p = (sl_sparse_peers_t){a->chosen, nc, ncw, a->pullers, np, npw, a->from, 0, a->asked, 0};
    st = sl_sparse_gossip(a->sparse, e->tr, &sa, &p);
    if (st != SL_OK && st != SL_ERR_TIMEOUT)
        return sl_err_prefix(st, "sync %s round %" PRIu64, cp->name, round);
    sl_liveness_tally(a->lv, SL_LIVENESS_CHOSEN, a->chosen, nc, ncw, a->from, p.nanswered, cp->name,
                      round);
    sl_liveness_tally(a->lv, SL_LIVENESS_PULLER, a->pullers, np, npw, p.asked, p.nasked, cp->name,
                      round);
    *expected = nc; /* each was sent our set */
    *got = p.nanswered;
    nres = sl_sparse_result(a->sparse, &rows, &mean);
    stat->rows_own += nsel;
    if (no_copy_came(a, *got)) {
        for (size_t i = 0; i < nsel; i++) /* not synced: E_k goes into the next sync */
            sl_rowset_add(touched, a->sel[i]);
        stat->distance = 0;
        return SL_OK;
    }
    return apply_rows(a, params, c, round, rows, NULL, mean, nres, stat);
}

/* One sync at round of the row shards cs[0 .. k-1], due together, with all nodes in one
 * exchange (sl_sync_average_rows; touched and stat indexed by component, or with k = 1
 * and !by_component c's own), then MA or BMUF on each shard's rows averaged. */
static sl_status_t
average_rows(sl_sync_average_t *a, float *params, const int *cs, int k, uint64_t round,
             sl_rowset_t *touched, sl_sync_stat_t *stat, int by_component)
{
    const sl_sync_env_t *e = &a->env;
    sl_sparse_part_t *parts = a->parts;
    const float *at = a->packed;
    int32_t *sel = a->sel;
    size_t count;
    int nodes;

    for (int i = 0; i < k; i++) {
        const sl_component_t *cp = &e->comps[cs[i]];
        size_t n;

        if (!sl_sync_average_rows(a, cs[i]))
            return sl_err_set(SL_ERR_INVALID, "sync: %s is no row shard of an all-node average",
                              cp->name);
        n = select_rows(a, cs[i], round, by_component ? &touched[cs[i]] : touched, sel);
        parts[i] = (sl_sparse_part_t){sel, (int)n, params + cp->offset};
        sel += cp->rows;
    }
    SL_TRY(all_rows(a, cs, k, round, parts, &count, &nodes));
    if (a->eta_auto) /* 1 - 1/n follows the members (sl_bmuf_opts_from_config) */
        a->bmuf.eta = (float)(1.0 - 1.0 / (double)nodes);
    for (int i = 0; i < k; i++) {
        const sl_component_t *cp = &e->comps[cs[i]];
        sl_sync_stat_t *st = by_component ? &stat[cs[i]] : stat;
        uint32_t n;

        /* a member that missed the end takes the others' result: checked as any input */
        if (count < (size_t)(at - a->packed) + 1)
            return sl_err_set(SL_ERR_INVALID, "sync %s round %" PRIu64 ": a result cut short",
                              cp->name, round);
        memcpy(&n, at, sizeof n);
        if (n > (uint32_t)cp->rows ||
            count - (size_t)(at - a->packed) - 1 < n * (1 + (size_t)cp->row_len))
            return sl_err_set(SL_ERR_INVALID,
                              "sync %s round %" PRIu64 ": a result of %zu floats for %u rows",
                              cp->name, round, count, (unsigned)n);
        st->rows_own += (size_t)parts[i].nrows;
        st->expected += (size_t)nodes - 1;
        st->answered += (size_t)nodes - 1;
        SL_TRY(apply_rows(a, params, cs[i], round, NULL, at + 1, at + 1 + n, n, st));
        at += 1 + n + (size_t)n * (size_t)cp->row_len;
    }
    return SL_OK;
}

int
sl_sync_average_whole(const sl_sync_average_t *a, int c)
{
    return !a->neighbour && !sl_sync_by_rows(&a->env.comps[c], a->env.exchange);
}

/* MA or BMUF on component c of params from its mean bar, over got peers. */
static void
take_mean(sl_sync_average_t *a, float *params, int c, const float *bar, size_t got,
          sl_sync_stat_t *stat)
{
    const sl_component_t *cp = &a->env.comps[c];
    float *theta = params + cp->offset;

    stat->distance = sl_bmuf_distance(theta, bar, cp->count);
    if (no_copy_came(a, got))
        ; /* theta_bar is theta: nothing to take, no block end */
    else if (a->is_bmuf)
        sl_bmuf_update(&a->bmuf, theta, bar, a->omega + cp->offset, a->delta + cp->offset,
                       a->start + cp->offset, cp->count);
    else
        memcpy(theta, bar, cp->count * sizeof *theta);
}

/* sl_sync_average_components; stat[i] is cs[i]'s, or with by_component stat[cs[i]]. */
static sl_status_t
average_whole(sl_sync_average_t *a, float *params, const int *cs, int k, uint64_t round,
              sl_sync_stat_t *stat, int by_component)
{
    const float *bar = a->bar;
    int nodes;

    for (int i = 0; i < k; i++)
        if (!sl_sync_average_whole(a, cs[i]))
            return sl_err_set(SL_ERR_INVALID, "sync: %s does not go whole in an all-node average",
                              a->env.comps[cs[i]].name);
    SL_TRY(all_mean(a, cs, k, round, params, &nodes));
    if (a->eta_auto) /* 1 - 1/n follows the members (sl_bmuf_opts_from_config) */
        a->bmuf.eta = (float)(1.0 - 1.0 / (double)nodes);
    for (int i = 0; i < k; bar += a->env.comps[cs[i++]].count) {
        sl_sync_stat_t *st = &stat[by_component ? cs[i] : i];

        take_mean(a, params, cs[i], bar, (size_t)nodes - 1, st);
        st->expected += (size_t)nodes - 1;
        st->answered += (size_t)nodes - 1;
    }
    return SL_OK;
}

int
sl_sync_average_rows(const sl_sync_average_t *a, int c)
{
    return !a->neighbour && sl_sync_by_rows(&a->env.comps[c], a->env.exchange);
}

sl_status_t
sl_sync_average_components(sl_sync_average_t *a, float *params, const int *cs, int k,
                           uint64_t round, sl_rowset_t *touched, sl_sync_stat_t *stat)
{
    if (k > 0 && sl_sync_average_rows(a, cs[0]))
        return average_rows(a, params, cs, k, round, touched, stat, 1);
    return average_whole(a, params, cs, k, round, stat, 1);
}

sl_status_t
sl_sync_average_component(sl_sync_average_t *a, float *params, int c, uint64_t round,
                          sl_rowset_t *touched, sl_sync_stat_t *stat)
{
    const sl_component_t *cp = &a->env.comps[c];
    size_t expected = 0, got = 0;

    if (sl_sync_average_whole(a, c))
        return average_whole(a, params, &c, 1, round, stat, 0);
    if (sl_sync_average_rows(a, c))
        return average_rows(a, params, &c, 1, round, touched, stat, 0);
    if (sl_sync_by_rows(cp, a->env.exchange)) {
        SL_TRY(neighbourhood_rows(a, params, c, round, touched, stat, &expected, &got));
    } else {
        SL_TRY(neighbourhood_mean(a, c, round, params + cp->offset, cp->count, &expected, &got));
        take_mean(a, params, c, a->bar, got, stat);
    }
    stat->expected += expected;
    stat->answered += got;
    return SL_OK;
}
