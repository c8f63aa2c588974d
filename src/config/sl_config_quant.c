/* Which settings may carry quantized deltas (sl_config_quant.h). Must not parse keys:
 * sl_config_schema.c owns the schema. */
#include "config/sl_config_quant.h"

int
sl_compress_is_quant(sl_compress_t c)
{
    return c == SL_COMPRESS_INT8 || c == SL_COMPRESS_INT4;
}

sl_status_t
sl_config_check_quant(const sl_config_t *cfg, const char *src)
{
    sl_compress_t c = cfg->sync.compression;
    sl_sync_algorithm_t a = cfg->sync.algorithm;

    if (!sl_compress_is_quant(c)) {
        if (cfg->sync.topk > 0)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: 'sync.topk' is %g, but 'sync.compression' is %s: top-k "
                              "needs the int8 or int4 delta exchange",
                              src, cfg->sync.topk, sl_compress_name(c));
        return SL_OK;
    }
    /* why not the collectives: a ring allreduce adds partial sums on the way and would
     * re-quantize them at every hop, where no node's error feedback can reach */
    if (a == SL_SYNC_ALLREDUCE || a == SL_SYNC_MA || a == SL_SYNC_BMUF)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.compression' is %s, but 'sync.algorithm' %s sums over a "
                          "ring allreduce, which would re-quantize partial sums at every hop: "
                          "use int8 / int4 with gossip-* or local-*, or fp16 / bf16 here",
                          src, sl_compress_name(c), sl_sync_algorithm_name(a));
    if (cfg->sync.exchange != SL_EXCHANGE_DENSE)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.compression' is %s, but 'sync.exchange' %s sends the rows' "
                          "weights, not deltas: use sync.exchange dense, or fp16 / bf16",
                          src, sl_compress_name(c), sl_exchange_name(cfg->sync.exchange));
    return SL_OK;
}
