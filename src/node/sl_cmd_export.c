/* shoal export MODEL --format safetensors OUT [--config CONF.yaml] [--set KEY=VALUE]...
 * A model file of format version 4 carries its vocabulary and configuration: nothing
 * else is read. For an older file the configuration (for the vocabulary, which the
 * corpus gives, and the model's shape) is the run's own config.yaml beside MODEL (or
 * one folder up, for a node's node-R/model.bin) unless --config names one. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include "node/sl_cmd.h"
#include "node/sl_cmd_export.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_cli.h"
#include "common/sl_log.h"
#include "config/sl_config.h"
#include "node/sl_checkpoint.h"
#include "node/sl_export.h"
#include "node/sl_help.h"

/* The run's config.yaml for model: beside it, else one folder up; 0 when neither is. */
static int
find_run_config(const char *model, char *buf, size_t size)
{
    const char *slash = strrchr(model, '/');
    int dir = slash ? (int)(slash - model) : 0;
    const char *fmts[] = {"%.*s%sconfig.yaml", "%.*s%s../config.yaml"};

    for (int i = 0; i < 2; i++) {
        snprintf(buf, size, fmts[i], dir, model, slash ? "/" : "");
        if (access(buf, R_OK) == 0)
            return 1;
    }
    return 0;
}

/* An older file: the configuration (conf, else the run's beside the model) and its
 * corpus give the vocabulary. */
static int
export_with_corpus(const char *model, const char *out, const char *conf, const char **sets,
                   int nsets, int version, sl_export_result_t *res)
{
    char found[4096];
    sl_config_t cfg;
    sl_status_t rc;
    int ex = SL_EXIT_OK;

    if (!conf && !find_run_config(model, found, sizeof found))
        return sl_cmd_usage("export",
                            "%s has no metadata (format version %d) and there is no config.yaml "
                            "beside it or one folder up: give --config CONF.yaml",
                            model, version);
    if (!conf)
        conf = found;
    sl_log_info("export",
                "%s has no metadata (format version %d): vocabulary from the corpus of %s", model,
                version, conf);
    sl_config_init(&cfg);
    rc = sl_config_load_file(&cfg, conf);
    for (int i = 0; rc == SL_OK && i < nsets; i++)
        rc = sl_config_set(&cfg, sets[i]);
    if (rc == SL_OK)
        rc = sl_config_validate(&cfg);
    if (rc != SL_OK) {
        fprintf(stderr, "shoal: export: %s\n", sl_err_msg());
        ex = SL_EXIT_USAGE;
    } else if ((rc = sl_export_safetensors(&cfg, model, out, PACKAGE_VERSION, res)) != SL_OK) {
        fprintf(stderr, "shoal: export: %s\n", sl_err_msg());
        ex = rc == SL_ERR_CONFIG ? SL_EXIT_USAGE : SL_EXIT_RUNTIME;
    }
    sl_config_fini(&cfg);
    return ex;
}

/* A model file of version 4 or later: everything from the file. */
static int
export_self_contained(const char *model, const char *out, const char *conf, int nsets,
                      sl_export_result_t *res)
{
    if (conf || nsets)
        sl_log_warn("export", "%s carries its own vocabulary and configuration: %s not used", model,
                    conf && nsets ? "--config and --set are"
                    : conf        ? "--config is"
                                  : "--set is");
    if (sl_export_self_contained(model, out, PACKAGE_VERSION, res) != SL_OK) {
        fprintf(stderr, "shoal: export: %s\n", sl_err_msg());
        return SL_EXIT_RUNTIME;
    }
    return SL_EXIT_OK;
}

int
sl_cmd_export(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *format = NULL, *conf = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    sl_ckpt_info_t info;
    sl_export_result_t res;
    int nsets = 0, ex = -1;

    if (!sets) {
        fprintf(stderr, "shoal: out of memory\n");
        return SL_EXIT_RUNTIME;
    }
    for (int i = 0; i < argc && ex < 0; i++) {
        const char *v;
        int m;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(sl_help_text("export"), stdout);
            ex = SL_EXIT_OK;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--format", &m)) || m) {
            if (!v || strcmp(v, "safetensors") != 0)
                ex = sl_cmd_usage("export", "--format must be safetensors%s%s", v ? ", not " : "",
                                  v ? v : "");
            format = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--config", &m)) || m) {
            if (!v)
                ex = sl_cmd_usage("export", "option '--config' needs a FILE");
            conf = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--set", &m)) || m) {
            if (!v)
                ex = sl_cmd_usage("export", "option '--set' needs KEY=VALUE");
            sets[nsets++] = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            ex = sl_cmd_usage("export", "unknown option '%s'", argv[i]);
        } else if (!model) {
            model = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            ex = sl_cmd_usage("export", "unexpected argument '%s'", argv[i]);
        }
    }
    if (ex < 0 && (!model || !out))
        ex = sl_cmd_usage("export", !model ? "missing MODEL" : "missing OUT");
    if (ex < 0 && !format)
        ex = sl_cmd_usage("export", "missing --format safetensors");
    if (ex >= 0) {
        free(sets);
        return ex;
    }

    if (sl_checkpoint_inspect(model, &info) != SL_OK) {
        fprintf(stderr, "shoal: export: %s\n", sl_err_msg());
        free(sets);
        return SL_EXIT_RUNTIME;
    }
    ex = info.has_meta ? export_self_contained(model, out, conf, nsets, &res)
                       : export_with_corpus(model, out, conf, sets, nsets, info.version, &res);
    if (ex == SL_EXIT_OK)
        printf("shoal: export: %s (step %ld): %d tensors, %zu parameters to %s; vocabulary of "
               "%d and configuration to %s\n",
               model, res.step, res.tensors, res.nparams, out, res.vocab, res.json);
    sl_checkpoint_info_fini(&info);
    free(sets);
    return ex;
}
