/* bench_hash: the wire checksum's speed (sl_hash_bulk, src/common/sl_hash.h), alone and
 * fused with the sender's copy (sl_hash_bulk_add_copy), on payloads that stay in L1, in
 * L2, and that do not. Figures only.
 *
 *   bench_hash [--rounds R]
 *
 * Per size, R rounds (default 5) of about 0.5 s of hashes each; the best round's GB/s
 * (the least disturbed by other work on a shared machine). The first lines name the CPU
 * and the path sl_hash_bulk takes on it (avx2, or portable). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_cpu.h"
#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_hash.h"

static volatile uint64_t sink; /* every hash goes here: none is optimized away */

/* GB/s of the best of rounds rounds of reps hashes (copy: fused with a copy to dst). */
static double
best_gbps(const unsigned char *src, unsigned char *dst, size_t bytes, size_t reps, int rounds,
          int copy)
{
    double best = 0.0;

    for (int r = 0; r < rounds; r++) {
        double t0 = sl_clock_now(), dt;

        for (size_t i = 0; i < reps; i++) {
            if (copy) {
                sl_hash_bulk_t s;
                sl_hash_bulk_init(&s, i, bytes);
                sl_hash_bulk_add_copy(&s, dst, src, bytes, 0);
                sink = sl_hash_bulk_final(&s);
            } else {
                sink = sl_hash_bulk(src, bytes, i);
            }
        }
        dt = sl_clock_now() - t0;
        if (dt > 0 && (double)bytes * (double)reps / dt / 1e9 > best)
            best = (double)bytes * (double)reps / dt / 1e9;
    }
    return best;
}

int
main(int argc, char **argv)
{
    static const size_t sizes[] = {16384, 262144, (size_t)4 << 20, (size_t)64 << 20};
    int rounds = 5;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_hash [--rounds R]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 100) {
        fprintf(stderr, "bench_hash: --rounds 1..100\n");
        return 2;
    }
    bench_print_cpu();
    printf("# sl_hash_bulk path: %s\n", sl_hash_bulk_path());
    printf("%-10s %12s %17s\n", "bytes", "hash_GBps", "copy_hash_GBps");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t bytes = sizes[k], reps = (size_t)(5e8 / (double)bytes) + 1;
        unsigned char *src = NULL, *dst = NULL;

        if (SL_ALLOC(&src, bytes, "bench_hash") != SL_OK ||
            SL_ALLOC(&dst, bytes, "bench_hash") != SL_OK) {
            fprintf(stderr, "bench_hash: %s\n", sl_err_msg());
            return 1;
        }
        for (size_t i = 0; i < bytes; i++)
            src[i] = (unsigned char)(i * 131u + (i >> 12));
        printf("%-10zu %12.1f %17.1f\n", bytes, best_gbps(src, dst, bytes, reps, rounds, 0),
               best_gbps(src, dst, bytes, reps, rounds, 1));
        fflush(stdout);
        sl_free(src);
        sl_free(dst);
    }
    return 0;
}
