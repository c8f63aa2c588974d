/* shoal plot (sl_plot.h): metrics.jsonl read line by line (each line one flat JSON
 * object that sl_metrics.c wrote), and a gnuplot script with the points inline. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Colours that tell runs apart on screen and in print (Tableau 10). */
static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
enum { NCOLOURS = sizeof colours / sizeof colours[0] };

/* The number after "key": in line; 0 when it is absent or not a number (null). */
static int
field(const char *line, const char *key, double *v)
{
    char pat[48], *end;
    const char *p;

    snprintf(pat, sizeof pat, "\"%s\":", key);
    if (!(p = strstr(line, pat)))
        return 0;
    p += strlen(pat);
    *v = strtod(p, &end);
    return end != p && isfinite(*v);
}

/* Appends (a, b, c) to the (n, 3) array *xs of capacity *cap. */
static sl_status_t
push(double **xs, size_t *n, size_t *cap, double a, double b, double c)
{
    if (*n == *cap) {
        size_t grown = *cap ? 2 * *cap : 256;
        double *p = realloc(*xs, grown * 3 * sizeof *p);
        if (!p)
            return sl_err_set(SL_ERR_NOMEM, "plot: out of memory");
        *xs = p;
        *cap = grown;
    }
    (*xs)[3 * *n] = a;
    (*xs)[3 * *n + 1] = b;
    (*xs)[3 * *n + 2] = c;
    (*n)++;
    return SL_OK;
}

/* The metrics file of a run directory, malloc'd; NULL when there is none. */
static char *
metrics_of(const char *dir)
{
    static const char *const tries[] = {"%s/metrics.jsonl", "%s/node-0/metrics.jsonl"};
    struct stat sb;
    char *path;

    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode))
        return strdup(dir);
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        if (asprintf(&path, tries[i], dir) < 0)
            return NULL;
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            return path;
        free(path);
    }
    return NULL;
}

/* "runs/brown-word/" -> "brown-word"; a metrics file names its folder. */
static char *
label_of(const char *dir)
{
    char *s = strdup(dir), *slash;
    size_t len;

    if (!s)
        return NULL;
    len = strlen(s);
    while (len > 1 && s[len - 1] == '/')
        s[--len] = '\0';
    if (len > 6 && strcmp(s + len - 6, ".jsonl") == 0 && (slash = strrchr(s, '/')))
        *slash = '\0';
    slash = strrchr(s, '/');
    if (slash && slash[1])
        memmove(s, slash + 1, strlen(slash + 1) + 1);
    return s;
}

sl_status_t
sl_plot_read(sl_plot_run_t *run, const char *dir)
{
    char *path = metrics_of(dir), *line = NULL;
    size_t cap_t = 0, cap_v = 0, size = 0, lineno = 0;
    sl_status_t st = SL_OK;
    FILE *f;

    memset(run, 0, sizeof *run);
    if (!path)
        return sl_err_set(SL_ERR_IO,
                          "%s: neither %s/metrics.jsonl nor %s/node-0/metrics.jsonl: "
                          "not a run directory",
                          dir, dir, dir);
    if (!(f = fopen(path, "r"))) {
        st = sl_err_set(SL_ERR_IO, "%s: cannot open", path);
        free(path);
        return st;
    }
    run->label = label_of(dir);
    while (st == SL_OK && getline(&line, &size, f) > 0) {
        double step, ppl, t = 0;
        lineno++;
        if (line[0] != '{')
            st = sl_err_set(SL_ERR_FORMAT, "%s:%zu: not a JSON object", path, lineno);
        else if (strstr(line, "\"event\":\"eval\"")) {
            if (strstr(line, "\"split\":\"valid\"") && field(line, "step", &step) &&
                field(line, "ppl", &ppl)) {
                /* evaluations have no time of their own: that of the step they follow */
                for (size_t i = run->ntrain; i-- > 0;)
                    if (run->train[3 * i] <= step) {
                        t = run->train[3 * i + 2];
                        break;
                    }
                st = push(&run->valid, &run->nvalid, &cap_v, step, ppl, t);
            }
        } else if (!strstr(line, "\"event\"") && field(line, "step", &step) &&
                   field(line, "ppl", &ppl)) {
            field(line, "time_s", &t);
            st = push(&run->train, &run->ntrain, &cap_t, step, ppl, t);
        }
    }
    if (st == SL_OK && !run->label)
        st = sl_err_set(SL_ERR_NOMEM, "plot: out of memory");
    if (st == SL_OK && run->ntrain == 0)
        st = sl_err_set(SL_ERR_FORMAT, "%s: no training steps recorded yet", path);
    free(line);
    fclose(f);
    free(path);
    if (st != SL_OK)
        sl_plot_run_fini(run);
    return st;
}

void
sl_plot_run_fini(sl_plot_run_t *run)
{
    free(run->label);
    free(run->train);
    free(run->valid);
    memset(run, 0, sizeof *run);
}

/* A gnuplot single-quoted string: no escapes inside, a quote is doubled. */
static void
quoted(FILE *out, const char *s)
{
    fputc('\'', out);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', out);
        if ((unsigned char)*s >= ' ')
            fputc(*s, out);
    }
    fputc('\'', out);
}

static void
datablock(FILE *out, const char *name, int i, const double *xs, size_t n, double time_unit)
{
    fprintf(out, "$%s%d << EOD\n", name, i);
    for (size_t k = 0; k < n; k++)
        fprintf(out, "%.17g %.9g %.9g\n", xs[3 * k], xs[3 * k + 1], xs[3 * k + 2] / time_unit);
    fputs("EOD\n", out);
}

/* One panel: column x against the perplexity, training as lines (titled with the run),
 * validation as points joined by dashes, each run in its colour. */
static void
panel(FILE *out, const sl_plot_run_t *runs, int n, int x, const char *xlabel)
{
    fprintf(out, "set xlabel '%s'\nplot ", xlabel);
    for (int i = 0; i < n; i++) {
        const char *c = colours[i % NCOLOURS];
        fprintf(out, "%s$train%d using %d:2 with lines lw 1.5 lc rgb '%s' title ",
                i ? ", \\\n     " : "", i, x, c);
        quoted(out, runs[i].label);
        if (runs[i].nvalid)
            fprintf(out,
                    ", \\\n     $valid%d using %d:2 with linespoints dt 2 pt 7 ps 0.8 lc rgb "
                    "'%s' notitle",
                    i, x, c);
    }
    fputc('\n', out);
}

void
sl_plot_script(FILE *out, const sl_plot_run_t *runs, int n, const char *png)
{
    double tmax = 0, unit = 1;
    const char *unit_name = "s";

    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < runs[i].ntrain; k++)
            if (runs[i].train[3 * k + 2] > tmax)
                tmax = runs[i].train[3 * k + 2];
    if (tmax > 3 * 3600) {
        unit = 3600;
        unit_name = "h";
    } else if (tmax > 600) {
        unit = 60;
        unit_name = "min";
    }
    fputs("# shoal plot: perplexity against steps and against training time\n", out);
    for (int i = 0; i < n; i++) {
        datablock(out, "train", i, runs[i].train, runs[i].ntrain, unit);
        if (runs[i].nvalid)
            datablock(out, "valid", i, runs[i].valid, runs[i].nvalid, unit);
    }
    fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "    set terminal pngcairo size 1400,560 noenhanced font ',10'\n"
          "} else {\n"
          "    set terminal png size 1400,560 noenhanced\n"
          "}\n",
          out);
    fputs("set output ", out);
    quoted(out, png);
    fputs("\nset multiplot layout 1,2 title 'perplexity: training (lines), validation (dashed, "
          "points)'\nset logscale y\nset grid\nset key top right\nset ylabel 'perplexity'\n",
          out);
    panel(out, runs, n, 1, "step");
    {
        char xlabel[64];
        snprintf(xlabel, sizeof xlabel, "training time (%s)", unit_name);
        panel(out, runs, n, 3, xlabel);
    }
    fputs("unset multiplot\nset output\n", out);
}
