/* The rendezvous during the run (sl_rendezvous.h): rank 0 admits the nodes that come
 * back and learns the endpoints of the live ones from their presence messages; the
 * other ranks send those, and take the session keys rank 0 relays. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "node/sl_rendezvous_internal.h"
#include "transport/sl_zmq_status.h"

sl_status_t
sl_rdv_keep_table(sl_rendezvous_t *r, uint64_t run_id, const sl_rendezvous_table_t *t,
                  const peer_t *routes)
{
    int n = t->size;

    if (n < 1) /* no table to keep (and no negative sizes for the allocations below) */
        return sl_err_set(SL_ERR_INVALID, "rendezvous: a table of %d nodes", n);
    SL_TRY(sl_rdv_table_alloc(&r->table, n));
    for (int i = 0; i < n; i++) {
        const char *ep = t->endpoints[i];
        SL_TRY(sl_rdv_table_set(&r->table, i, ep, ep ? strlen(ep) : 0,
                                t->sessions + (size_t)i * SESSION_BYTES, t->generations[i]));
    }
    r->routes = calloc((size_t)n, sizeof *r->routes);
    r->routed = calloc((size_t)n, 1);
    r->pending = calloc((size_t)n, sizeof *r->pending);
    if (!r->routes || !r->routed || !r->pending)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    for (int i = 1; routes && i < n; i++)
        if (routes[i].id_len) {
            r->routes[i] = routes[i];
            r->routed[i] = 1;
        }
    r->run_id = run_id;
    return SL_OK;
}

/* A presence m: its socket is where rank 0 reaches the rank from now on; a process this
 * rank 0 did not know (it came back itself without it) goes into the table: 1 then,
 * else 0. A presence of an older process than the one in the table is ignored. */
static sl_status_t
take_presence(sl_rendezvous_t *r, const sl_rdv_message_t *m, int *found)
{
    const char *known = r->table.endpoints[m->rank];
    uint64_t held = r->table.generations[m->rank];

    *found = 0;
    if (m->generation < held) {
        sl_log_debug("rendezvous", "ignored a presence of an old process for rank %d", m->rank);
        return SL_OK;
    }
    r->routes[m->rank] = m->peer;
    r->routed[m->rank] = 1;
    if (m->generation == held && known && strcmp(known, m->endpoint) == 0)
        return SL_OK;
    SL_TRY(sl_rdv_table_set(&r->table, m->rank, m->endpoint, strlen(m->endpoint), m->session,
                            m->generation));
    /* it cannot have had this rank 0's key from its gathering: it gets it now */
    if (r->o.relay_sessions)
        (void)sl_rdv_send_session(r, &m->peer, 0);
    *found = 1;
    return SL_OK;
}

sl_status_t
sl_rendezvous_admit(sl_rendezvous_t *r, sl_rdv_event_t *ev, int *rank)
{
    *ev = SL_RDV_NOTHING;
    *rank = -1;
    if (r->o.rank != 0 || r->table.size == 0)
        return SL_OK;
    SL_TRY(sl_rdv_pending_step(r, NULL)); /* the comebacks whose time is up */
    for (int i = 0; i < ADMIT_MESSAGES; i++) {
        sl_rdv_message_t m;
        int got, found;

        SL_TRY(sl_rdv_take_message(r, r->run_id, &m, &got));
        if (got < 0)
            break; /* nothing more has come */
        if (!got)
            continue; /* refused */
        if (m.kind == KIND_CONFIRM) {
            SL_TRY(sl_rdv_pending_step(r, &m));
            continue;
        }
        if (m.kind == KIND_REGISTER) {
            if (m.generation == r->table.generations[m.rank]) {
                /* its registration again: its answer is on its way, or was lost */
                SL_TRY(sl_rdv_answer_again(r, &m));
                continue;
            }
            if (m.generation < r->table.generations[m.rank]) {
                sl_rdv_refuse(r, &m.peer, "a node",
                              "a process older than the one the run has for this rank");
                continue;
            }
            *ev = SL_RDV_CAME_BACK;
            *rank = m.rank;
            return sl_rdv_comeback(r, &m);
        }
        SL_TRY(take_presence(r, &m, &found));
        if (found) {
            *ev = SL_RDV_FOUND;
            *rank = m.rank;
            return SL_OK;
        }
    }
    return SL_OK;
}

const char *
sl_rendezvous_endpoint(const sl_rendezvous_t *r, int rank)
{
    return rank >= 0 && rank < r->table.size ? r->table.endpoints[rank] : NULL;
}

const unsigned char *
sl_rendezvous_session(const sl_rendezvous_t *r, int rank)
{
    return rank >= 0 && rank < r->table.size ? r->table.sessions + (size_t)rank * SESSION_BYTES
                                             : NULL;
}

int
sl_rdv_take_relay(sl_rendezvous_t *r, const unsigned char *d, size_t len)
{
    uint32_t about;
    uint64_t gen;

    if (sl_rdv_head_kind(d, len) != KIND_SESSION || len != RELAY_BYTES ||
        sl_get_u64(d + 8) != r->run_id || r->table.size == 0)
        return -1;
    about = sl_get_u32(d + HEAD_BYTES);
    gen = sl_get_u64(d + HEAD_BYTES + 4 + SESSION_BYTES);
    if (about >= (uint32_t)r->o.size || about == (uint32_t)r->o.rank ||
        gen <= r->table.generations[about])
        return -1; /* an old message never puts an old key back */
    memcpy(r->table.sessions + (size_t)about * SESSION_BYTES, d + HEAD_BYTES + 4, SESSION_BYTES);
    r->table.generations[about] = gen;
    return (int)about;
}

sl_status_t
sl_rendezvous_present(sl_rendezvous_t *r, int *rank)
{
    double now = sl_clock_now();

    *rank = -1;
    if (r->o.rank == 0 || !r->present_len)
        return SL_OK;
    if (now - r->present_at >= SL_RDV_PRESENT_MS / 1000.0) {
        r->present_at = now;
        /* best effort: with rank 0 gone the message waits for the next one, or is dropped */
        (void)zmq_send(r->sock, r->present, r->present_len, ZMQ_DONTWAIT);
    }
    for (int i = 0; i < ADMIT_MESSAGES && *rank < 0; i++) {
        zmq_msg_t m;

        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, r->sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            if (e == EAGAIN)
                break;
            return sl_zmq_fail("rendezvous: receiving from rank 0");
        }
        *rank = sl_rdv_take_relay(r, zmq_msg_data(&m), zmq_msg_size(&m));
        zmq_msg_close(&m);
    }
    return SL_OK;
}

void
sl_rendezvous_confirm(sl_rendezvous_t *r, int rank)
{
    unsigned char msg[CONFIRM_BYTES];

    if (r->o.rank == 0 || rank < 0 || rank >= r->table.size)
        return;
    sl_rdv_put_head(msg, KIND_CONFIRM, r->run_id);
    sl_put_u32(msg + HEAD_BYTES, (uint32_t)r->o.rank);
    sl_put_u32(msg + HEAD_BYTES + 4, (uint32_t)rank);
    sl_put_u64(msg + HEAD_BYTES + 8, r->table.generations[rank]);
    (void)zmq_send(r->sock, msg, sizeof msg, ZMQ_DONTWAIT);
}

int
sl_rendezvous_rejoined(const sl_rendezvous_t *r)
{
    return r->rejoined;
}
