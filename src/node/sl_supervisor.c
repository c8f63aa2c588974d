/* The `shoal run` supervisor: node processes forked on this machine, their records and
 * log lines read from pipes, one merged progress line, signals passed on, stopping them
 * all when one fails, the private ipc directory. Owns the processes, pipes and signals
 * of a run on one machine; must not touch what happens inside a node (sl_run_child.c: each
 * child just calls sl_node_run) nor the training itself. What is done about a node that
 * died or hangs (restarts, the watchdog, the membership log) is in sl_supervisor_watch.c. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_supervisor.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "node/sl_ipc_dir.h"
#include "node/sl_run_child.h"
#include "node/sl_run_files.h"
#include "node/sl_supervisor_int.h"

void
sl_launch_opts_init(sl_launch_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->resume = 1;
    o->grace_ms = SL_LAUNCH_GRACE_MS;
    o->out = stderr;
}

/* ---- shoal run: the supervisor ---- */

static void
signal_all(sl_sup_t *l, int sig)
{
    for (int i = 0; i < l->forked; i++)
        if (!l->c[i].exited)
            kill(l->c[i].pid, sig);
}

static void
stop_all(sl_sup_t *l, int sig)
{
    if (l->stopping)
        return;
    l->stopping = 1;
    l->kill_at = sl_clock_now() + l->o->grace_ms / 1000.0;
    signal_all(l, sig);
}

void
sl_sup_fail(sl_sup_t *l, int rank, sl_status_t st, const char *fmt, ...)
{
    va_list ap;

    if (l->culprit >= 0)
        return;
    l->culprit = rank;
    l->culprit_st = st;
    va_start(ap, fmt);
    vsnprintf(l->culprit_msg, sizeof l->culprit_msg, fmt, ap);
    va_end(ap);
}

/* "step 120/245 | 4 nodes | 11800 tok/s | loss 5.61 | ppl 273 | sync 12% | ETA 3m10s"
 * over the nodes' last reports: the slowest node's step, the sum of their rates, the
 * mean loss and sync share (shown when > 0), the longest ETA. 0 until every node has reported. */
static int
merged_line(const sl_sup_t *l, char *buf, size_t size, long *step)
{
    long lo = -1, total = 0;
    double rate = 0, loss = 0, eta = -1, sync = 0;
    char etas[32], quality[48], syncs[32] = "", nodes[32];
    int char_level = 0, live = 0;

    for (int i = 0; i < l->n; i++) {
        const sl_sup_node_t *c = &l->c[i];
        if (c->gone)
            continue; /* dead: to be started again, or the others go on without it */
        if (!c->has_report)
            return 0;
        live++;
        if (lo < 0 || c->report.step < lo)
            lo = c->report.step;
        if (c->report.total_steps > total)
            total = c->report.total_steps;
        rate += c->report.tokens_per_s;
        loss += c->report.loss;
        sync += c->report.sync_pct;
        if (c->report.eta_s > eta)
            eta = c->report.eta_s;
        char_level = c->report.char_level;
    }
    if (live == 0)
        return 0;
    loss /= live;
    sync /= live;
    if (char_level)
        snprintf(quality, sizeof quality, "bpc %.3f", loss / log(2.0));
    else
        snprintf(quality, sizeof quality, "ppl %.1f", exp(loss));
    if (eta >= 0)
        sl_clock_format_duration(eta, etas, sizeof etas);
    else
        snprintf(etas, sizeof etas, "?");
    if (sync > 0)
        snprintf(syncs, sizeof syncs, "sync %.0f%% | ", sync);
    if (live < l->n)
        snprintf(nodes, sizeof nodes, "%d of %d nodes", live, l->n);
    else
        snprintf(nodes, sizeof nodes, "%d node%s", live, live == 1 ? "" : "s");
    snprintf(buf, size, "step %ld/%ld | %s | %.0f tok/s | loss %.3f | %s | %sETA %s", lo, total,
             nodes, rate, loss, quality, syncs, etas);
    *step = lo;
    return 1;
}

/* On a terminal the line is rewritten in place (at most 10 times a second unless
 * forced); otherwise a line is printed whenever the slowest node got further. */
static void
show_progress(sl_sup_t *l, int force)
{
    char line[256];
    long step;
    double now = sl_clock_now();

    if (l->o->quiet || !merged_line(l, line, sizeof line, &step))
        return;
    if (l->tty) {
        if (!force && now - l->shown_at < 0.1)
            return;
        fprintf(l->out, "\r%s\033[K", line);
        l->line_open = 1;
    } else {
        char stamp[320];

        if (step <= l->shown_step)
            return;
        fprintf(l->out, "%s%s\n", sl_log_stamp(stamp, sizeof stamp), line); /* a log file */
    }
    l->shown_step = step;
    l->shown_at = now;
    fflush(l->out);
}

/* A node's output line, as "node R: ..." (its own "shoal: " dropped), after the time
 * and host of a full log line (the nodes write terse lines: sl_run_child.c). */
static void
forward_line(sl_sup_t *l, int rank, const char *line)
{
    char stamp[320];

    if (l->line_open)
        fputs("\r\033[K", l->out);
    fprintf(l->out, "%snode %d: %s\n", sl_log_stamp(stamp, sizeof stamp), rank,
            strncmp(line, "shoal: ", 7) == 0 ? line + 7 : line);
    fflush(l->out);
    if (l->line_open)
        show_progress(l, 1);
}

void
sl_sup_say(sl_sup_t *l, const char *fmt, ...)
{
    va_list ap;
    char stamp[320];

    if (l->line_open)
        fputs("\r\033[K", l->out);
    fprintf(l->out, "%sshoal run: ", sl_log_stamp(stamp, sizeof stamp));
    va_start(ap, fmt);
    vfprintf(l->out, fmt, ap);
    va_end(ap);
    fputc('\n', l->out);
    fflush(l->out);
    if (l->line_open)
        show_progress(l, 1);
}

static void
take_record(sl_sup_t *l, int rank)
{
    sl_sup_node_t *c = &l->c[rank];
    const sl_run_record_t *r = &c->rec;

    sl_sup_node_alive(l, rank);
    switch (r->type) {
    case SL_RUN_REC_MASTER:
        if (rank == 0 && !l->has_master) {
            snprintf(l->master, sizeof l->master, "%s", r->text);
            l->has_master = 1;
        }
        break;
    case SL_RUN_REC_REPORT:
        c->report = r->line;
        c->has_report = 1;
        c->reported = 1;
        show_progress(l, 0);
        break;
    case SL_RUN_REC_END:
        c->ended = 1;
        c->outcome = r->outcome;
        c->status = r->status;
        c->has_train = r->has_train;
        c->train = r->train;
        if (c->left_out)
            break; /* stopped by us, the run having ended without it */
        /* a restart refused only because the run ends leaves it out (sl_sup_node_died) */
        if (r->outcome == SL_NODE_FAILED && r->status == SL_ERR_DROPPED &&
            sl_sup_restarts_left(l, rank)) {
            c->dropped = 1; /* it comes back like a dead node once reaped */
            snprintf(c->dropped_why, sizeof c->dropped_why, "%s", r->text);
        } else if (r->outcome == SL_NODE_FAILED)
            sl_sup_fail(l, rank, r->status, "node %d failed: %s", rank, r->text);
        else if (r->outcome == SL_NODE_INTERRUPTED && !l->stopping) /* not by us */
            sl_sup_fail(l, rank, r->status, "node %d was interrupted from outside: %s", rank,
                        r->text);
        break;
    }
}

/* Reads what is there on one of a node's pipes; closes it at end of file. */
static void
read_pipe(sl_sup_t *l, int rank, int is_log)
{
    sl_sup_node_t *c = &l->c[rank];
    int *fd = is_log ? &c->log_fd : &c->rec_fd;
    char buf[4096];
    ssize_t got;

    if (is_log)
        got = read(*fd, buf, sizeof buf);
    else
        got = read(*fd, (char *)&c->rec + c->rec_got, sizeof c->rec - c->rec_got);
    if (got < 0 && errno == EINTR)
        return;
    if (got <= 0) {
        if (is_log && c->line_len) {
            c->line[c->line_len] = '\0';
            forward_line(l, rank, c->line);
            c->line_len = 0;
        }
        close(*fd);
        *fd = -1;
        return;
    }
    if (!is_log) {
        c->rec_got += (size_t)got;
        if (c->rec_got == sizeof c->rec) {
            take_record(l, rank);
            c->rec_got = 0;
        }
        return;
    }
    sl_sup_node_alive(l, rank);
    for (ssize_t i = 0; i < got; i++) {
        if (buf[i] == '\n' || c->line_len + 1 >= sizeof c->line) {
            c->line[c->line_len] = '\0';
            forward_line(l, rank, c->line);
            c->line_len = 0;
            if (buf[i] == '\n')
                continue;
        }
        c->line[c->line_len++] = buf[i];
    }
}

/* Waits up to ms for output of any node and reads it. */
static void
pump(sl_sup_t *l, int ms)
{
    struct pollfd pfd[2 * 1024];
    int who[2 * 1024], np = 0;

    for (int i = 0; i < l->forked && np + 2 <= 2 * 1024; i++) {
        if (l->c[i].rec_fd >= 0) {
            pfd[np].fd = l->c[i].rec_fd;
            pfd[np].events = POLLIN;
            who[np++] = 2 * i;
        }
        if (l->c[i].log_fd >= 0) {
            pfd[np].fd = l->c[i].log_fd;
            pfd[np].events = POLLIN;
            who[np++] = 2 * i + 1;
        }
    }
    if (np == 0) {
        struct timespec ts = {0, (long)ms * 1000000L};
        nanosleep(&ts, NULL);
        return;
    }
    if (poll(pfd, (nfds_t)np, ms) <= 0)
        return;
    for (int k = 0; k < np; k++)
        if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
            read_pipe(l, who[k] / 2, who[k] % 2);
}

/* Collects nodes that exited; judges a node once its pipes are drained too. */
static void
reap(sl_sup_t *l)
{
    char why[256];

    for (int i = 0; i < l->forked; i++) {
        sl_sup_node_t *c = &l->c[i];

        if (!c->exited && waitpid(c->pid, &c->wstatus, WNOHANG) == c->pid)
            c->exited = 1;
        if (c->judged || !c->exited || c->rec_fd >= 0 || c->log_fd >= 0)
            continue;
        c->judged = 1;
        if (c->left_out || (c->ended && !c->dropped))
            continue;
        /* it said nothing (a crash or a kill; ours, while stopping, do not count), or the
         * others dropped it and it is to come back */
        c->outcome = SL_NODE_LOST;
        if (c->dropped) {
            snprintf(why, sizeof why, "was dropped by the others (%s)", c->dropped_why);
        } else if (WIFSIGNALED(c->wstatus)) {
            int sig = WTERMSIG(c->wstatus);
            if (l->stopping && (sig == SIGTERM || sig == SIGINT || sig == SIGKILL))
                continue;
            snprintf(why, sizeof why, "killed by signal %d", sig);
        } else {
            snprintf(why, sizeof why, "exited with status %d without saying why",
                     WEXITSTATUS(c->wstatus));
        }
        sl_sup_node_died(l, i, why);
    }
}

static int
all_judged(const sl_sup_t *l)
{
    for (int i = 0; i < l->forked; i++)
        if (!l->c[i].judged || l->c[i].restart_at > 0)
            return 0;
    return 1;
}

/* Signals of shoal run itself: the first is passed on to every node (they checkpoint
 * and leave), a second kills them. */
static void
handle_interrupts(sl_sup_t *l)
{
    int now = l->o->interrupt ? (int)*l->o->interrupt : 0;

    if (now <= l->interrupts)
        return;
    if (l->interrupts == 0) {
        stop_all(l, SIGINT); /* nothing new when already stopping */
    } else if (!l->killed) {
        signal_all(l, SIGKILL);
        l->killed = 1;
    }
    l->interrupts = now;
}

/* The state of rank's new process; what its earlier ones left (restarts, the last
 * report) stays. */
static void
reset_node(sl_sup_node_t *c, pid_t pid, int rec_fd, int log_fd)
{
    c->pid = pid;
    c->rec_fd = rec_fd;
    c->log_fd = log_fd;
    c->rec_got = c->line_len = 0;
    c->exited = c->wstatus = c->ended = c->judged = c->straggler = c->dropped = 0;
    c->left_out = 0;
    c->stopped_since = c->kill_at = 0;
    c->outcome = SL_NODE_LOST;
    c->status = c->has_train = 0;
    c->gone = 0;
    c->sign_at = sl_clock_now();
    c->cpu_at_sign_s = -1;
    c->reported = 0;
    c->watchdog_why[0] = '\0';
}

sl_status_t
sl_sup_fork_node(sl_sup_t *l, int rank)
{
    int rp[2], lp[2];
    pid_t pid, parent = getpid();
    /* rank 0 picks a port; started again, it listens where the others look for it */
    const char *master = rank == 0 && !l->has_master ? "127.0.0.1:0" : l->master;

    if (pipe(rp) != 0)
        return sl_err_set(SL_ERR_IO, "shoal run: pipe: %s", strerror(errno));
    if (pipe(lp) != 0) {
        close(rp[0]);
        close(rp[1]);
        return sl_err_set(SL_ERR_IO, "shoal run: pipe: %s", strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    fflush(l->out);
    pid = fork();
    if (pid < 0) {
        int e = errno;
        close(rp[0]), close(rp[1]), close(lp[0]), close(lp[1]);
        return sl_err_set(SL_ERR_IO, "shoal run: starting node %d: %s", rank, strerror(e));
    }
    if (pid == 0) {
        close(rp[0]);
        close(lp[0]);
        for (int i = 0; i < l->forked; i++) {
            if (l->c[i].rec_fd >= 0)
                close(l->c[i].rec_fd);
            if (l->c[i].log_fd >= 0)
                close(l->c[i].log_fd);
        }
        sl_run_child_main(l->cfg, l->c[rank].restarts > 0 ? &l->restart_opts : l->o, parent, rank,
                          master, l->ipc_dir[0] ? l->ipc_dir : NULL,
                          l->has_secret ? &l->secret : NULL, rp[1], lp[1]);
    }
    close(rp[1]);
    close(lp[1]);
    setpgid(pid, pid); /* as the child does: whichever runs first */
    reset_node(&l->c[rank], pid, rp[0], lp[0]);
    if (l->forked < rank + 1)
        l->forked = rank + 1;
    return SL_OK;
}

/* The private directory of the ipc:// endpoints. */
static sl_status_t
make_ipc_dir(sl_sup_t *l)
{
    const char *tmp = getenv("TMPDIR");

    if (!tmp || !*tmp || strlen(tmp) + 40 >= (size_t)SL_SUP_IPC_PATH_MAX)
        tmp = "/tmp";
    snprintf(l->ipc_dir, sizeof l->ipc_dir, "%s/shoal-run-XXXXXX", tmp);
    if (!mkdtemp(l->ipc_dir)) {
        sl_status_t st = sl_err_set(SL_ERR_IO,
                                    "%s: %s (the nodes' sockets go under $TMPDIR, else /tmp: "
                                    "set it to a directory this user can write)",
                                    l->ipc_dir, strerror(errno));
        l->ipc_dir[0] = '\0';
        return st;
    }
    sl_ipc_dir_sweep(l->ipc_dir, SL_IPC_DIR_STALE_S); /* those of runs killed before */
    return SL_OK;
}

/* Removes the ipc directory with the sockets nodes killed before closing them left. */
static void
remove_ipc_dir(sl_sup_t *l)
{
    DIR *d;
    struct dirent *e;
    char path[SL_SUP_IPC_PATH_MAX + 300];

    if (!l->ipc_dir[0])
        return;
    d = opendir(l->ipc_dir);
    if (d) {
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "rank-", 5) != 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", l->ipc_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    if (rmdir(l->ipc_dir) != 0)
        sl_log_warn("run", "%s: cannot remove: %s", l->ipc_dir, strerror(errno));
}

/* Starts rank 0, waits for its master address, starts the others, and watches them all
 * until every one has exited and been judged. */
static void
supervise(sl_sup_t *l)
{
    sl_status_t st;

    if ((st = sl_sup_fork_node(l, 0)) != SL_OK) {
        sl_sup_fail(l, 0, st, "%s", sl_err_msg());
        return;
    }
    /* rank 0 restarted before it listened listens again */
    while (l->n > 1 && !l->has_master && !all_judged(l) && l->culprit < 0 && !l->stopping) {
        pump(l, 100);
        reap(l);
        handle_interrupts(l);
        sl_sup_watch(l);
    }
    for (int i = 1; i < l->n && l->has_master && l->culprit < 0 && !l->stopping; i++) {
        if ((st = sl_sup_fork_node(l, i)) != SL_OK) {
            sl_sup_fail(l, i, st, "%s", sl_err_msg());
            break;
        }
    }
    while (!all_judged(l)) {
        pump(l, 100);
        reap(l);
        handle_interrupts(l);
        if (l->culprit >= 0)
            stop_all(l, SIGTERM);
        sl_sup_watch(l);
        if (l->stopping && !l->killed && sl_clock_now() >= l->kill_at) {
            signal_all(l, SIGKILL);
            l->killed = 1;
        }
    }
}

/* A node left out is no failure when the others wrote the run's model; when none did
 * (the writer was the one left out: it died after the final average), the run ends as
 * one that lost a node, saying where the model the others put there is. */
static void
left_out_unwritten(sl_sup_t *l)
{
    int left = -1;

    for (int i = 0; i < l->n; i++) {
        if (l->c[i].has_train && l->c[i].train.final_models > 0)
            return;
        if (l->c[i].left_out && left < 0)
            left = i;
    }
    if (left < 0)
        return;
    l->lost = left;
    snprintf(l->lost_msg, sizeof l->lost_msg, "node %d was left out as the run ended", left);
}

/* The end of a run that lost a node and whose writer reported no model: what is at
 * the run's model.bin, if anything (a copy of the average that a member, or the writer
 * before it evaluated, put there). run_dir: a finished node's, else the config's. */
static sl_status_t
unwritten_model(const sl_sup_t *l, const char *run_dir, const char *others)
{
    char dir[SL_TRAIN_PATH_MAX], path[SL_TRAIN_PATH_MAX + 16];
    sl_run_model_t m;
    int evaluated;

    if (!run_dir) {
        if (sl_run_dir_path(l->cfg, dir, sizeof dir) != SL_OK)
            dir[0] = 0;
        run_dir = dir;
    }
    snprintf(path, sizeof path, "%s/model.bin", run_dir);
    if (!*run_dir || !sl_run_model_inspect(path, &m, &evaluated))
        return sl_err_set(SL_ERR_INVALID,
                          "%s (%s finished without it); no node wrote the run's model.bin",
                          l->lost_msg, others);
    return sl_err_set(SL_ERR_INVALID,
                      "%s (%s finished without it); the run's model, the average of %d nodes at "
                      "step %ld, is node %d's copy%s: %s",
                      l->lost_msg, others, m.models, m.step, m.rank,
                      evaluated ? "" : ", not evaluated", path);
}

sl_status_t
sl_launch_run(const sl_config_t *cfg, const sl_launch_opts_t *o, sl_launch_result_t *res)
{
    sl_sup_t l;
    sl_status_t st = SL_OK;
    int n = cfg->cluster.nodes;

    memset(res, 0, sizeof *res);
    res->failed_rank = -1;
    if (n < 1 || n > 1024)
        return sl_err_set(SL_ERR_INVALID, "shoal run: %d nodes: one machine runs 1 to 1024", n);
    memset(&l, 0, sizeof l);
    l.cfg = cfg;
    l.o = o;
    l.out = o->out ? o->out : stderr;
    l.n = n;
    l.culprit = -1;
    l.lost = -1;
    l.restart_opts = *o;
    l.restart_opts.resume = 1;
    l.tolerant =
        n >= 2 &&
        (cfg->sync.algorithm == SL_SYNC_GOSSIP_MA || cfg->sync.algorithm == SL_SYNC_GOSSIP_BMUF ||
         cfg->sync.algorithm == SL_SYNC_LOCAL_MA || cfg->sync.algorithm == SL_SYNC_LOCAL_BMUF ||
         cfg->sync.algorithm == SL_SYNC_ALLREDUCE || cfg->sync.algorithm == SL_SYNC_MA ||
         cfg->sync.algorithm == SL_SYNC_BMUF);
    l.shown_step = -1;
    l.tty = isatty(fileno(l.out));
    l.c = calloc((size_t)n, sizeof *l.c);
    res->node = calloc((size_t)n, sizeof *res->node);
    if (!l.c || !res->node) {
        free(l.c);
        sl_launch_result_fini(res);
        return sl_err_set(SL_ERR_NOMEM, "shoal run: out of memory");
    }
    res->nodes = n;
    for (int i = 0; i < n; i++)
        l.c[i].rec_fd = l.c[i].log_fd = -1;
    if (n > 1 && cfg->cluster.security != SL_SECURITY_NONE &&
        !(cfg->cluster.key_file && *cfg->cluster.key_file)) {
        if ((st = sl_secret_make(&l.secret)) != SL_OK) {
            free(l.c);
            return st;
        }
        l.has_secret = 1;
    }
    if (cfg->cluster.transport == SL_CLUSTER_IPC && n > 1 && (st = make_ipc_dir(&l)) != SL_OK) {
        sl_secret_wipe(&l.secret);
        free(l.c);
        return st;
    }
    supervise(&l);
    sl_secret_wipe(&l.secret);
    if (l.line_open) {
        show_progress(&l, 1); /* where the run ended, past the rate limit */
        fputc('\n', l.out);
    }
    fflush(l.out);
    remove_ipc_dir(&l);

    for (int i = 0; i < n; i++) {
        res->node[i].outcome = l.c[i].left_out ? SL_NODE_LEFT_OUT : l.c[i].outcome;
        res->node[i].has_train = l.c[i].has_train;
        res->node[i].train = l.c[i].train;
    }
    if (l.culprit < 0 && l.lost < 0 && l.interrupts == 0)
        left_out_unwritten(&l);
    if (l.culprit >= 0) {
        res->failed_rank = l.culprit;
        st = sl_err_set(l.culprit_st, "%s", l.culprit_msg);
    } else if (l.lost >= 0) {
        int w = -1, p = -1; /* the node that wrote the run's model; one that put a copy */
        for (int i = 0; i < n; i++) {
            if (l.c[i].has_train && l.c[i].train.final_models > 0)
                w = i;
            if (l.c[i].has_train && l.c[i].train.placed_models > 0)
                p = i;
        }
        const char *others = n == 2 ? "the other node" : "the other nodes";
        res->failed_rank = l.lost;
        if (w >= 0 && l.c[w].train.final_models == 1)
            st = sl_err_set(SL_ERR_INVALID,
                            "%s (%s finished without it); the run's model, node %d's own, was "
                            "written by node %d: %s/model.bin",
                            l.lost_msg, others, w, w, l.c[w].train.run_dir);
        else if (w >= 0)
            st = sl_err_set(SL_ERR_INVALID,
                            "%s (%s finished without it); the run's model, the average of %d "
                            "nodes, was written by node %d: %s/model.bin",
                            l.lost_msg, others, l.c[w].train.final_models, w, l.c[w].train.run_dir);
        else
            st = unwritten_model(&l, p >= 0 ? l.c[p].train.run_dir : NULL, others);
    } else {
        int stopped = -1;
        for (int i = 0; i < n && stopped < 0; i++)
            if (l.c[i].outcome != SL_NODE_DONE && !l.c[i].left_out)
                stopped = i;
        if (stopped < 0) /* every node finished (but those left out), whatever came after */
            st = SL_OK;
        else if (l.interrupts > 0)
            st = sl_err_set(SL_ERR_SHUTDOWN, "interrupted");
        else
            st = sl_err_set(SL_ERR_SHUTDOWN, "node %d stopped without a reason", stopped);
    }
    free(l.c);
    return st;
}

void
sl_launch_result_fini(sl_launch_result_t *res)
{
    free(res->node);
    res->node = NULL;
    res->nodes = 0;
}
