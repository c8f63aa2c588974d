/* The mailbox: an open-addressing hash table (linear probing, backward-shift deletion,
 * so no tombstones) from frame keys to owners, plus a small table of the newest round
 * asked for per (kind, component). A node that falls behind can hold many early frames
 * (up to n-1 ring steps of a large allreduce), so lookups must not be linear. */
#include "transport/sl_mailbox.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl_rng.h"

typedef struct {
    sl_wire_key_t key;
    uint64_t bytes;
    void *owner;  /* NULL: empty slot */
    int unmarked; /* its (kind, component) had no current round when it was filed */
} slot_t;

typedef struct {
    uint64_t round; /* newest round asked for */
    uint32_t component;
    uint8_t kind;
} mark_t;

struct sl_mailbox {
    slot_t *slots; /* (cap) */
    size_t cap;    /* power of two, 0 before the first frame */
    size_t frames;
    uint64_t bytes;
    size_t max_frames;
    uint64_t max_bytes;
    uint64_t ahead;         /* ahead_rounds */
    size_t unmarked_frames; /* held frames of (kind, component)s not asked for yet */
    uint64_t unmarked_bytes;
    sl_mailbox_release_fn release;
    mark_t *marks; /* (nmarks) */
    size_t nmarks, marks_cap;
};

static uint64_t
key_hash(const sl_wire_key_t *k)
{
    uint64_t a = (uint64_t)k->component << 32 | k->seq;
    uint64_t b = (uint64_t)k->peer << 8 | k->kind;
    return sl_mix64(k->round ^ sl_mix64(a ^ sl_mix64(b)));
}

static int
key_eq(const sl_wire_key_t *a, const sl_wire_key_t *b)
{
    return a->round == b->round && a->component == b->component && a->seq == b->seq &&
           a->peer == b->peer && a->kind == b->kind;
}

sl_status_t
sl_mailbox_new(sl_mailbox_t **out, size_t max_frames, uint64_t max_bytes, uint64_t ahead_rounds,
               sl_mailbox_release_fn release)
{
    sl_mailbox_t *mb;

    *out = NULL;
    if (max_frames == 0 || max_bytes == 0 || max_frames > ((size_t)1 << 28) || !release ||
        ahead_rounds == 0)
        return sl_err_set(SL_ERR_INVALID, "mailbox: caps and window must be > 0 (frames"
                                          " <= 2^28) and a release function given");
    mb = calloc(1, sizeof *mb);
    if (!mb)
        return sl_err_set(SL_ERR_NOMEM, "mailbox: out of memory");
    mb->max_frames = max_frames;
    mb->max_bytes = max_bytes;
    mb->ahead = ahead_rounds;
    mb->release = release;
    *out = mb;
    return SL_OK;
}

void
sl_mailbox_destroy(sl_mailbox_t **mbp)
{
    sl_mailbox_t *mb = mbp ? *mbp : NULL;

    if (!mb)
        return;
    for (size_t i = 0; i < mb->cap; i++)
        if (mb->slots[i].owner)
            mb->release(mb->slots[i].owner);
    free(mb->slots);
    free(mb->marks);
    free(mb);
    *mbp = NULL;
}

static const mark_t *
find_mark(const sl_mailbox_t *mb, uint8_t kind, uint32_t component)
{
    for (size_t i = 0; i < mb->nmarks; i++)
        if (mb->marks[i].kind == kind && mb->marks[i].component == component)
            return &mb->marks[i];
    return NULL;
}

int
sl_mailbox_is_old(const sl_mailbox_t *mb, uint8_t kind, uint32_t component, uint64_t round)
{
    const mark_t *m = find_mark(mb, kind, component);
    return m && round < m->round;
}

int
sl_mailbox_current(const sl_mailbox_t *mb, uint8_t kind, uint32_t component, uint64_t *round)
{
    const mark_t *m = find_mark(mb, kind, component);

    if (m)
        *round = m->round;
    return m != NULL;
}

/* Index of key's slot, or of the empty slot where it would go. cap > 0. */
static size_t
probe(const sl_mailbox_t *mb, const sl_wire_key_t *key)
{
    size_t mask = mb->cap - 1, i = (size_t)key_hash(key) & mask;

    while (mb->slots[i].owner && !key_eq(&mb->slots[i].key, key))
        i = (i + 1) & mask;
    return i;
}

static int
grow(sl_mailbox_t *mb)
{
    size_t ncap = mb->cap ? mb->cap * 2 : 64, ocap = mb->cap;
    slot_t *old = mb->slots, *fresh = calloc(ncap, sizeof *fresh);

    if (!fresh)
        return -1;
    mb->slots = fresh;
    mb->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].owner)
            mb->slots[probe(mb, &old[i].key)] = old[i];
    free(old);
    return 0;
}

/* Empties slot i and shifts the rest of its probe cluster back so that every key stays
 * reachable from its home slot without tombstones. */
static void
remove_slot(sl_mailbox_t *mb, size_t i)
{
    size_t mask = mb->cap - 1, j = i;

    mb->frames--;
    mb->bytes -= mb->slots[i].bytes;
    if (mb->slots[i].unmarked) {
        mb->unmarked_frames--;
        mb->unmarked_bytes -= mb->slots[i].bytes;
    }
    mb->slots[i].owner = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!mb->slots[j].owner)
            return;
        size_t home = (size_t)key_hash(&mb->slots[j].key) & mask;
        /* j's entry may move to the hole at i unless its home lies cyclically in (i, j] */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        mb->slots[i] = mb->slots[j];
        mb->slots[j].owner = NULL;
        i = j;
    }
}

sl_mailbox_verdict_t
sl_mailbox_file(sl_mailbox_t *mb, const sl_wire_key_t *key, uint64_t bytes, void *owner)
{
    const mark_t *m = find_mark(mb, key->kind, key->component);
    size_t i;

    if (m && key->round < m->round) {
        mb->release(owner);
        return SL_MAILBOX_OLD_ROUND;
    }
    if (m && key->round - m->round > mb->ahead) {
        mb->release(owner);
        return SL_MAILBOX_FUTURE_ROUND;
    }
    if (mb->cap) {
        i = probe(mb, key);
        if (mb->slots[i].owner) {
            mb->release(owner);
            return SL_MAILBOX_DUPLICATE;
        }
    }
    /* frames with no current round to purge them by get half of each cap: a flood of
     * frames for a (kind, component) never asked for leaves the other half free */
    if (mb->frames >= mb->max_frames || bytes > mb->max_bytes - mb->bytes ||
        (!m && (mb->unmarked_frames >= mb->max_frames / 2 ||
                bytes > mb->max_bytes / 2 - mb->unmarked_bytes)) ||
        ((mb->frames + 1) * 2 > mb->cap && grow(mb) != 0)) {
        mb->release(owner);
        return SL_MAILBOX_FULL;
    }
    i = probe(mb, key);
    mb->slots[i].key = *key;
    mb->slots[i].bytes = bytes;
    mb->slots[i].owner = owner;
    mb->slots[i].unmarked = !m;
    mb->frames++;
    mb->bytes += bytes;
    if (!m) {
        mb->unmarked_frames++;
        mb->unmarked_bytes += bytes;
    }
    return SL_MAILBOX_FILED;
}

void *
sl_mailbox_take(sl_mailbox_t *mb, const sl_wire_key_t *key)
{
    size_t i;
    void *owner;

    if (mb->frames == 0)
        return NULL;
    i = probe(mb, key);
    owner = mb->slots[i].owner;
    if (owner)
        remove_slot(mb, i);
    return owner;
}

sl_status_t
sl_mailbox_advance(sl_mailbox_t *mb, uint8_t kind, uint32_t component, uint64_t round,
                   size_t *purged)
{
    mark_t *m = (mark_t *)find_mark(mb, kind, component);
    int fresh = !m;

    if (m && round <= m->round)
        return SL_OK;
    if (!m) {
        if (mb->nmarks == mb->marks_cap) {
            size_t ncap = mb->marks_cap ? mb->marks_cap * 2 : 16;
            mark_t *nm = realloc(mb->marks, ncap * sizeof *nm);
            if (!nm)
                return sl_err_set(SL_ERR_NOMEM, "mailbox: out of memory");
            mb->marks = nm;
            mb->marks_cap = ncap;
        }
        m = &mb->marks[mb->nmarks++];
        m->kind = kind;
        m->component = component;
    }
    m->round = round;
    /* Purge filed frames that just became stale, and, the first time, those filed beyond
     * the new window; the others of a fresh mark now have a current round. After a
     * removal slot i holds a frame shifted back from later in its cluster, so look at i
     * again. */
    for (size_t i = 0; i < mb->cap && mb->frames;) {
        slot_t *s = &mb->slots[i];
        if (!s->owner || s->key.kind != kind || s->key.component != component) {
            i++;
        } else if (s->key.round < round || (fresh && s->key.round - round > mb->ahead)) {
            void *owner = s->owner;
            remove_slot(mb, i);
            mb->release(owner);
            ++*purged;
        } else {
            if (s->unmarked) {
                s->unmarked = 0;
                mb->unmarked_frames--;
                mb->unmarked_bytes -= s->bytes;
            }
            i++;
        }
    }
    return SL_OK;
}

size_t
sl_mailbox_frames(const sl_mailbox_t *mb)
{
    return mb->frames;
}

uint64_t
sl_mailbox_bytes(const sl_mailbox_t *mb)
{
    return mb->bytes;
}
