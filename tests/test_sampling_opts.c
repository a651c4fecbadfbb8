/*
 * Sampling options and what the draft does with them, against independent computations:
 *   - sd_penalize: llama.cpp's repetition / frequency / presence penalties over the last
 *     repeat_last_n tokens of a two-part history, recomputed here by brute force; ids
 *     outside the row ignored; a column map (a trimmed head) applies them by column;
 *   - min-p in sd_warp: the kept set is {logit >= max + ln(min_p)} (with top-k, the
 *     intersection), renormalised, recomputed here in double;
 *   - greedy speculative output with penalties equals target-alone output with the same
 *     penalties (the draft's rows get them too), and the penalties change the output (so
 *     the test would see them ignored);
 *   - the LLM draft's confidence cut-off (--draft-p-min): the proposal stops exactly at
 *     the first position i >= n_min whose greedy confidence 1 / sum exp(l - max), computed
 *     here in double from a fresh session, is below p_min; so a no-op cut-off fails here;
 *   - statistics: tokens per pass counts the stop token, so it is >= 1 even when every
 *     pass ends the run; per-position rates of positions never drafted are absent (0
 *     drafted), and K drafted, not K chosen, fills the histogram (-cd 1: a draft without
 *     room drafts nothing and the histogram says K = 0).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "pair_fixture.h"
#include "verify/sd_sample.h"

TestSuite(sampling_opts, .init = pair_setup, .fini = pair_teardown, .timeout = 600);

/* Brute force: for each id, count it in the window and apply the formula. */
static void penalize_ref(const sd_sampling_params *sp, const int32_t *a, int32_t na,
                         const int32_t *b, int32_t nb, float *l, int32_t n) {
    int32_t hist[256], nh = 0;
    for (int32_t i = 0; i < na; i++)
        hist[nh++] = a[i];
    for (int32_t i = 0; i < nb; i++)
        hist[nh++] = b[i];
    const int32_t w = sp->repeat_last_n < nh ? sp->repeat_last_n : nh;
    for (int32_t id = 0; id < n; id++) {
        int32_t c = 0;
        for (int32_t i = nh - w; i < nh; i++)
            c += hist[i] == id;
        if (!c) continue;
        float x = l[id];
        if (sp->repeat_penalty != 1.0f && sp->repeat_penalty > 0.0f)
            x = x <= 0.0f ? x * sp->repeat_penalty : x / sp->repeat_penalty;
        x -= (float)c * sp->freq_penalty + sp->presence_penalty;
        l[id] = x;
    }
}

Test(sampling_opts, penalties_match_the_formula) {
    enum { N = 50 };
    const int32_t a[12] = {3, 7, 7, 9, 3, 3, 12, 49, 60, -1, 7, 2};
    const int32_t b[5] = {9, 9, 4, 3, 48};
    const sd_sampling_params cases[] = {
        {.temp = 1, .repeat_penalty = 1.3f, .repeat_last_n = 64},
        {.temp = 1, .repeat_penalty = 1.0f, .freq_penalty = 0.5f, .repeat_last_n = 8},
        {.temp = 1,
         .repeat_penalty = 1.1f,
         .presence_penalty = 0.7f,
         .freq_penalty = -0.2f,
         .repeat_last_n = 5},
        {.temp = 1, .repeat_penalty = 2.0f, .repeat_last_n = 0}, /* off */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float l[N], r[N];
        for (int v = 0; v < N; v++)
            l[v] = r[v] = (float)((v * 37) % 11) - 5.0f;
        sd_penalize(&cases[c], a, 12, b, 5, l, N, NULL);
        if (cases[c].repeat_last_n > 0) penalize_ref(&cases[c], a, 12, b, 5, r, N);
        for (int v = 0; v < N; v++)
            cr_assert_eq(l[v], r[v], "case %zu id %d: %g vs %g", c, v, (double)l[v], (double)r[v]);
    }
    cr_assert(!sd_penalties_on(&cases[3]));
    /* A column map: the same penalty on the columns of the ids. */
    const int32_t col_of[N] = {[3] = 0, [9] = 1, [20] = 2};
    int32_t map[N];
    for (int v = 0; v < N; v++)
        map[v] = v == 3 || v == 9 || v == 20 ? col_of[v] : -1;
    float sub[3] = {2.0f, -1.0f, 4.0f}, full[N] = {0};
    full[3] = 2.0f;
    full[9] = -1.0f;
    full[20] = 4.0f;
    sd_penalize(&cases[0], a, 12, b, 5, sub, N, map);
    sd_penalize(&cases[0], a, 12, b, 5, full, N, NULL);
    cr_assert_eq(sub[0], full[3]);
    cr_assert_eq(sub[1], full[9]);
    cr_assert_eq(sub[2], full[20]);
    sd_error err = {0};
    sd_sampling_params bad = sd_sampling_default_params();
    bad.repeat_last_n = SD_PENALTY_MAX_N + 1;
    cr_assert_eq(sd_sampling_check(&bad, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "repeat_last_n"));
    bad = sd_sampling_default_params();
    bad.min_p = 1.5f;
    cr_assert_eq(sd_sampling_check(&bad, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "min_p"));
}

Test(sampling_opts, min_p_keeps_the_logits_near_the_top) {
    enum { N = 300 };
    float l[N], p[N];
    int32_t scratch[N];
    for (int v = 0; v < N; v++)
        l[v] = (float)(3.0 * sin(v * 0.7) + 0.01 * v);
    const float min_ps[] = {0.05f, 0.3f, 0.9f, 1.0f};
    const int32_t top_ks[] = {0, 10};
    for (int mi = 0; mi < 4; mi++)
        for (int ki = 0; ki < 2; ki++) {
            const sd_sampling_params sp = {
                .temp = 0.8f, .top_k = top_ks[ki], .top_p = 1.0f, .min_p = min_ps[mi]};
            cr_assert_eq(sd_warp(&sp, l, N, p, scratch, NULL), SD_OK);
            float mx = l[0];
            for (int v = 1; v < N; v++)
                mx = l[v] > mx ? l[v] : mx;
            const float thr = mx + logf(min_ps[mi]);
            /* kept by min-p, then the top_k best of those (by logit, ties by id) */
            int keep[N] = {0}, n_keep = 0;
            for (int v = 0; v < N; v++)
                keep[v] = l[v] >= thr;
            if (top_ks[ki] > 0) {
                for (int v = 0; v < N; v++) {
                    if (!keep[v]) continue;
                    int above = 0;
                    for (int u = 0; u < N; u++)
                        above += l[u] > l[v] || (l[u] == l[v] && u < v);
                    keep[v] = above < top_ks[ki];
                }
            }
            double z = 0.0;
            for (int v = 0; v < N; v++)
                if (keep[v]) {
                    z += exp(((double)l[v] - mx) / 0.8);
                    n_keep++;
                }
            for (int v = 0; v < N; v++) {
                const double want = keep[v] ? exp(((double)l[v] - mx) / 0.8) / z : 0.0;
                cr_assert_float_eq(p[v], want, 1e-6, "min_p %g top_k %d id %d", (double)min_ps[mi],
                                   top_ks[ki], v);
            }
            cr_assert_geq(n_keep, 1);
        }
}

static void gen(sd_engine *e, sd_gen_params *gp, const int32_t *prompt, int32_t *out,
                sd_gen_stats *st) {
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, gp, prompt, 4, NULL, NULL, out, gp->n_predict, st, &err),
                 SD_OK, "%s", err.msg);
}

Test(sampling_opts, greedy_with_penalties_equals_target_alone) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = g_d;
    ep.n_threads = 1;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    const int32_t prompts[2][4] = {{1, 5, 9, 13}, {1, 40, 41, 42}};
    for (int pi = 0; pi < 2; pi++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 48;
        gp.samp.temp = 0.0f;
        gp.samp.repeat_penalty = 1.5f;
        gp.samp.presence_penalty = 0.4f;
        gp.samp.freq_penalty = 0.2f;
        gp.samp.repeat_last_n = 16;
        gp.draft_type = SD_DRAFT_NONE;
        int32_t ref[48], got[48], plain[48];
        sd_gen_stats st, st2;
        gen(e, &gp, prompts[pi], ref, &st);
        for (int ti = 0; ti < 2; ti++)
            for (int32_t k = 1; k <= 5; k += 2) {
                gp.draft_type = ti ? SD_DRAFT_NGRAM_LLM : SD_DRAFT_LLM;
                gp.n_draft = k;
                gen(e, &gp, prompts[pi], got, &st2);
                cr_assert_eq(st2.n_generated, st.n_generated);
                cr_assert(!memcmp(got, ref, (size_t)st.n_generated * sizeof *got),
                          "prompt %d K %d: speculative output with penalties differs", pi, k);
            }
        sd_gen_params none = gp;
        none.samp.repeat_penalty = 1.0f;
        none.samp.presence_penalty = none.samp.freq_penalty = 0.0f;
        none.draft_type = SD_DRAFT_NONE;
        gen(e, &none, prompts[pi], plain, &st2);
        cr_assert(memcmp(plain, ref, (size_t)st.n_generated * sizeof *ref),
                  "prompt %d: the penalties changed nothing (so this test could not fail)", pi);
    }
    sd_engine_free(e);
}

/* Greedy confidence in double: 1 / sum exp(l - max). */
static double confidence(const float *l, int32_t n) {
    float mx = l[0];
    for (int32_t i = 1; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    double s = 0.0;
    for (int32_t i = 0; i < n; i++)
        s += exp((double)l[i] - mx);
    return 1.0 / s;
}

Test(sampling_opts, draft_cutoff_stops_at_the_first_unsure_position) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(g_d, &m, &err), SD_OK, "%s", err.msg);
    const sd_sampling_params samp = {.temp = 0.0f, .top_k = 0, .top_p = 1.0f};
    sd_session_params sp = sd_session_default_params();
    sd_proposer *p = NULL;
    cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 1, 0, &p, &err), SD_OK);
    sd_session *ref = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &ref, &err), SD_OK);
    /* The confidences of the first 8 greedy tokens after ctx, computed here. */
    const int32_t ctx[4] = {1, 30, 31, 32};
    double conf[8];
    int32_t toks[8];
    float logits[96];
    cr_assert_eq(sd_session_eval(ref, ctx, 4, logits, 1, &err), SD_OK);
    for (int i = 0; i < 8; i++) {
        conf[i] = confidence(logits, 96);
        toks[i] = sd_argmax(logits, 96);
        cr_assert_eq(sd_session_eval(ref, &toks[i], 1, logits, 1, &err), SD_OK);
    }
    int cut_somewhere = 0;
    const float p_mins[] = {0.0f, 0.05f, 0.1f, 0.2f, 0.4f, 0.8f, 1.0f};
    for (int pi = 0; pi < 7; pi++)
        for (int32_t n_min = 0; n_min <= 2; n_min++) {
            sd_proposer_set_cutoff(p, p_mins[pi], n_min);
            sd_proposal prop;
            sd_proposer_commit(p, ctx, 4);
            cr_assert_eq(sd_proposer_propose(p, ctx, 4, 8, &prop, &err), SD_OK);
            int32_t want = 8;
            for (int32_t i = n_min; i < 8 && p_mins[pi] > 0.0f; i++)
                if (conf[i] < (double)p_mins[pi]) {
                    want = i;
                    break;
                }
            cr_assert_eq(prop.n, want, "p_min %g n_min %d: drafted %d, the cut-off is at %d",
                         (double)p_mins[pi], n_min, prop.n, want);
            for (int32_t i = 0; i < prop.n; i++)
                cr_assert_eq(prop.tokens[i], toks[i]);
            cut_somewhere |= want < 8;
        }
    cr_assert(cut_somewhere, "no p_min cut anything: the test could not see a no-op cut-off");
    sd_session_free(ref);
    sd_proposer_free(p);
    sd_model_free(m);
}

Test(sampling_opts, statistics_count_what_was_drafted) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = g_d;
    ep.n_threads = 1;
    ep.n_ctx_draft = 1; /* -cd 1: the draft never has room */
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = 20;
    gp.samp.temp = 0.0f;
    gp.draft_type = SD_DRAFT_LLM;
    gp.n_draft = 4;
    const int32_t prompt[4] = {1, 5, 9, 13};
    int32_t out[20];
    sd_gen_stats st;
    gen(e, &gp, prompt, out, &st);
    cr_assert_eq(st.n_drafted, 0);
    cr_assert_eq(st.k_hist[0], st.n_target_passes, "K drafted is 0 in every pass");
    for (int k = 1; k <= SD_MAX_DRAFT; k++)
        cr_assert_eq(st.k_hist[k], 0);
    cr_assert_eq(st.drafted_at[0], 0);
    cr_assert_float_eq(sd_stats_tokens_per_pass(&st), 1.0, 1e-12);
    sd_engine_free(e);
    /* A stop at the first pass: 0 tokens generated, one pass, tokens per pass 1 (the stop
     * token). EOS is the target's greedy first token here: make it the stop id. */
    ep.n_ctx_draft = 0;
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    gp.draft_type = SD_DRAFT_NONE;
    gen(e, &gp, prompt, out, &st);
    gp.stop_ids[0] = out[0];
    gp.n_stop_ids = 1;
    gen(e, &gp, prompt, out, &st);
    cr_assert_eq(st.n_generated, 0);
    cr_assert_eq(st.stop, SD_STOP_EOS);
    cr_assert_eq(st.n_stop_tokens, 1);
    cr_assert_float_eq(sd_stats_tokens_per_pass(&st), 1.0, 1e-12);
    sd_engine_free(e);
}
