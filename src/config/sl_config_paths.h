/* Paths around a configuration file: finding the file a command names (here, else
 * among the installed examples), reading its relative data paths beside it, and making
 * every path absolute for the copy a run saves. */
#ifndef SL_CONFIG_PATHS_H
#define SL_CONFIG_PATHS_H

#include "common/sl_status.h"
#include "config/sl_config.h"

/* The file that `shoal train NAME` means, malloc'd into *found: NAME itself when it
 * exists; else, for a bare file name (no '/'), NAME or NAME.yaml in the installed
 * examples ($(pkgdatadir)/conf, or share/shoal/conf beside the running program's
 * bin/, for an install that was moved or staged with DESTDIR). SL_ERR_IO naming NAME
 * and where it looked. */
sl_status_t sl_config_find_file(const char *name, char **found);

/* Relative data.train, data.valid and data.test that the file config_path set (not
 * --set, not defaults) are read beside that file: each becomes DIR/PATH when that
 * exists, and otherwise stays PATH, read from the working directory (the rule before,
 * which configurations written for it keep). SL_ERR_NOMEM. */
sl_status_t sl_config_resolve_data_paths(sl_config_t *cfg, const char *config_path);

/* Makes every file and directory path of cfg absolute against the current directory
 * (run.dir, data.train, valid, test, cache_dir, cluster.key_file; "" stays ""), so that
 * the config works from any directory. SL_ERR_IO when the current
 * directory cannot be read, SL_ERR_NOMEM. */
sl_status_t sl_config_absolute_paths(sl_config_t *cfg);

#endif
