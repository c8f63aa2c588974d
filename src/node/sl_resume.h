/* Which checkpoint a node resumes from. A node keeps two generations of its checkpoint
 * (sl_checkpoint_save: <path> and <path>.prev). At start it checks both and offers the
 * steps of those that are sound; a damaged newest is warned about once and the previous
 * one does instead. A node of a run with a sync algorithm then agrees with the others
 * on one step (one allgather of the offers), since nodes that resume at different
 * steps would wait for sync rounds the others never reach.
 *
 * The rule, said here once (the docs point here): when no node has a checkpoint all
 * start from scratch; else the nodes resume from the newest step every node has (a node
 * that is ahead takes its previous generation); when no step is common to all, from
 * the newest step any node has: the nodes that hold it resume from their checkpoints of
 * it, and each other node (one that has none, or only older ones: e.g. a node that only
 * ever came back into the run by a rejoin, and then every process of the run was
 * started again) takes the step, the parameters and the sync state from the
 * lowest-ranked node that holds it, as a node that comes back does (sl_rejoin.h), with
 * its own checkpoint's optimizer and loss scale when it has one (with allreduce the
 * donor's optimizer) and its rank's data position at that step. Every node logs one
 * line saying which nodes took the step from which. The one case of the agreement left
 * an error: a node started with --no-resume while another offers a checkpoint (the
 * operator asked both to start over and to go on; which is meant is not ours to guess);
 * every node then stops at once with the same line naming every node's steps. Before
 * the agreement, sl_resume_scan still refuses on its node, in one line, a checkpoint
 * that does not fit the run (another model, corpus, node count, rank or algorithm) and
 * one whose generations are both damaged. */
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

/* What the nodes agreed on. */
typedef struct {
    long step; /* -1: every node starts from scratch */
    /* -1: every node resumes from its own checkpoint of step; else the lowest-ranked
     * node that holds step, which hands it to the nodes that do not (sl_resume_holds) */
    int donor;
    char note[1024]; /* with a donor: the line every node logs ("resume: ...") */
} sl_resume_plan_t;

/* Whether a node that offers o resumes from its own checkpoint of step. */
int sl_resume_holds(const sl_resume_steps_t *o, long step);

/* The plan, given every node's offer (all[0 .. size), rank order), by the rule above.
 * With a donor, plan->note is "resume: no common checkpoint (node 0 has steps 9,6;
 * node 1 has step 3; node 2 has none): nodes 1-2 take step 9 from node 0 (parameters
 * and sync state), as nodes that come back do". A node with --no-resume while another
 * offers a step: SL_ERR_FORMAT, "resume: no common checkpoint: node 0 has steps
 * 200,100; nodes 1-2 have step 300; node 3 has none; node 4 starts over
 * (--no-resume); resume every node from one step or none (--no-resume on every
 * node starts over)" -- consecutive nodes that offer the same are named together. */
sl_status_t sl_resume_choose(const sl_resume_steps_t *all, int size, sl_resume_plan_t *plan);

/* Every node of the run calls it once at start, on its connected transport t (rank of
 * size): allgathers the offers (mine) into all (size entries, the caller's) and
 * returns sl_resume_choose's plan and verdict, the same on every node. timeout_ms: how
 * long to wait for a peer (nodes may come from set-up at different speeds). Transport
 * errors as sl_allgather's. */
sl_status_t sl_resume_agree(sl_transport_t *t, int rank, int size, int timeout_ms,
                            const sl_resume_steps_t *mine, sl_resume_steps_t *all,
                            sl_resume_plan_t *plan);

#endif
