/* One node of a run: sl_node_run is one node's life, whatever started it (srun,
 * mpirun, or shoal run): bind its transport endpoint (tcp://<cluster.bind>:* or
 * ipc://<dir>/rank-R), meet the others at rank 0's rendezvous, connect the transport
 * with the endpoint table, then train on its share of the data (rank R of n) with its
 * files in <run dir>/node-<R>/, synchronising as cfg->sync says (src/sync/sl_sync.h).
 * With cluster.security: curve (the default) every socket, the rendezvous' included,
 * admits only holders of the run's secret (sl_curve.h).
 * A node that fails tells its peers (an abort frame), and a node told so stops after
 * its step, with a checkpoint. With gossip-* and local-* (and more than 2 nodes) shoal
 * run lets the others finish when a node vanishes (killed, crashed): the sync leaves
 * it out, and the run still fails at the end naming it (sl_supervisor.h). */
#ifndef SL_NODE_H
#define SL_NODE_H

#include <signal.h>
#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_progress.h"
#include "node/sl_train.h"
#include "transport/sl_secret.h"

typedef struct {
    int rank, size; /* 0 <= rank < size == cfg->cluster.nodes */
    /* Rank 0's rendezvous, "HOST:PORT" (needed when size > 1). Rank 0 listens on
     * cluster.bind at PORT; PORT 0 there means any free port (see on_master). */
    const char *master;
    /* Directory of the ipc:// endpoints; NULL: $TMPDIR (or /tmp)/shoal-<run id>,
     * made and removed by the nodes themselves. Borrowed. */
    const char *ipc_dir;
    /* The run's secret when cluster.security is curve (shoal run makes one and hands it
     * to the nodes it forks); NULL: read cluster.key_file. Borrowed. */
    const sl_secret_t *secret;
    int resume; /* continue from this node's checkpoint when there is one */
    /* Started by shoal run, whose supervisor stops a restarted node left waiting once
     * the others have finished. Otherwise (srun, mpirun, torchrun, by hand) a node that
     * resumes and waits for the others asks, about once a second once a quarter of the
     * rendezvous timeout has passed with no answer, whether the run ended
     * without it (sl_run_end_watch_t, its run's model.bin) and then ends with
     * SL_ERR_ENDED, "the run ended without this node ...: nothing to come back to". */
    int supervised;
    /* A safetensors file whose weights the node takes when it starts fresh (step 0),
     * as sl_train_opts_t.init; NULL: a random initialisation. Borrowed. */
    const char *init;
    int quiet; /* no progress lines of its own */
    /* At the end rank 0 gathers every node's tokens/s (shoal node: nobody else sees all
     * nodes) into res->run_tokens_per_s and <run dir>/summary.json. */
    int run_rate;
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
    /* with opts.run_rate, on rank 0 after SL_OK: the sum of the tokens/s of the
     * run_reported nodes (itself included) whose figure came in time */
    double run_tokens_per_s;
    int run_reported;
} sl_node_result_t;

/* One node (cfg validated; borrowed). Returns SL_OK, SL_ERR_SHUTDOWN when interrupted
 * or stopped by a peer (res->peer_stopped; message "stopped: node 2 failed: ..."),
 * SL_ERR_ENDED when it was started once the run had ended without it (unless
 * supervised, above; nothing trained), or the error that made it fail (message set),
 * after telling its peers. */
sl_status_t sl_node_run(const sl_config_t *cfg, const sl_node_opts_t *o, sl_node_result_t *res);

/* Splits "HOST:PORT" (the cluster.master syntax; port 0 allowed when zero_ok) into
 * host and port. SL_ERR_CONFIG "'x' is not HOST:PORT ..." naming what (a flag, an
 * environment variable) in the message. */
sl_status_t sl_parse_host_port(const char *s, const char *what, int zero_ok, char *host,
                               size_t size, int *port);

#endif
