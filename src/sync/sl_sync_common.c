/* The helpers every sync file shares (sl_sync_common.h): algorithm kinds, which
 * components go by rows, the compression codec, byte counters, a collective's failure.
 * Must not hold state of its own nor touch the transport beyond reading its counters. */
#include "sync/sl_sync_common.h"

#include <string.h>

#include "config/sl_config_quant.h"
#include "embed/sl_compress.h"

int
sl_sync_is_bmuf(sl_sync_algorithm_t a)
{
    return a == SL_SYNC_BMUF || a == SL_SYNC_LOCAL_BMUF || a == SL_SYNC_GOSSIP_BMUF;
}

int
sl_sync_is_neighbourhood(sl_sync_algorithm_t a)
{
    return a == SL_SYNC_LOCAL_MA || a == SL_SYNC_LOCAL_BMUF || a == SL_SYNC_GOSSIP_MA ||
           a == SL_SYNC_GOSSIP_BMUF;
}

int
sl_sync_by_rows(const sl_component_t *c, sl_exchange_t exchange)
{
    return c->sparse && exchange != SL_EXCHANGE_DENSE;
}

static float
codec_scale(const void *ctx, const float *x, size_t n)
{
    const sl_sync_codec_t *k = ctx;
    return sl_compress_scale(k->compress, k->scale, x, n);
}

static void
codec_encode(const void *ctx, float scale, const float *x, size_t n, void *dst)
{
    const sl_sync_codec_t *k = ctx;
    sl_compress_encode(k->compress, scale, x, n, dst);
}

static sl_status_t
codec_decode(const void *ctx, float scale, const void *src, size_t bytes, float *x, size_t n)
{
    const sl_sync_codec_t *k = ctx;
    return sl_compress_decode(k->compress, scale, src, bytes, x, n);
}

const sl_codec_t *
sl_sync_codec_init(sl_sync_codec_t *k, const sl_config_t *cfg)
{
    k->compress = cfg->sync.compression;
    k->scale = cfg->sync.compression_scale;
    /* int8 / int4 travel only as the deltas of sl_sync_delta.h, never through a
     * collective's codec: the final average and the rest stay fp32 */
    if (k->compress == SL_COMPRESS_FP32 || sl_compress_is_quant(k->compress))
        return NULL;
    k->codec = (sl_codec_t){(unsigned)sl_compress_wire_encoding(k->compress), codec_scale,
                            codec_encode, codec_decode, k};
    return &k->codec;
}

void
sl_sync_fill_bytes(sl_sync_stat_t *stat, const sl_transport_t *tr, uint32_t c)
{
    static const unsigned kinds[] = {SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_SPARSE_INDEX,
                                     SL_WIRE_SPARSE_VALUES, SL_WIRE_ALLGATHER, SL_WIRE_ALLREDUCE};

    stat->sent_bytes = stat->recv_bytes = 0;
    memset(stat->sent_enc_bytes, 0, sizeof stat->sent_enc_bytes);
    memset(stat->recv_enc_bytes, 0, sizeof stat->recv_enc_bytes);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sl_transport_stat_t ts;
        sl_transport_stat(tr, kinds[k], c, &ts);
        stat->sent_bytes += ts.sent_bytes;
        stat->recv_bytes += ts.recv_bytes;
        for (int e = 0; e < SL_WIRE_NENCODINGS; e++) {
            stat->sent_enc_bytes[e] += ts.sent_enc_bytes[e];
            stat->recv_enc_bytes[e] += ts.recv_enc_bytes[e];
        }
    }
}

sl_status_t
sl_sync_collective_failed(sl_status_t st, sl_sync_algorithm_t algo, const char *what, long round)
{
    return sl_err_prefix(st, "sync %s (%s, round %ld)", what, sl_sync_algorithm_name(algo), round);
}
