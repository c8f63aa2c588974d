/* Errors found after the configuration has loaded keep their context: shoal itself is
 * run on tiny corpora in a private folder, and each message of issue 20's item 6 is
 * checked as a user sees it (one line, the key, where it was set, no C function
 * names): a missing and an unreadable corpus, the default vocabulary capped on small
 * word and character corpora, an explicit one too large, an allocation that fails,
 * model.output.samples; relative data paths read beside the configuration file; the
 * width of --help-config. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-run-errors-XXXXXX";
static char shoal[1024];

enum { CAP = 16384 };
static char out[CAP], err[CAP];

/* 40 distinct words in 400 lines; a few lines of characters. */
static void
write_corpora(const char *dir)
{
    char path[1200];
    FILE *f;

    snprintf(path, sizeof path, "%s/train.txt", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    for (int l = 0; l < 400; l++) {
        for (int w = 0; w < 12; w++)
            fprintf(f, "%sw%d", w ? " " : "", (l * 7 + w * 13) % 40);
        fputc('\n', f);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/valid.txt", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    for (int l = 0; l < 40; l++)
        fprintf(f, "w%d w%d w%d w%d\n", l % 40, (l * 3) % 40, (l * 5) % 40, (l * 11) % 40);
    fclose(f);
    snprintf(path, sizeof path, "%s/chars.txt", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    for (int l = 0; l < 300; l++)
        fputs("to be or not to be, that is the question\n", f);
    fclose(f);
}

/* A case folder <tmp_root>/<name> with the corpora and t.yaml: a tiny model, 3 steps,
 * the data keys as `data` says (a YAML mapping's inside). */
static void
setup_case(char *dir, size_t cap, const char *name, const char *data)
{
    char path[1200];
    FILE *f;

    snprintf(dir, cap, "%s/%s", tmp_root, name);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    write_corpora(dir);
    snprintf(path, sizeof path, "%s/t.yaml", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f,
            "run: {name: t, dir: %s/run, log_every: 1}\n"
            "data: {%s, cache_dir: %s/cache}\n"
            "model: {embedding: 8, layers: [{lstm: 8}]}\n"
            "train: {batch: 2, bptt: 4, max_steps: 3}\n",
            dir, data, dir);
    fclose(f);
}

/* Runs `cd dir && shoal ARGS` (args: shell words); the exit status, out and err. */
static int
run_in(const char *dir, const char *args)
{
    char script[4096];

    snprintf(script, sizeof script, "cd '%s' && exec '%s' %s", dir, shoal, args);
    return test_tool_run("/bin/sh", out, sizeof out, err, sizeof err, NULL,
                         (const char *const[]){"-c", script, NULL});
}

/* stderr ends in the line "shoal: ..." with every needle in it, and no C name. */
static void
assert_error_line(const char *const *needles)
{
    size_t len = strlen(err);

    ck_assert_msg(strstr(err, "shoal: ") != NULL, "no error line in: %s", err);
    ck_assert_msg(len > 0 && err[len - 1] == '\n', "stderr does not end a line: %s", err);
    for (int i = 0; needles[i]; i++)
        ck_assert_msg(strstr(err, needles[i]) != NULL, "'%s' not in: %s", needles[i], err);
    ck_assert_msg(strstr(err, "sl_") == NULL, "a C name in: %s", err);
}

static int
count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

START_TEST(test_missing_corpus)
{
    char dir[1100];

    setup_case(dir, sizeof dir, "missing", "train: nowhere/train.txt, valid: valid.txt");
    ck_assert_int_eq(run_in(dir, "train t.yaml --quiet"), 1);
    /* the key, the file:line:column that set it, the path, the reason */
    assert_error_line((const char *const[]){"t.yaml:2:15: data.train: ", "nowhere/train.txt",
                                            "No such file or directory", NULL});
    ck_assert_int_eq(count_lines(err), 1);
}
END_TEST

START_TEST(test_unreadable_corpus)
{
    char dir[1100], sub[1200];

    setup_case(dir, sizeof dir, "unreadable", "train: train.txt, valid: adir");
    snprintf(sub, sizeof sub, "%s/adir", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    ck_assert_int_eq(run_in(dir, "train t.yaml --quiet"), 1);
    assert_error_line(
        (const char *const[]){"t.yaml:2:33: data.valid: ", "adir", "Is a directory", NULL});
    /* from --set, the place is the --set */
    ck_assert_int_eq(run_in(dir, "train t.yaml --quiet --set data.valid= --set data.test=adir"), 1);
    assert_error_line((const char *const[]){"--set data.test:1:11: data.test: ", "adir", NULL});
}
END_TEST

START_TEST(test_default_vocab_capped_words)
{
    char dir[1100];

    setup_case(dir, sizeof dir, "vocab-words", "train: train.txt, valid: valid.txt");
    ck_assert_msg(run_in(dir, "train t.yaml --quiet") == 0, "%s", err);
    ck_assert_msg(strstr(err, "info: ") && strstr(err, "has 40 distinct words, fewer than the "
                                                       "default data.vocab_size 10000"),
                  "%s", err);
    ck_assert_msg(strstr(err, "vocabulary 42"), "%s", err); /* 40 + <unk> + <eos> */
}
END_TEST

START_TEST(test_default_vocab_capped_chars)
{
    char dir[1100];

    setup_case(dir, sizeof dir, "vocab-chars", "train: chars.txt, level: char, valid_fraction: 0.1");
    ck_assert_msg(run_in(dir, "train t.yaml --quiet") == 0, "%s", err);
    ck_assert_msg(strstr(err, "distinct characters, fewer than the default data.vocab_size"), "%s",
                  err);
}
END_TEST

START_TEST(test_explicit_vocab_too_large)
{
    char dir[1100];

    setup_case(dir, sizeof dir, "vocab-explicit",
               "train: train.txt, valid: valid.txt, vocab_size: 100");
    ck_assert_int_eq(run_in(dir, "train t.yaml --quiet"), 1);
    assert_error_line((const char *const[]){"t.yaml:2:56: data.vocab_size 100 is larger than the "
                                            "40 distinct words",
                                            "set at most 40", NULL});
    ck_assert_int_eq(count_lines(err), 1);
}
END_TEST

/* An address space of 1 GiB and a model of 2 GiB of parameters: the bytes, in human
 * units, and the keys that size them. Not under AddressSanitizer, whose shadow memory
 * alone needs far more address space than that: shoal could not start. */
#ifndef __SANITIZE_ADDRESS__
START_TEST(test_allocation_failure)
{
    char dir[1100], args[512];

    setup_case(dir, sizeof dir, "alloc", "train: train.txt, valid: valid.txt");
    snprintf(args, sizeof args,
             "train t.yaml --quiet --set 'model.layers=[{lstm: 8000}]' --set model.embedding=8000");
    {
        char script[4096];
        snprintf(script, sizeof script, "cd '%s' && ulimit -v 1048576 && exec '%s' %s", dir,
                 shoal, args);
        ck_assert_int_eq(test_tool_run("/bin/sh", out, sizeof out, err, sizeof err, NULL,
                                       (const char *const[]){"-c", script, NULL}),
                         1);
    }
    assert_error_line((const char *const[]){"cannot allocate 1.91 GiB", "model.embedding",
                                            "model.layers", NULL});
}
END_TEST
#endif

START_TEST(test_samples_key_name)
{
    char dir[1100];

    setup_case(dir, sizeof dir, "samples", "train: train.txt, valid: valid.txt");
    ck_assert_int_eq(run_in(dir, "train t.yaml --quiet --set model.output.type=sampled "
                                 "--set model.output.samples=500"),
                     1);
    assert_error_line((const char *const[]){"model.output.samples 500 must be in [1, 42)", NULL});
}
END_TEST

/* Relative data paths: beside the configuration file, from any directory; a path that
 * only exists from the working directory still works (the old rule); --set values are
 * relative to the working directory. */
START_TEST(test_relative_paths)
{
    char dir[1100], other[1200], args[2600];

    setup_case(dir, sizeof dir, "paths", "train: train.txt, valid: valid.txt");
    snprintf(other, sizeof other, "%s/elsewhere", tmp_root);
    ck_assert_int_eq(mkdir(other, 0700), 0);
    snprintf(args, sizeof args, "train ../paths/t.yaml --quiet --no-resume");
    ck_assert_msg(run_in(other, args) == 0, "%s", err);
    ck_assert_msg(strstr(err, "/paths/train.txt: "), "%s", err);
    /* from the case folder's parent, paths written for it (old rule) still work */
    snprintf(args, sizeof args,
             "train paths/t.yaml --quiet --no-resume --set data.train=paths/train.txt "
             "--set data.valid=paths/valid.txt");
    ck_assert_msg(run_in(tmp_root, args) == 0, "%s", err);
}
END_TEST

START_TEST(test_help_config_width)
{
    const char *p, *line;

    ck_assert_int_eq(run_in(tmp_root, "--help-config"), 0);
    for (line = p = out; *p; p++)
        if (*p == '\n') {
            ck_assert_msg(p - line <= 100, "a line of %d columns: %.*s", (int)(p - line),
                          (int)(p - line), line);
            line = p + 1;
        }
    ck_assert_msg(strstr(out, "\nsync.algorithm (none|allreduce|ma|bmuf|local-ma|local-bmuf|"
                              "gossip-ma|gossip-bmuf; default none)\n"),
                  "%s", out);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("run_errors");
    TCase *c = tcase_create("core");

    tcase_set_timeout(c, 120);
    tcase_add_test(c, test_missing_corpus);
    tcase_add_test(c, test_unreadable_corpus);
    tcase_add_test(c, test_default_vocab_capped_words);
    tcase_add_test(c, test_default_vocab_capped_chars);
    tcase_add_test(c, test_explicit_vocab_too_large);
    tcase_add_test(c, test_samples_key_name);
    tcase_add_test(c, test_relative_paths);
    tcase_add_test(c, test_help_config_width);
    suite_add_tcase(s, c);
    c = tcase_create("limits");
    tcase_set_timeout(c, 120);
#ifndef __SANITIZE_ADDRESS__
    tcase_add_test(c, test_allocation_failure);
#endif
    suite_add_tcase(s, c);
    return s;
}

int
main(void)
{
    if (!test_shoal_find(shoal, sizeof shoal))
        return 77;
    return test_main_in_tmp(suite(), tmp_root, "check_run_errors");
}
