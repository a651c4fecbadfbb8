/*
 * draft/suffix_impl.h: PRIVATE to draft/ (suffix_index.c, suffix.c, suffix_cache.c): the
 * suffix index's layout and the pieces the proposer and the cross-request cache use
 * besides the face.
 */
#ifndef SD_SUFFIX_IMPL_H
#define SD_SUFFIX_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "draft/sd_draft.h"

typedef struct sx_state {
    int32_t len;  /* longest string of the class */
    int32_t link; /* suffix link; -1 for the root (state 0, the empty string) */
    int32_t edge; /* first out-transition, -1: none */
} sx_state;

typedef struct sx_edge {
    int32_t from, tok, to;
    int32_t next; /* next out-transition of `from`, -1: none */
} sx_edge;

/* A link-cut tree node (per state). par: the splay parent, or for the root of a splay
 * tree the path parent (the tree parent of the path's top), -1: none. */
typedef struct sx_node {
    int32_t ch[2], par;
    int32_t cnt;  /* occurrences of the state's strings (valid once the tags above are pushed) */
    int32_t last; /* the most recent end position */
    int32_t add;  /* pending: add to cnt in the subtree */
    int32_t set;  /* pending: set last in the subtree (-1: none) */
} sx_node;

struct sd_suffix_index {
    int32_t cap; /* tokens it holds at most */
    int32_t n_toks;
    int32_t *toks; /* [cap] */
    sx_state *st;  /* [2 cap + 1] */
    sx_node *nd;   /* [2 cap + 1] */
    int32_t n_st, last;
    sx_edge *ed; /* [3 cap + 4] */
    int32_t n_ed;
    int32_t *slot; /* [mask + 1] edge index, -1: empty */
    size_t mask;
    int32_t *stack; /* [2 cap + 1] splay scratch */
};

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

#endif /* SD_SUFFIX_IMPL_H */
