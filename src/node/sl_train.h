/* The single-node trainer: run directory, training loop, periodic checkpoints and
 * evaluation, resume, final model and summary; and evaluation of a saved model.
 *
 * Files in the run directory (cfg->run.dir, or "runs/<run.name>" when empty):
 *   config.yaml     the resolved configuration, paths absolute (rewritten at every start)
 *   checkpoint.bin  parameters, optimizer and hidden state, data cursor
 *   checkpoint.bin.prev  the checkpoint before it (sl_checkpoint.h); a resume takes the
 *                   newest sound one, with several nodes and a sync algorithm the
 *                   step the nodes agree on (sl_resume.h: the newest step all have,
 *                   else the newest any has, which the others take from the lowest
 *                   node that holds it)
 *   model.bin       the final parameters (same format, read by sl_eval_run)
 *   best.bin, best.json  run.keep_best: the model of the best validation so far
 *   checkpoint-<step>.bin  run.keep_checkpoints K: the last K checkpoints
 *   previous/       a previous run's results, set aside when a run starts over
 *                   (resume off; sl_run_files.h)
 *   metrics.jsonl   one JSON object per report and per evaluation
 *   summary.json    final figures (steps, throughput, losses, peak memory, ...)
 *   events.jsonl    written by shoal run's supervisor, not here (sl_supervisor.h): one
 *                   {"event":"membership"} record per node that died, was killed by the
 *                   watchdog or was started again; appended, never trimmed
 * With several nodes (opts->nranks > 1) each node keeps its files but config.yaml in
 * <run dir>/node-<rank>/; rank 0 also writes <run dir>/config.yaml and, at the run
 * directory's top, a copy of its summary.json (sync.algorithm none) or, with a sync
 * algorithm, the final model averaged over the live nodes as <run dir>/model.bin and
 * its evaluation in <run dir>/summary.json (written by the lowest live rank instead
 * when rank 0 died in a gossip or local run). Each node's metrics.jsonl then also gets a
 * {"event":"sync", ...} line per component at every report.
 *
 * Per-step randomness comes from keys that are pure functions of (seed, step), so a
 * resumed run continues bit for bit where the checkpoint left off. */
#ifndef SL_TRAIN_H
#define SL_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_progress.h"
#include "transport/sl_transport.h"

#define SL_TRAIN_PATH_MAX 1024

typedef struct {
    int rank, nranks; /* this node's share of the training data: rank of nranks; also
                         where its files go (see above) */
    int resume;       /* continue from <dir>/checkpoint.bin (or .prev) when it exists;
                         with a sync algorithm on several nodes, from the step they
                         agree on (sl_resume.h); a node without it takes it from
                         another; resume off on one node while another resumes: an
                         error on every node */
    int quiet;        /* no progress lines */
    /* A safetensors file (sl_export.h) whose weights a run that starts at step 0 takes
     * instead of its random initialisation (shoal train --init); NULL: none. Not used
     * when the run resumes from a checkpoint. Borrowed. */
    const char *init;
    /* This process comes back for a rank the run lost (the run is under way: the
     * rendezvous said so, sl_rendezvous.h): instead of the start-up agreement on a
     * checkpoint, it takes its optimizer and loss scale from its own checkpoint when
     * there is one (resume on), then the step, the parameters and the sync state from
     * a live node (sl_rejoin.h), and goes on from that step with the data position of
     * its rank at that step. Every node of a run with a sync algorithm answers such a
     * node's request between its steps. */
    int rejoin;
    /* Set (by a signal handler) to stop after the current step with a checkpoint;
     * may be NULL; borrowed. */
    volatile sig_atomic_t *interrupt;
    /* Called after every step (may be NULL): a status other than SL_OK (message set)
     * stops the run like an interrupt, with a checkpoint, and is returned. This is how
     * a node learns that a peer gave up. */
    sl_status_t (*poll)(void *ctx);
    /* Called with every progress report, also when quiet (may be NULL). */
    void (*on_report)(void *ctx, const sl_progress_line_t *line);
    void *hook_ctx; /* passed to poll and on_report; borrowed */
    /* The node's connected transport for cfg->sync (src/sync/sl_sync.h); borrowed;
     * NULL: a single node (required when nranks > 1). */
    sl_transport_t *transport;
} sl_train_opts_t;

/* rank 0 of 1, resume on, progress shown, no interrupt flag, no hooks. */
void sl_train_opts_init(sl_train_opts_t *o);

typedef struct {
    char run_dir[SL_TRAIN_PATH_MAX];    /* the run directory */
    char dir[SL_TRAIN_PATH_MAX];        /* this node's files: run_dir, or run_dir/node-<rank> */
    char checkpoint[SL_TRAIN_PATH_MAX]; /* <dir>/checkpoint.bin */
    char model[SL_TRAIN_PATH_MAX];      /* <dir>/model.bin */
    sl_level_t level;
    long steps;                   /* steps done (also when interrupted) */
    long total_steps;             /* steps of the whole run */
    double epochs;                /* epochs done, as a real number */
    uint64_t tokens;              /* training tokens seen, resumed runs included */
    double train_time_s;          /* time in training steps, eval excluded */
    double tokens_per_s;          /* tokens / train_time_s */
    double final_train_loss;      /* mean over the last report interval; NaN if no steps ran */
    int has_valid, has_test;      /* 0 when the split is absent */
    double valid_loss, test_loss; /* nats per token, full softmax */
    size_t nparams;
    /* With a sync algorithm, on the node that wrote <run_dir>/model.bin: how many
     * nodes' models it averages (0 elsewhere) and the average's losses. */
    int final_models;
    double final_valid_loss, final_test_loss;
    /* On another member of an ma, bmuf or allreduce run: how many nodes' models the
     * copy of the average it put at <run_dir>/model.bin (or found there) averages, in
     * case the writer never writes it (0 elsewhere). */
    int placed_models;
} sl_train_result_t;

/* Trains as cfg says (cfg validated; borrowed). res is filled as far as the run got.
 * Returns SL_OK, SL_ERR_SHUTDOWN when *opts->interrupt was set (the checkpoint is
 * saved), the status of opts->poll when that stopped the run (the checkpoint is saved
 * too), or the error of the step that failed (message set; nothing already written is
 * lost: files are replaced atomically). */
sl_status_t sl_train_run(const sl_config_t *cfg, const sl_train_opts_t *opts,
                         sl_train_result_t *res);

typedef struct {
    sl_level_t level;
    double loss;     /* nats per token */
    long tokens;     /* tokens evaluated */
    char vocab[192]; /* which vocabulary the split was read with, for the user */
} sl_eval_result_t;

/* Evaluates the checkpoint or model file at path (NULL: the run's model.bin,
 * sl_run_model_path) on split ("valid" or "test") of the
 * data cfg names, full softmax, in cfg's windows (sl_score.h). A file with metadata
 * (sl_model_meta.h) reads the split's file with its own vocabulary and configuration,
 * whatever file it is, without the training file (unless the valid split is a
 * fraction of it); an older file is evaluated with the vocabulary of cfg's training
 * data, with a warning when that data is not the data it was trained on (its corpus
 * hash differs). SL_ERR_CONFIG when the split is absent; the file's errors (sl_checkpoint.h,
 * sl_model_file.h). Implemented in sl_eval.c. */
sl_status_t sl_eval_run(const sl_config_t *cfg, const char *path, const char *split,
                        sl_eval_result_t *res);

#endif
