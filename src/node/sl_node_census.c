/* Rank 0's census of the nodes (sl_node_census.h): the map at the start, the run-wide
 * tokens/s at the end. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_node_census.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "transport/sl_shm_lane.h"
#include "transport/sl_wire.h"

typedef struct {
    int came; /* the record arrived (rank 0's own always) */
    uint32_t pid, netns;
    uint64_t boot_id;
    char host[SL_CENSUS_HOST_BYTES + 1], device[SL_CENSUS_DEVICE_BYTES + 1];
} record_t;

static void
encode(const record_t *r, unsigned char *out)
{
    memset(out, 0, SL_CENSUS_MAP_BYTES);
    sl_put_u32(out, r->pid);
    sl_put_u64(out + 4, r->boot_id);
    sl_put_u32(out + 12, r->netns);
    memcpy(out + 16, r->host, strnlen(r->host, SL_CENSUS_HOST_BYTES));
    memcpy(out + 16 + SL_CENSUS_HOST_BYTES, r->device, strnlen(r->device, SL_CENSUS_DEVICE_BYTES));
}

/* A peer's record; host and device keep printable bytes only (they go into the log). */
static void
decode(const unsigned char *in, record_t *r)
{
    r->came = 1;
    r->pid = sl_get_u32(in);
    r->boot_id = sl_get_u64(in + 4);
    r->netns = sl_get_u32(in + 12);
    memcpy(r->host, in + 16, SL_CENSUS_HOST_BYTES);
    memcpy(r->device, in + 16 + SL_CENSUS_HOST_BYTES, SL_CENSUS_DEVICE_BYTES);
    r->host[SL_CENSUS_HOST_BYTES] = r->device[SL_CENSUS_DEVICE_BYTES] = '\0';
    for (char *p = r->host; *p; p++)
        *p = *p > ' ' && *p < 127 ? *p : '?';
    for (char *p = r->device; *p; p++)
        *p = *p > ' ' && *p < 127 ? *p : '?';
}

static void
this_node(const char *device, record_t *r)
{
    memset(r, 0, sizeof *r);
    r->came = 1;
    r->pid = (uint32_t)getpid();
    if (sl_shm_boot_id(&r->boot_id) != SL_OK || sl_shm_netns(&r->netns) != SL_OK)
        r->boot_id = r->netns = 0; /* then no lanes either */
    snprintf(r->host, sizeof r->host, "%s", sl_log_host());
    snprintf(r->device, sizeof r->device, "%s", device);
}

static sl_wire_key_t
key_of(uint32_t component, uint32_t peer)
{
    return (sl_wire_key_t){0, component, 0, peer, SL_WIRE_DATA};
}

/* Milliseconds left until deadline (sl_clock_now seconds), at least 0. */
static int
left_ms(double deadline)
{
    double ms = (deadline - sl_clock_now()) * 1000.0;

    return ms > 0 ? (int)ms : 0;
}

/* sl_transport_recv until deadline, in slices that look at *interrupt (may be NULL)
 * between them: SL_ERR_TIMEOUT also when interrupted. */
static sl_status_t
recv_until(sl_transport_t *tr, const sl_wire_key_t *key, void *buf, size_t cap, size_t *got,
           double deadline, volatile sig_atomic_t *interrupt)
{
    sl_status_t st;

    do {
        int ms = left_ms(deadline);
        st = sl_transport_recv(tr, key, buf, cap, got, ms < 100 ? ms : 100);
    } while (st == SL_ERR_TIMEOUT && left_ms(deadline) > 0 && !(interrupt && *interrupt));
    return st;
}

/* Whether rank r's frames to the peers of its machine go through shared-memory lanes,
 * as the transport decides it (sl_link_shm.c): "on", or "off (why)". */
static const char *
lanes(const sl_config_t *cfg, const record_t *all, int n, int r)
{
    int peers = 0;

    if (!cfg->cluster.shared_memory)
        return "off (cluster.shared_memory is false)";
    if (sl_config_bits_per_s(cfg->cluster.emulate.bandwidth) > 0 ||
        cfg->cluster.emulate.latency_ms > 0 || cfg->cluster.emulate.jitter_ms > 0)
        return "off (cluster.emulate)";
    for (int k = 0; k < n; k++)
        peers += k != r && all[k].came && all[r].boot_id && all[k].boot_id == all[r].boot_id &&
                 all[k].netns == all[r].netns;
    return peers ? "on" : "off (no other node on its machine)";
}

static void
log_map(const sl_config_t *cfg, const record_t *all, int n, int timeout_ms)
{
    int hosts = 0, missing = 0;

    for (int r = 0; r < n; r++) {
        int seen = 0;
        for (int k = 0; k < r && !seen; k++)
            seen = all[k].came && strcmp(all[k].host, all[r].host) == 0;
        hosts += all[r].came && !seen;
        missing += !all[r].came;
    }
    sl_log_info("node", "map: %d nodes on %d host%s%s", n, hosts, hosts == 1 ? "" : "s",
                missing ? " (some did not answer)" : "");
    for (int r = 0; r < n; r++)
        if (all[r].came)
            sl_log_info("node", "map: rank %d: host %s, pid %u, device %s, lanes %s", r,
                        all[r].host, (unsigned)all[r].pid, all[r].device, lanes(cfg, all, n, r));
        else
            sl_log_info("node", "map: rank %d: no answer in %.1f s", r, timeout_ms / 1000.0);
}

sl_status_t
sl_census_map(sl_transport_t *tr, const sl_config_t *cfg, const char *device, int timeout_ms,
              volatile sig_atomic_t *interrupt)
{
    int n = (int)sl_transport_size(tr), rank = (int)sl_transport_rank(tr);
    double deadline = sl_clock_now() + timeout_ms / 1000.0;
    unsigned char buf[SL_CENSUS_MAP_BYTES];
    record_t *all;
    size_t got = 0;
    sl_status_t st = SL_OK;

    if (rank != 0) {
        sl_wire_key_t to = key_of(SL_CENSUS_COMPONENT, 0);
        sl_wire_key_t answer = key_of(SL_CENSUS_COMPONENT + 1, 0);
        record_t me;
        this_node(device, &me);
        encode(&me, buf);
        st = sl_transport_send(tr, &to, buf, SL_CENSUS_MAP_BYTES, SL_WIRE_BYTES, 1.0f, 0,
                               timeout_ms);
        if (st == SL_OK)
            st = recv_until(tr, &answer, buf, sizeof buf, &got, deadline, interrupt);
        return st == SL_ERR_TIMEOUT ? SL_OK : st; /* rank 0 is slow: it says so */
    }
    all = calloc((size_t)n, sizeof *all);
    if (!all)
        return sl_err_set(SL_ERR_NOMEM, "node map: out of memory (%d nodes)", n);
    this_node(device, &all[0]);
    for (int r = 1; r < n && st == SL_OK; r++) {
        sl_wire_key_t from = key_of(SL_CENSUS_COMPONENT, (uint32_t)r);
        st = recv_until(tr, &from, buf, sizeof buf, &got, deadline, interrupt);
        if (st == SL_OK && got == SL_CENSUS_MAP_BYTES)
            decode(buf, &all[r]);
        if (st == SL_ERR_TIMEOUT || st == SL_ERR_INVALID) /* not come, or not a record */
            st = SL_OK;
    }
    for (int r = 1; r < n && st == SL_OK; r++) {
        sl_wire_key_t to = key_of(SL_CENSUS_COMPONENT + 1, (uint32_t)r);
        if (all[r].came &&
            sl_transport_send(tr, &to, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, 0) == SL_ERR_SHUTDOWN)
            st = SL_ERR_SHUTDOWN;
    }
    if (st == SL_OK)
        log_map(cfg, all, n, timeout_ms);
    free(all);
    return st;
}

sl_status_t
sl_census_rate(sl_transport_t *tr, double tokens_per_s, int timeout_ms, double *total,
               int *reported)
{
    int n = (int)sl_transport_size(tr), rank = (int)sl_transport_rank(tr);
    double deadline = sl_clock_now() + timeout_ms / 1000.0;
    float rate = (float)tokens_per_s;
    sl_status_t st = SL_OK;

    *total = tokens_per_s;
    *reported = 1;
    if (rank != 0) {
        sl_wire_key_t to = key_of(SL_CENSUS_COMPONENT + 2, 0);
        st = sl_transport_send(tr, &to, &rate, 1, SL_WIRE_FP32, 1.0f, 0, timeout_ms);
        if (st == SL_OK)
            st = sl_transport_wait_sent(tr, left_ms(deadline));
        return st == SL_ERR_TIMEOUT ? SL_OK : st;
    }
    for (int r = 1; r < n && st == SL_OK; r++) {
        sl_wire_key_t from = key_of(SL_CENSUS_COMPONENT + 2, (uint32_t)r);
        size_t got = 0;
        st = sl_transport_recv(tr, &from, &rate, sizeof rate, &got, left_ms(deadline));
        if (st == SL_OK && got == sizeof rate && rate >= 0) {
            *total += rate;
            ++*reported;
        }
        if (st == SL_ERR_TIMEOUT || st == SL_ERR_INVALID)
            st = SL_OK;
    }
    return st;
}
