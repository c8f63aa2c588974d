/* CURVE keys on sockets and the ZAP handler thread (RFC 27) of one ZeroMQ context.
 *
 * Why a thread of our own rather than a ZAP socket polled by the caller: the handshake
 * of a connecting peer waits for the answer, and the callers (a training loop, a
 * rendezvous) poll their sockets only now and then; a thread answers at once. It is a
 * zactor in small: the caller talks to it through an inproc PAIR only to stop it. */
#define _POSIX_C_SOURCE 200809L
#include "transport/sl_curve.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/sl_zmq_status.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01" /* fixed by RFC 27 */
#define ZAP_DOMAIN "shoal"
#define ZAP_PARTS 7 /* version, request id, domain, address, identity, mechanism, key */

typedef struct {
    unsigned char key[SL_CURVE_KEY_BYTES];
    uint32_t rank;
} member_t;

struct sl_curve {
    void *zctx;
    uint32_t me, size;
    unsigned char public_key[SL_CURVE_KEY_BYTES];
    unsigned char secret_key[SL_CURVE_KEY_BYTES];
    member_t *members; /* (size) sorted by key, for the ZAP lookups */
    sl_secret_t secret;
    void *zap, *stop_tx, *stop_rx; /* the thread's REP and PAIR; our end of the PAIR */
    void *monitor;                 /* the thread's: failed handshakes of the server socket */
    pthread_t thread;
    int running;
    uint64_t refused; /* atomic */
};

int
sl_curve_available(void)
{
    return zmq_has("curve");
}

static int
cmp_member(const void *a, const void *b)
{
    return memcmp(((const member_t *)a)->key, ((const member_t *)b)->key, SL_CURVE_KEY_BYTES);
}

sl_status_t
sl_curve_new(sl_curve_t **out, void *zctx, const sl_secret_t *secret, uint32_t me, uint32_t size)
{
    sl_curve_t *c;

    *out = NULL;
    if (!sl_curve_available())
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "this libzmq has no CURVE security: install a libzmq built with "
                          "libsodium, or set cluster.security: none on a trusted network");
    if (me >= size)
        return sl_err_set(SL_ERR_INVALID, "curve: rank %u of %u", (unsigned)me, (unsigned)size);
    c = calloc(1, sizeof *c);
    if (!c || !(c->members = calloc(size, sizeof *c->members))) {
        free(c);
        return sl_err_set(SL_ERR_NOMEM, "curve: out of memory");
    }
    c->zctx = zctx;
    c->me = me;
    c->size = size;
    c->secret = *secret;
    sl_secret_rank_keys(secret, me, c->public_key, c->secret_key);
    for (uint32_t r = 0; r < size; r++) {
        c->members[r].rank = r;
        sl_secret_rank_keys(secret, r, c->members[r].key, NULL);
    }
    qsort(c->members, size, sizeof *c->members, cmp_member);
    *out = c;
    return SL_OK;
}

static void
stop_thread(sl_curve_t *c)
{
    if (c->running) {
        zmq_send(c->stop_tx, "", 0, 0);
        pthread_join(c->thread, NULL);
        c->running = 0;
    }
    if (c->stop_tx)
        zmq_close(c->stop_tx);
    if (c->stop_rx)
        zmq_close(c->stop_rx);
    if (c->zap)
        zmq_close(c->zap);
    if (c->monitor)
        zmq_close(c->monitor);
    c->stop_tx = c->stop_rx = c->zap = c->monitor = NULL;
}

void
sl_curve_destroy(sl_curve_t **cp)
{
    sl_curve_t *c = cp ? *cp : NULL;

    if (!c)
        return;
    stop_thread(c);
    sl_secret_wipe(&c->secret);
    memset(c->secret_key, 0, sizeof c->secret_key);
    free(c->members);
    free(c);
    *cp = NULL;
}

/* The rank of a client's public key; -1 when it is not one of the run's. */
static long
member_rank(const sl_curve_t *c, const unsigned char *key)
{
    member_t probe;
    const member_t *m;

    memcpy(probe.key, key, SL_CURVE_KEY_BYTES);
    m = bsearch(&probe, c->members, c->size, sizeof *c->members, cmp_member);
    return m ? (long)m->rank : -1;
}

/* Reads one ZAP request and answers it: 200 with the rank as user id for a run key on
 * our domain, 400 otherwise (a malformed request, never from libzmq, included). */
static void
answer(sl_curve_t *c)
{
    zmq_msg_t part[ZAP_PARTS];
    int n = 0, more = 1, ok;
    long rank = -1;
    char user[16] = "";
    const char *code = "400";

    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->zap, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < ZAP_PARTS) {
            zmq_msg_init(&part[n]);
            zmq_msg_move(&part[n++], &m);
        }
        zmq_msg_close(&m);
    }
    ok = n == ZAP_PARTS && !more && zmq_msg_size(&part[0]) == 3 &&
         memcmp(zmq_msg_data(&part[0]), "1.0", 3) == 0;
    if (ok && zmq_msg_size(&part[2]) == strlen(ZAP_DOMAIN) &&
        memcmp(zmq_msg_data(&part[2]), ZAP_DOMAIN, strlen(ZAP_DOMAIN)) == 0 &&
        zmq_msg_size(&part[5]) == 5 && memcmp(zmq_msg_data(&part[5]), "CURVE", 5) == 0 &&
        zmq_msg_size(&part[6]) == SL_CURVE_KEY_BYTES)
        rank = member_rank(c, zmq_msg_data(&part[6]));
    if (rank >= 0) {
        code = "200";
        snprintf(user, sizeof user, "%ld", rank);
    } else {
        __atomic_add_fetch(&c->refused, 1, __ATOMIC_RELAXED);
    }
    if (n >= 2) { /* a REP socket must answer before it reads the next request */
        zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(c->zap, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
        zmq_send(c->zap, code, 3, ZMQ_SNDMORE);
        zmq_send(c->zap, rank >= 0 ? "OK" : "not a key of this run", rank >= 0 ? 2 : 21,
                 ZMQ_SNDMORE);
        zmq_send(c->zap, user, strlen(user), ZMQ_SNDMORE);
        zmq_send(c->zap, "", 0, 0);
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

/* One monitor event (two parts); every one we asked for is a failed handshake: a peer
 * that does not even know this rank's public key fails before ZAP is asked. */
static void
count_failure(sl_curve_t *c)
{
    int more = 1;

    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->monitor, 0) < 0) {
            zmq_msg_close(&m);
            return;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    __atomic_add_fetch(&c->refused, 1, __ATOMIC_RELAXED);
}

static void *
zap_main(void *arg)
{
    sl_curve_t *c = arg;
    zmq_pollitem_t it[3] = {
        {c->zap, 0, ZMQ_POLLIN, 0}, {c->monitor, 0, ZMQ_POLLIN, 0}, {c->stop_rx, 0, ZMQ_POLLIN, 0}};

    for (;;) {
        if (zmq_poll(it, 3, -1) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            break; /* the context is going away */
        }
        if (it[2].revents & ZMQ_POLLIN)
            break;
        if (it[0].revents & ZMQ_POLLIN)
            answer(c);
        if (it[1].revents & ZMQ_POLLIN)
            count_failure(c);
    }
    return NULL;
}

/* The ZAP socket, the monitor of the server socket and the thread that serves both;
 * once per context (one server socket). */
static sl_status_t
start_thread(sl_curve_t *c, void *server)
{
    char pipe_ep[64], monitor_ep[64];
    int zero = 0;
    sl_status_t st;

    snprintf(pipe_ep, sizeof pipe_ep, "inproc://shoal-zap-stop-%p", (void *)c);
    snprintf(monitor_ep, sizeof monitor_ep, "inproc://shoal-zap-monitor-%p", (void *)c);
    c->zap = zmq_socket(c->zctx, ZMQ_REP);
    c->stop_rx = zmq_socket(c->zctx, ZMQ_PAIR);
    c->stop_tx = zmq_socket(c->zctx, ZMQ_PAIR);
    c->monitor = zmq_socket(c->zctx, ZMQ_PAIR);
    if (!c->zap || !c->stop_rx || !c->stop_tx || !c->monitor)
        goto fail;
    zmq_setsockopt(c->zap, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->stop_rx, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->stop_tx, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->monitor, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(c->zap, ZAP_ENDPOINT) != 0 || zmq_bind(c->stop_rx, pipe_ep) != 0 ||
        zmq_connect(c->stop_tx, pipe_ep) != 0 ||
        zmq_socket_monitor(server, monitor_ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0 ||
        zmq_connect(c->monitor, monitor_ep) != 0)
        goto fail;
    if (pthread_create(&c->thread, NULL, zap_main, c) != 0) {
        stop_thread(c);
        return sl_err_set(SL_ERR_NOMEM, "curve: cannot start the ZAP thread");
    }
    c->running = 1;
    return SL_OK;
fail:
    st = sl_zmq_fail("curve: starting the ZAP handler");
    stop_thread(c);
    return st;
}

static sl_status_t
set_key(void *sock, int opt, const unsigned char *key, const char *what)
{
    if (zmq_setsockopt(sock, opt, key, SL_CURVE_KEY_BYTES) != 0)
        return sl_zmq_fail("curve: setting %s", what);
    return SL_OK;
}

sl_status_t
sl_curve_server(sl_curve_t *c, void *sock)
{
    int one = 1;

    if (c->running)
        return sl_err_set(SL_ERR_INVALID, "curve: one server socket per context");
    SL_TRY(start_thread(c, sock));
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, ZAP_DOMAIN, strlen(ZAP_DOMAIN)) != 0)
        return sl_zmq_fail("curve: making a server socket");
    return set_key(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, "ZMQ_CURVE_SECRETKEY");
}

sl_status_t
sl_curve_client(sl_curve_t *c, void *sock, uint32_t server_rank)
{
    unsigned char server_key[SL_CURVE_KEY_BYTES];

    if (server_rank >= c->size)
        return sl_err_set(SL_ERR_INVALID, "curve: no rank %u in a run of %u", (unsigned)server_rank,
                          (unsigned)c->size);
    sl_secret_rank_keys(&c->secret, server_rank, server_key, NULL);
    SL_TRY(set_key(sock, ZMQ_CURVE_SERVERKEY, server_key, "ZMQ_CURVE_SERVERKEY"));
    SL_TRY(set_key(sock, ZMQ_CURVE_PUBLICKEY, c->public_key, "ZMQ_CURVE_PUBLICKEY"));
    return set_key(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, "ZMQ_CURVE_SECRETKEY");
}

int
sl_curve_sender(zmq_msg_t *m, uint32_t *rank)
{
    const char *u = zmq_msg_gets(m, "User-Id");
    char *end;
    unsigned long v;

    if (!u || *u < '0' || *u > '9')
        return -1;
    errno = 0;
    v = strtoul(u, &end, 10);
    if (errno || *end || v > UINT32_MAX)
        return -1;
    *rank = (uint32_t)v;
    return 0;
}

uint64_t
sl_curve_refused(const sl_curve_t *c)
{
    return __atomic_load_n(&c->refused, __ATOMIC_RELAXED);
}
