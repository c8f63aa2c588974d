/* Unit tests of src/node: exact resume from checkpoints (one node, and two nodes of
 * bmuf and gossip-bmuf with their sync state), checkpoint validation (versions 1 to 3,
 * node count, rank and sync state), the run directory's files, the progress line, and
 * the shoal command line. Trains tiny models (E 16, one LSTM layer of 16) on a
 * 20000-token slice of Brown. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"
#include "node/sl_checkpoint.h"
#include "node/sl_metrics.h"
#include "node/sl_progress.h"
#include "node/sl_train.h"
#include "sync/sl_sync.h"
#include "transport/sl_transport.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-node-XXXXXX";
static char data_dir[1024];

/* ---------------------------------------------------------------- helpers */

static void
path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_root, name);
}

#define CKPT_HASH_SEED 0x53484f414c434b50ull /* sl_checkpoint.c's */

/* Sets the checksum (the last 8 bytes) of a checkpoint held in data (len). */
static void
rehash(unsigned char *data, size_t len)
{
    sl_put_u64(data + len - 8, sl_hash_bytes(data, len - 8, CKPT_HASH_SEED));
}

/* The float payload's bytes (parameters, optimizer and hidden state) of a checkpoint. */
static size_t
float_bytes(const unsigned char *data)
{
    return 4 * (size_t)(sl_get_u64(data + 120) + sl_get_u64(data + 128) + sl_get_u64(data + 136));
}

/* The version 1 file of a version 3 checkpoint (data, len), as shoal 1 wrote it: the
 * header's first 192 bytes with version 1, the floats, no sync section, its checksum.
 * Returns it malloc'd, its length in *out_len. */
static unsigned char *
to_version1(const unsigned char *data, size_t len, size_t *out_len)
{
    size_t fb = float_bytes(data);
    unsigned char *v1;

    ck_assert_uint_gt(len, SL_CKPT_HEADER_BYTES + fb + 16);
    *out_len = SL_CKPT_V1_HEADER_BYTES + fb + 8;
    v1 = malloc(*out_len);
    ck_assert_ptr_nonnull(v1);
    memcpy(v1, data, SL_CKPT_V1_HEADER_BYTES);
    sl_put_u32(v1 + 8, 1);
    memcpy(v1 + SL_CKPT_V1_HEADER_BYTES, data + SL_CKPT_HEADER_BYTES, fb);
    rehash(v1, *out_len);
    return v1;
}

/* The version 2 file of a version 3 checkpoint, as the shoal of the second format wrote
 * it: the header's first 204 bytes with version 2 and a u32 0 (no loss scale), the rest
 * as it is. Returns it malloc'd, its length in *out_len. */
static unsigned char *
to_version2(const unsigned char *data, size_t len, size_t *out_len)
{
    unsigned char *v2;
    size_t cut = SL_CKPT_HEADER_BYTES - SL_CKPT_V2_HEADER_BYTES;

    *out_len = len - cut;
    v2 = malloc(*out_len);
    ck_assert_ptr_nonnull(v2);
    memcpy(v2, data, SL_CKPT_V2_HEADER_BYTES - 4);
    sl_put_u32(v2 + 8, 2);
    sl_put_u32(v2 + SL_CKPT_V2_HEADER_BYTES - 4, 0);
    memcpy(v2 + SL_CKPT_V2_HEADER_BYTES, data + SL_CKPT_HEADER_BYTES, len - SL_CKPT_HEADER_BYTES);
    rehash(v2, *out_len);
    return v2;
}

/* The tiny configuration: a 20000-token slice of Brown, vocab 500, E 16, one layer of
 * 16, B 32 x T 8 (78 batches an epoch), sampled softmax, dropout 0.2, Adam. The run
 * directory is <tmp>/<run>. Further "key=value" overrides follow, NULL-terminated. */
static void
tiny_config(sl_config_t *cfg, const char *run, ...)
{
    char yaml[4096], dir[1024], cache[1024];
    const char *set;
    va_list ap;

    path_in(dir, sizeof dir, run);
    path_in(cache, sizeof cache, "cache");
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s, log_every: 10, checkpoint_every: 25}\n"
             "data:\n"
             "  train: %s/brown/train.txt\n"
             "  valid: %s/brown/valid.txt\n"
             "  test: %s/brown/test.txt\n"
             "  vocab_size: 500\n"
             "  max_tokens: 20000\n"
             "  cache_dir: %s\n"
             "model: {embedding: 16, layers: [{lstm: 16}], dropout: 0.2,\n"
             "        output: {type: sampled, samples: 32}}\n"
             "train: {batch: 32, bptt: 8, epochs: 2,\n"
             "        optimizer: {type: adam, lr: 0.01}}\n",
             run, dir, data_dir, data_dir, data_dir, cache);
    sl_config_init(cfg);
    ck_assert_msg(sl_config_load_string(cfg, yaml, "tiny.yaml") == SL_OK, "%s", sl_err_msg());
    va_start(ap, run);
    while ((set = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(sl_config_set(cfg, set) == SL_OK, "%s: %s", set, sl_err_msg());
    va_end(ap);
    ck_assert_msg(sl_config_validate(cfg) == SL_OK, "%s", sl_err_msg());
}

static sl_status_t
train(const sl_config_t *cfg, int resume, sl_train_result_t *res)
{
    sl_train_opts_t opts;

    sl_train_opts_init(&opts);
    opts.resume = resume;
    opts.quiet = 1;
    return sl_train_run(cfg, &opts, res);
}

static void
train_ok(const sl_config_t *cfg, int resume, sl_train_result_t *res)
{
    sl_status_t rc = train(cfg, resume, res);
    ck_assert_msg(rc == SL_OK, "training failed: %s", sl_err_msg());
}

/* Two checkpoints hold the same training state (parameters, optimizer state, hidden
 * state, sync state, counters) when every byte but the training time and checksum
 * agrees. */
static void
assert_same_training_state(const char *a_path, const char *b_path)
{
    size_t alen, blen;
    char *a = test_read_file(a_path, &alen), *b = test_read_file(b_path, &blen);

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(alen, blen);
    ck_assert_uint_gt(alen, SL_CKPT_HEADER_BYTES + 8);
    ck_assert_msg(memcmp(a, b, 184) == 0, "headers differ"); /* up to the train time */
    ck_assert_msg(memcmp(a + 192, b + 192, SL_CKPT_HEADER_BYTES - 192) == 0,
                  "nodes, rank or sync algorithm differ");
    ck_assert_msg(memcmp(a + SL_CKPT_HEADER_BYTES, b + SL_CKPT_HEADER_BYTES,
                         alen - SL_CKPT_HEADER_BYTES - 8) == 0,
                  "parameters, optimizer, hidden or sync state differ");
    free(a);
    free(b);
}

static long
header_i64(const char *path, size_t off)
{
    size_t len;
    unsigned char *d = (unsigned char *)test_read_file(path, &len);
    uint64_t v = 0;

    ck_assert_ptr_nonnull(d);
    ck_assert_uint_ge(len, off + 8);
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)d[off + i] << (8 * i);
    free(d);
    return (long)(int64_t)v;
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
    tiny_config(&c_straight, straight, "train.max_steps=100", opt1, opt2, opt3, NULL);
    tiny_config(&c_half, split, "train.max_steps=50", opt1, opt2, opt3, NULL);
    tiny_config(&c_full, split, "train.max_steps=100", opt1, opt2, opt3, NULL);

    train_ok(&c_straight, 1, &r);
    ck_assert_int_eq(r.steps, 100);
    train_ok(&c_half, 1, &r);
    ck_assert_int_eq(r.steps, 50);
    snprintf(half, sizeof half, "%s/%s/checkpoint.bin.half", tmp_root, split);
    snprintf(b, sizeof b, "%s/%s/checkpoint.bin", tmp_root, split);
    ck_assert_int_eq(header_i64(b, 144), 50); /* the checkpoint's step */
    ck_assert_int_eq(link(b, half), 0);
    train_ok(&c_full, 1, &r);
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

    tiny_config(&c_int, "int", "train.max_steps=30", NULL);
    tiny_config(&c_straight, "int-straight", "train.max_steps=30", NULL);
    sl_train_opts_init(&opts);
    opts.quiet = 1;
    opts.interrupt = &stop;
    ck_assert_int_eq(sl_train_run(&c_int, &opts, &r), SL_ERR_SHUTDOWN);
    ck_assert_str_eq(sl_err_msg(), "interrupted at step 1");
    ck_assert_int_eq(r.steps, 1);
    snprintf(b, sizeof b, "%s/int/checkpoint.bin", tmp_root);
    ck_assert_int_eq(header_i64(b, 144), 1);
    snprintf(a, sizeof a, "%s/int/model.bin", tmp_root);
    ck_assert_int_ne(access(a, F_OK), 0); /* no final model for an unfinished run */

    train_ok(&c_int, 1, &r);
    ck_assert_int_eq(r.steps, 30);
    train_ok(&c_straight, 1, &r);
    snprintf(a, sizeof a, "%s/int-straight/checkpoint.bin", tmp_root);
    assert_same_training_state(a, b);
    sl_config_fini(&c_int);
    sl_config_fini(&c_straight);
}
END_TEST

/* Node 0 of a 4-node run (sync none: no transport needed) checkpoints; the same node
 * directory resumed as node 0 of 2 is refused with one line naming both, and the
 * checkpoint stays as it was. */
START_TEST(test_resume_other_node_count_refused)
{
    sl_config_t cfg;
    sl_train_result_t r;
    sl_train_opts_t opts;
    char ckpt[1024], want[2048], *before, *after;
    size_t lb, la;

    tiny_config(&cfg, "nodes", "train.max_steps=2", "data.valid=''", "data.test=''",
                "data.valid_fraction=0", NULL);
    sl_train_opts_init(&opts);
    opts.quiet = 1;
    opts.rank = 0;
    opts.nranks = 4;
    ck_assert_msg(sl_train_run(&cfg, &opts, &r) == SL_OK, "%s", sl_err_msg());
    snprintf(ckpt, sizeof ckpt, "%s/nodes/node-0/checkpoint.bin", tmp_root);
    before = test_read_file(ckpt, &lb);
    ck_assert_ptr_nonnull(before);

    sl_config_fini(&cfg);
    tiny_config(&cfg, "nodes", "train.max_steps=4", "data.valid=''", "data.test=''",
                "data.valid_fraction=0", NULL);
    opts.nranks = 2;
    ck_assert_int_eq(sl_train_run(&cfg, &opts, &r), SL_ERR_FORMAT);
    snprintf(want, sizeof want, "%s: written by node 0 of 4, this is node 0 of 2", ckpt);
    ck_assert_str_eq(sl_err_msg(), want);
    after = test_read_file(ckpt, &la);
    ck_assert(la == lb && memcmp(before, after, lb) == 0);
    free(before);
    free(after);
    sl_config_fini(&cfg);
}
END_TEST

/* ------------------------------------------------------ run directory files */

/* A few hundred steps lower the training loss clearly; the metrics and summary say so. */
START_TEST(test_loss_falls_and_files)
{
    sl_config_t cfg;
    sl_train_result_t r;
    char path[1024], *metrics, *summary, *line, *last = NULL;
    double first_loss, last_loss;
    int step_lines = 0, eval_lines = 0;

    tiny_config(&cfg, "falls", "train.batch=4", "train.max_steps=300", "model.dropout=0",
                "model.output.type=full", "data.test=''", NULL);
    train_ok(&cfg, 1, &r);
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

/* -------------------------------------------------------- bad checkpoints */

typedef struct {
    sl_config_t cfg;
    sl_backend_t *be;
    sl_lm_t *lm;
    sl_optim_t *opt;
    sl_lm_state_t *st;
    sl_ckpt_ident_t id;
    /* small_sync: node 0 of 2 (transport not connected: nothing is exchanged) */
    sl_transport_t *tr;
    sl_component_t *comps;
    sl_sync_t *sync;
} small_model_t;

/* A model of vocabulary 50 built without a corpus, with one training step taken so
 * that the optimizer and hidden state are not zero. */
static void
small_model(small_model_t *m, const char *layers, uint64_t seed)
{
    char set[128];
    int32_t x[4 * 8], y[4 * 8];
    sl_step_keys_t keys = {11, 12};
    double loss;

    tiny_config(&m->cfg, "unused", "train.batch=4", NULL);
    snprintf(set, sizeof set, "model.layers=%s", layers);
    ck_assert_int_eq(sl_config_set(&m->cfg, set), SL_OK);
    ck_assert_int_eq(sl_backend_cpu_new(&m->be, 1), SL_OK);
    ck_assert_int_eq(sl_lm_new(&m->lm, &m->cfg, 50, 1, 4, m->be), SL_OK);
    ck_assert_int_eq(sl_lm_init_params(m->lm, seed), SL_OK);
    ck_assert_int_eq(sl_optim_new(&m->opt, &m->cfg, sl_lm_nparams(m->lm), m->be), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(m->lm, 4, &m->st), SL_OK);
    for (int i = 0; i < 32; i++) {
        x[i] = (int32_t)((i * 7 + (int)seed) % 50);
        y[i] = (int32_t)((i * 11 + 3) % 50);
    }
    ck_assert_int_eq(sl_lm_train_step(m->lm, m->st, x, y, 8, &keys, &loss), SL_OK);
    sl_optim_step(m->opt, sl_lm_params(m->lm), sl_lm_grads(m->lm), 0.01);
    sl_ckpt_ident_init(&m->id, &m->cfg, 50, 0x1234, 0, 1);
    m->tr = NULL;
    m->comps = NULL;
    m->sync = NULL;
}

/* Makes m node 0 of 2 with the sync settings conf ("sync={...}") and a sync object
 * over its components, started from its parameters. */
static void
small_sync(small_model_t *m, const char *conf)
{
    sl_transport_opts_t o;
    int nc = sl_lm_ncomponents(m->lm);

    ck_assert_msg(sl_config_set(&m->cfg, conf) == SL_OK, "%s", sl_err_msg());
    sl_ckpt_ident_init(&m->id, &m->cfg, 50, 0x1234, 0, 2);
    sl_transport_opts_default(&o);
    o.size = 2;
    ck_assert_int_eq(sl_transport_new(&m->tr, &o), SL_OK);
    m->comps = malloc((size_t)nc * sizeof *m->comps);
    ck_assert_ptr_nonnull(m->comps);
    for (int i = 0; i < nc; i++)
        m->comps[i] = *sl_lm_component(m->lm, i);
    ck_assert_msg(sl_sync_new(&m->sync, &m->cfg, m->tr, 0, 2, m->comps, nc, sl_lm_params(m->lm),
                              sl_lm_nparams(m->lm)) == SL_OK,
                  "%s", sl_err_msg());
}

/* m's sync state, malloc'd, its length in *len. */
static unsigned char *
sync_state(const small_model_t *m, size_t *len)
{
    unsigned char *buf;

    *len = sl_sync_state_bytes(m->sync);
    buf = malloc(*len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(sl_sync_state_save(m->sync, buf, *len), SL_OK);
    return buf;
}

static void
small_model_free(small_model_t *m)
{
    sl_sync_destroy(&m->sync);
    free(m->comps);
    sl_transport_destroy(&m->tr);
    sl_lm_state_destroy(&m->st);
    sl_optim_destroy(&m->opt);
    sl_lm_destroy(&m->lm);
    sl_backend_destroy(&m->be);
    sl_config_fini(&m->cfg);
}

/* Parameters, optimizer state, hidden state and sync state, all on the host, for
 * comparisons. */
typedef struct {
    float *params, *opt, *st;
    unsigned char *sync; /* NULL without a sync object */
    size_t np, no, ns, nsync;
    long opt_steps;
} snapshot_t;

static void
snapshot(small_model_t *m, snapshot_t *s)
{
    s->np = sl_lm_nparams(m->lm);
    s->no = sl_optim_state_size(m->opt);
    s->ns = sl_lm_state_size(m->st);
    s->params = malloc(s->np * sizeof(float));
    s->opt = malloc((s->no + 1) * sizeof(float));
    s->st = malloc(s->ns * sizeof(float));
    memcpy(s->params, sl_lm_params(m->lm), s->np * sizeof(float));
    ck_assert_int_eq(sl_optim_state_save(m->opt, s->opt, &s->opt_steps), SL_OK);
    ck_assert_int_eq(sl_lm_state_save(m->st, s->st), SL_OK);
    s->sync = NULL;
    s->nsync = 0;
    if (m->sync)
        s->sync = sync_state(m, &s->nsync);
}

static int
snapshot_equal(const snapshot_t *a, const snapshot_t *b)
{
    return a->np == b->np && a->no == b->no && a->ns == b->ns && a->opt_steps == b->opt_steps &&
           memcmp(a->params, b->params, a->np * sizeof(float)) == 0 &&
           memcmp(a->opt, b->opt, a->no * sizeof(float)) == 0 &&
           memcmp(a->st, b->st, a->ns * sizeof(float)) == 0 && a->nsync == b->nsync &&
           (a->nsync == 0 || memcmp(a->sync, b->sync, a->nsync) == 0);
}

static void
snapshot_free(snapshot_t *s)
{
    free(s->params);
    free(s->opt);
    free(s->st);
    free(s->sync);
}

/* Loading path into m must fail with exactly msg and leave m and the file as they were. */
static void
assert_refused(small_model_t *m, const sl_ckpt_ident_t *id, const char *path, const char *msg,
               int params_only)
{
    snapshot_t before, after;
    sl_ckpt_cursor_t cur = {-7, -7, -7, 7, 7.0, -7, 7.0f, -7, -7, -7};
    size_t len_before, len_after;
    char *file_before = test_read_file(path, &len_before), *file_after;
    sl_status_t rc;

    snapshot(m, &before);
    rc = params_only ? sl_checkpoint_load(path, id, m->be, m->lm, NULL, NULL, NULL, NULL)
                     : sl_checkpoint_load(path, id, m->be, m->lm, m->opt, m->st, m->sync, &cur);
    ck_assert_int_eq(rc, SL_ERR_FORMAT);
    ck_assert_str_eq(sl_err_msg(), msg);
    snapshot(m, &after);
    ck_assert_msg(snapshot_equal(&before, &after), "a refused load changed the model");
    ck_assert_int_eq(cur.step, -7);
    file_after = test_read_file(path, &len_after);
    ck_assert_uint_eq(len_before, len_after);
    ck_assert(memcmp(file_before, file_after, len_before) == 0);
    free(file_before);
    free(file_after);
    snapshot_free(&before);
    snapshot_free(&after);
}

START_TEST(test_bad_checkpoints)
{
    small_model_t src, dst, deep;
    snapshot_t saved, loaded;
    sl_ckpt_cursor_t cur = {120, 1, 42, 3840, 1.5, 0, 512.0f, 7, 1, 3}, got;
    sl_ckpt_ident_t other;
    char good[1024], bad[1024], model[1024], msg[2048], *data;
    size_t len, expected;

    path_in(good, sizeof good, "good.bin");
    path_in(bad, sizeof bad, "bad.bin");
    path_in(model, sizeof model, "model-only.bin");
    small_model(&src, "[{lstm: 16}]", 1);
    small_model(&dst, "[{lstm: 16}]", 2); /* different values everywhere */
    small_model(&deep, "[{lstm: 16}, {lstm: 16}]", 1);
    ck_assert_int_eq(sl_checkpoint_save(good, &src.id, &cur, src.be, src.lm, src.opt, src.st, NULL),
                     SL_OK);
    data = test_read_file(good, &len);
    expected =
        SL_CKPT_HEADER_BYTES +
        4 * (sl_lm_nparams(src.lm) + sl_optim_state_size(src.opt) + sl_lm_state_size(src.st)) + 8 +
        8; /* no sync state: its length 0, then the checksum */
    ck_assert_uint_eq(len, expected);
    ck_assert(memcmp(data, "SHOALCKP", 8) == 0);

    /* bad magic */
    data[0] = 'X';
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg, "%s: not a shoal checkpoint (bad magic)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[0] = 'S';
    /* unsupported version (u32 little-endian at offset 8) */
    data[8] = 9;
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg,
             "%s: checkpoint format version 9 is not supported (this shoal reads 1 to 3)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[8] = 0;
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg,
             "%s: checkpoint format version 0 is not supported (this shoal reads 1 to 3)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[8] = 3;
    /* a loss scale that is no scale (the checksum made good again) */
    for (int k = 0; k < 2; k++) {
        unsigned char keep[4];
        memcpy(keep, data + 204, 4);
        sl_put_u32((unsigned char *)data + 204, k ? 0xbf800000u : 0x7fc00000u); /* -1, NaN */
        rehash((unsigned char *)data, len);
        test_write_file(bad, data, len);
        snprintf(msg, sizeof msg, "%s: corrupt header (loss scale)", bad);
        assert_refused(&dst, &dst.id, bad, msg, 0);
        memcpy(data + 204, keep, 4);
        rehash((unsigned char *)data, len);
    }
    /* truncated */
    test_write_file(bad, data, len / 2);
    snprintf(msg, sizeof msg, "%s: truncated: %zu bytes, expected %zu", bad, len / 2, len);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    test_write_file(bad, data, 0);
    snprintf(msg, sizeof msg, "%s: truncated: 0 bytes, expected at least 256", bad);
    assert_refused(&dst, &dst.id, bad, msg, 1);
    /* one flipped payload bit */
    data[SL_CKPT_HEADER_BYTES + 101] ^= 0x10;
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg, "%s: checksum mismatch (file corrupt)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    assert_refused(&dst, &dst.id, bad, msg, 1);
    data[SL_CKPT_HEADER_BYTES + 101] ^= 0x10;
    /* a checkpoint of another architecture */
    ck_assert_int_eq(
        sl_checkpoint_save(bad, &deep.id, &cur, deep.be, deep.lm, deep.opt, deep.st, NULL), SL_OK);
    snprintf(msg, sizeof msg,
             "%s: checkpoint was written for a different model (vocab 50, embedding 16, 2 "
             "layers of 16 vs vocab 50, embedding 16, 1 layer of 16 in the config)",
             bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    assert_refused(&dst, &dst.id, bad, msg, 1);
    /* of another corpus */
    other = dst.id;
    other.corpus_hash = 0x5678;
    snprintf(msg, sizeof msg,
             "%s: checkpoint was written for a different corpus (data 0000000000001234 vs "
             "0000000000005678 in the config)",
             good);
    assert_refused(&dst, &other, good, msg, 0);
    /* another optimizer or batch shape cannot resume (but may be evaluated) */
    other = dst.id;
    other.optimizer = SL_OPT_SGD;
    snprintf(msg, sizeof msg, "%s: checkpoint was written with optimizer adam; the config has sgd",
             good);
    assert_refused(&dst, &other, good, msg, 0);
    other = dst.id;
    other.bptt = 35;
    snprintf(msg, sizeof msg,
             "%s: checkpoint was written with train.batch 4 and train.bptt 8; the config has "
             "4 and 35",
             good);
    assert_refused(&dst, &other, good, msg, 0);
    /* a model file holds no training state */
    ck_assert_int_eq(sl_checkpoint_save(model, &src.id, &cur, src.be, src.lm, NULL, NULL, NULL),
                     SL_OK);
    snprintf(msg, sizeof msg,
             "%s: a model file without training state (training resumes only from a "
             "checkpoint)",
             model);
    assert_refused(&dst, &dst.id, model, msg, 0);

    /* and the good file loads everything */
    ck_assert_int_eq(sl_checkpoint_load(good, &dst.id, dst.be, dst.lm, dst.opt, dst.st, NULL, &got),
                     SL_OK);
    snapshot(&src, &saved);
    snapshot(&dst, &loaded);
    ck_assert(snapshot_equal(&saved, &loaded));
    ck_assert_int_eq(got.step, 120);
    ck_assert_int_eq(got.epoch, 1);
    ck_assert_int_eq(got.batch_index, 42);
    ck_assert_uint_eq(got.tokens, 3840);
    ck_assert(got.train_time_s == 1.5);
    ck_assert_int_eq(got.version, 3);
    ck_assert(got.loss_scale == 512.0f);
    ck_assert_int_eq(got.loss_scale_good, 7);
    ck_assert_int_eq(got.loss_scale_overflows, 1);
    ck_assert_int_eq(got.loss_scale_skipped, 3);
    snapshot_free(&saved);
    snapshot_free(&loaded);
    /* a model file's parameters load for evaluation */
    ck_assert_int_eq(sl_lm_init_params(dst.lm, 5), SL_OK);
    ck_assert(memcmp(sl_lm_params(dst.lm), sl_lm_params(src.lm),
                     sl_lm_nparams(src.lm) * sizeof(float)) != 0);
    ck_assert_int_eq(sl_checkpoint_load(model, &src.id, dst.be, dst.lm, NULL, NULL, NULL, NULL),
                     SL_OK);
    ck_assert(memcmp(sl_lm_params(dst.lm), sl_lm_params(src.lm),
                     sl_lm_nparams(src.lm) * sizeof(float)) == 0);
    /* a missing file */
    path_in(msg, sizeof msg, "none.bin");
    ck_assert_int_eq(sl_checkpoint_load(msg, &dst.id, dst.be, dst.lm, NULL, NULL, NULL, NULL),
                     SL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "none.bin: No such file"));
    free(data);
    small_model_free(&src);
    small_model_free(&dst);
    small_model_free(&deep);
}
END_TEST

/* Version 3 with a sync state: node 0 of 2 of bmuf. The state (a Delta made non-zero
 * by hand) is saved and loaded bit for bit with the rest; another rank, node count or
 * algorithm, a sync state of another size or with a bad header of its own are refused
 * with one line and change nothing; a version 2 file loads everything but a loss
 * scale; a version 1 file still loads everything it has and leaves the sync state
 * alone; a model file's parameters load for any node. */
START_TEST(test_checkpoint_sync_state)
{
    small_model_t src, dst, uni;
    snapshot_t saved, loaded, before;
    sl_ckpt_cursor_t cur = {12, 0, 12, 384, 0.5, 0, 0.0f, 0, 0, 0}, got;
    sl_ckpt_ident_t other;
    char good[1024], bad[1024], old[1024], model[1024], msg[2048];
    unsigned char *state, *data, *v1;
    size_t nstate, len, v1len, sync_at;
    size_t np;

    path_in(good, sizeof good, "sync-good.bin");
    path_in(bad, sizeof bad, "sync-bad.bin");
    path_in(old, sizeof old, "sync-v1.bin");
    path_in(model, sizeof model, "sync-model.bin");
    small_model(&src, "[{lstm: 16}]", 1);
    small_model(&dst, "[{lstm: 16}]", 2);
    small_model(&uni, "[{lstm: 16}]", 2);
    small_sync(&src, "sync={algorithm: bmuf, exchange: dense}");
    small_sync(&dst, "sync={algorithm: bmuf, exchange: dense}");
    small_sync(&uni, "sync={algorithm: bmuf, exchange: unique}");
    np = sl_lm_nparams(src.lm);

    /* Delta[i] = i / 1024 in src's state: header 24 bytes, omega, then Delta */
    state = sync_state(&src, &nstate);
    ck_assert_uint_eq(nstate, 24 + 3 * 4 * np);
    for (size_t i = 0; i < np; i++) {
        float d = (float)i / 1024.0f;
        uint32_t bits;
        memcpy(&bits, &d, sizeof bits);
        sl_put_u32(state + 24 + 4 * (np + i), bits);
    }
    ck_assert_int_eq(sl_sync_state_load(src.sync, state, nstate), SL_OK);
    ck_assert_int_eq(
        sl_checkpoint_save(good, &src.id, &cur, src.be, src.lm, src.opt, src.st, src.sync), SL_OK);
    data = (unsigned char *)test_read_file(good, &len);
    sync_at = SL_CKPT_HEADER_BYTES + float_bytes(data);
    ck_assert_uint_eq(len, sync_at + 8 + nstate + 8);
    ck_assert_uint_eq(sl_get_u32(data + 192), 2); /* nodes */
    ck_assert_uint_eq(sl_get_u32(data + 196), 0); /* rank */
    ck_assert_uint_eq(sl_get_u32(data + 200), SL_SYNC_BMUF);
    ck_assert_uint_eq(sl_get_u64(data + sync_at), nstate);
    ck_assert(memcmp(data + sync_at + 8, state, nstate) == 0);

    /* another node, another node count, another algorithm */
    other = dst.id;
    other.rank = 1;
    snprintf(msg, sizeof msg, "%s: written by node 0 of 2, this is node 1 of 2", good);
    assert_refused(&dst, &other, good, msg, 0);
    other = dst.id;
    other.nodes = 4;
    other.rank = 2;
    snprintf(msg, sizeof msg, "%s: written by node 0 of 2, this is node 2 of 4", good);
    assert_refused(&dst, &other, good, msg, 0);
    other = dst.id;
    other.sync = SL_SYNC_GOSSIP_BMUF;
    snprintf(msg, sizeof msg,
             "%s: checkpoint was written with sync.algorithm bmuf; the config has gossip-bmuf",
             good);
    assert_refused(&dst, &other, good, msg, 0);
    /* a sync object that keeps more (exchange unique: touched-row sets too) */
    snprintf(msg, sizeof msg,
             "%s: checkpoint holds %zu bytes of sync state, this node's bmuf keeps %zu (was "
             "sync.exchange or the model changed?)",
             good, nstate, sl_sync_state_bytes(uni.sync));
    ck_assert_uint_gt(sl_sync_state_bytes(uni.sync), nstate);
    assert_refused(&uni, &uni.id, good, msg, 0);
    /* the sync section's own header says gossip-bmuf (checksum made right) */
    data[sync_at + 8] = SL_SYNC_GOSSIP_BMUF;
    rehash(data, len);
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg,
             "%s: sync: the state is of gossip-bmuf with 0 row sets (0 bitmap words) and %zu "
             "BMUF parameters; this node's bmuf has 0 (0) and %zu",
             bad, np, np);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[sync_at + 8] = SL_SYNC_BMUF;
    rehash(data, len);
    /* a sync length that runs past the end */
    sl_put_u64(data + sync_at, (uint64_t)len);
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg, "%s: truncated: %zu bytes, expected %zu", bad, len,
             sync_at + 8 + len + 8);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    sl_put_u64(data + sync_at, nstate);

    /* the good file: everything, sync state included */
    ck_assert_int_eq(
        sl_checkpoint_load(good, &dst.id, dst.be, dst.lm, dst.opt, dst.st, dst.sync, &got), SL_OK);
    ck_assert_int_eq(got.version, 3);
    ck_assert_int_eq(got.step, 12);
    snapshot(&src, &saved);
    snapshot(&dst, &loaded);
    ck_assert_uint_eq(loaded.nsync, nstate);
    ck_assert(snapshot_equal(&saved, &loaded));
    snapshot_free(&saved);
    snapshot_free(&loaded);

    /* version 2: everything but a loss scale, sync state included */
    v1 = to_version2(data, len, &v1len);
    test_write_file(old, v1, v1len);
    ck_assert_int_eq(sl_lm_init_params(dst.lm, 9), SL_OK);
    ck_assert_int_eq(
        sl_checkpoint_load(old, &dst.id, dst.be, dst.lm, dst.opt, dst.st, dst.sync, &got), SL_OK);
    ck_assert_int_eq(got.version, 2);
    ck_assert_int_eq(got.step, 12);
    ck_assert(got.loss_scale == 0.0f);
    snapshot(&src, &saved);
    snapshot(&dst, &loaded);
    ck_assert(snapshot_equal(&saved, &loaded));
    snapshot_free(&saved);
    snapshot_free(&loaded);
    free(v1);

    /* version 1: parameters, optimizer and hidden state load; the sync state stays */
    v1 = to_version1(data, len, &v1len);
    test_write_file(old, v1, v1len);
    ck_assert_int_eq(sl_lm_init_params(uni.lm, 9), SL_OK);
    snapshot(&uni, &before);
    ck_assert_int_eq(
        sl_checkpoint_load(old, &uni.id, uni.be, uni.lm, uni.opt, uni.st, uni.sync, &got), SL_OK);
    ck_assert_int_eq(got.version, 1);
    ck_assert_int_eq(got.step, 12);
    ck_assert_uint_eq(got.tokens, 384);
    snapshot(&src, &saved);
    snapshot(&uni, &loaded);
    ck_assert(memcmp(saved.params, loaded.params, np * sizeof(float)) == 0);
    ck_assert(memcmp(saved.opt, loaded.opt, saved.no * sizeof(float)) == 0);
    ck_assert(memcmp(saved.st, loaded.st, saved.ns * sizeof(float)) == 0);
    ck_assert_uint_eq(loaded.nsync, before.nsync);
    ck_assert(memcmp(loaded.sync, before.sync, before.nsync) == 0);
    snapshot_free(&saved);
    snapshot_free(&loaded);
    snapshot_free(&before);
    /* a version 1 file with a wrong checksum is still refused */
    v1[v1len - 1] ^= 1;
    test_write_file(bad, v1, v1len);
    snprintf(msg, sizeof msg, "%s: checksum mismatch (file corrupt)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);

    /* a model file of node 0 of 2 is evaluated by one process */
    ck_assert_int_eq(sl_checkpoint_save(model, &src.id, &cur, src.be, src.lm, NULL, NULL, NULL),
                     SL_OK);
    other = dst.id;
    other.nodes = 1;
    other.sync = SL_SYNC_NONE;
    ck_assert_int_eq(sl_lm_init_params(dst.lm, 5), SL_OK);
    ck_assert_int_eq(sl_checkpoint_load(model, &other, dst.be, dst.lm, NULL, NULL, NULL, NULL),
                     SL_OK);
    ck_assert(memcmp(sl_lm_params(dst.lm), sl_lm_params(src.lm), np * sizeof(float)) == 0);

    free(state);
    free(data);
    free(v1);
    small_model_free(&src);
    small_model_free(&dst);
    small_model_free(&uni);
}
END_TEST

START_TEST(test_describe_arch)
{
    sl_ckpt_ident_t id;
    char buf[256];

    memset(&id, 0, sizeof id);
    id.vocab = 10002;
    id.embedding = 512;
    id.nlayers = 2;
    id.layers[0].hidden = id.layers[1].hidden = 2048;
    id.layers[0].projection = id.layers[1].projection = 512;
    sl_ckpt_describe_arch(&id, buf, sizeof buf);
    ck_assert_str_eq(buf, "vocab 10002, embedding 512, 2 layers of 2048/512");
    id.layers[1].projection = 0;
    sl_ckpt_describe_arch(&id, buf, sizeof buf);
    ck_assert_str_eq(buf, "vocab 10002, embedding 512, layers 2048/512, 2048");
    ck_assert_uint_ne(sl_ckpt_arch_hash(&id), 0);
    {
        uint64_t h = sl_ckpt_arch_hash(&id);
        id.corpus_hash = 99; /* not part of the architecture */
        id.batch = 7;
        ck_assert_uint_eq(sl_ckpt_arch_hash(&id), h);
        id.layers[1].hidden = 1024;
        ck_assert_uint_ne(sl_ckpt_arch_hash(&id), h);
    }
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

    tiny_config(&ok, "keep", "train.max_steps=5", NULL);
    train_ok(&ok, 1, &r);
    snprintf(ckpt, sizeof ckpt, "%s/keep/checkpoint.bin", tmp_root);
    snprintf(metrics, sizeof metrics, "%s/keep/metrics.jsonl", tmp_root);
    c0 = test_read_file(ckpt, &cl0);
    m0 = test_read_file(metrics, &ml0);
    ck_assert_ptr_nonnull(c0);
    ck_assert_ptr_nonnull(m0);

    snprintf(set, sizeof set, "data.train=%s/no-such-corpus.txt", tmp_root);
    tiny_config(&missing, "keep", "train.max_steps=10", set, NULL);
    rc = train(&missing, 1, &r);
    ck_assert_int_eq(rc, SL_ERR_IO);
    snprintf(set, sizeof set, "%s/no-such-corpus.txt: No such file or directory", tmp_root);
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
    tiny_config(&ok, "keep", "train.max_steps=10", NULL);
    ck_assert_int_eq(train(&ok, 1, &r), SL_ERR_FORMAT);
    snprintf(set, sizeof set, "%s: checksum mismatch (file corrupt)", ckpt);
    ck_assert_str_eq(sl_err_msg(), set);
    c1 = test_read_file(ckpt, &cl1);
    ck_assert(cl0 == cl1 && memcmp(c0, c1, cl0) == 0);
    free(c1);
    /* --no-resume starts over and replaces it */
    train_ok(&ok, 0, &r);
    ck_assert_int_eq(r.steps, 10);
    ck_assert_int_eq(header_i64(ckpt, 144), 10);
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

    tiny_config(&cfg, "bf16", "precision=bf16", NULL);
    ck_assert_int_eq(train(&cfg, 1, &r), SL_ERR_UNSUPPORTED);
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
    ck_assert_str_eq(got, "{\"step\":10,\"loss\":5}\n"
                          "{\"event\":\"eval\",\"split\":\"valid\",\"step\":10,\"loss\":5}\n"
                          "{\"step\":20,\"loss\":4}\n"
                          "{\"event\":\"eval\",\"split\":\"test\",\"step\":20,\"loss\":0.693147,"
                          "\"ppl\":2,\"bpc\":1}\n");
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

static int
have_shoal(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(shoal_bin, sizeof shoal_bin, "%s/shoal", b ? b : ".");
    if (access(shoal_bin, X_OK) != 0) {
        fprintf(stderr, "check_node: %s is not built; skipping the command-line case\n", shoal_bin);
        return 0;
    }
    return 1;
}

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

    if (!have_shoal())
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
    ck_assert(strncmp(out, "shoal 0.", 8) == 0 && count_lines(out) == 1);
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

/* SIGINT: the run stops after the step in progress with a checkpoint, says so in one
 * line and exits 130; the same command then finishes the run. */
START_TEST(test_cli_sigint)
{
    char conf[1024], out_path[1024], err_path[1024], metrics[1024], *err, *out;
    int status;
    pid_t pid;

    if (!have_shoal())
        return;
    path_in(conf, sizeof conf, "sig.yaml");
    write_tiny_yaml(conf, "sig", "");
    snprintf(metrics, sizeof metrics, "%s/sig/metrics.jsonl", tmp_root);
    path_in(out_path, sizeof out_path, "sig.out");
    path_in(err_path, sizeof err_path, "sig.err");
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr))
            _exit(99);
        setenv("SHOAL_LOG", "warn", 1);
        execl(shoal_bin, shoal_bin, "train", conf, "--quiet", "--set", "train.max_steps=0", "--set",
              "train.epochs=1000", (char *)NULL);
        _exit(98);
    }
    /* wait until it trains (a metrics line exists), then interrupt */
    test_wait_file(metrics, 1, pid, 90);
    kill(pid, SIGINT);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 130);
    err = test_read_file(err_path, NULL);
    out = test_read_file(out_path, NULL);
    ck_assert_msg(strncmp(err, "shoal: interrupted at step ", 27) == 0, "stderr: %s", err);
    ck_assert_ptr_nonnull(strstr(err, "/sig/checkpoint.bin; run the same command to resume\n"));
    ck_assert_int_eq(count_lines(err), 1);
    ck_assert_str_eq(out, "");
    {
        long step = strtol(err + 27, NULL, 10), saved;
        char ckpt[1024];
        snprintf(ckpt, sizeof ckpt, "%s/sig/checkpoint.bin", tmp_root);
        saved = header_i64(ckpt, 144);
        ck_assert_int_eq(saved, step);
        ck_assert_int_gt(step, 0);
    }
    free(err);
    free(out);
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
    tiny_config(&cfg, "devsel", set, "train.max_steps=1", NULL);
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

/* Runs shoal ARGS (NULL-terminated) with SHOAL_STAGE_SYNC=stage and SHOAL_LOG=debug;
 * returns the exit status and the output (stdout and stderr, malloc'd) in *log. */
static int
run_shoal_staged(const char *stage, char **log, const char *const *args)
{
    char path[1024];
    const char *argv[32];
    int n = 0, status;
    pid_t pid;

    path_in(path, sizeof path, "staged.log");
    argv[n++] = shoal_bin;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(path, "w", stdout) || dup2(fileno(stdout), 2) < 0)
            _exit(99);
        setenv("SHOAL_LOG", "debug", 1);
        setenv("SHOAL_STAGE_SYNC", stage, 1);
        execv(shoal_bin, (char *const *)argv);
        _exit(98);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    *log = test_read_file(path, NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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

    if (!have_shoal())
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
            rc = run_shoal_staged(staged ? "1" : "0", &log,
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

/* <tmp>/<run>.yaml: 2 nodes of sync, 12 steps of 8 x 8 (no epoch end, no valid or test
 * split), dropout and sampled softmax so that every random key is used. */
static void
two_node_yaml(char *conf, size_t size, const char *run, const char *sync)
{
    char yaml[2048], name[128];

    snprintf(name, sizeof name, "%s.yaml", run);
    path_in(conf, size, name);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 4, checkpoint_every: 0}\n"
             "data: {train: %s/brown/train.txt, vocab_size: 500, max_tokens: 20000,\n"
             "       cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}], dropout: 0.2,\n"
             "        output: {type: sampled, samples: 32}}\n"
             "train: {batch: 8, bptt: 8, max_steps: 12, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "cluster: {nodes: 2, rendezvous_timeout_ms: 20000}\n"
             "sync: %s\n",
             run, tmp_root, run, data_dir, tmp_root, sync);
    test_write_file(conf, yaml, strlen(yaml));
}

/* shoal ARGS must exit 0 (SHOAL_STAGE_SYNC=stage); returns its log (malloc'd). */
static char *
shoal_ok(const char *stage, const char *const *args)
{
    char *log;
    int rc = run_shoal_staged(stage, &log, args);

    ck_assert_msg(rc == 0, "shoal %s %s exited %d:\n%s", args[0], args[1], rc, log);
    return log;
}

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

    if (!have_shoal())
        return;
    snprintf(run, sizeof run, "two-%d-straight", _i);
    two_node_yaml(conf, sizeof conf, run, resume_syncs[_i].sync);
    free(shoal_ok(stage, (const char *[]){"run", conf, "--no-resume", NULL}));

    snprintf(run, sizeof run, "two-%d-split", _i);
    two_node_yaml(conf, sizeof conf, run, resume_syncs[_i].sync);
    free(shoal_ok(
        stage, (const char *[]){"run", conf, "--no-resume", "--set", "train.max_steps=6", NULL}));
    for (int k = 0; k < 2; k++) {
        snprintf(b, sizeof b, "%s/two-%d-split/node-%d/checkpoint.bin", tmp_root, _i, k);
        snprintf(half, sizeof half, "%s.half", b);
        ck_assert_int_eq(header_i64(b, 144), 6);
        ck_assert_int_eq(link(b, half), 0);
    }
    log = shoal_ok(stage, (const char *[]){"run", conf, NULL});
    ck_assert_msg(count_in(log, "resuming from step 6 of 12") == 2, "%s", log);
    ck_assert_msg(!strstr(log, "version 1"), "%s", log);
    free(log);
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/two-%d-straight/node-%d/checkpoint.bin", tmp_root, _i, k);
        snprintf(b, sizeof b, "%s/two-%d-split/node-%d/checkpoint.bin", tmp_root, _i, k);
        ck_assert_int_eq(header_i64(b, 144), 12);
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
        at = SL_CKPT_HEADER_BYTES + float_bytes(d);
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
    two_node_yaml(conf, sizeof conf, run, resume_syncs[_i].sync);
    snprintf(b, sizeof b, "%s/two-%d-v1", tmp_root, _i);
    ck_assert_int_eq(mkdir(b, 0755), 0);
    for (int k = 0; k < 2; k++) {
        unsigned char *d, *v1;
        size_t len, v1len;

        snprintf(b, sizeof b, "%s/two-%d-v1/node-%d", tmp_root, _i, k);
        ck_assert_int_eq(mkdir(b, 0755), 0);
        snprintf(half, sizeof half, "%s/two-%d-split/node-%d/checkpoint.bin.half", tmp_root, _i, k);
        d = (unsigned char *)test_read_file(half, &len);
        v1 = to_version1(d, len, &v1len);
        snprintf(b, sizeof b, "%s/two-%d-v1/node-%d/checkpoint.bin", tmp_root, _i, k);
        test_write_file(b, v1, v1len);
        free(d);
        free(v1);
    }
    log = shoal_ok(stage, (const char *[]){"run", conf, NULL});
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

/* ---------------------------------------------------------------------- main */

static int
remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static Suite *
node_suite(void)
{
    Suite *s = suite_create("node");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    tcase_add_test(core, test_progress_format);
    tcase_add_test(core, test_describe_arch);
    tcase_add_test(core, test_resume_exact_adam_sampled_dropout);
    tcase_add_test(core, test_resume_exact_sgd_full);
    tcase_add_test(core, test_interrupt_then_resume);
    tcase_add_test(core, test_loss_falls_and_files);
    tcase_add_test(core, test_cli);
    tcase_add_test(core, test_staged_sync_same_models);
    tcase_add_loop_test(core, test_two_node_resume_exact, 0,
                        (int)(sizeof resume_syncs / sizeof resume_syncs[0]));
    tcase_add_test(limits, test_resume_other_node_count_refused);
    tcase_add_test(limits, test_device_choice);
    tcase_add_test(limits, test_bad_checkpoints);
    tcase_add_test(limits, test_checkpoint_sync_state);
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
    const char *data = getenv("SHOAL_DATA"), *src = getenv("SHOAL_SRCDIR");
    SRunner *sr;
    int failed;

    if (data)
        snprintf(data_dir, sizeof data_dir, "%s", data);
    else
        snprintf(data_dir, sizeof data_dir, "%s/../shared/data", src ? src : "..");
    if (!mkdtemp(tmp_root)) {
        perror("check_node: mkdtemp");
        return 1;
    }
    sl_log_set_level(SL_LOG_WARN);
    sr = srunner_create(node_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
