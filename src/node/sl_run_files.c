/* Run-directory housekeeping: set aside a previous run's files, keep the last K
 * checkpoints, record the best validation model, choose the run's model, write the
 * run's config.yaml (sl_run_files.h). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_run_files.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_file.h"
#include "common/sl_log.h"
#include "config/sl_config_paths.h"
#include "node/sl_checkpoint.h"
#include "node/sl_metrics.h"

#define RUN_PATH_MAX 4096
#define KEPT_PREFIX "checkpoint-"
#define KEPT_SUFFIX ".bin"

/* The step of a kept checkpoint's name "checkpoint-<digits>.bin", else -1. */
static long
kept_step(const char *name)
{
    size_t np = strlen(KEPT_PREFIX), ns = strlen(KEPT_SUFFIX), len = strlen(name), digits;

    if (len <= np + ns || strncmp(name, KEPT_PREFIX, np) != 0 ||
        strcmp(name + len - ns, KEPT_SUFFIX) != 0)
        return -1;
    digits = strspn(name + np, "0123456789");
    if (digits != len - np - ns || digits > 15)
        return -1;
    return strtol(name + np, NULL, 10);
}

static int
is_run_result(const char *name)
{
    static const char *const names[] = {"model.bin",      "summary.json",   SL_RUN_BEST_MODEL,
                                        SL_RUN_BEST_JSON, "checkpoint.bin", "checkpoint.bin.prev",
                                        "metrics.jsonl"};

    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return kept_step(name) >= 0;
}

/* rm -r of what an earlier start over left in prev (files only: it holds no folders). */
static sl_status_t
empty_previous(const char *prev)
{
    char path[RUN_PATH_MAX];
    struct dirent *e;
    DIR *d = opendir(prev);

    if (!d)
        return errno == ENOENT
                   ? SL_OK
                   : sl_err_set(SL_ERR_IO, "%s: cannot open: %s", prev, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", prev, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) {
            sl_status_t st = sl_err_set(SL_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
            closedir(d);
            return st;
        }
    }
    closedir(d);
    return SL_OK;
}

sl_status_t
sl_run_set_aside(const char *dir)
{
    char prev[RUN_PATH_MAX], from[RUN_PATH_MAX], to[RUN_PATH_MAX], moved[1024] = "";
    struct dirent *e;
    DIR *d = opendir(dir);
    int n = 0;
    sl_status_t st = SL_OK;

    if (!d)
        return errno == ENOENT ? SL_OK
                               : sl_err_set(SL_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    if (snprintf(prev, sizeof prev, "%s/%s", dir, SL_RUN_PREVIOUS_DIR) >= (int)sizeof prev) {
        closedir(d);
        return sl_err_set(SL_ERR_IO, "%s: path too long", dir);
    }
    while (st == SL_OK && (e = readdir(d)) != NULL) {
        size_t used = strlen(moved);
        if (!is_run_result(e->d_name))
            continue;
        if (n == 0) {
            st = empty_previous(prev);
            if (st == SL_OK)
                st = sl_file_mkdirs(prev);
            if (st != SL_OK)
                break;
        }
        snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", prev, e->d_name);
        if (rename(from, to) != 0) {
            st = sl_err_set(SL_ERR_IO, "%s: cannot move it to %s: %s", from, prev, strerror(errno));
            break;
        }
        snprintf(moved + used, sizeof moved - used, "%s%s", n ? ", " : "", e->d_name);
        n++;
    }
    closedir(d);
    if (st == SL_OK && n > 0)
        sl_log_info("train", "%s: starting over: moved the previous run's %s to %s/", dir, moved,
                    prev);
    return st;
}

/* A copy of from as to, through an atomic write (where a hard link is refused). */
static sl_status_t
copy_file(const char *from, const char *to)
{
    sl_atomic_file_t f;
    char *data;
    size_t len;
    sl_status_t st;

    SL_TRY(sl_file_read_all(from, &data, &len));
    st = sl_atomic_open(&f, to);
    if (st == SL_OK && (st = sl_atomic_write(&f, data, len)) != SL_OK)
        sl_atomic_abort(&f);
    else if (st == SL_OK)
        st = sl_atomic_commit(&f);
    free(data);
    return st;
}

static int
cmp_long_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

sl_status_t
sl_run_keep_checkpoint(const char *checkpoint, long step, int keep)
{
    char dir[RUN_PATH_MAX], kept[RUN_PATH_MAX], path[RUN_PATH_MAX];
    const char *slash = strrchr(checkpoint, '/');
    long *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    DIR *d;
    sl_status_t st = SL_OK;

    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - checkpoint) : 1,
             slash ? checkpoint : ".");
    if (snprintf(kept, sizeof kept, "%s/" KEPT_PREFIX "%ld" KEPT_SUFFIX, dir, step) >=
        (int)sizeof kept)
        return sl_err_set(SL_ERR_IO, "%s: path too long", dir);
    if (unlink(kept) != 0 && errno != ENOENT) /* one of an earlier pass over this step */
        return sl_err_set(SL_ERR_IO, "%s: cannot remove: %s", kept, strerror(errno));
    if (link(checkpoint, kept) != 0)
        SL_TRY(copy_file(checkpoint, kept));

    /* only once the newer one is in place do the older ones go */
    if (!(d = opendir(dir)))
        return sl_err_set(SL_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        long s = kept_step(e->d_name);
        if (s < 0)
            continue;
        if (n == cap) {
            long *grown = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!grown) {
                st = sl_err_set(SL_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            steps = grown;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (st == SL_OK)
        qsort(steps, n, sizeof *steps, cmp_long_desc);
    for (size_t i = (size_t)keep; st == SL_OK && i < n; i++) {
        snprintf(path, sizeof path, "%s/" KEPT_PREFIX "%ld" KEPT_SUFFIX, dir, steps[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            st = sl_err_set(SL_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    free(steps);
    return st;
}

void
sl_run_best_read(const char *dir, long upto, sl_run_best_t *best)
{
    char path[RUN_PATH_MAX], *text = NULL;
    size_t len;
    double loss, step;

    best->loss = INFINITY;
    best->step = -1;
    snprintf(path, sizeof path, "%s/%s", dir, SL_RUN_BEST_JSON);
    if (sl_file_read_all(path, &text, &len) != SL_OK)
        return;
    /* (double)LONG_MAX is 2^63, no long: (long)step only below it */
    if (sl_json_number_at(text, "step", &step) && sl_json_number_at(text, "valid_loss", &loss) &&
        step >= 0 && step <= (double)upto && step < 0x1p63 && step == floor(step)) {
        best->loss = loss;
        best->step = (long)step;
    }
    free(text);
}

sl_status_t
sl_run_best_write(const char *dir, const sl_run_best_t *best, sl_level_t level)
{
    char path[RUN_PATH_MAX];
    sl_atomic_file_t f;

    snprintf(path, sizeof path, "%s/%s", dir, SL_RUN_BEST_JSON);
    SL_TRY(sl_atomic_open(&f, path));
    /* %.17g: the loss read back is the one compared with, bit for bit */
    fprintf(f.fp, "{\"step\": %ld, \"valid_loss\": %.17g, ", best->step, best->loss);
    if (level == SL_LEVEL_CHAR)
        fprintf(f.fp, "\"valid_bpc\": %.6f", best->loss / log(2.0));
    else
        fprintf(f.fp, "\"valid_ppl\": %.6f", exp(best->loss));
    fprintf(f.fp, ", \"model\": \"%s\"}\n", SL_RUN_BEST_MODEL);
    if (ferror(f.fp)) {
        sl_atomic_abort(&f);
        return sl_err_set(SL_ERR_IO, "%s: cannot write", path);
    }
    return sl_atomic_commit(&f);
}

typedef struct {
    const sl_run_model_t *mine;
    sl_run_model_t *there;
} offer_t;

/* Who holds the lock file fd, as it says (printable, one line), into who. */
static void
lock_holder(int fd, char *who, size_t size)
{
    ssize_t n = pread(fd, who, size - 1, 0);

    who[n > 0 ? n : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
    for (char *p = who; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
    if (!*who)
        snprintf(who, size, "which has not said who it is yet");
}

sl_status_t
sl_run_lock(const char *dir, int *fd)
{
    char path[RUN_PATH_MAX + 8], who[320], host[256] = "?", now[40];
    int f, state;

    *fd = -1;
    if (snprintf(path, sizeof path, "%s/%s", dir, SL_RUN_LOCK) >= (int)sizeof path)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s)", dir);
    SL_TRY(sl_file_lock_try(path, &f, &state));
    if (state < 0) { /* no locks on this file system */
        sl_log_debug("run", "%s: no lock to take", path);
        return SL_OK;
    }
    if (state == 0) {
        lock_holder(f, who, sizeof who);
        close(f);
        return sl_err_set(SL_ERR_IO,
                          "%s: in use by another shoal process (%s); two runs in one directory "
                          "would overwrite each other's files",
                          dir, who);
    }
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(who, sizeof who, "pid %ld on %s since %s\n", (long)getpid(), host,
             sl_log_utc_now(now, sizeof now));
    if (ftruncate(f, 0) != 0 || pwrite(f, who, strlen(who), 0) < 0)
        sl_log_debug("run", "%s: cannot say who holds it: %s", path, strerror(errno));
    *fd = f;
    return SL_OK;
}

sl_status_t
sl_run_model_path(const sl_config_t *cfg, char *path, size_t cap)
{
    char dir[RUN_PATH_MAX];

    SL_TRY(sl_run_dir_path(cfg, dir, sizeof dir));
    if (snprintf(path, cap, "%s/model.bin", dir) >= (int)cap)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s)", dir);
    if (access(path, F_OK) != 0)
        return sl_err_set(SL_ERR_IO,
                          "%s: no such file: the run has not finished (give --checkpoint FILE, "
                          "e.g. %s/%scheckpoint.bin)",
                          path, dir, cfg->cluster.nodes > 1 ? "node-0/" : "");
    return SL_OK;
}

sl_status_t
sl_run_dir_path(const sl_config_t *cfg, char *out, size_t cap)
{
    int n = cfg->run.dir && cfg->run.dir[0] ? snprintf(out, cap, "%s", cfg->run.dir)
                                            : snprintf(out, cap, "runs/%s", cfg->run.name);

    if (n < 0 || (size_t)n >= cap)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s)",
                          cfg->run.dir && cfg->run.dir[0] ? cfg->run.dir : cfg->run.name);
    return SL_OK;
}

int
sl_run_model_inspect(const char *path, sl_run_model_t *m, int *evaluated)
{
    sl_ckpt_info_t info;

    if (sl_checkpoint_inspect(path, &info) != SL_OK)
        return 0;
    m->step = info.cur.step;
    m->models = info.has_meta ? info.meta.models_averaged : 1;
    m->rank = info.id.rank;
    *evaluated = info.has_meta && (!isnan(info.meta.valid_loss) || !isnan(info.meta.test_loss));
    sl_checkpoint_info_fini(&info);
    return 1;
}

/* Whether the model at path is one of this run that stays against o->mine (what it
 * is into *o->there). */
static int
run_model_stays(const char *path, void *ctx)
{
    const offer_t *o = ctx;
    int evaluated;

    if (!sl_run_model_inspect(path, o->there, &evaluated))
        return 0; /* none, or a damaged one */
    return o->there->step >= o->mine->step &&
           (o->there->models > o->mine->models ||
            (o->there->models == o->mine->models && o->there->rank < o->mine->rank));
}

sl_status_t
sl_run_model_place(const char *file, const char *path, const sl_run_model_t *mine, int *placed,
                   sl_run_model_t *there)
{
    sl_run_model_t seen;
    offer_t o = {mine, there ? there : &seen};

    return sl_file_rename_locked(file, path, run_model_stays, &o, placed);
}

sl_status_t
sl_run_end_watch_init(sl_run_end_watch_t *w, const sl_config_t *cfg, int rank, int nodes)
{
    char dir[RUN_PATH_MAX];

    memset(w, 0, sizeof *w);
    w->own_step = -1;
    SL_TRY(sl_run_dir_path(cfg, dir, sizeof dir));
    snprintf(w->model, sizeof w->model, "%s/model.bin", dir);
    if (nodes < 2 || rank < 0 || rank >= nodes)
        return sl_err_set(SL_ERR_INVALID, "node %d of %d: no run to come back to", rank, nodes);
    snprintf(w->checkpoint, sizeof w->checkpoint, "%s/node-%d/checkpoint.bin", dir, rank);
    return SL_OK;
}

static int
time_before(struct timespec a, struct timespec b)
{
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

/* The node's newest sound checkpoint generation: its step and the newest write time. */
static void
read_own(sl_run_end_watch_t *w)
{
    char prev[RUN_PATH_MAX + 64];
    const char *paths[2] = {w->checkpoint, prev};

    w->own_read = 1;
    if (sl_checkpoint_prev_path(w->checkpoint, prev, sizeof prev) != SL_OK)
        prev[0] = '\0';
    for (int i = 0; i < 2; i++) {
        sl_ckpt_info_t info;
        struct stat sb;

        if (!paths[i][0] || stat(paths[i], &sb) != 0 ||
            sl_checkpoint_inspect(paths[i], &info) != SL_OK)
            continue;
        if (info.train_state && info.cur.step > w->own_step)
            w->own_step = info.cur.step;
        if (info.train_state && time_before(w->own_at, sb.st_mtim))
            w->own_at = sb.st_mtim;
        sl_checkpoint_info_fini(&info);
    }
}

sl_status_t
sl_run_end_watch_check(sl_run_end_watch_t *w, const sl_config_t *cfg, int nodes)
{
    struct stat sb;
    sl_ckpt_info_t info;
    int ours;
    long step;
    char own[64];

    if (stat(w->model, &sb) != 0 ||
        (sb.st_mtim.tv_sec == w->model_at.tv_sec && sb.st_mtim.tv_nsec == w->model_at.tv_nsec &&
         sb.st_size == w->model_size))
        return SL_OK; /* none, or the one that said no already */
    w->model_at = sb.st_mtim;
    w->model_size = sb.st_size;
    if (!w->own_read)
        read_own(w);
    if (time_before(sb.st_mtim, w->own_at) || sl_checkpoint_inspect(w->model, &info) != SL_OK)
        return SL_OK; /* older than this node's checkpoint, or being written, or damaged */
    ours = !info.train_state && info.has_meta && info.id.nodes == nodes &&
           info.id.sync == cfg->sync.algorithm &&
           strncmp(info.meta.run_name, cfg->run.name, sizeof info.meta.run_name - 1) == 0 &&
           info.cur.step > w->own_step &&
           /* the end of this configuration's run, not of one it continues for longer */
           (info.cur.epoch >= cfg->train.epochs ||
            (cfg->train.max_steps > 0 && info.cur.step >= cfg->train.max_steps));
    step = info.cur.step;
    sl_checkpoint_info_fini(&info);
    if (!ours)
        return SL_OK;
    if (w->own_step >= 0)
        snprintf(own, sizeof own, "this node's newest checkpoint: step %ld", w->own_step);
    else
        snprintf(own, sizeof own, "this node has no checkpoint");
    return sl_err_set(SL_ERR_ENDED,
                      "the run ended without this node at step %ld (its model is at %s; %s): "
                      "nothing to come back to",
                      step, w->model, own);
}

sl_status_t
sl_run_write_config(const sl_config_t *cfg, const char *run_dir)
{
    char path[4096];
    sl_config_t abs;
    sl_atomic_file_t f;
    sl_status_t rc;
    int n = snprintf(path, sizeof path, "%s/config.yaml", run_dir);

    if (n < 0 || (size_t)n >= sizeof path)
        return sl_err_set(SL_ERR_INVALID, "run.dir: path too long (%s)", run_dir);
    SL_TRY(sl_config_copy(&abs, cfg));
    rc = sl_config_absolute_paths(&abs);
    if (rc == SL_OK && (rc = sl_atomic_open(&f, path)) == SL_OK) {
        rc = sl_config_write_yaml(&abs, f.fp);
        if (rc != SL_OK)
            sl_atomic_abort(&f);
        else
            rc = sl_atomic_commit(&f);
    }
    sl_config_fini(&abs);
    return rc;
}
