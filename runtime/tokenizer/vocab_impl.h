/*
 * The vocabulary record and the functions the tokenizer's files share (private to
 * runtime/tokenizer/; the face is sd_vocab.h).
 *
 *   vocab_load.c   load from GGUF (model type, tokens, types, special ids, flags),
 *                  accessors, the draft/target pair check
 *   vocab_lookup.c the text -> id lookups and the id buffer every tokenizer file shares
 *   special.c  llama.cpp's text-based special-token fixups (EOT/EOM/FIM/EOG), the special
 *              token cache, partitioning text on special tokens
 *   tokenize.c sd_vocab_tokenize: partition, then SPM or BPE per raw fragment
 *   spm.c      SentencePiece bigram merging
 *   bpe.c      merges (load, ranks) and byte-level BPE merging of one word
 *   pretok.c   the pre-tokenizers selected by tokenizer.ggml.pre
 *   unicode.c  UTF-8, code point classes (unicode_data.c, generated), GPT-2 byte mapping
 *   detok.c    token_to_piece, detokenize, the streaming detokenizer
 *   chat.c     built-in chat templates
 */
#ifndef SD_TOKENIZER_VOCAB_IMPL_H
#define SD_TOKENIZER_VOCAB_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/tokenizer/sd_vocab.h"

/* Token attributes as llama.cpp's llama_token_attr (bit flags: llama.cpp's text-based
 * fixups OR CONTROL into a NORMAL token, and tokenize/decode test bits). */
enum {
    ATTR_UNDEFINED = 0,
    ATTR_UNKNOWN = 1 << 0,
    ATTR_UNUSED = 1 << 1,
    ATTR_NORMAL = 1 << 2,
    ATTR_CONTROL = 1 << 3,
    ATTR_USER_DEFINED = 1 << 4,
    ATTR_BYTE = 1 << 5,
};

/* Pre-tokenizer families (llama.cpp's LLAMA_VOCAB_PRE_TYPE_*, those we implement). */
typedef enum pre_type {
    PRE_NONE = 0, /* SPM: no pre-tokenizer */
    PRE_DEFAULT,
    PRE_GPT2,
    PRE_LLAMA3,
    PRE_QWEN2,
    PRE_STARCODER, /* also smollm, refact, command-r, codeshell, exaone, minerva */
    PRE_FALCON,
    PRE_DEEPSEEK_LLM,
    PRE_DEEPSEEK_CODER,
    PRE_QWEN35, /* Qwen2's splitter with letter runs that take combining marks (\p{M}) */
} pre_type;

/* One merge rule: left + right -> result, with its rank (line index in the file). */
typedef struct merge_rule {
    int32_t left, right, result;
} merge_rule;

typedef struct merge_slot {
    uint64_t key; /* (left << 32) | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t result;
} merge_slot;

struct sd_vocab {
    char *path;         /* the GGUF file, for messages */
    sd_vocab_type type; /* SPM or BPE */
    char *pre_name;     /* tokenizer.ggml.pre as written, or NULL */
    pre_type pre;
    int32_t n;

    char *arena;    /* all token texts, each NUL-terminated */
    size_t *off;    /* text of id i: arena + off[i], len[i] bytes */
    uint32_t *len;  /* (empty texts are stored as "[EMPTY_<id>]", as llama.cpp) */
    float *score;   /* SPM merge scores */
    uint8_t *ttype; /* tokenizer.ggml.token_type as stored (1..6; others 0) */
    uint16_t *attr; /* ATTR_* after llama.cpp's fixups */
    struct ht_slot {
        int32_t id; /* -1 = empty */
        uint32_t h; /* high bits of the text's hash: most misses skip the text compare */
    } * ht;         /* text -> id, open addressing */
    size_t ht_mask;
    uint32_t max_len;
    int32_t byte_tok[256]; /* SPM: <0xNN> (or the 1-byte text); BPE: the GPT-2 char */

    int32_t bos, eos, eot, eom, unk, pad;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    int add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;

    int32_t *special; /* CONTROL | USER_DEFINED | UNKNOWN ids, longest text first */
    int32_t n_special;
    /* the specials partitioning may use, [0] without parse_special, [1] with: first bytes
     * of their texts, and their distinct lengths (n_sp_lens > SP_MAX_LENS: too many) */
#define SP_MAX_LENS 64
    uint8_t sp_first[2][256];
    uint32_t sp_lens[2][SP_MAX_LENS];
    int n_sp_lens[2];
    int32_t *eog; /* end-of-generation ids, ascending */
    int32_t n_eog;

    merge_rule *merges; /* by rank */
    int32_t n_merges;
    merge_slot *mt; /* (left, right) -> rank, result */
    size_t mt_mask;

    char *chat_template; /* tokenizer.chat_template, NUL-terminated, or NULL */
};

#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_MERGES "tokenizer.ggml.merges"

/* Token text and lookup (vocab_lookup.c). */
static inline const char *vocab_text(const sd_vocab *v, int32_t id) {
    return v->arena + v->off[id];
}
int32_t vocab_lookup(const sd_vocab *v, const char *s, size_t n);
/* The hash of the table (FNV-1a 64, then h ^ h >> 29), in steps so that the hash of a
 * concatenation continues the hash of its first part; and a lookup with it precomputed. */
#define VOCAB_HASH_INIT 1469598103934665603ull
static inline uint64_t vocab_hash_more(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}
static inline uint64_t vocab_hash_end(uint64_t h) {
    return h ^ (h >> 29);
}
uint64_t vocab_hash(const char *s, size_t n);
int32_t vocab_lookup_hashed(const sd_vocab *v, const char *s, size_t n, uint64_t h);

/* special.c: llama.cpp's text-based special-token detection (sets eot/eom/fim ids when
 * the file has none, ORs CONTROL into the tokens found, collects the EOG set), then the
 * cache of special tokens for partitioning. */
int vocab_fixup_specials(sd_vocab *v, sd_error *err);
int vocab_build_special_cache(sd_vocab *v, sd_error *err);

/* A fragment of the text to tokenize: a special token, or raw text [off, off + len). */
typedef struct frag {
    int32_t id; /* -1: raw text */
    size_t off, len;
} frag;

typedef struct frag_buf {
    frag *p;
    size_t n, cap;
} frag_buf;

/* tokenizer_st_partition: text[0..len) into fragments (0 or SD_ERR_OOM). */
int vocab_partition(const sd_vocab *v, const char *text, size_t len, int parse_special,
                    frag_buf *out);

/* Growing id list. */
typedef struct ids_buf {
    int32_t *p;
    size_t n, cap;
} ids_buf;
int ids_push(ids_buf *b, int32_t id); /* 0 or -1 on OOM (vocab_lookup.c) */

/* spm.c: tokenize one raw fragment (prefix: prepend " " first, add_space_prefix). */
int spm_tokenize(const sd_vocab *v, const char *s, size_t n, int prefix, ids_buf *out,
                 sd_error *err);

/* bpe.c */
int bpe_load_merges(sd_vocab *v, const sd_gguf *g, sd_error *err);
int32_t bpe_rank(const sd_vocab *v, int32_t left, int32_t right, int32_t *result);
/* Tokenize one raw fragment: pre-tokenize, byte-encode each word, merge. */
int bpe_tokenize(const sd_vocab *v, const char *s, size_t n, ids_buf *out, sd_error *err);

/* pretok.c: split cps[0..n) into words; *lens (malloc'd, caller frees) holds the word
 * lengths in code points, in order, summing to n. */
int pretok_split(pre_type pre, const uint32_t *cps, size_t n, size_t **lens, size_t *n_lens);
/* tokenizer.ggml.pre value -> family and llama.cpp's per-value flags; -1 if unknown. */
int pretok_from_name(const char *name, size_t len, pre_type *pre, int *add_bos, int *clean_spaces,
                     int *ignore_merges);
const char *pretok_supported_names(void);

#endif /* SD_TOKENIZER_VOCAB_IMPL_H */
