/* Unit tests of src/model's sampler and optimizers: the log-uniform sampler's
 * distribution and unique draws, SGD, Adagrad and Adam steps worked by hand, optimizer
 * state round trips, global-norm clipping, lr schedules, and the sampler's and
 * optimizers' refusals. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_rng.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_optim.h"
#include "model/sl_sampler.h"

#include "test_tool.h"

static sl_backend_t *be;
static sl_config_t cfg; /* defaults, set per test by test_lm_config */

static void
setup(void)
{
    ck_assert_int_eq(sl_backend_cpu_new(&be, 1), SL_OK);
    sl_config_init(&cfg);
}

static void
teardown(void)
{
    sl_config_fini(&cfg);
    sl_backend_destroy(&be);
}

/* ---- sampler ---- */

START_TEST(test_sampler_distribution)
{
    sl_sampler_t sp;
    sl_rng_t rng;
    enum { R = 100, DRAWS = 100000 };
    long count[R] = {0};
    double psum = 0.0;

    ck_assert_int_eq(sl_sampler_init(&sp, R), SL_OK);
    for (int k = 0; k < R; k++)
        psum += sl_sampler_prob(&sp, k);
    ck_assert_double_eq_tol(psum, 1.0, 1e-12);
    /* P(0) = log 2 / log 101 */
    ck_assert_double_eq_tol(sl_sampler_prob(&sp, 0), 0.6931471805599453 / 4.61512051684126, 1e-12);
    sl_rng_init(&rng, 99);
    for (int i = 0; i < DRAWS; i++) {
        int32_t k = sl_sampler_draw(&sp, &rng);
        ck_assert(k >= 0 && k < R);
        count[k]++;
    }
    for (int k = 0; k < 10; k++) {
        double p = sl_sampler_prob(&sp, k), sd = sqrt(p * (1 - p) / DRAWS);
        ck_assert_msg(fabs((double)count[k] / DRAWS - p) < 5 * sd, "k=%d: frequency %g, P %g", k,
                      (double)count[k] / DRAWS, p);
    }
    sl_sampler_fini(&sp);
}
END_TEST

START_TEST(test_sampler_unique)
{
    sl_sampler_t sp;
    sl_rng_t rng;
    int32_t out[50];
    long tries;

    ck_assert_int_eq(sl_sampler_init(&sp, 60), SL_OK);
    sl_rng_init(&rng, 5);
    for (int rep = 0; rep < 20; rep++) {
        ck_assert_int_eq(sl_sampler_draw_unique(&sp, &rng, 50, out, &tries), SL_OK);
        ck_assert_int_ge(tries, 50);
        for (int i = 0; i < 50; i++) {
            ck_assert(out[i] >= 0 && out[i] < 60);
            for (int j = 0; j < i; j++)
                ck_assert_int_ne(out[i], out[j]);
        }
    }
    /* expected counts: Q = P after one try; 1 - (1-P)^3 after three */
    double p = sl_sampler_prob(&sp, 4);
    ck_assert_double_eq_tol(sl_sampler_log_expected(&sp, 4, 1), log(p), 1e-12);
    ck_assert_double_eq_tol(sl_sampler_log_expected(&sp, 4, 3), log(1 - pow(1 - p, 3)), 1e-12);
    /* same key, same draws */
    int32_t a[10], b[10];
    sl_rng_init(&rng, 77);
    ck_assert_int_eq(sl_sampler_draw_unique(&sp, &rng, 10, a, &tries), SL_OK);
    sl_rng_init(&rng, 77);
    ck_assert_int_eq(sl_sampler_draw_unique(&sp, &rng, 10, b, &tries), SL_OK);
    ck_assert_mem_eq(a, b, sizeof a);
    sl_sampler_fini(&sp);
}
END_TEST

START_TEST(test_sampler_limits)
{
    sl_sampler_t sp;
    sl_rng_t rng;
    int32_t out[4];
    long tries;

    ck_assert_int_eq(sl_sampler_init(&sp, 0), SL_ERR_INVALID);
    ck_assert_int_eq(sl_sampler_init(&sp, 3), SL_OK);
    sl_rng_init(&rng, 1);
    ck_assert_int_eq(sl_sampler_draw_unique(&sp, &rng, 4, out, &tries), SL_ERR_INVALID);
    ck_assert_int_eq(sl_sampler_draw_unique(&sp, &rng, 3, out, &tries), SL_OK);
    ck_assert_int_eq(out[0] + out[1] + out[2], 0 + 1 + 2);
    sl_sampler_fini(&sp);
    sl_sampler_fini(&sp);
}
END_TEST

/* ---- optimizers, clipping, schedules ---- */

static const float w_init[3] = {1.0f, -2.0f, 0.5f};
static const float g1[3] = {0.5f, -1.0f, 2.0f};
static const float g2[3] = {-0.5f, 1.0f, 2.0f};

static void
two_steps(sl_opt_kind_t type, double acc0, float *w)
{
    sl_optim_t *o;

    test_lm_config(&cfg, 1, 0, SL_OUTPUT_FULL, 0.0);
    cfg.train.optimizer.type = type;
    cfg.train.optimizer.initial_accumulator = acc0;
    cfg.train.optimizer.eps = type == SL_OPT_ADAGRAD ? 1e-10 : 1e-8; /* the config's defaults */
    memcpy(w, w_init, sizeof w_init);
    ck_assert_int_eq(sl_optim_new(&o, &cfg, 3, be), SL_OK);
    sl_optim_step(o, w, g1, 0.1);
    sl_optim_step(o, w, g2, 0.1);
    ck_assert_int_eq(sl_optim_steps(o), 2);
    sl_optim_destroy(&o);
    ck_assert_ptr_null(o);
}

START_TEST(test_optim_sgd)
{
    float w[3];

    /* w - 0.1 g1 - 0.1 g2 = w - 0.1 (0, 0, 4) */
    two_steps(SL_OPT_SGD, 0.0, w);
    ck_assert_float_eq_tol(w[0], 1.0f, 1e-6f);
    ck_assert_float_eq_tol(w[1], -2.0f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 0.1f, 1e-6f);
}
END_TEST

START_TEST(test_optim_adagrad)
{
    float w[3];

    /* acc0 = 0, eps 1e-10. Step 1: acc = g1^2 = (.25, 1, 4), step = .1 g/|g| = .1 sign:
     * w = (.9, -1.9, .4). Step 2: acc = (.5, 2, 8), sqrt = (.7071068, 1.4142136,
     * 2.8284271); step = .1 (-.5, 1, 2) / sqrt = (-.0707107, .0707107, .0707107):
     * w = (.9707107, -1.9707107, .3292893). */
    two_steps(SL_OPT_ADAGRAD, 0.0, w);
    ck_assert_float_eq_tol(w[0], 0.9707107f, 1e-6f);
    ck_assert_float_eq_tol(w[1], -1.9707107f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 0.3292893f, 1e-6f);
    /* acc0 = 0.75. Step 1: acc = (1, 1.75, 4.75): w -= .1 (.5/1, -1/1.3228757,
     * 2/2.1794495) = (.05, -.0755929, .0917663) -> (.95, -1.9244071, .4082337).
     * Step 2: acc = (1.25, 2.75, 8.75): w -= .1 (-.5/1.1180340, 1/1.6583124,
     * 2/2.9580399) = (-.0447214, .0603023, .0676123) -> (.9947214, -1.9847094, .3406214) */
    two_steps(SL_OPT_ADAGRAD, 0.75, w);
    ck_assert_float_eq_tol(w[0], 0.9947214f, 1e-6f);
    ck_assert_float_eq_tol(w[1], -1.9847094f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 0.3406214f, 1e-6f);
}
END_TEST

START_TEST(test_optim_adam)
{
    float w[3];

    /* b1 .9, b2 .999, eps 1e-8, lr .1. Step 1: m = .1 g1, v = .001 g1^2; mhat = g1,
     * vhat = g1^2: w -= .1 sign(g1) -> (.9, -1.9, .4).
     * Step 2: m = .9 m + .1 g2 = (-.005, .01, .38); v = .999 v + .001 g2^2 =
     * (.00049975, .001999, .007996); mhat = m / (1 - .81) = (-.0263158, .0526316, 2);
     * vhat = v / (1 - .998001) = (.25, 1, 4); w -= .1 mhat / sqrt(vhat) =
     * (-.0052632, .0052632, .1) -> (.9052632, -1.9052632, .3). */
    two_steps(SL_OPT_ADAM, 0.0, w);
    ck_assert_float_eq_tol(w[0], 0.9052632f, 1e-6f);
    ck_assert_float_eq_tol(w[1], -1.9052632f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 0.3f, 1e-6f);
}
END_TEST

/* Adagrad over spans of a gradient zero elsewhere: the same bits as over every
 * parameter, untouched ones left as they were, with eps > 0; with eps 0 and acc0 0 a
 * zero gradient's update is 0 / 0, NaN, over every parameter alike (PyTorch's too). */
START_TEST(test_optim_adagrad_spans)
{
    enum { P = 8 };
    const size_t spans[] = {1, 2, 5, 1};
    const double eps[] = {1e-10, 0.0};

    for (int e = 0; e < 2; e++) {
        float g[P] = {0}, w[2][P], acc[2][P];
        sl_optim_t *o[2];

        test_lm_config(&cfg, 1, 0, SL_OUTPUT_FULL, 0.0);
        cfg.train.optimizer.type = SL_OPT_ADAGRAD;
        cfg.train.optimizer.initial_accumulator = 0.0;
        cfg.train.optimizer.eps = eps[e];
        g[1] = 0.5f;
        g[2] = -1.0f;
        g[5] = 2.0f;
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < P; i++)
                w[k][i] = 0.25f * (float)(i + 1);
            ck_assert_int_eq(sl_optim_new(&o[k], &cfg, P, be), SL_OK);
        }
        sl_optim_step(o[0], w[0], g, 0.1);
        sl_optim_step_spans(o[1], w[1], g, 0.1, spans, 2);
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(sl_optim_state_save(o[k], acc[k], &(long){0}), SL_OK);
            sl_optim_destroy(&o[k]);
        }
        ck_assert(memcmp(w[0], w[1], sizeof w[0]) == 0);
        ck_assert(memcmp(acc[0], acc[1], sizeof acc[0]) == 0);
        ck_assert(e == 0 ? w[0][0] == 0.25f && w[0][7] == 2.0f : isnan(w[0][0]));
    }
}
END_TEST

/* Saving after one step and loading into a fresh optimizer continues identically. */
START_TEST(test_optim_state_round_trip)
{
    sl_optim_t *o, *r;
    float w[3], wr[3], state[6];
    long steps;

    test_lm_config(&cfg, 1, 0, SL_OUTPUT_FULL, 0.0);
    cfg.train.optimizer.type = SL_OPT_ADAM;
    memcpy(w, w_init, sizeof w);
    ck_assert_int_eq(sl_optim_new(&o, &cfg, 3, be), SL_OK);
    ck_assert_int_eq(sl_optim_new(&r, &cfg, 3, be), SL_OK);
    ck_assert_uint_eq(sl_optim_state_size(o), 6);
    sl_optim_step(o, w, g1, 0.1);
    ck_assert_int_eq(sl_optim_state_save(o, state, &steps), SL_OK);
    ck_assert_int_eq(steps, 1);
    ck_assert_float_eq_tol(state[0], 0.05f, 1e-7f);  /* m = .1 g1 */
    ck_assert_float_eq_tol(state[5], 0.004f, 1e-7f); /* v = .001 g1^2 */
    ck_assert_int_eq(sl_optim_state_load(r, state, steps), SL_OK);
    memcpy(wr, w, sizeof w);
    sl_optim_step(o, w, g2, 0.1);
    sl_optim_step(r, wr, g2, 0.1);
    ck_assert_mem_eq(w, wr, sizeof w);
    ck_assert_int_eq(sl_optim_state_load(r, state, -1), SL_ERR_INVALID);
    sl_optim_destroy(&o);
    sl_optim_destroy(&r);
    cfg.train.optimizer.type = SL_OPT_SGD;
    ck_assert_int_eq(sl_optim_new(&o, &cfg, 3, be), SL_OK);
    ck_assert_uint_eq(sl_optim_state_size(o), 0);
    sl_optim_destroy(&o);
}
END_TEST

START_TEST(test_clip)
{
    float g[3] = {3.0f, 4.0f, 0.0f};

    /* norm 5 under 10: untouched */
    ck_assert_double_eq_tol(sl_clip_global_norm(be, g, 3, 10.0), 5.0, 1e-12);
    ck_assert(g[0] == 3.0f && g[1] == 4.0f);
    /* clip 0 = off */
    ck_assert_double_eq_tol(sl_clip_global_norm(be, g, 3, 0.0), 5.0, 1e-12);
    ck_assert(g[0] == 3.0f);
    /* factor 2.5 / (5 + 1e-6): (1.5, 2, 0) to float precision */
    ck_assert_double_eq_tol(sl_clip_global_norm(be, g, 3, 2.5), 5.0, 1e-12);
    ck_assert_float_eq_tol(g[0], 1.5f, 5e-7f);
    ck_assert_float_eq_tol(g[1], 2.0f, 5e-7f);
    ck_assert(g[2] == 0.0f);
    /* where PyTorch's 1e-6 shows: norm 5e-6, clip 2.5e-6, factor 2.5e-6 / 6e-6 =
     * .41666667: (1.25e-6, 1.6666667e-6) */
    g[0] = 3e-6f;
    g[1] = 4e-6f;
    ck_assert_double_eq_tol(sl_clip_global_norm(be, g, 3, 2.5e-6), 5e-6, 1e-12);
    ck_assert_float_eq_tol(g[0], 1.25e-6f, 1e-12f);
    ck_assert_float_eq_tol(g[1], 1.6666667e-6f, 1e-12f);
}
END_TEST

/* Over spans the clip's sum of squares takes the blocks the spans meet and gives the
 * same bits as over everything: spans within a block, across a block's end, two in one
 * block, over 2,600 blocks (more than one batch of the op, sl_optim.c's NORM_BATCH), and
 * to the end of a short last block; only the spans are scaled. */
START_TEST(test_clip_spans)
{
    enum { B = SL_SUMSQ_BLOCK };
    size_t n = 3000 * (size_t)B + 77;
    size_t spans[] = {5,  10,         3 * B - 4,        8,      3 * B + 100,
                      50, 10 * B + 7, 2600 * (size_t)B, n - 20, 20};
    float *g = calloc(n, sizeof *g), *h;
    double ref = 0.0, norm;

    ck_assert_ptr_nonnull(g);
    for (size_t i = 0; i < 5; i++)
        for (size_t j = spans[2 * i]; j < spans[2 * i] + spans[2 * i + 1]; j++) {
            g[j] = 2.0f * sl_rng_float_at(7, j) - 1.0f;
            ref += (double)g[j] * g[j];
        }
    h = malloc(n * sizeof *h);
    ck_assert_ptr_nonnull(h);
    memcpy(h, g, n * sizeof *h);
    norm = sl_clip_global_norm(be, g, n, 1.0);
    ck_assert_double_eq_tol(norm, sqrt(ref), 1e-12 * sqrt(ref));
    ck_assert(sl_clip_global_norm_spans(be, h, n, 1.0, spans, 5) == norm);
    ck_assert(memcmp(g, h, n * sizeof *h) == 0);
    free(g);
    free(h);
}
END_TEST

START_TEST(test_lr_schedules)
{

    test_lm_config(&cfg, 1, 0, SL_OUTPUT_FULL, 0.0);
    cfg.train.optimizer.lr = 20.0;
    cfg.train.schedule.type = SL_SCHED_CONSTANT;
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 0, 0, 100), 20.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 99, 3, 100), 20.0, 1e-12);
    cfg.train.schedule.type = SL_SCHED_EPOCH_DECAY;
    cfg.train.schedule.decay = 0.5;
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 0, 0, 100), 20.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 50, 1, 100), 10.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 50, 3, 100), 2.5, 1e-12);
    cfg.train.schedule.type = SL_SCHED_LINEAR;
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 0, 0, 100), 20.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 25, 0, 100), 15.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 100, 0, 100), 0.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 150, 0, 100), 0.0, 1e-12);
    /* a horizon of its own: 400 steps, whatever the run's */
    cfg.train.schedule.steps = 400;
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 100, 0, 100), 15.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 300, 0, 1000), 5.0, 1e-12);
    cfg.train.schedule.steps = 0;
    /* warm-up over 4 steps: x (step+1)/4 until 1 */
    cfg.train.schedule.warmup_steps = 4;
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 1, 0, 100), 20.0 * 0.99 * 0.5, 1e-12);
    cfg.train.schedule.type = SL_SCHED_CONSTANT;
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 0, 0, 100), 5.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 2, 0, 100), 15.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 3, 0, 100), 20.0, 1e-12);
    ck_assert_double_eq_tol(sl_lr_at(&cfg, 40, 0, 100), 20.0, 1e-12);
}
END_TEST

START_TEST(test_optim_bad_config)
{
    sl_optim_t *o;

    test_lm_config(&cfg, 1, 0, SL_OUTPUT_FULL, 0.0);
    cfg.train.optimizer.type = SL_OPT_ADAM;
    cfg.train.optimizer.beta1 = 1.0;
    ck_assert_int_eq(sl_optim_new(&o, &cfg, 3, be), SL_ERR_INVALID);
    ck_assert_ptr_null(o);
    cfg.train.optimizer.type = SL_OPT_ADAGRAD;
    cfg.train.optimizer.initial_accumulator = -1.0;
    ck_assert_int_eq(sl_optim_new(&o, &cfg, 3, be), SL_ERR_INVALID);
}
END_TEST

static Suite *
model_optim_suite(void)
{
    Suite *s = suite_create("model_optim");
    TCase *core = tcase_create("core");
    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_test(core, test_sampler_distribution);
    tcase_add_test(core, test_sampler_unique);
    tcase_add_test(core, test_optim_sgd);
    tcase_add_test(core, test_optim_adagrad);
    tcase_add_test(core, test_optim_adam);
    tcase_add_test(core, test_optim_adagrad_spans);
    tcase_add_test(core, test_optim_state_round_trip);
    tcase_add_test(core, test_clip);
    tcase_add_test(core, test_clip_spans);
    tcase_add_test(core, test_lr_schedules);
    suite_add_tcase(s, core);

    TCase *limits = tcase_create("limits");
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(limits, test_sampler_limits);
    tcase_add_test(limits, test_optim_bad_config);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(model_optim_suite());
}
