/* Mixing-matrix maths of gossip averaging: how fast the nodes' parameters reach
 * consensus. In one round node i replaces its component by the mean of itself and the
 * q' = min(q, links) neighbours it chose (gossip-BMUF paper, Algorithm 1 line 7):
 *     theta_i <- (theta_i + sum_{j in chosen(i)} theta_j) / (q' + 1),
 * i.e. theta <- W_r theta with a row-stochastic W_r. Its expectation over the uniform
 * choice of q' of the node's `links` = min(2k, n-1) neighbours is
 *     W_ii = 1 / (q' + 1),   W_ij = q' / links * 1 / (q' + 1) for each neighbour j,
 * (q'/2k * 1/(q'+1) when n > 2k) and 0 elsewhere. Every node has the same number of
 * links and the ring is symmetric, so W = E[W_r] is symmetric and doubly stochastic
 * (circulant, even), with eigenvalue 1 for the consensus vector and all others inside
 * (-1, 1) for n > 1. The spectral gap 1 - |lambda_2| (lambda_2: second-largest
 * eigenvalue modulus) measures how fast E[theta] reaches consensus: the disagreement
 * shrinks by |lambda_2| per round, so 10x takes ceil(ln 10 / -ln |lambda_2|) rounds.
 * It describes the expected process; one round's W_r is not doubly stochastic (pull
 * averaging does not keep the mean exactly). Eigenvalues come from our own cyclic
 * Jacobi solver in double, for n <= SL_MIXING_MAX_NODES. */
#ifndef SL_MIXING_H
#define SL_MIXING_H

#include <stddef.h>

#include "common/sl_status.h"
#include "topology/sl_schedule.h"

#define SL_MIXING_MAX_NODES 1024 /* Jacobi is O(n^3) per sweep */

/* Writes the expected mixing matrix W (n, n), row-major, into w (cap doubles, at least
 * n * n). SL_ERR_INVALID when cap is too small. Any n the schedule allows. */
sl_status_t sl_mixing_matrix(const sl_schedule_t *s, double *w, size_t cap);

/* All eigenvalues of the symmetric matrix a (n, n), row-major, ascending, into
 * eig (n). a is overwritten (its diagonal ends up holding the eigenvalues). Sweeps of
 * Jacobi rotations over every plane (p, q), in the round-robin order that rotates n/2
 * disjoint planes at once, until the off-diagonal Frobenius norm is below 1e-14 of the
 * matrix's; each eigenvalue is then within that norm of the true one. About 13
 * sweeps of O(n^3): milliseconds for n = 64, seconds for n = 512.
 * SL_ERR_INVALID when n < 1, a holds a non-finite value, a is not symmetric (to 1e-12
 * relative), or the rotations do not converge in 100 sweeps; SL_ERR_NOMEM. */
sl_status_t sl_mixing_eigenvalues(double *a, int n, double *eig);

/* Rounds for |lambda_2|^t <= 1/10: ceil(ln 10 / -ln lambda2_abs); 1 when lambda2_abs is
 * 0 (one round reaches consensus), -1 when lambda2_abs >= 1 (never). */
int sl_mixing_rounds_10x(double lambda2_abs);

typedef struct {
    double lambda2; /* |lambda_2|, second-largest eigenvalue modulus of W; 0 for n = 1 */
    double gap;     /* spectral gap 1 - |lambda_2| */
    int rounds_10x; /* sl_mixing_rounds_10x(lambda2); 0 for n = 1 (nothing to agree) */
} sl_mixing_t;

/* Builds W for the schedule and fills *m. SL_ERR_INVALID when s->nodes >
 * SL_MIXING_MAX_NODES, SL_ERR_NOMEM. */
sl_status_t sl_mixing_analyse(const sl_schedule_t *s, sl_mixing_t *m);

#endif
