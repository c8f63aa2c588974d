/* Single-node training: set-up, the step loop with reports, checkpoints and epoch-end
 * evaluation, resume from a checkpoint, the final model and summary. */
#define _POSIX_C_SOURCE 200809L
#include "sl_train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sl_alloc.h"
#include "sl_backend.h"
#include "sl_checkpoint.h"
#include "sl_clock.h"
#include "sl_data.h"
#include "sl_file.h"
#include "sl_log.h"
#include "sl_metrics.h"
#include "sl_model.h"
#include "sl_optim.h"
#include "sl_progress.h"
#include "sl_rng.h"
#include "sl_seed_groups.h"
#include "sl_sync.h"

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
    sl_ckpt_cursor_t cur;
    long total_steps;
    long saved_step; /* step of the last checkpoint written or loaded; -1: none */
    long valid_step; /* step the last valid evaluation was made at; -1: none */
    sl_metrics_t metrics;
    int metrics_open;
    sl_progress_t progress;
    sl_component_t *comps; /* (ncomponents) copies of the model's, lent to sync */
    int seed_group;        /* this node's sampled-softmax seed group */
    sl_sync_t *sync;
    /* since the last report (acc_time includes acc_sync, the time in sync) */
    double acc_loss, acc_norm, acc_time, acc_sync;
    long acc_steps;
    /* this process only, for the ETA */
    double session_time;
    long session_steps;
} trainer_t;

void
sl_train_opts_init(sl_train_opts_t *o)
{
    o->rank = 0;
    o->nranks = 1;
    o->resume = 1;
    o->quiet = 0;
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

static sl_status_t
write_config(const sl_config_t *cfg, const char *path)
{
    sl_atomic_file_t f;
    sl_status_t rc;

    SL_TRY(sl_atomic_open(&f, path));
    rc = sl_config_write_yaml(cfg, f.fp);
    if (rc != SL_OK) {
        sl_atomic_abort(&f);
        return rc;
    }
    return sl_atomic_commit(&f);
}

/* The run directory, this node's directory and the paths inside; writes config.yaml
 * (rank 0). */
static sl_status_t
setup_run_dir(const sl_config_t *cfg, const sl_train_opts_t *opts, sl_train_result_t *res)
{
    char name[SL_TRAIN_PATH_MAX], path[SL_TRAIN_PATH_MAX];

    if (cfg->run.dir && cfg->run.dir[0]) {
        SL_TRY(join_path(res->run_dir, cfg->run.dir, ""));
    } else {
        SL_TRY(join_path(name, "runs", cfg->run.name));
        SL_TRY(join_path(res->run_dir, name, ""));
    }
    if (opts->nranks > 1) {
        snprintf(name, sizeof name, "node-%d", opts->rank);
        SL_TRY(join_path(res->dir, res->run_dir, name));
    } else {
        SL_TRY(join_path(res->dir, res->run_dir, ""));
    }
    SL_TRY(join_path(res->checkpoint, res->dir, "checkpoint.bin"));
    SL_TRY(join_path(res->model, res->dir, "model.bin"));
    SL_TRY(sl_file_mkdirs(res->dir));
    if (opts->rank != 0)
        return SL_OK;
    SL_TRY(join_path(path, res->run_dir, "config.yaml"));
    return write_config(cfg, path);
}

static sl_status_t
open_backend(const sl_config_t *cfg, sl_backend_t **be)
{
    SL_TRY(sl_backend_new(be, cfg->device, cfg->run.threads));
    if (strcmp(cfg->precision, "fp32") != 0 && strncmp((*be)->name, "cpu", 3) == 0)
        return sl_err_set(SL_ERR_UNSUPPORTED, "precision %s needs the CUDA backend (device: cuda)",
                          cfg->precision);
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

    SL_TRY(sl_corpus_load(&t->corpus, cfg));
    t->corpus_loaded = 1;
    if (sl_batcher_init(&t->train_bt, &t->corpus.train, t->opts->rank, t->opts->nranks, b, bptt) !=
        SL_OK)
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
    sl_ckpt_ident_init(&t->id, cfg, vocab, t->corpus.hash);

    t->total_steps = (long)cfg->train.epochs * t->train_bt.batches_per_epoch;
    if (cfg->train.max_steps > 0 && cfg->train.max_steps < t->total_steps)
        t->total_steps = cfg->train.max_steps;
    return SL_OK;
}

static sl_status_t
maybe_resume(trainer_t *t, const sl_train_result_t *res)
{
    long bpe = t->train_bt.batches_per_epoch;

    if (!t->opts->resume || access(res->checkpoint, F_OK) != 0)
        return SL_OK;
    SL_TRY(sl_checkpoint_load(res->checkpoint, &t->id, t->be, t->lm, t->opt, t->st, &t->cur));
    if (t->cur.batch_index >= bpe)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: data cursor at batch %ld of an epoch of %ld batches (was it "
                          "written with another number of nodes?)",
                          res->checkpoint, t->cur.batch_index, bpe);
    t->saved_step = t->cur.step;
    sl_log_info("train", "resuming from step %ld of %ld (epoch %d, batch %ld of %ld)", t->cur.step,
                t->total_steps, t->cur.epoch + 1, t->cur.batch_index, bpe);
    if (t->cur.step >= t->total_steps)
        sl_log_info("train", "the checkpoint is at the end of the run: nothing left to train");
    return SL_OK;
}

/* The sync algorithm over the model's components, from the (resumed) parameters. */
static sl_status_t
setup_sync(trainer_t *t)
{
    int nc = sl_lm_ncomponents(t->lm);

    if (t->opts->nranks > 1 && t->cfg->sync.algorithm != SL_SYNC_NONE &&
        strncmp(t->be->name, "cpu", 3) != 0)
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "sync.algorithm %s reads the parameters in host memory: it needs "
                          "device cpu",
                          sl_sync_algorithm_name(t->cfg->sync.algorithm));
    SL_TRY(SL_ALLOC(&t->comps, (size_t)nc, "components"));
    for (int i = 0; i < nc; i++)
        t->comps[i] = *sl_lm_component(t->lm, i);
    return sl_sync_new(&t->sync, t->cfg, t->opts->transport, t->opts->rank, t->opts->nranks,
                       t->comps, nc, sl_lm_params(t->lm), sl_lm_nparams(t->lm));
}

static sl_status_t
save_checkpoint(trainer_t *t, const sl_train_result_t *res)
{
    if (t->saved_step == t->cur.step)
        return SL_OK;
    SL_TRY(sl_checkpoint_save(res->checkpoint, &t->id, &t->cur, t->be, t->lm, t->opt, t->st));
    t->saved_step = t->cur.step;
    sl_log_debug("train", "checkpoint at step %ld: %s", t->cur.step, res->checkpoint);
    return SL_OK;
}

/* {"event":"sync", ...} lines into metrics.jsonl: per component (cumulative counts, the
 * last consensus distance, rows and bytes by encoding of the sparse exchange), or for
 * allreduce one line for the gradients (and one per row shard exchanged by rows). */
static sl_status_t
report_sync(trainer_t *t)
{
    FILE *f = t->metrics.fp;
    sl_sync_algorithm_t a = sl_sync_algorithm(t->sync);
    int nc = sl_lm_ncomponents(t->lm);

    if (a == SL_SYNC_NONE)
        return SL_OK;
    for (int c = 0; c < (a == SL_SYNC_ALLREDUCE ? nc + 1 : nc); c++) {
        sl_sync_stat_t g;
        const sl_sync_stat_t *st = &g;
        int grads = a == SL_SYNC_ALLREDUCE && c == nc;

        if (a == SL_SYNC_ALLREDUCE && !grads && sl_sync_stat(t->sync, c)->rounds == 0)
            continue; /* allreduce: row shards by rows have lines of their own */
        if (grads) {
            sl_transport_stat_t ts;
            sl_transport_stat(t->opts->transport, SL_WIRE_ALLREDUCE, (uint32_t)nc, &ts);
            memset(&g, 0, sizeof g);
            g.rounds = t->cur.step;
            g.time_s = sl_sync_time_s(t->sync);
            g.sent_bytes = ts.sent_bytes;
            g.recv_bytes = ts.recv_bytes;
            g.distance = NAN;
        } else {
            st = sl_sync_stat(t->sync, c);
        }
        fprintf(f, "{\"event\":\"sync\",\"step\":%ld,\"algorithm\":", t->cur.step);
        sl_json_string(f, sl_sync_algorithm_name(a));
        fputs(",\"component\":", f);
        sl_json_string(f, grads ? "gradients" : t->comps[c].name);
        fprintf(f, ",\"rounds\":%ld,\"time_s\":", st->rounds);
        sl_json_number(f, st->time_s);
        fprintf(f,
                ",\"sent_bytes\":%" PRIu64 ",\"recv_bytes\":%" PRIu64 ",\"answered\":%" PRIu64
                ",\"expected\":%" PRIu64 ",\"distance\":",
                st->sent_bytes, st->recv_bytes, st->answered, st->expected);
        sl_json_number(f, st->distance);
        fprintf(f,
                ",\"rows_own\":%" PRIu64 ",\"rows_merged\":%" PRIu64 ",\"sent_fp32\":%" PRIu64
                ",\"sent_fp16\":%" PRIu64 ",\"sent_bf16\":%" PRIu64 ",\"sent_ids\":%" PRIu64,
                st->rows_own, st->rows_merged, st->sent_enc_bytes[SL_WIRE_FP32],
                st->sent_enc_bytes[SL_WIRE_FP16], st->sent_enc_bytes[SL_WIRE_BF16],
                st->sent_enc_bytes[SL_WIRE_BYTES]);
        fprintf(f, ",\"dead_peers\":%d}\n", sl_sync_ndead(t->sync));
    }
    if (fflush(f) != 0 || ferror(f))
        return sl_err_set(SL_ERR_IO, "%s: cannot write: %s", t->metrics.path, strerror(errno));
    return SL_OK;
}

/* Progress line and metrics line over the steps since the last report. */
static sl_status_t
report(trainer_t *t, double lr, sl_train_result_t *res)
{
    long bpe = t->train_bt.batches_per_epoch, last = t->cur.step - 1;
    uint64_t tokens = (uint64_t)t->acc_steps * t->cfg->train.batch * t->cfg->train.bptt;
    double rate = t->acc_time > 0 ? (double)tokens / t->acc_time : 0;
    sl_progress_line_t line;
    sl_metrics_step_t m;

    line.step = t->cur.step;
    line.total_steps = t->total_steps;
    line.epoch = (int)(last / bpe) + 1;
    line.epoch_pct = 100.0 * (double)(last % bpe + 1) / (double)bpe;
    line.tokens_per_s = rate;
    line.loss = t->acc_loss / (double)t->acc_steps;
    line.char_level = t->cfg->data.level == SL_LEVEL_CHAR;
    line.lr = lr;
    line.eta_s = t->session_steps > 0 ? (double)(t->total_steps - t->cur.step) * t->session_time /
                                            (double)t->session_steps
                                      : -1;
    line.sync_pct = t->acc_time > 0 ? 100.0 * t->acc_sync / t->acc_time : 0;
    sl_progress_show(&t->progress, &line);
    if (t->opts->on_report)
        t->opts->on_report(t->opts->hook_ctx, &line);

    m.step = t->cur.step;
    m.epoch = line.epoch;
    m.epoch_frac = (double)t->cur.step / (double)bpe;
    m.tokens = t->cur.tokens;
    m.tokens_per_s = rate;
    m.loss = line.loss;
    m.lr = lr;
    m.grad_norm = t->acc_norm / (double)t->acc_steps;
    m.time_s = t->cur.train_time_s;
    res->final_train_loss = line.loss;
    t->acc_loss = t->acc_norm = t->acc_time = t->acc_sync = 0;
    t->acc_steps = 0;
    SL_TRY(sl_metrics_step(&t->metrics, &m));
    return report_sync(t);
}

static sl_status_t
eval_split(trainer_t *t, const sl_batcher_t *bt, const char *split, double *loss)
{
    long tokens;
    const char *what = t->cfg->data.level == SL_LEVEL_CHAR ? "bpc" : "ppl";

    SL_TRY(evaluate(t->lm, t->est, bt, t->x, t->y, t->opts, loss, &tokens));
    sl_progress_break(&t->progress);
    sl_log_info("train", "step %ld: %s %s %.*f (loss %.4f, %ld tokens)", t->cur.step, split, what,
                t->cfg->data.level == SL_LEVEL_CHAR ? 3 : 2,
                t->cfg->data.level == SL_LEVEL_CHAR ? *loss / log(2.0) : exp(*loss), *loss, tokens);
    return sl_metrics_eval(&t->metrics, split, t->cur.step, *loss);
}

/* One optimizer step on the next batch; advances the cursor; then the model sync of the
 * step, if any. An error in that sync leaves a complete step (cursor advanced) behind,
 * so a checkpoint can still be taken. */
static sl_status_t
train_step(trainer_t *t, double *lr, double *loss)
{
    const sl_config_t *cfg = t->cfg;
    uint64_t dk[3] = {cfg->run.seed, 'D', (uint64_t)t->cur.step};
    sl_step_keys_t keys;
    size_t n = sl_lm_nparams(t->lm);
    double loss_sum, norm, t0 = sl_clock_now(), dt, s0 = sl_sync_time_s(t->sync);
    sl_status_t st;

    if (t->cur.batch_index == 0)
        sl_lm_state_reset(t->st);
    sl_batcher_get(&t->train_bt, t->cur.batch_index, t->x, t->y);
    keys.dropout_key = sl_hash_u64s(dk, 3);
    keys.sample_key = sl_seed_group_sample_key(cfg->run.seed, t->cur.step, t->seed_group);
    SL_TRY(sl_lm_train_step(t->lm, t->st, t->x, t->y, cfg->train.bptt, &keys, &loss_sum));
    SL_TRY(sl_sync_note_model(t->sync, t->lm));
    SL_TRY(sl_sync_gradients(t->sync, sl_lm_grads(t->lm), t->cur.step));
    norm = sl_clip_global_norm(t->be, sl_lm_grads(t->lm), n, cfg->train.optimizer.clip);
    *lr = sl_lr_at(cfg, t->cur.step, t->cur.epoch, t->total_steps);
    sl_optim_step(t->opt, sl_lm_params(t->lm), sl_lm_grads(t->lm), *lr);
    SL_TRY(t->be->ops->sync(t->be->ctx));
    dt = sl_clock_now() - t0;

    *loss = loss_sum / ((double)cfg->train.batch * cfg->train.bptt);
    t->cur.train_time_s += dt;
    t->cur.step++;
    t->cur.tokens += (uint64_t)cfg->train.batch * cfg->train.bptt;
    if (++t->cur.batch_index == t->train_bt.batches_per_epoch) {
        t->cur.batch_index = 0;
        t->cur.epoch++;
    }
    t->acc_loss += *loss;
    t->acc_norm += norm;
    t->acc_time += dt;
    t->acc_steps++;
    t->session_time += dt;
    t->session_steps++;

    t0 = sl_clock_now();
    st = sl_sync_after_step(t->sync, sl_lm_params(t->lm), t->cur.step);
    dt = sl_clock_now() - t0;
    t->cur.train_time_s += dt;
    t->acc_time += dt;
    t->session_time += dt;
    t->acc_sync += sl_sync_time_s(t->sync) - s0;
    return st;
}

/* The poll hook's verdict after a step; its message is kept in msg, since the report
 * and checkpoint that follow may overwrite the thread's message. */
static sl_status_t
poll_hook(const trainer_t *t, char *msg, size_t size)
{
    sl_status_t st;

    if (!t->opts->poll || (st = t->opts->poll(t->opts->hook_ctx)) == SL_OK)
        return SL_OK;
    snprintf(msg, size, "%s", sl_err_msg());
    return st;
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
                SL_TRY(save_checkpoint(t, res));
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
        epoch_end = t->cur.batch_index == 0;
        stop = interrupted(t->opts);
        if (!stop)
            stop = (polled = poll_hook(t, why, sizeof why)) != SL_OK;
        if ((cfg->run.log_every > 0 && t->cur.step % cfg->run.log_every == 0) ||
            t->cur.step == t->total_steps || stop)
            SL_TRY(report(t, lr, res));
        if ((cfg->run.checkpoint_every > 0 && t->cur.step % cfg->run.checkpoint_every == 0) ||
            epoch_end || t->cur.step == t->total_steps || stop)
            SL_TRY(save_checkpoint(t, res));
        if (polled != SL_OK)
            return sl_err_set(polled, "%s", why);
        if (stop)
            return sl_err_set(SL_ERR_SHUTDOWN, "interrupted at step %ld", t->cur.step);
        if (epoch_end && cfg->train.eval_every_epoch && t->has_valid) {
            SL_TRY(eval_split(t, &t->valid_bt, "valid", &vloss));
            t->valid_step = t->cur.step;
            res->has_valid = 1;
            res->valid_loss = vloss;
        }
    }
    return SL_OK;
}

static long
peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

static void
json_key(FILE *f, const char *key, int first)
{
    fprintf(f, "%s\n  \"%s\": ", first ? "{" : ",", key);
}

static void
json_split(FILE *f, const char *split, int has, double loss)
{
    char key[32];

    snprintf(key, sizeof key, "%s_loss", split);
    json_key(f, key, 0);
    sl_json_number(f, has ? loss : NAN);
    snprintf(key, sizeof key, "%s_ppl", split);
    json_key(f, key, 0);
    sl_json_number(f, has ? exp(loss) : NAN);
    snprintf(key, sizeof key, "%s_bpc", split);
    json_key(f, key, 0);
    sl_json_number(f, has ? loss / log(2.0) : NAN);
}

/* summary.json in dir: one object the benchmark scripts parse; absent values are null.
 * nmodels: how many nodes' models the evaluated one averages (1: this node's own). */
static sl_status_t
write_summary(const trainer_t *t, const sl_train_result_t *res, const char *dir, int nmodels)
{
    char path[SL_TRAIN_PATH_MAX];
    long threads = t->cfg->run.threads > 0 ? t->cfg->run.threads : sysconf(_SC_NPROCESSORS_ONLN);
    sl_atomic_file_t f;
    FILE *o;

    SL_TRY(join_path(path, dir, "summary.json"));
    SL_TRY(sl_atomic_open(&f, path));
    o = f.fp;
    json_key(o, "steps", 1);
    fprintf(o, "%ld", res->steps);
    json_key(o, "epochs", 0);
    sl_json_number(o, res->epochs);
    json_key(o, "train_tokens", 0);
    fprintf(o, "%" PRIu64, res->tokens);
    json_key(o, "train_time_s", 0);
    sl_json_number(o, res->train_time_s);
    json_key(o, "tokens_per_s", 0);
    sl_json_number(o, res->tokens_per_s);
    json_key(o, "final_train_loss", 0);
    sl_json_number(o, res->final_train_loss);
    json_split(o, "valid", res->has_valid, res->valid_loss);
    json_split(o, "test", res->has_test, res->test_loss);
    json_key(o, "peak_rss_kb", 0);
    fprintf(o, "%ld", peak_rss_kb());
    json_key(o, "threads", 0);
    fprintf(o, "%ld", threads);
    json_key(o, "backend", 0);
    sl_json_string(o, t->be->ops->describe(t->be->ctx));
    json_key(o, "level", 0);
    sl_json_string(o, sl_level_name(t->cfg->data.level));
    json_key(o, "params", 0);
    fprintf(o, "%zu", res->nparams);
    json_key(o, "nodes", 0);
    fprintf(o, "%d", t->opts->nranks);
    json_key(o, "rank", 0);
    fprintf(o, "%d", t->opts->rank);
    json_key(o, "sync", 0);
    sl_json_string(o, sl_sync_algorithm_name(sl_sync_algorithm(t->sync)));
    json_key(o, "sync_time_s", 0);
    sl_json_number(o, sl_sync_time_s(t->sync));
    json_key(o, "models_averaged", 0);
    fprintf(o, "%d", nmodels);
    fputs("\n}\n", o);
    return sl_atomic_commit(&f);
}

/* With a sync algorithm, on rank 0: the average of the nodes' models (avg) evaluated,
 * saved as <run dir>/model.bin, and <run dir>/summary.json. Overwrites the parameters. */
static sl_status_t
finish_run_model(trainer_t *t, sl_train_result_t *res, const float *avg, int nmodels)
{
    sl_train_result_t run = *res;
    char path[SL_TRAIN_PATH_MAX];
    const char *what = t->cfg->data.level == SL_LEVEL_CHAR ? "bpc" : "ppl";
    const sl_batcher_t *bt[2] = {&t->valid_bt, &t->test_bt};
    const char *split[2] = {"valid", "test"};
    int has[2] = {t->has_valid, t->has_test};
    double *loss[2] = {&run.valid_loss, &run.test_loss};

    memcpy(sl_lm_params(t->lm), avg, sl_lm_nparams(t->lm) * sizeof *avg);
    for (int i = 0; i < 2; i++) {
        char key[32];
        long tokens;
        if (!has[i])
            continue;
        SL_TRY(evaluate(t->lm, t->est, bt[i], t->x, t->y, t->opts, loss[i], &tokens));
        sl_log_info("train", "final model (average of %d nodes): %s %s %.*f (loss %.4f)", nmodels,
                    split[i], what, t->cfg->data.level == SL_LEVEL_CHAR ? 3 : 2,
                    t->cfg->data.level == SL_LEVEL_CHAR ? *loss[i] / log(2.0) : exp(*loss[i]),
                    *loss[i]);
        snprintf(key, sizeof key, "final_%s", split[i]);
        SL_TRY(sl_metrics_eval(&t->metrics, key, t->cur.step, *loss[i]));
    }
    run.has_valid = t->has_valid;
    run.has_test = t->has_test;
    res->final_models = nmodels;
    res->final_valid_loss = run.valid_loss;
    res->final_test_loss = run.test_loss;
    SL_TRY(join_path(path, res->run_dir, "model.bin"));
    SL_TRY(sl_checkpoint_save(path, &t->id, &t->cur, t->be, t->lm, NULL, NULL));
    sl_log_info("train", "final model: %s", path);
    return write_summary(t, &run, res->run_dir, nmodels);
}

/* End of the run: the final average (every node takes part), valid and test evaluation
 * of this node's model, its model.bin and summary.json; then rank 0's run-level files. */
static sl_status_t
finish(trainer_t *t, sl_train_result_t *res)
{
    double loss;
    const float *avg;
    int writer, nmodels;

    SL_TRY(sl_sync_final(t->sync, sl_lm_params(t->lm), &avg, &writer, &nmodels));
    if (t->has_valid && t->valid_step != t->cur.step) {
        SL_TRY(eval_split(t, &t->valid_bt, "valid", &loss));
        res->has_valid = 1;
        res->valid_loss = loss;
    }
    if (t->has_test) {
        SL_TRY(eval_split(t, &t->test_bt, "test", &loss));
        res->has_test = 1;
        res->test_loss = loss;
    }
    if (t->cfg->sync.keep_node_models || sl_sync_algorithm(t->sync) == SL_SYNC_NONE)
        SL_TRY(sl_checkpoint_save(res->model, &t->id, &t->cur, t->be, t->lm, NULL, NULL));
    SL_TRY(write_summary(t, res, res->dir, 1));
    if (writer && avg)
        return finish_run_model(t, res, avg, nmodels);
    if (t->opts->nranks > 1 && t->opts->rank == 0)
        return write_summary(t, res, res->run_dir, 1);
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
    if (t->metrics_open)
        sl_metrics_close(&t->metrics);
    sl_sync_destroy(&t->sync);
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
}

sl_status_t
sl_train_run(const sl_config_t *cfg, const sl_train_opts_t *opts, sl_train_result_t *res)
{
    trainer_t t;
    char path[SL_TRAIN_PATH_MAX];
    sl_status_t rc;

    memset(&t, 0, sizeof t);
    memset(res, 0, sizeof *res);
    t.cfg = cfg;
    t.opts = opts;
    t.saved_step = -1;
    t.valid_step = -1;
    res->level = cfg->data.level;
    res->final_train_loss = NAN;
    sl_progress_init(&t.progress, stderr, opts->quiet);

    SL_TRY_GOTO(setup_run_dir(cfg, opts, res), rc, out);
    SL_TRY_GOTO(open_backend(cfg, &t.be), rc, out);
    SL_TRY_GOTO(setup_model(&t), rc, out);
    res->nparams = sl_lm_nparams(t.lm);
    SL_TRY_GOTO(maybe_resume(&t, res), rc, out);
    SL_TRY_GOTO(setup_sync(&t), rc, out);
    SL_TRY_GOTO(join_path(path, res->dir, "metrics.jsonl"), rc, out);
    SL_TRY_GOTO(sl_metrics_open(&t.metrics, path, t.cur.step), rc, out);
    t.metrics_open = 1;
    if (t.cur.step == 0)
        sl_log_info(
            "train", "%s: %zu parameters, vocab %d, %ld batches of %dx%d per epoch, %ld steps; %s",
            res->dir, res->nparams, t.id.vocab, t.train_bt.batches_per_epoch, cfg->train.batch,
            cfg->train.bptt, t.total_steps, t.be->ops->describe(t.be->ctx));

    rc = train_loop(&t, res);
    sl_progress_break(&t.progress); /* whatever comes next starts on its own line */
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

sl_status_t
sl_eval_run(const sl_config_t *cfg, const char *path, const char *split, sl_eval_result_t *res)
{
    trainer_t t;
    sl_tokens_t *tokens;
    sl_batcher_t bt;
    sl_status_t rc;
    int has;

    memset(&t, 0, sizeof t);
    memset(res, 0, sizeof *res);
    res->level = cfg->data.level;
    res->loss = NAN;
    SL_TRY_GOTO(open_backend(cfg, &t.be), rc, out);
    SL_TRY_GOTO(sl_corpus_load(&t.corpus, cfg), rc, out);
    t.corpus_loaded = 1;
    tokens = strcmp(split, "test") == 0 ? &t.corpus.test : &t.corpus.valid;
    SL_TRY_GOTO(eval_batcher(&bt, tokens, split, cfg->train.bptt, &has), rc, out);
    if (!has) {
        rc =
            strcmp(split, "test") == 0
                ? sl_err_set(SL_ERR_CONFIG, "%s: no test split (data.test is not set)", cfg->source)
                : sl_err_set(SL_ERR_CONFIG,
                             "%s: no valid split (data.valid is not set and "
                             "data.valid_fraction is 0)",
                             cfg->source);
        goto out;
    }
    SL_TRY_GOTO(sl_lm_new(&t.lm, cfg, sl_vocab_size(t.corpus.vocab), 1, EVAL_BATCH, t.be), rc, out);
    SL_TRY_GOTO(sl_lm_state_new(t.lm, EVAL_BATCH, &t.est), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&t.x, (size_t)EVAL_BATCH * cfg->train.bptt, "batch inputs"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&t.y, (size_t)EVAL_BATCH * cfg->train.bptt, "batch targets"), rc, out);
    sl_ckpt_ident_init(&t.id, cfg, sl_vocab_size(t.corpus.vocab), t.corpus.hash);
    SL_TRY_GOTO(sl_checkpoint_load(path, &t.id, t.be, t.lm, NULL, NULL, NULL), rc, out);
    SL_TRY_GOTO(evaluate(t.lm, t.est, &bt, t.x, t.y, NULL, &res->loss, &res->tokens), rc, out);
out:
    trainer_fini(&t);
    return rc;
}
