/* The config written out: the resolved configuration as YAML (sl_config_write_yaml)
 * and the schema as --help-config prints it (sl_config_print_schema). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/sl_config.h"
#include "config/sl_config_internal.h"

/* Whether s can be written as a plain YAML scalar that reads back as the same string:
 * a conservative character set, not a null word, no leading indicator. */
static int
plain_ok(const char *s)
{
    size_t len = strlen(s);

    if (!len || s[0] == '-' || s[0] == ':' || s[len - 1] == ':')
        return 0;
    if (!strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
        return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./+-:", *p))
            return 0;
    return 1;
}

static void
write_string(FILE *out, const char *s)
{
    if (plain_ok(s)) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (size_t i = 0, len = strlen(s); i < len;) {
        const unsigned char *p = (const unsigned char *)s + i;
        char e[8];
        size_t take, elen = sl_config_control_escape(p, len - i, e, &take);

        if (elen)
            fwrite(e, 1, elen, out);
        else if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else
            fputc(*p, out);
        i += take;
    }
    fputc('"', out);
}

/* Number of leading dotted components two key paths share, not counting the last
 * component of either (the leaf). */
static int
common_sections(const char *a, const char *b)
{
    int n = 0;

    for (;;) {
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        if (!a[la] || !b[lb] || la != lb || strncmp(a, b, la) != 0)
            return n;
        n++;
        a += la + 1;
        b += lb + 1;
    }
}

sl_status_t
sl_config_write_yaml(const sl_config_t *cfg, FILE *out)
{
    const char *prev = "";
    char buf[512];

    fputs("# shoal configuration, every key resolved (see doc/config.md)\n", out);
    for (size_t i = 0; i < sl_config_nkeys; i++) {
        const entry_t *e = &sl_config_schema[i];
        const char *k = e->key;
        int shared = common_sections(prev, k), depth = 0;

        /* open the sections this key needs beyond those of the previous key */
        for (;;) {
            size_t len = strcspn(k, ".");
            if (!k[len])
                break;
            if (depth >= shared)
                fprintf(out, "%*s%.*s:\n", 2 * depth, "", (int)len, k);
            depth++;
            k += len + 1;
        }
        fprintf(out, "%*s%s:", 2 * depth, "", k);
        if (e->type == T_LAYERS) {
            fputc('\n', out);
            for (int l = 0; l < cfg->model.nlayers; l++)
                fprintf(out, "%*s- {lstm: %d, projection: %d}\n", 2 * depth + 2, "",
                        cfg->model.layers[l].hidden, cfg->model.layers[l].projection);
        } else if (e->type == T_PERIODS) {
            fputs(cfg->sync.nperiod_rules > 0 ? "\n" : " []\n", out);
            for (int r = 0; r < cfg->sync.nperiod_rules; r++) {
                const char *m = cfg->sync.period_rule[r].match;
                fprintf(out, "%*s- {match: ", 2 * depth + 2, "");
                write_string(out, m ? m : "");
                fprintf(out, ", period: %d}\n", cfg->sync.period_rule[r].period);
            }
        } else {
            value_t v = sl_config_fetch(cfg, e);
            fputc(' ', out);
            if (e->type == T_STR) {
                write_string(out, v.s ? v.s : "");
            } else {
                sl_config_format_value(e, &v, buf, sizeof buf);
                fputs(buf, out);
            }
            fputc('\n', out);
        }
        prev = e->key;
    }
    if (fflush(out) != 0 || ferror(out))
        return sl_err_set(SL_ERR_IO, "writing the config: %s", strerror(errno));
    return SL_OK;
}

/* "integer >= 1", "number in [0, 1)", "word|char", ... */
static void
type_text(const entry_t *e, char *buf, size_t n)
{
    char lo[32], hi[32];
    const char *base = "number";

    switch (e->type) {
    case T_STR:
        if (e->names)
            sl_config_join_names(e->names, "|", buf, n);
        else
            snprintf(buf, n, "%s", e->shape ? e->shape : "string");
        return;
    case T_ENUM:
        sl_config_join_names(e->names, "|", buf, n);
        return;
    case T_BOOL:
        snprintf(buf, n, "bool");
        return;
    case T_LAYERS:
    case T_PERIODS:
        snprintf(buf, n, "list");
        return;
    case T_U64:
        snprintf(buf, n, "integer >= 0");
        return;
    case T_INT:
    case T_LONG:
        base = "integer";
        break;
    case T_DOUBLE:
        break;
    }
    sl_config_format_double(e->lo, lo, sizeof lo);
    sl_config_format_double(e->hi, hi, sizeof hi);
    if (e->lo_kind != NO_BOUND && e->hi_kind != NO_BOUND)
        snprintf(buf, n, "%s in %c%s, %s%c", base, e->lo_kind == CLOSED ? '[' : '(', lo, hi,
                 e->hi_kind == CLOSED ? ']' : ')');
    else if (e->lo_kind != NO_BOUND)
        snprintf(buf, n, "%s %s %s", base, e->lo_kind == CLOSED ? ">=" : ">", lo);
    else if (e->hi_kind != NO_BOUND)
        snprintf(buf, n, "%s %s %s", base, e->hi_kind == CLOSED ? "<=" : "<", hi);
    else
        snprintf(buf, n, "%s", base);
    if (e->auto_ok) {
        size_t used = strlen(buf);

        snprintf(buf + used, n - used, " or auto");
    }
}

static void
default_text(const entry_t *e, char *buf, size_t n)
{
    const double *per_opt =
        e->derive == D_LR ? sl_config_opt_default_lr : sl_config_opt_default_eps;
    size_t used = 0;
    char d[32];

    if (e->derive == D_DIR) {
        snprintf(buf, n, "runs/<run.name>");
    } else if (e->derive == D_BATCH) {
        snprintf(buf, n, "%d, or train.global_batch / cluster.nodes", SL_CONFIG_DEFAULT_BATCH);
    } else if (e->derive != D_NONE) {
        buf[0] = '\0';
        for (int i = 0; sl_config_opt_names[i] && used < n; i++) {
            sl_config_format_double(per_opt[i], d, sizeof d);
            used += (size_t)snprintf(buf + used, n - used, "%s%s (%s)", i ? ", " : "", d,
                                     sl_config_opt_names[i]);
        }
    } else {
        snprintf(buf, n, "%s", e->def[0] ? e->def : "\"\"");
    }
}

/* --help-config fits a terminal of this many columns. */
#define SCHEMA_COLUMNS 100

/* text at an indent of `indent` columns, broken at spaces (or after '|' in a list of
 * names) so that no line is longer than SCHEMA_COLUMNS; the first line continues a line
 * already `col` columns long. */
static void
print_wrapped(FILE *out, const char *text, int col, int indent)
{
    while (*text) {
        size_t room = (size_t)(SCHEMA_COLUMNS - col), len = strlen(text), cut = len;

        if (len > room) {
            cut = 0;
            for (size_t i = 1; i <= room; i++)
                if (text[i] == ' ' || text[i - 1] == '|')
                    cut = i;
            if (cut == 0) /* one word longer than a line: leave it whole */
                cut = strcspn(text, " ");
        }
        fprintf(out, "%.*s\n", (int)cut, text);
        text += cut;
        while (*text == ' ')
            text++;
        if (*text)
            fprintf(out, "%*s", indent, "");
        col = indent;
    }
}

void
sl_config_print_schema(FILE *out)
{
    char t[256], d[128], head[512];

    fputs("Configuration keys: defaults, then the YAML file, then --set KEY=VALUE.\n"
          "Sections nest in YAML (train: {optimizer: {lr: 0.5}}); --set uses dotted keys.\n\n",
          out);
    fputs("KEY (TYPE; default DEFAULT)\n    MEANING\n", out);
    for (size_t i = 0; i < sl_config_nkeys; i++) {
        type_text(&sl_config_schema[i], t, sizeof t);
        default_text(&sl_config_schema[i], d, sizeof d);
        snprintf(head, sizeof head, "%s (%s; default %s)", sl_config_schema[i].key, t, d);
        print_wrapped(out, head, 0, 4);
        fputs("    ", out);
        print_wrapped(out, sl_config_schema[i].doc, 4, 4);
    }
    fputs("\n", out);
    print_wrapped(out,
                  "model.layers entries: {lstm: H (integer >= 1, the LSTM cell size), "
                  "projection: P (integer >= 0, LSTMP output size; 0 = none)}",
                  0, 2);
    snprintf(head, sizeof head,
             "sync.periods entries (at most %d): {match: GLOB (fnmatch(3) on component names: "
             "embedding.S, lstm.L, proj.L, softmax.S, softmax_bias), period: H (integer >= 1)}; "
             "the first rule that matches a component gives its H; the others keep "
             "sync.embedding_period (row shards) or sync.period. allreduce has no periods",
             SL_MAX_PERIOD_RULES);
    print_wrapped(out, head, 0, 2);
}
