/* runtime/server/metrics_vllm.c: /metrics under vLLM's names ("vllm:" prefixed), beside
 * specdec's and llama-server's, for the dashboards and scripts written against vLLM.
 *
 * Counters (Prometheus text names, "_total" written):
 *   vllm:spec_decode_num_drafts_total          passes that verified a draft (k >= 1)
 *   vllm:spec_decode_num_draft_tokens_total    draft tokens verified
 *   vllm:spec_decode_num_accepted_tokens_total draft tokens accepted (and emitted)
 *   vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}
 *                                              accepted at draft position i (0-based)
 *   vllm:request_success_total{finished_reason="stop"|"length"|"abort"}
 *   vllm:prompt_tokens_total, vllm:generation_tokens_total (the batcher's counts)
 * Gauges: vllm:num_requests_running, vllm:num_requests_waiting.
 * Histograms (seconds, vLLM's bucket bounds): vllm:time_to_first_token_seconds (from the
 * request's submission, queue wait included), vllm:request_time_per_output_token_seconds
 * ((end - first token) / (tokens - 1), requests of 2 tokens or more),
 * vllm:e2e_request_latency_seconds.
 * The spec_decode counters, request_success and the histograms count each finished choice
 * (a sequence: n > 1 gives n) from its own statistics, so they sum exactly what the answers'
 * "speculative" blocks report. Every sample is labelled model_name and engine="0".
 * Not written: vllm:inter_token_latency_seconds (vLLM observes it per engine step per
 * request; the server sees a request's totals only at its end).
 */
#include <stdio.h>
#include <string.h>

#include "runtime/server/server_impl.h"

static const double k_ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                   20.0,  40.0,  80.0, 160,  640,  2560};
static const double k_tpot_le[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                   0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double k_e2e_le[] = {0.3,  0.5,  0.8,   1.0,  1.5,   2.0,  2.5,
                                  5.0,  10.0, 15.0,  20.0, 30.0,  40.0, 50.0,
                                  60.0, 120., 240.0, 480., 960.0, 1920, 7680};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(N_OF(k_ttft_le) <= SRV_HIST_MAX && N_OF(k_tpot_le) <= SRV_HIST_MAX &&
                   N_OF(k_e2e_le) <= SRV_HIST_MAX,
               "a histogram has more bounds than srv_hist holds");

static void observe(srv_hist *h, const double *le, size_t n_le, double secs) {
    size_t i = 0;
    while (i < n_le && secs > le[i])
        i++;
    atomic_fetch_add(&h->n[i], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, (long long)(secs * 1e6 + 0.5));
}

void srv_vllm_count(srv_vllm *v, const sd_gen_stats *st) {
    long long drafts = 0;
    for (int k = 1; k <= SD_MAX_DRAFT; k++)
        drafts += st->k_hist[k];
    atomic_fetch_add(&v->drafts, drafts);
    atomic_fetch_add(&v->draft_tokens, (long long)st->n_drafted);
    atomic_fetch_add(&v->accepted, (long long)st->n_accepted);
    for (int i = 0; i < SD_MAX_DRAFT; i++)
        if (st->accepted_at[i]) atomic_fetch_add(&v->accepted_at[i], (long long)st->accepted_at[i]);
    int reason = 2; /* abort: cancelled, or ended by an error */
    if (st->stop == SD_STOP_EOS || st->stop == SD_STOP_STRING || st->stop == SD_STOP_GRAMMAR)
        reason = 0;
    if (st->stop == SD_STOP_MAX_TOKENS || st->stop == SD_STOP_CONTEXT) reason = 1;
    atomic_fetch_add(&v->success[reason], 1);
    const double ttft = st->ttft_ms > 0 ? st->ttft_ms : st->t_prefill_ms;
    if (st->n_generated > 0) observe(&v->ttft, k_ttft_le, N_OF(k_ttft_le), ttft / 1e3);
    if (st->n_generated > 1)
        observe(&v->tpot, k_tpot_le, N_OF(k_tpot_le),
                (st->t_total_ms - ttft) / 1e3 / (double)(st->n_generated - 1));
    observe(&v->e2e, k_e2e_le, N_OF(k_e2e_le), st->t_total_ms / 1e3);
}

/* The model name as a label value: backslash, quote and newline escaped. */
static void label_value(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; s && *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            out[o++] = '\\';
            out[o++] = *s;
        } else if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
}

static void head(srv_mbuf *m, const char *name, const char *type, const char *help) {
    srv_mprintf(m, "# HELP vllm:%s %s\n# TYPE vllm:%s %s\n", name, help, name, type);
}

static void one(srv_mbuf *m, const char *name, const char *type, const char *help,
                const char *labels, long long v) {
    head(m, name, type, help);
    srv_mprintf(m, "vllm:%s{%s} %lld\n", name, labels, v);
}

static void hist(srv_mbuf *m, const char *name, const char *help, const char *labels,
                 const srv_hist *h, const double *le, size_t n_le) {
    head(m, name, "histogram", help);
    long long cum = 0;
    for (size_t i = 0; i < n_le; i++) {
        cum += atomic_load(&h->n[i]);
        srv_mprintf(m, "vllm:%s_bucket{%s,le=\"%g\"} %lld\n", name, labels, le[i], cum);
    }
    cum += atomic_load(&h->n[n_le]);
    srv_mprintf(m, "vllm:%s_bucket{%s,le=\"+Inf\"} %lld\n", name, labels, cum);
    srv_mprintf(m, "vllm:%s_count{%s} %lld\n", name, labels, (long long)atomic_load(&h->count));
    srv_mprintf(m, "vllm:%s_sum{%s} %.6f\n", name, labels, (double)atomic_load(&h->sum_us) / 1e6);
}

void srv_vllm_write(srv_mbuf *m, const srv_vllm *v, const sd_batcher_stats *st,
                    const char *model_name) {
    char name[256], labels[320];
    label_value(name, sizeof name, model_name);
    snprintf(labels, sizeof labels, "engine=\"0\",model_name=\"%s\"", name);
    one(m, "num_requests_running", "gauge", "Number of requests in model execution batches.",
        labels, st->n_running);
    one(m, "num_requests_waiting", "gauge", "Number of requests waiting to be processed.", labels,
        st->n_queued);
    one(m, "prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels,
        (long long)st->n_prompt_tokens);
    one(m, "generation_tokens_total", "counter", "Number of generation tokens processed.", labels,
        (long long)st->n_generated);
    static const char *const reasons[3] = {"stop", "length", "abort"};
    head(m, "request_success_total", "counter", "Count of successfully processed requests.");
    for (int i = 0; i < 3; i++)
        srv_mprintf(m, "vllm:request_success_total{%s,finished_reason=\"%s\"} %lld\n", labels,
                    reasons[i], (long long)atomic_load(&v->success[i]));
    one(m, "spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", labels,
        atomic_load(&v->drafts));
    one(m, "spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", labels,
        atomic_load(&v->draft_tokens));
    one(m, "spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.", labels,
        atomic_load(&v->accepted));
    head(m, "spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.");
    for (int i = 0; i < SD_MAX_DRAFT; i++)
        srv_mprintf(m,
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total{%s,position=\"%d\"} %lld\n",
                    labels, i, (long long)atomic_load(&v->accepted_at[i]));
    hist(m, "time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
         &v->ttft, k_ttft_le, N_OF(k_ttft_le));
    hist(m, "request_time_per_output_token_seconds",
         "Histogram of time_per_output_token_seconds per request.", labels, &v->tpot, k_tpot_le,
         N_OF(k_tpot_le));
    hist(m, "e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
         labels, &v->e2e, k_e2e_le, N_OF(k_e2e_le));
}
