/*
 * The qwen3 architecture on small random files written by gguf-py (scripts/make_qwen3.py:
 * llama.cpp's own writer and tensor names; skipped cleanly when the python3 on PATH has
 * no gguf-py):
 *   - the loader reads head_dim from qwen3.attention.key_length (32, where
 *     n_embd / n_head is 16), NEOX RoPE, no biases, per-head Q/K norms;
 *   - the C forward (prefill, then the rest as one batch) matches scripts/ref_forward.py,
 *     an independent numpy float64 forward that parses the GGUF itself and norms each Q
 *     and K head before RoPE: max_i |c_i - r_i| / max_i |r_i| <= 1e-4 at every position,
 *     for F32 and Q8_0 matrices (as tests/test_model.c for llama and qwen2);
 *   - two tensor-parallel ranks (CPU, n_split 2) give the one-device logits within 1e-5
 *     (they differ only by the reassociation of the row-parallel sums);
 *   - greedy speculative decoding with a qwen3 draft equals greedy target-alone decoding
 *     token for token for K = 1..6, and the draft is accepted at least sometimes;
 *   - a file without one layer's attn_k_norm.weight is refused naming that tensor.
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

TestSuite(qwen3, .init = setup, .fini = teardown, .timeout = 300);

/* Writes the files into g_dir, or skips the test without gguf-py. */
static void make_files(void) {
    char cmd[2048], *err = NULL;
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/make_qwen3.py' '%s'", SD_SOURCE_DIR, g_dir);
    const int rc = tu_run(cmd, NULL, &err);
    if (rc == 3) {
        free(err);
        cr_skip_test("needs: gguf-py for the python3 on PATH (pip install gguf), which writes "
                     "the qwen3 files");
    }
    cr_assert_eq(rc, 0, "make_qwen3.py: exit %d: %s", rc, err);
    free(err);
}

static void path_of(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static sd_model *load_ok(const char *name) {
    char p[1200];
    path_of(name, p, sizeof p);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_OK, "%s: %s", name, err.msg);
    return m;
}

static const int32_t k_tokens[] = {1, 7, 13, 22, 40, 5, 63, 0, 2, 33, 17, 8, 50, 3};
#define N_TOKENS ((int32_t)(sizeof k_tokens / sizeof k_tokens[0]))

/* Logits [N_TOKENS, n_vocab]: prefill 5, then the rest as one batch. */
static float *forward(const sd_model *m, int32_t n_split) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 16;
    sp.n_threads = 1;
    sp.n_split = n_split;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    float *logits = malloc((size_t)N_TOKENS * nv * sizeof(float));
    cr_assert(logits);
    cr_assert_eq(sd_session_eval(s, k_tokens, 5, logits, 5, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(
        sd_session_eval(s, k_tokens + 5, N_TOKENS - 5, logits + (size_t)5 * nv, N_TOKENS - 5, &err),
        SD_OK, "%s", err.msg);
    sd_session_free(s);
    return logits;
}

/* scripts/ref_forward.py over the same tokens (the python3 on PATH: it has numpy, as
 * gguf-py needs it). */
static double *reference(const char *name, int32_t nv) {
    char p[1200], cmd[4096];
    path_of(name, p, sizeof p);
    int off =
        snprintf(cmd, sizeof cmd, "python3 '%s/scripts/ref_forward.py' '%s'", SD_SOURCE_DIR, p);
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

Test(qwen3, loads_the_head_size_from_key_length) {
    make_files();
    sd_model *m = load_ok("qwen3-target.gguf");
    const sd_hparams *hp = sd_model_hparams(m);
    cr_expect_str_eq(hp->arch, "qwen3");
    cr_expect_eq(hp->n_embd, 64);
    cr_expect_eq(hp->n_head, 4);
    cr_expect_eq(hp->n_head_kv, 2);
    cr_expect_eq(hp->head_dim, 32, "head_dim %d: not qwen3.attention.key_length", hp->head_dim);
    cr_expect_eq(hp->n_rot, 32);
    cr_expect_eq(hp->qk_norm, 1);
    cr_expect_eq(hp->qkv_bias, 0);
    cr_expect_eq(hp->rope_neox, 1);
    cr_expect_eq(hp->n_vocab, 64);
    sd_model_free(m);
}

static void check_reference(const char *name) {
    make_files();
    sd_model *m = load_ok(name);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *c = forward(m, 0);
    double *r = reference(name, nv);
    const double e = rel_err(c, r, nv);
    cr_log_info("%s: relative error (max norm) %.3g", name, e);
    cr_expect(e <= REF_TOL, "%s: logits differ from ref_forward.py: %.3g > %g", name, e, REF_TOL);
    free(c);
    free(r);
    sd_model_free(m);
}

Test(qwen3, matches_reference_f32) {
    check_reference("qwen3-target.gguf");
}

Test(qwen3, matches_reference_q8_0) {
    check_reference("qwen3-target-q8_0.gguf");
}

Test(qwen3, two_tensor_parallel_ranks_match_one_device) {
    make_files();
    sd_model *m = load_ok("qwen3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *one = forward(m, 0), *two = forward(m, 2);
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

static int32_t greedy(sd_scorer *sc, sd_proposer *prop, const int32_t *prompt, int32_t k,
                      int32_t n_predict, int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = k;
    gp.samp.temp = 0.0f;
    sd_error err = {0};
    cr_assert_eq(sd_generate(sc, prop, prompt, 4, -1, &gp, NULL, NULL, out, n_predict, st, &err),
                 SD_OK, "%s", err.msg);
    return st->n_generated;
}

Test(qwen3, greedy_speculative_equals_target_alone) {
    make_files();
    sd_model *tm = load_ok("qwen3-target.gguf"), *dm = load_ok("qwen3-draft.gguf");
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = 1;
    sd_sampling_params samp = sd_sampling_default_params();
    samp.temp = 0.0f;
    sd_scorer *sc = NULL;
    sd_proposer *prop = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_scorer_init(tm, &sp, &sc, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(
        sd_proposer_llm_init(dm, &sp, &samp, 7, sd_model_hparams(tm)->n_vocab, &prop, &err), SD_OK,
        "%s", err.msg);
    static const int32_t prompts[3][4] = {{1, 5, 9, 13}, {1, 40, 41, 42}, {1, 60, 3, 27}};
    enum { N = 40 };
    int32_t ref[N], got[N];
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 3; pi++) {
        sd_gen_stats st;
        const int32_t n_ref = greedy(sc, NULL, prompts[pi], 0, N, ref, &st);
        for (int32_t k = 1; k <= 6; k++) {
            const int32_t n_got = greedy(sc, prop, prompts[pi], k, N, got, &st);
            cr_assert_eq(n_got, n_ref, "prompt %d, K=%d: %d tokens vs %d", pi, k, n_got, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(got[i], ref[i], "prompt %d, K=%d: token %d is %d, target alone %d", pi,
                             k, i, got[i], ref[i]);
            drafted += st.n_drafted;
            accepted += st.n_accepted;
        }
    }
    cr_log_info("qwen3 draft: %lld of %lld drafted tokens accepted", (long long)accepted,
                (long long)drafted);
    cr_expect_gt(drafted, 0, "nothing was drafted");
    cr_expect_gt(accepted, 0, "the draft was never accepted: the check above compared nothing");
    sd_proposer_free(prop);
    sd_scorer_free(sc);
    sd_model_free(dm);
    sd_model_free(tm);
}

Test(qwen3, missing_k_norm_is_refused_by_name) {
    make_files();
    char p[1200];
    path_of("qwen3-no-k-norm.gguf", p, sizeof p);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_ERR_FORMAT, "%s", err.msg);
    cr_expect(strstr(err.msg, "blk.1.attn_k_norm.weight"), "%s", err.msg);
    cr_expect_null(m);
}
