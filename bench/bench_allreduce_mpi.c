/* bench_allreduce_mpi: MPI_Allreduce (sum of floats, in place) timed like
 * bench_allreduce.c, for the same sizes and repetitions, so that bench_allreduce.sh can
 * print the two side by side. Built by that script only when mpicc exists.
 *
 *   mpirun -np N bench_allreduce_mpi [--sizes "256K 1M 4M 16M 64M"]
 * Prints: size, allreduce_ms, busbw_GBps (2(n-1)/n * size / time). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the same as bench_allreduce.c's */
static int
reps_for(size_t bytes)
{
    size_t r = ((size_t)256 << 20) / (bytes ? bytes : 1);

    return r < 5 ? 5 : r > 1000 ? 1000 : (int)r;
}

static size_t
parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    return (size_t)v / sizeof(float) * sizeof(float);
}

int
main(int argc, char **argv)
{
    const char *sizes = "256K 1M 4M 16M 64M";
    int rank, n;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--sizes"))
            sizes = argv[i + 1];
    char *copy = strdup(sizes), *save = NULL;
    if (rank == 0)
        printf("%-8s %12s %10s\n", "size", "mpi_ms", "mpi_GBps");
    for (char *tok = strtok_r(copy, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        size_t bytes = parse_size(tok), count = bytes / sizeof(float);
        int reps = reps_for(bytes);
        float *buf;
        double t0 = 0, t;
        if (!bytes || !(buf = malloc(bytes)))
            continue;
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(i % 7);
        for (int r = 0; r <= reps; r++) {
            if (r == 1) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
            }
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        t = (MPI_Wtime() - t0) / reps;
        if (rank == 0) {
            char name[32];
            if (bytes >= ((size_t)1 << 20))
                snprintf(name, sizeof name, "%zuMiB", bytes >> 20);
            else
                snprintf(name, sizeof name, "%zuKiB", bytes >> 10);
            printf("%-8s %12.3f %10.3f\n", name, t * 1e3,
                   2.0 * (n - 1) / n * (double)bytes / t / 1e9);
            fflush(stdout);
        }
        free(buf);
    }
    free(copy);
    MPI_Finalize();
    return 0;
}
