/* Clocks: monotonic seconds for timing, wall-clock for logs. */
#ifndef SL_CLOCK_H
#define SL_CLOCK_H

/* Monotonic time in seconds (CLOCK_MONOTONIC). */
double sl_clock_now(void);
/* Formats seconds as "1h02m", "3m04s" or "12s" into buf (at least 16 bytes). */
const char *sl_clock_format_duration(double seconds, char *buf, unsigned size);

#endif
