/* The maths the sync algorithms share, on one component's (count) floats: the mean of
 * this node's copy and the copies it received, the distance to that mean, and the BMUF
 * block update with (Nesterov) block momentum (gossip-BMUF paper, Algorithm 1 lines
 * 7-12). Pure functions on caller-owned buffers: no allocation, no transport. */
#ifndef SL_BMUF_H
#define SL_BMUF_H

#include <stddef.h>

#include "config/sl_config.h"

typedef struct {
    float eta;          /* block momentum, [0, 1) */
    float zeta;         /* block learning rate, > 0 */
    int nesterov;       /* theta = omega + eta * Delta (1) or omega (0) */
    sl_block_ref_t ref; /* G = theta_bar - start (BLOCKSTART) or theta_bar - omega (OMEGA) */
} sl_bmuf_opts_t;

/* Fills o from cfg->sync; block_momentum auto is 1 - 1/n for cfg->cluster.nodes = n.
 * The average sets it for the models it takes (sl_sync_average.c): 1 - 1/n for the
 * members of bmuf, which a drop changes; 1 - 1/(q + 1) for the q picks of a
 * neighbourhood, for the whole run. A death does not change that one: only the dead
 * node's neighbours learn of it, so a live count would differ from node to node; and
 * what made survivors end worse than a run of their number was block updates on a
 * node's own model alone, with a fixed eta as much as with auto (no_copy_came). */
void sl_bmuf_opts_from_config(sl_bmuf_opts_t *o, const sl_config_t *cfg);

/* bar = (self + rows[0] + ... + rows[nrows-1]) / (nrows + 1), rows (nrows, count)
 * row-major; summed in double in that order. bar may be self. */
void sl_bmuf_mean(float *bar, const float *self, const float *rows, size_t nrows, size_t count);
/* The same, the rows summed in the order order[0 .. nrows-1] (row indices). */
void sl_bmuf_mean_ordered(float *bar, const float *self, const float *rows, const size_t *order,
                          size_t nrows, size_t count);

/* The mean rebuilt from deltas against a reference every node holds (the block start
 * after an all-node sync): bar = ref + sum * inv, in double, rounded once. bar may be
 * sum. */
void sl_bmuf_rebuild(float *bar, const float *ref, const float *sum, double inv, size_t count);
/* bar = ref + (dself + rows[0] + ... + rows[nrows-1]) / (nrows + 1), the deltas summed
 * in double in that order: the same bits as sl_bmuf_mean of the weights ref + d when
 * every weight minus ref is exact in fp32 (w within [ref / 2, 2 ref], Sterbenz) and
 * nrows + 1 is a power of two; otherwise within one fp32 rounding of it. */
void sl_bmuf_mean_delta(float *bar, const float *ref, const float *dself, const float *rows,
                        size_t nrows, size_t count);

/* Euclidean distance ||a - b||, in double. */
double sl_bmuf_distance(const float *a, const float *b, size_t count);

/* One block update, element by element (every buffer count floats):
 *   G     = bar - ref            (ref: start or omega, as o->ref says)
 *   delta = eta * delta + zeta * G
 *   omega = omega + delta
 *   theta = omega + eta * delta  (nesterov) or omega
 *   start = theta
 * in float arithmetic. bar may alias nothing else. */
void sl_bmuf_update(const sl_bmuf_opts_t *o, float *theta, const float *bar, float *omega,
                    float *delta, float *start, size_t count);

#endif
