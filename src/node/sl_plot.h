/* shoal plot: training and validation perplexity of one or more runs, read from their
 * metrics.jsonl, drawn by gnuplot into one PNG: against steps on the left, against
 * training time on the right, one colour per run. */
#ifndef SL_PLOT_H
#define SL_PLOT_H

#include <stdio.h>

#include "common/sl_status.h"

/* One run's points, read by sl_plot_read. */
typedef struct {
    char *label;   /* the run directory's name, for the key; owned */
    double *train; /* (ntrain, 3): step, perplexity, training time in s; owned */
    double *valid; /* (nvalid, 3): the same for each evaluation on the valid split; owned */
    size_t ntrain, nvalid;
} sl_plot_run_t;

/* Reads dir/metrics.jsonl, else dir/node-0/metrics.jsonl (a run of several nodes; node
 * 0's view), else dir itself when it is a file. A run without any training point is an
 * error. SL_ERR_IO (naming dir and both files it tried), SL_ERR_FORMAT, SL_ERR_NOMEM;
 * free with sl_plot_run_fini. */
sl_status_t sl_plot_read(sl_plot_run_t *run, const char *dir);
void sl_plot_run_fini(sl_plot_run_t *run);

/* Writes the gnuplot script that draws runs[0..n) into png (a PNG, the runs in distinct
 * colours, a logarithmic perplexity axis) to out. */
void sl_plot_script(FILE *out, const sl_plot_run_t *runs, int n, const char *png);

#endif
