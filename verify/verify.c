/* verify/verify.c: the verification step (greedy, speculative sampling, Gumbel).
 * One core per kind, over a row source (dense rows, or rows made on demand) and a draw
 * source (the caller's RNG, or keyed draws); the public functions pick the sources.
 * Every function validates its arguments before it reads a row or draws a uniform, and
 * writes *res only on success (see sd_verify.h for the late errors). */
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

/* Where the target rows come from: dense [k + 1, n_vocab], or made on demand. */
typedef struct row_src {
    const float *dense;
    sd_verify_row_fn fn;
    void *user;
    size_t n_vocab;
} row_src;

static const float *get_row(const row_src *r, int32_t i, sd_error *err) {
    if (r->dense) return r->dense + (size_t)i * r->n_vocab;
    const float *row = r->fn(r->user, i, err);
    if (!row && err && err->status == SD_OK)
        sd_errorf(err, SD_ERR_ARG, "verify: target row %d could not be made", (int)i);
    return row;
}

/* Where the uniforms come from: the caller's RNG in call order, or keyed by (seed,
 * pos0 + row, purpose). */
typedef struct draw_src {
    sd_rng *rng;
    uint64_t seed;
    int64_t pos0;
} draw_src;

static double draw(const draw_src *d, int32_t row, sd_draw_purpose purpose) {
    return d->rng ? sd_rng_uniform(d->rng) : sd_key_uniform(d->seed, d->pos0 + row, purpose, 0);
}

static int row_failed(sd_error *err) {
    return err && err->status != SD_OK ? err->status : SD_ERR_ARG;
}

static int greedy_core(const char *fn, const int32_t *draft, int32_t k, const row_src *rows,
                       int32_t n_vocab, sd_verify_result *res, sd_error *err) {
    sd_verify_result r;
    memset(&r, 0, sizeof r);
    for (int32_t i = 0; i <= k; i++) {
        const float *row = get_row(rows, i, err);
        if (!row) return row_failed(err);
        const int32_t a = sd_argmax_checked(row, n_vocab);
        if (a < 0)
            return sd_errorf(err, SD_ERR_ARG, "%s: target row %d has a NaN logit", fn, (int)i);
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

int sd_verify_greedy(const int32_t *draft, int32_t k, const float *target_logits, int32_t n_vocab,
                     sd_verify_result *res, sd_error *err) {
    if (!target_logits || !res)
        return sd_errorf(err, SD_ERR_ARG, "sd_verify_greedy: NULL argument");
    int st = check_draft("sd_verify_greedy", draft, k, n_vocab, err);
    if (st != SD_OK) return st;
    const row_src rows = {target_logits, NULL, NULL, (size_t)n_vocab};
    return greedy_core("sd_verify_greedy", draft, k, &rows, n_vocab, res, err);
}

/* q(x) > 0 for every drafted x (checked before any draw). */
static int check_q(const char *fn, const int32_t *draft, int32_t k, const float *q, int32_t n_vocab,
                   sd_error *err) {
    for (int32_t i = 0; i < k; i++) {
        const float qx = q[(size_t)i * (size_t)n_vocab + (size_t)draft[i]];
        if (!(qx > 0.0f)) {
            return sd_errorf(err, SD_ERR_ARG,
                             "%s: q[%d][%d] = %g, expected > 0 for a drafted token", fn, (int)i,
                             (int)draft[i], (double)qx);
        }
    }
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

/*
 * Speculative sampling (q rows) or its one-hot form (q NULL: q_i = delta at draft[i]).
 * Rejection sampling: accept x with probability min(1, p(x) / q(x)) (one-hot: p(x)); at
 * the first rejection draw from normalize(max(0, p - q)) (one-hot: p without x); an
 * all-zero residual (p <= q everywhere, impossible to reject in exact arithmetic) draws
 * from p; after k acceptances the bonus from p_k.
 */
static int sample_core(const char *fn, const int32_t *draft, int32_t k, const float *q,
                       const row_src *rows, int32_t n_vocab, const draw_src *dr, float *scratch,
                       sd_verify_result *res, sd_error *err) {
    const size_t n = (size_t)n_vocab;
    sd_verify_result r;
    memset(&r, 0, sizeof r);
    for (int32_t i = 0; i < k; i++) {
        const float *pi = get_row(rows, i, err);
        if (!pi) return row_failed(err);
        const float *qi = q ? q + (size_t)i * n : NULL;
        const int32_t x = draft[i];
        /* u < p/q in double: u < 1 and the quotient of p >= q is >= 1, so p >= q always
         * accepts; p == 0 never does (u >= 0). One-hot: q(x) = 1, the test is u < p(x). */
        const double u = draw(dr, i, SD_DRAW_ACCEPT);
        if (u < (qi ? (double)pi[x] / (double)qi[x] : (double)pi[x])) {
            r.tokens[r.n_accepted++] = x;
            continue;
        }
        const double uc = draw(dr, i, SD_DRAW_TOKEN);
        int32_t t;
        if (qi) {
            int any = 0;
            for (size_t j = 0; j < n; j++) {
                const float d = pi[j] - qi[j];
                scratch[j] = d > 0.0f ? d : 0.0f;
                any |= d > 0.0f;
            }
            t = any ? sd_sample(scratch, n_vocab, uc) : sd_sample(pi, n_vocab, uc);
        } else {
            t = sample_without(pi, n_vocab, x, uc);
            if (t < 0) t = sd_sample(pi, n_vocab, uc);
        }
        if (t < 0)
            return sd_errorf(err, SD_ERR_ARG, "%s: target row %d has no positive entry", fn,
                             (int)i);
        r.tokens[r.n_accepted] = t;
        r.n_tokens = r.n_accepted + 1;
        *res = r;
        return SD_OK;
    }
    /* All k accepted: the bonus token from p_k. */
    const float *pk = get_row(rows, k, err);
    if (!pk) return row_failed(err);
    const int32_t t = sd_sample(pk, n_vocab, draw(dr, k, SD_DRAW_TOKEN));
    if (t < 0)
        return sd_errorf(err, SD_ERR_ARG, "%s: target row %d has no positive entry", fn, (int)k);
    r.tokens[k] = t;
    r.n_tokens = k + 1;
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
    if (st == SD_OK && k > 0) st = check_q("sd_verify_sample", draft, k, q, n_vocab, err);
    if (st != SD_OK) return st;
    const row_src rows = {p, NULL, NULL, (size_t)n_vocab};
    const draw_src dr = {rng, 0, 0};
    return sample_core("sd_verify_sample", draft, k, q, &rows, n_vocab, &dr, scratch, res, err);
}

int sd_verify_onehot(const int32_t *draft, int32_t k, const float *p, int32_t n_vocab, sd_rng *rng,
                     sd_verify_result *res, sd_error *err) {
    if (!p || !rng || !res) return sd_errorf(err, SD_ERR_ARG, "sd_verify_onehot: NULL argument");
    int st = check_draft("sd_verify_onehot", draft, k, n_vocab, err);
    if (st != SD_OK) return st;
    const row_src rows = {p, NULL, NULL, (size_t)n_vocab};
    const draw_src dr = {rng, 0, 0};
    return sample_core("sd_verify_onehot", draft, k, NULL, &rows, n_vocab, &dr, NULL, res, err);
}

/* Gumbel: y_i = the Gumbel-max token of p_i at (seed, pos0 + i); accept while draft[i] ==
 * y_i, emit the first y_i that differs or the bonus y_k. */
static int gumbel_core(const char *fn, const int32_t *draft, int32_t k, const row_src *rows,
                       int32_t n_vocab, uint64_t seed, int64_t pos0, sd_verify_result *res,
                       sd_error *err) {
    sd_verify_result r;
    memset(&r, 0, sizeof r);
    for (int32_t i = 0; i <= k; i++) {
        const float *pi = get_row(rows, i, err);
        if (!pi) return row_failed(err);
        const int32_t y = sd_gumbel_sample(pi, n_vocab, NULL, seed, pos0 + i);
        if (y < 0)
            return sd_errorf(err, SD_ERR_ARG, "%s: target row %d has no positive entry", fn,
                             (int)i);
        r.tokens[i] = y;
        if (i < k && draft[i] == y) {
            r.n_accepted++;
            continue;
        }
        break;
    }
    r.n_tokens = r.n_accepted + 1;
    *res = r;
    return SD_OK;
}

int sd_verify_keyed(const sd_sampling_params *sp, const int32_t *draft, int32_t k, const float *q,
                    sd_verify_row_fn rows, void *user, int32_t n_vocab, uint64_t seed, int64_t pos0,
                    float *scratch, sd_verify_result *res, sd_error *err) {
    static const char fn[] = "sd_verify_keyed";
    if (!sp || !rows || !res) return sd_errorf(err, SD_ERR_ARG, "%s: NULL argument", fn);
    int st = check_draft(fn, draft, k, n_vocab, err);
    if (st != SD_OK) return st;
    const row_src src = {NULL, rows, user, (size_t)n_vocab};
    if (!(sp->temp > 0.0f)) return greedy_core(fn, draft, k, &src, n_vocab, res, err);
    if (sp->spec == SD_SPEC_GUMBEL)
        return gumbel_core(fn, draft, k, &src, n_vocab, seed, pos0, res, err);
    if (q && !scratch) return sd_errorf(err, SD_ERR_ARG, "%s: NULL scratch", fn);
    if (q && k > 0 && (st = check_q(fn, draft, k, q, n_vocab, err))) return st;
    const draw_src dr = {NULL, seed, pos0};
    return sample_core(fn, draft, k, q, &src, n_vocab, &dr, scratch, res, err);
}
