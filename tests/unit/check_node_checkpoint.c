/* Unit tests of src/node/sl_checkpoint.c: a checkpoint (format versions 1 to 3, with and
 * without a sync state) saved and loaded bit for bit; every bad file (magic, version,
 * loss scale, truncation, checksum, architecture, corpus, optimizer, batch shape, node
 * count, rank, sync algorithm and state; header counters out of bounds, a step beyond the
 * run) refused with one line that changes nothing; the previous generation kept;
 * a model file's parameters loaded for evaluation; the architecture's description and
 * hash. Small models of vocabulary 50, built without a corpus. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"
#include "node/sl_checkpoint.h"
#include "sync/sl_sync.h"
#include "transport/sl_transport.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-node-checkpoint-XXXXXX";
static char data_dir[1024];

/* ---------------------------------------------------------------- helpers */

/* ---------------------------------------------------------------- helpers */

static void
path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_root, name);
}

/* The version 2 file of a version 4 checkpoint, as the shoal of the second format wrote
 * it: the header's first 204 bytes with version 2 and a u32 0 (no loss scale), the rest
 * as it is but for the empty metadata section. Returns it malloc'd, its length in
 * *out_len. */
static unsigned char *
to_version2(const unsigned char *data, size_t len, size_t *out_len)
{
    unsigned char *v2;
    size_t cut = SL_CKPT_HEADER_BYTES - SL_CKPT_V2_HEADER_BYTES;

    /* version 4 ends with an (empty) metadata section: its 8-byte length goes too */
    ck_assert_uint_eq(sl_get_u64(data + len - 16), 0);
    *out_len = len - cut - 8;
    v2 = malloc(*out_len);
    ck_assert_ptr_nonnull(v2);
    memcpy(v2, data, SL_CKPT_V2_HEADER_BYTES - 4);
    sl_put_u32(v2 + 8, 2);
    sl_put_u32(v2 + SL_CKPT_V2_HEADER_BYTES - 4, 0);
    memcpy(v2 + SL_CKPT_V2_HEADER_BYTES, data + SL_CKPT_HEADER_BYTES,
           len - SL_CKPT_HEADER_BYTES - 16);
    test_ckpt_rehash(v2, *out_len);
    return v2;
}

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

    test_tiny_config(&m->cfg, tmp_root, data_dir, "unused", "train.batch=4", NULL);
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
        8 + 8; /* no sync state and no metadata: their lengths 0, then the checksum */
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
             "%s: checkpoint format version 9 is not supported (this shoal reads 1 to 4)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[8] = 0;
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg,
             "%s: checkpoint format version 0 is not supported (this shoal reads 1 to 4)", bad);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[8] = 4;
    /* a loss scale that is no scale (the checksum made good again) */
    for (int k = 0; k < 2; k++) {
        unsigned char keep[4];
        memcpy(keep, data + 204, 4);
        sl_put_u32((unsigned char *)data + 204, k ? 0xbf800000u : 0x7fc00000u); /* -1, NaN */
        test_ckpt_rehash((unsigned char *)data, len);
        test_write_file(bad, data, len);
        snprintf(msg, sizeof msg, "%s: corrupt header (loss scale)", bad);
        assert_refused(&dst, &dst.id, bad, msg, 0);
        memcpy(data + 204, keep, 4);
        test_ckpt_rehash((unsigned char *)data, len);
    }
    /* truncated */
    test_write_file(bad, data, len / 2);
    snprintf(msg, sizeof msg, "%s: truncated: %zu bytes, expected %zu", bad, len / 2, len);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    test_write_file(bad, data, 0);
    snprintf(msg, sizeof msg, "%s: truncated: 0 bytes, expected at least 264", bad);
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
    ck_assert_int_eq(got.version, 4);
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
    sync_at = SL_CKPT_HEADER_BYTES + test_ckpt_float_bytes(data);
    ck_assert_uint_eq(len, sync_at + 8 + nstate + 8 + 8); /* + empty metadata */
    ck_assert_uint_eq(sl_get_u32(data + 192), 2);         /* nodes */
    ck_assert_uint_eq(sl_get_u32(data + 196), 0);         /* rank */
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
    test_ckpt_rehash(data, len);
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg,
             "%s: sync: the state is of gossip-bmuf with 0 row sets (0 bitmap words) and %zu "
             "BMUF parameters; this node's bmuf has 0 (0) and %zu",
             bad, np, np);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    data[sync_at + 8] = SL_SYNC_BMUF;
    test_ckpt_rehash(data, len);
    /* a sync length that runs past the end */
    sl_put_u64(data + sync_at, (uint64_t)len);
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg, "%s: truncated: %zu bytes, expected %zu", bad, len,
             sync_at + 8 + len + 8 + 8);
    assert_refused(&dst, &dst.id, bad, msg, 0);
    sl_put_u64(data + sync_at, nstate);

    /* the good file: everything, sync state included */
    ck_assert_int_eq(
        sl_checkpoint_load(good, &dst.id, dst.be, dst.lm, dst.opt, dst.st, dst.sync, &got), SL_OK);
    ck_assert_int_eq(got.version, 4);
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
    v1 = test_ckpt_to_version1(data, len, &v1len);
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

/* path (written by test_header_bounds) with the u64 at off set to v and the checksum
 * made good again: refused by a load with exactly msg, changing nothing, and by
 * sl_checkpoint_check as damaged (1: the file) or not (0: it does not fit the run). */
static void
assert_bad_header(small_model_t *m, const sl_ckpt_ident_t *id, const char *good, size_t off,
                  uint64_t v, const char *why, int damaged)
{
    char bad[1024], msg[2048];
    unsigned char *data;
    size_t len;
    int got = -1;

    path_in(bad, sizeof bad, "bounds-bad.bin");
    data = (unsigned char *)test_read_file(good, &len);
    ck_assert_ptr_nonnull(data);
    if (off)
        sl_put_u64(data + off, v);
    test_ckpt_rehash(data, len);
    test_write_file(bad, data, len);
    snprintf(msg, sizeof msg, "%s: %s", bad, why);
    assert_refused(m, id, bad, msg, 0);
    ck_assert_int_eq(sl_checkpoint_check(bad, id, m->lm, m->opt, m->st, NULL, NULL, &got),
                     SL_ERR_FORMAT);
    ck_assert_str_eq(sl_err_msg(), msg);
    ck_assert_int_eq(got, damaged);
    free(data);
}

/* Header counters out of bounds, or disagreeing, are refused before anything uses them
 * (a crafted file with a good checksum); with the run's length given, a step beyond it
 * and a cursor that does not fit its epochs too. A checkpoint save keeps the file it
 * replaces as <path>.prev. */
START_TEST(test_header_bounds)
{
    small_model_t src, dst;
    sl_ckpt_cursor_t cur = {120, 1, 42, 3840, 1.5, 0, 0.0f, 0, 0, 0}, got;
    sl_ckpt_ident_t run;
    char good[1024], prev[1024];
    int damaged = -1;

    path_in(good, sizeof good, "bounds.bin");
    small_model(&src, "[{lstm: 16}]", 1);
    small_model(&dst, "[{lstm: 16}]", 2);
    ck_assert_int_eq(sl_checkpoint_save(good, &src.id, &cur, src.be, src.lm, src.opt, src.st, NULL),
                     SL_OK);
    assert_bad_header(&dst, &dst.id, good, 152, 1ull << 32,
                      "corrupt header (epoch 4294967296 out of range)", 1);
    assert_bad_header(&dst, &dst.id, good, 144, (uint64_t)-1,
                      "corrupt header (step -1 out of range)", 1);
    assert_bad_header(&dst, &dst.id, good, 160, 1ull << 41,
                      "corrupt header (batch index 2199023255552 out of range)", 1);
    assert_bad_header(&dst, &dst.id, good, 168, (uint64_t)-5,
                      "corrupt header (optimizer steps -5 out of range)", 1);
    assert_bad_header(&dst, &dst.id, good, 176, 3841,
                      "corrupt header (3841 tokens after 120 steps of 32)", 1);
    /* a run of 100 steps; of 50 and of 40 batches an epoch (120 is epoch 1 batch 42 of
     * 78) */
    run = dst.id;
    run.total_steps = 100;
    assert_bad_header(&dst, &run, good, 0, 0,
                      "checkpoint at step 120, beyond this run's 100 steps (were train.epochs "
                      "or train.max_steps lowered? --no-resume starts over)",
                      0);
    run = dst.id;
    run.batches_per_epoch = 50;
    assert_bad_header(&dst, &run, good, 0, 0,
                      "corrupt header (step 120 is not epoch 1, batch 42 of 50)", 1);
    run.batches_per_epoch = 40;
    assert_bad_header(&dst, &run, good, 0, 0,
                      "data cursor at batch 42 of an epoch of 40 batches (was it written with "
                      "another number of nodes?)",
                      0);
    run.batches_per_epoch = 78;
    run.total_steps = 120;
    ck_assert_int_eq(sl_checkpoint_check(good, &run, dst.lm, dst.opt, dst.st, NULL, &got, &damaged),
                     SL_OK);
    ck_assert_int_eq(got.step, 120);
    ck_assert_int_eq(damaged, 0);

    /* generations: the second save keeps the first as .prev, the third replaces it */
    ck_assert_int_eq(sl_checkpoint_prev_path(good, prev, sizeof prev), SL_OK);
    ck_assert_int_ne(access(prev, F_OK), 0);
    for (long step = 121; step <= 122; step++) {
        cur.step = step;
        cur.tokens = (uint64_t)step * 32;
        ck_assert_int_eq(
            sl_checkpoint_save(good, &src.id, &cur, src.be, src.lm, src.opt, src.st, NULL), SL_OK);
        ck_assert_int_eq(test_ckpt_i64(good, 144), step);
        ck_assert_int_eq(test_ckpt_i64(prev, 144), step - 1);
    }
    /* a model file keeps no generation */
    path_in(good, sizeof good, "bounds-model.bin");
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(sl_checkpoint_save(good, &src.id, &cur, src.be, src.lm, NULL, NULL, NULL),
                         SL_OK);
    ck_assert_int_eq(sl_checkpoint_prev_path(good, prev, sizeof prev), SL_OK);
    ck_assert_int_ne(access(prev, F_OK), 0);
    small_model_free(&src);
    small_model_free(&dst);
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

/* ---------------------------------------------------------------------- main */

static Suite *
node_checkpoint_suite(void)
{
    Suite *s = suite_create("node_checkpoint");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    tcase_add_test(core, test_describe_arch);
    tcase_add_test(limits, test_bad_checkpoints);
    tcase_add_test(limits, test_checkpoint_sync_state);
    tcase_add_test(limits, test_header_bounds);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    test_data_dir(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(node_checkpoint_suite(), tmp_root, "check_node_checkpoint");
}
