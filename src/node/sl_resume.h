/* Which checkpoint a node resumes from. A node keeps two generations of its checkpoint
 * (sl_checkpoint_save: <path> and <path>.prev). At start it checks both and offers the
 * steps of those that are sound; a damaged newest is warned about once and the previous
 * one does instead. A node of a run with a sync algorithm then agrees with the others
 * on the newest step every node has (one allgather of the offers), since nodes that
 * resume at different steps would wait for sync rounds the others never reach: when no
 * node has a checkpoint all start from scratch, and when some have one but no step is
 * common to all every node stops at once with the same message naming every node's
 * steps. */
#ifndef SL_RESUME_H
#define SL_RESUME_H

#include "common/sl_status.h"
#include "node/sl_checkpoint.h"
#include "transport/sl_transport.h"

#define SL_RESUME_GENERATIONS 2
/* The agreement's allgather component: far above the ids sync uses (the components,
 * then a few past them), so that no sync frame is taken for it or made stale by it. */
#define SL_RESUME_COMPONENT 0xfffffff0u

/* What one node offers: its sound generations' steps, highest first. */
typedef struct {
    int resume; /* 0: this node starts over (--no-resume) and offers nothing */
    int count;  /* 0 .. SL_RESUME_GENERATIONS */
    long step[SL_RESUME_GENERATIONS];
} sl_resume_steps_t;

/* This node's sound generations: steps highest first, path[i] the file of step[i]. */
typedef struct {
    sl_resume_steps_t steps;
    char path[SL_RESUME_GENERATIONS][SL_CKPT_PATH_MAX];
} sl_resume_offer_t;

/* Checks the generations of the checkpoint at path (path, then <path>.prev; a missing
 * one is none) against the run as sl_checkpoint_check does, and fills *offer (resume
 * set) with the sound ones. A bad file beside a sound one is logged once (warn, the
 * file and why) and left out; so is a missing newest beside a previous. Errors: a
 * newest file that is sound but does not fit this run (sl_checkpoint_check's damaged
 * 0: another model, node count, ...), its message; no usable file but some there:
 * their messages on one line ("A: why; B: why"). Both missing: SL_OK, count 0. */
sl_status_t sl_resume_scan(const char *path, const sl_ckpt_ident_t *id, const sl_lm_t *lm,
                           const sl_optim_t *opt, const sl_lm_state_t *st, const sl_sync_t *sync,
                           sl_resume_offer_t *offer);

/* The step to resume from, given every node's offer (all[0 .. size), rank order): -1
 * (start from scratch) when no node offers a step, else the highest step every node
 * offers. None common: SL_ERR_FORMAT, "resume: no common checkpoint: node 0 has steps
 * 200,100; nodes 1-2 have step 300; node 3 has none; node 4 starts over
 * (--no-resume); resume every node from one step or none (--no-resume on every
 * node starts over)" -- consecutive nodes that offer the same are named together. */
sl_status_t sl_resume_choose(const sl_resume_steps_t *all, int size, long *step);

/* Every node of the run calls it once at start, on its connected transport t (rank of
 * size): allgathers the offers (mine) and returns sl_resume_choose's step and verdict,
 * the same on every node. timeout_ms: how long to wait for a peer (nodes may come from
 * set-up at different speeds). Transport errors as sl_allgather's. */
sl_status_t sl_resume_agree(sl_transport_t *t, int rank, int size, int timeout_ms,
                            const sl_resume_steps_t *mine, long *step);

#endif
