/* `shoal run`: sl_launch_run forks n nodes (sl_node.h) on this machine (rank 0 first;
 * the others once rank 0 listens, on a free port of 127.0.0.1), each in one process
 * group with its stdout and stderr on a pipe and its progress records on another,
 * prints one merged progress line and the nodes' log lines ("node R: ..."), and stops
 * every node when one fails (SIGTERM: they checkpoint and leave; SIGKILL after a grace
 * period). Nothing is left running on any way out; ipc endpoints live in a private
 * directory that is removed at the end.
 *
 * A node process that dies without its last record (a signal, a crash) is started
 * again, the same rank with the same arguments but resume on, cluster.restart.delay_ms
 * later, up to cluster.restart.max times per rank; then the run goes on without it
 * (gossip-*, local-*) or stops. A node that failed with an error is not restarted.
 * Nor is one that dies once the run is ending (a node has trained its last step or
 * finished: nobody would admit it, and the final model is gathered without it); and a
 * node started again that has not come back (sent no report) when every other node has
 * finished is stopped (SIGTERM; SIGKILL after the grace period). Either is left out
 * (SL_NODE_LEFT_OUT), one line each ("shoal run: node 1 had not come back (restart 1
 * of 3) when the others had finished: stopping it; bmuf ends without it; 3 of 4 nodes
 * live"), and the run ends well without it, once the others wrote the run's model (else
 * as a run that lost a node).
 * The watchdog kills (SIGKILL) a node that for cluster.watchdog_timeouts sync timeouts
 * sent no record, wrote no line and used almost no CPU (stopped, or hung in a system
 * call); it then counts as dead. Each such membership change is one line on o->out
 * ("shoal run: node 2 died (signal 9) at step 140; restarting it in 5.0 s (restart 1
 * of 3); 3 of 4 nodes live") and one record appended to <run dir>/events.jsonl:
 *   {"event":"membership","time":UNIX_S,"rank":2,"step":140,"why":"died (signal 9)",
 *    "live":3,"nodes":4}
 * (step: the node's last report, null before it; why: "died (signal N)", "exited
 * (status N)", "killed by the watchdog", "restarted (restart K of M)", "stopped after
 * another node finished", "not restarted", "left out"). The merged progress line
 * counts the live nodes. */
#ifndef SL_SUPERVISOR_H
#define SL_SUPERVISOR_H

#include <signal.h>
#include <stdio.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_train.h"

#define SL_LAUNCH_GRACE_MS 10000 /* SIGTERM to SIGKILL when stopping nodes */

typedef struct {
    int resume, quiet;                /* quiet: no merged progress line */
    const char *init;                 /* every node's sl_node_opts_t.init; borrowed */
    volatile sig_atomic_t *interrupt; /* SIGINT/SIGTERM count of this process; may be NULL */
    int grace_ms;                     /* SIGTERM to SIGKILL; default SL_LAUNCH_GRACE_MS */
    FILE *out;                        /* progress and forwarded lines (stderr); borrowed */
} sl_launch_opts_t;

void sl_launch_opts_init(sl_launch_opts_t *o);

/* What each node reported; outcome is one of: */
enum {
    SL_NODE_LOST,
    SL_NODE_DONE,
    SL_NODE_FAILED,
    SL_NODE_STOPPED,
    SL_NODE_INTERRUPTED,
    SL_NODE_LEFT_OUT /* the run ended well without it (see above) */
};

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
 * all of them. Returns SL_OK when every node finished but those left out; SL_ERR_SHUTDOWN when
 * *interrupt was set (the nodes were passed the signal and saved their checkpoints); else the
 * failed node's status, message "node 2 failed: <its error>" or "node 2 killed by
 * signal 9" (res->failed_rank). SL_ERR_IO / SL_ERR_NOMEM when pipes, processes or the
 * ipc directory cannot be made. */
sl_status_t sl_launch_run(const sl_config_t *cfg, const sl_launch_opts_t *o,
                          sl_launch_result_t *res);
void sl_launch_result_fini(sl_launch_result_t *res);

#endif
