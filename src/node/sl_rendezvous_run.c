/* The rendezvous during the run (sl_rendezvous.h): rank 0 admits the nodes that come
 * back and learns the endpoints of the live ones from their presence messages; the
 * other ranks send those. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "node/sl_rendezvous_internal.h"

sl_status_t
sl_rdv_keep_table(sl_rendezvous_t *r, uint64_t run_id, const sl_rendezvous_table_t *t)
{
    int n = t->size;

    SL_TRY(sl_rdv_table_alloc(&r->table, n));
    for (int i = 0; i < n; i++) {
        const char *ep = t->endpoints[i];
        SL_TRY(sl_rdv_table_set(&r->table, i, ep, ep ? strlen(ep) : 0,
                                t->sessions + (size_t)i * SESSION_BYTES));
    }
    r->admit_reg = calloc((size_t)n, 1);
    if (!r->admit_reg)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    r->admit_reg[0] = 1; /* a node claiming rank 0 is refused: rank 0 is this one */
    r->run_id = run_id;
    return SL_OK;
}

/* A node that comes back for m->rank: its new entry, and the table as a rejoin. */
static sl_status_t
admit(sl_rendezvous_t *r, const sl_rdv_message_t *m)
{
    unsigned char *msg = NULL;
    size_t len = 0;
    int e;

    SL_TRY(sl_rdv_table_set(&r->table, m->rank, m->endpoint, strlen(m->endpoint), m->session));
    SL_TRY(sl_rdv_encode_table(KIND_REJOIN, r->run_id, &r->table, &msg, &len));
    e = sl_rdv_send_to(r, &m->peer, msg, len);
    free(msg);
    if (e)
        sl_log_warn("rendezvous", "could not send the table to rank %d: %s", m->rank,
                    zmq_strerror(e));
    return SL_OK;
}

sl_status_t
sl_rendezvous_admit(sl_rendezvous_t *r, sl_rdv_event_t *ev, int *rank)
{
    *ev = SL_RDV_NOTHING;
    *rank = -1;
    if (r->o.rank != 0 || r->table.size == 0)
        return SL_OK;
    for (int i = 0; i < ADMIT_MESSAGES; i++) {
        sl_rdv_message_t m;
        const char *known;
        int got;

        SL_TRY(sl_rdv_take_message(r, r->run_id, r->admit_reg, &m, &got));
        if (got < 0)
            break; /* nothing more has come */
        if (!got)
            continue; /* refused */
        *rank = m.rank;
        if (m.kind == KIND_REGISTER) {
            *ev = SL_RDV_CAME_BACK;
            return admit(r, &m);
        }
        known = r->table.endpoints[m.rank];
        if (!known || strcmp(known, m.endpoint) != 0) {
            /* a live node this rank 0 did not know: it came back itself without it */
            SL_TRY(sl_rdv_table_set(&r->table, m.rank, m.endpoint, strlen(m.endpoint), m.session));
            *ev = SL_RDV_FOUND;
            return SL_OK;
        }
    }
    *rank = -1;
    return SL_OK;
}

const char *
sl_rendezvous_endpoint(const sl_rendezvous_t *r, int rank)
{
    return rank >= 0 && rank < r->table.size ? r->table.endpoints[rank] : NULL;
}

void
sl_rendezvous_present(sl_rendezvous_t *r)
{
    char drain[64];
    double now = sl_clock_now();

    if (r->o.rank == 0 || !r->present_len || now - r->present_at < SL_RDV_PRESENT_MS / 1000.0)
        return;
    r->present_at = now;
    /* best effort: with rank 0 gone the message waits for the next one, or is dropped */
    (void)zmq_send(r->sock, r->present, r->present_len, ZMQ_DONTWAIT);
    while (zmq_recv(r->sock, drain, sizeof drain, ZMQ_DONTWAIT) >= 0)
        ; /* nothing is expected from rank 0 any more */
}

int
sl_rendezvous_rejoined(const sl_rendezvous_t *r)
{
    return r->rejoined;
}
