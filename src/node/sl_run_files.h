/* The run directory's housekeeping around the trainer's files (sl_train.h): the files a
 * previous run left set aside when a run starts over (--no-resume), the last K
 * checkpoints kept (run.keep_checkpoints), and the record of the best validation model
 * (run.keep_best: best.bin, written by the trainer, and best.json, written here), and
 * which model the run's model.bin is when several nodes offer one. */
#ifndef SL_RUN_FILES_H
#define SL_RUN_FILES_H

#include "common/sl_status.h"
#include "config/sl_config.h"

#define SL_RUN_PREVIOUS_DIR "previous" /* <dir>/previous: what a run started over left */
#define SL_RUN_BEST_MODEL "best.bin"
#define SL_RUN_BEST_JSON "best.json"

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

#endif
