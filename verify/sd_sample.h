/*
 * verify/sd_sample.h: sampling, the face draft/ and the engine use to draw tokens:
 * the sampling parameters, temperature / top-k / top-p warps (warp.c), the caller-owned
 * seeded RNG (rng.c), argmax and the inverse-CDF draw (sample.c). Part of verify/, whose
 * other face, sd_verify.h, adds the verification step on top of this one. May include
 * runtime/base only. Owns nothing (no global RNG: every stream is the caller's).
 */
#ifndef SD_SAMPLE_H
#define SD_SAMPLE_H

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

#ifdef __cplusplus
}
#endif
#endif /* SD_SAMPLE_H */
