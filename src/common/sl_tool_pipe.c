/* Running gnuplot or dot with generated text on their standard input (sl_tool_pipe.h). */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_tool_pipe.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_file.h"

int
sl_tool_on_path(const char *name)
{
    const char *path = getenv("PATH");
    char file[4096];

    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);

        snprintf(file, sizeof file, "%.*s/%s", (int)len, len ? path : ".", name);
        if (access(file, X_OK) == 0)
            return 1;
        path = end ? end + 1 : NULL;
    }
    return 0;
}

/* Whether the program exited 0 and wrote something to f. */
static int
wrote_output(pid_t pid, sl_atomic_file_t *f)
{
    int status;
    struct stat sb;

    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
           fstat(fileno(f->fp), &sb) == 0 && sb.st_size > 0;
}

int
sl_tool_pipe(const char *tool, const char *const *argv, const char *output,
             sl_tool_writer_fn writer, void *ctx)
{
    sl_atomic_file_t out;
    int fd[2];
    pid_t pid;
    FILE *to;

    if (sl_atomic_open(&out, output) != SL_OK) {
        fprintf(stderr, "%s: %s\n", tool, sl_err_msg());
        return -1;
    }
    if (pipe(fd) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", tool, strerror(errno));
        sl_atomic_abort(&out);
        return -1;
    }
    fflush(NULL); /* nothing buffered may be written twice */
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", tool, strerror(errno));
        close(fd[0]);
        close(fd[1]);
        sl_atomic_abort(&out);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[0], STDIN_FILENO);
        dup2(fileno(out.fp), STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", tool, argv[0], strerror(errno));
        _exit(127);
    }
    close(fd[0]);
    signal(SIGPIPE, SIG_IGN); /* the program dying early shows in its exit status */
    to = fdopen(fd[1], "w");
    if (to) {
        writer(to, ctx);
        fclose(to);
    } else {
        close(fd[1]);
    }
    if (!wrote_output(pid, &out)) {
        fprintf(stderr, "%s: %s failed to write %s\n", tool, argv[0], output);
        sl_atomic_abort(&out);
        return -1;
    }
    if (sl_atomic_commit(&out) != SL_OK) {
        fprintf(stderr, "%s: %s\n", tool, sl_err_msg());
        return -1;
    }
    return 0;
}
