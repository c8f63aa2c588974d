/* The k-symmetric ring: link counts and neighbour lists (gossip-BMUF paper, Definition 1). */
#include "topology/sl_ring.h"

#include <stdlib.h>

#include "common/sl_sort.h"

int
sl_ring_default_degree(int n)
{
    int log2n = 0;

    while (n > 1) {
        n >>= 1;
        log2n++;
    }
    return log2n - 1 > 1 ? log2n - 1 : 1;
}

sl_status_t
sl_ring_links(int n, int k, int *links)
{
    if (n < 1 || n > SL_RING_MAX_NODES)
        return sl_err_set(SL_ERR_INVALID, "ring: %d nodes: need between 1 and %d", n,
                          SL_RING_MAX_NODES);
    if (k < 1)
        return sl_err_set(SL_ERR_INVALID, "ring: degree k = %d: need k >= 1", k);
    /* 2k in 64 bits: k may be anything up to INT_MAX */
    *links = (long long)2 * k < n - 1 ? 2 * k : n - 1;
    return SL_OK;
}

sl_status_t
sl_ring_neighbours(int n, int k, int i, int *out, int cap, int *count)
{
    int links;

    SL_TRY(sl_ring_links(n, k, &links));
    if (i < 0 || i >= n)
        return sl_err_set(SL_ERR_INVALID, "ring: node %d is not in 0..%d", i, n - 1);
    if (cap < links)
        return sl_err_set(SL_ERR_INVALID, "ring: room for %d neighbours, node %d has %d", cap, i,
                          links);
    if (links == n - 1) {
        /* every other node: already ascending */
        int m = 0;

        for (int j = 0; j < n; j++)
            if (j != i)
                out[m++] = j;
    } else {
        /* n > 2k: the offsets -k..-1, +1..+k are distinct mod n */
        for (int d = 1; d <= k; d++) {
            out[2 * (d - 1)] = (int)(((long long)i - d + n) % n);
            out[2 * (d - 1) + 1] = (int)(((long long)i + d) % n);
        }
        qsort(out, (size_t)links, sizeof *out, sl_cmp_int);
    }
    *count = links;
    return SL_OK;
}

int
sl_ring_is_neighbour(int n, int k, int i, int j)
{
    int d = i > j ? i - j : j - i;

    if (n - d < d)
        d = n - d;
    return d >= 1 && d <= k;
}
