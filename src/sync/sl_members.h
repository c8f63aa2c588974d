/* The member set of the collective algorithms (allreduce, ma, bmuf; DESIGN.md "Across
 * hosts: membership"): the live ranks in increasing order and an epoch that numbers the
 * set. Every collective of the sync runs over the members (sl_group_t: the ring of the
 * members in rank order, the epoch in its frames) and divides by their count. When one
 * times out, every survivor runs one agreement round (sl_members_agree) and the
 * collective is redone from its start over the new set (sl_members_run).
 *
 * The agreement, at epoch e: each member sends every other member its view (its member
 * list) as a proposal for epoch e + 1 (SL_WIRE_DATA, component SL_MEMBERS_COMPONENT,
 * round e + 1) and waits up to twice timeout_ms for theirs (survivors notice a death up
 * to about one timeout apart). The new set is this node plus the
 * members whose proposal came, less any rank missing from one of the views received: the
 * same rule on every survivor, so survivors that received the same proposals agree.
 * Then each sends its new members a ready word (component SL_MEMBERS_COMPONENT + 2) and
 * waits up to three times timeout_ms for theirs, so that they start the next attempt
 * together although some waited out a dead node and others did not. A
 * member that does not answer the agreement (it died too: a second failure during the
 * re-forming) is dropped with the first. Survivors that did not receive the same
 * proposals (a node that died halfway through sending them) end with different sets;
 * their sets differ in the frames' tag (sl_group_tag), so their collective times out
 * instead of mixing frames, and the next agreement brings them together. An agreement
 * that drops nobody still opens a new epoch: frames of the failed attempt never match.
 * A dropped rank's queued frames are thrown away (sl_transport_forget).
 *
 * A ring collective can end on some nodes and not on others (its last frames reached
 * them before the dead node stopped). So a proposal also says how many collectives its
 * sender completed; the members one behind take the result of the last one from the
 * lowest-ranked member that completed it (SL_WIRE_DATA, component SL_MEMBERS_COMPONENT
 * + 1, round the new epoch), and every member holds the same results.
 *
 * Limits: a node that was only slow and was dropped does not learn it; it goes on with
 * the members that still answer it, or alone. Nothing joins by this agreement.
 *
 * Admission of a rank that comes back (a new process for a dropped rank; src/node/
 * sl_rejoin.h), at a block boundary (allreduce: a step boundary): the newcomer asks the
 * coordinator, the lowest-ranked member (sl_members_join: each rank in turn, lowest
 * first), with one frame (component SL_MEMBERS_COMPONENT + 3). The coordinator, between
 * steps (sl_members_poll), picks the admission step K: the first multiple of the block
 * (the shortest sync period, sl_sync.c block_steps; allreduce: 1) past the next one
 * and at least SL_MEMBERS_ADMIT_LEAD steps ahead, so that the others hear of it in time
 * (none can be past the next multiple: its collective there needs the coordinator), never
 * past the run's end; it tells every member and the newcomer (+ 4: rank, K). Every
 * member keeps the admissions it was told of and, between steps at K, after the sync of
 * K (allreduce: after step K), grows its set by the rank (logged: "node R joined the
 * run"). The epoch stays: the set is in the frames' tag already, and a member whose
 * epoch had moved on alone could not meet the others in an agreement (its round is the
 * epoch + 1). The coordinator then hands the newcomer that set with its epoch, count of
 * collectives and the admissions still ahead (+ 5; sl_members_enter: a notice that went
 * out before K never reached the newcomer), and its state (after the sync of K, the same
 * on every member; with sync.stagger only the components whose sync point K is, the
 * others being the coordinator's copy: sl_sync.c, block_steps): the newcomer takes part
 * from the first collective after K on. A
 * member that missed the notice runs that collective over its old set: the sets differ
 * in the frames' tag, it times out, and the agreement decides; should it drop the
 * newcomer (a member's view lacks it), the newcomer's next collective fails with one
 * line ("no member answers it any more") instead of going on alone.
 *
 * Membership changes are kept as events (sl_members_event_t) for the trainer's log line
 * and metrics record; reading them is thread-safe (with overlapped sync the changes
 * happen on the sync worker). Everything else: one thread at a time. */
#ifndef SL_MEMBERS_H
#define SL_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"

/* The SL_WIRE_DATA component of the agreement's proposals. */
#define SL_MEMBERS_COMPONENT 0xfffffff0u
/* The fewest steps between an admission's notice and its step: the members, a step apart
 * at most, hear of it in time. */
#define SL_MEMBERS_ADMIT_LEAD 4
/* Agreements in a row that drop nobody after which a collective's timeout is an error:
 * every member answers, but the collective still does not go through. */
#define SL_MEMBERS_CALM_TRIES 3

typedef struct sl_members sl_members_t;

/* One membership change: rank left (joined 0) or came back (joined 1), leaving members
 * nodes, at epoch (0 in gossip and local runs, where each node keeps its own view:
 * sl_liveness.h); why says what happened (the collective that failed, and that the rank
 * did not answer the agreement; the rounds a neighbour missed). */
typedef struct {
    int rank;
    int members;
    uint32_t epoch;
    int joined;
    char why[200];
} sl_members_event_t;

/* Every one of size ranks a member, epoch 0. tr (borrowed; NULL when size is 1) carries
 * the agreement; timeout_ms (> 0) is its wait. SL_ERR_INVALID, SL_ERR_NOMEM. */
sl_status_t sl_members_new(sl_members_t **out, sl_transport_t *tr, int rank, int size,
                           int timeout_ms);
/* Frees; accepts NULL, NULLs *m. */
void sl_members_destroy(sl_members_t **m);

/* The collectives' group (borrowed, valid until the next agreement), how many members,
 * the epoch, and whether rank r is a member. */
const sl_group_t *sl_members_group(const sl_members_t *m);
int sl_members_count(const sl_members_t *m);
uint32_t sl_members_epoch(const sl_members_t *m);
int sl_members_has(const sl_members_t *m, int r);

/* One agreement round (above) after a collective failed; what (e.g. "sync of lstm.0
 * (bmuf, round 12)") says which, for the events. SL_OK with the new set in force (maybe
 * the same ranks, at a new epoch); SL_ERR_SHUTDOWN when a peer aborted; the transport's
 * fatal codes. */
sl_status_t sl_members_agree(sl_members_t *m, const char *what);

/* A collective over the members whose result is floats at out (room for *count; a
 * mean over the group: fn divides by group->n): fn(ctx, group, count) is called, with
 * *count the room, until it returns anything but SL_ERR_TIMEOUT; it sets *count to the
 * floats of its result when they are fewer. After a timeout the members agree
 * (sl_members_agree) and fn runs again over the new set, from its start: fn must
 * restore its own inputs each time (a partial reduce-scatter must not leak into the
 * next attempt). On SL_OK, *count floats at out are the result and *nodes the members
 * it is over. A member that missed the end of a collective the others completed (above)
 * takes their result instead of running fn again. After SL_MEMBERS_CALM_TRIES
 * agreements in a row that dropped nobody, the timeout is returned. Every member calls
 * it for the same collectives in the same order. what as above. */
typedef sl_status_t (*sl_members_fn)(void *ctx, const sl_group_t *group, size_t *count);
sl_status_t sl_members_run(sl_members_t *m, sl_members_fn fn, void *ctx, float *out, size_t *count,
                           int *nodes, const char *what);

/* Between steps, with the transport this thread's, never waiting: the coordinator takes
 * the requests to come back and answers them (admission at the first multiple of block
 * past the next one and at least SL_MEMBERS_ADMIT_LEAD steps past step, at most end; refused
 * when end is nearer), the other members take the coordinator's notices; then the admissions due at step (steps done,
 * after its sync) grow the set. On the coordinator *give (borrowed, valid until the next
 * call) lists the *ngive ranks admitted now, to be handed its state; they have their set
 * already. SL_OK, or the transport's fatal codes. */
sl_status_t sl_members_poll(sl_members_t *m, long step, long block, long end,
                            const uint32_t **give, int *ngive);
/* The newcomer: asks the members for admission in rank order (those the transport knows),
 * waiting up to wait_ms for each answer: *at the step it is admitted at, *coordinator who
 * admitted it (and sends the state). SL_ERR_TIMEOUT when nobody answered,
 * SL_ERR_DROPPED when the run is at its end (too late: the members go on without it),
 * SL_ERR_FORMAT for a bad answer. */
sl_status_t sl_members_join(sl_members_t *m, int wait_ms, long *at, int *coordinator);
/* The newcomer at its admission step: the set the coordinator sends (up to wait_ms)
 * becomes this node's. SL_ERR_TIMEOUT, SL_ERR_FORMAT (a set without this node). */
sl_status_t sl_members_enter(sl_members_t *m, int coordinator, int wait_ms);

/* The membership change after the last one taken (thread-safe): 1 and *ev, or 0 when
 * there is none. */
int sl_members_next_event(sl_members_t *m, sl_members_event_t *ev);

#endif
