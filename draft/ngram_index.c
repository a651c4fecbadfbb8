/*
 * draft/ngram_index.c: the n-gram index the lookup proposer (ngram.c) and the lookup
 * cache (ngram_cache.c) share (declared in ngram_impl.h).
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

int32_t ngram_index_newest(const ngram_index *ix, const int32_t *q, int32_t n_q, int32_t n) {
    uint64_t keys[SD_NGRAM_MAX];
    if (n < ix->n_min || keys_before(q, n_q, ix->n_max, keys) < n) return -1;
    const ngram_slot *s = find_slot((ngram_index *)ix, keys[n - 1], 0);
    return s ? s->pos : -1;
}

int32_t ngram_index_older(const ngram_index *ix, int32_t j, int32_t n) {
    return ix->prev[(size_t)j * (size_t)ix->n_sizes + (size_t)(n - ix->n_min)];
}
