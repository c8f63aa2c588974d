/* Unit tests of src/common: errors, RNG determinism, hashing, atomic files (the previous
 * file kept, a link at the temp path not followed, stale temp files removed), log lines
 * (time and host, the terse format, SHOAL_LOG values that are no level). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_alloc.h"
#include "common/sl_meminfo.h"
#include "common/sl_file.h"
#include "common/sl_half.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "common/sl_sort.h"
#include "common/sl_status.h"

#include "test_tool.h"

START_TEST(test_err_set_and_prefix)
{
    sl_status_t st = sl_err_set(SL_ERR_IO, "%s: %s", "a.txt", "No such file");
    ck_assert_int_eq(st, SL_ERR_IO);
    ck_assert_str_eq(sl_err_msg(), "a.txt: No such file");
    sl_err_prefix(st, "loading %d", 3);
    ck_assert_str_eq(sl_err_msg(), "loading 3: a.txt: No such file");
}
END_TEST

START_TEST(test_rng_counter_based)
{
    sl_rng_t a, b;
    sl_rng_init(&a, 42);
    sl_rng_init(&b, 42);
    for (int i = 0; i < 5; i++)
        sl_rng_u64(&a);
    b.counter = 5; /* resuming from a saved counter gives the same stream */
    ck_assert_uint_eq(sl_rng_u64(&a), sl_rng_u64(&b));
    ck_assert_uint_eq(sl_rng_at(42, 6), sl_rng_u64(&a));
    ck_assert_uint_ne(sl_rng_at(42, 0), sl_rng_at(43, 0));
    /* uniform draws stay in [0, 1) and average near 1/2 */
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = sl_rng_double(&a);
        ck_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    ck_assert_double_eq_tol(sum / 100000, 0.5, 0.01);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_lt(sl_rng_below(&a, 7), 7);
}
END_TEST

START_TEST(test_hash_split_independent)
{
    unsigned char buf[100];
    for (int i = 0; i < 100; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    uint64_t whole = sl_hash_bytes(buf, sizeof buf, 9);
    for (size_t cut = 0; cut <= 100; cut += 3) {
        sl_hash_t s;
        sl_hash_init(&s, 9);
        sl_hash_update(&s, buf, cut);
        sl_hash_update(&s, buf + cut, 100 - cut);
        ck_assert_uint_eq(sl_hash_final(&s), whole);
    }
    /* no bytes, from no buffer (a share of no ids): nothing changes */
    {
        sl_hash_t s;
        sl_hash_init(&s, 9);
        sl_hash_update(&s, buf, 5);
        sl_hash_update(&s, NULL, 0);
        sl_hash_update(&s, buf + 5, 95);
        sl_hash_update(&s, NULL, 0);
        ck_assert_uint_eq(sl_hash_final(&s), whole);
    }
    ck_assert_uint_eq(sl_hash_bytes(NULL, 0, 9), sl_hash_bytes(buf, 0, 9));
    buf[50] ^= 1;
    ck_assert_uint_ne(sl_hash_bytes(buf, sizeof buf, 9), whole);
    ck_assert_uint_ne(sl_hash_bytes(buf, 99, 9), sl_hash_bytes(buf, 100, 9));
}
END_TEST

/* sl_hash_bulk as its comment in sl_hash.c defines it, one word at a time. */
static uint64_t
bulk_reference(const unsigned char *p, size_t n, uint64_t seed)
{
    const uint64_t step = 0x9e3779b97f4a7c15ULL, p1 = 0x9e3779b185ebca87ULL,
                   p2 = 0xc2b2ae3d27d4eb4fULL;
    uint64_t acc[8], key0[8], h;

    for (unsigned i = 0; i < 8; i++) {
        acc[i] = sl_mix64(seed + i);
        key0[i] = sl_mix64(seed ^ (p2 + i));
    }
    for (size_t w = 0; 8 * w < n; w++) {
        uint64_t d = 0, x;
        size_t take = n - 8 * w < 8 ? n - 8 * w : 8;
        for (size_t b = 0; b < take; b++)
            d |= (uint64_t)p[8 * w + b] << (8 * b);
        x = d ^ (key0[w % 8] + (uint64_t)(w / 8 + 1) * step);
        acc[w % 8] += (x & 0xffffffffu) * (x >> 32);
        acc[(w % 8) ^ 1] += d;
    }
    h = sl_mix64(seed ^ (uint64_t)n * p1);
    for (unsigned i = 0; i < 8; i++)
        h = sl_mix64(h + acc[i]);
    return h;
}

START_TEST(test_hash_bulk)
{
    enum { N = 1000 };
    unsigned char buf[N + 8], moved[N];
    sl_rng_t r;

    sl_rng_init(&r, 5);
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)sl_rng_below(&r, 256);
    /* every length around the 64-byte blocks and the 8-byte words, at odd offsets */
    for (size_t n = 0; n <= 300; n++)
        for (size_t at = 0; at < 8; at += 3)
            ck_assert_uint_eq(sl_hash_bulk(buf + at, n, 77), bulk_reference(buf + at, n, 77));
    ck_assert_uint_eq(sl_hash_bulk(buf, N, 3), bulk_reference(buf, N, 3));
    /* any flipped bit, the length and the seed change it, and so do swapped blocks */
    uint64_t whole = sl_hash_bulk(buf, N, 3);
    for (size_t bit = 0; bit < 8 * N; bit += 37) {
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        ck_assert_uint_ne(sl_hash_bulk(buf, N, 3), whole);
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    ck_assert_uint_ne(sl_hash_bulk(buf, N - 1, 3), whole);
    ck_assert_uint_ne(sl_hash_bulk(buf, N, 4), whole);
    memcpy(moved, buf, N);
    memcpy(moved, buf + 64, 64);
    memcpy(moved + 64, buf, 64);
    ck_assert_uint_ne(sl_hash_bulk(moved, N, 3), whole);
    ck_assert_uint_ne(sl_hash_bulk(buf, N, 3), sl_hash_bytes(buf, N, 3));
    /* in pieces cut at 64-byte blocks, added in any order: the same value */
    for (size_t cut = 64; cut < N; cut += 192) {
        sl_hash_bulk_t s;
        sl_hash_bulk_init(&s, 3, N);
        sl_hash_bulk_add(&s, buf + cut, N - cut, cut);
        sl_hash_bulk_add(&s, buf, cut, 0);
        ck_assert_uint_eq(sl_hash_bulk_final(&s), whole);
    }
    sl_hash_bulk_t s3;
    sl_hash_bulk_init(&s3, 3, N);
    sl_hash_bulk_add(&s3, buf + 128, 320, 128);
    sl_hash_bulk_add(&s3, buf + 448, N - 448, 448);
    sl_hash_bulk_add(&s3, buf, 128, 0);
    ck_assert_uint_eq(sl_hash_bulk_final(&s3), whole);
}
END_TEST

/* sl_hash_bulk_add_copy: the bytes copied exactly and hashed as sl_hash_bulk_add would,
 * whole or in pieces cut at 64-byte blocks, across its copy blocks (16 KiB) and not. */
START_TEST(test_hash_bulk_add_copy)
{
    enum { N = 3 * 16384 + 1000 };
    static unsigned char src[N], dst[N + 1];
    const size_t cuts[] = {0, 64, 16384, 16384 + 4096, 2 * 16384 - 64, N};
    sl_rng_t r;

    sl_rng_init(&r, 9);
    for (size_t i = 0; i < N; i++)
        src[i] = (unsigned char)sl_rng_below(&r, 256);
    for (size_t len = 0; len <= N; len += len < 300 ? 1 : 4099) {
        sl_hash_bulk_t s;

        memset(dst, 0xa5, sizeof dst);
        sl_hash_bulk_init(&s, 11, len);
        sl_hash_bulk_add_copy(&s, dst, src, len, 0);
        ck_assert_uint_eq(sl_hash_bulk_final(&s), sl_hash_bulk(src, len, 11));
        ck_assert(memcmp(dst, src, len) == 0);
        ck_assert_uint_eq(dst[len], 0xa5); /* not a byte more */
    }
    for (size_t c = 1; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
        sl_hash_bulk_t s;

        memset(dst, 0, sizeof dst);
        sl_hash_bulk_init(&s, 11, N);
        sl_hash_bulk_add_copy(&s, dst + cuts[c], src + cuts[c], N - cuts[c], cuts[c]);
        sl_hash_bulk_add_copy(&s, dst, src, cuts[c], 0);
        ck_assert_uint_eq(sl_hash_bulk_final(&s), sl_hash_bulk(src, N, 11));
        ck_assert(memcmp(dst, src, N) == 0);
    }
}
END_TEST

START_TEST(test_atomic_file)
{
    char dir[] = "/tmp/shoal-check-XXXXXX";
    char path[256], *data;
    size_t len;
    sl_atomic_file_t f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sub/x.bin", dir);
    snprintf(path, sizeof path, "%s/sub/deeper", dir);
    ck_assert_int_eq(sl_file_mkdirs(path), SL_OK);
    rmdir(path);
    snprintf(path, sizeof path, "%s/sub", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/x.bin", dir);
    ck_assert_int_eq(sl_atomic_open(&f, path), SL_OK);
    ck_assert_int_eq(sl_atomic_write(&f, "old", 3), SL_OK);
    ck_assert_int_eq(sl_atomic_commit(&f), SL_OK);
    /* a file where a directory should be, last or within */
    ck_assert_int_eq(sl_file_mkdirs(path), SL_ERR_IO);
    ck_assert_msg(strstr(sl_err_msg(), "x.bin: cannot create directory: Not a directory"), "%s",
                  sl_err_msg());
    snprintf(path, sizeof path, "%s/x.bin/sub", dir);
    ck_assert_int_eq(sl_file_mkdirs(path), SL_ERR_IO);
    snprintf(path, sizeof path, "%s/x.bin", dir);
    /* an aborted rewrite leaves the old content */
    ck_assert_int_eq(sl_atomic_open(&f, path), SL_OK);
    ck_assert_int_eq(sl_atomic_write(&f, "new!", 4), SL_OK);
    sl_atomic_abort(&f);
    ck_assert_int_eq(sl_file_read_all(path, &data, &len), SL_OK);
    ck_assert_uint_eq(len, 3);
    ck_assert_str_eq(data, "old");
    free(data);
    unlink(path);
    rmdir(dir);
    ck_assert_int_eq(sl_file_read_all(path, &data, &len), SL_ERR_IO);
    ck_assert(strstr(sl_err_msg(), "x.bin: No such file") != NULL);
}
END_TEST

/* path's content must be want (a NUL-terminated string). */
static void
assert_content(const char *path, const char *want)
{
    char *data;
    size_t len;

    ck_assert_msg(sl_file_read_all(path, &data, &len) == SL_OK, "%s", sl_err_msg());
    ck_assert_str_eq(data, want);
    free(data);
}

/* commit_keep keeps the replaced file as prev (none the first time); a link planted at
 * the temp path is removed, not written through; something there that cannot be
 * removed (a directory) fails the open with one line naming it. */
START_TEST(test_atomic_keep_and_links)
{
    char dir[] = "/tmp/shoal-check-XXXXXX";
    char path[256], prev[256], tmp[256], victim[256];
    sl_atomic_file_t f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.bin", dir);
    snprintf(prev, sizeof prev, "%s/c.bin.prev", dir);
    snprintf(tmp, sizeof tmp, "%s/c.bin.tmp.%ld", dir, (long)getpid());
    snprintf(victim, sizeof victim, "%s/victim", dir);
    for (int i = 1; i <= 3; i++) {
        char text[8];
        snprintf(text, sizeof text, "gen%d", i);
        ck_assert_int_eq(sl_atomic_open(&f, path), SL_OK);
        ck_assert_int_eq(sl_atomic_write(&f, text, 4), SL_OK);
        ck_assert_int_eq(sl_atomic_commit_keep(&f, prev), SL_OK);
        assert_content(path, text);
        if (i == 1)
            ck_assert_int_ne(access(prev, F_OK), 0);
    }
    assert_content(prev, "gen2");

    test_write_file(victim, "victim", 6);
    ck_assert_int_eq(symlink(victim, tmp), 0);
    ck_assert_int_eq(sl_atomic_open(&f, path), SL_OK);
    ck_assert_int_eq(sl_atomic_write(&f, "gen4", 4), SL_OK);
    ck_assert_int_eq(sl_atomic_commit(&f), SL_OK);
    assert_content(victim, "victim");
    assert_content(path, "gen4");
    assert_content(prev, "gen2"); /* a plain commit keeps nothing */
    ck_assert_int_ne(access(tmp, F_OK), 0);

    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    ck_assert_int_eq(sl_atomic_open(&f, path), SL_ERR_IO);
    ck_assert_msg(strstr(sl_err_msg(), "c.bin.tmp.") && strstr(sl_err_msg(), "Is a directory"),
                  "%s", sl_err_msg());
    ck_assert_int_eq(rmdir(tmp), 0);
    unlink(path);
    unlink(prev);
    unlink(victim);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Only a regular file is replaced: a directory, a link or a FIFO at the path is refused
 * before any temp file exists, and stays as it was. */
START_TEST(test_atomic_only_regular)
{
    char dir[] = "/tmp/shoal-check-XXXXXX";
    char path[256], target[256], tmp[256];
    static const char *const kinds[] = {"a directory", "a symbolic link", "a FIFO"};
    sl_atomic_file_t f;
    struct stat sb;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/out", dir);
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(tmp, sizeof tmp, "%s/out.tmp.%ld", dir, (long)getpid());
    test_write_file(target, "target", 6);
    for (int k = 0; k < 3; k++) {
        if (k == 0)
            ck_assert_int_eq(mkdir(path, 0700), 0);
        else if (k == 1)
            ck_assert_int_eq(symlink(target, path), 0);
        else
            ck_assert_int_eq(mkfifo(path, 0600), 0);
        ck_assert_int_eq(sl_atomic_open(&f, path), SL_ERR_IO);
        ck_assert_msg(strstr(sl_err_msg(), path) && strstr(sl_err_msg(), kinds[k]) &&
                          strstr(sl_err_msg(), "not a regular file"),
                      "%s", sl_err_msg());
        ck_assert_int_ne(access(tmp, F_OK), 0);
        ck_assert_int_eq(lstat(path, &sb), 0);
        ck_assert(k == 0   ? S_ISDIR(sb.st_mode)
                  : k == 1 ? S_ISLNK(sb.st_mode)
                           : S_ISFIFO(sb.st_mode));
        ck_assert_int_eq(k == 0 ? rmdir(path) : unlink(path), 0);
    }
    assert_content(target, "target");
    /* one file under two names is the same; two files are not, nor a missing one */
    ck_assert_int_eq(symlink(target, path), 0);
    ck_assert_int_eq(sl_file_same(path, target), 1);
    ck_assert_int_eq(sl_file_same(target, target), 1);
    unlink(path);
    test_write_file(path, "target", 6);
    ck_assert_int_eq(sl_file_same(path, target), 0);
    unlink(path);
    ck_assert_int_eq(sl_file_same(path, target), 0);
    unlink(target);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Only "<name>.tmp.<digits>" beside name goes; a link there is removed, its target kept. */
START_TEST(test_remove_stale_temps)
{
    static const char *const keep[] = {"c.bin",         "c.bin.prev",  "c.bin.tmp.",
                                       "c.bin.tmp.12a", "d.bin.tmp.7", "c.bin.tmp.1.x",
                                       "xc.bin.tmp.5",  "victim"};
    static const char *const go[] = {"c.bin.tmp.123", "c.bin.tmp.9"};
    char dir[] = "/tmp/shoal-check-XXXXXX";
    char path[256], link[256];
    int removed = -1;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, keep[i]);
        test_write_file(path, "k", 1);
    }
    snprintf(path, sizeof path, "%s/%s", dir, go[0]);
    test_write_file(path, "stale", 5);
    snprintf(path, sizeof path, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/%s", dir, go[1]);
    ck_assert_int_eq(symlink(path, link), 0);
    snprintf(path, sizeof path, "%s/c.bin", dir);
    ck_assert_int_eq(sl_file_remove_stale_temps(path, &removed), SL_OK);
    ck_assert_int_eq(removed, 2);
    for (size_t i = 0; i < sizeof go / sizeof go[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, go[i]);
        ck_assert_msg(access(path, F_OK) != 0 && errno == ENOENT, "%s is still there", go[i]);
    }
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, keep[i]);
        assert_content(path, "k");
        unlink(path);
    }
    ck_assert_int_eq(rmdir(dir), 0);
    snprintf(path, sizeof path, "%s/c.bin", dir);
    ck_assert_int_eq(sl_file_remove_stale_temps(path, &removed), SL_OK); /* no dir: none */
    ck_assert_int_eq(removed, 0);
}
END_TEST

/* Hand-worked conversions: exact values, ties to even, overflow, subnormals, NaN. */
START_TEST(test_half_conversions)
{
    ck_assert_uint_eq(sl_fp32_to_fp16(1.0f), 0x3c00);
    ck_assert_uint_eq(sl_fp32_to_fp16(-2.5f), 0xc100);
    ck_assert_uint_eq(sl_fp32_to_fp16(65504.0f), 0x7bff);
    ck_assert_uint_eq(sl_fp32_to_fp16(65519.0f), 0x7bff);           /* rounds down to the max */
    ck_assert_uint_eq(sl_fp32_to_fp16(65520.0f), 0x7c00);           /* rounds up to inf */
    ck_assert_uint_eq(sl_fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    ck_assert_uint_eq(sl_fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even */
    ck_assert_uint_eq(sl_fp32_to_fp16(5.9604645e-8f), 0x0001);      /* 2^-24 */
    ck_assert_uint_eq(sl_fp32_to_fp16(2.9802322e-8f), 0x0000);      /* 2^-25: tie -> 0 */
    ck_assert_uint_eq(sl_fp32_to_fp16(-1e-30f), 0x8000);
    ck_assert_uint_eq(sl_fp32_to_fp16(sl_f32_from_bits(0x7fc00000u)) & 0x7e00u, 0x7e00);
    ck_assert(sl_fp16_to_fp32(0x3555) == 0.333251953125f);
    ck_assert(sl_fp16_to_fp32(0x0001) == 5.9604645e-8f);
    ck_assert(sl_fp16_to_fp32(0xfc00) == -__builtin_inff());
    for (uint32_t h = 0; h < 0x7c00u; h++) /* every finite half survives the round trip */
        ck_assert_uint_eq(sl_fp32_to_fp16(sl_fp16_to_fp32((uint16_t)h)), h);
    ck_assert_uint_eq(sl_fp32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(sl_fp32_to_bf16(sl_f32_from_bits(0x3f808000u)), 0x3f80); /* tie -> even */
    ck_assert_uint_eq(sl_fp32_to_bf16(sl_f32_from_bits(0x3f818000u)), 0x3f82); /* tie -> even */
    ck_assert_uint_eq(sl_fp32_to_bf16(sl_f32_from_bits(0x3f808001u)), 0x3f81);
    ck_assert(sl_bf16_to_fp32(0xc049) == -3.140625f);
    ck_assert(sl_bf16_to_fp32(sl_fp32_to_bf16(3e38f)) > 2.9e38f);
    ck_assert(sl_bf16_to_fp32(sl_fp32_to_bf16(sl_f32_from_bits(0x7fc00000u))) !=
              sl_bf16_to_fp32(sl_fp32_to_bf16(sl_f32_from_bits(0x7fc00000u))));
}
END_TEST

START_TEST(test_alloc_overflow)
{
    float *p;
    ck_assert_int_eq(SL_ALLOC(&p, (size_t)-1 / 2, "huge"), SL_ERR_NOMEM);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(SL_CALLOC(&p, 100, "small"), SL_OK);
    ck_assert_uint_eq((uintptr_t)p % SL_ALIGN, 0);
    ck_assert(p[99] == 0.0f);
    sl_free(p);
}
END_TEST

/* A block larger than the memory the machine has available is refused before the
 * kernel grants it (overcommit) and kills the process that touches it; a large one
 * that fits is made. Not zeroed: were the check gone, nothing is touched. */
START_TEST(test_alloc_more_than_available)
{
    uint64_t avail = sl_mem_available();
    unsigned char *p;

    if (avail == 0)
        return; /* not Linux: no MemAvailable to weigh against */
    ck_assert_uint_gt(avail, (uint64_t)128 << 20);
    ck_assert_int_eq(SL_ALLOC(&p, (size_t)avail + ((size_t)1 << 30), "a large block"),
                     SL_ERR_NOMEM);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(sl_err_msg(), "a large block: ") == sl_err_msg() &&
                      strstr(sl_err_msg(), " asked for, ") &&
                      strstr(sl_err_msg(), " of memory available to this process"),
                  "%s", sl_err_msg());
    ck_assert_int_eq(SL_ALLOC(&p, (size_t)64 << 20, "64 MiB"), SL_OK);
    sl_free(p);
}
END_TEST

/* Writes text to root/rel, making its folders. */
static void
put(const char *root, const char *rel, const char *text)
{
    char path[512], dir[512];

    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    ck_assert_int_eq(sl_file_mkdirs(dir), SL_OK);
    test_write_file(path, text, strlen(text));
}

/* The memory a process can take, from fake /proc and /sys/fs/cgroup trees: the
 * machine's MemAvailable alone; under a cgroup v2 limit of a job above the process's
 * own cgroup (4 GiB, 3 GiB used of which 1 GiB file cache: 2 GiB left); under a v1
 * limit (1 GiB, 512 MiB used of which 256 MiB cache: 768 MiB left; the root's "no
 * limit" ignored); a cgroup used past its limit (1 byte left, never 0: 0 is "nothing
 * says"); nothing at all. */
START_TEST(test_mem_available)
{
    char root[] = "/tmp/shoal-check-mem-XXXXXX", v2[64], v1[64], over[64], none[64];
    const char *meminfo = "MemTotal:       16777216 kB\nMemAvailable:    8388608 kB\n";

    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(v2, sizeof v2, "%s/v2", root);
    put(v2, "proc/meminfo", meminfo);
    ck_assert_uint_eq(sl_mem_available_at(v2), (uint64_t)8 << 30);
    put(v2, "proc/self/cgroup", "0::/job/step\n");
    put(v2, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    put(v2, "sys/fs/cgroup/job/memory.max", "4294967296\n");
    put(v2, "sys/fs/cgroup/job/memory.current", "3221225472\n");
    put(v2, "sys/fs/cgroup/job/memory.stat", "anon 2147483648\nfile 1073741824\n");
    put(v2, "sys/fs/cgroup/job/step/memory.max", "max\n");
    put(v2, "sys/fs/cgroup/job/step/memory.current", "3221225472\n");
    ck_assert_uint_eq(sl_mem_available_at(v2), (uint64_t)2 << 30);

    snprintf(v1, sizeof v1, "%s/v1", root);
    put(v1, "proc/meminfo", meminfo);
    put(v1, "proc/self/cgroup", "5:cpu,cpuacct:/slurm\n4:memory:/slurm/uid_1/job_2\n0::/\n");
    put(v1, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(v1, "sys/fs/cgroup/memory/memory.usage_in_bytes", "999999999999\n");
    put(v1, "sys/fs/cgroup/memory/slurm/uid_1/job_2/memory.limit_in_bytes", "1073741824\n");
    put(v1, "sys/fs/cgroup/memory/slurm/uid_1/job_2/memory.usage_in_bytes", "536870912\n");
    put(v1, "sys/fs/cgroup/memory/slurm/uid_1/job_2/memory.stat",
        "cache 0\nrss 268435456\ntotal_cache 268435456\n");
    ck_assert_uint_eq(sl_mem_available_at(v1), (uint64_t)768 << 20);

    snprintf(over, sizeof over, "%s/over", root);
    put(over, "proc/self/cgroup", "0::/job\n");
    put(over, "sys/fs/cgroup/cgroup.controllers", "memory\n");
    put(over, "sys/fs/cgroup/job/memory.max", "1000\n");
    put(over, "sys/fs/cgroup/job/memory.current", "5000\n");
    ck_assert_uint_eq(sl_mem_available_at(over), 1);

    snprintf(none, sizeof none, "%s/none", root);
    ck_assert_uint_eq(sl_mem_available_at(none), 0);
    test_remove_tree(root);
}
END_TEST

/* Ascending order, extremes included (x - y would overflow there). */
/* With glibc, after sl_alloc_keep_large_blocks three blocks of 30 MiB come from the
 * heap, and the 90 MiB stay there once freed (glibc's own thresholds, at most 32 and
 * 64 MiB, would map each block or give most of them back). Under AddressSanitizer
 * its allocator stands in for glibc's and takes no settings (its mallopt returns 0). */
START_TEST(test_alloc_keep_large_blocks)
{
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
    size_t bytes = (size_t)30 << 20;
    struct mallinfo2 mi;
    void *p[3];

    ck_assert_int_eq(sl_alloc_keep_large_blocks(), 1);
    for (int i = 0; i < 3; i++) {
        p[i] = malloc(bytes);
        ck_assert_ptr_nonnull(p[i]);
        memset(p[i], i + 1, bytes);
    }
    mi = mallinfo2();
    ck_assert_msg(mi.hblkhd < bytes, "%zu bytes mapped on their own", mi.hblkhd);
    for (int i = 3; i-- > 0;)
        free(p[i]);
    mi = mallinfo2();
    ck_assert_msg(mi.fordblks >= 3 * bytes, "only %zu free bytes kept", mi.fordblks);
#else
    ck_assert_int_eq(sl_alloc_keep_large_blocks(), 0);
#endif
}
END_TEST

START_TEST(test_sort_compare)
{
    int ints[] = {3, INT_MIN, 0, INT_MAX, -1, 3, INT_MIN + 1};
    const int iwant[] = {INT_MIN, INT_MIN + 1, -1, 0, 3, 3, INT_MAX};
    double dbls[] = {2.5, -1e300, 0.0, 1e300, -0.5};
    const double dwant[] = {-1e300, -0.5, 0.0, 2.5, 1e300};

    qsort(ints, 7, sizeof *ints, sl_cmp_int);
    ck_assert_mem_eq(ints, iwant, sizeof iwant);
    qsort(dbls, 5, sizeof *dbls, sl_cmp_double);
    ck_assert_mem_eq(dbls, dwant, sizeof dwant);
    int a = INT_MIN, b = INT_MAX;
    ck_assert_int_lt(sl_cmp_int(&a, &b), 0);
    ck_assert_int_gt(sl_cmp_int(&b, &a), 0);
    ck_assert_int_eq(sl_cmp_int(&a, &a), 0);
}
END_TEST

/* Runs sl_log_init, as at a process's start, with SHOAL_LOG=level and SHOAL_LOG_FORMAT=
 * format (NULL: unset), then one debug and one info line tagged "node 3"; returns what went to
 * stderr (malloc'd). */
static char *
log_lines(const char *level, const char *format)
{
    char path[] = "/tmp/shoal-check-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    char *text;

    ck_assert(fd >= 0 && saved >= 0);
    sl_log_set_tag(NULL); /* as a fresh process has them */
    sl_log_set_level(SL_LOG_INFO);
    sl_log_set_format(SL_LOG_FULL);
    fflush(stderr);
    ck_assert_int_eq(dup2(fd, 2), 2);
    close(fd);
    if (level)
        setenv("SHOAL_LOG", level, 1);
    else
        unsetenv("SHOAL_LOG");
    if (format)
        setenv("SHOAL_LOG_FORMAT", format, 1);
    else
        unsetenv("SHOAL_LOG_FORMAT");
    sl_log_init();
    sl_log_set_tag("node 3");
    sl_log_debug("train", "hidden unless debug");
    sl_log_info("train", "step %d", 50);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    text = test_read_file(path, NULL);
    unlink(path);
    ck_assert_ptr_nonnull(text);
    return text;
}

/* The default line: ISO 8601 time in UTC (now, to the millisecond) and this host. */
START_TEST(test_log_full_lines)
{
    char pattern[512], host[256] = "";
    regex_t re;
    regmatch_t m[2];
    char *text = log_lines(NULL, NULL);
    struct tm tm;
    time_t then;

    gethostname(host, sizeof host - 1);
    snprintf(pattern, sizeof pattern,
             "^([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})\\.[0-9]{3}Z %s shoal "
             "node 3: train: info: step 50\n$",
             host);
    ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED), 0);
    ck_assert_msg(regexec(&re, text, 2, m, 0) == 0, "log line: '%s'", text);
    regfree(&re);
    memset(&tm, 0, sizeof tm);
    ck_assert_ptr_nonnull(strptime(text, "%Y-%m-%dT%H:%M:%S", &tm));
    then = timegm(&tm);
    ck_assert_msg(labs((long)(time(NULL) - then)) < 600, "not now in UTC: %s", text);
    ck_assert_str_eq(sl_log_host(), host);
    free(text);

    text = log_lines("debug", "full");
    ck_assert_ptr_nonnull(strstr(text, " shoal node 3: train: debug: hidden unless debug\n"));
    free(text);
}
END_TEST

START_TEST(test_log_terse_and_bad_values)
{
    char *text = log_lines("info", "terse");

    ck_assert_str_eq(text, "shoal node 3: train: info: step 50\n");
    free(text);
    text = log_lines("warn", "terse");
    ck_assert_str_eq(text, "");
    free(text);
    /* a value that is no level: one warning, and the default level (info) */
    text = log_lines("verbose", "terse");
    ck_assert_str_eq(text, "shoal: log: warning: SHOAL_LOG 'verbose' is not one of debug, info, "
                           "warn, error, quiet; using info\n"
                           "shoal node 3: train: info: step 50\n");
    free(text);
    text = log_lines("INFO", "brief");
    ck_assert_msg(strstr(text, " shoal: log: warning: SHOAL_LOG_FORMAT 'brief' is not one of full, "
                               "terse; using full\n") != NULL,
                  "%s", text);
    ck_assert_ptr_nonnull(strstr(text, "shoal: log: warning: SHOAL_LOG 'INFO' is not one of"));
    free(text);
}
END_TEST

static Suite *
common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_err_set_and_prefix);
    tcase_add_test(core, test_rng_counter_based);
    tcase_add_test(core, test_hash_split_independent);
    tcase_add_test(core, test_hash_bulk);
    tcase_add_test(core, test_hash_bulk_add_copy);
    tcase_add_test(core, test_atomic_file);
    tcase_add_test(core, test_atomic_keep_and_links);
    tcase_add_test(core, test_half_conversions);
    tcase_add_test(core, test_log_full_lines);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_alloc_overflow);
    tcase_add_test(limits, test_alloc_more_than_available);
    tcase_add_test(limits, test_mem_available);
    tcase_add_test(limits, test_alloc_keep_large_blocks);
    tcase_add_test(limits, test_sort_compare);
    tcase_add_test(limits, test_atomic_only_regular);
    tcase_add_test(limits, test_remove_stale_temps);
    tcase_add_test(limits, test_log_terse_and_bad_values);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(common_suite());
}
