/* Unit tests of src/node: a training run and its run directory's files (metrics,
 * summary, config), a failed run that keeps them, bf16 refused on the cpu, the progress
 * line, metrics trimmed on resume, JSON strings, the shoal command line (options,
 * errors, eval, SIGINT), the GPU a node chooses, and sync staged through host memory.
 * The checkpoint file is tested in check_node_checkpoint.c, exact resume in
 * check_node_resume.c. Trains tiny models (E 16, one LSTM layer of 16) on a
 * 20000-token slice of Brown. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_checkpoint.h"
#include "node/sl_metrics.h"
#include "node/sl_progress.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-node-XXXXXX";
static char data_dir[1024];

/* ---------------------------------------------------------------- helpers */

/* ---------------------------------------------------------------- helpers */

static void
path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_root, name);
}

/* ------------------------------------------------------ run directory files */

/* A few hundred steps lower the training loss clearly; the metrics and summary say so. */
START_TEST(test_loss_falls_and_files)
{
    sl_config_t cfg;
    sl_train_result_t r;
    char path[1024], *metrics, *summary, *line, *last = NULL;
    double first_loss, last_loss;
    int step_lines = 0, eval_lines = 0;

    test_tiny_config(&cfg, tmp_root, data_dir, "falls", "train.batch=4", "train.max_steps=300",
                     "model.dropout=0", "model.output.type=full", "data.test=''", NULL);
    test_train_ok(&cfg, 1, &r);
    ck_assert_int_eq(r.steps, 300);
    ck_assert_int_eq(r.has_valid, 1);
    ck_assert_int_eq(r.has_test, 0);
    ck_assert(r.valid_loss < log(502.0) - 1.0); /* far better than uniform */

    snprintf(path, sizeof path, "%s/falls/metrics.jsonl", tmp_root);
    metrics = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(metrics);
    first_loss = test_json_num(metrics, "loss");
    for (line = strtok(metrics, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"event\":\"eval\"")) {
            eval_lines++;
            ck_assert_ptr_nonnull(strstr(line, "\"split\":\"valid\""));
        } else {
            step_lines++;
            last = line;
        }
    }
    ck_assert_int_eq(step_lines, 30); /* every 10 steps */
    ck_assert_int_eq(eval_lines, 1);  /* the final valid; the run ends before epoch 1 does */
    ck_assert_int_eq((long)test_json_num(last, "step"), 300);
    last_loss = test_json_num(last, "loss");
    ck_assert_msg(last_loss < first_loss - 1.0, "loss %g -> %g", first_loss, last_loss);
    ck_assert_double_eq_tol(test_json_num(last, "ppl"), exp(last_loss), 1e-3 * exp(last_loss));
    free(metrics);

    snprintf(path, sizeof path, "%s/falls/summary.json", tmp_root);
    summary = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(summary);
    ck_assert_int_eq((long)test_json_num(summary, "steps"), 300);
    ck_assert_int_eq((long)test_json_num(summary, "train_tokens"), 300 * 4 * 8);
    ck_assert_double_eq_tol(test_json_num(summary, "valid_loss"), r.valid_loss, 1e-4);
    ck_assert(isnan(test_json_num(summary, "test_ppl")));
    ck_assert_double_eq_tol(test_json_num(summary, "final_train_loss"), last_loss, 1e-4);
    ck_assert(test_json_num(summary, "peak_rss_kb") > 0);
    ck_assert_int_eq((long)test_json_num(summary, "params"), (long)r.nparams);
    ck_assert_ptr_nonnull(strstr(summary, "\"level\": \"word\""));
    free(summary);

    snprintf(path, sizeof path, "%s/falls/config.yaml", tmp_root);
    {
        sl_config_t back;
        sl_config_init(&back);
        ck_assert_msg(sl_config_load_file(&back, path) == SL_OK, "%s", sl_err_msg());
        ck_assert_int_eq(back.train.batch, 4);
        ck_assert_int_eq(back.train.max_steps, 300);
        sl_config_fini(&back);
    }
    sl_config_fini(&cfg);
}
END_TEST

/* A run whose corpus is missing fails with the corpus error and leaves the existing
 * checkpoint and metrics byte for byte; so does a run that meets a corrupt checkpoint. */
START_TEST(test_failed_run_keeps_files)
{
    sl_config_t ok, missing;
    sl_train_result_t r;
    char ckpt[1024], metrics[1024], set[1200], *c0, *m0, *c1, *m1;
    size_t cl0, ml0, cl1, ml1;
    sl_status_t rc;

    test_tiny_config(&ok, tmp_root, data_dir, "keep", "train.max_steps=5", NULL);
    test_train_ok(&ok, 1, &r);
    snprintf(ckpt, sizeof ckpt, "%s/keep/checkpoint.bin", tmp_root);
    snprintf(metrics, sizeof metrics, "%s/keep/metrics.jsonl", tmp_root);
    c0 = test_read_file(ckpt, &cl0);
    m0 = test_read_file(metrics, &ml0);
    ck_assert_ptr_nonnull(c0);
    ck_assert_ptr_nonnull(m0);

    snprintf(set, sizeof set, "data.train=%s/no-such-corpus.txt", tmp_root);
    test_tiny_config(&missing, tmp_root, data_dir, "keep", "train.max_steps=10", set, NULL);
    rc = test_train(&missing, 1, &r);
    ck_assert_int_eq(rc, SL_ERR_IO);
    snprintf(set, sizeof set,
             "--set data.train:1:12: data.train: %s/no-such-corpus.txt: No such file or directory",
             tmp_root);
    ck_assert_str_eq(sl_err_msg(), set);
    c1 = test_read_file(ckpt, &cl1);
    m1 = test_read_file(metrics, &ml1);
    ck_assert(cl0 == cl1 && memcmp(c0, c1, cl0) == 0);
    ck_assert(ml0 == ml1 && memcmp(m0, m1, ml0) == 0);
    free(c1);
    free(m1);

    /* a corrupt checkpoint: refused with its one line, kept as it is */
    c0[SL_CKPT_HEADER_BYTES + 5] ^= 1;
    test_write_file(ckpt, c0, cl0);
    sl_config_fini(&ok);
    test_tiny_config(&ok, tmp_root, data_dir, "keep", "train.max_steps=10", NULL);
    ck_assert_int_eq(test_train(&ok, 1, &r), SL_ERR_FORMAT);
    snprintf(set, sizeof set,
             "%s: checksum mismatch (file corrupt) (--no-resume starts the run over, setting "
             "its files aside)",
             ckpt);
    ck_assert_str_eq(sl_err_msg(), set);
    c1 = test_read_file(ckpt, &cl1);
    ck_assert(cl0 == cl1 && memcmp(c0, c1, cl0) == 0);
    free(c1);
    /* --no-resume starts over and replaces it */
    test_train_ok(&ok, 0, &r);
    ck_assert_int_eq(r.steps, 10);
    ck_assert_int_eq(test_ckpt_i64(ckpt, 144), 10);
    free(c0);
    free(m0);
    sl_config_fini(&ok);
    sl_config_fini(&missing);
}
END_TEST

START_TEST(test_bf16_on_cpu_refused)
{
    sl_config_t cfg;
    sl_train_result_t r;

    test_tiny_config(&cfg, tmp_root, data_dir, "bf16", "precision=bf16", NULL);
    ck_assert_int_eq(test_train(&cfg, 1, &r), SL_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(sl_err_msg(), "precision bf16 is not supported") &&
                      strstr(sl_err_msg(), "device: cuda"),
                  "%s", sl_err_msg());
    sl_config_fini(&cfg);
}
END_TEST

/* ------------------------------------------------------- progress, metrics */

START_TEST(test_progress_format)
{
    sl_progress_line_t l = {1200, 29850, 1, 4.0201, 3790.2, 5.6124, 0, 20, 7500, 0};
    char buf[256];

    ck_assert_str_eq(sl_progress_format(&l, buf, sizeof buf),
                     "step 1200/29850 | ep 1 4.0% | 3790 tok/s | loss 5.612 | ppl 273.8 | "
                     "lr 20 | ETA 2h05m");
    l.char_level = 1;
    l.loss = 1.0; /* 1 / ln 2 bits */
    l.lr = 0.002;
    l.eta_s = -1;
    ck_assert_str_eq(sl_progress_format(&l, buf, sizeof buf),
                     "step 1200/29850 | ep 1 4.0% | 3790 tok/s | loss 1.000 | bpc 1.443 | "
                     "lr 0.002 | ETA ?");
    l.sync_pct = 12.4; /* shown only when there is a sync algorithm */
    ck_assert_str_eq(sl_progress_format(&l, buf, sizeof buf),
                     "step 1200/29850 | ep 1 4.0% | 3790 tok/s | loss 1.000 | bpc 1.443 | "
                     "lr 0.002 | sync 12% | ETA ?");
}
END_TEST

/* On resume, lines about steps after the checkpoint and a torn last line go. */
START_TEST(test_metrics_trim_on_resume)
{
    char path[1024], *got;
    const char *before = "{\"step\":10,\"loss\":5}\n"
                         "{\"event\":\"eval\",\"split\":\"valid\",\"step\":10,\"loss\":5}\n"
                         "{\"step\":20,\"loss\":4}\n"
                         "{\"step\":30,\"loss\":3}\n"
                         "{\"step\":40,\"lo";
    sl_metrics_t m;

    path_in(path, sizeof path, "trim.jsonl");
    test_write_file(path, before, strlen(before));
    ck_assert_int_eq(sl_metrics_open(&m, path, 20), SL_OK);
    ck_assert_int_eq(sl_metrics_eval(&m, "test", 20, log(2.0)), SL_OK);
    sl_metrics_close(&m);
    got = test_read_file(path, NULL);
    /* the new line ends with its wall-clock time, "2026-11-27T10:15:07.123Z" */
    ck_assert_int_eq(strlen(got), 207);
    ck_assert_str_eq(got + 203, "Z\"}\n");
    got[180] = '\0';
    ck_assert_str_eq(got, "{\"step\":10,\"loss\":5}\n"
                          "{\"event\":\"eval\",\"split\":\"valid\",\"step\":10,\"loss\":5}\n"
                          "{\"step\":20,\"loss\":4}\n"
                          "{\"event\":\"eval\",\"split\":\"test\",\"step\":20,\"loss\":0.693147,"
                          "\"ppl\":2,\"bpc\":1,\"wall_time\":\"");
    free(got);
    /* a fresh run (keep through step 0) starts empty */
    ck_assert_int_eq(sl_metrics_open(&m, path, 0), SL_OK);
    sl_metrics_close(&m);
    got = test_read_file(path, NULL);
    ck_assert_str_eq(got, "");
    free(got);
}
END_TEST

START_TEST(test_json_string_escapes)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    sl_json_string(f, "a\"b\\c\n\x01");
    fputc(' ', f);
    sl_json_number(f, NAN);
    fputc(' ', f);
    sl_json_number(f, 0.25);
    fclose(f);
    ck_assert_str_eq(buf, "\"a\\\"b\\\\c\\n\\u0001\" null 0.25");
    free(buf);
}
END_TEST

/* -------------------------------------------------------------- command line */

static char shoal_bin[1024];

/* Runs shoal with args (NULL-terminated); stdout and stderr into *out, *err (malloc'd).
 * Returns the exit status, or 128 + signal. */
static int
run_shoal(char **out, char **err, const char *const *args)
{
    char out_path[1024], err_path[1024];
    const char *argv[32];
    int n = 0, status;
    pid_t pid;

    path_in(out_path, sizeof out_path, "cli.out");
    path_in(err_path, sizeof err_path, "cli.err");
    argv[n++] = shoal_bin;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr))
            _exit(99);
        setenv("SHOAL_LOG", "warn", 1);
        execv(shoal_bin, (char *const *)argv);
        _exit(98);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    *out = test_read_file(out_path, NULL);
    *err = test_read_file(err_path, NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int
count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void
write_tiny_yaml(const char *path, const char *run, const char *extra)
{
    char yaml[4096];

    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 32, bptt: 8, max_steps: 20, optimizer: {type: adam, lr: 0.01}}\n"
             "%s",
             run, tmp_root, run, data_dir, data_dir, tmp_root, extra);
    test_write_file(path, yaml, strlen(yaml));
}

START_TEST(test_cli)
{
    char *out, *err, conf[1024], bad[1024], model[1024], expect[2048], summary[1024];
    double valid_loss, printed_loss;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"--help", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out, "train CONF.yaml"));
    ck_assert_ptr_nonnull(strstr(out, "Exit status"));
    ck_assert_ptr_nonnull(strstr(out, "SHOAL_LOG"));
    free(out), free(err);
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"train", "--help", NULL}), 0);
    ck_assert(strncmp(out, "Usage: shoal train CONF.yaml", 28) == 0);
    free(out), free(err);
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"--version", NULL}), 0);
    ck_assert_msg(strncmp(out, "shoal 0.", 8) == 0 && count_lines(out) == 6, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "\nCUDA module: ")); /* tests/unit/check_cuda_module.sh */
    ck_assert_ptr_nonnull(strstr(out, "\ncommit: "));      /* git describe, or unknown */
    ck_assert_ptr_nonnull(strstr(out, "\nBLAS: "));
    ck_assert_ptr_nonnull(strstr(out, "\ncuDNN: "));
    ck_assert_ptr_nonnull(strstr(out, "\ncpu loops: "));
    free(out), free(err);
    setenv("SHOAL_CPU_ISA", "avx9", 1); /* inherited by the child */
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"--version", NULL}), 2);
    unsetenv("SHOAL_CPU_ISA");
    ck_assert_str_eq(out, "");
    ck_assert(strncmp(err, "shoal: SHOAL_CPU_ISA=avx9: unknown (built here: ", 48) == 0);
    ck_assert_int_eq(count_lines(err), 1);
    free(out), free(err);
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"--help-config", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out, "train.max_steps"));
    free(out), free(err);

    path_in(conf, sizeof conf, "cli.yaml");
    write_tiny_yaml(conf, "cli", "");
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"train", conf, "--foo", NULL}), 2);
    ck_assert_str_eq(err, "shoal: train: unknown option '--foo' (see shoal train --help)\n");
    ck_assert_str_eq(out, "");
    free(out), free(err);
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"frob", NULL}), 2);
    ck_assert_str_eq(err, "shoal: unknown command 'frob' (see shoal --help)\n");
    free(out), free(err);

    /* an unknown key: exit 2, one line naming file:line:col */
    path_in(bad, sizeof bad, "bad.yaml");
    write_tiny_yaml(bad, "bad", "train_extra: 1\n");
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"train", bad, NULL}), 2);
    snprintf(expect, sizeof expect, "shoal: %s:6:1: ", bad);
    ck_assert_msg(strncmp(err, expect, strlen(expect)) == 0, "stderr: %s", err);
    ck_assert_int_eq(count_lines(err), 1);
    free(out), free(err);
    ck_assert_int_eq(
        run_shoal(&out, &err, (const char *[]){"train", conf, "--set", "train.batch=x", NULL}), 2);
    ck_assert(strncmp(err, "shoal: --set train.batch:1:", 27) == 0 && count_lines(err) == 1);
    free(out), free(err);

    /* a real run, then its model evaluated */
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"train", conf, "--quiet", NULL}), 0);
    snprintf(expect, sizeof expect, "; model %s/cli/model.bin\n", tmp_root);
    ck_assert_msg(strncmp(out, "shoal: done: ", 13) == 0, "stdout: %s", out);
    ck_assert_ptr_nonnull(strstr(out, ", 20 steps in "));
    ck_assert_ptr_nonnull(strstr(out, "; valid ppl "));
    ck_assert_str_eq(out + strlen(out) - strlen(expect), expect);
    ck_assert_str_eq(err, "");
    free(out), free(err);
    snprintf(summary, sizeof summary, "%s/cli/summary.json", tmp_root);
    out = test_read_file(summary, NULL);
    ck_assert_ptr_nonnull(out);
    valid_loss = test_json_num(out, "valid_loss");
    free(out);
    snprintf(model, sizeof model, "%s/cli/model.bin", tmp_root);
    ck_assert_int_eq(
        run_shoal(&out, &err, (const char *[]){"eval", conf, "--checkpoint", model, NULL}), 0);
    ck_assert_msg(strncmp(out, "valid ppl ", 10) == 0, "stdout: %s", out);
    printed_loss = strtod(strstr(out, "(loss ") + 6, NULL);
    ck_assert_double_eq_tol(printed_loss, valid_loss, 1e-4);
    ck_assert_ptr_nonnull(strstr(out, ", 60000 tokens)\n"));
    free(out), free(err);
    /* without --checkpoint: the run's model.bin, the same figures */
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"eval", conf, NULL}), 0);
    ck_assert_double_eq_tol(strtod(strstr(out, "(loss ") + 6, NULL), printed_loss, 1e-12);
    free(out), free(err);
    snprintf(summary, sizeof summary, "run.dir=%s/none", tmp_root);
    ck_assert_int_eq(run_shoal(&out, &err, (const char *[]){"eval", conf, "--set", summary, NULL}),
                     1);
    snprintf(expect, sizeof expect,
             "shoal: %s/none/model.bin: no such file: the run has not finished (give "
             "--checkpoint FILE, e.g. %s/none/checkpoint.bin)\n",
             tmp_root, tmp_root);
    ck_assert_str_eq(err, expect);
    ck_assert_str_eq(out, "");
    free(out), free(err);
    ck_assert_int_eq(
        run_shoal(&out, &err,
                  (const char *[]){"eval", conf, "--checkpoint", model, "--split", "test", NULL}),
        2);
    ck_assert_msg(strstr(err, "no test split") && count_lines(err) == 1, "stderr: %s", err);
    free(out), free(err);

    /* a corrupt model: exit 1, one line */
    {
        size_t len;
        char *d = test_read_file(model, &len);
        d[len - 20] ^= 0x40;
        test_write_file(model, d, len);
        free(d);
    }
    ck_assert_int_eq(
        run_shoal(&out, &err, (const char *[]){"eval", conf, "--checkpoint", model, NULL}), 1);
    snprintf(expect, sizeof expect, "shoal: %s: checksum mismatch (file corrupt)\n", model);
    ck_assert_str_eq(err, expect);
    ck_assert_str_eq(out, "");
    free(out), free(err);
}
END_TEST

/* Whether process pid ignores signal sig (its SigIgn mask in /proc/PID/status). */
static int
ignores_signal(pid_t pid, int sig)
{
    char path[64], line[256];
    unsigned long long mask = 0;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "SigIgn: %llx", &mask) == 1)
            break;
    fclose(f);
    return (int)((mask >> (sig - 1)) & 1);
}

/* Signal sig to a training shoal: the run stops after the step in progress with a
 * checkpoint, says so in one line and exits 130. With hup_ignored, SIGHUP is ignored
 * when shoal starts (nohup): it stays ignored while shoal trains, and a SIGINT stops
 * it. */
static void
interrupt_train(const char *run, int sig, int hup_ignored)
{
    char conf[1024], out_path[1024], err_path[1024], metrics[1024], name[256], *err, *out;
    int status;
    pid_t pid;

    snprintf(name, sizeof name, "%s.yaml", run);
    path_in(conf, sizeof conf, name);
    write_tiny_yaml(conf, run, "");
    snprintf(metrics, sizeof metrics, "%s/%s/metrics.jsonl", tmp_root, run);
    path_in(out_path, sizeof out_path, "sig.out");
    path_in(err_path, sizeof err_path, "sig.err");
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr))
            _exit(99);
        setenv("SHOAL_LOG", "warn", 1);
        signal(SIGHUP, hup_ignored ? SIG_IGN : SIG_DFL);
        execl(shoal_bin, shoal_bin, "train", conf, "--quiet", "--set", "train.max_steps=0", "--set",
              "train.epochs=1000", (char *)NULL);
        _exit(98);
    }
    /* wait until it trains (a metrics line exists), then interrupt */
    test_wait_file(metrics, 1, pid, 90);
    ck_assert_int_eq(ignores_signal(pid, SIGHUP), hup_ignored);
    kill(pid, sig);
    if (hup_ignored)
        kill(pid, SIGINT);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "%s: killed by signal %d", run, WTERMSIG(status));
    ck_assert_int_eq(WEXITSTATUS(status), 130);
    err = test_read_file(err_path, NULL);
    out = test_read_file(out_path, NULL);
    ck_assert_msg(strncmp(err, "shoal: interrupted at step ", 27) == 0, "stderr: %s", err);
    ck_assert_ptr_nonnull(strstr(err, "/checkpoint.bin; run the same command to resume\n"));
    ck_assert_int_eq(count_lines(err), 1);
    ck_assert_str_eq(out, "");
    {
        long step = strtol(err + 27, NULL, 10), saved;
        char ckpt[1200];
        snprintf(ckpt, sizeof ckpt, "%s/%s/checkpoint.bin", tmp_root, run);
        saved = test_ckpt_i64(ckpt, 144);
        ck_assert_int_eq(saved, step);
        ck_assert_int_gt(step, 0);
    }
    free(err);
    free(out);
}

/* SIGINT, SIGTERM and SIGHUP (a closed terminal) stop with a checkpoint; SIGHUP ignored
 * as nohup ignores it stays ignored. */
START_TEST(test_cli_sigint)
{
    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    interrupt_train("sig", SIGINT, 0);
    interrupt_train("sigterm", SIGTERM, 0);
    interrupt_train("sighup", SIGHUP, 0);
    interrupt_train("nohup", SIGHUP, 1);
}
END_TEST

/* ------------------------------------------------- GPU choice, staged sync */

/* Trains (one step, sync none) as node rank of 2 with device dev and checks the backend
 * name the trainer chose: want is in the error of a build without CUDA (or of a machine
 * without that GPU), or in summary.json's "device" when it trained. */
static void
expect_device(const char *dev, int rank, const char *want)
{
    char set[64], quoted[64], path[2048];
    sl_config_t cfg;
    sl_train_opts_t opts;
    sl_train_result_t r;
    sl_status_t rc;

    snprintf(set, sizeof set, "device=%s", dev);
    test_tiny_config(&cfg, tmp_root, data_dir, "devsel", set, "train.max_steps=1", NULL);
    sl_train_opts_init(&opts);
    opts.rank = rank;
    opts.nranks = 2;
    opts.quiet = 1;
    opts.resume = 0;
    rc = sl_train_run(&cfg, &opts, &r);
    snprintf(quoted, sizeof quoted, "'%s'", want);
    if (rc != SL_OK) {
        ck_assert_msg(strstr(sl_err_msg(), quoted) || strstr(sl_err_msg(), want),
                      "%s as rank %d: want %s, got: %s", dev, rank, want, sl_err_msg());
    } else {
        char *text;
        snprintf(path, sizeof path, "%s/summary.json", r.dir);
        text = test_read_file(path, NULL);
        ck_assert_ptr_nonnull(text);
        snprintf(quoted, sizeof quoted, "\"device\": \"%s\"", want);
        ck_assert_msg(strstr(text, quoted), "%s as rank %d: want %s in %s", dev, rank, want, text);
        free(text);
    }
    sl_config_fini(&cfg);
}

/* device: cuda is the local rank's GPU modulo the visible GPUs, the local rank taken
 * from the launcher that gave the process its rank; cuda:N is N. */
START_TEST(test_device_choice)
{
    static const char *const vars[] = {
        "SLURM_LOCALID",        "SLURM_PROCID",    "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID", "PMI_RANK"};

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
    setenv("SLURM_LOCALID", "3", 1);
    setenv("SLURM_PROCID", "1", 1);
    expect_device("cuda", 1, "cuda:3"); /* srun: SLURM_PROCID is this rank */
    setenv("SLURM_PROCID", "0", 1);
    expect_device("cuda", 1, "cuda:1"); /* shoal run in an allocation: not ours, the rank */
    unsetenv("SLURM_LOCALID");
    unsetenv("SLURM_PROCID");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "6", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    expect_device("cuda", 1, "cuda:2"); /* 6 mod 4 */
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_RANK");
    setenv("MPI_LOCALRANKID", "1", 1);
    setenv("PMI_RANK", "1", 1);
    setenv("CUDA_VISIBLE_DEVICES", "5,6,7", 1);
    expect_device("cuda", 1, "cuda:1");
    setenv("CUDA_VISIBLE_DEVICES", "6", 1); /* one GPU per task */
    expect_device("cuda", 1, "cuda:0");
    expect_device("cuda:7", 1, "cuda:7");
}
END_TEST

/* Sync through the host mirror, the GPU backend's path (forced on cpu with
 * SHOAL_STAGE_SYNC=1), changes nothing: two nodes of gossip-bmuf (dense components
 * every 2 steps, the row shards every 4, so some steps stage part of the model) and of
 * allreduce (gradients staged every step) end with the same node and run models, bit
 * for bit, as without it. */
START_TEST(test_staged_sync_same_models)
{
    static const char *const syncs[2] = {
        "{algorithm: gossip-bmuf, period: 2, embedding_period: 4, embedding_shards: 2}",
        "{algorithm: allreduce}"};

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    for (int a = 0; a < 2; a++) {
        float *models[2][2]; /* the header holds the training time: parameters only */
        size_t lens[2][2];

        for (int staged = 0; staged < 2; staged++) {
            char conf[1024], run[64], yaml[2048], path[2048], *log;
            int rc;

            snprintf(run, sizeof run, "staged-%d-%d", a, staged);
            path_in(conf, sizeof conf, "staged.yaml");
            snprintf(yaml, sizeof yaml,
                     "run: {name: %s, dir: %s/%s, log_every: 4, checkpoint_every: 0}\n"
                     "data: {train: %s/brown/train.txt, vocab_size: 500, max_tokens: 20000,\n"
                     "       cache_dir: %s/cache}\n"
                     "model: {embedding: 16, layers: [{lstm: 16}]}\n"
                     "train: {batch: 8, bptt: 8, max_steps: 12, eval_every_epoch: false,\n"
                     "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
                     "cluster: {nodes: 2, rendezvous_timeout_ms: 20000}\n"
                     "sync: %s\n",
                     run, tmp_root, run, data_dir, tmp_root, syncs[a]);
            test_write_file(conf, yaml, strlen(yaml));
            path_in(path, sizeof path, "staged.log");
            rc = test_shoal_staged(shoal_bin, path, staged ? "1" : "0", &log,
                                   (const char *[]){"run", conf, "--no-resume", NULL});
            ck_assert_msg(rc == 0, "shoal run (%s, staged %d) exited %d:\n%s", syncs[a], staged, rc,
                          log);
            ck_assert_msg(!strstr(log, "through host memory") == !staged,
                          "staged %d, but the log says otherwise:\n%s", staged, log);
            free(log);
            snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
            models[staged][0] = test_model_params(path, &lens[staged][0]);
            snprintf(path, sizeof path, "%s/%s/node-1/model.bin", tmp_root, run);
            models[staged][1] = test_model_params(path, &lens[staged][1]);
        }
        for (int m = 0; m < 2; m++) {
            ck_assert_uint_eq(lens[0][m], lens[1][m]);
            ck_assert_msg(memcmp(models[0][m], models[1][m], lens[0][m] * sizeof(float)) == 0,
                          "%s: the %s model differs when staged", syncs[a], m ? "node 1" : "run");
            free(models[0][m]);
            free(models[1][m]);
        }
    }
}
END_TEST

/* ---------------------------------------------------------------------- main */

static Suite *
node_suite(void)
{
    Suite *s = suite_create("node");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    tcase_add_test(core, test_progress_format);
    tcase_add_test(core, test_loss_falls_and_files);
    tcase_add_test(core, test_cli);
    tcase_add_test(core, test_staged_sync_same_models);
    tcase_add_test(limits, test_device_choice);
    tcase_add_test(limits, test_failed_run_keeps_files);
    tcase_add_test(limits, test_bf16_on_cpu_refused);
    tcase_add_test(limits, test_metrics_trim_on_resume);
    tcase_add_test(limits, test_json_string_escapes);
    tcase_add_test(limits, test_cli_sigint);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    test_data_dir(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(node_suite(), tmp_root, "check_node");
}
