/* The final average (sl_final.h): the ring allreduce of the collective algorithms, and
 * the leaderless final walk of the neighbourhood ones (final_walk below: how it works,
 * its time bounds and when it can give two writers), whose gatherer sends the average
 * back to the nodes in it. Must not change the liveness table nor the parameters it is
 * given; the average goes into its own buffer. */
#include "sync/sl_final.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "transport/sl_collective.h"

/* The final gather's frames (SL_WIRE_DATA, final_walk): round FINAL_ROUND; seq 0, the
 * walk: component c of a node's model as component c, a confirmation (one byte: 1 = in
 * the average, 0 = gathered without it) and a claim (no payload) as the two past them;
 * seq FINAL_BACK, the average the gatherer sends back (send_average): the number of
 * models it averages (FINAL_COUNT, u32 little-endian) first, then its components, and
 * the receipt (no payload) that each node it went to sends as the one past them */
#define FINAL_ROUND 1u
#define FINAL_BACK 1u
#define FINAL_ACK(f) ((uint32_t)(f)->env.ncomps)
#define FINAL_CLAIM(f) ((uint32_t)(f)->env.ncomps + 1u)
#define FINAL_COUNT(f) ((uint32_t)(f)->env.ncomps)
#define FINAL_RECEIPT(f) ((uint32_t)(f)->env.ncomps + 1u)

struct sl_final {
    sl_sync_env_t env;
    const sl_liveness_t *lv; /* borrowed */
    float *avg, *peer;       /* (nparams) final average; a peer's model (the gatherer) */
    unsigned char *in;       /* (size) the gatherer: 1 where that rank's model is in avg */
};

sl_status_t
sl_final_new(sl_final_t **out, const sl_sync_env_t *env, const sl_liveness_t *lv)
{
    *out = NULL;
    if (env->algo == SL_SYNC_NONE || env->size < 2 || !env->tr)
        return sl_err_set(SL_ERR_INVALID, "sync: no final average for %s on %d nodes",
                          sl_sync_algorithm_name(env->algo), env->size);
    SL_TRY(SL_CALLOC(out, 1, "final model"));
    (*out)->env = *env;
    (*out)->lv = lv;
    return SL_OK;
}

void
sl_final_destroy(sl_final_t **fp)
{
    sl_final_t *f = fp ? *fp : NULL;

    if (!f)
        return;
    sl_free(f->avg);
    sl_free(f->peer);
    sl_free(f->in);
    sl_free(f);
    *fp = NULL;
}

/* The wait in ms (>= 0, at most INT_MAX) until the sl_clock_now() time at. */
static int
ms_until(double at)
{
    double ms = ceil((at - sl_clock_now()) * 1000.0);

    return ms <= 0 ? 0 : ms >= (double)INT_MAX ? INT_MAX : (int)ms;
}

/* A sender of the final walk (final_walk): its model to candidate c, component by
 * component, then a confirmation from c or from a candidate below it (one given up on
 * that answered late), or a claim from a candidate between c and itself, waited for
 * until the sl_clock_now() time until; keys has room for f->env.rank keys. *next = -1 on a
 * confirmation (done: in that candidate's average, *taker = its rank, or left out of
 * it, *taker = -1), the claimant's rank on a claim (*claim = 1), else c + 1: a send that
 * finds no room in time, or nothing coming, is c's failure (logged), not an error.
 * Frames are keyed by their sender, which the transport checks, so a confirmation from
 * c can only be c's. */
static sl_status_t
offer_final(sl_final_t *f, const float *params, int c, double until, sl_wire_key_t *keys, int *next,
            int *claim, int *taker)
{
    sl_transport_frame_t *fr = NULL;
    size_t which, nkeys = 0;
    int wait_ms, from;
    unsigned char in = 0;
    sl_status_t st;

    *next = c + 1;
    *claim = 0;
    *taker = -1;
    for (int i = 0; i < f->env.ncomps; i++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)i, 0, (uint32_t)c, SL_WIRE_DATA};
        st = sl_transport_send(f->env.tr, &k, params + f->env.comps[i].offset,
                               (uint32_t)f->env.comps[i].count, SL_WIRE_FP32, 1.0f, 0,
                               f->env.timeout_ms);
        if (st != SL_OK) {
            sl_log_warn("sync", "sending this node's final model to node %d: %s; trying node %d", c,
                        sl_err_msg(), c + 1);
            return SL_OK;
        }
    }
    for (int r = 0; r < f->env.rank; r++)
        keys[nkeys++] = (sl_wire_key_t){FINAL_ROUND, r <= c ? FINAL_ACK(f) : FINAL_CLAIM(f), 0,
                                        (uint32_t)r, SL_WIRE_DATA};
    wait_ms = ms_until(until);
    st = sl_transport_recv_any(f->env.tr, keys, nkeys, wait_ms, &fr, &which);
    if (st == SL_ERR_TIMEOUT) {
        sl_log_warn("sync",
                    "node %d did not confirm this node's final model within %d ms: it may "
                    "have died; trying node %d",
                    c, wait_ms, c + 1);
        return SL_OK;
    }
    if (st != SL_OK)
        return sl_err_prefix(st, "sync: final model");
    from = (int)keys[which].peer;
    if (keys[which].component == FINAL_CLAIM(f)) {
        sl_transport_frame_release(&fr);
        *next = from;
        *claim = 1;
        sl_log_info("sync", "node %d gathers the final model: this node's goes there", from);
        return SL_OK;
    }
    if (fr->h.payload_bytes == 1)
        memcpy(&in, fr->payload, 1);
    sl_transport_frame_release(&fr);
    *next = -1;
    if (in)
        *taker = from;
    else
        sl_log_warn("sync",
                    "node %d gathered the final model without this node's (it came too late)",
                    from);
    return SL_OK;
}

/* The gatherer: peer r's whole model into f->peer, its first frame waited for first_ms,
 * each further one sync.timeout_ms. SL_ERR_TIMEOUT when it did not all come. */
static sl_status_t
recv_final(sl_final_t *f, int r, int first_ms)
{
    for (int c = 0; c < f->env.ncomps; c++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)c, 0, (uint32_t)r, SL_WIRE_DATA};
        size_t got, bytes = f->env.comps[c].count * sizeof(float);
        SL_TRY(sl_transport_recv(f->env.tr, &k, f->peer + f->env.comps[c].offset, bytes, &got,
                                 c == 0 ? first_ms : f->env.timeout_ms));
        if (got != bytes)
            return sl_err_set(SL_ERR_INVALID, "sync: node %d sent %zu bytes of %s, not %zu", r, got,
                              f->env.comps[c].name, bytes);
    }
    return SL_OK;
}

/* The gatherer (final_walk): into f->avg the average of its own model and those of the
 * ranks above it that arrive, in rank order (the sum is the same on every run). A
 * peer's first frame is waited for until the sl_clock_now() time deadline; one it holds
 * for dead is not waited for, but taken if it is already here. Every peer above gets a
 * confirmation saying whether its model is in: one that comes too late (or that was
 * wrongly held for dead) then stops its walk there, left out as it always was, rather
 * than walking on to gather (and write) a model of its own. */
static sl_status_t
gather_final(sl_final_t *f, const float *params, double deadline, int *nmodels)
{
    sl_wire_key_t ack = {FINAL_ROUND, FINAL_ACK(f), 0, 0, SL_WIRE_DATA};
    float inv;
    sl_status_t st;

    if (!f->peer)
        SL_TRY(SL_ALLOC(&f->peer, f->env.nparams, "a peer's final model"));
    if (!f->in)
        SL_TRY(SL_CALLOC(&f->in, (size_t)f->env.size, "the final model's senders"));
    memcpy(f->avg, params, f->env.nparams * sizeof *params);
    *nmodels = 1;
    for (int r = f->env.rank + 1; r < f->env.size; r++) {
        unsigned char in = 1;

        st = recv_final(f, r, sl_liveness_is_dead(f->lv, r) ? 0 : ms_until(deadline));
        if (st == SL_ERR_TIMEOUT) {
            if (!sl_liveness_is_dead(f->lv, r))
                sl_log_warn("sync", "node %d sent no final model in time: left out of it", r);
            in = 0;
        } else if (st != SL_OK) {
            return sl_err_prefix(st, "sync: final model");
        } else {
            for (size_t j = 0; j < f->env.nparams; j++)
                f->avg[j] += f->peer[j];
            ++*nmodels;
        }
        f->in[r] = in;
        /* a dead node's queue may be full: no wait for room then */
        ack.peer = (uint32_t)r;
        if (sl_transport_send(f->env.tr, &ack, &in, 1, SL_WIRE_BYTES, 1.0f, 0,
                              in ? f->env.timeout_ms : 0) != SL_OK &&
            in)
            sl_log_warn("sync", "confirming node %d's final model: %s", r, sl_err_msg());
    }
    inv = 1.0f / (float)*nmodels;
    for (size_t j = 0; j < f->env.nparams; j++)
        f->avg[j] *= inv;
    return SL_OK;
}

/* The gatherer, with the average: the average back to each peer whose model is in it,
 * before the gatherer evaluates and writes it, so that a gatherer stopped or killed
 * from here on still leaves the run its model: each such peer offers its copy as
 * model.bin (sl_run_model_place), and the gatherer's evaluated file, of as many models
 * from a lower rank, replaces it when the gatherer gets that far. The count of models
 * first, then the components; then a receipt from each peer, waited for until one
 * sync.timeout_ms from the last send, since a sent frame may still sit in this
 * process's queues (a stop or a kill then would lose it). A peer that takes no frame
 * within sync.timeout_ms or sends no receipt (it died since) is logged and skipped: it
 * keeps no copy, as before. SL_ERR_NOMEM only. */
static sl_status_t
send_average(sl_final_t *f, int nmodels)
{
    unsigned char count[4];
    sl_wire_key_t *keys;
    size_t nkeys = 0;
    int wait_ms;
    double until;

    SL_TRY(SL_ALLOC(&keys, (size_t)f->env.size, "final model receipts"));
    sl_put_u32(count, (uint32_t)nmodels);
    for (int r = f->env.rank + 1; r < f->env.size; r++) {
        sl_wire_key_t k = {FINAL_ROUND, FINAL_COUNT(f), FINAL_BACK, (uint32_t)r, SL_WIRE_DATA};
        sl_status_t st;

        if (!f->in[r])
            continue;
        st = sl_transport_send(f->env.tr, &k, count, sizeof count, SL_WIRE_BYTES, 1.0f, 0,
                               f->env.timeout_ms);
        for (int c = 0; c < f->env.ncomps && st == SL_OK; c++) {
            k.component = (uint32_t)c;
            st = sl_transport_send(f->env.tr, &k, f->avg + f->env.comps[c].offset,
                                   (uint32_t)f->env.comps[c].count, SL_WIRE_FP32, 1.0f, 0,
                                   f->env.timeout_ms);
        }
        if (st != SL_OK)
            sl_log_warn("sync", "sending the final model back to node %d: %s", r, sl_err_msg());
        else
            keys[nkeys++] = (sl_wire_key_t){FINAL_ROUND, FINAL_RECEIPT(f), FINAL_BACK, (uint32_t)r,
                                            SL_WIRE_DATA};
    }
    until = sl_clock_now() + f->env.timeout_ms / 1000.0;
    while (nkeys > 0) {
        sl_transport_frame_t *fr = NULL;
        size_t which;

        wait_ms = ms_until(until);
        if (sl_transport_recv_any(f->env.tr, keys, nkeys, wait_ms, &fr, &which) != SL_OK) {
            sl_log_warn("sync",
                        "%zu node(s), node %u first, did not confirm the final model "
                        "sent back: %s",
                        nkeys, (unsigned)keys[0].peer, sl_err_msg());
            break;
        }
        sl_transport_frame_release(&fr);
        keys[which] = keys[--nkeys];
    }
    sl_free(keys);
    return SL_OK;
}

/* A sender whose model is in gatherer g's average: that average into f->avg and the
 * number of models it averages into *nmodels, the count waited for first_ms, each
 * component sync.timeout_ms. SL_ERR_TIMEOUT when it did not all come (g stopped or died
 * before it sent it); SL_ERR_INVALID for a frame of the wrong size or a count g cannot
 * have averaged (itself and this node at least, the ranks from g up at most), the
 * message without its context (take_average adds it). Frames are keyed by their
 * sender, which the transport checks, so they can only be g's. */
static sl_status_t
recv_average(sl_final_t *f, int g, int first_ms, int *nmodels)
{
    sl_wire_key_t k = {FINAL_ROUND, FINAL_COUNT(f), FINAL_BACK, (uint32_t)g, SL_WIRE_DATA};
    unsigned char count[4];
    uint32_t n;
    size_t got;

    SL_TRY(sl_transport_recv(f->env.tr, &k, count, sizeof count, &got, first_ms));
    if (got != sizeof count)
        return sl_err_set(SL_ERR_INVALID, "its count in %zu bytes, not %zu", got, sizeof count);
    n = sl_get_u32(count);
    if (n < 2 || n > (uint32_t)(f->env.size - g))
        return sl_err_set(SL_ERR_INVALID, "an average of %u models, not 2 to %d", (unsigned)n,
                          f->env.size - g);
    for (int c = 0; c < f->env.ncomps; c++) {
        size_t bytes = f->env.comps[c].count * sizeof(float);

        k.component = (uint32_t)c;
        SL_TRY(sl_transport_recv(f->env.tr, &k, f->avg + f->env.comps[c].offset, bytes, &got,
                                 f->env.timeout_ms));
        if (got != bytes)
            return sl_err_set(SL_ERR_INVALID, "%zu bytes of %s, not %zu", got, f->env.comps[c].name,
                              bytes);
    }
    *nmodels = (int)n;
    return SL_OK;
}

/* A sender whose model gatherer g took: the average g sends back (recv_average),
 * waited for until one sync timeout past until, the end of the window of the candidate
 * it offered to, since g may wait for the ranks above this one until then. *has = 1 with
 * it, and g gets a receipt (send_average waits for it); without it (g stopped or died
 * before it sent it back, or a peer's abort) the node keeps no copy, as before, logged.
 * Bad frames are errors. */
static sl_status_t
take_average(sl_final_t *f, int g, double until, int *nmodels, int *has)
{
    int wait_ms = ms_until(until);
    sl_status_t st;

    wait_ms = wait_ms > INT_MAX - f->env.timeout_ms ? INT_MAX : wait_ms + f->env.timeout_ms;
    st = recv_average(f, g, wait_ms, nmodels);
    if (st == SL_OK) {
        sl_wire_key_t k = {FINAL_ROUND, FINAL_RECEIPT(f), FINAL_BACK, (uint32_t)g, SL_WIRE_DATA};

        if (sl_transport_send(f->env.tr, &k, "", 0, SL_WIRE_BYTES, 1.0f, 0, f->env.timeout_ms) !=
            SL_OK)
            sl_log_debug("sync", "receipt of the final model to node %d: %s", g, sl_err_msg());
        *has = 1;
        return SL_OK;
    }
    if (st != SL_ERR_TIMEOUT && st != SL_ERR_SHUTDOWN)
        return sl_err_prefix(st, "sync: the final model sent back by node %d", g);
    sl_log_warn("sync", "node %d sent back no final model (%s): it alone has the run's model", g,
                sl_err_msg());
    *nmodels = 1;
    return SL_OK;
}

/* The final model of gossip and local runs, where any node may have died: the lowest
 * live rank gathers it, without a coordinator. Candidates c = 0, 1, ... in rank order;
 * node r walks them:
 *   c < r   unless r holds c for dead (sl_liveness_is_dead: then on at once), r sends its model
 *           to c and waits for a confirmation: with one (from c, or late from a
 *           candidate below c) r is done, its model in that average or, when it came
 *           too late, left out; without one (c died, or a send found no room) r tries
 *           c + 1;
 *   c == r  r is the gatherer and the writer: the average of its model and those of the
 *           ranks above it (gather_final), which each get a confirmation saying whether
 *           theirs is in, and those that are in the average itself (send_average) before
 *           r evaluates and writes it, so that they hold it too (take_average) and a
 *           gatherer stopped or killed from then on still leaves the run its model (each
 *           offers its copy: sl_run_model_place). A gatherer above rank 0 first sends
 *           a claim to each rank above it that it waits for: a node still waiting on a
 *           lower candidate goes straight to the claimant (even one it held for dead)
 *           rather than waiting out that candidate's window.
 * Timing. Each node counts from its own entry here (t0); T = sync.timeout_ms and
 * P = size * T (the gatherer receives up to size - 1 models, each frame within T).
 * Candidate c owns the window [c P, (c + 1) P) of every node's clock:
 *   - a sender gives up on c at t0 + (c + 1) P, whatever it knew about the candidates
 *     below c, so it has sent to c by t0 + c P plus its sending time;
 *   - the gatherer c waits for each peer's first frame until t0 + c P + T: T past the
 *     latest a live peer can have sent, for the skew between the nodes' entries and the
 *     sending; then T for each further frame. It stops as soon as every peer it waits
 *     for is in. Its confirmations go out by t0 + c P + T + (receiving), inside the
 *     senders' window while skew + receiving < P - T = (size - 1) T.
 *   - a sender in the average waits for it until T past its window on c: the gatherer
 *     sends it once the last peer is in or given up on, inside that window as above,
 *     and waits up to T for the receipts (a sender that died since costs that T).
 * The deadlines are absolute, so a dead peer costs the gatherer one wait, not one per
 * peer, and nothing compounds from candidate to candidate: node r is done by
 * t0 + r P + T + (receiving) at the latest (a gatherer that waits out a receipt, T
 * more). Nodes may disagree on who is dead (each learns it from its own exchanges);
 * the windows make that safe and the claims make it quick: with rank 0 dead, rank 1
 * gathers at once if it held rank 0 for dead, else after P, and the others follow its
 * claim. With every node alive rank 0 gathers and
 * there are no claims; a node later than T is left out of the average, as it always
 * was (the "without you" confirmation stops its walk). Two writers remain possible
 * when an assumption breaks: a sender that holds every candidate below it for dead
 * while one of them is alive gathers at once (a live node held for dead: it missed
 * SL_SYNC_DEAD_ROUNDS rounds in a row), or a confirmation comes after the sender's
 * window and the sender reaches itself first. Each writer writes the average of the
 * models it got; the run's model.bin is the one that averages more nodes (of as many,
 * the lower writer's: sl_run_model_place), the other is kept beside it. The dead marks are what
 * make a crash cheap; a timeout that keeps live nodes from being taken for dead keeps
 * them safe. */
static sl_status_t
final_walk(sl_final_t *f, const float *params, int *writer, int *nmodels, int *has)
{
    double t0 = sl_clock_now(), t = f->env.timeout_ms / 1000.0, p = f->env.size * t;
    sl_wire_key_t *keys = NULL;
    int claimed = 0, next, taker;
    sl_status_t st = SL_OK;

    if (f->env.rank > 0)
        SL_TRY(SL_ALLOC(&keys, (size_t)f->env.rank, "final model keys"));
    for (int c = 0; c < f->env.rank;) {
        if (sl_liveness_is_dead(f->lv, c) && !claimed) {
            c++;
            continue;
        }
        SL_TRY_GOTO(offer_final(f, params, c, t0 + (c + 1) * p, keys, &next, &claimed, &taker), st,
                    out);
        if (next < 0) { /* taken */
            if (taker >= 0)
                st = take_average(f, taker, t0 + (c + 1) * p, nmodels, has);
            goto out;
        }
        c = next;
    }
    if (f->env.rank > 0) {
        sl_wire_key_t claim = {FINAL_ROUND, FINAL_CLAIM(f), 0, 0, SL_WIRE_DATA};
        sl_log_warn("sync",
                    "no node below this one took its final model: node %d gathers it and "
                    "writes the run's model.bin",
                    f->env.rank);
        for (int r = f->env.rank + 1; r < f->env.size; r++) {
            if (sl_liveness_is_dead(f->lv, r))
                continue;
            claim.peer = (uint32_t)r;
            if (sl_transport_send(f->env.tr, &claim, "", 0, SL_WIRE_BYTES, 1.0f, 0, 0) != SL_OK)
                sl_log_debug("sync", "claim to node %d: %s", r, sl_err_msg());
        }
    }
    SL_TRY_GOTO(gather_final(f, params, t0 + f->env.rank * p + t, nmodels), st, out);
    SL_TRY_GOTO(send_average(f, *nmodels), st, out);
    *writer = *has = 1;
out:
    sl_free(keys);
    return st;
}

/* The final model's inputs: this node's params. */
typedef struct {
    sl_final_t *f;
    const float *params;
} final_job_t;

/* One attempt over group g: f->avg := the mean of the members' params. */
static sl_status_t
final_over(void *ctx, const sl_group_t *g, size_t *count)
{
    const final_job_t *j = ctx;
    const sl_sync_env_t *e = &j->f->env;
    sl_collective_opts_t o = {0, 0, e->timeout_ms, NULL, g}; /* the model: fp32 */
    float inv = 1.0f / (float)g->n;

    (void)count; /* all nparams */
    memcpy(j->f->avg, j->params, e->nparams * sizeof *j->params);
    SL_TRY(sl_allreduce_sum(e->tr, (uint32_t)e->ncomps + 1, 0, j->f->avg, e->nparams, &o));
    for (size_t i = 0; i < e->nparams; i++)
        j->f->avg[i] *= inv;
    return SL_OK;
}

/* ma, bmuf, allreduce, after the final allreduce over group g: every member but the
 * writer (g's lowest rank) sends it a receipt (no payload), and the writer waits for
 * them, until one sync.timeout_ms, before it evaluates and writes. The ring ends on the
 * writer once the frames it waits for are in, while those it sent last may still sit in
 * its own queues, and a stop or a kill then would lose them: the others would time out
 * and average without it. After the receipts every member holds the average. A member
 * that sends none (it died since, or ended in another set) is logged, not an error. */
static sl_status_t
confirm_final(sl_final_t *f, const sl_group_t *g)
{
    sl_wire_key_t *keys, k = {FINAL_ROUND, FINAL_RECEIPT(f), FINAL_BACK, g->ranks[0], SL_WIRE_DATA};
    size_t nkeys = 0;
    double until = sl_clock_now() + f->env.timeout_ms / 1000.0;

    if ((uint32_t)f->env.rank != g->ranks[0]) {
        if (sl_transport_send(f->env.tr, &k, "", 0, SL_WIRE_BYTES, 1.0f, 0, f->env.timeout_ms) !=
            SL_OK)
            sl_log_debug("sync", "receipt of the final model to node %u: %s", (unsigned)k.peer,
                         sl_err_msg());
        return SL_OK;
    }
    SL_TRY(SL_ALLOC(&keys, g->n, "final model receipts"));
    for (uint32_t i = 1; i < g->n; i++) {
        k.peer = g->ranks[i];
        keys[nkeys++] = k;
    }
    while (nkeys > 0) {
        sl_transport_frame_t *fr = NULL;
        size_t which;

        if (sl_transport_recv_any(f->env.tr, keys, nkeys, ms_until(until), &fr, &which) != SL_OK) {
            sl_log_warn("sync",
                        "%zu node(s), node %u first, did not confirm that they hold the final "
                        "model: %s",
                        nkeys, (unsigned)keys[0].peer, sl_err_msg());
            break;
        }
        sl_transport_frame_release(&fr);
        keys[which] = keys[--nkeys];
    }
    sl_free(keys);
    return SL_OK;
}

sl_status_t
sl_final_average(sl_final_t *f, const float *params, const float **avg, int *writer, int *nmodels)
{
    const sl_sync_env_t *e = &f->env;

    *avg = NULL;
    *writer = 0;
    *nmodels = 1;
    if (!f->avg)
        SL_TRY(SL_ALLOC(&f->avg, e->nparams, "final model"));
    if (sl_sync_is_neighbourhood(e->algo)) {
        int has = 0;

        SL_TRY(final_walk(f, params, writer, nmodels, &has));
        if (has)
            *avg = f->avg;
    } else {
        final_job_t j = {f, params};
        size_t count = e->nparams;
        sl_status_t st;

        st = sl_members_run(e->members, final_over, &j, f->avg, &count, nmodels,
                            "the final average");
        if (st != SL_OK)
            return sl_sync_collective_failed(st, e->algo, "of the final model", 0);
        SL_TRY(confirm_final(f, sl_members_group(e->members)));
        *avg = f->avg;
        /* the lowest-ranked member: rank 0 unless it was dropped */
        *writer = (uint32_t)e->rank == sl_members_group(e->members)->ranks[0];
    }
    return SL_OK;
}
