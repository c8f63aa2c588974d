/* Export of a trained model to the safetensors format, with a JSON file of its
 * vocabulary and configuration (doc/export.md), and import of such weights into a new
 * run (shoal train --init). The tensors and their names are sl_model_tensors.h's. */
#ifndef SL_EXPORT_H
#define SL_EXPORT_H

#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"

#define SL_EXPORT_PATH_MAX 4096

/* The JSON file that goes with the weights file out: out less its ".safetensors" plus
 * ".json" ("m.safetensors" -> "m.json"), else out plus ".json". SL_ERR_INVALID when it
 * does not fit size bytes. */
sl_status_t sl_export_json_path(const char *out, char *buf, size_t size);

typedef struct {
    long step;      /* the model file's step */
    int vocab;      /* V, specials included */
    int tensors;    /* tensors written */
    size_t nparams; /* parameters */
    char json[SL_EXPORT_PATH_MAX];
} sl_export_result_t;

/* Writes the parameters of model (a model or checkpoint file of format version 4 with
 * its metadata) to out as safetensors, and the JSON file (sl_export_json_path): the
 * vocabulary in id order, the data and model settings, the evaluation's streams and
 * bptt, the step, the run's name, all from the file itself (no configuration, no
 * corpus); version is shoal's, written into both. Both files are written atomically.
 * Errors: the model file's (sl_model_file_open's, SL_ERR_FORMAT also for a file without
 * metadata), SL_ERR_IO writing. */
sl_status_t sl_export_self_contained(const char *model, const char *out, const char *version,
                                     sl_export_result_t *res);

/* The same for a file without metadata (format versions 1 to 3), with the vocabulary of
 * the corpus that cfg (borrowed, validated) names, as shoal eval takes it, and cfg's
 * settings; the model file must fit them. For a version 4 file of the run of cfg both
 * give the same two files. Errors: the corpus's (SL_ERR_IO, ...), the model file's
 * (sl_checkpoint_load's SL_ERR_FORMAT), SL_ERR_IO writing. */
sl_status_t sl_export_safetensors(const sl_config_t *cfg, const char *model, const char *out,
                                  const char *version, sl_export_result_t *res);

/* Loads the weights of the safetensors file path into lm (built for cfg with a
 * vocabulary of vocab, on be; both borrowed): every tensor sl_lm_tensors names must be
 * there, in F32 and of the shape cfg's model has, and no other (rnns.L.bias_hh_l0 is
 * added to rnns.L.bias_ih_l0: PyTorch's two biases, shoal's one). Every failure is one
 * line starting with path, and changes nothing: SL_ERR_IO unreadable, SL_ERR_FORMAT a
 * bad file (sl_st_read) or a tensor missing, extra, of another dtype or shape. */
sl_status_t sl_import_safetensors(const char *path, const sl_config_t *cfg, int vocab,
                                  sl_backend_t *be, sl_lm_t *lm);

#endif
