/* The transport's control frames, which never reach the mailbox: a peer's abort (it
 * stops, and every receive fails from then on) and a peer's hello (it is a new process
 * for its rank, come back to the running job: every link forgets the old one); and,
 * under frame MACs, the new session key of such a process. */
#include <inttypes.h>
#include <string.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "transport/sl_link_zmq.h"
#include "transport/sl_transport_internal.h"

sl_status_t
sl_transport_abort_status(const sl_transport_t *t)
{
    return sl_err_set(SL_ERR_SHUTDOWN, "rank %u: rank %u aborted: %s", (unsigned)t->o.rank,
                      (unsigned)t->abort_rank, t->abort_msg);
}

/* Printable characters of the reason only. */
void
sl_transport_note_abort(sl_transport_t *t, const sl_link_frame_t *f)
{
    const unsigned char *p = f->pub.payload;
    size_t n = f->pub.h.payload_bytes, i;

    if (t->aborted)
        return;
    t->aborted = 1;
    t->abort_rank = f->pub.h.sender;
    for (i = 0; i < n && i + 1 < sizeof t->abort_msg; i++)
        t->abort_msg[i] = p[i] >= 32 && p[i] < 127 ? (char)p[i] : '?';
    t->abort_msg[i] = '\0';
}

const char *
sl_transport_abort_reason(const sl_transport_t *t)
{
    return t->aborted ? t->abort_msg : NULL;
}

/* Sends (kind, payload of len bytes) to every node with a known endpoint, waiting at
 * most timeout_ms in all; SL_ERR_TIMEOUT naming how many could not be told (what: the
 * caller's name, for the message). */
static sl_status_t
tell_known(sl_transport_t *t, unsigned kind, const void *payload, size_t len, int timeout_ms,
           const char *what)
{
    uint32_t untold = 0;
    sl_wire_key_t key = {0, 0, 0, 0, (uint8_t)kind};
    double deadline = sl_clock_now() + timeout_ms / 1000.0;

    for (uint32_t p = 0; p < t->o.size; p++) {
        double left = deadline - sl_clock_now();
        sl_status_t st;

        if (p == t->o.rank || !sl_link_zmq_known(t->links[SL_TRANSPORT_BASE].ctx, p))
            continue;
        key.peer = p;
        st = sl_transport_send(t, &key, payload, (uint32_t)len, SL_WIRE_BYTES, 1.0f, 0,
                               left > 0 ? (int)(left * 1000.0) : 0);
        if (st == SL_ERR_TIMEOUT)
            untold++;
        else if (st != SL_OK)
            return st;
    }
    if (untold)
        return sl_err_set(SL_ERR_TIMEOUT, "%s: rank %u: %u peers not told", what,
                          (unsigned)t->o.rank, (unsigned)untold);
    return SL_OK;
}

sl_status_t
sl_transport_abort(sl_transport_t *t, const char *reason, int timeout_ms)
{
    size_t len = strlen(reason);

    return tell_known(t, SL_WIRE_ABORT, reason, len < SL_WIRE_MAX_ABORT ? len : SL_WIRE_MAX_ABORT,
                      timeout_ms, "transport: abort");
}

/* An endpoint as sl_transport_new binds them: tcp:// or ipc://, printable, no more than
 * a hello carries. */
static int
is_endpoint(const unsigned char *p, size_t n)
{
    if (n < 7 || n >= SL_WIRE_MAX_HELLO ||
        (memcmp(p, "tcp://", 6) != 0 && memcmp(p, "ipc://", 6) != 0))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 33 || p[i] > 126)
            return 0;
    return 1;
}

void
sl_transport_take_hello(sl_transport_t *t, const sl_link_frame_t *f)
{
    uint32_t from = f->pub.h.sender;
    size_t n = f->pub.h.payload_bytes;
    char endpoint[SL_WIRE_MAX_HELLO];
    char detail[64];

    if (!is_endpoint(f->pub.payload, n)) {
        snprintf(detail, sizeof detail, "from rank %u", (unsigned)from);
        sl_transport_note_drop(t, SL_DROP_HELLO, 1, detail);
        return;
    }
    memcpy(endpoint, f->pub.payload, n);
    endpoint[n] = '\0';
    sl_transport_learn_endpoint(t, from, endpoint);
    t->missed[from].kind = 0;
    t->comebacks[from]++;
    sl_log_info("transport", "rank %u: rank %u is back, a new process at %s", (unsigned)t->o.rank,
                (unsigned)from, endpoint);
    (void)sl_transport_count_msg(t, SL_WIRE_HELLO, 0, SL_WIRE_BYTES, n, 0);
}

sl_status_t
sl_transport_announce(sl_transport_t *t, int timeout_ms)
{
    const char *ep = sl_transport_endpoint(t);
    size_t len = strlen(ep);

    if (len >= SL_WIRE_MAX_HELLO)
        return sl_err_set(SL_ERR_INVALID, "transport: endpoint %s too long", ep);
    return tell_known(t, SL_WIRE_HELLO, ep, len, timeout_ms, "transport: hello");
}

sl_status_t
sl_transport_set_session_key(sl_transport_t *t, uint32_t rank, const unsigned char *key)
{
    int changed;

    if (!t->o.frame_mac || rank >= t->o.size || rank == t->o.rank)
        return sl_err_set(SL_ERR_INVALID,
                          "transport: rank %u: no session key to set for rank %u (frame MACs "
                          "%s)",
                          (unsigned)t->o.rank, (unsigned)rank, t->o.frame_mac ? "on" : "off");
    changed = sl_link_zmq_set_session(t->links[SL_TRANSPORT_BASE].ctx, rank, key);
    if (changed > 0)
        sl_log_info("transport",
                    "rank %u: rank %u's new session key is installed: frames of its old "
                    "process are refused from now on",
                    (unsigned)t->o.rank, (unsigned)rank);
    return SL_OK;
}

void
sl_transport_learn_endpoint(sl_transport_t *t, uint32_t rank, const char *endpoint)
{
    if (rank >= t->o.size || rank == t->o.rank)
        return;
    t->down_at[rank] = 0.0; /* the new connection, when there is one, is not known lost */
    for (size_t i = 0; i < SL_TRANSPORT_NLINKS; i++)
        if (t->links[i].ops && t->links[i].ops->forget)
            t->links[i].ops->forget(t->links[i].ctx, rank, endpoint);
}

int
sl_transport_knows(const sl_transport_t *t, uint32_t rank)
{
    return sl_link_zmq_known(t->links[SL_TRANSPORT_BASE].ctx, rank);
}

uint32_t
sl_transport_comebacks(const sl_transport_t *t, uint32_t rank)
{
    return rank < t->o.size ? t->comebacks[rank] : 0;
}
