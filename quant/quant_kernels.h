/*
 * quant/quant_kernels.h: PRIVATE to quant/ (and its white-box test tests/test_quant.c).
 * Not a part face: other parts use quant/sd_quant.h only.
 *
 * A kernel set is one implementation of the row kernels for every weight type. All
 * sets compute y[b * ldy + r] = dot(W[r, :], X[b, :]) for r in [r0, r1), b in [0, n_tok)
 * with the argument conventions of sd_matmul_rows (quant/sd_quant.h):
 *   w   : weight rows of w_row_bytes bytes each (row r starts at w + r * w_row_bytes)
 *   xq  : n_tok activation rows of type sd_vec_dot_type(wt), packed (row stride =
 *         sd_type_row_bytes(sd_vec_dot_type(wt), n_cols))
 * Every set keeps the batch-invariance contract: the value stored for (r, b) is a fixed
 * function of weight row r and activation row b (fixed accumulation order), whatever
 * n_tok, r0, r1 are.
 */
#ifndef SD_QUANT_KERNELS_H
#define SD_QUANT_KERNELS_H

#include "quant/sd_quant.h"

typedef void (*sd_rows_kernel)(const void *w, size_t w_row_bytes, int64_t n_cols,
                               const void *xq, int64_t n_tok, float *y, int64_t ldy,
                               int64_t r0, int64_t r1);

typedef struct sd_kernel_set {
    const char *name; /* "scalar", "avx2", "avx512" */
    sd_rows_kernel f32, f16, bf16, q8_0, q4_0;
    /* Q8_0 quantization of one activation row x[n] (n a multiple of 32) to y, bytes
     * identical to sd_quantize_row(SD_TYPE_Q8_0, ...); NULL: use that reference. */
    void (*quant_q8_0)(const float *x, void *y, int64_t n);
} sd_kernel_set;

/* Scalar reference (matmul_ref.c): always available. */
extern const sd_kernel_set sd_kernels_scalar;
#if defined(__x86_64__)
/* AVX2+FMA+F16C (matmul_avx2.c). Call only if sd_kernel_set_by_name("avx2") != NULL. */
extern const sd_kernel_set sd_kernels_avx2;
/* AVX-512 F/BW/VL/VNNI (+FMA/F16C) (matmul_avx512.c). */
extern const sd_kernel_set sd_kernels_avx512;
/* Test hook: "avx512" with its Q8_0/Q4_0 kernels forced onto the path they take when
 * scratch memory cannot be allocated (activations packed per octet on the stack). Must
 * give the same bits as sd_kernels_avx512. Not part of the dispatch. */
extern const sd_kernel_set sd_kernels_avx512_noscratch;
#endif

/* The set called `name` if it exists and this CPU can run it, else NULL. */
const sd_kernel_set *sd_kernel_set_by_name(const char *name);
/* The set sd_matmul_rows uses: the best this CPU supports, lowered (never raised) by
 * the environment variable SD_KERNELS=scalar|avx2|avx512, read once (pthread_once). */
const sd_kernel_set *sd_kernel_set_active(void);
/* The kernel of set ks for weight type wt, or NULL for an unsupported type. */
sd_rows_kernel sd_kernel_for_type(const sd_kernel_set *ks, sd_type wt);

#endif /* SD_QUANT_KERNELS_H */
