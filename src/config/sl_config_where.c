/* The locations of configuration keys (sl_config_where.h): a small array searched
 * linearly; a configuration sets a few dozen keys at most. */
#include "config/sl_config_where.h"

#include <stdlib.h>
#include <string.h>

#include "config/sl_config.h"

typedef struct {
    char *key, *location;
} where_entry_t;

struct sl_config_where {
    where_entry_t *e;
    size_t n, cap;
};

static where_entry_t *
lookup(const sl_config_where_t *w, const char *key)
{
    for (size_t i = 0; w && i < w->n; i++)
        if (strcmp(w->e[i].key, key) == 0)
            return &w->e[i];
    return NULL;
}

sl_status_t
sl_config_where_note(sl_config_where_t **w, const char *key, const char *location)
{
    where_entry_t *e;
    char *loc;

    if (!*w && !(*w = calloc(1, sizeof **w)))
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    if (!(loc = strdup(location)))
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    if ((e = lookup(*w, key)) != NULL) {
        free(e->location);
        e->location = loc;
        return SL_OK;
    }
    if ((*w)->n == (*w)->cap) {
        size_t cap = (*w)->cap ? 2 * (*w)->cap : 16;
        where_entry_t *grown = realloc((*w)->e, cap * sizeof *grown);
        if (!grown) {
            free(loc);
            return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
        }
        (*w)->e = grown;
        (*w)->cap = cap;
    }
    e = &(*w)->e[(*w)->n];
    if (!(e->key = strdup(key))) {
        free(loc);
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    }
    e->location = loc;
    (*w)->n++;
    return SL_OK;
}

const char *
sl_config_where_find(const sl_config_where_t *w, const char *key)
{
    const where_entry_t *e = lookup(w, key);

    return e ? e->location : NULL;
}

sl_status_t
sl_config_where_copy(sl_config_where_t **dst, const sl_config_where_t *src)
{
    *dst = NULL;
    for (size_t i = 0; src && i < src->n; i++)
        if (sl_config_where_note(dst, src->e[i].key, src->e[i].location) != SL_OK) {
            sl_config_where_destroy(dst);
            return SL_ERR_NOMEM;
        }
    return SL_OK;
}

void
sl_config_where_destroy(sl_config_where_t **w)
{
    if (!w || !*w)
        return;
    for (size_t i = 0; i < (*w)->n; i++) {
        free((*w)->e[i].key);
        free((*w)->e[i].location);
    }
    free((*w)->e);
    free(*w);
    *w = NULL;
}

const char *
sl_config_key_where(const sl_config_t *cfg, const char *key)
{
    return sl_config_where_find(cfg->where, key);
}
