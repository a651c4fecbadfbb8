/*
 * tests/test_adaptive.c: the adaptive draft-length controller and its auto-off switch
 * (runtime/engine/adaptive.c), driven by a simulator: synthetic per-position acceptance
 * (Bernoulli draws from the test's own seeded stream) and synthetic costs
 * (draft c per token, pass v(n) = v1 + slope (n - 1)) fed to sd_adaptive_observe as if
 * measured. No clock is read: "time" is the simulated cost, so nothing here is timed.
 *
 *   - convergence: the K the controller settles on is the K that the formula
 *     argmax_K E(K) / (K c + v(K + 1)), E(K) = 1 + sum_k prod_{i<=k} a_i, computed here
 *     independently from the true a_i, c, v, says is best (the mode of the last passes
 *     equals it when it is best by 2% or more; the true speedup of the chosen Ks is
 *     within 3% of the best, 5% with preemption-like spikes in the measured times);
 *   - auto-off: a draft that never agrees is switched off within off_after passes,
 *     re-probed at doubling intervals, and the switch comes back on when the draft agrees
 *     again;
 *   - the bound: against a never-agreeing draft, the simulated throughput stays >= 0.95 of
 *     target alone for runs of >= 256 tokens (the costs of the shipped TinyStories pair on
 *     this CPU and of a memory-bound pair), also with preemption-like spikes in the
 *     measured times.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"

TestSuite(adaptive, .timeout = 300);

typedef struct sim {
    double a[SD_MAX_DRAFT]; /* true acceptance at position i given the earlier ones */
    double c;               /* draft cost per token */
    double v1, slope;       /* pass cost v(n) = v1 + slope (n - 1) */
    double spike_p;         /* probability that a measured time is multiplied by spike_x */
    double spike_x;
    double no_match_p; /* probability that a pass drafts nothing (an n-gram without a match) */
} sim;

static double sim_v(const sim *s, int32_t n) {
    return s->v1 + s->slope * (n - 1);
}

/* The formula's speedup of K with the true parameters. */
static double true_speedup(const sim *s, int32_t k) {
    double e = 1.0, prod = 1.0;
    for (int32_t i = 0; i < k; i++) {
        prod *= s->a[i];
        e += prod;
    }
    return e * sim_v(s, 1) / (k * s->c + sim_v(s, k + 1));
}

static int32_t true_best(const sim *s, int32_t k_max, double *best, double *second) {
    int32_t kb = 1;
    double sb = true_speedup(s, 1), s2 = 0.0;
    for (int32_t k = 2; k <= k_max; k++) {
        const double x = true_speedup(s, k);
        if (x > sb) {
            s2 = sb;
            sb = x;
            kb = k;
        } else if (x > s2) {
            s2 = x;
        }
    }
    *best = sb;
    *second = s2;
    return kb;
}

static uint64_t g_state;
static double uni(void) { /* xorshift64*, the test's own stream */
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return (double)((g_state * UINT64_C(2685821657736338717)) >> 11) * 0x1.0p-53;
}

typedef struct run_out {
    int32_t k_count[SD_MAX_DRAFT + 1]; /* passes by K */
    double time;                       /* simulated (true) time */
    int64_t tokens;                    /* emitted */
    int32_t spec_passes;
} run_out;

/* n passes of the controller against s; trace (optional) gets each K. */
static void run(sd_adaptive *ctl, const sim *s, int32_t n, run_out *o, int32_t *trace) {
    memset(o, 0, sizeof *o);
    for (int32_t t = 0; t < n; t++) {
        const int32_t k_chosen = sd_adaptive_next_k(ctl);
        cr_assert(k_chosen >= 0 && k_chosen <= ctl->p.k_max, "K = %d outside [0, %d]", k_chosen,
                  ctl->p.k_max);
        const int32_t k = s->no_match_p > 0 && uni() < s->no_match_p ? 0 : k_chosen;
        int32_t acc = 0;
        while (acc < k && uni() < s->a[acc])
            acc++;
        const double td = k * s->c, tp = sim_v(s, k + 1);
        o->time += td + tp;
        o->tokens += acc + 1;
        o->k_count[k_chosen]++;
        o->spec_passes += k > 0;
        if (trace) trace[t] = k_chosen;
        const double noise = s->spike_p > 0 && uni() < s->spike_p ? s->spike_x : 1.0;
        sd_adaptive_observe(ctl, k, acc, td * noise, tp * noise);
    }
}

static void start(sd_adaptive *ctl, int32_t k_max) {
    sd_adaptive_params p = sd_adaptive_default_params();
    p.k_max = k_max;
    sd_error err = {0};
    cr_assert_eq(sd_adaptive_init(ctl, &p, &err), 0, "%s", err.msg);
}

static sim const_sim(double a, double c, double v1, double slope) {
    sim s = {{0}, c, v1, slope, 0.0, 1.0, 0.0};
    for (int i = 0; i < SD_MAX_DRAFT; i++)
        s.a[i] = a;
    return s;
}

/* After a burn-in, the mode of the chosen K is the formula's K* (when K* beats the
 * runner-up by >= 2%), and the true speedup of the chosen Ks is >= frac of the best. */
static void converges(const char *name, const sim *s, int32_t k_max, uint64_t seed, double frac) {
    g_state = seed;
    sd_adaptive ctl;
    start(&ctl, k_max);
    run_out o;
    run(&ctl, s, 1000, &o, NULL); /* burn-in */
    run(&ctl, s, 3000, &o, NULL);
    double best, second;
    const int32_t kb = true_best(s, k_max, &best, &second);
    int32_t mode = 1;
    double s_sum = 0.0;
    int32_t n_spec = 0;
    for (int32_t k = 1; k <= k_max; k++) {
        if (o.k_count[k] > o.k_count[mode]) mode = k;
        s_sum += o.k_count[k] * true_speedup(s, k);
        n_spec += o.k_count[k];
    }
    const double s_mean = n_spec ? s_sum / n_spec : 0.0;
    fprintf(stderr,
            "  %-28s K* = %2d (S %.3f, runner-up %.3f): mode %2d (%d of %d spec passes), mean "
            "true S of the chosen K %.3f, %d target-alone passes\n",
            name, kb, best, second, mode, o.k_count[mode], n_spec, s_mean, o.k_count[0]);
    if (best >= 1.02 * second)
        cr_expect_eq(mode, kb, "%s: settles on K = %d, the formula says %d", name, mode, kb);
    cr_expect_geq(s_mean, frac * best, "%s: chosen Ks reach S %.3f, the best is %.3f", name, s_mean,
                  best);
    cr_expect_eq(o.k_count[0] <= 3000 / 40, 1, "%s: %d target-alone passes while drafting pays",
                 name, o.k_count[0]);
}

Test(adaptive, converges_to_the_formulas_best_k) {
    sim s = const_sim(0.9, 0.02, 1.0, 0.05); /* memory-bound pair, good draft: long K */
    converges("a 0.9, c 0.02, slope 0.05", &s, 16, 1, 0.97);
    s = const_sim(0.7, 0.1, 1.0, 0.1);
    converges("a 0.7, c 0.1, slope 0.1", &s, 16, 2, 0.97);
    s = const_sim(0.5, 0.05, 1.0, 0.05);
    converges("a 0.5, c 0.05, slope 0.05", &s, 8, 3, 0.97);
    s = const_sim(0.6, 0.1, 1.0, 0.3); /* compute-bound: K = 1 by 5% */
    converges("a 0.6, c 0.1, slope 0.3", &s, 8, 7, 0.97);
    /* A sharp step: K = 3 is clearly best. */
    s = const_sim(0.1, 0.05, 1.0, 0.05);
    s.a[0] = s.a[1] = s.a[2] = 0.9;
    converges("step 0.9 x3 then 0.1", &s, 8, 8, 0.97);
    s = const_sim(0.95, 0.0, 2.0, 0.2); /* free draft (n-gram), compute-bound pass */
    converges("a 0.95, c 0, slope 0.1 v1", &s, 16, 4, 0.97);
    /* Falling per-position acceptance (as a real draft): the per-position model matters. */
    const double falling[] = {0.95, 0.9, 0.85, 0.6, 0.4, 0.3, 0.2, 0.1};
    s = const_sim(0.1, 0.03, 1.0, 0.04);
    for (int i = 0; i < 8; i++)
        s.a[i] = falling[i];
    converges("falling a_i, c 0.03", &s, 8, 5, 0.97);
    /* Noisy timings: one pass in 10 takes 4x (preemption on a shared machine). */
    s = const_sim(0.8, 0.05, 1.0, 0.08);
    s.spike_p = 0.1;
    s.spike_x = 4.0;
    converges("a 0.8, spikes 10% x4", &s, 16, 6, 0.95);
}

/* The formula itself: E(K) for constant a is (1 - a^(K+1)) / (1 - a) (Leviathan et al.
 * 2023 eq. 1), and the controller's E with exact (saturated) estimates matches it. */
Test(adaptive, expected_tokens_formula) {
    sd_adaptive ctl;
    start(&ctl, 8);
    /* Counts of a constant acceptance 0.6 so large that the prior does not matter. */
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        ctl.acc_n[i] = 1e6;
        ctl.acc_s[i] = 0.6e6;
    }
    for (int32_t k = 0; k <= 8; k++) {
        const double want = (1.0 - pow(0.6, k + 1)) / (1.0 - 0.6);
        cr_assert_float_eq(sd_adaptive_expected_tokens(&ctl, k), want, 1e-5, "K = %d", k);
    }
}

Test(adaptive, auto_off_and_back_on) {
    g_state = 7;
    sd_adaptive ctl;
    start(&ctl, 8);
    sim s = const_sim(0.0, 0.1, 1.0, 0.2); /* the draft never agrees */
    enum { N1 = 1200 };
    static int32_t trace[N1];
    run_out o;
    run(&ctl, &s, N1, &o, trace);
    cr_assert(sd_adaptive_is_off(&ctl), "still speculating against a draft that never agrees");
    /* Speculative passes: off_after at the start, then one probe per back-off window. */
    /* Skip the calibration passes (K = 0) before the first speculative one. */
    int32_t probes[64], n_probes = 0, first_off = -1, first_spec = -1;
    for (int32_t t = 0; t < N1; t++) {
        if (trace[t] > 0 && first_spec < 0) first_spec = t;
        if (trace[t] == 0 && first_off < 0 && first_spec >= 0) first_off = t;
        if (trace[t] > 0 && first_off >= 0 && n_probes < 64) probes[n_probes++] = t;
    }
    fprintf(stderr, "  never agrees: %d speculative passes of %d, off from pass %d, %d probes:",
            o.spec_passes, N1, first_off, n_probes);
    for (int32_t i = 0; i < n_probes; i++)
        fprintf(stderr, " %d", probes[i]);
    fprintf(stderr, "\n");
    cr_assert_leq(first_off - first_spec, ctl.p.off_after, "off after %d speculative passes",
                  first_off - first_spec);
    cr_assert_eq(ctl.n_probes, n_probes);
    for (int32_t i = 2; i < n_probes; i++) {
        const int32_t gap = probes[i] - probes[i - 1], prev = probes[i - 1] - probes[i - 2];
        cr_assert(gap >= prev, "back-off shrank: gaps %d then %d", prev, gap);
        cr_assert(gap == prev || gap >= 2 * prev - 1 || gap >= ctl.p.backoff_max,
                  "back-off does not double: gaps %d then %d", prev, gap);
    }
    cr_assert_leq(o.spec_passes, 1 + ctl.p.off_after + n_probes);
    cr_assert_leq(n_probes, 8, "%d probes in %d passes: the back-off is not exponential", n_probes,
                  N1);

    /* The draft agrees again: on at the next probes, then drafting long. */
    s = const_sim(0.95, 0.1, 1.0, 0.2);
    enum { N2 = 3 * 512 };
    static int32_t trace2[N2];
    run(&ctl, &s, N2, &o, trace2);
    int32_t on_at = -1;
    for (int32_t t = 0; t + 8 < N2 && on_at < 0; t++) {
        int all = 1;
        for (int32_t j = 0; j < 8; j++)
            all &= trace2[t + j] > 0;
        if (all) on_at = t;
    }
    fprintf(stderr, "  agrees again: back on (8 speculative passes in a row) at pass %d\n", on_at);
    cr_assert_geq(on_at, 0, "speculation never came back on");
    cr_assert_leq(on_at, 2 * ctl.p.backoff_max, "back on only after %d passes", on_at);
    cr_assert(!sd_adaptive_is_off(&ctl));
    run(&ctl, &s, 500, &o, NULL);
    double best, second, s_sum = 0.0;
    true_best(&s, 8, &best, &second);
    for (int32_t k = 0; k <= 8; k++)
        s_sum += o.k_count[k] * (k ? true_speedup(&s, k) : 1.0);
    cr_assert_geq(s_sum / 500, 0.95 * best, "back on: mean true speedup %.3f, the best %.3f",
                  s_sum / 500, best);
}

/* An n-gram draft matches only now and then: a probe without a match is no evidence and
 * must not double the back-off; once matches agree, speculation comes back on. */
Test(adaptive, probes_without_a_match_are_repeated) {
    g_state = 11;
    sd_adaptive ctl;
    start(&ctl, 4);
    sim s = const_sim(0.0, 0.0, 1.0, 0.3); /* free draft, never agrees: switched off */
    run_out o;
    run(&ctl, &s, 40, &o, NULL);
    cr_assert(sd_adaptive_is_off(&ctl));
    const int32_t backoff = ctl.backoff;
    /* Count down to the probe, then let it find no match: still probing, back-off kept. */
    while (sd_adaptive_next_k(&ctl) == 0)
        sd_adaptive_observe(&ctl, 0, 0, 0.0, 1.0);
    for (int i = 0; i < 3; i++) {
        sd_adaptive_observe(&ctl, 0, 0, 0.0, 1.0);
        cr_assert_gt(sd_adaptive_next_k(&ctl), 0, "an empty probe ended the probing");
    }
    cr_assert_eq(ctl.backoff, backoff, "an empty probe doubled the back-off");
    /* Matches 30% of the time, accepted when they come: back on. */
    s = const_sim(0.95, 0.0, 1.0, 0.3);
    s.no_match_p = 0.7;
    run(&ctl, &s, 600, &o, NULL);
    cr_assert(!sd_adaptive_is_off(&ctl),
              "never back on against a draft that agrees when it matches");
}

/* A pair whose costs rule out a gain even at full acceptance (a draft step 0.4 and a
 * pass 0.8 more per row, as the shipped TinyStories pair with its LLM draft on this CPU):
 * off after the first speculative pass, and then probed only every backoff_max passes,
 * even though the draft agrees every time. */
Test(adaptive, a_pair_that_cannot_pay_is_switched_off_at_once) {
    g_state = 12;
    sd_adaptive ctl;
    start(&ctl, 8);
    sim s = const_sim(1.0, 0.4, 1.0, 0.8);
    static int32_t trace[1200];
    run_out o;
    run(&ctl, &s, 1200, &o, trace);
    cr_assert_lt(sd_adaptive_speedup_bound(&ctl), 1.05);
    int32_t spec = 0, first = -1;
    for (int32_t t = 0; t < 1200; t++)
        if (trace[t] > 0) {
            spec++;
            if (first < 0) first = t;
        }
    fprintf(stderr, "  cannot pay: first speculative pass %d, %d speculative passes of 1200\n",
            first, spec);
    cr_assert_leq(spec, 1 + 1200 / ctl.p.backoff_max + 1, "%d speculative passes", spec);
    cr_assert_eq(trace[first + 1], 0, "still speculating after the costs were measured");
}

/* Throughput of a run of n_tokens against a never-agreeing draft, relative to target
 * alone (n_tokens v(1)). */
static double never_agrees_ratio(double c, double slope, int32_t n_tokens, double spike_p,
                                 uint64_t seed) {
    g_state = seed;
    sd_adaptive ctl;
    start(&ctl, 8);
    sim s = const_sim(0.0, c, 1.0, slope);
    s.spike_p = spike_p;
    s.spike_x = 5.0;
    run_out o;
    run(&ctl, &s, n_tokens, &o, NULL); /* every pass emits 1 token */
    return (double)o.tokens * sim_v(&s, 1) / o.time;
}

Test(adaptive, bound_against_a_draft_that_never_agrees) {
    /* (c, slope) of the shipped TinyStories pair with its LLM draft on this CPU (bench:
     * c ~ 0.4, v(5) ~ 4.3 v(1)), of an n-gram draft on it (c ~ 0), and of a memory-bound
     * pair (c 0.1, slope 0.02). */
    const double costs[][2] = {{0.4, 0.8}, {0.01, 0.8}, {0.1, 0.02}};
    const int32_t lengths[] = {256, 512, 1024, 4096};
    for (size_t ci = 0; ci < 3; ci++)
        for (size_t li = 0; li < 4; li++)
            for (int spiky = 0; spiky <= 1; spiky++) {
                const double r = never_agrees_ratio(costs[ci][0], costs[ci][1], lengths[li],
                                                    spiky ? 0.1 : 0.0, 40 + ci);
                fprintf(stderr,
                        "  never agrees: c %.2f slope %.2f, %4d tokens%s: %.4f x target "
                        "alone\n",
                        costs[ci][0], costs[ci][1], lengths[li], spiky ? ", spikes" : "", r);
                cr_expect_geq(r, 0.95, "c %.2f slope %.2f %d tokens: %.4f x target alone",
                              costs[ci][0], costs[ci][1], lengths[li], r);
            }
}

Test(adaptive, fixed_off_switch_disabled_keeps_drafting) {
    g_state = 9;
    sd_adaptive_params p = sd_adaptive_default_params();
    p.k_max = 4;
    p.auto_off = 0;
    sd_adaptive ctl;
    sd_error err = {0};
    cr_assert_eq(sd_adaptive_init(&ctl, &p, &err), 0);
    sim s = const_sim(0.0, 0.1, 1.0, 0.2);
    run_out o;
    run(&ctl, &s, 200, &o, NULL);
    cr_assert(!sd_adaptive_is_off(&ctl));
    cr_assert_geq(o.spec_passes, 190, "auto_off 0 must keep drafting (%d of 200)", o.spec_passes);
    cr_assert_eq(o.k_count[1] >= 180, 1, "K falls to 1 when nothing is accepted");
}

Test(adaptive, parameters_checked) {
    const sd_adaptive_params d = sd_adaptive_default_params();
    sd_adaptive_params bad[7];
    for (int i = 0; i < 7; i++)
        bad[i] = d;
    bad[0].k_max = 0;
    bad[1].k_max = SD_MAX_DRAFT + 1;
    bad[2].decay = 1.0;
    bad[3].prior_accept = 0.0;
    bad[4].backoff_min = 0;
    bad[5].backoff_max = d.backoff_min - 1;
    bad[6].timing_rate = 0.0;
    const char *word[] = {"k_max",   "k_max",   "decay",      "prior_accept",
                          "backoff", "backoff", "timing_rate"};
    for (int i = 0; i < 7; i++) {
        sd_adaptive ctl;
        sd_error err = {0};
        cr_assert_eq(sd_adaptive_init(&ctl, &bad[i], &err), SD_ERR_ARG, "case %d accepted", i);
        cr_assert(strstr(err.msg, word[i]), "'%s' does not name %s", err.msg, word[i]);
    }
    cr_assert_str_eq(sd_k_policy_name(SD_K_ADAPTIVE), "adaptive");
    sd_draft_type t;
    cr_assert_eq(sd_draft_type_parse("ngram-simple", &t), 0);
    cr_assert_eq(t, SD_DRAFT_NGRAM);
    cr_assert_eq(sd_draft_type_parse("ngram+llm", &t), 0);
    cr_assert_eq(t, SD_DRAFT_NGRAM_LLM);
    cr_assert_eq(sd_draft_type_parse("eagle", &t), -1);
}
