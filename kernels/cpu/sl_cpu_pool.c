/* Worker threads that sleep between jobs (see sl_cpu_pool.h for why not OpenMP). */
#include "kernels/cpu/sl_cpu_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/sl_alloc.h"

typedef struct {
    sl_cpu_pool_t *pool;
    int index; /* 1..threads-1; range 0 is the caller's */
    pthread_t thread;
} worker_t;

struct sl_cpu_pool {
    int threads;
    worker_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t start, finish;
    unsigned long job;   /* incremented for every run; workers wait for a new value */
    int pending;         /* workers still busy with the current job */
    int quit;
    size_t n;            /* the current job */
    sl_cpu_range_fn fn;
    const void *args;
    double *part;        /* (threads) partial sums */
};

static void
run_part(sl_cpu_pool_t *p, int i)
{
    size_t t = (size_t)p->threads;

    p->part[i] = p->fn(p->args, p->n * (size_t)i / t, p->n * (size_t)(i + 1) / t);
}

static void *
worker_main(void *arg)
{
    worker_t *w = arg;
    sl_cpu_pool_t *p = w->pool;
    unsigned long seen = 0;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->job == seen && !p->quit)
            pthread_cond_wait(&p->start, &p->lock);
        if (p->quit)
            break;
        seen = p->job;
        pthread_mutex_unlock(&p->lock);
        run_part(p, w->index);
        pthread_mutex_lock(&p->lock);
        if (--p->pending == 0)
            pthread_cond_signal(&p->finish);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

sl_status_t
sl_cpu_pool_new(sl_cpu_pool_t **out, int threads)
{
    sl_cpu_pool_t *p;
    sl_status_t st;

    *out = NULL;
    if (threads < 1)
        return sl_err_set(SL_ERR_INVALID, "cpu backend: %d threads", threads);
    SL_TRY(SL_CALLOC(&p, 1, "cpu thread pool"));
    p->threads = 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->finish, NULL);
    SL_TRY_GOTO(SL_CALLOC(&p->part, (size_t)threads, "cpu thread pool"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&p->workers, (size_t)threads, "cpu thread pool"), st, fail);
    for (int i = 1; i < threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            st = sl_err_set(SL_ERR_NOMEM, "cpu backend: cannot start thread %d of %d", i + 1,
                            threads);
            goto fail;
        }
        p->threads = i + 1;
    }
    *out = p;
    return SL_OK;
fail:
    sl_cpu_pool_destroy(&p);
    return st;
}

void
sl_cpu_pool_destroy(sl_cpu_pool_t **pool)
{
    sl_cpu_pool_t *p = *pool;

    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->finish);
    sl_free(p->workers);
    sl_free(p->part);
    sl_free(p);
    *pool = NULL;
}

int
sl_cpu_pool_threads(const sl_cpu_pool_t *pool)
{
    return pool->threads;
}

double
sl_cpu_pool_run(sl_cpu_pool_t *p, size_t n, sl_cpu_range_fn fn, const void *args)
{
    double sum = 0;

    if (p->threads == 1)
        return fn(args, 0, n);
    pthread_mutex_lock(&p->lock);
    p->n = n;
    p->fn = fn;
    p->args = args;
    p->pending = p->threads - 1;
    p->job++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    run_part(p, 0);
    pthread_mutex_lock(&p->lock);
    while (p->pending > 0)
        pthread_cond_wait(&p->finish, &p->lock);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->threads; i++)
        sum += p->part[i];
    return sum;
}
