/* The CPU line every figure of the C benchmarks carries. */
#ifndef BENCH_CPU_H
#define BENCH_CPU_H

/* Prints "# cpu: MODEL (family F, model M)" from /proc/cpuinfo ("unknown" and "?" where
 * it has none). */
void bench_print_cpu(void);
/* CPU seconds of this process, all its threads (CLOCK_PROCESS_CPUTIME_ID). */
double bench_cpu_seconds(void);

#endif
