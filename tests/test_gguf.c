/*
 * GGUF reader/writer tests: a round trip of every metadata type and every supported
 * tensor type, and a table of handcrafted corrupt files in the style of llama.cpp's
 * tests/test-gguf.cpp (HANDCRAFTED_*): every prefix of a valid file, bad magic and
 * version, absurd counts and lengths, unknown types, misaligned/overlapping/out-of-file
 * tensor data, bad alignment, too many dims, duplicates. Every corrupt file must fail
 * with the expected status and a one-line message naming the file; none may crash
 * (run under -DSD_SANITIZE=ON too).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/gguf/sd_gguf.h"
#include "testutil.h"

/* ---------------------------------------------------------------- temp directory */

static char g_dir[1024];

static void setup_dir(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0, "mkdtemp failed");
}

static void teardown_dir(void) {
    tu_rmdir(g_dir);
}

static void tpath(char *out, size_t n, const char *name) {
    tu_path(out, n, g_dir, name);
}

static void write_file(const char *path, const void *buf, size_t n) {
    cr_assert_eq(tu_write_file(path, buf, n), 0, "cannot write %s", path);
}

static uint8_t *read_file(const char *path, size_t *n) {
    uint8_t *b = tu_read_file(path, n);
    cr_assert_not_null(b, "cannot read %s", path);
    return b;
}

static int n_files_in_dir(void) {
    return tu_count_files(g_dir);
}

/* ---------------------------------------------------------------- round trip */

TestSuite(gguf, .init = setup_dir, .fini = teardown_dir);

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

Test(gguf, round_trip_every_type) {
    char path[512];
    tpath(path, sizeof path, "rt.gguf");
    sd_gguf_writer *w = sd_gguf_writer_new();
    cr_assert_not_null(w);

    /* scalars of every type */
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint32_t u32 = 4000000000u;
    int32_t i32 = -2000000000;
    float f32 = 3.25f;
    uint8_t b = 1;
    uint64_t u64 = 18000000000000000000ull;
    int64_t i64 = -9000000000000000000ll;
    double f64 = -1.0e300;
    cr_assert_eq(sd_gguf_set_scalar(w, "t.u8", SD_GGUF_U8, &u8), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.i8", SD_GGUF_I8, &i8), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.u16", SD_GGUF_U16, &u16), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.i16", SD_GGUF_I16, &i16), SD_OK);
    cr_assert_eq(sd_gguf_set_u32(w, "t.u32", u32), SD_OK);
    cr_assert_eq(sd_gguf_set_i32(w, "t.i32", i32), SD_OK);
    cr_assert_eq(sd_gguf_set_f32(w, "t.f32", f32), SD_OK);
    cr_assert_eq(sd_gguf_set_bool(w, "t.bool", b), SD_OK);
    cr_assert_eq(sd_gguf_set_str(w, "t.str", "héllo ▁world"), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.u64", SD_GGUF_U64, &u64), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.i64", SD_GGUF_I64, &i64), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.f64", SD_GGUF_F64, &f64), SD_OK);
    cr_assert_eq(sd_gguf_set_scalar(w, "t.bad", SD_GGUF_STRING, &u8), SD_ERR_ARG);
    /* replacing keeps the position */
    cr_assert_eq(sd_gguf_set_str(w, "t.replace", "old"), SD_OK);
    cr_assert_eq(sd_gguf_set_u32(w, "t.after", 7), SD_OK);
    cr_assert_eq(sd_gguf_set_str(w, "t.replace", "new value"), SD_OK);

    /* arrays of every numeric type (3 elements each), an empty one, string arrays */
    static const sd_gguf_vtype num[] = {SD_GGUF_U8,  SD_GGUF_I8,  SD_GGUF_U16, SD_GGUF_I16,
                                        SD_GGUF_U32, SD_GGUF_I32, SD_GGUF_F32, SD_GGUF_BOOL,
                                        SD_GGUF_U64, SD_GGUF_I64, SD_GGUF_F64};
    uint8_t arrdata[11][24];
    for (int k = 0; k < 11; k++) {
        char key[64];
        fill_bytes(arrdata[k], sizeof arrdata[k], 100u + (uint32_t)k);
        if (num[k] == SD_GGUF_BOOL)
            for (int j = 0; j < 3; j++)
                arrdata[k][j] &= 1;
        snprintf(key, sizeof key, "arr.%d", (int)num[k]);
        cr_assert_eq(sd_gguf_set_arr(w, key, num[k], arrdata[k], 3), SD_OK);
    }
    cr_assert_eq(sd_gguf_set_arr(w, "arr.empty", SD_GGUF_F32, NULL, 0), SD_OK);
    cr_assert_eq(sd_gguf_set_arr(w, "arr.bad", SD_GGUF_STRING, NULL, 0), SD_ERR_ARG);
    const char *strs[] = {"<unk>", "", "▁the", "a much longer string with spaces"};
    cr_assert_eq(sd_gguf_set_arr_str(w, "arr.str", strs, 4), SD_OK);
    cr_assert_eq(sd_gguf_set_arr_str(w, "arr.str_empty", strs, 0), SD_OK);

    /* tensors of every supported type */
    struct {
        const char *name;
        uint32_t type;
        uint32_t n_dims;
        int64_t ne[4];
    } ts[] = {
        {"f32.weight", SD_TYPE_F32, 2, {5, 3, 1, 1}},
        {"f16.weight", SD_TYPE_F16, 3, {7, 2, 2, 1}},
        {"q8_0.weight", SD_TYPE_Q8_0, 2, {64, 3, 1, 1}},
        {"q4_0.weight", SD_TYPE_Q4_0, 2, {96, 2, 1, 1}},
        {"bf16.weight", SD_TYPE_BF16, 4, {3, 2, 2, 2}},
        {"norm", SD_TYPE_F32, 1, {8, 1, 1, 1}},
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    uint8_t *tdata[NT];
    size_t tbytes[NT];
    for (int k = 0; k < NT; k++) {
        size_t row;
        cr_assert_eq(sd_type_row_bytes((sd_type)ts[k].type, ts[k].ne[0], &row), 0);
        tbytes[k] = row * (size_t)(ts[k].ne[1] * ts[k].ne[2] * ts[k].ne[3]);
        tdata[k] = malloc(tbytes[k]);
        fill_bytes(tdata[k], tbytes[k], 7u * (uint32_t)k + 1u);
        sd_error err = {0};
        cr_assert_eq(sd_gguf_add_tensor(w, ts[k].name, ts[k].type, ts[k].n_dims, ts[k].ne, tdata[k],
                                        tbytes[k], &err),
                     SD_OK, "%s", err.msg);
    }
    /* writer argument checks */
    {
        sd_error err = {0};
        int64_t ne[2] = {5, 3};
        cr_assert_eq(
            sd_gguf_add_tensor(w, "f32.weight", SD_TYPE_F32, 2, ne, tdata[0], tbytes[0], &err),
            SD_ERR_ARG);
        cr_assert_eq(sd_gguf_add_tensor(w, "x", SD_TYPE_F32, 2, ne, tdata[0], tbytes[0] - 1, &err),
                     SD_ERR_ARG);
        int64_t ne31[1] = {31};
        cr_assert_eq(sd_gguf_add_tensor(w, "y", SD_TYPE_Q8_0, 1, ne31, tdata[0], 34, &err),
                     SD_ERR_ARG);
        cr_assert_eq(sd_gguf_add_tensor(w, "z", 99, 1, ne, tdata[0], 20, &err), SD_ERR_ARG);
        cr_assert_eq(sd_gguf_add_tensor(w, "z", SD_TYPE_F32, 5, ne, tdata[0], 20, &err),
                     SD_ERR_ARG);
    }

    sd_error err = {0};
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(n_files_in_dir(), 1, "temporary file left behind");

    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_version(g), 3);
    cr_assert_eq(sd_gguf_alignment(g), 32);
    cr_assert_eq(sd_gguf_n_kv(g), 12 + 2 + 11 + 1 + 2);

    /* scalars, by raw type and through the typed getters */
    int64_t v64;
    uint32_t v32;
    float vf;
    int vb;
    cr_assert_eq(sd_gguf_kv_type(g, sd_gguf_find_key(g, "t.u8")), SD_GGUF_U8);
    cr_assert_eq(sd_gguf_get_i64(g, "t.u8", &v64, &err), SD_OK);
    cr_assert_eq(v64, 200);
    cr_assert_eq(sd_gguf_get_i64(g, "t.i8", &v64, &err), SD_OK);
    cr_assert_eq(v64, -100);
    cr_assert_eq(sd_gguf_get_i64(g, "t.u16", &v64, &err), SD_OK);
    cr_assert_eq(v64, 60000);
    cr_assert_eq(sd_gguf_get_i64(g, "t.i16", &v64, &err), SD_OK);
    cr_assert_eq(v64, -30000);
    cr_assert_eq(sd_gguf_get_u32(g, "t.u32", &v32, &err), SD_OK);
    cr_assert_eq(v32, 4000000000u);
    cr_assert_eq(sd_gguf_get_i64(g, "t.i32", &v64, &err), SD_OK);
    cr_assert_eq(v64, -2000000000);
    cr_assert_eq(sd_gguf_get_u32(g, "t.i32", &v32, &err), SD_ERR_FORMAT, "negative to u32");
    cr_assert_eq(sd_gguf_get_f32(g, "t.f32", &vf, &err), SD_OK);
    cr_assert_eq(vf, 3.25f);
    cr_assert_eq(sd_gguf_get_bool(g, "t.bool", &vb, &err), SD_OK);
    cr_assert_eq(vb, 1);
    cr_assert_eq(sd_gguf_get_i64(g, "t.u64", &v64, &err), SD_ERR_FORMAT, "u64 > INT64_MAX");
    cr_assert_eq(sd_gguf_get_i64(g, "t.i64", &v64, &err), SD_OK);
    cr_assert_eq(v64, i64);
    cr_assert_eq(sd_gguf_get_f32(g, "t.f64", &vf, &err), SD_OK);
    cr_assert_eq(vf, (float)f64);
    const char *s;
    size_t len;
    cr_assert_eq(sd_gguf_get_str(g, "t.str", &s, &len, &err), SD_OK);
    cr_assert_eq(len, strlen("héllo ▁world"));
    cr_assert_eq(memcmp(s, "héllo ▁world", len), 0);
    cr_assert_eq(sd_gguf_get_str(g, "t.replace", &s, &len, &err), SD_OK);
    cr_assert_eq(len, 9);
    cr_assert_eq(memcmp(s, "new value", 9), 0);
    cr_assert_eq(sd_gguf_find_key(g, "t.replace") + 1, sd_gguf_find_key(g, "t.after"),
                 "replacing a key must keep its position");
    /* typed getter errors */
    cr_assert_eq(sd_gguf_get_i64(g, "t.str", &v64, &err), SD_ERR_FORMAT);
    cr_assert_eq(sd_gguf_get_i64(g, "no.such.key", &v64, &err), SD_ERR_FORMAT);
    cr_assert(strstr(err.msg, "missing metadata key 'no.such.key'"), "%s", err.msg);
    cr_assert(strncmp(err.msg, path, strlen(path)) == 0, "%s", err.msg);
    v64 = 42;
    cr_assert_eq(sd_gguf_get_i64_opt(g, "no.such.key", &v64, &err), SD_OK);
    cr_assert_eq(v64, 42);
    v32 = 43;
    cr_assert_eq(sd_gguf_get_u32_opt(g, "no.such.key", &v32, &err), SD_OK);
    cr_assert_eq(v32, 43);
    cr_assert_eq(sd_gguf_get_f32_opt(g, "t.f32", &vf, &err), SD_OK);
    cr_assert_eq(sd_gguf_get_bool_opt(g, "t.u8", &vb, &err), SD_ERR_FORMAT);

    /* arrays */
    for (int k = 0; k < 11; k++) {
        char key[64];
        snprintf(key, sizeof key, "arr.%d", (int)num[k]);
        sd_gguf_vtype et;
        uint64_t n;
        const void *data;
        cr_assert_eq(sd_gguf_get_arr(g, key, &et, &n, &data, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(et, num[k]);
        cr_assert_eq(n, 3);
        size_t esz = (num[k] == SD_GGUF_U8 || num[k] == SD_GGUF_I8 || num[k] == SD_GGUF_BOOL) ? 1
                     : (num[k] == SD_GGUF_U16 || num[k] == SD_GGUF_I16)                       ? 2
                     : (num[k] == SD_GGUF_U64 || num[k] == SD_GGUF_I64 || num[k] == SD_GGUF_F64)
                         ? 8
                         : 4;
        cr_assert_eq(memcmp(data, arrdata[k], 3 * esz), 0, "array %s", key);
    }
    {
        sd_gguf_vtype et;
        uint64_t n;
        const void *data;
        cr_assert_eq(sd_gguf_get_arr(g, "arr.empty", &et, &n, &data, &err), SD_OK);
        cr_assert_eq(n, 0);
        cr_assert_eq(sd_gguf_get_arr(g, "arr.str", &et, &n, &data, &err), SD_OK);
        cr_assert_eq(et, SD_GGUF_STRING);
        cr_assert_eq(n, 4);
        cr_assert_null(data);
        int64_t ki = sd_gguf_find_key(g, "arr.str");
        for (uint64_t i = 0; i < 4; i++) {
            cr_assert_eq(sd_gguf_arr_str(g, ki, i, &s, &len), SD_OK);
            cr_assert_eq(len, strlen(strs[i]));
            cr_assert_eq(memcmp(s, strs[i], len), 0);
        }
        cr_assert_neq(sd_gguf_arr_str(g, ki, 4, &s, &len), SD_OK);
        cr_assert_neq(sd_gguf_arr_str(g, sd_gguf_find_key(g, "t.str"), 0, &s, &len), SD_OK);
        cr_assert_eq(sd_gguf_get_arr(g, "arr.str_empty", &et, &n, &data, &err), SD_OK);
        cr_assert_eq(n, 0);
        cr_assert_eq(sd_gguf_get_arr(g, "t.u8", &et, &n, &data, &err), SD_ERR_FORMAT);
    }

    /* tensors */
    cr_assert_eq(sd_gguf_n_tensors(g), NT);
    const uint8_t *base = sd_gguf_tensor_at(g, 0)->data;
    for (int k = 0; k < NT; k++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, k);
        cr_assert_not_null(t);
        cr_assert_eq(sd_gguf_find_tensor(g, ts[k].name), t);
        cr_assert_str_eq(t->name, ts[k].name);
        cr_assert_eq(t->type, ts[k].type);
        cr_assert_eq(t->n_dims, ts[k].n_dims);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(t->ne[d], ts[k].ne[d]);
        cr_assert_eq(t->nbytes, tbytes[k]);
        cr_assert_eq(memcmp(t->data, tdata[k], tbytes[k]), 0, "tensor %s data", ts[k].name);
        cr_assert_eq(((const uint8_t *)t->data - base) % 32, 0);
    }
    cr_assert_null(sd_gguf_find_tensor(g, "nope"));
    cr_assert_null(sd_gguf_tensor_at(g, NT));

    /* copy_kv reproduces every entry; a second write replaces the file atomically */
    sd_gguf_writer *w2 = sd_gguf_writer_new();
    cr_assert_eq(sd_gguf_copy_kv(w2, g), SD_OK);
    char path2[512];
    tpath(path2, sizeof path2, "copy.gguf");
    cr_assert_eq(sd_gguf_writer_write(w2, path2, &err), SD_OK, "%s", err.msg);
    sd_gguf *g2 = NULL;
    cr_assert_eq(sd_gguf_open(path2, &g2, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_n_kv(g2), sd_gguf_n_kv(g));
    cr_assert_eq(sd_gguf_n_tensors(g2), 0);
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        cr_assert_str_eq(sd_gguf_key_name(g2, i), sd_gguf_key_name(g, i));
        cr_assert_eq(sd_gguf_kv_type(g2, i), sd_gguf_kv_type(g, i));
    }
    {
        int64_t ki = sd_gguf_find_key(g2, "arr.str");
        cr_assert_eq(sd_gguf_arr_str(g2, ki, 2, &s, &len), SD_OK);
        cr_assert_eq(memcmp(s, "▁the", len), 0);
    }
    sd_gguf_close(g2);
    sd_gguf_writer_free(w2);

    sd_gguf_close(g);
    sd_gguf_writer_free(w);
    for (int k = 0; k < NT; k++)
        free(tdata[k]);
}

Test(gguf, custom_alignment) {
    char path[512];
    tpath(path, sizeof path, "align.gguf");
    sd_gguf_writer *w = sd_gguf_writer_new();
    cr_assert_eq(sd_gguf_set_u32(w, "general.alignment", 64), SD_OK);
    float a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8};
    int64_t na[1] = {3}, nb[1] = {5};
    sd_error err = {0};
    cr_assert_eq(sd_gguf_add_tensor(w, "a", SD_TYPE_F32, 1, na, a, sizeof a, &err), SD_OK);
    cr_assert_eq(sd_gguf_add_tensor(w, "b", SD_TYPE_F32, 1, nb, b, sizeof b, &err), SD_OK);
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_OK, "%s", err.msg);
    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_alignment(g), 64);
    const sd_gguf_tensor *ta = sd_gguf_find_tensor(g, "a"), *tb = sd_gguf_find_tensor(g, "b");
    cr_assert_eq((const uint8_t *)tb->data - (const uint8_t *)ta->data, 64);
    cr_assert_eq(memcmp(tb->data, b, sizeof b), 0);
    sd_gguf_close(g);
    /* a bad alignment is refused by the writer, and no file is left */
    cr_assert_eq(sd_gguf_set_u32(w, "general.alignment", 48), SD_OK);
    char path2[512];
    tpath(path2, sizeof path2, "align2.gguf");
    cr_assert_eq(sd_gguf_writer_write(w, path2, &err), SD_ERR_ARG);
    cr_assert_eq(access(path2, F_OK), -1);
    sd_gguf_writer_free(w);
}

Test(gguf, write_failure_leaves_nothing) {
    char path[512];
    tpath(path, sizeof path, "no/such/dir/x.gguf");
    sd_gguf_writer *w = sd_gguf_writer_new();
    cr_assert_eq(sd_gguf_set_u32(w, "k", 1), SD_OK);
    sd_error err = {0};
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_ERR_IO);
    cr_assert(strstr(err.msg, path) != NULL, "%s", err.msg);
    cr_assert_eq(n_files_in_dir(), 0);
    /* writing onto a directory fails at rename: the temporary must be removed */
    char dirpath[512];
    tpath(dirpath, sizeof dirpath, "adir");
    cr_assert_eq(mkdir(dirpath, 0755), 0);
    char inner[600];
    snprintf(inner, sizeof inner, "%s/f", dirpath);
    write_file(inner, "x", 1);
    cr_assert_eq(sd_gguf_writer_write(w, dirpath, &err), SD_ERR_IO);
    cr_assert_eq(n_files_in_dir(), 1, "only the directory must remain");
    unlink(inner);
    rmdir(dirpath);
    sd_gguf_writer_free(w);
}

Test(gguf, open_missing_file) {
    sd_gguf *g = (sd_gguf *)1;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open("/nonexistent/x.gguf", &g, &err), SD_ERR_IO);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, "/nonexistent/x.gguf") == err.msg, "%s", err.msg);
}

/* ---------------------------------------------------------------- handcrafted files */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_bytes(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v) {
    b_bytes(b, &v, 4);
}
static void b_u64(buf *b, uint64_t v) {
    b_bytes(b, &v, 8);
}
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_bytes(b, s, strlen(s));
}
static void b_pad(buf *b, size_t a) {
    while (b->n % a)
        b_bytes(b, "", 1);
}

enum hc {
    HC_VALID,
    HC_BAD_MAGIC,
    HC_VERSION_0,
    HC_VERSION_1,
    HC_VERSION_4,
    HC_VERSION_BIG_ENDIAN,
    HC_HUGE_N_KV,
    HC_HUGE_N_TENSORS,
    HC_HUGE_KEY_LEN,
    HC_HUGE_STR_LEN,
    HC_HUGE_ARR_LEN,
    HC_HUGE_STR_ARR_LEN,
    HC_HUGE_STR_IN_ARR,
    HC_UNKNOWN_VTYPE,
    HC_UNKNOWN_ELEM_TYPE,
    HC_NESTED_ARRAY,
    HC_EMPTY_KEY,
    HC_DUP_KEY,
    HC_ALIGN_NOT_POW2,
    HC_ALIGN_ZERO,
    HC_ALIGN_WRONG_TYPE,
    HC_UNKNOWN_TENSOR_TYPE,
    HC_N_DIMS_5,
    HC_N_DIMS_0,
    HC_NE_NEGATIVE,
    HC_NE_OVERFLOW,
    HC_NE0_NOT_BLOCK_MULTIPLE,
    HC_MISALIGNED_OFFSET,
    HC_DATA_PAST_EOF,
    HC_HUGE_OFFSET,
    HC_OVERLAP,
    HC_DUP_TENSOR,
    HC_HUGE_NAME_LEN,
    HC_LONG_NAME,
    HC_COUNT
};

static const struct {
    const char *name;
    int status;
    const char *needle; /* expected in the message */
} hc_expect[HC_COUNT] = {
    [HC_VALID] = {"valid", SD_OK, NULL},
    [HC_BAD_MAGIC] = {"bad magic", SD_ERR_FORMAT, "header.magic"},
    [HC_VERSION_0] = {"version 0", SD_ERR_FORMAT, "header.version"},
    [HC_VERSION_1] = {"version 1", SD_ERR_FORMAT, "header.version"},
    [HC_VERSION_4] = {"version 4", SD_ERR_FORMAT, "found 4"},
    [HC_VERSION_BIG_ENDIAN] = {"big endian", SD_ERR_FORMAT, "big-endian"},
    [HC_HUGE_N_KV] = {"huge n_kv", SD_ERR_FORMAT, "header.n_kv"},
    [HC_HUGE_N_TENSORS] = {"huge n_tensors", SD_ERR_FORMAT, "header.n_tensors"},
    [HC_HUGE_KEY_LEN] = {"huge key length", SD_ERR_FORMAT, "kv[0] key"},
    [HC_HUGE_STR_LEN] = {"huge string length", SD_ERR_FORMAT, "general.architecture"},
    [HC_HUGE_ARR_LEN] = {"huge array length", SD_ERR_FORMAT, "array length"},
    [HC_HUGE_STR_ARR_LEN] = {"huge string array length", SD_ERR_FORMAT, "array length"},
    [HC_HUGE_STR_IN_ARR] = {"huge string in array", SD_ERR_FORMAT, "element 1"},
    [HC_UNKNOWN_VTYPE] = {"unknown value type", SD_ERR_FORMAT, "value type"},
    [HC_UNKNOWN_ELEM_TYPE] = {"unknown element type", SD_ERR_FORMAT, "element type"},
    [HC_NESTED_ARRAY] = {"nested array", SD_ERR_UNSUPPORTED, "nested"},
    [HC_EMPTY_KEY] = {"empty key", SD_ERR_FORMAT, "non-empty"},
    [HC_DUP_KEY] = {"duplicate key", SD_ERR_FORMAT, "duplicate"},
    [HC_ALIGN_NOT_POW2] = {"alignment 48", SD_ERR_FORMAT, "general.alignment"},
    [HC_ALIGN_ZERO] = {"alignment 0", SD_ERR_FORMAT, "general.alignment"},
    [HC_ALIGN_WRONG_TYPE] = {"alignment i32", SD_ERR_FORMAT, "general.alignment"},
    [HC_UNKNOWN_TENSOR_TYPE] = {"tensor type 99", SD_ERR_UNSUPPORTED, "tensor 'b'"},
    [HC_N_DIMS_5] = {"n_dims 5", SD_ERR_FORMAT, "n_dims"},
    [HC_N_DIMS_0] = {"n_dims 0", SD_ERR_FORMAT, "n_dims"},
    [HC_NE_NEGATIVE] = {"negative ne", SD_ERR_FORMAT, "ne[1]"},
    [HC_NE_OVERFLOW] = {"ne product overflow", SD_ERR_FORMAT, "shape"},
    [HC_NE0_NOT_BLOCK_MULTIPLE] = {"q8_0 ne[0] 31", SD_ERR_FORMAT, "shape"},
    [HC_MISALIGNED_OFFSET] = {"misaligned offset", SD_ERR_FORMAT, "offset"},
    [HC_DATA_PAST_EOF] = {"data past EOF", SD_ERR_FORMAT, "past end of file"},
    [HC_HUGE_OFFSET] = {"offset 2^62", SD_ERR_FORMAT, "past end of file"},
    [HC_OVERLAP] = {"overlapping data", SD_ERR_FORMAT, "disjoint"},
    [HC_DUP_TENSOR] = {"duplicate tensor", SD_ERR_FORMAT, "duplicate"},
    [HC_HUGE_NAME_LEN] = {"huge tensor name length", SD_ERR_FORMAT, "tensor[1] name"},
    [HC_LONG_NAME] = {"tensor name of 64 bytes", SD_ERR_FORMAT, "tensor[1] name"},
};

#define HUGE62 (1ull << 62)

/*
 * A small valid file (kvs: a string, an alignment, a u32 array, a string array; tensors
 * 'a' f32 [8] and 'b' f32 [2, 8]: 32 and 64 bytes, so the file ends exactly at the end
 * of b's data, no trailing padding: every proper prefix is invalid), with corruption
 * `kind` applied.
 */
static buf build(enum hc kind) {
    buf b = {0};
    b_bytes(&b, kind == HC_BAD_MAGIC ? "GGUG" : "GGUF", 4);
    uint32_t version = 3;
    if (kind == HC_VERSION_0) version = 0;
    if (kind == HC_VERSION_1) version = 1;
    if (kind == HC_VERSION_4) version = 4;
    if (kind == HC_VERSION_BIG_ENDIAN) version = 0x03000000u;
    b_u32(&b, version);
    b_u64(&b, kind == HC_HUGE_N_TENSORS ? HUGE62 : 2);
    b_u64(&b, kind == HC_HUGE_N_KV ? HUGE62 : (kind == HC_DUP_KEY ? 5 : 4));

    /* kv 0: general.architecture = "llama" */
    if (kind == HC_HUGE_KEY_LEN)
        b_u64(&b, HUGE62), b_bytes(&b, "general.architecture", 20);
    else if (kind == HC_EMPTY_KEY)
        b_str(&b, "");
    else
        b_str(&b, "general.architecture");
    b_u32(&b, kind == HC_UNKNOWN_VTYPE ? 13 : SD_GGUF_STRING);
    if (kind == HC_HUGE_STR_LEN)
        b_u64(&b, HUGE62), b_bytes(&b, "llama", 5);
    else
        b_str(&b, "llama");
    /* kv 1: general.alignment */
    b_str(&b, "general.alignment");
    if (kind == HC_ALIGN_WRONG_TYPE) {
        b_u32(&b, SD_GGUF_I32);
        b_u32(&b, 32);
    } else {
        b_u32(&b, SD_GGUF_U32);
        b_u32(&b, kind == HC_ALIGN_NOT_POW2 ? 48 : kind == HC_ALIGN_ZERO ? 0 : 32);
    }
    /* kv 2: u32 array [1, 2, 3] */
    b_str(&b, "test.arr");
    b_u32(&b, SD_GGUF_ARRAY);
    b_u32(&b, kind == HC_UNKNOWN_ELEM_TYPE ? 77
              : kind == HC_NESTED_ARRAY    ? SD_GGUF_ARRAY
                                           : SD_GGUF_U32);
    b_u64(&b, kind == HC_HUGE_ARR_LEN ? HUGE62 : 3);
    b_u32(&b, 1), b_u32(&b, 2), b_u32(&b, 3);
    /* kv 3: string array ["x", "yz"] */
    b_str(&b, "test.strs");
    b_u32(&b, SD_GGUF_ARRAY);
    b_u32(&b, SD_GGUF_STRING);
    b_u64(&b, kind == HC_HUGE_STR_ARR_LEN ? HUGE62 : 2);
    b_str(&b, "x");
    if (kind == HC_HUGE_STR_IN_ARR)
        b_u64(&b, HUGE62), b_bytes(&b, "yz", 2);
    else
        b_str(&b, "yz");
    if (kind == HC_DUP_KEY) {
        b_str(&b, "test.arr");
        b_u32(&b, SD_GGUF_U8);
        b_bytes(&b, "\x01", 1);
    }

    /* tensor 'a': f32 [8] at 0 */
    b_str(&b, "a");
    b_u32(&b, 1);
    b_u64(&b, 8);
    b_u32(&b, SD_TYPE_F32);
    b_u64(&b, 0);
    /* tensor 'b': f32 ne {8, 2} at 32 */
    if (kind == HC_DUP_TENSOR)
        b_str(&b, "a");
    else if (kind == HC_HUGE_NAME_LEN)
        b_u64(&b, HUGE62), b_bytes(&b, "b", 1);
    else if (kind == HC_LONG_NAME)
        b_str(&b, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    else
        b_str(&b, "b");
    uint32_t n_dims = kind == HC_N_DIMS_5 ? 5 : kind == HC_N_DIMS_0 ? 0 : 2;
    b_u32(&b, n_dims);
    if (kind == HC_NE_OVERFLOW) {
        b_u64(&b, 1ull << 40);
        b_u64(&b, 1ull << 40);
    } else if (kind == HC_NE0_NOT_BLOCK_MULTIPLE) {
        b_u64(&b, 31);
        b_u64(&b, 2);
    } else if (n_dims >= 2) {
        b_u64(&b, 8);
        b_u64(&b, kind == HC_NE_NEGATIVE ? (uint64_t)-2 : 2);
    }
    for (uint32_t d = 2; d < n_dims; d++)
        b_u64(&b, 1);
    b_u32(&b, kind == HC_UNKNOWN_TENSOR_TYPE      ? 99
              : kind == HC_NE0_NOT_BLOCK_MULTIPLE ? SD_TYPE_Q8_0
                                                  : SD_TYPE_F32);
    uint64_t off = 32;
    if (kind == HC_MISALIGNED_OFFSET) off = 36;
    if (kind == HC_DATA_PAST_EOF) off = 64;
    if (kind == HC_HUGE_OFFSET) off = HUGE62;
    if (kind == HC_OVERLAP) off = 0;
    b_u64(&b, off);

    b_pad(&b, 32);
    float data[24];
    for (int i = 0; i < 24; i++)
        data[i] = (float)i;
    b_bytes(&b, data, sizeof data); /* 96 bytes: a (32) then b (64) */
    return b;
}

Test(gguf, handcrafted_valid) {
    char path[512];
    tpath(path, sizeof path, "valid.gguf");
    buf b = build(HC_VALID);
    write_file(path, b.p, b.n);
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    const sd_gguf_tensor *t = sd_gguf_find_tensor(g, "b");
    cr_assert_not_null(t);
    cr_assert_eq(t->ne[0], 8);
    cr_assert_eq(t->ne[1], 2);
    cr_assert_eq(((const float *)t->data)[0], 8.0f);
    cr_assert_eq(
        (const uint8_t *)t->data + t->nbytes - (const uint8_t *)sd_gguf_tensor_at(g, 0)->data, 96);
    sd_gguf_close(g);
    free(b.p);
}

Test(gguf, handcrafted_corrupt) {
    for (int k = 0; k < HC_COUNT; k++) {
        char path[512];
        tpath(path, sizeof path, "hc.gguf");
        buf b = build((enum hc)k);
        write_file(path, b.p, b.n);
        free(b.p);
        sd_gguf *g = (sd_gguf *)1;
        sd_error err = {0};
        int st = sd_gguf_open(path, &g, &err);
        cr_log_info("case '%s': %s", hc_expect[k].name, err.msg);
        cr_expect_eq(st, hc_expect[k].status, "case '%s': status %d, expected %d (%s)",
                     hc_expect[k].name, st, hc_expect[k].status, err.msg);
        if (hc_expect[k].status == SD_OK) {
            cr_expect_not_null(g);
            sd_gguf_close(g);
        } else {
            cr_expect_null(g, "case '%s'", hc_expect[k].name);
            cr_expect_eq(strncmp(err.msg, path, strlen(path)), 0, "case '%s': message '%s'",
                         hc_expect[k].name, err.msg);
            cr_expect_null(strchr(err.msg, '\n'), "case '%s': one line", hc_expect[k].name);
            cr_expect(strstr(err.msg, hc_expect[k].needle) != NULL,
                      "case '%s': message '%s' lacks '%s'", hc_expect[k].name, err.msg,
                      hc_expect[k].needle);
            if (k == HC_UNKNOWN_TENSOR_TYPE)
                cr_expect(strstr(err.msg, "99") != NULL, "%s", err.msg);
        }
        unlink(path);
    }
}

Test(gguf, every_prefix_fails) {
    char path[512];
    tpath(path, sizeof path, "prefix.gguf");
    buf b = build(HC_VALID);
    for (size_t n = 0; n < b.n; n++) {
        write_file(path, b.p, n);
        sd_gguf *g = NULL;
        sd_error err = {0};
        int st = sd_gguf_open(path, &g, &err);
        cr_assert_eq(st, SD_ERR_FORMAT, "prefix of %zu/%zu bytes: status %d (%s)", n, b.n, st,
                     err.msg);
        cr_assert_null(g);
        cr_assert_eq(strncmp(err.msg, path, strlen(path)), 0, "%s", err.msg);
    }
    free(b.p);
}

/* The same for a file from the writer, with every metadata kind and several tensors. */
Test(gguf, every_prefix_of_written_file_fails) {
    char path[512], cut[512];
    tpath(path, sizeof path, "w.gguf");
    tpath(cut, sizeof cut, "cut.gguf");
    sd_gguf_writer *w = sd_gguf_writer_new();
    const char *strs[] = {"a", "bb", ""};
    uint16_t arr[3] = {1, 2, 3};
    sd_gguf_set_str(w, "general.architecture", "llama");
    sd_gguf_set_f32(w, "x.f", 1.5f);
    sd_gguf_set_bool(w, "x.b", 0);
    sd_gguf_set_arr(w, "x.arr", SD_GGUF_U16, arr, 3);
    sd_gguf_set_arr_str(w, "x.strs", strs, 3);
    static uint8_t q8[2 * 34], f16[64];
    fill_bytes(q8, sizeof q8, 5);
    fill_bytes(f16, sizeof f16, 6);
    int64_t ne_q8[2] = {32, 2}, ne_f16[1] = {32};
    sd_error err = {0};
    cr_assert_eq(sd_gguf_add_tensor(w, "q", SD_TYPE_Q8_0, 2, ne_q8, q8, sizeof q8, &err), SD_OK);
    cr_assert_eq(sd_gguf_add_tensor(w, "h", SD_TYPE_F16, 1, ne_f16, f16, sizeof f16, &err), SD_OK);
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_OK, "%s", err.msg);
    sd_gguf_writer_free(w);
    size_t n;
    uint8_t *full = read_file(path, &n);
    /* The last tensor (64 bytes) ends the file with no padding after it. */
    for (size_t k = 0; k < n; k++) {
        write_file(cut, full, k);
        sd_gguf *g = NULL;
        int st = sd_gguf_open(cut, &g, &err);
        cr_assert_neq(st, SD_OK, "prefix of %zu/%zu bytes opened", k, n);
        cr_assert_null(g);
    }
    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    sd_gguf_close(g);
    free(full);
}

/* Real llama.cpp vocab files (written by gguf-py) open and index their token arrays. */
Test(gguf, llama_cpp_vocab_file) {
    char p[1024];
    tu_llamacpp_vocab("llama-spm", p, sizeof p);
    tu_need_path(p, "llama.cpp's vocabularies: ../shared/data or scripts/get_vocabs.sh");
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(p, &g, &err), SD_OK, "%s", err.msg);
    int64_t ki = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
    cr_assert_geq(ki, 0);
    sd_gguf_vtype et;
    uint64_t n;
    const void *data;
    cr_assert_eq(sd_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, &err), SD_OK);
    cr_assert_eq(n, 32000);
    const char *s;
    size_t len;
    cr_assert_eq(sd_gguf_arr_str(g, ki, 0, &s, &len), SD_OK);
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(s, "<unk>", 5), 0);
    cr_assert_eq(sd_gguf_arr_str(g, ki, 13, &s, &len), SD_OK);
    cr_assert_eq(memcmp(s, "<0x0A>", 6), 0);
    const char *arch;
    cr_assert_eq(sd_gguf_get_str(g, "general.architecture", &arch, &len, &err), SD_OK);
    cr_assert_eq(memcmp(arch, "llama", 5), 0);
    sd_gguf_close(g);
}
