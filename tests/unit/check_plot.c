/* shoal plot: runs' metrics.jsonl (written here by hand, as sl_metrics.c writes them)
 * into a gnuplot script and a PNG; several runs in distinct colours; node-0's file for
 * a run of several nodes; one clear line when gnuplot is missing (PATH without it) or a
 * directory is no run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-plot-XXXXXX";
static char shoal[1024];

enum { CAP = 65536 };
static char out[CAP], err[CAP];

/* <tmp_root>/<dir>/<sub>metrics.jsonl: steps 10..50 with perplexity 100 / step and time
 * step / 10 s, an evaluation at step 30 (valid ppl v) and one on the test split. */
static void
write_metrics(const char *dir, const char *sub, double v)
{
    char path[1200];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", tmp_root, dir);
    mkdir(path, 0700);
    if (*sub) {
        snprintf(path, sizeof path, "%s/%s/%s", tmp_root, dir, sub);
        mkdir(path, 0700);
    }
    snprintf(path, sizeof path, "%s/%s/%smetrics.jsonl", tmp_root, dir, *sub ? "node-0/" : "");
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    for (int s = 10; s <= 50; s += 10) {
        fprintf(f,
                "{\"step\":%d,\"epoch\":1,\"epoch_frac\":0.1,\"tokens\":100,\"tokens_per_s\":5,"
                "\"loss\":1,\"ppl\":%g,\"lr\":1,\"grad_norm\":1,\"time_s\":%g}\n",
                s, 1000.0 / s, s / 10.0);
        if (s == 30)
            fprintf(f,
                    "{\"event\":\"eval\",\"split\":\"valid\",\"step\":30,\"loss\":1,\"ppl\":%g,"
                    "\"bpc\":1}\n{\"event\":\"eval\",\"split\":\"test\",\"step\":30,\"loss\":1,"
                    "\"ppl\":999,\"bpc\":1}\n"
                    "{\"event\":\"membership\",\"step\":30,\"rank\":1,\"members\":3}\n",
                    v);
    }
    fclose(f);
}

static int
plot(const char *path_env, const char *const *args)
{
    const char *argv[16] = {"plot"};
    int n = 1;

    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return test_tool_run(shoal, out, sizeof out, err, sizeof err, path_env, argv);
}

static void
in_tmp(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmp_root, name);
}

/* Two runs (one of several nodes): both in the script, each with its own colour, the
 * validation point at the time of the step it follows, the test split left out. */
START_TEST(test_script_two_runs)
{
    char a[1100], b[1100];

    write_metrics("gossip", "", 40);
    write_metrics("bmuf", "node-0", 45);
    in_tmp(a, sizeof a, "gossip");
    in_tmp(b, sizeof b, "bmuf/");
    ck_assert_msg(plot(NULL, (const char *const[]){a, b, "--script", NULL}) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(out, "$train0 << EOD\n10 100 1\n20 50 2\n"));
    ck_assert_ptr_nonnull(strstr(out, "$valid0 << EOD\n30 40 3\nEOD\n"));
    ck_assert_ptr_nonnull(strstr(out, "$valid1 << EOD\n30 45 3\nEOD\n"));
    ck_assert_ptr_null(strstr(out, "999"));
    ck_assert_ptr_nonnull(strstr(out, "$train0 using 1:2 with lines lw 1.5 lc rgb '#1f77b4' "
                                      "title 'gossip'"));
    ck_assert_ptr_nonnull(strstr(out, "$train1 using 1:2 with lines lw 1.5 lc rgb '#d62728' "
                                      "title 'bmuf'"));
    ck_assert_ptr_nonnull(strstr(out, "$train1 using 3:2")); /* against time */
    ck_assert_ptr_nonnull(strstr(out, "set output 'perplexity.png'"));
}
END_TEST

/* With gnuplot: a PNG. (Without it on this machine, the case says so and checks the
 * other cases only.) */
START_TEST(test_png)
{
    char a[1100], png[1100], *data;
    size_t len = 0;

    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "check_plot: no gnuplot on PATH: the PNG itself is not checked\n");
        return;
    }
    write_metrics("one", "", 40);
    in_tmp(a, sizeof a, "one");
    in_tmp(png, sizeof png, "one.png");
    ck_assert_msg(plot(NULL, (const char *const[]){a, "-o", png, NULL}) == 0, "%s", err);
    ck_assert_msg(strstr(out, "shoal: plot: wrote ") && strstr(out, "(1 run)\n"), "%s", out);
    data = test_read_file(png, &len);
    ck_assert_ptr_nonnull(data);
    ck_assert(len > 1000 && memcmp(data, "\x89PNG", 4) == 0);
    free(data);
}
END_TEST

/* gnuplot missing: one line saying so and how to get it, exit 1, no file. */
START_TEST(test_no_gnuplot)
{
    char a[1100], png[1100];
    struct stat sb;

    write_metrics("two", "", 40);
    in_tmp(a, sizeof a, "two");
    in_tmp(png, sizeof png, "two.png");
    ck_assert_int_eq(plot("/nonexistent", (const char *const[]){a, "-o", png, NULL}), 1);
    ck_assert_msg(strncmp(err, "shoal: plot: gnuplot is not on PATH: install it", 47) == 0 &&
                      strchr(err, '\n') == err + strlen(err) - 1,
                  "%s", err);
    ck_assert_int_ne(stat(png, &sb), 0);
}
END_TEST

START_TEST(test_not_a_run)
{
    char a[1100], e[1100];

    in_tmp(a, sizeof a, "nothing-here");
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--script", NULL}), 1);
    ck_assert_msg(strstr(err, "nothing-here/metrics.jsonl nor ") &&
                      strstr(err, "not a run directory\n"),
                  "%s", err);
    in_tmp(e, sizeof e, "empty");
    mkdir(e, 0700);
    in_tmp(a, sizeof a, "empty/metrics.jsonl");
    test_write_file(a, "", 0);
    ck_assert_int_eq(plot(NULL, (const char *const[]){e, "--script", NULL}), 1);
    ck_assert_msg(strstr(err, "no training steps recorded yet\n"), "%s", err);
    ck_assert_int_eq(plot(NULL, (const char *const[]){"--script", NULL}), 2);
    ck_assert_msg(strstr(err, "missing RUN_DIR"), "%s", err);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("plot");
    TCase *c = tcase_create("core");

    tcase_add_test(c, test_script_two_runs);
    tcase_add_test(c, test_png);
    suite_add_tcase(s, c);
    c = tcase_create("limits");
    tcase_add_test(c, test_no_gnuplot);
    tcase_add_test(c, test_not_a_run);
    suite_add_tcase(s, c);
    return s;
}

int
main(void)
{
    if (!test_shoal_find(shoal, sizeof shoal))
        return 77;
    return test_main_in_tmp(suite(), tmp_root, "check_plot");
}
