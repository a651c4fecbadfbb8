/*
 * tests/test_llm_catch_up.c: the LLM draft's bounded catch-up (sd_proposer_catch_up with a
 * window) sees ctx[0] and the last tokens only, and proposes exactly what a fresh proposer
 * does on that view.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "verify/sd_verify.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(ngram, .init = setup, .fini = teardown, .timeout = 600);

/* The LLM draft's bounded catch-up: after sd_proposer_catch_up with a window it sees
 * ctx[0] followed by the last `window` tokens before the last one; its proposals (tokens
 * and q rows, bit for bit: batch invariance) equal a fresh proposer's on that view, also
 * after commits that extend the context. window 0 catches up on everything. */
Test(ngram, llm_catch_up_window) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(d, &m, &err), 0, "%s", err.msg);
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = 1;
    for (int sampled = 0; sampled <= 1; sampled++) {
        sd_sampling_params samp = {.temp = sampled ? 0.9f : 0.0f, .top_k = 0, .top_p = 1.0f};
        sd_proposer *p = NULL, *ref = NULL;
        cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 5, 0, &p, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 5, 0, &ref, &err), 0, "%s", err.msg);
        int32_t ctx[80];
        for (int i = 0; i < 80; i++)
            ctx[i] = i == 0 ? 1 : 3 + (i * 37) % (n_vocab - 3);
        cr_assert_eq(sd_proposer_prefill(p, ctx, 10, &err), 0); /* then 50 tokens "off" */
        const int32_t n = 60, window = 8;
        cr_assert_eq(sd_proposer_catch_up(p, ctx, n, window, &err), 0, "%s", err.msg);
        int32_t view[80];
        view[0] = ctx[0];
        memcpy(view + 1, ctx + (n - 1 - window), (size_t)(window + 1) * sizeof *ctx);
        int32_t n_view = window + 2;
        /* Greedy: three steps, the same tokens. Sampled: the first proposal's first q row
         * (the draws are keyed by the position in the whole context, which the reference
         * over the view does not have, so the tokens and later rows may differ). */
        for (int step = 0; step < (sampled ? 1 : 3); step++) {
            sd_proposal a, b;
            sd_proposer_commit(ref, view, 0); /* a fresh cache for the reference */
            cr_assert_eq(sd_proposer_propose(ref, view, n_view, 4, &b, &err), 0, "%s", err.msg);
            cr_assert_eq(sd_proposer_propose(p, ctx, n + step * 2, 4, &a, &err), 0, "%s", err.msg);
            cr_assert_eq(a.n, b.n, "step %d: %d tokens vs %d", step, a.n, b.n);
            cr_assert_eq(!a.probs, !sampled, "q rows exactly when sampling by rejection");
            for (int32_t i = 0; i < a.n && !sampled; i++)
                cr_assert_eq(a.tokens[i], b.tokens[i], "step %d token %d", step, i);
            if (sampled)
                cr_assert(!memcmp(a.probs, b.probs, (size_t)n_vocab * sizeof(float)),
                          "step %d: q row 0 differs from the fresh proposer's", step);
            /* Accept two tokens of our own and commit: the view grows with the context. */
            ctx[n + step * 2] = 3 + step;
            ctx[n + step * 2 + 1] = 4 + step;
            sd_proposer_commit(p, ctx, n + step * 2 + 2);
            /* The view is ctx[0], then ctx[n - 1 - window ..]: rebuild it. */
            n_view = 1 + (n + step * 2 + 2) - (n - 1 - window);
            view[0] = ctx[0];
            memcpy(view + 1, ctx + (n - 1 - window), (size_t)(n_view - 1) * sizeof *ctx);
        }
        /* A new generation (reset) goes back to the whole context; window 0 catches up
         * on everything: a fresh proposer on the whole context agrees. */
        sd_proposer_reset(p, &samp, 9);
        sd_proposer_reset(ref, &samp, 9);
        cr_assert_eq(sd_proposer_catch_up(p, ctx, 70, 0, &err), 0);
        sd_proposal a, b;
        cr_assert_eq(sd_proposer_propose(p, ctx, 70, 3, &a, &err), 0);
        sd_proposer_commit(ref, ctx, 0);
        cr_assert_eq(sd_proposer_propose(ref, ctx, 70, 3, &b, &err), 0);
        for (int32_t i = 0; i < a.n; i++)
            cr_assert_eq(a.tokens[i], b.tokens[i]);
        sd_proposer_free(p);
        sd_proposer_free(ref);
    }
    sd_model_free(m);
}
