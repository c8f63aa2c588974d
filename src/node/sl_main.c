/* The shoal command line: train, eval, help. The only place that prints errors and
 * exits: every error is one line "shoal: <message>" on stderr. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sl_clock.h"
#include "sl_config.h"
#include "sl_log.h"
#include "sl_status.h"
#include "sl_train.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

static volatile sig_atomic_t stop_requested;

static void
on_stop_signal(int sig)
{
    stop_requested = sig;
}

static const char main_help[] =
    "Usage: shoal COMMAND [ARGS]...\n"
    "       shoal --help | --version | --help-config\n"
    "\n"
    "Train LSTM language models (word or character level) and evaluate them.\n"
    "\n"
    "Commands:\n"
    "  train CONF.yaml   train the model CONF.yaml describes; continues from the run\n"
    "                    directory's checkpoint when there is one\n"
    "  eval CONF.yaml    evaluate a checkpoint or model file on the valid or test split\n"
    "  help [COMMAND]    show this help, or the help of COMMAND\n"
    "\n"
    "Options:\n"
    "  -h, --help        show this help and exit\n"
    "      --version     show the version and exit\n"
    "      --help-config list every configuration key: type, default, meaning\n"
    "\n"
    "Run 'shoal help COMMAND' or 'shoal COMMAND --help' for a command's options.\n"
    "\n"
    "Examples:\n"
    "  shoal train conf/brown-word.yaml\n"
    "  shoal train conf/brown-word.yaml --set train.epochs=3 --set run.name=brown3\n"
    "  shoal eval conf/brown-word.yaml --checkpoint runs/brown-word/model.bin --split test\n"
    "\n"
    "Files (in the run directory: run.dir, default runs/<run.name>):\n"
    "  config.yaml      the resolved configuration of the run\n"
    "  checkpoint.bin   latest checkpoint: parameters, optimizer and hidden state,\n"
    "                   data position; written atomically\n"
    "  model.bin        the final model (same format; shoal eval --checkpoint reads both)\n"
    "  metrics.jsonl    one JSON object per report and per evaluation\n"
    "  summary.json     final figures: steps, tokens/s, losses, perplexities, memory\n"
    "\n"
    "Environment:\n"
    "  SHOAL_LOG        log level on stderr: debug, info (default), warn, error, quiet\n"
    "\n"
    "Exit status:\n"
    "  0    success\n"
    "  1    runtime error (data, checkpoint, I/O, numerical)\n"
    "  2    usage or configuration error\n"
    "  130  interrupted (SIGINT or SIGTERM); the checkpoint is saved: run the same\n"
    "       command again to resume\n"
    "\n"
    "See shoal(1) for details.\n";

static const char train_help[] =
    "Usage: shoal train CONF.yaml [--set KEY=VALUE]... [--no-resume] [--quiet]\n"
    "\n"
    "Train the model CONF.yaml describes on this machine. The run directory (run.dir,\n"
    "default runs/<run.name>) receives config.yaml, checkpoint.bin, model.bin,\n"
    "metrics.jsonl and summary.json. When it already holds a checkpoint.bin of the same\n"
    "model and data, training continues from it, exactly as if never stopped.\n"
    "\n"
    "Options:\n"
    "  --set KEY=VALUE   override a configuration key (repeatable, applied in order\n"
    "                    after the file); VALUE is YAML: --set train.batch=64,\n"
    "                    --set 'model.layers=[{lstm: 512}]'\n"
    "  --no-resume       start from step 0 even if a checkpoint exists (it is\n"
    "                    replaced at the next checkpoint)\n"
    "  --quiet           no progress line on stderr\n"
    "  -h, --help        show this help and exit\n"
    "\n"
    "Progress goes to stderr (one line rewritten in place on a terminal, else one line\n"
    "every run.log_every steps); the last line, on stdout, sums the run up:\n"
    "  shoal: done: 1 epoch, 852 steps in 4m12s, 3790 tokens/s; valid ppl 245.31; ...\n"
    "SIGINT or SIGTERM stops after the current step with a checkpoint (exit 130).\n"
    "\n"
    "Examples:\n"
    "  shoal train conf/brown-word.yaml\n"
    "  shoal train conf/brown-word.yaml --set train.max_steps=200 --set run.name=smoke\n"
    "  SHOAL_LOG=warn shoal train conf/brown-word.yaml --quiet\n";

static const char eval_help[] =
    "Usage: shoal eval CONF.yaml --checkpoint FILE [--split valid|test] [--set KEY=VALUE]...\n"
    "\n"
    "Evaluate the parameters in FILE (a checkpoint.bin or model.bin of a run with the\n"
    "same model and data settings) on a split of the corpus CONF.yaml names, with the\n"
    "full softmax, and print e.g.\n"
    "  valid ppl 245.31 (loss 5.5025, 57576 tokens)\n"
    "(bits per character, bpc, for character-level models).\n"
    "\n"
    "Options:\n"
    "  --checkpoint FILE  the checkpoint or model file to evaluate (required)\n"
    "  --split SPLIT      valid (default) or test\n"
    "  --set KEY=VALUE    override a configuration key (repeatable)\n"
    "  -h, --help         show this help and exit\n"
    "\n"
    "Example:\n"
    "  shoal eval runs/brown-word/config.yaml --checkpoint runs/brown-word/model.bin\n";

static const char help_help[] = "Usage: shoal help [COMMAND]\n"
                                "\n"
                                "Show the help of shoal, or of COMMAND (train, eval, help).\n";

typedef struct {
    const char *conf;
    const char *checkpoint;
    const char *split;
    const char **sets;
    int nsets;
    int no_resume;
    int quiet;
    int help;
} args_t;

static int usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "shoal: train: unknown option '--foo' (see shoal train --help)"; returns 2. */
static int
usage_error(const char *command, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "shoal: %s: %s (see shoal %s --help)\n", command, msg, command);
    return EXIT_USAGE;
}

/* The value of an option given as "--opt VALUE" or "--opt=VALUE"; NULL if absent. */
static const char *
option_value(int argc, char **argv, int *i, const char *name, int *matched)
{
    size_t n = strlen(name);

    *matched = 0;
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=') {
        *matched = 1;
        return argv[*i] + n + 1;
    }
    if (argv[*i][n] != '\0')
        return NULL;
    *matched = 1;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

/* Parses a command's arguments; returns -1 when fine, else the exit status (the
 * error already printed). accept_train / accept_eval pick which options exist. */
static int
parse_args(const char *command, int argc, char **argv, args_t *a, int accept_train, int accept_eval)
{
    memset(a, 0, sizeof *a);
    a->sets = calloc((size_t)argc + 1, sizeof *a->sets);
    if (!a->sets) {
        fprintf(stderr, "shoal: out of memory\n");
        return EXIT_RUNTIME;
    }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *v;
        int m;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return -1;
        }
        if ((v = option_value(argc, argv, &i, "--set", &m)) != NULL || m) {
            if (!v)
                return usage_error(command, "option '--set' needs KEY=VALUE");
            a->sets[a->nsets++] = v;
        } else if (accept_eval && ((v = option_value(argc, argv, &i, "--checkpoint", &m)) || m)) {
            if (!v)
                return usage_error(command, "option '--checkpoint' needs a FILE");
            a->checkpoint = v;
        } else if (accept_eval && ((v = option_value(argc, argv, &i, "--split", &m)) || m)) {
            if (!v)
                return usage_error(command, "option '--split' needs valid or test");
            if (strcmp(v, "valid") != 0 && strcmp(v, "test") != 0)
                return usage_error(command, "--split must be valid or test, not '%s'", v);
            a->split = v;
        } else if (accept_train && strcmp(arg, "--no-resume") == 0) {
            a->no_resume = 1;
        } else if (accept_train && strcmp(arg, "--quiet") == 0) {
            a->quiet = 1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return usage_error(command, "unknown option '%s'", arg);
        } else if (a->conf) {
            return usage_error(command, "unexpected argument '%s'", arg);
        } else {
            a->conf = arg;
        }
    }
    if (!a->conf)
        return usage_error(command, "missing CONF.yaml");
    if (accept_eval && !a->checkpoint)
        return usage_error(command, "missing --checkpoint FILE");
    if (!a->split)
        a->split = "valid";
    return -1;
}

/* Defaults, the file, the --set overrides in order, then the cross-field checks. */
static int
load_config(sl_config_t *cfg, const args_t *a)
{
    sl_status_t rc;

    sl_config_init(cfg);
    rc = sl_config_load_file(cfg, a->conf);
    for (int i = 0; rc == SL_OK && i < a->nsets; i++)
        rc = sl_config_set(cfg, a->sets[i]);
    if (rc == SL_OK)
        rc = sl_config_validate(cfg);
    if (rc != SL_OK) {
        fprintf(stderr, "shoal: %s\n", sl_err_msg());
        sl_config_fini(cfg);
        return EXIT_USAGE;
    }
    return -1;
}

static void
install_stop_handlers(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* a second signal stops at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int
exit_status(sl_status_t rc)
{
    if (rc == SL_OK)
        return EXIT_OK;
    return rc == SL_ERR_CONFIG ? EXIT_USAGE : EXIT_RUNTIME;
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

static void
print_done(const sl_train_result_t *r)
{
    char took[32], epochs[32];

    if (fabs(r->epochs - floor(r->epochs + 0.5)) < 1e-9)
        snprintf(epochs, sizeof epochs, "%.0f epoch%s", r->epochs,
                 fabs(r->epochs - 1) < 1e-9 ? "" : "s");
    else
        snprintf(epochs, sizeof epochs, "%.2f epochs", r->epochs);
    sl_clock_format_duration(r->train_time_s, took, sizeof took);
    printf("shoal: done: %s, %ld step%s in %s, %.0f tokens/s", epochs, r->steps,
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
    int ex = parse_args("train", argc, argv, &a, 1, 0);

    if (ex < 0 && a.help) {
        fputs(train_help, stdout);
        ex = EXIT_OK;
    }
    if (ex >= 0 || (ex = load_config(&cfg, &a)) >= 0) {
        free(a.sets);
        return ex;
    }
    sl_train_opts_init(&opts);
    opts.resume = cfg.run.resume && !a.no_resume;
    opts.quiet = a.quiet;
    opts.interrupt = &stop_requested;
    install_stop_handlers();

    rc = sl_train_run(&cfg, &opts, &res);
    if (rc == SL_OK) {
        print_done(&res);
        ex = EXIT_OK;
    } else if (rc == SL_ERR_SHUTDOWN) {
        if (access(res.checkpoint, F_OK) == 0)
            fprintf(stderr,
                    "shoal: interrupted at step %ld; checkpoint saved to %s; run the same "
                    "command to resume\n",
                    res.steps, res.checkpoint);
        else
            fprintf(stderr, "shoal: interrupted before the first checkpoint\n");
        ex = EXIT_INTERRUPTED;
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
    int ex = parse_args("eval", argc, argv, &a, 0, 1);

    if (ex < 0 && a.help) {
        fputs(eval_help, stdout);
        ex = EXIT_OK;
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
    } else {
        fprintf(stderr, "shoal: %s\n", sl_err_msg());
    }
    sl_config_fini(&cfg);
    free(a.sets);
    return exit_status(rc);
}

static int
cmd_help(const char *command)
{
    if (!command)
        fputs(main_help, stdout);
    else if (strcmp(command, "train") == 0)
        fputs(train_help, stdout);
    else if (strcmp(command, "eval") == 0)
        fputs(eval_help, stdout);
    else if (strcmp(command, "help") == 0)
        fputs(help_help, stdout);
    else {
        fprintf(stderr, "shoal: help: unknown command '%s' (see shoal --help)\n", command);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

int
main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;

    sl_log_init();
    if (!cmd) {
        fprintf(stderr, "shoal: missing command (see shoal --help)\n");
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return cmd_help(NULL);
    if (strcmp(cmd, "--version") == 0) {
        printf("shoal %s\n", PACKAGE_VERSION);
        return EXIT_OK;
    }
    if (strcmp(cmd, "--help-config") == 0) {
        sl_config_print_schema(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "help") == 0) {
        if (argc > 3) {
            fprintf(stderr, "shoal: help: unexpected argument '%s' (see shoal help --help)\n",
                    argv[3]);
            return EXIT_USAGE;
        }
        return argc > 2 && strcmp(argv[2], "--help") != 0 && strcmp(argv[2], "-h") != 0
                   ? cmd_help(argv[2])
                   : cmd_help(argc > 2 ? "help" : NULL);
    }
    if (cmd[0] == '-')
        fprintf(stderr, "shoal: unknown option '%s' (see shoal --help)\n", cmd);
    else
        fprintf(stderr, "shoal: unknown command '%s' (see shoal --help)\n", cmd);
    return EXIT_USAGE;
}
