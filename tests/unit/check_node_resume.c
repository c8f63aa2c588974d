/* Unit tests of src/node: exact resume from checkpoints. One node (Adam with sampled
 * softmax and dropout, SGD with the full softmax) resumed across an epoch end and
 * after an interrupt, and from the previous generation when the newest is damaged;
 * two nodes of bmuf and gossip-bmuf resumed with their sync state through shoal run,
 * and from version 1 files without it; two nodes of gossip-bmuf with overlapped sync
 * resumed from a checkpoint taken with an update pending, and the same over tcp;
 * two nodes whose newest checkpoints differ resumed at their common step; the nodes'
 * plan when there is none (sl_resume.h: the newest step, handed over; a node that
 * starts over while others resume stops them all, naming each); a node directory of
 * another node count refused. Trains tiny models (E 16, one LSTM layer of 16) on a 20000-token
 * slice of Brown. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_checkpoint.h"
#include "node/sl_resume.h"
#include "node/sl_train.h"
#include "sync/sl_sync.h"

#include "test_tool.h"
#include "test_util.h"

/* What a refused resume adds to the checkpoint's own message. */
#define NO_RESUME " (--no-resume starts the run over, setting its files aside)"

static char tmp_root[] = "/tmp/shoal-check-node-resume-XXXXXX";
static char data_dir[1024];

static char shoal_bin[1024];

/* ---------------------------------------------------------------- helpers */

/* Two checkpoints hold the same training state (parameters, optimizer state, hidden
 * state, sync state, counters) when every byte before the metadata section (which
 * names the run) but the training time agrees. */
static void
assert_same_training_state(const char *a_path, const char *b_path)
{
    size_t alen, blen;
    char *a = test_read_file(a_path, &alen), *b = test_read_file(b_path, &blen);

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_gt(alen, SL_CKPT_HEADER_BYTES + 8);
    ck_assert_msg(memcmp(a, b, 184) == 0, "headers differ"); /* up to the train time */
    ck_assert_msg(memcmp(a + 192, b + 192, SL_CKPT_HEADER_BYTES - 192) == 0,
                  "nodes, rank or sync algorithm differ");
    /* up to the metadata, which names each run */
    ck_assert_uint_eq(test_ckpt_meta_at((unsigned char *)a), test_ckpt_meta_at((unsigned char *)b));
    ck_assert_uint_le(test_ckpt_meta_at((unsigned char *)a), alen - 16);
    ck_assert_uint_le(test_ckpt_meta_at((unsigned char *)b), blen - 16);
    ck_assert_msg(memcmp(a + SL_CKPT_HEADER_BYTES, b + SL_CKPT_HEADER_BYTES,
                         test_ckpt_meta_at((unsigned char *)a) - SL_CKPT_HEADER_BYTES) == 0,
                  "parameters, optimizer, hidden or sync state differ");
    free(a);
    free(b);
}

/* --------------------------------------------------- resume, bit for bit */

/* Train 2N steps straight, and N steps then resume to 2N; N = 50 with 78 batches an
 * epoch, so the resumed half crosses an epoch end (state reset, eval, checkpoint). */
static void
check_resume_exact(const char *tag, const char *opt1, const char *opt2, const char *opt3)
{
    sl_config_t c_straight, c_half, c_full;
    sl_train_result_t r;
    char straight[64], split[64], a[1024], b[1024], half[1024];

    snprintf(straight, sizeof straight, "%s-straight", tag);
    snprintf(split, sizeof split, "%s-split", tag);
    test_tiny_config(&c_straight, tmp_root, data_dir, straight, "train.max_steps=100", opt1, opt2,
                     opt3, NULL);
    test_tiny_config(&c_half, tmp_root, data_dir, split, "train.max_steps=50", opt1, opt2, opt3,
                     NULL);
    test_tiny_config(&c_full, tmp_root, data_dir, split, "train.max_steps=100", opt1, opt2, opt3,
                     NULL);

    test_train_ok(&c_straight, 1, &r);
    ck_assert_int_eq(r.steps, 100);
    test_train_ok(&c_half, 1, &r);
    ck_assert_int_eq(r.steps, 50);
    snprintf(half, sizeof half, "%s/%s/checkpoint.bin.half", tmp_root, split);
    snprintf(b, sizeof b, "%s/%s/checkpoint.bin", tmp_root, split);
    ck_assert_int_eq(test_ckpt_i64(b, 144), 50); /* the checkpoint's step */
    ck_assert_int_eq(link(b, half), 0);
    test_train_ok(&c_full, 1, &r);
    ck_assert_int_eq(r.steps, 100);
    ck_assert_int_eq((long)r.tokens, 100 * 32 * 8);

    snprintf(a, sizeof a, "%s/%s/checkpoint.bin", tmp_root, straight);
    assert_same_training_state(a, b);
    /* and the parameters did move between step 50 and 100 (the test can fail) */
    {
        size_t hl, fl;
        char *h = test_read_file(half, &hl), *f = test_read_file(b, &fl);
        ck_assert_uint_eq(hl, fl);
        ck_assert(memcmp(h + SL_CKPT_HEADER_BYTES, f + SL_CKPT_HEADER_BYTES, 4000) != 0);
        free(h);
        free(f);
    }
    sl_config_fini(&c_straight);
    sl_config_fini(&c_half);
    sl_config_fini(&c_full);
}

START_TEST(test_resume_exact_adam_sampled_dropout)
{
    check_resume_exact("adam", "model.dropout=0.2", "model.output.type=sampled",
                       "train.optimizer.type=adam");
}
END_TEST

START_TEST(test_resume_exact_sgd_full)
{
    check_resume_exact("sgd", "model.dropout=0", "model.output.type=full",
                       "train.optimizer.type=sgd");
}
END_TEST

/* An interrupt finishes the current step, checkpoints and returns SL_ERR_SHUTDOWN;
 * running again continues as if never stopped. */
START_TEST(test_interrupt_then_resume)
{
    sl_config_t c_int, c_straight;
    sl_train_result_t r;
    sl_train_opts_t opts;
    volatile sig_atomic_t stop = 1;
    char a[1024], b[1024];

    test_tiny_config(&c_int, tmp_root, data_dir, "int", "train.max_steps=30", NULL);
    test_tiny_config(&c_straight, tmp_root, data_dir, "int-straight", "train.max_steps=30", NULL);
    sl_train_opts_init(&opts);
    opts.quiet = 1;
    opts.interrupt = &stop;
    ck_assert_int_eq(sl_train_run(&c_int, &opts, &r), SL_ERR_SHUTDOWN);
    ck_assert_str_eq(sl_err_msg(), "interrupted at step 1");
    ck_assert_int_eq(r.steps, 1);
    snprintf(b, sizeof b, "%s/int/checkpoint.bin", tmp_root);
    ck_assert_int_eq(test_ckpt_i64(b, 144), 1);
    snprintf(a, sizeof a, "%s/int/model.bin", tmp_root);
    ck_assert_int_ne(access(a, F_OK), 0); /* no final model for an unfinished run */

    test_train_ok(&c_int, 1, &r);
    ck_assert_int_eq(r.steps, 30);
    test_train_ok(&c_straight, 1, &r);
    snprintf(a, sizeof a, "%s/int-straight/checkpoint.bin", tmp_root);
    assert_same_training_state(a, b);
    sl_config_fini(&c_int);
    sl_config_fini(&c_straight);
}
END_TEST

/* Runs sl_train_run with stderr into <tmp>/<name>.err; returns the status, the log
 * (malloc'd) in *log. */
static sl_status_t
train_logged(const sl_config_t *cfg, const char *name, sl_train_result_t *r, char **log)
{
    char path[1024];
    int saved = dup(2), fd;
    sl_status_t rc;

    snprintf(path, sizeof path, "%s/%s.err", tmp_root, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(saved, 0);
    fflush(stderr);
    ck_assert_int_ge(dup2(fd, 2), 0);
    close(fd);
    rc = test_train(cfg, 1, r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *log = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(*log);
    return rc;
}

/* 50 steps with a checkpoint every 25 leave generations 50 and 25. The newest damaged
 * (a flipped bit): the run to 50 again warns once, naming it and why, resumes from step
 * 25, and its save at 50 replaces the damaged file, keeping 25 as the previous; on to
 * 100, it ends exactly as a run that never stopped. A stale temp file of the checkpoint
 * and a link planted at this process's temp path are removed at start, the link's
 * target untouched. Both generations damaged: one line naming both, the files kept. */
START_TEST(test_resume_previous_generation)
{
    sl_config_t c_straight, c_half, c_full;
    sl_train_result_t r;
    char a[1024], b[1024], prev[1024], path[1200], victim[1024], want[4096], *log, *data;
    size_t len;

    test_tiny_config(&c_straight, tmp_root, data_dir, "gen-straight", "train.max_steps=100",
                     "run.checkpoint_every=25", NULL);
    test_tiny_config(&c_half, tmp_root, data_dir, "gen", "train.max_steps=50",
                     "run.checkpoint_every=25", NULL);
    test_tiny_config(&c_full, tmp_root, data_dir, "gen", "train.max_steps=100",
                     "run.checkpoint_every=25", NULL);
    test_train_ok(&c_straight, 1, &r);
    test_train_ok(&c_half, 1, &r);
    snprintf(b, sizeof b, "%s/gen/checkpoint.bin", tmp_root);
    snprintf(prev, sizeof prev, "%s.prev", b);
    ck_assert_int_eq(test_ckpt_i64(b, 144), 50);
    ck_assert_int_eq(test_ckpt_i64(prev, 144), 25);

    data = test_read_file(b, &len);
    data[SL_CKPT_HEADER_BYTES + 77] ^= 4;
    test_write_file(b, data, len);
    snprintf(path, sizeof path, "%s.tmp.1", b);
    test_write_file(path, "stale", 5);
    snprintf(victim, sizeof victim, "%s/gen-victim", tmp_root);
    test_write_file(victim, "victim", 6);
    snprintf(path, sizeof path, "%s.tmp.%ld", b, (long)getpid());
    ck_assert_int_eq(symlink(victim, path), 0);

    ck_assert_msg(train_logged(&c_half, "gen", &r, &log) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(r.steps, 50);
    /* the damaged file went, the one resumed from stayed as the previous generation */
    ck_assert_int_eq(test_ckpt_i64(b, 144), 50);
    ck_assert_int_eq(test_ckpt_i64(prev, 144), 25);
    snprintf(want, sizeof want,
             "%s: checksum mismatch (file corrupt); resuming from the previous checkpoint %s\n", b,
             prev);
    ck_assert_msg(strstr(log, want) && !strstr(strstr(log, want) + strlen(want), "checksum"), "%s",
                  log);
    free(log);
    snprintf(path, sizeof path, "%s.tmp.1", b);
    ck_assert_int_ne(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s.tmp.%ld", b, (long)getpid());
    ck_assert_int_ne(access(path, F_OK), 0);
    free(data);
    data = test_read_file(victim, &len);
    ck_assert(len == 6 && memcmp(data, "victim", 6) == 0);
    free(data);
    test_train_ok(&c_full, 1, &r);
    ck_assert_int_eq(r.steps, 100);
    ck_assert_int_eq((long)r.tokens, 100 * 32 * 8);
    snprintf(a, sizeof a, "%s/gen-straight/checkpoint.bin", tmp_root);
    assert_same_training_state(a, b);
    ck_assert_int_eq(test_ckpt_i64(prev, 144), 78); /* the epoch end */

    /* both damaged: the newest flipped, the previous cut short */
    data = test_read_file(b, &len);
    data[SL_CKPT_HEADER_BYTES + 77] ^= 4;
    test_write_file(b, data, len);
    test_write_file(prev, data, len - 1);
    sl_config_fini(&c_full);
    test_tiny_config(&c_full, tmp_root, data_dir, "gen", "train.max_steps=150",
                     "run.checkpoint_every=25", NULL);
    ck_assert_int_eq(test_train(&c_full, 1, &r), SL_ERR_FORMAT);
    snprintf(
        want, sizeof want,
        "%s: checksum mismatch (file corrupt); %s: truncated: %zu bytes, expected %zu" NO_RESUME, b,
        prev, len - 1, len);
    ck_assert_str_eq(sl_err_msg(), want);
    { /* both kept as they were */
        size_t lb, lp;
        char *nb = test_read_file(b, &lb), *np = test_read_file(prev, &lp);
        ck_assert(lb == len && memcmp(nb, data, len) == 0);
        ck_assert(lp == len - 1 && memcmp(np, data, len - 1) == 0);
        free(nb);
        free(np);
    }
    free(data);
    sl_config_fini(&c_straight);
    sl_config_fini(&c_half);
    sl_config_fini(&c_full);
}
END_TEST

/* The nodes' verdict on their offers (sl_resume_choose): the highest common step; a
 * fresh start when nobody offers one; with no common step the newest any node has,
 * handed by the lowest node that holds it to the others, in one line naming every
 * node's steps and the takers; a node that starts over while another resumes: one
 * line naming every node's steps, consecutive equal offers together. */
START_TEST(test_resume_choose)
{
    const sl_resume_steps_t ahead[] = {{1, 2, {300, 200}}, {1, 2, {200, 100}}, {1, 1, {200, 0}}},
                            none[] = {{1, 0, {0, 0}}, {0, 0, {0, 0}}, {1, 0, {0, 0}}},
                            apart[] = {{1, 2, {200, 100}},
                                       {1, 1, {300, 0}},
                                       {1, 1, {300, 0}},
                                       {1, 0, {0, 0}},
                                       {0, 0, {0, 0}}},
                            off[] = {{1, 1, {50, 0}}, {0, 0, {0, 0}}};
    sl_resume_plan_t plan;

    ck_assert_int_eq(sl_resume_choose(ahead, 3, &plan), SL_OK);
    ck_assert(plan.step == 200 && plan.donor == -1);
    ck_assert_int_eq(sl_resume_choose(ahead, 2, &plan), SL_OK);
    ck_assert(plan.step == 200 && plan.donor == -1);
    ck_assert_int_eq(sl_resume_choose(none, 3, &plan), SL_OK);
    ck_assert(plan.step == -1 && plan.donor == -1);
    ck_assert_int_eq(sl_resume_choose(apart, 4, &plan), SL_OK);
    ck_assert(plan.step == 300 && plan.donor == 1);
    ck_assert_str_eq(plan.note, "resume: no common checkpoint (node 0 has steps 200,100; nodes "
                                "1-2 have step 300; node 3 has none): nodes 0,3 take step 300 "
                                "from node 1 (parameters and sync state), as nodes that come "
                                "back do");
    ck_assert(sl_resume_holds(&apart[1], 300) && !sl_resume_holds(&apart[0], 300));
    ck_assert_int_eq(sl_resume_choose(apart, 5, &plan), SL_ERR_FORMAT);
    ck_assert_str_eq(sl_err_msg(),
                     "resume: no common checkpoint: node 0 has steps 200,100; nodes 1-2 have "
                     "step 300; node 3 has none; node 4 starts over (--no-resume); resume every "
                     "node from one step or none (--no-resume on every node starts over)");
    ck_assert_int_eq(sl_resume_choose(off, 2, &plan), SL_ERR_FORMAT);
    ck_assert_msg(strstr(sl_err_msg(), "node 0 has step 50; node 1 starts over (--no-resume); "),
                  "%s", sl_err_msg());
}
END_TEST

/* Node 0 of a 4-node run (sync none: no transport needed) checkpoints; the same node
 * directory resumed as node 0 of 2, with twice the batch (a global batch split over 2),
 * is refused with one line naming both node counts, and the checkpoint stays as it
 * was. */
START_TEST(test_resume_other_node_count_refused)
{
    sl_config_t cfg;
    sl_train_result_t r;
    sl_train_opts_t opts;
    char ckpt[1024], want[2048], *before, *after;
    size_t lb, la;

    test_tiny_config(&cfg, tmp_root, data_dir, "nodes", "train.max_steps=2", "data.valid=''",
                     "data.test=''", "data.valid_fraction=0", NULL);
    sl_train_opts_init(&opts);
    opts.quiet = 1;
    opts.rank = 0;
    opts.nranks = 4;
    ck_assert_msg(sl_train_run(&cfg, &opts, &r) == SL_OK, "%s", sl_err_msg());
    snprintf(ckpt, sizeof ckpt, "%s/nodes/node-0/checkpoint.bin", tmp_root);
    before = test_read_file(ckpt, &lb);
    ck_assert_ptr_nonnull(before);

    sl_config_fini(&cfg);
    test_tiny_config(&cfg, tmp_root, data_dir, "nodes", "train.max_steps=4", "data.valid=''",
                     "data.test=''", "data.valid_fraction=0", "train.batch=64", NULL);
    opts.nranks = 2;
    ck_assert_int_eq(sl_train_run(&cfg, &opts, &r), SL_ERR_FORMAT);
    snprintf(want, sizeof want, "%s: written by node 0 of 4, this is node 0 of 2" NO_RESUME, ckpt);
    ck_assert_str_eq(sl_err_msg(), want);
    after = test_read_file(ckpt, &la);
    ck_assert(la == lb && memcmp(before, after, lb) == 0);
    free(before);
    free(after);
    sl_config_fini(&cfg);
}
END_TEST

/* ------------------------------------------------- multi-node exact resume */

/* Two-node runs resumed: bmuf with the unique exchange (its touched-row sets live
 * between syncs) and gossip-bmuf staged through the host mirror (SHOAL_STAGE_SYNC=1,
 * the GPU nodes' path); the model every 2 steps, the row shards every 4. */
static const struct {
    const char *sync, *stage;
} resume_syncs[] = {
    {"{algorithm: bmuf, period: 2, embedding_period: 4, exchange: unique, embedding_shards: 2}",
     "0"},
    {"{algorithm: gossip-bmuf, period: 2, embedding_period: 4, embedding_shards: 2}", "1"},
};

static int
count_in(const char *text, const char *what)
{
    int n = 0;

    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* 12 steps straight against 6 steps, a checkpoint, and a resume to 12: every node's
 * checkpoint at step 12 (parameters, optimizer, hidden and sync state) and the run's
 * model agree bit for bit. At step 6 the BMUF state is not the one a start from the
 * parameters would give (Delta != 0 after 3 model syncs) and, with the unique exchange,
 * the row shards last synced at step 4 hold touched rows; the checkpoint carries them.
 * The same step-6 checkpoints written as version 1 (no sync state) resume with a
 * warning on each node and end elsewhere: the sync state is what made the difference. */
START_TEST(test_two_node_resume_exact)
{
    const char *stage = resume_syncs[_i].stage;
    char run[64], conf[1024], a[1024], b[1024], half[1024], *log;
    float *ma, *mb;
    size_t la, lb;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    snprintf(run, sizeof run, "two-%d-straight", _i);
    test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 2, resume_syncs[_i].sync);
    free(test_shoal_staged_ok(shoal_bin, tmp_root, stage,
                              (const char *[]){"run", conf, "--no-resume", NULL}));

    snprintf(run, sizeof run, "two-%d-split", _i);
    test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 2, resume_syncs[_i].sync);
    free(test_shoal_staged_ok(
        shoal_bin, tmp_root, stage,
        (const char *[]){"run", conf, "--no-resume", "--set", "train.max_steps=6", NULL}));
    for (int k = 0; k < 2; k++) {
        snprintf(b, sizeof b, "%s/two-%d-split/node-%d/checkpoint.bin", tmp_root, _i, k);
        snprintf(half, sizeof half, "%s.half", b);
        ck_assert_int_eq(test_ckpt_i64(b, 144), 6);
        ck_assert_int_eq(link(b, half), 0);
    }
    log = test_shoal_staged_ok(shoal_bin, tmp_root, stage, (const char *[]){"run", conf, NULL});
    ck_assert_msg(count_in(log, "resuming from step 6 of 12") == 2, "%s", log);
    ck_assert_msg(!strstr(log, "version 1"), "%s", log);
    free(log);
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/two-%d-straight/node-%d/checkpoint.bin", tmp_root, _i, k);
        snprintf(b, sizeof b, "%s/two-%d-split/node-%d/checkpoint.bin", tmp_root, _i, k);
        ck_assert_int_eq(test_ckpt_i64(b, 144), 12);
        assert_same_training_state(a, b);
    }
    snprintf(a, sizeof a, "%s/two-%d-straight/model.bin", tmp_root, _i);
    snprintf(b, sizeof b, "%s/two-%d-split/model.bin", tmp_root, _i);
    ma = test_model_params(a, &la);
    mb = test_model_params(b, &lb);
    ck_assert(la == lb && memcmp(ma, mb, la * sizeof *ma) == 0);
    free(mb);

    /* what the step-6 checkpoint of node 0 carries */
    {
        unsigned char *d;
        size_t len, at, nsync, np, rows_at;
        int any = 0;

        snprintf(half, sizeof half, "%s/two-%d-split/node-0/checkpoint.bin.half", tmp_root, _i);
        d = (unsigned char *)test_read_file(half, &len);
        ck_assert_ptr_nonnull(d);
        np = (size_t)sl_get_u64(d + 120);
        at = SL_CKPT_HEADER_BYTES + test_ckpt_float_bytes(d);
        nsync = (size_t)sl_get_u64(d + at);
        ck_assert_uint_eq(sl_get_u32(d + 192), 2);
        ck_assert_uint_eq(sl_get_u32(d + 200), _i == 0 ? SL_SYNC_BMUF : SL_SYNC_GOSSIP_BMUF);
        ck_assert_uint_eq(sl_get_u32(d + at + 8), sl_get_u32(d + 200));
        ck_assert_uint_eq(sl_get_u64(d + at + 8 + 8), np); /* BMUF arrays of nparams */
        rows_at = 24 + 12 * np;
        ck_assert_uint_eq(nsync, rows_at + 8 * sl_get_u64(d + at + 8 + 16));
        if (_i == 0) { /* 4 row shards of 251 rows: 4 words each, some bits set */
            ck_assert_uint_eq(sl_get_u32(d + at + 8 + 4), 4);
            ck_assert_uint_eq(sl_get_u64(d + at + 8 + 16), 16);
            for (size_t j = rows_at; j < nsync; j++)
                any |= d[at + 8 + j] != 0;
            ck_assert_msg(any, "no touched rows in the step-6 sync state");
        } else {
            ck_assert_uint_eq(nsync, rows_at);
        }
        free(d);
    }

    /* the same checkpoints as version 1 files: a warning, and another end */
    snprintf(run, sizeof run, "two-%d-v1", _i);
    test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 2, resume_syncs[_i].sync);
    snprintf(b, sizeof b, "%s/two-%d-v1", tmp_root, _i);
    ck_assert_int_eq(mkdir(b, 0755), 0);
    for (int k = 0; k < 2; k++) {
        unsigned char *d, *v1;
        size_t len, v1len;

        snprintf(b, sizeof b, "%s/two-%d-v1/node-%d", tmp_root, _i, k);
        ck_assert_int_eq(mkdir(b, 0755), 0);
        snprintf(half, sizeof half, "%s/two-%d-split/node-%d/checkpoint.bin.half", tmp_root, _i, k);
        d = (unsigned char *)test_read_file(half, &len);
        v1 = test_ckpt_to_version1(d, len, &v1len);
        snprintf(b, sizeof b, "%s/two-%d-v1/node-%d/checkpoint.bin", tmp_root, _i, k);
        test_write_file(b, v1, v1len);
        free(d);
        free(v1);
    }
    log = test_shoal_staged_ok(shoal_bin, tmp_root, stage, (const char *[]){"run", conf, NULL});
    ck_assert_msg(count_in(log, "a version 1 checkpoint holds no sync state: ") == 2, "%s", log);
    ck_assert_msg(count_in(log, "resuming from step 6 of 12") == 2, "%s", log);
    free(log);
    snprintf(b, sizeof b, "%s/two-%d-v1/model.bin", tmp_root, _i);
    mb = test_model_params(b, &lb);
    ck_assert(la == lb && memcmp(ma, mb, la * sizeof *ma) != 0);
    free(ma);
    free(mb);
}
END_TEST

/* ------------------------------------------- multi-node: overlapped sync */

/* Two nodes of gossip-bmuf with sync.overlap_steps 3 (syncs at 4, 8, 12; their updates
 * applied at 7, 11 and 12, the last step): the run's model is the same bits over ipc
 * and over tcp staged through the host mirror (another link, other timings, the GPU
 * nodes' path); 6 steps, a checkpoint while the update of step 4 is pending, and a
 * resume to 12 end at the same checkpoints and model; and tau 0 ends elsewhere. */
START_TEST(test_two_node_overlap_exact)
{
    static const char sync[] = "{algorithm: gossip-bmuf, period: 4, embedding_period: 4, "
                               "overlap_steps: 3, embedding_shards: 2}";
    char conf[1024], a[1024], b[1024], *log;
    float *ma, *mb;
    size_t la, lb;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    test_resume_run_yaml(conf, sizeof conf, tmp_root, "overlap-straight", data_dir, 2, sync);
    free(test_shoal_staged_ok(shoal_bin, tmp_root, "0",
                              (const char *[]){"run", conf, "--no-resume", NULL}));
    snprintf(a, sizeof a, "%s/overlap-straight/model.bin", tmp_root);
    ma = test_model_params(a, &la);

    test_resume_run_yaml(conf, sizeof conf, tmp_root, "overlap-tcp", data_dir, 2, sync);
    free(test_shoal_staged_ok(
        shoal_bin, tmp_root, "1",
        (const char *[]){"run", conf, "--no-resume", "--transport", "tcp", NULL}));
    snprintf(b, sizeof b, "%s/overlap-tcp/model.bin", tmp_root);
    mb = test_model_params(b, &lb);
    ck_assert_msg(la == lb && memcmp(ma, mb, la * sizeof *ma) == 0,
                  "overlapped sync: tcp and staged differs from ipc");
    free(mb);

    test_resume_run_yaml(conf, sizeof conf, tmp_root, "overlap-split", data_dir, 2, sync);
    free(test_shoal_staged_ok(
        shoal_bin, tmp_root, "0",
        (const char *[]){"run", conf, "--no-resume", "--set", "train.max_steps=6", NULL}));
    log = test_shoal_staged_ok(shoal_bin, tmp_root, "0", (const char *[]){"run", conf, NULL});
    ck_assert_msg(count_in(log, "resuming from step 6 of 12") == 2, "%s", log);
    free(log);
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/overlap-straight/node-%d/checkpoint.bin", tmp_root, k);
        snprintf(b, sizeof b, "%s/overlap-split/node-%d/checkpoint.bin", tmp_root, k);
        assert_same_training_state(a, b);
    }
    snprintf(b, sizeof b, "%s/overlap-split/model.bin", tmp_root);
    mb = test_model_params(b, &lb);
    ck_assert_msg(la == lb && memcmp(ma, mb, la * sizeof *ma) == 0,
                  "overlapped sync: the resumed run's model differs");
    free(mb);

    test_resume_run_yaml(conf, sizeof conf, tmp_root, "overlap-none", data_dir, 2, sync);
    free(test_shoal_staged_ok(
        shoal_bin, tmp_root, "0",
        (const char *[]){"run", conf, "--no-resume", "--set", "sync.overlap_steps=0", NULL}));
    snprintf(b, sizeof b, "%s/overlap-none/model.bin", tmp_root);
    mb = test_model_params(b, &lb);
    ck_assert(la == lb && memcmp(ma, mb, la * sizeof *ma) != 0);
    free(ma);
    free(mb);
}
END_TEST

/* ------------------------------------------- multi-node: a common step */

/* Node k's checkpoint generations of run from into run to (both created as needed). */
static void
copy_node(const char *from, const char *to, int k)
{
    const char *const names[] = {"checkpoint.bin", "checkpoint.bin.prev"};
    char src[1024], dst[1024], *data;
    size_t len;

    snprintf(dst, sizeof dst, "%s/%s", tmp_root, to);
    mkdir(dst, 0755);
    snprintf(dst, sizeof dst, "%s/%s/node-%d", tmp_root, to, k);
    ck_assert_int_eq(mkdir(dst, 0755), 0);
    for (int i = 0; from && i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s/node-%d/%s", tmp_root, from, k, names[i]);
        snprintf(dst, sizeof dst, "%s/%s/node-%d/%s", tmp_root, to, k, names[i]);
        if ((data = test_read_file(src, &len)) == NULL)
            continue;
        test_write_file(dst, data, len);
        free(data);
    }
}

/* Two nodes of bmuf (with the unique exchange) and of gossip-bmuf (staged, the GPU
 * nodes' path), a checkpoint every 3 steps. Runs of 9 and 6 steps leave generations
 * (9, 6) and (6, 3). Node 0 at (9, 6) with node 1 at (6, 3): both resume at step 6
 * (node 0 from its previous generation, saying so) and end exactly as 12 steps
 * straight. Without the agreement bmuf would fail with a misleading allreduce timeout
 * and gossip-bmuf wait for rounds its peer never reaches. Nodes with no common step:
 * check_resume_take.c. */
START_TEST(test_two_node_common_step)
{
    const char *sync = resume_syncs[_i].sync, *stage = resume_syncs[_i].stage;
    char conf[1024], a[1024], b[1024], want[512], run[64], from[64], *log;
    const char *every[] = {"--set", "run.checkpoint_every=3"};
    float *ma, *mb;
    size_t la, lb;
    static const struct {
        const char *run, *steps;
    } parts[] = {{"9", "9"}, {"6", "6"}, {"straight", "12"}};

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char max[64];
        snprintf(max, sizeof max, "train.max_steps=%s", parts[i].steps);
        snprintf(run, sizeof run, "cs%d-%s", _i, parts[i].run);
        test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 2, sync);
        free(test_shoal_staged_ok(
            shoal_bin, tmp_root, stage,
            (const char *[]){"run", conf, "--no-resume", every[0], every[1], "--set", max, NULL}));
    }
    snprintf(a, sizeof a, "%s/cs%d-9/node-0/checkpoint.bin.prev", tmp_root, _i);
    ck_assert_int_eq(test_ckpt_i64(a, 144), 6);

    snprintf(run, sizeof run, "cs%d-ahead", _i);
    snprintf(from, sizeof from, "cs%d-9", _i);
    copy_node(from, run, 0);
    snprintf(from, sizeof from, "cs%d-6", _i);
    copy_node(from, run, 1);
    test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 2, sync);
    log = test_shoal_staged_ok(shoal_bin, tmp_root, stage,
                               (const char *[]){"run", conf, every[0], every[1], NULL});
    ck_assert_msg(count_in(log, "resuming from step 6 of 12") == 2, "%s", log);
    snprintf(want, sizeof want,
             "node-0/checkpoint.bin.prev at step 6, the newest step every node has");
    ck_assert_msg(count_in(log, want) == 1 && count_in(log, "the newest step every node has") == 1,
                  "%s", log);
    free(log);
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/cs%d-straight/node-%d/checkpoint.bin", tmp_root, _i, k);
        snprintf(b, sizeof b, "%s/cs%d-ahead/node-%d/checkpoint.bin", tmp_root, _i, k);
        assert_same_training_state(a, b);
    }
    snprintf(a, sizeof a, "%s/cs%d-straight/model.bin", tmp_root, _i);
    snprintf(b, sizeof b, "%s/cs%d-ahead/model.bin", tmp_root, _i);
    ma = test_model_params(a, &la);
    mb = test_model_params(b, &lb);
    ck_assert(la == lb && memcmp(ma, mb, la * sizeof *ma) == 0);
    free(ma);
    free(mb);
}
END_TEST

/* Three nodes on a forked cluster agree through sl_resume_agree: node k offers
 * agree_cases[_i].offers[k]; every node must come out with the same plan (and every
 * node's offer), or the same error line. */
static const struct {
    sl_resume_steps_t offers[3];
    long step;
    int donor; /* -2: an error */
} agree_cases[] = {
    {{{1, 2, {30, 20}}, {1, 2, {20, 10}}, {1, 1, {20, 0}}}, 20, -1},
    {{{1, 0, {0, 0}}, {0, 0, {0, 0}}, {1, 0, {0, 0}}}, -1, -1},
    {{{1, 2, {30, 20}}, {1, 1, {10, 0}}, {1, 0, {0, 0}}}, 30, 0},
    {{{1, 2, {30, 20}}, {0, 0, {0, 0}}, {1, 0, {0, 0}}}, -1, -2},
};

static int
agree_node(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    const sl_resume_steps_t *offers = c->arg;
    sl_resume_steps_t all[3];
    sl_resume_plan_t plan;
    sl_status_t rc = sl_resume_agree(t, c->rank, c->n, TEST_WAIT_MS, &offers[c->rank], all, &plan);
    int i = (int)((const char *)offers - (const char *)agree_cases[0].offers) /
            (int)sizeof agree_cases[0];

    (void)res;
    if (agree_cases[i].donor == -2)
        return rc == SL_ERR_FORMAT &&
                       strcmp(sl_err_msg(), "resume: no common checkpoint: node 0 has steps "
                                            "30,20; node 1 starts over (--no-resume); node 2 has "
                                            "none; resume every node from one step or none "
                                            "(--no-resume on every node starts over)") == 0
                   ? 0
                   : 1;
    if (rc != SL_OK)
        return 2;
    if (plan.step != agree_cases[i].step || plan.donor != agree_cases[i].donor)
        return 3;
    for (int k = 0; k < 3; k++)
        if (all[k].resume != offers[k].resume || all[k].count != offers[k].count ||
            (all[k].count > 0 && all[k].step[0] != offers[k].step[0]))
            return 4;
    if (i == 2 && strcmp(plan.note, "resume: no common checkpoint (node 0 has steps 30,20; node "
                                    "1 has step 10; node 2 has none): nodes 1-2 take step 30 "
                                    "from node 0 (parameters and sync state), as nodes that "
                                    "come back do") != 0)
        return 5;
    return 0;
}

START_TEST(test_agree_cluster)
{
    test_cluster_t c;

    test_cluster_init(&c, 3, 1, 0x5e5u, agree_node, agree_cases[_i].offers);
    test_cluster_assert_ok(&c, "resume agreement");
}
END_TEST

/* ---------------------------------------------------------------------- main */

static Suite *
node_resume_suite(void)
{
    Suite *s = suite_create("node_resume");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    tcase_add_test(core, test_resume_exact_adam_sampled_dropout);
    tcase_add_test(core, test_resume_exact_sgd_full);
    tcase_add_test(core, test_interrupt_then_resume);
    tcase_add_loop_test(core, test_two_node_resume_exact, 0,
                        (int)(sizeof resume_syncs / sizeof resume_syncs[0]));
    tcase_add_test(core, test_two_node_overlap_exact);
    tcase_add_test(core, test_resume_previous_generation);
    tcase_add_loop_test(core, test_two_node_common_step, 0,
                        (int)(sizeof resume_syncs / sizeof resume_syncs[0]));
    tcase_add_test(limits, test_resume_other_node_count_refused);
    tcase_add_test(limits, test_resume_choose);
    tcase_add_loop_test(limits, test_agree_cluster, 0,
                        (int)(sizeof agree_cases / sizeof agree_cases[0]));
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    test_data_dir(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(node_resume_suite(), tmp_root, "check_node_resume");
}
