/* The sync algorithm of a run of several nodes (cfg->sync, doc/config.md "Sync
 * algorithms"), per component of the flat parameter buffer:
 *   allreduce          gradients summed over all nodes every step, divided by n
 *   ma, bmuf           every H_i steps, the average over all n nodes (ring allreduce);
 *                      ma takes it, bmuf applies the block update (sl_bmuf.h) to it
 *   local-ma/-bmuf     the same with the average over self and all ring neighbours
 *   gossip-ma/-bmuf    the same with self and the q neighbours the gossip schedule
 *                      (topology/sl_schedule.h) picks for (block, component, node)
 * H_i is the period of the first sync.periods rule whose glob (fnmatch(3)) matches the
 * component's name, else sync.embedding_period for the row-shard components
 * (sl_component_t.sparse) and sync.period for the others. Component i syncs after the
 * steps t with (t + p_i) mod H_i = 0, its round the block index (t + p_i) / H_i; the
 * phase p_i is 0 unless sync.stagger spreads the components of each period over
 * 0..H_i-1 (sl_sync_phase.h), so every node computes the same schedule without
 * messages. allreduce has no periods: it sums every gradient every step.
 *
 * Gossip and local: a neighbour that does not answer within sync.timeout_ms is left out
 * of that average (logged once per rank); after SL_SYNC_DEAD_ROUNDS missed rounds in a
 * row in which nothing came from it (sl_transport_last_heard) it is taken for dead:
 * nobody waits for it or pushes to it any more, and it is left out of the final average
 * (sl_liveness.h). allreduce, ma, bmuf: every collective runs over the member set
 * (sl_members.h: the live ranks and an epoch). A node that does not answer within
 * sync.timeout_ms is dropped: the survivors agree on the new set in one round through
 * the transport, the collective is redone from its start over it, and the average (the
 * gradients of allreduce, the models of ma and bmuf) is over the n - 1 left; bmuf's
 * block momentum auto follows the count (1 - 1/n). Each change is an event
 * (sl_sync_next_membership) for the trainer's log line and metrics record. A peer's abort
 * (SL_ERR_SHUTDOWN) still stops the collective. The final model of gossip and local runs
 * is gathered by the lowest-ranked live node (sl_sync_final, sl_final.h), that of the
 * collective algorithms by an allreduce of the members, written by the lowest-ranked
 * one: it is written even when rank 0 died.
 *
 * Row-shard components (embedding and softmax shards) go as the whole shard
 * (sync.exchange dense) or, with sync.exchange unique, as only the rows some node touched
 * since the component's last sync (src/embed/sl_sparse.h: neighbourhood or all-node
 * exchange of row sets and values, MA or BMUF applied per row; rows nobody exchanged
 * keep their values and BMUF state); in allreduce mode unique and allgather sum the
 * touched rows' gradients (src/embed/sl_sparse_allreduce.h). The trainer reports the
 * touched rows after every step (sl_sync_note_model). Exchanged values are encoded as
 * sync.compression says (fp32, or fp16 / bf16 with the scale F; sums are fp32); the
 * final average is always fp32.
 *
 * The parameters must be host memory (the cpu backend; the trainer stages a device's
 * through a host mirror). What the algorithm carries from one step to the next and the
 * step count does not give back (the BMUF state, the touched rows not yet exchanged)
 * goes into checkpoints through sl_sync_state_save / sl_sync_state_load.
 * This object keeps the periods, the touched rows and the dispatch; the work is done by
 * the parts sl_sync.c lists (sl_sync_average.h, sl_grad_allreduce.h, sl_liveness.h,
 * sl_final.h, sl_sync_state.h), internal to src/sync.
 *
 * Overlap (sync.overlap_steps tau > 0, model-averaging algorithms only, tau < every
 * H_i): the exchange of a block runs on a worker thread (sl_overlap.h) while the node
 * computes its next steps. At a sync point t of component i the worker gets a snapshot
 * theta_i(t) and computes from it exactly what a sync without overlap computes at t
 * (the average, then MA or the BMUF block update with its omega and Delta), theta_new;
 * after step t + tau the node applies it as a correction:
 *     theta_i := theta_i(t + tau) + (theta_new - theta_i(t))
 * so the local progress of the tau steps is kept on top of the synced block (Streaming
 * DiLoCo's overlapped outer step); it waits there only if the exchange has not
 * finished. The step of application is fixed, so the bits do not depend on when frames
 * arrive, as long as no peer times out. tau 0 is the synchronous path above. While an
 * exchange is in flight the worker owns the transport: sl_sync_transport_free says when
 * the caller may use it (for a poll). A checkpoint (sl_sync_state_save) waits for the
 * exchanges in flight and carries the updates still to apply; at the end of a run
 * sl_sync_flush applies them.
 * Not thread-safe (apart from its worker); one per node. */
#ifndef SL_SYNC_H
#define SL_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "model/sl_model.h"
#include "sync/sl_members.h"
#include "transport/sl_transport.h"

#define SL_SYNC_DEAD_ROUNDS 3 /* missed rounds in a row after which a peer is dead */

typedef struct sl_sync sl_sync_t;

/* Per component, since the start of the process. In ma and bmuf the whole components
 * due together share one allreduce, and the row shards due together one sparse
 * exchange (sl_sync_average_components): its time and bytes count under the first of
 * them, the others' stay 0. */
typedef struct {
    long rounds;         /* syncs done */
    double time_s;       /* time spent in them (waiting included; with overlap, the
                            worker's, as of the last update applied) */
    uint64_t sent_bytes; /* payload bytes this node sent for the component */
    uint64_t recv_bytes; /* and received */
    /* the same split by encoding, indexed by sl_wire_encoding_t: values are fp32, fp16 or
     * bf16, row ids and counts of the sparse exchange bytes (fp32 in allreduce mode) */
    uint64_t sent_enc_bytes[SL_WIRE_NENCODINGS], recv_enc_bytes[SL_WIRE_NENCODINGS];
    uint64_t answered;    /* peers whose copy went into an average, summed over rounds */
    uint64_t expected;    /* peers asked for, summed over rounds */
    uint64_t rows_own;    /* sparse exchange: rows of this node's set, summed over rounds */
    uint64_t rows_merged; /* and rows averaged (the union: U_g in ma/bmuf), summed */
    double distance;      /* ||theta - theta_bar|| at the last sync (before the update), over
                             the rows averaged */
} sl_sync_stat_t;

/* Sets up the algorithm cfg->sync.algorithm for node rank of size over the ncomps
 * components (borrowed, must outlive s) of a flat buffer of nparams floats whose
 * current values are params (the starting model: omega and the block start copy it).
 * tr (borrowed) is the node's connected transport; it may be NULL when size == 1 or
 * the algorithm is none, where every call is a no-op. SL_ERR_INVALID for bad sizes;
 * SL_ERR_CONFIG for a sync.exchange / compression setting the algorithm cannot use
 * (allgather outside allreduce, exchange_top / exchange_random without unique or in
 * allreduce mode), and for a sync.periods rule that gives no component its period (its
 * glob matches none of comps' names, or only ones an earlier rule took), checked
 * whatever the algorithm and size; SL_ERR_NOMEM. With sync.periods given, rank 0 logs
 * the resulting periods once (info).
 */
sl_status_t sl_sync_new(sl_sync_t **out, const sl_config_t *cfg, sl_transport_t *tr, int rank,
                        int size, const sl_component_t *comps, int ncomps, const float *params,
                        size_t nparams);
/* Frees; accepts NULL, NULLs *s. */
void sl_sync_destroy(sl_sync_t **s);

/* The algorithm (SL_SYNC_NONE when size == 1). */
sl_sync_algorithm_t sl_sync_algorithm(const sl_sync_t *s);

/* The rows touched by the last train step (sl_lm_touched_rows): rows (count vocabulary
 * ids, borrowed, any order) of the input embedding (output 0) or the output embedding
 * (output != 0). Each row-shard component keeps the union of what it was told since
 * its last sync. A no-op unless sync.exchange is unique or allgather, and for a table
 * with no row shard among the components. SL_ERR_INVALID for an id outside the
 * vocabulary (nothing recorded then). */
sl_status_t sl_sync_note_rows(sl_sync_t *s, int output, const int32_t *rows, int count);
/* Both of lm's touched-row sets: the trainer calls it after every sl_lm_train_step,
 * before sl_sync_gradients. */
sl_status_t sl_sync_note_model(sl_sync_t *s, const sl_lm_t *lm);

/* allreduce: grads (nparams) becomes the mean over the members (all nodes until one is
 * dropped); step (0-based, increasing from call to call) numbers the round. Other
 * algorithms: nothing. Errors are fatal (a member that stops answering is not one). */
sl_status_t sl_sync_gradients(sl_sync_t *s, float *grads, long step);

/* After a step: syncs every component at its sync point at steps_done (>= 1), in
 * component order, updating params in place; with overlap, applies the updates due at
 * steps_done, then hands those blocks to the worker. Fatal errors only (a gossip
 * neighbour that does not answer is not one); with overlap an exchange's error comes
 * out at the step its update is due. */
sl_status_t sl_sync_after_step(sl_sync_t *s, float *params, long steps_done);

/* End of the run, every node: the average of the live nodes' params (nparams) into the
 * buffer *avg (owned by s, valid until destroy). ma/bmuf/allreduce: allreduce over the
 * members, every member gets it, the lowest-ranked member (rank 0 unless it was
 * dropped) is the writer. gossip/local: the lowest-ranked node alive at the end gathers
 * it (sl_final.c, final_gathering): every node tells every other that it is at the
 * end, nodes still training answer that they are (sl_sync_still_training), and a node
 * waits for each lower rank while it gives signs of life (a rank silent for twice
 * sync.timeout_ms, or whose process is gone, is out); the lowest node with no live rank
 * below it claims the gathering, and every other follows the lowest claim. The gatherer
 * averages its params with those of every other rank that is not out, waiting for a
 * late one as long as it trains, up to twice sync.timeout_ms past its last sign; a
 * node silent longer is left out (and told so: it writes nothing). With rank 0 alive
 * that is rank 0, however late it ends; with rank 0 dead, rank 1, at most twice
 * sync.timeout_ms later (at once when rank 0's connection closed).
 * The gatherer sends the average back to each node whose params are in it before it
 * returns, so those hold it too (bit for bit), *avg there, unless the gatherer stopped
 * or died before it sent it (*avg NULL then, as on a node left out).
 * *writer is 1 on the node that should write the run's model, else 0; *nmodels = how
 * many nodes went into *avg (1 where it is NULL). With size 1 or algorithm none:
 * *writer 0, *avg NULL. Errors: the transport's (a peer's abort: SL_ERR_SHUTDOWN), a
 * peer's model or average of the wrong size or count, or a sign with a payload
 * (SL_ERR_INVALID), SL_ERR_NOMEM; a node that does not answer is not one. */
sl_status_t sl_sync_final(sl_sync_t *s, const float *params, const float **avg, int *writer,
                          int *nmodels);

/* gossip-*, local-* (nothing for the others): between steps, with the transport free
 * (sl_sync_transport_free), tells the nodes already in sl_sync_final that this one is
 * alive and still training, so that they wait for it (sl_final_still_training: wait_ms,
 * the wait for the first sign when none has come, 0 in a train loop; *signs, may be
 * NULL, the signs of the end it took). Errors as sl_sync_final's. */
sl_status_t sl_sync_still_training(sl_sync_t *s, int wait_ms, int *signs);

/* The sync state a checkpoint carries, so that a resumed run syncs exactly as one that
 * never stopped. Rounds, schedules and random row picks are derived from the step count
 * and are not in it; neither are the statistics nor which peers were taken for dead (a
 * resumed run starts with every peer alive). Little-endian bytes:
 *   u32 algorithm (sl_sync_algorithm_t), u32 row sets, u64 n, u64 bitmap words
 *   f32 omega[n], f32 Delta[n], f32 block start[n]   *bmuf: n = nparams; else n = 0
 *   u64 bits[ceil(rows / 64)] of each row set   row r: bit r % 64 of word r / 64
 * The row sets are the touched rows U_k of each row shard that goes by rows in a model-
 * averaging algorithm (sync.exchange unique), in component order: rows touched since
 * the shard's last sync. allreduce exchanges them within the step: none are kept.
 * sl_sync_state_bytes is 0, and there is no header either, when there is nothing to
 * keep (one node, none, allreduce, ma or the *-ma algorithms with exchange dense).
 * With sync.overlap_steps > 0 (and then always with the header) there follow the
 * updates still to apply (it waits for the exchanges in flight first):
 *   i64 due[ncomps]    the step at which component c's update is due; -1: none
 *   f32 corr[nparams]  theta_new - snapshot at each pending component's offset, 0
 *                      elsewhere */
size_t sl_sync_state_bytes(const sl_sync_t *s);
/* Writes the state into buf (len bytes, the caller's; len must be
 * sl_sync_state_bytes(s), else SL_ERR_INVALID). */
sl_status_t sl_sync_state_save(const sl_sync_t *s, void *buf, size_t len);
/* Replaces the state with the one in buf (len bytes, borrowed) written by
 * sl_sync_state_save of a sync object of the same algorithm, parameters and row shards.
 * Checked completely first: a wrong length, a header that does not match this object or
 * a row set bit beyond its shard's rows is SL_ERR_FORMAT ("sync: ..."), and s is left
 * as it was. len 0 is accepted when there is nothing to keep. */
sl_status_t sl_sync_state_load(sl_sync_t *s, const void *buf, size_t len);

/* Stats of component c (0..ncomps-1). */
const sl_sync_stat_t *sl_sync_stat(const sl_sync_t *s, int c);
/* H_i of component c (0..ncomps-1), as resolved from sync.periods and the two period
 * keys (also when the algorithm does not use it). */
int sl_sync_period(const sl_sync_t *s, int c);
/* The shortest H_i of the components, 1 when there are none. */
int sl_sync_shortest_period(const sl_sync_t *s);
/* p_i of component c: 0 without sync.stagger (sl_sync_phase.h). */
int sl_sync_phase(const sl_sync_t *s, int c);
/* Whether sl_sync_after_step(s, ..., steps_done) reads or changes component c: a
 * model-averaging algorithm and steps_done >= 1 is c's sync point (H_i divides
 * steps_done + p_i), or with overlap c's update
 * is applied at steps_done. These are the components a trainer that syncs a device's
 * parameters through a host copy must stage before and after. */
int sl_sync_due(const sl_sync_t *s, int c, long steps_done);
/* local-*, gossip-*: the furthest step that the peers' snapshots received so far (used
 * or dropped for their round) say a peer has reached, claims past end left out; 0 when
 * none came or
 * with another algorithm. A node that came back and finds it past its own step is
 * behind the others (sl_train_start.c). */
long sl_sync_peers_step(const sl_sync_t *s, long end);
/* With overlap: waits for the exchanges in flight and applies every update still
 * pending to params, whatever its step: the end of a run, for the final models (the last
 * checkpoint keeps them pending, so that a longer run resumed from it continues as one
 * that never stopped). The first failed exchange's error. Without overlap: nothing. */
sl_status_t sl_sync_flush(sl_sync_t *s, float *params);
/* Whether the caller may use the transport now: always without overlap; with it, when
 * no exchange is queued or running (until the next sl_sync_after_step). */
int sl_sync_transport_free(const sl_sync_t *s);
/* Seconds spent in sync (gradients, components, final) since creation; with overlap,
 * the time the calling thread spent in it: hand-overs, waits for unfinished exchanges
 * and updates. */
double sl_sync_time_s(const sl_sync_t *s);
/* Peers this node holds for dead (with overlap: as of the last update applied), and
 * whether rank r is one of them. */
int sl_sync_ndead(const sl_sync_t *s);
int sl_sync_is_dead(const sl_sync_t *s, int r);
/* allreduce, ma and bmuf without overlap: whether a node that comes back can be admitted
 * (the member set grows at a step or block boundary: sl_members.h "Admission"). */
int sl_sync_admits(const sl_sync_t *s);
/* Between steps, with the transport free, on every node (nothing without admission):
 * the requests and notices of admission, and the admissions due after steps_done (its
 * sync done) with the run ending at end; *give the *ngive ranks this node (the
 * coordinator) is to hand its state to now (borrowed: sl_members_poll). */
sl_status_t sl_sync_admissions(sl_sync_t *s, long steps_done, long end, const uint32_t **give,
                               int *ngive);
/* A node that comes back: its admission (sl_members_join); SL_ERR_UNSUPPORTED for an
 * algorithm or setting without it. Then, at *at, the member set from the coordinator
 * (sl_members_enter). */
sl_status_t sl_sync_join(sl_sync_t *s, int wait_ms, long *at, int *coordinator);
sl_status_t sl_sync_enter(sl_sync_t *s, int coordinator, int wait_ms);

/* allreduce, ma, bmuf: the next membership change not taken yet (a rank dropped, the
 * members left, why): 1 and *ev, or 0 (always 0 for the other algorithms). Thread-safe
 * against the overlap worker; a change shows once the exchange that made it is done. */
int sl_sync_next_membership(sl_sync_t *s, sl_members_event_t *ev);

#endif
