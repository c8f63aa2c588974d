/* Unit tests of src/model/sl_loss_scale: the dynamic loss scaler's state machine on
 * sequences worked by hand (overflow halves and skips, growth after N good steps, the
 * static mode, scaling off for fp32 and bf16, the bounds), and the skip-or-apply end of
 * a training step on the real model and optimizer of the cpu backend: a loss scale near
 * FLT_MAX overflows the gradients, the step is skipped with the parameters and Adam's
 * state bitwise unchanged and the scale halved until a step goes through; a step at
 * S = 1024 updates the parameters exactly as an unscaled fp32 step does. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_loss_scale.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"

#include "test_tool.h"

enum { V = 17, E = 8, H = 8, T = 3, B = 2 };

static sl_backend_t *be;
static sl_config_t cfg;

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

/* cfg for precision p with train.loss_scale {init, dynamic, growth_interval}. */
static void
scaler_config(const char *p, const char *init, int dynamic, int interval)
{
    char set[64];

    snprintf(set, sizeof set, "precision=%s", p);
    ck_assert_int_eq(sl_config_set(&cfg, set), SL_OK);
    snprintf(set, sizeof set, "train.loss_scale.init=%s", init);
    ck_assert_int_eq(sl_config_set(&cfg, set), SL_OK);
    snprintf(set, sizeof set, "train.loss_scale.dynamic=%s", dynamic ? "true" : "false");
    ck_assert_int_eq(sl_config_set(&cfg, set), SL_OK);
    snprintf(set, sizeof set, "train.loss_scale.growth_interval=%d", interval);
    ck_assert_int_eq(sl_config_set(&cfg, set), SL_OK);
}

/* One update with grad_norm g: the verdict and the state after it. */
static void
expect_update(sl_loss_scale_t *ls, double g, int apply, float scale, long good, long skipped)
{
    ck_assert_int_eq(sl_loss_scale_update(ls, g), apply);
    ck_assert_msg(ls->scale == scale, "scale %g, want %g", (double)ls->scale, (double)scale);
    ck_assert_int_eq(ls->good, good);
    ck_assert_int_eq(ls->skipped, skipped);
}

/* ---------------------------------------------------------- state machine */

/* init 8, growth every 3 good steps: 8 8 -> 16, inf -> 8, nan -> 4, then the good-step
 * count starts again from the overflow. */
START_TEST(test_dynamic_sequence)
{
    sl_loss_scale_t ls;

    scaler_config("fp16", "8", 1, 3);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
    ck_assert(ls.enabled && ls.dynamic && ls.scale == 8.0f);
    expect_update(&ls, 0.5, 1, 8.0f, 1, 0);
    expect_update(&ls, 1e30, 1, 8.0f, 2, 0);
    expect_update(&ls, 0.0, 1, 16.0f, 0, 0); /* third good step in a row: doubles */
    expect_update(&ls, 2.0, 1, 16.0f, 1, 0);
    expect_update(&ls, INFINITY, 0, 8.0f, 0, 1); /* overflow: halves, skips */
    ck_assert_int_eq(ls.overflows, 1);
    expect_update(&ls, NAN, 0, 4.0f, 0, 2);
    ck_assert_int_eq(ls.overflows, 2);
    expect_update(&ls, 3.0, 1, 4.0f, 1, 2);
    ck_assert_int_eq(ls.overflows, 0);
    expect_update(&ls, 3.0, 1, 4.0f, 2, 2);
    expect_update(&ls, -INFINITY, 0, 2.0f, 0, 3); /* 2 good steps were not enough */
    expect_update(&ls, 1.0, 1, 2.0f, 1, 3);
    expect_update(&ls, 1.0, 1, 2.0f, 2, 3);
    expect_update(&ls, 1.0, 1, 4.0f, 0, 3);
    expect_update(&ls, 1.0, 1, 4.0f, 1, 3);
}
END_TEST

/* Static: the scale never moves; an overflowed step is still skipped. */
START_TEST(test_static_sequence)
{
    sl_loss_scale_t ls;

    scaler_config("fp16", "1024", 0, 2);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
    ck_assert(ls.enabled && !ls.dynamic && ls.scale == 1024.0f);
    for (int i = 0; i < 5; i++)
        expect_update(&ls, 1.0, 1, 1024.0f, 0, 0);
    expect_update(&ls, INFINITY, 0, 1024.0f, 0, 1);
    expect_update(&ls, NAN, 0, 1024.0f, 0, 2);
    ck_assert_int_eq(ls.overflows, 2);
    expect_update(&ls, 1.0, 1, 1024.0f, 0, 2);
    ck_assert_int_eq(ls.overflows, 0);
}
END_TEST

/* fp32 and bf16 do not scale: S = 1, every step applies, unscale leaves the gradients. */
START_TEST(test_off_for_fp32_and_bf16)
{
    const char *const precs[2] = {"fp32", "bf16"};
    float g[3] = {1.5f, -2.25f, 3.0f};

    for (int i = 0; i < 2; i++) {
        sl_loss_scale_t ls;

        scaler_config(precs[i], "65536", 1, 1);
        ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
        ck_assert(!ls.enabled && ls.scale == 1.0f);
        expect_update(&ls, INFINITY, 1, 1.0f, 0, 0);
        expect_update(&ls, 1.0, 1, 1.0f, 0, 0);
        sl_loss_scale_unscale(&ls, be, g, 3);
        ck_assert(g[0] == 1.5f && g[1] == -2.25f && g[2] == 3.0f);
    }
}
END_TEST

/* Growth stops at FLT_MAX, halving at 2^-126; init outside the normal floats is refused. */
START_TEST(test_bounds)
{
    sl_loss_scale_t ls;

    scaler_config("fp16", "2.5e38", 1, 1); /* 2.5e38 * 2 would be inf */
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
    expect_update(&ls, 1.0, 1, 2.5e38f, 0, 0);
    expect_update(&ls, INFINITY, 0, 1.25e38f, 0, 1);
    expect_update(&ls, 1.0, 1, 2.5e38f, 0, 1);

    scaler_config("fp16", "2.3509887016445750e-38", 1, 1); /* 2^-125 */
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
    expect_update(&ls, NAN, 0, FLT_MIN, 0, 1);
    expect_update(&ls, NAN, 0, FLT_MIN, 0, 2);
    expect_update(&ls, 1.0, 1, 2.0f * FLT_MIN, 0, 2);

    scaler_config("fp16", "1e39", 1, 1);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "train.loss_scale.init: 1e+39 is outside the range of normal "
                                   "floats [1.17549e-38, 3.40282e+38]");
    scaler_config("fp16", "1e-39", 1, 1);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_ERR_CONFIG);
    /* out of range does not matter when nothing is scaled */
    scaler_config("bf16", "1e39", 1, 1);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
}
END_TEST

/* The SL_LOSS_SCALE_MAX_SKIPS-th overflow in a row is an error; the ones before are not,
 * and none of them touches the parameters. */
START_TEST(test_too_many_overflows)
{
    sl_loss_scale_t ls;
    sl_optim_t *opt;
    float w[4] = {1, 2, 3, 4}, g[4];
    double norm;
    int applied;

    scaler_config("fp16", "65536", 1, 10);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
    ck_assert_int_eq(sl_optim_new(&opt, &cfg, 4, be), SL_OK);
    for (int i = 1; i <= SL_LOSS_SCALE_MAX_SKIPS; i++) {
        sl_status_t st;

        g[0] = 1.0f, g[1] = NAN, g[2] = 0.5f, g[3] = 0.25f;
        st = sl_loss_scale_step(&ls, be, opt, w, g, 4, NULL, 0, 0.0, 0.1, &norm, &applied);
        ck_assert_int_eq(applied, 0);
        ck_assert(isnan(norm));
        ck_assert_int_eq(st, i < SL_LOSS_SCALE_MAX_SKIPS ? SL_OK : SL_ERR_INVALID);
    }
    ck_assert_str_eq(sl_err_msg(), "gradients overflowed in 64 steps in a row (loss scale now "
                                   "3.55271e-15): the model diverged; lower train.optimizer.lr");
    ck_assert(ls.scale == ldexpf(1.0f, 16 - 64));
    ck_assert(w[0] == 1 && w[1] == 2 && w[2] == 3 && w[3] == 4);
    sl_optim_destroy(&opt);
}
END_TEST

/* ------------------------------------------------------- through the model */

/* The tiny model: E 8, one LSTM layer of 8, full softmax over V, Adam, init_range r. */
static void
model_config(double init_range)
{
    cfg.run.seed = 5;
    cfg.model.embedding = E;
    cfg.model.nlayers = 1;
    cfg.model.layers[0].hidden = H;
    cfg.model.layers[0].projection = 0;
    cfg.model.dropout = 0.0;
    cfg.model.output = SL_OUTPUT_FULL;
    cfg.model.init_range = init_range;
    cfg.train.batch = B;
    cfg.train.bptt = T;
    cfg.train.optimizer.type = SL_OPT_ADAM;
    cfg.train.optimizer.lr = 0.01;
    cfg.train.optimizer.eps = 1e-8;
    cfg.train.optimizer.clip = 5.0;
}

static const int32_t tx[T * B] = {1, 4, 9, 16, 2, 11}, ty[T * B] = {4, 9, 16, 2, 11, 3};

/* What the trainer does in a step (sl_train.c, train_step, one node): scale the loss,
 * forward and backward, unscale, clip and apply or skip. *loss: summed loss. */
static int
trainer_step(sl_lm_t *lm, sl_lm_state_t *st, sl_optim_t *opt, sl_loss_scale_t *ls, double *loss)
{
    sl_step_keys_t keys = {21, 22};
    size_t n = sl_lm_nparams(lm);
    double norm;
    int applied;

    if (ls->enabled)
        sl_lm_set_loss_scale(lm, ls->scale);
    ck_assert_int_eq(sl_lm_train_step(lm, st, tx, ty, T, &keys, loss), SL_OK);
    sl_loss_scale_unscale(ls, be, sl_lm_grads(lm), n);
    ck_assert_int_eq(sl_loss_scale_step(ls, be, opt, sl_lm_params(lm), sl_lm_grads(lm), n, NULL, 0,
                                        cfg.train.optimizer.clip, 0.01, &norm, &applied),
                     SL_OK);
    ck_assert_int_eq(applied, isfinite(norm));
    return applied;
}

/* S = FLT_MAX with weights of +-8: the output layer's gradient w.r.t. the LSTM output
 * exceeds the float range (inf, then inf * 0 = NaN through the gates), so the step is
 * skipped and S halved, until a scale is small enough; every skipped step leaves the
 * parameters, Adam's moments and its step count bitwise as they were. */
START_TEST(test_overflow_skips_step)
{
    sl_lm_t *lm;
    sl_lm_state_t *st;
    sl_optim_t *opt;
    sl_loss_scale_t ls;
    float *w0, *state0, *opt0, *opt1;
    size_t n, nst, nopt;
    double loss, loss0 = 0;
    long steps;
    int k;

    model_config(8.0);
    scaler_config("fp16", "3.4028234663852886e38", 1, 2000);
    ck_assert_int_eq(sl_loss_scale_init(&ls, &cfg), SL_OK);
    ck_assert(ls.scale == FLT_MAX);
    ck_assert_int_eq(sl_lm_new(&lm, &cfg, V, 1, B, be), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(lm, B, &st), SL_OK);
    n = sl_lm_nparams(lm);
    ck_assert_int_eq(sl_optim_new(&opt, &cfg, n, be), SL_OK);
    nst = sl_lm_state_size(st);
    nopt = sl_optim_state_size(opt);
    w0 = malloc(n * sizeof *w0);
    state0 = malloc(nst * sizeof *state0);
    opt0 = malloc(nopt * sizeof *opt0);
    opt1 = malloc(nopt * sizeof *opt1);
    ck_assert(w0 && state0 && opt0 && opt1);
    memcpy(w0, sl_lm_params(lm), n * sizeof *w0);
    ck_assert_int_eq(sl_lm_state_save(st, state0), SL_OK);
    ck_assert_int_eq(sl_optim_state_save(opt, opt0, &steps), SL_OK);

    for (k = 0; k < SL_LOSS_SCALE_MAX_SKIPS; k++) {
        float before = ls.scale;

        ck_assert_int_eq(sl_lm_state_load(st, state0), SL_OK); /* the same batch again */
        if (trainer_step(lm, st, opt, &ls, &loss))
            break;
        if (k == 0)
            loss0 = loss;
        ck_assert_msg(loss == loss0, "the loss does not depend on the scale");
        ck_assert(ls.scale == before * 0.5f);
        ck_assert_int_eq(ls.skipped, k + 1);
        ck_assert_msg(memcmp(w0, sl_lm_params(lm), n * sizeof *w0) == 0,
                      "skipped step %d changed the parameters", k);
        ck_assert_int_eq(sl_optim_state_save(opt, opt1, &steps), SL_OK);
        ck_assert_int_eq(steps, 0);
        ck_assert(memcmp(opt0, opt1, nopt * sizeof *opt0) == 0);
    }
    /* it took some halvings, and then the step went through */
    ck_assert_int_ge(k, 1);
    ck_assert_int_lt(k, SL_LOSS_SCALE_MAX_SKIPS);
    ck_assert(loss == loss0);
    ck_assert(ls.scale == ldexpf(FLT_MAX, -k));
    ck_assert_int_eq(ls.overflows, 0);
    ck_assert_int_eq(ls.good, 1);
    ck_assert(memcmp(w0, sl_lm_params(lm), n * sizeof *w0) != 0);
    ck_assert_int_eq(sl_optim_steps(opt), 1);
    free(w0), free(state0), free(opt0), free(opt1);
    sl_optim_destroy(&opt);
    sl_lm_state_destroy(&st);
    sl_lm_destroy(&lm);
}
END_TEST

/* Multiplying by a power of two commutes with rounding: a step at S = 1024 (fp16
 * scaler) and an fp32 step (no scaler) from the same model leave the same parameters,
 * bit for bit, over three steps (clipping active). */
START_TEST(test_scaled_step_equals_fp32)
{
    sl_lm_t *lm[2];
    sl_lm_state_t *st[2];
    sl_optim_t *opt[2];
    sl_loss_scale_t ls[2];
    double loss[2];
    size_t n;

    model_config(0.5);
    cfg.train.optimizer.clip = 0.05; /* below the gradient norm: clipping scales */
    for (int i = 0; i < 2; i++) {
        scaler_config(i == 0 ? "fp32" : "fp16", "1024", 1, 2000);
        ck_assert_int_eq(sl_loss_scale_init(&ls[i], &cfg), SL_OK);
        ck_assert_int_eq(sl_lm_new(&lm[i], &cfg, V, 1, B, be), SL_OK);
        ck_assert_int_eq(sl_lm_state_new(lm[i], B, &st[i]), SL_OK);
        ck_assert_int_eq(sl_optim_new(&opt[i], &cfg, sl_lm_nparams(lm[i]), be), SL_OK);
    }
    ck_assert(!ls[0].enabled && ls[1].enabled && ls[1].scale == 1024.0f);
    n = sl_lm_nparams(lm[0]);
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(trainer_step(lm[i], st[i], opt[i], &ls[i], &loss[i]), 1);
        ck_assert(loss[0] == loss[1]);
        ck_assert_msg(memcmp(sl_lm_params(lm[0]), sl_lm_params(lm[1]), n * sizeof(float)) == 0,
                      "step %d: parameters differ", s);
    }
    ck_assert_int_eq(ls[1].good, 3);
    for (int i = 0; i < 2; i++) {
        sl_optim_destroy(&opt[i]);
        sl_lm_state_destroy(&st[i]);
        sl_lm_destroy(&lm[i]);
    }
}
END_TEST

static Suite *
loss_scale_suite(void)
{
    Suite *s = suite_create("loss_scale");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(core, test_dynamic_sequence);
    tcase_add_test(core, test_static_sequence);
    tcase_add_test(core, test_off_for_fp32_and_bf16);
    tcase_add_test(core, test_overflow_skips_step);
    tcase_add_test(core, test_scaled_step_equals_fp32);
    tcase_add_test(limits, test_bounds);
    tcase_add_test(limits, test_too_many_overflows);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(loss_scale_suite());
}
