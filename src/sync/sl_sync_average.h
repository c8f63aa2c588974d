/* The per-step model averaging of the model-averaging algorithms (ma, bmuf, local-*,
 * gossip-*; sl_sync.h): one component at one round becomes the mean of this node's copy
 * and the copies of its neighbourhood (the gossip schedule's picks, or every ring
 * neighbour) or of all nodes (ring allreduce), whole or by its touched rows
 * (src/embed/sl_sparse.h), encoded as sync.compression says (int8 / int4: a neighbourhood
 * exchanges per-link deltas, sl_sync_delta.h; bmuf with fp16 / bf16: changes since the
 * common block start); then MA takes the mean and
 * BMUF applies the block update to it (sl_bmuf.h: theta_bar, G, Delta, omega). The
 * buffers of the exchanges and the BMUF state (omega, Delta, block start) live here.
 * Which components sync when is the caller's (sl_sync.c); so are the touched-row sets,
 * lent to each call. Not thread-safe; one per node. */
#ifndef SL_SYNC_AVERAGE_H
#define SL_SYNC_AVERAGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "embed/sl_sparse.h"
#include "sync/sl_liveness.h"
#include "sync/sl_sync.h"
#include "sync/sl_sync_common.h"

typedef struct sl_sync_average sl_sync_average_t;

/* For env->algo, one of ma, bmuf, local-*, gossip-*, with env->size >= 2 and a
 * transport; env's row shards (sparse components, when env->exchange is not dense) have
 * rows x row_len == count, rows >= 1 (the caller checked). params (nparams floats, read
 * only here) is the starting model: omega and the block start copy it. From cfg: the
 * BMUF options, topology.degree and sync.neighbours (the gossip schedule),
 * sync.exchange_top / _random and run.seed (the rows exchanged). lv (borrowed, must
 * outlive a) says who is dead and is told who answered. SL_ERR_INVALID (for the other
 * algorithms, or a degree or q the topology cannot give), SL_ERR_NOMEM. */
sl_status_t sl_sync_average_new(sl_sync_average_t **out, const sl_sync_env_t *env,
                                const sl_config_t *cfg, sl_liveness_t *lv, const float *params);
/* Frees; accepts NULL, NULLs *a. */
void sl_sync_average_destroy(sl_sync_average_t **a);

/* One sync of component c at round (its block index) on params (nparams floats,
 * updated in place: MA or BMUF on the component, or on the rows exchanged). touched is
 * c's row set U_k when c goes by rows (sl_sync_by_rows; it is emptied), else unused.
 * Adds to stat (c's): expected and answered peers, the rows of a by-rows exchange, and
 * sets its distance; rounds, bytes and times are the caller's. A neighbour that does not
 * answer is not an error (left out, told to the liveness table); a neighbourhood sync
 * that gets no copy at all changes nothing (no BMUF block end: params and BMUF state
 * stay, and the rows of a by-rows sync go back into touched for the next one). Nor is a
 * member of an all-node average that stops answering (dropped, the average redone over
 * the others: sl_members.h); a collective that cannot be re-formed is, as are the
 * transport's fatal codes. */
sl_status_t sl_sync_average_component(sl_sync_average_t *a, float *params, int c, uint64_t round,
                                      sl_rowset_t *touched, sl_sync_stat_t *stat);

/* Whether component c goes whole (not by rows) in an all-node average (ma, bmuf): such
 * components due together can share one allreduce. On a slow link an allreduce waits
 * for its hand-overs whatever its size: one for all of them waits once. */
int sl_sync_average_whole(const sl_sync_average_t *a, int c);

/* Whether component c is a row shard that goes by its rows in an all-node average
 * (ma, bmuf with sync.exchange unique): such shards due together can share one
 * exchange, as whole components share an allreduce. */
int sl_sync_average_rows(const sl_sync_average_t *a, int c);

/* One sync at round of the k components cs[0 .. k-1], due together, each going whole
 * (sl_sync_average_whole) or each a row shard by rows (sl_sync_average_rows;
 * SL_ERR_INVALID otherwise), in one exchange as component cs[0]: the whole ones in one
 * allreduce, the row shards' sets and values in the three collectives of
 * sl_sparse_allreduce_union_sums (src/embed/sl_sparse_allreduce.h). For each, MA or BMUF
 * on it and its statistics as sl_sync_average_component does; touched (the row sets,
 * unused for whole components) and stat are every component's, indexed by component. */
sl_status_t sl_sync_average_components(sl_sync_average_t *a, float *params, const int *cs, int k,
                                       uint64_t round, sl_rowset_t *touched, sl_sync_stat_t *stat);

/* The BMUF state, nparams floats each, owned by a (omega, Delta, the block start), for
 * checkpoints; all NULL unless the algorithm is one of the *bmuf. */
void sl_sync_average_bmuf(sl_sync_average_t *a, float **omega, float **delta, float **start);

#endif
