/*
 * quant/cpu/kernels.h: PRIVATE to quant/ (and its white-box tests tests/test_quant*.c).
 * Not a part face: other parts use quant/sd_quant.h only.
 *
 * A kernel set is one instruction-set level of the matmul row kernels, as tables
 * indexed by type id. All kernels compute y[b * ldy + r] = dot(W[r, :], X[b, :]) for
 * r in [r0, r1), b in [0, n_tok) with the argument conventions of sd_matmul_rows
 * (quant/sd_quant.h):
 *   w   : weight rows of w_row_bytes bytes each (row r starts at w + r * w_row_bytes)
 *   xq  : activations prepared by sd_kernel_prepare_rows with THIS set, this wt and
 *         this n_tok (sd_quant.h: part A = n_tok rows of sd_vec_dot_type(wt), row
 *         stride sd_type_row_bytes(sd_vec_dot_type(wt), n_cols); part B, the packed
 *         form of the kernel that runs wt, if it has one). Kernels without a packed
 *         form read part A only, so they also accept what any other set prepared.
 * A NULL entry k[t].rows means "this set has no kernel of its own for type t": the set
 * `lower` (the next lower level, which the CPU can run whenever it runs this one) is
 * asked, down to the scalar set, which has every weight type. So a type can have only
 * scalar + AVX2 kernels, and adding a type means one traits row plus kernels.
 * Every set keeps the batch-invariance contract: the value stored for (r, b) is a fixed
 * function of weight row r and activation row b (fixed accumulation order), whatever
 * n_tok, r0, r1 are.
 */
#ifndef SD_QUANT_KERNELS_H
#define SD_QUANT_KERNELS_H

#include "quant/sd_quant.h"

typedef void (*sd_rows_kernel)(const void *w, size_t w_row_bytes, int64_t n_cols, const void *xq,
                               int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* A packed activation form (part B) of one kernel. tok_bytes: bytes per token for rows
 * of n_cols. row: writes the packed form of row b (xr: its part-A row) of a batch of
 * n_tok rows, for weights of type wt, into the part B that starts at pb. */
typedef struct sd_act_pack {
    size_t (*tok_bytes)(int64_t n_cols);
    void (*row)(sd_type wt, const void *xr, int64_t n_cols, int64_t n_tok, int64_t b, void *pb);
} sd_act_pack;

/* One weight type's kernel in one set. */
typedef struct sd_type_kernel {
    sd_rows_kernel rows;     /* NULL: use the lower set's */
    const sd_act_pack *pack; /* NULL: the kernel reads part A only */
} sd_type_kernel;

/* Quantization of one activation row x[n] to a row of an activation type, bytes
 * identical to sd_quantize_row (the reference) of that type. */
typedef void (*sd_act_quant)(const float *x, void *y, int64_t n);

typedef struct sd_kernel_set {
    const char *name;                  /* "scalar", "avx2", "avx512" */
    const struct sd_kernel_set *lower; /* fallback for NULL entries; NULL for "scalar" */
    sd_type_kernel k[SD_TYPE_COUNT];   /* by weight type id */
    sd_act_quant quant[SD_TYPE_COUNT]; /* by activation type id; NULL: lower / reference */
} sd_kernel_set;

/* Offset of part B for Q8_0-dot types: part A (n_tok Q8_0 rows of n_cols) rounded up to
 * 64 bytes. Only for sizes sd_kernel_act_bytes accepted (no overflow check here). */
static inline size_t sd_act_pack_offset(int64_t n_tok, int64_t n_cols) {
    return ((size_t)n_tok * (size_t)(n_cols / SD_QK8_0) * sizeof(sd_block_q8_0) + 63u) &
           ~(size_t)63u;
}

/* Scalar reference (ref.c): always available, complete. */
extern const sd_kernel_set sd_kernels_scalar;
#if defined(__x86_64__)
/* AVX2+FMA+F16C (avx2.c). Call only if sd_kernel_set_by_name("avx2") != NULL. */
extern const sd_kernel_set sd_kernels_avx2;
/* AVX-512 F/BW/VL/VNNI (+AVX2/FMA/F16C) (avx512.c); lower = avx2. */
extern const sd_kernel_set sd_kernels_avx512;
#endif

/* The set called `name` if it exists and this CPU can run it, else NULL (dispatch.c). */
const sd_kernel_set *sd_kernel_set_by_name(const char *name);
/* The set sd_matmul_rows uses: the best this CPU supports, lowered (never raised) by
 * the environment variable SD_KERNELS=scalar|avx2|avx512, read once (pthread_once). */
const sd_kernel_set *sd_kernel_set_active(void);
/* The set (ks or one below it) whose kernel runs weights of type wt; NULL if wt is not
 * a weight type. */
const sd_kernel_set *sd_kernel_owner(const sd_kernel_set *ks, sd_type wt);
/* The kernel that set ks runs for weight type wt (its own or a lower set's), or NULL
 * for a type that is not a weight type. */
sd_rows_kernel sd_kernel_for_type(const sd_kernel_set *ks, sd_type wt);
/* The packed form that kernel reads, or NULL. */
const sd_act_pack *sd_kernel_pack_for_type(const sd_kernel_set *ks, sd_type wt);
/* sd_activations_bytes / sd_quantize_activations_rows for kernel set ks (the public
 * ones use sd_kernel_set_active()). */
int sd_kernel_act_bytes(const sd_kernel_set *ks, sd_type wt, int64_t n_tok, int64_t n_cols,
                        size_t *out);
void sd_kernel_prepare_rows(const sd_kernel_set *ks, sd_type wt, const float *x, int64_t n_tok,
                            int64_t n_cols, int64_t b0, int64_t b1, void *out);

#endif /* SD_QUANT_KERNELS_H */
