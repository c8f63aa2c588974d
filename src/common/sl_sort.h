/* Comparison functions for qsort and bsearch over plain arrays, ascending: one of each,
 * so that no module keeps its own copy. (x > y) - (x < y) never overflows, as x - y
 * would; doubles compare as the operators do (NaNs are not ordered: keep them out). */
#ifndef SL_SORT_H
#define SL_SORT_H

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

#endif
