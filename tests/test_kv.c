/*
 * tests/test_kv.c: the paged KV cache (kv/): block accounting, reserve / truncate,
 * copy-on-write after a fork, the prefix cache (exact matching, LRU eviction leaves
 * first), a full pool, the element types' row sizes, storage copied by its owner (a
 * device buffer) and the block table's addressing, and a long random run of every
 * operation against an independent model (each sequence's rows as a plain array), with
 * the pool's accounting checked after every step.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kv/sd_kv.h"

#define NL 2 /* layers */
#define KD 4 /* kv_dim */

static sd_kv_pool *pool_new(int32_t bs, int32_t n_blocks) {
    sd_kv_pool_params p = {
        .n_layer = NL, .kv_dim = KD, .block_size = bs, .n_blocks = n_blocks, .type = SD_TYPE_F32};
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    return pool;
}

static sd_kv *seq_new(sd_kv_pool *pool, int32_t n_ctx) {
    sd_kv *kv = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_kv_seq_init(pool, n_ctx, &kv, &err), SD_OK, "%s", err.msg);
    return kv;
}

/* The value the test writes at (layer, position, element, k or v) for a row whose token
 * prefix hashes to h: a function of the tokens up to the position, as real K/V are. */
static float row_val(uint64_t h, int32_t l, int32_t e, int v) {
    return (float)((h >> 11) % 100003) + 0.25f * (float)l + 0.0625f * (float)e + (v ? 0.5f : 0.f);
}

static uint64_t hash_step(uint64_t h, int32_t tok) {
    h ^= (uint64_t)(uint32_t)tok + UINT64_C(0x9e3779b97f4a7c15);
    h *= UINT64_C(0xff51afd7ed558ccd);
    return h ^ (h >> 29);
}

/* Append tokens t[0 .. m) to kv (which holds tokens hist[0 .. n)) and write their rows. */
static int append(sd_kv *kv, int32_t *hist, const int32_t *t, int32_t m) {
    sd_error err = {0};
    int rc = sd_kv_reserve(kv, m, &err);
    if (rc) return rc;
    const int32_t n = sd_kv_n(kv);
    for (int32_t i = 0; i < m; i++) {
        hist[n + i] = t[i];
        uint64_t h = 1;
        for (int32_t j = 0; j <= n + i; j++)
            h = hash_step(h, hist[j]);
        for (int32_t l = 0; l < NL; l++) {
            float *k = sd_kv_k(kv, l, n + i), *v = sd_kv_v(kv, l, n + i);
            cr_assert(k && v, "row %d has no block", n + i);
            for (int32_t e = 0; e < KD; e++) {
                k[e] = row_val(h, l, e, 0);
                v[e] = row_val(h, l, e, 1);
            }
        }
    }
    sd_kv_commit(kv, m);
    return SD_OK;
}

/* Every row of kv equals what its tokens hist[0 .. n) give. */
static void expect_rows(sd_kv *kv, const int32_t *hist, const char *what) {
    uint64_t h = 1;
    for (int32_t p = 0; p < sd_kv_n(kv); p++) {
        h = hash_step(h, hist[p]);
        for (int32_t l = 0; l < NL; l++) {
            const float *k = sd_kv_k(kv, l, p), *v = sd_kv_v(kv, l, p);
            for (int32_t e = 0; e < KD; e++) {
                cr_assert_eq(k[e], row_val(h, l, e, 0), "%s: K row %d layer %d", what, p, l);
                cr_assert_eq(v[e], row_val(h, l, e, 1), "%s: V row %d layer %d", what, p, l);
            }
        }
    }
}

static void check_pool(sd_kv_pool *pool, sd_kv *const *seqs, int n) {
    int64_t refs = 0;
    for (int i = 0; i < n; i++)
        if (seqs[i]) refs += sd_kv_n_blocks(seqs[i]);
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_check(pool, refs, &err), SD_OK, "%s", err.msg);
}

Test(kv, blocks_follow_reserve_and_truncate) {
    sd_kv_pool *pool = pool_new(4, 8);
    sd_kv *a = seq_new(pool, 32);
    int32_t hist[32], t[32];
    for (int i = 0; i < 32; i++)
        t[i] = 10 + i;
    cr_assert_eq(append(a, hist, t, 5), SD_OK);
    cr_expect_eq(sd_kv_n_blocks(a), 2);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 6);
    /* Rows of one block are contiguous, the span ends at the block. */
    cr_expect_eq(sd_kv_span(a, 0), 4);
    cr_expect_eq(sd_kv_span(a, 1), 3);
    cr_expect_eq(sd_kv_span(a, 4), 4);
    cr_expect_eq(sd_kv_span(a, 8), 0, "no block mapped past the reservation");
    cr_expect_eq((uint8_t *)sd_kv_k(a, 1, 3) - (uint8_t *)sd_kv_k(a, 1, 0), 3 * KD * 4);
    cr_assert_eq(append(a, hist, t + 5, 7), SD_OK);
    cr_expect_eq(sd_kv_n_blocks(a), 3);
    expect_rows(a, hist, "12 rows");
    sd_error err = {0};
    cr_assert_eq(sd_kv_truncate(a, 9, &err), SD_OK);
    cr_expect_eq(sd_kv_n_blocks(a), 3);
    cr_assert_eq(sd_kv_truncate(a, 8, &err), SD_OK);
    cr_expect_eq(sd_kv_n_blocks(a), 2, "the block of position 8 went back");
    cr_assert_eq(sd_kv_truncate(a, 0, &err), SD_OK);
    cr_expect_eq(sd_kv_n_blocks(a), 0);
    cr_expect_eq(sd_kv_truncate(a, 1, &err), SD_ERR_ARG);
    check_pool(pool, &a, 1);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 8);
    sd_kv_free(a);
    sd_kv_pool_free(pool);
}

Test(kv, full_pool_is_an_error_that_changes_nothing) {
    sd_kv_pool *pool = pool_new(4, 3);
    sd_kv *a = seq_new(pool, 64), *b = seq_new(pool, 64);
    int32_t ha[64], hb[64], t[64];
    for (int i = 0; i < 64; i++)
        t[i] = i + 3;
    cr_assert_eq(append(a, ha, t, 6), SD_OK); /* 2 blocks */
    cr_assert_eq(append(b, hb, t, 2), SD_OK); /* 1 block: the pool is full */
    cr_expect_eq(sd_kv_pool_n_available(pool), 0);
    sd_error err = {0};
    cr_expect_eq(sd_kv_reserve(b, 3, &err), SD_ERR_OOM, "needs a second block");
    cr_expect(strstr(err.msg, "block") != NULL, "%s", err.msg);
    cr_expect_eq(sd_kv_n(b), 2);
    cr_expect_eq(sd_kv_n_blocks(b), 1);
    cr_expect_eq(sd_kv_reserve(b, 2, &err), SD_OK, "fits the block it has");
    cr_expect_eq(sd_kv_reserve(a, 60, &err), SD_ERR_CONTEXT);
    sd_kv *both[2] = {a, b};
    check_pool(pool, both, 2);
    expect_rows(a, ha, "a");
    expect_rows(b, hb, "b");
    sd_kv_free(a);
    cr_expect_eq(sd_kv_reserve(b, 3, &err), SD_OK, "blocks came back");
    sd_kv_free(b);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 3);
    sd_kv_pool_free(pool);
}

Test(kv, fork_shares_and_copies_on_write) {
    sd_kv_pool *pool = pool_new(4, 16);
    sd_kv *a = seq_new(pool, 64), *b = seq_new(pool, 64);
    int32_t ha[64], hb[64], t[64];
    for (int i = 0; i < 64; i++)
        t[i] = 100 + i;
    cr_assert_eq(append(a, ha, t, 6), SD_OK);
    sd_error err = {0};
    cr_assert_eq(sd_kv_fork(b, a, 6, &err), SD_OK, "%s", err.msg);
    memcpy(hb, ha, sizeof ha);
    cr_expect_eq(sd_kv_n(b), 6);
    cr_expect_eq(sd_kv_k(a, 0, 5), sd_kv_k(b, 0, 5), "shared block");
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 14, "no copy at fork");
    /* b diverges inside the shared second block: it gets its own copy of rows 4, 5. */
    const int32_t other[3] = {7, 8, 9};
    cr_assert_eq(append(b, hb, other, 3), SD_OK);
    cr_expect_neq(sd_kv_k(a, 0, 5), sd_kv_k(b, 0, 5));
    cr_expect_eq(sd_kv_k(a, 0, 0), sd_kv_k(b, 0, 0), "the full first block stays shared");
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cow, 1);
    cr_assert_eq(append(a, ha, t + 6, 3), SD_OK, "a writes its own block now (refs 1)");
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cow, 1);
    expect_rows(a, ha, "a after the fork");
    expect_rows(b, hb, "b after the fork");
    /* A fork at a block boundary shares only whole blocks; writing needs no copy. */
    sd_kv *c = seq_new(pool, 64);
    int32_t hc[64];
    cr_assert_eq(sd_kv_fork(c, a, 4, &err), SD_OK);
    memcpy(hc, ha, sizeof ha);
    cr_assert_eq(append(c, hc, other, 1), SD_OK);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cow, 1);
    expect_rows(c, hc, "c");
    cr_expect_eq(sd_kv_fork(c, a, 2, &err), SD_ERR_ARG, "destination not empty");
    cr_expect_eq(sd_kv_fork(b, b, 2, &err), SD_ERR_ARG);
    sd_kv *all[3] = {a, b, c};
    check_pool(pool, all, 3);
    sd_kv_free(a);
    expect_rows(b, hb, "b after a is gone");
    sd_kv_free(b);
    sd_kv_free(c);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 16);
    sd_kv_pool_free(pool);
}

/* The cache matches exact prefixes from position 0, to the token: the full blocks, then
 * the longest common run with a cached child (a full block or the partial leaf a stored
 * sequence's last block makes), copied into the sequence's own block. */
Test(kv, prefix_cache_matches_exact_prefixes_to_the_token) {
    sd_kv_pool *pool = pool_new(4, 16);
    sd_kv *a = seq_new(pool, 64);
    int32_t ha[64], t[64];
    for (int i = 0; i < 64; i++)
        t[i] = 50 + i;
    cr_assert_eq(append(a, ha, t, 10), SD_OK);
    sd_kv_cache_store(a, ha, 10); /* blocks 0, 1 and block 2's 2 tokens (a partial leaf) */
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cached, 3);
    cr_expect_eq(st.n_cached_idle, 0, "a still maps them");
    sd_kv_cache_store(a, ha, 10); /* idempotent */
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cached, 3);
    sd_kv_free(a);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cached_idle, 3);
    cr_expect_eq(st.n_free, 13);
    cr_expect_eq(sd_kv_pool_n_available(pool), 16);

    /* The same first 9 tokens: both full blocks and 1 token of the partial leaf (a copy:
     * the sequence maps 2 cached blocks and 1 of its own). */
    sd_kv *b = seq_new(pool, 64);
    cr_expect_eq(sd_kv_cache_attach(b, t, 9), 9);
    cr_expect_eq(sd_kv_n_blocks(b), 3);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cached_idle, 1, "the partial leaf is the cache's alone");
    int32_t hb[64];
    memcpy(hb, t, 9 * sizeof *t);
    expect_rows(b, hb, "attached");
    cr_assert_eq(append(b, hb, t + 9, 1), SD_OK);
    expect_rows(b, hb, "attached + 1");
    /* n limits the match: 1 block, then 3 tokens of the full second block. */
    sd_kv *c = seq_new(pool, 64);
    cr_expect_eq(sd_kv_cache_attach(c, t, 7), 7);
    expect_rows(c, t, "7 attached");
    sd_kv_free(c);
    /* A different token at position 6: the first block and 2 tokens of the second. */
    int32_t u[16];
    memcpy(u, t, sizeof u);
    u[6] = 999;
    c = seq_new(pool, 64);
    cr_expect_eq(sd_kv_cache_attach(c, u, 16), 6);
    expect_rows(c, u, "6 attached");
    int32_t hc[64];
    memcpy(hc, u, 6 * sizeof *u);
    cr_assert_eq(append(c, hc, u + 6, 2), SD_OK);
    expect_rows(c, hc, "6 attached + 2 of its own");
    sd_kv_free(c);
    /* A different first token: nothing, though the second block's tokens agree. */
    u[6] = t[6];
    u[0] = 998;
    c = seq_new(pool, 64);
    cr_expect_eq(sd_kv_cache_attach(c, u, 16), 0);
    cr_expect_eq(sd_kv_n_blocks(c), 0);
    /* A non-empty sequence attaches nothing. */
    cr_expect_eq(sd_kv_cache_attach(b, t, 16), 0);
    sd_kv *all[2] = {b, c};
    check_pool(pool, all, 2);
    sd_kv_free(b);
    sd_kv_free(c);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_hit_blocks, 3 + 2 + 2);
    sd_kv_pool_cache_clear(pool);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 16);
    cr_expect_eq(st.n_cached, 0);
    sd_kv_pool_free(pool);
}

Test(kv, eviction_takes_idle_leaves_least_recently_used_first) {
    sd_kv_pool *pool = pool_new(2, 6);
    int32_t h[16], x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {9, 10, 11, 12, 13, 14, 15, 16};
    sd_kv *a = seq_new(pool, 16);
    cr_assert_eq(append(a, h, x, 4), SD_OK); /* chain x: 2 blocks */
    sd_kv_cache_store(a, h, 4);
    sd_kv_free(a);
    a = seq_new(pool, 16);
    cr_assert_eq(append(a, h, y, 4), SD_OK); /* chain y: 2 blocks */
    sd_kv_cache_store(a, h, 4);
    sd_kv_free(a);
    /* Use chain x again: y is now the least recently used. */
    a = seq_new(pool, 16);
    cr_expect_eq(sd_kv_cache_attach(a, x, 4), 4);
    sd_kv_free(a);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 2);
    cr_expect_eq(st.n_cached_idle, 4);
    /* 3 blocks for a fresh sequence: the 2 free ones, then y's leaf (not its parent). */
    sd_kv *b = seq_new(pool, 16);
    const int32_t z[6] = {20, 21, 22, 23, 24, 25};
    int32_t hz[16];
    cr_assert_eq(append(b, hz, z, 6), SD_OK);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_evicted, 1);
    sd_kv *c = seq_new(pool, 16);
    cr_expect_eq(sd_kv_cache_attach(c, y, 4), 2, "y's first block is still there");
    sd_kv_free(c);
    c = seq_new(pool, 16);
    cr_expect_eq(sd_kv_cache_attach(c, x, 4), 4, "x untouched");
    /* c maps x's two blocks: they cannot go; b needs 1 more: y's first block goes. */
    cr_assert_eq(append(b, hz, z, 1), SD_OK);
    cr_expect_eq(sd_kv_reserve(b, 2, NULL), SD_ERR_OOM, "nothing left to evict");
    sd_kv *all[2] = {b, c};
    check_pool(pool, all, 2);
    sd_kv_free(b);
    sd_kv_free(c);
    sd_kv_pool_cache_clear(pool);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 6);
    sd_kv_pool_free(pool);
}

Test(kv, duplicate_blocks_fold_into_the_cached_one) {
    sd_kv_pool *pool = pool_new(2, 8);
    int32_t ha[8], hb[8], t[4] = {5, 6, 7, 8};
    sd_kv *a = seq_new(pool, 8), *b = seq_new(pool, 8);
    cr_assert_eq(append(a, ha, t, 4), SD_OK);
    cr_assert_eq(append(b, hb, t, 4), SD_OK); /* the same tokens computed twice */
    sd_kv_cache_store(a, ha, 4);
    sd_kv_cache_store(b, hb, 4);
    cr_expect_eq(sd_kv_k(a, 1, 3), sd_kv_k(b, 1, 3), "b now maps a's cached blocks");
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cached, 2);
    cr_expect_eq(st.n_free, 6, "b's copies went back");
    expect_rows(b, hb, "b");
    sd_kv *all[2] = {a, b};
    check_pool(pool, all, 2);
    sd_kv_free(a);
    sd_kv_free(b);
    sd_kv_pool_cache_clear(pool);
    sd_kv_pool_free(pool);
}

Test(kv, element_types_and_bytes_per_token) {
    const size_t f16 = sd_kv_type_row_bytes(SD_TYPE_F16, 128);
    cr_expect_eq(f16, 256);
    cr_expect_eq(sd_kv_type_row_bytes(SD_TYPE_F32, 128), 512);
    cr_expect_eq(sd_kv_type_row_bytes(SD_TYPE_Q8_0, 128), 4 * 34);
    cr_expect_eq(sd_kv_type_row_bytes(SD_TYPE_Q4_0, 128), 4 * 18);
    cr_expect_leq((double)sd_kv_type_row_bytes(SD_TYPE_Q8_0, 128) / f16, 0.55);
    cr_expect_leq((double)sd_kv_type_row_bytes(SD_TYPE_Q4_0, 128) / f16, 0.30);
    cr_expect_eq(sd_kv_type_row_bytes(SD_TYPE_Q8_0, 48), 0, "not whole blocks");
    cr_expect_eq(sd_kv_type_row_bytes(SD_TYPE_Q4_1, 128), 0, "not a KV type");
    sd_kv_pool_params p = {
        .n_layer = 2, .kv_dim = 48, .block_size = 16, .n_blocks = 4, .type = SD_TYPE_Q8_0};
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG);
    cr_expect(strstr(err.msg, "multiple of 32") != NULL, "%s", err.msg);
    p.kv_dim = 64;
    p.block_size = SD_KV_MAX_BLOCK + 1;
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG);
    p.block_size = 16;
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    size_t bytes;
    cr_assert_eq(sd_kv_pool_storage_bytes(&p, &bytes, &err), SD_OK);
    cr_expect_eq(bytes, 2u * 2 * 4 * 16 * 2 * 34);
    sd_kv *kv = seq_new(pool, 64);
    cr_assert_eq(sd_kv_reserve(kv, 17, &err), SD_OK);
    cr_expect_eq(sd_kv_row_bytes(kv), 68);
    cr_expect_eq((uint8_t *)sd_kv_v(kv, 1, 15) - (uint8_t *)sd_kv_v(kv, 1, 0), 15 * 68);
    sd_kv_free(kv);
    sd_kv_pool_free(pool);
    sd_kv_params cp = {2, 8, 64, SD_TYPE_Q4_0, NULL};
    cr_assert_eq(sd_kv_init(&cp, &kv, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(sd_kv_row_bytes(kv), 36);
    cr_expect_eq(sd_kv_span(kv, 3), 5, "a contiguous cache is one block");
    sd_kv_free(kv);
}

/* Storage the host cannot touch (a device buffer): every row the pool copies goes
 * through the owner's copy function (here a recording memcpy), K and V of every layer, the
 * rows copied and no more. */
typedef struct copy_log {
    int calls;
    size_t bytes;
} copy_log;

static void logged_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    copy_log *lg = ctx;
    lg->calls++;
    lg->bytes += bytes;
    memcpy(dst, src, bytes);
}

/* sd_kv_block_table's addressing, checked against sd_kv_k / sd_kv_v for every mapped
 * position: row p at row 0 + (ids[p / bs] - ids[0]) * bs * row_bytes + (p % bs) * row_bytes. */
static void expect_table_addresses(sd_kv *kv) {
    const int32_t *ids = NULL;
    int32_t bs = 0;
    const int32_t n = sd_kv_block_table(kv, 1, &ids, &bs);
    cr_assert_eq(n, sd_kv_n_blocks(kv));
    const size_t rb = sd_kv_row_bytes(kv);
    for (int32_t l = 0; l < NL; l++) {
        const int32_t *ids_l = NULL;
        int32_t bs_l = 0;
        cr_assert_eq(sd_kv_block_table(kv, l, &ids_l, &bs_l), n);
        cr_assert_eq(bs_l, bs);
        cr_assert(n == 0 || memcmp(ids_l, ids, (size_t)n * sizeof *ids) == 0,
                  "every layer has the same table");
        for (int32_t p = 0; p < n * bs && p < sd_kv_capacity(kv); p++) {
            const ptrdiff_t off =
                (ptrdiff_t)(ids[p / bs] - ids[0]) * bs * (ptrdiff_t)rb + (p % bs) * (ptrdiff_t)rb;
            cr_assert_eq((uint8_t *)sd_kv_k(kv, l, p) - (uint8_t *)sd_kv_k(kv, l, 0), off,
                         "K row %d layer %d", p, l);
            cr_assert_eq((uint8_t *)sd_kv_v(kv, l, p) - (uint8_t *)sd_kv_v(kv, l, 0), off,
                         "V row %d layer %d", p, l);
        }
    }
}

Test(kv, device_storage_copies_through_its_owner) {
    copy_log lg = {0};
    sd_kv_pool_params p = {.n_layer = NL,
                           .kv_dim = KD,
                           .block_size = 4,
                           .n_blocks = 16,
                           .type = SD_TYPE_F32,
                           .copy = logged_copy,
                           .copy_ctx = &lg};
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    sd_kv *a = seq_new(pool, 64), *b = seq_new(pool, 64), *c = seq_new(pool, 64);
    int32_t ha[64], hb[64], hc[64], t[64];
    for (int i = 0; i < 64; i++)
        t[i] = 200 + i;
    const size_t rb = KD * sizeof(float);
    /* Blocks scattered: b takes a block between a's. */
    cr_assert_eq(append(a, ha, t, 3), SD_OK);
    cr_assert_eq(append(b, hb, t + 30, 5), SD_OK);
    cr_assert_eq(append(a, ha, t + 3, 3), SD_OK); /* a: 6 rows over 2 blocks */
    cr_expect_eq(lg.calls, 0, "no copy without sharing");
    /* A fork that diverges inside a shared block: one copy of its 2 rows, K and V of every
     * layer through the owner. */
    cr_assert_eq(sd_kv_fork(c, a, 6, &err), SD_OK, "%s", err.msg);
    memcpy(hc, ha, sizeof ha);
    const int32_t other[2] = {7, 8};
    cr_assert_eq(append(c, hc, other, 2), SD_OK);
    cr_expect_eq(lg.calls, 2 * NL);
    cr_expect_eq(lg.bytes, (size_t)2 * NL * 2 * rb);
    expect_rows(a, ha, "a");
    expect_rows(b, hb, "b");
    expect_rows(c, hc, "c");
    expect_table_addresses(a);
    expect_table_addresses(b);
    expect_table_addresses(c);
    /* A prefix hit on a's partial last block copies the common run (2 rows) the same way. */
    sd_kv_cache_store(a, ha, 6);
    sd_kv *d = seq_new(pool, 64);
    int32_t hd[64];
    memcpy(hd, ha, sizeof ha);
    hd[6] = 999;
    lg.calls = 0, lg.bytes = 0;
    cr_expect_eq(sd_kv_cache_attach(d, hd, 7), 6);
    cr_expect_eq(lg.calls, 2 * NL);
    cr_expect_eq(lg.bytes, (size_t)2 * NL * 2 * rb);
    expect_rows(d, hd, "d after the prefix hit");
    expect_table_addresses(d);
    sd_kv *all[4] = {a, b, c, d};
    check_pool(pool, all, 4);
    for (int i = 0; i < 4; i++)
        sd_kv_free(all[i]);
    sd_kv_pool_free(pool);
    /* A contiguous cache is one block of n_ctx positions. */
    sd_kv_params cp = {NL, 10, KD, SD_TYPE_F16, NULL};
    sd_kv *kv = NULL;
    cr_assert_eq(sd_kv_init(&cp, &kv, &err), SD_OK, "%s", err.msg);
    const int32_t *ids = NULL;
    int32_t bs = 0;
    cr_expect_eq(sd_kv_block_table(kv, 0, &ids, &bs), 1);
    cr_expect_eq(ids[0], 0);
    cr_expect_eq(bs, 10);
    sd_kv_free(kv);
}

/* A long random run: sequences append, roll back, fork, attach cached prefixes, store
 * their blocks, and end; after every step each sequence's rows equal the rows its tokens
 * give (computed here from the token history alone) and the accounting balances. */
Test(kv, random_operations_against_a_model) {
    enum { NS = 6, CTX = 40, BLOCKS = 24 };
    sd_kv_pool *pool = pool_new(4, BLOCKS);
    sd_kv *seq[NS] = {0};
    int32_t hist[NS][CTX];
    uint64_t r = 12345;
    int n_oom = 0, n_attach = 0, n_fork = 0;
    for (int step = 0; step < 4000; step++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        const int i = (int)((r >> 33) % NS), op = (int)((r >> 40) % 8);
        const int32_t arg = (int32_t)((r >> 48) % 9);
        if (!seq[i]) {
            seq[i] = seq_new(pool, CTX);
            /* Tokens from a small alphabet so prefixes repeat across sequences. */
            int32_t want[CTX];
            for (int j = 0; j < CTX; j++)
                want[j] = (int32_t)((r >> (j % 20)) % 2);
            if (op < 4) {
                const int32_t got = sd_kv_cache_attach(seq[i], want, (int32_t)(r % CTX));
                memcpy(hist[i], want, (size_t)got * sizeof *want);
                n_attach += got > 0;
            }
        } else if (op < 4) {
            int32_t t[9];
            for (int j = 0; j < 9; j++)
                t[j] = (int32_t)((r >> (3 * j)) % 2);
            const int32_t m = arg < CTX - sd_kv_n(seq[i]) ? arg : CTX - sd_kv_n(seq[i]);
            const int rc = append(seq[i], hist[i], t, m);
            cr_assert(rc == SD_OK || rc == SD_ERR_OOM, "append: %d", rc);
            n_oom += rc == SD_ERR_OOM;
        } else if (op == 4) {
            const int32_t keep = sd_kv_n(seq[i]) - arg;
            cr_assert_eq(sd_kv_truncate(seq[i], keep > 0 ? keep : 0, NULL), SD_OK);
        } else if (op == 5) {
            sd_kv_cache_store(seq[i], hist[i], sd_kv_n(seq[i]));
        } else if (op == 6) {
            const int j = (i + 1 + arg % (NS - 1)) % NS;
            if (!seq[j]) {
                seq[j] = seq_new(pool, CTX);
                const int32_t n = sd_kv_n(seq[i]) - arg > 0 ? sd_kv_n(seq[i]) - arg : 0;
                cr_assert_eq(sd_kv_fork(seq[j], seq[i], n, NULL), SD_OK);
                memcpy(hist[j], hist[i], sizeof hist[i]);
                n_fork++;
            }
        } else {
            sd_kv_free(seq[i]);
            seq[i] = NULL;
        }
        for (int j = 0; j < NS; j++)
            if (seq[j]) expect_rows(seq[j], hist[j], "random run");
        check_pool(pool, seq, NS);
    }
    cr_expect_gt(n_oom, 0, "the run should hit a full pool");
    cr_expect_gt(n_attach, 0, "the run should reuse cached prefixes");
    cr_expect_gt(n_fork, 0);
    for (int j = 0; j < NS; j++)
        sd_kv_free(seq[j]);
    sd_kv_pool_cache_clear(pool);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, BLOCKS, "every block came back");
    sd_kv_pool_free(pool);
}
