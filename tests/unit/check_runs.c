/* `shoal run` integration tests of the sync algorithms, on 4 forked nodes training a
 * tiny model on 20000 Brown tokens: every algorithm lowers the loss and writes the
 * final model, the mean of the node models; the sync did average (ma, bmuf: the node
 * models agree after the last sync; local-*, gossip-*: they are much closer together
 * than without a sync; *ma: each node's model is as good as one node's trained on all
 * the data with as many tokens); allreduce on 4 nodes equals one node with a 4x batch;
 * a run of each algorithm survives a node killed with SIGKILL (rank 0 too: node 1 then
 * writes the run's model) and writes the mean of the live nodes' models (allreduce, ma
 * and bmuf re-form their ring without it);
 * the unique exchange trains and sends fewer bytes than the dense one; int8 deltas train
 * and their bytes counters agree with the frames. The sync maths
 * itself is tested in-process in check_sync.c; this file only runs the binary. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_tool.h"

static char tmp_root[512];
static char shoal_bin[1024];
static const char *data_dir;

/* Seconds after which a shoal process or a file it should write counts as hung: a
 * guard that stops the test and its processes, never a timing the test measures. The
 * test cases' own timeouts (Check's) are longer, so that the guard cleans up first. */
enum { HANG_S = 100 };

static int
have_shoal(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    data_dir = getenv("SHOAL_DATA");
    snprintf(shoal_bin, sizeof shoal_bin, "%s/shoal", b ? b : ".");
    if (access(shoal_bin, X_OK) != 0 || !data_dir) {
        fprintf(stderr, "check_runs: %s or SHOAL_DATA missing; skipping\n", shoal_bin);
        return 0;
    }
    return 1;
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* <tmp>/<run>.yaml: a tiny model on 20000 Brown tokens; extra: more YAML lines. */
static void
tiny_yaml(char *path, size_t size, const char *run, const char *extra)
{
    char yaml[4096];
    FILE *f;

    snprintf(path, size, "%s/%s.yaml", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 0}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "cluster: {rendezvous_timeout_ms: 20000}\n"
             "%s",
             run, tmp_root, run, data_dir, data_dir, tmp_root, extra);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(yaml, f);
    fclose(f);
}

/* Starts `shoal ARGS...` with stdout and stderr into <tmp>/<run>.log. */
static pid_t
start_shoal(const char *run, const char *const *args)
{
    char log[700];
    const char *argv[32];
    int n = 0;
    pid_t pid;

    snprintf(log, sizeof log, "%s/%s.log", tmp_root, run);
    argv[n++] = shoal_bin;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(fileno(stdout), 2) < 0)
            _exit(127);
        execv(shoal_bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* A node a test stopped with SIGSTOP, for wait_shoal's hang guard to kill; 0 if none. */
static pid_t stopped_node;

/* Waits for shoal to exit and returns its exit status (128 + signal when killed).
 * After HANG_S seconds it kills shoal (and stopped_node) and fails: a guard against a
 * hang, not a timing. */
static int
wait_shoal(pid_t pid)
{
    double t0 = now_s();
    int ws;

    while (waitpid(pid, &ws, WNOHANG) == 0) {
        if (now_s() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            if (stopped_node > 0) /* not shoal run's child any more once it is gone */
                kill(stopped_node, SIGKILL);
            waitpid(pid, &ws, 0);
            ck_abort_msg("shoal hung: not done after %d s", HANG_S);
        }
        usleep(20000);
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* The file at path, which must be there (malloc'd). */
static char *
slurp(const char *path)
{
    char *data = test_read_file(path, NULL);

    ck_assert_msg(data != NULL, "%s is missing", path);
    return data;
}

/* The last 2000 bytes of a run's log: what a failed check shows (Check refuses longer
 * messages, and the log holds the progress lines). */
static const char *
log_tail(const char *log)
{
    size_t n = strlen(log);

    return n > 2000 ? log + n - 2000 : log;
}

/* First and last training loss of a node's metrics.jsonl. */
static void
loss_first_last(const char *run, int rank, double *first, double *last)
{
    char path[700], *text, *line;
    int n = 0;

    snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, rank);
    text = slurp(path);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "{\"step\"", 7) != 0)
            continue;
        *last = test_json_num(line, "loss");
        if (n++ == 0)
            *first = *last;
    }
    ck_assert_int_ge(n, 2);
    free(text);
}

/* The parameters of the model files of a run: node-R/model.bin of the ranks given, their
 * mean, and the run's own model.bin. */
typedef struct {
    size_t n;
    int count;
    float *node[4];
    float *run;
    double *mean;
} models_t;

static void
models_load(models_t *m, const char *run, const int *ranks, int count)
{
    char path[800];
    size_t n;

    m->count = count;
    snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
    m->run = test_model_params(path, &m->n);
    ck_assert_uint_gt(m->n, 1000);
    ck_assert_ptr_nonnull(m->mean = calloc(m->n, sizeof *m->mean));
    for (int k = 0; k < count; k++) {
        snprintf(path, sizeof path, "%s/%s/node-%d/model.bin", tmp_root, run, ranks[k]);
        m->node[k] = test_model_params(path, &n);
        ck_assert_uint_eq(n, m->n);
        for (size_t i = 0; i < n; i++)
            m->mean[i] += m->node[k][i] / (double)count;
    }
}

static void
models_free(models_t *m)
{
    for (int k = 0; k < m->count; k++)
        free(m->node[k]);
    free(m->run);
    free(m->mean);
}

/* The largest |run's model - mean of the node models| over the parameters. */
static double
models_run_off_mean(const models_t *m)
{
    double worst = 0;

    for (size_t i = 0; i < m->n; i++)
        worst = fmax(worst, fabs(m->run[i] - m->mean[i]));
    return worst;
}

/* The largest |node k's parameter - node 0's|: 0 when the nodes agree. */
static double
models_disagreement(const models_t *m)
{
    double worst = 0;

    for (int k = 1; k < m->count; k++)
        for (size_t i = 0; i < m->n; i++)
            worst = fmax(worst, fabs((double)m->node[k][i] - m->node[0][i]));
    return worst;
}

/* The spread of the node models: the root mean square over nodes of the L2 distance
 * between a node's parameters and their mean (what gossip drives towards 0). */
static double
models_spread(const models_t *m)
{
    double sum = 0;

    for (int k = 0; k < m->count; k++)
        for (size_t i = 0; i < m->n; i++)
            sum += (m->node[k][i] - m->mean[i]) * (m->node[k][i] - m->mean[i]);
    return sqrt(sum / m->count);
}

/* valid_ppl of the run's summary.json (rank -1) or of node rank's. */
static double
valid_ppl(const char *run, int rank)
{
    char path[800], *text;
    double ppl;

    if (rank < 0)
        snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, run);
    else
        snprintf(path, sizeof path, "%s/%s/node-%d/summary.json", tmp_root, run, rank);
    text = slurp(path);
    ppl = test_json_num(text, "valid_ppl");
    free(text);
    return ppl;
}

/* 4 nodes, 120 steps of 4 x 8 tokens each: every component's period (4, and 8 for the
 * embedding and softmax rows) divides 120, so every component syncs at the last step. */
#define ALG_SYNC "period: 4, embedding_period: 8, timeout_ms: 10000"

/* Runs `shoal COMMAND CONF ARGS...` (args: NULL-terminated, at most 8) for the run
 * named run with the tiny config and extra, unless an earlier case did: the loop cases
 * share these baselines through tmp_root. */
static void
baseline(const char *run, const char *extra, const char *command, const char *const *args)
{
    char conf[700], path[800];
    const char *argv[12] = {command, conf};
    int n = 2;

    snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, run);
    if (access(path, F_OK) == 0)
        return;
    tiny_yaml(conf, sizeof conf, run, extra);
    while (*args && n < 10)
        argv[n++] = *args++;
    argv[n] = NULL;
    ck_assert_int_eq(wait_shoal(start_shoal(run, argv)), 0);
}

/* The spread of the node models of the same 4-node run without a sync before the end:
 * gossip-ma with periods longer than the run (the final average still happens). Seen:
 * 17.8, against 0.9 (local-*) to 2.9 (gossip-bmuf) with a sync every 4 steps. */
static double
spread_without_sync(void)
{
    static const int all[4] = {0, 1, 2, 3};
    models_t m;
    double spread;

    baseline("alg-off", "sync: {algorithm: gossip-ma, period: 1000, embedding_period: 1000}\n",
             "run", (const char *[]){"-n", "4", "--quiet", "--set", "train.max_steps=120", NULL});
    models_load(&m, "alg-off", all, 4);
    spread = models_spread(&m);
    models_free(&m);
    return spread;
}

/* The valid perplexity of one node trained on all the data with the same tokens a step
 * as the 4 nodes together (batch 16, 120 steps). */
static double
one_node_ppl(void)
{
    baseline("alg-one", "", "train",
             (const char *[]){"--quiet", "--set", "train.batch=16", "--set", "train.max_steps=120",
                              NULL});
    return valid_ppl("alg-one", -1);
}

static const char *const algorithms[] = {"allreduce",  "ma",        "bmuf",       "local-ma",
                                         "local-bmuf", "gossip-ma", "gossip-bmuf"};

/* Every algorithm on 4 nodes: exit 0, every node's loss falls, rank 0 writes the run's
 * model.bin (the mean of the 4 node models) and a summary.json that evaluates it; the
 * metrics carry sync lines. And the sync did average:
 * - ma, bmuf: the node models agree after the last sync (bit for bit, seen);
 * - local-*, gossip-*: the node models are at least 3 times closer to their mean than in
 *   the same run without a sync, and the averaged model's perplexity is no worse than
 *   1% above the mean of the nodes' own;
 * - *ma: every node's own model is within 4% above (and 15% below) the perplexity of
 *   one node trained on all the data with as many tokens a step (seen: 0.95 to 0.97 of
 *   it with a sync, 1.05 to 1.21 without). The BMUF runs (block momentum 0.9
 *   with Adam) end near 4 times it, so they are held to the checks above only.
 * allreduce's node models are dropped (keep_node_models: false): its equality with one
 * node is test_allreduce_equals_big_batch. */
START_TEST(test_run_each_algorithm)
{
    static const int all[4] = {0, 1, 2, 3};
    const char *a = algorithms[_i];
    int gossip = strncmp(a, "local-", 6) == 0 || strncmp(a, "gossip-", 7) == 0;
    int ma = strlen(a) >= 2 && strcmp(a + strlen(a) - 2, "ma") == 0;
    int keep = strcmp(a, "allreduce") != 0;
    char run[64], conf[700], extra[256], path[800], *text;
    double first, last;
    models_t m;

    if (!have_shoal())
        return;
    snprintf(run, sizeof run, "alg-%s", a);
    snprintf(extra, sizeof extra, "sync: {algorithm: %s, " ALG_SYNC "%s}\n", a,
             keep ? "" : ", keep_node_models: false");
    tiny_yaml(conf, sizeof conf, run, extra);
    ck_assert_int_eq(
        wait_shoal(start_shoal(run, (const char *[]){"run", conf, "-n", "4", "--quiet", "--set",
                                                     "train.max_steps=120", NULL})),
        0);
    for (int r = 0; r < 4; r++) {
        loss_first_last(run, r, &first, &last);
        ck_assert_msg(last < first, "%s node %d: loss %.4f -> %.4f", a, r, first, last);
    }
    snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
    ck_assert_int_eq(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/%s/node-1/model.bin", tmp_root, run);
    ck_assert_int_eq(access(path, F_OK), keep ? 0 : -1);
    snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, run);
    text = slurp(path);
    ck_assert_ptr_nonnull(strstr(text, a));
    ck_assert_int_eq((int)test_json_num(text, "models_averaged"), 4);
    ck_assert(test_json_num(text, "valid_ppl") > 1 && test_json_num(text, "valid_ppl") < 500);
    free(text);
    snprintf(path, sizeof path, "%s/%s/node-1/metrics.jsonl", tmp_root, run);
    text = slurp(path);
    ck_assert_ptr_nonnull(strstr(text, "\"event\":\"sync\""));
    free(text);
    if (!keep)
        return;

    models_load(&m, run, all, 4);
    ck_assert_msg(models_run_off_mean(&m) < 1e-5, "%s: model.bin is %g off the nodes' mean", a,
                  models_run_off_mean(&m));
    if (!gossip)
        ck_assert_msg(models_disagreement(&m) < 1e-6,
                      "%s: the node models differ by up to %g after the last sync", a,
                      models_disagreement(&m));
    if (gossip) {
        double spread = models_spread(&m), off = spread_without_sync(), nodes = 0;

        ck_assert_msg(spread < off / 3, "%s: node models %.3f from their mean, %.3f without sync",
                      a, spread, off);
        for (int r = 0; r < 4; r++)
            nodes += valid_ppl(run, r) / 4;
        ck_assert_msg(valid_ppl(run, -1) < 1.01 * nodes,
                      "%s: the averaged model's ppl %.2f, the nodes' own %.2f on average", a,
                      valid_ppl(run, -1), nodes);
    }
    if (ma) {
        double one = one_node_ppl();

        for (int r = 0; r < 4; r++) {
            double ppl = valid_ppl(run, r);
            ck_assert_msg(ppl < 1.04 * one && ppl > 0.85 * one,
                          "%s: node %d's valid ppl %.2f, one node's %.2f", a, r, ppl, one);
        }
    }
    models_free(&m);
}
END_TEST

/* sent_bytes of the last sync line of component comp in a node's metrics.jsonl. */
static double
last_sent_bytes(const char *run, int rank, const char *comp)
{
    char path[700], pat[80], *text, *line;
    double bytes = -1;

    snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, rank);
    snprintf(pat, sizeof pat, "\"component\":\"%s\"", comp);
    text = slurp(path);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "\"event\":\"sync\"") && strstr(line, pat))
            bytes = test_json_num(line, "sent_bytes");
    free(text);
    ck_assert_msg(bytes >= 0, "no sync line of %s in %s", comp, path);
    return bytes;
}

static const struct {
    const char *algorithm, *exchange;
} unique_runs[] = {{"gossip-bmuf", "unique"}, {"gossip-bmuf", "dense"}, {"allreduce", "unique"}};

/* 4 nodes with exchange: unique (and the dense run it is compared with): the loss falls
 * on every node and the final model is written. Then gossip-bmuf's input embedding
 * (500 rows, each node seeing 8 x 32 tokens a block) cost node 0 fewer bytes with
 * unique than with dense, but not none. */
START_TEST(test_run_unique)
{
    char run[64], conf[700], extra[256], path[800];
    double first, last;

    if (!have_shoal())
        return;
    for (size_t i = 0; i < sizeof unique_runs / sizeof unique_runs[0]; i++) {
        snprintf(run, sizeof run, "x-%s-%s", unique_runs[i].algorithm, unique_runs[i].exchange);
        snprintf(extra, sizeof extra,
                 "sync: {algorithm: %s, period: 4, embedding_period: 8, timeout_ms: 10000, "
                 "exchange: %s}\n",
                 unique_runs[i].algorithm, unique_runs[i].exchange);
        tiny_yaml(conf, sizeof conf, run, extra);
        ck_assert_int_eq(
            wait_shoal(start_shoal(run, (const char *[]){"run", conf, "-n", "4", "--quiet", "--set",
                                                         "train.max_steps=120", NULL})),
            0);
        for (int r = 0; r < 4; r++) {
            loss_first_last(run, r, &first, &last);
            ck_assert_msg(last < first, "%s node %d: loss %.4f -> %.4f", run, r, first, last);
        }
        snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
        ck_assert_int_eq(access(path, F_OK), 0);
    }
    {
        double u = last_sent_bytes("x-gossip-bmuf-unique", 0, "embedding.0");
        double d = last_sent_bytes("x-gossip-bmuf-dense", 0, "embedding.0");
        ck_assert_msg(u > 0 && u < d,
                      "embedding.0: unique %.0f bytes, dense %.0f (unique sends nothing "
                      "unless the trainer calls sl_sync_note_model after each step)",
                      u, d);
    }
}
END_TEST

/* The sum of key over the sync lines of step of a node's metrics.jsonl (every
 * component's counters at that step). */
static double
sync_sum_at(const char *run, int rank, long step, const char *key)
{
    char path[700], pat[80], *text, *line;
    double sum = 0;
    int n = 0;

    snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, rank);
    snprintf(pat, sizeof pat, "{\"event\":\"sync\",\"step\":%ld,", step);
    text = slurp(path);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, pat, strlen(pat)) == 0) {
            sum += test_json_num(line, key);
            n++;
        }
    free(text);
    ck_assert_msg(n > 0, "no sync line of step %ld in %s", step, path);
    return sum;
}

/* sent_bytes summed over a node's sync lines at step 120. */
static double
sent_of(const char *run, int rank)
{
    return sync_sum_at(run, rank, 120, "sent_bytes");
}

/* gossip-bmuf with int8 deltas (error feedback through each link's mirrors) on 4 nodes:
 * the loss falls on every node, and the bytes counters add up: each node's summary.json
 * "wire" (frames as they left, through ZeroMQ or a lane) says int8 and fp32 (the
 * keyframes) only, and so do its sync lines' counters, its payload
 * bytes are the sum of its sync lines' sent_bytes at the last step, headers make up the
 * rest of bytes_per_step, and its ratio is bytes per step over allreduce fp32's
 * 2 (n - 1) / n x 4 x params; over the 4 nodes, the bytes sent are the bytes received
 * (every frame counted leaving was counted arriving). About 1/30 of allreduce fp32 with
 * a sync every 4 steps (seen: 0.027 to 0.039, the keyframes included). And allreduce
 * itself, in fp32, comes out at 1 (1.003 seen: the headers). */
START_TEST(test_run_int8)
{
    const char *run = "q-int8";
    char conf[700], path[800], *text;
    double first, last, sent = 0, recv = 0;

    if (!have_shoal())
        return;
    tiny_yaml(conf, sizeof conf, run,
              "sync: {algorithm: gossip-bmuf, " ALG_SYNC ", compression: int8}\n");
    ck_assert_int_eq(
        wait_shoal(start_shoal(run, (const char *[]){"run", conf, "-n", "4", "--quiet", "--set",
                                                     "train.max_steps=120", NULL})),
        0);
    for (int r = 0; r < 4; r++) {
        double steps, frames, bps, pps, params, ar, payload;

        loss_first_last(run, r, &first, &last);
        ck_assert_msg(last < first, "int8 node %d: loss %.4f -> %.4f", r, first, last);
        snprintf(path, sizeof path, "%s/%s/node-%d/summary.json", tmp_root, run, r);
        text = slurp(path);
        steps = test_json_num(text, "steps");
        frames = test_json_num(text, "frames");
        bps = test_json_num(text, "bytes_per_step");
        pps = test_json_num(text, "payload_bytes_per_step");
        params = test_json_num(text, "params");
        ar = 2.0 * 3 / 4 * 4 * params;
        ck_assert_msg(steps == 120 && frames > 0, "node %d: %g frames in %g steps", r, frames,
                      steps);
        ck_assert_ptr_nonnull(strstr(text, "\"by_encoding\": {\"fp32\": "));
        ck_assert_ptr_nonnull(strstr(text, "\"int8\": "));
        ck_assert_ptr_null(strstr(text, "\"bf16\": "));
        payload = sync_sum_at(run, r, 120, "sent_bytes");
        ck_assert_msg(fabs(pps * steps - payload) <= 1e-5 * payload,
                      "node %d: summary %g payload bytes, metrics %g", r, pps * steps, payload);
        ck_assert_msg(fabs(bps * steps - (payload + frames * 64)) <= 1e-5 * bps * steps,
                      "node %d: %g bytes, %g payload in %g frames", r, bps * steps, payload,
                      frames);
        ck_assert_double_eq_tol(test_json_num(text, "allreduce_fp32_bytes_per_step"), ar,
                                1e-5 * ar);
        ck_assert_double_eq_tol(test_json_num(text, "ratio_to_allreduce_fp32"), bps / ar,
                                1e-4 * bps / ar);
        ck_assert_msg(bps / ar < 0.1, "node %d: %g of allreduce fp32", r, bps / ar);
        free(text);
        sent += payload;
        recv += sync_sum_at(run, r, 120, "recv_bytes");
    }
    ck_assert_msg(sent == recv, "%g bytes sent, %g received", sent, recv);
    ck_assert_msg(
        sync_sum_at(run, 0, 120, "sent_int8") > 0 && sync_sum_at(run, 0, 120, "sent_fp32") > 0 &&
            sync_sum_at(run, 0, 120, "sent_int8") + sync_sum_at(run, 0, 120, "sent_fp32") ==
                sent_of(run, 0),
        "node 0: the sync lines' int8 and fp32 bytes are not all it sent");

    /* the reference itself: allreduce in fp32 sends 2 (n - 1) / n x the model's bytes a
     * step, plus its frames' headers (4 per step here: 2 halving, 2 doubling) */
    tiny_yaml(conf, sizeof conf, "q-allreduce", "sync: {algorithm: allreduce}\n");
    ck_assert_int_eq(wait_shoal(start_shoal("q-allreduce",
                                            (const char *[]){"run", conf, "-n", "4", "--quiet",
                                                             "--set", "train.max_steps=40", NULL})),
                     0);
    snprintf(path, sizeof path, "%s/q-allreduce/node-2/summary.json", tmp_root);
    text = slurp(path);
    ck_assert_msg(test_json_num(text, "ratio_to_allreduce_fp32") >= 1.0 &&
                      test_json_num(text, "ratio_to_allreduce_fp32") < 1.01,
                  "allreduce: %g of itself", test_json_num(text, "ratio_to_allreduce_fp32"));
    free(text);
}
END_TEST

/* allreduce on 4 nodes of batch 4 == one node of batch 16: each node's quarter of the
 * 20000 tokens cut into 4 streams of 1250 is exactly 4 of the single node's 16 streams
 * of 1250, and the mean of the 4 mean gradients is the mean over all 16 streams.
 * Twice: with the tiny config's Adam (lr 0.01: 30 steps move weights by up to 0.3), and
 * with plain SGD (lr 1, no clipping), since Adam divides a constant scale of the
 * gradient out and SGD does not: a sum of the 4 gradients where the mean belongs moves
 * every weight 4 times as far as the single node does. Only the rounding of the
 * gradient sums differs (about 3e-6 seen). */
static const struct {
    const char *name, *set[3];
} big_batch_opts[] = {
    {"adam", {"train.optimizer.type=adam", "train.optimizer.lr=0.01", "train.optimizer.clip=1"}},
    {"sgd", {"train.optimizer.type=sgd", "train.optimizer.lr=1", "train.optimizer.clip=0"}},
};

START_TEST(test_allreduce_equals_big_batch)
{
    const char *const *set = big_batch_opts[_i].set;
    char conf1[700], conf2[700], one[64], four[64], path[800], *text;
    float *a, *b;
    size_t n, na, nb;
    double worst = 0;

    if (!have_shoal())
        return;
    snprintf(one, sizeof one, "ar-one-%s", big_batch_opts[_i].name);
    snprintf(four, sizeof four, "ar-four-%s", big_batch_opts[_i].name);
    tiny_yaml(conf2, sizeof conf2, four, "sync: {algorithm: allreduce}\n");
    tiny_yaml(conf1, sizeof conf1, one, "");
    ck_assert_int_eq(
        wait_shoal(start_shoal(four, (const char *[]){"run", conf2, "-n", "4", "--quiet", "--set",
                                                      set[0], "--set", set[1], "--set", set[2],
                                                      "--set", "train.max_steps=30", NULL})),
        0);
    ck_assert_int_eq(wait_shoal(start_shoal(
                         one, (const char *[]){"train", conf1, "--quiet", "--set", set[0], "--set",
                                               set[1], "--set", set[2], "--set", "train.batch=16",
                                               "--set", "train.max_steps=30", NULL})),
                     0);
    snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, one);
    text = slurp(path);
    n = (size_t)test_json_num(text, "params");
    free(text);
    snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, one);
    a = test_model_params(path, &na);
    snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, four);
    b = test_model_params(path, &nb);
    ck_assert_uint_eq(na, n);
    ck_assert_uint_eq(nb, n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst)
            worst = d;
    }
    ck_assert_msg(worst < 1e-4, "%s: largest difference %g", big_batch_opts[_i].name, worst);
    ck_assert_uint_gt(n, 1000);
    free(a);
    free(b);
}
END_TEST

/* cluster.allreduce reaches the nodes: the same 4-node allreduce run halving and
 * doubling (auto) and around the ring adds the gradients in another order, so the two
 * models differ in their last bits and in no more. */
START_TEST(test_allreduce_ring_or_halving)
{
    static const char *const algo[2] = {"auto", "ring"};
    char conf[700], run[64], set[64], path[800];
    float *m[2];
    size_t n[2], differ = 0;
    double worst = 0;

    if (!have_shoal())
        return;
    for (int k = 0; k < 2; k++) {
        snprintf(run, sizeof run, "ar-%s", algo[k]);
        snprintf(set, sizeof set, "cluster.allreduce=%s", algo[k]);
        tiny_yaml(conf, sizeof conf, run, "sync: {algorithm: allreduce}\n");
        ck_assert_int_eq(
            wait_shoal(start_shoal(run, (const char *[]){"run", conf, "-n", "4", "--quiet", "--set",
                                                         set, "--set", "train.optimizer.type=sgd",
                                                         "--set", "train.optimizer.lr=1", "--set",
                                                         "train.max_steps=30", NULL})),
            0);
        snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
        m[k] = test_model_params(path, &n[k]);
    }
    ck_assert_uint_eq(n[0], n[1]);
    for (size_t i = 0; i < n[0]; i++) {
        double d = fabs((double)m[0][i] - (double)m[1][i]);
        differ += m[0][i] != m[1][i];
        if (d > worst)
            worst = d;
    }
    ck_assert_msg(differ > 0, "halving and the ring gave the same bits: the setting was lost");
    ck_assert_msg(worst < 1e-4, "halving and the ring differ by up to %g", worst);
    free(m[0]);
    free(m[1]);
}
END_TEST

/* The step of the last report in node rank's metrics.jsonl of run, 0 if none. */
static long
last_report(const char *run, int rank)
{
    char path[800], *text, *line;
    long step = 0;

    snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, rank);
    text = slurp(path);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "{\"step\":", 8) == 0)
            step = strtol(line + 8, NULL, 10);
    free(text);
    return step;
}

/* Steps of a node in the 2-epoch tiny runs on n nodes: 2 x 156 on 4. */
static long
kill_run_steps(int nodes)
{
    return 2 * 156 * 4 / nodes;
}

/* Whether algorithm is one of the collective ones (allreduce, ma, bmuf). */
static int
collective(const char *algorithm)
{
    return strcmp(algorithm, "allreduce") == 0 || strcmp(algorithm, "ma") == 0 ||
           strcmp(algorithm, "bmuf") == 0;
}

/* A run of algorithm on nodes nodes named run (2 epochs, kill_run_steps) whose node victim
 * is sent sig (SIGKILL, SIGSTOP) once it has logged a report; shoal run's exit status (its
 * progress lines are in the log). The timeout
 * is long enough that a live node on a loaded machine does not miss 3 rounds in a row (2 s did, at
 * load 9 on 2 cores). The whole run takes about a second of CPU, so on a loaded machine this
 * process may get to the kill only after the victim's last step; then the run showed nothing (the
 * others no longer wait for it: a death during the final gather is another case) and is run again,
 * at most 3 times. */
static int
run_signalling(const char *run, const char *algorithm, int victim, int nodes, int sig)
{
    char conf[700], path[800], comm[32], sync[128], n[16];
    long steps = kill_run_steps(nodes);
    pid_t pid, v;
    int rc;

    /* a collective algorithm drops a node that misses one timeout (a slow live node is
     * only timed out, re-formed with all and redone): a shorter one keeps the test short */
    snprintf(sync, sizeof sync, "sync: {algorithm: %s, period: 4, timeout_ms: %d}\n", algorithm,
             collective(algorithm) ? 3000 : 6000);
    tiny_yaml(conf, sizeof conf, run, sync);
    snprintf(comm, sizeof comm, "shoal node %d", victim);
    snprintf(n, sizeof n, "%d", nodes);
    for (int attempt = 1;; attempt++) {
        pid = start_shoal(run,
                          (const char *[]){"run", conf, "-n", n, "--set", "train.epochs=2", NULL});
        snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, victim);
        test_wait_file(path, 400, pid, HANG_S);
        v = test_child_named(pid, comm); /* it wrote the file: it has its name */
        if (v > 0 && sig == SIGSTOP)
            stopped_node = v;
        if (v > 0)
            ck_assert_int_eq(kill(v, sig), 0);
        rc = wait_shoal(pid);
        stopped_node = 0;
        /* 3 rounds of 4 steps before the end, and a report every 10 steps */
        if (v > 0 && last_report(run, victim) <= steps - 12 - 10)
            return rc;
        ck_assert_msg(attempt < 3, "%s: node %d was killed after its step %ld of %ld in 3 runs",
                      run, victim, last_report(run, victim), steps);
        fprintf(stderr, "check_runs: %s: node %d killed after its step %ld of %ld; again\n", run,
                victim, last_report(run, victim), steps);
        snprintf(path, sizeof path, "%s/%s", tmp_root, run);
        test_remove_tree(path);
    }
}

/* run_signalling with SIGKILL. */
static int
run_killing(const char *run, const char *algorithm, int victim, int nodes)
{
    return run_signalling(run, algorithm, victim, nodes, SIGKILL);
}

/* After run_killing(run, victim, nodes): shoal run said which node died and which wrote
 * the run's model (writer, from the live nodes), the run's summary.json says the same
 * (models_averaged nodes - 1, the writer's rank, every step done), model.bin is there and
 * is the mean of the live nodes' own final models, which are there with their
 * summaries. Two nodes: the survivor goes on alone and writes its own model. How the
 * survivors knew: a neighbour algorithm's liveness (its connection closed, no timeout
 * waited), or a collective one's membership change, logged and recorded in each
 * survivor's metrics.jsonl. */
static void
assert_killed_run(const char *run, const char *algorithm, int victim, int writer, int nodes)
{
    char path[800], want[300], *text, *log;
    int live[8], nlive = 0, recorded;
    models_t m;

    snprintf(path, sizeof path, "%s/%s.log", tmp_root, run);
    log = slurp(path);
    if (nodes == 2)
        snprintf(want, sizeof want,
                 "shoal: node %d killed by signal 9 (the other node finished without it); the "
                 "run's model, node %d's own, was written by node %d: %s/%s/model.bin\n",
                 victim, writer, writer, tmp_root, run);
    else
        snprintf(want, sizeof want,
                 "shoal: node %d killed by signal 9 (the other nodes finished without it); the "
                 "run's model, the average of %d nodes, was written by node %d: "
                 "%s/%s/model.bin\n",
                 victim, nodes - 1, writer, tmp_root, run);
    ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in ...%s", want, log_tail(log));
    if (collective(algorithm))
        snprintf(want, sizeof want, ": node %d left the run (", victim);
    else
        snprintf(want, sizeof want, "node %d left the run (its connection closed", victim);
    ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in ...%s", want, log_tail(log));
    /* the membership change: one line of shoal run's and one record */
    snprintf(want, sizeof want, "shoal run: node %d died (signal 9) at step ", victim);
    ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in ...%s", want, log_tail(log));
    snprintf(want, sizeof want, " goes on without it; %d of %d nodes live\n", nodes - 1, nodes);
    ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in ...%s", want, log_tail(log));
    snprintf(want, sizeof want, " | %d of %d nodes | ", nodes - 1, nodes); /* progress */
    ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in ...%s", want, log_tail(log));
    free(log);
    snprintf(path, sizeof path, "%s/%s/events.jsonl", tmp_root, run);
    text = slurp(path);
    snprintf(want, sizeof want, ",\"rank\":%d,\"step\":", victim);
    ck_assert_msg(strstr(text, want) != NULL, "%s", text);
    snprintf(want, sizeof want, ",\"why\":\"died (signal 9)\",\"live\":%d,\"nodes\":%d}\n",
             nodes - 1, nodes);
    ck_assert_msg(strstr(text, want) != NULL && strchr(text, '\n')[1] == '\0', "%s", text);
    free(text);
    /* the membership record: on every survivor of a collective run; in a gossip or local
     * run each node keeps its own view, and at least the victim's neighbours saw it go */
    recorded = 0;
    for (int r = 0; r < nodes; r++) {
        int has;

        if (r == victim)
            continue;
        snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, r);
        text = slurp(path);
        snprintf(want, sizeof want, "\"rank\":%d,\"members\":%d,", victim, nodes - 1);
        has = strstr(text, "\"event\":\"membership\",\"step\":") != NULL &&
              strstr(text, want) != NULL && strstr(text, "\"change\":\"left\"") != NULL;
        ck_assert_msg(has || !collective(algorithm), "no \"%s\" membership record in %s", want,
                      path);
        recorded += has;
        free(text);
    }
    ck_assert_msg(recorded > 0, "no node recorded that node %d left", victim);
    snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, run);
    text = slurp(path);
    ck_assert_int_eq((int)test_json_num(text, "models_averaged"), nodes - 1);
    ck_assert_int_eq((int)test_json_num(text, "rank"), writer);
    ck_assert_int_eq((long)test_json_num(text, "steps"), kill_run_steps(nodes));
    free(text);
    for (int r = 0; r < nodes; r++) {
        snprintf(path, sizeof path, "%s/%s/node-%d/summary.json", tmp_root, run, r);
        ck_assert_int_eq(access(path, F_OK), r == victim ? -1 : 0);
        if (r != victim)
            live[nlive++] = r;
    }
    models_load(&m, run, live, nlive);
    ck_assert_msg(models_run_off_mean(&m) < 1e-5,
                  "%s: model.bin is %g off the mean of the live nodes' models", run,
                  models_run_off_mean(&m));
    models_free(&m);
}

static const struct {
    const char *algorithm;
    int victim, writer, nodes;
} kills[] = {{"gossip-bmuf", 2, 0, 4}, {"gossip-bmuf", 0, 1, 4}, {"gossip-ma", 2, 0, 4},
             {"local-ma", 1, 0, 4},    {"local-bmuf", 0, 1, 4},  {"gossip-bmuf", 1, 0, 2},
             {"bmuf", 2, 0, 3},        {"allreduce", 0, 1, 3},   {"ma", 1, 0, 2}};

/* SIGKILL of a node in the middle of a run of each algorithm: the others finish (the
 * collective ones re-form their ring without it), the lowest live rank (node 1 when rank
 * 0 is the one killed) gathers the final models of the live nodes and writes the run's
 * model.bin, their mean, and shoal run exits non-zero naming the dead node and the
 * writer; of 2 nodes the survivor goes on alone. */
START_TEST(test_survives_kill)
{
    char run[64];

    if (!have_shoal())
        return;
    snprintf(run, sizeof run, "kill-%s-%d-of-%d", kills[_i].algorithm, kills[_i].victim,
             kills[_i].nodes);
    ck_assert_int_eq(run_killing(run, kills[_i].algorithm, kills[_i].victim, kills[_i].nodes), 1);
    assert_killed_run(run, kills[_i].algorithm, kills[_i].victim, kills[_i].writer,
                      kills[_i].nodes);
}
END_TEST

/* SIGSTOP of node 2 of 3 in a gossip-bmuf run: the others take it for dead and finish,
 * and shoal run, rather than wait for ever, kills it once it has been stopped for twice
 * the sync timeout (6 s) since the first of them finished, and exits 1 naming it; the run's model
 * is the other two's mean, and no process is left (shoal run returned: it reaped every node). */
START_TEST(test_stopped_node_killed)
{
    const char *run = "stop-gossip-bmuf-2-of-3";
    char path[800], want[300], *log;
    int live[2] = {0, 1};
    models_t m;

    if (!have_shoal())
        return;
    ck_assert_int_eq(run_signalling(run, "gossip-bmuf", 2, 3, SIGSTOP), 1);
    snprintf(path, sizeof path, "%s/%s.log", tmp_root, run);
    log = slurp(path);
    ck_assert_msg(strstr(log, "shoal run: node 2 has been stopped (SIGSTOP) for 12 s since another "
                              "node finished: killing it (at step ") != NULL,
                  "...%s", log_tail(log));
    ck_assert_msg(strstr(log, "); gossip-bmuf goes on without it; 2 of 3 nodes live\n") != NULL,
                  "...%s", log_tail(log));
    snprintf(want, sizeof want,
             "shoal: node 2 killed, stopped (SIGSTOP) 12 s after another node finished (the "
             "other nodes finished without it); the run's model, the average of 2 nodes, was "
             "written by node 0: %s/%s/model.bin\n",
             tmp_root, run);
    ck_assert_msg(strstr(log, want) != NULL, "no \"%s\" in ...%s", want, log_tail(log));
    free(log);
    models_load(&m, run, live, 2);
    ck_assert_msg(models_run_off_mean(&m) < 1e-5, "model.bin is %g off the live nodes' mean",
                  models_run_off_mean(&m));
    models_free(&m);
}
END_TEST

static Suite *
runs_suite(void)
{
    Suite *s = suite_create("runs");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_loop_test(core, test_run_each_algorithm, 0,
                        (int)(sizeof algorithms / sizeof algorithms[0]));
    tcase_add_test(core, test_allreduce_ring_or_halving);
    tcase_add_loop_test(core, test_allreduce_equals_big_batch, 0,
                        (int)(sizeof big_batch_opts / sizeof big_batch_opts[0]));
    tcase_add_test(core, test_run_unique);
    tcase_add_test(core, test_run_int8);
    tcase_set_timeout(core, 4 * HANG_S);
    tcase_add_loop_test(limits, test_survives_kill, 0, (int)(sizeof kills / sizeof kills[0]));
    tcase_add_test(limits, test_stopped_node_killed);
    tcase_set_timeout(limits, 4 * HANG_S);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/check_runs.XXXXXX");
    return test_main_in_tmp(runs_suite(), tmp_root, "check_runs");
}
