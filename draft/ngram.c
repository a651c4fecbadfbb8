/*
 * draft/ngram.c: the n-gram / prompt-lookup proposer (see sd_draft.h).
 *
 * The index (ngram_index) maps each (n, n-gram) to the last "follower" position j:
 * t[j - n .. j) is the n-gram and t[j] the token that followed it. Follower positions
 * 1 .. n_toks - 1 are indexed, for every n in [n_min, min(n_max, j)]. A hash table with
 * linear probing holds one slot per distinct key (64-bit hash of n and the n-gram);
 * inserting follower j for size n stores the slot's old position in prev[j, n] and
 * puts j in the slot, so the slot always holds the most recent occurrence and
 * prev[] chains back through the older ones. Rolling back to a prefix of length L
 * undoes followers n_toks - 1 .. L newest first (slot = prev), which restores exactly
 * the table of the prefix. Slots of keys that were rolled back stay (position -1);
 * when occupied slots pass 3/4 of the table it is rebuilt from the tokens (live keys
 * are at most half of it, so a rebuild always makes room).
 * A hash collision can only make a lookup find a position whose n-gram differs: every
 * match is checked token by token and the prev chain is followed to the real one.
 *
 * Token id -1 is a separator (never a real id): no n-gram spans it and nothing follows
 * it. The lookup cache (ngram_cache.c) indexes several documents joined by separators
 * with this same index.
 */
#include <stdlib.h>
#include <string.h>

#include "draft/ngram_impl.h"

/* ---- hashing ---- */

/* keys[m - 1] for m = 1 .. returned count: the keys of the m-grams t[j - m .. j), for m up
 * to n_max, stopping at the start of t or at a separator. */
static int32_t keys_before(const int32_t *t, int32_t j, int32_t n_max, uint64_t *keys) {
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15);
    int32_t m = 0;
    while (m < n_max && m < j && t[j - m - 1] >= 0) {
        h = sd_mix64(h ^ (uint64_t)(uint32_t)t[j - m - 1]);
        m++;
        uint64_t k = sd_mix64(h + (uint64_t)m * UINT64_C(0xd1b54a32d192ed03));
        keys[m - 1] = k ? k : 1; /* 0 marks an empty slot */
    }
    return m;
}

/* ---- the index ---- */

static ngram_slot *find_slot(ngram_index *ix, uint64_t key, int create) {
    size_t i = (size_t)key & ix->mask;
    for (;;) {
        ngram_slot *s = &ix->slots[i];
        if (s->key == key) return s;
        if (s->key == 0) {
            if (!create) return NULL;
            s->key = key;
            s->pos = -1;
            ix->used++;
            return s;
        }
        i = (i + 1) & ix->mask;
    }
}

static void insert_follower(ngram_index *ix, int32_t j);

/* Clear the table and index followers 1 .. upto - 1 again. */
static void rebuild(ngram_index *ix, int32_t upto) {
    memset(ix->slots, 0, (ix->mask + 1) * sizeof *ix->slots);
    ix->used = 0;
    for (int32_t j = 1; j < upto; j++)
        insert_follower(ix, j);
}

/* Index follower j (t[j] is in the mirror). */
static void insert_follower(ngram_index *ix, int32_t j) {
    if (ix->toks[j] < 0) return; /* nothing follows into a separator */
    if (ix->used + (size_t)ix->n_sizes > ix->limit) rebuild(ix, j);
    uint64_t keys[SD_NGRAM_MAX];
    const int32_t m = keys_before(ix->toks, j, ix->n_max, keys);
    int32_t *prev = ix->prev + (size_t)j * (size_t)ix->n_sizes;
    for (int32_t n = ix->n_min; n <= ix->n_max; n++)
        prev[n - ix->n_min] = -1;
    for (int32_t n = ix->n_min; n <= m; n++) { /* ascending; undone descending */
        ngram_slot *s = find_slot(ix, keys[n - 1], 1);
        prev[n - ix->n_min] = s->pos;
        s->pos = j;
    }
}

/* Undo follower j (the newest indexed one). */
static void remove_follower(ngram_index *ix, int32_t j) {
    if (ix->toks[j] < 0) return;
    uint64_t keys[SD_NGRAM_MAX];
    const int32_t m = keys_before(ix->toks, j, ix->n_max, keys);
    const int32_t *prev = ix->prev + (size_t)j * (size_t)ix->n_sizes;
    for (int32_t n = m; n >= ix->n_min; n--) {
        ngram_slot *s = find_slot(ix, keys[n - 1], 0);
        SD_CHECK(s && s->pos == j, "n-gram index: rollback of a position it does not hold");
        if (s) s->pos = prev[n - ix->n_min];
    }
}

int ngram_index_init(ngram_index *ix, int32_t n_min, int32_t n_max, int32_t cap, sd_error *err) {
    memset(ix, 0, sizeof *ix);
    ix->n_min = n_min;
    ix->n_max = n_max;
    ix->n_sizes = n_max - n_min + 1;
    ix->cap = cap;
    size_t live, size = 64, prev_bytes, slot_bytes;
    if (sd_mul_size((size_t)cap, (size_t)ix->n_sizes, &live) ||
        sd_mul_size(live, sizeof(int32_t), &prev_bytes))
        return sd_errorf(err, SD_ERR_OOM, "ngram: index of %d tokens too large", cap);
    while (size < 2 * live) {
        if (size > SIZE_MAX / 4) return sd_errorf(err, SD_ERR_OOM, "ngram: index too large");
        size *= 2;
    }
    if (sd_mul_size(size, sizeof(ngram_slot), &slot_bytes))
        return sd_errorf(err, SD_ERR_OOM, "ngram: index too large");
    ix->toks = malloc((size_t)cap * sizeof(int32_t));
    ix->prev = malloc(prev_bytes);
    ix->slots = calloc(1, slot_bytes);
    if (!ix->toks || !ix->prev || !ix->slots) {
        ngram_index_free(ix);
        return sd_errorf(err, SD_ERR_OOM, "ngram: out of memory for an index of %d tokens", cap);
    }
    ix->mask = size - 1;
    ix->limit = size / 4 * 3;
    return SD_OK;
}

void ngram_index_free(ngram_index *ix) {
    if (!ix) return;
    free(ix->toks);
    free(ix->prev);
    free(ix->slots);
    memset(ix, 0, sizeof *ix);
}

void ngram_index_truncate(ngram_index *ix, int32_t n_keep) {
    if (n_keep < 0) n_keep = 0;
    for (int32_t j = ix->n_toks - 1; j >= n_keep && j >= 1; j--)
        remove_follower(ix, j);
    if (n_keep < ix->n_toks) ix->n_toks = n_keep;
}

int ngram_index_append(ngram_index *ix, int32_t tok) {
    if (ix->n_toks >= ix->cap) return -1;
    const int32_t j = ix->n_toks++;
    ix->toks[j] = tok;
    if (j >= 1) insert_follower(ix, j);
    return 0;
}

void ngram_index_sync(ngram_index *ix, const int32_t *ctx, int32_t n) {
    if (n > ix->cap) n = ix->cap;
    int32_t l = 0;
    while (l < ix->n_toks && l < n && ix->toks[l] == ctx[l])
        l++;
    ngram_index_truncate(ix, l);
    for (int32_t j = l; j < n; j++)
        ngram_index_append(ix, ctx[j]);
}

int32_t ngram_index_lookup(const ngram_index *ix, const int32_t *q, int32_t n_q, int32_t *pos) {
    uint64_t keys[SD_NGRAM_MAX];
    const int32_t m = keys_before(q, n_q, ix->n_max, keys);
    for (int32_t n = m; n >= ix->n_min; n--) {
        ngram_slot *s = find_slot((ngram_index *)ix, keys[n - 1], 0);
        int32_t j = s ? s->pos : -1;
        /* The slot holds the most recent follower with this key; a (rare) hash collision
         * is skipped by walking back to the next older one (a colliding key of another size
         * may even point at j < n, which is a mismatch too, never a read before toks). */
        while (j >= 0 &&
               (j < n || memcmp(ix->toks + j - n, q + n_q - n, (size_t)n * sizeof(int32_t)) != 0))
            j = ix->prev[(size_t)j * (size_t)ix->n_sizes + (size_t)(n - ix->n_min)];
        if (j >= 0) {
            *pos = j;
            return n;
        }
    }
    return 0;
}

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
    uint64_t keys[SD_NGRAM_MAX];
    keys_before(ix->toks, n_toks, ix->n_max, keys);
    int32_t firsts[SD_MAX_DRAFT], n_br = 1, scanned = 0;
    firsts[0] = out->tokens[0];
    for (int32_t n = n_match; n >= ix->n_min && n_br < width; n--) {
        ngram_slot *sl = find_slot(ix, keys[n - 1], 0);
        for (int32_t j = sl ? sl->pos : -1; j >= 0 && n_br < width && scanned < NGRAM_TREE_SCAN;
             j = ix->prev[(size_t)j * (size_t)ix->n_sizes + (size_t)(n - ix->n_min)]) {
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

int sd_proposer_ngram_set_cache(sd_proposer *p, const sd_ngram_cache *c, sd_error *err) {
    if (ngram_proposer_set_cache(p, c ? ngram_cache_index(c) : NULL))
        return sd_errorf(err, SD_ERR_ARG,
                         "lookup cache: not an n-gram proposer, or its n-gram sizes differ from "
                         "the cache's");
    return SD_OK;
}
