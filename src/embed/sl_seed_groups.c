/* Seed groups for sampled softmax: the group count of each mode, the contiguous
 * rank -> group map, and the per-step negative-sampling key of a group. */
#include "embed/sl_seed_groups.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_rng.h"

/* Why the 1e-9: pow(n, 0.64) is within a few ulps (< 1e-9 below 2^31) of the true
 * value, and n^0.64 = n^(16/25) is an integer only for n = m^25 (n = 2^25 below 2^31),
 * where pow may land just above it and ceil would add one. The nearest non-integer
 * n^0.64 above an integer is 6e-6 away for n <= 200000, so the slack changes nothing
 * else. */
static int
zipf_groups(int nodes)
{
    return (int)ceil(pow((double)nodes, 0.64) - 1e-9);
}

sl_status_t
sl_seed_groups_count(const char *mode, int nodes, int *groups)
{
    if (nodes < 1)
        return sl_err_set(SL_ERR_INVALID, "embedding.seed_groups: %d nodes", nodes);
    if (mode == NULL || *mode == '\0')
        return sl_err_set(SL_ERR_INVALID, "embedding.seed_groups: empty mode");
    if (strcmp(mode, "per-node") == 0) {
        *groups = nodes;
    } else if (strcmp(mode, "one") == 0) {
        *groups = 1;
    } else if (strcmp(mode, "zipf") == 0) {
        *groups = zipf_groups(nodes);
    } else if (strcmp(mode, "log2") == 0) {
        int lg = 0;

        while ((nodes >> (lg + 1)) != 0)
            lg++;
        *groups = lg > 1 ? lg : 1;
    } else {
        char *end;
        long v;

        errno = 0;
        v = strspn(mode, "0123456789") == strlen(mode) ? strtol(mode, &end, 10) : -1;
        if (v < 1 || errno == ERANGE)
            return sl_err_set(SL_ERR_INVALID,
                              "embedding.seed_groups: '%s': expected per-node, "
                              "one, zipf, log2 or a count N >= 1",
                              mode);
        *groups = v < nodes ? (int)v : nodes;
    }
    return SL_OK;
}

int
sl_seed_group_of(int rank, int nodes, int groups)
{
    int q, big;

    if (nodes < 1 || groups < 1 || groups > nodes || rank < 0 || rank >= nodes)
        return -1;
    q = nodes / groups;   /* ranks in a small group */
    big = nodes % groups; /* groups 0 .. big-1 have q + 1 ranks */
    if (rank < big * (q + 1))
        return rank / (q + 1);
    return big + (rank - big * (q + 1)) / q;
}

uint64_t
sl_seed_group_sample_key(uint64_t seed, long step, int group)
{
    uint64_t w[4] = {seed, 'S', (uint64_t)step, (uint64_t)group};

    return sl_hash_u64s(w, group == 0 ? 3 : 4);
}
