/* The cross-key checks of the quantized exchange (sync.compression int8 | int4,
 * sync.quant_block, sync.rounding, sync.topk): which algorithms and exchanges may carry
 * quantized deltas. Called by sl_config_validate; separate so that the rules of one
 * feature sit in one place. */
#ifndef SL_CONFIG_QUANT_H
#define SL_CONFIG_QUANT_H

#include "common/sl_status.h"
#include "config/sl_config.h"

/* Whether c is int8 or int4 (a block-quantized delta, not an element encoding). */
int sl_compress_is_quant(sl_compress_t c);

/* SL_ERR_CONFIG ("SRC: 'sync.compression' is int8, but ...") when cfg asks for int8 /
 * int4 where the values exchanged are not per-node deltas that this node alone feeds
 * back into (allreduce, ma and bmuf: a ring allreduce re-encodes partial sums at every
 * hop; sync.exchange unique or allgather: the row exchanges send raw weights), or for
 * sync.topk without int8 / int4. src names the config in the message. */
sl_status_t sl_config_check_quant(const sl_config_t *cfg, const char *src);

#endif
