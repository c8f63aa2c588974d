/* Values of schema keys: reading and writing a key's field in sl_config_t, formatting
 * it as text, the derived defaults, and the check of a value against its key's type,
 * bounds and names. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/sl_config.h"
#include "config/sl_config_internal.h"

void *
sl_config_slot(const sl_config_t *cfg, const entry_t *e)
{
    return (char *)cfg + e->off;
}

/* Moves v into the field (a string is taken over, the old one freed). */
void
sl_config_store(sl_config_t *cfg, const entry_t *e, value_t *v)
{
    void *p = sl_config_slot(cfg, e);

    switch (e->type) {
    case T_STR: {
        char **sp = p;
        SL_ASSERT(e->size == sizeof(char *));
        free(*sp);
        *sp = v->s;
        v->s = NULL;
        break;
    }
    case T_INT:
    case T_BOOL:
    case T_ENUM: {
        int x = (int)v->i;
        SL_ASSERT(e->size == sizeof x);
        memcpy(p, &x, sizeof x);
        break;
    }
    case T_LONG: {
        long x = (long)v->i;
        SL_ASSERT(e->size == sizeof x);
        memcpy(p, &x, sizeof x);
        break;
    }
    case T_U64:
        SL_ASSERT(e->size == sizeof v->u);
        memcpy(p, &v->u, sizeof v->u);
        break;
    case T_DOUBLE:
        SL_ASSERT(e->size == sizeof v->d);
        memcpy(p, &v->d, sizeof v->d);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"lists are stored by apply_layers and apply_periods");
    }
}

/* The field's value (a string is borrowed). */
value_t
sl_config_fetch(const sl_config_t *cfg, const entry_t *e)
{
    const void *p = sl_config_slot(cfg, e);
    value_t v = {0};

    switch (e->type) {
    case T_STR:
        memcpy(&v.s, p, sizeof v.s);
        break;
    case T_INT:
    case T_BOOL:
    case T_ENUM: {
        int x;
        memcpy(&x, p, sizeof x);
        v.i = x;
        break;
    }
    case T_LONG: {
        long x;
        memcpy(&x, p, sizeof x);
        v.i = x;
        break;
    }
    case T_U64:
        memcpy(&v.u, p, sizeof v.u);
        break;
    case T_DOUBLE:
        memcpy(&v.d, p, sizeof v.d);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"lists have no scalar value");
    }
    return v;
}

int
sl_config_values_equal(const entry_t *e, const value_t *a, const value_t *b)
{
    switch (e->type) {
    case T_STR:
        return a->s && b->s && strcmp(a->s, b->s) == 0;
    case T_U64:
        return a->u == b->u;
    case T_DOUBLE:
        return a->d == b->d;
    default:
        return a->i == b->i;
    }
}

/* The shortest %g text that reads back as the same double. */
void
sl_config_format_double(double d, char *buf, size_t n)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

/* The value as text (strings raw, unquoted). */
void
sl_config_format_value(const entry_t *e, const value_t *v, char *buf, size_t n)
{
    switch (e->type) {
    case T_STR:
        snprintf(buf, n, "%s", v->s ? v->s : "");
        break;
    case T_INT:
    case T_LONG:
        if (e->auto_ok && v->i == SL_CONFIG_AUTO_INT)
            snprintf(buf, n, "auto");
        else
            snprintf(buf, n, "%lld", v->i);
        break;
    case T_U64:
        snprintf(buf, n, "%" PRIu64, v->u);
        break;
    case T_DOUBLE:
        if (e->auto_ok && v->d == SL_CONFIG_AUTO)
            snprintf(buf, n, "auto");
        else
            sl_config_format_double(v->d, buf, n);
        break;
    case T_BOOL:
        snprintf(buf, n, "%s", v->i ? "true" : "false");
        break;
    case T_ENUM:
        if (v->i >= 0 && v->i < sl_config_count_names(e->names))
            snprintf(buf, n, "%s", e->names[v->i]);
        else
            snprintf(buf, n, "%lld", v->i);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"lists are formatted by sl_config_write_yaml");
    }
}

/* The default of a derived key for the config as it is now. */
sl_status_t
sl_config_derived_value(const sl_config_t *cfg, const entry_t *e, value_t *v)
{
    int t = (int)cfg->train.optimizer.type;

    if (t < 0 || t >= sl_config_count_names(sl_config_opt_names))
        t = SL_OPT_SGD;
    switch (e->derive) {
    case D_DIR: {
        size_t n = strlen(cfg->run.name) + 6;
        v->s = malloc(n);
        if (!v->s)
            return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
        snprintf(v->s, n, "runs/%s", cfg->run.name);
        return SL_OK;
    }
    case D_LR:
        v->d = sl_config_opt_default_lr[t];
        return SL_OK;
    case D_EPS:
        v->d = sl_config_opt_default_eps[t];
        return SL_OK;
    case D_BATCH: /* a count of nodes not known yet (auto) splits nothing so far */
        if (cfg->train.global_batch < 1)
            v->i = SL_CONFIG_DEFAULT_BATCH;
        else if (cfg->cluster.nodes < 1 || cfg->train.global_batch < cfg->cluster.nodes)
            v->i = cfg->train.global_batch; /* sl_config_validate says what is wrong */
        else
            v->i = cfg->train.global_batch / cfg->cluster.nodes;
        return SL_OK;
    case D_NONE:
        break;
    }
    SL_ASSERT(!"derived_value on a key without a derived default");
    return SL_ERR_INVALID;
}

/* Checks a parsed or stored value against the entry's type range, bounds and accepted
 * names. On failure writes what is wrong ("must be at least 1, got 0") into why and
 * returns 1; shown is the value as the user wrote it. overflow is +1/-1 when an integer
 * did not even fit in 64 bits. */
int
sl_config_bad_value(const entry_t *e, const value_t *v, int overflow, const char *shown, char *why,
                    size_t n)
{
    char list[160], b[40];

    switch (e->type) {
    case T_STR:
        if (!v->s) {
            snprintf(why, n, "is not set");
            return 1;
        }
        if (e->nonempty && !v->s[0]) {
            snprintf(why, n, "must not be empty");
            return 1;
        }
        if (e->names && sl_config_find_name(e->names, v->s, strlen(v->s)) < 0) {
            sl_config_join_names(e->names, ", ", list, sizeof list);
            snprintf(why, n, "must be one of: %s (got '%s')", list, shown);
            return 1;
        }
        if (e->valid && !e->valid(v->s)) {
            snprintf(why, n, "must be %s (got '%s')", e->expect, shown);
            return 1;
        }
        return 0;
    case T_ENUM:
        if (v->i < 0 || v->i >= sl_config_count_names(e->names)) {
            sl_config_join_names(e->names, ", ", list, sizeof list);
            snprintf(why, n, "must be one of: %s (got '%s')", list, shown);
            return 1;
        }
        return 0;
    case T_INT:
    case T_LONG: {
        long long lo = e->type == T_INT ? INT_MIN : LONG_MIN;
        long long hi = e->type == T_INT ? INT_MAX : LONG_MAX;
        if (e->lo_kind != NO_BOUND)
            lo = (long long)e->lo;
        if (e->hi_kind != NO_BOUND)
            hi = (long long)e->hi;
        if (e->auto_ok && !overflow && v->i == SL_CONFIG_AUTO_INT)
            return 0;
        if (overflow < 0 || v->i < lo) {
            snprintf(why, n, "must be at least %lld, got %s", lo, shown);
            return 1;
        }
        if (overflow > 0 || v->i > hi) {
            snprintf(why, n, "must be at most %lld, got %s", hi, shown);
            return 1;
        }
        return 0;
    }
    case T_U64:
        if (overflow) {
            snprintf(why, n, "must be at most %" PRIu64 ", got %s", UINT64_MAX, shown);
            return 1;
        }
        return 0;
    case T_DOUBLE:
        if (e->auto_ok && v->d == SL_CONFIG_AUTO)
            return 0;
        if (!isfinite(v->d)) {
            snprintf(why, n, "must be a finite number, got %s", shown);
            return 1;
        }
        if ((e->lo_kind == CLOSED && v->d < e->lo) || (e->lo_kind == OPEN && v->d <= e->lo)) {
            sl_config_format_double(e->lo, b, sizeof b);
            snprintf(why, n, "must be %s %s, got %s",
                     e->lo_kind == CLOSED ? "at least" : "greater than", b, shown);
            return 1;
        }
        if ((e->hi_kind == CLOSED && v->d > e->hi) || (e->hi_kind == OPEN && v->d >= e->hi)) {
            sl_config_format_double(e->hi, b, sizeof b);
            snprintf(why, n, "must be %s %s, got %s",
                     e->hi_kind == CLOSED ? "at most" : "less than", b, shown);
            return 1;
        }
        return 0;
    case T_BOOL:
        return 0;
    case T_LAYERS:
    case T_PERIODS:
        break;
    }
    SL_ASSERT(!"bad_value on a list");
    return 1;
}
