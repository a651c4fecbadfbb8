/*
 * llama2.c -> GGUF conversion and GGUF quantization.
 *   - stories260K.bin + tok512.bin (shared/data/models, see SOURCES.md): metadata,
 *     vocabulary, every tensor equal to the checkpoint floats (identity layout);
 *   - RoPE layout: run.c's RoPE on the checkpoint == llama.cpp NORM RoPE on the GGUF
 *     weights (and the HF-style permutation would break it);
 *   - quantize to q8_0 / q4_0: types, f16 fallback for ffn_down (row length 172), values
 *     within the quantization bound;
 *   - a small synthetic checkpoint with an untied classifier (no shared data needed);
 *   - bad inputs (truncated, bad header, vocab mismatch, trailing bytes, bad tokenizer)
 *     fail with the right status and leave no output file.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/convert/sd_convert.h"
#include "runtime/gguf/sd_gguf.h"
#include "testutil.h"

#define CKPT tu_shared("models/stories260K.bin")
#define TOK  tu_shared("models/tok512.bin")

static char g_dir[1024];

static void setup_dir(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0, "mkdtemp failed");
}

static void teardown_dir(void) {
    tu_rmdir(g_dir);
}

TestSuite(convert, .init = setup_dir, .fini = teardown_dir);

static void tpath(char *out, size_t n, const char *name) {
    tu_path(out, n, g_dir, name);
}

static uint8_t *read_all(const char *path, size_t *n) {
    uint8_t *b = tu_read_file(path, n);
    cr_assert_not_null(b, "cannot open %s", path);
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    cr_assert_eq(tu_write_file(path, b, n), 0, "cannot write %s", path);
}

static int n_files(void) {
    return tu_count_files(g_dir);
}

static void need_shared(void) {
    tu_need_path(CKPT, "llama2.c's stories260K, in ../shared/data");
    tu_need_path(TOK, "llama2.c's tokenizer, in ../shared/data");
}

static int64_t get_i(const sd_gguf *g, const char *key) {
    int64_t v = -12345;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_get_i64(g, key, &v, &err), SD_OK, "%s", err.msg);
    return v;
}

static void expect_str(const sd_gguf *g, const char *key, const char *want) {
    const char *s;
    size_t len;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_get_str(g, key, &s, &len, &err), SD_OK, "%s", err.msg);
    cr_assert(len == strlen(want) && memcmp(s, want, len) == 0, "%s: '%.*s' != '%s'", key, (int)len,
              s, want);
}

/* The llama2.c header (7 int32) and the offset (in floats after it) of each weight. */
typedef struct layout {
    int32_t dim, hid, L, nh, nkv, vocab, seq;
    int shared;
    int64_t head, kv_dim;
    size_t tok, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls, total;
} layout;

static layout layout_of(const int32_t *h) {
    layout o;
    memset(&o, 0, sizeof o);
    o.dim = h[0], o.hid = h[1], o.L = h[2], o.nh = h[3], o.nkv = h[4];
    o.vocab = abs(h[5]), o.seq = h[6], o.shared = h[5] > 0;
    o.head = o.dim / o.nh;
    o.kv_dim = o.head * o.nkv;
    size_t d = (size_t)o.dim, H = (size_t)o.hid, L = (size_t)o.L, kv = (size_t)o.kv_dim, p = 0;
    o.tok = p, p += (size_t)o.vocab * d;
    o.rms_att = p, p += L * d;
    o.wq = p, p += L * d * d;
    o.wk = p, p += L * kv * d;
    o.wv = p, p += L * kv * d;
    o.wo = p, p += L * d * d;
    o.rms_ffn = p, p += L * d;
    o.w1 = p, p += L * H * d;
    o.w2 = p, p += L * d * H;
    o.w3 = p, p += L * H * d;
    o.rms_final = p, p += d;
    p += (size_t)o.seq * (size_t)o.head;
    o.wcls = p;
    if (!o.shared) p += (size_t)o.vocab * d;
    o.total = p;
    return o;
}

/* Every tensor of a converted file equals the checkpoint floats, unpermuted. */
static void check_tensors(const sd_gguf *g, const float *w, const layout *o) {
    struct {
        const char *name;
        size_t off;
        int64_t ne0, ne1;
        int n_dims;
        size_t layer_stride;
    } ts[] = {
        {"attn_norm", o->rms_att, o->dim, 1, 1, (size_t)o->dim},
        {"attn_q", o->wq, o->dim, o->dim, 2, (size_t)(o->dim * o->dim)},
        {"attn_k", o->wk, o->dim, o->kv_dim, 2, (size_t)(o->kv_dim * o->dim)},
        {"attn_v", o->wv, o->dim, o->kv_dim, 2, (size_t)(o->kv_dim * o->dim)},
        {"attn_output", o->wo, o->dim, o->dim, 2, (size_t)(o->dim * o->dim)},
        {"ffn_norm", o->rms_ffn, o->dim, 1, 1, (size_t)o->dim},
        {"ffn_gate", o->w1, o->dim, o->hid, 2, (size_t)o->hid * (size_t)o->dim},
        {"ffn_down", o->w2, o->hid, o->dim, 2, (size_t)o->hid * (size_t)o->dim},
        {"ffn_up", o->w3, o->dim, o->hid, 2, (size_t)o->hid * (size_t)o->dim},
    };
    cr_assert_eq(sd_gguf_n_tensors(g), 2 + 9 * o->L + (o->shared ? 0 : 1));
    const sd_gguf_tensor *t = sd_gguf_find_tensor(g, "token_embd.weight");
    cr_assert_not_null(t);
    cr_assert(t->type == SD_TYPE_F32 && t->n_dims == 2 && t->ne[0] == o->dim &&
              t->ne[1] == o->vocab);
    cr_assert_eq(memcmp(t->data, w + o->tok, (size_t)o->vocab * (size_t)o->dim * 4), 0);
    for (int l = 0; l < o->L; l++)
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, ts[k].name);
            t = sd_gguf_find_tensor(g, name);
            cr_assert_not_null(t, "%s missing", name);
            cr_assert_eq(t->type, SD_TYPE_F32, "%s", name);
            cr_assert_eq(t->n_dims, (uint32_t)ts[k].n_dims, "%s", name);
            cr_assert(t->ne[0] == ts[k].ne0 && t->ne[1] == ts[k].ne1, "%s shape", name);
            cr_assert_eq(t->nbytes, ts[k].layer_stride * 4);
            cr_assert_eq(memcmp(t->data, w + ts[k].off + (size_t)l * ts[k].layer_stride, t->nbytes),
                         0, "%s data", name);
        }
    t = sd_gguf_find_tensor(g, "output_norm.weight");
    cr_assert(t && t->n_dims == 1 && t->ne[0] == o->dim);
    cr_assert_eq(memcmp(t->data, w + o->rms_final, (size_t)o->dim * 4), 0);
    t = sd_gguf_find_tensor(g, "output.weight");
    if (o->shared) {
        cr_assert_null(t, "tied classifier must not be stored");
    } else {
        cr_assert(t && t->ne[0] == o->dim && t->ne[1] == o->vocab);
        cr_assert_eq(memcmp(t->data, w + o->wcls, (size_t)o->vocab * (size_t)o->dim * 4), 0);
    }
}

Test(convert, stories260K) {
    need_shared();
    char out[512];
    tpath(out, sizeof out, "stories260K.gguf");
    sd_error err = {0};
    cr_assert_eq(sd_convert_llama2c(CKPT, TOK, out, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(n_files(), 1);

    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(out, &g, &err), SD_OK, "%s", err.msg);
    expect_str(g, "general.architecture", "llama");
    expect_str(g, "general.name", "stories260K");
    expect_str(g, "tokenizer.ggml.model", "llama");
    cr_assert_eq(get_i(g, "general.file_type"), 0);
    cr_assert_eq(get_i(g, "llama.context_length"), 512);
    cr_assert_eq(get_i(g, "llama.embedding_length"), 64);
    cr_assert_eq(get_i(g, "llama.block_count"), 5);
    cr_assert_eq(get_i(g, "llama.feed_forward_length"), 172);
    cr_assert_eq(get_i(g, "llama.attention.head_count"), 8);
    cr_assert_eq(get_i(g, "llama.attention.head_count_kv"), 4);
    cr_assert_eq(get_i(g, "llama.rope.dimension_count"), 8);
    cr_assert_eq(get_i(g, "tokenizer.ggml.bos_token_id"), 1);
    cr_assert_eq(get_i(g, "tokenizer.ggml.eos_token_id"), 2);
    cr_assert_eq(get_i(g, "tokenizer.ggml.unknown_token_id"), 0);
    float f;
    cr_assert_eq(sd_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), SD_OK);
    cr_assert_eq(f, 1e-5f);
    cr_assert_eq(sd_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), SD_OK);
    cr_assert_eq(f, 10000.0f);
    int b;
    cr_assert_eq(sd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), SD_OK);
    cr_assert_eq(b, 1);
    cr_assert_eq(sd_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b, &err), SD_OK);
    cr_assert_eq(b, 1);

    /* vocabulary against the raw tokenizer file */
    size_t tn;
    uint8_t *tok = read_all(TOK, &tn);
    sd_gguf_vtype et;
    uint64_t n;
    const void *scores, *types, *nodata;
    cr_assert_eq(sd_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &nodata, &err), SD_OK);
    cr_assert_eq(et, SD_GGUF_STRING);
    cr_assert_eq(n, 512);
    cr_assert_eq(sd_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &scores, &err), SD_OK);
    cr_assert(et == SD_GGUF_F32 && n == 512);
    cr_assert_eq(sd_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &types, &err), SD_OK);
    cr_assert(et == SD_GGUF_I32 && n == 512);
    int64_t ki = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
    size_t pos = 4;
    int n_space = 0;
    for (uint64_t i = 0; i < 512; i++) {
        float score, gs;
        int32_t len, gt;
        memcpy(&score, tok + pos, 4);
        memcpy(&len, tok + pos + 4, 4);
        const char *raw = (const char *)tok + pos + 8;
        pos += 8 + (size_t)len;
        char want[64];
        size_t wl = 0;
        for (int32_t j = 0; j < len; j++) {
            if (raw[j] == ' ') {
                memcpy(want + wl, "\xe2\x96\x81", 3);
                wl += 3;
                n_space++;
            } else {
                want[wl++] = raw[j];
            }
        }
        int32_t want_type = 1;
        if (i == 0) want_type = 2;
        if (i == 1) strcpy(want, "<s>"), wl = 3, want_type = 3;
        if (i == 2) strcpy(want, "</s>"), wl = 4, want_type = 3;
        if (i >= 3 && i < 3 + 256) want_type = 6;
        const char *s;
        size_t sl;
        cr_assert_eq(sd_gguf_arr_str(g, ki, i, &s, &sl), SD_OK);
        cr_assert(sl == wl && memcmp(s, want, wl) == 0, "token %d: '%.*s' != '%.*s'", (int)i,
                  (int)sl, s, (int)wl, want);
        memcpy(&gs, (const float *)scores + i, 4);
        memcpy(&gt, (const int32_t *)types + i, 4);
        cr_assert_eq(gs, score, "score %d", (int)i);
        cr_assert_eq(gt, want_type, "token_type %d", (int)i);
    }
    cr_assert_eq(pos, tn);
    cr_assert_gt(n_space, 20, "expected many '▁' pieces");
    {
        const char *s;
        size_t sl;
        cr_assert_eq(sd_gguf_arr_str(g, ki, 0, &s, &sl), SD_OK);
        cr_assert(sl == 5 && !memcmp(s, "<unk>", 5));
        cr_assert_eq(sd_gguf_arr_str(g, ki, 13, &s, &sl), SD_OK);
        cr_assert(sl == 6 && !memcmp(s, "<0x0A>", 6));
        cr_assert_eq(sd_gguf_arr_str(g, ki, 259, &s, &sl), SD_OK);
        cr_assert(sl == 4 && !memcmp(s, "\xe2\x96\x81t", 4), "token 259 is '▁t'");
    }
    free(tok);

    /* tensors */
    size_t cn;
    uint8_t *ck = read_all(CKPT, &cn);
    layout o = layout_of((const int32_t *)(const void *)ck);
    cr_assert_eq(28 + 4 * o.total, cn);
    check_tensors(g, (const float *)(const void *)(ck + 28), &o);
    free(ck);
    sd_gguf_close(g);
}

/*
 * RoPE layout check. Reference: llama2.c run.c, verbatim (rotates (v[i], v[i+1]) for
 * even i, freq = 10000^(-(i % head_size)/head_size)). Candidate: ggml's NORM rope (the
 * one llama.cpp uses for arch "llama"): per head, pairs (x[i0], x[i0+1]),
 * theta = pos * base^(-i0/n_dims). q = Wq x with Wq from the checkpoint vs from the GGUF.
 */
static void rope_runc(float *q, int dim, int kv_dim, int head_size, int pos, float *k) {
    for (int i = 0; i < dim; i += 2) {
        int head_dim = i % head_size;
        float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
        float val = pos * freq;
        float fcr = cosf(val);
        float fci = sinf(val);
        int rotn = i < kv_dim ? 2 : 1;
        for (int v = 0; v < rotn; v++) {
            float *vec = v == 0 ? q : k;
            float v0 = vec[i];
            float v1 = vec[i + 1];
            vec[i] = v0 * fcr - v1 * fci;
            vec[i + 1] = v0 * fci + v1 * fcr;
        }
    }
}

static void rope_norm(float *x, int n_head, int head_dim, int pos, float base) {
    for (int h = 0; h < n_head; h++)
        for (int i0 = 0; i0 < head_dim; i0 += 2) {
            float theta = (float)pos * powf(base, -(float)i0 / (float)head_dim);
            float c = cosf(theta), s = sinf(theta);
            float *p = x + h * head_dim + i0;
            float x0 = p[0], x1 = p[1];
            p[0] = x0 * c - x1 * s;
            p[1] = x0 * s + x1 * c;
        }
}

static void matvec(const float *w, const float *x, int rows, int cols, float *y) {
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int c = 0; c < cols; c++)
            acc += (double)w[(size_t)r * cols + c] * x[c];
        y[r] = (float)acc;
    }
}

/* convert_hf_to_gguf.py permute: reshape(n_head, 2, hd/2, dim).swapaxes(1, 2). */
static void hf_permute(const float *w, float *out, int n_head, int head_dim, int cols) {
    for (int h = 0; h < n_head; h++)
        for (int j = 0; j < head_dim / 2; j++)
            for (int a = 0; a < 2; a++) {
                int src = h * head_dim + a * (head_dim / 2) + j; /* [h][a][j] */
                int dst = h * head_dim + j * 2 + a;              /* [h][j][a] */
                memcpy(out + (size_t)dst * cols, w + (size_t)src * cols, (size_t)cols * 4);
            }
}

Test(convert, rope_layout_needs_no_permutation) {
    need_shared();
    char out[512];
    tpath(out, sizeof out, "s.gguf");
    sd_error err = {0};
    cr_assert_eq(sd_convert_llama2c(CKPT, TOK, out, &err), SD_OK, "%s", err.msg);
    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(out, &g, &err), SD_OK, "%s", err.msg);
    size_t cn;
    uint8_t *ck = read_all(CKPT, &cn);
    layout o = layout_of((const int32_t *)(const void *)ck);
    const float *w = (const float *)(const void *)(ck + 28);
    const int dim = o.dim, kv_dim = (int)o.kv_dim, hd = (int)o.head;
    float x[64], q_ref[64], k_ref[64], q[64], k[64], *perm = malloc((size_t)dim * dim * 4);
    for (int i = 0; i < dim; i++)
        x[i] = sinf(0.37f * (float)i + 0.1f);
    double max_ok = 0, max_perm = 0;
    for (int l = 0; l < o.L; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        const float *gq = sd_gguf_find_tensor(g, name)->data;
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
        const float *gk = sd_gguf_find_tensor(g, name)->data;
        for (int pos = 1; pos < 40; pos += 7) {
            matvec(w + o.wq + (size_t)l * dim * dim, x, dim, dim, q_ref);
            matvec(w + o.wk + (size_t)l * kv_dim * dim, x, kv_dim, dim, k_ref);
            /* q at position pos, k at kpos: the logit depends on pos - kpos */
            const int kpos = pos / 3;
            float dq[64], dk[64];
            memset(dq, 0, sizeof dq);
            memset(dk, 0, sizeof dk);
            rope_runc(q_ref, dim, kv_dim, hd, pos, dk);
            rope_runc(dq, dim, kv_dim, hd, kpos, k_ref);
            matvec(gq, x, dim, dim, q);
            matvec(gk, x, kv_dim, dim, k);
            rope_norm(q, o.nh, hd, pos, 10000.0f);
            rope_norm(k, o.nkv, hd, kpos, 10000.0f);
            for (int i = 0; i < dim; i++)
                max_ok = fmax(max_ok, fabs(q[i] - q_ref[i]));
            for (int i = 0; i < kv_dim; i++)
                max_ok = fmax(max_ok, fabs(k[i] - k_ref[i]));
            /* With the HF permutation applied, NORM RoPE rotates the wrong pairs: the
             * attention logits (what RoPE feeds) change. A shared row permutation
             * within a head alone would keep q.k, so any change comes from the pairing. */
            hf_permute(gq, perm, o.nh, hd, dim);
            float qp[64], kp[64];
            matvec(perm, x, dim, dim, qp);
            hf_permute(gk, perm, o.nkv, hd, dim);
            matvec(perm, x, kv_dim, dim, kp);
            rope_norm(qp, o.nh, hd, pos, 10000.0f);
            rope_norm(kp, o.nkv, hd, kpos, 10000.0f);
            /* attention logit of head 0 against kv head 0 */
            double s_ref = 0, s_perm = 0;
            for (int i = 0; i < hd; i++)
                s_ref += (double)q_ref[i] * k_ref[i];
            for (int i = 0; i < hd; i++)
                s_perm += (double)qp[i] * kp[i];
            max_perm = fmax(max_perm, fabs(s_ref - s_perm));
        }
    }
    cr_log_info("rope: max |NORM(GGUF) - run.c| = %g; max logit change under HF permute = %g",
                max_ok, max_perm);
    cr_assert_lt(max_ok, 1e-5, "NORM rope on GGUF weights vs run.c: max diff %g", max_ok);
    cr_assert_gt(max_perm, 1e-3, "the HF permutation should change the attention logits");
    free(perm);
    free(ck);
    sd_gguf_close(g);
}

/* |x - deq(x)| bound per 32-block: Q8_0 d = amax/127, error <= d/2 plus fp16 rounding of d
 * (|q| <= 127 times relative 2^-11); Q4_0 d = amax/8 (the clamp at q = 15 may cost a
 * whole step), plus fp16 rounding of d. */
static double block_bound(sd_type t, const float *x) {
    double amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmax(amax, fabs(x[j]));
    if (t == SD_TYPE_Q8_0) return amax / 127.0 * 0.5 + amax * 1.0 / 1024.0 + 1e-7;
    return amax / 8.0 * 1.0 + amax * 1.0 / 1024.0 + 1e-7;
}

/* An integer key of the GGUF at path. */
static int64_t get_i_of(const char *path, const char *key) {
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    const int64_t v = get_i(g, key);
    sd_gguf_close(g);
    return v;
}

static void check_quantized(sd_type qt) {
    need_shared();
    char f32p[512], qp[512];
    tpath(f32p, sizeof f32p, "f32.gguf");
    tpath(qp, sizeof qp, "q.gguf");
    sd_error err = {0};
    cr_assert_eq(sd_convert_llama2c(CKPT, TOK, f32p, &err), SD_OK, "%s", err.msg);
    char *logbuf = NULL;
    size_t logn = 0;
    FILE *log = open_memstream(&logbuf, &logn);
    cr_assert_eq(sd_quantize_file(f32p, qp, qt, log, &err), SD_OK, "%s", err.msg);
    fclose(log);
    /* one line for every layer's ffn_down (rows of 172), not one per tensor */
    char want[1200];
    snprintf(want, sizeof want,
             "%s: %d matrices stored as f16 instead of %s: row length not a multiple of 32 "
             "(first: blk.0.ffn_down.weight, 172 columns)\n",
             qp, (int)get_i_of(f32p, "llama.block_count"), sd_type_name(qt));
    cr_assert(strstr(logbuf, want) != NULL, "want '%s', log: %s", want, logbuf);
    cr_assert(strstr(logbuf, "ffn_down.weight: row length") == NULL, "log: %s", logbuf);
    cr_assert_eq(n_files(), 2);

    sd_gguf *src = NULL, *g = NULL;
    cr_assert_eq(sd_gguf_open(f32p, &src, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_open(qp, &g, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(get_i(g, "general.file_type"), qt == SD_TYPE_Q8_0 ? 7 : 2);
    cr_assert_eq(sd_gguf_n_kv(g), sd_gguf_n_kv(src));
    for (int64_t i = 0; i < sd_gguf_n_kv(src); i++)
        cr_assert_str_eq(sd_gguf_key_name(g, i), sd_gguf_key_name(src, i));
    {
        int64_t a = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
        const char *s;
        size_t sl;
        cr_assert_eq(sd_gguf_arr_str(g, a, 259, &s, &sl), SD_OK);
        cr_assert(sl == 4 && !memcmp(s, "\xe2\x96\x81t", 4));
    }
    cr_assert_eq(sd_gguf_n_tensors(g), sd_gguf_n_tensors(src));
    int n_q = 0, n_f16 = 0, n_f32 = 0;
    float *row = malloc(4096 * sizeof *row);
    for (int64_t i = 0; i < sd_gguf_n_tensors(src); i++) {
        const sd_gguf_tensor *s = sd_gguf_tensor_at(src, i);
        const sd_gguf_tensor *t = sd_gguf_find_tensor(g, s->name);
        cr_assert_not_null(t, "%s", s->name);
        cr_assert_eq(t->n_dims, s->n_dims);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(t->ne[d], s->ne[d]);
        sd_type want = SD_TYPE_F32;
        if (s->n_dims == 2) want = s->ne[0] % 32 ? SD_TYPE_F16 : qt;
        cr_assert_eq(t->type, (uint32_t)want, "%s: type %s", s->name, sd_type_name(t->type));
        if (want == qt)
            n_q++;
        else if (want == SD_TYPE_F16)
            n_f16++;
        else
            n_f32++;
        const float *x = s->data;
        size_t rb;
        cr_assert_eq(sd_type_row_bytes(want, t->ne[0], &rb), 0);
        for (int64_t r = 0; r < t->ne[1]; r++) {
            const float *xr = x + r * t->ne[0];
            sd_dequantize_row(want, (const uint8_t *)t->data + (size_t)r * rb, row, t->ne[0]);
            for (int64_t j = 0; j < t->ne[0]; j++) {
                double bound = want == SD_TYPE_F32   ? 0
                               : want == SD_TYPE_F16 ? fabs(xr[j]) / 2048.0 + 6e-8
                                                     : block_bound(want, xr + (j / 32) * 32);
                cr_assert_leq(fabs((double)row[j] - xr[j]), bound,
                              "%s[%lld, %lld]: %g vs %g (bound %g)", s->name, (long long)r,
                              (long long)j, row[j], xr[j], bound);
            }
        }
    }
    /* token_embd + 5 x (q, k, v, o, gate, up) quantized; 5 ffn_down f16; 11 norms f32 */
    cr_assert_eq(n_q, 1 + 5 * 6);
    cr_assert_eq(n_f16, 5);
    cr_assert_eq(n_f32, 11);
    free(row);
    free(logbuf);
    sd_gguf_close(src);
    sd_gguf_close(g);
}

Test(convert, quantize_q8_0) {
    check_quantized(SD_TYPE_Q8_0);
}
Test(convert, quantize_q4_0) {
    check_quantized(SD_TYPE_Q4_0);
}

/* ---- synthetic checkpoints (no shared data needed) */

/* dim 64, hidden 96, 2 layers, 4 heads, 2 kv heads, vocab 6 (negative: untied), seq 8 */
static const int32_t k_hdr[7] = {64, 96, 2, 4, 2, -6, 8};

static uint8_t *make_ckpt(const int32_t *hdr, size_t *n) {
    layout o = layout_of(hdr);
    *n = 28 + 4 * o.total;
    uint8_t *b = malloc(*n);
    memcpy(b, hdr, 28);
    float *w = (float *)(void *)(b + 28);
    for (size_t i = 0; i < o.total; i++)
        w[i] = (float)((int)(i % 997) - 498) / 512.0f;
    return b;
}

static uint8_t *make_tok(int n_tok, size_t *n) {
    static const char *toks[] = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x0A>", " the", "a b"};
    uint8_t *b = malloc(4096), *p = b;
    int32_t mx = 7;
    memcpy(p, &mx, 4), p += 4;
    for (int i = 0; i < n_tok; i++) {
        const char *t = toks[i % 6];
        float s = -(float)i;
        int32_t len = (int32_t)strlen(t);
        memcpy(p, &s, 4), memcpy(p + 4, &len, 4), memcpy(p + 8, t, (size_t)len);
        p += 8 + len;
    }
    *n = (size_t)(p - b);
    return b;
}

Test(convert, synthetic_untied) {
    char ckp[512], tkp[512], out[512];
    tpath(ckp, sizeof ckp, "ck.bin");
    tpath(tkp, sizeof tkp, "tok.bin");
    tpath(out, sizeof out, "out.gguf");
    size_t cn, tn;
    uint8_t *ck = make_ckpt(k_hdr, &cn), *tk = make_tok(6, &tn);
    write_all(ckp, ck, cn);
    write_all(tkp, tk, tn);
    sd_error err = {0};
    cr_assert_eq(sd_convert_llama2c(ckp, tkp, out, &err), SD_OK, "%s", err.msg);
    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(out, &g, &err), SD_OK, "%s", err.msg);
    expect_str(g, "general.name", "ck");
    cr_assert_eq(get_i(g, "llama.attention.head_count_kv"), 2);
    cr_assert_eq(get_i(g, "llama.rope.dimension_count"), 16);
    layout o = layout_of(k_hdr);
    check_tensors(g, (const float *)(const void *)(ck + 28), &o);
    int64_t ki = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
    const char *s;
    size_t sl;
    cr_assert_eq(sd_gguf_arr_str(g, ki, 5, &s, &sl), SD_OK);
    cr_assert(sl == 5 && !memcmp(s,
                                 "a\xe2\x96\x81"
                                 "b",
                                 5));
    sd_gguf_close(g);

    /* quantize: ffn_down row length 96 is a multiple of 32 here, so no fallback */
    char qp[512];
    tpath(qp, sizeof qp, "q.gguf");
    char *logbuf = NULL;
    size_t logn = 0;
    FILE *log = open_memstream(&logbuf, &logn);
    cr_assert_eq(sd_quantize_file(out, qp, SD_TYPE_Q4_0, log, &err), SD_OK, "%s", err.msg);
    fclose(log);
    cr_assert_null(strstr(logbuf, "stored as f16"), "%s", logbuf);
    free(logbuf);
    cr_assert_eq(sd_gguf_open(qp, &g, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_find_tensor(g, "output.weight")->type, SD_TYPE_Q4_0);
    cr_assert_eq(sd_gguf_find_tensor(g, "blk.1.ffn_down.weight")->type, SD_TYPE_Q4_0);
    cr_assert_eq(sd_gguf_find_tensor(g, "blk.1.ffn_norm.weight")->type, SD_TYPE_F32);
    sd_gguf_close(g);
    /* quantizing a quantized file to the same type copies it; to q8_0 converts it */
    char q2[512];
    tpath(q2, sizeof q2, "q2.gguf");
    cr_assert_eq(sd_quantize_file(qp, q2, SD_TYPE_Q8_0, NULL, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_open(q2, &g, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_find_tensor(g, "output.weight")->type, SD_TYPE_Q8_0);
    cr_assert_eq(get_i(g, "general.file_type"), 7);
    sd_gguf_close(g);
    free(ck);
    free(tk);
}

/* A bad input gives the expected status, a message naming the file, and no output. */
static void expect_fail(const void *ck, size_t cn, const void *tk, size_t tn, int status,
                        const char *needle) {
    char ckp[512], tkp[512], out[512];
    tpath(ckp, sizeof ckp, "bad_ck.bin");
    tpath(tkp, sizeof tkp, "bad_tok.bin");
    tpath(out, sizeof out, "bad_out.gguf");
    write_all(ckp, ck, cn);
    write_all(tkp, tk, tn);
    sd_error err = {0};
    int st = sd_convert_llama2c(ckp, tkp, out, &err);
    cr_expect_eq(st, status, "status %d, expected %d: %s", st, status, err.msg);
    cr_expect(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    cr_expect(strstr(err.msg, g_dir) == err.msg, "message names the file: %s", err.msg);
    cr_expect_eq(access(out, F_OK), -1, "output left behind");
    cr_expect_eq(n_files(), 2, "stray files left behind");
    unlink(ckp);
    unlink(tkp);
}

Test(convert, bad_inputs) {
    size_t cn, tn;
    uint8_t *ck = make_ckpt(k_hdr, &cn), *tk = make_tok(6, &tn);
    /* truncated at several points, and one extra byte */
    size_t cuts[] = {0, 3, 27, 28, 100, cn / 2, cn - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        expect_fail(ck, cuts[i], tk, tn, SD_ERR_FORMAT, cuts[i] < 28 ? "header" : "file size");
    uint8_t *big = malloc(cn + 1);
    memcpy(big, ck, cn);
    big[cn] = 0;
    expect_fail(big, cn + 1, tk, tn, SD_ERR_FORMAT, "file size");
    free(big);
    /* bad header values (file size otherwise irrelevant: the header is checked first) */
    struct {
        int field;
        int32_t value;
        const char *needle;
    } bad[] = {
        {0, 0, "header.dim"},
        {0, -64, "header.dim"},
        {1, 0, "header.hidden_dim"},
        {2, 0, "header.n_layers"},
        {3, 0, "header.n_heads"},
        {3, 5, "header.dim"},
        {4, 0, "header.n_kv_heads"},
        {4, 3, "header.n_kv_heads"},
        {4, 8, "header.n_kv_heads"},
        {5, 0, "header.vocab_size"},
        {5, INT32_MIN, "header.vocab_size"},
        {5, (1 << 20) + 1, "header.vocab_size"},
        {6, 0, "header.seq_len"},
        {3, 64, "even"}, /* head size 1 */
        {0, INT32_MAX, "header.dim"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t h[7];
        memcpy(h, k_hdr, 28);
        h[bad[i].field] = bad[i].value;
        uint8_t *c2 = malloc(cn);
        memcpy(c2, ck, cn);
        memcpy(c2, h, 28);
        expect_fail(c2, cn, tk, tn, SD_ERR_FORMAT, bad[i].needle);
        free(c2);
    }
    /* a positive vocab (tied) with the untied file's size: size mismatch */
    {
        int32_t h[7];
        memcpy(h, k_hdr, 28);
        h[5] = 6;
        uint8_t *c2 = malloc(cn);
        memcpy(c2, ck, cn);
        memcpy(c2, h, 28);
        expect_fail(c2, cn, tk, tn, SD_ERR_FORMAT, "file size");
        free(c2);
    }
    /* a NaN weight */
    {
        uint8_t *c2 = malloc(cn);
        memcpy(c2, ck, cn);
        float nan = NAN;
        memcpy(c2 + 28 + 400, &nan, 4);
        expect_fail(c2, cn, tk, tn, SD_ERR_FORMAT, "finite");
        free(c2);
    }
    /* tokenizer: wrong vocabulary size, truncated, bad length, empty */
    size_t t5n, t7n;
    uint8_t *t5 = make_tok(5, &t5n), *t7 = make_tok(7, &t7n);
    expect_fail(ck, cn, t5, t5n, SD_ERR_MISMATCH, "vocabulary size");
    expect_fail(ck, cn, t7, t7n, SD_ERR_MISMATCH, "vocabulary size");
    expect_fail(ck, cn, tk, tn - 1, SD_ERR_FORMAT, "token 5");
    expect_fail(ck, cn, tk, tn - 6, SD_ERR_FORMAT, "token 5");
    expect_fail(ck, cn, tk, 0, SD_ERR_FORMAT, "max_token_length");
    {
        uint8_t *t2 = malloc(tn);
        memcpy(t2, tk, tn);
        int32_t len = 1000;
        memcpy(t2 + 4 + 4, &len, 4);
        expect_fail(ck, cn, t2, tn, SD_ERR_FORMAT, "token 0: length");
        free(t2);
    }
    free(t5);
    free(t7);
    /* missing files: io errors */
    {
        char out[512];
        tpath(out, sizeof out, "x.gguf");
        sd_error err = {0};
        cr_assert_eq(sd_convert_llama2c("/nonexistent/ck.bin", "/nonexistent/t.bin", out, &err),
                     SD_ERR_IO);
        cr_assert_eq(access(out, F_OK), -1);
        cr_assert_eq(sd_quantize_file("/nonexistent/x.gguf", out, SD_TYPE_Q8_0, NULL, &err),
                     SD_ERR_IO);
        cr_assert_eq(access(out, F_OK), -1);
    }
    free(ck);
    free(tk);
}
