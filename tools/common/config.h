/*
 * Pair configs: JSON files (configs/NAME.json) naming a target, a draft and generation
 * settings, read with jansson. Keys (all optional; command-line flags override them):
 *   "description"  string   free text, ignored
 *   "target"       string   target GGUF path (relative paths: to the config's folder)
 *   "draft"        string   draft GGUF path (same rule)
 *   "draft_tokens" integer  K, 1 .. 16
 *   "max_tokens"   integer  tokens to generate, >= 1
 *   "temp"         number   >= 0 (0 = greedy)
 *   "top_k"        integer  >= 0 (0 = off)
 *   "top_p"        number   (0, 1] (1 = off)
 *   "seed"         integer  >= 0
 *   "threads"      integer  >= 0 (0 = all cores)
 *   "ctx_size"     integer  >= 0 (0 = the target's training context)
 *   "prompt"       string
 *   "kv_type"      string   "f32", "f16", "q8_0" or "q4_0": KV-cache element type
 *   "draft_type"   string   none, llm, ngram, ngram+llm, suffix, suffix+llm (llama.cpp:
 *                           draft-simple, ngram-simple)
 *   "draft_policy" string   "fixed" or "adaptive" (the K controller with auto-off)
 *   "draft_p_min"  number   [0, 1]: LLM draft confidence cut-off (0 = off)
 *   "draft_min"    integer  0 .. 16: tokens drafted before the cut-off applies
 *   "ngram_min"    integer  1 .. 16: shortest n-gram matched by the lookup proposer
 *   "ngram_max"    integer  1 .. 16: longest (ngram_min <= ngram_max)
 *   "suffix_factor" number  (0, 64]: the suffix draft's tokens per token of match length
 *   "suffix_min_prob" number [0, 1]: the suffix draft stops before its continuation's
 *                           empirical probability falls below this
 *   "suffix_cost"  number   (0, 16]: the suffix draft's expected rule (--suffix-cost)
 *   "suffix_resume" integer 0 .. 16: tokens the suffix draft resumes a copy with after a
 *                           replaced token (--suffix-resume; 0: off)
 *   "chain_draft_max", "chain_long_match" integers 0 .. 16: ngram+llm / suffix+llm limits
 *                           (--chain-draft-max, --chain-long-match)
 *   "lookup_cache" string   persistent n-gram cache file (same path rule as "target")
 *   "device"       string   "cpu" or "cuda": where the target runs (--device)
 *   "device_draft" string   "cpu" or "cuda": where the draft runs (default: "device")
 *   "tensor_split" integer  0 .. 64: the target over N GPUs (0: one device; --tensor-split)
 *   "chat"         boolean  generate: the prompt is a user message in the chat template
 *   "spec_sampling" string  "rejection" or "gumbel" (--spec-sampling)
 *   "min_p"        number   [0, 1] (--min-p)
 *   "repeat_penalty" number (0, 100]; "presence_penalty", "frequency_penalty" numbers in
 *                  [-100, 100]; "repeat_last_n" integer 0 .. 4096 (llama.cpp's penalties)
 *   "draft_head"   string   trimmed draft head file (same path rule as "target")
 *   "draft_head_n" integer  >= 0: ids of it used (0: all)
 * Any other key, or a value of the wrong type or range, is an error naming the file
 * and the key.
 */
#ifndef SD_CLI_CONFIG_H
#define SD_CLI_CONFIG_H

#include <stdint.h>

#include "runtime/base/sd_base.h"
#include "runtime/engine/sd_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_config {
    char *target; /* malloc'd, resolved path, or NULL */
    char *draft;
    char *prompt;
    const char *kv_type; /* static string "f32", "f16", "q8_0", "q4_0", or NULL */
    const char *device;  /* static string "cpu"/"cuda", or NULL */
    const char *device_draft;
    int has_tensor_split;
    int32_t tensor_split;
    int has_draft_tokens, has_max_tokens, has_temp, has_top_k, has_top_p, has_seed, has_threads,
        has_ctx_size;
    int32_t draft_tokens, max_tokens, top_k, threads, ctx_size;
    float temp, top_p;
    uint64_t seed;
    /* drafting */
    char *lookup_cache; /* malloc'd, resolved path, or NULL */
    int has_draft_type, has_draft_policy, has_draft_p_min, has_draft_min, has_ngram_min,
        has_ngram_max;
    sd_draft_type draft_type;
    sd_k_policy draft_policy;
    float draft_p_min;
    int32_t draft_min, ngram_min, ngram_max;
    int has_suffix_factor, has_suffix_min_prob, has_suffix_cost;
    float suffix_factor, suffix_min_prob, suffix_cost;
    int has_suffix_resume;
    int32_t suffix_resume;
    int has_chain_draft_max, has_chain_long_match;
    int32_t chain_draft_max, chain_long_match;
    /* generate's chat mode, sampling, the draft head */
    int has_chat, chat;
    int has_spec_sampling, has_min_p, has_repeat_penalty, has_presence_penalty,
        has_frequency_penalty, has_repeat_last_n, has_draft_head_n;
    sd_spec_sampling spec_sampling;
    float min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int32_t repeat_last_n, draft_head_n;
    char *draft_head; /* malloc'd, resolved path, or NULL */
} sd_config;

/* Parse path into *cfg (zeroed first). Errors: SD_ERR_IO, SD_ERR_CONFIG (bad JSON with
 * line and column, unknown key, wrong type, out of range). */
int sd_config_load(const char *path, sd_config *cfg, sd_error *err);
void sd_config_free(sd_config *cfg); /* frees the strings; NULL accepted */

#ifdef __cplusplus
}
#endif
#endif /* SD_CLI_CONFIG_H */
