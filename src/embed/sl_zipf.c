/* Zipf statistics of a token stream: unique types U in windows of N tokens, and the
 * power-law fit U ~ a N^b (Baidu, "Language Modeling at Scale", Fig. 1). */
#include "embed/sl_zipf.h"

#include <math.h>

#include "common/sl_alloc.h"

/* counts[id] of the current window and how many ids have a non-zero count. */
typedef struct {
    int32_t *counts;
    long unique;
} window_counts_t;

static void
add(window_counts_t *w, const int32_t *ids, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (w->counts[ids[i]]++ == 0)
            w->unique++;
}

static void
drop(window_counts_t *w, const int32_t *ids, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (--w->counts[ids[i]] == 0)
            w->unique--;
}

/* Why sliding: consecutive windows overlap when there are many of them (small
 * corpora, large N), and moving a window by s tokens costs 2s updates instead of N.
 * Disjoint successive windows are emptied and refilled (2N), so a call touches each
 * token at most a few times. */
sl_status_t
sl_zipf_unique_windows(const int32_t *ids, size_t len, int32_t range, size_t window,
                       long max_windows, sl_zipf_window_t *out)
{
    window_counts_t w = {NULL, 0};
    size_t span, prev = 0;
    long nw;
    double sum = 0.0;

    if (window == 0 || window > len || max_windows < 1 || range < 1)
        return sl_err_set(SL_ERR_INVALID,
                          "Zipf windows: window %zu of %zu tokens, %ld windows, "
                          "range %d",
                          window, len, max_windows, (int)range);
    for (size_t i = 0; i < len; i++)
        if (ids[i] < 0 || ids[i] >= range)
            return sl_err_set(SL_ERR_INVALID,
                              "Zipf windows: token %zu has id %d outside 0..%d", i,
                              (int)ids[i], (int)range - 1);
    span = len - window;
    nw = (size_t)max_windows - 1 > span ? (long)span + 1 : max_windows;
    SL_TRY(SL_CALLOC(&w.counts, (size_t)range, "Zipf windows: counts"));
    out->window = window;
    out->windows = nw;
    out->u_min = (long)window;
    out->u_max = 0;
    for (long i = 0; i < nw; i++) {
        size_t p = nw == 1 ? 0 : (size_t)((double)i * (double)span / (double)(nw - 1));

        if (p > span) /* rounding of the double product: never past the last start */
            p = span;
        if (i == 0) {
            add(&w, ids, 0, window);
        } else if (p >= prev + window) {
            drop(&w, ids, prev, prev + window);
            add(&w, ids, p, p + window);
        } else {
            add(&w, ids, prev + window, p + window);
            drop(&w, ids, prev, p);
        }
        prev = p;
        sum += (double)w.unique;
        if (w.unique < out->u_min)
            out->u_min = w.unique;
        if (w.unique > out->u_max)
            out->u_max = w.unique;
    }
    out->u_mean = sum / (double)nw;
    sl_free(w.counts);
    return SL_OK;
}

sl_status_t
sl_zipf_fit(const double *n, const double *u, int count, sl_zipf_fit_t *fit)
{
    double mx = 0.0, my = 0.0, sxx = 0.0, sxy = 0.0, syy = 0.0, res = 0.0;
    int distinct = 0;

    for (int i = 0; i < count; i++) {
        int seen = 0;

        if (!isfinite(n[i]) || !(n[i] > 0.0) || !isfinite(u[i]) || !(u[i] > 0.0))
            return sl_err_set(SL_ERR_INVALID,
                              "Zipf fit: point %d (N %g, U %g) is not "
                              "finite and > 0",
                              i, n[i], u[i]);
        for (int j = 0; j < i && !seen; j++)
            seen = n[j] == n[i];
        distinct += !seen;
        mx += log(n[i]);
        my += log(u[i]);
    }
    if (distinct < 2)
        return sl_err_set(SL_ERR_INVALID, "Zipf fit: %d distinct N, need at least 2", distinct);
    mx /= count;
    my /= count;
    for (int i = 0; i < count; i++) {
        double dx = log(n[i]) - mx, dy = log(u[i]) - my;

        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    fit->b = sxy / sxx;
    fit->a = exp(my - fit->b * mx);
    for (int i = 0; i < count; i++) {
        double e = log(u[i]) - (my + fit->b * (log(n[i]) - mx));

        res += e * e;
    }
    fit->r2 = syy > 0.0 ? 1.0 - res / syy : 1.0;
    fit->points = distinct;
    return SL_OK;
}
