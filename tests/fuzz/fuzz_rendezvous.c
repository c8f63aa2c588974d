/* libFuzzer target: the rendezvous messages a node reads from the network
 * (sl_rendezvous_internal.h): on rank 0, a registration, a presence or a confirmation
 * (sl_rdv_check_message); on the others, rank 0's answer to a registration, a table
 * among them (sl_rdv_read_answer), and a session key rank 0 relays during the run
 * (sl_rdv_take_relay). No socket is opened: the rendezvous object is built by hand.
 *
 * The input's first HEAD bytes are the receiving side's settings, the rest is the
 * message (in a buffer of its exact size, so ASan sees overreads):
 *   byte 0   bits 0-1: the decoder, % 3 (0 rank 0's, 1 an answer, 2 a relay);
 *            bits 2-3: the rank the sender's key proves (0: no security, -1; 1: an
 *            unknown key, LONG_MAX; 2, 3: byte 3); bits 4-5: the sender's address (none,
 *            127.0.0.1, 10.0.0.2, a name of 63 bytes); bit 6: a relay before the table
 *            was kept (none)
 *   byte 1   the run's size, 2 + byte % 63
 *   byte 2   the receiver's rank: 0 on rank 0's side, else 1 + byte % (size - 1)
 *   byte 3   the key's rank (bits 2-3 of byte 0 are 2 or 3)
 *   bytes 4-11   the run id (u64 le)
 *   bytes 12-19  a relay: the table's generations, this + rank
 * Each decoder must give the verdict of a plain reference reader written here. Taken:
 * what it fills in matches the bytes (rank, NUL-terminated endpoint that is a good
 * tcp:// or ipc:// one, session, generation, table entries; a table encoded again is the
 * message). Refused: the reason or message is one line of printable text, and the
 * outputs are untouched (rank 0's message, the relay's table) or empty (the table of an
 * answer). A broken promise prints what broke and aborts. With FUZZ_RENDEZVOUS_LOG set
 * each input's outcome is printed (to see what a seed reaches). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "node/sl_rendezvous_internal.h"

#define HEAD 20
#define MASTER "tcp://127.0.0.1:5555"
#define LONG_HOST "n123456789.example.org.a-long-host-name-of-sixty-three-bytes.xy"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    int decoder;
    long key_rank;
    const char *from;
    int no_table;
    int size, rank;
    uint64_t run_id, gen_base;
} settings_t;

static int verbose = -1;

static void
broken(const char *what)
{
    fprintf(stderr, "fuzz_rendezvous: %s\n", what);
    abort();
}

static void *
exact(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);

    if (!p)
        broken("out of memory");
    return p;
}

/* One non-empty line of printable ASCII. */
static void
check_line(const char *s, const char *what)
{
    if (!*s) {
        fprintf(stderr, "fuzz_rendezvous: %s: empty\n", what);
        broken("a refusal without a reason");
    }
    for (const char *c = s; *c; c++)
        if (*c < 0x20 || *c > 0x7e) {
            fprintf(stderr, "fuzz_rendezvous: %s: byte 0x%02x in \"%s\"\n", what, (unsigned char)*c,
                    s);
            broken("a reason that is not one line of printable text");
        }
}

/* The reference's endpoint rule: 7 to 255 bytes, each a visible ASCII character,
 * starting tcp:// or ipc://. */
static int
ref_endpoint(const unsigned char *s, size_t len)
{
    if (len < 7 || len > 255)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return 0;
    return memcmp(s, "tcp://", 6) == 0 || memcmp(s, "ipc://", 6) == 0;
}

/* The message's head: its kind, or 0 when it is not SLRV of our version. */
static unsigned
ref_kind(const unsigned char *m, size_t len)
{
    if (len < 16 || memcmp(m, "SLRV", 4) != 0 || (m[4] | m[5] << 8) != SL_RDV_VERSION)
        return 0;
    return (unsigned)m[6] | (unsigned)m[7] << 8;
}

static uint32_t
le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static sl_rendezvous_t *
make_rendezvous(const settings_t *s)
{
    sl_rendezvous_t *r = calloc(1, sizeof *r);

    if (!r)
        broken("out of memory");
    r->o.size = s->size;
    r->o.rank = s->rank;
    r->o.timeout_ms = 1000;
    snprintf(r->master, sizeof r->master, "%s", MASTER);
    snprintf(r->bind, sizeof r->bind, "%s", MASTER);
    r->o.master = r->master;
    r->o.bind = r->bind;
    r->generation = 1;
    r->run_id = s->run_id;
    return r;
}

/* Rank 0's message: the reference verdict, and *want as the decoder must fill it. */
static int
ref_message(const settings_t *s, const unsigned char *m, size_t len, sl_rdv_message_t *want)
{
    unsigned kind = ref_kind(m, len);
    uint32_t rank;

    memset(want, 0, sizeof *want);
    want->kind = kind;
    if (kind == KIND_CONFIRM) {
        uint32_t about;
        if (len != 32 || le64(m + 8) != s->run_id)
            return 0;
        rank = le32(m + 16);
        about = le32(m + 20);
        if (rank >= (uint32_t)s->size || about >= (uint32_t)s->size ||
            (s->key_rank >= 0 && s->key_rank != (long)rank))
            return 0;
        want->rank = (int)rank;
        want->about = (int)about;
        want->generation = le64(m + 24);
        return 1;
    }
    if ((kind != KIND_REGISTER && kind != KIND_PRESENT) || len < 64 || le64(m + 8) != s->run_id ||
        le32(m + 20) != (uint32_t)s->size)
        return 0;
    rank = le32(m + 16);
    if (rank >= (uint32_t)s->size || (s->key_rank >= 0 && s->key_rank != (long)rank) || rank == 0 ||
        !ref_endpoint(m + 64, len - 64))
        return 0;
    want->rank = (int)rank;
    memcpy(want->session, m + 24, 32);
    want->generation = le64(m + 56);
    if (len - 64 >= 14 && memcmp(m + 64, "tcp://0.0.0.0:", 14) == 0) {
        /* every interface: the sender's address and the port, a number 1 to 65535 */
        size_t port = len - 78;
        long number = 0;
        if (!s->from || !*s->from || port < 1 || port > 5)
            return 0;
        for (size_t i = 0; i < port; i++) {
            if (m[78 + i] < '0' || m[78 + i] > '9')
                return 0;
            number = number * 10 + (m[78 + i] - '0');
        }
        if (number < 1 || number > 65535)
            return 0;
        snprintf(want->endpoint, sizeof want->endpoint, "tcp://%s:%.*s", s->from, (int)port,
                 (const char *)m + 78);
    } else {
        memcpy(want->endpoint, m + 64, len - 64);
    }
    return 1;
}

static void
fuzz_message(const settings_t *s, const unsigned char *m, size_t len)
{
    sl_rendezvous_t *r = make_rendezvous(s);
    sl_rdv_message_t got, before, want;
    char why[512];
    int ok, accept = ref_message(s, m, len, &want);

    memset(&got, 0xa5, sizeof got);
    memcpy(&before, &got, sizeof got);
    why[0] = '\0';
    ok = sl_rdv_check_message(r, s->run_id, m, len, s->key_rank, s->from, &got, why, sizeof why);
    if (ok != accept) {
        fprintf(stderr, "fuzz_rendezvous: %zu bytes, kind %u: %s\n", len, want.kind,
                ok ? "taken" : why);
        broken(ok ? "a bad message taken" : "a good message refused");
    }
    if (!ok) {
        check_line(why, "rank 0's refusal");
        if (memcmp(&got, &before, sizeof got) != 0)
            broken("a refused message changed its output");
    } else {
        if (got.kind != want.kind || got.rank != want.rank || got.about != want.about ||
            got.generation != want.generation || memcmp(got.session, want.session, 32) != 0 ||
            got.peer.id_len != 0)
            broken("a message taken reads otherwise than its bytes");
        if (got.kind != KIND_CONFIRM) {
            if (!memchr(got.endpoint, '\0', sizeof got.endpoint))
                broken("an endpoint taken is not NUL-terminated");
            if (strcmp(got.endpoint, want.endpoint) != 0) {
                fprintf(stderr, "fuzz_rendezvous: \"%s\", want \"%s\"\n", got.endpoint,
                        want.endpoint);
                broken("an endpoint taken is not the message's");
            }
            if (!ref_endpoint((const unsigned char *)got.endpoint, strlen(got.endpoint)))
                broken("an endpoint taken is not a good one");
        }
    }
    if (verbose)
        fprintf(stderr, "fuzz_rendezvous: rank 0, %zu bytes: %s\n", len, ok ? "taken" : why);
    free(r);
}

/* An answer's table, by the reference: 1 when well-formed for this run and size. */
static int
ref_table(const settings_t *s, const unsigned char *m, size_t len)
{
    size_t at = 20;

    if (len < 20 || le64(m + 8) != s->run_id || le32(m + 16) != (uint32_t)s->size)
        return 0;
    for (int i = 0; i < s->size; i++) {
        size_t l;
        if (len - at < 2)
            return 0;
        l = (size_t)m[at] | (size_t)m[at + 1] << 8;
        if (len - at - 2 < l + 40 || (l && !ref_endpoint(m + at + 2, l)))
            return 0;
        at += 2 + l + 40;
    }
    return at == len;
}

/* The table taken is the message's: encoded again it is the same bytes. */
static void
check_table(const sl_rendezvous_table_t *t, unsigned kind, const settings_t *s,
            const unsigned char *m, size_t len)
{
    unsigned char *again = NULL;
    size_t n = 0;

    if (t->size != s->size)
        broken("a table taken of another size");
    for (int i = 0; i < t->size; i++)
        if (t->endpoints[i] &&
            (!*t->endpoints[i] ||
             !ref_endpoint((const unsigned char *)t->endpoints[i], strlen(t->endpoints[i]))))
            broken("a table taken with a bad endpoint");
    if (sl_rdv_encode_table(kind, s->run_id, t, &again, &n) != SL_OK)
        broken("a table taken does not encode");
    if (n != len || memcmp(again, m, len) != 0)
        broken("a table taken encodes to other bytes");
    free(again);
}

static void
fuzz_answer(const settings_t *s, const unsigned char *m, size_t len)
{
    sl_rendezvous_t *r = make_rendezvous(s);
    sl_rendezvous_table_t t, empty;
    unsigned kind = ref_kind(m, len);
    int rc, want;

    memset(&t, 0, sizeof t);
    memset(&empty, 0, sizeof empty);
    switch (kind) {
    case KIND_TABLE:
    case KIND_REJOIN:
        want = ref_table(s, m, len) ? 1 : SL_ERR_FORMAT;
        break;
    case KIND_BUSY:
        want = le64(m + 8) == s->run_id ? 2 : 0;
        break;
    case KIND_REFUSAL:
        want = SL_ERR_INVALID;
        break;
    case KIND_GIVE_UP:
        want = SL_ERR_TIMEOUT;
        break;
    default:
        want = SL_ERR_FORMAT;
        break;
    }
    sl_err_clear();
    rc = sl_rdv_read_answer(r, s->run_id, m, len, &t);
    if (rc != want) {
        fprintf(stderr, "fuzz_rendezvous: answer of %zu bytes, kind %u: %d, want %d: %s\n", len,
                kind, rc, want, sl_err_msg());
        broken("an answer read otherwise than the reference reads it");
    }
    if (rc == 1) {
        check_table(&t, kind, s, m, len);
        if (r->rejoined != (kind == KIND_REJOIN))
            broken("a table's kind not told");
    } else if (memcmp(&t, &empty, sizeof t) != 0) {
        broken("an answer not taken left a table");
    }
    if (rc < 0) {
        const char *msg = sl_err_msg();
        check_line(msg, "an answer's error");
        if (strncmp(msg, "rendezvous: ", 12) != 0)
            broken("an answer's error does not start \"rendezvous: \"");
    }
    if (rc == SL_ERR_INVALID || rc == SL_ERR_TIMEOUT) {
        /* the reason, its first 512 bytes, each not printable as '?', ends the message */
        size_t n = len - 16 < 512 ? len - 16 : 512, ml = strlen(sl_err_msg());
        const char *tail = sl_err_msg() + ml - n;
        if (ml < n)
            broken("a refusal's message shorter than its reason");
        for (size_t i = 0; i < n; i++)
            if (tail[i] != (m[16 + i] >= 0x20 && m[16 + i] <= 0x7e ? (char)m[16 + i] : '?'))
                broken("a refusal's message does not end with its reason");
    }
    if (verbose)
        fprintf(stderr, "fuzz_rendezvous: answer, %zu bytes, kind %u: %d %s\n", len, kind, rc,
                rc < 0 ? sl_err_msg() : "");
    sl_rendezvous_table_fini(&t);
    free(r);
}

static void
fuzz_relay(const settings_t *s, const unsigned char *m, size_t len)
{
    sl_rendezvous_t *r = make_rendezvous(s);
    size_t nsess = (size_t)s->size * SESSION_BYTES;
    unsigned char *sess = exact(nsess);
    uint64_t *gens = exact(sizeof *gens * (size_t)s->size);
    long want = -1;
    int got;

    if (!s->no_table) {
        if (sl_rdv_table_alloc(&r->table, s->size) != SL_OK)
            broken("out of memory");
        for (int i = 0; i < s->size; i++) {
            r->table.generations[i] = s->gen_base + (uint64_t)i;
            for (int j = 0; j < SESSION_BYTES; j++)
                r->table.sessions[(size_t)i * SESSION_BYTES + j] = (unsigned char)(i * 7 + j);
        }
        memcpy(sess, r->table.sessions, nsess);
        memcpy(gens, r->table.generations, sizeof *gens * (size_t)s->size);
    }
    if (!s->no_table && ref_kind(m, len) == KIND_SESSION && len == 60 && le64(m + 8) == s->run_id) {
        uint32_t about = le32(m + 16);
        uint64_t gen = le64(m + 52);
        if (about < (uint32_t)s->size && about != (uint32_t)s->rank && gen > gens[about]) {
            want = about;
            memcpy(sess + (size_t)about * SESSION_BYTES, m + 20, SESSION_BYTES);
            gens[about] = gen;
        }
    }
    got = sl_rdv_take_relay(r, m, len);
    if (got != want) {
        fprintf(stderr, "fuzz_rendezvous: relay of %zu bytes: %d, want %ld\n", len, got, want);
        broken("a relay read otherwise than the reference reads it");
    }
    if (s->no_table ? r->table.size != 0
                    : memcmp(sess, r->table.sessions, nsess) != 0 ||
                          memcmp(gens, r->table.generations, sizeof *gens * (size_t)s->size))
        broken(want < 0 ? "a relay refused changed the table"
                        : "a relay taken changed the table otherwise");
    if (verbose)
        fprintf(stderr, "fuzz_rendezvous: relay, %zu bytes: %d\n", len, got);
    sl_rendezvous_table_fini(&r->table);
    free(sess);
    free(gens);
    free(r);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const from[] = {NULL, "127.0.0.1", "10.0.0.2", LONG_HOST};
    settings_t s;
    unsigned char *m;
    size_t len;

    if (verbose < 0) {
        verbose = getenv("FUZZ_RENDEZVOUS_LOG") != NULL;
        sl_log_set_level(verbose ? SL_LOG_DEBUG : SL_LOG_QUIET);
    }
    if (size < HEAD)
        return 0;
    s.decoder = (data[0] & 3) % 3;
    switch (data[0] >> 2 & 3) {
    case 0:
        s.key_rank = -1;
        break;
    case 1:
        s.key_rank = LONG_MAX;
        break;
    default:
        s.key_rank = data[3];
        break;
    }
    s.from = from[data[0] >> 4 & 3];
    s.no_table = data[0] >> 6 & 1;
    s.size = 2 + data[1] % 63;
    s.rank = s.decoder == 0 ? 0 : 1 + data[2] % (s.size - 1);
    s.run_id = sl_get_u64(data + 4);
    s.gen_base = sl_get_u64(data + 12);
    len = size - HEAD;
    m = exact(len);
    memcpy(m, data + HEAD, len);
    if (s.decoder == 0)
        fuzz_message(&s, m, len);
    else if (s.decoder == 1)
        fuzz_answer(&s, m, len);
    else
        fuzz_relay(&s, m, len);
    free(m);
    return 0;
}
