/* One node process of `shoal run` (sl_supervisor.h): the body the supervisor's fork
 * runs, and the records it sends back on its record pipe. */
#ifndef SL_RUN_CHILD_H
#define SL_RUN_CHILD_H

#include <sys/types.h>

#include "config/sl_config.h"
#include "node/sl_progress.h"
#include "node/sl_supervisor.h"
#include "node/sl_train.h"
#include "transport/sl_secret.h"

enum { SL_RUN_REC_MASTER = 1, SL_RUN_REC_REPORT, SL_RUN_REC_END };

/* One message from a node process to shoal run, always written whole (one writer per
 * pipe, so no interleaving; the reader reassembles). */
typedef struct {
    int type;
    int outcome; /* SL_RUN_REC_END: SL_NODE_* */
    int status;  /* SL_RUN_REC_END: the node's status */
    int has_train;
    sl_progress_line_t line; /* SL_RUN_REC_REPORT */
    sl_train_result_t train; /* SL_RUN_REC_END */
    char text[1024];         /* SL_RUN_REC_MASTER: the master; SL_RUN_REC_END: the error */
} sl_run_record_t;

/* The body of node rank's process: its own signal handling, stdout and stderr on log_fd,
 * the node (sl_node_run), the records on rec_fd, the last one SL_RUN_REC_END. Ends the
 * process (it was forked, so main cannot) with the exit status `shoal node` would
 * have. parent: shoal run's pid (a child that finds another parent stops at once). */
void sl_run_child_main(const sl_config_t *cfg, const sl_launch_opts_t *lo, pid_t parent, int rank,
                       const char *master, const char *ipc_dir, const sl_secret_t *secret,
                       int rec_fd, int log_fd) __attribute__((noreturn));

#endif
