/*
 * runtime/engine: the library's top, the face a CLI, a server or a binding uses.
 *   - sd_engine (engine.c): loads a target and (optionally) a draft, checks that they
 *     pair (vocabulary, runtime/tokenizer's sd_vocab_check_pair), resolves the context
 *     sizes (the target's training context by default; the draft's context capped at
 *     its own), and makes the scorer and the proposer;
 *   - sd_generate (generate.c): the generation loop, and its statistics.
 * Owns the models, sessions and proposer of an engine. May include every library part
 * (never the CLI).
 *
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

#define SD_MAX_STOP_IDS 16

typedef struct sd_gen_params {
    int32_t n_predict;       /* most tokens to emit (>= 1) */
    int32_t n_draft;         /* K: tokens drafted per step, 1 .. SD_MAX_DRAFT */
    sd_sampling_params samp; /* applied to both target and draft rows */
    uint64_t seed;           /* verifier RNG seed */
    /* Token ids that end generation besides eos (end-of-turn tokens such as <|im_end|>),
     * not emitted. */
    int32_t stop_ids[SD_MAX_STOP_IDS];
    int32_t n_stop_ids;
    /* 1: the target's EOS is never emitted (its logit is -inf in every target row, as
     * llama.cpp's --ignore-eos), so generation runs to n_predict or the context. The
     * output follows the target's distribution conditioned on "not EOS". */
    int ignore_eos;
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

/* ---- the engine: a loaded, paired target and draft ---- */

typedef struct sd_engine sd_engine;

typedef struct sd_engine_params {
    const char *target; /* target GGUF path (required) */
    const char *draft;  /* draft GGUF path, or NULL: target alone */
    /* Prefixes for load errors of each model, naming where the path came from (e.g.
     * "pair.json: key 'target'"), or NULL. */
    const char *target_origin, *draft_origin;
    int32_t n_ctx;          /* 0: the target's training context; above it: capped, with a note */
    int32_t n_threads;      /* 0: all cores this process may use */
    sd_type kv_type;        /* SD_TYPE_F32 (0) or SD_TYPE_F16 */
    sd_device device;       /* target's device */
    sd_device device_draft; /* draft's device */
    sd_gen_params gen;      /* defaults for sd_engine_generate */
    /* The draft's context: 0 = the target's (n_ctx as resolved); either way capped at the
     * draft's training context (with a note when asked beyond it). */
    int32_t n_ctx_draft;
    /* Notes for the user (a context that was capped, ...): one line each, no newline. */
    void (*log)(void *user, const char *line);
    void *log_user;
} sd_engine_params;

/* target NULL, target alone, n_ctx 0, all cores, F32 KV cache, CPU, sd_gen_default_params. */
sd_engine_params sd_engine_default_params(void);

/*
 * Load p->target (and p->draft), check that they pair, resolve the contexts and make the
 * scorer (and the proposer). Errors: each model's load errors (prefixed with its origin
 * when given), SD_ERR_MISMATCH (the vocabularies do not pair: both files named),
 * SD_ERR_ARG (no target), SD_ERR_OOM.
 */
int sd_engine_init(const sd_engine_params *p, sd_engine **out, sd_error *err);
void sd_engine_free(sd_engine *e); /* NULL accepted */

const sd_model *sd_engine_target(const sd_engine *e);
const sd_model *sd_engine_draft(const sd_engine *e); /* NULL: target alone */
const sd_vocab *sd_engine_vocab(const sd_engine *e); /* the target's */
sd_scorer *sd_engine_scorer(sd_engine *e);
sd_proposer *sd_engine_proposer(sd_engine *e);     /* NULL: target alone */
int32_t sd_engine_n_ctx(const sd_engine *e);       /* target context in use */
int32_t sd_engine_n_ctx_draft(const sd_engine *e); /* 0 without a draft */
const sd_engine_params *sd_engine_params_of(const sd_engine *e);
/* The session parameters the engine made the target's (draft = 0) or the draft's
 * (draft = 1) session with (e.g. for a benchmark's own sessions of the same models). */
sd_session_params sd_engine_session_params(const sd_engine *e, int draft);

/*
 * Generate after prompt[0 .. n_prompt) with gp (NULL: the engine's p->gen): the
 * proposer is reset to gp's sampling and the draft stream of gp->seed
 * (sd_rng_stream_seed(seed, 1)); gp->n_draft == 0 or no draft model: target alone.
 * Generation stops at the target's EOS and at gp's stop ids. Arguments and errors as
 * sd_generate.
 */
int sd_engine_generate(sd_engine *e, const sd_gen_params *gp, const int32_t *prompt,
                       int32_t n_prompt, sd_token_cb cb, void *user, int32_t *out, int32_t cap_out,
                       sd_gen_stats *stats, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_ENGINE_H */
