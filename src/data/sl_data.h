/* Corpus, vocabulary, token cache and batches.
 *
 * Word level: tokens are runs of non-whitespace; every line ends with <eos>. The
 * vocabulary is the top vocab_size training words plus <unk> and <eos>; ids are in
 * order of descending training count (ties: byte order), with <unk> counted as the
 * out-of-vocabulary tokens and <eos> as the lines, so id ~ Zipf rank (the sampled
 * softmax's log-uniform sampler relies on it). Character level: tokens are UTF-8 code
 * points (newline included), vocabulary every training character plus <unk>, same order.
 * Invalid UTF-8 is an error naming the byte offset, at both levels.
 *
 * Token ids of train/valid/test are cached in one binary file named by a hash of the
 * corpus bytes and the settings; a valid cache is reused, a corrupt one rebuilt. The
 * process that builds a cache holds a lock on <cache>.lock, which others that missed
 * the cache wait for before they read it again (on a file system without locks each
 * builds it).
 *
 * Settings (cfg->data): vocab_size 0 keeps every distinct training token (at both
 * levels). Without a valid file, valid_fraction f > 0 keeps the first
 * floor(n * (1 - f)) of the n tokens of the training file for training and makes the
 * rest validation; the vocabulary is counted over the training part only (tokens
 * seen only in the held-out part are <unk>). max_tokens > 0 then keeps the first
 * max_tokens training ids; it does not change the vocabulary. A literal "<unk>" or
 * "<eos>" word in the text is that special token. cache_dir "" means
 * $XDG_CACHE_HOME/shoal or $HOME/.cache/shoal; a cache that cannot be written costs
 * a warning, not an error. */
#ifndef SL_DATA_H
#define SL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

typedef struct sl_vocab sl_vocab_t;

typedef struct {
    int32_t *ids; /* (len) token ids */
    size_t len;
} sl_tokens_t;

typedef struct {
    sl_vocab_t *vocab;
    sl_tokens_t train, valid, test; /* valid/test len 0 when absent */
    uint64_t hash;                  /* of corpus bytes + settings: identifies the data */
    unsigned char train_sha256[32]; /* SHA-256 of the training file's bytes (provenance:
                                       sha256sum(1) of the file gives the same) */
    int from_cache;                 /* 1 if loaded from the token cache */
    size_t train_from, train_all;   /* train holds ids [train_from, train_from + train.len)
                                       of the training split's train_all */
} sl_corpus_t;

/* Reads, tokenizes (or loads from cache) everything cfg->data names. Errors:
 * missing/unreadable file (SL_ERR_IO "FILE: No such file or directory"), empty
 * corpus (SL_ERR_INVALID "FILE: corpus is empty"; at word level also a training text
 * without words, "FILE: corpus has no words (its lines are empty)" or "... but <unk>"),
 * invalid UTF-8 (SL_ERR_FORMAT "FILE: invalid UTF-8 at byte N"), vocab_size larger than
 * the distinct words of the corpus (SL_ERR_INVALID). Messages start with the file name.
 * The corpus owns its vocabulary and ids; on error it is left zeroed. */
sl_status_t sl_corpus_load(sl_corpus_t *corpus, const sl_config_t *cfg);
/* The same, but of the training ids only rank's share of nranks is held (the batcher's
 * split: sl_batcher_init_at with train_from and train_all); with a valid token cache
 * only that share is read into memory, so that a node of a large corpus never holds the
 * whole. The process that builds the cache reads each text a piece at a time and
 * holds all the ids (4 bytes a token), never a text. SL_ERR_INVALID for a rank out
 * of range. */
sl_status_t sl_corpus_load_share(sl_corpus_t *corpus, const sl_config_t *cfg, int rank, int nranks);
/* Frees vocabulary and ids and zeroes the struct (safe on a zeroed one). */
void sl_corpus_fini(sl_corpus_t *corpus);

/* Vocabulary queries. Word and count of an id out of range: NULL and -1. */
int sl_vocab_size(const sl_vocab_t *v);                             /* including specials */
const char *sl_vocab_word(const sl_vocab_t *v, int id);             /* UTF-8, borrowed */
int sl_vocab_id(const sl_vocab_t *v, const char *word, size_t len); /* <unk> if unknown */
int sl_vocab_unk(const sl_vocab_t *v);
int sl_vocab_eos(const sl_vocab_t *v);            /* -1 at char level */
long sl_vocab_count(const sl_vocab_t *v, int id); /* training count */
/* Frees a vocabulary (NULL allowed) and sets *v to NULL. */
void sl_vocab_destroy(sl_vocab_t **v);

/* A vocabulary rebuilt in id order (a model file's): sl_vocab_begin makes an empty one
 * with room for about n words; sl_vocab_append gives word (len bytes) the next id,
 * SL_ERR_FORMAT "duplicate word" when it is there already; sl_vocab_end names <unk>
 * and, at word level, <eos>: SL_ERR_FORMAT when one is missing. Counts are 0. */
sl_status_t sl_vocab_begin(sl_vocab_t **v, int n);
sl_status_t sl_vocab_append(sl_vocab_t *v, const char *word, size_t len);
sl_status_t sl_vocab_end(sl_vocab_t *v, sl_level_t level);

/* The ids of text (len bytes; name is used in messages) with vocabulary v at level, as
 * the corpus reads a valid or test file: word level, runs of non-space with <eos> at
 * every line end; character level, UTF-8 code points; a token outside v is <unk>.
 * line_end 0 leaves out the <eos> a last line without a newline would get (a prompt
 * that goes on). out->ids is malloc'd (NULL, len 0 for no tokens). SL_ERR_FORMAT
 * "name: invalid UTF-8 at byte N", SL_ERR_NOMEM. */
sl_status_t sl_tokenize(const sl_vocab_t *v, sl_level_t level, const char *name, const char *text,
                        size_t len, int line_end, sl_tokens_t *out);

/* B parallel streams x BPTT length T over a contiguous share of a token array.
 * The share of rank k of n is [k*len/n, (k+1)*len/n); it is cut into B streams of
 * L = share/B tokens; batch i of an epoch holds, for each stream b, inputs
 * stream_b[i*T .. i*T+T) and targets one token later. Batches per epoch =
 * (L - 1) / T; the remainder is dropped. Layout is time-major: x[t*B + b]. Hidden
 * state is carried by the model across consecutive batches of an epoch. */
typedef struct {
    const int32_t *share; /* borrowed from the tokens */
    size_t share_len;
    int batch, bptt;
    long stream_len; /* L */
    long batches_per_epoch;
} sl_batcher_t;

/* SL_ERR_INVALID "... does not fit ..." when the share is too short for B x (T+1). */
sl_status_t sl_batcher_init(sl_batcher_t *bt, const sl_tokens_t *tokens, int rank, int nranks,
                            int batch, int bptt);
/* The same over a part of a token array of all tokens: tokens holds ids [from, from +
 * tokens->len), which must cover rank's share (a node that holds its share only,
 * sl_corpus_load_share). */
sl_status_t sl_batcher_init_at(sl_batcher_t *bt, const sl_tokens_t *tokens, size_t from, size_t all,
                               int rank, int nranks, int batch, int bptt);
/* Where rank k of n's share of len tokens starts: floor(k * len / n). */
size_t sl_batcher_share_start(size_t len, int k, int n);
/* Fills x and y (T*B each, caller-owned) with batch index i (0 <= i < batches_per_epoch). */
void sl_batcher_get(const sl_batcher_t *bt, long i, int32_t *x, int32_t *y);

#endif
