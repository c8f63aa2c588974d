/* The model's parameters as named tensors, for export to and import from other
 * frameworks (doc/export.md). The names are those of a PyTorch module
 *   encoder = nn.Embedding(V, E)
 *   rnns    = nn.ModuleList(nn.LSTM(in_l, H_l, proj_size=P_l) for each layer l)
 *   decoder = nn.Linear(R, V)
 * so that its state_dict loads them as they are:
 *   encoder.weight            (V, E)
 *   rnns.<l>.weight_ih_l0     (4H, in)   gates i, f, g, o
 *   rnns.<l>.weight_hh_l0     (4H, R)
 *   rnns.<l>.bias_ih_l0       (4H)       shoal's one bias b
 *   rnns.<l>.bias_hh_l0       (4H)       zeros: shoal has one bias (b = b_ih + b_hh)
 *   rnns.<l>.weight_hr_l0     (P, H)     LSTMP layers only
 *   decoder.weight            (V, R)
 *   decoder.bias              (V)
 * where in is E for layer 0 and the previous layer's R above, R = P with a projection,
 * else H. Each tensor is a view of the flat parameter buffer (sl_model.h), row-major. */
#ifndef SL_MODEL_TENSORS_H
#define SL_MODEL_TENSORS_H

#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

#define SL_LM_MAX_TENSORS (3 + 5 * SL_MAX_LAYERS)

typedef struct {
    char name[48];
    int ndim;        /* 1 or 2 */
    size_t shape[2]; /* rows, columns (ndim 1: shape[0] only) */
    size_t offset;   /* first element in the flat buffer */
    size_t count;    /* elements */
    int zeros;       /* 1: not a parameter of shoal (bias_hh): zeros on export, added to the
                        bias (the tensor before it) on import; offset is the bias's */
} sl_lm_tensor_t;

/* The tensors of the model cfg describes with a vocabulary of vocab, in the order of
 * the flat buffer, into t (room for SL_LM_MAX_TENSORS); their number in *n and the
 * buffer's size in *nparams (sl_lm_nparams of that model). SL_ERR_INVALID as
 * sl_lm_layout for sizes out of range. */
sl_status_t sl_lm_tensors(const sl_config_t *cfg, int vocab, sl_lm_tensor_t *t, int *n,
                          size_t *nparams);

#endif
