/* runtime/gguf/arch.c: the llama-family key and tensor-name table (see sd_gguf.h), after
 * llama.cpp's src/llama-arch.cpp (LLM_KV_NAMES, LLM_TENSOR_NAMES). */
#include <stdio.h>
#include <string.h>

#include "runtime/gguf/sd_gguf.h"

static const char *const k_key_suffix[SD_KEY_COUNT] = {
    [SD_KEY_CONTEXT_LENGTH] = "context_length",
    [SD_KEY_EMBEDDING_LENGTH] = "embedding_length",
    [SD_KEY_BLOCK_COUNT] = "block_count",
    [SD_KEY_FEED_FORWARD_LENGTH] = "feed_forward_length",
    [SD_KEY_HEAD_COUNT] = "attention.head_count",
    [SD_KEY_HEAD_COUNT_KV] = "attention.head_count_kv",
    [SD_KEY_RMS_EPS] = "attention.layer_norm_rms_epsilon",
    [SD_KEY_KEY_LENGTH] = "attention.key_length",
    [SD_KEY_VALUE_LENGTH] = "attention.value_length",
    [SD_KEY_SLIDING_WINDOW] = "attention.sliding_window",
    [SD_KEY_ROPE_FREQ_BASE] = "rope.freq_base",
    [SD_KEY_ROPE_DIMENSION_COUNT] = "rope.dimension_count",
    [SD_KEY_ROPE_SCALING_TYPE] = "rope.scaling.type",
    [SD_KEY_ROPE_SCALING_FACTOR] = "rope.scaling.factor",
    [SD_KEY_ROPE_SCALING_ORIG_CTX] = "rope.scaling.original_context_length",
    [SD_KEY_VOCAB_SIZE] = "vocab_size",
    [SD_KEY_SWA_PATTERN] = "attention.sliding_window_pattern",
    [SD_KEY_ROPE_BASE_SWA] = "rope.freq_base_swa",
    [SD_KEY_LOGIT_SOFTCAP] = "final_logit_softcapping",
    [SD_KEY_ROPE_ATTN_FACTOR] = "rope.scaling.attn_factor",
};

static const struct {
    const char *name;
    int per_layer;
} k_tensor[SD_TENSOR_COUNT] = {
    [SD_TENSOR_TOKEN_EMBD] = {"token_embd.weight", 0},
    [SD_TENSOR_OUTPUT_NORM] = {"output_norm.weight", 0},
    [SD_TENSOR_OUTPUT] = {"output.weight", 0},
    [SD_TENSOR_ROPE_FREQS] = {"rope_freqs.weight", 0},
    [SD_TENSOR_ATTN_NORM] = {"attn_norm.weight", 1},
    [SD_TENSOR_ATTN_Q] = {"attn_q.weight", 1},
    [SD_TENSOR_ATTN_K] = {"attn_k.weight", 1},
    [SD_TENSOR_ATTN_V] = {"attn_v.weight", 1},
    [SD_TENSOR_ATTN_Q_BIAS] = {"attn_q.bias", 1},
    [SD_TENSOR_ATTN_K_BIAS] = {"attn_k.bias", 1},
    [SD_TENSOR_ATTN_V_BIAS] = {"attn_v.bias", 1},
    [SD_TENSOR_ATTN_OUT] = {"attn_output.weight", 1},
    [SD_TENSOR_ATTN_Q_NORM] = {"attn_q_norm.weight", 1},
    [SD_TENSOR_ATTN_K_NORM] = {"attn_k_norm.weight", 1},
    [SD_TENSOR_FFN_NORM] = {"ffn_norm.weight", 1},
    [SD_TENSOR_FFN_GATE] = {"ffn_gate.weight", 1},
    [SD_TENSOR_FFN_DOWN] = {"ffn_down.weight", 1},
    [SD_TENSOR_FFN_UP] = {"ffn_up.weight", 1},
    [SD_TENSOR_ATTN_POST] = {"post_attention_norm.weight", 1},
    [SD_TENSOR_FFN_POST] = {"post_ffw_norm.weight", 1},
    [SD_TENSOR_ATTN_QKV] = {"attn_qkv.weight", 1},
    [SD_TENSOR_ROPE_LONG] = {"rope_factors_long.weight", 0},
    [SD_TENSOR_ROPE_SHORT] = {"rope_factors_short.weight", 0},
};

/* The supported architectures: everything that differs between them is in this table. */
static const sd_arch k_arch[] = {
    /* name, qkv_bias, rope_neox, qk_norm, ffn_gelu, embd_scale, post_norms, swa_pattern,
     * rope_base_swa */
    {"llama", 0, 0, 0, 0, 0, 0, 0, 0.0f}, /* Llama 1-3, Mistral 7B-style, SmolLM, llama2.c */
    {"qwen2", 1, 1, 0, 0, 0, 0, 0, 0.0f}, /* Qwen2, Qwen2.5 */
    {"qwen3", 0, 1, 1, 0, 0, 0, 0, 0.0f}, /* Qwen3 (dense): per-head Q/K RMSNorm, no biases */
    /* Gemma 3: sqrt(n_embd)-scaled embeddings, sandwich norms (the GGUF stores Gemma's
     * 1 + w already added), GELU FFN, per-head Q/K norms, 5 local layers (window, RoPE
     * base 10k) to 1 global; tied output */
    {"gemma3", 0, 1, 1, 1, 1, 1, 6, 10000.0f},
    /* Phi-3 (mini, medium; Phi-3.5 mini): Q/K/V fused in attn_qkv and gate/up in ffn_up
     * (loaded as row slices, any arch may fuse them), LongRoPE factors; its
     * attention.sliding_window is ignored, as llama.cpp does (pattern 1: no local layer) */
    {"phi3", 0, 1, 0, 0, 0, 0, 1, 0.0f},
};

const char *sd_arch_key_name(sd_arch_key k, const char *arch, char *buf, size_t cap) {
    if ((unsigned)k >= SD_KEY_COUNT) k = SD_KEY_CONTEXT_LENGTH;
    snprintf(buf, cap, "%.32s.%s", arch, k_key_suffix[k]);
    return buf;
}

int sd_arch_tensor_per_layer(sd_arch_tensor t) {
    return (unsigned)t < SD_TENSOR_COUNT && k_tensor[t].per_layer;
}

const char *sd_arch_tensor_name(sd_arch_tensor t, int32_t layer, char *buf, size_t cap) {
    if ((unsigned)t >= SD_TENSOR_COUNT) t = SD_TENSOR_TOKEN_EMBD;
    if (k_tensor[t].per_layer)
        snprintf(buf, cap, "blk.%d.%s", (int)layer, k_tensor[t].name);
    else
        snprintf(buf, cap, "%s", k_tensor[t].name);
    return buf;
}

const sd_arch *sd_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof k_arch / sizeof k_arch[0]; i++)
        if (strlen(k_arch[i].name) == len && memcmp(k_arch[i].name, name, len) == 0)
            return &k_arch[i];
    return NULL;
}

const char *sd_arch_supported(void) {
    return "llama, qwen2, qwen3, gemma3, phi3";
}

int sd_gguf_set_llm_meta(sd_gguf_writer *w, const sd_llm_meta *m) {
    if (!w || !m || !m->arch || (m->n_vocab > 0 && (!m->tokens || !m->scores || !m->token_type)))
        return SD_ERR_ARG;
    char k[96];
    const char *a = m->arch;
    int e = sd_gguf_set_str(w, SD_KEY_GENERAL_ARCHITECTURE, a);
    if (m->name) e |= sd_gguf_set_str(w, SD_KEY_GENERAL_NAME, m->name);
    if (m->file_type >= 0)
        e |= sd_gguf_set_u32(w, SD_KEY_GENERAL_FILE_TYPE, (uint32_t)m->file_type);
    e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_CONTEXT_LENGTH, a, k, sizeof k),
                         (uint32_t)m->n_ctx);
    e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_EMBEDDING_LENGTH, a, k, sizeof k),
                         (uint32_t)m->n_embd);
    e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_BLOCK_COUNT, a, k, sizeof k),
                         (uint32_t)m->n_layer);
    e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_FEED_FORWARD_LENGTH, a, k, sizeof k),
                         (uint32_t)m->n_ff);
    e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_HEAD_COUNT, a, k, sizeof k),
                         (uint32_t)m->n_head);
    e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_HEAD_COUNT_KV, a, k, sizeof k),
                         (uint32_t)m->n_head_kv);
    e |= sd_gguf_set_f32(w, sd_arch_key_name(SD_KEY_RMS_EPS, a, k, sizeof k), m->rms_eps);
    e |= sd_gguf_set_f32(w, sd_arch_key_name(SD_KEY_ROPE_FREQ_BASE, a, k, sizeof k), m->rope_base);
    if (m->n_rot > 0)
        e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_ROPE_DIMENSION_COUNT, a, k, sizeof k),
                             (uint32_t)m->n_rot);
    if (m->write_vocab_size)
        e |= sd_gguf_set_u32(w, sd_arch_key_name(SD_KEY_VOCAB_SIZE, a, k, sizeof k),
                             (uint32_t)m->n_vocab);
    e |= sd_gguf_set_str(w, SD_KEY_TOKENIZER_MODEL, "llama");
    if (m->n_vocab > 0) {
        e |= sd_gguf_set_arr_str(w, SD_KEY_TOKENIZER_TOKENS, m->tokens, (uint64_t)m->n_vocab);
        e |= sd_gguf_set_arr(w, SD_KEY_TOKENIZER_SCORES, SD_GGUF_F32, m->scores,
                             (uint64_t)m->n_vocab);
        e |= sd_gguf_set_arr(w, SD_KEY_TOKENIZER_TOKEN_TYPE, SD_GGUF_I32, m->token_type,
                             (uint64_t)m->n_vocab);
    }
    if (m->bos >= 0) e |= sd_gguf_set_u32(w, SD_KEY_TOKENIZER_BOS_ID, (uint32_t)m->bos);
    if (m->eos >= 0) e |= sd_gguf_set_u32(w, SD_KEY_TOKENIZER_EOS_ID, (uint32_t)m->eos);
    if (m->unk >= 0) e |= sd_gguf_set_u32(w, SD_KEY_TOKENIZER_UNK_ID, (uint32_t)m->unk);
    if (m->add_bos >= 0) e |= sd_gguf_set_bool(w, SD_KEY_TOKENIZER_ADD_BOS, m->add_bos);
    if (m->add_eos >= 0) e |= sd_gguf_set_bool(w, SD_KEY_TOKENIZER_ADD_EOS, m->add_eos);
    if (m->add_space_prefix >= 0)
        e |= sd_gguf_set_bool(w, SD_KEY_TOKENIZER_ADD_SPACE, m->add_space_prefix);
    return e ? SD_ERR_OOM : SD_OK;
}
