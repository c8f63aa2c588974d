/* The admission of a rank that comes back to a run of allreduce, ma or bmuf
 * (sl_members.h: sl_members_poll on the members, sl_members_join and sl_members_enter
 * on the newcomer). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "sync/sl_members_internal.h"

/* Admission of a rank that comes back (sl_members.h): the frames, all SL_WIRE_DATA of
 * round 0, seq 0. */
enum {
    ADMIT_REQUEST = SL_MEMBERS_COMPONENT + 3, /* newcomer -> coordinator, no payload */
    ADMIT_NOTICE = SL_MEMBERS_COMPONENT + 4,  /* coordinator -> all: u32 rank, u64 step */
    ADMIT_SET = SL_MEMBERS_COMPONENT + 5      /* coordinator -> newcomer, at the step: u32
                                                 done, u32 epoch, u32 ranks */
};
#define NOTICE_BYTES 12

static sl_wire_key_t
admit_key(uint32_t component, uint32_t peer)
{
    return (sl_wire_key_t){0, component, 0, peer, SL_WIRE_DATA};
}

/* The coordinator's notice that rank is admitted at step at (0: it comes too late) to
 * peer. A member it cannot reach in time misses it (sl_members.h: then the agreement). */
static sl_status_t
send_notice(sl_members_t *m, uint32_t peer, uint32_t rank, long at)
{
    unsigned char buf[NOTICE_BYTES];
    sl_wire_key_t key = admit_key(ADMIT_NOTICE, peer);
    sl_status_t st;

    sl_put_u32(buf, rank);
    sl_put_u64(buf + 4, (uint64_t)at);
    st = sl_transport_send(m->tr, &key, buf, NOTICE_BYTES, SL_WIRE_BYTES, 1.0f, 0, m->timeout_ms);
    if (st == SL_ERR_TIMEOUT) {
        sl_log_warn("sync", "the admission of node %u could not be told to node %u: %s",
                    (unsigned)rank, (unsigned)peer, sl_err_msg());
        return SL_OK;
    }
    return st;
}

/* The coordinator: the requests of non-members that came, each answered with its step:
 * the first multiple of block past the next one and at least SL_MEMBERS_ADMIT_LEAD steps
 * ahead, never past end; 0 when end is nearer than that. No member can be past the next
 * multiple (its collective there needs this node's part, sent after the notice), so the
 * one after it always comes in time. */
static sl_status_t
take_requests(sl_members_t *m, long step, long block, long end)
{
    long lead = block + 1 > SL_MEMBERS_ADMIT_LEAD ? block + 1 : SL_MEMBERS_ADMIT_LEAD;

    for (uint32_t r = 0; r < m->size; r++) {
        sl_wire_key_t key = admit_key(ADMIT_REQUEST, r);
        sl_transport_frame_t *f;
        long at;

        if (sl_members_has(m, (int)r) || !sl_transport_knows(m->tr, r))
            continue;
        if (sl_transport_recv_any(m->tr, &key, 1, 0, &f, NULL) != SL_OK)
            continue; /* none came (a fatal code shows again in the next exchange) */
        sl_transport_frame_release(&f);
        at = m->admit_at[r] > step ? m->admit_at[r] /* asked again: the same answer */
                                   : (step + lead + block - 1) / block * block;
        if (at > end) /* the end, when the members still hear of it in time */
            at = end - step >= SL_MEMBERS_ADMIT_LEAD ? end : 0;
        if (at > 0) {
            m->admit_at[r] = at;
            for (uint32_t k = 0; k < m->group.n; k++)
                if (m->ranks[k] != m->rank)
                    SL_TRY(send_notice(m, m->ranks[k], r, at));
        }
        SL_TRY(send_notice(m, r, r, at));
        sl_log_info("sync", "node %u asks to come back at step %ld: %s%ld", (unsigned)r, step,
                    at ? "admitted at step " : "too late, the run ends at step ", at ? at : end);
    }
    return SL_OK;
}

/* A member: the coordinator's notices that came. */
static void
take_notices(sl_members_t *m, long step)
{
    sl_wire_key_t key = admit_key(ADMIT_NOTICE, m->ranks[0]);
    sl_transport_frame_t *f;

    while (sl_transport_recv_any(m->tr, &key, 1, 0, &f, NULL) == SL_OK) {
        uint32_t r = f->h.payload_bytes == NOTICE_BYTES ? sl_get_u32(f->payload) : m->size;
        long at = r < m->size ? (long)sl_get_u64((const unsigned char *)f->payload + 4) : 0;

        if (r >= m->size || sl_members_has(m, (int)r)) {
            sl_transport_refuse(m->tr, &f, SL_DROP_BAD_SIZE, "admission notice");
            continue;
        }
        sl_transport_frame_release(&f);
        if (at <= step) /* the members that have it go on with the node: the agreement */
            sl_log_warn("sync", "the admission of node %u at step %ld came at step %ld: too late",
                        (unsigned)r, at, step);
        else
            m->admit_at[r] = at;
    }
}

/* The coordinator hands newcomer r the set it enters: u32 collectives done, u32 epoch,
 * u32 n, the n ranks, then (u32 rank, u64 step) for each admission still ahead, so that
 * the newcomer grows its set with the others at that step (one it did not hear of would
 * leave it holding another set than the members: the agreement would then drop the
 * node admitted). */
static sl_status_t
send_set(sl_members_t *m, uint32_t r)
{
    sl_wire_key_t key = admit_key(ADMIT_SET, r);
    size_t len = 12 + 4 * (size_t)m->group.n;

    sl_put_u32(m->view, m->done);
    sl_put_u32(m->view + 4, m->group.epoch);
    sl_put_u32(m->view + 8, m->group.n);
    for (uint32_t k = 0; k < m->group.n; k++)
        sl_put_u32(m->view + 12 + 4 * k, m->ranks[k]);
    for (uint32_t a = 0; a < m->size; a++)
        if (m->admit_at[a] > 0) {
            sl_put_u32(m->view + len, a);
            sl_put_u64(m->view + len + 4, (uint64_t)m->admit_at[a]);
            len += 12;
        }
    return sl_transport_send(m->tr, &key, m->view, len, SL_WIRE_BYTES, 1.0f, 0, m->timeout_ms);
}

sl_status_t
sl_members_poll(sl_members_t *m, long step, long block, long end, const uint32_t **give, int *ngive)
{
    uint32_t nnew = 0;
    int coordinator = m->ranks[0] == m->rank; /* before the set grows: a newcomer may be
                                                 lower-ranked */

    *give = m->gone;
    *ngive = 0;
    if (m->size == 1)
        return SL_OK;
    if (coordinator)
        SL_TRY(take_requests(m, step, block, end));
    else
        take_notices(m, step);
    for (uint32_t r = 0; r < m->size; r++) {
        if (m->admit_at[r] != step)
            continue;
        m->admit_at[r] = -1;
        if (!sl_members_has(m, (int)r))
            m->gone[nnew++] = r;
    }
    if (nnew == 0)
        return SL_OK;
    for (uint32_t i = 0; i < nnew; i++) {
        uint32_t k = m->group.n++;
        while (k > 0 && m->ranks[k - 1] > m->gone[i]) {
            m->ranks[k] = m->ranks[k - 1];
            k--;
        }
        m->ranks[k] = m->gone[i];
    }
    /* the epoch stays: the frames' tag changes with the set (sl_group_tag), and a member
     * that missed the notice must still meet the others in the agreement (round: the
     * epoch + 1) */
    for (uint32_t i = 0; i < nnew; i++) {
        char why[64];

        snprintf(why, sizeof why, "admitted at step %ld, epoch %" PRIu32, step, m->group.epoch);
        sl_members_add_event(m, m->gone[i], 1, why); /* the trainer's line and record */
        if (coordinator)
            SL_TRY(send_set(m, m->gone[i]));
    }
    *ngive = coordinator ? (int)nnew : 0;
    return SL_OK;
}

/* The newcomer: coordinator r's answer to its request, up to wait_ms. A notice of
 * another rank's admission is passed over: sent to an earlier process of this rank (a
 * member then, killed before it read it), it waited at this rank's endpoint for the new
 * one. SL_ERR_TIMEOUT, SL_ERR_FORMAT (a frame of another size), the transport's codes. */
static sl_status_t
recv_answer(sl_members_t *m, uint32_t r, int wait_ms, unsigned char *buf)
{
    sl_wire_key_t key = admit_key(ADMIT_NOTICE, r);
    double end = sl_clock_now() + wait_ms / 1000.0;

    for (;;) {
        double left_ms = (end - sl_clock_now()) * 1000.0;
        size_t got;

        SL_TRY(sl_transport_recv(m->tr, &key, buf, NOTICE_BYTES, &got,
                                 left_ms > 0 ? (int)left_ms : 0));
        if (got != NOTICE_BYTES)
            return sl_err_set(SL_ERR_FORMAT, "rejoin: node %u sent an admission of %zu bytes",
                              (unsigned)r, got);
        if (sl_get_u32(buf) == m->rank)
            return SL_OK;
        sl_log_debug("sync",
                     "passed over node %u's notice of node %u's admission: it was meant "
                     "for an earlier process of this rank",
                     (unsigned)r, (unsigned)sl_get_u32(buf));
    }
}

sl_status_t
sl_members_join(sl_members_t *m, int wait_ms, long *at, int *coordinator)
{
    char asked[256] = "";
    size_t used = 0;

    for (uint32_t r = 0; r < m->size; r++) {
        sl_wire_key_t req = admit_key(ADMIT_REQUEST, r);
        unsigned char buf[NOTICE_BYTES];
        sl_status_t st;

        if (r == m->rank || !sl_transport_knows(m->tr, r))
            continue;
        if (used < sizeof asked)
            used += (size_t)snprintf(asked + used, sizeof asked - used, "%s%u", used ? ", " : "",
                                     (unsigned)r);
        SL_TRY(sl_transport_send(m->tr, &req, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, -1));
        st = recv_answer(m, r, wait_ms, buf);
        if (st == SL_ERR_TIMEOUT) {
            sl_log_info("sync", "node %u did not answer the request to come back: asking the next",
                        (unsigned)r);
            continue;
        }
        SL_TRY(st);
        *at = (long)sl_get_u64(buf + 4);
        *coordinator = (int)r;
        if (*at == 0) /* as if the members dropped it: no failure of the run (shoal run) */
            return sl_err_set(SL_ERR_DROPPED,
                              "rejoin: node %u says the run is at its end: too late to come back",
                              (unsigned)r);
        return SL_OK;
    }
    return sl_err_set(SL_ERR_TIMEOUT,
                      "rejoin: no member answered the request to come back within %d ms each: "
                      "asked %s",
                      wait_ms, asked);
}

/* Whether the set frame p (bytes) that a coordinator sent is sound for this node: n
 * ranks (1 to size), increasing, this one among them, then whole (rank, step)
 * admissions of ranks outside the set at steps > 0. */
static int
set_sound(const sl_members_t *m, const unsigned char *p, size_t bytes)
{
    uint32_t n = bytes >= 12 ? sl_get_u32(p + 8) : 0, prev = 0;
    int self = 0;

    if (n < 1 || n > m->size || bytes < 12 + 4 * (size_t)n ||
        (bytes - 12 - 4 * (size_t)n) % 12 != 0)
        return 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t r = sl_get_u32(p + 12 + 4 * k);
        if (r >= m->size || (k > 0 && r <= prev))
            return 0;
        self |= r == m->rank;
        prev = r;
    }
    for (size_t off = 12 + 4 * (size_t)n; off < bytes; off += 12) {
        uint32_t r = sl_get_u32(p + off);
        uint64_t at = sl_get_u64(p + off + 4);
        if (r >= m->size || at == 0 || at > (uint64_t)LONG_MAX)
            return 0;
        for (uint32_t k = 0; k < n; k++)
            if (sl_get_u32(p + 12 + 4 * k) == r)
                return 0;
    }
    return self;
}

sl_status_t
sl_members_enter(sl_members_t *m, int coordinator, int wait_ms)
{
    sl_wire_key_t key = admit_key(ADMIT_SET, (uint32_t)coordinator);
    sl_transport_frame_t *f;
    const unsigned char *p;
    size_t bytes;
    uint32_t n;

    SL_TRY(sl_transport_recv_any(m->tr, &key, 1, wait_ms, &f, NULL));
    p = f->payload;
    bytes = f->h.payload_bytes;
    if (!set_sound(m, p, bytes)) {
        sl_transport_frame_release(&f);
        return sl_err_set(SL_ERR_FORMAT,
                          "rejoin: node %d sent a member set that does not hold this node, or "
                          "admissions that do not fit it",
                          coordinator);
    }
    n = sl_get_u32(p + 8);
    for (uint32_t k = 0; k < n; k++)
        m->ranks[k] = sl_get_u32(p + 12 + 4 * k);
    for (size_t off = 12 + 4 * (size_t)n; off < bytes; off += 12)
        m->admit_at[sl_get_u32(p + off)] = (long)sl_get_u64(p + off + 4);
    m->done = sl_get_u32(p);
    m->group.n = n;
    m->group.epoch = sl_get_u32(p + 4);
    m->joined = 1;
    sl_transport_frame_release(&f);
    return SL_OK;
}
