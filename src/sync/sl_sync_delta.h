/* The quantized delta exchange of the neighbourhood algorithms (gossip-*, local-* with
 * sync.compression int8 | int4): a node sends each puller the change of a component
 * since the last value that puller rebuilt of it, quantized (src/embed/sl_quant.h), and
 * rebuilds each chosen neighbour's weights from its own copy of them plus the change.
 *
 * Why per link and not against the block start: in gossip every node's block start is
 * its own last average, which no other node holds, so a delta against it cannot be
 * undone by the receiver. What both ends of a link do hold is what the receiver rebuilt
 * of the sender, so each node keeps, per neighbour, two mirrors: out[j] = what neighbour
 * j holds of this node, in[j] = what this node holds of j (the CHOCO-gossip scheme of
 * Koloskova et al., 2019, kept per link because a gossip round reaches only the pullers).
 * The sender encodes theta - out[j], then adds what it encoded to out[j] by the
 * receiver's own decoder, so both mirrors keep the same bits; what quantization or top-k
 * dropped stays in theta - out[j] and goes with the next message on that link: error
 * feedback, per component and link. Each message names the round of the push it is a
 * change against (its base); a receiver whose mirror is of another round (a push it
 * missed, a restart) leaves the message out of its average, and every
 * SL_SYNC_DELTA_KEYFRAME_PUSHES-th push on a link (the first one included, so also after
 * a resume or a rejoin, and the first to a neighbour's new process, known by its hello)
 * carries the weights themselves in fp32, after which both mirrors agree again, bit for
 * bit. Not quantized: a keyframe in int4 rounds whole weights (not a change) by some
 * percent of them, and that error would go into the puller's average of that round. The
 * mirrors are not checkpointed for that reason.
 *
 * Memory: two copies of the model per link (2 x min(2k, n-1) x nparams floats).
 * One per node, owned by the averaging (sl_sync_average.c); not thread-safe. */
#ifndef SL_SYNC_DELTA_H
#define SL_SYNC_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "sync/sl_sync_common.h"

/* Pushes per link from one keyframe (the weights in fp32) to the next. */
#define SL_SYNC_DELTA_KEYFRAME_PUSHES 16u

typedef struct sl_sync_delta sl_sync_delta_t;

/* For env (a neighbourhood algorithm with a transport) on the k-symmetric ring of degree
 * k, its largest dense component max_count floats; the quantizer from cfg->sync, the
 * stochastic rounding keyed by cfg->run.seed. SL_ERR_INVALID, SL_ERR_NOMEM. */
sl_status_t sl_sync_delta_new(sl_sync_delta_t **out, const sl_sync_env_t *env,
                              const sl_config_t *cfg, int k, size_t max_count);
/* Frees; accepts NULL, NULLs *d. */
void sl_sync_delta_destroy(sl_sync_delta_t **d);

/* The exchange of component c at round, as sl_gossip_exchange_coded's (the same lists,
 * the same SL_OK / SL_ERR_TIMEOUT / fatal codes): theta (count floats) goes to the
 * pullers as deltas; the chosen neighbours' rebuilt weights land in recv (nchosen,
 * count) row by row, from[i] the sender of row i, *got rows. A message that does not
 * parse, is not this node's encoding, or whose base is not the round this node's mirror
 * holds, is left out (the sender is not blamed for the last). Every rank in the lists
 * must be a ring neighbour (SL_ERR_INVALID). */
sl_status_t sl_sync_delta_exchange(sl_sync_delta_t *d, int c, uint64_t round, const float *theta,
                                   const uint32_t *pullers, size_t npullers, const uint32_t *chosen,
                                   size_t nchosen, float *recv, uint32_t *from, size_t *got);

#endif
