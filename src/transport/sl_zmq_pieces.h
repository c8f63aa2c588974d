/* Frames in pieces: how the ZeroMQ link (sl_link_zmq.c) splits one large frame over a
 * peer's stripes (cluster.stripes), so that one frame, not only a run of frames, is
 * carried by several connections and I/O threads at once, and how a receiver puts it
 * together again. Owns the split rule, the piece descriptor and the frames being put
 * together; must not touch sockets.
 *
 * A frame of a kind that takes the stripes (sl_transport_striped_kind: not a
 * collective's) and of payload P bytes goes in n = min(stripes, P / SL_PIECE_MIN_BYTES)
 * pieces when n >= 2 (else whole); a receiver takes the pieces of any kind. Piece j
 * holds bytes [j * L, min((j + 1) * L, P)) of the payload, L = P / n rounded up to 64
 * bytes. Each piece is one message: the frame's header (SL_WIRE_HEADER_BYTES, the same
 * in every piece) and a descriptor in its first part, the piece's bytes in the second
 * (then a MAC trailer with cluster.security: mac, sealed for the piece's stripe).
 * Descriptor (SL_PIECE_DESC_BYTES, little-endian):
 *    0 magic u32 (SL_PIECE_MAGIC)   4 piece j u16   6 pieces n u16   8 frame id u64
 * (the sender's count of frames in pieces to that receiver). Nothing of a piece is
 * trusted: the header is validated before its piece is kept (all but length and
 * checksum), the descriptor must name a piece the rule gives for that payload with the
 * piece's exact length, every piece of a frame must carry the same header, and the whole
 * frame is validated again, checksum included, once its last piece is in. The checksum
 * is computed in the pass that copies the pieces into place, a block of each at a time
 * while it is in the cache (sl_hash_bulk_add_copy): the frame's payload is read once. */
#ifndef SL_ZMQ_PIECES_H
#define SL_ZMQ_PIECES_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_wire.h"

#define SL_PIECE_MAGIC 0x43504c53u /* "SLPC" read as little-endian bytes */
#define SL_PIECE_DESC_BYTES 16u
/* The smallest piece: a frame is split only into pieces of at least this many bytes. */
#define SL_PIECE_MIN_BYTES 65536u
/* The most pieces of one frame (the most stripes). */
#define SL_PIECE_MAX 16u

/* The pieces a payload of payload_bytes goes in over stripes stripes: 1 (whole) or
 * 2..min(stripes, SL_PIECE_MAX). */
unsigned sl_pieces_count(uint64_t payload_bytes, unsigned stripes);
/* Where piece j of n of a payload of payload_bytes starts, and its length. */
void sl_pieces_span(uint64_t payload_bytes, unsigned n, unsigned j, uint64_t *offset,
                    uint64_t *len);
/* The descriptor of piece j of n of frame id. */
void sl_pieces_desc(unsigned char out[SL_PIECE_DESC_BYTES], uint64_t id, unsigned j, unsigned n);

typedef struct sl_pieces sl_pieces_t;

/* Frames being put together, for a node of a run of size ranks: at most max_frames of
 * them holding at most max_bytes of payload in all (the mailbox's caps: pieces of frames
 * never finished, from a peer that died or lies, cannot take more); hash: compute each
 * payload's checksum hash as it is copied (0: frames whose checksum covers the header
 * only, sl_wire.h's local frames). SL_ERR_NOMEM. */
sl_status_t sl_pieces_new(sl_pieces_t **out, uint32_t size, size_t max_frames, uint64_t max_bytes,
                          int hash);
/* Frees every frame held; accepts NULL, NULLs *p. */
void sl_pieces_destroy(sl_pieces_t **p);

/* What sl_pieces_take did with a piece. */
typedef enum {
    SL_PIECES_HELD = 0, /* kept: its frame waits for more pieces */
    SL_PIECES_WHOLE,    /* the frame's last piece: *whole is its payload */
    SL_PIECES_BAD,      /* a descriptor that does not fit the rule or the frame, a header
                           unlike the frame's other pieces', a piece twice: dropped */
    SL_PIECES_FULL      /* over the caps: dropped */
} sl_pieces_verdict_t;

/* Takes a piece from sender (< size, proven or as far as the link can tell): head
 * (SL_WIRE_HEADER_BYTES, already validated by sl_wire_decode_head as h), desc
 * (SL_PIECE_DESC_BYTES), then len bytes at data (copied). On SL_PIECES_WHOLE *whole is
 * the frame's payload (h->payload_bytes, malloc'd: the caller frees it), *hash its
 * sl_hash_bulk under sl_wire_checksum_seed(head) (0 unless hashing) for
 * sl_wire_decode_hashed, and the frame is no longer held; *whole is NULL otherwise. */
sl_pieces_verdict_t sl_pieces_take(sl_pieces_t *p, uint32_t sender, const unsigned char *head,
                                   const sl_wire_header_t *h, const unsigned char *desc,
                                   const void *data, size_t len, void **whole, uint64_t *hash);
/* Drops every frame held from sender (a process that is gone or new). */
void sl_pieces_forget(sl_pieces_t *p, uint32_t sender);
/* Frames held. */
size_t sl_pieces_held(const sl_pieces_t *p);

#endif
