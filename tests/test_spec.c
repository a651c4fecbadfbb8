/*
 * End-to-end speculative decoding: greedy speculative output equals target-alone
 * output token for token; a self-draft is accepted 100%; the first sampled token
 * follows the target's warped distribution with and without a draft; counts add up.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "engine_util.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(spec, .init = setup, .fini = teardown, .timeout = 600);

/* A target (and draft) on the engine's one path (sd_engine_generate: the batcher's step
 * over one sequence). */
typedef struct pair {
    sd_engine *e;
    sd_logit_bias ban_eos; /* the vocabulary's EOS banned (target and draft rows alike) */
} pair;

static void pair_open(pair *p, const char *target, const char *draft, int32_t n_threads) {
    p->e = eu_engine(target, draft, 0, n_threads, 0);
    p->ban_eos.id = sd_vocab_eos(sd_engine_vocab(p->e));
    p->ban_eos.bias = SD_LOGIT_BIAS_MIN;
}

static void pair_close(pair *p) {
    sd_engine_free(p->e);
    p->e = NULL;
}

/* gp's generation through the engine, drafting with the LLM draft when use_draft (K
 * gp->n_draft, fixed) or target alone. eos >= 0: that id stops generation (a stop id, not
 * emitted), the vocabulary's EOS (2 in the random models) too; eos -1: the vocabulary's
 * EOS is banned (a logit bias, in the target's and the draft's rows alike: a self-draft
 * then proposes what the target takes), so generation runs to the budget or the context. */
static void gen_run(pair *p, int use_draft, const int32_t *prompt, int32_t n_prompt, int32_t eos,
                    sd_gen_params gp, int32_t *out, int32_t cap_out, sd_gen_stats *st) {
    gp.draft_type = use_draft ? SD_DRAFT_LLM : SD_DRAFT_NONE;
    gp.k_policy = SD_K_FIXED;
    if (!use_draft) gp.n_draft = 0;
    if (eos < 0) {
        gp.samp.logit_bias = &p->ban_eos;
        gp.samp.n_logit_bias = 1;
    } else {
        gp.stop_ids[0] = eos;
        gp.n_stop_ids = 1;
    }
    sd_error err = {0};
    cr_assert_eq(
        sd_engine_generate(p->e, &gp, prompt, n_prompt, NULL, NULL, out, cap_out, st, &err), SD_OK,
        "%s", err.msg);
}

/* Generate greedily; returns the number of tokens written to out. */
static int32_t run_greedy(pair *p, int use_draft, const int32_t *prompt, int32_t n_prompt,
                          int32_t k, int32_t n_predict, int32_t eos, int32_t *out,
                          sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = k;
    gp.samp.temp = 0.0f;
    gen_run(p, use_draft, prompt, n_prompt, eos, gp, out, n_predict, st);
    return st->n_generated;
}

static void check_stats_consistent(const sd_gen_stats *st, int32_t k) {
    int32_t sum_d = 0, sum_a = 0;
    for (int32_t i = 0; i < SD_MAX_DRAFT; i++) {
        sum_d += st->drafted_at[i];
        sum_a += st->accepted_at[i];
        cr_assert_leq(st->accepted_at[i], st->drafted_at[i]);
        if (i >= k) cr_assert_eq(st->drafted_at[i], 0);
    }
    cr_assert_eq(sum_d, st->n_drafted);
    cr_assert_eq(sum_a, st->n_accepted);
    /* Every pass emits its accepted tokens plus one, except a final pass cut by EOS. */
    cr_assert_leq(st->n_generated, st->n_accepted + st->n_target_passes);
    cr_assert_geq(st->n_generated, st->n_accepted + st->n_target_passes - 1);
}

/* Greedy speculative == greedy target alone for K = 1..8 on several prompts. */
static void greedy_equal(const char *target, const char *draft, int32_t n_predict,
                         const int32_t prompts[][4], int n_prompts, int32_t eos, double *acc_out) {
    pair p;
    pair_open(&p, target, draft, 0);
    int32_t *ref = malloc((size_t)n_predict * sizeof *ref);
    int32_t *got = malloc((size_t)n_predict * sizeof *got);
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < n_prompts; pi++) {
        sd_gen_stats st;
        int32_t n_ref = run_greedy(&p, 0, prompts[pi], 4, 0, n_predict, eos, ref, &st);
        cr_assert_eq(st.n_target_passes, n_ref + (st.stop == SD_STOP_EOS ? 1 : 0));
        for (int32_t k = 1; k <= 8; k++) {
            int32_t n_got = run_greedy(&p, 1, prompts[pi], 4, k, n_predict, eos, got, &st);
            cr_assert_eq(n_got, n_ref, "prompt %d, K=%d: %d tokens vs %d target-alone", pi, k,
                         n_got, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(got[i], ref[i], "prompt %d, K=%d: token %d is %d, target-alone %d", pi,
                             k, i, got[i], ref[i]);
            check_stats_consistent(&st, k);
            drafted += st.n_drafted;
            accepted += st.n_accepted;
        }
    }
    if (acc_out) *acc_out = drafted ? (double)accepted / drafted : 0.0;
    free(ref);
    free(got);
    pair_close(&p);
}

static const int32_t k_prompts[3][4] = {{1, 5, 9, 13}, {1, 40, 41, 42}, {1, 90, 3, 77}};

Test(spec, greedy_equals_target_alone_random_pairs) {
    char t[2048], d1[2048], d2[2048];
    tu_llama_spec s = tu_llama_default_spec();
    cr_assert_eq(tu_make_llama(tu_path(t, sizeof t, g_dir, "t.gguf"), &s), 0);
    /* A close draft (Q8_0, small noise) and one that disagrees often (Q4_0, big noise). */
    s.wtype = SD_TYPE_Q8_0;
    s.noise = 0.3f;
    cr_assert_eq(tu_make_llama(tu_path(d1, sizeof d1, g_dir, "d1.gguf"), &s), 0);
    s.wtype = SD_TYPE_Q4_0;
    s.noise = 1.5f;
    cr_assert_eq(tu_make_llama(tu_path(d2, sizeof d2, g_dir, "d2.gguf"), &s), 0);
    double acc1, acc2;
    greedy_equal(t, d1, 48, k_prompts, 3, -1, &acc1);
    greedy_equal(t, d2, 48, k_prompts, 3, -1, &acc2);
    /* The noisy draft must actually be rejected often, or the test proves little. */
    cr_assert_lt(acc2, 0.9, "noisy draft acceptance %.3f: expected frequent rejections", acc2);
    cr_assert_gt(acc1, acc2);
}

Test(spec, greedy_equals_target_alone_quantized_target) {
    /* Target itself quantized (Q4_0 matmuls with Q8_0 activations), draft F16. */
    char t[2048], d[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.wtype = SD_TYPE_Q4_0;
    cr_assert_eq(tu_make_llama(tu_path(t, sizeof t, g_dir, "t.gguf"), &s), 0);
    s.wtype = SD_TYPE_F16;
    s.noise = 0.5f;
    cr_assert_eq(tu_make_llama(tu_path(d, sizeof d, g_dir, "d.gguf"), &s), 0);
    greedy_equal(t, d, 40, k_prompts, 2, -1, NULL);
}

Test(spec, self_draft_accepts_everything) {
    char t[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.wtype = SD_TYPE_Q8_0;
    cr_assert_eq(tu_make_llama(tu_path(t, sizeof t, g_dir, "t.gguf"), &s), 0);
    for (int sampled = 0; sampled <= 1; sampled++) {
        sd_sampling_params samp = sd_sampling_default_params();
        samp.temp = sampled ? 1.0f : 0.0f;
        pair p;
        pair_open(&p, t, t, 0);
        for (int32_t k = 1; k <= 8; k++) {
            sd_gen_params gp = sd_gen_default_params();
            gp.n_predict = 41;
            gp.n_draft = k;
            gp.samp = samp;
            gp.seed = 100 + (uint64_t)k;
            int32_t out[41];
            sd_gen_stats st;
            gen_run(&p, 1, k_prompts[0], 4, -1, gp, out, 41, &st);
            cr_assert_gt(st.n_drafted, 0);
            cr_assert_eq(st.n_accepted, st.n_drafted, "K=%d temp=%g: accepted %d of %d", k,
                         samp.temp, st.n_accepted, st.n_drafted);
            /* 41 tokens at K+1 per pass, the last pass capped to the budget. */
            cr_assert_eq(st.n_target_passes, (41 + k) / (k + 1));
        }
        pair_close(&p);
    }
}

/* Upper critical value of chi-square with df degrees of freedom at false-alarm rate
 * 1e-4 (z = 3.719), by the Wilson-Hilferty approximation (error < 1% for df >= 10). */
static double chi2_crit_1e4(int df) {
    const double z = 3.719016;
    double a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* The first token emitted with a draft (K = 4, temp 1, top-k 20) follows the target's
 * warped distribution p, computed independently from a plain decode step.
 * Chi-square goodness of fit, cells with expected count < 5 pooled; false alarm 1e-4. */
Test(spec, first_token_distribution_with_and_without_draft) {
    char t[2048], d[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 48;
    cr_assert_eq(tu_make_llama(tu_path(t, sizeof t, g_dir, "t.gguf"), &s), 0);
    s.noise = 0.8f;
    cr_assert_eq(tu_make_llama(tu_path(d, sizeof d, g_dir, "d.gguf"), &s), 0);
    sd_sampling_params samp = {.temp = 1.0f, .top_k = 20, .top_p = 1.0f};
    const int32_t prompt[4] = {1, 7, 8, 9};
    const int32_t n_vocab = s.n_vocab;

    /* Reference p: warp of the target logits after the prompt, EOS masked (the runs below
     * ban it), on a session made as the engine's. */
    sd_error err = {0};
    pair ref;
    pair_open(&ref, t, NULL, 1);
    const sd_model *tm = sd_engine_target(ref.e);
    sd_session_params sp = sd_engine_session_params(ref.e, 0);
    sp.share_threads = NULL;
    sd_session *ss = NULL;
    cr_assert_eq(sd_session_init(tm, &sp, &ss, &err), 0, "%s", err.msg);
    float logits[64], p[64];
    int32_t scratch[64];
    cr_assert_eq(sd_session_eval(ss, prompt, 4, logits, 1, &err), 0, "%s", err.msg);
    logits[sd_vocab_eos(sd_model_vocab(tm))] = -INFINITY;
    cr_assert_eq(sd_warp(&samp, logits, n_vocab, p, scratch, &err), 0, "%s", err.msg);
    sd_session_free(ss);
    pair_close(&ref);

    const int trials = 20000;
    for (int use_draft = 0; use_draft <= 1; use_draft++) {
        pair pr;
        pair_open(&pr, t, use_draft ? d : NULL, 1);
        int64_t counts[64] = {0};
        int64_t drafted = 0, accepted = 0;
        for (int i = 0; i < trials; i++) {
            sd_gen_params gp = sd_gen_default_params();
            gp.n_predict = 5;
            gp.n_draft = 4;
            gp.samp = samp;
            gp.seed = 1000003ull * (uint64_t)i + (uint64_t)use_draft;
            int32_t out[5];
            sd_gen_stats st;
            gen_run(&pr, use_draft, prompt, 4, -1, gp, out, 5, &st);
            cr_assert_geq(out[0], 0);
            cr_assert_lt(out[0], n_vocab);
            counts[out[0]]++;
            drafted += st.n_drafted;
            accepted += st.n_accepted;
        }
        pair_close(&pr);
        /* Tokens outside the warped support must never appear. */
        double stat = 0.0, pool_e = 0.0, pool_o = 0.0;
        int cells = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            if (p[v] == 0.0f) {
                cr_assert_eq(counts[v], 0, "token %d has p = 0 but was emitted", v);
                continue;
            }
            double e = p[v] * trials;
            if (e < 5.0) {
                pool_e += e;
                pool_o += (double)counts[v];
                continue;
            }
            stat += (counts[v] - e) * (counts[v] - e) / e;
            cells++;
        }
        if (pool_e > 0.0) {
            stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
            cells++;
        }
        double crit = chi2_crit_1e4(cells - 1);
        cr_log_info("draft=%d: chi2 = %.2f, df = %d, critical(1e-4) = %.2f, acceptance %.3f",
                    use_draft, stat, cells - 1, crit, drafted ? (double)accepted / drafted : 0.0);
        cr_assert_lt(stat, crit, "draft=%d: chi-square %.2f >= %.2f (df %d)", use_draft, stat, crit,
                     cells - 1);
        if (use_draft) cr_assert_gt(drafted, 0);
    }
}

/* The real pair: stories260K (F32) and its own Q4_0 copy from `specdec quantize`. */
Test(spec, greedy_equals_target_alone_stories260k) {
    tu_need_path(tu_shared("models/stories260K.bin"), "llama2.c's stories260K, in ../shared/data");
    tu_need_path(tu_shared("models/tok512.bin"), "llama2.c's tokenizer, in ../shared/data");
    cr_assert_eq(tu_make_stories_pair(g_dir), 1);
    char t[2048], d[2048];
    tu_path(t, sizeof t, g_dir, "stories260K-f32.gguf");
    tu_path(d, sizeof d, g_dir, "stories260K-q4_0.gguf");
    /* Prompts: BOS + the first tokens of a few story openings. */
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(t, &m, &err), 0, "%s", err.msg);
    const char *texts[3] = {"Once upon a time", "The little dog", "Lily wanted to"};
    int32_t prompts[3][4];
    for (int i = 0; i < 3; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        cr_assert_eq(sd_vocab_tokenize(sd_model_vocab(m), texts[i], strlen(texts[i]),
                                       SD_VOCAB_ADD_SPECIAL, &ids, &n, &err),
                     0, "%s", err.msg);
        cr_assert_geq(n, 4);
        memcpy(prompts[i], ids, sizeof prompts[i]); /* BOS + the first 3 tokens */
        free(ids);
    }
    int32_t eos = sd_vocab_eos(sd_model_vocab(m));
    sd_model_free(m);
    double acc;
    greedy_equal(t, d, 64, (const int32_t(*)[4])prompts, 3, eos, &acc);
    cr_log_info("stories260K f32 target, q4_0 draft: greedy acceptance %.3f", acc);
    cr_assert_gt(acc, 0.3);
}

/* Draft and target vocabularies may differ in size by up to 128 ids (llama.cpp's rule):
 * the draft proposes only ids both have, q rows span the target's vocabulary, and a
 * context holding an id the draft lacks pauses drafting. Greedy output still equals
 * target-alone output, and sampled runs stay in bounds (checked under ASan in CI). */
Test(spec, vocab_sizes_may_differ) {
    char t[2048], d_small[2048], d_big[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 160;
    cr_assert_eq(tu_make_llama(tu_path(t, sizeof t, g_dir, "t.gguf"), &s), 0);
    s.n_vocab = 100;
    cr_assert_eq(tu_make_llama(tu_path(d_small, sizeof d_small, g_dir, "ds.gguf"), &s), 0);
    s.n_vocab = 220;
    cr_assert_eq(tu_make_llama(tu_path(d_big, sizeof d_big, g_dir, "db.gguf"), &s), 0);
    const char *drafts[2] = {d_small, d_big};
    for (int di = 0; di < 2; di++) {
        greedy_equal(t, drafts[di], 32, k_prompts, 2, -1, NULL);
        sd_sampling_params samp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f};
        pair p;
        pair_open(&p, t, drafts[di], 0);
        for (int run = 0; run < 20; run++) {
            sd_gen_params gp = sd_gen_default_params();
            gp.n_predict = 40;
            gp.n_draft = 4;
            gp.samp = samp;
            gp.seed = (uint64_t)run;
            int32_t out[40];
            sd_gen_stats st;
            gen_run(&p, 1, k_prompts[1], 4, -1, gp, out, 40, &st);
            cr_assert_eq(st.n_generated, 40);
            for (int i = 0; i < 40; i++) {
                cr_assert_geq(out[i], 0);
                cr_assert_lt(out[i], 160);
            }
            check_stats_consistent(&st, 4);
        }
        pair_close(&p);
    }
}

/* Stops: an EOS that falls inside accepted blocks, a draft whose context is shorter than
 * the target's (drafting pauses, the target finishes alone) and the target's context
 * limit. For each K the speculative run must emit exactly the target-alone tokens and
 * stop for the same reason. */
Test(spec, eos_and_context_limits_match_target_alone) {
    char t[2048], d[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.n_ctx = 48;
    cr_assert_eq(tu_make_llama(tu_path(t, sizeof t, g_dir, "t.gguf"), &s), 0);
    s.noise = 0.2f;
    s.n_ctx = 20; /* the draft's own context: shorter than the target's */
    cr_assert_eq(tu_make_llama(tu_path(d, sizeof d, g_dir, "d.gguf"), &s), 0);
    /* The engine: the target's context 48, the draft's its own 20 (capped there). */
    pair p;
    pair_open(&p, t, d, 0);
    cr_assert_eq(sd_engine_n_ctx(p.e), 48);
    cr_assert_eq(sd_engine_n_ctx_draft(p.e), 20);
    const int32_t prompt[4] = {1, 17, 18, 19};
    int32_t ref[64], got[64];
    sd_gen_stats st_ref, st;
    sd_gen_params gp = sd_gen_default_params();
    gp.samp.temp = 0.0f;
    gp.n_predict = 64; /* more than fits: the context limit stops it */
    /* Target alone without EOS: runs to the context limit (48 - 4 + 1 tokens). */
    gen_run(&p, 0, prompt, 4, -1, gp, ref, 64, &st_ref);
    cr_assert_eq(st_ref.stop, SD_STOP_CONTEXT);
    cr_assert_eq(st_ref.n_generated, 48 - 4 + 1);
    /* Stop ids: ids that target-alone emits at different places (then EOS, the
     * vocabulary's, may stop it too), or none (EOS ignored). */
    const int32_t eos_ids[3] = {ref[3], ref[12], -1};
    for (int e = 0; e < 3; e++) {
        const int32_t eos = eos_ids[e];
        gen_run(&p, 0, prompt, 4, eos, gp, ref, 64, &st_ref);
        if (eos >= 0) cr_assert_eq(st_ref.stop, SD_STOP_EOS, "eos %d", eos);
        for (int32_t k = 1; k <= 8; k++) {
            gp.n_draft = k;
            gen_run(&p, 1, prompt, 4, eos, gp, got, 64, &st);
            cr_assert_eq(st.stop, st_ref.stop, "eos %d K=%d: stop %s, target alone %s", eos, k,
                         sd_stop_reason_str(st.stop), sd_stop_reason_str(st_ref.stop));
            cr_assert_eq(st.n_generated, st_ref.n_generated, "eos %d K=%d", eos, k);
            cr_assert_arr_eq(got, ref, (size_t)st.n_generated * sizeof(int32_t), "eos %d K=%d", eos,
                             k);
            for (int32_t i = 0; i < st.n_generated; i++)
                cr_assert_neq(got[i], eos);
            check_stats_consistent(&st, k);
            /* Past the draft's context (20) only the target runs: fewer drafted tokens
             * than passes * K whenever generation went beyond it. */
            if (st.n_generated + 4 > 21) cr_assert_lt(st.n_drafted, st.n_target_passes * k);
        }
        gp.n_draft = 0;
    }
    pair_close(&p);
}
