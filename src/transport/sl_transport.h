/* The transport between the nodes of one run: self-describing frames (sl_wire.h), a
 * medium chosen per peer behind one link interface (sl_link.h) and a mailbox for frames
 * that arrive before they are asked for. The media: ZeroMQ (sl_link_zmq.c: one bound
 * ROUTER per node to receive, one DEALER per peer it sends to, made on the first send;
 * a frame's sender must be the rank that holds its connection) and shared-memory lanes
 * between peers on one machine (sl_link_shm.c); or, emulating a network of a given rate
 * and latency (off unless asked for), ZeroMQ behind per-link departure queues
 * (sl_link_emu.c). Callers never see which medium carried a frame.
 *
 * Delivery: frames between two nodes are never duplicated and nothing is retried;
 * frames that go over ZeroMQ arrive in the order sent, those through a lane (below) in
 * any order, which the mailbox's keys make harmless. With several stripes
 * (sl_transport_opts_t.stripes) the frames of SL_TRANSPORT_STRIPE_MIN_BYTES and more
 * that carry a whole snapshot or state to a peer (sl_transport_striped_kind: gossip
 * snapshots, sparse rows, a rejoin's state, point-to-point data) take the stripes in
 * turn, or go in pieces over them (sl_zmq_pieces.h), and may overtake one another as
 * through a lane; every smaller frame, and every frame of a collective (the ring
 * allreduce's and allgather's chunks, the broadcast's) whatever its size, takes stripe
 * 0, whole, in the order sent. A frame that fails validation is
 * dropped, counted per reason (sl_transport_dropped) and logged once per reason.
 * Rounds of one (kind, component) never go back: once a round is asked for, frames of
 * older rounds are stale and dropped ("old round"), and frames of rounds more than
 * SL_MAILBOX_AHEAD_ROUNDS beyond it are refused ("round too far ahead"). A receive
 * keeps its deadline however many frames arrive meanwhile. Not thread-safe: one thread
 * per transport.
 *
 * Peers on one machine: a node offers each peer it sends large frames to a
 * shared-memory lane; once the peer has mapped it and said so, such a frame is written
 * into the lane, and the receiver finds it there by polling the lane's doorbell
 * (sl_shm_lane.h): no socket, no thread of ZeroMQ's. A receiver with lanes spins for up
 * to SL_TRANSPORT_SPIN_US, yielding the CPU at each turn, before it blocks; a sender
 * whose receiver blocks wakes it with a small frame over ZeroMQ. A full lane, a frame
 * larger than a slot or a peer that never accepts (another machine, shared memory off)
 * simply leaves the frame on ZeroMQ. */
#ifndef SL_TRANSPORT_H
#define SL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_secret.h"
#include "transport/sl_wire.h"

/* Payloads of at least this many bytes can be lent to ZeroMQ instead of copied. */
#define SL_TRANSPORT_ZEROCOPY_BYTES 65536u
/* Payloads of at least this many bytes go through a shared-memory lane when the peer
 * accepted one (smaller ones would hold a slot for little). */
#define SL_TRANSPORT_SHM_MIN_BYTES 16384u
/* How long a receiver with lanes polls them (and yields the CPU) before it blocks: on a
 * node with a core per process, waking from a block costs tens to hundreds of
 * microseconds per hop, which a ring of small chunks pays at every step; and a 1 MiB
 * chunk can take a few hundred microseconds to copy on a loaded machine, so a shorter
 * spin would block in the middle of a collective. */
#define SL_TRANSPORT_SPIN_US 1000u
/* The longest a receiver with lanes blocks before looking at them again: a lost
 * wake-up frame costs at most this, never a hang. */
#define SL_TRANSPORT_LANE_NAP_MS 100
/* How many more frames a receive reads once its deadline has passed (a wait of 0 ms
 * takes what has already arrived): a stream of frames cannot hold a wait longer. */
#define SL_TRANSPORT_DRAIN_FRAMES 256u
/* The most frames one sl_transport_poll reads. */
#define SL_TRANSPORT_POLL_FRAMES 65536u

/* The most ZeroMQ I/O threads a node may ask for (sl_transport_opts_t.io_threads). */
#define SL_TRANSPORT_MAX_IO_THREADS 64u
/* Online CPUs from which a node takes two ZeroMQ I/O threads by default, one for
 * sending and one for receiving (sl_transport_io_threads_auto). */
#define SL_TRANSPORT_IO_THREAD_CORES 8
/* Online CPUs from which a node whose traffic is mostly whole snapshots to one peer
 * (gossip and local runs) takes four, two of them sending, each on a stripe of its own
 * (bench/README.md, "Stripes by kind": +3 to +25% gossip throughput on 16 cores). */
#define SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS 16
/* The most connections a node opens to one peer (sl_transport_opts_t.stripes). */
#define SL_TRANSPORT_MAX_STRIPES SL_MAC_MAX_STRIPES
/* Payloads from which a frame may take any stripe; smaller ones keep to stripe 0. */
#define SL_TRANSPORT_STRIPE_MIN_BYTES 65536u
/* 1 when frames of kind (sl_wire_kind_t) of SL_TRANSPORT_STRIPE_MIN_BYTES and more take
 * the stripes (in pieces, or whole in turn): the kinds of exchanges that send a whole
 * snapshot or state to one peer (gossip snapshots, sparse rows, SL_WIRE_STATE,
 * SL_WIRE_DATA); 0 for the collectives' kinds (ring allreduce and allgather, chain
 * broadcast), whose frames always go whole on stripe 0, and for the rest. The rule,
 * and the figures it rests on, are beside the stripes in sl_link_zmq_send.c. */
int sl_transport_striped_kind(unsigned kind);

/* Why a frame was dropped: the sl_wire_reason_t codes, then the transport's own. */
enum {
    SL_DROP_FRAMING = SL_WIRE_NREASONS, /* not 1 or 2 parts after the routing id (and a
                                           trailer with frame MACs) */
    SL_DROP_IDENTITY,                   /* header sender is not the rank holding the connection */
    SL_DROP_OLD_ROUND,                  /* round older than the newest asked for */
    SL_DROP_DUPLICATE,                  /* same key already waiting in the mailbox */
    SL_DROP_MAILBOX_FULL,
    SL_DROP_SHM,          /* a shared-memory offer, accept or frame that does not check out */
    SL_DROP_SHM_OFFER,    /* a lane offer naming something that is not the sender's lane */
    SL_DROP_MAC,          /* frame MACs: no trailer, or its tag does not prove the sender */
    SL_DROP_REPLAY,       /* frame MACs: a good tag with a sequence number already used */
    SL_DROP_FUTURE_ROUND, /* round beyond SL_MAILBOX_AHEAD_ROUNDS past the current one */
    SL_DROP_HELLO,        /* a hello whose payload is not an endpoint */
    /* refused by the receiver after it took the frame (sl_transport_refuse): */
    SL_DROP_BAD_SIZE,  /* not the element count or encoding the receiver expects */
    SL_DROP_NONFINITE, /* values that are NaN or infinite */
    SL_DROP_NREASONS
};
const char *sl_transport_drop_name(unsigned reason);

typedef struct {
    uint64_t run_id;           /* frames of any other run are dropped */
    uint32_t rank, size;       /* this node, number of nodes (rank < size) */
    const char *bind_endpoint; /* "tcp://127.0.0.1:*", "ipc:///tmp/shoal-X/rank-3";
                                  NULL: tcp://127.0.0.1:*. Copied. */
    int timeout_ms;            /* default wait of sends and collectives; > 0 */
    int heartbeat_ms;          /* ZMTP heartbeats on DEALERs (dead after 3 missed); 0 off */
    int linger_ms;             /* how long destroy lets queued frames leave; >= 0 */
    /* ZeroMQ I/O threads (cluster.io_threads), 1..SL_TRANSPORT_MAX_IO_THREADS; 0: from
     * the machine's cores (sl_transport_io_threads_auto). With two or more, the
     * connections that receive and those that send are served by different threads
     * (receiving on the first half, rounded up, sending on the rest), so that a node
     * reads from its left and writes to its right neighbour at once. */
    unsigned io_threads;
    /* Connections (DEALERs) to each peer (cluster.stripes), 1..SL_TRANSPORT_MAX_STRIPES;
     * 0: one per sending I/O thread (sl_transport_stripes_auto). Stripe j's connections
     * are served by sending thread j (modulo their number), so that the large frames
     * to one peer, split over the stripes or taking them in turn, are written by
     * several threads at once: those of the kinds sl_transport_striped_kind names
     * (gossip snapshots; a collective's chunks stay on stripe 0). A sender's own
     * choice: receivers take any number. 1 with link emulation (its frames keep their
     * order). */
    unsigned stripes;
    /* 1: sl_allreduce_sum always goes round the ring (cluster.allreduce: ring); 0: it
     * halves and doubles where it can (sl_allreduce_halves: an even n, 4 or more). */
    int allreduce_ring;
    /* 1: with several stripes, large frames take them in turn, whole, never in pieces;
     * not a config key: for bench_allreduce --stripes Nw, which weighs the pieces. */
    int whole_frames;
    size_t mailbox_frames; /* caps on frames held for later */
    uint64_t mailbox_bytes;
    int shm;                 /* 1: offer every peer a shared-memory lane (sl_shm_lane.h);
                                peers on this machine that map it get the frames of
                                >= SL_TRANSPORT_SHM_MIN_BYTES through it, the others
                                never answer and stay on ZeroMQ. 0: ZeroMQ only */
    uint32_t shm_slots;      /* frames a lane holds at once, 1..SL_SHM_MAX_SLOTS */
    uint64_t shm_slot_bytes; /* largest frame (header + payload) of a slot; larger
                                frames go over ZeroMQ */
    /* The run's secret (borrowed for the transport's life): CURVE on every ZeroMQ
     * connection, and a frame's sender is the rank of the key that proved itself
     * (sl_curve.h). NULL: no security (cluster.security: none). */
    const sl_secret_t *secret;
    /* 1: no CURVE on the node sockets (secret unused); every frame over ZeroMQ carries a
     * MAC under the sender's session key instead (sl_frame_mac.h: cluster.security:
     * mac), the session keys exchanged through a CURVE rendezvous and handed over with
     * sl_transport_learn_sessions before the first send (a comeback's new one with
     * sl_transport_set_session_key). */
    int frame_mac;
    /* Link emulation (sl_link_emu.h: cluster.emulate), all 0 (off) unless set: every
     * link to a peer sends at this many bits per second (0: no limit), and its frames
     * arrive latency_ms, plus up to jitter_ms, after they have left. On, the transport
     * has no shared-memory lanes: an emulated link stands for a network. */
    double emulate_bits_per_s, emulate_latency_ms, emulate_jitter_ms;
} sl_transport_opts_t;

/* timeout 30 s, heartbeat 1 s, linger 1 s, mailbox 65536 frames / 4 GiB,
 * bind tcp://127.0.0.1:*, shared memory on with 16 slots of 64 MiB + a header (address
 * space; only the slots in use take memory, as far as their frames reach: a gossip
 * snapshot of a component up to 64 MiB fits, an LSTMP 2048/512 layer's 34 MB
 * included); I/O threads from the cores; no link emulation; run_id, rank and size 0
 * (set them). */
void sl_transport_opts_default(sl_transport_opts_t *o);

/* The I/O threads that io_threads 0 stands for on a machine with cores online CPUs:
 * with snapshots (a run whose frames are mostly whole snapshots to one peer, which take
 * the stripes: gossip and local algorithms) 4 from SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS
 * on; else 2 from SL_TRANSPORT_IO_THREAD_CORES on, else 1 (where the node's own thread
 * and its peers' already share few cores, a second I/O thread only adds switches). A
 * transport created with io_threads 0 takes the rule without snapshots. */
unsigned sl_transport_io_threads_auto(long cores, int snapshots);
/* The stripes that stripes 0 stands for with io_threads I/O threads: one per thread
 * that sends (io_threads minus the first half, rounded up), at least 1. */
unsigned sl_transport_stripes_auto(unsigned io_threads);

typedef struct sl_transport sl_transport_t;

/* Messages and payload bytes (headers not included) per (kind, component), and the
 * same bytes split by the frames' encoding (index sl_wire_encoding_t; 0 unused). */
typedef struct {
    uint64_t sent_msgs, sent_bytes;
    uint64_t recv_msgs, recv_bytes; /* valid frames accepted (handed out or filed) */
    uint64_t recv_newest_round;     /* the newest round of a valid frame received, accepted
                                       or dropped for its round: how far its senders are */
    uint64_t sent_enc_bytes[SL_WIRE_NENCODINGS], recv_enc_bytes[SL_WIRE_NENCODINGS];
    uint32_t component;
    uint8_t kind;
} sl_transport_stat_t;

/* A received frame: the validated header and its payload (h.payload_bytes bytes, not
 * aligned: copy it or read it with memcpy). Release with sl_transport_frame_release. */
typedef struct {
    sl_wire_header_t h;
    const void *payload;
} sl_transport_frame_t;

/* Creates the ZeroMQ context and binds the node's socket. SL_ERR_INVALID for bad
 * options, SL_ERR_TRANSPORT when the bind fails. */
sl_status_t sl_transport_new(sl_transport_t **out, const sl_transport_opts_t *o);
/* Closes every socket and frees; accepts NULL, NULLs *t. Frames still queued get
 * linger_ms to leave, then are dropped (a dead peer cannot hold the exit longer); lent
 * payloads are given back on return. A slow receiver can be more than linger_ms behind
 * (the last node of a broadcast chain, say), so nodes pass sl_barrier before they
 * destroy: then every peer has everything it was sent. */
void sl_transport_destroy(sl_transport_t **t);

/* The endpoint really bound (wildcards resolved), for the other nodes to connect to. */
const char *sl_transport_endpoint(const sl_transport_t *t);
uint32_t sl_transport_rank(const sl_transport_t *t);
uint32_t sl_transport_size(const sl_transport_t *t);
int sl_transport_timeout_ms(const sl_transport_t *t);
/* sl_transport_opts_t.allreduce_ring. */
int sl_transport_allreduce_ring(const sl_transport_t *t);
/* The ZeroMQ I/O threads the transport runs (io_threads resolved). */
unsigned sl_transport_io_threads(const sl_transport_t *t);
/* The connections the transport opens to each peer (stripes resolved). */
unsigned sl_transport_stripes(const sl_transport_t *t);

/* Learns every node's endpoint (size entries, by rank; the own entry and the entries of
 * nodes never sent to may be NULL). Copied. Sockets are connected on the first send to
 * each peer. Once per transport. */
sl_status_t sl_transport_connect(sl_transport_t *t, const char *const *endpoints);

/* Lend payloads of at least SL_TRANSPORT_ZEROCOPY_BYTES to ZeroMQ (zero copy): the
 * caller must leave them unchanged until sl_transport_wait_sent returns SL_OK or the
 * transport is destroyed. Without it (and below that size) the payload is copied. */
#define SL_SEND_LEND 1

/* Sends count elements of payload (encoding sl_wire_encoding_t, scale as in the header)
 * as one frame with key (key->peer = the destination, != own rank). Waits up to
 * timeout_ms (< 0: the transport's) for room in the queue to that peer: SL_ERR_TIMEOUT
 * when there is none; the frame is then not sent. Frames to a peer not yet connected
 * are queued. SL_ERR_INVALID for a bad key, encoding or size. */
sl_status_t sl_transport_send(sl_transport_t *t, const sl_wire_key_t *key, const void *payload,
                              uint32_t count, unsigned encoding, float scale, int flags,
                              int timeout_ms);
/* Waits up to timeout_ms until ZeroMQ has given back every lent payload.
 * SL_ERR_TIMEOUT when some are still held (e.g. queued to a dead peer). */
sl_status_t sl_transport_wait_sent(sl_transport_t *t, int timeout_ms);

/* Drops every frame still queued to rank (a node the run no longer counts on:
 * src/sync/sl_members.h), giving back the payloads lent for it, so that
 * sl_transport_wait_sent does not wait for them. Frames sent to it later go out again.
 * (Frames held by an emulated link, cluster.emulate, are not dropped.) */
void sl_transport_forget(sl_transport_t *t, uint32_t rank);

/* Waits up to timeout_ms (>= 0; 0 only takes what has already arrived) for a frame
 * matching one of keys (exact kind, component, round, seq and sender). Frames for other
 * keys are filed in the mailbox meanwhile. On SL_OK *frame is the caller's and *which
 * (may be NULL) the index of the key it matched. SL_ERR_TIMEOUT when none came,
 * SL_ERR_SHUTDOWN when a peer sent an abort (now or before), SL_ERR_TRANSPORT on socket
 * failure, SL_ERR_INVALID for a bad key. */
sl_status_t sl_transport_recv_any(sl_transport_t *t, const sl_wire_key_t *keys, size_t nkeys,
                                  int timeout_ms, sl_transport_frame_t **frame, size_t *which);
/* sl_transport_recv_any for one key, copying the payload into buf (cap bytes):
 * *got = its size. SL_ERR_INVALID (frame dropped) when it is larger than cap. */
sl_status_t sl_transport_recv(sl_transport_t *t, const sl_wire_key_t *key, void *buf, size_t cap,
                              size_t *got, int timeout_ms);
/* Gives a received frame back; accepts NULL, NULLs *f. */
void sl_transport_frame_release(sl_transport_frame_t **f);
/* Refuses a received frame whose contents the receiver cannot use (reason
 * SL_DROP_BAD_SIZE or SL_DROP_NONFINITE; detail, may be NULL, says what for the log):
 * counted as dropped, logged the first time for that reason only, its sender no longer
 * heard from by it (sl_transport_last_heard), and released (*f NULLed). The caller
 * leaves the sender out of the exchange, as if it had not answered. */
void sl_transport_refuse(sl_transport_t *t, sl_transport_frame_t **f, unsigned reason,
                         const char *detail);

/* Files every frame that has already arrived, up to SL_TRANSPORT_POLL_FRAMES of them,
 * without waiting (call it between steps to notice a peer's abort early). SL_OK;
 * SL_ERR_SHUTDOWN once a peer has sent an abort (now or before); SL_ERR_TRANSPORT on
 * socket failure. */
sl_status_t sl_transport_poll(sl_transport_t *t);
/* The reason a peer gave in its abort frame (printable text), or NULL if none came. */
const char *sl_transport_abort_reason(const sl_transport_t *t);

/* Tells every node with a known endpoint that this one stops (reason: a short text),
 * waiting at most timeout_ms in all; their receives then fail with SL_ERR_SHUTDOWN.
 * Best effort: SL_ERR_TIMEOUT names how many peers could not be told in time. */
sl_status_t sl_transport_abort(sl_transport_t *t, const char *reason, int timeout_ms);

/* Tells every node with a known endpoint that this process is new for its rank, come
 * back to a running job (a hello frame with its endpoint): each drops what it kept for
 * the old process (its connection and the frames queued to it, its lanes) and sends to
 * this one from then on. Waits at most timeout_ms in all; SL_ERR_TIMEOUT names how many
 * peers could not be told in time (they learn it from the next hello, or never hear
 * from this node: it is not fatal). Under frame MACs (sl_transport_opts_t.frame_mac)
 * a peer drops the hello unless it has installed this process's new session key
 * (sl_transport_set_session_key) first: the rendezvous sees to that. */
sl_status_t sl_transport_announce(sl_transport_t *t, int timeout_ms);
/* With frame MACs, after sl_transport_learn_sessions: rank (not this node's) is a new
 * process with session key key (SL_MAC_SESSION_BYTES, from the CURVE rendezvous, never
 * from a frame). From now on only frames under that key are taken from rank: those of
 * its dead process are dropped (SL_DROP_MAC), and so are the new process's that came
 * before. The key already held changes nothing. SL_ERR_INVALID without frame MACs or
 * for a rank out of range or this node's. */
sl_status_t sl_transport_set_session_key(sl_transport_t *t, uint32_t rank,
                                         const unsigned char *key);
/* How many hellos came from rank: how often it came back as a new process. */
uint32_t sl_transport_comebacks(const sl_transport_t *t, uint32_t rank);
/* rank is at endpoint (a new process, or one this node had no endpoint for): what was
 * kept for it goes, and frames go there from now on. */
void sl_transport_learn_endpoint(sl_transport_t *t, uint32_t rank, const char *endpoint);
/* Whether this node has an endpoint for rank (after sl_transport_connect). */
int sl_transport_knows(const sl_transport_t *t, uint32_t rank);

/* Counters of (kind, component), zeros when nothing passed. */
void sl_transport_stat(const sl_transport_t *t, unsigned kind, uint32_t component,
                       sl_transport_stat_t *out);
/* Every row of counters; *rows is borrowed, valid until the next call on t. */
size_t sl_transport_stats(const sl_transport_t *t, const sl_transport_stat_t **rows);
/* Frames dropped for reason (a sl_wire_reason_t or SL_DROP_*); 0 for SL_WIRE_OK. */
uint64_t sl_transport_dropped(const sl_transport_t *t, unsigned reason);
/* With frame_mac: this node's session key (SL_MAC_SESSION_BYTES bytes) for the
 * rendezvous, NULL otherwise; and every rank's (size x SL_MAC_SESSION_BYTES, by rank),
 * which must be learnt before the first send. */
const unsigned char *sl_transport_session(const sl_transport_t *t);
void sl_transport_learn_sessions(sl_transport_t *t, const unsigned char *sessions);
/* Connections refused because they proved no key of the run (with a secret; 0
 * without): processes that tried to talk to this node without the run's secret. */
uint64_t sl_transport_refused(const sl_transport_t *t);
/* Frames waiting in the mailbox. */
size_t sl_transport_pending(const sl_transport_t *t);
/* When a frame from rank of the current round of its (kind, component), or of a round
 * ahead within the mailbox's reach, was last accepted (sl_clock_now() time), or the frame of the
 * last receive from rank that timed out came late (late is not dead); 0 if none was. Other stale
 * frames, frames too far ahead, frames of a (kind, component) not asked for yet and refused frames
 * do not count: a peer that talks but does not answer is not heard; nor do frames filed while
 * the connection to rank is lost (sl_transport_gone: the last frames of a dead process). */
double sl_transport_last_heard(const sl_transport_t *t, uint32_t rank);
/* Takes what the links learnt about their connections (a peer's went, or came again)
 * without waiting; call it between exchanges, from the thread that uses the transport. */
void sl_transport_watch(sl_transport_t *t);
/* Whether this node's connection to rank went (its process closed it: most likely
 * dead) after rank was last heard (sl_transport_last_heard) and has not come again,
 * as of the last sl_transport_watch. Forgotten with a hello from rank's new process. */
int sl_transport_gone(const sl_transport_t *t, uint32_t rank);
/* Frames sent and received through shared-memory lanes (their payloads never crossed
 * a socket); they are counted in the per-kind counters too. */
void sl_transport_shm_frames(const sl_transport_t *t, uint64_t *sent, uint64_t *received);
/* Messages sent over ZeroMQ on stripe (< sl_transport_stripes; 0 otherwise): whole
 * frames and pieces of frames (a frame in n pieces puts one on each of n stripes). */
uint64_t sl_transport_stripe_frames(const sl_transport_t *t, unsigned stripe);

#endif
