/*
 * runtime/engine/batch_policy.c: the batcher's adaptive draft length, one K for every
 * request of the step whose policy is adaptive (SD_K_ADAPTIVE).
 *
 * In a batch the cost of a draft token is not one request's: every drafted token adds a
 * row to the shared target pass, and each draft position is one more draft pass over
 * every drafting request. So the step's K maximises the batch's predicted throughput
 *     tokens(K) / time(K),
 *     tokens(K) = sum over drafting requests r of E_r(K) + the other rows' tokens,
 *     time(K)   = K T_d(n_d) + T_t(R_0 + n_d K),
 * with E_r(K) = 1 + sum_{k<=K} prod_{i<=k} a_{r,i} from each request's own acceptance
 * estimates (its sd_adaptive controller, observed after every pass), n_d the drafting
 * requests, R_0 the pass's tokens without drafts (one per decoding request plus prompt
 * chunks), T_t(R) the target pass time over R tokens and T_d(n) a draft pass over n
 * tokens: both lines alpha + beta x fitted online by least squares with forgetting
 * (factor 0.98 a sample) over every pass measured (a sample above twice the fit counts
 * as twice the fit: preemption on a shared machine). Before two distinct sizes are
 * measured a line through the one mean with slope 0.35 of it per token is used. On a CPU,
 * where a pass over many rows is compute-bound, this turns speculation off as the batch
 * grows and back on when it shrinks; after 64 steps at K = 0 one step probes with the K
 * that optimistic estimates (each a_i at least 0.75) choose, so the estimates stay fresh.
 * The choice changes only how many tokens are drafted, never which tokens a greedy
 * request emits.
 */
#include <math.h>
#include <string.h>

#include "runtime/engine/batcher_impl.h"

#define FIT_DECAY    0.98
#define FIT_CLIP     2.0
#define PRIOR_SLOPE  0.35
#define PROBE_AFTER  64
#define PROBE_ACCEPT 0.75
#define DRAFT_PRIOR  0.3

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

/* Expected tokens of a request at K with acceptance estimates at least floor. */
static double expected(const sd_adaptive *a, int32_t k, double floor) {
    double e = 1.0, prod = 1.0;
    for (int32_t i = 1; i <= k; i++) {
        double ai = sd_adaptive_accept(a, i);
        if (ai < floor) ai = floor;
        prod *= ai;
        e += prod;
    }
    return e;
}

int32_t sd_batch_choose_k(sd_batcher *b, const sd_choice *const *d, int32_t n_d, int32_t k_max,
                          int32_t base_tokens, double base_yield) {
    if (n_d == 0 || k_max <= 0) return 0;
    if (b->tfit.n == 0) return k_max > 2 ? 2 : k_max; /* nothing measured yet: a middle K */
    const int probe = b->k_zero_steps >= PROBE_AFTER;
    const double floor = probe ? PROBE_ACCEPT : 0.0;
    int32_t best = 0;
    double best_rate = -1.0;
    for (int32_t k = 0; k <= k_max; k++) {
        double tokens = base_yield;
        for (int32_t i = 0; i < n_d; i++)
            tokens += expected(&d[i]->ctl, k, floor);
        double t = sd_cost_fit_eval(&b->tfit, (double)base_tokens + (double)n_d * k);
        /* A draft pass before one is measured: DRAFT_PRIOR of a target pass as wide. */
        const double td = b->dfit.n ? sd_cost_fit_eval(&b->dfit, (double)n_d)
                                    : DRAFT_PRIOR * sd_cost_fit_eval(&b->tfit, (double)n_d);
        if (k > 0) t += (double)k * td;
        const double rate = t > 0 ? tokens / t : 0.0;
        if (rate > best_rate * (1.0 + 1e-9)) { /* ties: the smaller K */
            best_rate = rate;
            best = k;
        }
    }
    if (probe && best == 0) best = 1;
    b->k_zero_steps = best == 0 ? b->k_zero_steps + 1 : 0;
    return best;
}
