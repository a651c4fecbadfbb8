/* runtime/gguf/gguf_common.c: helpers of the reader and the writer (gguf_impl.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/gguf/gguf_impl.h"

/* Size in bytes of a scalar value type; 0 for string/array/unknown. */
size_t sd_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case SD_GGUF_U8:
    case SD_GGUF_I8:
    case SD_GGUF_BOOL:
        return 1;
    case SD_GGUF_U16:
    case SD_GGUF_I16:
        return 2;
    case SD_GGUF_U32:
    case SD_GGUF_I32:
    case SD_GGUF_F32:
        return 4;
    case SD_GGUF_U64:
    case SD_GGUF_I64:
    case SD_GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

const char *sd_gguf_vtype_name(uint32_t t) {
    static const char *names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return t <= SD_GGUF_F64 ? names[t] : "unknown";
}

int sd_gguf_is_pow2(uint64_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

/* Bytes of a tensor of type t and shape ne[n_dims]; -1 on bad shape or overflow. */
int sd_gguf_tensor_nbytes(uint32_t type, uint32_t n_dims, const int64_t *ne, size_t *out) {
    /* The element count itself must fit in an int64 (as ggml checks), also when a
     * zero dimension makes the byte size 0: callers multiply dimensions freely. */
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return -1;
        if (ne[d] != 0 && elems > (uint64_t)INT64_MAX / (uint64_t)ne[d]) return -1;
        elems *= (uint64_t)ne[d];
    }
    size_t n;
    if (sd_type_row_bytes((sd_type)type, ne[0], &n) != 0) return -1;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] < 0 || (uint64_t)ne[d] > SIZE_MAX) return -1;
        if (sd_mul_size(n, (size_t)ne[d], &n) != 0) return -1;
    }
    *out = n;
    return 0;
}

int sd_gguf_name_idx_cmp(const void *a, const void *b) {
    const name_idx *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

int64_t sd_gguf_name_idx_find(const name_idx *tab, int64_t n, const char *name) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(tab[mid].name, name);
        if (c == 0) return tab[mid].idx;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int sd_gguf_grow(void **p, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    size_t bytes;
    if (sd_mul_size(nc, elem, &bytes) != 0) return -1;
    void *q = realloc(*p, bytes);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}
