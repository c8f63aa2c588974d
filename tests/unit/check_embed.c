/* Unit tests of src/embed/: sampled-softmax seed groups, Zipf statistics (unique types
 * in windows, the power-law fit) and the shoal-corpus-stats tool. Each area adds its
 * tests to the "core" and "limits" cases from its own add_*_tests function. The
 * compression of exchanged values is tested in check_embed_compress.c. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "embed/sl_seed_groups.h"
#include "embed/sl_zipf.h"
#include "model/sl_sampler.h"
#include "test_tool.h"

/* ------------------------------------------------------------ seed groups */

/* Group of each rank, as "0 0 1 2", for a mode at n nodes. */
static const char *
group_map(const char *mode, int n)
{
    static char s[256];
    size_t len = 0;
    int groups = -1;

    ck_assert_int_eq(sl_seed_groups_count(mode, n, &groups), SL_OK);
    s[0] = '\0';
    for (int r = 0; r < n; r++)
        len += (size_t)snprintf(s + len, sizeof s - len, "%s%d", r ? " " : "",
                                sl_seed_group_of(r, n, groups));
    return s;
}

/* Counts and rank maps for n = 1..9, by hand: zipf is ceil(n^0.64) (1.56, 2.02, 2.43,
 * 2.80, 3.15, 3.47, 3.78, 4.08 for n = 2..9), log2 is floor(log2 n) but at least 1,
 * the first n % G groups get the extra rank. */
START_TEST(test_seed_groups_by_hand)
{
    static const struct {
        const char *mode;
        int count[9];
        const char *map[9];
    } t[] = {
        {"per-node",
         {1, 2, 3, 4, 5, 6, 7, 8, 9},
         {"0", "0 1", "0 1 2", "0 1 2 3", "0 1 2 3 4", "0 1 2 3 4 5", "0 1 2 3 4 5 6",
          "0 1 2 3 4 5 6 7", "0 1 2 3 4 5 6 7 8"}},
        {"one",
         {1, 1, 1, 1, 1, 1, 1, 1, 1},
         {"0", "0 0", "0 0 0", "0 0 0 0", "0 0 0 0 0", "0 0 0 0 0 0", "0 0 0 0 0 0 0",
          "0 0 0 0 0 0 0 0", "0 0 0 0 0 0 0 0 0"}},
        {"zipf",
         {1, 2, 3, 3, 3, 4, 4, 4, 5},
         {"0", "0 1", "0 1 2", "0 0 1 2", "0 0 1 1 2", "0 0 1 1 2 3", "0 0 1 1 2 2 3",
          "0 0 1 1 2 2 3 3", "0 0 1 1 2 2 3 3 4"}},
        {"log2",
         {1, 1, 1, 2, 2, 2, 2, 3, 3},
         {"0", "0 0", "0 0 0", "0 0 1 1", "0 0 0 1 1", "0 0 0 1 1 1", "0 0 0 0 1 1 1",
          "0 0 0 1 1 1 2 2", "0 0 0 1 1 1 2 2 2"}},
        {"3",
         {1, 2, 3, 3, 3, 3, 3, 3, 3},
         {"0", "0 1", "0 1 2", "0 0 1 2", "0 0 1 1 2", "0 0 1 1 2 2", "0 0 0 1 1 2 2",
          "0 0 0 1 1 1 2 2", "0 0 0 1 1 1 2 2 2"}},
    };

    for (size_t m = 0; m < sizeof t / sizeof t[0]; m++)
        for (int n = 1; n <= 9; n++) {
            int g = -1;

            ck_assert_int_eq(sl_seed_groups_count(t[m].mode, n, &g), SL_OK);
            ck_assert_msg(g == t[m].count[n - 1], "%s at n=%d: %d groups, want %d", t[m].mode, n, g,
                          t[m].count[n - 1]);
            ck_assert_str_eq(group_map(t[m].mode, n), t[m].map[n - 1]);
        }
}
END_TEST

/* Larger runs: exact group counts at known points, and every split is contiguous,
 * covers all groups in order, and has sizes differing by at most one. */
START_TEST(test_seed_groups_balanced)
{
    int g;

    ck_assert_int_eq(sl_seed_groups_count("zipf", 64, &g), SL_OK);
    ck_assert_int_eq(g, 15); /* 64^0.64 = 2^3.84 = 14.3 */
    ck_assert_int_eq(sl_seed_groups_count("zipf", 1 << 25, &g), SL_OK);
    ck_assert_int_eq(g, 65536); /* (2^25)^0.64 = 2^16 exactly: no ceil past it */
    ck_assert_int_eq(sl_seed_groups_count("log2", 1024, &g), SL_OK);
    ck_assert_int_eq(g, 10);
    ck_assert_int_eq(sl_seed_groups_count("log2", 1023, &g), SL_OK);
    ck_assert_int_eq(g, 9);
    ck_assert_int_eq(sl_seed_groups_count("100", 64, &g), SL_OK);
    ck_assert_int_eq(g, 64);
    for (int n = 1; n <= 64; n++)
        for (int groups = 1; groups <= n; groups++) {
            int size[64] = {0}, prev = 0, lo = n, hi = 0;

            for (int r = 0; r < n; r++) {
                int k = sl_seed_group_of(r, n, groups);

                ck_assert(k == prev || k == prev + 1 || (r == 0 && k == 0));
                prev = k;
                size[k]++;
            }
            ck_assert_int_eq(prev, groups - 1);
            for (int k = 0; k < groups; k++) {
                lo = size[k] < lo ? size[k] : lo;
                hi = size[k] > hi ? size[k] : hi;
            }
            ck_assert_int_ge(lo, 1);
            ck_assert_int_le(hi - lo, 1);
        }
}
END_TEST

/* Negatives drawn as the trainer draws them (sl_sampler_draw_unique from the step's
 * key): the same within a group, different across groups and steps; group 0's key is
 * the one every node used before seed groups. */
START_TEST(test_seed_groups_negatives)
{
    enum { V = 1000, S = 64, NODES = 8 };
    const uint64_t seed = 1234;
    const long steps[3] = {0, 7, 100000};
    static int32_t neg[NODES][S];
    sl_sampler_t smp;
    int groups;

    ck_assert_int_eq(sl_sampler_init(&smp, V), SL_OK);
    ck_assert_int_eq(sl_seed_groups_count("zipf", NODES, &groups), SL_OK);
    ck_assert_int_eq(groups, 4); /* ranks 0 0 1 1 2 2 3 3 */
    for (int s = 0; s < 3; s++) {
        uint64_t old[3] = {seed, 'S', (uint64_t)steps[s]};

        ck_assert_uint_eq(sl_seed_group_sample_key(seed, steps[s], 0), sl_hash_u64s(old, 3));
        for (int r = 0; r < NODES; r++) {
            sl_rng_t rng;
            long tries;

            sl_rng_init(
                &rng, sl_seed_group_sample_key(seed, steps[s], sl_seed_group_of(r, NODES, groups)));
            ck_assert_int_eq(sl_sampler_draw_unique(&smp, &rng, S, neg[r], &tries), SL_OK);
        }
        for (int r = 0; r < NODES; r++)
            for (int q = r + 1; q < NODES; q++) {
                int same = memcmp(neg[r], neg[q], sizeof neg[r]) == 0;

                ck_assert_msg(same == (r / 2 == q / 2), "step %ld: ranks %d and %d", steps[s], r,
                              q);
            }
        /* A step later, group 0 draws something else. */
        {
            sl_rng_t rng;
            int32_t next[S];
            long tries;

            sl_rng_init(&rng, sl_seed_group_sample_key(seed, steps[s] + 1, 0));
            ck_assert_int_eq(sl_sampler_draw_unique(&smp, &rng, S, next, &tries), SL_OK);
            ck_assert(memcmp(next, neg[0], sizeof next) != 0);
        }
    }
    /* Keys of distinct groups and seeds are distinct. */
    for (int a = 0; a < 64; a++)
        for (int b = a + 1; b < 64; b++)
            ck_assert_uint_ne(sl_seed_group_sample_key(seed, 3, a),
                              sl_seed_group_sample_key(seed, 3, b));
    ck_assert_uint_ne(sl_seed_group_sample_key(1, 3, 0), sl_seed_group_sample_key(2, 3, 0));
    sl_sampler_fini(&smp);
}
END_TEST

START_TEST(test_seed_groups_bad_input)
{
    const char *bad[] = {"",   "two", "0",     "-1",       "+3",
                         "3x", " 3",  "zipf ", "PER-NODE", "99999999999999999999"};
    int g = 42;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sl_seed_groups_count(bad[i], 4, &g), SL_ERR_INVALID);
        ck_assert_int_eq(g, 42);
    }
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "per-node, one, zipf, log2"));
    ck_assert_int_eq(sl_seed_groups_count(NULL, 4, &g), SL_ERR_INVALID);
    ck_assert_int_eq(sl_seed_groups_count("one", 0, &g), SL_ERR_INVALID);
    ck_assert_int_eq(sl_seed_groups_count("zipf", -3, &g), SL_ERR_INVALID);
    ck_assert_int_eq(g, 42);
    ck_assert_int_eq(sl_seed_group_of(-1, 4, 2), -1);
    ck_assert_int_eq(sl_seed_group_of(4, 4, 2), -1);
    ck_assert_int_eq(sl_seed_group_of(0, 4, 0), -1);
    ck_assert_int_eq(sl_seed_group_of(0, 4, 5), -1);
    ck_assert_int_eq(sl_seed_group_of(0, 0, 1), -1);
}
END_TEST

static void
add_seed_group_tests(TCase *core, TCase *limits)
{
    tcase_add_test(core, test_seed_groups_by_hand);
    tcase_add_test(core, test_seed_groups_balanced);
    tcase_add_test(core, test_seed_groups_negatives);
    tcase_add_test(limits, test_seed_groups_bad_input);
}

/* ------------------------------------------------------------------- zipf */

/* "a a b a c c": every window by hand. N = 2: aa ab ba ac cc -> 1 2 2 2 1;
 * N = 3: aab aba bac acc -> 2 2 3 2; N = 4: aaba abac bacc -> 2 3 3; N = 5, 6: 3. */
START_TEST(test_zipf_windows_by_hand)
{
    const int32_t ids[6] = {0, 0, 1, 0, 2, 2};
    const int32_t tobe[6] = {0, 1, 2, 3, 0, 1}; /* to be or not to be */
    const double mean[7] = {0, 1.0, 8.0 / 5, 9.0 / 4, 8.0 / 3, 3.0, 3.0};
    const long lo[7] = {0, 1, 1, 2, 2, 3, 3}, hi[7] = {0, 1, 2, 3, 3, 3, 3};
    sl_zipf_window_t w;

    for (size_t n = 1; n <= 6; n++) {
        ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, n, 100, &w), SL_OK);
        ck_assert_uint_eq(w.window, n);
        ck_assert_int_eq(w.windows, (long)(7 - n)); /* every start */
        ck_assert_double_eq_tol(w.u_mean, mean[n], 1e-12);
        ck_assert_int_eq(w.u_min, lo[n]);
        ck_assert_int_eq(w.u_max, hi[n]);
        ck_assert_int_eq(sl_zipf_unique_windows(tobe, 6, 4, n, 100, &w), SL_OK);
        ck_assert_double_eq(w.u_mean, n < 4 ? (double)n : 4.0);
    }
    /* Fewer windows than starts: evenly spaced, floor(i * (6 - N) / (W - 1)).
     * N = 2, W = 2: starts 0 4 (aa cc) -> 1; W = 3: 0 2 4 (aa ba cc) -> 4/3;
     * N = 3, W = 2: starts 0 3 (aab acc) -> 2; W = 3: 0 1 3 (aab aba acc) -> 2. */
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 2, 2, &w), SL_OK);
    ck_assert_int_eq(w.windows, 2);
    ck_assert_double_eq(w.u_mean, 1.0);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 2, 3, &w), SL_OK);
    ck_assert_double_eq_tol(w.u_mean, 4.0 / 3, 1e-12);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 3, 2, &w), SL_OK);
    ck_assert_double_eq(w.u_mean, 2.0);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 4, 1, &w), SL_OK);
    ck_assert_int_eq(w.windows, 1);
    ck_assert_double_eq(w.u_mean, 2.0); /* only the first window, aaba */
}
END_TEST

/* The sliding count agrees with counting every window from scratch. */
START_TEST(test_zipf_windows_brute_force)
{
    enum { LEN = 3000, RANGE = 200 };
    static int32_t ids[LEN];
    sl_rng_t r;

    sl_rng_init(&r, 99);
    for (int i = 0; i < LEN; i++) /* skewed: small ids are frequent */
        ids[i] = (int32_t)(sl_rng_below(&r, RANGE) * sl_rng_below(&r, RANGE) / RANGE);
    for (size_t n = 1; n <= LEN; n = n * 3 + 1)
        for (long mw = 1; mw <= 4000; mw = mw * 7 + 2) {
            sl_zipf_window_t w;
            long nw = mw < (long)(LEN - n + 1) ? mw : (long)(LEN - n + 1), umin = LEN, umax = 0;
            double sum = 0.0;

            ck_assert_int_eq(sl_zipf_unique_windows(ids, LEN, RANGE, n, mw, &w), SL_OK);
            ck_assert_int_eq(w.windows, nw);
            for (long i = 0; i < nw; i++) {
                size_t p = nw == 1 ? 0 : (size_t)(i * (long)(LEN - n) / (nw - 1));
                char seen[RANGE] = {0};
                long u = 0;

                for (size_t t = p; t < p + n; t++)
                    if (!seen[ids[t]]++)
                        u++;
                sum += (double)u;
                umin = u < umin ? u : umin;
                umax = u > umax ? u : umax;
            }
            ck_assert_double_eq_tol(w.u_mean, sum / (double)nw, 1e-9);
            ck_assert_int_eq(w.u_min, umin);
            ck_assert_int_eq(w.u_max, umax);
        }
}
END_TEST

/* Exact power laws give their parameters back; a line in log-log has R^2 = 1. */
START_TEST(test_zipf_fit_exact)
{
    const double n[5] = {10, 100, 1000, 1e4, 1e5};
    double u[5];
    sl_zipf_fit_t f;

    for (int i = 0; i < 5; i++)
        u[i] = 3.0 * pow(n[i], 0.5);
    ck_assert_int_eq(sl_zipf_fit(n, u, 5, &f), SL_OK);
    ck_assert_double_eq_tol(f.b, 0.5, 1e-12);
    ck_assert_double_eq_tol(f.a, 3.0, 1e-10);
    ck_assert_double_eq_tol(f.r2, 1.0, 1e-12);
    ck_assert_int_eq(f.points, 5);
    /* Two points: the line through them, b = ln(8/2) / ln(4/1) = 1. */
    ck_assert_int_eq(sl_zipf_fit((const double[]){1, 4}, (const double[]){2, 8}, 2, &f), SL_OK);
    ck_assert_double_eq_tol(f.b, 1.0, 1e-12);
    ck_assert_double_eq_tol(f.a, 2.0, 1e-12);
    /* Off the line: (1,1) (2,4) (4,4) in log2 units are x = 0 1 2, y = 0 2 2: slope 1,
     * intercept 4/3 - 1 = 1/3, residuals -1/3 2/3 -1/3, SSres 2/3, SStot 8/3. */
    ck_assert_int_eq(sl_zipf_fit((const double[]){1, 2, 4}, (const double[]){1, 4, 4}, 3, &f),
                     SL_OK);
    ck_assert_double_eq_tol(f.b, 1.0, 1e-12);
    ck_assert_double_eq_tol(f.a, pow(2.0, 1.0 / 3), 1e-12);
    ck_assert_double_eq_tol(f.r2, 0.75, 1e-12);
}
END_TEST

/* A synthetic Zipf stream, P(k) ~ k^-s over 2^20 ids, has E[U(N)] = sum_k 1 - (1 - P(k))^N
 * growing as N^(1/s) (Heaps' law); for s = 1/0.64 that sum, fitted over N = 100 ..
 * 1e5, has slope 0.6404. The sampled stream must fit within 0.015 of it. */
START_TEST(test_zipf_stream_exponent)
{
    enum { V = 1 << 20, LEN = 1000000 };
    const double s = 1.0 / 0.64;
    const size_t sizes[10] = {100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
    double *cdf = malloc(V * sizeof *cdf), n[10], u[10], z = 0.0;
    int32_t *ids = malloc(LEN * sizeof *ids);
    sl_zipf_fit_t f;
    sl_rng_t r;

    ck_assert_ptr_nonnull(cdf);
    ck_assert_ptr_nonnull(ids);
    for (int k = 0; k < V; k++)
        cdf[k] = z += pow(k + 1.0, -s);
    sl_rng_init(&r, 2024);
    for (int i = 0; i < LEN; i++) { /* inverse CDF by bisection */
        double x = sl_rng_double(&r) * z;
        int lo = 0, hi = V - 1;

        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (cdf[mid] > x)
                hi = mid;
            else
                lo = mid + 1;
        }
        ids[i] = lo;
    }
    for (int i = 0; i < 10; i++) {
        sl_zipf_window_t w;

        ck_assert_int_eq(sl_zipf_unique_windows(ids, LEN, V, sizes[i], 50, &w), SL_OK);
        n[i] = (double)sizes[i];
        u[i] = w.u_mean;
    }
    ck_assert_int_eq(sl_zipf_fit(n, u, 10, &f), SL_OK);
    ck_assert_msg(fabs(f.b - 0.6404) < 0.015, "fitted exponent %.4f, want 0.6404", f.b);
    ck_assert_double_gt(f.r2, 0.999);
    free(cdf);
    free(ids);
}
END_TEST

START_TEST(test_zipf_bad_input)
{
    const int32_t ids[4] = {0, 1, 2, 3}, bad[3] = {0, 5, 1}, neg[2] = {0, -1};
    sl_zipf_window_t w;
    sl_zipf_fit_t f;

    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 4, 0, 10, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 4, 5, 10, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 4, 2, 0, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 0, 2, 1, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 0, 4, 1, 1, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(bad, 3, 4, 2, 1, &w), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "token 1 has id 5"));
    ck_assert_int_eq(sl_zipf_unique_windows(neg, 2, 4, 1, 1, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){5, 5}, (const double[]){1, 2}, 2, &f),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){5}, (const double[]){1}, 1, &f), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){1, 2}, (const double[]){0, 2}, 2, &f),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){-1, 2}, (const double[]){1, 2}, 2, &f),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){NAN, 2}, (const double[]){1, 2}, 2, &f),
                     SL_ERR_INVALID);
}
END_TEST

/* ----------------------------------------------------- shoal-corpus-stats CLI */

static char stats_bin[1024];

/* The tool reads the text through src/data: "a a b\na c c\n" is a a b <eos> a c c <eos>.
 * N = 2: aa ab bE Ea ac cc cE -> 12/7; N = 4: aabE abEa bEac Eacc accE -> 16/5. */
START_TEST(test_corpus_stats_cli)
{
    static char out[1 << 14], err[4096];
    char dir[] = "/tmp/shoal-embed-XXXXXX", file[256], png[256];
    FILE *f;

    if (!test_tool_find("shoal-corpus-stats", stats_bin, sizeof stats_bin))
        return;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XDG_CACHE_HOME", dir, 1); /* the token cache goes there, not to $HOME */
    snprintf(file, sizeof file, "%s/tiny.txt", dir);
    snprintf(png, sizeof png, "%s/u.png", dir);
    f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("a a b\na c c\n", f);
    fclose(f);

    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--help", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "Usage: shoal-corpus-stats"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--nodes", "1,2,16",
                                                         "--tokens=2", "--format", "csv", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "G,K,N,windows,U_mean,U_min,U_max,U_over_N,U_fit\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n1,2,2,7,1.7142857142857142,1,2,"));
    ck_assert_ptr_nonnull(strstr(out, "\n2,2,4,5,3.2000000000000002,3,4,"));
    ck_assert_ptr_null(strstr(out, "\n16,2,"));
    ck_assert_ptr_nonnull(strstr(err, "skipped N = 16x2: more than the corpus's 8 tokens"));
    /* the JSON fit is the line through the two points: b = ln(3.2 / (12/7)) / ln 2 */
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--nodes", "2,1",
                                                         "--tokens", "2", "--format=json", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "\"tokens\": 8, \"types\": 4"));
    {
        const char *b = strstr(out, "\"b\": ");

        ck_assert_ptr_nonnull(b);
        ck_assert_double_eq_tol(strtod(b + 5, NULL), log2(3.2 * 7 / 12), 1e-12);
    }
    /* character level: 12 code points incl. newlines, types a b c space newline */
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--level", "char",
                                                         "--nodes", "12", "--tokens", "1", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "12 tokens, 5 types"));
    ck_assert_ptr_nonnull(strstr(out, "no fit"));

    /* errors: usage 2, runtime 1, one line naming the problem */
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){NULL}),
                     2);
    ck_assert_ptr_nonnull(strstr(err, "missing --corpus"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--nodes", "1,x", NULL}),
                     2);
    ck_assert_ptr_nonnull(strstr(err, "--nodes: 'x' is not an integer"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--windows", "0", NULL}),
                     2);
    ck_assert_int_eq(
        test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                      (const char *const[]){"--corpus", file, "--level", "byte", NULL}),
        2);
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", "/nonexistent/x.txt", NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.txt: No such file or directory"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--tokens", "9", NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "fewer than every N"));
    ck_assert_int_eq(
        test_tool_run(stats_bin, out, sizeof out, err, sizeof err, "/nonexistent",
                      (const char *const[]){"--corpus", file, "--tokens", "2", "--png", png, NULL}),
        1);
    ck_assert_ptr_nonnull(strstr(err, "gnuplot is not on PATH"));
    if (system("gnuplot --version >/dev/null 2>&1") == 0) {
        unsigned char magic[4] = {0};

        ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                       (const char *const[]){"--corpus", file, "--nodes", "1,2",
                                                             "--tokens", "2", "--png", png, NULL}),
                         0);
        f = fopen(png, "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(magic, 1, 4, f), 4);
        fclose(f);
        ck_assert_mem_eq(magic, "\x89PNG", 4);
    }
    f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "corpus is empty"));
    snprintf(png, sizeof png, "rm -rf '%s'", dir); /* the text, the plot, the token cache */
    ck_assert_int_eq(system(png), 0);
}
END_TEST

static void
add_zipf_tests(TCase *core, TCase *limits)
{
    tcase_add_test(core, test_zipf_windows_by_hand);
    tcase_add_test(core, test_zipf_windows_brute_force);
    tcase_add_test(core, test_zipf_fit_exact);
    tcase_add_test(core, test_zipf_stream_exponent);
    tcase_add_test(core, test_corpus_stats_cli);
    tcase_add_test(limits, test_zipf_bad_input);
}

/* ------------------------------------------------------------------ suite */

static Suite *
embed_suite(void)
{
    Suite *s = suite_create("embed");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    add_seed_group_tests(core, limits);
    add_zipf_tests(core, limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(embed_suite());
}
