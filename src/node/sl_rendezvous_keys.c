/* The rendezvous' relay of session keys (sl_rendezvous.h, cluster.security: mac): rank 0
 * sends a node's new key to the other ranks over their CURVE connections, collects
 * their confirmations, and only then answers the node that comes back, so that no frame
 * of the new process reaches a rank that cannot check it yet. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "node/sl_rendezvous_internal.h"

/* How long rank 0 waits for the confirmations: half the rendezvous timeout, so that a
 * node that comes back gets its table well before it gives up waiting for it. */
static double
confirm_wait_s(const sl_rendezvous_t *r)
{
    return r->o.timeout_ms / 2000.0;
}

int
sl_rdv_check_confirm(const sl_rendezvous_t *r, uint64_t run_id, const unsigned char *msg,
                     size_t len, long key_rank, sl_rdv_message_t *m, char *why, size_t size)
{
    uint32_t sender, about;

    if (len != CONFIRM_BYTES || sl_get_u64(msg + 8) != run_id) {
        snprintf(why, size, "not a confirmation of this run (%zu bytes)", len);
        return 0;
    }
    sender = sl_get_u32(msg + HEAD_BYTES);
    about = sl_get_u32(msg + HEAD_BYTES + 4);
    if (sender >= (uint32_t)r->o.size || about >= (uint32_t)r->o.size ||
        (key_rank >= 0 && (uint32_t)key_rank != sender)) {
        snprintf(why, size, "a confirmation from rank %u about rank %u that its key does not prove",
                 (unsigned)sender, (unsigned)about);
        return 0;
    }
    m->rank = (int)sender;
    m->about = (int)about;
    m->generation = sl_get_u64(msg + HEAD_BYTES + 8);
    return 1;
}

int
sl_rdv_send_session(sl_rendezvous_t *r, const peer_t *p, int rank)
{
    unsigned char msg[RELAY_BYTES];

    sl_rdv_put_head(msg, KIND_SESSION, r->run_id);
    sl_put_u32(msg + HEAD_BYTES, (uint32_t)rank);
    memcpy(msg + HEAD_BYTES + 4, r->table.sessions + (size_t)rank * SESSION_BYTES, SESSION_BYTES);
    sl_put_u64(msg + HEAD_BYTES + 4 + SESSION_BYTES, r->table.generations[rank]);
    return sl_rdv_send_to(r, p, msg, sizeof msg);
}

/* rank's key to every rank with a route but rank 0 and rank itself; waiting[i] set for
 * each it went to; the count. */
static int
relay(sl_rendezvous_t *r, int rank, unsigned char *waiting)
{
    int sent = 0;

    for (int i = 1; i < r->o.size; i++) {
        int e;
        if (i == rank || !r->routed[i])
            continue;
        e = sl_rdv_send_session(r, &r->routes[i], rank);
        if (e) {
            sl_log_warn("rendezvous", "could not send rank %d node %d's new key: %s", i, rank,
                        zmq_strerror(e));
            continue;
        }
        waiting[i] = 1;
        sent++;
    }
    return sent;
}

/* The rejoin table to pending node rank, and the pending entry freed. */
static sl_status_t
answer(sl_rendezvous_t *r, int rank)
{
    rdv_pending_t *p = r->pending[rank];
    unsigned char *msg = NULL;
    size_t len = 0;
    sl_status_t st;
    int e;

    r->pending[rank] = NULL;
    st = sl_rdv_encode_table(KIND_REJOIN, r->run_id, &r->table, &msg, &len);
    if (st == SL_OK && (e = sl_rdv_send_to(r, &p->peer, msg, len)) != 0)
        sl_log_warn("rendezvous", "could not send the table to rank %d: %s", rank, zmq_strerror(e));
    free(msg);
    free(p->waiting);
    free(p);
    return st;
}

sl_status_t
sl_rdv_comeback(sl_rendezvous_t *r, const sl_rdv_message_t *m)
{
    rdv_pending_t *p;

    SL_TRY(sl_rdv_table_set(&r->table, m->rank, m->endpoint, strlen(m->endpoint), m->session,
                            m->generation));
    r->routes[m->rank] = m->peer; /* the keys of later comebacks go there */
    r->routed[m->rank] = 1;
    if (r->pending[m->rank]) { /* an earlier process for it that has not had its answer */
        free(r->pending[m->rank]->waiting);
        free(r->pending[m->rank]);
    }
    r->pending[m->rank] = NULL;
    p = calloc(1, sizeof *p);
    if (p)
        p->waiting = calloc((size_t)r->o.size, 1);
    if (!p || !p->waiting) {
        free(p);
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    }
    r->pending[m->rank] = p;
    p->peer = m->peer;
    p->generation = m->generation;
    p->deadline = sl_clock_now() + confirm_wait_s(r);
    if (r->o.relay_sessions)
        p->left = relay(r, m->rank, p->waiting);
    /* with none to wait for, the caller still installs the key before any frame of the
     * node is read: the same thread reads them, after this returns */
    return p->left ? SL_OK : answer(r, m->rank);
}

sl_status_t
sl_rdv_answer_again(sl_rendezvous_t *r, const sl_rdv_message_t *m)
{
    unsigned char *msg = NULL;
    size_t len = 0;
    int e;

    r->routes[m->rank] = m->peer; /* the keys of later comebacks go there too */
    r->routed[m->rank] = 1;
    if (r->pending[m->rank]) { /* waiting for confirmations: the answer goes there */
        r->pending[m->rank]->peer = m->peer;
        return SL_OK;
    }
    SL_TRY(sl_rdv_encode_table(KIND_REJOIN, r->run_id, &r->table, &msg, &len));
    if ((e = sl_rdv_send_to(r, &m->peer, msg, len)) != 0)
        sl_log_warn("rendezvous", "could not send the table to rank %d again: %s", m->rank,
                    zmq_strerror(e));
    free(msg);
    return SL_OK;
}

sl_status_t
sl_rdv_pending_step(sl_rendezvous_t *r, const sl_rdv_message_t *m)
{
    double now = sl_clock_now();

    if (m) {
        rdv_pending_t *p = r->pending[m->about];
        if (!p || p->generation != m->generation || !p->waiting[m->rank])
            return SL_OK; /* a confirmation of a key since replaced, or twice */
        p->waiting[m->rank] = 0;
        if (--p->left == 0) {
            sl_log_debug("rendezvous", "every live rank has node %d's new key", m->about);
            return answer(r, m->about);
        }
        return SL_OK;
    }
    for (int i = 1; i < r->o.size; i++)
        if (r->pending[i] && now >= r->pending[i]->deadline) {
            sl_log_warn("rendezvous",
                        "%d rank%s did not confirm node %d's new key within %g s: they drop "
                        "its frames",
                        r->pending[i]->left, r->pending[i]->left == 1 ? "" : "s", i,
                        confirm_wait_s(r));
            SL_TRY(answer(r, i));
        }
    return SL_OK;
}

sl_status_t
sl_rdv_relay_own(sl_rendezvous_t *r)
{
    unsigned char *waiting = calloc((size_t)r->o.size, 1);
    double deadline = sl_clock_now() + confirm_wait_s(r);
    int left;
    sl_status_t st = SL_OK;

    if (!waiting)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    left = relay(r, 0, waiting);
    while (left > 0 && sl_clock_now() < deadline) {
        sl_rdv_message_t m;
        int ready, got;

        if (sl_rdv_interrupted(r)) {
            st = sl_err_set(SL_ERR_SHUTDOWN, "rendezvous: interrupted");
            break;
        }
        ready = sl_rdv_wait_readable(r, deadline);
        if (ready < 0) {
            st = ready;
            break;
        }
        if (!ready)
            continue;
        st = sl_rdv_take_message(r, r->run_id, &m, &got);
        if (st != SL_OK)
            break;
        if (got > 0 && m.kind == KIND_REGISTER && m.generation == r->table.generations[m.rank])
            continue; /* a gathered node's registration again: it has its table */
        /* not now: it registers again, and comes back once this node admits nodes
         * (a refusal failed it, and under shoal run ended the run) */
        if (got > 0 && m.kind == KIND_REGISTER)
            sl_rdv_busy(r, &m);
        else if (got > 0 && m.kind == KIND_CONFIRM && m.about == 0 &&
                 m.generation == r->generation && waiting[m.rank]) {
            waiting[m.rank] = 0;
            left--;
        }
    }
    if (st == SL_OK && left > 0)
        sl_log_warn("rendezvous",
                    "%d rank%s did not confirm this node's new key within %g s: they drop its "
                    "frames",
                    left, left == 1 ? "" : "s", confirm_wait_s(r));
    free(waiting);
    return st;
}
