/*
 * runtime/engine/gen_entry.c: sd_engine_generate, the one entry of every single-sequence
 * client (specdec generate, chat, bench, sd_complete): the path chosen in one place
 * (sd_engine_generate_path), then the batcher's step on one slot (gen_batch.c) or, for
 * what only it has, sd_generate's loop (generate.c); and sd_engine_generate_text, the
 * same with stop strings. The generate context (below) lives here, and so does
 * sd_engine_free, which frees it before the engine. Above engine.c and the batcher, which
 * do not call it back.
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

/* A later segment's statistics b added to the run's st (the prompt figures, TTFT and the
 * first token's time stay the first segment's; the stop is b's), as the batcher's choice
 * counts on through a context shift. */
static void add_segment(sd_gen_stats *st, const sd_gen_stats *b) {
    const sd_gen_stats first = *st;
    sd_stats_add(st, b);
    st->n_prompt = first.n_prompt;
    st->n_prompt_cached = first.n_prompt_cached;
    st->t_prefill_ms = first.t_prefill_ms;
    st->ttft_ms = first.ttft_ms;
    st->t_first_ms = first.t_first_ms;
    st->stop = b->stop;
}

/* sd_generate's loop over the engine's scorer; with g->context_shift, each time it stops
 * at a full context with budget left, the context (the window, then the segment's tokens)
 * keeps its first n_keep tokens and drops the older half of the rest
 * (sd_ctx_shift_window), the target's cache is shifted in place, its keys re-rotated
 * (sd_scorer_shift; a backend that cannot evaluates the window afresh), and the next
 * segment generates from the window. Kept tokens that leave no room end it at the
 * context (as the batcher). */
static int loop_generate(sd_engine *e, sd_proposer *prop, const sd_gen_params *g,
                         const int32_t *prompt, int32_t n_prompt, sd_token_cb cb, void *user,
                         int32_t *out, int32_t cap_out, sd_gen_stats *st, sd_error *err) {
    const sd_vocab *v = sd_model_vocab(e->tm);
    const int32_t eos = sd_vocab_eos(v), ctx = e->n_ctx;
    int rc =
        sd_generate(e->scorer, prop, prompt, n_prompt, eos, g, cb, user, out, cap_out, st, err);
    if (rc || !g->context_shift || st->stop != SD_STOP_CONTEXT) return rc;
    const int32_t n_keep = sd_ctx_shift_keep(prompt, n_prompt, g->shift_keep, sd_vocab_bos(v));
    if (n_keep >= ctx / 2) return SD_OK;
    /* the context: a window of up to ctx + 1 tokens (the last one not evaluated yet) */
    int32_t *win = malloc(((size_t)ctx + 2) * sizeof *win);
    if (!win) return sd_errorf(err, SD_ERR_OOM, "context shift: out of memory");
    int32_t n_win = n_prompt, seg0 = 0, total = st->n_generated;
    memcpy(win, prompt, (size_t)n_prompt * sizeof *win);
    while (st->stop == SD_STOP_CONTEXT && total < g->n_predict) {
        const int32_t seg = total - seg0; /* the context at the stop: window and segment */
        SD_CHECK(n_win + seg <= ctx + 1, "a segment stops at a full context");
        memcpy(win + n_win, out + seg0, (size_t)seg * sizeof *win);
        const int32_t n_cur = n_win + seg, n_discard = sd_ctx_shift_window(win, n_cur, n_keep);
        n_win = n_cur - n_discard;
        /* the target's cache holds the context before the shift (but its last token) */
        if (sd_session_n_past(sd_scorer_session(e->scorer)) >= n_keep + n_discard) {
            rc = sd_scorer_shift(e->scorer, n_keep, n_discard, err);
            if (rc == SD_ERR_UNSUPPORTED) { /* evaluated afresh by the next segment */
                sd_error_clear(err);
                rc = SD_OK;
            }
            if (rc) break;
        }
        sd_gen_params gs = *g;
        gs.n_predict = g->n_predict - total;
        if (gs.logprobs) gs.logprobs_out = g->logprobs_out + total;
        gs.pass_trace = NULL; /* the traces: the first segment's passes */
        gs.pass_trace_cap = 0;
        gs.k_trace = NULL;
        gs.k_trace_cap = 0;
        sd_gen_stats b;
        rc = sd_generate(e->scorer, prop, win, n_win, eos, &gs, cb, user, out + total,
                         cap_out - total, &b, err);
        if (rc) break;
        add_segment(st, &b);
        seg0 = total;
        total += b.n_generated;
    }
    free(win);
    return rc;
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
    const int loop = sd_engine_generate_path(e, gp, n_prompt, NULL) == SD_GEN_PATH_LOOP;
    int rc = loop ? sd_engine_sessions(e, err) : SD_OK;
    if (rc) return rc;
    sd_proposer *prop = loop && gp->n_draft > 0 ? sd_engine_proposer_of(e, gp->draft_type) : NULL;
    if (prop) sd_proposer_set_cutoff(prop, gp->draft_p_min, gp->draft_min);
    if (prop && (gp->draft_type == SD_DRAFT_NGRAM_LLM || gp->draft_type == SD_DRAFT_SUFFIX_LLM)) {
        int rc0 =
            sd_proposer_chain_set_limits(prop, gp->chain_draft_max, gp->chain_long_match, err);
        if (rc0) return sd_error_prefix(err, rc0, "generate");
    }
    sd_gen_params g = *gp;
    /* Stop at every end-of-generation token of the vocabulary (<|im_end|>, <|eot_id|>...),
     * as llama.cpp does, besides EOS and the caller's stop ids (as the batcher). */
    rc = sd_step_add_eog(&g, sd_model_vocab(e->tm), err);
    if (rc) return sd_error_prefix(err, rc, "%s", sd_model_path(e->tm));
    if (g.grammar && !g.grammar_vocab && (rc = sd_engine_grammar_vocab(e, &g.grammar_vocab, err)))
        return rc;
    if (g.draft_prior <= 0.0 && prop) g.draft_prior = sd_engine_draft_prior(e, g.draft_type);
    if (g.clock == SD_CLOCK_AUTO) {
        /* One CPU thread does all the work of a pass: its CPU clock is the pass's cost. */
        const int one_thread = e->sp.n_threads == 1 || (e->sp.n_threads <= 0 && sd_n_cores() == 1);
        g.clock = one_thread && e->sp.device == SD_DEVICE_CPU && e->dsp.device == SD_DEVICE_CPU
                      ? SD_CLOCK_THREAD_CPU
                      : SD_CLOCK_WALL;
    }
    if (!loop) {
        if ((rc = gen_ctx(e, err))) return rc;
        return sd_gen_batch_run(e, &e->gen->b, e->gen->lookup, &g, prompt, n_prompt, cb, user, out,
                                cap_out, stats, err);
    }
    return loop_generate(e, prop, &g, prompt, n_prompt, cb, user, out, cap_out, stats, err);
}

const char *sd_gen_path_name(sd_gen_path p) {
    switch (p) {
    case SD_GEN_PATH_AUTO:
        return "auto";
    case SD_GEN_PATH_BATCHER:
        return "batcher";
    case SD_GEN_PATH_LOOP:
        return "loop";
    }
    return "unknown";
}

sd_gen_path sd_engine_generate_path(const sd_engine *e, const sd_gen_params *gp, int32_t n_prompt,
                                    const char **why) {
    (void)n_prompt; /* a prompt and budget past the context stop there in both loops */
    if (!gp) gp = &e->p.gen;
    const char *w = NULL; /* what only the loop has */
    if (gp->path == SD_GEN_PATH_LOOP) w = "asked for";
    if (why) *why = w ? w : "one sequence of the batcher's step";
    return w ? SD_GEN_PATH_LOOP : SD_GEN_PATH_BATCHER;
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
