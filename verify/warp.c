/* verify/warp.c: logits -> sampling probabilities (temperature, top-k, top-p).
 *
 * Cost per row of n logits (min-p adds one counting pass and becomes a top-k):
 *   temp <= 0                      one pass (NaN check + argmax), no exp.
 *   top_k off, top_p off           two passes, n expf, no sort.
 *   top_k = k < n                  partial selection with a k-entry heap, O(n log k) worst
 *                                  case but O(n) in practice (most logits fail one
 *                                  compare against the heap's weakest entry), then a
 *                                  heap sort of the k survivors and top-p over them.
 *   top_k off, top_p < 1           n expf, then a quickselect-style search for the
 *                                  boundary logit (three-way partitions by a pivot logit,
 *                                  keeping the side that holds the top-p boundary): O(n)
 *                                  expected, no sort, even for a near-flat row whose
 *                                  nucleus is most of the vocabulary.
 * Ranking is by (logit descending, token id ascending): the probability is a
 * nondecreasing function of the logit, so this is "most probable first" with ties broken
 * towards the lower id, and it is the same order for every temperature.
 */
#include "verify/sd_sample.h"

#include <math.h>
#include <string.h>

/* Does token a rank before token b? A strict total order over distinct ids (no NaN). */
static inline int ranks_before(const float *l, int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* Heap whose root is the entry that ranks last ("weakest"). Restore the heap below i. */
static void sift_down(int32_t *h, int32_t n, int32_t i, const float *l) {
    const int32_t x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ranks_before(l, h[c], h[c + 1])) c++; /* the weaker child */
        if (ranks_before(l, h[c], x)) break;                   /* x is weaker: done */
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Write into idx[0 .. m) the m best-ranked token ids of l[0 .. n), best first. 1 <= m <= n. */
static void select_top(const float *l, int32_t n, int32_t m, int32_t *idx) {
    for (int32_t i = 0; i < m; i++)
        idx[i] = i;
    for (int32_t i = m / 2 - 1; i >= 0; i--)
        sift_down(idx, m, i, l);
    /* Ids arrive in increasing order, so a newcomer ties with the weakest kept entry
     * only from behind: it displaces it only on a strictly larger logit. */
    float thr = l[idx[0]];
    for (int32_t i = m; i < n; i++) {
        if (l[i] > thr) {
            idx[0] = i;
            sift_down(idx, m, 0, l);
            thr = l[idx[0]];
        }
    }
    /* Heap sort: the weakest goes to the back each time, leaving idx best-first. */
    for (int32_t e = m - 1; e > 0; e--) {
        const int32_t t = idx[0];
        idx[0] = idx[e];
        idx[e] = t;
        sift_down(idx, e, 0, l);
    }
}

/* Unnormalised softmax weight of a logit v given the row maximum mx (1 at the maximum;
 * also well defined when mx is +inf or every logit is -inf). */
static inline float weight(float v, float mx, float temp) {
    return v == mx ? 1.0f : expf((v - mx) / temp);
}

/* Length of the shortest prefix of the best-first list idx[0 .. m) whose weight reaches
 * top_p * total, or 0 if the whole list falls short. *kept_sum gets the prefix's weight. */
static int32_t top_p_prefix(const float *l, const int32_t *idx, int32_t m, float mx, float temp,
                            double target, double *kept_sum) {
    double cum = 0.0;
    for (int32_t j = 0; j < m; j++) {
        cum += (double)weight(l[idx[j]], mx, temp);
        if (cum >= target) {
            *kept_sum = cum;
            return j + 1;
        }
    }
    *kept_sum = cum;
    return 0;
}

/* probs := 0 except the kept ids idx[0 .. m), which get weight / kept_sum. */
static void write_kept(const float *l, const int32_t *idx, int32_t m, float mx, float temp,
                       double kept_sum, int32_t n, float *probs) {
    memset(probs, 0, (size_t)n * sizeof *probs);
    const double inv = 1.0 / kept_sum; /* kept_sum >= 1: the row maximum is kept */
    for (int32_t j = 0; j < m; j++) {
        probs[idx[j]] = (float)((double)weight(l[idx[j]], mx, temp) * inv);
    }
}

/* Median of three floats. */
static inline float median3(float a, float b, float c) {
    if (a > b) {
        const float t = a;
        a = b;
        b = t;
    }
    /* a <= b */
    if (c <= a) return a;
    if (c >= b) return b;
    return c;
}

/*
 * Top-p over the whole vocabulary without sorting. w[0 .. n) holds the weights and is
 * rewritten in place into the output row. The kept set is a prefix of the ranking, so it
 * is {l > tau} plus the tokens with l == tau up to id_cut: search for tau by three-way
 * partitions of the candidate ids (ids[lo .. hi)), where acc is the weight of everything
 * ranked above the candidates. Invariant: acc < target <= acc + weight(candidates).
 * Pivots are medians of three pseudo-random candidates (a fixed-seed xorshift, so the
 * result is deterministic); each round strictly shrinks the candidates.
 */
static void top_p_partition(const float *l, int32_t n, double target, float *w, int32_t *ids) {
    for (int32_t i = 0; i < n; i++)
        ids[i] = i;
    int32_t lo = 0, hi = n;
    double acc = 0.0;
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15);
    float tau = -INFINITY;
    int32_t id_cut = n;
    int keep_all = 0;
    for (;;) {
        const uint32_t len = (uint32_t)(hi - lo);
        float pv[3];
        for (int t = 0; t < 3; t++) {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            pv[t] = l[ids[lo + (int32_t)((h >> 32) % len)]];
        }
        const float v = median3(pv[0], pv[1], pv[2]);
        /* ids[lo, g): l > v;  [g, i): l == v;  [i, e): unseen;  [e, hi): l < v */
        int32_t g = lo, i = lo, e = hi;
        double m_gt = 0.0, m_eq = 0.0;
        while (i < e) {
            const int32_t id = ids[i];
            const float x = l[id];
            if (x > v) {
                ids[i] = ids[g];
                ids[g] = id;
                g++;
                i++;
                m_gt += (double)w[id];
            } else if (x == v) {
                i++;
                m_eq += (double)w[id];
            } else {
                e--;
                ids[i] = ids[e];
                ids[e] = id;
            }
        }
        if (acc + m_gt >= target) { /* boundary above v; target > acc so g > lo */
            hi = g;
            continue;
        }
        if (acc + m_gt + m_eq >= target) { /* boundary among the ties at v: lower ids first */
            tau = v;
            acc += m_gt;
            for (int32_t j = 0; j < n; j++) {
                if (l[j] == v) {
                    acc += (double)w[j];
                    if (acc >= target) {
                        id_cut = j;
                        break;
                    }
                }
            }
            break;
        }
        acc += m_gt + m_eq;
        lo = e;
        if (lo == hi) { /* rounding: everything fell short of top_p; keep all */
            keep_all = 1;
            break;
        }
    }
    double kept = 0.0;
    for (int32_t j = 0; j < n; j++) {
        if (keep_all || l[j] > tau || (l[j] == tau && j <= id_cut)) {
            kept += (double)w[j];
        } else {
            w[j] = 0.0f;
        }
    }
    const double inv = 1.0 / kept; /* kept >= 1: the row maximum is kept */
    for (int32_t j = 0; j < n; j++)
        w[j] = (float)((double)w[j] * inv);
}

int sd_warp(const sd_sampling_params *sp, const float *logits, int32_t n_vocab, float *probs,
            int32_t *scratch, sd_error *err) {
    if (!sp || !logits || !probs || !scratch) {
        return sd_errorf(err, SD_ERR_ARG, "sd_warp: NULL argument");
    }
    if (n_vocab < 1) {
        return sd_errorf(err, SD_ERR_ARG, "sd_warp: n_vocab = %d, expected >= 1", (int)n_vocab);
    }
    if (isnan(sp->temp) || isinf(sp->temp)) {
        return sd_errorf(err, SD_ERR_ARG, "sd_warp: temp = %g, expected a finite number",
                         (double)sp->temp);
    }
    if (isnan(sp->top_p)) {
        return sd_errorf(err, SD_ERR_ARG, "sd_warp: top_p is NaN");
    }
    if (isnan(sp->min_p)) {
        return sd_errorf(err, SD_ERR_ARG, "sd_warp: min_p is NaN");
    }
    /* One pass: NaN check and the row maximum (lowest id on ties). */
    float mx = -INFINITY;
    int32_t amax = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float v = logits[i];
        if (v != v) {
            return sd_errorf(err, SD_ERR_ARG, "sd_warp: logit[%d] is NaN", (int)i);
        }
        if (v > mx) {
            mx = v;
            amax = i;
        }
    }
    if (!(sp->temp > 0.0f)) { /* greedy: one-hot at the argmax */
        memset(probs, 0, (size_t)n_vocab * sizeof *probs);
        probs[amax] = 1.0f;
        return SD_OK;
    }
    const float temp = sp->temp;
    const int top_p_on = sp->top_p < 1.0f;
    int32_t k = (sp->top_k > 0 && sp->top_k < n_vocab) ? sp->top_k : n_vocab;
    if (sp->min_p > 0.0f) {
        /* min-p keeps the m tokens with logit >= max + ln(min_p): the m best-ranked, so
         * with top-k it is top-k with k = min(k, m) (m >= 1: the maximum is kept). */
        const float thr = mx + logf(sp->min_p < 1.0f ? sp->min_p : 1.0f);
        int32_t m = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            m += logits[i] >= thr;
        if (m >= 1 && m < k) k = m;
    }

    if (k == n_vocab && !top_p_on) { /* plain softmax, no ranking needed */
        double sum = 0.0;
        for (int32_t i = 0; i < n_vocab; i++) {
            const float w = weight(logits[i], mx, temp);
            probs[i] = w;
            sum += (double)w;
        }
        const double inv = 1.0 / sum; /* sum >= 1: the maximum has weight 1 */
        for (int32_t i = 0; i < n_vocab; i++)
            probs[i] = (float)((double)probs[i] * inv);
        return SD_OK;
    }

    if (k < n_vocab) { /* top-k, then top-p within the k survivors */
        select_top(logits, n_vocab, k, scratch);
        double sum_k = 0.0;
        for (int32_t j = 0; j < k; j++)
            sum_k += (double)weight(logits[scratch[j]], mx, temp);
        int32_t m = k;
        double kept = sum_k;
        if (top_p_on) {
            m = top_p_prefix(logits, scratch, k, mx, temp, (double)sp->top_p * sum_k, &kept);
            if (m == 0) { /* rounding: the full set fell short of top_p; keep it */
                m = k;
                kept = sum_k;
            }
        }
        write_kept(logits, scratch, m, mx, temp, kept, n_vocab, probs);
        return SD_OK;
    }

    /* top-p over the whole vocabulary: weights and normaliser, then the boundary search. */
    double total = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float w = weight(logits[i], mx, temp);
        probs[i] = w;
        total += (double)w;
    }
    const double target = (double)sp->top_p * total;
    if (!(target > 0.0)) { /* top_p <= 0: the single best token */
        memset(probs, 0, (size_t)n_vocab * sizeof *probs);
        probs[amax] = 1.0f;
        return SD_OK;
    }
    top_p_partition(logits, n_vocab, target, probs, scratch);
    return SD_OK;
}
