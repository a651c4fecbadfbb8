/* kv/prefix.c: the prefix cache of a paged KV pool (see sd_kv.h): full blocks registered
 * under (parent block, tokens), found by exact comparison; the last, partly filled block
 * of a stored sequence registered as a partial leaf; a sequence takes the longest cached
 * run to the token (the full-block chain, then the longest common run with one cached
 * child of its last block, copied into a block of its own); idle blocks are evicted by
 * the pool (pool.c), least recently used first, children before parents. */
#include <string.h>

#include "kv/kv_impl.h"

/* splitmix64's finaliser: a bijection that spreads every input bit. */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t block_key(int32_t parent, const int32_t *tok, int32_t bs) {
    uint64_t h = mix((uint64_t)(uint32_t)parent + UINT64_C(0x9e3779b97f4a7c15));
    for (int32_t i = 0; i < bs; i++)
        h = mix(h ^ (uint64_t)(uint32_t)tok[i]);
    return h;
}

/* The cached block with this parent, n_tok tokens and these bs token slots (a partial
 * block's unused ones -1), or -1. */
static int32_t find(const sd_kv_pool *p, int32_t parent, const int32_t *tok, int32_t n_tok,
                    uint64_t key) {
    for (int32_t b = p->bucket[key & p->bucket_mask]; b >= 0; b = p->next[b])
        if (p->key[b] == key && p->parent[b] == parent && p->n_tok[b] == n_tok &&
            memcmp(p->tok + (size_t)b * p->bs, tok, (size_t)p->bs * sizeof *tok) == 0)
            return b;
    return -1;
}

/* Register block b under parent with the bs token slots tok (n_tok of them used), the
 * cache's reference taken. */
static void link_block(sd_kv_pool *p, int32_t b, int32_t parent, const int32_t *tok, int32_t n_tok,
                       uint64_t key) {
    memcpy(p->tok + (size_t)b * p->bs, tok, (size_t)p->bs * sizeof *tok);
    p->n_tok[b] = n_tok;
    p->key[b] = key;
    p->parent[b] = parent;
    p->n_child[b] = 0;
    p->last_use[b] = p->tick;
    p->next[b] = p->bucket[key & p->bucket_mask];
    p->bucket[key & p->bucket_mask] = b;
    if (parent >= 0) p->n_child[parent]++;
    sd_kv_pool_ref(p, b); /* the cache's reference (refs >= 2 then: not idle) */
    p->cached[b] = 1;
    p->n_cached++;
}

/* sd_kv_cache_attach of a sequence of a grouped pool: each group's cache evicts on its
 * own, so the sequence keeps the prefix every group found. */
static int32_t group_attach(sd_kv *kv, const int32_t *tokens, int32_t n) {
    if (kv->n != 0) return 0;
    int32_t got = n > 0 ? n : 0;
    for (int32_t g = 0; g < kv->pool->n_group; g++) {
        const int32_t gg = sd_kv_cache_attach(kv->sub[g], tokens, n);
        if (gg < got) got = gg;
    }
    for (int32_t g = 0; g < kv->pool->n_group; g++)
        sd_kv_truncate(kv->sub[g], got, NULL); /* nothing released yet: cannot fail */
    kv->n = got;
    return got;
}

int32_t sd_kv_cache_attach(sd_kv *kv, const int32_t *tokens, int32_t n) {
    if (kv->sub[0]) return group_attach(kv, tokens, n);
    sd_kv_pool *p = kv->pool;
    if (kv->own_pool || !p->cached || kv->n != 0 || kv->held != 0 || !tokens) return 0;
    if (n > kv->n_ctx) n = kv->n_ctx;
    const int32_t bs = p->bs;
    int32_t parent = -1, i = 0;
    p->tick++;
    for (; (int64_t)(i + 1) * bs <= n; i++) {
        const int32_t *t = tokens + (size_t)i * bs;
        const int32_t b = find(p, parent, t, bs, block_key(parent, t, bs));
        if (b < 0) break;
        sd_kv_pool_ref(p, b);
        p->last_use[b] = p->tick;
        kv->table[i] = b;
        parent = b;
    }
    kv->held = i;
    kv->n = i * bs;
    p->n_hit_blocks += i;
    /* The rest, to the token: the longest common run of tokens[i * bs .. n) with a cached
     * child of the chain's last block (a full block whose tokens part from these, or a
     * partial leaf), copied into a block of the sequence's own (the copy a first write
     * would make, taken now so that the blocks the sequence maps are its own or whole
     * cached blocks, as the admission's accounting counts them). */
    const int32_t left = n - i * bs < bs ? n - i * bs : bs;
    if (left <= 0) return kv->n;
    const int32_t *t = tokens + (size_t)i * bs;
    int32_t best = -1, best_run = 0;
    for (int32_t b = 0; b < p->n_blocks; b++) {
        if (!p->cached[b] || p->parent[b] != parent) continue;
        const int32_t *bt = p->tok + (size_t)b * bs;
        const int32_t lim = p->n_tok[b] < left ? p->n_tok[b] : left;
        int32_t run = 0;
        while (run < lim && bt[run] == t[run])
            run++;
        if (run > best_run) {
            best = b;
            best_run = run;
        }
    }
    if (best < 0) return kv->n;
    sd_kv_pool_ref(p, best); /* not evicted by the take below */
    const int32_t nb = sd_kv_pool_take(p);
    if (nb >= 0) {
        sd_kv_pool_copy_rows(p, nb, best, best_run);
        kv->table[i] = nb;
        kv->held = i + 1;
        kv->n = i * bs + best_run;
        p->n_hit_blocks++;
    }
    p->last_use[best] = p->tick;
    sd_kv_pool_unref(p, best);
    return kv->n;
}

void sd_kv_cache_store(sd_kv *kv, const int32_t *tokens, int32_t n) {
    if (kv->sub[0]) { /* every group's chain, or none once a group released blocks */
        for (int32_t g = 0; sd_kv_first(kv) == 0 && g < kv->pool->n_group; g++)
            sd_kv_cache_store(kv->sub[g], tokens, n);
        return;
    }
    sd_kv_pool *p = kv->pool;
    if (kv->own_pool || !p->cached || !tokens) return;
    if (n > kv->n) n = kv->n;
    const int32_t bs = p->bs;
    int32_t parent = -1, i = 0;
    p->tick++;
    /* A chain starts at position 0: nothing to store once blocks were released. */
    if (kv->lo != 0) return;
    for (; (int64_t)(i + 1) * bs <= n; i++) {
        const int32_t b = kv->table[i];
        const int32_t *t = tokens + (size_t)i * bs;
        if (p->cached[b]) {
            /* Cached already (attached, or stored earlier): under the same tokens, since
             * a cached block is never written (its references make a writer copy it). */
            p->last_use[b] = p->tick;
            parent = b;
            continue;
        }
        const uint64_t key = block_key(parent, t, bs);
        const int32_t same = find(p, parent, t, bs, key);
        if (same >= 0) {
            /* Computed twice (two sequences at once): the rows are the same bits (K/V at a
             * position depend only on the tokens up to it), so map the cached block and
             * let this copy go. The table stays a prefix of a cached chain, which eviction
             * relies on. */
            sd_kv_pool_ref(p, same);
            p->last_use[same] = p->tick;
            kv->table[i] = same;
            sd_kv_pool_unref(p, b);
            parent = same;
            continue;
        }
        link_block(p, b, parent, t, bs, key);
        parent = b;
    }
    /* The last block, partly filled: a partial leaf (never a parent: a sequence that takes
     * a run of it writes into a copy). Not stored when a cached child of the same parent
     * already holds these tokens (a longer run included). */
    const int32_t rest = n - i * bs;
    if (rest <= 0) return;
    const int32_t b = kv->table[i];
    if (p->cached[b]) { /* attached, never written since */
        p->last_use[b] = p->tick;
        return;
    }
    const int32_t *t = tokens + (size_t)i * bs;
    for (int32_t c = 0; c < p->n_blocks; c++) {
        if (!p->cached[c] || p->parent[c] != parent || p->n_tok[c] < rest) continue;
        if (memcmp(p->tok + (size_t)c * bs, t, (size_t)rest * sizeof *t) == 0) {
            p->last_use[c] = p->tick;
            return;
        }
    }
    int32_t slots[SD_KV_MAX_BLOCK];
    memcpy(slots, t, (size_t)rest * sizeof *t);
    for (int32_t k = rest; k < bs; k++)
        slots[k] = -1;
    link_block(p, b, parent, slots, rest, block_key(parent, slots, bs));
}

void sd_kv_pool_cache_clear(sd_kv_pool *p) {
    for (int32_t g = 0; p && p->n_group > 1 && g < p->n_group; g++)
        sd_kv_pool_cache_clear(p->sub[g]);
    if (!p || !p->cached) return;
    while (sd_kv_pool_evict_one(p) == 0) {
    }
}
