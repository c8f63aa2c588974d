/* The final model of a run (sl_sync_final in sl_sync.h): the average of the live nodes'
 * parameters. ma, bmuf, allreduce: one ring allreduce, every node gets it, rank 0 is the
 * writer and returns once the others have confirmed they hold it (or one
 * sync.timeout_ms has passed). gossip-*, local-*: no coordinator: the lowest-ranked node
 * alive at the end gathers it (the gathering of sl_final.c: signs of life, claims, the
 * lowest claimant wins), so it is written even when rank 0 died, waits for a node that
 * is late but still training, and sends the average back to the nodes whose models are
 * in it. Does not read the liveness table: who is alive at the end is its own question.
 * Not thread-safe; one per node. */
#ifndef SL_FINAL_H
#define SL_FINAL_H

#include "common/sl_status.h"
#include "sync/sl_sync_common.h"

typedef struct sl_final sl_final_t;

/* For env (algorithm not none, size >= 2, a transport). Buffers come at first use.
 * SL_ERR_INVALID, SL_ERR_NOMEM. */
sl_status_t sl_final_new(sl_final_t **out, const sl_sync_env_t *env);
/* Frees; accepts NULL, NULLs *f. */
void sl_final_destroy(sl_final_t **f);

/* Every node, once, at the end: the contract of sl_sync_final (sl_sync.h) with
 * nparams floats of params: *avg (owned by f, valid until destroy; in gossip and local
 * runs NULL on a node that is not the writer and did not get the average back), *writer,
 * *nmodels. */
sl_status_t sl_final_average(sl_final_t *f, const float *params, const float **avg, int *writer,
                             int *nmodels);

/* A node still training, between steps (gossip-*, local-*; nothing for the others):
 * takes the signs of the nodes already at the end that have come (with wait_ms > 0,
 * waiting that long for the first when none has: only once this node exchanges no
 * more, since a wait that times out hides a gossip peer's late answer from the
 * liveness; 0 in the train loop), and tells each of them that this node is
 * alive and still training: at once to one newly at the end, else every
 * sync.timeout_ms / 4, so that they wait for it. *signs (may be NULL): how many signs it
 * took. The transport's errors (a peer's abort: SL_ERR_SHUTDOWN), SL_ERR_INVALID for a
 * sign with a payload, SL_ERR_NOMEM. */
sl_status_t sl_final_still_training(sl_final_t *f, int wait_ms, int *signs);

#endif
