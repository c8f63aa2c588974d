/* The CUDA backend's entry points for C: the constructor the registry calls and two
 * probes for the tests. Plain C, no CUDA headers; built only with configure's CUDA. */
#ifndef SL_CUDA_H
#define SL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "kernels/sl_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend on CUDA device `device` (its own stream and cuBLAS handle; fp32 until
 * set_precision). Used through kernels/sl_backend.c ("cuda", "cuda:N"); destroy with
 * sl_backend_destroy. SL_ERR_DEVICE with a message when the device does not exist or
 * CUDA fails (no driver, no GPU); SL_ERR_NOMEM. */
sl_status_t sl_backend_cuda_new(sl_backend_t **out, int device);

/* Number of visible CUDA devices into *count (0 on failure). SL_ERR_DEVICE, with the
 * runtime's reason ("no CUDA-capable device is detected", an old driver), when the
 * runtime cannot count them. */
sl_status_t sl_cuda_device_count(int *count);

/* For the tests: out[i] = sl_rng_float_at(key, i) for i < n, computed by the device's
 * port of the RNG (the one dropout uses). out is device memory of b, a CUDA backend.
 * Returns the status of the launch and the copy-back queue (as sync does). */
sl_status_t sl_cuda_rng_floats(sl_backend_t *b, uint64_t key, size_t n, float *out);

#ifdef __cplusplus
}
#endif

#endif
