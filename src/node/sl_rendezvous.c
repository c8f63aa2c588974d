/* Rendezvous: rank 0's ROUTER collects one registration per rank and answers each with
 * the endpoint table; the other ranks' DEALER registers and waits for it. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_rendezvous.h"
#include "node/sl_rendezvous_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "transport/sl_curve.h"
#include "transport/sl_zmq_status.h"

void
sl_rdv_put_head(unsigned char *p, unsigned kind, uint64_t run_id)
{
    memcpy(p, MAGIC, 4);
    sl_put_u16(p + 4, SL_RDV_VERSION);
    sl_put_u16(p + 6, (uint16_t)kind);
    sl_put_u64(p + 8, run_id);
}

/* The kind of a message with our magic and version; 0 when it is not one. */
unsigned
sl_rdv_head_kind(const unsigned char *p, size_t len)
{
    if (len < HEAD_BYTES || memcmp(p, MAGIC, 4) != 0 || sl_get_u16(p + 4) != SL_RDV_VERSION)
        return 0;
    return sl_get_u16(p + 6);
}

/* How an endpoint reads in messages: HOST:PORT for tcp, the whole endpoint otherwise. */
const char *
sl_rdv_shown(const char *endpoint)
{
    return strncmp(endpoint, "tcp://", 6) == 0 ? endpoint + 6 : endpoint;
}

/* Printable ASCII, 1 to SL_RDV_ENDPOINT_MAX - 1 bytes, tcp:// or ipc://. */
int
sl_rdv_good_endpoint(const char *s, size_t len)
{
    if (len < 7 || len >= SL_RDV_ENDPOINT_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return 0;
    return strncmp(s, "tcp://", 6) == 0 || strncmp(s, "ipc://", 6) == 0;
}

/* 1 when s is a port number: 1 to 5 digits, 1 to 65535. */
static int
good_port(const char *s)
{
    size_t n = strspn(s, "0123456789");

    return n >= 1 && n <= 5 && s[n] == '\0' && atol(s) >= 1 && atol(s) <= 65535;
}

/* "tcp://0.0.0.0:PORT" (a node listening on every interface) with host put in: 1 when
 * done, 0 when ep is no wildcard or host is unknown, -1 when PORT is no port number. */
static int
fill_wildcard_host(char *ep, size_t size, const char *host)
{
    static const char wild[] = "tcp://0.0.0.0:";
    char port[8];

    if (strncmp(ep, wild, sizeof wild - 1) != 0 || !host || !*host)
        return 0;
    if (!good_port(ep + sizeof wild - 1))
        return -1;
    snprintf(port, sizeof port, "%s", ep + sizeof wild - 1);
    snprintf(ep, size, "tcp://%s:%s", host, port);
    return 1;
}

int
sl_rdv_interrupted(const sl_rendezvous_t *r)
{
    return r->o.interrupt && *r->o.interrupt;
}

sl_status_t
sl_rdv_ask_ended(sl_rendezvous_t *r)
{
    if (!r->ended || sl_clock_now() - r->ended_asked < SL_RDV_PRESENT_MS / 1000.0)
        return SL_OK;
    r->ended_asked = sl_clock_now();
    return r->ended(r->ended_ctx);
}

void
sl_rdv_format_seconds(int ms, char *buf, size_t size)
{
    snprintf(buf, size, "%g s", ms / 1000.0);
}

/* This process's generation: the wall clock, which orders two processes of one rank
 * started one after the other, on any host, where a monotonic clock would not. */
static uint64_t
generation_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

sl_status_t
sl_rendezvous_new(sl_rendezvous_t **out, const sl_rendezvous_opts_t *o)
{
    sl_rendezvous_t *r;
    sl_status_t st;
    int zero = 0, one = 1;

    *out = NULL;
    if (o->size < 1 || o->size > MAX_NODES || o->rank < 0 || o->rank >= o->size ||
        o->timeout_ms <= 0 || !o->master)
        return sl_err_set(SL_ERR_INVALID,
                          "rendezvous: rank %d of %d, timeout %d ms: need 0 <= rank < size <= "
                          "%d, a timeout > 0 and a master",
                          o->rank, o->size, o->timeout_ms, MAX_NODES);
    if (strlen(o->master) >= SL_RDV_ENDPOINT_MAX ||
        (o->bind && strlen(o->bind) >= SL_RDV_ENDPOINT_MAX))
        return sl_err_set(SL_ERR_INVALID, "rendezvous: master or bind endpoint too long");
    r = calloc(1, sizeof *r);
    if (!r)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    r->o = *o;
    r->generation = generation_now();
    snprintf(r->master, sizeof r->master, "%s", o->master);
    snprintf(r->bind, sizeof r->bind, "%s", o->bind ? o->bind : o->master);
    r->o.master = r->master;
    r->o.bind = r->bind;
    if (o->size == 1) {
        *out = r;
        return SL_OK;
    }
    r->ctx = zmq_ctx_new();
    if (!r->ctx) {
        st = sl_zmq_fail("rendezvous: zmq_ctx_new");
        goto fail;
    }
    r->sock = zmq_socket(r->ctx, o->rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER);
    if (!r->sock) {
        st = sl_zmq_fail("rendezvous: zmq_socket");
        goto fail;
    }
    if (zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof zero) != 0) {
        st = sl_zmq_fail("rendezvous: setting ZMQ_LINGER");
        goto fail;
    }
    if (o->secret) {
        SL_TRY_GOTO(
            sl_curve_new(&r->curve, r->ctx, o->secret, (uint32_t)o->rank, (uint32_t)o->size), st,
            fail);
        SL_TRY_GOTO(o->rank == 0 ? sl_curve_server(r->curve, r->sock)
                                 : sl_curve_client(r->curve, r->sock, 0),
                    st, fail);
    }
    if (o->rank == 0) {
        int64_t most = REGISTER_BYTES + SL_RDV_ENDPOINT_MAX + HANDSHAKE_BYTES;
        char last[SL_RDV_ENDPOINT_MAX], *colon;
        size_t len = sizeof last;

        if (zmq_setsockopt(r->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0 ||
            zmq_setsockopt(r->sock, ZMQ_MAXMSGSIZE, &most, sizeof most) != 0) {
            st = sl_zmq_fail("rendezvous: setting socket options");
            goto fail;
        }
        if (zmq_bind(r->sock, r->bind) != 0) {
            st = sl_zmq_fail("rendezvous: rank 0 cannot listen on %s", sl_rdv_shown(r->bind));
            goto fail;
        }
        /* a wildcard port: the others learn the real one from sl_rendezvous_master */
        colon = strrchr(r->master, ':');
        if (colon && strcmp(colon, ":*") == 0) {
            if (zmq_getsockopt(r->sock, ZMQ_LAST_ENDPOINT, last, &len) != 0) {
                st = sl_zmq_fail("rendezvous: reading the bound endpoint");
                goto fail;
            }
            snprintf(colon, sizeof r->master - (size_t)(colon - r->master), "%s",
                     strrchr(last, ':'));
        }
    } else {
        int64_t most = HEAD_BYTES + 4 + (int64_t)o->size * (ENTRY_BYTES + SL_RDV_ENDPOINT_MAX) +
                       HANDSHAKE_BYTES;

        if (zmq_setsockopt(r->sock, ZMQ_MAXMSGSIZE, &most, sizeof most) != 0) {
            st = sl_zmq_fail("rendezvous: setting ZMQ_MAXMSGSIZE");
            goto fail;
        }
        if (zmq_connect(r->sock, r->master) != 0) {
            st = sl_zmq_fail("rendezvous: cannot connect to rank 0 at %s", sl_rdv_shown(r->master));
            goto fail;
        }
    }
    *out = r;
    return SL_OK;
fail:
    sl_rendezvous_destroy(&r);
    return st;
}

void
sl_rendezvous_destroy(sl_rendezvous_t **rp)
{
    sl_rendezvous_t *r = rp ? *rp : NULL;

    if (!r)
        return;
    if (r->sock) {
        int linger = r->o.rank == 0 && r->used ? LINGER_MS : 0;
        zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(r->sock);
    }
    sl_curve_destroy(&r->curve);
    sl_rendezvous_table_fini(&r->table);
    for (int i = 0; r->pending && i < r->o.size; i++)
        if (r->pending[i]) {
            free(r->pending[i]->waiting);
            free(r->pending[i]);
        }
    free(r->pending);
    free(r->routes);
    free(r->routed);
    if (r->ctx)
        while (zmq_ctx_term(r->ctx) != 0 && zmq_errno() == EINTR)
            ;
    free(r);
    *rp = NULL;
}

void
sl_rendezvous_ask_ended(sl_rendezvous_t *r, sl_status_t (*ended)(void *ctx), void *ctx)
{
    r->ended = ended;
    r->ended_ctx = ctx;
}

const char *
sl_rendezvous_master(const sl_rendezvous_t *r)
{
    return r->master;
}

void
sl_rendezvous_table_fini(sl_rendezvous_table_t *t)
{
    for (int i = 0; t->endpoints && i < t->size; i++)
        free(t->endpoints[i]);
    free(t->endpoints);
    free(t->sessions);
    free(t->generations);
    t->endpoints = NULL;
    t->sessions = NULL;
    t->generations = NULL;
    t->size = 0;
}

sl_status_t
sl_rdv_table_alloc(sl_rendezvous_table_t *t, int size)
{
    t->size = size;
    t->endpoints = calloc((size_t)size, sizeof *t->endpoints);
    t->sessions = calloc((size_t)size, SESSION_BYTES);
    t->generations = calloc((size_t)size, sizeof *t->generations);
    if (!t->endpoints || !t->sessions || !t->generations)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    return SL_OK;
}

sl_status_t
sl_rdv_table_set(sl_rendezvous_table_t *t, int rank, const char *ep, size_t len,
                 const unsigned char *session, uint64_t generation)
{
    char *copy = len ? strndup(ep, len) : NULL;

    if (len && !copy)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    if (session)
        memcpy(t->sessions + (size_t)rank * SESSION_BYTES, session, SESSION_BYTES);
    t->generations[rank] = generation;
    free(t->endpoints[rank]);
    t->endpoints[rank] = copy;
    return SL_OK;
}

/* Waits up to ms (at most SLICE_MS) for the socket to be readable: 1 readable, 0 not
 * (yet), or a status < 0. An interrupted poll is "not yet": the caller checks the flag. */
int
sl_rdv_wait_readable(sl_rendezvous_t *r, double deadline)
{
    zmq_pollitem_t item = {r->sock, 0, ZMQ_POLLIN, 0};
    double left = deadline - sl_clock_now();
    int ms = left <= 0 ? 0 : left * 1000 < SLICE_MS ? (int)(left * 1000) + 1 : SLICE_MS;
    int rc = zmq_poll(&item, 1, ms);

    if (rc < 0 && zmq_errno() == EINTR)
        return 0;
    if (rc < 0)
        return sl_zmq_fail("rendezvous: polling");
    return rc > 0;
}

/* ---- rank 0 ---- */

/* Ranks with reg[i] == want as "0, 1, 2" or, for runs of three or more, "0-5, 7"; cut
 * with ", ..." when longer than the buffer. */
static void
rank_list(const unsigned char *reg, int n, int want, char *buf, size_t size)
{
    size_t used = 0;
    int first = 1;

    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int j = i;
        char item[32];

        if (reg[i] != want)
            continue;
        while (j + 1 < n && reg[j + 1] == want)
            j++;
        if (j - i >= 2)
            snprintf(item, sizeof item, "%s%d-%d", first ? "" : ", ", i, j);
        else if (j > i)
            snprintf(item, sizeof item, "%s%d, %d", first ? "" : ", ", i, j);
        else
            snprintf(item, sizeof item, "%s%d", first ? "" : ", ", i);
        if (used + strlen(item) + 6 >= size) {
            snprintf(buf + used, size - used, ", ...");
            return;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s", item);
        first = 0;
        i = j;
    }
}

static sl_status_t
timed_out_waiting(const sl_rendezvous_t *r, const unsigned char *reg, int count)
{
    char missing[256], have[256], secs[32];
    int n = r->o.size;

    rank_list(reg, n, 0, missing, sizeof missing);
    rank_list(reg, n, 1, have, sizeof have);
    sl_rdv_format_seconds(r->o.timeout_ms, secs, sizeof secs);
    return sl_err_set(SL_ERR_TIMEOUT,
                      "rendezvous: timed out after %s waiting for rank%s %s (%d of %d "
                      "registered: %s)",
                      secs, n - count > 1 ? "s" : "", missing, count, n, have);
}

/* Sends [id][msg] on the ROUTER without waiting; 0 or the errno. */
int
sl_rdv_send_to(sl_rendezvous_t *r, const peer_t *p, const void *msg, size_t len)
{
    if (zmq_send(r->sock, p->id, p->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(r->sock, msg, len, ZMQ_DONTWAIT) < 0)
        return zmq_errno();
    return 0;
}

/* A refusal or a give-up: the kind and a reason. */
static void
send_reason(sl_rendezvous_t *r, uint64_t run_id, const peer_t *p, unsigned kind, const char *why)
{
    unsigned char msg[HEAD_BYTES + 512];
    size_t len = strlen(why) < 512 ? strlen(why) : 512;

    sl_rdv_put_head(msg, kind, run_id);
    memcpy(msg + HEAD_BYTES, why, len);
    sl_rdv_send_to(r, p, msg, HEAD_BYTES + len);
}

/* A refusal says nothing of the run: the sender may not be one of its nodes. */
void
sl_rdv_refuse(sl_rendezvous_t *r, const peer_t *p, const char *from, const char *why)
{
    sl_log_warn("rendezvous", "refused a registration from %s: %s", from, why);
    send_reason(r, 0, p, KIND_REFUSAL, why);
}

void
sl_rdv_busy(sl_rendezvous_t *r, const sl_rdv_message_t *m)
{
    sl_log_info("rendezvous",
                "rank %d registered while this rank 0 comes back itself: told it to register "
                "again, it is admitted once this node runs",
                m->rank);
    send_reason(r, r->run_id, &m->peer, KIND_BUSY,
                "rank 0 is coming back to the run itself: register again in a while");
}

/* Checks a registration against the run: 1 when accepted, with the rank and its
 * endpoint (a wildcard host replaced by from) written; else 0 with the reason. */
static int
check_registration(const sl_rendezvous_t *r, uint64_t run_id, const unsigned char *m, size_t len,
                   long key_rank, const char *from, int *rank, char *ep, char *why, size_t size)
{
    uint64_t their_id;
    uint32_t rk, sz;
    size_t eplen;

    unsigned kind = sl_rdv_head_kind(m, len);

    if ((kind != KIND_REGISTER && kind != KIND_PRESENT) || len < REGISTER_BYTES) {
        if (len >= 6 && memcmp(m, MAGIC, 4) == 0 && sl_get_u16(m + 4) != SL_RDV_VERSION)
            snprintf(why, size, "rendezvous protocol version %u, this node speaks %u",
                     (unsigned)sl_get_u16(m + 4), SL_RDV_VERSION);
        else
            snprintf(why, size, "not a shoal registration (%zu bytes)", len);
        return 0;
    }
    their_id = sl_get_u64(m + 8);
    rk = sl_get_u32(m + 16);
    sz = sl_get_u32(m + 20);
    if (their_id != run_id) {
        snprintf(why, size,
                 "another run id: a node of another job, or started with another "
                 "configuration or master address");
        return 0;
    }
    if (sz != (uint32_t)r->o.size) {
        snprintf(why, size, "rank %u says the run has %u nodes, rank 0 says otherwise",
                 (unsigned)rk, (unsigned)sz);
        return 0;
    }
    if (rk >= sz) {
        snprintf(why, size, "rank %u is out of range for %u nodes", (unsigned)rk, (unsigned)sz);
        return 0;
    }
    if (key_rank >= 0 && (uint32_t)key_rank != rk) {
        snprintf(why, size, "registered as rank %u with the key of rank %ld", (unsigned)rk,
                 key_rank);
        return 0;
    }
    if (rk == 0) { /* rank 0 is this process, which sends no presence */
        snprintf(why, size, "%s",
                 kind == KIND_REGISTER
                     ? "rank 0 is already registered: two nodes were given rank 0"
                     : "a presence of rank 0, which is this node: two nodes were given rank 0");
        return 0;
    }
    eplen = len - REGISTER_BYTES;
    if (!sl_rdv_good_endpoint((const char *)m + REGISTER_BYTES, eplen)) {
        snprintf(why, size, "rank %u's endpoint is not a tcp:// or ipc:// address", (unsigned)rk);
        return 0;
    }
    memcpy(ep, m + REGISTER_BYTES, eplen);
    ep[eplen] = '\0';
    if (strncmp(ep, "tcp://0.0.0.0:", 14) == 0) {
        int filled = fill_wildcard_host(ep, SL_RDV_ENDPOINT_MAX, from);
        if (filled <= 0) {
            snprintf(why, size,
                     filled < 0 ? "rank %u listens on every interface but on no port 1 to 65535"
                                : "rank %u listens on every interface, and its address is unknown",
                     (unsigned)rk);
            return 0;
        }
    }
    *rank = (int)rk;
    return 1;
}

int
sl_rdv_check_message(const sl_rendezvous_t *r, uint64_t run_id, const unsigned char *d, size_t len,
                     long key_rank, const char *from, sl_rdv_message_t *m, char *why, size_t size)
{
    sl_rdv_message_t got;

    memset(&got, 0, sizeof got);
    got.kind = sl_rdv_head_kind(d, len);
    if (got.kind == KIND_CONFIRM) {
        if (!sl_rdv_check_confirm(r, run_id, d, len, key_rank, &got, why, size))
            return 0;
    } else {
        if (!check_registration(r, run_id, d, len, key_rank, from, &got.rank, got.endpoint, why,
                                size))
            return 0;
        memcpy(got.session, d + HEAD_BYTES + 8, SESSION_BYTES);
        got.generation = sl_get_u64(d + HEAD_BYTES + 8 + SESSION_BYTES);
    }
    *m = got;
    return 1;
}

sl_status_t
sl_rdv_take_message(sl_rendezvous_t *r, uint64_t run_id, sl_rdv_message_t *m, int *got)
{
    zmq_msg_t idm, body;
    peer_t p;
    char from[64], why[512];
    const char *addr;
    int more = 0, ok;
    long key_rank;
    size_t more_len = sizeof more;
    sl_status_t st = SL_OK;

    *got = 0;
    zmq_msg_init(&idm);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&idm, r->sock, ZMQ_DONTWAIT) < 0) {
        *got = -1;
        st = zmq_errno() == EAGAIN ? SL_OK : sl_zmq_fail("rendezvous: receiving");
        goto out;
    }
    if (zmq_msg_recv(&body, r->sock, ZMQ_DONTWAIT) < 0) {
        st = sl_zmq_fail("rendezvous: receiving");
        goto out;
    }
    /* a sender of more parts is not ours: drop the rest */
    while (zmq_getsockopt(r->sock, ZMQ_RCVMORE, &more, &more_len) == 0 && more) {
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        zmq_msg_recv(&extra, r->sock, 0);
        zmq_msg_close(&extra);
    }
    p.id_len = zmq_msg_size(&idm) < sizeof p.id ? zmq_msg_size(&idm) : sizeof p.id;
    memcpy(p.id, zmq_msg_data(&idm), p.id_len);
    /* over ipc, ZeroMQ's "Peer-Address" is not an address */
    addr = strncmp(r->bind, "tcp://", 6) == 0 ? zmq_msg_gets(&body, "Peer-Address") : NULL;
    snprintf(from, sizeof from, "%s", addr ? addr : "a local process");
    key_rank = -1;
    if (r->curve) {
        uint32_t kr;
        key_rank = sl_curve_sender(&body, &kr) == 0 ? (long)kr : LONG_MAX;
    }
    ok = sl_rdv_check_message(r, run_id, zmq_msg_data(&body), zmq_msg_size(&body), key_rank,
                              addr ? from : NULL, m, why, sizeof why);
    if (!ok) {
        sl_rdv_refuse(r, &p, from, why);
        goto out;
    }
    m->peer = p;
    *got = 1;
    if (m->kind == KIND_CONFIRM)
        goto out;
    sl_log_debug("rendezvous", "rank %d %s from %s: %s", m->rank,
                 m->kind == KIND_PRESENT ? "is present" : "registered", from, m->endpoint);
out:
    zmq_msg_close(&idm);
    zmq_msg_close(&body);
    return st;
}

/* The table message of kind (KIND_TABLE or KIND_REJOIN): head, size, then each
 * endpoint with its length (0: unknown, a rank lost when rank 0 came back), session and
 * generation. */
sl_status_t
sl_rdv_encode_table(unsigned kind, uint64_t run_id, const sl_rendezvous_table_t *t,
                    unsigned char **out, size_t *len)
{
    size_t n = HEAD_BYTES + 4;
    unsigned char *m, *p;

    for (int i = 0; i < t->size; i++)
        n += ENTRY_BYTES + (t->endpoints[i] ? strlen(t->endpoints[i]) : 0);
    m = malloc(n);
    if (!m)
        return sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
    sl_rdv_put_head(m, kind, run_id);
    sl_put_u32(m + HEAD_BYTES, (uint32_t)t->size);
    p = m + HEAD_BYTES + 4;
    for (int i = 0; i < t->size; i++) {
        size_t l = t->endpoints[i] ? strlen(t->endpoints[i]) : 0;
        sl_put_u16(p, (uint16_t)l);
        memcpy(p + 2, t->endpoints[i] ? t->endpoints[i] : "", l);
        memcpy(p + 2 + l, t->sessions + (size_t)i * SESSION_BYTES, SESSION_BYTES);
        sl_put_u64(p + 2 + l + SESSION_BYTES, t->generations[i]);
        p += ENTRY_BYTES + l;
    }
    *out = m;
    *len = n;
    return SL_OK;
}

/* A registration m of a rank that rank 0 holds already (t's entry, from the socket held;
 * asks: that one waits for the table): the process started last (the higher generation)
 * holds the rank, as in sl_rendezvous_admit, since a node killed while rank 0 gathers is
 * started again (shoal run, Slurm) and registers anew. The one that does not is refused,
 * so that of two live processes given one rank one fails at once, saying why; one that
 * died hears nothing. (Nothing tells a dead process from a live one for sure: the
 * connection of a crashed host stays open.) The same process registering again (it does
 * while it waits) only says where its table goes now. 1 when m takes the entry, else 0. */
static int
take_rank_again(sl_rendezvous_t *r, const sl_rendezvous_table_t *t, const sl_rdv_message_t *m,
                peer_t *held, int asks)
{
    char why[200];

    if (m->kind != KIND_REGISTER)
        return 0; /* a presence: its process had a table before */
    if (m->generation == t->generations[m->rank]) {
        if (asks)
            *held = m->peer;
        return 0;
    }
    snprintf(why, sizeof why,
             "rank %d is held by a process started later: two nodes were given rank %d, or "
             "this one was started again",
             m->rank, m->rank);
    if (m->generation <= t->generations[m->rank]) {
        sl_rdv_refuse(r, &m->peer, "a node", why);
        return 0;
    }
    if (asks)
        send_reason(r, 0, held, KIND_REFUSAL, why); /* a dead one's connection is gone */
    sl_log_info("rendezvous",
                "rank %d registered again, by a process started later: it takes the rank", m->rank);
    return 1;
}

static sl_status_t
serve(sl_rendezvous_t *r, uint64_t run_id, const char *endpoint, const unsigned char *session,
      sl_rendezvous_table_t *t)
{
    int n = r->o.size, count = 1;
    double deadline = sl_clock_now() + r->o.timeout_ms / 1000.0, gather_end = 0;
    unsigned char *reg = calloc((size_t)n, 1), *asks = calloc((size_t)n, 1), *msg = NULL;
    peer_t *peers = calloc((size_t)n, sizeof *peers); /* every rank's socket */
    char own[SL_RDV_ENDPOINT_MAX], host[SL_RDV_ENDPOINT_MAX], *colon;
    size_t len = 0;
    sl_status_t st;

    if (!reg || !asks || !peers) {
        st = sl_err_set(SL_ERR_NOMEM, "rendezvous: out of memory");
        goto out;
    }
    SL_TRY_GOTO(sl_rdv_table_alloc(t, n), st, out);
    /* our own entry; listening on every interface, we are where the master is */
    snprintf(own, sizeof own, "%s", endpoint);
    snprintf(host, sizeof host, "%s", sl_rdv_shown(r->master));
    colon = strrchr(host, ':');
    if (colon && strncmp(r->master, "tcp://", 6) == 0) {
        *colon = '\0';
        fill_wildcard_host(own, sizeof own, host);
    }
    SL_TRY_GOTO(sl_rdv_table_set(t, 0, own, strlen(own), session, r->generation), st, out);
    reg[0] = 1;
    /* every rank registers; or, when rank 0 comes back to a run under way, the live
     * ranks say they are present within SL_RDV_GATHER_MS of the first */
    while (count < n && !(gather_end > 0 && sl_clock_now() >= gather_end)) {
        sl_rdv_message_t m;
        int ready, got;

        if (sl_rdv_interrupted(r)) {
            st = sl_err_set(SL_ERR_SHUTDOWN, "rendezvous: interrupted");
            goto out;
        }
        if (sl_clock_now() >= deadline) {
            st = timed_out_waiting(r, reg, count);
            goto out;
        }
        /* nobody heard from yet: a rank 0 started again once the others had finished? */
        if (count == 1 && gather_end == 0 && (st = sl_rdv_ask_ended(r)) != SL_OK)
            goto out;
        ready = sl_rdv_wait_readable(r, gather_end > 0 ? gather_end : deadline);
        if (ready < 0) {
            st = ready;
            goto out;
        }
        if (!ready)
            continue;
        SL_TRY_GOTO(sl_rdv_take_message(r, run_id, &m, &got), st, out);
        if (got <= 0 || m.kind == KIND_CONFIRM)
            continue;
        if (reg[m.rank] && !take_rank_again(r, t, &m, &peers[m.rank], asks[m.rank]))
            continue;
        if (m.kind == KIND_PRESENT && gather_end == 0)
            gather_end = sl_clock_now() + SL_RDV_GATHER_MS / 1000.0;
        peers[m.rank] = m.peer;
        asks[m.rank] = m.kind == KIND_REGISTER;
        SL_TRY_GOTO(
            sl_rdv_table_set(t, m.rank, m.endpoint, strlen(m.endpoint), m.session, m.generation),
            st, out);
        count += !reg[m.rank];
        reg[m.rank] = 1;
    }
    r->rejoined = gather_end > 0;
    SL_TRY_GOTO(sl_rdv_encode_table(r->rejoined ? KIND_REJOIN : KIND_TABLE, run_id, t, &msg, &len),
                st, out);
    for (int i = 1; i < n; i++) {
        int e = asks[i] ? sl_rdv_send_to(r, &peers[i], msg, len) : 0;
        if (e)
            sl_log_warn("rendezvous", "could not send the table to rank %d: %s", i,
                        zmq_strerror(e));
    }
    if (r->rejoined)
        sl_log_info("rendezvous", "rank 0 comes back to a run under way: %d of %d nodes present",
                    count, n);
    sl_log_debug("rendezvous", "all %d nodes registered", n);
    SL_TRY_GOTO(sl_rdv_keep_table(r, run_id, t, peers), st, out);
    if (r->rejoined && r->o.relay_sessions)
        st = sl_rdv_relay_own(r);
out:
    /* the nodes that came need not wait for a table that will never be sent */
    for (int i = 1; st != SL_OK && reg && peers && i < n; i++) {
        const char *why = sl_err_msg();
        if (strncmp(why, "rendezvous: ", 12) == 0)
            why += 12;
        if (reg[i] && asks[i])
            send_reason(r, run_id, &peers[i], KIND_GIVE_UP, why);
    }
    if (st != SL_OK)
        sl_rendezvous_table_fini(t);
    free(msg);
    free(reg);
    free(asks);
    free(peers);
    return st;
}

sl_status_t
sl_rendezvous_exchange(sl_rendezvous_t *r, uint64_t run_id, const char *endpoint,
                       const unsigned char *session, sl_rendezvous_table_t *table)
{
    memset(table, 0, sizeof *table);
    if (r->used)
        return sl_err_set(SL_ERR_INVALID, "rendezvous: exchange called twice");
    if (!sl_rdv_good_endpoint(endpoint, strlen(endpoint)))
        return sl_err_set(SL_ERR_INVALID,
                          "rendezvous: endpoint '%s' is not a tcp:// or ipc:// "
                          "address shorter than %d bytes",
                          endpoint, SL_RDV_ENDPOINT_MAX);
    r->used = 1;
    if (r->o.size == 1) {
        SL_TRY(sl_rdv_table_alloc(table, 1));
        return sl_rdv_table_set(table, 0, endpoint, strlen(endpoint), session, r->generation);
    }
    if (r->o.rank == 0)
        return serve(r, run_id, endpoint, session, table);
    return sl_rdv_join(r, run_id, endpoint, session, table);
}

sl_status_t
sl_rendezvous_run_id(const sl_config_t *cfg, const char *master, uint64_t *id)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sl_hash_t h;
    sl_status_t st;

    sl_config_t shared = *cfg; /* shallow: only written out */

    if (!f)
        return sl_err_set(SL_ERR_NOMEM, "run id: %s", strerror(errno));
    /* what each node may set for itself: the address it listens on (each host its own),
     * where it finds the run's secret and where it writes its files (a host's own disk) */
    shared.cluster.bind = (char *)"";
    shared.cluster.key_file = (char *)"";
    shared.run.dir = (char *)"";
    st = sl_config_write_yaml(&shared, f);
    if (fclose(f) != 0 && st == SL_OK)
        st = sl_err_set(SL_ERR_NOMEM, "run id: %s", strerror(errno));
    if (st == SL_OK) {
        sl_hash_init(&h, RUN_ID_SEED);
        sl_hash_update(&h, text, len + 1); /* the NUL separates the two */
        sl_hash_update(&h, master, strlen(master));
        *id = sl_hash_final(&h);
    }
    free(text);
    return st;
}
