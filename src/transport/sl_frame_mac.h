/* Frame MACs: cluster.security: mac, authentication without encryption for trusted
 * fabrics, where CURVE's encryption costs too much bandwidth (bench/bench_security.sh).
 * Each node makes a fresh session key at start and hands it to the others through the
 * rendezvous, which runs over CURVE (so only the run's nodes learn it, and a key of an
 * earlier run is worth nothing). Every frame a node sends over ZeroMQ to rank r then
 * carries a trailer: a sequence number and a Poly1305 tag of the frame's bytes under a
 * one-time key drawn (ChaCha20) from the pair key BLAKE2b(key: session of the sender;
 * r, session of r) and that number. A receiver checks the tag with the claimed sender's
 * key before it reads anything else of the frame, and accepts only numbers above the
 * last it accepted from that sender: forged, altered and replayed frames are dropped.
 * A rank's process that comes back to the run has a fresh session key, which the others
 * install (sl_frame_mac_set_session): every pair key to and from that rank changes, so
 * frames of its dead process, and frames once sent to it, prove nothing any more. Owns
 * the keys and the counters; must not touch sockets. One thread at a time.
 *
 * Stripes (cluster.stripes: several connections to one peer, sl_link_zmq.c): frames on
 * different connections overtake each other, so the numbers are counted per stripe. A
 * trailer's number carries its stripe in the top byte (SL_MAC_STRIPE_SHIFT), under the
 * tag like the rest: a frame replayed on another connection is checked against the
 * counter of the stripe it was sealed for, and a frame older than one already accepted
 * on its stripe is refused as a replay. A receiver counts every stripe a sender may
 * use (SL_MAC_MAX_STRIPES), whatever it uses itself. */
#ifndef SL_FRAME_MAC_H
#define SL_FRAME_MAC_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"

#define SL_MAC_SESSION_BYTES 32
#define SL_MAC_TRAILER_BYTES 24 /* sequence number u64 le, tag 16 bytes */
#define SL_MAC_MAX_STRIPES 16   /* stripes a sender may number frames on */
#define SL_MAC_STRIPE_SHIFT 56  /* a sequence number: stripe << 56 | count on that stripe */

typedef struct sl_frame_mac sl_frame_mac_t;

/* For rank me of size, with a fresh random session key. SL_ERR_NOMEM,
 * SL_ERR_UNSUPPORTED (libsodium cannot start). */
sl_status_t sl_frame_mac_new(sl_frame_mac_t **out, uint32_t me, uint32_t size);
/* Accepts NULL, NULLs *m; wipes the keys. */
void sl_frame_mac_destroy(sl_frame_mac_t **m);

/* This node's session key, for the rendezvous (SL_MAC_SESSION_BYTES). */
const unsigned char *sl_frame_mac_session(const sl_frame_mac_t *m);
/* Every rank's session key, by rank (size x SL_MAC_SESSION_BYTES; copied into pair
 * keys). Before any seal or check. */
void sl_frame_mac_learn(sl_frame_mac_t *m, const unsigned char *sessions);
int sl_frame_mac_ready(const sl_frame_mac_t *m);
/* After sl_frame_mac_learn: rank's new session key (SL_MAC_SESSION_BYTES; a new process
 * for that rank, rank != me, < size): its pair keys change and the count of its frames
 * starts again. 1 when the key was new, 0 when it is the one already held (nothing
 * changes: a repeated key must not reopen the count to replays). */
int sl_frame_mac_set_session(sl_frame_mac_t *m, uint32_t rank, const unsigned char *session);

/* The trailer of a frame to peer on stripe (< SL_MAC_MAX_STRIPES; 0 without stripes)
 * made of head (head_len bytes) then payload. */
void sl_frame_mac_seal(sl_frame_mac_t *m, uint32_t peer, unsigned stripe, const void *head,
                       size_t head_len, const void *payload, size_t payload_len,
                       unsigned char trailer[SL_MAC_TRAILER_BYTES]);

typedef enum {
    SL_MAC_OK = 0,
    SL_MAC_BAD,   /* unknown sender, keys not learnt, the tag does not match, or a
                     stripe out of range */
    SL_MAC_REPLAY /* a good tag, but not above the last number accepted on its stripe */
} sl_mac_verdict_t;

/* Checks trailer against the frame (head, then payload) that claims to come from
 * sender; on SL_MAC_OK the sender's counter of the trailer's stripe moves on. */
sl_mac_verdict_t sl_frame_mac_check(sl_frame_mac_t *m, uint32_t sender, const void *head,
                                    size_t head_len, const void *payload, size_t payload_len,
                                    const unsigned char trailer[SL_MAC_TRAILER_BYTES]);

#endif
