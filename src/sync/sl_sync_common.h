/* What the files of src/sync share, below sl_sync.h's API: the fixed facts of a node's
 * sync (sl_sync_env_t), which algorithms average a neighbourhood or apply BMUF, which
 * components go by their rows, the codec of sync.compression that every exchange of
 * values takes, a component's byte counters from the transport, and the message of a
 * collective that failed. No object and no state beyond a codec's settings; nothing
 * here sends or receives. */
#ifndef SL_SYNC_COMMON_H
#define SL_SYNC_COMMON_H

#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "model/sl_model.h"
#include "sync/sl_members.h"
#include "sync/sl_sync.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"

/* The fixed facts of one node's sync, shared by its parts: set once by sl_sync_new,
 * copied by value, never changed. */
typedef struct {
    sl_transport_t *tr;          /* borrowed; NULL only when size == 1 or algorithm none */
    int rank, size;              /* this node, of size */
    const sl_component_t *comps; /* (ncomps) borrowed, inside the nparams floats */
    int ncomps;
    size_t nparams;           /* floats of the flat parameter buffer */
    sl_sync_algorithm_t algo; /* in force: none when size == 1 */
    sl_exchange_t exchange;   /* in force: dense for algorithm none */
    int timeout_ms;           /* sync.timeout_ms, else cluster.timeout_ms */
    const sl_codec_t *codec;  /* sync.compression (sl_sync_codec_init); NULL: fp32 */
    sl_members_t *members;    /* allreduce, ma, bmuf: the member set every collective runs
                                 over (borrowed, shared by the parts); NULL otherwise */
} sl_sync_env_t;

/* bmuf, local-bmuf, gossip-bmuf: the average goes through the block update (sl_bmuf.h). */
int sl_sync_is_bmuf(sl_sync_algorithm_t a);
/* local-*, gossip-*: the average is over a neighbourhood, not every node. */
int sl_sync_is_neighbourhood(sl_sync_algorithm_t a);
/* Whether component c goes by its touched rows (a row shard with sync.exchange unique or
 * allgather; exchange is the one in force: dense for algorithm none), not whole. */
int sl_sync_by_rows(const sl_component_t *c, sl_exchange_t exchange);

/* sync.compression as a codec of the collectives (sl_collective.h) over
 * src/embed/sl_compress.h. A plain struct its owner keeps at one address while the
 * codec is in use (the codec points to it). */
typedef struct {
    sl_compress_t compress;
    double scale; /* sync.compression_scale: F, 0 = automatic */
    sl_codec_t codec;
} sl_sync_codec_t;

/* Fills k from cfg->sync and returns the codec the exchanges take: NULL for fp32 (frames
 * lent as they are) and for int8 / int4 (those travel only as sl_sync_delta.h's deltas;
 * every other exchange, the final average included, stays fp32), else &k->codec. */
const sl_codec_t *sl_sync_codec_init(sl_sync_codec_t *k, const sl_config_t *cfg);

/* stat's byte counters (sent, received, by encoding) := the transport's for every kind
 * component c travels in: gossip snapshots, sparse sets and values, allgather, allreduce. */
void sl_sync_fill_bytes(sl_sync_stat_t *stat, const sl_transport_t *tr, uint32_t c);

/* st with "sync WHAT (ALGORITHM, round R): ..." in front, after a collective of algo
 * (allreduce, ma, bmuf) failed for good: the members could not re-form around a node
 * that stopped answering (sl_members.h), or a fatal code. */
sl_status_t sl_sync_collective_failed(sl_status_t st, sl_sync_algorithm_t algo, const char *what,
                                      long round);

#endif
