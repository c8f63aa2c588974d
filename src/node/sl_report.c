/* Reporting of a training run: the progress line, the metrics.jsonl records
 * (step, loss_scale, sync, eval) and summary.json, and the figures accumulated between
 * reports. Owns what those lines and files say; must not change the run (parameters,
 * sync, cursor, loss scale are only read) nor decide when to report (sl_train.c does). */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include "node/sl_report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_file.h"
#include "common/sl_log.h"
#include "transport/sl_transport.h"
#include "transport/sl_wire.h"

void
sl_report_init(sl_report_t *r, const sl_config_t *cfg, const sl_train_opts_t *opts)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->opts = opts;
    sl_log_utc_now(r->started_at, sizeof r->started_at);
    r->started_s = sl_clock_now();
    sl_progress_init(&r->progress, stderr, opts->quiet);
}

sl_status_t
sl_report_open(sl_report_t *r, const sl_report_run_t *run, const char *metrics_path,
               long keep_through_step)
{
    r->run = *run;
    SL_TRY(sl_metrics_open(&r->metrics, metrics_path, keep_through_step));
    r->metrics_open = 1;
    return SL_OK;
}

void
sl_report_fini(sl_report_t *r)
{
    if (r->metrics_open)
        sl_metrics_close(&r->metrics);
    r->metrics_open = 0;
}

void
sl_report_step(sl_report_t *r, double loss, int applied, double norm, double step_s)
{
    r->acc_loss += loss;
    if (applied) {
        r->acc_norm += norm;
        r->acc_applied++;
    } else {
        r->acc_skipped++;
    }
    r->acc_time += step_s;
    r->acc_steps++;
    r->session_time += step_s;
    r->session_steps++;
}

void
sl_report_sync_time(sl_report_t *r, double wall_s, double sync_s)
{
    r->acc_time += wall_s;
    r->session_time += wall_s;
    r->acc_sync += sync_s;
}

void
sl_report_break(sl_report_t *r)
{
    sl_progress_break(&r->progress);
}

static sl_status_t
flush_metrics(sl_report_t *r)
{
    FILE *f = r->metrics.fp;

    if (fflush(f) != 0 || ferror(f))
        return sl_err_set(SL_ERR_IO, "%s: cannot write: %s", r->metrics.path, strerror(errno));
    return SL_OK;
}

/* {"event":"sync", ...} lines into metrics.jsonl: per component (cumulative counts, the
 * last consensus distance, rows and bytes by encoding of the sparse exchange), or for
 * allreduce one line for the gradients, all the bytes (and one per row shard exchanged by
 * rows, its rows). */
static sl_status_t
report_sync(sl_report_t *r, long step)
{
    FILE *f = r->metrics.fp;
    const sl_sync_t *sync = r->run.sync;
    sl_sync_algorithm_t a = sl_sync_algorithm(sync);
    int nc = r->run.ncomps;

    if (a == SL_SYNC_NONE)
        return SL_OK;
    for (int c = 0; c < (a == SL_SYNC_ALLREDUCE ? nc + 1 : nc); c++) {
        sl_sync_stat_t g;
        const sl_sync_stat_t *st = &g;
        int grads = a == SL_SYNC_ALLREDUCE && c == nc;

        if (a == SL_SYNC_ALLREDUCE && !grads && sl_sync_stat(sync, c)->rounds == 0)
            continue; /* allreduce: row shards by rows have lines of their own (their rows) */
        if (grads) {
            sl_transport_stat_t ts;
            memset(&g, 0, sizeof g);
            /* the whole gradient, or the row shards and the rest together (their
             * row counts and rows gathered, the values summed) */
            for (int kind = 0; kind < 2; kind++) {
                sl_transport_stat(r->opts->transport, kind ? SL_WIRE_ALLGATHER : SL_WIRE_ALLREDUCE,
                                  (uint32_t)nc, &ts);
                g.sent_bytes += ts.sent_bytes;
                g.recv_bytes += ts.recv_bytes;
            }
            g.rounds = step;
            g.time_s = sl_sync_time_s(sync);
            g.distance = NAN;
        } else {
            st = sl_sync_stat(sync, c);
        }
        fprintf(f, "{\"event\":\"sync\",\"step\":%ld,\"algorithm\":", step);
        sl_json_string(f, sl_sync_algorithm_name(a));
        fputs(",\"component\":", f);
        sl_json_string(f, grads ? "gradients" : r->run.comps[c].name);
        fprintf(f, ",\"rounds\":%ld,\"time_s\":", st->rounds);
        sl_json_number(f, st->time_s);
        fprintf(f,
                ",\"sent_bytes\":%" PRIu64 ",\"recv_bytes\":%" PRIu64 ",\"answered\":%" PRIu64
                ",\"expected\":%" PRIu64 ",\"distance\":",
                st->sent_bytes, st->recv_bytes, st->answered, st->expected);
        sl_json_number(f, st->distance);
        fprintf(f,
                ",\"rows_own\":%" PRIu64 ",\"rows_merged\":%" PRIu64 ",\"sent_fp32\":%" PRIu64
                ",\"sent_fp16\":%" PRIu64 ",\"sent_bf16\":%" PRIu64 ",\"sent_ids\":%" PRIu64
                ",\"sent_int8\":%" PRIu64 ",\"sent_int4\":%" PRIu64,
                st->rows_own, st->rows_merged, st->sent_enc_bytes[SL_WIRE_FP32],
                st->sent_enc_bytes[SL_WIRE_FP16], st->sent_enc_bytes[SL_WIRE_BF16],
                st->sent_enc_bytes[SL_WIRE_BYTES], st->sent_enc_bytes[SL_WIRE_INT8],
                st->sent_enc_bytes[SL_WIRE_INT4]);
        fprintf(f, ",\"dead_peers\":%d", sl_sync_ndead(sync));
        sl_json_wall_time(f);
        fputs("}\n", f);
    }
    return flush_metrics(r);
}

/* fp16: {"event":"loss_scale","step","scale","skipped"} into metrics.jsonl (the scale
 * after the step, steps skipped since the last report), and a log line when any was. */
static sl_status_t
report_loss_scale(sl_report_t *r, long step)
{
    FILE *f = r->metrics.fp;
    const sl_loss_scale_t *ls = r->run.ls;

    if (!ls->enabled)
        return SL_OK;
    if (r->acc_skipped > 0) {
        sl_progress_break(&r->progress);
        sl_log_info("train",
                    "steps %ld-%ld: %ld of %ld skipped (fp16 gradients overflowed); loss "
                    "scale now %g",
                    step - r->acc_steps + 1, step, r->acc_skipped, r->acc_steps, (double)ls->scale);
    }
    fprintf(f, "{\"event\":\"loss_scale\",\"step\":%ld,\"scale\":", step);
    sl_json_number(f, ls->scale);
    fprintf(f, ",\"skipped\":%ld", r->acc_skipped);
    sl_json_wall_time(f);
    fputs("}\n", f);
    return flush_metrics(r);
}

sl_status_t
sl_report_emit(sl_report_t *r, const sl_ckpt_cursor_t *cur, double lr, double *mean_loss)
{
    long bpe = r->run.batches_per_epoch, last = cur->step - 1;
    uint64_t tokens = (uint64_t)r->acc_steps * r->cfg->train.batch * r->cfg->train.bptt;
    double rate = r->acc_time > 0 ? (double)tokens / r->acc_time : 0;
    sl_progress_line_t line;
    sl_metrics_step_t m;

    line.step = cur->step;
    line.total_steps = r->run.total_steps;
    line.epoch = (int)(last / bpe) + 1;
    line.epoch_pct = 100.0 * (double)(last % bpe + 1) / (double)bpe;
    line.tokens_per_s = rate;
    line.loss = r->acc_loss / (double)r->acc_steps;
    line.char_level = r->cfg->data.level == SL_LEVEL_CHAR;
    line.lr = lr;
    line.eta_s = r->session_steps > 0 ? (double)(r->run.total_steps - cur->step) * r->session_time /
                                            (double)r->session_steps
                                      : -1;
    line.sync_pct = r->acc_time > 0 ? 100.0 * r->acc_sync / r->acc_time : 0;
    SL_TRY(report_loss_scale(r, cur->step));
    sl_progress_show(&r->progress, &line);
    if (r->opts->on_report)
        r->opts->on_report(r->opts->hook_ctx, &line);

    m.step = cur->step;
    m.epoch = line.epoch;
    m.epoch_frac = (double)cur->step / (double)bpe;
    m.tokens = cur->tokens;
    m.tokens_per_s = rate;
    m.loss = line.loss;
    m.lr = lr;
    m.grad_norm = r->acc_applied > 0 ? r->acc_norm / (double)r->acc_applied : NAN;
    m.time_s = cur->train_time_s;
    *mean_loss = line.loss;
    r->acc_loss = r->acc_norm = r->acc_time = r->acc_sync = 0;
    r->acc_steps = r->acc_applied = r->acc_skipped = 0;
    SL_TRY(sl_metrics_step(&r->metrics, &m));
    return report_sync(r, cur->step);
}

/* "ppl 412.17" or "bpc 1.592" of a loss, as the log lines give it. */
static void
quality(const sl_report_t *r, double loss, const char **what, int *digits, double *value)
{
    int chars = r->cfg->data.level == SL_LEVEL_CHAR;

    *what = chars ? "bpc" : "ppl";
    *digits = chars ? 3 : 2;
    *value = chars ? loss / log(2.0) : exp(loss);
}

sl_status_t
sl_report_eval(sl_report_t *r, long step, const char *split, double loss, long tokens)
{
    const char *what;
    int digits;
    double value;

    quality(r, loss, &what, &digits, &value);
    sl_progress_break(&r->progress);
    sl_log_info("train", "step %ld: %s %s %.*f (loss %.4f, %ld tokens)", step, split, what, digits,
                value, loss, tokens);
    return sl_metrics_eval(&r->metrics, split, step, loss);
}

sl_status_t
sl_report_membership(sl_report_t *r, sl_sync_t *sync, long step)
{
    sl_members_event_t ev;

    while (sl_sync_next_membership(sync, &ev)) {
        sl_progress_break(&r->progress);
        if (ev.joined)
            sl_log_info("train", "step %ld: node %d joined the run (%s): %d nodes", step, ev.rank,
                        ev.why, ev.members);
        else
            sl_log_warn("train", "step %ld: node %d left the run (%s): %d nodes go on", step,
                        ev.rank, ev.why, ev.members);
        SL_TRY(sl_metrics_membership(&r->metrics, step, ev.rank, ev.members, ev.epoch, ev.joined,
                                     ev.why));
    }
    return SL_OK;
}

sl_status_t
sl_report_final_eval(sl_report_t *r, long step, int nmodels, const char *split, double loss)
{
    char key[32];
    const char *what;
    int digits;
    double value;

    quality(r, loss, &what, &digits, &value);
    sl_log_info("train", "final model (average of %d nodes): %s %s %.*f (loss %.4f)", nmodels,
                split, what, digits, value, loss);
    snprintf(key, sizeof key, "final_%s", split);
    return sl_metrics_eval(&r->metrics, key, step, loss);
}

sl_wire_report_t
sl_report_wire(const sl_report_t *r, size_t nparams)
{
    sl_wire_report_t w = {r->opts->transport,
                          sl_sync_algorithm(r->run.sync),
                          r->run.comps,
                          r->run.ncomps,
                          nparams,
                          r->opts->nranks,
                          r->session_steps};
    return w;
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

sl_status_t
sl_report_summary(const sl_report_t *r, const sl_train_result_t *res, const char *dir, int nmodels)
{
    const sl_config_t *cfg = r->cfg;
    const sl_backend_t *be = r->run.be;
    const sl_loss_scale_t *ls = r->run.ls;
    char path[SL_TRAIN_PATH_MAX];
    long threads = cfg->run.threads > 0 ? cfg->run.threads : sysconf(_SC_NPROCESSORS_ONLN);
    int n = snprintf(path, sizeof path, "%s/summary.json", dir);
    sl_wire_report_t wire;
    sl_atomic_file_t f;
    char now[32];
    FILE *o;

    if (n < 0 || n >= (int)sizeof path)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s/summary.json)", dir);
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
    sl_json_string(o, be->ops->describe(be->ctx));
    json_key(o, "device", 0);
    sl_json_string(o, be->name);
    json_key(o, "precision", 0);
    sl_json_string(o, cfg->precision);
    json_key(o, "loss_scale", 0);
    sl_json_number(o, ls->enabled ? ls->scale : NAN);
    json_key(o, "skipped_steps", 0);
    fprintf(o, "%ld", ls->skipped);
    json_key(o, "level", 0);
    sl_json_string(o, sl_level_name(cfg->data.level));
    json_key(o, "params", 0);
    fprintf(o, "%zu", res->nparams);
    json_key(o, "nodes", 0);
    fprintf(o, "%d", r->opts->nranks);
    json_key(o, "rank", 0);
    fprintf(o, "%d", r->opts->rank);
    json_key(o, "sync", 0);
    sl_json_string(o, sl_sync_algorithm_name(sl_sync_algorithm(r->run.sync)));
    json_key(o, "sync_time_s", 0);
    sl_json_number(o, sl_sync_time_s(r->run.sync));
    json_key(o, "models_averaged", 0);
    fprintf(o, "%d", nmodels);
    json_key(o, "version", 0);
    sl_json_string(o, PACKAGE_VERSION);
    json_key(o, "started_at", 0);
    sl_json_string(o, r->started_at);
    json_key(o, "finished_at", 0);
    sl_json_string(o, sl_log_utc_now(now, sizeof now));
    json_key(o, "wall_time_s", 0);
    sl_json_number(o, sl_clock_now() - r->started_s);
    wire = sl_report_wire(r, res->nparams);
    sl_wire_report_json(o, &wire);
    fputs("\n}\n", o);
    return sl_atomic_commit(&f);
}

sl_status_t
sl_report_summary_run_rate(const char *dir, int nodes, int reported, double tokens_per_s)
{
    char path[SL_TRAIN_PATH_MAX], *text, *end;
    size_t len;
    sl_atomic_file_t f;
    int n = snprintf(path, sizeof path, "%s/summary.json", dir);

    if (n < 0 || n >= (int)sizeof path)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s/summary.json)", dir);
    SL_TRY(sl_file_read_all(path, &text, &len));
    end = len >= 3 ? text + len - 3 : NULL;
    if (!end || strcmp(end, "\n}\n") != 0) {
        free(text);
        return sl_err_set(SL_ERR_FORMAT, "%s: not a summary written by this shoal", path);
    }
    if (sl_atomic_open(&f, path) != SL_OK) {
        free(text);
        return SL_ERR_IO;
    }
    /* every byte before the end, a NUL too: fputs would stop there and lose the rest */
    fwrite(text, 1, (size_t)(end - text), f.fp);
    free(text);
    json_key(f.fp, "run_tokens_per_s", 0);
    sl_json_number(f.fp, tokens_per_s);
    json_key(f.fp, "run_nodes", 0);
    fprintf(f.fp, "%d", nodes);
    json_key(f.fp, "run_nodes_reported", 0);
    fprintf(f.fp, "%d", reported);
    fputs("\n}\n", f.fp);
    return sl_atomic_commit(&f);
}
