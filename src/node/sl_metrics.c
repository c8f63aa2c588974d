/* metrics.jsonl writing and trimming on resume; JSON scalars. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include "node/sl_metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_file.h"
#include "common/sl_log.h"

void
sl_json_number(FILE *out, double v)
{
    if (isfinite(v))
        fprintf(out, "%.6g", v);
    else
        fputs("null", out);
}

void
sl_json_string(FILE *out, const char *s)
{
    if (!s) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* The "step" of a metrics line (line up to its '\n' at *end, or to a NUL before), or -1
 * when it has none. Why the line is ended for the search: strtol would otherwise skip
 * the '\n' as white space and read the next line's number as this one's, and strstr
 * would search the rest of the file for each line (quadratic). */
static long
line_step(char *line, char *end)
{
    static const char key[] = "\"step\":";
    const char *s;
    long step = -1;

    *end = '\0';
    if ((s = strstr(line, key)))
        step = strtol(s + sizeof key - 1, NULL, 10);
    *end = '\n';
    return step;
}

/* Why: a run resumed from step N would otherwise repeat the steps after N that an
 * earlier process logged before it stopped; the file must read as one run. */
static sl_status_t
trim_lines(const char *path, long keep_through_step)
{
    char *data, *line, *end;
    size_t len;
    int drop = 0;
    sl_atomic_file_t f;
    sl_status_t rc;

    if (access(path, F_OK) != 0)
        return SL_OK;
    SL_TRY(sl_file_read_all(path, &data, &len));
    for (line = data; line < data + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(data + len - line));
        if (!end || line_step(line, end) > keep_through_step) {
            drop = 1;
            break;
        }
    }
    if (!drop) {
        free(data);
        return SL_OK;
    }
    rc = sl_atomic_open(&f, path);
    for (line = data; rc == SL_OK && line < data + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(data + len - line));
        if (!end)
            break;
        if (line_step(line, end) <= keep_through_step)
            rc = sl_atomic_write(&f, line, (size_t)(end + 1 - line));
    }
    free(data);
    if (rc == SL_OK)
        return sl_atomic_commit(&f);
    sl_atomic_abort(&f);
    return rc;
}

sl_status_t
sl_metrics_open(sl_metrics_t *m, const char *path, long keep_through_step)
{
    m->fp = NULL;
    m->path = strdup(path);
    if (!m->path)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    if (trim_lines(path, keep_through_step) != SL_OK) {
        sl_metrics_close(m);
        return SL_ERR_IO;
    }
    m->fp = fopen(path, "a");
    if (!m->fp) {
        sl_status_t rc = sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
        sl_metrics_close(m);
        return rc;
    }
    return SL_OK;
}

/* Why: the records of nodes on different hosts line up by it, and a resumed run's gap
 * shows. */
void
sl_json_wall_time(FILE *out)
{
    char now[32];

    fprintf(out, ",\"wall_time\":\"%s\"", sl_log_utc_now(now, sizeof now));
}

int
sl_json_number_at(const char *text, const char *key, double *v)
{
    char pat[64], *end;
    const char *p;
    double x;

    snprintf(pat, sizeof pat, "\"%s\":", key);
    if (!(p = strstr(text, pat)))
        return 0;
    p += strlen(pat);
    x = strtod(p, &end);
    if (end == p || !isfinite(x))
        return 0; /* *v as it was: shoal plot's time_s keeps its 0, not a NaN */
    *v = x;
    return 1;
}

static sl_status_t
end_line(sl_metrics_t *m)
{
    sl_json_wall_time(m->fp);
    fputs("}\n", m->fp);
    if (fflush(m->fp) != 0 || ferror(m->fp))
        return sl_err_set(SL_ERR_IO, "%s: write failed: %s", m->path, strerror(errno));
    return SL_OK;
}

sl_status_t
sl_metrics_step(sl_metrics_t *m, const sl_metrics_step_t *r)
{
    fprintf(m->fp, "{\"step\":%ld,\"epoch\":%d,\"epoch_frac\":", r->step, r->epoch);
    sl_json_number(m->fp, r->epoch_frac);
    fprintf(m->fp, ",\"tokens\":%" PRIu64 ",\"tokens_per_s\":", r->tokens);
    sl_json_number(m->fp, r->tokens_per_s);
    fputs(",\"loss\":", m->fp);
    sl_json_number(m->fp, r->loss);
    fputs(",\"ppl\":", m->fp);
    sl_json_number(m->fp, exp(r->loss));
    fputs(",\"lr\":", m->fp);
    sl_json_number(m->fp, r->lr);
    fputs(",\"grad_norm\":", m->fp);
    sl_json_number(m->fp, r->grad_norm);
    fputs(",\"time_s\":", m->fp);
    sl_json_number(m->fp, r->time_s);
    fputs(",\"version\":", m->fp);
    sl_json_string(m->fp, PACKAGE_VERSION);
    return end_line(m);
}

sl_status_t
sl_metrics_eval(sl_metrics_t *m, const char *split, long step, double loss)
{
    fputs("{\"event\":\"eval\",\"split\":", m->fp);
    sl_json_string(m->fp, split);
    fprintf(m->fp, ",\"step\":%ld,\"loss\":", step);
    sl_json_number(m->fp, loss);
    fputs(",\"ppl\":", m->fp);
    sl_json_number(m->fp, exp(loss));
    fputs(",\"bpc\":", m->fp);
    sl_json_number(m->fp, loss / log(2.0));
    return end_line(m);
}

sl_status_t
sl_metrics_membership(sl_metrics_t *m, long step, int rank, int members, uint32_t epoch, int joined,
                      const char *why)
{
    fprintf(m->fp,
            "{\"event\":\"membership\",\"step\":%ld,\"rank\":%d,\"members\":%d,"
            "\"epoch\":%" PRIu32 ",\"change\":\"%s\",\"why\":",
            step, rank, members, epoch, joined ? "joined" : "left");
    sl_json_string(m->fp, why);
    return end_line(m);
}

void
sl_metrics_close(sl_metrics_t *m)
{
    if (m->fp)
        fclose(m->fp);
    free(m->path);
    m->fp = NULL;
    m->path = NULL;
}
