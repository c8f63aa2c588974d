/* Zipf-unique sparse exchange of one row-shard component (an embedding or softmax shard
 * of rows x row_len floats; DESIGN.md "Embedding exchange") for the model-averaging
 * algorithms (gossip-*, local-*, and E_k for ma, bmuf with sync.exchange unique).
 * Symbols:
 *   U_k   the rows node k touched since the component's last sync: sl_rowset_t, one bit
 *         per row of the shard, so its size does not depend on the number of nodes
 *   E_k   the rows node k exchanges: U_k, the shard's first ceil(p% x rows) rows (row ids
 *         are frequency ranks, so these are the most frequent words: V_alpha of the
 *         sampling-based transmission paper) and a random q% of the rows (V_beta), drawn
 *         with the counter RNG under a key every node derives from (seed, component,
 *         round), so all nodes pick the same ones
 * Neighbourhood exchange (sl_sparse_gossip): a puller k sends E_k to each node j it
 * chose (SL_WIRE_SPARSE_INDEX, seq 0); j answers with E_j \ E_k (seq 1) and the values
 * of the rows L = E_k u E_j in ascending order (SL_WIRE_SPARSE_VALUES); k averages each
 * row over its own copy and the answers that hold it. (The all-node average of ma and
 * bmuf is src/embed/sl_sparse_allreduce.h's sl_sparse_allreduce_union_sums.)
 * The result is a list of rows (ascending) and their means; the caller (the sync
 * algorithm) takes them (MA) or applies block momentum to them row by row (BMUF); every
 * other row keeps its value. Values travel through a codec (compression); row ids are
 * shard-local, int32 little-endian on the wire. A peer's frame this node cannot use (ids
 * out of range or not strictly ascending, values of another size, NaN or infinite
 * values) is refused (sl_transport_refuse: counted, logged once) and the peer left out
 * of that round. */
#ifndef SL_SPARSE_H
#define SL_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"

/* A set of rows of one shard: a bitmap, owned by the caller (init / fini). */
typedef struct {
    uint64_t *bits; /* (ceil(rows / 64)) */
    long rows;
} sl_rowset_t;

/* An empty set over rows (>= 1) rows. SL_ERR_INVALID, SL_ERR_NOMEM. */
sl_status_t sl_rowset_init(sl_rowset_t *rs, long rows);
/* Frees; accepts a zeroed or finished set. */
void sl_rowset_fini(sl_rowset_t *rs);
void sl_rowset_clear(sl_rowset_t *rs);

/* Adds row r (0 <= r < rows, the caller checks). */
static inline void
sl_rowset_add(sl_rowset_t *rs, long r)
{
    rs->bits[r >> 6] |= (uint64_t)1 << (r & 63);
}

static inline int
sl_rowset_has(const sl_rowset_t *rs, long r)
{
    return (int)(rs->bits[r >> 6] >> (r & 63) & 1);
}

/* E_k into out (touched->rows ints, caller's), ascending: the rows of touched, the rows
 * below ntop, and every row r with sl_rng_float_at(random_key, r) < random_frac.
 * Returns how many. */
size_t sl_sparse_select(const sl_rowset_t *touched, long ntop, double random_frac,
                        uint64_t random_key, int32_t *out);

typedef struct sl_sparse sl_sparse_t;

/* One exchange of one component: what the caller gives. */
typedef struct {
    uint32_t component; /* the wire's component id */
    uint64_t round;     /* increasing from call to call for a component */
    const float *shard; /* (rows, row_len) this node's values; borrowed */
    long rows;
    int row_len;
    const int32_t *mine; /* E_k: nmine shard-local rows, strictly ascending; borrowed */
    size_t nmine;
    const sl_codec_t *codec; /* borrowed; NULL: fp32 */
    int timeout_ms;          /* the whole exchange, > 0 */
} sl_sparse_args_t;

/* The peers of a neighbourhood exchange (distinct ranks, not this node's). Every chosen
 * node gets this node's set and every puller that asks gets an answer; only the first
 * *_wait of each list are waited for, the others (peers that missed an exchange
 * already: waiting again would cost another timeout) are served only if their frames
 * are already here when the exchange ends. Serving them still matters: a peer that is
 * late, not dead, then does not wait for this node in turn. */
typedef struct {
    const uint32_t *chosen; /* the nodes this one pulls from */
    size_t nchosen, chosen_wait;
    const uint32_t *pullers; /* the nodes that pull from this one */
    size_t npullers, pullers_wait;
    uint32_t *answered; /* out (nchosen): chosen nodes whose answer was averaged */
    size_t nanswered;
    uint32_t *asked; /* out (npullers): pullers that asked and were answered */
    size_t nasked;
} sl_sparse_peers_t;

/* Buffers for shards of up to max_rows x max_row_len and answers answers (the most
 * chosen nodes of a neighbourhood exchange, q for gossip): memory is O((answers + 3) x
 * max_rows x max_row_len) bytes, all allocated here; a node pulled from by many (up to
 * 64) needs no more. SL_ERR_INVALID for sizes < 1 (answers outside [1, 64]),
 * SL_ERR_NOMEM. */
sl_status_t sl_sparse_new(sl_sparse_t **out, long max_rows, int max_row_len, int answers);
/* Frees; accepts NULL, NULLs *sp. */
void sl_sparse_destroy(sl_sparse_t **sp);

/* The neighbourhood exchange of the file comment, within a->timeout_ms in all. Frames
 * that cannot be queued at once are skipped (logged): that peer will miss this node.
 * SL_OK when every waited chosen node answered and every waited puller asked;
 * SL_ERR_TIMEOUT, not fatal, when some did not (the result then averages what came);
 * SL_ERR_INVALID for bad arguments, other codes from the
 * transport: fatal. */
sl_status_t sl_sparse_gossip(sl_sparse_t *sp, sl_transport_t *t, const sl_sparse_args_t *a,
                             sl_sparse_peers_t *p);

/* The last exchange's result: *rows (ascending, shard-local) and *mean (n, row_len),
 * both borrowed until the next exchange; returns n. */
size_t sl_sparse_result(const sl_sparse_t *sp, const int32_t **rows, const float **mean);

#endif
