/* Progress line formatting and display. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_progress.h"

#include <math.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"

const char *
sl_progress_format(const sl_progress_line_t *l, char *buf, size_t size)
{
    char eta[32], quality[48], sync[32] = "";

    if (l->char_level)
        snprintf(quality, sizeof quality, "bpc %.3f", l->loss / log(2.0));
    else
        snprintf(quality, sizeof quality, "ppl %.1f", exp(l->loss));
    if (l->eta_s >= 0)
        sl_clock_format_duration(l->eta_s, eta, sizeof eta);
    else
        snprintf(eta, sizeof eta, "?");
    if (l->sync_pct > 0)
        snprintf(sync, sizeof sync, "sync %.0f%% | ", l->sync_pct);
    snprintf(buf, size,
             "step %ld/%ld | ep %d %.1f%% | %.0f tok/s | loss %.3f | %s | lr %g | %sETA %s",
             l->step, l->total_steps, l->epoch, l->epoch_pct, l->tokens_per_s, l->loss, quality,
             l->lr, sync, eta);
    return buf;
}

void
sl_progress_init(sl_progress_t *p, FILE *out, int quiet)
{
    p->out = out;
    p->tty = isatty(fileno(out));
    p->quiet = quiet;
    p->line_open = 0;
}

void
sl_progress_show(sl_progress_t *p, const sl_progress_line_t *l)
{
    char line[256];

    if (p->quiet)
        return;
    sl_progress_format(l, line, sizeof line);
    if (p->tty) {
        fprintf(p->out, "\r%s\033[K", line); /* clear what a longer line left */
        p->line_open = 1;
    } else {
        char stamp[320];

        fprintf(p->out, "%s%s\n", sl_log_stamp(stamp, sizeof stamp), line); /* a log file */
    }
    fflush(p->out);
}

void
sl_progress_break(sl_progress_t *p)
{
    if (p->line_open) {
        fputc('\n', p->out);
        fflush(p->out);
        p->line_open = 0;
    }
}
