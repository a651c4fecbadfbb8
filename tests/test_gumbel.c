/*
 * Keyed draws and drafter-invariant speculative sampling (--spec-sampling gumbel;
 * Daliri, Musco, Suresh 2024, arXiv 2408.07978), checked against independent
 * computations:
 *   - keyed uniforms: a pure function of (seed, position, purpose, index), in (0, 1),
 *     uniform (chi-square over 64 bins, false-alarm rate 1e-4), distinct purposes and
 *     positions independent (the correlation of paired draws within 4 sigma);
 *   - sd_gumbel_sample: its draws over many positions follow the row's distribution
 *     (chi-square, false alarm 1e-4); equal to an independent Gumbel-max (argmax of
 *     log p + G with G computed here, no pruning) at every position; a negative control
 *     (the Gumbel noise added to p instead of log p) is rejected by the same test;
 *   - verification in Gumbel mode: the emitted token at every position is the target's
 *     own Gumbel draw whatever the draft proposed (drafter invariance), so the first token
 *     follows p (chi-square, 1e-4) with a poor draft, and the acceptance is at least the
 *     coupling bound (1 - TV) / (1 + TV) (within 4 sigma); a negative control that emits
 *     the draft's token when it is accepted by a rejection test on Gumbel proposals fails;
 *   - end to end on a random pair: in Gumbel mode the text is the target-alone text of
 *     the same seed for every draft type, K (1..8) and policy (fixed, adaptive, sweep), and
 *     the same command twice gives the same text; rejection sampling with keyed draws gives
 *     the same text for the same K sequence (fixed K) run to run.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "verify/sd_verify.h"

TestSuite(gumbel, .timeout = 600);

/* Upper critical value of chi-square with df degrees of freedom at false-alarm rate
 * 1e-4 (z = 3.719), Wilson-Hilferty (error < 1% for df >= 10). */
static double chi2_crit_1e4(int df) {
    const double z = 3.719016, a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Chi-square of counts[0 .. n) against probabilities p (cells with expected < 5
 * pooled); *df out. A count where p = 0 makes it infinite. */
static double chi2(const int64_t *counts, const double *p, int n, int64_t trials, int *df) {
    *df = n - 1;
    double stat = 0.0, pool_e = 0.0, pool_o = 0.0;
    int cells = 0;
    for (int v = 0; v < n; v++) {
        if (p[v] == 0.0) {
            if (counts[v]) return INFINITY;
            continue;
        }
        const double e = p[v] * (double)trials;
        if (e < 5.0) {
            pool_e += e;
            pool_o += (double)counts[v];
            continue;
        }
        stat += (counts[v] - e) * (counts[v] - e) / e;
        cells++;
    }
    if (pool_e > 0.0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    *df = cells - 1;
    return stat;
}

Test(gumbel, keyed_uniforms_are_pure_uniform_and_independent) {
    cr_assert_eq(sd_key_uniform(7, 12, SD_DRAW_TOKEN, 0), sd_key_uniform(7, 12, SD_DRAW_TOKEN, 0));
    int64_t bins[64] = {0};
    const int64_t n = 200000;
    double sxy = 0, sx = 0, sy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) {
        const double u = sd_key_uniform(42, i, SD_DRAW_ACCEPT, 0);
        cr_assert(u > 0.0 && u < 1.0);
        bins[(int)(u * 64)]++;
        /* a second purpose at the same position, and the next position */
        const double w = sd_key_uniform(42, i, SD_DRAW_TOKEN, 0);
        sx += u;
        sy += w;
        sxy += u * w;
        sxx += u * u;
        syy += w * w;
    }
    double p[64];
    for (int b = 0; b < 64; b++)
        p[b] = 1.0 / 64;
    int df;
    const double s = chi2(bins, p, 64, n, &df);
    cr_assert_lt(s, chi2_crit_1e4(df), "uniform: chi-square %.1f (df %d)", s, df);
    const double cov = sxy / n - (sx / n) * (sy / n);
    const double r = cov / sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
    cr_assert_lt(fabs(r), 4.0 / sqrt((double)n), "purposes correlate: r = %g", r);
    /* Seeds and positions change the draw. */
    cr_assert_neq(sd_key_uniform(1, 5, SD_DRAW_GUMBEL, 3), sd_key_uniform(2, 5, SD_DRAW_GUMBEL, 3));
    cr_assert_neq(sd_key_uniform(1, 5, SD_DRAW_GUMBEL, 3), sd_key_uniform(1, 6, SD_DRAW_GUMBEL, 3));
    cr_assert_neq(sd_key_uniform(1, 5, SD_DRAW_GUMBEL, 3), sd_key_uniform(1, 5, SD_DRAW_GUMBEL, 4));
}

/* A fixed, uneven distribution over n ids (some zero). */
static void make_row(float *row, int n, uint64_t seed) {
    double sum = 0.0;
    for (int v = 0; v < n; v++) {
        const double u = sd_key_uniform(seed, v, SD_DRAW_TOKEN, 99);
        row[v] = v % 7 == 3 ? 0.0f : (float)(u * u * u + 0.002);
        sum += row[v];
    }
    for (int v = 0; v < n; v++)
        row[v] = (float)(row[v] / sum);
}

/* Gumbel-max computed here without the race's pruning: argmax log p + G. */
static int32_t gumbel_ref(const float *p, int n, uint64_t seed, int64_t pos) {
    int32_t best = -1;
    double bv = -INFINITY;
    for (int v = 0; v < n; v++) {
        if (!(p[v] > 0.0f)) continue;
        const double g = -log(-log(sd_key_uniform(seed, pos, SD_DRAW_GUMBEL, (uint64_t)v)));
        const double x = log((double)p[v]) + g;
        if (x > bv) {
            bv = x;
            best = v;
        }
    }
    return best;
}

Test(gumbel, gumbel_max_follows_the_row_and_matches_the_reference) {
    enum { N = 40 };
    float row[N];
    make_row(row, N, 3);
    double p[N];
    for (int v = 0; v < N; v++)
        p[v] = row[v];
    int64_t counts[N] = {0}, bad[N] = {0};
    const int64_t trials = 100000;
    for (int64_t t = 0; t < trials; t++) {
        const int32_t y = sd_gumbel_sample(row, N, NULL, 5, t);
        cr_assert(y >= 0 && y < N && row[y] > 0.0f);
        if (t < 3000) cr_assert_eq(y, gumbel_ref(row, N, 5, t), "position %lld", (long long)t);
        counts[y]++;
        /* Negative control: the noise added to p instead of log p. */
        int32_t wrong = 0;
        double wv = -INFINITY;
        for (int v = 0; v < N; v++) {
            if (!(row[v] > 0.0f)) continue;
            const double x = row[v] - log(-log(sd_key_uniform(5, t, SD_DRAW_GUMBEL, v)));
            if (x > wv) {
                wv = x;
                wrong = v;
            }
        }
        bad[wrong]++;
    }
    int df;
    const double s = chi2(counts, p, N, trials, &df), sb = chi2(bad, p, N, trials, &df);
    cr_log_info("gumbel: chi-square %.1f, negative control %.1f, critical %.1f (df %d)", s, sb,
                chi2_crit_1e4(df), df);
    cr_assert_lt(s, chi2_crit_1e4(df), "Gumbel-max draws do not follow p: %.1f", s);
    cr_assert_gt(sb, chi2_crit_1e4(df), "the negative control passed: the test has no power");
    /* A row over a subset (ids): the noise is that of the ids, not of the columns. */
    const int32_t ids[4] = {30, 2, 17, 9};
    const float sub[4] = {0.1f, 0.4f, 0.2f, 0.3f};
    float full[N] = {0};
    for (int j = 0; j < 4; j++)
        full[ids[j]] = sub[j];
    for (int64_t t = 0; t < 500; t++)
        cr_assert_eq(ids[sd_gumbel_sample(sub, 4, ids, 9, t)],
                     sd_gumbel_sample(full, N, NULL, 9, t));
    cr_assert_eq(sd_gumbel_sample(NULL, 4, NULL, 1, 1), -1);
    const float zero[3] = {0, 0, 0};
    cr_assert_eq(sd_gumbel_sample(zero, 3, NULL, 1, 1), -1);
}

/* Rows callback over dense rows (for sd_verify_keyed). */
typedef struct dense_rows {
    const float *p;
    int n;
    int reads;
} dense_rows;
static const float *dense_row(void *user, int32_t i, sd_error *err) {
    (void)err;
    dense_rows *d = user;
    d->reads++;
    return d->p + (size_t)i * d->n;
}

/* Total variation distance. */
static double tv(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int v = 0; v < n; v++)
        s += fabs((double)a[v] - (double)b[v]);
    return 0.5 * s;
}

Test(gumbel, verification_is_drafter_invariant_and_exact) {
    enum { N = 32, K = 3 };
    float p[(K + 1) * N], q[K * N];
    for (int i = 0; i <= K; i++)
        make_row(p + i * N, N, 10 + i);
    for (int i = 0; i < K; i++)
        make_row(q + i * N, N, 50 + i); /* a poor draft: another distribution */
    sd_sampling_params sp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .spec = SD_SPEC_GUMBEL};
    const int64_t trials = 60000;
    int64_t first[N] = {0}, accepted0 = 0;
    for (int64_t t = 0; t < trials; t++) {
        const uint64_t seed = (uint64_t)t;
        const int64_t pos0 = 17;
        /* The draft proposes its own Gumbel draws from q with the shared noise. */
        int32_t draft[K];
        for (int i = 0; i < K; i++)
            draft[i] = sd_gumbel_sample(q + i * N, N, NULL, seed, pos0 + i);
        dense_rows d = {p, N, 0};
        sd_verify_result res;
        sd_error err = {0};
        cr_assert_eq(
            sd_verify_keyed(&sp, draft, K, NULL, dense_row, &d, N, seed, pos0, NULL, &res, &err),
            SD_OK, "%s", err.msg);
        /* Drafter invariance: every emitted token is the target's own draw there, and the
         * rows read stop at the first rejection. */
        for (int32_t i = 0; i < res.n_tokens; i++)
            cr_assert_eq(res.tokens[i], sd_gumbel_sample(p + i * N, N, NULL, seed, pos0 + i));
        cr_assert_eq(d.reads, res.n_tokens);
        first[res.tokens[0]]++;
        accepted0 += res.n_accepted > 0;
    }
    double pd[N];
    for (int v = 0; v < N; v++)
        pd[v] = p[v];
    int df;
    const double s = chi2(first, pd, N, trials, &df);
    cr_assert_lt(s, chi2_crit_1e4(df), "first token does not follow p: chi-square %.1f", s);
    /* Acceptance of the first draft token: at least (1 - TV) / (1 + TV). */
    const double t0 = tv(p, q, N), bound = (1.0 - t0) / (1.0 + t0);
    const double rate = (double)accepted0 / trials;
    const double sigma = sqrt(bound * (1.0 - bound) / trials);
    cr_log_info("gumbel: TV %.3f, acceptance %.4f, bound (1-TV)/(1+TV) %.4f, 1-TV %.4f", t0, rate,
                bound, 1.0 - t0);
    cr_assert_geq(rate, bound - 4.0 * sigma, "acceptance %.4f below the bound %.4f", rate, bound);
}

Test(gumbel, negative_control_rejection_test_on_gumbel_proposals_fails) {
    /* Treating Gumbel proposals as draws from q in a rejection test is not exact: the
     * draft's token is correlated with... nothing the test uses, but the residual draw
     * below is taken from q's Gumbel noise at the same position, so the emitted token is
     * biased towards q. The chi-square must catch it. */
    enum { N = 24 };
    float p[N], q[N];
    make_row(p, N, 71);
    make_row(q, N, 72);
    const int64_t trials = 60000;
    int64_t counts[N] = {0};
    for (int64_t t = 0; t < trials; t++) {
        const int32_t x = sd_gumbel_sample(q, N, NULL, (uint64_t)t, 3);
        const double u = sd_key_uniform((uint64_t)t, 3, SD_DRAW_ACCEPT, 0);
        /* wrong: on rejection emit the target's Gumbel draw, which is correlated with x */
        const int32_t y = u < (double)p[x] / (double)q[x] ? x : sd_gumbel_sample(p, N, NULL, t, 3);
        counts[y]++;
    }
    double pd[N];
    for (int v = 0; v < N; v++)
        pd[v] = p[v];
    int df;
    const double s = chi2(counts, pd, N, trials, &df);
    cr_log_info("negative control: chi-square %.1f, critical %.1f", s, chi2_crit_1e4(df));
    cr_assert_gt(s, chi2_crit_1e4(df), "a biased sampler passed the chi-square test");
}

/* ---- end to end ---- */

static char g_dir[1024], g_t[2048], g_d[2048];

static void run_text(sd_engine *e, const sd_gen_params *gp, int32_t *out, int32_t *n_out) {
    const int32_t prompt[4] = {1, 5, 9, 13};
    sd_gen_stats st;
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, gp, prompt, 4, NULL, NULL, out, gp->n_predict, &st, &err),
                 SD_OK, "%s", err.msg);
    *n_out = st.n_generated;
}

Test(gumbel, same_seed_same_text_whatever_the_draft_k_and_policy) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = g_d;
    ep.n_threads = 1;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    enum { N = 48 };
    for (uint64_t seed = 1; seed <= 3; seed++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = N;
        gp.samp.temp = 0.9f;
        gp.samp.top_k = 0;
        gp.samp.top_p = 0.95f;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.seed = seed;
        gp.draft_type = SD_DRAFT_NONE;
        int32_t ref[N], got[N], n_ref, n_got;
        run_text(e, &gp, ref, &n_ref);
        const sd_draft_type types[] = {SD_DRAFT_LLM, SD_DRAFT_NGRAM, SD_DRAFT_NGRAM_LLM,
                                       SD_DRAFT_SUFFIX_LLM};
        const sd_k_policy pols[] = {SD_K_FIXED, SD_K_ADAPTIVE, SD_K_SWEEP};
        int64_t accepted = 0;
        for (int ti = 0; ti < 4; ti++)
            for (int pi = 0; pi < 3; pi++)
                for (int32_t k = 1; k <= 8; k += (k < 4 ? 1 : 4)) {
                    gp.draft_type = types[ti];
                    gp.k_policy = pols[pi];
                    gp.n_draft = k;
                    gp.draft_p_min = (k % 2) ? 0.0f : 0.6f;
                    gp.draft_min = 1;
                    run_text(e, &gp, got, &n_got);
                    cr_assert_eq(n_got, n_ref, "seed %llu %s %s K %d: %d tokens vs %d",
                                 (unsigned long long)seed, sd_draft_type_name(types[ti]),
                                 sd_k_policy_name(pols[pi]), k, n_got, n_ref);
                    for (int32_t i = 0; i < n_ref; i++)
                        cr_assert_eq(got[i], ref[i], "seed %llu %s %s K %d: token %d differs",
                                     (unsigned long long)seed, sd_draft_type_name(types[ti]),
                                     sd_k_policy_name(pols[pi]), k, i);
                    accepted += got[0] >= 0;
                }
        (void)accepted;
        /* Another seed gives another text (the seed is used). */
        gp.seed = seed + 100;
        gp.draft_type = SD_DRAFT_NONE;
        run_text(e, &gp, got, &n_got);
        int same = n_got == n_ref;
        for (int32_t i = 0; same && i < n_ref; i++)
            same = got[i] == ref[i];
        cr_assert(!same, "seed %llu and %llu gave the same text", (unsigned long long)seed,
                  (unsigned long long)seed + 100);
    }
    /* Rejection sampling: fixed K, the same command twice, the same text. */
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = N;
    gp.samp.temp = 0.9f;
    gp.samp.spec = SD_SPEC_REJECTION;
    gp.draft_type = SD_DRAFT_LLM;
    gp.n_draft = 3;
    int32_t a[N], b[N], na, nb;
    run_text(e, &gp, a, &na);
    run_text(e, &gp, b, &nb);
    cr_assert_eq(na, nb);
    cr_assert(!memcmp(a, b, (size_t)na * sizeof *a), "rejection sampling: run to run differs");
    sd_engine_free(e);
    tu_rmdir(g_dir);
}
