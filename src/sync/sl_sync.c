/* The sync object of a node (sl_sync.h): the periods H_i and which components sync at
 * which step, the dispatch of each step's work to the parts that do it, the touched-row
 * sets the trainer reports, and the accessors. The parts, each behind its own header:
 *   sl_sync_average.h   one component's average (neighbourhood or all nodes, dense or by
 *                       rows) with MA or BMUF, and the BMUF state
 *   sl_grad_allreduce.h the gradient mean of allreduce
 *   sl_liveness.h       who missed, who is dead (gossip-*, local-*)
 *   sl_members.h        the member set of allreduce, ma, bmuf, re-formed when one dies
 *   sl_final.h          the final model (allreduce, or the leaderless gathering)
 *   sl_sync_state.h     the checkpoint bytes
 *   sl_overlap.h        the worker thread of overlapped sync (sync.overlap_steps > 0)
 *   sl_sync_common.h    what they share (the compression codec, byte counters)
 *   sl_sync_phase.h     the staggered phases p_i (sync.stagger): sync points and rounds
 * This file must not exchange anything itself: every frame goes through a part. */
#include "sync/sl_sync.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "embed/sl_sparse.h"
#include "sync/sl_final.h"
#include "sync/sl_grad_allreduce.h"
#include "sync/sl_liveness.h"
#include "sync/sl_overlap.h"
#include "sync/sl_sync_average.h"
#include "sync/sl_sync_common.h"
#include "sync/sl_sync_periods.h"
#include "sync/sl_sync_phase.h"
#include "sync/sl_sync_state.h"

struct sl_sync {
    sl_sync_env_t env;
    sl_sync_codec_t codec; /* env.codec points here */
    int *period;           /* (ncomps) H_i */
    int *phase;            /* (ncomps) p_i: syncs at (t + p_i) mod H_i = 0 (sl_sync_phase.h) */
    int neighbour;         /* local-*, gossip-*: liveness is tallied per step */
    sl_liveness_t *live;
    sl_members_t *members;     /* allreduce, ma, bmuf (env.members) */
    sl_sync_average_t *avg;    /* ma, bmuf, local-*, gossip-* */
    sl_grad_allreduce_t *grad; /* allreduce */
    sl_final_t *final;         /* every algorithm but none */
    sl_rowset_t *touched;      /* (ncomps) U_k since the last sync; by-rows components only */
    sl_sync_stat_t *stat;      /* (ncomps) */
    double time_s;
    /* overlapped sync (sync.overlap_steps tau > 0, model-averaging algorithms) */
    int tau;
    int overlap_dense; /* the dense components overlap too (else only the row shards) */
    sl_overlap_t *ov;  /* NULL when tau is 0 */
    long *applied_at;  /* (ncomps) step of the last update applied */
    int *lead;         /* (ncomps) the component whose exchange c's average goes in */
    int *group;        /* (ncomps) scratch: the components of one exchange */
    int64_t *due;      /* (ncomps) for the checkpoint state */
    int ndead;         /* the worker's dead count when an update was last applied */
};

/* Output-embedding shards are the model's "softmax.<s>" (sl_model.h). */
static int
is_output(const sl_component_t *c)
{
    return strncmp(c->name, "softmax", 7) == 0;
}

/* Component c goes by its touched rows (sync.exchange unique or allgather), not whole. */
/* The sync.exchange settings the algorithm can use (doc/config.md). */
static sl_status_t
check_exchange(const sl_config_t *cfg, sl_sync_algorithm_t algo)
{
    const char *a = sl_sync_algorithm_name(algo);
    double top = cfg->sync.exchange_top, rnd = cfg->sync.exchange_random;

    if (cfg->sync.exchange == SL_EXCHANGE_ALLGATHER && algo != SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_CONFIG,
                          "sync: sync.exchange allgather gathers every node's touched gradient "
                          "rows, the baseline of sync.algorithm allreduce; with %s use unique "
                          "or dense",
                          a);
    if (!(top >= 0 && top <= 100) || !(rnd >= 0 && rnd <= 100))
        return sl_err_set(SL_ERR_CONFIG,
                          "sync: sync.exchange_top %g and sync.exchange_random %g must be "
                          "percentages in [0, 100]",
                          top, rnd);
    if ((top > 0 || rnd > 0) &&
        (cfg->sync.exchange != SL_EXCHANGE_UNIQUE || algo == SL_SYNC_ALLREDUCE))
        return sl_err_set(SL_ERR_CONFIG,
                          "sync: sync.exchange_top and sync.exchange_random add rows to the "
                          "unique exchange of the model-averaging algorithms: they need "
                          "sync.exchange unique and an algorithm other than allreduce (here "
                          "exchange %s, algorithm %s)",
                          sl_exchange_name(cfg->sync.exchange), a);
    return SL_OK;
}

/* The touched-row sets of the components that go by rows (sync.exchange unique or
 * allgather), after checking that each such row shard is whole rows. */
static sl_status_t
setup_touched(sl_sync_t *s)
{
    SL_TRY(SL_CALLOC(&s->touched, (size_t)s->env.ncomps, "touched rows"));
    for (int c = 0; c < s->env.ncomps; c++) {
        const sl_component_t *cp = &s->env.comps[c];
        if (!sl_sync_by_rows(cp, s->env.exchange))
            continue;
        if (cp->rows < 1 || cp->row_len < 1 || (size_t)cp->rows * (size_t)cp->row_len != cp->count)
            return sl_err_set(SL_ERR_INVALID, "sync: row shard %s: %ld rows of %d for %zu floats",
                              cp->name, cp->rows, cp->row_len, cp->count);
        SL_TRY(sl_rowset_init(&s->touched[c], cp->rows));
    }
    return SL_OK;
}

/* sync.overlap_steps tau, checked before any part starts: it must be below every H_i,
 * so that a component's update is applied before its next sync point; allreduce has
 * nothing to overlap (the averaged gradient is needed within its step). */
static sl_status_t
check_overlap(sl_sync_t *s, const sl_config_t *cfg)
{
    s->tau = cfg->sync.overlap_steps;
    s->overlap_dense = cfg->sync.overlap_dense;
    if (s->tau == 0 || s->env.algo == SL_SYNC_NONE)
        return SL_OK;
    if (s->tau < 0 || s->env.algo == SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_CONFIG, "sync: sync.overlap_steps %d: %s", s->tau,
                          s->tau < 0 ? "must be at least 0"
                                     : "allreduce averages the gradients within each step, "
                                       "there is no block to overlap; use 0");
    for (int c = 0; c < s->env.ncomps; c++)
        if (s->tau >= s->period[c])
            return sl_err_set(SL_ERR_CONFIG,
                              "sync: sync.overlap_steps %d must be less than the period of "
                              "every component, but %s syncs every %d steps",
                              s->tau, s->env.comps[c].name, s->period[c]);
    return SL_OK;
}

/* Whether c's exchanges go to the overlap worker: the row shards always, the dense
 * components with sync.overlap_dense. A delay costs the dense recurrent weights the
 * most (bench/README.md, "Overlapped sync"), and they are the smaller share of bytes. */
static int
overlapped(const sl_sync_t *s, int c)
{
    return s->overlap_dense || s->env.comps[c].sparse;
}

/* Whether c may share its exchange with other components, and with which: 1 when it
 * goes whole in an all-node average (with the others that do, in one allreduce), 2 when
 * it goes there by rows (with the other row shards, in one sparse exchange), on this
 * thread (not overlapped); else 0. */
static int
groupable(const sl_sync_t *s, int c)
{
    if (s->tau > 0 && overlapped(s, c))
        return 0;
    return sl_sync_average_whole(s->avg, c) ? 1 : sl_sync_average_rows(s->avg, c) ? 2 : 0;
}

/* The components whose average goes in c's exchange, c first, into s->group: how many
 * (none when c's goes in another's). */
static int
group_of(const sl_sync_t *s, int c)
{
    int k = 0;

    for (int d = c; d < s->env.ncomps; d++)
        if (s->lead[d] == c)
            s->group[k++] = d;
    return k;
}

/* lead: each groupable component goes in the exchange of the first one of its kind
 * (groupable) with its H_i and p_i, with which it is always due, at the same rounds; the
 * others in their own. Rank 0 logs the groups of more than one. */
static sl_status_t
setup_groups(sl_sync_t *s)
{
    int n = s->env.ncomps;
    char line[1024];
    size_t used = 0;

    SL_TRY(SL_ALLOC(&s->lead, (size_t)n, "sync groups"));
    SL_TRY(SL_ALLOC(&s->group, (size_t)n, "sync groups"));
    for (int c = 0; c < n; c++) {
        s->lead[c] = c;
        for (int d = 0; d < c && s->lead[c] == c && groupable(s, c); d++)
            if (s->lead[d] == d && groupable(s, d) == groupable(s, c) &&
                s->period[d] == s->period[c] && s->phase[d] == s->phase[c])
                s->lead[c] = d;
    }
    line[0] = '\0';
    for (int c = 0; c < n; c++) {
        int k = group_of(s, c);

        for (int i = 0; k > 1 && i < k && used < sizeof line; i++) {
            const char *sep = used == 0 ? "" : i > 0 ? ", " : "; ";
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%s", sep,
                                     s->env.comps[s->group[i]].name);
        }
    }
    if (used && s->env.rank == 0)
        sl_log_info("sync",
                    "one exchange for the components due together: %s (their bytes and time "
                    "count as the first's)",
                    line);
    return SL_OK;
}

/* The worker thread of overlapped sync (sl_overlap.h), over the parts already set up. */
static sl_status_t
start_overlap(sl_sync_t *s)
{
    if (s->tau == 0 || s->env.algo == SL_SYNC_NONE)
        return SL_OK;
    SL_TRY(SL_CALLOC(&s->applied_at, (size_t)s->env.ncomps, "sync overlap"));
    SL_TRY(SL_CALLOC(&s->due, (size_t)s->env.ncomps, "sync overlap"));
    for (int c = 0; c < s->env.ncomps; c++)
        s->applied_at[c] = -1;
    return sl_overlap_new(&s->ov, &s->env, s->avg, s->live, s->touched);
}

sl_status_t
sl_sync_new(sl_sync_t **out, const sl_config_t *cfg, sl_transport_t *tr, int rank, int size,
            const sl_component_t *comps, int ncomps, const float *params, size_t nparams)
{
    sl_sync_t *s;
    sl_sync_algorithm_t algo;
    sl_status_t st;

    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || ncomps < 1 ||
        (size > 1 && cfg->sync.algorithm != SL_SYNC_NONE && !tr))
        return sl_err_set(SL_ERR_INVALID, "sync: bad node %d of %d, %d components or no transport",
                          rank, size, ncomps);
    SL_TRY(SL_CALLOC(&s, 1, "sync state"));
    algo = size > 1 ? cfg->sync.algorithm : SL_SYNC_NONE;
    s->env = (sl_sync_env_t){
        .tr = tr,
        .rank = rank,
        .size = size,
        .comps = comps,
        .ncomps = ncomps,
        .nparams = nparams,
        .algo = algo,
        .exchange = algo == SL_SYNC_NONE ? SL_EXCHANGE_DENSE : cfg->sync.exchange,
        .timeout_ms = cfg->sync.timeout_ms > 0 ? cfg->sync.timeout_ms : cfg->cluster.timeout_ms,
    };
    s->env.codec = sl_sync_codec_init(&s->codec, cfg);
    s->neighbour = sl_sync_is_neighbourhood(algo);
    if (algo != SL_SYNC_NONE)
        SL_TRY_GOTO(check_exchange(cfg, algo), st, fail);
    for (int c = 0; c < ncomps; c++) {
        if (comps[c].offset + comps[c].count > nparams || comps[c].count > UINT32_MAX) {
            st = sl_err_set(SL_ERR_INVALID, "sync: component %s lies outside the %zu parameters",
                            comps[c].name, nparams);
            goto fail;
        }
    }
    SL_TRY_GOTO(sl_sync_periods_resolve(&s->env, cfg, &s->period), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->phase, (size_t)ncomps, "sync phases"), st, fail);
    sl_sync_phases(s->period, ncomps, cfg->sync.stagger, s->phase);
    SL_TRY_GOTO(check_overlap(s, cfg), st, fail);
    /* the parts that use the transport, once the settings are known to be sound */
    SL_TRY_GOTO(sl_liveness_new(&s->live, tr, size, s->env.timeout_ms), st, fail);
    if (algo != SL_SYNC_NONE && !s->neighbour) {
        SL_TRY_GOTO(sl_members_new(&s->members, tr, rank, size, s->env.timeout_ms), st, fail);
        s->env.members = s->members;
    }
    SL_TRY_GOTO(sl_sync_periods_log(&s->env, cfg, s->period), st, fail);
    if (cfg->sync.stagger && rank == 0 && algo != SL_SYNC_NONE && algo != SL_SYNC_ALLREDUCE)
        sl_sync_phases_log(comps, s->period, s->phase, ncomps);
    SL_TRY_GOTO(SL_CALLOC(&s->stat, (size_t)ncomps, "sync stats"), st, fail);
    if (s->env.exchange != SL_EXCHANGE_DENSE)
        SL_TRY_GOTO(setup_touched(s), st, fail);
    if (algo == SL_SYNC_ALLREDUCE)
        SL_TRY_GOTO(sl_grad_allreduce_new(&s->grad, &s->env), st, fail);
    else if (algo != SL_SYNC_NONE) {
        SL_TRY_GOTO(sl_sync_average_new(&s->avg, &s->env, cfg, s->live, params), st, fail);
        SL_TRY_GOTO(setup_groups(s), st, fail);
    }
    if (algo != SL_SYNC_NONE)
        SL_TRY_GOTO(sl_final_new(&s->final, &s->env), st, fail);
    SL_TRY_GOTO(start_overlap(s), st, fail);
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
    sl_overlap_destroy(&s->ov); /* first: its worker uses the parts below */
    sl_free(s->applied_at);
    sl_free(s->due);
    sl_free(s->lead);
    sl_free(s->group);
    sl_final_destroy(&s->final);
    sl_grad_allreduce_destroy(&s->grad);
    sl_sync_average_destroy(&s->avg);
    sl_liveness_destroy(&s->live);
    sl_members_destroy(&s->members);
    for (int c = 0; s->touched && c < s->env.ncomps; c++)
        sl_rowset_fini(&s->touched[c]);
    sl_free(s->touched);
    sl_free(s->stat);
    sl_free(s->period);
    sl_free(s->phase);
    sl_free(s);
    *sp = NULL;
}

sl_sync_algorithm_t
sl_sync_algorithm(const sl_sync_t *s)
{
    return s->env.algo;
}

const sl_sync_stat_t *
sl_sync_stat(const sl_sync_t *s, int c)
{
    return &s->stat[c];
}

int
sl_sync_period(const sl_sync_t *s, int c)
{
    return s->period[c];
}

int
sl_sync_shortest_period(const sl_sync_t *s)
{
    int h = 0;

    for (int c = 0; c < s->env.ncomps; c++)
        if (h == 0 || s->period[c] < h)
            h = s->period[c];
    return h > 0 ? h : 1;
}

int
sl_sync_phase(const sl_sync_t *s, int c)
{
    return s->phase[c];
}

/* Whether c reaches a sync point (hands its block over, with overlap) at steps_done. */
static int
sync_point(const sl_sync_t *s, int c, long steps_done)
{
    if (s->env.algo == SL_SYNC_NONE || s->env.algo == SL_SYNC_ALLREDUCE || steps_done < 1)
        return 0;
    return sl_sync_phase_point(steps_done, s->period[c], s->phase[c]);
}

/* The round (block index) of c's sync point at steps_done. */
static uint64_t
round_at(const sl_sync_t *s, int c, long steps_done)
{
    return (uint64_t)sl_sync_phase_round(steps_done, s->period[c], s->phase[c]);
}

int
sl_sync_due(const sl_sync_t *s, int c, long steps_done)
{
    if (s->ov && steps_done >= 1 &&
        (s->applied_at[c] == steps_done || sl_overlap_due(s->ov, c) == steps_done))
        return 1;
    return sync_point(s, c, steps_done);
}

long
sl_sync_peers_step(const sl_sync_t *s, long end)
{
    long newest = 0;

    if (!s->neighbour || !s->env.tr)
        return 0;
    for (int c = 0; c < s->env.ncomps; c++) {
        sl_transport_stat_t st;
        long at;

        sl_transport_stat(s->env.tr, SL_WIRE_GOSSIP_SNAPSHOT, (uint32_t)c, &st);
        /* a round is the sender's claim: one past the run's end is not believed */
        if (st.recv_newest_round > (uint64_t)((end + s->phase[c]) / s->period[c]))
            continue;
        at = sl_sync_phase_step((long)st.recv_newest_round, s->period[c], s->phase[c]);
        if (at > newest)
            newest = at;
    }
    return newest;
}

int
sl_sync_transport_free(const sl_sync_t *s)
{
    return !s->ov || sl_overlap_idle(s->ov);
}

double
sl_sync_time_s(const sl_sync_t *s)
{
    return s->time_s;
}

/* The peers this node holds for dead now: those the liveness table holds, or the ranks
 * dropped from the members. Not to be read while the overlap worker runs. */
static int
dead_now(const sl_sync_t *s)
{
    return s->members ? s->env.size - sl_members_count(s->members) : sl_liveness_ndead(s->live);
}

int
sl_sync_ndead(const sl_sync_t *s)
{
    /* with overlap the worker keeps the table: its count as of the last update */
    return s->ov ? s->ndead : dead_now(s);
}

int
sl_sync_is_dead(const sl_sync_t *s, int r)
{
    if (s->members)
        return r >= 0 && r < s->env.size && !sl_members_has(s->members, r);
    return sl_liveness_is_dead(s->live, r);
}

int
sl_sync_next_membership(sl_sync_t *s, sl_members_event_t *ev)
{
    if (s->members)
        return sl_members_next_event(s->members, ev);
    return s->live && sl_liveness_next_event(s->live, ev);
}

/* The admission block: the shortest period (allreduce: every step), whose multiples are
 * the sync points of its phase-0 components. The components in the middle of a block
 * then (longer periods, other phases) come to the newcomer as the coordinator's copy:
 * their BMUF state is the same on every member (the last all-member average made it),
 * their theta the coordinator's local progress since then, which joins the average at
 * their next sync point. No exchange of its own, every member still counts every round
 * alike, and a newcomer waits a round or two of the shortest period rather than of the
 * longest (the embeddings' 128 steps beside the LSTM's 16). */
static long
block_steps(const sl_sync_t *s)
{
    return s->env.algo == SL_SYNC_ALLREDUCE ? 1 : sl_sync_shortest_period(s);
}

int
sl_sync_admits(const sl_sync_t *s)
{
    return s->members && !s->ov;
}

sl_status_t
sl_sync_admissions(sl_sync_t *s, long steps_done, long end, const uint32_t **give, int *ngive)
{
    *give = NULL;
    *ngive = 0;
    if (!sl_sync_admits(s))
        return SL_OK;
    return sl_members_poll(s->members, steps_done, block_steps(s), end, give, ngive);
}

sl_status_t
sl_sync_join(sl_sync_t *s, int wait_ms, long *at, int *coordinator)
{
    if (!sl_sync_admits(s))
        return sl_err_set(SL_ERR_UNSUPPORTED, "rejoin: a node cannot come back to a %s run%s",
                          sl_sync_algorithm_name(s->env.algo),
                          s->ov ? " with sync.overlap_steps" : "");
    return sl_members_join(s->members, wait_ms, at, coordinator);
}

sl_status_t
sl_sync_enter(sl_sync_t *s, int coordinator, int wait_ms)
{
    return sl_members_enter(s->members, coordinator, wait_ms);
}

/* What the checkpoint state is made of (sl_sync_state.h): the BMUF arrays of the
 * average, and the touched-row sets the model-averaging algorithms keep between syncs
 * (allreduce empties them within the step). */
static sl_sync_state_view_t
state_view(const sl_sync_t *s)
{
    sl_sync_state_view_t v = {.algo = s->env.algo,
                              .comps = s->env.comps,
                              .ncomps = s->env.ncomps,
                              .touched = s->env.algo != SL_SYNC_ALLREDUCE ? s->touched : NULL};

    if (s->avg)
        sl_sync_average_bmuf(s->avg, &v.omega, &v.delta, &v.start);
    if (v.omega)
        v.n = s->env.nparams;
    if (s->ov) {
        v.ncorr = s->env.nparams;
        v.due = s->due;
        v.corr = sl_overlap_corr(s->ov);
    }
    return v;
}

size_t
sl_sync_state_bytes(const sl_sync_t *s)
{
    sl_sync_state_view_t v = state_view(s);
    return sl_sync_state_view_bytes(&v);
}

/* A checkpoint taken while an exchange is in flight waits for it: the state then holds
 * its result (BMUF state and correction), due at the same step as in a run that never
 * stopped. */
sl_status_t
sl_sync_state_save(const sl_sync_t *s, void *buf, size_t len)
{
    sl_sync_state_view_t v = state_view(s);

    if (s->ov) {
        sl_overlap_wait(s->ov);
        sl_overlap_pending(s->ov, s->due);
    }
    return sl_sync_state_view_save(&v, buf, len);
}

sl_status_t
sl_sync_state_load(sl_sync_t *s, const void *buf, size_t len)
{
    sl_sync_state_view_t v = state_view(s);

    if (s->ov)
        sl_overlap_wait(s->ov);
    SL_TRY(sl_sync_state_view_load(&v, buf, len));
    if (s->ov)
        sl_overlap_restore(s->ov, s->due);
    return SL_OK;
}

sl_status_t
sl_sync_note_rows(sl_sync_t *s, int output, const int32_t *rows, int count)
{
    long vocab = 0;

    if (!s->touched)
        return SL_OK;
    for (int c = 0; c < s->env.ncomps; c++) {
        const sl_component_t *cp = &s->env.comps[c];
        if (cp->sparse && is_output(cp) == (output != 0) && cp->row_begin + cp->rows > vocab)
            vocab = cp->row_begin + cp->rows;
    }
    for (int i = 0; i < count && vocab > 0; i++) /* vocab 0: no shard of that table */
        if (rows[i] < 0 || rows[i] >= vocab)
            return sl_err_set(SL_ERR_INVALID,
                              "sync: touched row %d of the %s embedding is outside its %ld rows",
                              (int)rows[i], output ? "output" : "input", vocab);
    for (int c = 0; c < s->env.ncomps; c++) {
        const sl_component_t *cp = &s->env.comps[c];
        if (!s->touched[c].bits || is_output(cp) != (output != 0))
            continue;
        for (int i = 0; i < count; i++)
            if (rows[i] >= cp->row_begin && rows[i] < cp->row_begin + cp->rows)
                sl_rowset_add(&s->touched[c], rows[i] - cp->row_begin);
    }
    return SL_OK;
}

sl_status_t
sl_sync_note_model(sl_sync_t *s, const sl_lm_t *lm)
{
    const int32_t *rows;
    int n;

    if (!s->touched)
        return SL_OK;
    rows = sl_lm_touched_rows(lm, 0, &n);
    SL_TRY(sl_sync_note_rows(s, 0, rows, n));
    rows = sl_lm_touched_rows(lm, 1, &n);
    return sl_sync_note_rows(s, 1, rows, n);
}

sl_status_t
sl_sync_gradients(sl_sync_t *s, float *grads, long step)
{
    double t0 = sl_clock_now();

    if (s->env.algo != SL_SYNC_ALLREDUCE)
        return SL_OK;
    SL_TRY(sl_grad_allreduce_mean(s->grad, grads, step, s->touched, s->stat));
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}

/* The sync at round (their block index) of component c and those whose exchange it
 * leads (s->lead); a group's bytes and time count as c's, on whose name its frames go. */
static sl_status_t
sync_group(sl_sync_t *s, float *params, int c, uint64_t round)
{
    double t0 = sl_clock_now();
    int k = group_of(s, c);

    if (k > 1)
        SL_TRY(sl_sync_average_components(s->avg, params, s->group, k, round, s->touched, s->stat));
    else
        SL_TRY(sl_sync_average_component(s->avg, params, c, round,
                                         s->touched ? &s->touched[c] : NULL, &s->stat[c]));
    for (int i = 0; i < k; i++) {
        s->stat[s->group[i]].rounds++;
        sl_sync_fill_bytes(&s->stat[s->group[i]], s->env.tr, (uint32_t)s->group[i]);
    }
    s->stat[c].time_s += sl_clock_now() - t0;
    return SL_OK;
}

/* Overlapped sync after steps_done: first the updates due now (waiting for their
 * exchanges if need be), then the components at a sync point that do not overlap,
 * synced here once the worker is idle, then the blocks of the others handed to the
 * worker, due tau steps later. The time counted as sync is this thread's: copies,
 * waits, updates and the syncs done here. */
static sl_status_t
overlap_after_step(sl_sync_t *s, float *params, long steps_done)
{
    double t0 = sl_clock_now();
    sl_status_t st = SL_OK;
    int last = -1, here = 0;

    for (int c = 0; c < s->env.ncomps && st == SL_OK; c++) {
        if (sl_overlap_due(s->ov, c) != steps_done)
            continue;
        st = sl_overlap_apply(s->ov, params, c, &s->stat[c]);
        s->applied_at[c] = steps_done;
    }
    for (int c = 0; c < s->env.ncomps && st == SL_OK; c++) {
        if (!sync_point(s, c, steps_done))
            continue;
        /* only an update from a checkpoint of other periods or tau can still be pending */
        if (sl_overlap_due(s->ov, c) >= 0)
            st = sl_err_set(SL_ERR_CONFIG,
                            "sync: %s reaches its sync point at step %ld with the update of "
                            "the last one still pending (due at step %ld): the checkpoint was "
                            "written with other sync periods or sync.overlap_steps",
                            s->env.comps[c].name, steps_done, sl_overlap_due(s->ov, c));
        if (overlapped(s, c))
            last = c;
        else
            here = 1;
    }
    if (here && st == SL_OK) {
        sl_overlap_wait(s->ov); /* the transport is this thread's until the hand-overs */
        for (int c = 0; c < s->env.ncomps && st == SL_OK; c++)
            if (s->lead[c] == c && sync_point(s, c, steps_done) && !overlapped(s, c))
                st = sync_group(s, params, c, round_at(s, c, steps_done));
        /* with nothing handed over, the worker does not close the liveness step */
        if (st == SL_OK && last < 0 && s->neighbour)
            sl_liveness_end_step(s->live);
    }
    for (int c = 0; c <= last && st == SL_OK; c++)
        if (sync_point(s, c, steps_done) && overlapped(s, c))
            sl_overlap_hand(s->ov, params, c, round_at(s, c, steps_done), steps_done + s->tau,
                            c == last, s->touched ? &s->touched[c] : NULL, &s->stat[c]);
    if (sl_overlap_idle(s->ov))
        s->ndead = dead_now(s);
    s->time_s += sl_clock_now() - t0;
    return st;
}

sl_status_t
sl_sync_flush(sl_sync_t *s, float *params)
{
    double t0 = sl_clock_now();
    sl_status_t st = SL_OK;

    if (!s->ov)
        return SL_OK;
    for (int c = 0; c < s->env.ncomps && st == SL_OK; c++)
        if (sl_overlap_due(s->ov, c) >= 0)
            st = sl_overlap_apply(s->ov, params, c, &s->stat[c]);
    sl_overlap_wait(s->ov); /* after a failure, the jobs queued behind it */
    s->ndead = dead_now(s);
    s->time_s += sl_clock_now() - t0;
    return st;
}

sl_status_t
sl_sync_after_step(sl_sync_t *s, float *params, long steps_done)
{
    double t0;

    if (s->env.algo == SL_SYNC_NONE || s->env.algo == SL_SYNC_ALLREDUCE || steps_done < 1)
        return SL_OK;
    if (s->ov)
        return overlap_after_step(s, params, steps_done);
    t0 = sl_clock_now();
    for (int c = 0; c < s->env.ncomps; c++)
        if (s->lead[c] == c && sl_sync_due(s, c, steps_done))
            SL_TRY(sync_group(s, params, c, round_at(s, c, steps_done)));
    if (s->neighbour)
        sl_liveness_end_step(s->live);
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}

sl_status_t
sl_sync_still_training(sl_sync_t *s, int wait_ms, int *signs)
{
    if (signs)
        *signs = 0;
    if (!s->final)
        return SL_OK;
    SL_ASSERT(sl_sync_transport_free(s));
    return sl_final_still_training(s->final, wait_ms, signs);
}

sl_status_t
sl_sync_final(sl_sync_t *s, const float *params, const float **avg, int *writer, int *nmodels)
{
    double t0 = sl_clock_now();

    *avg = NULL;
    *writer = 0;
    *nmodels = 1;
    if (s->env.algo == SL_SYNC_NONE)
        return SL_OK;
    if (s->ov) {
        sl_overlap_wait(s->ov); /* the transport is this thread's again */
        s->ndead = dead_now(s);
    }
    SL_TRY(sl_final_average(s->final, params, avg, writer, nmodels));
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}
