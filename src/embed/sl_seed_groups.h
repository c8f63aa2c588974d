/* Seed groups for sampled softmax (Baidu, "Language Modeling at Scale", section III):
 * nodes are split into groups of contiguous ranks, so that ring neighbours share a
 * group, and all nodes of a group draw the same negatives each step. Fewer groups mean
 * fewer distinct output-embedding rows touched across the cluster (a smaller U_g); the
 * paper finds ceil(n^0.64) groups a good trade-off. */
#ifndef SL_SEED_GROUPS_H
#define SL_SEED_GROUPS_H

#include <stdint.h>

#include "common/sl_status.h"

/* Number of groups for a run of `nodes` nodes (>= 1) and the embedding.seed_groups
 * mode (borrowed string):
 *   "per-node"  nodes (every node its own negatives)
 *   "one"       1 (all nodes share them)
 *   "zipf"      ceil(nodes^0.64)
 *   "log2"      max(1, floor(log2(nodes))), computed exactly on integers: 1 2 3 4 ...
 *               groups from 1, 4, 8, 16 ... nodes
 *   "N"         a decimal count N >= 1: min(N, nodes)
 * Writes *groups (1 <= *groups <= nodes). SL_ERR_INVALID for another mode, a count
 * that is not a positive integer, or nodes < 1. */
sl_status_t sl_seed_groups_count(const char *mode, int nodes, int *groups);

/* The group of `rank` (0 <= rank < nodes) when `nodes` nodes form `groups` groups
 * (1 <= groups <= nodes): contiguous ranks, the first nodes % groups groups one rank
 * larger than the others. -1 for arguments outside those ranges. */
int sl_seed_group_of(int rank, int nodes, int groups);

/* The sampled-softmax key (sl_step_keys_t.sample_key) of training step `step` for the
 * nodes of `group` (>= 0) in a run seeded with `seed`. Group 0's key is
 * sl_hash_u64s({seed, 'S', step}, 3), so a single-node run draws the same negatives
 * whatever the mode; group g > 0 hashes {seed, 'S', step, g}. */
uint64_t sl_seed_group_sample_key(uint64_t seed, long step, int group);

#endif
