/* The run's secret: making, storing, reading, and deriving the rank keys (libsodium). */
#define _POSIX_C_SOURCE 200809L
#include "transport/sl_secret.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_TAG "shoal-secret-1 "
#define FILE_BYTES (sizeof FILE_TAG - 1 + 2 * SL_SECRET_BYTES + 1)
#define KDF_CONTEXT "shoalrk1" /* crypto_kdf_CONTEXTBYTES characters */

static sl_status_t
start_sodium(void)
{
    if (sodium_init() < 0)
        return sl_err_set(SL_ERR_UNSUPPORTED, "libsodium cannot start (no entropy source?)");
    return SL_OK;
}

sl_status_t
sl_secret_make(sl_secret_t *s)
{
    SL_TRY(start_sodium());
    randombytes_buf(s->bytes, sizeof s->bytes);
    return SL_OK;
}

void
sl_secret_wipe(sl_secret_t *s)
{
    sodium_memzero(s->bytes, sizeof s->bytes);
}

sl_status_t
sl_secret_write(const char *path, const sl_secret_t *s)
{
    char text[FILE_BYTES + 1];
    size_t len;
    int fd, e;

    memcpy(text, FILE_TAG, sizeof FILE_TAG - 1);
    sodium_bin2hex(text + sizeof FILE_TAG - 1, 2 * SL_SECRET_BYTES + 1, s->bytes, sizeof s->bytes);
    len = strlen(text);
    text[len++] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_err_set(SL_ERR_IO, "%s: %s%s", path, strerror(errno),
                          errno == EEXIST ? " (a key file is never overwritten)" : "");
    if (write(fd, text, len) != (ssize_t)len || fsync(fd) != 0) {
        e = errno;
        close(fd);
        unlink(path);
        sodium_memzero(text, sizeof text);
        return sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(e));
    }
    sodium_memzero(text, sizeof text);
    if (close(fd) != 0)
        return sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
    return SL_OK;
}

sl_status_t
sl_secret_read(const char *path, sl_secret_t *s)
{
    char text[FILE_BYTES + 2];
    struct stat sb;
    ssize_t got;
    size_t bin_len = 0;
    const char *end = NULL;
    sl_status_t st = SL_OK;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

    if (fd < 0)
        return sl_err_set(SL_ERR_IO, "%s: %s%s", path, strerror(errno),
                          errno == ELOOP ? " (a key file must not be a symbolic link)" : "");
    if (fstat(fd, &sb) != 0) {
        st = sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = sl_err_set(SL_ERR_INVALID, "%s: not a regular file", path);
        goto out;
    }
    if (sb.st_uid != geteuid()) {
        st = sl_err_set(SL_ERR_INVALID, "%s: owned by uid %u, not by this user (uid %u)", path,
                        (unsigned)sb.st_uid, (unsigned)geteuid());
        goto out;
    }
    if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
        st = sl_err_set(SL_ERR_INVALID,
                        "%s: mode %03o lets others read the run's secret; chmod 600 %s", path,
                        (unsigned)(sb.st_mode & 0777), path);
        goto out;
    }
    got = read(fd, text, sizeof text - 1);
    if (got < 0) {
        st = sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    text[got] = '\0';
    if ((size_t)got < FILE_BYTES - 1 || (size_t)got > FILE_BYTES ||
        memcmp(text, FILE_TAG, sizeof FILE_TAG - 1) != 0 ||
        sodium_hex2bin(s->bytes, sizeof s->bytes, text + sizeof FILE_TAG - 1, 2 * SL_SECRET_BYTES,
                       NULL, &bin_len, &end) != 0 ||
        bin_len != SL_SECRET_BYTES || (*end != '\0' && strcmp(end, "\n") != 0)) {
        sl_secret_wipe(s);
        st = sl_err_set(SL_ERR_FORMAT, "%s: not a shoal key file (make one with shoal keygen)",
                        path);
    }
out:
    sodium_memzero(text, sizeof text);
    close(fd);
    return st;
}

void
sl_secret_rank_keys(const sl_secret_t *s, uint32_t rank,
                    unsigned char public_key[SL_CURVE_KEY_BYTES],
                    unsigned char secret_key[SL_CURVE_KEY_BYTES])
{
    unsigned char sk[SL_CURVE_KEY_BYTES];

    /* BLAKE2b and X25519 need no entropy, so libsodium need not have been started */
    crypto_kdf_derive_from_key(sk, sizeof sk, rank, KDF_CONTEXT, s->bytes);
    if (public_key)
        crypto_scalarmult_base(public_key, sk);
    if (secret_key)
        memcpy(secret_key, sk, sizeof sk);
    sodium_memzero(sk, sizeof sk);
}
