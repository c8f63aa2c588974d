/* Shared-memory lanes (see sl_shm_lane.h): a sealed memfd per (sender, receiver)
 * pair, a head page with the lane's identity and one state word per slot, then the
 * slots. */
#include "transport/sl_shm_lane.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_rng.h"

#define LANE_MAGIC 0x4d4853414f4853ULL /* "SHOASHM" read as little-endian bytes */
#define HEAD_BYTES 4096u
#define STATE_AT(i) (64u + 64u * (i))           /* one cache line per slot state */
#define PUBLISHED_AT STATE_AT(SL_SHM_MAX_SLOTS) /* u64: publications so far */
#define SLEEPING_AT (PUBLISHED_AT + 64u)        /* u32: 1 while the receiver blocks */
#define PAGE 4096u
#define LANE_NAME_MAX 64 /* "shoal-lane-<run id>-<sender>-<receiver>" */
_Static_assert(SLEEPING_AT + 64u <= HEAD_BYTES, "the head holds the slot states and the doorbell");

enum { SLOT_FREE = 0, SLOT_FULL = 1, SLOT_TAKEN = 2 };

struct sl_shm_lane {
    unsigned char *base; /* head, then the slots */
    size_t bytes;
    uint64_t nonce;
    uint64_t slot_bytes;
    uint32_t nslots;
    int fd; /* sender: the memfd, kept open so receivers can open it; else -1 */
};

void
sl_shm_offer_encode(const sl_shm_offer_t *o, unsigned char out[SL_SHM_OFFER_BYTES])
{
    memset(out, 0, SL_SHM_OFFER_BYTES);
    sl_put_u64(out, o->boot_id);
    sl_put_u64(out + 8, o->nonce);
    sl_put_u64(out + 16, o->run_id);
    sl_put_u64(out + 24, o->slot_bytes);
    sl_put_u32(out + 32, o->pid);
    sl_put_u32(out + 36, (uint32_t)o->fd);
    sl_put_u32(out + 40, o->nslots);
    sl_put_u32(out + 44, o->netns);
}

void
sl_shm_offer_decode(const unsigned char in[SL_SHM_OFFER_BYTES], sl_shm_offer_t *o)
{
    o->boot_id = sl_get_u64(in);
    o->nonce = sl_get_u64(in + 8);
    o->run_id = sl_get_u64(in + 16);
    o->slot_bytes = sl_get_u64(in + 24);
    o->pid = sl_get_u32(in + 32);
    o->fd = (int32_t)sl_get_u32(in + 36);
    o->nslots = sl_get_u32(in + 40);
    o->netns = sl_get_u32(in + 44);
}

sl_status_t
sl_shm_boot_id(uint64_t *out)
{
    char buf[64];
    size_t n;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    if (!f)
        return sl_err_set(SL_ERR_IO, "/proc/sys/kernel/random/boot_id: %s", strerror(errno));
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n < 16)
        return sl_err_set(SL_ERR_IO, "/proc/sys/kernel/random/boot_id: too short");
    *out = sl_hash_bytes(buf, n, LANE_MAGIC);
    return SL_OK;
}

sl_status_t
sl_shm_netns(uint32_t *out)
{
    struct stat sb;

    if (stat("/proc/self/ns/net", &sb) != 0)
        return sl_err_set(SL_ERR_IO, "/proc/self/ns/net: %s", strerror(errno));
    /* folded, should a kernel ever number namespaces beyond 32 bits */
    *out = (uint32_t)((uint64_t)sb.st_ino ^ (uint64_t)sb.st_ino >> 32);
    return SL_OK;
}

static _Atomic uint32_t *
state(const sl_shm_lane_t *l, uint32_t slot)
{
    return (_Atomic uint32_t *)(void *)(l->base + STATE_AT(slot));
}

static _Atomic uint64_t *
published(const sl_shm_lane_t *l)
{
    return (_Atomic uint64_t *)(void *)(l->base + PUBLISHED_AT);
}

static _Atomic uint32_t *
sleeping(const sl_shm_lane_t *l)
{
    return (_Atomic uint32_t *)(void *)(l->base + SLEEPING_AT);
}

static unsigned char *
slot_mem(const sl_shm_lane_t *l, uint32_t slot)
{
    return l->base + HEAD_BYTES + (size_t)slot * l->slot_bytes;
}

/* The memfd name of the lane of run_id from sender to receiver: what a receiver expects
 * behind the descriptor an offer names, derived from what it knows itself. */
static void
lane_name(char *out, size_t cap, uint64_t run_id, uint32_t sender, uint32_t receiver)
{
    snprintf(out, cap, "shoal-lane-%016llx-%u-%u", (unsigned long long)run_id, (unsigned)sender,
             (unsigned)receiver);
}

static sl_status_t
check_sizes(uint32_t nslots, uint64_t slot_bytes)
{
    if (nslots == 0 || nslots > SL_SHM_MAX_SLOTS || slot_bytes == 0 ||
        slot_bytes > SL_SHM_MAX_SLOT_BYTES || slot_bytes % PAGE)
        return sl_err_set(SL_ERR_INVALID,
                          "shared-memory lane: %u slots of %llu bytes: need 1..%u slots of "
                          "whole pages, at most %llu bytes",
                          (unsigned)nslots, (unsigned long long)slot_bytes, SL_SHM_MAX_SLOTS,
                          (unsigned long long)SL_SHM_MAX_SLOT_BYTES);
    return SL_OK;
}

sl_status_t
sl_shm_lane_create(sl_shm_lane_t **out, uint64_t run_id, uint32_t sender, uint32_t receiver,
                   uint32_t nslots, uint64_t slot_bytes, sl_shm_offer_t *offer)
{
    sl_shm_lane_t *l;
    unsigned char *h;
    sl_status_t st;
    struct timespec ts;
    char name[LANE_NAME_MAX];

    *out = NULL;
    slot_bytes = (slot_bytes + PAGE - 1) / PAGE * PAGE;
    SL_TRY(check_sizes(nslots, slot_bytes));
    memset(offer, 0, sizeof *offer);
    SL_TRY(sl_shm_boot_id(&offer->boot_id));
    SL_TRY(sl_shm_netns(&offer->netns));
    l = calloc(1, sizeof *l);
    if (!l)
        return sl_err_set(SL_ERR_NOMEM, "shared-memory lane: out of memory");
    l->nslots = nslots;
    l->slot_bytes = slot_bytes;
    l->bytes = HEAD_BYTES + (size_t)nslots * slot_bytes;
    lane_name(name, sizeof name, run_id, sender, receiver);
    l->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (l->fd < 0) {
        st = sl_err_set(SL_ERR_IO, "shared-memory lane: memfd_create: %s", strerror(errno));
        goto fail;
    }
    if (ftruncate(l->fd, (off_t)l->bytes) != 0 ||
        fcntl(l->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        st = sl_err_set(SL_ERR_IO, "shared-memory lane: sizing and sealing %zu bytes: %s",
                        l->bytes, strerror(errno));
        goto fail;
    }
    l->base = mmap(NULL, l->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, l->fd, 0);
    if (l->base == MAP_FAILED) {
        l->base = NULL;
        st = sl_err_set(SL_ERR_IO, "shared-memory lane: mapping %zu bytes: %s", l->bytes,
                        strerror(errno));
        goto fail;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    l->nonce = sl_mix64((uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec ^
                        (uintptr_t)l ^ (uint64_t)receiver << 48);
    h = l->base; /* a fresh memfd reads as zeros: every slot starts FREE */
    sl_put_u64(h, LANE_MAGIC);
    sl_put_u64(h + 8, l->nonce);
    sl_put_u64(h + 16, run_id);
    sl_put_u32(h + 24, sender);
    sl_put_u32(h + 28, receiver);
    sl_put_u32(h + 32, nslots);
    sl_put_u64(h + 40, slot_bytes);
    offer->nonce = l->nonce;
    offer->run_id = run_id;
    offer->slot_bytes = slot_bytes;
    offer->pid = (uint32_t)getpid();
    offer->fd = l->fd;
    offer->nslots = nslots;
    *out = l;
    return SL_OK;
fail:
    sl_shm_lane_destroy(&l);
    return st;
}

/* Whether the magic link at path (/proc/PID/fd/N) names the memfd called name: readlink
 * reads it without opening anything. SL_ERR_IO when it cannot be read (no such process
 * or descriptor, not ours to look at), SL_ERR_INVALID naming what it is otherwise. */
static sl_status_t
link_names_lane(const char *path, const char *name, uint32_t sender)
{
    char got[256], want[LANE_NAME_MAX + 8];
    ssize_t n = readlink(path, got, sizeof got - 1);
    size_t len;

    if (n < 0)
        return sl_err_set(SL_ERR_IO, "shared-memory lane of rank %u: %s: %s", (unsigned)sender,
                          path, strerror(errno));
    got[n] = '\0';
    for (ssize_t i = 0; i < n; i++) /* a file name may hold anything: keep the message one line */
        if ((unsigned char)got[i] < 0x20 || got[i] == 0x7f)
            got[i] = '?';
    len = (size_t)snprintf(want, sizeof want, "/memfd:%s", name);
    /* a memfd is never linked anywhere: the kernel may add " (deleted)" */
    if (strncmp(got, want, len) != 0 || (got[len] != '\0' && strcmp(got + len, " (deleted)") != 0))
        return sl_err_set(SL_ERR_INVALID,
                          "shared-memory lane of rank %u: the offer names %s, which is %.80s, "
                          "not that rank's lane",
                          (unsigned)sender, path, got);
    return SL_OK;
}

/* The descriptor an offer names, opened only once it is known to be the sender's lane:
 * named as its lane (link_names_lane), then held by an O_PATH descriptor, which opens
 * nothing (no device's open, no FIFO's wait, no access time) and pins the object, which
 * must still be so named, be a regular file of this user's that no directory holds (an
 * anonymous memfd) and have the lane's size. Only then is it opened for reading and
 * writing, through our own descriptor: O_NOFOLLOW cannot be used, as /proc/PID/fd/N is
 * itself a link, but our descriptor cannot change under us. SL_ERR_IO when it cannot be
 * reached, SL_ERR_INVALID when it is something else; *fd is -1 then. */
static sl_status_t
open_identified(const char *path, const char *name, size_t bytes, uint32_t sender, int *fd)
{
    char held[64];
    struct stat sb;
    int pfd;
    sl_status_t st;

    *fd = -1;
    SL_TRY(link_names_lane(path, name, sender));
    pfd = open(path, O_PATH | O_CLOEXEC);
    if (pfd < 0)
        return sl_err_set(SL_ERR_IO, "shared-memory lane of rank %u: %s: %s", (unsigned)sender,
                          path, strerror(errno));
    snprintf(held, sizeof held, "/proc/self/fd/%d", pfd);
    /* the sender may have put something else at that descriptor since the first look */
    st = link_names_lane(held, name, sender);
    if (st == SL_OK && (fstat(pfd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != getuid() ||
                        sb.st_nlink != 0 || (size_t)sb.st_size != bytes))
        st = sl_err_set(SL_ERR_INVALID,
                        "shared-memory lane of rank %u: %s is not an unlinked file of this user's "
                        "of %zu bytes",
                        (unsigned)sender, path, bytes);
    if (st == SL_OK && (*fd = open(held, O_RDWR | O_CLOEXEC | O_NONBLOCK)) < 0)
        st = sl_err_set(SL_ERR_IO, "shared-memory lane of rank %u: %s: %s", (unsigned)sender, path,
                        strerror(errno));
    close(pfd);
    return st;
}

sl_status_t
sl_shm_lane_open(sl_shm_lane_t **out, const sl_shm_offer_t *o, uint64_t run_id, uint32_t sender,
                 uint32_t me)
{
    sl_shm_lane_t *l;
    uint64_t boot;
    uint32_t netns;
    char path[64], name[LANE_NAME_MAX];
    int fd, seals;
    const unsigned char *h;
    sl_status_t st = SL_OK;

    *out = NULL;
    SL_TRY(check_sizes(o->nslots, o->slot_bytes));
    SL_TRY(sl_shm_boot_id(&boot));
    if (o->boot_id != boot)
        return sl_err_set(SL_ERR_UNSUPPORTED, "shared-memory lane of rank %u: another machine",
                          (unsigned)sender);
    SL_TRY(sl_shm_netns(&netns));
    if (o->netns != netns)
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "shared-memory lane of rank %u: another network namespace (another "
                          "host)",
                          (unsigned)sender);
    if (o->run_id != run_id || o->pid == 0 || o->fd < 0)
        return sl_err_set(SL_ERR_INVALID, "shared-memory lane of rank %u: bad offer",
                          (unsigned)sender);
    l = calloc(1, sizeof *l);
    if (!l)
        return sl_err_set(SL_ERR_NOMEM, "shared-memory lane: out of memory");
    l->fd = -1;
    l->nslots = o->nslots;
    l->slot_bytes = o->slot_bytes;
    l->bytes = HEAD_BYTES + (size_t)o->nslots * o->slot_bytes;
    snprintf(path, sizeof path, "/proc/%u/fd/%d", (unsigned)o->pid, (int)o->fd);
    lane_name(name, sizeof name, run_id, sender, me);
    SL_TRY_GOTO(open_identified(path, name, l->bytes, sender, &fd), st, fail);
    /* sealed against shrinking: no access through the mapping can fault past its end */
    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        st = sl_err_set(SL_ERR_INVALID, "shared-memory lane of rank %u: %s is not sealed",
                        (unsigned)sender, path);
        close(fd);
        goto fail;
    }
    l->base = mmap(NULL, l->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (l->base == MAP_FAILED) {
        l->base = NULL;
        st = sl_err_set(SL_ERR_IO, "shared-memory lane of rank %u: mapping: %s", (unsigned)sender,
                        strerror(errno));
        goto fail;
    }
    h = l->base;
    l->nonce = sl_get_u64(h + 8);
    if (sl_get_u64(h) != LANE_MAGIC || l->nonce != o->nonce || sl_get_u64(h + 16) != run_id ||
        sl_get_u32(h + 24) != sender || sl_get_u32(h + 28) != me ||
        sl_get_u32(h + 32) != o->nslots || sl_get_u64(h + 40) != o->slot_bytes) {
        st = sl_err_set(SL_ERR_INVALID,
                        "shared-memory lane of rank %u: its head does not match the offer",
                        (unsigned)sender);
        goto fail;
    }
    *out = l;
    return SL_OK;
fail:
    sl_shm_lane_destroy(&l);
    return st;
}

void
sl_shm_lane_destroy(sl_shm_lane_t **lp)
{
    sl_shm_lane_t *l = lp ? *lp : NULL;

    if (!l)
        return;
    if (l->base)
        munmap(l->base, l->bytes);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
    *lp = NULL;
}

uint64_t
sl_shm_lane_slot_bytes(const sl_shm_lane_t *l)
{
    return l->slot_bytes;
}

uint64_t
sl_shm_lane_nonce(const sl_shm_lane_t *l)
{
    return l->nonce;
}

int
sl_shm_lane_acquire(sl_shm_lane_t *l, unsigned char **mem)
{
    for (uint32_t s = 0; s < l->nslots; s++)
        /* acquire: the receiver's reads of the slot are done before we overwrite it */
        if (atomic_load_explicit(state(l, s), memory_order_acquire) == SLOT_FREE) {
            *mem = slot_mem(l, s);
            return (int)s;
        }
    return -1;
}

int
sl_shm_lane_publish(sl_shm_lane_t *l, int slot)
{
    atomic_store_explicit(state(l, (uint32_t)slot), SLOT_FULL, memory_order_release);
    /* seq_cst against sl_shm_lane_sleep: the receiver sees this count, or we its flag */
    atomic_fetch_add(published(l), 1);
    return atomic_load(sleeping(l)) != 0;
}

int
sl_shm_lane_take(sl_shm_lane_t *l, uint64_t *seen, const unsigned char **mem)
{
    uint64_t now = atomic_load(published(l));

    if (now == *seen)
        return -1;
    for (uint32_t s = 0; s < l->nslots; s++) {
        uint32_t want = SLOT_FULL;
        /* acquire: the sender's writes to the slot are visible once we own it */
        if (atomic_compare_exchange_strong_explicit(state(l, s), &want, SLOT_TAKEN,
                                                    memory_order_acquire, memory_order_relaxed)) {
            *mem = slot_mem(l, s);
            return (int)s; /* more may wait: *seen stays, so the next call looks again */
        }
    }
    *seen = now; /* everything published up to now is taken */
    return -1;
}

int
sl_shm_lane_pending(const sl_shm_lane_t *l, uint64_t seen)
{
    return atomic_load(published(l)) != seen;
}

void
sl_shm_lane_sleep(sl_shm_lane_t *l, int on)
{
    atomic_store(sleeping(l), on ? 1u : 0u);
}

void
sl_shm_lane_release(sl_shm_lane_t *l, uint32_t slot)
{
    if (slot < l->nslots)
        atomic_store_explicit(state(l, slot), SLOT_FREE, memory_order_release);
}
