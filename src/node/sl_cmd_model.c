/* shoal score and shoal sample: argument parsing and printing around sl_score.h and
 * sl_generate.h on a model opened by sl_model_file.h. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_cmd.h"
#include "node/sl_cmd_model.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_cli.h"
#include "common/sl_file.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "node/sl_generate.h"
#include "node/sl_help.h"
#include "node/sl_model_file.h"
#include "node/sl_score.h"

static int
runtime_error(void)
{
    fprintf(stderr, "shoal: %s\n", sl_err_msg());
    return SL_EXIT_RUNTIME;
}

/* A whole decimal number in [lo, hi]. */
static int
parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int
parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    if (!*s || *s == '-')
        return 0;
    v = strtoull(s, &end, 10);
    if (*end || errno)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static int
parse_double(const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

/* Options both commands take. */
typedef struct {
    const char *device;
    long threads;
} device_opts_t;

/* argv[*i] as --device or --threads (consumed with its value): -1 when it is neither,
 * 0 when taken, else the exit status of a usage error (printed). */
static int
device_option(const char *command, int argc, char **argv, int *i, device_opts_t *d)
{
    const char *v;
    int m;

    if ((v = sl_cli_option_value(argc, argv, i, "--device", &m)) || m) {
        if (!v || !*v)
            return sl_cmd_usage(command, "option '--device' needs cpu, cuda or cuda:N");
        d->device = v;
        return 0;
    }
    if ((v = sl_cli_option_value(argc, argv, i, "--threads", &m)) || m) {
        if (!v || !parse_long(v, 0, 4096, &d->threads))
            return sl_cmd_usage(command,
                                "--threads must be a number from 0 (every core) to 4096, not '%s'",
                                v ? v : "");
        return 0;
    }
    return -1;
}

static int
wants_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* ---- shoal score ---- */

typedef struct {
    const char *file;
    sl_level_t level;
    int *header_done; /* the TSV header is written (once, for all the files) */
} line_ctx_t;

static void
print_header(sl_level_t level)
{
    printf("file\tline\ttokens\tloss\t%s\n", level == SL_LEVEL_CHAR ? "bpc" : "ppl");
}

static sl_status_t
print_line(void *ctx, long line, long tokens, double sum)
{
    const line_ctx_t *c = ctx;
    double loss = tokens > 0 ? sum / (double)tokens : NAN;

    if (!*c->header_done) { /* with the first row: an error before it leaves stdout empty */
        print_header(c->level);
        *c->header_done = 1;
    }
    printf("%s\t%ld\t%ld\t%.6f\t%.*f\n", c->file, line, tokens, loss,
           c->level == SL_LEVEL_CHAR ? 4 : 2,
           c->level == SL_LEVEL_CHAR ? loss / log(2.0) : exp(loss));
    return SL_OK;
}

/* A file's text, or stdin's for "-" (read to its end through a copy of the descriptor,
 * so that a second "-" reads nothing rather than a closed stream). */
static sl_status_t
read_input(const char *file, char **data, size_t *len)
{
    int fd;
    FILE *in;

    if (strcmp(file, "-") != 0)
        return sl_file_read_all(file, data, len);
    if ((fd = dup(STDIN_FILENO)) < 0 || !(in = fdopen(fd, "rb"))) {
        sl_status_t st = sl_err_set(SL_ERR_IO, "stdin: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    return sl_file_read_rest(in, "stdin", data, len);
}

/* Scores file as a whole, or line by line when header_done is not NULL (TSV rows). */
static sl_status_t
score_file(sl_model_file_t *m, const char *file, int *header_done)
{
    const char *name = strcmp(file, "-") == 0 ? "stdin" : file;
    sl_tokens_t tok;
    sl_score_t sc;
    char *data;
    size_t len;
    sl_status_t st;

    SL_TRY(read_input(file, &data, &len));
    if (header_done) {
        line_ctx_t c = {name, m->level, header_done};
        st = sl_score_lines(m->lm, m->vocab, m->level, name, data, len, m->cfg.train.bptt,
                            print_line, &c);
        free(data);
        return st;
    }
    st = sl_tokenize(m->vocab, m->level, name, data, len, 1, &tok);
    free(data);
    if (st != SL_OK)
        return st;
    st = sl_score_tokens(m->lm, &tok, sl_vocab_unk(m->vocab), m->cfg.train.bptt,
                         SL_MODEL_FILE_STREAMS, name, &sc);
    free(tok.ids);
    if (st != SL_OK)
        return st;
    if (m->level == SL_LEVEL_CHAR)
        printf("%s: bpc %.4f (loss %.6f nats, %ld of %ld characters scored, %ld <unk>)\n", name,
               sc.loss / log(2.0), sc.loss, sc.scored, sc.tokens, sc.unk);
    else
        printf("%s: ppl %.2f (loss %.6f, %ld of %ld tokens scored, %ld <unk>)\n", name,
               exp(sc.loss), sc.loss, sc.scored, sc.tokens, sc.unk);
    return SL_OK;
}

int
sl_cmd_score(int argc, char **argv)
{
    device_opts_t d = {NULL, 1};
    const char *model = NULL, **files;
    int nfiles = 0, per_line = 0, header_done = 0, ex = SL_EXIT_OK;
    sl_model_file_t m;
    char vocab[192];

    if (!(files = calloc((size_t)argc + 1, sizeof *files))) {
        fprintf(stderr, "shoal: out of memory\n");
        return SL_EXIT_RUNTIME;
    }
    for (int i = 0; i < argc; i++) {
        int r = device_option("score", argc, argv, &i, &d);
        if (r > 0) {
            free(files);
            return r;
        }
        if (r == 0)
            continue;
        if (wants_help(argv[i])) {
            free(files);
            fputs(sl_help_text("score"), stdout);
            return SL_EXIT_OK;
        } else if (strcmp(argv[i], "--per-line") == 0) {
            per_line = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            free(files);
            return sl_cmd_usage("score", "unknown option '%s'", argv[i]);
        } else if (!model) {
            model = argv[i];
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!model || nfiles == 0) {
        free(files);
        return sl_cmd_usage("score", model ? "missing FILE (give - for stdin)" : "missing MODEL");
    }
    if (sl_model_file_open(&m, model, d.device, (int)d.threads, 0) != SL_OK) {
        free(files);
        return runtime_error();
    }
    for (int i = 0; i < nfiles && ex == SL_EXIT_OK; i++)
        if (score_file(&m, files[i], per_line ? &header_done : NULL) != SL_OK)
            ex = runtime_error();
    if (per_line && !header_done && ex == SL_EXIT_OK) /* files without a line */
        print_header(m.level);
    fflush(stdout);
    /* after the results, so that an error stays the only line */
    sl_model_file_describe_vocab(&m, vocab, sizeof vocab);
    if (ex == SL_EXIT_OK)
        sl_log_info("score", "%s: text read with the vocabulary %s", model, vocab);
    sl_model_file_close(&m);
    free(files);
    return ex;
}

/* ---- shoal sample ---- */

static sl_status_t
print_token(void *ctx, int id, const char *text, size_t len)
{
    int *last_newline = ctx;

    (void)id;
    fwrite(text, 1, len, stdout);
    if (len > 0)
        *last_newline = text[len - 1] == '\n';
    return SL_OK;
}

/* The sample options from argv; -1 when fine, else the exit status (error printed). */
static int
parse_sample(int argc, char **argv, const char **model, sl_generate_opts_t *o, device_opts_t *d)
{
    for (int i = 0; i < argc; i++) {
        const char *v, *arg = argv[i];
        int m, r = device_option("sample", argc, argv, &i, d);

        if (r > 0)
            return r;
        if (r == 0)
            continue;
        if (wants_help(arg)) {
            fputs(sl_help_text("sample"), stdout);
            return SL_EXIT_OK;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--prompt", &m)) || m) {
            if (!v)
                return sl_cmd_usage("sample", "option '--prompt' needs TEXT");
            o->prompt = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--tokens", &m)) || m) {
            if (!v || !parse_long(v, 0, 100000000, &o->tokens))
                return sl_cmd_usage("sample",
                                    "--tokens must be a number from 0 to 100000000, not '%s'",
                                    v ? v : "");
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--temperature", &m)) || m) {
            if (!v || !parse_double(v, &o->pick.temperature) || o->pick.temperature < 0)
                return sl_cmd_usage("sample", "--temperature must be a number, 0 or more, not '%s'",
                                    v ? v : "");
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--top-k", &m)) || m) {
            long k;
            if (!v || !parse_long(v, 0, 1L << 30, &k))
                return sl_cmd_usage("sample",
                                    "--top-k must be a number, 0 (no limit) or more, not '%s'",
                                    v ? v : "");
            o->pick.top_k = (int)k;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--top-p", &m)) || m) {
            if (!v || !parse_double(v, &o->pick.top_p) || !(o->pick.top_p > 0) || o->pick.top_p > 1)
                return sl_cmd_usage("sample", "--top-p must be a number in (0, 1], not '%s'",
                                    v ? v : "");
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--seed", &m)) || m) {
            if (!v || !parse_u64(v, &o->seed))
                return sl_cmd_usage("sample", "--seed must be a whole number, 0 or more, not '%s'",
                                    v ? v : "");
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return sl_cmd_usage("sample", "unknown option '%s'", arg);
        } else if (*model) {
            return sl_cmd_usage("sample", "unexpected argument '%s'", arg);
        } else {
            *model = arg;
        }
    }
    if (!*model)
        return sl_cmd_usage("sample", "missing MODEL");
    return -1;
}

int
sl_cmd_sample(int argc, char **argv)
{
    device_opts_t d = {NULL, 1};
    const char *model = NULL;
    sl_generate_opts_t o = {NULL, 100, {1.0, 0, 1.0}, 1};
    sl_model_file_t m;
    int ex, last_newline = 1;
    sl_status_t st;

    if ((ex = parse_sample(argc, argv, &model, &o, &d)) >= 0)
        return ex;
    if (sl_model_file_open(&m, model, d.device, (int)d.threads, 0) != SL_OK)
        return runtime_error();
    st = sl_generate(m.lm, m.vocab, m.level, &o, print_token, &last_newline);
    if (!last_newline)
        putchar('\n');
    fflush(stdout);
    sl_model_file_close(&m);
    return st == SL_OK ? SL_EXIT_OK : runtime_error();
}
