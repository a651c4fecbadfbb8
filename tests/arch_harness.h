/*
 * tests/arch_harness.h: the scaffolding the architecture tests share (test_qwen3.c,
 * test_phi3.c, test_gemma3.c): small random files written by gguf-py
 * (scripts/make_arch.py ARCH, skipped cleanly without gguf-py), the C forward over a fixed
 * token list, scripts/ref_forward.py's float64 forward over the same tokens, the max-norm
 * relative error, the tensor-parallel and greedy-speculative checks. Static functions: one
 * test file includes it, after setting g_ah.arch, g_ah.tokens and g_ah.n_tokens.
 */
#ifndef SD_TESTS_ARCH_HARNESS_H
#define SD_TESTS_ARCH_HARNESS_H

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

/* The relative error (max norm) a forward may have against ref_forward.py. */
#define AH_REF_TOL 1e-4

typedef struct ah_state {
    const char *arch;      /* "qwen3": the files of scripts/make_arch.py qwen3 */
    const int32_t *tokens; /* the positions run by ah_forward / ah_reference */
    int32_t n_tokens;
    char dir[1024]; /* the files (a temporary folder per test) */
} ah_state;

static ah_state g_ah;

static void ah_setup(void) {
    cr_assert_eq(tu_mkdtemp(g_ah.dir, sizeof g_ah.dir), 0);
}
static void ah_teardown(void) {
    tu_rmdir(g_ah.dir);
}

/* Writes the files into g_ah.dir, or skips the test without gguf-py. */
static void ah_make_files(void) {
    char cmd[2048], *err = NULL;
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/make_arch.py' %s '%s'", SD_SOURCE_DIR, g_ah.arch,
             g_ah.dir);
    const int rc = tu_run(cmd, NULL, &err);
    if (rc == 3) {
        free(err);
        cr_skip_test("needs: gguf-py for the python3 on PATH (pip install gguf), which writes "
                     "the %s files",
                     g_ah.arch);
    }
    cr_assert_eq(rc, 0, "make_arch.py %s: exit %d: %s", g_ah.arch, rc, err);
    free(err);
}

static void ah_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", g_ah.dir, name);
}

static sd_model *ah_load_path(const char *p) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_OK, "%s: %s", p, err.msg);
    return m;
}

static sd_model *ah_load(const char *name) {
    char p[1200];
    ah_path(name, p, sizeof p);
    return ah_load_path(p);
}

/* Logits [n_tokens, n_vocab] of a context of n_ctx: prefill 5, then the rest as one batch
 * (step 0), or one token at a time (step 1); n_seq > 0: a paged cache (blocks of 4);
 * n_split: tensor-parallel ranks (0: one device). */
static float *ah_forward(const sd_model *m, int32_t n_split, int step, int32_t n_seq,
                         int32_t n_ctx) {
    const int32_t nv = sd_model_hparams(m)->n_vocab, n = g_ah.n_tokens;
    const int32_t *tok = g_ah.tokens;
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
    float *logits = malloc((size_t)n * nv * sizeof(float));
    cr_assert(logits);
    cr_assert_eq(sd_session_eval(s, tok, 5, logits, 5, &err), SD_OK, "%s", err.msg);
    if (step) {
        for (int32_t i = 5; i < n; i++)
            cr_assert_eq(sd_session_eval(s, tok + i, 1, logits + (size_t)i * nv, 1, &err), SD_OK,
                         "%s", err.msg);
    } else {
        cr_assert_eq(sd_session_eval(s, tok + 5, n - 5, logits + (size_t)5 * nv, n - 5, &err),
                     SD_OK, "%s", err.msg);
    }
    sd_session_free(s);
    return logits;
}

/* scripts/ref_forward.py over the same tokens (the python3 on PATH: it has numpy, as
 * gguf-py needs it); n_ctx > 0 is passed as --ctx (LongRoPE's choice of factors). */
static double *ah_reference(const char *name, int32_t nv, int32_t n_ctx) {
    char p[1200], cmd[4096];
    ah_path(name, p, sizeof p);
    int off = snprintf(cmd, sizeof cmd, "python3 '%s/scripts/ref_forward.py'", SD_SOURCE_DIR);
    if (n_ctx > 0) off += snprintf(cmd + off, sizeof cmd - (size_t)off, " --ctx %d", n_ctx);
    off += snprintf(cmd + off, sizeof cmd - (size_t)off, " '%s'", p);
    for (int32_t i = 0; i < g_ah.n_tokens; i++)
        off += snprintf(cmd + off, sizeof cmd - (size_t)off, " %d", g_ah.tokens[i]);
    double *ref = malloc((size_t)g_ah.n_tokens * nv * sizeof(double));
    cr_assert(ref);
    FILE *f = popen(cmd, "r");
    cr_assert(f, "popen: %s", cmd);
    for (int64_t i = 0; i < (int64_t)g_ah.n_tokens * nv; i++)
        cr_assert_eq(fscanf(f, "%lf", &ref[i]), 1, "ref_forward.py output short at %lld: %s",
                     (long long)i, cmd);
    const int st = pclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ref_forward.py failed: %s", cmd);
    return ref;
}

/* The worst position's max_i |c_i - r_i| / max_i |r_i| (a NaN counts as infinite). */
static double ah_rel_err(const float *c, const double *r, int32_t nv) {
    double worst = 0.0;
    for (int32_t p = 0; p < g_ah.n_tokens; p++) {
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

/* The C forward of file `name` (context n_ctx) against ref_forward.py: within
 * AH_REF_TOL; ref_ctx > 0 is given to the reference as --ctx. */
static void ah_check_reference(const char *name, int32_t n_ctx, int32_t ref_ctx) {
    ah_make_files();
    sd_model *m = ah_load(name);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *c = ah_forward(m, 0, 0, 0, n_ctx);
    double *r = ah_reference(name, nv, ref_ctx);
    const double e = ah_rel_err(c, r, nv);
    cr_log_info("%s, n_ctx %d: relative error (max norm) %.3g", name, n_ctx, e);
    cr_expect(e <= AH_REF_TOL, "%s: logits differ from ref_forward.py: %.3g > %g", name, e,
              AH_REF_TOL);
    free(c);
    free(r);
    sd_model_free(m);
}

/* Two tensor-parallel ranks (CPU) give the one-device logits within 1e-5 (max norm): they
 * differ only by the reassociation of the row-parallel sums. */
static void ah_check_tp(const char *name, int32_t n_ctx) {
    ah_make_files();
    sd_model *m = ah_load(name);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *one = ah_forward(m, 0, 0, 0, n_ctx), *two = ah_forward(m, 2, 0, 0, n_ctx);
    double dmax = 0.0, rmax = 0.0;
    for (int64_t i = 0; i < (int64_t)g_ah.n_tokens * nv; i++) {
        const double d = fabs((double)one[i] - two[i]);
        if (d > dmax || d != d) dmax = d != d ? INFINITY : d;
        if (fabs(one[i]) > rmax) rmax = fabs(one[i]);
    }
    cr_expect(dmax <= 1e-5 * rmax, "n_split 2 vs 1: max |diff| %.3g, max |logit| %.3g", dmax, rmax);
    free(one);
    free(two);
    sd_model_free(m);
}

/* Greedy generation through the engine's one path (sd_engine_generate), EOS ignored: with
 * the LLM draft at K k (fixed), or target alone (k 0). */
static int32_t ah_greedy(sd_engine *e, const int32_t *prompt, int32_t k, int32_t n_predict,
                         int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = k;
    gp.draft_type = k > 0 ? SD_DRAFT_LLM : SD_DRAFT_NONE;
    gp.k_policy = SD_K_FIXED;
    gp.ignore_eos = 1;
    gp.samp.temp = 0.0f;
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, &gp, prompt, 4, NULL, NULL, out, n_predict, st, &err), SD_OK,
                 "%s", err.msg);
    return st->n_generated;
}

/* Greedy speculative decoding with the draft file equals greedy target-alone decoding
 * token for token, 40 tokens after each of the 3 prompts (4 ids each), for K = 1..6, and
 * the draft is accepted at least sometimes (else nothing was compared). n_ctx: the
 * engine's context (0: the files' training context). */
static void ah_check_speculative(const char *target, const char *draft, const int32_t prompts[3][4],
                                 int32_t n_ctx) {
    ah_make_files();
    char tp[1200], dp[1200];
    ah_path(target, tp, sizeof tp);
    ah_path(draft, dp, sizeof dp);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = tp;
    ep.draft = dp;
    ep.n_ctx = n_ctx;
    ep.n_threads = 1;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    enum { N = 40 };
    int32_t ref[N], got[N];
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 3; pi++) {
        sd_gen_stats st;
        const int32_t n_ref = ah_greedy(e, prompts[pi], 0, N, ref, &st);
        for (int32_t k = 1; k <= 6; k++) {
            const int32_t n_got = ah_greedy(e, prompts[pi], k, N, got, &st);
            cr_assert_eq(n_got, n_ref, "prompt %d, K=%d: %d tokens vs %d", pi, k, n_got, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(got[i], ref[i], "prompt %d, K=%d: token %d is %d, target alone %d", pi,
                             k, i, got[i], ref[i]);
            drafted += st.n_drafted;
            accepted += st.n_accepted;
        }
    }
    cr_log_info("%s draft: %lld of %lld drafted tokens accepted", g_ah.arch, (long long)accepted,
                (long long)drafted);
    cr_expect_gt(drafted, 0, "nothing was drafted");
    cr_expect_gt(accepted, 0, "the draft was never accepted: the check above compared nothing");
    sd_engine_free(e);
}

/* A file the loader must refuse with SD_ERR_FORMAT, naming `what`. */
static void ah_check_refused(const char *name, const char *what) {
    ah_make_files();
    char p[1200];
    ah_path(name, p, sizeof p);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_ERR_FORMAT, "%s", err.msg);
    cr_expect(strstr(err.msg, what), "%s", err.msg);
    cr_expect_null(m);
}

#endif /* SD_TESTS_ARCH_HARNESS_H */
