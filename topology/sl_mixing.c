/* Expected gossip mixing matrix W = E[W_r], its eigenvalues (cyclic Jacobi) and spectral
 * gap; symbols as in sl_mixing.h (q' picks, links = min(2k, n-1), lambda_2). */
#include "topology/sl_mixing.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "common/sl_alloc.h"
#include "common/sl_sort.h"
#include "topology/sl_ring.h"

sl_status_t
sl_mixing_matrix(const sl_schedule_t *s, double *w, size_t cap)
{
    size_t n = (size_t)s->nodes;
    double self = 1.0 / (s->picks + 1), other = 0;

    if (cap / n < n)
        return sl_err_set(SL_ERR_INVALID, "mixing: room for %zu entries, W has %zu x %zu", cap, n,
                          n);
    if (s->links > 0)
        other = (double)s->picks / s->links * self;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            w[i * n + j] = i == j                                                      ? self
                           : sl_ring_is_neighbour(s->nodes, s->degree, (int)i, (int)j) ? other
                                                                                       : 0.0;
    return SL_OK;
}

/* Sum of squares of the strictly upper triangle (the rotations drive it to 0). */
static double
off_diagonal(const double *a, int n)
{
    double off = 0;

    for (int p = 0; p < n; p++)
        for (int q = p + 1; q < n; q++)
            off += a[(size_t)p * n + q] * a[(size_t)p * n + q];
    return off;
}

/* The rotation that zeroes a_pq (Golub & Van Loan 8.4.2): t = tan(phi) is the smaller
 * root of t^2 + 2 t theta - 1 = 0, theta = (a_qq - a_pp) / (2 a_pq); *c = cos, *s = sin. */
static void
rotation(double app, double aqq, double apq, double *c, double *s)
{
    double theta = (aqq - app) / (2 * apq), t;

    if (fabs(theta) > 1e150) /* theta^2 would overflow; t ~ 1 / (2 theta) */
        t = 0.5 / theta;
    else
        t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
    *c = 1 / sqrt(t * t + 1);
    *s = t * *c;
}

/* Scratch of one Jacobi run: the round-robin table and one step's rotations. */
typedef struct {
    int *player;   /* (m) indices 0..m-1; index n is the bye when n is odd */
    int *p, *q;    /* (m/2) the step's planes, p < q */
    double *c, *s; /* (m/2) their cosines and sines */
} jacobi_work_t;

/* One step of the parallel ordering: rotate all the disjoint planes (p, q) of this round
 * of the round-robin tournament at once, A <- J^T A J. Both products run along rows
 * (A J updates two entries of each row, J^T A combines two whole rows), so the n x n
 * matrix streams through the cache instead of being walked down its columns, which is
 * what makes n = 1024 affordable. */
static void
jacobi_step(double *a, size_t n, int m, jacobi_work_t *w)
{
    int na = 0;

    for (int k = 0; k < m / 2; k++) {
        size_t p = (size_t)w->player[k], q = (size_t)w->player[m - 1 - k];
        double apq;

        if (p >= n || q >= n) /* the bye */
            continue;
        if (p > q) {
            size_t t = p;
            p = q;
            q = t;
        }
        apq = a[p * n + q];
        if (apq == 0)
            continue;
        /* below rounding of both diagonal entries: drop it, no rotation needed */
        if (fabs(apq) < 1e-3 * DBL_EPSILON * (fabs(a[p * n + p]) + fabs(a[q * n + q]))) {
            a[p * n + q] = a[q * n + p] = 0;
            continue;
        }
        rotation(a[p * n + p], a[q * n + q], apq, &w->c[na], &w->s[na]);
        w->p[na] = (int)p;
        w->q[na] = (int)q;
        na++;
    }
    for (size_t r = 0; r < n; r++) { /* A J */
        double *row = a + r * n;

        for (int k = 0; k < na; k++) {
            double arp = row[w->p[k]], arq = row[w->q[k]];

            row[w->p[k]] = w->c[k] * arp - w->s[k] * arq;
            row[w->q[k]] = w->s[k] * arp + w->c[k] * arq;
        }
    }
    for (int k = 0; k < na; k++) { /* J^T (A J) */
        double *rp = a + (size_t)w->p[k] * n, *rq = a + (size_t)w->q[k] * n;
        double c = w->c[k], s = w->s[k];

        for (size_t r = 0; r < n; r++) {
            double x = rp[r], y = rq[r];

            rp[r] = c * x - s * y;
            rq[r] = s * x + c * y;
        }
        rp[w->q[k]] = rq[w->p[k]] = 0; /* exactly, not to rounding */
    }
}

/* Next round of the round-robin (circle method): player 0 stays, the others rotate, so
 * m - 1 rounds pair every two indices exactly once (one cyclic sweep). */
static void
next_round(int *player, int m)
{
    int last = player[m - 1];

    for (int i = m - 1; i > 1; i--)
        player[i] = player[i - 1];
    if (m > 1)
        player[1] = last;
}

sl_status_t
sl_mixing_eigenvalues(double *a, int n, double *eig)
{
    size_t nn = (size_t)n;
    int m = n + (n & 1);
    double norm = 0, tol;
    jacobi_work_t w = {NULL, NULL, NULL, NULL, NULL};
    sl_status_t rc = SL_OK;

    if (n < 1)
        return sl_err_set(SL_ERR_INVALID, "mixing: matrix of order %d", n);
    for (size_t p = 0; p < nn; p++)
        for (size_t q = 0; q < nn; q++) {
            if (!isfinite(a[p * nn + q]))
                return sl_err_set(SL_ERR_INVALID, "mixing: entry (%zu, %zu) is not finite", p, q);
            norm += a[p * nn + q] * a[p * nn + q];
        }
    for (size_t p = 0; p < nn; p++)
        for (size_t q = p + 1; q < nn; q++)
            if (fabs(a[p * nn + q] - a[q * nn + p]) > 1e-12 * sqrt(norm))
                return sl_err_set(SL_ERR_INVALID,
                                  "mixing: matrix is not symmetric: (%zu, %zu) = %g but "
                                  "(%zu, %zu) = %g",
                                  p, q, a[p * nn + q], q, p, a[q * nn + p]);
    SL_TRY_GOTO(SL_ALLOC(&w.player, (size_t)m, "mixing: Jacobi order"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&w.p, (size_t)m / 2 + 1, "mixing: Jacobi planes"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&w.q, (size_t)m / 2 + 1, "mixing: Jacobi planes"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&w.c, (size_t)m / 2 + 1, "mixing: Jacobi rotations"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&w.s, (size_t)m / 2 + 1, "mixing: Jacobi rotations"), rc, out);
    for (int i = 0; i < m; i++)
        w.player[i] = i;
    tol = 1e-28 * norm; /* (1e-14 * ||A||_F)^2 */
    for (int sweep = 0; off_diagonal(a, n) > tol; sweep++) {
        if (sweep == 100) {
            rc = sl_err_set(SL_ERR_INVALID,
                            "mixing: Jacobi rotations did not converge in 100 sweeps");
            goto out;
        }
        for (int step = 0; step < m - 1; step++) {
            jacobi_step(a, nn, m, &w);
            next_round(w.player, m);
        }
    }
    for (size_t p = 0; p < nn; p++)
        eig[p] = a[p * nn + p];
    qsort(eig, nn, sizeof *eig, sl_cmp_double);
out:
    sl_free(w.player);
    sl_free(w.p);
    sl_free(w.q);
    sl_free(w.c);
    sl_free(w.s);
    return rc;
}

int
sl_mixing_rounds_10x(double lambda2_abs)
{
    double t;

    if (lambda2_abs >= 1)
        return -1;
    if (lambda2_abs <= 0)
        return 1;
    /* the 1e-9 keeps an exact quotient (|lambda_2| = 1/10: 1 round) from rounding up */
    t = ceil(log(10.0) / -log(lambda2_abs) - 1e-9);
    return t < 1 ? 1 : t > 1e9 ? -1 : (int)t;
}

sl_status_t
sl_mixing_analyse(const sl_schedule_t *s, sl_mixing_t *m)
{
    int n = s->nodes;
    double *w = NULL, *eig = NULL;
    sl_status_t rc;

    if (n > SL_MIXING_MAX_NODES)
        return sl_err_set(SL_ERR_INVALID,
                          "mixing: %d nodes: the eigenvalue solver takes at most %d", n,
                          SL_MIXING_MAX_NODES);
    if (n == 1) {
        m->lambda2 = 0;
        m->gap = 1;
        m->rounds_10x = 0;
        return SL_OK;
    }
    SL_TRY_GOTO(SL_ALLOC(&w, (size_t)n * n, "mixing: W"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&eig, (size_t)n, "mixing: eigenvalues"), rc, out);
    SL_TRY_GOTO(sl_mixing_matrix(s, w, (size_t)n * n), rc, out);
    SL_TRY_GOTO(sl_mixing_eigenvalues(w, n, eig), rc, out);
    /* eig[n-1] is the consensus eigenvalue 1 and every eigenvalue is > -1, so the
     * second-largest modulus is at one end of the rest */
    m->lambda2 = fmax(fabs(eig[0]), fabs(eig[n - 2]));
    m->gap = 1 - m->lambda2;
    m->rounds_10x = sl_mixing_rounds_10x(m->lambda2);
    rc = SL_OK;
out:
    sl_free(w);
    sl_free(eig);
    return rc;
}
