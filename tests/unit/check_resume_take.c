/* Unit tests of src/node: a run whose nodes have no checkpoint step in common
 * (sl_resume.h). Three nodes of bmuf (unique exchange), gossip-bmuf (staged through
 * the host mirror, the GPU nodes' path), allreduce and bmuf with overlapped sync
 * resumed through shoal run with
 * nodes 0 and 1 at step 9 and node 2 without a checkpoint, or with only an older one
 * (step 3), as after a restart of every process of a run in which node 2 had only come
 * back by rejoins: the run finishes with a model, node 2 starting from step 9 with the
 * parameters and sync state node 0's checkpoint holds, bit for bit; and a run where
 * all three hold step 9 (node 2 the checkpoint it saved when it took the step) ends at
 * the same model. Trains tiny models (E 16, one LSTM layer of 16) on a 20000-token
 * slice of Brown. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "node/sl_checkpoint.h"
#include "node/sl_rejoin.h"

#include "test_tool.h"
#include "test_util.h"

static char tmp_root[] = "/tmp/shoal-check-resume-take-XXXXXX";
static char data_dir[1024];
static char shoal_bin[1024];

/* bmuf with the unique exchange (touched-row sets live between syncs: step 9 is
 * mid-block for the row shards), gossip-bmuf staged, allreduce (its optimizer state
 * goes with the step), and bmuf with overlapped sync (at step 9 the update of the
 * sync of step 8 is pending: it goes with the sync state). */
static const struct {
    const char *sync, *stage;
} syncs[] = {
    {"{algorithm: bmuf, period: 2, embedding_period: 4, exchange: unique, embedding_shards: 2}",
     "0"},
    {"{algorithm: gossip-bmuf, period: 2, embedding_period: 4, embedding_shards: 2}", "1"},
    {"{algorithm: allreduce}", "0"},
    {"{algorithm: bmuf, period: 4, embedding_period: 4, overlap_steps: 2, embedding_shards: 2}",
     "0"},
};

static int
count_in(const char *text, const char *what)
{
    int n = 0;

    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* The file <tmp>/<run>/node-<k>/<name> into out. */
static void
node_file(char *out, size_t size, const char *run, int k, const char *name)
{
    snprintf(out, size, "%s/%s/node-%d/%s", tmp_root, run, k, name);
}

/* Copies file from to file to (to's node folder and run folder made as needed). */
static void
copy_file(const char *from, const char *to_run, int k, const char *to_name)
{
    char dst[1200], *data;
    size_t len;

    snprintf(dst, sizeof dst, "%s/%s", tmp_root, to_run);
    mkdir(dst, 0755);
    snprintf(dst, sizeof dst, "%s/%s/node-%d", tmp_root, to_run, k);
    mkdir(dst, 0755);
    data = test_read_file(from, &len);
    ck_assert_msg(data != NULL, "%s is missing", from);
    node_file(dst, sizeof dst, to_run, k, to_name);
    test_write_file(dst, data, len);
    free(data);
}

/* Node k's checkpoint generations (those there) of run from into run to; from NULL: an
 * empty node folder (a node that never saved one). */
static void
copy_node(const char *from, const char *to, int k)
{
    static const char *const names[] = {"checkpoint.bin", "checkpoint.bin.prev"};
    char src[1200];

    snprintf(src, sizeof src, "%s/%s", tmp_root, to);
    mkdir(src, 0755);
    snprintf(src, sizeof src, "%s/%s/node-%d", tmp_root, to, k);
    ck_assert_int_eq(mkdir(src, 0755), 0);
    for (int i = 0; from && i < 2; i++) {
        node_file(src, sizeof src, from, k, names[i]);
        if (access(src, F_OK) == 0)
            copy_file(src, to, k, names[i]);
    }
}

/* The sync section of the checkpoint held in d (its bytes after the length word) in
 * *at and *len. */
static void
sync_section(const unsigned char *d, size_t *at, size_t *len)
{
    size_t off = SL_CKPT_HEADER_BYTES + test_ckpt_float_bytes(d);

    *len = (size_t)sl_get_u64(d + off);
    *at = off + 8;
}

/* The checkpoint at path holds step, the parameters of the checkpoint at want and its
 * sync state, bit for bit. Returns the parameters' digest as the logs print it. */
static uint64_t
assert_took(const char *path, const char *want, long step)
{
    size_t na, nb, la, lb, sa, sb, za, zb;
    float *pa = test_model_params(path, &na), *pb = test_model_params(want, &nb);
    unsigned char *a = (unsigned char *)test_read_file(path, &la),
                  *b = (unsigned char *)test_read_file(want, &lb);
    uint64_t digest = sl_rejoin_digest(pb, nb);

    ck_assert_int_eq(test_ckpt_i64(path, 144), step);
    ck_assert_int_eq(test_ckpt_i64(want, 144), step);
    ck_assert_msg(na == nb && memcmp(pa, pb, na * sizeof *pa) == 0, "%s: not the parameters of %s",
                  path, want);
    sync_section(a, &sa, &za);
    sync_section(b, &sb, &zb);
    ck_assert_uint_le(sa + za, la);
    ck_assert_uint_le(sb + zb, lb);
    ck_assert_msg(za == zb && memcmp(a + sa, b + sb, za) == 0, "%s: not the sync state of %s", path,
                  want);
    free(pa);
    free(pb);
    free(a);
    free(b);
    return digest;
}

/* Runs of 9 and 3 steps (a checkpoint every 3) leave generations (9, 6) and (3) on
 * every node. Nodes 0-1 at (9, 6) with node 2 at none ("none"), or at (3) ("older"):
 * the nodes agree on step 9, node 0 sends it to node 2, every node says so in one line
 * and the run ends at step 12 with a model; node 2's checkpoint of step 9, saved when
 * it took it, holds node 0's parameters and sync state. All three at step 9, node 2
 * from that saved checkpoint ("ref"): they resume from their own, and end at the
 * "none" run's model bit for bit. */
START_TEST(test_three_node_take)
{
    const char *sync = syncs[_i].sync, *stage = syncs[_i].stage;
    char conf[1024], run[64], from[64], a[1200], b[1200], want[1024], *log;
    float *ma, *mb;
    size_t la, lb;
    uint64_t digest;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    for (int part = 0; part < 2; part++) {
        snprintf(run, sizeof run, "tk%d-%s", _i, part ? "3" : "9");
        test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 3, sync);
        free(test_shoal_staged_ok(
            shoal_bin, tmp_root, stage,
            (const char *[]){"run", conf, "--no-resume", "--set", "run.checkpoint_every=3", "--set",
                             part ? "train.max_steps=3" : "train.max_steps=9", NULL}));
    }
    for (int older = 0; older < 2; older++) {
        snprintf(run, sizeof run, "tk%d-%s", _i, older ? "older" : "none");
        snprintf(from, sizeof from, "tk%d-9", _i);
        copy_node(from, run, 0);
        copy_node(from, run, 1);
        snprintf(from, sizeof from, "tk%d-3", _i);
        copy_node(older ? from : NULL, run, 2);
        test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 3, sync);
        log = test_shoal_staged_ok(shoal_bin, tmp_root, stage, (const char *[]){"run", conf, NULL});
        snprintf(want, sizeof want,
                 "resume: no common checkpoint (nodes 0-1 have steps 9,6; node 2 has %s): "
                 "node 2 takes step 9 from node 0 (parameters and sync state), as a node that "
                 "comes back does\n",
                 older ? "step 3" : "none");
        ck_assert_msg(count_in(log, want) == 3, "%s", log);
        ck_assert_msg(count_in(log, "resuming from step 9 of 12") == 2, "%s", log);
        ck_assert_msg(count_in(log, "sent node 2 the state of step 9") == 1, "%s", log);
        node_file(a, sizeof a, run, 2, "checkpoint.bin.prev");
        snprintf(b, sizeof b, "%s/tk%d-9/node-0/checkpoint.bin", tmp_root, _i);
        digest = assert_took(a, b, 9);
        snprintf(want, sizeof want,
                 "took step 9 of 12 from node 0: its model (parameters %016" PRIx64
                 ") and sync state%s\n",
                 digest,
                 _i == 2 ? " and optimizer state"
                 : older ? ", with this node's optimizer state of step 3"
                         : "");
        ck_assert_msg(count_in(log, want) == 1, "%s", log);
        free(log);
        for (int k = 0; k < 3; k++) {
            node_file(a, sizeof a, run, k, "checkpoint.bin");
            ck_assert_int_eq(test_ckpt_i64(a, 144), 12);
        }
        snprintf(a, sizeof a, "%s/%s/model.bin", tmp_root, run);
        ck_assert_int_eq(access(a, R_OK), 0);
    }

    snprintf(run, sizeof run, "tk%d-ref", _i);
    snprintf(from, sizeof from, "tk%d-9", _i);
    copy_node(from, run, 0);
    copy_node(from, run, 1);
    snprintf(from, sizeof from, "tk%d-none", _i);
    node_file(a, sizeof a, from, 2, "checkpoint.bin.prev");
    copy_file(a, run, 2, "checkpoint.bin");
    test_resume_run_yaml(conf, sizeof conf, tmp_root, run, data_dir, 3, sync);
    log = test_shoal_staged_ok(shoal_bin, tmp_root, stage, (const char *[]){"run", conf, NULL});
    ck_assert_msg(count_in(log, "resuming from step 9 of 12") == 3, "%s", log);
    ck_assert_msg(!strstr(log, "no common checkpoint") && !strstr(log, "took step"), "%s", log);
    free(log);
    snprintf(a, sizeof a, "%s/tk%d-none/model.bin", tmp_root, _i);
    snprintf(b, sizeof b, "%s/tk%d-ref/model.bin", tmp_root, _i);
    ma = test_model_params(a, &la);
    mb = test_model_params(b, &lb);
    ck_assert_msg(la == lb && memcmp(ma, mb, la * sizeof *ma) == 0,
                  "the run that took step 9 ends elsewhere than the one that resumed it");
    free(ma);
    free(mb);
}
END_TEST

static Suite *
resume_take_suite(void)
{
    Suite *s = suite_create("resume_take");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 300);
    tcase_add_loop_test(core, test_three_node_take, 0, (int)(sizeof syncs / sizeof syncs[0]));
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    test_data_dir(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(resume_take_suite(), tmp_root, "check_resume_take");
}
