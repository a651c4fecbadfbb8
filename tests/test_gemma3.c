/*
 * The gemma3 architecture.
 *
 * On small random files written by gguf-py (scripts/make_arch.py gemma3: llama.cpp's own
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
#include "arch_harness.h"
#include "runtime/tokenizer/sd_vocab.h"

static const int32_t k_tokens[] = {2, 7, 13, 22, 40, 5, 63, 0, 1, 33, 17, 8, 50, 3};

static void setup(void) {
    g_ah.arch = "gemma3";
    g_ah.tokens = k_tokens;
    g_ah.n_tokens = (int32_t)(sizeof k_tokens / sizeof k_tokens[0]);
    ah_setup();
}

TestSuite(gemma3, .init = setup, .fini = ah_teardown, .timeout = 300);

Test(gemma3, loads_the_architecture_row_and_the_local_layers) {
    ah_make_files();
    sd_model *m = ah_load("gemma3-target.gguf");
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
    m = ah_load("gemma3-pattern.gguf");
    hp = sd_model_hparams(m);
    cr_expect_eq(hp->n_swa_layers, 3, "the bool pattern has 3 local layers, got %d",
                 hp->n_swa_layers);
    cr_expect_float_eq(hp->rope_base_swa, 500.0f, 1e-3f);
    cr_expect_float_eq(hp->logit_softcap, 3.0f, 1e-6f);
    sd_model_free(m);
}

Test(gemma3, matches_reference_f32) {
    ah_check_reference("gemma3-target.gguf", 64, 0);
}

Test(gemma3, matches_reference_q8_0) {
    ah_check_reference("gemma3-target-q8_0.gguf", 64, 0);
}

Test(gemma3, matches_reference_bool_pattern_local_base_softcap) {
    ah_check_reference("gemma3-pattern.gguf", 64, 0);
}

Test(gemma3, single_steps_and_paged_cache_give_the_batched_bits) {
    ah_make_files();
    sd_model *m = ah_load("gemma3-target.gguf");
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

Test(gemma3, two_tensor_parallel_ranks_match_one_device) {
    ah_check_tp("gemma3-target.gguf", 64);
}

Test(gemma3, greedy_speculative_equals_target_alone) {
    /* a context of 64 > the window of 4: the local layers see 4 keys */
    static const int32_t prompts[3][4] = {{2, 5, 9, 13}, {2, 40, 41, 42}, {2, 60, 3, 27}};
    ah_check_speculative("gemma3-target.gguf", "gemma3-draft.gguf", prompts, 64);
}

Test(gemma3, missing_post_norm_is_refused_by_name) {
    ah_check_refused("gemma3-no-post-norm.gguf", "blk.2.post_ffw_norm.weight");
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
    sd_model *m = ah_load_path(GEMMA3_REAL);
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
        cr_assert_eq(sd_session_seq_truncate(s, 0, 0, &err), SD_OK, "%s", err.msg);
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
