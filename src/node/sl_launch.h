/* Launching the nodes of a run.
 *
 * sl_node_run is one node's life, whatever started it (srun, mpirun, or shoal run):
 * bind its transport endpoint (tcp://<cluster.bind>:* or ipc://<dir>/rank-R), meet the
 * others at rank 0's rendezvous, connect the transport with the endpoint table, then
 * train on its share of the data (rank R of n) with its files in
 * <run dir>/node-<R>/, synchronising as cfg->sync says (src/sync/sl_sync.h). A node
 * that fails tells its peers (an abort frame), and a node told so stops after its
 * step, with a checkpoint. With gossip-* and local-* (and more than 2 nodes) shoal run
 * lets the others finish when a node vanishes (killed, crashed): the sync leaves it
 * out, and the run still fails at the end naming it.
 *
 * sl_launch_run is `shoal run`: it forks n such nodes on this machine (rank 0 first;
 * the others once rank 0 listens, on a free port of 127.0.0.1), each in one process
 * group with its stdout and stderr on a pipe and its progress records on another,
 * prints one merged progress line and the nodes' log lines ("node R: ..."), and stops
 * every node when one fails (SIGTERM: they checkpoint and leave; SIGKILL after a grace
 * period). Nothing is left running on any way out; ipc endpoints live in a private
 * directory that is removed at the end. */
#ifndef SL_LAUNCH_H
#define SL_LAUNCH_H

#include <signal.h>
#include <stdio.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_progress.h"
#include "node/sl_train.h"

#define SL_LAUNCH_GRACE_MS 10000 /* SIGTERM to SIGKILL when stopping nodes */

typedef struct {
    int rank, size; /* 0 <= rank < size == cfg->cluster.nodes */
    /* Rank 0's rendezvous, "HOST:PORT" (needed when size > 1). Rank 0 listens on
     * cluster.bind at PORT; PORT 0 there means any free port (see on_master). */
    const char *master;
    /* Directory of the ipc:// endpoints; NULL: $TMPDIR (or /tmp)/shoal-<run id>,
     * made and removed by the nodes themselves. Borrowed. */
    const char *ipc_dir;
    int resume;                       /* continue from this node's checkpoint when there is one */
    int quiet;                        /* no progress lines of its own */
    volatile sig_atomic_t *interrupt; /* set by a signal handler: stop; may be NULL */
    /* Optional (may be NULL), with hook_ctx: on rank 0, the master address once it
     * listens ("127.0.0.1:41234"), before it waits for anyone; and every progress
     * report. */
    void (*on_master)(void *ctx, const char *master);
    void (*on_report)(void *ctx, const sl_progress_line_t *line);
    void *hook_ctx;
} sl_node_opts_t;

/* rank 0 of 1, no master, resume, progress shown, no hooks. */
void sl_node_opts_init(sl_node_opts_t *o);

typedef struct {
    sl_train_result_t train; /* as far as training got (see sl_train_run) */
    int trained;             /* training was started (train.* are meaningful) */
    int peer_stopped;        /* the run stopped because a peer gave up */
} sl_node_result_t;

/* One node (cfg validated; borrowed). Returns SL_OK, SL_ERR_SHUTDOWN when interrupted
 * or stopped by a peer (res->peer_stopped; message "stopped: node 2 failed: ..."),
 * or the error that made it fail (message set), after telling its peers. */
sl_status_t sl_node_run(const sl_config_t *cfg, const sl_node_opts_t *o, sl_node_result_t *res);

typedef struct {
    int resume, quiet;                /* quiet: no merged progress line */
    volatile sig_atomic_t *interrupt; /* SIGINT/SIGTERM count of this process; may be NULL */
    int grace_ms;                     /* SIGTERM to SIGKILL; default SL_LAUNCH_GRACE_MS */
    FILE *out;                        /* progress and forwarded lines (stderr); borrowed */
} sl_launch_opts_t;

void sl_launch_opts_init(sl_launch_opts_t *o);

/* What each node reported; outcome is one of: */
enum { SL_NODE_LOST, SL_NODE_DONE, SL_NODE_FAILED, SL_NODE_STOPPED, SL_NODE_INTERRUPTED };

typedef struct {
    int outcome;
    sl_train_result_t train; /* SL_NODE_DONE: its results; otherwise as far as it got */
    int has_train;
} sl_launch_node_t;

typedef struct {
    int nodes;
    int failed_rank;        /* the node that failed first, -1 if none */
    sl_launch_node_t *node; /* nodes entries; owned (sl_launch_result_fini) */
} sl_launch_result_t;

/* Runs cfg->cluster.nodes nodes on this machine (cfg validated; borrowed) and waits for
 * all of them. Returns SL_OK when every node finished; SL_ERR_SHUTDOWN when *interrupt
 * was set (the nodes were passed the signal and saved their checkpoints); else the
 * failed node's status, message "node 2 failed: <its error>" or "node 2 killed by
 * signal 9" (res->failed_rank). SL_ERR_IO / SL_ERR_NOMEM when pipes, processes or the
 * ipc directory cannot be made. */
sl_status_t sl_launch_run(const sl_config_t *cfg, const sl_launch_opts_t *o,
                          sl_launch_result_t *res);
void sl_launch_result_fini(sl_launch_result_t *res);

/* Splits "HOST:PORT" (the cluster.master syntax; port 0 allowed when zero_ok) into
 * host and port. SL_ERR_CONFIG "'x' is not HOST:PORT ..." naming what (a flag, an
 * environment variable) in the message. */
sl_status_t sl_parse_host_port(const char *s, const char *what, int zero_ok, char *host,
                               size_t size, int *port);

#endif
