/*
 * tests/test_verify.c: verify/ (RNG, warps, inverse-CDF sampling, verification).
 *
 * Follows the rejection-sampler test set of vLLM (tests/samplers/test_rejection_sampler.py):
 *   - the emitted tokens follow the target distribution p (chi-square), with negative
 *     controls proving the test can fail;
 *   - draft == target gives 100% acceptance and no NaN;
 *   - all / none / some accepted with hand-built rows;
 *   - seeded runs are deterministic;
 *   - out-of-range ids and k are rejected;
 * plus greedy verification, the warps, sd_sample with injected uniforms and the RNG.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/sd_verify.h"

/* ------------------------------------------------------------------------------------ */
/* Helpers                                                                              */

#define V8 8

/*
 * Upper critical values of the chi-square distribution for a false-alarm rate
 * alpha = 1e-4, indexed by degrees of freedom (df = support size - 1). Computed as
 * x with P(chi2_df > x) = 1e-4, i.e. scipy.stats.chi2.isf(1e-4, df); here by bisection
 * on the regularised upper incomplete gamma Q(df/2, x/2) (series / Lentz continued
 * fraction, double precision), which agrees with published tables (df = 1: 15.137,
 * df = 7: 29.878).
 */
static const double CHI2_CRIT_1E4[8] = {
    0.0, 15.1367, 18.4207, 21.1075, 23.5127, 25.7448, 27.8563, 29.8775,
};

/* Pearson chi-square of counts[0 .. V8) against p (normalised here). Categories with
 * p == 0 must have count 0 (asserted) and do not count towards df. */
static double chi_square(const long *counts, const float *p, long n, int *df_out) {
    double psum = 0.0;
    for (int i = 0; i < V8; i++)
        psum += p[i];
    double stat = 0.0;
    int support = 0;
    for (int i = 0; i < V8; i++) {
        if (p[i] == 0.0f) {
            cr_assert_eq(counts[i], 0, "token %d has p = 0 but was emitted %ld times", i,
                         counts[i]);
            continue;
        }
        support++;
        const double e = (double)n * (double)p[i] / psum;
        const double d = (double)counts[i] - e;
        stat += d * d / e;
    }
    *df_out = support - 1;
    return stat;
}

static double min_positive(const float *p, int n) {
    double m = INFINITY;
    for (int i = 0; i < n; i++)
        if (p[i] > 0.0f && p[i] < m) m = p[i];
    return m;
}

/* Standard normal draw (Box-Muller) from our RNG, for synthetic logits. */
static double randn(sd_rng *r) {
    double u1 = sd_rng_uniform(r), u2 = sd_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill_rows(float *dst, const float *row, int rows, int n) {
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)i * n, row, (size_t)n * sizeof *row);
}

/* (logit, id) pair sorted by logit descending, id ascending: the reference ranking. */
typedef struct ranked {
    float l;
    int32_t id;
} ranked;

static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->l > y->l) return -1;
    if (x->l < y->l) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/*
 * Reference warp in double, written independently of verify/warp.c: full sort,
 * softmax over the top-k, smallest prefix whose renormalised mass reaches top_p.
 * Writes probs (double) and returns the number of kept tokens.
 */
static int ref_warp(const float *logits, int n, float temp, int top_k, float top_p, double *out) {
    ranked *r = malloc((size_t)n * sizeof *r);
    cr_assert(r);
    for (int i = 0; i < n; i++) {
        r[i].l = logits[i];
        r[i].id = i;
    }
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
    int k = (top_k > 0 && top_k < n) ? top_k : n;
    const double mx = r[0].l;
    double sum = 0.0;
    for (int j = 0; j < k; j++)
        sum += exp(((double)r[j].l - mx) / (double)temp);
    int m = k;
    if (top_p < 1.0f) {
        double cum = 0.0;
        for (int j = 0; j < k; j++) {
            cum += exp(((double)r[j].l - mx) / (double)temp) / sum;
            if (cum >= (double)top_p) {
                m = j + 1;
                break;
            }
        }
    }
    double kept = 0.0;
    for (int j = 0; j < m; j++)
        kept += exp(((double)r[j].l - mx) / (double)temp);
    for (int i = 0; i < n; i++)
        out[i] = 0.0;
    for (int j = 0; j < m; j++)
        out[r[j].id] = exp(((double)r[j].l - mx) / (double)temp) / kept;
    free(r);
    return m;
}

/* ------------------------------------------------------------------------------------ */
/* (1) Distribution preserved                                                            */

/* Synthetic (p, q) pairs over 8 tokens. */
typedef struct pq_pair {
    const char *name;
    float p[V8];
    float q[V8];
} pq_pair;

static const pq_pair PAIRS[] = {
    {"generic",
     {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.08f, 0.05f, 0.02f},
     {0.05f, 0.10f, 0.20f, 0.25f, 0.05f, 0.15f, 0.10f, 0.10f}},
    {"q zero where p > 0",
     {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.08f, 0.05f, 0.02f},
     {0.40f, 0.30f, 0.20f, 0.10f, 0.0f, 0.0f, 0.0f, 0.0f}},
    {"p zero where q > 0",
     {0.50f, 0.30f, 0.20f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
     {0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f}},
    {"p == q",
     {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.08f, 0.05f, 0.02f},
     {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.08f, 0.05f, 0.02f}},
    {"disjoint supports",
     {0.0f, 0.0f, 0.0f, 0.0f, 0.40f, 0.30f, 0.20f, 0.10f},
     {0.25f, 0.25f, 0.25f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f}},
    {"mixed zeros",
     {0.10f, 0.0f, 0.30f, 0.0f, 0.20f, 0.15f, 0.25f, 0.0f},
     {0.0f, 0.20f, 0.30f, 0.10f, 0.10f, 0.0f, 0.20f, 0.10f}},
};
#define N_PAIRS  ((int)(sizeof PAIRS / sizeof PAIRS[0]))
#define N_TRIALS 200000L

/* How verification is done in a run: the real sd_verify_sample, or a deliberately
 * wrong variant used as a negative control. */
typedef enum verifier { VERIFY_REAL, VERIFY_BUG_RESAMPLE_FROM_P } verifier;

/* The classic bug: on rejection draw from p instead of normalize(max(0, p - q)). */
static void buggy_verify(const int32_t *draft, int k, const float *q, const float *p, sd_rng *rng,
                         sd_verify_result *res) {
    res->n_accepted = 0;
    for (int i = 0; i < k; i++) {
        const int x = draft[i];
        const double u = sd_rng_uniform(rng);
        if (u < (double)p[i * V8 + x] / (double)q[i * V8 + x]) {
            res->tokens[res->n_accepted++] = x;
            continue;
        }
        res->tokens[res->n_accepted] = sd_sample(p + i * V8, V8, sd_rng_uniform(rng));
        res->n_tokens = res->n_accepted + 1;
        return;
    }
    res->tokens[k] = sd_sample(p + k * V8, V8, sd_rng_uniform(rng));
    res->n_tokens = k + 1;
}

typedef struct dist_counts {
    long pos[SD_MAX_DRAFT + 1][V8]; /* token counts at emitted position j of a step */
    long n_pos[SD_MAX_DRAFT + 1];   /* steps that emitted a token at position j */
    long stream[V8];                /* the first N_TRIALS tokens of the concatenated stream */
    long n_stream;
    long n_accepted_total;
} dist_counts;

/*
 * N_TRIALS verification steps with every row equal to (p, q). The draft is what a real
 * draft model does: its own seeded RNG, each token drawn with sd_sample(q, u).
 */
static void run_steps(const pq_pair *pq, int k, verifier which, uint64_t seed, dist_counts *c) {
    float q[SD_MAX_DRAFT * V8], p[(SD_MAX_DRAFT + 1) * V8], scratch[V8];
    fill_rows(q, pq->q, k, V8);
    fill_rows(p, pq->p, k + 1, V8);
    sd_rng draft_rng, verify_rng;
    sd_rng_seed(&draft_rng, seed);
    sd_rng_seed(&verify_rng, seed ^ UINT64_C(0x5eed5eed5eed5eed));
    memset(c, 0, sizeof *c);
    for (long t = 0; t < N_TRIALS; t++) {
        int32_t draft[SD_MAX_DRAFT];
        for (int i = 0; i < k; i++)
            draft[i] = sd_sample(q + i * V8, V8, sd_rng_uniform(&draft_rng));
        sd_verify_result res;
        if (which == VERIFY_REAL) {
            sd_error err = {0};
            int st = sd_verify_sample(draft, k, q, p, V8, &verify_rng, scratch, &res, &err);
            cr_assert_eq(st, SD_OK, "%s", err.msg);
        } else {
            buggy_verify(draft, k, q, p, &verify_rng, &res);
        }
        cr_assert_eq(res.n_tokens, res.n_accepted + 1);
        cr_assert(res.n_accepted >= 0 && res.n_accepted <= k);
        c->n_accepted_total += res.n_accepted;
        for (int j = 0; j < res.n_tokens; j++) {
            const int32_t tok = res.tokens[j];
            cr_assert(tok >= 0 && tok < V8, "token %d out of range", tok);
            if (j < res.n_accepted)
                cr_assert_eq(tok, draft[j], "accepted token differs from draft");
            c->pos[j][tok]++;
            c->n_pos[j]++;
            if (c->n_stream < N_TRIALS) {
                c->stream[tok]++;
                c->n_stream++;
            }
        }
    }
}

/* Chi-square of every position with enough samples (all expected counts >= 5) and of
 * the stream. Returns the largest statistic / critical value ratio. */
static double check_counts(const pq_pair *pq, int k, const dist_counts *c, int expect_pass) {
    const double pmin = min_positive(pq->p, V8);
    double worst = 0.0;
    int n_tests = 0;
    for (int j = 0; j <= k + 1; j++) {
        const long *counts = j <= k ? c->pos[j] : c->stream;
        const long n = j <= k ? c->n_pos[j] : c->n_stream;
        if ((double)n * pmin < 5.0) continue;
        int df = 0;
        const double stat = chi_square(counts, pq->p, n, &df);
        cr_assert(df >= 1 && df <= 7);
        const double crit = CHI2_CRIT_1E4[df];
        if (j <= k) {
            fprintf(stderr, "  chi2 %-20s k=%d position %d n=%7ld df=%d stat=%8.2f crit=%.2f\n",
                    pq->name, k, j, n, df, stat, crit);
        } else {
            fprintf(stderr, "  chi2 %-20s k=%d stream     n=%7ld df=%d stat=%8.2f crit=%.2f\n",
                    pq->name, k, n, df, stat, crit);
        }
        if (expect_pass) {
            cr_expect(stat < crit, "%s k=%d %s %d: chi2 = %.2f >= %.2f (alpha 1e-4, df %d)",
                      pq->name, k, j <= k ? "position" : "stream", j, stat, crit, df);
        }
        if (stat / crit > worst) worst = stat / crit;
        n_tests++;
    }
    cr_assert(n_tests >= 2, "%s k=%d: too few positions with enough samples", pq->name, k);
    return worst;
}

static void distribution_test(int k) {
    for (int i = 0; i < N_PAIRS; i++) {
        dist_counts *c = malloc(sizeof *c);
        cr_assert(c);
        run_steps(&PAIRS[i], k, VERIFY_REAL, 1000 + (uint64_t)(i * 10 + k), c);
        fprintf(stderr, "  %-20s k=%d accepted %.4f of drafted tokens\n", PAIRS[i].name, k,
                (double)c->n_accepted_total / ((double)N_TRIALS * k));
        check_counts(&PAIRS[i], k, c, 1);
        free(c);
    }
}

Test(verify_distribution, k1_matches_target) {
    distribution_test(1);
}
Test(verify_distribution, k3_matches_target) {
    distribution_test(3);
}

/* Expected acceptance rate sum_x min(p, q) for "generic": 0.60. A loose check that
 * acceptance is not broken in the other direction (accepting too little). */
Test(verify_distribution, acceptance_rate_matches_theory) {
    dist_counts *c = malloc(sizeof *c);
    cr_assert(c);
    run_steps(&PAIRS[0], 1, VERIFY_REAL, 77, c);
    const double rate = (double)c->n_accepted_total / (double)N_TRIALS;
    /* Binomial sd = sqrt(0.6 * 0.4 / 2e5) = 0.0011; 5 sd = 0.0055. */
    cr_assert(fabs(rate - 0.60) < 0.0055, "acceptance %.4f, expected 0.60", rate);
    free(c);
}

/* Negative controls: the same test must fail for wrong samplers. */
Test(verify_distribution, negative_control_sampling_from_q_fails) {
    const pq_pair *pq = &PAIRS[0];
    sd_rng rng;
    sd_rng_seed(&rng, 4242);
    long counts[V8] = {0};
    for (long t = 0; t < N_TRIALS; t++)
        counts[sd_sample(pq->q, V8, sd_rng_uniform(&rng))]++;
    int df = 0;
    const double stat = chi_square(counts, pq->p, N_TRIALS, &df);
    fprintf(stderr, "  chi2 negative control (samples from q vs p): df=%d stat=%.1f crit=%.2f\n",
            df, stat, CHI2_CRIT_1E4[df]);
    cr_assert(stat > CHI2_CRIT_1E4[df], "sampling from q passed the test (chi2 %.2f)", stat);
}

Test(verify_distribution, negative_control_resample_from_p_fails) {
    dist_counts *c = malloc(sizeof *c);
    cr_assert(c);
    run_steps(&PAIRS[0], 1, VERIFY_BUG_RESAMPLE_FROM_P, 99, c);
    int df = 0;
    const double stat = chi_square(c->pos[0], PAIRS[0].p, c->n_pos[0], &df);
    fprintf(stderr,
            "  chi2 negative control (resample from p on rejection): df=%d stat=%.1f crit=%.2f\n",
            df, stat, CHI2_CRIT_1E4[df]);
    cr_assert(stat > CHI2_CRIT_1E4[df], "the resample-from-p bug passed the test (chi2 %.2f)",
              stat);
    free(c);
}

/* ------------------------------------------------------------------------------------ */
/* (2) draft == target                                                                   */

Test(verify_sample, draft_equals_target_accepts_everything) {
    enum { N = 4096, K = 8, STEPS = 300 };
    float *logits = malloc(sizeof(float) * N * (K + 1));
    float *p = malloc(sizeof(float) * N * (K + 1));
    float *scratch = malloc(sizeof(float) * N);
    int32_t *iscratch = malloc(sizeof(int32_t) * N);
    cr_assert(logits && p && scratch && iscratch);
    sd_rng gen, draft_rng, verify_rng;
    sd_rng_seed(&gen, 1);
    sd_rng_seed(&draft_rng, 2);
    sd_rng_seed(&verify_rng, 3);
    const sd_sampling_params configs[3] = {{.temp = 1.0f, .top_k = 0, .top_p = 1.0f},
                                           {.temp = 0.8f, .top_k = 40, .top_p = 0.95f},
                                           {.temp = 0.5f, .top_k = 0, .top_p = 0.9f}};
    for (int step = 0; step < STEPS; step++) {
        const sd_sampling_params sp = configs[step % 3];
        for (int i = 0; i < (K + 1) * N; i++)
            logits[i] = (float)(3.0 * randn(&gen));
        for (int i = 0; i <= K; i++) {
            sd_error err = {0};
            cr_assert_eq(sd_warp(&sp, logits + i * N, N, p + i * N, iscratch, &err), SD_OK, "%s",
                         err.msg);
        }
        int32_t draft[K];
        for (int i = 0; i < K; i++)
            draft[i] = sd_sample(p + i * N, N, sd_rng_uniform(&draft_rng));
        sd_verify_result res;
        sd_error err = {0};
        /* q == p: the same rows serve as draft and target probabilities. */
        cr_assert_eq(sd_verify_sample(draft, K, p, p, N, &verify_rng, scratch, &res, &err), SD_OK,
                     "%s", err.msg);
        cr_assert_eq(res.n_accepted, K, "step %d: only %d of %d accepted", step, res.n_accepted, K);
        cr_assert_eq(res.n_tokens, K + 1);
        for (int i = 0; i <= K; i++) {
            cr_assert(res.tokens[i] >= 0 && res.tokens[i] < N);
            const float pr = p[i * N + res.tokens[i]];
            cr_assert(pr > 0.0f && !isnan(pr), "emitted token with p = %g", (double)pr);
        }
    }
    free(logits);
    free(p);
    free(scratch);
    free(iscratch);
}

/* ------------------------------------------------------------------------------------ */
/* (3) all / none / some accepted with hand-built rows                                    */

#define V6 6

static void one_hot(float *row, int id) {
    for (int i = 0; i < V6; i++)
        row[i] = i == id ? 1.0f : 0.0f;
}

static void uniform_row(float *row) {
    for (int i = 0; i < V6; i++)
        row[i] = 1.0f / V6;
}

Test(verify_sample, all_accepted_then_bonus) {
    float q[3 * V6], p[4 * V6], scratch[V6];
    for (int i = 0; i < 3; i++)
        uniform_row(q + i * V6);
    one_hot(p + 0 * V6, 3);
    one_hot(p + 1 * V6, 1);
    one_hot(p + 2 * V6, 4);
    one_hot(p + 3 * V6, 5); /* bonus row */
    const int32_t draft[3] = {3, 1, 4};
    for (uint64_t seed = 0; seed < 50; seed++) {
        sd_rng rng;
        sd_rng_seed(&rng, seed);
        sd_verify_result res;
        cr_assert_eq(sd_verify_sample(draft, 3, q, p, V6, &rng, scratch, &res, NULL), SD_OK);
        cr_assert_eq(res.n_accepted, 3);
        cr_assert_eq(res.n_tokens, 4);
        const int32_t want[4] = {3, 1, 4, 5};
        for (int i = 0; i < 4; i++)
            cr_assert_eq(res.tokens[i], want[i]);
    }
}

Test(verify_sample, none_accepted_correction_from_residual) {
    float q[3 * V6], p[4 * V6], scratch[V6];
    for (int i = 0; i < 3; i++)
        uniform_row(q + i * V6);
    for (int i = 0; i < 4; i++)
        one_hot(p + i * V6, 2);
    const int32_t draft[3] = {0, 2, 2}; /* p(0) = 0 on row 0: always rejected */
    for (uint64_t seed = 0; seed < 50; seed++) {
        sd_rng rng;
        sd_rng_seed(&rng, seed);
        sd_verify_result res;
        cr_assert_eq(sd_verify_sample(draft, 3, q, p, V6, &rng, scratch, &res, NULL), SD_OK);
        cr_assert_eq(res.n_accepted, 0);
        cr_assert_eq(res.n_tokens, 1);
        cr_assert_eq(res.tokens[0], 2, "correction must come from max(0, p - q) = one-hot(2)");
    }
}

Test(verify_sample, some_accepted) {
    float q[3 * V6], p[4 * V6], scratch[V6];
    for (int i = 0; i < 3; i++)
        uniform_row(q + i * V6);
    one_hot(p + 0 * V6, 3);
    one_hot(p + 1 * V6, 3);
    one_hot(p + 2 * V6, 4);
    one_hot(p + 3 * V6, 0);
    const int32_t draft[3] = {3, 3, 1};
    for (uint64_t seed = 0; seed < 50; seed++) {
        sd_rng rng;
        sd_rng_seed(&rng, seed);
        sd_verify_result res;
        cr_assert_eq(sd_verify_sample(draft, 3, q, p, V6, &rng, scratch, &res, NULL), SD_OK);
        cr_assert_eq(res.n_accepted, 2);
        cr_assert_eq(res.n_tokens, 3);
        cr_assert_eq(res.tokens[0], 3);
        cr_assert_eq(res.tokens[1], 3);
        cr_assert_eq(res.tokens[2], 4);
    }
}

Test(verify_sample, k0_draws_bonus_only) {
    float p[V6], scratch[V6];
    one_hot(p, 4);
    sd_rng rng;
    sd_rng_seed(&rng, 5);
    sd_verify_result res;
    cr_assert_eq(sd_verify_sample(NULL, 0, NULL, p, V6, &rng, scratch, &res, NULL), SD_OK);
    cr_assert_eq(res.n_accepted, 0);
    cr_assert_eq(res.n_tokens, 1);
    cr_assert_eq(res.tokens[0], 4);
}

/* Unnormalised rows with p = q / 2: accepted half the time, and a rejection finds an
 * all-zero residual, so the correction is drawn from p (documented fallback). */
Test(verify_sample, zero_residual_falls_back_to_p) {
    float q[V6] = {0, 0.5f, 0.5f, 0, 0, 0}, p[2 * V6] = {0, 0.25f, 0.25f, 0, 0, 0}, scratch[V6];
    memcpy(p + V6, p, sizeof(float) * V6);
    sd_rng rng;
    sd_rng_seed(&rng, 11);
    int n_rej = 0;
    for (int t = 0; t < 2000; t++) {
        const int32_t draft[1] = {t % 2 ? 1 : 2};
        sd_verify_result res;
        cr_assert_eq(sd_verify_sample(draft, 1, q, p, V6, &rng, scratch, &res, NULL), SD_OK);
        cr_assert(res.tokens[res.n_tokens - 1] == 1 || res.tokens[res.n_tokens - 1] == 2);
        n_rej += res.n_accepted == 0;
    }
    cr_assert(n_rej > 800 && n_rej < 1200, "%d rejections of 2000, expected about 1000", n_rej);
}

/* ------------------------------------------------------------------------------------ */
/* (4) seeded runs are deterministic                                                     */

static void seeded_run(uint64_t seed, int32_t *out, int steps) {
    const pq_pair *pq = &PAIRS[0];
    enum { K = 4 };
    float q[K * V8], p[(K + 1) * V8], scratch[V8];
    fill_rows(q, pq->q, K, V8);
    fill_rows(p, pq->p, K + 1, V8);
    sd_rng draft_rng, verify_rng;
    sd_rng_seed(&draft_rng, seed);
    sd_rng_seed(&verify_rng, seed + 1);
    for (int s = 0; s < steps; s++) {
        int32_t draft[K];
        for (int i = 0; i < K; i++)
            draft[i] = sd_sample(q + i * V8, V8, sd_rng_uniform(&draft_rng));
        sd_verify_result res;
        cr_assert_eq(sd_verify_sample(draft, K, q, p, V8, &verify_rng, scratch, &res, NULL), SD_OK);
        for (int j = 0; j <= K; j++)
            out[s * (K + 1) + j] = j < res.n_tokens ? res.tokens[j] : -1;
    }
}

Test(verify_sample, seeded_runs_are_deterministic) {
    enum { STEPS = 1000, W = 5 };
    static int32_t a[STEPS * W], b[STEPS * W], c[STEPS * W];
    seeded_run(123, a, STEPS);
    seeded_run(123, b, STEPS);
    seeded_run(124, c, STEPS);
    cr_assert(memcmp(a, b, sizeof a) == 0, "same seed gave different outputs");
    cr_assert(memcmp(a, c, sizeof a) != 0, "different seeds gave identical outputs");
}

/* ------------------------------------------------------------------------------------ */
/* (5) argument errors                                                                   */

Test(verify_sample, bad_arguments_are_rejected) {
    float q[SD_MAX_DRAFT * V6], p[(SD_MAX_DRAFT + 2) * V6], scratch[V6];
    for (int i = 0; i < SD_MAX_DRAFT; i++)
        uniform_row(q + i * V6);
    for (int i = 0; i < SD_MAX_DRAFT + 2; i++)
        uniform_row(p + i * V6);
    int32_t draft[SD_MAX_DRAFT + 1] = {0};
    sd_rng rng, before;
    sd_rng_seed(&rng, 9);
    before = rng;
    sd_verify_result res;
    memset(&res, 0x55, sizeof res);
    const sd_verify_result res_before = res;
    sd_error err = {0};

    cr_assert_eq(sd_verify_sample(draft, -1, q, p, V6, &rng, scratch, &res, &err), SD_ERR_ARG);
    cr_assert_eq(err.status, SD_ERR_ARG);
    cr_assert(strstr(err.msg, "k = -1") != NULL, "%s", err.msg);
    cr_assert_eq(sd_verify_sample(draft, SD_MAX_DRAFT + 1, q, p, V6, &rng, scratch, &res, &err),
                 SD_ERR_ARG);
    cr_assert(strstr(err.msg, "k = 17") != NULL, "%s", err.msg);
    draft[1] = -1;
    cr_assert_eq(sd_verify_sample(draft, 3, q, p, V6, &rng, scratch, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "draft[1] = -1") != NULL, "%s", err.msg);
    draft[1] = V6;
    cr_assert_eq(sd_verify_sample(draft, 3, q, p, V6, &rng, scratch, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "draft[1] = 6") != NULL, "%s", err.msg);
    draft[1] = 0;
    q[2 * V6 + 4] = 0.0f; /* drafted token with q(x) == 0 */
    draft[2] = 4;
    cr_assert_eq(sd_verify_sample(draft, 3, q, p, V6, &rng, scratch, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "q[2][4]") != NULL, "%s", err.msg);
    cr_assert_eq(sd_verify_sample(draft, 1, q, p, 0, &rng, scratch, &res, &err), SD_ERR_ARG);
    cr_assert_eq(sd_verify_sample(draft, 1, q, p, V6, NULL, scratch, &res, &err), SD_ERR_ARG);
    cr_assert_eq(sd_verify_sample(draft, 1, NULL, p, V6, &rng, scratch, &res, &err), SD_ERR_ARG);

    /* Nothing was consumed or written by the failing calls. */
    cr_assert(memcmp(&rng, &before, sizeof rng) == 0, "a failing call advanced the RNG");
    cr_assert(memcmp(&res, &res_before, sizeof res) == 0, "a failing call wrote *res");
    cr_assert_eq(sd_verify_sample(draft, 1, q, p, V6, &rng, scratch, &res, NULL), SD_OK);
    cr_assert(memcmp(&rng, &before, sizeof rng) != 0);
}

Test(verify_greedy, bad_arguments_are_rejected) {
    float logits[(SD_MAX_DRAFT + 2) * V6] = {0};
    int32_t draft[SD_MAX_DRAFT + 1] = {0};
    sd_verify_result res;
    sd_error err = {0};
    cr_assert_eq(sd_verify_greedy(draft, -1, logits, V6, &res, &err), SD_ERR_ARG);
    cr_assert_eq(sd_verify_greedy(draft, SD_MAX_DRAFT + 1, logits, V6, &res, &err), SD_ERR_ARG);
    cr_assert_eq(sd_verify_greedy(draft, SD_MAX_DRAFT, logits, V6, &res, &err), SD_OK);
    draft[5] = V6;
    cr_assert_eq(sd_verify_greedy(draft, 6, logits, V6, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "draft[5] = 6") != NULL, "%s", err.msg);
    draft[5] = -3;
    cr_assert_eq(sd_verify_greedy(draft, 6, logits, V6, &res, &err), SD_ERR_ARG);
    draft[5] = 0;
    cr_assert_eq(sd_verify_greedy(draft, 6, logits, 0, &res, &err), SD_ERR_ARG);
    logits[2] = NAN;
    cr_assert_eq(sd_verify_greedy(draft, 6, logits, V6, &res, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "NaN") != NULL, "%s", err.msg);
}

/* ------------------------------------------------------------------------------------ */
/* (6) greedy verification                                                               */

Test(verify_greedy, accepted_prefix_and_correction) {
    /* argmax per row: 2, 4, 1, 0 */
    const float logits[4 * V6] = {
        0.1f,  0.2f, 3.0f, -1.0f, 0.0f, 0.5f, /* row 0 */
        0.0f,  0.0f, 0.0f, 0.0f,  9.0f, 8.9f, /* row 1 */
        -5.0f, 7.0f, 6.0f, 6.5f,  1.0f, 1.0f, /* row 2 */
        2.0f,  1.0f, 1.0f, 1.0f,  1.0f, 1.0f, /* row 3 (bonus) */
    };
    sd_verify_result res;
    const int32_t all[3] = {2, 4, 1};
    cr_assert_eq(sd_verify_greedy(all, 3, logits, V6, &res, NULL), SD_OK);
    cr_assert_eq(res.n_accepted, 3);
    cr_assert_eq(res.n_tokens, 4);
    cr_assert(res.tokens[0] == 2 && res.tokens[1] == 4 && res.tokens[2] == 1 && res.tokens[3] == 0);

    const int32_t some[3] = {2, 5, 1};
    cr_assert_eq(sd_verify_greedy(some, 3, logits, V6, &res, NULL), SD_OK);
    cr_assert_eq(res.n_accepted, 1);
    cr_assert_eq(res.n_tokens, 2);
    cr_assert(res.tokens[0] == 2 && res.tokens[1] == 4);

    const int32_t none[3] = {0, 4, 1};
    cr_assert_eq(sd_verify_greedy(none, 3, logits, V6, &res, NULL), SD_OK);
    cr_assert_eq(res.n_accepted, 0);
    cr_assert_eq(res.n_tokens, 1);
    cr_assert_eq(res.tokens[0], 2);

    cr_assert_eq(sd_verify_greedy(NULL, 0, logits, V6, &res, NULL), SD_OK);
    cr_assert(res.n_accepted == 0 && res.n_tokens == 1 && res.tokens[0] == 2);
}

Test(verify_greedy, ties_go_to_lowest_id) {
    const float logits[2 * V6] = {
        1.0f, 3.0f, 2.0f, 3.0f, 3.0f, 0.0f, /* max 3 at ids 1, 3, 4 */
        0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, /* all equal: id 0 */
    };
    sd_verify_result res;
    const int32_t d3[1] = {3};
    cr_assert_eq(sd_verify_greedy(d3, 1, logits, V6, &res, NULL), SD_OK);
    cr_assert(res.n_accepted == 0 && res.tokens[0] == 1, "tie must resolve to id 1, got %d",
              res.tokens[0]);
    const int32_t d1[1] = {1};
    cr_assert_eq(sd_verify_greedy(d1, 1, logits, V6, &res, NULL), SD_OK);
    cr_assert(res.n_accepted == 1 && res.tokens[0] == 1 && res.tokens[1] == 0);
    cr_assert_eq(sd_argmax(logits, V6), 1);
    const float with_nan[4] = {NAN, 1.0f, NAN, 1.0f};
    cr_assert_eq(sd_argmax(with_nan, 4), 1);
}

/* Greedy through sd_warp(temp 0) + sd_verify_sample gives sd_verify_greedy's answer. */
Test(verify_greedy, matches_sampling_with_temp0_rows) {
    enum { N = 500, K = 5 };
    static float tl[(K + 1) * N], dl[K * N], p[(K + 1) * N], q[K * N], scratch[N];
    static int32_t iscratch[N];
    sd_rng gen, rng;
    sd_rng_seed(&gen, 8);
    sd_rng_seed(&rng, 9);
    const sd_sampling_params greedy = {.temp = 0.0f, .top_k = 40, .top_p = 0.9f};
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < (K + 1) * N; i++)
            tl[i] = (float)(int)(4.0 * randn(&gen)); /* ties */
        int32_t draft[K];
        for (int i = 0; i < K; i++) {
            /* draft agrees with the target's logits on a random prefix */
            const int agree = sd_rng_uniform(&gen) < 0.7;
            for (int j = 0; j < N; j++)
                dl[i * N + j] = agree ? tl[i * N + j] : (float)randn(&gen);
            cr_assert_eq(sd_warp(&greedy, dl + i * N, N, q + i * N, iscratch, NULL), SD_OK);
            draft[i] = sd_sample(q + i * N, N, sd_rng_uniform(&rng));
            cr_assert_eq(draft[i], sd_argmax(dl + i * N, N));
        }
        for (int i = 0; i <= K; i++)
            cr_assert_eq(sd_warp(&greedy, tl + i * N, N, p + i * N, iscratch, NULL), SD_OK);
        sd_verify_result a, b;
        cr_assert_eq(sd_verify_greedy(draft, K, tl, N, &a, NULL), SD_OK);
        cr_assert_eq(sd_verify_sample(draft, K, q, p, N, &rng, scratch, &b, NULL), SD_OK);
        cr_assert_eq(a.n_accepted, b.n_accepted);
        cr_assert_eq(a.n_tokens, b.n_tokens);
        for (int j = 0; j < a.n_tokens; j++)
            cr_assert_eq(a.tokens[j], b.tokens[j]);
    }
}

/* ------------------------------------------------------------------------------------ */
/* (7) warps                                                                             */

static void assert_sums_to_one(const float *probs, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        cr_assert(probs[i] >= 0.0f && !isnan(probs[i]), "probs[%d] = %g", i, (double)probs[i]);
        s += probs[i];
    }
    cr_assert(fabs(s - 1.0) <= 1e-5, "probabilities sum to %.9f", s);
}

/* sd_warp vs the double reference: same kept set, values within 1e-6, sum 1 within 1e-5.
 * A kept entry whose probability is below float's range (< 1e-30 in the reference,
 * e.g. at temp 0.05) is 0 in sd_warp: that is underflow, not a dropped token. */
static void compare_to_ref(const sd_sampling_params *sp, const float *logits, int n,
                           const char *what) {
    float *probs = malloc(sizeof(float) * (size_t)n);
    int32_t *scratch = malloc(sizeof(int32_t) * (size_t)n);
    double *ref = malloc(sizeof(double) * (size_t)n);
    cr_assert(probs && scratch && ref);
    sd_error err = {0};
    cr_assert_eq(sd_warp(sp, logits, n, probs, scratch, &err), SD_OK, "%s", err.msg);
    const int m = ref_warp(logits, n, sp->temp, sp->top_k, sp->top_p, ref);
    int nz = 0, underflow = 0;
    for (int i = 0; i < n; i++) {
        nz += probs[i] != 0.0f;
        if (probs[i] == 0.0f && ref[i] != 0.0 && ref[i] < 1e-30) {
            underflow++;
            continue;
        }
        cr_assert((probs[i] != 0.0f) == (ref[i] != 0.0),
                  "%s (temp %g top_k %d top_p %g): id %d kept %d, reference %d", what,
                  (double)sp->temp, sp->top_k, (double)sp->top_p, i, probs[i] != 0.0f,
                  ref[i] != 0.0);
        cr_assert(fabs((double)probs[i] - ref[i]) <= 1e-6, "%s: probs[%d] = %.9g, reference %.9g",
                  what, i, (double)probs[i], ref[i]);
    }
    cr_assert_eq(nz + underflow, m, "%s: %d kept (+%d underflowed), reference %d", what, nz,
                 underflow, m);
    assert_sums_to_one(probs, n);
    free(probs);
    free(scratch);
    free(ref);
}

Test(warp, temperature_matches_double_softmax) {
    enum { N = 1000 };
    static float logits[N];
    sd_rng gen;
    sd_rng_seed(&gen, 31);
    const float temps[] = {0.05f, 0.3f, 0.7f, 1.0f, 1.5f, 10.0f};
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        for (int i = 0; i < N; i++)
            logits[i] = (float)(2.0 * randn(&gen) + 20.0);
        const sd_sampling_params sp = {.temp = temps[t], .top_k = 0, .top_p = 1.0f};
        compare_to_ref(&sp, logits, N, "temperature");
    }
}

Test(warp, no_ranking_when_top_k_and_top_p_are_off) {
    enum { N = 300 };
    static float logits[N], probs[N];
    static int32_t scratch[N];
    for (int i = 0; i < N; i++)
        logits[i] = (float)(i % 17) * 0.1f;
    for (int i = 0; i < N; i++)
        scratch[i] = -7;
    const sd_sampling_params sp = {.temp = 0.9f, .top_k = 0, .top_p = 1.0f};
    cr_assert_eq(sd_warp(&sp, logits, N, probs, scratch, NULL), SD_OK);
    for (int i = 0; i < N; i++)
        cr_assert_eq(scratch[i], -7, "scratch touched: no sort expected");
    const sd_sampling_params sp2 = {
        .temp = 0.9f, .top_k = N + 5, .top_p = 1.5f}; /* top_k >= n and top_p > 1 are off too */
    cr_assert_eq(sd_warp(&sp2, logits, N, probs, scratch, NULL), SD_OK);
    for (int i = 0; i < N; i++)
        cr_assert_eq(scratch[i], -7, "scratch touched: no sort expected");
    assert_sums_to_one(probs, N);
}

Test(warp, top_k_keeps_exactly_k_with_ties_by_id) {
    /* logits 0..4 repeated: ties everywhere. top_k = 7 keeps the three 4s (ids 4, 9, 14)
     * and the first four 3s (ids 3, 8, 13, 18). */
    enum { N = 25 };
    float logits[N], probs[N];
    int32_t scratch[N];
    for (int i = 0; i < N; i++)
        logits[i] = (float)(i % 5);
    logits[19] = logits[24] = 0.0f; /* two fewer 4s: 4s at ids 4, 9, 14 only */
    const sd_sampling_params sp = {.temp = 1.0f, .top_k = 7, .top_p = 1.0f};
    cr_assert_eq(sd_warp(&sp, logits, N, probs, scratch, NULL), SD_OK);
    const int keep[7] = {4, 9, 14, 3, 8, 13, 18};
    int nz = 0;
    for (int i = 0; i < N; i++)
        nz += probs[i] > 0.0f;
    cr_assert_eq(nz, 7);
    const double z = 3.0 * exp(4.0) + 4.0 * exp(3.0);
    for (int j = 0; j < 7; j++) {
        const double want = exp(logits[keep[j]]) / z;
        cr_assert(fabs(probs[keep[j]] - want) <= 1e-6, "id %d: %g vs %g", keep[j],
                  (double)probs[keep[j]], want);
    }
    assert_sums_to_one(probs, N);
}

Test(warp, top_k_large_vocab_matches_full_sort) {
    enum { N = 32000 };
    static float logits[N];
    sd_rng gen;
    sd_rng_seed(&gen, 51);
    const int ks[] = {1, 2, 40, 1000, 31999, 32000, 50000};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        for (int i = 0; i < N; i++) {
            /* half the rows quantised to force many ties at the boundary */
            const double x = 2.0 * randn(&gen);
            logits[i] = (float)(t % 2 ? floor(x * 4.0) / 4.0 : x);
        }
        const sd_sampling_params sp = {.temp = 0.8f, .top_k = ks[t], .top_p = 1.0f};
        compare_to_ref(&sp, logits, N, "top_k");
    }
}

Test(warp, top_p_keeps_smallest_prefix_reaching_p) {
    /* probabilities 0.5, 0.2, 0.15, 0.1, 0.05 (logits = log p, temp 1) */
    const float logits[5] = {logf(0.2f), logf(0.05f), logf(0.5f), logf(0.1f), logf(0.15f)};
    float probs[5];
    int32_t scratch[5];
    const sd_sampling_params sp = {
        .temp = 1.0f, .top_k = 0, .top_p = 0.8f}; /* 0.5 + 0.2 = 0.7 < 0.8 <= 0.85 */
    cr_assert_eq(sd_warp(&sp, logits, 5, probs, scratch, NULL), SD_OK);
    const float want[5] = {0.2f / 0.85f, 0.0f, 0.5f / 0.85f, 0.0f, 0.15f / 0.85f};
    for (int i = 0; i < 5; i++)
        cr_assert(fabs(probs[i] - want[i]) <= 1e-6, "probs[%d] = %g, want %g", i, (double)probs[i],
                  (double)want[i]);
    cr_assert(probs[1] == 0.0f && probs[3] == 0.0f);

    const sd_sampling_params tiny = {
        .temp = 1.0f, .top_k = 0, .top_p = 0.0f}; /* top_p 0: keep only the best */
    cr_assert_eq(sd_warp(&tiny, logits, 5, probs, scratch, NULL), SD_OK);
    cr_assert(probs[2] == 1.0f && probs[0] == 0.0f && probs[4] == 0.0f);

    /* four equal tokens, top_p 0.6: three kept (0.75 >= 0.6), lowest ids */
    const float flat[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    const sd_sampling_params sp6 = {.temp = 1.0f, .top_k = 0, .top_p = 0.6f};
    cr_assert_eq(sd_warp(&sp6, flat, 4, probs, scratch, NULL), SD_OK);
    for (int i = 0; i < 3; i++)
        cr_assert(fabs(probs[i] - 1.0 / 3.0) <= 1e-6);
    cr_assert_eq(probs[3], 0.0f);
}

Test(warp, top_p_and_top_k_large_vocab_match_reference) {
    enum { N = 32000 };
    static float logits[N];
    sd_rng gen;
    sd_rng_seed(&gen, 61);
    /* scale 0.05 gives a near-flat row (nucleus of most of the vocabulary: the full
     * sort fallback), scale 3 a peaked one (nucleus found in the first 128). */
    const double scales[] = {0.05, 0.5, 1.0, 3.0};
    const float top_ps[] = {0.5f, 0.9f, 0.95f, 0.999f};
    const int top_ks[] = {0, 40, 0, 2000};
    for (size_t s = 0; s < 4; s++) {
        for (size_t t = 0; t < 4; t++) {
            /* odd t: logits quantised to steps of 1/8, so the top-p boundary falls inside
             * runs of equal logits and the tie-break by id decides */
            for (int i = 0; i < N; i++) {
                const double x = scales[s] * randn(&gen);
                logits[i] = (float)(t % 2 ? floor(x * 8.0) / 8.0 : x);
            }
            const sd_sampling_params sp = {
                .temp = 0.8f, .top_k = top_ks[(s + t) % 4], .top_p = top_ps[t]};
            compare_to_ref(&sp, logits, N, "top_p");
        }
    }
}

/* A row of equal logits: the top-p boundary falls inside one run of ties, so the kept
 * set is the lowest ids. 10000 tokens of weight 1: top_p 0.25 needs exactly 2500 tokens,
 * top_p 0.3f (= 0.30000001192...) needs 3001. */
Test(warp, top_p_on_equal_logits_keeps_lowest_ids) {
    enum { N = 10000 };
    static float logits[N], probs[N];
    static int32_t scratch[N];
    for (int i = 0; i < N; i++)
        logits[i] = -2.5f;
    const float top_ps[2] = {0.25f, 0.3f};
    const int want[2] = {2500, 3001};
    for (int t = 0; t < 2; t++) {
        const sd_sampling_params sp = {.temp = 1.3f, .top_k = 0, .top_p = top_ps[t]};
        cr_assert_eq(sd_warp(&sp, logits, N, probs, scratch, NULL), SD_OK);
        for (int i = 0; i < N; i++) {
            const float expect = i < want[t] ? 1.0f / (float)want[t] : 0.0f;
            cr_assert(fabs(probs[i] - expect) <= 1e-9, "top_p %g: probs[%d] = %g, want %g",
                      (double)top_ps[t], i, (double)probs[i], (double)expect);
        }
        /* through the top-k path: top_k = N - 1 keeps ids 0 .. 9998, then top-p over
         * those 9999: 0.25 * 9999 = 2499.75 -> 2500 tokens, 0.3f * 9999 = 2999.7 -> 3000 */
        const int want_k[2] = {2500, 3000};
        const sd_sampling_params spk = {.temp = 1.3f, .top_k = N - 1, .top_p = top_ps[t]};
        cr_assert_eq(sd_warp(&spk, logits, N, probs, scratch, NULL), SD_OK);
        for (int i = 0; i < N; i++)
            cr_assert_eq(probs[i] > 0.0f, i < want_k[t], "top_k path, top_p %g: id %d",
                         (double)top_ps[t], i);
    }
}

Test(warp, greedy_is_one_hot_at_argmax) {
    const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY};
    float probs[6];
    int32_t scratch[6];
    const float temps[3] = {0.0f, -1.0f, -0.0f};
    for (int t = 0; t < 3; t++) {
        const sd_sampling_params sp = {.temp = temps[t], .top_k = 3, .top_p = 0.5f};
        cr_assert_eq(sd_warp(&sp, logits, 6, probs, scratch, NULL), SD_OK);
        for (int i = 0; i < 6; i++)
            cr_assert_eq(probs[i], i == 1 ? 1.0f : 0.0f);
    }
}

Test(warp, infinities) {
    float probs[4];
    int32_t scratch[4];
    const sd_sampling_params sp = {.temp = 0.7f, .top_k = 0, .top_p = 1.0f};
    const float neg[4] = {-INFINITY, 1.0f, -INFINITY, 1.0f};
    cr_assert_eq(sd_warp(&sp, neg, 4, probs, scratch, NULL), SD_OK);
    cr_assert(probs[0] == 0.0f && probs[2] == 0.0f && fabs(probs[1] - 0.5) < 1e-7 &&
              fabs(probs[3] - 0.5) < 1e-7);
    const float all_neg[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    cr_assert_eq(sd_warp(&sp, all_neg, 4, probs, scratch, NULL), SD_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(probs[i], 0.25f);
    const float pos[4] = {1.0f, INFINITY, 3.0f, INFINITY};
    const sd_sampling_params spk = {.temp = 0.7f, .top_k = 3, .top_p = 0.9f};
    cr_assert_eq(sd_warp(&spk, pos, 4, probs, scratch, NULL), SD_OK);
    cr_assert(probs[0] == 0.0f && probs[2] == 0.0f && probs[1] == 0.5f && probs[3] == 0.5f);
}

Test(warp, bad_arguments) {
    float logits[4] = {0.0f, 1.0f, NAN, 2.0f}, probs[4];
    int32_t scratch[4];
    sd_error err = {0};
    const sd_sampling_params sp = sd_sampling_default_params();
    cr_assert(sp.temp == 0.8f && sp.top_k == 40 && sp.top_p == 0.95f);
    cr_assert_eq(sd_warp(&sp, logits, 4, probs, scratch, &err), SD_ERR_ARG);
    cr_assert_eq(err.status, SD_ERR_ARG);
    cr_assert(strstr(err.msg, "logit[2] is NaN") != NULL, "%s", err.msg);
    const sd_sampling_params greedy = {.temp = 0.0f, .top_k = 0, .top_p = 1.0f};
    cr_assert_eq(sd_warp(&greedy, logits, 4, probs, scratch, NULL), SD_ERR_ARG,
                 "NaN must fail greedy too");
    logits[2] = 0.5f;
    cr_assert_eq(sd_warp(&sp, logits, 0, probs, scratch, &err), SD_ERR_ARG);
    const sd_sampling_params nan_temp = {.temp = NAN, .top_k = 0, .top_p = 1.0f},
                             inf_temp = {.temp = INFINITY, .top_k = 0, .top_p = 1.0f},
                             nan_p = {.temp = 1.0f, .top_k = 0, .top_p = NAN};
    cr_assert_eq(sd_warp(&nan_temp, logits, 4, probs, scratch, &err), SD_ERR_ARG);
    cr_assert_eq(sd_warp(&inf_temp, logits, 4, probs, scratch, &err), SD_ERR_ARG);
    cr_assert_eq(sd_warp(&nan_p, logits, 4, probs, scratch, &err), SD_ERR_ARG);
    cr_assert_eq(sd_warp(NULL, logits, 4, probs, scratch, &err), SD_ERR_ARG);
    cr_assert_eq(sd_warp(&sp, logits, 4, probs, scratch, &err), SD_OK);
    cr_assert_eq(sd_warp(&sp, logits, 1, probs, scratch, &err), SD_OK);
    cr_assert_eq(probs[0], 1.0f);
}

/* ------------------------------------------------------------------------------------ */
/* (8) sd_sample with injected uniforms                                                  */

Test(sample, inverse_cdf_with_injected_u) {
    const double below_one = nextafter(1.0, 0.0);
    const float a[4] = {0.25f, 0.0f, 0.25f, 0.5f};
    cr_assert_eq(sd_sample(a, 4, 0.0), 0);
    cr_assert_eq(sd_sample(a, 4, 0.2499999), 0);
    cr_assert_eq(sd_sample(a, 4, 0.25), 2, "u on a boundary goes to the next positive entry");
    cr_assert_eq(sd_sample(a, 4, 0.4999999), 2);
    cr_assert_eq(sd_sample(a, 4, 0.5), 3);
    cr_assert_eq(sd_sample(a, 4, below_one), 3);
    cr_assert_eq(sd_sample(a, 4, 1.0), 3);

    const float lead[4] = {0.0f, 0.0f, 1.0f, 0.0f}; /* zeros are skipped at both ends */
    cr_assert_eq(sd_sample(lead, 4, 0.0), 2);
    cr_assert_eq(sd_sample(lead, 4, below_one), 2);

    const float trail[4] = {0.5f, 0.5f, 0.0f, 0.0f};
    cr_assert_eq(sd_sample(trail, 4, below_one), 1);

    const float unnorm[2] = {2.0f, 6.0f}; /* u scales the row's own sum */
    cr_assert_eq(sd_sample(unnorm, 2, 0.2499), 0);
    cr_assert_eq(sd_sample(unnorm, 2, 0.25), 1);

    const float small[3] = {0.25f, 0.75f, 1e-9f}; /* a small last entry is still reachable */
    cr_assert_eq(sd_sample(small, 3, below_one), 2);
    cr_assert_eq(sd_sample(small, 3, 0.9999999), 1);

    const float zero[3] = {0.0f, -1.0f, 0.0f};
    cr_assert_eq(sd_sample(zero, 3, 0.5), -1);
    cr_assert_eq(sd_sample(a, 0, 0.5), -1);
}

/* ------------------------------------------------------------------------------------ */
/* (9) RNG                                                                               */

Test(rng, known_answers) {
    /* Independent reference: the published splitmix64/xoshiro256** algorithms in Python
     * (arbitrary-precision ints masked to 64 bits). splitmix64(0) first output
     * 0xe220a8397b1dcdaf is also the value in Vigna's reference. */
    sd_rng r;
    sd_rng_seed(&r, 0);
    cr_assert_eq(r.s[0], UINT64_C(0xe220a8397b1dcdaf));
    cr_assert_eq(r.s[3], UINT64_C(0xf88bb8a8724c81ec));
    cr_assert_eq(sd_rng_next_u64(&r), UINT64_C(0x99ec5f36cb75f2b4));
    cr_assert_eq(sd_rng_next_u64(&r), UINT64_C(0xbf6e1f784956452a));
    cr_assert_eq(sd_rng_next_u64(&r), UINT64_C(0x1a5f849d4933e6e0));
    sd_rng_seed(&r, 42);
    cr_assert_eq(sd_rng_next_u64(&r), UINT64_C(0x15780b2e0c2ec716));
    sd_rng_seed(&r, 42);
    cr_assert_eq(sd_rng_uniform(&r), 755370490430936.0 * 0x1.0p-53);
    cr_assert_eq(sd_rng_uniform(&r), 3413550631330343.0 * 0x1.0p-53);
}

Test(rng, uniform_range_and_mean) {
    sd_rng r;
    sd_rng_seed(&r, 2024);
    const long n = 1000000;
    double sum = 0.0, lo = 1.0, hi = 0.0;
    long below_half = 0;
    for (long i = 0; i < n; i++) {
        const double u = sd_rng_uniform(&r);
        cr_assert(u >= 0.0 && u < 1.0, "u = %.17g out of [0, 1)", u);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        below_half += u < 0.5;
    }
    const double mean = sum / (double)n;
    /* sd of the mean = sqrt(1/12 / 1e6) = 2.89e-4; bound 5 sd = 1.44e-3. */
    cr_assert(fabs(mean - 0.5) < 1.44e-3, "mean %.6f", mean);
    /* fraction below 0.5: sd = 0.5 / 1000 = 5e-4; bound 5 sd. */
    cr_assert(fabs((double)below_half / (double)n - 0.5) < 2.5e-3);
    cr_assert(lo < 1e-5 && hi > 1.0 - 1e-5, "range [%g, %g]", lo, hi);
}

Test(rng, seeds_are_independent_streams) {
    sd_rng a, b, c;
    sd_rng_seed(&a, 7);
    sd_rng_seed(&b, 7);
    sd_rng_seed(&c, 8);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        const double x = sd_rng_uniform(&a);
        cr_assert_eq(x, sd_rng_uniform(&b));
        same_c += x == sd_rng_uniform(&c);
    }
    cr_assert_eq(same_c, 0);
}
