/* bench_allreduce: bus bandwidth of shoal's allreduce, and gossip push/collect
 * throughput next to raw ZeroMQ moving the same payloads, on N local node processes.
 * Figures only (bench/bench_allreduce.sh runs it beside MPI_Allreduce).
 *
 *   bench_allreduce [-n NODES] [--ipc] [--no-shm] [--curve|--mac] [--chunk FLOATS]
 *                   [--sizes "256K 1M ..."] [--emulate RATE,LATENCY_MS[,JITTER_MS]]
 *                   [--io-threads N] [--stripes N[w]] [--only LOOPS] [--reps N]
 *                   [--allreduce auto|ring]
 *
 * Each size is timed on rank 0 after a barrier, over 256 MiB worth of repetitions (5 to
 * 1000; --reps N: N) after one warm-up. Columns:
 *   allreduce_ms  one sl_allreduce_sum of SIZE bytes of floats
 *   busbw_GBps    2(n-1)/n * SIZE / time (the bytes each link carries; NCCL's metric)
 *   gossip_GBps   SIZE / time of one sl_gossip_exchange (push to rank-1, collect from
 *                 rank+1): what one node receives per second
 *   rawzmq_GBps   the same pattern with bare PUSH/PULL sockets, zmq_send/zmq_recv of
 *                 SIZE bytes (no header, no checksum, no mailbox)
 *   *_cpu_us      the CPU time of one operation of that loop, every node's process with
 *                 all its threads (ZeroMQ's I/O threads too) together, in microseconds
 *                 (CLOCK_PROCESS_CPUTIME_ID over the timed repetitions): what it costs
 *                 the machine, which a loaded machine's wall time hides
 * --allreduce ring: the allreduce goes around the ring where by default (auto) it halves
 * and doubles (cluster.allreduce; sl_allreduce_halves); the first line says which ran.
 * --only LOOPS: time only these of allreduce, gossip and raw (comma-separated); the
 * others' columns print "-", and a profiler attached to the nodes sees one loop alone.
 * shoal's frames of 16 KiB and more between these processes go through shared-memory
 * lanes (sl_shm_lane.h) unless --no-shm; the last line says how many did. --curve: the
 * nodes share a run secret and every ZeroMQ connection is CURVE-authenticated and
 * encrypted (cluster.security: curve; the raw ZeroMQ column stays plain); --mac: every
 * frame over ZeroMQ carries a MAC instead (cluster.security: mac, sl_frame_mac.h).
 * --emulate 1gbit,10: shoal's links are emulated (cluster.emulate, sl_link_emu.h: RATE
 * as cluster.emulate.bandwidth, 0 = no limit), without shared memory; the raw ZeroMQ
 * column is not. Figures of the emulation, not of a network. --io-threads N: shoal's
 * ZeroMQ I/O threads per node (cluster.io_threads; default 0, from the machine's cores);
 * the first line says how many ran (the raw ZeroMQ column keeps ZeroMQ's one).
 * --stripes N: shoal's ZeroMQ connections per peer (cluster.stripes; default 0, one per
 * sending I/O thread); the first line says how many, the last how many messages rank 0
 * sent on each (frames, and pieces of frames split over the stripes: the gossip
 * snapshots' only, sl_transport_striped_kind, the allreduce's chunks all going whole on
 * stripe 0; the raw ZeroMQ column keeps one connection); --stripes Nw: the same, but
 * large snapshots take the stripes whole, in turn, never in pieces. Like
 * shoal itself, it asks the C library to keep freed large blocks
 * (sl_alloc_keep_large_blocks), for all columns alike; the first line says whether it did.
 * The parent forks the nodes, passes endpoints through pipes and kills them all if one
 * fails or the run exceeds 15 minutes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "bench/bench_cpu.h"
#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "config/sl_config.h"
#include "transport/sl_collective.h"
#include "transport/sl_gossip.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_transport.h"

#define MAXN 16
#define EP 256

/* The loops timed at each size, in this order; --only picks some. */
enum { LOOP_ALLREDUCE, LOOP_GOSSIP, LOOP_RAW, NLOOPS };
static const char *const loop_names[NLOOPS] = {"allreduce", "gossip", "raw"};
static const char *const cpu_columns[NLOOPS] = {"allreduce_cpu_us", "gossip_cpu_us",
                                                "rawzmq_cpu_us"};

typedef struct {
    int n, ipc, no_shm, curve, mac;
    unsigned io_threads;                                  /* --io-threads; 0: from the cores */
    unsigned stripes;                                     /* --stripes; 0: from io_threads */
    int whole_frames;                                     /* --stripes Nw */
    int ring;                                             /* --allreduce ring */
    double emu_bits_per_s, emu_latency_ms, emu_jitter_ms; /* --emulate; 0: off */
    const char *emulate;
    sl_secret_t secret; /* the run's, with curve; the forked nodes inherit it */
    size_t chunk;
    unsigned only; /* bit k: loop k is timed */
    int reps;      /* --reps; 0: from the size */
    size_t sizes[32];
    int nsizes;
    char dir[64];
} bench_t;

/* 256 MiB moved per timing, 5 to 1000 repetitions: a few hundred milliseconds each, so
 * that a scheduler hiccup on a shared machine is a small part of it */
static int
reps_for(const bench_t *b, size_t bytes)
{
    size_t r = ((size_t)256 << 20) / (bytes ? bytes : 1);

    if (b->reps)
        return b->reps;
    return r < 5 ? 5 : r > 1000 ? 1000 : (int)r;
}

static int
io_full(int fd, void *buf, size_t len, int writing)
{
    char *p = buf;
    while (len) {
        ssize_t r = writing ? write(fd, p, len) : read(fd, p, len);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static void
die(int rank, const char *what)
{
    fprintf(stderr, "bench_allreduce: rank %d: %s: %s\n", rank, what, sl_err_msg());
    _exit(1);
}

static double
gbps(double bytes, double seconds)
{
    return bytes / seconds / 1e9;
}

/* What one node needs for one operation of any loop. */
typedef struct {
    sl_transport_t *t;
    void *push, *pull; /* raw ZeroMQ: to the left, from the right */
    /* rounds count per kind and component: a receiver refuses frames more than a few
     * rounds ahead of the last one it asked for (sl_mailbox.h) */
    uint64_t ar_round, go_round;
    uint32_t puller, chosen;
    sl_collective_opts_t co;
} peer_t;

/* One operation of loop k on count floats; 0 when it went through. */
static int
run_once(peer_t *p, int k, float *buf, float *recv, size_t count)
{
    size_t bytes = count * sizeof(float), got;
    uint32_t from;

    switch (k) {
    case LOOP_ALLREDUCE:
        return sl_allreduce_sum(p->t, 0, p->ar_round++, buf, count, &p->co) == SL_OK ? 0 : -1;
    case LOOP_GOSSIP:
        return sl_gossip_exchange(p->t, 1, p->go_round++, buf, count, &p->puller, 1, &p->chosen, 1,
                                  recv, &from, &got, 60000) == SL_OK
                   ? 0
                   : -1;
    default:
        return zmq_send(p->push, buf, bytes, 0) == (int)bytes &&
                       zmq_recv(p->pull, recv, bytes, 0) == (int)bytes
                   ? 0
                   : -1;
    }
}

/* A figure of loop k, or "-" where --only left it out. */
static void
print_figure(const bench_t *b, int k, int width, const char *format, double v)
{
    if (b->only & (1u << k))
        printf(format, width, v);
    else
        printf(" %*s", width, "-");
}

static void
node(const bench_t *b, int rank, int up, int down)
{
    sl_transport_t *t;
    sl_transport_opts_t o;
    char bind[128], eps[2 * MAXN][EP];
    const char *table[MAXN];
    int n = b->n, left = (rank + n - 1) % n;
    uint64_t round = 1; /* barriers' */
    size_t len = EP;
    void *ctx = zmq_ctx_new(), *pull = zmq_socket(ctx, ZMQ_PULL), *push = zmq_socket(ctx, ZMQ_PUSH);
    peer_t p = {.push = push,
                .pull = pull,
                .ar_round = 1,
                .go_round = 1,
                .puller = (uint32_t)left,
                .chosen = (uint32_t)((rank + 1) % n),
                .co = {.chunk_elems = b->chunk}};
    int zero = 0;

    sl_log_set_level(SL_LOG_ERROR);
    sl_transport_opts_default(&o);
    o.run_id = 42;
    o.rank = (uint32_t)rank;
    o.size = (uint32_t)n;
    o.timeout_ms = 60000;
    o.shm = !b->no_shm;
    o.secret = b->curve ? &b->secret : NULL;
    o.frame_mac = b->mac;
    o.io_threads = b->io_threads;
    o.stripes = b->stripes;
    o.allreduce_ring = b->ring;
    o.whole_frames = b->whole_frames;
    o.emulate_bits_per_s = b->emu_bits_per_s;
    o.emulate_latency_ms = b->emu_latency_ms;
    o.emulate_jitter_ms = b->emu_jitter_ms;
    if (b->ipc)
        snprintf(bind, sizeof bind, "ipc://%s/rank-%d", b->dir, rank);
    else
        snprintf(bind, sizeof bind, "tcp://127.0.0.1:*");
    o.bind_endpoint = bind;
    if (sl_transport_new(&t, &o) != SL_OK)
        die(rank, "transport");
    p.t = t;
    zmq_setsockopt(pull, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(push, ZMQ_LINGER, &zero, sizeof zero);
    if (b->ipc)
        snprintf(bind, sizeof bind, "ipc://%s/raw-%d", b->dir, rank);
    if (zmq_bind(pull, bind) != 0)
        die(rank, zmq_strerror(errno));
    memset(eps, 0, sizeof eps);
    snprintf(eps[0], EP, "%s", sl_transport_endpoint(t));
    /* --mac: the session key rides at the end of the endpoint's slot (the parent's pipes
     * stand for shoal's CURVE rendezvous) */
    if (b->mac)
        memcpy(eps[0] + EP - SL_MAC_SESSION_BYTES, sl_transport_session(t), SL_MAC_SESSION_BYTES);
    zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, eps[1], &len);
    if (io_full(up, eps, 2 * EP, 1) || io_full(down, eps, 2 * (size_t)n * EP, 0))
        die(rank, "endpoint exchange");
    for (int k = 0; k < n; k++)
        table[k] = eps[2 * k];
    if (b->mac) {
        unsigned char sessions[MAXN * SL_MAC_SESSION_BYTES];
        for (int k = 0; k < n; k++)
            memcpy(sessions + k * SL_MAC_SESSION_BYTES, eps[2 * k] + EP - SL_MAC_SESSION_BYTES,
                   SL_MAC_SESSION_BYTES);
        sl_transport_learn_sessions(t, sessions);
    }
    if (sl_transport_connect(t, table) != SL_OK || zmq_connect(push, eps[2 * left + 1]) != 0)
        die(rank, "connect");
    if (sl_barrier(t, round++, 0) != SL_OK)
        die(rank, "barrier");

    for (int s = 0; s < b->nsizes; s++) {
        size_t bytes = b->sizes[s], count = bytes / sizeof(float);
        int reps = reps_for(b, bytes);
        float *buf = malloc(bytes), *recv = malloc(bytes), cpu_us[NLOOPS] = {0};
        double wall[NLOOPS] = {0};

        if (!buf || !recv)
            die(rank, "out of memory");
        for (int k = 0; k < NLOOPS; k++) {
            double t0 = 0, c0 = 0;

            if (!(b->only & (1u << k)))
                continue;
            /* an allreduce's sums grow n-fold each time, up to infinity, which a gossip
             * receiver refuses: every loop starts from the same payload */
            for (size_t i = 0; i < count; i++)
                buf[i] = (float)(i % 7);
            /* one warm-up, then timed */
            for (int r = 0; r <= reps; r++) {
                if (r == 1) {
                    if (sl_barrier(t, round++, 0) != SL_OK)
                        die(rank, "barrier");
                    t0 = sl_clock_now();
                    c0 = bench_cpu_seconds();
                }
                if (run_once(&p, k, buf, recv, count) != 0)
                    die(rank, loop_names[k]);
            }
            wall[k] = (sl_clock_now() - t0) / reps;
            cpu_us[k] = (float)((bench_cpu_seconds() - c0) / reps * 1e6);
        }
        /* every node's CPU time together, after the timings (a few small frames, which the
         * last line's message counts include) */
        if (sl_allreduce_sum(t, 0, p.ar_round++, cpu_us, NLOOPS, &p.co) != SL_OK)
            die(rank, "allreduce of the CPU times");
        if (rank == 0) {
            char name[32];
            if (bytes >= ((size_t)1 << 20))
                snprintf(name, sizeof name, "%zuMiB", bytes >> 20);
            else
                snprintf(name, sizeof name, "%zuKiB", bytes >> 10);
            printf("%-8s", name);
            print_figure(b, LOOP_ALLREDUCE, 12, " %*.3f", wall[LOOP_ALLREDUCE] * 1e3);
            print_figure(b, LOOP_ALLREDUCE, 10, " %*.3f",
                         gbps(2.0 * (n - 1) / n * (double)bytes, wall[LOOP_ALLREDUCE]));
            print_figure(b, LOOP_GOSSIP, 11, " %*.3f", gbps((double)bytes, wall[LOOP_GOSSIP]));
            print_figure(b, LOOP_RAW, 11, " %*.3f", gbps((double)bytes, wall[LOOP_RAW]));
            for (int k = 0; k < NLOOPS; k++)
                print_figure(b, k, (int)strlen(cpu_columns[k]), " %*.1f", cpu_us[k]);
            printf("\n");
            fflush(stdout);
        }
        free(buf);
        free(recv);
    }
    if (sl_barrier(t, round++, 0) != SL_OK)
        die(rank, "barrier");
    if (rank == 0) {
        uint64_t shm_sent, shm_recv;
        sl_transport_shm_frames(t, &shm_sent, &shm_recv);
        printf("# rank 0: %llu frames sent and %llu received through shared memory\n",
               (unsigned long long)shm_sent, (unsigned long long)shm_recv);
        printf("# rank 0: messages (frames and pieces) sent over ZeroMQ per stripe:");
        for (unsigned j = 0; j < sl_transport_stripes(t); j++)
            printf(" %llu", (unsigned long long)sl_transport_stripe_frames(t, j));
        printf("\n");
        fflush(stdout);
    }
    zmq_close(pull);
    zmq_close(push);
    zmq_ctx_term(ctx);
    sl_transport_destroy(&t);
    _exit(0);
}

static size_t
parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    return (size_t)v / sizeof(float) * sizeof(float);
}

/* --only LOOPS into b->only; -1 when a name is none of loop_names. */
static int
parse_only(const char *arg, bench_t *b)
{
    char copy[128], *save = NULL;

    snprintf(copy, sizeof copy, "%s", arg);
    b->only = 0;
    for (char *tok = strtok_r(copy, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        int k = 0;
        while (k < NLOOPS && strcmp(tok, loop_names[k]))
            k++;
        if (k == NLOOPS)
            return -1;
        b->only |= 1u << k;
    }
    return b->only ? 0 : -1;
}

/* --emulate RATE,LATENCY_MS[,JITTER_MS] into b; -1 when it is not that. */
static int
parse_emulate(const char *arg, bench_t *b)
{
    char copy[128], *lat, *jit, *end;

    snprintf(copy, sizeof copy, "%s", arg);
    lat = strchr(copy, ',');
    if (!lat)
        return -1;
    *lat++ = '\0';
    jit = strchr(lat, ',');
    if (jit)
        *jit++ = '\0';
    b->emu_bits_per_s = sl_config_bits_per_s(copy);
    b->emu_latency_ms = strtod(lat, &end);
    if (b->emu_bits_per_s < 0 || end == lat || *end || !(b->emu_latency_ms >= 0))
        return -1;
    b->emu_jitter_ms = jit ? strtod(jit, &end) : 0;
    if (jit && (end == jit || *end || !(b->emu_jitter_ms >= 0)))
        return -1;
    return 0;
}

int
main(int argc, char **argv)
{
    bench_t b = {.n = 2, .chunk = 0, .only = (1u << NLOOPS) - 1};
    const char *sizes = "256K 1M 4M 16M 64M";
    pid_t pids[MAXN];
    int up[MAXN][2], down[MAXN][2], failed = 0;
    char eps[2 * MAXN][EP];
    double loads[3] = {0};
    char chunk_text[64];
    int kept = sl_alloc_keep_large_blocks(); /* as shoal does; the nodes inherit it */

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            b.n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ipc"))
            b.ipc = 1;
        else if (!strcmp(argv[i], "--no-shm"))
            b.no_shm = 1;
        else if (!strcmp(argv[i], "--curve"))
            b.curve = 1;
        else if (!strcmp(argv[i], "--mac"))
            b.mac = 1;
        else if (!strcmp(argv[i], "--allreduce") && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "auto") && strcmp(argv[i], "ring")) {
                fprintf(stderr, "bench_allreduce: --allreduce %s: need auto or ring\n", argv[i]);
                return 2;
            }
            b.ring = !strcmp(argv[i], "ring");
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            b.chunk = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            sizes = argv[++i];
        else if (!strcmp(argv[i], "--io-threads") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 0 || v > (long)SL_TRANSPORT_MAX_IO_THREADS) {
                fprintf(stderr, "bench_allreduce: --io-threads %s: need 0 (from the cores) to %u\n",
                        argv[i], SL_TRANSPORT_MAX_IO_THREADS);
                return 2;
            }
            b.io_threads = (unsigned)v;
        } else if (!strcmp(argv[i], "--stripes") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            b.whole_frames = *end == 'w';
            if (end == argv[i] || *(end + b.whole_frames) || v < 0 ||
                v > (long)SL_TRANSPORT_MAX_STRIPES) {
                fprintf(stderr,
                        "bench_allreduce: --stripes %s: need 0 (from the I/O threads) to %u, "
                        "and w after it for whole frames only\n",
                        argv[i], SL_TRANSPORT_MAX_STRIPES);
                return 2;
            }
            b.stripes = (unsigned)v;
        } else if (!strcmp(argv[i], "--emulate") && i + 1 < argc) {
            b.emulate = argv[++i];
            if (parse_emulate(b.emulate, &b) != 0) {
                fprintf(stderr,
                        "bench_allreduce: --emulate %s: need RATE,LATENCY_MS[,JITTER_MS], RATE "
                        "as cluster.emulate.bandwidth (1gbit, 100mbit, 0 = no limit), the "
                        "others numbers >= 0\n",
                        b.emulate);
                return 2;
            }
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            if (parse_only(argv[++i], &b) != 0) {
                fprintf(stderr,
                        "bench_allreduce: --only %s: need one or more of allreduce, gossip "
                        "and raw, comma-separated\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 1 || v > 1000000) {
                fprintf(stderr, "bench_allreduce: --reps %s: need 1 to 1000000\n", argv[i]);
                return 2;
            }
            b.reps = (int)v;
        } else {
            fprintf(stderr, "usage: bench_allreduce [-n NODES] [--ipc] [--no-shm] [--curve|--mac] "
                            "[--chunk FLOATS] [--sizes \"256K 1M 4M 16M 64M\"] "
                            "[--emulate RATE,LATENCY_MS[,JITTER_MS]] [--io-threads N] "
                            "[--stripes N[w]] [--only allreduce,gossip,raw] [--reps N] "
                            "[--allreduce auto|ring]\n");
            return 2;
        }
    }
    if (b.n < 2 || b.n > MAXN) {
        fprintf(stderr, "bench_allreduce: -n must be 2..%d\n", MAXN);
        return 2;
    }
    char *copy = strdup(sizes), *save = NULL;
    for (char *tok = strtok_r(copy, " ,", &save); tok && b.nsizes < 32;
         tok = strtok_r(NULL, " ,", &save))
        if (parse_size(tok) > 0)
            b.sizes[b.nsizes++] = parse_size(tok);
    free(copy);
    if (b.curve && sl_secret_make(&b.secret) != SL_OK) {
        fprintf(stderr, "bench_allreduce: %s\n", sl_err_msg());
        return 1;
    }
    snprintf(b.dir, sizeof b.dir, "/tmp/shoal-XXXXXX");
    if (!mkdtemp(b.dir)) {
        perror("bench_allreduce: mkdtemp");
        return 1;
    }
    getloadavg(loads, 3);
    if (b.chunk)
        snprintf(chunk_text, sizeof chunk_text, "%zu", b.chunk);
    else
        snprintf(chunk_text, sizeof chunk_text, "from the size (default, 65536 to %u)",
                 SL_COLLECTIVE_CHUNK_ELEMS);
    unsigned io = b.io_threads ? b.io_threads
                               : sl_transport_io_threads_auto(sysconf(_SC_NPROCESSORS_ONLN), 0);
    unsigned stripes = b.emulate ? 1 : b.stripes ? b.stripes : sl_transport_stripes_auto(io);
    bench_print_cpu();
    printf("# shoal %s / gossip / raw ZeroMQ: %d nodes over %s%s%s%s%s, chunk %s "
           "floats, %u ZeroMQ I/O threads a node%s, %u stripe%s a peer%s%s, freed large blocks "
           "%s, load before %.2f on %ld cpus\n",
           sl_allreduce_halves((uint32_t)b.n, 0, b.ring) ? "allreduce by halving and doubling"
                                                         : "ring allreduce",
           b.n, b.ipc ? "ipc" : "tcp loopback", b.no_shm || b.emulate ? "" : " + shared memory",
           b.emulate ? ", emulated links " : "", b.emulate ? b.emulate : "",
           b.curve ? ", CURVE"
           : b.mac ? ", frame MACs"
                   : "",
           chunk_text, io, b.io_threads ? "" : " (from the cores)", stripes,
           stripes == 1 ? "" : "s", b.stripes || b.emulate ? "" : " (from the I/O threads)",
           stripes > 1 && b.whole_frames ? " (whole frames in turn, no pieces)" : "",
           kept ? "kept" : "given back", loads[0], sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-8s %12s %10s %11s %11s %s %s %s\n", "size", "allreduce_ms", "busbw_GBps",
           "gossip_GBps", "rawzmq_GBps", cpu_columns[0], cpu_columns[1], cpu_columns[2]);
    fflush(stdout);
    for (int i = 0; i < b.n; i++) {
        if (pipe(up[i]) || pipe(down[i]))
            return 1;
        pids[i] = fork();
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(up[i][0]);
            close(down[i][1]);
            node(&b, i, up[i][1], down[i][0]);
        }
        close(up[i][1]);
        close(down[i][0]);
    }
    for (int i = 0; i < b.n && !failed; i++)
        failed = io_full(up[i][0], eps[2 * i], 2 * EP, 0) != 0;
    for (int i = 0; i < b.n && !failed; i++)
        failed = io_full(down[i][1], eps, 2 * (size_t)b.n * EP, 1) != 0;
    alarm(900); /* a stuck run ends; PDEATHSIG takes the nodes with it */
    for (int left = b.n; left > 0; left--) {
        int st;
        pid_t w = wait(&st);
        for (int i = 0; i < b.n; i++)
            if (pids[i] == w)
                pids[i] = 0;
        if (failed || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed = 1; /* one node failed: stop the others */
            for (int j = 0; j < b.n; j++)
                if (pids[j] > 0)
                    kill(pids[j], SIGKILL);
        }
    }
    for (int i = 0; i < b.n; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rank-%d", b.dir, i);
        unlink(path);
        snprintf(path, sizeof path, "%s/raw-%d", b.dir, i);
        unlink(path);
    }
    rmdir(b.dir);
    getloadavg(loads, 3);
    printf("# load after %.2f\n", loads[0]);
    return failed;
}
