/* Unit tests of the CPU loops' builds per x86-64 level (kernels/cpu/sl_cpu_isa.h):
 * every build this CPU runs gives the baseline build's results, to rounding, for every
 * loop op on the same random inputs, at sizes that leave vector tails; the choice of
 * build (highest by default, SHOAL_CPU_ISA, an explicit name) and the errors for names
 * not built or not runnable here; and a model's training step, whose products take
 * the packed gemm where a build has it. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "kernels/cpu/sl_cpu_isa.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"

#include "test_tool.h"

/* Odd sizes, so that every vector width leaves a remainder; B x 4H above the threading
 * threshold is not needed: one thread, the same split for both builds. */
enum { B = 7, H = 203, N = 4099, V = 1031, S = 67, D = 45, NROWS = 5 };

static sl_backend_t *base, *other;

/* got (a build) against want (the baseline) over n floats: |got - want| <= abs_tol +
 * rel_tol |want|. The builds differ by FMA contraction, by the order of vectorised
 * sums and by the polynomial exp evaluated with or without FMA (each below 1.5e-7
 * relative), so a few ulps apart. */
static void
assert_close(const float *got, const float *want, size_t n, double abs_tol, double rel_tol,
             const char *what)
{
    for (size_t i = 0; i < n; i++)
        TEST_ASSERT_CLOSE(got[i], want[i], abs_tol, rel_tol, what, i);
}

/* Both backends, one thread each; the other one is build i of sl_cpu_isa_at(i). Returns
 * 0 (and the test passes as skipped) when this CPU cannot run build i. */
static int
open_pair(int i)
{
    const sl_cpu_isa_t *isa = sl_cpu_isa_at(i);

    ck_assert_ptr_nonnull(isa);
    if (!sl_cpu_isa_runs_here(isa)) {
        fprintf(stderr, "check_kernels_isa: this CPU cannot run %s: not compared\n", isa->desc);
        return 0;
    }
    ck_assert_int_eq(sl_backend_cpu_new_isa(&base, 1, sl_cpu_isa_at(0)->name), SL_OK);
    ck_assert_int_eq(sl_backend_cpu_new_isa(&other, 1, isa->name), SL_OK);
    ck_assert_ptr_nonnull(strstr(other->ops->describe(other->ctx), isa->desc));
    return 1;
}

static void
close_pair(void)
{
    sl_backend_destroy(&base);
    sl_backend_destroy(&other);
}

/* A malloc'd copy of x for each backend, filled from key. */
static float *
filled(size_t n, uint64_t key, float scale)
{
    float *x = malloc(sizeof(float) * n);

    ck_assert_ptr_nonnull(x);
    test_fill(x, n, key, scale);
    return x;
}

START_TEST(test_lstm_cell_agrees)
{
    float *pre, *g1, *g2, *cp, *c1, *c2, *m1, *m2, *dm, *dc1, *dc2, *dg1, *dg2;

    if (!open_pair(_i))
        return;
    pre = filled(B * 4 * H, 1, 6.0f);
    cp = filled(B * H, 2, 2.0f);
    dm = filled(B * H, 3, 1.0f);
    dc1 = filled(B * H, 4, 1.0f);
    g1 = test_fcopy(pre, B * 4 * H);
    g2 = test_fcopy(pre, B * 4 * H);
    dc2 = test_fcopy(dc1, B * H);
    c1 = malloc(sizeof(float) * B * H), c2 = malloc(sizeof(float) * B * H);
    m1 = malloc(sizeof(float) * B * H), m2 = malloc(sizeof(float) * B * H);
    dg1 = malloc(sizeof(float) * B * 4 * H), dg2 = malloc(sizeof(float) * B * 4 * H);
    base->ops->lstm_cell_forward(base->ctx, B, H, g1, cp, c1, m1);
    other->ops->lstm_cell_forward(other->ctx, B, H, g2, cp, c2, m2);
    assert_close(g2, g1, B * 4 * H, 1e-7, 1e-6, "activations");
    assert_close(c2, c1, B * H, 1e-7, 1e-6, "c");
    assert_close(m2, m1, B * H, 1e-7, 1e-6, "m");
    /* backward from the baseline's activations on both sides: the op alone */
    base->ops->lstm_cell_backward(base->ctx, B, H, g1, cp, c1, dm, dc1, dg1);
    other->ops->lstm_cell_backward(other->ctx, B, H, g1, cp, c1, dm, dc2, dg2);
    assert_close(dc2, dc1, B * H, 1e-7, 1e-6, "dc_prev");
    assert_close(dg2, dg1, B * 4 * H, 1e-7, 1e-6, "dgates");
    free(pre), free(cp), free(dm), free(dc1), free(dc2), free(g1), free(g2);
    free(c1), free(c2), free(m1), free(m2), free(dg1), free(dg2);
    close_pair();
}
END_TEST

START_TEST(test_softmax_agrees)
{
    enum { NR = 9 };
    float *x1 = filled(NR * V, 5, 8.0f), *x2 = test_fcopy(x1, NR * V);
    float *s1 = filled(NR * (1 + S), 6, 5.0f), *s2, *lqt = filled(NR, 7, 1.0f),
          *lqs = filled(S, 8, 1.0f);
    int32_t t[NR], samples[S];
    double l1, l2;

    if (!open_pair(_i)) {
        free(x1), free(x2), free(s1), free(lqt), free(lqs);
        return;
    }
    for (int r = 0; r < NR; r++)
        t[r] = (r * 331) % V;
    for (int k = 0; k < S; k++)
        samples[k] = (k * 17) % V;
    samples[3] = t[2]; /* a sample equal to a row's target is masked out */
    s2 = test_fcopy(s1, NR * (1 + S));
    base->ops->softmax_xent(base->ctx, NR, V, x1, V, NULL, t, 0.25f, &l1);
    other->ops->softmax_xent(other->ctx, NR, V, x2, V, NULL, t, 0.25f, &l2);
    ck_assert_double_eq_tol(l2, l1, 1e-6 * l1);
    assert_close(x2, x1, NR * V, 1e-9, 1e-5, "softmax grad");
    base->ops->sampled_softmax_xent(base->ctx, NR, S, s1, t, samples, lqt, lqs, 0.5f, &l1);
    other->ops->sampled_softmax_xent(other->ctx, NR, S, s2, t, samples, lqt, lqs, 0.5f, &l2);
    ck_assert_double_eq_tol(l2, l1, 1e-6 * l1);
    assert_close(s2, s1, NR * (1 + S), 1e-9, 1e-5, "sampled grad");
    free(x1), free(x2), free(s1), free(s2), free(lqt), free(lqs);
    close_pair();
}
END_TEST

/* Gather and scatter-add move and add rows: the same bits on both sides. */
START_TEST(test_embedding_agrees)
{
    enum { ROWS = 23, NIDS = 11 };
    float *table = filled(ROWS * D, 9, 1.0f), *o1, *o2, *gr1 = filled(ROWS * D, 10, 1.0f), *gr2;
    int32_t ids[NIDS], rows[NROWS] = {3, 0, 22, 7, 11}, off[NROWS + 1] = {0, 2, 3, 6, 8, NIDS};
    int32_t pos[NIDS];

    if (!open_pair(_i)) {
        free(table), free(gr1);
        return;
    }
    for (int k = 0; k < NIDS; k++)
        ids[k] = (k * 5 + 1) % ROWS, pos[k] = (k * 7) % NIDS;
    o1 = calloc(NIDS * D, sizeof(float)), o2 = calloc(NIDS * D, sizeof(float));
    gr2 = test_fcopy(gr1, ROWS * D);
    base->ops->embedding_gather(base->ctx, NIDS, D, table, ids, o1);
    other->ops->embedding_gather(other->ctx, NIDS, D, table, ids, o2);
    ck_assert(memcmp(o1, o2, sizeof(float) * NIDS * D) == 0);
    base->ops->embedding_scatter_add(base->ctx, NROWS, D, rows, off, pos, o1, gr1);
    other->ops->embedding_scatter_add(other->ctx, NROWS, D, rows, off, pos, o2, gr2);
    ck_assert(memcmp(gr1, gr2, sizeof(float) * ROWS * D) == 0);
    free(table), free(o1), free(o2), free(gr1), free(gr2);
    close_pair();
}
END_TEST

/* axpy, scale, sum of squares, bias add and gradient, dropout; each op from the same
 * input on both sides (y2 is reset to y1 after each comparison). Values are below 8 in
 * magnitude, where one ulp is 5e-7. */
START_TEST(test_elementwise_agrees)
{
    float *x = filled(N, 11, 2.0f), *y1 = filled(N, 12, 2.0f), *y2 = test_fcopy(y1, N);
    float *bias = filled(D, 13, 1.0f), *db1 = filled(D, 14, 1.0f), *db2 = test_fcopy(db1, D);
    double q1, q2;

    if (!open_pair(_i)) {
        free(x), free(y1), free(y2), free(bias), free(db1), free(db2);
        return;
    }
    base->ops->axpy(base->ctx, N, 0.37f, x, y1);
    other->ops->axpy(other->ctx, N, 0.37f, x, y2);
    assert_close(y2, y1, N, 5e-7, 1e-7, "axpy");
    memcpy(y2, y1, sizeof(float) * N);
    base->ops->scale(base->ctx, N, -1.7f, y1);
    other->ops->scale(other->ctx, N, -1.7f, y2);
    ck_assert(memcmp(y1, y2, sizeof(float) * N) == 0); /* one product: exact */
    q1 = base->ops->sumsq(base->ctx, N, y1);
    q2 = other->ops->sumsq(other->ctx, N, y2);
    ck_assert_double_eq_tol(q2, q1, 1e-12 * q1); /* in double */
    base->ops->add_bias(base->ctx, N / D, D, bias, y1);
    other->ops->add_bias(other->ctx, N / D, D, bias, y2);
    ck_assert(memcmp(y1, y2, sizeof(float) * N) == 0); /* one sum: exact */
    base->ops->bias_grad(base->ctx, N / D, D, y1, db1);
    other->ops->bias_grad(other->ctx, N / D, D, y2, db2);
    assert_close(db2, db1, D, 1e-6, 1e-6, "bias_grad");
    base->ops->dropout(base->ctx, N, 0.3f, 99, y1);
    other->ops->dropout(other->ctx, N, 0.3f, 99, y2);
    ck_assert(memcmp(y1, y2, sizeof(float) * N) == 0); /* the same mask, one product */
    free(x), free(y1), free(y2), free(bias), free(db1), free(db2);
    close_pair();
}
END_TEST

/* fp16 and bf16, with a scale that sends some values past fp16's range: the same bits. */
START_TEST(test_conversions_agree)
{
    float *x = filled(N, 15, 3.0f), *f1 = malloc(sizeof(float) * N), *f2;
    uint16_t *h1 = malloc(2 * N), *h2 = malloc(2 * N);
    const sl_precision_t fmts[2] = {SL_PREC_FP16, SL_PREC_BF16};

    if (!open_pair(_i)) {
        free(x), free(f1), free(h1), free(h2);
        return;
    }
    f2 = malloc(sizeof(float) * N);
    x[1] = 1e-30f, x[2] = -0.0f, x[3] = NAN;
    for (int k = 0; k < 2; k++) {
        base->ops->to_half(base->ctx, N, fmts[k], 30000.0f, x, h1);
        other->ops->to_half(other->ctx, N, fmts[k], 30000.0f, x, h2);
        ck_assert(memcmp(h1, h2, 2 * N) == 0);
        base->ops->from_half(base->ctx, N, fmts[k], 1.0f / 30000.0f, h1, f1);
        other->ops->from_half(other->ctx, N, fmts[k], 1.0f / 30000.0f, h2, f2);
        ck_assert(memcmp(f1, f2, sizeof(float) * N) == 0);
    }
    free(x), free(f1), free(f2), free(h1), free(h2);
    close_pair();
}
END_TEST

/* SGD, Adagrad and Adam over three steps each, from the same state. */
START_TEST(test_optimizers_agree)
{
    float *g = filled(N, 16, 1.0f), *w1 = filled(N, 17, 1.0f), *w2 = test_fcopy(w1, N);
    float *a1 = calloc(N, sizeof(float)), *a2 = calloc(N, sizeof(float));
    float *v1 = calloc(N, sizeof(float)), *v2 = calloc(N, sizeof(float));

    if (!open_pair(_i)) {
        free(g), free(w1), free(w2), free(a1), free(a2), free(v1), free(v2);
        return;
    }
    for (long t = 1; t <= 3; t++) {
        base->ops->sgd_update(base->ctx, N, 0.1f, g, w1);
        other->ops->sgd_update(other->ctx, N, 0.1f, g, w2);
    }
    assert_close(w2, w1, N, 1e-7, 5e-7, "sgd");
    for (long t = 1; t <= 3; t++) {
        base->ops->adagrad_update(base->ctx, N, 0.1f, 1e-8f, g, a1, w1);
        other->ops->adagrad_update(other->ctx, N, 0.1f, 1e-8f, g, a2, w2);
    }
    assert_close(a2, a1, N, 1e-7, 1e-6, "adagrad acc");
    assert_close(w2, w1, N, 1e-7, 1e-6, "adagrad w");
    memset(a1, 0, sizeof(float) * N), memset(a2, 0, sizeof(float) * N);
    for (long t = 1; t <= 3; t++) {
        base->ops->adam_update(base->ctx, N, 1e-3f, 0.9f, 0.999f, 1e-8f, t, g, a1, v1, w1);
        other->ops->adam_update(other->ctx, N, 1e-3f, 0.9f, 0.999f, 1e-8f, t, g, a2, v2, w2);
    }
    assert_close(a2, a1, N, 1e-7, 1e-6, "adam m");
    assert_close(v2, v1, N, 1e-9, 1e-6, "adam v");
    assert_close(w2, w1, N, 1e-7, 1e-6, "adam w");
    free(g), free(w1), free(w2), free(a1), free(a2), free(v1), free(v2);
    close_pair();
}
END_TEST

/* Two training steps of a model big enough for every packed product (N = 80 rows, 4H
 * = 96: m >= 64) in each build against the baseline build, which has no gemm_packed and
 * runs every product through the BLAS: the loss and every gradient agree to rounding.
 * The recurrent products, the input projection, the weight gradients and the output
 * layer are gemm_packed's in v3 and v4. */
START_TEST(test_train_step_agrees)
{
    enum { TV = 13, TB = 8, TT = 10 };
    sl_config_t cfg;
    sl_lm_t *lm[2] = {NULL, NULL};
    sl_lm_state_t *st[2] = {NULL, NULL};
    sl_step_keys_t keys = {1, 2};
    int32_t x[TB * TT], y[TB * TT];
    double loss[2];
    size_t np;

    if (!open_pair(_i))
        return;
    sl_config_init(&cfg);
    test_lm_config(&cfg, 1, 0, SL_OUTPUT_FULL, 0.0);
    cfg.model.embedding = 16;
    cfg.model.layers[0].hidden = 24;
    cfg.train.batch = TB;
    cfg.train.bptt = TT;
    for (int i = 0; i < TB * TT; i++) {
        x[i] = (int32_t)((i * 7 + 3) % TV);
        y[i] = (int32_t)((i * 5 + 1) % TV);
    }
    for (int j = 0; j < 2; j++) {
        ck_assert_int_eq(sl_lm_new(&lm[j], &cfg, TV, 2, TB, j ? other : base), SL_OK);
        ck_assert_int_eq(sl_lm_init_params(lm[j], 5), SL_OK);
        ck_assert_int_eq(sl_lm_state_new(lm[j], TB, &st[j]), SL_OK);
    }
    np = sl_lm_nparams(lm[0]);
    for (int step = 0; step < 2; step++) { /* the second from the first's state and buffers */
        for (int j = 0; j < 2; j++)
            ck_assert_int_eq(sl_lm_train_step(lm[j], st[j], x, y, TT, &keys, &loss[j]), SL_OK);
        ck_assert_double_eq_tol(loss[1], loss[0], 1e-6 * fabs(loss[0]));
        assert_close(sl_lm_grads(lm[1]), sl_lm_grads(lm[0]), np, 1e-7, 1e-4, "gradients");
    }
    for (int j = 0; j < 2; j++) {
        sl_lm_state_destroy(&st[j]);
        sl_lm_destroy(&lm[j]);
    }
    sl_config_fini(&cfg);
    close_pair();
}
END_TEST

/* With no name and no SHOAL_CPU_ISA, the highest build this CPU runs; SHOAL_CPU_ISA
 * picks another; an explicit name overrides it. */
START_TEST(test_pick)
{
    const sl_cpu_isa_t *isa, *best = NULL;
    sl_backend_t *be;

    for (int i = 0; i < sl_cpu_isa_count(); i++) {
        if (sl_cpu_isa_runs_here(sl_cpu_isa_at(i)))
            best = sl_cpu_isa_at(i);
    }
    ck_assert_ptr_nonnull(best);
    ck_assert(sl_cpu_isa_runs_here(sl_cpu_isa_at(0))); /* the baseline runs anywhere */
    unsetenv("SHOAL_CPU_ISA");
    ck_assert_int_eq(sl_cpu_isa_pick(NULL, &isa), SL_OK);
    ck_assert_ptr_eq(isa, best);
    setenv("SHOAL_CPU_ISA", "", 1);
    ck_assert_int_eq(sl_cpu_isa_pick(NULL, &isa), SL_OK);
    ck_assert_ptr_eq(isa, best);
    setenv("SHOAL_CPU_ISA", sl_cpu_isa_at(0)->name, 1);
    ck_assert_int_eq(sl_cpu_isa_pick(NULL, &isa), SL_OK);
    ck_assert_ptr_eq(isa, sl_cpu_isa_at(0));
    ck_assert_int_eq(sl_backend_new(&be, "cpu", 1), SL_OK);
    ck_assert_ptr_nonnull(strstr(be->ops->describe(be->ctx), sl_cpu_isa_at(0)->desc));
    sl_backend_destroy(&be);
    ck_assert_int_eq(sl_cpu_isa_pick(best->name, &isa), SL_OK);
    ck_assert_ptr_eq(isa, best);
    unsetenv("SHOAL_CPU_ISA");
}
END_TEST

/* A name not built here, from the environment or the argument, and a build this CPU
 * cannot run (where there is one): SL_ERR_INVALID with the source and the names. */
START_TEST(test_pick_errors)
{
    const sl_cpu_isa_t *isa = (const sl_cpu_isa_t *)1;
    sl_backend_t *be = (sl_backend_t *)1;

    setenv("SHOAL_CPU_ISA", "avx9", 1);
    ck_assert_int_eq(sl_cpu_isa_pick(NULL, &isa), SL_ERR_INVALID);
    ck_assert_ptr_null(isa);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "SHOAL_CPU_ISA=avx9: unknown (built here: "));
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), sl_cpu_isa_at(0)->name));
    ck_assert_int_eq(sl_backend_new(&be, "cpu", 1), SL_ERR_INVALID);
    ck_assert_ptr_null(be);
    unsetenv("SHOAL_CPU_ISA");
    ck_assert_int_eq(sl_backend_cpu_new_isa(&be, 1, "V4 "), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "cpu loop level=V4 : unknown"));
    for (int i = 0; i < sl_cpu_isa_count(); i++) {
        if (sl_cpu_isa_runs_here(sl_cpu_isa_at(i)))
            continue;
        ck_assert_int_eq(sl_cpu_isa_pick(sl_cpu_isa_at(i)->name, &isa), SL_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(sl_err_msg(), "this CPU cannot run"));
    }
}
END_TEST

static Suite *
kernels_isa_suite(void)
{
    Suite *s = suite_create("kernels_isa");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    int n = sl_cpu_isa_count();

    /* build 0 is the baseline; one loop iteration per other build */
    tcase_add_loop_test(core, test_lstm_cell_agrees, 1, n);
    tcase_add_loop_test(core, test_softmax_agrees, 1, n);
    tcase_add_loop_test(core, test_embedding_agrees, 1, n);
    tcase_add_loop_test(core, test_elementwise_agrees, 1, n);
    tcase_add_loop_test(core, test_conversions_agree, 1, n);
    tcase_add_loop_test(core, test_optimizers_agree, 1, n);
    tcase_add_loop_test(core, test_train_step_agrees, 1, n);
    tcase_add_test(core, test_pick);
    suite_add_tcase(s, core);
    tcase_add_test(limits, test_pick_errors);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(kernels_isa_suite());
}
