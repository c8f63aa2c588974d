/* The backend a node trains on: cfg->device ("cpu", "cuda", "cuda:N") at cfg->precision.
 * "cuda" is the GPU of the node's local rank (sl_launcher_env.h) modulo the visible
 * GPUs (CUDA_VISIBLE_DEVICES, else the /dev/nvidiaN files). */
#ifndef SL_NODE_BACKEND_H
#define SL_NODE_BACKEND_H

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"

/* The backend of cfg->device for node rank, set to cfg->precision (the backend's
 * message when it cannot: cpu is fp32 only). */
sl_status_t sl_node_backend_open(const sl_config_t *cfg, int rank, sl_backend_t **be);
/* The backend name sl_node_backend_open opens for node rank ("cpu", "cuda:1") into out
 * (size bytes): for the map of the run (sl_node_census.h). */
void sl_node_backend_device(const sl_config_t *cfg, int rank, char *out, size_t size);

#endif
