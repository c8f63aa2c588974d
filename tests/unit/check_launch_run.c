/* Unit tests of the built shoal binary's `run` and `node` commands on a 20000-token
 * slice of Brown (vocab 500, E 16, one layer of 16, B 4 x T 8): shares, checkpoints,
 * failures, interrupts, resume, a node's abort reaching its peer, usage errors, a run
 * started as torchrun starts one (its map, full log lines, the run's tokens/s), --init
 * of shoal run and shoal node, and no process left behind. The cluster keys and the
 * rendezvous are in check_launch.c; restarts and the watchdog in check_launch_restart.c. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <math.h>
#include <regex.h>
#include <signal.h>
#include <stdint.h>
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
#include "node/sl_export.h"
#include "node/sl_train.h"

#include "test_launch.h"
#include "test_tool.h"

/* shoal run -n 3: every node trains one epoch of its own third, exactly as the trainer
 * does for rank r of 3 in-process; per-node and run-level files; nothing left. */
START_TEST(test_run_three_nodes)
{
    char conf[1100], path[1200], mine[1200], *out, *err, *a, *b;
    long bpe[3], whole;
    size_t alen, blen;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "three", 1, "");
    ck_assert_int_eq(
        launch_wait(launch_start("three", NULL, (const char *[]){"run", conf, "-n", "3", NULL}),
                    "three", &out, &err),
        0);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(out, "shoal: node 0: done: 1 epoch, ") &&
                      strstr(out, "shoal: node 2: done: ") && strstr(out, "shoal: done: 3 nodes, "),
                  "stdout: %s\nstderr: %s", out, err);
    ck_assert_msg(strstr(err, "step ") && strstr(err, " | 3 nodes | "), "stderr: %s", err);
    free(out);
    free(err);

    whole = test_share_batches(conf, 0, 1, 4, 8);
    for (int r = 0; r < 3; r++) {
        bpe[r] = test_share_batches(conf, r, 3, 4, 8);
        ck_assert_int_lt(bpe[r], whole / 2);
        snprintf(path, sizeof path, "%s/three/node-%d/checkpoint.bin", launch_root, r);
        ck_assert_int_eq(launch_header_i64(path, 144), bpe[r]);         /* step */
        ck_assert_int_eq(launch_header_i64(path, 152), 1);              /* epoch */
        ck_assert_int_eq(launch_header_i64(path, 160), 0);              /* batch index */
        ck_assert_int_eq(launch_header_i64(path, 176), bpe[r] * 4 * 8); /* tokens */
        snprintf(path, sizeof path, "%s/three/node-%d/metrics.jsonl", launch_root, r);
        ck_assert(launch_exists(path));
        snprintf(path, sizeof path, "%s/three/node-%d/model.bin", launch_root, r);
        ck_assert(launch_exists(path));
    }
    snprintf(path, sizeof path, "%s/three/config.yaml", launch_root);
    a = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(strstr(a, "\ncluster:\n  nodes: 3\n  transport: ipc\n"));
    free(a);
    snprintf(path, sizeof path, "%s/three/summary.json", launch_root);
    a = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(strstr(a, "\"nodes\": 3"));
    ck_assert_ptr_nonnull(strstr(a, "\"rank\": 0"));
    free(a);
    snprintf(path, sizeof path, "%s/three/node-1/config.yaml", launch_root);
    ck_assert(!launch_exists(path));

    /* node 1 trained exactly what rank 1 of 3 trains in-process (all but the time) */
    {
        sl_config_t cfg;
        sl_train_opts_t opts;
        sl_train_result_t res;
        sl_config_init(&cfg);
        ck_assert(sl_config_load_file(&cfg, conf) == SL_OK);
        snprintf(path, sizeof path, "run.dir=%s/three-inproc", launch_root);
        ck_assert(sl_config_set(&cfg, path) == SL_OK);
        ck_assert(sl_config_set(&cfg, "cluster.nodes=3") == SL_OK);
        sl_log_set_level(SL_LOG_WARN);
        sl_train_opts_init(&opts);
        opts.rank = 1;
        opts.nranks = 3;
        opts.quiet = 1;
        ck_assert_msg(sl_train_run(&cfg, &opts, &res) == SL_OK, "%s", sl_err_msg());
        ck_assert_int_eq(res.steps, bpe[1]);
        sl_config_fini(&cfg);
    }
    snprintf(path, sizeof path, "%s/three/node-1/checkpoint.bin", launch_root);
    snprintf(mine, sizeof mine, "%s/three-inproc/node-1/checkpoint.bin", launch_root);
    a = test_read_file(path, &alen);
    b = test_read_file(mine, &blen);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, 184) == 0);
    ck_assert(memcmp(a + 192, b + 192, alen - 192 - 8) == 0);
    free(b);
    /* and node 0, on other data, ended elsewhere */
    snprintf(path, sizeof path, "%s/three/node-0/checkpoint.bin", launch_root);
    b = test_read_file(path, &blen);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a + 192, b + 192, 4000) != 0);
    free(a);
    free(b);
}
END_TEST

/* tcp transport; SIGINT to shoal run stops every node with a checkpoint (exit 130);
 * the same command then continues every node from it. */
START_TEST(test_run_interrupt_resume)
{
    char conf[1100], path[1200], *out, *err, line[512];
    const char *const args[] = {"run",         conf,
                                "-n",          "2",
                                "--transport", "tcp",
                                "--set",       "train.epochs=1000",
                                "--set",       "train.max_steps=2000",
                                NULL};
    pid_t pid;
    long at[2];

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "intr", 2, ", eval_every_epoch: false");
    pid = launch_start("intr", NULL, args);
    snprintf(path, sizeof path, "%s/intr/node-1/metrics.jsonl", launch_root);
    test_wait_file(path, 1, pid, HANG_S);
    kill(pid, SIGINT);
    ck_assert_int_eq(launch_wait(pid, "intr", &out, &err), 130);
    launch_assert_nothing_left();
    snprintf(path, sizeof path,
             "shoal: interrupted; every node saved its checkpoint under %s/intr; run the same "
             "command to resume",
             launch_root);
    ck_assert_str_eq(launch_last_line(err, line, sizeof line), path);
    free(out);
    free(err);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/intr/node-%d/checkpoint.bin", launch_root, r);
        at[r] = launch_header_i64(path, 144);
        ck_assert_int_gt(at[r], 0);
        ck_assert_int_lt(at[r], 2000);
    }

    ck_assert_int_eq(
        launch_wait(launch_start("intr2", (const char *[]){"SHOAL_LOG=info", NULL}, args), "intr2",
                    &out, &err),
        0);
    launch_assert_nothing_left();
    for (int r = 0; r < 2; r++) {
        char expect[128];
        snprintf(expect, sizeof expect, "node %d: train: info: resuming from step %ld of 2000", r,
                 at[r]);
        ck_assert_msg(strstr(err, expect) != NULL, "no '%s' in: %s", expect, err);
        snprintf(path, sizeof path, "%s/intr/node-%d/checkpoint.bin", launch_root, r);
        ck_assert_int_eq(launch_header_i64(path, 144), 2000);
    }
    free(out);
    free(err);
}
END_TEST

/* A node killed mid-run: shoal run stops the others (they save checkpoints), names the
 * node, exits non-zero, and leaves no process. */
START_TEST(test_run_node_killed)
{
    char conf[1100], path[1200], *out, *err, line[512];
    pid_t pid, victim;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "killed", 3, ", epochs: 1000, eval_every_epoch: false");
    pid = launch_start("killed", NULL, (const char *[]){"run", conf, "--quiet", NULL});
    snprintf(path, sizeof path, "%s/killed/node-1/metrics.jsonl", launch_root);
    test_wait_file(path, 1, pid, HANG_S);
    victim = test_child_named(pid, "shoal node 1"); /* it wrote the file: it has its name */
    ck_assert_int_gt(victim, 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(launch_wait(pid, "killed", &out, &err), 1);
    launch_assert_nothing_left();
    ck_assert_int_eq(kill(victim, 0), -1);
    ck_assert_str_eq(launch_last_line(err, line, sizeof line), "shoal: node 1 killed by signal 9");
    ck_assert_str_eq(out, "");
    for (int r = 0; r < 3; r += 2) {
        snprintf(path, sizeof path, "%s/killed/node-%d/checkpoint.bin", launch_root, r);
        ck_assert_int_gt(launch_header_i64(path, 144), 0);
    }
    free(out);
    free(err);
}
END_TEST

/* A node that fails with an error: shoal run names it and its error line. */
START_TEST(test_run_node_fails)
{
    char conf[1100], path[1200], *out, *err, line[512], expect[1400];

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "fails", 3, ", epochs: 1000");
    snprintf(path, sizeof path, "%s/fails", launch_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/fails/node-2", launch_root); /* a file where its dir goes */
    test_write_file(path, "in the way\n", 11);
    ck_assert_int_eq(launch_wait(launch_start("fails", NULL, (const char *[]){"run", conf, NULL}),
                                 "fails", &out, &err),
                     1);
    launch_assert_nothing_left();
    snprintf(expect, sizeof expect,
             "shoal: node 2 failed: %s/fails/node-2: cannot create directory: Not a directory",
             launch_root);
    launch_last_line(err, line, sizeof line);
    ck_assert_msg(strcmp(line, expect) == 0, "stderr: %s", err);
    free(out);
    free(err);

    /* no place for the nodes' sockets: one line that says where they go */
    snprintf(path, sizeof path, "TMPDIR=%s/no-such-dir", launch_root);
    ck_assert_int_eq(launch_wait(launch_start("notmp", (const char *[]){path, NULL},
                                              (const char *[]){"run", conf, NULL}),
                                 "notmp", &out, &err),
                     1);
    launch_assert_nothing_left();
    snprintf(expect, sizeof expect, "shoal: %s/no-such-dir/shoal-run-", launch_root);
    ck_assert_msg(strncmp(err, expect, strlen(expect)) == 0 &&
                      strchr(err, '\n') == err + strlen(err) - 1 &&
                      strstr(err, ": No such file or directory (the nodes' sockets go under "
                                  "$TMPDIR, else /tmp: set it to a directory this user can "
                                  "write)\n"),
                  "stderr: %s", err);
    free(out);
    free(err);
}
END_TEST

/* `shoal keygen` writes launch_root/NAME.key, mode 0600; set receives
 * "cluster.key_file=PATH" for --set. */
static void
make_key_file(const char *name, char *set, size_t size)
{
    char path[1100], *out, *err;
    struct stat sb;

    snprintf(path, sizeof path, "%s/%s.key", launch_root, name);
    ck_assert_int_eq(
        launch_wait(launch_start("keygen", NULL, (const char *[]){"keygen", path, NULL}), "keygen",
                    &out, &err),
        0);
    free(out);
    free(err);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    snprintf(set, size, "cluster.key_file=%s", path);
}

/* The key file's rules, each a one-line error before anything is opened: shoal node
 * without one (CURVE is the default), a key file others can read, one that is not a key
 * file; shoal keygen never overwrites. */
START_TEST(test_node_key_file)
{
    char conf[1100], key[1100], set[1200], expect[1400], *out, *err;
    const char *node[] = {"node",     conf,          "--rank", "1", "--size", "2",
                          "--master", "127.0.0.1:1", "--set",  set, NULL};

    if (!launch_have_shoal())
        return;
    launch_tiny_yaml(conf, sizeof conf, "keys", 2, "");
    snprintf(set, sizeof set, "cluster.key_file=");
    ck_assert_int_eq(launch_wait(launch_start("keys", NULL, node), "keys", &out, &err), 2);
    ck_assert_str_eq(err, "shoal: node 1: cluster.security is curve but cluster.key_file is not "
                          "set: make the run's secret once with 'shoal keygen FILE' on a "
                          "filesystem every node reads, then --set cluster.key_file=FILE\n");
    free(out);
    free(err);

    make_key_file("keys", set, sizeof set);
    snprintf(key, sizeof key, "%s/keys.key", launch_root);
    ck_assert_int_eq(launch_wait(launch_start("keys", NULL, (const char *[]){"keygen", key, NULL}),
                                 "keys", &out, &err),
                     1);
    snprintf(expect, sizeof expect,
             "shoal: keygen: %s: File exists (a key file is never overwritten)\n", key);
    ck_assert_str_eq(err, expect);
    free(out);
    free(err);

    ck_assert_int_eq(chmod(key, 0640), 0);
    ck_assert_int_eq(launch_wait(launch_start("keys", NULL, node), "keys", &out, &err), 1);
    snprintf(expect, sizeof expect,
             "shoal: node 1: cluster.key_file %s: mode 640 lets others read the run's secret; "
             "chmod 600 %s\n",
             key, key);
    ck_assert_str_eq(err, expect);
    free(out);
    free(err);

    ck_assert_int_eq(unlink(key), 0);
    test_write_file(key, "shoal-secret-1 0123\n", 20);
    ck_assert_int_eq(chmod(key, 0600), 0);
    ck_assert_int_eq(launch_wait(launch_start("keys", NULL, node), "keys", &out, &err), 1);
    snprintf(expect, sizeof expect,
             "shoal: node 1: cluster.key_file %s: not a shoal key file (make one with shoal "
             "keygen)\n",
             key);
    ck_assert_str_eq(err, expect);
    free(out);
    free(err);
}
END_TEST

/* Two `shoal node` processes; rank 1 fails after the rendezvous and tells rank 0, which
 * stops after its step with a checkpoint. */
START_TEST(test_node_abort_reaches_peer)
{
    char conf[1100], path[1200], master[64], *out, *err, line[512], expect[1400], key_set[1200];
    pid_t p0, p1;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "abort", 2, ", epochs: 1000, eval_every_epoch: false");
    snprintf(path, sizeof path, "%s/abort", launch_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/abort/node-1", launch_root);
    test_write_file(path, "in the way\n", 11);
    snprintf(master, sizeof master, "127.0.0.1:%d", test_free_port());
    make_key_file("abort", key_set, sizeof key_set);
    p0 = launch_start(
        "abort0", NULL,
        (const char *[]){"node", conf, "--rank", "0", "--master", master, "--set", key_set, NULL});
    p1 = launch_start("abort1", (const char *[]){"SLURM_PROCID=1", "SLURM_NTASKS=2", NULL},
                      (const char *[]){"node", conf, "--master", master, "--set", key_set, NULL});
    ck_assert_int_eq(launch_wait(p1, "abort1", &out, &err), 1);
    snprintf(expect, sizeof expect, "shoal: node 1: %s/abort/node-1: cannot create directory",
             launch_root);
    launch_last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    free(out);
    free(err);
    ck_assert_int_eq(launch_wait(p0, "abort0", &out, &err), 1);
    snprintf(expect, sizeof expect,
             "shoal: node 0: stopped: node 1 failed: %s/abort/node-1: cannot create directory",
             launch_root);
    launch_last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    snprintf(path, sizeof path, "%s/abort/node-0/checkpoint.bin", launch_root);
    ck_assert_int_gt(launch_header_i64(path, 144), 0);
    launch_assert_nothing_left();
    free(out);
    free(err);
}
END_TEST

/* Does the line starting at p (up to its newline) match the extended regex pattern? */
static int
line_matches(const char *p, const char *pattern)
{
    char line[1024];
    regex_t re;
    int ok;

    snprintf(line, sizeof line, "%.*s", (int)strcspn(p, "\n"), p);
    ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    ok = regexec(&re, line, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* The resolved configuration the run in launch_root/run wrote holds both lines. */
static void
assert_run_config(const char *run, const char *line1, const char *line2)
{
    char path[1200], *text;

    snprintf(path, sizeof path, "%s/%s/config.yaml", launch_root, run);
    text = test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "%s: not read", path);
    ck_assert_msg(strstr(text, line1) && strstr(text, line2), "%s:\n%s", path, text);
    free(text);
}

/* Two `shoal node` processes as torchrun starts them: RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT and cluster.nodes auto, no SHOAL_* variable, no flag. Rank 0
 * logs full lines (time, host) with the map (both pids, cpu, lanes), says the run's
 * tokens/s, and its files carry the version and the wall-clock times. */
START_TEST(test_node_torchrun_env)
{
    static char port[64];
    char conf[1100], key_set[1200], path[1200], pattern[512], *out, *err, *text, *p;
    /* the launcher's 2 nodes split the global batch of 4 (the file's batch is 4) */
    const char *args[] = {"node",  conf,    "--set", "cluster.nodes=auto",
                          "--set", key_set, "--set", "train.global_batch=4",
                          NULL};
    pid_t p0, p1;
    int steps = 0;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "torchrun", 3, ", max_steps: 20");
    make_key_file("torchrun", key_set, sizeof key_set);
    snprintf(port, sizeof port, "MASTER_PORT=%d", test_free_port());
    p1 = launch_start("torch1",
                      (const char *[]){"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1",
                                       "MASTER_ADDR=127.0.0.1", port, NULL},
                      args);
    p0 = launch_start("torch0",
                      (const char *[]){"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0",
                                       "MASTER_ADDR=127.0.0.1", port, "SHOAL_LOG=info",
                                       "SHOAL_LOG_FORMAT=full", NULL},
                      args);
    ck_assert_int_eq(launch_wait(p1, "torch1", &out, &err), 0);
    free(out);
    free(err);
    ck_assert_int_eq(launch_wait(p0, "torch0", &out, &err), 0);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(out, "shoal: node 0: run: 2 nodes, ") != NULL, "%s", out);
    p = strstr(err, " shoal node 0: node: info: map: 2 nodes on 1 host");
    ck_assert_msg(p != NULL, "%s", err);
    for (int r = 0; r < 2; r++) {
        snprintf(pattern, sizeof pattern,
                 "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z %s shoal "
                 "node 0: node: info: map: rank %d: host %s, pid %d, device cpu, lanes on$",
                 sl_log_host(), r, sl_log_host(), (int)(r ? p1 : p0));
        p = strchr(p, '\n') + 1;
        ck_assert_msg(line_matches(p, pattern), "line '%.*s' is not /%s/", (int)strcspn(p, "\n"), p,
                      pattern);
    }
    free(out);
    free(err);

    snprintf(path, sizeof path, "%s/torchrun/summary.json", launch_root);
    text = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_int_eq((int)test_json_num(text, "nodes"), 2);
    ck_assert_int_eq((int)test_json_num(text, "run_nodes_reported"), 2);
    ck_assert(test_json_num(text, "run_tokens_per_s") > test_json_num(text, "tokens_per_s"));
    ck_assert(test_json_num(text, "wall_time_s") >= test_json_num(text, "train_time_s"));
    ck_assert_msg(strstr(text, "\"version\": \"" PACKAGE_VERSION "\"") != NULL, "%s", text);
    ck_assert(
        line_matches(strstr(text, "\"started_at\": "),
                     "^\"started_at\": \"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z\",$"));
    ck_assert(line_matches(strstr(text, "\"finished_at\": "),
                           "^\"finished_at\": \"[0-9-]{10}T[0-9:]{8}\\.[0-9]{3}Z\",$"));
    free(text);
    assert_run_config("torchrun", "\n  batch: 2\n", "\n  global_batch: 4\n");
    snprintf(path, sizeof path, "%s/torchrun/node-1/metrics.jsonl", launch_root);
    text = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    for (p = text; *p; p += strcspn(p, "\n") + 1) {
        ck_assert_msg(line_matches(p, ",\"wall_time\":\"[0-9-]{10}T[0-9:]{8}\\.[0-9]{3}Z\"}$"),
                      "%.*s", (int)strcspn(p, "\n"), p);
        if (strncmp(p, "{\"step\":", 8) == 0) {
            ck_assert_msg(line_matches(p, ",\"version\":\"" PACKAGE_VERSION "\",\"wall_time\""),
                          "%.*s", (int)strcspn(p, "\n"), p);
            steps++;
        }
    }
    ck_assert_int_eq(steps, 2); /* log_every 10 of 20 steps */
    free(text);
}
END_TEST

/* bmuf over 3 shoal node processes, rank 1 writing to a run directory of its own (as
 * on a host with its own disk): the members hold the final average bit for bit, so
 * rank 1's directory gets the run's model too, unevaluated, while rank 2's copy in the
 * shared directory gives way to the writer's evaluated file, whichever came first. */
START_TEST(test_node_members_place_model)
{
    static char port[64], rank_var[3][16], local_var[3][16];
    char conf[1100], key_set[1200], dir_set[2][1200], path[2][1200], *out, *err;
    pid_t pid[3];
    float *params[2];
    size_t n[2];

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "place", 3, ", max_steps: 20");
    make_key_file("place", key_set, sizeof key_set);
    snprintf(port, sizeof port, "MASTER_PORT=%d", test_free_port());
    snprintf(dir_set[0], sizeof dir_set[0], "run.dir=%s/place", launch_root);
    snprintf(dir_set[1], sizeof dir_set[1], "run.dir=%s/place-own", launch_root);
    for (int r = 0; r < 3; r++) {
        char tag[16];
        snprintf(rank_var[r], sizeof rank_var[r], "RANK=%d", r);
        snprintf(local_var[r], sizeof local_var[r], "LOCAL_RANK=%d", r);
        snprintf(tag, sizeof tag, "place%d", r);
        pid[r] = launch_start(tag,
                              (const char *[]){rank_var[r], "WORLD_SIZE=3", local_var[r],
                                               "MASTER_ADDR=127.0.0.1", port, NULL},
                              (const char *[]){"node", conf, "--set", "cluster.nodes=auto", "--set",
                                               key_set, "--set", "sync.algorithm=bmuf", "--set",
                                               "sync.period=5", "--set", dir_set[r == 1], NULL});
    }
    for (int r = 0; r < 3; r++) {
        char tag[16];
        snprintf(tag, sizeof tag, "place%d", r);
        ck_assert_int_eq(launch_wait(pid[r], tag, &out, &err), 0);
        free(out);
        free(err);
    }
    launch_assert_nothing_left();

    snprintf(path[0], sizeof path[0], "%s/place/model.bin", launch_root);
    snprintf(path[1], sizeof path[1], "%s/place-own/model.bin", launch_root);
    for (int i = 0; i < 2; i++) {
        sl_ckpt_info_t info;
        ck_assert_msg(sl_checkpoint_inspect(path[i], &info) == SL_OK, "%s", sl_err_msg());
        ck_assert(info.has_meta);
        ck_assert_int_eq(info.meta.models_averaged, 3);
        ck_assert_int_eq(info.cur.step, 20);
        /* the writer's file is evaluated, the copy is not */
        ck_assert_msg(isnan(info.meta.valid_loss) == (i == 1), "%s: valid loss %g", path[i],
                      info.meta.valid_loss);
        sl_checkpoint_info_fini(&info);
        params[i] = test_model_params(path[i], &n[i]);
    }
    ck_assert_uint_eq(n[0], n[1]);
    ck_assert(memcmp(params[0], params[1], n[0] * sizeof(float)) == 0);
    free(params[0]);
    free(params[1]);
}
END_TEST

/* Each node's model.bin and the run's average in <tmp>/<run> hold the n parameters of
 * want (same): bit for bit, or (same 0) not. */
static void
assert_models(const char *run, const float *want, size_t n, int same)
{
    char path[1200];

    for (int r = -1; r < 2; r++) {
        size_t k;
        float *got;

        if (r < 0)
            snprintf(path, sizeof path, "%s/%s/model.bin", launch_root, run);
        else
            snprintf(path, sizeof path, "%s/%s/node-%d/model.bin", launch_root, run, r);
        got = test_model_params(path, &k);
        ck_assert_uint_eq(k, n);
        ck_assert_msg((memcmp(got, want, n * sizeof *got) == 0) == same,
                      "%s: %s the weights of --init", path, same ? "not" : "still");
        free(got);
    }
}

/* --init of shoal run and shoal node: every node, starting at step 0, takes the weights
 * of an export, and the sync (bmuf, gossip-bmuf) starts from them: a step so small (lr
 * 1e-30) that no weight moves leaves each node's model.bin and the run's average equal
 * to them. Without --init the same runs end elsewhere. */
START_TEST(test_init_run_and_node)
{
    char conf[1100], node_conf[1100], weights[1100], key_set[1200], dir[1200], master[64];
    char *out, *err;
    const char *set_lr = "train.optimizer.lr=1e-30";
    sl_config_t cfg;
    sl_train_opts_t opts;
    sl_train_result_t res;
    sl_export_result_t er;
    size_t n;
    float *want;
    pid_t p0, p1;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "init", 2, ", max_steps: 2");
    launch_tiny_yaml(node_conf, sizeof node_conf, "initnode", 2, ", max_steps: 2");
    /* the weights: 5 steps of one node, exported */
    sl_config_init(&cfg);
    ck_assert(sl_config_load_file(&cfg, conf) == SL_OK);
    snprintf(dir, sizeof dir, "run.dir=%s/init-src", launch_root);
    ck_assert(sl_config_set(&cfg, dir) == SL_OK);
    ck_assert(sl_config_set(&cfg, "cluster.nodes=1") == SL_OK);
    ck_assert(sl_config_set(&cfg, "train.max_steps=5") == SL_OK);
    sl_log_set_level(SL_LOG_ERROR);
    sl_train_opts_init(&opts);
    opts.quiet = 1;
    ck_assert_msg(sl_train_run(&cfg, &opts, &res) == SL_OK, "%s", sl_err_msg());
    sl_config_fini(&cfg);
    snprintf(weights, sizeof weights, "%s/init.safetensors", launch_root);
    ck_assert_msg(sl_export_self_contained(res.model, weights, "test", &er) == SL_OK, "%s",
                  sl_err_msg());
    want = test_model_params(res.model, &n);

    /* shoal run -n 2 --init, then the same without it */
    {
        const char *args[] = {"run",   conf,    "-n",   "2",     "--init",
                              weights, "--set", set_lr, "--set", "sync.algorithm=bmuf",
                              NULL};
        ck_assert_int_eq(launch_wait(launch_start("initrun", NULL, args), "initrun", &out, &err),
                         0);
        free(out);
        free(err);
        launch_assert_nothing_left();
        assert_models("init", want, n, 1);
        args[4] = "--no-resume";
        args[5] = "--quiet";
        ck_assert_int_eq(launch_wait(launch_start("initrun", NULL, args), "initrun", &out, &err),
                         0);
        free(out);
        free(err);
        assert_models("init", want, n, 0);
    }

    /* two shoal node processes with --init, then without */
    make_key_file("init", key_set, sizeof key_set);
    for (int with = 1; with >= 0; with--) {
        const char *args[] = {
            "node",   node_conf, "--rank", "1",     "--size", "2",     "--master",
            master,   "--set",   key_set,  "--set", set_lr,   "--set", "sync.algorithm=gossip-bmuf",
            "--init", weights,   NULL};
        snprintf(master, sizeof master, "127.0.0.1:%d", test_free_port());
        if (!with) {
            args[14] = "--no-resume";
            args[15] = "--quiet";
        }
        p1 = launch_start("initnode1", NULL, args);
        args[3] = "0";
        p0 = launch_start("initnode0", NULL, args);
        ck_assert_int_eq(launch_wait(p1, "initnode1", &out, &err), 0);
        free(out);
        free(err);
        ck_assert_int_eq(launch_wait(p0, "initnode0", &out, &err), 0);
        free(out);
        free(err);
        launch_assert_nothing_left();
        assert_models("initnode", want, n, with);
    }
    free(want);
}
END_TEST

/* shoal train is one node: it takes the whole of a global batch that a file of 3 nodes
 * splits (4 a node there), and says that it trains one node. */
START_TEST(test_train_whole_global_batch)
{
    char conf[1100], *out, *err;

    if (!launch_have_shoal())
        return;
    launch_tiny_yaml(conf, sizeof conf, "trainglobal", 3, ", max_steps: 1");
    ck_assert_int_eq(launch_wait(launch_start("trainglobal", NULL,
                                              (const char *[]){"train", conf, "--set",
                                                               "train.global_batch=12", NULL}),
                                 "trainglobal", &out, &err),
                     0);
    ck_assert_msg(strstr(err, "cluster.nodes is 3, but shoal train trains one node") != NULL, "%s",
                  err);
    free(out);
    free(err);
    assert_run_config("trainglobal", "\n  batch: 12\n", "\n  nodes: 1\n");
}
END_TEST

/* shoal node checks rank, size and master before it starts anything: exit 2, one line. */
START_TEST(test_node_usage_errors)
{
    static const struct {
        const char *env[6];
        const char *args[8];
        const char *message;
    } cases[] = {
        {{NULL},
         {"--rank", "0", "--size", "2", NULL},
         "shoal: node: --size 2 disagrees with cluster.nodes 3; start 3 nodes or add --set "
         "cluster.nodes=2 (or auto)\n"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=4", NULL},
         {NULL},
         "shoal: node: SLURM_NTASKS 4 disagrees with cluster.nodes 3; start 3 nodes or add --set "
         "cluster.nodes=4 (or auto)\n"},
        {{"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=3", NULL},
         {NULL},
         "shoal: node: OMPI_COMM_WORLD_RANK '5' is not a rank of 3 nodes (0 to 2)\n"},
        {{NULL},
         {"--size", "3", NULL},
         "shoal: node: no rank: give --rank R --size N, or start shoal node with srun, mpirun or "
         "torchrun (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or RANK) (see shoal node "
         "--help)\n"},
        {{"PMI_RANK=1", "PMI_SIZE=3", NULL},
         {NULL},
         "shoal: node: no master address: give --master HOST:PORT, set SHOAL_MASTER_ADDR and "
         "SHOAL_MASTER_PORT, or cluster.master (srun and torchrun give one) (see shoal node "
         "--help)\n"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=x", NULL},
         {NULL},
         "shoal: node: SLURM_NTASKS 'x' is not a number of nodes (1 to 65536)\n"},
        {{NULL},
         {"--rank", "0", "--set", "cluster.nodes=auto", NULL},
         "shoal: node: cluster.nodes is auto, but no launcher gives the number of nodes: give "
         "--size N, or start shoal node with srun, mpirun or torchrun (see shoal node --help)\n"},
        /* auto takes 2 from WORLD_SIZE (else: disagrees with 3); then the master */
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=gpu01", NULL},
         {"--set", "cluster.nodes=auto", NULL},
         "shoal: node: MASTER_ADDR is set but MASTER_PORT is not; torchrun sets both\n"},
        {{"SLURM_PROCID=1", "SLURM_NTASKS=3", "SLURM_JOB_ID=77", "SLURM_JOB_NODELIST=n[1-", NULL},
         {NULL},
         "shoal: node: SLURM_JOB_NODELIST 'n[1-' is not a Slurm host list: '[' at byte 2 is not "
         "closed\n"},
        /* explicit flags win over a launcher's malformed values */
        {{"SLURM_PROCID=x", "SLURM_NTASKS=3", "SLURM_JOB_ID=77", "SLURM_JOB_NODELIST=n[1-", NULL},
         {"--rank", "1", "--size", "3", "--master", "node001:x", NULL},
         "shoal: node: --master 'node001:x' is not HOST:PORT (a host name or IPv4 address, port 1 "
         "to 65535)\n"},
        {{"SHOAL_MASTER_ADDR=node001", NULL},
         {"--rank", "1", NULL},
         "shoal: node: SHOAL_MASTER_ADDR is set but SHOAL_MASTER_PORT is not; set both\n"},
        {{"SHOAL_MASTER_ADDR=node001", "SHOAL_MASTER_PORT=x", NULL},
         {"--rank", "1", NULL},
         "shoal: node: SHOAL_MASTER_ADDR:SHOAL_MASTER_PORT 'node001:x' is not HOST:PORT (a "
         "host name or IPv4 address, port 1 to 65535)\n"},
    };
    char conf[1100], *out, *err;

    if (!launch_have_shoal())
        return;
    launch_tiny_yaml(conf, sizeof conf, "usage", 3, "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[12] = {"node", conf};
        int n = 2;
        for (int k = 0; cases[i].args[k]; k++)
            args[n++] = cases[i].args[k];
        args[n] = NULL;
        ck_assert_int_eq(
            launch_wait(launch_start("usage", cases[i].env, args), "usage", &out, &err), 2);
        ck_assert_str_eq(err, cases[i].message);
        ck_assert_str_eq(out, "");
        free(out);
        free(err);
    }
    /* a global batch that the launcher's number of nodes does not divide */
    ck_assert_int_eq(
        launch_wait(launch_start("usage",
                                 (const char *[]){"RANK=1", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                                  "MASTER_PORT=1", NULL},
                                 (const char *[]){"node", conf, "--set", "cluster.nodes=auto",
                                                  "--set", "train.global_batch=4", NULL}),
                    "usage", &out, &err),
        2);
    ck_assert_msg(strstr(err,
                         ": 'train.global_batch' 4 does not split over 3 nodes (cluster.nodes); "
                         "give a multiple of 3\n") != NULL,
                  "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(
        launch_wait(launch_start("usage", NULL, (const char *[]){"run", conf, "-n", "0", NULL}),
                    "usage", &out, &err),
        2);
    ck_assert_str_eq(err, "shoal: run: -n must be a number of nodes, 1 to 1024, not '0' (see "
                          "shoal run --help)\n");
    free(out);
    free(err);
    ck_assert_int_eq(
        launch_wait(launch_start("usage", NULL, (const char *[]){"help", "node", NULL}), "usage",
                    &out, &err),
        0);
    ck_assert(strncmp(out, "Usage: shoal node CONF.yaml", 27) == 0);
    free(out);
    free(err);
}
END_TEST

/* ---------------------------------------------------------------------- main */

static Suite *
launch_run_suite(void)
{
    Suite *s = suite_create("launch_run");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_set_timeout(limits, 4 * HANG_S);
    tcase_add_test(core, test_run_three_nodes);
    tcase_add_test(core, test_run_interrupt_resume);
    tcase_add_test(limits, test_run_node_killed);
    tcase_add_test(limits, test_run_node_fails);
    tcase_add_test(core, test_node_torchrun_env);
    tcase_add_test(core, test_init_run_and_node);
    tcase_add_test(core, test_node_members_place_model);
    tcase_add_test(limits, test_node_abort_reaches_peer);
    tcase_add_test(limits, test_node_key_file);
    tcase_add_test(limits, test_node_usage_errors);
    tcase_add_test(core, test_train_whole_global_batch);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_run_suite(), "check-launch-run");
}
