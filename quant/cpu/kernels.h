/*
 * quant/cpu/kernels.h: PRIVATE to quant/ (and its white-box tests tests/test_quant*.c).
 * Not a part face: other parts use quant/sd_quant.h only.
 *
 * A kernel set is one instruction-set level of the matmul kernels, as tables indexed by
 * type id. Two kinds of kernel per weight type:
 *   rows  : weights in GGUF rows, y[b * ldy + r] = dot(W[r, :], X[b, :]) for r in [r0, r1),
 *           b in [0, n_tok), arguments as sd_matmul_rows (quant/sd_quant.h);
 *   packed: weights in the packed layout (quant/pack_impl.h), the same dot products for
 *           the rows of groups [g0, g1) (sd_matmul_packed).
 * Both read activations prepared by sd_kernel_prepare_rows with this set, this wt and
 * this n_tok: part A, n_tok rows of sd_vec_dot_type(wt) (row stride
 * sd_type_row_bytes(sd_vec_dot_type(wt), n_cols)), the reference layout, which rows
 * kernels read; and where the set has a packed kernel for wt, part B (pack_impl.h,
 * sd_pack_act_row) at sd_act_partb_offset. Row kernels read part A only, so they
 * accept what any set prepared.
 * A NULL entry means "no kernel of that kind here": the set `lower` (the next lower
 * level, which the CPU can run whenever it runs this one) is asked, down to the scalar
 * set, which has a rows kernel for every weight type and no packed kernels.
 *
 * Every kernel computes, for each (r, b), exactly the arithmetic of the scalar rows
 * kernel (ref.c: the specification), in the same order: integer block dot products
 * (exact in any order) and a float part fixed per block or super-block in block order,
 * vectorized across rows (lanes = rows), never across blocks. So every set gives the
 * same bits as the scalar reference for every type, n_tok, row range and thread count.
 */
#ifndef SD_QUANT_KERNELS_H
#define SD_QUANT_KERNELS_H

#include "quant/sd_quant.h"

/* Software prefetch (into L2) of the packed weight bytes SD_PF_BYTES ahead of the block
 * at mp, one per 64-byte line of its size, so the stream runs ahead of the hardware
 * prefetcher's reach (1.5B Q4_K_M decode, 1 thread, Zen 5: 68.6 -> 41.7 ms per step; 2 KiB
 * ahead is too short, 8 KiB no better). Past a group it runs into the next one (groups
 * are contiguous), past the matrix harmlessly (prefetches never fault). */
#ifndef SD_PF_BYTES
#define SD_PF_BYTES 4096
#endif
/* The 256-bit sets (x256.h) spend more time per block than the AVX-512 one, so their
 * stream needs a longer lead: 1 token, 4096 x 4096, weights from memory, 1 thread, Zen 5
 * (scripts/bench_quant.c stream mode, 3 rounds under load): 8 KiB ahead streams 7-20%
 * faster than 4 KiB for Q4_K, Q5_0, Q6_K and Q8_0 under both avx2 and avxvnni; 12 and
 * 16 KiB no better than 8. The K-quant and 32-element tiles of x256.h lead further
 * (SD_PF_BYTES_K256, SD_PF_BYTES_32); this lead stays with the Q2_K / Q3_K / Q6_K one-token
 * tile. */
#ifndef SD_PF_BYTES_256
#define SD_PF_BYTES_256 8192
#endif
static inline void sd_prefetch_at(const uint8_t *mp, size_t bytes, size_t ahead) {
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(mp + ahead + o, 0, 2); /* read, L2: prefetcht1 */
}
static inline void sd_prefetch_ahead(const uint8_t *mp, size_t bytes) {
    sd_prefetch_at(mp, bytes, SD_PF_BYTES);
}
/* Part p of n of sd_prefetch_at(mp, bytes, ahead): lines [L p / n, L (p + 1) / n) of its
 * L = bytes / 64 lines (bytes a multiple of 64). Called for p = 0 .. n - 1 from a loop the
 * compiler unrolls (p, n and bytes constants), it spreads a block's prefetches through the
 * block's work as straight-line instructions: no loop counter, where sd_prefetch_at's loop
 * costs an add and a compare-and-branch more per line (3 instructions a line: 105 of the
 * ~410 of the AVX-512 Q4_K one-token super-block). Whether it streams faster depends on
 * the tile: measure from memory before using it (docs/performance.md, tenth round). */
static inline __attribute__((always_inline)) void sd_prefetch_part(const uint8_t *mp, size_t bytes,
                                                                   size_t ahead, int p, int n) {
    const size_t lines = bytes / 64;
    const size_t l0 = lines * (size_t)p / (size_t)n, l1 = lines * (size_t)(p + 1) / (size_t)n;
    _Pragma("GCC unroll 16") for (size_t l = l0; l < l1; l++)
        __builtin_prefetch(mp + ahead + 64 * l, 0, 2); /* read, L2: prefetcht1 */
}

typedef void (*sd_rows_kernel)(const void *w, size_t w_row_bytes, int64_t n_cols, const void *xq,
                               int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* A packed kernel (quant/pack_impl.h layout): y[b * ldy + r] for the rows r < rows of
 * groups [g0, g1) of the packed matrix wp (n_cols columns), b in [0, n_tok); xq: the
 * activations prepared for this n_tok (part A, then part B at sd_act_partb_offset). */
typedef void (*sd_packed_kernel)(const void *wp, int64_t rows, int64_t n_cols, const void *xq,
                                 int64_t n_tok, float *y, int64_t ldy, int64_t g0, int64_t g1);

/* One weight type's kernels in one set. */
typedef struct sd_type_kernel {
    sd_rows_kernel rows;     /* GGUF row layout; NULL: use the lower set's */
    sd_packed_kernel packed; /* packed layout; NULL: this set has none for the type */
} sd_type_kernel;

/* Quantization of one activation row x[n] to a row of an activation type, bytes
 * identical to sd_quantize_row (the reference) of that type. */
typedef void (*sd_act_quant)(const float *x, void *y, int64_t n);

/* The set's innermost product sequence (what its packed kernels run per 4 activation bytes:
 * the broadcast activation load and the int8 multiply-adds, with their int16 / int32
 * sums; no unpacking, no float part) on operands in registers and L1, iters times, with
 * enough independent chains to reach the instructions' throughput. Returns the int8
 * multiply-adds done. sd_quant_kernels_peak_macs times it: the compute roof. */
typedef double (*sd_peak_loop)(int64_t iters);

typedef struct sd_kernel_set {
    const char *name;                  /* "scalar", "avx2", "avxvnni", "avx512", "amx" */
    const struct sd_kernel_set *lower; /* fallback for NULL entries; NULL for "scalar" */
    sd_type_kernel k[SD_TYPE_COUNT];   /* by weight type id */
    sd_act_quant quant[SD_TYPE_COUNT]; /* by activation type id; NULL: lower / reference */
    sd_peak_loop peak;                 /* NULL: the lower set's (scalar: none) */
} sd_kernel_set;

/* Bytes of part A (n_tok rows of sd_vec_dot_type(wt), n_cols) rounded up to 64: where
 * part B starts. Only for sizes sd_kernel_act_bytes accepted (no overflow check here). */
static inline size_t sd_act_partb_offset(sd_type wt, int64_t n_tok, int64_t n_cols) {
    size_t rb = 0;
    (void)sd_type_row_bytes(sd_vec_dot_type(wt), n_cols, &rb);
    return ((size_t)n_tok * rb + 63u) & ~(size_t)63u;
}

/* Scalar reference (ref.c): always available, complete. */
extern const sd_kernel_set sd_kernels_scalar;
#if defined(__x86_64__)
/* AVX2+FMA+F16C (avx2.c). Call only if sd_kernel_set_by_name("avx2") != NULL. */
extern const sd_kernel_set sd_kernels_avx2;
/* AVX-VNNI (+AVX2/FMA/F16C) (avxvnni.c); lower = avx2. */
extern const sd_kernel_set sd_kernels_avxvnni;
/* AVX-512 F/BW/VL/VNNI (+AVX2/FMA/F16C) (avx512.c); lower = avx2. */
extern const sd_kernel_set sd_kernels_avx512;
/* AMX-INT8 packed kernels (amx.c); lower = avx512. Off by default: only SD_KERNELS=amx
 * selects it, where the CPU and the OS allow AMX. */
extern const sd_kernel_set sd_kernels_amx;
#endif

/* The set called `name` if it exists and this CPU can run it, else NULL (dispatch.c). */
const sd_kernel_set *sd_kernel_set_by_name(const char *name);
/* The set sd_matmul_rows uses: the best this CPU supports, lowered (never raised) by
 * the environment variable SD_KERNELS=scalar|avx2|avxvnni|avx512, read once (pthread_once);
 * SD_KERNELS=amx selects the AMX set where it runs (else the default). */
const sd_kernel_set *sd_kernel_set_active(void);
/* The set (ks or one below it) whose kernel runs weights of type wt; NULL if wt is not
 * a weight type. */
const sd_kernel_set *sd_kernel_owner(const sd_kernel_set *ks, sd_type wt);
/* The kernel that set ks runs for weight type wt (its own or a lower set's), or NULL
 * for a type that is not a weight type. */
sd_rows_kernel sd_kernel_for_type(const sd_kernel_set *ks, sd_type wt);
/* The packed kernel set ks (or a lower set) has for wt, or NULL (none: the weights stay
 * in GGUF rows). */
sd_packed_kernel sd_kernel_packed_for_type(const sd_kernel_set *ks, sd_type wt);
/* sd_activations_bytes / sd_quantize_activations_rows for kernel set ks (the public
 * ones use sd_kernel_set_active()). */
int sd_kernel_act_bytes(const sd_kernel_set *ks, sd_type wt, int64_t n_tok, int64_t n_cols,
                        size_t *out);
void sd_kernel_prepare_rows(const sd_kernel_set *ks, sd_type wt, const float *x, int64_t n_tok,
                            int64_t n_cols, int64_t b0, int64_t b1, void *out);

#endif /* SD_QUANT_KERNELS_H */
