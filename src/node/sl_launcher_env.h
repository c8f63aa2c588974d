/* What a cluster's launcher tells a node through the environment: its rank, the
 * number of nodes, its rank among the nodes of its machine (for the GPU choice) and,
 * for some, where rank 0's rendezvous is. The one place that knows the launchers'
 * variable names:
 *
 *   launcher   rank                  size                  local rank
 *   torchrun   RANK                  WORLD_SIZE            LOCAL_RANK
 *   Open MPI   OMPI_COMM_WORLD_RANK  OMPI_COMM_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_RANK
 *   PMI        PMI_RANK              PMI_SIZE              MPI_LOCALRANKID
 *   Slurm      SLURM_PROCID          SLURM_NTASKS          SLURM_LOCALID
 *
 * The first row whose rank and size are both set (present, even empty) is the
 * launcher. Innermost first: a launcher started inside another (mpirun or torchrun in
 * a Slurm job) inherits the outer one's variables, which then describe its daemons,
 * not this process.
 *
 * Rendezvous: torchrun's MASTER_ADDR and MASTER_PORT (MASTER_PORT + 1 when
 * TORCHELASTIC_USE_AGENT_STORE is True: torchrun's agent holds MASTER_PORT); else, in a
 * Slurm job, the first
 * host of the job's host list (SLURM_STEP_NODELIST when srun started this process,
 * else SLURM_JOB_NODELIST or SLURM_NODELIST: rank 0 runs there) at port
 * SL_LAUNCHER_SLURM_PORT_BASE + (SLURM_JOB_ID + SLURM_STEP_ID) mod
 * SL_LAUNCHER_SLURM_PORTS (the step only under srun, which sets it for every task
 * alike). The ports lie below Linux's ephemeral range (32768-60999 by default), so no
 * outgoing connection on the host holds one; jobs sharing a first host collide only
 * when their ids agree modulo 10000.
 *
 * A new launcher is one more row of the table in sl_launcher_env.c, and a line in
 * shoal --help, shoal node --help, doc/shoal.1 and README.md. */
#ifndef SL_LAUNCHER_ENV_H
#define SL_LAUNCHER_ENV_H

#include <stddef.h>

#include "common/sl_status.h"

#define SL_LAUNCHER_SLURM_PORT_BASE 20000
#define SL_LAUNCHER_SLURM_PORTS 10000
#define SL_LAUNCHER_MAX_SIZE 65536 /* nodes of one run */

typedef enum {
    SL_LAUNCHER_NONE, /* no launcher's variables are set */
    SL_LAUNCHER_TORCHRUN,
    SL_LAUNCHER_OMPI,
    SL_LAUNCHER_PMI,
    SL_LAUNCHER_SLURM
} sl_launcher_t;

typedef struct {
    sl_launcher_t launcher;
    const char *name; /* "Slurm", "Open MPI", ...; "" with none (static) */
    int rank, size;   /* -1 with SL_LAUNCHER_NONE */
    int local_rank;   /* -1 when the launcher does not say */
    const char *rank_var, *size_var, *local_var; /* the variables' names (static), or NULL */
} sl_launcher_env_t;

/* The launcher of env (NULL-terminated "NAME=VALUE" strings, as environ; borrowed)
 * into *out. Only the launcher found is checked; the others' variables are ignored.
 * SL_ERR_CONFIG, one line naming the variable: "SLURM_NTASKS 'x' is not a number of
 * nodes (1 to 65536)", "SLURM_PROCID '5' is not a rank of 4 nodes (0 to 3)",
 * "SLURM_LOCALID '4' is not a local rank of 4 nodes (0 to 3)". */
sl_status_t sl_launcher_env_parse(const char *const *env, sl_launcher_env_t *out);

/* Where the launcher of env says rank 0's rendezvous is (see above; launcher from
 * sl_launcher_env_parse): *found 0 when it says nothing; else host (size bytes),
 * *port, and from (from_size bytes) naming the variables, for messages
 * ("MASTER_ADDR:MASTER_PORT", "SLURM_JOB_NODELIST and SLURM_JOB_ID"). SL_ERR_CONFIG,
 * one line naming the variable, for one of a pair without the other, a port that is no
 * port, a job id that is no number, a host list that is none (sl_hostlist.h). */
sl_status_t sl_launcher_env_master(const char *const *env, sl_launcher_t launcher, int *found,
                                   char *host, size_t size, int *port, char *from,
                                   size_t from_size);

/* This node's rank among the nodes of its machine: the launcher's local rank when the
 * launcher gave the process its rank (its rank equals rank: shoal node under srun,
 * mpirun or torchrun), else rank itself (shoal run starts every node on one machine).
 * *from names the variable it came from, or "node rank". Reads environ. */
int sl_launcher_local_rank(int rank, const char **from);

#endif
