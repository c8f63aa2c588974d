/* The member set and its agreement round (sl_members.h). Must not know the sync
 * algorithms: it runs what it is given over the members and re-forms them when that
 * times out. */
#include "sync/sl_members.h"

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"

/* Bytes of a view or of the set a newcomer enters, for size ranks (send_set). */
#define VIEW_BYTES(size) (12 + 16 * (size))

struct sl_members {
    sl_transport_t *tr; /* borrowed */
    uint32_t rank, size;
    int timeout_ms;
    uint32_t *ranks;         /* (size) the members, increasing: the first group.n */
    sl_group_t group;        /* over ranks */
    unsigned char *in, *got; /* (size) scratch of an agreement: still in; answered */
    unsigned char *view;     /* (VIEW_BYTES(size)) a proposal or ready word: u32 done,
                                then u32 ranks, little-endian; or the set a newcomer
                                enters (send_set) */
    sl_wire_key_t *keys;     /* (size) the proposals waited for */
    uint32_t *gone;          /* (size) the ranks an agreement dropped */
    uint32_t done;           /* collectives completed (sl_members_run) */
    uint32_t *their;         /* (size) each member's done, from its proposal */
    uint32_t giver;          /* after an agreement: the member that hands the last result
                                to those that missed its end; size when none does */
    int behind;              /* after an agreement: this node missed that end */
    float *last;             /* (last_cap) the last collective's result, for them */
    size_t last_count, last_cap;
    long *admit_at;       /* (size) the step each rank is to be admitted at, -1 none */
    int joined;           /* this node came back and was admitted (sl_members_join) */
    pthread_mutex_t lock; /* guards the events: read by the trainer's thread */
    sl_members_event_t *events;
    size_t nevents, taken, cap;
};

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

/* Records that rank left or joined (the set is already the new one). */
static void
add_event(sl_members_t *m, uint32_t rank, int joined, const char *why)
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
        add_event(m, r, 0, why);
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
        add_event(m, m->gone[i], 1, why); /* the trainer's line and record */
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
