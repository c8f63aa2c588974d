/* Reads the launchers' environment variables (torchrun, Open MPI, PMI, Slurm): rank,
 * size, local rank, and the rendezvous some of them imply. Owns the table of their
 * names and their syntax checks; must not decide what takes precedence over them
 * (flags, SHOAL_* variables, the configuration: sl_main.c does), nor read any other
 * variable. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_launcher_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_cli.h"
#include "node/sl_hostlist.h"

#define HOST_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_:[]%"

extern char **environ;

static const struct {
    sl_launcher_t launcher;
    const char *name, *rank, *size, *local;
} launchers[] = {
    {SL_LAUNCHER_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {SL_LAUNCHER_OMPI, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {SL_LAUNCHER_PMI, "PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {SL_LAUNCHER_SLURM, "Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

#define NLAUNCHERS (sizeof launchers / sizeof launchers[0])

/* The value of name in env, or NULL. */
static const char *
lookup(const char *const *env, const char *name)
{
    size_t n = strlen(name);

    for (; env && *env; env++)
        if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
            return *env + n + 1;
    return NULL;
}

/* A decimal number in [lo, hi] (digits only, at most 9); 0 when s is none. */
static int
decimal(const char *s, long lo, long hi, long *out)
{
    size_t n = strspn(s, "0123456789");

    if (n == 0 || n > 9 || s[n] != '\0')
        return 0;
    *out = strtol(s, NULL, 10);
    return *out >= lo && *out <= hi;
}

sl_status_t
sl_launcher_env_parse(const char *const *env, sl_launcher_env_t *out)
{
    const char *r = NULL, *n = NULL, *l;
    size_t i;
    long rank, size, local;
    char v[SL_CLI_SHOWN + 1];

    memset(out, 0, sizeof *out);
    out->launcher = SL_LAUNCHER_NONE;
    out->name = "";
    out->rank = out->size = out->local_rank = -1;
    for (i = 0; i < NLAUNCHERS; i++) {
        r = lookup(env, launchers[i].rank);
        n = lookup(env, launchers[i].size);
        if (r && n)
            break;
    }
    if (i == NLAUNCHERS)
        return SL_OK;
    out->launcher = launchers[i].launcher;
    out->name = launchers[i].name;
    out->rank_var = launchers[i].rank;
    out->size_var = launchers[i].size;
    if (!decimal(n, 1, SL_LAUNCHER_MAX_SIZE, &size))
        return sl_err_set(SL_ERR_CONFIG, "%s '%s' is not a number of nodes (1 to %d)",
                          out->size_var, sl_cli_shown(n, v), SL_LAUNCHER_MAX_SIZE);
    if (!decimal(r, 0, size - 1, &rank))
        return sl_err_set(SL_ERR_CONFIG, "%s '%s' is not a rank of %ld nodes (0 to %ld)",
                          out->rank_var, sl_cli_shown(r, v), size, size - 1);
    out->rank = (int)rank;
    out->size = (int)size;
    if ((l = lookup(env, launchers[i].local)) != NULL) {
        if (!decimal(l, 0, size - 1, &local))
            return sl_err_set(SL_ERR_CONFIG, "%s '%s' is not a local rank of %ld nodes (0 to %ld)",
                              launchers[i].local, sl_cli_shown(l, v), size, size - 1);
        out->local_rank = (int)local;
        out->local_var = launchers[i].local;
    }
    return SL_OK;
}

/* torchrun's MASTER_ADDR and MASTER_PORT, both or neither. Why the port after
 * MASTER_PORT when TORCHELASTIC_USE_AGENT_STORE is True: torchrun's agent then listens
 * at MASTER_PORT itself (its TCPStore, which PyTorch workers join as clients). */
static sl_status_t
torchrun_master(const char *const *env, int *found, char *host, size_t size, int *port, char *from,
                size_t from_size)
{
    const char *a = lookup(env, "MASTER_ADDR"), *p = lookup(env, "MASTER_PORT");
    const char *agent = lookup(env, "TORCHELASTIC_USE_AGENT_STORE");
    int next = agent && strcmp(agent, "True") == 0;
    long v;
    char s[SL_CLI_SHOWN + 1];

    if (!a && !p)
        return SL_OK;
    if (!a || !p)
        return sl_err_set(SL_ERR_CONFIG, "%s is set but %s is not; torchrun sets both",
                          a ? "MASTER_ADDR" : "MASTER_PORT", a ? "MASTER_PORT" : "MASTER_ADDR");
    /* a name or an address (IPv6 in brackets, with a zone): it goes into an endpoint */
    if (!*a || strlen(a) >= size || a[strspn(a, HOST_CHARS)])
        return sl_err_set(SL_ERR_CONFIG, "MASTER_ADDR '%s' is not a host name or address",
                          sl_cli_shown(a, s));
    if (!decimal(p, 1, next ? 65534 : 65535, &v))
        return sl_err_set(SL_ERR_CONFIG, "MASTER_PORT '%s' is not a port (1 to %d)",
                          sl_cli_shown(p, s), next ? 65534 : 65535);
    snprintf(host, size, "%s", a);
    *port = (int)v + next;
    snprintf(from, from_size, "MASTER_ADDR:MASTER_PORT%s", next ? " + 1" : "");
    *found = 1;
    return SL_OK;
}

/* The Slurm job's first host and the port of its id (sl_launcher_env.h). */
static sl_status_t
slurm_master(const char *const *env, int under_srun, int *found, char *host, size_t size, int *port,
             char *from, size_t from_size)
{
    static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                        "SLURM_NODELIST"};
    const char *job = lookup(env, "SLURM_JOB_ID"), *step = NULL, *list = NULL, *list_var = NULL;
    long id;
    unsigned long long step_id = 0; /* Slurm's special steps are near 2^32 */
    char s[SL_CLI_SHOWN + 1];

    for (size_t i = under_srun ? 0 : 1; i < 3 && !list; i++)
        if ((list = lookup(env, lists[i])) != NULL)
            list_var = lists[i];
    if (!job && !list)
        return SL_OK;
    if (!job || !list)
        return sl_err_set(SL_ERR_CONFIG, "%s is set but %s is not; is this a Slurm job?",
                          job ? "SLURM_JOB_ID" : "SLURM_JOB_NODELIST",
                          job ? "SLURM_JOB_NODELIST" : "SLURM_JOB_ID");
    if (!decimal(job, 0, 999999999, &id))
        return sl_err_set(SL_ERR_CONFIG, "SLURM_JOB_ID '%s' is not a job id", sl_cli_shown(job, s));
    if (under_srun && (step = lookup(env, "SLURM_STEP_ID")) != NULL) {
        size_t n = strspn(step, "0123456789");
        if (n == 0 || n > 10 || step[n] != '\0')
            return sl_err_set(SL_ERR_CONFIG, "SLURM_STEP_ID '%s' is not a step id",
                              sl_cli_shown(step, s));
        step_id = strtoull(step, NULL, 10);
    }
    SL_TRY(sl_hostlist_host(list, list_var, 0, host, size, NULL));
    *port = SL_LAUNCHER_SLURM_PORT_BASE +
            (int)(((unsigned long long)id + step_id) % SL_LAUNCHER_SLURM_PORTS);
    snprintf(from, from_size, "%s and SLURM_JOB_ID%s", list_var, step ? " + SLURM_STEP_ID" : "");
    *found = 1;
    return SL_OK;
}

sl_status_t
sl_launcher_env_master(const char *const *env, sl_launcher_t launcher, int *found, char *host,
                       size_t size, int *port, char *from, size_t from_size)
{
    *found = 0;
    if (launcher == SL_LAUNCHER_TORCHRUN) {
        SL_TRY(torchrun_master(env, found, host, size, port, from, from_size));
        if (*found)
            return SL_OK;
    }
    return slurm_master(env, launcher == SL_LAUNCHER_SLURM, found, host, size, port, from,
                        from_size);
}

/* Why not sl_launcher_env_parse: the GPU choice needs only the rank and local rank of
 * one row, and must not fail where the size is missing or the node's rank came from a
 * flag (shoal run in an allocation: then no row's rank is this node's). */
int
sl_launcher_local_rank(int rank, const char **from)
{
    const char *const *env = (const char *const *)environ;

    for (size_t i = 0; i < NLAUNCHERS; i++) {
        const char *l = lookup(env, launchers[i].local), *g = lookup(env, launchers[i].rank);
        long lv, gv;

        if (!l || !g || !decimal(l, 0, SL_LAUNCHER_MAX_SIZE - 1, &lv) ||
            !decimal(g, 0, SL_LAUNCHER_MAX_SIZE - 1, &gv) || gv != rank)
            continue;
        *from = launchers[i].local;
        return (int)lv;
    }
    *from = "node rank";
    return rank;
}
