/* The shared-memory link (sl_link.h): frames of at least SL_TRANSPORT_SHM_MIN_BYTES to a
 * peer on the same machine go through a lane (sl_shm_lane.h) once the peer has mapped
 * it; everything else goes on through the ZeroMQ base link. Serves every peer while
 * sl_transport_opts_t.shm is set, none otherwise (it then still refuses offers). */
#ifndef SL_LINK_SHM_H
#define SL_LINK_SHM_H

#include "transport/sl_link.h"

extern const sl_link_ops_t sl_link_shm_ops;

#endif
