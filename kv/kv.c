/* kv/kv.c: a sequence's view of a KV pool: its block table, reserve with copy-on-write,
 * commit, truncate, fork, row addresses, and a grouped pool's one sequence per layer group
 * (see sd_kv.h). A contiguous cache is a pool of one block of n_ctx positions, mapped at
 * init. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"

#define SD_KV_MAX_SEQ_CTX (1 << 24)

/* ---- a sequence of a grouped pool: one sequence per layer group (kv->sub) ---- */

static void group_seq_free(sd_kv *kv) {
    for (int32_t g = 0; g < SD_KV_MAX_GROUPS; g++) {
        sd_kv_free(kv->sub[g]);
        kv->sub[g] = NULL;
    }
}

static int group_seq_init(sd_kv *kv, sd_error *err) {
    for (int32_t g = 0; g < kv->pool->n_group; g++) {
        const int rc = sd_kv_seq_init(kv->pool->sub[g], kv->n_ctx, &kv->sub[g], err);
        if (rc) {
            group_seq_free(kv);
            return rc;
        }
    }
    return SD_OK;
}

static int group_reserve(sd_kv *kv, int32_t m, sd_error *err) {
    for (int32_t g = 0; g < kv->pool->n_group; g++) {
        const int rc = sd_kv_reserve(kv->sub[g], m, err);
        if (rc) {
            /* Give back what the groups before mapped here (positions past n are not
             * committed, and n - 1's block is mapped in each: the truncation cannot fail). */
            for (int32_t i = 0; i < g; i++)
                sd_kv_truncate(kv->sub[i], kv->n, NULL);
            return sd_error_prefix(err, rc, "layer group %d (%d layers%s)", g,
                                   kv->pool->sub[g]->n_layer,
                                   kv->pool->group_window[g] > 0 ? ", windowed" : "");
        }
    }
    return SD_OK;
}

static int32_t group_release_before(sd_kv *kv, int32_t pos) {
    int32_t n = 0;
    for (int32_t g = 0; g < kv->pool->n_group; g++)
        if (kv->pool->group_window[g] > 0) n += sd_kv_release_before(kv->sub[g], pos);
    return n;
}

/* ---- sequences ---- */

static int seq_new(sd_kv_pool *pool, int32_t n_ctx, sd_kv **out, sd_error *err) {
    sd_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory");
    const int32_t n_tab = sd_kv_pool_blocks_for(pool, n_ctx);
    kv->table = malloc((size_t)n_tab * sizeof *kv->table);
    if (!kv->table) {
        free(kv);
        return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory (block table)");
    }
    kv->pool = pool;
    kv->n_ctx = n_ctx;
    if (pool->n_group > 1) {
        const int rc = group_seq_init(kv, err);
        if (rc) {
            free(kv->table);
            free(kv);
            return rc;
        }
    }
    pool->n_seqs++;
    *out = kv;
    return SD_OK;
}

int sd_kv_storage_bytes(const sd_kv_params *p, size_t *out, sd_error *err) {
    if (!p) return sd_errorf(err, SD_ERR_ARG, "kv cache: params is NULL");
    sd_kv_pool_params pp = {.n_layer = p->n_layer,
                            .kv_dim = p->kv_dim,
                            .block_size = p->n_ctx,
                            .n_blocks = 1,
                            .type = p->type};
    if (p->n_ctx <= 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: sizes must be positive (n_layer %d, n_ctx %d, kv_dim %d)",
                         p->n_layer, p->n_ctx, p->kv_dim);
    return sd_kv_pool_storage_bytes(&pp, out, err);
}

int sd_kv_init(const sd_kv_params *p, sd_kv **out, sd_error *err) {
    *out = NULL;
    if (!p) return sd_errorf(err, SD_ERR_ARG, "kv cache: params is NULL");
    if (p->n_layer <= 0 || p->n_ctx <= 0 || p->kv_dim <= 0)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: sizes must be positive (n_layer %d, n_ctx %d, kv_dim %d)",
                         p->n_layer, p->n_ctx, p->kv_dim);
    sd_kv_pool_params pp = {.n_layer = p->n_layer,
                            .kv_dim = p->kv_dim,
                            .block_size = p->n_ctx,
                            .n_blocks = 1,
                            .type = p->type,
                            .storage = p->storage};
    sd_kv_pool *pool = NULL;
    int rc = sd_kv_pool_init(&pp, &pool, err);
    if (rc) return rc;
    sd_kv *kv = NULL;
    rc = seq_new(pool, p->n_ctx, &kv, err);
    if (rc) {
        sd_kv_pool_free(pool);
        return rc;
    }
    kv->own_pool = 1;
    kv->table[0] = sd_kv_pool_take(pool); /* the one block, mapped for good */
    kv->held = 1;
    *out = kv;
    return SD_OK;
}

int sd_kv_seq_init(sd_kv_pool *pool, int32_t n_ctx, sd_kv **out, sd_error *err) {
    *out = NULL;
    if (!pool) return sd_errorf(err, SD_ERR_ARG, "kv sequence: pool is NULL");
    /* n_ctx may exceed the pool: reserve then fails when no block is left. */
    if (n_ctx <= 0 || n_ctx > SD_KV_MAX_SEQ_CTX)
        return sd_errorf(err, SD_ERR_ARG, "kv sequence: n_ctx %d, expected 1 .. %d", n_ctx,
                         SD_KV_MAX_SEQ_CTX);
    return seq_new(pool, n_ctx, out, err);
}

/* Return the blocks of table[keep ..] to the pool (the released ones below lo are not
 * held: with keep <= lo the sequence then maps nothing, and lo drops to keep). */
static void release_from(sd_kv *kv, int32_t keep) {
    while (kv->held > keep && kv->held > kv->lo)
        sd_kv_pool_unref(kv->pool, kv->table[--kv->held]);
    if (kv->held > keep) kv->held = kv->lo = keep;
}

void sd_kv_free(sd_kv *kv) {
    if (!kv) return;
    sd_kv_pool *pool = kv->pool;
    if (kv->sub[0]) group_seq_free(kv);
    release_from(kv, 0);
    pool->n_seqs--;
    free(kv->table);
    const int own = kv->own_pool;
    free(kv);
    if (own) sd_kv_pool_free(pool);
}

int32_t sd_kv_n(const sd_kv *kv) {
    return kv->n;
}
int32_t sd_kv_capacity(const sd_kv *kv) {
    return kv->n_ctx;
}
sd_type sd_kv_type(const sd_kv *kv) {
    return kv->pool->type;
}
int32_t sd_kv_dim(const sd_kv *kv) {
    return kv->pool->kv_dim;
}
size_t sd_kv_row_bytes(const sd_kv *kv) {
    return kv->pool->row_bytes;
}
int32_t sd_kv_n_blocks(const sd_kv *kv) {
    if (kv->sub[0]) {
        int32_t n = 0;
        for (int32_t g = 0; g < kv->pool->n_group; g++)
            n += sd_kv_n_blocks(kv->sub[g]);
        return n;
    }
    return kv->own_pool ? 0 : kv->held - kv->lo; /* a contiguous cache's one block is its own */
}
int32_t sd_kv_first(const sd_kv *kv) {
    if (kv->sub[0]) {
        int32_t first = 0;
        for (int32_t g = 0; g < kv->pool->n_group; g++)
            if (sd_kv_first(kv->sub[g]) > first) first = sd_kv_first(kv->sub[g]);
        return first;
    }
    return kv->lo * kv->pool->bs;
}

int32_t sd_kv_release_before(sd_kv *kv, int32_t pos) {
    if (kv->own_pool || pos <= 0) return 0;
    if (kv->sub[0]) return group_release_before(kv, pos);
    if (pos > kv->n - 1) pos = kv->n - 1;    /* the block of position n - 1 stays */
    const int32_t upto = pos / kv->pool->bs; /* blocks [0, upto) lie wholly before pos */
    int32_t n = 0;
    for (; kv->lo < upto && kv->lo < kv->held; kv->lo++, n++) {
        sd_kv_pool_unref(kv->pool, kv->table[kv->lo]);
        kv->table[kv->lo] = -1;
    }
    return n;
}
sd_kv_pool *sd_kv_pool_of(sd_kv *kv) {
    return kv->pool;
}

int sd_kv_reserve(sd_kv *kv, int32_t m, sd_error *err) {
    if (m < 0) return sd_errorf(err, SD_ERR_ARG, "kv cache: cannot reserve %d positions", m);
    if (m > kv->n_ctx - kv->n)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "context full: %d positions in use + %d new > n_ctx %d", kv->n, m,
                         kv->n_ctx);
    if (m == 0 || kv->own_pool) return SD_OK;
    if (kv->sub[0]) return group_reserve(kv, m, err);
    sd_kv_pool *p = kv->pool;
    const int32_t first = kv->n / p->bs, last = (kv->n + m - 1) / p->bs;
    const int32_t held0 = kv->held;
    /* Copy-on-write of the block position n falls in, if it is mapped and shared. */
    if (first < kv->held && p->refs[kv->table[first]] > 1) {
        const int32_t nb = sd_kv_pool_take(p);
        if (nb < 0) goto full;
        const int32_t old = kv->table[first];
        if (kv->n % p->bs) sd_kv_pool_copy_rows(p, nb, old, kv->n % p->bs);
        kv->table[first] = nb;
        sd_kv_pool_unref(p, old);
    }
    while (kv->held <= last) {
        const int32_t nb = sd_kv_pool_take(p);
        if (nb < 0) goto full;
        kv->table[kv->held++] = nb;
    }
    return SD_OK;
full:
    release_from(kv, held0); /* the blocks mapped here (a copy-on-write copy stays) */
    return sd_errorf(err, SD_ERR_OOM,
                     "kv cache: no free block for %d more positions (pool of %d blocks of %d, "
                     "none free or evictable)",
                     m, p->n_blocks, p->bs);
}

void sd_kv_commit(sd_kv *kv, int32_t m) {
    SD_CHECK(m >= 0 && m <= kv->n_ctx - kv->n, "sd_kv_commit: m was not reserved");
    if (m < 0 || m > kv->n_ctx - kv->n) return; /* our bug; never corrupt n */
    if (kv->sub[0]) {
        for (int32_t g = 0; g < kv->pool->n_group; g++)
            sd_kv_commit(kv->sub[g], m);
        kv->n += m;
        return;
    }
    SD_CHECK(kv->own_pool || sd_kv_pool_blocks_for(kv->pool, kv->n + m) <= kv->held,
             "sd_kv_commit: positions without blocks");
    kv->n += m;
}

int sd_kv_truncate(sd_kv *kv, int32_t n_keep, sd_error *err) {
    if (n_keep < 0 || n_keep > kv->n)
        return sd_errorf(err, SD_ERR_ARG, "kv cache: cannot truncate to %d (0..%d committed)",
                         n_keep, kv->n);
    if (n_keep > 0 && n_keep <= sd_kv_first(kv))
        return sd_errorf(err, SD_ERR_ARG,
                         "kv cache: cannot truncate to %d: positions before %d were released "
                         "(behind the sliding window)",
                         n_keep, sd_kv_first(kv));
    kv->n = n_keep;
    for (int32_t g = 0; kv->sub[0] && g < kv->pool->n_group; g++)
        sd_kv_truncate(kv->sub[g], n_keep, NULL); /* cannot fail: checked above */
    if (!kv->own_pool) release_from(kv, sd_kv_pool_blocks_for(kv->pool, n_keep));
    return SD_OK;
}

int sd_kv_fork(sd_kv *dst, const sd_kv *src, int32_t n, sd_error *err) {
    if (!dst || !src || dst->pool != src->pool || dst->own_pool)
        return sd_errorf(err, SD_ERR_ARG, "kv fork: sequences of one paged pool expected");
    if (dst->n != 0 || dst->held != 0)
        return sd_errorf(err, SD_ERR_ARG, "kv fork: the destination holds %d positions", dst->n);
    if (n < 0 || n > src->n || n > dst->n_ctx)
        return sd_errorf(err, SD_ERR_ARG, "kv fork: %d positions, expected 0 .. %d", n,
                         src->n < dst->n_ctx ? src->n : dst->n_ctx);
    if (n > 0 && n <= sd_kv_first(src))
        return sd_errorf(err, SD_ERR_ARG,
                         "kv fork: %d positions, but positions before %d were released", n,
                         sd_kv_first(src));
    if (src->sub[0]) {
        for (int32_t g = 0; g < src->pool->n_group; g++) {
            const int rc = sd_kv_fork(dst->sub[g], src->sub[g], n, err);
            if (rc) { /* cannot happen after the checks above; undo anyway */
                for (int32_t i = 0; i < g; i++)
                    sd_kv_truncate(dst->sub[i], 0, NULL);
                return rc;
            }
        }
        dst->n = n;
        return SD_OK;
    }
    const int32_t nb = sd_kv_pool_blocks_for(src->pool, n);
    for (int32_t i = 0; i < nb; i++) {
        if (i >= src->lo) sd_kv_pool_ref(src->pool, src->table[i]);
        dst->table[i] = src->table[i];
    }
    dst->held = nb;
    dst->lo = n > 0 ? src->lo : 0;
    dst->n = n;
    return SD_OK;
}

/* Byte offset of position pos of layer l in the K (or V) region; (size_t)-1 when pos
 * has no block. */
static size_t row_off(const sd_kv *kv, int32_t layer, int32_t pos) {
    const sd_kv_pool *p = kv->pool;
    if (layer < 0 || layer >= p->n_layer || pos < 0 || pos >= kv->n_ctx) return (size_t)-1;
    const int32_t i = pos / p->bs;
    if (i >= kv->held || i < kv->lo) return (size_t)-1;
    return (size_t)layer * p->layer_len + (size_t)kv->table[i] * p->block_bytes +
           (size_t)(pos % p->bs) * p->row_bytes;
}

/* A grouped sequence: the group sequence holding layer's rows, and its index there. */
static sd_kv *group_of(sd_kv *kv, int32_t *layer) {
    if (!kv->sub[0] || *layer < 0 || *layer >= kv->pool->n_layer) return kv;
    sd_kv *g = kv->sub[kv->pool->layer_sub[*layer]];
    *layer = kv->pool->layer_idx[*layer];
    return g;
}

void *sd_kv_k(sd_kv *kv, int32_t layer, int32_t pos) {
    kv = group_of(kv, &layer);
    const size_t off = row_off(kv, layer, pos);
    SD_CHECK(off != (size_t)-1, "sd_kv_k: layer or position out of range");
    return off == (size_t)-1 ? NULL : kv->pool->k + off;
}

void *sd_kv_v(sd_kv *kv, int32_t layer, int32_t pos) {
    kv = group_of(kv, &layer);
    const size_t off = row_off(kv, layer, pos);
    SD_CHECK(off != (size_t)-1, "sd_kv_v: layer or position out of range");
    return off == (size_t)-1 ? NULL : kv->pool->v + off;
}

int32_t sd_kv_span(const sd_kv *kv, int32_t pos) {
    if (pos < 0 || pos >= kv->n_ctx) return 0;
    if (kv->sub[0]) { /* one block size: a group that maps pos gives the same span */
        int32_t span = 0;
        for (int32_t g = 0; g < kv->pool->n_group; g++)
            if (sd_kv_span(kv->sub[g], pos) > span) span = sd_kv_span(kv->sub[g], pos);
        return span;
    }
    const int32_t bs = kv->pool->bs;
    if (pos / bs >= kv->held || pos / bs < kv->lo) return 0;
    const int32_t span = bs - pos % bs;
    return span < kv->n_ctx - pos ? span : kv->n_ctx - pos;
}

int32_t sd_kv_block_table(const sd_kv *kv, int32_t layer, const int32_t **ids,
                          int32_t *block_size) {
    if (kv->sub[0] && layer >= 0 && layer < kv->pool->n_layer)
        kv = kv->sub[kv->pool->layer_sub[layer]];
    *ids = kv->table;
    *block_size = kv->own_pool ? kv->n_ctx : kv->pool->bs;
    return kv->held;
}

int sd_kv_seq_check(const sd_kv *kv, sd_error *err) {
    if (kv->own_pool) return SD_OK;
    if (kv->sub[0]) {
        for (int32_t g = 0; g < kv->pool->n_group; g++) {
            if (kv->sub[g]->n != kv->n)
                return sd_errorf(err, SD_ERR_ARG,
                                 "kv sequence: group %d holds %d positions, not %d", g,
                                 kv->sub[g]->n, kv->n);
            const int rc = sd_kv_seq_check(kv->sub[g], err);
            if (rc) return sd_error_prefix(err, rc, "group %d", g);
        }
        return SD_OK;
    }
    const int32_t want =
        sd_kv_pool_blocks_for(kv->pool, kv->n) - sd_kv_pool_blocks_for(kv->pool, sd_kv_first(kv));
    if (sd_kv_n_blocks(kv) != want)
        return sd_errorf(err, SD_ERR_ARG,
                         "kv sequence: maps %d blocks for %d positions (from %d), expected %d",
                         sd_kv_n_blocks(kv), kv->n, sd_kv_first(kv), want);
    return SD_OK;
}
