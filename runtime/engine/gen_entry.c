/*
 * runtime/engine/gen_entry.c: sd_engine_generate, the one entry of every single-sequence
 * client (specdec generate, chat, bench, sd_complete): the batcher's step on one slot
 * (gen_batch.c), the step `specdec serve` runs; and sd_engine_generate_text, the same with
 * stop strings. The generate context (below) lives here, and so does sd_engine_free,
 * which frees it before the engine. Above engine.c and the batcher, which do not call it
 * back.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/engine_impl.h"
#include "runtime/engine/gen_batch.h"
#include "runtime/engine/step.h"

/* What sd_engine_generate keeps between calls of one engine (e->gen). */
struct sd_gen_ctx {
    sd_batcher *b; /* the one-slot batcher (gen_batch.c), made on the first call that uses
                      it, kept for its prefix cache (a chat turn reuses its blocks) */
    const sd_ngram_cache *lookup; /* the lookup cache (sd_engine_set_lookup_cache): the
                                     batcher's proposers take it when they are made */
};

/* e->gen, made on first use. Errors: SD_ERR_OOM. */
static int gen_ctx(sd_engine *e, sd_error *err) {
    if (!e->gen && !(e->gen = calloc(1, sizeof *e->gen)))
        return sd_errorf(err, SD_ERR_OOM, "generate: out of memory");
    return SD_OK;
}

void sd_engine_free(sd_engine *e) {
    if (!e) return;
    if (e->gen) sd_batcher_free(e->gen->b);
    free(e->gen);
    e->gen = NULL;
    sd_engine_release(e);
}

int sd_engine_generate(sd_engine *e, const sd_gen_params *gp, const int32_t *prompt,
                       int32_t n_prompt, sd_token_cb cb, void *user, int32_t *out, int32_t cap_out,
                       sd_gen_stats *stats, sd_error *err) {
    if (!gp) gp = &e->p.gen;
    if (e->p.models_only)
        return sd_errorf(err, SD_ERR_ARG, "generate: the engine was made with models only");
    if (gp->n_stop_ids < 0 || gp->n_stop_ids > SD_MAX_STOP_IDS)
        return sd_errorf(err, SD_ERR_ARG, "generate: n_stop_ids = %d, expected 0..%d",
                         (int)gp->n_stop_ids, SD_MAX_STOP_IDS);
    if (gp->n_draft > 0 && !e->dm && sd_draft_type_uses_llm(gp->draft_type))
        return sd_errorf(err, SD_ERR_ARG,
                         "draft type %s needs a draft model (draft): the engine has none",
                         sd_draft_type_name(gp->draft_type));
    sd_gen_params g = *gp;
    /* Stop at every end-of-generation token of the vocabulary (<|im_end|>, <|eot_id|>...),
     * as llama.cpp does, besides EOS and the caller's stop ids (as the batcher). */
    int rc = sd_step_add_eog(&g, sd_model_vocab(e->tm), err);
    if (rc) return sd_error_prefix(err, rc, "%s", sd_model_path(e->tm));
    if (g.grammar && !g.grammar_vocab && (rc = sd_engine_grammar_vocab(e, &g.grammar_vocab, err)))
        return rc;
    if (g.clock == SD_CLOCK_AUTO) {
        /* One CPU thread does all the work of a pass: its CPU clock is the pass's cost. */
        const int one_thread = e->sp.n_threads == 1 || (e->sp.n_threads <= 0 && sd_n_cores() == 1);
        g.clock = one_thread && e->sp.device == SD_DEVICE_CPU && e->dsp.device == SD_DEVICE_CPU
                      ? SD_CLOCK_THREAD_CPU
                      : SD_CLOCK_WALL;
    }
    if ((rc = gen_ctx(e, err))) return rc;
    return sd_gen_batch_run(e, &e->gen->b, e->gen->lookup, &g, prompt, n_prompt, cb, user, out,
                            cap_out, stats, err);
}

void sd_engine_clear_cache(sd_engine *e) {
    if (e->gen && e->gen->b) sd_batcher_clear_cache(e->gen->b);
}

int sd_engine_shift_cached(sd_engine *e, const int32_t *conv, int32_t n_conv, int32_t n_keep,
                           int32_t n_discard, int32_t *n_shifted, sd_error *err) {
    *n_shifted = 0;
    if (!e->gen || !e->gen->b) return SD_OK; /* no run on the batcher yet: nothing cached */
    return sd_gen_batch_shift(e->gen->b, conv, n_conv, n_keep, n_discard, n_shifted, err);
}

int sd_engine_set_lookup_cache(sd_engine *e, const sd_ngram_cache *c, sd_error *err) {
    if (e->ngram) {
        const int rc = sd_proposer_ngram_set_cache(e->ngram, c, err);
        if (rc) return rc;
    }
    if (!e->gen && !c) return SD_OK; /* none, as before */
    const int rc = gen_ctx(e, err);
    if (rc) return rc;
    if (c != e->gen->lookup) { /* the batcher's proposers take it when they are made */
        sd_batcher_free(e->gen->b);
        e->gen->b = NULL;
    }
    e->gen->lookup = c;
    return SD_OK;
}

int sd_engine_generate_text(sd_engine *e, const sd_gen_params *gp, sd_stop_text *txt,
                            const int32_t *prompt, int32_t n_prompt, int32_t *out, int32_t cap_out,
                            sd_gen_stats *stats, sd_error *err) {
    if (!txt) return sd_errorf(err, SD_ERR_ARG, "generate: the text record is NULL");
    if (sd_stop_text_hit(txt)) { /* a stop string ended an earlier segment: nothing more */
        memset(stats, 0, sizeof *stats);
        stats->n_prompt = n_prompt;
        stats->stop = SD_STOP_STRING;
        return SD_OK;
    }
    int rc = sd_engine_generate(e, gp, prompt, n_prompt, sd_stop_text_tokens, txt, out, cap_out,
                                stats, err);
    if (!rc) rc = sd_stop_text_status(txt, err);
    if (!rc && sd_stop_text_hit(txt)) stats->stop = SD_STOP_STRING;
    return rc;
}
