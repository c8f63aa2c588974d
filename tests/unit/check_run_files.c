/* Tests of the run directory a person can trust (src/node/sl_run_files.c and the
 * trainer's use of it): run.keep_checkpoints keeps exactly the newest K checkpoints,
 * each the training state of its step; run.keep_best keeps the model of the best
 * validation (not the last one) with its loss in best.json; a run started over that
 * is interrupted or fails leaves the previous run's model.bin and summary.json in
 * previous/, never in its place; a directory in use by another run is refused; the
 * saved config.yaml has absolute paths and works from another directory. Tiny word models on a
 * slice of Brown. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <limits.h>
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
#include "data/sl_data.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_model_meta.h"
#include "node/sl_checkpoint.h"
#include "node/sl_run_files.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-run-files-XXXXXX";
static char data_dir[PATH_MAX];

/* The tiny model, overfitting a 6000-token slice: 93 batches an epoch, 6 epochs, a
 * checkpoint and a validation at each epoch's end; the best validation is at step 465
 * of 558, not the last. */
static void
small_config(sl_config_t *cfg, const char *run, const char *more, const char *more2)
{
    /* 48 units on 6000 tokens overfit within 6 epochs whichever CPU loops and BLAS
     * kernels run (the trajectory differs between them): the best validation is never
     * the last */
    test_tiny_config(cfg, tmp_root, data_dir, run, "train.epochs=6", "data.max_tokens=6000",
                     "train.batch=8", "model.dropout=0", "train.optimizer.lr=0.05",
                     "model.embedding=48", "model.layers=[{lstm: 48}]", "run.checkpoint_every=0",
                     more ? more : "run.log_every=10", more2 ? more2 : "run.log_every=10", NULL);
}

static int
exists(const char *dir, const char *name)
{
    char path[1200];
    struct stat sb;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

static void
assert_same_params(const char *a, const char *b)
{
    size_t na, nb;
    float *pa = test_model_params(a, &na), *pb = test_model_params(b, &nb);

    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(pa, pb, na * sizeof *pa) == 0, "%s and %s hold other parameters", a, b);
    free(pa);
    free(pb);
}

START_TEST(test_keep_checkpoints)
{
    sl_config_t cfg;
    sl_train_result_t res;
    char dir[1100], kept[1200];
    int n = 0;

    small_config(&cfg, "keep", "run.keep_checkpoints=3", NULL);
    test_train_ok(&cfg, 0, &res);
    snprintf(dir, sizeof dir, "%s", res.dir);
    for (long step = 93; step <= 558; step += 93) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%ld.bin", step);
        ck_assert_msg(exists(dir, name) == (step >= 372), "%s: %s", name,
                      step >= 372 ? "missing" : "not removed");
        n += exists(dir, name);
    }
    ck_assert_int_eq(n, 3);
    /* each is the checkpoint of its step, the newest the end of the run */
    snprintf(kept, sizeof kept, "%s/checkpoint-465.bin", dir);
    ck_assert_int_eq(test_ckpt_i64(kept, 144), 465);
    snprintf(kept, sizeof kept, "%s/checkpoint-558.bin", dir);
    ck_assert_int_eq(test_ckpt_i64(kept, 144), 558);
    assert_same_params(kept, res.model);
    ck_assert(exists(dir, "checkpoint.bin") && exists(dir, "checkpoint.bin.prev"));
    ck_assert(!exists(dir, "best.bin")); /* keep_best is off */
    sl_config_fini(&cfg);
}
END_TEST

/* The valid losses of metrics.jsonl and their steps, in order; returns how many. */
static int
valid_evals(const char *dir, long *step, double *loss, int cap)
{
    char path[1200], *text, *p;
    int n = 0;

    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    text = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    for (p = text; n < cap && (p = strstr(p, "{\"event\":\"eval\",\"split\":\"valid\"")); p++) {
        char *eol = strchr(p, '\n');
        if (eol)
            *eol = '\0';
        step[n] = (long)test_json_num(p, "step");
        loss[n++] = test_json_num(p, "loss");
        if (eol)
            *eol = '\n';
    }
    free(text);
    return n;
}

START_TEST(test_keep_best)
{
    sl_config_t cfg;
    sl_train_result_t res;
    sl_eval_result_t ev;
    char dir[1100], path[1200], *best;
    long step[16], best_step;
    double loss[16], best_loss;
    int n, argmin = 0;

    small_config(&cfg, "best", "run.keep_best=true", "run.keep_checkpoints=10");
    test_train_ok(&cfg, 0, &res);
    snprintf(dir, sizeof dir, "%s", res.dir);
    n = valid_evals(dir, step, loss, 16);
    ck_assert_int_eq(n, 6);
    for (int i = 1; i < n; i++)
        if (loss[i] < loss[argmin])
            argmin = i;
    /* what makes the case worth having: the best is not the last */
    ck_assert_msg(argmin < n - 1, "the last validation is the best: the case tests nothing");

    snprintf(path, sizeof path, "%s/best.json", dir);
    best = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(best);
    best_step = (long)test_json_num(best, "step");
    best_loss = test_json_num(best, "valid_loss");
    ck_assert_int_eq(best_step, step[argmin]);
    ck_assert_double_eq_tol(best_loss, loss[argmin], 1e-5);
    ck_assert(strstr(best, "\"model\": \"best.bin\"") != NULL);
    free(best);

    /* best.bin is the model of that step: its checkpoint's parameters, and evaluated
     * it gives the loss recorded, exactly */
    snprintf(path, sizeof path, "%s/best.bin", dir);
    ck_assert_int_eq(test_ckpt_i64(path, 144), best_step);
    {
        char kept[1200];
        snprintf(kept, sizeof kept, "%s/checkpoint-%ld.bin", dir, best_step);
        assert_same_params(path, kept);
    }
    ck_assert_msg(sl_eval_run(&cfg, path, "valid", &ev) == SL_OK, "%s", sl_err_msg());
    ck_assert_double_eq(ev.loss, best_loss);
    sl_config_fini(&cfg);
}
END_TEST

/* A run stopped at its best step and resumed to its end keeps that best: the worse
 * validations after it do not replace it (they would, were the best forgotten). The
 * best step comes from the same run made whole first (resume continues bit for bit). */
START_TEST(test_keep_best_resumed)
{
    sl_config_t cfg;
    sl_train_result_t res;
    char path[1200], set[64], *best;
    long step[16];
    double loss[16];
    int n, argmin = 0;

    small_config(&cfg, "whole", "run.keep_best=true", NULL);
    test_train_ok(&cfg, 0, &res);
    n = valid_evals(res.dir, step, loss, 16);
    for (int i = 1; i < n; i++)
        if (loss[i] < loss[argmin])
            argmin = i;
    ck_assert_msg(argmin < n - 1, "the last validation is the best: the case tests nothing");
    sl_config_fini(&cfg);

    snprintf(set, sizeof set, "train.max_steps=%ld", step[argmin]);
    small_config(&cfg, "resumed", "run.keep_best=true", set);
    test_train_ok(&cfg, 0, &res);
    sl_config_fini(&cfg);
    small_config(&cfg, "resumed", "run.keep_best=true", NULL);
    test_train_ok(&cfg, 1, &res);
    ck_assert_int_eq(res.steps, step[n - 1]);
    snprintf(path, sizeof path, "%s/best.json", res.dir);
    best = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(best);
    ck_assert_int_eq((long)test_json_num(best, "step"), step[argmin]);
    free(best);
    snprintf(path, sizeof path, "%s/best.bin", res.dir);
    ck_assert_int_eq(test_ckpt_i64(path, 144), step[argmin]);
    sl_config_fini(&cfg);
}
END_TEST

static volatile sig_atomic_t stop_now = 1;

/* A finished run, then one started over (resume off) that is interrupted after its
 * first step, then one started over that fails: neither leaves the first run's
 * model.bin or summary.json in the run directory, and its checkpoint is the new run's
 * alone (the old one is not kept as its previous generation). */
START_TEST(test_start_over)
{
    sl_config_t cfg;
    sl_train_result_t res;
    sl_train_opts_t opts;
    char dir[1100], prev[1200], old_model[1200];
    size_t n;
    float *first;
    sl_status_t rc;

    small_config(&cfg, "over", "train.epochs=1", NULL);
    test_train_ok(&cfg, 0, &res);
    snprintf(dir, sizeof dir, "%s", res.dir);
    first = test_model_params(res.model, &n);
    ck_assert(exists(dir, "model.bin") && exists(dir, "summary.json"));

    sl_train_opts_init(&opts);
    opts.resume = 0;
    opts.quiet = 1;
    opts.interrupt = &stop_now;
    rc = sl_train_run(&cfg, &opts, &res);
    ck_assert_msg(rc == SL_ERR_SHUTDOWN, "%s", sl_err_msg());
    ck_assert_int_eq(res.steps, 1);
    ck_assert_msg(!exists(dir, "model.bin"), "the previous run's model.bin is still there");
    ck_assert_msg(!exists(dir, "summary.json"), "the previous run's summary.json is still there");
    ck_assert(!exists(dir, "checkpoint.bin.prev"));
    ck_assert_int_eq(test_ckpt_i64(res.checkpoint, 144), 1);
    /* set aside, not lost */
    snprintf(prev, sizeof prev, "%s/previous", dir);
    ck_assert(exists(prev, "summary.json") && exists(prev, "checkpoint.bin"));
    snprintf(old_model, sizeof old_model, "%s/model.bin", prev);
    {
        size_t m;
        float *p = test_model_params(old_model, &m);
        ck_assert_uint_eq(m, n);
        ck_assert(memcmp(p, first, n * sizeof *p) == 0);
        free(p);
    }

    /* finished again, then started over with a validation file that is not there */
    test_train_ok(&cfg, 0, &res);
    ck_assert(exists(dir, "model.bin"));
    sl_config_fini(&cfg);
    small_config(&cfg, "over", "train.epochs=1", "data.valid=/nonexistent/valid.txt");
    rc = test_train(&cfg, 0, &res);
    ck_assert_int_ne(rc, SL_OK);
    ck_assert(!exists(dir, "model.bin") && !exists(dir, "summary.json"));
    ck_assert(exists(prev, "model.bin") && exists(prev, "summary.json"));
    free(first);
    sl_config_fini(&cfg);
}
END_TEST

/* A run directory in use: a second run there, resumed or started over, stops with one
 * line naming the holder (this process) and leaves every file as it was; the lock goes
 * with the process that held it, however it ends (a child killed with SIGKILL). */
START_TEST(test_dir_in_use)
{
    sl_config_t cfg;
    sl_train_result_t res;
    char dir[1100], model[1200], want[1400], *before, *after;
    size_t lb, la;
    int fd, fd2, gate[2];
    pid_t pid;

    small_config(&cfg, "busy", "train.epochs=1", NULL);
    test_train_ok(&cfg, 0, &res);
    snprintf(dir, sizeof dir, "%s", res.dir);
    snprintf(model, sizeof model, "%s/model.bin", dir);
    before = test_read_file(model, &lb);
    ck_assert_int_eq(sl_run_lock(dir, &fd), SL_OK);
    ck_assert_int_ge(fd, 0);
    snprintf(want, sizeof want, "%s: in use by another shoal process (pid %ld on ", dir,
             (long)getpid());
    for (int resume = 0; resume < 2; resume++) {
        ck_assert_int_eq(test_train(&cfg, resume, &res), SL_ERR_IO);
        ck_assert_msg(strncmp(sl_err_msg(), want, strlen(want)) == 0, "%s", sl_err_msg());
        ck_assert_ptr_null(strchr(sl_err_msg(), '\n'));
        ck_assert_msg(!exists(dir, "previous"), "a refused start over set files aside");
        after = test_read_file(model, &la);
        ck_assert(la == lb && memcmp(before, after, lb) == 0);
        free(after);
    }
    close(fd);
    ck_assert_int_eq(sl_run_lock(dir, &fd), SL_OK); /* free again once closed */
    close(fd);

    /* held by a child that then dies of SIGKILL */
    ck_assert_int_eq(pipe(gate), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        alarm(60); /* never outlives a test that failed before it killed it */
        _exit(sl_run_lock(dir, &fd2) == SL_OK && write(gate[1], "x", 1) == 1 ? pause() : 1);
    }
    {
        char c;
        ck_assert_int_eq(read(gate[0], &c, 1), 1);
    }
    ck_assert_int_eq(sl_run_lock(dir, &fd), SL_ERR_IO);
    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    ck_assert_int_eq(sl_run_lock(dir, &fd), SL_OK);
    close(fd);
    close(gate[0]);
    close(gate[1]);
    free(before);
    sl_config_fini(&cfg);
}
END_TEST

/* config.yaml written by a run that was given relative paths, loaded from another
 * directory: every path in it is absolute, and it evaluates the run's model to the
 * run's own validation loss. */
START_TEST(test_saved_config_elsewhere)
{
    sl_config_t cfg, saved;
    sl_train_result_t res;
    sl_eval_result_t ev;
    char here[1100], there[1100], link_path[1200], conf[1200], want[1300], model[1200];
    char yaml[2048];

    snprintf(here, sizeof here, "%s/here", tmp_root);
    snprintf(there, sizeof there, "%s/there", tmp_root);
    ck_assert_int_eq(mkdir(here, 0700), 0);
    ck_assert_int_eq(mkdir(there, 0700), 0);
    snprintf(link_path, sizeof link_path, "%s/data", here);
    ck_assert_int_eq(symlink(data_dir, link_path), 0);
    ck_assert_int_eq(chdir(here), 0);
    snprintf(yaml, sizeof yaml,
             "run: {name: rel, dir: ./runs/rel, checkpoint_every: 0}\n"
             "data: {train: data/brown/train.txt, valid: data/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 6000, cache_dir: cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 8, bptt: 8, max_steps: 20, optimizer: {type: adam, lr: 0.05}}\n");
    sl_config_init(&cfg);
    ck_assert_msg(sl_config_load_string(&cfg, yaml, "rel.yaml") == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_config_validate(&cfg) == SL_OK, "%s", sl_err_msg());
    test_train_ok(&cfg, 0, &res);

    ck_assert_int_eq(chdir(there), 0);
    snprintf(conf, sizeof conf, "%s/runs/rel/config.yaml", here);
    snprintf(model, sizeof model, "%s/runs/rel/model.bin", here);
    sl_config_init(&saved);
    ck_assert_msg(sl_config_load_file(&saved, conf) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_config_validate(&saved) == SL_OK, "%s", sl_err_msg());
    snprintf(want, sizeof want, "%s/data/brown/train.txt", here);
    ck_assert_str_eq(saved.data.train, want);
    snprintf(want, sizeof want, "%s/data/brown/valid.txt", here);
    ck_assert_str_eq(saved.data.valid, want);
    ck_assert_str_eq(saved.data.test, "");
    snprintf(want, sizeof want, "%s/cache", here);
    ck_assert_str_eq(saved.data.cache_dir, want);
    snprintf(want, sizeof want, "%s/runs/rel", here);
    ck_assert_str_eq(saved.run.dir, want);
    ck_assert_msg(sl_eval_run(&saved, model, "valid", &ev) == SL_OK, "%s", sl_err_msg());
    ck_assert(res.has_valid);
    ck_assert_double_eq(ev.loss, res.valid_loss);
    sl_config_fini(&saved);
    sl_config_fini(&cfg);
}
END_TEST

/* A model file at dir/name of step steps, offered by rank, averaging models nodes'
 * models, its parameters from seed. */
static void
offered_model(const char *dir, const char *name, long step, int rank, int models, uint64_t seed)
{
    char path[1200];
    sl_config_t cfg;
    sl_backend_t *be;
    sl_lm_t *lm;
    sl_model_meta_t meta;
    sl_vocab_t *v;
    sl_ckpt_ident_t id;
    sl_ckpt_cursor_t cur = {0};

    ck_assert_int_eq(sl_vocab_begin(&v, 50), SL_OK);
    for (int i = 0; i < 50; i++) {
        char word[16];
        int n = i == 0   ? snprintf(word, sizeof word, "<unk>")
                : i == 1 ? snprintf(word, sizeof word, "<eos>")
                         : snprintf(word, sizeof word, "w%d", i);
        ck_assert_int_eq(sl_vocab_append(v, word, (size_t)n), SL_OK);
    }
    ck_assert_int_eq(sl_vocab_end(v, SL_LEVEL_WORD), SL_OK);
    test_tiny_config(&cfg, tmp_root, data_dir, "offered", NULL);
    ck_assert_int_eq(sl_backend_cpu_new(&be, 1), SL_OK);
    ck_assert_int_eq(sl_lm_new(&lm, &cfg, 50, 1, 4, be), SL_OK);
    ck_assert_int_eq(sl_lm_init_params(lm, seed), SL_OK);
    sl_ckpt_ident_init(&id, &cfg, 50, 0x1234, rank, 4);
    sl_model_meta_init(&meta, &cfg, v);
    meta.models_averaged = models;
    id.meta = &meta;
    cur.step = step;
    cur.tokens = (uint64_t)step * (uint64_t)(cfg.train.batch * cfg.train.bptt);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_msg(sl_checkpoint_save(path, &id, &cur, be, lm, NULL, NULL, NULL) == SL_OK, "%s",
                  sl_err_msg());

    sl_lm_destroy(&lm);
    sl_backend_destroy(&be);
    sl_vocab_destroy(&v);
    sl_config_fini(&cfg);
}

/* Offers dir/offer (step, rank, models) as dir/model.bin: whether it took the name, and
 * which model dir/model.bin then holds (its seed among those offered). */
static int
offer(const char *dir, long step, int rank, int models, uint64_t seed)
{
    char file[1200], path[1200];
    sl_run_model_t mine = {step, models, rank}, there = {0, 0, -1};
    int placed;

    offered_model(dir, "offer.bin", step, rank, models, seed);
    snprintf(file, sizeof file, "%s/offer.bin", dir);
    snprintf(path, sizeof path, "%s/model.bin", dir);
    ck_assert_msg(sl_run_model_place(file, path, &mine, &placed, &there) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_int_eq(exists(dir, "offer.bin"), !placed); /* left to the caller */
    if (!placed)
        ck_assert_msg(there.models >= models && there.step >= step, "there: %d models, step %ld",
                      there.models, there.step);
    return placed;
}

/* The run's model.bin among several offers: an earlier run's file (fewer steps) gives
 * way; of this run's, the one averaging more nodes stays, and of as many, the lower
 * rank's, whatever the order of the offers, while the same rank's gives way (the
 * writer's evaluated file replaces its unevaluated copy); a damaged file gives way. */
START_TEST(test_run_model_place)
{
    char dir[1200], path[1200], want[1200];

    snprintf(dir, sizeof dir, "%s/offers", tmp_root);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/model.bin", dir);
    ck_assert(offer(dir, 100, 0, 4, 1));  /* none there */
    ck_assert(offer(dir, 200, 2, 3, 2));  /* an earlier run's, of 4 nodes */
    ck_assert(!offer(dir, 200, 3, 3, 3)); /* as many from rank 2 */
    ck_assert(offer(dir, 200, 1, 3, 4));  /* as many, lower rank: the writer over a copy */
    ck_assert(!offer(dir, 200, 0, 1, 5)); /* a group of one */
    ck_assert(offer(dir, 200, 3, 4, 6));  /* a bigger group */
    ck_assert(offer(dir, 200, 3, 4, 8));  /* the same rank's: an evaluated file over its copy */
    offered_model(dir, "want.bin", 200, 3, 4, 8);
    snprintf(want, sizeof want, "%s/want.bin", dir);
    assert_same_params(path, want);
    test_write_file(path, "not a model", 11);
    ck_assert(offer(dir, 200, 2, 1, 7));
}
END_TEST

static Suite *
run_files_suite(void)
{
    Suite *s = suite_create("run_files");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 300);
    tcase_set_timeout(limits, 300);
    tcase_add_test(core, test_keep_checkpoints);
    tcase_add_test(core, test_run_model_place);
    tcase_add_test(core, test_keep_best);
    tcase_add_test(core, test_keep_best_resumed);
    tcase_add_test(core, test_saved_config_elsewhere);
    tcase_add_test(limits, test_start_over);
    tcase_add_test(limits, test_dir_in_use);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    /* absolute: test_saved_config_elsewhere links to it from another directory */
    test_data_dir_absolute(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(run_files_suite(), tmp_root, "check_run_files");
}
