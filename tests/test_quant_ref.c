/*
 * tests/test_quant_ref.c: quant/'s reference dequantizers and quantizers against gguf-py
 * (PyPI package `gguf`: the llama.cpp project's numpy implementation of the ggml block
 * formats, run through scripts/gguf_ref.py), bit for bit:
 *   - every quantized type's dequantizer on random blocks (random bytes, random finite
 *     fp16 scales over the whole range: normal, subnormal, zero, negative) and on the
 *     output of our own quantizer;
 *   - the quantizers of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and BF16 / F16 (which gguf-py
 *     implements, after ggml's quantize_row_*_ref) byte for byte;
 *   - real blocks: SmolLM2-135M-Instruct.Q4_1.gguf (Q4_1 and Q8_0 tensors) when it has
 *     been fetched into models/downloaded/.
 * Skips (cr_skip_test) when python3 cannot import gguf and numpy; SD_PYTHON names
 * another interpreter. CI installs gguf (pip install gguf).
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quant/sd_quant.h"
#include "runtime/gguf/sd_gguf.h"
#include "testutil.h"

#define SCRIPT  SD_SOURCE_DIR "/scripts/gguf_ref.py"
#define SMOLLM2 SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf"

static char g_dir[256];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

static const char *python(void) {
    const char *p = getenv("SD_PYTHON");
    return p && *p ? p : "python3";
}

static void need_gguf_py(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s '%s' probe", python(), SCRIPT);
    if (tu_run(cmd, NULL, NULL) != 0)
        cr_skip_test("%s cannot import gguf + numpy (pip install gguf): gguf-py reference "
                     "checks skipped",
                     python());
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* standard normal (Box-Muller) */
static float rng_gauss(uint64_t *s) {
    const double u1 = ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53;
    const double u2 = (double)(rng_next(s) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* A random finite fp16: mostly normal numbers of moderate size, sometimes subnormal,
 * zero, negative or large. */
static uint16_t rand_scale(uint64_t *s) {
    const uint64_t k = rng_next(s) % 16;
    uint16_t h = (uint16_t)rng_next(s);
    if (k == 0) return 0;
    if (k == 1) return (uint16_t)(h & 0x83FF);            /* subnormal, either sign */
    if (k == 2) return (uint16_t)((h & 0x83FF) | 0x7800); /* large: 2^15 .. 65504 */
    const uint16_t e = (uint16_t)(3 + rng_next(s) % 14);  /* 2^-12 .. 2^1 */
    return (uint16_t)((h & 0x83FF) | (e << 10));
}

/* Byte offsets of the fp16 scales of a block of type t (-1 ends). */
static void scale_offsets(sd_type t, int off[3]) {
    off[0] = off[1] = off[2] = -1;
    switch (t) {
    case SD_TYPE_Q4_1:
    case SD_TYPE_Q5_1:
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q5_K:
        off[0] = 0, off[1] = 2;
        break;
    case SD_TYPE_Q2_K:
        off[0] = 80, off[1] = 82;
        break;
    case SD_TYPE_Q3_K:
        off[0] = 108;
        break;
    case SD_TYPE_Q6_K:
        off[0] = 208;
        break;
    default: /* Q4_0, Q5_0, Q8_0 */
        off[0] = 0;
        break;
    }
}

/* nb random blocks of type t with finite scales */
static unsigned char *random_blocks(uint64_t *s, sd_type t, int64_t nb) {
    const size_t bb = sd_type_block_bytes(t);
    unsigned char *b = malloc((size_t)nb * bb);
    cr_assert_not_null(b);
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        b[i] = (unsigned char)rng_next(s);
    int off[3];
    scale_offsets(t, off);
    for (int64_t i = 0; i < nb; i++)
        for (int k = 0; k < 3 && off[k] >= 0; k++) {
            const uint16_t h = rand_scale(s);
            memcpy(b + (size_t)i * bb + (size_t)off[k], &h, 2);
        }
    return b;
}

/* A batch of conversions for one gguf-py run (an interpreter start costs ~1 s). */
typedef struct {
    char cmd[16384];
    size_t len;
    int n;
} py_batch;

static void batch_init(py_batch *pb, const char *verb, const char *file) {
    pb->len = (size_t)snprintf(pb->cmd, sizeof pb->cmd, "%s '%s' %s", python(), SCRIPT, verb);
    if (file)
        pb->len += (size_t)snprintf(pb->cmd + pb->len, sizeof pb->cmd - pb->len, " '%s'", file);
    pb->n = 0;
}

/* Queue item k: "a:b:c" with in / out files named after k; returns the out path. */
static void batch_add(py_batch *pb, const char *a, const char *in, const char *out) {
    pb->len +=
        (size_t)snprintf(pb->cmd + pb->len, sizeof pb->cmd - pb->len, " '%s:%s:%s'", a, in, out);
    cr_assert_lt(pb->len, sizeof pb->cmd);
    pb->n++;
}

static void batch_run(py_batch *pb) {
    char *err = NULL;
    const int rc = tu_run(pb->cmd, NULL, &err);
    cr_assert_eq(rc, 0, "%s: %s", pb->cmd, err ? err : "");
    free(err);
}

/* The float32 file at path, which must hold n values (malloc'd). */
static float *read_floats(const char *path, int64_t n) {
    size_t got = 0;
    unsigned char *f = tu_read_file(path, &got);
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(got, (size_t)n * sizeof(float), "%s: %zu bytes, want %lld floats", path, got,
                 (long long)n);
    return (float *)f;
}

static void file_k(char *buf, size_t cap, const char *stem, size_t k) {
    char name[64];
    snprintf(name, sizeof name, "%s%zu.bin", stem, k);
    tu_path(buf, cap, g_dir, name);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void assert_same_floats(const char *what, sd_type t, const float *a, const float *b,
                               int64_t n) {
    for (int64_t j = 0; j < n; j++)
        cr_assert_eq(fbits(a[j]), fbits(b[j]),
                     "%s %s: element %lld (block %lld): ours %a (0x%08X), gguf-py %a (0x%08X)",
                     what, sd_type_name(t), (long long)j, (long long)(j / sd_type_block_elems(t)),
                     (double)a[j], fbits(a[j]), (double)b[j], fbits(b[j]));
}

static const sd_type k_qtypes[] = {SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1,
                                   SD_TYPE_Q8_0, SD_TYPE_Q2_K, SD_TYPE_Q3_K, SD_TYPE_Q4_K,
                                   SD_TYPE_Q5_K, SD_TYPE_Q6_K};
#define N_QTYPES (sizeof k_qtypes / sizeof k_qtypes[0])

TestSuite(quant_ref, .init = setup, .fini = teardown);

/* Random blocks: every bit pattern of the quants and scales, decoded by both. */
Test(quant_ref, dequant_random_blocks_bitexact) {
    need_gguf_py();
    uint64_t s = 0x5EED;
    const int64_t n = 256 * 64; /* 64 super-blocks or 512 small blocks */
    unsigned char *raw[N_QTYPES];
    py_batch pb;
    batch_init(&pb, "dequant", NULL);
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const sd_type t = k_qtypes[ti];
        size_t bytes;
        cr_assert_eq(sd_type_row_bytes(t, n, &bytes), 0);
        raw[ti] = random_blocks(&s, t, n / sd_type_block_elems(t));
        char in[512], out[512];
        file_k(in, sizeof in, "in", ti);
        file_k(out, sizeof out, "out", ti);
        cr_assert_eq(tu_write_file(in, raw[ti], bytes), 0);
        batch_add(&pb, sd_type_name(t), in, out);
    }
    batch_run(&pb);
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const sd_type t = k_qtypes[ti];
        float *ours = malloc((size_t)n * sizeof(float));
        cr_assert_eq(sd_dequantize_row(t, raw[ti], ours, n), 0);
        char out[512];
        file_k(out, sizeof out, "out", ti);
        float *ref = read_floats(out, n);
        assert_same_floats("random blocks", t, ours, ref, n);
        free(ref);
        free(ours);
        free(raw[ti]);
    }
}

/* Our quantizer's output (Gaussian rows at many magnitudes, zero blocks, constant
 * blocks, outliers), decoded by both. */
Test(quant_ref, dequant_our_quantizer_bitexact) {
    need_gguf_py();
    uint64_t s = 77;
    const int64_t n = 256 * 48;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n / 256; i++) {
        const float scale = ldexpf(1.0f, (int)(rng_next(&s) % 24) - 16);
        for (int j = 0; j < 256; j++)
            x[i * 256 + j] = rng_gauss(&s) * scale;
        switch (i % 8) {
        case 1:
            memset(x + i * 256, 0, 256 * sizeof(float));
            break;
        case 2:
            for (int j = 0; j < 256; j++)
                x[i * 256 + j] = 0.375f;
            break;
        case 3:
            x[i * 256 + 17] = 40.0f * scale;
            break;
        case 4:
            for (int j = 0; j < 256; j++)
                x[i * 256 + j] = fabsf(x[i * 256 + j]); /* all positive: min 0 */
            break;
        default:
            break;
        }
    }
    unsigned char *q[N_QTYPES];
    py_batch pb;
    batch_init(&pb, "dequant", NULL);
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const sd_type t = k_qtypes[ti];
        size_t bytes;
        cr_assert_eq(sd_type_row_bytes(t, n, &bytes), 0);
        q[ti] = malloc(bytes);
        cr_assert_eq(sd_quantize_row(t, x, q[ti], n), 0);
        char in[512], out[512];
        file_k(in, sizeof in, "in", ti);
        file_k(out, sizeof out, "out", ti);
        cr_assert_eq(tu_write_file(in, q[ti], bytes), 0);
        batch_add(&pb, sd_type_name(t), in, out);
    }
    batch_run(&pb);
    for (size_t ti = 0; ti < N_QTYPES; ti++) {
        const sd_type t = k_qtypes[ti];
        float *ours = malloc((size_t)n * sizeof(float));
        cr_assert_eq(sd_dequantize_row(t, q[ti], ours, n), 0);
        char out[512];
        file_k(out, sizeof out, "out", ti);
        float *ref = read_floats(out, n);
        assert_same_floats("our quantizer's blocks", t, ours, ref, n);
        free(ref);
        free(ours);
        free(q[ti]);
    }
    free(x);
}

/* Quantizers that gguf-py has (after ggml's *_ref): identical bytes. */
Test(quant_ref, quantizer_bytes_match_ggml_ref) {
    need_gguf_py();
    static const sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0,
                                    SD_TYPE_Q5_1, SD_TYPE_Q8_0, SD_TYPE_BF16};
    uint64_t s = 4242;
    const int64_t n = 32 * 1024;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n / 32; i++) {
        float *xb = x + i * 32;
        const float scale = ldexpf(1.0f, (int)(rng_next(&s) % 40) - 24);
        for (int j = 0; j < 32; j++)
            xb[j] = rng_gauss(&s) * scale;
        switch (i % 10) {
        case 0: /* zero block */
            memset(xb, 0, 32 * sizeof(float));
            break;
        case 1: /* exact ties at unit steps: x = k + 0.5 with amax 127 / 8 / 16 */
            for (int j = 0; j < 32; j++)
                xb[j] = (float)((int)(rng_next(&s) % 31) - 15) + 0.5f;
            xb[0] = -16.0f;
            break;
        case 2: /* constant block */
            for (int j = 0; j < 32; j++)
                xb[j] = -1.25f * scale;
            break;
        case 3: /* magnitude tie between +max and -max */
            xb[3] = 2.0f * scale;
            xb[9] = -2.0f * scale;
            break;
        case 4: /* all positive */
            for (int j = 0; j < 32; j++)
                xb[j] = fabsf(xb[j]) + scale;
            break;
        default:
            break;
        }
    }
    enum { NT = sizeof types / sizeof types[0] };
    char in[512];
    tu_path(in, sizeof in, g_dir, "x.f32");
    cr_assert_eq(tu_write_file(in, x, (size_t)n * sizeof(float)), 0);
    py_batch pb;
    batch_init(&pb, "quant", NULL);
    for (size_t ti = 0; ti < NT; ti++) {
        char out[512];
        file_k(out, sizeof out, "q", ti);
        batch_add(&pb, sd_type_name(types[ti]), in, out);
    }
    batch_run(&pb);
    for (size_t ti = 0; ti < NT; ti++) {
        const sd_type t = types[ti];
        size_t bytes, got = 0;
        cr_assert_eq(sd_type_row_bytes(t, n, &bytes), 0);
        unsigned char *ours = malloc(bytes);
        cr_assert_eq(sd_quantize_row(t, x, ours, n), 0);
        char out[512];
        file_k(out, sizeof out, "q", ti);
        unsigned char *ref = tu_read_file(out, &got);
        cr_assert_eq(got, bytes, "%s: gguf-py wrote %zu bytes, want %zu", sd_type_name(t), got,
                     bytes);
        const size_t bb = sd_type_block_bytes(t);
        for (size_t i = 0; i < bytes; i++)
            cr_assert_eq(ours[i], ref[i],
                         "%s: byte %zu of block %zu: ours 0x%02X, gguf-py 0x%02X (input block "
                         "kind %zu)",
                         sd_type_name(t), i % bb, i / bb, ours[i], ref[i],
                         (i / bb) * (size_t)sd_type_block_elems(t) / 32 % 10);
        free(ref);
        free(ours);
    }
    free(x);
}

/* Real blocks: SmolLM2-135M-Instruct.Q4_1.gguf (llama.cpp's quantizer wrote them). Our
 * reader + dequantizer against gguf-py's reader + dequantizer, tensor by tensor. */
Test(quant_ref, smollm2_real_blocks_bitexact) {
    tu_need_path(SMOLLM2, "fetched by scripts/get_models.sh");
    need_gguf_py();
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(SMOLLM2, &g, &err), SD_OK, "%s", err.msg);
    static const struct {
        const char *name;
        sd_type type;
        int64_t rows;
    } want[] = {
        {"blk.0.ffn_down.weight", SD_TYPE_Q4_1, 576}, {"blk.0.attn_q.weight", SD_TYPE_Q4_1, 576},
        {"blk.29.attn_v.weight", SD_TYPE_Q4_1, 192},  {"blk.15.ffn_up.weight", SD_TYPE_Q4_1, 1536},
        {"token_embd.weight", SD_TYPE_Q8_0, 2048},
    };
    enum { NW = sizeof want / sizeof want[0] };
    py_batch pb;
    batch_init(&pb, "dequant-tensors", SMOLLM2);
    for (size_t k = 0; k < NW; k++) {
        char rows[32], out[512];
        snprintf(rows, sizeof rows, "%lld", (long long)want[k].rows);
        file_k(out, sizeof out, "t", k);
        batch_add(&pb, want[k].name, rows, out);
    }
    batch_run(&pb);
    for (size_t k = 0; k < NW; k++) {
        const sd_gguf_tensor *t = sd_gguf_find_tensor(g, want[k].name);
        cr_assert_not_null(t, "%s", want[k].name);
        cr_assert_eq(t->type, (uint32_t)want[k].type, "%s: type %s", want[k].name,
                     sd_type_name(t->type));
        const int64_t n = t->ne[0] * want[k].rows;
        float *ours = malloc((size_t)n * sizeof(float));
        cr_assert_eq(sd_dequantize_row(want[k].type, t->data, ours, n), 0);
        char out[512];
        file_k(out, sizeof out, "t", k);
        float *ref = read_floats(out, n);
        assert_same_floats(want[k].name, want[k].type, ours, ref, n);
        /* and the scales of a real file are finite */
        cr_assert_eq(sd_validate_row(want[k].type, t->data, n, NULL), 0, "%s", want[k].name);
        free(ref);
        free(ours);
    }
    sd_gguf_close(g);
}
