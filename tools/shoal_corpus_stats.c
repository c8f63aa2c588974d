/* shoal-corpus-stats: Zipf statistics of a training corpus (Baidu, "Language Modeling at
 * Scale", Fig. 1): unique types U against tokens N for training-step batches of
 * N = G x K tokens (G nodes, K tokens per node and step), the fitted exponent of
 * U ~ a N^b, as a text table, JSON or CSV, and a log-log PNG through gnuplot. The
 * corpus is read and tokenised by src/data exactly as training does. Errors are one
 * line "shoal-corpus-stats: <message>" on stderr; exit 2 for usage and configuration,
 * 1 for runtime failures (corpus, output, gnuplot). */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_cli.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "embed/sl_zipf.h"
#include "common/sl_tool_pipe.h"
#include "tools/sl_tool_args.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

#define MAX_LIST 64 /* values in --nodes / --tokens */

static const char help_text[] =
    "Usage: shoal-corpus-stats (--corpus FILE | --config CONF.yaml) [--level word|char]\n"
    "                          [--nodes G_LIST] [--tokens K_LIST] [--windows W]\n"
    "                          [--vocab-size V] [--format text|json|csv] [--png FILE]\n"
    "       shoal-corpus-stats --help | --version\n"
    "\n"
    "Count the unique types U among N = G x K consecutive tokens of a training corpus\n"
    "(G nodes, K tokens per node and step: one training step's batch), averaged over\n"
    "up to W windows spread evenly over the corpus, for every G and K given, and fit\n"
    "U ~ a N^b by least squares in log-log. A Zipf-unique embedding exchange sends U\n"
    "rows per step where a dense allgather sends N; the Baidu paper finds b about 0.64\n"
    "on four large corpora.\n"
    "\n"
    "Options:\n"
    "  --corpus FILE      the text to measure (default data.train of --config)\n"
    "  --config CONF.yaml take the corpus, level, data.valid_fraction, max_tokens and\n"
    "                     cache_dir, and K = train.batch x train.bptt from a run\n"
    "                     configuration\n"
    "  --level LEVEL      word (default, or data.level of --config) or char\n"
    "  --nodes G_LIST     comma-separated node counts G (default 1,2,4,8,16,32,64)\n"
    "  --tokens K_LIST    comma-separated tokens per node and step K (default\n"
    "                     train.batch x train.bptt of --config, else 32 x 35 = 1120)\n"
    "  --windows W        windows averaged per size, at most (default 100)\n"
    "  --vocab-size V     0 (default): every distinct token is a type; V: the top V\n"
    "                     words plus <unk> and <eos>, the rows a model of that\n"
    "                     vocabulary exchanges\n"
    "  --format FORMAT    text (default), json, or csv (the table and U_fit)\n"
    "  --png FILE         also plot U against N, the fit and U = N with gnuplot\n"
    "  -h, --help         show this help and exit\n"
    "      --version      show the version and exit\n"
    "\n"
    "Sizes N larger than the corpus are skipped with a warning. At word level every\n"
    "line ends with an <eos> token, which counts as a type.\n"
    "\n"
    "Examples:\n"
    "  shoal-corpus-stats --corpus ../shared/data/brown/train.txt\n"
    "  shoal-corpus-stats --config conf/brown-word.yaml --nodes 1,4,16,64 --format json\n"
    "  shoal-corpus-stats --corpus input.txt --level char --png zipf.png\n"
    "\n"
    "Exit status:\n"
    "  0    success\n"
    "  1    runtime error (corpus unreadable or empty, output, gnuplot missing or\n"
    "       failing)\n"
    "  2    usage or configuration error\n"
    "\n"
    "See shoal-corpus-stats(1) for details.\n";

typedef enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_CSV } format_t;

typedef struct {
    const char *corpus, *config, *png;
    long nodes[MAX_LIST], tokens[MAX_LIST];
    int nnodes, ntokens;
    long windows;
    long vocab_size;
    int has_level;
    sl_level_t level;
    format_t format;
    int help, version;
} args_t;

/* One table row: G x K = N and the window statistics. */
typedef struct {
    long g, k;
    sl_zipf_window_t w;
} row_t;

typedef struct {
    const char *corpus; /* borrowed from the config */
    sl_level_t level;
    size_t tokens;
    long types; /* distinct ids in the corpus */
    row_t *rows;
    int nrows;
    sl_zipf_fit_t fit;
    int has_fit;
} stats_t;

/* "shoal-corpus-stats: --windows: 'x' is not an integer (see ... --help)"; returns 2. */
#define usage_error(...) sl_tool_usage_error("shoal-corpus-stats", __VA_ARGS__)

/* A whole decimal integer in [lo, hi] from v[0..len); -1 when fine, else 2. */
static int
parse_long(const char *opt, const char *v, size_t len, long lo, long hi, long *out)
{
    char buf[32];

    if (len == 0 || len >= sizeof buf)
        return usage_error("%s: '%.*s' is not an integer", opt, (int)(len < 64 ? len : 64), v);
    memcpy(buf, v, len);
    buf[len] = '\0';
    return sl_tool_parse_long("shoal-corpus-stats", opt, buf, lo, hi, out);
}

/* "1,2,4" into out (at most MAX_LIST values, each 1..2^31-1). */
static int
parse_list(const char *opt, const char *v, long *out, int *count)
{
    const char *p = v;
    int ex;

    *count = 0;
    for (;;) {
        size_t len = strcspn(p, ",");

        if (*count == MAX_LIST)
            return usage_error("%s: more than %d values", opt, MAX_LIST);
        if ((ex = parse_long(opt, p, len, 1, 2147483647L, &out[*count])) >= 0)
            return ex;
        (*count)++;
        if (p[len] == '\0')
            return -1;
        p += len + 1;
    }
}

/* Parses argv; returns -1 when fine, else the exit status (the error already printed). */
static int
parse_args(int argc, char **argv, args_t *a)
{
    static const long default_nodes[] = {1, 2, 4, 8, 16, 32, 64};

    memset(a, 0, sizeof *a);
    a->windows = 100;
    a->nnodes = (int)(sizeof default_nodes / sizeof default_nodes[0]);
    memcpy(a->nodes, default_nodes, sizeof default_nodes);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        int m = 0, ex;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return -1;
        }
        if (strcmp(arg, "--version") == 0) {
            a->version = 1;
            return -1;
        }
        if ((v = sl_cli_option_value(argc, argv, &i, "--corpus", &m)) || m) {
            if (!v || !*v)
                return usage_error("option '--corpus' needs a FILE");
            a->corpus = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--config", &m)) || m) {
            if (!v || !*v)
                return usage_error("option '--config' needs a CONF.yaml");
            a->config = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--level", &m)) || m) {
            if (v && strcmp(v, "word") == 0)
                a->level = SL_LEVEL_WORD;
            else if (v && strcmp(v, "char") == 0)
                a->level = SL_LEVEL_CHAR;
            else
                return usage_error("--level must be word or char, not '%s'", v ? v : "");
            a->has_level = 1;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--nodes", &m)) || m) {
            if (!v)
                return usage_error("option '--nodes' needs a list like 1,2,4");
            if ((ex = parse_list("--nodes", v, a->nodes, &a->nnodes)) >= 0)
                return ex;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--tokens", &m)) || m) {
            if (!v)
                return usage_error("option '--tokens' needs a list like 1120");
            if ((ex = parse_list("--tokens", v, a->tokens, &a->ntokens)) >= 0)
                return ex;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--windows", &m)) || m) {
            if (!v)
                return usage_error("option '--windows' needs a number");
            if ((ex = parse_long("--windows", v, strlen(v), 1, 1000000L, &a->windows)) >= 0)
                return ex;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--vocab-size", &m)) || m) {
            if (!v)
                return usage_error("option '--vocab-size' needs a number");
            if ((ex = parse_long("--vocab-size", v, strlen(v), 0, 100000000L, &a->vocab_size)) >= 0)
                return ex;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--format", &m)) || m) {
            if (v && strcmp(v, "text") == 0)
                a->format = FORMAT_TEXT;
            else if (v && strcmp(v, "json") == 0)
                a->format = FORMAT_JSON;
            else if (v && strcmp(v, "csv") == 0)
                a->format = FORMAT_CSV;
            else
                return usage_error("--format must be text, json or csv, not '%s'", v ? v : "");
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--png", &m)) || m) {
            if (!v || !*v)
                return usage_error("option '--png' needs a FILE");
            a->png = v;
        } else if (arg[0] == '-') {
            return usage_error("unknown option '%s'", arg);
        } else {
            return usage_error("unexpected argument '%s'", arg);
        }
    }
    if (!a->corpus && !a->config)
        return usage_error("missing --corpus FILE (or --config CONF.yaml)");
    return -1;
}

static int
replace(char **slot, const char *value)
{
    char *copy = strdup(value);

    if (!copy) {
        fprintf(stderr, "shoal-corpus-stats: out of memory\n");
        return EXIT_RUNTIME;
    }
    free(*slot);
    *slot = copy;
    return -1;
}

/* The data settings: the configuration's (when given), then the flags. Only the
 * training text is read: valid and test are dropped (and valid_fraction with them
 * when the configuration names a valid file, so the training text stays whole). */
static int
make_config(args_t *a, sl_config_t *cfg)
{
    int ex;

    if (a->config && sl_config_load_file(cfg, a->config) != SL_OK) {
        fprintf(stderr, "shoal-corpus-stats: %s\n", sl_err_msg());
        return EXIT_USAGE;
    }
    if (a->corpus && (ex = replace(&cfg->data.train, a->corpus)) >= 0)
        return ex;
    if (!cfg->data.train || !*cfg->data.train)
        return usage_error("%s sets no data.train: give --corpus FILE", a->config);
    if (cfg->data.valid && *cfg->data.valid) {
        cfg->data.valid_fraction = 0.0;
        if ((ex = replace(&cfg->data.valid, "")) >= 0)
            return ex;
    }
    if ((ex = replace(&cfg->data.test, "")) >= 0)
        return ex;
    if (a->has_level)
        cfg->data.level = a->level;
    cfg->data.vocab_size = (int)a->vocab_size;
    if (a->ntokens == 0) {
        a->tokens[0] = (long)cfg->train.batch * cfg->train.bptt;
        a->ntokens = 1;
    }
    return -1;
}

static int
cmp_row(const void *pa, const void *pb)
{
    const row_t *x = pa, *y = pb;
    long nx = x->g * x->k, ny = y->g * y->k;

    if (nx != ny)
        return nx < ny ? -1 : 1;
    return x->g < y->g ? -1 : x->g > y->g;
}

/* Loads the corpus, measures every G x K that fits, and fits the distinct N. */
static int
compute(const args_t *a, const sl_config_t *cfg, stats_t *s)
{
    sl_corpus_t corpus;
    double *n = NULL, *u = NULL;
    int32_t range;
    int np = 0, ex = EXIT_RUNTIME, keep = 0;
    sl_zipf_window_t all;

    memset(&corpus, 0, sizeof corpus);
    if (sl_corpus_load(&corpus, cfg) != SL_OK) {
        fprintf(stderr, "shoal-corpus-stats: %s\n", sl_err_msg());
        return EXIT_RUNTIME;
    }
    s->corpus = cfg->data.train;
    s->level = cfg->data.level;
    s->tokens = corpus.train.len;
    range = sl_vocab_size(corpus.vocab);
    s->rows = calloc((size_t)a->nnodes * (size_t)a->ntokens, sizeof *s->rows);
    n = calloc((size_t)a->nnodes * (size_t)a->ntokens, sizeof *n);
    u = calloc((size_t)a->nnodes * (size_t)a->ntokens, sizeof *u);
    if (!s->rows || !n || !u) {
        fprintf(stderr, "shoal-corpus-stats: out of memory\n");
        goto out;
    }
    if (s->tokens == 0) {
        fprintf(stderr, "shoal-corpus-stats: %s: no training tokens\n", s->corpus);
        goto out;
    }
    if (sl_zipf_unique_windows(corpus.train.ids, s->tokens, range, s->tokens, 1, &all) != SL_OK)
        goto fail;
    s->types = all.u_max;
    for (int ik = 0; ik < a->ntokens; ik++)
        for (int ig = 0; ig < a->nnodes; ig++)
            if ((double)a->nodes[ig] * (double)a->tokens[ik] <= (double)s->tokens) {
                s->rows[s->nrows].g = a->nodes[ig];
                s->rows[s->nrows++].k = a->tokens[ik];
            }
    if (s->nrows == 0) {
        fprintf(stderr, "shoal-corpus-stats: %s: %zu tokens, fewer than every N = G x K\n",
                s->corpus, s->tokens);
        goto out;
    }
    if (s->nrows < a->nnodes * a->ntokens) {
        fprintf(stderr, "shoal-corpus-stats: warning: skipped N =");
        for (int ik = 0; ik < a->ntokens; ik++)
            for (int ig = 0; ig < a->nnodes; ig++)
                if ((double)a->nodes[ig] * (double)a->tokens[ik] > (double)s->tokens)
                    fprintf(stderr, " %ldx%ld", a->nodes[ig], a->tokens[ik]);
        fprintf(stderr, ": more than the corpus's %zu tokens\n", s->tokens);
    }
    qsort(s->rows, (size_t)s->nrows, sizeof *s->rows, cmp_row);
    for (int i = 0; i < s->nrows; i++) {
        row_t *r = &s->rows[i];

        if (sl_zipf_unique_windows(corpus.train.ids, s->tokens, range, (size_t)(r->g * r->k),
                                   a->windows, &r->w) != SL_OK)
            goto fail;
        if (np == 0 || n[np - 1] != (double)r->w.window) {
            n[np] = (double)r->w.window;
            u[np++] = r->w.u_mean;
        }
    }
    s->has_fit = np >= 2 && sl_zipf_fit(n, u, np, &s->fit) == SL_OK;
    keep = 1;
    ex = -1;
    goto out;
fail:
    fprintf(stderr, "shoal-corpus-stats: %s\n", sl_err_msg());
out:
    if (!keep) {
        free(s->rows);
        s->rows = NULL;
    }
    free(n);
    free(u);
    sl_corpus_fini(&corpus);
    return ex;
}

/* The corpus name as a JSON string body (quotes, backslashes, control bytes escaped). */
static void
json_string(FILE *out, const char *str)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static double
u_fit(const stats_t *s, double n)
{
    return s->fit.a * pow(n, s->fit.b);
}

static void
print_text(FILE *out, const stats_t *s, long windows)
{
    fprintf(out, "corpus: %s (%s level): %zu tokens, %ld types\n", s->corpus,
            sl_level_name(s->level), s->tokens, s->types);
    fprintf(out, "U = unique types among N = G x K consecutive tokens, over up to %ld windows\n\n",
            windows);
    fprintf(out, "%6s %8s %10s %8s %10s %8s %8s %8s %10s\n", "G", "K", "N", "windows", "U mean",
            "U min", "U max", "U/N", "U fit");
    for (int i = 0; i < s->nrows; i++) {
        const row_t *r = &s->rows[i];

        fprintf(out, "%6ld %8ld %10zu %8ld %10.1f %8ld %8ld %8.4f ", r->g, r->k, r->w.window,
                r->w.windows, r->w.u_mean, r->w.u_min, r->w.u_max,
                r->w.u_mean / (double)r->w.window);
        if (s->has_fit)
            fprintf(out, "%10.1f\n", u_fit(s, (double)r->w.window));
        else
            fprintf(out, "%10s\n", "-");
    }
    if (s->has_fit)
        fprintf(out,
                "\nfit U = a N^b (least squares in log-log over %d sizes): a = %.4g, "
                "b = %.4f, R^2 = %.4f\n",
                s->fit.points, s->fit.a, s->fit.b, s->fit.r2);
    else
        fputs("\nno fit: it needs at least two distinct N\n", out);
}

static void
print_json(FILE *out, const stats_t *s, long windows)
{
    fputs("{\"corpus\": ", out);
    json_string(out, s->corpus);
    fprintf(out, ", \"level\": \"%s\", \"tokens\": %zu, \"types\": %ld, \"windows\": %ld,\n",
            sl_level_name(s->level), s->tokens, s->types, windows);
    fputs(" \"rows\": [", out);
    for (int i = 0; i < s->nrows; i++) {
        const row_t *r = &s->rows[i];

        fprintf(out,
                "%s\n  {\"G\": %ld, \"K\": %ld, \"N\": %zu, \"windows\": %ld, \"U_mean\": %.17g, "
                "\"U_min\": %ld, \"U_max\": %ld}",
                i ? "," : "", r->g, r->k, r->w.window, r->w.windows, r->w.u_mean, r->w.u_min,
                r->w.u_max);
    }
    fputs("],\n \"fit\": ", out);
    if (s->has_fit)
        fprintf(out, "{\"a\": %.17g, \"b\": %.17g, \"r2\": %.17g, \"points\": %d}}\n", s->fit.a,
                s->fit.b, s->fit.r2, s->fit.points);
    else
        fputs("null}\n", out);
}

static void
print_csv(FILE *out, const stats_t *s)
{
    fputs("G,K,N,windows,U_mean,U_min,U_max,U_over_N,U_fit\n", out);
    for (int i = 0; i < s->nrows; i++) {
        const row_t *r = &s->rows[i];

        fprintf(out, "%ld,%ld,%zu,%ld,%.17g,%ld,%ld,%.17g,", r->g, r->k, r->w.window, r->w.windows,
                r->w.u_mean, r->w.u_min, r->w.u_max, r->w.u_mean / (double)r->w.window);
        if (s->has_fit)
            fprintf(out, "%.17g\n", u_fit(s, (double)r->w.window));
        else
            fputc('\n', out);
    }
}

/* A gnuplot single-quoted string: no escapes inside, a quote is doubled. */
static void
gp_quoted(FILE *out, const char *str)
{
    fputc('\'', out);
    for (const char *p = str; *p; p++) {
        if (*p == '\'')
            fputc('\'', out);
        fputc(*p, out);
    }
    fputc('\'', out);
}

/* The gnuplot script: log-log points of U mean against N, the fit, and U = N (the
 * rows a dense allgather would send). Data inline, so no temporary file. */
static void
print_gnuplot(FILE *out, const stats_t *s)
{
    fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "    set terminal pngcairo size 900,600 noenhanced\n"
          "} else {\n"
          "    set terminal png size 900,600 noenhanced\n"
          "}\n",
          out);
    fputs("set title ", out);
    gp_quoted(out, s->corpus);
    fprintf(out, "\nset logscale xy\nset grid\nset key top left\n"
                 "set xlabel 'tokens per step N = G x K'\nset ylabel 'unique types U'\n"
                 "$data << EOD\n");
    for (int i = 0; i < s->nrows; i++)
        if (i == 0 || s->rows[i].w.window != s->rows[i - 1].w.window)
            fprintf(out, "%zu %.17g\n", s->rows[i].w.window, s->rows[i].w.u_mean);
    fputs("EOD\n", out);
    fprintf(out, "plot $data using 1:2 with linespoints pt 7 title 'U (%s level)'",
            sl_level_name(s->level));
    if (s->has_fit)
        fprintf(out, ", %.17g * x**%.17g with lines lw 2 title 'fit %.3g N^%.3f'", s->fit.a,
                s->fit.b, s->fit.a, s->fit.b);
    fputs(", x with lines dt 2 title 'U = N (dense allgather)'\n", out);
}

static void
write_plot(FILE *to, void *ctx)
{
    print_gnuplot(to, ctx);
}

/* Pipes the script into `gnuplot`. */
static int
render_png(const stats_t *s, const char *png)
{
    if (!sl_tool_on_path("gnuplot")) {
        fprintf(stderr,
                "shoal-corpus-stats: gnuplot is not on PATH: install gnuplot to write "
                "%s, or use --format csv and plot it elsewhere\n",
                png);
        return EXIT_RUNTIME;
    }
    static const char *const argv[] = {"gnuplot", NULL};
    /* the writer only reads the statistics */
    return sl_tool_pipe("shoal-corpus-stats", argv, png, write_plot, (void *)s) == 0 ? EXIT_OK
                                                                                     : EXIT_RUNTIME;
}

int
main(int argc, char **argv)
{
    args_t a;
    sl_config_t cfg;
    stats_t s;
    int ex;

    memset(&s, 0, sizeof s);
    ex = parse_args(argc, argv, &a);
    if (ex >= 0)
        return ex;
    if (a.help) {
        fputs(help_text, stdout);
        return EXIT_OK;
    }
    if (a.version) {
        printf("shoal-corpus-stats (shoal) %s\n", PACKAGE_VERSION);
        return EXIT_OK;
    }
    sl_log_init();
    if (!getenv("SHOAL_LOG"))
        sl_log_set_level(SL_LOG_WARN); /* stdout is the table; keep stderr for problems */
    sl_config_init(&cfg);
    if ((ex = make_config(&a, &cfg)) >= 0 || (ex = compute(&a, &cfg, &s)) >= 0) {
        sl_config_fini(&cfg);
        return ex;
    }
    if (a.format == FORMAT_JSON)
        print_json(stdout, &s, a.windows);
    else if (a.format == FORMAT_CSV)
        print_csv(stdout, &s);
    else
        print_text(stdout, &s, a.windows);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "shoal-corpus-stats: writing the output: %s\n", strerror(errno));
        ex = EXIT_RUNTIME;
    } else {
        ex = a.png ? render_png(&s, a.png) : EXIT_OK;
    }
    free(s.rows);
    sl_config_fini(&cfg);
    return ex;
}
