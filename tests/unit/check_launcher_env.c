/* Tests of the launchers' environment (src/node/sl_launcher_env.c) and Slurm host lists
 * (src/node/sl_hostlist.c): tables of environments as Slurm, Open MPI, PMI and torchrun
 * set them, alone and nested, give the rank, size, local rank and rendezvous; bad
 * values are one line naming the variable; host lists expand as Slurm's do and
 * malformed ones say where they break. No launcher runs: the parsers take the
 * environment as an array. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "node/sl_hostlist.h"
#include "node/sl_launcher_env.h"
#include "test_tool.h"

#define MAX_VARS 12

typedef struct {
    const char *why;
    const char *env[MAX_VARS]; /* NULL-terminated */
    sl_launcher_t launcher;
    int rank, size, local_rank;
    const char *master; /* "HOST:PORT", or NULL for none */
    const char *from;   /* the variables the master came from */
} env_case_t;

/* A Slurm batch step's variables, which every process in the job inherits. */
#define SLURM_JOB "SLURM_JOB_ID=4242", "SLURM_JOB_NODELIST=gpu[05-08]"

static const env_case_t env_cases[] = {
    {"nothing set", {NULL}, SL_LAUNCHER_NONE, -1, -1, -1, NULL, NULL},
    {"srun task 6 of 8, second on its host",
     {SLURM_JOB, "SLURM_STEP_NODELIST=gpu[07-08]", "SLURM_STEP_ID=3", "SLURM_PROCID=6",
      "SLURM_NTASKS=8", "SLURM_LOCALID=1", NULL},
     SL_LAUNCHER_SLURM, 6, 8, 1, "gpu07:24245",
     "SLURM_STEP_NODELIST and SLURM_JOB_ID + SLURM_STEP_ID"},
    {"srun without a step list (old Slurm)",
     {"SLURM_JOB_ID=123456", "SLURM_JOB_NODELIST=a1,b[2-3]", "SLURM_PROCID=0", "SLURM_NTASKS=3",
      NULL},
     SL_LAUNCHER_SLURM, 0, 3, -1, "a1:23456", "SLURM_JOB_NODELIST and SLURM_JOB_ID"},
    {"srun with the deprecated SLURM_NODELIST",
     {"SLURM_JOB_ID=9999", "SLURM_NODELIST=c[3-4]", "SLURM_PROCID=1", "SLURM_NTASKS=2", NULL},
     SL_LAUNCHER_SLURM, 1, 2, -1, "c3:29999", "SLURM_NODELIST and SLURM_JOB_ID"},
    {"srun in the interactive step of salloc (step id near 2^32)",
     {"SLURM_JOB_ID=5", "SLURM_JOB_NODELIST=login1", "SLURM_STEP_ID=4294967290",
      "SLURM_PROCID=0", "SLURM_NTASKS=1", NULL},
     SL_LAUNCHER_SLURM, 0, 1, -1, "login1:27295",
     "SLURM_JOB_NODELIST and SLURM_JOB_ID + SLURM_STEP_ID"},
    {"Slurm ids wrap into the port range",
     {"SLURM_JOB_ID=30000", "SLURM_JOB_NODELIST=n1", "SLURM_PROCID=0", "SLURM_NTASKS=1", NULL},
     SL_LAUNCHER_SLURM, 0, 1, -1, "n1:20000", "SLURM_JOB_NODELIST and SLURM_JOB_ID"},
    {"mpirun inside a Slurm job: Open MPI's rank, the job's first host",
     {SLURM_JOB, "SLURM_STEP_NODELIST=gpu[06-08]", "SLURM_STEP_ID=0", "SLURM_PROCID=1",
      "SLURM_NTASKS=3", "SLURM_LOCALID=0", "OMPI_COMM_WORLD_RANK=9", "OMPI_COMM_WORLD_SIZE=16",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", NULL},
     SL_LAUNCHER_OMPI, 9, 16, 1, "gpu05:24242", "SLURM_JOB_NODELIST and SLURM_JOB_ID"},
    {"mpirun on its own", {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", NULL},
     SL_LAUNCHER_OMPI, 1, 2, -1, NULL, NULL},
    {"MPICH's hydra (PMI)",
     {"PMI_RANK=3", "PMI_SIZE=4", "MPI_LOCALRANKID=3", NULL}, SL_LAUNCHER_PMI, 3, 4, 3, NULL,
     NULL},
    {"torchrun", {"RANK=5", "WORLD_SIZE=16", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1",
                  "MASTER_PORT=29400", "TORCHELASTIC_USE_AGENT_STORE=False", NULL},
     SL_LAUNCHER_TORCHRUN, 5, 16, 1, "10.0.0.1:29400", "MASTER_ADDR:MASTER_PORT"},
    {"torchrun whose agent holds MASTER_PORT (its TCPStore)",
     {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01", "MASTER_PORT=29500",
      "TORCHELASTIC_USE_AGENT_STORE=True", NULL},
     SL_LAUNCHER_TORCHRUN, 0, 2, -1, "gpu01:29501", "MASTER_ADDR:MASTER_PORT + 1"},
    {"torchrun under srun: torchrun's rank and master",
     {SLURM_JOB, "SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "RANK=13",
      "WORLD_SIZE=32", "LOCAL_RANK=5", "MASTER_ADDR=gpu05", "MASTER_PORT=29500", NULL},
     SL_LAUNCHER_TORCHRUN, 13, 32, 5, "gpu05:29500", "MASTER_ADDR:MASTER_PORT"},
    {"torchrun without a master in a Slurm job: the job's (no step)",
     {SLURM_JOB, "SLURM_STEP_ID=7", "RANK=2", "WORLD_SIZE=4", NULL}, SL_LAUNCHER_TORCHRUN, 2, 4,
     -1, "gpu05:24242", "SLURM_JOB_NODELIST and SLURM_JOB_ID"},
    {"a lone RANK is not torchrun",
     {"RANK=3", "PMI_RANK=0", "PMI_SIZE=2", NULL}, SL_LAUNCHER_PMI, 0, 2, -1, NULL, NULL},
    {"MASTER_ADDR is torchrun's only",
     {"MASTER_ADDR=x", "MASTER_PORT=1", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", NULL},
     SL_LAUNCHER_OMPI, 0, 2, -1, NULL, NULL},
};

START_TEST(test_env_matrix)
{
    const env_case_t *c = &env_cases[_i];
    sl_launcher_env_t e;
    char host[256], from[96], master[300];
    int port = 0, found = -1;

    ck_assert_msg(sl_launcher_env_parse(c->env, &e) == SL_OK, "%s: %s", c->why, sl_err_msg());
    ck_assert_msg(e.launcher == c->launcher, "%s: launcher %d (%s)", c->why, (int)e.launcher,
                  e.name);
    ck_assert_msg(e.rank == c->rank && e.size == c->size && e.local_rank == c->local_rank,
                  "%s: rank %d size %d local %d", c->why, e.rank, e.size, e.local_rank);
    ck_assert_msg(sl_launcher_env_master(c->env, e.launcher, &found, host, sizeof host, &port,
                                         from, sizeof from) == SL_OK,
                  "%s: %s", c->why, sl_err_msg());
    if (!c->master) {
        ck_assert_msg(found == 0, "%s: master %s:%d from %s", c->why, host, port, from);
        return;
    }
    ck_assert_msg(found == 1, "%s: no master", c->why);
    snprintf(master, sizeof master, "%s:%d", host, port);
    ck_assert_str_eq(master, c->master);
    ck_assert_str_eq(from, c->from);
    ck_assert(port >= SL_LAUNCHER_SLURM_PORT_BASE || !strncmp(c->from, "MASTER", 6));
}
END_TEST

typedef struct {
    const char *env[MAX_VARS];
    int master; /* the error comes from sl_launcher_env_master, not _parse */
    const char *message;
} bad_env_t;

static const bad_env_t bad_envs[] = {
    {{"SLURM_PROCID=0", "SLURM_NTASKS=x", NULL}, 0,
     "SLURM_NTASKS 'x' is not a number of nodes (1 to 65536)"},
    {{"SLURM_PROCID=4", "SLURM_NTASKS=4", NULL}, 0,
     "SLURM_PROCID '4' is not a rank of 4 nodes (0 to 3)"},
    {{"SLURM_PROCID=-1", "SLURM_NTASKS=4", NULL}, 0,
     "SLURM_PROCID '-1' is not a rank of 4 nodes (0 to 3)"},
    {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=5", NULL}, 0,
     "OMPI_COMM_WORLD_LOCAL_RANK '5' is not a local rank of 2 nodes (0 to 1)"},
    {{"PMI_RANK=0", "PMI_SIZE=99999", NULL}, 0,
     "PMI_SIZE '99999' is not a number of nodes (1 to 65536)"},
    {{"RANK=", "WORLD_SIZE=2", NULL}, 0, "RANK '' is not a rank of 2 nodes (0 to 1)"},
    {{"RANK=0", "WORLD_SIZE=0", NULL}, 0, "WORLD_SIZE '0' is not a number of nodes (1 to 65536)"},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01", NULL}, 1,
     "MASTER_ADDR is set but MASTER_PORT is not; torchrun sets both"},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01 -x", "MASTER_PORT=29500", NULL}, 1,
     "MASTER_ADDR 'gpu01 -x' is not a host name or address"},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01/x", "MASTER_PORT=29500", NULL}, 1,
     "MASTER_ADDR 'gpu01/x' is not a host name or address"},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01", "MASTER_PORT=70000", NULL}, 1,
     "MASTER_PORT '70000' is not a port (1 to 65535)"},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01", "MASTER_PORT=65535",
      "TORCHELASTIC_USE_AGENT_STORE=True", NULL},
     1, "MASTER_PORT '65535' is not a port (1 to 65534)"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=12a", "SLURM_JOB_NODELIST=n1", NULL}, 1,
     "SLURM_JOB_ID '12a' is not a job id"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=12", NULL}, 1,
     "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not; is this a Slurm job?"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=12", "SLURM_STEP_ID=x",
      "SLURM_JOB_NODELIST=n1", NULL},
     1, "SLURM_STEP_ID 'x' is not a step id"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=12", "SLURM_STEP_NODELIST=n[1-2",
      "SLURM_JOB_NODELIST=n[1-2]", NULL},
     1, "SLURM_STEP_NODELIST 'n[1-2' is not a Slurm host list: '[' at byte 2 is not closed"},
    /* values from outside stay one line of printable text, cut at 60 bytes */
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2\n\x1b[2J", NULL}, 0,
     "SLURM_NTASKS '2\\x0a\\x1b[2J' is not a number of nodes (1 to 65536)"},
    {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=gpu01",
      "MASTER_PORT=1234567890123456789012345678901234567890123456789012345678901234567890", NULL},
     1, "MASTER_PORT '123456789012345678901234567890123456789012345678901234567...' is not a port "
        "(1 to 65535)"},
    {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=12", "SLURM_JOB_NODELIST=gpu\xc3\xa9", NULL},
     1, "SLURM_JOB_NODELIST 'gpu\\xc3\\xa9' is not a Slurm host list: '\\xc3' at byte 4 is not a "
        "host name character"},
};

START_TEST(test_env_errors)
{
    const bad_env_t *c = &bad_envs[_i];
    sl_launcher_env_t e;
    char host[256], from[96];
    int port, found;
    sl_status_t st = sl_launcher_env_parse(c->env, &e);

    if (c->master) {
        ck_assert_msg(st == SL_OK, "%s", sl_err_msg());
        st = sl_launcher_env_master(c->env, e.launcher, &found, host, sizeof host, &port, from,
                                    sizeof from);
    }
    ck_assert_int_eq(st, SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), c->message);
}
END_TEST

/* Every host of list, comma-separated. */
static void
expand(const char *list, char *out, size_t size)
{
    long n = -1;
    size_t used = 0;

    ck_assert_msg(sl_hostlist_host(list, "L", 0, NULL, 0, &n) == SL_OK, "%s", sl_err_msg());
    out[0] = '\0';
    for (long i = 0; i < n; i++) {
        char host[64];
        long again;
        ck_assert_msg(sl_hostlist_host(list, "L", i, host, sizeof host, &again) == SL_OK, "%s",
                      sl_err_msg());
        ck_assert_int_eq(again, n);
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? "," : "", host);
    }
}

static const char *const hostlists[][2] = {
    {"node01", "node01"},
    {"host.example.org", "host.example.org"},
    {"node[01-04,07]", "node01,node02,node03,node04,node07"},
    {"a1,b[2-3]", "a1,b2,b3"},
    {"gpu[8-10]", "gpu8,gpu9,gpu10"},
    {"gpu[08-10]", "gpu08,gpu09,gpu10"},
    {"n[001-003],m", "n001,n002,n003,m"},
    {"rack[1-2]-n[01-02]", "rack1-n01,rack1-n02,rack2-n01,rack2-n02"},
    {"c[1-2]s,d[5]", "c1s,c2s,d5"},
    {"x[3,1]", "x3,x1"},
};

START_TEST(test_hostlist_expand)
{
    char got[512];

    expand(hostlists[_i][0], got, sizeof got);
    ck_assert_str_eq(got, hostlists[_i][1]);
}
END_TEST

static const char *const bad_hostlists[][2] = {
    {"", "it is empty"},
    {"node[01-04", "'[' at byte 5 is not closed"},
    {"node]01", "']' at byte 5 has no '['"},
    {"a,,b", "an empty host name at byte 3"},
    {"a,", "an empty host name at byte 3"},
    {",a", "an empty host name at byte 1"},
    {"n[5-3]", "the range 5-3 at byte 3 runs backwards"},
    {"n[]", "']' at byte 3: a range in brackets is N or N-M"},
    {"n[a-b]", "'a' at byte 3: a range in brackets is N or N-M"},
    {"n[1-]", "the range at byte 3 has no end"},
    {"n[1;2]", "';' at byte 4: a range in brackets is N or N-M"},
    {"n[1[2]]", "'[' at byte 4 is inside brackets"},
    {"no de", "' ' at byte 3 is not a host name character"},
    {"n[1-1000000000]", "the number at byte 5 is too long"},
    {"n[0-999999],m[0-1]", "more than 1000000 hosts"},
    {"n[0-999][0-9999]", "more than 1000000 hosts"},
};

START_TEST(test_hostlist_malformed)
{
    char expect[256], host[64];

    snprintf(expect, sizeof expect, "SLURM_JOB_NODELIST '%s' is not a Slurm host list: %s",
             bad_hostlists[_i][0], bad_hostlists[_i][1]);
    ck_assert_int_eq(
        sl_hostlist_host(bad_hostlists[_i][0], "SLURM_JOB_NODELIST", 0, host, sizeof host, NULL),
        SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), expect);
}
END_TEST

/* An index past the end and a host longer than the buffer are errors, not overruns. */
START_TEST(test_hostlist_limits)
{
    char host[8];

    ck_assert_int_eq(sl_hostlist_host("n[1-2]", "L", 2, host, sizeof host, NULL), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "L 'n[1-2]' has 2 hosts, no host 3");
    ck_assert_int_eq(sl_hostlist_host("abcdefgh", "L", 0, host, sizeof host, NULL), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "L: a host name of 'abcdefgh' is longer than 7 bytes");
    ck_assert_int_eq(sl_hostlist_host("abcdef[10-11]", "L", 1, host, sizeof host, NULL),
                     SL_ERR_CONFIG);
    ck_assert_int_eq(sl_hostlist_host("abcde[10-11]", "L", 1, host, sizeof host, NULL), SL_OK);
    ck_assert_str_eq(host, "abcde11");
    /* indexes no host has, LONG_MAX among them (its "host N" is index + 1) */
    ck_assert_int_eq(sl_hostlist_host("n[1-2]", "L", LONG_MAX, host, sizeof host, NULL),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "L 'n[1-2]' has 2 hosts, no host 9223372036854775808");
    ck_assert_int_eq(sl_hostlist_host("n[1-2]", "L", LONG_MIN, host, sizeof host, NULL),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "L 'n[1-2]' has 2 hosts, no host -9223372036854775807");
    ck_assert_int_eq(sl_hostlist_host("n[1-2]", "L", -1, host, sizeof host, NULL), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "L 'n[1-2]' has 2 hosts, no host 0");
}
END_TEST

static Suite *
launcher_env_suite(void)
{
    Suite *s = suite_create("launcher_env");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_loop_test(core, test_env_matrix, 0, sizeof env_cases / sizeof env_cases[0]);
    tcase_add_loop_test(core, test_hostlist_expand, 0, sizeof hostlists / sizeof hostlists[0]);
    tcase_add_loop_test(limits, test_env_errors, 0, sizeof bad_envs / sizeof bad_envs[0]);
    tcase_add_loop_test(limits, test_hostlist_malformed, 0,
                        sizeof bad_hostlists / sizeof bad_hostlists[0]);
    tcase_add_test(limits, test_hostlist_limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(launcher_env_suite());
}
