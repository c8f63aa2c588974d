/* Reads the launchers' environment variables (Slurm, Open MPI, PMI): rank, size and
 * local rank. Owns the table of their names; must not decide anything with them
 * (parsing, range checks and messages to the user are the callers'), nor read any
 * other variable. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_launcher_env.h"

#include <stddef.h>
#include <stdlib.h>

static const struct {
    sl_launcher_t launcher;
    const char *rank, *size, *local;
} launchers[] = {
    {SL_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {SL_LAUNCHER_OMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {SL_LAUNCHER_PMI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
};

#define NLAUNCHERS (sizeof launchers / sizeof launchers[0])

sl_launcher_t
sl_launcher_env_read(sl_launcher_env_t *env)
{
    env->launcher = SL_LAUNCHER_NONE;
    env->rank = env->size = env->rank_var = env->size_var = NULL;
    for (size_t i = 0; i < NLAUNCHERS; i++) {
        const char *r = getenv(launchers[i].rank), *n = getenv(launchers[i].size);

        if (!r || !n)
            continue;
        env->launcher = launchers[i].launcher;
        env->rank = r;
        env->size = n;
        env->rank_var = launchers[i].rank;
        env->size_var = launchers[i].size;
        break;
    }
    return env->launcher;
}

int
sl_launcher_local_rank(int rank, const char **from)
{
    for (size_t i = 0; i < NLAUNCHERS; i++) {
        const char *l = getenv(launchers[i].local), *g = getenv(launchers[i].rank);
        char *end;
        long lv, gv;

        if (!l || !g || !*l || !*g)
            continue;
        lv = strtol(l, &end, 10);
        if (*end || lv < 0 || lv > 65535)
            continue;
        gv = strtol(g, &end, 10);
        if (*end || gv != rank)
            continue;
        *from = launchers[i].local;
        return (int)lv;
    }
    *from = "node rank";
    return rank;
}
