/* The CPU backend: CBLAS (OpenBLAS) for gemm, its own packed gemm for the recurrent
 * products; the fused loops (softmax, LSTM cell, embeddings, dropout, optimizers) in C
 * with a branch-free polynomial exp so that they vectorise, built for x86-64-v4
 * (AVX-512) and v3 (AVX2, FMA) beside the baseline (sl_cpu_isa.h picks one when a
 * backend starts), and split over the backend's worker threads (sl_cpu_pool.h) when
 * large; fp16/bf16 conversion through sl_half.h. fp32 only. The reference the other
 * backends are checked against. Host memory is device memory here.
 *
 * This file owns the context, threads, memory, gemm, the ops table and registration;
 * the loops live in sl_cpu_softmax.c, sl_cpu_lstm.c, sl_cpu_embed.c, sl_cpu_elem.c and
 * sl_cpu_gemm.c, and what they share (build options, maths, thread split) in
 * sl_cpu_loops.h. */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* the CBLAS that configure chose (--with-blas): OpenBLAS, oneMKL, BLIS or AOCL */
#ifdef SL_BLAS_MKL
#include <mkl_cblas.h>
#include <mkl_service.h>
#else
#include <cblas.h>
#endif
#ifdef SL_BLAS_BLIS
#include <blis.h>
#endif

#include "common/sl_alloc.h"
#include "kernels/cpu/sl_cpu_isa.h"
#include "kernels/cpu/sl_cpu_pool.h"
#include "kernels/sl_backend.h"
#include "kernels/cpu/sl_cpu_loops.h"

enum { MAX_THREADS = 256 /* set_threads clamps larger counts to this */ };

/* ---- gemm, memory, threads --------------------------------------------------------- */

/* The shape checks are cblas's own; failing them is a bug in the caller, and cblas
 * would print to stderr and leave c unchanged. */
static void
cpu_gemm(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
         int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    SL_ASSERT(m >= 0 && n >= 0 && k >= 0);
    SL_ASSERT(lda >= (trans_a ? m : k) && lda >= 1);
    SL_ASSERT(ldb >= (trans_b ? k : n) && ldb >= 1);
    SL_ASSERT(ldc >= n && ldc >= 1);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static sl_status_t
cpu_alloc(void *ctx, void **ptr, size_t bytes)
{
    return sl_alloc(ptr, bytes, 1, 1, "cpu backend buffer");
}

static void
cpu_free(void *ctx, void *ptr)
{
    sl_free(ptr);
}

/* cpu memory is host memory: staging buffers are ordinary aligned ones. */
static sl_status_t
cpu_host_alloc(void *ctx, void **ptr, size_t bytes)
{
    return sl_alloc(ptr, bytes ? bytes : 1, 1, 1, "host staging buffer");
}

static sl_status_t
cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes > 0 && dst != src)
        memmove(dst, src, bytes);
    return SL_OK;
}

static sl_status_t
cpu_sync(void *ctx)
{
    return SL_OK;
}

/* The CPU multiplies in fp32 only: emulating bf16/fp16 inputs would be slower than
 * fp32 here and gain nothing, so a request for them is refused rather than ignored. */
static sl_status_t
cpu_set_precision(void *ctx, sl_precision_t p)
{
    if (p == SL_PREC_FP32)
        return SL_OK;
    return sl_err_set(SL_ERR_UNSUPPORTED,
                      "device 'cpu': precision %s is not supported (the cpu backend computes "
                      "in fp32; bf16/fp16 need device: cuda)",
                      p == SL_PREC_BF16   ? "bf16"
                      : p == SL_PREC_FP16 ? "fp16"
                                          : "(unknown)");
}

static int
cores(void)
{
    cpu_set_t set;
    long n;

    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set); /* respects taskset and the batch system's binding */
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* threads <= 0: all cores. Sets the BLAS's threads and our own workers. If the workers
 * cannot be started the loops stay on the calling thread (slower, still correct). */
static void
cpu_set_threads(void *ctx, int threads)
{
    sl_cpu_t *cpu = ctx;
    const char *blas = SL_BLAS_NAME;

    if (threads <= 0)
        threads = cores();
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    cpu->threads = threads;
#if defined(HAVE_OPENBLAS) && defined(HAVE_OPENBLAS_SET_NUM_THREADS)
    openblas_set_num_threads(threads);
#elif defined(SL_BLAS_MKL) && defined(HAVE_MKL_SET_NUM_THREADS)
    MKL_Set_Num_Threads(threads);
#elif defined(SL_BLAS_BLIS) && defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
    bli_thread_set_num_threads(threads);
#endif
    if (!cpu->pool || sl_cpu_pool_threads(cpu->pool) != threads) {
        sl_cpu_pool_destroy(&cpu->pool);
        if (threads > 1 && sl_cpu_pool_new(&cpu->pool, threads) != SL_OK)
            cpu->pool = NULL;
    }
#if defined(HAVE_OPENBLAS) && defined(HAVE_OPENBLAS_GET_CONFIG)
    blas = openblas_get_config();
#endif
    snprintf(cpu->desc, sizeof cpu->desc, "%s (%d thread%s); loops %s%s", blas, threads,
             threads == 1 ? "" : "s", cpu->loops_desc,
             threads > 1 && !cpu->pool ? ", serial (no worker threads)" : "");
}

static const char *
cpu_describe(void *ctx)
{
    return ((sl_cpu_t *)ctx)->desc;
}

static void
cpu_destroy(void *ctx)
{
    sl_cpu_t *cpu = ctx;

    sl_cpu_pool_destroy(&cpu->pool);
    sl_free(cpu);
}

/* The entries of sl_cpu.c; the loops come from the build sl_cpu_isa_pick chose. */
static void
fill_ops(sl_backend_ops_t *ops, const sl_backend_ops_t *loops)
{
    *ops = *loops;
    ops->destroy = cpu_destroy;
    ops->set_threads = cpu_set_threads;
    ops->describe = cpu_describe;
    ops->alloc = cpu_alloc;
    ops->free = cpu_free;
    ops->host_alloc = cpu_host_alloc;
    ops->host_free = cpu_free;
    ops->to_device = cpu_memcpy;
    ops->to_host = cpu_memcpy;
    ops->sync = cpu_sync;
    ops->set_precision = cpu_set_precision;
    ops->gemm = cpu_gemm;
}

/* The backend object and its context both come from sl_alloc; sl_backend_destroy
 * (kernels/sl_backend.c) calls ops->destroy on the context and sl_free on the object. */
sl_status_t
sl_backend_cpu_new_isa(sl_backend_t **out, int threads, const char *isa_name)
{
    const sl_cpu_isa_t *isa;
    sl_backend_t *b;
    sl_cpu_t *cpu;

    *out = NULL;
    if (threads < 0)
        return sl_err_set(SL_ERR_INVALID,
                          "device 'cpu': run.threads must be >= 0 (0: all cores), got %d", threads);
    SL_TRY(sl_cpu_isa_pick(isa_name, &isa));
    SL_TRY(SL_CALLOC(&b, 1, "cpu backend"));
    if (SL_CALLOC(&cpu, 1, "cpu backend context") != SL_OK) {
        sl_free(b);
        return SL_ERR_NOMEM;
    }
    fill_ops(&cpu->ops, isa->loops);
    cpu->loops_desc = isa->desc;
    cpu_set_threads(cpu, threads);
    b->ops = &cpu->ops;
    b->ctx = cpu;
    b->name = "cpu";
    *out = b;
    return SL_OK;
}

sl_status_t
sl_backend_cpu_new(sl_backend_t **out, int threads)
{
    return sl_backend_cpu_new_isa(out, threads, NULL);
}
