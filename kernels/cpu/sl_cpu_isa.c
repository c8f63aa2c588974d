/* The table of the CPU loops' builds, the CPU feature test and SHOAL_CPU_ISA (see
 * sl_cpu_isa.h). Compiled for the baseline: it runs before anything knows the CPU. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sl_cpu_isa.h"

#ifdef SL_CPU_ISA_LEVELS
extern const sl_backend_ops_t sl_cpu_loops_base, sl_cpu_loops_v3, sl_cpu_loops_v4;

static const sl_cpu_isa_t isas[] = {
    {"baseline", "x86-64 (baseline)", &sl_cpu_loops_base},
    {"v3", "x86-64-v3 (AVX2, FMA)", &sl_cpu_loops_v3},
    {"v4", "x86-64-v4 (AVX-512)", &sl_cpu_loops_v4},
};
#else
extern const sl_backend_ops_t sl_cpu_loops_native;

static const sl_cpu_isa_t isas[] = {{"native", "compiler default", &sl_cpu_loops_native}};
#endif

enum { NISA = sizeof isas / sizeof isas[0] };

int
sl_cpu_isa_count(void)
{
    return NISA;
}

const sl_cpu_isa_t *
sl_cpu_isa_at(int i)
{
    return i >= 0 && i < NISA ? &isas[i] : NULL;
}

/* gcc's and clang's x86-64-vN tests include the OS's support for the wider registers
 * (XGETBV), not only CPUID's feature bits. */
int
sl_cpu_isa_runs_here(const sl_cpu_isa_t *isa)
{
#ifdef SL_CPU_ISA_LEVELS
    __builtin_cpu_init();
    if (isa == &isas[1])
        return __builtin_cpu_supports("x86-64-v3");
    if (isa == &isas[2])
        return __builtin_cpu_supports("x86-64-v4");
#endif
    return isa != NULL;
}

static void
list_names(char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (int i = 0; i < NISA && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", isas[i].name);
}

sl_status_t
sl_cpu_isa_pick(const char *name, const sl_cpu_isa_t **out)
{
    const char *from = "cpu loop level";
    char names[64];
    int best = 0;

    *out = NULL;
    if (!name) {
        name = getenv("SHOAL_CPU_ISA");
        from = "SHOAL_CPU_ISA";
    }
    for (int i = 0; i < NISA; i++) {
        if (sl_cpu_isa_runs_here(&isas[i]))
            best = i;
    }
    if (!name || !name[0]) {
        *out = &isas[best];
        return SL_OK;
    }
    for (int i = 0; i < NISA; i++) {
        if (strcmp(name, isas[i].name) != 0)
            continue;
        if (!sl_cpu_isa_runs_here(&isas[i]))
            return sl_err_set(SL_ERR_INVALID,
                              "%s=%s: this CPU cannot run %s; the highest it runs is %s", from,
                              name, isas[i].desc, isas[best].name);
        *out = &isas[i];
        return SL_OK;
    }
    list_names(names, sizeof names);
    return sl_err_set(SL_ERR_INVALID, "%s=%s: unknown (built here: %s)", from, name, names);
}
