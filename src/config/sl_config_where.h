/* Where each key of a configuration got its value ("conf/x.yaml:21:10", "--set
 * data.train:1:1"), kept beside the values so that errors found after loading (a
 * missing corpus, a vocabulary too large) can name the line that caused them. Keys
 * that still hold their default have no entry. */
#ifndef SL_CONFIG_WHERE_H
#define SL_CONFIG_WHERE_H

#include <stddef.h>

#include "common/sl_status.h"

/* An owned list of (key, location) pairs; NULL is the empty list. */
typedef struct sl_config_where sl_config_where_t;

/* Records that key was set at location (both copied), replacing an earlier entry of
 * the same key. SL_ERR_NOMEM. */
sl_status_t sl_config_where_note(sl_config_where_t **w, const char *key, const char *location);
/* The location of key, or NULL when it was never set (its default). Borrowed: valid
 * until the list changes. */
const char *sl_config_where_find(const sl_config_where_t *w, const char *key);
/* A deep copy of src into *dst (NULL for an empty src). SL_ERR_NOMEM. */
sl_status_t sl_config_where_copy(sl_config_where_t **dst, const sl_config_where_t *src);
/* Frees the list and sets *w to NULL; accepts NULL. */
void sl_config_where_destroy(sl_config_where_t **w);

#endif
