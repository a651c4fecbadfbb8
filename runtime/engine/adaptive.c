/* runtime/engine/adaptive.c: the adaptive draft-length controller and its auto-off
 * switch (the model and the formula are at sd_adaptive_params in sd_engine.h). */
#include <math.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"

enum { ON = 0, OFF = 1, PROBE = 2 };

/* Relative cost of one more row in a pass before anything is measured (s0). */
#define SLOPE_PRIOR 0.25
/* A pass size uses its own running mean from this many samples on; below, the line. */
#define SIZE_SAMPLES 4
/* A sample above this times the prediction counts as this times the prediction; a cost
 * is at most this times its forgetting minimum. */
#define CLIP 1.5
/* Per-sample rise of a forgetting minimum (doubles in about 350 samples). */
#define MIN_FORGET 1.002
/* Draft cost per token before it is measured, relative to v(1). */
#define DRAFT_PRIOR 0.1
/* Recalibrate v(1) with a plain pass when its weight falls below this (about 90 passes
 * at decay 0.95). */
#define CALIBRATE_W 0.01
/* Below this speedup at full acceptance a pair cannot pay: off at once, probes rare. */
#define HOPELESS_GAIN 1.05
/* Probe passes in a row that may draft nothing before the probe counts as failed. */
#define EMPTY_PROBES 8
/* Plain passes at the start (one sample of v(1) is at the mercy of a cold cache). */
#define CALIBRATE_FIRST 3

sd_adaptive_params sd_adaptive_default_params(void) {
    sd_adaptive_params p;
    p.k_max = 4;
    p.auto_off = 1;
    p.decay = 0.95;
    p.timing_rate = 0.125;
    p.prior_accept = 0.5;
    p.prior_weight = 1.0;
    p.off_after = 3;
    p.backoff_min = 16;
    p.backoff_max = 512;
    return p;
}

int sd_adaptive_init(sd_adaptive *a, const sd_adaptive_params *p, sd_error *err) {
    memset(a, 0, sizeof *a);
    if (p->k_max < 1 || p->k_max > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "adaptive: k_max = %d, expected 1 .. %d", p->k_max,
                         SD_MAX_DRAFT);
    if (!(p->decay > 0.0 && p->decay < 1.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: decay = %g, expected in (0, 1)", p->decay);
    if (!(p->timing_rate > 0.0 && p->timing_rate <= 1.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: timing_rate = %g, expected in (0, 1]",
                         p->timing_rate);
    if (!(p->prior_accept > 0.0 && p->prior_accept < 1.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: prior_accept = %g, expected in (0, 1)",
                         p->prior_accept);
    if (!(p->prior_weight > 0.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: prior_weight = %g, expected > 0",
                         p->prior_weight);
    if (p->off_after < 1 || p->backoff_min < 1 || p->backoff_max < p->backoff_min)
        return sd_errorf(err, SD_ERR_ARG,
                         "adaptive: off_after = %d, backoff %d .. %d: expected off_after >= 1 "
                         "and 1 <= backoff_min <= backoff_max",
                         p->off_after, p->backoff_min, p->backoff_max);
    a->p = *p;
    a->state = ON;
    a->backoff = p->backoff_min;
    return SD_OK;
}

/* ---- estimates ---- */

/* a_i with a prior of `floor_prior` for the optimistic (probe) estimates, or 0. */
static double accept_est(const sd_adaptive *a, int32_t i, double floor_prior) {
    double prev = a->p.prior_accept;
    double est = prev;
    for (int32_t j = 0; j < i && j < SD_MAX_DRAFT; j++) {
        est = (a->acc_s[j] + a->p.prior_weight * prev) / (a->acc_n[j] + a->p.prior_weight);
        prev = est;
    }
    return est > floor_prior ? est : floor_prior;
}

double sd_adaptive_accept(const sd_adaptive *a, int32_t i) {
    return i < 1 ? 1.0 : accept_est(a, i, 0.0);
}

static double expected_tokens(const sd_adaptive *a, int32_t k, double floor_prior) {
    double e = 1.0, prod = 1.0, prev = a->p.prior_accept;
    for (int32_t i = 0; i < k && i < SD_MAX_DRAFT; i++) {
        double est = (a->acc_s[i] + a->p.prior_weight * prev) / (a->acc_n[i] + a->p.prior_weight);
        prev = est;
        prod *= est > floor_prior ? est : floor_prior;
        e += prod;
    }
    return e;
}

double sd_adaptive_expected_tokens(const sd_adaptive *a, int32_t k) {
    return expected_tokens(a, k, 0.0);
}

/* A cost from its running mean and its forgetting minimum: min(mean, CLIP x minimum). */
static double robust(double mean, double min) {
    return mean < CLIP * min ? mean : CLIP * min;
}

double sd_adaptive_pass_ms(const sd_adaptive *a, int32_t n) {
    if (n < 1) n = 1;
    if (n > SD_MAX_DRAFT + 1) n = SD_MAX_DRAFT + 1;
    /* v(1) (the baseline of every speedup: overestimating it would make any draft look
     * good) always from its own samples; other sizes from 4 samples on. */
    if (a->n_ver[n] >= SIZE_SAMPLES || (n == 1 && a->n_ver[1] > 0))
        return robust(a->t_ver[n], a->min_ver[n]);
    /* Otherwise the weighted least-squares line alpha + beta m through the measured sizes'
     * values (weight: samples, at most 16). */
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int32_t n_sizes = 0, n0 = 0;
    for (int32_t m = 1; m <= SD_MAX_DRAFT + 1; m++) {
        if (!(a->n_ver[m] > 0)) continue;
        const double w = a->n_ver[m] < 16 ? a->n_ver[m] : 16,
                     y = robust(a->t_ver[m], a->min_ver[m]);
        sw += w;
        sx += w * m;
        sy += w * y;
        sxx += w * m * m;
        sxy += w * m * y;
        n_sizes++;
        if (!n0) n0 = m;
    }
    if (n_sizes >= 2) {
        const double den = sw * sxx - sx * sx;
        double beta = den > 0 ? (sw * sxy - sx * sy) / den : 0.0;
        if (beta < 0) beta = 0; /* a pass never gets cheaper with more rows */
        const double alpha = (sy - beta * sx) / sw;
        const double t = alpha + beta * n;
        if (t > 0) return t;
    }
    if (n_sizes >= 1) /* one measured size n0 (or a failed fit: the smallest): prior slope */
        return robust(a->t_ver[n0], a->min_ver[n0]) * (1.0 + SLOPE_PRIOR * (n - 1)) /
               (1.0 + SLOPE_PRIOR * (n0 - 1));
    return 1.0 + SLOPE_PRIOR * (n - 1); /* nothing measured yet (arbitrary unit) */
}

double sd_adaptive_draft_ms(const sd_adaptive *a) {
    return a->n_draft > 0 ? robust(a->t_draft, a->min_draft)
                          : DRAFT_PRIOR * sd_adaptive_pass_ms(a, 1);
}

static double speedup(const sd_adaptive *a, int32_t k, double floor_prior) {
    const double t = k * sd_adaptive_draft_ms(a) + sd_adaptive_pass_ms(a, k + 1);
    return t > 0 ? expected_tokens(a, k, floor_prior) * sd_adaptive_pass_ms(a, 1) / t : 0.0;
}

double sd_adaptive_speedup(const sd_adaptive *a, int32_t k) {
    return speedup(a, k, 0.0);
}

static int32_t best_k(const sd_adaptive *a, double floor_prior, double *s_best) {
    int32_t best = 1;
    double sb = speedup(a, 1, floor_prior);
    for (int32_t k = 2; k <= a->p.k_max; k++) {
        const double s = speedup(a, k, floor_prior);
        if (s > sb) {
            sb = s;
            best = k;
        }
    }
    if (s_best) *s_best = sb;
    return best;
}

int32_t sd_adaptive_best_k(const sd_adaptive *a) {
    return best_k(a, 0.0, NULL);
}

double sd_adaptive_speedup_bound(const sd_adaptive *a) {
    double best = 0.0;
    for (int32_t k = 1; k <= a->p.k_max; k++) {
        const double t = k * sd_adaptive_draft_ms(a) + sd_adaptive_pass_ms(a, k + 1);
        const double s = t > 0 ? (k + 1) * sd_adaptive_pass_ms(a, 1) / t : 0.0;
        if (s > best) best = s;
    }
    return best;
}

/* The costs are measured (a draft step and a pass of more than one row), and even
 * acceptance of every drafted token would gain less than HOPELESS_GAIN. */
static int hopeless(const sd_adaptive *a) {
    int multi = 0;
    for (int32_t m = 2; m <= SD_MAX_DRAFT + 1; m++)
        multi |= a->n_ver[m] > 0;
    return multi && a->n_draft > 0 && sd_adaptive_speedup_bound(a) < HOPELESS_GAIN;
}

int sd_adaptive_is_off(const sd_adaptive *a) {
    return a->state != ON;
}

/* ---- decisions ---- */

int32_t sd_adaptive_next_k(sd_adaptive *a) {
    int32_t k;
    if (a->state == OFF && a->countdown > 0) {
        k = 0;
    } else if (a->state != ON) {
        a->state = PROBE;
        k = best_k(a, a->p.prior_accept, NULL);
    } else if (a->w_ver[1] < CALIBRATE_W || a->n_ver[1] < CALIBRATE_FIRST) {
        k = 0; /* calibration: measure v(1) (a plain pass costs plain decoding nothing) */
    } else {
        k = best_k(a, 0.0, NULL);
    }
    a->k_last = k;
    return k;
}

/* Running mean with rate max(rate, 1 / count). */
static void running_mean(double *mean, double *count, double x, double rate) {
    *count += 1.0;
    double r = 1.0 / *count;
    if (r < rate) r = rate;
    *mean += r * (x - *mean);
}

/* The forgetting minimum of a cost: it rises by MIN_FORGET per sample (so a real rise in
 * cost, e.g. a longer context, gets through) and falls to any lower sample. */
static void forgetting_min(double *min, double count, double x) {
    *min = count > 0 && *min * MIN_FORGET < x ? *min * MIN_FORGET : x;
}

/*
 * One pass time of n rows. On a shared machine a preempted pass takes several times its
 * cost, and such spikes would swing the decisions (the estimate is of the work, not of
 * the machine's load), so: a cost is min(running mean, 1.5x its forgetting minimum);
 * once 4 samples are in, a sample above 1.5x the prediction counts as 1.5x the
 * prediction; and a size's own mean is used only from 4 samples on, so one unlucky
 * first sample cannot make a K look expensive for good.
 */
static void observe_pass(sd_adaptive *a, int32_t n, double t) {
    if (a->n_samples >= SIZE_SAMPLES) {
        const double pred = sd_adaptive_pass_ms(a, n);
        if (t > CLIP * pred) t = CLIP * pred;
    }
    a->n_samples++;
    forgetting_min(&a->min_ver[n], a->n_ver[n], t);
    running_mean(&a->t_ver[n], &a->n_ver[n], t, a->p.timing_rate);
    a->w_ver[n] += 1.0;
}

void sd_adaptive_observe(sd_adaptive *a, int32_t n_drafted, int32_t n_accepted, double t_draft_ms,
                         double t_pass_ms) {
    const sd_adaptive_params *p = &a->p;
    if (n_drafted < 0) n_drafted = 0;
    if (n_drafted > SD_MAX_DRAFT) n_drafted = SD_MAX_DRAFT;
    if (n_accepted < 0) n_accepted = 0;
    if (n_accepted > n_drafted) n_accepted = n_drafted;
    a->n_passes++;
    /* Every pass ages the evidence, plain passes included. */
    for (int32_t i = 0; i < SD_MAX_DRAFT; i++) {
        a->acc_s[i] *= p->decay;
        a->acc_n[i] *= p->decay;
    }
    for (int32_t m = 1; m <= SD_MAX_DRAFT + 1; m++)
        a->w_ver[m] *= p->decay;
    if (t_pass_ms >= 0 && isfinite(t_pass_ms)) observe_pass(a, n_drafted + 1, t_pass_ms);
    if (a->k_last > 0 && t_draft_ms >= 0 && isfinite(t_draft_ms)) {
        double td = t_draft_ms / (n_drafted > 0 ? n_drafted : 1);
        if (a->n_draft >= SIZE_SAMPLES && td > CLIP * sd_adaptive_draft_ms(a))
            td = CLIP * sd_adaptive_draft_ms(a);
        forgetting_min(&a->min_draft, a->n_draft, td);
        running_mean(&a->t_draft, &a->n_draft, td, p->timing_rate);
    }
    /* Position i is reached when tokens 0 .. i-1 were accepted: i <= n_accepted. */
    for (int32_t i = 0; i < n_drafted && i <= n_accepted; i++) {
        a->acc_n[i] += 1.0;
        a->acc_s[i] += i < n_accepted ? 1.0 : 0.0;
    }

    double s_best = 0.0;
    best_k(a, 0.0, &s_best);
    switch (a->state) {
    case ON:
        if (a->k_last == 0 || !p->auto_off) break; /* a calibration pass decides nothing */
        a->below = s_best < 1.0 ? a->below + 1 : 0;
        if (hopeless(a)) {
            a->backoff = p->backoff_max;
            a->below = p->off_after;
        }
        if (a->below >= p->off_after) {
            a->state = OFF;
            a->countdown = a->backoff;
            a->below = 0;
            a->n_switch_off++;
        }
        break;
    case OFF:
        a->n_off_passes++;
        if (a->countdown > 0) a->countdown--;
        break;
    case PROBE:
        /* A probe that drafted nothing (an n-gram without a match) says nothing: probe
         * again, up to EMPTY_PROBES passes in a row (a draft cut to zero tokens each time
         * still costs its draft step). */
        if (n_drafted == 0 && ++a->empty_probes < EMPTY_PROBES) break;
        a->empty_probes = 0;
        /* Back on only if the probe had an accepted token: after a long time off the
         * decayed counts are mostly prior, which alone must not switch speculation on. */
        a->n_probes++;
        if (n_accepted > 0 && s_best >= 1.0) {
            a->state = ON;
            a->backoff = p->backoff_min;
            a->below = 0;
        } else {
            a->state = OFF;
            a->backoff =
                a->backoff > p->backoff_max / 2 || hopeless(a) ? p->backoff_max : 2 * a->backoff;
            a->countdown = a->backoff;
        }
        break;
    }
}

/* ---- names ---- */

const char *sd_k_policy_name(sd_k_policy p) {
    return p == SD_K_ADAPTIVE ? "adaptive" : "fixed";
}

int sd_k_policy_parse(const char *s, sd_k_policy *out) {
    if (!s) return -1;
    if (!strcmp(s, "fixed")) {
        *out = SD_K_FIXED;
        return 0;
    }
    if (!strcmp(s, "adaptive")) {
        *out = SD_K_ADAPTIVE;
        return 0;
    }
    return -1;
}

const char *sd_draft_type_name(sd_draft_type t) {
    switch (t) {
    case SD_DRAFT_AUTO:
        return "auto";
    case SD_DRAFT_NONE:
        return "none";
    case SD_DRAFT_LLM:
        return "llm";
    case SD_DRAFT_NGRAM:
        return "ngram";
    case SD_DRAFT_NGRAM_LLM:
        return "ngram+llm";
    }
    return "unknown";
}

int sd_draft_type_parse(const char *s, sd_draft_type *out) {
    static const struct {
        const char *name;
        sd_draft_type t;
    } names[] = {
        {"auto", SD_DRAFT_AUTO},
        {"none", SD_DRAFT_NONE},
        {"llm", SD_DRAFT_LLM},
        {"draft", SD_DRAFT_LLM},
        {"draft-simple", SD_DRAFT_LLM},
        {"ngram", SD_DRAFT_NGRAM},
        {"ngram-simple", SD_DRAFT_NGRAM},
        {"ngram+llm", SD_DRAFT_NGRAM_LLM},
    };
    if (!s) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].t;
            return 0;
        }
    return -1;
}
