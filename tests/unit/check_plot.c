/* shoal plot: runs' metrics.jsonl (written here by hand, as sl_metrics.c writes them)
 * into a gnuplot script and a PNG; several runs in distinct colours; node-0's file for
 * a run of several nodes; the x axes --x picks, the wall-clock one from wall_time; one
 * clear line when gnuplot is missing (PATH without it), a directory is no run, a
 * wall_time is missing or bad, or --x is wrong. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-plot-XXXXXX";
static char shoal[1024];

enum { CAP = 65536 };
static char out[CAP], err[CAP];

/* ",\"wall_time\":\"2026-11-27T10:15:10.250Z\"" for t s since 1970 (milliseconds
 * kept) into buf, as sl_metrics.c writes it; "" for t < 0 (a file of an older shoal). */
static const char *
wall(char *buf, size_t cap, double t)
{
    char day[32];
    time_t whole = (time_t)t;
    struct tm tm;

    if (t < 0)
        return strcpy(buf, "");
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", gmtime_r(&whole, &tm));
    snprintf(buf, cap, ",\"wall_time\":\"%s.%03dZ\"", day, (int)((t - (double)whole) * 1000 + 0.5));
    return buf;
}

/* <tmp_root>/<dir>/<sub>metrics.jsonl: steps 10..50 with perplexity 100 / step and time
 * step / 10 s, an evaluation at step 30 (valid ppl v) and one on the test split; with
 * wall0 >= 0, wall_time wall0 + step s in every record (wall0 + 31 s for the
 * evaluations). */
static void
write_metrics_at(const char *dir, const char *sub, double v, double wall0)
{
    char path[1200], w[64], w_eval[64];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", tmp_root, dir);
    mkdir(path, 0700);
    if (*sub) {
        snprintf(path, sizeof path, "%s/%s/%s", tmp_root, dir, sub);
        mkdir(path, 0700);
    }
    snprintf(path, sizeof path, "%s/%s/%smetrics.jsonl", tmp_root, dir, *sub ? "node-0/" : "");
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    wall(w_eval, sizeof w_eval, wall0 < 0 ? -1 : wall0 + 31);
    for (int s = 10; s <= 50; s += 10) {
        fprintf(f,
                "{\"step\":%d,\"epoch\":1,\"epoch_frac\":0.1,\"tokens\":100,\"tokens_per_s\":5,"
                "\"loss\":1,\"ppl\":%g,\"lr\":1,\"grad_norm\":1,\"time_s\":%g%s}\n",
                s, 1000.0 / s, s / 10.0, wall(w, sizeof w, wall0 < 0 ? -1 : wall0 + s));
        if (s == 30)
            fprintf(f,
                    "{\"event\":\"eval\",\"split\":\"valid\",\"step\":30,\"loss\":1,\"ppl\":%g,"
                    "\"bpc\":1%s}\n{\"event\":\"eval\",\"split\":\"test\",\"step\":30,\"loss\":1,"
                    "\"ppl\":999,\"bpc\":1%s}\n"
                    "{\"event\":\"membership\",\"step\":30,\"rank\":1,\"members\":3%s}\n",
                    v, w_eval, w_eval, w_eval);
    }
    fclose(f);
}

/* The same without wall_time, as shoal wrote it before. */
static void
write_metrics(const char *dir, const char *sub, double v)
{
    write_metrics_at(dir, sub, v, -1);
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
    /* the default draws no wall-clock panel */
    ck_assert_ptr_null(strstr(out, "$wtrain"));
    ck_assert_ptr_null(strstr(out, "xdata time"));
}
END_TEST

/* A string of text after another, in that order. */
static const char *
after(const char *text, const char *first, const char *then)
{
    const char *p = strstr(text, first);

    ck_assert_msg(p != NULL, "no '%s' in:\n%s", first, text);
    p = strstr(p + strlen(first), then);
    ck_assert_msg(p != NULL, "no '%s' after '%s' in:\n%s", then, first, text);
    return p;
}

/* --x steps,wall: the panels in that order; the wall-clock one from wall_time (2026-11-27
 * 10:15:10.250 UTC is 1795774510.250 s since 1970), evaluations at their own time, tics
 * every 10 s with seconds for a 41 s run on one day, the day in the label; a second run
 * over midnight names month and day on its tics instead. */
START_TEST(test_script_wall)
{
    char a[1100], b[1100];

    write_metrics_at("walled", "", 40, 1795774500.25);
    in_tmp(a, sizeof a, "walled");
    ck_assert_msg(plot(NULL, (const char *const[]){a, "--x", "steps,wall", "--script", NULL}) == 0,
                  "%s", err);
    ck_assert_str_eq(err, "");
    ck_assert_ptr_nonnull(strstr(out, "# shoal plot: perplexity against steps and against "
                                      "wall-clock time\n"));
    ck_assert_ptr_nonnull(strstr(out, "$wtrain0 << EOD\n1795774510.250 100\n1795774520.250 50\n"
                                      "1795774530.250 33.3333\n1795774540.250 25\n"
                                      "1795774550.250 20\nEOD\n"));
    ck_assert_ptr_nonnull(strstr(out, "$wvalid0 << EOD\n1795774531.250 40\nEOD\n"));
    ck_assert_ptr_nonnull(strstr(out, "set terminal png size 1400,560"));
    ck_assert_ptr_nonnull(strstr(out, "set multiplot layout 1,2 "));
    after(out, "set xlabel 'step'\nplot $train0 using 1:2",
          "set xdata time\nset timefmt '%s'\n"
          "set format x '%H:%M:%S'\nset xtics 10\n"
          "set xlabel 'wall-clock time (UTC, "
          "2026-11-27)'\nplot $wtrain0 using 1:2");
    after(out, "plot $wtrain0 using 1:2", "$wvalid0 using 1:2 with linespoints");
    ck_assert_ptr_null(strstr(out, "using 3:2")); /* no training-time panel */

    /* wall alone, two runs, one over midnight: one panel, 900 wide */
    write_metrics_at("midnight", "", 45, 1795824000.0 - 30);
    in_tmp(b, sizeof b, "midnight");
    ck_assert_msg(plot(NULL, (const char *const[]){a, b, "--x=wall", "--script", NULL}) == 0, "%s",
                  err);
    ck_assert_ptr_nonnull(strstr(out, "$wtrain1 << EOD\n1795823980.000 100\n"));
    ck_assert_ptr_nonnull(strstr(out, "set terminal png size 900,560"));
    ck_assert_ptr_nonnull(strstr(out, "set multiplot layout 1,1 "));
    ck_assert_ptr_nonnull(strstr(out, "set xtics 10800\nset xlabel 'wall-clock time (UTC)'\n"));
    ck_assert_ptr_nonnull(strstr(out, "set format x '%m-%d %H:%M'\n"));
    ck_assert_ptr_nonnull(strstr(out, "$wtrain1 using 1:2 with lines lw 1.5 lc rgb '#d62728' "
                                      "title 'midnight'"));
    ck_assert_ptr_null(strstr(out, "$train0 <<")); /* no block that no panel uses */

    /* a run that a newer shoal continued: the records without wall_time are left out of
     * the wall-clock panel (gnuplot's time axis takes no NaN); the panel after it is
     * one of numbers again */
    in_tmp(a, sizeof a, "mixed");
    mkdir(a, 0700);
    in_tmp(b, sizeof b, "mixed/metrics.jsonl");
    {
        const char *text =
            "{\"step\":10,\"ppl\":5,\"time_s\":1}\n"
            "{\"step\":20,\"ppl\":4,\"time_s\":2,\"wall_time\":\"2026-11-27T10:15:20Z\"}\n";
        test_write_file(b, text, strlen(text));
    }
    ck_assert_msg(plot(NULL, (const char *const[]){a, "--x", "wall,time", "--script", NULL}) == 0,
                  "%s", err);
    ck_assert_ptr_nonnull(strstr(out, "$wtrain0 << EOD\n1795774520.000 4\nEOD\n"));
    ck_assert_ptr_nonnull(strstr(out, "$train0 << EOD\n10 5 1\n20 4 2\nEOD\n"));
    after(out, "plot $wtrain0 using 1:2",
          "\nset xdata\nset format x\nset xtics autofreq\nset xlabel 'training time (s)'\n"
          "plot $train0 using 3:2");
}
END_TEST

/* --x wrong, or the wall clock of files without it: one line, exit 2 or 1; a bad
 * wall_time names its file and line. */
START_TEST(test_wall_errors)
{
    char a[1100], path[1200], expect[1400];

    write_metrics("old", "", 40);
    in_tmp(a, sizeof a, "old");
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--x", "steps,clock", NULL}), 2);
    ck_assert_str_eq(err, "shoal: plot: --x: 'clock' is not steps, time or wall (see shoal plot "
                          "--help)\n");
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--x", "wall,steps,wall", NULL}), 2);
    ck_assert_str_eq(err, "shoal: plot: --x: wall is given twice (see shoal plot --help)\n");
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--x", "", NULL}), 2);
    ck_assert_str_eq(err, "shoal: plot: --x: '' is not steps, time or wall (see shoal plot "
                          "--help)\n");
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--x", NULL}), 2);
    ck_assert_msg(strstr(err, "option '--x' needs steps, time or wall"), "%s", err);
    /* a file without wall_time: steps and time still work, the wall clock does not */
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--x", "time", "--script", NULL}), 0);
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--x", "steps,wall", "--script", NULL}),
                     1);
    snprintf(expect, sizeof expect,
             "shoal: plot: %s/metrics.jsonl: no wall_time in its records (written by an older "
             "shoal): plot it against steps or time (--x steps,time)\n",
             a);
    ck_assert_str_eq(err, expect);
    /* a wall_time that is no time */
    snprintf(path, sizeof path, "%s/metrics.jsonl", a);
    {
        const char *text =
            "{\"step\":10,\"ppl\":5,\"time_s\":1,\"wall_time\":\"2026-11-27T10:15:10Z\"}\n"
            "{\"step\":20,\"ppl\":4,\"time_s\":2,\"wall_time\":\"2026-13-27T10:15:20Z\"}\n";
        test_write_file(path, text, strlen(text));
    }
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--script", NULL}), 1);
    snprintf(expect, sizeof expect,
             "shoal: plot: %s:2: wall_time \"2026-13-27T10:15:20Z\" is not an ISO 8601 UTC time "
             "(2026-11-27T10:15:07.123Z)\n",
             path);
    ck_assert_str_eq(err, expect);
    /* the same line cut short at the end of the file (a run writing it, or a node that
     * died): left out, the lines before it plotted */
    {
        const char *text =
            "{\"step\":10,\"ppl\":5,\"time_s\":1,\"wall_time\":\"2026-11-27T10:15:10Z\"}\n"
            "{\"step\":20,\"ppl\":4,\"time_s\":2,\"wall_time\":\"2026-1";
        test_write_file(path, text, strlen(text));
    }
    ck_assert_int_eq(plot(NULL, (const char *const[]){a, "--script", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out, "$train0 << EOD\n10 5 1\nEOD\n"));
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
    /* every axis, the wall clock first (the panels after it have numbers again), and not
     * a word from gnuplot (a time axis given points it cannot place, or a number axis
     * left in time mode, floods stderr with warnings) */
    write_metrics_at("three", "", 40, 1795774500.25);
    in_tmp(a, sizeof a, "three");
    ck_assert_msg(plot(NULL, (const char *const[]){a, "-o", png, "--x", "wall,steps,time", NULL}) ==
                      0,
                  "%s", err);
    ck_assert_str_eq(err, "");
    data = test_read_file(png, &len);
    ck_assert(data && len > 1000 && memcmp(data, "\x89PNG", 4) == 0);
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

/* path (a stand-in gnuplot in bin/): the shell script body, made executable. */
static void
stand_in(const char *bin, const char *body)
{
    char path[1200];

    mkdir(bin, 0700);
    snprintf(path, sizeof path, "%s/gnuplot", bin);
    test_write_file(path, body, strlen(body));
    ck_assert_int_eq(chmod(path, 0755), 0);
}

/* The PNG replaces -o only when gnuplot exited 0 and wrote something: a failing or
 * silent gnuplot, an -o that is the metrics file or a directory leave everything as it
 * was, no temp file either. */
START_TEST(test_output_kept)
{
    static const char *const fails[] = {"#!/bin/sh\nread -r l; printf partial; exit 1\n",
                                        "#!/bin/sh\nwhile read -r l; do :; done\n"};
    char a[1100], png[1100], bin[1100], metrics[1200], *data;
    size_t len;

    write_metrics("kept", "", 40);
    in_tmp(a, sizeof a, "kept");
    in_tmp(png, sizeof png, "kept/old.png");
    in_tmp(bin, sizeof bin, "bin");
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", a);
    stand_in(bin, "#!/bin/sh\nwhile IFS= read -r l; do printf '%s\\n' \"$l\"; done\n");
    ck_assert_msg(plot(bin, (const char *const[]){a, "-o", png, NULL}) == 0, "%s", err);
    data = test_read_file(png, &len); /* the script itself, from the stand-in's stdout */
    ck_assert(data && strstr(data, "set multiplot") && !strstr(data, "set output '"));
    free(data);
    test_write_file(png, "old", 3);
    for (int i = 0; i < 2; i++) {
        stand_in(bin, fails[i]);
        ck_assert_int_eq(plot(bin, (const char *const[]){a, "-o", png, NULL}), 1);
        ck_assert_msg(strstr(err, "shoal: plot: gnuplot failed to write ") && strstr(err, png),
                      "%s", err);
        data = test_read_file(png, &len);
        ck_assert(data && strcmp(data, "old") == 0);
        free(data);
    }
    ck_assert_int_eq(plot(bin, (const char *const[]){a, "-o", metrics, NULL}), 1);
    ck_assert_msg(strstr(err, "is the metrics file"), "%s", err);
    ck_assert_int_eq(plot(bin, (const char *const[]){a, "-o", a, NULL}), 1);
    ck_assert_msg(strstr(err, "is a directory, not a regular file") &&
                      strchr(err, '\n') == err + strlen(err) - 1,
                  "%s", err);
    /* the run's directory holds its metrics, the old PNG and nothing else */
    snprintf(bin, sizeof bin, "test \"$(ls '%s' | tr '\\n' ' ')\" = 'metrics.jsonl old.png '", a);
    ck_assert_int_eq(system(bin), 0);
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
    tcase_add_test(c, test_script_wall);
    tcase_add_test(c, test_png);
    suite_add_tcase(s, c);
    c = tcase_create("limits");
    tcase_add_test(c, test_no_gnuplot);
    tcase_add_test(c, test_output_kept);
    tcase_add_test(c, test_not_a_run);
    tcase_add_test(c, test_wall_errors);
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
