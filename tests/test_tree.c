/*
 * tests/test_tree.c: token trees in the target pass (sd_session_seq_decode_tree,
 * sd_session_seq_tree_keep). Every row of a tree pass over random trees is bit-identical to
 * the last row of a chain pass over that node's own path (the committed context, then its
 * ancestors by depth, then itself), on a random llama model (F32 and Q8_0 weights; F32,
 * F16 and Q8_0 KV caches; 1 and 2 threads) and on the shipped TinyStories target; after
 * keeping one path, the cache continues exactly as a chain pass over that path left it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/sd_model.h"
#include "testutil.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(tree, .init = setup, .fini = teardown, .timeout = 900);

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static sd_session *session_new(const sd_model *m, int32_t n_threads, sd_type kv_type) {
    sd_session_params p = sd_session_default_params();
    p.n_ctx = 128;
    p.n_batch = 32;
    p.n_threads = n_threads;
    p.kv_type = kv_type;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    return s;
}

/* The path of node i (root first) into path; returns its length. */
/* A random prompt of *L tokens (1 .. 40, prompt[48]) and a random tree of *n nodes
 * (1 .. 24, tok[24], parent[24]) over a vocabulary of nv: mostly deep trees (the previous
 * node or one of the last few), some roots. */
static void random_tree(uint64_t *r, int32_t nv, int32_t *prompt, int32_t *L, int32_t *tok,
                        int32_t *parent, int32_t *n) {
    *L = 1 + (int32_t)(rng_next(r) % 40);
    *n = 1 + (int32_t)(rng_next(r) % 24);
    for (int32_t i = 0; i < *L; i++)
        prompt[i] = (int32_t)(rng_next(r) % (uint64_t)nv);
    for (int32_t i = 0; i < *n; i++) {
        tok[i] = (int32_t)(rng_next(r) % (uint64_t)nv);
        const uint64_t c = rng_next(r) % 8;
        parent[i] = i == 0 || c == 0 ? -1 : c < 4 ? i - 1 : (int32_t)(rng_next(r) % (uint64_t)i);
    }
}

static int32_t path_of(const int32_t *parent, int32_t i, int32_t *path) {
    int32_t rev[SD_MAX_TREE], n = 0;
    for (int32_t a = i; a >= 0; a = parent[a])
        rev[n++] = a;
    for (int32_t j = 0; j < n; j++)
        path[j] = rev[n - 1 - j];
    return n;
}

/* n_trees random trees after random prompts: each tree row against its chain row, then
 * one random path kept and one more token against the chain. */
static void check_model(const char *path, int32_t n_threads, sd_type kv_type, int n_trees,
                        uint64_t seed) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session *tree = session_new(m, n_threads, kv_type);
    sd_session *chain = session_new(m, 1, kv_type);
    float *lt = malloc((size_t)SD_MAX_TREE * (size_t)nv * sizeof(float));
    float *lc = malloc((size_t)nv * sizeof(float));
    float *l2 = malloc((size_t)nv * sizeof(float));
    cr_assert(lt && lc && l2);
    uint64_t r = seed;
    for (int it = 0; it < n_trees; it++) {
        int32_t prompt[48], tok[24], parent[24], ids[48], L, n;
        random_tree(&r, nv, prompt, &L, tok, parent, &n);
        cr_assert_eq(sd_session_seq_truncate(tree, 0, 0, &err), SD_OK);
        cr_assert_eq(sd_session_seq_sync(tree, 0, prompt, L, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_decode_tree(tree, 0, tok, parent, n, lt, &err), SD_OK, "%s",
                     err.msg);
        cr_assert_eq(sd_session_seq_n_past(tree, 0), L + n);
        for (int32_t i = 0; i < n; i++) {
            int32_t p[SD_MAX_TREE];
            const int32_t d = path_of(parent, i, p);
            memcpy(ids, prompt, (size_t)L * sizeof *ids);
            for (int32_t j = 0; j < d; j++)
                ids[L + j] = tok[p[j]];
            cr_assert_eq(sd_session_seq_sync(chain, 0, ids, L + d - 1, &err), SD_OK, "%s", err.msg);
            cr_assert_eq(sd_session_eval(chain, ids + L + d - 1, 1, lc, 1, &err), SD_OK, "%s",
                         err.msg);
            cr_assert(memcmp(lc, lt + (size_t)i * (size_t)nv, (size_t)nv * sizeof(float)) == 0,
                      "%s tree %d node %d (depth %d of %d nodes, context %d): row differs from "
                      "its chain (logit 0: %.9g vs %.9g)",
                      path, it, i, d - 1, n, L, (double)lt[(size_t)i * (size_t)nv], (double)lc[0]);
        }
        /* keep the path to a random node, then one more token */
        int32_t p[SD_MAX_TREE];
        const int32_t d = path_of(parent, (int32_t)(rng_next(&r) % (uint64_t)n), p);
        cr_assert_eq(sd_session_seq_tree_keep(tree, 0, L, p, d, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_n_past(tree, 0), L + d);
        memcpy(ids, prompt, (size_t)L * sizeof *ids);
        for (int32_t j = 0; j < d; j++)
            ids[L + j] = tok[p[j]];
        cr_assert(memcmp(sd_session_seq_tokens(tree, 0), ids, (size_t)(L + d) * sizeof *ids) == 0,
                  "the kept path's ids");
        const int32_t x = (int32_t)(rng_next(&r) % (uint64_t)nv);
        ids[L + d] = x;
        cr_assert_eq(sd_session_eval(tree, &x, 1, l2, 1, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_sync(chain, 0, ids, L + d, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_eval(chain, &x, 1, lc, 1, &err), SD_OK, "%s", err.msg);
        cr_assert(memcmp(lc, l2, (size_t)nv * sizeof(float)) == 0,
                  "%s tree %d: after keeping a path of %d, the next token's row differs", path, it,
                  d);
    }
    free(lt);
    free(lc);
    free(l2);
    sd_session_free(tree);
    sd_session_free(chain);
    sd_model_free(m);
}

Test(tree, random_model_rows_equal_their_chains) {
    char path[1200];
    tu_llama_spec sp = tu_llama_default_spec();
    cr_assert_eq(tu_make_llama(tu_path(path, sizeof path, g_dir, "f32.gguf"), &sp), 0);
    check_model(path, 1, SD_TYPE_F32, 12, 0x1234567ull);
    check_model(path, 2, SD_TYPE_F32, 12, 0x7654321ull);
    check_model(path, 2, SD_TYPE_F16, 8, 0x2468ull);
    sp.wtype = SD_TYPE_Q8_0;
    sp.n_head = 2; /* head_dim 32: a q8_0 KV cache */
    sp.n_head_kv = 1;
    cr_assert_eq(tu_make_llama(tu_path(path, sizeof path, g_dir, "q8.gguf"), &sp), 0);
    check_model(path, 2, SD_TYPE_Q8_0, 8, 0x1357ull);
}

Test(tree, tinystories_rows_equal_their_chains) {
    const char *path = SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf";
    tu_need_path(path, "the shipped TinyStories target");
    check_model(path, 2, SD_TYPE_F32, 6, 0xabcdefull);
}

Test(tree, bad_trees_are_refused) {
    char path[1200];
    tu_llama_spec sp = tu_llama_default_spec();
    cr_assert_eq(tu_make_llama(tu_path(path, sizeof path, g_dir, "f32.gguf"), &sp), 0);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    sd_session *s = session_new(m, 1, SD_TYPE_F32);
    float *l = malloc((size_t)4 * 96 * sizeof(float));
    const int32_t one = 5;
    cr_assert_eq(sd_session_eval(s, &one, 1, NULL, 0, &err), SD_OK);
    const int32_t tok[3] = {3, 4, 5};
    const int32_t fwd[3] = {-1, 2, 0}; /* a parent after its child */
    cr_assert_eq(sd_session_seq_decode_tree(s, 0, tok, fwd, 3, l, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "parent") != NULL, "%s", err.msg);
    const int32_t self[3] = {-1, 1, 0};
    cr_assert_eq(sd_session_seq_decode_tree(s, 0, tok, self, 3, l, &err), SD_ERR_ARG);
    const int32_t bad_tok[3] = {3, 96, 5}, ok[3] = {-1, 0, 0};
    cr_assert_eq(sd_session_seq_decode_tree(s, 0, bad_tok, ok, 3, l, &err), SD_ERR_ARG);
    cr_assert_eq(sd_session_seq_n_past(s, 0), 1, "a refused pass leaves the cache");
    cr_assert_eq(sd_session_seq_decode_tree(s, 0, tok, ok, 3, l, &err), SD_OK, "%s", err.msg);
    const int32_t desc[2] = {2, 1};
    cr_assert_eq(sd_session_seq_tree_keep(s, 0, 1, desc, 2, &err), SD_ERR_ARG);
    const int32_t far[1] = {3};
    cr_assert_eq(sd_session_seq_tree_keep(s, 0, 1, far, 1, &err), SD_ERR_ARG);
    const int32_t keep[2] = {0, 2};
    cr_assert_eq(sd_session_seq_tree_keep(s, 0, 1, keep, 2, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_n_past(s, 0), 3);
    cr_assert_eq(sd_session_seq_tokens(s, 0)[2], 5);
    free(l);
    sd_session_free(s);
    sd_model_free(m);
}

/* The pass over sequence seq of a paged session: tokens t[0 .. n), the last row's logits
 * into l (NULL: none). */
static void seq_eval(sd_session *s, int32_t seq, const int32_t *t, int32_t n, float *l) {
    int32_t sq[64];
    int8_t want[64] = {0};
    cr_assert_leq(n, 64);
    for (int32_t i = 0; i < n; i++)
        sq[i] = seq;
    want[n - 1] = l != NULL;
    sd_batch b = {n, t, NULL, sq, want};
    sd_error err = {0};
    cr_assert_eq(sd_session_decode(s, &b, l, &err), SD_OK, "%s", err.msg);
}

/* A tree pass on a sequence of a paged pool (sd_session_seq_decode_tree, blocks of 8, so
 * the context and the tree cross blocks) gives the contiguous cache's rows bit for bit; the
 * tree is drafted on a sequence forked from another (its last block shared until the pass
 * writes it: copy-on-write), the kept path (sd_session_seq_tree_keep, rows moved inside the
 * sequence's blocks) continues bit for bit as the contiguous one, and the sequence it was
 * forked from is untouched. F32 and F16 caches, 1 and 2 threads. */
static void check_paged(const char *path, int32_t n_threads, sd_type kv_type, int n_trees,
                        uint64_t seed) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session *flat = session_new(m, 1, kv_type);
    sd_session_params p = sd_session_default_params();
    p.n_ctx = 128;
    p.n_batch = 64;
    p.n_threads = n_threads;
    p.kv_type = kv_type;
    p.n_seq = 3;
    p.kv_block = 8;
    p.n_outputs = SD_MAX_TREE;
    sd_session *paged = NULL;
    cr_assert_eq(sd_session_init(m, &p, &paged, &err), SD_OK, "%s", err.msg);
    float *lf = malloc((size_t)SD_MAX_TREE * (size_t)nv * sizeof(float));
    float *lp = malloc((size_t)SD_MAX_TREE * (size_t)nv * sizeof(float));
    cr_assert(lf && lp);
    uint64_t r = seed;
    for (int it = 0; it < n_trees; it++) {
        int32_t prompt[48], tok[24], parent[24], L, n;
        random_tree(&r, nv, prompt, &L, tok, parent, &n);
        cr_assert_eq(sd_session_seq_truncate(flat, 0, 0, &err), SD_OK);
        cr_assert_eq(sd_session_seq_sync(flat, 0, prompt, L, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_decode_tree(flat, 0, tok, parent, n, lf, &err), SD_OK, "%s",
                     err.msg);
        for (int32_t q = 1; q < 3; q++)
            cr_assert_eq(sd_session_seq_truncate(paged, q, 0, &err), SD_OK);
        seq_eval(paged, 1, prompt, L, NULL);
        cr_assert_eq(sd_session_seq_fork(paged, 2, 1, L, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_decode_tree(paged, 2, tok, parent, n, lp, &err), SD_OK, "%s",
                     err.msg);
        cr_assert_eq(sd_session_seq_n_past(paged, 2), L + n);
        cr_assert(memcmp(lf, lp, (size_t)n * (size_t)nv * sizeof(float)) == 0,
                  "%s tree %d (%d nodes after %d): a paged sequence's rows differ from the "
                  "contiguous cache's",
                  path, it, n, L);
        int32_t pth[SD_MAX_TREE];
        const int32_t d = path_of(parent, (int32_t)(rng_next(&r) % (uint64_t)n), pth);
        cr_assert_eq(sd_session_seq_tree_keep(flat, 0, L, pth, d, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_tree_keep(paged, 2, L, pth, d, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_n_past(paged, 2), L + d);
        cr_assert(memcmp(sd_session_seq_tokens(flat, 0), sd_session_seq_tokens(paged, 2),
                         (size_t)(L + d) * sizeof(int32_t)) == 0,
                  "the kept path's ids");
        const int32_t x = (int32_t)(rng_next(&r) % (uint64_t)nv);
        cr_assert_eq(sd_session_eval(flat, &x, 1, lf, 1, &err), SD_OK, "%s", err.msg);
        seq_eval(paged, 2, &x, 1, lp);
        cr_assert(memcmp(lf, lp, (size_t)nv * sizeof(float)) == 0,
                  "%s tree %d: after keeping a path of %d, the paged row differs", path, it, d);
        /* the sequence forked from is untouched: its next row is the prompt's */
        cr_assert_eq(sd_session_seq_truncate(flat, 0, L, &err), SD_OK);
        cr_assert_eq(sd_session_eval(flat, &x, 1, lf, 1, &err), SD_OK, "%s", err.msg);
        seq_eval(paged, 1, &x, 1, lp);
        cr_assert(memcmp(lf, lp, (size_t)nv * sizeof(float)) == 0,
                  "%s tree %d: the tree pass changed the sequence it was forked from", path, it);
    }
    free(lf);
    free(lp);
    sd_session_free(flat);
    sd_session_free(paged);
    sd_model_free(m);
}

Test(tree, paged_sequence_rows_equal_the_contiguous_cache) {
    char path[1200];
    tu_llama_spec sp = tu_llama_default_spec();
    cr_assert_eq(tu_make_llama(tu_path(path, sizeof path, g_dir, "f32.gguf"), &sp), 0);
    check_paged(path, 1, SD_TYPE_F32, 12, 0x9abcull);
    check_paged(path, 2, SD_TYPE_F16, 12, 0x4321ull);
}
