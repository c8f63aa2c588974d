/* Block quantizers with error feedback and top-k (sl_quant.h), on the payload layout of
 * transport/sl_wire_quant.h. */
#include "embed/sl_quant.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_endian.h"
#include "common/sl_half.h"
#include "common/sl_rng.h"
#include "transport/sl_wire.h"
#include "transport/sl_wire_quant.h"

struct sl_quant {
    sl_quant_opts_t o;
    unsigned wire; /* SL_WIRE_INT8 / INT4 */
    int qmax;      /* 127 / 7 */
    size_t max_n;
    float *v;       /* (max_n) the values encoded: x + resid */
    float *deq;     /* (max_n) what the receiver decodes, for the feedback */
    uint64_t *keys; /* (max_n) top-k work */
    uint32_t *idx;  /* (max_n) the entries sent (top-k) or received (sparse) */
};

sl_quant_opts_t
sl_quant_opts_from_config(const sl_config_t *cfg)
{
    sl_quant_opts_t o = {cfg->sync.compression, (uint32_t)cfg->sync.quant_block, cfg->sync.rounding,
                         cfg->sync.topk};
    return o;
}

sl_status_t
sl_quant_new(sl_quant_t **out, const sl_quant_opts_t *o, size_t max_n)
{
    sl_quant_t *q;
    sl_status_t st;

    *out = NULL;
    if ((o->enc != SL_COMPRESS_INT8 && o->enc != SL_COMPRESS_INT4) || o->block < 1 ||
        o->block > SL_WIRE_QUANT_MAX_BLOCK || max_n > UINT32_MAX || !(o->topk >= 0))
        return sl_err_set(SL_ERR_INVALID, "quantizer: encoding %s, block %u, %zu values",
                          sl_compress_name(o->enc), (unsigned)o->block, max_n);
    SL_TRY(SL_CALLOC(&q, 1, "quantizer"));
    q->o = *o;
    q->wire = o->enc == SL_COMPRESS_INT8 ? SL_WIRE_INT8 : SL_WIRE_INT4;
    q->qmax = sl_wire_quant_max(q->wire);
    q->max_n = max_n;
    if (max_n == 0)
        max_n = 1;
    SL_TRY_GOTO(SL_ALLOC(&q->v, max_n, "quantizer"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&q->deq, max_n, "quantizer"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&q->idx, max_n, "quantizer"), st, fail);
    if (o->topk > 0 && o->topk < 1)
        SL_TRY_GOTO(SL_ALLOC(&q->keys, max_n, "quantizer"), st, fail);
    *out = q;
    return SL_OK;
fail:
    sl_quant_destroy(&q);
    return st;
}

void
sl_quant_destroy(sl_quant_t **qp)
{
    sl_quant_t *q = qp ? *qp : NULL;

    if (!q)
        return;
    sl_free(q->v);
    sl_free(q->deq);
    sl_free(q->keys);
    sl_free(q->idx);
    sl_free(q);
    *qp = NULL;
}

unsigned
sl_quant_wire_encoding(const sl_quant_t *q)
{
    return q->wire;
}

size_t
sl_quant_entries(const sl_quant_t *q, size_t n)
{
    size_t k;

    if (!(q->o.topk > 0 && q->o.topk < 1) || n == 0)
        return n;
    k = (size_t)ceil(q->o.topk * (double)n);
    return k < 1 ? 1 : k > n ? n : k;
}

size_t
sl_quant_max_bytes(const sl_quant_t *q, size_t n)
{
    size_t k = sl_quant_entries(q, n), dense, sparse;

    dense = sl_wire_quant_bytes(q->wire, q->o.block, (uint32_t)n, 0);
    sparse = sl_wire_quant_bytes(q->wire, q->o.block, (uint32_t)k,
                                 k < n ? k * SL_WIRE_QUANT_MAX_GAP_BYTES : 0);
    return dense > sparse ? dense : sparse;
}

/* The key of entry i: ascending keys are descending |x|, then ascending index. The
 * bits of a finite |x| order as its value does. */
static uint64_t
topk_key(float x, uint32_t i)
{
    return (uint64_t)(0xffffffffu - sl_f32_bits(fabsf(x))) << 32 | i;
}

static void
swap_u64(uint64_t *a, uint64_t *b)
{
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k smallest of keys[0 .. n-1] (all distinct) to the front, any order
 * (quickselect, median-of-three pivot; distinct keys make the set unique). */
static void
select_smallest(uint64_t *keys, size_t n, size_t k)
{
    size_t lo = 0, hi = n;

    while (hi - lo > 1 && k > lo && k < hi) {
        size_t mid = lo + (hi - lo) / 2, i = lo;
        uint64_t a = keys[lo], b = keys[mid], c = keys[hi - 1], pivot;

        pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        for (size_t j = lo; j < hi; j++) /* Lomuto: keys < pivot first */
            if (keys[j] < pivot)
                swap_u64(&keys[i++], &keys[j]);
        for (size_t j = i; j < hi; j++) /* then the pivot itself */
            if (keys[j] == pivot) {
                swap_u64(&keys[i], &keys[j]);
                break;
            }
        if (k <= i)
            hi = i;
        else
            lo = i + 1;
    }
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void
sl_quant_topk(const float *x, size_t n, size_t k, uint64_t *keys, uint32_t *idx)
{
    for (size_t i = 0; i < n; i++)
        keys[i] = topk_key(x[i], (uint32_t)i);
    select_smallest(keys, n, k);
    for (size_t j = 0; j < k; j++)
        idx[j] = (uint32_t)keys[j];
    qsort(idx, k, sizeof *idx, cmp_u32);
}

/* q of t = x / s, |t| <= qmax up to rounding: nearest (ties to even) or t's floor plus
 * one with probability frac(t) (unbiased: E q = t). */
static int
round_value(const sl_quant_t *q, float t, uint64_t key, uint64_t i)
{
    float r;

    if (q->o.rounding == SL_ROUNDING_STOCHASTIC) {
        float f = floorf(t);
        r = f + (sl_rng_float_at(key, i) < t - f ? 1.0f : 0.0f);
    } else {
        r = rintf(t);
    }
    if (r > (float)q->qmax)
        r = (float)q->qmax;
    if (r < (float)-q->qmax)
        r = (float)-q->qmax;
    return (int)r;
}

/* The scale of one block whose largest |value| is m: m / qmax, kept a normal float > 0
 * (an all-zero block gets 1: any positive scale decodes its zeros). */
static float
block_scale(const sl_quant_t *q, float m)
{
    float s = m / (float)q->qmax;

    if (!(s >= FLT_MIN))
        s = m > 0.0f ? FLT_MIN : 1.0f;
    return s;
}

sl_status_t
sl_quant_encode(sl_quant_t *q, const float *x, float *resid, size_t n, uint64_t base, uint64_t key,
                void *out, size_t cap, size_t *bytes)
{
    unsigned char *p = out, *scales, *values;
    size_t k, ib = 0, nblocks, total;
    int sparse;
    sl_wire_quant_t h;

    if (n > q->max_n || cap < sl_quant_max_bytes(q, n))
        return sl_err_set(SL_ERR_INVALID, "quantizer: %zu values (max %zu), %zu bytes of room", n,
                          q->max_n, cap);
    for (size_t i = 0; i < n; i++) {
        q->v[i] = resid ? x[i] + resid[i] : x[i];
        if (!isfinite(q->v[i]))
            return sl_err_set(SL_ERR_INVALID, "quantizer: value %zu is %g", i, (double)q->v[i]);
    }
    k = sl_quant_entries(q, n);
    sparse = k < n;
    if (sparse) {
        uint32_t prev = 0;
        sl_quant_topk(q->v, n, k, q->keys, q->idx);
        for (size_t j = 0; j < k; j++) {
            ib += sl_wire_quant_put_gap(p + SL_WIRE_QUANT_HEAD_BYTES + ib,
                                        q->idx[j] - (j ? prev + 1 : 0));
            prev = q->idx[j];
        }
    }
    h = (sl_wire_quant_t){(uint32_t)n, q->o.block, (uint32_t)k, (uint32_t)ib, base, 0, 0, 0};
    sl_wire_quant_put_head(p, &h);
    nblocks = (k + q->o.block - 1) / q->o.block;
    scales = p + SL_WIRE_QUANT_HEAD_BYTES + ib;
    values = scales + 4 * nblocks;
    total = sl_wire_quant_bytes(q->wire, q->o.block, (uint32_t)k, ib);
    memset(values, 0, sl_wire_quant_value_bytes(q->wire, k));
    for (size_t b = 0; b < nblocks; b++) {
        size_t j0 = b * q->o.block, j1 = j0 + q->o.block < k ? j0 + q->o.block : k;
        float m = 0.0f, s;

        for (size_t j = j0; j < j1; j++) {
            float a = fabsf(q->v[sparse ? q->idx[j] : j]);
            if (a > m)
                m = a;
        }
        s = block_scale(q, m);
        sl_put_u32(scales + 4 * b, sl_f32_bits(s));
        for (size_t j = j0; j < j1; j++) {
            size_t i = sparse ? q->idx[j] : j;
            int v = round_value(q, q->v[i] / s, key, i);

            if (q->wire == SL_WIRE_INT8)
                values[j] = (unsigned char)(int8_t)v;
            else
                values[j / 2] |= (unsigned char)((unsigned)(v & 0xf) << (4 * (j % 2)));
        }
    }
    *bytes = total;
    if (resid) {
        /* what the receiver gets, by the receiver's own code */
        SL_TRY(sl_quant_decode(q, q->wire, out, total, n, q->deq, 0, NULL));
        for (size_t i = 0; i < n; i++)
            resid[i] = q->v[i] - q->deq[i];
    }
    return SL_OK;
}

/* Value j of a checked payload: q_j * scale_(j / block), rounded once to fp32. */
static float
value_at(unsigned wire, const sl_wire_quant_t *h, size_t j)
{
    float s = sl_f32_from_bits(sl_get_u32(h->scales + 4 * (j / h->block)));
    int v;

    if (wire == SL_WIRE_INT8) {
        v = (int8_t)h->values[j];
    } else {
        v = (h->values[j / 2] >> (4 * (j % 2))) & 0xf;
        if (v >= 8)
            v -= 16;
    }
    return (float)v * s;
}

sl_status_t
sl_quant_decode(sl_quant_t *q, unsigned encoding, const void *payload, size_t bytes, size_t n,
                float *x, int add, uint64_t *base)
{
    sl_wire_quant_t h;
    int sparse;

    if (encoding != q->wire)
        return sl_err_set(SL_ERR_FORMAT, "quantized payload: %s, expected %s",
                          sl_wire_encoding_name(encoding), sl_wire_encoding_name(q->wire));
    if (n > q->max_n)
        return sl_err_set(SL_ERR_FORMAT, "quantized payload: %zu values, at most %zu here", n,
                          q->max_n);
    SL_TRY(sl_wire_quant_parse(encoding, payload, bytes, (uint32_t)n, &h, q->idx));
    sparse = h.entries < n;
    if (!add && sparse)
        memset(x, 0, n * sizeof *x);
    for (size_t j = 0; j < h.entries; j++) {
        size_t i = sparse ? q->idx[j] : j;
        float d = value_at(encoding, &h, j);

        x[i] = add ? x[i] + d : d;
    }
    if (base)
        *base = h.base;
    return SL_OK;
}
