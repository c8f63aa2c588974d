/* Unit tests of topology/: ring neighbours, the gossip schedule, degree balance, the
 * mixing matrix's spectrum, and the shoal-topo command line. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_sort.h"
#include "common/sl_status.h"
#include "topology/sl_mixing.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "test_tool.h"

/* ------------------------------------------------------------------- ring */

/* Node i's neighbours as a string "a b c" (ascending, from sl_ring_neighbours). */
static const char *
neighbours_str(int n, int k, int i)
{
    static char s[256];
    int out[16], count = -1;
    size_t len = 0;

    ck_assert_int_eq(sl_ring_neighbours(n, k, i, out, 16, &count), SL_OK);
    s[0] = '\0';
    for (int m = 0; m < count; m++)
        len += (size_t)snprintf(s + len, sizeof s - len, "%s%d", m ? " " : "", out[m]);
    return s;
}

START_TEST(test_ring_small_by_hand)
{
    /* {n, k, neighbours of node 0, 1, ..., n-1}, written out by hand */
    static const struct {
        int n, k;
        const char *nbr[5];
    } cases[] = {
        {1, 1, {""}},
        {1, 2, {""}},
        {2, 1, {"1", "0"}}, /* i-1 and i+1 are the same node */
        {2, 2, {"1", "0"}},
        {3, 1, {"1 2", "0 2", "0 1"}},
        {3, 2, {"1 2", "0 2", "0 1"}},
        {4, 1, {"1 3", "0 2", "1 3", "0 2"}},
        {4, 2, {"1 2 3", "0 2 3", "0 1 3", "0 1 2"}}, /* i+2 == i-2 */
        {5, 1, {"1 4", "0 2", "1 3", "2 4", "0 3"}},
        {5, 2, {"1 2 3 4", "0 2 3 4", "0 1 3 4", "0 1 2 4", "0 1 2 3"}},
        {5, 3, {"1 2 3 4", "0 2 3 4", "0 1 3 4", "0 1 2 4", "0 1 2 3"}}, /* wraps onto i */
    };

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int links = -1;

        ck_assert_int_eq(sl_ring_links(cases[c].n, cases[c].k, &links), SL_OK);
        ck_assert_int_eq(links, cases[c].n - 1 < 2 * cases[c].k ? cases[c].n - 1 : 2 * cases[c].k);
        for (int i = 0; i < cases[c].n; i++) {
            ck_assert_msg(strcmp(neighbours_str(cases[c].n, cases[c].k, i), cases[c].nbr[i]) == 0,
                          "n=%d k=%d node %d: got '%s', want '%s'", cases[c].n, cases[c].k, i,
                          neighbours_str(cases[c].n, cases[c].k, i), cases[c].nbr[i]);
            for (int j = 0; j < cases[c].n; j++) /* is_neighbour agrees with the list */
                ck_assert_int_eq(sl_ring_is_neighbour(cases[c].n, cases[c].k, i, j),
                                 j != i && strchr(cases[c].nbr[i], '0' + j) != NULL);
        }
    }
}
END_TEST

START_TEST(test_ring_large)
{
    int out[8], count, links;

    ck_assert_int_eq(sl_ring_links(1000, 3, &links), SL_OK);
    ck_assert_int_eq(links, 6);
    ck_assert_str_eq(neighbours_str(1000, 3, 0), "1 2 3 997 998 999");
    ck_assert_str_eq(neighbours_str(1000, 3, 1), "0 2 3 4 998 999");
    ck_assert_str_eq(neighbours_str(1000, 3, 500), "497 498 499 501 502 503");
    ck_assert_str_eq(neighbours_str(1000, 3, 998), "0 1 995 996 997 999");
    ck_assert_str_eq(neighbours_str(1000, 3, 999), "0 1 2 996 997 998");
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(sl_ring_neighbours(1000, 3, i, out, 8, &count), SL_OK);
        ck_assert_int_eq(count, 6);
        for (int m = 0; m < count; m++) {
            int d = abs(out[m] - i);

            d = d < 1000 - d ? d : 1000 - d; /* circular distance */
            ck_assert(d >= 1 && d <= 3);
            if (m)
                ck_assert_int_lt(out[m - 1], out[m]);
        }
    }
}
END_TEST

START_TEST(test_ring_default_degree)
{
    static const int n[] = {1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 1000, 1024};
    static const int k[] = {1, 1, 1, 1, 1, 2, 2, 3, 3, 4, 8, 9};

    for (size_t c = 0; c < sizeof n / sizeof n[0]; c++)
        ck_assert_int_eq(sl_ring_default_degree(n[c]), k[c]);
}
END_TEST

/* ---------------------------------------------------------------- schedule */

/* Everyone's choice at (r, c): chosen[i * q .. i * q + q). */
static void
all_chosen(const sl_schedule_t *s, uint64_t r, int c, int *chosen)
{
    for (int i = 0; i < s->nodes; i++) {
        int count = -1;

        ck_assert_int_eq(
            sl_schedule_chosen(s, r, c, i, chosen + (size_t)i * s->picks, s->picks, &count), SL_OK);
        ck_assert_int_eq(count, s->picks);
    }
}

START_TEST(test_schedule_deterministic)
{
    sl_schedule_t s, other;
    int a[64 * 2], b[64 * 2], differ_r = 0, differ_c = 0, differ_seed = 0;

    ck_assert_int_eq(sl_schedule_init(&s, 64, 3, 2, 1234), SL_OK);
    ck_assert_int_eq(sl_schedule_init(&other, 64, 3, 2, 1235), SL_OK);
    all_chosen(&s, 5, 1, a);
    all_chosen(&s, 5, 1, b);
    ck_assert_mem_eq(a, b, sizeof a);
    /* each of round, component and seed changes the draw somewhere among 64 nodes */
    all_chosen(&s, 6, 1, b);
    differ_r = memcmp(a, b, sizeof a) != 0;
    all_chosen(&s, 5, 2, b);
    differ_c = memcmp(a, b, sizeof a) != 0;
    all_chosen(&other, 5, 1, b);
    differ_seed = memcmp(a, b, sizeof a) != 0;
    ck_assert(differ_r && differ_c && differ_seed);
}
END_TEST

/* A child process computes the same schedule from the same inputs (what every node of a
 * run relies on); the answer comes back through a pipe. */
START_TEST(test_schedule_same_in_child)
{
    enum { N = 20, Q = 2, R = 50 };
    static int mine[R][N * Q], theirs[R][N * Q];
    sl_schedule_t s;
    int fd[2], status;
    pid_t pid;
    size_t got = 0;

    ck_assert_int_eq(sl_schedule_init(&s, N, 2, Q, 99), SL_OK);
    ck_assert_int_eq(pipe(fd), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        for (int r = 0; r < R; r++)
            all_chosen(&s, (uint64_t)r, 3, theirs[r]);
        _exit(write(fd[1], theirs, sizeof theirs) == (ssize_t)sizeof theirs ? 0 : 1);
    }
    close(fd[1]);
    while (got < sizeof theirs) {
        ssize_t k = read(fd[0], (char *)theirs + got, sizeof theirs - got);

        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    close(fd[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int r = 0; r < R; r++)
        all_chosen(&s, (uint64_t)r, 3, mine[r]);
    ck_assert_mem_eq(mine, theirs, sizeof mine);
}
END_TEST

/* For every (r, c): chosen sets are distinct, ascending neighbours; every pull is matched
 * by exactly one push: pullers(i) == {j : i in chosen(j)}. */
START_TEST(test_schedule_pulls_match_pushes)
{
    static const int cfg[][3] = {{2, 1, 1}, {3, 1, 1},  {5, 1, 2},  {5, 2, 1},  {8, 2, 3},
                                 {9, 3, 7}, {16, 3, 2}, {31, 4, 5}, {40, 1, 1}, {6, 9, 3}};

    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sl_schedule_t s;
        int chosen[40 * 8], pullers[40], expect[40];

        ck_assert_int_eq(sl_schedule_init(&s, cfg[c][0], cfg[c][1], cfg[c][2], 7 + c), SL_OK);
        for (uint64_t r = 0; r < 20; r++)
            for (int comp = 0; comp < 3; comp++) {
                all_chosen(&s, r, comp, chosen);
                for (int i = 0; i < s.nodes; i++) {
                    const int *ci = chosen + (size_t)i * s.picks;
                    int np = -1, ne = 0;

                    for (int m = 0; m < s.picks; m++) {
                        ck_assert(sl_ring_is_neighbour(s.nodes, s.degree, i, ci[m]));
                        if (m)
                            ck_assert_int_lt(ci[m - 1], ci[m]); /* distinct */
                    }
                    for (int j = 0; j < s.nodes; j++) /* ascending by construction */
                        for (int m = 0; m < s.picks; m++)
                            if (chosen[(size_t)j * s.picks + m] == i)
                                expect[ne++] = j;
                    ck_assert_int_eq(sl_schedule_pullers(&s, r, comp, i, pullers, s.links, &np),
                                     SL_OK);
                    ck_assert_int_eq(np, ne);
                    ck_assert_mem_eq(pullers, expect, (size_t)ne * sizeof *expect);
                }
            }
    }
}
END_TEST

/* Each of the 2k neighbours is chosen with probability q / 2k, uniformly. */
START_TEST(test_schedule_uniform)
{
    enum { R = 20000 };
    sl_schedule_t s;
    int nbr[4], count, chosen[2], hits[4] = {0};

    ck_assert_int_eq(sl_schedule_init(&s, 10, 2, 1, 42), SL_OK);
    ck_assert_int_eq(sl_ring_neighbours(10, 2, 4, nbr, 4, &count), SL_OK);
    for (uint64_t r = 0; r < R; r++) {
        ck_assert_int_eq(sl_schedule_chosen(&s, r, 0, 4, chosen, 2, &count), SL_OK);
        for (int m = 0; m < 4; m++)
            hits[m] += chosen[0] == nbr[m];
    }
    /* binomial(20000, 1/4): sd 61; 5 sd */
    for (int m = 0; m < 4; m++)
        ck_assert_msg(abs(hits[m] - R / 4) < 310, "neighbour %d chosen %d times", nbr[m], hits[m]);
}
END_TEST

START_TEST(test_schedule_local)
{
    sl_schedule_t s;
    int nbr[6], chosen[6], pullers[6], count;

    /* q = 2k: every neighbour, every round; everyone pushes to all neighbours */
    ck_assert_int_eq(sl_schedule_init(&s, 12, 3, 6, 5), SL_OK);
    ck_assert_int_eq(s.picks, 6);
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(sl_ring_neighbours(12, 3, i, nbr, 6, &count), SL_OK);
        for (uint64_t r = 0; r < 5; r++) {
            ck_assert_int_eq(sl_schedule_chosen(&s, r, 1, i, chosen, 6, &count), SL_OK);
            ck_assert_int_eq(count, 6);
            ck_assert_mem_eq(chosen, nbr, sizeof nbr);
            ck_assert_int_eq(sl_schedule_pullers(&s, r, 1, i, pullers, 6, &count), SL_OK);
            ck_assert_int_eq(count, 6);
            ck_assert_mem_eq(pullers, nbr, sizeof nbr);
        }
    }
    /* q above the links is capped: n = 3 has 2 links */
    ck_assert_int_eq(sl_schedule_init(&s, 3, 1, 5, 5), SL_OK);
    ck_assert_int_eq(s.links, 2);
    ck_assert_int_eq(s.picks, 2);
}
END_TEST

START_TEST(test_schedule_stats)
{
    sl_schedule_t s;
    sl_schedule_stats_t st;

    ck_assert_int_eq(sl_schedule_init(&s, 16, 2, 2, 3), SL_OK);
    ck_assert_int_eq(sl_schedule_stats(&s, 0, 0, 2000, &st), SL_OK);
    ck_assert_int_eq(st.rounds, 2000);
    ck_assert_int_eq(st.out_degree, 2);
    /* every pull is one push: the mean in-degree is q exactly */
    ck_assert_double_eq_tol(st.in_mean, 2.0, 1e-12);
    ck_assert_double_eq_tol(st.total_mean, 4000.0, 1e-9);
    ck_assert_int_ge(st.in_min, 0);
    ck_assert_int_le(st.in_max, 4);
    /* with 2000 rounds some node is chosen by none and some by all 4 of its neighbours */
    ck_assert_int_eq(st.in_min, 0);
    ck_assert_int_eq(st.in_max, 4);
    /* per-node totals: a sum of 2000 rounds of 4 Bernoulli(1/2): sd sqrt(2000) = 45 */
    ck_assert_int_gt(st.total_min, 4000 - 300);
    ck_assert_int_lt(st.total_max, 4000 + 300);
    ck_assert_int_le(st.total_min, 4000);
    ck_assert_int_ge(st.total_max, 4000);

    /* local: every node pushes to all 2k neighbours every round */
    ck_assert_int_eq(sl_schedule_init(&s, 9, 2, 4, 3), SL_OK);
    ck_assert_int_eq(sl_schedule_stats(&s, 2, 100, 10, &st), SL_OK);
    ck_assert_int_eq(st.in_min, 4);
    ck_assert_int_eq(st.in_max, 4);
    ck_assert_int_eq(st.total_min, 40);
    ck_assert_int_eq(st.total_max, 40);
}
END_TEST

/* ------------------------------------------------------------------ mixing */

/* The expected W of the ring is circulant with first row c_0 = 1/(q+1) and
 * c_d = c_{-d} = q/(2k) /(q+1) for d = 1..k (n > 2k), so its eigenvalues are
 * lambda_m = c_0 + 2 c_1 sum_{d=1..k} cos(2 pi m d / n), m = 0..n-1. */
START_TEST(test_mixing_circulant)
{
    static const int cfg[][3] = {{5, 1, 1},  {5, 2, 4},  {8, 1, 2},  {8, 2, 3}, {12, 3, 6},
                                 {12, 2, 1}, {33, 3, 2}, {40, 4, 8}, {64, 1, 1}};

    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        int n = cfg[c][0], k = cfg[c][1], q = cfg[c][2];
        double w[64 * 64], eig[64], want[64], c0 = 1.0 / (q + 1), c1 = (double)q / (2 * k) * c0;
        double l2 = 0;
        sl_schedule_t s;
        sl_mixing_t mix;

        ck_assert_int_eq(sl_schedule_init(&s, n, k, q, 1), SL_OK);
        for (int m = 0; m < n; m++) {
            double sum = 0;

            for (int d = 1; d <= k; d++)
                sum += cos(2 * acos(-1.0) * m * d / n);
            want[m] = c0 + 2 * c1 * sum;
            if (m > 0)
                l2 = fmax(l2, fabs(want[m]));
        }
        qsort(want, (size_t)n, sizeof *want, sl_cmp_double);
        ck_assert_int_eq(sl_mixing_matrix(&s, w, sizeof w / sizeof w[0]), SL_OK);
        ck_assert_int_eq(sl_mixing_eigenvalues(w, n, eig), SL_OK);
        for (int m = 0; m < n; m++)
            ck_assert_msg(fabs(eig[m] - want[m]) < 1e-12,
                          "n=%d k=%d q=%d: eigenvalue %d: %.15g, "
                          "want %.15g",
                          n, k, q, m, eig[m], want[m]);
        ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_OK);
        ck_assert_double_eq_tol(mix.lambda2, l2, 1e-12);
        ck_assert_double_eq_tol(mix.gap, 1 - l2, 1e-12);
        ck_assert_int_eq(mix.rounds_10x, (int)ceil(log(10.0) / -log(l2)));
    }
}
END_TEST

START_TEST(test_mixing_by_hand)
{
    sl_schedule_t s;
    sl_mixing_t mix;
    double w[9], w4[16], eig[3];

    /* n = 3, k = 1, q = 1: W = [1/2 1/4 1/4; 1/4 1/2 1/4; 1/4 1/4 1/2] = I/4 + J/4
     * (J all ones): eigenvalues 1/4, 1/4, 1; gap 3/4; ln 10 / ln 4 = 1.66 -> 2 rounds */
    ck_assert_int_eq(sl_schedule_init(&s, 3, 1, 1, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_matrix(&s, w, 9), SL_OK);
    for (int i = 0; i < 9; i++)
        ck_assert_double_eq_tol(w[i], i % 4 == 0 ? 0.5 : 0.25, 1e-15);
    ck_assert_int_eq(sl_mixing_eigenvalues(w, 3, eig), SL_OK);
    ck_assert_double_eq_tol(eig[0], 0.25, 1e-14);
    ck_assert_double_eq_tol(eig[1], 0.25, 1e-14);
    ck_assert_double_eq_tol(eig[2], 1.0, 1e-14);
    ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_OK);
    ck_assert_double_eq_tol(mix.lambda2, 0.25, 1e-14);
    ck_assert_double_eq_tol(mix.gap, 0.75, 1e-14);
    ck_assert_int_eq(mix.rounds_10x, 2);

    /* n = 4, k = 1, q = 2 (local): W = (I + A)/3 with A the 4-cycle (eigenvalues 2, 0,
     * 0, -2): 1, 1/3, 1/3, -1/3; |lambda_2| = 1/3; ln 10 / ln 3 = 2.10 -> 3 rounds */
    ck_assert_int_eq(sl_schedule_init(&s, 4, 1, 2, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_OK);
    ck_assert_double_eq_tol(mix.lambda2, 1.0 / 3, 1e-14);
    ck_assert_int_eq(mix.rounds_10x, 3);

    /* n = 4, k = 2, q = 1: i+2 == i-2, so 3 links, each chosen with probability 1/3:
     * W = I/3 + J/6: eigenvalues 1, 1/3, 1/3, 1/3 */
    ck_assert_int_eq(sl_schedule_init(&s, 4, 2, 1, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_matrix(&s, w4, 16), SL_OK);
    for (int i = 0; i < 16; i++)
        ck_assert_double_eq_tol(w4[i], i % 5 == 0 ? 0.5 : 1.0 / 6, 1e-15);
    ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_OK);
    ck_assert_double_eq_tol(mix.lambda2, 1.0 / 3, 1e-14);

    /* n = 2: one round averages both nodes exactly: |lambda_2| = 0, 1 round */
    ck_assert_int_eq(sl_schedule_init(&s, 2, 1, 1, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_OK);
    ck_assert_double_eq_tol(mix.lambda2, 0, 1e-15);
    ck_assert_double_eq_tol(mix.gap, 1, 1e-15);
    ck_assert_int_eq(mix.rounds_10x, 1);

    /* n = 1: nothing to agree on */
    ck_assert_int_eq(sl_schedule_init(&s, 1, 1, 1, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_OK);
    ck_assert_double_eq(mix.gap, 1);
    ck_assert_int_eq(mix.rounds_10x, 0);

    /* the formula: |lambda_2| = 1/10 is exactly one round, 0.5 is ceil(3.32) = 4 */
    ck_assert_int_eq(sl_mixing_rounds_10x(0.1), 1);
    ck_assert_int_eq(sl_mixing_rounds_10x(0.5), 4);
    ck_assert_int_eq(sl_mixing_rounds_10x(0.99), 230);
    ck_assert_int_eq(sl_mixing_rounds_10x(1.0), -1);
}
END_TEST

/* Jacobi on matrices that are not mixing matrices: negative, repeated, scaled. */
START_TEST(test_mixing_eigenvalues_general)
{
    double a2[4] = {2, 1, 1, 2}, e2[2];
    double a3[9] = {2, -1, 0, -1, 2, -1, 0, -1, 2}, e3[3];
    double a4[16] = {5e6, 0, 0, 0, 0, -3, 0, 0, 0, 0, -3, 0, 0, 0, 0, 1e-9}, e4[4];

    ck_assert_int_eq(sl_mixing_eigenvalues(a2, 2, e2), SL_OK);
    ck_assert_double_eq_tol(e2[0], 1, 1e-14);
    ck_assert_double_eq_tol(e2[1], 3, 1e-14);
    /* tridiag(-1, 2, -1): 2 - sqrt 2, 2, 2 + sqrt 2 */
    ck_assert_int_eq(sl_mixing_eigenvalues(a3, 3, e3), SL_OK);
    ck_assert_double_eq_tol(e3[0], 2 - sqrt(2), 1e-14);
    ck_assert_double_eq_tol(e3[1], 2, 1e-14);
    ck_assert_double_eq_tol(e3[2], 2 + sqrt(2), 1e-14);
    ck_assert_int_eq(sl_mixing_eigenvalues(a4, 4, e4), SL_OK);
    ck_assert_double_eq(e4[0], -3);
    ck_assert_double_eq(e4[1], -3);
    ck_assert_double_eq(e4[2], 1e-9);
    ck_assert_double_eq(e4[3], 5e6);
}
END_TEST

/* ----------------------------------------------------------- shoal-topo CLI */

static char topo_bin[1024];

static int
count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

START_TEST(test_topo_cli)
{
    static char out[1 << 16], err[4096];

    if (!test_tool_find("shoal-topo", topo_bin, sizeof topo_bin))
        return;
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--help", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "Usage: shoal-topo"));
    ck_assert_ptr_nonnull(strstr(out, "--neighbours"));

    /* n = 3, k = 1, q = 1 is the case worked by hand above */
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--nodes", "3", "--format", "json", NULL}),
                     0);
    ck_assert_str_eq(err, "");
    ck_assert_ptr_nonnull(strstr(out, "\"nodes\": 3, \"degree\": 1, \"neighbours\": 1, "
                                      "\"links\": 2, \"pulls_per_round\": 1, \"seed\": 1234"));
    ck_assert_ptr_nonnull(strstr(out, "\"neighbour_lists\": [[1, 2], [0, 2], [0, 1]]"));
    ck_assert_ptr_nonnull(strstr(out, "\"spectral_gap\": 0.75"));
    ck_assert_ptr_nonnull(strstr(out, "\"rounds_10x\": 2}"));
    ck_assert_int_eq(out[strlen(out) - 2], '}');

    /* the JSON schedule agrees with the library */
    {
        sl_schedule_t s;
        int chosen[2], count;
        char want[128];

        ck_assert_int_eq(
            test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                          (const char *const[]){"--nodes=16", "--neighbours=2", "--seed", "77",
                                                "--round", "9", "--component", "2", "--format=json",
                                                NULL}),
            0);
        ck_assert_int_eq(sl_schedule_init(&s, 16, 3, 2, 77), SL_OK);
        for (int i = 0; i < 16; i++) {
            ck_assert_int_eq(sl_schedule_chosen(&s, 9, 2, i, chosen, 2, &count), SL_OK);
            snprintf(want, sizeof want, "{\"node\": %d, \"pulls_from\": [%d, %d]", i, chosen[0],
                     chosen[1]);
            ck_assert_msg(strstr(out, want) != NULL, "missing %s", want);
        }
    }

    ck_assert_int_eq(
        test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                      (const char *const[]){"--nodes", "8", "--local", "--format", "dot", NULL}),
        0);
    ck_assert_int_eq(strncmp(out, "digraph shoal_topology {", 24), 0);
    ck_assert_ptr_nonnull(strstr(out, "    0 -> 7;\n")); /* ring link, and 7 pushes to 0 */
    ck_assert_ptr_nonnull(strstr(out, "    7 -> 0;\n"));

    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--nodes", "5", "--degree", "2", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "  node 0: 1 2 3 4\n"));
    ck_assert_ptr_nonnull(strstr(out, "spectral gap"));

    /* bad flags: one line, exit 2 */
    static const char *const bad[][6] = {{"--nodes", "4", "--bogus", NULL},
                                         {"--nodes", "x4", NULL},
                                         {"--nodes", "0", NULL},
                                         {"--nodes", "4", "--neighbours", "0", NULL},
                                         {"--nodes", "4", "--format", "xml", NULL},
                                         {"--degree", "2", NULL},
                                         {"--nodes", "4", "--local", "--neighbours", "2", NULL}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL, bad[b]),
                         2);
        ck_assert_int_eq(strncmp(err, "shoal-topo: ", 12), 0);
        ck_assert_int_eq(count_lines(err), 1);
        ck_assert_str_eq(out, "");
    }

    /* --png without Graphviz on PATH: one line, exit 1 */
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, "/nonexistent",
                                   (const char *const[]){"--nodes", "4", "--png", "x.png", NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "'dot' is not on PATH"));
    ck_assert_int_eq(count_lines(err), 1);
}
END_TEST

/* --config takes run.seed from a configuration; a broken one is a usage error. */
START_TEST(test_topo_config)
{
    static char out[1 << 16], err[4096];
    char dir[] = "/tmp/check_topology.XXXXXX", conf[1100];
    FILE *f;

    if (!test_tool_find("shoal-topo", topo_bin, sizeof topo_bin))
        return;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(conf, sizeof conf, "%s/run.yaml", dir);
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("run: {name: topo, seed: 4242}\n", f);
    fclose(f);
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--config", conf, "--nodes", "4",
                                                         "--format", "json", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "\"seed\": 4242"));
    /* --seed wins over the file */
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--config", conf, "--nodes", "4", "--seed",
                                                         "5", "--format", "json", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "\"seed\": 5,"));
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("run: {nmae: topo}\n", f);
    fclose(f);
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--config", conf, "--nodes", "4", NULL}),
                     2);
    ck_assert_int_eq(strncmp(err, "shoal-topo: ", 12), 0);
    ck_assert_ptr_nonnull(strstr(err, "run.yaml:1:"));
    unlink(conf);
    rmdir(dir);
}
END_TEST

/* --png pipes the DOT graph into `dot -Tpng`, its output into FILE: a stand-in dot
 * (shell builtins only, PATH is its directory) copies its input; a failing one is exit 1
 * and leaves FILE as it was. */
START_TEST(test_topo_png)
{
    static char out[1 << 16], err[4096];
    char dir[] = "/tmp/check_topology.XXXXXX", dot[1100], png[1100];
    FILE *f;

    if (!test_tool_find("shoal-topo", topo_bin, sizeof topo_bin))
        return;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(dot, sizeof dot, "%s/dot", dir);
    snprintf(png, sizeof png, "%s/ring.png", dir);
    f = fopen(dot, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n[ \"$*\" = -Tpng ] || exit 3\n"
          "while IFS= read -r l; do printf '%s\\n' \"$l\"; done\n",
          f);
    fclose(f);
    ck_assert_int_eq(chmod(dot, 0755), 0);
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, dir,
                                   (const char *const[]){"--nodes", "6", "--png", png, "--format",
                                                         "json", NULL}),
                     0);
    ck_assert_str_eq(err, "");
    ck_assert_ptr_nonnull(strstr(out, "\"nodes\": 6")); /* stdout keeps its format */
    f = fopen(png, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(out, sizeof out, f));
    ck_assert_str_eq(out, "digraph shoal_topology {\n");
    fclose(f);
    test_write_file(png, "old", 3);

    f = fopen(dot, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\nexit 1\n", f);
    fclose(f);
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, dir,
                                   (const char *const[]){"--nodes", "6", "--png", png, NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "shoal-topo: dot failed to write"));
    ck_assert_int_eq(count_lines(err), 1);
    f = fopen(png, "r");
    ck_assert(f && fgets(out, sizeof out, f) && strcmp(out, "old") == 0);
    fclose(f);
    unlink(png);
    unlink(dot);
    rmdir(dir);
}
END_TEST

/* The DOT graph pins every node on a circle in ring order, clockwise from the top, so
 * that the picture of the ring is the ring whatever the gossip arrows are. */
START_TEST(test_topo_ring_order)
{
    static char out[1 << 16], err[4096];
    const int n = 12;
    const char *p;
    int seen = 0;

    if (!test_tool_find("shoal-topo", topo_bin, sizeof topo_bin))
        return;
    ck_assert_int_eq(test_tool_run(topo_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--nodes", "12", "--format", "dot", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "layout = neato;"));
    for (p = out; (p = strstr(p, " [pos = \"")) != NULL; p++) {
        const char *line = p;
        double x, y, want = 2 * M_PI * seen / n, got;
        int node;

        while (line > out && line[-1] != '\n')
            line--;
        ck_assert_int_eq(sscanf(line, " %d [pos = \"%lf,%lf!\"];", &node, &x, &y), 3);
        ck_assert_int_eq(node, seen);
        got = atan2(x, y); /* clockwise from the top */
        if (got < -1e-9)
            got += 2 * M_PI;
        ck_assert_msg(fabs(got - want) < 1e-3, "node %d at %g rad, want %g", node, got, want);
        ck_assert(fabs(hypot(x, y) - 2.4) < 0.002); /* inches, as neato reads pos */
        seen++;
    }
    ck_assert_int_eq(seen, n);
}
END_TEST

/* ------------------------------------------------------------------ limits */

START_TEST(test_bad_arguments)
{
    sl_schedule_t s;
    sl_schedule_stats_t st;
    int out[8], count, links;
    double w[16], eig[4];
    double asym[4] = {1, 2, 0, 1}, nan4[4] = {1, NAN, NAN, 1};

    ck_assert_int_eq(sl_ring_links(0, 1, &links), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "ring: 0 nodes"));
    ck_assert_int_eq(sl_ring_links(SL_RING_MAX_NODES + 1, 1, &links), SL_ERR_INVALID);
    ck_assert_int_eq(sl_ring_links(4, 0, &links), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "k = 0"));
    ck_assert_int_eq(sl_ring_neighbours(4, 1, 4, out, 8, &count), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "node 4"));
    ck_assert_int_eq(sl_ring_neighbours(4, 1, -1, out, 8, &count), SL_ERR_INVALID);
    ck_assert_int_eq(sl_ring_neighbours(10, 3, 0, out, 5, &count), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_init(&s, -3, 1, 1, 0), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_init(&s, 4, -1, 1, 0), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_init(&s, 4, 1, 0, 0), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "q = 0"));
    ck_assert_int_eq(sl_schedule_init(&s, 10, 2, 3, 0), SL_OK);
    ck_assert_int_eq(sl_schedule_chosen(&s, 0, 0, 10, out, 8, &count), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_chosen(&s, 0, -1, 0, out, 8, &count), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_chosen(&s, 0, 0, 0, out, 2, &count), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_pullers(&s, 0, 0, 0, out, 3, &count), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_stats(&s, 0, 0, 0, &st), SL_ERR_INVALID);
    ck_assert_int_eq(sl_schedule_stats(&s, -2, 0, 5, &st), SL_ERR_INVALID);
    ck_assert_int_eq(sl_mixing_matrix(&s, w, 16), SL_ERR_INVALID);
    ck_assert_int_eq(sl_mixing_eigenvalues(asym, 2, eig), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "not symmetric"));
    ck_assert_int_eq(sl_mixing_eigenvalues(nan4, 2, eig), SL_ERR_INVALID);
    ck_assert_int_eq(sl_mixing_eigenvalues(w, 0, eig), SL_ERR_INVALID);
    {
        sl_mixing_t mix;

        ck_assert_int_eq(sl_schedule_init(&s, SL_MIXING_MAX_NODES + 1, 2, 1, 0), SL_OK);
        ck_assert_int_eq(sl_mixing_analyse(&s, &mix), SL_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(sl_err_msg(), "mixing: 1025 nodes"));
    }
}
END_TEST

/* One node: no neighbours, no pulls, no pushes, nothing to mix. A huge k on a small
 * ring is just every other node. */
START_TEST(test_degenerate)
{
    sl_schedule_t s;
    sl_schedule_stats_t st;
    int out[4], count = -1;

    ck_assert_int_eq(sl_schedule_init(&s, 1, 1, 1, 9), SL_OK);
    ck_assert_int_eq(s.links, 0);
    ck_assert_int_eq(s.picks, 0);
    ck_assert_int_eq(sl_schedule_chosen(&s, 3, 0, 0, out, 0, &count), SL_OK);
    ck_assert_int_eq(count, 0);
    ck_assert_int_eq(sl_schedule_pullers(&s, 3, 0, 0, out, 0, &count), SL_OK);
    ck_assert_int_eq(count, 0);
    ck_assert_int_eq(sl_schedule_stats(&s, 0, 0, 3, &st), SL_OK);
    ck_assert_int_eq(st.in_max, 0);
    ck_assert_int_eq(st.total_max, 0);

    ck_assert_int_eq(sl_schedule_init(&s, 4, 2147483647, 2147483647, 9), SL_OK);
    ck_assert_int_eq(s.links, 3);
    ck_assert_int_eq(s.picks, 3);
    ck_assert_str_eq(neighbours_str(4, 2147483647, 2), "0 1 3");
    ck_assert_int_eq(sl_schedule_pullers(&s, 0, 0, 2, out, 4, &count), SL_OK);
    ck_assert_int_eq(count, 3);
}
END_TEST

static Suite *
topology_suite(void)
{
    Suite *s = suite_create("topology");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_test(core, test_ring_small_by_hand);
    tcase_add_test(core, test_ring_large);
    tcase_add_test(core, test_ring_default_degree);
    tcase_add_test(core, test_schedule_deterministic);
    tcase_add_test(core, test_schedule_same_in_child);
    tcase_add_test(core, test_schedule_pulls_match_pushes);
    tcase_add_test(core, test_schedule_uniform);
    tcase_add_test(core, test_schedule_local);
    tcase_add_test(core, test_schedule_stats);
    tcase_add_test(core, test_mixing_circulant);
    tcase_add_test(core, test_mixing_by_hand);
    tcase_add_test(core, test_mixing_eigenvalues_general);
    tcase_add_test(core, test_topo_cli);
    tcase_add_test(core, test_topo_config);
    tcase_add_test(core, test_topo_png);
    tcase_add_test(core, test_topo_ring_order);
    suite_add_tcase(s, core);
    tcase_add_test(limits, test_bad_arguments);
    tcase_add_test(limits, test_degenerate);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(topology_suite());
}
