/* Proposer dispatch. */
#include "draft/sd_draft.h"

int sd_proposer_propose(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t k,
                        sd_proposal *out, sd_error *err) {
    out->n = 0;
    out->one_hot = 0;
    out->lookup = 0;
    out->probs = NULL;
    if (n_ctx < 1) return sd_errorf(err, SD_ERR_ARG, "draft: empty context");
    if (k < 1 || k > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "draft: k = %d outside [1, %d]", k, SD_MAX_DRAFT);
    return p->ops->propose(p, ctx, n_ctx, k, out, err);
}

int sd_proposer_prefill(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    if (n_ctx < 1) return sd_errorf(err, SD_ERR_ARG, "draft: empty context");
    return p->ops->prefill ? p->ops->prefill(p, ctx, n_ctx, err) : SD_OK;
}

int sd_proposer_catch_up(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t window,
                         sd_error *err) {
    if (n_ctx < 1) return sd_errorf(err, SD_ERR_ARG, "draft: empty context");
    if (p->ops->catch_up) return p->ops->catch_up(p, ctx, n_ctx, window, err);
    return sd_proposer_prefill(p, ctx, n_ctx, err);
}

void sd_proposer_commit(sd_proposer *p, const int32_t *ctx, int32_t n_ctx) {
    p->ops->commit(p, ctx, n_ctx);
}

void sd_proposer_free(sd_proposer *p) {
    if (p) p->ops->free(p);
}

void sd_proposer_reset(sd_proposer *p, const sd_sampling_params *samp, uint64_t seed) {
    if (p->ops->reset) p->ops->reset(p, samp, seed);
}

void sd_proposer_set_cutoff(sd_proposer *p, float p_min, int32_t n_min) {
    if (p->ops->set_cutoff) p->ops->set_cutoff(p, p_min, n_min);
}

int sd_proposer_sizes_itself(const sd_proposer *p) {
    return p->ops->sizes_itself;
}

const char *sd_proposer_name(const sd_proposer *p) {
    return p->ops->name;
}

int sd_proposer_propose_tree(sd_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t width,
                             int32_t depth, sd_proposal *out, sd_error *err) {
    if (width < 1 || depth < 1 || (int64_t)width * depth > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "draft: tree %dx%d, expected width x depth <= %d", width,
                         depth, SD_MAX_DRAFT);
    int rc;
    if (p->ops->propose_tree && width > 1) {
        out->n = 0;
        out->one_hot = 0;
        out->lookup = 0;
        out->probs = NULL;
        if (n_ctx < 1) return sd_errorf(err, SD_ERR_ARG, "draft: empty context");
        rc = p->ops->propose_tree(p, ctx, n_ctx, width, depth, out, err);
    } else {
        rc = sd_proposer_propose(p, ctx, n_ctx, depth, out, err);
        for (int32_t i = 0; rc == SD_OK && i < out->n; i++)
            out->parent[i] = i - 1;
    }
    return rc;
}

int sd_proposer_set_grammar(sd_proposer *p, const sd_grammar_state *state,
                            const sd_grammar_vocab *gv, const int32_t *ends, int32_t n_end,
                            sd_error *err) {
    if (state && (!gv || n_end < 0 || n_end > SD_DRAFT_MAX_ENDS || (n_end && !ends)))
        return sd_errorf(err, SD_ERR_ARG, "draft: grammar with %d end ids (at most %d)", n_end,
                         SD_DRAFT_MAX_ENDS);
    return p->ops->set_grammar ? p->ops->set_grammar(p, state, gv, ends, n_end, err) : SD_OK;
}
