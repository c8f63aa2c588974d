/* The CUDA backend's entry points for C: the module table that the registry loads from
 * shoal-cuda.so (kernels/sl_cuda_loader.c), the constructor, and two probes for the
 * tests. Plain C, no CUDA headers; built only with configure's CUDA. */
#ifndef SL_CUDA_H
#define SL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "kernels/sl_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What shoal-cuda.so offers, under the one symbol SL_CUDA_MODULE_SYMBOL. The loader
 * takes it only when version and ops_bytes are its own, so a module of another build
 * is refused rather than called through a table of another shape. */
typedef struct {
    const char *version; /* PACKAGE_VERSION of the build */
    size_t ops_bytes;    /* sizeof(sl_backend_ops_t) in that build */
    const char *archs;   /* the GPU code it carries: "sm_80 sm_90 + PTX compute_90" */
    int runtime_version; /* CUDART_VERSION it was built with: 13000 */
    sl_status_t (*backend_new)(sl_backend_t **out, int device); /* sl_backend_cuda_new */
} sl_cuda_module_t;

#define SL_CUDA_MODULE_SYMBOL "sl_cuda_module"
extern const sl_cuda_module_t sl_cuda_module;

/* The backend on CUDA device `device` (its own stream and cuBLAS handle; fp32 until
 * set_precision). Used through kernels/sl_backend.c ("cuda", "cuda:N"); destroy with
 * sl_backend_destroy. SL_ERR_DEVICE with a message when the device does not exist or
 * CUDA fails (no driver, no GPU); SL_ERR_NOMEM. */
sl_status_t sl_backend_cuda_new(sl_backend_t **out, int device);

/* Number of visible CUDA devices into *count (0 on failure). SL_ERR_DEVICE when the
 * runtime cannot count them, with one line that starts "no GPU: " when there is none to
 * use (no driver installed, the toolkit's stub driver, no device visible) and otherwise
 * names the problem (a driver older than the runtime) and the runtime's error name. */
sl_status_t sl_cuda_device_count(int *count);

/* For the tests: out[i] = sl_rng_float_at(key, i) for i < n, computed by the device's
 * port of the RNG (the one dropout uses). out is device memory of b, a CUDA backend.
 * Returns the status of the launch and the copy-back queue (as sync does). */
sl_status_t sl_cuda_rng_floats(sl_backend_t *b, uint64_t key, size_t n, float *out);

#ifdef __cplusplus
}
#endif

#endif
