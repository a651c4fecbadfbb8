/*
 * verify/: the verification step of speculative decoding, on top of sampling
 * (verify/sd_sample.h: warps, the RNG, argmax, sample), which this header includes.
 * May include runtime/base only. Owns nothing.
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
#include "verify/sd_sample.h"

#ifdef __cplusplus
extern "C" {
#endif

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
