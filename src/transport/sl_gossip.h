/* The gossip exchange of one component: every node pushes its snapshot to the nodes
 * that pull from it and collects those of the nodes it chose (the schedule is the
 * caller's, src/topology). Snapshots travel copied, never lent, so a push to a dead
 * peer holds nothing of the caller's; what arrives is checked before it is used. */
#ifndef SL_GOSSIP_H
#define SL_GOSSIP_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"

/* 1 when none of the n floats at x is NaN or infinite (x need not be aligned). */
int sl_floats_finite(const float *x, size_t n);
/* Copies n floats from src (unaligned little-endian bytes) to dst, checking them on the
 * way: the same answer as sl_floats_finite, in one pass over the bytes. */
int sl_floats_copy_finite(float *restrict dst, const void *restrict src, size_t n);

/* One component's gossip exchange. Pushes mine (count floats) to every node in pullers
 * (the nodes that will pull from this one), then collects the snapshots of the nodes in
 * chosen (the ones this node pulls from), waiting at most timeout_ms in all. Snapshots
 * are stored in arrival order: recv (nchosen, count) row i comes from rank from[i]
 * (from may be NULL); *got rows are filled. The schedule (who chooses whom) is the
 * caller's; the lists hold distinct ranks other than this one. A snapshot of another
 * size or encoding, or with a NaN or an infinity, is refused (sl_transport_refuse:
 * counted, logged once) and its sender left out, as if it had not answered.
 * SL_OK when every chosen node answered; SL_ERR_TIMEOUT, not fatal, when only *got did
 * (average over those); a push that cannot be queued is skipped and logged (its puller
 * will miss it). Other codes are fatal. */
sl_status_t sl_gossip_exchange(sl_transport_t *t, uint32_t component, uint64_t round,
                               const float *mine, size_t count, const uint32_t *pullers,
                               size_t npullers, const uint32_t *chosen, size_t nchosen, float *recv,
                               uint32_t *from, size_t *got, int timeout_ms);
/* A peer's snapshot f (count values of encoding enc, decoded by codec; NULL: fp32) into
 * dst (count floats). A snapshot this node cannot use (another size or encoding, one
 * that does not decode, non-finite values) would stop or poison the run if taken: it is
 * refused (f released; counted as a bad size or not finite) and SL_ERR_INVALID returned,
 * for the caller to leave its sender out; on SL_OK f is still the caller's. */
sl_status_t sl_gossip_take_snapshot(sl_transport_t *t, sl_transport_frame_t *f,
                                    const sl_codec_t *codec, unsigned enc, float *dst,
                                    size_t count);
/* The same with the snapshots encoded by codec (borrowed; NULL: fp32): mine is encoded
 * once, the snapshots received are decoded into recv. A snapshot that does not decode
 * is refused as above. */
sl_status_t sl_gossip_exchange_coded(sl_transport_t *t, uint32_t component, uint64_t round,
                                     const float *mine, size_t count, const sl_codec_t *codec,
                                     const uint32_t *pullers, size_t npullers,
                                     const uint32_t *chosen, size_t nchosen, float *recv,
                                     uint32_t *from, size_t *got, int timeout_ms);

#endif
