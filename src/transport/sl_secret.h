/* The run's secret and the keys derived from it. Membership of a run is possession of
 * its secret: every rank's CURVE keypair is derived from it (a key therefore proves its
 * rank), and sl_curve.c admits only those keys. `shoal run` makes a secret in memory and
 * its forked nodes inherit it; clusters keep one in a file made by `shoal keygen FILE`
 * (cluster.key_file) that the job's nodes read from a shared filesystem. Owns the bytes,
 * the file format and the derivation; it must not touch sockets (sl_curve.c does).
 *
 * Key file: one line, "shoal-secret-1 " then the secret as 64 lowercase hex digits,
 * then a newline; mode 0600, owned by the user who reads it. */
#ifndef SL_SECRET_H
#define SL_SECRET_H

#include <stdint.h>

#include "common/sl_status.h"

#define SL_SECRET_BYTES 32
#define SL_CURVE_KEY_BYTES 32

typedef struct {
    unsigned char bytes[SL_SECRET_BYTES];
} sl_secret_t;

/* A fresh random secret (the kernel's CSPRNG). SL_ERR_UNSUPPORTED when libsodium
 * cannot start. */
sl_status_t sl_secret_make(sl_secret_t *s);

/* Writes s to path, which must not exist (O_EXCL, O_NOFOLLOW), mode 0600, fsynced.
 * SL_ERR_IO naming the path (an existing file is never overwritten). */
sl_status_t sl_secret_write(const char *path, const sl_secret_t *s);

/* Reads the secret from path. SL_ERR_IO when it cannot be opened (a symlink is
 * refused); SL_ERR_INVALID when it is group- or world-readable or owned by another
 * user ("... chmod 600 PATH"); SL_ERR_FORMAT when it is not a key file. */
sl_status_t sl_secret_read(const char *path, sl_secret_t *s);

/* Zeroes s in a way the compiler keeps. */
void sl_secret_wipe(sl_secret_t *s);

/* Rank's CURVE keypair (Curve25519): the secret key is a subkey of s for that rank, the
 * public key follows from it. Either output may be NULL. */
void sl_secret_rank_keys(const sl_secret_t *s, uint32_t rank,
                         unsigned char public_key[SL_CURVE_KEY_BYTES],
                         unsigned char secret_key[SL_CURVE_KEY_BYTES]);

#endif
