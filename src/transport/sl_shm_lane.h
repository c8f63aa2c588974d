/* Shared-memory lanes: the frames one node sends to another on the same machine,
 * written into memory both processes map, so a large payload crosses once instead of
 * going through two kernel copies of a socket, and no thread of ZeroMQ's has to wake
 * for it.
 *
 * A lane belongs to one (sender, receiver) pair. The sender creates it as a sealed
 * memfd (it can never shrink, so a mapping never faults past its end), made of a head
 * page and nslots slots of slot_bytes; each slot holds one whole wire frame, header
 * and payload. Slot states live in the head, one cache line each: FREE (the sender may
 * write), FULL (published, not yet taken), TAKEN (the receiver holds it until it
 * releases it). The sender takes the lowest free slot, so only as many slots are ever
 * touched (and take memory) as frames were in flight at once; the rest of the memfd
 * stays a hole.
 *
 * The head also holds the doorbell: a count of publications, which the receiver polls
 * to find new frames without a system call, and a flag the receiver raises before it
 * blocks; a sender that publishes while it is raised wakes the receiver with a small
 * ZeroMQ frame. Flag and count are sequentially consistent on both sides, so either
 * the receiver sees the frame before it blocks or the sender sees the flag.
 *
 * The receiver reaches the lane through /proc/<pid>/fd/<fd>, which an offer names and
 * a forged offer could point at anything (a FIFO, a device, a file of ours). So it
 * opens nothing before it has identified the object there: the machine (boot id) and
 * the network namespace (below), the memfd's name, which carries the run id, sender
 * and receiver and which the receiver derives itself, read with readlink; then, held
 * by an O_PATH descriptor (which opens nothing), that name again, a regular unlinked
 * file of this user's and the lane's exact size. Only then is it opened and mapped,
 * and the seals and the head's magic, nonce, run, ranks and sizes checked before any
 * use. Nothing in a lane is trusted: the
 * receiver validates every frame it reads like one from a socket, except that the
 * checksum of these local frames covers the header only (sl_wire.h).
 *
 * A lane needs the same network namespace, not only the same boot id: processes in
 * other network namespaces of one kernel could still open each other's memfds (one
 * PID namespace), but they stand for other hosts (containers, tests/net/netlab's
 * emulated hosts), whose frames must go over the network as real hosts' do. */
#ifndef SL_SHM_LANE_H
#define SL_SHM_LANE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"

#define SL_SHM_MAX_SLOTS 32u
/* A slot holds at most one frame of the largest payload (SL_WIRE_MAX_PAYLOAD) and its
 * header, in whole pages. */
#define SL_SHM_MAX_SLOT_BYTES (((uint64_t)1 << 30) + 4096u)
/* Bytes of an offer's payload: what the receiver needs to find and check the lane. */
#define SL_SHM_OFFER_BYTES 48u

typedef struct sl_shm_lane sl_shm_lane_t;

/* What a sender tells a receiver about its lane (sent as SL_SHM_OFFER_BYTES bytes). */
typedef struct {
    uint64_t boot_id; /* hash of the sender's /proc/sys/kernel/random/boot_id */
    uint64_t nonce;   /* also in the lane's head */
    uint64_t run_id;
    uint64_t slot_bytes;
    uint32_t pid;
    int32_t fd;
    uint32_t nslots;
    uint32_t netns; /* the sender's network namespace (sl_shm_netns) */
} sl_shm_offer_t;

void sl_shm_offer_encode(const sl_shm_offer_t *o, unsigned char out[SL_SHM_OFFER_BYTES]);
void sl_shm_offer_decode(const unsigned char in[SL_SHM_OFFER_BYTES], sl_shm_offer_t *o);

/* Hash of this machine's boot id; SL_ERR_IO when it cannot be read (no lanes then). */
sl_status_t sl_shm_boot_id(uint64_t *out);
/* This process's network namespace: the inode number of /proc/self/ns/net (the kernel
 * numbers namespaces in 32 bits); SL_ERR_IO when it cannot be read (no lanes then). */
sl_status_t sl_shm_netns(uint32_t *out);

/* Creates the sender's lane for (run_id, sender -> receiver) and fills *offer.
 * slot_bytes is rounded up to whole pages. SL_ERR_INVALID for sizes out of bounds,
 * SL_ERR_IO when the memfd cannot be made or mapped. */
sl_status_t sl_shm_lane_create(sl_shm_lane_t **out, uint64_t run_id, uint32_t sender,
                               uint32_t receiver, uint32_t nslots, uint64_t slot_bytes,
                               sl_shm_offer_t *offer);
/* Maps a peer's lane from its offer, as receiver `me` of frames from `sender`.
 * SL_ERR_UNSUPPORTED when the offer comes from another machine or another network
 * namespace (no lane possible); SL_ERR_INVALID with the reason when it is not for this
 * run or this pair, or names something that is not that lane (then nothing was opened
 * but an O_PATH descriptor, closed again); SL_ERR_IO when what it names cannot be
 * reached or mapped. */
sl_status_t sl_shm_lane_open(sl_shm_lane_t **out, const sl_shm_offer_t *offer, uint64_t run_id,
                             uint32_t sender, uint32_t me);
/* Unmaps (and for the sender closes); accepts NULL, NULLs *lane. */
void sl_shm_lane_destroy(sl_shm_lane_t **lane);

uint64_t sl_shm_lane_slot_bytes(const sl_shm_lane_t *lane);
uint64_t sl_shm_lane_nonce(const sl_shm_lane_t *lane);

/* Sender: the lowest FREE slot and its memory, or -1 when none is. */
int sl_shm_lane_acquire(sl_shm_lane_t *lane, unsigned char **mem);
/* Sender: the slot is written; it is the receiver's now. Returns 1 when the receiver
 * said it is blocking (sl_shm_lane_sleep) and must be woken, else 0. */
int sl_shm_lane_publish(sl_shm_lane_t *lane, int slot);
/* Receiver: takes a published slot (FULL -> TAKEN) and points *mem at it; -1 when
 * there is none. *seen is the caller's count of publications already looked for (0 at
 * first): when nothing was published since, this costs one atomic load. */
int sl_shm_lane_take(sl_shm_lane_t *lane, uint64_t *seen, const unsigned char **mem);
/* Receiver: whether anything was published since *seen's count (sl_shm_lane_take). */
int sl_shm_lane_pending(const sl_shm_lane_t *lane, uint64_t seen);
/* Receiver: 1 before blocking (then look once more with sl_shm_lane_pending), 0 after. */
void sl_shm_lane_sleep(sl_shm_lane_t *lane, int on);
/* Receiver: the taken slot is FREE again; out-of-range slots are ignored. */
void sl_shm_lane_release(sl_shm_lane_t *lane, uint32_t slot);

#endif
