/* The state hand-over to a node that comes back (sl_rejoin.h). */
#include "node/sl_rejoin.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "transport/sl_gossip.h"

#define SIZES_BYTES 40 /* u64 step, parameters, sync state bytes, optimizer floats and steps */

enum { SEQ_SIZES, SEQ_PARAMS, SEQ_SYNC, SEQ_OPTIM };

uint64_t
sl_rejoin_digest(const float *params, size_t nparams)
{
    return sl_hash_bulk(params, nparams * sizeof *params, 0);
}

/* The optimizer's state (opt: nothing when NULL) to peer as part SEQ_OPTIM. */
static sl_status_t
send_optim(sl_transport_t *tr, uint32_t peer, const sl_optim_t *opt)
{
    size_t n = opt ? sl_optim_state_size(opt) : 0;
    sl_wire_key_t key = {0, 0, SEQ_OPTIM, peer, SL_WIRE_STATE};
    float *host = NULL;
    long steps;
    sl_status_t st;

    if (n == 0)
        return SL_OK;
    SL_TRY(SL_ALLOC(&host, n, "optimizer state"));
    st = sl_optim_state_save(opt, host, &steps);
    if (st == SL_OK)
        st = sl_transport_send(tr, &key, host, (uint32_t)n, SL_WIRE_FP32, 1.0f, 0, -1);
    sl_free(host);
    return st;
}

/* Sends this node's state to peer (with opt's, when not NULL). */
static sl_status_t
send_state(sl_transport_t *tr, uint32_t peer, long step, const float *params, size_t nparams,
           const sl_sync_t *sync, const sl_optim_t *opt)
{
    size_t sbytes = sl_sync_state_bytes(sync), onum = opt ? sl_optim_state_size(opt) : 0;
    unsigned char sizes[SIZES_BYTES], *state = NULL;
    sl_wire_key_t key = {0, 0, SEQ_SIZES, peer, SL_WIRE_STATE};
    sl_status_t st;

    if (nparams > UINT32_MAX || nparams * sizeof *params > SL_WIRE_MAX_PAYLOAD ||
        sbytes > SL_WIRE_MAX_PAYLOAD || onum * sizeof(float) > SL_WIRE_MAX_PAYLOAD)
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "rejoin: a state of %zu parameters, %zu bytes of sync state and %zu "
                          "optimizer floats is larger than one frame carries",
                          nparams, sbytes, onum);
    sl_put_u64(sizes, (uint64_t)step);
    sl_put_u64(sizes + 8, nparams);
    sl_put_u64(sizes + 16, sbytes);
    sl_put_u64(sizes + 24, onum);
    sl_put_u64(sizes + 32, opt ? (uint64_t)sl_optim_steps(opt) : 0);
    SL_TRY(sl_transport_send(tr, &key, sizes, SIZES_BYTES, SL_WIRE_BYTES, 1.0f, 0, -1));
    key.seq = SEQ_PARAMS;
    SL_TRY(sl_transport_send(tr, &key, params, (uint32_t)nparams, SL_WIRE_FP32, 1.0f, 0, -1));
    SL_TRY(send_optim(tr, peer, opt));
    if (sbytes == 0)
        return SL_OK;
    SL_TRY(SL_ALLOC(&state, sbytes, "sync state"));
    st = sl_sync_state_save(sync, state, sbytes);
    key.seq = SEQ_SYNC;
    if (st == SL_OK)
        st = sl_transport_send(tr, &key, state, (uint32_t)sbytes, SL_WIRE_BYTES, 1.0f, 0, -1);
    sl_free(state);
    return st;
}

int
sl_rejoin_requested(const sl_rejoin_server_t *srv, const sl_transport_t *tr)
{
    sl_transport_stat_t stat;

    sl_transport_stat(tr, SL_WIRE_STATE_REQUEST, 0, &stat);
    return stat.recv_msgs != srv->answered;
}

sl_status_t
sl_rejoin_serve(sl_rejoin_server_t *srv, sl_transport_t *tr, long step, const float *params,
                size_t nparams, const sl_sync_t *sync)
{
    uint32_t n = sl_transport_size(tr), me = sl_transport_rank(tr), m = 0;
    sl_transport_stat_t stat;
    sl_wire_key_t *keys;
    sl_status_t st = SL_OK;

    if (!sl_rejoin_requested(srv, tr))
        return SL_OK;
    sl_transport_stat(tr, SL_WIRE_STATE_REQUEST, 0, &stat);
    srv->answered = stat.recv_msgs;
    SL_TRY(SL_ALLOC(&keys, n, "state requests"));
    for (uint32_t p = 0; p < n; p++)
        if (p != me)
            keys[m++] = (sl_wire_key_t){0, 0, 0, p, SL_WIRE_STATE_REQUEST};
    for (;;) {
        sl_transport_frame_t *f;
        size_t which;
        uint32_t peer;

        st = sl_transport_recv_any(tr, keys, m, 0, &f, &which);
        if (st == SL_ERR_TIMEOUT) {
            st = SL_OK;
            break;
        }
        if (st != SL_OK)
            break;
        peer = f->h.sender;
        sl_transport_frame_release(&f);
        st = send_state(tr, peer, step, params, nparams, sync, NULL);
        if (st == SL_ERR_TIMEOUT) {
            sl_log_warn("rejoin", "could not send the state to node %u: %s", (unsigned)peer,
                        sl_err_msg());
            st = SL_OK;
            continue;
        }
        if (st != SL_OK)
            break;
        sl_log_info("rejoin",
                    "sent node %u the state of step %ld to come back with (parameters "
                    "%016" PRIx64 ")",
                    (unsigned)peer, step, sl_rejoin_digest(params, nparams));
    }
    sl_free(keys);
    return st;
}

sl_status_t
sl_rejoin_push(sl_transport_t *tr, int peer, long step, const float *params, size_t nparams,
               const sl_sync_t *sync, const sl_optim_t *opt)
{
    SL_TRY(send_state(tr, (uint32_t)peer, step, params, nparams, sync, opt));
    sl_log_info("rejoin",
                "sent node %d the state of step %ld to come back with (parameters "
                "%016" PRIx64 ")",
                peer, step, sl_rejoin_digest(params, nparams));
    return SL_OK;
}

/* One part of donor's answer into buf: exactly want bytes, waiting up to wait_ms, a
 * second at a time: a donor whose process died (its connection closed) is given up at
 * once, SL_ERR_DROPPED, rather than waited for up to the rendezvous timeout (an
 * admission's coordinator dies while its newcomer waits up to two blocks for the state; the
 * newcomer then comes back again, through shoal run's restart, to another one). */
static sl_status_t
recv_part(sl_transport_t *tr, uint32_t donor, unsigned seq, void *buf, size_t want, int wait_ms)
{
    sl_wire_key_t key = {0, 0, seq, donor, SL_WIRE_STATE};
    double deadline = sl_clock_now() + wait_ms / 1000.0;
    size_t got;
    sl_status_t st;

    for (;;) {
        double left_ms = (deadline - sl_clock_now()) * 1000.0;
        int slice = left_ms < 1000.0 ? (left_ms > 0 ? (int)left_ms : 0) : 1000;

        st = sl_transport_recv(tr, &key, buf, want, &got, slice);
        if (st != SL_ERR_TIMEOUT || slice < 1000)
            break;
        sl_transport_watch(tr);
        if (sl_transport_gone(tr, donor))
            return sl_err_set(SL_ERR_DROPPED,
                              "rejoin: node %u, which was to hand this node the state, is gone "
                              "(its connection closed)",
                              (unsigned)donor);
    }
    if (st == SL_ERR_TIMEOUT)
        return sl_err_set(st, "rejoin: node %u sent no state (part %u) within %d ms",
                          (unsigned)donor, seq, wait_ms);
    SL_TRY(st);
    if (got != want)
        return sl_err_set(SL_ERR_FORMAT, "rejoin: node %u sent %zu bytes of state part %u, not %zu",
                          (unsigned)donor, got, seq, want);
    return SL_OK;
}

/* donor's optimizer state (part SEQ_OPTIM, n floats, steps) into opt. */
static sl_status_t
recv_optim(sl_transport_t *tr, uint32_t donor, sl_optim_t *opt, size_t n, uint64_t steps)
{
    float *raw = NULL;
    sl_status_t st;

    if (n == 0)
        return SL_OK;
    if (steps > (uint64_t)LONG_MAX)
        return sl_err_set(SL_ERR_FORMAT, "rejoin: node %u sent %llu optimizer steps",
                          (unsigned)donor, (unsigned long long)steps);
    SL_TRY(SL_ALLOC(&raw, 2 * n, "optimizer state")); /* as received, then checked */
    st = recv_part(tr, donor, SEQ_OPTIM, raw, n * sizeof *raw, sl_transport_timeout_ms(tr));
    if (st == SL_OK && !sl_floats_copy_finite(raw + n, raw, n))
        st = sl_err_set(SL_ERR_FORMAT, "rejoin: node %u's optimizer state is not all finite",
                        (unsigned)donor);
    if (st == SL_OK)
        st = sl_optim_state_load(opt, raw + n, (long)steps);
    sl_free(raw);
    return st;
}

/* Takes in donor's state (with its optimizer's into opt, when not NULL), its first part
 * within wait_ms. */
static sl_status_t
recv_state(sl_transport_t *tr, uint32_t donor, int wait_ms, size_t nparams, sl_sync_t *sync,
           sl_optim_t *opt, float *params, long *step)
{
    int timeout_ms = sl_transport_timeout_ms(tr);
    unsigned char sizes[SIZES_BYTES], *state = NULL;
    size_t sbytes = sl_sync_state_bytes(sync), onum = opt ? sl_optim_state_size(opt) : 0;
    float *raw = NULL;
    uint64_t their_step, their_n, their_s, their_o;
    sl_status_t st;

    SL_TRY(recv_part(tr, donor, SEQ_SIZES, sizes, SIZES_BYTES, wait_ms));
    their_step = sl_get_u64(sizes);
    their_n = sl_get_u64(sizes + 8);
    their_s = sl_get_u64(sizes + 16);
    their_o = sl_get_u64(sizes + 24);
    if (their_n != nparams || their_s != sbytes || their_o != onum ||
        their_step > (uint64_t)LONG_MAX)
        return sl_err_set(SL_ERR_FORMAT,
                          "rejoin: node %u's state (%llu parameters, %llu bytes of sync state, "
                          "%llu optimizer floats) does not fit this node (%zu, %zu, %zu): "
                          "another model, optimizer or sync setting",
                          (unsigned)donor, (unsigned long long)their_n, (unsigned long long)their_s,
                          (unsigned long long)their_o, nparams, sbytes, onum);
    SL_TRY(SL_ALLOC(&raw, nparams, "state parameters"));
    st = recv_part(tr, donor, SEQ_PARAMS, raw, nparams * sizeof *raw, timeout_ms);
    if (st == SL_OK && !sl_floats_copy_finite(params, raw, nparams))
        st = sl_err_set(SL_ERR_FORMAT, "rejoin: node %u's parameters are not all finite",
                        (unsigned)donor);
    sl_free(raw);
    SL_TRY(st);
    SL_TRY(recv_optim(tr, donor, opt, onum, sl_get_u64(sizes + 32)));
    if (sbytes) {
        SL_TRY(SL_ALLOC(&state, sbytes, "sync state"));
        st = recv_part(tr, donor, SEQ_SYNC, state, sbytes, timeout_ms);
        if (st == SL_OK)
            st = sl_sync_state_load(sync, state, sbytes);
        sl_free(state);
        SL_TRY(st);
    }
    *step = (long)their_step;
    return SL_OK;
}

sl_status_t
sl_rejoin_take(sl_transport_t *tr, int donor, int wait_ms, size_t nparams, sl_sync_t *sync,
               sl_optim_t *opt, float *params, long *step)
{
    return recv_state(tr, (uint32_t)donor, wait_ms, nparams, sync, opt, params, step);
}

/* Asks donor for the state and takes it in. */
static sl_status_t
take_state(sl_transport_t *tr, uint32_t donor, size_t nparams, sl_sync_t *sync, float *params,
           long *step)
{
    sl_wire_key_t req = {0, 0, 0, donor, SL_WIRE_STATE_REQUEST};

    SL_TRY(sl_transport_send(tr, &req, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, -1));
    return recv_state(tr, donor, sl_transport_timeout_ms(tr), nparams, sync, NULL, params, step);
}

sl_status_t
sl_rejoin_fetch(sl_transport_t *tr, size_t nparams, sl_sync_t *sync, float *params, long *step,
                int *donor)
{
    uint32_t n = sl_transport_size(tr), me = sl_transport_rank(tr);
    char asked[256] = "";
    size_t used = 0;

    /* the ring neighbours first: me + 1, me - 1, me + 2, ... */
    for (uint32_t off = 1; off <= n / 2; off++) {
        uint32_t cand[2] = {(me + off) % n, (me + n - off) % n};

        for (int k = 0; k < 2; k++) {
            uint32_t d = cand[k];
            sl_status_t st;

            if ((k == 1 && d == cand[0]) || !sl_transport_knows(tr, d))
                continue;
            if (used < sizeof asked)
                used += (size_t)snprintf(asked + used, sizeof asked - used, "%s%u",
                                         used ? ", " : "", (unsigned)d);
            st = take_state(tr, d, nparams, sync, params, step);
            if (st == SL_OK) {
                *donor = (int)d;
                return SL_OK;
            }
            if (st != SL_ERR_TIMEOUT)
                return st;
            sl_log_info("rejoin", "node %u did not send the state: %s; asking the next",
                        (unsigned)d, sl_err_msg());
        }
    }
    return sl_err_set(SL_ERR_TIMEOUT,
                      "rejoin: no live node sent the run's state within %d ms each: asked %s",
                      sl_transport_timeout_ms(tr), asked);
}
