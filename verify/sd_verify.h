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

/*
 * Speculative sampling for a deterministic proposal (n-gram / prompt lookup): each
 * draft token x_i is a function of the committed context, so its q_i is the point
 * mass delta_{x_i} and no probability rows exist. Speculative sampling with
 * q = delta_x (Leviathan et al. 2023 Alg. 1 with that q) reads:
 *   accept x with probability min(1, p(x) / q(x)) = min(1, p(x) / 1) = p(x);
 *   on rejection draw from normalize(max(0, p - delta_x)): at x, max(0, p(x) - 1) = 0;
 *   elsewhere max(0, p(y) - 0) = p(y); so the residual is p with x removed,
 *   renormalised by 1 - p(x).
 * The emitted token y then has P(y) = p(x) [y = x] + (1 - p(x)) p(y) / (1 - p(x)) [y != x]
 * = p(y) for every y: exactly the target's distribution, whatever x is. Induction over
 * positions (each accepted token is distributed as p_i and the next row is conditioned
 * on it) makes the whole emitted block follow p, as for the general sampler.
 *   draft   : int32 [k], 0 <= k <= SD_MAX_DRAFT
 *   p       : float [k + 1, n_vocab] warped target rows (distributions, as sd_warp makes)
 *   rng     : caller's RNG; one uniform per acceptance test and one per emitted
 *             correction/bonus token (the same draws as sd_verify_sample)
 * Accepts x_i iff u < p_i(x_i), in double: p(x) = 0 never accepts, p(x) = 1 always does.
 * This is sd_verify_sample with q rows that are one-hot at the draft tokens, draw for
 * draw and token for token (tests/test_ngram.c checks it), without the rows: O(n_vocab)
 * per rejected or bonus row, O(1) per accepted token.
 * Errors: SD_ERR_ARG (k out of range, id out of range, n_vocab < 1, NULL pointer) before
 * any uniform is drawn; a row that is read but has no positive entry: SD_ERR_ARG with
 * *res untouched and rng advanced.
 */
int sd_verify_onehot(const int32_t *draft, int32_t k, const float *p, int32_t n_vocab, sd_rng *rng,
                     sd_verify_result *res, sd_error *err);

/* ---- keyed verification over rows made on demand (what the engine uses) ---- */

/*
 * Row i (0 .. k) of a verification pass, made when the verifier first reads it (rows
 * after the first rejection are never made): for greedy sampling the row's logits, else
 * its warped distribution (sd_warp), penalties applied in both cases. NULL with *err
 * filled on failure.
 */
typedef const float *(*sd_verify_row_fn)(void *user, int32_t i, sd_error *err);

/*
 * One verification step with sp's drawing, every uniform keyed (sd_key_uniform) by seed
 * and the row's position pos0 + i (pos0: the context index the token of row 0 takes):
 *   greedy (sp->temp <= 0): as sd_verify_greedy on the logits rows;
 *   SD_SPEC_GUMBEL: y_i = sd_gumbel_sample(p_i, seed, pos0 + i); draft token i is accepted
 *     iff it equals y_i, and the first y_i that differs (or the bonus y_k) is emitted:
 *     every emitted token is the one target-alone Gumbel sampling emits at that
 *     position, so the text does not depend on the draft, K or policy. q is not read;
 *   SD_SPEC_REJECTION: as sd_verify_sample with q (float [k, n_vocab]) or, q NULL, as
 *     sd_verify_onehot (a deterministic proposal), drawing the acceptance test from
 *     (seed, pos, SD_DRAW_ACCEPT) and the correction / bonus token from
 *     (seed, pos, SD_DRAW_TOKEN): the bonus (and k = 0, target alone) is then exactly
 *     sd_sample_keyed(sp, p, seed, pos, SD_DRAW_TOKEN).
 *   draft   : int32 [k], 0 <= k <= SD_MAX_DRAFT
 *   rows    : the target rows, read in order, each at most once, only up to the first
 *             rejection (row k only after k acceptances)
 *   scratch : float [n_vocab] (rejection sampling's residual)
 * Errors: SD_ERR_ARG (k, ids, q(x) not > 0 for a drafted x, n_vocab, NULL pointers:
 * before any row is read), a row's error, SD_ERR_ARG for a row with a NaN logit
 * (greedy) or no positive entry. *res is written only on success.
 */
int sd_verify_keyed(const sd_sampling_params *sp, const int32_t *draft, int32_t k, const float *q,
                    sd_verify_row_fn rows, void *user, int32_t n_vocab, uint64_t seed, int64_t pos0,
                    float *scratch, sd_verify_result *res, sd_error *err);

/* ---- token trees (verify/tree.c) ----
 *
 * A tree proposal: drafted nodes 0 .. n - 1, node i with token tokens[i] and parent
 * parent[i] (-1: a child of the root, the committed context; else < i). The target scores
 * it in one pass (target/: sd_scorer_score_tree): row 0 the token after the committed
 * context, row i + 1 the token after node i's path. Verification walks from the root: at
 * each node it makes the target's choice y at that node's row (greedy: the argmax;
 * SD_SPEC_GUMBEL: sd_gumbel_sample keyed by (seed, pos0 + depth)), takes the child whose
 * token is y (at most one: the caller's tree has distinct sibling tokens, and the first
 * in index order is taken otherwise) and continues, else emits y (a correction, or at a
 * leaf the bonus) and stops.
 * Why this is exact: in both modes the token target-alone decoding emits at a position is
 * a deterministic function of that position's row (greedy argmax; Gumbel: the argmax of
 * log p + the noise keyed by (seed, position), which does not depend on the draft). The
 * walk emits, at each depth, exactly that function of the row of the path emitted so far:
 * the rows of a tree pass are bit-identical to a chain pass over the same path
 * (sd_session_seq_decode_tree), so the emitted text is the target-alone text whatever the
 * tree. Rejection sampling (temp > 0, SD_SPEC_REJECTION) accepts a token with a
 * probability, so one child of several would need the multi-draft residual scheme
 * (SpecInfer's); it is refused here (SD_ERR_UNSUPPORTED): use a chain.
 *   tokens, parent : int32 [n], 0 <= n <= SD_MAX_DRAFT
 *   rows           : row r (0 .. n) made on demand, read once each, only on the walk
 *   path           : int32 [SD_MAX_DRAFT] (out): the accepted nodes, root first
 *                    (res->n_accepted of them; res->tokens[i] = tokens[path[i]] for those)
 * Errors: SD_ERR_ARG (n, ids, parents, NULL pointers: before any row is read; a row with a
 * NaN logit or no positive entry), SD_ERR_UNSUPPORTED (rejection sampling), a row's error.
 * *res and path are written only on success.
 */
int sd_verify_tree_keyed(const sd_sampling_params *sp, const int32_t *tokens, const int32_t *parent,
                         int32_t n, sd_verify_row_fn rows, void *user, int32_t n_vocab,
                         uint64_t seed, int64_t pos0, sd_verify_result *res, int32_t *path,
                         sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_VERIFY_H */
