/* runtime/engine/adaptive.c: the adaptive draft-length controller and its auto-off
 * switch (the model, the estimates and the rules are at sd_adaptive_params in
 * sd_engine.h), for a sequence alone in its pass and for a sequence of a batch (the
 * batcher: sd_adaptive_batch, the batch's measured pass cost line sd_cost_fit), and the
 * K-policy names. */
#include <math.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"

/* Relative cost of one more row in a pass before anything is measured (s0). */
#define SLOPE_PRIOR 0.25
/* Probe passes in a row that may draft nothing before the probe counts as failed. */
#define EMPTY_PROBES 8
/* Kind 0: the draft's per-token cost; kind n: a pass of n rows. */
#define KIND_DRAFT 0
/* Below this speedup at full acceptance a pair cannot pay: off at once, probes rare. */
#define HOPELESS 0.8
#define EARLY    1

/* A timing counts at most this many times its kind's median in the kind's mean. */
#define SPIKE_CAP 10.0

/* The batch's cost line (sd_cost_fit). */
#define FIT_DECAY   0.98
#define FIT_CLIP    2.0
#define PRIOR_SLOPE 0.35

void sd_cost_fit_add(sd_cost_fit *f, double x, double y) {
    const double pred = sd_cost_fit_eval(f, x);
    if (f->n > 4 && pred > 0 && y > FIT_CLIP * pred) y = FIT_CLIP * pred;
    f->sw = FIT_DECAY * f->sw + 1.0;
    f->sx = FIT_DECAY * f->sx + x;
    f->sy = FIT_DECAY * f->sy + y;
    f->sxx = FIT_DECAY * f->sxx + x * x;
    f->sxy = FIT_DECAY * f->sxy + x * y;
    if (f->n == 0) f->x0 = x;
    if (x != f->x0) f->distinct = 1;
    f->n++;
}

double sd_cost_fit_eval(const sd_cost_fit *f, double x) {
    if (f->n == 0 || f->sw <= 0) return 0.0;
    const double mx = f->sx / f->sw, my = f->sy / f->sw;
    const double var = f->sxx / f->sw - mx * mx;
    double beta, alpha;
    if (f->distinct && var > 1e-9) {
        beta = (f->sxy / f->sw - mx * my) / var;
        if (beta < 0) beta = 0; /* a pass never gets cheaper with more tokens */
        alpha = my - beta * mx;
        if (alpha < 0) { /* through the origin then */
            alpha = 0;
            beta = f->sxy / (f->sxx > 0 ? f->sxx : 1);
        }
    } else { /* one size seen: y = my (1 + s (x - 1)) / (1 + s (mx - 1)) */
        const double base = my / (1.0 + PRIOR_SLOPE * (mx - 1.0));
        beta = base * PRIOR_SLOPE;
        alpha = base - beta;
    }
    return alpha + beta * x;
}

sd_adaptive_params sd_adaptive_default_params(void) {
    sd_adaptive_params p;
    p.k_max = 4;
    p.auto_off = 1;
    p.decay = 0.95;
    p.prior_accept = 0.5;
    p.prior_weight = 1.0;
    p.calibrate = 5;
    p.recalibrate = 128;
    p.min_samples = 4;
    p.off_after = 6;
    p.off_margin = 0.97;
    p.probe_passes = 2;
    p.backoff_min = 16;
    p.backoff_max = 128;
    p.draft_prior = 0.1;
    return p;
}

int sd_adaptive_init(sd_adaptive *a, const sd_adaptive_params *p, sd_error *err) {
    memset(a, 0, sizeof *a);
    if (p->k_max < 1 || p->k_max > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "adaptive: k_max = %d, expected 1 .. %d", p->k_max,
                         SD_MAX_DRAFT);
    if (!(p->decay > 0.0 && p->decay < 1.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: decay = %g, expected in (0, 1)", p->decay);
    if (!(p->prior_accept > 0.0 && p->prior_accept < 1.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: prior_accept = %g, expected in (0, 1)",
                         p->prior_accept);
    if (!(p->prior_weight > 0.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: prior_weight = %g, expected > 0",
                         p->prior_weight);
    if (!(p->draft_prior >= 0.0 && p->draft_prior < 100.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: draft_prior = %g, expected in [0, 100)",
                         p->draft_prior);
    if (!(p->off_margin > 0.0 && p->off_margin <= 1.0))
        return sd_errorf(err, SD_ERR_ARG, "adaptive: off_margin = %g, expected in (0, 1]",
                         p->off_margin);
    if (p->calibrate < 1 || p->recalibrate < 2 || p->min_samples < 1 ||
        p->min_samples > SD_ADAPTIVE_RING || p->probe_passes < 1)
        return sd_errorf(err, SD_ERR_ARG,
                         "adaptive: calibrate = %d, recalibrate = %d, min_samples = %d, "
                         "probe_passes = %d: expected calibrate >= 1, recalibrate >= 2, "
                         "1 <= min_samples <= %d, probe_passes >= 1",
                         p->calibrate, p->recalibrate, p->min_samples, p->probe_passes,
                         SD_ADAPTIVE_RING);
    if (p->off_after < 1 || p->backoff_min < 1 || p->backoff_max < p->backoff_min)
        return sd_errorf(err, SD_ERR_ARG,
                         "adaptive: off_after = %d, backoff %d .. %d: expected off_after >= 1 "
                         "and 1 <= backoff_min <= backoff_max",
                         p->off_after, p->backoff_min, p->backoff_max);
    a->p = *p;
    a->state = SD_ADAPTIVE_ON;
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

/* Timings of a kind kept in its ring (the first one is left out). */
static int32_t kept(const sd_adaptive *a, int32_t kind) {
    const int32_t n = a->n_seen[kind] - 1;
    return n < 0 ? 0 : (n < SD_ADAPTIVE_RING ? n : SD_ADAPTIVE_RING);
}

/* The cost of a pass of n rows from the other measured sizes (n itself left out):
 * between two measured sizes the line between them; above the largest measured size m,
 * v(m) + s (n - m) with s the smallest slope between consecutive measured sizes, at most
 * s0 v(1) (optimistic: verification costs are concave in n, the first extra row is the
 * dearest, so a line through the first two sizes would rule out long drafts untried);
 * below the smallest, the prior slope s0 down to it; nothing measured: 1 + s0 (n - 1). */
static double pass_model(const sd_adaptive *a, int32_t n) {
    int32_t lo = n - 1, hi = n + 1;
    while (lo >= 1 && !kept(a, lo))
        lo--;
    while (hi <= SD_MAX_DRAFT + 1 && !kept(a, hi))
        hi++;
    if (lo >= 1 && hi <= SD_MAX_DRAFT + 1) {
        const double clo = exp(a->log_cost[lo]), chi = exp(a->log_cost[hi]);
        return clo + (chi - clo) * (double)(n - lo) / (double)(hi - lo);
    }
    if (lo >= 1) {
        const double clo = exp(a->log_cost[lo]);
        double slope = kept(a, 1) ? SLOPE_PRIOR * exp(a->log_cost[1]) : SLOPE_PRIOR * clo / lo;
        for (int32_t m = 1, prev = 0; m <= lo; m++) {
            if (!kept(a, m)) continue;
            if (prev) {
                const double sl =
                    (exp(a->log_cost[m]) - exp(a->log_cost[prev])) / (double)(m - prev);
                if (sl < slope) slope = sl;
            }
            prev = m;
        }
        return clo + (slope > 0.0 ? slope : 0.0) * (n - lo);
    }
    if (hi <= SD_MAX_DRAFT + 1) /* below every measured size: the prior slope down to it */
        return exp(a->log_cost[hi]) * (1.0 + SLOPE_PRIOR * (n - 1)) /
               (1.0 + SLOPE_PRIOR * (hi - 1));
    return -1.0; /* no other size measured */
}

/* Load-free cost of a pass of n rows (the units of the first timings): its own median
 * once it has min_samples timings kept; before, the smaller of that and the model of
 * the other sizes (so one unlucky timing cannot rule a K out: it is tried again until
 * its median means something). */
static double pass_cost(const sd_adaptive *a, int32_t n) {
    if (n < 1) n = 1;
    if (n > SD_MAX_DRAFT + 1) n = SD_MAX_DRAFT + 1;
    const int32_t have = kept(a, n);
    if (have >= a->p.min_samples) return exp(a->log_cost[n]);
    const double model = pass_model(a, n);
    if (!have) return model > 0.0 ? model : 1.0 + SLOPE_PRIOR * (n - 1); /* arbitrary unit */
    const double own = exp(a->log_cost[n]);
    return model > 0.0 && model < own ? model : own;
}

static double draft_cost(const sd_adaptive *a) {
    return kept(a, KIND_DRAFT) > 0 ? exp(a->log_cost[KIND_DRAFT])
                                   : a->p.draft_prior * pass_cost(a, 1);
}

double sd_adaptive_pass_ms(const sd_adaptive *a, int32_t n) {
    return pass_cost(a, n) * exp(a->log_load);
}

double sd_adaptive_draft_ms(const sd_adaptive *a) {
    return draft_cost(a) * exp(a->log_load);
}

int sd_adaptive_in_batch(const sd_adaptive *a) {
    return (a->batch.base_rows > 0 || a->batch.n_seqs > 1) && a->batch.pass.n > 0;
}

void sd_adaptive_set_batch(sd_adaptive *a, const sd_adaptive_batch *b) {
    if (b)
        a->batch = *b;
    else
        memset(&a->batch, 0, sizeof a->batch);
}

/* T(K): the time of a pass that drafts k tokens, alone (load-free units) or in the
 * batch (ms, see sd_adaptive_batch). */
static double pass_time(const sd_adaptive *a, int32_t k) {
    if (!sd_adaptive_in_batch(a)) return k * draft_cost(a) + pass_cost(a, k + 1);
    const sd_adaptive_batch *b = &a->batch;
    const double n = b->n_seqs > 1 ? b->n_seqs : 1.0;
    double c = 0.0;
    if (k > 0)
        c = kept(a, KIND_DRAFT) > 0 ? sd_adaptive_draft_ms(a)
                                    : a->p.draft_prior * sd_cost_fit_eval(&b->pass, n);
    return k * c + sd_cost_fit_eval(&b->pass, (double)b->base_rows + n * (k + 1.0));
}

/* The speedup of drafting k tokens that yield e tokens on average: against plain
 * decoding alone, in batch mode against the same batch without its adaptive sequences'
 * drafts (see sd_adaptive_batch). */
static double speedup_of(const sd_adaptive *a, int32_t k, double e) {
    const double t = pass_time(a, k);
    if (!sd_adaptive_in_batch(a)) return t > 0 ? e * pass_time(a, 0) / t : 0.0;
    const double y = a->batch.base_yield, n = a->batch.n_seqs > 1 ? a->batch.n_seqs : 1.0;
    return t > 0 ? (y + n * e) * pass_time(a, 0) / ((y + n) * t) : 0.0;
}

static double speedup(const sd_adaptive *a, int32_t k, double floor_prior) {
    return speedup_of(a, k, expected_tokens(a, k, floor_prior));
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
        const double s = speedup_of(a, k, k + 1.0);
        if (s > best) best = s;
    }
    return best;
}

int sd_adaptive_is_off(const sd_adaptive *a) {
    return a->state != SD_ADAPTIVE_ON;
}

sd_adaptive_state sd_adaptive_state_of(const sd_adaptive *a) {
    return a->state;
}

/* Every cost a decision at draft length k reads has min_samples timings kept. */
static int measured(const sd_adaptive *a, int32_t k) {
    const int32_t m = a->p.min_samples;
    if (sd_adaptive_in_batch(a)) return a->batch.pass.n >= m;
    return kept(a, KIND_DRAFT) >= m && kept(a, 1) >= m && kept(a, k + 1) >= m;
}

/* ---- timings ---- */

/* Median of x[0 .. n), 1 <= n <= SD_ADAPTIVE_RING (the mean of the two middle ones). */
static double median(const double *x, int32_t n) {
    double v[SD_ADAPTIVE_RING];
    for (int32_t i = 0; i < n; i++) { /* insertion sort: n <= 16 */
        int32_t j = i;
        while (j > 0 && v[j - 1] > x[i]) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x[i];
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* log of the mean of exp(x[0 .. n)), each term at most SPIKE_CAP times the median: the
 * mean cost of a kind (what throughput pays, spikes included), a stall of seconds
 * bounded. */
static double log_mean_exp(const double *x, int32_t n, double log_med) {
    const double cap = log_med + log(SPIKE_CAP);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp(x[i] < cap ? x[i] : cap);
    return log(sum / n);
}

/*
 * One timing x (ms) of a kind, read as x = cost(kind) L(t) (see sd_engine.h): the
 * load moves to the median of the last timings' log x - log median(kind) (kinds whose
 * level is known), then the kind's cost to the mean of its last x / L. The first timing
 * of each kind is left out (cold caches).
 */
static void observe_timing(sd_adaptive *a, int32_t kind, double x) {
    if (!(x >= 0.0) || !isfinite(x)) return;
    if (x < 1e-6) x = 1e-6; /* a free draft (an n-gram lookup, ~0 ms): a tiny cost */
    if (++a->n_seen[kind] == 1) return;
    const double lx = log(x);
    if (kept(a, kind) > 1) { /* the kind's level is known from earlier timings */
        /* Against the kind's median (not its mean, which spikes raise: the load would then
         * fall to meet it, and the normalised timings and the mean climb without end). */
        a->load_ring[a->n_load % SD_ADAPTIVE_RING] = lx - a->log_med[kind];
        a->n_load++;
        const int32_t n = a->n_load < SD_ADAPTIVE_RING ? a->n_load : SD_ADAPTIVE_RING;
        a->log_load = median(a->load_ring, n);
    }
    const int32_t slot = (a->n_seen[kind] - 2) % SD_ADAPTIVE_RING;
    a->ring[kind][slot] = lx - a->log_load;
    a->log_med[kind] = median(a->ring[kind], kept(a, kind));
    a->log_cost[kind] = log_mean_exp(a->ring[kind], kept(a, kind), a->log_med[kind]);
}

/* ---- decisions ---- */

static int32_t recalibrate_every(const sd_adaptive *a);

/* A plain calibration pass next? Two at the start, then the rest of `calibrate` every
 * other pass among the first drafting passes (so that draft and target timings of the
 * same moments tie the load of both together), then recalibrate_every. */
static int calibrating(const sd_adaptive *a) {
    if (a->n_calibration < 2) return 1;
    if (a->n_calibration < a->p.calibrate) return a->since_calib >= 1;
    return a->since_calib >= recalibrate_every(a);
}

/* Passes between plain calibration passes while on: recalibrate / 8 while the predicted
 * speedup is below 1.25 (a plain pass then costs at most 20% of a pass), / 4 below 2,
 * else recalibrate (at least 2). */
static int32_t recalibrate_every(const sd_adaptive *a) {
    double s = 0.0;
    best_k(a, 0.0, &s);
    const int32_t r = a->p.recalibrate, d = s < 1.25 ? 8 : (s < 2.0 ? 4 : 1);
    return r / d >= 2 ? r / d : 2;
}

int32_t sd_adaptive_next_k(sd_adaptive *a) {
    int32_t k;
    switch (a->state) {
    case SD_ADAPTIVE_OFF:
        if (a->countdown > 0) {
            k = 0;
            break;
        }
        a->state = SD_ADAPTIVE_PROBE;
        a->probe_left = a->p.probe_passes;
        a->empty_probes = 0;
        k = best_k(a, a->p.prior_accept, NULL);
        break;
    case SD_ADAPTIVE_PROBE:
        k = best_k(a, a->p.prior_accept, NULL);
        break;
    default:
        /* Calibration: measure v(1) (a plain pass costs plain decoding nothing). Close to
         * S = 1 the decision needs v(1) most and a plain pass costs least: more often. */
        if (!sd_adaptive_in_batch(a) && calibrating(a))
            k = 0;
        else
            k = best_k(a, 0.0, NULL);
        break;
    }
    a->k_last = k;
    return k;
}

/* Switch speculation off for `backoff` passes. */
static void switch_off(sd_adaptive *a, int32_t backoff) {
    a->state = SD_ADAPTIVE_OFF;
    a->backoff = backoff;
    a->countdown = backoff;
    a->below = 0;
}

void sd_adaptive_observe(sd_adaptive *a, int32_t n_drafted, int32_t n_accepted, double t_draft_ms,
                         double t_pass_ms) {
    const sd_adaptive_params *p = &a->p;
    if (n_drafted < 0) n_drafted = 0;
    if (n_drafted > SD_MAX_DRAFT) n_drafted = SD_MAX_DRAFT;
    if (n_accepted < 0) n_accepted = 0;
    if (n_accepted > n_drafted) n_accepted = n_drafted;
    a->n_passes++;
    /* Every pass ages the acceptance evidence, plain passes included. */
    for (int32_t i = 0; i < SD_MAX_DRAFT; i++) {
        a->acc_s[i] *= p->decay;
        a->acc_n[i] *= p->decay;
    }
    if (n_drafted > 0) observe_timing(a, KIND_DRAFT, t_draft_ms / n_drafted);
    if (!sd_adaptive_in_batch(a)) observe_timing(a, n_drafted + 1, t_pass_ms);
    /* Position i is reached when tokens 0 .. i-1 were accepted: i <= n_accepted. */
    for (int32_t i = 0; i < n_drafted && i <= n_accepted; i++) {
        a->acc_n[i] += 1.0;
        a->acc_s[i] += i < n_accepted ? 1.0 : 0.0;
    }

    double s_best = 0.0;
    const int32_t kb = best_k(a, 0.0, &s_best);
    switch (a->state) {
    case SD_ADAPTIVE_ON:
        if (a->k_last == 0) { /* a calibration pass decides nothing */
            a->n_calibration++;
            a->since_calib = 0;
            break;
        }
        a->since_calib++;
        if (!p->auto_off || n_drafted == 0) break;
        if (!measured(a, kb)) break;                   /* no decision on one or two timings */
        if (sd_adaptive_speedup_bound(a) < HOPELESS) { /* even full acceptance cannot pay */
            a->n_switch_off++;
            switch_off(a, p->backoff_max);
            break;
        }
        a->below = s_best < p->off_margin ? a->below + 1 : 0;
        if (a->below >= p->off_after) {
            a->n_switch_off++;
            switch_off(a, a->backoff);
        }
        break;
    case SD_ADAPTIVE_OFF:
        a->n_off_passes++;
        if (a->countdown > 0) a->countdown--;
        break;
    case SD_ADAPTIVE_PROBE:
        /* A probe pass that drafted nothing (an n-gram without a match) says nothing:
         * probe again, up to EMPTY_PROBES passes in a row. */
        if (n_drafted == 0 && ++a->empty_probes < EMPTY_PROBES) break;
        a->empty_probes = 0;
        /* A probe pass that had nothing accepted and predicts a loss ends the probe: only
         * turning speculation back on needs the evidence of every probe pass. */
        if (--a->probe_left > 0 && !(n_accepted == 0 && s_best < p->off_margin)) break;
        a->n_probes++;
        if (s_best >= 1.0) {
            a->state = SD_ADAPTIVE_ON;
            a->backoff = p->backoff_min;
            a->below = 0;
            a->since_calib = 0;
        } else {
            const int32_t b = a->backoff > p->backoff_max / 2 ? p->backoff_max : 2 * a->backoff;
            switch_off(a, b);
        }
        break;
    }
}

/* ---- names ---- */

const char *sd_k_policy_name(sd_k_policy p) {
    switch (p) {
    case SD_K_ADAPTIVE:
        return "adaptive";
    case SD_K_SWEEP:
        return "sweep";
    case SD_K_FIXED:
        break;
    }
    return "fixed";
}

int sd_k_policy_parse(const char *s, sd_k_policy *out) {
    static const sd_k_policy all[] = {SD_K_FIXED, SD_K_ADAPTIVE, SD_K_SWEEP};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, sd_k_policy_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}
