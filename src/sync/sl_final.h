/* The final model of a run (sl_sync_final in sl_sync.h): the average of the live nodes'
 * parameters. ma, bmuf, allreduce: one ring allreduce, every node gets it, rank 0 is the
 * writer and returns once the others have confirmed they hold it (or one sync.timeout_ms
 * has passed). gossip-*, local-*: no coordinator: the lowest-ranked live node gathers it
 * (the final walk of sl_final.c: offers in rank order, time windows per candidate,
 * confirmations, claims), so it is written even when rank 0 died, and sends it back to
 * the nodes whose models are in it. Reads who is dead from
 * the liveness table and never changes it. Not thread-safe; one per node. */
#ifndef SL_FINAL_H
#define SL_FINAL_H

#include "common/sl_status.h"
#include "sync/sl_liveness.h"
#include "sync/sl_sync_common.h"

typedef struct sl_final sl_final_t;

/* For env (algorithm not none, size >= 2, a transport); lv (borrowed, must outlive f)
 * says which ranks are dead. Buffers come at the first sl_final_average. SL_ERR_INVALID,
 * SL_ERR_NOMEM. */
sl_status_t sl_final_new(sl_final_t **out, const sl_sync_env_t *env, const sl_liveness_t *lv);
/* Frees; accepts NULL, NULLs *f. */
void sl_final_destroy(sl_final_t **f);

/* Every node, once, at the end: the contract of sl_sync_final (sl_sync.h) with
 * nparams floats of params: *avg (owned by f, valid until destroy; in gossip and local
 * runs NULL on a node that is not the writer and did not get the average back), *writer,
 * *nmodels. */
sl_status_t sl_final_average(sl_final_t *f, const float *params, const float **avg, int *writer,
                             int *nmodels);

#endif
