/*
 * GGUF -> quantized GGUF (`specdec quantize IN OUT RECIPE`), in the manner of llama.cpp's
 * llama-quantize: metadata copied, general.file_type set to the recipe's llama_ftype
 * (llama.h LLAMA_FTYPE_*), 2-D "*.weight" matrices (token_embd included, as llama.cpp
 * does) converted, everything else (1-D norms) stored F32.
 *
 * Recipes: every writable type by its name ("q4_k": every matrix Q4_K, what
 * `llama-quantize --pure` writes; its file_type is the nearest llama_ftype, e.g.
 * Q4_K_S for q4_k), and the mixes q4_k_m / q5_k_m, our simplified version of
 * llama-quant.cpp's rules for LLAMA_FTYPE_MOSTLY_Q4_K_M / Q5_K_M:
 *   - output.weight, or token_embd.weight when there is no output.weight (tied
 *     embeddings: it is the classifier): Q6_K;
 *   - attn_v.weight and ffn_down.weight of layer i of n: Q6_K when "more bits" are
 *     wanted there, i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (llama.cpp's
 *     use_more_bits), else the base type;
 *   - a fused attn_qkv.weight: Q5_K (q4_k_m) / Q6_K (q5_k_m);
 *   - every other matrix: the base type (Q4_K / Q5_K).
 *   Not reproduced: the rules for Falcon, 70B-class models and mixtures of experts.
 * A matrix whose row length ne[0] is not a multiple of its type's block size falls
 * back as llama.cpp's tensor_type_fallback does: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0;
 * Q5_K -> Q5_1; Q6_K -> Q8_0; and to F16 if even that block (32) does not divide the
 * row (e.g. stories260K's ffn_down, ne[0] = hidden = 172), with a note on the log.
 *
 * Every input value must be finite: a NaN or an infinity in any tensor (after
 * dequantization, for quantized inputs) is refused with the tensor, row and column
 * named, because the quantizers would otherwise round it into an ordinary number.
 *
 * Conversion is row by row: source row -> float (sd_dequantize_row) -> target row
 * (sd_quantize_row); a tensor already of the target type is copied unchanged (after
 * the finiteness check). Rows are independent, so they are spread over OpenMP threads;
 * the result does not depend on the thread count.
 */
#include "runtime/convert/sd_convert.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/gguf/sd_gguf.h"

/* ---------------------------------------------------------------------------------- */
/* Recipes                                                                              */
/* ---------------------------------------------------------------------------------- */

enum { MIX_PURE = 0, MIX_K_M = 1 };

static const sd_quant_recipe k_recipes[] = {
    /* name, base type, mix, llama_ftype (llama.h) */
    {"f32", SD_TYPE_F32, MIX_PURE, 0},     /* ALL_F32 */
    {"f16", SD_TYPE_F16, MIX_PURE, 1},     /* MOSTLY_F16 */
    {"bf16", SD_TYPE_BF16, MIX_PURE, 32},  /* MOSTLY_BF16 */
    {"q8_0", SD_TYPE_Q8_0, MIX_PURE, 7},   /* MOSTLY_Q8_0 */
    {"q4_0", SD_TYPE_Q4_0, MIX_PURE, 2},   /* MOSTLY_Q4_0 */
    {"q4_1", SD_TYPE_Q4_1, MIX_PURE, 3},   /* MOSTLY_Q4_1 */
    {"q5_0", SD_TYPE_Q5_0, MIX_PURE, 8},   /* MOSTLY_Q5_0 */
    {"q5_1", SD_TYPE_Q5_1, MIX_PURE, 9},   /* MOSTLY_Q5_1 */
    {"q2_k", SD_TYPE_Q2_K, MIX_PURE, 10},  /* MOSTLY_Q2_K */
    {"q3_k", SD_TYPE_Q3_K, MIX_PURE, 11},  /* MOSTLY_Q3_K_S */
    {"q4_k", SD_TYPE_Q4_K, MIX_PURE, 14},  /* MOSTLY_Q4_K_S */
    {"q5_k", SD_TYPE_Q5_K, MIX_PURE, 16},  /* MOSTLY_Q5_K_S */
    {"q6_k", SD_TYPE_Q6_K, MIX_PURE, 18},  /* MOSTLY_Q6_K */
    {"q4_k_m", SD_TYPE_Q4_K, MIX_K_M, 15}, /* MOSTLY_Q4_K_M */
    {"q5_k_m", SD_TYPE_Q5_K, MIX_K_M, 17}, /* MOSTLY_Q5_K_M */
};
#define N_RECIPES (sizeof k_recipes / sizeof k_recipes[0])

int sd_quant_recipe_from_name(const char *name, sd_quant_recipe *out) {
    if (!name) return -1;
    for (size_t i = 0; i < N_RECIPES; i++)
        if (strcasecmp(name, k_recipes[i].name) == 0) {
            if (out) *out = k_recipes[i];
            return 0;
        }
    return -1;
}

const char *sd_quant_recipe_names(void) {
    return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
           "q4_k_m, q5_k_m";
}

int sd_quant_recipe_of_type(sd_type t, sd_quant_recipe *out) {
    for (size_t i = 0; i < N_RECIPES; i++)
        if (k_recipes[i].mix == MIX_PURE && k_recipes[i].base == t) {
            if (out) *out = k_recipes[i];
            return 0;
        }
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* llama.cpp's use_more_bits(i_layer, n_layers) */
static int more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Layer index of "blk.N.*", or -1. */
static int layer_of(const char *name) {
    int i = -1, pos = 0;
    if (sscanf(name, "blk.%d.%n", &i, &pos) != 1 || pos == 0) return -1;
    return i;
}

/* The type a mix gives matrix `name` (tied: the file has no output.weight). */
static sd_type mix_type(const sd_quant_recipe *r, const char *name, int tied, int n_layer) {
    if (r->mix != MIX_K_M) return r->base;
    if (strcmp(name, "output.weight") == 0 || (tied && strcmp(name, "token_embd.weight") == 0))
        return SD_TYPE_Q6_K;
    if (ends_with(name, "attn_qkv.weight"))
        return r->base == SD_TYPE_Q4_K ? SD_TYPE_Q5_K : SD_TYPE_Q6_K;
    if (ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight")) {
        const int i = layer_of(name);
        if (i >= 0 && n_layer > 0 && more_bits(i, n_layer)) return SD_TYPE_Q6_K;
    }
    return r->base;
}

/* llama.cpp's tensor_type_fallback for a row length the type's block does not divide. */
static sd_type fallback_type(sd_type t, int64_t ne0) {
    sd_type f;
    switch (t) {
    case SD_TYPE_Q2_K:
    case SD_TYPE_Q3_K:
        f = SD_TYPE_Q4_0;
        break;
    case SD_TYPE_Q4_K:
        f = SD_TYPE_Q5_0;
        break;
    case SD_TYPE_Q5_K:
        f = SD_TYPE_Q5_1;
        break;
    case SD_TYPE_Q6_K:
        f = SD_TYPE_Q8_0;
        break;
    default:
        f = SD_TYPE_F16;
        break;
    }
    return ne0 % sd_type_block_elems(f) == 0 ? f : SD_TYPE_F16;
}

/* ---------------------------------------------------------------------------------- */
/* Conversion                                                                           */
/* ---------------------------------------------------------------------------------- */

/* Convert n_rows rows of ne0 elements from (st, src) to (dt, dst); dst == NULL: only
 * check. Every value is checked to be finite: returns 1 with the first bad element in
 * *bad_r, *bad_c and its value in *bad_v; -1 if out of memory; 0 if done. */
static int convert_rows(sd_type st, const uint8_t *src, size_t src_row, sd_type dt, uint8_t *dst,
                        size_t dst_row, int64_t ne0, int64_t n_rows, int64_t *bad_r, int64_t *bad_c,
                        float *bad_v) {
    int failed = 0;
    int64_t first_bad = n_rows; /* smallest bad row: the same report whatever the threads */
#pragma omp parallel
    {
        float *buf = malloc((size_t)ne0 * sizeof *buf + 1);
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_rows; r++) {
            if (!buf) continue;
            sd_dequantize_row(st, src + (size_t)r * src_row, buf, ne0);
            int64_t c = 0;
            while (c < ne0 && isfinite(buf[c]))
                c++;
            if (c < ne0) {
#pragma omp critical(sd_quantize_bad)
                if (r < first_bad) {
                    first_bad = r;
                    *bad_c = c;
                    *bad_v = buf[c];
                }
                continue;
            }
            if (dst) sd_quantize_row(dt, buf, dst + (size_t)r * dst_row, ne0);
        }
        free(buf);
    }
    if (failed) return -1;
    if (first_bad < n_rows) {
        *bad_r = first_bad;
        return 1;
    }
    return 0;
}

/* Layers: 1 + the largest N of "blk.N." among the tensors. */
static int count_layers(const sd_gguf *g) {
    int n = 0;
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const int l = layer_of(sd_gguf_tensor_at(g, i)->name);
        if (l >= n) n = l + 1;
    }
    return n;
}

int sd_quantize_file_recipe(const char *in_path, const char *out_path, const sd_quant_recipe *rc,
                            FILE *log, sd_convert_progress progress, void *user, sd_error *err) {
    if (!rc || !sd_type_supported((uint32_t)rc->base) ||
        !sd_type_traits_get((uint32_t)rc->base)->from_float)
        return sd_errorf(err, SD_ERR_ARG, "quantize: type: expected one of %s",
                         sd_quant_recipe_names());
    sd_gguf *g = NULL;
    /* Never write over the input or a non-regular file (checked again at write). */
    int st = sd_gguf_check_output(out_path, &in_path, 1, err);
    if (st) return st;
    if ((st = sd_gguf_open(in_path, &g, err))) return st;
    if (sd_gguf_n_tensors(g) == 0) {
        sd_gguf_close(g);
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: no tensors: a vocabulary-only GGUF is not a model to quantize",
                         in_path);
    }
    sd_gguf_writer *w = sd_gguf_writer_new();
    const int64_t nt = sd_gguf_n_tensors(g);
    uint8_t **bufs = calloc(nt > 0 ? (size_t)nt : 1, sizeof *bufs);
    size_t in_bytes = 0, out_bytes = 0;
    int n_fallback = 0, warned_requant = 0;
    /* Fallbacks, one log line per (wanted, stored) pair: its count and first tensor. */
    struct {
        sd_type want, dst;
        int n;
        const char *first;
        int64_t cols;
    } fb[16];
    int n_fb = 0;
    const int tied = sd_gguf_find_tensor(g, "output.weight") == NULL;
    const int n_layer = count_layers(g);
    int64_t n_by_type[SD_TYPE_COUNT] = {0};
    if (!w || !bufs) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", out_path);
        goto out;
    }
    if (sd_gguf_copy_kv(w, g) || sd_gguf_set_u32(w, "general.file_type", rc->ftype)) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: metadata: out of memory", out_path);
        goto out;
    }
    for (int64_t i = 0; i < nt; i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        const sd_type src = (sd_type)t->type;
        sd_type dst = SD_TYPE_F32;
        if (t->n_dims == 2 && ends_with(t->name, ".weight")) {
            const sd_type want = mix_type(rc, t->name, tied, n_layer);
            dst = want;
            if (t->ne[0] % sd_type_block_elems(want) != 0) {
                dst = fallback_type(want, t->ne[0]);
                n_fallback++;
                int k = 0;
                while (k < n_fb && !(fb[k].want == want && fb[k].dst == dst))
                    k++;
                if (k == n_fb && n_fb < (int)(sizeof fb / sizeof fb[0])) {
                    fb[k].want = want, fb[k].dst = dst, fb[k].n = 0;
                    fb[k].first = t->name, fb[k].cols = t->ne[0];
                    n_fb++;
                }
                if (k < n_fb) fb[k].n++;
            }
        }
        /* Requantizing (quantized -> another quantized type) adds both errors; a float
         * copy (f32, f16, bf16) is exact or nearly so. */
        if (log && !warned_requant && dst != src && sd_type_block_elems(src) > 1 &&
            sd_type_block_elems(dst) > 1) {
            fprintf(log,
                    "%s: note: requantizing %s -> %s adds the errors of both (quantize from "
                    "f32 or f16 for the best copy)\n",
                    in_path, sd_type_name(src), sd_type_name(dst));
            warned_requant = 1;
        }
        const int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3]; /* fits: nbytes was checked */
        size_t src_row, dst_row, nbytes;
        if (sd_type_row_bytes(src, t->ne[0], &src_row) != 0 ||
            sd_type_row_bytes(dst, t->ne[0], &dst_row) != 0 ||
            sd_mul_size(dst_row, (size_t)n_rows, &nbytes) != 0) {
            st = sd_errorf(err, SD_ERR_FORMAT, "%s: tensor '%s': size of the %s copy overflows",
                           in_path, t->name, sd_type_name(dst));
            goto out;
        }
        const void *data = t->data;
        if (src != dst) {
            bufs[i] = malloc(nbytes ? nbytes : 1);
            if (!bufs[i]) {
                st =
                    sd_errorf(err, SD_ERR_OOM, "%s: tensor '%s': out of memory", out_path, t->name);
                goto out;
            }
            data = bufs[i];
        }
        int64_t bad_r = 0, bad_c = 0;
        float bad_v = 0;
        const int cr = convert_rows(src, t->data, src_row, dst, src != dst ? bufs[i] : NULL,
                                    dst_row, t->ne[0], n_rows, &bad_r, &bad_c, &bad_v);
        if (cr < 0) {
            st = sd_errorf(err, SD_ERR_OOM, "%s: tensor '%s': out of memory", out_path, t->name);
            goto out;
        }
        if (cr > 0) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: tensor '%s': element [row %" PRId64 ", col %" PRId64
                           "] is %s: expected finite values (refusing to quantize a NaN or "
                           "infinity into an ordinary number)",
                           in_path, t->name, bad_r, bad_c,
                           isnan(bad_v) ? "nan" : (bad_v > 0 ? "inf" : "-inf"));
            goto out;
        }
        if ((st = sd_gguf_add_tensor(w, t->name, dst, t->n_dims, t->ne, data, nbytes, err)))
            goto out;
        in_bytes += t->nbytes;
        out_bytes += nbytes;
        n_by_type[dst]++;
        if (progress) progress(user, i + 1, nt, t->name);
    }
    if ((st = sd_gguf_writer_write(w, out_path, err))) goto out;
    for (int k = 0; log && k < n_fb; k++)
        fprintf(log,
                "%s: %d %s stored as %s instead of %s: row length not a multiple of %" PRId64
                " (%s%s, %" PRId64 " columns)\n",
                out_path, fb[k].n, fb[k].n == 1 ? "matrix" : "matrices", sd_type_name(fb[k].dst),
                sd_type_name(fb[k].want), sd_type_block_elems(fb[k].want),
                fb[k].n > 1 ? "first: " : "", fb[k].first, fb[k].cols);
    if (log) {
        fprintf(log, "%s: %" PRId64 " tensors, %.2f MiB -> %.2f MiB (%s:", out_path, nt,
                (double)in_bytes / (1024.0 * 1024.0), (double)out_bytes / (1024.0 * 1024.0),
                rc->name);
        for (uint32_t t = 0; t < SD_TYPE_COUNT; t++)
            if (n_by_type[t]) fprintf(log, " %s x%" PRId64, sd_type_name(t), n_by_type[t]);
        fprintf(log, "; %d matrices fell back)\n", n_fallback);
    }
out:
    if (bufs)
        for (int64_t i = 0; i < nt; i++)
            free(bufs[i]);
    free(bufs);
    sd_gguf_writer_free(w);
    sd_gguf_close(g);
    return st;
}

int sd_quantize_file(const char *in_path, const char *out_path, sd_type type, FILE *log,
                     sd_error *err) {
    sd_quant_recipe r;
    if (sd_quant_recipe_of_type(type, &r) != 0)
        return sd_errorf(err, SD_ERR_ARG, "quantize: type: expected one of %s, found type id %d",
                         sd_quant_recipe_names(), (int)type);
    return sd_quantize_file_recipe(in_path, out_path, &r, log, NULL, NULL, err);
}
