/*
 * runtime/engine/gen_batch.h: PRIVATE to runtime/engine. sd_engine_generate's batcher
 * path: one sequence through the batcher's step (the one `specdec serve` runs), so the
 * single-sequence clients (specdec generate, sd_complete, chat, bench) and the server
 * share one engine.
 */
#ifndef SD_ENGINE_GEN_BATCH_H
#define SD_ENGINE_GEN_BATCH_H

#include "runtime/engine/sd_engine.h"

/* Positions per block of the one-slot batcher's paged pool: a later call reuses the
 * cached prefix of an earlier one (a chat turn) in whole blocks of this size. */
#define SD_GEN_BATCH_BLOCK 64

/*
 * Generate as sd_engine_generate documents (gp with the end-of-generation
 * ids already among its stop ids) through *b, a batcher of one sequence over e's models,
 * made on the first call (with lookup as its lookup cache) and kept for the next (its
 * prefix cache). The callback's non-zero return stops generation with stop NONE, as
 * documented. Errors: argument errors (SD_ERR_ARG), the batcher's (SD_ERR_CONTEXT
 * when prompt plus n_predict exceed the context), model errors.
 */
int sd_gen_batch_run(sd_engine *e, sd_batcher **b, const sd_ngram_cache *lookup,
                     const sd_gen_params *gp, const int32_t *prompt, int32_t n_prompt,
                     sd_token_cb cb, void *user, int32_t *out, int32_t cap_out, sd_gen_stats *st,
                     sd_error *err);

/* sd_engine_shift_cached on b (idle: otherwise nothing is done), through its free slot 0:
 * the cached prefix of conv attached, shifted (sd_session_seq_shift), stored back in the
 * prefix cache and the slot emptied. */
int sd_gen_batch_shift(sd_batcher *b, const int32_t *conv, int32_t n_conv, int32_t n_keep,
                       int32_t n_discard, int32_t *n_shifted, sd_error *err);

#endif /* SD_ENGINE_GEN_BATCH_H */
