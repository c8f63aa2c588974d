/* The rendezvous' parts shared by rank 0's side (sl_rendezvous.c) and the other
 * ranks' (sl_rendezvous_join.c): the message layout, the object, small helpers.
 * Internal to src/node. */
#ifndef SL_RENDEZVOUS_INTERNAL_H
#define SL_RENDEZVOUS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "node/sl_rendezvous.h"
#include "transport/sl_curve.h"

#define MAGIC "SLRV"
#define HEAD_BYTES 16 /* magic, version, kind, run id */
#define SESSION_BYTES SL_RDV_SESSION_BYTES
#define GEN_BYTES 8
/* rank, size, session, generation; then the endpoint */
#define REGISTER_BYTES (HEAD_BYTES + 8 + SESSION_BYTES + GEN_BYTES)
#define ENTRY_BYTES (2 + SESSION_BYTES + GEN_BYTES)              /* a table entry less endpoint */
#define RELAY_BYTES (HEAD_BYTES + 4 + SESSION_BYTES + GEN_BYTES) /* rank, session, generation */
#define CONFIRM_BYTES (HEAD_BYTES + 8 + GEN_BYTES)               /* sender, rank, generation */
#define MAX_NODES 65536 /* keeps a table message under 17 MB */
#define SLICE_MS 100    /* polls this long at most between interrupt checks */
#define LINGER_MS 5000  /* rank 0 lets the tables leave this long */
#define RUN_ID_SEED 0x53484f414c524456ull
/* ZMQ_MAXMSGSIZE bounds the handshake's commands too: CURVE's INITIATE, with its
 * vouch and metadata, is some 300 bytes, more than a registration */
#define HANDSHAKE_BYTES 1024
#define ADMIT_MESSAGES 1024 /* sl_rendezvous_admit reads at most this many per call */

/* KIND_REJOIN: the table sent to a node that registers once the run is under way;
 * KIND_PRESENT: a registration's layout, sent by every other rank to rank 0 every
 * SL_RDV_PRESENT_MS during the run, so that a rank 0 that comes back learns the live
 * nodes (it gathers them for SL_RDV_GATHER_MS after the first) */
enum {
    KIND_REGISTER = 1,
    KIND_TABLE = 2,
    KIND_REFUSAL = 3,
    KIND_GIVE_UP = 4,
    KIND_REJOIN = 5,
    KIND_PRESENT = 6,
    KIND_SESSION = 7,
    KIND_CONFIRM = 8,
    KIND_BUSY = 9
};
#define SL_RDV_PRESENT_MS 1000
#define SL_RDV_GATHER_MS 3000

/* A registered rank on rank 0: the ZeroMQ routing id of its connection. */
typedef struct rdv_peer {
    unsigned char id[256];
    size_t id_len;
} peer_t;

/* Rank 0: a node that comes back, answered once the live ranks confirmed its key. */
typedef struct {
    peer_t peer;            /* where its table goes */
    uint64_t generation;    /* of its key */
    double deadline;        /* answered then at the latest */
    unsigned char *waiting; /* (size) 1: that rank has yet to confirm */
    int left;               /* how many */
} rdv_pending_t;

struct sl_rendezvous {
    sl_rendezvous_opts_t o;
    char master[SL_RDV_ENDPOINT_MAX]; /* wildcard port resolved */
    char bind[SL_RDV_ENDPOINT_MAX];
    void *ctx, *sock;
    sl_curve_t *curve;   /* NULL without security */
    int used;            /* exchange done */
    int rejoined;        /* the run was under way: this node comes back to it */
    uint64_t generation; /* this process's */
    /* once every rank registered: the run's table, kept up to date by
     * sl_rendezvous_admit (rank 0) or the relayed keys (the others), and the run id */
    sl_rendezvous_table_t table;
    uint64_t run_id;
    /* rank 0: where each rank's socket is (routed[i]: known), the comebacks waiting for
     * confirmations (NULL: none) */
    peer_t *routes;
    unsigned char *routed;
    rdv_pending_t **pending;
    /* the other ranks: the presence message they send, and when they last did */
    unsigned char present[REGISTER_BYTES + SL_RDV_ENDPOINT_MAX];
    size_t present_len;
    double present_at;
    int busy_said; /* the others: rank 0's busy answer was logged */
    /* asked while this node waits for the others (sl_rendezvous_ask_ended); NULL: none */
    sl_status_t (*ended)(void *ctx);
    void *ended_ctx;
    double ended_asked; /* sl_clock_now() when it was last asked; 0: never */
};

/* A registration, a presence or a confirmation that checked out (sl_rdv_take_message). */
typedef struct {
    unsigned kind; /* KIND_REGISTER, KIND_PRESENT or KIND_CONFIRM */
    int rank;      /* the sender's */
    char endpoint[SL_RDV_ENDPOINT_MAX];
    unsigned char session[SESSION_BYTES];
    uint64_t generation; /* the sender's; of a confirmation: the key's */
    int about;           /* a confirmation: whose key */
    peer_t peer;         /* where to answer */
} sl_rdv_message_t;

/* Writes the head (magic, version, kind, run id) of a message. */
void sl_rdv_put_head(unsigned char *p, unsigned kind, uint64_t run_id);
/* The kind of a message with our magic and version; 0 when it is not one. */
unsigned sl_rdv_head_kind(const unsigned char *p, size_t len);
/* How an endpoint reads in messages: HOST:PORT for tcp, the whole endpoint otherwise. */
const char *sl_rdv_shown(const char *endpoint);
/* Printable ASCII, 1 to SL_RDV_ENDPOINT_MAX - 1 bytes, tcp:// or ipc://. */
int sl_rdv_good_endpoint(const char *s, size_t len);
int sl_rdv_interrupted(const sl_rendezvous_t *r);
/* Asks the function sl_rendezvous_ask_ended gave (if any) whether the run ended without
 * this node, at most once every SL_RDV_PRESENT_MS: SL_OK when not due or not ended. */
sl_status_t sl_rdv_ask_ended(sl_rendezvous_t *r);
void sl_rdv_format_seconds(int ms, char *buf, size_t size);
sl_status_t sl_rdv_table_alloc(sl_rendezvous_table_t *t, int size);
/* Sets (or replaces) rank's entry: endpoint (len bytes; 0: unknown, NULL), session
 * (may be NULL) and generation. */
sl_status_t sl_rdv_table_set(sl_rendezvous_table_t *t, int rank, const char *ep, size_t len,
                             const unsigned char *session, uint64_t generation);
/* Waits up to the deadline (at most SLICE_MS) for the socket to be readable: 1
 * readable, 0 not (yet), or a status < 0. */
int sl_rdv_wait_readable(sl_rendezvous_t *r, double deadline);
/* Sends [id][msg] on the ROUTER without waiting; 0 or the errno. */
int sl_rdv_send_to(sl_rendezvous_t *r, const peer_t *p, const void *msg, size_t len);
/* Rank 0: takes one message off the ROUTER: *got = 1 with *m when it is a registration,
 * a presence or a confirmation that checks out (a registration of rank 0, which is this
 * process, is refused; of another rank registered already, the caller decides), 0 when
 * the sender was refused (with its reason), -1 when none had come. */
sl_status_t sl_rdv_take_message(sl_rendezvous_t *r, uint64_t run_id, sl_rdv_message_t *m, int *got);
/* Rank 0: checks message d (len bytes, as it came from the network) against the run: a
 * registration or a presence (from: the sender's address, for an endpoint on every
 * interface; NULL: unknown) or a confirmation (sl_rdv_check_confirm), from the rank
 * key_rank proves (-1: no security; LONG_MAX: none). 1 with *m written whole (its peer
 * zeroed, the caller's to set), or 0 with a one-line reason in why and *m untouched. */
int sl_rdv_check_message(const sl_rendezvous_t *r, uint64_t run_id, const unsigned char *d,
                         size_t len, long key_rank, const char *from, sl_rdv_message_t *m,
                         char *why, size_t size);
/* The table message of kind (KIND_TABLE or KIND_REJOIN), malloc'd. */
sl_status_t sl_rdv_encode_table(unsigned kind, uint64_t run_id, const sl_rendezvous_table_t *t,
                                unsigned char **out, size_t *len);
/* Refuses a sender (from: how the log names it) with the reason. */
void sl_rdv_refuse(sl_rendezvous_t *r, const peer_t *p, const char *from, const char *why);
/* Rank 0 come back itself, while it relays its own key: tells the node of registration
 * m (one of this run that checks out) to register again in a while (a busy answer),
 * rather than refusing it: it waits on, and comes back once rank 0 admits nodes. */
void sl_rdv_busy(sl_rendezvous_t *r, const sl_rdv_message_t *m);
/* Once the table is complete: keeps a copy (rank 0: for sl_rendezvous_admit, with the
 * routes to the ranks, routes[i] with an id_len of 0 unknown; routes NULL on the others). */
sl_status_t sl_rdv_keep_table(sl_rendezvous_t *r, uint64_t run_id, const sl_rendezvous_table_t *t,
                              const peer_t *routes);
/* Rank 0 (sl_rendezvous_keys.c), a confirmation: 1 and *m when msg (len bytes, from the
 * rank key_rank proves) is one that checks out, else 0 with the reason in why. */
int sl_rdv_check_confirm(const sl_rendezvous_t *r, uint64_t run_id, const unsigned char *msg,
                         size_t len, long key_rank, sl_rdv_message_t *m, char *why, size_t size);
/* Rank 0: a session message with rank's key (from the table) to the socket p; 0 or the
 * errno. */
int sl_rdv_send_session(sl_rendezvous_t *r, const peer_t *p, int rank);
/* Rank 0, between steps: node m->rank comes back with its registration m: relays its
 * key and answers it once the others confirmed (at once when none is to). */
sl_status_t sl_rdv_comeback(sl_rendezvous_t *r, const sl_rdv_message_t *m);
/* Rank 0, between steps: registration m again from a process the table has for its
 * rank (the same generation): one registration already answered, the answer maybe
 * lost (its connection to rank 0 broke and came back under a new ZeroMQ identity,
 * where the answer went to the old one), or one still waiting for confirmations. The
 * table goes (again) where m came from, or, while the confirmations are awaited, will
 * go there. */
sl_status_t sl_rdv_answer_again(sl_rendezvous_t *r, const sl_rdv_message_t *m);
/* Rank 0: takes confirmation m; answers the comebacks all confirmed, or whose time is
 * up. */
sl_status_t sl_rdv_pending_step(sl_rendezvous_t *r, const sl_rdv_message_t *m);
/* Rank 0 come back itself, its table kept (sl_rdv_keep_table, with the routes to the
 * ranks it gathered): relays its own key to those and waits for them to confirm, up to
 * half the rendezvous timeout (the ones that did not then drop its frames). */
sl_status_t sl_rdv_relay_own(sl_rendezvous_t *r);

/* Not rank 0: one answer from rank 0 (d, len bytes, as it came from the network) to
 * this node's registration (t empty): 1 with the table (KIND_TABLE or KIND_REJOIN, which
 * sets r->rejoined) in t, 0 for something to ignore, 2 for a busy answer (rank 0 comes
 * back itself: this node registers again), or a status < 0 with a one-line message and
 * t empty: SL_ERR_INVALID refused, SL_ERR_TIMEOUT rank 0 gave up, SL_ERR_FORMAT not a
 * table of this run, or a malformed one. */
int sl_rdv_read_answer(sl_rendezvous_t *r, uint64_t run_id, const unsigned char *d, size_t len,
                       sl_rendezvous_table_t *t);
/* Not rank 0, during the run: a session message from rank 0 (d, len bytes): the rank
 * whose newer key it brings, taken into r's table, or -1 (not one, another run, an older
 * or the same key, this node's own rank), the table untouched. */
int sl_rdv_take_relay(sl_rendezvous_t *r, const unsigned char *d, size_t len);
/* Not rank 0: registers and waits for the table (sl_rendezvous_exchange). */
sl_status_t sl_rdv_join(sl_rendezvous_t *r, uint64_t run_id, const char *endpoint,
                        const unsigned char *session, sl_rendezvous_table_t *t);

#endif
