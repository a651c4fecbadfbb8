/*
 * kv/kv_impl.h: PRIVATE to kv/. The pool and sequence records shared by pool.c (blocks,
 * reference counts, the free list, the prefix cache's idle blocks and their eviction, a
 * grouped pool's sub-pools), kv.c (sequences: block tables, reserve, truncate,
 * copy-on-write, a grouped pool's per-group sequences) and prefix.c (the prefix cache:
 * registering and finding blocks), in that order: each calls only the ones before it.
 */
#ifndef SD_KV_IMPL_H
#define SD_KV_IMPL_H

#include "kv/sd_kv.h"

struct sd_kv_pool {
    int32_t n_layer, kv_dim, bs, n_blocks;
    sd_type type;
    size_t row_bytes;   /* bytes of one row */
    size_t block_bytes; /* bs * row_bytes: one block of one layer, K or V */
    size_t layer_len;   /* n_blocks * block_bytes */
    uint8_t *k, *v;     /* [n_layer, n_blocks * bs, row_bytes] each */
    void *owned;        /* storage allocated here, or NULL */
    /* device storage: the owner's copy (sd_kv_pool_params.copy); NULL: memcpy */
    void (*copy)(void *copy_ctx, void *dst, const void *src, size_t bytes);
    void *copy_ctx;
    int32_t *refs;      /* [n_blocks] sequences mapping the block + 1 if the cache holds it */
    int32_t *free_list; /* [n_blocks] stack of free block ids, n_free of them */
    int32_t n_free;
    int32_t n_seqs; /* live sequences (sd_kv_pool_free checks there are none) */
    int64_t n_cow;
    /* Prefix cache (prefix.c); NULL arrays when the pool has a single block (a
     * contiguous cache). A cached block b: cached[b] = 1, its n_tok[b] tokens
     * tok[b * bs ..] (bs: a full block; fewer: a partial leaf, the last block of a stored
     * sequence, its unused slots -1), parent[b] (-1: the first block of a sequence),
     * key[b], and a bucket chain link. */
    uint8_t *cached;      /* [n_blocks] */
    int32_t *tok;         /* [n_blocks * bs] */
    int32_t *n_tok;       /* [n_blocks] */
    int32_t *parent;      /* [n_blocks] */
    int32_t *n_child;     /* [n_blocks] cached blocks whose parent it is */
    uint64_t *key;        /* [n_blocks] */
    uint64_t *last_use;   /* [n_blocks] LRU tick */
    int32_t *next;        /* [n_blocks] bucket chain */
    int32_t *bucket;      /* [n_buckets] first block of each chain, -1: empty */
    uint32_t bucket_mask; /* n_buckets - 1 (a power of two) */
    int32_t n_cached, n_cached_idle;
    uint64_t tick;
    int64_t n_hit_blocks, n_evicted;
    int32_t peak_used;    /* most blocks not free at once */
    size_t storage_bytes; /* all K and V rows (a grouped pool: every group's slices) */
    /* A grouped pool (pool.c; its sequences in kv.c): n_group > 1 sub-pools, one per layer group,
     * that hold the blocks; this record then holds no blocks itself (refs, free_list NULL; n_blocks
     * and bs are group 0's), and layer l's rows are layer layer_idx[l] of sub[layer_sub[l]]. */
    int32_t n_group;
    sd_kv_pool *sub[SD_KV_MAX_GROUPS];
    int32_t group_window[SD_KV_MAX_GROUPS];
    int32_t *layer_sub, *layer_idx; /* [n_layer] */
};

struct sd_kv {
    sd_kv_pool *pool;
    int own_pool;   /* 1: a contiguous cache, freed with its pool */
    int32_t n_ctx;  /* most positions */
    int32_t n;      /* committed positions */
    int32_t held;   /* blocks mapped: table[0 .. held) */
    int32_t lo;     /* table[0 .. lo) released behind a sliding window (-1 there), lo <= held */
    int32_t *table; /* [ceil(n_ctx / bs)] block ids */
    /* A sequence of a grouped pool: one sequence per group (sub[g] over pool->sub[g]), n
     * mirrored here; table unused. NULL otherwise. */
    sd_kv *sub[SD_KV_MAX_GROUPS];
};

/* pool.c */
/* A block off the free list (evicting an idle cached block when the list is empty) with
 * one reference; -1 when there is none. */
int32_t sd_kv_pool_take(sd_kv_pool *p);
/* One more / one less reference to block b (b returns to the free list at 0). */
void sd_kv_pool_ref(sd_kv_pool *p, int32_t b);
void sd_kv_pool_unref(sd_kv_pool *p, int32_t b);

/* pool.c: copy rows [0, n_rows) of every layer's K and V from block src to block dst. */
void sd_kv_pool_copy_rows(sd_kv_pool *p, int32_t dst, int32_t src, int32_t n_rows);
/* pool.c: the check of one block pool; *refs: the sequence references it counts. */
int sd_kv_pool_check_one(const sd_kv_pool *p, int64_t *refs, sd_error *err);

/* pool.c: evict one idle cached block (the least recently used without cached children)
 * to the free list; 0 if one was evicted, -1 if none can be. */
int sd_kv_pool_evict_one(sd_kv_pool *p);

#endif /* SD_KV_IMPL_H */
