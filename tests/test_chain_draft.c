/*
 * tests/test_chain_draft.c: chained drafting (draft/chain.c; ngram+llm, suffix+llm): a
 * lookup match of m < K tokens continued by the LLM draft in the same block.
 *   - the block's layout with stand-in proposers: the second proposer sees the context
 *     extended by the m tokens and is asked for K - m; a long match is taken alone, no
 *     match asks the second alone; q rows: one-hot for the lookup tokens, the second's
 *     after them;
 *   - rejection sampling over such mixed blocks stays exact: the emitted tokens follow
 *     the target distribution (chi-square, false-alarm rate 1e-4 per test), with a
 *     negative control (lookup rows verified as if drawn from q) that fails;
 *   - end to end: greedy output equal to target alone for ngram+llm and suffix+llm, K 2..8
 *     fixed and adaptive, on the random pair, the shipped TinyStories pair and SmolLM2
 *     with its draft (where present), through the engine's one path (the batcher's
 *     step), with mixed blocks counted from its pass records (so the chain ran); Gumbel
 *     output equal to target alone with the same seed; rejection sampling deterministic
 *     per seed; serve's batcher of three sequences drafting the same blocks as generate's
 *     one-slot batcher.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "testutil.h"
#include "verify/sd_verify.h"

static char g_dir[1024], g_t[1200], g_d[1200];

static void setup(void) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(chain_draft, .init = setup, .fini = teardown, .timeout = 900);

/* ------------------------------------------------------------------------------------ */
/* Stand-in proposers                                                                    */

#define NV 8

/* Proposes min(m, k) fixed tokens, one-hot, as a lookup. */
typedef struct fake_lookup {
    sd_proposer base;
    int32_t m;
    int32_t toks[SD_MAX_DRAFT];
    int commits;
} fake_lookup;

static int lookup_propose(sd_proposer *b, const int32_t *ctx, int32_t n_ctx, int32_t k,
                          sd_proposal *out, sd_error *err) {
    (void)ctx;
    (void)n_ctx;
    (void)err;
    fake_lookup *f = (fake_lookup *)b;
    out->n = f->m < k ? f->m : k;
    memcpy(out->tokens, f->toks, (size_t)out->n * sizeof *out->tokens);
    out->n_vocab = NV;
    out->one_hot = 1;
    out->lookup = 1;
    return SD_OK;
}
static void lookup_commit(sd_proposer *b, const int32_t *ctx, int32_t n_ctx) {
    (void)ctx;
    (void)n_ctx;
    ((fake_lookup *)b)->commits++;
}
static void fake_free(sd_proposer *b) {
    (void)b;
}
static const sd_proposer_ops lookup_ops = {
    .name = "lookup", .propose = lookup_propose, .commit = lookup_commit, .free = fake_free};

/* An LLM stand-in: records the context and k it is asked with; rows = 1: draws each token
 * from q with its own RNG and returns q rows (rejection sampling), else proposes 7, 6, ...
 * one-hot. */
typedef struct fake_llm {
    sd_proposer base;
    int rows;
    int32_t nv; /* its rows' width (0: NV) */
    float q[NV];
    sd_rng rng;
    float probs[SD_MAX_DRAFT * NV];
    int calls, commits;
    int32_t last_k, last_n_ctx;
    int32_t seen[64];
} fake_llm;

static int llm_propose(sd_proposer *b, const int32_t *ctx, int32_t n_ctx, int32_t k,
                       sd_proposal *out, sd_error *err) {
    (void)err;
    fake_llm *f = (fake_llm *)b;
    f->calls++;
    f->last_k = k;
    f->last_n_ctx = n_ctx;
    memcpy(f->seen, ctx, (size_t)(n_ctx < 64 ? n_ctx : 64) * sizeof *ctx);
    out->n_vocab = f->nv ? f->nv : NV;
    out->n = k;
    out->one_hot = !f->rows;
    out->probs = f->rows ? f->probs : NULL;
    for (int32_t i = 0; i < k; i++) {
        if (f->rows) {
            memcpy(f->probs + (size_t)i * NV, f->q, sizeof f->q);
            out->tokens[i] = sd_sample(f->q, NV, sd_rng_uniform(&f->rng));
        } else {
            out->tokens[i] = 7 - i % NV;
        }
    }
    return SD_OK;
}
static void llm_commit(sd_proposer *b, const int32_t *ctx, int32_t n_ctx) {
    (void)ctx;
    (void)n_ctx;
    ((fake_llm *)b)->commits++;
}
static const sd_proposer_ops llm_ops = {
    .name = "llm", .propose = llm_propose, .commit = llm_commit, .free = fake_free};

Test(chain_draft, block_layout) {
    fake_lookup lk = {{&lookup_ops}, 2, {3, 5}, 0};
    fake_llm lm;
    memset(&lm, 0, sizeof lm);
    lm.base.ops = &llm_ops;
    sd_proposer *chain = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_chain_init(&lk.base, &lm.base, "lookup+llm", &chain, &err), 0, "%s",
                 err.msg);
    const int32_t ctx[] = {1, 4, 4, 2};
    sd_proposal prop;

    /* m = 2 < k = 5: the second continues from the match's end with k - m. */
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 5, &prop, &err), 0, "%s", err.msg);
    cr_assert_eq(lm.calls, 1);
    cr_assert_eq(lm.last_k, 3);
    cr_assert_eq(lm.last_n_ctx, 6);
    const int32_t ext[] = {1, 4, 4, 2, 3, 5};
    cr_assert(memcmp(lm.seen, ext, sizeof ext) == 0, "the second sees ctx then the match");
    const int32_t want[] = {3, 5, 7, 6, 5};
    cr_assert_eq(prop.n, 5);
    cr_assert(memcmp(prop.tokens, want, sizeof want) == 0);
    cr_assert_eq(prop.one_hot, 1);
    cr_assert_null(prop.probs);
    cr_assert_eq(prop.lookup, 0, "a mixed block is not a lookup-only pass");

    /* m >= k: the match alone. */
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 2, &prop, &err), 0);
    cr_assert_eq(lm.calls, 1);
    cr_assert_eq(prop.n, 2);
    cr_assert_eq(prop.lookup, 1);

    /* No match: the second alone, with the context as it is. */
    lk.m = 0;
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 3, &prop, &err), 0);
    cr_assert_eq(lm.calls, 2);
    cr_assert_eq(lm.last_k, 3);
    cr_assert_eq(lm.last_n_ctx, 4);
    cr_assert_eq(prop.n, 3);
    cr_assert_eq(prop.tokens[0], 7);

    /* Rows (rejection sampling): one-hot rows for the lookup tokens, then the second's. */
    lk.m = 3;
    lk.toks[2] = 0;
    lm.rows = 1;
    for (int i = 0; i < NV; i++)
        lm.q[i] = (float)(i + 1) / 36.0f;
    sd_rng_seed(&lm.rng, 9);
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 6, &prop, &err), 0, "%s", err.msg);
    cr_assert_eq(prop.n, 6);
    cr_assert_eq(prop.one_hot, 0);
    cr_assert_not_null(prop.probs);
    cr_assert_eq(prop.n_vocab, NV);
    for (int32_t i = 0; i < 6; i++)
        for (int v = 0; v < NV; v++) {
            const float want_q = i < 3 ? (v == prop.tokens[i] ? 1.0f : 0.0f) : lm.q[v];
            cr_assert_eq(prop.probs[i * NV + v], want_q, "row %d entry %d", i, v);
        }
    cr_assert_eq(prop.tokens[2], 0);

    sd_chain_counts cnt;
    cr_assert_eq(sd_proposer_chain_counts(chain, &cnt), 0);
    cr_assert_eq(cnt.n_first, 1);
    cr_assert_eq(cnt.n_second, 1);
    cr_assert_eq(cnt.n_mixed, 2);
    cr_assert_eq(cnt.n_mixed_lookup, 5);
    cr_assert_eq(cnt.n_mixed_second, 6);
    cr_assert_eq(sd_proposer_chain_counts(&lm.base, &cnt), -1);

    sd_proposer_commit(chain, ctx, 4);
    cr_assert_eq(lk.commits, 1);
    cr_assert_eq(lm.commits, 1);
    sd_proposer_free(chain);
}

/* The n-gram's part of a chained block is cut to its match extended backwards (at most as
 * many tokens as the match is long); a match at least K long is taken alone. */
Test(chain_draft, ngram_part_is_its_match_length) {
    sd_proposer *ng = tu_make_ngram(2, 4, 64, 100);
    fake_llm lm;
    memset(&lm, 0, sizeof lm);
    lm.base.ops = &llm_ops;
    lm.nv = 100;
    sd_proposer *chain = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_chain_init(ng, &lm.base, "ngram+llm", &chain, &err), 0, "%s", err.msg);
    sd_proposal prop;
    /* "7 8" occurred after "6" before, after "1" now: a match of 2. */
    const int32_t a[] = {5, 6, 7, 8, 9, 1, 1, 7, 8};
    cr_assert_eq(sd_proposer_propose(ng, a, 9, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 4, "the n-gram alone proposes all of K");
    cr_assert_eq(sd_proposer_ngram_last_match(ng), 2);
    cr_assert_eq(sd_proposer_ngram_last_extent(ng, 8), 2);
    cr_assert_eq(sd_proposer_propose(chain, a, 9, 4, &prop, &err), 0);
    cr_assert_eq(lm.calls, 1);
    cr_assert_eq(lm.last_k, 2);
    const int32_t ext_a[] = {5, 6, 7, 8, 9, 1, 1, 7, 8, 9, 1};
    cr_assert_eq(lm.last_n_ctx, 11);
    cr_assert(memcmp(lm.seen, ext_a, sizeof ext_a) == 0);
    const int32_t want_a[] = {9, 1, 7, 6};
    cr_assert_eq(prop.n, 4);
    cr_assert(memcmp(prop.tokens, want_a, sizeof want_a) == 0);
    /* "5 6 7 8" again: the match extends to 4 tokens (the n-gram itself is at most 4, the
     * extension reaches the start of the context). */
    const int32_t b[] = {5, 6, 7, 8, 9, 1, 5, 6, 7, 8};
    cr_assert_eq(sd_proposer_propose(ng, b, 10, 4, &prop, &err), 0);
    cr_assert_eq(sd_proposer_ngram_last_extent(ng, 3), 4, "at least the n-gram");
    cr_assert_eq(sd_proposer_ngram_last_extent(ng, 16), 4);
    cr_assert_eq(sd_proposer_propose(chain, b, 10, 4, &prop, &err), 0);
    cr_assert_eq(lm.calls, 1, "a match of K or more is taken alone");
    cr_assert_eq(prop.n, 4);
    cr_assert_eq(prop.lookup, 1);
    cr_assert_eq(sd_proposer_propose(chain, b, 10, 6, &prop, &err), 0);
    cr_assert_eq(lm.calls, 2);
    cr_assert_eq(lm.last_k, 2, "4 of the match, 2 of the LLM");
    const int32_t want_b[] = {9, 1, 5, 6, 7, 6};
    cr_assert_eq(prop.n, 6);
    cr_assert(memcmp(prop.tokens, want_b, sizeof want_b) == 0);
    /* A match of 7 past the 4-gram, capped. */
    const int32_t c[] = {1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3, 4, 5, 6, 7};
    cr_assert_eq(sd_proposer_propose(ng, c, 15, 4, &prop, &err), 0);
    cr_assert_eq(sd_proposer_ngram_last_match(ng), 4);
    cr_assert_eq(sd_proposer_ngram_last_extent(ng, 5), 5);
    cr_assert_eq(sd_proposer_ngram_last_extent(ng, 16), 7);
    cr_assert_eq(sd_proposer_ngram_last_extent(&lm.base, 4), -1, "not an n-gram proposer");
    sd_proposer_free(chain);
    sd_proposer_free(ng);
}

/* ------------------------------------------------------------------------------------ */
/* Rejection sampling over mixed blocks is exact                                          */

/* Upper critical values of chi-square for a false-alarm rate of 1e-4 by degrees of
 * freedom (as tests/test_verify.c: scipy.stats.chi2.isf(1e-4, df)). */
static const double CHI2_CRIT_1E4[8] = {
    0.0, 15.1367, 18.4207, 21.1075, 23.5127, 25.7448, 27.8563, 29.8775,
};

static const float P8[NV] = {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.08f, 0.05f, 0.02f};
static const float Q8[NV] = {0.05f, 0.10f, 0.30f, 0.05f, 0.20f, 0.10f, 0.10f, 0.10f};

#define N_TRIALS 200000L

/* Per emitted position j, token counts over N_TRIALS verifications of chain blocks of k
 * (m lookup tokens 0, 1, 0, ..., then the stand-in LLM's draws from Q8), every target row
 * P8. forget_one_hot: the negative control, the lookup rows replaced by Q8 (a chain that
 * verified its lookup tokens as if drawn from q). */
static void mixed_counts(int32_t m, int32_t k, int forget_one_hot, uint64_t seed,
                         long counts[SD_MAX_DRAFT + 1][NV], long n_pos[SD_MAX_DRAFT + 1]) {
    fake_lookup lk = {{&lookup_ops}, m, {0, 1, 0, 1, 0, 1, 0, 1}, 0};
    fake_llm lm;
    memset(&lm, 0, sizeof lm);
    lm.base.ops = &llm_ops;
    lm.rows = 1;
    memcpy(lm.q, Q8, sizeof Q8);
    sd_rng_seed(&lm.rng, seed);
    sd_proposer *chain = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_chain_init(&lk.base, &lm.base, "lookup+llm", &chain, &err), 0);
    float p[(SD_MAX_DRAFT + 1) * NV], q[SD_MAX_DRAFT * NV], scratch[NV];
    for (int32_t i = 0; i <= k; i++)
        memcpy(p + (size_t)i * NV, P8, sizeof P8);
    sd_rng vr;
    sd_rng_seed(&vr, seed ^ UINT64_C(0x9e3779b97f4a7c15));
    const int32_t ctx[] = {1, 2, 3};
    for (long t = 0; t < N_TRIALS; t++) {
        sd_proposal prop;
        cr_assert_eq(sd_proposer_propose(chain, ctx, 3, k, &prop, &err), 0, "%s", err.msg);
        cr_assert_eq(prop.n, k);
        memcpy(q, prop.probs, (size_t)k * NV * sizeof *q);
        if (forget_one_hot)
            for (int32_t i = 0; i < m; i++)
                memcpy(q + (size_t)i * NV, Q8, sizeof Q8);
        sd_verify_result res;
        cr_assert_eq(sd_verify_sample(prop.tokens, k, q, p, NV, &vr, scratch, &res, &err), 0, "%s",
                     err.msg);
        for (int32_t j = 0; j < res.n_tokens; j++) {
            counts[j][res.tokens[j]]++;
            n_pos[j]++;
        }
    }
    sd_proposer_free(chain);
}

/* The largest chi-square / critical value over positions with every expected count >= 5
 * (each position's tokens follow P8 whatever was accepted before: the rows are
 * independent); *n_tests the positions tested. */
static double worst_ratio(long counts[SD_MAX_DRAFT + 1][NV], const long n_pos[SD_MAX_DRAFT + 1],
                          int32_t k, const char *what, int *n_tests) {
    double worst = 0.0;
    *n_tests = 0;
    for (int32_t j = 0; j <= k; j++) {
        if ((double)n_pos[j] * 0.02 < 5.0) continue;
        double stat = 0.0;
        for (int v = 0; v < NV; v++) {
            const double e = (double)n_pos[j] * (double)P8[v];
            stat += ((double)counts[j][v] - e) * ((double)counts[j][v] - e) / e;
        }
        const double crit = CHI2_CRIT_1E4[NV - 1];
        fprintf(stderr, "  chi2 %s position %d n=%7ld stat=%8.2f crit=%.2f\n", what, j, n_pos[j],
                stat, crit);
        if (stat / crit > worst) worst = stat / crit;
        (*n_tests)++;
    }
    return worst;
}

Test(chain_draft, rejection_over_mixed_blocks_is_exact) {
    /* m lookup tokens, then k - m LLM tokens: each position's tokens follow p. At most 5
     * positions per case, 3 cases: a false alarm in at most 15 tests at 1e-4 each. */
    const int32_t cases[3][2] = {{1, 2}, {2, 4}, {3, 4}};
    for (int c = 0; c < 3; c++) {
        static long counts[SD_MAX_DRAFT + 1][NV], n_pos[SD_MAX_DRAFT + 1];
        memset(counts, 0, sizeof counts);
        memset(n_pos, 0, sizeof n_pos);
        const int32_t m = cases[c][0], k = cases[c][1];
        mixed_counts(m, k, 0, 100 + (uint64_t)c, counts, n_pos);
        char what[32];
        snprintf(what, sizeof what, "m=%d k=%d", m, k);
        int n_tests = 0;
        const double w = worst_ratio(counts, n_pos, k, what, &n_tests);
        cr_assert_geq(n_tests, 3, "%s: too few positions with enough samples", what);
        cr_expect_lt(w, 1.0, "%s: a position's tokens do not follow p (chi2 / crit %.2f)", what, w);
    }
}

Test(chain_draft, negative_control_lookup_rows_as_q_fails) {
    static long counts[SD_MAX_DRAFT + 1][NV], n_pos[SD_MAX_DRAFT + 1];
    memset(counts, 0, sizeof counts);
    memset(n_pos, 0, sizeof n_pos);
    mixed_counts(2, 4, 1, 7, counts, n_pos);
    int n_tests = 0;
    const double w = worst_ratio(counts, n_pos, 4, "negative control", &n_tests);
    cr_assert_gt(w, 1.0, "verifying lookup tokens with q rows passed the test");
}

/* ------------------------------------------------------------------------------------ */
/* End to end                                                                            */

static sd_engine *open_engine(const char *t, const char *d, int models_only) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = t;
    ep.draft = d;
    ep.n_threads = 1;
    ep.n_ctx = 512;
    ep.models_only = models_only;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

/* Mixed blocks (a chain's lookup tokens continued by the draft model in one block) of every
 * run so far, from the passes' records (sd_pass_record.n_chain_lookup): how many, and
 * their lookup and draft-model tokens. */
static int64_t g_mixed, g_mixed_lookup, g_mixed_second;

static int32_t run(sd_engine *e, sd_gen_params *gp, sd_draft_type t, sd_k_policy pol, int32_t k,
                   const int32_t *prompt, int32_t n_prompt, int32_t *out, sd_gen_stats *st) {
    gp->draft_type = t;
    gp->k_policy = pol;
    gp->n_draft = t == SD_DRAFT_NONE ? 0 : k;
    sd_gen_params g = *gp; /* the pass records, this run's (not gp's, which requests copy) */
    sd_pass_record *rec = calloc((size_t)g.n_predict + 1, sizeof *rec);
    cr_assert_not_null(rec);
    g.pass_trace = rec;
    g.pass_trace_cap = g.n_predict + 1;
    sd_error err = {0};
    cr_assert_eq(
        sd_engine_generate(e, &g, prompt, n_prompt, NULL, NULL, out, g.n_predict, st, &err), SD_OK,
        "%s", err.msg);
    for (int32_t i = 0; i < st->n_target_passes && i < g.pass_trace_cap; i++) {
        if (!rec[i].n_chain_lookup) continue;
        /* a mixed block: the lookup's tokens, then the draft model's */
        cr_assert(t == SD_DRAFT_NGRAM_LLM || t == SD_DRAFT_SUFFIX_LLM);
        cr_assert_gt(rec[i].n_drafted, rec[i].n_chain_lookup);
        g_mixed++;
        g_mixed_lookup += rec[i].n_chain_lookup;
        g_mixed_second += rec[i].n_drafted - rec[i].n_chain_lookup;
    }
    free(rec);
    return st->n_generated;
}

static int64_t mixed_blocks(sd_engine *e) {
    (void)e;
    return g_mixed;
}

/* ngram+llm and suffix+llm, K = 2..8 fixed and adaptive (K <= 4, 8), with gp's sampling:
 * the tokens of target alone with the same seed. Returns the mixed blocks drafted. */
static int64_t equal_to_alone(sd_engine *e, sd_gen_params gp, const int32_t *prompt,
                              int32_t n_prompt, const char *name) {
    int32_t *ref = malloc((size_t)gp.n_predict * sizeof *ref);
    int32_t *got = malloc((size_t)gp.n_predict * sizeof *got);
    cr_assert(ref && got);
    sd_gen_stats st;
    const int32_t n_ref = run(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompt, n_prompt, ref, &st);
    const int64_t mixed0 = mixed_blocks(e);
    const sd_draft_type types[2] = {SD_DRAFT_NGRAM_LLM, SD_DRAFT_SUFFIX_LLM};
    for (int ti = 0; ti < 2; ti++)
        for (int pol = 0; pol <= 1; pol++)
            for (int32_t k = 2; k <= 8; k++) {
                if (pol == SD_K_ADAPTIVE && k % 4 != 0) continue;
                const int32_t n =
                    run(e, &gp, types[ti], (sd_k_policy)pol, k, prompt, n_prompt, got, &st);
                const char *tn = sd_draft_type_name(types[ti]);
                cr_assert_eq(n, n_ref, "%s %s %s K=%d: %d tokens, target alone %d", name, tn,
                             pol ? "adaptive" : "fixed", k, n, n_ref);
                for (int32_t i = 0; i < n; i++)
                    cr_assert_eq(got[i], ref[i], "%s %s %s K=%d: token %d is %d, alone %d", name,
                                 tn, pol ? "adaptive" : "fixed", k, i, got[i], ref[i]);
            }
    free(ref);
    free(got);
    return mixed_blocks(e) - mixed0;
}

/* Prompts with repeats (the lookups match at once, then run out) and without. */
static const int32_t RPROMPTS[3][12] = {{1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9},
                                        {1, 40, 41, 42, 43, 44, 45, 46, 40, 41, 42, 43},
                                        {1, 90, 3, 77, 90, 3, 60, 61, 90, 3, 77, 90}};

Test(chain_draft, greedy_equals_target_alone_random_pair) {
    sd_engine *e = open_engine(g_t, g_d, 0);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = 64;
    gp.samp.temp = 0.0f;
    int64_t mixed = 0;
    for (int p = 0; p < 3; p++) {
        char name[32];
        snprintf(name, sizeof name, "random prompt %d", p);
        mixed += equal_to_alone(e, gp, RPROMPTS[p], 12, name);
    }
    fprintf(stderr, "  random pair, greedy: %lld mixed blocks\n", (long long)mixed);
    cr_assert_gt(mixed, 0, "no mixed block was drafted: the test proves little");
    sd_engine_free(e);
}

Test(chain_draft, gumbel_equals_target_alone_same_seed) {
    sd_engine *e = open_engine(g_t, g_d, 0);
    int64_t mixed = 0;
    for (uint64_t seed = 1; seed <= 2; seed++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 48;
        gp.samp.temp = 0.9f;
        gp.samp.top_k = 0;
        gp.samp.top_p = 0.95f;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.seed = seed;
        for (int p = 0; p < 3; p++) {
            char name[48];
            snprintf(name, sizeof name, "gumbel seed %llu prompt %d", (unsigned long long)seed, p);
            mixed += equal_to_alone(e, gp, RPROMPTS[p], 12, name);
        }
    }
    fprintf(stderr, "  random pair, Gumbel: %lld mixed blocks\n", (long long)mixed);
    cr_assert_gt(mixed, 0, "no mixed block was drafted: the test proves little");
    sd_engine_free(e);
}

/* Rejection sampling through the engine: the rows of mixed blocks reach verification
 * (a wrong row layout is an error there: q(x) = 0 for a drafted x), every id is valid,
 * and the same seed gives the same text (fixed K). */
Test(chain_draft, rejection_sampling_runs_deterministically) {
    sd_engine *e = open_engine(g_t, g_d, 0);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = 48;
    gp.samp.temp = 0.8f;
    gp.samp.spec = SD_SPEC_REJECTION;
    const int64_t mixed0 = mixed_blocks(e);
    const sd_draft_type types[2] = {SD_DRAFT_NGRAM_LLM, SD_DRAFT_SUFFIX_LLM};
    for (int ti = 0; ti < 2; ti++)
        for (int p = 0; p < 3; p++)
            for (int32_t k = 2; k <= 8; k += 3) {
                int32_t a[48], b[48];
                sd_gen_stats st;
                gp.seed = 10 + (uint64_t)p;
                const int32_t na = run(e, &gp, types[ti], SD_K_FIXED, k, RPROMPTS[p], 12, a, &st);
                const int32_t nb = run(e, &gp, types[ti], SD_K_FIXED, k, RPROMPTS[p], 12, b, &st);
                cr_assert_eq(na, nb);
                cr_assert(memcmp(a, b, (size_t)na * sizeof *a) == 0, "%s K=%d: not deterministic",
                          sd_draft_type_name(types[ti]), k);
                for (int32_t i = 0; i < na; i++)
                    cr_assert(a[i] >= 0 && a[i] < 96);
            }
    fprintf(stderr, "  random pair, rejection: %lld mixed blocks\n",
            (long long)(mixed_blocks(e) - mixed0));
    cr_assert_gt(mixed_blocks(e) - mixed0, 0, "no mixed block was drafted");
    sd_engine_free(e);
}

static int64_t text_equal_to_alone(sd_engine *e, const char *text, int32_t n_predict,
                                   const char *name) {
    const sd_vocab *v = sd_engine_vocab(e);
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, text, strlen(text), 1, &ids, &n, &err), 0, "%s", err.msg);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.samp.temp = 0.0f;
    const int64_t mixed = equal_to_alone(e, gp, ids, (int32_t)n, name);
    free(ids);
    return mixed;
}

Test(chain_draft, greedy_shipped_tinystories_pair) {
    const char *tp = SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf";
    const char *dp = SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf";
    tu_need_path(tp, "the shipped TinyStories pair");
    tu_need_path(dp, "the shipped TinyStories pair");
    sd_engine *e = open_engine(tp, dp, 0);
    int64_t mixed =
        text_equal_to_alone(e,
                            "Lily had a red ball. She liked to play with the red ball in the "
                            "park. One day, Lily",
                            80, "tinystories ball");
    mixed += text_equal_to_alone(e,
                                 "Rewrite the story: Tom saw a big dog. The dog was brown. Tom "
                                 "gave the dog a bone. Story: Tom saw",
                                 80, "tinystories rewrite");
    fprintf(stderr, "  tinystories, greedy: %lld mixed blocks\n", (long long)mixed);
    cr_assert_gt(mixed, 0, "no mixed block was drafted: the test proves little");
    sd_engine_free(e);
}

Test(chain_draft, greedy_smollm2_pair) {
    const char *tp = SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *dp = SD_SOURCE_DIR "/models/smollm2-draft-q8_0.gguf";
    tu_need_path(tp, "SmolLM2-135M (bash scripts/get_models.sh)");
    tu_need_path(dp, "the SmolLM2 draft");
    sd_engine *e = open_engine(tp, dp, 0);
    const int64_t mixed = text_equal_to_alone(
        e,
        "Copy this list and add one item at the end: apples, pears, plums, cherries, grapes, "
        "lemons, limes, oranges. List: apples, pears,",
        40, "smollm2 list");
    fprintf(stderr, "  smollm2, greedy: %lld mixed blocks\n", (long long)mixed);
    cr_assert_gt(mixed, 0, "no mixed block was drafted: the test proves little");
    sd_engine_free(e);
}

/* ------------------------------------------------------------------------------------ */
/* The batcher (serve) drafts the same chained blocks as generate                         */

typedef struct job {
    int32_t toks[128];
    int32_t n;
    int done;
    sd_gen_stats st;
} job;

static int collect(void *user, const sd_req_event *ev) {
    job *j = user;
    for (int32_t i = 0; i < ev->n_tokens && j->n < 128; i++)
        j->toks[j->n++] = ev->tokens[i];
    if (ev->done) {
        j->done = 1;
        j->st = *ev->stats;
    }
    return 0;
}

/* dmax, lmatch: the chain limits (sd_gen_params.chain_draft_max, chain_long_match). */
static void batcher_vs_generate(int32_t dmax, int32_t lmatch) {
    sd_engine *ge = open_engine(g_t, g_d, 0);
    sd_engine *be = open_engine(g_t, g_d, 1);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 3;
    bp.kv_block = 8;
    bp.draft_chunk = 4; /* the prompt's catch-up in chunks, then the chain's tokens */
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(be, &bp, &b, &err), SD_OK, "%s", err.msg);
    const sd_draft_type types[2] = {SD_DRAFT_NGRAM_LLM, SD_DRAFT_SUFFIX_LLM};
    const int64_t mixed0 = mixed_blocks(ge);
    for (int ti = 0; ti < 2; ti++)
        for (int32_t k = 2; k <= 8; k += 2) {
            static job jobs[3];
            if (dmax > 0) k += 2; /* K 4, 8: where the limits bite */
            memset(jobs, 0, sizeof jobs);
            sd_gen_stats ref[3];
            int32_t ref_toks[3][40];
            for (int p = 0; p < 3; p++) {
                sd_gen_params gp = sd_gen_default_params();
                gp.n_predict = 40;
                gp.samp.temp = 0.0f;
                gp.chain_draft_max = dmax;
                gp.chain_long_match = lmatch;
                run(ge, &gp, types[ti], SD_K_FIXED, k, RPROMPTS[p], 12, ref_toks[p], &ref[p]);
                sd_request r;
                memset(&r, 0, sizeof r);
                r.prompt = RPROMPTS[p];
                r.n_prompt = 12;
                r.gen = gp;
                r.n_choices = 1;
                r.cb = collect;
                r.user = &jobs[p];
                cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
            }
            for (int guard = 0; sd_batcher_busy(b); guard++) {
                cr_assert_lt(guard, 10000);
                cr_assert_eq(sd_batcher_step(b, &err), SD_OK, "%s", err.msg);
            }
            for (int p = 0; p < 3; p++) {
                const char *tn = sd_draft_type_name(types[ti]);
                cr_assert(jobs[p].done);
                cr_assert_eq(jobs[p].n, ref[p].n_generated, "%s K=%d prompt %d", tn, k, p);
                cr_assert(memcmp(jobs[p].toks, ref_toks[p], (size_t)jobs[p].n * 4) == 0,
                          "%s K=%d prompt %d: serve's tokens differ from generate's", tn, k, p);
                /* The same blocks: as many drafted and accepted, pass for pass. */
                cr_expect_eq(jobs[p].st.n_target_passes, ref[p].n_target_passes,
                             "%s K=%d prompt %d: passes", tn, k, p);
                cr_expect_eq(jobs[p].st.n_drafted, ref[p].n_drafted, "%s K=%d prompt %d: drafted",
                             tn, k, p);
                cr_expect_eq(jobs[p].st.n_accepted, ref[p].n_accepted,
                             "%s K=%d prompt %d: accepted", tn, k, p);
                cr_expect_eq(jobs[p].st.n_passes_lookup, ref[p].n_passes_lookup,
                             "%s K=%d prompt %d: lookup-only passes", tn, k, p);
            }
        }
    cr_assert_gt(mixed_blocks(ge) - mixed0, 0, "generate drafted no mixed block");
    sd_batcher_free(b);
    sd_engine_free(be);
    sd_engine_free(ge);
}

Test(chain_draft, batcher_drafts_as_generate) {
    batcher_vs_generate(0, 0);
}

Test(chain_draft, batcher_drafts_as_generate_with_limits) {
    batcher_vs_generate(2, 3);
}

/* ------------------------------------------------------------------------------------ */
/* Limits: a long lookup with a short draft-model tail (sd_proposer_chain_set_limits)     */

Test(chain_draft, limits_layout) {
    fake_lookup lk = {{&lookup_ops}, 5, {3, 5, 2, 4, 6}, 0};
    fake_llm lm;
    memset(&lm, 0, sizeof lm);
    lm.base.ops = &llm_ops;
    sd_proposer *chain = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_chain_init(&lk.base, &lm.base, "lookup+llm", &chain, &err), 0);
    cr_assert_eq(sd_proposer_chain_set_limits(chain, 2, 4, &err), 0, "%s", err.msg);
    const int32_t ctx[] = {1, 4, 4, 2};
    sd_proposal prop;

    /* m = 5 >= long_match 4: the lookup alone, all 5 of a block of 12. */
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 12, &prop, &err), 0, "%s", err.msg);
    cr_assert_eq(lm.calls, 0);
    cr_assert_eq(prop.n, 5);
    cr_assert_eq(prop.lookup, 1);

    /* m = 3 < 4: the draft model continues with min(12 - 3, 2) = 2. */
    lk.m = 3;
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 12, &prop, &err), 0);
    cr_assert_eq(lm.calls, 1);
    cr_assert_eq(lm.last_k, 2);
    cr_assert_eq(lm.last_n_ctx, 7);
    const int32_t want[] = {3, 5, 2, 7, 6};
    cr_assert_eq(prop.n, 5);
    cr_assert(memcmp(prop.tokens, want, sizeof want) == 0);
    /* ... and with min(4 - 3, 2) = 1 in a block of 4 */
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 4, &prop, &err), 0);
    cr_assert_eq(lm.last_k, 1);
    cr_assert_eq(prop.n, 4);

    /* No match: the draft model alone, at most 2. */
    lk.m = 0;
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 12, &prop, &err), 0);
    cr_assert_eq(lm.last_k, 2);
    cr_assert_eq(lm.last_n_ctx, 4);
    cr_assert_eq(prop.n, 2);

    /* 0, 0: the block's K again (m = 3 of 12: 9 from the draft model). */
    cr_assert_eq(sd_proposer_chain_set_limits(chain, 0, 0, &err), 0);
    lk.m = 3;
    cr_assert_eq(sd_proposer_propose(chain, ctx, 4, 12, &prop, &err), 0);
    cr_assert_eq(lm.last_k, 9);
    cr_assert_eq(prop.n, 12);

    cr_assert_eq(sd_proposer_chain_set_limits(chain, SD_MAX_DRAFT + 1, 0, &err), SD_ERR_ARG);
    cr_assert_eq(sd_proposer_chain_set_limits(chain, 0, -1, &err), SD_ERR_ARG);
    cr_assert_eq(sd_proposer_chain_set_limits(&lm.base, 2, 2, &err), SD_ERR_ARG, "not a chain");
    sd_proposer_free(chain);
}

/* Greedy and Gumbel output with the limits on equal target alone (K 2..8, fixed and
 * adaptive), and the limits bite: no mixed block carries more than 2 draft-model tokens. */
Test(chain_draft, limits_equal_target_alone) {
    sd_engine *e = open_engine(g_t, g_d, 0);
    const int64_t blocks0 = g_mixed, second0 = g_mixed_second, lookup0 = g_mixed_lookup;
    int64_t mixed = 0;
    for (int mode = 0; mode < 2; mode++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 48;
        gp.chain_draft_max = 2;
        gp.chain_long_match = 3;
        if (mode == 1) {
            gp.samp.temp = 0.9f;
            gp.samp.top_k = 0;
            gp.samp.spec = SD_SPEC_GUMBEL;
            gp.seed = 5;
        } else {
            gp.samp.temp = 0.0f;
        }
        for (int p = 0; p < 3; p++) {
            char name[48];
            snprintf(name, sizeof name, "limits %s prompt %d", mode ? "gumbel" : "greedy", p);
            mixed += equal_to_alone(e, gp, RPROMPTS[p], 12, name);
        }
    }
    const int64_t blocks = g_mixed - blocks0, second = g_mixed_second - second0,
                  lookup = g_mixed_lookup - lookup0;
    fprintf(stderr, "  limits: %lld mixed blocks, %lld lookup and %lld draft-model tokens\n",
            (long long)blocks, (long long)lookup, (long long)second);
    cr_assert_gt(mixed, 0, "no mixed block was drafted: the test proves little");
    cr_assert_leq(second, 2 * blocks, "a mixed block carried more than 2 draft-model tokens");
    cr_assert_leq(lookup, 2 * blocks, "a mixed block carried a lookup of 3 (long) or more");
    sd_engine_free(e);
}

/* The value of "key": N in a JSON text, or -1. */
static long json_long(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(json, pat);
    return at ? strtol(at + strlen(pat), NULL, 10) : -1;
}

/* generate --chain-draft-max / --chain-long-match and the config keys: the tokens of target
 * alone; a draft-model share of 1 drafts fewer tokens than the block's K (the flag and the
 * key alike); bad values are one-line errors naming the flag or key. */
Test(chain_draft, limits_cli_flags_and_keys) {
    char cmd[8192], cfg[2048], json[4096];
    const char *runs[4] = {"--draft-type none", "--draft-type suffix+llm",
                           "--draft-type suffix+llm --chain-draft-max 1 --chain-long-match 16",
                           "CONFIG"};
    tu_path(cfg, sizeof cfg, g_dir, "chain.json");
    snprintf(json, sizeof json,
             "{\"target\": \"%s\", \"draft\": \"%s\", \"draft_type\": \"suffix+llm\", "
             "\"chain_draft_max\": 1, \"chain_long_match\": 16}",
             g_t, g_d);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    char *outs[4];
    for (int i = 0; i < 4; i++) {
        if (i < 3)
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s -md %s -t 1 --no-display-prompt -p t5t9t13t5t9t13t5t9 "
                     "-n 48 --temp 0 -k 8 --draft-policy fixed --draft-p-min 0 --json %s",
                     SD_BINARY, g_t, g_d, runs[i]);
        else
            snprintf(cmd, sizeof cmd,
                     "%s generate --config %s -t 1 --no-display-prompt -p t5t9t13t5t9t13t5t9 -n "
                     "48 --temp 0 -k 8 --draft-policy fixed --draft-p-min 0 --json",
                     SD_BINARY, cfg);
        char *e = NULL;
        cr_assert_eq(tu_run(cmd, &outs[i], &e), 0, "%s: %s", runs[i], e);
        free(e);
        const char *a = strstr(outs[i], "\"tokens\":["), *a0 = strstr(outs[0], "\"tokens\":[");
        cr_assert(a && a0);
        cr_assert_eq(strncmp(a, a0, (size_t)(strchr(a0, ']') - a0)), 0,
                     "%s: tokens differ from target alone", runs[i]);
    }
    const long d_full = json_long(outs[1], "n_drafted"), d_flag = json_long(outs[2], "n_drafted"),
               d_key = json_long(outs[3], "n_drafted");
    const long p_flag = json_long(outs[2], "n_target_passes");
    fprintf(stderr, "  drafted: K 8 %ld, --chain-draft-max 1 %ld (%ld passes), key %ld\n", d_full,
            d_flag, p_flag, d_key);
    cr_assert_gt(d_flag, 0, "the limited chain drafted nothing");
    cr_assert_lt(d_flag, d_full, "--chain-draft-max 1 drafted as much as K 8");
    cr_assert_eq(d_key, d_flag, "the keys chain_draft_max / chain_long_match were not applied");
    for (int i = 0; i < 4; i++)
        free(outs[i]);
    const char *bad[] = {"--chain-draft-max 17", "--chain-draft-max x", "--chain-long-match -1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "generate -m %s -p t5t6 -n 4 %s", g_t, bad[i]);
        tu_expect_cli_error(cmd, bad[i][8] == 'd' ? "--chain-draft-max" : "--chain-long-match");
    }
    snprintf(json, sizeof json, "{\"target\": \"%s\", \"chain_long_match\": 17}", g_t);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    snprintf(cmd, sizeof cmd, "generate --config %s -p t5t6 -n 4", cfg);
    tu_expect_cli_error(cmd, "chain_long_match");
}
