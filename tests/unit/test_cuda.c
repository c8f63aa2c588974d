/* tests/unit/test_cuda.c: the fixture and buffer helpers of the CUDA backend's tests
 * (test_cuda.h). */
#include "test_cuda.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "kernels/cuda/sl_cuda.h"

#include "test_tool.h"

const char *tc_dev_name = "cuda:0";
int tc_on_cuda = 1;
sl_backend_t *tc_cpu, *tc_dev;

void
tc_setup(void)
{
    ck_assert_int_eq(sl_backend_cpu_new(&tc_cpu, 1), SL_OK);
    /* 2 threads: the self-check's cpu then sums in another order than the reference */
    ck_assert_msg(sl_backend_new(&tc_dev, tc_dev_name, 2) == SL_OK, "%s: %s", tc_dev_name,
                  sl_err_msg());
}

void
tc_teardown(void)
{
    sl_backend_destroy(&tc_dev);
    sl_backend_destroy(&tc_cpu);
}

/* ---- host buffers -------------------------------------------------------------------- */

void *
tc_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);

    ck_assert_ptr_nonnull(p);
    return p;
}

/* Uniform in [lo, hi) from stream key; with lo < 0 < hi a draw that rounds to 0 is
 * nudged, so inputs are never zero. */
float *
tc_rnd(size_t n, uint64_t key, float lo, float hi)
{
    float *x = tc_xmalloc(n * sizeof *x);

    for (size_t i = 0; i < n; i++) {
        x[i] = lo + (hi - lo) * sl_rng_float_at(key, i);
        if (x[i] == 0.0f)
            x[i] = 1e-3f;
    }
    return x;
}

/* ---- device buffers ------------------------------------------------------------------ */

void *
tc_dalloc(size_t bytes)
{
    void *p = NULL;

    ck_assert_msg(tc_dev->ops->alloc(tc_dev->ctx, &p, bytes) == SL_OK, "alloc: %s", sl_err_msg());
    return p;
}

void *
tc_dput(const void *host, size_t bytes)
{
    void *p = tc_dalloc(bytes);

    ck_assert_msg(tc_dev->ops->to_device(tc_dev->ctx, p, host, bytes) == SL_OK, "to_device: %s",
                  sl_err_msg());
    return p;
}

float *
tc_dputf(const float *host, size_t n)
{
    return tc_dput(host, n * sizeof(float));
}

/* n floats of NaN: an output the op must overwrite. */
float *
tc_dpoison(size_t n)
{
    float *h = tc_xmalloc(n * sizeof *h), *d;

    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    d = tc_dputf(h, n);
    free(h);
    return d;
}

void *
tc_dget(const void *d, size_t bytes)
{
    void *h = tc_xmalloc(bytes);

    ck_assert_msg(tc_dev->ops->to_host(tc_dev->ctx, h, d, bytes) == SL_OK, "to_host: %s",
                  sl_err_msg());
    return h;
}

float *
tc_dgetf(const float *d, size_t n)
{
    return tc_dget(d, n * sizeof(float));
}

void
tc_dfree(void *p)
{
    tc_dev->ops->free(tc_dev->ctx, p);
}

/* got against want element-wise; a NaN in got fails unless want is NaN (a poisoned
 * element left unwritten shows here). */
void
tc_expect_close(const float *got, const float *want, size_t n, double abs_tol, double rel_tol,
                const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];

        if (isnan(w) ? isnan(g) : (g == w || fabs(g - w) <= abs_tol + rel_tol * fabs(w)))
            continue;
        ck_abort_msg("%s[%zu]: device %.9g, cpu %.9g", what, i, g, w);
    }
}

void
tc_expect_same(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) != 0)
            ck_abort_msg("%s[%zu]: device %.9g, cpu %.9g (bits differ)", what, i, (double)got[i],
                         (double)want[i]);
}

double
tc_max_abs(const float *x, size_t n)
{
    double m = 0;

    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Visible CUDA devices, counted in a child process so that this one never starts
 * CUDA (its forked test children could not use it). why gets the reason for none. */
static int
count_devices(char *why, size_t len)
{
    int fd[2], status, count = 0;
    char buf[512] = "";
    ssize_t got;
    pid_t pid;

    snprintf(why, len, "the device probe could not run");
    if (pipe(fd) != 0)
        return 0;
    pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return 0;
    }
    if (pid == 0) {
        int n = 0;
        sl_status_t st = sl_cuda_device_count(&n);

        close(fd[0]);
        snprintf(buf, sizeof buf, "%d %s", n,
                 st != SL_OK ? sl_err_msg() : "no CUDA device visible");
        if (write(fd[1], buf, strlen(buf)) < 0)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    got = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    waitpid(pid, &status, 0);
    buf[got > 0 ? got : 0] = '\0';
    if (sscanf(buf, "%d", &count) != 1)
        return 0;
    snprintf(why, len, "%s", strchr(buf, ' ') ? strchr(buf, ' ') + 1 : buf);
    return count;
}

int
tc_main(Suite *s, const char *prog)
{
    const char *b = getenv("SHOAL_CUDA_TEST_BACKEND");
    char why[512];

    if (b != NULL && strcmp(b, "cpu") == 0) {
        tc_dev_name = "cpu";
        tc_on_cuda = 0;
        printf("%s: self-check, the cpu backend in the device's place\n", prog);
    } else if (count_devices(why, sizeof why) < 1) {
        printf("%s: SKIP: %s\n", prog, why);
        return 77;
    }
    return test_main(s);
}
