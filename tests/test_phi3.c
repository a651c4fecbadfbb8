/*
 * The phi3 architecture on small random files written by gguf-py (scripts/make_phi3.py:
 * llama.cpp's own writer and tensor names, Q/K/V fused in attn_qkv and gate/up in ffn_up
 * as llama.cpp's converter writes Phi-3; skipped cleanly without gguf-py):
 *   - the loader takes the fused matrices as row slices, the LongRoPE factors and
 *     rope.scaling.attn_factor, and ignores phi3.attention.sliding_window (as llama.cpp);
 *   - the C forward matches scripts/ref_forward.py (numpy float64, which splits the fused
 *     matrices itself): max_i |c_i - r_i| / max_i |r_i| <= 1e-4 at every position, for F32
 *     and Q8_0 matrices, with a context of 64 (the long factors) over 21 positions (beyond
 *     the window of 4 the file names, and beyond the original context of 16), and with a
 *     context of 16 (the short factors) over 16;
 *   - one token at a time gives the batched logits bit for bit, and so does a paged cache;
 *   - two tensor-parallel ranks give the one-device logits within 1e-5;
 *   - greedy speculative decoding with a phi3 draft equals target-alone decoding for
 *     K = 1..6;
 *   - a file with rope_factors_long but without rope_factors_short is refused naming it;
 *   - where llama.cpp's llama-simple is found ($SD_LLAMACPP_BIN, else build-peer/native/bin:
 *     scripts/peer_llamacpp.sh), its greedy 40 tokens after "t5t9t13" (its context of 256,
 *     so the long factors) are specdec's, for the F32 and the Q8_0 file.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"

#define REF_TOL 1e-4

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(phi3, .init = setup, .fini = teardown, .timeout = 300);

/* Writes the files into g_dir, or skips the test without gguf-py. */
static void make_files(void) {
    char cmd[2048], *err = NULL;
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/make_phi3.py' '%s'", SD_SOURCE_DIR, g_dir);
    const int rc = tu_run(cmd, NULL, &err);
    if (rc == 3) {
        free(err);
        cr_skip_test("needs: gguf-py for the python3 on PATH (pip install gguf), which writes "
                     "the phi3 files");
    }
    cr_assert_eq(rc, 0, "make_phi3.py: exit %d: %s", rc, err);
    free(err);
}

static void path_of(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static sd_model *load_path(const char *p) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_OK, "%s: %s", p, err.msg);
    return m;
}

static sd_model *load_ok(const char *name) {
    char p[1200];
    path_of(name, p, sizeof p);
    return load_path(p);
}

/* "t5t9t13" (with BOS) and 17 tokens after it (llama.cpp's greedy continuation begins so) */
static const int32_t k_tokens[] = {1,   264, 268, 272, 101, 217, 112, 18,  192, 291, 62,
                                   248, 284, 247, 178, 225, 61,  167, 310, 20,  112};
/* The positions run: all of k_tokens, or as many as a short context holds. */
static int32_t g_n_tokens = (int32_t)(sizeof k_tokens / sizeof k_tokens[0]);
#define N_TOKENS g_n_tokens

/* Logits [N_TOKENS, n_vocab]: prefill 5, then the rest as one batch (step 0), or one
 * token at a time (step 1); n_seq > 0: a paged cache. */
static float *forward(const sd_model *m, int32_t n_split, int step, int32_t n_seq, int32_t n_ctx) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = 16;
    sp.n_threads = 1;
    sp.n_split = n_split;
    sp.n_seq = n_seq;
    sp.kv_block = n_seq ? 4 : 0;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    float *logits = malloc((size_t)N_TOKENS * nv * sizeof(float));
    cr_assert(logits);
    cr_assert_eq(sd_session_eval(s, k_tokens, 5, logits, 5, &err), SD_OK, "%s", err.msg);
    if (step) {
        for (int32_t i = 5; i < N_TOKENS; i++)
            cr_assert_eq(sd_session_eval(s, k_tokens + i, 1, logits + (size_t)i * nv, 1, &err),
                         SD_OK, "%s", err.msg);
    } else {
        cr_assert_eq(sd_session_eval(s, k_tokens + 5, N_TOKENS - 5, logits + (size_t)5 * nv,
                                     N_TOKENS - 5, &err),
                     SD_OK, "%s", err.msg);
    }
    sd_session_free(s);
    return logits;
}

/* scripts/ref_forward.py over the same tokens. */
static double *reference(const char *name, int32_t nv, int32_t n_ctx) {
    char p[1200], cmd[4096];
    path_of(name, p, sizeof p);
    int off = snprintf(cmd, sizeof cmd, "python3 '%s/scripts/ref_forward.py' --ctx %d '%s'",
                       SD_SOURCE_DIR, n_ctx, p);
    for (int32_t i = 0; i < N_TOKENS; i++)
        off += snprintf(cmd + off, sizeof cmd - (size_t)off, " %d", k_tokens[i]);
    double *ref = malloc((size_t)N_TOKENS * nv * sizeof(double));
    cr_assert(ref);
    FILE *f = popen(cmd, "r");
    cr_assert(f, "popen: %s", cmd);
    for (int64_t i = 0; i < (int64_t)N_TOKENS * nv; i++)
        cr_assert_eq(fscanf(f, "%lf", &ref[i]), 1, "ref_forward.py output short at %lld: %s",
                     (long long)i, cmd);
    const int st = pclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ref_forward.py failed: %s", cmd);
    return ref;
}

/* The worst position's max_i |c_i - r_i| / max_i |r_i|. */
static double rel_err(const float *c, const double *r, int32_t nv) {
    double worst = 0.0;
    for (int32_t p = 0; p < N_TOKENS; p++) {
        double dmax = 0.0, rmax = 0.0;
        for (int32_t i = 0; i < nv; i++) {
            const double d = fabs((double)c[(size_t)p * nv + i] - r[(size_t)p * nv + i]);
            const double a = fabs(r[(size_t)p * nv + i]);
            if (d > dmax || d != d) dmax = d != d ? INFINITY : d;
            if (a > rmax) rmax = a;
        }
        const double e = dmax / (rmax > 0 ? rmax : 1.0);
        if (e > worst) worst = e;
    }
    return worst;
}

Test(phi3, loads_fused_matrices_and_longrope) {
    make_files();
    sd_model *m = load_ok("phi3-target.gguf");
    const sd_hparams *hp = sd_model_hparams(m);
    cr_expect_str_eq(hp->arch, "phi3");
    cr_expect_eq(hp->head_dim, 16);
    cr_expect_eq(hp->rope_neox, 1);
    cr_expect_eq(hp->qk_norm, 0);
    cr_expect_eq(hp->ffn_gelu, 0);
    cr_expect_eq(hp->n_vocab, 320);
    cr_expect_eq(hp->has_rope_long_short, 1);
    cr_expect_eq(hp->n_ctx_orig, 16);
    cr_expect_float_eq(hp->rope_attn_factor, 1.19f, 1e-6f);
    cr_expect_eq(hp->sliding_window, 4);
    cr_expect_eq(hp->n_swa_layers, 0, "phi3's sliding window must be ignored: %d local layers",
                 hp->n_swa_layers);
    sd_model_free(m);
}

static void check_reference(const char *name, int32_t n_ctx) {
    make_files();
    sd_model *m = load_ok(name);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    if (n_ctx < N_TOKENS) N_TOKENS = n_ctx;
    float *c = forward(m, 0, 0, 0, n_ctx);
    double *r = reference(name, nv, n_ctx);
    const double e = rel_err(c, r, nv);
    cr_log_info("%s, n_ctx %d: relative error (max norm) %.3g", name, n_ctx, e);
    cr_expect(e <= REF_TOL, "%s: logits differ from ref_forward.py: %.3g > %g", name, e, REF_TOL);
    free(c);
    free(r);
    sd_model_free(m);
}

Test(phi3, matches_reference_f32_short_factors) {
    check_reference("phi3-target.gguf", 16); /* = the original context: short factors */
}

Test(phi3, matches_reference_f32_long_factors) {
    check_reference("phi3-target.gguf", 64);
}

Test(phi3, matches_reference_q8_0_long_factors) {
    check_reference("phi3-target-q8_0.gguf", 64);
}

Test(phi3, single_steps_and_paged_cache_give_the_batched_bits) {
    make_files();
    sd_model *m = load_ok("phi3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    const size_t bytes = (size_t)N_TOKENS * nv * sizeof(float);
    float *batched = forward(m, 0, 0, 0, 64), *steps = forward(m, 0, 1, 0, 64);
    float *paged = forward(m, 0, 0, 2, 64);
    cr_expect(memcmp(batched, steps, bytes) == 0, "one token at a time differs from the batch");
    cr_expect(memcmp(batched, paged, bytes) == 0, "a paged cache differs from a contiguous one");
    free(batched);
    free(steps);
    free(paged);
    sd_model_free(m);
}

Test(phi3, two_tensor_parallel_ranks_match_one_device) {
    make_files();
    sd_model *m = load_ok("phi3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *one = forward(m, 0, 0, 0, 64), *two = forward(m, 2, 0, 0, 64);
    double dmax = 0.0, rmax = 0.0;
    for (int64_t i = 0; i < (int64_t)N_TOKENS * nv; i++) {
        const double d = fabs((double)one[i] - two[i]);
        if (d > dmax || d != d) dmax = d != d ? INFINITY : d;
        if (fabs(one[i]) > rmax) rmax = fabs(one[i]);
    }
    cr_expect(dmax <= 1e-5 * rmax, "n_split 2 vs 1: max |diff| %.3g, max |logit| %.3g", dmax, rmax);
    free(one);
    free(two);
    sd_model_free(m);
}

static int32_t greedy(sd_scorer *sc, sd_proposer *prop, const int32_t *prompt, int32_t n_prompt,
                      int32_t k, int32_t n_predict, int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = k;
    gp.samp.temp = 0.0f;
    sd_error err = {0};
    cr_assert_eq(
        sd_generate(sc, prop, prompt, n_prompt, -1, &gp, NULL, NULL, out, n_predict, st, &err),
        SD_OK, "%s", err.msg);
    return st->n_generated;
}

Test(phi3, greedy_speculative_equals_target_alone) {
    make_files();
    sd_model *tm = load_ok("phi3-target.gguf"), *dm = load_ok("phi3-draft.gguf");
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = 1;
    sp.n_ctx = 64; /* > the window of 4: the local layers see 4 keys */
    sd_sampling_params samp = sd_sampling_default_params();
    samp.temp = 0.0f;
    sd_scorer *sc = NULL;
    sd_proposer *prop = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_scorer_init(tm, &sp, &sc, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(
        sd_proposer_llm_init(dm, &sp, &samp, 7, sd_model_hparams(tm)->n_vocab, &prop, &err), SD_OK,
        "%s", err.msg);
    static const int32_t prompts[3][4] = {{1, 264, 268, 272}, {1, 300, 41, 42}, {1, 60, 3, 27}};
    enum { N = 40 };
    int32_t ref[N], got[N];
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 3; pi++) {
        sd_gen_stats st;
        const int32_t n_ref = greedy(sc, NULL, prompts[pi], 4, 0, N, ref, &st);
        for (int32_t k = 1; k <= 6; k++) {
            const int32_t n_got = greedy(sc, prop, prompts[pi], 4, k, N, got, &st);
            cr_assert_eq(n_got, n_ref, "prompt %d, K=%d: %d tokens vs %d", pi, k, n_got, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(got[i], ref[i], "prompt %d, K=%d: token %d is %d, target alone %d", pi,
                             k, i, got[i], ref[i]);
            drafted += st.n_drafted;
            accepted += st.n_accepted;
        }
    }
    cr_log_info("phi3 draft: %lld of %lld drafted tokens accepted", (long long)accepted,
                (long long)drafted);
    cr_expect_gt(drafted, 0, "nothing was drafted");
    cr_expect_gt(accepted, 0, "the draft was never accepted: the check above compared nothing");
    sd_proposer_free(prop);
    sd_scorer_free(sc);
    sd_model_free(dm);
    sd_model_free(tm);
}

Test(phi3, long_factors_without_short_ones_are_refused_by_name) {
    make_files();
    char p[1200];
    path_of("phi3-no-short.gguf", p, sizeof p);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_ERR_FORMAT, "%s", err.msg);
    cr_expect(strstr(err.msg, "rope_factors_short.weight"), "%s", err.msg);
    cr_expect_null(m);
}

static void vs_llamacpp(const char *name) {
    make_files();
    char bin[1200], p[1200], cmd[4096];
    const char *env = getenv("SD_LLAMACPP_BIN");
    snprintf(bin, sizeof bin, "%s/llama-simple",
             env && *env ? env : SD_SOURCE_DIR "/build-peer/native/bin");
    tu_need_path(bin, "llama.cpp's llama-simple ($SD_LLAMACPP_BIN or scripts/peer_llamacpp.sh)");
    path_of(name, p, sizeof p);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -n 40 t5t9t13", bin, p);
    char *out = NULL;
    cr_assert_eq(tu_run(cmd, &out, NULL), 0, "%s", cmd);
    /* specdec: greedy from the same prompt, llama.cpp's context (256) and KV type (f16) */
    sd_model *m = load_ok(name);
    const sd_vocab *v = sd_model_vocab(m);
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 256;
    sp.kv_type = SD_TYPE_F16;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *logits = malloc((size_t)nv * sizeof(float));
    cr_assert(logits);
    int32_t ids[44] = {1, 264, 268, 272}; /* BOS "t5" "t9" "t13" (llama-tokenize's) */
    cr_assert_eq(sd_session_eval(s, ids, 4, logits, 1, &err), SD_OK, "%s", err.msg);
    for (int32_t t = 4; t < 44; t++) {
        int32_t best = 0;
        for (int32_t i = 1; i < nv; i++)
            if (logits[i] > logits[best]) best = i;
        ids[t] = best;
        cr_assert_eq(sd_session_eval(s, &best, 1, logits, 1, &err), SD_OK, "%s", err.msg);
    }
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(sd_vocab_detokenize(v, ids + 4, 40, 0, &text, &len, &err), SD_OK, "%s", err.msg);
    /* llama-simple prints the prompt's pieces (BOS as its text), the 40 tokens, a newline */
    char want[512];
    const int n = snprintf(want, sizeof want, "<s>t5t9t13%.*s\n", (int)len, text);
    cr_expect(strlen(out) == (size_t)n && memcmp(out, want, (size_t)n) == 0,
              "%s: llama.cpp printed [%s], specdec's greedy tokens spell [%s]", name, out, want);
    free(text);
    free(out);
    free(logits);
    sd_session_free(s);
    sd_model_free(m);
}

Test(phi3, greedy_tokens_equal_llamacpp_f32) {
    vs_llamacpp("phi3-target.gguf");
}

Test(phi3, greedy_tokens_equal_llamacpp_q8_0) {
    vs_llamacpp("phi3-target-q8_0.gguf");
}
