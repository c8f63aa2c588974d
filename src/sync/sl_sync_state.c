/* The checkpoint bytes of the sync state (sl_sync_state.h), little-endian. Must not
 * allocate, send, nor keep anything: it reads and writes the arrays it is shown. */
#include "sync/sl_sync_state.h"

#include <inttypes.h>
#include <string.h>

#include "common/sl_endian.h"

#define STATE_HEADER_BYTES 24 /* u32 algorithm, u32 row sets, u64 n, u64 bitmap words */

/* Does component c keep a touched-row set from one step to the next? */
static int
keeps_rows(const sl_sync_state_view_t *v, int c)
{
    return v->touched && v->touched[c].bits;
}

static size_t
rowset_words(const sl_rowset_t *rs)
{
    return (size_t)(rs->rows + 63) / 64;
}

/* The shape of the state (sl_sync.h): row sets, floats per BMUF array, bitmap words. */
static void
state_shape(const sl_sync_state_view_t *v, uint32_t *nsets, uint64_t *n, uint64_t *words)
{
    *nsets = 0;
    *n = v->n;
    *words = 0;
    for (int c = 0; c < v->ncomps; c++) {
        if (!keeps_rows(v, c))
            continue;
        ++*nsets;
        *words += rowset_words(&v->touched[c]);
    }
}

static unsigned char *put_floats(unsigned char *p, const float *x, size_t n);

/* The pending updates of overlapped sync, after the row sets: i64 due[ncomps] (-1: none),
 * f32 corr[ncorr] (zero outside the pending components' ranges). */
static size_t
overlap_bytes(const sl_sync_state_view_t *v)
{
    return v->ncorr ? 8 * (size_t)v->ncomps + 4 * v->ncorr : 0;
}

static unsigned char *
put_overlap(const sl_sync_state_view_t *v, unsigned char *p)
{
    unsigned char *corr = p + 8 * (size_t)v->ncomps;

    memset(corr, 0, 4 * v->ncorr);
    for (int c = 0; c < v->ncomps; c++, p += 8) {
        sl_put_u64(p, (uint64_t)v->due[c]);
        if (v->due[c] >= 0)
            put_floats(corr + 4 * v->comps[c].offset, v->corr + v->comps[c].offset,
                       v->comps[c].count);
    }
    return corr + 4 * v->ncorr;
}

size_t
sl_sync_state_view_bytes(const sl_sync_state_view_t *v)
{
    uint32_t nsets;
    uint64_t n, words;

    state_shape(v, &nsets, &n, &words);
    if (nsets == 0 && n == 0 && v->ncorr == 0)
        return 0;
    return STATE_HEADER_BYTES + 3 * 4 * n + 8 * words + overlap_bytes(v);
}

static unsigned char *
put_floats(unsigned char *p, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++, p += 4) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        sl_put_u32(p, bits);
    }
    return p;
}

static const unsigned char *
get_floats(const unsigned char *p, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++, p += 4) {
        uint32_t bits = sl_get_u32(p);
        memcpy(&x[i], &bits, sizeof bits);
    }
    return p;
}

sl_status_t
sl_sync_state_view_save(const sl_sync_state_view_t *v, void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t want = sl_sync_state_view_bytes(v);
    uint32_t nsets;
    uint64_t n, words;

    if (len != want)
        return sl_err_set(SL_ERR_INVALID, "sync: the state is %zu bytes, not %zu", want, len);
    if (want == 0)
        return SL_OK;
    state_shape(v, &nsets, &n, &words);
    sl_put_u32(p, (uint32_t)v->algo);
    sl_put_u32(p + 4, nsets);
    sl_put_u64(p + 8, n);
    sl_put_u64(p + 16, words);
    p += STATE_HEADER_BYTES;
    if (n > 0) {
        p = put_floats(p, v->omega, n);
        p = put_floats(p, v->delta, n);
        p = put_floats(p, v->start, n);
    }
    for (int c = 0; c < v->ncomps; c++) {
        if (!keeps_rows(v, c))
            continue;
        for (size_t w = 0; w < rowset_words(&v->touched[c]); w++, p += 8)
            sl_put_u64(p, v->touched[c].bits[w]);
    }
    if (v->ncorr)
        p = put_overlap(v, p);
    SL_ASSERT((size_t)(p - (unsigned char *)buf) == want);
    return SL_OK;
}

/* Whether the n little-endian floats at p are all finite (a NaN or an infinity has
 * every exponent bit set). */
static int
finite_floats(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++, p += 4)
        if ((sl_get_u32(p) & 0x7f800000u) == 0x7f800000u)
            return 0;
    return 1;
}

/* Checks buf (len bytes) against the view's state shape before anything changes:
 * the header, every BMUF value finite, no row set bit at or beyond its shard's rows,
 * every pending update due at step -1 or later with finite corrections (a checkpoint
 * is a file, and a node that comes back takes the state from the network). */
static sl_status_t
check_state(const sl_sync_state_view_t *v, const unsigned char *buf, size_t len)
{
    const char *a = sl_sync_algorithm_name(v->algo);
    size_t want = sl_sync_state_view_bytes(v);
    const unsigned char *p;
    uint32_t nsets;
    uint64_t n, words;

    if (len != want)
        return sl_err_set(SL_ERR_FORMAT,
                          "sync: a state of %zu bytes, but this node's %s keeps %zu (was "
                          "sync.exchange or the model changed?)",
                          len, a, want);
    if (want == 0)
        return SL_OK;
    state_shape(v, &nsets, &n, &words);
    if (sl_get_u32(buf) != (uint32_t)v->algo || sl_get_u32(buf + 4) != nsets ||
        sl_get_u64(buf + 8) != n || sl_get_u64(buf + 16) != words)
        return sl_err_set(SL_ERR_FORMAT,
                          "sync: the state is of %s with %" PRIu32 " row sets (%" PRIu64
                          " bitmap words) and %" PRIu64 " BMUF parameters; this node's %s has "
                          "%" PRIu32 " (%" PRIu64 ") and %" PRIu64,
                          sl_sync_algorithm_name((sl_sync_algorithm_t)sl_get_u32(buf)),
                          sl_get_u32(buf + 4), sl_get_u64(buf + 16), sl_get_u64(buf + 8), a, nsets,
                          words, n);
    if (!finite_floats(buf + STATE_HEADER_BYTES, 3 * n))
        return sl_err_set(SL_ERR_FORMAT, "sync: the %s state holds a value that is not finite", a);
    p = buf + STATE_HEADER_BYTES + 3 * 4 * n;
    for (int c = 0; c < v->ncomps; c++) {
        size_t nw;
        uint64_t last;

        if (!keeps_rows(v, c))
            continue;
        nw = rowset_words(&v->touched[c]);
        p += 8 * nw;
        last = sl_get_u64(p - 8);
        if (v->touched[c].rows % 64 != 0 && last >> (v->touched[c].rows % 64) != 0)
            return sl_err_set(SL_ERR_FORMAT, "sync: touched rows of %s beyond its %ld rows",
                              v->comps[c].name, v->touched[c].rows);
    }
    for (int c = 0; v->ncorr && c < v->ncomps; c++) {
        int64_t due = (int64_t)sl_get_u64(p + 8 * (size_t)c);
        const unsigned char *corr = p + 8 * (size_t)v->ncomps + 4 * v->comps[c].offset;

        if (due < -1)
            return sl_err_set(SL_ERR_FORMAT,
                              "sync: the update pending for %s is due at step %" PRId64,
                              v->comps[c].name, due);
        if (due >= 0 && !finite_floats(corr, v->comps[c].count))
            return sl_err_set(SL_ERR_FORMAT,
                              "sync: the update pending for %s holds a value that is not finite",
                              v->comps[c].name);
    }
    return SL_OK;
}

sl_status_t
sl_sync_state_view_load(const sl_sync_state_view_t *v, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint32_t nsets;
    uint64_t n, words;

    SL_TRY(check_state(v, p, len));
    if (len == 0)
        return SL_OK;
    state_shape(v, &nsets, &n, &words);
    p += STATE_HEADER_BYTES;
    if (n > 0) {
        p = get_floats(p, v->omega, n);
        p = get_floats(p, v->delta, n);
        p = get_floats(p, v->start, n);
    }
    for (int c = 0; c < v->ncomps; c++) {
        if (!keeps_rows(v, c))
            continue;
        for (size_t w = 0; w < rowset_words(&v->touched[c]); w++, p += 8)
            v->touched[c].bits[w] = sl_get_u64(p);
    }
    for (int c = 0; v->ncorr && c < v->ncomps; c++) {
        const unsigned char *corr = p + 8 * (size_t)v->ncomps;

        v->due[c] = (int64_t)sl_get_u64(p + 8 * (size_t)c);
        if (v->due[c] >= 0)
            get_floats(corr + 4 * v->comps[c].offset, v->corr + v->comps[c].offset,
                       v->comps[c].count);
    }
    return SL_OK;
}
