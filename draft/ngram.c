/*
 * draft/ngram.c: the n-gram / prompt-lookup proposer (see sd_draft.h), over the n-gram
 * index of ngram_index.c (how it maps n-grams to their most recent follower, rolls back
 * and treats the separator -1: the top of that file). The lookup cache (ngram_cache.c)
 * indexes several documents with the same index and attaches it here
 * (ngram_proposer_set_cache).
 */
#include <stdlib.h>
#include <string.h>

#include "draft/ngram_impl.h"

/* ---- the proposer ---- */

typedef struct ngram_proposer {
    sd_proposer base;         /* first member: sd_proposer* <-> ngram_proposer* */
    ngram_index ix;           /* over the committed context */
    const ngram_index *cache; /* optional lookup cache (ngram_cache.c), not owned */
    int32_t n_vocab;
    int32_t last_match;
    int32_t last_j; /* the last proposal's follower position in the context, -1: none */
} ngram_proposer;

static int ngram_prefill(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    (void)err;
    ngram_index_sync(&((ngram_proposer *)base)->ix, ctx, n_ctx);
    return SD_OK;
}

static void ngram_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    ngram_index_sync(&((ngram_proposer *)base)->ix, ctx, n_ctx);
}

static int ngram_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                         sd_proposal *out, sd_error *err) {
    (void)err;
    ngram_proposer *p = (ngram_proposer *)base;
    ngram_index *ix = &p->ix;
    out->n = 0;
    out->n_vocab = p->n_vocab;
    out->probs = NULL;
    out->one_hot = 1;
    out->lookup = 1;
    p->last_match = 0;
    p->last_j = -1;
    ngram_index_sync(ix, ctx, n_ctx);
    if (n_ctx > ix->cap) return SD_OK; /* past the indexed capacity: no proposal */
    const int32_t n_toks = ix->n_toks;
    int32_t j = -1;
    int32_t n = ngram_index_lookup(ix, ix->toks, n_toks, &j);
    if (n > 0) {
        /* t[j - n .. j) == t[N - n .. N): continue from t[j]; past the end the match is
         * periodic with period N - j, so the proposal repeats its own tokens. */
        const int32_t period = n_toks - j;
        for (int32_t i = 0; i < k; i++)
            out->tokens[i] = j + i < n_toks ? ix->toks[j + i] : out->tokens[i - period];
        out->n = k;
        p->last_match = n;
        p->last_j = j;
        return SD_OK;
    }
    if (p->cache) {
        n = ngram_index_lookup(p->cache, ix->toks, n_toks, &j);
        if (n > 0) {
            int32_t i = 0;
            while (i < k && j + i < p->cache->n_toks && p->cache->toks[j + i] >= 0) {
                out->tokens[i] = p->cache->toks[j + i];
                i++;
            }
            out->n = i;
            p->last_match = n;
        }
    }
    return SD_OK;
}

/* Most earlier occurrences a tree proposal looks at for its alternatives. */
#define NGRAM_TREE_SCAN 256

/* A tree (sd_proposer_propose_tree): the chain proposal first, then up to width - 1
 * alternatives: the other followers of earlier occurrences of the context's last n tokens
 * (the longest matched n first, most recent first, then shorter n), each whose first token
 * differs from every branch's so far, continued by what followed it up to depth tokens. */
static int ngram_propose_tree(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t width,
                              int32_t depth, sd_proposal *out, sd_error *err) {
    int rc = ngram_propose(base, ctx, n_ctx, depth, out, err);
    for (int32_t i = 0; i < out->n; i++)
        out->parent[i] = i - 1;
    ngram_proposer *p = (ngram_proposer *)base;
    ngram_index *ix = &p->ix;
    if (rc || out->n == 0 || n_ctx > ix->cap) return rc;
    const int32_t n_toks = ix->n_toks;
    int32_t j0 = -1;
    const int32_t n_match = ngram_index_lookup(ix, ix->toks, n_toks, &j0);
    if (n_match == 0) return SD_OK; /* the chain came from the lookup cache */
    int32_t firsts[SD_MAX_DRAFT], n_br = 1, scanned = 0;
    firsts[0] = out->tokens[0];
    for (int32_t n = n_match; n >= ix->n_min && n_br < width; n--) {
        for (int32_t j = ngram_index_newest(ix, ix->toks, n_toks, n);
             j >= 0 && n_br < width && scanned < NGRAM_TREE_SCAN; j = ngram_index_older(ix, j, n)) {
            scanned++;
            if (j < n || j >= n_toks ||
                memcmp(ix->toks + j - n, ix->toks + n_toks - n, (size_t)n * sizeof(int32_t)))
                continue; /* a hash collision */
            int seen = 0;
            for (int32_t b = 0; b < n_br; b++)
                seen |= firsts[b] == ix->toks[j];
            if (seen || ix->toks[j] < 0) continue;
            firsts[n_br++] = ix->toks[j];
            int32_t node = -1;
            for (int32_t i = 0;
                 i < depth && j + i < n_toks && ix->toks[j + i] >= 0 && out->n < SD_MAX_DRAFT;
                 i++) {
                out->tokens[out->n] = ix->toks[j + i];
                out->parent[out->n] = node;
                node = out->n++;
            }
        }
    }
    return SD_OK;
}

static void ngram_free(sd_proposer *base) {
    ngram_proposer *p = (ngram_proposer *)base;
    ngram_index_free(&p->ix);
    free(p);
}

static const sd_proposer_ops ngram_ops = {
    .name = "ngram",
    .prefill = ngram_prefill,
    .propose = ngram_propose,
    .commit = ngram_commit,
    .free = ngram_free,
    .propose_tree = ngram_propose_tree,
};

sd_ngram_params sd_ngram_default_params(void) {
    sd_ngram_params p;
    p.n_min = 2;
    p.n_max = 4;
    p.n_ctx = 4096;
    return p;
}

int sd_ngram_check_params(const sd_ngram_params *p, sd_error *err) {
    if (!p) return sd_errorf(err, SD_ERR_ARG, "ngram: NULL parameters");
    if (p->n_max < 1 || p->n_max > SD_NGRAM_MAX)
        return sd_errorf(err, SD_ERR_ARG, "ngram: n_max = %d, expected 1 .. %d", p->n_max,
                         SD_NGRAM_MAX);
    if (p->n_min < 1 || p->n_min > SD_NGRAM_MAX)
        return sd_errorf(err, SD_ERR_ARG, "ngram: n_min = %d, expected 1 .. %d", p->n_min,
                         SD_NGRAM_MAX);
    if (p->n_min > p->n_max)
        return sd_errorf(err, SD_ERR_ARG, "ngram: n_min = %d is larger than n_max = %d", p->n_min,
                         p->n_max);
    if (p->n_ctx < 1)
        return sd_errorf(err, SD_ERR_ARG, "ngram: n_ctx = %d, expected >= 1", p->n_ctx);
    return SD_OK;
}

int sd_proposer_ngram_init(const sd_ngram_params *prm, int32_t n_vocab, sd_proposer **out,
                           sd_error *err) {
    *out = NULL;
    int rc = sd_ngram_check_params(prm, err);
    if (rc) return rc;
    if (n_vocab < 1)
        return sd_errorf(err, SD_ERR_ARG, "ngram: n_vocab = %d, expected >= 1", n_vocab);
    ngram_proposer *p = calloc(1, sizeof *p);
    if (!p) return sd_errorf(err, SD_ERR_OOM, "ngram: out of memory");
    p->base.ops = &ngram_ops;
    p->n_vocab = n_vocab;
    rc = ngram_index_init(&p->ix, prm->n_min, prm->n_max, prm->n_ctx, err);
    if (rc) {
        free(p);
        return rc;
    }
    *out = &p->base;
    return SD_OK;
}

int32_t sd_proposer_ngram_last_match(const sd_proposer *p) {
    if (!p || p->ops != &ngram_ops) return -1;
    return ((const ngram_proposer *)p)->last_match;
}

int32_t sd_proposer_ngram_last_extent(const sd_proposer *base, int32_t cap) {
    if (!base || base->ops != &ngram_ops) return -1;
    const ngram_proposer *p = (const ngram_proposer *)base;
    if (p->last_match <= 0 || p->last_j < 0) return -1;
    const int32_t *t = p->ix.toks;
    const int32_t n = p->ix.n_toks, j = p->last_j;
    int32_t len = p->last_match; /* t[j - len .. j) == t[n - len .. n), j < n */
    while (len < cap && j - len - 1 >= 0 && t[j - len - 1] >= 0 && t[j - len - 1] == t[n - len - 1])
        len++;
    return len;
}

int ngram_proposer_set_cache(sd_proposer *p, const ngram_index *cache) {
    if (!p || p->ops != &ngram_ops) return -1;
    ngram_proposer *np = (ngram_proposer *)p;
    if (cache && (cache->n_min != np->ix.n_min || cache->n_max != np->ix.n_max)) return -1;
    np->cache = cache;
    return 0;
}
