/*
 * draft/suffix_cache.c: the cross-request suffix cache (see sd_draft.h).
 *
 * One suffix index over the cached documents (earlier requests' prompts and outputs),
 * each followed by its own separator id (n_vocab + its index in the cache: an id that
 * occurs once, so no match spans two documents, and that no proposal ever drafts). Its
 * capacity is fixed from the byte budget when the cache is made, as are the document
 * records, so the cache never grows past the budget. A document that does not fit makes
 * room by dropping the least recently used documents (added, or the source of a
 * proposal) until a quarter of the capacity is free, then rebuilding the index from the
 * rest in their order: O(capacity log capacity) per rebuild, at most once per quarter of
 * the capacity added.
 */
#include <stdlib.h>
#include <string.h>

#include "draft/suffix_impl.h"

struct sd_suffix_cache {
    int32_t n_vocab;
    size_t max_bytes;
    sd_suffix_index *ix;
    int32_t cap;      /* the index's capacity (tokens + separators) */
    int32_t max_docs; /* records allocated: a document takes at least 2 positions */
    int32_t n_docs;
    int32_t *start;   /* [max_docs] the position of each document's first token */
    int32_t *len;     /* [max_docs] its tokens (without the separator) */
    uint64_t *used;   /* [max_docs] its last use (added or proposed from) */
    int32_t *scratch; /* [cap] the documents while rebuilding */
    uint64_t clock;
};

static size_t cache_bytes_for(int32_t cap) {
    const size_t docs = (size_t)cap / 2 + 1;
    return sizeof(sd_suffix_cache) + suffix_index_bytes_for(cap) +
           docs * (2 * sizeof(int32_t) + sizeof(uint64_t)) + (size_t)cap * sizeof(int32_t);
}

int sd_suffix_cache_init(int32_t n_vocab, size_t max_bytes, sd_suffix_cache **out, sd_error *err) {
    *out = NULL;
    if (n_vocab < 1 || n_vocab > INT32_MAX / 2)
        return sd_errorf(err, SD_ERR_ARG, "suffix cache: n_vocab = %d out of range", n_vocab);
    /* The largest capacity that fits (the bytes grow with it; the hash table in steps). */
    int32_t lo = 0, hi = (INT32_MAX - 8) / 3;
    /* (separators n_vocab + d, d <= hi / 2, stay below INT32_MAX: n_vocab <= INT32_MAX / 2) */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (cache_bytes_for(mid) <= max_bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo < 16)
        return sd_errorf(err, SD_ERR_ARG,
                         "suffix cache: %zu bytes hold too few tokens (%d; at least 16)", max_bytes,
                         lo);
    sd_suffix_cache *c = calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "suffix cache: out of memory");
    c->n_vocab = n_vocab;
    c->max_bytes = max_bytes;
    c->cap = lo;
    c->max_docs = lo / 2 + 1;
    c->start = malloc((size_t)c->max_docs * sizeof *c->start);
    c->len = malloc((size_t)c->max_docs * sizeof *c->len);
    c->used = malloc((size_t)c->max_docs * sizeof *c->used);
    c->scratch = malloc((size_t)lo * sizeof *c->scratch);
    int rc = c->start && c->len && c->used && c->scratch
                 ? sd_suffix_index_init(lo, &c->ix, err)
                 : sd_errorf(err, SD_ERR_OOM, "suffix cache: out of memory");
    if (rc) {
        sd_suffix_cache_free(c);
        return rc;
    }
    *out = c;
    return SD_OK;
}

void sd_suffix_cache_free(sd_suffix_cache *c) {
    if (!c) return;
    sd_suffix_index_free(c->ix);
    free(c->start);
    free(c->len);
    free(c->used);
    free(c->scratch);
    free(c);
}

int32_t sd_suffix_cache_n_docs(const sd_suffix_cache *c) {
    return c->n_docs;
}
int64_t sd_suffix_cache_n_tokens(const sd_suffix_cache *c) {
    int64_t n = 0;
    for (int32_t d = 0; d < c->n_docs; d++)
        n += c->len[d];
    return n;
}
int32_t sd_suffix_cache_capacity(const sd_suffix_cache *c) {
    return c->cap;
}
size_t sd_suffix_cache_bytes(const sd_suffix_cache *c) {
    return cache_bytes_for(c->cap);
}

/* Keep the documents kept[d] != 0 (in their order) and rebuild the index for them. */
static void rebuild(sd_suffix_cache *c, const uint8_t *kept) {
    const int32_t *t = sd_suffix_index_tokens(c->ix);
    int32_t n = 0, nd = 0;
    for (int32_t d = 0; d < c->n_docs; d++) {
        if (!kept[d]) continue;
        memcpy(c->scratch + n, t + c->start[d], (size_t)c->len[d] * sizeof *t);
        c->start[nd] = n;
        c->len[nd] = c->len[d];
        c->used[nd] = c->used[d];
        n += c->len[d];
        nd++;
    }
    sd_suffix_index_clear(c->ix);
    int32_t o = 0;
    for (int32_t d = 0; d < nd; d++) {
        for (int32_t i = 0; i < c->len[d]; i++)
            sd_suffix_index_append(c->ix, c->scratch[o + i]);
        c->start[d] = sd_suffix_index_n_tokens(c->ix) - c->len[d];
        sd_suffix_index_append(c->ix, c->n_vocab + d); /* its separator */
        o += c->len[d];
    }
    c->n_docs = nd;
}

int sd_suffix_cache_add(sd_suffix_cache *c, const int32_t *toks, int32_t n, sd_error *err) {
    if (n < 0 || (n > 0 && !toks))
        return sd_errorf(err, SD_ERR_ARG, "suffix cache: bad document (%d tokens)", n);
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= c->n_vocab)
            return sd_errorf(err, SD_ERR_ARG,
                             "suffix cache: token %d of the document is %d, outside [0, %d)", i,
                             toks[i], c->n_vocab);
    if (n == 0) return SD_OK;
    if (n > c->cap - 1) { /* the newest part of a document longer than the cache */
        toks += n - (c->cap - 1);
        n = c->cap - 1;
    }
    const int32_t used = sd_suffix_index_n_tokens(c->ix);
    if (used + n + 1 > c->cap || c->n_docs == c->max_docs) {
        /* Drop the least recently used documents until this one and a quarter of the
         * capacity fit (or none is left). */
        uint8_t *kept = malloc((size_t)c->n_docs + 1);
        if (!kept) return sd_errorf(err, SD_ERR_OOM, "suffix cache: out of memory");
        memset(kept, 1, (size_t)c->n_docs + 1);
        int64_t need = (int64_t)n + 1 + c->cap / 4, have = c->cap - used;
        int32_t left = c->n_docs;
        while ((have < need || left == c->max_docs) && left > 0) {
            int32_t lru = -1;
            for (int32_t d = 0; d < c->n_docs; d++)
                if (kept[d] && (lru < 0 || c->used[d] < c->used[lru])) lru = d;
            kept[lru] = 0;
            have += c->len[lru] + 1;
            left--;
        }
        rebuild(c, kept);
        free(kept);
    }
    for (int32_t i = 0; i < n; i++)
        sd_suffix_index_append(c->ix, toks[i]);
    c->start[c->n_docs] = sd_suffix_index_n_tokens(c->ix) - n;
    c->len[c->n_docs] = n;
    c->used[c->n_docs] = ++c->clock;
    sd_suffix_index_append(c->ix, c->n_vocab + c->n_docs);
    c->n_docs++;
    return SD_OK;
}

/* The document holding position pos - 1 (an end position), or -1. */
static int32_t doc_of_end(const sd_suffix_cache *c, int32_t end) {
    int32_t lo = 0, hi = c->n_docs - 1, found = -1;
    while (lo <= hi) {
        const int32_t mid = (lo + hi) / 2;
        if (c->start[mid] <= end - 1) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

/* Tokens of the context's end matched against the cache at most. */
#define CACHE_MATCH_WINDOW 64

int32_t sd_suffix_cache_propose(sd_suffix_cache *c, const int32_t *ctx, int32_t n_ctx,
                                const sd_suffix_params *p, int32_t k, int32_t *tokens,
                                int32_t *match, double *score) {
    *match = 0;
    *score = 0.0;
    if (c->n_docs == 0 || n_ctx < 1) return 0;
    const int32_t w = n_ctx < CACHE_MATCH_WINDOW ? n_ctx : CACHE_MATCH_WINDOW;
    int32_t m = 0;
    const int32_t s = suffix_index_walk(c->ix, ctx + n_ctx - w, w, &m);
    *match = m;
    double prob;
    int32_t last_end;
    const int32_t n =
        suffix_index_chain(c->ix, s, m, p, k, c->n_vocab, tokens, score, &prob, &last_end, NULL);
    if (n > 0) {
        const int32_t d = doc_of_end(c, last_end);
        if (d >= 0) c->used[d] = ++c->clock;
    }
    return n;
}

int32_t suffix_cache_follow(sd_suffix_cache *c, const int32_t *ctx, int32_t n_ctx, int32_t k,
                            int32_t *tokens, double *q, int32_t *ends, int32_t *match) {
    *match = 0;
    if (c->n_docs == 0 || n_ctx < 1) return 0;
    const int32_t w = n_ctx < CACHE_MATCH_WINDOW ? n_ctx : CACHE_MATCH_WINDOW;
    int32_t m = 0;
    const int32_t s = suffix_index_walk(c->ix, ctx + n_ctx - w, w, &m);
    *match = m;
    if (m < 1) return 0;
    return suffix_index_follow(c->ix, s, k, c->n_vocab, tokens, q, ends);
}

void suffix_cache_touch(sd_suffix_cache *c, int32_t end) {
    const int32_t d = doc_of_end(c, end);
    if (d >= 0) c->used[d] = ++c->clock;
}
