/* The weights a new run starts from (shoal train, run and node --init FILE): a
 * safetensors file (sl_export.h's import) or a shoal model or checkpoint file. A shoal
 * file carries its vocabulary, so its rows of the vocabulary's tensors (encoder.weight,
 * decoder.weight, decoder.bias) are taken word by word: a word of the run's vocabulary
 * that the file has gets the file's row, whatever its id there, and one it lacks keeps
 * its random initialisation (fine-tuning on another corpus). Every other tensor must
 * have the run's shape. */
#ifndef SL_IMPORT_H
#define SL_IMPORT_H

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"

/* Loads the weights of path into lm (built for cfg over vocabulary vocab, on be; all
 * borrowed). *rows: for a shoal file, how many of the vocabulary's words took their
 * rows from it; -1 for a safetensors file (every tensor whole, by shape). Errors, one
 * line starting with path, nothing changed: the file's own (sl_model_file_open's,
 * sl_import_safetensors'), SL_ERR_CONFIG a shoal model of another data.level or of
 * other tensors or shapes than cfg's model. */
sl_status_t sl_import_weights(const char *path, const sl_config_t *cfg, const sl_vocab_t *vocab,
                              sl_backend_t *be, sl_lm_t *lm, int *rows);

#endif
