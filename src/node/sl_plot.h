/* shoal plot: training and validation perplexity of one or more runs, read from their
 * metrics.jsonl, drawn by gnuplot into one PNG, one panel per x axis (by default
 * against steps on the left, against training time on the right), one colour per run. */
#ifndef SL_PLOT_H
#define SL_PLOT_H

#include <stddef.h>
#include <stdio.h>

#include "common/sl_status.h"

/* The columns of a run's points. */
enum { SL_PLOT_STEP, SL_PLOT_PPL, SL_PLOT_TIME_S, SL_PLOT_WALL_S, SL_PLOT_COLS };

/* One run's points, read by sl_plot_read. */
typedef struct {
    char *label;   /* the run directory's name, for the key; owned */
    char *path;    /* the metrics file read; owned */
    double *train; /* (ntrain, SL_PLOT_COLS): step, perplexity, training time in s, the
                      record's wall_time in s since 1970-01-01 UTC (NaN: none); owned */
    double *valid; /* (nvalid, SL_PLOT_COLS): the same for each evaluation on the valid
                      split (training time: that of the step it follows); owned */
    size_t ntrain, nvalid;
} sl_plot_run_t;

/* Reads dir/metrics.jsonl, else dir/node-0/metrics.jsonl (a run of several nodes; node
 * 0's view), else dir itself when it is a file. A run without any training point is an
 * error. SL_ERR_IO (naming dir and both files it tried), SL_ERR_FORMAT ("FILE:LINE: ..."
 * for a line that is no JSON object or a wall_time that is no ISO 8601 UTC time),
 * SL_ERR_NOMEM; free with sl_plot_run_fini. */
sl_status_t sl_plot_read(sl_plot_run_t *run, const char *dir);
void sl_plot_run_fini(sl_plot_run_t *run);

/* The x axes, one panel each: steps, training time (time_s: training steps, evaluations
 * excluded), wall-clock time (wall_time, UTC). */
typedef enum { SL_PLOT_X_STEPS, SL_PLOT_X_TIME, SL_PLOT_X_WALL } sl_plot_x_t;
#define SL_PLOT_MAX_AXES 3

/* Parses list, one to SL_PLOT_MAX_AXES of steps, time and wall separated by commas
 * ("steps,time"), into axes (*n of them), in the order given. SL_ERR_INVALID, naming
 * the word, for anything else or an axis given twice. */
sl_status_t sl_plot_parse_axes(const char *list, sl_plot_x_t *axes, int *n);

/* SL_ERR_FORMAT "FILE: no wall_time in its records (...)" when axes ask for the
 * wall-clock time and one of runs[0..n) has none (a file of an older shoal). */
sl_status_t sl_plot_check_axes(const sl_plot_run_t *runs, int n, const sl_plot_x_t *axes,
                               int naxes);

/* Writes the gnuplot script that draws runs[0..n) into png (a PNG, the runs in distinct
 * colours, a logarithmic perplexity axis, one panel per axis, left to right) to out;
 * png NULL: to gnuplot's standard output. The wall-clock panel shows the points that
 * have a wall time. */
void sl_plot_script(FILE *out, const sl_plot_run_t *runs, int n, const char *png,
                    const sl_plot_x_t *axes, int naxes);

#endif
