/* Checkpoints and model files: one little-endian binary file, written atomically and
 * validated completely before anything in memory changes.
 *
 * Layout (version 4):
 *   header (240 bytes)  magic "SHOALCKP", u32 version, u32 flags, u64 corpus hash,
 *                       u64 architecture hash, u32 vocab, embedding, layers, optimizer,
 *                       u32 hidden[8], projection[8], batch, bptt,
 *                       u64 nparams, optimizer floats, state floats,
 *                       i64 step, epoch, batch index, optimizer steps, u64 tokens,
 *                       f64 train time (s),
 *                       u32 nodes of the run, rank of this node, sync algorithm
 *                       (sl_sync_algorithm_t, none with one node),
 *                       f32 fp16 loss scale (0: none), i64 its good steps in a row,
 *                       overflowed steps in a row, steps skipped, u64 0
 *   f32 params[nparams], f32 optimizer state[], f32 hidden state[]
 *   u64 sync bytes, sync state[sync bytes]   sl_sync_state_save's bytes; 0 of them in a
 *                       model file and when the algorithm keeps nothing (sl_sync.h)
 *   u64 meta bytes, metadata[meta bytes]   what the model says about itself
 *                       (model/sl_model_meta.h: vocabulary, data settings, model
 *                       configuration, provenance); 0 bytes when the writer gave none
 *   u64 checksum        sl_hash of every byte before it
 * Version 3 (still read): the same without the metadata section; such a file is used
 * with its training corpus, as before (shoal eval).
 * Version 2 (still read): a 208-byte header that ends after the sync algorithm and a
 * u32 0, so no loss-scale state; a run resumed from it in fp16 starts the scale again.
 * Version 1 (still read): a 192-byte header that ends after the train time, and no sync
 * section; a run resumed from it starts its sync state from the resumed parameters.
 * A checkpoint (flags & SL_CKPT_TRAIN_STATE) carries the optimizer, hidden and sync
 * state so that training continues exactly; a model file carries the parameters only.
 *
 * Generations: saving a checkpoint keeps the one it replaces as <path>.prev, so there
 * are at most two complete ones (sl_resume.h picks one at start). Header fields are
 * bounded before use: element counts, step, batch index and optimizer steps up to
 * 2^40, the epoch within an int, none negative, the tokens exactly steps x batch x
 * bptt; with the run's length known, the step within it and equal to epoch x
 * batches per epoch + batch index. Nothing is allocated from a header's counts. */
#ifndef SL_CHECKPOINT_H
#define SL_CHECKPOINT_H

#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_model_meta.h"
#include "model/sl_optim.h"
#include "sync/sl_sync.h"

#define SL_CKPT_MAGIC "SHOALCKP"
#define SL_CKPT_VERSION 4
#define SL_CKPT_HEADER_BYTES 240    /* versions 3 and 4 */
#define SL_CKPT_V2_HEADER_BYTES 208 /* version 2 */
#define SL_CKPT_V1_HEADER_BYTES 192 /* version 1 */
#define SL_CKPT_TRAIN_STATE 1u      /* flags: optimizer and hidden state present */
#define SL_CKPT_PREV_SUFFIX ".prev" /* the previous generation: <path>.prev */
#define SL_CKPT_PATH_MAX 1040       /* room for a run path and the suffix */

/* What a file must match to be loaded: the data, the architecture, and (for training
 * state) the optimizer, the shape of the hidden state and data cursor, and the run's
 * nodes, this node's rank and the sync algorithm. */
typedef struct {
    uint64_t corpus_hash; /* sl_corpus_t.hash */
    int vocab;            /* V, specials included */
    int embedding;        /* E */
    int nlayers;
    sl_layer_config_t layers[SL_MAX_LAYERS];
    sl_opt_kind_t optimizer;
    int batch, bptt;          /* of the training run */
    int nodes, rank;          /* of the training run, this node's (0-based) */
    sl_sync_algorithm_t sync; /* the algorithm in effect: none with one node */
    /* The training run's steps and batches per epoch: a checkpoint beyond the run, or
     * whose cursor does not fit the epoch, is refused. 0 (sl_ckpt_ident_init's):
     * not checked. */
    long total_steps, batches_per_epoch;
    /* What the file says about itself (saving only; NULL: an empty metadata section).
     * Its steps, tokens, nodes and sync algorithm are taken from the cursor and the
     * fields above when saved. Borrowed. */
    const sl_model_meta_t *meta;
} sl_ckpt_ident_t;

/* Where training stands. */
typedef struct {
    long step;           /* steps taken (the next step's 0-based index) */
    int epoch;           /* 0-based epoch of the next step */
    long batch_index;    /* next batch within that epoch */
    uint64_t tokens;     /* training tokens seen */
    double train_time_s; /* time in training steps so far, eval excluded */
    int version;         /* the format version of the file loaded (sl_checkpoint_load sets
                            it; 1: no sync state, 1 and 2: no loss scale); save ignores it */
    /* fp16 loss scaling (sl_loss_scale_t): S, 0 when there is none (not fp16, or a file
     * older than version 3), then its counters */
    float loss_scale;
    long loss_scale_good, loss_scale_overflows, loss_scale_skipped;
} sl_ckpt_cursor_t;

/* id for node rank of nodes (1 and 0 outside a multi-node run); total_steps and
 * batches_per_epoch 0, no metadata. */
void sl_ckpt_ident_init(sl_ckpt_ident_t *id, const sl_config_t *cfg, int vocab,
                        uint64_t corpus_hash, int rank, int nodes);
/* Hash of vocab, embedding and the layer sizes: equal iff the parameters fit. */
uint64_t sl_ckpt_arch_hash(const sl_ckpt_ident_t *id);
/* "vocab 502, embedding 16, 2 layers of 256" (LSTMP layers as "2048/512"). */
void sl_ckpt_describe_arch(const sl_ckpt_ident_t *id, char *buf, size_t size);

/* Writes path atomically (temp file, fsync, rename): a crash leaves the old file.
 * opt and st are both given (a checkpoint: the file it replaces becomes the previous
 * generation, sl_checkpoint_prev_path) or both NULL (a model file). sync (may be
 * NULL: no sync state) is the node's sync object, whose sl_sync_state_save goes into
 * the sync section of a checkpoint. lm, be and sync are borrowed; parameters are
 * copied to the host in one staging buffer. */
sl_status_t sl_checkpoint_save(const char *path, const sl_ckpt_ident_t *id,
                               const sl_ckpt_cursor_t *cur, sl_backend_t *be, sl_lm_t *lm,
                               const sl_optim_t *opt, const sl_lm_state_t *st,
                               const sl_sync_t *sync);

/* Reads and validates path against id, then loads the parameters into lm and, when opt
 * and st are given, the optimizer state, the hidden state, the sync state into sync
 * (when given and the file is of version 2) and *cur (cur may be NULL; cur->version
 * says whether the file had a sync section: a version 1 file leaves sync as it was).
 * opt and st NULL: parameters only (evaluation); a checkpoint or a model file.
 * Every failure is one line starting with the path, and changes nothing:
 *   SL_ERR_IO      unreadable file
 *   SL_ERR_FORMAT  bad magic, unsupported version, truncated, checksum mismatch,
 *                  counters out of bounds (above), a step beyond the run or a cursor
 *                  that does not fit its epochs (when id gives them),
 *                  different model / corpus / optimizer / batch shape, no training
 *                  state; for training state of version 2: written by another node or
 *                  for another number of nodes ("written by node 2 of 4, this is node 0
 *                  of 2"), with another sync algorithm, or a sync state that this sync
 *                  object refuses (sl_sync_state_load) */
sl_status_t sl_checkpoint_load(const char *path, const sl_ckpt_ident_t *id, sl_backend_t *be,
                               sl_lm_t *lm, sl_optim_t *opt, sl_lm_state_t *st, sl_sync_t *sync,
                               sl_ckpt_cursor_t *cur);

/* Every check of sl_checkpoint_load but the sync state's own contents, loading nothing:
 * SL_OK and the file's cursor in *cur (may be NULL), or its error, with *damaged 1 when
 * the file itself is bad (unreadable, bad magic or version, truncated, checksum,
 * counters out of bounds or disagreeing: a previous generation may do instead) and 0
 * when it is sound but does not fit this run (model, corpus, optimizer, batch shape,
 * node, sync, a step beyond the run: no generation will). */
sl_status_t sl_checkpoint_check(const char *path, const sl_ckpt_ident_t *id, const sl_lm_t *lm,
                                const sl_optim_t *opt, const sl_lm_state_t *st,
                                const sl_sync_t *sync, sl_ckpt_cursor_t *cur, int *damaged);

/* A file taken apart, for using the model it holds (sl_checkpoint_inspect). */
typedef struct {
    int version;        /* format version */
    int train_state;    /* 1: a checkpoint (optimizer and hidden state), 0: a model file */
    sl_ckpt_ident_t id; /* as the header says: corpus hash, architecture, optimizer, batch
                           shape, nodes, rank, sync (total_steps 0, meta NULL) */
    sl_ckpt_cursor_t cur;
    uint64_t nparams;
    int has_meta;         /* 0: a file of version 3 or older, or one saved without */
    sl_model_meta_t meta; /* when has_meta; sl_checkpoint_info_fini frees it */
} sl_ckpt_info_t;

/* Checks the file's structure as sl_checkpoint_load does (magic, version, sizes,
 * checksum, counters) and decodes its header and metadata section into *info, loading
 * no parameters. Errors are one line starting with the path: those of
 * sl_checkpoint_load for the file itself, and sl_model_meta_decode's. */
sl_status_t sl_checkpoint_inspect(const char *path, sl_ckpt_info_t *info);
void sl_checkpoint_info_fini(sl_ckpt_info_t *info);

/* <path>.prev into out (size bytes); SL_ERR_INVALID when it does not fit. */
sl_status_t sl_checkpoint_prev_path(const char *path, char *out, size_t size);

#endif
