/* Allreduce-mode exchange of row-shard components' gradients (sync.algorithm
 * allreduce, sync.exchange unique | allgather | dense): the sum over all n nodes of each
 * shard gradient, every node ending with the same rows; several shards, and dense
 * gradients beside them, go in the same collectives (sl_sparse_allreduce_shards). Section III-A of
 * "Language Modeling at Scale" (Baidu), in its symbols: J^   the node's touched rows, deduplicated,
 * duplicate gradients summed (the model does both: sl_lm_touched_rows), U_i = |J^| rows of D =
 * row_len floats I    the allgather of every node's J^ (per-node counts first) I^   the sorted
 * union of I, U_g = |I^| rows M_i  the node's rows scattered into a U_g x D matrix, zeros elsewhere
 *   M^   the ring allreduce (sum) of the M_i, written back into rows I^ of the shard
 * Modes:
 *   SL_EXCHANGE_UNIQUE     the paper: bytes and memory O(sum of U_i + U_g x D)
 *   SL_EXCHANGE_ALLGATHER  the baseline of Horovod / TensorFlow: every node's U_i row
 *                          indices, then its U_i x D values, are allgathered (two
 *                          allgathers, as Horovod does for IndexedSlices) and each node
 *                          sums them in rank order; bytes and memory O(sum of U_i x D).
 *                          (Their K x D blocks are not deduplicated; ours are, so this
 *                          baseline already ships U_i / K of theirs.)
 *   SL_EXCHANGE_DENSE      ring allreduce of the whole shard (rows x D)
 * Every mode leaves the same sum in the shard on every node, bit-identical across nodes:
 * unique and dense through the ring allreduce (the order of the additions depends on
 * where a value sits in the reduced buffer, so unique and dense agree to rounding, and
 * bitwise wherever at most two nodes touched the row), allgather by summing the n
 * blocks in rank order from zero.
 *
 * Wire: the per-node counts and the index sets travel as 32-bit words in fp32 frames
 * (bit patterns, copied, never added, never compressed); only the values go through the
 * codec of the collective options (sync.compression). One call uses rounds
 * 3 round + 0 (counts), 3 round + 1 (indices) and 3 round + 2 (values: an allreduce, or
 * an allgather in allgather mode) of the given component: rounds of a component must
 * increase from call to call, as for every collective. With several shards, a node's
 * block of each collective holds its part of shard 0, then of shard 1, ...: the same
 * three collectives whatever the shards, each waiting for its hand-overs once. Frames from peers
 * are not trusted: a count over the shard's rows, a row outside the shard, rows not strictly
 * ascending make the call fail with SL_ERR_INVALID on every node (the ring passes the
 * same data to all). */
#ifndef SL_SPARSE_ALLREDUCE_H
#define SL_SPARSE_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "model/sl_model.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"

typedef struct sl_sparse_allreduce sl_sparse_allreduce_t;

/* What the last call did on this node (the rows: summed over its shards). Bytes are on the wire:
 * payload plus the SL_WIRE_HEADER_BYTES of every frame, for the allgather and allreduce frames of
 * this component. Sent figures are exact; a frame is counted as received when it arrives, so one of
 * the next call that arrives during this call counts here. */
typedef struct {
    uint64_t sent_bytes, recv_bytes;
    uint64_t sent_frames, recv_frames;
    size_t local_rows;   /* U_i: this node's rows inside the shard */
    size_t gather_rows;  /* sum of U_i over the nodes (0 for dense) */
    size_t union_rows;   /* U_g (unique), the shard's rows (dense), 0 (allgather) */
    size_t buffer_bytes; /* memory the context holds now (see sl_sparse_allreduce_new) */
    double time_s;       /* wall time of the call */
} sl_sparse_stats_t;

/* A context for component c (borrowed, read only during the call: sparse, row_begin,
 * rows and row_len are taken) in a run of nodes nodes. Buffers start empty and grow,
 * by at least 25% at a time, to 1.25 x the largest call seen (bounded by the worst
 * case: nodes x rows indices, rows x row_len floats for unique, nodes x rows x row_len
 * for allgather), so after the first steps a call allocates nothing.
 * SL_ERR_INVALID when c is not a row shard (sparse 0, rows or row_len < 1, rows beyond
 * int32) or nodes < 1; SL_ERR_NOMEM. */
sl_status_t sl_sparse_allreduce_new(sl_sparse_allreduce_t **out, const sl_component_t *c,
                                    int nodes);
/* A context for k >= 1 row shards (shards[0 .. k), as for new) whose calls may add up to
 * dense floats of gradients that are not by rows (sl_sparse_allreduce_shards); its
 * buffers' worst cases are the shards' summed, plus dense. */
sl_status_t sl_sparse_allreduce_new_shards(sl_sparse_allreduce_t **out,
                                           const sl_component_t *const *shards, int k, size_t dense,
                                           int nodes);
/* Frees; accepts NULL, NULLs *sa. After a call that failed, buffers may still be lent to
 * ZeroMQ (sl_collective.h): destroy the transport first. */
void sl_sparse_allreduce_destroy(sl_sparse_allreduce_t **sa);

/* shard_grad (rows x row_len floats, the component's gradient: grads + c->offset)
 * becomes the sum of that shard over all nodes of tr (sl_transport_size(tr) must be the
 * nodes given to new), or over o->group's (at most that many; "node k" is then the
 * group's k-th); 1 node: nothing is sent, shard_grad stays.
 * rows[0 .. nrows) are the node's touched vocabulary rows (absolute ids, e.g. from
 * sl_lm_touched_rows), strictly ascending; those outside [row_begin, row_begin + rows)
 * are skipped. shard_grad must be zero in every other row of the shard (the model
 * guarantees it): unique and allgather read and write only rows some node touched, so
 * the others stay zero. mode: SL_EXCHANGE_UNIQUE, _ALLGATHER or _DENSE (dense ignores
 * rows). round as in the file comment. o (may be NULL: defaults) as for
 * sl_allreduce_sum: timeout_ms per receive, chunking, and the codec the values (never
 * the indices) travel with. The values are not divided by n.
 * Errors: SL_ERR_TIMEOUT when a peer does not answer in time, SL_ERR_SHUTDOWN when one
 * aborted (the collective's status, its message prefixed with the component, round and
 * phase); SL_ERR_INVALID for bad arguments (unsorted own rows, a node count other than
 * the context's, an unknown mode) or a bad frame from a peer; SL_ERR_NOMEM. After an
 * error other than bad arguments, shard_grad is undefined and the context refuses
 * further calls with SL_ERR_INVALID (the run is over: see destroy), except after a
 * timeout over a group: its members re-form (src/sync/sl_members.h), give the lent
 * buffers back and call again. */
sl_status_t sl_sparse_allreduce(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                                uint64_t round, sl_exchange_t mode, const int32_t *rows, int nrows,
                                float *shard_grad, const sl_collective_opts_t *o);

/* One shard's part of a call: the node's touched rows and the shard's gradient, as
 * rows, nrows and shard_grad of sl_sparse_allreduce. */
typedef struct {
    const int32_t *rows;
    int nrows;
    float *grad;
} sl_sparse_part_t;

/* count floats of a gradient that goes whole, summed beside the shards. */
typedef struct {
    float *x;
    size_t count;
} sl_sparse_span_t;

/* sl_sparse_allreduce for the context's k shards at once, parts[p] being shard p's, and
 * the ndense spans dense[0 .. ndense) (at most the context's dense floats in all)
 * summed too, in the same three collectives: one allgather of every node's k counts,
 * one of its rows of every shard, and, unique, one allreduce of every shard's M_i
 * followed by the spans; allgather: one allgather of every shard's values, then one
 * allreduce of the spans (none without spans). mode dense takes one shard and no spans.
 * Each shard's sum is what a call of its own gives (the same bits in allgather mode;
 * in unique mode to rounding, as the values' places in the allreduce differ). */
sl_status_t sl_sparse_allreduce_shards(sl_sparse_allreduce_t *sa, sl_transport_t *tr,
                                       uint32_t component, uint64_t round, sl_exchange_t mode,
                                       const sl_sparse_part_t *parts, const sl_sparse_span_t *dense,
                                       int ndense, const sl_collective_opts_t *o);

/* The all-node sums of ma and bmuf by rows (src/sync/sl_sync_average.c): as
 * sl_sparse_allreduce_shards in unique mode without dense spans, but each node's M_i
 * holds its shard's values (parts[p].grad, read only) in every row of the union I^, not
 * only in its own, and the sums stay in the context, read with
 * sl_sparse_allreduce_union until the next call. Over a group of one node, the union is
 * the node's rows and the sums its values. */
sl_status_t sl_sparse_allreduce_union_sums(sl_sparse_allreduce_t *sa, sl_transport_t *tr,
                                           uint32_t component, uint64_t round,
                                           const sl_sparse_part_t *parts,
                                           const sl_collective_opts_t *o);
/* Shard p's union of the last sl_sparse_allreduce_union_sums: *rows (shard-relative,
 * ascending) and *sums (n x row_len), borrowed; returns n (meaningless after a failed call). */
size_t sl_sparse_allreduce_union(const sl_sparse_allreduce_t *sa, int p, const int32_t **rows,
                                 const float **sums);

/* The figures of the last call (zeros before the first). */
void sl_sparse_allreduce_stats(const sl_sparse_allreduce_t *sa, sl_sparse_stats_t *out);
/* Shard p's rows in the last call (local_rows, gather_rows, union_rows; the rest 0). */
void sl_sparse_allreduce_shard_stats(const sl_sparse_allreduce_t *sa, int p,
                                     sl_sparse_stats_t *out);

#endif
