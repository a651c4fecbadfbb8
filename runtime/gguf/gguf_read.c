/*
 * runtime/gguf/gguf_read.c: the GGUF v3 reader (mmap, read-only). See runtime/sd_gguf.h for the
 * layout; the format is ggml's docs/gguf.md (and llama.cpp's ggml/src/gguf.cpp, whose checks this
 * reader follows and tightens).
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
        if (elem != SD_GGUF_STRING && sd_gguf_vtype_size(elem) == 0)
            return sd_errorf(r->err, SD_ERR_FORMAT,
                             "%s: %s: expected a value type 0..12, found %" PRIu32, r->path, f,
                             elem);
        kv->elem = (sd_gguf_vtype)elem;
        snprintf(f, sizeof f, "%s: array length", field);
        if ((st = rd_u64(r, &kv->n, f))) return st;
        /* Every element takes >= 8 bytes (string) or its scalar size. */
        size_t min_elem = elem == SD_GGUF_STRING ? 8 : sd_gguf_vtype_size(elem);
        if (kv->n > rd_left(r) / min_elem)
            return sd_errorf(r->err, SD_ERR_FORMAT,
                             "%s: %s: expected at most %zu elements of %s (bytes left), found "
                             "%" PRIu64,
                             r->path, f, rd_left(r) / min_elem, sd_gguf_vtype_name(elem), kv->n);
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
        size_t sz = sd_gguf_vtype_size(kv->type);
        if ((st = rd_need(r, sz, field))) return st;
        kv->data_off = r->pos;
        r->pos += sz;
    }
    kv->val_size = r->pos - kv->val_off;
    return SD_OK;
}

/* Header: magic, version, and the two counts, each bounded by the bytes left. */
static int parse_header(rd *r, sd_gguf *g, uint64_t *n_tensors_out, uint64_t *n_kv_out) {
    sd_error *err = r->err;
    int st;
    if ((st = rd_need(r, 4, "header.magic"))) return st;
    if (memcmp(g->map, GGUF_MAGIC, 4) != 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.magic: expected \"GGUF\", found bytes %02x %02x %02x %02x",
                         g->path, g->map[0], g->map[1], g->map[2], g->map[3]);
    r->pos = 4;
    if ((st = rd_u32(r, &g->version, "header.version"))) return st;
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
    if ((st = rd_u64(r, &n_tensors, "header.n_tensors"))) return st;
    if ((st = rd_u64(r, &n_kv, "header.n_kv"))) return st;
    /* A kv takes >= 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes; a tensor info
     * >= 8 + 1 (name) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset). */
    if (n_kv > rd_left(r) / 14)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.n_kv: expected at most %zu (14 bytes each in %zu bytes "
                         "left), found %" PRIu64,
                         g->path, rd_left(r) / 14, rd_left(r), n_kv);
    if (n_tensors > rd_left(r) / 33)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.n_tensors: expected at most %zu (33 bytes each in %zu bytes "
                         "left), found %" PRIu64,
                         g->path, rd_left(r) / 33, rd_left(r), n_tensors);
    *n_tensors_out = n_tensors;
    *n_kv_out = n_kv;
    return SD_OK;
}

/* The n_kv key/value pairs. */
static int parse_kvs(rd *r, sd_gguf *g, uint64_t n_kv) {
    sd_error *err = r->err;
    char f[320];
    int st;
    size_t cap = 0;
    g->alignment = SD_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (sd_gguf_grow((void **)&g->kv, &cap, (size_t)g->n_kv, sizeof *g->kv))
            return sd_errorf(err, SD_ERR_OOM, "%s: kv[%" PRIu64 "]: out of memory", g->path, i);
        gkv *kv = &g->kv[g->n_kv];
        memset(kv, 0, sizeof *kv);
        g->n_kv++;
        snprintf(f, sizeof f, "kv[%" PRIu64 "] key", i);
        if ((st = rd_name(r, &kv->key, 0, f))) return st;
        uint32_t type;
        snprintf(f, sizeof f, "kv[%" PRIu64 "] '%s': value type", i, kv->key);
        if ((st = rd_u32(r, &type, f))) return st;
        if (type > SD_GGUF_F64)
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: %s: expected a value type 0..12, found %" PRIu32, g->path, f,
                             type);
        kv->type = (sd_gguf_vtype)type;
        snprintf(f, sizeof f, "kv[%" PRIu64 "] '%s'", i, kv->key);
        if ((st = rd_value(r, kv, f))) return st;
    }
    return SD_OK;
}

/* The sorted key index (duplicate keys rejected) and general.alignment. */
static int index_kvs(sd_gguf *g, sd_error *err) {
    if (g->n_kv > 0) {
        g->kv_sorted = malloc((size_t)g->n_kv * sizeof *g->kv_sorted);
        if (!g->kv_sorted)
            return sd_errorf(err, SD_ERR_OOM, "%s: kv index: out of memory", g->path);
        for (int64_t i = 0; i < g->n_kv; i++)
            g->kv_sorted[i] = (name_idx){g->kv[i].key, i};
        qsort(g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, sd_gguf_name_idx_cmp);
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
                             sd_gguf_vtype_name(kv->type));
        uint32_t a;
        memcpy(&a, g->map + kv->data_off, 4);
        if (!sd_gguf_is_pow2(a))
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: general.alignment: expected a non-zero power of two, found "
                             "%" PRIu32,
                             g->path, a);
        g->alignment = a;
    }
    return SD_OK;
}

/* The n_tensors tensor infos (offsets[i]: tensor i's data offset, checked aligned). */
static int parse_tensor_infos(rd *r, sd_gguf *g, uint64_t n_tensors, uint64_t *offsets) {
    sd_error *err = r->err;
    char f[320];
    int st;
    if (n_tensors > 0) {
        g->t = calloc((size_t)n_tensors, sizeof *g->t); /* bounded above by bytes left / 33 */
        if (!g->t) return sd_errorf(err, SD_ERR_OOM, "%s: tensor infos: out of memory", g->path);
    }
    st = SD_OK;
    for (uint64_t i = 0; i < n_tensors && st == SD_OK; i++) {
        sd_gguf_tensor *t = &g->t[i];
        char *name = NULL;
        snprintf(f, sizeof f, "tensor[%" PRIu64 "] name", i);
        if ((st = rd_name(r, &name, GGUF_MAX_NAME, f))) break;
        t->name = name;
        g->n_tensors++;
        snprintf(f, sizeof f, "tensor '%s': n_dims", name);
        if ((st = rd_u32(r, &t->n_dims, f))) break;
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
            if ((st = rd_u64(r, &v, f))) break;
            if (v > (uint64_t)INT64_MAX)
                st =
                    sd_errorf(err, SD_ERR_FORMAT, "%s: %s: expected 0..%" PRId64 ", found %" PRId64,
                              g->path, f, INT64_MAX, (int64_t)v);
            t->ne[d] = (int64_t)v;
        }
        if (st) break;
        snprintf(f, sizeof f, "tensor '%s': type", name);
        if ((st = rd_u32(r, &t->type, f))) break;
        if (!sd_type_supported(t->type)) {
            st = sd_errorf(err, SD_ERR_UNSUPPORTED,
                           "%s: %s: expected a supported ggml type id (%s), found type id "
                           "%" PRIu32,
                           g->path, f, sd_type_writable_names(), t->type);
            break;
        }
        if (sd_gguf_tensor_nbytes(t->type, t->n_dims, t->ne, &t->nbytes) != 0) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: tensor '%s': shape: expected ne[0] a multiple of %" PRId64
                           " (%s) and a size that fits in memory, found [%" PRId64 ", %" PRId64
                           ", %" PRId64 ", %" PRId64 "]",
                           g->path, name, sd_type_block_elems((sd_type)t->type),
                           sd_type_name(t->type), t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
            break;
        }
        snprintf(f, sizeof f, "tensor '%s': offset", name);
        if ((st = rd_u64(r, &offsets[i], f))) break;
        if (offsets[i] % g->alignment != 0) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: %s: expected a multiple of the alignment %" PRIu32
                           ", found %" PRIu64,
                           g->path, f, g->alignment, offsets[i]);
            break;
        }
    }
    return st;
}

/* The sorted tensor-name index (duplicate names rejected). */
static int index_tensors(sd_gguf *g, sd_error *err) {
    int st = SD_OK;
    if (st == SD_OK && g->n_tensors > 0) {
        g->t_sorted = malloc((size_t)g->n_tensors * sizeof *g->t_sorted);
        if (!g->t_sorted)
            st = sd_errorf(err, SD_ERR_OOM, "%s: tensor index: out of memory", g->path);
    }
    if (st == SD_OK && g->n_tensors > 0) {
        for (int64_t i = 0; i < g->n_tensors; i++)
            g->t_sorted[i] = (name_idx){g->t[i].name, i};
        qsort(g->t_sorted, (size_t)g->n_tensors, sizeof *g->t_sorted, sd_gguf_name_idx_cmp);
        for (int64_t i = 1; i < g->n_tensors && st == SD_OK; i++)
            if (strcmp(g->t_sorted[i - 1].name, g->t_sorted[i].name) == 0)
                st = sd_errorf(err, SD_ERR_FORMAT,
                               "%s: tensor[%" PRId64 "] '%s': expected a unique name, found a "
                               "duplicate of tensor[%" PRId64 "]",
                               g->path, g->t_sorted[i].idx, g->t_sorted[i].name,
                               g->t_sorted[i - 1].idx);
    }
    return st;
}

/* Data section and every tensor's data inside the file, regions pairwise disjoint. */
static int place_data(sd_gguf *g, size_t infos_end, const uint64_t *offsets, sd_error *err) {
    int st = SD_OK;
    /* data section: starts at the next multiple of the alignment after the infos. With
     * no tensors the file may end right after the metadata (llama.cpp vocab files). */
    if (st == SD_OK) {
        size_t ds = infos_end;
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
    return st;
}

static int parse(sd_gguf *g, sd_error *err) {
    rd r = {g->map, g->size, 0, g->path, err};
    uint64_t n_tensors = 0, n_kv = 0;
    int st = parse_header(&r, g, &n_tensors, &n_kv);
    if (!st) st = parse_kvs(&r, g, n_kv);
    if (!st) st = index_kvs(g, err);
    if (st) return st;
    uint64_t *offsets = n_tensors ? calloc((size_t)n_tensors, sizeof *offsets) : NULL;
    if (n_tensors && !offsets)
        return sd_errorf(err, SD_ERR_OOM, "%s: tensor infos: out of memory", g->path);
    st = parse_tensor_infos(&r, g, n_tensors, offsets);
    if (!st) st = index_tensors(g, err);
    if (!st) st = place_data(g, r.pos, offsets, err);
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
    /* A regular file only, opened without blocking (a FIFO would wait for a writer). */
    int fd = sd_file_open_regular(path, err);
    if (fd < 0) {
        sd_gguf_close(g);
        return SD_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_IO, "%s: stat: %s", path, strerror(e));
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
    return sd_gguf_name_idx_find(g->kv_sorted, g->n_kv, key);
}

const char *sd_gguf_key_name(const sd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

sd_gguf_vtype sd_gguf_kv_type(const sd_gguf *g, int64_t i) {
    return g->kv[i].type;
}
