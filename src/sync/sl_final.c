/* The final average (sl_final.h): the ring allreduce of the collective algorithms, and
 * the gathering of the neighbourhood ones (final_gathering below: who gathers, the
 * signs of life it waits on, when it can still give two writers), whose gatherer sends
 * the average back to the nodes in it. Must not change the parameters it is given; the
 * average goes into its own buffer. */
#include "sync/sl_final.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "transport/sl_collective.h"

/* The final gathering's frames (SL_WIRE_DATA, round FINAL_ROUND). seq 0: component c of
 * a node's model as component c (to its gatherer); the signs past them, each without
 * payload, in this order: "at the end" (SIGN_HERE), "at the end and gathering"
 * (SIGN_CLAIM), "alive and still training" (SIGN_TRAINING) and "gathered without you"
 * (SIGN_DONE). seq FINAL_BACK: the average the gatherer sends back (send_average): the
 * number of models it averages (FINAL_COUNT, u32 little-endian) first, then its
 * components, and the receipt (no payload) that each node it went to sends as the one
 * past them. A node sends its sign to every peer every sync.timeout_ms / FINAL_SIGN_DIV
 * while it waits; a repeated sign that finds the last one still filed is dropped by the
 * mailbox. */
#define FINAL_ROUND 1u
#define FINAL_BACK 1u
enum { SIGN_HERE, SIGN_CLAIM, SIGN_TRAINING, SIGN_DONE, NSIGNS };
#define FINAL_SIGN(f, s) ((uint32_t)(f)->env.ncomps + (uint32_t)(s))
#define FINAL_COUNT(f) ((uint32_t)(f)->env.ncomps)
#define FINAL_RECEIPT(f) ((uint32_t)(f)->env.ncomps + 1u)
#define FINAL_SIGN_DIV 4
/* A rank is out after this many sync.timeout_ms without a sign: a node still training
 * answers between steps only, and one of its steps may wait a whole sync.timeout_ms
 * in an exchange (for a dead neighbour, say) before it can. */
#define FINAL_SILENCE_TIMEOUTS 2

struct sl_final {
    sl_sync_env_t env;
    float *avg, *peer; /* (nparams) final average; a peer's model (the gatherer) */
    /* what this node knows of each rank at the end of the run (neighbourhood
     * algorithms; allocated on first use) */
    double *sign;          /* (size) sl_clock_now() of its last sign of life; 0: none */
    unsigned char *at_end; /* (size) it said it is at the end (HERE or CLAIM) */
    unsigned char *claims; /* (size) it gathers: its last sign was a claim */
    unsigned char *out;    /* (size) no sign for a while (is_out), or its process is gone */
    unsigned char *done;   /* (size) it gathered the final model without this node's */
    unsigned char *sent;   /* (size) this node's model went to it */
    unsigned char *in;     /* (size) the gatherer: that rank's model is in avg */
    sl_wire_key_t *keys;   /* ((NSIGNS + 1) size) the keys of one wait */
    double next_sign;      /* when this node sends its own signs next */
    uint64_t ends_taken;   /* signs of the end (HERE, CLAIM) taken, for the transport's count */
};

/* The per-rank state of the gathering (neighbourhood algorithms), zeroed; allocated
 * with the object, so that the training steps that answer the signs allocate nothing. */
static sl_status_t
peers_new(sl_final_t *f)
{
    size_t n = (size_t)f->env.size;

    SL_TRY(SL_CALLOC(&f->sign, n, "final model peers"));
    SL_TRY(SL_CALLOC(&f->at_end, n, "final model peers"));
    SL_TRY(SL_CALLOC(&f->claims, n, "final model peers"));
    SL_TRY(SL_CALLOC(&f->out, n, "final model peers"));
    SL_TRY(SL_CALLOC(&f->done, n, "final model peers"));
    SL_TRY(SL_CALLOC(&f->sent, n, "final model peers"));
    SL_TRY(SL_CALLOC(&f->in, n, "final model peers"));
    return SL_ALLOC(&f->keys, (NSIGNS + 1) * n, "final model keys");
}

sl_status_t
sl_final_new(sl_final_t **out, const sl_sync_env_t *env)
{
    sl_status_t st = SL_OK;

    *out = NULL;
    if (env->algo == SL_SYNC_NONE || env->size < 2 || !env->tr)
        return sl_err_set(SL_ERR_INVALID, "sync: no final average for %s on %d nodes",
                          sl_sync_algorithm_name(env->algo), env->size);
    SL_TRY(SL_CALLOC(out, 1, "final model"));
    (*out)->env = *env;
    if (sl_sync_is_neighbourhood(env->algo) && (st = peers_new(*out)) != SL_OK)
        sl_final_destroy(out);
    return st;
}

void
sl_final_destroy(sl_final_t **fp)
{
    sl_final_t *f = fp ? *fp : NULL;

    if (!f)
        return;
    sl_free(f->avg);
    sl_free(f->peer);
    sl_free(f->sign);
    sl_free(f->at_end);
    sl_free(f->claims);
    sl_free(f->out);
    sl_free(f->done);
    sl_free(f->sent);
    sl_free(f->in);
    sl_free(f->keys);
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

/* Sends sign s (SIGN_*) to every other rank r with mask[r] == want (mask NULL: to
 * every one), without waiting for room: a dead peer's queue may be full, and the sign
 * goes again sync.timeout_ms / FINAL_SIGN_DIV later anyway. */
static void
send_signs(sl_final_t *f, int s, const unsigned char *mask, unsigned char want)
{
    for (int r = 0; r < f->env.size; r++) {
        sl_wire_key_t k = {FINAL_ROUND, FINAL_SIGN(f, s), 0, (uint32_t)r, SL_WIRE_DATA};

        if (r == f->env.rank || (mask && mask[r] != want))
            continue;
        if (sl_transport_send(f->env.tr, &k, "", 0, SL_WIRE_BYTES, 1.0f, 0, 0) != SL_OK)
            sl_log_debug("sync", "final model: sign to node %d: %s", r, sl_err_msg());
    }
    f->next_sign = sl_clock_now() + f->env.timeout_ms / 1000.0 / FINAL_SIGN_DIV;
}

/* The keys of signs SIGN_HERE .. last from every other rank into f->keys; how many. */
static size_t
sign_keys(sl_final_t *f, int last)
{
    size_t n = 0;

    for (int r = 0; r < f->env.size; r++)
        for (int s = SIGN_HERE; s <= last && r != f->env.rank; s++)
            f->keys[n++] =
                (sl_wire_key_t){FINAL_ROUND, FINAL_SIGN(f, s), 0, (uint32_t)r, SL_WIRE_DATA};
    return n;
}

/* Takes a sign (a frame of a sign_keys key; *fr released): signs are empty, anything
 * else is SL_ERR_INVALID naming the sender. Any sign is a sign of life, and brings a
 * rank taken for out back. */
static sl_status_t
take_sign(sl_final_t *f, sl_transport_frame_t **fr)
{
    static const char *const name[NSIGNS] = {"sign of the end", "claim", "sign of training",
                                             "notice of the final model"};
    int r = (int)(*fr)->h.sender, s = (int)((*fr)->h.component - FINAL_SIGN(f, 0));
    unsigned long long bytes = (unsigned long long)(*fr)->h.payload_bytes;

    sl_transport_frame_release(fr);
    if (bytes != 0)
        return sl_err_set(SL_ERR_INVALID,
                          "sync: final model: node %d sent a %s of %llu bytes, not 0", r, name[s],
                          bytes);
    f->sign[r] = sl_clock_now();
    f->out[r] = 0;
    if (s == SIGN_DONE) {
        f->done[r] = 1;
    } else {
        f->at_end[r] = s != SIGN_TRAINING;
        f->claims[r] = s == SIGN_CLAIM;
        f->ends_taken += f->at_end[r];
    }
    return SL_OK;
}

/* How many signs of the end (HERE, CLAIM) the transport has accepted (handed out or
 * filed) and this node has not taken yet. */
static uint64_t
ends_waiting(const sl_final_t *f)
{
    sl_transport_stat_t here, claim;

    sl_transport_stat(f->env.tr, SL_WIRE_DATA, FINAL_SIGN(f, SIGN_HERE), &here);
    sl_transport_stat(f->env.tr, SL_WIRE_DATA, FINAL_SIGN(f, SIGN_CLAIM), &claim);
    return here.recv_msgs + claim.recv_msgs - f->ends_taken;
}

/* Takes every sign that has already come, without waiting. */
static sl_status_t
drain_signs(sl_final_t *f)
{
    size_t nkeys = sign_keys(f, SIGN_DONE);

    for (;;) {
        sl_transport_frame_t *fr = NULL;
        sl_status_t st = sl_transport_recv_any(f->env.tr, f->keys, nkeys, 0, &fr, NULL);

        if (st == SL_ERR_TIMEOUT)
            return SL_OK;
        if (st != SL_OK)
            return sl_err_prefix(st, "sync: final model");
        SL_TRY(take_sign(f, &fr));
    }
}

sl_status_t
sl_final_still_training(sl_final_t *f, int wait_ms, int *signs)
{
    int n = 0, any = 0;

    if (signs)
        *signs = 0;
    if (!sl_sync_is_neighbourhood(f->env.algo))
        return SL_OK;
    /* Only the signs already filed are taken without a wait: a receive that times out
     * would stand as this node's last miss of each peer in the transport, and so hide
     * the late answer of a gossip exchange (late is not dead, sl_liveness.h). */
    while (ends_waiting(f) > 0 || (n == 0 && wait_ms > 0)) {
        sl_transport_frame_t *fr = NULL;
        size_t nkeys = sign_keys(f, SIGN_CLAIM);
        sl_status_t st =
            sl_transport_recv_any(f->env.tr, f->keys, nkeys, n == 0 ? wait_ms : 0, &fr, NULL);

        if (st == SL_ERR_TIMEOUT)
            break;
        if (st != SL_OK)
            return sl_err_prefix(st, "sync: final model");
        SL_TRY(take_sign(f, &fr));
        n++;
    }
    for (int r = 0; r < f->env.size; r++)
        any |= f->at_end[r];
    /* at once to a node newly at the end, then every sync.timeout_ms / FINAL_SIGN_DIV */
    if (any && (n > 0 || sl_clock_now() >= f->next_sign))
        send_signs(f, SIGN_TRAINING, f->at_end, 1);
    if (signs)
        *signs = n;
    return SL_OK;
}

/* When rank r was last known alive for this node, which entered the gathering at t0:
 * its last sign, or t0 if that is older. */
static double
alive_since(const sl_final_t *f, int r, double t0)
{
    return f->sign[r] > t0 ? f->sign[r] : t0;
}

/* When rank r is out for this node unless it gives a sign before: FINAL_SILENCE_TIMEOUTS
 * x sync.timeout_ms after it was last known alive (alive_since). */
static double
silence_ends(const sl_final_t *f, int r, double t0)
{
    return alive_since(f, r, t0) + FINAL_SILENCE_TIMEOUTS * f->env.timeout_ms / 1000.0;
}

/* Whether rank r is out of the gathering for this node: its process is gone (its
 * connection closed: sl_transport_gone), or its silence ended (silence_ends). Logged once, when it
 * goes out; a sign brings it back (take_sign). */
static int
is_out(sl_final_t *f, int r, double t0)
{
    int gone;

    if (f->out[r])
        return 1;
    gone = sl_transport_gone(f->env.tr, (uint32_t)r);
    if (!gone && sl_clock_now() < silence_ends(f, r, t0))
        return 0;
    f->out[r] = 1;
    if (gone)
        sl_log_info("sync", "final model: node %d is gone (its connection closed)", r);
    else
        sl_log_info("sync", "final model: node %d gave no sign of life for %d ms: not waited for",
                    r, FINAL_SILENCE_TIMEOUTS * f->env.timeout_ms);
    return 1;
}

/* Sends this node's sign s when it is due, then waits for a frame of the first nkeys of
 * f->keys until deadline (an sl_clock_now() time) or the next sign, whichever comes
 * first: SL_ERR_TIMEOUT then (the caller looks again), the transport's errors. */
static sl_status_t
wait_step(sl_final_t *f, size_t nkeys, int s, double deadline, sl_transport_frame_t **fr,
          size_t *which)
{
    sl_status_t st;

    if (sl_clock_now() >= f->next_sign)
        send_signs(f, s, NULL, 0);
    st = sl_transport_recv_any(f->env.tr, f->keys, nkeys,
                               ms_until(deadline < f->next_sign ? deadline : f->next_sign), fr,
                               which);
    if (st == SL_ERR_TIMEOUT)
        sl_transport_watch(f->env.tr); /* for is_out's sl_transport_gone */
    else if (st != SL_OK)
        st = sl_err_prefix(st, "sync: final model");
    return st;
}

/* The gatherer: rank r's model into f->peer, waited for while r is not out (is_out: a
 * late node that is still training keeps sending signs), its components in order, each
 * fp32 of its exact size (else SL_ERR_INVALID). *got = 1 with it. Stops early with
 * *yielded = 1 when a live rank below this one claims too (this node then sends its
 * model there like any other: the lowest gatherer takes over), 2 when a gatherer sent
 * this one its "without you" (it has written the model: this node then writes none).
 * This node's claim goes to every other rank meanwhile. */
static sl_status_t
take_model(sl_final_t *f, int r, double t0, int *got, int *yielded)
{
    const sl_sync_env_t *e = &f->env;
    int c = 0;

    *got = 0;
    while (c < e->ncomps) {
        sl_transport_frame_t *fr = NULL;
        size_t which, nkeys = sign_keys(f, SIGN_DONE), bytes = e->comps[c].count * sizeof(float);
        sl_status_t st;

        for (int q = 0; q < e->size && !*yielded; q++)
            if (f->done[q])
                *yielded = 2;
            else if (q < e->rank && f->claims[q] && !is_out(f, q, t0))
                *yielded = 1;
        if (*yielded)
            return SL_OK;
        if (is_out(f, r, t0)) {
            if (c > 0 || f->at_end[r])
                sl_log_warn("sync", "node %d sent no final model in time: left out of it", r);
            return SL_OK;
        }
        f->keys[nkeys] = (sl_wire_key_t){FINAL_ROUND, (uint32_t)c, 0, (uint32_t)r, SL_WIRE_DATA};
        st = wait_step(f, nkeys + 1, SIGN_CLAIM, silence_ends(f, r, t0), &fr, &which);
        if (st == SL_ERR_TIMEOUT)
            continue;
        SL_TRY(st);
        if (which < nkeys) {
            SL_TRY(take_sign(f, &fr));
            continue;
        }
        if (fr->h.encoding != SL_WIRE_FP32 || fr->h.payload_bytes != bytes) {
            size_t len = (size_t)fr->h.payload_bytes;

            sl_transport_frame_release(&fr);
            return sl_err_set(SL_ERR_INVALID, "sync: node %d sent %zu bytes of %s, not %zu fp32", r,
                              len, e->comps[c].name, bytes);
        }
        memcpy(f->peer + e->comps[c].offset, fr->payload, bytes);
        sl_transport_frame_release(&fr);
        f->sign[r] = sl_clock_now();
        c++;
    }
    *got = 1;
    return SL_OK;
}

/* f->avg += m (the first model: f->avg := m), *nmodels counting it. */
static void
add_model(sl_final_t *f, const float *m, int *nmodels)
{
    if (*nmodels == 0)
        memcpy(f->avg, m, f->env.nparams * sizeof *m);
    else
        for (size_t j = 0; j < f->env.nparams; j++)
            f->avg[j] += m[j];
    ++*nmodels;
}

/* The gatherer: into f->avg the average of its own params and the models of the other
 * ranks (take_model), in rank order, then those of ranks taken for out on the way that
 * gave a sign since (come to the end after all: they follow this node's claim), in rank
 * order again; so the sum is the same on every run with the same arrivals. The ranks
 * left out get "without you". *yielded as take_model's. */
static sl_status_t
gather(sl_final_t *f, const float *params, double t0, int *nmodels, int *yielded)
{
    const sl_sync_env_t *e = &f->env;
    int got, late;

    *yielded = 0;
    *nmodels = 0;
    if (!f->peer)
        SL_TRY(SL_ALLOC(&f->peer, e->nparams, "a peer's final model"));
    memset(f->in, 0, (size_t)e->size);
    send_signs(f, SIGN_CLAIM, NULL, 0);
    for (int r = 0; r < e->size; r++) {
        if (r == e->rank) {
            add_model(f, params, nmodels);
            continue;
        }
        SL_TRY(take_model(f, r, t0, &got, yielded));
        if (*yielded)
            return SL_OK;
        if (got)
            add_model(f, f->peer, nmodels);
        f->in[r] = (unsigned char)got;
    }
    do {
        late = 0;
        for (int r = 0; r < e->size; r++) {
            if (r == e->rank || f->in[r] || f->out[r])
                continue;
            SL_TRY(take_model(f, r, t0, &got, yielded));
            if (*yielded)
                return SL_OK;
            if (got) {
                sl_log_info("sync", "node %d came to the end late: its final model is in", r);
                add_model(f, f->peer, nmodels);
                f->in[r] = 1;
                late = 1;
            }
        }
    } while (late);
    {
        float inv = 1.0f / (float)*nmodels;

        for (size_t j = 0; j < e->nparams; j++)
            f->avg[j] *= inv;
    }
    /* the ones left out stop rather than gather a model of their own */
    send_signs(f, SIGN_DONE, f->in, 0);
    return SL_OK;
}

/* A receipt (any frame) for each of the nkeys keys, reordered as they come, waited for
 * until the clock reads until; those still missing then are logged as not confirming
 * what (a phrase), not an error: the node died since, or ends elsewhere. */
static void
await_receipts(sl_final_t *f, sl_wire_key_t *keys, size_t nkeys, double until, const char *what)
{
    while (nkeys > 0) {
        sl_transport_frame_t *fr = NULL;
        size_t which;

        if (sl_transport_recv_any(f->env.tr, keys, nkeys, ms_until(until), &fr, &which) != SL_OK) {
            sl_log_warn("sync", "%zu node(s), node %u first, did not confirm %s: %s", nkeys,
                        (unsigned)keys[0].peer, what, sl_err_msg());
            return;
        }
        sl_transport_frame_release(&fr);
        keys[which] = keys[--nkeys];
    }
}

/* The gatherer, with the average: the average back to each peer whose model is in it,
 * before the gatherer evaluates and writes it, so that a gatherer stopped or killed
 * from here on still leaves the run its model: each such peer offers its copy as
 * model.bin (sl_run_model_place), and the gatherer's evaluated file, of as many models
 * from a lower rank, replaces it when the gatherer gets that far. The count of models
 * first, then the components (and this node's claim again when it is due, so that the
 * peers not served yet go on waiting); then a receipt from each peer, waited for until one
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

    SL_TRY(SL_ALLOC(&keys, (size_t)f->env.size, "final model receipts"));
    sl_put_u32(count, (uint32_t)nmodels);
    for (int r = 0; r < f->env.size; r++) {
        sl_wire_key_t k = {FINAL_ROUND, FINAL_COUNT(f), FINAL_BACK, (uint32_t)r, SL_WIRE_DATA};
        sl_status_t st;

        if (r == f->env.rank || !f->in[r])
            continue;
        if (sl_clock_now() >= f->next_sign) /* the ones still waiting wait on */
            send_signs(f, SIGN_CLAIM, NULL, 0);
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
    await_receipts(f, keys, nkeys, sl_clock_now() + f->env.timeout_ms / 1000.0,
                   "the final model sent back");
    sl_free(keys);
    return SL_OK;
}

/* A sender whose model is in gatherer g's average, given the frame *count of the
 * number of models it averages (released here): the average into f->avg and that
 * number into *nmodels, each component waited for sync.timeout_ms. SL_ERR_TIMEOUT when
 * it did not all come (g stopped or died while it sent it); SL_ERR_INVALID for a frame
 * of the wrong size or a count g cannot have averaged (itself and this node at least,
 * every node at most), the message without its context (take_average adds it). Frames
 * are keyed by their sender, which the transport checks, so they can only be g's. */
static sl_status_t
recv_average(sl_final_t *f, int g, sl_transport_frame_t **count, int *nmodels)
{
    sl_wire_key_t k = {FINAL_ROUND, 0, FINAL_BACK, (uint32_t)g, SL_WIRE_DATA};
    unsigned char bytes4[4];
    size_t got = (size_t)(*count)->h.payload_bytes;
    uint32_t n;

    if (got == sizeof bytes4)
        memcpy(bytes4, (*count)->payload, sizeof bytes4);
    sl_transport_frame_release(count);
    if (got != sizeof bytes4)
        return sl_err_set(SL_ERR_INVALID, "its count in %zu bytes, not %zu", got, sizeof bytes4);
    n = sl_get_u32(bytes4);
    if (n < 2 || n > (uint32_t)f->env.size)
        return sl_err_set(SL_ERR_INVALID, "an average of %u models, not 2 to %d", (unsigned)n,
                          f->env.size);
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

/* A sender whose model gatherer g took: the rest of the average g sends back after its
 * count *count (recv_average). *has = 1 with it, and g gets a receipt (send_average
 * waits for it); without it (g stopped or died while it sent it, or a peer's abort) the
 * node keeps no copy, as before, logged. Bad frames are errors. */
static sl_status_t
take_average(sl_final_t *f, int g, sl_transport_frame_t **count, int *nmodels, int *has)
{
    sl_status_t st = recv_average(f, g, count, nmodels);

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

/* The node this one's model goes to: the lowest rank that gathers (claims) and is not
 * out, else the lowest rank below this one that is not out (it may still claim: this
 * node waits for it), else this node itself. */
static int
pick_gatherer(sl_final_t *f, double t0)
{
    for (int r = 0; r < f->env.size; r++)
        if (r != f->env.rank && f->claims[r] && !is_out(f, r, t0))
            return r;
    for (int r = 0; r < f->env.rank; r++)
        if (!is_out(f, r, t0))
            return r;
    return f->env.rank;
}

/* This node's model to gatherer g, component by component; 0 when a send found no room
 * within sync.timeout_ms (g is taken for out then). */
static int
send_model(sl_final_t *f, const float *params, int g)
{
    for (int c = 0; c < f->env.ncomps; c++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)c, 0, (uint32_t)g, SL_WIRE_DATA};

        if (sl_transport_send(f->env.tr, &k, params + f->env.comps[c].offset,
                              (uint32_t)f->env.comps[c].count, SL_WIRE_FP32, 1.0f, 0,
                              f->env.timeout_ms) != SL_OK) {
            sl_log_warn("sync", "sending this node's final model to node %d: %s", g, sl_err_msg());
            f->out[g] = 1;
            return 0;
        }
    }
    f->sent[g] = 1;
    sl_log_info("sync", "node %d gathers the final model: this node's goes there", g);
    return 1;
}

/* The final model of gossip and local runs, where any node may have died or come back,
 * and the nodes end at different times: the lowest-ranked node alive at the end gathers
 * it, without a coordinator. Each node, from its entry here (t0), sends every other
 * rank its sign every T / FINAL_SIGN_DIV (T = sync.timeout_ms): "at the end" (HERE), or
 * "gathering" (CLAIM) once it gathers; a node still training answers the nodes at the
 * end with "training" (sl_final_still_training, every step). A rank is out for this
 * node when its process is gone or it gave no sign for 2T since it was last known alive
 * (is_out, silence_ends, from t0 at the earliest), and back on its next sign. So a dead
 * node costs 2T once (or nothing when its connection closed), and a late one is waited
 * for as long as it trains, 2T past its last sign at most.
 * Who gathers (pick_gatherer): the lowest claimant, else the lowest rank not out; when
 * that is this node, it claims. A node that finds a lower one alive never claims; one
 * that comes to the end and finds a claim follows it, whatever the claimant's rank
 * (the claimant counts it in as soon as it gives a sign: it is still collecting). A
 * sender sends its model to its gatherer and waits for the average back (take_average;
 * the gatherer's signs keep the wait going); a gatherer takes the models of every rank
 * that is not out in rank order (gather), sends "without you" (DONE) to the others, and
 * the average back to those in it (send_average), before it evaluates and writes it, so
 * that a gatherer stopped or killed from then on still leaves the run its model (each
 * offers its copy: sl_run_model_place). A node that gets a "without you" from its
 * gatherer, or from any gatherer before its model went anywhere, writes nothing: it
 * came too late. The signs that came before the node's entry are taken first, so that
 * it sees a claim made while it was still training.
 * Two writers remain possible only when the nodes' views cross: a live node that gave
 * no sign for 2T (stopped, or a step longer than 2T) and comes to the end within the
 * network's latency of a claim made without it. Two claimants that see each other
 * resolve it (the higher one yields and sends its model to the lower one); a claimant
 * that gets a "without you" writes nothing. Otherwise each writer writes the average of
 * the models it got, and the run's model.bin is the one that averages more nodes
 * (sl_run_model_place). */
static sl_status_t
final_gathering(sl_final_t *f, const float *params, int *writer, int *nmodels, int *has)
{
    const sl_sync_env_t *e = &f->env;
    double t0 = sl_clock_now();
    int me = e->rank, yielded;

    memset(f->sent, 0, (size_t)e->size);
    send_signs(f, SIGN_HERE, NULL, 0);
    SL_TRY(drain_signs(f));
    for (;;) {
        int g = pick_gatherer(f, t0), sent_any = 0;
        sl_transport_frame_t *fr = NULL;
        size_t which, nkeys;
        sl_status_t st;

        for (int r = 0; r < e->size; r++)
            sent_any |= f->sent[r];
        for (int r = 0; r < e->size; r++)
            if (f->done[r] && (f->sent[r] || !sent_any)) {
                sl_log_warn("sync",
                            "node %d gathered the final model without this node's (it came too "
                            "late)",
                            r);
                return SL_OK;
            }
        if (g == me) {
            if (me > 0)
                sl_log_warn("sync",
                            "no live node below this one gathers the final model: node %d "
                            "gathers it and writes the run's model.bin",
                            me);
            SL_TRY(gather(f, params, t0, nmodels, &yielded));
            if (yielded == 1)
                continue; /* a lower claimant: this node's model goes there */
            if (yielded == 2) {
                /* a gatherer wrote it without this one: so without those it took */
                send_signs(f, SIGN_DONE, f->in, 1);
                *nmodels = 1;
                continue; /* reports the "without you" above */
            }
            SL_TRY(send_average(f, *nmodels));
            *writer = *has = 1;
            return SL_OK;
        }
        if (f->claims[g] && !f->sent[g] && !send_model(f, params, g))
            continue;
        nkeys = sign_keys(f, SIGN_DONE);
        for (int r = 0; r < e->size; r++)
            if (f->sent[r])
                f->keys[nkeys++] = (sl_wire_key_t){FINAL_ROUND, FINAL_COUNT(f), FINAL_BACK,
                                                   (uint32_t)r, SL_WIRE_DATA};
        st = wait_step(f, nkeys, SIGN_HERE, silence_ends(f, g, t0), &fr, &which);
        if (st == SL_ERR_TIMEOUT)
            continue;
        SL_TRY(st);
        if (fr->h.seq != FINAL_BACK) {
            SL_TRY(take_sign(f, &fr));
            continue;
        }
        return take_average(f, (int)f->keys[which].peer, &fr, nmodels, has);
    }
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
    sl_collective_opts_t o = {.timeout_ms = e->timeout_ms, .group = g}; /* the model: fp32 */
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
    await_receipts(f, keys, nkeys, until, "that they hold the final model");
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

        SL_TRY(final_gathering(f, params, writer, nmodels, &has));
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
