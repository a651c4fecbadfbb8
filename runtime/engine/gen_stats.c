/*
 * runtime/engine/gen_stats.c: a generation's defaults (sd_gen_default_params) and its
 * statistics (sd_stop_reason_str, the sd_stats_* figures: one definition, used by
 * generate's output, --json, bench, the server's speculative object and /metrics).
 */
#include "runtime/engine/sd_engine.h"

#include <string.h>

sd_gen_params sd_gen_default_params(void) {
    sd_gen_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.n_draft = 4;
    p.samp = sd_sampling_default_params();
    p.seed = 42;
    p.n_stop_ids = 0;
    p.draft_type = SD_DRAFT_AUTO;
    p.k_policy = SD_K_FIXED;
    p.draft_p_min = 0.0f;
    p.draft_min = 0;
    p.clock = SD_CLOCK_AUTO;
    return p;
}

const char *sd_stop_reason_str(sd_stop_reason r) {
    switch (r) {
    case SD_STOP_NONE:
        return "none";
    case SD_STOP_EOS:
        return "eos";
    case SD_STOP_MAX_TOKENS:
        return "max_tokens";
    case SD_STOP_CONTEXT:
        return "context";
    case SD_STOP_STRING:
        return "stop";
    case SD_STOP_CANCEL:
        return "cancelled";
    case SD_STOP_GRAMMAR:
        return "grammar";
    }
    return "unknown";
}

double sd_stats_acceptance_rate(const sd_gen_stats *s) {
    return s->n_drafted > 0 ? (double)s->n_accepted / s->n_drafted : 0.0;
}

double sd_stats_accept_at(const sd_gen_stats *s, int32_t i) {
    if (i < 0 || i >= SD_MAX_DRAFT || s->drafted_at[i] == 0) return 0.0;
    return (double)s->accepted_at[i] / s->drafted_at[i];
}

double sd_stats_mean_k(const sd_gen_stats *s) {
    int64_t n = 0, sum = 0;
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++) {
        n += s->k_hist[k];
        sum += (int64_t)k * s->k_hist[k];
    }
    return n > 0 ? (double)sum / (double)n : 0.0;
}

double sd_stats_tokens_per_pass(const sd_gen_stats *s) {
    return s->n_target_passes > 0 ? (double)(s->n_generated + s->n_stop_tokens) / s->n_target_passes
                                  : 0.0;
}

void sd_stats_add(sd_gen_stats *sum, const sd_gen_stats *s) {
    sum->n_prompt += s->n_prompt;
    sum->n_prompt_cached += s->n_prompt_cached;
    sum->n_generated += s->n_generated;
    sum->n_target_passes += s->n_target_passes;
    sum->n_stop_tokens += s->n_stop_tokens;
    sum->n_drafted += s->n_drafted;
    sum->n_accepted += s->n_accepted;
    for (int32_t i = 0; i < SD_MAX_DRAFT; i++) {
        sum->drafted_at[i] += s->drafted_at[i];
        sum->accepted_at[i] += s->accepted_at[i];
    }
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++)
        sum->k_hist[k] += s->k_hist[k];
    sum->t_prefill_ms += s->t_prefill_ms;
    sum->t_draft_ms += s->t_draft_ms;
    sum->t_verify_ms += s->t_verify_ms;
    sum->t_sample_ms += s->t_sample_ms;
    sum->t_total_ms += s->t_total_ms;
    sum->ttft_ms += s->ttft_ms;
    sum->t_first_ms += s->t_first_ms;
    sum->n_off_passes += s->n_off_passes;
    sum->t_off_ms += s->t_off_ms;
    sum->n_switch_off += s->n_switch_off;
    sum->n_probes += s->n_probes;
    sum->n_passes_lookup += s->n_passes_lookup;
    sum->n_drafted_lookup += s->n_drafted_lookup;
    sum->n_accepted_lookup += s->n_accepted_lookup;
}

double sd_stats_tokens_per_s(const sd_gen_stats *s) {
    double t = s->t_total_ms - s->t_prefill_ms;
    return t > 0.0 ? s->n_generated / (t * 1e-3) : 0.0;
}

double sd_stats_itl_ms(const sd_gen_stats *s) {
    return s->n_generated > 1 ? (s->t_total_ms - s->t_first_ms) / (s->n_generated - 1) : 0.0;
}
