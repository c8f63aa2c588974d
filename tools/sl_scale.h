/* The scaling model behind shoal-scale: a discrete-event replay of a run's sync schedule
 * on n nodes. Every node computes steps of step_ms; at each sync point the exchange of
 * each due component occupies directed links, each a FIFO that sends a frame of B bytes
 * in B * 8 / bandwidth and delivers it latency_ms after it left (the transport's
 * emulated link, src/transport/sl_link_emu.h, without jitter). Who talks to whom comes
 * from topology/ (sl_ring, sl_schedule), the component sizes from the model's layout
 * (sl_lm_layout). What is modelled, per algorithm:
 *   allreduce        every step, an allreduce of all gradients (one, over the whole
 *                    buffer; with sync.exchange unique or allgather every row shard
 *                    and the other components in one exchange, as below)
 *   ma, bmuf         per due component an allreduce, one for all the components of
 *                    one period that go whole, at the first of them (as shoal syncs
 *                    them without overlap). Where sl_allreduce_halves says
 *                    shoal halves and doubles, on n = 2^L m (m odd): L steps, step j
 *                    pairing node i with i ^ 2^j and sending S/2, ..., S/2^L bytes,
 *                    2(m-1) ring steps of S/n round the rings of m (i to i + 2^L),
 *                    then the L steps in reverse and back up, in frames, each once
 *                    the node has its partner's frames of the step before. Else a
 *                    ring allreduce:
 *                    2(n-1) steps of S/n bytes, each step in frames of chunk_values
 *                    values (or as sl_allreduce_chunk frames them,
 *                    allreduce_chunk_auto; sl_collective.h); node i
 *                    sends frame c of step j to i+1 once it holds frame c of step j-1
 *                    from i-1 (the window of frames sent ahead is not modelled)
 *   local-*, gossip-* each node pushes the component, one frame, to the nodes that pull
 *                    from it (sl_schedule_pullers) and waits for the q it chose
 *   unique rows      ma/bmuf/allreduce: allgathers of the row-set sizes (4 bytes a
 *                    shard) and of the sets (4 bytes a row), then an allreduce of the
 *                    unions' rows, every shard due at once in the same three (ma/bmuf
 *                    without overlap; allreduce with the other gradients after the
 *                    rows: src/embed/sl_sparse_allreduce.h); allreduce with allgather:
 *                    the sizes, every node's ids, its rows, then an allreduce of the
 *                    other gradients. An allgather doubles where an
 *                    allreduce would halve (on n = 2^L m: m-1 ring steps of a block
 *                    round the rings of m, then L steps, step j pairing node i with
 *                    i ^ 2^(L-1-j) and sending m 2^j blocks), else goes round the
 *                    ring (n-1 steps of a block); gossip/local: a request with
 *                    the row set to each chosen node, answered with the ids it lacks
 *                    and the values of the union of both sets. A node touches R rows
 *                    of a shard per sync; the union of m nodes' sets is
 *                    min(rows, R * m^b), b the Zipf exponent of U ~ N^b (Baidu: 0.64)
 * The components due at one step are exchanged one after the other by the node's sync
 * worker; with overlap tau the node goes on computing and waits for an exchange begun
 * after step s only at the end of step s + tau. Not modelled: BMUF's block update and
 * the reduction arithmetic (no cost), the receiver's side (only senders queue), jitter,
 * stragglers and failures. With shared_uplink a node's frames to all its peers queue on
 * one link (a host's NIC) in the order the replay hands them over. Nothing here allocates per step.
 */
#ifndef SL_SCALE_H
#define SL_SCALE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

/* One component as the model sees it: sizes and when it syncs. */
typedef struct {
    char name[32];
    size_t count;       /* elements */
    int sparse;         /* 1: a row shard (embedding, softmax) */
    long rows;          /* sparse: rows of the shard */
    int row_len;        /* sparse: elements per row */
    int period;         /* H_i, steps between its syncs (1 in allreduce mode) */
    double unique_rows; /* sparse: rows one node touched between two syncs, R */
} sl_scale_component_t;

typedef struct {
    int nodes;                     /* n >= 1 */
    int degree;                    /* k of the ring; 0 = sl_ring_default_degree(n) */
    int neighbours;                /* q (gossip-*); capped at the ring's links */
    sl_sync_algorithm_t algorithm; /* none = no exchange */
    sl_exchange_t exchange;        /* of the row shards */
    int value_bytes;               /* bytes of a value on the wire: 4 (fp32) or 2 */
    double zipf_exponent;          /* b of the union estimate, 0 < b <= 1 */
    double step_ms;                /* compute time of one step, > 0 */
    double bits_per_s;             /* each directed link's rate; 0 = no limit */
    double latency_ms;             /* >= 0 */
    long chunk_values;             /* values per frame of a ring collective; 0 = a whole
                                      ring step in one frame */
    int allreduce_chunk_auto;      /* 1: ring allreduces in frames of sl_allreduce_chunk
                                      (transport/sl_collective.h), as shoal sends them;
                                      chunk_values then frames the allgathers only */
    int allreduce_ring;            /* 1: allreduces go round the ring where shoal's
                                      default halves and doubles (cluster.allreduce) */
    int header_bytes;              /* bytes every frame adds to its payload, >= 0 */
    int shared_uplink;             /* 1: all of a node's frames queue on one link of that
                                      rate (a NIC); 0: each directed link has it */
    int overlap;                   /* tau >= 0, steps between handing over and waiting */
    long steps;                    /* steps replayed, >= 1 */
    uint64_t seed;                 /* run seed of the gossip schedule */
    int ncomps;
    const sl_scale_component_t *comps; /* borrowed, ncomps of them */
} sl_scale_params_t;

typedef struct {
    int nodes, degree, picks;   /* n, k and the q actually used */
    double wall_ms;             /* when the slowest node finished its last step's sync */
    double compute_ms;          /* steps * step_ms */
    double utilization;         /* compute_ms / wall_ms */
    double speedup;             /* n * utilization: aggregate over one node's rate */
    double wait_ms_per_step;    /* (wall_ms - compute_ms) / steps */
    double bytes_per_node_step; /* bytes sent (frames with their headers), mean over
                                   nodes and steps */
} sl_scale_result_t;

/* The components of the model cfg describes for a vocabulary of vocab_size (sl_lm_layout,
 * sync.embedding_shards), each with its period resolved as the sync does (the first
 * sync.periods rule whose glob matches, else sync.embedding_period for row shards and
 * sync.period for the rest; 1 for allreduce) and its R: unique_rows of the whole
 * vocabulary shared out over the shards by their rows, every row of the softmax shards
 * with a full softmax (it touches them all). *out is the caller's to free (sl_free).
 * SL_ERR_INVALID / SL_ERR_CONFIG with the model's or the rule's message, SL_ERR_NOMEM. */
sl_status_t sl_scale_components(const sl_config_t *cfg, int vocab_size, double unique_rows,
                                sl_scale_component_t **out, int *ncomps);

/* Replays p->steps steps on p->nodes nodes into *r. SL_ERR_INVALID (message names the
 * field) for parameters out of range, SL_ERR_NOMEM. */
sl_status_t sl_scale_run(const sl_scale_params_t *p, sl_scale_result_t *r);

#endif
