/*
 * tests/test_batch_policy.c: the batcher's adaptive K (runtime/engine/batch_policy.c),
 * white-box through the engine-private batcher_impl.h, as test_adaptive does for the
 * single-sequence controller.
 *
 * The cost lines are fed exact samples y = alpha + beta x at several sizes, so the
 * forgetting least-squares fit must give the line back; the step's K is then checked
 * against the batch throughput
 *     tokens(K) / time(K),  tokens(K) = base_yield + sum_r E_r(K),
 *     time(K) = T_t(base + n_d K) + K T_d(n_d)   (K > 0),
 * evaluated here from the lines as given and each request's acceptance estimates, over
 * traces of steps: a memory-bound target (a pass costs about the same over more rows)
 * keeps speculating as the batch grows, a compute-bound one (cost proportional to the
 * rows) turns it off as the batch grows, and after 64 steps at K = 0 one step probes.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "runtime/engine/batcher_impl.h"

/* A cost line fed exact samples at sizes x0 .. x0 + 7. */
static void feed_line(sd_cost_fit *f, double alpha, double beta, double x0, int n) {
    for (int i = 0; i < n; i++) {
        const double x = x0 + (double)(i % 8);
        sd_cost_fit_add(f, x, alpha + beta * x);
    }
}

Test(batch_policy, fit_returns_an_exact_line) {
    sd_cost_fit f;
    memset(&f, 0, sizeof f);
    cr_assert_eq(sd_cost_fit_eval(&f, 10.0), 0.0, "no sample: no estimate");
    feed_line(&f, 3.0, 0.25, 1.0, 40);
    for (double x = 1.0; x <= 200.0; x *= 2.0)
        cr_assert_float_eq(sd_cost_fit_eval(&f, x), 3.0 + 0.25 * x, 1e-6 * (3.0 + 0.25 * x),
                           "at %g", x);
}

Test(batch_policy, fit_of_one_size_uses_the_prior_slope) {
    sd_cost_fit f;
    memset(&f, 0, sizeof f);
    for (int i = 0; i < 5; i++)
        sd_cost_fit_add(&f, 4.0, 10.0);
    /* One size: through its mean with slope 0.35 of the one-token cost per token, i.e.
     * y(x) = 10 (1 + 0.35 (x - 1)) / (1 + 0.35 (4 - 1)). */
    const double base = 10.0 / (1.0 + 0.35 * 3.0);
    cr_assert_float_eq(sd_cost_fit_eval(&f, 4.0), 10.0, 1e-9);
    cr_assert_float_eq(sd_cost_fit_eval(&f, 1.0), base, 1e-9);
    cr_assert_float_eq(sd_cost_fit_eval(&f, 9.0), base * (1.0 + 0.35 * 8.0), 1e-9);
}

/* Requests with acceptance a at every position (observed until the estimate is there). */
static void make_choices(sd_choice *ch, int n, double a, int32_t k_max) {
    for (int i = 0; i < n; i++) {
        memset(&ch[i], 0, sizeof ch[i]);
        sd_adaptive_params ap = sd_adaptive_default_params();
        ap.k_max = k_max;
        sd_error err = {0};
        cr_assert_eq(sd_adaptive_init(&ch[i].ctl, &ap, &err), SD_OK, "%s", err.msg);
        /* Passes of k_max drafts whose accepted prefix is geometric: at least j
         * accepted when u < a^j, u spread evenly over (0, 1) (the golden-ratio
         * sequence), so each position is accepted with probability about a given the
         * ones before it. Whatever the estimates end up as, the reference reads them. */
        for (int p = 0; p < 400; p++) {
            const double u = fmod(0.5 + 0.6180339887498949 * p, 1.0);
            int32_t acc = 0;
            while (acc < k_max && u < pow(a, acc + 1))
                acc++;
            sd_adaptive_observe(&ch[i].ctl, k_max, acc, 0.1, 1.0);
        }
    }
}

/* The reference: the K in [0, k_max] of the best predicted batch rate (ties: the smaller). */
static int32_t best_k(const sd_choice *ch, int n_d, int32_t k_max, double t_a, double t_b,
                      double d_a, double d_b, int32_t base, double yield, double floor_a) {
    int32_t best = 0;
    double best_rate = -1.0;
    for (int32_t k = 0; k <= k_max; k++) {
        double tokens = yield;
        for (int i = 0; i < n_d; i++) {
            double e = 1.0, prod = 1.0;
            for (int32_t j = 1; j <= k; j++) {
                double aj = sd_adaptive_accept(&ch[i].ctl, j);
                prod *= aj > floor_a ? aj : floor_a;
                e += prod;
            }
            tokens += e;
        }
        double t = t_a + t_b * (base + n_d * k);
        if (k > 0) t += k * (d_a + d_b * n_d);
        const double rate = tokens / t;
        if (rate > best_rate * (1.0 + 1e-9)) {
            best_rate = rate;
            best = k;
        }
    }
    return best;
}

static sd_batcher *fresh_batcher(double t_a, double t_b, double d_a, double d_b) {
    static sd_batcher b;
    memset(&b, 0, sizeof b);
    feed_line(&b.tfit, t_a, t_b, 1.0, 40);
    feed_line(&b.dfit, d_a, d_b, 1.0, 40);
    return &b;
}

Test(batch_policy, nothing_measured_gives_a_middle_k) {
    sd_batcher b;
    memset(&b, 0, sizeof b);
    sd_choice ch[1];
    make_choices(ch, 1, 0.8, 4);
    const sd_choice *d[1] = {&ch[0]};
    cr_assert_eq(sd_batch_choose_k(&b, d, 1, 4, 1, 0.0), 2);
    cr_assert_eq(sd_batch_choose_k(&b, d, 1, 1, 1, 0.0), 1);
    cr_assert_eq(sd_batch_choose_k(&b, d, 0, 4, 1, 0.0), 0, "no drafting request: K 0");
}

Test(batch_policy, memory_bound_target_keeps_drafting_as_the_batch_grows) {
    /* A pass costs 20 ms plus 0.05 ms a row (weights read once per pass), a draft pass
     * 2 ms plus 0.01 a row: with acceptance 0.8 drafting pays at every batch size. */
    sd_batcher *b = fresh_batcher(20.0, 0.05, 2.0, 0.01);
    sd_choice ch[16];
    make_choices(ch, 16, 0.8, 6);
    const sd_choice *d[16];
    for (int n = 1; n <= 16; n++) {
        for (int i = 0; i < n; i++)
            d[i] = &ch[i];
        const int32_t k = sd_batch_choose_k(b, d, n, 6, n, 0.0);
        cr_assert_eq(k, best_k(ch, n, 6, 20.0, 0.05, 2.0, 0.01, n, 0.0, 0.0), "batch of %d", n);
        cr_assert_gt(k, 0, "batch of %d: drafting pays on a memory-bound target", n);
    }
}

Test(batch_policy, compute_bound_target_turns_drafting_off_as_the_batch_grows) {
    /* A pass costs 10 ms plus 1 ms a row (compute-bound once the batch is large), a
     * draft pass 0.3 ms a row: with acceptance 0.5 one request drafts, 16 do not. */
    sd_batcher *b = fresh_batcher(10.0, 1.0, 0.2, 0.3);
    sd_choice ch[16];
    make_choices(ch, 16, 0.5, 4);
    const sd_choice *d[16];
    int32_t trace[17];
    for (int n = 1; n <= 16; n++) {
        for (int i = 0; i < n; i++)
            d[i] = &ch[i];
        trace[n] = sd_batch_choose_k(b, d, n, 4, n, 0.0);
        cr_assert_eq(trace[n], best_k(ch, n, 4, 10.0, 1.0, 0.2, 0.3, n, 0.0, 0.0), "batch of %d",
                     n);
    }
    for (int n = 2; n <= 16; n++)
        cr_assert_leq(trace[n], trace[n - 1], "K grows with the batch (%d -> %d at %d)",
                      trace[n - 1], trace[n], n);
    cr_assert_gt(trace[1], 0, "one request on this target drafts");
    cr_assert_eq(trace[16], 0, "a batch of 16 on a compute-bound target must not draft");
}

Test(batch_policy, probes_after_64_steps_at_zero) {
    sd_batcher *b = fresh_batcher(0.5, 1.0, 0.2, 0.3);
    sd_choice ch[16];
    make_choices(ch, 16, 0.3, 4);
    const sd_choice *d[16];
    for (int i = 0; i < 16; i++)
        d[i] = &ch[i];
    for (int step = 0; step < 64; step++)
        cr_assert_eq(sd_batch_choose_k(b, d, 16, 4, 16, 0.0), 0, "step %d", step);
    /* The 65th: estimates floored at 0.75; at least K = 1. */
    const int32_t probe = sd_batch_choose_k(b, d, 16, 4, 16, 0.0);
    const int32_t want = best_k(ch, 16, 4, 0.5, 1.0, 0.2, 0.3, 16, 0.0, 0.75);
    cr_assert_eq(probe, want > 0 ? want : 1);
    cr_assert_eq(sd_batch_choose_k(b, d, 16, 4, 16, 0.0), 0, "after the probe: back to 0");
}

Test(batch_policy, other_rows_enter_the_cost_and_the_yield) {
    /* Rows of fixed-K requests and prompt chunks beside the drafting ones: the K must be
     * the reference's with the same base tokens and yield. */
    sd_batcher *b = fresh_batcher(5.0, 0.4, 1.0, 0.1);
    sd_choice ch[4];
    make_choices(ch, 4, 0.7, 5);
    const sd_choice *d[4] = {&ch[0], &ch[1], &ch[2], &ch[3]};
    for (int32_t base = 4; base <= 260; base += 32)
        cr_assert_eq(sd_batch_choose_k(b, d, 4, 5, base, 2.0),
                     best_k(ch, 4, 5, 5.0, 0.4, 1.0, 0.1, base, 2.0, 0.0), "base %d", base);
}
