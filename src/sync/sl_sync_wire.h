/* Bytes on the wire per node per step: what this node's training exchanges sent, read
 * from the transport's counters (sl_transport_stat: counted in sl_transport_send once
 * the medium, ZeroMQ or a shared-memory lane, took the frame), by component and by
 * encoding, and the ratio to allreduce mode in fp32 at the same n, which sends
 * 2 (n - 1) / n x the model's fp32 bytes per step and node (a ring allreduce of the
 * gradients: reduce-scatter then allgather). The final average, control frames and
 * rejoin state are not training exchanges and are left out. Reads counters only. */
#ifndef SL_SYNC_WIRE_H
#define SL_SYNC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "config/sl_config.h"
#include "transport/sl_transport.h"
#include "transport/sl_wire.h"

typedef struct {
    uint64_t frames;                        /* frames sent */
    uint64_t payload_bytes;                 /* their payloads */
    uint64_t enc_bytes[SL_WIRE_NENCODINGS]; /* payload bytes by sl_wire_encoding_t */
} sl_sync_wire_count_t;

/* What component c (0 .. ncomps-1) of a run of algorithm a sent: its gossip snapshots,
 * sparse sets and values, allgathers and allreduces. c == ncomps: allreduce mode's
 * gradient frames (the whole gradient, or by rows every shard's counts, rows and values
 * with the other components: sl_grad_allreduce.h). tr may be NULL (zeros). */
void sl_sync_wire_component(const sl_transport_t *tr, sl_sync_algorithm_t a, int ncomps, int c,
                            sl_sync_wire_count_t *out);

/* The sum over every component (and allreduce's whole gradient). */
void sl_sync_wire_total(const sl_transport_t *tr, sl_sync_algorithm_t a, int ncomps,
                        sl_sync_wire_count_t *out);

/* Bytes of the frames of w: payloads plus a header each. */
uint64_t sl_sync_wire_bytes(const sl_sync_wire_count_t *w);

/* Bytes per step and node of allreduce mode in fp32 on n nodes for nparams floats:
 * 2 (n - 1) / n x 4 nparams (0 for n < 2). */
double sl_sync_wire_allreduce_fp32(int n, size_t nparams);

#endif
