/*
 * tests/test_tree_gen.c: token trees end to end (the batcher's step, the engine's one path,
 * with tree_width > 0).
 * Greedy and Gumbel (same seed) output equal target alone for the tree shapes 1x4, 2x3,
 * 4x2 and 3x1 .. 3x5:
 *   - with an "oracle" tree proposer that knows the target-alone text and hides its
 *     continuation, cut at a random depth, in a random branch among random siblings: the
 *     accepted count must then be exactly the sum of the cuts (the walk finds the right
 *     branch wherever it is, and never accepts a wrong token). The oracle stands in for
 *     the n-gram proposer of a one-slot batcher (white box: batcher_impl.h);
 *   - with the suffix and n-gram proposers' trees (shapes alternating between the two) on
 *     the shipped TinyStories target and SmolLM2-135M (skipped when absent).
 * Rejection sampling with a tree is refused.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/batcher_impl.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "engine_util.h"
#include "verify/sd_verify.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(tree_gen, .init = setup, .fini = teardown, .timeout = 900);

/* ---- the oracle tree proposer ---- */

typedef struct oracle {
    sd_proposer base; /* first member */
    const int32_t *ref;
    int32_t n_ref, n_prompt, n_vocab;
    uint64_t rng;
    int64_t expect_accepted; /* sum of the cuts proposed */
    int64_t off_first;       /* proposals whose right branch was not the first */
} oracle;

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A random id other than `excl` (and other than the ids in avoid[0 .. n_avoid)). */
static int32_t other_token(oracle *o, int32_t excl, const int32_t *avoid, int32_t n_avoid) {
    for (;;) {
        const int32_t t = (int32_t)(next(&o->rng) % (uint64_t)o->n_vocab);
        int bad = t == excl;
        for (int32_t i = 0; i < n_avoid; i++)
            bad |= t == avoid[i];
        if (!bad) return t;
    }
}

static int oracle_tree(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t width,
                       int32_t depth, sd_proposal *out, sd_error *err) {
    (void)ctx;
    (void)err;
    oracle *o = (oracle *)base;
    out->n = 0;
    out->n_vocab = o->n_vocab;
    out->probs = NULL;
    out->one_hot = 1;
    const int32_t at = n_ctx - o->n_prompt; /* the next target-alone token: ref[at] */
    int32_t right[SD_MAX_DRAFT];
    for (int32_t j = 0; j < depth; j++)
        right[j] = at + j < o->n_ref ? o->ref[at + j] : -1;
    const int32_t b = (int32_t)(next(&o->rng) % (uint64_t)width);
    int32_t cut = (int32_t)(next(&o->rng) % (uint64_t)(depth + 1));
    for (int32_t j = 0; j < cut; j++)
        if (right[j] < 0) cut = j; /* past the reference: nothing is known to be right */
    int32_t roots[SD_MAX_DRAFT], n_roots = 0;
    for (int32_t w = 0; w < width; w++) {
        int32_t node = -1;
        for (int32_t j = 0; j < depth; j++) {
            int32_t t;
            if (w == b && j < cut)
                t = right[j];
            else if (w == b || j > 0)
                t = other_token(o, w == b ? right[j] : -1, NULL, 0);
            else /* another branch's first token: never the right one, distinct siblings */
                t = other_token(o, right[0], roots, n_roots);
            if (j == 0) {
                if (w == b && cut == 0) t = other_token(o, right[0], roots, n_roots);
                roots[n_roots++] = t;
            }
            out->tokens[out->n] = t;
            out->parent[out->n] = node;
            node = out->n++;
        }
    }
    o->expect_accepted += cut;
    if (b > 0 && cut > 0) o->off_first++;
    return SD_OK;
}

static int oracle_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                          sd_proposal *out, sd_error *err) {
    return oracle_tree(base, ctx, n_ctx, 1, k, out, err);
}

static void oracle_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    (void)base;
    (void)ctx;
    (void)n_ctx;
}

static void oracle_free(sd_proposer *base) {
    (void)base;
}

static const sd_proposer_ops oracle_ops = {
    .name = "oracle",
    .propose = oracle_propose,
    .commit = oracle_commit,
    .free = oracle_free,
    .propose_tree = oracle_tree,
};

static const int32_t shapes[][2] = {{1, 4}, {2, 3}, {4, 2}, {3, 1}, {3, 2}, {3, 3}, {3, 4}, {3, 5}};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* A batcher of one slot over e whose n-gram proposer is o (a tree request of draft type
 * n-gram drafts from it); o outlives it (its free does nothing). */
static sd_batcher *oracle_batcher(sd_engine *e, oracle *o) {
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 1;
    bp.k_max = SD_MAX_DRAFT;
    bp.prefix_cache = 0;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    sd_proposer_free(b->ngram[0]);
    b->ngram[0] = &o->base;
    return b;
}

/* One request of gp (draft type n-gram: the oracle's trees) through b, to its end. */
static void oracle_run(sd_batcher *b, const sd_gen_params *gp, const int32_t *prompt,
                       int32_t n_prompt, eu_out *o) {
    memset(o, 0, sizeof *o);
    sd_gen_params g = *gp;
    g.draft_type = SD_DRAFT_NGRAM;
    g.k_policy = SD_K_FIXED;
    eu_submit(b, prompt, n_prompt, &g, eu_collect, o);
    eu_drain(b, 1);
    cr_assert(o->done);
}

/* Target alone, then every shape with the oracle: the same tokens, exactly the cuts
 * accepted. */
static void oracle_shapes(sd_engine *e, const sd_gen_params *base, const int32_t *prompt,
                          int32_t n_prompt, const char *what) {
    enum { N = 64 };
    const int32_t nv = sd_model_hparams(sd_engine_target(e))->n_vocab;
    int32_t ref[N];
    sd_gen_stats st;
    sd_gen_params gp = *base;
    gp.n_predict = N;
    gp.ignore_eos = 1;
    eu_generate(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompt, n_prompt, ref, &st);
    const int32_t n_ref = st.n_generated;
    cr_assert_eq(n_ref, N);
    int64_t off_first = 0;
    for (int s = 0; s < N_SHAPES; s++) {
        oracle o = {
            {&oracle_ops}, ref, n_ref, n_prompt, nv, 0x9e3779b97f4a7c15ull + (uint64_t)s, 0, 0};
        sd_batcher *b = oracle_batcher(e, &o);
        gp.tree_width = shapes[s][0];
        gp.n_draft = shapes[s][1];
        eu_out got;
        oracle_run(b, &gp, prompt, n_prompt, &got);
        cr_assert_eq(got.n, n_ref, "%s %dx%d: %d tokens, target alone %d", what, shapes[s][0],
                     shapes[s][1], got.n, n_ref);
        for (int32_t i = 0; i < n_ref; i++)
            cr_assert_eq(got.toks[i], ref[i], "%s tree %dx%d: token %d is %d, target alone %d",
                         what, shapes[s][0], shapes[s][1], i, got.toks[i], ref[i]);
        cr_assert_eq(got.st.n_accepted, o.expect_accepted,
                     "%s tree %dx%d: %d accepted, the oracle hid %lld right tokens", what,
                     shapes[s][0], shapes[s][1], got.st.n_accepted, (long long)o.expect_accepted);
        off_first += o.off_first;
        sd_batcher_free(b);
    }
    cr_assert_gt(off_first, 10, "%s: the right branch was rarely off the first: proves little",
                 what);
}

/* An engine on the random target alone: 256 positions, two threads. */
static sd_engine *engine_of(const char *path) {
    return eu_engine(path, NULL, 256, 2, 0);
}

Test(tree_gen, oracle_greedy_every_shape) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *e = engine_of(t);
    const int32_t prompt[12] = {1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9};
    sd_gen_params gp = sd_gen_default_params();
    gp.samp.temp = 0.0f;
    oracle_shapes(e, &gp, prompt, 12, "random model greedy");
    gp.samp.repeat_penalty = 1.3f; /* penalties read each row's own path */
    oracle_shapes(e, &gp, prompt, 12, "random model greedy, repeat penalty");
    sd_engine_free(e);
}

Test(tree_gen, oracle_gumbel_same_seed) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *e = engine_of(t);
    const int32_t prompt[6] = {1, 40, 41, 42, 43, 44};
    for (uint64_t seed = 1; seed <= 3; seed++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.samp.temp = 0.9f;
        gp.samp.top_k = 0;
        gp.samp.top_p = 0.95f;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.seed = seed;
        char what[64];
        snprintf(what, sizeof what, "random model gumbel seed %llu", (unsigned long long)seed);
        oracle_shapes(e, &gp, prompt, 6, what);
    }
    sd_engine_free(e);
}

Test(tree_gen, rejection_sampling_is_refused) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *e = engine_of(t);
    sd_gen_params gp = sd_gen_default_params();
    gp.samp.temp = 0.8f;
    gp.samp.spec = SD_SPEC_REJECTION;
    gp.draft_type = SD_DRAFT_NGRAM;
    gp.tree_width = 2;
    gp.n_draft = 3;
    const int32_t prompt[2] = {1, 5};
    int32_t out[128];
    sd_gen_stats st;
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, &gp, prompt, 2, NULL, NULL, out, 128, &st, &err),
                 SD_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "Gumbel") != NULL, "%s", err.msg);
    gp.samp.spec = SD_SPEC_GUMBEL;
    gp.tree_width = 4;
    gp.n_draft = 5; /* 20 nodes */
    cr_assert_eq(sd_engine_generate(e, &gp, prompt, 2, NULL, NULL, out, 128, &st, &err),
                 SD_ERR_ARG);
    sd_engine_free(e);
}

/* ---- the suffix and n-gram proposers' trees on real models ---- */

static void suffix_shapes(const char *path, const char *const *texts, int n_texts, int32_t n_pred) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = path;
    ep.n_threads = 2;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    const sd_vocab *v = sd_engine_vocab(e);
    int32_t *ref = malloc((size_t)n_pred * sizeof *ref),
            *got = malloc((size_t)n_pred * sizeof *got);
    cr_assert(ref && got);
    int64_t accepted = 0;
    for (int i = 0; i < n_texts; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        cr_assert_eq(sd_vocab_tokenize(v, texts[i], strlen(texts[i]), 1, &ids, &n, &err), 0, "%s",
                     err.msg);
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = n_pred;
        gp.samp.temp = 0.0f;
        gp.draft_type = SD_DRAFT_NONE;
        sd_gen_stats st;
        cr_assert_eq(
            sd_engine_generate(e, &gp, ids, (int32_t)n, NULL, NULL, ref, n_pred, &st, &err), SD_OK,
            "%s", err.msg);
        const int32_t n_ref = st.n_generated;
        for (int s = 0; s < N_SHAPES; s++) {
            gp.draft_type = s % 2 ? SD_DRAFT_NGRAM : SD_DRAFT_SUFFIX; /* both kinds of tree */
            gp.k_policy = SD_K_FIXED;
            gp.tree_width = shapes[s][0];
            gp.n_draft = shapes[s][1];
            cr_assert_eq(
                sd_engine_generate(e, &gp, ids, (int32_t)n, NULL, NULL, got, n_pred, &st, &err),
                SD_OK, "%s", err.msg);
            cr_assert_eq(st.n_generated, n_ref, "%s text %d tree %dx%d: %d tokens vs %d", path, i,
                         shapes[s][0], shapes[s][1], st.n_generated, n_ref);
            for (int32_t j = 0; j < n_ref; j++)
                cr_assert_eq(got[j], ref[j], "%s text %d tree %dx%d: token %d differs", path, i,
                             shapes[s][0], shapes[s][1], j);
            accepted += st.n_accepted;
        }
        free(ids);
    }
    cr_assert_gt(accepted, 0, "no tree draft was ever accepted: the test proves little");
    free(ref);
    free(got);
    sd_engine_free(e);
}

Test(tree_gen, suffix_trees_tinystories) {
    const char *tp = SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf";
    tu_need_path(tp, "the shipped TinyStories target");
    const char *texts[] = {
        "Lily had a red ball. She liked to play with the red ball in the park. One day, Lily",
        "Rewrite the story: Tom saw a big dog. The dog was brown. Tom gave the dog a bone. "
        "Story: Tom saw",
    };
    suffix_shapes(tp, texts, 2, 80);
}

Test(tree_gen, suffix_trees_smollm2) {
    const char *env = getenv("SD_SMOL_MODEL");
    const char *mp =
        env && *env ? env : SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf";
    tu_need_path(mp, "fetched by `bash scripts/get_models.sh`");
    const char *texts[] = {
        "Copy this text exactly: The quick brown fox jumps over the lazy dog. The dog sleeps "
        "under the old tree by the river. Copy: The quick brown fox",
    };
    suffix_shapes(mp, texts, 1, 48);
}

/* ---- the proposers' tree shapes ---- */

/* ctx ends in "5 6", followed earlier by 7, 8 and 9 (most recent last), each then by 5:
 * width 3 x depth 2 gives the branches 9 5, 8 5, 7 5 (ranked by count, ties the most recent
 * first; the n-gram's by recency), width 2 the first two. */
static void check_tree(sd_proposer *p, const char *what) {
    const int32_t ctx[12] = {1, 5, 6, 7, 5, 6, 8, 5, 6, 9, 5, 6};
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose_tree(p, ctx, 12, 3, 2, &prop, &err), SD_OK, "%s", err.msg);
    const int32_t want_tok[6] = {9, 5, 8, 5, 7, 5}, want_par[6] = {-1, 0, -1, 2, -1, 4};
    cr_assert_eq(prop.n, 6, "%s: %d nodes", what, prop.n);
    cr_assert(prop.one_hot);
    for (int32_t i = 0; i < 6; i++) {
        cr_assert_eq(prop.tokens[i], want_tok[i], "%s: node %d token %d", what, i, prop.tokens[i]);
        cr_assert_eq(prop.parent[i], want_par[i], "%s: node %d parent %d", what, i, prop.parent[i]);
    }
    cr_assert_eq(sd_proposer_propose_tree(p, ctx, 12, 2, 2, &prop, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(prop.n, 4, "%s width 2: %d nodes", what, prop.n);
    cr_assert_eq(prop.tokens[2], 8);
    /* width 1: the chain proposal, parents i - 1 */
    sd_proposal chain;
    cr_assert_eq(sd_proposer_propose(p, ctx, 12, 2, &chain, &err), SD_OK);
    cr_assert_eq(sd_proposer_propose_tree(p, ctx, 12, 1, 2, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, chain.n);
    for (int32_t i = 0; i < prop.n; i++) {
        cr_assert_eq(prop.tokens[i], chain.tokens[i]);
        cr_assert_eq(prop.parent[i], i - 1);
    }
    cr_assert_eq(sd_proposer_propose_tree(p, ctx, 12, 4, 5, &prop, &err), SD_ERR_ARG,
                 "20 nodes are more than a proposal holds");
}

Test(tree_gen, proposer_tree_shapes) {
    sd_suffix_params sp = sd_suffix_default_params();
    sd_proposer *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_suffix_init(&sp, 96, &s, &err), SD_OK, "%s", err.msg);
    check_tree(s, "suffix");
    sd_proposer_free(s);
    sd_proposer *g = tu_make_ngram(2, 4, 256, 96);
    check_tree(g, "ngram");
    sd_proposer_free(g);
}

/* The suffix tree drafts every token the chain drafts: its first branch is the chain
 * proposal of a proposer with the same history (resumed copies and renames included), the
 * other roots differ from its first token and from each other. Replayed over outputs that
 * copy their prompt with a rename (every V written as R, as a code edit renames a variable),
 * random substitutions and new text between the copies: each pass proposes a chain (K 8)
 * and a 2 x 8 tree from two proposers, accepts the chain's longest prefix equal to the
 * output, emits one more and commits the same text to both. */
Test(tree_gen, suffix_tree_first_branch_is_the_chain) {
    enum { NV = 40, V = NV - 3, R = NV - 2, NP = 240, NO = 400 };
    sd_suffix_params sp = sd_suffix_default_params();
    sp.n_ctx = NP + NO + 8;
    sd_proposer *a = NULL, *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_suffix_init(&sp, NV, &a, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_proposer_suffix_init(&sp, NV, &b, &err), SD_OK, "%s", err.msg);
    uint64_t rng = 0x2545f4914f6cdd1dull;
    int32_t text[NP + NO], n_out = 0;
    for (int32_t i = 0; i < NP; i++)
        text[i] = i % 7 == 3 ? V : (int32_t)(next(&rng) % (NV - 3));
    int32_t *out = text + NP;
    while (n_out < NO) { /* a copy of 20 .. 59 prompt tokens, then 1 .. 3 new ones */
        const int32_t at = (int32_t)(next(&rng) % (NP - 60)), len = 20 + (int32_t)(next(&rng) % 40);
        for (int32_t i = 0; i < len && n_out < NO; i++) {
            int32_t t = text[at + i] == V ? R : text[at + i];
            if (next(&rng) % 25 == 0) t = (int32_t)(next(&rng) % (NV - 3));
            out[n_out++] = t;
        }
        for (int32_t i = (int32_t)(next(&rng) % 3); i >= 0 && n_out < NO; i--)
            out[n_out++] = (int32_t)(next(&rng) % NV);
    }
    int32_t n = NP, gen = 0, passes = 0, with_chain = 0, with_branches = 0, renamed = 0;
    while (gen < NO - 1) {
        sd_proposal pc, pt;
        cr_assert_eq(sd_proposer_propose(a, text, n, 8, &pc, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_proposer_propose_tree(b, text, n, 2, 8, &pt, &err), SD_OK, "%s", err.msg);
        cr_assert_geq(pt.n, pc.n, "pass %d: the tree drafts less than the chain", passes);
        for (int32_t i = 0; i < pc.n; i++) {
            cr_assert_eq(pt.tokens[i], pc.tokens[i], "pass %d: node %d is %d, the chain's %d",
                         passes, i, pt.tokens[i], pc.tokens[i]);
            cr_assert_eq(pt.parent[i], i - 1);
            renamed += pc.tokens[i] == R && i > 0;
        }
        int32_t roots[SD_MAX_DRAFT], n_roots = 0;
        for (int32_t i = 0; i < pt.n; i++) {
            cr_assert(pt.parent[i] < i, "pass %d: node %d's parent %d", passes, i, pt.parent[i]);
            if (pt.parent[i] >= 0) continue;
            for (int32_t r = 0; r < n_roots; r++)
                cr_assert_neq(roots[r], pt.tokens[i], "pass %d: two roots %d", passes, roots[r]);
            roots[n_roots++] = pt.tokens[i];
        }
        cr_assert_leq(n_roots, 2);
        with_chain += pc.n > 0;
        with_branches += n_roots == 2;
        int32_t acc = 0;
        while (acc < pc.n && gen + acc < NO - 1 && pc.tokens[acc] == out[gen + acc])
            acc++;
        const int32_t e = acc + 1;
        n += e;
        gen += e;
        passes++;
        sd_proposer_commit(a, text, n);
        sd_proposer_commit(b, text, n);
    }
    fprintf(stderr,
            "  %d passes: %d with a chain (%d renamed tokens drafted past the first), %d with a "
            "second branch\n",
            passes, with_chain, renamed, with_branches);
    cr_assert_gt(with_chain, passes / 4, "the chain rarely drafted: the test proves little");
    cr_assert_gt(with_branches, 0, "no second branch: the tree was always the chain");
    cr_assert_gt(renamed, 0, "no rename drafted: the resumed copies were not exercised");
    sd_proposer_free(a);
    sd_proposer_free(b);
}

/* ---- sd_verify_tree_keyed on dense rows ---- */

typedef struct dense_rows {
    const float *rows;
    int32_t n_vocab;
    int reads[SD_MAX_DRAFT + 1];
} dense_rows;

static const float *dense_row(void *user, int32_t i, sd_error *err) {
    (void)err;
    dense_rows *d = user;
    d->reads[i]++;
    return d->rows + (size_t)i * (size_t)d->n_vocab;
}

/* Rows whose argmax is want[r] (the tree's row r: 0 the root, i + 1 after node i). */
static void fill_rows(float *rows, int32_t n_rows, int32_t nv, const int32_t *want) {
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t v = 0; v < nv; v++)
            rows[(size_t)r * (size_t)nv + (size_t)v] = v == want[r] ? 5.0f : (float)(v % 3);
}

Test(tree_gen, verify_tree_walks_the_matching_branch) {
    enum { NV = 8 };
    /* root -> {0: 3, 2: 4}; 0 -> 1: 5; 2 -> 3: 6 -> 4: 7. */
    const int32_t tok[5] = {3, 5, 4, 6, 7}, par[5] = {-1, 0, -1, 2, 3};
    float rows[6 * NV];
    /* row 0 picks 4 (node 2), row 3 (after node 2) picks 6 (node 3), row 4 picks 1: a
     * correction after two accepted */
    const int32_t want[6] = {4, 0, 0, 6, 1, 0};
    fill_rows(rows, 6, NV, want);
    dense_rows d = {rows, NV, {0}};
    sd_sampling_params sp = sd_sampling_default_params();
    sp.temp = 0.0f;
    sd_verify_result res;
    int32_t path[SD_MAX_DRAFT];
    sd_error err = {0};
    cr_assert_eq(sd_verify_tree_keyed(&sp, tok, par, 5, dense_row, &d, NV, 1, 10, &res, path, &err),
                 SD_OK, "%s", err.msg);
    cr_assert_eq(res.n_accepted, 2);
    cr_assert_eq(res.n_tokens, 3);
    cr_assert_eq(path[0], 2);
    cr_assert_eq(path[1], 3);
    cr_assert_eq(res.tokens[0], 4);
    cr_assert_eq(res.tokens[1], 6);
    cr_assert_eq(res.tokens[2], 1);
    cr_assert_eq(d.reads[0] + d.reads[3] + d.reads[4], 3, "the walk's rows, once each");
    cr_assert_eq(d.reads[1] + d.reads[2] + d.reads[5], 0, "no row off the walk");
    /* a leaf reached: the bonus from its row */
    const int32_t want2[6] = {4, 0, 0, 6, 7, 2};
    fill_rows(rows, 6, NV, want2);
    cr_assert_eq(sd_verify_tree_keyed(&sp, tok, par, 5, dense_row, &d, NV, 1, 10, &res, path, &err),
                 SD_OK);
    cr_assert_eq(res.n_accepted, 3);
    cr_assert_eq(res.tokens[3], 2);
    /* no match at the root: the correction only */
    const int32_t want3[6] = {0, 0, 0, 0, 0, 0};
    fill_rows(rows, 6, NV, want3);
    cr_assert_eq(sd_verify_tree_keyed(&sp, tok, par, 5, dense_row, &d, NV, 1, 10, &res, path, &err),
                 SD_OK);
    cr_assert_eq(res.n_accepted, 0);
    cr_assert_eq(res.tokens[0], 0);
    /* refused: rejection sampling, a parent after its child, an id out of range */
    sp.temp = 0.8f;
    sp.spec = SD_SPEC_REJECTION;
    cr_assert_eq(sd_verify_tree_keyed(&sp, tok, par, 5, dense_row, &d, NV, 1, 10, &res, path, &err),
                 SD_ERR_UNSUPPORTED);
    sp.temp = 0.0f;
    const int32_t bad_par[5] = {-1, 0, 3, 2, 3};
    cr_assert_eq(
        sd_verify_tree_keyed(&sp, tok, bad_par, 5, dense_row, &d, NV, 1, 10, &res, path, &err),
        SD_ERR_ARG);
    const int32_t bad_tok[5] = {3, 5, NV, 6, 7};
    cr_assert_eq(
        sd_verify_tree_keyed(&sp, bad_tok, par, 5, dense_row, &d, NV, 1, 10, &res, path, &err),
        SD_ERR_ARG);
}
