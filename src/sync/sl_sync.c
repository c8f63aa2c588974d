/* Sync algorithms per component over the transport: the allreduce of gradients, the
 * model averages (allreduce, ring neighbours, gossip schedule) with MA or BMUF on top,
 * dead-neighbour bookkeeping and the final average (see sl_sync.h). */
#include "sl_sync.h"

#include <inttypes.h>
#include <string.h>

#include "sl_alloc.h"
#include "sl_bmuf.h"
#include "sl_clock.h"
#include "sl_collective.h"
#include "sl_log.h"
#include "sl_ring.h"
#include "sl_schedule.h"

#define FINAL_ROUND 1u /* round of the final gather's frames (SL_WIRE_DATA) */

struct sl_sync {
    sl_sync_algorithm_t algo;
    sl_transport_t *tr; /* borrowed */
    int rank, size;
    const sl_component_t *comps; /* borrowed */
    int ncomps;
    size_t nparams, max_count;
    int period, embedding_period;
    int timeout_ms;
    sl_bmuf_opts_t bmuf;
    int is_bmuf;   /* bmuf, local-bmuf, gossip-bmuf */
    int neighbour; /* local-*, gossip-*: average over a neighbourhood, not everyone */
    sl_schedule_t sched;
    float *omega, *delta, *start;       /* (nparams) each, *bmuf only */
    float *bar;                         /* (max_count) the average of one component */
    float *recv;                        /* (links, max_count) snapshots received */
    float *avg, *peer;                  /* (nparams) final average; a peer's model (rank 0) */
    int *ichosen, *ipullers;            /* (links) from the schedule */
    uint32_t *chosen, *pullers, *from;  /* (links) after leaving out the dead */
    int *missed;                        /* (size) sync steps missed in a row, per rank */
    unsigned char *dead, *told;         /* (size) taken for dead; reported missing */
    unsigned char *step_miss, *step_ok; /* (size) in this sync step: missed / answered */
    int ndead;
    sl_sync_stat_t *stat; /* (ncomps) */
    double time_s;
};

static int
is_bmuf(sl_sync_algorithm_t a)
{
    return a == SL_SYNC_BMUF || a == SL_SYNC_LOCAL_BMUF || a == SL_SYNC_GOSSIP_BMUF;
}

static int
is_neighbourhood(sl_sync_algorithm_t a)
{
    return a == SL_SYNC_LOCAL_MA || a == SL_SYNC_LOCAL_BMUF || a == SL_SYNC_GOSSIP_MA ||
           a == SL_SYNC_GOSSIP_BMUF;
}

static int
component_period(const sl_sync_t *s, int c)
{
    return s->comps[c].sparse ? s->embedding_period : s->period;
}

sl_status_t
sl_sync_new(sl_sync_t **out, const sl_config_t *cfg, sl_transport_t *tr, int rank, int size,
            const sl_component_t *comps, int ncomps, const float *params, size_t nparams)
{
    sl_sync_t *s;
    sl_status_t st;
    int links = 1;

    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || ncomps < 1 ||
        (size > 1 && cfg->sync.algorithm != SL_SYNC_NONE && !tr))
        return sl_err_set(SL_ERR_INVALID, "sync: bad node %d of %d, %d components or no transport",
                          rank, size, ncomps);
    SL_TRY(SL_CALLOC(&s, 1, "sync state"));
    s->algo = size > 1 ? cfg->sync.algorithm : SL_SYNC_NONE;
    s->tr = tr;
    s->rank = rank;
    s->size = size;
    s->comps = comps;
    s->ncomps = ncomps;
    s->nparams = nparams;
    s->period = cfg->sync.period;
    s->embedding_period =
        cfg->sync.embedding_period > 0 ? cfg->sync.embedding_period : cfg->sync.period;
    s->timeout_ms = cfg->sync.timeout_ms > 0 ? cfg->sync.timeout_ms : cfg->cluster.timeout_ms;
    sl_bmuf_opts_from_config(&s->bmuf, cfg);
    s->is_bmuf = is_bmuf(s->algo);
    s->neighbour = is_neighbourhood(s->algo);
    for (int c = 0; c < ncomps; c++) {
        if (comps[c].offset + comps[c].count > nparams || comps[c].count > UINT32_MAX) {
            st = sl_err_set(SL_ERR_INVALID, "sync: component %s lies outside the %zu parameters",
                            comps[c].name, nparams);
            goto fail;
        }
        if (comps[c].count > s->max_count)
            s->max_count = comps[c].count;
    }
    if (s->neighbour) {
        int k = cfg->topology.degree > 0 ? cfg->topology.degree : sl_ring_default_degree(size);
        SL_TRY_GOTO(sl_ring_links(size, k, &links), st, fail);
        /* local-*: q = every link, so the schedule picks all neighbours, no randomness */
        SL_TRY_GOTO(sl_schedule_init(&s->sched, size, k,
                                     s->algo == SL_SYNC_LOCAL_MA || s->algo == SL_SYNC_LOCAL_BMUF
                                         ? links
                                         : cfg->sync.neighbours,
                                     cfg->run.seed),
                    st, fail);
        SL_TRY_GOTO(SL_ALLOC(&s->recv, (size_t)links * s->max_count, "gossip snapshots"), st, fail);
    }
    SL_TRY_GOTO(SL_ALLOC(&s->ichosen, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->ipullers, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->chosen, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->pullers, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->from, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->missed, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->dead, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->told, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->step_miss, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->step_ok, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->stat, (size_t)ncomps, "sync stats"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->bar, s->max_count, "sync average"), st, fail);
    if (s->is_bmuf) {
        SL_TRY_GOTO(SL_ALLOC(&s->omega, nparams, "BMUF omega"), st, fail);
        SL_TRY_GOTO(SL_CALLOC(&s->delta, nparams, "BMUF Delta"), st, fail);
        SL_TRY_GOTO(SL_ALLOC(&s->start, nparams, "BMUF block start"), st, fail);
        memcpy(s->omega, params, nparams * sizeof *params);
        memcpy(s->start, params, nparams * sizeof *params);
    }
    *out = s;
    return SL_OK;
fail:
    sl_sync_destroy(&s);
    return st;
}

void
sl_sync_destroy(sl_sync_t **sp)
{
    sl_sync_t *s = sp ? *sp : NULL;

    if (!s)
        return;
    sl_free(s->omega);
    sl_free(s->delta);
    sl_free(s->start);
    sl_free(s->bar);
    sl_free(s->recv);
    sl_free(s->avg);
    sl_free(s->peer);
    sl_free(s->ichosen);
    sl_free(s->ipullers);
    sl_free(s->chosen);
    sl_free(s->pullers);
    sl_free(s->from);
    sl_free(s->missed);
    sl_free(s->dead);
    sl_free(s->told);
    sl_free(s->step_miss);
    sl_free(s->step_ok);
    sl_free(s->stat);
    sl_free(s);
    *sp = NULL;
}

sl_sync_algorithm_t
sl_sync_algorithm(const sl_sync_t *s)
{
    return s->algo;
}

const sl_sync_stat_t *
sl_sync_stat(const sl_sync_t *s, int c)
{
    return &s->stat[c];
}

double
sl_sync_time_s(const sl_sync_t *s)
{
    return s->time_s;
}

int
sl_sync_ndead(const sl_sync_t *s)
{
    return s->ndead;
}

int
sl_sync_is_dead(const sl_sync_t *s, int r)
{
    return r >= 0 && r < s->size && s->dead[r];
}

/* "(is a node dead? ...)" after a failed collective: allreduce, ma and bmuf need every
 * node, by design. */
static sl_status_t
collective_failed(const sl_sync_t *s, sl_status_t st, const char *what, long round)
{
    return sl_err_prefix(st,
                         "sync %s (%s, round %ld): a node did not take part (%s needs every "
                         "node; the gossip-* and local-* algorithms go on without it)",
                         what, sl_sync_algorithm_name(s->algo), round,
                         sl_sync_algorithm_name(s->algo));
}

sl_status_t
sl_sync_gradients(sl_sync_t *s, float *grads, long step)
{
    double t0 = sl_clock_now();
    float inv = 1.0f / (float)s->size;
    sl_status_t st;

    if (s->algo != SL_SYNC_ALLREDUCE)
        return SL_OK;
    sl_collective_opts_t o = {0, 0, s->timeout_ms};
    st = sl_allreduce_sum(s->tr, (uint32_t)s->ncomps, (uint64_t)step, grads, s->nparams, &o);
    if (st != SL_OK)
        return collective_failed(s, st, "of the gradients", step);
    for (size_t j = 0; j < s->nparams; j++)
        grads[j] *= inv;
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}

/* After a neighbourhood exchange: who answered and who did not (reported once per
 * rank), for the step's tally (end_step). */
static void
account_peers(sl_sync_t *s, int c, uint64_t round, size_t nchosen, size_t got)
{
    for (size_t i = 0; i < nchosen; i++) {
        int r = (int)s->chosen[i], answered = 0;
        for (size_t j = 0; j < got; j++)
            answered |= s->from[j] == s->chosen[i];
        if (answered) {
            s->step_ok[r] = 1;
            continue;
        }
        s->step_miss[r] = 1;
        if (!s->told[r]) {
            s->told[r] = 1;
            sl_log_warn("sync",
                        "node %d did not answer within %d ms (%s, round %" PRIu64
                        "): averaging without it",
                        r, s->timeout_ms, s->comps[c].name, round);
        }
    }
}

/* After the exchanges of one step: a peer that answered none of them and missed one
 * has missed a round; after SL_SYNC_DEAD_ROUNDS such steps in a row it is dead. Counted
 * per step, not per component, so that a step with many components counts once. */
static void
end_step(sl_sync_t *s)
{
    for (int r = 0; r < s->size; r++) {
        if (s->step_ok[r])
            s->missed[r] = 0;
        else if (s->step_miss[r])
            s->missed[r]++;
        s->step_ok[r] = s->step_miss[r] = 0;
        if (s->missed[r] >= SL_SYNC_DEAD_ROUNDS && !s->dead[r]) {
            s->dead[r] = 1;
            s->ndead++;
            sl_log_warn("sync",
                        "node %d missed %d rounds in a row: taken for dead, left out from "
                        "now on and from the final model",
                        r, s->missed[r]);
        }
    }
}

/* The average of component c with the neighbourhood of round: bar, *got peers. */
static sl_status_t
neighbourhood_mean(sl_sync_t *s, int c, uint64_t round, const float *theta, size_t count,
                   size_t *nexp, size_t *got)
{
    int nch, npl;
    size_t nc = 0, np = 0;
    sl_status_t st;

    SL_TRY(sl_schedule_chosen(&s->sched, round, c, s->rank, s->ichosen, s->sched.links, &nch));
    SL_TRY(sl_schedule_pullers(&s->sched, round, c, s->rank, s->ipullers, s->sched.links, &npl));
    /* a peer that missed an exchange of this step is not waited for again in the same
     * step (it still gets our pushes): one timeout per step, not one per component */
    for (int i = 0; i < nch; i++)
        if (!s->dead[s->ichosen[i]] && !s->step_miss[s->ichosen[i]])
            s->chosen[nc++] = (uint32_t)s->ichosen[i];
    for (int i = 0; i < npl; i++)
        if (!s->dead[s->ipullers[i]])
            s->pullers[np++] = (uint32_t)s->ipullers[i];
    *got = 0;
    st = sl_gossip_exchange(s->tr, (uint32_t)c, round, theta, count, s->pullers, np, s->chosen, nc,
                            s->recv, s->from, got, s->timeout_ms);
    if (st != SL_OK && st != SL_ERR_TIMEOUT)
        return sl_err_prefix(st, "sync %s round %" PRIu64, s->comps[c].name, round);
    account_peers(s, c, round, nc, *got);
    *nexp = nc;
    sl_bmuf_mean(s->bar, theta, s->recv, *got, count);
    return SL_OK;
}

/* One sync of component c at round (its block index). */
static sl_status_t
sync_component(sl_sync_t *s, float *params, int c, uint64_t round)
{
    const sl_component_t *cp = &s->comps[c];
    float *theta = params + cp->offset;
    size_t count = cp->count, expected = 0, got = 0;
    sl_sync_stat_t *stat = &s->stat[c];
    sl_transport_stat_t ts;
    double t0 = sl_clock_now();

    if (s->neighbour) {
        SL_TRY(neighbourhood_mean(s, c, round, theta, count, &expected, &got));
        sl_transport_stat(s->tr, SL_WIRE_GOSSIP_SNAPSHOT, (uint32_t)c, &ts);
    } else {
        sl_collective_opts_t o = {0, 0, s->timeout_ms};
        float inv = 1.0f / (float)s->size;
        sl_status_t st;

        memcpy(s->bar, theta, count * sizeof *theta);
        st = sl_allreduce_sum(s->tr, (uint32_t)c, round, s->bar, count, &o);
        if (st != SL_OK)
            return collective_failed(s, st, cp->name, (long)round);
        for (size_t j = 0; j < count; j++)
            s->bar[j] *= inv;
        expected = got = (size_t)s->size - 1;
        sl_transport_stat(s->tr, SL_WIRE_ALLREDUCE, (uint32_t)c, &ts);
    }
    stat->distance = sl_bmuf_distance(theta, s->bar, count);
    if (s->is_bmuf)
        sl_bmuf_update(&s->bmuf, theta, s->bar, s->omega + cp->offset, s->delta + cp->offset,
                       s->start + cp->offset, count);
    else
        memcpy(theta, s->bar, count * sizeof *theta);
    stat->rounds++;
    stat->expected += expected;
    stat->answered += got;
    stat->sent_bytes = ts.sent_bytes;
    stat->recv_bytes = ts.recv_bytes;
    stat->time_s += sl_clock_now() - t0;
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}

sl_status_t
sl_sync_after_step(sl_sync_t *s, float *params, long steps_done)
{
    if (s->algo == SL_SYNC_NONE || s->algo == SL_SYNC_ALLREDUCE || steps_done < 1)
        return SL_OK;
    for (int c = 0; c < s->ncomps; c++) {
        int h = component_period(s, c);
        if (steps_done % h == 0)
            SL_TRY(sync_component(s, params, c, (uint64_t)(steps_done / h)));
    }
    if (s->neighbour)
        end_step(s);
    return SL_OK;
}

/* Every node but rank 0: its model to rank 0, component by component, then wait for
 * rank 0 to confirm (it may be waiting on nodes that died first). */
static sl_status_t
send_final(sl_sync_t *s, const float *params)
{
    sl_wire_key_t ack = {FINAL_ROUND, (uint32_t)s->ncomps, 0, 0, SL_WIRE_DATA};
    char b;
    size_t got;
    sl_status_t st;

    for (int c = 0; c < s->ncomps; c++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)c, 0, 0, SL_WIRE_DATA};
        st = sl_transport_send(s->tr, &k, params + s->comps[c].offset, (uint32_t)s->comps[c].count,
                               SL_WIRE_FP32, 1.0f, 0, s->timeout_ms);
        if (st != SL_OK) {
            sl_log_warn("sync", "sending this node's model to node 0: %s", sl_err_msg());
            return SL_OK;
        }
    }
    st = sl_transport_recv(s->tr, &ack, &b, sizeof b, &got, s->timeout_ms * s->size);
    if (st == SL_ERR_TIMEOUT)
        sl_log_warn("sync",
                    "node 0 did not confirm the final model within %d ms: it may have "
                    "died; then the run's model.bin is not written (the nodes' own stay)",
                    s->timeout_ms * s->size);
    else if (st != SL_OK)
        return sl_err_prefix(st, "sync: final model");
    return SL_OK;
}

/* Rank 0: one live peer's whole model into s->peer; SL_ERR_TIMEOUT when it did not come. */
static sl_status_t
recv_final(sl_sync_t *s, int r)
{
    for (int c = 0; c < s->ncomps; c++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)c, 0, (uint32_t)r, SL_WIRE_DATA};
        size_t got, bytes = s->comps[c].count * sizeof(float);
        SL_TRY(
            sl_transport_recv(s->tr, &k, s->peer + s->comps[c].offset, bytes, &got, s->timeout_ms));
        if (got != bytes)
            return sl_err_set(SL_ERR_INVALID, "sync: node %d sent %zu bytes of %s, not %zu", r, got,
                              s->comps[c].name, bytes);
    }
    return SL_OK;
}

/* Rank 0 of gossip/local: the average of its own model and every live peer's. */
static sl_status_t
gather_final(sl_sync_t *s, const float *params, int *nmodels)
{
    sl_wire_key_t ack = {FINAL_ROUND, (uint32_t)s->ncomps, 0, 0, SL_WIRE_DATA};
    float inv;
    sl_status_t st;

    if (!s->peer)
        SL_TRY(SL_ALLOC(&s->peer, s->nparams, "a peer's final model"));
    memcpy(s->avg, params, s->nparams * sizeof *params);
    *nmodels = 1;
    for (int r = 1; r < s->size; r++) {
        if (s->dead[r])
            continue;
        st = recv_final(s, r);
        if (st == SL_ERR_TIMEOUT) {
            sl_log_warn("sync", "node %d sent no final model within %d ms: left out of it", r,
                        s->timeout_ms);
            continue;
        }
        if (st != SL_OK)
            return sl_err_prefix(st, "sync: final model");
        for (size_t j = 0; j < s->nparams; j++)
            s->avg[j] += s->peer[j];
        ++*nmodels;
        ack.peer = (uint32_t)r;
        if (sl_transport_send(s->tr, &ack, "", 0, SL_WIRE_BYTES, 1.0f, 0, s->timeout_ms) != SL_OK)
            sl_log_warn("sync", "confirming node %d's final model: %s", r, sl_err_msg());
    }
    inv = 1.0f / (float)*nmodels;
    for (size_t j = 0; j < s->nparams; j++)
        s->avg[j] *= inv;
    return SL_OK;
}

sl_status_t
sl_sync_final(sl_sync_t *s, const float *params, const float **avg, int *writer, int *nmodels)
{
    double t0 = sl_clock_now();

    *avg = NULL;
    *writer = 0;
    *nmodels = 1;
    if (s->algo == SL_SYNC_NONE)
        return SL_OK;
    if (!s->avg)
        SL_TRY(SL_ALLOC(&s->avg, s->nparams, "final model"));
    if (s->neighbour) {
        if (s->rank != 0) {
            SL_TRY(send_final(s, params));
        } else {
            SL_TRY(gather_final(s, params, nmodels));
            *avg = s->avg;
            *writer = 1;
        }
    } else {
        sl_collective_opts_t o = {0, 0, s->timeout_ms};
        float inv = 1.0f / (float)s->size;
        sl_status_t st;

        memcpy(s->avg, params, s->nparams * sizeof *params);
        st = sl_allreduce_sum(s->tr, (uint32_t)s->ncomps + 1, 0, s->avg, s->nparams, &o);
        if (st != SL_OK)
            return collective_failed(s, st, "of the final model", 0);
        for (size_t j = 0; j < s->nparams; j++)
            s->avg[j] *= inv;
        *avg = s->avg;
        *writer = s->rank == 0;
        *nmodels = s->size;
    }
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}
