/*
 * GGUF v3 reader (mmap, read-only) and writer. See runtime/sd_gguf.h for the layout;
 * the format is ggml's docs/gguf.md (and llama.cpp's ggml/src/gguf.cpp, whose checks
 * this reader follows and tightens).
 *
 * Reader: the whole file is mapped once; every field is read through a bounds-checked
 * cursor (memcpy, so unaligned data is fine). Every count is bounded by the bytes left
 * before anything is sized from it (n_kv, n_tensors, array and string lengths), every
 * size is overflow-checked, and tensor data regions must be aligned, inside the file,
 * after the metadata and pairwise disjoint. Keys and tensor names are indexed sorted
 * by name (duplicates rejected, O(log n) lookup); string arrays get an offset table at
 * open so sd_gguf_arr_str is O(1).
 *
 * Writer: metadata values are kept serialized (the bytes after the value-type field),
 * tensors are referenced. The file goes to "<path>.tmp.<pid>", is fsync'ed and renamed
 * over path; on any failure the temporary is removed.
 *
 * All numbers are little-endian on disk; specdec targets little-endian hosts only.
 */
#include "runtime/gguf/sd_gguf.h"

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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "specdec's GGUF reader/writer assumes a little-endian host"
#endif

#define GGUF_MAGIC "GGUF"
/* llama.cpp's GGML_MAX_NAME is 64 including the NUL: names are at most 63 bytes. */
#define GGUF_MAX_NAME 63

/* ------------------------------------------------------------------ shared helpers */

/* Size in bytes of a scalar value type; 0 for string/array/unknown. */
static size_t vtype_size(uint32_t t) {
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

static const char *vtype_name(uint32_t t) {
    static const char *names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return t <= SD_GGUF_F64 ? names[t] : "unknown";
}

static int is_pow2(uint64_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

/* Bytes of a tensor of type t and shape ne[n_dims]; -1 on bad shape or overflow. */
static int tensor_nbytes(uint32_t type, uint32_t n_dims, const int64_t *ne, size_t *out) {
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

/* Name -> index entry of the sorted lookup tables. */
typedef struct name_idx {
    const char *name;
    int64_t idx;
} name_idx;

static int name_idx_cmp(const void *a, const void *b) {
    const name_idx *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int64_t name_idx_find(const name_idx *tab, int64_t n, const char *name) {
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

/* ------------------------------------------------------------------ reader */

/* A tensor's data region, for the overlap check. */
typedef struct span {
    uint64_t off;
    size_t nbytes;
    int64_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

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

/* Bounds-checked cursor over the mapping. */
typedef struct rd {
    const uint8_t *p;
    size_t size;
    size_t pos;
    const char *path;
    sd_error *err;
} rd;

static size_t rd_left(const rd *r) {
    return r->size - r->pos;
}

static int rd_need(rd *r, size_t n, const char *field) {
    if (n > rd_left(r))
        return sd_errorf(r->err, SD_ERR_FORMAT,
                         "%s: %s: expected %zu more bytes at offset %zu, found end of file "
                         "(%zu bytes)",
                         r->path, field, n, r->pos, r->size);
    return SD_OK;
}

static int rd_u32(rd *r, uint32_t *v, const char *field) {
    int st = rd_need(r, 4, field);
    if (st) return st;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return SD_OK;
}

static int rd_u64(rd *r, uint64_t *v, const char *field) {
    int st = rd_need(r, 8, field);
    if (st) return st;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return SD_OK;
}

/* gguf_string: uint64 len + bytes. *off is the map offset of the bytes. */
static int rd_str(rd *r, size_t *off, uint64_t *len, const char *field) {
    char f[448]; /* field (<= 384) + suffix */
    snprintf(f, sizeof f, "%s length", field);
    int st = rd_u64(r, len, f);
    if (st) return st;
    if (*len > rd_left(r))
        return sd_errorf(r->err, SD_ERR_FORMAT,
                         "%s: %s: expected a string length <= %zu (bytes left), found %" PRIu64,
                         r->path, field, rd_left(r), *len);
    *off = r->pos;
    r->pos += (size_t)*len;
    return SD_OK;
}

/* A NUL-terminated copy of a name (key or tensor name) read with rd_str. */
static int rd_name(rd *r, char **out, size_t max_len, const char *field) {
    size_t off;
    uint64_t len;
    int st = rd_str(r, &off, &len, field);
    if (st) return st;
    if (len == 0)
        return sd_errorf(r->err, SD_ERR_FORMAT, "%s: %s: expected a non-empty name, found \"\"",
                         r->path, field);
    if (max_len && len > max_len)
        return sd_errorf(r->err, SD_ERR_FORMAT,
                         "%s: %s: expected at most %zu bytes, found %" PRIu64, r->path, field,
                         max_len, len);
    if (memchr(r->p + off, 0, (size_t)len))
        return sd_errorf(r->err, SD_ERR_FORMAT,
                         "%s: %s: expected a name without NUL bytes, found one", r->path, field);
    char *s = malloc((size_t)len + 1);
    if (!s) return sd_errorf(r->err, SD_ERR_OOM, "%s: %s: out of memory", r->path, field);
    memcpy(s, r->p + off, (size_t)len);
    s[len] = '\0';
    *out = s;
    return SD_OK;
}

/* Value of type kv->type at the cursor (the type field already read). */
static int rd_value(rd *r, gkv *kv, const char *field) {
    char f[384]; /* field (<= 320) + suffix */
    int st;
    kv->val_off = r->pos;
    if (kv->type == SD_GGUF_STRING) {
        st = rd_str(r, &kv->data_off, &kv->n, field);
        if (st) return st;
    } else if (kv->type == SD_GGUF_ARRAY) {
        uint32_t elem;
        snprintf(f, sizeof f, "%s: array element type", field);
        if ((st = rd_u32(r, &elem, f))) return st;
        if (elem == SD_GGUF_ARRAY)
            return sd_errorf(r->err, SD_ERR_UNSUPPORTED,
                             "%s: %s: expected a non-array element type, found nested array",
                             r->path, f);
        if (elem != SD_GGUF_STRING && vtype_size(elem) == 0)
            return sd_errorf(r->err, SD_ERR_FORMAT,
                             "%s: %s: expected a value type 0..12, found %" PRIu32, r->path, f,
                             elem);
        kv->elem = (sd_gguf_vtype)elem;
        snprintf(f, sizeof f, "%s: array length", field);
        if ((st = rd_u64(r, &kv->n, f))) return st;
        /* Every element takes >= 8 bytes (string) or its scalar size. */
        size_t min_elem = elem == SD_GGUF_STRING ? 8 : vtype_size(elem);
        if (kv->n > rd_left(r) / min_elem)
            return sd_errorf(r->err, SD_ERR_FORMAT,
                             "%s: %s: expected at most %zu elements of %s (bytes left), found "
                             "%" PRIu64,
                             r->path, f, rd_left(r) / min_elem, vtype_name(elem), kv->n);
        kv->data_off = r->pos;
        if (elem == SD_GGUF_STRING) {
            if (kv->n > 0) {
                kv->str_off = malloc((size_t)kv->n * sizeof *kv->str_off);
                if (!kv->str_off)
                    return sd_errorf(r->err, SD_ERR_OOM, "%s: %s: out of memory", r->path, f);
            }
            for (uint64_t i = 0; i < kv->n; i++) {
                size_t off;
                uint64_t len;
                kv->str_off[i] = r->pos;
                snprintf(f, sizeof f, "%s: element %" PRIu64, field, i);
                if ((st = rd_str(r, &off, &len, f))) return st;
            }
        } else {
            r->pos += (size_t)kv->n * min_elem;
        }
    } else {
        size_t sz = vtype_size(kv->type);
        if ((st = rd_need(r, sz, field))) return st;
        kv->data_off = r->pos;
        r->pos += sz;
    }
    kv->val_size = r->pos - kv->val_off;
    return SD_OK;
}

static int grow(void **p, size_t *cap, size_t n, size_t elem) {
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

static int parse(sd_gguf *g, sd_error *err) {
    rd r = {g->map, g->size, 0, g->path, err};
    char f[320];
    int st;

    /* header */
    if ((st = rd_need(&r, 4, "header.magic"))) return st;
    if (memcmp(g->map, GGUF_MAGIC, 4) != 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.magic: expected \"GGUF\", found bytes %02x %02x %02x %02x",
                         g->path, g->map[0], g->map[1], g->map[2], g->map[3]);
    r.pos = 4;
    if ((st = rd_u32(&r, &g->version, "header.version"))) return st;
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && (g->version >> 16) != 0)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: header.version: expected 2 or 3 (little-endian), found "
                             "0x%08" PRIx32 " (a big-endian file?)",
                             g->path, g->version);
        return sd_errorf(err, SD_ERR_FORMAT, "%s: header.version: expected 2 or 3, found %" PRIu32,
                         g->path, g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((st = rd_u64(&r, &n_tensors, "header.n_tensors"))) return st;
    if ((st = rd_u64(&r, &n_kv, "header.n_kv"))) return st;
    /* A kv takes >= 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes; a tensor info
     * >= 8 + 1 (name) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset). */
    if (n_kv > rd_left(&r) / 14)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.n_kv: expected at most %zu (14 bytes each in %zu bytes "
                         "left), found %" PRIu64,
                         g->path, rd_left(&r) / 14, rd_left(&r), n_kv);
    if (n_tensors > rd_left(&r) / 33)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.n_tensors: expected at most %zu (33 bytes each in %zu bytes "
                         "left), found %" PRIu64,
                         g->path, rd_left(&r) / 33, rd_left(&r), n_tensors);

    /* key/value pairs */
    size_t cap = 0;
    g->alignment = SD_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)&g->kv, &cap, (size_t)g->n_kv, sizeof *g->kv))
            return sd_errorf(err, SD_ERR_OOM, "%s: kv[%" PRIu64 "]: out of memory", g->path, i);
        gkv *kv = &g->kv[g->n_kv];
        memset(kv, 0, sizeof *kv);
        g->n_kv++;
        snprintf(f, sizeof f, "kv[%" PRIu64 "] key", i);
        if ((st = rd_name(&r, &kv->key, 0, f))) return st;
        uint32_t type;
        snprintf(f, sizeof f, "kv[%" PRIu64 "] '%s': value type", i, kv->key);
        if ((st = rd_u32(&r, &type, f))) return st;
        if (type > SD_GGUF_F64)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: %s: expected a value type 0..12, found %" PRIu32, g->path, f,
                             type);
        kv->type = (sd_gguf_vtype)type;
        snprintf(f, sizeof f, "kv[%" PRIu64 "] '%s'", i, kv->key);
        if ((st = rd_value(&r, kv, f))) return st;
    }
    if (g->n_kv > 0) {
        g->kv_sorted = malloc((size_t)g->n_kv * sizeof *g->kv_sorted);
        if (!g->kv_sorted)
            return sd_errorf(err, SD_ERR_OOM, "%s: kv index: out of memory", g->path);
        for (int64_t i = 0; i < g->n_kv; i++)
            g->kv_sorted[i] = (name_idx){g->kv[i].key, i};
        qsort(g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, name_idx_cmp);
        for (int64_t i = 1; i < g->n_kv; i++)
            if (strcmp(g->kv_sorted[i - 1].name, g->kv_sorted[i].name) == 0)
                return sd_errorf(err, SD_ERR_FORMAT,
                                 "%s: kv[%" PRId64 "] '%s': expected a unique key, found a "
                                 "duplicate of kv[%" PRId64 "]",
                                 g->path, g->kv_sorted[i].idx, g->kv_sorted[i].name,
                                 g->kv_sorted[i - 1].idx);
    }
    int64_t ai = sd_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gkv *kv = &g->kv[ai];
        if (kv->type != SD_GGUF_U32)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: general.alignment: expected type u32, found %s", g->path,
                             vtype_name(kv->type));
        uint32_t a;
        memcpy(&a, g->map + kv->data_off, 4);
        if (!is_pow2(a))
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: general.alignment: expected a non-zero power of two, found "
                             "%" PRIu32,
                             g->path, a);
        g->alignment = a;
    }

    /* tensor infos */
    if (n_tensors > 0) {
        g->t = calloc((size_t)n_tensors, sizeof *g->t); /* bounded above by bytes left / 33 */
        if (!g->t) return sd_errorf(err, SD_ERR_OOM, "%s: tensor infos: out of memory", g->path);
    }
    uint64_t *offsets = n_tensors ? calloc((size_t)n_tensors, sizeof *offsets) : NULL;
    if (n_tensors && !offsets)
        return sd_errorf(err, SD_ERR_OOM, "%s: tensor infos: out of memory", g->path);
    st = SD_OK;
    for (uint64_t i = 0; i < n_tensors && st == SD_OK; i++) {
        sd_gguf_tensor *t = &g->t[i];
        char *name = NULL;
        snprintf(f, sizeof f, "tensor[%" PRIu64 "] name", i);
        if ((st = rd_name(&r, &name, GGUF_MAX_NAME, f))) break;
        t->name = name;
        g->n_tensors++;
        snprintf(f, sizeof f, "tensor '%s': n_dims", name);
        if ((st = rd_u32(&r, &t->n_dims, f))) break;
        if (t->n_dims < 1 || t->n_dims > SD_GGUF_MAX_DIMS) {
            st = sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 1..%d, found %" PRIu32, g->path, f,
                           SD_GGUF_MAX_DIMS, t->n_dims);
            break;
        }
        for (int d = 0; d < SD_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims && st == SD_OK; d++) {
            uint64_t v;
            snprintf(f, sizeof f, "tensor '%s': ne[%" PRIu32 "]", name, d);
            if ((st = rd_u64(&r, &v, f))) break;
            if (v > (uint64_t)INT64_MAX)
                st =
                    sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 0..%" PRId64 ", found %" PRId64,
                              g->path, f, INT64_MAX, (int64_t)v);
            t->ne[d] = (int64_t)v;
        }
        if (st) break;
        snprintf(f, sizeof f, "tensor '%s': type", name);
        if ((st = rd_u32(&r, &t->type, f))) break;
        if (!sd_type_supported(t->type)) {
            st = sd_errorf(err, SD_ERR_UNSUPPORTED,
                           "%s: %s: expected a supported ggml type id (%s), found type id "
                           "%" PRIu32,
                           g->path, f, sd_type_writable_names(), t->type);
            break;
        }
        if (tensor_nbytes(t->type, t->n_dims, t->ne, &t->nbytes) != 0) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: tensor '%s': shape: expected ne[0] a multiple of %" PRId64
                           " (%s) and a size that fits in memory, found [%" PRId64 ", %" PRId64
                           ", %" PRId64 ", %" PRId64 "]",
                           g->path, name, sd_type_block_elems((sd_type)t->type),
                           sd_type_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
            break;
        }
        snprintf(f, sizeof f, "tensor '%s': offset", name);
        if ((st = rd_u64(&r, &offsets[i], f))) break;
        if (offsets[i] % g->alignment != 0) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: %s: expected a multiple of the alignment %" PRIu32
                           ", found %" PRIu64,
                           g->path, f, g->alignment, offsets[i]);
            break;
        }
    }
    if (st == SD_OK && g->n_tensors > 0) {
        g->t_sorted = malloc((size_t)g->n_tensors * sizeof *g->t_sorted);
        if (!g->t_sorted)
            st = sd_errorf(err, SD_ERR_OOM, "%s: tensor index: out of memory", g->path);
    }
    if (st == SD_OK && g->n_tensors > 0) {
        for (int64_t i = 0; i < g->n_tensors; i++)
            g->t_sorted[i] = (name_idx){g->t[i].name, i};
        qsort(g->t_sorted, (size_t)g->n_tensors, sizeof *g->t_sorted, name_idx_cmp);
        for (int64_t i = 1; i < g->n_tensors && st == SD_OK; i++)
            if (strcmp(g->t_sorted[i - 1].name, g->t_sorted[i].name) == 0)
                st = sd_errorf(err, SD_ERR_FORMAT,
                               "%s: tensor[%" PRId64 "] '%s': expected a unique name, found a "
                               "duplicate of tensor[%" PRId64 "]",
                               g->path, g->t_sorted[i].idx, g->t_sorted[i].name,
                               g->t_sorted[i - 1].idx);
    }

    /* data section: starts at the next multiple of the alignment after the infos. With
     * no tensors the file may end right after the metadata (llama.cpp vocab files). */
    if (st == SD_OK) {
        size_t ds = r.pos;
        size_t rem = ds % g->alignment;
        if (rem && sd_add_size(ds, g->alignment - rem, &ds) != 0) ds = SIZE_MAX;
        g->data_start = ds;
        for (int64_t i = 0; i < g->n_tensors && st == SD_OK; i++) {
            sd_gguf_tensor *t = &g->t[i];
            size_t start, end;
            if (offsets[i] > SIZE_MAX || sd_add_size(ds, (size_t)offsets[i], &start) != 0 ||
                sd_add_size(start, t->nbytes, &end) != 0 || end > g->size) {
                st = sd_errorf(err, SD_ERR_FORMAT,
                               "%s: tensor '%s': data: expected [data %zu + offset %" PRIu64
                               ", +%zu) within the file, found it past end of file (%zu bytes)",
                               g->path, t->name, ds, offsets[i], t->nbytes, g->size);
                break;
            }
            t->data = g->map + start;
        }
    }
    /* Data regions pairwise disjoint: sort by offset, compare neighbours. */
    if (st == SD_OK && g->n_tensors > 1) {
        span *sp = malloc((size_t)g->n_tensors * sizeof *sp);
        if (!sp) {
            st = sd_errorf(err, SD_ERR_OOM, "%s: tensor data check: out of memory", g->path);
        } else {
            for (int64_t i = 0; i < g->n_tensors; i++)
                sp[i] = (span){offsets[i], g->t[i].nbytes, i};
            qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
            /* Running maximum end of the non-empty regions so far (an empty region
             * overlaps nothing). Sums cannot overflow: checked against the file size. */
            uint64_t end = 0;
            int64_t end_idx = -1;
            for (int64_t i = 0; i < g->n_tensors; i++) {
                const span *b = &sp[i];
                if (b->nbytes == 0) continue;
                if (end_idx >= 0 && b->off < end) {
                    st = sd_errorf(err, SD_ERR_FORMAT,
                                   "%s: tensor '%s': data: expected a region disjoint from "
                                   "tensor '%s' (ending at offset %" PRIu64 "), found offset "
                                   "%" PRIu64,
                                   g->path, g->t[b->idx].name, g->t[end_idx].name, end, b->off);
                    break;
                }
                if (b->off + b->nbytes > end) {
                    end = b->off + b->nbytes;
                    end_idx = b->idx;
                }
            }
            free(sp);
        }
    }
    free(offsets);
    return st;
}

int sd_gguf_open(const char *path, sd_gguf **out, sd_error *err) {
    *out = NULL;
    sd_gguf *g = calloc(1, sizeof *g);
    if (!g) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    g->path = strdup(path);
    if (!g->path) {
        free(g);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_IO, "%s: open: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_IO, "%s: stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_IO, "%s: open: expected a regular file, found another kind",
                         path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_IO, "%s: file too large to map", path);
    }
    g->size = (size_t)sb.st_size;
    if (g->size == 0) { /* mmap cannot map 0 bytes; parse() reports the rest */
        close(fd);
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.magic: expected \"GGUF\", found an empty file", path);
    }
    void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_IO, "%s: mmap: %s", path, strerror(e));
    }
    g->map = m;
    int st = parse(g, err);
    if (st) {
        sd_gguf_close(g);
        return st;
    }
    *out = g;
    return SD_OK;
}

void sd_gguf_close(sd_gguf *g) {
    if (!g) return;
    if (g->map) munmap((void *)g->map, g->size);
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_off);
    }
    free(g->kv);
    free(g->kv_sorted);
    for (int64_t i = 0; i < g->n_tensors; i++)
        free((void *)g->t[i].name);
    free(g->t);
    free(g->t_sorted);
    free(g->path);
    free(g);
}

const char *sd_gguf_path(const sd_gguf *g) {
    return g->path;
}
uint32_t sd_gguf_version(const sd_gguf *g) {
    return g->version;
}
void sd_gguf_data(const sd_gguf *g, const void **base, size_t *bytes) {
    const size_t ds = g->data_start < g->size ? g->data_start : g->size;
    *base = g->map + ds;
    *bytes = g->size - ds;
}

uint32_t sd_gguf_alignment(const sd_gguf *g) {
    return g->alignment;
}

int64_t sd_gguf_n_kv(const sd_gguf *g) {
    return g->n_kv;
}

int64_t sd_gguf_find_key(const sd_gguf *g, const char *key) {
    if (!g->kv_sorted) return -1;
    return name_idx_find(g->kv_sorted, g->n_kv, key);
}

const char *sd_gguf_key_name(const sd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

sd_gguf_vtype sd_gguf_kv_type(const sd_gguf *g, int64_t i) {
    return g->kv[i].type;
}

/* ---- typed getters */

static int missing(const sd_gguf *g, const char *key, sd_error *err) {
    return sd_errorf(err, SD_ERR_FORMAT, "%s: missing metadata key '%s'", g->path, key);
}

static int wrong_type(const sd_gguf *g, const char *key, const char *expected, uint32_t found,
                      sd_error *err) {
    return sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected %s, found %s", g->path, key, expected,
                     vtype_name(found));
}

/* Integer value of kv as int64 (u64 above INT64_MAX flagged via *big). -1 if not an
 * integer type. */
static int kv_int(const sd_gguf *g, const gkv *kv, int64_t *v, uint64_t *big) {
    const uint8_t *p = g->map + kv->data_off;
    *big = 0;
    switch (kv->type) {
    case SD_GGUF_U8: {
        uint8_t x;
        memcpy(&x, p, 1);
        *v = x;
        return 0;
    }
    case SD_GGUF_I8: {
        int8_t x;
        memcpy(&x, p, 1);
        *v = x;
        return 0;
    }
    case SD_GGUF_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        *v = x;
        return 0;
    }
    case SD_GGUF_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        *v = x;
        return 0;
    }
    case SD_GGUF_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        *v = x;
        return 0;
    }
    case SD_GGUF_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        *v = x;
        return 0;
    }
    case SD_GGUF_I64: {
        int64_t x;
        memcpy(&x, p, 8);
        *v = x;
        return 0;
    }
    case SD_GGUF_U64: {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x > (uint64_t)INT64_MAX) {
            *big = x;
            *v = INT64_MAX;
        } else {
            *v = (int64_t)x;
        }
        return 0;
    }
    default:
        return -1;
    }
}

static int get_i64(const sd_gguf *g, const char *key, int64_t *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    int64_t v;
    uint64_t big;
    if (kv_int(g, &g->kv[i], &v, &big) != 0)
        return wrong_type(g, key, "an integer", g->kv[i].type, err);
    if (big)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: %s: expected a value <= %" PRId64 ", found %" PRIu64, g->path, key,
                         INT64_MAX, big);
    *out = v;
    return SD_OK;
}

static int get_u32(const sd_gguf *g, const char *key, uint32_t *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    int64_t v;
    uint64_t big;
    if (kv_int(g, &g->kv[i], &v, &big) != 0)
        return wrong_type(g, key, "an integer", g->kv[i].type, err);
    if (big || v < 0 || v > (int64_t)UINT32_MAX) {
        if (big)
            return sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 0..%" PRIu32 ", found %" PRIu64,
                             g->path, key, UINT32_MAX, big);
        return sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 0..%" PRIu32 ", found %" PRId64,
                         g->path, key, UINT32_MAX, v);
    }
    *out = (uint32_t)v;
    return SD_OK;
}

static int get_f32(const sd_gguf *g, const char *key, float *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type == SD_GGUF_F32) {
        memcpy(out, g->map + kv->data_off, 4);
    } else if (kv->type == SD_GGUF_F64) {
        double d;
        memcpy(&d, g->map + kv->data_off, 8);
        *out = (float)d;
    } else {
        return wrong_type(g, key, "f32 or f64", kv->type, err);
    }
    return SD_OK;
}

static int get_bool(const sd_gguf *g, const char *key, int *out, int opt, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return opt ? SD_OK : missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_BOOL) return wrong_type(g, key, "bool", kv->type, err);
    *out = g->map[kv->data_off] != 0;
    return SD_OK;
}

int sd_gguf_get_i64(const sd_gguf *g, const char *key, int64_t *out, sd_error *err) {
    return get_i64(g, key, out, 0, err);
}
int sd_gguf_get_u32(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err) {
    return get_u32(g, key, out, 0, err);
}
int sd_gguf_get_f32(const sd_gguf *g, const char *key, float *out, sd_error *err) {
    return get_f32(g, key, out, 0, err);
}
int sd_gguf_get_bool(const sd_gguf *g, const char *key, int *out, sd_error *err) {
    return get_bool(g, key, out, 0, err);
}
int sd_gguf_get_i64_opt(const sd_gguf *g, const char *key, int64_t *out, sd_error *err) {
    return get_i64(g, key, out, 1, err);
}
int sd_gguf_get_u32_opt(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err) {
    return get_u32(g, key, out, 1, err);
}
int sd_gguf_get_f32_opt(const sd_gguf *g, const char *key, float *out, sd_error *err) {
    return get_f32(g, key, out, 1, err);
}
int sd_gguf_get_bool_opt(const sd_gguf *g, const char *key, int *out, sd_error *err) {
    return get_bool(g, key, out, 1, err);
}

int sd_gguf_get_str(const sd_gguf *g, const char *key, const char **s, size_t *len, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_STRING) return wrong_type(g, key, "string", kv->type, err);
    *s = (const char *)g->map + kv->data_off;
    *len = (size_t)kv->n;
    return SD_OK;
}

int sd_gguf_get_arr(const sd_gguf *g, const char *key, sd_gguf_vtype *elem_type, uint64_t *n,
                    const void **data, sd_error *err) {
    int64_t i = sd_gguf_find_key(g, key);
    if (i < 0) return missing(g, key, err);
    const gkv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_ARRAY) return wrong_type(g, key, "array", kv->type, err);
    *elem_type = kv->elem;
    *n = kv->n;
    *data = kv->elem == SD_GGUF_STRING ? NULL : (const void *)(g->map + kv->data_off);
    return SD_OK;
}

int sd_gguf_arr_str(const sd_gguf *g, int64_t kv_i, uint64_t i, const char **s, size_t *len) {
    if (kv_i < 0 || kv_i >= g->n_kv) return SD_ERR_ARG;
    const gkv *kv = &g->kv[kv_i];
    if (kv->type != SD_GGUF_ARRAY || kv->elem != SD_GGUF_STRING || i >= kv->n) return SD_ERR_ARG;
    uint64_t l;
    memcpy(&l, g->map + kv->str_off[i], 8);
    *s = (const char *)g->map + kv->str_off[i] + 8;
    *len = (size_t)l;
    return SD_OK;
}

int64_t sd_gguf_n_tensors(const sd_gguf *g) {
    return g->n_tensors;
}

const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->t[i] : NULL;
}

const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name) {
    if (!g->t_sorted) return NULL;
    int64_t i = name_idx_find(g->t_sorted, g->n_tensors, name);
    return i >= 0 ? &g->t[i] : NULL;
}

/* ------------------------------------------------------------------ writer */

typedef struct wkv {
    char *key;
    uint32_t type;
    uint8_t *val; /* serialized value: the bytes that follow the value-type field */
    size_t val_size;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[SD_GGUF_MAX_DIMS];
    const void *data; /* referenced, not owned */
    size_t nbytes;
} wtensor;

struct sd_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

sd_gguf_writer *sd_gguf_writer_new(void) {
    return calloc(1, sizeof(sd_gguf_writer));
}

void sd_gguf_writer_free(sd_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w);
}

static wkv *writer_find(const sd_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return &w->kv[i];
    return NULL;
}

/* Set key to a serialized value (copied). Replaces an existing key in place. */
static int set_raw(sd_gguf_writer *w, const char *key, uint32_t type, const void *val,
                   size_t size) {
    if (!key || !*key) return SD_ERR_ARG;
    uint8_t *v = malloc(size ? size : 1);
    if (!v) return SD_ERR_OOM;
    if (size) memcpy(v, val, size);
    wkv *kv = writer_find(w, key);
    if (kv) {
        free(kv->val);
    } else {
        char *k = strdup(key);
        if (!k || grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv)) {
            free(k);
            free(v);
            return SD_ERR_OOM;
        }
        kv = &w->kv[w->n_kv++];
        kv->key = k;
    }
    kv->type = type;
    kv->val = v;
    kv->val_size = size;
    return SD_OK;
}

int sd_gguf_set_u32(sd_gguf_writer *w, const char *key, uint32_t v) {
    return set_raw(w, key, SD_GGUF_U32, &v, 4);
}
int sd_gguf_set_i32(sd_gguf_writer *w, const char *key, int32_t v) {
    return set_raw(w, key, SD_GGUF_I32, &v, 4);
}
int sd_gguf_set_f32(sd_gguf_writer *w, const char *key, float v) {
    return set_raw(w, key, SD_GGUF_F32, &v, 4);
}
int sd_gguf_set_bool(sd_gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    return set_raw(w, key, SD_GGUF_BOOL, &b, 1);
}

int sd_gguf_set_scalar(sd_gguf_writer *w, const char *key, sd_gguf_vtype type, const void *v) {
    size_t sz = vtype_size(type);
    if (sz == 0) return SD_ERR_ARG;
    if (type == SD_GGUF_BOOL) return sd_gguf_set_bool(w, key, *(const uint8_t *)v);
    return set_raw(w, key, type, v, sz);
}

int sd_gguf_set_str(sd_gguf_writer *w, const char *key, const char *v) {
    size_t len = strlen(v), size;
    if (sd_add_size(len, 8, &size) != 0) return SD_ERR_OOM;
    uint8_t *buf = malloc(size);
    if (!buf) return SD_ERR_OOM;
    uint64_t l = len;
    memcpy(buf, &l, 8);
    memcpy(buf + 8, v, len);
    int st = set_raw(w, key, SD_GGUF_STRING, buf, size);
    free(buf);
    return st;
}

int sd_gguf_set_arr(sd_gguf_writer *w, const char *key, sd_gguf_vtype elem_type, const void *data,
                    uint64_t n) {
    size_t esz = vtype_size(elem_type), bytes, size;
    if (esz == 0) return SD_ERR_ARG; /* strings: sd_gguf_set_arr_str; nested: unsupported */
    if (n > SIZE_MAX || sd_mul_size((size_t)n, esz, &bytes) != 0 ||
        sd_add_size(bytes, 12, &size) != 0)
        return SD_ERR_OOM;
    uint8_t *buf = malloc(size);
    if (!buf) return SD_ERR_OOM;
    uint32_t et = elem_type;
    memcpy(buf, &et, 4);
    memcpy(buf + 4, &n, 8);
    if (bytes) memcpy(buf + 12, data, bytes);
    int st = set_raw(w, key, SD_GGUF_ARRAY, buf, size);
    free(buf);
    return st;
}

int sd_gguf_set_arr_str(sd_gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    size_t size = 12;
    if (n > SIZE_MAX / 8) return SD_ERR_OOM;
    for (uint64_t i = 0; i < n; i++)
        if (sd_add_size(size, 8, &size) != 0 || sd_add_size(size, strlen(v[i]), &size) != 0)
            return SD_ERR_OOM;
    uint8_t *buf = malloc(size), *p = buf;
    if (!buf) return SD_ERR_OOM;
    uint32_t et = SD_GGUF_STRING;
    memcpy(p, &et, 4);
    memcpy(p + 4, &n, 8);
    p += 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = strlen(v[i]);
        memcpy(p, &l, 8);
        memcpy(p + 8, v[i], (size_t)l);
        p += 8 + l;
    }
    int st = set_raw(w, key, SD_GGUF_ARRAY, buf, size);
    free(buf);
    return st;
}

int sd_gguf_copy_kv(sd_gguf_writer *w, const sd_gguf *src) {
    for (int64_t i = 0; i < src->n_kv; i++) {
        const gkv *kv = &src->kv[i];
        int st = set_raw(w, kv->key, kv->type, src->map + kv->val_off, kv->val_size);
        if (st) return st;
    }
    return SD_OK;
}

int sd_gguf_add_tensor(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const int64_t *ne, const void *data, size_t nbytes, sd_error *err) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > GGUF_MAX_NAME)
        return sd_errorf(err, SD_ERR_ARG,
                         "gguf writer: tensor name: expected 1..%d bytes, found %zu", GGUF_MAX_NAME,
                         len);
    if (n_dims < 1 || n_dims > SD_GGUF_MAX_DIMS)
        return sd_errorf(err, SD_ERR_ARG,
                         "gguf writer: tensor '%s': n_dims: expected 1..%d, found %" PRIu32, name,
                         SD_GGUF_MAX_DIMS, n_dims);
    if (!sd_type_supported(type))
        return sd_errorf(
            err, SD_ERR_ARG,
            "gguf writer: tensor '%s': type: expected a supported type, found id %" PRIu32, name,
            type);
    int64_t shape[SD_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0)
            return sd_errorf(err, SD_ERR_ARG,
                             "gguf writer: tensor '%s': ne[%" PRIu32
                             "]: expected >= 0, found %" PRId64,
                             name, d, ne[d]);
        shape[d] = ne[d];
    }
    size_t want;
    if (tensor_nbytes(type, n_dims, shape, &want) != 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "gguf writer: tensor '%s': shape: expected ne[0] a multiple of %" PRId64
                         " (%s), found %" PRId64,
                         name, sd_type_block_elems((sd_type)type), sd_type_name(type), ne[0]);
    if (want != nbytes)
        return sd_errorf(err, SD_ERR_ARG,
                         "gguf writer: tensor '%s': nbytes: expected %zu, found %zu", name, want,
                         nbytes);
    if (nbytes > 0 && !data)
        return sd_errorf(err, SD_ERR_ARG, "gguf writer: tensor '%s': data: expected non-NULL",
                         name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return sd_errorf(err, SD_ERR_ARG,
                             "gguf writer: tensor '%s': expected a unique name, found a duplicate",
                             name);
    char *nm = strdup(name);
    if (!nm || grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t)) {
        free(nm);
        return sd_errorf(err, SD_ERR_OOM, "gguf writer: tensor '%s': out of memory", name);
    }
    wtensor *t = &w->t[w->n_t++];
    t->name = nm;
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, shape, sizeof shape);
    t->data = data;
    t->nbytes = nbytes;
    return SD_OK;
}

/* Buffered output with a sticky error flag. */
typedef struct wout {
    FILE *f;
    uint64_t pos;
    int failed;
} wout;

static void w_bytes(wout *o, const void *p, size_t n) {
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->failed = 1;
    o->pos += n;
}
static void w_u32(wout *o, uint32_t v) {
    w_bytes(o, &v, 4);
}
static void w_u64(wout *o, uint64_t v) {
    w_bytes(o, &v, 8);
}
static void w_str(wout *o, const char *s) {
    size_t n = strlen(s);
    w_u64(o, n);
    w_bytes(o, s, n);
}
static void w_pad(wout *o, uint32_t align) {
    static const uint8_t zeros[64];
    uint64_t rem = o->pos % align;
    if (!rem) return;
    uint64_t n = align - rem;
    while (n > 0) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        w_bytes(o, zeros, k);
        n -= k;
    }
}

/* fsync the directory holding path so the rename itself is durable (best effort). */
static void fsync_dir(const char *path) {
    char *dup = strdup(path);
    if (!dup) return;
    char *slash = strrchr(dup, '/');
    const char *dir = ".";
    if (slash == dup)
        dir = "/";
    else if (slash) {
        *slash = '\0';
        dir = dup;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dup);
}

int sd_gguf_writer_write(const sd_gguf_writer *w, const char *path, sd_error *err) {
    uint32_t align = SD_GGUF_DEFAULT_ALIGNMENT;
    const wkv *ak = writer_find(w, "general.alignment");
    if (ak) {
        uint32_t a = 0;
        if (ak->type == SD_GGUF_U32) memcpy(&a, ak->val, 4);
        if (ak->type != SD_GGUF_U32 || !is_pow2(a))
            return sd_errorf(
                err, SD_ERR_ARG,
                "%s: general.alignment: expected a u32 power of two, found %s %" PRIu32, path,
                vtype_name(ak->type), a);
        align = a;
    }

    int st = sd_gguf_check_output(path, NULL, 0, err);
    if (st) return st;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    sd_gguf_temp_path(path, tmp, plen + 32);
    int fd = sd_gguf_temp_create(path, tmp, err);
    if (fd < 0) {
        free(tmp);
        return err ? err->status : SD_ERR_IO;
    }
    wout o = {fdopen(fd, "wb"), 0, 0};
    if (!o.f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return sd_errorf(err, SD_ERR_IO, "%s: fdopen: %s", path, strerror(e));
    }

    /* header */
    w_bytes(&o, GGUF_MAGIC, 4);
    w_u32(&o, 3);
    w_u64(&o, w->n_t);
    w_u64(&o, w->n_kv);
    /* key/values */
    for (size_t i = 0; i < w->n_kv; i++) {
        w_str(&o, w->kv[i].key);
        w_u32(&o, w->kv[i].type);
        w_bytes(&o, w->kv[i].val, w->kv[i].val_size);
    }
    /* tensor infos: offsets relative to the data section, each aligned */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        w_str(&o, t->name);
        w_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            w_u64(&o, (uint64_t)t->ne[d]);
        w_u32(&o, t->type);
        w_u64(&o, off);
        off += t->nbytes;
        off += (align - off % align) % align;
    }
    /* data: each tensor padded to the alignment (as llama.cpp and gguf-py write it) */
    if (w->n_t > 0) w_pad(&o, align);
    for (size_t i = 0; i < w->n_t; i++) {
        w_bytes(&o, w->t[i].data, w->t[i].nbytes);
        w_pad(&o, align);
    }

    int e = 0;
    const char *what = "write";
    if (o.failed) e = errno ? errno : EIO;
    if (!e && fflush(o.f) != 0) e = errno, what = "flush";
    if (!e && fsync(fileno(o.f)) != 0) e = errno, what = "fsync";
    if (fclose(o.f) != 0 && !e) e = errno, what = "close";
    if (!e && rename(tmp, path) != 0) e = errno, what = "rename";
    if (e) {
        unlink(tmp);
        free(tmp);
        return sd_errorf(err, SD_ERR_IO, "%s: %s: %s", path, what, strerror(e));
    }
    fsync_dir(path);
    free(tmp);
    return SD_OK;
}
