/* libFuzzer target: the readers of files that a person or another program may change
 * while shoal does not look: a run's metrics.jsonl as `shoal plot` reads it
 * (sl_plot_read), a node's best.json (sl_run_best_read, on resume), the watchdog's
 * /proc/PID/stat (sl_sup_proc_stat_cpu_s; its command name is the node's to choose),
 * and two that rewrite what they read: metrics.jsonl trimmed on resume
 * (sl_metrics_open) and summary.json at a run's end (sl_report_summary_run_rate).
 * Each input is written to a file in a mkdtemp directory under $TMPDIR (else /tmp),
 * made once, and read back by the reader that its byte 0 chooses:
 *   bits 0-1  0 or 3: metrics.jsonl, 1: see bits 2-3, 2: best.json
 *   metrics:  bit 2: sl_plot_read is given the directory, not the file; bit 3: with the
 *             directory, the file is node-0/metrics.jsonl (a run of several nodes)
 *   best:     bits 2-3: the step it may be at most (upto): 0, 100, 10^6, LONG_MAX
 *   1:        bits 2-3 0 or 3: /proc/PID/stat; 1: metrics.jsonl trimmed, bits 4-7 the
 *             step kept through (keeps[] in fuzz_trim: 0, 1, 2, 5, 10, 20, 40, 100, 1000,
 *             10^6, 2^31 - 1, 2^31, -1, LONG_MIN, LONG_MAX - 1, LONG_MAX); 2: summary.json,
 *             bits 4-7 the figures added (figs[] in fuzz_summary)
 * The rest of the input is the file.
 *
 * Each reader is compared with a reference reader written here from its header's
 * promises. metrics.jsonl, line by line (a line ends at '\n'; the reader sees it up to
 * its first NUL): a last line without its newline is left out; a line that does not
 * start with '{', or whose "wall_time":" is no ISO 8601 UTC time of sl_metrics.c's shape
 * (2026-11-27T10:15:07[.123]Z, a day of the month that is, digits only), is refused, as
 * FILE:LINE: ...; a record with "event":"eval", "split":"valid" and finite step and ppl
 * is a validation point (its training time that of the last training point whose step
 * is at most its own), one without "event" with finite step and ppl a training point
 * (time_s when it is a finite number, else 0); no training point is "FILE: no training
 * steps recorded yet". Every point's values must be the reference's (numbers as strtod
 * reads them, wall times compared with timegm's to a millisecond), the run's label the
 * directory's name, its path the file read, and a refusal one line of printable ASCII
 * that starts with that path. The runs read are then drawn (sl_plot_script, to
 * /dev/null) against every axis. best.json: the numbers after "step": and
 * "valid_loss":, finite, the step a whole number from 0 to upto, else none (INFINITY,
 * -1). /proc/PID/stat: where the text after the last ')' is the kernel's (a state byte,
 * then ten and two more decimal numbers, digits only and within range), the state and
 * utime + stime must be the reference's; any other text may be refused (-1) or read,
 * but a value read is finite and at least 0. Trimming: each line's step is the number
 * strtol reads after its first "step": (the line seen up to its '\n' or a NUL), -1 with
 * none; the lines of a step at most the one kept through stay, byte for byte, the
 * others and an unfinished last line go, by a rename of a new file over the old, and a
 * file with nothing to drop is left as it is. summary.json: a file ending in "\n}\n"
 * keeps every byte before it, NULs too, and gains the three figures as sl_report.c
 * writes them, renamed into place; another is SL_ERR_FORMAT, "FILE: ...", untouched.
 * Neither may leave a temp file. A broken promise prints what broke and aborts. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "node/sl_metrics.h"
#include "node/sl_plot.h"
#include "node/sl_report.h"
#include "node/sl_run_files.h"
#include "node/sl_supervisor_watch_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[4096], node0[4200];

static void
broken(const char *what)
{
    fprintf(stderr, "fuzz_runfiles: %s (message \"%s\")\n", what, sl_err_msg());
    abort();
}

static void
remove_dir(void)
{
    rmdir(node0);
    rmdir(dir);
}

/* The directory, made at the first input. */
static void
setup(void)
{
    const char *tmp = getenv("TMPDIR");

    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "%s/fuzz-runfiles-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        broken("cannot make a temporary directory");
    snprintf(node0, sizeof node0, "%s/node-0", dir);
    if (mkdir(node0, 0700) != 0)
        broken("cannot make node-0");
    atexit(remove_dir);
    sl_log_set_level(SL_LOG_ERROR); /* "an unfinished last line, left out" each time */
}

static void
write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");

    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        broken("cannot write the input's file");
}

/* The message of a refusal: one non-empty line of printable ASCII starting with
 * prefix. */
static void
check_message(const char *prefix)
{
    const char *m = sl_err_msg();

    if (!*m)
        broken("a refusal without a message");
    for (const char *c = m; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            broken("a message that is not one line of printable text");
    if (strncmp(m, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "fuzz_runfiles: the message should start with \"%s\"\n", prefix);
        broken("a message that does not name the file (and line)");
    }
}

/* --- metrics.jsonl ------------------------------------------------------------------ */

/* The number after the first "key": in text, as strtod reads it; 1 when it is finite. */
static int
ref_number(const char *text, const char *key, double *v)
{
    char pat[32], *end;
    const char *p;
    double x;

    snprintf(pat, sizeof pat, "\"%s\":", key);
    if (!(p = strstr(text, pat)))
        return 0;
    p += strlen(pat);
    x = strtod(p, &end);
    if (end == p || !isfinite(x))
        return 0;
    *v = x;
    return 1;
}

/* n digits at s (never past a NUL) into *v; 1, or 0 when they are not n digits. */
static int
ref_digits(const char *s, int n, int *v)
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
ref_days_in(int y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    return days[m - 1] + (m == 2 && leap);
}

/* YYYY-MM-DDTHH:MM:SS[.F+]Z" at s into *t (s since 1970, UTC, by timegm); 0 when it is
 * not that. */
static int
ref_utc(const char *s, double *t)
{
    int y, mo, d, h, mi, sec;
    size_t i = 19;
    double frac = 0;
    struct tm tm;

    if (!ref_digits(s, 4, &y) || s[4] != '-' || !ref_digits(s + 5, 2, &mo) || s[7] != '-' ||
        !ref_digits(s + 8, 2, &d) || s[10] != 'T' || !ref_digits(s + 11, 2, &h) || s[13] != ':' ||
        !ref_digits(s + 14, 2, &mi) || s[16] != ':' || !ref_digits(s + 17, 2, &sec))
        return 0;
    if (mo < 1 || mo > 12 || d < 1 || d > ref_days_in(y, mo) || h > 23 || mi > 59 || sec > 60)
        return 0;
    if (s[i] == '.') {
        double scale = 0.1;
        if (s[++i] < '0' || s[i] > '9')
            return 0;
        for (; s[i] >= '0' && s[i] <= '9'; i++, scale /= 10)
            frac += (s[i] - '0') * scale;
    }
    if (s[i] != 'Z' || s[i + 1] != '"')
        return 0;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    *t = (double)timegm(&tm) + frac;
    return 1;
}

typedef struct {
    double *train, *valid; /* SL_PLOT_COLS each, as sl_plot_run_t's */
    size_t ntrain, nvalid;
    size_t bad_line; /* the line refused, 0: none */
    const char *why; /* what its message says */
} ref_run_t;

/* The reference reading of data (size bytes) into r; its arrays hold a point per
 * newline. */
static void
ref_plot(const uint8_t *data, size_t size, ref_run_t *r)
{
    size_t pos = 0, lineno = 0, lines = 1;

    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    memset(r, 0, sizeof *r);
    r->train = malloc(lines * SL_PLOT_COLS * sizeof(double));
    r->valid = malloc(lines * SL_PLOT_COLS * sizeof(double));
    if (!r->train || !r->valid)
        broken("out of memory");
    while (pos < size) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t len;
        char *text;
        const char *w;
        double v[SL_PLOT_COLS] = {0};

        if (!nl)
            break; /* an unfinished last line */
        lineno++;
        len = (size_t)(nl - (data + pos)) + 1;
        text = malloc(len + 1);
        if (!text)
            broken("out of memory");
        memcpy(text, data + pos, len);
        text[len] = '\0'; /* and the reader's view ends at a NUL before */
        pos += len;
        v[SL_PLOT_WALL_S] = NAN;
        if (text[0] != '{') {
            r->why = "not a JSON object";
        } else if ((w = strstr(text, "\"wall_time\":\"")) &&
                   !ref_utc(w + strlen("\"wall_time\":\""), &v[SL_PLOT_WALL_S])) {
            r->why = "wall_time";
        } else if (strstr(text, "\"event\":\"eval\"")) {
            if (strstr(text, "\"split\":\"valid\"") && ref_number(text, "step", &v[SL_PLOT_STEP]) &&
                ref_number(text, "ppl", &v[SL_PLOT_PPL])) {
                for (size_t i = r->ntrain; i-- > 0;)
                    if (r->train[SL_PLOT_COLS * i + SL_PLOT_STEP] <= v[SL_PLOT_STEP]) {
                        v[SL_PLOT_TIME_S] = r->train[SL_PLOT_COLS * i + SL_PLOT_TIME_S];
                        break;
                    }
                memcpy(r->valid + SL_PLOT_COLS * r->nvalid++, v, sizeof v);
            }
        } else if (!strstr(text, "\"event\"") && ref_number(text, "step", &v[SL_PLOT_STEP]) &&
                   ref_number(text, "ppl", &v[SL_PLOT_PPL])) {
            ref_number(text, "time_s", &v[SL_PLOT_TIME_S]);
            memcpy(r->train + SL_PLOT_COLS * r->ntrain++, v, sizeof v);
        }
        free(text);
        if (r->why) {
            r->bad_line = lineno;
            return;
        }
    }
    if (r->ntrain == 0)
        r->why = "no training steps recorded yet";
}

static void
compare_points(const double *got, const double *want, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        const double *g = got + SL_PLOT_COLS * k, *w = want + SL_PLOT_COLS * k;
        for (int c = 0; c < SL_PLOT_WALL_S; c++)
            if (!(g[c] == w[c])) {
                fprintf(stderr, "fuzz_runfiles: point %zu column %d is %.17g, not %.17g\n", k, c,
                        g[c], w[c]);
                broken("a point unlike the reference's");
            }
        if (isnan(g[SL_PLOT_WALL_S]) != isnan(w[SL_PLOT_WALL_S]) ||
            fabs(g[SL_PLOT_WALL_S] - w[SL_PLOT_WALL_S]) > 1e-3) {
            fprintf(stderr, "fuzz_runfiles: point %zu's wall time is %.17g, not %.17g\n", k,
                    g[SL_PLOT_WALL_S], w[SL_PLOT_WALL_S]);
            broken("a wall time unlike the reference's");
        }
    }
}

static void
fuzz_metrics(const uint8_t *data, size_t size, int mode)
{
    char path[4300], prefix[4400];
    const char *given = path;
    const char *label = strrchr(dir, '/') + 1;
    sl_plot_run_t run;
    ref_run_t r;
    sl_status_t st;

    snprintf(path, sizeof path, "%s/metrics.jsonl", (mode & 3) == 3 ? node0 : dir);
    if (mode & 1)
        given = dir;
    write_file(path, data, size);
    ref_plot(data, size, &r);
    st = sl_plot_read(&run, given);
    unlink(path);
    if (r.why) {
        if (st == SL_OK)
            broken(r.bad_line ? "a bad line taken" : "a run without training points taken");
        if (r.bad_line)
            snprintf(prefix, sizeof prefix, "%s:%zu: ", path, r.bad_line);
        else
            snprintf(prefix, sizeof prefix, "%s: ", path);
        check_message(prefix);
        if (!strstr(sl_err_msg(), r.why))
            broken("a refusal for another reason than the reference's");
        if (run.train || run.valid || run.label || run.path)
            broken("a refused run that keeps something");
    } else {
        FILE *null;
        sl_plot_x_t axes[] = {SL_PLOT_X_STEPS, SL_PLOT_X_TIME, SL_PLOT_X_WALL};

        if (st != SL_OK)
            broken("a good file refused");
        if (run.ntrain != r.ntrain || run.nvalid != r.nvalid) {
            fprintf(stderr, "fuzz_runfiles: %zu and %zu points, not %zu and %zu\n", run.ntrain,
                    run.nvalid, r.ntrain, r.nvalid);
            broken("points unlike the reference's");
        }
        compare_points(run.train, r.train, r.ntrain);
        compare_points(run.valid, r.valid, r.nvalid);
        if (!run.label || strcmp(run.label, label) != 0 || !run.path || strcmp(run.path, path) != 0)
            broken("a run's label or path that is not its directory's or file's");
        if (!(null = fopen("/dev/null", "w")))
            broken("cannot open /dev/null");
        if (sl_plot_check_axes(&run, 1, axes, 3) == SL_OK)
            sl_plot_script(null, &run, 1, "fuzz.png", axes, 3);
        else
            sl_plot_script(null, &run, 1, NULL, axes, 2);
        fclose(null);
        sl_plot_run_fini(&run);
    }
    free(r.train);
    free(r.valid);
}

/* --- best.json ---------------------------------------------------------------------- */

static void
fuzz_best(const uint8_t *data, size_t size, int mode)
{
    static const long uptos[] = {0, 100, 1000000, LONG_MAX};
    long upto = uptos[mode & 3];
    char path[4300], *text = malloc(size + 1);
    sl_run_best_t best;
    double step, loss, want_loss = INFINITY;
    long want_step = -1;

    if (!text)
        broken("out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    /* 2^63 and above are no long: (double)LONG_MAX is 2^63 itself */
    if (ref_number(text, "step", &step) && ref_number(text, "valid_loss", &loss) && step >= 0 &&
        step <= (double)upto && step < 0x1p63 && step == floor(step)) {
        want_loss = loss;
        want_step = (long)step;
    }
    snprintf(path, sizeof path, "%s/best.json", dir);
    write_file(path, data, size);
    sl_run_best_read(dir, upto, &best);
    unlink(path);
    if (best.step != want_step || !(best.loss == want_loss)) {
        fprintf(stderr, "fuzz_runfiles: best %ld %.17g, not %ld %.17g\n", best.step, best.loss,
                want_step, want_loss);
        broken("a best unlike the reference's");
    }
    free(text);
}

/* --- /proc/PID/stat ----------------------------------------------------------------- */

/* Skips white space as scanf does, then one decimal number of digits only, unsigned
 * when !sign_ok; *v its value. The bytes read, or 0 when it is not one or exceeds
 * max. */
static size_t
ref_field(const char *s, int sign_ok, unsigned long max, unsigned long *v)
{
    size_t i = 0, start;

    while (isspace((unsigned char)s[i]))
        i++;
    if (sign_ok && s[i] == '-')
        i++;
    start = i;
    *v = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (*v > (max - d) / 10)
            return 0;
        *v = *v * 10 + d;
    }
    return i > start ? i : 0;
}

static void
fuzz_proc_stat(const uint8_t *data, size_t size)
{
    char path[4300], buf[1024], state;
    const char *p;
    size_t n = size < sizeof buf - 1 ? size : sizeof buf - 1, used;
    unsigned long v, utime = 0, stime = 0;
    int kernel_like = 0, stopped = -1;
    double cpu;

    memcpy(buf, data, n);
    buf[n] = '\0';
    /* the kernel's shape: ") S" then 10 numbers (5 signed), utime and stime */
    if ((p = strrchr(buf, ')'))) {
        p++;
        while (isspace((unsigned char)*p))
            p++;
        state = *p;
        if (state && !isspace((unsigned char)state)) {
            p++;
            kernel_like = 1;
            for (int f = 0; f < 12 && kernel_like; f++) {
                used = ref_field(p, f < 5, f < 5 ? INT_MAX : f < 10 ? UINT_MAX : ULONG_MAX / 2, &v);
                kernel_like = used > 0;
                p += used;
                if (f == 10)
                    utime = v;
                else if (f == 11)
                    stime = v;
            }
        }
    }
    snprintf(path, sizeof path, "%s/stat", dir);
    write_file(path, data, size);
    cpu = sl_sup_proc_stat_cpu_s(path, &stopped);
    unlink(path);
    if (stopped != 0 && stopped != 1)
        broken("a stopped flag that is neither 0 nor 1");
    if (cpu != -1 && !(isfinite(cpu) && cpu >= 0))
        broken("a CPU time that is neither -1 nor a time");
    if (cpu == -1 && stopped)
        broken("a file refused that says its process is stopped");
    if (kernel_like) {
        double want = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
        int want_stopped = state == 'T' || state == 't';
        if (cpu != want || stopped != want_stopped) {
            fprintf(stderr, "fuzz_runfiles: CPU %.17g s, stopped %d; not %.17g s, %d\n", cpu,
                    stopped, want, want_stopped);
            broken("a /proc/PID/stat read unlike the reference's");
        }
    }
}

/* --- files rewritten: metrics.jsonl on resume, summary.json at a run's end ----------- */

/* The whole file at path into a malloc'd buffer, *len its bytes. */
static uint8_t *
read_back(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct stat sb;
    uint8_t *buf;

    if (!f || fstat(fileno(f), &sb) != 0 || !(buf = malloc((size_t)sb.st_size + 1)) ||
        fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size || fgetc(f) != EOF)
        broken("cannot read the rewritten file back");
    fclose(f);
    *len = (size_t)sb.st_size;
    return buf;
}

/* The file at path must hold want (n bytes), in a new file (an atomic rewrite renames
 * a new one into place) when renamed, else in the one written (ino); and no temp file
 * may be left beside it. */
static void
check_file(const char *path, const uint8_t *want, size_t n, int renamed, ino_t ino)
{
    size_t len;
    uint8_t *got = read_back(path, &len);
    struct stat sb;
    DIR *d;
    struct dirent *e;

    if (len != n || memcmp(got, want, n) != 0) {
        size_t i = 0;
        while (i < len && i < n && got[i] == want[i])
            i++;
        fprintf(stderr, "fuzz_runfiles: %zu bytes, not %zu; the first difference at %zu\n", len, n,
                i);
        broken("a rewritten file unlike the reference's");
    }
    free(got);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (sb.st_ino != ino) != renamed)
        broken(renamed ? "a file rewritten in place, not renamed over"
                       : "a file replaced that had nothing to change");
    if (!(d = opendir(dir)))
        broken("cannot read the temporary directory");
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "node-0") &&
            strcmp(e->d_name, strrchr(path, '/') + 1)) {
            fprintf(stderr, "fuzz_runfiles: %s left beside %s\n", e->d_name, path);
            broken("a file left behind");
        }
    closedir(d);
}

/* The step of a line (its bytes before the '\n', read up to a NUL): the number strtol
 * reads after its first "step":, -1 when it has none. */
static long
ref_line_step(const uint8_t *line, size_t len)
{
    char *text = malloc(len + 1), *s;
    long step = -1;

    if (!text)
        broken("out of memory");
    memcpy(text, line, len);
    text[len] = '\0';
    if ((s = strstr(text, "\"step\":")))
        step = strtol(s + strlen("\"step\":"), NULL, 10);
    free(text);
    return step;
}

/* sl_metrics_open's trimming: the lines whose step is at most keep (or who have none)
 * are kept, byte for byte and in order; the others and an unfinished last line are
 * dropped by an atomic rewrite; with nothing to drop, the file is not rewritten. */
static void
fuzz_trim(const uint8_t *data, size_t size, int mode)
{
    static const long keeps[16] = {
        0,    1,       2,       5,        10, 20,       40,           100,
        1000, 1000000, INT_MAX, 1L << 31, -1, LONG_MIN, LONG_MAX - 1, LONG_MAX};
    long keep = keeps[mode & 15];
    char path[4300];
    uint8_t *want = malloc(size + 1);
    size_t nwant = 0, pos = 0;
    int drop = 0;
    sl_metrics_t m;
    struct stat sb;

    if (!want)
        broken("out of memory");
    while (pos < size) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t len;

        if (!nl) {
            drop = 1; /* an unfinished last line */
            break;
        }
        len = (size_t)(nl - (data + pos)) + 1;
        if (ref_line_step(data + pos, len - 1) <= keep) {
            memcpy(want + nwant, data + pos, len);
            nwant += len;
        } else {
            drop = 1;
        }
        pos += len;
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    write_file(path, data, size);
    if (stat(path, &sb) != 0)
        broken("cannot stat the input's file");
    if (sl_metrics_open(&m, path, keep) != SL_OK)
        broken("a metrics.jsonl that cannot be opened");
    sl_metrics_close(&m);
    if (drop)
        check_file(path, want, nwant, 1, sb.st_ino);
    else
        check_file(path, data, size, 0, sb.st_ino);
    unlink(path);
    free(want);
}

/* sl_report_summary_run_rate: a file that ends with "\n}\n" keeps every byte before it
 * and gains the three figures (%.6g, null when not finite), renamed into place; any other
 * is refused (SL_ERR_FORMAT, "FILE: ...") and left as it was. */
static void
fuzz_summary(const uint8_t *data, size_t size, int mode)
{
    static const struct {
        int nodes, reported;
        double rate;
    } figs[16] = {{2, 2, 12345.678},  {1, 1, 0},           {4, 3, NAN},
                  {0, 0, INFINITY},   {-1, -5, -INFINITY}, {INT_MAX, INT_MIN, 1e300},
                  {8, 8, 4.9e-324},   {3, 0, -0.0},        {16, 15, 1e-300},
                  {2, 1, -123.5},     {64, 64, 1e15},      {5, 5, 999999.5},
                  {7, 6, DBL_MAX},    {2, 2, 1.0 / 3},     {1, 0, 1e6},
                  {100, 99, 123456.7}};
    int ok = size >= 3 && memcmp(data + size - 3, "\n}\n", 3) == 0;
    double rate = figs[mode & 15].rate;
    char path[4300], prefix[4400], num[64], tail[256];
    uint8_t *want;
    size_t nwant = 0;
    struct stat sb;
    sl_status_t st;

    if (isfinite(rate))
        snprintf(num, sizeof num, "%.6g", rate);
    else
        snprintf(num, sizeof num, "null");
    snprintf(tail, sizeof tail,
             ",\n  \"run_tokens_per_s\": %s,\n  \"run_nodes\": %d,\n  \"run_nodes_reported\": %d"
             "\n}\n",
             num, figs[mode & 15].nodes, figs[mode & 15].reported);
    if (!(want = malloc(size + strlen(tail))))
        broken("out of memory");
    if (ok) {
        memcpy(want, data, size - 3);
        memcpy(want + size - 3, tail, strlen(tail));
        nwant = size - 3 + strlen(tail);
    }
    snprintf(path, sizeof path, "%s/summary.json", dir);
    write_file(path, data, size);
    if (stat(path, &sb) != 0)
        broken("cannot stat the input's file");
    st = sl_report_summary_run_rate(dir, figs[mode & 15].nodes, figs[mode & 15].reported, rate);
    if (ok) {
        if (st != SL_OK)
            broken("a summary refused that ends as shoal ends it");
        check_file(path, want, nwant, 1, sb.st_ino);
    } else {
        if (st != SL_ERR_FORMAT)
            broken("a summary that does not end in \"\\n}\\n\" not refused as SL_ERR_FORMAT");
        snprintf(prefix, sizeof prefix, "%s: ", path);
        check_message(prefix);
        check_file(path, data, size, 0, sb.st_ino);
    }
    unlink(path);
    free(want);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    setup();
    switch (data[0] & 3) {
    case 1:
        if ((data[0] >> 2 & 3) == 1)
            fuzz_trim(data + 1, size - 1, data[0] >> 4);
        else if ((data[0] >> 2 & 3) == 2)
            fuzz_summary(data + 1, size - 1, data[0] >> 4);
        else
            fuzz_proc_stat(data + 1, size - 1);
        break;
    case 2:
        fuzz_best(data + 1, size - 1, data[0] >> 2 & 3);
        break;
    default:
        fuzz_metrics(data + 1, size - 1, data[0] >> 2 & 3);
        break;
    }
    return 0;
}
