/*
 * The LLM proposer: the q rows it returns are exactly the distributions its tokens
 * were drawn from (warped with the same temperature / top-k / top-p, over the full
 * vocabulary), and its KV cache follows the committed context through rollbacks.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"

static char g_dir[1024], g_model[2048];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec s = tu_llama_default_spec();
    s.wtype = SD_TYPE_Q8_0;
    cr_assert_eq(tu_make_llama(tu_path(g_model, sizeof g_model, g_dir, "d.gguf"), &s), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(draft, .init = setup, .fini = teardown, .timeout = 120);

/* Independently recompute each row from a fresh session over ctx + drafted tokens and
 * redo each draw from its key: rejection sampling, q_i = the warp of the draft logits and
 * token i = sd_sample(q_i, sd_key_uniform(seed, n_ctx + i, SD_DRAW_DRAFT, 0)); Gumbel,
 * token i = sd_gumbel_sample(q_i, seed, n_ctx + i) and no q rows (one-hot); greedy, the
 * argmax of the logits and no q rows. */
static void check_proposal(const sd_model *m, const sd_sampling_params *samp, uint64_t seed,
                           const int32_t *ctx, int32_t n_ctx, const sd_proposal *prop) {
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    sd_error err = {0};
    sd_session *s = NULL;
    sd_session_params sp = sd_session_default_params();
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), 0, "%s", err.msg);
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    float *q = malloc((size_t)n_vocab * sizeof(float));
    int32_t *scratch = malloc((size_t)n_vocab * sizeof(int32_t));
    cr_assert_eq(sd_session_eval(s, ctx, n_ctx, logits, 1, &err), 0, "%s", err.msg);
    const int rows = samp->temp > 0.0f && samp->spec == SD_SPEC_REJECTION;
    cr_assert_eq(prop->one_hot, !rows, "one-hot exactly when no q rows are needed");
    cr_assert_eq(prop->probs == NULL, !rows);
    for (int32_t i = 0; i < prop->n; i++) {
        cr_assert_eq(sd_warp(samp, logits, n_vocab, q, scratch, &err), 0, "%s", err.msg);
        int32_t want;
        if (!(samp->temp > 0.0f)) {
            want = sd_argmax(logits, n_vocab);
        } else if (samp->spec == SD_SPEC_GUMBEL) {
            want = sd_gumbel_sample(q, n_vocab, NULL, seed, n_ctx + i);
        } else {
            const float *got = prop->probs + (size_t)i * n_vocab;
            cr_assert(memcmp(got, q, (size_t)n_vocab * sizeof(float)) == 0,
                      "q row %d differs from the warp of the draft logits", i);
            double sum = 0.0;
            int32_t support = 0;
            for (int32_t v = 0; v < n_vocab; v++) {
                sum += got[v];
                support += got[v] > 0.0f;
            }
            cr_assert_float_eq(sum, 1.0, 1e-5);
            if (samp->top_k > 0) cr_assert_leq(support, samp->top_k);
            cr_assert_gt(got[prop->tokens[i]], 0.0f);
            want = sd_sample(q, n_vocab, sd_key_uniform(seed, n_ctx + i, SD_DRAW_DRAFT, 0));
        }
        cr_assert_eq(prop->tokens[i], want, "draft token %d: %d, the keyed draw gives %d", i,
                     prop->tokens[i], want);
        cr_assert_eq(sd_session_eval(s, &prop->tokens[i], 1, logits, 1, &err), 0, "%s", err.msg);
    }
    free(logits);
    free(q);
    free(scratch);
    sd_session_free(s);
}

Test(draft, q_is_the_sampled_distribution) {
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(g_model, &m, &err), 0, "%s", err.msg);
    const sd_sampling_params cases[] = {
        {.temp = 1.0f, .top_k = 0, .top_p = 1.0f},
        {.temp = 0.7f, .top_k = 5, .top_p = 1.0f},
        {.temp = 1.3f, .top_k = 0, .top_p = 0.6f},
        {.temp = 0.9f, .top_k = 12, .top_p = 0.8f},
        {.temp = 0.9f, .top_k = 0, .top_p = 1.0f, .min_p = 0.1f},
        {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .spec = SD_SPEC_GUMBEL},
        {.temp = 0.8f, .top_k = 10, .top_p = 0.9f, .spec = SD_SPEC_GUMBEL},
        {.temp = 0.0f, .top_k = 0, .top_p = 1.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sd_proposer *p = NULL;
        sd_session_params sp = sd_session_default_params();
        const uint64_t seed = 1234 + c;
        cr_assert_eq(sd_proposer_llm_init(m, &sp, &cases[c], seed, 0, &p, &err), 0, "%s", err.msg);
        int32_t ctx[64] = {1, 10, 11, 12};
        int32_t n_ctx = 4;
        for (int step = 0; step < 4; step++) {
            sd_proposal prop;
            cr_assert_eq(sd_proposer_propose(p, ctx, n_ctx, 6, &prop, &err), 0, "%s", err.msg);
            cr_assert_eq(prop.n, 6);
            check_proposal(m, &cases[c], seed, ctx, n_ctx, &prop);
            /* Accept a varying prefix, then a token of our own (a "correction"). */
            int32_t acc = step % 4;
            for (int32_t i = 0; i < acc; i++)
                ctx[n_ctx++] = prop.tokens[i];
            ctx[n_ctx++] = 3 + step;
            sd_proposer_commit(p, ctx, n_ctx);
        }
        sd_proposer_free(p);
    }
    sd_model_free(m);
}

Test(draft, stops_gracefully_at_its_context_limit) {
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(g_model, &m, &err), 0, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 16;
    sd_sampling_params samp = {.temp = 0.0f, .top_k = 0, .top_p = 1.0f};
    sd_proposer *p = NULL;
    cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 1, 0, &p, &err), 0, "%s", err.msg);
    int32_t ctx[32];
    for (int i = 0; i < 32; i++)
        ctx[i] = 3 + i;
    /* With n_ctx committed tokens the draft cache needs n_ctx - 1 + k positions. */
    for (int32_t n_ctx = 10; n_ctx <= 20; n_ctx++) {
        sd_proposal prop;
        cr_assert_eq(sd_proposer_propose(p, ctx, n_ctx, 4, &prop, &err), 0, "n_ctx %d: %s", n_ctx,
                     err.msg);
        int32_t room = 16 - n_ctx + 1;
        int32_t want = room < 0 ? 0 : (room < 4 ? room : 4);
        cr_assert_eq(prop.n, want, "n_ctx %d: drafted %d, expected %d", n_ctx, prop.n, want);
    }
    sd_proposer_free(p);
    sd_model_free(m);
}
