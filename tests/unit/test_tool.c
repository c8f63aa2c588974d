/* tests/unit/test_tool.c: running one of shoal's command-line tools from a Check test. */
#include "test_tool.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int
test_tool_find(const char *name, char *bin, size_t cap)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(bin, cap, "%s/tools/%s", b ? b : ".", name);
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "%s is not built; skipping the command-line case\n", bin);
        return 0;
    }
    return 1;
}

/* Reads fd to its end into buf (cap bytes, NUL-terminated); what does not fit is read
 * and dropped, so the writer never blocks. */
static void
read_all(int fd, char *buf, size_t cap)
{
    char sink[4096];
    size_t got = 0;
    ssize_t k;

    for (;;) {
        int room = got + 1 < cap;

        k = read(fd, room ? buf + got : sink, room ? cap - 1 - got : sizeof sink);
        if (k <= 0)
            break;
        if (room)
            got += (size_t)k;
    }
    buf[got] = '\0';
    close(fd);
}

int
test_tool_run(const char *bin, char *out, size_t out_cap, char *err, size_t err_cap,
              const char *path, const char *const *args)
{
    const char *argv[32];
    int n = 0, status, po[2], pe[2];
    pid_t pid;

    ck_assert(out_cap > 0 && err_cap > 0);
    argv[n++] = bin;
    while (*args && n < 31)
        argv[n++] = *args++;
    ck_assert_msg(*args == NULL, "test_tool_run: more than 30 arguments");
    argv[n] = NULL;
    ck_assert_int_eq(pipe(po), 0);
    ck_assert_int_eq(pipe(pe), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        close(po[0]);
        close(pe[0]);
        if (path)
            setenv("PATH", path, 1);
        execv(bin, (char *const *)argv);
        _exit(98);
    }
    close(po[1]);
    close(pe[1]);
    read_all(po[0], out, out_cap);
    read_all(pe[0], err, err_cap);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "%s died of signal %d", bin, WTERMSIG(status));
    return WEXITSTATUS(status);
}
