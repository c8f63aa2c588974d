/* The run configuration's layers of settings: defaults (sl_config_init), then a YAML
 * file, then --set overrides, each applied whole or not at all; copies; and the checks
 * across keys (sl_config_validate). One schema table (sl_config_schema.c) drives the
 * defaults, loading (sl_config_load.c), validation and writing (sl_config_write.c). */
#include "config/sl_config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/sl_file.h"
#include "config/sl_config_internal.h"
#include "config/sl_config_paths.h"
#include "config/sl_config_quant.h"
#include "config/sl_config_where.h"

/* ---- layers of settings: init, file, --set ---- */

static sl_status_t
replace_string(char **dst, const char *s)
{
    char *c = strdup(s);

    if (!c)
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    free(*dst);
    *dst = c;
    return SL_OK;
}

/* Deep copy (the strings are duplicated). */
static sl_status_t
config_copy(sl_config_t *dst, const sl_config_t *src)
{
    *dst = *src;
    dst->source = NULL;
    dst->where = NULL;
    for (size_t i = 0; i < sl_config_nkeys; i++)
        if (sl_config_schema[i].type == T_STR)
            *(char **)sl_config_slot(dst, &sl_config_schema[i]) = NULL;
    for (int i = 0; i < SL_MAX_PERIOD_RULES; i++)
        dst->sync.period_rule[i].match = NULL;
    if (replace_string(&dst->source, src->source ? src->source : "<defaults>") != SL_OK ||
        sl_config_where_copy(&dst->where, src->where) != SL_OK)
        goto fail;
    for (size_t i = 0; i < sl_config_nkeys; i++) {
        const char *s;
        if (sl_config_schema[i].type != T_STR)
            continue;
        s = sl_config_fetch(src, &sl_config_schema[i]).s;
        if (replace_string((char **)sl_config_slot(dst, &sl_config_schema[i]), s ? s : "") != SL_OK)
            goto fail;
    }
    for (int i = 0; i < SL_MAX_PERIOD_RULES; i++)
        if (src->sync.period_rule[i].match &&
            replace_string(&dst->sync.period_rule[i].match, src->sync.period_rule[i].match) !=
                SL_OK)
            goto fail;
    return SL_OK;
fail:
    sl_config_fini(dst);
    return SL_ERR_NOMEM;
}

sl_status_t
sl_config_copy(sl_config_t *dst, const sl_config_t *src)
{
    if (config_copy(dst, src) != SL_OK)
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    return SL_OK;
}

/* Moves derived keys along: each one this layer did not set, and that still held the
 * default computed from the config before the layer, gets the new default. */
static sl_status_t
follow_defaults(sl_config_t *cfg, const sl_config_t *before, const unsigned char *given)
{
    for (size_t i = 0; i < sl_config_nkeys; i++) {
        const entry_t *e = &sl_config_schema[i];
        value_t old = {0}, now = {0}, cur;
        int follows;

        if (e->derive == D_NONE || given[i])
            continue;
        SL_TRY(sl_config_derived_value(before, e, &old));
        cur = sl_config_fetch(before, e);
        follows = sl_config_values_equal(e, &cur, &old);
        free(old.s);
        if (!follows)
            continue;
        SL_TRY(sl_config_derived_value(cfg, e, &now));
        sl_config_store(cfg, e, &now);
    }
    return SL_OK;
}

/* Every file and --set is applied to a copy that replaces cfg only when all of it was
 * good, so a failed override leaves the config as it was. */
static sl_status_t
layer_begin(load_t *ld, sl_config_t *work, const sl_config_t *cfg, const char *name)
{
    memset(ld, 0, sizeof *ld);
    ld->cfg = work;
    ld->name = name;
    ld->note_where = 1;
    return config_copy(work, cfg);
}

static sl_status_t
layer_end(load_t *ld, sl_config_t *cfg, sl_status_t st)
{
    if (st == SL_OK)
        st = follow_defaults(ld->cfg, cfg, ld->given);
    if (st != SL_OK) {
        sl_config_fini(ld->cfg);
        return st;
    }
    sl_config_fini(cfg);
    *cfg = *ld->cfg;
    return SL_OK;
}

/* init cannot return a status: a default that does not parse is a bug in the table
 * (the tests load every default), and running out of memory this early is fatal. */
void
sl_config_init(sl_config_t *cfg)
{
    load_t ld;
    sl_status_t st;

    memset(cfg, 0, sizeof *cfg);
    memset(&ld, 0, sizeof ld);
    ld.cfg = cfg;
    ld.name = "<defaults>";
    st = replace_string(&cfg->source, "<defaults>");
    for (size_t i = 0; i < sl_config_nkeys && st == SL_OK; i++)
        if (sl_config_schema[i].def)
            st = sl_config_apply_text(&ld, sl_config_schema[i].def, strlen(sl_config_schema[i].def),
                                      sl_config_schema[i].key);
    for (size_t i = 0; i < sl_config_nkeys && st == SL_OK; i++) {
        value_t v = {0};
        if (sl_config_schema[i].derive != D_NONE) {
            st = sl_config_derived_value(cfg, &sl_config_schema[i], &v);
            if (st == SL_OK)
                sl_config_store(cfg, &sl_config_schema[i], &v);
        }
    }
    SL_ASSERT(st == SL_OK);
}

void
sl_config_fini(sl_config_t *cfg)
{
    free(cfg->source);
    cfg->source = NULL;
    sl_config_where_destroy(&cfg->where);
    for (size_t i = 0; i < sl_config_nkeys; i++) {
        if (sl_config_schema[i].type == T_STR) {
            char **sp = sl_config_slot(cfg, &sl_config_schema[i]);
            free(*sp);
            *sp = NULL;
        }
    }
    sl_config_free_rules(cfg->sync.period_rule, SL_MAX_PERIOD_RULES);
    cfg->sync.nperiod_rules = 0;
}

sl_status_t
sl_config_load_buffer(sl_config_t *cfg, const char *text, size_t len, const char *name)
{
    load_t ld;
    sl_config_t work;
    sl_status_t st;

    SL_TRY(layer_begin(&ld, &work, cfg, name));
    st = sl_config_apply_text(&ld, text, len, "");
    if (st == SL_OK)
        st = replace_string(&work.source, name);
    return layer_end(&ld, cfg, st);
}

sl_status_t
sl_config_load_string(sl_config_t *cfg, const char *yaml, const char *name)
{
    return sl_config_load_buffer(cfg, yaml, strlen(yaml), name);
}

sl_status_t
sl_config_load_file(sl_config_t *cfg, const char *path)
{
    char *text;
    size_t len;
    sl_status_t st;

    SL_TRY(sl_file_read_all(path, &text, &len));
    st = sl_config_load_buffer(cfg, text, len, path);
    free(text);
    return st == SL_OK ? sl_config_resolve_data_paths(cfg, path) : st;
}

/* Checks each component of a --set key path, pointing at the first bad one. */
static sl_status_t
check_key_path(const load_t *ld, char *key, size_t key_col)
{
    size_t i = 0;

    for (;;) {
        size_t j = i + strcspn(key + i, ".");
        yaml_mark_t m = {0, 0, key_col + i};
        char shown[72];
        int ok, leaf;
        char saved = key[j];

        if (j == i)
            return sl_config_err_at(ld, m, "empty key name in '%s'",
                                    sl_config_clip(key, strlen(key), shown, sizeof shown));
        if (i > 0)
            key[i - 1] = '\0'; /* key is now the parent path */
        ok = sl_config_has_child(i > 0 ? key : "", key + i, j - i);
        if (!ok) {
            sl_status_t st = sl_config_unknown_schema_key(ld, m, i > 0 ? key : "", key + i, j - i);
            if (i > 0)
                key[i - 1] = '.';
            return st;
        }
        if (i > 0)
            key[i - 1] = '.';
        key[j] = '\0';
        leaf = sl_config_find_entry(key) != NULL;
        if (saved == '\0')
            return SL_OK;
        if (leaf) {
            sl_status_t st;
            m.column = key_col + j + 1;
            st = sl_config_err_at(ld, m, "'%s' has no sub-keys", key);
            key[j] = saved;
            return st;
        }
        key[j] = saved;
        i = j + 1;
    }
}

sl_status_t
sl_config_set(sl_config_t *cfg, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    size_t end = eq ? (size_t)(eq - assignment) : strlen(assignment), a = 0, b = end;
    char *key, shown[64], name[72];
    load_t ld;
    sl_config_t work;
    sl_status_t st;

    while (a < b && isspace((unsigned char)assignment[a]))
        a++;
    while (b > a && isspace((unsigned char)assignment[b - 1]))
        b--;
    key = strndup(assignment + a, b - a);
    if (!key)
        return sl_err_set(SL_ERR_NOMEM, "--set: out of memory");
    /* "--set KEY" escaped and clipped like any input text: every key of the schema fits,
       and a message about a long one keeps its place and its text */
    snprintf(name, sizeof name, "--set%s%s", b > a ? " " : "",
             sl_config_clip(key, b - a, shown, sizeof shown));
    st = layer_begin(&ld, &work, cfg, name);
    if (st != SL_OK)
        goto out;
    if (!eq) {
        yaml_mark_t m = {0, 0, end};
        st = sl_config_err_at(&ld, m,
                              "missing '=' (expected KEY=VALUE, e.g. train.optimizer.lr=0.5)");
    } else if (a == b) {
        yaml_mark_t m = {0, 0, a};
        st = sl_config_err_at(&ld, m, "missing key before '=' (expected KEY=VALUE)");
    } else {
        st = check_key_path(&ld, key, a);
        ld.col_offset = end + 1;
        if (st == SL_OK)
            st = sl_config_apply_text(&ld, eq + 1, strlen(eq + 1), key);
    }
    st = layer_end(&ld, cfg, st);
out:
    free(key);
    return st;
}

/* ---- validation ---- */

/* train.global_batch: a whole number of streams per node, and train.batch set to that
 * number when both are given. Nothing to check while cluster.nodes is auto. */
static sl_status_t
check_global_batch(const sl_config_t *cfg, const char *src)
{
    int g = cfg->train.global_batch, n = cfg->cluster.nodes;

    if (g < 1 || n < 1)
        return SL_OK;
    if (g % n)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'train.global_batch' %d does not split over %d nodes "
                          "(cluster.nodes); give a multiple of %d",
                          src, g, n, n);
    if (cfg->train.batch != g / n)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'train.batch' %d on %d nodes is not 'train.global_batch' %d "
                          "(%d a node); leave train.batch out, or set train.global_batch to 0",
                          src, cfg->train.batch, n, g, g / n);
    return SL_OK;
}

/* sync.overlap_steps tau: a model-averaging algorithm, and below every period that a
 * component can get, so that a block's update is applied before its next sync point. */
static sl_status_t
check_overlap(const sl_config_t *cfg, const char *src)
{
    int tau = cfg->sync.overlap_steps;

    if (tau == 0)
        return SL_OK;
    if (cfg->sync.algorithm == SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.overlap_steps' is %d, but allreduce averages the gradients "
                          "within each step: there is no block to overlap (use 0)",
                          src, tau);
    if (tau >= cfg->sync.period)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.overlap_steps' (%d) must be less than 'sync.period' (%d)", src,
                          tau, cfg->sync.period);
    if (cfg->sync.embedding_period > 0 && tau >= cfg->sync.embedding_period)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.overlap_steps' (%d) must be less than "
                          "'sync.embedding_period' (%d)",
                          src, tau, cfg->sync.embedding_period);
    for (int i = 0; i < cfg->sync.nperiod_rules; i++)
        if (tau >= cfg->sync.period_rule[i].period)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: 'sync.overlap_steps' (%d) must be less than "
                              "'sync.periods[%d].period' (%d)",
                              src, tau, i, cfg->sync.period_rule[i].period);
    return SL_OK;
}

int
sl_config_number_in_range(const char *key, double value)
{
    const entry_t *e = sl_config_find_entry(key);
    value_t v = {0};
    char why[160];

    SL_ASSERT(e && (e->type == T_INT || e->type == T_LONG || e->type == T_DOUBLE));
    if (e->type == T_DOUBLE)
        v.d = value;
    else if (!(value >= -0x1p63 && value < 0x1p63)) /* beyond long long: beyond any key's */
        return 0;
    else
        v.i = (long long)value;
    return !sl_config_bad_value(e, &v, 0, "", why, sizeof why);
}

sl_status_t
sl_config_validate(const sl_config_t *cfg)
{
    const char *src = cfg->source ? cfg->source : "<defaults>";
    char shown[512], why[768];

    for (size_t i = 0; i < sl_config_nkeys; i++) {
        const entry_t *e = &sl_config_schema[i];
        value_t v;
        if (e->type == T_LAYERS || e->type == T_PERIODS)
            continue;
        v = sl_config_fetch(cfg, e);
        sl_config_format_value(e, &v, shown, sizeof shown);
        if (sl_config_bad_value(e, &v, 0, shown, why, sizeof why))
            return sl_err_set(SL_ERR_CONFIG, "%s: '%s' %s", src, e->key, why);
    }
    if (cfg->model.nlayers < 1 || cfg->model.nlayers > SL_MAX_LAYERS)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'model.layers' must have 1 to %d layers, got %d", src,
                          SL_MAX_LAYERS, cfg->model.nlayers);
    for (int i = 0; i < cfg->model.nlayers; i++) {
        if (cfg->model.layers[i].hidden < 1)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: 'model.layers[%d].lstm' must be at least 1, "
                              "got %d",
                              src, i, cfg->model.layers[i].hidden);
        if (cfg->model.layers[i].projection < 0)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: 'model.layers[%d].projection' must be at "
                              "least 0, got %d",
                              src, i, cfg->model.layers[i].projection);
    }
    if (cfg->sync.nperiod_rules < 0 || cfg->sync.nperiod_rules > SL_MAX_PERIOD_RULES)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'sync.periods' must have at most %d rules, got %d",
                          src, SL_MAX_PERIOD_RULES, cfg->sync.nperiod_rules);
    for (int i = 0; i < cfg->sync.nperiod_rules; i++) {
        const sl_period_rule_t *r = &cfg->sync.period_rule[i];
        if (!r->match || !r->match[0])
            return sl_err_set(SL_ERR_CONFIG, "%s: 'sync.periods[%d].match' must not be empty", src,
                              i);
        if (r->period < 1)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: 'sync.periods[%d].period' must be at least 1, "
                              "got %d",
                              src, i, r->period);
    }
    SL_TRY(check_overlap(cfg, src));
    SL_TRY(check_global_batch(cfg, src));
    SL_TRY(sl_config_check_quant(cfg, src));
    if (!cfg->data.train[0])
        return sl_err_set(SL_ERR_CONFIG, "%s: 'data.train' is required", src);
    if (cfg->data.valid[0] && cfg->data.valid_fraction > 0)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'data.valid' and 'data.valid_fraction' both "
                          "give a validation set; use one",
                          src);
    if (cfg->data.level == SL_LEVEL_WORD && cfg->data.vocab_size < 1)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'data.vocab_size' must be at least 1 at word "
                          "level (0 = every character is for char level)",
                          src);
    if (cfg->model.output == SL_OUTPUT_SAMPLED && cfg->model.samples < 1)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'model.output.samples' must be at least 1 with "
                          "the sampled softmax, got %d",
                          src, cfg->model.samples);
    if (cfg->train.max_steps > 0 && cfg->train.schedule.warmup_steps > cfg->train.max_steps)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'train.schedule.warmup_steps' (%ld) is longer "
                          "than 'train.max_steps' (%ld)",
                          src, cfg->train.schedule.warmup_steps, cfg->train.max_steps);
    return SL_OK;
}
