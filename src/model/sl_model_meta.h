/* What a model file says about itself: the vocabulary in id order, the data settings,
 * the model configuration and the provenance of the weights, so that a model can be
 * scored, sampled and exported without its training corpus. This is the metadata
 * section of a checkpoint or model file (node/sl_checkpoint.h, version 4 on); this
 * module encodes and decodes the section, the checkpoint frames it.
 *
 * Section layout (little-endian):
 *   u32 section version (SL_MODEL_META_VERSION), u32 records,
 *   then each record: u32 tag (four ASCII letters, first letter in the low byte),
 *   u64 length, length bytes. A tag appears at most once; unknown tags are skipped, so
 *   a later version may add records that this one ignores.
 *   "DATA"  u32 level (0 word, 1 char), i32 <unk> id, i32 <eos> id (-1 at char level),
 *           u32 unknown-token rule (1: every token outside the vocabulary is <unk>),
 *           i32 data.vocab_size (top-V training tokens; 0: all), f64 valid_fraction,
 *           i64 max_tokens
 *   "VOCB"  u32 entries, then each entry in id order: u32 bytes, its UTF-8 text
 *   "MODL"  u32 embedding, u32 layers, per layer u32 hidden and u32 projection (0: none),
 *           u32 output (0 full, 1 sampled), u32 samples, f64 dropout, f64 init range,
 *           u32 train.bptt, u32 train.batch, u64 run.seed
 *   "PROV"  u32 bytes + shoal version, u32 bytes + run name, u32 nodes, u32 sync
 *           algorithm (sl_sync_algorithm_t), u32 models averaged (0: one node's model),
 *           i64 steps, u64 tokens (per node), f64 valid loss, i64 the step it was
 *           measured at, f64 test loss (losses in nats per token, full softmax; NaN and
 *           step -1 when not known), u64 the corpus hash (sl_corpus_t.hash), 32 bytes
 *           SHA-256 of the training file
 * Every length is checked against what holds it before it is used. */
#ifndef SL_MODEL_META_H
#define SL_MODEL_META_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"

#define SL_MODEL_META_VERSION 1u
#define SL_MODEL_META_UNK_RULE 1u /* a token outside the vocabulary is <unk> */

typedef struct {
    /* data settings */
    sl_level_t level;
    const sl_vocab_t *vocab; /* id order: borrowed when writing; decode's is owned */
    int unk, eos;            /* special ids; eos -1 at char level */
    int vocab_limit;         /* data.vocab_size */
    double valid_fraction;
    long max_tokens;
    /* model configuration */
    int embedding, nlayers;
    sl_layer_config_t layers[SL_MAX_LAYERS];
    sl_output_kind_t output;
    int samples;
    double dropout, init_range;
    int bptt, batch;
    uint64_t seed;
    /* provenance */
    char version[32];
    char run_name[128];
    int nodes;
    sl_sync_algorithm_t sync;
    int models_averaged;
    long steps;
    uint64_t tokens;
    double valid_loss; /* NaN: not known */
    long valid_step;   /* -1: not known */
    double test_loss;  /* NaN: not known */
    uint64_t data_hash;
    unsigned char train_sha256[32];
    sl_vocab_t *owned; /* the decoded vocabulary, freed by sl_model_meta_fini */
} sl_model_meta_t;

/* The data settings and model configuration of cfg with vocabulary v (borrowed),
 * provenance: this shoal's version and cfg's run name, one node, no sync, unknown
 * losses; the caller sets the rest. */
void sl_model_meta_init(sl_model_meta_t *m, const sl_config_t *cfg, const sl_vocab_t *v);
/* Frees the decoded vocabulary; m can be initialised again. */
void sl_model_meta_fini(sl_model_meta_t *m);

/* The section for m in *out (malloc'd, the caller frees), its length in *len.
 * SL_ERR_NOMEM. */
sl_status_t sl_model_meta_encode(const sl_model_meta_t *m, unsigned char **out, size_t *len);
/* Reads a section of len bytes into m (which then owns its vocabulary). Every failure
 * is SL_ERR_FORMAT "<name>: model metadata: <what>" (a length past its record, a
 * missing record, a duplicate word, specials that are not <unk> and <eos>, sizes out
 * of range, train.bptt above SL_MAX_BPTT, settings outside the ranges of their
 * configuration keys), and leaves m zeroed. */
sl_status_t sl_model_meta_decode(sl_model_meta_t *m, const char *name, const unsigned char *p,
                                 size_t len);

/* Puts m's data settings and model configuration into cfg (data.level, vocab_size,
 * the model section, train.bptt and batch, run.seed): what sl_lm_new needs to build
 * this model. */
void sl_model_meta_to_config(const sl_model_meta_t *m, sl_config_t *cfg);

#endif
