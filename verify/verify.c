/* verify/verify.c: the verification step (greedy and speculative sampling).
 * Both functions validate their arguments before they draw a uniform, and write *res
 * only on success (see sd_verify.h for the one late error of sd_verify_sample). */
#include "verify/sd_verify.h"

#include <string.h>

/* Shared argument checks: k in range, pointers present, draft ids in [0, n_vocab). */
static int check_draft(const char *fn, const int32_t *draft, int32_t k, int32_t n_vocab,
                       sd_error *err) {
    if (k < 0 || k > SD_MAX_DRAFT) {
        return sd_errorf(err, SD_ERR_ARG, "%s: k = %d, expected 0 <= k <= %d", fn, (int)k,
                         SD_MAX_DRAFT);
    }
    if (n_vocab < 1) {
        return sd_errorf(err, SD_ERR_ARG, "%s: n_vocab = %d, expected >= 1", fn, (int)n_vocab);
    }
    if (k > 0 && !draft)
        return sd_errorf(err, SD_ERR_ARG, "%s: draft is NULL with k = %d", fn, (int)k);
    for (int32_t i = 0; i < k; i++) {
        if (draft[i] < 0 || draft[i] >= n_vocab) {
            return sd_errorf(err, SD_ERR_ARG, "%s: draft[%d] = %d, expected a token id in [0, %d)",
                             fn, (int)i, (int)draft[i], (int)n_vocab);
        }
    }
    return SD_OK;
}

/* sd_argmax that also reports a NaN in the row (returns -1). */
static int32_t argmax_checked(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return -1;
        if (x[i] > x[best]) best = i;
    }
    return best;
}

int sd_verify_greedy(const int32_t *draft, int32_t k, const float *target_logits, int32_t n_vocab,
                     sd_verify_result *res, sd_error *err) {
    if (!target_logits || !res)
        return sd_errorf(err, SD_ERR_ARG, "sd_verify_greedy: NULL argument");
    int st = check_draft("sd_verify_greedy", draft, k, n_vocab, err);
    if (st != SD_OK) return st;

    sd_verify_result r;
    memset(&r, 0, sizeof r);
    for (int32_t i = 0; i <= k; i++) {
        const int32_t a = argmax_checked(target_logits + (size_t)i * (size_t)n_vocab, n_vocab);
        if (a < 0) {
            return sd_errorf(err, SD_ERR_ARG, "sd_verify_greedy: target row %d has a NaN logit",
                             (int)i);
        }
        r.tokens[i] = a;
        if (i < k && draft[i] == a) {
            r.n_accepted++;
            continue;
        }
        break; /* a is the correction (i < k) or the bonus (i == k) */
    }
    r.n_tokens = r.n_accepted + 1;
    *res = r;
    return SD_OK;
}

int sd_verify_sample(const int32_t *draft, int32_t k, const float *q, const float *p,
                     int32_t n_vocab, sd_rng *rng, float *scratch, sd_verify_result *res,
                     sd_error *err) {
    if (!p || !rng || !scratch || !res || (k > 0 && !q)) {
        return sd_errorf(err, SD_ERR_ARG, "sd_verify_sample: NULL argument");
    }
    int st = check_draft("sd_verify_sample", draft, k, n_vocab, err);
    if (st != SD_OK) return st;
    const size_t n = (size_t)n_vocab;
    for (int32_t i = 0; i < k; i++) {
        const float qx = q[(size_t)i * n + (size_t)draft[i]];
        if (!(qx > 0.0f)) {
            return sd_errorf(err, SD_ERR_ARG,
                             "sd_verify_sample: q[%d][%d] = %g, expected > 0 for a drafted token",
                             (int)i, (int)draft[i], (double)qx);
        }
    }

    sd_verify_result r;
    memset(&r, 0, sizeof r);
    for (int32_t i = 0; i < k; i++) {
        const float *qi = q + (size_t)i * n;
        const float *pi = p + (size_t)i * n;
        const int32_t x = draft[i];
        /* Accept with probability min(1, p/q): u < p/q. u < 1 and the double quotient of
         * p >= q is >= 1, so p >= q always accepts; p == 0 never does (u >= 0). */
        const double u = sd_rng_uniform(rng);
        if (u < (double)pi[x] / (double)qi[x]) {
            r.tokens[r.n_accepted++] = x;
            continue;
        }
        /* Rejected: correction from normalize(max(0, p - q)). */
        int any = 0;
        for (size_t j = 0; j < n; j++) {
            const float d = pi[j] - qi[j];
            scratch[j] = d > 0.0f ? d : 0.0f;
            any |= d > 0.0f;
        }
        const double uc = sd_rng_uniform(rng);
        /* An all-zero residual means p <= q everywhere on this row (p == q for normalised
         * rows, where rejection is impossible in exact arithmetic): draw from p. */
        const int32_t t = any ? sd_sample(scratch, n_vocab, uc) : sd_sample(pi, n_vocab, uc);
        if (t < 0) {
            return sd_errorf(err, SD_ERR_ARG,
                             "sd_verify_sample: target row %d has no positive entry", (int)i);
        }
        r.tokens[r.n_accepted] = t;
        r.n_tokens = r.n_accepted + 1;
        *res = r;
        return SD_OK;
    }
    /* All k accepted: bonus token from p[k]. */
    const int32_t t = sd_sample(p + (size_t)k * n, n_vocab, sd_rng_uniform(rng));
    if (t < 0) {
        return sd_errorf(err, SD_ERR_ARG, "sd_verify_sample: target row %d has no positive entry",
                         (int)k);
    }
    r.tokens[k] = t;
    r.n_tokens = k + 1;
    *res = r;
    return SD_OK;
}

/* Inverse-CDF draw from row[0 .. n) with entry `skip` treated as zero (the residual of
 * a one-hot proposal): smallest i != skip with sum_{j <= i, j != skip} row[j] > u * total.
 * Same summation order for total and the running sum, so u < 1 always returns inside
 * the loop. -1 if no entry other than skip is positive. */
static int32_t sample_without(const float *row, int32_t n, int32_t skip, double u) {
    double total = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (i != skip && row[i] > 0.0f) {
            total += (double)row[i];
            last = i;
        }
    }
    if (last < 0) return -1;
    const double target = u * total;
    double cum = 0.0;
    for (int32_t i = 0; i <= last; i++) {
        if (i != skip && row[i] > 0.0f) {
            cum += (double)row[i];
            if (cum > target) return i;
        }
    }
    return last;
}

int sd_verify_onehot(const int32_t *draft, int32_t k, const float *p, int32_t n_vocab, sd_rng *rng,
                     sd_verify_result *res, sd_error *err) {
    if (!p || !rng || !res) return sd_errorf(err, SD_ERR_ARG, "sd_verify_onehot: NULL argument");
    int st = check_draft("sd_verify_onehot", draft, k, n_vocab, err);
    if (st != SD_OK) return st;
    const size_t n = (size_t)n_vocab;
    sd_verify_result r;
    memset(&r, 0, sizeof r);
    for (int32_t i = 0; i < k; i++) {
        const float *pi = p + (size_t)i * n;
        const int32_t x = draft[i];
        /* Accept with probability min(1, p(x) / q(x)) = p(x): u < p(x), the test of
         * sd_verify_sample with q(x) = 1, so both give the same tokens from the same
         * draws. */
        const double u = sd_rng_uniform(rng);
        if (u < (double)pi[x]) {
            r.tokens[r.n_accepted++] = x;
            continue;
        }
        /* Rejected: the residual max(0, p - delta_x) is p without x. If nothing else is
         * positive (p(x) just below 1 in float, the rest 0) the residual is empty: draw
         * from p, as sd_verify_sample does. */
        const double uc = sd_rng_uniform(rng);
        int32_t t = sample_without(pi, n_vocab, x, uc);
        if (t < 0) t = sd_sample(pi, n_vocab, uc);
        if (t < 0) {
            return sd_errorf(err, SD_ERR_ARG,
                             "sd_verify_onehot: target row %d has no positive entry", (int)i);
        }
        r.tokens[r.n_accepted] = t;
        r.n_tokens = r.n_accepted + 1;
        *res = r;
        return SD_OK;
    }
    const int32_t t = sd_sample(p + (size_t)k * n, n_vocab, sd_rng_uniform(rng));
    if (t < 0) {
        return sd_errorf(err, SD_ERR_ARG, "sd_verify_onehot: target row %d has no positive entry",
                         (int)k);
    }
    r.tokens[k] = t;
    r.n_tokens = k + 1;
    *res = r;
    return SD_OK;
}
