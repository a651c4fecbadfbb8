/*
 * quant/: tensor element types, quantized block layouts, reference quantizers and
 * dequantizers, and the dot-product / matmul kernels that read them.
 *
 * Owns: the element-type traits table (one row per type id: name, block size and bytes,
 * alignment, the reference to_float / from_float, the activation type of its matmul)
 * and the CPU kernel sets (quant/cpu/: scalar oracle, AVX2, AVX-512). May include:
 * runtime/base/sd_base.h only.
 *
 * Type ids and block layouts are those of ggml (llama.cpp's ggml-common.h, GGUF spec
 * "ggml_type"), so GGUF files written or read here are interchangeable with llama.cpp.
 * Element j of a row; blocks of QK elements; "d", "m", "dmin" are fp16 unless noted:
 *   F32  (0), F16 (1), BF16 (30): one value per element.
 *   Q4_0 (2)  32: d, qs[16]: x = d * (q - 8); q of element j < 16 is the low nibble of
 *             qs[j], of element j + 16 the high nibble of qs[j] (the "split" order).
 *   Q4_1 (3)  32: d, m, qs[16]: x = d * q + m; nibbles as Q4_0.
 *   Q5_0 (6)  32: d, qh (uint32 LE), qs[16]: x = d * (q - 16), q = nibble | bit j of qh << 4.
 *   Q5_1 (7)  32: d, m, qh, qs[16]: x = d * q + m; q as Q5_0.
 *   Q8_0 (8)  32: d, int8 qs[32]: x = d * q.
 *   K-quants, super-blocks of 256 (ggml's QK_K):
 *   Q2_K (10) scales[16] (low nibble: scale, high nibble: min, per 16 elements), qs[64],
 *             d, dmin: x = d * sc * q - dmin * mn; q (0..3) of element 128h + 32k + l is
 *             bits 2k..2k+1 of qs[32h + l].
 *   Q3_K (11) hmask[32], qs[64], scales[12], d: x = d * (sc_g - 32) * (q - 4), g =
 *             element / 16; q = 2 low bits as Q2_K | bit k of hmask[l] << 2 for element
 *             32k + l; sc_g (6 bits): low 4 bits in scales[g] (g < 8, low nibble) or
 *             scales[g - 8] (high nibble), high 2 bits at bit 2 (g / 4) of scales[8 + g % 4].
 *   Q4_K (12) d, dmin, scales[12] (8 6-bit scales sc_s and mins m_s: for s < 4 the low 6
 *             bits of scales[s] and scales[s + 4]; for s >= 4 the nibbles of scales[s + 4]
 *             with the top 2 bits of scales[s - 4] / scales[s]), qs[128]:
 *             x = d * sc_s * q - dmin * m_s for sub-block s = element / 32; q of element
 *             64c + l (l < 32) is the low nibble of qs[32c + l], of 64c + 32 + l the high.
 *   Q5_K (13) d, dmin, scales[12], qh[32], qs[128]: as Q4_K, q |= bit s of qh[l] << 4
 *             for element 32s + l.
 *   Q6_K (14) ql[128], qh[64], int8 scales[16], d: x = d * sc_g * (q - 32), g = element/16;
 *             q (0..63) of element 128h + 32k + l: 4 bits from ql[64h + l + 32 (k & 1)]
 *             (low nibble for k < 2, high for k >= 2), 2 bits from qh[32h + l] >> 2k.
 * Activation (vec-dot) types, never weights (sd_type_supported says no):
 *   Q8_K (15) ggml's block_q8_K: float d, int8 qs[256], int16 bsums[16] (sums of 16 qs).
 *   Q8_S (64, specdec's own, not a ggml id) 32: float d, float ds, int8 qs[32]: x = d * q,
 *             ds = d * (sum of the qs); the activation of Q4_1 / Q5_0 / Q5_1 weights
 *             (float scales: no fp16 conversion per block in the kernels; ds: the min
 *             term of Q4_1 / Q5_1 is m * ds).
 *
 * Reference quantizers (from_float, the specification): Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1
 * reproduce ggml's quantize_row_*_ref operation for operation (bytes identical to
 * llama.cpp's for finite inputs); the K-quants follow ggml's published algorithm (per
 * sub-block a weighted least-squares search over candidate scales and mins, then the
 * scales themselves quantized) in our own implementation: the bytes differ from ggml's,
 * the error is comparable (quant/kquants.c).
 *
 * Activations with a NaN or an infinity: the activation quantizers give that block a
 * NaN scale (ggml's Q8_0 would round a NaN to q = 0 and hide it), so a non-finite value
 * always reaches the matmul output. Weights with non-finite scales: not looked for when
 * a file is loaded (that would read every weight); sd_validate_row finds them, and they
 * too give non-finite outputs.
 *
 * Kernels: a scalar reference is the specification; SIMD variants (AVX2+FMA+F16C,
 * AVX-512 VNNI) are picked once at run time from CPUID and compute exactly its
 * arithmetic in its order, so every kernel set gives the same bits for every type (the
 * same GGUF gives the same text on every x86 machine). Results depend only on one
 * weight row and one activation row: never on the batch size, the thread count or the
 * row range, so a batched pass is bit-identical to single passes.
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
    SD_TYPE_Q4_1 = 3,
    SD_TYPE_Q5_0 = 6,
    SD_TYPE_Q5_1 = 7,
    SD_TYPE_Q8_0 = 8,
    SD_TYPE_Q2_K = 10,
    SD_TYPE_Q3_K = 11,
    SD_TYPE_Q4_K = 12,
    SD_TYPE_Q5_K = 13,
    SD_TYPE_Q6_K = 14,
    SD_TYPE_Q8_K = 15, /* activations only */
    SD_TYPE_BF16 = 30,
    SD_TYPE_Q8_S = 64, /* activations only; specdec's own id, never in a file */
    SD_TYPE_COUNT = 65 /* one past the largest id of the traits table */
} sd_type;

#define SD_QK4_0 32
#define SD_QK4_1 32
#define SD_QK5_0 32
#define SD_QK5_1 32
#define SD_QK8_0 32
#define SD_QK8_S 32
#define SD_QK_K  256 /* super-block of the K-quants */

typedef struct sd_block_q4_0 {
    uint16_t d;               /* fp16 scale */
    uint8_t qs[SD_QK4_0 / 2]; /* nibbles */
} sd_block_q4_0;

typedef struct sd_block_q4_1 {
    uint16_t d, m;            /* fp16 scale, fp16 min */
    uint8_t qs[SD_QK4_1 / 2]; /* nibbles */
} sd_block_q4_1;

typedef struct sd_block_q5_0 {
    uint16_t d;               /* fp16 scale */
    uint8_t qh[4];            /* 5th bits, little-endian uint32: bit j for element j */
    uint8_t qs[SD_QK5_0 / 2]; /* low nibbles */
} sd_block_q5_0;

typedef struct sd_block_q5_1 {
    uint16_t d, m;            /* fp16 scale, fp16 min */
    uint8_t qh[4];            /* 5th bits */
    uint8_t qs[SD_QK5_1 / 2]; /* low nibbles */
} sd_block_q5_1;

typedef struct sd_block_q8_0 {
    uint16_t d;          /* fp16 scale */
    int8_t qs[SD_QK8_0]; /* quants */
} sd_block_q8_0;

typedef struct sd_block_q8_s {
    float d;             /* scale: amax / 127, as Q8_0's before its fp16 rounding */
    float ds;            /* d * (sum of qs[0..31]), one float rounding */
    int8_t qs[SD_QK8_S]; /* quants, as Q8_0's */
} sd_block_q8_s;

typedef struct sd_block_q2_k {
    uint8_t scales[SD_QK_K / 16]; /* low nibble scale, high nibble min, per 16 */
    uint8_t qs[SD_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;             /* fp16 super-block scales of the scales / mins */
} sd_block_q2_k;

typedef struct sd_block_q3_k {
    uint8_t hmask[SD_QK_K / 8]; /* high bits */
    uint8_t qs[SD_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 6-bit scales (offset 32) */
    uint16_t d;                 /* fp16 super-block scale */
} sd_block_q3_k;

typedef struct sd_block_q4_k {
    uint16_t d, dmin;        /* fp16 super-block scales of the scales / mins */
    uint8_t scales[12];      /* 8 6-bit scales, 8 6-bit mins */
    uint8_t qs[SD_QK_K / 2]; /* nibbles */
} sd_block_q4_k;

typedef struct sd_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[SD_QK_K / 8]; /* 5th bits */
    uint8_t qs[SD_QK_K / 2]; /* low nibbles */
} sd_block_q5_k;

typedef struct sd_block_q6_k {
    uint8_t ql[SD_QK_K / 2];     /* low 4 bits */
    uint8_t qh[SD_QK_K / 4];     /* high 2 bits */
    int8_t scales[SD_QK_K / 16]; /* per 16 elements */
    uint16_t d;                  /* fp16 super-block scale */
} sd_block_q6_k;

typedef struct sd_block_q8_k {
    float d;                     /* scale */
    int8_t qs[SD_QK_K];          /* quants */
    int16_t bsums[SD_QK_K / 16]; /* sums of qs in groups of 16 (exact) */
} sd_block_q8_k;

_Static_assert(sizeof(sd_block_q4_0) == 18, "Q4_0 block must be 18 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q4_1) == 20, "Q4_1 block must be 20 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q5_0) == 22, "Q5_0 block must be 22 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q5_1) == 24, "Q5_1 block must be 24 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q8_0) == 34, "Q8_0 block must be 34 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q8_s) == 40, "Q8_S block is 40 bytes");
_Static_assert(sizeof(sd_block_q2_k) == 84, "Q2_K block must be 84 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q3_k) == 110, "Q3_K block must be 110 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q4_k) == 144, "Q4_K block must be 144 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q5_k) == 176, "Q5_K block must be 176 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q6_k) == 210, "Q6_K block must be 210 bytes (ggml layout)");
_Static_assert(sizeof(sd_block_q8_k) == 292, "Q8_K block must be 292 bytes (ggml layout)");

/*
 * The traits of one element type: a row of the table indexed by type id.
 *   to_float  : x (n elements, n a multiple of block_elems) -> y[n] float; the reference
 *               dequantizer (for quantized types bit-identical to gguf-py's numpy
 *               gguf.quants.dequantize, hence to ggml's dequantize_row_*).
 *   from_float: x[n] float -> row of the type; the reference quantizer; NULL for a type
 *               that cannot be written.
 *   first_bad : index of the first block of a row (nb blocks) with a non-finite value
 *               or scale (NaN, inf), -1 if none (sd_validate_row).
 */
typedef struct sd_type_traits {
    const char *name;     /* "q4_k": ggml_type_name in lower case */
    int64_t block_elems;  /* elements per block (1 for F32/F16/BF16) */
    size_t block_bytes;   /* bytes per block */
    size_t align;         /* alignment the data of a row needs (widest scalar field) */
    int is_weight;        /* 1: a tensor type (GGUF) and a matmul weight type */
    sd_type vec_dot_type; /* activations are converted to this for the matmul */
    void (*to_float)(const void *x, float *y, int64_t n);
    void (*from_float)(const float *x, void *y, int64_t n);
    int64_t (*first_bad)(const void *x, int64_t nb);
} sd_type_traits;

/* The traits of type id t; NULL if t names no type here (out of range or unknown). */
const sd_type_traits *sd_type_traits_get(uint32_t t);

/* 1 if t (a raw ggml type id read from a file) is a tensor / weight type here, else 0
 * (unknown ids and the activation-only Q8_K / Q8_S give 0). */
int sd_type_supported(uint32_t t);
/* The traits name ("f32", "q4_k", ...) of any type in the table; "unknown" otherwise. */
const char *sd_type_name(uint32_t t);
/* Parse a weight-type name as above (case-insensitive); returns 0 and sets *out, or -1
 * (unknown name, or an activation-only type). */
int sd_type_from_name(const char *name, sd_type *out);
/* A ", "-separated list of the names of every weight type that can be written (has a
 * reference quantizer), in id order: "f32, f16, q4_0, ...". For error messages. */
const char *sd_type_writable_names(void);
/* Elements per block (1 for float types, 32, 256). 0 if t is not in the table. */
int64_t sd_type_block_elems(sd_type t);
/* Bytes per block. 0 if t is not in the table. */
size_t sd_type_block_bytes(sd_type t);
/* Alignment (bytes) the data of a row of type t needs; 0 if t is not in the table. */
size_t sd_type_align(sd_type t);
/* Bytes of a row of n elements; -1 if n is not a multiple of the block size, n < 0,
 * t is not in the table, or the size overflows; else 0 and *out set. */
int sd_type_row_bytes(sd_type t, int64_t n, size_t *out);

/* Scalar conversions (IEEE round-to-nearest-even for fp32->fp16 / fp32->bf16). */
float sd_fp16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_fp16(float f);
float sd_bf16_to_fp32(uint16_t h);
uint16_t sd_fp32_to_bf16(float f);

/* Convert n floats x[n] to a row of type t at y (reference from_float). Returns -1 and
 * writes nothing if t cannot be written or n is not a multiple of its block size;
 * else 0. Non-finite inputs give unspecified (but memory-safe) bytes: callers that must
 * not hide a NaN check the input first (specdec quantize does). */
int sd_quantize_row(sd_type t, const float *x, void *y, int64_t n);
/* Inverse: a row of type t with n elements to floats y[n] (reference to_float). Returns
 * -1 and writes nothing for a type not in the table or a bad n; else 0. */
int sd_dequantize_row(sd_type t, const void *x, float *y, int64_t n);

/*
 * Check that every element of a row of type t (n elements) decodes to a finite value:
 * 0 if so; -1 if not, with *first_bad (may be NULL) set to the first element of the
 * first offending block. For quantized types only the scales / mins are read (the
 * integer quants cannot make a finite scale non-finite: |d * q| <= 65504 * 63 * 63).
 * Reads every block, so it costs a pass over the row: the loader does not call it (a
 * mapped model would be paged in whole); specdec quantize checks its input values, and
 * a NaN that reaches a forward pass shows up as non-finite logits.
 */
int sd_validate_row(sd_type t, const void *row, int64_t n, int64_t *first_bad);

/*
 * The type activations are converted to before a dot product with weights of type t
 * (the traits' vec_dot_type): Q8_0 for Q4_0 / Q8_0, Q8_S for Q4_1 / Q5_0 / Q5_1, Q8_K
 * for the K-quants (integer dot products, as ggml's vec_dot_type), F32 for
 * F32 / F16 / BF16 weights.
 */
sd_type sd_vec_dot_type(sd_type t);

/*
 * Prepared activations: what sd_matmul_rows and sd_matmul_packed read. The caller
 * allocates them (the CPU backend once, at init, sized with sd_activations_bytes_max for
 * its largest batch and row; the matmul path itself never allocates). Layout for weights
 * of type wt, a batch of n_tok rows of n_cols:
 *   part A, at offset 0: n_tok rows of sd_vec_dot_type(wt) (row stride
 *     sd_type_row_bytes(sd_vec_dot_type(wt), n_cols)), bytes identical to
 *     sd_quantize_row(sd_vec_dot_type(wt), ...) of each row (F32: a copy of x): the
 *     reference layout, all that the GGUF-row kernels (and sd_matmul_rows_ref) read;
 *   part B (only where the kernel set in use has a packed kernel for wt and the type has
 *     packed activations: the 32-element types, Q4_K, Q5_K): at the next multiple of 64
 *     bytes after part A, n_tok rows of per-block values the packed kernels read
 *     (quant/pack_impl.h: the float scales and the integer offset corrections of the
 *     32-element types, the 32-element group sums of Q4_K / Q5_K).
 * Every byte of row b (in either part) depends only on row b of x and on wt; part B's
 * offset depends on n_tok, so a prepared batch is only valid for a call with the same
 * n_tok (not for a slice of its rows) and the same wt as it was prepared for.
 */

/* Bytes of prepared activations for n_tok rows of n_cols, weights of type wt, in the
 * layout of the kernel set in use. Returns -1 (and leaves *out) for a wt that is not a
 * weight type, n_tok < 0, n_cols < 0, n_cols not a multiple of the block size of
 * sd_vec_dot_type(wt) (32 or 256), or overflow; else 0. Monotone in n_tok and in
 * n_cols among accepted sizes (a buffer sized for the largest serves all). */
int sd_activations_bytes(sd_type wt, int64_t n_tok, int64_t n_cols, size_t *out);

/* The largest sd_activations_bytes over every weight type for n_tok rows of any row
 * length up to n_cols (rounded up to each type's activation block): enough for any
 * matmul of at most n_tok rows and n_cols columns. -1 on bad arguments or overflow. */
int sd_activations_bytes_max(int64_t n_tok, int64_t n_cols, size_t *out);

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
 *            (each row aligned to sd_type_align(wt))
 *   xq     : activations prepared by sd_quantize_activations for this wt and exactly
 *            this n_tok (read only; never written, so threads may share it)
 *   y      : float [n_tok, ldy]; row b, column r is y[b * ldy + r]
 * Each weight row is read once per call for all n_tok activation rows. Uses the
 * fastest kernel for this CPU and type (chosen once). Allocates nothing.
 * Single-threaded: callers split [r0, r1) across threads.
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

/*
 * Packed weights. The SIMD kernel sets run quantized weights in a packed layout: rows in
 * groups of SD_PACK_ROWS, the quants of the 16 rows of a group interleaved 4 bytes at a
 * time so that one vector lane is one row, the fp16 scales of a block side by side
 * (quant/pack_impl.h describes it byte by byte). Packing changes where bytes are, never
 * what is computed: sd_matmul_packed gives exactly the bits of sd_matmul_rows_ref on the
 * same GGUF rows. The CPU backend packs each weight matrix once, at session init, into
 * memory it owns, when sd_matmul_packed_available says the kernels in use have a packed
 * kernel for its type.
 */
#define SD_PACK_ROWS 16

/* 1 if the kernel set in use runs weights of type wt packed (every quantized weight type
 * under "avx2", "avxvnni" and "avx512"; none under "scalar", nor for float types), else 0. */
int sd_matmul_packed_available(sd_type wt);

/* Bytes of a packed [rows, cols] matrix of type wt: ceil(rows / 16) groups. -1 for a
 * type without a packed layout (float types, activation types), rows < 0, cols not a
 * multiple of the block, or overflow; else 0 and *out set. */
int sd_pack_bytes(sd_type wt, int64_t rows, int64_t cols, size_t *out);

/* Pack groups [g0, g1) (rows [16 g0, 16 g1), rows past `rows` as zeros) of W [rows, cols]
 * of type wt (GGUF rows, w_row_bytes apart) into out, which holds sd_pack_bytes(wt, rows,
 * cols) bytes; out should be 64-byte aligned (the kernels read 64-byte vectors). Calls on
 * disjoint group ranges may run concurrently. */
void sd_pack_groups(sd_type wt, const void *w, size_t w_row_bytes, int64_t rows, int64_t cols,
                    int64_t g0, int64_t g1, void *out);

/* The inverse: groups [g0, g1) of a packed matrix back to GGUF rows (w_row_bytes apart;
 * rows past `rows` are not written). For tests and tools. */
void sd_unpack_groups(sd_type wt, const void *packed, int64_t rows, int64_t cols, int64_t g0,
                      int64_t g1, void *w, size_t w_row_bytes);

/*
 * y[b, r] = dot(W[r, :], X[b, :]) for the rows r < rows of groups [g0, g1) (r in
 * [16 g0, min(16 g1, rows))) and b in [0, n_tok), W packed by sd_pack_groups.
 *   xq : activations prepared by sd_quantize_activations for this wt and this n_tok
 *   y  : float [n_tok, ldy]; row b, column r is y[b * ldy + r]
 * Bit-identical to sd_matmul_rows_ref on the unpacked rows. Does nothing if the kernels
 * in use have no packed kernel for wt (check sd_matmul_packed_available). Allocates
 * nothing. Single-threaded: callers split the groups across threads.
 */
void sd_matmul_packed(sd_type wt, const void *wp, int64_t rows, int64_t n_cols, const void *xq,
                      int64_t n_tok, float *y, int64_t ldy, int64_t g0, int64_t g1);

/* Name of the kernel set in use for this CPU: "scalar", "avx2", "avxvnni", "avx512"
 * (lowered, never raised, by the environment variable SD_KERNELS). */
const char *sd_quant_kernels_name(void);
/* The compute roof of the kernel set in use at one thread: int8 multiply-adds per second
 * of its packed kernels' innermost product sequence (kernels.h: broadcast activation
 * loads, the multiply-adds and their integer sums, in registers and L1; no unpacking, no
 * float part), the best of 31 timed runs of >= 0.2 ms each (short runs: on a shared
 * machine some run unpreempted). 0 for the scalar set. A speed figure for `specdec
 * bench`, never a test's. */
double sd_quant_kernels_peak_macs(void);
/* Name of the kernel set that runs weights of type wt in GGUF rows ("scalar" for the
 * quantized types: the SIMD sets run them packed), or "none" for a type that is not a
 * weight type. */
const char *sd_quant_kernel_name_for(sd_type wt);

#ifdef __cplusplus
}
#endif
#endif /* SD_QUANT_H */
