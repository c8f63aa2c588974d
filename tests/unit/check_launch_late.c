/* A `shoal node` started again for its rank once the others have finished the run
 * (under srun, mpirun or torchrun, without shoal run's supervisor): it finds the run's
 * model.bin, of this run and newer and further than its own checkpoint, and ends at
 * once with one line and exit status 0 rather than waiting for rank 0's table until
 * the rendezvous timeout; rank 0 started again the same. A node whose own checkpoint is
 * of the model's step (a job started again whole) and a node whose run.dir holds no
 * model (one not shared between hosts) still wait, and time out as before. The tiny
 * two-node run of test_launch.h, the launcher's variables of srun, a free tcp port for
 * the master; no process is left behind. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_launch.h"
#include "test_tool.h"

/* The run's --set options, the same for shoal run and the nodes started later. */
#define SETS                                                                                       \
    "--set", "run.checkpoint_every=8", "--set", "sync={algorithm: bmuf, timeout_ms: 2000}",        \
        "--set", key_set

static char key_set[1200];

/* `shoal node CONF` as srun's task rank of 2 (SLURM_PROCID, SLURM_NTASKS) with rank 0's
 * rendezvous at 127.0.0.1:port, the rendezvous timeout timeout_ms and run.dir dir
 * (NULL: the configuration's); its exit status, its stderr into *err. */
static int
late_node(const char *tag, const char *conf, int rank, int port, int timeout_ms, const char *dir,
          char **err)
{
    static char procid[32], portvar[48], timeout[64], dirset[1200];
    const char *const env[] = {
        procid, "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SHOAL_MASTER_ADDR=127.0.0.1", portvar, NULL};
    const char *args[16] = {"node", conf, "--quiet", SETS, "--set", timeout};
    char *out;
    int rc;

    snprintf(procid, sizeof procid, "SLURM_PROCID=%d", rank);
    snprintf(portvar, sizeof portvar, "SHOAL_MASTER_PORT=%d", port);
    snprintf(timeout, sizeof timeout, "cluster.rendezvous_timeout_ms=%d", timeout_ms);
    if (dir) {
        snprintf(dirset, sizeof dirset, "run.dir=%s", dir);
        args[11] = "--set";
        args[12] = dirset;
    }
    rc = launch_wait(launch_start(tag, env, args), tag, &out, err);
    free(out);
    return rc;
}

/* Node rank's files as a node that died between its two checkpoints leaves them: its
 * newest checkpoint (of the last step) gone, the one before it in its place. */
static void
lose_last_checkpoint(int rank)
{
    char path[1200], prev[1200];

    snprintf(path, sizeof path, "%s/late/node-%d/checkpoint.bin", launch_root, rank);
    snprintf(prev, sizeof prev, "%s.prev", path);
    ck_assert_int_eq(rename(prev, path), 0);
}

START_TEST(test_late_node_ends)
{
    char conf[1100], key[1100], model[1200], elsewhere[1200], want[2600], *out, *err;
    const char *const run[] = {"run", conf, "--quiet", SETS, NULL};
    int port;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "late", 2, ", max_steps: 16, eval_every_epoch: false");
    snprintf(key, sizeof key, "%s/late.key", launch_root);
    snprintf(key_set, sizeof key_set, "cluster.key_file=%s", key);
    ck_assert_int_eq(
        launch_wait(launch_start("keygen", NULL, (const char *const[]){"keygen", key, NULL}),
                    "keygen", &out, &err),
        0);
    free(out);
    free(err);
    ck_assert_int_eq(launch_wait(launch_start("late", NULL, run), "late", &out, &err), 0);
    free(out);
    free(err);
    snprintf(model, sizeof model, "%s/late/model.bin", launch_root);
    ck_assert(launch_exists(model));
    port = test_free_port();

    /* node 1 holds a checkpoint of the model's step: a job started again whole, whose
     * rank 0 may yet come; it waits as before */
    ck_assert_int_eq(late_node("whole", conf, 1, port, 2000, NULL, &err), 1);
    snprintf(want, sizeof want,
             "shoal: node 1: rendezvous: no table from rank 0 at 127.0.0.1:%d "
             "after 2 s\n",
             port);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    free(err);
    launch_assert_nothing_left();

    /* node 1 died after its checkpoint of step 8: the run ended without it */
    lose_last_checkpoint(1);
    ck_assert_int_eq(late_node("node1", conf, 1, port, 60000, NULL, &err), 0);
    snprintf(want, sizeof want,
             "shoal: node 1: the run ended without this node at step 16 (its model is at %s; "
             "this node's newest checkpoint: step 8): nothing to come back to\n",
             model);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    ck_assert_msg(strstr(err, "no table") == NULL, "%s", err);
    free(err);
    launch_assert_nothing_left();

    /* the same where its run.dir (another host's disk) holds no model: it times out */
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", launch_root);
    ck_assert_int_eq(late_node("unshared", conf, 1, port, 2000, elsewhere, &err), 1);
    ck_assert_msg(strstr(err, "no table from rank 0") != NULL, "%s", err);
    free(err);
    launch_assert_nothing_left();

    /* rank 0 started again late: nobody registers, the run's model says why */
    lose_last_checkpoint(0);
    ck_assert_int_eq(late_node("node0", conf, 0, port, 60000, NULL, &err), 0);
    ck_assert_msg(strstr(err, "shoal: node 0: the run ended without this node at step 16") != NULL,
                  "%s", err);
    free(err);
    launch_assert_nothing_left();
}
END_TEST

static Suite *
launch_late_suite(void)
{
    Suite *s = suite_create("launch_late");
    TCase *tc = tcase_create("late");

    tcase_set_timeout(tc, 4 * HANG_S);
    tcase_add_test(tc, test_late_node_ends);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_late_suite(), "check-launch-late");
}
