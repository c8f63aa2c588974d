/* The progress line on stderr: rewritten in place with \r on a terminal, one line per
 * report otherwise, nothing with --quiet. */
#ifndef SL_PROGRESS_H
#define SL_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

/* One report; loss is averaged over the steps since the previous report. */
typedef struct {
    long step, total_steps; /* steps done, steps of the run */
    int epoch;              /* 1-based epoch of the last step */
    double epoch_pct;       /* percent of that epoch done */
    double tokens_per_s;    /* since the previous report */
    double loss;            /* nats per token */
    int char_level;         /* show bpc instead of ppl */
    double lr;
    double eta_s; /* < 0: unknown */
    double sync_pct; /* percent of the wall time spent in sync since the previous report;
                        shown only when > 0 */
} sl_progress_line_t;

typedef struct {
    FILE *out;     /* borrowed */
    int tty;       /* rewrite one line with \r */
    int quiet;     /* show nothing */
    int line_open; /* a \r line is on the screen without its newline */
} sl_progress_t;

/* "step 1200/29850 | ep 1 4.0% | 3790 tok/s | loss 5.612 | ppl 273.8 | lr 20 | ETA 2h05m"
 * (with "| sync 12% " before ETA when sync_pct > 0);
 * returns buf. */
const char *sl_progress_format(const sl_progress_line_t *l, char *buf, size_t size);

void sl_progress_init(sl_progress_t *p, FILE *out, int quiet);
void sl_progress_show(sl_progress_t *p, const sl_progress_line_t *l);
/* Ends a \r line with a newline so that other output (log lines) starts on its own. */
void sl_progress_break(sl_progress_t *p);

#endif
