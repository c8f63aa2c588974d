/* A model file opened for use: its header and metadata (vocabulary, data settings,
 * configuration, provenance), a backend, and the model with its parameters loaded,
 * without the training corpus. For shoal score, sample and eval. */
#ifndef SL_MODEL_FILE_H
#define SL_MODEL_FILE_H

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "node/sl_checkpoint.h"

/* Streams the model is built for: as many as evaluation uses (EVAL_BATCH). */
#define SL_MODEL_FILE_STREAMS 10

typedef struct {
    const char *path;        /* borrowed */
    sl_ckpt_info_t info;     /* header and metadata (info.has_meta is 1) */
    sl_config_t cfg;         /* defaults with the file's data and model settings */
    const sl_vocab_t *vocab; /* the file's, id order (info.meta's) */
    sl_level_t level;
    sl_backend_t *be;
    sl_lm_t *lm; /* parameters loaded; up to SL_MODEL_FILE_STREAMS streams
                    of up to cfg.train.bptt steps */
} sl_model_file_t;

/* Opens the model or checkpoint file at path (borrowed; must outlive m) on device
 * ("cpu", "cuda", "cuda:N"; NULL: cpu) with threads compute threads (0: every core),
 * for windows of up to bptt steps (0: the training run's train.bptt). Errors, one line
 * starting with the path: the file's own (sl_checkpoint_inspect), SL_ERR_FORMAT "no
 * vocabulary in this model file (...)" for a file written before version 4 (shoal eval
 * evaluates it with its training corpus), the model's for the file's sizes (sl_lm_new);
 * and the backend's for device, as it says them. m is zeroed on error. */
sl_status_t sl_model_file_open(sl_model_file_t *m, const char *path, const char *device,
                               int threads, int bptt);
/* Frees everything m holds (safe on a zeroed m, and twice). */
void sl_model_file_close(sl_model_file_t *m);

/* "the model's own (502 entries, word level)" into buf: how shoal names the
 * vocabulary it uses. */
void sl_model_file_describe_vocab(const sl_model_file_t *m, char *buf, size_t size);

#endif
