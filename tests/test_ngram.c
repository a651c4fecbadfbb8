/*
 * tests/test_ngram.c: the n-gram / prompt-lookup proposer (draft/ngram.c), the two-
 * proposer chain, one-hot verification (verify/sd_verify_onehot) and greedy equality of
 * every draft type and K policy with the target alone.
 *
 *   - proposals are checked against an independent brute-force reference (a backward
 *     scan of the context, O(N n) per lookup): matches found, the longest n-gram
 *     preferred, the most recent occurrence preferred, the periodic continuation, and
 *     nothing read past the context (sentinels after it never appear);
 *   - rollback: random appends, rollbacks to random prefixes and context switches,
 *     each followed by a proposal that must equal the reference's (this also drives the
 *     index's table rebuild);
 *   - one-hot verification: the emitted tokens follow p (chi-square, false-alarm rate
 *     1e-4 per test), acceptance is p(x), and it is token for token sd_verify_sample
 *     with explicit one-hot q rows; negative controls (resample from p on rejection;
 *     always accept) must fail the same test;
 *   - greedy: n-gram, ngram+llm and the LLM draft, fixed K = 1..8 and adaptive, equal
 *     target-alone output on random pairs and on the shipped TinyStories pair.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "verify/sd_verify.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(ngram, .init = setup, .fini = teardown, .timeout = 600);
TestSuite(onehot, .timeout = 600);
TestSuite(ngram_greedy, .init = setup, .fini = teardown, .timeout = 900);

/* ------------------------------------------------------------------------------------ */
/* Reference lookup                                                                      */

/*
 * Brute force: for n = n_max down to n_min (n <= N - 1 so an earlier occurrence can
 * exist), scan j = N - 1 down to n for t[j - n .. j) == t[N - n .. N); the first hit is
 * the most recent occurrence of the longest n-gram. The proposal is the sequence
 * e = t extended periodically (e[m] = e[m - (N - j)] for m >= N), e[j .. j + k).
 * Returns the match length (0: none) and writes k tokens.
 */
static int32_t ref_lookup(const int32_t *t, int32_t N, int32_t n_min, int32_t n_max, int32_t k,
                          int32_t *out) {
    for (int32_t n = n_max; n >= n_min; n--) {
        if (n > N - 1) continue;
        for (int32_t j = N - 1; j >= n; j--) {
            int eq = 1;
            for (int32_t i = 0; i < n && eq; i++)
                eq = t[j - n + i] == t[N - n + i];
            if (!eq) continue;
            int32_t *e = malloc((size_t)(N + k) * sizeof *e);
            cr_assert(e);
            memcpy(e, t, (size_t)N * sizeof *e);
            for (int32_t m = N; m < N + k; m++)
                e[m] = e[m - (N - j)];
            memcpy(out, e + j, (size_t)k * sizeof *out);
            free(e);
            return n;
        }
    }
    return 0;
}

static sd_proposer *make_ngram(int32_t n_min, int32_t n_max, int32_t n_ctx) {
    sd_ngram_params p = sd_ngram_default_params();
    p.n_min = n_min;
    p.n_max = n_max;
    p.n_ctx = n_ctx;
    sd_proposer *prop = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_ngram_init(&p, 1000, &prop, &err), 0, "%s", err.msg);
    return prop;
}

/* Propose with k and compare with the reference (tokens and match length). */
static void expect_ref(sd_proposer *p, const int32_t *t, int32_t n, int32_t n_min, int32_t n_max,
                       int32_t k, const char *what) {
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose(p, t, n, k, &prop, &err), 0, "%s", err.msg);
    int32_t want[SD_MAX_DRAFT];
    const int32_t m = ref_lookup(t, n, n_min, n_max, k, want);
    cr_assert_eq(sd_proposer_ngram_last_match(p), m, "%s: match length %d, reference %d", what,
                 sd_proposer_ngram_last_match(p), m);
    cr_assert_eq(prop.n, m ? k : 0, "%s: %d tokens proposed, reference %d", what, prop.n,
                 m ? k : 0);
    cr_assert(prop.one_hot && prop.probs == NULL, "%s: n-gram proposals are one-hot", what);
    for (int32_t i = 0; i < prop.n; i++)
        cr_assert_eq(prop.tokens[i], want[i], "%s: token %d is %d, reference %d", what, i,
                     prop.tokens[i], want[i]);
}

/* ------------------------------------------------------------------------------------ */
/* Proposer                                                                              */

Test(ngram, match_found_and_followed) {
    sd_proposer *p = make_ngram(1, 4, 64);
    /* ... 5 6 7 [8 9] ... 5 6 7 -> 8 9 5 6 */
    const int32_t t[] = {1, 5, 6, 7, 8, 9, 2, 3, 5, 6, 7};
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose(p, t, 11, 4, &prop, &err), 0, "%s", err.msg);
    cr_assert_eq(prop.n, 4);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 3);
    const int32_t want[] = {8, 9, 2, 3};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(prop.tokens[i], want[i], "token %d: %d, want %d", i, prop.tokens[i], want[i]);
    expect_ref(p, t, 11, 1, 4, 4, "match");
    /* No repeated token at all: no proposal. */
    const int32_t u[] = {1, 2, 3, 4, 5};
    cr_assert_eq(sd_proposer_propose(p, u, 5, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 0);
    sd_proposer_free(p);
}

Test(ngram, longest_match_preferred) {
    /* Last 1-gram "20" occurs most recently before 31; the last 2-gram "10 20" only
     * before 30: n_max >= 2 proposes 30, n_max = 1 proposes 31. */
    const int32_t t[] = {10, 20, 30, 11, 20, 31, 12, 10, 20};
    sd_proposal prop;
    sd_error err = {0};
    sd_proposer *p = make_ngram(1, 4, 64);
    cr_assert_eq(sd_proposer_propose(p, t, 9, 1, &prop, &err), 0);
    cr_assert_eq(prop.n, 1);
    cr_assert_eq(prop.tokens[0], 30);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 2);
    sd_proposer_free(p);
    p = make_ngram(1, 1, 64);
    cr_assert_eq(sd_proposer_propose(p, t, 9, 1, &prop, &err), 0);
    cr_assert_eq(prop.tokens[0], 31);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 1);
    sd_proposer_free(p);
    /* n_min = 3: the 2-gram is too short, no proposal. */
    p = make_ngram(3, 4, 64);
    cr_assert_eq(sd_proposer_propose(p, t, 9, 1, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    sd_proposer_free(p);
}

Test(ngram, most_recent_occurrence_preferred) {
    const int32_t t[] = {10, 20, 30, 10, 20, 31, 10, 20, 32, 4, 10, 20};
    sd_proposal prop;
    sd_error err = {0};
    sd_proposer *p = make_ngram(2, 2, 64);
    cr_assert_eq(sd_proposer_propose(p, t, 12, 2, &prop, &err), 0);
    cr_assert_eq(prop.n, 2);
    cr_assert_eq(prop.tokens[0], 32);
    cr_assert_eq(prop.tokens[1], 4);
    /* Growing the context one token at a time keeps the newest occurrence. */
    for (int32_t n = 3; n <= 12; n++)
        expect_ref(p, t, n, 2, 2, 3, "growing");
    sd_proposer_free(p);
}

Test(ngram, no_proposal_past_the_context) {
    /* The buffer continues past n_ctx with sentinels that must never be proposed. */
    int32_t buf[32];
    for (int i = 0; i < 32; i++)
        buf[i] = 999;
    const int32_t t[] = {1, 2, 3, 1, 2};
    memcpy(buf, t, sizeof t);
    sd_proposer *p = make_ngram(1, 4, 64);
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose(p, buf, 5, 6, &prop, &err), 0);
    /* "1 2" -> 3 1 2, then the period 3 repeats: 3 1 2 3 1 2. */
    const int32_t want[] = {3, 1, 2, 3, 1, 2};
    cr_assert_eq(prop.n, 6);
    for (int i = 0; i < 6; i++) {
        cr_assert_neq(prop.tokens[i], 999, "token %d read past the context", i);
        cr_assert_eq(prop.tokens[i], want[i]);
    }
    /* A run of one token: the continuation repeats it. */
    const int32_t r[] = {4, 7, 7, 7};
    memcpy(buf, r, sizeof r);
    cr_assert_eq(sd_proposer_propose(p, buf, 4, 5, &prop, &err), 0);
    cr_assert_eq(prop.n, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(prop.tokens[i], 7);
    /* One token of context: nothing earlier to match. */
    cr_assert_eq(sd_proposer_propose(p, buf, 1, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    /* A context beyond the proposer's capacity: no proposal, no read beyond it. */
    sd_proposer *small = make_ngram(1, 4, 8);
    int32_t big[16];
    for (int i = 0; i < 16; i++)
        big[i] = i % 3;
    cr_assert_eq(sd_proposer_propose(small, big, 16, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    cr_assert_eq(sd_proposer_propose(small, big, 8, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 4);
    sd_proposer_free(small);
    sd_proposer_free(p);
}

/* A tiny xorshift for the random sequences (the test's own, not the library's RNG). */
static uint32_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 11);
}

/* Random appends, rollbacks (commit with a shorter or diverging context) and context
 * switches; after each, the proposal equals the reference's. A small capacity and a
 * large alphabet make dead keys pile up, so the table is rebuilt many times. */
static void rollback_run(int32_t n_min, int32_t n_max, int32_t alphabet, int32_t cap, uint64_t seed,
                         int steps) {
    sd_proposer *p = make_ngram(n_min, n_max, cap);
    int32_t *t = malloc((size_t)cap * sizeof *t);
    cr_assert(t);
    int32_t n = 1;
    t[0] = 1;
    uint64_t s = seed;
    for (int step = 0; step < steps; step++) {
        const uint32_t op = rnd(&s) % 10;
        if (op < 6) { /* append 1..6 tokens (a verification step) */
            const int32_t m = 1 + (int32_t)(rnd(&s) % 6);
            for (int32_t i = 0; i < m && n < cap; i++)
                t[n++] = (int32_t)(rnd(&s) % (uint32_t)alphabet);
        } else if (op < 9) { /* roll back to a random prefix, then diverge */
            n = 1 + (int32_t)(rnd(&s) % (uint32_t)n);
            if (n < cap && rnd(&s) % 2) t[n++] = alphabet + (int32_t)(rnd(&s) % 5);
        } else { /* a new context sharing only the first token */
            n = 1 + (int32_t)(rnd(&s) % (uint32_t)(cap / 2));
            for (int32_t i = 1; i < n; i++)
                t[i] = (int32_t)(rnd(&s) % (uint32_t)alphabet);
        }
        if (rnd(&s) % 2) sd_proposer_commit(p, t, n);
        char what[64];
        snprintf(what, sizeof what, "seed %llu step %d (n = %d)", (unsigned long long)seed, step,
                 n);
        expect_ref(p, t, n, n_min, n_max, 1 + (int32_t)(rnd(&s) % SD_MAX_DRAFT), what);
    }
    free(t);
    sd_proposer_free(p);
}

Test(ngram, rollback_matches_a_fresh_index) {
    rollback_run(1, 4, 4, 256, 11, 3000);  /* many matches, long ones */
    rollback_run(2, 3, 12, 128, 12, 3000); /* fewer */
    rollback_run(1, 16, 3, 96, 13, 2000);  /* the largest n */
    rollback_run(1, 2, 400, 48, 14, 4000); /* mostly new keys: rebuilds */
}

Test(ngram, parameters_checked) {
    const struct {
        int32_t n_min, n_max, n_ctx;
        const char *word;
    } bad[] = {{0, 4, 64, "n_min"}, {1, 0, 64, "n_max"},   {1, 17, 64, "n_max"},
               {5, 4, 64, "n_min"}, {17, 17, 64, "n_max"}, {1, 4, 0, "n_ctx"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sd_ngram_params p = {bad[i].n_min, bad[i].n_max, bad[i].n_ctx};
        sd_error err = {0};
        sd_proposer *prop = (sd_proposer *)&err; /* must be reset to NULL */
        cr_assert_eq(sd_proposer_ngram_init(&p, 100, &prop, &err), SD_ERR_ARG,
                     "n_min %d n_max %d n_ctx %d accepted", bad[i].n_min, bad[i].n_max,
                     bad[i].n_ctx);
        cr_assert_null(prop);
        cr_assert(strstr(err.msg, bad[i].word), "'%s' does not name %s", err.msg, bad[i].word);
    }
}

/* The chain asks the n-gram first and the second proposer only when it has no match. */
typedef struct fixed_proposer {
    sd_proposer base;
    int calls, commits;
} fixed_proposer;

static int fixed_propose(sd_proposer *b, const int32_t *ctx, int32_t n_ctx, int32_t k,
                         sd_proposal *out, sd_error *err) {
    (void)ctx;
    (void)n_ctx;
    (void)err;
    fixed_proposer *f = (fixed_proposer *)b;
    f->calls++;
    for (int32_t i = 0; i < k; i++)
        out->tokens[i] = 77;
    out->n = k;
    out->n_vocab = 1000;
    out->one_hot = 1;
    return SD_OK;
}
static void fixed_commit(sd_proposer *b, const int32_t *ctx, int32_t n_ctx) {
    (void)ctx;
    (void)n_ctx;
    ((fixed_proposer *)b)->commits++;
}
static void fixed_free(sd_proposer *b) {
    (void)b;
}
static const sd_proposer_ops fixed_ops = {
    .name = "fixed", .propose = fixed_propose, .commit = fixed_commit, .free = fixed_free};

Test(ngram, chain_falls_back_when_no_match) {
    sd_proposer *ng = make_ngram(1, 4, 64);
    fixed_proposer f = {{&fixed_ops}, 0, 0};
    sd_proposer *chain = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_chain_init(ng, &f.base, "ngram+fixed", &chain, &err), 0, "%s",
                 err.msg);
    cr_assert_str_eq(sd_proposer_name(chain), "ngram+fixed");
    const int32_t t[] = {1, 2, 3, 1, 2};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(chain, t, 5, 2, &prop, &err), 0);
    cr_assert_eq(prop.tokens[0], 3); /* the n-gram's */
    cr_assert_eq(f.calls, 0);
    cr_assert_eq(sd_proposer_propose(chain, t, 3, 2, &prop, &err), 0); /* 1 2 3: no match */
    cr_assert_eq(prop.tokens[0], 77);
    cr_assert_eq(f.calls, 1);
    sd_proposer_commit(chain, t, 4);
    cr_assert_eq(f.commits, 1);
    sd_proposer_free(chain);
    cr_assert_eq(sd_proposer_chain_init(ng, NULL, "x", &chain, &err), SD_ERR_ARG);
    sd_proposer_free(chain); /* NULL after the failed init */
    sd_proposer_free(ng);
}

/* ------------------------------------------------------------------------------------ */
/* One-hot verification                                                                  */

#define V8       8
#define N_TRIALS 200000L

/* Upper critical values of chi-square at false-alarm rate 1e-4 by degrees of freedom
 * (scipy.stats.chi2.isf(1e-4, df); as in tests/test_verify.c). */
static const double CHI2_CRIT_1E4[8] = {
    0.0, 15.1367, 18.4207, 21.1075, 23.5127, 25.7448, 27.8563, 29.8775,
};

/* Pearson chi-square of counts against p; p == 0 must have count 0. */
static double chi_square(const long *counts, const float *p, long n, int *df) {
    double stat = 0.0, psum = 0.0;
    int support = 0;
    for (int i = 0; i < V8; i++)
        psum += p[i];
    for (int i = 0; i < V8; i++) {
        if (p[i] == 0.0f) {
            cr_assert_eq(counts[i], 0, "token %d has p = 0 but was emitted %ld times", i,
                         counts[i]);
            continue;
        }
        support++;
        const double e = (double)n * p[i] / psum, d = (double)counts[i] - e;
        stat += d * d / e;
    }
    *df = support - 1;
    return stat;
}

static const float P_ROWS[3][V8] = {
    {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.08f, 0.05f, 0.02f},
    {0.05f, 0.05f, 0.50f, 0.10f, 0.10f, 0.05f, 0.10f, 0.05f},
    {0.10f, 0.0f, 0.30f, 0.0f, 0.20f, 0.15f, 0.25f, 0.0f},
};

typedef enum { REAL, BUG_RESAMPLE_FROM_P, BUG_ALWAYS_ACCEPT } onehot_impl;

static void verify_once(onehot_impl impl, const int32_t *draft, int k, const float *p, sd_rng *rng,
                        sd_verify_result *res) {
    if (impl == REAL) {
        sd_error err = {0};
        cr_assert_eq(sd_verify_onehot(draft, k, p, V8, rng, res, &err), 0, "%s", err.msg);
        return;
    }
    res->n_accepted = 0;
    for (int i = 0; i < k; i++) {
        const double u = sd_rng_uniform(rng);
        if (impl == BUG_ALWAYS_ACCEPT || u < p[i * V8 + draft[i]]) {
            res->tokens[res->n_accepted++] = draft[i];
            continue;
        }
        res->tokens[res->n_accepted] = sd_sample(p + i * V8, V8, sd_rng_uniform(rng));
        res->n_tokens = res->n_accepted + 1;
        return;
    }
    res->tokens[k] = sd_sample(p + k * V8, V8, sd_rng_uniform(rng));
    res->n_tokens = k + 1;
}

/* N_TRIALS steps drafting `draft` (fixed tokens: q is one-hot) against rows p of
 * P_ROWS[row_of[j]]; returns the worst chi2 / critical ratio over the emitted positions
 * with enough samples, and the acceptance rate of position 0 in *acc0. */
static double onehot_trial(onehot_impl impl, const int32_t *draft, int k, const int *row_of,
                           uint64_t seed, double *acc0, int expect_pass) {
    float p[(SD_MAX_DRAFT + 1) * V8];
    for (int j = 0; j <= k; j++)
        memcpy(p + j * V8, P_ROWS[row_of[j]], sizeof P_ROWS[0]);
    static long counts[SD_MAX_DRAFT + 1][V8];
    long n_pos[SD_MAX_DRAFT + 1] = {0};
    memset(counts, 0, sizeof counts);
    long acc_first = 0;
    sd_rng rng;
    sd_rng_seed(&rng, seed);
    for (long t = 0; t < N_TRIALS; t++) {
        sd_verify_result res;
        verify_once(impl, draft, k, p, &rng, &res);
        cr_assert_eq(res.n_tokens, res.n_accepted + 1);
        acc_first += res.n_accepted > 0;
        for (int j = 0; j < res.n_tokens; j++) {
            if (j < res.n_accepted) cr_assert_eq(res.tokens[j], draft[j]);
            counts[j][res.tokens[j]]++;
            n_pos[j]++;
        }
    }
    *acc0 = (double)acc_first / N_TRIALS;
    double worst = 0.0;
    for (int j = 0; j <= k; j++) {
        if (n_pos[j] < 20000) continue;
        int df;
        const double stat = chi_square(counts[j], p + j * V8, n_pos[j], &df);
        fprintf(stderr, "  one-hot chi2 k=%d position %d: n=%ld df=%d stat=%.2f crit=%.2f\n", k, j,
                n_pos[j], df, stat, CHI2_CRIT_1E4[df]);
        if (expect_pass)
            cr_expect(stat < CHI2_CRIT_1E4[df], "k=%d position %d: chi2 %.2f >= %.2f", k, j, stat,
                      CHI2_CRIT_1E4[df]);
        if (stat / CHI2_CRIT_1E4[df] > worst) worst = stat / CHI2_CRIT_1E4[df];
    }
    return worst;
}

Test(onehot, emitted_tokens_follow_p) {
    /* k = 1 with a likely, an unlikely and an impossible (p = 0) draft token. */
    const int32_t drafts[] = {0, 7, 1};
    const int drows[] = {0, 0, 2};
    for (int d = 0; d < 3; d++) {
        const int rows[] = {drows[d], 1};
        double acc;
        onehot_trial(REAL, &drafts[d], 1, rows, 100 + (uint64_t)d, &acc, 1);
        const double px = P_ROWS[drows[d]][drafts[d]];
        /* Binomial sd <= sqrt(0.25 / 2e5) = 0.0011; 5 sd. */
        cr_assert(fabs(acc - px) < 0.0056, "draft %d: acceptance %.4f, expected p(x) = %.3f",
                  drafts[d], acc, px);
    }
    /* k = 3, different rows per position. */
    const int32_t draft3[] = {2, 2, 4};
    const int rows3[] = {1, 1, 2, 0};
    double acc;
    onehot_trial(REAL, draft3, 3, rows3, 7, &acc, 1);
}

Test(onehot, negative_controls_fail) {
    const int32_t draft[] = {0};
    const int rows[] = {0, 0};
    double acc;
    double worst = onehot_trial(BUG_RESAMPLE_FROM_P, draft, 1, rows, 5, &acc, 0);
    cr_assert(worst > 1.0, "resampling from p on rejection passed the test (ratio %.2f)", worst);
    worst = onehot_trial(BUG_ALWAYS_ACCEPT, draft, 1, rows, 6, &acc, 0);
    cr_assert(worst > 1.0, "always accepting passed the test (ratio %.2f)", worst);
}

/* sd_verify_onehot is speculative sampling with q = delta_x: the same tokens as
 * sd_verify_sample given explicit one-hot rows and the same RNG stream. */
Test(onehot, equals_general_sampler_with_one_hot_rows) {
    enum { V = 50 };
    sd_rng g;
    sd_rng_seed(&g, 99);
    float p[(SD_MAX_DRAFT + 1) * V], q[SD_MAX_DRAFT * V], scratch[V];
    for (int trial = 0; trial < 20000; trial++) {
        const int k = trial % (SD_MAX_DRAFT + 1);
        for (int j = 0; j <= k; j++) {
            double sum = 0.0;
            for (int v = 0; v < V; v++) {
                const double u = sd_rng_uniform(&g);
                p[j * V + v] = (v % 7 == 3 && trial % 3 == 0) ? 0.0f : (float)(u * u * u);
                sum += p[j * V + v];
            }
            for (int v = 0; v < V; v++)
                p[j * V + v] = (float)(p[j * V + v] / sum);
        }
        int32_t draft[SD_MAX_DRAFT];
        memset(q, 0, sizeof q);
        for (int i = 0; i < k; i++) {
            draft[i] = (int32_t)(sd_rng_next_u64(&g) % V);
            q[i * V + draft[i]] = 1.0f;
        }
        sd_rng r1, r2;
        sd_rng_seed(&r1, (uint64_t)trial);
        sd_rng_seed(&r2, (uint64_t)trial);
        sd_verify_result a, b;
        sd_error err = {0};
        cr_assert_eq(sd_verify_onehot(draft, k, p, V, &r1, &a, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_verify_sample(draft, k, q, p, V, &r2, scratch, &b, &err), 0, "%s", err.msg);
        cr_assert_eq(a.n_tokens, b.n_tokens, "trial %d", trial);
        cr_assert_eq(a.n_accepted, b.n_accepted, "trial %d", trial);
        for (int i = 0; i < a.n_tokens; i++)
            cr_assert_eq(a.tokens[i], b.tokens[i], "trial %d token %d", trial, i);
        cr_assert_eq(sd_rng_next_u64(&r1), sd_rng_next_u64(&r2), "trial %d: draws differ", trial);
    }
}

Test(onehot, bad_arguments) {
    float p[2 * V8];
    memcpy(p, P_ROWS[0], sizeof P_ROWS[0]);
    memcpy(p + V8, P_ROWS[0], sizeof P_ROWS[0]);
    sd_rng rng;
    sd_rng_seed(&rng, 1);
    sd_verify_result res;
    sd_error err = {0};
    const int32_t bad_id[] = {8};
    cr_assert_eq(sd_verify_onehot(bad_id, 1, p, V8, &rng, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "draft[0]"), "%s", err.msg);
    const int32_t ok[] = {1};
    cr_assert_eq(sd_verify_onehot(ok, SD_MAX_DRAFT + 1, p, V8, &rng, &res, &err), SD_ERR_ARG);
    cr_assert_eq(sd_verify_onehot(ok, 1, NULL, V8, &rng, &res, &err), SD_ERR_ARG);
    float zero[2 * V8] = {0};
    cr_assert_eq(sd_verify_onehot(ok, 1, zero, V8, &rng, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "no positive entry"), "%s", err.msg);
}

/* ------------------------------------------------------------------------------------ */
/* Greedy equality                                                                       */

typedef struct gen_pair {
    sd_model *tm, *dm;
    sd_scorer *scorer;
    sd_proposer *llm, *ngram, *chain;
} gen_pair;

static void gen_pair_open(gen_pair *g, const char *target, const char *draft) {
    memset(g, 0, sizeof *g);
    sd_error err = {0};
    cr_assert_eq(sd_model_load(target, &g->tm, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_model_load(draft, &g->dm, &err), 0, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = 1;
    sd_sampling_params samp = sd_sampling_default_params();
    samp.temp = 0.0f;
    const int32_t n_vocab = sd_model_hparams(g->tm)->n_vocab;
    cr_assert_eq(sd_scorer_init(g->tm, &sp, &g->scorer, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_proposer_llm_init(g->dm, &sp, &samp, 3, n_vocab, &g->llm, &err), 0, "%s",
                 err.msg);
    sd_ngram_params np = sd_ngram_default_params();
    np.n_ctx = sd_scorer_n_ctx(g->scorer) + 1;
    cr_assert_eq(sd_proposer_ngram_init(&np, n_vocab, &g->ngram, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_proposer_chain_init(g->ngram, g->llm, "ngram+llm", &g->chain, &err), 0, "%s",
                 err.msg);
}

static void gen_pair_close(gen_pair *g) {
    sd_proposer_free(g->chain);
    sd_proposer_free(g->ngram);
    sd_proposer_free(g->llm);
    sd_scorer_free(g->scorer);
    sd_model_free(g->dm);
    sd_model_free(g->tm);
}

static int32_t gen(gen_pair *g, sd_proposer *prop, sd_k_policy pol, int32_t k, float p_min,
                   const int32_t *prompt, int32_t n_prompt, int32_t eos, int32_t n_predict,
                   int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = k;
    gp.samp.temp = 0.0f;
    gp.k_policy = pol;
    if (prop) sd_proposer_set_cutoff(prop, p_min, 1);
    sd_error err = {0};
    cr_assert_eq(sd_generate(g->scorer, prop, prompt, n_prompt, eos, &gp, NULL, NULL, out,
                             n_predict, st, &err),
                 0, "%s", err.msg);
    return st->n_generated;
}

/* Every draft type, K = 1..8 fixed and adaptive (K <= 8), with and without the
 * confidence cut-off: the tokens of target alone. Returns the n-gram acceptance. */
static double greedy_all(gen_pair *g, const int32_t *prompt, int32_t n_prompt, int32_t eos,
                         int32_t n_predict, const char *name) {
    int32_t *ref = malloc((size_t)n_predict * sizeof *ref);
    int32_t *got = malloc((size_t)n_predict * sizeof *got);
    cr_assert(ref && got);
    sd_gen_stats st;
    const int32_t n_ref =
        gen(g, NULL, SD_K_FIXED, 0, 0, prompt, n_prompt, eos, n_predict, ref, &st);
    sd_proposer *props[] = {g->ngram, g->chain, g->llm};
    const char *names[] = {"ngram", "ngram+llm", "llm"};
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int pol = 0; pol <= 1; pol++)
            for (int32_t k = 1; k <= 8; k++)
                for (int cut = 0; cut <= 1; cut++) {
                    if (pol == SD_K_ADAPTIVE && k % 4 != 0) continue; /* k_max 4, 8 */
                    const int32_t n = gen(g, props[pi], (sd_k_policy)pol, k, cut ? 0.6f : 0.0f,
                                          prompt, n_prompt, eos, n_predict, got, &st);
                    cr_assert_eq(n, n_ref, "%s %s %s K=%d p-min %d: %d tokens, target alone %d",
                                 name, names[pi], pol ? "adaptive" : "fixed", k, cut, n, n_ref);
                    for (int32_t i = 0; i < n; i++)
                        cr_assert_eq(got[i], ref[i],
                                     "%s %s %s K=%d p-min %d: token %d is %d, target alone %d",
                                     name, names[pi], pol ? "adaptive" : "fixed", k, cut, i, got[i],
                                     ref[i]);
                    int64_t h = 0;
                    for (int32_t j = 0; j <= SD_MAX_DRAFT; j++)
                        h += st.k_hist[j];
                    cr_assert_eq(h, st.n_target_passes, "K histogram covers every pass");
                    if (pi == 0) {
                        cr_assert_eq(st.n_drafted_lookup, st.n_drafted);
                        cr_assert_eq(st.n_accepted_lookup, st.n_accepted);
                        drafted += st.n_drafted;
                        accepted += st.n_accepted;
                    }
                }
    free(ref);
    free(got);
    return drafted ? (double)accepted / drafted : 0.0;
}

Test(ngram_greedy, random_pairs) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    gen_pair g;
    gen_pair_open(&g, t, d);
    /* Prompts with repeats (the lookup finds matches at once) and without. */
    const int32_t prompts[3][12] = {{1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9},
                                    {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50},
                                    {1, 90, 3, 77, 90, 3, 60, 61, 90, 3, 77, 90}};
    double acc = 0.0;
    for (int pi = 0; pi < 3; pi++) {
        char name[32];
        snprintf(name, sizeof name, "prompt %d", pi);
        acc += greedy_all(&g, prompts[pi], 12, -1, 64, name);
    }
    fprintf(stderr, "  random pair: n-gram greedy acceptance %.3f (mean of 3 prompts)\n", acc / 3);
    cr_assert_gt(acc, 0.0, "the n-gram never had an accepted token: the test proves little");
    gen_pair_close(&g);
}

Test(ngram_greedy, shipped_tinystories_pair) {
    const char *tp = SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf";
    const char *dp = SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf";
    tu_need_path(tp, "the shipped TinyStories pair");
    tu_need_path(dp, "the shipped TinyStories pair");
    gen_pair g;
    gen_pair_open(&g, tp, dp);
    const sd_vocab *vocab = sd_model_vocab(g.tm);
    const char *texts[] = {
        "Once upon a time",
        "Lily had a red ball. She liked to play with the red ball in the park. One day, Lily",
        "Rewrite the story: Tom saw a big dog. The dog was brown. Tom gave the dog a bone. "
        "Story: Tom saw",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(vocab, texts[i], strlen(texts[i]), 1, &ids, &n, &err), 0,
                     "%s", err.msg);
        char name[64];
        snprintf(name, sizeof name, "'%.20s...'", texts[i]);
        const double acc = greedy_all(&g, ids, (int32_t)n, sd_vocab_eos(vocab), 96, name);
        fprintf(stderr, "  tinystories %s: n-gram greedy acceptance %.3f\n", name, acc);
        free(ids);
    }
    gen_pair_close(&g);
}

/* Sampling with one-hot proposals runs and emits valid ids (exactness is the chi-square
 * test above; this drives the loop's sd_verify_onehot path). */
Test(ngram_greedy, sampled_generation_with_lookup) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    gen_pair g;
    gen_pair_open(&g, t, d);
    const int32_t prompt[] = {1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9};
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = 64;
    gp.n_draft = 4;
    gp.samp.temp = 0.7f;
    int32_t out[64];
    sd_gen_stats st;
    sd_error err = {0};
    for (int pol = 0; pol <= 1; pol++) {
        gp.k_policy = (sd_k_policy)pol;
        cr_assert_eq(
            sd_generate(g.scorer, g.ngram, prompt, 12, -1, &gp, NULL, NULL, out, 64, &st, &err), 0,
            "%s", err.msg);
        cr_assert_eq(st.n_generated, 64);
        for (int i = 0; i < 64; i++)
            cr_assert(out[i] >= 0 && out[i] < 96);
    }
    gen_pair_close(&g);
}

/* ------------------------------------------------------------------------------------ */
/* Lookup cache                                                                          */

static sd_ngram_cache *new_cache(uint64_t fp, int32_t n_vocab) {
    sd_ngram_params np = sd_ngram_default_params();
    np.n_min = 1; /* as make_ngram(1, 4, ...) */
    np.n_max = 4;
    sd_ngram_cache *c = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_init(fp, n_vocab, &np, 0, &c, &err), 0, "%s", err.msg);
    return c;
}

static int load_cache(const char *path, uint64_t fp, int32_t n_vocab, sd_ngram_cache **c,
                      sd_error *err) {
    sd_ngram_params np = sd_ngram_default_params();
    np.n_min = 1;
    np.n_max = 4;
    return sd_ngram_cache_load(path, fp, n_vocab, &np, 0, c, err);
}

Test(ngram, lookup_cache_round_trip_and_proposals) {
    char path[2048];
    tu_path(path, sizeof path, g_dir, "cache.bin");
    sd_ngram_cache *c = new_cache(0x1234, 100);
    const int32_t doc1[] = {1, 10, 11, 12, 13, 14, 15};
    const int32_t doc2[] = {1, 20, 21, 22, 23};
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_add(c, doc1, 7, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_ngram_cache_add(c, doc2, 5, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_ngram_cache_save(c, path, &err), 0, "%s", err.msg);
    cr_assert_eq(tu_count_files(g_dir), 1, "a temporary file was left behind");
    sd_ngram_cache_free(c);
    c = NULL;
    cr_assert_eq(load_cache(path, 0x1234, 100, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_ngram_cache_n_docs(c), 2);
    cr_assert_eq(sd_ngram_cache_n_tokens(c), 12);
    /* A context with no match of its own finds "11 12" in the cache: 13 14 15, then the
     * document ends (no token of the next document follows). */
    sd_proposer *p = make_ngram(1, 4, 64);
    cr_assert_eq(sd_proposer_ngram_set_cache(p, c, &err), 0, "%s", err.msg);
    const int32_t ctx[] = {1, 50, 11, 12};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(p, ctx, 4, 6, &prop, &err), 0);
    cr_assert_eq(prop.n, 3, "cache continuation: %d tokens, expected 3", prop.n);
    cr_assert_eq(prop.tokens[0], 13);
    cr_assert_eq(prop.tokens[2], 15);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 2);
    /* The context's own match wins over the cache's. */
    const int32_t ctx2[] = {1, 11, 40, 2, 11};
    cr_assert_eq(sd_proposer_propose(p, ctx2, 5, 1, &prop, &err), 0);
    cr_assert_eq(prop.tokens[0], 40);
    /* Sizes must agree. */
    sd_proposer *p2 = make_ngram(2, 3, 64);
    cr_assert_eq(sd_proposer_ngram_set_cache(p2, c, &err), SD_ERR_ARG);
    sd_proposer_free(p2);
    sd_proposer_free(p);
    sd_ngram_cache_free(c);
}

Test(ngram, lookup_cache_keeps_the_newest_documents) {
    sd_ngram_params np = sd_ngram_default_params();
    sd_ngram_cache *c = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_init(7, 100, &np, 10, &c, &err), 0, "%s", err.msg);
    const int32_t a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8}, d[] = {9, 10, 11};
    cr_assert_eq(sd_ngram_cache_add(c, a, 4, &err), 0);
    cr_assert_eq(sd_ngram_cache_add(c, b, 4, &err), 0);
    cr_assert_eq(sd_ngram_cache_add(c, d, 3, &err), 0); /* 11 > 10: a goes */
    cr_assert_eq(sd_ngram_cache_n_docs(c), 2);
    cr_assert_eq(sd_ngram_cache_n_tokens(c), 7);
    const int32_t bad[] = {1, 100};
    cr_assert_eq(sd_ngram_cache_add(c, bad, 2, &err), SD_ERR_ARG);
    cr_assert_eq(sd_ngram_cache_n_tokens(c), 7, "a rejected document changed the cache");
    sd_ngram_cache_free(c);
}

/* Loading into a smaller cache keeps exactly what adding the documents one by one would
 * (the newest that fit, the newest alone cut to its tail), with the same proposals. */
Test(ngram, lookup_cache_load_keeps_what_adding_keeps) {
    char path[2048];
    tu_path(path, sizeof path, g_dir, "docs.bin");
    sd_ngram_params np = sd_ngram_default_params();
    np.n_min = 1;
    np.n_max = 4;
    sd_error err = {0};
    sd_ngram_cache *all = new_cache(9, 100);
    int32_t docs[5][7];
    const int32_t lens[5] = {3, 5, 2, 7, 4};
    for (int d = 0; d < 5; d++) {
        for (int i = 0; i < lens[d]; i++)
            docs[d][i] = 1 + (d * 7 + i * 3) % 97;
        cr_assert_eq(sd_ngram_cache_add(all, docs[d], lens[d], &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sd_ngram_cache_save(all, path, &err), 0, "%s", err.msg);
    sd_ngram_cache_free(all);
    const int64_t caps[] = {3, 4, 6, 11, 12, 13, 21, 100};
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        sd_ngram_cache *one = NULL, *loaded = NULL;
        cr_assert_eq(sd_ngram_cache_init(9, 100, &np, caps[k], &one, &err), 0, "%s", err.msg);
        for (int d = 0; d < 5; d++)
            cr_assert_eq(sd_ngram_cache_add(one, docs[d], lens[d], &err), 0, "%s", err.msg);
        cr_assert_eq(sd_ngram_cache_load(path, 9, 100, &np, caps[k], &loaded, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(sd_ngram_cache_n_docs(loaded), sd_ngram_cache_n_docs(one), "cap %lld",
                     (long long)caps[k]);
        cr_assert_eq(sd_ngram_cache_n_tokens(loaded), sd_ngram_cache_n_tokens(one), "cap %lld",
                     (long long)caps[k]);
        sd_proposer *pa = make_ngram(1, 4, 64), *pb = make_ngram(1, 4, 64);
        cr_assert_eq(sd_proposer_ngram_set_cache(pa, one, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_proposer_ngram_set_cache(pb, loaded, &err), 0, "%s", err.msg);
        for (int d = 0; d < 5; d++)
            for (int i = 0; i + 1 < lens[d]; i++) {
                const int32_t ctx[2] = {99, docs[d][i]};
                sd_proposal a, b;
                cr_assert_eq(sd_proposer_propose(pa, ctx, 2, 4, &a, &err), 0);
                cr_assert_eq(sd_proposer_propose(pb, ctx, 2, 4, &b, &err), 0);
                cr_assert_eq(a.n, b.n, "cap %lld, doc %d, token %d", (long long)caps[k], d, i);
                for (int j = 0; j < a.n; j++)
                    cr_assert_eq(a.tokens[j], b.tokens[j]);
            }
        sd_proposer_free(pa);
        sd_proposer_free(pb);
        sd_ngram_cache_free(one);
        sd_ngram_cache_free(loaded);
    }
    /* A folder is refused, and never with the ENOENT that means "start an empty cache". */
    sd_ngram_cache *got = NULL;
    errno = ENOENT;
    cr_assert_eq(load_cache(g_dir, 9, 100, &got, &err), SD_ERR_IO);
    cr_assert_neq(errno, ENOENT, "a folder reads as a missing cache: %s", err.msg);
    cr_assert(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

/* Bad files: a one-line error naming the file; nothing is loaded. */
Test(ngram, lookup_cache_bad_files) {
    char good[2048], bad[2048];
    tu_path(good, sizeof good, g_dir, "good.bin");
    tu_path(bad, sizeof bad, g_dir, "bad.bin");
    sd_ngram_cache *c = new_cache(42, 100);
    const int32_t doc[] = {1, 2, 3, 4, 5, 6};
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_add(c, doc, 6, &err), 0);
    cr_assert_eq(sd_ngram_cache_save(c, good, &err), 0, "%s", err.msg);
    sd_ngram_cache_free(c);
    size_t n = 0;
    unsigned char *img = tu_read_file(good, &n);
    cr_assert(img && n == 40 + 4 + 24 + 8, "file of %zu bytes", n);
    struct {
        const char *what, *word;
        size_t len;
        int byte;          /* -1: no change */
        unsigned char val; /* the new value of img[byte] */
        sd_status st;
    } cases[] = {
        {"empty", "not a specdec lookup cache", 0, -1, 0, SD_ERR_FORMAT},
        {"not a cache", "not a specdec lookup cache", 0, -2, 0, SD_ERR_FORMAT},
        {"header cut", "truncated", 30, -1, 0, SD_ERR_FORMAT},
        {"tokens cut", "truncated", 60, -1, 0, SD_ERR_FORMAT},
        {"checksum cut", "truncated", n - 3, -1, 0, SD_ERR_FORMAT},
        {"trailing bytes", "after its end", n + 5, -1, 0, SD_ERR_FORMAT},
        {"flipped token", "checksum", n, 50, 9, SD_ERR_FORMAT},
        {"version", "version", n, 8, 7, SD_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *buf = calloc(1, n + 16);
        cr_assert(buf);
        if (cases[i].byte == -2)
            memcpy(buf, "GGUF\3\0\0\0this is not a lookup cache at all", 40);
        else
            memcpy(buf, img, n);
        if (cases[i].byte >= 0) buf[cases[i].byte] = cases[i].val;
        const size_t len = cases[i].byte == -2 ? 40 : cases[i].len;
        cr_assert_eq(tu_write_file(bad, buf, len), 0);
        free(buf);
        sd_ngram_cache *got = (sd_ngram_cache *)&err;
        sd_error e2 = {0};
        const int rc = load_cache(bad, 42, 100, &got, &e2);
        cr_assert_eq(rc, (int)cases[i].st, "%s: status %d (%s)", cases[i].what, rc, e2.msg);
        cr_assert_null(got, "%s: a cache came back", cases[i].what);
        cr_assert(strstr(e2.msg, bad) && strstr(e2.msg, cases[i].word),
                  "%s: '%s' should name the file and say '%s'", cases[i].what, e2.msg,
                  cases[i].word);
        cr_assert_null(strchr(e2.msg, '\n'), "%s: not one line", cases[i].what);
    }
    /* Another vocabulary: size or fingerprint. */
    sd_ngram_cache *got = NULL;
    cr_assert_eq(load_cache(good, 43, 100, &got, &err), SD_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "another vocabulary") && strstr(err.msg, good), "%s", err.msg);
    cr_assert_eq(load_cache(good, 42, 512, &got, &err), SD_ERR_MISMATCH);
    /* Missing: SD_ERR_IO with ENOENT (the CLI then starts an empty cache). */
    char missing[2048];
    tu_path(missing, sizeof missing, g_dir, "none.bin");
    cr_assert_eq(load_cache(missing, 42, 100, &got, &err), SD_ERR_IO);
    free(img);
}

/* Saving never leaves half a file: a failed save leaves the old file as it was and no
 * temporary file; a path that is not a regular file is refused. */
Test(ngram, lookup_cache_save_is_atomic) {
    char path[2048], sub[2048], in_missing[2048];
    tu_path(path, sizeof path, g_dir, "cache.bin");
    sd_ngram_cache *c = new_cache(5, 100);
    const int32_t doc[] = {1, 2, 3};
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_add(c, doc, 3, &err), 0);
    cr_assert_eq(sd_ngram_cache_save(c, path, &err), 0, "%s", err.msg);
    size_t n0 = 0;
    unsigned char *before = tu_read_file(path, &n0);
    /* A directory in the way: refused, nothing written. */
    tu_path(sub, sizeof sub, g_dir, "adir");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(sd_ngram_cache_save(c, sub, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "not a regular file"), "%s", err.msg);
    rmdir(sub);
    /* A folder that does not exist: an error naming the file, no temporary file. */
    tu_path(in_missing, sizeof in_missing, g_dir, "no/such/cache.bin");
    cr_assert_eq(sd_ngram_cache_save(c, in_missing, &err), SD_ERR_IO);
    cr_assert(strstr(err.msg, in_missing), "%s", err.msg);
    cr_assert_eq(tu_count_files(g_dir), 1, "temporary files left behind");
    size_t n1 = 0;
    unsigned char *after = tu_read_file(path, &n1);
    cr_assert(n0 == n1 && !memcmp(before, after, n0), "the good file changed");
    free(before);
    free(after);
    sd_ngram_cache_free(c);
}

/* ------------------------------------------------------------------------------------ */
/* Bad input through the CLI: one line naming the flag, key or file; exit non-zero.      */

static void cli_error(const char *args, const char *word) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    char *out = NULL, *err = NULL;
    const int rc = tu_run(cmd, &out, &err);
    cr_assert_neq(rc, 0, "'%s' succeeded", args);
    cr_assert(err && strstr(err, word), "'%s': stderr '%s' does not name '%s'", args,
              err ? err : "", word);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': not one line: '%s'", args, err);
    free(out);
    free(err);
}

Test(ngram, cli_bad_input) {
    char t[2048], d[2048], args[8192], cfg[2048], junk[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    const char *bad[][2] = {
        {"--draft-type eagle", "--draft-type"},
        {"--spec-type ngram-mod", "--draft-type"},
        {"--ngram-min 0", "--ngram-min"},
        {"--ngram-max 17", "--ngram-max"},
        {"--ngram-min 5", "--ngram-min"},
        {"--ngram-min 3 --ngram-max 2", "--ngram-max"},
        {"--draft-p-min 1.5", "--draft-p-min"},
        {"--draft-p-min -0.1", "--draft-p-min"},
        {"--draft-min 17", "--draft-min"},
        {"--draft-policy sometimes", "--draft-policy"},
        {"--spec-ngram-size-n 0", "--spec-ngram-size-n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 %s", t, bad[i][0]);
        cli_error(args, bad[i][1]);
    }
    /* llm without a draft model */
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type llm", t);
    cli_error(args, "--draft-type llm");
    /* config keys */
    const char *keys[][2] = {{"\"draft_type\": \"eagle\"", "draft_type"},
                             {"\"ngram_min\": 0", "ngram_min"},
                             {"\"ngram_min\": 4, \"ngram_max\": 2", "ngram_min"},
                             {"\"draft_p_min\": 2", "draft_p_min"},
                             {"\"draft_policy\": 1", "draft_policy"}};
    tu_path(cfg, sizeof cfg, g_dir, "pair.json");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char json[4096];
        snprintf(json, sizeof json, "{\"target\": \"%s\", %s}", t, keys[i][0]);
        cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
        snprintf(args, sizeof args, "generate --config %s -p t5t6 -n 4", cfg);
        cli_error(args, keys[i][1]);
    }
    /* lookup caches: not a cache, truncated, another vocabulary */
    tu_path(junk, sizeof junk, g_dir, "junk.cache");
    cr_assert_eq(tu_write_file(junk, "hello\n", 6), 0);
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type ngram --lookup-cache %s",
             t, junk);
    cli_error(args, junk);
    char lc[2048];
    tu_path(lc, sizeof lc, g_dir, "real.cache");
    snprintf(args, sizeof args,
             "%s generate -m %s -p t5t6t7t5t6 -n 8 --draft-type ngram --lookup-cache %s", SD_BINARY,
             t, lc);
    cr_assert_eq(tu_run(args, NULL, NULL), 0, "making a cache failed");
    size_t n = 0;
    unsigned char *img = tu_read_file(lc, &n);
    cr_assert(img && n > 48);
    cr_assert_eq(tu_write_file(junk, img, n - 9), 0);
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type ngram --lookup-cache %s",
             t, junk);
    cli_error(args, "truncated");
    free(img);
    /* the draft model has the same vocabulary; a model with another one does not */
    char other[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 80;
    cr_assert_eq(tu_make_llama(tu_path(other, sizeof other, g_dir, "other.gguf"), &s), 0);
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type ngram --lookup-cache %s",
             other, lc);
    cli_error(args, "another vocabulary");
    /* a good run with the cache: updated, never left as a temporary file */
    snprintf(args, sizeof args,
             "%s generate -m %s -p t5t6t7t5t6 -n 8 --draft-type ngram --lookup-cache %s", SD_BINARY,
             t, lc);
    cr_assert_eq(tu_run(args, NULL, NULL), 0);
    size_t n2 = 0;
    unsigned char *img2 = tu_read_file(lc, &n2);
    cr_assert(img2 && n2 > n, "the cache did not grow (%zu -> %zu bytes)", n, n2);
    cr_assert_eq(img2[24], 2, "expected 2 documents after 2 runs, found %d", img2[24]);
    free(img2);
}

/* specdec bench --draft-types: every type side by side per category (from the
 * "# category:" line, else the file name), greedy output equal to none in every run. */
Test(ngram, bench_draft_types_side_by_side) {
    char t[2048], d[2048], f1[2048], f2[2048], js[2048], cmd[16384];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    tu_path(f1, sizeof f1, g_dir, "first.txt");
    tu_path(f2, sizeof f2, g_dir, "repeats.txt");
    tu_path(js, sizeof js, g_dir, "bench.json");
    const char *p1 = "# category: copy\nt5t6t7t8t5t6t7\nt9t10t11t9t10\n";
    const char *p2 = "t20t21t22t20t21t22t20\n";
    cr_assert_eq(tu_write_file(f1, p1, strlen(p1)), 0);
    cr_assert_eq(tu_write_file(f2, p2, strlen(p2)), 0);
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -md %s --draft-types all -f %s -f %s -n 24 -k 3 -t 1 --temp 0 "
             "--json %s",
             SD_BINARY, t, d, f1, f2, js);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "bench exited %d: %s", rc, err ? err : "");
    cr_assert(strstr(out, "copy") && strstr(out, "repeats") && strstr(out, "ngram-adaptive"),
              "table: %s", out);
    free(out);
    free(err);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    cr_assert_not_null(root, "bad JSON: %s", je.text);
    cr_assert(json_is_true(json_object_get(root, "greedy_match")));
    json_t *rows = json_object_get(root, "rows");
    const char *types[] = {"none",           "llm",       "llm-adaptive",      "ngram",
                           "ngram-adaptive", "ngram+llm", "ngram+llm-adaptive"};
    int seen[3][7] = {{0}};
    const char *cats[] = {"copy", "repeats", "all"};
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        const char *cat = json_string_value(json_object_get(r, "category"));
        const char *dr = json_string_value(json_object_get(r, "draft"));
        cr_assert(cat && dr);
        cr_assert(json_is_true(json_object_get(r, "greedy_match")), "%s %s: tokens differ", cat,
                  dr);
        const json_int_t gen = json_integer_value(json_object_get(r, "n_generated"));
        const json_int_t passes = json_integer_value(json_object_get(r, "n_target_passes"));
        const json_int_t drafted = json_integer_value(json_object_get(r, "n_drafted"));
        const json_int_t acc = json_integer_value(json_object_get(r, "n_accepted"));
        cr_assert(gen > 0 && passes > 0 && acc <= drafted, "%s %s: counts", cat, dr);
        json_t *hist = json_object_get(r, "k_hist");
        json_int_t hsum = 0;
        for (size_t k = 0; k < json_array_size(hist); k++)
            hsum += json_integer_value(json_array_get(hist, k));
        cr_assert_eq(hsum, passes, "%s %s: K histogram covers %lld of %lld passes", cat, dr,
                     (long long)hsum, (long long)passes);
        for (int c = 0; c < 3; c++)
            for (int ty = 0; ty < 7; ty++) {
                char want[64];
                snprintf(want, sizeof want, "%s ", types[ty]);
                if (!strcmp(cat, cats[c]) &&
                    (!strcmp(dr, types[ty]) || !strncmp(dr, want, strlen(want))))
                    seen[c][ty]++;
            }
        if (!strcmp(dr, "none")) cr_assert_eq(drafted, 0);
    }
    for (int c = 0; c < 3; c++)
        for (int ty = 0; ty < 7; ty++)
            cr_assert_eq(seen[c][ty], 1, "category %s: %d rows of %s", cats[c], seen[c][ty],
                         types[ty]);
    json_decref(root);
    /* A type that needs a draft model, without one: one line naming it. */
    snprintf(cmd, sizeof cmd, "bench -m %s --draft-types llm -f %s -n 8 --temp 0", t, f1);
    cli_error(cmd, "llm");
    snprintf(cmd, sizeof cmd, "bench -m %s --draft-types eagle -f %s", t, f1);
    cli_error(cmd, "--draft-types");
}

/* The LLM draft's bounded catch-up: after sd_proposer_catch_up with a window it sees
 * ctx[0] followed by the last `window` tokens before the last one; its proposals (tokens
 * and q rows, bit for bit: batch invariance) equal a fresh proposer's on that view, also
 * after commits that extend the context. window 0 catches up on everything. */
Test(ngram, llm_catch_up_window) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(d, &m, &err), 0, "%s", err.msg);
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = 1;
    for (int sampled = 0; sampled <= 1; sampled++) {
        sd_sampling_params samp = {sampled ? 0.9f : 0.0f, 0, 1.0f};
        sd_proposer *p = NULL, *ref = NULL;
        cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 5, 0, &p, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 5, 0, &ref, &err), 0, "%s", err.msg);
        int32_t ctx[80];
        for (int i = 0; i < 80; i++)
            ctx[i] = i == 0 ? 1 : 3 + (i * 37) % (n_vocab - 3);
        cr_assert_eq(sd_proposer_prefill(p, ctx, 10, &err), 0); /* then 50 tokens "off" */
        const int32_t n = 60, window = 8;
        cr_assert_eq(sd_proposer_catch_up(p, ctx, n, window, &err), 0, "%s", err.msg);
        int32_t view[80];
        view[0] = ctx[0];
        memcpy(view + 1, ctx + (n - 1 - window), (size_t)(window + 1) * sizeof *ctx);
        int32_t n_view = window + 2;
        /* Sampled: the first proposal (both RNG streams fresh); greedy: three steps. */
        for (int step = 0; step < (sampled ? 1 : 3); step++) {
            sd_proposal a, b;
            sd_proposer_commit(ref, view, 0); /* a fresh cache for the reference */
            cr_assert_eq(sd_proposer_propose(ref, view, n_view, 4, &b, &err), 0, "%s", err.msg);
            cr_assert_eq(sd_proposer_propose(p, ctx, n + step * 2, 4, &a, &err), 0, "%s", err.msg);
            cr_assert_eq(a.n, b.n, "step %d: %d tokens vs %d", step, a.n, b.n);
            for (int32_t i = 0; i < a.n; i++) {
                cr_assert_eq(a.tokens[i], b.tokens[i], "step %d token %d", step, i);
                cr_assert(!memcmp(a.probs + (size_t)i * n_vocab, b.probs + (size_t)i * n_vocab,
                                  (size_t)n_vocab * sizeof(float)),
                          "step %d: q row %d differs from the fresh proposer's", step, i);
            }
            /* Accept two tokens of our own and commit: the view grows with the context. */
            ctx[n + step * 2] = 3 + step;
            ctx[n + step * 2 + 1] = 4 + step;
            sd_proposer_commit(p, ctx, n + step * 2 + 2);
            /* The view is ctx[0], then ctx[n - 1 - window ..]: rebuild it. */
            n_view = 1 + (n + step * 2 + 2) - (n - 1 - window);
            view[0] = ctx[0];
            memcpy(view + 1, ctx + (n - 1 - window), (size_t)(n_view - 1) * sizeof *ctx);
        }
        /* A new generation (reset) goes back to the whole context; window 0 catches up
         * on everything: a fresh proposer on the whole context agrees. */
        sd_proposer_reset(p, &samp, 9);
        sd_proposer_reset(ref, &samp, 9);
        cr_assert_eq(sd_proposer_catch_up(p, ctx, 70, 0, &err), 0);
        sd_proposal a, b;
        cr_assert_eq(sd_proposer_propose(p, ctx, 70, 3, &a, &err), 0);
        sd_proposer_commit(ref, ctx, 0);
        cr_assert_eq(sd_proposer_propose(ref, ctx, 70, 3, &b, &err), 0);
        for (int32_t i = 0; i < a.n; i++)
            cr_assert_eq(a.tokens[i], b.tokens[i]);
        sd_proposer_free(p);
        sd_proposer_free(ref);
    }
    sd_model_free(m);
}
