/*
 * runtime/grammar: constrained decoding. A GBNF grammar (llama.cpp's grammar syntax)
 * compiled into an immutable sd_grammar that many sequences share; a per-sequence
 * sd_grammar_state (a pushdown automaton over Unicode code points: a set of stacks of
 * grammar positions, plus the bytes of a code point that a token left incomplete); the
 * allowed-token set of a state over a vocabulary (sd_grammar_mask, a walk of a trie of
 * the vocabulary's token bytes, sd_grammar_vocab, built once per vocabulary).
 * May include runtime/base only: token bytes come from the caller, so the part knows
 * nothing of tokenizers or models.
 *
 * Syntax (what sd_grammar_parse accepts):
 *   rule      name ::= alternatives        name: [a-zA-Z0-9-]+; rules end at the line end
 *                                          unless the line ends inside ( ) or after ::= / |
 *   alts      seq | seq | ...              a seq may be empty
 *   items     "literal"  [a-z0-9_]  [^"\\]  .  name  ( alts )
 *   repeat    x*  x+  x?  x{m}  x{m,}  x{m,n}   (m, n <= SD_GRAMMAR_MAX_REPEAT)
 *   escapes   \n \r \t \\ \" \] \[ \- \/ \xHH \uHHHH \UHHHHHHHH (in literals and classes)
 *   comments  # to the end of the line
 * `.` is any code point. Left recursion (a rule that can reach itself without consuming a
 * character) is refused at parse time, so a state's stacks are always finite.
 * Matching is over UTF-8: a token may end inside a code point (the state then holds the
 * bytes so far and allows only continuations that can complete a code point some stack
 * accepts); invalid UTF-8 is never allowed.
 */
#ifndef SD_GRAMMAR_H
#define SD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest m or n of a {m,n} repetition. */
#define SD_GRAMMAR_MAX_REPEAT 1024

typedef struct sd_grammar sd_grammar;
typedef struct sd_grammar_state sd_grammar_state;
typedef struct sd_grammar_vocab sd_grammar_vocab;

/*
 * Parse and compile GBNF text gbnf[0 .. len) with start rule root (NULL: "root").
 * *out is immutable afterwards (share it between threads and sequences).
 * Errors: SD_ERR_FORMAT "grammar:LINE:COL: what was expected" (syntax, an undefined rule,
 * a rule defined twice, left recursion naming the rule, a repetition bound too large),
 * SD_ERR_ARG (NULL arguments, no rule named root), SD_ERR_OOM.
 */
int sd_grammar_parse(const char *gbnf, size_t len, const char *root, sd_grammar **out,
                     sd_error *err);
void sd_grammar_free(sd_grammar *g); /* NULL accepted */

/* A built-in grammar: any JSON value whose top level is an object (OpenAI's
 * response_format {"type": "json_object"}), whitespace limited so a model cannot loop in
 * it forever. NUL-terminated GBNF, rule "root". */
extern const char *const sd_grammar_json_object;

/* ---- per-sequence state ---- */

/* A state at the start of g (g must outlive it). Errors: SD_ERR_OOM. */
int sd_grammar_state_init(const sd_grammar *g, sd_grammar_state **out, sd_error *err);
void sd_grammar_state_free(sd_grammar_state *s); /* NULL accepted */
/* A new state equal to src. Errors: SD_ERR_OOM (*out NULL). */
int sd_grammar_state_clone(const sd_grammar_state *src, sd_grammar_state **out, sd_error *err);
/* dst := src (same grammar). Errors: SD_ERR_OOM (dst then unchanged). */
int sd_grammar_state_copy(sd_grammar_state *dst, const sd_grammar_state *src, sd_error *err);

/* 1 if bytes[0 .. len) (a token's bytes; len 0: no bytes, allowed) can follow what s has
 * consumed: after them some stack is still alive (a complete match or a viable prefix). */
int sd_grammar_allows(sd_grammar_state *s, const char *bytes, size_t len);
/* Consume bytes[0 .. len). Errors: SD_ERR_ARG when the grammar refuses them (s then
 * unchanged), SD_ERR_OOM. */
int sd_grammar_advance(sd_grammar_state *s, const char *bytes, size_t len, sd_error *err);
/* 1 if what s consumed is a complete sentence of the grammar (no code point pending):
 * the end of text / end of turn may come now. */
int sd_grammar_accepting(const sd_grammar_state *s);
/* 1 if nothing more can follow (every stack is complete): only the end may come. */
int sd_grammar_finished(const sd_grammar_state *s);

/* ---- the allowed tokens of a vocabulary ---- */

/*
 * The token bytes of a vocabulary, in a trie (copied): piece i of len[i] bytes for
 * token i (len 0: a token that never matches text, e.g. a control token).
 * Errors: SD_ERR_ARG, SD_ERR_OOM.
 */
int sd_grammar_vocab_init(const char *const *pieces, const size_t *lens, int32_t n_vocab,
                          sd_grammar_vocab **out, sd_error *err);
void sd_grammar_vocab_free(sd_grammar_vocab *v); /* NULL accepted */
int32_t sd_grammar_vocab_size(const sd_grammar_vocab *v);
/* Token id's bytes (*len of them); NULL if id is out of range. */
const char *sd_grammar_vocab_piece(const sd_grammar_vocab *v, int32_t id, size_t *len);

/*
 * The tokens allowed after s: bit id of bits (uint64 [(n_vocab + 63) / 64], id's bit is
 * bits[id / 64] >> (id % 64) & 1) is set when token id's bytes are non-empty and
 * sd_grammar_allows them; the end ids end_ids[0 .. n_end) (EOS, end of turn) are set
 * exactly when sd_grammar_accepting(s), others with no bytes never. Returns the number
 * of bits set, or -1 on allocation failure (bits then undefined).
 */
int64_t sd_grammar_mask(sd_grammar_state *s, const sd_grammar_vocab *v, const int32_t *end_ids,
                        int32_t n_end, uint64_t *bits);

/* 1 if token id may follow s (as its bit in sd_grammar_mask), given the same end ids. */
int sd_grammar_allows_token(sd_grammar_state *s, const sd_grammar_vocab *v, int32_t id,
                            const int32_t *end_ids, int32_t n_end);

/* ---- JSON Schema -> GBNF (schema.c) ----
 *
 * The structured-output requests (response_format json_schema, llama-server's json_schema
 * field, the CLI's --json-schema) compile a JSON Schema into GBNF here, then parse it with
 * sd_grammar_parse. Supported: type (one or a list: object, array, string, number,
 * integer, boolean, null), properties / required / additionalProperties (false, true or a
 * schema; absent: no extra keys), items / prefixItems / minItems / maxItems, minLength /
 * maxLength, pattern (a regex subset: literals, ., classes, \d \w \s, groups, |, ? * +
 * {m,n}, anchors at the ends), format date / time / date-time / uuid, minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (integers exactly; numbers: the bounds rounded inward
 * to integers, fractions kept inside), enum, const, anyOf, oneOf (as anyOf), allOf of
 * objects, $ref to #/$defs/... and #/definitions/... (recursion allowed), nullable.
 * Annotations (title, description, default, examples, $schema, $id, $comment, ...) are
 * ignored; every other keyword is refused with one line naming it and its place.
 * The grammar accepts a subset of what the schema accepts: properties in schema order,
 * whitespace bounded (a space, or a newline and at most 16 spaces, between tokens),
 * integer parts of at most 15 digits, so a generation cannot run on spaces or digits.
 */

/* The GBNF grammar (start rule "root") of the JSON texts valid against the JSON Schema
 * schema[0 .. len). *gbnf is malloc'd, NUL-terminated (the caller frees it). Errors:
 * SD_ERR_ARG (not JSON, an unsupported keyword: e.g. "json_schema: #/properties/tags:
 * 'uniqueItems' is not supported"), SD_ERR_OOM. */
int sd_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_GRAMMAR_H */
