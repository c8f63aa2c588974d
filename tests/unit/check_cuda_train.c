/* Unit tests of the CUDA backend through the model (kernels/cuda/, src/model/): one
 * training step of a small LSTMP model (forward, backward, clip, SGD) on the CPU backend
 * and on the device, full and sampled softmax, fp32 and bf16 gemms, the input projection
 * per distinct id; the recorded recurrent loops (CUDA graphs) against op by op; loss
 * scaling forced to overflow fp16. Each runs the fused LSTM path (device_options.lstm
 * fused); the cuDNN path (cudnn, sl_cuda_rnn.cu) runs the same steps, over two windows,
 * plus evaluation and next-token logits, and its refusals (bf16, no cuDNN) and auto's
 * choice are checked (SHOAL_TEST_NEED_CUDNN=1 makes a module without cuDNN a failure).
 * The ops one by one are in check_cuda.c; the fixture, buffers, comparisons and main()
 * in test_cuda.h.
 *
 * Tolerances: loss 1e-5 relative, every gradient within 1e-4 max|g| + 1e-3 |g| (fp32);
 * 1e-2 and 5e-2 max|g| with bf16 gemms. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"

#include "test_cuda.h"

/* ---- a training step on both backends ------------------------------------------------ */

enum { MV = 50, ME = 16, MH = 32, MP = 24, MT = 4, MB = 3, MN = MT * MB, MS = 12 };

static void
model_config(sl_config_t *c, sl_output_kind_t out)
{
    sl_config_init(c);
    ck_assert_int_eq(sl_config_set(c, "device_options.lstm=fused"), SL_OK);
    c->run.seed = 3;
    c->model.embedding = ME;
    c->model.nlayers = 2;
    for (int l = 0; l < 2; l++) {
        c->model.layers[l].hidden = MH;
        c->model.layers[l].projection = l == 0 ? MP : 0;
    }
    c->model.dropout = 0.2;
    c->model.output = out;
    c->model.samples = MS;
    c->model.init_range = 0.3;
    c->train.batch = MB;
    c->train.bptt = MT;
    c->train.optimizer.type = SL_OPT_SGD;
    c->train.optimizer.lr = 0.5;
}

static const int32_t mx[MN] = {3, 7, 3, 0, 12, 7, 44, 3, 9, 9, 21, 30};
static const int32_t my[MN] = {7, 3, 0, 12, 7, 44, 3, 9, 9, 21, 30, 1};
/* 3 distinct ids in 12 rows: without dropout, layer 0's input projection goes per id
 * (sl_lm_step.c, per_symbol) */
static const int32_t mx_few[MN] = {3, 7, 3, 7, 3, 9, 9, 3, 7, 9, 3, 7};

/* One step (forward, backward, clip, SGD) of the same model on the CPU and on the
 * device at precision prec, from the same initialisation, state and keys; the
 * device's loss, gradients, new parameters and state against the CPU's. The device's
 * model runs the LSTM path lstm (device_options.lstm; the CPU's is always fused); with
 * more windows, the next ones (one step shorter: another shape) go on from the state
 * the last left, and then an evaluation batch and next-token logits are compared. */
static void
train_step_case(sl_output_kind_t out, sl_precision_t prec, double loss_tol, double grad_tol,
                const int32_t *x, double dropout, const char *lstm, int windows)
{
    sl_config_t cfg;
    sl_lm_t *lc, *lg;
    sl_lm_state_t *sc, *sg;
    sl_optim_t *oc, *og;
    double loss_c, loss_g, gmax;
    float *g, *w, *state_c, *state_g;
    size_t np, ns;
    char what[96], set[64];

    model_config(&cfg, out);
    cfg.model.dropout = dropout;
    snprintf(set, sizeof set, "device_options.lstm=%s", lstm);
    ck_assert_int_eq(sl_config_set(&cfg, set), SL_OK);
    ck_assert_int_eq(sl_lm_new(&lc, &cfg, MV, 2, MB, tc_cpu), SL_OK);
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, prec), SL_OK); /* as a node does: */
    ck_assert_msg(sl_lm_new(&lg, &cfg, MV, 2, MB, tc_dev) == SL_OK, "%s", sl_err_msg()); /* packs */
    ck_assert_int_eq(sl_lm_state_new(lc, MB, &sc), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(lg, MB, &sg), SL_OK);
    ck_assert_int_eq(sl_optim_new(&oc, &cfg, sl_lm_nparams(lc), tc_cpu), SL_OK);
    ck_assert_int_eq(sl_optim_new(&og, &cfg, sl_lm_nparams(lg), tc_dev), SL_OK);
    np = sl_lm_nparams(lc);
    ns = sl_lm_state_size(sc);
    state_c = tc_rnd(ns, 81, -0.5f, 0.5f);
    state_g = tc_xmalloc(ns * sizeof *state_g);
    ck_assert_int_eq(sl_lm_state_load(sc, state_c), SL_OK);
    ck_assert_int_eq(sl_lm_state_load(sg, state_c), SL_OK);
    w = tc_dgetf(sl_lm_params(lg), np);
    tc_expect_same(w, sl_lm_params(lc), np, "initial parameters");
    free(w);

    for (int win = 0; win < windows; win++) {
        sl_step_keys_t keys = {5 + (uint64_t)win, 6};
        int T = MT - win % 2;

        ck_assert_int_eq(sl_lm_train_step(lc, sc, x, my, T, &keys, &loss_c), SL_OK);
        ck_assert_msg(sl_lm_train_step(lg, sg, x, my, T, &keys, &loss_g) == SL_OK, "%s",
                      sl_err_msg());
        if (strcmp(lstm, "auto") != 0)
            ck_assert_str_eq(sl_lm_lstm_path(lg), lstm);
        else if (win == 0) /* for the device log */
            fprintf(stderr, "check_cuda_train: device_options.lstm auto, precision %d: %s\n",
                    (int)prec, sl_lm_lstm_path(lg));
        snprintf(what, sizeof what, "window %d (T %d, output %d, precision %d, lstm %s)", win, T,
                 (int)out, (int)prec, sl_lm_lstm_path(lg));
        ck_assert_msg(fabs(loss_g - loss_c) <= loss_tol * loss_c, "%s: loss: device %.9g, cpu %.9g",
                      what, loss_g, loss_c);
        g = tc_dgetf(sl_lm_grads(lg), np);
        gmax = tc_max_abs(sl_lm_grads(lc), np);
        tc_expect_close(g, sl_lm_grads(lc), np, grad_tol * gmax, prec == SL_PREC_FP32 ? 1e-3 : 0,
                        what);
        free(g);

        sl_clip_global_norm(tc_cpu, sl_lm_grads(lc), np, 0.5);
        sl_clip_global_norm(tc_dev, sl_lm_grads(lg), np, 0.5);
        sl_optim_step(oc, sl_lm_params(lc), sl_lm_grads(lc), 0.5);
        sl_optim_step(og, sl_lm_params(lg), sl_lm_grads(lg), 0.5);
        /* w -= lr g, clipped: a gradient off by at most (grad_tol + 1e-3) gmax moves w by
         * at most lr times that */
        w = tc_dgetf(sl_lm_params(lg), np);
        tc_expect_close(w, sl_lm_params(lc), np, 1e-6 + 0.5 * (grad_tol + 1e-3) * gmax, 0,
                        "parameters after SGD");
        free(w);
        ck_assert_int_eq(sl_lm_state_save(sc, state_c), SL_OK);
        ck_assert_int_eq(sl_lm_state_save(sg, state_g), SL_OK);
        tc_expect_close(state_g, state_c, ns, prec == SL_PREC_FP32 ? 1e-5 : 2e-2, 0,
                        "state (every layer's last h and c)");
        /* the device goes on from the CPU's parameters and state: no drift over windows */
        ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, sl_lm_params(lg), sl_lm_params(lc),
                                                np * sizeof(float)),
                         SL_OK);
        ck_assert_int_eq(sl_lm_state_load(sg, state_c), SL_OK);
    }
    if (windows > 1) { /* the forward alone: an evaluation batch, then next-token logits */
        float *lgc = tc_xmalloc((size_t)MB * MV * sizeof *lgc);
        float *lgg = tc_xmalloc((size_t)MB * MV * sizeof *lgg);

        ck_assert_int_eq(sl_lm_eval_batch(lc, sc, x, my, MT, &loss_c), SL_OK);
        ck_assert_msg(sl_lm_eval_batch(lg, sg, x, my, MT, &loss_g) == SL_OK, "%s", sl_err_msg());
        ck_assert_msg(fabs(loss_g - loss_c) <= loss_tol * loss_c,
                      "evaluation loss: device %.9g, cpu %.9g", loss_g, loss_c);
        ck_assert_int_eq(sl_lm_next_logits(lc, sc, x, lgc), SL_OK);
        ck_assert_msg(sl_lm_next_logits(lg, sg, x, lgg) == SL_OK, "%s", sl_err_msg());
        tc_expect_close(lgg, lgc, (size_t)MB * MV, 1e-5, 1e-4, "next-token logits");
        ck_assert_int_eq(sl_lm_state_save(sc, state_c), SL_OK);
        ck_assert_int_eq(sl_lm_state_save(sg, state_g), SL_OK);
        tc_expect_close(state_g, state_c, ns, 1e-5, 0, "state after the forward-only windows");
        free(lgc);
        free(lgg);
    }
    ck_assert_int_eq(tc_dev->ops->sync(tc_dev->ctx), SL_OK);
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
    free(state_c);
    free(state_g);
    sl_optim_destroy(&oc);
    sl_optim_destroy(&og);
    sl_lm_state_destroy(&sc);
    sl_lm_state_destroy(&sg);
    sl_lm_destroy(&lc);
    sl_lm_destroy(&lg);
    sl_config_fini(&cfg);
}

START_TEST(test_train_step_full)
{
    train_step_case(SL_OUTPUT_FULL, SL_PREC_FP32, 1e-5, 1e-4, mx, 0.2, "fused", 1);
}
END_TEST

START_TEST(test_train_step_sampled)
{
    train_step_case(SL_OUTPUT_SAMPLED, SL_PREC_FP32, 1e-5, 1e-4, mx, 0.2, "fused", 1);
}
END_TEST

START_TEST(test_train_step_per_symbol)
{
    train_step_case(SL_OUTPUT_FULL, SL_PREC_FP32, 1e-5, 1e-4, mx_few, 0.0, "fused", 1);
    train_step_case(SL_OUTPUT_SAMPLED, SL_PREC_FP32, 1e-5, 1e-4, mx_few, 0.0, "fused", 1);
}
END_TEST

START_TEST(test_train_step_bf16)
{
    if (tc_on_cuda)
        train_step_case(SL_OUTPUT_FULL, SL_PREC_BF16, 1e-2, 5e-2, mx, 0.2, "fused", 1);
}
END_TEST

/* Whether the backend under test has the cuDNN path; where it lacks it on a GPU, a
 * failure with SHOAL_TEST_NEED_CUDNN=1 (tests/device/run), else a note and a skip. */
static int
have_cudnn(void)
{
    const char *need = getenv("SHOAL_TEST_NEED_CUDNN");

    if (tc_dev->ops->lstm_layer_new)
        return 1;
    ck_assert_msg(!tc_on_cuda || !need || strcmp(need, "1") != 0,
                  "SHOAL_TEST_NEED_CUDNN=1: this CUDA module was built without cuDNN");
    fprintf(stderr, "check_cuda_train: no cuDNN LSTM layers on %s: the cudnn cases skip\n",
            tc_dev_name);
    return 0;
}

/* The cuDNN path (layer 0 LSTMP 32/24, layer 1 LSTM 32) against the CPU's fused one:
 * two training windows of two shapes, then evaluation and logits; with dropout (full
 * and sampled softmax) and without (ids for which the fused path would project per id). */
START_TEST(test_train_step_cudnn)
{
    if (!have_cudnn())
        return;
    train_step_case(SL_OUTPUT_FULL, SL_PREC_FP32, 1e-5, 1e-4, mx, 0.2, "cudnn", 3);
    train_step_case(SL_OUTPUT_SAMPLED, SL_PREC_FP32, 1e-5, 1e-4, mx, 0.2, "cudnn", 2);
    train_step_case(SL_OUTPUT_FULL, SL_PREC_FP32, 1e-5, 1e-4, mx_few, 0.0, "cudnn", 2);
}
END_TEST

/* auto: the first step times both paths, picks one (printed for the device log) and
 * matches the CPU either way; in bf16 it picks fused, and cudnn is refused there in one
 * line; without cuDNN, cudnn is refused and auto runs fused. */
START_TEST(test_lstm_choice)
{
    sl_config_t cfg;
    sl_lm_t *lm = NULL;

    train_step_case(SL_OUTPUT_FULL, SL_PREC_FP32, 1e-5, 1e-4, mx, 0.2, "auto", 2);
    model_config(&cfg, SL_OUTPUT_FULL);
    ck_assert_int_eq(sl_config_set(&cfg, "device_options.lstm=cudnn"), SL_OK);
    if (!tc_on_cuda) { /* the CPU runs fused whatever the key says */
        ck_assert_int_eq(sl_lm_new(&lm, &cfg, MV, 2, MB, tc_dev), SL_OK);
        ck_assert_str_eq(sl_lm_lstm_path(lm), "fused");
        sl_lm_destroy(&lm);
    } else if (!have_cudnn()) {
        ck_assert_int_eq(sl_lm_new(&lm, &cfg, MV, 2, MB, tc_dev), SL_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(sl_err_msg(), "device_options.lstm: cudnn: device ") == sl_err_msg() &&
                          strstr(sl_err_msg(), "has no cuDNN LSTM layers") &&
                          !strchr(sl_err_msg(), '\n'),
                      "%s", sl_err_msg());
    } else {
        ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_BF16), SL_OK);
        ck_assert_int_eq(sl_lm_new(&lm, &cfg, MV, 2, MB, tc_dev), SL_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(sl_err_msg(), "device_options.lstm: cudnn: layer 1: ") ==
                              sl_err_msg() &&
                          strstr(sl_err_msg(), "not bf16") && !strchr(sl_err_msg(), '\n'),
                      "%s", sl_err_msg());
        ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
        train_step_case(SL_OUTPUT_FULL, SL_PREC_BF16, 1e-2, 5e-2, mx, 0.2, "auto", 1);
    }
    ck_assert_ptr_null(lm);
    sl_config_fini(&cfg);
    /* auto runs fused in bf16 */
    if (tc_on_cuda) {
        sl_lm_state_t *st;
        sl_step_keys_t keys = {1, 2};
        double loss;

        model_config(&cfg, SL_OUTPUT_FULL);
        ck_assert_int_eq(sl_config_set(&cfg, "device_options.lstm=auto"), SL_OK);
        ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_BF16), SL_OK);
        ck_assert_int_eq(sl_lm_new(&lm, &cfg, MV, 2, MB, tc_dev), SL_OK);
        ck_assert_int_eq(sl_lm_state_new(lm, MB, &st), SL_OK);
        ck_assert_str_eq(sl_lm_lstm_path(lm), have_cudnn() ? "auto" : "fused");
        ck_assert_msg(sl_lm_train_step(lm, st, mx, my, MT, &keys, &loss) == SL_OK, "%s",
                      sl_err_msg());
        ck_assert_str_eq(sl_lm_lstm_path(lm), "fused");
        ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
        sl_lm_state_destroy(&st);
        sl_lm_destroy(&lm);
        sl_config_fini(&cfg);
    }
}
END_TEST

/* Recordings of the recurrent loops (CUDA graphs): the same training steps on a model
 * whose backend records and replays and on one whose ops table lacks the recording ops
 * give the same bits, step after step (loss, gradients, parameters after SGD, state):
 * windows of one shape (the first op by op, the second recorded, the rest replayed),
 * then of another (a new recording), then the first again. */
static void
replay_case(sl_output_kind_t out, sl_precision_t prec)
{
    static const int bptt[] = {MT, MT, MT, MT, MT - 1, MT - 1, MT - 1, MT, MT, MT};
    sl_backend_ops_t plain_ops = *tc_dev->ops;
    sl_backend_t plain = *tc_dev;
    sl_backend_t *be[2] = {tc_dev, &plain};
    sl_config_t cfg;
    sl_lm_t *lm[2];
    sl_lm_state_t *st[2];
    sl_optim_t *opt[2];
    float *state0, *got[2];
    size_t np, ns;

    plain_ops.record_begin = NULL;
    plain_ops.record_end = NULL;
    plain_ops.replay = NULL;
    plain_ops.record_free = NULL;
    plain.ops = &plain_ops;
    model_config(&cfg, out);
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, prec), SL_OK);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(sl_lm_new(&lm[i], &cfg, MV, 2, MB, be[i]) == SL_OK, "%s", sl_err_msg());
        ck_assert_int_eq(sl_lm_state_new(lm[i], MB, &st[i]), SL_OK);
        ck_assert_int_eq(sl_optim_new(&opt[i], &cfg, sl_lm_nparams(lm[i]), be[i]), SL_OK);
    }
    np = sl_lm_nparams(lm[0]);
    ns = sl_lm_state_size(st[0]);
    state0 = tc_rnd(ns, 82, -0.5f, 0.5f);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(sl_lm_state_load(st[i], state0), SL_OK);
    for (size_t w = 0; w < sizeof bptt / sizeof bptt[0]; w++) {
        sl_step_keys_t keys = {7 + w, 11 + w};
        double loss[2];
        char what[96];

        for (int i = 0; i < 2; i++) {
            ck_assert_msg(sl_lm_train_step(lm[i], st[i], mx, my, bptt[w], &keys, &loss[i]) == SL_OK,
                          "window %zu: %s", w, sl_err_msg());
            got[i] = tc_dgetf(sl_lm_grads(lm[i]), np);
        }
        snprintf(what, sizeof what, "window %zu (T %d, precision %d): gradients", w, bptt[w],
                 (int)prec);
        ck_assert_msg(loss[0] == loss[1], "%s: loss %.17g recorded, %.17g op by op", what, loss[0],
                      loss[1]);
        tc_expect_same(got[0], got[1], np, what);
        for (int i = 0; i < 2; i++) {
            free(got[i]);
            sl_optim_step(opt[i], sl_lm_params(lm[i]), sl_lm_grads(lm[i]), 0.5);
            got[i] = tc_dgetf(sl_lm_params(lm[i]), np);
        }
        tc_expect_same(got[0], got[1], np, "parameters after SGD");
        for (int i = 0; i < 2; i++)
            free(got[i]);
    }
    for (int i = 0; i < 2; i++) {
        got[i] = tc_xmalloc(ns * sizeof *got[i]);
        ck_assert_int_eq(sl_lm_state_save(st[i], got[i]), SL_OK);
    }
    tc_expect_same(got[0], got[1], ns, "state after the windows");
    ck_assert_msg(tc_dev->ops->sync(tc_dev->ctx) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
    for (int i = 0; i < 2; i++) {
        free(got[i]);
        sl_optim_destroy(&opt[i]);
        sl_lm_state_destroy(&st[i]);
        sl_lm_destroy(&lm[i]);
    }
    free(state0);
    sl_config_fini(&cfg);
}

START_TEST(test_replay_same_bits)
{
    replay_case(SL_OUTPUT_FULL, SL_PREC_FP32);
    replay_case(SL_OUTPUT_SAMPLED, SL_PREC_FP32);
    if (tc_on_cuda)
        replay_case(SL_OUTPUT_FULL, SL_PREC_BF16);
}
END_TEST

/* Loss scaling: 2^24 / N times the softmax gradient is ~1e6, past fp16's 65504, so with
 * fp16 gemms the gradients overflow (what the trainer detects to skip the step and
 * halve the scale); the same scale in fp32 or bf16 (fp32's range) stays finite, and
 * fp16 with scale 1 too. */
static double
scaled_sumsq(sl_precision_t prec, float scale)
{
    sl_config_t cfg;
    sl_lm_t *lm;
    sl_lm_state_t *st;
    sl_step_keys_t keys = {1, 2};
    double loss, ss;

    model_config(&cfg, SL_OUTPUT_FULL);
    ck_assert_int_eq(sl_lm_new(&lm, &cfg, MV, 1, MB, tc_dev), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(lm, MB, &st), SL_OK);
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, prec), SL_OK);
    sl_lm_set_loss_scale(lm, scale);
    ck_assert_int_eq(sl_lm_train_step(lm, st, mx, my, MT, &keys, &loss), SL_OK);
    ck_assert_msg(isfinite(loss) && loss > 0, "loss %g (unscaled, finite)", loss);
    ss = tc_dev->ops->sumsq(tc_dev->ctx, sl_lm_nparams(lm), sl_lm_grads(lm));
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
    ck_assert_int_eq(tc_dev->ops->sync(tc_dev->ctx), SL_OK);
    sl_lm_state_destroy(&st);
    sl_lm_destroy(&lm);
    sl_config_fini(&cfg);
    return ss;
}

START_TEST(test_loss_scale_overflow)
{
    const float big = 0x1p24f;
    double s1, s32;

    if (!tc_on_cuda)
        return;
    ck_assert(!isfinite(scaled_sumsq(SL_PREC_FP16, big)));
    ck_assert(isfinite(scaled_sumsq(SL_PREC_BF16, big)));
    s32 = scaled_sumsq(SL_PREC_FP32, big);
    s1 = scaled_sumsq(SL_PREC_FP32, 1.0f);
    ck_assert(isfinite(scaled_sumsq(SL_PREC_FP16, 1.0f)));
    /* the scale multiplies every gradient: sum of squares by scale^2 */
    ck_assert_msg(fabs(s32 / ((double)big * big) - s1) <= 1e-4 * s1, "%g vs %g",
                  s32 / ((double)big * big), s1);
}
END_TEST

/* ---- main ---------------------------------------------------------------------------- */

static Suite *
cuda_train_suite(void)
{
    Suite *s = suite_create("cuda_train");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_checked_fixture(core, tc_setup, tc_teardown);
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_train_step_full);
    tcase_add_test(core, test_train_step_sampled);
    tcase_add_test(core, test_train_step_per_symbol);
    tcase_add_test(core, test_train_step_bf16);
    tcase_add_test(core, test_train_step_cudnn);
    tcase_add_test(core, test_lstm_choice);
    tcase_add_test(core, test_replay_same_bits);
    suite_add_tcase(s, core);

    tcase_add_checked_fixture(limits, tc_setup, tc_teardown);
    tcase_set_timeout(limits, 60);
    tcase_add_test(limits, test_loss_scale_overflow);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return tc_main(cuda_train_suite(), "check_cuda_train");
}
