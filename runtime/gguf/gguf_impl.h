/*
 * runtime/gguf/gguf_impl.h: PRIVATE to runtime/gguf: the open file's structure (shared by
 * the reader, gguf_read.c, the typed getters, gguf_get.c, and the writer's copy of an
 * open file's metadata, gguf_write.c) and the helpers they share (gguf_common.c).
 */
#ifndef SD_GGUF_IMPL_H
#define SD_GGUF_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/gguf/sd_gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "specdec's GGUF reader/writer assumes a little-endian host"
#endif

#define GGUF_MAGIC "GGUF"
/* llama.cpp's GGML_MAX_NAME is 64 including the NUL: names are at most 63 bytes. */
#define GGUF_MAX_NAME 63

/* Name -> index entry of the sorted lookup tables. */
typedef struct name_idx {
    const char *name;
    int64_t idx;
} name_idx;

typedef struct gkv {
    char *key; /* NUL-terminated copy */
    sd_gguf_vtype type;
    sd_gguf_vtype elem; /* arrays: element type */
    uint64_t n;         /* arrays: element count; strings: byte length */
    size_t val_off;     /* map offset of the value (just after the value-type field) */
    size_t val_size;    /* serialized size of the value */
    size_t data_off;    /* scalars: the value; strings: first byte; arrays: first element */
    size_t *str_off;    /* string arrays: map offset of each element's length field */
} gkv;

struct sd_gguf {
    char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    uint32_t alignment;
    int64_t n_kv;
    gkv *kv;
    name_idx *kv_sorted;
    int64_t n_tensors;
    sd_gguf_tensor *t;
    name_idx *t_sorted;
    size_t data_start; /* file offset of the data section */
};

/* Size in bytes of a scalar value type; 0 for string/array/unknown. */
size_t sd_gguf_vtype_size(uint32_t t);
/* Printable name of a value type. */
const char *sd_gguf_vtype_name(uint32_t t);
int sd_gguf_is_pow2(uint64_t x);
/* Bytes of a tensor of type and shape ne[n_dims] (overflow-checked): 0 and *out, or -1. */
int sd_gguf_tensor_nbytes(uint32_t type, uint32_t n_dims, const int64_t *ne, size_t *out);
/* qsort comparator (name, then index) and binary search (-1 when absent) of name_idx. */
int sd_gguf_name_idx_cmp(const void *a, const void *b);
int64_t sd_gguf_name_idx_find(const name_idx *tab, int64_t n, const char *name);

/* Grow *p (an array of elem-byte items, capacity *cap) to hold more than n: 0, or -1
 * (overflow or out of memory; *p unchanged). */
int sd_gguf_grow(void **p, size_t *cap, size_t n, size_t elem);

#endif /* SD_GGUF_IMPL_H */
