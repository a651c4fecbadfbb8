/*
 * verify/: sampling warps, the RNG, and the verification step of speculative decoding.
 *
 * Speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers via
 * Speculative Decoding", Alg. 1; Chen et al. 2023, "Accelerating LLM Decoding with
 * Speculative Sampling", Alg. 2): for draft tokens x_1..x_K drawn from q_i, accept x_i
 * with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection emit a token
 * from normalize(max(0, p_i - q_i)) and stop; if all K are accepted emit a bonus token
 * from p_{K+1}. The emitted sequence is distributed exactly as sampling from p.
 * p and q here are the *warped* distributions (temperature, top-k, top-p applied),
 * so the output follows the target's warped distribution.
 * Greedy (temp <= 0): accept while x_i == argmax p_i, then emit argmax of the first
 * mismatching (or bonus) row. Ties in argmax go to the lowest token id.
 */
#ifndef SD_VERIFY_H
#define SD_VERIFY_H

#include <stdint.h>

#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest draft a verification step accepts (buffers are sized for it). */
#define SD_MAX_DRAFT 16

typedef struct sd_sampling_params {
    float temp;    /* <= 0: greedy */
    int32_t top_k; /* <= 0: off */
    float top_p;   /* >= 1: off */
} sd_sampling_params;

sd_sampling_params sd_sampling_default_params(void); /* temp 0.8, top_k 40, top_p 0.95 */

/* Seeded RNG state (xoshiro256**, state from splitmix64(seed)). Owned by the caller:
 * no global RNG. */
typedef struct sd_rng {
    uint64_t s[4];
} sd_rng;

void sd_rng_seed(sd_rng *r, uint64_t seed);
/* Next raw 64-bit output of the xoshiro256** stream (advances r by one step). */
uint64_t sd_rng_next_u64(sd_rng *r);
/* Uniform double in [0, 1) with 53 random bits: (sd_rng_next_u64(r) >> 11) * 2^-53. */
double sd_rng_uniform(sd_rng *r);
/* Seed of an independent stream derived from a user seed: stream 0 is the verifier's,
 * stream 1 the draft's. Mixes both through splitmix64 so no two streams share state
 * words (a plain seed ^ constant can alias splitmix64's own counter). */
uint64_t sd_rng_stream_seed(uint64_t seed, uint64_t stream);

/* Index of the largest logit; lowest index on ties; NaN entries never win. n >= 1. */
int32_t sd_argmax(const float *x, int32_t n);

/*
 * Turn a logits row into the probability row that sampling uses:
 *   probs[i] = softmax(logits / temp)[i] restricted to the top_k largest logits and then
 *   to the smallest set of most-probable tokens whose mass reaches top_p, renormalised;
 *   every other entry is exactly 0. Ties at the top-k / top-p boundary are broken by
 *   token id (lower id kept), so the result is a deterministic function of the row.
 * Greedy (temp <= 0): probs is one-hot at sd_argmax(logits).
 *   logits  : float [n_vocab]
 *   probs   : float [n_vocab] (out)
 *   scratch : int32 [n_vocab] work space
 * Logits of -inf get probability 0 (a row that is -inf everywhere becomes uniform, the
 * limit of equal logits); if any logit is +inf the mass is shared by the +inf
 * entries (the limit of the softmax). top_p <= 0 keeps the single best token.
 * Errors: SD_ERR_ARG if n_vocab < 1, a logit is NaN, temp is NaN or +-inf, top_p is
 * NaN, or a pointer is NULL.
 */
int sd_warp(const sd_sampling_params *sp, const float *logits, int32_t n_vocab, float *probs,
            int32_t *scratch, sd_error *err);

/* Inverse-CDF draw: smallest i with sum_{j<=i} probs[j] > u * sum(probs), skipping
 * zero entries; u in [0, 1). Sums are in double, so u just below 1 picks the last
 * positive entry; u >= 1 also returns it. Entries that are not > 0 count as zero.
 * Returns -1 if probs is NULL, n_vocab < 1 or no entry is positive. */
int32_t sd_sample(const float *probs, int32_t n_vocab, double u);

/* Result of one verification step. tokens[0 .. n_tokens) are emitted in order: the
 * n_accepted accepted draft tokens, then one correction (after a rejection) or bonus
 * (after full acceptance) token. n_tokens == n_accepted + 1. */
typedef struct sd_verify_result {
    int32_t n_accepted;
    int32_t n_tokens;
    int32_t tokens[SD_MAX_DRAFT + 1];
} sd_verify_result;

/*
 * Greedy verification.
 *   draft         : int32 [k], 0 <= k <= SD_MAX_DRAFT
 *   target_logits : float [k + 1, n_vocab] (row i scores the token after draft[0..i))
 * Only rows up to the first mismatch are read.
 * Errors: SD_ERR_ARG (k out of range, draft id out of [0, n_vocab), n_vocab < 1, NULL
 * pointer, a NaN logit in a row that is read). On error *res is not written.
 */
int sd_verify_greedy(const int32_t *draft, int32_t k, const float *target_logits, int32_t n_vocab,
                     sd_verify_result *res, sd_error *err);

/*
 * Speculative sampling verification (see top of file).
 *   draft   : int32 [k]
 *   q       : float [k, n_vocab]  warped draft rows the draft tokens were sampled from
 *   p       : float [k + 1, n_vocab] warped target rows
 *   rng     : caller's RNG; draws one uniform per acceptance test and one per emitted
 *             correction/bonus token
 *   scratch : float [n_vocab] work space for the residual distribution
 * If the residual max(0, p - q) is all zero (p == q on that row, which cannot reject
 * in exact arithmetic) the correction is drawn from p.
 * Accepts x_i iff u * q_i(x_i) < p_i(x_i), computed as u < p/q in double: u < 1, so
 * p(x) >= q(x) always accepts and p(x) == 0 never does.
 * Errors: SD_ERR_ARG (k out of range, id out of range, q(x) not > 0 for a drafted x,
 * n_vocab < 1, NULL pointer): found before any uniform is drawn, so rng and *res are
 * untouched. The one late error, SD_ERR_ARG for a target row that is read but has no
 * positive entry, leaves *res untouched but rng advanced.
 */
int sd_verify_sample(const int32_t *draft, int32_t k, const float *q, const float *p,
                     int32_t n_vocab, sd_rng *rng, float *scratch, sd_verify_result *res,
                     sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_VERIFY_H */
