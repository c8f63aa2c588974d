/* The CPU line of the C benchmarks (bench_cpu.h). */
#include "config.h"

#include "bench/bench_cpu.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void
bench_print_cpu(void)
{
    char line[256], name[128] = "unknown", family[16] = "?", model[16] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");

    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');

        if (!v)
            continue;
        v += v[1] == ' ' ? 2 : 1;
        v[strcspn(v, "\n")] = '\0';
        if (strncmp(line, "model name", 10) == 0 && strcmp(name, "unknown") == 0)
            snprintf(name, sizeof name, "%s", v);
        else if (strncmp(line, "cpu family", 10) == 0 && family[0] == '?')
            snprintf(family, sizeof family, "%s", v);
        else if (strncmp(line, "model\t", 6) == 0 && model[0] == '?')
            snprintf(model, sizeof model, "%s", v);
    }
    if (f)
        fclose(f);
    printf("# cpu: %s (family %s, model %s)\n", name, family, model);
}

double
bench_cpu_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
