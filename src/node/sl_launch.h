/* Launching the nodes of a run: one node's life (sl_node.h: sl_node_run, whatever
 * started the node) and the `shoal run` supervisor that forks and watches the nodes of
 * one machine (sl_supervisor.h: sl_launch_run). Callers that need both include this. */
#ifndef SL_LAUNCH_H
#define SL_LAUNCH_H

#include "node/sl_node.h"
#include "node/sl_supervisor.h"

#endif
