/*
 * Tokenizer: SentencePiece-style vocabulary read from GGUF (tokenizer.ggml.model =
 * "llama"), matching llama.cpp's SPM tokenizer (llama-vocab.cpp, llm_tokenizer_spm)
 * byte for byte on encode and decode.
 *
 * GGUF keys: tokenizer.ggml.model (string), tokenizer.ggml.tokens (string array),
 * tokenizer.ggml.scores (f32 array), tokenizer.ggml.token_type (i32 array: 1 normal,
 * 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), tokenizer.ggml.bos_token_id,
 * eos_token_id, unknown_token_id (u32), tokenizer.ggml.add_bos_token (bool, default
 * true for llama), tokenizer.ggml.add_space_prefix (bool, default true).
 * Encoding: spaces become U+2581 "▁", a "▁" is prepended when add_space_prefix,
 * then greedy best-score bigram merging over UTF-8 characters; symbols with no token
 * fall back to <0xNN> byte tokens (or unk).
 */
#ifndef SD_VOCAB_H
#define SD_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_vocab sd_vocab;

/*
 * Load the vocabulary of an open GGUF file (copies what it needs; g may be closed
 * afterwards). Errors (SD_ERR_FORMAT / SD_ERR_UNSUPPORTED) name the file and key:
 * missing tokens, scores/types of the wrong length, model type other than "llama",
 * special ids out of range, duplicate token texts. Absent scores read as 0, absent
 * types as normal, absent special ids default to llama's bos 1, eos 2, unk 0 (as in
 * llama.cpp). Text is tokenized with parse_special = false: control-token text such
 * as "<s>" is plain text; user-defined tokens (type 4) are still split out, as
 * llama.cpp does.
 */
int sd_vocab_load(const sd_gguf *g, sd_vocab **out, sd_error *err);
void sd_vocab_free(sd_vocab *v);

int32_t sd_vocab_n_tokens(const sd_vocab *v);
int32_t sd_vocab_bos(const sd_vocab *v); /* -1 if none */
int32_t sd_vocab_eos(const sd_vocab *v); /* -1 if none */
int32_t sd_vocab_unk(const sd_vocab *v); /* -1 if none */
int sd_vocab_add_bos(const sd_vocab *v);
const char *sd_vocab_model_name(const sd_vocab *v); /* "llama" */
/* Raw token text as stored (with "▁"), NUL-terminated; NULL if id out of range. */
const char *sd_vocab_token_text(const sd_vocab *v, int32_t id);
/* Token type (1..6 as above); 0 if id out of range. */
int sd_vocab_token_type(const sd_vocab *v, int32_t id);

/*
 * Encode text[0..len) to token ids. If add_bos and the vocab has a BOS, it is
 * prepended. *ids is malloc'd (caller frees), *n_ids set. Empty text gives no tokens
 * (only BOS if requested). Errors: SD_ERR_OOM.
 */
int sd_vocab_tokenize(const sd_vocab *v, const char *text, size_t len, int add_bos, int32_t **ids,
                      size_t *n_ids, sd_error *err);

/*
 * Decode one token to the bytes it stands for (llama.cpp token_to_piece with
 * special tokens not rendered): "▁" -> " ", <0xNN> -> byte NN, control tokens -> "".
 * Writes at most cap bytes to buf; returns the full length in bytes (which may
 * exceed cap: call again with a larger buffer), or -1 if id is out of range.
 */
int sd_vocab_token_to_piece(const sd_vocab *v, int32_t id, char *buf, size_t cap);

/*
 * Decode a sequence (llama.cpp llama_detokenize with remove_special = false,
 * unparse_special = false): concatenated pieces, except that when the vocabulary has
 * add_space_prefix one leading space of the FIRST token's piece is removed. As in
 * llama.cpp, a leading BOS is that first token (its piece is empty), so after a BOS
 * nothing is removed: [BOS, "▁Hello"] -> " Hello", ["▁Hello"] -> "Hello". Hence
 * decode(encode(s, add_bos = 0)) == s. Ids out of range: SD_ERR_ARG. *out is malloc'd
 * and NUL-terminated.
 */
int sd_vocab_detokenize(const sd_vocab *v, const int32_t *ids, size_t n_ids, char **out,
                        size_t *out_len, sd_error *err);

/*
 * Check that a draft vocabulary pairs with a target vocabulary (as llama.cpp's
 * speculative example does): same model type, same BOS and EOS ids, token counts
 * differing by at most SD_VOCAB_MAX_SIZE_DIFF, and equal token text for every id both
 * have. On mismatch returns SD_ERR_MISMATCH with one line naming both files and the
 * first differing field or id.
 */
#define SD_VOCAB_MAX_SIZE_DIFF 128
int sd_vocab_check_pair(const sd_vocab *target, const char *target_path, const sd_vocab *draft,
                        const char *draft_path, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_VOCAB_H */
