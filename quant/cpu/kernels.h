/*
 * quant/quant_kernels.h: PRIVATE to quant/ (and its white-box test tests/test_quant.c).
 * Not a part face: other parts use quant/sd_quant.h only.
 *
 * A kernel set is one implementation of the row kernels for every weight type. All
 * sets compute y[b * ldy + r] = dot(W[r, :], X[b, :]) for r in [r0, r1), b in [0, n_tok)
 * with the argument conventions of sd_matmul_rows (quant/sd_quant.h):
 *   w   : weight rows of w_row_bytes bytes each (row r starts at w + r * w_row_bytes)
 *   xq  : activations prepared by sd_kernel_prepare_rows with THIS set, this wt and
 *         this n_tok (sd_quant.h: part A = n_tok rows of sd_vec_dot_type(wt), row
 *         stride sd_type_row_bytes(sd_vec_dot_type(wt), n_cols); part B, the set's
 *         packed form, at sd_act_pack_offset(n_tok, n_cols), if the set has one).
 *         Sets without a packed form read part A only, so they also accept what any
 *         other set prepared.
 * Every set keeps the batch-invariance contract: the value stored for (r, b) is a fixed
 * function of weight row r and activation row b (fixed accumulation order), whatever
 * n_tok, r0, r1 are.
 */
#ifndef SD_QUANT_KERNELS_H
#define SD_QUANT_KERNELS_H

#include "quant/sd_quant.h"

typedef void (*sd_rows_kernel)(const void *w, size_t w_row_bytes, int64_t n_cols, const void *xq,
                               int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

typedef struct sd_kernel_set {
    const char *name; /* "scalar", "avx2", "avx512" */
    sd_rows_kernel f32, f16, bf16, q8_0, q4_0;
    /* Q8_0 quantization of one activation row x[n] (n a multiple of 32) to y, bytes
     * identical to sd_quantize_row(SD_TYPE_Q8_0, ...); NULL: use that reference. */
    void (*quant_q8_0)(const float *x, void *y, int64_t n);
    /* Part B: a packed form of the Q8_0 activations that this set's Q8_0 / Q4_0 kernels
     * read instead of part A; NULL (both) for none. pack_tok_bytes: bytes per token for
     * rows of n_cols (a multiple of 32). pack_row: writes the packed form of row b
     * (xr: its Q8_0 blocks) of a batch of n_tok rows, for weights of type wt, into the
     * part B that starts at pb. */
    size_t (*pack_tok_bytes)(int64_t n_cols);
    void (*pack_row)(sd_type wt, const sd_block_q8_0 *xr, int64_t n_cols, int64_t n_tok, int64_t b,
                     void *pb);
} sd_kernel_set;

/* Offset of part B: part A (n_tok Q8_0 rows of n_cols) rounded up to 64 bytes. Only
 * for sizes sd_kernel_act_bytes accepted (no overflow check here). */
static inline size_t sd_act_pack_offset(int64_t n_tok, int64_t n_cols) {
    return ((size_t)n_tok * (size_t)(n_cols / SD_QK8_0) * sizeof(sd_block_q8_0) + 63u) &
           ~(size_t)63u;
}

/* Scalar reference (matmul_ref.c): always available. */
extern const sd_kernel_set sd_kernels_scalar;
#if defined(__x86_64__)
/* AVX2+FMA+F16C (matmul_avx2.c). Call only if sd_kernel_set_by_name("avx2") != NULL. */
extern const sd_kernel_set sd_kernels_avx2;
/* AVX-512 F/BW/VL/VNNI (+FMA/F16C) (matmul_avx512.c). */
extern const sd_kernel_set sd_kernels_avx512;
#endif

/* The set called `name` if it exists and this CPU can run it, else NULL. */
const sd_kernel_set *sd_kernel_set_by_name(const char *name);
/* The set sd_matmul_rows uses: the best this CPU supports, lowered (never raised) by
 * the environment variable SD_KERNELS=scalar|avx2|avx512, read once (pthread_once). */
const sd_kernel_set *sd_kernel_set_active(void);
/* sd_activations_bytes / sd_quantize_activations_rows for kernel set ks (the public
 * ones use sd_kernel_set_active()). */
int sd_kernel_act_bytes(const sd_kernel_set *ks, sd_type wt, int64_t n_tok, int64_t n_cols,
                        size_t *out);
void sd_kernel_prepare_rows(const sd_kernel_set *ks, sd_type wt, const float *x, int64_t n_tok,
                            int64_t n_cols, int64_t b0, int64_t b1, void *out);
/* The kernel of set ks for weight type wt, or NULL for an unsupported type. */
sd_rows_kernel sd_kernel_for_type(const sd_kernel_set *ks, sd_type wt);

#endif /* SD_QUANT_KERNELS_H */
