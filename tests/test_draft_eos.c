/*
 * tests/test_draft_eos.c: with ignore_eos the batcher's LLM draft rows mask EOS and the stop
 * ids as the target's rows do (runtime/engine/batch_step.c, draft_mask_ends), so the draft
 * never proposes a token the target cannot accept.
 *
 * The shipped TinyStories target drafts for itself (greedy, K = 4 fixed, 300 tokens in 512
 * positions). The reference is the target alone, greedy, one token at a time in a session of its
 * own with EOS and the end-of-generation ids masked (-inf); it also counts the positions where the
 * unmasked argmax is one of those ids (a story's end), which the test requires, so the case
 * is met: a draft that proposed EOS there would be rejected. A draft identical to the target
 * otherwise proposes the target's own tokens bit for bit (batched passes are bit-identical
 * to single decodes), so: the output equals the reference token for token, and every
 * drafted token is accepted (n_accepted == n_drafted), which fails if the draft proposes
 * EOS.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "engine_util.h"

TestSuite(draft_eos, .timeout = 300);

#define N_PRED 300 /* the story ends (EOS) after 246 tokens */

/* 1 if t is EOS or an end-of-generation id of v. */
static int is_end(const sd_vocab *v, int32_t t) {
    return t == sd_vocab_eos(v) || sd_vocab_is_eog(v, t);
}

Test(draft_eos, ignore_eos_draft_rows_never_propose_eos) {
    eu_need_tiny();
    sd_engine *e = eu_engine(EU_TINY_TARGET, EU_TINY_TARGET, 512, 1, 0);
    int32_t *prompt = NULL;
    const int32_t n_prompt = eu_prompt(e, "Once upon a time", &prompt);
    const sd_model *m = sd_engine_target(e);
    const sd_vocab *v = sd_model_vocab(m);
    const int32_t nv = sd_model_hparams(m)->n_vocab;

    /* The reference, in a session with the engine's parameters (its KV type). */
    sd_session_params sp = sd_engine_session_params(e, 0);
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    float *l = malloc((size_t)nv * sizeof *l);
    cr_assert_not_null(l);
    int32_t ref[N_PRED];
    int n_end_wins = 0;
    cr_assert_eq(sd_session_seq_eval(s, 0, prompt, n_prompt, l, 1, &err), SD_OK, "%s", err.msg);
    for (int32_t i = 0; i < N_PRED; i++) {
        if (is_end(v, sd_argmax(l, nv))) n_end_wins++;
        for (int32_t t = 0; t < nv; t++)
            if (is_end(v, t)) l[t] = -INFINITY;
        ref[i] = sd_argmax(l, nv);
        if (i + 1 < N_PRED)
            cr_assert_eq(sd_session_seq_eval(s, 0, &ref[i], 1, l, 1, &err), SD_OK, "%s", err.msg);
    }
    cr_assert_gt(n_end_wins, 0, "the target alone never wanted to stop: the case is not met");

    sd_gen_params gp = sd_engine_params_of(e)->gen;
    gp.n_predict = N_PRED;
    gp.samp.temp = 0.0f;
    gp.ignore_eos = 1;
    int32_t out[N_PRED];
    sd_gen_stats st;
    const int32_t n = eu_generate(e, &gp, SD_DRAFT_LLM, SD_K_FIXED, 4, prompt, n_prompt, out, &st);
    cr_assert_eq(n, N_PRED);
    for (int32_t i = 0; i < N_PRED; i++)
        cr_assert_eq(out[i], ref[i], "token %d: %d, target alone %d", i, out[i], ref[i]);
    cr_assert_gt(st.n_drafted, 0);
    cr_assert_eq(st.n_accepted, st.n_drafted,
                 "%d of %d drafted tokens accepted: the draft proposed a masked id "
                 "(%d positions where the target's unmasked argmax ends the story)",
                 st.n_accepted, st.n_drafted, n_end_wins);
    free(l);
    free(prompt);
    sd_session_free(s);
    sd_engine_free(e);
}
