/* Collectives over the transport: allreduce (sum) and allgather with per-node sizes,
 * around the ring or by halving and doubling, chain broadcast and dissemination
 * barrier (the gossip exchange is sl_gossip.h's). Every node of the run (or of the
 * group, sl_group_t) calls the same collective with the same component, round, sizes
 * and options; rounds of one (collective, component) must increase from call to call
 * (sl_transport.h: older rounds are stale), except that a group of another epoch may
 * redo a round.
 *
 * Buffers are lent to ZeroMQ while a collective runs and given back before it returns
 * SL_OK. After an error they may still be queued to a dead peer: the caller must then
 * leave them alone until sl_transport_destroy, or until sl_transport_forget of the dead
 * peers and sl_transport_wait_sent have given them back (src/sync/sl_members.c does,
 * before a collective is redone over the survivors). */
#ifndef SL_COLLECTIVE_H
#define SL_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_transport.h"

/* How a collective's floats travel when they are compressed (sync.compression): as
 * frames of encoding (sl_wire_encoding_t), n values taking n elements of
 * sl_wire_element_bytes(encoding) bytes. scale picks the header's scale for n floats x;
 * encode writes them with that scale at dst; decode reads a received payload (bytes
 * bytes, its header's scale) back into n floats x, and its error status (a bad frame)
 * fails the collective. ctx is passed back. The sync layer fills it from
 * src/embed/sl_compress.h; the transport knows no encoding itself. Sums stay fp32: a
 * node decodes what it receives and adds in fp32. A value that is passed on unchanged
 * (the allgather half of a ring, a broadcast chain) is re-encoded with the scale it
 * arrived with, so every node decodes the same bits. */
typedef struct {
    unsigned encoding;
    float (*scale)(const void *ctx, const float *x, size_t n);
    void (*encode)(const void *ctx, float scale, const float *x, size_t n, void *dst);
    sl_status_t (*decode)(const void *ctx, float scale, const void *src, size_t bytes, float *x,
                          size_t n);
    const void *ctx;
} sl_codec_t;

/* Floats per frame of the ring collectives by default, at most: 1 MiB, so that a local
 * exchange through shared memory (sl_transport_opts_t) needs few frames and wake-ups;
 * large buffers still stream in several chunks per ring step. The allreduce splits
 * segments of 1 MiB and more into about 8 frames of at least 256 KiB. */
#define SL_COLLECTIVE_CHUNK_ELEMS 262144u

/* The nodes a collective runs over when not every rank of the transport does (a run
 * that dropped a node, src/sync/sl_members.h): ranks (n, increasing, this node among
 * them) form the ring in that order, and "node k" below means ranks[k] (segments,
 * allgather counts, the broadcast root are by position in ranks). epoch numbers the set:
 * a hash of (epoch, ranks) goes into the top SL_COLLECTIVE_TAG_BITS bits of every
 * frame's seq, so that frames of a collective begun under another set, or an attempt
 * of the same round that failed, never match (they are purged with their round). The
 * chunks of one collective must then be numbered below 2^(32 - SL_COLLECTIVE_TAG_BITS). */
typedef struct {
    const uint32_t *ranks; /* borrowed */
    uint32_t n;
    uint32_t epoch;
} sl_group_t;

#define SL_COLLECTIVE_TAG_BITS 12u

/* The seq tag of group g (0 for NULL: every rank, untagged). */
uint32_t sl_group_tag(const sl_group_t *g);

typedef struct {
    size_t chunk_elems;      /* floats per frame (0: the default, see above) */
    unsigned window;         /* frames a node sends ahead of what it receives (0: 8) */
    int timeout_ms;          /* a receive that waits longer fails (0: the transport's) */
    const sl_codec_t *codec; /* borrowed; NULL: fp32 frames, lent without a copy. With a
                                codec frames are encoded copies, and every node ends with
                                the decoded values (its own included), so results stay
                                identical on all nodes */
    const sl_group_t *group; /* borrowed; NULL: every rank of the transport */
} sl_collective_opts_t;

/* The floats per frame of sl_allreduce_sum's default for count floats on n nodes:
 * SL_COLLECTIVE_CHUNK_ELEMS while a ring step's segment is below it, else about an
 * eighth of the segment, at least 65,536 (the model of tools/sl_scale.h uses it too). */
size_t sl_allreduce_chunk(size_t count, uint32_t n);

/* Whether sl_allreduce_sum over n nodes halves and doubles (Rabenseifner's allreduce;
 * on n = 2^L m, m odd, with rings of m in the middle: 2 (L + m - 1) steps, 2 log2 n for
 * a power of two) rather than going round the ring (2 (n - 1) steps), with the same
 * bytes: where n is even, 4 or more, its frames are fp32 (coded: 0) and the transport
 * does not ask for the ring (ring: sl_transport_opts_t.allreduce_ring). sl_allgather
 * doubles on the same condition where its blocks' sizes allow. Every node of a
 * collective decides the same. */
int sl_allreduce_halves(uint32_t n, int coded, int ring);

/* buf (count floats, the same count on every node) becomes the sum over all nodes,
 * bit-identical on every node: reduce-scatter then allgather, around the ring
 * rank -> rank+1 or by halving and doubling (sl_allreduce_halves), each of the n
 * segments streamed in chunks. o may be NULL.
 * SL_ERR_TIMEOUT when a peer stops answering, SL_ERR_SHUTDOWN when one aborted,
 * SL_ERR_INVALID when the nodes disagree on sizes. */
sl_status_t sl_allreduce_sum(sl_transport_t *t, uint32_t component, uint64_t round, float *buf,
                             size_t count, const sl_collective_opts_t *o);

/* Whether sl_allgather of counts (n blocks) doubles (L + m - 1 steps on n = 2^L m, m
 * odd: log2 n for a power of two) rather than going round the ring (n - 1 steps):
 * where sl_allreduce_halves would halve, and no block is so much larger than the rest
 * that doubling, which sends it on several steps one after another, would lose more on
 * bytes than it gains on hand-overs. Blocks of one size always double. */
int sl_allgather_doubles(uint32_t n, const size_t *counts, int coded, int ring);

/* out (sum of counts floats) receives every node's block in rank order: node k's
 * counts[k] floats at offset counts[0] + ... + counts[k-1]. mine (counts[rank] floats)
 * may be that very place in out. counts may differ and be 0. By recursive doubling or
 * around the ring, as sl_allgather_doubles says. */
sl_status_t sl_allgather(sl_transport_t *t, uint32_t component, uint64_t round, const float *mine,
                         float *out, const size_t *counts, const sl_collective_opts_t *o);

/* buf (count floats) of root ends up on every node, passed down the chain
 * root -> root+1 -> ... in chunks. */
sl_status_t sl_broadcast(sl_transport_t *t, uint32_t component, uint64_t round, uint32_t root,
                         float *buf, size_t count, const sl_collective_opts_t *o);

/* Returns once every node has entered the barrier of this round (ceil(log2 n) stages,
 * stage k talks to rank +/- 2^k). timeout_ms per stage; <= 0: the transport's. Every
 * rank of the transport (no group). */
sl_status_t sl_barrier(sl_transport_t *t, uint64_t round, int timeout_ms);

#endif
