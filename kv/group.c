/* kv/group.c: a grouped pool (sd_kv_pool_params.n_group > 1): one block pool per layer
 * group, each holding only its layers' rows, and per sequence one sequence per group, so
 * that a windowed group (Gemma 3's local layers) gives back the blocks behind its window
 * while group 0 (the global layers) keeps every position. The public functions of kv.c,
 * pool.c and prefix.c forward here or loop over the groups (see sd_kv.h). */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"

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

int sd_kv_group_sizes(const sd_kv_pool_params *p, size_t *total, sd_error *err) {
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
        sd_kv_pool_params sub;
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

void sd_kv_group_pool_free(sd_kv_pool *p) {
    for (int32_t g = 0; g < p->n_group; g++)
        sd_kv_pool_free(p->sub[g]);
    free(p->layer_sub);
    free(p->layer_idx);
    free(p->owned);
    free(p);
}

int sd_kv_group_pool_init(const sd_kv_pool_params *pp, sd_kv_pool **out, sd_error *err) {
    size_t total = 0;
    int rc = sd_kv_group_sizes(pp, &total, err);
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
        sd_kv_group_pool_free(p);
        return sd_errorf(err, SD_ERR_OOM, "kv cache: out of memory (%zu bytes)", total);
    }
    int32_t count[SD_KV_MAX_GROUPS] = {0};
    for (int32_t l = 0; l < pp->n_layer; l++) {
        p->layer_sub[l] = pp->layer_group[l];
        p->layer_idx[l] = count[pp->layer_group[l]]++;
    }
    size_t off = 0;
    for (int32_t g = 0; g < p->n_group && rc == SD_OK; g++) {
        sd_kv_pool_params sub;
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
        sd_kv_group_pool_free(p);
        return rc;
    }
    p->n_blocks = p->sub[0]->n_blocks;
    *out = p;
    return SD_OK;
}

int sd_kv_group_pool_check(const sd_kv_pool *p, int64_t n_seq_refs, sd_error *err) {
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

int sd_kv_group_seq_init(sd_kv *kv, sd_error *err) {
    for (int32_t g = 0; g < kv->pool->n_group; g++) {
        const int rc = sd_kv_seq_init(kv->pool->sub[g], kv->n_ctx, &kv->sub[g], err);
        if (rc) {
            sd_kv_group_seq_free(kv);
            return rc;
        }
    }
    return SD_OK;
}

void sd_kv_group_seq_free(sd_kv *kv) {
    for (int32_t g = 0; g < SD_KV_MAX_GROUPS; g++) {
        sd_kv_free(kv->sub[g]);
        kv->sub[g] = NULL;
    }
}

int sd_kv_group_reserve(sd_kv *kv, int32_t m, sd_error *err) {
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

int32_t sd_kv_group_release_before(sd_kv *kv, int32_t pos) {
    int32_t n = 0;
    for (int32_t g = 0; g < kv->pool->n_group; g++)
        if (kv->pool->group_window[g] > 0) n += sd_kv_release_before(kv->sub[g], pos);
    return n;
}

int32_t sd_kv_group_attach(sd_kv *kv, const int32_t *tokens, int32_t n) {
    if (kv->n != 0) return 0;
    /* Each group's cache evicts on its own: keep the prefix every group found. */
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
