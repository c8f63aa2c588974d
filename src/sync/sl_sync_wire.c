/* This node's bytes on the wire by component and encoding (sl_sync_wire.h). */
#include "sync/sl_sync_wire.h"

#include <string.h>

static void
add(sl_sync_wire_count_t *w, const sl_transport_t *tr, unsigned kind, uint32_t c)
{
    sl_transport_stat_t ts;

    sl_transport_stat(tr, kind, c, &ts);
    w->frames += ts.sent_msgs;
    w->payload_bytes += ts.sent_bytes;
    for (int e = 0; e < SL_WIRE_NENCODINGS; e++)
        w->enc_bytes[e] += ts.sent_enc_bytes[e];
}

void
sl_sync_wire_component(const sl_transport_t *tr, sl_sync_algorithm_t a, int ncomps, int c,
                       sl_sync_wire_count_t *out)
{
    static const unsigned kinds[] = {SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_SPARSE_INDEX,
                                     SL_WIRE_SPARSE_VALUES, SL_WIRE_ALLGATHER, SL_WIRE_ALLREDUCE};

    memset(out, 0, sizeof *out);
    if (!tr)
        return;
    if (c == ncomps) { /* allreduce: the gradient, by rows or not */
        if (a == SL_SYNC_ALLREDUCE) {
            add(out, tr, SL_WIRE_ALLREDUCE, (uint32_t)ncomps);
            add(out, tr, SL_WIRE_ALLGATHER, (uint32_t)ncomps);
        }
        return;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        add(out, tr, kinds[k], (uint32_t)c);
}

void
sl_sync_wire_total(const sl_transport_t *tr, sl_sync_algorithm_t a, int ncomps,
                   sl_sync_wire_count_t *out)
{
    memset(out, 0, sizeof *out);
    for (int c = 0; c <= ncomps; c++) {
        sl_sync_wire_count_t w;
        sl_sync_wire_component(tr, a, ncomps, c, &w);
        out->frames += w.frames;
        out->payload_bytes += w.payload_bytes;
        for (int e = 0; e < SL_WIRE_NENCODINGS; e++)
            out->enc_bytes[e] += w.enc_bytes[e];
    }
}

uint64_t
sl_sync_wire_bytes(const sl_sync_wire_count_t *w)
{
    return w->payload_bytes + w->frames * SL_WIRE_HEADER_BYTES;
}

double
sl_sync_wire_allreduce_fp32(int n, size_t nparams)
{
    if (n < 2)
        return 0;
    return 2.0 * (double)(n - 1) / (double)n * 4.0 * (double)nparams;
}
