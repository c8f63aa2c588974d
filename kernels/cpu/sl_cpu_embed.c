/* The CPU backend's embedding rows: gather (lookup) and scatter-add over unique rows
 * (the sparse gradient), split over the backend's threads with one owner per output
 * row. Owns nothing else: the context is sl_cpu.c's, the loop machinery
 * sl_cpu_loops.h's. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "kernels/cpu/sl_cpu_loops.h"

typedef struct {
    int d;
    const float *table, *src;
    const int32_t *ids, *rows, *off, *pos;
    float *out;
} emb_args_t;

static double
gather_rows(const void *argp, size_t lo, size_t hi)
{
    const emb_args_t *a = argp;
    const size_t d = (size_t)a->d;

    for (size_t r = lo; r < hi; r++)
        memcpy(a->out + r * d, a->table + (size_t)a->ids[r] * d, d * sizeof(float));
    return 0;
}

void
sl_cpu_embedding_gather(void *ctx, int n, int d, const float *table, const int32_t *ids, float *out)
{
    emb_args_t a = {.d = d, .table = table, .ids = ids, .out = out};

    if (n > 0 && d > 0)
        sl_cpu_par_range(ctx, (size_t)n, (size_t)n * (size_t)d, SL_CPU_PAR_MIN_STREAM, gather_rows,
                         &a);
}

/* Unique rows [lo, hi): each output row is owned by one thread, so no atomics. */
static double
scatter_rows(const void *argp, size_t lo, size_t hi)
{
    const emb_args_t *a = argp;
    const size_t d = (size_t)a->d;

    for (size_t u = lo; u < hi; u++) {
        float *restrict g = a->out + (size_t)a->rows[u] * d;

        for (int32_t p = a->off[u]; p < a->off[u + 1]; p++) {
            const float *restrict s = a->src + (size_t)a->pos[p] * d;

            for (size_t j = 0; j < d; j++)
                g[j] += s[j];
        }
    }
    return 0;
}

void
sl_cpu_embedding_scatter_add(void *ctx, int nrows, int d, const int32_t *rows, const int32_t *off,
                             const int32_t *pos, const float *src, float *grad)
{
    emb_args_t a = {.d = d, .rows = rows, .off = off, .pos = pos, .src = src, .out = grad};

    if (nrows > 0 && d > 0)
        sl_cpu_par_range(ctx, (size_t)nrows, (size_t)off[nrows] * (size_t)d, SL_CPU_PAR_MIN_STREAM,
                         scatter_rows, &a);
}
