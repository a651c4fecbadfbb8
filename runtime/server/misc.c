/* runtime/server/misc.c: GET /v1/models, /health, /metrics (Prometheus text), POST
 * /tokenize and /detokenize (llama-server's bodies). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/server/server_impl.h"

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

json_t *srv_csv_set(const char *csv) {
    json_t *out = json_array();
    char *dup = csv ? strdup(csv) : NULL;
    size_t n = 0, cap = 0;
    char **items = NULL;
    if (!out || (csv && !dup)) goto oom;
    for (char *save = NULL, *t = dup ? strtok_r(dup, ",", &save) : NULL; t;
         t = strtok_r(NULL, ",", &save)) {
        if (n == cap) {
            char **p = realloc(items, (cap = cap ? 2 * cap : 8) * sizeof *p);
            if (!p) goto oom;
            items = p;
        }
        items[n++] = t;
    }
    if (n) qsort(items, n, sizeof *items, cmp_str);
    for (size_t i = 0; i < n; i++)
        if ((i == 0 || strcmp(items[i], items[i - 1])) &&
            json_array_append_new(out, json_string(items[i])))
            goto oom;
    free(items);
    free(dup);
    return out;
oom:
    free(items);
    free(dup);
    json_decref(out);
    return NULL;
}

void srv_models(sd_server *s, srv_reply *r) {
    /* llama-server's aliases (the --alias list, or the one id) and tags beside OpenAI's */
    const char *names = s->p.model_name && s->p.model_name[0] ? s->p.model_name : NULL;
    json_t *aliases = names ? srv_csv_set(names) : json_pack("[s]", s->model_name),
           *tags = srv_csv_set(s->p.model_tags);
    if (!aliases || !tags) {
        json_decref(aliases);
        json_decref(tags);
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return;
    }
    json_t *m =
        json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", s->model_name, "object", "model", "created",
                  (json_int_t)(time(NULL) - (time_t)((sd_time_ms() - s->t_start) / 1e3)),
                  "owned_by", "specdec", "aliases", aliases, "tags", tags);
    srv_json(r, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

void srv_health(sd_server *s, srv_reply *r) {
    if (atomic_load(&s->stopping))
        srv_json(r, 503, json_pack("{s:s}", "status", "stopping"));
    else
        srv_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* A llama-server-shaped summary: what its clients read from /props. */
void srv_props(sd_server *s, srv_reply *r) {
    const sd_vocab *v = sd_engine_vocab(s->e);
    const char *tmpl = s->p.chat_template ? s->p.chat_template : sd_vocab_chat_template(v);
    json_t *j =
        json_pack("{s:{s:i,s:i},s:i,s:s,s:s,s:s,s:b}", "default_generation_settings", "n_ctx",
                  (int)sd_batcher_n_ctx(s->b), "n_predict", (int)s->p.gen.n_predict, "total_slots",
                  (int)s->p.n_slots, "model_alias", s->model_name, "model_path",
                  sd_model_path(sd_engine_target(s->e)), "chat_template", tmpl ? tmpl : "chatml",
                  "speculative", sd_engine_draft(s->e) != NULL);
    /* The request defaults, under llama-server's names. */
    const sd_gen_params *g = &s->p.gen;
    json_t *params = json_pack("{s:I,s:i,s:f,s:i,s:f,s:f,s:i}", "seed", (json_int_t)g->seed,
                               "n_predict", (int)g->n_predict, "temperature", (double)g->samp.temp,
                               "top_k", (int)g->samp.top_k, "top_p", (double)g->samp.top_p, "min_p",
                               (double)g->samp.min_p, "speculative.n_max", (int)g->n_draft);
    json_t *dgs = j ? json_object_get(j, "default_generation_settings") : NULL;
    if (dgs && params)
        json_object_set_new(dgs, "params", params);
    else
        json_decref(params);
    srv_json(r, 200, j);
}

typedef srv_mbuf mbuf;

/* One metric: HELP, TYPE and the sample. */
static void metric(mbuf *m, const char *name, const char *type, const char *help, double v) {
    srv_mprintf(m, "# HELP specdec_%s %s\n# TYPE specdec_%s %s\nspecdec_%s %.17g\n", name, help,
                name, type, name, v);
}

void srv_count_done(sd_server *s, const sd_gen_stats *st) {
    const double pre = st->ttft_ms > 0 ? st->ttft_ms : st->t_prefill_ms;
    atomic_fetch_add(&s->prompt_us, (long long)(pre * 1e3));
    atomic_fetch_add(&s->predicted_us, (long long)((st->t_total_ms - pre) * 1e3));
    long long drafts = 0;
    for (int k = 1; k <= SD_MAX_DRAFT; k++)
        drafts += st->k_hist[k];
    atomic_fetch_add(&s->n_drafts, drafts);
    atomic_fetch_add(&s->n_req_passes, (long long)st->n_target_passes);
    atomic_fetch_add(&s->n_predicted, (long long)st->n_generated);
    srv_vllm_count(&s->vllm, st);
    const long long n = (long long)st->n_prompt + st->n_generated;
    long long cur = atomic_load(&s->n_tokens_max);
    while (n > cur && !atomic_compare_exchange_weak(&s->n_tokens_max, &cur, n)) {
    }
}

/* One llama-server metric (its names, "llamacpp:" prefixed), beside specdec's own. */
static void lmetric(mbuf *m, const char *name, const char *type, const char *help, double v) {
    srv_mprintf(m, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %.17g\n", name, help,
                name, type, name, v);
}

void srv_metrics(sd_server *s, srv_reply *r) {
    if (s->p.no_metrics) {
        srv_error(r, 501, "not_supported_error", NULL,
                  "the /metrics endpoint is off (start the server without --no-metrics)");
        return;
    }
    sd_batcher_stats st;
    sd_batcher_get_stats(s->b, &st);
    mbuf m = {0};
    metric(&m, "requests_submitted_total", "counter", "Generation requests accepted.",
           (double)st.n_submitted);
    metric(&m, "requests_finished_total", "counter", "Generation requests that finished.",
           (double)st.n_finished);
    metric(&m, "requests_cancelled_total", "counter",
           "Generation requests cancelled (client gone, shutdown).", (double)st.n_cancelled);
    metric(&m, "requests_rejected_total", "counter",
           "Generation requests refused at submission (bad, too long, queue full).",
           (double)st.n_rejected);
    metric(&m, "requests_running", "gauge", "Requests being generated.", (double)st.n_running);
    metric(&m, "queue_depth", "gauge", "Requests waiting for a slot or KV blocks.",
           (double)st.n_queued);
    metric(&m, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
           (double)st.n_prompt_tokens);
    metric(&m, "prefix_cache_hit_tokens_total", "counter",
           "Prompt positions reused from the prefix cache.", (double)st.n_prefix_hit_tokens);
    metric(&m, "tokens_generated_total", "counter", "Tokens generated.", (double)st.n_generated);
    metric(&m, "tokens_per_second", "gauge", "Tokens generated per second over the last 10 s.",
           st.tokens_per_s);
    metric(&m, "target_passes_total", "counter", "Target forward passes.",
           (double)st.n_target_passes);
    metric(&m, "drafted_tokens_total", "counter", "Draft tokens verified.", (double)st.n_drafted);
    metric(&m, "accepted_tokens_total", "counter", "Draft tokens accepted.", (double)st.n_accepted);
    metric(&m, "acceptance_rate", "gauge", "Accepted / drafted tokens since start.",
           st.n_drafted ? (double)st.n_accepted / (double)st.n_drafted : 0.0);
    metric(&m, "tokens_per_pass", "gauge", "Generated tokens per target pass since start.",
           st.n_target_passes ? (double)st.n_generated / (double)st.n_target_passes : 0.0);
    metric(&m, "kv_blocks_total", "gauge", "Blocks of the target's KV pool.",
           (double)st.kv.n_blocks);
    metric(&m, "kv_blocks_used", "gauge", "Target KV blocks in use (sequences or cache).",
           (double)(st.kv.n_blocks - st.kv.n_free));
    metric(&m, "kv_blocks_free", "gauge", "Target KV blocks on the free list.",
           (double)st.kv.n_free);
    metric(&m, "kv_blocks_cached_idle", "gauge",
           "Target KV blocks held only by the prefix cache (evictable).",
           (double)st.kv.n_cached_idle);
    metric(&m, "kv_block_size", "gauge", "Positions per KV block.", (double)st.kv.block_size);
    metric(&m, "kv_bytes_per_token", "gauge", "Target KV bytes per position.",
           (double)st.kv_bytes_per_token);
    metric(&m, "kv_pool_bytes", "gauge", "Bytes of the target's KV pool (every layer group).",
           (double)st.kv.storage_bytes);
    metric(&m, "kv_blocks_peak", "gauge", "Most target KV blocks in use at once.",
           (double)st.kv.n_peak_used);
    /* A grouped pool (interleaved local / global layers): the blocks above are the global
     * layers'; the local layers' own blocks, given back behind their window. */
    const int lg = st.kv.n_group > 1;
    metric(&m, "kv_local_blocks_total", "gauge",
           "Blocks of the target's local-layer group (0 without one).",
           lg ? (double)st.kv.group_blocks[1] : 0.0);
    metric(&m, "kv_local_blocks_used", "gauge", "Local-layer KV blocks in use.",
           lg ? (double)(st.kv.group_blocks[1] - st.kv.group_free[1]) : 0.0);
    metric(&m, "kv_local_blocks_peak", "gauge", "Most local-layer KV blocks in use at once.",
           lg ? (double)st.kv.group_peak_used[1] : 0.0);
    metric(&m, "kv_draft_blocks_used", "gauge", "Draft KV blocks in use.",
           (double)(st.kv_draft.n_blocks - st.kv_draft.n_free));
    metric(&m, "kv_draft_blocks_total", "gauge", "Blocks of the draft's KV pool.",
           (double)st.kv_draft.n_blocks);
    metric(&m, "kv_draft_blocks_cached_idle", "gauge",
           "Draft KV blocks held only by the prefix cache.", (double)st.kv_draft.n_cached_idle);
    metric(&m, "kv_accounting_ok", "gauge",
           "1 if the KV pools balanced at the last idle check (0: a leak, logged).",
           (double)atomic_load(&s->kv_ok));
    srv_mprintf(&m, "# HELP specdec_http_responses_total HTTP responses by status class.\n"
                    "# TYPE specdec_http_responses_total counter\n");
    for (int c = 1; c <= 5; c++)
        srv_mprintf(&m, "specdec_http_responses_total{class=\"%dxx\"} %lld\n", c,
                    (long long)atomic_load(&s->http_by_class[c]));
    /* llama-server's names over the same counters. Prompt tokens count the positions
     * evaluated; those the prefix cache gave are counted apart. */
    const double prompt_s = (double)atomic_load(&s->prompt_us) / 1e6;
    const double pred_s = (double)atomic_load(&s->predicted_us) / 1e6;
    const double n_eval = (double)(st.n_prompt_tokens - st.n_prefix_hit_tokens);
    lmetric(&m, "prompt_tokens_total", "counter", "Number of prompt tokens processed.", n_eval);
    lmetric(&m, "prompt_tokens_cached_total", "counter",
            "Number of prompt tokens reused from the prefix cache.",
            (double)st.n_prefix_hit_tokens);
    lmetric(&m, "prompt_seconds_total", "counter", "Prompt process time.", prompt_s);
    /* the finished requests' tokens, counted before their answers went out, so a client
     * that reads /metrics after its answer sees its tokens */
    const double n_pred = (double)atomic_load(&s->n_predicted);
    lmetric(&m, "tokens_predicted_total", "counter", "Number of generation tokens processed.",
            n_pred);
    lmetric(&m, "tokens_predicted_seconds_total", "counter", "Predict process time.", pred_s);
    lmetric(&m, "n_decode_total", "counter", "Total number of target passes.",
            (double)st.n_target_passes);
    lmetric(&m, "n_tokens_max", "counter", "Largest observed n_tokens (prompt + generated).",
            (double)atomic_load(&s->n_tokens_max));
    lmetric(&m, "spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.",
            (double)st.n_drafted);
    lmetric(&m, "spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
            (double)st.n_accepted);
    lmetric(&m, "spec_decode_num_drafts_total", "counter", "Target passes that verified a draft.",
            (double)atomic_load(&s->n_drafts));
    lmetric(&m, "prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
            prompt_s > 0 ? n_eval / prompt_s : 0.0);
    lmetric(&m, "predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
            pred_s > 0 ? n_pred / pred_s : 0.0);
    /* counted here, not from the batcher's statistics (those of a finished request are
     * updated after its answer may have gone out) */
    const int inflight = atomic_load(&s->n_inflight);
    lmetric(&m, "requests_processing", "gauge", "Number of requests processing.",
            inflight > st.n_queued ? (double)(inflight - st.n_queued) : 0.0);
    lmetric(&m, "requests_deferred", "gauge", "Number of requests deferred.", (double)st.n_queued);
    lmetric(&m, "n_busy_slots_per_decode", "gauge", "Average number of busy slots per pass.",
            st.n_target_passes ? (double)atomic_load(&s->n_req_passes) / (double)st.n_target_passes
                               : 0.0);
    srv_vllm_write(&m, &s->vllm, &st, s->model_name);
    if (m.oom) {
        free(m.b);
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return;
    }
    r->hdr_name = "Process-Start-Time-Unix";
    snprintf(r->hdr_value, sizeof r->hdr_value, "%.0f", s->t_start_unix);
    r->status = 200;
    r->type = "text/plain; version=0.0.4";
    r->body = m.b;
    r->len = m.len;
}

void srv_tokenize(sd_server *s, const char *body, size_t len, srv_reply *r) {
    json_t *o = srv_parse_object(body, len, r);
    if (!o) return;
    json_t *c = json_object_get(o, "content"), *as = json_object_get(o, "add_special");
    json_t *wp = json_object_get(o, "with_pieces");
    if (!c || !json_is_string(c)) {
        json_decref(o);
        srv_error(r, 400, "invalid_request_error", "content", "'content' must be a string");
        return;
    }
    if ((as && !json_is_boolean(as)) || (wp && !json_is_boolean(wp))) {
        /* The name is chosen before o (which holds as and wp) is released. */
        const char *bad = as && !json_is_boolean(as) ? "add_special" : "with_pieces";
        json_decref(o);
        srv_error(r, 400, "invalid_request_error", bad, "'%s' must be true or false", bad);
        return;
    }
    const sd_vocab *v = sd_engine_vocab(s->e);
    unsigned flags = SD_VOCAB_PARSE_SPECIAL;
    if (as && json_is_true(as)) flags |= SD_VOCAB_ADD_SPECIAL;
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    if (sd_vocab_tokenize(v, json_string_value(c), json_string_length(c), flags, &ids, &n, &err)) {
        json_decref(o);
        srv_error(r, 400, "invalid_request_error", "content", "%s", err.msg);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (wp && json_is_true(wp)) {
            char piece[256];
            int pl = sd_vocab_token_to_piece(v, ids[i], 0, piece, sizeof piece);
            if (pl < 0) pl = 0;
            if (pl > (int)sizeof piece) pl = (int)sizeof piece;
            json_t *ps = json_stringn(piece, (size_t)pl);
            if (!ps) { /* not UTF-8 alone (a byte-fallback token): its bytes, as llama-server */
                ps = json_array();
                for (int k = 0; k < pl; k++)
                    json_array_append_new(ps, json_integer((unsigned char)piece[k]));
            }
            json_array_append_new(arr, json_pack("{s:i,s:o}", "id", (int)ids[i], "piece", ps));
        } else {
            json_array_append_new(arr, json_integer(ids[i]));
        }
    }
    free(ids);
    json_decref(o);
    srv_json(r, 200, json_pack("{s:o}", "tokens", arr));
}

void srv_detokenize(sd_server *s, const char *body, size_t len, srv_reply *r) {
    json_t *o = srv_parse_object(body, len, r);
    if (!o) return;
    json_t *t = json_object_get(o, "tokens");
    if (!t || !json_is_array(t)) {
        json_decref(o);
        srv_error(r, 400, "invalid_request_error", "tokens", "'tokens' must be an array of ids");
        return;
    }
    const sd_vocab *v = sd_engine_vocab(s->e);
    const int32_t nv = sd_vocab_n_tokens(v);
    const size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(o);
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(t, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= nv) {
            free(ids);
            json_decref(o);
            srv_error(r, 400, "invalid_request_error", "tokens",
                      "'tokens[%zu]' must be a token id in 0 .. %d", i, nv - 1);
            return;
        }
        ids[i] = (int32_t)json_integer_value(e);
    }
    json_decref(o);
    char *text = NULL;
    size_t tl = 0;
    sd_error err = {0};
    int rc = sd_vocab_detokenize(v, ids, n, 0, &text, &tl, &err);
    free(ids);
    if (rc) {
        srv_error(r, 400, "invalid_request_error", "tokens", "%s", err.msg);
        return;
    }
    /* Invalid UTF-8 (a cut multi-byte character) cannot be a JSON string as it is. */
    json_t *js = json_stringn(text, tl);
    free(text);
    srv_json(r, 200, json_pack("{s:o}", "content", js ? js : json_string("\xef\xbf\xbd")));
}
