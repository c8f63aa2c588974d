/* Monotonic clock and duration formatting. */
#include "common/sl_clock.h"

#include <stdio.h>
#include <time.h>

double
sl_clock_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *
sl_clock_format_duration(double seconds, char *buf, unsigned size)
{
    long s = seconds < 0 ? 0 : (long)(seconds + 0.5);

    if (s >= 3600)
        snprintf(buf, size, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
    else if (s >= 60)
        snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, size, "%lds", s);
    return buf;
}
