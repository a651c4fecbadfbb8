/*
 * draft/suffix_impl.h: PRIVATE to draft/ (suffix_index.c, suffix.c, suffix_cache.c): the
 * pieces of the suffix index the proposer and the cross-request cache use besides the
 * face (the index's layout stays in suffix_index.c).
 */
#ifndef SD_SUFFIX_IMPL_H
#define SD_SUFFIX_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "draft/sd_draft.h"

/* A follower of a state: the transition by `tok` to state `to`, taken `cnt` times in the
 * text (the occurrences of the state's strings followed by tok), the most recent at end
 * position `last`. */
typedef struct sx_follower {
    int32_t tok, to, cnt, last;
} sx_follower;

/* The state of the longest suffix of the indexed text that also ends earlier (-1: none,
 * an empty index), *len its length (the match length; 0 with -1). O(1). */
int32_t suffix_index_match_state(const sd_suffix_index *ix, int32_t *len);

/* The most frequent follower of state s (ties: the most recent end) into *best, *total the
 * count of all its followers. Returns 0, or -1 when s has no follower (*total 0). */
int suffix_index_best_edge(sd_suffix_index *ix, int32_t s, sx_follower *best, int64_t *total);

/* The `width` most frequent followers of state s (ties: the most recent end), ranked, into
 * top[width] (width 1 .. SD_MAX_DRAFT), *total the count of all its followers. Returns how
 * many it wrote (fewer when s has fewer followers). */
int32_t suffix_index_top_edges(sd_suffix_index *ix, int32_t s, int32_t width, sx_follower *top,
                               int64_t *total);

/* The state's occurrence count and most recent end (its tags pushed by the access). */
int32_t suffix_state_count(sd_suffix_index *ix, int32_t s, int32_t *last);

/* The bytes sd_suffix_index_init allocates for cap tokens (sd_suffix_index_bytes). */
size_t suffix_index_bytes_for(int32_t cap);

/* The state of the longest suffix of q[0 .. n) that occurs in the index, *len its length
 * (0: the root). O(n) amortised. */
int32_t suffix_index_walk(const sd_suffix_index *ix, const int32_t *q, int32_t n, int32_t *len);

/*
 * The most frequent follower chain from state s (no limit but k and tok_limit): at each
 * step the follower with the largest count (ties: the most recent end), at most k tokens
 * into tokens[k], never a token >= tok_limit (the chain stops there); q[i] = its count /
 * the count of all followers at step i, ends[i] the most recent end position of the
 * chain's string through token i. Returns the tokens walked.
 */
int32_t suffix_index_follow(sd_suffix_index *ix, int32_t s, int32_t k, int32_t tok_limit,
                            int32_t *tokens, double *q, int32_t *ends);

/*
 * The proposal chain (see sd_suffix_params) from state s, reached by a match of length m:
 * at most k tokens into tokens[k], never a token >= tok_limit (the cache's document
 * separators: the chain stops there). *score: the sum over the drafted tokens of the
 * chain's probability up to each (its expected accepted length under the counts); *prob:
 * the chain's probability; *last_end: the most recent end position of the chain's last
 * token (0: none drafted); ends[k] (NULL: not wanted): each drafted token's, i.e. the
 * position just past an earlier occurrence of the chain up to that token.
 */
int32_t suffix_index_chain(sd_suffix_index *ix, int32_t s, int32_t m, const sd_suffix_params *p,
                           int32_t k, int32_t tok_limit, int32_t *tokens, double *score,
                           double *prob, int32_t *last_end, int32_t *ends);

/* The cache's raw chain for the context ctx[0 .. n_ctx) (its last 64 tokens matched, *match
 * the match length; suffix_index_follow from there, stopping at a document's end), for a
 * proposer's own length rule; suffix_cache_touch(end) then marks the document holding the
 * end position `end` (ends[i] of the token drafted last) used. */
int32_t suffix_cache_follow(sd_suffix_cache *c, const int32_t *ctx, int32_t n_ctx, int32_t k,
                            int32_t *tokens, double *q, int32_t *ends, int32_t *match);
void suffix_cache_touch(sd_suffix_cache *c, int32_t end);

/*
 * The byte-level matcher (suffix_bytes.c): the committed tokens' bytes (their pieces in a
 * token-bytes table, not owned), at most tok_cap tokens and 8 bytes a token on average;
 * a token without bytes (a control token, an id past the table) stands for 0xff and its id
 * (4 bytes), a negative id or a token past the capacity stops the indexing (append returns
 * -1) until a truncate below it. The boundary before token j (1 <= j < n) is where the
 * proposer can resume the text: sx_bytes_match returns the j whose preceding bytes share
 * the longest suffix with all the bytes (at most SX_BYTES_MAX, ties: the largest j; at
 * least min_bytes and 4), *len that length, or -1 (none, or indexing stopped).
 * sx_bytes_tokens_within: how many of the last tokens lie inside the last n_bytes bytes.
 */
#define SX_BYTES_MAX 256
typedef struct sx_bytes sx_bytes;
int sx_bytes_init(const sd_grammar_vocab *tv, int32_t tok_cap, sx_bytes **out, sd_error *err);
void sx_bytes_free(sx_bytes *x); /* NULL accepted */
void sx_bytes_truncate(sx_bytes *x, int32_t n_keep);
int sx_bytes_append(sx_bytes *x, int32_t tok);
int32_t sx_bytes_n_tokens(const sx_bytes *x);
int32_t sx_bytes_match(const sx_bytes *x, int32_t min_bytes, int32_t *len);
int32_t sx_bytes_tokens_within(const sx_bytes *x, int32_t n_bytes);

#endif /* SD_SUFFIX_IMPL_H */
