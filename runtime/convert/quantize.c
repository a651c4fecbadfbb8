/*
 * GGUF -> quantized GGUF (`specdec quantize IN OUT TYPE`), in the manner of llama.cpp's
 * llama-quantize for the plain types: metadata copied, general.file_type set to the
 * llama_ftype of the target (llama.h: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2,
 * MOSTLY_Q8_0 7, MOSTLY_BF16 32), 2-D "*.weight" matrices (token_embd included, as
 * llama.cpp does) converted to the target type, everything else (1-D norms) stored F32.
 * A matrix whose row length ne[0] is not a multiple of the target's block size (e.g.
 * stories260K's ffn_down, ne[0] = hidden = 172) is stored F16 instead, with a note.
 *
 * Conversion is row by row: source row -> float (sd_dequantize_row) -> target row
 * (sd_quantize_row); a tensor already of the target type is copied unchanged. Rows are
 * independent, so they are spread over OpenMP threads; the result does not depend on
 * the thread count.
 */
#include "runtime/convert/sd_convert.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf/sd_gguf.h"

/* llama.cpp's llama_ftype for a file whose matrices are of type t. */
static uint32_t ftype_of(sd_type t) {
    switch (t) {
    case SD_TYPE_F32:
        return 0;
    case SD_TYPE_F16:
        return 1;
    case SD_TYPE_Q4_0:
        return 2;
    case SD_TYPE_Q8_0:
        return 7;
    case SD_TYPE_BF16:
        return 32;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Convert n_rows rows of ne0 elements from (st, src) to (dt, dst). */
static int convert_rows(sd_type st, const uint8_t *src, size_t src_row, sd_type dt, uint8_t *dst,
                        size_t dst_row, int64_t ne0, int64_t n_rows) {
    int failed = 0;
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
            sd_quantize_row(dt, buf, dst + (size_t)r * dst_row, ne0);
        }
        free(buf);
    }
    return failed ? -1 : 0;
}

int sd_quantize_file(const char *in_path, const char *out_path, sd_type type, FILE *log,
                     sd_error *err) {
    return sd_quantize_file_progress(in_path, out_path, type, log, NULL, NULL, err);
}

int sd_quantize_file_progress(const char *in_path, const char *out_path, sd_type type, FILE *log,
                              sd_convert_progress progress, void *user, sd_error *err) {
    if (!sd_type_supported((uint32_t)type))
        return sd_errorf(err, SD_ERR_ARG,
                         "quantize: type: expected one of f32, f16, bf16, q8_0, "
                         "q4_0, found type id %d",
                         (int)type);
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
    if (!w || !bufs) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", out_path);
        goto out;
    }
    if (sd_gguf_copy_kv(w, g) || sd_gguf_set_u32(w, "general.file_type", ftype_of(type))) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: metadata: out of memory", out_path);
        goto out;
    }
    for (int64_t i = 0; i < nt; i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        const sd_type src = (sd_type)t->type;
        sd_type dst = SD_TYPE_F32;
        if (t->n_dims == 2 && ends_with(t->name, ".weight")) {
            dst = type;
            if (t->ne[0] % sd_type_block_elems(type) != 0) {
                dst = SD_TYPE_F16;
                n_fallback++;
                if (log)
                    fprintf(log,
                            "%s: row length %" PRId64 " is not a multiple of %" PRId64
                            "; stored as f16\n",
                            t->name, t->ne[0], sd_type_block_elems(type));
            }
        }
        if (log && !warned_requant && dst != src && (src == SD_TYPE_Q8_0 || src == SD_TYPE_Q4_0)) {
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
            if (!bufs[i] ||
                convert_rows(src, t->data, src_row, dst, bufs[i], dst_row, t->ne[0], n_rows) != 0) {
                st =
                    sd_errorf(err, SD_ERR_OOM, "%s: tensor '%s': out of memory", out_path, t->name);
                goto out;
            }
            data = bufs[i];
        }
        if ((st = sd_gguf_add_tensor(w, t->name, dst, t->n_dims, t->ne, data, nbytes, err)))
            goto out;
        in_bytes += t->nbytes;
        out_bytes += nbytes;
        if (progress) progress(user, i + 1, nt, t->name);
    }
    if ((st = sd_gguf_writer_write(w, out_path, err))) goto out;
    if (log)
        fprintf(log,
                "%s: %" PRId64
                " tensors, %.2f MiB -> %.2f MiB (%s; %d matrices fell back to f16)\n",
                out_path, nt, (double)in_bytes / (1024.0 * 1024.0),
                (double)out_bytes / (1024.0 * 1024.0), sd_type_name(type), n_fallback);
out:
    if (bufs)
        for (int64_t i = 0; i < nt; i++)
            free(bufs[i]);
    free(bufs);
    sd_gguf_writer_free(w);
    sd_gguf_close(g);
    return st;
}
