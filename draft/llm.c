/* LLM proposer: a small llama model run autoregressively with its own KV cache. */
#include "draft/sd_draft.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct llm_proposer {
    sd_proposer base; /* first member: sd_proposer* <-> llm_proposer* */
    const sd_model *model;
    sd_session *sess;
    sd_sampling_params samp;
    sd_rng rng;
    int32_t n_vocab;
    float *logits;   /* [n_vocab] */
    float *probs;    /* [SD_MAX_DRAFT, n_vocab] */
    int32_t *warp_scratch; /* [n_vocab] */
} llm_proposer;

static int llm_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                       sd_proposal *out, sd_error *err) {
    llm_proposer *p = (llm_proposer *)base;
    const int32_t n_vocab = p->n_vocab;
    out->n = 0;
    out->n_vocab = n_vocab;
    out->probs = p->probs;
    /* Room: the cache will hold ctx[0 .. n_ctx) plus the first k - 1 drafted tokens
     * (the last drafted token is never evaluated). Draft fewer near the limit. */
    const int32_t n_room = sd_session_n_ctx(p->sess) - n_ctx + 1;
    if (n_room < 1) return SD_OK; /* out of draft context: target continues alone */
    if (k > n_room) k = n_room;
    /* Roll back to the accepted prefix and catch up with everything but the last
     * committed token, which is fed below together with its logits. */
    int rc = sd_session_sync(p->sess, ctx, n_ctx - 1, err);
    if (rc) return rc;
    int32_t tok = ctx[n_ctx - 1];
    for (int32_t i = 0; i < k; i++) {
        rc = sd_session_eval(p->sess, &tok, 1, p->logits, 1, err);
        if (rc) return rc;
        float *q = p->probs + (size_t)i * n_vocab;
        rc = sd_warp(&p->samp, p->logits, n_vocab, q, p->warp_scratch, err);
        if (rc) {
            char msg[SD_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
            return sd_errorf(err, (sd_status)rc, "%s: draft logits: %s", sd_model_path(p->model),
                             msg);
        }
        tok = p->samp.temp <= 0.0f ? sd_argmax(q, n_vocab)
                                   : sd_sample(q, n_vocab, sd_rng_uniform(&p->rng));
        out->tokens[i] = tok;
        out->n = i + 1;
    }
    return SD_OK;
}

static void llm_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    llm_proposer *p = (llm_proposer *)base;
    int32_t kept = sd_session_keep_prefix(p->sess, ctx, n_ctx);
    SD_CHECK(kept == sd_session_n_past(p->sess), "draft KV cache must hold only committed tokens");
    (void)kept;
}

static void llm_free(sd_proposer *base) {
    llm_proposer *p = (llm_proposer *)base;
    sd_session_free(p->sess);
    free(p->logits);
    free(p->probs);
    free(p->warp_scratch);
    free(p);
}

static const sd_proposer_ops llm_ops = {"llm", llm_propose, llm_commit, llm_free};

int sd_proposer_llm_init(const sd_model *m, const sd_session_params *sp,
                         const sd_sampling_params *samp, uint64_t seed, sd_proposer **out,
                         sd_error *err) {
    *out = NULL;
    llm_proposer *p = calloc(1, sizeof *p);
    if (!p) return sd_errorf(err, SD_ERR_OOM, "draft: out of memory");
    p->base.ops = &llm_ops;
    p->model = m;
    p->samp = *samp;
    sd_rng_seed(&p->rng, seed);
    p->n_vocab = sd_model_hparams(m)->n_vocab;
    size_t n_probs;
    if (sd_mul_size((size_t)SD_MAX_DRAFT, (size_t)p->n_vocab, &n_probs) ||
        sd_mul_size(n_probs, sizeof(float), &n_probs)) {
        free(p);
        return sd_errorf(err, SD_ERR_OOM, "draft: vocabulary too large");
    }
    p->logits = malloc((size_t)p->n_vocab * sizeof(float));
    p->probs = malloc(n_probs);
    p->warp_scratch = malloc((size_t)p->n_vocab * sizeof(int32_t));
    if (!p->logits || !p->probs || !p->warp_scratch) {
        llm_free(&p->base);
        return sd_errorf(err, SD_ERR_OOM, "draft: out of memory");
    }
    int rc = sd_session_init(m, sp, &p->sess, err);
    if (rc) {
        llm_free(&p->base);
        return rc;
    }
    *out = &p->base;
    return SD_OK;
}
