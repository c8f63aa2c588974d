/* Unit tests of launch and rendezvous: the cluster config keys, the rendezvous between
 * forked nodes (any start order, timeouts naming the missing ranks, refusals), and the
 * built shoal binary's `run` and `node` commands on a 20000-token slice of Brown
 * (vocab 500, E 16, one layer of 16, B 4 x T 8): shares, checkpoints, failures,
 * interrupts, resume, and no process left behind. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "node/sl_rendezvous.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-launch-XXXXXX";
static char tmp_dir[1100]; /* TMPDIR of the shoal processes: where ipc sockets go */
static char data_dir[1024];
static char shoal_bin[1024];

/* Seconds after which a shoal process or a file it should write counts as hung: a
 * guard that stops the test and its processes, never a timing the test measures. The
 * test cases' own timeouts (Check's) are longer, so that the guard cleans up first. */
enum { HANG_S = 90 };

/* ---------------------------------------------------------------- helpers */

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long
header_i64(const char *path, size_t off)
{
    size_t len;
    unsigned char *d = (unsigned char *)test_read_file(path, &len);
    uint64_t v = 0;

    ck_assert_msg(d != NULL, "%s is missing", path);
    ck_assert_uint_ge(len, off + 8);
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)d[off + i] << (8 * i);
    free(d);
    return (long)(int64_t)v;
}

static int
exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* The last line of text (without its newline), in buf. */
static const char *
last_line(const char *text, char *buf, size_t size)
{
    size_t n = strlen(text);
    const char *start;

    while (n > 0 && text[n - 1] == '\n')
        n--;
    start = text + n;
    while (start > text && start[-1] != '\n')
        start--;
    snprintf(buf, size, "%.*s", (int)(text + n - start), start);
    return buf;
}

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
    sl_config_fini(&c);
}
END_TEST

typedef struct {
    const char *set;
    const char *message;
} bad_set_t;

static const bad_set_t bad_sets[] = {
    {"cluster.nodes=0", "--set cluster.nodes:1:15: 'cluster.nodes' must be at least 1, got 0"},
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
    ck_assert_int_eq(sl_config_set(&b, "train.batch=33"), SL_OK);
    ck_assert_int_eq(sl_rendezvous_run_id(&b, "node001:29500", &id), SL_OK);
    ck_assert_uint_ne(ia, id);
    sl_config_fini(&a);
    sl_config_fini(&b);
}
END_TEST

/* ------------------------------------------------------------- rendezvous */

/* A node forked for a rendezvous test, and the pipe it reports on. */
typedef struct {
    pid_t pid;
    int fd;
    int master_read; /* read_master took the first line */
} peer_t;

/* Forks a node that waits delay_ms, then meets the others. It writes its master
 * endpoint as it listens ("-" if it could not start), then its status, its message
 * and the table, one line each. The test process itself never touches ZeroMQ. */
static peer_t
spawn(int rank, int size, uint64_t run_id, const char *master, const char *endpoint, int timeout_ms,
      int delay_ms)
{
    int p[2];
    peer_t peer;

    ck_assert_int_eq(pipe(p), 0);
    peer.pid = fork();
    ck_assert_int_ge(peer.pid, 0);
    if (peer.pid == 0) {
        sl_rendezvous_opts_t o = {rank, size, master, NULL, timeout_ms, NULL};
        sl_rendezvous_t *r = NULL;
        sl_rendezvous_table_t t = {0, NULL};
        sl_status_t st;
        FILE *f;

        close(p[0]);
        f = fdopen(p[1], "w");
        sleep_ms(delay_ms);
        st = sl_rendezvous_new(&r, &o);
        fprintf(f, "%s\n", st == SL_OK ? sl_rendezvous_master(r) : "-");
        fflush(f);
        if (st == SL_OK)
            st = sl_rendezvous_exchange(r, run_id, endpoint, &t);
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

    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    snprintf(master, sizeof master, "ipc://%s/rdv-any", tmp_root);
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
        sleep_ms(rand() % 50);
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
 * did come; a node without rank 0 says where it looked. Rank 1 starts first (its master
 * line says it is up) and waits far longer than rank 0, so its message, which only rank
 * 0 can have sent, shows that it was told rather than timed out on its own. */
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

    /* two or more missing: a list; longer runs: ranges */
    snprintf(master, sizeof master, "ipc://%s/rdv-timeout6", tmp_root);
    p0 = spawn(0, 6, 9, master, "ipc:///tmp/x/0", 300, 0);
    o0 = finish(&p0);
    ck_assert_str_eq(o0.message, "rendezvous: timed out after 0.3 s waiting for ranks 1-5 (1 of 6 "
                                 "registered: 0)");
}
END_TEST

/* Rank 0 refuses another run id, another size and a rank given twice, each with its
 * reason, and still completes with the right nodes. Of the two nodes given rank 1,
 * whichever registers second is refused: it is the one that answers while the other
 * still waits for rank 2 (poll, not a head start). */
START_TEST(test_rendezvous_refusals)
{
    char master[1100], expect[1400], line[1100];
    peer_t p0, wrong_id, wrong_size, dup[2], last;
    outcome_t o;
    uint64_t id = 0x1111222233334444ULL, other = 0x5555666677778888ULL;
    static const char *const dup_ep[2] = {"ipc:///tmp/x/first", "ipc:///tmp/x/twice"};
    struct pollfd pf[2];
    int in, out;

    snprintf(master, sizeof master, "ipc://%s/rdv-refuse", tmp_root);
    p0 = spawn(0, 3, id, master, "ipc:///tmp/x/0", HANG_S * 1000, 0);
    wrong_id = spawn(1, 3, other, master, "ipc:///tmp/x/a", HANG_S * 1000, 0);
    wrong_size = spawn(1, 4, id, master, "ipc:///tmp/x/b", HANG_S * 1000, 0);

    o = finish(&wrong_id);
    ck_assert_int_eq(o.status, SL_ERR_INVALID);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s refused rank 1: run id 5555666677778888 is not this "
             "run's 1111222233334444: a node of another job, or started with another "
             "configuration or master address",
             master);
    ck_assert_str_eq(o.message, expect);
    o = finish(&wrong_size);
    ck_assert_int_eq(o.status, SL_ERR_INVALID);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s refused rank 1: rank 1 says the run has 4 nodes, rank 0 "
             "says 3",
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
    o = finish(&dup[out]);
    ck_assert_int_eq(o.status, SL_ERR_INVALID);
    snprintf(expect, sizeof expect,
             "rendezvous: rank 0 at %s refused rank 1: rank 1 is already registered (at "
             "%s): two nodes were given rank 1",
             master, dup_ep[in]);
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

/* ------------------------------------------------------- the shoal binary */

static int
have_shoal(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(shoal_bin, sizeof shoal_bin, "%s/shoal", b ? b : ".");
    if (access(shoal_bin, X_OK) != 0) {
        fprintf(stderr, "check_launch: %s is not built; skipping\n", shoal_bin);
        return 0;
    }
    return 1;
}

/* <tmp>/<run>.yaml: the tiny model, n nodes, run directory <tmp>/<run>; train_extra
 * adds keys to the train section (", epochs: 1000"). */
static void
tiny_yaml(char *path, size_t size, const char *run, int nodes, const char *train_extra)
{
    char yaml[4096];

    snprintf(path, size, "%s/%s.yaml", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 50}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, optimizer: {type: adam, lr: 0.01}%s}\n"
             "cluster: {nodes: %d, rendezvous_timeout_ms: 20000}\n",
             run, tmp_root, run, data_dir, data_dir, tmp_root, train_extra, nodes);
    test_write_file(path, yaml, strlen(yaml));
}

static const char *const launcher_vars[] = {
    "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",     "PMI_SIZE",     "SHOAL_MASTER_ADDR",    "SHOAL_MASTER_PORT"};

/* The parent pid of process pid from /proc (-1 when gone), and its name into comm. */
static int
proc_parent(pid_t pid, char *comm, size_t size)
{
    char path[64], buf[512], *lp, *rp;
    FILE *f;
    size_t n;
    int parent;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    lp = strchr(buf, '(');
    rp = strrchr(buf, ')');
    if (!lp || !rp || rp < lp || sscanf(rp + 1, " %*c %d", &parent) != 1)
        return -1;
    snprintf(comm, size, "%.*s", (int)(rp - lp - 1), lp + 1);
    return parent;
}

/* Calls fn on every process whose parent is ppid, until fn returns non-zero; returns
 * that pid, or 0. */
static pid_t
each_child(pid_t ppid, int (*fn)(pid_t pid, const char *comm, const void *arg), const void *arg)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;

    ck_assert_ptr_nonnull(d);
    while (!found && (e = readdir(d)) != NULL) {
        char comm[64];
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && proc_parent(pid, comm, sizeof comm) == ppid && fn(pid, comm, arg))
            found = pid;
    }
    closedir(d);
    return found;
}

static int
kill_it(pid_t pid, const char *comm, const void *arg)
{
    (void)comm, (void)arg;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
}

/* Starts shoal with args (NULL-terminated), stdout and stderr into <tmp>/<tag>.out and
 * .err; extra environment "K=V" strings in env (NULL-terminated, may be NULL). */
static pid_t
start_shoal(const char *tag, const char *const *env, const char *const *args)
{
    char out[1100], err[1100];
    const char *argv[40];
    int n = 0;
    pid_t pid;

    snprintf(out, sizeof out, "%s/%s.out", tmp_root, tag);
    snprintf(err, sizeof err, "%s/%s.err", tmp_root, tag);
    argv[n++] = shoal_bin;
    while (*args && n < 39)
        argv[n++] = *args++;
    argv[n] = NULL;
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
            _exit(99);
        setenv("SHOAL_LOG", "warn", 1);
        setenv("TMPDIR", tmp_dir, 1);
        for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
            unsetenv(launcher_vars[i]); /* in case the tests run under srun or mpirun */
        for (; env && *env; env++)
            putenv((char *)*env);
        execv(shoal_bin, (char *const *)argv);
        _exit(98);
    }
    return pid;
}

/* Waits for shoal to exit; its exit status, or 128 + signal; *out and *err receive what
 * it wrote (malloc'd). After HANG_S seconds it kills shoal and fails: a guard against a
 * hang that leaves no process behind, not a timing. */
static int
wait_shoal(pid_t pid, const char *tag, char **out, char **err)
{
    char path[1100];
    double t0 = now_s();
    int ws;

    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            break;
        if (now_s() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            sleep_ms(200);
            each_child(getpid(), kill_it, NULL); /* orphaned nodes, adopted by us */
            ck_abort_msg("shoal %s hung: not done after %d s", tag, HANG_S);
        }
        sleep_ms(20);
    }
    snprintf(path, sizeof path, "%s/%s.out", tmp_root, tag);
    *out = test_read_file(path, NULL);
    snprintf(path, sizeof path, "%s/%s.err", tmp_root, tag);
    *err = test_read_file(path, NULL);
    ck_assert(*out && *err);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* Every process shoal started is gone: this test process adopts orphans (it is a
 * subreaper), so a node left running or unreaped would still be its descendant. And
 * no ipc socket or directory is left in their TMPDIR. */
static void
assert_nothing_left(void)
{
    int ws, entries = 0;
    pid_t r = waitpid(-1, &ws, WNOHANG);
    DIR *d;
    struct dirent *e;

    if (r == 0)
        each_child(getpid(), kill_it, NULL);
    ck_assert_msg(r == -1 && errno == ECHILD, "a process was left behind (waitpid: %d)", (int)r);
    d = opendir(tmp_dir);
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            fprintf(stderr, "check_launch: left in %s: %s\n", tmp_dir, e->d_name);
            entries++;
        }
    closedir(d);
    ck_assert_int_eq(entries, 0);
}

static void
become_subreaper(void)
{
#ifdef __linux__
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
#endif
}

/* Batches per epoch of rank r of n on the tiny config's corpus, computed here. */
static long
share_batches(const char *conf, int r, int n)
{
    sl_config_t cfg;
    sl_corpus_t corpus;
    sl_batcher_t bt;
    long bpe;

    sl_config_init(&cfg);
    ck_assert_msg(sl_config_load_file(&cfg, conf) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_corpus_load(&corpus, &cfg) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(sl_batcher_init(&bt, &corpus.train, r, n, 4, 8), SL_OK);
    bpe = bt.batches_per_epoch;
    sl_corpus_fini(&corpus);
    sl_config_fini(&cfg);
    return bpe;
}

/* shoal run -n 3: every node trains one epoch of its own third, exactly as the trainer
 * does for rank r of 3 in-process; per-node and run-level files; nothing left. */
START_TEST(test_run_three_nodes)
{
    char conf[1100], path[1200], mine[1200], *out, *err, *a, *b;
    long bpe[3], whole;
    size_t alen, blen;

    if (!have_shoal())
        return;
    become_subreaper();
    tiny_yaml(conf, sizeof conf, "three", 1, "");
    ck_assert_int_eq(
        wait_shoal(start_shoal("three", NULL, (const char *[]){"run", conf, "-n", "3", NULL}),
                   "three", &out, &err),
        0);
    assert_nothing_left();
    ck_assert_msg(strstr(out, "shoal: node 0: done: 1 epoch, ") &&
                      strstr(out, "shoal: node 2: done: ") && strstr(out, "shoal: done: 3 nodes, "),
                  "stdout: %s\nstderr: %s", out, err);
    ck_assert_msg(strstr(err, "step ") && strstr(err, " | 3 nodes | "), "stderr: %s", err);
    free(out);
    free(err);

    whole = share_batches(conf, 0, 1);
    for (int r = 0; r < 3; r++) {
        bpe[r] = share_batches(conf, r, 3);
        ck_assert_int_lt(bpe[r], whole / 2);
        snprintf(path, sizeof path, "%s/three/node-%d/checkpoint.bin", tmp_root, r);
        ck_assert_int_eq(header_i64(path, 144), bpe[r]);         /* step */
        ck_assert_int_eq(header_i64(path, 152), 1);              /* epoch */
        ck_assert_int_eq(header_i64(path, 160), 0);              /* batch index */
        ck_assert_int_eq(header_i64(path, 176), bpe[r] * 4 * 8); /* tokens */
        snprintf(path, sizeof path, "%s/three/node-%d/metrics.jsonl", tmp_root, r);
        ck_assert(exists(path));
        snprintf(path, sizeof path, "%s/three/node-%d/model.bin", tmp_root, r);
        ck_assert(exists(path));
    }
    snprintf(path, sizeof path, "%s/three/config.yaml", tmp_root);
    a = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(strstr(a, "\ncluster:\n  nodes: 3\n  transport: ipc\n"));
    free(a);
    snprintf(path, sizeof path, "%s/three/summary.json", tmp_root);
    a = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(strstr(a, "\"nodes\": 3"));
    ck_assert_ptr_nonnull(strstr(a, "\"rank\": 0"));
    free(a);
    snprintf(path, sizeof path, "%s/three/node-1/config.yaml", tmp_root);
    ck_assert(!exists(path));

    /* node 1 trained exactly what rank 1 of 3 trains in-process (all but the time) */
    {
        sl_config_t cfg;
        sl_train_opts_t opts;
        sl_train_result_t res;
        sl_config_init(&cfg);
        ck_assert(sl_config_load_file(&cfg, conf) == SL_OK);
        snprintf(path, sizeof path, "run.dir=%s/three-inproc", tmp_root);
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
    snprintf(path, sizeof path, "%s/three/node-1/checkpoint.bin", tmp_root);
    snprintf(mine, sizeof mine, "%s/three-inproc/node-1/checkpoint.bin", tmp_root);
    a = test_read_file(path, &alen);
    b = test_read_file(mine, &blen);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, 184) == 0);
    ck_assert(memcmp(a + 192, b + 192, alen - 192 - 8) == 0);
    free(b);
    /* and node 0, on other data, ended elsewhere */
    snprintf(path, sizeof path, "%s/three/node-0/checkpoint.bin", tmp_root);
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

    if (!have_shoal())
        return;
    become_subreaper();
    tiny_yaml(conf, sizeof conf, "intr", 2, ", eval_every_epoch: false");
    pid = start_shoal("intr", NULL, args);
    snprintf(path, sizeof path, "%s/intr/node-1/metrics.jsonl", tmp_root);
    test_wait_file(path, 1, pid, HANG_S);
    kill(pid, SIGINT);
    ck_assert_int_eq(wait_shoal(pid, "intr", &out, &err), 130);
    assert_nothing_left();
    snprintf(path, sizeof path,
             "shoal: interrupted; every node saved its checkpoint under %s/intr; run the same "
             "command to resume",
             tmp_root);
    ck_assert_str_eq(last_line(err, line, sizeof line), path);
    free(out);
    free(err);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/intr/node-%d/checkpoint.bin", tmp_root, r);
        at[r] = header_i64(path, 144);
        ck_assert_int_gt(at[r], 0);
        ck_assert_int_lt(at[r], 2000);
    }

    ck_assert_int_eq(
        wait_shoal(start_shoal("intr2", (const char *[]){"SHOAL_LOG=info", NULL}, args), "intr2",
                   &out, &err),
        0);
    assert_nothing_left();
    for (int r = 0; r < 2; r++) {
        char expect[128];
        snprintf(expect, sizeof expect, "node %d: train: info: resuming from step %ld of 2000", r,
                 at[r]);
        ck_assert_msg(strstr(err, expect) != NULL, "no '%s' in: %s", expect, err);
        snprintf(path, sizeof path, "%s/intr/node-%d/checkpoint.bin", tmp_root, r);
        ck_assert_int_eq(header_i64(path, 144), 2000);
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

    if (!have_shoal())
        return;
    become_subreaper();
    tiny_yaml(conf, sizeof conf, "killed", 3, ", epochs: 1000, eval_every_epoch: false");
    pid = start_shoal("killed", NULL, (const char *[]){"run", conf, "--quiet", NULL});
    snprintf(path, sizeof path, "%s/killed/node-1/metrics.jsonl", tmp_root);
    test_wait_file(path, 1, pid, HANG_S);
    victim = test_child_named(pid, "shoal node 1"); /* it wrote the file: it has its name */
    ck_assert_int_gt(victim, 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_shoal(pid, "killed", &out, &err), 1);
    assert_nothing_left();
    ck_assert_int_eq(kill(victim, 0), -1);
    ck_assert_str_eq(last_line(err, line, sizeof line), "shoal: node 1 killed by signal 9");
    ck_assert_str_eq(out, "");
    for (int r = 0; r < 3; r += 2) {
        snprintf(path, sizeof path, "%s/killed/node-%d/checkpoint.bin", tmp_root, r);
        ck_assert_int_gt(header_i64(path, 144), 0);
    }
    free(out);
    free(err);
}
END_TEST

/* A node that fails with an error: shoal run names it and its error line. */
START_TEST(test_run_node_fails)
{
    char conf[1100], path[1200], *out, *err, line[512], expect[1400];

    if (!have_shoal())
        return;
    become_subreaper();
    tiny_yaml(conf, sizeof conf, "fails", 3, ", epochs: 1000");
    snprintf(path, sizeof path, "%s/fails", tmp_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/fails/node-2", tmp_root); /* a file where its dir goes */
    test_write_file(path, "in the way\n", 11);
    ck_assert_int_eq(wait_shoal(start_shoal("fails", NULL, (const char *[]){"run", conf, NULL}),
                                "fails", &out, &err),
                     1);
    assert_nothing_left();
    snprintf(expect, sizeof expect, "shoal: node 2 failed: %s/fails/node-2/", tmp_root);
    last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    ck_assert_ptr_nonnull(strstr(line, "Not a directory"));
    free(out);
    free(err);
}
END_TEST

/* A free tcp port of 127.0.0.1 (bound and read back, then closed) for a master. */
static int
free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM, 0), port;

    ck_assert_int_ge(s, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(s);
    return port;
}

/* Two `shoal node` processes; rank 1 fails after the rendezvous and tells rank 0, which
 * stops after its step with a checkpoint. */
START_TEST(test_node_abort_reaches_peer)
{
    char conf[1100], path[1200], master[64], *out, *err, line[512], expect[1400];
    pid_t p0, p1;

    if (!have_shoal())
        return;
    become_subreaper();
    tiny_yaml(conf, sizeof conf, "abort", 2, ", epochs: 1000, eval_every_epoch: false");
    snprintf(path, sizeof path, "%s/abort", tmp_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/abort/node-1", tmp_root);
    test_write_file(path, "in the way\n", 11);
    snprintf(master, sizeof master, "127.0.0.1:%d", free_port());
    p0 = start_shoal("abort0", NULL,
                     (const char *[]){"node", conf, "--rank", "0", "--master", master, NULL});
    p1 = start_shoal("abort1", (const char *[]){"SLURM_PROCID=1", "SLURM_NTASKS=2", NULL},
                     (const char *[]){"node", conf, "--master", master, NULL});
    ck_assert_int_eq(wait_shoal(p1, "abort1", &out, &err), 1);
    snprintf(expect, sizeof expect, "shoal: node 1: %s/abort/node-1/", tmp_root);
    last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    free(out);
    free(err);
    ck_assert_int_eq(wait_shoal(p0, "abort0", &out, &err), 1);
    snprintf(expect, sizeof expect, "shoal: node 0: stopped: node 1 failed: %s/abort/node-1/",
             tmp_root);
    last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    snprintf(path, sizeof path, "%s/abort/node-0/checkpoint.bin", tmp_root);
    ck_assert_int_gt(header_i64(path, 144), 0);
    assert_nothing_left();
    free(out);
    free(err);
}
END_TEST

/* shoal node checks rank, size and master before it starts anything: exit 2, one line. */
START_TEST(test_node_usage_errors)
{
    static const struct {
        const char *env[3];
        const char *args[8];
        const char *message;
    } cases[] = {
        {{NULL},
         {"--rank", "0", "--size", "2", NULL},
         "shoal: node: --size 2 disagrees with cluster.nodes 3; start 3 nodes or add --set "
         "cluster.nodes=2\n"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=4", NULL},
         {NULL},
         "shoal: node: SLURM_NTASKS 4 disagrees with cluster.nodes 3; start 3 nodes or add --set "
         "cluster.nodes=4\n"},
        {{"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=3", NULL},
         {NULL},
         "shoal: node: OMPI_COMM_WORLD_RANK '5' is not a rank of 3 nodes (0 to 2)\n"},
        {{NULL},
         {"--size", "3", NULL},
         "shoal: node: no rank: give --rank R --size N, or start shoal node with srun or mpirun "
         "(SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK) (see shoal node --help)\n"},
        {{"PMI_RANK=1", "PMI_SIZE=3", NULL},
         {NULL},
         "shoal: node: no master address: give --master HOST:PORT, set SHOAL_MASTER_ADDR and "
         "SHOAL_MASTER_PORT, or cluster.master (see shoal node --help)\n"},
        {{"SHOAL_MASTER_ADDR=node001", NULL},
         {"--rank", "1", NULL},
         "shoal: node: SHOAL_MASTER_ADDR is set but SHOAL_MASTER_PORT is not; set both\n"},
        {{"SHOAL_MASTER_ADDR=node001", "SHOAL_MASTER_PORT=x", NULL},
         {"--rank", "1", NULL},
         "shoal: node: SHOAL_MASTER_ADDR:SHOAL_MASTER_PORT 'node001:x' is not HOST:PORT (a "
         "host name or IPv4 address, port 1 to 65535)\n"},
    };
    char conf[1100], *out, *err;

    if (!have_shoal())
        return;
    tiny_yaml(conf, sizeof conf, "usage", 3, "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[12] = {"node", conf};
        int n = 2;
        for (int k = 0; cases[i].args[k]; k++)
            args[n++] = cases[i].args[k];
        args[n] = NULL;
        ck_assert_int_eq(wait_shoal(start_shoal("usage", cases[i].env, args), "usage", &out, &err),
                         2);
        ck_assert_str_eq(err, cases[i].message);
        ck_assert_str_eq(out, "");
        free(out);
        free(err);
    }
    ck_assert_int_eq(
        wait_shoal(start_shoal("usage", NULL, (const char *[]){"run", conf, "-n", "0", NULL}),
                   "usage", &out, &err),
        2);
    ck_assert_str_eq(err, "shoal: run: -n must be a number of nodes, 1 to 1024, not '0' (see "
                          "shoal run --help)\n");
    free(out);
    free(err);
    ck_assert_int_eq(wait_shoal(start_shoal("usage", NULL, (const char *[]){"help", "node", NULL}),
                                "usage", &out, &err),
                     0);
    ck_assert(strncmp(out, "Usage: shoal node CONF.yaml", 27) == 0);
    free(out);
    free(err);
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
launch_suite(void)
{
    Suite *s = suite_create("launch");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_set_timeout(limits, 4 * HANG_S);
    tcase_add_test(core, test_cluster_defaults_and_values);
    tcase_add_test(core, test_run_id);
    tcase_add_test(core, test_rendezvous_any_order);
    tcase_add_test(core, test_rendezvous_tcp_wildcards);
    tcase_add_test(core, test_run_three_nodes);
    tcase_add_test(core, test_run_interrupt_resume);
    tcase_add_loop_test(limits, test_cluster_bad_values, 0,
                        (int)(sizeof bad_sets / sizeof bad_sets[0]));
    tcase_add_test(limits, test_rendezvous_timeouts);
    tcase_add_test(limits, test_rendezvous_refusals);
    tcase_add_test(limits, test_run_node_killed);
    tcase_add_test(limits, test_run_node_fails);
    tcase_add_test(limits, test_node_abort_reaches_peer);
    tcase_add_test(limits, test_node_usage_errors);
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
        perror("check_launch: mkdtemp");
        return 1;
    }
    sl_log_set_level(SL_LOG_ERROR); /* the refusals the tests provoke are warnings */
    snprintf(tmp_dir, sizeof tmp_dir, "%s/t", tmp_root);
    if (mkdir(tmp_dir, 0700) != 0) {
        perror("check_launch: mkdir");
        return 1;
    }
    sr = srunner_create(launch_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
