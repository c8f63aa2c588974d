/* Comparison functions for qsort and bsearch over plain arrays, ascending: one of each,
 * so that no module keeps its own copy. (x > y) - (x < y) never overflows, as x - y
 * would; doubles compare as the operators do (NaNs are not ordered: keep them out). And
 * the order of a few keys, for summing what peers sent in an order that does not depend
 * on when it came. */
#ifndef SL_SORT_H
#define SL_SORT_H

#include <stddef.h>
#include <stdint.h>

static inline int
sl_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;

    return (x > y) - (x < y);
}

static inline int
sl_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* order[0 .. n-1]: the indices of keys[0 .. n-1] by ascending key (equal keys in index
 * order). Insertion sort: for a handful of keys (a node's answering peers). */
static inline void
sl_order_by_key(const uint32_t *keys, size_t n, size_t *order)
{
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        for (; j > 0 && keys[order[j - 1]] > keys[i]; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

#endif
