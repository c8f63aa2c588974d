/* Loading YAML text into a config (libyaml's document loader): key paths, lists,
 * conversion of scalars to typed values, and error messages that name file:line:column,
 * with a "did you mean" for unknown keys. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/sl_config.h"
#include "config/sl_config_internal.h"
#include "config/sl_config_where.h"

/* Records "NAME:LINE:COL: message" with libyaml's 0-based mark made 1-based. */
sl_status_t
sl_config_err_at(const load_t *ld, yaml_mark_t m, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_err_set(SL_ERR_CONFIG, "%s:%zu:%zu: %s", ld->name, m.line + 1,
                      m.column + 1 + (m.line == 0 ? ld->col_offset : 0), msg);
}

/* The escape of the character at p (left bytes) when a message or a YAML file cannot
 * hold it as it is: C0 and C1 controls, DEL, and U+FFFE and U+FFFF, which libyaml's
 * reader refuses. Writes "\n", "\t", "\xNN" or "\uFFFE" (YAML double-quote escapes) to e
 * and returns its length, *take the bytes it stands for; 0 for a printable byte. */
size_t
sl_config_control_escape(const unsigned char *p, size_t left, char e[8], size_t *take)
{
    *take = 1;
    if (*p == '\n' || *p == '\t')
        return (size_t)snprintf(e, 8, "\\%c", *p == '\n' ? 'n' : 't');
    if (*p < 0x20 || *p == 0x7f)
        return (size_t)snprintf(e, 8, "\\x%02x", *p);
    if (left >= 2 && p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0) { /* U+0080..U+009F */
        *take = 2;
        return (size_t)snprintf(e, 8, "\\x%02x", p[1]);
    }
    if (left >= 3 && p[0] == 0xef && p[1] == 0xbf && p[2] >= 0xbe) {
        *take = 3;
        return (size_t)snprintf(e, 8, "\\uFFF%c", p[2] == 0xbe ? 'E' : 'F');
    }
    return 0;
}

/* Writes s (len bytes) into buf (n bytes, NUL-terminated) as message text, with
 * control characters escaped (sl_config_control_escape) so that a message stays on one line.
 * Stops before an escape or a UTF-8 character that does not fit; returns the bytes of
 * s written. */
static size_t
escape_text(const char *s, size_t len, char *buf, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, used = 0;

    while (i < len) {
        char e[8];
        size_t take, plen = sl_config_control_escape(u + i, len - i, e, &take);
        const char *piece = e;

        if (plen == 0) {
            while (take < 4 && i + take < len && (u[i + take] & 0xc0) == 0x80)
                take++; /* a character's continuation bytes */
            piece = s + i;
            plen = take;
        }
        if (used + plen + 1 > n)
            break;
        memcpy(buf + used, piece, plen);
        used += plen;
        i += take;
    }
    buf[used] = '\0';
    return i;
}

/* Text from the input for a message (buf: at least 61 bytes), escaped: at most 60
 * bytes, "..." when cut. */
const char *
sl_config_clip(const char *s, size_t len, char *buf, size_t n)
{
    SL_ASSERT(n >= 61);
    if (escape_text(s, len, buf, 61) < len) {
        escape_text(s, len, buf, 58);
        strcat(buf, "...");
    }
    return buf;
}

/* Plain scalars that YAML reads as null: nothing, ~, null. */
static int
is_null(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* "'text'", "nothing", "a mapping" or "a list", for "must be X, got ..." messages. */
static const char *
describe(const yaml_node_t *n, char *buf, size_t size)
{
    char t[72];

    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE)
        return "a list";
    if (n->data.scalar.length == 0)
        return "nothing";
    snprintf(
        buf, size, "'%s'",
        sl_config_clip((const char *)n->data.scalar.value, n->data.scalar.length, t, sizeof t));
    return buf;
}

static const char *
type_phrase(const entry_t *e)
{
    switch (e->type) {
    case T_STR:
        return "a string";
    case T_INT:
    case T_LONG:
        return e->auto_ok ? "an integer or auto" : "an integer";
    case T_U64:
        return "a non-negative integer";
    case T_DOUBLE:
        return e->auto_ok ? "a number or auto" : "a number";
    case T_BOOL:
        return "true or false";
    case T_ENUM:
        return "a name";
    case T_LAYERS:
    case T_PERIODS:
        return "a list";
    }
    return "?";
}

/* Optimal string alignment distance (Levenshtein plus adjacent swaps); names over 63
 * bytes count as far from everything. */
static size_t
edit_distance(const char *a, size_t n, const char *b, size_t m)
{
    size_t d[64][64];

    if (n >= 64 || m >= 64)
        return SIZE_MAX;
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* "did you mean": the closest candidate within edit distance 2 (and less than the
 * typed name's length, so 'x' suggests nothing), else one that the typed name
 * (3 bytes or more) begins. */
static int
suggest(const char *s, size_t len, const char *const *names, const size_t *lens)
{
    size_t best_d = SIZE_MAX;
    int best = -1;

    for (int i = 0; names[i]; i++) {
        size_t d = edit_distance(s, len, names[i], lens[i]);
        if (d <= 2 && d < len && d < best_d) {
            best_d = d;
            best = i;
        }
    }
    for (int i = 0; best < 0 && len >= 3 && names[i]; i++)
        if (lens[i] > len && strncmp(names[i], s, len) == 0)
            best = i;
    return best;
}

/* The name s (len bytes) begins with before a colon, when it is one of names: YAML
 * reads {lstm:16} as the key 'lstm:16', a space after the colon being what makes a
 * value. -1 when there is none. */
static int
key_before_colon(const char *s, size_t len, const char *const *names, const size_t *lens)
{
    const char *colon = memchr(s, ':', len);

    for (int i = 0; colon && names[i]; i++)
        if (lens[i] == (size_t)(colon - s) && strncmp(names[i], s, lens[i]) == 0)
            return i;
    return -1;
}

/* "unknown key 'x' in 'where' (did you mean 'y'?)", or the list of keys when nothing
 * is close. */
static sl_status_t
unknown_key(const load_t *ld, yaml_mark_t m, const char *where, const char *s, size_t len,
            const char *const *names, const size_t *lens)
{
    char k[72], in[96], list[512];
    size_t used = 0;
    int best = suggest(s, len, names, lens), colon = key_before_colon(s, len, names, lens);

    sl_config_clip(s, len, k, sizeof k);
    if (*where)
        snprintf(in, sizeof in, " in '%s'", where);
    else
        snprintf(in, sizeof in, " at top level");
    if (colon >= 0)
        return sl_config_err_at(ld, m,
                                "unknown key '%s'%s (YAML wants a space after the colon: "
                                "'%.*s: %s')",
                                k, in, (int)lens[colon], names[colon], k + lens[colon] + 1);
    if (best >= 0)
        return sl_config_err_at(ld, m, "unknown key '%s'%s (did you mean '%.*s'?)", k, in,
                                (int)lens[best], names[best]);
    list[0] = '\0';
    for (int i = 0; names[i] && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%.*s", i ? ", " : "",
                                 (int)lens[i], names[i]);
    return sl_config_err_at(ld, m, "unknown key '%s'%s (expected one of: %s)", k, in, list);
}

sl_status_t
sl_config_unknown_schema_key(const load_t *ld, yaml_mark_t m, const char *parent, const char *s,
                             size_t len)
{
    const char *names[SL_CONFIG_MAX_KEYS + 1];
    size_t lens[SL_CONFIG_MAX_KEYS + 1];

    sl_config_children(parent, names, lens, SL_CONFIG_MAX_KEYS + 1);
    return unknown_key(ld, m, parent, s, len, names, lens);
}

/* Key i of a mapping: must be a scalar and must not repeat an earlier key. */
static sl_status_t
pair_key(const load_t *ld, const yaml_node_t *map, const yaml_node_pair_t *pair,
         const yaml_node_t **key)
{
    const yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
    char buf[96];

    if (k->type != YAML_SCALAR_NODE)
        return sl_config_err_at(ld, k->start_mark, "keys must be names, got %s",
                                describe(k, buf, sizeof buf));
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *o = yaml_document_get_node(ld->doc, q->key);
        if (o->type == YAML_SCALAR_NODE && o->data.scalar.length == k->data.scalar.length &&
            memcmp(o->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0)
            return sl_config_err_at(ld, k->start_mark, "duplicate key '%s'",
                                    sl_config_clip((const char *)k->data.scalar.value,
                                                   k->data.scalar.length, buf, sizeof buf));
    }
    *key = k;
    return SL_OK;
}

/* Decimal integers only: an optional sign then digits (no fractions, exponents, hex).
 * Sets *overflow to +1/-1 when the number does not fit in 64 bits. */
static int
parse_integer(const char *s, int is_unsigned, value_t *v, int *overflow)
{
    const char *p = s + (*s == '+' || *s == '-');
    char *end;

    *overflow = 0;
    if (!*p || strspn(p, "0123456789") != strlen(p) || (is_unsigned && *s == '-'))
        return 0;
    errno = 0;
    if (is_unsigned)
        v->u = strtoull(s, &end, 10);
    else
        v->i = strtoll(s, &end, 10);
    if (errno == ERANGE)
        *overflow = *s == '-' ? -1 : 1;
    return 1;
}

/* Decimal numbers as strtod reads them, without its inf, nan and hex forms. */
static int
parse_double(const char *s, double *d)
{
    char *end;

    if (!*s || strspn(s, "0123456789+-.eE") != strlen(s) || !strpbrk(s, "0123456789"))
        return 0;
    *d = strtod(s, &end);
    return *end == '\0';
}

/* Reads a scalar node as the entry's type into v, checking bounds and names; path
 * names the key in messages. */
static sl_status_t
convert(const load_t *ld, const entry_t *e, const char *path, const yaml_node_t *n, value_t *v)
{
    char got[96], why[512], t[72];
    const char *s;
    size_t len;
    int overflow = 0, ok = 1;

    if (e->type == T_ENUM && n->type != YAML_SCALAR_NODE) {
        sl_config_join_names(e->names, ", ", why, sizeof why);
        return sl_config_err_at(ld, n->start_mark, "'%s' must be one of: %s (got %s)", path, why,
                                describe(n, got, sizeof got));
    }
    if (n->type != YAML_SCALAR_NODE)
        return sl_config_err_at(ld, n->start_mark, "'%s' must be %s, got %s", path, type_phrase(e),
                                describe(n, got, sizeof got));
    s = (const char *)n->data.scalar.value;
    len = n->data.scalar.length;
    if (memchr(s, '\0', len))
        return sl_config_err_at(ld, n->start_mark, "'%s' must not contain a NUL character", path);
    sl_config_clip(s, len, t, sizeof t);
    switch (e->type) {
    case T_STR:
        v->s = is_null(n) ? strdup("") : strdup(s);
        if (!v->s)
            return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", ld->name);
        break;
    case T_INT:
    case T_LONG:
        if (e->auto_ok && strcmp(s, "auto") == 0)
            v->i = SL_CONFIG_AUTO_INT;
        else if ((ok = parse_integer(s, 0, v, &overflow)) && e->auto_ok &&
                 v->i == SL_CONFIG_AUTO_INT)
            overflow = -1; /* the number itself is below the bound, not auto */
        break;
    case T_U64:
        ok = parse_integer(s, 1, v, &overflow);
        break;
    case T_DOUBLE:
        if (e->auto_ok && strcmp(s, "auto") == 0)
            v->d = SL_CONFIG_AUTO;
        else
            ok = parse_double(s, &v->d);
        break;
    case T_BOOL:
        if (!strcasecmp(s, "true") || !strcasecmp(s, "yes"))
            v->i = 1;
        else if (!strcasecmp(s, "false") || !strcasecmp(s, "no"))
            v->i = 0;
        else
            ok = 0;
        break;
    case T_ENUM:
        v->i = sl_config_find_name(e->names, s, len);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"convert on a list");
    }
    if (!ok)
        return sl_config_err_at(ld, n->start_mark, "'%s' must be %s, got %s", path, type_phrase(e),
                                describe(n, got, sizeof got));
    if (sl_config_bad_value(e, v, overflow, t, why, sizeof why)) {
        free(v->s);
        v->s = NULL;
        return sl_config_err_at(ld, n->start_mark, "'%s' %s", path, why);
    }
    return SL_OK;
}

/* One key: value pair of a list item's mapping (model.layers, sync.periods), path the
 * item's ("model.layers[1]"): *which is the key's index in names (keys[*which] its
 * entry) and *v its value, converted and checked. An unknown key is an error that
 * names the item and the keys it takes. */
static sl_status_t
item_value(const load_t *ld, const yaml_node_t *item, const yaml_node_pair_t *pr, const char *path,
           const entry_t *keys, const char *const *names, const size_t *lens, int *which,
           value_t *v)
{
    const yaml_node_t *k, *val = yaml_document_get_node(ld->doc, pr->value);
    char sub[96];

    SL_TRY(pair_key(ld, item, pr, &k));
    *which = sl_config_find_name(names, (const char *)k->data.scalar.value, k->data.scalar.length);
    if (*which < 0)
        return unknown_key(ld, k->start_mark, path, (const char *)k->data.scalar.value,
                           k->data.scalar.length, names, lens);
    snprintf(sub, sizeof sub, "%s.%s", path, keys[*which].key);
    return convert(ld, &keys[*which], sub, val, v);
}

/* model.layers: a list of 1..SL_MAX_LAYERS mappings {lstm: H, projection: P}. */
static sl_status_t
apply_layers(load_t *ld, const entry_t *e, const yaml_node_t *n)
{
    sl_layer_config_t layers[SL_MAX_LAYERS];
    size_t lens[3] = {strlen(sl_config_layer_key_names[0]), strlen(sl_config_layer_key_names[1]),
                      0};
    char got[96], path[64];
    long count;

    if (n->type != YAML_SEQUENCE_NODE)
        return sl_config_err_at(ld, n->start_mark, "'%s' must be a list like [{lstm: 256}], got %s",
                                e->key, describe(n, got, sizeof got));
    count = n->data.sequence.items.top - n->data.sequence.items.start;
    if (count < 1 || count > SL_MAX_LAYERS)
        return sl_config_err_at(ld, n->start_mark, "'%s' must have 1 to %d layers, got %ld", e->key,
                                SL_MAX_LAYERS, count);
    memset(layers, 0, sizeof layers);
    for (long i = 0; i < count; i++) {
        const yaml_node_t *item = yaml_document_get_node(ld->doc, n->data.sequence.items.start[i]);
        int have_lstm = 0;

        snprintf(path, sizeof path, "%s[%ld]", e->key, i);
        if (item->type != YAML_MAPPING_NODE)
            return sl_config_err_at(ld, item->start_mark,
                                    "'%s' must be a mapping like {lstm: 256}, got %s", path,
                                    describe(item, got, sizeof got));
        for (const yaml_node_pair_t *pr = item->data.mapping.pairs.start;
             pr < item->data.mapping.pairs.top; pr++) {
            value_t v = {0};
            int which;

            SL_TRY(item_value(ld, item, pr, path, sl_config_layer_keys, sl_config_layer_key_names,
                              lens, &which, &v));
            if (which == 0) {
                layers[i].hidden = (int)v.i;
                have_lstm = 1;
            } else {
                layers[i].projection = (int)v.i;
            }
        }
        if (!have_lstm)
            return sl_config_err_at(ld, item->start_mark, "'%s' needs 'lstm' (the cell size H)",
                                    path);
    }
    ld->cfg->model.nlayers = (int)count;
    memcpy(ld->cfg->model.layers, layers, sizeof layers);
    return SL_OK;
}

/* Frees the globs of rules[0..n) and empties the slots. */
void
sl_config_free_rules(sl_period_rule_t *rules, int n)
{
    for (int i = 0; i < n; i++) {
        free(rules[i].match);
        rules[i].match = NULL;
        rules[i].period = 0;
    }
}

/* One sync.periods entry (path "sync.periods[i]"): {match: GLOB, period: H}, both
 * required. The glob is stored in *r (malloc'd) even when a later key fails. */
static sl_status_t
apply_rule(load_t *ld, const char *path, const yaml_node_t *item, sl_period_rule_t *r)
{
    size_t lens[3] = {strlen(sl_config_rule_key_names[0]), strlen(sl_config_rule_key_names[1]), 0};
    char got[96];
    int have_period = 0;

    if (item->type != YAML_MAPPING_NODE)
        return sl_config_err_at(
            ld, item->start_mark,
            "'%s' must be a mapping like {match: \"lstm.*\", period: 4}, got %s", path,
            describe(item, got, sizeof got));
    for (const yaml_node_pair_t *pr = item->data.mapping.pairs.start;
         pr < item->data.mapping.pairs.top; pr++) {
        value_t v = {0};
        int which;

        SL_TRY(item_value(ld, item, pr, path, sl_config_rule_keys, sl_config_rule_key_names, lens,
                          &which, &v));
        if (which == 0) {
            r->match = v.s; /* pair_key refused a second 'match' */
        } else {
            r->period = (int)v.i;
            have_period = 1;
        }
    }
    if (!r->match)
        return sl_config_err_at(ld, item->start_mark,
                                "'%s' needs 'match' (a glob on component names)", path);
    if (!have_period)
        return sl_config_err_at(ld, item->start_mark,
                                "'%s' needs 'period' (steps between syncs of what it matches)",
                                path);
    return SL_OK;
}

/* sync.periods: a list of 0..SL_MAX_PERIOD_RULES rules; replaces the whole list. */
static sl_status_t
apply_periods(load_t *ld, const entry_t *e, const yaml_node_t *n)
{
    sl_period_rule_t rules[SL_MAX_PERIOD_RULES];
    char got[96], path[64];
    long count;
    sl_status_t st = SL_OK;

    if (n->type != YAML_SEQUENCE_NODE)
        return sl_config_err_at(ld, n->start_mark,
                                "'%s' must be a list like [{match: \"lstm.*\", period: 4}], got %s",
                                e->key, describe(n, got, sizeof got));
    count = n->data.sequence.items.top - n->data.sequence.items.start;
    if (count > SL_MAX_PERIOD_RULES)
        return sl_config_err_at(ld, n->start_mark, "'%s' must have at most %d rules, got %ld",
                                e->key, SL_MAX_PERIOD_RULES, count);
    memset(rules, 0, sizeof rules);
    for (long i = 0; i < count && st == SL_OK; i++) {
        snprintf(path, sizeof path, "%s[%ld]", e->key, i);
        st = apply_rule(ld, path, yaml_document_get_node(ld->doc, n->data.sequence.items.start[i]),
                        &rules[i]);
    }
    if (st != SL_OK) {
        sl_config_free_rules(rules, (int)count);
        return st;
    }
    sl_config_free_rules(ld->cfg->sync.period_rule, SL_MAX_PERIOD_RULES);
    memcpy(ld->cfg->sync.period_rule, rules, sizeof rules);
    ld->cfg->sync.nperiod_rules = (int)count;
    return SL_OK;
}

/* Records "NAME:LINE:COL" of the value just stored for key, as sl_config_err_at would write it. */
static sl_status_t
note_where(const load_t *ld, const char *key, yaml_mark_t m)
{
    char at[320];

    snprintf(at, sizeof at, "%s:%zu:%zu", ld->name, m.line + 1,
             m.column + 1 + (m.line == 0 ? ld->col_offset : 0));
    return sl_config_where_note(&ld->cfg->where, key, at);
}

/* Applies node n at key path ("" = top level): a leaf key takes a value, a section a
 * mapping of its keys (or nothing). */
static sl_status_t
apply_node(load_t *ld, const char *path, const yaml_node_t *n)
{
    const entry_t *e = sl_config_find_entry(path);
    char got[96];

    if (e) {
        if (e->type == T_LAYERS) {
            SL_TRY(apply_layers(ld, e, n));
        } else if (e->type == T_PERIODS) {
            SL_TRY(apply_periods(ld, e, n));
        } else {
            value_t v = {0};
            SL_TRY(convert(ld, e, path, n, &v));
            sl_config_store(ld->cfg, e, &v);
        }
        ld->given[e - sl_config_schema] = 1;
        return ld->note_where ? note_where(ld, e->key, n->start_mark) : SL_OK;
    }
    if (*path && is_null(n))
        return SL_OK;
    if (n->type != YAML_MAPPING_NODE) {
        if (!*path)
            return sl_config_err_at(ld, n->start_mark, "top level must be a mapping");
        return sl_config_err_at(ld, n->start_mark, "'%s' must be a mapping, got %s", path,
                                describe(n, got, sizeof got));
    }
    for (const yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
         pr++) {
        const yaml_node_t *k;
        const char *name;
        size_t len;
        char child[256];

        SL_TRY(pair_key(ld, n, pr, &k));
        name = (const char *)k->data.scalar.value;
        len = k->data.scalar.length;
        if (!sl_config_has_child(path, name, len))
            return sl_config_unknown_schema_key(ld, k->start_mark, path, name, len);
        snprintf(child, sizeof child, "%s%s%s", path, *path ? "." : "", name);
        SL_TRY(apply_node(ld, child, yaml_document_get_node(ld->doc, pr->value)));
    }
    return SL_OK;
}

/* Bytes of the YAML line break at p (left bytes: \r\n, \r, \n, NEL, LS or PS), else 0. */
static size_t
line_break_bytes(const unsigned char *p, size_t left)
{
    if (*p == '\n')
        return 1;
    if (*p == '\r')
        return left >= 2 && p[1] == '\n' ? 2 : 1;
    if (left >= 2 && p[0] == 0xc2 && p[1] == 0x85)
        return 2;
    if (left >= 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
        return 3;
    return 0;
}

/* Line and column (0-based) of a byte offset, for libyaml's reader errors, which
 * report only the offset: counted as libyaml counts its marks, lines broken by every
 * YAML line break, columns in characters. */
static yaml_mark_t
mark_of_offset(const char *text, size_t len, size_t offset)
{
    const unsigned char *u = (const unsigned char *)text;
    yaml_mark_t m = {offset, 0, 0};

    for (size_t i = 0; i < offset && i < len;) {
        size_t brk = line_break_bytes(u + i, len - i);
        if (brk) {
            m.line++;
            m.column = 0;
            i += brk;
        } else {
            m.column += (u[i] & 0xc0) != 0x80; /* not a continuation byte */
            i++;
        }
    }
    return m;
}

/* The byte of text (len bytes) at mark m (0-based line and column in characters), or
 * 0 past the end. */
static unsigned char
byte_at_mark(const char *text, size_t len, yaml_mark_t m)
{
    const unsigned char *u = (const unsigned char *)text;
    size_t line = 0, column = 0;

    for (size_t i = 0; i < len;) {
        size_t brk = line_break_bytes(u + i, len - i);

        if (line == m.line && column == m.column)
            return u[i];
        if (brk) {
            line++;
            column = 0;
            i += brk;
            continue;
        }
        while (++i < len && (u[i] & 0xc0) == 0x80) /* the character's continuation bytes */
            ;
        column++;
    }
    return 0;
}

/* libyaml's problem as "YAML syntax error: ..." at its place; a problem found at the end
 * of input without a final newline is put at the end of the last line, not on a line
 * that does not exist (--set values have no newline). A tab where a token should start
 * is named: editors insert them, and YAML indents with spaces only. */
static sl_status_t
yaml_error(const load_t *ld, const yaml_parser_t *p, const char *text, size_t len)
{
    yaml_mark_t m = p->problem_mark, end = mark_of_offset(text, len, len);

    if (p->error == YAML_MEMORY_ERROR)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory while reading YAML", ld->name);
    if (p->error == YAML_READER_ERROR)
        m = mark_of_offset(text, len, p->problem_offset);
    if (m.line > end.line)
        m = end;
    return sl_config_err_at(ld, m, "YAML syntax error: %s%s", p->problem,
                            byte_at_mark(text, len, m) == '\t' && !strstr(p->problem, "tab")
                                ? " (a tab: YAML indents with spaces only)"
                                : "");
}

/* Parses text as one YAML document (a second document is an error, not ignored). */
static sl_status_t
parse_yaml(const load_t *ld, const char *text, size_t len, yaml_document_t *doc)
{
    yaml_parser_t p;
    yaml_document_t extra;
    sl_status_t st = SL_OK;

    if (!yaml_parser_initialize(&p))
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", ld->name);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, doc)) {
        st = yaml_error(ld, &p, text, len);
        yaml_parser_delete(&p);
        return st;
    }
    if (!yaml_parser_load(&p, &extra)) {
        st = yaml_error(ld, &p, text, len);
    } else {
        const yaml_node_t *root = yaml_document_get_root_node(&extra);
        if (root)
            st = sl_config_err_at(ld, root->start_mark, "only one YAML document is allowed");
        yaml_document_delete(&extra);
    }
    if (st != SL_OK)
        yaml_document_delete(doc);
    yaml_parser_delete(&p);
    return st;
}

/* Parses text and applies it at path. An empty document sets nothing at top level and
 * is an empty value below it (--set run.name= gives ""). */
sl_status_t
sl_config_apply_text(load_t *ld, const char *text, size_t len, const char *path)
{
    yaml_document_t doc;
    const yaml_node_t *root;
    yaml_node_t empty;
    sl_status_t st;

    SL_TRY(parse_yaml(ld, text, len, &doc));
    ld->doc = &doc;
    root = yaml_document_get_root_node(&doc);
    if (!root && *path) {
        memset(&empty, 0, sizeof empty);
        empty.type = YAML_SCALAR_NODE;
        empty.data.scalar.value = (yaml_char_t *)"";
        empty.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
        root = &empty;
    }
    st = root ? apply_node(ld, path, root) : SL_OK;
    ld->doc = NULL;
    yaml_document_delete(&doc);
    return st;
}
