/* Frame MACs (libsodium): pair keys, sequence numbers, Poly1305 tags.
 *
 * Why Poly1305 under a ChaCha20 one-time key (the MAC half of ChaCha20-Poly1305) rather
 * than keyed BLAKE2b: it runs at several GB/s where BLAKE2b manages one, and a frame's
 * sequence number is the nonce each one-time key needs anyway. */
#include "transport/sl_frame_mac.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"

#define KDF_CONTEXT "shoalmac" /* a label of the pair keys' derivation */

struct sl_frame_mac {
    uint32_t me, size;
    int ready;
    unsigned char session[SL_MAC_SESSION_BYTES];
    unsigned char (*sessions)[SL_MAC_SESSION_BYTES]; /* (size) every rank's, as learnt */
    unsigned char (*send_key)[crypto_stream_chacha20_ietf_KEYBYTES]; /* (size) to rank r */
    unsigned char (*recv_key)[crypto_stream_chacha20_ietf_KEYBYTES]; /* (size) from rank s */
    uint64_t *sent;     /* (size, SL_MAC_MAX_STRIPES) last count sent to r on a stripe */
    uint64_t *accepted; /* (size, SL_MAC_MAX_STRIPES) last count accepted from s */
};

sl_status_t
sl_frame_mac_new(sl_frame_mac_t **out, uint32_t me, uint32_t size)
{
    sl_frame_mac_t *m;

    *out = NULL;
    if (sodium_init() < 0)
        return sl_err_set(SL_ERR_UNSUPPORTED, "libsodium cannot start (no entropy source?)");
    m = calloc(1, sizeof *m);
    if (!m || !(m->send_key = calloc(size, sizeof *m->send_key)) ||
        !(m->recv_key = calloc(size, sizeof *m->recv_key)) ||
        !(m->sessions = calloc(size, sizeof *m->sessions)) ||
        !(m->sent = calloc((size_t)size * SL_MAC_MAX_STRIPES, sizeof *m->sent)) ||
        !(m->accepted = calloc((size_t)size * SL_MAC_MAX_STRIPES, sizeof *m->accepted))) {
        sl_frame_mac_destroy(&m);
        return sl_err_set(SL_ERR_NOMEM, "frame mac: out of memory");
    }
    m->me = me;
    m->size = size;
    randombytes_buf(m->session, sizeof m->session);
    *out = m;
    return SL_OK;
}

void
sl_frame_mac_destroy(sl_frame_mac_t **mp)
{
    sl_frame_mac_t *m = mp ? *mp : NULL;

    if (!m)
        return;
    sodium_memzero(m->session, sizeof m->session);
    if (m->send_key)
        sodium_memzero(m->send_key, m->size * sizeof *m->send_key);
    if (m->recv_key)
        sodium_memzero(m->recv_key, m->size * sizeof *m->recv_key);
    if (m->sessions)
        sodium_memzero(m->sessions, m->size * sizeof *m->sessions);
    free(m->send_key);
    free(m->recv_key);
    free(m->sessions);
    free(m->sent);
    free(m->accepted);
    free(m);
    *mp = NULL;
}

const unsigned char *
sl_frame_mac_session(const sl_frame_mac_t *m)
{
    return m->session;
}

/* The key of frames from the rank whose session is from to rank to, whose session is
 * to_session. Why the receiver's session too: a process that comes back for rank `to`
 * starts counting sequence numbers again, and a frame once sent to its dead process
 * must not prove anything to it. */
static void
pair_key(unsigned char key[crypto_stream_chacha20_ietf_KEYBYTES], const unsigned char *from,
         uint32_t to, const unsigned char *to_session)
{
    unsigned char msg[sizeof KDF_CONTEXT - 1 + 4 + SL_MAC_SESSION_BYTES];

    memcpy(msg, KDF_CONTEXT, sizeof KDF_CONTEXT - 1);
    sl_put_u32(msg + sizeof KDF_CONTEXT - 1, to);
    memcpy(msg + sizeof KDF_CONTEXT - 1 + 4, to_session, SL_MAC_SESSION_BYTES);
    crypto_generichash(key, crypto_stream_chacha20_ietf_KEYBYTES, msg, sizeof msg, from,
                       SL_MAC_SESSION_BYTES);
}

/* rank's pair keys from the sessions held. */
static void
derive(sl_frame_mac_t *m, uint32_t r)
{
    pair_key(m->send_key[r], m->session, r, m->sessions[r]);
    pair_key(m->recv_key[r], m->sessions[r], m->me, m->session);
}

void
sl_frame_mac_learn(sl_frame_mac_t *m, const unsigned char *sessions)
{
    memcpy(m->sessions, sessions, (size_t)m->size * SL_MAC_SESSION_BYTES);
    for (uint32_t r = 0; r < m->size; r++)
        derive(m, r);
    m->ready = 1;
}

int
sl_frame_mac_set_session(sl_frame_mac_t *m, uint32_t rank, const unsigned char *session)
{
    if (sodium_memcmp(m->sessions[rank], session, SL_MAC_SESSION_BYTES) == 0)
        return 0;
    memcpy(m->sessions[rank], session, SL_MAC_SESSION_BYTES);
    derive(m, rank);
    /* the new process counts from 1 on every stripe */
    memset(m->accepted + (size_t)rank * SL_MAC_MAX_STRIPES, 0,
           SL_MAC_MAX_STRIPES * sizeof *m->accepted);
    return 1;
}

int
sl_frame_mac_ready(const sl_frame_mac_t *m)
{
    return m->ready;
}

/* The tag of (head, payload) under key and sequence number seq. */
static void
tag_of(const unsigned char *key, uint64_t seq, const void *head, size_t head_len,
       const void *payload, size_t payload_len, unsigned char tag[crypto_onetimeauth_BYTES])
{
    unsigned char nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {0};
    unsigned char otk[crypto_onetimeauth_KEYBYTES];
    crypto_onetimeauth_state st;

    sl_put_u64(nonce, seq);
    crypto_stream_chacha20_ietf(otk, sizeof otk, nonce, key);
    crypto_onetimeauth_init(&st, otk);
    crypto_onetimeauth_update(&st, head, head_len);
    if (payload_len)
        crypto_onetimeauth_update(&st, payload, payload_len);
    crypto_onetimeauth_final(&st, tag);
    sodium_memzero(otk, sizeof otk);
}

/* The low bits of a sequence number: the count on its stripe. */
#define COUNT_MASK (((uint64_t)1 << SL_MAC_STRIPE_SHIFT) - 1)

void
sl_frame_mac_seal(sl_frame_mac_t *m, uint32_t peer, unsigned stripe, const void *head,
                  size_t head_len, const void *payload, size_t payload_len,
                  unsigned char trailer[SL_MAC_TRAILER_BYTES])
{
    uint64_t seq = (uint64_t)stripe << SL_MAC_STRIPE_SHIFT |
                   ++m->sent[(size_t)peer * SL_MAC_MAX_STRIPES + stripe];

    sl_put_u64(trailer, seq);
    tag_of(m->send_key[peer], seq, head, head_len, payload, payload_len, trailer + 8);
}

sl_mac_verdict_t
sl_frame_mac_check(sl_frame_mac_t *m, uint32_t sender, const void *head, size_t head_len,
                   const void *payload, size_t payload_len,
                   const unsigned char trailer[SL_MAC_TRAILER_BYTES])
{
    unsigned char tag[crypto_onetimeauth_BYTES];
    uint64_t seq = sl_get_u64(trailer), stripe = seq >> SL_MAC_STRIPE_SHIFT;
    uint64_t *last;

    if (!m->ready || sender >= m->size || sender == m->me)
        return SL_MAC_BAD;
    tag_of(m->recv_key[sender], seq, head, head_len, payload, payload_len, tag);
    if (sodium_memcmp(tag, trailer + 8, sizeof tag) != 0)
        return SL_MAC_BAD;
    if (stripe >= SL_MAC_MAX_STRIPES) /* sealed by no node of ours */
        return SL_MAC_BAD;
    last = &m->accepted[(size_t)sender * SL_MAC_MAX_STRIPES + stripe];
    if ((seq & COUNT_MASK) <= *last)
        return SL_MAC_REPLAY;
    *last = seq & COUNT_MASK;
    return SL_MAC_OK;
}
