/* draft/chain.c: two proposers in order (see sd_draft.h, sd_proposer_chain_init). */
#include <stdlib.h>

#include "draft/sd_draft.h"

typedef struct chain_proposer {
    sd_proposer base; /* first member */
    sd_proposer_ops ops;
    sd_proposer *first, *second; /* not owned */
} chain_proposer;

static int chain_prefill(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    int rc = sd_proposer_prefill(c->first, ctx, n_ctx, err);
    return rc ? rc : sd_proposer_prefill(c->second, ctx, n_ctx, err);
}

static int chain_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                         sd_proposal *out, sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    int rc = sd_proposer_propose(c->first, ctx, n_ctx, k, out, err);
    if (rc || out->n > 0) return rc;
    return sd_proposer_propose(c->second, ctx, n_ctx, k, out, err);
}

static int chain_catch_up(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t window,
                          sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    int rc = sd_proposer_catch_up(c->first, ctx, n_ctx, window, err);
    return rc ? rc : sd_proposer_catch_up(c->second, ctx, n_ctx, window, err);
}

static void chain_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    chain_proposer *c = (chain_proposer *)base;
    sd_proposer_commit(c->first, ctx, n_ctx);
    sd_proposer_commit(c->second, ctx, n_ctx);
}

static void chain_reset(sd_proposer *base, const sd_sampling_params *samp, uint64_t seed) {
    chain_proposer *c = (chain_proposer *)base;
    sd_proposer_reset(c->first, samp, seed);
    sd_proposer_reset(c->second, samp, seed);
}

static void chain_set_cutoff(sd_proposer *base, float p_min, int32_t n_min) {
    chain_proposer *c = (chain_proposer *)base;
    sd_proposer_set_cutoff(c->first, p_min, n_min);
    sd_proposer_set_cutoff(c->second, p_min, n_min);
}

static void chain_free(sd_proposer *base) {
    free(base);
}

int sd_proposer_chain_init(sd_proposer *first, sd_proposer *second, const char *name,
                           sd_proposer **out, sd_error *err) {
    *out = NULL;
    if (!first || !second) return sd_errorf(err, SD_ERR_ARG, "draft chain: NULL proposer");
    chain_proposer *c = calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "draft chain: out of memory");
    c->ops = (sd_proposer_ops){
        .name = name ? name : "chain",
        .prefill = chain_prefill,
        .propose = chain_propose,
        .commit = chain_commit,
        .reset = chain_reset,
        .set_cutoff = chain_set_cutoff,
        .catch_up = chain_catch_up,
        .free = chain_free,
    };
    c->base.ops = &c->ops;
    c->first = first;
    c->second = second;
    *out = &c->base;
    return SD_OK;
}
