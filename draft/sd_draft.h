/*
 * draft/: proposers. Owns each proposer's state (an LLM draft's session and KV cache, its
 * RNG stream). May include runtime/base, runtime/model and verify/sd_sample.h (sampling,
 * never the verifier, never a backend).
 * A proposer looks at the committed context and proposes up to k
 * tokens, each with the probability row it was drawn from (the q of speculative
 * sampling: the warped draft distribution over the full vocabulary, after temperature,
 * top-k and top-p, exactly the row the token was sampled from).
 * (vLLM spec_decode/interfaces.py SpeculativeProposals: token ids, probs, lengths.)
 *
 * Implementations sit behind a table of function pointers so other drafters (n-gram
 * lookup, EAGLE-style heads) can be added without touching the generation loop.
 * First implementation: a small LLM run autoregressively with its own KV cache; it
 * rolls its cache back to the accepted prefix at the start of the next proposal.
 */
#ifndef SD_DRAFT_H
#define SD_DRAFT_H

#include <stdint.h>

#include "runtime/model/sd_model.h"
#include "runtime/base/sd_base.h"
#include "verify/sd_sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A proposal. tokens[0 .. n) are the drafted ids; probs is float [n, n_vocab] (row i
 * is the warped distribution draft token i was drawn from). probs is owned by the
 * proposer and valid until its next propose call. */
typedef struct sd_proposal {
    int32_t n;
    int32_t n_vocab;
    int32_t tokens[SD_MAX_DRAFT];
    const float *probs;
} sd_proposal;

typedef struct sd_proposer sd_proposer;

typedef struct sd_proposer_ops {
    const char *name;
    /* See sd_proposer_prefill. */
    int (*prefill)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, sd_error *err);
    /* See sd_proposer_propose. */
    int (*propose)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t k, sd_proposal *out,
                   sd_error *err);
    /* See sd_proposer_commit. */
    void (*commit)(sd_proposer *p, const int32_t *ctx, int32_t n_ctx);
    /* See sd_proposer_reset (NULL: nothing to reset). */
    void (*reset)(sd_proposer *p, const sd_sampling_params *samp, uint64_t seed);
    void (*free)(sd_proposer *p);
} sd_proposer_ops;

struct sd_proposer {
    const sd_proposer_ops *ops;
};

/*
 * Propose up to k tokens to follow ctx[0 .. n_ctx).
 *   ctx : int32 [n_ctx], n_ctx >= 1, the committed tokens (prompt + emitted)
 *   k   : 1 .. SD_MAX_DRAFT
 * out->n may be less than k (even 0) when the proposer runs out of context: the
 * caller then continues with the target alone. Errors: SD_ERR_ARG, and the model's.
 */
int sd_proposer_propose(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t k,
                        sd_proposal *out, sd_error *err);
/*
 * Before the first proposal: process the prompt ctx[0 .. n_ctx) (e.g. fill the draft's
 * KV cache) so that the first propose call only drafts. Optional work: propose catches
 * up by itself. Errors: the model's.
 */
int sd_proposer_prefill(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, sd_error *err);

/*
 * After verification: roll the proposer's state back to the accepted prefix of
 * ctx[0 .. n_ctx) (the committed tokens). Its KV cache then holds only committed
 * tokens at contiguous positions (checked in SD_CHECKS builds).
 */
void sd_proposer_commit(sd_proposer *p, const int32_t *ctx, int32_t n_ctx);
void sd_proposer_free(sd_proposer *p); /* NULL accepted */

/* Before a new generation: use sampling settings samp and restart the proposer's RNG
 * from seed (its KV cache is kept: the next propose reuses the common prefix). */
void sd_proposer_reset(sd_proposer *p, const sd_sampling_params *samp, uint64_t seed);

/*
 * LLM proposer over draft model m (not owned). sp: the session (its n_ctx may be
 * smaller than the target's: drafting stops gracefully near that limit). samp: the
 * sampling settings (the same as the target's, so q and p are warped alike). seed:
 * the draft's own RNG stream (use sd_rng_stream_seed(seed, 1)).
 * n_vocab_target: the target's vocabulary size (0 = the draft's). The two may differ
 * by up to SD_VOCAB_MAX_SIZE_DIFF ids (as llama.cpp allows): q rows then have
 * n_vocab_target entries, the draft only proposes ids both models have (q = 0 for the
 * rest), and it proposes nothing while the context holds an id the draft lacks.
 */
int sd_proposer_llm_init(const sd_model *m, const sd_session_params *sp,
                         const sd_sampling_params *samp, uint64_t seed, int32_t n_vocab_target,
                         sd_proposer **out, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_DRAFT_H */
