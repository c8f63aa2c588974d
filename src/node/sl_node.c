/* One node's life, whatever started it (srun, mpirun, or shoal run): its transport
 * endpoint, the rendezvous with the others, training on its share, telling the peers
 * when it fails. Owns the node's endpoint (and the ipc directory it made) and its
 * peers' abort frames; must not touch processes, signals or pipes (the supervisor of
 * shoal run, sl_supervisor.c, owns those) nor read the launchers' environment
 * (sl_launcher_env.c). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_node.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "node/sl_ipc_dir.h"
#include "node/sl_node_backend.h"
#include "node/sl_node_census.h"
#include "node/sl_rendezvous.h"
#include "node/sl_report.h"
#include "node/sl_run_files.h"
#include "sync/sl_sync_common.h"
#include "transport/sl_curve.h"
#include "transport/sl_transport.h"

#define ABORT_WAIT_MS 2000 /* a failing node waits at most this long to tell its peers */
#define RATE_WAIT_MS 10000 /* rank 0 waits at most this long for the others' tokens/s */
#define HOST_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_"
#define IPC_PATH_MAX ((int)sizeof(((struct sockaddr_un *)0)->sun_path))

void
sl_node_opts_init(sl_node_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->size = 1;
    o->resume = 1;
}

sl_status_t
sl_parse_host_port(const char *s, const char *what, int zero_ok, char *host, size_t size, int *port)
{
    const char *colon = strrchr(s, ':');
    size_t hl = colon ? (size_t)(colon - s) : 0;
    size_t digits = colon ? strspn(colon + 1, "0123456789") : 0;
    long p = digits >= 1 && digits <= 5 ? strtol(colon + 1, NULL, 10) : -1;

    if (!colon || hl == 0 || hl >= size || strspn(s, HOST_CHARS) != hl ||
        colon[1 + digits] != '\0' || p < (zero_ok ? 0 : 1) || p > 65535)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s '%s' is not HOST:PORT (a host name or IPv4 address, port 1 to "
                          "65535)",
                          what, s);
    memcpy(host, s, hl);
    host[hl] = '\0';
    *port = (int)p;
    return SL_OK;
}

typedef struct {
    const sl_config_t *cfg;
    const sl_node_opts_t *o;
    sl_secret_t secret; /* the run's, unless cluster.security is none */
    sl_transport_t *tr;
    sl_rendezvous_t *rdv; /* kept for the run: nodes that come back go through it */
    int rejoin;           /* this process comes back to a run under way */
    int peer_stopped;
    char ipc_path[IPC_PATH_MAX]; /* the ipc socket file this node bound; "" if none */
    char ipc_dir[IPC_PATH_MAX];  /* made by this node for it; "" if none */
    sl_run_end_watch_t end;      /* whether the run ended without it (run_ended) */
    double end_from;             /* sl_clock_now() from which run_ended looks */
} node_t;

/* The rendezvous' question while it waits for the others: has the run ended without
 * this node? (sl_run_end_watch_check: its model.bin says so) Only once a quarter of the
 * rendezvous timeout has passed with no answer: the same files are left when a whole
 * job is started again after the run ended without this node (a requeue), and then the
 * others come, meet it and hand it the last step (README, "Which step a run resumes
 * from"); a node started alone has nobody to wait for. */
static sl_status_t
run_ended(void *ctx)
{
    node_t *n = ctx;

    if (sl_clock_now() < n->end_from)
        return SL_OK;
    return sl_run_end_watch_check(&n->end, n->cfg, n->o->size);
}

/* Between steps, the rendezvous of the run: rank 0 admits the nodes that come back and
 * learns the live ones it did not know; the others say they are present. Under
 * cluster.security mac, the new process's session key, which only the CURVE rendezvous
 * carries, is installed before any of its frames is read. */
static sl_status_t
watch_rendezvous(node_t *n)
{
    int mac = n->cfg->cluster.security == SL_SECURITY_MAC;
    sl_rdv_event_t ev;
    int rank;

    if (n->o->rank != 0) {
        SL_TRY(sl_rendezvous_present(n->rdv, &rank));
        if (rank >= 0 && mac) {
            SL_TRY(sl_transport_set_session_key(n->tr, (uint32_t)rank,
                                                sl_rendezvous_session(n->rdv, rank)));
            sl_rendezvous_confirm(n->rdv, rank);
        }
        return SL_OK;
    }
    SL_TRY(sl_rendezvous_admit(n->rdv, &ev, &rank));
    if (ev != SL_RDV_NOTHING && mac)
        SL_TRY(sl_transport_set_session_key(n->tr, (uint32_t)rank,
                                            sl_rendezvous_session(n->rdv, rank)));
    if (ev == SL_RDV_CAME_BACK)
        sl_log_info("node",
                    "node %d comes back: it has the run's table and asks a live node for the "
                    "state",
                    rank);
    if (ev == SL_RDV_FOUND) {
        sl_log_info("node", "node %d is present at %s", rank, sl_rendezvous_endpoint(n->rdv, rank));
        sl_transport_learn_endpoint(n->tr, (uint32_t)rank, sl_rendezvous_endpoint(n->rdv, rank));
    }
    return SL_OK;
}

/* The train loop's poll hook: has a peer sent an abort frame? Then the rendezvous of
 * the run (watch_rendezvous). */
static sl_status_t
poll_peers(void *ctx)
{
    node_t *n = ctx;
    sl_status_t st = sl_transport_poll(n->tr);

    if (st == SL_OK && n->rdv)
        st = watch_rendezvous(n);
    if (st != SL_ERR_SHUTDOWN)
        return st;
    n->peer_stopped = 1;
    return sl_err_set(SL_ERR_SHUTDOWN, "stopped: %s", sl_transport_abort_reason(n->tr));
}

static void
report_hook(void *ctx, const sl_progress_line_t *line)
{
    node_t *n = ctx;

    if (n->o->on_report)
        n->o->on_report(n->o->hook_ctx, line);
}

/* Binds the node's transport endpoint: tcp://<cluster.bind>:* or ipc://<dir>/rank-R. */
static sl_status_t
open_transport(node_t *n, uint64_t run_id)
{
    const sl_config_t *cfg = n->cfg;
    sl_transport_opts_t to;
    char endpoint[SL_RDV_ENDPOINT_MAX + 16];
    sl_status_t st;

    sl_transport_opts_default(&to);
    to.run_id = run_id;
    to.rank = (uint32_t)n->o->rank;
    to.size = (uint32_t)n->o->size;
    to.timeout_ms = cfg->cluster.timeout_ms;
    to.shm = cfg->cluster.shared_memory;
    to.io_threads =
        cfg->cluster.io_threads > 0
            ? (unsigned)cfg->cluster.io_threads
            : sl_transport_io_threads_auto(sysconf(_SC_NPROCESSORS_ONLN),
                                           sl_sync_is_neighbourhood(cfg->sync.algorithm));
    to.stripes = (unsigned)cfg->cluster.stripes;
    to.allreduce_ring = cfg->cluster.allreduce == SL_ALLREDUCE_RING;
    to.secret = cfg->cluster.security == SL_SECURITY_CURVE ? &n->secret : NULL;
    to.frame_mac = cfg->cluster.security == SL_SECURITY_MAC;
    to.emulate_bits_per_s = sl_config_bits_per_s(cfg->cluster.emulate.bandwidth);
    to.emulate_latency_ms = cfg->cluster.emulate.latency_ms;
    to.emulate_jitter_ms = cfg->cluster.emulate.jitter_ms;
    if (n->o->rank == 0 &&
        (to.emulate_bits_per_s > 0 || to.emulate_latency_ms > 0 || to.emulate_jitter_ms > 0))
        sl_log_warn("node",
                    "cluster.emulate is on: links are emulated (%s, %g ms + up to %g ms), "
                    "figures are not a real network's",
                    to.emulate_bits_per_s > 0 ? cfg->cluster.emulate.bandwidth : "no rate limit",
                    to.emulate_latency_ms, to.emulate_jitter_ms);
    if (cfg->cluster.transport == SL_CLUSTER_TCP) {
        snprintf(endpoint, sizeof endpoint, "tcp://%s:*", cfg->cluster.bind);
    } else {
        char dir[IPC_PATH_MAX + 64];
        const char *tmp = getenv("TMPDIR");

        if (n->o->ipc_dir)
            snprintf(dir, sizeof dir, "%s", n->o->ipc_dir);
        else
            snprintf(dir, sizeof dir, "%s/shoal-%016" PRIx64, tmp && *tmp ? tmp : "/tmp", run_id);
        if ((int)strlen(dir) + 16 >= IPC_PATH_MAX)
            return sl_err_set(SL_ERR_INVALID,
                              "%s: too long for ipc:// endpoints (at most %d bytes); set TMPDIR "
                              "to a shorter directory or use cluster.transport: tcp",
                              dir, IPC_PATH_MAX - 16);
        if (!n->o->ipc_dir) {
            sl_ipc_dir_sweep(dir, SL_IPC_DIR_STALE_S);
            SL_TRY(sl_ipc_dir_claim(dir));
            snprintf(n->ipc_dir, sizeof n->ipc_dir, "%s", dir);
        }
        snprintf(n->ipc_path, sizeof n->ipc_path, "%s/rank-%d", dir, n->o->rank);
        snprintf(endpoint, sizeof endpoint, "ipc://%s", n->ipc_path);
    }
    to.bind_endpoint = endpoint;
    st = sl_transport_new(&n->tr, &to);
    if (st != SL_OK)
        n->ipc_path[0] = '\0'; /* not ours to remove */
    return st;
}

/* A failing node tells its peers, keeping its own message for the caller. */
static void
tell_peers(node_t *n, sl_status_t st)
{
    char msg[1024], reason[1100];
    int wait =
        n->cfg->cluster.timeout_ms < ABORT_WAIT_MS ? n->cfg->cluster.timeout_ms : ABORT_WAIT_MS;

    snprintf(msg, sizeof msg, "%s", sl_err_msg());
    snprintf(reason, sizeof reason, "node %d failed: %s", n->o->rank, msg);
    if (sl_transport_abort(n->tr, reason, wait) != SL_OK)
        sl_log_warn("node", "telling the other nodes that this one stops: %s", sl_err_msg());
    sl_err_set(st, "%s", msg);
}

/* The run's secret, from shoal run or from cluster.key_file; with security off, the
 * warning that says what that means. */
static sl_status_t
load_secret(node_t *n)
{
    const sl_config_t *cfg = n->cfg;

    if (cfg->cluster.security == SL_SECURITY_NONE) {
        if (n->o->rank == 0)
            sl_log_warn("node",
                        "cluster.security is none: any process that reaches this run's ports "
                        "can join it, read the model, and stop or poison the run");
        return SL_OK;
    }
    if (!sl_curve_available())
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "cluster.security is %s, but this libzmq has no CURVE support; "
                          "install one built with libsodium, or set cluster.security: none on "
                          "a trusted network",
                          sl_security_name(cfg->cluster.security));
    if (n->o->secret) {
        n->secret = *n->o->secret;
    } else if (cfg->cluster.key_file && *cfg->cluster.key_file) {
        sl_status_t st = sl_secret_read(cfg->cluster.key_file, &n->secret);
        char why[1024];
        if (st != SL_OK) {
            snprintf(why, sizeof why, "%s", sl_err_msg());
            return sl_err_set(st, "cluster.key_file %s", why);
        }
    } else {
        return sl_err_set(SL_ERR_CONFIG,
                          "cluster.security is %s but cluster.key_file is not set: make the "
                          "run's secret once with 'shoal keygen FILE' on a filesystem every "
                          "node reads, then --set cluster.key_file=FILE",
                          sl_security_name(cfg->cluster.security));
    }
    return SL_OK;
}

/* A node that comes back tells every other node so (they forget its old process). */
static sl_status_t
announce(node_t *n)
{
    sl_status_t st = sl_transport_announce(n->tr, n->cfg->cluster.timeout_ms);

    sl_log_info("node", "node %d comes back to the run under way", n->o->rank);
    if (st == SL_ERR_TIMEOUT) {
        sl_log_warn("node", "%s: they take it for dead until it answers", sl_err_msg());
        return SL_OK;
    }
    return st;
}

/* The map of the run on rank 0's log (sl_node_census.h). A peer's abort meanwhile stops
 * this node as it would between steps. */
static sl_status_t
take_census(node_t *n)
{
    char device[64];
    sl_status_t st;

    sl_node_backend_device(n->cfg, n->o->rank, device, sizeof device);
    st = sl_census_map(n->tr, n->cfg, device, n->cfg->cluster.timeout_ms, n->o->interrupt);
    if (st == SL_ERR_SHUTDOWN && sl_transport_abort_reason(n->tr)) {
        n->peer_stopped = 1;
        return sl_err_set(SL_ERR_SHUTDOWN, "stopped: %s", sl_transport_abort_reason(n->tr));
    }
    if (st != SL_OK)
        tell_peers(n, st);
    return st;
}

/* After a run that ended well: rank 0 adds up every node's tokens/s, says so and puts it
 * into the run's summary.json. Nothing here fails the run: it has ended. */
static void
run_rate(node_t *n, sl_node_result_t *res)
{
    int wait =
        n->cfg->cluster.timeout_ms < RATE_WAIT_MS ? n->cfg->cluster.timeout_ms : RATE_WAIT_MS;

    if (sl_census_rate(n->tr, res->train.tokens_per_s, wait, &res->run_tokens_per_s,
                       &res->run_reported) != SL_OK) {
        sl_log_warn("node", "the run's tokens/s: %s", sl_err_msg());
        return;
    }
    if (n->o->rank != 0)
        return;
    if (res->run_reported < n->o->size)
        sl_log_warn("node", "the run's tokens/s: %d of %d nodes told theirs in %.1f s",
                    res->run_reported, n->o->size, wait / 1000.0);
    if (sl_report_summary_run_rate(res->train.run_dir, n->o->size, res->run_reported,
                                   res->run_tokens_per_s) != SL_OK)
        sl_log_warn("node", "the run's tokens/s: %s", sl_err_msg());
}

/* Rendezvous and transport for a run of several nodes. */
static sl_status_t
meet_peers(node_t *n)
{
    const sl_node_opts_t *o = n->o;
    sl_rendezvous_opts_t ro;
    sl_rendezvous_t *rdv = NULL;
    sl_rendezvous_table_t table = {0, NULL, NULL, NULL};
    char host[256], port[16], conn[300], bind[300], master[300];
    int p;
    uint64_t run_id;
    sl_status_t st;

    if (!o->master || !*o->master)
        return sl_err_set(SL_ERR_CONFIG, "node %d of %d: no master address (cluster.master)",
                          o->rank, o->size);
    SL_TRY(sl_parse_host_port(o->master, "master", o->rank == 0, host, sizeof host, &p));
    SL_TRY(load_secret(n));
    if (p)
        snprintf(port, sizeof port, "%d", p);
    else
        snprintf(port, sizeof port, "*");
    snprintf(conn, sizeof conn, "tcp://%s:%s", host, port);
    snprintf(bind, sizeof bind, "tcp://%s:%s", n->cfg->cluster.bind, port);
    ro.rank = o->rank;
    ro.size = o->size;
    ro.master = conn;
    ro.bind = bind;
    ro.timeout_ms = n->cfg->cluster.rendezvous_timeout_ms;
    ro.interrupt = o->interrupt;
    ro.secret = n->cfg->cluster.security != SL_SECURITY_NONE ? &n->secret : NULL;
    ro.relay_sessions = n->cfg->cluster.security == SL_SECURITY_MAC;
    SL_TRY(sl_rendezvous_new(&rdv, &ro));
    /* shoal run stops a restarted node itself once the others have finished; a node
     * that starts over (--no-resume) has nothing to come back to anyway */
    if (!o->supervised && o->resume &&
        sl_run_end_watch_init(&n->end, n->cfg, o->rank, o->size) == SL_OK) {
        n->end_from = sl_clock_now() + n->cfg->cluster.rendezvous_timeout_ms / 4000.0;
        sl_rendezvous_ask_ended(rdv, run_ended, n);
    }
    snprintf(master, sizeof master, "%s", sl_rendezvous_master(rdv) + 6); /* after tcp:// */
    if (o->rank == 0 && o->on_master)
        o->on_master(o->hook_ctx, master);
    SL_TRY_GOTO(sl_rendezvous_run_id(n->cfg, master, &run_id), st, out);
    SL_TRY_GOTO(open_transport(n, run_id), st, out);
    sl_log_debug("node", "rank %d of %d: endpoint %s, rendezvous at %s, run id %016" PRIx64,
                 o->rank, o->size, sl_transport_endpoint(n->tr), master, run_id);
    SL_TRY_GOTO(sl_rendezvous_exchange(rdv, run_id, sl_transport_endpoint(n->tr),
                                       sl_transport_session(n->tr), &table),
                st, out);
    if (n->cfg->cluster.security == SL_SECURITY_MAC)
        sl_transport_learn_sessions(n->tr, table.sessions);
    st = sl_transport_connect(n->tr, (const char *const *)table.endpoints);
    if (st == SL_OK && (n->rejoin = sl_rendezvous_rejoined(rdv)))
        st = announce(n);
    else if (st != SL_OK)
        tell_peers(n, st);
    if (st == SL_OK) {
        n->rdv = rdv; /* kept for the run: nodes come back through it */
        rdv = NULL;
    }
out:
    sl_rendezvous_destroy(&rdv);
    sl_rendezvous_table_fini(&table);
    return st;
}

/* A node's last words on processes that tried to talk to it without the run's secret:
 * connections CURVE refused, or frames no session key proved (mac). */
static void
report_outsiders(const node_t *n)
{
    uint64_t refused = sl_transport_refused(n->tr), unproven;

    if (refused)
        sl_log_warn("node",
                    "refused %llu connection%s of processes that proved no key of this run "
                    "(an outsider, or a node of another run on this port)",
                    (unsigned long long)refused, refused == 1 ? "" : "s");
    if (n->cfg->cluster.security != SL_SECURITY_MAC)
        return;
    /* a frame without a trailer is dropped for its framing, before any key is tried */
    unproven =
        sl_transport_dropped(n->tr, SL_DROP_MAC) + sl_transport_dropped(n->tr, SL_DROP_FRAMING);
    if (unproven)
        sl_log_warn("node", "dropped %llu frame%s that no session key of this run proved",
                    (unsigned long long)unproven, unproven == 1 ? "" : "s");
}

sl_status_t
sl_node_run(const sl_config_t *cfg, const sl_node_opts_t *o, sl_node_result_t *res)
{
    node_t n;
    sl_train_opts_t to;
    sl_status_t st;

    memset(res, 0, sizeof *res);
    memset(&n, 0, sizeof n);
    n.cfg = cfg;
    n.o = o;
    if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
        return sl_err_set(SL_ERR_INVALID, "node: rank %d of %d is out of range", o->rank, o->size);
    if (o->size != cfg->cluster.nodes)
        return sl_err_set(SL_ERR_CONFIG, "node %d: %d nodes started, but cluster.nodes is %d",
                          o->rank, o->size, cfg->cluster.nodes);
    if (o->size > 1)
        SL_TRY_GOTO(meet_peers(&n), st, out);
    if (n.tr && !n.rejoin)
        SL_TRY_GOTO(take_census(&n), st, out);
    sl_train_opts_init(&to);
    to.rank = o->rank;
    to.nranks = o->size;
    to.resume = o->resume;
    to.init = o->init;
    to.quiet = o->quiet;
    to.rejoin = n.rejoin;
    to.interrupt = o->interrupt;
    to.poll = n.tr ? poll_peers : NULL;
    to.transport = n.tr;
    to.on_report = report_hook;
    to.hook_ctx = &n;
    res->trained = 1;
    st = sl_train_run(cfg, &to, &res->train);
    if (st == SL_ERR_SHUTDOWN && n.tr && !n.peer_stopped && !(o->interrupt && *o->interrupt)) {
        /* a peer's abort reached a sync collective rather than the poll hook */
        const char *why = sl_transport_abort_reason(n.tr);

        if (why) {
            n.peer_stopped = 1;
            sl_err_set(SL_ERR_SHUTDOWN, "stopped: %s", why);
        }
    }
    res->peer_stopped = n.peer_stopped;
    /* a node the others dropped leaves them be: they go on without it (and shoal run
     * starts it again), where an abort would stop them all */
    if (st != SL_OK && st != SL_ERR_SHUTDOWN && st != SL_ERR_DROPPED && n.tr)
        tell_peers(&n, st);
    if (st == SL_OK && n.tr && o->run_rate)
        run_rate(&n, res);
out:
    if (n.tr)
        report_outsiders(&n);
    sl_transport_destroy(&n.tr);
    sl_rendezvous_destroy(&n.rdv);
    sl_ipc_dir_leave(n.ipc_dir, n.ipc_path);
    sl_secret_wipe(&n.secret);
    return st;
}
