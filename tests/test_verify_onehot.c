/*
 * tests/test_verify_onehot.c: one-hot verification (sd_verify_onehot), the exact
 * verification of a deterministic proposal (an n-gram match): the emitted tokens follow p
 * (chi-square, false-alarm rate 1e-4 per test), acceptance is p(x), and it is token for
 * token sd_verify_sample with explicit one-hot q rows; negative controls (resample from p
 * on rejection; always accept) must fail the same test; bad arguments are refused.
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

TestSuite(onehot, .timeout = 600);

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
