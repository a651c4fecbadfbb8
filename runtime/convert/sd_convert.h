/*
 * runtime/convert: model file conversion: llama2.c checkpoint + tokenizer -> GGUF (F32),
 * and GGUF -> quantized GGUF. Both write atomically through the GGUF writer, so a failure
 * never leaves a partial output file, and both refuse, before any work, an output that is
 * not a regular file (a device, FIFO, symlink, folder) or that is the same file as an
 * input (sd_gguf_check_output: SD_ERR_IO / SD_ERR_ARG naming them). Owns nothing beyond a
 * call. May include runtime/base, runtime/gguf, runtime/tokenizer and quant.
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
 * Quantize a GGUF file: every metadata entry is copied (general.file_type set to the
 * llama_ftype: 7 MOSTLY_Q8_0, 2 MOSTLY_Q4_0, 0 ALL_F32, 1 MOSTLY_F16, 32 MOSTLY_BF16);
 * 2-D tensors named "*.weight" (the token embedding included) are converted to type;
 * other tensors (norms) are stored F32. A matrix whose row length is not a multiple of
 * the block size of type falls back to F16, with one line to log (may be NULL), e.g.
 *   "blk.0.ffn_down.weight: row length 172 is not a multiple of 32; stored as f16"
 * Source tensors may be F32, F16, BF16, Q8_0 or Q4_0.
 */
int sd_quantize_file(const char *in_path, const char *out_path, sd_type type, FILE *log,
                     sd_error *err);

/* Progress of sd_quantize_file_progress: after each tensor, (done, total, its name). */
typedef void (*sd_convert_progress)(void *user, int64_t done, int64_t total, const char *name);

/* sd_quantize_file with a progress callback (may be NULL). */
int sd_quantize_file_progress(const char *in_path, const char *out_path, sd_type type, FILE *log,
                              sd_convert_progress progress, void *user, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_CONVERT_H */
