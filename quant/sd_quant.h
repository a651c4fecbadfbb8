/*
 * quant/: tensor element types, quantized block layouts and the dot-product / matmul
 * kernels that read them.
 *
 * Type ids and block layouts are those of ggml (llama.cpp's ggml-common.h, GGUF spec
 * "ggml_type"), so GGUF files written or read here are interchangeable with llama.cpp:
 *   F32  (0)  4 bytes per element
 *   F16  (1)  IEEE binary16
 *   Q4_0 (2)  blocks of 32: fp16 scale d, 16 bytes of nibbles; x = d * (q - 8);
 *             element j in low nibble of qs[j], element j+16 in high nibble of qs[j]
 *   Q8_0 (8)  blocks of 32: fp16 scale d, 32 int8; x = d * q
 *   BF16 (30) bfloat16 (upper half of an IEEE binary32)
 * Reference quantizers (the *_ref behaviour, the specification) follow ggml's
 * quantize_row_q8_0_ref / quantize_row_q4_0_ref: d = amax/127 (Q8_0); d = max/-8 with
 * the signed value of largest magnitude (Q4_0); an all-zero block gets d = 0 and q = 0.
 *
 * Kernels: a scalar reference is the specification; SIMD variants (AVX2+FMA+F16C,
 * AVX-512) are picked once at run time from CPUID. Results of a kernel depend only on
 * its inputs (one weight row, one activation row): never on the batch size, the
 * thread count or the row range, so a batched pass is bit-identical to single passes.
 */
#ifndef SD_QUANT_H
#define SD_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sd_type {
    SD_TYPE_F32 = 0,
    SD_TYPE_F16 = 1,
    SD_TYPE_Q4_0 = 2,
    SD_TYPE_Q8_0 = 8,
    SD_TYPE_BF16 = 30,
} sd_type;

#define SD_QK4_0 32
#define SD_QK8_0 32

typedef struct sd_block_q4_0 {
    uint16_t d;               /* fp16 scale */
    uint8_t qs[SD_QK4_0 / 2]; /* nibbles */
} sd_block_q4_0;

typedef struct sd_block_q8_0 {
    uint16_t d;          /* fp16 scale */
    int8_t qs[SD_QK8_0]; /* quants */
} sd_block_q8_0;

_Static_assert(sizeof(sd_block_q4_0) == 18, "Q4_0 block must be 18 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q8_0) == 34, "Q8_0 block must be 34 bytes (ggml layout)");

/* 1 if t (a raw ggml type id read from a file) is one of the types above, else 0. */
int sd_type_supported(uint32_t t);
/* "f32", "f16", "q4_0", "q8_0", "bf16"; "unknown" otherwise. */
const char *sd_type_name(uint32_t t);
/* Parse a name as above (case-insensitive); returns 0 and sets *out, or -1. */
int sd_type_from_name(const char *name, sd_type *out);
/* Elements per block (1 for float types, 32 for Q4_0/Q8_0). 0 if unsupported. */
int64_t sd_type_block_elems(sd_type t);
/* Bytes per block (4, 2, 18, 34, 2). 0 if unsupported. */
size_t sd_type_block_bytes(sd_type t);
/* Bytes of a row of n elements; -1 if n is not a multiple of the block size, n < 0,
 * or the size overflows; else 0 and *out set. */
int sd_type_row_bytes(sd_type t, int64_t n, size_t *out);

/* Scalar conversions (IEEE round-to-nearest-even for fp32->fp16 / fp32->bf16). */
float sd_fp16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_fp16(float f);
float sd_bf16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_bf16(float f);

/* Convert n floats x[n] to a row of type t at y (n must be a multiple of the block
 * size of t). Reference (scalar) implementation. */
void sd_quantize_row(sd_type t, const float *x, void *y, int64_t n);
/* Inverse: a row of type t with n elements to floats y[n]. */
void sd_dequantize_row(sd_type t, const void *x, float *y, int64_t n);

/*
 * The type activations are converted to before a dot product with weights of type t:
 * Q8_0 for Q4_0 and Q8_0 weights (integer dot products, as ggml's vec_dot_type),
 * F32 for F32/F16/BF16 weights.
 */
sd_type sd_vec_dot_type(sd_type t);

/*
 * Prepared activations: what sd_matmul_rows reads. The caller allocates them (the CPU
 * backend once, at init, sized with sd_activations_bytes for its largest batch and row;
 * the matmul path itself never allocates). Layout for weights of type wt, a batch of
 * n_tok rows of n_cols:
 *   F32-dot types (F32/F16/BF16 weights): n_tok rows of n_cols floats (a copy of x).
 *   Q8_0-dot types (Q8_0/Q4_0 weights):
 *     part A, at offset 0: n_tok Q8_0 rows of n_cols (row stride
 *       sd_type_row_bytes(SD_TYPE_Q8_0, n_cols)), bytes identical to
 *       sd_quantize_row(SD_TYPE_Q8_0, ...) of each row: the reference layout, all that
 *       the scalar and AVX2 kernels (and sd_matmul_rows_ref) read;
 *     part B (only when the kernel set in use is "avx512"): at the next multiple of 64
 *       bytes after part A, the same values rearranged for the AVX-512 kernels (octets
 *       of 8 blocks, grouped per up to 16 tokens of THIS batch, with per-block scales as
 *       floats and the weight-type-dependent integer correction). Its arrangement
 *       depends on n_tok, so a prepared batch is only valid for a call with the same
 *       n_tok (not for a slice of its rows) and the same wt as it was prepared for.
 * Every byte of row b (in either part) depends only on row b of x and on n_tok, wt.
 */

/* Bytes of prepared activations for n_tok rows of n_cols, weights of type wt, in the
 * layout of the kernel set in use. Returns -1 (and leaves *out) for an unsupported wt,
 * n_tok < 0, n_cols < 0, n_cols not a multiple of 32 for Q8_0-dot types, or overflow;
 * else 0. Monotone in n_tok and n_cols (a buffer sized for the largest serves all). */
int sd_activations_bytes(sd_type wt, int64_t n_tok, int64_t n_cols, size_t *out);

/*
 * Prepare activations: x[n_tok, n_cols] float -> out, the layout above, for weights of
 * type wt. out must hold sd_activations_bytes(wt, n_tok, n_cols) bytes; 64-byte
 * alignment is recommended (the AVX-512 part is read in 64-byte vectors). Allocates
 * nothing.
 */
void sd_quantize_activations(sd_type wt, const float *x, int64_t n_tok, int64_t n_cols, void *out);

/* The part of sd_quantize_activations that belongs to rows [b0, b1) of the same batch
 * (x is still the whole x[n_tok, n_cols]; only its rows b0..b1-1 are read): calls on
 * disjoint row ranges covering [0, n_tok), e.g. one per thread, write exactly what one
 * sd_quantize_activations call writes, and may run concurrently. */
void sd_quantize_activations_rows(sd_type wt, const float *x, int64_t n_tok, int64_t n_cols,
                                  int64_t b0, int64_t b1, void *out);

/*
 * y[b, r] = dot(W[r, :], X[b, :]) for r in [r0, r1) and b in [0, n_tok).
 *   w      : weight matrix, n_rows rows of type wt, each w_row_bytes bytes, row-major
 *   xq     : activations prepared by sd_quantize_activations for this wt and exactly
 *            this n_tok (read only; never written, so threads may share it)
 *   y      : float [n_tok, ldy]; row b, column r is y[b * ldy + r]
 * Each weight row is read once per call for all n_tok activation rows. Uses the
 * fastest kernel for this CPU (chosen once). Allocates nothing. Single-threaded:
 * callers split [r0, r1) across threads.
 */
void sd_matmul_rows(sd_type wt, const void *w, size_t w_row_bytes, int64_t n_cols, const void *xq,
                    int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* Same, forced to the scalar reference kernels (the test oracle). xq: either the
 * reference layout (n_tok rows of sd_vec_dot_type(wt), row stride
 * sd_type_row_bytes(sd_vec_dot_type(wt), n_cols), e.g. made by sd_quantize_row) or
 * anything sd_quantize_activations made (it reads part A only). */
void sd_matmul_rows_ref(sd_type wt, const void *w, size_t w_row_bytes, int64_t n_cols,
                        const void *xq, int64_t n_tok, float *y, int64_t ldy, int64_t r0,
                        int64_t r1);

/* Name of the kernel set in use for this CPU: "scalar", "avx2", "avx512". */
const char *sd_quant_kernels_name(void);

#ifdef __cplusplus
}
#endif
#endif /* SD_QUANT_H */
