/*
 * tests/test_adaptive_batch.c: the one K controller (runtime/engine/adaptive.c) in batch
 * mode, as the batcher drives it for a sequence beside others in one target pass
 * (sd_adaptive_set_batch), and the batch's cost line (sd_cost_fit). No clock is read:
 * "time" is a cost fed to sd_adaptive_observe as if measured, from a line the test
 * chooses, so nothing here is timed.
 *
 *   - the cost line fed exact samples y = alpha + beta x gives the line back; one size
 *     seen gives the line through its mean with the prior slope;
 *   - alone in its pass (base_rows 0) a controller in the batcher decides exactly as one
 *     without a batch (sd_generate's): the same K at every pass of a trace;
 *   - in batch mode, while on, K is the argmax over 1 .. k_max of
 *         S_B(K) = (Y + n E(K)) T(0) / ((Y + n) T(K)),  T(K) = K c + v(R0 + n (K + 1)),
 *     computed here from the controller's acceptance estimates and the line as given;
 *   - traces of passes: on a memory-bound target (a pass costs about the same over more
 *     rows) a sequence keeps drafting in a batch of 16; on a compute-bound one (cost
 *     proportional to the rows) it drafts alone, is switched off in a batch of 16 (auto-off,
 *     as for one sequence whose draft does not pay), and is back on within backoff_max
 *     passes once the batch shrinks to itself again.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"

TestSuite(adaptive_batch, .timeout = 120);

/* A cost line fed exact samples at sizes x0 .. x0 + 7. */
static void feed_line(sd_cost_fit *f, double alpha, double beta, double x0, int n) {
    for (int i = 0; i < n; i++) {
        const double x = x0 + (double)(i % 8);
        sd_cost_fit_add(f, x, alpha + beta * x);
    }
}

Test(adaptive_batch, fit_returns_an_exact_line) {
    sd_cost_fit f;
    memset(&f, 0, sizeof f);
    cr_assert_eq(sd_cost_fit_eval(&f, 10.0), 0.0, "no sample: no estimate");
    feed_line(&f, 3.0, 0.25, 1.0, 40);
    for (double x = 1.0; x <= 200.0; x *= 2.0)
        cr_assert_float_eq(sd_cost_fit_eval(&f, x), 3.0 + 0.25 * x, 1e-6 * (3.0 + 0.25 * x),
                           "at %g", x);
}

Test(adaptive_batch, fit_of_one_size_uses_the_prior_slope) {
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

/* The accepted prefix of pass p when each position is accepted with probability about a
 * given the ones before it: at least j accepted when u < a^j, u spread evenly over (0, 1)
 * (the golden-ratio sequence). */
static int32_t accepted_of(int p, double a, int32_t k) {
    const double u = fmod(0.5 + 0.6180339887498949 * p, 1.0);
    int32_t acc = 0;
    while (acc < k && u < pow(a, acc + 1))
        acc++;
    return acc;
}

static void init_ctl(sd_adaptive *a, int32_t k_max) {
    sd_adaptive_params ap = sd_adaptive_default_params();
    ap.k_max = k_max;
    sd_error err = {0};
    cr_assert_eq(sd_adaptive_init(a, &ap, &err), SD_OK, "%s", err.msg);
}

/* A batch: n adaptive sequences, this one among them, beside n_fixed fixed-K ones of
 * rows_each rows yielding yield_each tokens each, a target pass costing alpha + beta per
 * row. */
static sd_adaptive_batch make_batch(double alpha, double beta, int32_t n, int32_t n_fixed,
                                    int32_t rows_each, double yield_each) {
    sd_adaptive_batch bt;
    memset(&bt, 0, sizeof bt);
    feed_line(&bt.pass, alpha, beta, 1.0, 40);
    bt.n_seqs = n;
    bt.base_rows = n_fixed * rows_each;
    bt.base_yield = n_fixed * yield_each;
    return bt;
}

/* The reference K: argmax over 1 .. k_max of S_B(K) from the controller's estimates, the
 * exact line and the controller's draft cost; *margin: the best S over the runner-up's. */
static int32_t ref_k(const sd_adaptive *a, double alpha, double beta, double n, double r0, double y,
                     double *margin) {
    const double c = sd_adaptive_draft_ms(a);
    const double t0 = alpha + beta * (r0 + n);
    int32_t best = 0;
    double sb = -1.0, second = -1.0;
    for (int32_t k = 1; k <= a->p.k_max; k++) {
        double e = 1.0, prod = 1.0;
        for (int32_t i = 1; i <= k; i++) {
            prod *= sd_adaptive_accept(a, i);
            e += prod;
        }
        const double s =
            (y + n * e) * t0 / ((y + n) * (k * c + alpha + beta * (r0 + n * (k + 1.0))));
        if (s > sb) {
            second = sb;
            sb = s;
            best = k;
        } else if (s > second) {
            second = s;
        }
    }
    *margin = second > 0.0 ? sb / second : 2.0;
    return best;
}

/* One pass of the trace: K from the controller, acceptance from the sequence, the times
 * from the line (draft c per token). Returns the K. */
static int32_t pass(sd_adaptive *a, const sd_adaptive_batch *bt, int p, double acc, double c,
                    double alpha, double beta) {
    sd_adaptive_set_batch(a, bt);
    const int32_t k = sd_adaptive_next_k(a);
    const int32_t n_acc = accepted_of(p, acc, k);
    const double rows = bt ? bt->base_rows + bt->n_seqs * (k + 1.0) : k + 1.0;
    sd_adaptive_observe(a, k, n_acc, c * k, alpha + beta * rows);
    return k;
}

Test(adaptive_batch, alone_in_the_pass_decides_as_one_sequence) {
    sd_adaptive one, batched;
    init_ctl(&one, 6);
    init_ctl(&batched, 6);
    sd_adaptive_batch bt = make_batch(20.0, 0.5, 1, 0, 0, 0.0); /* a line, no one beside */
    for (int p = 0; p < 600; p++) {
        const double acc = p < 300 ? 0.8 : 0.1; /* then a draft that stops agreeing */
        cr_assert_eq(sd_adaptive_in_batch(&batched), 0);
        const int32_t k1 = pass(&one, NULL, p, acc, 1.5, 20.0, 0.5);
        const int32_t k2 = pass(&batched, &bt, p, acc, 1.5, 20.0, 0.5);
        cr_assert_eq(k1, k2, "pass %d: alone %d, in the batcher alone %d", p, k1, k2);
    }
}

Test(adaptive_batch, on_it_picks_the_batch_rates_best_k) {
    const double alpha = 5.0, beta = 0.4;
    sd_adaptive a;
    init_ctl(&a, 5);
    int checked = 0;
    for (int p = 0; p < 400; p++) {
        /* The batch changes: 1 .. 4 adaptive sequences beside 0 .. 2 fixed ones of 3
         * rows yielding 2 tokens. */
        const int32_t n = 1 + p % 4, n_other = (p / 4) % 3;
        sd_adaptive_batch bt = make_batch(alpha, beta, n, n_other, 3, 2.0);
        if (n == 1 && n_other == 0) continue;
        sd_adaptive_set_batch(&a, &bt);
        cr_assert(sd_adaptive_in_batch(&a));
        double margin = 0.0;
        const int on = sd_adaptive_state_of(&a) == SD_ADAPTIVE_ON;
        const int32_t want = ref_k(&a, alpha, beta, n, bt.base_rows, bt.base_yield, &margin);
        const int32_t k = pass(&a, &bt, p, 0.7, 0.6, alpha, beta);
        if (on && margin > 1.0 + 1e-6 && p > 4) {
            cr_assert_eq(k, want, "pass %d (%d others): K %d, the batch rate's best %d", p, n_other,
                         k, want);
            checked++;
        }
    }
    cr_assert_gt(checked, 200, "only %d passes were checked", checked);
}

Test(adaptive_batch, memory_bound_target_keeps_drafting_in_a_batch_of_16) {
    /* A pass costs 20 ms plus 0.05 ms a row (weights read once per pass), drafting 1 ms a
     * token: with acceptance 0.8 drafting pays in a batch of 16. */
    sd_adaptive a;
    init_ctl(&a, 6);
    const sd_adaptive_batch bt = make_batch(20.0, 0.05, 16, 0, 0, 0.0);
    int drafting = 0;
    for (int p = 0; p < 300; p++)
        drafting += pass(&a, &bt, p, 0.8, 1.0, 20.0, 0.05) > 0;
    cr_assert_geq(drafting, 297, "drafted in %d of 300 passes", drafting);
    cr_assert_eq(a.n_switch_off, 0, "switched off on a memory-bound target");
}

Test(adaptive_batch, compute_bound_target_turns_drafting_off_in_a_batch_and_back_on_alone) {
    /* A pass costs 10 ms plus 1 ms a row (compute-bound in a batch), drafting 1 ms a
     * token, acceptance 0.5. Alone (no batch), speculation pays: S(1) = 1.5 * 11 / (1 + 12)
     * = 1.27. In a batch of 16 such sequences, S_B(1) = 1.5 * 26 / (1 + 10 + 32) = 0.91:
     * off. */
    const double alpha = 10.0, beta = 1.0, acc = 0.5, c = 1.0;
    sd_adaptive a;
    init_ctl(&a, 4);
    int drafting = 0;
    for (int p = 0; p < 100; p++)
        drafting += pass(&a, NULL, p, acc, c, alpha, beta) > 0;
    cr_assert_gt(drafting, 80, "alone: drafted in %d of 100 passes", drafting);
    const sd_adaptive_batch bt = make_batch(alpha, beta, 16, 0, 0, 0.0);
    int p = 100, off_at = -1;
    for (; p < 400; p++) {
        pass(&a, &bt, p, acc, c, alpha, beta);
        if (off_at < 0 && sd_adaptive_is_off(&a)) off_at = p;
    }
    cr_assert_geq(off_at, 100, "never switched off in the batch");
    cr_assert_lt(off_at, 100 + 30, "switched off only at pass %d", off_at);
    int drafting_b = 0;
    for (int q = 0; q < 200; q++, p++)
        drafting_b += pass(&a, &bt, p, acc, c, alpha, beta) > 0;
    cr_assert_lt(drafting_b, 40, "in the batch: drafted in %d of 200 passes (probes only)",
                 drafting_b);
    /* The batch shrinks to this sequence: the next probe turns speculation back on. */
    int back = -1;
    for (int q = 0; q < a.p.backoff_max + 40; q++, p++) {
        pass(&a, NULL, p, acc, c, alpha, beta);
        if (sd_adaptive_state_of(&a) == SD_ADAPTIVE_ON) {
            back = q;
            break;
        }
    }
    cr_assert_geq(back, 0, "alone again, speculation did not come back on");
}
