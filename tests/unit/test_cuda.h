/* tests/unit/test_cuda.h: what the CUDA backend's test programs (check_cuda: every op;
 * check_cuda_train: a training step and loss scaling) share: the fixture that makes the
 * CPU reference backend and the backend under test, host and device buffers, element-wise
 * comparisons, and main(). Names start with tc_.
 *
 * The backend under test is cuda:0, or with SHOAL_CUDA_TEST_BACKEND=cpu the CPU backend
 * on 2 threads (a self-check of the tests on a machine without a GPU: then tc_on_cuda is
 * 0 and the CUDA-only checks skip). Without a visible device tc_main exits 77 (automake's
 * SKIP), saying why; the devices are counted in a child process, since the tests run in
 * forked children and a CUDA context does not survive fork. Every helper fails the
 * running Check case on an error. */
#ifndef SL_TEST_CUDA_H
#define SL_TEST_CUDA_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/sl_backend.h"

extern const char *tc_dev_name; /* "cuda:0", or "cpu" in the self-check */
extern int tc_on_cuda;          /* 0: the cpu-against-cpu self-check */
extern sl_backend_t *tc_cpu;    /* the reference: the CPU backend on 1 thread */
extern sl_backend_t *tc_dev;    /* the backend under test */

/* A checked fixture: tc_cpu and tc_dev made before each test, destroyed after. */
void tc_setup(void);
void tc_teardown(void);

/* Host memory (free()); tc_rnd: uniform in [lo, hi) from stream key, never 0 when
 * lo < 0 < hi. (A copy of floats: test_fcopy, test_tool.h.) */
void *tc_xmalloc(size_t bytes);
float *tc_rnd(size_t n, uint64_t key, float lo, float hi);

/* tc_dev's memory (tc_dfree): allocated, filled from the host, or n floats of NaN (an
 * output the op must overwrite); tc_dget / tc_dgetf copy it back into host memory. */
void *tc_dalloc(size_t bytes);
void *tc_dput(const void *host, size_t bytes);
float *tc_dputf(const float *host, size_t n);
float *tc_dpoison(size_t n);
void *tc_dget(const void *d, size_t bytes);
float *tc_dgetf(const float *d, size_t n);
void tc_dfree(void *p);

/* got against want element-wise, |got - want| <= abs_tol + rel_tol |want|; a NaN in got
 * fails unless want is NaN (a poisoned element left unwritten shows here). */
void tc_expect_close(const float *got, const float *want, size_t n, double abs_tol, double rel_tol,
                     const char *what);
/* The same bits. */
void tc_expect_same(const float *got, const float *want, size_t n, const char *what);
/* max |x_i|. */
double tc_max_abs(const float *x, size_t n);

/* main() of a CUDA test program named prog: runs suite s in fork mode on the device, or
 * on the CPU with SHOAL_CUDA_TEST_BACKEND=cpu; 77 without a device. */
int tc_main(Suite *s, const char *prog);

#endif
