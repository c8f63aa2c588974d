/* The deterministic gossip schedule (gossip-BMUF paper, Algorithm 1 line 6: "randomly
 * choose q neighbours"). At round r of component c, node i pulls from q of its
 * neighbours on the k-symmetric ring, drawn uniformly without replacement by the
 * counter-based RNG keyed by sl_hash_u64s({seed, r, c, i}). The choice is a pure
 * function of (seed, n, k, q, r, c, i), so every node can evaluate every neighbour's
 * choice: node i knows without any message which nodes will pull from it (its
 * "pullers") and pushes its snapshot to exactly those. q is capped at the number of
 * links; q >= links (e.g. q = 2k) is the local-* case: every neighbour, no randomness.
 * How the q are drawn (selection sampling over a fixed walk order, sl_schedule.c) is
 * part of the protocol: every node must run this same code. No function here
 * allocates except sl_schedule_stats. */
#ifndef SL_SCHEDULE_H
#define SL_SCHEDULE_H

#include <stdint.h>

#include "common/sl_status.h"

/* Filled by sl_schedule_init; read-only afterwards. */
typedef struct {
    int nodes;      /* n */
    int degree;     /* k, the symmetric degree of the ring */
    int neighbours; /* q as asked for */
    int links;      /* neighbours of each node: min(2k, n-1) */
    int picks;      /* neighbours each node pulls from per round: min(q, links) */
    uint64_t seed;  /* run seed */
} sl_schedule_t;

/* Checks and records the parameters. SL_ERR_INVALID (message says which) when n is
 * outside [1, SL_RING_MAX_NODES], k < 1 or q < 1. */
sl_status_t sl_schedule_init(sl_schedule_t *s, int n, int k, int q, uint64_t seed);

/* The neighbours node pulls from at (round, component), ascending, into
 * out[0..*count) with *count == s->picks; cap must be at least s->picks.
 * SL_ERR_INVALID for a node outside 0..n-1, component < 0 or cap too small. */
sl_status_t sl_schedule_chosen(const sl_schedule_t *s, uint64_t round, int component, int node,
                               int *out, int cap, int *count);

/* The nodes that pull from node at (round, component), i.e. that chose it, ascending:
 * node pushes its snapshot to exactly these. Between 0 and s->links of them; cap must be
 * at least s->links. Errors as sl_schedule_chosen. */
sl_status_t sl_schedule_pullers(const sl_schedule_t *s, uint64_t round, int component, int node,
                                int *out, int cap, int *count);

/* Load balance of the schedule over rounds first..first+rounds-1 of one component.
 * Every node pulls from s->picks nodes each round (its out-degree); how many pull from
 * a node (its in-degree, the pushes it sends) varies. */
typedef struct {
    int rounds;        /* rounds counted */
    int out_degree;    /* pulls per node per round: s->picks */
    int in_min;        /* fewest pullers of any node in any round */
    double in_mean;    /* mean pullers per node and round (equals out_degree: every pull
                          is one push) */
    int in_max;        /* most pullers of any node in any round */
    long total_min;    /* fewest pushes one node sends over all the rounds */
    double total_mean; /* mean pushes per node over all the rounds (rounds * picks) */
    long total_max;    /* most pushes one node sends over all the rounds */
} sl_schedule_stats_t;

/* Fills *st; rounds >= 1. Costs O(rounds * n * links) time and O(n) memory.
 * SL_ERR_INVALID for rounds < 1 or component < 0, SL_ERR_NOMEM. */
sl_status_t sl_schedule_stats(const sl_schedule_t *s, int component, uint64_t first, int rounds,
                              sl_schedule_stats_t *st);

#endif
