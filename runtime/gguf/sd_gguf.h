/*
 * GGUF v3 reader (mmap) and writer. Format: ggml's docs/gguf.md.
 *
 *   header   : magic "GGUF" (4 bytes), uint32 version (3; 2 also read), uint64 n_tensors,
 *              uint64 n_kv
 *   n_kv x   : gguf_string key, uint32 value type, value
 *              value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool(u8),
 *              8 string (uint64 len + bytes, no NUL), 9 array (uint32 elem type, uint64 n,
 *              n elements), 10 u64, 11 i64, 12 f64
 *   n_tensors x: gguf_string name, uint32 n_dims (<= 4), uint64 ne[n_dims] (ne[0] is
 *              the row length, the fastest-varying dimension), uint32 ggml type, uint64
 *              offset (relative to the data section, multiple of the alignment)
 *   padding  : to general.alignment (default 32; must be a power of two)
 *   data     : tensor data
 * All numbers little-endian. The reader distrusts the file: every count is bounded by
 * the bytes left before it sizes anything, strings and arrays are bounds-checked,
 * tensor offsets must be aligned, in range and non-overlapping with the metadata, and
 * tensor sizes are computed with overflow checks. Errors name the file and the field.
 *
 * A shape written [rows, cols] in specdec comments is GGUF ne = {cols, rows}.
 */
#ifndef SD_GGUF_H
#define SD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sd_gguf_vtype {
    SD_GGUF_U8 = 0,
    SD_GGUF_I8 = 1,
    SD_GGUF_U16 = 2,
    SD_GGUF_I16 = 3,
    SD_GGUF_U32 = 4,
    SD_GGUF_I32 = 5,
    SD_GGUF_F32 = 6,
    SD_GGUF_BOOL = 7,
    SD_GGUF_STRING = 8,
    SD_GGUF_ARRAY = 9,
    SD_GGUF_U64 = 10,
    SD_GGUF_I64 = 11,
    SD_GGUF_F64 = 12,
} sd_gguf_vtype;

#define SD_GGUF_MAX_DIMS          4
#define SD_GGUF_DEFAULT_ALIGNMENT 32

/* A tensor as described by the file; data points into the mapping. */
typedef struct sd_gguf_tensor {
    const char *name;             /* NUL-terminated copy owned by the sd_gguf */
    uint32_t type;                /* ggml type id (see quant/sd_quant.h) */
    uint32_t n_dims;              /* 1..4 */
    int64_t ne[SD_GGUF_MAX_DIMS]; /* unused dims are 1 */
    const void *data;             /* into the mmap */
    size_t nbytes;                /* checked against the file size */
} sd_gguf_tensor;

typedef struct sd_gguf sd_gguf;

/*
 * Open and validate a GGUF file (mmap, read-only). On success *out owns the mapping.
 * Errors: SD_ERR_IO (cannot open/map), SD_ERR_FORMAT (bad magic, version, truncation,
 * absurd counts, bad offsets/alignment, duplicate names), SD_ERR_UNSUPPORTED (tensor
 * type not in sd_quant.h). Unknown metadata value types are a format error.
 */
int sd_gguf_open(const char *path, sd_gguf **out, sd_error *err);
/* Unmap and free. NULL is accepted. */
void sd_gguf_close(sd_gguf *g);

const char *sd_gguf_path(const sd_gguf *g);
uint32_t sd_gguf_version(const sd_gguf *g);
uint32_t sd_gguf_alignment(const sd_gguf *g);

/* Metadata. Keys are looked up by exact name; -1 when absent. */
int64_t sd_gguf_n_kv(const sd_gguf *g);
int64_t sd_gguf_find_key(const sd_gguf *g, const char *key);
const char *sd_gguf_key_name(const sd_gguf *g, int64_t i);
sd_gguf_vtype sd_gguf_kv_type(const sd_gguf *g, int64_t i);

/*
 * Typed getters. Integers of any integer GGUF type are converted when the value fits
 * (else SD_ERR_FORMAT naming the key); f32 accepts f32 or f64. Missing key:
 * SD_ERR_FORMAT "<file>: missing metadata key '<key>'" unless the *_opt variant is used,
 * which returns SD_OK and leaves *out unchanged when the key is absent.
 */
int sd_gguf_get_i64(const sd_gguf *g, const char *key, int64_t *out, sd_error *err);
int sd_gguf_get_u32(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err);
int sd_gguf_get_f32(const sd_gguf *g, const char *key, float *out, sd_error *err);
int sd_gguf_get_bool(const sd_gguf *g, const char *key, int *out, sd_error *err);
/* String value: pointer into the mapping (NOT NUL-terminated) and its length. */
int sd_gguf_get_str(const sd_gguf *g, const char *key, const char **s, size_t *len, sd_error *err);
int sd_gguf_get_i64_opt(const sd_gguf *g, const char *key, int64_t *out, sd_error *err);
int sd_gguf_get_u32_opt(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err);
int sd_gguf_get_f32_opt(const sd_gguf *g, const char *key, float *out, sd_error *err);
int sd_gguf_get_bool_opt(const sd_gguf *g, const char *key, int *out, sd_error *err);

/*
 * Arrays. sd_gguf_get_arr: element type and count of the array under key; for numeric
 * element types *data points at the packed little-endian elements in the mapping (may
 * be unaligned: read with memcpy). For string arrays *data is NULL; use
 * sd_gguf_arr_str (O(1): offsets are indexed at open).
 */
int sd_gguf_get_arr(const sd_gguf *g, const char *key, sd_gguf_vtype *elem_type, uint64_t *n,
                    const void **data, sd_error *err);
/* i-th string of the string array under key index kv (from sd_gguf_find_key). */
int sd_gguf_arr_str(const sd_gguf *g, int64_t kv, uint64_t i, const char **s, size_t *len);

/* Tensors, in file order. */
int64_t sd_gguf_n_tensors(const sd_gguf *g);
const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, int64_t i);
/* NULL when absent. */
const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name);

/* ---- writer ---- */

typedef struct sd_gguf_writer sd_gguf_writer;

/* New empty writer (version 3, alignment 32). NULL on OOM. */
sd_gguf_writer *sd_gguf_writer_new(void);
void sd_gguf_writer_free(sd_gguf_writer *w);

/* Metadata setters copy key and value. Setting an existing key replaces it, keeping
 * its position. Return SD_OK or SD_ERR_OOM. */
int sd_gguf_set_u32(sd_gguf_writer *w, const char *key, uint32_t v);
int sd_gguf_set_i32(sd_gguf_writer *w, const char *key, int32_t v);
int sd_gguf_set_f32(sd_gguf_writer *w, const char *key, float v);
int sd_gguf_set_bool(sd_gguf_writer *w, const char *key, int v);
int sd_gguf_set_str(sd_gguf_writer *w, const char *key, const char *v);
/* Any scalar type (u8..f64 except string/array): *v holds one value of that type in
 * host (little-endian) layout, copied. SD_ERR_ARG for string/array/unknown types. */
int sd_gguf_set_scalar(sd_gguf_writer *w, const char *key, sd_gguf_vtype type, const void *v);
/* Numeric array: n elements of elem_type, packed, copied from data. */
int sd_gguf_set_arr(sd_gguf_writer *w, const char *key, sd_gguf_vtype elem_type, const void *data,
                    uint64_t n);
/* String array: n NUL-terminated strings, copied. */
int sd_gguf_set_arr_str(sd_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Copy every metadata entry of an open file (used by `specdec quantize`). */
int sd_gguf_copy_kv(sd_gguf_writer *w, const sd_gguf *src);

/*
 * Add a tensor. ne[0] is the row length. data (nbytes, must equal the size implied
 * by type and ne) is referenced, not copied: it must stay valid until
 * sd_gguf_writer_write returns. Errors: SD_ERR_ARG (bad dims/size, duplicate name).
 */
int sd_gguf_add_tensor(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const int64_t *ne, const void *data, size_t nbytes, sd_error *err);

/*
 * Write the file: to "<path>.tmp.<pid>", fsync, then rename onto path, so a failure
 * never leaves a partial file at path (the temporary is removed on failure).
 * Errors: SD_ERR_IO naming the path.
 */
int sd_gguf_writer_write(const sd_gguf_writer *w, const char *path, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_GGUF_H */
