/* Single-node training: set-up, the step loop with reports, checkpoints and epoch-end
 * evaluation, resume from a checkpoint, the final model and summary.
 *
 * Device memory: the sync algorithms (src/sync) work on host memory; with a backend
 * whose memory is not the host's, the trainer stages through a pinned host mirror
 * (sl_staging.h). SHOAL_STAGE_SYNC=1 in the environment stages on the cpu backend too,
 * so that tests run those copies without a device. SHOAL_TEST_WRITER_SIGNAL=STOP or KILL,
 * a test hook (writer_test_signal), makes the writer of the run's model raise SIGSTOP or
 * SIGKILL on itself right after the final average (STOP_EVAL or KILL_EVAL: once it has
 * put the average, unevaluated, at <run dir>/model.bin), and SHOAL_TEST_LATE_END=N
 * (late_end_test_hook) makes a gossip or local node end late while it still says it
 * trains; unset they do nothing. Reporting (progress line, metrics records,
 * summary.json) is sl_report.h's; the backend and GPU choice sl_node_backend.h's.
 *
 * Mixed precision: cfg->precision goes to the backend's set_precision; with fp16 the
 * loss is scaled (sl_loss_scale.h) and a step whose gradients overflowed is skipped,
 * decided after the gradient allreduce so that every node skips it alike. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_file.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "data/sl_data.h"
#include "embed/sl_seed_groups.h"
#include "kernels/sl_backend.h"
#include "model/sl_loss_scale.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"
#include "node/sl_checkpoint.h"
#include "node/sl_node_backend.h"
#include "node/sl_report.h"
#include "node/sl_rejoin.h"
#include "node/sl_run_files.h"
#include "node/sl_train_internal.h"
#include "node/sl_staging.h"
#include "sync/sl_sync.h"

void
sl_train_opts_init(sl_train_opts_t *o)
{
    o->rank = 0;
    o->nranks = 1;
    o->resume = 1;
    o->quiet = 0;
    o->init = NULL;
    o->rejoin = 0;
    o->interrupt = NULL;
    o->poll = NULL;
    o->on_report = NULL;
    o->hook_ctx = NULL;
    o->transport = NULL;
}

static int
interrupted(const sl_train_opts_t *opts)
{
    return opts && opts->interrupt && *opts->interrupt;
}

static sl_status_t
join_path(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, SL_TRAIN_PATH_MAX, "%s%s%s", dir, *name ? "/" : "", name);
    if (n < 0 || n >= SL_TRAIN_PATH_MAX)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s/%s)", dir, name);
    return SL_OK;
}

/* The run directory, this node's directory and the paths inside; a run that starts
 * over sets the previous run's files aside (sl_run_files.h). */
static sl_status_t
setup_run_dir(const sl_config_t *cfg, const sl_train_opts_t *opts, sl_train_result_t *res,
              int *lock)
{
    char name[SL_TRAIN_PATH_MAX];

    SL_TRY(sl_run_dir_path(cfg, res->run_dir, sizeof res->run_dir));
    if (opts->nranks > 1) {
        snprintf(name, sizeof name, "node-%d", opts->rank);
        SL_TRY(join_path(res->dir, res->run_dir, name));
    } else {
        SL_TRY(join_path(res->dir, res->run_dir, ""));
    }
    SL_TRY(join_path(res->checkpoint, res->dir, "checkpoint.bin"));
    SL_TRY(join_path(res->model, res->dir, "model.bin"));
    SL_TRY(sl_file_mkdirs(res->dir));
    SL_TRY(sl_run_lock(res->dir, lock));
    /* the temp file of a save that a crash interrupted, maybe as large as the model */
    SL_TRY(sl_file_remove_stale_temps(res->checkpoint, NULL));
    if (!opts->resume && !opts->rejoin) {
        SL_TRY(sl_run_set_aside(res->dir));
        if (opts->nranks > 1 && opts->rank == 0)
            SL_TRY(sl_run_set_aside(res->run_dir));
    }
    return SL_OK;
}

/* A batcher of EVAL_BATCH streams over a whole split; *has = 0 when the split is absent. */
static sl_status_t
eval_batcher(sl_batcher_t *bt, const sl_tokens_t *tokens, const char *split, int bptt, int *has)
{
    *has = tokens->len > 0;
    if (!*has)
        return SL_OK;
    if (sl_batcher_init(bt, tokens, 0, 1, EVAL_BATCH, bptt) != SL_OK)
        return sl_err_prefix(SL_ERR_INVALID, "%s split", split);
    return SL_OK;
}

/* Mean loss (nats per token, full softmax, no dropout) over every batch of bt. Stops
 * with SL_ERR_SHUTDOWN when interrupted. */
static sl_status_t
evaluate(sl_lm_t *lm, sl_lm_state_t *est, const sl_batcher_t *bt, int32_t *x, int32_t *y,
         const sl_train_opts_t *opts, double *loss, long *tokens)
{
    double sum = 0;

    sl_lm_state_reset(est);
    for (long i = 0; i < bt->batches_per_epoch; i++) {
        double s;
        if (interrupted(opts))
            return sl_err_set(SL_ERR_SHUTDOWN, "interrupted during evaluation");
        sl_batcher_get(bt, i, x, y);
        SL_TRY(sl_lm_eval_batch(lm, est, x, y, bt->bptt, &s));
        sum += s;
    }
    *tokens = bt->batches_per_epoch * (long)bt->batch * bt->bptt;
    *loss = *tokens > 0 ? sum / (double)*tokens : NAN;
    return SL_OK;
}

/* Corpus, batchers, model, optimizer and states: everything but files. */
static sl_status_t
setup_model(trainer_t *t)
{
    const sl_config_t *cfg = t->cfg;
    int b = cfg->train.batch, bptt = cfg->train.bptt;
    int most = b > EVAL_BATCH ? b : EVAL_BATCH;
    int vocab, groups;

    /* its share of the training ids only: of a large corpus a node would otherwise hold
     * all of it */
    SL_TRY(sl_corpus_load_share(&t->corpus, cfg, t->opts->rank, t->opts->nranks));
    t->corpus_loaded = 1;
    if (sl_batcher_init_at(&t->train_bt, &t->corpus.train, t->corpus.train_from,
                           t->corpus.train_all, t->opts->rank, t->opts->nranks, b, bptt) != SL_OK)
        return sl_err_prefix(SL_ERR_INVALID, "train split");
    SL_TRY(eval_batcher(&t->valid_bt, &t->corpus.valid, "valid", bptt, &t->has_valid));
    SL_TRY(eval_batcher(&t->test_bt, &t->corpus.test, "test", bptt, &t->has_test));

    SL_TRY(sl_seed_groups_count(cfg->embedding.seed_groups, t->opts->nranks, &groups));
    t->seed_group = sl_seed_group_of(t->opts->rank, t->opts->nranks, groups);

    vocab = sl_vocab_size(t->corpus.vocab);
    SL_TRY(sl_lm_new(&t->lm, cfg, vocab, cfg->sync.embedding_shards, most, t->be));
    SL_TRY(sl_optim_new(&t->opt, cfg, sl_lm_nparams(t->lm), t->be));
    SL_TRY(sl_lm_state_new(t->lm, b, &t->st));
    SL_TRY(sl_lm_state_new(t->lm, EVAL_BATCH, &t->est));
    SL_TRY(SL_ALLOC(&t->x, (size_t)most * bptt, "batch inputs"));
    SL_TRY(SL_ALLOC(&t->y, (size_t)most * bptt, "batch targets"));
    sl_ckpt_ident_init(&t->id, cfg, vocab, t->corpus.hash, t->opts->rank, t->opts->nranks);
    sl_model_meta_init(&t->meta, cfg, t->corpus.vocab);
    t->meta.data_hash = t->corpus.hash;
    memcpy(t->meta.train_sha256, t->corpus.train_sha256, sizeof t->meta.train_sha256);
    t->id.meta = &t->meta;

    t->total_steps = (long)cfg->train.epochs * t->train_bt.batches_per_epoch;
    if (cfg->train.max_steps > 0 && cfg->train.max_steps < t->total_steps)
        t->total_steps = cfg->train.max_steps;
    t->id.total_steps = t->total_steps;
    t->id.batches_per_epoch = t->train_bt.batches_per_epoch;
    return SL_OK;
}

/* The sync object, its state (omega and the block start of *bmuf) started from the
 * parameters as they are now, through the host mirror when there is one. */
sl_status_t
sl_train_start_sync(trainer_t *t)
{
    size_t n = sl_lm_nparams(t->lm);
    const float *params = sl_lm_params(t->lm);

    if (t->stage)
        SL_TRY(sl_staging_pull(t->stage, params, &params));
    return sl_sync_new(&t->sync, t->cfg, t->opts->transport, t->opts->rank, t->opts->nranks,
                       t->comps, sl_lm_ncomponents(t->lm), params, n);
}

/* The sync algorithm over the model's components, from the initial parameters: a
 * resume (maybe_resume) then loads the sync state saved with the checkpoint into it. */
static sl_status_t
setup_sync(trainer_t *t)
{
    int nc = sl_lm_ncomponents(t->lm);
    size_t n = sl_lm_nparams(t->lm);

    SL_TRY(SL_ALLOC(&t->comps, (size_t)nc, "components"));
    for (int i = 0; i < nc; i++)
        t->comps[i] = *sl_lm_component(t->lm, i);
    if (sl_staging_needed(t->be, t->opts->nranks, t->cfg->sync.algorithm)) {
        SL_TRY(sl_staging_new(&t->stage, t->be, n));
        sl_log_debug("train", "sync stages %zu parameters through host memory", n);
    }
    return sl_train_start_sync(t);
}

/* allreduce: the gradients averaged over the nodes, through the host mirror when they
 * live on a device. Other algorithms: nothing (sl_sync_gradients). */
static sl_status_t
sync_gradients(trainer_t *t, float *grads)
{
    if (t->stage && sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE)
        return sl_staging_gradients(t->stage, t->sync, grads, t->cur.step);
    return sl_sync_gradients(t->sync, grads, t->cur.step);
}

/* The model sync after a step, through the host mirror when there is one. */
static sl_status_t
sync_after_step(trainer_t *t)
{
    if (t->stage)
        return sl_staging_after_step(t->stage, t->sync, sl_lm_params(t->lm), t->comps,
                                     sl_lm_ncomponents(t->lm), t->cur.step);
    return sl_sync_after_step(t->sync, sl_lm_params(t->lm), t->cur.step);
}

sl_status_t
sl_train_save_checkpoint(trainer_t *t, const sl_train_result_t *res)
{
    if (t->saved_step == t->cur.step)
        return SL_OK;
    t->cur.loss_scale = t->ls.enabled ? t->ls.scale : 0.0f;
    t->cur.loss_scale_good = t->ls.good;
    t->cur.loss_scale_overflows = t->ls.overflows;
    t->cur.loss_scale_skipped = t->ls.skipped;
    if (t->drop_newest && unlink(res->checkpoint) != 0 && errno != ENOENT)
        return sl_err_set(SL_ERR_IO, "%s: cannot remove: %s", res->checkpoint, strerror(errno));
    t->drop_newest = 0;
    SL_TRY(
        sl_checkpoint_save(res->checkpoint, &t->id, &t->cur, t->be, t->lm, t->opt, t->st, t->sync));
    t->saved_step = t->cur.step;
    if (t->cfg->run.keep_checkpoints > 0)
        SL_TRY(sl_run_keep_checkpoint(res->checkpoint, t->cur.step, t->cfg->run.keep_checkpoints));
    sl_log_debug("train", "checkpoint at step %ld: %s", t->cur.step, res->checkpoint);
    return SL_OK;
}

/* run.keep_best: a validation loss below the best so far makes this model best.bin. */
static sl_status_t
note_valid(trainer_t *t, const sl_train_result_t *res, double loss)
{
    char path[SL_TRAIN_PATH_MAX];

    if (!t->cfg->run.keep_best || !(loss < t->best.loss))
        return SL_OK;
    SL_TRY(join_path(path, res->dir, SL_RUN_BEST_MODEL));
    SL_TRY(sl_checkpoint_save(path, &t->id, &t->cur, t->be, t->lm, NULL, NULL, NULL));
    t->best.loss = loss;
    t->best.step = t->cur.step;
    sl_log_debug("train", "step %ld: best validation so far: %s", t->cur.step, path);
    return sl_run_best_write(res->dir, &t->best, t->cfg->data.level);
}

static sl_status_t
eval_split(trainer_t *t, const sl_batcher_t *bt, const char *split, double *loss)
{
    long tokens;

    SL_TRY(evaluate(t->lm, t->est, bt, t->x, t->y, t->opts, loss, &tokens));
    if (bt == &t->test_bt) {
        t->meta.test_loss = *loss;
    } else {
        t->meta.valid_loss = *loss;
        t->meta.valid_step = t->cur.step;
    }
    return sl_report_eval(&t->rep, t->cur.step, split, *loss, tokens);
}

/* One optimizer step on the next batch; advances the cursor; then the model sync of the
 * step, if any. An error in that sync leaves a complete step (cursor advanced) behind,
 * so a checkpoint can still be taken. With fp16 the gradients come out of backward
 * multiplied by the loss scale S and are divided by it at once; whether they overflowed
 * is decided after the allreduce (every node then holds the same sum: non-finite on all
 * if on one), and an overflowed step updates nothing but still counts as a step, so
 * that the data, the schedule and the model syncs stay in step across nodes. */
static sl_status_t
train_step(trainer_t *t, double *lr, double *loss)
{
    const sl_config_t *cfg = t->cfg;
    uint64_t dk[3] = {cfg->run.seed, 'D', (uint64_t)t->cur.step};
    sl_step_keys_t keys;
    size_t n = sl_lm_nparams(t->lm);
    double loss_sum, norm, t0 = sl_clock_now(), dt, s0 = sl_sync_time_s(t->sync);
    float scale = t->ls.scale;
    const size_t *spans = NULL; /* where the gradient may be nonzero (NULL: anywhere) */
    size_t nspans = 0;
    int applied, all = sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE; /* adds others' rows */
    float *grads;
    sl_status_t st;

    if (t->cur.batch_index == 0)
        sl_lm_state_reset(t->st);
    sl_batcher_get(&t->train_bt, t->cur.batch_index, t->x, t->y);
    keys.dropout_key = sl_hash_u64s(dk, 3);
    keys.sample_key = sl_seed_group_sample_key(cfg->run.seed, t->cur.step, t->seed_group);
    if (t->ls.enabled)
        sl_lm_set_loss_scale(t->lm, scale);
    SL_TRY(sl_lm_train_step(t->lm, t->st, t->x, t->y, cfg->train.bptt, &keys, &loss_sum));
    SL_TRY(sl_sync_note_model(t->sync, t->lm));
    grads = all ? sl_lm_grads(t->lm) : sl_lm_grads_within_spans(t->lm);
    sl_loss_scale_unscale(&t->ls, t->be, grads, n);
    SL_TRY(sync_gradients(t, grads));
    *lr = sl_lr_at(cfg, t->cur.step, t->cur.epoch, t->total_steps);
    if (!all)
        nspans = sl_lm_grad_spans(t->lm, &spans);
    st = sl_loss_scale_step(&t->ls, t->be, t->opt, sl_lm_params(t->lm), grads, n, spans, nspans,
                            cfg->train.optimizer.clip, *lr, &norm, &applied);
    if (st != SL_OK) {
        sl_err_prefix(st, "step %ld", t->cur.step);
        return st;
    }
    SL_TRY(t->be->ops->sync(t->be->ctx));
    dt = sl_clock_now() - t0;
    if (!applied)
        sl_log_debug("train", "step %ld skipped: gradients overflowed at loss scale %g (now %g)",
                     t->cur.step, (double)scale, (double)t->ls.scale);

    *loss = loss_sum / ((double)cfg->train.batch * cfg->train.bptt);
    t->cur.train_time_s += dt;
    t->cur.step++;
    t->cur.tokens += (uint64_t)cfg->train.batch * cfg->train.bptt;
    if (++t->cur.batch_index == t->train_bt.batches_per_epoch) {
        t->cur.batch_index = 0;
        t->cur.epoch++;
    }
    sl_report_step(&t->rep, *loss, applied, norm, dt);

    t0 = sl_clock_now();
    st = sync_after_step(t);
    if (st == SL_OK)
        st = sl_report_membership(&t->rep, t->sync, t->cur.step);
    dt = sl_clock_now() - t0;
    t->cur.train_time_s += dt;
    sl_report_sync_time(&t->rep, dt, sl_sync_time_s(t->sync) - s0);
    return st;
}

/* The poll hook's verdict after a step; its message is kept in msg, since the report
 * and checkpoint that follow may overwrite the thread's message. The hook reads the
 * transport, so it is skipped while an overlapped exchange owns it (that exchange sees
 * a peer's abort itself). */
static sl_status_t
poll_hook(const trainer_t *t, char *msg, size_t size)
{
    sl_status_t st;

    if (!t->opts->poll || !sl_sync_transport_free(t->sync) ||
        (st = t->opts->poll(t->opts->hook_ctx)) == SL_OK)
        return SL_OK;
    snprintf(msg, size, "%s", sl_err_msg());
    return st;
}

/* Answers the state requests of nodes that come back, with the transport free; with
 * allreduce, ma and bmuf, their admission (sl_sync_admissions), and the coordinator's
 * state to each admitted now (with allreduce its optimizer state too: the same on every
 * member). */
static sl_status_t
serve_comebacks(trainer_t *t)
{
    const float *params = sl_lm_params(t->lm);
    const uint32_t *give;
    int ngive, allreduce = sl_sync_algorithm(t->sync) == SL_SYNC_ALLREDUCE;

    if (!t->opts->transport || sl_sync_algorithm(t->sync) == SL_SYNC_NONE ||
        !sl_sync_transport_free(t->sync))
        return SL_OK;
    if (sl_sync_admits(t->sync)) {
        SL_TRY(sl_sync_admissions(t->sync, t->cur.step, t->total_steps, &give, &ngive));
        for (int i = 0; i < ngive; i++) {
            if (t->stage)
                SL_TRY(sl_staging_pull(t->stage, params, &params));
            SL_TRY(sl_rejoin_push(t->opts->transport, (int)give[i], t->cur.step, params,
                                  sl_lm_nparams(t->lm), t->sync, allreduce ? t->opt : NULL));
        }
        return SL_OK;
    }
    if (!sl_rejoin_requested(&t->rejoin_srv, t->opts->transport))
        return SL_OK; /* the common case: no copy of the parameters */
    if (t->stage)
        SL_TRY(sl_staging_pull(t->stage, params, &params));
    return sl_rejoin_serve(&t->rejoin_srv, t->opts->transport, t->cur.step, params,
                           sl_lm_nparams(t->lm), t->sync);
}

static sl_status_t
train_loop(trainer_t *t, sl_train_result_t *res)
{
    const sl_config_t *cfg = t->cfg;
    char why[512];

    while (t->cur.step < t->total_steps) {
        double lr, loss, vloss;
        int epoch_end, stop;
        sl_status_t polled = SL_OK, stepped;
        long before = t->cur.step;

        stepped = train_step(t, &lr, &loss);
        res->steps = t->cur.step;
        if (stepped == SL_ERR_SHUTDOWN) {
            /* interrupted, or a peer's abort, inside a sync exchange: keep the work when
             * the step itself was complete (the model sync comes after it) */
            snprintf(why, sizeof why, "%s", sl_err_msg());
            if (t->cur.step > before)
                SL_TRY(sl_train_save_checkpoint(t, res));
            if (interrupted(t->opts))
                return sl_err_set(SL_ERR_SHUTDOWN, "interrupted at step %ld", t->cur.step);
            return sl_err_set(SL_ERR_SHUTDOWN, "%s", why);
        }
        SL_TRY(stepped);
        if (!isfinite(loss))
            return sl_err_set(SL_ERR_INVALID,
                              "step %ld: training loss is %g (diverged; lower "
                              "train.optimizer.lr or set train.optimizer.clip)",
                              t->cur.step, loss);
        sl_train_catch_up(t);
        epoch_end = t->cur.batch_index == 0;
        stop = interrupted(t->opts);
        if (!stop)
            stop = (polled = poll_hook(t, why, sizeof why)) != SL_OK;
        if (!stop)
            SL_TRY(serve_comebacks(t));
        /* the nodes already at the end wait for this one while it says it trains */
        if (!stop && t->opts->transport && sl_sync_transport_free(t->sync))
            SL_TRY(sl_sync_still_training(t->sync, 0, NULL));
        if ((cfg->run.log_every > 0 && t->cur.step % cfg->run.log_every == 0) ||
            t->cur.step == t->total_steps || stop)
            SL_TRY(sl_report_emit(&t->rep, &t->cur, lr, &res->final_train_loss));
        if ((cfg->run.checkpoint_every > 0 && t->cur.step % cfg->run.checkpoint_every == 0) ||
            epoch_end || t->cur.step == t->total_steps || stop)
            SL_TRY(sl_train_save_checkpoint(t, res));
        if (polled != SL_OK)
            return sl_err_set(polled, "%s", why);
        if (stop)
            return sl_err_set(SL_ERR_SHUTDOWN, "interrupted at step %ld", t->cur.step);
        if (epoch_end && cfg->train.eval_every_epoch && t->has_valid) {
            SL_TRY(eval_split(t, &t->valid_bt, "valid", &vloss));
            t->valid_step = t->cur.step;
            res->has_valid = 1;
            res->valid_loss = vloss;
            SL_TRY(note_valid(t, res, vloss));
        }
    }
    return SL_OK;
}

/* The model in the parameters, averaging nmodels nodes' models, offered as <run
 * dir>/model.bin (sl_run_model_place: one of this run that averages more nodes, or as
 * many from a lower rank, stays). *placed 0 when the other stayed: the writer's own
 * is then kept as <dir>/group-model.bin, with a warning (two groups that each took the
 * other for dead), another member's copy is dropped. */
static sl_status_t
offer_run_model(trainer_t *t, sl_train_result_t *res, int nmodels, int writer, int *placed)
{
    char path[SL_TRAIN_PATH_MAX], spare[SL_TRAIN_PATH_MAX], aside[SL_TRAIN_PATH_MAX];
    sl_run_model_t mine = {t->cur.step, nmodels, t->id.rank}, there;
    sl_status_t st;

    SL_TRY(join_path(path, res->run_dir, "model.bin"));
    SL_TRY(join_path(aside, res->dir, "group-model.bin"));
    SL_TRY(sl_file_temp_name(path, spare, sizeof spare));
    SL_TRY(sl_checkpoint_save(spare, &t->id, &t->cur, t->be, t->lm, NULL, NULL, NULL));
    st = sl_run_model_place(spare, path, &mine, placed, &there);
    if (st == SL_OK && !*placed && writer) {
        if (rename(spare, aside) != 0)
            st = sl_err_set(SL_ERR_IO, "%s: cannot rename %s into place: %s", aside, spare,
                            strerror(errno));
        else
            sl_log_warn("train",
                        "%s is the average of %d nodes, from node %d: this node's group "
                        "averaged %d, kept as %s",
                        path, there.models, there.rank, nmodels, aside);
    }
    unlink(spare); /* gone when it took a name */
    return st;
}

/* With a sync algorithm, on the writer sl_sync_final names (rank 0; in gossip and local
 * runs the lowest-ranked live node): the average of the nodes' models (avg) evaluated,
 * offered as <run dir>/model.bin (in place of its unevaluated copy), and with it <run
 * dir>/summary.json (its "rank" is the writer's). Overwrites the parameters. */
static sl_status_t
finish_run_model(trainer_t *t, sl_train_result_t *res, const float *avg, int nmodels,
                 const int known[2])
{
    sl_train_result_t run = *res;
    const sl_batcher_t *bt[2] = {&t->valid_bt, &t->test_bt};
    const char *split[2] = {"valid", "test"};
    int has[2] = {t->has_valid, t->has_test}, placed;
    double *loss[2] = {&run.valid_loss, &run.test_loss};

    SL_TRY(t->be->ops->to_device(t->be->ctx, sl_lm_params(t->lm), avg,
                                 sl_lm_nparams(t->lm) * sizeof *avg));
    for (int i = 0; i < 2; i++) {
        long tokens;
        if (!has[i])
            continue;
        if (!known[i]) /* else run's loss is this node's, of the same model */
            SL_TRY(evaluate(t->lm, t->est, bt[i], t->x, t->y, t->opts, loss[i], &tokens));
        SL_TRY(sl_report_final_eval(&t->rep, t->cur.step, nmodels, split[i], *loss[i]));
    }
    run.has_valid = t->has_valid;
    run.has_test = t->has_test;
    t->meta.models_averaged = nmodels;
    t->meta.valid_loss = t->has_valid ? run.valid_loss : NAN;
    t->meta.valid_step = t->has_valid ? t->cur.step : -1;
    t->meta.test_loss = t->has_test ? run.test_loss : NAN;
    SL_TRY(offer_run_model(t, res, nmodels, 1, &placed));
    if (!placed)
        return SL_OK;
    res->final_models = nmodels;
    res->final_valid_loss = run.valid_loss;
    res->final_test_loss = run.test_loss;
    sl_log_info("train", "final model: %s/model.bin", res->run_dir);
    return sl_report_summary(&t->rep, &run, res->run_dir, nmodels);
}

/* The final average avg of nmodels nodes, not evaluated (valid/test NaN), offered as
 * <run dir>/model.bin by a node that holds it bit for bit: a member other than the
 * writer (of an ma, bmuf or allreduce run; in a gossip or local run one whose model the
 * gatherer took and sent the average back to), or the writer itself (writer 1) before
 * it evaluates anything. The writer replaces it with its evaluated file when it gets
 * that far (the same rank's file goes: sl_run_model_place), so that a writer stopped or
 * killed after the final average or in its evaluations, or one writing to another
 * host's run directory, still leaves the run its model. Overwrites the parameters. */
static sl_status_t
place_run_model(trainer_t *t, sl_train_result_t *res, const float *avg, int nmodels, int writer)
{
    int placed;

    SL_TRY(t->be->ops->to_device(t->be->ctx, sl_lm_params(t->lm), avg,
                                 sl_lm_nparams(t->lm) * sizeof *avg));
    t->meta.models_averaged = nmodels;
    t->meta.valid_loss = t->meta.test_loss = NAN; /* the writer evaluates it */
    t->meta.valid_step = -1;
    SL_TRY(offer_run_model(t, res, nmodels, 0, &placed));
    if (!writer)
        res->placed_models = nmodels;
    if (placed)
        sl_log_info("train",
                    "%s copy of the run's model (the average of %d nodes) is %s/model.bin "
                    "until %s it with the evaluated one",
                    writer ? "the writer's" : "this node's", nmodels, res->run_dir,
                    writer ? "it replaces" : "the writer replaces");
    return SL_OK;
}

/* The writer, as soon as it has the final average avg: the average put at <run
 * dir>/model.bin unevaluated, as a member's copy (place_run_model), so that the run
 * keeps its model if the writer dies in the evaluations that follow; then its own
 * parameters (a host copy taken first) and metadata back, for the evaluation of this
 * node's model. */
static sl_status_t
writer_place_first(trainer_t *t, sl_train_result_t *res, const float *avg, int nmodels)
{
    size_t n = sl_lm_nparams(t->lm);
    sl_model_meta_t meta = t->meta;
    float *own = NULL;
    sl_status_t st;

    SL_TRY(SL_ALLOC(&own, n, "this node's parameters"));
    st = t->be->ops->to_host(t->be->ctx, own, sl_lm_params(t->lm), n * sizeof *own);
    if (st == SL_OK)
        st = place_run_model(t, res, avg, nmodels, 1);
    t->meta = meta;
    if (st == SL_OK)
        st = t->be->ops->to_device(t->be->ctx, sl_lm_params(t->lm), own, n * sizeof *own);
    sl_free(own);
    return st;
}

void
sl_train_test_signal(const char *var, const char *tail)
{
    const char *sig = getenv(var);

    if (!sig || strlen(sig) != 4 + strlen(tail) || strcmp(sig + 4, tail) != 0)
        return;
    if (strncmp(sig, "STOP", 4) == 0)
        raise(SIGSTOP);
    else if (strncmp(sig, "KILL", 4) == 0)
        raise(SIGKILL);
}

/* A test hook, so that tests stop or kill the writer at the moments that matter,
 * without sleeps: with SHOAL_TEST_WRITER_SIGNAL=STOP (or KILL) in the environment the
 * writer raises SIGSTOP (or SIGKILL) on itself once it has the final average, which
 * the other nodes then hold too, and before it writes or evaluates it (at 0); with
 * STOP_EVAL (or KILL_EVAL), once it has put that average at <run dir>/model.bin, not
 * evaluated, as it starts its evaluations (at 1). */
static void
writer_test_signal(int at)
{
    sl_train_test_signal("SHOAL_TEST_WRITER_SIGNAL", at ? "_EVAL" : "");
}

/* A test hook, so that tests make a node end late while it trains on, without sleeps:
 * with SHOAL_TEST_LATE_END=N (N >= 1) in the environment a node of a gossip or local
 * run, at the end of its training, goes on answering the nodes already at the end as
 * it does between its steps (sl_sync_still_training) until it has taken N of their
 * signs, then joins the final gathering; it gives up after 3 sync timeouts without
 * one. Inert when unset; a value that is not a positive number is ignored. */
static sl_status_t
late_end_test_hook(trainer_t *t)
{
    const char *v = getenv("SHOAL_TEST_LATE_END");
    char *end;
    long want = v ? strtol(v, &end, 10) : 0;
    int quiet = 0, wait_ms = t->cfg->sync.timeout_ms > 0 ? t->cfg->sync.timeout_ms
                                                         : t->cfg->cluster.timeout_ms;

    if (!v || *end || want < 1 || !t->opts->transport)
        return SL_OK;
    for (long took = 0; took < want && quiet < 3;) {
        int n;

        SL_TRY(sl_sync_still_training(t->sync, wait_ms, &n));
        took += n;
        quiet = n ? 0 : quiet + 1;
    }
    return SL_OK;
}

/* End of the run: the final average (every node takes part; the writer puts it at <run
 * dir>/model.bin at once, not evaluated), valid and test evaluation of this node's
 * model, its model.bin and summary.json; then the run-level files: the writer's, or
 * rank 0's copy of its summary without a sync algorithm. */
static sl_status_t
finish(trainer_t *t, sl_train_result_t *res)
{
    double loss;
    const float *avg, *params = sl_lm_params(t->lm);
    int writer, nmodels, same, known[2] = {0, 0};

    /* overlapped syncs still pending go into the final models (the last checkpoint keeps
     * them pending, so that a longer run resumed from it continues bit for bit) */
    if (t->stage)
        SL_TRY(sl_staging_flush(t->stage, t->sync, sl_lm_params(t->lm)));
    else
        SL_TRY(sl_sync_flush(t->sync, sl_lm_params(t->lm)));
    if (t->stage)
        SL_TRY(sl_staging_pull(t->stage, params, &params));
    SL_TRY(late_end_test_hook(t));
    SL_TRY(sl_sync_final(t->sync, params, &avg, &writer, &nmodels));
    /* an average that is this node's model bit for bit (allreduce; ma or bmuf synced at
     * the last step) is not evaluated twice: this node's evaluations below stand for it */
    same = writer && avg && memcmp(avg, params, sl_lm_nparams(t->lm) * sizeof *avg) == 0;
    if (writer)
        writer_test_signal(0);
    if (writer && avg) {
        SL_TRY(writer_place_first(t, res, avg, nmodels));
        writer_test_signal(1);
    }
    SL_TRY(sl_report_membership(&t->rep, t->sync, t->cur.step));
    if (t->has_valid && t->valid_step != t->cur.step) {
        SL_TRY(eval_split(t, &t->valid_bt, "valid", &loss));
        res->has_valid = 1;
        res->valid_loss = loss;
        known[0] = same;
        SL_TRY(note_valid(t, res, loss));
    }
    if (t->has_test) {
        SL_TRY(eval_split(t, &t->test_bt, "test", &loss));
        res->has_test = 1;
        res->test_loss = loss;
        known[1] = same;
    }
    if (t->cfg->sync.keep_node_models || sl_sync_algorithm(t->sync) == SL_SYNC_NONE)
        SL_TRY(sl_checkpoint_save(res->model, &t->id, &t->cur, t->be, t->lm, NULL, NULL, NULL));
    SL_TRY(sl_report_summary(&t->rep, res, res->dir, 1));
    {
        sl_wire_report_t w = sl_report_wire(&t->rep, sl_lm_nparams(t->lm));
        sl_wire_report_log(&w);
    }
    if (writer && avg)
        return finish_run_model(t, res, avg, nmodels, known);
    if (avg)
        SL_TRY(place_run_model(t, res, avg, nmodels, 0));
    if (t->opts->nranks > 1 && t->opts->rank == 0)
        return sl_report_summary(&t->rep, res, res->run_dir, 1);
    return SL_OK;
}

static void
fill_result(const trainer_t *t, sl_train_result_t *res)
{
    long bpe = t->train_bt.batches_per_epoch;

    res->steps = t->cur.step;
    res->total_steps = t->total_steps;
    res->epochs = bpe > 0 ? (double)t->cur.step / (double)bpe : 0;
    res->tokens = t->cur.tokens;
    res->train_time_s = t->cur.train_time_s;
    res->tokens_per_s = t->cur.train_time_s > 0 ? (double)t->cur.tokens / t->cur.train_time_s : 0;
}

static void
trainer_fini(trainer_t *t)
{
    sl_report_fini(&t->rep);
    sl_sync_destroy(&t->sync);
    sl_staging_destroy(&t->stage);
    sl_free(t->comps);
    sl_free(t->x);
    sl_free(t->y);
    sl_lm_state_destroy(&t->est);
    sl_lm_state_destroy(&t->st);
    sl_optim_destroy(&t->opt);
    sl_lm_destroy(&t->lm);
    if (t->corpus_loaded)
        sl_corpus_fini(&t->corpus);
    sl_backend_destroy(&t->be);
    if (t->dir_lock >= 0)
        close(t->dir_lock); /* last, with the run's files closed: the directory is free */
}

sl_status_t
sl_train_run(const sl_config_t *cfg, const sl_train_opts_t *opts, sl_train_result_t *res)
{
    trainer_t t;
    sl_report_run_t run;
    char path[SL_TRAIN_PATH_MAX];
    sl_status_t rc;

    memset(&t, 0, sizeof t);
    memset(res, 0, sizeof *res);
    t.cfg = cfg;
    t.opts = opts;
    t.saved_step = -1;
    t.valid_step = -1;
    t.dir_lock = -1;
    res->level = cfg->data.level;
    res->final_train_loss = NAN;
    sl_report_init(&t.rep, cfg, opts);

    SL_TRY_GOTO(setup_run_dir(cfg, opts, res, &t.dir_lock), rc, out);
    SL_TRY_GOTO(sl_node_backend_open(cfg, opts->rank, &t.be), rc, out);
    SL_TRY_GOTO(sl_loss_scale_init(&t.ls, cfg), rc, out);
    SL_TRY_GOTO(setup_model(&t), rc, out);
    res->nparams = sl_lm_nparams(t.lm);
    SL_TRY_GOTO(setup_sync(&t), rc, out);
    SL_TRY_GOTO(sl_train_start_at(&t, res), rc, out);
    /* only now: a configuration the checkpoint refuses leaves the run's own */
    if (opts->rank == 0)
        SL_TRY_GOTO(sl_run_write_config(cfg, res->run_dir), rc, out);
    sl_run_best_read(res->dir, t.cur.step, &t.best);
    if (cfg->run.keep_best && !t.has_valid)
        sl_log_warn("train", "run.keep_best: there is no validation split, so no best model");
    SL_TRY_GOTO(join_path(path, res->dir, "metrics.jsonl"), rc, out);
    run.be = t.be;
    run.ls = &t.ls;
    run.sync = t.sync;
    run.comps = t.comps;
    run.ncomps = sl_lm_ncomponents(t.lm);
    run.total_steps = t.total_steps;
    run.batches_per_epoch = t.train_bt.batches_per_epoch;
    SL_TRY_GOTO(sl_report_open(&t.rep, &run, path, t.cur.step), rc, out);
    if (t.cur.step == 0)
        sl_log_info(
            "train", "%s: %zu parameters, vocab %d, %ld batches of %dx%d per epoch, %ld steps; %s",
            res->dir, res->nparams, t.id.vocab, t.train_bt.batches_per_epoch, cfg->train.batch,
            cfg->train.bptt, t.total_steps, t.be->ops->describe(t.be->ctx));

    rc = train_loop(&t, res);
    sl_report_break(&t.rep); /* whatever comes next starts on its own line */
    fill_result(&t, res);
    if (rc != SL_OK)
        goto out;
    SL_TRY_GOTO(finish(&t, res), rc, out);
out:
    if (t.lm)
        fill_result(&t, res);
    trainer_fini(&t);
    return rc;
}
