/* Paths around a configuration (sl_config_paths.h): finding the file a command names,
 * its relative data paths read beside it, and every path made absolute for the copy a
 * run saves. */
#define _POSIX_C_SOURCE 200809L
#include "config/sl_config_paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/sl_config_where.h"

#ifndef SHOAL_CONFDIR
#define SHOAL_CONFDIR "/usr/local/share/shoal/conf"
#endif

static int
exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* <dir of the running program>/../share/shoal/conf into buf (without the "..", when
 * it exists); 0 when unknown. */
static int
confdir_beside_program(char *buf, size_t size)
{
    char exe[PATH_MAX], real[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash;

    if (n <= 0)
        return 0;
    exe[n] = '\0';
    if (!(slash = strrchr(exe, '/')))
        return 0;
    *slash = '\0';
    if (snprintf(buf, size, "%s/../share/shoal/conf", exe) >= (int)size)
        return 0;
    if (realpath(buf, real) && strlen(real) < size)
        strcpy(buf, real);
    return 1;
}

/* dir/name or dir/name.yaml when one exists: malloc'd into *found, 1; else 0. */
static int
find_in(const char *dir, const char *name, char **found)
{
    static const char *const suffixes[] = {"", ".yaml"};

    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char *p = NULL;
        if (asprintf(&p, "%s/%s%s", dir, name, suffixes[i]) < 0)
            return 0;
        if (exists(p)) {
            *found = p;
            return 1;
        }
        free(p);
    }
    return 0;
}

sl_status_t
sl_config_find_file(const char *name, char **found)
{
    char beside[PATH_MAX + 32];
    int have_beside = confdir_beside_program(beside, sizeof beside);

    *found = NULL;
    if (exists(name) || strchr(name, '/')) {
        if (!(*found = strdup(name)))
            return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
        return SL_OK;
    }
    if (find_in(SHOAL_CONFDIR, name, found) || (have_beside && find_in(beside, name, found)))
        return SL_OK;
    return sl_err_set(SL_ERR_IO,
                      "%s: no such file here, nor among the installed examples in %s%s%s", name,
                      SHOAL_CONFDIR, have_beside ? " or " : "", have_beside ? beside : "");
}

/* One key's relative path, read beside the file in dir (see the header). */
static sl_status_t
resolve(char **path, const char *dir)
{
    char *joined = NULL;

    if (!*path || !**path || **path == '/')
        return SL_OK;
    if (asprintf(&joined, "%s/%s", dir, *path) < 0)
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    if (!exists(joined)) {
        free(joined);
        return SL_OK;
    }
    free(*path);
    *path = joined;
    return SL_OK;
}

sl_status_t
sl_config_resolve_data_paths(sl_config_t *cfg, const char *config_path)
{
    struct {
        const char *key;
        char **path;
    } keys[] = {{"data.train", &cfg->data.train},
                {"data.valid", &cfg->data.valid},
                {"data.test", &cfg->data.test}};
    const char *slash = strrchr(config_path, '/');
    size_t plen = strlen(config_path);
    char *dir;
    sl_status_t st = SL_OK;

    if (!slash)
        return SL_OK; /* the file is in the working directory: nothing changes */
    if (!(dir = strndup(config_path, slash == config_path ? 1 : (size_t)(slash - config_path))))
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && st == SL_OK; i++) {
        const char *at = sl_config_key_where(cfg, keys[i].key);
        /* only what this file set: a --set value is relative to the working directory */
        if (at && strncmp(at, config_path, plen) == 0 && at[plen] == ':')
            st = resolve(keys[i].path, dir);
    }
    free(dir);
    return st;
}

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
