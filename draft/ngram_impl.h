/*
 * draft/ngram_impl.h: PRIVATE to draft/ (ngram_index.c, ngram.c, ngram_cache.c, head.c):
 * the n-gram index the lookup proposer and the lookup cache share (ngram_index.c; how it
 * works: the top of that file), and the files' checksum.
 */
#ifndef SD_NGRAM_IMPL_H
#define SD_NGRAM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "draft/sd_draft.h"

typedef struct ngram_slot {
    uint64_t key; /* 0: empty */
    int32_t pos;  /* most recent follower position with this key; -1: none (rolled back) */
} ngram_slot;

typedef struct ngram_index {
    int32_t n_min, n_max, n_sizes;
    int32_t cap;    /* tokens the mirror can hold */
    int32_t *toks;  /* [cap] the indexed tokens (-1: separator) */
    int32_t n_toks; /* tokens held; followers 1 .. n_toks - 1 are indexed */
    int32_t *prev;  /* [cap, n_sizes]: the slot's position before follower j was inserted */
    ngram_slot *slots;
    size_t mask;  /* slots - 1 (a power of two) */
    size_t used;  /* occupied slots */
    size_t limit; /* rebuild when used would pass this (3/4 of the slots) */
} ngram_index;

/* An empty index for up to cap tokens and n-gram sizes n_min .. n_max (checked by the
 * caller). Errors: SD_ERR_OOM. */
int ngram_index_init(ngram_index *ix, int32_t n_min, int32_t n_max, int32_t cap, sd_error *err);
void ngram_index_free(ngram_index *ix);
/* Keep the first n_keep tokens (undoing the removed followers newest first). */
void ngram_index_truncate(ngram_index *ix, int32_t n_keep);
/* Append one token (-1: separator). -1 when full (nothing changes), else 0. */
int ngram_index_append(ngram_index *ix, int32_t tok);
/* Make the index hold ctx[0 .. min(n, cap)): keep the common prefix, roll back the
 * rest, append the new tokens. */
void ngram_index_sync(ngram_index *ix, const int32_t *ctx, int32_t n);
/* Longest n in [n_min, n_max] whose n-gram q[n_q - n .. n_q) occurs in the index with a
 * follower; *pos = the most recent such follower position. 0 if none. */
int32_t ngram_index_lookup(const ngram_index *ix, const int32_t *q, int32_t n_q, int32_t *pos);

/* The most recent follower position whose key is that of the n-gram q[n_q - n .. n_q)
 * (n in [n_min, n_max]), -1: none; a hash collision can give a position whose n-gram
 * differs (the caller compares the tokens). ngram_index_older: the position before j
 * with the same key for size n, -1: none. */
int32_t ngram_index_newest(const ngram_index *ix, const int32_t *q, int32_t n_q, int32_t n);
int32_t ngram_index_older(const ngram_index *ix, int32_t j, int32_t n);

/* Attach a lookup cache's index to an n-gram proposer (consulted when the context has
 * no match). -1 if p is not an n-gram proposer or the n-gram sizes differ. */
int ngram_proposer_set_cache(sd_proposer *p, const ngram_index *cache);

/* The index of a lookup cache (ngram_cache.c, which also attaches it to a proposer:
 * sd_proposer_ngram_set_cache). */
const ngram_index *ngram_cache_index(const sd_ngram_cache *c);

#endif /* SD_NGRAM_IMPL_H */
