/* Mailbox: frames that arrived before anyone asked for them, filed under
 * (kind, component, round, seq, sender) until a receive asks for exactly that key.
 * It also remembers, per (kind, component), the newest round asked for (the current
 * round): frames of older rounds are stale ("old round") and are dropped on arrival or
 * purged, and frames more than ahead_rounds beyond it ("future round") are refused on
 * arrival, so that whatever is filed is purged a few rounds later: no flood of frames
 * can hold the mailbox for good. Frames of a (kind, component) nobody has asked for yet
 * have no current round: they may take at most half of each cap, and once it is asked
 * for, the ones outside its window are purged.
 * Frames are opaque owners: the mailbox releases them through the release function
 * given at creation when it drops or purges them, and hands them back on take. */
#ifndef SL_MAILBOX_H
#define SL_MAILBOX_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_wire.h"

/* What happened to a frame given to sl_mailbox_file. */
typedef enum {
    SL_MAILBOX_FILED = 0,
    SL_MAILBOX_OLD_ROUND,   /* its round is older than the newest asked for: released */
    SL_MAILBOX_DUPLICATE,   /* a frame with the same key is already filed: released */
    SL_MAILBOX_FULL,        /* over the frame or byte cap (or no memory): released */
    SL_MAILBOX_FUTURE_ROUND /* more than ahead_rounds beyond the current round: released */
} sl_mailbox_verdict_t;

typedef struct sl_mailbox sl_mailbox_t;
typedef void (*sl_mailbox_release_fn)(void *owner);

/* How far beyond the current round of its (kind, component) a frame may be and still be
 * filed. Rounds of one (kind, component) advance by one or two per operation (gossip
 * blocks, ring steps, the two allgathers of a sparse exchange), and a peer runs ahead of
 * this node by a few operations at most: a gossip peer that is farther ahead loses only
 * that snapshot, as if it had not answered. */
#define SL_MAILBOX_AHEAD_ROUNDS 16u

/* max_frames and max_bytes (sum of the sizes given to sl_mailbox_file) bound what is
 * held; both > 0. ahead_rounds (>= 1): the window above. release frees one owner. */
sl_status_t sl_mailbox_new(sl_mailbox_t **out, size_t max_frames, uint64_t max_bytes,
                           uint64_t ahead_rounds, sl_mailbox_release_fn release);
/* Releases every held frame; accepts NULL and NULLs *mb. */
void sl_mailbox_destroy(sl_mailbox_t **mb);

/* Files owner (never NULL) under key; bytes counts against the cap. The mailbox takes
 * owner over in every case: on any verdict but SL_MAILBOX_FILED it is released now. */
sl_mailbox_verdict_t sl_mailbox_file(sl_mailbox_t *mb, const sl_wire_key_t *key, uint64_t bytes,
                                     void *owner);
/* Removes and returns the frame filed under key (the caller owns it), or NULL. */
void *sl_mailbox_take(sl_mailbox_t *mb, const sl_wire_key_t *key);
/* Records that round of (kind, component) is being asked for: from now on frames of
 * older rounds are stale, and frames beyond round + ahead_rounds refused. Releases the
 * filed ones that this puts out of the window and adds their number to *purged.
 * Rounds never go back: an older round than already recorded changes nothing. */
sl_status_t sl_mailbox_advance(sl_mailbox_t *mb, uint8_t kind, uint32_t component, uint64_t round,
                               size_t *purged);
/* 1 when a frame of (kind, component, round) would be stale, else 0. */
int sl_mailbox_is_old(const sl_mailbox_t *mb, uint8_t kind, uint32_t component, uint64_t round);
/* 1 and *round = the current round of (kind, component) once it has been asked for,
 * else 0. */
int sl_mailbox_current(const sl_mailbox_t *mb, uint8_t kind, uint32_t component, uint64_t *round);
size_t sl_mailbox_frames(const sl_mailbox_t *mb);
uint64_t sl_mailbox_bytes(const sl_mailbox_t *mb);

#endif
