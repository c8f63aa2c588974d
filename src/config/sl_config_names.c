/* Enum names: the one place where the config's strings and enum values meet. The
 * tables serve the schema (sl_config_schema.c); sl_*_name gives a value's name back. */
#include <stdio.h>
#include <string.h>

#include "config/sl_config.h"
#include "config/sl_config_internal.h"

const char *const sl_config_level_names[] = {"word", "char", NULL};
const char *const sl_config_output_names[] = {"full", "sampled", NULL};
const char *const sl_config_opt_names[] = {"sgd", "adagrad", "adam", NULL};
const char *const sl_config_sched_names[] = {"constant", "epoch_decay", "linear", NULL};
const char *const sl_config_precision_names[] = {"fp32", "bf16", "fp16", NULL};
const char *const sl_config_lstm_names[] = {"auto", "cudnn", "fused", NULL};
const char *const sl_config_transport_names[] = {"ipc", "tcp", NULL};
const char *const sl_config_security_names[] = {"curve", "mac", "none", NULL};
const char *const sl_config_allreduce_names[] = {"auto", "ring", NULL};
const char *const sl_config_sync_names[] = {
    "none", "allreduce", "ma", "bmuf", "local-ma", "local-bmuf", "gossip-ma", "gossip-bmuf", NULL};
const char *const sl_config_block_ref_names[] = {"blockstart", "omega", NULL};
const char *const sl_config_exchange_names[] = {"dense", "unique", "allgather", NULL};
const char *const sl_config_compress_names[] = {"fp32", "fp16", "bf16", "int8", "int4", NULL};
const char *const sl_config_rounding_names[] = {"nearest", "stochastic", NULL};

_Static_assert(sizeof(sl_level_t) == sizeof(int) && sizeof(sl_output_kind_t) == sizeof(int) &&
                   sizeof(sl_opt_kind_t) == sizeof(int) && sizeof(sl_sched_kind_t) == sizeof(int) &&
                   sizeof(sl_cluster_transport_t) == sizeof(int) &&
                   sizeof(sl_security_t) == sizeof(int) && sizeof(sl_allreduce_t) == sizeof(int) &&
                   sizeof(sl_exchange_t) == sizeof(int) && sizeof(sl_compress_t) == sizeof(int) &&
                   sizeof(sl_rounding_t) == sizeof(int),
               "enum fields are stored as int");

int
sl_config_count_names(const char *const *names)
{
    int n = 0;

    while (names[n])
        n++;
    return n;
}

static const char *
enum_name(const char *const *names, int v)
{
    return v >= 0 && v < sl_config_count_names(names) ? names[v] : "?";
}

const char *
sl_level_name(sl_level_t v)
{
    return enum_name(sl_config_level_names, (int)v);
}

const char *
sl_output_name(sl_output_kind_t v)
{
    return enum_name(sl_config_output_names, (int)v);
}

const char *
sl_opt_name(sl_opt_kind_t v)
{
    return enum_name(sl_config_opt_names, (int)v);
}

const char *
sl_sched_name(sl_sched_kind_t v)
{
    return enum_name(sl_config_sched_names, (int)v);
}

const char *
sl_cluster_transport_name(sl_cluster_transport_t v)
{
    return enum_name(sl_config_transport_names, (int)v);
}

const char *
sl_security_name(sl_security_t v)
{
    return enum_name(sl_config_security_names, (int)v);
}

const char *
sl_sync_algorithm_name(sl_sync_algorithm_t v)
{
    return enum_name(sl_config_sync_names, (int)v);
}

const char *
sl_block_ref_name(sl_block_ref_t v)
{
    return enum_name(sl_config_block_ref_names, (int)v);
}

const char *
sl_exchange_name(sl_exchange_t v)
{
    return enum_name(sl_config_exchange_names, (int)v);
}

const char *
sl_compress_name(sl_compress_t v)
{
    return enum_name(sl_config_compress_names, (int)v);
}

const char *
sl_rounding_name(sl_rounding_t v)
{
    return enum_name(sl_config_rounding_names, (int)v);
}

/* Index of s (len bytes) in names, -1 if absent. */
int
sl_config_find_name(const char *const *names, const char *s, size_t len)
{
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
            return i;
    return -1;
}

/* "a, b, c" */
void
sl_config_join_names(const char *const *names, const char *sep, char *buf, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; names[i] && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? sep : "", names[i]);
}
