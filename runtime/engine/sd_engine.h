/*
 * The speculative generation loop:
 *   tokenizer -> draft (propose K) -> target (one verification pass, K + 1 rows)
 *   -> verify (accept a prefix + one correction/bonus) -> commit -> detokenize.
 * With no proposer it is plain target-alone decoding through the same scorer (the A
 * side of an A/B run), so both sides share every kernel.
 *
 * Acceptance figures (one definition, printed with them):
 *   acceptance_rate  = n_accepted / n_drafted
 *   tokens_per_pass  = n_generated / n_target_passes
 *   per-position i   = accepted at draft position i / drafted at draft position i
 * Counts cover only emitted tokens: an EOS inside an accepted block ends the output
 * there, and accepted tokens after it are not counted as accepted. The draft length of
 * the last steps is capped so that a step never emits more than the -n budget left.
 */
#ifndef SD_ENGINE_H
#define SD_ENGINE_H

#include <stdint.h>

#include "draft/sd_draft.h"
#include "runtime/base/sd_base.h"
#include "target/sd_target.h"
#include "verify/sd_verify.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_gen_params {
    int32_t n_predict;       /* most tokens to emit (>= 1) */
    int32_t n_draft;         /* K: tokens drafted per step, 1 .. SD_MAX_DRAFT */
    sd_sampling_params samp; /* applied to both target and draft rows */
    uint64_t seed;           /* verifier RNG seed */
} sd_gen_params;

sd_gen_params sd_gen_default_params(void);

typedef enum sd_stop_reason {
    SD_STOP_NONE = 0,
    SD_STOP_EOS,
    SD_STOP_MAX_TOKENS,
    SD_STOP_CONTEXT,
} sd_stop_reason;

const char *sd_stop_reason_str(sd_stop_reason r);

typedef struct sd_gen_stats {
    int32_t n_prompt;
    int32_t n_generated;
    int32_t n_target_passes; /* verification passes (decode steps when target alone) */
    int32_t n_drafted;
    int32_t n_accepted;
    int32_t drafted_at[SD_MAX_DRAFT];  /* drafted at draft position i */
    int32_t accepted_at[SD_MAX_DRAFT]; /* accepted (and emitted) at draft position i */
    double t_prefill_ms;
    double t_draft_ms;
    double t_verify_ms; /* target verification passes */
    double t_sample_ms; /* warping + rejection sampling */
    double t_total_ms;  /* from the start of prefill to the last token */
    double ttft_ms;     /* start of prefill to the first emitted token */
    double t_first_ms;  /* time of the first token since start */
    sd_stop_reason stop;
} sd_gen_stats;

/* Derived figures (0 when the denominator is 0). */
double sd_stats_acceptance_rate(const sd_gen_stats *s);
double sd_stats_tokens_per_pass(const sd_gen_stats *s);
/* Emitted tokens per second over the decode phase (prefill excluded). */
double sd_stats_tokens_per_s(const sd_gen_stats *s);
/* Mean inter-token latency: (t_total - t_first) / (n_generated - 1). */
double sd_stats_itl_ms(const sd_gen_stats *s);

/* Called with each block of newly emitted tokens, in order. Non-zero return stops
 * generation (stop reason stays SD_STOP_NONE). */
typedef int (*sd_token_cb)(void *user, const int32_t *tokens, int32_t n);

/*
 * Generate after prompt[0 .. n_prompt) (n_prompt >= 1, e.g. just BOS).
 *   target : the scorer (its n_ctx bounds prompt + output)
 *   draft  : proposer, or NULL for target alone
 *   eos    : token id that ends generation (not emitted), or -1
 *   out    : int32 [cap_out] receives the emitted ids (cap_out >= n_predict)
 * Errors: SD_ERR_CONTEXT if the prompt does not fit the target's context (with room for
 * one token), SD_ERR_ARG for bad parameters, and any model error. Running out of
 * context during generation is not an error: stop = SD_STOP_CONTEXT.
 */
int sd_generate(sd_scorer *target, sd_proposer *draft, const int32_t *prompt, int32_t n_prompt,
                int32_t eos, const sd_gen_params *gp, sd_token_cb cb, void *user, int32_t *out,
                int32_t cap_out, sd_gen_stats *stats, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_ENGINE_H */
