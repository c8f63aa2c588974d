/* Sync algorithms per component over the transport: the allreduce of gradients, the
 * model averages (allreduce, ring neighbours, gossip schedule) with MA or BMUF on top,
 * whole or by touched rows, compressed or not, dead-neighbour bookkeeping and the final
 * average (see sl_sync.h). */
#include "sync/sl_sync.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "embed/sl_compress.h"
#include "embed/sl_sparse.h"
#include "embed/sl_sparse_allreduce.h"
#include "sync/sl_bmuf.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "transport/sl_collective.h"

/* The final gather's frames (SL_WIRE_DATA, final_walk): round FINAL_ROUND; component c
 * of a node's model as component c, a confirmation (one byte: 1 = in the average, 0 =
 * gathered without it) and a claim (no payload) as the two past them */
#define FINAL_ROUND 1u
#define FINAL_ACK(s) ((uint32_t)(s)->ncomps)
#define FINAL_CLAIM(s) ((uint32_t)(s)->ncomps + 1u)

struct sl_sync {
    sl_sync_algorithm_t algo;
    sl_transport_t *tr; /* borrowed */
    int rank, size;
    const sl_component_t *comps; /* borrowed */
    int ncomps;
    size_t nparams, max_count;
    int *period; /* (ncomps) H_i */
    int timeout_ms;
    sl_bmuf_opts_t bmuf;
    int is_bmuf;   /* bmuf, local-bmuf, gossip-bmuf */
    int neighbour; /* local-*, gossip-*: average over a neighbourhood, not everyone */
    sl_schedule_t sched;
    float *omega, *delta, *start;       /* (nparams) each, *bmuf only */
    float *bar;                         /* (max_count) the average of one component */
    float *recv;                        /* (picks, max_count) snapshots received */
    float *avg, *peer;                  /* (nparams) final average; a peer's model (rank 0) */
    int *ichosen, *ipullers;            /* (links) from the schedule */
    uint32_t *chosen, *pullers, *from;  /* (links) after leaving out the dead */
    int *missed;                        /* (size) sync steps missed in a row, per rank */
    unsigned char *dead, *told;         /* (size) taken for dead; reported missing */
    unsigned char *step_miss, *step_ok; /* (size) in this sync step: missed / answered */
    int ndead;
    double step_end; /* sl_clock_now() when the last step's tally was made (end_step) */
    sl_sync_stat_t *stat; /* (ncomps) */
    double time_s;
    /* row shards (sl_sparse.h, sl_sparse_allreduce.h) */
    sl_exchange_t exchange;
    double top_pct, random_pct; /* exchange_top, exchange_random */
    uint64_t seed;
    sl_rowset_t *touched;        /* (ncomps) U_k since the last sync; row shards only */
    int32_t *sel;                /* (max_rows) E_k, or the absolute rows (allreduce) */
    sl_sparse_t *sparse;         /* unique exchange in the model-averaging algorithms */
    sl_sparse_allreduce_t **sar; /* (ncomps) allreduce mode, unique or allgather */
    uint32_t *asked;             /* (links) pullers answered by a sparse exchange */
    /* compression: codec is NULL for fp32 (frames lent as they are) */
    sl_compress_t compress;
    double compress_scale;
    sl_codec_t codec_store;
    const sl_codec_t *codec;
};

static int
is_bmuf(sl_sync_algorithm_t a)
{
    return a == SL_SYNC_BMUF || a == SL_SYNC_LOCAL_BMUF || a == SL_SYNC_GOSSIP_BMUF;
}

static int
is_neighbourhood(sl_sync_algorithm_t a)
{
    return a == SL_SYNC_LOCAL_MA || a == SL_SYNC_LOCAL_BMUF || a == SL_SYNC_GOSSIP_MA ||
           a == SL_SYNC_GOSSIP_BMUF;
}

/* Whether name b is the shard after name a: "x.N" then "x.N+1". */
static int
next_shard(const char *a, const char *b)
{
    const char *da = strrchr(a, '.'), *db = strrchr(b, '.');

    if (!da || !db || da - a != db - b || strncmp(a, b, (size_t)(da - a)) != 0)
        return 0;
    if (!da[1] || !db[1] || strspn(da + 1, "0123456789") != strlen(da + 1) ||
        strspn(db + 1, "0123456789") != strlen(db + 1))
        return 0;
    return atol(db + 1) == atol(da + 1) + 1;
}

/* "embedding.0 to embedding.7, lstm.0, lstm.1" into buf (n bytes, cut when full): the
 * names of the components c with pick[c] != 0, a run of three or more shards of one
 * table as its first and last, so that 1024 shards still make a short message. */
static void
list_names(const sl_sync_t *s, const unsigned char *pick, char *buf, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int c = 0; c < s->ncomps && used < n; c++) {
        int last = c;
        const char *sep = used ? ", " : "";

        if (!pick[c])
            continue;
        while (last + 1 < s->ncomps && pick[last + 1] &&
               next_shard(s->comps[last].name, s->comps[last + 1].name))
            last++;
        if (last - c >= 2) {
            used += (size_t)snprintf(buf + used, n - used, "%s%s to %s", sep, s->comps[c].name,
                                     s->comps[last].name);
            c = last;
        } else {
            used += (size_t)snprintf(buf + used, n - used, "%s%s", sep, s->comps[c].name);
        }
    }
}

/* H_i of every component: the period of the first sync.periods rule whose glob matches
 * its name, else sync.embedding_period (0: sync.period) for a row shard and sync.period
 * for the others. A rule that gives no component its period, because its glob matches
 * none or only components an earlier rule took, is a mistake in the config (a typo, or
 * a catch-all put first): SL_ERR_CONFIG naming it. */
static sl_status_t
resolve_periods(sl_sync_t *s, const sl_config_t *cfg)
{
    int nrules = cfg->sync.nperiod_rules;
    int emb = cfg->sync.embedding_period > 0 ? cfg->sync.embedding_period : cfg->sync.period;
    unsigned char used[SL_MAX_PERIOD_RULES] = {0}, *pick;
    char names[640];
    sl_status_t st = SL_OK;

    if (nrules < 0 || nrules > SL_MAX_PERIOD_RULES)
        return sl_err_set(SL_ERR_CONFIG, "sync.periods: %d rules, at most %d allowed", nrules,
                          SL_MAX_PERIOD_RULES);
    SL_TRY(SL_ALLOC(&s->period, (size_t)s->ncomps, "sync periods"));
    for (int c = 0; c < s->ncomps; c++) {
        s->period[c] = s->comps[c].sparse ? emb : cfg->sync.period;
        for (int r = 0; r < nrules; r++) {
            const sl_period_rule_t *rule = &cfg->sync.period_rule[r];
            if (rule->match && fnmatch(rule->match, s->comps[c].name, 0) == 0) {
                s->period[c] = rule->period;
                used[r] = 1;
                break;
            }
        }
        if (s->period[c] < 1)
            return sl_err_set(SL_ERR_CONFIG,
                              "sync: component %s would sync every %d steps: "
                              "periods must be at least 1",
                              s->comps[c].name, s->period[c]);
    }
    for (int r = 0; r < nrules && st == SL_OK; r++) {
        const char *glob = cfg->sync.period_rule[r].match;
        int any = 0;

        if (used[r])
            continue;
        SL_TRY(SL_CALLOC(&pick, (size_t)s->ncomps, "sync periods"));
        for (int c = 0; c < s->ncomps; c++) {
            pick[c] = glob && fnmatch(glob, s->comps[c].name, 0) == 0;
            any |= pick[c];
        }
        if (any) {
            list_names(s, pick, names, sizeof names);
            st = sl_err_set(SL_ERR_CONFIG,
                            "sync.periods[%d]: '%s' matches only components that an earlier "
                            "rule gives a period (%s); put the more specific rule first",
                            r, glob, names);
        } else {
            memset(pick, 1, (size_t)s->ncomps);
            list_names(s, pick, names, sizeof names);
            st = sl_err_set(SL_ERR_CONFIG,
                            "sync.periods[%d]: '%s' matches no component (the model's: %s)", r,
                            glob ? glob : "", names);
        }
        sl_free(pick);
    }
    return st;
}

/* Once, on rank 0, when sync.periods is given: which components sync how often, or
 * that allreduce has no periods. */
static sl_status_t
log_periods(const sl_sync_t *s, const sl_config_t *cfg)
{
    unsigned char *pick;
    char line[1536], names[640];
    size_t used = 0;

    if (cfg->sync.nperiod_rules == 0 || s->rank != 0 || s->algo == SL_SYNC_NONE)
        return SL_OK;
    if (s->algo == SL_SYNC_ALLREDUCE) {
        sl_log_info("sync", "sync.periods is not used by allreduce: it averages the gradients "
                            "of every component every step");
        return SL_OK;
    }
    SL_TRY(SL_ALLOC(&pick, (size_t)s->ncomps, "sync periods"));
    line[0] = '\0';
    for (int c = 0; c < s->ncomps && used < sizeof line; c++) {
        int seen = 0;

        for (int b = 0; b < c; b++)
            seen |= s->period[b] == s->period[c];
        if (seen)
            continue;
        for (int d = 0; d < s->ncomps; d++)
            pick[d] = s->period[d] == s->period[c];
        list_names(s, pick, names, sizeof names);
        used += (size_t)snprintf(line + used, sizeof line - used, "%severy %d steps: %s",
                                 used ? "; " : "", s->period[c], names);
    }
    sl_free(pick);
    sl_log_info("sync", "periods H_i (sync.periods): %s", line);
    return SL_OK;
}

/* Output-embedding shards are the model's "softmax.<s>" (sl_model.h). */
static int
is_output(const sl_component_t *c)
{
    return strncmp(c->name, "softmax", 7) == 0;
}

/* Component c goes by its touched rows (sync.exchange unique or allgather), not whole. */
static int
by_rows(const sl_sync_t *s, int c)
{
    return s->comps[c].sparse && s->exchange != SL_EXCHANGE_DENSE;
}

/* The sync.exchange settings the algorithm can use (doc/config.md). */
static sl_status_t
check_exchange(const sl_config_t *cfg, sl_sync_algorithm_t algo)
{
    const char *a = sl_sync_algorithm_name(algo);
    double top = cfg->sync.exchange_top, rnd = cfg->sync.exchange_random;

    if (cfg->sync.exchange == SL_EXCHANGE_ALLGATHER && algo != SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_CONFIG,
                          "sync: sync.exchange allgather gathers every node's touched gradient "
                          "rows, the baseline of sync.algorithm allreduce; with %s use unique "
                          "or dense",
                          a);
    if (!(top >= 0 && top <= 100) || !(rnd >= 0 && rnd <= 100))
        return sl_err_set(SL_ERR_CONFIG,
                          "sync: sync.exchange_top %g and sync.exchange_random %g must be "
                          "percentages in [0, 100]",
                          top, rnd);
    if ((top > 0 || rnd > 0) &&
        (cfg->sync.exchange != SL_EXCHANGE_UNIQUE || algo == SL_SYNC_ALLREDUCE))
        return sl_err_set(SL_ERR_CONFIG,
                          "sync: sync.exchange_top and sync.exchange_random add rows to the "
                          "unique exchange of the model-averaging algorithms: they need "
                          "sync.exchange unique and an algorithm other than allreduce (here "
                          "exchange %s, algorithm %s)",
                          sl_exchange_name(cfg->sync.exchange), a);
    return SL_OK;
}

/* The codec of sync.compression (sl_collective.h) over src/embed/sl_compress.h. */
static float
codec_scale(const void *ctx, const float *x, size_t n)
{
    const sl_sync_t *s = ctx;
    return sl_compress_scale(s->compress, s->compress_scale, x, n);
}

static void
codec_encode(const void *ctx, float scale, const float *x, size_t n, void *dst)
{
    const sl_sync_t *s = ctx;
    sl_compress_encode(s->compress, scale, x, n, dst);
}

static sl_status_t
codec_decode(const void *ctx, float scale, const void *src, size_t bytes, float *x, size_t n)
{
    const sl_sync_t *s = ctx;
    return sl_compress_decode(s->compress, scale, src, bytes, x, n);
}

/* Row sets, buffers and exchange objects of the row shards that go by rows. */
static sl_status_t
setup_rows(sl_sync_t *s, int links)
{
    long max_rows = 0;
    int max_len = 0;

    SL_TRY(SL_CALLOC(&s->touched, (size_t)s->ncomps, "touched rows"));
    for (int c = 0; c < s->ncomps; c++) {
        const sl_component_t *cp = &s->comps[c];
        if (!by_rows(s, c))
            continue;
        if (cp->rows < 1 || cp->row_len < 1 || (size_t)cp->rows * (size_t)cp->row_len != cp->count)
            return sl_err_set(SL_ERR_INVALID, "sync: row shard %s: %ld rows of %d for %zu floats",
                              cp->name, cp->rows, cp->row_len, cp->count);
        SL_TRY(sl_rowset_init(&s->touched[c], cp->rows));
        if (cp->rows > max_rows)
            max_rows = cp->rows;
        if (cp->row_len > max_len)
            max_len = cp->row_len;
    }
    if (max_rows == 0)
        return SL_OK;
    SL_TRY(SL_ALLOC(&s->sel, (size_t)max_rows, "exchanged rows"));
    if (s->algo == SL_SYNC_ALLREDUCE) {
        SL_TRY(SL_CALLOC(&s->sar, (size_t)s->ncomps, "sparse allreduce"));
        for (int c = 0; c < s->ncomps; c++)
            if (by_rows(s, c))
                SL_TRY(sl_sparse_allreduce_new(&s->sar[c], &s->comps[c], s->size));
        return SL_OK;
    }
    SL_TRY(SL_ALLOC(&s->asked, (size_t)links, "sync lists"));
    return sl_sparse_new(&s->sparse, max_rows, max_len, s->neighbour ? s->sched.picks : 0, s->size);
}

sl_status_t
sl_sync_new(sl_sync_t **out, const sl_config_t *cfg, sl_transport_t *tr, int rank, int size,
            const sl_component_t *comps, int ncomps, const float *params, size_t nparams)
{
    sl_sync_t *s;
    sl_status_t st;
    int links = 1;

    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || ncomps < 1 ||
        (size > 1 && cfg->sync.algorithm != SL_SYNC_NONE && !tr))
        return sl_err_set(SL_ERR_INVALID, "sync: bad node %d of %d, %d components or no transport",
                          rank, size, ncomps);
    SL_TRY(SL_CALLOC(&s, 1, "sync state"));
    s->algo = size > 1 ? cfg->sync.algorithm : SL_SYNC_NONE;
    s->tr = tr;
    s->step_end = sl_clock_now();
    s->rank = rank;
    s->size = size;
    s->comps = comps;
    s->ncomps = ncomps;
    s->nparams = nparams;
    s->timeout_ms = cfg->sync.timeout_ms > 0 ? cfg->sync.timeout_ms : cfg->cluster.timeout_ms;
    sl_bmuf_opts_from_config(&s->bmuf, cfg);
    s->is_bmuf = is_bmuf(s->algo);
    s->neighbour = is_neighbourhood(s->algo);
    s->exchange = s->algo == SL_SYNC_NONE ? SL_EXCHANGE_DENSE : cfg->sync.exchange;
    s->top_pct = cfg->sync.exchange_top;
    s->random_pct = cfg->sync.exchange_random;
    s->seed = cfg->run.seed;
    s->compress = cfg->sync.compression;
    s->compress_scale = cfg->sync.compression_scale;
    if (s->compress != SL_COMPRESS_FP32) {
        s->codec_store = (sl_codec_t){(unsigned)sl_compress_wire_encoding(s->compress), codec_scale,
                                      codec_encode, codec_decode, s};
        s->codec = &s->codec_store;
    }
    if (s->algo != SL_SYNC_NONE)
        SL_TRY_GOTO(check_exchange(cfg, s->algo), st, fail);
    s->max_count = 1;
    for (int c = 0; c < ncomps; c++) {
        if (comps[c].offset + comps[c].count > nparams || comps[c].count > UINT32_MAX) {
            st = sl_err_set(SL_ERR_INVALID, "sync: component %s lies outside the %zu parameters",
                            comps[c].name, nparams);
            goto fail;
        }
        /* components that go by rows have their own buffers (sl_sparse.h) */
        if (comps[c].count > s->max_count && !by_rows(s, c))
            s->max_count = comps[c].count;
    }
    SL_TRY_GOTO(resolve_periods(s, cfg), st, fail);
    SL_TRY_GOTO(log_periods(s, cfg), st, fail);
    if (s->neighbour) {
        int k = cfg->topology.degree > 0 ? cfg->topology.degree : sl_ring_default_degree(size);
        SL_TRY_GOTO(sl_ring_links(size, k, &links), st, fail);
        /* local-*: q = every link, so the schedule picks all neighbours, no randomness */
        SL_TRY_GOTO(sl_schedule_init(&s->sched, size, k,
                                     s->algo == SL_SYNC_LOCAL_MA || s->algo == SL_SYNC_LOCAL_BMUF
                                         ? links
                                         : cfg->sync.neighbours,
                                     cfg->run.seed),
                    st, fail);
        /* snapshots of the picks nodes pulled from a round: q for gossip-*, all links for
         * local-*; in gossip this memory does not grow with k */
        SL_TRY_GOTO(SL_ALLOC(&s->recv, (size_t)s->sched.picks * s->max_count, "gossip snapshots"),
                    st, fail);
    }
    SL_TRY_GOTO(SL_ALLOC(&s->ichosen, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->ipullers, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->chosen, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->pullers, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->from, (size_t)links, "sync lists"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->missed, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->dead, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->told, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->step_miss, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->step_ok, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->stat, (size_t)ncomps, "sync stats"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&s->bar, s->max_count, "sync average"), st, fail);
    if (s->exchange != SL_EXCHANGE_DENSE)
        SL_TRY_GOTO(setup_rows(s, links), st, fail);
    if (s->is_bmuf) {
        SL_TRY_GOTO(SL_ALLOC(&s->omega, nparams, "BMUF omega"), st, fail);
        SL_TRY_GOTO(SL_CALLOC(&s->delta, nparams, "BMUF Delta"), st, fail);
        SL_TRY_GOTO(SL_ALLOC(&s->start, nparams, "BMUF block start"), st, fail);
        memcpy(s->omega, params, nparams * sizeof *params);
        memcpy(s->start, params, nparams * sizeof *params);
    }
    *out = s;
    return SL_OK;
fail:
    sl_sync_destroy(&s);
    return st;
}

void
sl_sync_destroy(sl_sync_t **sp)
{
    sl_sync_t *s = sp ? *sp : NULL;

    if (!s)
        return;
    sl_free(s->omega);
    sl_free(s->delta);
    sl_free(s->start);
    sl_free(s->bar);
    sl_free(s->recv);
    sl_free(s->avg);
    sl_free(s->peer);
    sl_free(s->ichosen);
    sl_free(s->ipullers);
    sl_free(s->chosen);
    sl_free(s->pullers);
    sl_free(s->from);
    sl_free(s->missed);
    sl_free(s->dead);
    sl_free(s->told);
    sl_free(s->step_miss);
    sl_free(s->step_ok);
    sl_free(s->stat);
    sl_free(s->period);
    for (int c = 0; s->touched && c < s->ncomps; c++)
        sl_rowset_fini(&s->touched[c]);
    sl_free(s->touched);
    for (int c = 0; s->sar && c < s->ncomps; c++)
        sl_sparse_allreduce_destroy(&s->sar[c]);
    sl_free(s->sar);
    sl_free(s->sel);
    sl_free(s->asked);
    sl_sparse_destroy(&s->sparse);
    sl_free(s);
    *sp = NULL;
}

sl_sync_algorithm_t
sl_sync_algorithm(const sl_sync_t *s)
{
    return s->algo;
}

const sl_sync_stat_t *
sl_sync_stat(const sl_sync_t *s, int c)
{
    return &s->stat[c];
}

int
sl_sync_period(const sl_sync_t *s, int c)
{
    return s->period[c];
}

int
sl_sync_due(const sl_sync_t *s, int c, long steps_done)
{
    if (s->algo == SL_SYNC_NONE || s->algo == SL_SYNC_ALLREDUCE || steps_done < 1)
        return 0;
    return steps_done % s->period[c] == 0;
}

double
sl_sync_time_s(const sl_sync_t *s)
{
    return s->time_s;
}

int
sl_sync_ndead(const sl_sync_t *s)
{
    return s->ndead;
}

int
sl_sync_is_dead(const sl_sync_t *s, int r)
{
    return r >= 0 && r < s->size && s->dead[r];
}

/* ------------------------------------------------------------- checkpoint state */

#define STATE_HEADER_BYTES 24 /* u32 algorithm, u32 row sets, u64 n, u64 bitmap words */

/* Does component c keep a touched-row set from one step to the next? Row shards that
 * go by rows in the model-averaging algorithms; allreduce clears its sets every step. */
static int
keeps_rows(const sl_sync_t *s, int c)
{
    return s->algo != SL_SYNC_ALLREDUCE && s->touched && s->touched[c].bits;
}

static size_t
rowset_words(const sl_rowset_t *rs)
{
    return (size_t)(rs->rows + 63) / 64;
}

/* The shape of the state (sl_sync.h): row sets, floats per BMUF array, bitmap words. */
static void
state_shape(const sl_sync_t *s, uint32_t *nsets, uint64_t *n, uint64_t *words)
{
    *nsets = 0;
    *n = s->is_bmuf ? s->nparams : 0;
    *words = 0;
    for (int c = 0; c < s->ncomps; c++) {
        if (!keeps_rows(s, c))
            continue;
        ++*nsets;
        *words += rowset_words(&s->touched[c]);
    }
}

size_t
sl_sync_state_bytes(const sl_sync_t *s)
{
    uint32_t nsets;
    uint64_t n, words;

    state_shape(s, &nsets, &n, &words);
    if (nsets == 0 && n == 0)
        return 0;
    return STATE_HEADER_BYTES + 3 * 4 * n + 8 * words;
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
sl_sync_state_save(const sl_sync_t *s, void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t want = sl_sync_state_bytes(s);
    uint32_t nsets;
    uint64_t n, words;

    if (len != want)
        return sl_err_set(SL_ERR_INVALID, "sync: the state is %zu bytes, not %zu", want, len);
    if (want == 0)
        return SL_OK;
    state_shape(s, &nsets, &n, &words);
    sl_put_u32(p, (uint32_t)s->algo);
    sl_put_u32(p + 4, nsets);
    sl_put_u64(p + 8, n);
    sl_put_u64(p + 16, words);
    p += STATE_HEADER_BYTES;
    if (n > 0) {
        p = put_floats(p, s->omega, n);
        p = put_floats(p, s->delta, n);
        p = put_floats(p, s->start, n);
    }
    for (int c = 0; c < s->ncomps; c++) {
        if (!keeps_rows(s, c))
            continue;
        for (size_t w = 0; w < rowset_words(&s->touched[c]); w++, p += 8)
            sl_put_u64(p, s->touched[c].bits[w]);
    }
    SL_ASSERT((size_t)(p - (unsigned char *)buf) == want);
    return SL_OK;
}

/* Checks buf (len bytes) against this object's state shape before anything changes:
 * the header, and no row set bit at or beyond its shard's rows. */
static sl_status_t
check_state(const sl_sync_t *s, const unsigned char *buf, size_t len)
{
    const char *a = sl_sync_algorithm_name(s->algo);
    size_t want = sl_sync_state_bytes(s);
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
    state_shape(s, &nsets, &n, &words);
    if (sl_get_u32(buf) != (uint32_t)s->algo || sl_get_u32(buf + 4) != nsets ||
        sl_get_u64(buf + 8) != n || sl_get_u64(buf + 16) != words)
        return sl_err_set(SL_ERR_FORMAT,
                          "sync: the state is of %s with %" PRIu32 " row sets (%" PRIu64
                          " bitmap words) and %" PRIu64 " BMUF parameters; this node's %s has "
                          "%" PRIu32 " (%" PRIu64 ") and %" PRIu64,
                          sl_sync_algorithm_name((sl_sync_algorithm_t)sl_get_u32(buf)),
                          sl_get_u32(buf + 4), sl_get_u64(buf + 16), sl_get_u64(buf + 8), a, nsets,
                          words, n);
    p = buf + STATE_HEADER_BYTES + 3 * 4 * n;
    for (int c = 0; c < s->ncomps; c++) {
        size_t nw;
        uint64_t last;

        if (!keeps_rows(s, c))
            continue;
        nw = rowset_words(&s->touched[c]);
        p += 8 * nw;
        last = sl_get_u64(p - 8);
        if (s->touched[c].rows % 64 != 0 && last >> (s->touched[c].rows % 64) != 0)
            return sl_err_set(SL_ERR_FORMAT, "sync: touched rows of %s beyond its %ld rows",
                              s->comps[c].name, s->touched[c].rows);
    }
    return SL_OK;
}

sl_status_t
sl_sync_state_load(sl_sync_t *s, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint32_t nsets;
    uint64_t n, words;

    SL_TRY(check_state(s, p, len));
    if (len == 0)
        return SL_OK;
    state_shape(s, &nsets, &n, &words);
    p += STATE_HEADER_BYTES;
    if (n > 0) {
        p = get_floats(p, s->omega, n);
        p = get_floats(p, s->delta, n);
        p = get_floats(p, s->start, n);
    }
    for (int c = 0; c < s->ncomps; c++) {
        if (!keeps_rows(s, c))
            continue;
        for (size_t w = 0; w < rowset_words(&s->touched[c]); w++, p += 8)
            s->touched[c].bits[w] = sl_get_u64(p);
    }
    return SL_OK;
}

/* "(is a node dead? ...)" after a failed collective: allreduce, ma and bmuf need every
 * node, by design. */
static sl_status_t
collective_failed(const sl_sync_t *s, sl_status_t st, const char *what, long round)
{
    return sl_err_prefix(st,
                         "sync %s (%s, round %ld): a node did not take part (%s needs every "
                         "node; the gossip-* and local-* algorithms go on without it)",
                         what, sl_sync_algorithm_name(s->algo), round,
                         sl_sync_algorithm_name(s->algo));
}

sl_status_t
sl_sync_note_rows(sl_sync_t *s, int output, const int32_t *rows, int count)
{
    long vocab = 0;

    if (!s->touched)
        return SL_OK;
    for (int c = 0; c < s->ncomps; c++) {
        const sl_component_t *cp = &s->comps[c];
        if (cp->sparse && is_output(cp) == (output != 0) && cp->row_begin + cp->rows > vocab)
            vocab = cp->row_begin + cp->rows;
    }
    for (int i = 0; i < count && vocab > 0; i++) /* vocab 0: no shard of that table */
        if (rows[i] < 0 || rows[i] >= vocab)
            return sl_err_set(SL_ERR_INVALID,
                              "sync: touched row %d of the %s embedding is outside its %ld rows",
                              (int)rows[i], output ? "output" : "input", vocab);
    for (int c = 0; c < s->ncomps; c++) {
        const sl_component_t *cp = &s->comps[c];
        if (!s->touched[c].bits || is_output(cp) != (output != 0))
            continue;
        for (int i = 0; i < count; i++)
            if (rows[i] >= cp->row_begin && rows[i] < cp->row_begin + cp->rows)
                sl_rowset_add(&s->touched[c], rows[i] - cp->row_begin);
    }
    return SL_OK;
}

sl_status_t
sl_sync_note_model(sl_sync_t *s, const sl_lm_t *lm)
{
    const int32_t *rows;
    int n;

    if (!s->touched)
        return SL_OK;
    rows = sl_lm_touched_rows(lm, 0, &n);
    SL_TRY(sl_sync_note_rows(s, 0, rows, n));
    rows = sl_lm_touched_rows(lm, 1, &n);
    return sl_sync_note_rows(s, 1, rows, n);
}

/* The transport's counters of every kind component c travels in, into its stats. */
static void
fill_bytes(sl_sync_t *s, int c)
{
    static const unsigned kinds[] = {SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_SPARSE_INDEX,
                                     SL_WIRE_SPARSE_VALUES, SL_WIRE_ALLGATHER, SL_WIRE_ALLREDUCE};
    sl_sync_stat_t *stat = &s->stat[c];

    stat->sent_bytes = stat->recv_bytes = 0;
    memset(stat->sent_enc_bytes, 0, sizeof stat->sent_enc_bytes);
    memset(stat->recv_enc_bytes, 0, sizeof stat->recv_enc_bytes);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sl_transport_stat_t ts;
        sl_transport_stat(s->tr, kinds[k], (uint32_t)c, &ts);
        stat->sent_bytes += ts.sent_bytes;
        stat->recv_bytes += ts.recv_bytes;
        for (int e = 0; e < SL_WIRE_NENCODINGS; e++) {
            stat->sent_enc_bytes[e] += ts.sent_enc_bytes[e];
            stat->recv_enc_bytes[e] += ts.recv_enc_bytes[e];
        }
    }
}

/* allreduce with sync.exchange unique or allgather: each row shard's gradient summed
 * by its touched rows (sl_sparse_allreduce.h, round = step), each other component by a
 * ring allreduce of its own (component ncomps, round step * ncomps + c). */
static sl_status_t
gradients_by_rows(sl_sync_t *s, float *grads, long step, const sl_collective_opts_t *o)
{
    for (int c = 0; c < s->ncomps; c++) {
        const sl_component_t *cp = &s->comps[c];
        double t0 = sl_clock_now();
        sl_status_t st;

        if (!by_rows(s, c)) {
            st = sl_allreduce_sum(s->tr, (uint32_t)s->ncomps,
                                  (uint64_t)step * (uint64_t)s->ncomps + (uint64_t)c,
                                  grads + cp->offset, cp->count, o);
        } else {
            sl_sparse_stats_t ss;
            size_t n = 0;

            for (long r = 0; r < cp->rows; r++)
                if (sl_rowset_has(&s->touched[c], r))
                    s->sel[n++] = (int32_t)(cp->row_begin + r);
            sl_rowset_clear(&s->touched[c]);
            st = sl_sparse_allreduce(s->sar[c], s->tr, (uint32_t)c, (uint64_t)step, s->exchange,
                                     s->sel, (int)n, grads + cp->offset, o);
            sl_sparse_allreduce_stats(s->sar[c], &ss);
            s->stat[c].rounds++;
            s->stat[c].rows_own += ss.local_rows;
            s->stat[c].rows_merged +=
                s->exchange == SL_EXCHANGE_UNIQUE ? ss.union_rows : ss.gather_rows;
            fill_bytes(s, c);
            s->stat[c].time_s += sl_clock_now() - t0;
        }
        if (st != SL_OK)
            return collective_failed(s, st, cp->name, step);
    }
    return SL_OK;
}

sl_status_t
sl_sync_gradients(sl_sync_t *s, float *grads, long step)
{
    double t0 = sl_clock_now();
    float inv = 1.0f / (float)s->size;
    sl_status_t st;

    if (s->algo != SL_SYNC_ALLREDUCE)
        return SL_OK;
    sl_collective_opts_t o = {0, 0, s->timeout_ms, s->codec};
    if (s->exchange == SL_EXCHANGE_DENSE) {
        st = sl_allreduce_sum(s->tr, (uint32_t)s->ncomps, (uint64_t)step, grads, s->nparams, &o);
        if (st != SL_OK)
            return collective_failed(s, st, "of the gradients", step);
    } else {
        SL_TRY(gradients_by_rows(s, grads, step, &o));
    }
    for (size_t j = 0; j < s->nparams; j++)
        grads[j] *= inv;
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}

/* After a neighbourhood exchange: who of the chosen answered and who of the first
 * nwait, the ones waited for, did not (reported once per rank), for the step's tally
 * (end_step). */
static void
account_peers(sl_sync_t *s, int c, uint64_t round, size_t nchosen, size_t nwait, size_t got)
{
    for (size_t i = 0; i < nchosen; i++) {
        int r = (int)s->chosen[i], answered = 0;
        for (size_t j = 0; j < got; j++)
            answered |= s->from[j] == s->chosen[i];
        if (answered) {
            s->step_ok[r] = 1;
            continue;
        }
        if (i >= nwait)
            continue;
        s->step_miss[r] = 1;
        if (!s->told[r]) {
            s->told[r] = 1;
            sl_log_warn("sync",
                        "node %d did not answer within %d ms (%s, round %" PRIu64
                        "): averaging without it",
                        r, s->timeout_ms, s->comps[c].name, round);
        }
    }
}

/* After the exchanges of one step: a peer that answered none of them and missed one
 * has missed a round; after SL_SYNC_DEAD_ROUNDS such steps in a row it is dead. Counted
 * per step, not per component, so that a step with many components counts once. Late
 * is not dead: a peer that missed but was heard from during the step (its frame of an
 * earlier round came after the wait for it) is alive, and its count starts again.
 * Without that, a node delayed by its own wait for a dead neighbour looks dead to the
 * nodes waiting for it, and they to theirs. */
static void
end_step(sl_sync_t *s)
{
    for (int r = 0; r < s->size; r++) {
        if (s->step_ok[r] ||
            (s->step_miss[r] && sl_transport_last_heard(s->tr, (uint32_t)r) > s->step_end))
            s->missed[r] = 0;
        else if (s->step_miss[r])
            s->missed[r]++;
        s->step_ok[r] = s->step_miss[r] = 0;
        if (s->missed[r] >= SL_SYNC_DEAD_ROUNDS && !s->dead[r]) {
            s->dead[r] = 1;
            s->ndead++;
            sl_log_warn("sync",
                        "node %d missed %d rounds in a row: taken for dead, left out from "
                        "now on and from the final model",
                        r, s->missed[r]);
        }
    }
    s->step_end = sl_clock_now();
}

/* A sparse exchange's pullers: those expected to ask that did not miss one (reported
 * once per rank) and those that asked. */
static void
account_pullers(sl_sync_t *s, int c, uint64_t round, size_t npullers, size_t nwait,
                const sl_sparse_peers_t *p)
{
    for (size_t i = 0; i < npullers; i++) {
        int r = (int)s->pullers[i], asked = 0;
        for (size_t j = 0; j < p->nasked; j++)
            asked |= p->asked[j] == s->pullers[i];
        if (asked) {
            s->step_ok[r] = 1;
        } else if (i < nwait) {
            s->step_miss[r] = 1;
            if (!s->told[r]) {
                s->told[r] = 1;
                sl_log_warn("sync",
                            "node %d did not ask for its rows within %d ms (%s, round %" PRIu64
                            "): going on without it",
                            r, s->timeout_ms, s->comps[c].name, round);
            }
        }
    }
}

/* Live peers in list (n) into out, the ones that missed no exchange of this step first
 * (*nwait of them): the others are not waited for again in the same step (one timeout
 * per step, not one per component), but still get our pushes, sets and answers. */
static size_t
live_peers(const sl_sync_t *s, const int *list, int n, uint32_t *out, size_t *nwait)
{
    size_t m = 0;

    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++)
            if (!s->dead[list[i]] && s->step_miss[list[i]] == pass)
                out[m++] = (uint32_t)list[i];
        if (pass == 0)
            *nwait = m;
    }
    return m;
}

/* The neighbourhood of component c at round, the dead left out: s->chosen (*nc, the
 * first *ncw waited for) and s->pullers (*np, the first *npw). */
static sl_status_t
pick_peers(sl_sync_t *s, int c, uint64_t round, size_t *nc, size_t *ncw, size_t *np, size_t *npw)
{
    int nch, npl;

    SL_TRY(sl_schedule_chosen(&s->sched, round, c, s->rank, s->ichosen, s->sched.links, &nch));
    SL_TRY(sl_schedule_pullers(&s->sched, round, c, s->rank, s->ipullers, s->sched.links, &npl));
    *nc = live_peers(s, s->ichosen, nch, s->chosen, ncw);
    *np = live_peers(s, s->ipullers, npl, s->pullers, npw);
    return SL_OK;
}

/* The average of component c with the neighbourhood of round: bar, *got peers. */
static sl_status_t
neighbourhood_mean(sl_sync_t *s, int c, uint64_t round, const float *theta, size_t count,
                   size_t *nexp, size_t *got)
{
    size_t nc, ncw, np, npw;
    sl_status_t st;

    SL_TRY(pick_peers(s, c, round, &nc, &ncw, &np, &npw));
    *got = 0;
    /* pushes need no request: wait for the first ncw chosen only, push to every puller */
    st = sl_gossip_exchange_coded(s->tr, (uint32_t)c, round, theta, count, s->codec, s->pullers, np,
                                  s->chosen, ncw, s->recv, s->from, got, s->timeout_ms);
    if (st != SL_OK && st != SL_ERR_TIMEOUT)
        return sl_err_prefix(st, "sync %s round %" PRIu64, s->comps[c].name, round);
    account_peers(s, c, round, ncw, ncw, *got);
    *nexp = ncw;
    sl_bmuf_mean(s->bar, theta, s->recv, *got, count);
    return SL_OK;
}

/* One sync of row shard c at round by its rows (sync.exchange unique): E_k (the touched
 * rows, the top p%, a random q% keyed by (seed, component, round)), the sparse exchange
 * with the neighbourhood or all nodes, then MA or BMUF on the rows averaged only: the
 * other rows keep their values and BMUF state. */
static sl_status_t
sync_rows(sl_sync_t *s, float *params, int c, uint64_t round, size_t *expected, size_t *got)
{
    const sl_component_t *cp = &s->comps[c];
    float *theta = params + cp->offset;
    size_t d = (size_t)cp->row_len, nsel, nres;
    uint64_t kw[4] = {s->seed, 'R', (uint64_t)c, round};
    long ntop = (long)ceil(s->top_pct / 100.0 * (double)cp->rows);
    const int32_t *rows;
    const float *mean;
    double dist = 0;
    sl_sparse_args_t a;
    sl_status_t st;

    nsel =
        sl_sparse_select(&s->touched[c], ntop, s->random_pct / 100.0, sl_hash_u64s(kw, 4), s->sel);
    sl_rowset_clear(&s->touched[c]);
    a = (sl_sparse_args_t){(uint32_t)c, round, theta,    cp->rows,     cp->row_len,
                           s->sel,      nsel,  s->codec, s->timeout_ms};
    if (s->neighbour) {
        size_t nc, ncw, np, npw;
        sl_sparse_peers_t p;

        SL_TRY(pick_peers(s, c, round, &nc, &ncw, &np, &npw));
        p = (sl_sparse_peers_t){s->chosen, nc, ncw, s->pullers, np, npw, s->from, 0, s->asked, 0};
        st = sl_sparse_gossip(s->sparse, s->tr, &a, &p);
        if (st != SL_OK && st != SL_ERR_TIMEOUT)
            return sl_err_prefix(st, "sync %s round %" PRIu64, cp->name, round);
        account_peers(s, c, round, nc, ncw, p.nanswered);
        account_pullers(s, c, round, np, npw, &p);
        *expected = nc; /* each was sent our set */
        *got = p.nanswered;
    } else {
        st = sl_sparse_allmean(s->sparse, s->tr, &a);
        if (st != SL_OK)
            return collective_failed(s, st, cp->name, (long)round);
        *expected = *got = (size_t)s->size - 1;
    }
    nres = sl_sparse_result(s->sparse, &rows, &mean);
    for (size_t i = 0; i < nres; i++) {
        size_t at = (size_t)rows[i] * d;
        double e = sl_bmuf_distance(theta + at, mean + i * d, d);

        dist += e * e;
        if (s->is_bmuf)
            sl_bmuf_update(&s->bmuf, theta + at, mean + i * d, s->omega + cp->offset + at,
                           s->delta + cp->offset + at, s->start + cp->offset + at, d);
        else
            memcpy(theta + at, mean + i * d, d * sizeof *theta);
    }
    s->stat[c].distance = sqrt(dist);
    s->stat[c].rows_own += nsel;
    s->stat[c].rows_merged += nres;
    return SL_OK;
}

/* One sync of component c at round (its block index). */
static sl_status_t
sync_component(sl_sync_t *s, float *params, int c, uint64_t round)
{
    const sl_component_t *cp = &s->comps[c];
    float *theta = params + cp->offset;
    size_t count = cp->count, expected = 0, got = 0;
    sl_sync_stat_t *stat = &s->stat[c];
    double t0 = sl_clock_now();

    if (by_rows(s, c)) {
        SL_TRY(sync_rows(s, params, c, round, &expected, &got));
    } else {
        if (s->neighbour) {
            SL_TRY(neighbourhood_mean(s, c, round, theta, count, &expected, &got));
        } else {
            sl_collective_opts_t o = {0, 0, s->timeout_ms, s->codec};
            float inv = 1.0f / (float)s->size;
            sl_status_t st;

            memcpy(s->bar, theta, count * sizeof *theta);
            st = sl_allreduce_sum(s->tr, (uint32_t)c, round, s->bar, count, &o);
            if (st != SL_OK)
                return collective_failed(s, st, cp->name, (long)round);
            for (size_t j = 0; j < count; j++)
                s->bar[j] *= inv;
            expected = got = (size_t)s->size - 1;
        }
        stat->distance = sl_bmuf_distance(theta, s->bar, count);
        if (s->is_bmuf)
            sl_bmuf_update(&s->bmuf, theta, s->bar, s->omega + cp->offset, s->delta + cp->offset,
                           s->start + cp->offset, count);
        else
            memcpy(theta, s->bar, count * sizeof *theta);
    }
    stat->rounds++;
    stat->expected += expected;
    stat->answered += got;
    fill_bytes(s, c);
    stat->time_s += sl_clock_now() - t0;
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}

sl_status_t
sl_sync_after_step(sl_sync_t *s, float *params, long steps_done)
{
    if (s->algo == SL_SYNC_NONE || s->algo == SL_SYNC_ALLREDUCE || steps_done < 1)
        return SL_OK;
    for (int c = 0; c < s->ncomps; c++)
        if (sl_sync_due(s, c, steps_done))
            SL_TRY(sync_component(s, params, c, (uint64_t)(steps_done / s->period[c])));
    if (s->neighbour)
        end_step(s);
    return SL_OK;
}

/* The wait in ms (>= 0, at most INT_MAX) until the sl_clock_now() time at. */
static int
ms_until(double at)
{
    double ms = ceil((at - sl_clock_now()) * 1000.0);

    return ms <= 0 ? 0 : ms >= (double)INT_MAX ? INT_MAX : (int)ms;
}

/* A sender of the final walk (final_walk): its model to candidate c, component by
 * component, then a confirmation from c or from a candidate below it (one given up on
 * that answered late), or a claim from a candidate between c and itself, waited for
 * until the sl_clock_now() time until; keys has room for s->rank keys. *next = -1 on a
 * confirmation (done: in that candidate's average, or left out of it), the claimant's
 * rank on a claim (*claim = 1), else c + 1: a send that finds no room in time, or
 * nothing coming, is c's failure (logged), not an error. Frames are keyed by their
 * sender, which the transport checks, so a confirmation from c can only be c's. */
static sl_status_t
offer_final(sl_sync_t *s, const float *params, int c, double until, sl_wire_key_t *keys, int *next,
            int *claim)
{
    sl_transport_frame_t *f = NULL;
    size_t which, nkeys = 0;
    int wait_ms, from;
    unsigned char in = 0;
    sl_status_t st;

    *next = c + 1;
    *claim = 0;
    for (int i = 0; i < s->ncomps; i++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)i, 0, (uint32_t)c, SL_WIRE_DATA};
        st = sl_transport_send(s->tr, &k, params + s->comps[i].offset, (uint32_t)s->comps[i].count,
                               SL_WIRE_FP32, 1.0f, 0, s->timeout_ms);
        if (st != SL_OK) {
            sl_log_warn("sync", "sending this node's final model to node %d: %s; trying node %d", c,
                        sl_err_msg(), c + 1);
            return SL_OK;
        }
    }
    for (int r = 0; r < s->rank; r++)
        keys[nkeys++] = (sl_wire_key_t){FINAL_ROUND, r <= c ? FINAL_ACK(s) : FINAL_CLAIM(s), 0,
                                        (uint32_t)r, SL_WIRE_DATA};
    wait_ms = ms_until(until);
    st = sl_transport_recv_any(s->tr, keys, nkeys, wait_ms, &f, &which);
    if (st == SL_ERR_TIMEOUT) {
        sl_log_warn("sync",
                    "node %d did not confirm this node's final model within %d ms: it may "
                    "have died; trying node %d",
                    c, wait_ms, c + 1);
        return SL_OK;
    }
    if (st != SL_OK)
        return sl_err_prefix(st, "sync: final model");
    from = (int)keys[which].peer;
    if (keys[which].component == FINAL_CLAIM(s)) {
        sl_transport_frame_release(&f);
        *next = from;
        *claim = 1;
        sl_log_info("sync", "node %d gathers the final model: this node's goes there", from);
        return SL_OK;
    }
    if (f->h.payload_bytes == 1)
        memcpy(&in, f->payload, 1);
    sl_transport_frame_release(&f);
    *next = -1;
    if (!in)
        sl_log_warn("sync",
                    "node %d gathered the final model without this node's (it came too late)",
                    from);
    return SL_OK;
}

/* The gatherer: peer r's whole model into s->peer, its first frame waited for first_ms,
 * each further one sync.timeout_ms. SL_ERR_TIMEOUT when it did not all come. */
static sl_status_t
recv_final(sl_sync_t *s, int r, int first_ms)
{
    for (int c = 0; c < s->ncomps; c++) {
        sl_wire_key_t k = {FINAL_ROUND, (uint32_t)c, 0, (uint32_t)r, SL_WIRE_DATA};
        size_t got, bytes = s->comps[c].count * sizeof(float);
        SL_TRY(sl_transport_recv(s->tr, &k, s->peer + s->comps[c].offset, bytes, &got,
                                 c == 0 ? first_ms : s->timeout_ms));
        if (got != bytes)
            return sl_err_set(SL_ERR_INVALID, "sync: node %d sent %zu bytes of %s, not %zu", r, got,
                              s->comps[c].name, bytes);
    }
    return SL_OK;
}

/* The gatherer (final_walk): into s->avg the average of its own model and those of the
 * ranks above it that arrive, in rank order (the sum is the same on every run). A
 * peer's first frame is waited for until the sl_clock_now() time deadline; one it holds
 * for dead is not waited for, but taken if it is already here. Every peer above gets a
 * confirmation saying whether its model is in: one that comes too late (or that was
 * wrongly held for dead) then stops its walk there, left out as it always was, rather
 * than walking on to gather (and write) a model of its own. */
static sl_status_t
gather_final(sl_sync_t *s, const float *params, double deadline, int *nmodels)
{
    sl_wire_key_t ack = {FINAL_ROUND, FINAL_ACK(s), 0, 0, SL_WIRE_DATA};
    float inv;
    sl_status_t st;

    if (!s->peer)
        SL_TRY(SL_ALLOC(&s->peer, s->nparams, "a peer's final model"));
    memcpy(s->avg, params, s->nparams * sizeof *params);
    *nmodels = 1;
    for (int r = s->rank + 1; r < s->size; r++) {
        unsigned char in = 1;

        st = recv_final(s, r, s->dead[r] ? 0 : ms_until(deadline));
        if (st == SL_ERR_TIMEOUT) {
            if (!s->dead[r])
                sl_log_warn("sync", "node %d sent no final model in time: left out of it", r);
            in = 0;
        } else if (st != SL_OK) {
            return sl_err_prefix(st, "sync: final model");
        } else {
            for (size_t j = 0; j < s->nparams; j++)
                s->avg[j] += s->peer[j];
            ++*nmodels;
        }
        /* a dead node's queue may be full: no wait for room then */
        ack.peer = (uint32_t)r;
        if (sl_transport_send(s->tr, &ack, &in, 1, SL_WIRE_BYTES, 1.0f, 0,
                              in ? s->timeout_ms : 0) != SL_OK &&
            in)
            sl_log_warn("sync", "confirming node %d's final model: %s", r, sl_err_msg());
    }
    inv = 1.0f / (float)*nmodels;
    for (size_t j = 0; j < s->nparams; j++)
        s->avg[j] *= inv;
    return SL_OK;
}

/* The final model of gossip and local runs, where any node may have died: the lowest
 * live rank gathers it, without a coordinator. Candidates c = 0, 1, ... in rank order;
 * node r walks them:
 *   c < r   unless r holds c for dead (s->dead[c]: then on at once), r sends its model
 *           to c and waits for a confirmation: with one (from c, or late from a
 *           candidate below c) r is done, its model in that average or, when it came
 *           too late, left out; without one (c died, or a send found no room) r tries
 *           c + 1;
 *   c == r  r is the gatherer and the writer: the average of its model and those of the
 *           ranks above it (gather_final), which each get a confirmation saying whether
 *           theirs is in. A gatherer above rank 0 first sends a claim to each rank
 *           above it that it waits for: a node still waiting on a lower candidate goes
 *           straight to the claimant (even one it held for dead) rather than waiting
 *           out that candidate's window.
 * Timing. Each node counts from its own entry here (t0); T = sync.timeout_ms and
 * P = size * T (the gatherer receives up to size - 1 models, each frame within T).
 * Candidate c owns the window [c P, (c + 1) P) of every node's clock:
 *   - a sender gives up on c at t0 + (c + 1) P, whatever it knew about the candidates
 *     below c, so it has sent to c by t0 + c P plus its sending time;
 *   - the gatherer c waits for each peer's first frame until t0 + c P + T: T past the
 *     latest a live peer can have sent, for the skew between the nodes' entries and the
 *     sending; then T for each further frame. It stops as soon as every peer it waits
 *     for is in. Its confirmations go out by t0 + c P + T + (receiving), inside the
 *     senders' window while skew + receiving < P - T = (size - 1) T.
 * The deadlines are absolute, so a dead peer costs the gatherer one wait, not one per
 * peer, and nothing compounds from candidate to candidate: node r is done by
 * t0 + r P + T + (receiving) at the latest. Nodes may disagree on who is dead (each
 * learns it from its own exchanges); the windows make that safe and the claims make it
 * quick: with rank 0 dead, rank 1 gathers at once if it held rank 0 for dead, else
 * after P, and the others follow its claim. With every node alive rank 0 gathers and
 * there are no claims; a node later than T is left out of the average, as it always
 * was (the "without you" confirmation stops its walk). Two writers remain possible
 * when an assumption breaks: a sender that holds every candidate below it for dead
 * while one of them is alive gathers at once (a live node held for dead: it missed
 * SL_SYNC_DEAD_ROUNDS rounds in a row), or a confirmation comes after the sender's
 * window and the sender reaches itself first. Each writer writes the average of the
 * models it got; the run's model.bin is the last one written. The dead marks are what
 * make a crash cheap; a timeout that keeps live nodes from being taken for dead keeps
 * them safe. */
static sl_status_t
final_walk(sl_sync_t *s, const float *params, int *writer, int *nmodels)
{
    double t0 = sl_clock_now(), t = s->timeout_ms / 1000.0, p = s->size * t;
    sl_wire_key_t *keys = NULL;
    int claimed = 0, next;
    sl_status_t st = SL_OK;

    if (s->rank > 0)
        SL_TRY(SL_ALLOC(&keys, (size_t)s->rank, "final model keys"));
    for (int c = 0; c < s->rank;) {
        if (s->dead[c] && !claimed) {
            c++;
            continue;
        }
        SL_TRY_GOTO(offer_final(s, params, c, t0 + (c + 1) * p, keys, &next, &claimed), st, out);
        if (next < 0)
            goto out; /* taken */
        c = next;
    }
    if (s->rank > 0) {
        sl_wire_key_t claim = {FINAL_ROUND, FINAL_CLAIM(s), 0, 0, SL_WIRE_DATA};
        sl_log_warn("sync",
                    "no node below this one took its final model: node %d gathers it and "
                    "writes the run's model.bin",
                    s->rank);
        for (int r = s->rank + 1; r < s->size; r++) {
            if (s->dead[r])
                continue;
            claim.peer = (uint32_t)r;
            if (sl_transport_send(s->tr, &claim, "", 0, SL_WIRE_BYTES, 1.0f, 0, 0) != SL_OK)
                sl_log_debug("sync", "claim to node %d: %s", r, sl_err_msg());
        }
    }
    SL_TRY_GOTO(gather_final(s, params, t0 + s->rank * p + t, nmodels), st, out);
    *writer = 1;
out:
    sl_free(keys);
    return st;
}

sl_status_t
sl_sync_final(sl_sync_t *s, const float *params, const float **avg, int *writer, int *nmodels)
{
    double t0 = sl_clock_now();

    *avg = NULL;
    *writer = 0;
    *nmodels = 1;
    if (s->algo == SL_SYNC_NONE)
        return SL_OK;
    if (!s->avg)
        SL_TRY(SL_ALLOC(&s->avg, s->nparams, "final model"));
    if (s->neighbour) {
        SL_TRY(final_walk(s, params, writer, nmodels));
        if (*writer)
            *avg = s->avg;
    } else {
        sl_collective_opts_t o = {0, 0, s->timeout_ms, NULL}; /* the model: fp32 */
        float inv = 1.0f / (float)s->size;
        sl_status_t st;

        memcpy(s->avg, params, s->nparams * sizeof *params);
        st = sl_allreduce_sum(s->tr, (uint32_t)s->ncomps + 1, 0, s->avg, s->nparams, &o);
        if (st != SL_OK)
            return collective_failed(s, st, "of the final model", 0);
        for (size_t j = 0; j < s->nparams; j++)
            s->avg[j] *= inv;
        *avg = s->avg;
        *writer = s->rank == 0;
        *nmodels = s->size;
    }
    s->time_s += sl_clock_now() - t0;
    return SL_OK;
}
