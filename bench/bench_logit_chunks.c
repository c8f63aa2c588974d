/* bench_logit_chunks: the full softmax's output layer over one window, in chunks of a
 * given number of rows, as the trainer runs it on the CPU (src/model/sl_lm_step.c,
 * output_full): per chunk the logits (top W_out^T, from W_out^T packed once a window),
 * the softmax with its bias, dtop = dlogits W_out (from W_out packed once), dW_out +=
 * dlogits^T top (the chunk's top packed) and the bias gradient. The rows per chunk the
 * trainer takes (sl_lm_logit_chunk) are chosen from these figures: a chunk of few rows
 * streams all of W_out and dW_out from memory for little work, a chunk of many rows
 * holds a large logits buffer. Figures only.
 *
 *   bench_logit_chunks [--vocab "10002 40002 100002"] [--rows "32 64 ..."] [--rounds R]
 *                      [--threads T] [--cpu-time]
 *
 * A window of 1,120 rows (the word model's B 32 x T 35) and H 256, per vocabulary; per
 * round every row count on every build of the loops this CPU runs (those with a packed
 * gemm), taking turns; the table has each build's median milliseconds per window and
 * its time against the whole window in one chunk. '*' marks the trainer's choice. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_cpu.h"
#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_rng.h"
#include "kernels/cpu/sl_cpu_isa.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"

enum { N = 32 * 35, H = 256, MAX_BUILDS = 8, MAX_ROUNDS = 101, MAX_LIST = 32 };

typedef struct {
    int V;
    float *top, *w, *bias, *dw, *db, *dtop, *logits, *pk_t, *pk, *pk_top;
    int32_t *targets;
} window_t;

static int use_cpu_time; /* --cpu-time */

static double
clock_s(void)
{
    return use_cpu_time ? bench_cpu_seconds() : sl_clock_now();
}

static float *
buf(size_t n, uint64_t key, float scale)
{
    float *x = aligned_alloc(SL_ALIGN, (sizeof(float) * n + SL_ALIGN - 1) / SL_ALIGN * SL_ALIGN);

    if (!x) {
        fprintf(stderr, "bench_logit_chunks: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (2.0f * sl_rng_float_at(key, i) - 1.0f);
    return x;
}

/* Seconds for one window in chunks of rows rows on backend be. */
static double
time_window(const sl_backend_t *be, window_t *w, int rows)
{
    const sl_backend_ops_t *o = be->ops;
    void *ctx = be->ctx;
    int V = w->V;
    double loss, t0 = clock_s();

    o->pack_b(ctx, 1, H, V, w->w, H, w->pk_t);
    o->pack_b(ctx, 0, V, H, w->w, H, w->pk);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int n = N - r0 < rows ? N - r0 : rows;
        const float *y = w->top + (size_t)r0 * H;

        o->gemm_packed(ctx, 0, n, V, H, y, H, w->pk_t, 0.0f, w->logits, V);
        o->softmax_xent(ctx, n, V, w->logits, V, w->bias, w->targets + r0, 1.0f / N, &loss);
        o->gemm_packed(ctx, 0, n, H, V, w->logits, V, w->pk, 0.0f, w->dtop + (size_t)r0 * H, H);
        o->pack_b(ctx, 0, n, H, y, H, w->pk_top);
        o->gemm_packed(ctx, 1, V, H, n, w->logits, V, w->pk_top, 1.0f, w->dw, H);
        o->bias_grad(ctx, n, V, w->logits, w->db);
    }
    return clock_s() - t0;
}

/* Up to MAX_LIST positive integers of a space or comma separated list; 0 if bad. */
static int
parse_list(const char *s, int *out)
{
    int n = 0;

    while (*s) {
        char *end;
        long v;

        if (*s == ' ' || *s == ',') {
            s++;
            continue;
        }
        v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 10000000 || n == MAX_LIST)
            return 0;
        out[n++] = (int)v;
        s = end;
    }
    return n;
}

static int
cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

static double
median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

static void
usage(void)
{
    fprintf(stderr, "usage: bench_logit_chunks [--vocab LIST] [--rows LIST] [--rounds R] "
                    "[--threads T] [--cpu-time]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    int vocab[MAX_LIST], rows[MAX_LIST + 2], nv, nr, threads = 1, rounds = 3, nb = 0;
    sl_backend_t *be[MAX_BUILDS];
    const char *names[MAX_BUILDS];
    static double t[MAX_LIST + 2][MAX_BUILDS][MAX_ROUNDS];

    nv = parse_list("10002 40002 100002", vocab);
    nr = parse_list("32 64 128 192 256 384 560", rows);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
            nv = parse_list(argv[++i], vocab);
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
            nr = parse_list(argv[++i], rows);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cpu-time") == 0)
            use_cpu_time = 1;
        else
            usage();
    }
    if (nv == 0 || nr == 0 || threads < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "bench_logit_chunks: --vocab and --rows take 1 to %d positive integers, "
                "--threads >= 1, --rounds 1..%d\n",
                MAX_LIST, MAX_ROUNDS);
        return 2;
    }
    for (int i = sl_cpu_isa_count() - 1; i >= 0; i--) {
        const sl_cpu_isa_t *isa = sl_cpu_isa_at(i);
        sl_backend_t *b;

        if (!sl_cpu_isa_runs_here(isa) || nb == MAX_BUILDS)
            continue;
        if (sl_backend_cpu_new_isa(&b, threads, isa->name) != SL_OK) {
            fprintf(stderr, "bench_logit_chunks: %s\n", sl_err_msg());
            return 1;
        }
        if (!b->ops->gemm_packed) {
            sl_backend_destroy(&b);
            continue;
        }
        be[nb] = b;
        names[nb++] = isa->name;
    }
    if (nb == 0) {
        fprintf(stderr, "bench_logit_chunks: no build of the CPU loops with a packed gemm runs "
                        "here\n");
        return 1;
    }
    bench_print_cpu();
    printf("# window %d rows, H %d, %d thread(s), %d rounds, builds taking turns; ms per window "
           "(median%s); 'vs whole': against the window in one chunk; * the trainer's rows\n",
           N, H, threads, rounds, use_cpu_time ? ", process CPU time" : "");
    for (int v = 0; v < nv; v++) {
        int V = vocab[v], pick = sl_lm_logit_chunk(V, N, 1), n = 0, maxr;
        int list[MAX_LIST + 2];
        window_t w = {0};
        size_t np = 0, npt = 0;

        /* the rows given, the trainer's and the whole window, each once, in order */
        for (int i = 0; i < nr + 2; i++) {
            int r = i < nr ? rows[i] : i == nr ? pick : N, j = 0;

            if (r > N)
                continue;
            while (j < n && list[j] < r)
                j++;
            if (j < n && list[j] == r)
                continue;
            memmove(list + j + 1, list + j, (size_t)(n - j) * sizeof *list);
            list[j] = r;
            n++;
        }
        maxr = list[n - 1];
        for (int k = 0; k < nb; k++) {
            size_t a = be[k]->ops->packed_floats(be[k]->ctx, H, V);
            size_t c = be[k]->ops->packed_floats(be[k]->ctx, V, H);
            size_t d = be[k]->ops->packed_floats(be[k]->ctx, maxr, H);

            np = a > np ? a : np;
            np = c > np ? c : np;
            npt = d > npt ? d : npt;
        }
        w.V = V;
        w.top = buf((size_t)N * H, 1, 1.0f);
        w.w = buf((size_t)V * H, 2, 0.1f);
        w.bias = buf((size_t)V, 3, 0.1f);
        w.dw = buf((size_t)V * H, 4, 0.0f);
        w.db = buf((size_t)V, 5, 0.0f);
        w.dtop = buf((size_t)N * H, 6, 0.0f);
        w.logits = buf((size_t)maxr * V, 7, 0.0f);
        w.pk_t = buf(np, 8, 0.0f);
        w.pk = buf(np, 9, 0.0f);
        w.pk_top = buf(npt, 10, 0.0f);
        w.targets = malloc(sizeof *w.targets * N);
        if (!w.targets)
            return 1;
        for (int i = 0; i < N; i++)
            w.targets[i] = (int32_t)((i * 7919u) % (unsigned)V);
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < n; i++)
                for (int k = 0; k < nb; k++)
                    t[i][k][r] = time_window(be[k], &w, list[i]);
        printf("%-8s %6s", "vocab", "rows");
        for (int k = 0; k < nb; k++)
            printf(" %9s_ms %9s_vs_whole", names[k], names[k]);
        printf("\n");
        for (int i = 0; i < n; i++) {
            printf("%-8d %5d%s", V, list[i], list[i] == pick ? "*" : " ");
            for (int k = 0; k < nb; k++) {
                double whole = median(t[n - 1][k], rounds), me = median(t[i][k], rounds);

                printf(" %12.1f %17.2fx", 1e3 * me, me / whole);
            }
            printf("\n");
        }
        fflush(stdout);
        free(w.top);
        free(w.w);
        free(w.bias);
        free(w.dw);
        free(w.db);
        free(w.dtop);
        free(w.logits);
        free(w.pk_t);
        free(w.pk);
        free(w.pk_top);
        free(w.targets);
    }
    for (int k = 0; k < nb; k++)
        sl_backend_destroy(&be[k]);
    return 0;
}
