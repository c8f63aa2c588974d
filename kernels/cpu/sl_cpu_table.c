/* One build's table of the CPU loops: compiled with each x86-64 level's flags beside
 * the loops themselves, so that its entries are that level's functions (names
 * suffixed by sl_cpu_loops.h). Only the loop entries are set; sl_cpu.c adds the rest. */
#include "config.h"

#include "kernels/cpu/sl_cpu_loops.h"

const sl_backend_ops_t SL_CPU_ISA_NAME(sl_cpu_loops) = {
    .axpy = sl_cpu_axpy,
    .scale = sl_cpu_scale,
    .copy = sl_cpu_copy,
    .zero = sl_cpu_zero,
    .sumsq = sl_cpu_sumsq,
    .sumsq_blocks = sl_cpu_sumsq_blocks,
    .to_half = sl_cpu_to_half,
    .from_half = sl_cpu_from_half,
    .add_bias = sl_cpu_add_bias,
    .bias_grad = sl_cpu_bias_grad,
    .lstm_cell_forward = sl_cpu_lstm_cell_forward,
    .lstm_cell_backward = sl_cpu_lstm_cell_backward,
    .embedding_gather = sl_cpu_embedding_gather,
    .embedding_scatter_add = sl_cpu_embedding_scatter_add,
    .softmax_xent = sl_cpu_softmax_xent,
    .sampled_softmax_xent = sl_cpu_sampled_softmax_xent,
    .dropout = sl_cpu_dropout,
    .sgd_update = sl_cpu_sgd_update,
    .adagrad_update = sl_cpu_adagrad_update,
    .adam_update = sl_cpu_adam_update,
#ifdef SL_CPU_GEMM_PACKED
    .packed_floats = sl_cpu_packed_floats,
    .pack_b = sl_cpu_pack_b,
    .gemm_packed = sl_cpu_gemm_packed,
#endif
};
