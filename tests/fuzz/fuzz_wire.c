/* libFuzzer target: sl_wire_decode (or sl_wire_decode_local) on arbitrary bytes, an
 * int8 / int4 frame's payload through sl_wire_quant_parse, then every frame that passes
 * is filed into a mailbox whose verdicts and takes are checked
 * against a plain list. Input: records of [flags u8][length u16 le][frame bytes]. Flag
 * bit 0 reseals the frame's checksum first (so the field checks behind it are
 * reached), bit 1 advances the frame's (kind, component) to its round, bit 2 takes its
 * key back out, bit 3 makes it a local frame (checksum of the header only). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/sl_mailbox.h"
#include "transport/sl_wire.h"
#include "transport/sl_wire_quant.h"

#define RUN_ID 0x5eed5eed12345678ULL
#define ME 1
#define NRANKS 4
#define MAX_FRAMES 8
#define MAX_BYTES 4096
#define AHEAD 4 /* the mailbox's window of rounds ahead */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    sl_wire_key_t key;
    uint64_t bytes;
    void *owner;
    int unmarked; /* filed while its (kind, component) had no mark */
} ref_t;

typedef struct {
    sl_wire_key_t key;
    uint64_t round;
} ref_mark_t;

static void
release(void *owner)
{
    free(owner);
}

static int
same_key(const sl_wire_key_t *a, const sl_wire_key_t *b)
{
    return a->round == b->round && a->component == b->component && a->seq == b->seq &&
           a->peer == b->peer && a->kind == b->kind;
}

/* An int8 / int4 payload as the vector it says it is (up to MAX_BYTES values): when the
 * parser takes it, what it promised (indices in range, strictly increasing). */
static void
check_quant(unsigned enc, const unsigned char *p, size_t bytes)
{
    static uint32_t idx[MAX_BYTES];
    uint32_t n = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    sl_wire_quant_t q;

    if (n > MAX_BYTES || sl_wire_quant_parse(enc, p, bytes, n, &q, idx) != SL_OK)
        return;
    if (q.n != n || q.entries > n || q.block < 1 ||
        bytes != sl_wire_quant_bytes(enc, q.block, q.entries, q.index_bytes))
        abort();
    for (uint32_t j = 0; q.entries < n && j < q.entries; j++)
        if (idx[j] >= n || (j && idx[j] <= idx[j - 1]))
            abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_mailbox_t *mb = NULL;
    ref_t ref[MAX_FRAMES];
    ref_mark_t marks[64];
    size_t nref = 0, nmarks = 0, nunmarked = 0;
    uint64_t ref_bytes = 0, unmarked_bytes = 0;

    if (sl_mailbox_new(&mb, MAX_FRAMES, MAX_BYTES, AHEAD, release) != SL_OK)
        abort();
    while (size >= 3) {
        unsigned flags = data[0];
        size_t len = (size_t)data[1] | (size_t)data[2] << 8;
        data += 3;
        size -= 3;
        if (len > size)
            len = size;
        unsigned char *buf = malloc(len ? len : 1); /* exact size: ASan sees overreads */
        memcpy(buf, data, len);
        data += len;
        size -= len;
        int local = (flags & 8) != 0;
        if ((flags & 1) && len >= SL_WIRE_HEADER_BYTES) {
            uint64_t c = sl_wire_checksum(buf, buf + SL_WIRE_HEADER_BYTES,
                                          local ? 0 : len - SL_WIRE_HEADER_BYTES);
            for (int i = 0; i < 8; i++)
                buf[SL_WIRE_CHECKSUM_OFFSET + i] = (unsigned char)(c >> (8 * i));
        }
        sl_wire_header_t h;
        const void *payload;
        sl_wire_reason_t why =
            local ? sl_wire_decode_local(buf, len, RUN_ID, ME, NRANKS, &h, &payload)
                  : sl_wire_decode(buf, len, RUN_ID, ME, NRANKS, &h, &payload);
        if (why >= SL_WIRE_NREASONS)
            abort();
        if (why != SL_WIRE_OK) {
            free(buf);
            continue;
        }
        /* what decode promised */
        if (h.sender >= NRANKS || h.sender == ME || h.receiver != ME ||
            h.payload_bytes != len - SL_WIRE_HEADER_BYTES ||
            (uint64_t)h.count * sl_wire_element_bytes(h.encoding) != h.payload_bytes ||
            payload != buf + SL_WIRE_HEADER_BYTES)
            abort();
        if ((h.encoding == SL_WIRE_INT8 || h.encoding == SL_WIRE_INT4) && h.payload_bytes >= 4)
            check_quant(h.encoding, payload, (size_t)h.payload_bytes);
        unsigned char again[SL_WIRE_HEADER_BYTES];
        if (sl_wire_encode(&h, payload, again) != SL_OK ||
            memcmp(again, buf, local ? SL_WIRE_CHECKSUM_OFFSET : sizeof again))
            abort();

        sl_wire_key_t key = sl_wire_key_of(&h);
        int old = 0, ahead = 0, dup = 0, marked = 0;
        for (size_t i = 0; i < nmarks; i++)
            if (marks[i].key.kind == key.kind && marks[i].key.component == key.component) {
                marked = 1;
                old = key.round < marks[i].round;
                ahead = !old && key.round - marks[i].round > AHEAD;
            }
        for (size_t i = 0; i < nref; i++)
            if (same_key(&ref[i].key, &key))
                dup = 1;
        int full = nref == MAX_FRAMES || h.payload_bytes > MAX_BYTES - ref_bytes ||
                   (!marked && (nunmarked >= MAX_FRAMES / 2 ||
                                h.payload_bytes > MAX_BYTES / 2 - unmarked_bytes));
        sl_mailbox_verdict_t want = old     ? SL_MAILBOX_OLD_ROUND
                                    : ahead ? SL_MAILBOX_FUTURE_ROUND
                                    : dup   ? SL_MAILBOX_DUPLICATE
                                    : full  ? SL_MAILBOX_FULL
                                            : SL_MAILBOX_FILED;
        if (sl_mailbox_file(mb, &key, h.payload_bytes, buf) != want)
            abort();
        if (want == SL_MAILBOX_FILED) {
            ref[nref++] = (ref_t){key, h.payload_bytes, buf, !marked};
            ref_bytes += h.payload_bytes;
            if (!marked) {
                nunmarked++;
                unmarked_bytes += h.payload_bytes;
            }
        }
        if ((flags & 2) && nmarks < 64) {
            size_t purged = 0, expect = 0;
            int found = 0;
            for (size_t i = 0; i < nmarks; i++)
                if (marks[i].key.kind == key.kind && marks[i].key.component == key.component) {
                    found = 1;
                    if (key.round > marks[i].round)
                        marks[i].round = key.round;
                }
            if (!found)
                marks[nmarks++] = (ref_mark_t){key, key.round};
            /* stale frames go; a new mark also purges those beyond its window, and the
             * rest of its frames are no longer unmarked */
            for (size_t i = 0; i < nref;) {
                int same = ref[i].key.kind == key.kind && ref[i].key.component == key.component;
                if (same && (ref[i].key.round < key.round ||
                             (!found && ref[i].key.round - key.round > AHEAD))) {
                    ref_bytes -= ref[i].bytes;
                    if (ref[i].unmarked) {
                        nunmarked--;
                        unmarked_bytes -= ref[i].bytes;
                    }
                    ref[i] = ref[--nref];
                    expect++;
                    continue;
                }
                if (same && ref[i].unmarked) {
                    ref[i].unmarked = 0;
                    nunmarked--;
                    unmarked_bytes -= ref[i].bytes;
                }
                i++;
            }
            if (sl_mailbox_advance(mb, key.kind, key.component, key.round, &purged) != SL_OK ||
                purged != expect)
                abort();
        }
        if (flags & 4) {
            void *want_owner = NULL;
            for (size_t i = 0; i < nref; i++)
                if (same_key(&ref[i].key, &key)) {
                    want_owner = ref[i].owner;
                    ref_bytes -= ref[i].bytes;
                    if (ref[i].unmarked) {
                        nunmarked--;
                        unmarked_bytes -= ref[i].bytes;
                    }
                    ref[i] = ref[--nref];
                    break;
                }
            void *got = sl_mailbox_take(mb, &key);
            if (got != want_owner)
                abort();
            free(got);
        }
        if (sl_mailbox_frames(mb) != nref || sl_mailbox_bytes(mb) != ref_bytes)
            abort();
        for (size_t i = 0; i < nref; i++) { /* every filed frame is still reachable */
            void *o = sl_mailbox_take(mb, &ref[i].key);
            if (o != ref[i].owner ||
                sl_mailbox_file(mb, &ref[i].key, ref[i].bytes, o) != SL_MAILBOX_FILED)
                abort();
        }
    }
    sl_mailbox_destroy(&mb);
    if (mb)
        abort();
    return 0;
}
