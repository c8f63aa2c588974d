/* What shoal-cuda.so offers the program that loads it, the module table (sl_cuda.h),
 * and the count of devices, whose failures it puts in words a user can act on. */
#include "config.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "common/sl_status.h"
#include "kernels/cuda/sl_cuda.h"
#include "kernels/sl_backend.h"
}

extern "C" const sl_cuda_module_t sl_cuda_module = {
    PACKAGE_VERSION, sizeof(sl_backend_ops_t), SL_CUDA_ARCHS, CUDART_VERSION, sl_backend_cuda_new,
};

/* Why cudaGetDeviceCount failed. The runtime reports a machine without the NVIDIA driver
 * as one with an old driver (cudaErrorInsufficientDriver, driver version 0), so for that
 * case the driver library itself is looked for and the loader's reason given. */
static void
no_device_reason(cudaError_t e, char *why, size_t size)
{
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    int driver = 0, runtime = 0;
    void *h;

    switch (e) {
    case cudaErrorNoDevice:
        snprintf(why, size, "no GPU: the NVIDIA driver sees no CUDA device%s%s%s (%s)",
                 visible ? " (CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "",
                 visible ? ")" : "", cudaGetErrorName(e));
        return;
    case cudaErrorStubLibrary:
        snprintf(why, size,
                 "no GPU: the libcuda found is the CUDA toolkit's stub, not a driver: take "
                 "the stubs directory out of the library path (%s)",
                 cudaGetErrorName(e));
        return;
    case cudaErrorInsufficientDriver:
        if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
            h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
            if (h == NULL) {
                snprintf(why, size, "no GPU: no NVIDIA driver (%s)", dlerror());
                return;
            }
            dlclose(h);
            snprintf(why, size, "no GPU: the NVIDIA driver answers no version (%s)",
                     cudaGetErrorName(e));
            return;
        }
        cudaRuntimeGetVersion(&runtime);
        snprintf(why, size,
                 "the NVIDIA driver supports CUDA %d.%d, older than this build's runtime "
                 "%d.%d: update the driver (%s)",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
                 cudaGetErrorName(e));
        return;
    default:
        snprintf(why, size, "CUDA cannot count the devices: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
    }
}

sl_status_t
sl_cuda_device_count(int *count)
{
    cudaError_t e = cudaGetDeviceCount(count);
    char why[384];

    if (e == cudaSuccess)
        return SL_OK;
    *count = 0;
    cudaGetLastError();
    no_device_reason(e, why, sizeof why);
    return sl_err_set(SL_ERR_DEVICE, "%s", why);
}
