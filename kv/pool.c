/* kv/pool.c: the block pool of a KV cache: storage, reference counts, the free list, the
 * prefix cache's idle blocks and their eviction (least recently used first, children before
 * parents), accounting (see sd_kv.h); and a grouped pool (sd_kv_pool_params.n_group > 1): one
 * block pool per layer group, each holding only its layers' rows, so that a windowed group
 * (Gemma 3's local layers) gives back the blocks behind its window while group 0 (the
 * global layers) keeps every position (their sequences: kv.c). */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"

/* Upper bounds on the sizes a pool accepts (far above any model we run). */
#define SD_KV_MAX_LAYER 4096
#define SD_KV_MAX_POS   (1 << 24) /* positions in a pool */
#define SD_KV_MAX_DIM   (1 << 20)

int sd_kv_type_ok(sd_type t) {
    return t == SD_TYPE_F32 || t == SD_TYPE_F16 || t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0;
}

size_t sd_kv_type_row_bytes(sd_type t, int32_t kv_dim) {
    size_t rb = 0;
    if (!sd_kv_type_ok(t) || kv_dim <= 0 || sd_type_row_bytes(t, kv_dim, &rb) != 0) return 0;
    return rb;
}

static void *kv_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

/* Checks p and computes the row, block and layer sizes and the total storage bytes. */
static int pool_sizes(const sd_kv_pool_params *p, size_t *row_bytes, size_t *block_bytes,
                      size_t *layer_len, size_t *total, sd_error *err) {
    if (!p || p->n_layer <= 0 || p->kv_dim <= 0 || p->block_size <= 0 || p->n_blocks <= 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: sizes must be positive (n_layer %d, kv_dim %d, block size %d, "
                         "blocks %d)",
                         p ? p->n_layer : 0, p ? p->kv_dim : 0, p ? p->block_size : 0,
                         p ? p->n_blocks : 0);
    if (p->n_layer > SD_KV_MAX_LAYER || p->kv_dim > SD_KV_MAX_DIM ||
        (int64_t)p->block_size * p->n_blocks > SD_KV_MAX_POS)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: sizes out of range (n_layer %d <= %d, kv_dim %d <= %d, "
                         "positions %lld <= %d)",
                         p->n_layer, SD_KV_MAX_LAYER, p->kv_dim, SD_KV_MAX_DIM,
                         (long long)p->block_size * p->n_blocks, SD_KV_MAX_POS);
    if (!sd_kv_type_ok(p->type))
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: element type %s (%d), expected f32, f16, q8_0 or q4_0",
                         sd_type_name((uint32_t)p->type), (int)p->type);
    *row_bytes = sd_kv_type_row_bytes(p->type, p->kv_dim);
    if (*row_bytes == 0)
        return sd_errorf(
            err, SD_ERR_ARG, "kv cache: kv_dim %d is not a multiple of %lld, the %s block size",
            p->kv_dim, (long long)sd_type_block_elems(p->type), sd_type_name((uint32_t)p->type));
    size_t bytes;
    if (sd_mul_size(*row_bytes, (size_t)p->block_size, block_bytes) ||
        sd_mul_size(*block_bytes, (size_t)p->n_blocks, layer_len) ||
        sd_mul_size(*layer_len, (size_t)p->n_layer, &bytes) || sd_mul_size(bytes, 2, total))
        return sd_errorf(err, SD_ERR_OOM,
                         "kv cache: size overflows (n_layer %d, positions %lld, kv_dim %d)",
                         p->n_layer, (long long)p->block_size * p->n_blocks, p->kv_dim);
    return SD_OK;
}

/* ---- a grouped pool (sd_kv_pool_params.n_group > 1): one block pool per layer group ---- */

/* Storage slices start 64-byte aligned. */
#define SD_KV_GROUP_ALIGN 64

/* Checks the grouping of p and fills sub with group g's pool parameters (no storage). */
static int group_params(const sd_kv_pool_params *p, int32_t g, sd_kv_pool_params *sub,
                        sd_error *err) {
    int32_t n_layer = 0;
    for (int32_t l = 0; l < p->n_layer; l++)
        n_layer += p->layer_group[l] == g;
    if (n_layer == 0) return sd_errorf(err, SD_ERR_ARG, "kv cache: layer group %d is empty", g);
    if (p->group_blocks[g] < 0)
        return sd_errorf(err, SD_ERR_ARG, "kv cache: layer group %d has %d blocks", g,
                         p->group_blocks[g]);
    memset(sub, 0, sizeof *sub);
    sub->n_layer = n_layer;
    sub->kv_dim = p->kv_dim;
    sub->block_size = p->block_size;
    sub->n_blocks = p->group_blocks[g] > 0 ? p->group_blocks[g] : p->n_blocks;
    sub->type = p->type;
    sub->copy = p->copy;
    sub->copy_ctx = p->copy_ctx;
    return SD_OK;
}

static int group_sizes(const sd_kv_pool_params *p, size_t *total, sd_error *err) {
    if (p->n_group < 2 || p->n_group > SD_KV_MAX_GROUPS)
        return sd_errorf(err, SD_ERR_ARG, "kv cache: %d layer groups, expected 0 .. %d", p->n_group,
                         SD_KV_MAX_GROUPS);
    if (!p->layer_group || p->n_layer <= 0 || p->block_size <= 0 || p->n_blocks <= 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: layer groups need layer_group[n_layer] and positive sizes "
                         "(n_layer %d, block size %d, blocks %d)",
                         p->n_layer, p->block_size, p->n_blocks);
    for (int32_t l = 0; l < p->n_layer; l++)
        if (p->layer_group[l] < 0 || p->layer_group[l] >= p->n_group)
            return sd_errorf(err, SD_ERR_ARG, "kv cache: layer %d in group %d, expected 0 .. %d", l,
                             p->layer_group[l], p->n_group - 1);
    if (p->group_window[0] > 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: layer group 0 has a window (%d); it must keep every position",
                         p->group_window[0]);
    size_t sum = 0;
    for (int32_t g = 0; g < p->n_group; g++) {
        sd_kv_pool_params sub = {
            0}; /* group_params fills it (gcc cannot see that it returns first) */
        size_t bytes;
        int rc = group_params(p, g, &sub, err);
        if (!rc) rc = sd_kv_pool_storage_bytes(&sub, &bytes, err);
        if (rc) return sd_error_prefix(err, rc, "layer group %d", g);
        bytes = (bytes + SD_KV_GROUP_ALIGN - 1) / SD_KV_GROUP_ALIGN * SD_KV_GROUP_ALIGN;
        if (sd_add_size(sum, bytes, &sum))
            return sd_errorf(err, SD_ERR_OOM, "kv cache: size of %d layer groups overflows",
                             p->n_group);
    }
    *total = sum;
    return SD_OK;
}

static void group_pool_free(sd_kv_pool *p) {
    for (int32_t g = 0; g < p->n_group; g++)
        sd_kv_pool_free(p->sub[g]);
    free(p->layer_sub);
    free(p->layer_idx);
    free(p->owned);
    free(p);
}

static int group_pool_init(const sd_kv_pool_params *pp, sd_kv_pool **out, sd_error *err) {
    size_t total = 0;
    int rc = group_sizes(pp, &total, err);
    if (rc) return rc;
    sd_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory");
    p->n_group = pp->n_group;
    p->n_layer = pp->n_layer;
    p->kv_dim = pp->kv_dim;
    p->bs = pp->block_size;
    p->type = pp->type;
    p->row_bytes = sd_kv_type_row_bytes(pp->type, pp->kv_dim);
    p->storage_bytes = total;
    p->layer_sub = malloc((size_t)pp->n_layer * sizeof *p->layer_sub);
    p->layer_idx = malloc((size_t)pp->n_layer * sizeof *p->layer_idx);
    uint8_t *base = pp->storage;
    if (p->layer_sub && p->layer_idx && !base) {
        void *mem = NULL;
        if (posix_memalign(&mem, SD_KV_GROUP_ALIGN, total) == 0) {
            memset(mem, 0, total);
            p->owned = base = mem;
        }
    }
    if (!p->layer_sub || !p->layer_idx || !base) {
        group_pool_free(p);
        return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory (%zu bytes)", total);
    }
    int32_t count[SD_KV_MAX_GROUPS] = {0};
    for (int32_t l = 0; l < pp->n_layer; l++) {
        p->layer_sub[l] = pp->layer_group[l];
        p->layer_idx[l] = count[pp->layer_group[l]]++;
    }
    size_t off = 0;
    for (int32_t g = 0; g < p->n_group && rc == SD_OK; g++) {
        sd_kv_pool_params sub = {
            0}; /* group_params fills it (gcc cannot see that it returns first) */
        size_t bytes = 0;
        rc = group_params(pp, g, &sub, err);
        if (!rc) rc = sd_kv_pool_storage_bytes(&sub, &bytes, err);
        sub.storage = base + off;
        if (!rc) rc = sd_kv_pool_init(&sub, &p->sub[g], err);
        if (rc) sd_error_prefix(err, rc, "layer group %d", g);
        off += (bytes + SD_KV_GROUP_ALIGN - 1) / SD_KV_GROUP_ALIGN * SD_KV_GROUP_ALIGN;
        p->group_window[g] = pp->group_window[g];
    }
    if (rc) {
        group_pool_free(p);
        return rc;
    }
    p->n_blocks = p->sub[0]->n_blocks;
    *out = p;
    return SD_OK;
}

static int group_pool_check(const sd_kv_pool *p, int64_t n_seq_refs, sd_error *err) {
    int64_t refs = 0;
    for (int32_t g = 0; g < p->n_group; g++) {
        int64_t r = 0;
        const int rc = sd_kv_pool_check_one(p->sub[g], &r, err);
        if (rc) return sd_error_prefix(err, rc, "layer group %d", g);
        refs += r;
    }
    if (n_seq_refs >= 0 && refs != n_seq_refs)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv pool: sequences hold %lld block references, the %d layer groups "
                         "count %lld (a leak)",
                         (long long)n_seq_refs, p->n_group, (long long)refs);
    return SD_OK;
}

/* ---- one pool ---- */

int sd_kv_pool_storage_bytes(const sd_kv_pool_params *p, size_t *out, sd_error *err) {
    if (p && p->n_group > 1) return group_sizes(p, out, err);
    size_t rb, bb, ll;
    return pool_sizes(p, &rb, &bb, &ll, out, err);
}

void sd_kv_pool_free(sd_kv_pool *p) {
    if (!p) return;
    SD_CHECK(p->n_seqs == 0, "sd_kv_pool_free: sequences still use the pool");
    if (p->n_group > 1) {
        group_pool_free(p);
        return;
    }
    free(p->owned);
    free(p->refs);
    free(p->free_list);
    free(p->cached);
    free(p->tok);
    free(p->n_tok);
    free(p->parent);
    free(p->n_child);
    free(p->key);
    free(p->last_use);
    free(p->next);
    free(p->bucket);
    free(p);
}

int sd_kv_pool_init(const sd_kv_pool_params *pp, sd_kv_pool **out, sd_error *err) {
    *out = NULL;
    if (pp && (pp->n_group < 0 || pp->n_group > SD_KV_MAX_GROUPS))
        return sd_errorf(err, SD_ERR_ARG, "kv cache: %d layer groups, expected 0 .. %d",
                         pp->n_group, SD_KV_MAX_GROUPS);
    if (pp && pp->n_group > 1) return group_pool_init(pp, out, err);
    size_t row_bytes = 0, block_bytes = 0, layer_len = 0, total = 0;
    int rc = pool_sizes(pp, &row_bytes, &block_bytes, &layer_len, &total, err);
    if (rc) return rc;
    if (pp->n_blocks > 1 && pp->block_size > SD_KV_MAX_BLOCK)
        return sd_errorf(err, SD_ERR_ARG, "kv cache: block size %d, expected 1 .. %d",
                         pp->block_size, SD_KV_MAX_BLOCK);
    sd_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory");
    p->n_layer = pp->n_layer;
    p->kv_dim = pp->kv_dim;
    p->bs = pp->block_size;
    p->n_blocks = pp->n_blocks;
    p->type = pp->type;
    p->row_bytes = row_bytes;
    p->block_bytes = block_bytes;
    p->layer_len = layer_len;
    p->storage_bytes = total;
    p->n_group = 1;
    p->copy = pp->copy;
    p->copy_ctx = pp->copy_ctx;
    const size_t nb = (size_t)pp->n_blocks;
    p->refs = calloc(nb, sizeof *p->refs);
    p->free_list = malloc(nb * sizeof *p->free_list);
    int ok = p->refs && p->free_list;
    if (ok && pp->n_blocks > 1) { /* the prefix cache's records */
        uint32_t n_buckets = 1;
        while (n_buckets < 2u * (uint32_t)pp->n_blocks)
            n_buckets <<= 1;
        p->bucket_mask = n_buckets - 1;
        p->cached = calloc(nb, 1);
        p->tok = malloc(nb * (size_t)pp->block_size * sizeof *p->tok);
        p->n_tok = calloc(nb, sizeof *p->n_tok);
        p->parent = malloc(nb * sizeof *p->parent);
        p->n_child = calloc(nb, sizeof *p->n_child);
        p->key = calloc(nb, sizeof *p->key);
        p->last_use = calloc(nb, sizeof *p->last_use);
        p->next = malloc(nb * sizeof *p->next);
        p->bucket = malloc((size_t)n_buckets * sizeof *p->bucket);
        ok = p->cached && p->tok && p->n_tok && p->parent && p->n_child && p->key && p->last_use &&
             p->next && p->bucket;
        if (ok)
            for (uint32_t i = 0; i < n_buckets; i++)
                p->bucket[i] = -1;
    }
    uint8_t *base = pp->storage;
    if (ok && !base) {
        /* Zeroed, so that reads of never-written rows (a bug) are at least deterministic. */
        p->owned = kv_alloc(total);
        ok = p->owned != NULL;
        if (ok) memset(p->owned, 0, total);
        base = p->owned;
    }
    if (!ok) {
        sd_kv_pool_free(p);
        return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory (%zu bytes)", total);
    }
    p->k = base;
    p->v = base + total / 2;
    /* Free list as a stack: block 0 is taken first. */
    for (int32_t b = 0; b < p->n_blocks; b++)
        p->free_list[b] = p->n_blocks - 1 - b;
    p->n_free = p->n_blocks;
    *out = p;
    return SD_OK;
}

/* ---- the prefix cache's idle blocks (prefix.c registers and finds them) ---- */

static void unlink_block(sd_kv_pool *p, int32_t b) {
    int32_t *at = &p->bucket[p->key[b] & p->bucket_mask];
    while (*at != b) {
        SD_CHECK(*at >= 0, "cached block missing from its bucket");
        if (*at < 0) return;
        at = &p->next[*at];
    }
    *at = p->next[b];
}

/* Drop block b from the cache (its reference included). */
static void uncache(sd_kv_pool *p, int32_t b) {
    unlink_block(p, b);
    if (p->parent[b] >= 0) p->n_child[p->parent[b]]--;
    p->cached[b] = 0;
    p->n_cached--;
    if (p->refs[b] == 1) p->n_cached_idle--;
    sd_kv_pool_unref(p, b);
}

static void cache_ref_changed(sd_kv_pool *p, int32_t b, int32_t old_refs, int32_t new_refs) {
    (void)b;
    if (old_refs == 1 && new_refs > 1) p->n_cached_idle--;
    if (old_refs > 1 && new_refs == 1) p->n_cached_idle++;
}

int sd_kv_pool_evict_one(sd_kv_pool *p) {
    if (!p->cached || p->n_cached_idle == 0) return -1;
    int32_t best = -1;
    for (int32_t b = 0; b < p->n_blocks; b++)
        if (p->cached[b] && p->refs[b] == 1 && p->n_child[b] == 0 &&
            (best < 0 || p->last_use[b] < p->last_use[best]))
            best = b;
    /* An idle block always has an idle leaf below it: a sequence that maps a cached
     * block maps its parent too (tables are prefixes of chains). */
    SD_CHECK(best >= 0, "idle cached blocks but no idle leaf");
    if (best < 0) return -1;
    uncache(p, best);
    p->n_evicted++;
    return 0;
}

void sd_kv_pool_copy_rows(sd_kv_pool *p, int32_t dst, int32_t src, int32_t n_rows) {
    const size_t bytes = (size_t)n_rows * p->row_bytes;
    for (int32_t l = 0; l < p->n_layer; l++) {
        const size_t base = (size_t)l * p->layer_len;
        uint8_t *kd = p->k + base + (size_t)dst * p->block_bytes,
                *vd = p->v + base + (size_t)dst * p->block_bytes;
        const uint8_t *ks = p->k + base + (size_t)src * p->block_bytes,
                      *vs = p->v + base + (size_t)src * p->block_bytes;
        if (p->copy) { /* device storage: the owner copies */
            p->copy(p->copy_ctx, kd, ks, bytes);
            p->copy(p->copy_ctx, vd, vs, bytes);
        } else {
            memcpy(kd, ks, bytes);
            memcpy(vd, vs, bytes);
        }
    }
    p->n_cow++;
}

int32_t sd_kv_pool_take(sd_kv_pool *p) {
    if (p->n_free == 0 && sd_kv_pool_evict_one(p) != 0) return -1;
    const int32_t b = p->free_list[--p->n_free];
    SD_CHECK(p->refs[b] == 0, "a free block has references");
    p->refs[b] = 1;
    if (p->n_blocks - p->n_free > p->peak_used) p->peak_used = p->n_blocks - p->n_free;
    return b;
}

void sd_kv_pool_ref(sd_kv_pool *p, int32_t b) {
    const int32_t old = p->refs[b]++;
    if (p->cached && p->cached[b]) cache_ref_changed(p, b, old, old + 1);
}

void sd_kv_pool_unref(sd_kv_pool *p, int32_t b) {
    SD_CHECK(p->refs[b] > 0, "unref of a free block");
    if (p->refs[b] <= 0) return; /* our bug; never corrupt the free list */
    const int32_t old = p->refs[b]--;
    if (p->cached && p->cached[b]) cache_ref_changed(p, b, old, old - 1);
    if (p->refs[b] == 0) p->free_list[p->n_free++] = b;
}

void sd_kv_pool_get_stats(const sd_kv_pool *p, sd_kv_pool_stats *o) {
    memset(o, 0, sizeof *o);
    if (p->n_group > 1) {
        sd_kv_pool_get_stats(p->sub[0], o);
        o->storage_bytes = p->storage_bytes;
        o->n_group = p->n_group;
        for (int32_t g = 0; g < p->n_group; g++) {
            const sd_kv_pool *q = p->sub[g];
            o->group_blocks[g] = q->n_blocks;
            o->group_free[g] = q->n_free;
            o->group_peak_used[g] = q->peak_used;
            o->group_cached_idle[g] = q->n_cached_idle;
            o->group_layers[g] = q->n_layer;
        }
        return;
    }
    o->n_peak_used = p->peak_used;
    o->storage_bytes = p->storage_bytes;
    o->n_group = 1;
    o->group_blocks[0] = p->n_blocks;
    o->group_free[0] = p->n_free;
    o->group_peak_used[0] = p->peak_used;
    o->group_cached_idle[0] = p->n_cached_idle;
    o->group_layers[0] = p->n_layer;
    o->n_blocks = p->n_blocks;
    o->block_size = p->bs;
    o->n_free = p->n_free;
    o->n_cached = p->n_cached;
    o->n_cached_idle = p->n_cached_idle;
    o->n_hit_blocks = p->n_hit_blocks;
    o->n_evicted = p->n_evicted;
    o->n_cow = p->n_cow;
}

int32_t sd_kv_pool_n_available(const sd_kv_pool *p) {
    if (p->n_group > 1) p = p->sub[0];
    return p->n_free + p->n_cached_idle;
}

int32_t sd_kv_pool_blocks_for(const sd_kv_pool *p, int64_t n) {
    if (n <= 0) return 0;
    const int64_t b = (n + p->bs - 1) / p->bs;
    return b > INT32_MAX ? INT32_MAX : (int32_t)b;
}

int sd_kv_pool_check(const sd_kv_pool *p, int64_t n_seq_refs, sd_error *err) {
    if (p->n_group > 1) return group_pool_check(p, n_seq_refs, err);
    int64_t refs = 0;
    int rc = sd_kv_pool_check_one(p, &refs, err);
    if (rc) return rc;
    if (n_seq_refs >= 0 && refs != n_seq_refs)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv pool: sequences hold %lld block references, the pool counts %lld "
                         "(a leak)",
                         (long long)n_seq_refs, (long long)refs);
    return SD_OK;
}

int sd_kv_pool_check_one(const sd_kv_pool *p, int64_t *refs_out, sd_error *err) {
    uint8_t *on_list = calloc((size_t)p->n_blocks, 1);
    if (!on_list) return sd_errorf(err, SD_ERR_OOM, "kv pool check: out of memory");
    int rc = SD_OK;
    for (int32_t i = 0; i < p->n_free && rc == SD_OK; i++) {
        const int32_t b = p->free_list[i];
        if (b < 0 || b >= p->n_blocks || on_list[b])
            rc = sd_errorf(err, SD_ERR_ARG, "kv pool: free list entry %d is block %d (%s)", i, b,
                           b < 0 || b >= p->n_blocks ? "out of range" : "listed twice");
        else
            on_list[b] = 1;
    }
    int64_t refs = 0;
    int32_t n_cached = 0, n_idle = 0;
    for (int32_t b = 0; b < p->n_blocks && rc == SD_OK; b++) {
        const int cached = p->cached && p->cached[b];
        if (p->refs[b] < 0 || (p->refs[b] == 0) != (on_list[b] != 0))
            rc = sd_errorf(err, SD_ERR_ARG, "kv pool: block %d has %d references and is %s", b,
                           p->refs[b], on_list[b] ? "free" : "not free");
        else if (cached && p->refs[b] < 1)
            rc = sd_errorf(err, SD_ERR_ARG, "kv pool: cached block %d has no reference", b);
        refs += p->refs[b] - cached;
        n_cached += cached;
        n_idle += cached && p->refs[b] == 1;
    }
    free(on_list);
    if (rc) return rc;
    if (n_cached != p->n_cached || n_idle != p->n_cached_idle)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv pool: %d cached blocks (%d idle) counted, %d (%d) recorded", n_cached,
                         n_idle, p->n_cached, p->n_cached_idle);
    *refs_out = refs;
    return SD_OK;
}
