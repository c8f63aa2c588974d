/* Unit tests of a run against an outsider (issue 14): a forging client on the same
 * machine, linked against the wire code, that computes the run id offline and builds
 * correct, checksummed frames and rendezvous registrations but holds no key of the run,
 * replays every attack the issue found against a real run of three `shoal node`
 * processes over tcp on 127.0.0.1, once with cluster.security curve and once with mac:
 *   a registration as rank 2 with the right run id before the real rank 2 starts;
 *   at every node's endpoint a forged ABORT, a gossip snapshot of the wrong count, a NaN
 *   snapshot of the right size and 70,000 empty future-round frames, sent by a plain
 *   DEALER with the old "S" + rank routing id and by a CURVE client with made-up keys
 *   (curve), or as plain frames with a garbage MAC trailer and with none (mac).
 * The run must finish as if nobody had attacked (every node trains its share, the
 * model has its size, no hang), the outsider must receive nothing at all, and the
 * nodes must say they refused it.
 *
 * The rest of the attack suite lives beside the code it guards: a member's bad frames
 * (a NaN or wrong-size snapshot, left out of its round) in check_sync_algo
 * (test_bad_snapshot), a member's bad rows in check_sync_rows, and a squatter on the
 * ipc directory in check_ipc_dir. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "node/sl_rendezvous.h"
#include "transport/sl_wire.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-attacks-XXXXXX";
static char data_dir[1024];
static char shoal_bin[1024];

/* HANG_S: a guard that stops a run that hangs or crawls (the attacks once made runs
 * crawl), never a timing the test measures; the run takes a few seconds. */
enum { NODES = 3, FLOOD = 70000, HANG_S = 60, MAX_SOCKS = 16 };
/* A registration before its endpoint: "SLRV", version, kind, run id, rank, size, session
 * key, generation (sl_rendezvous.h). */
enum { REGISTER_BYTES = 4 + 2 + 2 + 8 + 4 + 4 + SL_RDV_SESSION_BYTES + 8 };

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------- the forging client */

/* The outsider: every socket it opens towards the run is kept, to count what the run
 * sends back (nothing, or the attack worked). */
typedef struct {
    void *ctx;
    void *socks[MAX_SOCKS];
    int nsocks;
    void *rdv[2], *monitors[2]; /* its two rendezvous sockets, and their monitors */
    long received;              /* messages from any node */
} forger_t;

static void *
forger_socket(forger_t *f, int type)
{
    void *s = zmq_socket(f->ctx, type);
    int zero = 0;

    ck_assert_ptr_nonnull(s);
    ck_assert_int_lt(f->nsocks, MAX_SOCKS);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero), 0); /* queue it all */
    f->socks[f->nsocks++] = s;
    return s;
}

/* Makes s a CURVE client with keys of the outsider's own making: it knows neither a
 * rank's key nor the server's public key. */
static void
made_up_curve_client(void *s)
{
    char pub[41], sec[41], server[41], unused[41];

    ck_assert_int_eq(zmq_curve_keypair(pub, sec), 0);
    ck_assert_int_eq(zmq_curve_keypair(server, unused), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server, 40), 0);
}

/* A DEALER to endpoint: plain, with the routing id a node's DEALER of rank claimed
 * has ("S", rank, nonce), or a CURVE client with made-up keys. */
static void *
forger_dealer(forger_t *f, int curve, uint32_t claimed, const char *endpoint)
{
    void *s = forger_socket(f, ZMQ_DEALER);

    if (curve) {
        made_up_curve_client(s);
    } else {
        unsigned char id[9] = {'S'};
        sl_put_u32(id + 1, claimed);
        sl_put_u32(id + 5, 0x0a77acc0u + (uint32_t)f->nsocks); /* ROUTERs refuse a twin id */
        ck_assert_int_eq(zmq_setsockopt(s, ZMQ_ROUTING_ID, id, sizeof id), 0);
    }
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

/* One frame of run_id from sender to receiver, encoded as the wire code does: with a
 * full checksum (curve), or as a local frame followed by a trailer of garbage or by
 * none (mac). 1 when it was queued; 0 when the socket has no connection to queue it on
 * (a CURVE server refused it, and ZeroMQ has not yet tried again). */
static int
forge(void *s, uint64_t run_id, uint32_t sender, uint32_t receiver, unsigned kind,
      unsigned encoding, uint64_t round, uint32_t component, uint32_t count, const void *payload,
      int mac, int trailer)
{
    sl_wire_key_t key = {round, component, 0, receiver, (uint8_t)kind};
    sl_wire_header_t h = sl_wire_header_for(run_id, sender, &key, count, encoding, 1.0f);
    unsigned char head[SL_WIRE_HEADER_BYTES], garbage[24];
    int more = trailer ? ZMQ_SNDMORE : 0;

    ck_assert_int_eq(mac ? sl_wire_encode_head(&h, head) : sl_wire_encode(&h, payload, head),
                     SL_OK);
    if (zmq_send(s, head, sizeof head, ZMQ_DONTWAIT | (h.payload_bytes ? ZMQ_SNDMORE : more)) < 0) {
        ck_assert_msg(zmq_errno() == EAGAIN, "zmq_send: %s", zmq_strerror(zmq_errno()));
        return 0;
    }
    /* the rest of a message whose first part was queued is queued too */
    if (h.payload_bytes)
        ck_assert_int_eq(zmq_send(s, payload, h.payload_bytes, ZMQ_DONTWAIT | more),
                         (int)h.payload_bytes);
    if (trailer) {
        for (size_t i = 0; i < sizeof garbage; i++)
            garbage[i] = (unsigned char)(i * 37 + round);
        ck_assert_int_eq(zmq_send(s, garbage, sizeof garbage, ZMQ_DONTWAIT), (int)sizeof garbage);
    }
    return 1;
}

/* A registration as rank of size with run_id and endpoint, as sl_rendezvous.h lays it
 * out, from a plain DEALER or a CURVE client with made-up keys; a monitor of the socket
 * into f->monitors[which], to see the connection refused. */
static void
forger_register(forger_t *f, int which, int curve, const char *master, uint64_t run_id,
                uint32_t rank, uint32_t size, const char *endpoint)
{
    unsigned char m[REGISTER_BYTES + SL_RDV_ENDPOINT_MAX] = "SLRV";
    char mon[64];
    size_t len = strlen(endpoint);
    void *s = forger_socket(f, ZMQ_DEALER);

    f->rdv[which] = s;
    snprintf(mon, sizeof mon, "inproc://forger-monitor-%d", which);
    ck_assert_int_eq(zmq_socket_monitor(
                         s, mon,
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH),
                     0);
    f->monitors[which] = zmq_socket(f->ctx, ZMQ_PAIR);
    ck_assert_ptr_nonnull(f->monitors[which]);
    ck_assert_int_eq(zmq_connect(f->monitors[which], mon), 0);
    if (curve)
        made_up_curve_client(s);
    sl_put_u16(m + 4, SL_RDV_VERSION);
    sl_put_u16(m + 6, 1);
    sl_put_u64(m + 8, run_id);
    sl_put_u32(m + 16, rank);
    sl_put_u32(m + 20, size);
    memset(m + 24, 0x5a, SL_RDV_SESSION_BYTES);
    memcpy(m + REGISTER_BYTES, endpoint, len);
    ck_assert_int_eq(zmq_connect(s, master), 0);
    ck_assert_int_eq(zmq_send(s, m, REGISTER_BYTES + len, ZMQ_DONTWAIT),
                     (int)(REGISTER_BYTES + len));
}

/* Waits until rank 0 has refused the connection of rendezvous socket which, or has
 * answered on it (which the caller's count of messages received then catches). */
static void
forger_wait_refused(forger_t *f, int which)
{
    double t0 = now_s();
    zmq_msg_t ev;

    zmq_msg_init(&ev);
    for (;;) {
        zmq_pollitem_t it[2] = {{f->monitors[which], 0, ZMQ_POLLIN, 0},
                                {f->rdv[which], 0, ZMQ_POLLIN, 0}};
        ck_assert_int_ge(zmq_poll(it, 2, 100), 0);
        if (it[1].revents & ZMQ_POLLIN)
            break; /* counted by forger_drain */
        if (it[0].revents & ZMQ_POLLIN) {
            ck_assert_int_ge(zmq_msg_recv(&ev, f->monitors[which], 0), 6);
            if (zmq_msg_more(&ev)) /* the event's second part: the endpoint */
                ck_assert_int_ge(zmq_msg_recv(&ev, f->monitors[which], 0), 0);
            break;
        }
        ck_assert_msg(now_s() - t0 < HANG_S, "rank 0 never refused the outsider's registration");
    }
    zmq_msg_close(&ev);
}

/* Counts every message waiting on the outsider's sockets; waits up to timeout_ms. */
static void
forger_drain(forger_t *f, int timeout_ms)
{
    zmq_pollitem_t items[MAX_SOCKS];
    zmq_msg_t m;

    for (int i = 0; i < f->nsocks; i++)
        items[i] = (zmq_pollitem_t){f->socks[i], 0, ZMQ_POLLIN, 0};
    ck_assert_int_ge(zmq_poll(items, f->nsocks, timeout_ms), 0);
    zmq_msg_init(&m);
    for (int i = 0; i < f->nsocks; i++)
        while (zmq_msg_recv(&m, f->socks[i], ZMQ_DONTWAIT) >= 0)
            if (!zmq_msg_more(&m))
                f->received++;
    zmq_msg_close(&m);
}

static void
forger_fini(forger_t *f)
{
    for (int i = 0; i < f->nsocks; i++)
        zmq_close(f->socks[i]);
    for (int i = 0; i < 2; i++)
        if (f->monitors[i])
            zmq_close(f->monitors[i]);
    zmq_ctx_term(f->ctx);
}

/* ------------------------------------------------------------------ the run */

typedef struct {
    int mac; /* cluster.security mac, else curve */
    char name[16], conf[1100], set[1200], master[64];
    uint64_t run_id; /* computed offline, as the outsider does */
    uint32_t comp;   /* a dense component, and its elements */
    uint32_t comp_count;
    size_t nparams;
    pid_t pid[NODES];
    char endpoint[NODES][SL_RDV_ENDPOINT_MAX];
} run_t;

static const char *const launcher_vars[] = {
    "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",     "PMI_SIZE",     "SHOAL_MASTER_ADDR",    "SHOAL_MASTER_PORT"};

/* shoal with args (NULL-terminated), stdout and stderr into <tmp>/<tag>.out and .err,
 * SHOAL_LOG=debug; it dies with this process. */
static pid_t
start_shoal(const char *tag, const char *const *args)
{
    char out[1200], err[1200];
    const char *argv[16] = {shoal_bin};
    int n = 1;
    pid_t pid;

    snprintf(out, sizeof out, "%s/%s.out", tmp_root, tag);
    snprintf(err, sizeof err, "%s/%s.err", tmp_root, tag);
    while (*args && n < 15)
        argv[n++] = *args++;
    argv[n] = NULL;
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
            _exit(99);
        setenv("SHOAL_LOG", "debug", 1);
        setenv("TMPDIR", tmp_root, 1);
        for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
            unsetenv(launcher_vars[i]);
        execv(shoal_bin, (char *const *)argv);
        _exit(98);
    }
    return pid;
}

/* What shoal wrote to <tmp>/<tag>.<ext> (malloc'd). */
static char *
output_of(const char *tag, const char *ext)
{
    char path[1200];
    char *text;

    snprintf(path, sizeof path, "%s/%s.%s", tmp_root, tag, ext);
    text = test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "%s is missing", path);
    return text;
}

static void
kill_nodes(run_t *r)
{
    for (int k = 0; k < NODES; k++)
        if (r->pid[k] > 0) {
            kill(r->pid[k], SIGKILL);
            waitpid(r->pid[k], NULL, 0);
            r->pid[k] = 0;
        }
}

/* Waits for node k's debug line "rank K of 3: endpoint E, ..., run id X" and takes
 * its endpoint; the run id must be the one the outsider computed. */
static void
wait_endpoint(run_t *r, int k)
{
    char path[1200], needle[64], *text, *line;
    double t0 = now_s();
    unsigned long long id;

    snprintf(path, sizeof path, "%s/%s-%d.err", tmp_root, r->name, k);
    snprintf(needle, sizeof needle, "rank %d of %d: endpoint ", k, NODES);
    for (;;) {
        text = test_read_file(path, NULL); /* NULL until the node has opened it */
        if (text && (line = strstr(text, needle)) != NULL && strchr(line, '\n'))
            break;
        free(text);
        if (waitpid(r->pid[k], NULL, WNOHANG) == r->pid[k]) {
            r->pid[k] = 0;
            kill_nodes(r);
            ck_abort_msg("node %d of the %s run exited before its rendezvous", k, r->name);
        }
        if (now_s() - t0 > HANG_S) {
            kill_nodes(r);
            ck_abort_msg("node %d of the %s run said nothing of its endpoint", k, r->name);
        }
        test_sleep_ms(20);
    }
    line += strlen(needle);
    ck_assert_int_eq(sscanf(line, "%255[^,]", r->endpoint[k]), 1);
    line = strstr(line, "run id ");
    ck_assert_ptr_nonnull(line);
    ck_assert_int_eq(sscanf(line + 7, "%llx", &id), 1);
    ck_assert_msg(id == r->run_id, "the outsider's run id %016llx is not the run's %016llx",
                  (unsigned long long)r->run_id, id);
    free(text);
}

static void
start_node(run_t *r, int k)
{
    char tag[32], rank[8];

    snprintf(tag, sizeof tag, "%s-%d", r->name, k);
    snprintf(rank, sizeof rank, "%d", k);
    r->pid[k] = start_shoal(tag, (const char *[]){"node", r->conf, "--rank", rank, "--size", "3",
                                                  "--master", r->master, "--set", r->set, NULL});
}

/* The configuration, the key file, the master address, and what an outsider works
 * out offline: the run id, and a component's index and size from the model. */
static void
prepare_run(run_t *r, const char *security)
{
    char yaml[4096], key[1100], tag[32];
    sl_config_t cfg;
    sl_corpus_t corpus;
    sl_backend_t *be = NULL;
    sl_lm_t *lm = NULL;
    pid_t pid;
    int ws;

    snprintf(r->name, sizeof r->name, "%s", security);
    snprintf(r->conf, sizeof r->conf, "%s/%s.yaml", tmp_root, security);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 50, checkpoint_every: 500}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, epochs: 4, optimizer: {type: adam, lr: 0.01}}\n"
             "sync: {algorithm: gossip-bmuf, period: 4}\n"
             "cluster: {nodes: 3, transport: tcp, security: %s, rendezvous_timeout_ms: 60000}\n",
             security, tmp_root, security, data_dir, data_dir, tmp_root, security);
    test_write_file(r->conf, yaml, strlen(yaml));
    snprintf(key, sizeof key, "%s/%s.key", tmp_root, security);
    snprintf(r->set, sizeof r->set, "cluster.key_file=%s", key);
    snprintf(tag, sizeof tag, "%s-keygen", security);
    pid = start_shoal(tag, (const char *[]){"keygen", key, NULL});
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "shoal keygen failed");
    snprintf(r->master, sizeof r->master, "127.0.0.1:%d", test_free_port());

    sl_config_init(&cfg);
    ck_assert_msg(sl_config_load_file(&cfg, r->conf) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_config_set(&cfg, r->set) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_config_validate(&cfg) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_rendezvous_run_id(&cfg, r->master, &r->run_id) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_corpus_load(&corpus, &cfg) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(sl_backend_cpu_new(&be, 1), SL_OK);
    ck_assert_msg(sl_lm_new(&lm, &cfg, sl_vocab_size(corpus.vocab), cfg.sync.embedding_shards,
                            cfg.train.batch, be) == SL_OK,
                  "%s", sl_err_msg());
    r->nparams = sl_lm_nparams(lm);
    r->comp = UINT32_MAX;
    for (int i = 0; i < sl_lm_ncomponents(lm) && r->comp == UINT32_MAX; i++)
        if (!sl_lm_component(lm, i)->sparse) {
            r->comp = (uint32_t)i;
            r->comp_count = (uint32_t)sl_lm_component(lm, i)->count;
        }
    ck_assert_uint_ne(r->comp, UINT32_MAX);
    sl_lm_destroy(&lm);
    sl_backend_destroy(&be);
    sl_corpus_fini(&corpus);
    sl_config_fini(&cfg);
}

/* Every attack on node k's endpoint, from two sockets: a plain DEALER that claims to be
 * the next rank and a CURVE client with made-up keys (curve), or plain frames with a
 * garbage trailer and with none (mac). Over the plain connections of mac every frame
 * leaves; a CURVE server's refusal leaves a socket nothing to queue on for a while, so
 * there only the frames queued before it get as far as the handshake. */
static void
attack_node(forger_t *f, const run_t *r, uint32_t k)
{
    static const char why[] = "forged: the run is over";
    uint32_t from = (k + 1) % NODES, n = r->comp_count;
    float *nan_vals = malloc((n + 1) * sizeof *nan_vals);

    ck_assert_ptr_nonnull(nan_vals);
    for (uint32_t i = 0; i <= n; i++)
        nan_vals[i] = i % 2 ? NAN : 1.0f;
    for (int v = 0; v < 2; v++) {
        int curve = !r->mac && v == 1, trailer = r->mac && v == 0;
        void *s = forger_dealer(f, curve, from, r->endpoint[k]);
        long queued = 0, total = 0;

        total++;
        queued += forge(s, r->run_id, from, k, SL_WIRE_ABORT, SL_WIRE_BYTES, 0, 0, sizeof why - 1,
                        why, r->mac, trailer);
        for (uint64_t round = 1; round <= 2; round++) {
            total += 2;
            queued += forge(s, r->run_id, from, k, SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_FP32, round,
                            r->comp, n + 1, nan_vals, r->mac, trailer); /* the wrong count */
            queued += forge(s, r->run_id, from, k, SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_FP32, round,
                            r->comp, n, nan_vals, r->mac, trailer); /* the right size, NaN */
        }
        for (uint32_t i = 0; i < FLOOD; i++, total++) /* empty frames of future rounds */
            queued += forge(s, r->run_id, from, k, SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_FP32, 1000 + i,
                            r->comp, 0, NULL, r->mac, trailer);
        if (r->mac)
            ck_assert_int_eq(queued, total);
    }
    free(nan_vals);
}

/* One run under attack: nodes 0 and 1 start and are attacked; the outsider registers
 * as rank 2 (plain and CURVE) and is refused; only then does the real rank 2 start, and
 * it is attacked too. Then the outsider listens until the nodes are done. */
static void
run_attacked(const char *security)
{
    run_t r;
    forger_t f;
    char tag[32], listen_ep[256], path[1300], *out, *err;
    size_t len = sizeof listen_ep, n;
    double t0;
    int left, ws[NODES];
    float *params;
    void *listener;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    test_become_subreaper();
    memset(&r, 0, sizeof r);
    memset(&f, 0, sizeof f);
    r.mac = strcmp(security, "mac") == 0;
    prepare_run(&r, security);
    f.ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(f.ctx);
    /* where the outsider asks to be reached, should rank 0 take its registration */
    listener = forger_socket(&f, ZMQ_ROUTER);
    ck_assert_int_eq(zmq_bind(listener, "tcp://127.0.0.1:*"), 0);
    ck_assert_int_eq(zmq_getsockopt(listener, ZMQ_LAST_ENDPOINT, listen_ep, &len), 0);

    start_node(&r, 0);
    start_node(&r, 1);
    wait_endpoint(&r, 0);
    wait_endpoint(&r, 1);
    snprintf(path, sizeof path, "tcp://%s", r.master);
    forger_register(&f, 0, 0, path, r.run_id, 2, NODES, listen_ep);
    forger_register(&f, 1, 1, path, r.run_id, 2, NODES, listen_ep);
    attack_node(&f, &r, 0);
    attack_node(&f, &r, 1);
    forger_wait_refused(&f, 0);
    forger_wait_refused(&f, 1);
    start_node(&r, 2);
    wait_endpoint(&r, 2);
    attack_node(&f, &r, 2);

    t0 = now_s();
    do {
        forger_drain(&f, 50);
        left = 0;
        for (int k = 0; k < NODES; k++) {
            if (r.pid[k] > 0 && waitpid(r.pid[k], &ws[k], WNOHANG) == r.pid[k])
                r.pid[k] = 0;
            left += r.pid[k] > 0;
        }
        if (left && now_s() - t0 > HANG_S) {
            kill_nodes(&r);
            ck_abort_msg("the %s run under attack was not done after %d s (the outsider "
                         "received %ld message(s))",
                         security, HANG_S, f.received);
        }
    } while (left);
    forger_drain(&f, 0);
    ck_assert_msg(f.received == 0, "the outsider received %ld message(s) from the run", f.received);
    forger_fini(&f);
    ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "a process was left");

    for (int k = 0; k < NODES; k++) {
        char expect[64], *summary;
        long steps = 4 * test_share_batches(r.conf, k, NODES, 4, 8);

        snprintf(tag, sizeof tag, "%s-%d", security, k);
        out = output_of(tag, "out");
        err = output_of(tag, "err");
        snprintf(expect, sizeof expect, "shoal: node %d: done: 4 epochs", k);
        ck_assert_msg(WIFEXITED(ws[k]) && WEXITSTATUS(ws[k]) == 0 && strstr(out, expect),
                      "node %d of the %s run failed under attack:\n%s\n%s", k, security, out, err);
        ck_assert_msg(strstr(err, r.mac ? " that no session key of this run proved"
                                        : " of processes that proved no key of this run"),
                      "node %d of the %s run does not say it refused the outsider:\n%s", k,
                      security, err);
        snprintf(path, sizeof path, "%s/%s/node-%d/summary.json", tmp_root, security, k);
        summary = test_read_file(path, NULL);
        ck_assert_msg(summary != NULL, "%s is missing", path);
        ck_assert_int_eq((long)test_json_num(summary, "steps"), steps);
        free(summary);
        free(out);
        free(err);
    }
    snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, security);
    params = test_model_params(path, &n);
    ck_assert_uint_eq(n, r.nparams);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(isfinite(params[i]), "the run's model has a non-finite parameter %zu", i);
    free(params);
}

START_TEST(test_outsider_against_curve)
{
    run_attacked("curve");
}
END_TEST

START_TEST(test_outsider_against_mac)
{
    run_attacked("mac");
}
END_TEST

static Suite *
attacks_suite(void)
{
    Suite *s = suite_create("attacks");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(limits, 2 * HANG_S + 30);
    tcase_add_test(limits, test_outsider_against_curve);
    tcase_add_test(limits, test_outsider_against_mac);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    test_data_dir(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_ERROR);
    return test_main_in_tmp(attacks_suite(), tmp_root, "check_attacks");
}
