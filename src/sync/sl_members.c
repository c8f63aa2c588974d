/* The member set and its agreement round (sl_members.h). Must not know the sync
 * algorithms: it runs what it is given over the members and re-forms them when that
 * times out. The admission of a rank that comes back is sl_members_admit.c's. */
#include "sync/sl_members.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "sync/sl_members_internal.h"

sl_status_t
sl_members_new(sl_members_t **out, sl_transport_t *tr, int rank, int size, int timeout_ms)
{
    sl_members_t *m;
    sl_status_t st;

    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || timeout_ms <= 0 || (size > 1 && !tr))
        return sl_err_set(SL_ERR_INVALID, "members: node %d of %d, timeout %d ms, transport %s",
                          rank, size, timeout_ms, tr ? "given" : "missing");
    SL_TRY(SL_CALLOC(&m, 1, "member set"));
    m->tr = tr;
    m->rank = (uint32_t)rank;
    m->size = (uint32_t)size;
    m->timeout_ms = timeout_ms;
    pthread_mutex_init(&m->lock, NULL);
    SL_TRY_GOTO(SL_ALLOC(&m->ranks, (size_t)size, "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->in, (size_t)size, "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->got, (size_t)size, "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->view, VIEW_BYTES((size_t)size), "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->keys, (size_t)size, "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->gone, (size_t)size, "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->their, (size_t)size, "member set"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&m->admit_at, (size_t)size, "member set"), st, fail);
    for (int r = 0; r < size; r++) {
        m->ranks[r] = (uint32_t)r;
        m->admit_at[r] = -1;
    }
    m->group = (sl_group_t){m->ranks, (uint32_t)size, 0};
    *out = m;
    return SL_OK;
fail:
    sl_members_destroy(&m);
    return st;
}

void
sl_members_destroy(sl_members_t **mp)
{
    sl_members_t *m = mp ? *mp : NULL;

    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    sl_free(m->ranks);
    sl_free(m->in);
    sl_free(m->got);
    sl_free(m->view);
    sl_free(m->keys);
    sl_free(m->gone);
    sl_free(m->their);
    sl_free(m->admit_at);
    sl_free(m->last);
    sl_free(m->events);
    sl_free(m);
    *mp = NULL;
}

const sl_group_t *
sl_members_group(const sl_members_t *m)
{
    return &m->group;
}

int
sl_members_count(const sl_members_t *m)
{
    return (int)m->group.n;
}

uint32_t
sl_members_epoch(const sl_members_t *m)
{
    return m->group.epoch;
}

int
sl_members_has(const sl_members_t *m, int r)
{
    for (uint32_t k = 0; k < m->group.n; k++)
        if (m->ranks[k] == (uint32_t)r)
            return 1;
    return 0;
}

void
sl_members_add_event(sl_members_t *m, uint32_t rank, int joined, const char *why)
{
    pthread_mutex_lock(&m->lock);
    if (m->nevents == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        sl_members_event_t *grown = NULL;
        if (SL_ALLOC(&grown, cap, "membership events") == SL_OK) {
            if (m->nevents)
                memcpy(grown, m->events, m->nevents * sizeof *grown);
            sl_free(m->events);
            m->events = grown;
            m->cap = cap;
        }
    }
    if (m->nevents < m->cap) { /* out of memory: the log line is all there is */
        sl_members_event_t *ev = &m->events[m->nevents++];
        ev->rank = (int)rank;
        ev->joined = joined;
        ev->members = (int)m->group.n;
        ev->epoch = m->group.epoch;
        snprintf(ev->why, sizeof ev->why, "%s", why);
    }
    pthread_mutex_unlock(&m->lock);
}

int
sl_members_next_event(sl_members_t *m, sl_members_event_t *ev)
{
    int any;

    pthread_mutex_lock(&m->lock);
    any = m->taken < m->nevents;
    if (any)
        *ev = m->events[m->taken++];
    pthread_mutex_unlock(&m->lock);
    return any;
}

/* Sends this node's view to every other member as its proposal (or ready word) of
 * component for epoch round. A send that finds no room (a dead member's full queue) is
 * skipped: that member is gone, or will miss this node's word and drop it, which the
 * ready words then show. */
static sl_status_t
propose(sl_members_t *m, uint32_t component, uint64_t round)
{
    sl_put_u32(m->view, m->done);
    for (uint32_t k = 0; k < m->group.n; k++)
        sl_put_u32(m->view + 4 * (k + 1), m->ranks[k]);
    for (uint32_t k = 0; k < m->group.n; k++) {
        sl_wire_key_t key = {round, component, 0, m->ranks[k], SL_WIRE_DATA};
        sl_status_t st;

        if (m->ranks[k] == m->rank)
            continue;
        st = sl_transport_send(m->tr, &key, m->view, 4 * (m->group.n + 1), SL_WIRE_BYTES, 1.0f, 0,
                               0);
        if (st == SL_ERR_TIMEOUT)
            sl_log_debug("sync", "membership proposal to rank %u skipped: %s",
                         (unsigned)m->ranks[k], sl_err_msg());
        else if (st != SL_OK)
            return st;
    }
    return SL_OK;
}

/* A proposal f from a member (u32 collectives done, then its view: u32 ranks):
 * m->got[sender] = 1, m->their[sender] = its count, and every rank its view does not
 * hold leaves m->in. A proposal that is not that is refused (its sender then counts as
 * not answering). */
static void
take_proposal(sl_members_t *m, sl_transport_frame_t *f)
{
    const unsigned char *p = (const unsigned char *)f->payload + 4;
    size_t n = f->h.payload_bytes / 4;

    if (f->h.payload_bytes % 4 != 0 || n < 1 || --n > m->size) {
        sl_transport_refuse(m->tr, &f, SL_DROP_BAD_SIZE, "membership proposal");
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (sl_get_u32(p + 4 * i) >= m->size) {
            sl_transport_refuse(m->tr, &f, SL_DROP_BAD_SIZE, "membership proposal");
            return;
        }
    m->got[f->h.sender] = 1;
    m->their[f->h.sender] = sl_get_u32(f->payload);
    for (uint32_t k = 0; k < m->group.n; k++) {
        int held = 0;
        for (size_t i = 0; i < n && !held; i++)
            held = sl_get_u32(p + 4 * i) == m->ranks[k];
        if (!held)
            m->in[m->ranks[k]] = 0;
    }
    sl_transport_frame_release(&f);
}

/* Whether the ready word f (u32 collectives done, then u32 ranks) holds this node's
 * set. */
static int
same_set(const sl_members_t *m, const sl_transport_frame_t *f)
{
    const unsigned char *p = f->payload;

    if (f->h.payload_bytes != 4 * ((uint64_t)m->group.n + 1))
        return 0;
    for (uint32_t k = 0; k < m->group.n; k++)
        if (sl_get_u32(p + 4 * (k + 1)) != m->ranks[k])
            return 0;
    return 1;
}

/* Waits until every other member's proposal (or, with ready, its ready word) for
 * round came, for twice timeout_ms at most: the survivors of a death notice it up to
 * about one timeout apart (a node blocked on the dead one times out first; one still
 * computing its step, or that finished the collective and is in the next one, only
 * when its own wait ends), and the last to notice must still be heard by the first.
 * Ready words (split not NULL) come at most that much after the first: three times
 * timeout_ms. A proposal is taken (take_proposal); a ready word that holds another set
 * sets *split. */
static sl_status_t
collect(sl_members_t *m, uint32_t component, uint64_t round, int *split)
{
    int ready = split != NULL;
    double deadline = sl_clock_now() + (ready ? 3.0 : 2.0) * m->timeout_ms / 1000.0;
    size_t left = 0;

    for (uint32_t k = 0; k < m->group.n; k++)
        if (m->ranks[k] != m->rank)
            m->keys[left++] = (sl_wire_key_t){round, component, 0, m->ranks[k], SL_WIRE_DATA};
    while (left > 0) {
        sl_transport_frame_t *f;
        size_t which;
        double wait = deadline - sl_clock_now();
        sl_status_t st = sl_transport_recv_any(m->tr, m->keys, left,
                                               wait > 0 ? (int)(wait * 1000.0) : 0, &f, &which);

        if (st == SL_ERR_TIMEOUT)
            return SL_OK;
        if (st != SL_OK)
            return st;
        m->keys[which] = m->keys[--left];
        if (!ready) {
            take_proposal(m, f);
            continue;
        }
        *split = !same_set(m, f);
        sl_transport_frame_release(&f);
        if (*split) /* no use waiting for the others: this set will not do */
            return SL_OK;
    }
    return SL_OK;
}

/* After the agreement: whether some members completed one collective more than others
 * (the collective that failed ended on some nodes only: a ring's last frames reached
 * them before the dead node stopped). Then the lowest-ranked of those is the giver of
 * its result, and the others take it, so that every member holds the same result and
 * counts the same collectives. Counts further apart are not a state the protocol can
 * reach: SL_ERR_INVALID. */
static sl_status_t
pick_giver(sl_members_t *m)
{
    uint32_t most = m->done;
    int apart = 0;

    m->their[m->rank] = m->done;
    for (uint32_t k = 0; k < m->group.n; k++) {
        uint32_t r = m->ranks[k];
        int32_t d = (int32_t)(m->their[r] - m->done);
        if (d < -1 || d > 1)
            return sl_err_set(SL_ERR_INVALID,
                              "members: rank %u has completed %" PRIu32 " collectives, rank "
                              "%u %" PRIu32 ": they cannot be brought together",
                              (unsigned)r, m->their[r], (unsigned)m->rank, m->done);
        if (d > 0)
            most = m->their[r];
    }
    for (uint32_t k = 0; k < m->group.n; k++)
        apart |= m->their[m->ranks[k]] != most;
    m->giver = m->size;
    for (uint32_t k = 0; k < m->group.n && apart && m->giver == m->size; k++)
        if (m->their[m->ranks[k]] == most)
            m->giver = m->ranks[k];
    m->behind = m->done != most;
    return SL_OK;
}

/* One round of the agreement (sl_members.h) at the next epoch: the proposals, the new
 * set (its dropped ranks told: forgotten by the transport, logged, an event each), then
 * the ready words: *split = 1 when one came with another set than this node's (the
 * members did not get the same proposals; the next round brings them together). */
static sl_status_t
agree_round(sl_members_t *m, const char *what, int *split)
{
    uint64_t round = (uint64_t)m->group.epoch + 1;
    uint32_t n = 0, before = m->group.n, nleft = 0;
    char why[200];

    memset(m->in, 0, m->size);
    memset(m->got, 0, m->size);
    for (uint32_t k = 0; k < before; k++)
        m->in[m->ranks[k]] = 1;
    SL_TRY(propose(m, SL_MEMBERS_COMPONENT, round));
    SL_TRY(collect(m, SL_MEMBERS_COMPONENT, round, NULL));
    m->in[m->rank] = m->got[m->rank] = 1; /* in its own set, whatever a view says */
    for (uint32_t k = 0; k < before; k++) {
        uint32_t r = m->ranks[k];
        if (m->in[r] && m->got[r])
            m->ranks[n++] = r;
        else
            m->gone[nleft++] = r;
    }
    m->group.n = n;
    m->group.epoch = (uint32_t)round;
    for (uint32_t i = 0; i < nleft; i++) {
        uint32_t r = m->gone[i];

        sl_transport_forget(m->tr, r);
        if (m->got[r])
            snprintf(why, sizeof why, "%s timed out, and another member no longer held it", what);
        else
            snprintf(why, sizeof why,
                     "%s timed out, and it did not answer the agreement within "
                     "%d ms",
                     what, 2 * m->timeout_ms);
        sl_log_debug("sync", "epoch %" PRIu64 ": rank %u dropped (%s), %u members", round,
                     (unsigned)r, why, (unsigned)n);
        sl_members_add_event(m, r, 0, why);
    }
    if (nleft == 0)
        sl_log_info("sync",
                    "%s timed out, but all %u members answered the agreement: again "
                    "at epoch %" PRIu64,
                    what, (unsigned)n, round);
    /* ready: the new members wait for each other's word that their proposals are in, so
     * that they start the next attempt together (a member whose members all answered at
     * once must not time out on one that still waits out a dead node) */
    *split = 0;
    SL_TRY(propose(m, SL_MEMBERS_COMPONENT + 2, round));
    return collect(m, SL_MEMBERS_COMPONENT + 2, round, split);
}

sl_status_t
sl_members_agree(sl_members_t *m, const char *what)
{
    int split = 1;

    for (uint32_t i = 0; split && i < m->size; i++)
        SL_TRY(agree_round(m, what, &split));
    SL_TRY(pick_giver(m));
    /* the failed attempt's lent payloads back before the next one rewrites them */
    if (sl_transport_wait_sent(m->tr, m->timeout_ms) != SL_OK)
        sl_log_warn("sync", "%s", sl_err_msg());
    return SL_OK;
}

/* The result of the collective just completed (count floats at out, over nodes
 * members), kept for a member that missed its end; one more completed. */
static sl_status_t
complete(sl_members_t *m, const float *out, size_t count, int nodes)
{
    if (count + 1 > m->last_cap) {
        sl_free(m->last);
        m->last = NULL;
        m->last_cap = 0;
        SL_TRY(SL_ALLOC(&m->last, count + 1, "last collective"));
        m->last_cap = count + 1;
    }
    /* the first float's bytes hold the member count: the frame give_result sends */
    sl_put_u32((unsigned char *)m->last, (uint32_t)nodes);
    memcpy(m->last + 1, out, count * sizeof *out);
    m->last_count = count;
    m->done++;
    return SL_OK;
}

/* The giver's part: the last result to every member one collective behind, as
 * SL_WIRE_DATA component SL_MEMBERS_COMPONENT + 1 of the epoch's round. A member it
 * cannot reach in time is left to the next agreement. */
static sl_status_t
give_result(sl_members_t *m)
{
    uint64_t bytes = 4 * ((uint64_t)m->last_count + 1);

    if (bytes > SL_WIRE_MAX_PAYLOAD)
        return sl_err_set(SL_ERR_INVALID,
                          "members: a result of %zu floats is too large to hand "
                          "over in one frame",
                          m->last_count);
    for (uint32_t k = 0; k < m->group.n; k++) {
        uint32_t r = m->ranks[k];
        sl_wire_key_t key = {m->group.epoch, SL_MEMBERS_COMPONENT + 1, 0, r, SL_WIRE_DATA};
        sl_status_t st;

        if (r == m->rank || m->their[r] == m->done)
            continue;
        st = sl_transport_send(m->tr, &key, m->last, (uint32_t)bytes, SL_WIRE_BYTES, 1.0f, 0,
                               m->timeout_ms);
        if (st == SL_ERR_TIMEOUT)
            sl_log_warn("sync", "rank %u: the last result could not be handed to rank %u: %s",
                        (unsigned)m->rank, (unsigned)r, sl_err_msg());
        else if (st != SL_OK)
            return st;
        sl_log_debug("sync", "epoch %" PRIu32 ": handed the last result to rank %u", m->group.epoch,
                     (unsigned)r);
    }
    return SL_OK;
}

/* A member one behind: the giver's result into out (room for cap floats; *count = how
 * many it holds), *nodes the members it is over. SL_ERR_TIMEOUT when it does not come
 * (the giver died: agree again). */
static sl_status_t
take_result(sl_members_t *m, float *out, size_t cap, size_t *count, int *nodes)
{
    sl_wire_key_t key = {m->group.epoch, SL_MEMBERS_COMPONENT + 1, 0, m->giver, SL_WIRE_DATA};
    sl_transport_frame_t *f;
    sl_status_t st;

    SL_TRY(sl_transport_recv_any(m->tr, &key, 1, m->timeout_ms, &f, NULL));
    if (f->h.payload_bytes % 4 != 0 || f->h.payload_bytes < 4 ||
        f->h.payload_bytes > 4 * ((uint64_t)cap + 1)) {
        st = sl_err_set(SL_ERR_INVALID,
                        "members: the last result from rank %u has %" PRIu64 " bytes, for at "
                        "most %zu: the members disagree on the collective",
                        (unsigned)m->giver, (uint64_t)f->h.payload_bytes, 4 * (cap + 1));
        sl_transport_frame_release(&f);
        return st;
    }
    *nodes = (int)sl_get_u32(f->payload);
    *count = f->h.payload_bytes / 4 - 1;
    memcpy(out, (const unsigned char *)f->payload + 4, *count * sizeof *out);
    sl_transport_frame_release(&f);
    return SL_OK;
}

sl_status_t
sl_members_run(sl_members_t *m, sl_members_fn fn, void *ctx, float *out, size_t *count, int *nodes,
               const char *what)
{
    size_t cap = *count;
    sl_status_t st = fn(ctx, &m->group, count);
    int calm = 0;

    *nodes = (int)m->group.n;
    for (;;) {
        uint32_t before = m->group.n;

        if (st == SL_OK)
            return complete(m, out, *count, *nodes);
        if (st != SL_ERR_TIMEOUT)
            return st;
        if (calm == SL_MEMBERS_CALM_TRIES)
            return sl_err_prefix(st,
                                 "%s: every member answered %d agreements in a row, but the "
                                 "collective still timed out",
                                 what, calm);
        sl_log_debug("sync", "%s: %s", what, sl_err_msg());
        SL_TRY(sl_members_agree(m, what));
        if (m->joined && m->group.n == 1)
            return sl_err_set(SL_ERR_DROPPED,
                              "this node came back and was admitted, but no member answers it "
                              "any more (they dropped it again at epoch %" PRIu32 ")",
                              m->group.epoch);
        calm = m->group.n == before ? calm + 1 : 0;
        if (m->behind) {
            st = take_result(m, out, cap, count, nodes);
            continue;
        }
        if (m->giver == m->rank)
            SL_TRY(give_result(m));
        *count = cap;
        st = fn(ctx, &m->group, count);
        *nodes = (int)m->group.n;
    }
}
