/* Tests of shared-memory lanes (src/transport/sl_shm_lane.c) and of the transport's use
 * of them: slot states and the doorbell, what an offer must match before a lane is
 * mapped, frames going through lanes between two transports in one process (with more
 * frames held by the receiver than a lane has slots, and with the receiver refusing),
 * and frames from a peer that does not play by the rules: each dropped and counted, its
 * slot freed, never a crash; offers that name something other than the peer's lane (a
 * file, a FIFO, a memfd not quite the lane) refused without opening it; a lane offered
 * from another network namespace (another host) refused although it could be reached.
 * Nothing waits on the clock: the transports are brought to a known state by frames
 * that must arrive in order, and counters are polled under test_util.h's hang guard. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "transport/sl_shm_lane.h"
#include "transport/sl_transport.h"
#include "transport/sl_wire.h"
#include "test_tool.h"
#include "test_util.h"

#define RUN 0x5eed00005107ULL
#define SLOT_BYTES (64u << 10)

static char tmp_root[] = "/tmp/shoal-check-shm-XXXXXX";

/* ---------------------------------------------------------------- the lane itself */

START_TEST(test_lane_slots)
{
    sl_shm_lane_t *out, *in;
    sl_shm_offer_t offer;
    unsigned char *mem;
    const unsigned char *got;
    uint64_t seen = 0;
    int slots[3], taken[3];

    ck_assert_msg(sl_shm_lane_create(&out, RUN, 0, 1, 3, 5000, &offer) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_uint_eq(offer.slot_bytes, 8192); /* whole pages */
    ck_assert_uint_eq(offer.nslots, 3);
    ck_assert_msg(sl_shm_lane_open(&in, &offer, RUN, 0, 1) == SL_OK, "%s", sl_err_msg());
    /* the lowest free slot; none once all are published */
    for (int i = 0; i < 3; i++) {
        slots[i] = sl_shm_lane_acquire(out, &mem);
        ck_assert_int_eq(slots[i], i);
        ck_assert_int_eq(sl_shm_lane_pending(in, seen), i > 0); /* this one not yet */
        memset(mem, 'a' + i, 8192);
        ck_assert_int_eq(sl_shm_lane_publish(out, slots[i]), 0); /* the receiver is awake */
    }
    ck_assert_int_eq(sl_shm_lane_acquire(out, &mem), -1);
    /* the receiver takes each once and sees what was written, through its own mapping */
    ck_assert(sl_shm_lane_pending(in, seen));
    for (int i = 0; i < 3; i++) {
        taken[i] = sl_shm_lane_take(in, &seen, &got);
        ck_assert_int_eq(taken[i], i);
        ck_assert_int_eq(got[0], 'a' + i);
        ck_assert_int_eq(got[8191], 'a' + i);
    }
    ck_assert_int_eq(sl_shm_lane_take(in, &seen, &got), -1);
    /* all looked for: one load from now on */
    ck_assert(!sl_shm_lane_pending(in, seen));
    ck_assert_int_eq(sl_shm_lane_acquire(out, &mem), -1); /* taken is not free */
    sl_shm_lane_release(in, 1);
    sl_shm_lane_release(in, 7); /* out of range: ignored */
    ck_assert_int_eq(sl_shm_lane_acquire(out, &mem), 1);
    ck_assert_int_eq(sl_shm_lane_acquire(out, &mem), 1); /* still free: never published */
    /* the doorbell: a receiver about to block is woken by the next publication */
    sl_shm_lane_sleep(in, 1);
    ck_assert(!sl_shm_lane_pending(in, seen));
    mem[0] = 'z';
    ck_assert_int_eq(sl_shm_lane_publish(out, 1), 1);
    ck_assert(sl_shm_lane_pending(in, seen));
    sl_shm_lane_sleep(in, 0);
    ck_assert_int_eq(sl_shm_lane_take(in, &seen, &got), 1);
    ck_assert_int_eq(got[0], 'z');
    sl_shm_lane_destroy(&out);
    ck_assert_ptr_null(out);
    /* the receiver's mapping outlives the sender's */
    ck_assert_int_eq(got[1], 'b');
    sl_shm_lane_destroy(&in);
    sl_shm_lane_destroy(&in); /* NULL is fine */
}
END_TEST

START_TEST(test_lane_offer_checked)
{
    sl_shm_lane_t *out, *in = NULL;
    sl_shm_offer_t offer, bad;
    unsigned char wire[SL_SHM_OFFER_BYTES];
    char path[] = "/tmp/shoal-check-shm-XXXXXX";
    int plain;

    ck_assert_int_eq(sl_shm_lane_create(&out, RUN, 2, 5, 4, SLOT_BYTES, &offer), SL_OK);
    sl_shm_offer_encode(&offer, wire);
    sl_shm_offer_decode(wire, &bad);
    ck_assert(bad.boot_id == offer.boot_id && bad.nonce == offer.nonce &&
              bad.run_id == offer.run_id && bad.slot_bytes == offer.slot_bytes &&
              bad.pid == offer.pid && bad.fd == offer.fd && bad.nslots == offer.nslots &&
              bad.netns == offer.netns);
    /* each field that does not match: refused with a reason, nothing mapped */
    struct {
        const char *what;
        void (*spoil)(sl_shm_offer_t *o);
    } cases[] = {
        {"another machine", NULL},
        {"another run", NULL},
        {"nonce", NULL},
        {"slot count", NULL},
        {"slot size", NULL},
        {"no such fd", NULL},
        {"another network namespace", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad = offer;
        switch (i) {
        case 0:
            bad.boot_id ^= 1;
            break;
        case 1:
            bad.run_id ^= 1;
            break;
        case 2:
            bad.nonce ^= 1;
            break;
        case 3:
            bad.nslots = 3;
            break;
        case 4:
            bad.slot_bytes += 4096;
            break;
        case 5:
            bad.fd = 100000;
            break;
        case 6:
            bad.netns ^= 1;
            break;
        }
        ck_assert_msg(sl_shm_lane_open(&in, &bad, RUN, 2, 5) != SL_OK, "%s accepted",
                      cases[i].what);
        ck_assert_ptr_null(in);
    }
    bad = offer;
    bad.boot_id ^= 1; /* not forged: a peer on another machine, refused quietly */
    ck_assert_int_eq(sl_shm_lane_open(&in, &bad, RUN, 2, 5), SL_ERR_UNSUPPORTED);
    bad = offer;
    bad.netns ^= 1; /* another host on this kernel: quietly too */
    ck_assert_int_eq(sl_shm_lane_open(&in, &bad, RUN, 2, 5), SL_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(sl_err_msg(), "another network namespace") != NULL, "%s", sl_err_msg());
    ck_assert_int_ne(sl_shm_lane_open(&in, &offer, RUN, 3, 5), SL_OK); /* other sender */
    ck_assert_int_ne(sl_shm_lane_open(&in, &offer, RUN, 2, 4), SL_OK); /* other receiver */
    bad = offer;
    bad.nslots = SL_SHM_MAX_SLOTS + 1;
    ck_assert_int_eq(sl_shm_lane_open(&in, &bad, RUN, 2, 5), SL_ERR_INVALID);
    /* a plain file of the right size is not a sealed lane */
    plain = mkstemp(path);
    ck_assert_int_ge(plain, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(plain, (off_t)(4096 + 4 * (size_t)SLOT_BYTES)), 0);
    bad = offer;
    bad.fd = plain;
    ck_assert_int_eq(sl_shm_lane_open(&in, &bad, RUN, 2, 5), SL_ERR_INVALID);
    ck_assert_msg(strstr(sl_err_msg(), "not that rank's lane") != NULL, "%s", sl_err_msg());
    close(plain);
    ck_assert_int_eq(sl_shm_lane_open(&in, &offer, RUN, 2, 5), SL_OK);
    sl_shm_lane_destroy(&in);
    /* sizes out of bounds are refused before anything is made */
    ck_assert_int_eq(sl_shm_lane_create(&in, RUN, 0, 1, 0, SLOT_BYTES, &bad), SL_ERR_INVALID);
    ck_assert_int_eq(sl_shm_lane_create(&in, RUN, 0, 1, 2, SL_SHM_MAX_SLOT_BYTES + 1, &bad),
                     SL_ERR_INVALID);
    sl_shm_lane_destroy(&out);
}
END_TEST

/* A child in a network namespace of its own (an emulated host, as tests/net/netlab makes)
 * creates a lane to us and offers it: refused as another host's, although its memfd is
 * within reach (one PID namespace: the same offer with our namespace in it maps the
 * lane). Needs the right to make namespaces (root here); without it there is nothing
 * to test, and the case says so on stderr. */
START_TEST(test_lane_other_netns)
{
    sl_shm_offer_t offer;
    sl_shm_lane_t *in = NULL;
    unsigned char wire[SL_SHM_OFFER_BYTES];
    int to_us[2], hold[2], status;
    uint32_t ours;
    char why;
    pid_t pid;

    ck_assert_int_eq(pipe2(to_us, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(hold, O_CLOEXEC), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        sl_shm_lane_t *out;
        char c = 'u';

        close(to_us[0]);
        close(hold[1]);
        if (unshare(CLONE_NEWNET) != 0) {
            int e = errno;
            _exit(write(to_us[1], &c, 1) == 1 && e == EPERM ? 77 : 1);
        }
        if (sl_shm_lane_create(&out, RUN, 2, 5, 2, SLOT_BYTES, &offer) != SL_OK)
            _exit(1);
        c = 'o';
        sl_shm_offer_encode(&offer, wire);
        if (write(to_us[1], &c, 1) != 1 || write(to_us[1], wire, sizeof wire) != sizeof wire)
            _exit(1);
        /* keeps the lane until the parent closes its end */
        _exit(read(hold[0], &c, 1) == 0 ? 0 : 1);
    }
    close(to_us[1]);
    close(hold[0]);
    ck_assert_int_eq(read(to_us[0], &why, 1), 1);
    if (why == 'u') {
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 77, "unshare failed");
        fprintf(stderr, "check_shm: no right to make a network namespace, other_netns not run\n");
        return;
    }
    ck_assert_int_eq(read(to_us[0], wire, sizeof wire), (ssize_t)sizeof wire);
    sl_shm_offer_decode(wire, &offer);
    ck_assert_int_eq(sl_shm_netns(&ours), SL_OK);
    ck_assert_uint_ne(offer.netns, ours);
    ck_assert_int_eq(sl_shm_lane_open(&in, &offer, RUN, 2, 5), SL_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(sl_err_msg(), "another network namespace") != NULL, "%s", sl_err_msg());
    ck_assert_ptr_null(in);
    offer.netns = ours; /* what the check alone keeps out: the lane is there to map */
    ck_assert_msg(sl_shm_lane_open(&in, &offer, RUN, 2, 5) == SL_OK, "%s", sl_err_msg());
    sl_shm_lane_destroy(&in);
    close(hold[1]);
    close(to_us[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

/* ---------------------------------------------------------------- forged offers */

/* An inotify descriptor watching path for opens (IN_OPEN: any open but O_PATH's). */
static int
watch_opens(const char *path)
{
    int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);

    ck_assert_int_ge(in, 0);
    ck_assert_msg(inotify_add_watch(in, path, IN_OPEN) >= 0, "%s: %s", path, strerror(errno));
    return in;
}

/* Whether what `in` watches was opened since; closes in. */
static int
was_opened(int in)
{
    char ev[4096] __attribute__((aligned(8)));
    ssize_t n = read(in, ev, sizeof ev);

    close(in);
    return n > 0;
}

/* A memfd named like a lane (of run, sender 2 to receiver receiver) of bytes. */
static int
memfd_named(uint32_t receiver, size_t bytes)
{
    char name[64];
    int fd;

    snprintf(name, sizeof name, "shoal-lane-%016llx-2-%u", (unsigned long long)RUN,
             (unsigned)receiver);
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0);
    return fd;
}

/* A descriptor a forged offer names, and the path whose opens are watched (NULL: none;
 * "": the descriptor's object itself). */
typedef struct {
    const char *what;
    int fd;
    const char *watched;
} forged_t;

/* An offer of a real lane (2 -> 5), pointed at descriptors of this process that are
 * not that lane: each is refused as not a lane without being opened (inotify sees no
 * open; a FIFO held by an O_PATH descriptor, which any open for reading would wait on
 * forever, does not hang it), and nothing is mapped. */
START_TEST(test_forged_offers_refused)
{
    sl_shm_lane_t *out, *in = NULL;
    sl_shm_offer_t offer, bad;
    char dir[1100], file[1200], link[1200], fifo[1200], proc[64];
    size_t bytes = 4096 + 4 * (size_t)SLOT_BYTES;
    forged_t cases[9];
    int n = 0, fd;

    ck_assert_int_eq(sl_shm_lane_create(&out, RUN, 2, 5, 4, SLOT_BYTES, &offer), SL_OK);
    snprintf(dir, sizeof dir, "%s/forge", tmp_root);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(file, sizeof file, "%s/lane", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    fd = open(file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0); /* a lane's size */
    cases[n++] = (forged_t){"a regular file", fd, file};
    ck_assert_int_eq(symlink(file, link), 0);
    cases[n++] =
        (forged_t){"a symbolic link to it", open(link, O_PATH | O_NOFOLLOW | O_CLOEXEC), file};
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    cases[n++] = (forged_t){"a FIFO", open(fifo, O_PATH | O_CLOEXEC), fifo};
    cases[n++] = (forged_t){"a directory", open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dir};
    cases[n++] = (forged_t){"/dev/null", open("/dev/null", O_RDWR | O_CLOEXEC), NULL};
    cases[n++] = (forged_t){"a lane's name of another pair", memfd_named(4, bytes), ""};
    cases[n++] = (forged_t){"a lane's name, the wrong size", memfd_named(5, bytes - 4096), ""};
    /* named and sized as the lane: opened, but not sealed */
    cases[n++] = (forged_t){"an unsealed memfd", memfd_named(5, bytes), NULL};
    /* sealed as well, but its head is not the lane's */
    fd = memfd_named(5, bytes);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    cases[n++] = (forged_t){"a sealed memfd with no lane head", fd, NULL};
    for (int i = 0; i < n; i++) {
        int watch = -1;

        ck_assert_msg(cases[i].fd >= 0, "%s: %s", cases[i].what, strerror(errno));
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", cases[i].fd);
        if (cases[i].watched)
            watch = watch_opens(cases[i].watched[0] ? cases[i].watched : proc);
        bad = offer;
        bad.fd = cases[i].fd;
        ck_assert_msg(sl_shm_lane_open(&in, &bad, RUN, 2, 5) == SL_ERR_INVALID, "%s: %s",
                      cases[i].what, sl_err_msg());
        ck_assert_ptr_null(in);
        if (watch >= 0)
            ck_assert_msg(!was_opened(watch), "%s was opened", cases[i].what);
        close(cases[i].fd);
    }
    /* the real one still maps */
    ck_assert_msg(sl_shm_lane_open(&in, &offer, RUN, 2, 5) == SL_OK, "%s", sl_err_msg());
    sl_shm_lane_destroy(&in);
    sl_shm_lane_destroy(&out);
}
END_TEST

/* ---------------------------------------------------------------- through a transport */

static void
pair_new(sl_transport_t *t[2], int shm1)
{
    sl_transport_opts_t o;
    const char *eps[2];

    for (uint32_t r = 0; r < 2; r++) {
        sl_transport_opts_default(&o);
        o.run_id = RUN;
        o.rank = r;
        o.size = 2;
        o.timeout_ms = TEST_WAIT_MS;
        o.linger_ms = 0;
        o.shm_slots = 4;
        o.shm_slot_bytes = SLOT_BYTES;
        o.shm = r == 0 || shm1;
        ck_assert_msg(sl_transport_new(&t[r], &o) == SL_OK, "%s", sl_err_msg());
    }
    eps[0] = sl_transport_endpoint(t[0]);
    eps[1] = sl_transport_endpoint(t[1]);
    ck_assert_int_eq(sl_transport_connect(t[0], eps), SL_OK);
    ck_assert_int_eq(sl_transport_connect(t[1], eps), SL_OK);
}

enum { BIG = 8000 }; /* 32000 bytes: over SL_TRANSPORT_SHM_MIN_BYTES, within a slot */

static float
value(unsigned frame, size_t i)
{
    return (float)(frame * 1000 + i % 997);
}

static void
send_frame(sl_transport_t *t, unsigned seq)
{
    static float buf[BIG];
    sl_wire_key_t k = {1, 4, seq, 1, SL_WIRE_DATA};

    for (size_t i = 0; i < BIG; i++)
        buf[i] = value(seq, i);
    ck_assert_msg(sl_transport_send(t, &k, buf, BIG, SL_WIRE_FP32, 1.0f, 0, -1) == SL_OK, "%s",
                  sl_err_msg());
}

static void
recv_frame(sl_transport_t *t, unsigned seq)
{
    static float buf[BIG];
    sl_wire_key_t k = {1, 4, seq, 0, SL_WIRE_DATA};
    size_t got;

    ck_assert_msg(sl_transport_recv(t, &k, buf, sizeof buf, &got, TEST_WAIT_MS) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_uint_eq(got, sizeof buf);
    for (size_t i = 0; i < BIG; i++)
        ck_assert(buf[i] == value(seq, i));
}

/* Makes rank 1 take every offer rank 0 has sent, and rank 0 every answer (an accept,
 * or none): a small frame (on ZeroMQ, like offers and accepts, and in the order sent)
 * from 0 to 1, then one back. Component 9, so the counters of component 4 stay as
 * they are. */
static void
settle(sl_transport_t *t[2])
{
    static uint64_t round;
    float x = 1.0f;
    size_t got;

    round++;
    for (uint32_t from = 0; from < 2; from++) {
        sl_wire_key_t k = {round, 9, 0, 1 - from, SL_WIRE_DATA};
        ck_assert_int_eq(sl_transport_send(t[from], &k, &x, 1, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
        k.peer = from;
        ck_assert_msg(sl_transport_recv(t[1 - from], &k, &x, sizeof x, &got, TEST_WAIT_MS) == SL_OK,
                      "%s", sl_err_msg());
    }
}

START_TEST(test_frames_through_lanes)
{
    sl_transport_t *t[2];
    uint64_t sent, recvd;
    sl_transport_stat_t st;

    pair_new(t, 1);
    send_frame(t[0], 0); /* offers the lane; this one goes over ZeroMQ */
    recv_frame(t[1], 0);
    settle(t);
    sl_transport_shm_frames(t[0], &sent, &recvd);
    ck_assert_uint_eq(sent, 0);
    /* 10 frames, received in reverse: the first 4 fill the lane's slots while they wait
     * in the mailbox, the other 6 go over ZeroMQ */
    for (unsigned s = 1; s <= 10; s++)
        send_frame(t[0], s);
    for (unsigned s = 10; s >= 1; s--)
        recv_frame(t[1], s);
    sl_transport_shm_frames(t[0], &sent, &recvd);
    ck_assert_uint_eq(sent, 4);
    sl_transport_shm_frames(t[1], &sent, &recvd);
    ck_assert_uint_eq(recvd, 4);
    /* released on receipt: the slots serve again */
    for (unsigned s = 11; s <= 16; s++) {
        send_frame(t[0], s);
        recv_frame(t[1], s);
    }
    sl_transport_shm_frames(t[0], &sent, &recvd);
    ck_assert_uint_eq(sent, 10);
    /* counted as what they carry; nothing dropped; small frames stay on ZeroMQ */
    sl_transport_stat(t[1], SL_WIRE_DATA, 4, &st);
    ck_assert_uint_eq(st.recv_msgs, 17);
    ck_assert_uint_eq(st.recv_bytes, 17 * sizeof(float) * BIG);
    for (unsigned r = 1; r < SL_DROP_NREASONS; r++)
        ck_assert_uint_eq(sl_transport_dropped(t[1], r), 0);
    float small[4] = {1, 2, 3, 4}, back[4];
    size_t got;
    sl_wire_key_t k = {2, 4, 0, 1, SL_WIRE_DATA};
    ck_assert_int_eq(sl_transport_send(t[0], &k, small, 4, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    k.peer = 0;
    ck_assert_int_eq(sl_transport_recv(t[1], &k, back, sizeof back, &got, TEST_WAIT_MS), SL_OK);
    ck_assert(back[3] == 4.0f);
    sl_transport_shm_frames(t[0], &sent, &recvd);
    ck_assert_uint_eq(sent, 10);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}
END_TEST

START_TEST(test_receiver_without_shm)
{
    sl_transport_t *t[2];
    uint64_t sent, recvd;

    pair_new(t, 0);
    for (unsigned s = 0; s < 3; s++) {
        send_frame(t[0], s);
        recv_frame(t[1], s);
        settle(t);
    }
    sl_transport_shm_frames(t[0], &sent, &recvd);
    ck_assert_uint_eq(sent, 0);
    sl_transport_shm_frames(t[1], &sent, &recvd);
    ck_assert_uint_eq(recvd, 0);
    for (unsigned r = 1; r < SL_DROP_NREASONS; r++)
        ck_assert_uint_eq(sl_transport_dropped(t[1], r), 0);
    /* the offer (read before frame 1) went to the lane link, which refused it, not into
     * the mailbox */
    ck_assert_uint_eq(sl_transport_pending(t[1]), 0);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}
END_TEST

/* ---------------------------------------------------------------- a peer that cheats */

/* The test plays rank 0 of run RUN towards a real rank 1: its own lane, and frames sent
 * by hand from a DEALER with rank 0's routing id. */
typedef struct {
    void *ctx, *s;
    sl_shm_lane_t *lane;
    sl_shm_offer_t offer;
} fake_t;

/* Header of a frame from rank 0 to rank 1, component 4, round 1. */
static sl_wire_header_t
fake_header(uint8_t kind, uint8_t encoding, uint32_t seq, uint32_t count, uint64_t bytes)
{
    sl_wire_header_t h = {0};

    h.run_id = RUN;
    h.sender = 0;
    h.receiver = 1;
    h.kind = kind;
    h.encoding = encoding;
    h.scale = 1.0f;
    h.component = 4;
    h.round = 1;
    h.seq = seq;
    h.count = count;
    h.payload_bytes = bytes;
    return h;
}

static void
fake_send(fake_t *f, uint8_t kind, uint32_t seq, const void *payload, uint32_t bytes)
{
    sl_wire_header_t h = fake_header(kind, SL_WIRE_BYTES, seq, bytes, bytes);
    unsigned char buf[SL_WIRE_HEADER_BYTES + 64];

    ck_assert_int_eq(sl_wire_encode(&h, payload, buf), SL_OK);
    memcpy(buf + SL_WIRE_HEADER_BYTES, payload, bytes);
    ck_assert_int_ge(zmq_send(f->s, buf, SL_WIRE_HEADER_BYTES + bytes, 0), 0);
}

/* Damage done to a frame written into a slot, after it was encoded. */
enum {
    GOOD,
    TOO_LONG,   /* its header claims more payload than the slot holds */
    BAD_SUM,    /* a header byte (the component's) changed after the checksum */
    SHM_KIND,   /* a lane's own frame kind inside the lane */
    OTHER_RANK, /* sent as rank 2 through rank 0's lane */
    BAD_COUNT,  /* count does not match the payload */
    BAD_RUN     /* another run's */
};

/* Writes a data frame (seq, 100 floats) with that damage into the lowest free slot,
 * which must be slot_expected, and publishes it. */
static void
fake_frame(fake_t *f, int slot_expected, uint32_t seq, int damage)
{
    float v[100];
    sl_wire_header_t h = fake_header(SL_WIRE_DATA, SL_WIRE_FP32, seq, 100, sizeof v);
    unsigned char *mem;
    int slot = sl_shm_lane_acquire(f->lane, &mem);

    ck_assert_int_eq(slot, slot_expected);
    for (int i = 0; i < 100; i++)
        v[i] = (float)(seq + (uint32_t)i);
    if (damage == SHM_KIND) {
        h = fake_header(SL_WIRE_SHM_OFFER, SL_WIRE_BYTES, seq, SL_SHM_OFFER_BYTES,
                        SL_SHM_OFFER_BYTES);
    } else if (damage == OTHER_RANK) {
        h.sender = 2;
    }
    ck_assert_int_eq(sl_wire_encode_local(&h, v, mem), SL_OK);
    if (damage == TOO_LONG)
        sl_put_u64(mem + 48, 4096);
    else if (damage == BAD_SUM)
        mem[25] ^= 0x10;
    else if (damage == BAD_COUNT)
        sl_put_u32(mem + 40, 99);
    else if (damage == BAD_RUN)
        mem[8] ^= 1;
    sl_shm_lane_publish(f->lane, slot);
}

/* A real rank 1 of 3 into *t, and the test as rank 0 towards it (f) with its lane of 8
 * slots of a page. */
static void
fake_pair_new(sl_transport_t **t, fake_t *f)
{
    sl_transport_opts_t o;
    const char *eps[3] = {NULL, NULL, NULL};
    unsigned char id[9] = {'S', 0, 0, 0, 0, 1, 2, 3, 4};
    int linger = 0;

    sl_log_set_level(SL_LOG_ERROR);
    sl_transport_opts_default(&o);
    o.run_id = RUN;
    o.rank = 1;
    o.size = 3;
    o.timeout_ms = TEST_WAIT_MS;
    o.linger_ms = 0;
    ck_assert_int_eq(sl_transport_new(t, &o), SL_OK);
    eps[1] = sl_transport_endpoint(*t);
    ck_assert_int_eq(sl_transport_connect(*t, eps), SL_OK); /* rank 0 unknown: no accept */
    f->ctx = zmq_ctx_new();
    f->s = zmq_socket(f->ctx, ZMQ_DEALER);
    zmq_setsockopt(f->s, ZMQ_ROUTING_ID, id, sizeof id);
    zmq_setsockopt(f->s, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_connect(f->s, eps[1]), 0);
    ck_assert_int_eq(sl_shm_lane_create(&f->lane, RUN, 0, 1, 8, 4096, &f->offer), SL_OK);
}

static void
fake_pair_destroy(sl_transport_t **t, fake_t *f)
{
    sl_transport_destroy(t);
    zmq_close(f->s);
    zmq_ctx_term(f->ctx);
    sl_shm_lane_destroy(&f->lane);
}

START_TEST(test_bad_lane_frames_dropped)
{
    sl_transport_t *t;
    unsigned char ob[SL_SHM_OFFER_BYTES], nb[8] = {0};
    fake_t f = {0};
    float back[100];
    size_t got;

    fake_pair_new(&t, &f);
    sl_shm_offer_encode(&f.offer, ob);

    fake_send(&f, SL_WIRE_SHM_ACCEPT, 0, nb, 8); /* 1: an accept for nothing offered */
    fake_send(&f, SL_WIRE_SHM_OFFER, 0, ob, sizeof ob);
    fake_send(&f, SL_WIRE_SHM_OFFER, 0, ob, sizeof ob); /* 2: a second offer */
    fake_frame(&f, 0, 10, TOO_LONG);                    /* 3 */
    fake_frame(&f, 1, 11, BAD_SUM);
    fake_frame(&f, 2, 12, SHM_KIND);   /* 4 */
    fake_frame(&f, 3, 13, OTHER_RANK); /* 5 */
    fake_frame(&f, 4, 14, BAD_COUNT);
    fake_frame(&f, 5, 15, BAD_RUN);
    fake_frame(&f, 6, 16, GOOD);

    sl_wire_key_t k = {1, 4, 16, 0, SL_WIRE_DATA};
    ck_assert_msg(sl_transport_recv(t, &k, back, sizeof back, &got, TEST_WAIT_MS) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_uint_eq(got, sizeof back);
    for (int i = 0; i < 100; i++)
        ck_assert(back[i] == (float)(16 + i));
    /* lane frames do not wait for the socket's: the second offer may still be queued */
    double dl = test_deadline();
    while (sl_transport_dropped(t, SL_DROP_SHM) < 5) {
        ck_assert_int_eq(sl_transport_poll(t), SL_OK);
        ck_assert_msg(test_wait_more(dl), "%llu of 5 lane drops",
                      (unsigned long long)sl_transport_dropped(t, SL_DROP_SHM));
    }
    ck_assert_uint_eq(sl_transport_dropped(t, SL_DROP_SHM), 5);
    ck_assert_uint_eq(sl_transport_dropped(t, SL_WIRE_BAD_CHECKSUM), 1);
    ck_assert_uint_eq(sl_transport_dropped(t, SL_WIRE_BAD_COUNT), 1);
    ck_assert_uint_eq(sl_transport_dropped(t, SL_WIRE_BAD_RUN), 1);
    /* every slot the receiver was given is free again, slot 7 was never used */
    unsigned char *mem;
    for (int s = 0; s < 8; s++) {
        ck_assert_int_eq(sl_shm_lane_acquire(f.lane, &mem), s);
        sl_shm_lane_publish(f.lane, s);
    }
    ck_assert_int_eq(sl_shm_lane_acquire(f.lane, &mem), -1);
    uint64_t sent, recvd;
    sl_transport_shm_frames(t, &sent, &recvd);
    ck_assert_uint_eq(recvd, 1);
    fake_pair_destroy(&t, &f);
}
END_TEST

/* Offers that name a file of the receiver's own and a FIFO instead of rank 0's lane are
 * dropped and counted as such, opening nothing; the real offer after them still maps
 * the lane, whose frame comes through. */
START_TEST(test_forged_offer_dropped)
{
    sl_transport_t *t;
    fake_t f = {0};
    sl_shm_offer_t forged;
    unsigned char ob[SL_SHM_OFFER_BYTES];
    char file[1100], fifo[1100];
    int fds[2], watch[2];
    float back[100];
    size_t got;
    uint64_t sent, recvd;

    fake_pair_new(&t, &f);
    snprintf(file, sizeof file, "%s/secret", tmp_root);
    snprintf(fifo, sizeof fifo, "%s/offer-fifo", tmp_root);
    test_write_file(file, "model\n", 6);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    fds[0] = open(file, O_RDONLY | O_CLOEXEC);
    fds[1] = open(fifo, O_PATH | O_CLOEXEC);
    ck_assert(fds[0] >= 0 && fds[1] >= 0);
    watch[0] = watch_opens(file);
    watch[1] = watch_opens(fifo);
    for (int i = 0; i < 2; i++) {
        forged = f.offer;
        forged.fd = fds[i]; /* the transport's process is this one */
        sl_shm_offer_encode(&forged, ob);
        fake_send(&f, SL_WIRE_SHM_OFFER, 0, ob, sizeof ob);
    }
    sl_shm_offer_encode(&f.offer, ob);
    fake_send(&f, SL_WIRE_SHM_OFFER, 0, ob, sizeof ob);
    fake_frame(&f, 0, 16, GOOD);
    sl_wire_key_t k = {1, 4, 16, 0, SL_WIRE_DATA};
    ck_assert_msg(sl_transport_recv(t, &k, back, sizeof back, &got, TEST_WAIT_MS) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert(back[99] == (float)(16 + 99));
    sl_transport_shm_frames(t, &sent, &recvd);
    ck_assert_uint_eq(recvd, 1); /* through the lane: the real offer was taken */
    ck_assert_uint_eq(sl_transport_dropped(t, SL_DROP_SHM_OFFER), 2);
    ck_assert_uint_eq(sl_transport_dropped(t, SL_DROP_SHM), 0);
    ck_assert_msg(!was_opened(watch[0]), "the file a forged offer named was opened");
    ck_assert_msg(!was_opened(watch[1]), "the FIFO a forged offer named was opened");
    close(fds[0]);
    close(fds[1]);
    fake_pair_destroy(&t, &f);
}
END_TEST

static Suite *
shm_suite(void)
{
    Suite *s = suite_create("shm");
    TCase *lane = tcase_create("lane");
    tcase_add_test(lane, test_lane_slots);
    tcase_add_test(lane, test_lane_offer_checked);
    tcase_add_test(lane, test_lane_other_netns);
    tcase_add_test(lane, test_forged_offers_refused);
    suite_add_tcase(s, lane);
    TCase *tr = tcase_create("transport");
    tcase_set_timeout(tr, 300); /* a hang guard */
    tcase_add_test(tr, test_frames_through_lanes);
    tcase_add_test(tr, test_receiver_without_shm);
    tcase_add_test(tr, test_bad_lane_frames_dropped);
    tcase_add_test(tr, test_forged_offer_dropped);
    suite_add_tcase(s, tr);
    return s;
}

int
main(void)
{
    return test_main_in_tmp(shm_suite(), tmp_root, "check_shm");
}
