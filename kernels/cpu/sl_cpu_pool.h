/* A small pool of worker threads for the CPU backend's fused loops. Idle workers
 * sleep on a condition variable instead of spinning: OpenBLAS keeps threads of its
 * own, and spinning OpenMP workers (libgomp's default) were measured to starve them,
 * making 2 threads 4x slower than 1 on a 2-core machine. */
#ifndef SL_CPU_POOL_H
#define SL_CPU_POOL_H

#include <stddef.h>

#include "common/sl_status.h"

typedef struct sl_cpu_pool sl_cpu_pool_t;

/* A kernel over the index range [lo, hi) of its arguments; returns a partial sum or 0. */
typedef double (*sl_cpu_range_fn)(const void *args, size_t lo, size_t hi);

/* threads >= 1 in all, the caller's included (threads - 1 workers are started). */
sl_status_t sl_cpu_pool_new(sl_cpu_pool_t **out, int threads);
void sl_cpu_pool_destroy(sl_cpu_pool_t **pool);
int sl_cpu_pool_threads(const sl_cpu_pool_t *pool);

/* Runs fn over [0, n) split into one contiguous range per thread (the caller takes the
 * first) and returns the partial sums added in range order, so a given thread count
 * always gives the same bits. One run at a time: the backend is used by one thread. */
double sl_cpu_pool_run(sl_cpu_pool_t *pool, size_t n, sl_cpu_range_fn fn, const void *args);

#endif
