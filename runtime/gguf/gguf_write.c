/*
 * runtime/gguf/gguf_write.c: the GGUF writer. Metadata values are kept serialized (the
 * bytes after the value-type field), tensors are referenced. The file goes to a temporary
 * name next to path, is fsync'ed and renamed over path; on any failure the temporary is
 * removed (outpath.c checks the path before anything is written).
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
        if (!k || sd_gguf_grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv)) {
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
    size_t sz = sd_gguf_vtype_size(type);
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
    size_t esz = sd_gguf_vtype_size(elem_type), bytes, size;
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
    if (sd_gguf_tensor_nbytes(type, n_dims, shape, &want) != 0)
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
    if (!nm || sd_gguf_grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t)) {
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

int sd_gguf_writer_write(const sd_gguf_writer *w, const char *path, sd_error *err) {
    uint32_t align = SD_GGUF_DEFAULT_ALIGNMENT;
    const wkv *ak = writer_find(w, "general.alignment");
    if (ak) {
        uint32_t a = 0;
        if (ak->type == SD_GGUF_U32) memcpy(&a, ak->val, 4);
        if (ak->type != SD_GGUF_U32 || !sd_gguf_is_pow2(a))
            return sd_errorf(
                err, SD_ERR_ARG,
                "%s: general.alignment: expected a u32 power of two, found %s %" PRIu32, path,
                sd_gguf_vtype_name(ak->type), a);
        align = a;
    }

    int st = sd_gguf_check_output(path, NULL, 0, err);
    if (st) return st;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    sd_file_temp_path(path, tmp, plen + 32);
    int fd = sd_file_temp_create(path, tmp, err);
    if (fd < 0) {
        free(tmp);
        return err ? err->status : SD_ERR_IO;
    }
    wout o = {fdopen(fd, "wb"), 0, 0};
    if (!o.f) {
        int e = errno;
        st = sd_file_temp_commit(fd, tmp, path, e, err); /* closes fd, removes tmp */
        free(tmp);
        return st;
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

    /* Everything buffered goes out here; the descriptor, duplicated, is then synced,
     * closed and renamed by sd_file_temp_commit. */
    int e = o.failed ? (errno ? errno : EIO) : 0;
    if (!e && fflush(o.f) != 0) e = errno ? errno : EIO;
    const int fd2 = e ? -1 : dup(fileno(o.f));
    if (!e && fd2 < 0) e = errno;
    if (fclose(o.f) != 0 && !e) e = errno ? errno : EIO;
    st = sd_file_temp_commit(fd2, tmp, path, e, err);
    free(tmp);
    return st;
}
