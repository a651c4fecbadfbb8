/*
 * kv/: the KV cache bookkeeping of a model session, all layers: a pool of fixed-size
 * blocks of positions (pool.c), per sequence a block table (kv.c: sd_kv), reference
 * counts with copy-on-write, and a prefix cache of full blocks keyed by their tokens
 * (prefix.c). Owns the block accounting and, when it allocated it, the storage. May
 * include runtime/base and quant (element types) only. A contiguous cache (sd_kv_init)
 * may live in backend memory (a device address): this part then only computes row
 * addresses. A paged pool (sd_kv_pool_init) copies rows itself (copy-on-write, a prefix
 * hit's partial block): with memcpy in host memory, or, for storage the host cannot touch
 * (a device buffer), with the copy function its owner gives (sd_kv_pool_params.copy).
 *
 * Layout. A pool holds n_blocks blocks of block_size positions. Per layer, K and V are
 * each [n_blocks * block_size, kv_dim] rows of the pool's element type (kv_dim =
 * n_head_kv * head_dim), so block b of layer l holds positions [0, block_size) of
 * whichever sequence maps it, one row each, block_size rows contiguous. A contiguous
 * cache (sd_kv_init) is a pool of one block of n_ctx positions mapped by one sequence.
 * Element types (sd_kv_type_ok): F32 (exact), F16 (IEEE binary16, rounded to nearest
 * even when stored), Q8_0 and Q4_0 (quant/sd_quant.h block layouts, 32 elements per
 * block, the reference quantizer applied to each row when it is stored; kv_dim must be
 * a multiple of 32). Readers convert elements to f32 exactly (a scale times an integer).
 * Bytes per position of one layer: 2 * sd_kv_type_row_bytes(type, kv_dim) (the KV
 * formula 2 x layers x KV heads x head dim x bytes per element over all layers).
 * A grouped pool (sd_kv_pool_params.n_group > 1; kv/pool.c, kv/kv.c) is one such pool per layer
 * group, each over its group's layers and its own blocks, and a sequence one block table
 * per group: a windowed group gives back its blocks behind the window, the others keep
 * theirs (Gemma 3's local and global layers). Every function below takes the grouped pool
 * and its sequences as it takes a plain one.
 *
 * Callers reach rows only through sd_kv_k / sd_kv_v, and never step from a row beyond
 * the span sd_kv_span returns (the rest of its block): that is what lets a sequence's
 * rows sit in blocks anywhere in the pool.
 *
 * Sequence contract (positions are 0-based and contiguous from 0):
 *   n = sd_kv_n(kv): positions [0, n) hold committed K/V.
 *   sd_kv_reserve(kv, m) makes [n, n + m) writable: it maps blocks from the pool for
 *   them and, when the block holding position n is shared (its reference count is
 *   above 1: another sequence or the prefix cache holds it), first copies that block's
 *   rows [0, n mod block_size) into a block of its own (copy-on-write). The forward pass
 *   then writes those rows and calls sd_kv_commit(kv, m), making n += m.
 *   sd_kv_truncate(kv, n') with n' <= n drops positions [n', n) and returns the blocks
 *   past the one holding position n' - 1 to the pool: O(blocks returned), so the
 *   rollback of a rejected draft (at most K positions) is O(1). llama.cpp's
 *   llama_kv_cache_seq_rm(seq, n', -1).
 */
#ifndef SD_KV_H
#define SD_KV_H

#include <stddef.h>
#include <stdint.h>

#include "quant/sd_quant.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_kv sd_kv;
typedef struct sd_kv_pool sd_kv_pool;

/* Largest block a paged pool takes (positions). */
#define SD_KV_MAX_BLOCK 256
/* Most layer groups of a grouped pool (sd_kv_pool_params.n_group). */
#define SD_KV_MAX_GROUPS 4

/* 1 if t is a KV element type here (F32, F16, Q8_0, Q4_0), else 0. */
int sd_kv_type_ok(sd_type t);
/* Bytes of one row of kv_dim elements of t; 0 if t is not a KV type or kv_dim does not
 * fit its blocks (a multiple of 32 for Q8_0 / Q4_0). */
size_t sd_kv_type_row_bytes(sd_type t, int32_t kv_dim);

/* ---- a contiguous cache: one sequence of n_ctx positions ---- */

typedef struct sd_kv_params {
    int32_t n_layer;
    int32_t n_ctx;  /* capacity in positions */
    int32_t kv_dim; /* n_head_kv * head_dim */
    sd_type type;   /* element type: SD_TYPE_F32 (0, the default), F16, Q8_0, Q4_0 */
    /* Storage of sd_kv_storage_bytes(p) bytes (K rows of every layer, then V rows), e.g. a
     * backend buffer, not owned, zeroed by its owner; NULL: the cache allocates (zeroed)
     * host memory itself. */
    void *storage;
} sd_kv_params;

/* Bytes of storage a cache for p needs (2 * n_layer * n_ctx rows of kv_dim elements of
 * p->type, overflow-checked). Errors: as sd_kv_init. */
int sd_kv_storage_bytes(const sd_kv_params *p, size_t *out, sd_error *err);

/* Make a cache over p->storage (or allocated host memory). Errors: SD_ERR_ARG
 * (non-positive or too large sizes, a type that is not a KV type, kv_dim not a multiple
 * of 32 for Q8_0 / Q4_0), SD_ERR_OOM. */
int sd_kv_init(const sd_kv_params *p, sd_kv **out, sd_error *err);
/* Free a cache or a sequence (its blocks go back to the pool). NULL accepted. */
void sd_kv_free(sd_kv *kv);

/* ---- a paged pool and its sequences ---- */

typedef struct sd_kv_pool_params {
    int32_t n_layer;
    int32_t kv_dim;     /* n_head_kv * head_dim */
    int32_t block_size; /* positions per block, 1 .. SD_KV_MAX_BLOCK (16 or 32 are usual) */
    int32_t n_blocks;   /* blocks in the pool, >= 1 */
    sd_type type;       /* element type, as sd_kv_params */
    /* Storage of sd_kv_pool_storage_bytes(p) bytes, not owned, zeroed; NULL: the pool
     * allocates it (host memory). */
    void *storage;
    /* Storage the host cannot read or write (a device buffer): copy(copy_ctx, dst, src,
     * bytes) copies bytes between two addresses of it (ordered before any later read or
     * write of the rows by the same owner, e.g. queued on the device's stream); the pool
     * then never dereferences a row. NULL: host storage, copied with memcpy. */
    void (*copy)(void *copy_ctx, void *dst, const void *src, size_t bytes);
    void *copy_ctx;
    /* Layer groups, for a model whose sliding-window (local) layers interleave with global
     * ones (Gemma 3). n_group 0 or 1: one group, each block holds every layer's rows.
     * 2 .. SD_KV_MAX_GROUPS: layer l's rows live only in the blocks of group
     * layer_group[l]; each group is a pool of its own (group_blocks[g] blocks of
     * block_size positions, 0: n_blocks; its storage a 64-byte aligned slice of the
     * pool's, in group order) and each sequence holds one block table per group.
     * group_window[g] > 0 marks a windowed group: sd_kv_release_before gives back its
     * blocks only. Group 0 must be unwindowed: it holds every position of every sequence,
     * so the pool's accounting (sd_kv_pool_get_stats' counts, sd_kv_pool_n_available,
     * sd_kv_pool_blocks_for) is group 0's; a windowed group is sized by its caller for
     * what its sequences hold behind the window (sd_kv_reserve fails with SD_ERR_OOM
     * naming the group when it runs out). */
    int32_t n_group;
    const int32_t *layer_group; /* [n_layer], each 0 .. n_group - 1, no group empty */
    int32_t group_blocks[SD_KV_MAX_GROUPS];
    int32_t group_window[SD_KV_MAX_GROUPS];
} sd_kv_pool_params;

int sd_kv_pool_storage_bytes(const sd_kv_pool_params *p, size_t *out, sd_error *err);
/* Errors: SD_ERR_ARG (sizes out of range, the type as sd_kv_init), SD_ERR_OOM. */
int sd_kv_pool_init(const sd_kv_pool_params *p, sd_kv_pool **out, sd_error *err);
/* Free a pool whose sequences are all freed. NULL accepted. */
void sd_kv_pool_free(sd_kv_pool *pool);

/* A new, empty sequence of at most n_ctx positions over pool's blocks (the pool must
 * outlive it). It holds no block until sd_kv_reserve. Errors: SD_ERR_ARG, SD_ERR_OOM. */
int sd_kv_seq_init(sd_kv_pool *pool, int32_t n_ctx, sd_kv **out, sd_error *err);

/* Block accounting of a pool. */
typedef struct sd_kv_pool_stats {
    int32_t n_blocks;      /* in the pool */
    int32_t block_size;    /* positions per block */
    int32_t n_free;        /* on the free list */
    int32_t n_cached;      /* held by the prefix cache (some also mapped by sequences) */
    int32_t n_cached_idle; /* held by the prefix cache alone: reusable, evicted on demand */
    int64_t n_hit_blocks;  /* blocks a sequence reused from the prefix cache, ever */
    int64_t n_evicted;     /* cached blocks evicted to make room, ever */
    int64_t n_cow;         /* copy-on-write copies, ever */
    /* Every pool: the most blocks in use (not free) at once, ever; storage bytes. A
     * grouped pool: the counts above are group 0's; per group g < n_group its blocks,
     * free blocks, peak in use and layers. A one-group pool: n_group 1, group 0 = above. */
    int32_t n_peak_used;
    size_t storage_bytes;
    int32_t n_group;
    int32_t group_blocks[SD_KV_MAX_GROUPS];
    int32_t group_free[SD_KV_MAX_GROUPS];
    int32_t group_peak_used[SD_KV_MAX_GROUPS];
    int32_t group_cached_idle[SD_KV_MAX_GROUPS]; /* held by the prefix cache alone */
    int32_t group_layers[SD_KV_MAX_GROUPS];
} sd_kv_pool_stats;

void sd_kv_pool_get_stats(const sd_kv_pool *pool, sd_kv_pool_stats *out);
/* Blocks a new request can count on: free plus idle cached ones. */
int32_t sd_kv_pool_n_available(const sd_kv_pool *pool);
/* Blocks a sequence of n positions maps: ceil(n / block_size). */
int32_t sd_kv_pool_blocks_for(const sd_kv_pool *pool, int64_t n);
/* Check the pool's accounting (every block either free or referenced, the free list
 * without duplicates, the cache's counts): SD_OK, or SD_ERR_ARG naming the first
 * inconsistency (a bug). n_seq_refs: the references the caller's live sequences hold
 * in total (sd_kv_n_blocks summed), or -1 not to check that sum. */
int sd_kv_pool_check(const sd_kv_pool *pool, int64_t n_seq_refs, sd_error *err);

/* Make dst (an empty sequence of the same pool) share src's blocks for positions
 * [0, n), n <= sd_kv_n(src): dst then holds those n positions, and the first write of
 * either into a shared block copies it (copy-on-write). Errors: SD_ERR_ARG. */
int sd_kv_fork(sd_kv *dst, const sd_kv *src, int32_t n, sd_error *err);

/*
 * Prefix cache (paged pools). Full blocks of committed positions are registered under
 * their tokens and their parent (the cached block before them), so a block is found
 * only after the exact same tokens from position 0: its rows are then exactly the rows
 * that sequence would compute (K/V at a position depend only on the tokens up to it).
 * A stored sequence's last, partly filled block is registered too, as a partial leaf
 * holding its n mod block_size tokens. The cache holds one reference to each block it
 * registers; blocks it alone holds are evicted, least recently used first and children
 * before parents, when the pool runs out of free blocks.
 *
 * sd_kv_cache_attach: an empty sequence takes the longest cached prefix of tokens[0 .. n)
 * to the token: the chain of full blocks matching whole blocks inside [0, n), then the
 * longest common run of the tokens after it with a cached child of the chain's last block
 * (a full block whose tokens part from them, or a partial leaf), whose rows are copied
 * into a block of the sequence's own (when one is free or evictable; else the run is left
 * out). Returns the positions it now holds (possibly 0).
 * sd_kv_cache_store: register the full blocks of positions [0, n) of kv (n <= sd_kv_n;
 * tokens[0 .. n) are the ids at those positions) that are not cached yet, and the
 * partly filled block holding positions past the last full one as a partial leaf (unless
 * a cached child of the same parent already holds those tokens). A block whose tokens
 * and parent are already cached under another block is not stored twice; its children
 * are stored under that block. A sequence that goes on writing into a block the cache
 * now holds copies it first. No-op on a contiguous cache.
 * sd_kv_pool_cache_clear: drop every cached block that no sequence maps.
 */
int32_t sd_kv_cache_attach(sd_kv *kv, const int32_t *tokens, int32_t n);
void sd_kv_cache_store(sd_kv *kv, const int32_t *tokens, int32_t n);
void sd_kv_pool_cache_clear(sd_kv_pool *pool);

/* ---- every cache: a sequence's view ---- */

int32_t sd_kv_n(const sd_kv *kv);        /* committed positions */
int32_t sd_kv_capacity(const sd_kv *kv); /* n_ctx */
sd_type sd_kv_type(const sd_kv *kv);     /* element type of the rows */
int32_t sd_kv_dim(const sd_kv *kv);      /* elements per row */
size_t sd_kv_row_bytes(const sd_kv *kv); /* sd_kv_type_row_bytes(type, kv_dim) */
/* Blocks the sequence maps (released ones not; a grouped pool: summed over its groups). */
int32_t sd_kv_n_blocks(const sd_kv *kv);
/* Check a paged sequence's tables: each group maps exactly the blocks of its positions
 * [first, n) (first: 0, or where that group's released blocks end). SD_OK, or
 * SD_ERR_ARG naming the group and counts (a bug). */
int sd_kv_seq_check(const sd_kv *kv, sd_error *err);
/* First position whose rows are mapped: 0, or the positions [0, first) were released by
 * sd_kv_release_before (a multiple of block_size). */
int32_t sd_kv_first(const sd_kv *kv);
sd_kv_pool *sd_kv_pool_of(sd_kv *kv); /* the pool (a contiguous cache: its own) */

/* Make m more positions writable (see the contract at the top). Errors: SD_ERR_CONTEXT if
 * n + m > n_ctx, SD_ERR_OOM if the pool has no block left (neither free nor evictable);
 * on error the committed positions are unchanged (a block copied for copy-on-write stays:
 * it holds the same rows). */
int sd_kv_reserve(sd_kv *kv, int32_t m, sd_error *err);
/* Mark m reserved positions as written: n += m (m must have been reserved). */
void sd_kv_commit(sd_kv *kv, int32_t m);
/* Drop positions [n', n) and the blocks past position n' - 1. SD_ERR_ARG if n' < 0,
 * n' > n, or 0 < n' <= sd_kv_first(kv) (its rows were released; state unchanged). n' = 0
 * empties the sequence, released blocks or not. */
int sd_kv_truncate(sd_kv *kv, int32_t n_keep, sd_error *err);
/* Sliding-window attention: give back to the pool the blocks of a paged sequence whose
 * positions all lie before pos (never the block of committed position n - 1). Their rows
 * are never read again: sd_kv_k / sd_kv_v / sd_kv_span treat them as unmapped, the prefix
 * cache stores nothing more of the sequence, and truncation into them is refused. A
 * block the prefix cache also holds stays cached. Returns the blocks released (0 on a
 * contiguous cache). Call it for a model whose every layer is windowed (one global layer
 * reads every key), or on a grouped pool: there only the windowed groups' blocks go
 * (summed in the count), and sd_kv_first is then the first position the windowed groups
 * still map (group 0 keeps every row, but the sequence is treated as released). */
int32_t sd_kv_release_before(sd_kv *kv, int32_t pos);

/* Row of K (resp. V) for layer l at position pos: sd_kv_row_bytes(kv) bytes of
 * sd_kv_type(kv) (float[kv_dim] for F32, uint16_t[kv_dim] binary16 for F16, kv_dim / 32
 * blocks for Q8_0 / Q4_0). pos must be reserved or committed (a mapped block); NULL
 * otherwise. The rows of positions [pos, pos + sd_kv_span(kv, pos)) are contiguous,
 * sd_kv_row_bytes(kv) bytes apart. */
void *sd_kv_k(sd_kv *kv, int32_t layer, int32_t pos);
void *sd_kv_v(sd_kv *kv, int32_t layer, int32_t pos);
int32_t sd_kv_span(const sd_kv *kv, int32_t pos);

/* The block table of layer's rows (for a device kernel that addresses rows itself):
 * returns n, the logical blocks the sequence maps (committed and reserved positions), and
 * sets *ids to its n pool block ids (logical block i holds positions [i * bs, (i + 1) *
 * bs); -1: released behind a sliding window) and *block_size to bs. In one layer, row p
 * is at (ids[p / bs] - ids[j]) * bs * sd_kv_row_bytes(kv) + (p % bs) * sd_kv_row_bytes(kv)
 * bytes from the row of position j * bs, for K as for V, and every layer of the same pool
 * (group) has the same table. A contiguous cache: n = 1, ids = {0}, bs = n_ctx. The table
 * stays valid until the sequence is reserved, truncated, forked into or freed. */
int32_t sd_kv_block_table(const sd_kv *kv, int32_t layer, const int32_t **ids, int32_t *block_size);

#ifdef __cplusplus
}
#endif
#endif /* SD_KV_H */
