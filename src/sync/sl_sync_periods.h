/* The periods H_i of a node's components, from sync.period, sync.embedding_period and
 * the sync.periods rules; part of the sync object (sl_sync.c). */
#ifndef SL_SYNC_PERIODS_H
#define SL_SYNC_PERIODS_H

#include "config/sl_config.h"
#include "sync/sl_sync_common.h"

/* *period (allocated, e->ncomps): H_i of every component: the period of the first
 * sync.periods rule whose glob matches its name, else sync.embedding_period (0:
 * sync.period) for a row shard and sync.period for the others. A rule that gives no
 * component its period, because its glob matches none or only components an earlier
 * rule took, is a mistake in the config (a typo, or a catch-all put first):
 * SL_ERR_CONFIG naming it. */
sl_status_t sl_sync_periods_resolve(const sl_sync_env_t *e, const sl_config_t *cfg, int **period);

/* Once, on rank 0, when sync.periods is given: which components sync how often (the
 * periods p), or that allreduce has no periods. */
sl_status_t sl_sync_periods_log(const sl_sync_env_t *e, const sl_config_t *cfg, const int *p);

#endif
