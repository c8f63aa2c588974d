/* Internals of src/data shared between its files: UTF-8 validation, tokenizing, the
 * vocabulary's interning table, and the token cache reader/writer. Not for use outside
 * src/data. The calls run one way: sl_corpus.c uses the tokenizer, the vocabulary and
 * the token cache, the token cache uses the vocabulary, and none of those knows the
 * corpus. */
#ifndef SL_DATA_INTERNAL_H
#define SL_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/sl_hash.h"
#include "common/sl_status.h"
#include "data/sl_data.h"

/* Bumped whenever tokenization, id order or the cache layout changes, so that old
 * caches miss instead of being misread. */
#define SL_DATA_FORMAT_VERSION 1u

/* ---- UTF-8 (sl_utf8.c) ---- */

/* Offset of the first byte of the first invalid sequence (overlong form, surrogate,
 * above U+10FFFF, stray continuation byte, truncated sequence), or len if s is valid. */
size_t sl_utf8_invalid_at(const unsigned char *s, size_t len);

/* Bytes in the sequence that starts with lead byte b of validated text (1..4). */
static inline size_t
sl_utf8_seq_bytes(unsigned char b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* ---- Tokenizing (sl_tokenize.c; sl_tokenize itself is in sl_data.h) ---- */

/* A growing array of token ids. */
typedef struct {
    int32_t *ids;
    size_t len, cap;
} sl_idbuf_t;

/* Appends id; SL_ERR_NOMEM "name: out of memory at N tokens". */
sl_status_t sl_idbuf_push(sl_idbuf_t *b, int32_t id, const char *name);
/* Gives the buffer's first n ids to tokens (shrunk to fit); the buffer is emptied. */
void sl_idbuf_take(sl_idbuf_t *b, size_t n, sl_tokens_t *tokens);

/* Called with each token in turn: its bytes (tok, n), or (NULL, 0) for <eos>. */
typedef sl_status_t (*sl_token_fn)(void *ctx, const char *tok, size_t n);

/* Reads fp to its end, chunk (> 0) bytes at a time, and calls fn with each of its
 * tokens, the ones sl_tokenize finds in the whole text (line_end 1), in order; the
 * memory held is one chunk and the longest word. Every byte read goes to h (when not
 * NULL), their count to *bytes. Errors: SL_ERR_FORMAT "name: invalid UTF-8 at byte N"
 * (N counted from the file's start; the tokens before it have been given to fn),
 * SL_ERR_IO "name: read error: ...", SL_ERR_NOMEM, or fn's. */
sl_status_t sl_tokenize_stream(FILE *fp, const char *name, sl_level_t level, size_t chunk,
                               sl_token_fn fn, void *ctx, sl_hash_t *h, uint64_t *bytes);

/* ---- Vocabulary (sl_vocab.c) ---- */

struct sl_vocab {
    int size;     /* entries, specials included */
    int cap;      /* room in off/len/count */
    int unk, eos; /* ids of <unk> and <eos>; -1 when absent (eos at char level) */
    char *text;   /* every word followed by a NUL, in id order */
    size_t text_len, text_cap;
    size_t *off;    /* (cap) offset of word id in text */
    uint32_t *len;  /* (cap) bytes of word id, NUL excluded */
    long *count;    /* (cap) training count of word id */
    int32_t *slots; /* (nslots) open addressing: word id or -1 */
    size_t nslots;  /* power of two, at least twice size */
};

/* An empty table with room for about cap_hint words; unk = eos = -1. */
sl_status_t sl_vocab_new(sl_vocab_t **v, int cap_hint);
/* Id of word (len bytes, need not be NUL-terminated), adding it with count 0 when new. */
sl_status_t sl_vocab_intern(sl_vocab_t *v, const char *word, size_t len, int32_t *id);
/* Id of word, or -1 when it is not in the table. */
int32_t sl_vocab_find(const sl_vocab_t *v, const char *word, size_t len);

/* ---- Token cache (sl_token_cache.c) ---- */

/* The cache holds a vocabulary and three token arrays (train, valid, test, in that
 * order); it knows nothing of sl_corpus_t: sl_corpus.c calls it with those pieces and
 * keeps the corpus's own fields (hash, from_cache) itself. */
#define SL_TOKEN_CACHE_PARTS 3

/* Which training ids a node holds: rank's share of nranks (the batcher's split; 0 of 1:
 * all), starting at id from of all. */
typedef struct {
    int rank, nranks;
    size_t from, all;
} sl_train_share_t;

/* Loads the cache file at path into *vocab (a new table) and parts[0..2] (ids the
 * caller frees) when it exists and its magic, version, hash, level, sizes, checksum,
 * ids and words are all right (<unk> and <eos> at the ids the header gives them). Of the
 * training ids (parts[0]) only share's are kept, share->from and share->all set, while
 * the checksum still reads them all. SL_ERR_IO when it cannot be opened (no cache yet),
 * SL_ERR_FORMAT "path: corrupt token cache (why)", SL_ERR_NOMEM; on any error *vocab is
 * NULL and the parts are zeroed. */
sl_status_t sl_token_cache_read(const char *path, uint64_t hash, sl_level_t level,
                                sl_vocab_t **vocab, sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS],
                                sl_train_share_t *share);
/* Writes vocab and parts (borrowed) atomically to path under hash and level. SL_ERR_IO
 * on failure (path untouched). */
sl_status_t sl_token_cache_write(const char *path, uint64_t hash, sl_level_t level,
                                 const sl_vocab_t *vocab,
                                 const sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS]);

#endif
