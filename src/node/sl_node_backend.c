/* The backend a node trains on (sl_node_backend.h). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_node_backend.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_log.h"
#include "node/sl_launcher_env.h"

/* GPUs this process may use: the entries of CUDA_VISIBLE_DEVICES when it is set, else
 * the /dev/nvidiaN device files; 0 when that cannot be told. */
static int
visible_gpus(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    struct dirent *e;
    DIR *d;
    int n = 0;

    if (v) {
        for (n = *v != '\0'; *v; v++)
            n += *v == ',';
        return n;
    }
    if ((d = opendir("/dev")) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL) {
        const char *num = e->d_name + 6;
        if (strncmp(e->d_name, "nvidia", 6) == 0 && *num &&
            strspn(num, "0123456789") == strlen(num))
            n++;
    }
    closedir(d);
    return n;
}

/* The backend name for cfg->device: "cuda" is the GPU of the node's local rank, modulo
 * the visible GPUs (so nodes share GPUs round robin, and a launcher that gives each
 * task one GPU of its own, CUDA_VISIBLE_DEVICES=<one>, gets cuda:0 everywhere). */
void
sl_node_backend_device(const sl_config_t *cfg, int rank, char *out, size_t size)
{
    const char *from;
    int local, ngpus, index;

    if (strcmp(cfg->device, "cuda") != 0) {
        snprintf(out, size, "%s", cfg->device);
        return;
    }
    local = sl_launcher_local_rank(rank, &from);
    ngpus = visible_gpus();
    index = ngpus > 0 ? local % ngpus : local;
    snprintf(out, size, "cuda:%d", index);
    sl_log_debug("train", "device cuda: GPU %d (%s %d, %d GPUs visible)", index, from, local,
                 ngpus);
}

/* cfg->precision (validated: fp32, bf16 or fp16) as the backend's enum. */
static sl_precision_t
precision_of(const char *name)
{
    if (strcmp(name, "bf16") == 0)
        return SL_PREC_BF16;
    if (strcmp(name, "fp16") == 0)
        return SL_PREC_FP16;
    return SL_PREC_FP32;
}

sl_status_t
sl_node_backend_open(const sl_config_t *cfg, int rank, sl_backend_t **be)
{
    char name[64];

    sl_node_backend_device(cfg, rank, name, sizeof name);
    SL_TRY(sl_backend_new(be, name, cfg->run.threads));
    return (*be)->ops->set_precision((*be)->ctx, precision_of(cfg->precision));
}
