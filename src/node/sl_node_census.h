/* What rank 0 learns of every node of a run, for the logs: at the start the map of which
 * rank runs where (host, pid, device, shared-memory lanes), at the end the run-wide
 * tokens/s. Each node sends rank 0 one small frame (SL_WIRE_DATA, round 0, component
 * SL_CENSUS_COMPONENT for the map, + 2 for the rate); rank 0 waits for them up to a
 * deadline and reports the ones that did not come as such: a census never fails a run
 * by itself. After the map rank 0 answers every node that sent its record with an empty
 * frame (component + 1), which the node waits for: so the nodes start training
 * together, as they did from the rendezvous, rather than rank 0 last.
 *
 * Map record, little-endian, SL_CENSUS_MAP_BYTES: u32 pid, u64 hash of the machine's
 * boot id, u32 network namespace (0 each when unknown: sl_shm_lane.h), host (64 bytes,
 * NUL-padded), device (32 bytes). Rate record: one fp32, the node's tokens/s. */
#ifndef SL_NODE_CENSUS_H
#define SL_NODE_CENSUS_H

#include <signal.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "transport/sl_transport.h"

#define SL_CENSUS_COMPONENT 0xffffffe0u /* below sl_members' and sl_resume's */
#define SL_CENSUS_HOST_BYTES 64
#define SL_CENSUS_DEVICE_BYTES 32
#define SL_CENSUS_MAP_BYTES (4 + 8 + 4 + SL_CENSUS_HOST_BYTES + SL_CENSUS_DEVICE_BYTES)

/* Every rank but 0 sends its map record and waits for rank 0's answer; rank 0 gathers
 * the records for up to timeout_ms in all, logs the map (info): a line for the run, one
 * per rank ("rank 2: host gpu02, pid 4242, device cuda:0, lanes on"), and answers.
 * device is this node's (sl_node_backend_device). Waits stop early when *interrupt
 * (may be NULL) is set: the trainer then stops at once. Returns SL_OK, or
 * SL_ERR_SHUTDOWN when a peer aborted meanwhile (message set), or a socket's failure. */
sl_status_t sl_census_map(sl_transport_t *tr, const sl_config_t *cfg, const char *device,
                          int timeout_ms, volatile sig_atomic_t *interrupt);

/* Every rank but 0 sends its tokens/s (waiting up to timeout_ms for it to leave); rank 0
 * adds the others' that come within timeout_ms in all to its own: *total, from
 * *reported nodes (itself included). Other ranks: *total = tokens_per_s, *reported = 1.
 * SL_OK, or as sl_census_map. */
sl_status_t sl_census_rate(sl_transport_t *tr, double tokens_per_s, int timeout_ms, double *total,
                           int *reported);

#endif
