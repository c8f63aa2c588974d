/* Finding and loading the CUDA module, shoal-cuda.so (sl_cuda_loader.h). */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/sl_cuda.h"
#include "kernels/sl_cuda_loader.h"

/* The CUDA test programs link the module's objects to reach its internals: then the
 * table is in the program and this weak reference finds it. In shoal it is NULL. */
extern const sl_cuda_module_t sl_cuda_module __attribute__((weak));

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const sl_cuda_module_t *loaded; /* kept for the process's life once loaded */
static char loaded_from[PATH_MAX + 32];

/* The module's path into path, and into *from where that came from. */
static void
module_path(char *path, size_t size, const char **from)
{
    const char *dir = getenv("SHOAL_MODULE_PATH");
    char exe[PATH_MAX];
    ssize_t n;
    char *slash;

    if (dir != NULL && dir[0] != '\0') {
        snprintf(path, size, "%s/%s", dir, SL_CUDA_MODULE_FILE);
        *from = "from SHOAL_MODULE_PATH";
        return;
    }
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            snprintf(path, size, "%s/%s", exe, SL_CUDA_MODULE_FILE);
            *from = "beside the program";
            if (access(path, F_OK) == 0)
                return;
        }
    }
    snprintf(path, size, "%s/%s", SHOAL_PKGLIBDIR, SL_CUDA_MODULE_FILE);
    *from = "installed";
}

/* dlopen and the checks that the module is of this build; path gets where it was. A
 * module is never closed once taken: the CUDA runtime inside lives until exit. */
static sl_status_t
open_module(char *path, size_t size, const sl_cuda_module_t **out)
{
    const sl_cuda_module_t *m;
    const char *from;
    void *h;

    if (&sl_cuda_module != NULL) {
        snprintf(path, size, "linked into the program");
        *out = &sl_cuda_module;
        return SL_OK;
    }
    module_path(path, size, &from);
    if (access(path, F_OK) != 0)
        return sl_err_set(SL_ERR_DEVICE,
                          "no CUDA module at %s (%s): %s; install shoal's CUDA module or set "
                          "SHOAL_MODULE_PATH to the directory that holds %s",
                          path, from, strerror(errno), SL_CUDA_MODULE_FILE);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return sl_err_set(SL_ERR_DEVICE, "the CUDA module %s does not load: %s", path, dlerror());
    m = (const sl_cuda_module_t *)dlsym(h, SL_CUDA_MODULE_SYMBOL);
    if (m == NULL) {
        dlclose(h);
        return sl_err_set(SL_ERR_DEVICE, "%s is not shoal's CUDA module (no %s in it)", path,
                          SL_CUDA_MODULE_SYMBOL);
    }
    if (strcmp(m->version, PACKAGE_VERSION) != 0 || m->ops_bytes != sizeof(sl_backend_ops_t)) {
        sl_err_set(SL_ERR_DEVICE,
                   "the CUDA module %s is of another build (shoal %s, %zu-byte op table; this "
                   "is shoal %s, %zu): install this build's, or set SHOAL_MODULE_PATH",
                   path, m->version, m->ops_bytes, PACKAGE_VERSION, sizeof(sl_backend_ops_t));
        dlclose(h);
        return SL_ERR_DEVICE;
    }
    *out = m;
    return SL_OK;
}

/* The module, loaded once; a failure is not kept, so each call says why again. */
static sl_status_t
module(const sl_cuda_module_t **out)
{
    char path[PATH_MAX + 32];
    sl_status_t st = SL_OK;

    pthread_mutex_lock(&lock);
    if (loaded == NULL) {
        st = open_module(path, sizeof path, &loaded);
        if (st == SL_OK)
            snprintf(loaded_from, sizeof loaded_from, "%s", path);
    }
    *out = loaded;
    pthread_mutex_unlock(&lock);
    return st;
}

sl_status_t
sl_cuda_loader_backend_new(sl_backend_t **out, int device)
{
    const sl_cuda_module_t *m;

    *out = NULL;
    if (module(&m) != SL_OK)
        return sl_err_prefix(SL_ERR_DEVICE, "device 'cuda:%d'", device);
    return m->backend_new(out, device);
}

void
sl_cuda_loader_describe(char *buf, size_t size)
{
    const sl_cuda_module_t *m;

    if (module(&m) != SL_OK) {
        snprintf(buf, size, "unusable: %s (this build's GPU code: %s)", sl_err_msg(),
                 SL_CUDA_ARCHS);
        sl_err_clear();
        return;
    }
    snprintf(buf, size, "%s, GPU code %s, CUDA runtime %d.%d", loaded_from, m->archs,
             m->runtime_version / 1000, m->runtime_version % 1000 / 10);
}
