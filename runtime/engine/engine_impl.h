/*
 * runtime/engine/engine_impl.h: PRIVATE to runtime/engine. The engine's record, shared by
 * engine.c (loading and pairing the models; the single-sequence sessions white-box tests
 * read) and gen_entry.c (sd_engine_generate: the batcher's step on one sequence; the
 * generate context; sd_engine_free), which sits above engine.c and the batcher so that
 * neither calls the other back.
 */
#ifndef SD_ENGINE_IMPL_H
#define SD_ENGINE_IMPL_H

#include "runtime/engine/sd_engine.h"

struct sd_engine {
    sd_engine_params p;
    sd_model *tm, *dm;
    sd_scorer *scorer;
    sd_proposer *prop;       /* the LLM draft, or NULL */
    sd_proposer *ngram;      /* n-gram lookup, always */
    sd_proposer *ngram_llm;  /* chain: ngram then prop, or NULL */
    sd_proposer *suffix;     /* suffix-structure drafting, always */
    sd_proposer *suffix_llm; /* chain: suffix then prop, or NULL */
    int32_t n_ctx, n_ctx_draft;
    sd_session_params sp, dsp;
    sd_grammar_vocab *gvocab; /* the target's token bytes for grammar masks, built on demand */
    /* The generate context (gen_entry.c's; engine.c never reads it): what sd_engine_generate
     * keeps between calls (the one-slot batcher, the lookup cache), made on first use and
     * freed by sd_engine_free; NULL until then. */
    struct sd_gen_ctx *gen;
};

/* Free what engine.c made for e (the models, the sessions, the proposers) and e itself;
 * the generate context must be gone (sd_engine_free, gen_entry.c, frees it first). */
void sd_engine_release(sd_engine *e);

/* The engine's single-sequence sessions, made on first use (sd_engine_scorer,
 * sd_engine_proposer, sd_engine_proposer_of; no client of the library runs them since
 * sd_engine_generate runs the batcher: white-box tests read the proposers): the scorer,
 * the LLM proposer (with its head) and the chains over it. Errors: theirs (nothing is
 * kept). */
int sd_engine_sessions(sd_engine *e, sd_error *err);

/* A failure inside the stop-text record's token callback (stop_text.c): its status (SD_OK:
 * none), its record copied into err. */
int sd_stop_text_status(const sd_stop_text *s, sd_error *err);

#endif /* SD_ENGINE_IMPL_H */
