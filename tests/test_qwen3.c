/*
 * The qwen3 architecture on small random files written by gguf-py (scripts/make_arch.py qwen3:
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
#include "arch_harness.h"

static const int32_t k_tokens[] = {1, 7, 13, 22, 40, 5, 63, 0, 2, 33, 17, 8, 50, 3};

static void setup(void) {
    g_ah.arch = "qwen3";
    g_ah.tokens = k_tokens;
    g_ah.n_tokens = (int32_t)(sizeof k_tokens / sizeof k_tokens[0]);
    ah_setup();
}

TestSuite(qwen3, .init = setup, .fini = ah_teardown, .timeout = 300);

Test(qwen3, loads_the_head_size_from_key_length) {
    ah_make_files();
    sd_model *m = ah_load("qwen3-target.gguf");
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

Test(qwen3, matches_reference_f32) {
    ah_check_reference("qwen3-target.gguf", 64, 0);
}

Test(qwen3, matches_reference_q8_0) {
    ah_check_reference("qwen3-target-q8_0.gguf", 64, 0);
}

Test(qwen3, two_tensor_parallel_ranks_match_one_device) {
    ah_check_tp("qwen3-target.gguf", 64);
}

Test(qwen3, greedy_speculative_equals_target_alone) {
    static const int32_t prompts[3][4] = {{1, 5, 9, 13}, {1, 40, 41, 42}, {1, 60, 3, 27}};
    ah_check_speculative("qwen3-target.gguf", "qwen3-draft.gguf", prompts, 0);
}

Test(qwen3, missing_k_norm_is_refused_by_name) {
    ah_check_refused("qwen3-no-k-norm.gguf", "blk.1.attn_k_norm.weight");
}
