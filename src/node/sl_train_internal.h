/* The trainer's state, shared by the step loop (sl_train.c) and where a run starts
 * (sl_train_start.c: fresh, resumed from a checkpoint, or come back to a run under
 * way). Internal to src/node. */
#ifndef SL_TRAIN_INTERNAL_H
#define SL_TRAIN_INTERNAL_H

#include "data/sl_data.h"
#include "kernels/sl_backend.h"
#include "model/sl_loss_scale.h"
#include "model/sl_model.h"
#include "model/sl_model_meta.h"
#include "model/sl_optim.h"
#include "node/sl_checkpoint.h"
#include "node/sl_rejoin.h"
#include "node/sl_report.h"
#include "node/sl_run_files.h"
#include "node/sl_staging.h"
#include "node/sl_train.h"
#include "sync/sl_sync.h"

#define EVAL_BATCH 10 /* streams for evaluation, the usual choice for these corpora */

/* Everything a run holds; torn down by trainer_fini whatever state it got to. */
typedef struct {
    const sl_config_t *cfg;
    const sl_train_opts_t *opts;
    sl_backend_t *be;
    sl_corpus_t corpus;
    int corpus_loaded;
    sl_batcher_t train_bt, valid_bt, test_bt;
    int has_valid, has_test;
    sl_lm_t *lm;
    sl_optim_t *opt;
    sl_lm_state_t *st;  /* training streams */
    sl_lm_state_t *est; /* evaluation streams */
    int32_t *x, *y;     /* (T, max(B, EVAL_BATCH)) time-major */
    sl_ckpt_ident_t id;
    sl_model_meta_t meta; /* what the files say about the model (id.meta points here) */
    sl_ckpt_cursor_t cur;
    long total_steps;
    long saved_step;       /* step of the last checkpoint written or loaded; -1: none */
    long valid_step;       /* step the last valid evaluation was made at; -1: none */
    sl_report_t rep;       /* progress line, metrics.jsonl, summary.json */
    sl_component_t *comps; /* (ncomponents) copies of the model's, lent to sync */
    int seed_group;        /* this node's sampled-softmax seed group */
    sl_sync_t *sync;
    /* the host mirror for sync when the parameters live on a device (sl_staging.h);
     * NULL when sync reads the backend's memory directly (cpu) or there is no sync */
    sl_staging_t *stage;
    sl_loss_scale_t ls;
    /* 1 when the run resumed from an older generation than <dir>/checkpoint.bin (that
     * file damaged or ahead of the other nodes): the next save replaces it instead of
     * keeping it as the previous generation, so the one resumed from stays */
    int drop_newest;
    sl_rejoin_server_t rejoin_srv; /* state requests of nodes that come back, answered */
    int catching_up;               /* came back into a gossip run: not yet level with the others
                                      (sl_train_catch_up) */
    sl_run_best_t best;            /* run.keep_best: the best validation so far */
    int dir_lock;                  /* this node's directory's lock (sl_run_lock); -1: none */
} trainer_t;

/* The sync object over the model's components from the current parameters. */
sl_status_t sl_train_start_sync(trainer_t *t);
/* Where the run starts: this node's checkpoint (with a sync algorithm on several nodes,
 * the step the nodes agree on; sl_resume.h) when resume is on and there is one, that
 * step from the lowest-ranked node that holds it when this node does not, the live
 * state for a node that comes back (sl_train_opts_t.rejoin), else step 0. */
sl_status_t sl_train_start_at(trainer_t *t, const sl_train_result_t *res);
/* This node's checkpoint of the current step, with the loss scale (nothing when the
 * step's is already saved or loaded: saved_step); run.keep_checkpoints kept. */
sl_status_t sl_train_save_checkpoint(trainer_t *t, const sl_train_result_t *res);
/* A node that came back into a gossip run, after each sync of its shortest period until
 * it is level: when the others' snapshots show them past its step (it was slower to
 * start than its lead), it skips ahead of them again, as when it came back. */
void sl_train_catch_up(trainer_t *t);
/* The test hooks' signal (inert unless the environment asks): with var=STOP<tail> (or
 * KILL<tail>) in the environment this process raises SIGSTOP (or SIGKILL) on itself;
 * another value is ignored. */
void sl_train_test_signal(const char *var, const char *tail);

#endif
