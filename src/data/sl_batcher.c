/* Mini-batches: this rank's contiguous share of a token array, cut into B parallel
 * streams that are read T tokens at a time (time-major x[t*B + b], targets one later). */
#include "data/sl_data.h"

/* floor(k * len / n) without the overflow of k * len: with len = q*n + r it is
 * k*q + floor(k*r / n), and k*r < n*n fits easily. */
size_t
sl_batcher_share_start(size_t len, int k, int n)
{
    size_t q = len / (size_t)n, r = len % (size_t)n;

    return (size_t)k * q + (size_t)k * r / (size_t)n;
}

sl_status_t
sl_batcher_init(sl_batcher_t *bt, const sl_tokens_t *tokens, int rank, int nranks, int batch,
                int bptt)
{
    return sl_batcher_init_at(bt, tokens, 0, tokens->len, rank, nranks, batch, bptt);
}

sl_status_t
sl_batcher_init_at(sl_batcher_t *bt, const sl_tokens_t *tokens, size_t from, size_t all, int rank,
                   int nranks, int batch, int bptt)
{
    size_t lo, hi, need;

    if (nranks < 1 || rank < 0 || rank >= nranks)
        return sl_err_set(SL_ERR_INVALID, "batcher: rank %d of %d is out of range", rank, nranks);
    if (batch < 1 || bptt < 1)
        return sl_err_set(SL_ERR_INVALID,
                          "batcher: train.batch %d and train.bptt %d must be positive", batch,
                          bptt);
    lo = sl_batcher_share_start(all, rank, nranks);
    hi = sl_batcher_share_start(all, rank + 1, nranks);
    need = (size_t)batch * ((size_t)bptt + 1);
    if (hi - lo < need)
        return sl_err_set(SL_ERR_INVALID,
                          "rank %d of %d: a share of %zu tokens (of %zu) "
                          "does not fit train.batch %d x train.bptt %d, which needs at least %zu "
                          "(%d x %d)",
                          rank, nranks, hi - lo, all, batch, bptt, need, batch, bptt + 1);
    SL_ASSERT(from <= lo && hi <= from + tokens->len);
    bt->share = tokens->ids + (lo - from);
    bt->share_len = hi - lo;
    bt->batch = batch;
    bt->bptt = bptt;
    bt->stream_len = (long)(bt->share_len / (size_t)batch);
    bt->batches_per_epoch = (bt->stream_len - 1) / bptt;
    return SL_OK;
}

void
sl_batcher_get(const sl_batcher_t *bt, long i, int32_t *x, int32_t *y)
{
    int B = bt->batch, T = bt->bptt;

    SL_ASSERT(i >= 0 && i < bt->batches_per_epoch);
    for (int b = 0; b < B; b++) {
        const int32_t *s = bt->share + (size_t)b * (size_t)bt->stream_len + (size_t)i * T;
        for (int t = 0; t < T; t++) {
            x[t * B + b] = s[t];
            y[t * B + b] = s[t + 1];
        }
    }
}
