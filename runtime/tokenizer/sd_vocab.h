/*
 * Tokenizer: the vocabulary of a GGUF file and everything that turns text into token ids
 * and back, matching llama.cpp's llama-vocab.cpp / unicode.cpp / llama-chat.cpp byte for
 * byte on encode and decode.
 *
 * What it does
 *   - Loads SentencePiece vocabularies (tokenizer.ggml.model = "llama": bigram merging by
 *     score, byte fallback) and byte-level BPE vocabularies ("gpt2": GPT-2 byte mapping,
 *     merge ranks from tokenizer.ggml.merges, the pre-tokenizer named by
 *     tokenizer.ggml.pre).
 *   - Tokenizes with llama.cpp's add_special / parse_special semantics; decodes
 *     (token_to_piece, detokenize, and a streaming detokenizer that only ever returns
 *     complete UTF-8); lists the end-of-generation tokens; formats chats with the built-in
 *     templates llama.cpp detects from tokenizer.chat_template; checks that a draft's
 *     vocabulary pairs with a target's.
 * What it owns: the sd_vocab (a copy of what it needs from the GGUF: the file may be closed
 * after sd_vocab_load), sd_detok streams, and the strings it returns as malloc'd.
 * Faces it may include: runtime/base/sd_base.h and runtime/gguf/sd_gguf.h only.
 *
 * GGUF keys read: tokenizer.ggml.model, .pre, .tokens (string array), .scores (f32),
 * .token_type (i32: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte),
 * .merges (string array "left right", BPE), .bos_token_id, .eos_token_id, .eot_token_id,
 * .eom_token_id, .unknown_token_id, .padding_token_id, .fim_pad/fim_rep/fim_sep_token_id,
 * .add_bos_token, .add_eos_token, .add_space_prefix (bool), tokenizer.chat_template.
 * Defaults as llama.cpp: SPM bos 1, eos 2, unk 0, add_bos true, add_space_prefix true;
 * BPE bos = eos = 11 (disabled when out of range), add_bos true only for the Llama 3
 * pre-tokenizers, add_space_prefix false.
 *
 * Pre-tokenizers (tokenizer.ggml.pre; the same families as llama.cpp):
 *   default | gpt-2 (gpt2, phi-2, mpt, olmo, jais, jina-es/-de, ...) | llama-bpe (llama3,
 *   llama-v3, falcon3, pixtral, dbrx, smaug-bpe, ...) | qwen2 (stablelm2, deepseek-r1-qwen,
 *   megrez, ...) | starcoder (smollm, refact, command-r, codeshell, exaone, minerva) |
 *   falcon | deepseek-llm. Any other value is refused (SD_ERR_UNSUPPORTED naming the file,
 *   the key and the value): there is no silent fallback.
 */
#ifndef SD_VOCAB_H
#define SD_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/sd_base.h"
#include "runtime/gguf/sd_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_vocab sd_vocab;

typedef enum sd_vocab_type {
    SD_VOCAB_SPM = 1, /* tokenizer.ggml.model "llama" */
    SD_VOCAB_BPE = 2, /* tokenizer.ggml.model "gpt2" */
} sd_vocab_type;

/*
 * Load the vocabulary of an open GGUF file. Errors (one line naming the file and key):
 * SD_ERR_UNSUPPORTED for a tokenizer model other than llama/gpt2 or an unknown
 * pre-tokenizer; SD_ERR_FORMAT for missing tokens, a scores/token_type array whose length
 * is not the token count, a token text that is not valid UTF-8 (GGUF strings are UTF-8),
 * a byte-level BPE normal token with characters outside the GPT-2 byte alphabet, duplicate
 * token texts, a special id out of range, add_bos/add_eos true without the id, a missing
 * or malformed merges list (no "left right" split, or a side or the merged text that is not
 * a token). Stricter than llama.cpp in the last points (it warns, or decodes such tokens to
 * "[UNK_BYTE_...]"). SD_ERR_OOM. On error *out is NULL.
 */
int sd_vocab_load(const sd_gguf *g, sd_vocab **out, sd_error *err);
void sd_vocab_free(sd_vocab *v);

int32_t sd_vocab_n_tokens(const sd_vocab *v);
sd_vocab_type sd_vocab_get_type(const sd_vocab *v);
const char *sd_vocab_model_name(const sd_vocab *v); /* "llama" or "gpt2" */
const char *sd_vocab_pre_name(const sd_vocab *v);   /* tokenizer.ggml.pre, "" if absent */
int32_t sd_vocab_n_merges(const sd_vocab *v);       /* 0 for SPM */
/* Special ids; -1 if none. eot: tokenizer.ggml.eot_token_id, else the token of the first
 * of llama.cpp's end-of-turn texts the vocabulary has, in this order: <|eot_id|>
 * <|im_end|> <|end|> <end_of_turn> <|endoftext|> <|end_of_text|> <EOT> _<EOT> [EOT]
 * <｜end▁of▁sentence｜> <end_of_utterance> (llama.cpp takes the first in its hash map's
 * order); eom likewise <|eom_id|>. For stopping generation use sd_vocab_is_eog. */
int32_t sd_vocab_bos(const sd_vocab *v);
int32_t sd_vocab_eos(const sd_vocab *v);
int32_t sd_vocab_eot(const sd_vocab *v);
int32_t sd_vocab_eom(const sd_vocab *v);
int32_t sd_vocab_unk(const sd_vocab *v);
/* The fill-in-the-middle tokens (tokenizer.ggml.fim_*_token_id, else detected from their
 * texts as llama.cpp does: <|fim_prefix|>, <|repo_name|>, <|file_sep|>, ...); -1 when the
 * vocabulary has none. */
typedef enum sd_vocab_fim_kind {
    SD_VOCAB_FIM_PRE = 0, /* before the prefix */
    SD_VOCAB_FIM_SUF = 1, /* before the suffix */
    SD_VOCAB_FIM_MID = 2, /* the middle: generation starts after it */
    SD_VOCAB_FIM_REP = 3, /* a repository's name follows */
    SD_VOCAB_FIM_SEP = 4, /* a file's name and text follow */
} sd_vocab_fim_kind;
int32_t sd_vocab_fim(const sd_vocab *v, sd_vocab_fim_kind kind);
int sd_vocab_add_bos(const sd_vocab *v);
int sd_vocab_add_eos(const sd_vocab *v);
/*
 * End of generation, as llama.cpp's special_eog_ids: eos, eot, eom, the FIM pad/repo/
 * file-separator tokens, and every token whose text is one of <|eot_id|> <|im_end|>
 * <|end|> <|return|> <|call|> <|flush|> <|calls|> <end_of_turn> <|endoftext|> </s>
 * <|eom_id|> <EOT> _<EOT> [EOT] [EOS] <|end_of_text|> <end_of_utterance> <eos> <turn|>
 * <|tool_response> <｜end▁of▁sentence｜> [e~[ (with llama.cpp's two exceptions for the
 * harmony and gemma4 vocabularies). The generation loop stops on any of them.
 * sd_vocab_eog_ids: ascending ids, *n set; owned by the vocabulary.
 */
int sd_vocab_is_eog(const sd_vocab *v, int32_t id);
const int32_t *sd_vocab_eog_ids(const sd_vocab *v, int32_t *n);
/* Raw token text as stored ("▁" or GPT-2-mapped), NUL-terminated; NULL if out of range. */
const char *sd_vocab_token_text(const sd_vocab *v, int32_t id);
/* Token type as stored (1..6 as above); 0 if out of range or undefined. */
int sd_vocab_token_type(const sd_vocab *v, int32_t id);
/* 1 if the token is a control token after llama.cpp's fixups (e.g. <|im_end|> even when
 * the file says normal); such tokens decode to "" unless SD_VOCAB_UNPARSE_SPECIAL. */
int sd_vocab_is_control(const sd_vocab *v, int32_t id);
/* tokenizer.chat_template (NUL-terminated, owned by the vocabulary) or NULL. */
const char *sd_vocab_chat_template(const sd_vocab *v);

/* ---- encode ---- */

/* Flags of sd_vocab_tokenize (llama_tokenize's add_special, parse_special). */
#define SD_VOCAB_ADD_SPECIAL   0x1u /* BOS/EOS as the vocabulary asks (add_bos/add_eos) */
#define SD_VOCAB_PARSE_SPECIAL 0x2u /* control/unknown token texts in the text are tokens */

/*
 * Encode text[0..len) to token ids (llama_vocab::tokenize). The text is first split on
 * special-token texts, longest first: user-defined tokens always (as llama.cpp and HF
 * tokenizers do), control and unknown tokens only with SD_VOCAB_PARSE_SPECIAL; the raw
 * pieces go through the SPM or BPE tokenizer. With SD_VOCAB_ADD_SPECIAL, BOS is prepended
 * when add_bos and EOS appended when add_eos. *ids is malloc'd (caller frees; valid even
 * when *n_ids is 0). Invalid UTF-8 in BPE input becomes U+FFFD per bad byte (llama.cpp).
 * Errors: SD_ERR_OOM, SD_ERR_ARG (text over 2 GiB).
 */
int sd_vocab_tokenize(const sd_vocab *v, const char *text, size_t len, unsigned flags,
                      int32_t **ids, size_t *n_ids, sd_error *err);

/* ---- decode ---- */

/* Flags of the decoders (llama_detokenize's unparse_special / remove_special). */
#define SD_VOCAB_UNPARSE_SPECIAL 0x4u /* control/unknown tokens render their text */
#define SD_VOCAB_REMOVE_SPECIAL  0x8u /* detokenize drops the BOS/EOS add_special added */

/*
 * The bytes one token stands for (llama.cpp token_to_piece, lstrip 0): normal SPM tokens
 * with "▁" -> " ", byte tokens <0xNN> -> the byte, BPE normal tokens GPT-2-decoded,
 * user-defined tokens as written, control/unknown tokens "" (their text with
 * SD_VOCAB_UNPARSE_SPECIAL), unused/undefined "". Writes at most cap bytes; returns the
 * full length (call again with a larger buffer when it exceeds cap), -1 if id is out of
 * range.
 */
int sd_vocab_token_to_piece(const sd_vocab *v, int32_t id, unsigned flags, char *buf, size_t cap);

/*
 * Decode a sequence (llama_detokenize): the pieces concatenated, except that with
 * add_space_prefix one leading space of the FIRST token's piece is removed (a leading BOS
 * is that first token, unless SD_VOCAB_REMOVE_SPECIAL drops it), and vocabularies with
 * clean_spaces (BPE except deepseek-llm, qwen2, smollm, command-r, ...) apply llama.cpp's
 * clean-up: " ?" " !" " ." " ," lose the space, " ' " becomes "'", " 's" " 'm" " 're"
 * " 've" lose the space. Ids out of range: SD_ERR_ARG. *out is malloc'd, NUL-terminated.
 */
int sd_vocab_detokenize(const sd_vocab *v, const int32_t *ids, size_t n_ids, unsigned flags,
                        char **out, size_t *out_len, sd_error *err);

/*
 * Streaming detokenizer: fed token ids one at a time, it returns the text that is complete
 * UTF-8 so far. The stream is the concatenation of the tokens' pieces (token_to_piece with
 * the flags given; no first-token space removal, no clean-up: what llama.cpp's CLI prints).
 * A multi-byte character split across tokens (byte-fallback tokens, BPE bytes) is held
 * back until it is complete. Bytes that cannot become valid UTF-8 (RFC 3629) are passed
 * through raw at once, so the concatenation of every returned chunk and the flush equals
 * the concatenated pieces byte for byte; with SD_DETOK_REPLACE_INVALID each maximal invalid
 * subpart becomes one U+FFFD instead (always valid UTF-8 out). Flush returns what is held
 * back (an incomplete sequence at the end: raw, or U+FFFD with SD_DETOK_REPLACE_INVALID)
 * and resets the stream. Returned pointers are owned by the stream and valid until the next
 * call. Errors: SD_ERR_ARG (id out of range; the stream is unchanged), SD_ERR_OOM.
 */
#define SD_DETOK_REPLACE_INVALID 0x10u
typedef struct sd_detok sd_detok;
int sd_detok_init(const sd_vocab *v, unsigned flags, sd_detok **out, sd_error *err);
int sd_detok_push(sd_detok *d, int32_t id, const char **text, size_t *len, sd_error *err);
void sd_detok_flush(sd_detok *d, const char **text, size_t *len);
void sd_detok_free(sd_detok *d);

/* ---- chat templates (built-in formatters as llama.cpp llama-chat.cpp) ---- */

typedef struct sd_chat_msg {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} sd_chat_msg;

/*
 * Recognise a template: tmpl is either a template name (chatml, llama2, llama2-sys,
 * llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken,
 * mistral-v7, mistral-v7-tekken, phi3, zephyr, gemma, llama3, ...) or a Jinja template
 * text, classified by llama.cpp's llm_chat_detect_template markers. *name is the canonical
 * name. SD_ERR_UNSUPPORTED (message suggesting a name) when it is not recognised, or is
 * recognised as a template this build does not format.
 */
int sd_chat_template_detect(const char *tmpl, const char **name, sd_error *err);
/* Comma-separated names sd_chat_apply formats (for help texts). */
const char *sd_chat_template_names(void);
/*
 * Format messages with the template tmpl (a name or a Jinja text, as above) as llama.cpp's
 * llm_chat_apply_template does; add_generation_prompt appends the assistant header. No BOS
 * is written (tokenize with SD_VOCAB_ADD_SPECIAL adds it). A template text no built-in
 * recognises but that holds Jinja tags ("{{" or "{%") is rendered by the Jinja engine
 * (sd_chat_render, SD_CHAT_JINJA). *out malloc'd, NUL-terminated.
 * Errors: SD_ERR_UNSUPPORTED (template), SD_ERR_ARG (NULL role/content), SD_ERR_OOM.
 */
int sd_chat_apply(const char *tmpl, const sd_chat_msg *msgs, size_t n_msgs,
                  int add_generation_prompt, char **out, size_t *out_len, sd_error *err);

/* ---- Jinja chat templates (a subset of Jinja2, runtime/tokenizer/jinja_*.c) ---- */

/*
 * A template's text parsed once (sd_jinja_parse) and rendered over jansson values
 * (sd_jinja_render): text, {{ expr }}, {% if / elif / else %}, {% for a[, b] in x [if c] %}
 * with else and loop.index / index0 / revindex / revindex0 / first / last / length /
 * previtem / nextitem, {% set %} (plain, attribute of a namespace(), block), {% macro %},
 * {% filter %}, {% break %} / {% continue %}, {% generation %}, comments, `-` whitespace
 * control and the chat-template settings trim_blocks and lstrip_blocks; literals, lists,
 * dicts, tuples, attribute / index / slice access, `and or not`, comparisons, `in`, `+ - * /
 * // % **`, `~`, `x if c else y`; the filters and tests chat templates use (trim, tojson,
 * length, upper, lower, default, join, items, string, replace, selectattr, map, ...;
 * defined, none, string, mapping, ...), string / dict / list methods (strip, split,
 * startswith, items, get, append, ...), and the globals range, namespace, dict,
 * raise_exception and strftime_now. Undefined names are empty and false, as Jinja's
 * default. Anything else is an SD_ERR_FORMAT (parse) or SD_ERR_UNSUPPORTED (render) error
 * naming the line and the construct; a template's raise_exception is SD_ERR_ARG with its
 * message. Rendering is bounded (sd_jinja_limits): a hostile template stops with an error,
 * never hangs, overflows the stack or exhausts memory.
 */
struct json_t; /* jansson's value */
typedef struct sd_jinja sd_jinja;
typedef struct sd_jinja_limits {
    size_t max_output; /* bytes of rendered text, also the longest string a template builds */
    int32_t max_depth; /* nesting while evaluating: expressions, blocks, macro calls */
    int64_t max_steps; /* evaluation steps (expressions, statements, loop iterations) */
    int64_t now;       /* strftime_now's clock, seconds since the epoch (0: the current time) */
} sd_jinja_limits;
sd_jinja_limits sd_jinja_default_limits(void); /* 4 MiB, 256, 5,000,000, 0 */
int sd_jinja_parse(const char *src, size_t len, sd_jinja **out, sd_error *err);
/* Render with vars (a JSON object: the template's global names; not modified). *out
 * malloc'd, NUL-terminated. lim NULL: the defaults. */
int sd_jinja_render(const sd_jinja *t, const struct json_t *vars, const sd_jinja_limits *lim,
                    char **out, size_t *out_len, sd_error *err);
void sd_jinja_free(sd_jinja *t);

/* ---- chat rendering: built-in formatters and Jinja templates, one entry point ---- */

typedef enum sd_chat_mode {
    /* A built-in formatter where the template is a name, or a Jinja text it recognises and
     * the request is plain (string contents, no tools, thinking on, no extra variables);
     * otherwise the Jinja engine. */
    SD_CHAT_AUTO = 0,
    /* The Jinja engine for every template text (llama-server's --jinja); a name stays a
     * built-in; a template the engine cannot run falls back to a built-in that recognises
     * it (plain requests only). */
    SD_CHAT_JINJA = 1,
    SD_CHAT_BUILTIN = 2, /* built-in formatters only (--no-jinja) */
} sd_chat_mode;

typedef struct sd_chat_inputs {
    /* [{"role": ..., "content": string | null | [{"type": "text", "text": ...}], ...}]:
     * every field is passed to a Jinja template (tool_calls, reasoning_content, ...);
     * content parts are joined with "\n". */
    const struct json_t *messages;
    const struct json_t *tools; /* NULL or an array (the template's `tools`) */
    const struct json_t *extra; /* NULL or an object: more template variables (names
                                 * the renderer sets itself keep their values) */
    int add_generation_prompt;  /* 1 (default): end with the assistant header */
    /* 1: the last message (an assistant's) is continued: the others are rendered with the
     * assistant header and its content follows (parts joined with "\n\n"). */
    int continue_final;
    int enable_thinking;   /* 1 (default); 0: the template's no-thinking form */
    const char *bos_token; /* the templates' bos_token / eos_token ("" default) */
    const char *eos_token;
    int strip_bos; /* 1: drop a leading bos_token (the tokenizer adds BOS) */
    int64_t now;   /* strftime_now's clock (0: the current time) */
    sd_chat_mode mode;
} sd_chat_inputs;
sd_chat_inputs sd_chat_default_inputs(void);
/* 1 when s is a built-in template's name (chatml, llama3, ...). */
int sd_chat_template_is_name(const char *s);
/*
 * Render a chat with tmpl (a built-in name or a template text) as in->mode says. *out
 * malloc'd, NUL-terminated. Errors: SD_ERR_ARG (messages not an array of objects with a
 * string role; a template's raise_exception, with its message), SD_ERR_UNSUPPORTED /
 * SD_ERR_FORMAT (a template neither a built-in nor the Jinja engine can render, naming
 * the construct and line), SD_ERR_OOM.
 */
int sd_chat_render(const char *tmpl, const sd_chat_inputs *in, char **out, size_t *out_len,
                   sd_error *err);

/* ---- pairing ---- */

/*
 * Check that a draft vocabulary pairs with a target vocabulary (llama.cpp's speculative
 * rule): same model type, same pre-tokenizer, same add_bos/add_eos, same BOS/EOS/EOT/EOM
 * ids, same merges (count and every rule), token counts differing by at most
 * SD_VOCAB_MAX_SIZE_DIFF, and equal token text for every id both have. On mismatch
 * SD_ERR_MISMATCH with one line naming both files and the first differing field or id.
 */
#define SD_VOCAB_MAX_SIZE_DIFF 128
int sd_vocab_check_pair(const sd_vocab *target, const char *target_path, const sd_vocab *draft,
                        const char *draft_path, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_VOCAB_H */
