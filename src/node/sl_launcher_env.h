/* What a cluster's launcher tells a node through the environment: its rank, the
 * number of nodes and its rank among the nodes of its machine (for the GPU choice).
 * The one place that knows the launchers' variable names:
 *
 *   launcher   rank                  size                  local rank
 *   Slurm      SLURM_PROCID          SLURM_NTASKS          SLURM_LOCALID
 *   Open MPI   OMPI_COMM_WORLD_RANK  OMPI_COMM_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_RANK
 *   PMI        PMI_RANK              PMI_SIZE              MPI_LOCALRANKID
 *
 * searched in that order. A new launcher (torchrun: RANK, WORLD_SIZE, LOCAL_RANK) is
 * one more row of the table in sl_launcher_env.c, and a line in shoal --help, shoal
 * node --help and doc/shoal.1. */
#ifndef SL_LAUNCHER_ENV_H
#define SL_LAUNCHER_ENV_H

typedef enum {
    SL_LAUNCHER_NONE, /* no launcher's variables are set */
    SL_LAUNCHER_SLURM,
    SL_LAUNCHER_OMPI,
    SL_LAUNCHER_PMI
} sl_launcher_t;

typedef struct {
    sl_launcher_t launcher;
    /* The launcher's rank and size as given (strings of the environment: borrowed,
     * unchecked; NULL with SL_LAUNCHER_NONE) and the variables' names, for messages. */
    const char *rank, *size;
    const char *rank_var, *size_var;
} sl_launcher_env_t;

/* The first launcher of the table whose rank and size variables are both set (set
 * means present, even empty). Returns env->launcher. */
sl_launcher_t sl_launcher_env_read(sl_launcher_env_t *env);

/* This node's rank among the nodes of its machine: the launcher's local rank when the
 * same launcher gave the process its rank (its rank variable equals rank: shoal node
 * under srun or mpirun), else rank itself (shoal run starts every node on one
 * machine). *from names the variable it came from, or "node rank". */
int sl_launcher_local_rank(int rank, const char **from);

#endif
