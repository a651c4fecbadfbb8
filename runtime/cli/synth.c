/*
 * specdec synth: llama-shaped GGUF model pairs of real shapes with seeded random
 * weights, for benchmarks that need a TinyLlama-1.1B-sized target without downloading
 * one.
 *
 *   specdec synth [--preset tinyllama|llama7b|small|tiny] [--type f16|q8_0|q4_0]
 *                 [--draft-type T] [--noise S] [--seed N] [--only target|draft|both]
 *                 -o DIR
 * writes DIR/target.gguf, DIR/draft.gguf and DIR/pair.json (a generate/bench config
 * naming the two, K = 4, greedy), each to a temporary name renamed into place.
 *
 * Shapes (head_dim 64 for the real presets, so the draft's heads fit the target's):
 *   preset     role    dim  layers heads kv  ffn   vocab  ctx   params
 *   tinyllama  target  2048   22    32    4  5632  32000  2048  1.10 B (TinyLlama-1.1B)
 *              draft    512    8     8    4  1536  32000  2048  58.0 M (19x smaller)
 *   llama7b    target  4096   32    32   32 11008  32000  4096  6.74 B (LLaMA-2-7B)
 *              draft   1024    8     8    8  2816  32000  4096   166 M (41x; head_dim 128)
 *   small      target  1024   12    16    4  2816  32000  2048   199 M
 *              draft    256    4     4    4   768  32000  2048  19.5 M (10x)
 *   tiny       target   128    4     4    2   384    512   256  0.92 M (for tests)
 *              draft     64    2     2    2   192    512   256  0.15 M
 *
 * The target is a grown copy of the draft plus seeded noise whose scale sets how
 * often they agree. The draft's computation is embedded exactly in the target:
 *   - residual stream: draft dims are the target's first n_embd_d dims; the other
 *     dims start (embedding) and are fed (attn_output, ffn_down rows) only by noise;
 *   - RMSNorm weights of the draft dims are scaled by sqrt(n_embd_d / n_embd_t) and the
 *     target's rms_eps is the draft's 1e-5 times n_embd_d / n_embd_t, which undoes the
 *     larger divisor of the target's mean square (exact when the extra dims are 0);
 *   - draft query head j (KV head g = j / G_d) is target query head g * G_t + j % G_d,
 *     draft KV head g is target KV head g (same head_dim and RoPE): attention is the
 *     draft's; the draft's FFN units are the target's first n_ff_d units;
 *   - draft layer j is target layer floor(j * L_t / L_d); the other target layers are
 *     "extra" layers;
 *   - classifier: the draft's rows in the first n_embd_d columns.
 * The draft-derived matrix rows are the draft's as stored (quantized to the draft's
 * type and dequantized), so for small S the target's copy quantizes to the draft's own
 * blocks when both have the same type: rounding flips of independently quantized
 * copies would otherwise put a floor of ~10% under the disagreement.
 * Noise: every draft-derived weight gets + S * N(0, 1) / sqrt(fan_in_t) (norms:
 * + 0.1 S * N(0, 1)). Matrices that feed the residual stream (attn_output, ffn_down,
 * the embedding's extra columns) are S * N(0, 1) / sqrt(fan_in_t) wherever they are not
 * the draft's, so an extra layer or an extra head perturbs the output in proportion to
 * S; matrices that read the stream (attn_q/k/v, ffn_gate/up, classifier) are full-scale
 * random N(0, 1) / sqrt(fan_in_t) outside the draft's block: their outputs only reach
 * the residual through S-scaled weights or the S-sized extra dims. As S -> 0 the target
 * computes the draft's function (greedy acceptance -> 1, up to quantization when the
 * types differ); as S grows, agreement falls towards chance. S must be in [1e-4, 10]
 * (so that no tensor underflows to all zeros in f16). With Q8_0/Q4_0 weights the
 * activations are quantized to Q8_0 too, and a perturbation well below one quantization
 * step flips roundings at random, so 1 - acceptance grows roughly like sqrt(S) there
 * (like S in f16/f32). Measured greedy acceptance (K = 4, seed 1, bench's default
 * prompts, n = 128): tinyllama q8_0 S = 0.001 -> 0.87, 0.002 -> 0.82; tiny q8_0
 * S = 0.001 -> ~0.9, 0.01 -> ~0.76, 0.03 -> ~0.62, 0.1 -> ~0.2, 0.3 -> ~0.01.
 * Draft weights: N(0, 1) / sqrt(fan_in) matrices, 1 + 0.1 N(0, 1) norms. Each row comes
 * from its own splitmix64 stream keyed by (seed, role, tensor name, row), so files are
 * identical whatever the thread count.
 *
 * Vocabulary (depends only on n_vocab, the same for every synth model): "<unk>", "<s>",
 * "</s>", the 256 byte tokens <0x00>..<0xFF>, "▁" and the 94 printable ASCII
 * characters, then distinct pieces grown one lowercase letter at a time from earlier
 * pieces ("▁t", "▁th", "er", ...), so every piece is reachable by SPM merges. Scores
 * -id; bos 1, eos 2, unk 0, add_bos true.
 *
 * All tensors are kept in memory until the writer writes the file (the writer
 * references tensor data until sd_gguf_writer_write): ~1.2 GB for the tinyllama target
 * in Q8_0, 2.2 GB in F16; ~7.2 GB and 13.5 GB for the llama7b target.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/cli/cli.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/base/sd_base.h"

#define HINT "see 'specdec synth --help'"

typedef struct shape {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
} shape;

typedef struct preset {
    const char *name;
    shape t, d;
} preset;

static const preset k_presets[] = {
    {"tinyllama", {32000, 2048, 22, 32, 4, 5632, 2048}, {32000, 512, 8, 8, 4, 1536, 2048}},
    {"llama7b", {32000, 4096, 32, 32, 32, 11008, 4096}, {32000, 1024, 8, 8, 8, 2816, 4096}},
    {"small", {32000, 1024, 12, 16, 4, 2816, 2048}, {32000, 256, 4, 4, 4, 768, 2048}},
    {"tiny", {512, 128, 4, 4, 2, 384, 256}, {512, 64, 2, 2, 2, 192, 256}},
};

/* ---------------------------------------------------------------- random streams */

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

typedef struct rstream {
    uint64_t s;
    int has_spare;
    double spare;
} rstream;

static void rs_seed(rstream *r, uint64_t key, uint64_t row) {
    r->s = mix64(key ^ mix64(row * 0xD1B54A32D192ED03ull + 1));
    r->has_spare = 0;
}

static uint64_t rs_next(rstream *r) {
    r->s += 0x9E3779B97F4A7C15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rs_unif(rstream *r) { /* (0, 1) */
    return ((rs_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double rs_normal(rstream *r) { /* Box-Muller, both outputs used */
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    const double u1 = rs_unif(r), u2 = rs_unif(r);
    const double m = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
    r->spare = m * sin(a);
    r->has_spare = 1;
    return m * cos(a);
}

/* ---------------------------------------------------------------- vocabulary */

typedef struct vocab {
    int32_t n;
    char **text;
    float *score;
    int32_t *type;
} vocab;

static void vocab_free(vocab *v) {
    if (v->text)
        for (int32_t i = 0; i < v->n; i++)
            free(v->text[i]);
    free(v->text);
    free(v->score);
    free(v->type);
    memset(v, 0, sizeof *v);
}

#define N_FIXED_TOKENS (3 + 256 + 95)

/* Does the set (open addressing over text pointers) hold s? Inserts it if not. */
static int set_insert(char **tab, size_t mask, char *s) {
    size_t i = (size_t)fnv(s) & mask;
    while (tab[i]) {
        if (!strcmp(tab[i], s)) return 0;
        i = (i + 1) & mask;
    }
    tab[i] = s;
    return 1;
}

static int vocab_build(int32_t n, vocab *v) {
    memset(v, 0, sizeof *v);
    if (n < N_FIXED_TOKENS + 16) return -1;
    v->n = n;
    v->text = calloc((size_t)n, sizeof *v->text);
    v->score = calloc((size_t)n, sizeof *v->score);
    v->type = calloc((size_t)n, sizeof *v->type);
    size_t cap = 1;
    while (cap < (size_t)n * 2)
        cap <<= 1;
    char **set = calloc(cap, sizeof *set);
    if (!v->text || !v->score || !v->type || !set) goto oom;
    int32_t id = 0;
    const char *special[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, id++) {
        if (!(v->text[id] = strdup(special[i]))) goto oom;
        v->type[id] = i == 0 ? 2 : 3;
    }
    for (int b = 0; b < 256; b++, id++) {
        if (!(v->text[id] = malloc(8))) goto oom;
        snprintf(v->text[id], 8, "<0x%02X>", b);
        v->type[id] = 6;
    }
    const int32_t first_normal = id;
    if (!(v->text[id++] = strdup("\xe2\x96\x81"))) goto oom;
    for (int c = 0x21; c <= 0x7e; c++, id++) {
        if (!(v->text[id] = malloc(2))) goto oom;
        v->text[id][0] = (char)c;
        v->text[id][1] = '\0';
    }
    for (int32_t i = first_normal; i < id; i++) {
        v->type[i] = 1;
        v->score[i] = -(float)i;
        set_insert(set, cap - 1, v->text[i]);
    }
    /* Grown pieces: an earlier piece made of "▁" and lowercase letters, plus one letter
     * drawn with English letter frequencies. Fixed seed: the vocabulary depends only on
     * n. */
    static const char letters[] = "etaoinshrdlcumwfgypbvkjxqz";
    static const double freq[26] = {12.7, 9.1, 8.2, 7.5, 7.0,  6.7,  6.3, 6.1, 6.0,
                                    4.3,  4.0, 2.8, 2.8, 2.4,  2.4,  2.2, 2.0, 2.0,
                                    1.9,  1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07};
    double total = 0;
    for (int i = 0; i < 26; i++)
        total += freq[i];
    /* Bases: "▁" and the 26 lowercase letters, then every grown piece. */
    int32_t *bases = malloc((size_t)n * sizeof *bases);
    if (!bases) goto oom;
    int32_t n_bases = 0;
    bases[n_bases++] = first_normal;
    for (int32_t i = first_normal + 1; i < id; i++)
        if (v->text[i][0] >= 'a' && v->text[i][0] <= 'z') bases[n_bases++] = i;
    rstream r;
    rs_seed(&r, 0x5EEDC0DEull, 0);
    long guard = 0;
    while (id < n) {
        if (++guard > 100L * n) { /* cannot happen for sane n; never loop forever */
            free(bases);
            goto oom;
        }
        /* Prefer recent (longer) and early (short) bases alike: uniform over bases. */
        const int32_t b = bases[rs_next(&r) % (uint64_t)n_bases];
        const size_t bl = strlen(v->text[b]);
        if (bl >= 12) continue;
        double u = rs_unif(&r) * total;
        int li = 0;
        while (li < 25 && u >= freq[li])
            u -= freq[li++];
        char *s = malloc(bl + 2);
        if (!s) {
            free(bases);
            goto oom;
        }
        memcpy(s, v->text[b], bl);
        s[bl] = letters[li];
        s[bl + 1] = '\0';
        if (!set_insert(set, cap - 1, s)) {
            free(s);
            continue;
        }
        v->text[id] = s;
        v->type[id] = 1;
        v->score[id] = -(float)id;
        bases[n_bases++] = id;
        id++;
    }
    free(bases);
    free(set);
    return 0;
oom:
    free(set);
    vocab_free(v);
    return -1;
}

/* ---------------------------------------------------------------- tensors */

typedef enum tkind {
    T_EMBD,
    T_ATTN_NORM,
    T_Q,
    T_K,
    T_V,
    T_O,
    T_FFN_NORM,
    T_GATE,
    T_DOWN,
    T_UP,
    T_OUT_NORM,
    T_OUT,
} tkind;

static const char *kind_suffix(tkind k) {
    switch (k) {
    case T_EMBD:
        return "token_embd.weight";
    case T_ATTN_NORM:
        return "attn_norm.weight";
    case T_Q:
        return "attn_q.weight";
    case T_K:
        return "attn_k.weight";
    case T_V:
        return "attn_v.weight";
    case T_O:
        return "attn_output.weight";
    case T_FFN_NORM:
        return "ffn_norm.weight";
    case T_GATE:
        return "ffn_gate.weight";
    case T_DOWN:
        return "ffn_down.weight";
    case T_UP:
        return "ffn_up.weight";
    case T_OUT_NORM:
        return "output_norm.weight";
    case T_OUT:
        return "output.weight";
    }
    return "?";
}

static int kind_per_layer(tkind k) {
    return k >= T_ATTN_NORM && k <= T_UP;
}
static int kind_is_norm(tkind k) {
    return k == T_ATTN_NORM || k == T_FFN_NORM || k == T_OUT_NORM;
}
/* Matrices whose output is added to the residual stream (and the embedding). */
static int kind_writes_stream(tkind k) {
    return k == T_O || k == T_DOWN || k == T_EMBD;
}

static void tensor_name(char *buf, size_t cap, tkind k, int layer) {
    if (kind_per_layer(k))
        snprintf(buf, cap, "blk.%d.%s", layer, kind_suffix(k));
    else
        snprintf(buf, cap, "%s", kind_suffix(k));
}

/* [rows, cols] of a tensor of kind k in a model of shape s (norms: [1, n]). */
static void kind_dims(const shape *s, tkind k, int64_t *rows, int64_t *cols) {
    const int64_t hd = s->n_embd / s->n_head, kv = hd * s->n_head_kv;
    switch (k) {
    case T_EMBD:
    case T_OUT:
        *rows = s->n_vocab, *cols = s->n_embd;
        break;
    case T_ATTN_NORM:
    case T_FFN_NORM:
    case T_OUT_NORM:
        *rows = 1, *cols = s->n_embd;
        break;
    case T_Q:
    case T_O:
        *rows = s->n_embd, *cols = s->n_embd;
        break;
    case T_K:
    case T_V:
        *rows = kv, *cols = s->n_embd;
        break;
    case T_GATE:
    case T_UP:
        *rows = s->n_ff, *cols = s->n_embd;
        break;
    case T_DOWN:
        *rows = s->n_embd, *cols = s->n_ff;
        break;
    }
}

typedef struct synth_ctx {
    shape t, d;
    sd_type dtype; /* the draft's matrix type */
    uint64_t seed;
    float noise;
    int32_t *draft_layer; /* [t.n_layer]: draft layer embedded in target layer l, or -1 */
    int64_t hd;           /* head_dim (same in both) */
} synth_ctx;

enum { ROLE_DRAFT = 1, ROLE_TARGET_NOISE = 2, ROLE_TARGET_EXTRA = 3 };

static uint64_t stream_key(const synth_ctx *c, int role, tkind k, int layer) {
    char name[96];
    tensor_name(name, sizeof name, k, layer);
    return mix64(c->seed * 0x2545F4914F6CDD1Dull + (uint64_t)role) ^ fnv(name);
}

/* Row r of the draft's tensor (k, layer): cols_d floats into out. */
static void draft_row(const synth_ctx *c, tkind k, int layer, int64_t r, int64_t cols, float *out) {
    rstream rs;
    rs_seed(&rs, stream_key(c, ROLE_DRAFT, k, layer), (uint64_t)r);
    if (kind_is_norm(k)) {
        for (int64_t i = 0; i < cols; i++)
            out[i] = (float)(1.0 + 0.1 * rs_normal(&rs));
        return;
    }
    const double sc = 1.0 / sqrt((double)cols);
    for (int64_t i = 0; i < cols; i++)
        out[i] = (float)(sc * rs_normal(&rs));
}

/* Target query/attn-output head index -> draft head index, or -1. */
static int64_t map_head(const synth_ctx *c, int64_t h_t) {
    const int64_t gt = c->t.n_head / c->t.n_head_kv, gd = c->d.n_head / c->d.n_head_kv;
    const int64_t g = h_t / gt, j = h_t % gt;
    if (g >= c->d.n_head_kv || j >= gd) return -1;
    return g * gd + j;
}

/* Target row r of kind k -> draft row, or -1 (the layer's mapping is checked by the
 * caller). */
static int64_t map_row(const synth_ctx *c, tkind k, int64_t r) {
    switch (k) {
    case T_EMBD:
    case T_OUT:
        return r;
    case T_ATTN_NORM:
    case T_FFN_NORM:
    case T_OUT_NORM:
        return 0;
    case T_Q: {
        const int64_t h = map_head(c, r / c->hd);
        return h < 0 ? -1 : h * c->hd + r % c->hd;
    }
    case T_K:
    case T_V:
        return r / c->hd < c->d.n_head_kv ? r : -1;
    case T_O:
    case T_DOWN:
        return r < c->d.n_embd ? r : -1;
    case T_GATE:
    case T_UP:
        return r < c->d.n_ff ? r : -1;
    }
    return -1;
}

/* Target column i of kind k -> draft column, or -1. */
static int64_t map_col(const synth_ctx *c, tkind k, int64_t i) {
    switch (k) {
    case T_O: {
        const int64_t h = map_head(c, i / c->hd);
        return h < 0 ? -1 : h * c->hd + i % c->hd;
    }
    case T_DOWN:
        return i < c->d.n_ff ? i : -1;
    default:
        return i < c->d.n_embd ? i : -1; /* columns index the residual stream */
    }
}

/* Row r of the target's tensor (k, layer) into out[cols_t]; dbuf: scratch for a draft
 * row (>= the draft's widest row), qbuf: scratch for that row quantized. The draft's
 * matrix rows are taken as the draft file holds them (quantized to its type and back),
 * so that with small noise the target's copy quantizes to the very same blocks. */
static void target_row(const synth_ctx *c, tkind k, int layer, int64_t r, int64_t cols, float *out,
                       float *dbuf, void *qbuf) {
    const int layer_d = kind_per_layer(k) ? c->draft_layer[layer] : 0;
    int64_t rows_d, cols_d;
    kind_dims(&c->d, k, &rows_d, &cols_d);
    const int64_t r_d = layer_d >= 0 ? map_row(c, k, r) : -1;
    if (r_d >= 0) {
        draft_row(c, k, layer_d, r_d, cols_d, dbuf);
        if (!kind_is_norm(k)) {
            sd_quantize_row(c->dtype, dbuf, qbuf, cols_d);
            sd_dequantize_row(c->dtype, qbuf, dbuf, cols_d);
        }
    }
    rstream noise, extra;
    rs_seed(&noise, stream_key(c, ROLE_TARGET_NOISE, k, layer), (uint64_t)r);
    rs_seed(&extra, stream_key(c, ROLE_TARGET_EXTRA, k, layer), (uint64_t)r);
    const double S = c->noise;
    if (kind_is_norm(k)) {
        /* Draft dims: the draft's gain (or ~1 in extra layers) times sqrt(d_d / d_t). */
        const double shrink = sqrt((double)c->d.n_embd / (double)c->t.n_embd);
        for (int64_t i = 0; i < cols; i++) {
            const int64_t j = map_col(c, k, i);
            double v;
            if (j >= 0 && r_d >= 0)
                v = (dbuf[j] + 0.1 * S * rs_normal(&noise)) * shrink;
            else if (j >= 0)
                v = (1.0 + 0.1 * rs_normal(&extra)) * shrink;
            else
                v = 1.0 + 0.1 * rs_normal(&extra);
            out[i] = (float)v;
        }
        return;
    }
    const double sc = 1.0 / sqrt((double)cols);
    const int writes = kind_writes_stream(k);
    for (int64_t i = 0; i < cols; i++) {
        const int64_t j = r_d >= 0 ? map_col(c, k, i) : -1;
        double v;
        if (j >= 0)
            v = dbuf[j] + S * sc * rs_normal(&noise);
        else if (writes)
            v = S * sc * rs_normal(&noise);
        else
            v = sc * rs_normal(&extra);
        out[i] = (float)v;
    }
}

/* ---------------------------------------------------------------- model writer */

typedef struct model_out {
    void **bufs;
    int n_bufs;
} model_out;

/* Generate tensor (k, layer) of the draft (is_target 0) or target, quantized to type
 * t (norms stay f32), and add it to w. */
static int gen_tensor(const synth_ctx *c, int is_target, tkind k, int layer, sd_type t,
                      sd_gguf_writer *w, model_out *mo, sd_error *err) {
    const shape *s = is_target ? &c->t : &c->d;
    int64_t rows, cols;
    kind_dims(s, k, &rows, &cols);
    const sd_type tt = kind_is_norm(k) ? SD_TYPE_F32 : t;
    size_t row_bytes;
    if (sd_type_row_bytes(tt, cols, &row_bytes))
        return sd_errorf(err, SD_ERR_ARG, "synth: %lld columns are not a multiple of the %s block",
                         (long long)cols, sd_type_name(tt));
    const size_t nbytes = row_bytes * (size_t)rows;
    unsigned char *data = malloc(nbytes);
    if (!data) return sd_errorf(err, SD_ERR_OOM, "synth: out of memory (%zu bytes)", nbytes);
    mo->bufs[mo->n_bufs++] = data;
    const int64_t dcols_max = c->d.n_ff > c->d.n_embd ? c->d.n_ff : c->d.n_embd;
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        /* row: the target row, the draft row, and the draft row quantized (<= f32 size) */
        float *row = malloc((size_t)(cols + 2 * dcols_max) * sizeof(float));
        if (!row) oom = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!row) continue;
            if (is_target)
                target_row(c, k, layer, r, cols, row, row + cols, row + cols + dcols_max);
            else
                draft_row(c, k, layer, r, cols, row);
            sd_quantize_row(tt, row, data + (size_t)r * row_bytes, cols);
        }
        free(row);
    }
    if (oom) return sd_errorf(err, SD_ERR_OOM, "synth: out of memory");
    char name[96];
    tensor_name(name, sizeof name, k, layer);
    int64_t ne[2] = {cols, rows};
    return sd_gguf_add_tensor(w, name, (uint32_t)tt, kind_is_norm(k) ? 1 : 2, ne, data, nbytes,
                              err);
}

static int oom_if(int rc, sd_error *err) {
    return rc ? sd_errorf(err, SD_ERR_OOM, "synth: out of memory building metadata") : SD_OK;
}

static int write_model(const synth_ctx *c, const char *preset_name, int is_target, sd_type t,
                       const vocab *v, const char *path, sd_error *err) {
    const shape *s = is_target ? &c->t : &c->d;
    sd_gguf_writer *w = sd_gguf_writer_new();
    if (!w) return sd_errorf(err, SD_ERR_OOM, "synth: out of memory");
    model_out mo = {0};
    const int max_tensors = 4 + 9 * s->n_layer;
    mo.bufs = calloc((size_t)max_tensors, sizeof *mo.bufs);
    int rc = mo.bufs ? SD_OK : sd_errorf(err, SD_ERR_OOM, "synth: out of memory");
    char name[128];
    const int32_t hd = s->n_embd / s->n_head;
    snprintf(name, sizeof name, "specdec-synth-%s-%s", preset_name, is_target ? "target" : "draft");
    if (!rc) {
        int e = 0;
        e |= sd_gguf_set_str(w, "general.architecture", "llama");
        e |= sd_gguf_set_str(w, "general.name", name);
        e |= sd_gguf_set_u32(w, "llama.context_length", (uint32_t)s->n_ctx);
        e |= sd_gguf_set_u32(w, "llama.embedding_length", (uint32_t)s->n_embd);
        e |= sd_gguf_set_u32(w, "llama.block_count", (uint32_t)s->n_layer);
        e |= sd_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)s->n_ff);
        e |= sd_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)s->n_head);
        e |= sd_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)s->n_head_kv);
        /* The target's eps is the draft's scaled like its mean square (see the top). */
        e |= sd_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon",
                             is_target ? (float)(1e-5 * c->d.n_embd / c->t.n_embd) : 1e-5f);
        e |= sd_gguf_set_f32(w, "llama.rope.freq_base", 10000.0f);
        e |= sd_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd);
        e |= sd_gguf_set_str(w, "tokenizer.ggml.model", "llama");
        e |= sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->text,
                                 (uint64_t)v->n);
        e |= sd_gguf_set_arr(w, "tokenizer.ggml.scores", SD_GGUF_F32, v->score, (uint64_t)v->n);
        e |= sd_gguf_set_arr(w, "tokenizer.ggml.token_type", SD_GGUF_I32, v->type, (uint64_t)v->n);
        e |= sd_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        e |= sd_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
        e |= sd_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        e |= sd_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
        e |= sd_gguf_set_str(w, "specdec.synth.preset", preset_name);
        e |= sd_gguf_set_str(w, "specdec.synth.role", is_target ? "target" : "draft");
        e |= sd_gguf_set_scalar(w, "specdec.synth.seed", SD_GGUF_U64, &c->seed);
        if (is_target) e |= sd_gguf_set_f32(w, "specdec.synth.noise", c->noise);
        rc = oom_if(e, err);
    }
    const double t0 = sd_time_ms();
    const int tty = isatty(2);
    if (!rc) rc = gen_tensor(c, is_target, T_EMBD, 0, t, w, &mo, err);
    for (int l = 0; l < s->n_layer && !rc; l++) {
        for (tkind k = T_ATTN_NORM; k <= T_UP && !rc; k++)
            rc = gen_tensor(c, is_target, k, l, t, w, &mo, err);
        if (tty || l + 1 == s->n_layer)
            fprintf(stderr, "%sspecdec synth: %s: layer %d/%d (%.1f s)", tty ? "\r" : "", path,
                    l + 1, s->n_layer, (sd_time_ms() - t0) * 1e-3);
    }
    if (!rc) rc = gen_tensor(c, is_target, T_OUT_NORM, 0, t, w, &mo, err);
    if (!rc) rc = gen_tensor(c, is_target, T_OUT, 0, t, w, &mo, err);
    fprintf(stderr, "\n");
    if (!rc) {
        fprintf(stderr, "specdec synth: writing %s\n", path);
        rc = sd_gguf_writer_write(w, path, err);
    }
    sd_gguf_writer_free(w);
    for (int i = 0; i < mo.n_bufs; i++)
        free(mo.bufs[i]);
    free(mo.bufs);
    return rc;
}

static int64_t shape_params(const shape *s) {
    int64_t total = 0;
    for (tkind k = T_EMBD; k <= T_OUT; k++) {
        int64_t r, c;
        kind_dims(s, k, &r, &c);
        total += r * c * (kind_per_layer(k) ? s->n_layer : 1);
    }
    return total;
}

/* The embedding of the draft in the target needs these; true for the presets. */
static int check_shapes(const shape *t, const shape *d, sd_error *err) {
    const int32_t hdt = t->n_embd / t->n_head, hdd = d->n_embd / d->n_head;
    if (t->n_vocab != d->n_vocab || t->n_ctx != d->n_ctx || hdt != hdd || d->n_embd > t->n_embd ||
        d->n_layer > t->n_layer || d->n_ff > t->n_ff || d->n_head_kv > t->n_head_kv ||
        t->n_head % t->n_head_kv || d->n_head % d->n_head_kv ||
        d->n_head / d->n_head_kv > t->n_head / t->n_head_kv || t->n_embd % t->n_head ||
        d->n_embd % d->n_head || d->n_embd % 32 || d->n_ff % 32 || t->n_embd % 32 || t->n_ff % 32)
        return sd_errorf(err, SD_ERR_ARG, "synth: draft shape does not embed in the target shape");
    return SD_OK;
}

static int write_text_atomic(const char *path, const char *text, sd_error *err) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return sd_errorf(err, SD_ERR_ARG, "%.200s...: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return sd_errorf(err, SD_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        unlink(tmp);
        return sd_errorf(err, SD_ERR_IO, "%s: write failed", path);
    }
    return SD_OK;
}

static void synth_help(FILE *f) {
    fprintf(f,
            "usage: specdec synth [options] -o DIR\n"
            "  writes DIR/target.gguf, DIR/draft.gguf and DIR/pair.json (a config for\n"
            "  generate/bench): a llama draft with seeded random weights and a target that\n"
            "  is a grown copy of it plus noise (see runtime/synth.c)\n"
            "  --preset P     tinyllama (target 1.1B: dim 2048, 22 layers, 32 heads, 4 KV,\n"
            "                 FFN 5632, vocab 32000, ctx 2048; draft 58M: dim 512, 8 layers,\n"
            "                 8 heads, 4 KV, FFN 1536), llama7b (target 6.7B: dim 4096, 32\n"
            "                 layers, 32 heads, FFN 11008, ctx 4096; draft 166M), small\n"
            "                 (199M / 19.5M), tiny (tests)\n"
            "                 (default tinyllama)\n"
            "  --type T       f16, q8_0 or q4_0 (or f32) for the weight matrices (default q8_0)\n"
            "  --draft-type T the draft's type (default: --type)\n"
            "  --noise S      target noise scale in [0.0001, 10]: larger S, lower acceptance\n"
            "                 (default 0.002: ~0.8 greedy acceptance for tinyllama q8_0)\n"
            "  --seed N       weights seed (default 1)\n"
            "  --only W       target, draft or both (default both)\n"
            "  -o DIR         output folder (created if absent)\n");
}

int sd_cmd_synth(int argc, char **argv) {
    enum { O_PRESET = 1000, O_TYPE, O_DTYPE, O_NOISE, O_SEED, O_ONLY };
    static const struct option opts[] = {
        {"preset", required_argument, 0, O_PRESET},
        {"type", required_argument, 0, O_TYPE},
        {"draft-type", required_argument, 0, O_DTYPE},
        {"noise", required_argument, 0, O_NOISE},
        {"seed", required_argument, 0, O_SEED},
        {"only", required_argument, 0, O_ONLY},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const preset *pr = &k_presets[0];
    sd_type type = SD_TYPE_Q8_0, dtype = SD_TYPE_Q8_0;
    int has_dtype = 0, want_t = 1, want_d = 1;
    double noise = 0.002;
    unsigned long long seed = 1;
    const char *out_dir = NULL;
    opterr = 0;
    optind = 1;
    int o;
    char *end;
    while ((o = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (o) {
        case O_PRESET: {
            pr = NULL;
            for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
                if (!strcmp(optarg, k_presets[i].name)) pr = &k_presets[i];
            if (!pr)
                return sd_cli_usage(
                    NULL, "--preset: expected tinyllama, llama7b, small or tiny, found '%s'",
                    optarg);
            break;
        }
        case O_TYPE:
        case O_DTYPE: {
            sd_type tt;
            if (sd_type_from_name(optarg, &tt) || (tt != SD_TYPE_F16 && tt != SD_TYPE_Q8_0 &&
                                                   tt != SD_TYPE_Q4_0 && tt != SD_TYPE_F32))
                return sd_cli_usage(NULL,
                                    o == O_TYPE
                                        ? "--type: expected f16, q8_0 or q4_0, found '%s'"
                                        : "--draft-type: expected f16, q8_0 or q4_0, found '%s'",
                                    optarg);
            if (o == O_TYPE)
                type = tt;
            else
                dtype = tt, has_dtype = 1;
            break;
        }
        case O_NOISE:
            if (sd_cli_parse_f64(optarg, 1e-4, 10.0, &noise))
                return sd_cli_usage(NULL, "--noise: expected a number in [0.0001, 10], found '%s'",
                                    optarg);
            break;
        case O_SEED:
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || optarg[0] == '-')
                return sd_cli_usage(NULL, "--seed: expected an integer >= 0, found '%s'", optarg);
            break;
        case O_ONLY:
            want_t = !strcmp(optarg, "target") || !strcmp(optarg, "both");
            want_d = !strcmp(optarg, "draft") || !strcmp(optarg, "both");
            if (!want_t && !want_d)
                return sd_cli_usage(NULL, "--only: expected target, draft or both, found '%s'",
                                    optarg);
            break;
        case 'o':
            out_dir = optarg;
            break;
        case 'h':
            synth_help(stdout);
            return EXIT_SUCCESS;
        case ':':
            return sd_cli_usage(HINT, "option '%s' needs a value", argv[optind - 1]);
        default:
            return sd_cli_usage(HINT, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return sd_cli_usage(HINT, "unexpected argument '%s'", argv[optind]);
    if (!out_dir) return sd_cli_usage(HINT, "%s", "synth: -o DIR is required");
    if (!has_dtype) dtype = type;

    sd_error err = {0};
    int rc = check_shapes(&pr->t, &pr->d, &err);
    if (!rc && mkdir(out_dir, 0777) && errno != EEXIST)
        rc = sd_errorf(&err, SD_ERR_IO, "%s: cannot create folder: %s", out_dir, strerror(errno));
    synth_ctx c = {
        pr->t, pr->d, dtype, (uint64_t)seed, (float)noise, NULL, pr->t.n_embd / pr->t.n_head};
    vocab v = {0};
    if (!rc) {
        c.draft_layer = malloc((size_t)c.t.n_layer * sizeof(int32_t));
        if (!c.draft_layer || vocab_build(c.t.n_vocab, &v))
            rc = sd_errorf(&err, SD_ERR_OOM, "synth: out of memory");
    }
    if (!rc) {
        for (int l = 0; l < c.t.n_layer; l++)
            c.draft_layer[l] = -1;
        for (int j = 0; j < c.d.n_layer; j++)
            c.draft_layer[(int64_t)j * c.t.n_layer / c.d.n_layer] = j;
        fprintf(stderr,
                "specdec synth: preset %s, seed %llu, noise %g: target %.1f M params (%s), "
                "draft %.1f M params (%s)\n",
                pr->name, seed, noise, shape_params(&c.t) / 1e6, sd_type_name(type),
                shape_params(&c.d) / 1e6, sd_type_name(dtype));
    }
    char tpath[4200], dpath[4200], cpath[4200];
    if (!rc && (snprintf(tpath, sizeof tpath, "%s/target.gguf", out_dir) >= (int)sizeof tpath ||
                snprintf(dpath, sizeof dpath, "%s/draft.gguf", out_dir) >= (int)sizeof dpath ||
                snprintf(cpath, sizeof cpath, "%s/pair.json", out_dir) >= (int)sizeof cpath))
        rc = sd_errorf(&err, SD_ERR_ARG, "%.200s...: path too long", out_dir);
    if (!rc && want_d) rc = write_model(&c, pr->name, 0, dtype, &v, dpath, &err);
    if (!rc && want_t) rc = write_model(&c, pr->name, 1, type, &v, tpath, &err);
    if (!rc && want_t && want_d) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\n"
                 "  \"description\": \"specdec synth --preset %s --type %s --draft-type %s "
                 "--noise %g --seed %llu\",\n"
                 "  \"target\": \"target.gguf\",\n"
                 "  \"draft\": \"draft.gguf\",\n"
                 "  \"draft_tokens\": 4,\n"
                 "  \"max_tokens\": 128,\n"
                 "  \"temp\": 0\n"
                 "}\n",
                 pr->name, sd_type_name(type), sd_type_name(dtype), noise, seed);
        rc = write_text_atomic(cpath, json, &err);
    }
    free(c.draft_layer);
    vocab_free(&v);
    if (rc) return sd_cli_fail(&err);
    fprintf(stderr, "specdec synth: wrote %s%s%s%s%s\n", want_d ? dpath : "",
            want_d && want_t ? ", " : "", want_t ? tpath : "", want_t && want_d ? ", " : "",
            want_t && want_d ? cpath : "");
    return EXIT_SUCCESS;
}
