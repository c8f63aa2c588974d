/* The directory of a node's ipc:// socket when shoal run did not hand it one:
 * $TMPDIR/shoal-<run id>, which every node of the run on this machine computes and
 * shares. Its name is known in advance, so another user (or a stale run) could make it
 * first and receive the model through it: a node uses it only when it is this user's own
 * and closed to everyone else, and clears away the directories that runs killed before
 * they could remove their own left beside it. Owns nothing but that directory and the
 * socket files in it; the sockets themselves are the transport's. */
#ifndef SL_IPC_DIR_H
#define SL_IPC_DIR_H

#include "common/sl_status.h"

/* A dead run's directory is removed once nothing in it changed for this long: a run that
 * is starting may have made its directory before it binds a socket in it. */
#define SL_IPC_DIR_STALE_S 600

/* Makes dir with mode 0700, or, when it exists, accepts it if it is this user's own: a
 * directory (not a symbolic link to one) owned by getuid() with no permission for group
 * or others. SL_ERR_IO with "DIR: refused as the ipc directory: ..." naming its owner
 * when it exists and is not, or when it cannot be made. */
sl_status_t sl_ipc_dir_claim(const char *dir);

/* Removes the directories of dead runs beside dir (in its parent directory; never dir
 * itself): those named shoal-<16 hex digits> (a node's) or shoal-run-XXXXXX (a shoal
 * run's, made by mkdtemp) that are this user's own (as
 * sl_ipc_dir_claim checks), unchanged for stale_s seconds, and hold nothing but
 * rank-<N> sockets of which none accepts a connection (nothing listens on them). Anything
 * else in one (another file, a live socket) keeps it. Best effort: returns how many it
 * removed. */
int sl_ipc_dir_sweep(const char *dir, int stale_s);

/* A node leaves: removes its socket file (ZeroMQ leaves a named ipc endpoint's) and dir,
 * which only goes once empty, so the last node of the run to leave removes it. Either may
 * be NULL or "" (nothing of that kind to remove). */
void sl_ipc_dir_leave(const char *dir, const char *socket_path);

#endif
