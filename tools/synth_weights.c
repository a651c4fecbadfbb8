/*
 * specdec synth's weights and vocabulary (tools/synth.h; the command and the
 * files: synth.c).
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
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/synth.h"

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

void synth_vocab_free(synth_vocab *v) {
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

int synth_vocab_build(int32_t n, synth_vocab *v) {
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
    synth_vocab_free(v);
    return -1;
}

/* ---------------------------------------------------------------- tensors */

static const char *kind_suffix(synth_kind k) {
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

int synth_kind_per_layer(synth_kind k) {
    return k >= T_ATTN_NORM && k <= T_UP;
}
int synth_kind_is_norm(synth_kind k) {
    return k == T_ATTN_NORM || k == T_FFN_NORM || k == T_OUT_NORM;
}
/* Matrices whose output is added to the residual stream (and the embedding). */
static int kind_writes_stream(synth_kind k) {
    return k == T_O || k == T_DOWN || k == T_EMBD;
}

void synth_tensor_name(char *buf, size_t cap, synth_kind k, int layer) {
    if (synth_kind_per_layer(k))
        snprintf(buf, cap, "blk.%d.%s", layer, kind_suffix(k));
    else
        snprintf(buf, cap, "%s", kind_suffix(k));
}

/* [rows, cols] of a tensor of kind k in a model of synth_shape s (norms: [1, n]). */
void synth_kind_dims(const synth_shape *s, synth_kind k, int64_t *rows, int64_t *cols) {
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

enum { ROLE_DRAFT = 1, ROLE_TARGET_NOISE = 2, ROLE_TARGET_EXTRA = 3 };

static uint64_t stream_key(const synth_ctx *c, int role, synth_kind k, int layer) {
    char name[96];
    synth_tensor_name(name, sizeof name, k, layer);
    return mix64(c->seed * 0x2545F4914F6CDD1Dull + (uint64_t)role) ^ fnv(name);
}

/* Row r of the draft's tensor (k, layer): cols_d floats into out. */
void synth_draft_row(const synth_ctx *c, synth_kind k, int layer, int64_t r, int64_t cols,
                     float *out) {
    rstream rs;
    rs_seed(&rs, stream_key(c, ROLE_DRAFT, k, layer), (uint64_t)r);
    if (synth_kind_is_norm(k)) {
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
static int64_t map_row(const synth_ctx *c, synth_kind k, int64_t r) {
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
static int64_t map_col(const synth_ctx *c, synth_kind k, int64_t i) {
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
void synth_target_row(const synth_ctx *c, synth_kind k, int layer, int64_t r, int64_t cols,
                      float *out, float *dbuf, void *qbuf) {
    const int layer_d = synth_kind_per_layer(k) ? c->draft_layer[layer] : 0;
    int64_t rows_d, cols_d;
    synth_kind_dims(&c->d, k, &rows_d, &cols_d);
    const int64_t r_d = layer_d >= 0 ? map_row(c, k, r) : -1;
    if (r_d >= 0) {
        synth_draft_row(c, k, layer_d, r_d, cols_d, dbuf);
        if (!synth_kind_is_norm(k)) {
            sd_quantize_row(c->dtype, dbuf, qbuf, cols_d);
            sd_dequantize_row(c->dtype, qbuf, dbuf, cols_d);
        }
    }
    rstream noise, extra;
    rs_seed(&noise, stream_key(c, ROLE_TARGET_NOISE, k, layer), (uint64_t)r);
    rs_seed(&extra, stream_key(c, ROLE_TARGET_EXTRA, k, layer), (uint64_t)r);
    const double S = c->noise;
    if (synth_kind_is_norm(k)) {
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
