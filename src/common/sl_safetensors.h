/* The safetensors file format (Hugging Face): a u64 little-endian header length N, N
 * bytes of JSON header, then the data section. The header is an object that maps each
 * tensor name to {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
 * (byte offsets into the data section, raw little-endian elements, row-major), plus an
 * optional "__metadata__" object of string values. shoal writes and reads float32
 * tensors only; the reader checks the whole structure before anything uses it. */
#ifndef SL_SAFETENSORS_H
#define SL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_file.h"
#include "common/sl_status.h"

#define SL_ST_MAX_DIMS 8
#define SL_ST_NAME_MAX 128            /* bytes of a tensor name, NUL included */
#define SL_ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */

/* A tensor to write: n floats (host order) at data, borrowed; shape d0 x d1 x ... */
typedef struct {
    const char *name; /* printable ASCII, no quote or backslash */
    int ndim;         /* 1 .. SL_ST_MAX_DIMS */
    uint64_t shape[SL_ST_MAX_DIMS];
    const float *data;
} sl_st_out_t;

/* Opens f on path (sl_atomic_open) and writes the n tensors into its temp file, as F32,
 * in the order given, with the metadata pairs meta[0]: meta[1], ... (NULL-terminated,
 * NULL for none; plain strings); the caller commits f (the file then replaces path) or
 * aborts it. The header is padded with spaces to a multiple of 8 bytes, so the data is
 * aligned. SL_ERR_IO, SL_ERR_NOMEM, f then aborted. */
sl_status_t sl_st_write_temp(sl_atomic_file_t *f, const char *path, const sl_st_out_t *t, int n,
                             const char *const *meta);

/* A tensor of a file read. */
typedef struct {
    char name[SL_ST_NAME_MAX];
    char dtype[16]; /* as the header says: "F32", "F16", "BF16", ... */
    int ndim;
    uint64_t shape[SL_ST_MAX_DIMS];
    uint64_t begin, end; /* data_offsets: bytes into the data section */
} sl_st_tensor_t;

typedef struct {
    char *bytes; /* the whole file; owned */
    size_t len;
    const unsigned char *data; /* the data section, inside bytes */
    uint64_t data_len;
    sl_st_tensor_t *t; /* (n) in header order; owned */
    int n;
} sl_st_file_t;

/* Reads and checks path: the header length within the file and SL_ST_MAX_HEADER, the
 * header one JSON object of tensors as above (names unique and at most
 * SL_ST_NAME_MAX - 1 bytes, at most SL_ST_MAX_DIMS dimensions, a known dtype whose
 * element size times the shape's product is end - begin), the tensors covering the data
 * section exactly (no hole, no overlap, nothing after). Every failure is SL_ERR_FORMAT
 * (SL_ERR_IO for an unreadable file) with one line that starts with path and says
 * where; f is then empty. sl_st_fini frees it. */
sl_status_t sl_st_read(const char *path, sl_st_file_t *f);
void sl_st_fini(sl_st_file_t *f);

/* The tensor named name, NULL when there is none. */
const sl_st_tensor_t *sl_st_find(const sl_st_file_t *f, const char *name);
/* The n float32 elements of tensor t (dtype F32) into out (host order). */
void sl_st_get_f32(const sl_st_file_t *f, const sl_st_tensor_t *t, float *out);
/* "[502, 16]" into buf. */
void sl_st_shape_text(const uint64_t *shape, int ndim, char *buf, size_t size);

#endif
