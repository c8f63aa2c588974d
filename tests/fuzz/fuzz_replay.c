/* Replays a fuzz target's corpus without libFuzzer, for make check: links with one
 * target (fuzz_config.c, fuzz_wire.c, fuzz_model.c, fuzz_corpus.c, fuzz_sync_state.c,
 * fuzz_rendezvous.c, fuzz_hostlist.c, fuzz_runfiles.c) and calls its
 * LLVMFuzzerTestOneInput on every file named on the command line, or in a directory
 * named there (in name order).
 * Without arguments it replays SEED_DIRS (space-separated folders below
 * $SHOAL_SRCDIR, compiled in). A broken invariant aborts inside the target, after the
 * file's name was printed; no file to replay at all is a hard error (exit 99). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on one file's bytes, in an exact-size buffer as libFuzzer passes
 * them (ASan builds see overreads). Returns 0, or -1 when the file cannot be read. */
static int
replay_file(const char *path, size_t size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(size ? size : 1);

    if (!buf)
        abort();
    if (!f || fread(buf, 1, size, f) != size) {
        perror(path);
        if (f)
            fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    printf("%s (%zu bytes)\n", path, size);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    return 0;
}

static int
skip_dot(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* A file, or every file of a directory. Adds the files replayed to *count. */
static int
replay_path(const char *path, int *count)
{
    struct stat sb;
    struct dirent **names;
    int n, rc = 0;

    if (stat(path, &sb) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        (*count)++;
        return replay_file(path, (size_t)sb.st_size);
    }
    n = scandir(path, &names, skip_dot, alphasort);
    if (n < 0) {
        perror(path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
        if (rc == 0 && stat(file, &sb) == 0 && S_ISREG(sb.st_mode)) {
            (*count)++;
            rc = replay_file(file, (size_t)sb.st_size);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int
main(int argc, char **argv)
{
    const char *top = getenv("SHOAL_SRCDIR");
    char dirs[] = SEED_DIRS, *save = NULL;
    int count = 0;

    if (!top)
        top = ".";
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            if (replay_path(argv[i], &count) != 0)
                return 99;
    } else {
        for (char *d = strtok_r(dirs, " ", &save); d; d = strtok_r(NULL, " ", &save)) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", top, d);
            if (replay_path(path, &count) != 0)
                return 99;
        }
    }
    if (count == 0) {
        fprintf(stderr, "%s: no inputs to replay\n", argv[0]);
        return 99;
    }
    /* Check's summary line, so that setup.sh's tally counts each input as a check */
    printf("100%%: Checks: %d, Failures: 0, Errors: 0\n", count);
    return 0;
}
