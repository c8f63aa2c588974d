/* Zipf statistics of a token stream (Baidu, "Language Modeling at Scale", Fig. 1):
 * the number of unique types U among N consecutive tokens, averaged over windows
 * spread across the stream, and the least-squares fit of U ~ a N^b in log-log (the
 * paper finds b about 0.64). N = G x K is a training step's batch over G nodes, and U
 * the embedding rows a Zipf-unique exchange sends for it (U_g). */
#ifndef SL_ZIPF_H
#define SL_ZIPF_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"

typedef struct {
    size_t window; /* N: tokens per window */
    long windows;  /* windows measured */
    double u_mean; /* mean unique types per window */
    long u_min, u_max;
} sl_zipf_window_t;

typedef struct {
    double a, b; /* U ~ a N^b */
    double r2;   /* coefficient of determination of the log-log fit */
    int points;  /* distinct N values among the points fitted */
} sl_zipf_fit_t;

/* Unique types in windows of `window` consecutive tokens of ids (len tokens, each in
 * 0..range-1; borrowed). The windows start at min(max_windows, len - window + 1)
 * evenly spaced positions from 0 to len - window (floor(i (len - window) / (W - 1))),
 * overlapping when the stream is short; a sliding count makes the cost O(len) per call
 * however many windows. Fills *out. SL_ERR_INVALID for window 0, window > len,
 * max_windows < 1, range < 1 or an id outside 0..range-1; SL_ERR_NOMEM. */
sl_status_t sl_zipf_unique_windows(const int32_t *ids, size_t len, int32_t range, size_t window,
                                   long max_windows, sl_zipf_window_t *out);

/* Least-squares line through (ln n[i], ln u[i]), i < count (borrowed): b is its slope,
 * ln a its intercept; every point counts, points is the number of distinct n.
 * SL_ERR_INVALID when a value is not finite and > 0 or fewer than two distinct n. r2
 * is 1 when all points lie on the line (including when u is constant). */
sl_status_t sl_zipf_fit(const double *n, const double *u, int count, sl_zipf_fit_t *fit);

#endif
