/* The state of one `shoal run` supervisor, shared by its two files: sl_supervisor.c
 * (processes, pipes, records, signals, the progress line, the outcome) and
 * sl_supervisor_watch.c (the watchdog, stopped stragglers, restarts and the membership
 * log). Private to them; nothing else includes it. */
#ifndef SL_SUPERVISOR_INT_H
#define SL_SUPERVISOR_INT_H

#include <stdio.h>
#include <sys/types.h>
#include <sys/un.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_progress.h"
#include "node/sl_run_child.h"
#include "node/sl_supervisor.h"
#include "node/sl_train.h"
#include "transport/sl_secret.h"

#define SL_SUP_IPC_PATH_MAX ((int)sizeof(((struct sockaddr_un *)0)->sun_path))

/* One rank's node process (the latest one, after restarts). */
typedef struct {
    pid_t pid;
    int rec_fd, log_fd;  /* read ends; -1 once at end of file */
    sl_run_record_t rec; /* being reassembled */
    size_t rec_got;
    char line[2048]; /* a log line being reassembled */
    size_t line_len;
    int exited, wstatus;
    int ended;   /* its REC_END arrived */
    int dropped; /* it ended because the members dropped it (SL_ERR_DROPPED): restart it */
    int judged;
    int straggler;        /* killed by the stragglers rule (kill_stragglers) */
    double stopped_since; /* kill_stragglers: when it was first seen stopped, 0 */
    int outcome, status, has_train;
    sl_train_result_t train;
    int has_report;
    sl_progress_line_t report; /* the last one, kept across a restart */
    /* membership and the watchdog (sl_supervisor_watch.c) */
    int gone;              /* dead: waiting for its restart, or lost for good */
    int restarts;          /* restarts so far */
    double restart_at;     /* when to start it again; 0: none due */
    double sign_at;        /* its last sign of progress: a record, a line, CPU time */
    double cpu_at_sign_s;  /* its CPU time then */
    int reported;          /* a report came since it was forked */
    char watchdog_why[96]; /* killed by the watchdog: why; "" otherwise */
    char dropped_why[160]; /* dropped: the node's own words */
    /* the run ended without it, which is no failure: it died as the run was ending and
     * was not started again, or was started again and had not come back when the others
     * had finished (then stopped: SIGKILL at kill_at should it still be there) */
    int left_out;
    double kill_at;
} sl_sup_node_t;

typedef struct {
    const sl_config_t *cfg;
    const sl_launch_opts_t *o;
    sl_launch_opts_t restart_opts; /* o, resume on: a restart keeps what was written */
    FILE *out;
    int n, forked;
    sl_sup_node_t *c;
    char ipc_dir[SL_SUP_IPC_PATH_MAX];
    /* the run's secret, made here and inherited by the forked nodes (never written
     * anywhere nor put in their environment); unset when the nodes read cluster.key_file
     * or security is off */
    sl_secret_t secret;
    int has_secret;
    char master[300];
    int has_master;
    int stopping; /* SIGTERM/SIGINT sent */
    double kill_at;
    int killed;     /* SIGKILL sent */
    int interrupts; /* signals of this process handled so far */
    int culprit;    /* first failed node, -1 */
    sl_status_t culprit_st;
    char culprit_msg[1200];
    int tolerant; /* the sync algorithm goes on without a node that vanished (gossip-*,
                     local-*; allreduce, ma, bmuf re-form their members): such a node does
                     not stop the others */
    int lost;     /* first node that vanished while tolerated, -1 */
    char lost_msg[256];
    double first_done; /* when a node first finished (kill_stragglers), 0 before */
    int tty, line_open;
    long shown_step;
    double shown_at;
} sl_sup_t;

/* sl_supervisor.c */

/* Records the first node that failed and why; later failures are consequences. */
void sl_sup_fail(sl_sup_t *l, int rank, sl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Forks rank's node process (again, after a restart: resume on); SL_ERR_IO. */
sl_status_t sl_sup_fork_node(sl_sup_t *l, int rank);
/* One line of shoal run's own ("shoal run: ..."), above the progress line. */
void sl_sup_say(sl_sup_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* sl_supervisor_watch.c */

/* Nodes that are not gone (dead and not, or not yet, started again). */
int sl_sup_live(const sl_sup_t *l);
/* A node process that died without its end record, not by our hand: starts it again
 * after cluster.restart.delay_ms while restarts are left and the run goes on, leaves it
 * out when only the run's end keeps it from a restart, else lets a tolerant run go on
 * without it or fails the run, as sl_supervisor.h says; one membership line and record
 * either way. why: "killed by signal 9", "exited with
 * status 3 without saying why". */
void sl_sup_node_died(sl_sup_t *l, int rank, const char *why);
/* Whether rank has restarts left (cluster.restart) in a run that goes on: not stopping,
 * nothing failed. */
int sl_sup_restarts_left(const sl_sup_t *l, int rank);
/* Whether the run is ending: in a run that goes on without a node (tolerant), a node
 * trained its last step (its last report says so) or finished. */
int sl_sup_run_ending(const sl_sup_t *l);
/* Whether rank's process, should it end now, would be started again: restarts left and
 * the run not ending (a node started then would find nobody to admit it: rank 0 admits
 * between steps, and the final model is gathered without it). */
int sl_sup_may_restart(const sl_sup_t *l, int rank);
/* A sign of progress from rank (a record or a log line): the watchdog starts over. */
void sl_sup_node_alive(sl_sup_t *l, int rank);
/* One round of watching, between reads of the pipes: the watchdog, restarted nodes that
 * had not come back when the others finished, the stragglers of a tolerant run,
 * restarts that are due. */
void sl_sup_watch(sl_sup_t *l);

#endif
