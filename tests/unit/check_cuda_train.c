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

/* ---- the whole-layer op against the CPU's cells ---------------------------------- */

/* One layer (input IN, cell H, projection p) over T steps of B streams, on the host with
 * the CPU backend's ops as the model's fused path runs them: forward into y (T*B, R),
 * h_t, c_t; with dy, backward into dx and the weight gradients (added). */
typedef struct {
    int in, h, p, r, T, B;
    float *x, *w_ih, *w_hh, *b, *w_proj, *h0, *c0, *dy;
} rnn_case_t;

static void
rnn_case_fill(rnn_case_t *k)
{
    int N = k->T * k->B, g4 = 4 * k->h;

    k->x = tc_rnd((size_t)N * k->in, 91, -1.0f, 1.0f);
    k->w_ih = tc_rnd((size_t)g4 * k->in, 92, -0.3f, 0.3f);
    k->w_hh = tc_rnd((size_t)g4 * k->r, 93, -0.3f, 0.3f);
    k->b = tc_rnd((size_t)g4, 94, -0.5f, 0.5f);
    k->w_proj = k->p > 0 ? tc_rnd((size_t)k->p * k->h, 95, -0.4f, 0.4f) : NULL;
    k->h0 = tc_rnd((size_t)k->B * k->r, 96, -0.5f, 0.5f);
    k->c0 = tc_rnd((size_t)k->B * k->h, 97, -0.5f, 0.5f);
    k->dy = tc_rnd((size_t)N * k->r, 98, -1.0f, 1.0f);
}

static void
rnn_case_free(rnn_case_t *k)
{
    free(k->x);
    free(k->w_ih);
    free(k->w_hh);
    free(k->b);
    free(k->w_proj);
    free(k->h0);
    free(k->c0);
    free(k->dy);
}

static void
cpu_layer(const rnn_case_t *k, float *y, float *h_t, float *c_t, float *dx, float *dw_ih,
          float *dw_hh, float *db, float *dw_proj)
{
    const sl_backend_ops_t *o = tc_cpu->ops;
    void *ctx = tc_cpu->ctx;
    int g4 = 4 * k->h, B = k->B, N = k->T * k->B;
    float *gates = tc_xmalloc((size_t)N * g4 * sizeof(float));
    float *c = tc_xmalloc((size_t)N * k->h * sizeof(float));
    float *m = tc_xmalloc((size_t)N * k->h * sizeof(float));
    float *dr = tc_xmalloc((size_t)N * k->r * sizeof(float));
    float *dg = tc_xmalloc((size_t)B * g4 * sizeof(float));
    float *dm = tc_xmalloc((size_t)B * k->h * sizeof(float));
    float *dc = tc_xmalloc((size_t)B * k->h * sizeof(float));

    for (int t = 0; t < k->T; t++) {
        float *gt = gates + (size_t)t * B * g4, *ct = c + (size_t)t * B * k->h;
        float *mt = m + (size_t)t * B * k->h, *yt = y + (size_t)t * B * k->r;
        const float *rp = t ? yt - (size_t)B * k->r : k->h0;
        const float *cp = t ? ct - (size_t)B * k->h : k->c0;

        o->gemm(ctx, 0, 1, B, g4, k->in, 1.0f, k->x + (size_t)t * B * k->in, k->in, k->w_ih, k->in,
                0.0f, gt, g4);
        o->add_bias(ctx, B, g4, k->b, gt);
        o->gemm(ctx, 0, 1, B, g4, k->r, 1.0f, rp, k->r, k->w_hh, k->r, 1.0f, gt, g4);
        o->lstm_cell_forward(ctx, B, k->h, gt, cp, ct, mt);
        if (k->p > 0)
            o->gemm(ctx, 0, 1, B, k->r, k->h, 1.0f, mt, k->h, k->w_proj, k->h, 0.0f, yt, k->r);
        else
            memcpy(yt, mt, (size_t)B * k->h * sizeof(float));
    }
    memcpy(h_t, y + (size_t)(N - B) * k->r, (size_t)B * k->r * sizeof(float));
    memcpy(c_t, c + (size_t)(N - B) * k->h, (size_t)B * k->h * sizeof(float));
    if (dx) {
        memcpy(dr, k->dy, (size_t)N * k->r * sizeof(float));
        memset(dc, 0, (size_t)B * k->h * sizeof(float));
        for (int t = k->T - 1; t >= 0; t--) {
            size_t row = (size_t)t * B;
            float *drt = dr + row * k->r, *mt = m + row * k->h;
            const float *dmt = drt, *xt = k->x + row * k->in;
            const float *rp = t ? y + (row - B) * k->r : k->h0;
            const float *cp = t ? c + (row - B) * k->h : k->c0;

            if (k->p > 0) {
                o->gemm(ctx, 0, 0, B, k->h, k->r, 1.0f, drt, k->r, k->w_proj, k->h, 0.0f, dm, k->h);
                o->gemm(ctx, 1, 0, k->r, k->h, B, 1.0f, drt, k->r, mt, k->h, 1.0f, dw_proj, k->h);
                dmt = dm;
            }
            o->lstm_cell_backward(ctx, B, k->h, gates + row * g4, cp, c + row * k->h, dmt, dc, dg);
            o->gemm(ctx, 1, 0, g4, k->in, B, 1.0f, dg, g4, xt, k->in, 1.0f, dw_ih, k->in);
            o->gemm(ctx, 1, 0, g4, k->r, B, 1.0f, dg, g4, rp, k->r, 1.0f, dw_hh, k->r);
            o->bias_grad(ctx, B, g4, dg, db);
            o->gemm(ctx, 0, 0, B, k->in, g4, 1.0f, dg, g4, k->w_ih, k->in, 0.0f, dx + row * k->in,
                    k->in);
            if (t > 0)
                o->gemm(ctx, 0, 0, B, k->r, g4, 1.0f, dg, g4, k->w_hh, k->r, 1.0f,
                        drt - (size_t)B * k->r, k->r);
        }
    }
    free(gates);
    free(c);
    free(m);
    free(dr);
    free(dg);
    free(dm);
    free(dc);
}

/* The device's lstm_layer_* against cpu_layer: y, h_t, c_t of a training forward and
 * of an inference one, then dx and every weight gradient (added to nonzero ones). */
static void
layer_case(int in, int h, int p, int T, int B, int off)
{
    const sl_backend_ops_t *o = tc_dev->ops;
    void *ctx = tc_dev->ctx, *layer = NULL;
    int r = p > 0 ? p : h, g4 = 4 * h, N = T * B;
    size_t nih = (size_t)g4 * in, nhh = (size_t)g4 * r, npr = (size_t)p * h;
    rnn_case_t k = {.in = in, .h = h, .p = p, .r = r, .T = T, .B = B};
    float *y = tc_xmalloc((size_t)N * r * sizeof(float));
    float *ht = tc_xmalloc((size_t)B * r * sizeof(float));
    float *ct = tc_xmalloc((size_t)B * h * sizeof(float));
    float *dx = tc_xmalloc((size_t)N * in * sizeof(float));
    float *g[4], *d_in[9], *d_out[8], *got;
    const char *gname[4] = {"dW_ih", "dW_hh", "db", "dW_proj"};
    size_t gn[4] = {nih, nhh, (size_t)g4, npr};
    char what[96];

    rnn_case_fill(&k);
    for (int i = 0; i < 4; i++) /* gradients start nonzero: the op adds */
        g[i] = gn[i] ? tc_rnd(gn[i], 99 + (uint64_t)i, -0.1f, 0.1f) : NULL;
    d_in[0] = tc_dputf(k.x, (size_t)N * in);
    d_in[1] = tc_dputf(k.w_ih, nih);
    d_in[2] = tc_dputf(k.w_hh, nhh);
    d_in[3] = tc_dputf(k.b, (size_t)g4);
    d_in[4] = p > 0 ? tc_dputf(k.w_proj, npr) : NULL;
    d_in[5] = tc_dputf(k.h0, (size_t)B * r);
    d_in[6] = tc_dputf(k.c0, (size_t)B * h);
    d_in[7] = tc_dputf(k.dy, (size_t)N * r);
    d_in[8] = NULL;
    d_out[0] = tc_dpoison((size_t)N * r);
    d_out[1] = tc_dpoison((size_t)B * r + 1); /* + off: the last h and c where a model */
    d_out[2] = tc_dpoison((size_t)B * h + 1); /* state puts them, maybe not 16-aligned */
    d_out[3] = tc_dpoison((size_t)N * in);
    for (int i = 0; i < 4; i++)
        d_out[4 + i] = g[i] ? tc_dputf(g[i], gn[i]) : NULL;
    cpu_layer(&k, y, ht, ct, dx, g[0], g[1], g[2], g[3]);

    ck_assert_msg(o->lstm_layer_new(ctx, &layer, in, h, p, T + 2, B + 1) == SL_OK, "%s",
                  sl_err_msg());
    for (int train = 0; train < 2; train++) { /* inference, then training */
        o->lstm_layer_forward(ctx, layer, train, T, B, d_in[0], d_in[1], d_in[2], d_in[3], d_in[4],
                              d_in[5], d_in[6], d_out[0], d_out[1] + off, d_out[2] + off);
        ck_assert_msg(o->sync(ctx) == SL_OK, "%s", sl_err_msg());
        snprintf(what, sizeof what, "layer %d/%d/%d T %d B %d %s: y", in, h, p, T, B,
                 train ? "training" : "inference");
        got = tc_dgetf(d_out[0], (size_t)N * r);
        tc_expect_close(got, y, (size_t)N * r, 1e-5, 1e-4, what);
        free(got);
        got = tc_dgetf(d_out[1] + off, (size_t)B * r);
        tc_expect_close(got, ht, (size_t)B * r, 1e-5, 1e-4, "last h");
        free(got);
        got = tc_dgetf(d_out[2] + off, (size_t)B * h);
        tc_expect_close(got, ct, (size_t)B * h, 1e-5, 1e-4, "last c");
        free(got);
    }
    o->lstm_layer_backward(ctx, layer, T, B, d_in[0], d_in[5], d_in[6], d_out[0], d_in[7], d_out[3],
                           d_out[4], d_out[5], d_out[6], d_out[7]);
    ck_assert_msg(o->sync(ctx) == SL_OK, "%s", sl_err_msg());
    got = tc_dgetf(d_out[3], (size_t)N * in);
    snprintf(what, sizeof what, "layer %d/%d/%d T %d B %d: dx", in, h, p, T, B);
    tc_expect_close(got, dx, (size_t)N * in, 1e-4 * tc_max_abs(dx, (size_t)N * in), 1e-3, what);
    free(got);
    for (int i = 0; i < 4; i++) {
        if (!g[i])
            continue;
        got = tc_dgetf(d_out[4 + i], gn[i]);
        snprintf(what, sizeof what, "layer %d/%d/%d T %d B %d: %s", in, h, p, T, B, gname[i]);
        tc_expect_close(got, g[i], gn[i], 1e-4 * tc_max_abs(g[i], gn[i]), 1e-3, what);
        free(got);
    }
    o->lstm_layer_free(ctx, layer);
    for (int i = 0; i < 9; i++)
        tc_dfree(d_in[i]);
    for (int i = 0; i < 8; i++)
        tc_dfree(d_out[i]);
    for (int i = 0; i < 4; i++)
        free(g[i]);
    rnn_case_free(&k);
    free(y);
    free(ht);
    free(ct);
    free(dx);
}

/* The reference itself, on the CPU whatever the backend under test: with L = sum of y .
 * dy (dy the gradient of y, as the op takes it), cpu_layer's dx and weight gradients
 * against central differences of L at a few entries of each. */
static double
layer_loss(const rnn_case_t *k)
{
    int N = k->T * k->B;
    float *y = tc_xmalloc((size_t)N * k->r * sizeof(float));
    float *ht = tc_xmalloc((size_t)k->B * k->r * sizeof(float));
    float *ct = tc_xmalloc((size_t)k->B * k->h * sizeof(float));
    double l = 0;

    cpu_layer(k, y, ht, ct, NULL, NULL, NULL, NULL, NULL);
    for (size_t i = 0; i < (size_t)N * k->r; i++)
        l += (double)y[i] * k->dy[i];
    free(y);
    free(ht);
    free(ct);
    return l;
}

START_TEST(test_lstm_layer_reference)
{
    for (int p = 0; p <= 6; p += 6) {
        rnn_case_t k = {.in = 5, .h = 8, .p = p, .r = p > 0 ? p : 8, .T = 4, .B = 2};
        int N = k.T * k.B, g4 = 4 * k.h;
        size_t n[5];
        float *t[5], *g[5];
        const char *name[5] = {"x", "W_ih", "W_hh", "b", "W_proj"};
        float *y, *ht, *ct;

        rnn_case_fill(&k);
        n[0] = (size_t)N * k.in;
        n[1] = (size_t)g4 * k.in;
        n[2] = (size_t)g4 * k.r;
        n[3] = (size_t)g4;
        n[4] = (size_t)k.p * k.h;
        t[0] = k.x;
        t[1] = k.w_ih;
        t[2] = k.w_hh;
        t[3] = k.b;
        t[4] = k.w_proj;
        for (int i = 0; i < 5; i++) {
            g[i] = tc_xmalloc((n[i] ? n[i] : 1) * sizeof(float));
            memset(g[i], 0, n[i] * sizeof(float));
        }
        y = tc_xmalloc((size_t)N * k.r * sizeof(float));
        ht = tc_xmalloc((size_t)k.B * k.r * sizeof(float));
        ct = tc_xmalloc((size_t)k.B * k.h * sizeof(float));
        cpu_layer(&k, y, ht, ct, g[0], g[1], g[2], g[3], p > 0 ? g[4] : NULL);
        for (int i = 0; i < 5; i++)
            for (size_t j = 0; j < n[i]; j += 1 + n[i] / 7) {
                const float eps = 1e-2f, keep = t[i][j];
                double up, down, fd;

                t[i][j] = keep + eps;
                up = layer_loss(&k);
                t[i][j] = keep - eps;
                down = layer_loss(&k);
                t[i][j] = keep;
                fd = (up - down) / (2.0 * eps);
                ck_assert_msg(fabs(fd - g[i][j]) <= 2e-3 + 2e-2 * fabs(fd),
                              "P %d: d L / d %s[%zu]: backward %.6g, differences %.6g", p, name[i],
                              j, g[i][j], fd);
            }
        for (int i = 0; i < 5; i++)
            free(g[i]);
        free(y);
        free(ht);
        free(ct);
        rnn_case_free(&k);
    }
}
END_TEST

/* LSTMP and LSTM, input size unlike the cell's (a transposed matrix shows), a window of
 * one step, a batch of one, the last h and c to memory 4 bytes off 16-byte alignment. */
START_TEST(test_lstm_layer_op)
{
    if (!have_cudnn())
        return;
    layer_case(20, 16, 12, 5, 3, 0);
    layer_case(20, 16, 0, 5, 3, 1);
    layer_case(7, 24, 9, 1, 4, 1);
    layer_case(12, 8, 0, 6, 1, 0);
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
    tcase_add_test(core, test_lstm_layer_reference);
    tcase_add_test(core, test_lstm_layer_op);
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
