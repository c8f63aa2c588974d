/* Paths of a configuration made absolute, so that the config.yaml a run saves can be
 * used from any directory (shoal eval, shoal export, a resumed run started elsewhere):
 * a relative path in a configuration is relative to the directory shoal ran in. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/sl_config.h"

/* *path made absolute against cwd: "" and absolute paths stay; a leading "./" goes. */
static sl_status_t
make_absolute(char **path, const char *cwd)
{
    const char *rel = *path;
    size_t n;
    char *abs;

    if (!rel || !*rel || rel[0] == '/')
        return SL_OK;
    while (rel[0] == '.' && rel[1] == '/')
        rel += 2;
    n = strlen(cwd) + 1 + strlen(rel) + 1;
    abs = malloc(n);
    if (!abs)
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    strcpy(abs, cwd);
    if (*rel) {
        if (strcmp(cwd, "/") != 0)
            strcat(abs, "/");
        strcat(abs, rel);
    }
    free(*path);
    *path = abs;
    return SL_OK;
}

sl_status_t
sl_config_absolute_paths(sl_config_t *cfg)
{
    char **keys[] = {&cfg->run.dir,   &cfg->data.train,     &cfg->data.valid,
                     &cfg->data.test, &cfg->data.cache_dir, &cfg->cluster.key_file};
    char cwd[4096];

    if (!getcwd(cwd, sizeof cwd))
        return sl_err_set(SL_ERR_IO, "cannot read the current directory: %s", strerror(errno));
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        SL_TRY(make_absolute(keys[i], cwd));
    return SL_OK;
}
