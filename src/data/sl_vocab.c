/* The vocabulary: words in id order with their training counts, and an
 * open-addressing hash table (linear probing, sl_hash_bytes) from word to id. */
#include <stdlib.h>
#include <string.h>

#include "common/sl_hash.h"
#include "data/sl_data_internal.h"

#define VOCAB_HASH_SEED 0x766f636162ULL /* "vocab" */

sl_status_t
sl_vocab_new(sl_vocab_t **out, int cap_hint)
{
    sl_vocab_t *v = calloc(1, sizeof *v);

    *out = NULL;
    if (!v)
        return sl_err_set(SL_ERR_NOMEM, "vocabulary: out of memory");
    v->unk = v->eos = -1;
    v->cap = cap_hint > 16 ? cap_hint : 16;
    v->text_cap = (size_t)v->cap * 8;
    v->nslots = 32;
    while (v->nslots < (size_t)v->cap * 2)
        v->nslots *= 2;
    v->text = malloc(v->text_cap);
    v->off = malloc((size_t)v->cap * sizeof *v->off);
    v->len = malloc((size_t)v->cap * sizeof *v->len);
    v->count = calloc((size_t)v->cap, sizeof *v->count);
    v->slots = malloc(v->nslots * sizeof *v->slots);
    if (!v->text || !v->off || !v->len || !v->count || !v->slots) {
        sl_vocab_destroy(&v);
        return sl_err_set(SL_ERR_NOMEM, "vocabulary: out of memory");
    }
    memset(v->slots, 0xff, v->nslots * sizeof *v->slots); /* all -1 */
    *out = v;
    return SL_OK;
}

void
sl_vocab_destroy(sl_vocab_t **pv)
{
    sl_vocab_t *v = pv ? *pv : NULL;

    if (!v)
        return;
    free(v->text);
    free(v->off);
    free(v->len);
    free(v->count);
    free(v->slots);
    free(v);
    *pv = NULL;
}

static uint64_t
word_hash(const char *word, size_t len)
{
    return sl_hash_bytes(word, len, VOCAB_HASH_SEED);
}

/* Slot holding word, or the empty slot where it would go. */
static size_t
probe(const sl_vocab_t *v, const char *word, size_t len, uint64_t h)
{
    size_t mask = v->nslots - 1;

    for (size_t s = (size_t)h & mask;; s = (s + 1) & mask) {
        int32_t id = v->slots[s];
        if (id < 0)
            return s;
        if (v->len[id] == len && memcmp(v->text + v->off[id], word, len) == 0)
            return s;
    }
}

int32_t
sl_vocab_find(const sl_vocab_t *v, const char *word, size_t len)
{
    return v->slots[probe(v, word, len, word_hash(word, len))];
}

static sl_status_t
grow_slots(sl_vocab_t *v)
{
    size_t n = v->nslots * 2;
    int32_t *slots = malloc(n * sizeof *slots);

    if (!slots)
        return sl_err_set(SL_ERR_NOMEM, "vocabulary: out of memory");
    memset(slots, 0xff, n * sizeof *slots);
    free(v->slots);
    v->slots = slots;
    v->nslots = n;
    for (int32_t id = 0; id < v->size; id++) {
        const char *w = v->text + v->off[id];
        v->slots[probe(v, w, v->len[id], word_hash(w, v->len[id]))] = id;
    }
    return SL_OK;
}

static sl_status_t
grow_entries(sl_vocab_t *v)
{
    int cap = v->cap * 2;
    size_t *off = realloc(v->off, (size_t)cap * sizeof *off);
    if (off)
        v->off = off;
    uint32_t *len = realloc(v->len, (size_t)cap * sizeof *len);
    if (len)
        v->len = len;
    long *count = realloc(v->count, (size_t)cap * sizeof *count);
    if (count)
        v->count = count;
    if (!off || !len || !count)
        return sl_err_set(SL_ERR_NOMEM, "vocabulary: out of memory at %d words", v->size);
    memset(v->count + v->cap, 0, (size_t)(cap - v->cap) * sizeof *count);
    v->cap = cap;
    return SL_OK;
}

sl_status_t
sl_vocab_intern(sl_vocab_t *v, const char *word, size_t len, int32_t *id)
{
    uint64_t h = word_hash(word, len);
    size_t s = probe(v, word, len, h);

    if (v->slots[s] >= 0) {
        *id = v->slots[s];
        return SL_OK;
    }
    if (len > UINT32_MAX || v->size == INT32_MAX)
        return sl_err_set(SL_ERR_INVALID, "vocabulary: word of %zu bytes, or too many words", len);
    if (v->size == v->cap)
        SL_TRY(grow_entries(v));
    if (v->text_len + len + 1 > v->text_cap) {
        size_t cap =
            v->text_cap * 2 > v->text_len + len + 1 ? v->text_cap * 2 : v->text_len + len + 1;
        char *text = realloc(v->text, cap);
        if (!text)
            return sl_err_set(SL_ERR_NOMEM, "vocabulary: out of memory at %d words", v->size);
        v->text = text;
        v->text_cap = cap;
    }
    memcpy(v->text + v->text_len, word, len);
    v->text[v->text_len + len] = '\0';
    v->off[v->size] = v->text_len;
    v->len[v->size] = (uint32_t)len;
    v->count[v->size] = 0;
    v->text_len += len + 1;
    v->slots[s] = v->size;
    *id = v->size++;
    if ((size_t)v->size * 2 > v->nslots)
        SL_TRY(grow_slots(v));
    return SL_OK;
}

int
sl_vocab_size(const sl_vocab_t *v)
{
    return v->size;
}

const char *
sl_vocab_word(const sl_vocab_t *v, int id)
{
    if (id < 0 || id >= v->size)
        return NULL;
    return v->text + v->off[id];
}

int
sl_vocab_id(const sl_vocab_t *v, const char *word, size_t len)
{
    int32_t id = sl_vocab_find(v, word, len);
    return id >= 0 ? id : v->unk;
}

int
sl_vocab_unk(const sl_vocab_t *v)
{
    return v->unk;
}

int
sl_vocab_eos(const sl_vocab_t *v)
{
    return v->eos;
}

long
sl_vocab_count(const sl_vocab_t *v, int id)
{
    if (id < 0 || id >= v->size)
        return -1;
    return v->count[id];
}

sl_status_t
sl_vocab_begin(sl_vocab_t **v, int n)
{
    return sl_vocab_new(v, n);
}

sl_status_t
sl_vocab_append(sl_vocab_t *v, const char *word, size_t len)
{
    int before = v->size;
    int32_t id;

    SL_TRY(sl_vocab_intern(v, word, len, &id));
    if (v->size == before)
        return sl_err_set(SL_ERR_FORMAT, "duplicate word at id %d (the same as id %d)", before,
                          (int)id);
    return SL_OK;
}

sl_status_t
sl_vocab_end(sl_vocab_t *v, sl_level_t level)
{
    v->unk = sl_vocab_find(v, "<unk>", 5);
    v->eos = level == SL_LEVEL_WORD ? sl_vocab_find(v, "<eos>", 5) : -1;
    if (v->unk < 0)
        return sl_err_set(SL_ERR_FORMAT, "no <unk> in the vocabulary");
    if (level == SL_LEVEL_WORD && v->eos < 0)
        return sl_err_set(SL_ERR_FORMAT, "no <eos> in the vocabulary of a word-level model");
    return SL_OK;
}
