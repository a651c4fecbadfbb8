/*
 * tests/test_kv_groups.c: a grouped KV pool (kv/sd_kv.h, sd_kv_pool_params.n_group): one
 * block pool per layer group inside one storage, one block table per group per sequence.
 * Checked: the storage layout (each layer's rows inside its group's slice, sizes computed
 * here independently), sliding-window release of the windowed group only (the global
 * group keeps every row, readable), a windowed group that runs out fails by name and
 * leaves the other group unchanged, truncation into released rows refused, fork with
 * copy-on-write and the prefix cache across both groups, the accounting after every step,
 * and bad groupings refused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kv/sd_kv.h"

#define NL 4 /* layers 0-2 local (group 1), layer 3 global (group 0) */
#define KD 8 /* kv_dim */
#define BS 4 /* positions per block */
#define G0 8 /* blocks of group 0 */
#define G1 3 /* blocks of group 1 */

static const int32_t k_group[NL] = {1, 1, 1, 0};

static sd_kv_pool_params params(void) {
    sd_kv_pool_params p = {.n_layer = NL,
                           .kv_dim = KD,
                           .block_size = BS,
                           .n_blocks = G0,
                           .type = SD_TYPE_F32,
                           .n_group = 2,
                           .layer_group = k_group};
    p.group_blocks[1] = G1;
    p.group_window[1] = 5;
    return p;
}

static float val(int32_t l, int32_t pos, int32_t e, int v) {
    return (float)(pos * 1000 + l * 100 + e * 2 + v);
}

/* Append m positions to kv and write their rows. */
static int append(sd_kv *kv, int32_t m, sd_error *err) {
    int rc = sd_kv_reserve(kv, m, err);
    if (rc) return rc;
    const int32_t n = sd_kv_n(kv);
    for (int32_t pos = n; pos < n + m; pos++)
        for (int32_t l = 0; l < NL; l++) {
            float *k = sd_kv_k(kv, l, pos), *v = sd_kv_v(kv, l, pos);
            cr_assert(k && v, "layer %d position %d has no row", l, pos);
            for (int32_t e = 0; e < KD; e++) {
                k[e] = val(l, pos, e, 0);
                v[e] = val(l, pos, e, 1);
            }
        }
    sd_kv_commit(kv, m);
    return SD_OK;
}

static void expect_rows(sd_kv *kv, int32_t l, int32_t from, int32_t to) {
    for (int32_t pos = from; pos < to; pos++) {
        const float *k = sd_kv_k(kv, l, pos), *v = sd_kv_v(kv, l, pos);
        cr_assert(k && v, "layer %d position %d has no row", l, pos);
        for (int32_t e = 0; e < KD; e++) {
            cr_assert_eq(k[e], val(l, pos, e, 0), "K layer %d position %d", l, pos);
            cr_assert_eq(v[e], val(l, pos, e, 1), "V layer %d position %d", l, pos);
        }
    }
}

static void check(const sd_kv_pool *pool, sd_kv *const *seqs, int n) {
    sd_error err = {0};
    int64_t refs = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(sd_kv_seq_check(seqs[i], &err), SD_OK, "%s", err.msg);
        refs += sd_kv_n_blocks(seqs[i]);
    }
    cr_assert_eq(sd_kv_pool_check(pool, refs, &err), SD_OK, "%s", err.msg);
}

static size_t up64(size_t x) {
    return (x + 63) / 64 * 64;
}

Test(kv_groups, layout_and_stats) {
    sd_kv_pool_params p = params();
    size_t bytes = 0;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_storage_bytes(&p, &bytes, &err), SD_OK, "%s", err.msg);
    const size_t row = KD * sizeof(float);
    const size_t g0 = up64(2 * 1 * (size_t)G0 * BS * row), g1 = up64(2 * 3 * (size_t)G1 * BS * row);
    cr_assert_eq(bytes, g0 + g1);
    uint8_t *mem = aligned_alloc(64, bytes);
    memset(mem, 0, bytes);
    p.storage = mem;
    sd_kv_pool *pool = NULL;
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    sd_kv *kv = NULL;
    cr_assert_eq(sd_kv_seq_init(pool, 64, &kv, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(append(kv, 6, &err), SD_OK, "%s", err.msg);
    for (int32_t pos = 0; pos < 6; pos++)
        for (int32_t l = 0; l < NL; l++) {
            const uint8_t *k = sd_kv_k(kv, l, pos), *v = sd_kv_v(kv, l, pos);
            const uint8_t *lo = mem + (k_group[l] ? g0 : 0), *hi = lo + (k_group[l] ? g1 : g0);
            cr_expect(k >= lo && k + row <= hi, "layer %d's K row outside its group", l);
            cr_expect(v >= lo && v + row <= hi, "layer %d's V row outside its group", l);
        }
    expect_rows(kv, 0, 0, 6);
    expect_rows(kv, 3, 0, 6);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_group, 2);
    cr_expect_eq(st.n_blocks, G0, "the counts are group 0's");
    cr_expect_eq(st.n_free, G0 - 2);
    cr_expect_eq(st.group_blocks[1], G1);
    cr_expect_eq(st.group_free[1], G1 - 2);
    cr_expect_eq(st.group_layers[0], 1);
    cr_expect_eq(st.group_layers[1], 3);
    cr_expect_eq(st.storage_bytes, bytes);
    cr_expect_eq(sd_kv_pool_n_available(pool), G0 - 2);
    cr_expect_eq(sd_kv_n_blocks(kv), 4);
    check(pool, &kv, 1);
    sd_kv_free(kv);
    sd_kv_pool_free(pool);
    free(mem);
}

Test(kv_groups, window_release_frees_the_local_group_only) {
    sd_kv_pool_params p = params();
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    sd_kv *kv = NULL;
    cr_assert_eq(sd_kv_seq_init(pool, G0 * BS, &kv, &err), SD_OK, "%s", err.msg);
    /* 32 positions, 2 at a time, keeping the last 5 (window) + 1: the local group never
     * needs more than its 3 blocks, the global one maps all 8 */
    int32_t released = 0;
    while (sd_kv_n(kv) < G0 * BS) {
        cr_assert_eq(append(kv, 2, &err), SD_OK, "at %d: %s", sd_kv_n(kv), err.msg);
        released += sd_kv_release_before(kv, sd_kv_n(kv) - 6);
        check(pool, &kv, 1);
    }
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, 0, "the global group maps every position");
    cr_expect_leq(st.group_peak_used[1], G1);
    const int32_t first = sd_kv_first(kv);
    cr_expect_eq(first, (32 - 6) / BS * BS);
    cr_expect_eq(released, first / BS);
    cr_expect_eq(sd_kv_n_blocks(kv), G0 + (G0 - first / BS));
    expect_rows(kv, 3, 0, 32);     /* the global layer keeps every row */
    expect_rows(kv, 1, first, 32); /* the local ones their window */
    /* into released rows: refused, nothing changes */
    cr_expect_eq(sd_kv_truncate(kv, first, &err), SD_ERR_ARG);
    cr_expect_eq(sd_kv_n(kv), 32);
    cr_assert_eq(sd_kv_truncate(kv, first + 1, &err), SD_OK, "%s", err.msg);
    expect_rows(kv, 3, 0, first + 1);
    check(pool, &kv, 1);
    cr_assert_eq(sd_kv_truncate(kv, 0, &err), SD_OK, "%s", err.msg);
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, G0);
    cr_expect_eq(st.group_free[1], G1);
    check(pool, &kv, 1);
    sd_kv_free(kv);
    sd_kv_pool_free(pool);
}

Test(kv_groups, a_full_local_group_fails_by_name_and_changes_nothing) {
    sd_kv_pool_params p = params();
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    sd_kv *kv = NULL;
    cr_assert_eq(sd_kv_seq_init(pool, G0 * BS, &kv, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(append(kv, 9, &err), SD_OK, "%s", err.msg); /* 3 local blocks: all */
    cr_expect_eq(append(kv, 4, &err), SD_ERR_OOM);
    cr_expect(strstr(err.msg, "layer group 1") != NULL, "%s", err.msg);
    cr_expect_eq(sd_kv_n(kv), 9);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_free, G0 - 3, "group 0 gave back what it reserved");
    check(pool, &kv, 1);
    /* after the release behind the window there is room again */
    cr_expect_eq(sd_kv_release_before(kv, 8), 2);
    cr_assert_eq(append(kv, 4, &err), SD_OK, "%s", err.msg);
    expect_rows(kv, 3, 0, 13);
    expect_rows(kv, 2, 8, 13);
    check(pool, &kv, 1);
    sd_kv_free(kv);
    sd_kv_pool_free(pool);
}

Test(kv_groups, fork_and_prefix_cache_span_both_groups) {
    sd_kv_pool_params p = params();
    p.group_blocks[1] = G0;
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_kv_pool_init(&p, &pool, &err), SD_OK, "%s", err.msg);
    sd_kv *s[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sd_kv_seq_init(pool, 16, &s[i], &err), SD_OK, "%s", err.msg);
    int32_t tok[16];
    for (int32_t i = 0; i < 16; i++)
        tok[i] = 5 + i;
    cr_assert_eq(append(s[0], 10, &err), SD_OK, "%s", err.msg);
    /* fork 6 positions, then the fork writes position 6: a copy of block 1 in each group */
    cr_assert_eq(sd_kv_fork(s[1], s[0], 6, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_kv_reserve(s[1], 1, &err), SD_OK, "%s", err.msg);
    for (int32_t l = 0; l < NL; l++)
        ((float *)sd_kv_k(s[1], l, 6))[0] = -1.0f;
    sd_kv_commit(s[1], 1);
    expect_rows(s[0], 0, 0, 10);
    expect_rows(s[0], 3, 0, 10);
    expect_rows(s[1], 3, 0, 6);
    check(pool, s, 3);
    /* the prefix cache: s[0]'s 2 full blocks of every group and the partial leaf of its
     * last 2 positions, found by s[2] (the leaf's rows copied into its own block) */
    sd_kv_cache_store(s[0], tok, 10);
    cr_expect_eq(sd_kv_cache_attach(s[2], tok, 12), 10);
    expect_rows(s[2], 1, 0, 10);
    expect_rows(s[2], 3, 0, 10);
    check(pool, s, 3);
    cr_assert_eq(sd_kv_truncate(s[2], 0, &err), SD_OK, "%s", err.msg);
    /* with no sequence left on them, clearing the cache empties both groups' caches */
    sd_kv_free(s[0]);
    sd_kv_free(s[1]);
    sd_kv_pool_cache_clear(pool);
    cr_expect_eq(sd_kv_cache_attach(s[2], tok, 12), 0);
    check(pool, &s[2], 1);
    /* a sequence that released blocks stores nothing */
    cr_assert_eq(append(s[2], 12, &err), SD_OK, "%s", err.msg);
    cr_expect_gt(sd_kv_release_before(s[2], 8), 0);
    sd_kv_cache_store(s[2], tok, 12);
    sd_kv_pool_stats st;
    sd_kv_pool_get_stats(pool, &st);
    cr_expect_eq(st.n_cached, 0);
    check(pool, &s[2], 1);
    sd_kv_free(s[2]);
    sd_kv_pool_free(pool);
}

Test(kv_groups, bad_groupings_are_refused) {
    sd_kv_pool *pool = NULL;
    sd_error err = {0};
    sd_kv_pool_params p = params();
    p.group_window[0] = 4;
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG, "group 0 with a window");
    cr_expect(strstr(err.msg, "group 0") != NULL, "%s", err.msg);
    p = params();
    p.n_group = 3; /* group 2 has no layer */
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG);
    cr_expect(strstr(err.msg, "empty") != NULL, "%s", err.msg);
    p = params();
    const int32_t bad[NL] = {0, 2, 1, 0};
    p.layer_group = bad;
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG);
    p = params();
    p.layer_group = NULL;
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG);
    p = params();
    p.n_group = SD_KV_MAX_GROUPS + 1;
    cr_expect_eq(sd_kv_pool_init(&p, &pool, &err), SD_ERR_ARG);
    cr_expect_null(pool);
}
