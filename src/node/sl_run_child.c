/* The body of a node process forked by `shoal run` (sl_run_child.h). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_run_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "common/sl_log.h"
#include "node/sl_node.h"

static volatile sig_atomic_t child_stop;

static void
on_child_signal(int sig)
{
    child_stop = sig;
}

static void
write_all(int fd, const void *data, size_t n)
{
    const char *p = data;

    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* shoal run is gone: nobody to tell */
        p += w;
        n -= (size_t)w;
    }
}

typedef struct {
    int fd;
    sl_run_record_t rec;
} child_io_t;

static void
child_master(void *ctx, const char *master)
{
    child_io_t *io = ctx;

    memset(&io->rec, 0, sizeof io->rec);
    io->rec.type = SL_RUN_REC_MASTER;
    snprintf(io->rec.text, sizeof io->rec.text, "%s", master);
    write_all(io->fd, &io->rec, sizeof io->rec);
}

static void
child_report(void *ctx, const sl_progress_line_t *line)
{
    child_io_t *io = ctx;

    memset(&io->rec, 0, sizeof io->rec);
    io->rec.type = SL_RUN_REC_REPORT;
    io->rec.line = *line;
    write_all(io->fd, &io->rec, sizeof io->rec);
}

void
sl_run_child_main(const sl_config_t *cfg, const sl_launch_opts_t *lo, pid_t parent, int rank,
                  const char *master, const char *ipc_dir, const sl_secret_t *secret, int rec_fd,
                  int log_fd)
{
    static child_io_t io;
    struct sigaction sa;
    sl_node_opts_t no;
    sl_node_result_t nr;
    sl_status_t st;
    int devnull, code;

    setpgid(0, 0); /* away from the terminal's Ctrl-C: shoal run forwards it once */
#ifdef __linux__
    {
        char name[16];
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* shoal run killed: stop too */
        snprintf(name, sizeof name, "shoal node %d", rank);
        prctl(PR_SET_NAME, name);
    }
#endif
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_child_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* a second signal stops at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (getppid() != parent)
        child_stop = SIGTERM;
    devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        close(devnull);
    }
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    close(log_fd);
    setvbuf(stdout, NULL, _IOLBF, 0);
    sl_log_set_tag(NULL);
    sl_log_set_format(SL_LOG_TERSE); /* shoal run puts the time and host before each line */

    io.fd = rec_fd;
    sl_node_opts_init(&no);
    no.rank = rank;
    no.size = cfg->cluster.nodes;
    no.master = master;
    no.ipc_dir = ipc_dir;
    no.secret = secret;
    no.resume = lo->resume;
    no.supervised = 1; /* shoal run decides when a restarted node is too late */
    no.init = lo->init;
    no.quiet = 1;
    no.interrupt = &child_stop;
    no.on_master = child_master;
    no.on_report = child_report;
    no.hook_ctx = &io;
    st = sl_node_run(cfg, &no, &nr);

    memset(&io.rec, 0, sizeof io.rec);
    io.rec.type = SL_RUN_REC_END;
    io.rec.status = st;
    io.rec.has_train = nr.trained;
    io.rec.train = nr.train;
    if (st == SL_OK) {
        io.rec.outcome = SL_NODE_DONE;
        code = 0;
    } else if (st == SL_ERR_SHUTDOWN) {
        io.rec.outcome = nr.peer_stopped ? SL_NODE_STOPPED : SL_NODE_INTERRUPTED;
        code = nr.peer_stopped ? 1 : 130;
    } else {
        io.rec.outcome = SL_NODE_FAILED;
        code = st == SL_ERR_CONFIG ? 2 : 1;
    }
    snprintf(io.rec.text, sizeof io.rec.text, "%s", st == SL_OK ? "" : sl_err_msg());
    write_all(rec_fd, &io.rec, sizeof io.rec);
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}
