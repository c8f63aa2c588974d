/* The k-symmetric ring of the gossip-BMUF paper (Definition 1): node i of n is linked to
 * i-1..i-k and i+1..i+k (mod n). When n <= 2k those offsets wrap onto each other; the
 * neighbour set is then the distinct nodes other than i, so every node always has
 * min(2k, n-1) neighbours ("links") and the relation is symmetric (j is a neighbour of
 * i exactly when i is one of j). Pure functions of (n, k, i): nothing is allocated. */
#ifndef SL_RING_H
#define SL_RING_H

#include "common/sl_status.h"

#define SL_RING_MAX_NODES (1 << 20) /* more ranks than any run will have */

/* The default symmetric degree for n nodes, the paper's p = log2(n) - 1:
 * max(1, floor(log2 n) - 1), so 1 for n <= 7, 2 for 8..15, 3 for 16..31. n < 1 gives 1. */
int sl_ring_default_degree(int n);

/* Number of distinct neighbours of each node, min(2k, n-1), into *links.
 * SL_ERR_INVALID when n is outside [1, SL_RING_MAX_NODES] or k < 1. */
sl_status_t sl_ring_links(int n, int k, int *links);

/* The neighbours of node i in ascending order into out[0..*count); cap is out's length
 * and must be at least the number of links. SL_ERR_INVALID for bad n, k, i, cap. */
sl_status_t sl_ring_neighbours(int n, int k, int i, int *out, int cap, int *count);

/* 1 when j is a neighbour of i (circular distance between 1 and k), else 0. Arguments
 * are assumed checked (0 <= i, j < n). */
int sl_ring_is_neighbour(int n, int k, int i, int j);

#endif
