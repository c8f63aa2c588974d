/* The gossip schedule: which q neighbours node i pulls from at round r of component c
 * (gossip-BMUF paper, Algorithm 1 line 6), and, since every node can evaluate that
 * choice for all its neighbours, which nodes pull from i. */
#include "topology/sl_schedule.h"

#include <stdlib.h>

#include "common/sl_alloc.h"
#include "common/sl_rng.h"
#include "common/sl_sort.h"
#include "topology/sl_ring.h"

sl_status_t
sl_schedule_init(sl_schedule_t *s, int n, int k, int q, uint64_t seed)
{
    int links;

    SL_TRY(sl_ring_links(n, k, &links));
    if (q < 1)
        return sl_err_set(SL_ERR_INVALID, "schedule: q = %d neighbours per round: need q >= 1", q);
    s->nodes = n;
    s->degree = k;
    s->neighbours = q;
    s->links = links;
    s->picks = q < links ? q : links;
    s->seed = seed;
    return SL_OK;
}

/* Neighbour number idx (0 <= idx < links) of node i in the order the draw walks them:
 * offsets -k..-1 then +1..+k, or i+1, i+2, ..., i+n-1 when every other node is a
 * neighbour (n <= 2k + 1). Any fixed order would do; this one needs no list. */
static int
neighbour_at(const sl_schedule_t *s, int i, int idx)
{
    long long n = s->nodes, k = s->degree, off;

    if (s->links == s->nodes - 1)
        off = idx + 1;
    else
        off = idx < k ? idx - k : idx - k + 1;
    return (int)(((i + off) % n + n) % n);
}

/* The inverse of neighbour_at: the position of neighbour j in node i's walk order. */
static int
neighbour_index(const sl_schedule_t *s, int i, int j)
{
    int n = s->nodes, k = s->degree, d = ((j - i) % n + n) % n; /* 1..n-1 */

    if (s->links == n - 1)
        return d - 1;
    return d <= k ? k + d - 1 : d - (n - k);
}

static uint64_t
draw_key(const sl_schedule_t *s, uint64_t round, int component, int node)
{
    uint64_t words[4] = {s->seed, round, (uint64_t)component, (uint64_t)node};

    return sl_hash_u64s(words, 4);
}

/* Selection sampling (Knuth's Algorithm S): walk the links in order and keep position
 * idx with probability need/left. Every subset of `picks` positions is equally likely,
 * the draw at position idx is value idx of the stream, and whether a given position is
 * kept is known as soon as the walk reaches it, with no memory. Writes the kept
 * positions to kept[] (when not NULL), stops after position stop_at (or at the end when
 * stop_at < 0) and returns whether stop_at was kept. */
static int
select_walk(const sl_schedule_t *s, uint64_t key, int stop_at, int *kept)
{
    sl_rng_t rng;
    int need = s->picks, m = 0;

    if (s->picks == s->links) { /* local-*: every neighbour */
        if (kept)
            for (int idx = 0; idx < s->links; idx++)
                kept[idx] = idx;
        return stop_at >= 0;
    }
    sl_rng_init(&rng, key);
    for (int idx = 0; idx < s->links && need > 0; idx++) {
        int take = sl_rng_below(&rng, (uint64_t)(s->links - idx)) < (uint64_t)need;

        if (take) {
            need--;
            if (kept)
                kept[m++] = idx;
        }
        if (idx == stop_at)
            return take;
    }
    return 0;
}

static sl_status_t
check_query(const sl_schedule_t *s, int component, int node, int cap, int need, const char *what)
{
    if (node < 0 || node >= s->nodes)
        return sl_err_set(SL_ERR_INVALID, "schedule: node %d is not in 0..%d", node, s->nodes - 1);
    if (component < 0)
        return sl_err_set(SL_ERR_INVALID, "schedule: component %d is negative", component);
    if (cap < need)
        return sl_err_set(SL_ERR_INVALID, "schedule: room for %d %s, need %d", cap, what, need);
    return SL_OK;
}

sl_status_t
sl_schedule_chosen(const sl_schedule_t *s, uint64_t round, int component, int node, int *out,
                   int cap, int *count)
{
    SL_TRY(check_query(s, component, node, cap, s->picks, "chosen neighbours"));
    select_walk(s, draw_key(s, round, component, node), -1, out);
    for (int m = 0; m < s->picks; m++)
        out[m] = neighbour_at(s, node, out[m]);
    qsort(out, (size_t)s->picks, sizeof *out, sl_cmp_int);
    *count = s->picks;
    return SL_OK;
}

sl_status_t
sl_schedule_pullers(const sl_schedule_t *s, uint64_t round, int component, int node, int *out,
                    int cap, int *count)
{
    int m = 0;

    SL_TRY(check_query(s, component, node, cap, s->links, "pullers"));
    /* the ring is symmetric: the nodes that can choose `node` are its own neighbours */
    for (int idx = 0; idx < s->links; idx++) {
        int j = neighbour_at(s, node, idx);

        if (select_walk(s, draw_key(s, round, component, j), neighbour_index(s, j, node), NULL))
            out[m++] = j;
    }
    qsort(out, (size_t)m, sizeof *out, sl_cmp_int);
    *count = m;
    return SL_OK;
}

sl_status_t
sl_schedule_stats(const sl_schedule_t *s, int component, uint64_t first, int rounds,
                  sl_schedule_stats_t *st)
{
    int *in = NULL, *kept = NULL;
    long *total = NULL;
    double sum;
    sl_status_t rc;

    if (rounds < 1)
        return sl_err_set(SL_ERR_INVALID, "schedule: %d rounds: need at least 1", rounds);
    if (component < 0)
        return sl_err_set(SL_ERR_INVALID, "schedule: component %d is negative", component);
    SL_TRY_GOTO(SL_ALLOC(&in, (size_t)s->nodes, "schedule: in-degrees"), rc, out);
    SL_TRY_GOTO(SL_CALLOC(&total, (size_t)s->nodes, "schedule: push totals"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&kept, (size_t)s->links + 1, "schedule: chosen"), rc, out);
    st->rounds = rounds;
    st->out_degree = s->picks;
    st->in_min = s->nodes; /* above any in-degree (at most links <= n - 1) */
    st->in_max = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < s->nodes; i++)
            in[i] = 0;
        for (int j = 0; j < s->nodes; j++) {
            select_walk(s, draw_key(s, first + (uint64_t)r, component, j), -1, kept);
            for (int m = 0; m < s->picks; m++)
                in[neighbour_at(s, j, kept[m])]++;
        }
        for (int i = 0; i < s->nodes; i++) {
            total[i] += in[i];
            st->in_min = in[i] < st->in_min ? in[i] : st->in_min;
            st->in_max = in[i] > st->in_max ? in[i] : st->in_max;
        }
    }
    st->total_min = total[0];
    st->total_max = total[0];
    sum = 0;
    for (int i = 0; i < s->nodes; i++) {
        sum += total[i];
        st->total_min = total[i] < st->total_min ? total[i] : st->total_min;
        st->total_max = total[i] > st->total_max ? total[i] : st->total_max;
    }
    st->total_mean = sum / s->nodes;
    st->in_mean = st->total_mean / rounds;
    rc = SL_OK;
out:
    sl_free(in);
    sl_free(total);
    sl_free(kept);
    return rc;
}
