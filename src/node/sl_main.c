/* The shoal command line: train, eval, run, node, help (their texts in sl_help.c). The
 * only place that prints errors and exits: every error is one line "shoal: <message>"
 * on stderr. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "common/sl_alloc.h"
#include "common/sl_cli.h"
#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_cmd.h"
#include "node/sl_cmd_model.h"
#include "node/sl_cmd_export.h"
#include "config/sl_config_paths.h"
#include "node/sl_help.h"
#include "node/sl_launcher_env.h"
#include "node/sl_node.h"
#include "node/sl_version.h"
#include "node/sl_cmd_plot.h"
#include "node/sl_supervisor.h"
#include "node/sl_train.h"

extern char **environ;

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t stop_count; /* shoal run: every signal counts */

static void
on_stop_signal(int sig)
{
    stop_requested = sig;
}

static void
on_run_signal(int sig)
{
    (void)sig;
    stop_count++;
}

/* Which options a command takes. */
enum { OPT_TRAIN = 1, OPT_EVAL = 2, OPT_NODE = 4, OPT_RUN = 8, OPT_INIT = 16 };

typedef struct {
    const char *conf;
    const char *checkpoint;
    const char *split;
    const char *init; /* --init of shoal train, run and node */
    const char **sets;
    int nsets;
    int no_resume;
    int quiet;
    int help;
    const char *rank, *size, *master; /* shoal node */
    const char *nodes, *transport;    /* shoal run */
} args_t;

/* Parses a command's arguments; returns -1 when fine, else the exit status (the
 * error already printed). accept (OPT_*) picks which options exist. */
static int
parse_args(const char *command, int argc, char **argv, args_t *a, int accept)
{
    int accept_train = accept & OPT_TRAIN, accept_eval = accept & OPT_EVAL;
    int accept_node = accept & OPT_NODE, accept_run = accept & OPT_RUN;

    memset(a, 0, sizeof *a);
    a->sets = calloc((size_t)argc + 1, sizeof *a->sets);
    if (!a->sets) {
        fprintf(stderr, "shoal: out of memory\n");
        return SL_EXIT_RUNTIME;
    }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v;
        int m;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return -1;
        }
        if ((v = sl_cli_option_value(argc, argv, &i, "--set", &m)) != NULL || m) {
            if (!v)
                return sl_cmd_usage(command, "option '--set' needs KEY=VALUE");
            a->sets[a->nsets++] = v;
        } else if (accept_eval &&
                   ((v = sl_cli_option_value(argc, argv, &i, "--checkpoint", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--checkpoint' needs a FILE");
            a->checkpoint = v;
        } else if (accept_eval && ((v = sl_cli_option_value(argc, argv, &i, "--split", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--split' needs valid or test");
            if (strcmp(v, "valid") != 0 && strcmp(v, "test") != 0)
                return sl_cmd_usage(command, "--split must be valid or test, not '%s'", v);
            a->split = v;
        } else if (accept_node && ((v = sl_cli_option_value(argc, argv, &i, "--rank", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--rank' needs a number");
            a->rank = v;
        } else if (accept_node && ((v = sl_cli_option_value(argc, argv, &i, "--size", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--size' needs a number");
            a->size = v;
        } else if (accept_node &&
                   ((v = sl_cli_option_value(argc, argv, &i, "--master", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--master' needs HOST:PORT");
            a->master = v;
        } else if (accept_run &&
                   (((v = sl_cli_option_value(argc, argv, &i, "-n", &m)) || m) ||
                    ((v = sl_cli_option_value(argc, argv, &i, "--nodes", &m)) || m))) {
            if (!v)
                return sl_cmd_usage(command, "option '%s' needs a number", arg);
            a->nodes = v;
        } else if (accept_run &&
                   ((v = sl_cli_option_value(argc, argv, &i, "--transport", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--transport' needs ipc or tcp");
            if (strcmp(v, "ipc") != 0 && strcmp(v, "tcp") != 0)
                return sl_cmd_usage(command, "--transport must be ipc or tcp, not '%s'", v);
            a->transport = v;
        } else if ((accept & OPT_INIT) &&
                   ((v = sl_cli_option_value(argc, argv, &i, "--init", &m)) || m)) {
            if (!v)
                return sl_cmd_usage(command, "option '--init' needs a FILE");
            a->init = v;
        } else if (accept_train && strcmp(arg, "--no-resume") == 0) {
            a->no_resume = 1;
        } else if (accept_train && strcmp(arg, "--quiet") == 0) {
            a->quiet = 1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return sl_cmd_usage(command, "unknown option '%s'", arg);
        } else if (a->conf) {
            return sl_cmd_usage(command, "unexpected argument '%s'", arg);
        } else {
            a->conf = arg;
        }
    }
    if (!a->conf)
        return sl_cmd_usage(command, "missing CONF.yaml");
    if (!a->split)
        a->split = "valid";
    return -1;
}

/* Defaults, the file (here, else an installed example), the --set overrides in order,
 * then the cross-field checks. */
static int
load_config(sl_config_t *cfg, const args_t *a)
{
    sl_status_t rc;
    char *path = NULL;

    sl_config_init(cfg);
    rc = sl_config_find_file(a->conf, &path);
    if (rc == SL_OK && strcmp(path, a->conf) != 0)
        sl_log_info("config", "%s is not here: using the installed example %s", a->conf, path);
    if (rc == SL_OK)
        rc = sl_config_load_file(cfg, path);
    free(path);
    for (int i = 0; rc == SL_OK && i < a->nsets; i++)
        rc = sl_config_set(cfg, a->sets[i]);
    if (rc == SL_OK)
        rc = sl_config_validate(cfg);
    if (rc != SL_OK) {
        fprintf(stderr, "shoal: %s\n", sl_err_msg());
        sl_config_fini(cfg);
        return SL_EXIT_USAGE;
    }
    return -1;
}

/* Installs handler for the signals that stop a run with its checkpoint: SIGINT,
 * SIGTERM, and SIGHUP (the terminal closed) unless it is ignored, as under nohup.
 * shoal train and node stop at once on a second signal (SA_RESETHAND); shoal run
 * counts them (the first is passed on, a second kills the nodes) and stays alive to
 * clean up. */
static void
catch_stop_signals(void (*handler)(int), int flags)
{
    struct sigaction sa, hup;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN)
        sigaction(SIGHUP, &sa, NULL);
}

static int
exit_status(sl_status_t rc)
{
    if (rc == SL_OK || rc == SL_ERR_ENDED) /* a node with nothing to come back to */
        return SL_EXIT_OK;
    return rc == SL_ERR_CONFIG ? SL_EXIT_USAGE : SL_EXIT_RUNTIME;
}

/* "; valid ppl 245.31" (or bpc at character level); nothing when absent. */
static void
print_split(const char *split, int has, double loss, sl_level_t level)
{
    if (!has)
        return;
    if (level == SL_LEVEL_CHAR)
        printf("; %s bpc %.3f", split, loss / log(2.0));
    else
        printf("; %s ppl %.2f", split, exp(loss));
}

/* "shoal: <who>done: ..." (who is "" or "node 2: "). */
static void
print_done(const char *who, const sl_train_result_t *r)
{
    char took[32], epochs[32];

    if (fabs(r->epochs - floor(r->epochs + 0.5)) < 1e-9)
        snprintf(epochs, sizeof epochs, "%.0f epoch%s", r->epochs,
                 fabs(r->epochs - 1) < 1e-9 ? "" : "s");
    else
        snprintf(epochs, sizeof epochs, "%.2f epochs", r->epochs);
    sl_clock_format_duration(r->train_time_s, took, sizeof took);
    printf("shoal: %sdone: %s, %ld step%s in %s, %.0f tokens/s", who, epochs, r->steps,
           r->steps == 1 ? "" : "s", took, r->tokens_per_s);
    print_split("valid", r->has_valid, r->valid_loss, r->level);
    print_split("test", r->has_test, r->test_loss, r->level);
    printf("; model %s\n", r->model);
    fflush(stdout);
}

static int
cmd_train(int argc, char **argv)
{
    args_t a;
    sl_config_t cfg;
    sl_train_opts_t opts;
    sl_train_result_t res;
    sl_status_t rc;
    int ex = parse_args("train", argc, argv, &a, OPT_TRAIN | OPT_INIT);

    if (ex < 0 && a.help) {
        fputs(sl_help_text("train"), stdout);
        ex = SL_EXIT_OK;
    }
    if (ex >= 0 || (ex = load_config(&cfg, &a)) >= 0) {
        free(a.sets);
        return ex;
    }
    if (cfg.cluster.nodes > 1)
        sl_log_warn("train",
                    "cluster.nodes is %d, but shoal train trains one node on all the "
                    "data, with all of train.global_batch if given (shoal run and shoal node "
                    "start several)",
                    cfg.cluster.nodes);
    /* as a --set, so that train.batch follows a train.global_batch */
    if (cfg.cluster.nodes != 1 && sl_config_set(&cfg, "cluster.nodes=1") != SL_OK) {
        fprintf(stderr, "shoal: train: %s\n", sl_err_msg());
        sl_config_fini(&cfg);
        free(a.sets);
        return SL_EXIT_USAGE;
    }
    sl_train_opts_init(&opts);
    opts.resume = cfg.run.resume && !a.no_resume;
    opts.quiet = a.quiet;
    opts.init = a.init;
    opts.interrupt = &stop_requested;
    catch_stop_signals(on_stop_signal, SA_RESETHAND);

    rc = sl_train_run(&cfg, &opts, &res);
    if (rc == SL_OK) {
        print_done("", &res);
        ex = SL_EXIT_OK;
    } else if (rc == SL_ERR_SHUTDOWN) {
        if (access(res.checkpoint, F_OK) == 0)
            fprintf(stderr,
                    "shoal: interrupted at step %ld; checkpoint saved to %s; run the same "
                    "command to resume\n",
                    res.steps, res.checkpoint);
        else
            fprintf(stderr, "shoal: interrupted before the first checkpoint\n");
        ex = SL_EXIT_INTERRUPTED;
    } else {
        fprintf(stderr, "shoal: %s\n", sl_err_msg());
        ex = exit_status(rc);
    }
    sl_config_fini(&cfg);
    free(a.sets);
    return ex;
}

static int
cmd_eval(int argc, char **argv)
{
    args_t a;
    sl_config_t cfg;
    sl_eval_result_t res;
    sl_status_t rc;
    int ex = parse_args("eval", argc, argv, &a, OPT_EVAL);

    if (ex < 0 && a.help) {
        fputs(sl_help_text("eval"), stdout);
        ex = SL_EXIT_OK;
    }
    if (ex >= 0 || (ex = load_config(&cfg, &a)) >= 0) {
        free(a.sets);
        return ex;
    }
    rc = sl_eval_run(&cfg, a.checkpoint, a.split, &res);
    if (rc == SL_OK) {
        if (res.level == SL_LEVEL_CHAR)
            printf("%s bpc %.3f (loss %.4f, %ld tokens)\n", a.split, res.loss / log(2.0), res.loss,
                   res.tokens);
        else
            printf("%s ppl %.2f (loss %.4f, %ld tokens)\n", a.split, exp(res.loss), res.loss,
                   res.tokens);
        printf("vocabulary: %s\n", res.vocab);
    } else {
        fprintf(stderr, "shoal: %s\n", sl_err_msg());
    }
    sl_config_fini(&cfg);
    free(a.sets);
    return exit_status(rc);
}

/* ---- shoal node ---- */

/* A decimal integer in [lo, hi] (no sign, no spaces); 0 when s is not one. */
static int
parse_count(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v;

    if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 9)
        return 0;
    v = strtol(s, &end, 10);
    if (v < lo || v > hi)
        return 0;
    *out = (int)v;
    return 1;
}

/* Rank and size of this node: the flags, else the launcher's (env), else (size only)
 * cluster.nodes; cluster.nodes auto becomes the size. Returns -1 when fine, else the
 * exit status (error printed). */
static int
node_rank_size(const args_t *a, sl_config_t *cfg, const sl_launcher_env_t *env, sl_status_t env_st,
               int *rank, int *size)
{
    const char *rank_s = a->rank, *size_s = a->size;
    const char *rank_from = "--rank", *size_from = "--size";
    char num[32];

    if ((!rank_s || !size_s) && env_st != SL_OK) {
        fprintf(stderr, "shoal: node: %s\n", sl_err_msg());
        return SL_EXIT_USAGE;
    }
    if (env->launcher != SL_LAUNCHER_NONE) {
        if (!rank_s) {
            snprintf(num, sizeof num, "%d", env->rank);
            rank_s = num;
            rank_from = env->rank_var;
        }
        if (!size_s) {
            *size = env->size;
            size_from = env->size_var;
        }
    }
    if (!rank_s)
        return sl_cmd_usage("node", "no rank: give --rank R --size N, or start shoal node with "
                                    "srun, mpirun or torchrun (SLURM_PROCID, "
                                    "OMPI_COMM_WORLD_RANK, PMI_RANK or RANK)");
    if (!size_s && env->launcher == SL_LAUNCHER_NONE) {
        if (cfg->cluster.nodes == SL_CONFIG_AUTO_INT)
            return sl_cmd_usage("node", "cluster.nodes is auto, but no launcher gives the number "
                                        "of nodes: give --size N, or start shoal node with srun, "
                                        "mpirun or torchrun");
        *size = cfg->cluster.nodes;
        size_from = "cluster.nodes";
    } else if (size_s && !parse_count(size_s, 1, SL_LAUNCHER_MAX_SIZE, size)) {
        fprintf(stderr, "shoal: node: %s '%s' is not a number of nodes (1 to %d)\n", size_from,
                size_s, SL_LAUNCHER_MAX_SIZE);
        return SL_EXIT_USAGE;
    }
    if (!parse_count(rank_s, 0, SL_LAUNCHER_MAX_SIZE - 1, rank) || *rank >= *size) {
        fprintf(stderr, "shoal: node: %s '%s' is not a rank of %d nodes (0 to %d)\n", rank_from,
                rank_s, *size, *size - 1);
        return SL_EXIT_USAGE;
    }
    if (cfg->cluster.nodes == SL_CONFIG_AUTO_INT) {
        /* before the run id hashes the configuration; as a --set, so that train.batch
           follows a train.global_batch */
        snprintf(num, sizeof num, "cluster.nodes=%d", *size);
        if (sl_config_set(cfg, num) != SL_OK || sl_config_validate(cfg) != SL_OK) {
            fprintf(stderr, "shoal: node: %s\n", sl_err_msg());
            return SL_EXIT_USAGE;
        }
        sl_log_debug("node", "cluster.nodes auto: %d nodes (%s)", *size, size_from);
    }
    if (*size != cfg->cluster.nodes) {
        fprintf(stderr,
                "shoal: node: %s %d disagrees with cluster.nodes %d; start %d nodes or add "
                "--set cluster.nodes=%d (or auto)\n",
                size_from, *size, cfg->cluster.nodes, cfg->cluster.nodes, *size);
        return SL_EXIT_USAGE;
    }
    return -1;
}

/* Rank 0's rendezvous address: --master, SHOAL_MASTER_ADDR/PORT, cluster.master, else
 * the launcher's (torchrun's MASTER_ADDR/PORT, a Slurm job's first host).
 * Returns -1 when fine (buf filled), else the exit status (error printed). */
static int
node_master(const args_t *a, const sl_config_t *cfg, const sl_launcher_env_t *env, char *buf,
            size_t size)
{
    const char *addr = getenv("SHOAL_MASTER_ADDR"), *port = getenv("SHOAL_MASTER_PORT");
    char what[96] = "--master", host[256];
    int p, found = 0;

    if (a->master) {
        snprintf(buf, size, "%s", a->master);
    } else if (addr || port) {
        if (!addr || !port || !*addr || !*port) {
            fprintf(stderr, "shoal: node: %s is set but %s is not; set both\n",
                    addr ? "SHOAL_MASTER_ADDR" : "SHOAL_MASTER_PORT",
                    addr ? "SHOAL_MASTER_PORT" : "SHOAL_MASTER_ADDR");
            return SL_EXIT_USAGE;
        }
        snprintf(buf, size, "%s:%s", addr, port);
        snprintf(what, sizeof what, "SHOAL_MASTER_ADDR:SHOAL_MASTER_PORT");
    } else if (cfg->cluster.master[0]) {
        snprintf(buf, size, "%s", cfg->cluster.master);
        snprintf(what, sizeof what, "cluster.master");
    } else {
        if (sl_launcher_env_master((const char *const *)environ, env->launcher, &found, host,
                                   sizeof host, &p, what, sizeof what) != SL_OK) {
            fprintf(stderr, "shoal: node: %s\n", sl_err_msg());
            return SL_EXIT_USAGE;
        }
        if (!found)
            return sl_cmd_usage("node", "no master address: give --master HOST:PORT, set "
                                        "SHOAL_MASTER_ADDR and SHOAL_MASTER_PORT, or "
                                        "cluster.master (srun and torchrun give one)");
        snprintf(buf, size, "%s:%d", host, p);
        sl_log_debug("node", "rendezvous at %s (%s)", buf, what);
    }
    if (sl_parse_host_port(buf, what, 0, host, sizeof host, &p) != SL_OK) {
        fprintf(stderr, "shoal: node: %s\n", sl_err_msg());
        return SL_EXIT_USAGE;
    }
    /* loopback only, the default, cannot work across machines: say so early */
    if (strncmp(cfg->cluster.bind, "127.", 4) == 0 && strncmp(host, "127.", 4) != 0 &&
        strcmp(host, "localhost") != 0)
        sl_log_warn("node",
                    "cluster.bind is %s: nodes on other machines cannot reach this one "
                    "(set cluster.bind to this machine's address, an interface name or *)",
                    cfg->cluster.bind);
    return -1;
}

static int
cmd_node(int argc, char **argv)
{
    static char tag[32];
    args_t a;
    sl_config_t cfg;
    sl_node_opts_t opts;
    sl_node_result_t res;
    sl_status_t rc;
    sl_launcher_env_t env;
    sl_status_t env_st;
    char master[320] = "", who[32];
    int rank = 0, size = 1;
    int ex = parse_args("node", argc, argv, &a, OPT_TRAIN | OPT_NODE | OPT_INIT);

    if (ex < 0 && a.help) {
        fputs(sl_help_text("node"), stdout);
        ex = SL_EXIT_OK;
    }
    if (ex >= 0 || (ex = load_config(&cfg, &a)) >= 0) {
        free(a.sets);
        return ex;
    }
    env_st = sl_launcher_env_parse((const char *const *)environ, &env);
    if ((ex = node_rank_size(&a, &cfg, &env, env_st, &rank, &size)) >= 0 ||
        (size > 1 && (ex = node_master(&a, &cfg, &env, master, sizeof master)) >= 0)) {
        sl_config_fini(&cfg);
        free(a.sets);
        return ex;
    }
    snprintf(tag, sizeof tag, "node %d", rank);
    snprintf(who, sizeof who, "node %d: ", rank);
    sl_log_set_tag(tag);
    sl_node_opts_init(&opts);
    opts.rank = rank;
    opts.size = size;
    opts.master = master;
    opts.resume = cfg.run.resume && !a.no_resume;
    opts.init = a.init;
    opts.quiet = a.quiet || rank != 0;
    opts.run_rate = 1;
    opts.interrupt = &stop_requested;
    catch_stop_signals(on_stop_signal, SA_RESETHAND);

    rc = sl_node_run(&cfg, &opts, &res);
    if (rc == SL_OK) {
        print_done(who, &res.train);
        if (rank == 0 && size > 1) {
            printf("shoal: %srun: %d nodes, %.0f tokens/s in all", who, size, res.run_tokens_per_s);
            if (res.run_reported < size)
                printf(" (the %d that told theirs)", res.run_reported);
            printf("\n");
            fflush(stdout);
        }
        ex = SL_EXIT_OK;
    } else if (rc == SL_ERR_SHUTDOWN && !res.peer_stopped && res.trained &&
               access(res.train.checkpoint, F_OK) == 0) {
        fprintf(stderr,
                "shoal: %sinterrupted at step %ld; checkpoint saved to %s; run the same job "
                "to resume\n",
                who, res.train.steps, res.train.checkpoint);
        ex = SL_EXIT_INTERRUPTED;
    } else {
        fprintf(stderr, "shoal: %s%s\n", who, sl_err_msg());
        ex = rc == SL_ERR_SHUTDOWN ? (res.peer_stopped ? SL_EXIT_RUNTIME : SL_EXIT_INTERRUPTED)
                                   : exit_status(rc);
    }
    sl_config_fini(&cfg);
    free(a.sets);
    return ex;
}

/* ---- shoal run ---- */

/* -n, --transport, and loopback only: applied as --set would be, then validated. */
static int
run_overrides(const args_t *a, sl_config_t *cfg)
{
    char nodes[64], transport[64];
    sl_status_t rc = SL_OK;
    int n;

    if (!a->nodes && cfg->cluster.nodes == SL_CONFIG_AUTO_INT)
        return sl_cmd_usage("run", "cluster.nodes is auto (the launcher's, for shoal node): give "
                                   "-n N");
    if (a->nodes) {
        if (!parse_count(a->nodes, 1, 1024, &n))
            return sl_cmd_usage("run", "-n must be a number of nodes, 1 to 1024, not '%s'",
                                a->nodes);
        snprintf(nodes, sizeof nodes, "cluster.nodes=%d", n);
        rc = sl_config_set(cfg, nodes);
    }
    if (rc == SL_OK && a->transport) {
        snprintf(transport, sizeof transport, "cluster.transport=%s", a->transport);
        rc = sl_config_set(cfg, transport);
    }
    if (rc == SL_OK)
        rc = sl_config_set(cfg, "cluster.bind=127.0.0.1");
    if (rc == SL_OK)
        rc = sl_config_validate(cfg);
    if (rc != SL_OK) {
        fprintf(stderr, "shoal: run: %s\n", sl_err_msg());
        return exit_status(rc);
    }
    return -1;
}

/* After an interrupt: where the checkpoints are, or which node had none yet. */
static void
print_run_interrupted(const sl_launch_result_t *r)
{
    const char *dir = NULL;

    for (int i = 0; i < r->nodes; i++) {
        const sl_launch_node_t *n = &r->node[i];
        if (!n->has_train || access(n->train.checkpoint, F_OK) != 0) {
            fprintf(stderr, "shoal: interrupted; node %d had no checkpoint yet\n", i);
            return;
        }
        if (!dir)
            dir = n->train.run_dir;
    }
    fprintf(stderr,
            "shoal: interrupted; every node saved its checkpoint under %s; run the same "
            "command to resume\n",
            dir ? dir : "the run directory");
}

static int
cmd_run(int argc, char **argv)
{
    args_t a;
    sl_config_t cfg;
    sl_launch_opts_t opts;
    sl_launch_result_t res;
    sl_status_t rc;
    int ex = parse_args("run", argc, argv, &a, OPT_TRAIN | OPT_RUN | OPT_INIT);

    if (ex < 0 && a.help) {
        fputs(sl_help_text("run"), stdout);
        ex = SL_EXIT_OK;
    }
    if (ex >= 0 || (ex = load_config(&cfg, &a)) >= 0) {
        free(a.sets);
        return ex;
    }
    if ((ex = run_overrides(&a, &cfg)) >= 0) {
        sl_config_fini(&cfg);
        free(a.sets);
        return ex;
    }
    sl_launch_opts_init(&opts);
    opts.resume = cfg.run.resume && !a.no_resume;
    opts.init = a.init;
    opts.quiet = a.quiet;
    opts.interrupt = &stop_count;
    opts.out = stderr;
    catch_stop_signals(on_run_signal, 0);

    rc = sl_launch_run(&cfg, &opts, &res);
    if (rc == SL_OK) {
        const sl_train_result_t *fin = NULL;
        double rate = 0;
        for (int i = 0; i < res.nodes; i++) {
            char who[32];
            if (res.node[i].outcome == SL_NODE_LEFT_OUT) {
                printf("shoal: node %d: left out: the run ended without it (see above)\n", i);
                continue;
            }
            snprintf(who, sizeof who, "node %d: ", i);
            print_done(who, &res.node[i].train);
            rate += res.node[i].train.tokens_per_s;
            if (res.node[i].train.final_models > 0)
                fin = &res.node[i].train;
        }
        printf("shoal: done: %d node%s, %.0f tokens/s in all", res.nodes, res.nodes == 1 ? "" : "s",
               rate);
        if (fin) {
            printf("; final model averages %d nodes", fin->final_models);
            print_split("valid", fin->has_valid, fin->final_valid_loss, fin->level);
            print_split("test", fin->has_test, fin->final_test_loss, fin->level);
            printf("; model %s/model.bin\n", fin->run_dir);
        } else {
            printf("; run directory %s\n", res.node[0].train.run_dir);
        }
        fflush(stdout);
        ex = SL_EXIT_OK;
    } else if (rc == SL_ERR_SHUTDOWN && stop_count > 0) {
        print_run_interrupted(&res);
        ex = SL_EXIT_INTERRUPTED;
    } else {
        fprintf(stderr, "shoal: %s\n", sl_err_msg());
        ex = exit_status(rc);
    }
    sl_launch_result_fini(&res);
    sl_config_fini(&cfg);
    free(a.sets);
    return ex;
}

static int cmd_help(const char *command);

/* shoal keygen FILE: a new run secret, mode 0600. */
static int
cmd_keygen(int argc, char **argv)
{
    sl_secret_t secret;
    sl_status_t st;

    if (argc == 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0))
        return cmd_help("keygen");
    if (argc != 1 || argv[0][0] == '-' || !argv[0][0])
        return sl_cmd_usage("keygen", argc == 0 ? "missing FILE" : "expects one FILE");
    st = sl_secret_make(&secret);
    if (st == SL_OK)
        st = sl_secret_write(argv[0], &secret);
    sl_secret_wipe(&secret);
    if (st != SL_OK) {
        fprintf(stderr, "shoal: keygen: %s\n", sl_err_msg());
        return exit_status(st);
    }
    printf("shoal: keygen: wrote a new run secret to %s (mode 0600); set cluster.key_file: %s\n",
           argv[0], argv[0]);
    return SL_EXIT_OK;
}

static int
cmd_help(const char *command)
{
    const char *text = sl_help_text(command);

    if (!text) {
        fprintf(stderr, "shoal: help: unknown command '%s' (see shoal --help)\n", command);
        return SL_EXIT_USAGE;
    }
    fputs(text, stdout);
    return SL_EXIT_OK;
}

/* Denormal floats flushed to zero and read as zero (FTZ and DAZ in the MXCSR) on this
 * thread and on every thread it starts (the CPU backend's pool, the nodes shoal run
 * forks). Long runs drift into denormals (sigmoid gates near 0 or 1, block momentum
 * decaying), and on some x86 cores each such operation costs about a hundred cycles: a
 * 3-node BMUF run of check_rejoin's tiny model took 47 s on an Intel Xeon against 3.6 s
 * flushed, its valid ppl the same to the second decimal. As PyTorch
 * (set_flush_denormal) and TensorFlow do; BLAS threads started before main keep the
 * default mode. */
static void
flush_denormals(void)
{
#if defined(__SSE2__)
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

int
main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;

    flush_denormals();
    sl_log_init();
    sl_alloc_keep_large_blocks(); /* inherited by the nodes shoal run forks */
    if (!cmd) {
        fprintf(stderr, "shoal: missing command (see shoal --help)\n");
        return SL_EXIT_USAGE;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return cmd_help(NULL);
    if (strcmp(cmd, "--version") == 0) {
        if (sl_version_print(stdout) != SL_OK) {
            fprintf(stderr, "shoal: %s\n", sl_err_msg());
            return SL_EXIT_USAGE;
        }
        return SL_EXIT_OK;
    }
    if (strcmp(cmd, "--help-config") == 0) {
        sl_config_print_schema(stdout);
        return SL_EXIT_OK;
    }
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "score") == 0)
        return sl_cmd_score(argc - 2, argv + 2);
    if (strcmp(cmd, "sample") == 0)
        return sl_cmd_sample(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "node") == 0)
        return cmd_node(argc - 2, argv + 2);
    if (strcmp(cmd, "keygen") == 0)
        return cmd_keygen(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0)
        return sl_cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0)
        return sl_cmd_plot(argc - 2, argv + 2);
    if (strcmp(cmd, "help") == 0) {
        if (argc > 3) {
            fprintf(stderr, "shoal: help: unexpected argument '%s' (see shoal help --help)\n",
                    argv[3]);
            return SL_EXIT_USAGE;
        }
        return argc > 2 && strcmp(argv[2], "--help") != 0 && strcmp(argv[2], "-h") != 0
                   ? cmd_help(argv[2])
                   : cmd_help(argc > 2 ? "help" : NULL);
    }
    if (cmd[0] == '-')
        fprintf(stderr, "shoal: unknown option '%s' (see shoal --help)\n", cmd);
    else
        fprintf(stderr, "shoal: unknown command '%s' (see shoal --help)\n", cmd);
    return SL_EXIT_USAGE;
}
