/* The CUDA backend's module, shoal-cuda.so, found and loaded with dlopen when a run asks
 * for a GPU, so that shoal itself links no CUDA library: a CPU run never maps the CUDA
 * runtime or cuBLAS, and a machine without them runs everything but device: cuda.
 * Built only with configure's CUDA; kernels/sl_backend.c is its only caller.
 *
 * Where the module is: $SHOAL_MODULE_PATH/shoal-cuda.so when that variable is set;
 * else beside the running program when it is there (a build tree builds shoal and
 * shoal-cuda.so side by side); else the installed one in $(pkglibdir). A program that
 * links the module's objects itself (the CUDA test programs) uses those. */
#ifndef SL_CUDA_LOADER_H
#define SL_CUDA_LOADER_H

#include <stddef.h>

#include "common/sl_status.h"
#include "kernels/sl_backend.h"

#define SL_CUDA_MODULE_FILE "shoal-cuda.so" /* the name kernels/Makemodule.am builds */

/* The backend on CUDA device `device` (the module's sl_backend_cuda_new), loading the
 * module on first use. SL_ERR_DEVICE with one line "device 'cuda:N': ..." when the
 * module is missing, does not load (dlerror's text: the library it lacks), or comes
 * from another build; else the constructor's errors ("no GPU: ..."). */
sl_status_t sl_cuda_loader_backend_new(sl_backend_t **out, int device);

/* One line for shoal --version into buf: the module's path and the GPU code it carries,
 * or why it cannot be used. Loads the module and the CUDA libraries without starting
 * CUDA (no GPU needed). */
void sl_cuda_loader_describe(char *buf, size_t size);

#endif
