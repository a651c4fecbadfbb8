/*
 * runtime/gguf: the GGUF v3 reader (mmap) and writer, and the one table of llama-family
 * metadata keys and tensor names (as llama.cpp's llama-arch) that the model loader, the
 * converters, synth and the test helpers share. Owns the mapping of an open file. May
 * include runtime/base and quant (tensor sizes per element type) only.
 * Format: ggml's docs/gguf.md.
 *
 *   header   : magic "GGUF" (4 bytes), uint32 version (3; 2 also read), uint64 n_tensors,
 *              uint64 n_kv
 *   n_kv x   : gguf_string key, uint32 value type, value
 *              value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool(u8),
 *              8 string (uint64 len + bytes, no NUL), 9 array (uint32 elem type, uint64 n,
 *              n elements), 10 u64, 11 i64, 12 f64
 *   n_tensors x: gguf_string name, uint32 n_dims (<= 4), uint64 ne[n_dims] (ne[0] is
 *              the row length, the fastest-varying dimension), uint32 ggml type, uint64
 *              offset (relative to the data section, multiple of the alignment)
 *   padding  : to general.alignment (default 32; must be a power of two)
 *   data     : tensor data
 * All numbers little-endian. The reader distrusts the file: every count is bounded by
 * the bytes left before it sizes anything, strings and arrays are bounds-checked,
 * tensor offsets must be aligned, in range and non-overlapping with the metadata, and
 * tensor sizes are computed with overflow checks. Errors name the file and the field.
 *
 * A shape written [rows, cols] in specdec comments is GGUF ne = {cols, rows}.
 */
#ifndef SD_GGUF_H
#define SD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sd_gguf_vtype {
    SD_GGUF_U8 = 0,
    SD_GGUF_I8 = 1,
    SD_GGUF_U16 = 2,
    SD_GGUF_I16 = 3,
    SD_GGUF_U32 = 4,
    SD_GGUF_I32 = 5,
    SD_GGUF_F32 = 6,
    SD_GGUF_BOOL = 7,
    SD_GGUF_STRING = 8,
    SD_GGUF_ARRAY = 9,
    SD_GGUF_U64 = 10,
    SD_GGUF_I64 = 11,
    SD_GGUF_F64 = 12,
} sd_gguf_vtype;

#define SD_GGUF_MAX_DIMS          4
#define SD_GGUF_DEFAULT_ALIGNMENT 32

/* A tensor as described by the file; data points into the mapping. */
typedef struct sd_gguf_tensor {
    const char *name;             /* NUL-terminated copy owned by the sd_gguf */
    uint32_t type;                /* ggml type id (see quant/sd_quant.h) */
    uint32_t n_dims;              /* 1..4 */
    int64_t ne[SD_GGUF_MAX_DIMS]; /* unused dims are 1 */
    const void *data;             /* into the mmap */
    size_t nbytes;                /* checked against the file size */
} sd_gguf_tensor;

typedef struct sd_gguf sd_gguf;

/*
 * Open and validate a GGUF file (mmap, read-only). On success *out owns the mapping.
 * Errors: SD_ERR_IO (cannot open/map), SD_ERR_FORMAT (bad magic, version, truncation,
 * absurd counts, bad offsets/alignment, duplicate names), SD_ERR_UNSUPPORTED (tensor
 * type not in sd_quant.h). Unknown metadata value types are a format error.
 */
int sd_gguf_open(const char *path, sd_gguf **out, sd_error *err);
/* Unmap and free. NULL is accepted. */
void sd_gguf_close(sd_gguf *g);

const char *sd_gguf_path(const sd_gguf *g);
uint32_t sd_gguf_version(const sd_gguf *g);
uint32_t sd_gguf_alignment(const sd_gguf *g);
/* The data section [*base, *base + *bytes): every tensor's data lies inside it (a device
 * backend uploads this range once). */
void sd_gguf_data(const sd_gguf *g, const void **base, size_t *bytes);
/* A hint that the bytes [p, p + n) of the mapped file will not be read again by this
 * process soon (e.g. a weight matrix a backend has copied into its own layout): the
 * whole pages inside the range are dropped from the process (its resident set); a later
 * read brings them back from the page cache or the file. Ranges outside the file's
 * mapping are ignored. Never fails. */
void sd_gguf_advise_unneeded(const sd_gguf *g, const void *p, size_t n);

/* Metadata. Keys are looked up by exact name; -1 when absent. */
int64_t sd_gguf_n_kv(const sd_gguf *g);
int64_t sd_gguf_find_key(const sd_gguf *g, const char *key);
const char *sd_gguf_key_name(const sd_gguf *g, int64_t i);
sd_gguf_vtype sd_gguf_kv_type(const sd_gguf *g, int64_t i);

/*
 * Typed getters. Integers of any integer GGUF type are converted when the value fits
 * (else SD_ERR_FORMAT naming the key); f32 accepts f32 or f64. Missing key:
 * SD_ERR_FORMAT "<file>: missing metadata key '<key>'" unless the *_opt variant is used,
 * which returns SD_OK and leaves *out unchanged when the key is absent.
 */
int sd_gguf_get_i64(const sd_gguf *g, const char *key, int64_t *out, sd_error *err);
int sd_gguf_get_u32(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err);
int sd_gguf_get_f32(const sd_gguf *g, const char *key, float *out, sd_error *err);
int sd_gguf_get_bool(const sd_gguf *g, const char *key, int *out, sd_error *err);
/* String value: pointer into the mapping (NOT NUL-terminated) and its length. */
int sd_gguf_get_str(const sd_gguf *g, const char *key, const char **s, size_t *len, sd_error *err);
int sd_gguf_get_i64_opt(const sd_gguf *g, const char *key, int64_t *out, sd_error *err);
int sd_gguf_get_u32_opt(const sd_gguf *g, const char *key, uint32_t *out, sd_error *err);
int sd_gguf_get_f32_opt(const sd_gguf *g, const char *key, float *out, sd_error *err);
int sd_gguf_get_bool_opt(const sd_gguf *g, const char *key, int *out, sd_error *err);

/*
 * Arrays. sd_gguf_get_arr: element type and count of the array under key; for numeric
 * element types *data points at the packed little-endian elements in the mapping (may
 * be unaligned: read with memcpy). For string arrays *data is NULL; use
 * sd_gguf_arr_str (O(1): offsets are indexed at open).
 */
int sd_gguf_get_arr(const sd_gguf *g, const char *key, sd_gguf_vtype *elem_type, uint64_t *n,
                    const void **data, sd_error *err);
/* i-th string of the string array under key index kv (from sd_gguf_find_key). */
int sd_gguf_arr_str(const sd_gguf *g, int64_t kv, uint64_t i, const char **s, size_t *len);

/* Tensors, in file order. */
int64_t sd_gguf_n_tensors(const sd_gguf *g);
const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, int64_t i);
/* NULL when absent. */
const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name);

/* ---- writer ---- */

typedef struct sd_gguf_writer sd_gguf_writer;

/* New empty writer (version 3, alignment 32). NULL on OOM. */
sd_gguf_writer *sd_gguf_writer_new(void);
void sd_gguf_writer_free(sd_gguf_writer *w);

/* Metadata setters copy key and value. Setting an existing key replaces it, keeping
 * its position. Return SD_OK or SD_ERR_OOM. */
int sd_gguf_set_u32(sd_gguf_writer *w, const char *key, uint32_t v);
int sd_gguf_set_i32(sd_gguf_writer *w, const char *key, int32_t v);
int sd_gguf_set_f32(sd_gguf_writer *w, const char *key, float v);
int sd_gguf_set_bool(sd_gguf_writer *w, const char *key, int v);
int sd_gguf_set_str(sd_gguf_writer *w, const char *key, const char *v);
/* Any scalar type (u8..f64 except string/array): *v holds one value of that type in
 * host (little-endian) layout, copied. SD_ERR_ARG for string/array/unknown types. */
int sd_gguf_set_scalar(sd_gguf_writer *w, const char *key, sd_gguf_vtype type, const void *v);
/* Numeric array: n elements of elem_type, packed, copied from data. */
int sd_gguf_set_arr(sd_gguf_writer *w, const char *key, sd_gguf_vtype elem_type, const void *data,
                    uint64_t n);
/* String array: n NUL-terminated strings, copied. */
int sd_gguf_set_arr_str(sd_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Copy every metadata entry of an open file (used by `specdec quantize`). */
int sd_gguf_copy_kv(sd_gguf_writer *w, const sd_gguf *src);

/*
 * Add a tensor. ne[0] is the row length. data (nbytes, must equal the size implied
 * by type and ne) is referenced, not copied: it must stay valid until
 * sd_gguf_writer_write returns. Errors: SD_ERR_ARG (bad dims/size, duplicate name).
 */
int sd_gguf_add_tensor(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const int64_t *ne, const void *data, size_t nbytes, sd_error *err);

/*
 * Write the file: to the temporary sd_file_temp_path(path) (runtime/base: created new,
 * O_EXCL | O_NOFOLLOW, stale temporaries of dead processes removed), fsync, then rename
 * onto path, so a failure never leaves a partial file at path and the temporary is
 * removed on every error. path must pass
 * sd_gguf_check_output (absent or a regular file). Errors: SD_ERR_IO naming the path
 * (also when it is not a regular file).
 */
int sd_gguf_writer_write(const sd_gguf_writer *w, const char *path, sd_error *err);

/* ---- output-path safety (every file specdec replaces is checked by this) ---- */

/*
 * May path be replaced by a new file? It must be absent or a regular file: a symlink,
 * character or block device (/dev/full), FIFO, socket or folder is refused, since
 * renaming a new file over it would destroy it. And it must not be the same file
 * (st_dev and st_ino: a hard link or another spelling, "./a.gguf", included) as any of
 * inputs[0 .. n_inputs) (NULL entries skipped). Errors, one line naming path: SD_ERR_IO
 * when it is not a regular file ("/dev/full: is a character device, not a regular
 * file: refusing to replace it") or cannot be checked; SD_ERR_ARG when it is an input
 * (naming the input too).
 */
int sd_gguf_check_output(const char *path, const char *const *inputs, size_t n_inputs,
                         sd_error *err);

/* ---- llama-family architectures (runtime/gguf/arch.c) ----
 * Keys and tensor names follow llama.cpp's llama-arch.cpp (LLM_KV_*, LLM_TENSOR_*). What
 * differs between architectures is held in one place, the sd_arch rows. */

/* Per-architecture metadata keys: the name is "<arch>.<suffix>". */
typedef enum sd_arch_key {
    SD_KEY_CONTEXT_LENGTH,        /* <arch>.context_length */
    SD_KEY_EMBEDDING_LENGTH,      /* <arch>.embedding_length */
    SD_KEY_BLOCK_COUNT,           /* <arch>.block_count */
    SD_KEY_FEED_FORWARD_LENGTH,   /* <arch>.feed_forward_length */
    SD_KEY_HEAD_COUNT,            /* <arch>.attention.head_count */
    SD_KEY_HEAD_COUNT_KV,         /* <arch>.attention.head_count_kv */
    SD_KEY_RMS_EPS,               /* <arch>.attention.layer_norm_rms_epsilon */
    SD_KEY_KEY_LENGTH,            /* <arch>.attention.key_length (head dim of K) */
    SD_KEY_VALUE_LENGTH,          /* <arch>.attention.value_length */
    SD_KEY_SLIDING_WINDOW,        /* <arch>.attention.sliding_window */
    SD_KEY_ROPE_FREQ_BASE,        /* <arch>.rope.freq_base */
    SD_KEY_ROPE_DIMENSION_COUNT,  /* <arch>.rope.dimension_count */
    SD_KEY_ROPE_SCALING_TYPE,     /* <arch>.rope.scaling.type */
    SD_KEY_ROPE_SCALING_FACTOR,   /* <arch>.rope.scaling.factor */
    SD_KEY_ROPE_SCALING_ORIG_CTX, /* <arch>.rope.scaling.original_context_length */
    SD_KEY_VOCAB_SIZE,            /* <arch>.vocab_size */
    SD_KEY_SWA_PATTERN,           /* <arch>.attention.sliding_window_pattern (gemma3): a
                                     period n (every n-th layer global) or a bool per layer */
    SD_KEY_ROPE_BASE_SWA,         /* <arch>.rope.freq_base_swa (the local layers' base) */
    SD_KEY_LOGIT_SOFTCAP,         /* <arch>.final_logit_softcapping: logits c tanh(z / c) */
    SD_KEY_ROPE_ATTN_FACTOR,      /* <arch>.rope.scaling.attn_factor (phi3 LongRoPE) */
    SD_KEY_COUNT
} sd_arch_key;

/* Architecture-independent keys. */
#define SD_KEY_GENERAL_ARCHITECTURE "general.architecture"
#define SD_KEY_GENERAL_NAME         "general.name"
#define SD_KEY_GENERAL_FILE_TYPE    "general.file_type"
#define SD_KEY_GENERAL_ALIGNMENT    "general.alignment"
#define SD_KEY_TOKENIZER_MODEL      "tokenizer.ggml.model"
#define SD_KEY_TOKENIZER_PRE        "tokenizer.ggml.pre"
#define SD_KEY_TOKENIZER_TOKENS     "tokenizer.ggml.tokens"
#define SD_KEY_TOKENIZER_SCORES     "tokenizer.ggml.scores"
#define SD_KEY_TOKENIZER_TOKEN_TYPE "tokenizer.ggml.token_type"
#define SD_KEY_TOKENIZER_MERGES     "tokenizer.ggml.merges"
#define SD_KEY_TOKENIZER_BOS_ID     "tokenizer.ggml.bos_token_id"
#define SD_KEY_TOKENIZER_EOS_ID     "tokenizer.ggml.eos_token_id"
#define SD_KEY_TOKENIZER_UNK_ID     "tokenizer.ggml.unknown_token_id"
#define SD_KEY_TOKENIZER_ADD_BOS    "tokenizer.ggml.add_bos_token"
#define SD_KEY_TOKENIZER_ADD_EOS    "tokenizer.ggml.add_eos_token"
#define SD_KEY_TOKENIZER_ADD_SPACE  "tokenizer.ggml.add_space_prefix"
#define SD_KEY_TOKENIZER_CHAT_TMPL  "tokenizer.chat_template"

/* The name of key k for architecture arch, written into buf (cap >= 96 always fits an
 * architecture name of up to 32 bytes). Returns buf. */
const char *sd_arch_key_name(sd_arch_key k, const char *arch, char *buf, size_t cap);

/* Tensors. Per-layer ones are "blk.<layer>.<name>"; the rest have no prefix. */
typedef enum sd_arch_tensor {
    SD_TENSOR_TOKEN_EMBD,  /* token_embd.weight   [n_vocab, n_embd] */
    SD_TENSOR_OUTPUT_NORM, /* output_norm.weight  [n_embd] */
    SD_TENSOR_OUTPUT,      /* output.weight       [n_vocab, n_embd] (absent: tied) */
    SD_TENSOR_ROPE_FREQS,  /* rope_freqs.weight   [n_rot / 2] (Llama 3 frequency factors) */
    SD_TENSOR_ATTN_NORM,   /* blk.N.attn_norm.weight   [n_embd] */
    SD_TENSOR_ATTN_Q,      /* blk.N.attn_q.weight      [n_head * head_dim, n_embd] */
    SD_TENSOR_ATTN_K,      /* blk.N.attn_k.weight      [n_head_kv * head_dim, n_embd] */
    SD_TENSOR_ATTN_V,      /* blk.N.attn_v.weight      [n_head_kv * head_dim, n_embd] */
    SD_TENSOR_ATTN_Q_BIAS, /* blk.N.attn_q.bias        [n_head * head_dim] (qwen2) */
    SD_TENSOR_ATTN_K_BIAS, /* blk.N.attn_k.bias        [n_head_kv * head_dim] (qwen2) */
    SD_TENSOR_ATTN_V_BIAS, /* blk.N.attn_v.bias        [n_head_kv * head_dim] (qwen2) */
    SD_TENSOR_ATTN_OUT,    /* blk.N.attn_output.weight [n_embd, n_head * head_dim] */
    SD_TENSOR_ATTN_Q_NORM, /* blk.N.attn_q_norm.weight [head_dim] (qwen3: every Q head) */
    SD_TENSOR_ATTN_K_NORM, /* blk.N.attn_k_norm.weight [head_dim] (qwen3: every K head) */
    SD_TENSOR_FFN_NORM,    /* blk.N.ffn_norm.weight    [n_embd] */
    SD_TENSOR_FFN_GATE,    /* blk.N.ffn_gate.weight    [n_ff, n_embd] */
    SD_TENSOR_FFN_DOWN,    /* blk.N.ffn_down.weight    [n_embd, n_ff] */
    SD_TENSOR_FFN_UP,      /* blk.N.ffn_up.weight      [n_ff, n_embd] */
    SD_TENSOR_ATTN_POST,   /* blk.N.post_attention_norm.weight [n_embd] (gemma3) */
    SD_TENSOR_FFN_POST,    /* blk.N.post_ffw_norm.weight       [n_embd] (gemma3) */
    SD_TENSOR_ATTN_QKV,    /* blk.N.attn_qkv.weight [q_dim + 2 kv_dim, n_embd]: Q, K, V fused */
    SD_TENSOR_ROPE_LONG,   /* rope_factors_long.weight  [n_rot / 2] (phi3 LongRoPE) */
    SD_TENSOR_ROPE_SHORT,  /* rope_factors_short.weight [n_rot / 2] */
    SD_TENSOR_COUNT
} sd_arch_tensor;

/* 1 if tensor t is per layer ("blk.N." prefix). */
int sd_arch_tensor_per_layer(sd_arch_tensor t);
/* Name of tensor t (of layer `layer` when per layer) into buf (cap >= 64). Returns buf. */
const char *sd_arch_tensor_name(sd_arch_tensor t, int32_t layer, char *buf, size_t cap);

/* What distinguishes an architecture (one row per supported "general.architecture"). */
typedef struct sd_arch {
    const char *name; /* "llama", "qwen2", "qwen3" */
    int qkv_bias;     /* 1: attn_q/k/v carry a bias (qwen2) */
    int rope_neox;    /* 1: RoPE rotates pairs (i, i + n_rot/2) (llama.cpp LLAMA_ROPE_TYPE_NEOX) */
    int qk_norm;      /* 1: each Q and K head is RMS-normed (attn_q_norm / attn_k_norm, one
                         [head_dim] weight shared by the heads) before RoPE (qwen3) */
    int ffn_gelu;     /* 1: the FFN gate is GELU (tanh approximation), else SiLU (gemma3) */
    int embd_scale;   /* 1: token embeddings are multiplied by sqrt(n_embd) (gemma3) */
    int post_norms;   /* 1: the attention and FFN outputs are RMS-normed (post_attention_norm,
                         post_ffw_norm) before their residual adds, sandwich norms (gemma3) */
    int swa_pattern;  /* default <arch>.attention.sliding_window_pattern: with a sliding
                         window, layer l is local when l % n < n - 1 (every n-th global);
                         0: every layer local (Mistral) */
    float rope_base_swa; /* default <arch>.rope.freq_base_swa, the local layers' RoPE base;
                            0: the global base */
} sd_arch;

/* The row for an architecture name of len bytes (not NUL-terminated), or NULL. */
const sd_arch *sd_arch_find(const char *name, size_t len);
/* The supported names, comma-separated, for error messages ("llama, ..."). */
const char *sd_arch_supported(void);

/* Everything a writer needs for the metadata of a llama-family model with a SentencePiece
 * ("llama") vocabulary: the architecture keys, then the tokenizer arrays and ids. Used
 * by `specdec convert`, `specdec synth` and the test helpers. */
typedef struct sd_llm_meta {
    const char *arch;  /* "llama" */
    const char *name;  /* general.name, or NULL */
    int32_t file_type; /* general.file_type (llama_ftype); < 0: not written */
    int32_t n_ctx, n_embd, n_layer, n_ff, n_head, n_head_kv;
    int32_t n_rot; /* rope.dimension_count; 0: not written (default head_dim) */
    float rms_eps, rope_base;
    int32_t n_vocab; /* > 0: also written as <arch>.vocab_size */
    int write_vocab_size;
    const char *const *tokens;              /* [n_vocab] token texts */
    const float *scores;                    /* [n_vocab] */
    const int32_t *token_type;              /* [n_vocab] */
    int32_t bos, eos, unk;                  /* < 0: not written */
    int add_bos, add_eos, add_space_prefix; /* < 0: not written */
} sd_llm_meta;

/* Write m into w. Returns SD_OK, SD_ERR_OOM, or SD_ERR_ARG (no arch, NULL arrays). */
int sd_gguf_set_llm_meta(sd_gguf_writer *w, const sd_llm_meta *m);

#ifdef __cplusplus
}
#endif
#endif /* SD_GGUF_H */
