/* Which build of the CPU loops runs. The loop files are compiled once per x86-64 level
 * (baseline, v3 = AVX2 + FMA, v4 = AVX-512; kernels/Makemodule.am) or, off x86-64 or
 * with an older compiler, once for the compiler's target ("native"). A CPU backend
 * takes the highest level this CPU runs unless SHOAL_CPU_ISA names a lower one, so
 * that one machine can compare them. */
#ifndef SL_CPU_ISA_H
#define SL_CPU_ISA_H

#include "common/sl_status.h"
#include "kernels/sl_backend.h"

typedef struct {
    const char *name;              /* "baseline", "v3", "v4"; "native" for the one build */
    const char *desc;              /* "x86-64-v4 (AVX-512)", for describe() and --version */
    const sl_backend_ops_t *loops; /* that build's loops; only the loop entries are set */
} sl_cpu_isa_t;

/* The builds in this binary, lowest level first: i in [0, sl_cpu_isa_count()). */
int sl_cpu_isa_count(void);
const sl_cpu_isa_t *sl_cpu_isa_at(int i);

/* Nonzero when this CPU (and its OS) runs isa's instructions. */
int sl_cpu_isa_runs_here(const sl_cpu_isa_t *isa);

/* The build a backend uses: name when not NULL, else SHOAL_CPU_ISA when set and not
 * empty, else the highest level this CPU runs. SL_ERR_INVALID, with a message naming
 * the source (SHOAL_CPU_ISA or the argument), for a name not built here or one this
 * CPU cannot run. *out points into a static table. */
sl_status_t sl_cpu_isa_pick(const char *name, const sl_cpu_isa_t **out);

#endif
