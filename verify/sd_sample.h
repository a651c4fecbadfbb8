/*
 * verify/sd_sample.h: sampling, the face draft/ and the engine use to draw tokens:
 * the sampling parameters, the logit penalties (penalty.c), temperature / top-k / min-p /
 * top-p warps (warp.c), the caller-owned seeded RNG (rng.c), the keyed draws and the
 * Gumbel-max draw (keyed.c), argmax and the inverse-CDF draw (sample.c). Part of verify/,
 * whose other face, sd_verify.h, adds the verification step on top of this one. May
 * include runtime/base only. Owns nothing (no global RNG: every stream is the caller's,
 * every keyed draw a pure function of its key).
 */
#ifndef SD_SAMPLE_H
#define SD_SAMPLE_H

#include <stdint.h>

#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * How speculative sampling draws (temp > 0; greedy is exact argmax either way):
 *   SD_SPEC_REJECTION  speculative sampling (Leviathan et al. 2023, Chen et al. 2023):
 *                      the draft samples x ~ q, the target accepts it with probability
 *                      min(1, p(x) / q(x)) and else draws from max(0, p - q); target
 *                      alone draws by inverse CDF. Keyed draws make the text a function
 *                      of the seed and of the K of each pass.
 *   SD_SPEC_GUMBEL     drafter-invariant speculative sampling (Daliri, Musco, Suresh
 *                      2024, "Coupling without communication and drafter-invariant
 *                      speculative decoding", arXiv 2408.07978): at position pos the
 *                      token is argmax_v log p(v) + G(seed, pos, v) with Gumbel noise G
 *                      keyed by the seed and the position; the draft proposes argmax_v
 *                      log q(v) + G(seed, pos, v) with the same noise and verification
 *                      accepts exactly the matches. The text is then the target-alone
 *                      text of the same seed, whatever the draft, K or policy.
 */
typedef enum sd_spec_sampling {
    SD_SPEC_REJECTION = 0,
    SD_SPEC_GUMBEL = 1,
} sd_spec_sampling;

const char *sd_spec_sampling_name(sd_spec_sampling s); /* "rejection", "gumbel" */
/* "rejection" / "gumbel" -> *out; -1 if unknown. */
int sd_spec_sampling_parse(const char *s, sd_spec_sampling *out);

/* Longest penalty window (repeat_last_n). */
#define SD_PENALTY_MAX_N 4096

/* One logit bias (OpenAI's logit_bias): bias added to token id's logit; a bias of
 * SD_LOGIT_BIAS_MIN or below bans the token (its logit becomes -inf). */
typedef struct sd_logit_bias {
    int32_t id;
    float bias; /* [SD_LOGIT_BIAS_MIN, SD_LOGIT_BIAS_MAX] */
} sd_logit_bias;

#define SD_LOGIT_BIAS_MIN (-100.0f)
#define SD_LOGIT_BIAS_MAX 100.0f

/* Sampling settings, applied alike to target and draft rows (so q and p are warped the
 * same way). A zeroed struct beyond temp / top_k / top_p means: min-p off, no
 * penalties, no logit bias, rejection sampling. */
typedef struct sd_sampling_params {
    float temp;    /* <= 0: greedy */
    int32_t top_k; /* <= 0: off */
    float top_p;   /* >= 1: off */
    float min_p;   /* <= 0: off; keep tokens with logit >= max logit + ln(min_p) */
    /* Penalties over the last repeat_last_n tokens before the position (llama.cpp's
     * penalties sampler): a token seen c > 0 times there has its logit divided by
     * repeat_penalty (multiplied when the logit is negative), then lowered by
     * c * freq_penalty + presence_penalty. repeat_penalty 0 or 1: no repeat penalty;
     * repeat_last_n 0: no penalty at all. */
    float repeat_penalty;
    float freq_penalty;
    float presence_penalty;
    int32_t repeat_last_n; /* 0 .. SD_PENALTY_MAX_N */
    sd_spec_sampling spec; /* see sd_spec_sampling */
    /* Logit biases (sd_logit_bias_apply), caller-owned: [n_logit_bias], or NULL. Applied
     * to target and draft rows alike, before the penalties. */
    const sd_logit_bias *logit_bias;
    int32_t n_logit_bias;
} sd_sampling_params;

/* temp 0.8, top_k 40, top_p 0.95, min_p 0, repeat_penalty 1, freq / presence 0,
 * repeat_last_n 64 (llama.cpp's defaults), spec SD_SPEC_GUMBEL (docs/real-pair.md:
 * measured acceptance of both modes, and same seed, same text). */
sd_sampling_params sd_sampling_default_params(void);

/* SD_OK, or SD_ERR_ARG naming the field out of range (temp, top_p NaN or infinite;
 * min_p outside [0, 1]; a negative repeat_penalty, a non-finite penalty; repeat_last_n outside
 * [0, SD_PENALTY_MAX_N]; an unknown spec; a logit bias with a negative id, a bias outside
 * [SD_LOGIT_BIAS_MIN, SD_LOGIT_BIAS_MAX] or NaN, n_logit_bias < 0, or entries without an
 * array). Ids above the vocabulary are the caller's to check (the vocabulary is not known
 * here). */
int sd_sampling_check(const sd_sampling_params *sp, sd_error *err);

/*
 * Add sp's logit biases to one logits row, in place: logits[id] += bias, or -inf when
 * bias <= SD_LOGIT_BIAS_MIN (a ban). col_of as sd_penalize (NULL: the row is indexed by
 * id). Ids outside [0, n_vocab) or without a column are skipped. Entries for one id
 * add up in their order.
 */
void sd_logit_bias_apply(const sd_sampling_params *sp, float *logits, int32_t n_vocab,
                         const int32_t *col_of);

/* 1 if sp penalises anything (repeat_last_n > 0 and some penalty not neutral). */
int sd_penalties_on(const sd_sampling_params *sp);

/*
 * Apply sp's penalties to one logits row, in place. The history is hist_a[0 .. n_a)
 * followed by hist_b[0 .. n_b) (e.g. the committed context, then the drafted tokens
 * before this row); the window is its last repeat_last_n tokens. col_of: NULL (logits
 * is indexed by token id, float [n_vocab]) or int32 [n_vocab], the column of each id in
 * a row over a subset of the vocabulary (-1: not in the row). Ids outside [0, n_vocab) in
 * the history are ignored. O(w log w) for a window of w tokens, no allocation. Draft and
 * target rows of the same history get the same penalty (the draft's q then follows the
 * target's p as closely as without penalties; verification is exact for any q).
 */
void sd_penalize(const sd_sampling_params *sp, const int32_t *hist_a, int32_t n_a,
                 const int32_t *hist_b, int32_t n_b, float *logits, int32_t n_vocab,
                 const int32_t *col_of);

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
/* Seed of an independent stream derived from a user seed (stream 0: the seed itself).
 * Mixes both through splitmix64 so no two streams share state words (a plain
 * seed ^ constant can alias splitmix64's own counter). */
uint64_t sd_rng_stream_seed(uint64_t seed, uint64_t stream);

/* ---- keyed draws (keyed.c) ----
 *
 * Every random number of generation is a pure function of (seed, position, purpose,
 * index): the same seed gives the same draws whatever ran before, however many passes,
 * proposals or probes there were, and under any load. position = the index in the
 * context of the token being chosen. */
typedef enum sd_draw_purpose {
    SD_DRAW_ACCEPT = 1, /* the acceptance test of a drafted token */
    SD_DRAW_TOKEN = 2,  /* the target's draw: correction, bonus, target-alone token */
    SD_DRAW_DRAFT = 3,  /* the draft's draw (rejection sampling) */
    SD_DRAW_GUMBEL = 4, /* the Gumbel noise of vocabulary entry `index` */
} sd_draw_purpose;

/* Uniform in (0, 1), 53 random bits: ((h >> 11) + 0.5) 2^-53 for the 64-bit key hash h
 * of (seed, pos, purpose, index). Never 0 nor 1 (a logarithm of it is finite). */
double sd_key_uniform(uint64_t seed, int64_t pos, sd_draw_purpose purpose, uint64_t index);

/*
 * Gumbel-max draw from the distribution probs[0 .. n) (non-negative, not necessarily
 * normalised; as sd_warp makes) at (seed, pos):
 *   argmax_j  log probs[j] + G_j,   G_j = -log(-log U_j),  U_j = sd_key_uniform(seed, pos,
 *                                                        SD_DRAW_GUMBEL, id(j)),
 * with id(j) = ids[j] (a row over a subset of the vocabulary, e.g. a trimmed draft head:
 * the noise of a token is the same in every row that holds it) or j when ids is NULL,
 * i.e. entry j with probability probs[j] / sum(probs) (Gumbel 1954; the exponential race
 * argmin_j E_j / probs[j], E_j = -log U_j, computed that way). Returns the entry j.
 * Entries that are not > 0 never win; ties go to the lower j. Cost: one hash per
 * positive entry and a logarithm only for entries that can still win (U_j > 1 - best
 * probs[j]: E_j / probs[j] >= best otherwise), so O(n) cheap steps. Returns -1 if probs
 * is NULL, n < 1 or no entry is positive. The draft's proposal and the target's token at
 * a position share the noise, so they agree exactly when the rows make the race agree.
 */
int32_t sd_gumbel_sample(const float *probs, int32_t n, const int32_t *ids, uint64_t seed,
                         int64_t pos);

/* Index of the largest logit; lowest index on ties; NaN entries never win. n >= 1. */
int32_t sd_argmax(const float *x, int32_t n);

/*
 * Turn a logits row into the probability row that sampling uses:
 *   probs[i] = softmax(logits / temp)[i] restricted to the top_k largest logits, of them
 *   to those with logit >= max + ln(min_p) (min-p on the logits, i.e. relative to the
 *   top probability at temperature 1, as llama.cpp's min-p before its temperature), and
 *   then to the smallest set of most-probable tokens whose mass reaches top_p,
 *   renormalised; every other entry is exactly 0. Ties at the top-k / top-p boundary
 *   are broken by token id (lower id kept), so the result is a deterministic function of
 *   the row.
 * Greedy (temp <= 0): probs is one-hot at sd_argmax(logits).
 *   logits  : float [n_vocab]
 *   probs   : float [n_vocab] (out)
 *   scratch : int32 [n_vocab] work space
 * Logits of -inf get probability 0 (a row that is -inf everywhere becomes uniform, the
 * limit of equal logits); if any logit is +inf the mass is shared by the +inf
 * entries (the limit of the softmax). top_p <= 0 keeps the single best token.
 * Penalties are not applied here (sd_penalize, before).
 * Errors: SD_ERR_ARG if n_vocab < 1, a logit is NaN, temp is NaN or +-inf, top_p or
 * min_p is NaN, or a pointer is NULL.
 */
int sd_warp(const sd_sampling_params *sp, const float *logits, int32_t n_vocab, float *probs,
            int32_t *scratch, sd_error *err);

/* Inverse-CDF draw: smallest i with sum_{j<=i} probs[j] > u * sum(probs), skipping
 * zero entries; u in [0, 1). Sums are in double, so u just below 1 picks the last
 * positive entry; u >= 1 also returns it. Entries that are not > 0 count as zero.
 * Returns -1 if probs is NULL, n_vocab < 1 or no entry is positive. */
int32_t sd_sample(const float *probs, int32_t n_vocab, double u);

/* The token of a warped row at (seed, pos) with sp's drawing: greedy (temp <= 0) the
 * argmax; SD_SPEC_GUMBEL sd_gumbel_sample; SD_SPEC_REJECTION the inverse-CDF draw with
 * u = sd_key_uniform(seed, pos, purpose, 0). -1 as sd_sample. This is how target alone
 * draws (purpose SD_DRAW_TOKEN) and how the LLM draft draws (SD_DRAW_DRAFT). */
int32_t sd_sample_keyed(const sd_sampling_params *sp, const float *probs, int32_t n_vocab,
                        uint64_t seed, int64_t pos, sd_draw_purpose purpose);

#ifdef __cplusplus
}
#endif
#endif /* SD_SAMPLE_H */
