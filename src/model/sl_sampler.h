/* Log-uniform (Zipf-like) sampler over word ranks 0..V-1 for sampled softmax, as
 * TensorFlow's LogUniformCandidateSampler: P(k) = log((k+2)/(k+1)) / log(V+1), so
 * frequent (low-rank) words are drawn most. Unique draws by rejection of repeats; the
 * expected count of id k after `tries` draws, Q(k) = 1 - (1 - P(k))^tries, is the q of
 * the logQ correction (TensorFlow's formula for unique sampling). */
#ifndef SL_SAMPLER_H
#define SL_SAMPLER_H

#include <stdint.h>

#include "common/sl_rng.h"
#include "common/sl_status.h"

typedef struct {
    int range;        /* V: ids are 0..V-1 */
    double log_range; /* log(V + 1) */
    double *log1m_p;  /* (V) log(1 - P(k)), for expected counts */
    uint32_t *stamp;  /* (V) generation marks that reject repeats */
    uint32_t gen;     /* current generation */
} sl_sampler_t;

/* Tables for ids 0..range-1 (range >= 1). SL_ERR_INVALID, SL_ERR_NOMEM. Release with
 * sl_sampler_fini (safe on a zeroed or finished sampler). */
sl_status_t sl_sampler_init(sl_sampler_t *s, int range);
void sl_sampler_fini(sl_sampler_t *s);

/* P(k) of one draw. */
double sl_sampler_prob(const sl_sampler_t *s, int k);
/* One draw (with replacement), advancing rng. */
int32_t sl_sampler_draw(const sl_sampler_t *s, sl_rng_t *rng);
/* n distinct ids into out[0..n) in draw order, rejecting repeats; *tries receives the
 * number of draws made (>= n). Needs 0 <= n <= range (SL_ERR_INVALID otherwise).
 * Allocates nothing. */
sl_status_t sl_sampler_draw_unique(sl_sampler_t *s, sl_rng_t *rng, int n, int32_t *out,
                                   long *tries);
/* log Q(k) = log(1 - (1 - P(k))^tries), the log expected count of k. */
double sl_sampler_log_expected(const sl_sampler_t *s, int k, long tries);

#endif
