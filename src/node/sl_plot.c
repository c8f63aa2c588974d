/* shoal plot (sl_plot.h): metrics.jsonl read line by line (each line one flat JSON
 * object that sl_metrics.c wrote), and a gnuplot script with the points inline. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/sl_log.h"
#include "node/sl_metrics.h"

/* Colours that tell runs apart on screen and in print (Tableau 10). */
static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
enum { NCOLOURS = sizeof colours / sizeof colours[0] };

/* Days from 1970-01-01 to the date y-m-d of the proleptic Gregorian calendar (H.
 * Hinnant's days_from_civil), so that no time zone of this machine enters. */
static long
days_from_civil(long y, int m, int d)
{
    long era, yoe, doy;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* n decimal digits at s (no sign, no space; never read past a NUL) into *v; 0 when
 * they are not n digits. */
static int
digits(const char *s, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        *v = *v * 10 + (s[i] - '0');
    }
    return 1;
}

static int
days_in_month(int y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

    return days[m - 1] + (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
}

/* "2026-11-27T10:15:07.123Z" (what sl_metrics.c writes; fraction optional) at s, ended
 * by a quote, into seconds since 1970-01-01 UTC; 0 when it is not that: each field its
 * digits alone (sscanf's %d would take a sign or spaces), a day of its month, a fraction
 * of one digit or more. */
static int
parse_utc(const char *s, double *t)
{
    int y, mo, d, h, mi, sec;
    double frac = 0, scale = 0.1;

    if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
        !digits(s + 8, 2, &d) || s[10] != 'T' || !digits(s + 11, 2, &h) || s[13] != ':' ||
        !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &sec) || mo < 1 || mo > 12 ||
        d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60)
        return 0;
    s += 19;
    if (*s == '.') {
        if (s[1] < '0' || s[1] > '9')
            return 0;
        for (s++; *s >= '0' && *s <= '9'; s++, scale /= 10)
            frac += (*s - '0') * scale;
    }
    if (s[0] != 'Z' || s[1] != '"')
        return 0;
    *t = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + sec + frac;
    return 1;
}

/* The record's wall_time into *t (NaN when it has none); an error naming path:lineno
 * when it is there but no ISO 8601 UTC time. The error shows the value up to its quote,
 * 40 bytes at most, each byte that is no printable ASCII as '?': one line. */
static sl_status_t
wall_time(const char *line, const char *path, size_t lineno, double *t)
{
    static const char key[] = "\"wall_time\":\"";
    const char *p = strstr(line, key);
    char shown[44];
    size_t n = 0;

    *t = NAN;
    if (!p || parse_utc(p + strlen(key), t))
        return SL_OK;
    for (p += strlen(key); *p && *p != '"' && *p != '\n' && n < 40; p++)
        shown[n++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
    if (*p && *p != '"' && *p != '\n')
        shown[n++] = '.', shown[n++] = '.', shown[n++] = '.';
    shown[n] = '\0';
    return sl_err_set(SL_ERR_FORMAT,
                      "%s:%zu: wall_time \"%s\" is not an ISO 8601 UTC time "
                      "(2026-11-27T10:15:07.123Z)",
                      path, lineno, shown);
}

/* Appends the point v (SL_PLOT_COLS values) to the array *xs of *n points and
 * capacity *cap. */
static sl_status_t
push(double **xs, size_t *n, size_t *cap, const double *v)
{
    if (*n == *cap) {
        size_t grown = *cap ? 2 * *cap : 256;
        double *p = realloc(*xs, grown * SL_PLOT_COLS * sizeof *p);
        if (!p)
            return sl_err_set(SL_ERR_NOMEM, "plot: out of memory");
        *xs = p;
        *cap = grown;
    }
    memcpy(*xs + SL_PLOT_COLS * *n, v, SL_PLOT_COLS * sizeof *v);
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
    ssize_t got;
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
    run->path = path;
    while (st == SL_OK && (got = getline(&line, &size, f)) > 0) {
        double v[SL_PLOT_COLS] = {0};
        lineno++;
        /* a line without its newline is the last, being written (or cut short by a
         * node that died; a resumed run drops it) */
        if (line[got - 1] != '\n') {
            sl_log_info("plot", "%s:%zu: an unfinished last line, left out", path, lineno);
            break;
        }
        if (line[0] != '{') {
            st = sl_err_set(SL_ERR_FORMAT, "%s:%zu: not a JSON object", path, lineno);
            break;
        }
        if ((st = wall_time(line, path, lineno, &v[SL_PLOT_WALL_S])) != SL_OK)
            break;
        if (strstr(line, "\"event\":\"eval\"")) {
            if (strstr(line, "\"split\":\"valid\"") &&
                sl_json_number_at(line, "step", &v[SL_PLOT_STEP]) &&
                sl_json_number_at(line, "ppl", &v[SL_PLOT_PPL])) {
                /* evaluations have no training time of their own: that of the step they
                 * follow */
                for (size_t i = run->ntrain; i-- > 0;)
                    if (run->train[SL_PLOT_COLS * i + SL_PLOT_STEP] <= v[SL_PLOT_STEP]) {
                        v[SL_PLOT_TIME_S] = run->train[SL_PLOT_COLS * i + SL_PLOT_TIME_S];
                        break;
                    }
                st = push(&run->valid, &run->nvalid, &cap_v, v);
            }
        } else if (!strstr(line, "\"event\"") &&
                   sl_json_number_at(line, "step", &v[SL_PLOT_STEP]) &&
                   sl_json_number_at(line, "ppl", &v[SL_PLOT_PPL])) {
            sl_json_number_at(line, "time_s", &v[SL_PLOT_TIME_S]);
            st = push(&run->train, &run->ntrain, &cap_t, v);
        }
    }
    if (st == SL_OK && !run->label)
        st = sl_err_set(SL_ERR_NOMEM, "plot: out of memory");
    if (st == SL_OK && run->ntrain == 0)
        st = sl_err_set(SL_ERR_FORMAT, "%s: no training steps recorded yet", path);
    free(line);
    fclose(f);
    if (st != SL_OK)
        sl_plot_run_fini(run);
    return st;
}

void
sl_plot_run_fini(sl_plot_run_t *run)
{
    free(run->label);
    free(run->path);
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

static const char *const axis_names[] = {"steps", "time", "wall"};

sl_status_t
sl_plot_parse_axes(const char *list, sl_plot_x_t *axes, int *n)
{
    const char *p = list;

    *n = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        int found = -1;

        for (int a = 0; a < 3; a++)
            if (strlen(axis_names[a]) == len && strncmp(p, axis_names[a], len) == 0)
                found = a;
        if (found < 0)
            return sl_err_set(SL_ERR_INVALID, "--x: '%.*s' is not steps, time or wall", (int)len,
                              p);
        for (int i = 0; i < *n; i++)
            if (axes[i] == (sl_plot_x_t)found)
                return sl_err_set(SL_ERR_INVALID, "--x: %s is given twice", axis_names[found]);
        axes[(*n)++] = (sl_plot_x_t)found;
        if (!p[len])
            return SL_OK;
        p += len + 1;
    }
}

/* Points of xs (n of them) that have a wall time. */
static size_t
count_wall(const double *xs, size_t n)
{
    size_t c = 0;

    for (size_t k = 0; k < n; k++)
        c += !isnan(xs[SL_PLOT_COLS * k + SL_PLOT_WALL_S]);
    return c;
}

sl_status_t
sl_plot_check_axes(const sl_plot_run_t *runs, int n, const sl_plot_x_t *axes, int naxes)
{
    for (int a = 0; a < naxes; a++) {
        if (axes[a] != SL_PLOT_X_WALL)
            continue;
        for (int i = 0; i < n; i++)
            if (count_wall(runs[i].train, runs[i].ntrain) == 0)
                return sl_err_set(SL_ERR_FORMAT,
                                  "%s: no wall_time in its records (written by an older shoal): "
                                  "plot it against steps or time (--x steps,time)",
                                  runs[i].path);
    }
    return SL_OK;
}

/* $<name><i>: step, perplexity, training time in time_unit. */
static void
datablock(FILE *out, const char *name, int i, const double *xs, size_t n, double time_unit)
{
    fprintf(out, "$%s%d << EOD\n", name, i);
    for (size_t k = 0; k < n; k++) {
        const double *v = xs + SL_PLOT_COLS * k;
        fprintf(out, "%.17g %.9g %.9g\n", v[SL_PLOT_STEP], v[SL_PLOT_PPL],
                v[SL_PLOT_TIME_S] / time_unit);
    }
    fputs("EOD\n", out);
}

/* $w<name><i>: wall-clock time (s since 1970, UTC), perplexity; the points without a
 * wall time left out (gnuplot's time axis takes no NaN). */
static void
wall_datablock(FILE *out, const char *name, int i, const double *xs, size_t n)
{
    fprintf(out, "$w%s%d << EOD\n", name, i);
    for (size_t k = 0; k < n; k++) {
        const double *v = xs + SL_PLOT_COLS * k;
        if (!isnan(v[SL_PLOT_WALL_S]))
            fprintf(out, "%.3f %.9g\n", v[SL_PLOT_WALL_S], v[SL_PLOT_PPL]);
    }
    fputs("EOD\n", out);
}

/* One panel: column x of the blocks $<prefix>train<i> and $<prefix>valid<i> against the
 * perplexity, training as lines (titled with the run), validation as points joined by
 * dashes, each run in its colour. */
static void
panel(FILE *out, const sl_plot_run_t *runs, int n, const char *prefix, int x, const char *xlabel)
{
    fprintf(out, "set xlabel '%s'\nplot ", xlabel);
    for (int i = 0; i < n; i++) {
        const char *c = colours[i % NCOLOURS];
        int wall = *prefix != '\0';
        fprintf(out, "%s$%strain%d using %d:2 with lines lw 1.5 lc rgb '%s' title ",
                i ? ", \\\n     " : "", prefix, i, x, c);
        quoted(out, runs[i].label);
        if (wall ? count_wall(runs[i].valid, runs[i].nvalid) > 0 : runs[i].nvalid > 0)
            fprintf(out,
                    ", \\\n     $%svalid%d using %d:2 with linespoints dt 2 pt 7 ps 0.8 lc rgb "
                    "'%s' notitle",
                    prefix, i, x, c);
    }
    fputc('\n', out);
}

/* The wall-clock panel's axis: tics at a round step giving about six of them, a format
 * that fits that step, the date in the label when every point is on one day. */
static void
wall_axis(FILE *out, const sl_plot_run_t *runs, int n)
{
    static const double steps[] = {1,     2,     5,     10,    15,     30,    60,
                                   120,   300,   600,   900,   1800,   3600,  7200,
                                   10800, 21600, 43200, 86400, 172800, 604800};
    const size_t nsteps = sizeof steps / sizeof steps[0];
    double lo = INFINITY, hi = -INFINITY, step;
    char day_lo[16] = "", day_hi[16] = "", xlabel[80];
    const char *fmt;

    for (int i = 0; i < n; i++)
        for (int b = 0; b < 2; b++) {
            const double *xs = b ? runs[i].valid : runs[i].train;
            size_t m = b ? runs[i].nvalid : runs[i].ntrain;
            for (size_t k = 0; k < m; k++) {
                double t = xs[SL_PLOT_COLS * k + SL_PLOT_WALL_S];
                if (!isnan(t)) {
                    lo = t < lo ? t : lo;
                    hi = t > hi ? t : hi;
                }
            }
        }
    step = steps[nsteps - 1];
    for (size_t k = 0; k < nsteps; k++)
        if ((hi - lo) / steps[k] <= 6) {
            step = steps[k];
            break;
        }
    if ((hi - lo) / step > 6) /* more than six weeks: whole days */
        step = 86400 * ceil((hi - lo) / 6 / 86400);
    if (lo <= hi) {
        struct tm tm;
        time_t a = (time_t)floor(lo), z = (time_t)floor(hi);
        strftime(day_lo, sizeof day_lo, "%Y-%m-%d", gmtime_r(&a, &tm));
        strftime(day_hi, sizeof day_hi, "%Y-%m-%d", gmtime_r(&z, &tm));
    }
    if (strcmp(day_lo, day_hi) == 0) {
        fmt = step < 60 ? "%H:%M:%S" : "%H:%M";
        snprintf(xlabel, sizeof xlabel, "wall-clock time (UTC, %s)", day_lo);
    } else {
        fmt = step < 60 ? "%m-%d %H:%M:%S" : step < 86400 ? "%m-%d %H:%M" : "%Y-%m-%d";
        snprintf(xlabel, sizeof xlabel, "wall-clock time (UTC)");
    }
    fprintf(out, "set xdata time\nset timefmt '%%s'\nset format x '%s'\nset xtics %.0f\n", fmt,
            step);
    panel(out, runs, n, "w", 1, xlabel);
    /* the next panel's axis is a number again */
    fputs("set xdata\nset format x\nset xtics autofreq\n", out);
}

void
sl_plot_script(FILE *out, const sl_plot_run_t *runs, int n, const char *png,
               const sl_plot_x_t *axes, int naxes)
{
    static const char *const against[] = {"steps", "training time", "wall-clock time"};
    double tmax = 0, unit = 1;
    const char *unit_name = "s";
    int wall = 0, numeric = 0;

    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < runs[i].ntrain; k++)
            if (runs[i].train[SL_PLOT_COLS * k + SL_PLOT_TIME_S] > tmax)
                tmax = runs[i].train[SL_PLOT_COLS * k + SL_PLOT_TIME_S];
    if (tmax > 3 * 3600) {
        unit = 3600;
        unit_name = "h";
    } else if (tmax > 600) {
        unit = 60;
        unit_name = "min";
    }
    fputs("# shoal plot: perplexity", out);
    for (int a = 0; a < naxes; a++) {
        fprintf(out, "%s against %s", a ? " and" : "", against[axes[a]]);
        wall |= axes[a] == SL_PLOT_X_WALL;
        numeric |= axes[a] != SL_PLOT_X_WALL;
    }
    fputc('\n', out);
    for (int i = 0; i < n; i++) {
        if (numeric) {
            datablock(out, "train", i, runs[i].train, runs[i].ntrain, unit);
            if (runs[i].nvalid)
                datablock(out, "valid", i, runs[i].valid, runs[i].nvalid, unit);
        }
        if (wall) {
            wall_datablock(out, "train", i, runs[i].train, runs[i].ntrain);
            if (count_wall(runs[i].valid, runs[i].nvalid) > 0)
                wall_datablock(out, "valid", i, runs[i].valid, runs[i].nvalid);
        }
    }
    fprintf(out,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "    set terminal pngcairo size %d,560 noenhanced font ',10'\n"
            "} else {\n"
            "    set terminal png size %d,560 noenhanced\n"
            "}\n",
            naxes > 1 ? 700 * naxes : 900, naxes > 1 ? 700 * naxes : 900);
    if (png) {
        fputs("set output ", out);
        quoted(out, png);
        fputc('\n', out);
    }
    fprintf(out,
            "set multiplot layout 1,%d title 'perplexity: training (lines), validation "
            "(dashed, points)'\nset logscale y\nset grid\nset key top right\nset ylabel "
            "'perplexity'\n",
            naxes);
    for (int a = 0; a < naxes; a++) {
        char xlabel[64];
        switch (axes[a]) {
        case SL_PLOT_X_STEPS:
            panel(out, runs, n, "", 1, "step");
            break;
        case SL_PLOT_X_TIME:
            snprintf(xlabel, sizeof xlabel, "training time (%s)", unit_name);
            panel(out, runs, n, "", 3, xlabel);
            break;
        case SL_PLOT_X_WALL:
            wall_axis(out, runs, n);
            break;
        }
    }
    fputs("unset multiplot\nset output\n", out);
}
