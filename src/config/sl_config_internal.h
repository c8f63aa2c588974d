/* Internals of src/config shared between its files: the schema's types and tables, typed
 * values, and the loader's state. Private to src/config: nothing outside it includes
 * this header; callers use config/sl_config.h.
 *   sl_config_names.c   enum name tables, sl_*_name
 *   sl_config_schema.c  the schema table and lookups of keys in it
 *   sl_config_value.c   a key's field: store, fetch, format, derived defaults, checks
 *   sl_config_load.c    YAML text into a config, with file:line:column errors
 *   sl_config.c         layers (defaults, file, --set), copies, validation
 *   sl_config_write.c   sl_config_write_yaml, sl_config_print_schema
 * The calls run one way: each file calls only the ones listed above it. */
#ifndef SL_CONFIG_INTERNAL_H
#define SL_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

/* ---- enum names (sl_config_names.c) ---- */

/* NULL-terminated, indexed by the enum's value. */
extern const char *const sl_config_level_names[];
extern const char *const sl_config_output_names[];
extern const char *const sl_config_opt_names[];
extern const char *const sl_config_sched_names[];
extern const char *const sl_config_lstm_names[];
extern const char *const sl_config_precision_names[]; /* precision is a checked string */
extern const char *const sl_config_transport_names[];
extern const char *const sl_config_security_names[];
extern const char *const sl_config_allreduce_names[];
extern const char *const sl_config_sync_names[];
extern const char *const sl_config_block_ref_names[];
extern const char *const sl_config_exchange_names[];
extern const char *const sl_config_compress_names[];
extern const char *const sl_config_rounding_names[];

/* Number of names before the NULL. */
int sl_config_count_names(const char *const *names);
/* Index of s (len bytes, not NUL-terminated) in names, -1 if absent. */
int sl_config_find_name(const char *const *names, const char *s, size_t len);
/* The names joined by sep into buf (n bytes, NUL-terminated, cut when full). */
void sl_config_join_names(const char *const *names, const char *sep, char *buf, size_t n);

/* ---- the schema (sl_config_schema.c) ---- */

/* T_LAYERS (model.layers) and T_PERIODS (sync.periods) are lists of mappings, each
 * read, checked and written by its own code rather than by the scalar paths. */
typedef enum {
    T_STR,
    T_INT,
    T_LONG,
    T_U64,
    T_DOUBLE,
    T_BOOL,
    T_ENUM,
    T_LAYERS,
    T_PERIODS
} key_type_t;
typedef enum { NO_BOUND, CLOSED, OPEN } bound_t;

/* Keys whose default follows another key: run.dir is runs/<run.name>; lr and eps
 * depend on the optimizer; train.batch is train.global_batch split over cluster.nodes
 * when the global batch is given. While such a key still holds the default of the other
 * key's old value, a later layer (file, --set) that changes that key moves it along. */
typedef enum { D_NONE, D_DIR, D_LR, D_EPS, D_BATCH } derive_t;

/* train.batch when train.global_batch is 0 */
#define SL_CONFIG_DEFAULT_BATCH 32

typedef struct {
    const char *key; /* dotted path, e.g. "train.optimizer.lr" */
    key_type_t type;
    size_t off, size; /* the field in sl_config_t */
    const char *def;  /* default as YAML text; NULL when derived */
    derive_t derive;
    double lo, hi; /* bounds (integers: closed bounds only) */
    bound_t lo_kind, hi_kind;
    const char *const *names;    /* T_ENUM: the names; T_STR: the accepted values */
    int nonempty;                /* T_STR: "" is not allowed */
    int (*valid)(const char *s); /* T_STR: extra syntax check, described by expect */
    const char *expect;
    const char *shape; /* T_STR with valid: the type column, e.g. "cpu|cuda|cuda:N" */
    int auto_ok;       /* "auto" is allowed: SL_CONFIG_AUTO (T_DOUBLE) or
                          SL_CONFIG_AUTO_INT (T_INT) */
    const char *doc;
} entry_t;

/* Room for the schema's keys in arrays with one slot per key (load_t.given);
 * sl_config_schema.c checks that the table fits. */
#define SL_CONFIG_MAX_KEYS 128

/* Every key, sections contiguous, in the order sl_config_write_yaml writes them. */
extern const entry_t sl_config_schema[];
extern const size_t sl_config_nkeys; /* entries in sl_config_schema, <= SL_CONFIG_MAX_KEYS */
/* lr and eps defaults per optimizer, indexed by sl_opt_kind_t. */
extern const double sl_config_opt_default_lr[];
extern const double sl_config_opt_default_eps[];
/* The keys of one model.layers entry and of one sync.periods rule, and their names
 * (NULL-terminated, in the same order). */
extern const entry_t sl_config_layer_keys[];
extern const char *const sl_config_layer_key_names[];
extern const entry_t sl_config_rule_keys[];
extern const char *const sl_config_rule_key_names[];

/* The entry of the dotted key path, or NULL when path is a section or unknown. */
const entry_t *sl_config_find_entry(const char *path);
/* Whether name (len bytes from the input: may hold anything) is a key or section
 * directly below parent ("" = top level). */
int sl_config_has_child(const char *parent, const char *name, size_t len);
/* The distinct names directly below parent, in schema order, into names (pointers into
 * the schema's keys, lens their lengths) and a NULL after them; at most max - 1. */
void sl_config_children(const char *parent, const char **names, size_t *lens, size_t max);

/* ---- values (sl_config_value.c) ---- */

typedef struct {
    long long i; /* T_INT, T_LONG, T_BOOL, T_ENUM */
    uint64_t u;  /* T_U64 */
    double d;    /* T_DOUBLE */
    char *s;     /* T_STR: malloc'd when parsed, borrowed when fetched */
} value_t;

/* The field of e in cfg. */
void *sl_config_slot(const sl_config_t *cfg, const entry_t *e);
/* Moves *v into e's field of cfg: a string is taken over (v->s set to NULL) and the old
 * one freed. Not for lists. */
void sl_config_store(sl_config_t *cfg, const entry_t *e, value_t *v);
/* The value of e's field (a string is borrowed). Not for lists. */
value_t sl_config_fetch(const sl_config_t *cfg, const entry_t *e);
/* Whether a and b are the same value of e's type. */
int sl_config_values_equal(const entry_t *e, const value_t *a, const value_t *b);
/* The shortest %g text of d that reads back as d, into buf (n bytes). */
void sl_config_format_double(double d, char *buf, size_t n);
/* The value as text into buf (n bytes): strings raw, enums by name, "auto". */
void sl_config_format_value(const entry_t *e, const value_t *v, char *buf, size_t n);
/* The default of a derived key (e->derive) for cfg as it is now; a string is
 * malloc'd. SL_ERR_NOMEM. */
sl_status_t sl_config_derived_value(const sl_config_t *cfg, const entry_t *e, value_t *v);
/* 1 and what is wrong in why (n bytes) when v breaks e's type range, bounds or names,
 * else 0; shown is the value as the user wrote it, overflow +1/-1 when an integer did
 * not fit in 64 bits. */
int sl_config_bad_value(const entry_t *e, const value_t *v, int overflow, const char *shown,
                        char *why, size_t n);

/* ---- loading (sl_config_load.c) ---- */

typedef struct {
    sl_config_t *cfg;  /* the working copy being filled */
    const char *name;  /* file name, or "--set KEY", for messages */
    size_t col_offset; /* added to columns on line 1 (--set: "KEY=") */
    yaml_document_t *doc;
    unsigned char given[SL_CONFIG_MAX_KEYS]; /* keys this file or --set assigned */
    int note_where;                          /* record where keys are set (not for the defaults) */
} load_t;

/* Records SL_ERR_CONFIG "NAME:LINE:COL: message" at mark m of ld's input and returns it. */
sl_status_t sl_config_err_at(const load_t *ld, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The escape of the character at p (left bytes) when a message or a YAML file cannot
 * hold it as it is, into e, and its length (0: printable); *take the bytes it stands
 * for. */
size_t sl_config_control_escape(const unsigned char *p, size_t left, char e[8], size_t *take);
/* s (len bytes) for a message in buf (n >= 61 bytes): escaped, at most 60 bytes, "..."
 * when cut. Returns buf. */
const char *sl_config_clip(const char *s, size_t len, char *buf, size_t n);
/* SL_ERR_CONFIG for the unknown key s (len bytes) below parent, at m: "did you mean",
 * or the keys parent takes. */
sl_status_t sl_config_unknown_schema_key(const load_t *ld, yaml_mark_t m, const char *parent,
                                         const char *s, size_t len);
/* Frees the globs of rules[0..n) and empties the slots. */
void sl_config_free_rules(sl_period_rule_t *rules, int n);
/* Parses text (len bytes) as one YAML document and applies it at key path ("" = top
 * level) to ld->cfg, marking the keys it sets in ld->given. SL_ERR_CONFIG, SL_ERR_NOMEM;
 * on failure ld->cfg may be partly changed (callers work on a copy). */
sl_status_t sl_config_apply_text(load_t *ld, const char *text, size_t len, const char *path);

#endif
