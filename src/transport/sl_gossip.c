/* The gossip push/collect of one component over the transport, and the checks of
 * received floats for values that would poison a model (NaN, infinities). */
#include "transport/sl_gossip.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"

/* Ranks in list are < n, not me, and distinct. */
static sl_status_t
check_ranks(const uint32_t *list, size_t len, uint32_t me, uint32_t n, const char *what)
{
    for (size_t i = 0; i < len; i++) {
        if (list[i] >= n || list[i] == me)
            return sl_err_set(SL_ERR_INVALID, "gossip exchange: rank %u: %s[%zu] = %u",
                              (unsigned)me, what, i, (unsigned)list[i]);
        for (size_t j = 0; j < i; j++)
            if (list[j] == list[i])
                return sl_err_set(SL_ERR_INVALID, "gossip exchange: rank %u: rank %u twice in %s",
                                  (unsigned)me, (unsigned)list[i], what);
    }
    return SL_OK;
}

/* Bit 31 of the result is set when the exponent of float bits u is all ones (Inf or
 * NaN): integer arithmetic OR-ed over a block of a fixed size, which gcc -O2
 * vectorises, where a comparison per float stays scalar (the check was the slowest
 * pass of a gossip receive). */
static inline uint32_t
nonfinite_bit(uint32_t u)
{
    return (u & 0x7f800000u) + 0x00800000u;
}

#define CHECK_BLOCK_FLOATS 1024u

/* The OR of nonfinite_bit over the n floats at x (any alignment); inlined with n =
 * CHECK_BLOCK_FLOATS, a constant, for the blocks that gcc vectorises. */
static inline uint32_t
nonfinite_run(const float *x, size_t n)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= nonfinite_bit(u);
    }
    return bad;
}

int
sl_floats_finite(const float *x, size_t n)
{
    uint32_t bad = 0;
    size_t i = 0;

    for (; i + CHECK_BLOCK_FLOATS <= n; i += CHECK_BLOCK_FLOATS)
        bad |= nonfinite_run(x + i, CHECK_BLOCK_FLOATS);
    bad |= nonfinite_run(x + i, n - i);
    return !(bad & 0x80000000u);
}

int
sl_floats_copy_finite(float *restrict dst, const void *restrict src, size_t n)
{
    const unsigned char *s = src;
    uint32_t bad = 0;
    size_t i = 0;

    /* each block is checked where it landed, while it is in L1 */
    for (; i + CHECK_BLOCK_FLOATS <= n; i += CHECK_BLOCK_FLOATS) {
        memcpy(dst + i, s + i * sizeof(float), CHECK_BLOCK_FLOATS * sizeof(float));
        bad |= nonfinite_run(dst + i, CHECK_BLOCK_FLOATS);
    }
    memcpy(dst + i, s + i * sizeof(float), (n - i) * sizeof(float));
    bad |= nonfinite_run(dst + i, n - i);
    return !(bad & 0x80000000u);
}

sl_status_t
sl_gossip_take_snapshot(sl_transport_t *t, sl_transport_frame_t *f, const sl_codec_t *codec,
                        unsigned enc, float *dst, size_t count)
{
    char what[96];

    if (f->h.encoding != enc || f->h.count != count) {
        snprintf(what, sizeof what, "%u %s elements, expected %zu %s", (unsigned)f->h.count,
                 sl_wire_encoding_name(f->h.encoding), count, sl_wire_encoding_name(enc));
        sl_transport_refuse(t, &f, SL_DROP_BAD_SIZE, what);
        return SL_ERR_INVALID;
    }
    if (codec) {
        if (codec->decode(codec->ctx, f->h.scale, f->payload, f->h.payload_bytes, dst, count) !=
            SL_OK) {
            sl_transport_refuse(t, &f, SL_DROP_BAD_SIZE, sl_err_msg());
            return SL_ERR_INVALID;
        }
    } else if (!sl_floats_copy_finite(dst, f->payload, count)) {
        sl_transport_refuse(t, &f, SL_DROP_NONFINITE, "snapshot left out of the average");
        return SL_ERR_INVALID;
    }
    if (codec && !sl_floats_finite(dst, count)) {
        sl_transport_refuse(t, &f, SL_DROP_NONFINITE, "snapshot left out of the average");
        return SL_ERR_INVALID;
    }
    return SL_OK;
}

sl_status_t
sl_gossip_exchange(sl_transport_t *t, uint32_t component, uint64_t round, const float *mine,
                   size_t count, const uint32_t *pullers, size_t npullers, const uint32_t *chosen,
                   size_t nchosen, float *recv, uint32_t *from, size_t *got, int timeout_ms)
{
    return sl_gossip_exchange_coded(t, component, round, mine, count, NULL, pullers, npullers,
                                    chosen, nchosen, recv, from, got, timeout_ms);
}

sl_status_t
sl_gossip_exchange_coded(sl_transport_t *t, uint32_t component, uint64_t round, const float *mine,
                         size_t count, const sl_codec_t *codec, const uint32_t *pullers,
                         size_t npullers, const uint32_t *chosen, size_t nchosen, float *recv,
                         uint32_t *from, size_t *got, int timeout_ms)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    unsigned enc = codec ? codec->encoding : SL_WIRE_FP32;
    size_t elem = sl_wire_element_bytes(enc);
    sl_wire_key_t *keys = NULL;
    unsigned char *coded = NULL;
    const void *payload = mine;
    float scale = 1.0f;
    size_t left = nchosen;
    double deadline = sl_clock_now() + timeout_ms / 1000.0;
    sl_status_t st = SL_OK;

    *got = 0;
    if (count > SL_WIRE_MAX_PAYLOAD / sizeof(float) || timeout_ms < 0 || elem == 0 ||
        (codec && (!codec->scale || !codec->encode || !codec->decode)))
        return sl_err_set(SL_ERR_INVALID,
                          "gossip exchange: %zu floats (max %" PRIu64 " per frame), "
                          "timeout %d ms, encoding %u",
                          count, SL_WIRE_MAX_PAYLOAD / sizeof(float), timeout_ms, enc);
    SL_TRY(check_ranks(pullers, npullers, me, n, "pullers"));
    SL_TRY(check_ranks(chosen, nchosen, me, n, "chosen"));
    if (codec && npullers > 0) {
        if (!(coded = malloc(count * elem + 1)))
            return sl_err_set(SL_ERR_NOMEM, "gossip exchange: out of memory");
        scale = codec->scale(codec->ctx, mine, count);
        codec->encode(codec->ctx, scale, mine, count, coded);
        payload = coded;
    }
    for (size_t i = 0; i < npullers; i++) {
        sl_wire_key_t key = {round, component, 0, pullers[i], SL_WIRE_GOSSIP_SNAPSHOT};
        /* copied, not lent: a push to a dead puller may stay queued */
        st = sl_transport_send(t, &key, payload, (uint32_t)count, enc, scale, 0, 0);
        if (st == SL_ERR_TIMEOUT)
            sl_log_warn("gossip", "rank %u: push to rank %u skipped: %s", (unsigned)me,
                        (unsigned)pullers[i], sl_err_msg());
        else if (st != SL_OK)
            goto out;
    }
    st = SL_OK;
    if (nchosen == 0)
        goto out;
    keys = malloc(nchosen * sizeof *keys);
    if (!keys) {
        st = sl_err_set(SL_ERR_NOMEM, "gossip exchange: out of memory");
        goto out;
    }
    for (size_t i = 0; i < nchosen; i++)
        keys[i] = (sl_wire_key_t){round, component, 0, chosen[i], SL_WIRE_GOSSIP_SNAPSHOT};
    while (left > 0) {
        sl_transport_frame_t *f;
        size_t which;
        double wait = deadline - sl_clock_now();

        st = sl_transport_recv_any(t, keys, left, wait > 0 ? (int)(wait * 1000.0) : 0, &f, &which);
        if (st == SL_ERR_TIMEOUT)
            break;
        if (st != SL_OK)
            goto out;
        keys[which] = keys[--left]; /* this sender's one snapshot of the round */
        st = sl_gossip_take_snapshot(t, f, codec, enc, recv + *got * count, count);
        if (st == SL_ERR_INVALID)
            continue; /* refused: left out of this round, as if it had not answered */
        if (st != SL_OK) {
            sl_transport_frame_release(&f);
            goto out;
        }
        if (from)
            from[*got] = f->h.sender;
        ++*got;
        sl_transport_frame_release(&f);
    }
    st = *got == nchosen
             ? SL_OK
             : sl_err_set(SL_ERR_TIMEOUT,
                          "gossip exchange: rank %u, component %u, round %" PRIu64
                          ": %zu of %zu chosen peers answered within %d ms",
                          (unsigned)me, (unsigned)component, round, *got, nchosen, timeout_ms);
out:
    free(keys);
    free(coded);
    return st;
}
