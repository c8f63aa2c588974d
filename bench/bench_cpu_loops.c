/* bench_cpu_loops: the CPU backend's loops, one build of them against another (x86-64-v4,
 * v3, baseline: kernels/cpu/sl_cpu_isa.h), at the reference models' shapes, the builds
 * taking turns so that a shared machine's load falls on all of them alike. Figures only.
 *
 *   bench_cpu_loops [--threads T] [--rounds R] [--cpu-time] [--only TEXT]
 *
 * Per op, each of R rounds times every build this CPU runs once (enough calls for about
 * 20 ms); the table shows each build's median microseconds per call and the speed of
 * the first build (the highest) against each other one; --cpu-time counts the process's
 * CPU time instead of the wall clock (steadier on a loaded machine); --only runs just the
 * ops whose name contains TEXT. Shapes: word model, B 32,
 * T 35, V 10002, H 256, 6.18 M parameters; sampled softmax with 1024 negatives; the char
 * model's LSTM cell, H 512, and its recurrent products, forward (B x 4H x H, W_hh
 * transposed) and backward (B x H x 4H): the BLAS's gemm (the same in every column: its
 * spread is the noise) beside each build's gemm_packed, and the packing (pack_b) that
 * a window pays once; and its largest weight gradient, dW_hh += dG^T r over B (T - 1)
 * rows, and its dX over a window (E = 64 columns); the word model's full-softmax chunk
 * (209 rows: logits = top W_out^T, dtop = dlogits W_out and dW_out += dlogits^T top;
 * each with its packing, which training does once a window for W_out)
 * and its input projection
 * (N x 4H, W_ih^T); each by the BLAS and by pack_b + gemm_packed. Inputs are random and
 * never zero, buffers 64-byte aligned. */
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

enum { N = 32 * 35, V = 10002, S = 1024, H = 256, HC = 512, B = 32, PARAMS = 6181650 };
enum { NC = 32 * 99 }; /* the char model's rows of dW_hh's big product: B (T - 1) */
enum { NW = 209 };     /* the word model's rows per full-softmax chunk (2^21 / V) */
enum { NBLOCKS = (PARAMS + SL_SUMSQ_BLOCK - 1) / SL_SUMSQ_BLOCK };
enum { MAX_BUILDS = 8, MAX_ROUNDS = 101, NOPS = 28 };

typedef struct {
    float *logits, *sampled, *gates, *gates_c, *c_prev, *c, *m, *dm, *dc, *dgates;
    float *w, *g, *m1, *v1, *y;
    uint16_t *half;
    int32_t *targets, *samples;
    float *lq_true, *lq_samp;
    float *whh, *cg, *cr;                     /* char W_hh (4HC, HC); C (B, 4HC), (B, HC) */
    float *pk_t[MAX_BUILDS], *pk[MAX_BUILDS]; /* each build's packed W_hh^T and W_hh */
    float *dg_all, *rs, *pk_rs[MAX_BUILDS];   /* char dG (NC, 4HC), r (NC, HC), packed r */
    float *top, *wout, *pk_out[MAX_BUILDS];   /* word (N, H) input, W_out (V, H), packed */
    size_t *blocks;                           /* 0 .. NBLOCKS - 1 */
    double *block_sums;
} bufs_t;

static const char *op_names[NOPS] = {"softmax_xent 1120x10002",
                                     "sampled_softmax 1120x1025",
                                     "lstm fwd 32x256",
                                     "lstm bwd 32x256",
                                     "lstm fwd 32x512",
                                     "adam 6.18M",
                                     "sumsq 6.18M",
                                     "bias_grad 1120x10002",
                                     "to_half bf16 6.18M",
                                     "gemm BLAS 32x2048x512 B^T",
                                     "gemm_packed 32x2048x512",
                                     "gemm BLAS 32x512x2048",
                                     "gemm_packed 32x512x2048",
                                     "pack_b W_hh^T 512x2048",
                                     "pack_b W_hh 2048x512",
                                     "gemm BLAS dW_hh 2048x512x3168",
                                     "pack+gemm_packed dW_hh",
                                     "gemm BLAS logits 209x10002x256",
                                     "pack+gemm_packed logits",
                                     "gemm BLAS W_ih 1120x1024x256",
                                     "pack+gemm_packed W_ih",
                                     "gemm BLAS dtop 209x256x10002",
                                     "pack+gemm_packed dtop",
                                     "gemm BLAS dX 3168x64x2048",
                                     "pack+gemm_packed dX",
                                     "gemm BLAS dW_out 10002x256x209",
                                     "pack+gemm_packed dW_out",
                                     "sumsq_blocks 6.18M"};

static void
fill(float *x, size_t n, uint64_t key, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (2.0f * sl_rng_float_at(key, i) - 1.0f) + 1e-3f;
}

/* The ops of gemm_packed, which a build may not have (the baseline: "-" in its column). */
static const int op_packed[NOPS] = {[10] = 1, [12] = 1, [13] = 1, [14] = 1, [16] = 1,
                                    [18] = 1, [20] = 1, [22] = 1, [24] = 1, [26] = 1};

static int
has_op(const sl_backend_t *be, int op)
{
    return be->ops->gemm_packed || !op_packed[op];
}

/* op on build k (its backend be) */
static void
run_op(const sl_backend_t *be, int k, int op, bufs_t *b)
{
    const sl_backend_ops_t *o = be->ops;
    double loss;

    switch (op) {
    case 0:
        o->softmax_xent(be->ctx, N, V, b->logits, V, NULL, b->targets, 1.0f / N, &loss);
        break;
    case 1:
        o->sampled_softmax_xent(be->ctx, N, S, b->sampled, b->targets, b->samples, b->lq_true,
                                b->lq_samp, 1.0f / N, &loss);
        break;
    case 2:
        o->lstm_cell_forward(be->ctx, B, H, b->gates, b->c_prev, b->c, b->m);
        break;
    case 3:
        o->lstm_cell_backward(be->ctx, B, H, b->gates, b->c_prev, b->c, b->dm, b->dc, b->dgates);
        break;
    case 4:
        o->lstm_cell_forward(be->ctx, B, HC, b->gates_c, b->c_prev, b->c, b->m);
        break;
    case 5:
        o->adam_update(be->ctx, PARAMS, 1e-3f, 0.9f, 0.999f, 1e-8f, 10, b->g, b->m1, b->v1, b->w);
        break;
    case 6:
        (void)o->sumsq(be->ctx, PARAMS, b->w);
        break;
    case 7:
        o->bias_grad(be->ctx, N, V, b->logits, b->y);
        break;
    case 9:
        o->gemm(be->ctx, 0, 1, B, 4 * HC, HC, 1.0f, b->m, HC, b->whh, HC, 1.0f, b->cg, 4 * HC);
        break;
    case 10:
        o->gemm_packed(be->ctx, 0, B, 4 * HC, HC, b->m, HC, b->pk_t[k], 1.0f, b->cg, 4 * HC);
        break;
    case 11:
        o->gemm(be->ctx, 0, 0, B, HC, 4 * HC, 1.0f, b->dgates, 4 * HC, b->whh, HC, 1.0f, b->cr, HC);
        break;
    case 12:
        o->gemm_packed(be->ctx, 0, B, HC, 4 * HC, b->dgates, 4 * HC, b->pk[k], 1.0f, b->cr, HC);
        break;
    case 13:
        o->pack_b(be->ctx, 1, HC, 4 * HC, b->whh, HC, b->pk_t[k]);
        break;
    case 14:
        o->pack_b(be->ctx, 0, 4 * HC, HC, b->whh, HC, b->pk[k]);
        break;
    case 15:
        o->gemm(be->ctx, 1, 0, 4 * HC, HC, NC, 1.0f, b->dg_all, 4 * HC, b->rs, HC, 1.0f, b->whh,
                HC);
        break;
    case 16:
        o->pack_b(be->ctx, 0, NC, HC, b->rs, HC, b->pk_rs[k]);
        o->gemm_packed(be->ctx, 1, 4 * HC, HC, NC, b->dg_all, 4 * HC, b->pk_rs[k], 1.0f, b->whh,
                       HC);
        break;
    case 17:
        o->gemm(be->ctx, 0, 1, NW, V, H, 1.0f, b->top, H, b->wout, H, 0.0f, b->logits, V);
        break;
    case 18:
        o->pack_b(be->ctx, 1, H, V, b->wout, H, b->pk_out[k]);
        o->gemm_packed(be->ctx, 0, NW, V, H, b->top, H, b->pk_out[k], 0.0f, b->logits, V);
        break;
    case 19:
        o->gemm(be->ctx, 0, 1, N, 4 * H, H, 1.0f, b->top, H, b->wout, H, 0.0f, b->logits, 4 * H);
        break;
    case 20:
        o->pack_b(be->ctx, 1, H, 4 * H, b->wout, H, b->pk_out[k]);
        o->gemm_packed(be->ctx, 0, N, 4 * H, H, b->top, H, b->pk_out[k], 0.0f, b->logits, 4 * H);
        break;
    case 21:
        o->gemm(be->ctx, 0, 0, NW, H, V, 1.0f, b->logits, V, b->wout, H, 0.0f, b->top, H);
        break;
    case 22:
        o->pack_b(be->ctx, 0, V, H, b->wout, H, b->pk_out[k]);
        o->gemm_packed(be->ctx, 0, NW, H, V, b->logits, V, b->pk_out[k], 0.0f, b->top, H);
        break;
    case 23: /* W_ih (4HC, E 64): the first 64 columns of W_hh */
        o->gemm(be->ctx, 0, 0, NC, 64, 4 * HC, 1.0f, b->dg_all, 4 * HC, b->whh, HC, 0.0f, b->rs,
                64);
        break;
    case 24:
        o->pack_b(be->ctx, 0, 4 * HC, 64, b->whh, HC, b->pk_out[k]);
        o->gemm_packed(be->ctx, 0, NC, 64, 4 * HC, b->dg_all, 4 * HC, b->pk_out[k], 0.0f, b->rs,
                       64);
        break;
    case 25: /* dW_out += dlogits^T top over a chunk */
        o->gemm(be->ctx, 1, 0, V, H, NW, 1.0f, b->logits, V, b->top, H, 1.0f, b->wout, H);
        break;
    case 26:
        o->pack_b(be->ctx, 0, NW, H, b->top, H, b->pk_out[k]);
        o->gemm_packed(be->ctx, 1, V, H, NW, b->logits, V, b->pk_out[k], 1.0f, b->wout, H);
        break;
    case 27: /* every block, as the clip over a dense gradient lists them */
        o->sumsq_blocks(be->ctx, PARAMS, b->w, b->blocks, NBLOCKS, b->block_sums);
        break;
    default:
        o->to_half(be->ctx, PARAMS, SL_PREC_BF16, 1.0f, b->w, b->half);
        break;
    }
}

static int use_cpu_time; /* --cpu-time */

/* Seconds: monotonic, or with --cpu-time the CPU time of the whole process (all its
 * threads): on a machine shared with other work, the time it ran, not the time it
 * waited for a core. */
static double
clock_s(void)
{
    return use_cpu_time ? bench_cpu_seconds() : sl_clock_now();
}

/* Microseconds per call over enough calls for about 20 ms. */
static double
time_op(const sl_backend_t *be, int k, int op, bufs_t *b)
{
    int calls = 1;
    double t0, t;

    for (;;) {
        t0 = clock_s();
        for (int c = 0; c < calls; c++)
            run_op(be, k, op, b);
        t = clock_s() - t0;
        if (t > 0.02 || calls >= 1 << 20)
            return 1e6 * t / calls;
        calls *= t > 0.002 ? 2 : 8;
    }
}

static int
cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

/* n floats from key, aligned as sl_alloc aligns the trainer's buffers (SL_ALIGN): with
 * 16-byte malloc alignment every 512-bit access of a stream crosses a cache line, and
 * the memory-bound loops (Adam) ran 16% slower in the v4 build than in v3. */
static float *
buf(size_t n, uint64_t key, float scale)
{
    float *x = aligned_alloc(SL_ALIGN, (sizeof(float) * n + SL_ALIGN - 1) / SL_ALIGN * SL_ALIGN);

    if (!x) {
        fprintf(stderr, "bench_cpu_loops: out of memory\n");
        exit(1);
    }
    fill(x, n, key, scale);
    return x;
}

int
main(int argc, char **argv)
{
    int threads = 1, rounds = 5, nb = 0;
    const char *only = "";
    sl_backend_t *be[MAX_BUILDS];
    const char *names[MAX_BUILDS];
    static double t[NOPS][MAX_BUILDS][MAX_ROUNDS];
    bufs_t b;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cpu-time") == 0)
            use_cpu_time = 1;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(
                stderr,
                "usage: bench_cpu_loops [--threads T] [--rounds R] [--cpu-time] [--only TEXT]\n");
            return 2;
        }
    }
    if (threads < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_cpu_loops: --threads >= 1, --rounds 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    for (int i = sl_cpu_isa_count() - 1; i >= 0; i--) {
        const sl_cpu_isa_t *isa = sl_cpu_isa_at(i);

        if (!sl_cpu_isa_runs_here(isa) || nb == MAX_BUILDS)
            continue;
        if (sl_backend_cpu_new_isa(&be[nb], threads, isa->name) != SL_OK) {
            fprintf(stderr, "bench_cpu_loops: %s\n", sl_err_msg());
            return 1;
        }
        names[nb++] = isa->name;
    }
    b.logits = buf((size_t)N * V, 1, 8.0f);
    b.sampled = buf((size_t)N * (S + 1), 2, 8.0f);
    b.gates = buf((size_t)B * 4 * H, 3, 4.0f);
    b.gates_c = buf((size_t)B * 4 * HC, 4, 4.0f);
    b.c_prev = buf((size_t)B * HC, 5, 2.0f);
    b.c = buf((size_t)B * HC, 6, 2.0f);
    b.m = buf((size_t)B * HC, 7, 1.0f);
    b.dm = buf((size_t)B * HC, 8, 1.0f);
    b.dc = buf((size_t)B * HC, 9, 1.0f);
    b.dgates = buf((size_t)B * 4 * HC, 10, 1.0f);
    b.w = buf(PARAMS, 11, 0.1f);
    b.g = buf(PARAMS, 12, 0.01f);
    b.m1 = buf(PARAMS, 13, 0.01f);
    b.v1 = buf(PARAMS, 14, 1e-4f);
    b.y = buf(V, 15, 1.0f);
    b.lq_true = buf(N, 16, 1.0f);
    b.lq_samp = buf(S, 17, 1.0f);
    b.whh = buf((size_t)4 * HC * HC, 18, 0.05f);
    b.cg = buf((size_t)B * 4 * HC, 19, 1.0f);
    b.cr = buf((size_t)B * HC, 20, 1.0f);
    b.dg_all = buf((size_t)NC * 4 * HC, 24, 0.01f);
    b.rs = buf((size_t)NC * HC, 25, 1.0f);
    b.top = buf((size_t)N * H, 26, 1.0f);
    b.wout = buf((size_t)V * H, 27, 0.1f);
    for (int k = 0; k < nb; k++) {
        size_t np;

        if (!be[k]->ops->gemm_packed)
            continue;
        b.pk_t[k] = buf(be[k]->ops->packed_floats(be[k]->ctx, HC, 4 * HC), 21, 0.0f);
        b.pk[k] = buf(be[k]->ops->packed_floats(be[k]->ctx, 4 * HC, HC), 22, 0.0f);
        be[k]->ops->pack_b(be[k]->ctx, 1, HC, 4 * HC, b.whh, HC, b.pk_t[k]);
        be[k]->ops->pack_b(be[k]->ctx, 0, 4 * HC, HC, b.whh, HC, b.pk[k]);
        b.pk_rs[k] = buf(be[k]->ops->packed_floats(be[k]->ctx, NC, HC), 23, 0.0f);
        np = be[k]->ops->packed_floats(be[k]->ctx, H, V);
        if (np < be[k]->ops->packed_floats(be[k]->ctx, V, H))
            np = be[k]->ops->packed_floats(be[k]->ctx, V, H);
        b.pk_out[k] = buf(np, 28, 0.0f);
    }
    b.blocks = malloc(sizeof(size_t) * NBLOCKS);
    b.block_sums = malloc(sizeof(double) * NBLOCKS);
    if (!b.blocks || !b.block_sums)
        return 1;
    for (size_t i = 0; i < NBLOCKS; i++)
        b.blocks[i] = i;
    b.half = malloc(sizeof(uint16_t) * PARAMS);
    b.targets = malloc(sizeof(int32_t) * N);
    b.samples = malloc(sizeof(int32_t) * S);
    if (!b.half || !b.targets || !b.samples)
        return 1;
    for (int i = 0; i < N; i++)
        b.targets[i] = (int32_t)((i * 7919u) % V);
    for (int i = 0; i < S; i++)
        b.samples[i] = (int32_t)((i * 104729u + 13) % V);
    for (int i = 0; i < PARAMS; i++)
        b.v1[i] = b.v1[i] < 0 ? -b.v1[i] : b.v1[i]; /* Adam's v >= 0 */

    bench_print_cpu();
    printf("# %d thread(s), %d rounds, builds taking turns; us per call (median%s), then the "
           "first build's speed-up over each other one\n",
           threads, rounds, use_cpu_time ? ", process CPU time" : "");
    for (int r = 0; r < rounds; r++)
        for (int op = 0; op < NOPS; op++)
            for (int k = 0; k < nb && strstr(op_names[op], only); k++)
                t[op][k][r] = has_op(be[k], op) ? time_op(be[k], k, op, &b) : -1.0;
    printf("%-28s", "op");
    for (int k = 0; k < nb; k++)
        printf(" %10s", names[k]);
    for (int k = 1; k < nb; k++)
        printf("  %s vs %s", names[0], names[k]);
    printf("\n");
    for (int op = 0; op < NOPS; op++) {
        double med[MAX_BUILDS];

        if (!strstr(op_names[op], only))
            continue;
        printf("%-28s", op_names[op]);
        for (int k = 0; k < nb; k++) {
            qsort(t[op][k], (size_t)rounds, sizeof(double), cmp_double);
            med[k] = t[op][k][rounds / 2];
            if (med[k] < 0)
                printf(" %10s", "-");
            else
                printf(" %10.1f", med[k]);
        }
        for (int k = 1; k < nb; k++) {
            int width = (int)(strlen(names[0]) + strlen(names[k]) + 3);

            if (med[k] < 0 || med[0] < 0)
                printf("  %*s ", width, "-");
            else
                printf("  %*.2fx", width, med[k] / med[0]);
        }
        printf("\n");
    }
    for (int k = 0; k < nb; k++)
        sl_backend_destroy(&be[k]);
    return 0;
}
