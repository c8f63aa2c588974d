/* A training run's reports: the progress line (sl_progress.h), the records of
 * metrics.jsonl (sl_metrics.h: per report a step line, with fp16 a loss_scale line, with
 * a sync algorithm a sync line per component; per evaluation an eval line) and
 * summary.json; with the steps' figures accumulated between reports.
 *
 * The trainer owns an sl_report_t (init/fini), tells it each step's figures and asks
 * for a report, an evaluation's lines or the summary; this file decides what goes into
 * them and how they look. */
#ifndef SL_REPORT_H
#define SL_REPORT_H

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_loss_scale.h"
#include "model/sl_model.h"
#include "node/sl_checkpoint.h"
#include "node/sl_metrics.h"
#include "node/sl_progress.h"
#include "node/sl_train.h"
#include "node/sl_wire_report.h"
#include "sync/sl_sync.h"

/* What reports read of the run, from sl_report_open on; every pointer borrowed and
 * alive until sl_report_fini. */
typedef struct {
    const sl_backend_t *be;
    const sl_loss_scale_t *ls;
    const sl_sync_t *sync;
    const sl_component_t *comps; /* (ncomps) the model's components */
    int ncomps;
    long total_steps, batches_per_epoch;
} sl_report_run_t;

typedef struct {
    const sl_config_t *cfg;      /* borrowed */
    const sl_train_opts_t *opts; /* borrowed: rank, nranks, quiet, on_report, transport */
    sl_report_run_t run;
    sl_progress_t progress;
    sl_metrics_t metrics;
    int metrics_open;
    /* since the last report (acc_time includes acc_sync, the time in sync; acc_norm
     * sums the applied steps' gradient norms) */
    double acc_loss, acc_norm, acc_time, acc_sync;
    long acc_steps, acc_applied, acc_skipped;
    /* this process only, for the ETA */
    double session_time;
    long session_steps;
    /* when this process started reporting (summary.json): wall clock and sl_clock_now */
    char started_at[32];
    double started_s;
} sl_report_t;

/* The progress line on stderr (nothing when opts->quiet); no metrics file yet. */
void sl_report_init(sl_report_t *r, const sl_config_t *cfg, const sl_train_opts_t *opts);
/* Opens metrics_path (sl_metrics_open: lines after keep_through_step are dropped) and
 * takes the run's pointers. SL_ERR_IO. */
sl_status_t sl_report_open(sl_report_t *r, const sl_report_run_t *run, const char *metrics_path,
                           long keep_through_step);
/* Closes the metrics file if open. */
void sl_report_fini(sl_report_t *r);

/* One step done: its mean loss (nats per token), whether it was applied (else skipped:
 * fp16 overflow) and then its gradient norm, its time in seconds. */
void sl_report_step(sl_report_t *r, double loss, int applied, double norm, double step_s);
/* The model sync after a step: wall_s more time, sync_s of it in sync. */
void sl_report_sync_time(sl_report_t *r, double wall_s, double sync_s);

/* A report over the steps since the last one, at cur (after its last step) with
 * learning rate lr: with fp16 the loss_scale line (and a log line when steps were
 * skipped), the progress line, opts->on_report, the step line, the sync lines. Sets
 * *mean_loss to the mean loss reported. Starts the next interval. SL_ERR_IO. */
sl_status_t sl_report_emit(sl_report_t *r, const sl_ckpt_cursor_t *cur, double lr,
                           double *mean_loss);

/* An evaluation of this node's model at step: the log line ("step 50: valid ppl
 * 412.17 (loss 6.0216, 57576 tokens)") and the eval line. SL_ERR_IO. */
sl_status_t sl_report_eval(sl_report_t *r, long step, const char *split, double loss, long tokens);
/* An evaluation of the run's final model, the average of nmodels nodes' models: the
 * log line and the eval line (split "final_<split>"). SL_ERR_IO. */
sl_status_t sl_report_final_eval(sl_report_t *r, long step, int nmodels, const char *split,
                                 double loss);

/* The membership changes of sync not reported yet (sl_sync_next_membership), at step
 * (steps done): each one log line (who, when, why, how many nodes go on) and one
 * "membership" line of metrics.jsonl. SL_ERR_IO. */
sl_status_t sl_report_membership(sl_report_t *r, sl_sync_t *sync, long step);

/* Ends a progress line rewritten in place, so that what follows starts on its own. */
void sl_report_break(sl_report_t *r);

/* What the wire report (node/sl_wire_report.h) reads of r: this process's transport,
 * algorithm, components and steps, for a model of nparams floats. */
sl_wire_report_t sl_report_wire(const sl_report_t *r, size_t nparams);

/* <dir>/summary.json, written atomically: one object the benchmark scripts parse, with
 * res's figures and the run's (backend, precision, loss scale, sync), shoal's version,
 * when this process started and finished (ISO 8601, UTC) and the wall time between;
 * absent values are null. nmodels: how many nodes' models the evaluated one averages (1:
 * this node's). */
sl_status_t sl_report_summary(const sl_report_t *r, const sl_train_result_t *res, const char *dir,
                              int nmodels);
/* Adds the run-wide figures rank 0 gathered at the end of a shoal node run
 * (sl_node_census.h) to <dir>/summary.json as written by sl_report_summary:
 * "run_tokens_per_s" (the sum over the reported nodes), "run_nodes", "run_nodes_reported".
 * SL_ERR_IO, SL_ERR_FORMAT for a file that ends otherwise. */
sl_status_t sl_report_summary_run_rate(const char *dir, int nodes, int reported,
                                       double tokens_per_s);

#endif
