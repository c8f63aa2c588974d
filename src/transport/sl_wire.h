/* Wire format of every shoal frame: a fixed 64-byte little-endian header, encoded and
 * decoded field by field, then the payload. Decoding validates every field and says
 * which check failed, so a bad frame is dropped and counted, never trusted.
 *
 * Header layout (offsets in bytes, all little-endian):
 *    0 magic u32 (SL_WIRE_MAGIC)     4 version u16       6 kind u8     7 encoding u8
 *    8 run_id u64                   16 sender u32       20 receiver u32
 *   24 component u32                28 seq u32          32 round u64
 *   40 count u32 (elements)         44 scale f32        48 payload_bytes u64
 *   56 checksum u64 = sl_hash_bulk(payload, seed = sl_hash_bytes(header bytes 0..55,
 *                     seed SL_WIRE_MAGIC)); of the header only in a local frame
 * Payload elements are little-endian too: fp32 payloads are host floats, and sl_wire.c
 * refuses to compile on a big-endian host. */
#ifndef SL_WIRE_H
#define SL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"

#define SL_WIRE_MAGIC 0x4c4f4853u /* "SHOL" read as little-endian bytes */
#define SL_WIRE_VERSION 3u        /* 2: payloads hashed with sl_hash_bulk; 3: lane doorbells */
#define SL_WIRE_HEADER_BYTES 64u
#define SL_WIRE_CHECKSUM_OFFSET 56u
/* Largest payload of one frame; collectives chunk larger buffers. */
#define SL_WIRE_MAX_PAYLOAD ((uint64_t)1 << 30)
/* Largest payload of an abort frame (a reason string). */
#define SL_WIRE_MAX_ABORT 1024u
/* Payload of a shared-memory offer: what the receiver needs to find and check the lane
 * (sl_shm_offer_encode writes it). */
#define SL_WIRE_SHM_OFFER_BYTES 48u

/* What a frame is for. Values are part of the protocol: never renumber. */
typedef enum {
    SL_WIRE_DATA = 1,            /* point-to-point data (sl_transport_send by hand) */
    SL_WIRE_GOSSIP_SNAPSHOT = 2, /* one component's parameters pushed to a puller */
    SL_WIRE_GOSSIP_REQUEST = 3,  /* ask a peer for its snapshot (pull mode; no payload) */
    SL_WIRE_ALLREDUCE = 4,       /* ring allreduce chunk; seq = step * chunks + chunk */
    SL_WIRE_ALLGATHER = 5,       /* ring allgather chunk; seq as above */
    SL_WIRE_BROADCAST = 6,       /* chain broadcast chunk; seq = chunk */
    SL_WIRE_BARRIER = 7,         /* dissemination barrier; seq = stage; no payload */
    SL_WIRE_ABORT = 8,           /* sender is stopping; payload = reason (bytes) */
    SL_WIRE_HEARTBEAT = 9,       /* application-level liveness; no payload */
    SL_WIRE_SPARSE_INDEX = 10,   /* sparse exchange: row ids, int32 as bytes; seq 0 = a
                                    puller's row set, seq 1 = the answerer's extra rows */
    SL_WIRE_SPARSE_VALUES = 11,  /* sparse exchange: values of the union rows (rows, len) */
    SL_WIRE_SHM_OFFER = 12,      /* the sender's shared-memory lane (sl_link_shm.c), bytes */
    SL_WIRE_SHM_ACCEPT = 13,     /* the receiver mapped it; payload = the lane's nonce */
    SL_WIRE_SHM_WAKE = 14,       /* a frame waits in the sender's lane and the receiver
                                    said it blocks: wake up; no payload */
    SL_WIRE_HELLO = 15,          /* the sender is a new process for its rank, come back to
                                    a running job; payload = its endpoint (bytes) */
    SL_WIRE_STATE_REQUEST = 16,  /* a node come back asks for the live state; no payload */
    SL_WIRE_STATE = 17           /* the answer (node/sl_rejoin.h): seq 0 the step and
                                    sizes (bytes), 1 the parameters, 2 the sync state */
} sl_wire_kind_t;
#define SL_WIRE_NKINDS 18 /* kinds are 1 .. SL_WIRE_NKINDS - 1 */
/* Largest payload of a hello frame (an endpoint). */
#define SL_WIRE_MAX_HELLO 256u

/* How payload elements are stored. fp16/bf16 carry values multiplied by scale before
 * the down-cast (compression scaling); fp32 and bytes use scale 1. int8 and int4 are
 * block-quantized values with their own layout (transport/sl_wire_quant.h): count is
 * the payload's bytes, scale 1, gossip snapshots only. */
typedef enum {
    SL_WIRE_FP32 = 1,
    SL_WIRE_FP16 = 2,
    SL_WIRE_BF16 = 3,
    SL_WIRE_BYTES = 4,
    SL_WIRE_INT8 = 5,
    SL_WIRE_INT4 = 6
} sl_wire_encoding_t;
#define SL_WIRE_NENCODINGS 7 /* encodings are 1 .. SL_WIRE_NENCODINGS - 1 */

/* Why sl_wire_decode refused a frame; one code per check, in the order checked. */
typedef enum {
    SL_WIRE_OK = 0,
    SL_WIRE_TRUNCATED, /* fewer bytes than a header */
    SL_WIRE_BAD_MAGIC,
    SL_WIRE_BAD_VERSION,
    SL_WIRE_BAD_RUN,      /* run id is not ours: a frame from another run */
    SL_WIRE_BAD_SENDER,   /* sender >= nranks or sender == me */
    SL_WIRE_BAD_RECEIVER, /* receiver != me */
    SL_WIRE_BAD_KIND,
    SL_WIRE_BAD_ENCODING, /* unknown, or not allowed for the kind */
    SL_WIRE_BAD_SCALE,    /* not finite and > 0, or != 1 for fp32/bytes */
    SL_WIRE_TOO_LARGE,    /* payload_bytes over the cap of the kind */
    SL_WIRE_BAD_COUNT,    /* count * element size != payload_bytes */
    SL_WIRE_BAD_LENGTH,   /* payload_bytes != the bytes that actually follow */
    SL_WIRE_BAD_CHECKSUM,
    SL_WIRE_NREASONS
} sl_wire_reason_t;

/* A decoded header. magic, version and checksum are checked, not stored. */
typedef struct {
    uint64_t run_id;
    uint64_t round; /* the operation's round (sync block index, step, ...) */
    uint64_t payload_bytes;
    uint32_t sender, receiver;
    uint32_t component;
    uint32_t seq;   /* position within the operation (chunk, stage) */
    uint32_t count; /* elements in the payload */
    float scale;
    uint8_t kind;     /* sl_wire_kind_t */
    uint8_t encoding; /* sl_wire_encoding_t */
} sl_wire_header_t;

/* What a receiver asks for: one frame is identified by these header fields. */
typedef struct {
    uint64_t round;
    uint32_t component;
    uint32_t seq;
    uint32_t peer; /* the sender (for a send: the receiver) */
    uint8_t kind;  /* sl_wire_kind_t */
} sl_wire_key_t;

/* The key of a received frame (peer = its sender). */
sl_wire_key_t sl_wire_key_of(const sl_wire_header_t *h);
/* The header of a frame of run run_id from sender with key (key->peer = the receiver):
 * count elements of encoding (payload_bytes follows from them), scale as in the header.
 * Not validated: sl_wire_encode does that. */
sl_wire_header_t sl_wire_header_for(uint64_t run_id, uint32_t sender, const sl_wire_key_t *key,
                                    uint32_t count, unsigned encoding, float scale);

/* Bytes per element of an encoding; 0 when unknown. */
size_t sl_wire_element_bytes(unsigned encoding);
/* Short names for logs: "allreduce", "fp32", "bad checksum". Never NULL. */
const char *sl_wire_kind_name(unsigned kind);
const char *sl_wire_encoding_name(unsigned encoding);
const char *sl_wire_reason_name(unsigned reason);

/* Checksum of a frame: the first SL_WIRE_CHECKSUM_OFFSET bytes of head, then payload:
 * sl_hash_bulk(payload, payload_bytes, sl_wire_checksum_seed(head)). */
uint64_t sl_wire_checksum(const unsigned char *head, const void *payload, size_t payload_bytes);
uint64_t sl_wire_checksum_seed(const unsigned char *head);

/* Writes the header for h and payload (h->payload_bytes bytes, may be NULL when 0)
 * into out, checksum included. SL_ERR_INVALID when h would not pass sl_wire_decode
 * (unknown kind or encoding, count/size mismatch, size over the cap, bad scale). */
sl_status_t sl_wire_encode(const sl_wire_header_t *h, const void *payload,
                           unsigned char out[SL_WIRE_HEADER_BYTES]);

/* Puts checksum into a header that sl_wire_encode_head wrote: for a sender that hashes
 * the payload as it copies it, checksum = sl_hash_bulk(payload, payload_bytes,
 * sl_wire_checksum_seed(head)), the value sl_wire_encode would have put there. */
void sl_wire_set_checksum(unsigned char head[SL_WIRE_HEADER_BYTES], uint64_t checksum);

/* Local frames, the frames in a shared-memory lane (sl_shm_lane.h), hash their header
 * only: their checksum is sl_wire_checksum(head, NULL, 0). Nothing corrupts bytes
 * between two mappings of one page, and a peer that scribbled over a slot could do so
 * after any check, so hashing the payload would cost a pass over it on each side and
 * prove nothing. Every header field is still validated, and a reader goes no further
 * than the validated length. A local frame with a payload never passes sl_wire_decode:
 * one cannot be taken for the other. Frames that carry a MAC over header and payload
 * (sl_frame_mac.h) are local frames too, as are those over CURVE connections
 * (sl_curve.h), each of whose messages ZeroMQ authenticates (Poly1305) as it decrypts
 * it: either proves more than a checksum would. */

/* The header of a local frame (its checksum over the header only), payload apart.
 * SL_ERR_INVALID as for sl_wire_encode. */
sl_status_t sl_wire_encode_head(const sl_wire_header_t *h, unsigned char out[SL_WIRE_HEADER_BYTES]);

/* The whole local frame, header then payload, into out (SL_WIRE_HEADER_BYTES +
 * h->payload_bytes). SL_ERR_INVALID as for sl_wire_encode. */
sl_status_t sl_wire_encode_local(const sl_wire_header_t *h, const void *payload,
                                 unsigned char *out);
/* sl_wire_decode and sl_wire_decode_parts for a local frame. */
sl_wire_reason_t sl_wire_decode_local(const void *buf, size_t len, uint64_t run_id, uint32_t me,
                                      uint32_t nranks, sl_wire_header_t *h, const void **payload);
sl_wire_reason_t sl_wire_decode_parts_local(const void *head, size_t head_len, const void *payload,
                                            size_t payload_len, uint64_t run_id, uint32_t me,
                                            uint32_t nranks, sl_wire_header_t *h);

/* The checks of sl_wire_decode_parts that need the header alone (SL_WIRE_HEADER_BYTES at
 * head): all but the length of the payload and the checksum, which a frame that comes
 * in pieces (sl_zmq_pieces.h) can pass only once it is whole. */
sl_wire_reason_t sl_wire_decode_head(const void *head, uint64_t run_id, uint32_t me,
                                     uint32_t nranks, sl_wire_header_t *h);
/* sl_wire_decode_parts for a header (SL_WIRE_HEADER_BYTES at head) and a payload of
 * payload_len bytes hashed already, payload_hash = sl_hash_bulk(payload, payload_len,
 * sl_wire_checksum_seed(head)): piece by piece, as each was copied (sl_zmq_pieces.h). */
sl_wire_reason_t sl_wire_decode_hashed(const void *head, uint64_t payload_len,
                                       uint64_t payload_hash, uint64_t run_id, uint32_t me,
                                       uint32_t nranks, sl_wire_header_t *h);

/* Validates a contiguous frame (header then payload, len bytes) for the node of rank
 * me in a run of nranks nodes with the given run id. On SL_WIRE_OK fills *h and points
 * *payload into buf (unaligned: read it with memcpy); otherwise leaves them undefined. */
sl_wire_reason_t sl_wire_decode(const void *buf, size_t len, uint64_t run_id, uint32_t me,
                                uint32_t nranks, sl_wire_header_t *h, const void **payload);
/* The same for a frame sent as two parts: header (head_len bytes, must be exactly a
 * header) and payload (payload_len bytes). */
sl_wire_reason_t sl_wire_decode_parts(const void *head, size_t head_len, const void *payload,
                                      size_t payload_len, uint64_t run_id, uint32_t me,
                                      uint32_t nranks, sl_wire_header_t *h);

#endif
