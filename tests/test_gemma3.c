/*
 * The gemma3 architecture.
 *
 * On small random files written by gguf-py (scripts/make_gemma3.py: llama.cpp's own
 * writer and tensor names; skipped cleanly when the python3 on PATH has no gguf-py):
 *   - the loader reads the row of the architecture table (GELU FFN, sqrt(n_embd) embedding
 *     scale, sandwich norms, per-head Q/K norms, NEOX RoPE) and the local layers: the
 *     default period 6 (5 local, 1 global) or gemma3.attention.sliding_window_pattern as
 *     one bool per layer, with the local RoPE base (10000 or rope.freq_base_swa);
 *   - the C forward (prefill, then the rest as one batch; a window of 4 in a context of
 *     64, so the local layers' window is in force) matches scripts/ref_forward.py, an
 *     independent numpy float64 forward: max_i |c_i - r_i| / max_i |r_i| <= 1e-4 at every
 *     position, for F32 and Q8_0 matrices and for the file with the bool pattern, its own
 *     local base and a final logit soft cap;
 *   - one token at a time gives the batched logits bit for bit, and so does a paged cache;
 *   - two tensor-parallel ranks give the one-device logits within 1e-5;
 *   - greedy speculative decoding with a gemma3 draft equals target-alone decoding for
 *     K = 1..6;
 *   - a file without one layer's post_ffw_norm.weight is refused naming it.
 *
 * On the real Gemma 3 270M (Q4_K_M; `bash scripts/get_models.sh gemma3`; skipped without
 * it): the 4 prompts of scripts/gemma3_vs_llamacpp.py tokenize to llama-tokenize's ids,
 * and greedy decoding (F16 KV cache, generate's default and llama.cpp's; with an F32 cache
 * prompt 3 turns at another near-tie) spells llama.cpp's greedy text (llama-simple, the
 * llama-cpp-python 0.3.36 vendored build) for 48 tokens, or up to the one position where the two
 * differ and ref_forward.py --float puts the two tokens within 0.3 logits (prompt 1: 0.014 at token
 * 11; prompt 2: 0.078 at token 28).
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

TestSuite(gemma3, .init = setup, .fini = teardown, .timeout = 300);

/* Writes the files into g_dir, or skips the test without gguf-py. */
static void make_files(void) {
    char cmd[2048], *err = NULL;
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/make_gemma3.py' '%s'", SD_SOURCE_DIR, g_dir);
    const int rc = tu_run(cmd, NULL, &err);
    if (rc == 3) {
        free(err);
        cr_skip_test("needs: gguf-py for the python3 on PATH (pip install gguf), which writes "
                     "the gemma3 files");
    }
    cr_assert_eq(rc, 0, "make_gemma3.py: exit %d: %s", rc, err);
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

static const int32_t k_tokens[] = {2, 7, 13, 22, 40, 5, 63, 0, 1, 33, 17, 8, 50, 3};
#define N_TOKENS ((int32_t)(sizeof k_tokens / sizeof k_tokens[0]))

/* Logits [N_TOKENS, n_vocab]: prefill 5, then the rest as one batch (step 0), or one
 * token at a time (step 1); n_seq > 0: a paged cache. */
static float *forward(const sd_model *m, int32_t n_split, int step, int32_t n_seq) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 64;
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

Test(gemma3, loads_the_architecture_row_and_the_local_layers) {
    make_files();
    sd_model *m = load_ok("gemma3-target.gguf");
    const sd_hparams *hp = sd_model_hparams(m);
    cr_expect_str_eq(hp->arch, "gemma3");
    cr_expect_eq(hp->head_dim, 32);
    cr_expect_eq(hp->qk_norm, 1);
    cr_expect_eq(hp->rope_neox, 1);
    cr_expect_eq(hp->ffn_gelu, 1);
    cr_expect_eq(hp->embd_scale, 1);
    cr_expect_eq(hp->post_norms, 1);
    cr_expect_eq(hp->sliding_window, 4);
    cr_expect_eq(hp->n_swa_layers, 5, "default period 6: layers 0-4 local, got %d",
                 hp->n_swa_layers);
    cr_expect_float_eq(hp->rope_base, 1e6f, 1.0f);
    cr_expect_float_eq(hp->rope_base_swa, 10000.0f, 1e-3f);
    cr_expect_float_eq(hp->logit_softcap, 0.0f, 0.0f);
    sd_model_free(m);
    m = load_ok("gemma3-pattern.gguf");
    hp = sd_model_hparams(m);
    cr_expect_eq(hp->n_swa_layers, 3, "the bool pattern has 3 local layers, got %d",
                 hp->n_swa_layers);
    cr_expect_float_eq(hp->rope_base_swa, 500.0f, 1e-3f);
    cr_expect_float_eq(hp->logit_softcap, 3.0f, 1e-6f);
    sd_model_free(m);
}

static void check_reference(const char *name) {
    make_files();
    sd_model *m = load_ok(name);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *c = forward(m, 0, 0, 0);
    double *r = reference(name, nv);
    const double e = rel_err(c, r, nv);
    cr_log_info("%s: relative error (max norm) %.3g", name, e);
    cr_expect(e <= REF_TOL, "%s: logits differ from ref_forward.py: %.3g > %g", name, e, REF_TOL);
    free(c);
    free(r);
    sd_model_free(m);
}

Test(gemma3, matches_reference_f32) {
    check_reference("gemma3-target.gguf");
}

Test(gemma3, matches_reference_q8_0) {
    check_reference("gemma3-target-q8_0.gguf");
}

Test(gemma3, matches_reference_bool_pattern_local_base_softcap) {
    check_reference("gemma3-pattern.gguf");
}

Test(gemma3, single_steps_and_paged_cache_give_the_batched_bits) {
    make_files();
    sd_model *m = load_ok("gemma3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    const size_t bytes = (size_t)N_TOKENS * nv * sizeof(float);
    float *batched = forward(m, 0, 0, 0), *steps = forward(m, 0, 1, 0);
    float *paged = forward(m, 0, 0, 2);
    cr_expect(memcmp(batched, steps, bytes) == 0, "one token at a time differs from the batch");
    cr_expect(memcmp(batched, paged, bytes) == 0, "a paged cache differs from a contiguous one");
    free(batched);
    free(steps);
    free(paged);
    sd_model_free(m);
}

Test(gemma3, two_tensor_parallel_ranks_match_one_device) {
    make_files();
    sd_model *m = load_ok("gemma3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *one = forward(m, 0, 0, 0), *two = forward(m, 2, 0, 0);
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

Test(gemma3, greedy_speculative_equals_target_alone) {
    make_files();
    sd_model *tm = load_ok("gemma3-target.gguf"), *dm = load_ok("gemma3-draft.gguf");
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
    static const int32_t prompts[3][4] = {{2, 5, 9, 13}, {2, 40, 41, 42}, {2, 60, 3, 27}};
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
    cr_log_info("gemma3 draft: %lld of %lld drafted tokens accepted", (long long)accepted,
                (long long)drafted);
    cr_expect_gt(drafted, 0, "nothing was drafted");
    cr_expect_gt(accepted, 0, "the draft was never accepted: the check above compared nothing");
    sd_proposer_free(prop);
    sd_scorer_free(sc);
    sd_model_free(dm);
    sd_model_free(tm);
}

Test(gemma3, missing_post_norm_is_refused_by_name) {
    make_files();
    char p[1200];
    path_of("gemma3-no-post-norm.gguf", p, sizeof p);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(p, &m, &err), SD_ERR_FORMAT, "%s", err.msg);
    cr_expect(strstr(err.msg, "blk.2.post_ffw_norm.weight"), "%s", err.msg);
    cr_expect_null(m);
}

/* ---- the real file ---- */

#define GEMMA3_REAL SD_SOURCE_DIR "/models/downloaded/gemma-3-270m-q4_k_m.gguf"

/* scripts/gemma3_vs_llamacpp.py's prompts, llama-tokenize's ids for them, and llama.cpp's
 * greedy text (llama-simple -n 48) up to n_agree tokens of specdec's (48: all of them;
 * else the first divergence, a near-tie by the float reference). */
static const struct {
    const char *prompt;
    int32_t ids[40], n_ids;
    const char *llama_text;
    int32_t n_agree;
} k_real[] = {
    {"The capital of France is",
     {2, 818, 5279, 529, 7001, 563},
     6,
     " the capital of the country of France. It is the",
     11},
    {"Once upon a time, there was a little girl named Lily who loved to",
     {2, 14946, 3324, 496, 990, 236764, 993, 691, 496, 2268, 3953, 7489, 60708, 1015, 9312, 531},
     16,
     " play with her dolls. She loved to play with her dolls and she loved to play with her "
     "dolls. She loved to play with her dolls",
     28},
    {"def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n   ",
     {2,     2063, 10779, 78113,  236769, 236749, 1473, 107,   140, 12234,
      13293, 506,  538,   236772, 594,    123466, 1548, 29738, 107, 139},
     20,
     "\n    if n == 0:\n        return 0\n    elif n == 1:\n        return 1\n    elif n == 2:\n"
     "        return 2\n    elif n == 3:\n",
     48},
    {"H\xc3\xa9llo w\xc3\xb6rld!  Multiple   spaces\tand tabs, \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"
     " and emoji \xf0\x9f\x99\x82.\n\nQuestion: why is the sky blue?\nAnswer:",
     {2,      236814, 7869,  844,    515,   4010,   671,    236888, 138,   48873,  139, 35220,
      255968, 624,    42364, 236764, 33375, 238582, 532,    64334,  57235, 236761, 108, 14977,
      236787, 3217,   563,   506,    7217,  3730,   236881, 107,    7925,  236787},
     34,
     " because the sky is blue.\n\nQuestion: why is the sky blue?\nAnswer: because the sky is "
     "blue.\n\nQuestion: why is the sky blue?\nAnswer: because the sky is blue.\n\nQuestion: why "
     "is the",
     48},
};

Test(gemma3, real_270m_tokenizes_and_decodes_as_llamacpp) {
    tu_need_path(GEMMA3_REAL, "fetched by `bash scripts/get_models.sh gemma3`");
    sd_model *m = load_path(GEMMA3_REAL);
    const sd_hparams *hp = sd_model_hparams(m);
    cr_expect_eq(hp->n_layer, 18);
    cr_expect_eq(hp->n_swa_layers, 15, "18 layers of period 6: 15 local, got %d", hp->n_swa_layers);
    cr_expect_eq(hp->sliding_window, 512);
    const sd_vocab *v = sd_model_vocab(m);
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 1024;
    sp.kv_type = SD_TYPE_F16; /* generate's default, and llama.cpp's */
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    cr_assert(logits);
    for (size_t pi = 0; pi < sizeof k_real / sizeof k_real[0]; pi++) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        cr_assert_eq(sd_vocab_tokenize(v, k_real[pi].prompt, strlen(k_real[pi].prompt),
                                       SD_VOCAB_ADD_SPECIAL, &ids, &n_ids, &err),
                     SD_OK, "%s", err.msg);
        cr_expect_eq((int32_t)n_ids, k_real[pi].n_ids, "prompt %zu: %zu ids, llama-tokenize %d", pi,
                     n_ids, k_real[pi].n_ids);
        for (size_t i = 0; i < n_ids && (int32_t)i < k_real[pi].n_ids; i++)
            cr_expect_eq(ids[i], k_real[pi].ids[i], "prompt %zu: id %zu is %d, llama-tokenize %d",
                         pi, i, ids[i], k_real[pi].ids[i]);
        cr_assert_eq(sd_session_truncate(s, 0, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_eval(s, ids, (int32_t)n_ids, logits, 1, &err), SD_OK, "%s",
                     err.msg);
        free(ids);
        int32_t gen[48];
        for (int32_t t = 0; t < k_real[pi].n_agree; t++) {
            int32_t best = 0;
            for (int32_t i = 1; i < hp->n_vocab; i++)
                if (logits[i] > logits[best]) best = i;
            gen[t] = best;
            cr_assert_eq(sd_session_eval(s, &best, 1, logits, 1, &err), SD_OK, "%s", err.msg);
        }
        char *text = NULL;
        size_t len = 0;
        cr_assert_eq(sd_vocab_detokenize(v, gen, (size_t)k_real[pi].n_agree, 0, &text, &len, &err),
                     SD_OK, "%s", err.msg);
        cr_expect_str_eq(text, k_real[pi].llama_text, "prompt %zu: greedy text differs: [%s]", pi,
                         text);
        free(text);
    }
    free(logits);
    sd_session_free(s);
    sd_model_free(m);
}
