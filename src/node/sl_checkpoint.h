/* Checkpoints and model files: one little-endian binary file, written atomically and
 * validated completely before anything in memory changes.
 *
 * Layout (version 1):
 *   header (192 bytes)  magic "SHOALCKP", u32 version, u32 flags, u64 corpus hash,
 *                       u64 architecture hash, u32 vocab, embedding, layers, optimizer,
 *                       u32 hidden[8], projection[8], batch, bptt,
 *                       u64 nparams, optimizer floats, state floats,
 *                       i64 step, epoch, batch index, optimizer steps, u64 tokens,
 *                       f64 train time (s)
 *   f32 params[nparams], f32 optimizer state[], f32 hidden state[]
 *   u64 checksum        sl_hash of every byte before it
 * A checkpoint (flags & SL_CKPT_TRAIN_STATE) carries the optimizer and hidden state so
 * that training continues exactly; a model file carries the parameters only. */
#ifndef SL_CHECKPOINT_H
#define SL_CHECKPOINT_H

#include <stdint.h>

#include "sl_backend.h"
#include "sl_config.h"
#include "sl_model.h"
#include "sl_optim.h"
#include "sl_status.h"

#define SL_CKPT_MAGIC "SHOALCKP"
#define SL_CKPT_VERSION 1
#define SL_CKPT_HEADER_BYTES 192
#define SL_CKPT_TRAIN_STATE 1u /* flags: optimizer and hidden state present */

/* What a file must match to be loaded: the data, the architecture, and (for training
 * state) the optimizer and the shape of the hidden state and data cursor. */
typedef struct {
    uint64_t corpus_hash; /* sl_corpus_t.hash */
    int vocab;            /* V, specials included */
    int embedding;        /* E */
    int nlayers;
    sl_layer_config_t layers[SL_MAX_LAYERS];
    sl_opt_kind_t optimizer;
    int batch, bptt; /* of the training run */
} sl_ckpt_ident_t;

/* Where training stands. */
typedef struct {
    long step;           /* steps taken (the next step's 0-based index) */
    int epoch;           /* 0-based epoch of the next step */
    long batch_index;    /* next batch within that epoch */
    uint64_t tokens;     /* training tokens seen */
    double train_time_s; /* time in training steps so far, eval excluded */
} sl_ckpt_cursor_t;

void sl_ckpt_ident_init(sl_ckpt_ident_t *id, const sl_config_t *cfg, int vocab,
                        uint64_t corpus_hash);
/* Hash of vocab, embedding and the layer sizes: equal iff the parameters fit. */
uint64_t sl_ckpt_arch_hash(const sl_ckpt_ident_t *id);
/* "vocab 502, embedding 16, 2 layers of 256" (LSTMP layers as "2048/512"). */
void sl_ckpt_describe_arch(const sl_ckpt_ident_t *id, char *buf, size_t size);

/* Writes path atomically (temp file, fsync, rename): a crash leaves the old file.
 * opt and st are both given (a checkpoint) or both NULL (a model file). lm and be are
 * borrowed; parameters are copied to the host in one staging buffer. */
sl_status_t sl_checkpoint_save(const char *path, const sl_ckpt_ident_t *id,
                               const sl_ckpt_cursor_t *cur, sl_backend_t *be, sl_lm_t *lm,
                               const sl_optim_t *opt, const sl_lm_state_t *st);

/* Reads and validates path against id, then loads the parameters into lm and, when opt
 * and st are given, the optimizer state, the hidden state and *cur (cur may be NULL).
 * opt and st NULL: parameters only (evaluation); a checkpoint or a model file.
 * Every failure is one line starting with the path, and changes nothing:
 *   SL_ERR_IO      unreadable file
 *   SL_ERR_FORMAT  bad magic, unsupported version, truncated, checksum mismatch,
 *                  different model / corpus / optimizer / batch shape, no training state */
sl_status_t sl_checkpoint_load(const char *path, const sl_ckpt_ident_t *id, sl_backend_t *be,
                               sl_lm_t *lm, sl_optim_t *opt, sl_lm_state_t *st,
                               sl_ckpt_cursor_t *cur);

#endif
