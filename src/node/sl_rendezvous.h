/* Rendezvous at start-up: every node registers its transport endpoint with rank 0 and
 * gets back the full table, by rank, once all `size` ranks have registered.
 *
 * Raw ZeroMQ, independent of src/transport: rank 0 binds a ROUTER at the master
 * endpoint and registers itself in-process; the others connect a DEALER, send one
 * registration and wait for the table. Nodes may start in any order (ZeroMQ keeps a
 * registration until rank 0 has bound). Rank 0 refuses registrations of another run id
 * (a node of another job or configuration), another size, a rank out of range, or a
 * rank its key does not prove (with CURVE): it tells the sender why (the sender fails
 * with that reason) without saying anything of the run (no run id: it may be an
 * outsider's probe), logs a warning and keeps waiting for the right nodes. Of two
 * registrations of one rank, the process started later (the higher generation, below)
 * holds the rank, and the other is refused the same way: a node killed and started
 * again while rank 0 gathers comes in, and of two live processes given one rank one
 * fails at once. With CURVE (o->secret), a process without the run's secret gets no further
 * than the handshake, and the table travels encrypted to authenticated ranks only, so
 * no node is ever handed an endpoint an outsider chose.
 *
 * Messages, little-endian, one ZeroMQ frame each:
 *   register  "SLRV" u16 version, u16 kind 1, u64 run id, u32 rank, u32 size,
 *             32-byte session key, u64 generation, endpoint
 *   table     "SLRV" u16 version, u16 kind 2, u64 run id, u32 size,
 *             size x (u16 length, endpoint, 32-byte session key, u64 generation)
 *   refusal   "SLRV" u16 version, u16 kind 3, u64 0, reason text
 *   give-up   "SLRV" u16 version, u16 kind 4, u64 run id, rank 0's error: sent to the
 *             nodes that registered when rank 0 fails (times out, is interrupted), so
 *             that they fail at once rather than wait for a table
 *   rejoin    the table with kind 5: the answer to a registration that comes once the
 *             run is under way (a node process started again for a rank the run lost);
 *             an endpoint of length 0 is a rank that rank 0 does not know
 *   presence  a registration with kind 6 (below)
 *   session   "SLRV" u16 version, u16 kind 7, u64 run id, u32 rank, 32-byte session
 *             key, u64 generation: rank 0 to another rank, rank's new process's key
 *   confirm   "SLRV" u16 version, u16 kind 8, u64 run id, u32 sender, u32 rank, u64
 *             generation: the answer to a session, once the key is installed
 *   busy      "SLRV" u16 version, u16 kind 9, u64 run id, reason text: rank 0, coming
 *             back itself and relaying its own key, to a node of this run that
 *             registers then: it registers again (every second, as it does) and is
 *             admitted once rank 0 runs; its wait starts again with each busy
 * A generation is the wall-clock time (ns) at which the process made its rendezvous:
 * of two processes for one rank, the later has the higher one. A node sends its
 * registration again every second while it waits for the table, so that a rank 0 that
 * died with it and was started again has it too; rank 0 knows the same process again
 * by its generation (nothing is refused for that). During the run it answers such a
 * registration again, where it came from (the answer to the first may have been lost
 * with a connection that broke and came back under a new ZeroMQ identity); while the
 * live ranks have yet to confirm the node's key, the answer will go there.
 * Rank 0 keeps its socket for the run and answers such registrations between steps
 * (sl_rendezvous_admit), with the same checks, and one more: a registration of a
 * generation not above the one rank 0 holds for the rank is refused (an old process,
 * or an old message, cannot take the rank back). The node comes back into the table (its
 * new endpoint, session key and generation) and gets the table as a rejoin; the others
 * learn of it from the node itself (sl_transport_announce). The other ranks keep their
 * socket too and say they are present every second (presence: a registration with kind
 * 6): a process started again for rank 0, hearing presences rather than registrations,
 * knows the run is under way, gathers the live nodes for 3 s after the first, and comes
 * back with the table of those (the ranks it did not hear from have no endpoint until
 * their presence comes).
 * With session keys relayed (cluster.security: mac, whose frames the others can check
 * only with the new process's session key), rank 0 sends every live rank a session
 * message for the rank that comes back, over the CURVE connection that rank keeps open
 * (so the key is neither in clear nor taken from anything a frame says); each installs
 * the key, if its generation is above the one it holds (an old message never puts an old
 * key back), and confirms. Rank 0 answers the node that comes back only once every live
 * rank confirmed (or after half the rendezvous timeout: the ones that did not drop its
 * frames), so that none of its frames, its hello first, comes before its key. A rank 0
 * that comes back sends its own key to the ranks it gathered, the same way, and waits
 * for them before it goes on; a rank it finds later gets it with its presence answered.
 * A node that registers while it waits is told it is busy, not refused: it comes back
 * once rank 0 admits nodes (a refusal failed it, and under shoal run, which does not
 * restart a node that failed with an error, ended the run).
 * A node that listens on every interface registers "tcp://0.0.0.0:PORT"; rank 0 puts
 * in the address it saw the registration come from (for its own entry: the master's
 * host), so that the table holds addresses the others can connect to. */
#ifndef SL_RENDEZVOUS_H
#define SL_RENDEZVOUS_H

#include <signal.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "transport/sl_secret.h"

#define SL_RDV_VERSION 4        /* 2: session keys; 3: nodes that come back; 4: keys relayed */
#define SL_RDV_ENDPOINT_MAX 256 /* bytes of an endpoint, NUL included */
#define SL_RDV_SESSION_BYTES 32 /* a node's session key (sl_frame_mac.h), or zeros */

typedef struct {
    int rank, size; /* 0 <= rank < size */
    /* Where the others connect: "tcp://HOST:PORT" or "ipc:///path". On rank 0 a tcp
     * port "*" means "any free port" (then sl_rendezvous_master says which). Copied. */
    const char *master;
    /* Rank 0: the endpoint it binds, e.g. "tcp://127.0.0.1:29500" (host "*": every
     * interface); NULL: master. Ignored on the other ranks. Copied. */
    const char *bind;
    int timeout_ms; /* how long sl_rendezvous_exchange waits in all; > 0 */
    /* When set (by a signal handler) the wait stops with SL_ERR_SHUTDOWN; may be
     * NULL; borrowed. */
    volatile sig_atomic_t *interrupt;
    /* The run's secret (borrowed): CURVE on the rendezvous, so that only the run's
     * ranks connect, each registering as the rank its key proves, and a node only talks
     * to the real rank 0. NULL: no security. */
    const sl_secret_t *secret;
    /* Rank 0 relays the session key of a node that comes back to the others, and waits
     * for them to confirm it, before it answers the node (cluster.security: mac); needs
     * secret. */
    int relay_sessions;
} sl_rendezvous_opts_t;

typedef struct sl_rendezvous sl_rendezvous_t;

/* The table every node receives: endpoints[r] is rank r's endpoint. */
typedef struct {
    int size;
    char **endpoints;        /* size strings; owned */
    unsigned char *sessions; /* size x SL_RDV_SESSION_BYTES, by rank; owned */
    uint64_t *generations;   /* (size) each process's generation (0: unknown); owned */
} sl_rendezvous_table_t;

/* Rank 0 binds (SL_ERR_TRANSPORT naming the endpoint when it cannot), the others
 * connect; with size 1 nothing is opened. SL_ERR_INVALID for bad options. */
sl_status_t sl_rendezvous_new(sl_rendezvous_t **out, const sl_rendezvous_opts_t *o);
/* Closes the sockets (rank 0 first lets the tables it sent leave, up to 5 s) and
 * frees; accepts NULL, NULLs *r. */
void sl_rendezvous_destroy(sl_rendezvous_t **r);

/* Before sl_rendezvous_exchange: ended (NULL: none) is asked at once, then about once
 * a second, with ctx, while this node waits and has heard from no other (the other
 * ranks: for rank 0's table; rank 0: while no other rank has registered or said it is
 * present); any status but SL_OK, its message set, ends the wait with it (sl_node.c:
 * SL_ERR_ENDED when the run's files say that the run ended without this node). */
void sl_rendezvous_ask_ended(sl_rendezvous_t *r, sl_status_t (*ended)(void *ctx), void *ctx);

/* The master endpoint with a wildcard port resolved ("tcp://127.0.0.1:41234"). */
const char *sl_rendezvous_master(const sl_rendezvous_t *r);

/* Registers this node (run_id, its endpoint: tcp:// or ipc://, shorter than
 * SL_RDV_ENDPOINT_MAX; its session key of SL_RDV_SESSION_BYTES, or NULL for zeros:
 * confidential only with a secret) and waits for the table, which *table receives (free it with
 * sl_rendezvous_table_fini). Once per rendezvous. Errors (message set):
 *   SL_ERR_TIMEOUT   rank 0: "rendezvous: timed out after 120 s waiting for rank 3
 *                    (3 of 4 registered: 0, 1, 2)"; the others: "rendezvous: no
 *                    table from rank 0 at HOST:PORT after 120 s", or "rendezvous:
 *                    rank 0 at HOST:PORT gave up: <its error>"
 *   SL_ERR_INVALID   rank 0 refused this node: "rendezvous: rank 0 at HOST:PORT
 *                    refused rank 2: <reason>"; a bad endpoint
 *   SL_ERR_FORMAT    a malformed table
 *   SL_ERR_SHUTDOWN  *interrupt was set
 *   SL_ERR_TRANSPORT a socket failed
 *   and what sl_rendezvous_ask_ended's function returned */
sl_status_t sl_rendezvous_exchange(sl_rendezvous_t *r, uint64_t run_id, const char *endpoint,
                                   const unsigned char *session, sl_rendezvous_table_t *table);

void sl_rendezvous_table_fini(sl_rendezvous_table_t *t);

/* After sl_rendezvous_exchange: 1 when this node came back to a run under way (the
 * table came as a rejoin; on rank 0: the others said they were present), else 0. */
int sl_rendezvous_rejoined(const sl_rendezvous_t *r);

typedef enum {
    SL_RDV_NOTHING,
    SL_RDV_CAME_BACK, /* a node came back for the rank: it has the table now */
    SL_RDV_FOUND      /* a live node whose endpoint this rank 0 did not know (it came
                         back itself and had not heard from it): it knows it now */
} sl_rdv_event_t;
/* Rank 0, after sl_rendezvous_exchange, between steps: reads the registrations and
 * presences that have come (at most a few per call, never waiting): a node coming
 * back for a rank gets the table with its new entry; the others are refused as at the
 * start. *ev and *rank say what happened (the first event; SL_RDV_NOTHING and -1:
 * nothing), sl_rendezvous_endpoint the rank's endpoint. A no-op on the other ranks.
 * Errors: SL_ERR_TRANSPORT (socket), SL_ERR_NOMEM. */
sl_status_t sl_rendezvous_admit(sl_rendezvous_t *r, sl_rdv_event_t *ev, int *rank);
/* Rank 0: rank's endpoint in the run's table (NULL: unknown). */
const char *sl_rendezvous_endpoint(const sl_rendezvous_t *r, int rank);
/* After sl_rendezvous_exchange: rank's session key in this node's copy of the table
 * (SL_RDV_SESSION_BYTES; after SL_RDV_CAME_BACK, SL_RDV_FOUND or a relayed key: the new
 * process's). */
const unsigned char *sl_rendezvous_session(const sl_rendezvous_t *r, int rank);
/* The other ranks, between steps: tell rank 0 that this node is present, once every
 * second at most, and read what rank 0 sent (never waiting). *rank: a rank whose new
 * process's session key rank 0 relayed (sl_rendezvous_session has it; install it, then
 * sl_rendezvous_confirm), else -1. SL_ERR_TRANSPORT. */
sl_status_t sl_rendezvous_present(sl_rendezvous_t *r, int *rank);
/* Tells rank 0 that rank's relayed session key is installed (best effort). */
void sl_rendezvous_confirm(sl_rendezvous_t *r, int rank);

/* The run id: a hash of the resolved configuration (as sl_config_write_yaml writes it)
 * and the master address, so that nodes of another job, or started with another
 * configuration, are refused. cluster.bind and cluster.key_file are left out: each node
 * may listen on its own address and read the secret from its own path. SL_ERR_NOMEM /
 * SL_ERR_IO. */
sl_status_t sl_rendezvous_run_id(const sl_config_t *cfg, const char *master, uint64_t *id);

#endif
