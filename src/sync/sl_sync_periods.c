/* The periods H_i of a node's components (sl_sync_periods.h). */
#include "sync/sl_sync_periods.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_log.h"

/* Whether name b is the shard after name a: "x.N" then "x.N+1". */
static int
next_shard(const char *a, const char *b)
{
    const char *da = strrchr(a, '.'), *db = strrchr(b, '.');

    if (!da || !db || da - a != db - b || strncmp(a, b, (size_t)(da - a)) != 0)
        return 0;
    if (!da[1] || !db[1] || strspn(da + 1, "0123456789") != strlen(da + 1) ||
        strspn(db + 1, "0123456789") != strlen(db + 1))
        return 0;
    return atol(db + 1) == atol(da + 1) + 1;
}

/* "embedding.0 to embedding.7, lstm.0, lstm.1" into buf (n bytes, cut when full): the
 * names of the components c with pick[c] != 0, a run of three or more shards of one
 * table as its first and last, so that 1024 shards still make a short message. */
static void
list_names(const sl_sync_env_t *e, const unsigned char *pick, char *buf, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int c = 0; c < e->ncomps && used < n; c++) {
        int last = c;
        const char *sep = used ? ", " : "";

        if (!pick[c])
            continue;
        while (last + 1 < e->ncomps && pick[last + 1] &&
               next_shard(e->comps[last].name, e->comps[last + 1].name))
            last++;
        if (last - c >= 2) {
            used += (size_t)snprintf(buf + used, n - used, "%s%s to %s", sep, e->comps[c].name,
                                     e->comps[last].name);
            c = last;
        } else {
            used += (size_t)snprintf(buf + used, n - used, "%s%s", sep, e->comps[c].name);
        }
    }
}

sl_status_t
sl_sync_periods_resolve(const sl_sync_env_t *e, const sl_config_t *cfg, int **period)
{
    int nrules = cfg->sync.nperiod_rules;
    int emb = cfg->sync.embedding_period > 0 ? cfg->sync.embedding_period : cfg->sync.period;
    unsigned char used[SL_MAX_PERIOD_RULES] = {0}, *pick;
    char names[640];
    int *p;
    sl_status_t st = SL_OK;

    if (nrules < 0 || nrules > SL_MAX_PERIOD_RULES)
        return sl_err_set(SL_ERR_CONFIG, "sync.periods: %d rules, at most %d allowed", nrules,
                          SL_MAX_PERIOD_RULES);
    SL_TRY(SL_ALLOC(period, (size_t)e->ncomps, "sync periods"));
    p = *period;
    for (int c = 0; c < e->ncomps; c++) {
        p[c] = e->comps[c].sparse ? emb : cfg->sync.period;
        for (int r = 0; r < nrules; r++) {
            const sl_period_rule_t *rule = &cfg->sync.period_rule[r];
            if (rule->match && fnmatch(rule->match, e->comps[c].name, 0) == 0) {
                p[c] = rule->period;
                used[r] = 1;
                break;
            }
        }
        if (p[c] < 1)
            return sl_err_set(SL_ERR_CONFIG,
                              "sync: component %s would sync every %d steps: "
                              "periods must be at least 1",
                              e->comps[c].name, p[c]);
    }
    for (int r = 0; r < nrules && st == SL_OK; r++) {
        const char *glob = cfg->sync.period_rule[r].match;
        int any = 0;

        if (used[r])
            continue;
        SL_TRY(SL_CALLOC(&pick, (size_t)e->ncomps, "sync periods"));
        for (int c = 0; c < e->ncomps; c++) {
            pick[c] = glob && fnmatch(glob, e->comps[c].name, 0) == 0;
            any |= pick[c];
        }
        if (any) {
            list_names(e, pick, names, sizeof names);
            st = sl_err_set(SL_ERR_CONFIG,
                            "sync.periods[%d]: '%s' matches only components that an earlier "
                            "rule gives a period (%s); put the more specific rule first",
                            r, glob, names);
        } else {
            memset(pick, 1, (size_t)e->ncomps);
            list_names(e, pick, names, sizeof names);
            st = sl_err_set(SL_ERR_CONFIG,
                            "sync.periods[%d]: '%s' matches no component (the model's: %s)", r,
                            glob ? glob : "", names);
        }
        sl_free(pick);
    }
    return st;
}

sl_status_t
sl_sync_periods_log(const sl_sync_env_t *e, const sl_config_t *cfg, const int *p)
{
    unsigned char *pick;
    char line[1536], names[640];
    size_t used = 0;

    if (cfg->sync.nperiod_rules == 0 || e->rank != 0 || e->algo == SL_SYNC_NONE)
        return SL_OK;
    if (e->algo == SL_SYNC_ALLREDUCE) {
        sl_log_info("sync", "sync.periods is not used by allreduce: it averages the gradients "
                            "of every component every step");
        return SL_OK;
    }
    SL_TRY(SL_ALLOC(&pick, (size_t)e->ncomps, "sync periods"));
    line[0] = '\0';
    for (int c = 0; c < e->ncomps && used < sizeof line; c++) {
        int seen = 0;

        for (int b = 0; b < c; b++)
            seen |= p[b] == p[c];
        if (seen)
            continue;
        for (int d = 0; d < e->ncomps; d++)
            pick[d] = p[d] == p[c];
        list_names(e, pick, names, sizeof names);
        used += (size_t)snprintf(line + used, sizeof line - used, "%severy %d steps: %s",
                                 used ? "; " : "", p[c], names);
    }
    sl_free(pick);
    sl_log_info("sync", "periods H_i (sync.periods): %s", line);
    return SL_OK;
}
