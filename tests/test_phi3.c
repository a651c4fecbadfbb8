/*
 * The phi3 architecture on small random files written by gguf-py (scripts/make_arch.py phi3:
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
 *   - a token tree's path rows give the batched logits bit for bit
 *     (the tree pass applies the LongRoPE attn_factor as the chain pass does);
 *   - two tensor-parallel ranks give the one-device logits within 1e-5;
 *   - greedy speculative decoding with a phi3 draft equals target-alone decoding for
 *     K = 1..6;
 *   - a file with rope_factors_long but without rope_factors_short is refused naming it;
 *   - where llama.cpp's llama-simple is found ($SD_LLAMACPP_BIN, else build-peer/native/bin:
 *     scripts/peer_llamacpp.sh), its greedy 40 tokens after "t5t9t13" (its context of 256,
 *     so the long factors) are specdec's, for the F32 and the Q8_0 file.
 */
#include "arch_harness.h"
#include "runtime/tokenizer/sd_vocab.h"

/* "t5t9t13" (with BOS) and 17 tokens after it (llama.cpp's greedy continuation begins so) */
static const int32_t k_tokens[] = {1,   264, 268, 272, 101, 217, 112, 18,  192, 291, 62,
                                   248, 284, 247, 178, 225, 61,  167, 310, 20,  112};

static void setup(void) {
    g_ah.arch = "phi3";
    g_ah.tokens = k_tokens;
    g_ah.n_tokens = (int32_t)(sizeof k_tokens / sizeof k_tokens[0]);
    ah_setup();
}

TestSuite(phi3, .init = setup, .fini = ah_teardown, .timeout = 300);

Test(phi3, loads_fused_matrices_and_longrope) {
    ah_make_files();
    sd_model *m = ah_load("phi3-target.gguf");
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

/* The positions run: all of k_tokens, or as many as a short context holds. */
static void check_reference(const char *name, int32_t n_ctx) {
    if (n_ctx < g_ah.n_tokens) g_ah.n_tokens = n_ctx;
    ah_check_reference(name, n_ctx, n_ctx);
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
    ah_make_files();
    sd_model *m = ah_load("phi3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    const size_t bytes = (size_t)g_ah.n_tokens * nv * sizeof(float);
    float *batched = ah_forward(m, 0, 0, 0, 64), *steps = ah_forward(m, 0, 1, 0, 64);
    float *paged = ah_forward(m, 0, 0, 2, 64);
    cr_expect(memcmp(batched, steps, bytes) == 0, "one token at a time differs from the batch");
    cr_expect(memcmp(batched, paged, bytes) == 0, "a paged cache differs from a contiguous one");
    free(batched);
    free(steps);
    free(paged);
    sd_model_free(m);
}

Test(phi3, a_tree_pass_gives_the_batched_bits) {
    ah_make_files();
    sd_model *m = ah_load("phi3-target.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab, n = g_ah.n_tokens - 5;
    cr_assert(n > 2 && n <= SD_MAX_TREE, "%d tree rows", n);
    float *batched = ah_forward(m, 0, 0, 0, 64);
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 16;
    sp.n_threads = 1;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    int32_t parent[SD_MAX_TREE];
    /* a chain with one more leaf beside its last row (a tree: a pure chain would take the
     * chain's path), the chain's rows compared */
    for (int32_t i = 0; i < n; i++)
        parent[i] = i - 1;
    parent[n - 1] = n - 3;
    float *tree = malloc((size_t)n * nv * sizeof(float));
    cr_assert(tree);
    cr_assert_eq(sd_session_eval(s, g_ah.tokens, 5, NULL, 0, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_decode_tree(s, 0, g_ah.tokens + 5, parent, n, tree, &err), SD_OK,
                 "%s", err.msg);
    for (int32_t i = 0; i < n - 1; i++)
        cr_expect(memcmp(tree + (size_t)i * nv, batched + (size_t)(5 + i) * nv,
                         (size_t)nv * sizeof(float)) == 0,
                  "tree row %d differs from the batched pass's position %d", i, 5 + i);
    free(tree);
    free(batched);
    sd_session_free(s);
    sd_model_free(m);
}

Test(phi3, two_tensor_parallel_ranks_match_one_device) {
    ah_check_tp("phi3-target.gguf", 64);
}

Test(phi3, greedy_speculative_equals_target_alone) {
    static const int32_t prompts[3][4] = {{1, 264, 268, 272}, {1, 300, 41, 42}, {1, 60, 3, 27}};
    ah_check_speculative("phi3-target.gguf", "phi3-draft.gguf", prompts, 64);
}

Test(phi3, long_factors_without_short_ones_are_refused_by_name) {
    ah_check_refused("phi3-no-short.gguf", "rope_factors_short.weight");
}

static void vs_llamacpp(const char *name) {
    ah_make_files();
    char bin[1200], p[1200], cmd[4096];
    const char *env = getenv("SD_LLAMACPP_BIN");
    snprintf(bin, sizeof bin, "%s/llama-simple",
             env && *env ? env : SD_SOURCE_DIR "/build-peer/native/bin");
    tu_need_path(bin, "llama.cpp's llama-simple ($SD_LLAMACPP_BIN or scripts/peer_llamacpp.sh)");
    ah_path(name, p, sizeof p);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -n 40 t5t9t13", bin, p);
    char *out = NULL;
    cr_assert_eq(tu_run(cmd, &out, NULL), 0, "%s", cmd);
    /* specdec: greedy from the same prompt, llama.cpp's context (256) and KV type (f16) */
    sd_model *m = ah_load(name);
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
