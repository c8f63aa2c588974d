/* Staggered sync phases (sync.stagger; Streaming DiLoCo's fragments): which steps are a
 * component's sync points and which round each one is, so that components of one period
 * do not all sync at the same step.
 *
 * Component c of period H_i and phase p_c syncs after the steps t >= 1 with
 * (t + p_c) mod H_i = 0, as block (round) (t + p_c) / H_i. Without stagger every p_c is 0:
 * t mod H_i = 0 at round t / H_i, the schedule of every run before the key existed. With
 * it, the m components of one period H, the j-th of them (j = 0..m-1, in component
 * order), get p = floor(j H / m): the phases spread evenly over 0..H-1, components that
 * share one (m > H) stay neighbours, and the first of each period keeps phase 0. The
 * phases are a function of the periods and the component order, both from the shared
 * config and the model, so every node computes the same ones without a message. */
#ifndef SL_SYNC_PHASE_H
#define SL_SYNC_PHASE_H

#include "model/sl_model.h"

/* phase[c] (ncomps, the caller's) for the components of periods period[c] (>= 1): all 0
 * when stagger is 0, else spread per period as above. */
void sl_sync_phases(const int *period, int ncomps, int stagger, int *phase);

/* Whether step t (steps done) is a sync point of a component of period h and phase p. */
int sl_sync_phase_point(long t, int h, int p);

/* The round of that sync point: (t + p) / h, 1 for the first one. */
long sl_sync_phase_round(long t, int h, int p);
/* The step of round's sync point, the inverse: round h - p. */
long sl_sync_phase_step(long round, int h, int p);

/* Once, on rank 0, when stagger is on: the phases per period (info: "sync.stagger: every
 * 16 steps: lstm.0 +0, lstm.1 +8"). */
void sl_sync_phases_log(const sl_component_t *comps, const int *period, const int *phase,
                        int ncomps);

#endif
