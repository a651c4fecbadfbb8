/*
 * runtime/convert: model file conversion: llama2.c checkpoint + tokenizer -> GGUF (F32),
 * and GGUF -> quantized GGUF (any writable type, or a llama.cpp-style mix). Both write
 * atomically through the GGUF writer, so a failure never leaves a partial output file,
 * and both refuse, before any work, an output that is not a regular file (a device, FIFO,
 * symlink, folder) or that is the same file as an input (sd_gguf_check_output: SD_ERR_IO /
 * SD_ERR_ARG naming them). Owns nothing beyond a call. May include runtime/base,
 * runtime/gguf, runtime/tokenizer and quant.
 */
#ifndef SD_CONVERT_H
#define SD_CONVERT_H

#include <stdio.h>

#include "quant/sd_quant.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Convert a llama2.c checkpoint (karpathy/llama2.c export.py "legacy" version-0 format,
 * as read by run.c) and a llama2.c tokenizer .bin into a GGUF file that llama.cpp
 * loads as architecture "llama" with a SentencePiece ("llama") vocabulary. All tensors
 * are F32.
 *
 * Checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 * seq_len; vocab_size < 0 means an untied classifier follows), then float32 weights:
 *   token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
 *   wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
 *   w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
 *   freq_cis_real [seq, head/2], freq_cis_imag [seq, head/2], (wcls [vocab, dim]).
 * The file size must equal the size the header implies, exactly.
 * Tokenizer: int32 max_token_length, then vocab x (float32 score, int32 len, bytes).
 *
 * Errors: SD_ERR_IO (cannot read/write), SD_ERR_FORMAT (bad header, size mismatch,
 * bad tokenizer), SD_ERR_MISMATCH (tokenizer and checkpoint vocab sizes differ).
 */
int sd_convert_llama2c(const char *ckpt_path, const char *tok_path, const char *out_path,
                       sd_error *err);

/*
 * A quantization recipe: the type of most matrices and the rule that picks each
 * matrix's type (runtime/convert/quantize.c documents the rules).
 *   "f32" ... "q6_k": every 2-D "*.weight" matrix of that type ("pure", as
 *                     llama-quantize --pure);
 *   "q4_k_m", "q5_k_m": llama.cpp's Q4_K_M / Q5_K_M mixes (simplified): Q6_K for the
 *                     classifier and for attn_v / ffn_down of the layers that get more
 *                     bits, the base type elsewhere.
 */
typedef struct sd_quant_recipe {
    const char *name; /* "q4_k_m" */
    sd_type base;     /* type of most matrices */
    int mix;          /* 0: pure; 1: the K_M rules */
    uint32_t ftype;   /* general.file_type written: llama.cpp's llama_ftype */
} sd_quant_recipe;

/* Parse a recipe name (case-insensitive): 0 and *out set, or -1 (unknown name). */
int sd_quant_recipe_from_name(const char *name, sd_quant_recipe *out);
/* The pure recipe of a writable type t: 0 and *out set, or -1. */
int sd_quant_recipe_of_type(sd_type t, sd_quant_recipe *out);
/* ", "-separated recipe names, for usage lines and errors. */
const char *sd_quant_recipe_names(void);

/*
 * Quantize a GGUF file with a recipe: every metadata entry is copied (general.file_type
 * set to the recipe's llama_ftype); 2-D tensors named "*.weight" (the token embedding
 * included) get the recipe's type; other tensors (norms) are stored F32. A matrix whose
 * row length is not a multiple of its type's block size falls back (K-quants to a
 * 32-element type as llama.cpp does, then F16), with one line to log (may be NULL), e.g.
 *   "blk.0.ffn_down.weight: row length 172 is not a multiple of 32; stored as f16"
 * Source tensors may be of any supported type. Errors: SD_ERR_FORMAT when an input
 * value (after dequantization) is NaN or infinite ("tensor 'x': element [row r, col c]
 * is nan: ..."), SD_ERR_IO / SD_ERR_ARG for an output that is not a regular file or is
 * the input itself (sd_gguf_check_output, before any work), SD_ERR_OOM, the reader's and
 * writer's errors; OUT is written atomically (never half-written). progress (may be NULL)
 * is called after each tensor.
 */
/* Progress of sd_quantize_file_recipe: after each tensor, (done, total, its name). */
typedef void (*sd_convert_progress)(void *user, int64_t done, int64_t total, const char *name);

int sd_quantize_file_recipe(const char *in_path, const char *out_path, const sd_quant_recipe *r,
                            FILE *log, sd_convert_progress progress, void *user, sd_error *err);

/* sd_quantize_file_recipe with the pure recipe of type (e.g. SD_TYPE_Q8_0: file_type 7). */
int sd_quantize_file(const char *in_path, const char *out_path, sd_type type, FILE *log,
                     sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_CONVERT_H */
