/* The run directory's housekeeping around the trainer's files (sl_train.h): the files a
 * previous run left set aside when a run starts over (--no-resume), the last K
 * checkpoints kept (run.keep_checkpoints), and the record of the best validation model
 * (run.keep_best: best.bin, written by the trainer, and best.json, written here),
 * which model the run's model.bin is when several nodes offer one, and the run's
 * config.yaml. */
#ifndef SL_RUN_FILES_H
#define SL_RUN_FILES_H

#include <sys/types.h>
#include <time.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

#define SL_RUN_PREVIOUS_DIR "previous" /* <dir>/previous: what a run started over left */
#define SL_RUN_BEST_MODEL "best.bin"
#define SL_RUN_BEST_JSON "best.json"
#define SL_RUN_LOCK ".lock" /* <dir>/.lock: held by the process that trains there */

/* Takes the lock of dir (<dir>/.lock, flock) for this process, *fd its descriptor (-1
 * where the file system has no locks: the run goes on as without one), released when
 * fd closes or the process ends, however it ends; the lock file names the holder. So a
 * run started twice on one directory (a job submitted twice, requeued while it still
 * runs) stops at once with one line, before it moves or writes anything, rather than
 * two processes writing the same checkpoints. SL_ERR_IO "DIR: in use by another shoal
 * process (pid N on HOST since TIME); ...", or when the lock file cannot be opened. */
sl_status_t sl_run_lock(const char *dir, int *fd);

/* A run that starts over must not leave the previous run's results looking like its own
 * should it fail or be interrupted: moves model.bin, summary.json, best.bin, best.json,
 * checkpoint.bin, checkpoint.bin.prev, checkpoint-<step>.bin and metrics.jsonl of dir
 * (when there) into dir/previous/, which first loses what an earlier start over put
 * there, and logs one line naming them. Nothing else of dir is touched (config.yaml,
 * events.jsonl, node-R/). SL_OK with nothing to move; SL_ERR_IO naming the file. */
sl_status_t sl_run_set_aside(const char *dir);

/* run.keep_checkpoints: the checkpoint just written at checkpoint (<dir>/checkpoint.bin,
 * complete and renamed into place) is kept as <dir>/checkpoint-<step>.bin (a hard link:
 * checkpoints are never rewritten in place; a copy where links fail), then every
 * checkpoint-<step>.bin but the newest keep (>= 1) is removed. SL_ERR_IO. */
sl_status_t sl_run_keep_checkpoint(const char *checkpoint, long step, int keep);

/* The best validation so far: loss (nats per token) INFINITY and step -1 when none. */
typedef struct {
    double loss;
    long step;
} sl_run_best_t;

/* The best of <dir>/best.json when it is there, readable and at most at step upto (a
 * run resumed from an older checkpoint does not keep a best of its discarded future);
 * else none. Never fails: a missing or damaged record means none. */
void sl_run_best_read(const char *dir, long upto, sl_run_best_t *best);
/* <dir>/best.json, written atomically: {"step", "valid_loss", "valid_ppl" or
 * "valid_bpc", "model": "best.bin"}. SL_ERR_IO. */
sl_status_t sl_run_best_write(const char *dir, const sl_run_best_t *best, sl_level_t level);

/* A model offered as the run's <run_dir>/model.bin at the end of a run: its steps, how
 * many nodes' models it averages, and the rank of the node that offers it. */
typedef struct {
    long step;
    int models;
    int rank;
} sl_run_model_t;

/* The run's directory, where its model.bin goes: run.dir, else runs/<run.name>, into
 * out (cap bytes). SL_ERR_INVALID when it does not fit. */
sl_status_t sl_run_dir_path(const sl_config_t *cfg, char *out, size_t cap);

/* The run's model.bin (what shoal eval evaluates without --checkpoint) into path (cap
 * bytes). SL_ERR_IO, one line, when the run has not written it yet, saying which
 * checkpoint to give instead; SL_ERR_INVALID when the path does not fit. */
sl_status_t sl_run_model_path(const sl_config_t *cfg, char *path, size_t cap);

/* <run_dir>/config.yaml: cfg resolved, its paths made absolute so that it works from
 * any directory, written atomically. */
sl_status_t sl_run_write_config(const sl_config_t *cfg, const char *run_dir);

/* What the model file at path is, when it can be read: *m (its steps, how many nodes'
 * models it averages, the rank that offered it) and *evaluated (1 when it carries a
 * validation or test loss). 0 when there is none or it is damaged. */
int sl_run_model_inspect(const char *path, sl_run_model_t *m, int *evaluated);

/* Gives the model file at file (complete: saved and renamed into place) the name path
 * (the run's model.bin), unless path holds a model of this run that stays: one of at
 * least mine's steps (fewer: an earlier run's) that averages more nodes' models, or as
 * many offered by a lower rank (not the same rank's: that one goes). So the writer of
 * a collective run, its lowest member, replaces the copies the other members put there
 * first, and its own unevaluated one with its evaluated file, and of two groups that each
 * took the other for dead and each wrote a model, the bigger group's stays, whichever
 * came last. Decided under a lock on path's directory (sl_file_rename_locked). *placed 1
 * when file took the name, else 0 with file left where it is and *there (may be NULL)
 * what stayed. SL_ERR_IO. */
sl_status_t sl_run_model_place(const char *file, const char *path, const sl_run_model_t *mine,
                               int *placed, sl_run_model_t *there);

/* A node started again for its rank (shoal node under srun, mpirun, torchrun) that waits
 * for the others at the rendezvous, asking whether the run ended without it: nobody is
 * left to admit it once the others finished. The sign is the run's model.bin in the run
 * directory (the directory this node's config names: a run.dir that other hosts do not
 * share shows none): a model file of a run of this run.name, this number of nodes and
 * this sync.algorithm, at the end of this configuration's run (train.epochs done, or
 * train.max_steps), written no earlier than this node's newest checkpoint
 * (<run dir>/node-R/checkpoint.bin, or its previous generation) and of a later step (any
 * step when the node has none). A node that finished the run itself holds a checkpoint
 * of the model's step, so a job started again whole still meets as before, and the
 * model of an earlier run that this one started over from or continues is older than
 * the node's checkpoints. */
typedef struct {
    char model[4096 + 16];      /* <run dir>/model.bin */
    char checkpoint[4096 + 32]; /* <run dir>/node-R/checkpoint.bin */
    int own_read;               /* the node's own checkpoints were looked at */
    long own_step;              /* the step of its newest one; -1: none */
    struct timespec own_at;     /* when the newest of them was written */
    struct timespec model_at;   /* the model.bin looked at last (its time and size) */
    off_t model_size;
} sl_run_end_watch_t;

/* For node rank of nodes (> 1) of the run cfg. SL_ERR_INVALID when the paths do not fit. */
sl_status_t sl_run_end_watch_init(sl_run_end_watch_t *w, const sl_config_t *cfg, int rank,
                                  int nodes);
/* SL_OK while there is no sign that the run ended; SL_ERR_ENDED, when there is, with
 * the message "the run ended without this node at step S (its model is at PATH; this
 * node's newest checkpoint: step C): nothing to come back to" ("this node has no
 * checkpoint" when none). Reads the model again only once its time or size changed. */
sl_status_t sl_run_end_watch_check(sl_run_end_watch_t *w, const sl_config_t *cfg, int nodes);

#endif
