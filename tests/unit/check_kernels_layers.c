/* Unit tests of the CPU backend's layer ops: the LSTM cell forward against a naive
 * double reference and backward against central finite differences, the full and
 * sampled softmax cross-entropies (worked by hand and against finite differences), the
 * range of exp, extreme logits, saturated gates and a bad target. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "kernels/sl_backend.h"

#include "test_tool.h"

static sl_backend_t *be;

static void
setup(void)
{
    ck_assert_int_eq(sl_backend_new(&be, "cpu", 2), SL_OK);
}

static void
teardown(void)
{
    sl_backend_destroy(&be);
}

/* ---- LSTM cell ---------------------------------------------------------------------- */

static double
sigmoid_d(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* Forward against libm in double; h = 37 covers the vector body and its tail, and
 * some pre-activations are far into saturation. */
START_TEST(test_lstm_forward)
{
    enum { B = 3, H = 37 };
    float gates[B * 4 * H], pre[B * 4 * H], cp[B * H], c[B * H], m[B * H];

    test_fill(pre, B * 4 * H, 11, 3.0f);
    pre[5] = 30.0f;
    pre[H + 6] = -40.0f;
    pre[2 * H + 7] = 25.0f;
    test_fill(cp, B * H, 12, 2.0f);
    memcpy(gates, pre, sizeof gates);
    be->ops->lstm_cell_forward(be->ctx, B, H, gates, cp, c, m);
    for (int r = 0; r < B; r++) {
        for (int j = 0; j < H; j++) {
            const float *z = pre + r * 4 * H;
            double i = sigmoid_d(z[j]), f = sigmoid_d(z[H + j]), g = tanh(z[2 * H + j]);
            double o = sigmoid_d(z[3 * H + j]);
            double cc = f * cp[r * H + j] + i * g;
            const float *act = gates + r * 4 * H;

            TEST_ASSERT_CLOSE(act[j], i, 1e-7, 1e-6, "i", j);
            TEST_ASSERT_CLOSE(act[H + j], f, 1e-7, 1e-6, "f", j);
            TEST_ASSERT_CLOSE(act[2 * H + j], g, 1e-7, 1e-6, "g", j);
            TEST_ASSERT_CLOSE(act[3 * H + j], o, 1e-7, 1e-6, "o", j);
            TEST_ASSERT_CLOSE(c[r * H + j], cc, 1e-6, 1e-6, "c", r * H + j);
            TEST_ASSERT_CLOSE(m[r * H + j], o * tanh(cc), 1e-6, 1e-6, "m", r * H + j);
        }
    }
}
END_TEST

enum { LB = 2, LH = 19 };

/* L = sum(wm * m) + sum(wc * c) of the float forward, summed in double. */
static double
lstm_loss(const float *pre, const float *cp, const float *wm, const float *wc)
{
    float gates[LB * 4 * LH], c[LB * LH], m[LB * LH];
    double l = 0;

    memcpy(gates, pre, sizeof gates);
    be->ops->lstm_cell_forward(be->ctx, LB, LH, gates, cp, c, m);
    for (int k = 0; k < LB * LH; k++)
        l += (double)wm[k] * m[k] + (double)wc[k] * c[k];
    return l;
}

/* Central difference of lstm_loss along x[k] with step 1e-2; the step actually taken
 * is measured in double from the rounded float arguments. */
static double
lstm_fd(float *x, int k, const float *pre, const float *cp, const float *wm, const float *wc)
{
    float save = x[k], up, down;
    double lp, lm;

    x[k] = save + 1e-2f;
    up = x[k];
    lp = lstm_loss(pre, cp, wm, wc);
    x[k] = save - 1e-2f;
    down = x[k];
    lm = lstm_loss(pre, cp, wm, wc);
    x[k] = save;
    return (lp - lm) / ((double)up - (double)down);
}

/* Backward against central finite differences of L w.r.t. every pre-activation and
 * every c_prev entry. Step 1e-2: the truncation error (step^2/6 L''') is at most 5e-5
 * here and the rounding noise (only the perturbed entry's c, m change) about 5e-6, so
 * the tolerance is 1e-4 + 5e-4 |grad|. */
START_TEST(test_lstm_backward_fd)
{
    float pre[LB * 4 * LH], cp[LB * LH], wm[LB * LH], wc[LB * LH];
    float gates[LB * 4 * LH], c[LB * LH], m[LB * LH], dc[LB * LH], dg[LB * 4 * LH];

    test_fill(pre, LB * 4 * LH, 21, 2.0f);
    test_fill(cp, LB * LH, 22, 1.5f);
    test_fill(wm, LB * LH, 23, 1.0f);
    test_fill(wc, LB * LH, 24, 1.0f);
    memcpy(gates, pre, sizeof gates);
    be->ops->lstm_cell_forward(be->ctx, LB, LH, gates, cp, c, m);
    memcpy(dc, wc, sizeof dc); /* dL/dc from this step's own term */
    be->ops->lstm_cell_backward(be->ctx, LB, LH, gates, cp, c, wm, dc, dg);
    for (int k = 0; k < LB * 4 * LH; k++) {
        double fd = lstm_fd(pre, k, pre, cp, wm, wc);

        TEST_ASSERT_CLOSE(dg[k], fd, 1e-4, 5e-4, "dgates", k);
    }
    for (int k = 0; k < LB * LH; k++) {
        double fd = lstm_fd(cp, k, pre, cp, wm, wc);

        TEST_ASSERT_CLOSE(dc[k], fd, 1e-4, 5e-4, "dc_prev", k);
    }
}
END_TEST

/* ---- softmax cross-entropy ---------------------------------------------------------- */

enum { SN = 4, SV = 37, SLD = 41 };

static double
xent_loss(const float *logits, const int32_t *t)
{
    float tmp[SN * SLD];
    double loss;

    memcpy(tmp, logits, sizeof tmp);
    be->ops->softmax_xent(be->ctx, SN, SV, tmp, SLD, NULL, t, 0.0f, &loss);
    return loss;
}

/* Loss against a double log-sum-exp; gradient against the double softmax and against
 * central differences of the op's own loss (step 1e-2, tolerance 5e-5 + 5e-4 |grad|;
 * the largest deviation seen is 1.2e-5);
 * grad_scale 0 leaves the logits as they were. Row stride 41 > 37: padding untouched. */
START_TEST(test_softmax_xent)
{
    const int32_t t[SN] = {0, 36, 17, 5};
    const float gs = 0.5f;
    float x[SN * SLD], g[SN * SLD];
    double loss, ref = 0;

    test_fill(x, SN * SLD, 31, 4.0f);
    memcpy(g, x, sizeof g);
    be->ops->softmax_xent(be->ctx, SN, SV, g, SLD, NULL, t, 0.0f, &loss);
    ck_assert(memcmp(g, x, sizeof g) == 0);
    be->ops->softmax_xent(be->ctx, SN, SV, g, SLD, NULL, t, gs, &loss);
    for (int r = 0; r < SN; r++) {
        const float *row = x + r * SLD;
        double mx = row[0], s = 0;

        for (int j = 1; j < SV; j++)
            mx = fmax(mx, row[j]);
        for (int j = 0; j < SV; j++)
            s += exp(row[j] - mx);
        ref += log(s) + mx - row[t[r]];
        for (int j = 0; j < SV; j++) {
            double p = exp(row[j] - mx) / s - (j == t[r]);

            TEST_ASSERT_CLOSE(g[r * SLD + j], gs * p, 1e-7, 1e-5, "softmax grad", r * SLD + j);
        }
        for (int j = SV; j < SLD; j++)
            ck_assert(g[r * SLD + j] == x[r * SLD + j]);
    }
    TEST_ASSERT_CLOSE(loss, ref, 0, 1e-6, "softmax loss", 0);
    for (int r = 0; r < SN; r++) {
        for (int j = 0; j < SV; j++) {
            int k = r * SLD + j;
            float save = x[k], up, down;
            double lp, lm;

            x[k] = save + 1e-2f;
            up = x[k];
            lp = xent_loss(x, t);
            x[k] = save - 1e-2f;
            down = x[k];
            lm = xent_loss(x, t);
            x[k] = save;
            TEST_ASSERT_CLOSE(g[k] / gs, (lp - lm) / ((double)up - (double)down), 5e-5, 5e-4,
                              "softmax fd", k);
        }
    }
}
END_TEST

/* A bias given to the op is what add_bias followed by the op without one gives, bit for
 * bit (loss and gradient; with grad_scale 0 the logits with the bias added), and the
 * same bias is added to every row: a bias of a constant c leaves the loss and gradient
 * of each row as they were without it (softmax is shift-invariant), to rounding. */
START_TEST(test_softmax_xent_bias)
{
    const int32_t t[SN] = {3, 0, 36, 20};
    float x[SN * SLD], bias[SV], want[SN * SLD], got[SN * SLD], flat[SV];
    double lw, lg;

    test_fill(x, SN * SLD, 47, 3.0f);
    test_fill(bias, SV, 48, 2.0f);
    for (int pass = 0; pass < 2; pass++) {
        float gs = pass ? 0.25f : 0.0f;

        memcpy(want, x, sizeof want);
        for (int r = 0; r < SN; r++)
            be->ops->add_bias(be->ctx, 1, SV, bias, want + r * SLD);
        be->ops->softmax_xent(be->ctx, SN, SV, want, SLD, NULL, t, gs, &lw);
        memcpy(got, x, sizeof got);
        be->ops->softmax_xent(be->ctx, SN, SV, got, SLD, bias, t, gs, &lg);
        ck_assert_msg(lg == lw, "loss with bias %.17g, add_bias first %.17g", lg, lw);
        ck_assert_msg(memcmp(got, want, sizeof got) == 0, "logits differ, grad_scale %g",
                      (double)gs);
    }
    for (int j = 0; j < SV; j++)
        flat[j] = 1.5f;
    memcpy(want, x, sizeof want);
    be->ops->softmax_xent(be->ctx, SN, SV, want, SLD, NULL, t, 1.0f, &lw);
    memcpy(got, x, sizeof got);
    be->ops->softmax_xent(be->ctx, SN, SV, got, SLD, flat, t, 1.0f, &lg);
    TEST_ASSERT_CLOSE(lg, lw, 0, 1e-6, "loss with a constant bias", 0);
    for (int k = 0; k < SN * SLD; k++)
        TEST_ASSERT_CLOSE(got[k], want[k], 1e-7, 1e-5, "gradient with a constant bias", k);
}
END_TEST
/* One row worked by hand: raw logits [2, 1, 3], samples {4, 7}, target 7, logq_true 0,
 * logq_samp {ln 2, 0}. Corrected: [2, 1 - ln 2, -inf (sample 7 is the target)], so
 * loss = log(e^2 + e/2) - 2 = log(1 + e^-1 / 2) = 0.168848...; p = [e^2, e/2] / (e^2 +
 * e/2) = [0.844638, 0.155362]; gradient (scale 1) [-0.155362, 0.155362, 0]. */
START_TEST(test_sampled_hand)
{
    const int32_t target = 7, samples[2] = {4, 7};
    const float logq_true = 0.0f, logq_samp[2] = {(float)M_LN2, 0.0f};
    float x[3] = {2.0f, 1.0f, 3.0f};
    double loss, p0 = exp(2.0) / (exp(2.0) + exp(1.0) / 2);

    be->ops->sampled_softmax_xent(be->ctx, 1, 2, x, &target, samples, &logq_true, logq_samp, 1.0f,
                                  &loss);
    ck_assert_double_eq_tol(loss, log(1 + exp(-1.0) / 2), 1e-6);
    ck_assert_double_eq_tol(loss, 0.1688476, 1e-6);
    ck_assert_float_eq_tol(x[0], p0 - 1, 1e-6);
    ck_assert_float_eq_tol(x[1], 1 - p0, 1e-6);
    ck_assert(x[2] == 0.0f);
    /* without a gradient the logits keep the corrected, masked values */
    x[0] = 2.0f;
    x[1] = 1.0f;
    x[2] = 3.0f;
    be->ops->sampled_softmax_xent(be->ctx, 1, 2, x, &target, samples, &logq_true, logq_samp, 0.0f,
                                  &loss);
    ck_assert_double_eq_tol(loss, 0.1688476, 1e-6);
    ck_assert_float_eq_tol(x[1], 1 - M_LN2, 1e-6);
    ck_assert(isinf(x[2]) && x[2] < 0);
}
END_TEST

enum { QN = 3, QS = 6, QW = QS + 1 };

static const int32_t q_targets[QN] = {5, 9, 2};
static const int32_t q_samples[QS] = {1, 5, 7, 9, 3, 5}; /* row 0 hits twice, row 1 once */
static const float q_logq_true[QN] = {-2.0f, -3.5f, -1.0f};
static const float q_logq_samp[QS] = {-1.5f, -2.0f, -4.0f, -3.5f, -0.5f, -2.0f};

static double
sampled_loss(const float *x)
{
    float tmp[QN * QW];
    double loss;

    memcpy(tmp, x, sizeof tmp);
    be->ops->sampled_softmax_xent(be->ctx, QN, QS, tmp, q_targets, q_samples, q_logq_true,
                                  q_logq_samp, 0.0f, &loss);
    return loss;
}

/* Loss against a double reference with logQ subtraction and accidental hits dropped;
 * gradient against it and against central differences (step 1e-2, tolerance 5e-5 +
 * 5e-4 |grad|); masked entries get exactly zero. */
START_TEST(test_sampled_softmax_xent)
{
    const float gs = 2.0f;
    float x[QN * QW], g[QN * QW];
    double loss, ref = 0;

    test_fill(x, QN * QW, 41, 3.0f);
    memcpy(g, x, sizeof g);
    be->ops->sampled_softmax_xent(be->ctx, QN, QS, g, q_targets, q_samples, q_logq_true,
                                  q_logq_samp, gs, &loss);
    for (int r = 0; r < QN; r++) {
        double adj[QW], s = 0;

        adj[0] = (double)x[r * QW] - q_logq_true[r];
        for (int j = 0; j < QS; j++)
            adj[1 + j] = (double)x[r * QW + 1 + j] - q_logq_samp[j];
        for (int j = 0; j < QW; j++)
            if (j == 0 || q_samples[j - 1] != q_targets[r])
                s += exp(adj[j]);
        ref += log(s) - adj[0];
        for (int j = 0; j < QW; j++) {
            int hit = j > 0 && q_samples[j - 1] == q_targets[r];
            double want = hit ? 0.0 : gs * (exp(adj[j]) / s - (j == 0));

            if (hit)
                ck_assert_msg(g[r * QW + j] == 0.0f, "masked entry %d,%d not zero", r, j);
            TEST_ASSERT_CLOSE(g[r * QW + j], want, 1e-7, 1e-5, "sampled grad", r * QW + j);
        }
    }
    TEST_ASSERT_CLOSE(loss, ref, 0, 1e-6, "sampled loss", 0);
    for (int k = 0; k < QN * QW; k++) {
        float save = x[k], up, down;
        double lp, lm;

        x[k] = save + 1e-2f;
        up = x[k];
        lp = sampled_loss(x);
        x[k] = save - 1e-2f;
        down = x[k];
        lm = sampled_loss(x);
        x[k] = save;
        TEST_ASSERT_CLOSE(g[k] / gs, (lp - lm) / ((double)up - (double)down), 5e-5, 5e-4,
                          "sampled fd", k);
    }
}
END_TEST

/* exp over its range through 2-class softmaxes: row [0, x] with label 0 has loss
 * log(1 + e^x) and gradient e^x / (1 + e^x) on its second entry, which for x <= 0
 * carries exp's relative error (< 2e-7) straight through; x from -86 to 86. */
START_TEST(test_softmax_exp_range)
{
    const int32_t t = 0;

    for (int r = -86; r <= 86; r++) {
        double loss, xr = r, e = exp(xr);
        double want = r > 0 ? xr + log1p(exp(-xr)) : log1p(e);
        float x[2] = {0.0f, (float)r};

        be->ops->softmax_xent(be->ctx, 1, 2, x, 2, NULL, &t, 1.0f, &loss);
        TEST_ASSERT_CLOSE(loss, want, 1e-7, 3e-7, "2-class loss", r);
        TEST_ASSERT_CLOSE(x[1], e / (1 + e), 1e-30, r <= 0 ? 5e-7 : 1e-6, "2-class p", r);
    }
}
END_TEST

/* Logits 1e4 apart, 1e30 and -1e30: no inf/nan, the loss is the gap (row 0; row 1
 * is certain and costs 0), the gradient the one-hot difference. Sampled rows whose
 * samples are all the target: loss 0, gradient 0. */
START_TEST(test_softmax_extremes)
{
    float x[2 * 4] = {0.0f, 1e4f, -1e30f, 5.0f, 1e30f, 0.0f, -1e30f, 5.0f};
    const int32_t t[2] = {0, 0};
    const int32_t tq[2] = {4, 4}, sq[3] = {4, 4, 4};
    const float lt[2] = {0.0f, 0.0f}, ls[3] = {-1.0f, -1.0f, -1.0f};
    float q[2 * 4];
    double loss;

    be->ops->softmax_xent(be->ctx, 2, 4, x, 4, NULL, t, 1.0f, &loss);
    ck_assert_double_eq_tol(loss, 1e4, 1e-2);
    ck_assert_float_eq_tol(x[0], -1.0f, 1e-6);
    ck_assert_float_eq_tol(x[1], 1.0f, 1e-6);
    for (int k = 2; k < 8; k++)
        ck_assert_msg(isfinite(x[k]) && fabsf(x[k]) < 1e-6f, "x[%d] = %g", k, (double)x[k]);
    test_fill(q, 8, 71, 5.0f);
    be->ops->sampled_softmax_xent(be->ctx, 2, 3, q, tq, sq, lt, ls, 1.0f, &loss);
    ck_assert(loss == 0.0);
    for (int k = 0; k < 8; k++)
        ck_assert(q[k] == 0.0f);
}
END_TEST

/* Pre-activations of +-100 saturate the gates without inf or nan, forward and back. */
START_TEST(test_lstm_saturation)
{
    enum { H = 9 };
    float gates[4 * H], cp[H], c[H], m[H], dm[H], dc[H], dg[4 * H];

    for (int k = 0; k < 4 * H; k++)
        gates[k] = k % 2 ? 100.0f : -100.0f;
    for (int j = 0; j < H; j++) {
        cp[j] = 50.0f;
        dm[j] = 1.0f;
        dc[j] = 1.0f;
    }
    be->ops->lstm_cell_forward(be->ctx, 1, H, gates, cp, c, m);
    for (int k = 0; k < 4 * H; k++) {
        float want = k % 2 ? 1.0f : (k / H == 2 ? -1.0f : 0.0f);

        ck_assert_float_eq_tol(gates[k], want, 1e-30);
    }
    be->ops->lstm_cell_backward(be->ctx, 1, H, gates, cp, c, dm, dc, dg);
    for (int j = 0; j < H; j++)
        ck_assert(isfinite(c[j]) && isfinite(m[j]) && isfinite(dc[j]));
    for (int k = 0; k < 4 * H; k++)
        ck_assert(isfinite(dg[k]));
}
END_TEST

START_TEST(test_softmax_bad_target)
{
    float x[3] = {0};
    const int32_t t = 3;
    double loss;

    be->ops->softmax_xent(be->ctx, 1, 3, x, 3, NULL, &t, 1.0f, &loss);
}
END_TEST

static Suite *
kernels_layers_suite(void)
{
    Suite *s = suite_create("kernels_layers");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_test(core, test_lstm_forward);
    tcase_add_test(core, test_lstm_backward_fd);
    tcase_add_test(core, test_softmax_xent);
    tcase_add_test(core, test_softmax_xent_bias);
    tcase_add_test(core, test_sampled_hand);
    tcase_add_test(core, test_sampled_softmax_xent);
    suite_add_tcase(s, core);
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(limits, test_softmax_exp_range);
    tcase_add_test(limits, test_softmax_extremes);
    tcase_add_test(limits, test_lstm_saturation);
    tcase_add_test_raise_signal(limits, test_softmax_bad_target, SIGABRT);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(kernels_layers_suite());
}
