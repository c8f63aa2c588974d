/* Staggered sync phases (sl_sync_phase.h). */
#include "sync/sl_sync_phase.h"

#include <stdio.h>

#include "common/sl_log.h"

void
sl_sync_phases(const int *period, int ncomps, int stagger, int *phase)
{
    for (int c = 0; c < ncomps; c++) {
        long j = 0, m = 0;

        /* j: the components of this period before c; m: all of them */
        for (int d = 0; d < ncomps; d++) {
            if (period[d] != period[c])
                continue;
            j += d < c;
            m++;
        }
        phase[c] = stagger ? (int)(j * period[c] / m) : 0;
    }
}

int
sl_sync_phase_point(long t, int h, int p)
{
    return t >= 1 && (t + p) % h == 0;
}

long
sl_sync_phase_round(long t, int h, int p)
{
    return (t + p) / h;
}

long
sl_sync_phase_step(long round, int h, int p)
{
    return round * h - p;
}

void
sl_sync_phases_log(const sl_component_t *comps, const int *period, const int *phase, int ncomps)
{
    char line[1536];
    size_t used = 0;

    line[0] = '\0';
    for (int c = 0; c < ncomps && used < sizeof line; c++) {
        int seen = 0;

        for (int b = 0; b < c; b++)
            seen |= period[b] == period[c];
        if (seen)
            continue;
        used += (size_t)snprintf(line + used, sizeof line - used,
                                 "%severy %d steps:", used ? "; " : "", period[c]);
        for (int d = c; d < ncomps && used < sizeof line; d++)
            if (period[d] == period[c])
                used += (size_t)snprintf(line + used, sizeof line - used, " %s +%d", comps[d].name,
                                         phase[d]);
    }
    sl_log_info("sync", "staggered phases p_i (sync.stagger, sync at (t + p_i) mod H_i = 0): %s",
                line);
}
