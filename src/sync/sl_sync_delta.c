/* Per-link quantized deltas with mirrors (sl_sync_delta.h). Symbols: theta (this
 * node's copy of a component), out[j] / in[j] (the mirrors of link j). Must not average
 * nor decide who talks to whom: sl_sync_average.c does, from the gossip schedule. */
#include "sync/sl_sync_delta.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "embed/sl_quant.h"
#include "topology/sl_ring.h"
#include "transport/sl_gossip.h"
#include "transport/sl_wire_quant.h"

#define NO_ROUND UINT64_MAX /* a mirror that holds nothing valid yet */

struct sl_sync_delta {
    sl_sync_env_t env;
    uint64_t seed;
    sl_quant_t *q;
    int links;
    int *nb;                /* (links) the ring neighbours, ascending */
    float *out, *in;        /* (links, nparams) the mirrors */
    uint64_t *out_round;    /* (links, ncomps) round of the last push on the link */
    uint64_t *out_pushes;   /* (links, ncomps) pushes on the link since its keyframe */
    uint64_t *in_round;     /* (links, ncomps) round of the last message taken */
    uint32_t *comebacks;    /* (links) the neighbour's new processes seen (hellos) */
    float *diff;            /* (max_count) theta - out[j] */
    unsigned char *payload; /* (max_bytes) one message */
    size_t max_bytes;
    sl_wire_key_t *keys; /* (links) the chosen ones' messages still awaited */
    int warned_base;     /* the base warning is logged once */
};

sl_status_t
sl_sync_delta_new(sl_sync_delta_t **out, const sl_sync_env_t *env, const sl_config_t *cfg, int k,
                  size_t max_count)
{
    sl_quant_opts_t qo = sl_quant_opts_from_config(cfg);
    sl_sync_delta_t *d;
    size_t lc, lp;
    int cnt;
    sl_status_t st;

    *out = NULL;
    SL_TRY(SL_CALLOC(&d, 1, "delta exchange"));
    d->env = *env;
    d->seed = cfg->run.seed;
    SL_TRY_GOTO(sl_ring_links(env->size, k, &d->links), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&d->nb, (size_t)d->links, "delta exchange"), st, fail);
    SL_TRY_GOTO(sl_ring_neighbours(env->size, k, env->rank, d->nb, d->links, &cnt), st, fail);
    SL_TRY_GOTO(sl_quant_new(&d->q, &qo, max_count), st, fail);
    lp = (size_t)d->links * env->nparams;
    lc = (size_t)d->links * (size_t)env->ncomps;
    SL_TRY_GOTO(SL_ALLOC(&d->out, lp, "delta mirrors"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&d->in, lp, "delta mirrors"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&d->out_round, lc, "delta exchange"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&d->out_pushes, lc, "delta exchange"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&d->in_round, lc, "delta exchange"), st, fail);
    for (size_t i = 0; i < lc; i++)
        d->in_round[i] = NO_ROUND;
    SL_TRY_GOTO(SL_ALLOC(&d->diff, max_count ? max_count : 1, "delta exchange"), st, fail);
    d->max_bytes = sl_quant_max_bytes(d->q, max_count);
    SL_TRY_GOTO(SL_ALLOC(&d->payload, d->max_bytes, "delta exchange"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&d->keys, (size_t)d->links, "delta exchange"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&d->comebacks, (size_t)d->links, "delta exchange"), st, fail);
    for (int j = 0; j < d->links; j++)
        d->comebacks[j] = sl_transport_comebacks(env->tr, (uint32_t)d->nb[j]);
    *out = d;
    return SL_OK;
fail:
    sl_sync_delta_destroy(&d);
    return st;
}

void
sl_sync_delta_destroy(sl_sync_delta_t **dp)
{
    sl_sync_delta_t *d = dp ? *dp : NULL;

    if (!d)
        return;
    sl_quant_destroy(&d->q);
    sl_free(d->nb);
    sl_free(d->out);
    sl_free(d->in);
    sl_free(d->out_round);
    sl_free(d->out_pushes);
    sl_free(d->in_round);
    sl_free(d->diff);
    sl_free(d->payload);
    sl_free(d->keys);
    sl_free(d->comebacks);
    sl_free(d);
    *dp = NULL;
}

/* The link of rank r, -1 when r is no neighbour. */
static int
link_of(const sl_sync_delta_t *d, uint32_t r)
{
    for (int j = 0; j < d->links; j++)
        if ((uint32_t)d->nb[j] == r)
            return j;
    return -1;
}

/* The payload of a keyframe: the weights themselves, in fp32, which the puller's mirror
 * becomes. Not quantized: that would round whole weights, not a change, and put the
 * error (at int4 some percent of a weight) into the puller's average of that round.
 * SL_ERR_INVALID when theta is not finite (the mirror then holds part of it, which the
 * next push, a keyframe again, overwrites). */
static sl_status_t
encode_keyframe(const float *theta, size_t n, float *mirror, const void **payload, uint32_t *count,
                unsigned *encoding)
{
    if (!sl_floats_copy_finite(mirror, theta, n))
        return sl_err_set(SL_ERR_INVALID, "the weights are not finite");
    *payload = theta;
    *count = (uint32_t)n;
    *encoding = SL_WIRE_FP32;
    return SL_OK;
}

/* The payload of a delta: the change of theta since the puller's mirror, quantized
 * against base, and the mirror moves by what the puller will decode. SL_ERR_INVALID
 * when theta is not finite. */
static sl_status_t
encode_delta(sl_sync_delta_t *d, const sl_wire_key_t *key, uint64_t base, const float *theta,
             size_t n, float *mirror, const void **payload, uint32_t *count, unsigned *encoding)
{
    uint64_t kw[5] = {d->seed, 'Q', key->component, key->round,
                      (uint64_t)d->env.rank << 32 | key->peer};
    size_t bytes;

    for (size_t i = 0; i < n; i++)
        d->diff[i] = theta[i] - mirror[i];
    SL_TRY(sl_quant_encode(d->q, d->diff, NULL, n, base, sl_hash_u64s(kw, 5), d->payload,
                           d->max_bytes, &bytes));
    *encoding = sl_quant_wire_encoding(d->q);
    SL_TRY(sl_quant_decode(d->q, *encoding, d->payload, bytes, n, mirror, 1, NULL));
    *payload = d->payload;
    *count = (uint32_t)bytes;
    return SL_OK;
}

/* One push of component c at round to puller p (link j): every
 * SL_SYNC_DELTA_KEYFRAME_PUSHES-th a keyframe, else a delta. A push that cannot be
 * queued is skipped, and the next one on the link is a keyframe. */
static sl_status_t
push(sl_sync_delta_t *d, int c, uint64_t round, const float *theta, uint32_t p, int j)
{
    const sl_component_t *cp = &d->env.comps[c];
    size_t n = cp->count, at = (size_t)j * (size_t)d->env.ncomps + (size_t)c;
    float *mirror = d->out + (size_t)j * d->env.nparams + cp->offset;
    sl_wire_key_t key = {round, (uint32_t)c, 0, p, SL_WIRE_GOSSIP_SNAPSHOT};
    uint32_t back = sl_transport_comebacks(d->env.tr, p), count = 0;
    const void *payload = NULL;
    unsigned enc = 0;
    sl_status_t st;

    if (back != d->comebacks[j]) { /* a new process for p holds nothing of ours: keyframes */
        d->comebacks[j] = back;
        for (int k = 0; k < d->env.ncomps; k++)
            d->out_pushes[(size_t)j * (size_t)d->env.ncomps + (size_t)k] = 0;
    }
    if (d->out_pushes[at] % SL_SYNC_DELTA_KEYFRAME_PUSHES == 0)
        st = encode_keyframe(theta, n, mirror, &payload, &count, &enc);
    else
        st = encode_delta(d, &key, d->out_round[at], theta, n, mirror, &payload, &count, &enc);
    if (st == SL_ERR_INVALID) { /* a model that is not finite: the pullers go without it */
        sl_log_warn("gossip", "rank %d: %s round %" PRIu64 ": push to rank %u skipped: %s",
                    d->env.rank, cp->name, round, (unsigned)p, sl_err_msg());
        return SL_OK;
    }
    SL_TRY(st);
    st = sl_transport_send(d->env.tr, &key, payload, count, enc, 1.0f, 0, 0);
    if (st == SL_ERR_TIMEOUT) {
        sl_log_warn("gossip", "rank %d: push to rank %u skipped: %s", d->env.rank, (unsigned)p,
                    sl_err_msg());
        d->out_pushes[at] = 0; /* the puller's mirror is behind: start again */
        return SL_OK;
    }
    SL_TRY(st);
    d->out_round[at] = round;
    d->out_pushes[at]++;
    return SL_OK;
}

/* A received message f of component c at round from link j into row (count floats):
 * SL_OK when taken, SL_ERR_INVALID when left out (f released either way). */
static sl_status_t
take(sl_sync_delta_t *d, int c, uint64_t round, sl_transport_frame_t *f, int j, float *row)
{
    const sl_component_t *cp = &d->env.comps[c];
    size_t n = cp->count, at = (size_t)j * (size_t)d->env.ncomps + (size_t)c;
    float *mirror = d->in + (size_t)j * d->env.nparams + cp->offset;
    sl_wire_quant_t h;
    sl_status_t st;

    if (f->h.encoding == SL_WIRE_FP32) { /* a keyframe: an fp32 snapshot, checked as one */
        SL_TRY(sl_gossip_take_snapshot(d->env.tr, f, NULL, SL_WIRE_FP32, row, n));
        sl_transport_frame_release(&f);
        memcpy(mirror, row, n * sizeof *mirror);
        d->in_round[at] = round;
        return SL_OK;
    }
    if (f->h.encoding != sl_quant_wire_encoding(d->q) ||
        sl_wire_quant_parse(f->h.encoding, f->payload, f->h.payload_bytes, (uint32_t)n, &h, NULL) !=
            SL_OK) {
        char what[160];
        snprintf(what, sizeof what, "%s delta of %s: %s", sl_wire_encoding_name(f->h.encoding),
                 cp->name,
                 f->h.encoding == sl_quant_wire_encoding(d->q) ? sl_err_msg() : "not this run's");
        sl_transport_refuse(d->env.tr, &f, SL_DROP_BAD_SIZE, what);
        return SL_ERR_INVALID;
    }
    if (h.base != d->in_round[at] || h.base == NO_ROUND) {
        /* a push this node missed: not the sender's fault; its keyframe will mend it */
        if (!d->warned_base++)
            sl_log_warn("gossip",
                        "rank %d: %s round %" PRIu64 ": rank %u's delta is against round %" PRIu64
                        ", this node's copy is of another: left out until its next keyframe",
                        d->env.rank, cp->name, round, (unsigned)f->h.sender, h.base);
        sl_transport_frame_release(&f);
        return SL_ERR_INVALID;
    }
    st = sl_quant_decode(d->q, f->h.encoding, f->payload, f->h.payload_bytes, n, mirror, 1, NULL);
    sl_transport_frame_release(&f);
    SL_TRY(st); /* parsed above: cannot fail */
    d->in_round[at] = round;
    memcpy(row, mirror, n * sizeof *row);
    return SL_OK;
}

sl_status_t
sl_sync_delta_exchange(sl_sync_delta_t *d, int c, uint64_t round, const float *theta,
                       const uint32_t *pullers, size_t npullers, const uint32_t *chosen,
                       size_t nchosen, float *recv, uint32_t *from, size_t *got)
{
    const sl_sync_env_t *e = &d->env;
    size_t count = e->comps[c].count, left = nchosen;
    double deadline = sl_clock_now() + e->timeout_ms / 1000.0;

    *got = 0;
    if (npullers > (size_t)d->links || nchosen > (size_t)d->links)
        return sl_err_set(SL_ERR_INVALID, "sync delta: %zu pullers, %zu chosen of %d links",
                          npullers, nchosen, d->links);
    for (size_t i = 0; i < npullers; i++) {
        int j = link_of(d, pullers[i]);
        if (j < 0)
            return sl_err_set(SL_ERR_INVALID, "sync delta: puller %u is no neighbour of rank %d",
                              (unsigned)pullers[i], e->rank);
        SL_TRY(push(d, c, round, theta, pullers[i], j));
    }
    for (size_t i = 0; i < nchosen; i++) {
        if (link_of(d, chosen[i]) < 0)
            return sl_err_set(SL_ERR_INVALID, "sync delta: chosen %u is no neighbour of rank %d",
                              (unsigned)chosen[i], e->rank);
        d->keys[i] = (sl_wire_key_t){round, (uint32_t)c, 0, chosen[i], SL_WIRE_GOSSIP_SNAPSHOT};
    }
    while (left > 0) {
        sl_transport_frame_t *f;
        size_t which;
        uint32_t sender;
        double wait = deadline - sl_clock_now();
        sl_status_t st;

        st = sl_transport_recv_any(e->tr, d->keys, left, wait > 0 ? (int)(wait * 1000.0) : 0, &f,
                                   &which);
        if (st == SL_ERR_TIMEOUT)
            break;
        SL_TRY(st);
        d->keys[which] = d->keys[--left];
        sender = f->h.sender;
        st = take(d, c, round, f, link_of(d, sender), recv + *got * count);
        if (st == SL_ERR_INVALID)
            continue;
        SL_TRY(st);
        if (from)
            from[*got] = sender;
        ++*got;
    }
    if (*got == nchosen)
        return SL_OK;
    return sl_err_set(SL_ERR_TIMEOUT,
                      "sync delta: rank %d, %s round %" PRIu64 ": %zu of %zu chosen peers answered "
                      "within %d ms",
                      e->rank, e->comps[c].name, round, *got, nchosen, e->timeout_ms);
}
