/* Where a run starts (sl_train_internal.h): from scratch, from this node's checkpoint
 * (the generation the nodes agree on), or, for a node that comes back to a run under
 * way, from a live node's state (sl_rejoin.h). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_log.h"
#include "node/sl_import.h"
#include "node/sl_resume.h"
#include "node/sl_train_internal.h"

/* The plan (sl_resume.h): with a sync algorithm on several nodes the nodes' agreement
 * on the offers, all (nranks entries) filled with every node's; else this node's newest
 * sound generation, or -1 for a fresh start. In *offer this node's generations and in
 * from the file of the step when this node holds it, else "". Every node of the
 * agreement takes part, also with resume off (it offers nothing), so that all of them
 * start alike. */
static sl_status_t
choose_generation(trainer_t *t, const sl_train_result_t *res, sl_resume_steps_t *all,
                  sl_resume_plan_t *plan, sl_resume_offer_t *offer, char *from, size_t size)
{
    int agree = t->opts->nranks > 1 && sl_sync_algorithm(t->sync) != SL_SYNC_NONE;

    memset(offer, 0, sizeof *offer);
    memset(plan, 0, sizeof *plan);
    plan->donor = -1;
    from[0] = '\0';
    if (t->opts->resume) {
        sl_status_t rc =
            sl_resume_scan(res->checkpoint, &t->id, t->lm, t->opt, t->st, t->sync, offer);
        char why[2200];

        if (rc != SL_OK && rc != SL_ERR_NOMEM) {
            snprintf(why, sizeof why, "%s", sl_err_msg());
            return sl_err_set(rc, "%s (--no-resume starts the run over, setting its files aside)",
                              why);
        }
        SL_TRY(rc);
    }
    if (agree)
        SL_TRY(sl_resume_agree(t->opts->transport, t->opts->rank, t->opts->nranks,
                               t->cfg->cluster.rendezvous_timeout_ms, &offer->steps, all, plan));
    else
        plan->step = offer->steps.count > 0 ? offer->steps.step[0] : -1;
    if (plan->donor >= 0)
        sl_log_info("train", "%s", plan->note);
    for (int g = 0; plan->step >= 0 && g < offer->steps.count; g++) {
        if (offer->steps.step[g] != plan->step)
            continue;
        snprintf(from, size, "%s", offer->path[g]);
        if (g > 0)
            sl_log_warn("train",
                        "resuming from %s at step %ld, the newest step every node has: %s "
                        "(step %ld) goes unused",
                        offer->path[g], plan->step, offer->path[0], offer->steps.step[0]);
        return SL_OK;
    }
    SL_ASSERT(plan->step < 0 || plan->donor >= 0);
    return SL_OK;
}

/* fp16: the loss scale and its counters from the checkpoint loaded into t->cur; 0 when
 * it holds none (or the run is not in fp16). */
static int
restore_loss_scale(trainer_t *t)
{
    if (!t->ls.enabled || t->cur.loss_scale <= 0.0f)
        return 0;
    t->ls.scale = t->cur.loss_scale;
    t->ls.good = t->cur.loss_scale_good;
    t->ls.overflows = t->cur.loss_scale_overflows;
    t->ls.skipped = t->cur.loss_scale_skipped;
    return 1;
}

/* The cursor of this node's data at step (a pure function of it). */
static void
cursor_at(trainer_t *t, long step)
{
    long bpe = t->train_bt.batches_per_epoch;

    t->cur.step = step;
    t->cur.epoch = (int)(step / bpe);
    t->cur.batch_index = step % bpe;
    t->cur.tokens = (uint64_t)step * (uint64_t)t->cfg->train.batch * (uint64_t)t->cfg->train.bptt;
}

/* Where a node that comes back with the state of step (a live node's) starts: at the
 * block boundary of the shortest period one period past it, so that it is a round or
 * two of that period ahead of the others rather than behind (the longer periods' next
 * boundaries are the others' too). Behind, it would find their frames waiting and never
 * wait, while they take its frames for stale and never count it back; ahead, its frames reach them
 * as rounds to come (they count it alive again on the first) and it waits only until they catch up.
 * A node slower to start than that lead is behind all the same, and skips again
 * (sl_train_catch_up). The batches it skips are lost, like those of the node that died. Never past
 * the run's end. */
static long
rejoin_step(const trainer_t *t, long step)
{
    long hmin = sl_sync_shortest_period(t->sync), at = (step / hmin + 2) * hmin;

    return at < t->total_steps ? at : t->total_steps;
}

void
sl_train_catch_up(trainer_t *t)
{
    long others;

    if (!t->catching_up || t->cur.step % sl_sync_shortest_period(t->sync) != 0)
        return;
    others = sl_sync_peers_step(t->sync, t->total_steps);
    if (others == 0)
        return; /* nothing heard yet: no telling */
    if (others <= t->cur.step) {
        t->catching_up = 0; /* level or ahead: the others hear it from now on */
        return;
    }
    /* behind: its snapshots reach the others as stale and they never count it back,
     * while it finds theirs waiting and never waits; only a step ahead gets it in */
    sl_log_info("train", "behind the others (a node is at step %ld): skips from step %ld to %ld",
                others, t->cur.step, rejoin_step(t, others));
    cursor_at(t, rejoin_step(t, others));
}

/* allreduce, ma, bmuf: the live state of a node that comes back, at its admission
 * (sl_members.h "Admission"): asks for it, then waits for the coordinator's state (with
 * allreduce its optimizer's) and member set after the sync of the admission step (up to
 * cluster.rendezvous_timeout_ms: the members train up to two blocks meanwhile). A state
 * of an earlier step is passed over: pushed to an earlier process of this rank, admitted
 * and killed before it read it, it waited at this rank's endpoint. */
static sl_status_t
admitted_state(trainer_t *t, float *params, long *step, int *donor)
{
    int wait_ms = t->cfg->cluster.rendezvous_timeout_ms;
    long at;

    SL_TRY(sl_sync_join(t->sync, wait_ms, &at, donor));
    sl_log_info("train", "node %d admits this node at step %ld: waiting for it", *donor, at);
    do {
        SL_TRY(sl_rejoin_take(t->opts->transport, *donor, wait_ms, sl_lm_nparams(t->lm), t->sync,
                              sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE ? t->opt : NULL,
                              params, step));
        if (*step < at)
            sl_log_info("train",
                        "passed over node %d's state of step %ld: it was sent to an earlier "
                        "process of this rank",
                        *donor, *step);
    } while (*step < at);
    if (*step != at)
        return sl_err_set(SL_ERR_FORMAT, "rejoin: node %d sent the state of step %ld, not %ld",
                          *donor, *step, at);
    return sl_sync_enter(t->sync, *donor, sl_transport_timeout_ms(t->opts->transport));
}

/* The state of a live node, the donor, into params (nparams): with plan, the start-up
 * plan's step from its donor (up to cluster.rendezvous_timeout_ms; with allreduce the
 * optimizer's too); else, for a node that comes back, from the node that admits it
 * (admit: allreduce, ma, bmuf) or the first that answers (sl_rejoin_fetch). */
static sl_status_t
donor_state(trainer_t *t, const sl_resume_plan_t *plan, int admit, float *params, long *step,
            int *donor)
{
    size_t n = sl_lm_nparams(t->lm);
    int allreduce = sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE;

    if (!plan && admit)
        return admitted_state(t, params, step, donor);
    if (!plan)
        return sl_rejoin_fetch(t->opts->transport, n, t->sync, params, step, donor);
    *donor = plan->donor;
    SL_TRY(sl_rejoin_take(t->opts->transport, plan->donor, t->cfg->cluster.rendezvous_timeout_ms, n,
                          t->sync, allreduce ? t->opt : NULL, params, step));
    if (*step != plan->step)
        return sl_err_set(SL_ERR_FORMAT, "resume: node %d sent the state of step %ld, not %ld",
                          plan->donor, *step, plan->step);
    return SL_OK;
}

/* A node that takes its state from a donor (donor_state: plan and admit as there),
 * come back or without the agreed step at the start: its own newest sound checkpoint of
 * offer, if any, for the optimizer and loss scale; then the donor's step (*step),
 * parameters, copied to the device, with their digest once they have arrived
 * (*digest), and sync state; the hidden state at zero; the cursor at that step, or,
 * for a node that comes back into a gossip or local run (no plan, not admit), ahead of
 * it (rejoin_step), catching up. The caller logs it. */
static sl_status_t
take_from_donor(trainer_t *t, const sl_resume_offer_t *offer, const sl_resume_plan_t *plan,
                int admit, long *step, int *donor, uint64_t *digest)
{
    size_t n = sl_lm_nparams(t->lm);
    float *params = NULL;
    sl_status_t st;

    if (offer->steps.count > 0)
        SL_TRY(sl_checkpoint_load(offer->path[0], &t->id, t->be, t->lm, t->opt, t->st, t->sync,
                                  &t->cur));
    restore_loss_scale(t);
    SL_TRY(SL_ALLOC(&params, n, "parameters"));
    st = donor_state(t, plan, admit, params, step, donor);
    if (st == SL_OK)
        st = t->be->ops->to_device(t->be->ctx, sl_lm_params(t->lm), params, n * sizeof *params);
    if (st == SL_OK)
        *digest = sl_rejoin_digest(params, n);
    sl_free(params);
    SL_TRY(st);
    sl_lm_state_reset(t->st);
    t->catching_up = !plan && !admit;
    cursor_at(t, t->catching_up ? rejoin_step(t, *step) : *step);
    return SL_OK;
}

/* A node that comes back (sl_train_opts_t.rejoin): its own newest sound checkpoint
 * for the optimizer and loss scale, then the live step, parameters and sync state (with
 * allreduce, ma and bmuf at its admission into the members; allreduce takes the live
 * optimizer state too); the hidden state starts again at zero. */
static sl_status_t
come_back(trainer_t *t, const sl_train_result_t *res)
{
    sl_resume_offer_t offer;
    long from;
    uint64_t digest = 0;
    sl_sync_algorithm_t algo = sl_sync_algorithm(t->sync);
    int donor, admit = algo == SL_SYNC_ALLREDUCE || algo == SL_SYNC_MA || algo == SL_SYNC_BMUF;

    memset(&offer, 0, sizeof offer);
    if (t->opts->resume)
        SL_TRY(sl_resume_scan(res->checkpoint, &t->id, t->lm, t->opt, t->st, t->sync, &offer));
    SL_TRY(take_from_donor(t, &offer, NULL, admit, &from, &donor, &digest));
    SL_TRY(sl_sync_flush(t->sync, sl_lm_params(t->lm))); /* the donor's overlapped updates */
    sl_log_info("train",
                "came back at step %ld of %ld with node %d's model (parameters %016" PRIx64
                ") and sync state of step %ld%s",
                t->cur.step, t->total_steps, donor, digest, from,
                algo == SL_SYNC_ALLREDUCE ? " and optimizer state"
                : offer.steps.count > 0   ? " and this node's optimizer state"
                                          : "");
    /* a test hook, so that a test holds a node that came back at the moment that matters
     * without racing it: SHOAL_TEST_REJOIN_SIGNAL=STOP stops it once it has said so,
     * before its first step (check_rejoin's test_comes_back_behind lets it go once the
     * others are rounds ahead) */
    sl_train_test_signal("SHOAL_TEST_REJOIN_SIGNAL", "");
    return SL_OK;
}

/* The donor of the start-up plan (sl_resume.h), its checkpoint of the step loaded: the
 * step, parameters and sync state (with allreduce its optimizer's, the same on every
 * node) to each node that does not hold the step, by a rejoin's hand-over. */
static sl_status_t
hand_over(trainer_t *t, const sl_resume_steps_t *all, long step)
{
    const float *params = sl_lm_params(t->lm);
    int allreduce = sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE;

    if (t->stage)
        SL_TRY(sl_staging_pull(t->stage, params, &params));
    for (int k = 0; k < t->opts->nranks; k++)
        if (!sl_resume_holds(&all[k], step))
            SL_TRY(sl_rejoin_push(t->opts->transport, k, step, params, sl_lm_nparams(t->lm),
                                  t->sync, allreduce ? t->opt : NULL));
    return SL_OK;
}

/* A node without a checkpoint of the agreed step (sl_resume.h), as a node that comes
 * back: its own newest sound checkpoint, if any, for the optimizer and loss scale; the
 * step, parameters and sync state (with allreduce the optimizer's) from the donor,
 * which sends them once it has loaded its checkpoint (up to
 * cluster.rendezvous_timeout_ms); the hidden state at zero and its rank's data position
 * at that step. The step is saved at once, so that a restart before the next
 * checkpoint finds it on every node and resumes it bit for bit. */
static sl_status_t
take_at_start(trainer_t *t, const sl_train_result_t *res, const sl_resume_offer_t *offer,
              const sl_resume_plan_t *plan)
{
    long step = -1;
    uint64_t digest = 0;
    int donor;
    char optim[96] = "";

    /* a damaged newest file goes at the save below, the sound one stays the previous */
    if (offer->steps.count > 0)
        t->drop_newest = strcmp(offer->path[0], res->checkpoint) != 0;
    SL_TRY(take_from_donor(t, offer, plan, 0, &step, &donor, &digest));
    if (sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE)
        snprintf(optim, sizeof optim, " and optimizer state");
    else if (offer->steps.count > 0)
        snprintf(optim, sizeof optim, ", with this node's optimizer state of step %ld",
                 offer->steps.step[0]);
    sl_log_info("train",
                "took step %ld of %ld from node %d: its model (parameters %016" PRIx64
                ") and sync state%s",
                step, t->total_steps, donor, digest, optim);
    return sl_train_save_checkpoint(t, res);
}

/* A fresh start: the weights of opts->init when given (the sync state then starts
 * from them, as from a random initialisation). */
static sl_status_t
init_weights(trainer_t *t)
{
    int rows;

    if (!t->opts->init)
        return SL_OK;
    SL_TRY(sl_import_weights(t->opts->init, t->cfg, t->corpus.vocab, t->be, t->lm, &rows));
    sl_sync_destroy(&t->sync);
    SL_TRY(sl_train_start_sync(t));
    if (rows < 0)
        sl_log_info("train", "weights from %s (%zu parameters)", t->opts->init,
                    sl_lm_nparams(t->lm));
    else
        sl_log_info("train",
                    "weights from %s (%zu parameters): the rows of %d of the vocabulary's %d "
                    "entries taken by word%s",
                    t->opts->init, sl_lm_nparams(t->lm), rows, sl_vocab_size(t->corpus.vocab),
                    rows < sl_vocab_size(t->corpus.vocab) ? ", the others' at random" : "");
    return SL_OK;
}

/* sl_train_start_at once the come-back case is out of the way; all: nranks entries. */
static sl_status_t
start_at(trainer_t *t, const sl_train_result_t *res, sl_resume_steps_t *all)
{
    long bpe = t->train_bt.batches_per_epoch;
    char from[SL_CKPT_PATH_MAX];
    sl_resume_offer_t offer;
    sl_resume_plan_t plan;

    SL_TRY(choose_generation(t, res, all, &plan, &offer, from, sizeof from));
    if (plan.step < 0)
        return init_weights(t);
    if (t->opts->init)
        sl_log_info("train", "resuming from a checkpoint: --init %s is not used", t->opts->init);
    if (!from[0])
        return take_at_start(t, res, &offer, &plan);
    SL_TRY(sl_checkpoint_load(from, &t->id, t->be, t->lm, t->opt, t->st, t->sync, &t->cur));
    t->drop_newest = strcmp(from, res->checkpoint) != 0;
    if (t->cur.version == 1 && sl_sync_state_bytes(t->sync) > 0) {
        sl_log_warn("train",
                    "%s: a version 1 checkpoint holds no sync state: %s starts it again "
                    "from the resumed parameters",
                    from, sl_sync_algorithm_name(sl_sync_algorithm(t->sync)));
        sl_sync_destroy(&t->sync);
        SL_TRY(sl_train_start_sync(t));
    }
    if (!restore_loss_scale(t) && t->ls.enabled) {
        sl_log_warn("train",
                    "%s: the checkpoint holds no loss scale (written by an older shoal or "
                    "not in fp16): it starts again at %g",
                    from, (double)t->ls.scale);
    }
    t->saved_step = t->cur.step;
    sl_log_info("train", "resuming from step %ld of %ld (epoch %d, batch %ld of %ld)", t->cur.step,
                t->total_steps, t->cur.epoch + 1, t->cur.batch_index, bpe);
    if (t->cur.step >= t->total_steps)
        sl_log_info("train", "the checkpoint is at the end of the run: nothing left to train");
    if (plan.donor == t->opts->rank)
        SL_TRY(hand_over(t, all, plan.step));
    return SL_OK;
}

/* Training state, sync and loss-scale state included, from this node's checkpoint (the
 * generation choose_generation picks) when there is one and resume is on, or from the
 * donor of the start-up plan (take_at_start). A version 1 checkpoint has no sync
 * state: the sync object starts again from the resumed parameters, as if the run began
 * there; versions 1 and 2 have no loss scale: fp16 starts it again. */
sl_status_t
sl_train_start_at(trainer_t *t, const sl_train_result_t *res)
{
    sl_resume_steps_t *all = NULL;
    sl_status_t st;

    /* with no sync the nodes train alone: its own checkpoint is all it needs */
    if (t->opts->rejoin && sl_sync_algorithm(t->sync) != SL_SYNC_NONE)
        return come_back(t, res);
    SL_TRY(SL_ALLOC(&all, (size_t)(t->opts->nranks > 0 ? t->opts->nranks : 1), "resume offers"));
    st = start_at(t, res, all);
    sl_free(all);
    return st;
}
