/* The watchdog's reading of /proc/PID/stat (sl_supervisor_watch.c), on its own for
 * tests/fuzz/fuzz_runfiles.c: the file's command name is the node's to choose. Internal
 * to src/node. */
#ifndef SL_SUPERVISOR_WATCH_INTERNAL_H
#define SL_SUPERVISOR_WATCH_INTERNAL_H

/* The CPU time (utime + stime, in s) and whether the process is stopped (state T or t)
 * of the /proc/PID/stat file at path: its first 1023 bytes, read after the last ')' (the
 * command name may hold spaces and parentheses). -1, *stopped 0, where the file cannot
 * be opened or is not in that format. */
double sl_sup_proc_stat_cpu_s(const char *path, int *stopped);

#endif
