/* What `shoal run` does about a node process that died or hangs: restarts
 * (cluster.restart), the watchdog (cluster.watchdog_timeouts), the stopped stragglers of
 * a tolerant run, and the membership log, one line on shoal run's output and one
 * {"event":"membership"} record in <run dir>/events.jsonl per change. Owns those
 * decisions; forking, pipes and the outcome are sl_supervisor.c's. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_file.h"
#include "common/sl_log.h"
#include "node/sl_supervisor_int.h"
#include "node/sl_supervisor_watch_internal.h"

/* A node that uses less than this share of one CPU over the watchdog's window, and says
 * nothing, is hung; a node that computes (a long evaluation, a tokenization) uses far
 * more, and one that waits for a peer waits at most a sync timeout. */
#define WATCHDOG_CPU_SHARE 0.01

int
sl_sup_live(const sl_sup_t *l)
{
    int live = 0;

    for (int i = 0; i < l->n; i++)
        live += !l->c[i].gone;
    return live;
}

static double
sync_timeout_s(const sl_config_t *cfg)
{
    return (cfg->sync.timeout_ms > 0 ? cfg->sync.timeout_ms : cfg->cluster.timeout_ms) / 1000.0;
}

/* "at step 140", or "at start" before the node's first report. */
static const char *
at_step(const sl_sup_node_t *c, char *buf, size_t size)
{
    if (c->has_report)
        snprintf(buf, size, "at step %ld", c->report.step);
    else
        snprintf(buf, size, "at start");
    return buf;
}

/* Appends one record to <run dir>/events.jsonl; a failure is a warning, never the
 * run's end (the line on the output says the same). */
static void
append_event(const sl_sup_t *l, int rank, const char *why)
{
    const sl_sup_node_t *c = &l->c[rank];
    char path[SL_TRAIN_PATH_MAX + 16], step[32];
    struct timespec ts;
    FILE *f;

    snprintf(path, sizeof path, "%s/events.jsonl", l->cfg->run.dir);
    f = fopen(path, "a");
    if (!f && errno == ENOENT && sl_file_mkdirs(l->cfg->run.dir) == SL_OK)
        f = fopen(path, "a");
    if (!f) {
        sl_log_warn("run", "%s: %s: membership event not recorded", path, strerror(errno));
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    if (c->has_report)
        snprintf(step, sizeof step, "%ld", c->report.step);
    else
        snprintf(step, sizeof step, "null");
    fprintf(f,
            "{\"event\":\"membership\",\"time\":%.3f,\"rank\":%d,\"step\":%s,\"why\":\"%s\","
            "\"live\":%d,\"nodes\":%d}\n",
            (double)ts.tv_sec + ts.tv_nsec / 1e9, rank, step, why, sl_sup_live(l), l->n);
    if (fclose(f) != 0)
        sl_log_warn("run", "%s: %s: membership event not recorded", path, strerror(errno));
}

static void membership(sl_sup_t *l, int rank, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A membership change of rank: the record (why: a short reason without quotes or
 * backslashes) and the line "node R <fmt>; L of N nodes live". */
static void
membership(sl_sup_t *l, int rank, const char *why, const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    append_event(l, rank, why);
    sl_sup_say(l, "node %d %s; %d of %d nodes live", rank, text, sl_sup_live(l), l->n);
}

int
sl_sup_restarts_left(const sl_sup_t *l, int rank)
{
    return l->c[rank].restarts < l->cfg->cluster.restart.max && !l->stopping && l->culprit < 0;
}

int
sl_sup_run_ending(const sl_sup_t *l)
{
    if (!l->tolerant)
        return 0; /* each node's end is its own */
    for (int i = 0; i < l->forked; i++) {
        const sl_sup_node_t *c = &l->c[i];
        if ((c->ended && c->outcome == SL_NODE_DONE) ||
            (c->has_report && c->report.total_steps > 0 && c->report.step >= c->report.total_steps))
            return 1;
    }
    return 0;
}

int
sl_sup_may_restart(const sl_sup_t *l, int rank)
{
    return sl_sup_restarts_left(l, rank) && !sl_sup_run_ending(l);
}

/* A node that died, was killed by the watchdog, or was dropped by the others (a
 * comeback admitted by some members and not by others after a second failure: it ends
 * with SL_ERR_DROPPED and is started again to come back once more). */
void
sl_sup_node_died(sl_sup_t *l, int rank, const char *why)
{
    sl_sup_node_t *c = &l->c[rank];
    const sl_config_t *cfg = l->cfg;
    int sig = WIFSIGNALED(c->wstatus) ? WTERMSIG(c->wstatus) : 0;
    char what[256], tag[64], at[48];

    c->gone = 1;
    if (c->straggler)
        return; /* kill_stragglers said why */
    at_step(c, at, sizeof at);
    if (c->watchdog_why[0]) {
        snprintf(what, sizeof what, "made no progress for %s %s: the watchdog killed it",
                 c->watchdog_why, at);
        snprintf(tag, sizeof tag, "killed by the watchdog");
    } else if (c->dropped) {
        snprintf(what, sizeof what, "was dropped by the others %s (%s)", at, c->dropped_why);
        snprintf(tag, sizeof tag, "dropped");
    } else if (sig) {
        snprintf(what, sizeof what, "died (signal %d) %s", sig, at);
        snprintf(tag, sizeof tag, "died (signal %d)", sig);
    } else {
        snprintf(what, sizeof what, "exited with status %d without saying why %s",
                 WEXITSTATUS(c->wstatus), at);
        snprintf(tag, sizeof tag, "exited (status %d)", WEXITSTATUS(c->wstatus));
    }
    if (sl_sup_may_restart(l, rank)) {
        c->restart_at = sl_clock_now() + cfg->cluster.restart.delay_ms / 1000.0;
        membership(l, rank, tag, "%s; restarting it in %.1f s (restart %d of %d)", what,
                   cfg->cluster.restart.delay_ms / 1000.0, c->restarts + 1,
                   cfg->cluster.restart.max);
        return;
    }
    if (sl_sup_restarts_left(l, rank)) { /* only the run's end keeps it from a restart */
        c->left_out = 1;
        membership(l, rank, "not restarted",
                   "%s; not restarted: the run is ending; %s ends without it", what,
                   sl_sync_algorithm_name(cfg->sync.algorithm));
        return;
    }
    /* a node that exits without a word is a bug, not a vanished peer: it stops the run */
    if (l->tolerant && !l->stopping && sig) {
        if (l->lost < 0) {
            l->lost = rank;
            if (c->watchdog_why[0])
                snprintf(l->lost_msg, sizeof l->lost_msg,
                         "node %d killed by the watchdog: no progress for %s", rank,
                         c->watchdog_why);
            else
                snprintf(l->lost_msg, sizeof l->lost_msg, "node %d %s", rank, why);
        }
        membership(l, rank, tag, "%s; %s goes on without it", what,
                   sl_sync_algorithm_name(cfg->sync.algorithm));
        return;
    }
    if (!l->stopping && l->culprit < 0)
        membership(l, rank, tag, "%s; the run stops", what);
    if (c->watchdog_why[0])
        sl_sup_fail(l, rank, SL_ERR_INVALID, "node %d killed by the watchdog: no progress for %s",
                    rank, c->watchdog_why);
    else
        sl_sup_fail(l, rank, SL_ERR_INVALID, "node %d %s", rank, why);
}

void
sl_sup_node_alive(sl_sup_t *l, int rank)
{
    sl_sup_node_t *c = &l->c[rank];

    c->sign_at = sl_clock_now();
    c->cpu_at_sign_s = -1; /* the next watchdog round reads it */
}

double
sl_sup_proc_stat_cpu_s(const char *path, int *stopped)
{
    char buf[1024], *close_paren, state;
    unsigned long utime, stime;
    FILE *f;
    size_t n;

    *stopped = 0;
    f = fopen(path, "r");
    if (!f)
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    close_paren = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!close_paren ||
        sscanf(close_paren + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &state,
               &utime, &stime) != 3)
        return -1;
    *stopped = state == 'T' || state == 't';
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* Process pid's CPU time (user and system, all threads) in seconds and whether it is
 * stopped (SIGSTOP, SIGTSTP: state T), from /proc/PID/stat; -1 where that cannot be
 * read (gone, or no /proc). */
static double
proc_cpu_s(pid_t pid, int *stopped)
{
    char path[64];

    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    return sl_sup_proc_stat_cpu_s(path, stopped);
}

/* The watchdog: a node that has neither sent anything nor used WATCHDOG_CPU_SHARE of a
 * CPU for watchdog_timeouts sync timeouts (before its first report also the rendezvous
 * timeout, which it may spend waiting for the others, unless it is stopped: a stopped
 * process waits for nobody) is stopped or hung: SIGKILL, and sl_sup_node_died decides
 * what next. */
static void
watchdog(sl_sup_t *l, int rank, double now)
{
    sl_sup_node_t *c = &l->c[rank];
    const sl_config_t *cfg = l->cfg;
    double window_s = cfg->cluster.watchdog_timeouts * sync_timeout_s(cfg), allowed_s, cpu;
    int stopped;

    if (window_s <= 0 || c->ended || c->exited || c->straggler || c->left_out || c->watchdog_why[0])
        return;
    if ((cpu = proc_cpu_s(c->pid, &stopped)) < 0)
        return; /* without /proc nothing tells a hung node from a busy one */
    if (c->cpu_at_sign_s < 0 ||
        (!stopped && cpu - c->cpu_at_sign_s >= WATCHDOG_CPU_SHARE * window_s)) {
        if (c->cpu_at_sign_s >= 0)
            c->sign_at = now;
        c->cpu_at_sign_s = cpu;
        return;
    }
    allowed_s = window_s;
    if (!c->reported && l->n > 1 && !stopped)
        allowed_s += cfg->cluster.rendezvous_timeout_ms / 1000.0;
    if (now - c->sign_at < allowed_s)
        return;
    snprintf(c->watchdog_why, sizeof c->watchdog_why, "%g s (%s)", allowed_s,
             stopped ? "stopped by a signal" : "no output, no CPU time");
    kill(c->pid, SIGKILL);
}

/* A node started again whose new process has not come back (sent no report) is a
 * latecomer. */
static int
latecomer(const sl_sup_node_t *c)
{
    return c->restarts > 0 && !c->reported && !c->ended && !c->exited && !c->gone;
}

/* A tolerant run (every sync algorithm): once a node has finished (its final model gathered and
 * written without the others' help), a node that is stopped (SIGSTOP) can no longer take part in
 * the run and would keep shoal run waiting for ever. Stopped for twice the sync timeout since
 * another node finished, it gets SIGKILL and is counted as lost, never restarted (the others are
 * done). A node that runs, however slowly (the writer evaluating the run's model), is waited for.
 */
static void
kill_stragglers(sl_sup_t *l, double now)
{
    const sl_config_t *cfg = l->cfg;
    double grace_s = 2.0 * sync_timeout_s(cfg);
    char at[48];

    if (!l->tolerant || l->stopping || l->forked < l->n)
        return;
    if (l->first_done == 0) {
        for (int i = 0; i < l->forked; i++)
            if (l->c[i].ended && l->c[i].outcome == SL_NODE_DONE)
                l->first_done = now;
        return;
    }
    for (int i = 0; i < l->forked; i++) {
        sl_sup_node_t *c = &l->c[i];
        int stopped;

        if (c->ended || c->exited || c->straggler || c->gone || c->left_out || latecomer(c))
            continue; /* a latecomer is not in the run yet: stop_latecomers */
        if (proc_cpu_s(c->pid, &stopped) < 0 || !stopped) {
            c->stopped_since = 0;
            continue;
        }
        if (c->stopped_since == 0)
            c->stopped_since = now;
        if (now - c->stopped_since < grace_s || now - l->first_done < grace_s)
            continue;
        c->straggler = 1;
        c->gone = 1;
        if (l->lost < 0) {
            l->lost = i;
            snprintf(l->lost_msg, sizeof l->lost_msg,
                     "node %d killed, stopped (SIGSTOP) %.0f s after another node finished", i,
                     grace_s);
        }
        kill(c->pid, SIGKILL);
        membership(l, i, "stopped after another node finished",
                   "has been stopped (SIGSTOP) for %.0f s since another node finished: killing "
                   "it (%s); %s goes on without it",
                   grace_s, at_step(c, at, sizeof at), sl_sync_algorithm_name(cfg->sync.algorithm));
    }
}

/* Latecomers once every other node has finished (or is gone for good) and one has
 * finished: nobody is left to admit them (rank 0 admits between steps) and the run's
 * model is written, so each would wait for rank 0's table until the rendezvous timeout.
 * Each is stopped (SIGTERM: its rendezvous ends at once; SIGCONT, should it be stopped;
 * SIGKILL after the grace period) and left out: the run ends well without it. */
static void
stop_latecomers(sl_sup_t *l, double now)
{
    int finished = 0, late = 0;

    if (!l->tolerant || l->stopping || l->culprit >= 0 || l->forked < l->n)
        return;
    for (int i = 0; i < l->n; i++) {
        sl_sup_node_t *c = &l->c[i];

        if (c->left_out && !c->exited && c->kill_at > 0 && now >= c->kill_at) {
            kill(c->pid, SIGKILL);
            c->kill_at = 0;
        }
    }
    for (int i = 0; i < l->n; i++) {
        const sl_sup_node_t *c = &l->c[i];

        if (c->left_out)
            continue;
        if (c->ended && c->outcome == SL_NODE_DONE) {
            finished++;
        } else if (latecomer(c)) {
            late++;
        } else if (!c->gone || c->restart_at > 0) {
            return; /* a node still takes part, or comes back */
        }
    }
    if (!finished || !late)
        return;
    for (int i = 0; i < l->n; i++) {
        sl_sup_node_t *c = &l->c[i];

        if (!latecomer(c) || c->left_out)
            continue;
        c->left_out = 1;
        c->gone = 1;
        c->kill_at = now + l->o->grace_ms / 1000.0;
        kill(c->pid, SIGTERM);
        kill(c->pid, SIGCONT);
        membership(l, i, "left out",
                   "had not come back (restart %d of %d) when the others had finished: "
                   "stopping it; %s ends without it",
                   c->restarts, l->cfg->cluster.restart.max,
                   sl_sync_algorithm_name(l->cfg->sync.algorithm));
    }
}

/* Starts the nodes whose restart is due; a run that stops restarts nobody, and nor does
 * one that is ending (sl_sup_may_restart): the node is left out. */
static void
restart_due(sl_sup_t *l, double now)
{
    for (int i = 0; i < l->forked; i++) {
        sl_sup_node_t *c = &l->c[i];
        char why[64];
        sl_status_t st;

        if (c->restart_at == 0 || (now < c->restart_at && !l->stopping && l->culprit < 0))
            continue;
        c->restart_at = 0;
        if (l->stopping || l->culprit >= 0)
            continue;
        if (sl_sup_run_ending(l)) {
            c->left_out = 1;
            membership(l, i, "not restarted",
                       "not restarted: the run is ending; %s ends without it",
                       sl_sync_algorithm_name(l->cfg->sync.algorithm));
            continue;
        }
        c->restarts++;
        if ((st = sl_sup_fork_node(l, i)) != SL_OK) {
            sl_sup_fail(l, i, st, "%s", sl_err_msg());
            continue;
        }
        snprintf(why, sizeof why, "restarted (restart %d of %d)", c->restarts,
                 l->cfg->cluster.restart.max);
        membership(l, i, why, "%s", why);
    }
}

void
sl_sup_watch(sl_sup_t *l)
{
    double now = sl_clock_now();

    if (!l->stopping)
        for (int i = 0; i < l->forked; i++)
            watchdog(l, i, now);
    stop_latecomers(l, now);
    kill_stragglers(l, now);
    restart_due(l, now);
}
