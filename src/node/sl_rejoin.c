/* The state hand-over to a node that comes back (sl_rejoin.h). */
#include "node/sl_rejoin.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "transport/sl_collective.h"

#define SIZES_BYTES 24 /* u64 step, u64 parameters, u64 sync state bytes */

enum { SEQ_SIZES, SEQ_PARAMS, SEQ_SYNC };

uint64_t
sl_rejoin_digest(const float *params, size_t nparams)
{
    return sl_hash_bulk(params, nparams * sizeof *params, 0);
}

/* Sends this node's state to peer. */
static sl_status_t
send_state(sl_transport_t *tr, uint32_t peer, long step, const float *params, size_t nparams,
           const sl_sync_t *sync)
{
    size_t sbytes = sl_sync_state_bytes(sync);
    unsigned char sizes[SIZES_BYTES], *state = NULL;
    sl_wire_key_t key = {0, 0, SEQ_SIZES, peer, SL_WIRE_STATE};
    sl_status_t st;

    if (nparams > UINT32_MAX || nparams * sizeof *params > SL_WIRE_MAX_PAYLOAD ||
        sbytes > SL_WIRE_MAX_PAYLOAD)
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "rejoin: a state of %zu parameters and %zu bytes of sync state is "
                          "larger than one frame carries",
                          nparams, sbytes);
    sl_put_u64(sizes, (uint64_t)step);
    sl_put_u64(sizes + 8, nparams);
    sl_put_u64(sizes + 16, sbytes);
    SL_TRY(sl_transport_send(tr, &key, sizes, SIZES_BYTES, SL_WIRE_BYTES, 1.0f, 0, -1));
    key.seq = SEQ_PARAMS;
    SL_TRY(sl_transport_send(tr, &key, params, (uint32_t)nparams, SL_WIRE_FP32, 1.0f, 0, -1));
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

sl_status_t
sl_rejoin_serve(sl_rejoin_server_t *srv, sl_transport_t *tr, long step, const float *params,
                size_t nparams, const sl_sync_t *sync)
{
    uint32_t n = sl_transport_size(tr), me = sl_transport_rank(tr), m = 0;
    sl_transport_stat_t stat;
    sl_wire_key_t *keys;
    sl_status_t st = SL_OK;

    sl_transport_stat(tr, SL_WIRE_STATE_REQUEST, 0, &stat);
    if (stat.recv_msgs == srv->answered)
        return SL_OK;
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
        st = send_state(tr, peer, step, params, nparams, sync);
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

/* One part of donor's answer into buf: exactly want bytes. */
static sl_status_t
recv_part(sl_transport_t *tr, uint32_t donor, unsigned seq, void *buf, size_t want)
{
    sl_wire_key_t key = {0, 0, seq, donor, SL_WIRE_STATE};
    size_t got;

    SL_TRY(sl_transport_recv(tr, &key, buf, want, &got, sl_transport_timeout_ms(tr)));
    if (got != want)
        return sl_err_set(SL_ERR_FORMAT, "rejoin: node %u sent %zu bytes of state part %u, not %zu",
                          (unsigned)donor, got, seq, want);
    return SL_OK;
}

/* Asks donor for the state and takes it in. */
static sl_status_t
take_state(sl_transport_t *tr, uint32_t donor, size_t nparams, sl_sync_t *sync, float *params,
           long *step)
{
    sl_wire_key_t req = {0, 0, 0, donor, SL_WIRE_STATE_REQUEST};
    unsigned char sizes[SIZES_BYTES], *state = NULL;
    size_t sbytes = sl_sync_state_bytes(sync);
    float *raw = NULL;
    uint64_t their_step, their_n, their_s;
    sl_status_t st;

    SL_TRY(sl_transport_send(tr, &req, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, -1));
    SL_TRY(recv_part(tr, donor, SEQ_SIZES, sizes, SIZES_BYTES));
    their_step = sl_get_u64(sizes);
    their_n = sl_get_u64(sizes + 8);
    their_s = sl_get_u64(sizes + 16);
    if (their_n != nparams || their_s != sbytes || their_step > (uint64_t)LONG_MAX)
        return sl_err_set(SL_ERR_FORMAT,
                          "rejoin: node %u's state (%llu parameters, %llu bytes of sync state) "
                          "does not fit this node (%zu, %zu): another model or sync setting",
                          (unsigned)donor, (unsigned long long)their_n, (unsigned long long)their_s,
                          nparams, sbytes);
    SL_TRY(SL_ALLOC(&raw, nparams, "state parameters"));
    st = recv_part(tr, donor, SEQ_PARAMS, raw, nparams * sizeof *raw);
    if (st == SL_OK && !sl_floats_copy_finite(params, raw, nparams))
        st = sl_err_set(SL_ERR_FORMAT, "rejoin: node %u's parameters are not all finite",
                        (unsigned)donor);
    sl_free(raw);
    SL_TRY(st);
    if (sbytes) {
        SL_TRY(SL_ALLOC(&state, sbytes, "sync state"));
        st = recv_part(tr, donor, SEQ_SYNC, state, sbytes);
        if (st == SL_OK)
            st = sl_sync_state_load(sync, state, sbytes);
        sl_free(state);
        SL_TRY(st);
    }
    *step = (long)their_step;
    return SL_OK;
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
