/* Unit tests of launch and rendezvous: the cluster config keys and the run id, and the
 * rendezvous between forked nodes (any start order, tcp wildcards, timeouts naming the
 * missing ranks, refusals), and the relay of a new process's session key during the run
 * (threads of one process). The built shoal binary's `run` and `node` commands are
 * tested in check_launch_run.c. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_rendezvous.h"

#include "test_exchange.h"
#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-launch-XXXXXX";

/* Seconds after which a shoal process or a file it should write counts as hung: a
 * guard that stops the test and its processes, never a timing the test measures. The
 * test cases' own timeouts (Check's) are longer, so that the guard cleans up first. */
enum { HANG_S = 90 };

/* ------------------------------------------------------------ config keys */

START_TEST(test_cluster_defaults_and_values)
{
    sl_config_t c;

    sl_config_init(&c);
    ck_assert_int_eq(c.cluster.nodes, 1);
    ck_assert_int_eq(c.cluster.transport, SL_CLUSTER_IPC);
    ck_assert_str_eq(c.cluster.master, "");
    ck_assert_str_eq(c.cluster.bind, "127.0.0.1");
    ck_assert_int_eq(c.cluster.timeout_ms, 30000);
    ck_assert_int_eq(c.cluster.rendezvous_timeout_ms, 120000);
    ck_assert_int_eq(c.cluster.shared_memory, 1);
    ck_assert_int_eq(c.topology.degree, 0);
    ck_assert_str_eq(sl_cluster_transport_name(SL_CLUSTER_TCP), "tcp");
    ck_assert_msg(sl_config_load_string(&c,
                                        "cluster: {nodes: 4, transport: tcp, master: "
                                        "\"node001:29500\", bind: \"*\", timeout_ms: 500,\n"
                                        "          rendezvous_timeout_ms: 1500}\n"
                                        "topology: {degree: 2}\n",
                                        "c.yaml") == SL_OK,
                  "%s", sl_err_msg());
    ck_assert_int_eq(c.cluster.nodes, 4);
    ck_assert_int_eq(c.cluster.transport, SL_CLUSTER_TCP);
    ck_assert_str_eq(c.cluster.master, "node001:29500");
    ck_assert_str_eq(c.cluster.bind, "*");
    ck_assert_int_eq(c.cluster.timeout_ms, 500);
    ck_assert_int_eq(c.cluster.rendezvous_timeout_ms, 1500);
    ck_assert_int_eq(c.topology.degree, 2);
    ck_assert_int_eq(sl_config_set(&c, "cluster.master=10.1.2.3:1"), SL_OK);
    ck_assert_int_eq(sl_config_set(&c, "cluster.bind=eth0"), SL_OK);
    ck_assert_int_eq(sl_config_set(&c, "cluster.master="), SL_OK);
    ck_assert_str_eq(c.cluster.master, "");
    /* auto: the launcher's number of nodes (shoal node); written back as auto */
    ck_assert_int_eq(sl_config_set(&c, "cluster.nodes=auto"), SL_OK);
    ck_assert_int_eq(c.cluster.nodes, SL_CONFIG_AUTO_INT);
    sl_config_validate(&c); /* data.train is missing here, and nothing else */
    ck_assert_str_eq(sl_err_msg(), "c.yaml: 'data.train' is required");
    {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        sl_config_t back;

        ck_assert_int_eq(sl_config_write_yaml(&c, f), SL_OK);
        fclose(f);
        ck_assert_ptr_nonnull(strstr(text, "nodes: auto"));
        sl_config_init(&back);
        ck_assert_int_eq(sl_config_load_string(&back, text, "back.yaml"), SL_OK);
        ck_assert_int_eq(back.cluster.nodes, SL_CONFIG_AUTO_INT);
        sl_config_fini(&back);
        free(text);
    }
    sl_config_fini(&c);
}
END_TEST

typedef struct {
    const char *set;
    const char *message;
} bad_set_t;

static const bad_set_t bad_sets[] = {
    {"cluster.nodes=0", "--set cluster.nodes:1:15: 'cluster.nodes' must be at least 1, got 0"},
    {"cluster.nodes=-1", "--set cluster.nodes:1:15: 'cluster.nodes' must be at least 1, got -1"},
    {"cluster.nodes=many",
     "--set cluster.nodes:1:15: 'cluster.nodes' must be an integer or auto, got 'many'"},
    {"cluster.transport=udp",
     "--set cluster.transport:1:19: 'cluster.transport' must be one of: ipc, tcp (got 'udp')"},
    {"cluster.master=node001",
     "--set cluster.master:1:16: 'cluster.master' must be HOST:PORT (port 1 to 65535) or empty "
     "(got 'node001')"},
    {"cluster.master=node001:0",
     "--set cluster.master:1:16: 'cluster.master' must be HOST:PORT (port 1 to 65535) or empty "
     "(got 'node001:0')"},
    {"cluster.master=node001:65536",
     "--set cluster.master:1:16: 'cluster.master' must be HOST:PORT (port 1 to 65535) or empty "
     "(got 'node001:65536')"},
    {"cluster.master=a b:80",
     "--set cluster.master:1:16: 'cluster.master' must be HOST:PORT (port 1 to 65535) or empty "
     "(got 'a b:80')"},
    {"cluster.bind=tcp://1.2.3.4",
     "--set cluster.bind:1:14: 'cluster.bind' must be an IPv4 address, an interface name or * "
     "(got 'tcp://1.2.3.4')"},
    {"cluster.bind=1.2.3.4:80",
     "--set cluster.bind:1:14: 'cluster.bind' must be an IPv4 address, an interface name or * "
     "(got '1.2.3.4:80')"},
    {"cluster.bind=", "--set cluster.bind:1:14: 'cluster.bind' must not be empty"},
    {"cluster.timeout_ms=0",
     "--set cluster.timeout_ms:1:20: 'cluster.timeout_ms' must be at least 1, got 0"},
    {"cluster.rendezvous_timeout_ms=-5",
     "--set cluster.rendezvous_timeout_ms:1:31: 'cluster.rendezvous_timeout_ms' must be at "
     "least 1, got -5"},
    {"topology.degree=-1",
     "--set topology.degree:1:17: 'topology.degree' must be at least 0, got -1"},
    {"cluster.node=2",
     "--set cluster.node:1:9: unknown key 'node' in 'cluster' (did you mean 'nodes'?)"},
};

START_TEST(test_cluster_bad_values)
{
    const bad_set_t *b = &bad_sets[_i];
    sl_config_t c;

    sl_config_init(&c);
    ck_assert_int_eq(sl_config_set(&c, b->set), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), b->message);
    /* a failed override changes nothing */
    ck_assert_int_eq(c.cluster.nodes, 1);
    ck_assert_str_eq(c.cluster.bind, "127.0.0.1");
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_run_id)
{
    sl_config_t a, b;
    uint64_t ia, ib, ic, id;

    sl_config_init(&a);
    sl_config_init(&b);
    ck_assert_int_eq(sl_rendezvous_run_id(&a, "node001:29500", &ia), SL_OK);
    ck_assert_int_eq(sl_rendezvous_run_id(&b, "node001:29500", &ib), SL_OK);
    ck_assert_uint_eq(ia, ib);
    ck_assert_int_eq(sl_rendezvous_run_id(&a, "node001:29501", &ic), SL_OK);
    ck_assert_uint_ne(ia, ic);
    /* each node its own address and key path: the same run */
    ck_assert_int_eq(sl_config_set(&b, "cluster.bind=198.18.0.2"), SL_OK);
    ck_assert_int_eq(sl_config_set(&b, "cluster.key_file=/home/b/run.key"), SL_OK);
    ck_assert_int_eq(sl_rendezvous_run_id(&b, "node001:29500", &id), SL_OK);
    ck_assert_uint_eq(ia, id);
    ck_assert_int_eq(sl_config_set(&b, "train.batch=33"), SL_OK);
    ck_assert_int_eq(sl_rendezvous_run_id(&b, "node001:29500", &id), SL_OK);
    ck_assert_uint_ne(ia, id);
    sl_config_fini(&a);
    sl_config_fini(&b);
}
END_TEST

/* ------------------------------------------------------------- rendezvous */

/* The loop tests of the rendezvous run once without security (_i = 0) and once with
 * CURVE (_i = 1): the secret every spawned node holds, or NULL. */
static sl_secret_t run_secret, outsider_secret;
static const sl_secret_t *node_secret;

static void
use_security(int curve)
{
    ck_assert_int_eq(sl_secret_make(&run_secret), SL_OK);
    ck_assert_int_eq(sl_secret_make(&outsider_secret), SL_OK);
    node_secret = curve ? &run_secret : NULL;
}

/* A node forked for a rendezvous test, and the pipe it reports on. */
typedef struct {
    pid_t pid;
    int fd;
    int master_read; /* read_master took the first line */
} peer_t;

/* Forks a node that waits delay_ms, then meets the others, its debug log into the file
 * log (NULL: stderr at the default level). It writes its master endpoint as it listens
 * ("-" if it could not start), then its status, its message and the table, one line
 * each. The test process itself never touches ZeroMQ. */
static peer_t
spawn_logged(int rank, int size, uint64_t run_id, const char *master, const char *endpoint,
             int timeout_ms, int delay_ms, const char *log)
{
    int p[2];
    peer_t peer;

    ck_assert_int_eq(pipe(p), 0);
    peer.pid = fork();
    ck_assert_int_ge(peer.pid, 0);
    if (peer.pid == 0) {
        sl_rendezvous_opts_t o = {rank, size, master, NULL, timeout_ms, NULL, node_secret, 0};
        sl_rendezvous_t *r = NULL;
        sl_rendezvous_table_t t = {0, NULL, NULL, NULL};
        unsigned char session[SL_RDV_SESSION_BYTES];
        sl_status_t st;
        FILE *f;

        close(p[0]);
        if (log && freopen(log, "w", stderr)) {
            setvbuf(stderr, NULL, _IOLBF, 0);
            sl_log_set_level(SL_LOG_DEBUG);
        }
        f = fdopen(p[1], "w");
        test_sleep_ms(delay_ms);
        st = sl_rendezvous_new(&r, &o);
        fprintf(f, "%s\n", st == SL_OK ? sl_rendezvous_master(r) : "-");
        fflush(f);
        memset(session, rank + 1, sizeof session);
        if (st == SL_OK)
            st = sl_rendezvous_exchange(r, run_id, endpoint, session, &t);
        for (int i = 0; st == SL_OK && i < t.size; i++) /* every node's session key */
            for (int b = 0; b < SL_RDV_SESSION_BYTES; b++)
                if (t.sessions[i * SL_RDV_SESSION_BYTES + b] != i + 1)
                    st = sl_err_set(SL_ERR_FORMAT, "rank %d's session key is wrong", i);
        fprintf(f, "%d\n%s\n", st, st == SL_OK ? "" : sl_err_msg());
        for (int i = 0; i < t.size; i++)
            fprintf(f, "%s\n", t.endpoints[i]);
        fclose(f);
        sl_rendezvous_table_fini(&t);
        sl_rendezvous_destroy(&r); /* rank 0: lets the tables leave */
        _exit(0);
    }
    close(p[1]);
    peer.fd = p[0];
    peer.master_read = 0;
    return peer;
}

static peer_t
spawn(int rank, int size, uint64_t run_id, const char *master, const char *endpoint, int timeout_ms,
      int delay_ms)
{
    return spawn_logged(rank, size, run_id, master, endpoint, timeout_ms, delay_ms, NULL);
}

/* The first line the node wrote: its master endpoint. */
static void
read_master(peer_t *p, char *buf, size_t size)
{
    size_t n = 0;
    char c;

    while (n + 1 < size && read(p->fd, &c, 1) == 1 && c != '\n')
        buf[n++] = c;
    buf[n] = '\0';
    p->master_read = 1;
}

/* Everything else the node wrote, once it exited: status, message, table. */
typedef struct {
    int status;
    char message[1024];
    int size;
    char table[8][300];
} outcome_t;

static outcome_t
finish(peer_t *p)
{
    outcome_t o;
    char buf[8192], *line, *save;
    size_t n = 0;
    ssize_t got;
    int ws, k = 0;

    memset(&o, 0, sizeof o);
    while ((got = read(p->fd, buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(p->fd);
    ck_assert_int_eq(waitpid(p->pid, &ws, 0), p->pid);
    ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    line = buf;
    if (!p->master_read) /* skip the master line */
        line = strchr(line, '\n') + 1;
    o.status = atoi(line);
    line = strchr(line, '\n') + 1;
    save = strchr(line, '\n');
    snprintf(o.message, sizeof o.message, "%.*s", (int)(save - line), line);
    for (line = save + 1; *line && k < 8; k++) {
        char *end = strchr(line, '\n');
        snprintf(o.table[k], sizeof o.table[k], "%.*s", (int)(end - line), line);
        line = end + 1;
    }
    o.size = k;
    return o;
}

/* Four nodes started in a shuffled order with random delays: every one gets the same
 * full table, whoever came first. */
START_TEST(test_rendezvous_any_order)
{
    char master[1100], ep[4][64];
    int order[4] = {0, 1, 2, 3};
    peer_t peers[4];
    uint64_t run_id = 0x1234abcdULL;

    use_security(_i);
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    snprintf(master, sizeof master, "ipc://%s/rdv-any-%d", tmp_root, _i);
    for (int i = 3; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int r = 0; r < 4; r++)
        snprintf(ep[r], sizeof ep[r], r % 2 ? "ipc:///tmp/x/rank-%d" : "tcp://10.0.0.%d:4000",
                 r + 1);
    for (int i = 0; i < 4; i++) {
        int r = order[i];
        peers[r] = spawn(r, 4, run_id, master, ep[r], HANG_S * 1000, rand() % 200);
        test_sleep_ms(rand() % 50);
    }
    for (int r = 0; r < 4; r++) {
        outcome_t o = finish(&peers[r]);
        ck_assert_msg(o.status == SL_OK, "rank %d (order %d %d %d %d): %s", r, order[0], order[1],
                      order[2], order[3], o.message);
        ck_assert_int_eq(o.size, 4);
        for (int k = 0; k < 4; k++)
            ck_assert_str_eq(o.table[k], ep[k]);
    }
}
END_TEST

/* With CURVE, a process with another secret that claims rank 1 before the real one
 * gets no answer at all (not even a refusal naming the run) and takes nothing: the
 * real rank 1 registers, and every table is the real one. */
START_TEST(test_rendezvous_outsider)
{
    char master[1100];
    peer_t p0, p1, intruder;
    outcome_t o;

    use_security(1);
    snprintf(master, sizeof master, "ipc://%s/rdv-outsider", tmp_root);
    p0 = spawn(0, 2, 42, master, "ipc:///tmp/x/0", HANG_S * 1000, 0);
    node_secret = &outsider_secret;
    intruder = spawn(1, 2, 42, master, "ipc:///tmp/x/intruder", 1500, 0);
    o = finish(&intruder); /* its wait ran out without a word from rank 0 */
    ck_assert_int_eq(o.status, SL_ERR_TIMEOUT);
    ck_assert_msg(strstr(o.message, "no table from rank 0") != NULL, "%s", o.message);
    node_secret = &run_secret;
    p1 = spawn(1, 2, 42, master, "ipc:///tmp/x/1", HANG_S * 1000, 0);
    o = finish(&p1);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_str_eq(o.table[1], "ipc:///tmp/x/1");
    o = finish(&p0);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_int_eq(o.size, 2);
    ck_assert_str_eq(o.table[0], "ipc:///tmp/x/0");
    ck_assert_str_eq(o.table[1], "ipc:///tmp/x/1");
}
END_TEST

/* Rank 0 on any free tcp port of 127.0.0.1 says which; nodes listening on every
 * interface get the address they were seen from (rank 0: the master's host). */
START_TEST(test_rendezvous_tcp_wildcards)
{
    char master[300];
    peer_t p0, p1;
    outcome_t o0, o1;

    p0 = spawn(0, 2, 7, "tcp://127.0.0.1:*", "tcp://0.0.0.0:5000", HANG_S * 1000, 0);
    read_master(&p0, master, sizeof master);
    ck_assert_msg(strncmp(master, "tcp://127.0.0.1:", 16) == 0 && atoi(master + 16) > 0,
                  "master %s", master);
    p1 = spawn(1, 2, 7, master, "tcp://0.0.0.0:5001", HANG_S * 1000, 0);
    o0 = finish(&p0);
    o1 = finish(&p1);
    ck_assert_msg(o0.status == SL_OK, "%s", o0.message);
    ck_assert_msg(o1.status == SL_OK, "%s", o1.message);
    ck_assert_str_eq(o0.table[0], "tcp://127.0.0.1:5000");
    ck_assert_str_eq(o0.table[1], "tcp://127.0.0.1:5001");
    ck_assert_str_eq(o1.table[0], o0.table[0]);
    ck_assert_str_eq(o1.table[1], o0.table[1]);
}
END_TEST

/* A node that never comes: rank 0 names it after the timeout, and tells the node that
 * did come; a node without rank 0 says where it looked, at once when rank 0's host name
 * does not resolve. Rank 1 starts first (its master line says it is up) and waits far
 * longer than rank 0, so its message, which only rank 0 can have sent, shows that it
 * was told rather than timed out on its own. */
START_TEST(test_rendezvous_timeouts)
{
    char master[1100], expect[1400], none[1100], line[1100];
    peer_t p0, p1, lone;
    outcome_t o0, o1, ol;

    snprintf(master, sizeof master, "ipc://%s/rdv-timeout", tmp_root);
    p1 = spawn(1, 3, 9, master, "ipc:///tmp/x/1", HANG_S * 1000, 0);
    read_master(&p1, line, sizeof line);
    p0 = spawn(0, 3, 9, master, "ipc:///tmp/x/0", 3000, 0);
    o0 = finish(&p0);
    ck_assert_int_eq(o0.status, SL_ERR_TIMEOUT);
    ck_assert_str_eq(o0.message,
                     "rendezvous: timed out after 3 s waiting for rank 2 (2 of 3 registered: "
                     "0, 1)");
    o1 = finish(&p1);
    ck_assert_int_eq(o1.status, SL_ERR_TIMEOUT);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s gave up: timed out after 3 s waiting for rank 2 (2 of "
             "3 registered: 0, 1)",
             master);
    ck_assert_str_eq(o1.message, expect);

    snprintf(none, sizeof none, "ipc://%s/nobody-there", tmp_root);
    lone = spawn(2, 3, 9, none, "ipc:///tmp/x/2", 300, 0);
    ol = finish(&lone);
    ck_assert_int_eq(ol.status, SL_ERR_TIMEOUT);
    snprintf(expect, sizeof expect, "rendezvous: no table from rank 0 at %s after 0.3 s", none);
    ck_assert_str_eq(ol.message, expect);

    /* a host name that does not resolve: said at once, not after the (long) timeout;
     * only where this machine's resolver says so (without DNS it may say "try again") */
    {
        struct addrinfo hints = {.ai_family = AF_INET}, *ai = NULL;
        int rc = getaddrinfo("nohost.invalid", NULL, &hints, &ai);

        if (rc == 0)
            freeaddrinfo(ai);
        if (rc == EAI_NONAME) {
            lone = spawn(2, 3, 9, "tcp://nohost.invalid:2000", "ipc:///tmp/x/2", HANG_S * 1000, 0);
            ol = finish(&lone);
            ck_assert_int_eq(ol.status, SL_ERR_CONFIG);
            snprintf(expect, sizeof expect, "rendezvous: rank 0's address nohost.invalid:2000: %s",
                     gai_strerror(rc));
            ck_assert_str_eq(ol.message, expect);
        } else {
            fprintf(stderr, "check_launch: nohost.invalid: %s, not EAI_NONAME: its case left out\n",
                    gai_strerror(rc));
        }
    }

    /* two or more missing: a list; longer runs: ranges */
    snprintf(master, sizeof master, "ipc://%s/rdv-timeout6", tmp_root);
    p0 = spawn(0, 6, 9, master, "ipc:///tmp/x/0", 300, 0);
    o0 = finish(&p0);
    ck_assert_str_eq(o0.message, "rendezvous: timed out after 0.3 s waiting for ranks 1-5 (1 of 6 "
                                 "registered: 0)");
}
END_TEST

/* Rank 0 refuses another run id, another size and a rank given twice, each with its
 * reason, and still completes with the right nodes. Of the two live nodes given rank 1,
 * the one started first is refused, whether it registered first (the other takes the
 * rank from it) or second: it is the one that answers while the other still waits for
 * rank 2 (poll, not a head start). */
START_TEST(test_rendezvous_refusals)
{
    char master[1100], expect[1400], line[1100];
    peer_t p0, wrong_id, wrong_size, dup[2], last;
    outcome_t o;
    uint64_t id = 0x1111222233334444ULL, other = 0x5555666677778888ULL;
    static const char *const dup_ep[2] = {"ipc:///tmp/x/first", "ipc:///tmp/x/twice"};
    struct pollfd pf[2];
    int in, out;

    use_security(_i);
    snprintf(master, sizeof master, "ipc://%s/rdv-refuse-%d", tmp_root, _i);
    p0 = spawn(0, 3, id, master, "ipc:///tmp/x/0", HANG_S * 1000, 0);
    wrong_id = spawn(1, 3, other, master, "ipc:///tmp/x/a", HANG_S * 1000, 0);
    wrong_size = spawn(1, 4, id, master, "ipc:///tmp/x/b", HANG_S * 1000, 0);

    o = finish(&wrong_id);
    ck_assert_int_eq(o.status, SL_ERR_INVALID);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s refused rank 1: another run id: a node of another job, "
             "or started with another configuration or master address",
             master);
    ck_assert_str_eq(o.message, expect);
    o = finish(&wrong_size);
    ck_assert_int_eq(o.status, SL_ERR_INVALID);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s refused rank 1: rank 1 says the run has 4 nodes, rank 0 "
             "says otherwise",
             master);
    ck_assert_str_eq(o.message, expect);

    for (int k = 0; k < 2; k++) {
        dup[k] = spawn(1, 3, id, master, dup_ep[k], HANG_S * 1000, 0);
        read_master(&dup[k], line, sizeof line);
        pf[k].fd = dup[k].fd;
        pf[k].events = POLLIN;
    }
    ck_assert_msg(poll(pf, 2, HANG_S * 1000) > 0, "neither rank 1 was answered (hung?)");
    out = pf[0].revents ? 0 : 1;
    in = 1 - out;
    ck_assert_int_eq(out, 0);
    o = finish(&dup[out]);
    ck_assert_int_eq(o.status, SL_ERR_INVALID);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s refused rank 1: rank 1 is held by a process started "
             "later: two nodes were given rank 1, or this one was started again",
             master);
    ck_assert_str_eq(o.message, expect);

    last = spawn(2, 3, id, master, "ipc:///tmp/x/last", HANG_S * 1000, 0);
    o = finish(&p0);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_int_eq(o.size, 3);
    ck_assert_str_eq(o.table[0], "ipc:///tmp/x/0");
    ck_assert_str_eq(o.table[1], dup_ep[in]);
    ck_assert_str_eq(o.table[2], "ipc:///tmp/x/last");
    o = finish(&dup[in]);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_str_eq(o.table[1], dup_ep[in]);
    o = finish(&last);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_str_eq(o.table[2], "ipc:///tmp/x/last");
}
END_TEST

/* Waits until the file at path holds text (1), or node p (NULL: none; its master line
 * read) says more (0). The hang guard fails the test after HANG_S. */
static int
wait_log_text(const char *path, const char *text, const peer_t *p)
{
    double end = sl_clock_now() + HANG_S;

    for (;;) {
        char *log = test_read_file(path, NULL);
        int found = log && strstr(log, text);
        struct pollfd pf = {p ? p->fd : -1, POLLIN, 0};

        free(log);
        if (found)
            return 1;
        if (poll(&pf, 1, 10) > 0)
            return 0;
        ck_assert_msg(sl_clock_now() < end, "%s never said \"%s\"", path, text);
    }
}

/* Kills a spawned node that is still waiting, so that no process outlives a failure. */
static void
spawn_kill(peer_t *p)
{
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    close(p->fd);
}

/* Rank 0 of 3 of the started-again cases, case i (curve security when i is 1), its
 * master ipc://<tmp>/<name>-<i> and its debug log <tmp>/<name>-<i>.log written into
 * master and log (size bytes each). */
static peer_t
spawn_logged_zero(const char *name, int i, uint64_t id, char *master, char *log, size_t size)
{
    use_security(i);
    snprintf(master, size, "ipc://%s/%s-%d", tmp_root, name, i);
    snprintf(log, size, "%s/%s-%d.log", tmp_root, name, i);
    return spawn_logged(0, 3, id, master, "ipc:///tmp/x/0", HANG_S * 1000, 0, log);
}

/* A node killed while rank 0 gathers the registrations and started again (shoal run's
 * restarts, a Slurm requeue) registers again: the new process takes the rank from its
 * dead predecessor, and the rendezvous completes with its endpoint. (Before, the second
 * registration was refused as "two nodes were given rank 1", and that node's failure
 * ended the run: bench/README.md, "Churn".) */
START_TEST(test_rendezvous_rank_started_again)
{
    char master[1100], log[1100], line[1100];
    peer_t p0, old, again, two;
    outcome_t o;
    uint64_t id = 0x2222333344445555ULL;

    p0 = spawn_logged_zero("rdv-again", _i, id, master, log, sizeof master);
    old = spawn(1, 3, id, master, "ipc:///tmp/x/old", HANG_S * 1000, 0);
    wait_log_text(log, "rank 1 registered from", NULL);
    spawn_kill(&old);
    again = spawn(1, 3, id, master, "ipc:///tmp/x/again", HANG_S * 1000, 0);
    read_master(&again, line, sizeof line);
    if (!wait_log_text(log, "rank 1 registered again", &again)) {
        o = finish(&again);
        spawn_kill(&p0);
        ck_abort_msg("the new process of rank 1: %s", o.message);
    }
    two = spawn(2, 3, id, master, "ipc:///tmp/x/2", HANG_S * 1000, 0);
    o = finish(&p0);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_int_eq(o.size, 3);
    ck_assert_str_eq(o.table[1], "ipc:///tmp/x/again");
    ck_assert_str_eq(o.table[2], "ipc:///tmp/x/2");
    o = finish(&again);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
    ck_assert_str_eq(o.table[1], "ipc:///tmp/x/again");
    o = finish(&two);
    ck_assert_msg(o.status == SL_OK, "%s", o.message);
}
END_TEST

/* Rank 0 killed while it gathers and started again (at the same master address): the
 * nodes that had registered with it, waiting for a table, register again every second,
 * so the new rank 0 has them too and the rendezvous completes. (Before, they waited for
 * the dead one's table until their timeout, and the new one for them.) */
START_TEST(test_rendezvous_master_started_again)
{
    char master[1100], log[1100];
    peer_t p0, back, one, two;
    outcome_t o;
    uint64_t id = 0x3333444455556666ULL;

    p0 = spawn_logged_zero("rdv-master-again", _i, id, master, log, sizeof master);
    one = spawn(1, 3, id, master, "ipc:///tmp/x/1", 20000, 0);
    wait_log_text(log, "rank 1 registered from", NULL);
    spawn_kill(&p0);
    back = spawn(0, 3, id, master, "ipc:///tmp/x/back", 20000, 0);
    two = spawn(2, 3, id, master, "ipc:///tmp/x/2", 20000, 0);
    o = finish(&one);
    ck_assert_msg(o.status == SL_OK, "rank 1: %s", o.message);
    ck_assert_str_eq(o.table[0], "ipc:///tmp/x/back");
    o = finish(&back);
    ck_assert_msg(o.status == SL_OK, "the new rank 0: %s", o.message);
    ck_assert_str_eq(o.table[1], "ipc:///tmp/x/1");
    o = finish(&two);
    ck_assert_msg(o.status == SL_OK, "rank 2: %s", o.message);
}
END_TEST

/* Rank 0 admits between "steps" until x's exchange ended (HANG_S at most); the events
 * it reported counted into came[rank]. */
static void
admit_until_done(test_exchange_t *r0, test_exchange_t *x, int *came)
{
    double end = sl_clock_now() + HANG_S;

    while (!x->done) {
        sl_rdv_event_t ev;
        int rank;

        ck_assert_msg(sl_clock_now() < end, "the exchange of rank 2 never ended");
        ck_assert_int_eq(sl_rendezvous_admit(r0->r, &ev, &rank), SL_OK);
        if (ev == SL_RDV_CAME_BACK)
            came[rank]++;
        test_sleep_ms(5); /* a step */
    }
}

/* Relayed session keys (cluster.security: mac): a new process for rank 2 registers with
 * the running rank 0, which hands its key to rank 1 over rank 1's CURVE connection and
 * answers rank 2 only once rank 1 confirmed; a registration of an older process for
 * rank 2 (one that started before the new one) is refused, and the key stays the new
 * one's. */
START_TEST(test_rendezvous_relay)
{
    char master[1100];
    test_exchange_t node[3], old, back;
    int came[3] = {0, 0, 0}, rank = -1;
    double end;

    use_security(1);
    snprintf(master, sizeof master, "ipc://%s/rdv-relay", tmp_root);
    for (int r = 0; r < 3; r++) {
        test_exchange_open(&node[r], r, master, &run_secret, (unsigned char)(r + 1), NULL);
        test_exchange_go(&node[r]);
    }
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(pthread_join(node[r].thread, NULL), 0);
        ck_assert_msg(node[r].st == SL_OK, "rank %d: %s", r, node[r].msg);
    }
    /* rank 2's process dies; an old one, then the new one, start again for it */
    test_exchange_open(&old, 2, master, &run_secret, 0x66, NULL); /* its turn comes below */
    test_exchange_open(&back, 2, master, &run_secret, 0x77, NULL);
    test_exchange_go(&back);
    for (end = sl_clock_now() + HANG_S; came[2] == 0;) {
        sl_rdv_event_t ev;
        ck_assert_msg(sl_clock_now() < end, "rank 0 never saw rank 2 come back");
        ck_assert_int_eq(sl_rendezvous_admit(node[0].r, &ev, &rank), SL_OK);
        if (ev == SL_RDV_CAME_BACK)
            came[rank]++;
        test_sleep_ms(5);
    }
    ck_assert_int_eq(sl_rendezvous_session(node[0].r, 2)[0], 0x77);
    for (rank = -1, end = sl_clock_now() + HANG_S; rank < 0;) {
        ck_assert_msg(sl_clock_now() < end, "rank 1 never got rank 2's new key");
        ck_assert_int_eq(sl_rendezvous_present(node[1].r, &rank), SL_OK);
        test_sleep_ms(5);
    }
    ck_assert_int_eq(rank, 2);
    ck_assert_int_eq(sl_rendezvous_session(node[1].r, 2)[0], 0x77);
    ck_assert_int_eq(sl_rendezvous_session(node[1].r, 2)[31], 0x77);
    ck_assert_msg(!back.done, "rank 2 had its table before rank 1 confirmed its key");
    sl_rendezvous_confirm(node[1].r, 2);
    admit_until_done(&node[0], &back, came);
    ck_assert_msg(back.st == SL_OK, "%s", back.msg);
    ck_assert_int_eq(sl_rendezvous_rejoined(back.r), 1);
    ck_assert_int_eq(back.t.sessions[1 * SL_RDV_SESSION_BYTES], 2);
    /* the old process: refused, and nothing changes */
    test_exchange_go(&old);
    admit_until_done(&node[0], &old, came);
    ck_assert_int_eq(old.st, SL_ERR_INVALID);
    ck_assert_msg(strstr(old.msg, "older than the one the run has"), "%s", old.msg);
    ck_assert_int_eq(came[2], 1);
    ck_assert_int_eq(sl_rendezvous_session(node[0].r, 2)[0], 0x77);
    ck_assert_int_eq(sl_rendezvous_present(node[1].r, &rank), SL_OK);
    ck_assert_int_eq(rank, -1);
    test_exchange_end(&old);
    test_exchange_end(&back);
    for (int r = 2; r >= 0; r--) {
        sl_rendezvous_table_fini(&node[r].t);
        sl_rendezvous_destroy(&node[r].r);
    }
}
END_TEST

/* ---------------------------------------------------------------------- main */

static Suite *
launch_suite(void)
{
    Suite *s = suite_create("launch");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_set_timeout(limits, 4 * HANG_S);
    tcase_add_test(core, test_cluster_defaults_and_values);
    tcase_add_test(core, test_run_id);
    tcase_add_loop_test(core, test_rendezvous_any_order, 0, 2);
    tcase_add_test(core, test_rendezvous_outsider);
    tcase_add_test(core, test_rendezvous_tcp_wildcards);
    tcase_add_test(core, test_rendezvous_relay);
    tcase_add_loop_test(limits, test_cluster_bad_values, 0,
                        (int)(sizeof bad_sets / sizeof bad_sets[0]));
    tcase_add_test(limits, test_rendezvous_timeouts);
    tcase_add_loop_test(limits, test_rendezvous_refusals, 0, 2);
    tcase_add_loop_test(limits, test_rendezvous_rank_started_again, 0, 2);
    tcase_add_loop_test(limits, test_rendezvous_master_started_again, 0, 2);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    sl_log_set_level(SL_LOG_ERROR); /* the refusals the tests provoke are warnings */
    return test_main_in_tmp(launch_suite(), tmp_root, "check_launch");
}
