/* The rendezvous of the ranks other than 0 (sl_rendezvous.h): register with rank 0,
 * wait for the table (or, once the run is under way, the table of a node that comes
 * back), read it. */
#define _POSIX_C_SOURCE 200809L
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "node/sl_rendezvous_internal.h"
#include "transport/sl_zmq_status.h"

/* Reads the table out of message m (len bytes). */
static sl_status_t
decode_table(const sl_rendezvous_t *r, uint64_t run_id, const unsigned char *m, size_t len,
             sl_rendezvous_table_t *t)
{
    const unsigned char *p, *end = m + len;
    sl_status_t st;

    if (len < HEAD_BYTES + 4 || sl_get_u64(m + 8) != run_id ||
        sl_get_u32(m + HEAD_BYTES) != (uint32_t)r->o.size)
        return sl_err_set(SL_ERR_FORMAT,
                          "rendezvous: rank 0 at %s sent a table for another run or size",
                          sl_rdv_shown(r->master));
    p = m + HEAD_BYTES + 4; /* within the message now */
    SL_TRY(sl_rdv_table_alloc(t, r->o.size));
    for (int i = 0; i < r->o.size; i++) {
        size_t l;
        /* length 0: a rank rank 0 does not know (lost when it came back itself) */
        if (end - p < 2 || (l = sl_get_u16(p), (size_t)(end - p) < l + ENTRY_BYTES) ||
            (l && !sl_rdv_good_endpoint((const char *)p + 2, l))) {
            sl_rendezvous_table_fini(t);
            return sl_err_set(SL_ERR_FORMAT, "rendezvous: malformed table from rank 0 at %s",
                              sl_rdv_shown(r->master));
        }
        if ((st = sl_rdv_table_set(t, i, (const char *)p + 2, l, p + 2 + l,
                                   sl_get_u64(p + 2 + l + SESSION_BYTES))) != SL_OK) {
            sl_rendezvous_table_fini(t);
            return st;
        }
        p += ENTRY_BYTES + l;
    }
    if (p != end) {
        sl_rendezvous_table_fini(t);
        return sl_err_set(SL_ERR_FORMAT, "rendezvous: malformed table from rank 0 at %s",
                          sl_rdv_shown(r->master));
    }
    return SL_OK;
}

int
sl_rdv_read_answer(sl_rendezvous_t *r, uint64_t run_id, const unsigned char *d, size_t len,
                   sl_rendezvous_table_t *t)
{
    int rc;

    switch (sl_rdv_head_kind(d, len)) {
    case KIND_TABLE:
    case KIND_REJOIN:
        rc = decode_table(r, run_id, d, len, t);
        rc = rc == SL_OK ? 1 : rc;
        r->rejoined = sl_rdv_head_kind(d, len) == KIND_REJOIN;
        break;
    case KIND_BUSY:
        rc = len >= HEAD_BYTES && sl_get_u64(d + 8) == run_id ? 2 : 0;
        if (rc && !r->busy_said)
            sl_log_info("rendezvous",
                        "rank 0 at %s is coming back to the run itself: rank %d registers "
                        "again until it is admitted",
                        sl_rdv_shown(r->master), r->o.rank);
        r->busy_said |= rc != 0;
        break;
    case KIND_REFUSAL:
    case KIND_GIVE_UP: {
        size_t n = len - HEAD_BYTES < 512 ? len - HEAD_BYTES : 512;
        char why[513];
        for (size_t i = 0; i < n; i++)
            why[i] = d[HEAD_BYTES + i] >= ' ' && d[HEAD_BYTES + i] <= '~' ? (char)d[HEAD_BYTES + i]
                                                                          : '?';
        why[n] = '\0';
        if (sl_rdv_head_kind(d, len) == KIND_REFUSAL)
            rc = sl_err_set(SL_ERR_INVALID, "rendezvous: rank 0 at %s refused rank %d: %s",
                            sl_rdv_shown(r->master), r->o.rank, why);
        else
            rc = sl_err_set(SL_ERR_TIMEOUT, "rendezvous: rank 0 at %s gave up: %s",
                            sl_rdv_shown(r->master), why);
        break;
    }
    default:
        rc = sl_err_set(SL_ERR_FORMAT,
                        "rendezvous: rank 0 at %s answered with %zu bytes that "
                        "are not a shoal table",
                        sl_rdv_shown(r->master), len);
        break;
    }
    return rc;
}

/* Takes one answer from rank 0 off the socket (sl_rdv_read_answer); 0 when none came. */
static int
take_answer(sl_rendezvous_t *r, uint64_t run_id, sl_rendezvous_table_t *t)
{
    zmq_msg_t m;
    int rc;

    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, r->sock, ZMQ_DONTWAIT) < 0) {
        rc = zmq_errno() == EAGAIN ? 0 : sl_zmq_fail("rendezvous: receiving");
        zmq_msg_close(&m);
        return rc;
    }
    rc = sl_rdv_read_answer(r, run_id, zmq_msg_data(&m), zmq_msg_size(&m), t);
    zmq_msg_close(&m);
    return rc;
}

/* Whether rank 0's host name (master, tcp://HOST:PORT) has an IPv4 address, the
 * only kind a node connects to: 0 when it does (or master is not tcp), 1 when the
 * resolver says it has none, -1 when it gave no answer yet (ZeroMQ keeps trying then);
 * why gets the resolver's words. */
static int
master_resolves(const char *master, char *why, size_t size)
{
    char host[SL_RDV_ENDPOINT_MAX];
    const char *colon = strrchr(master, ':');
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc;

    if (strncmp(master, "tcp://", 6) != 0 || !colon || colon < master + 6)
        return 0;
    snprintf(host, sizeof host, "%.*s", (int)(colon - master - 6), master + 6);
    if ((rc = getaddrinfo(host, NULL, &hints, &ai)) == 0) {
        freeaddrinfo(ai);
        return 0;
    }
    snprintf(why, size, "%s", gai_strerror(rc));
    return rc == EAI_AGAIN || rc == EAI_SYSTEM || rc == EAI_MEMORY ? -1 : 1;
}

sl_status_t
sl_rdv_join(sl_rendezvous_t *r, uint64_t run_id, const char *endpoint, const unsigned char *session,
            sl_rendezvous_table_t *t)
{
    unsigned char msg[REGISTER_BYTES + SL_RDV_ENDPOINT_MAX];
    size_t len = strlen(endpoint);
    double deadline = sl_clock_now() + r->o.timeout_ms / 1000.0;
    char secs[32], why[128];

    /* a host name that does not resolve would only show as a timeout, minutes later */
    if (master_resolves(r->master, why, sizeof why) > 0)
        return sl_err_set(SL_ERR_CONFIG, "rendezvous: rank 0's address %s: %s",
                          sl_rdv_shown(r->master), why);
    sl_rdv_put_head(msg, KIND_REGISTER, run_id);
    sl_put_u32(msg + 16, (uint32_t)r->o.rank);
    sl_put_u32(msg + 20, (uint32_t)r->o.size);
    if (session)
        memcpy(msg + HEAD_BYTES + 8, session, SESSION_BYTES);
    else
        memset(msg + HEAD_BYTES + 8, 0, SESSION_BYTES);
    sl_put_u64(msg + HEAD_BYTES + 8 + SESSION_BYTES, r->generation);
    memcpy(msg + REGISTER_BYTES, endpoint, len);
    /* the same, as a presence, goes to rank 0 during the run (sl_rendezvous_present) */
    memcpy(r->present, msg, REGISTER_BYTES + len);
    sl_rdv_put_head(r->present, KIND_PRESENT, run_id);
    r->present_len = REGISTER_BYTES + len;
    r->present_at = sl_clock_now();
    /* the connection's pipe exists from zmq_connect on: this queues, it does not wait */
    if (zmq_send(r->sock, msg, REGISTER_BYTES + len, ZMQ_DONTWAIT) < 0)
        return sl_zmq_fail("rendezvous: registering with rank 0 at %s", sl_rdv_shown(r->master));
    for (double sent = sl_clock_now();;) {
        int ready;
        if (sl_rdv_interrupted(r))
            return sl_err_set(SL_ERR_SHUTDOWN, "rendezvous: interrupted");
        if (sl_clock_now() >= deadline)
            break;
        /* a node started again once the others had finished: nobody will answer */
        SL_TRY(sl_rdv_ask_ended(r));
        /* again every second while no table comes: a rank 0 that died with the
         * registration, started again (a run under churn), has it then; it knows this
         * process's own again by its generation */
        if (sl_clock_now() - sent >= SL_RDV_PRESENT_MS / 1000.0) {
            sent = sl_clock_now();
            (void)zmq_send(r->sock, msg, REGISTER_BYTES + len, ZMQ_DONTWAIT);
        }
        ready = sl_rdv_wait_readable(r, deadline);
        if (ready < 0)
            return ready;
        if (ready && (ready = take_answer(r, run_id, t)) == 2) {
            /* rank 0 lives and will admit this node: the wait starts again */
            deadline = sl_clock_now() + r->o.timeout_ms / 1000.0;
            continue;
        }
        if (ready)
            /* the copy: the keys relayed during the run replace its entries */
            return ready < 0 ? ready : sl_rdv_keep_table(r, run_id, t, NULL);
    }
    sl_rdv_format_seconds(r->o.timeout_ms, secs, sizeof secs);
    if (master_resolves(r->master, why, sizeof why) != 0)
        return sl_err_set(SL_ERR_TIMEOUT,
                          "rendezvous: no table from rank 0 at %s after %s: its host name "
                          "does not resolve (%s)",
                          sl_rdv_shown(r->master), secs, why);
    return sl_err_set(SL_ERR_TIMEOUT, "rendezvous: no table from rank 0 at %s after %s",
                      sl_rdv_shown(r->master), secs);
}
