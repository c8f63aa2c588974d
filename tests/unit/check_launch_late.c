/* A `shoal node` started again for its rank once the others have finished the run
 * (under srun, mpirun or torchrun, without shoal run's supervisor): it finds the run's
 * model.bin, of this run and newer and further than its own checkpoint, and ends at
 * once with one line and exit status 0 rather than waiting for rank 0's table until
 * the rendezvous timeout; rank 0 started again the same. A node whose own checkpoint is
 * of the model's step (a job started again whole) and a node whose run.dir holds no
 * model (one not shared between hosts) still wait, and time out as before. The tiny
 * two-node run of test_launch.h, the launcher's variables of srun, a free tcp port for
 * the master; no process is left behind.
 * And two nodes coming back under cluster.security: mac that a relay left without a
 * table (in-process rendezvous on threads, over ipc): one that registers while rank 0
 * comes back itself is told to register again and comes back, and one whose answer was
 * lost has it again; before, each failed, and under shoal run its failure ended the
 * run. And a presence of rank 0 sent to rank 0 during the run (security none) is
 * refused. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "node/sl_rendezvous.h"
#include "node/sl_rendezvous_internal.h" /* a process's generation, given to a second one */
#include "test_exchange.h"
#include "test_launch.h"
#include "test_tool.h"

/* The run's --set options, the same for shoal run and the nodes started later. */
#define SETS                                                                                       \
    "--set", "run.checkpoint_every=8", "--set", "sync={algorithm: bmuf, timeout_ms: 2000}",        \
        "--set", key_set

static char key_set[1200];

/* Starts `shoal node CONF` as srun's task rank of 2 (SLURM_PROCID, SLURM_NTASKS) with
 * rank 0's rendezvous at 127.0.0.1:port, the rendezvous timeout timeout_ms and one more
 * --set (NULL: none); its pid. */
static pid_t
late_start(const char *tag, const char *conf, int rank, int port, int timeout_ms, const char *set)
{
    char procid[32], portvar[48], timeout[64];
    const char *const env[] = {
        procid, "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SHOAL_MASTER_ADDR=127.0.0.1", portvar, NULL};
    const char *args[16] = {"node", conf, "--quiet", SETS, "--set", timeout};

    snprintf(procid, sizeof procid, "SLURM_PROCID=%d", rank);
    snprintf(portvar, sizeof portvar, "SHOAL_MASTER_PORT=%d", port);
    snprintf(timeout, sizeof timeout, "cluster.rendezvous_timeout_ms=%d", timeout_ms);
    if (set) {
        args[11] = "--set";
        args[12] = set;
    }
    return launch_start(tag, env, args);
}

/* late_start's node waited for: its exit status, its stderr into *err. */
static int
late_node(const char *tag, const char *conf, int rank, int port, int timeout_ms, const char *set,
          char **err)
{
    char *out;
    int rc = launch_wait(late_start(tag, conf, rank, port, timeout_ms, set), tag, &out, err);

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
    /* but not a run that continues that one for longer (the model is not its end) */
    ck_assert_int_eq(late_node("longer", conf, 1, port, 2000, "train.max_steps=32", &err), 1);
    ck_assert_msg(strstr(err, "no table from rank 0") != NULL, "%s", err);
    free(err);
    launch_assert_nothing_left();
    ck_assert_int_eq(late_node("node1", conf, 1, port, 20000, NULL, &err), 0);
    snprintf(want, sizeof want,
             "shoal: node 1: the run ended without this node at step 16 (its model is at %s; "
             "this node's newest checkpoint: step 8): nothing to come back to\n",
             model);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    ck_assert_msg(strstr(err, "no table") == NULL, "%s", err);
    free(err);
    launch_assert_nothing_left();

    /* the whole job started again with those files (a requeue): rank 0 comes, the two
     * meet and node 1 takes the last step from node 0; both end well */
    {
        pid_t p1 = late_start("requeue1", conf, 1, port, 20000, NULL);
        pid_t p0 = late_start("requeue0", conf, 0, port, 20000, NULL);
        ck_assert_int_eq(launch_wait(p1, "requeue1", &out, &err), 0);
        ck_assert_msg(strstr(err, "nothing to come back to") == NULL, "%s", err);
        free(out);
        free(err);
        ck_assert_int_eq(launch_wait(p0, "requeue0", &out, &err), 0);
        free(out);
        free(err);
    }
    launch_assert_nothing_left();

    /* the same where its run.dir (another host's disk) holds no model: it times out */
    snprintf(elsewhere, sizeof elsewhere, "run.dir=%s/elsewhere", launch_root);
    ck_assert_int_eq(late_node("unshared", conf, 1, port, 2000, elsewhere, &err), 1);
    ck_assert_msg(strstr(err, "no table from rank 0") != NULL, "%s", err);
    free(err);
    launch_assert_nothing_left();

    /* rank 0 started again late: nobody registers, the run's model says why */
    lose_last_checkpoint(0);
    ck_assert_int_eq(late_node("node0", conf, 0, port, 20000, NULL, &err), 0);
    ck_assert_msg(strstr(err, "shoal: node 0: the run ended without this node at step 16") != NULL,
                  "%s", err);
    free(err);
    launch_assert_nothing_left();
}
END_TEST

/* ------------------------------------------- a registration while rank 0 comes back */

static sl_secret_t secret;

/* A rank's exchange under this file's secret, started. */
static void
exchange_start(test_exchange_t *x, int rank, const char *master, unsigned char fill)
{
    test_exchange_open(x, rank, master, &secret, fill, NULL);
    test_exchange_go(x);
}

/* Rank 1 between its steps: says it is present, installs and confirms a relayed key
 * (when confirm); the rank whose key came, or -1. */
static int
rank1_step(test_exchange_t *one, int confirm)
{
    int rank;

    ck_assert_int_eq(sl_rendezvous_present(one->r, &rank), SL_OK);
    if (rank >= 0 && confirm)
        sl_rendezvous_confirm(one->r, rank);
    test_sleep_ms(5); /* a step */
    return rank;
}

/* Under cluster.security: mac, rank 0 comes back to a run (ranks 1 and 2 ran with its
 * dead predecessor; rank 2 died too) and relays its own new key to rank 1, the node it
 * gathered; a new process for rank 2 registers just then. It is told to register again
 * (busy) and comes back once the new rank 0 runs: the live ranks confirm its key, and
 * it gets the table with rank 0's new key. (Before, it was refused, "rank 0 is coming
 * back to the run itself: start this node again", and failed; under shoal run a node
 * that fails with an error is not restarted but ends the run.) */
START_TEST(test_registration_while_rank0_comes_back)
{
    char master[1100], log[1100], *text;
    test_exchange_t node[3], zero, back;
    double end;
    int came = 0, rank;

    ck_assert_int_eq(sl_secret_make(&secret), SL_OK);
    snprintf(master, sizeof master, "ipc://%s/rdv-busy", launch_root);
    snprintf(log, sizeof log, "%s/rdv-busy.log", launch_root);
    ck_assert_ptr_nonnull(freopen(log, "w", stderr)); /* this test's process only */
    setvbuf(stderr, NULL, _IOLBF, 0);
    sl_log_set_level(SL_LOG_INFO);
    for (int r = 0; r < 3; r++)
        exchange_start(&node[r], r, master, (unsigned char)(r + 1));
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(pthread_join(node[r].thread, NULL), 0);
        ck_assert_msg(node[r].st == SL_OK, "rank %d: %s", r, node[r].msg);
    }
    /* ranks 0 and 2 die; rank 0 starts again and gathers rank 1, which is present */
    for (int r = 0; r < 3; r += 2) {
        sl_rendezvous_table_fini(&node[r].t);
        sl_rendezvous_destroy(&node[r].r);
    }
    exchange_start(&zero, 0, master, 0x55);
    for (end = sl_clock_now() + HANG_S; rank1_step(&node[1], 0) != 0;)
        ck_assert_msg(sl_clock_now() < end, "rank 1 never got the new rank 0's key");
    /* rank 0 now waits for rank 1 to confirm its key: rank 2's new process registers */
    exchange_start(&back, 2, master, 0x77);
    for (end = sl_clock_now() + HANG_S; !back.done;) {
        int said = (text = test_read_file(log, NULL)) && strstr(text, "told it to register again");
        free(text);
        if (said)
            break;
        ck_assert_msg(sl_clock_now() < end, "rank 0 never answered rank 2's registration");
        test_sleep_ms(5);
    }
    ck_assert_msg(!back.done, "rank 2's new process: %s", back.msg);
    sl_rendezvous_confirm(node[1].r, 0);
    for (end = sl_clock_now() + HANG_S; !zero.done;) {
        ck_assert_msg(sl_clock_now() < end, "the new rank 0 never ended its rendezvous");
        test_sleep_ms(5);
    }
    ck_assert_msg(zero.st == SL_OK, "the new rank 0: %s", zero.msg);
    ck_assert_int_eq(sl_rendezvous_rejoined(zero.r), 1);
    /* the run goes on: rank 0 admits between its steps, rank 1 confirms rank 2's key */
    for (end = sl_clock_now() + HANG_S; !back.done;) {
        sl_rdv_event_t ev;
        ck_assert_msg(sl_clock_now() < end, "rank 2 never came back");
        ck_assert_int_eq(sl_rendezvous_admit(zero.r, &ev, &rank), SL_OK);
        came += ev == SL_RDV_CAME_BACK && rank == 2;
        rank1_step(&node[1], 1);
    }
    ck_assert_msg(back.st == SL_OK, "rank 2's new process: %s", back.msg);
    ck_assert_int_eq(came, 1);
    ck_assert_int_eq(sl_rendezvous_rejoined(back.r), 1);
    ck_assert_int_eq(back.t.sessions[0], 0x55); /* the new rank 0's key */
    ck_assert_int_eq(back.t.sessions[SL_RDV_SESSION_BYTES], 2);
    ck_assert_int_eq(sl_rendezvous_session(node[1].r, 2)[0], 0x77);
    test_exchange_end(&back);
    test_exchange_end(&zero);
    sl_rendezvous_table_fini(&node[1].t);
    sl_rendezvous_destroy(&node[1].r);
}
END_TEST

/* Three ranks under cluster.security: mac meet; rank 2's process dies; the first
 * exchanges of an ended run are done with (ranks 0 and 1 go on). */
static void
meet_then_lose_rank2(test_exchange_t *node, const char *master)
{
    ck_assert_int_eq(sl_secret_make(&secret), SL_OK);
    for (int r = 0; r < 3; r++)
        exchange_start(&node[r], r, master, (unsigned char)(r + 1));
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(pthread_join(node[r].thread, NULL), 0);
        ck_assert_msg(node[r].st == SL_OK, "rank %d: %s", r, node[r].msg);
    }
    sl_rendezvous_table_fini(&node[2].t);
    sl_rendezvous_destroy(&node[2].r);
}

/* A new process for rank 2 comes back under mac: rank 0 relays its key to rank 1 and
 * waits for the confirmation; meanwhile the node's connection to rank 0 breaks and
 * comes back under a new ZeroMQ identity (here: a second rendezvous of the same
 * process's generation; the first one closed), so rank 0's answer would go where
 * nobody is. Its registration, sent again every second, has it answered where it came
 * from, and it gets the table with rank 1's key. (Before, rank 0 took the registration
 * again for one whose answer was on its way and ignored it: the node waited for the
 * rendezvous timeout and failed, and under shoal run the run ended.) */
static volatile sig_atomic_t lost_stop;

static void
on_lost(int sig)
{
    (void)sig;
    lost_stop = 1;
}

START_TEST(test_answer_lost_sent_again)
{
    char master[1100];
    test_exchange_t node[3], first, again;
    struct sigaction sa;
    double end;
    int came = 0, rank;

    snprintf(master, sizeof master, "ipc://%s/rdv-again", launch_root);
    meet_then_lose_rank2(node, master);
    test_exchange_open(&first, 2, master, &secret, 0x77, &lost_stop);
    test_exchange_go(&first);
    for (end = sl_clock_now() + HANG_S; !came;) {
        sl_rdv_event_t ev;
        ck_assert_msg(sl_clock_now() < end, "rank 0 never saw rank 2 come back");
        ck_assert_int_eq(sl_rendezvous_admit(node[0].r, &ev, &rank), SL_OK);
        came = ev == SL_RDV_CAME_BACK && rank == 2;
        test_sleep_ms(5);
    }
    for (end = sl_clock_now() + HANG_S; rank1_step(&node[1], 0) != 2;)
        ck_assert_msg(sl_clock_now() < end, "rank 1 never got rank 2's new key");
    /* the connection breaks: the process registers again on a new one (the flag set by
     * a handler on the exchange's thread, as a signal sets a node's) */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_lost;
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    (void)pthread_kill(first.thread, SIGUSR1); /* one already done needs none */
    ck_assert_int_eq(pthread_join(first.thread, NULL), 0);
    ck_assert_msg(!first.done || first.st == SL_ERR_SHUTDOWN, "%s", first.msg);
    test_exchange_open(&again, 2, master, &secret, 0x77, NULL);
    again.r->generation = first.r->generation; /* the same process */
    sl_rendezvous_table_fini(&first.t);
    sl_rendezvous_destroy(&first.r);
    test_exchange_go(&again);
    sl_rendezvous_confirm(node[1].r, 2);
    for (end = sl_clock_now() + HANG_S; !again.done;) {
        sl_rdv_event_t ev;
        ck_assert_msg(sl_clock_now() < end, "rank 2 never had its table");
        ck_assert_int_eq(sl_rendezvous_admit(node[0].r, &ev, &rank), SL_OK);
        ck_assert_int_eq(ev, SL_RDV_NOTHING); /* no second comeback */
        rank1_step(&node[1], 1);
    }
    ck_assert_msg(again.st == SL_OK, "rank 2: %s", again.msg);
    ck_assert_int_eq(sl_rendezvous_rejoined(again.r), 1);
    ck_assert_int_eq(again.t.sessions[SL_RDV_SESSION_BYTES], 2);
    test_exchange_end(&again);
    for (int r = 1; r >= 0; r--) {
        sl_rendezvous_table_fini(&node[r].t);
        sl_rendezvous_destroy(&node[r].r);
    }
}
END_TEST

/* A presence of rank 0 during the run, from a process that is not rank 0 (without
 * security anyone on the machine can send one), of a process started later than it:
 * rank 0 refuses it as it refuses a registration of rank 0 (it is rank 0 itself, and
 * sends no presence). Before, it took it: its own endpoint and key in the table it gives
 * the nodes that come back were the sender's, and it said it had found rank 0. */
START_TEST(test_presence_of_rank0_refused)
{
    char master[1100], own[SL_RDV_ENDPOINT_MAX];
    static const char fake[] = "tcp://127.0.0.1:1";
    unsigned char msg[REGISTER_BYTES + sizeof fake], answer[600];
    test_exchange_t node[3];
    void *ctx, *s;
    int zero = 0, n = -1, rank;
    double end;

    snprintf(master, sizeof master, "ipc://%s/rdv-presence0", launch_root);
    for (int r = 0; r < 3; r++) {
        test_exchange_open(&node[r], r, master, NULL, (unsigned char)(r + 1), NULL);
        test_exchange_go(&node[r]);
    }
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(pthread_join(node[r].thread, NULL), 0);
        ck_assert_msg(node[r].st == SL_OK, "rank %d: %s", r, node[r].msg);
    }
    snprintf(own, sizeof own, "%s", sl_rendezvous_endpoint(node[0].r, 0));
    ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(ctx);
    s = zmq_socket(ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero), 0);
    ck_assert_int_eq(zmq_connect(s, master), 0);
    sl_rdv_put_head(msg, KIND_PRESENT, 0x5eed);
    sl_put_u32(msg + HEAD_BYTES, 0);
    sl_put_u32(msg + HEAD_BYTES + 4, 3);
    memset(msg + HEAD_BYTES + 8, 0xee, SESSION_BYTES);
    sl_put_u64(msg + HEAD_BYTES + 8 + SESSION_BYTES, UINT64_MAX);
    memcpy(msg + REGISTER_BYTES, fake, sizeof fake - 1);
    ck_assert_int_eq(zmq_send(s, msg, sizeof msg - 1, 0), (int)sizeof msg - 1);
    for (end = sl_clock_now() + HANG_S; n < 0;) {
        sl_rdv_event_t ev;
        ck_assert_msg(sl_clock_now() < end, "rank 0 never answered the presence of rank 0");
        ck_assert_int_eq(sl_rendezvous_admit(node[0].r, &ev, &rank), SL_OK);
        ck_assert_msg(ev == SL_RDV_NOTHING, "rank 0 took a presence of rank 0 (event %d)", ev);
        n = zmq_recv(s, answer, sizeof answer, ZMQ_DONTWAIT);
        test_sleep_ms(5);
    }
    ck_assert_int_eq(sl_rdv_head_kind(answer, (size_t)n), KIND_REFUSAL);
    ck_assert_str_eq(sl_rendezvous_endpoint(node[0].r, 0), own);
    ck_assert_int_eq(sl_rendezvous_session(node[0].r, 0)[0], 1);
    zmq_close(s);
    zmq_ctx_term(ctx);
    for (int r = 0; r < 3; r++) {
        sl_rendezvous_table_fini(&node[r].t);
        sl_rendezvous_destroy(&node[r].r);
    }
}
END_TEST

static Suite *
launch_late_suite(void)
{
    Suite *s = suite_create("launch_late");
    TCase *tc = tcase_create("late");

    tcase_set_timeout(tc, 4 * HANG_S);
    tcase_add_test(tc, test_late_node_ends);
    tcase_add_test(tc, test_registration_while_rank0_comes_back);
    tcase_add_test(tc, test_answer_lost_sent_again);
    tcase_add_test(tc, test_presence_of_rank0_refused);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_late_suite(), "check-launch-late");
}
