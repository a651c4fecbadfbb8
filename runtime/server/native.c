/* runtime/server/native.c: llama-server's own shapes beside the OpenAI ones: POST
 * /completion (its request fields, its result object, its stream of result chunks), GET
 * /slots (read-only) and POST /apply-template. A /completion runs through the same path
 * as /v1/completions (api.c: one submission to the batcher, the same callback); only the
 * answer's shape differs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/server/server_impl.h"

static int bad(srv_reply *r, const char *key, const char *what) {
    srv_error(r, 400, "invalid_request_error", key, "'%s' %s", key, what);
    return -1;
}

static json_t *opt(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* An integer field in [lo, hi]: 0 absent, 1 read, -1 a 400 reply. */
static int opt_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, srv_reply *r) {
    json_t *v = opt(o, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        srv_error(r, 400, "invalid_request_error", key, "'%s' must be an integer in %lld .. %lld",
                  key, (long long)lo, (long long)hi);
        return -1;
    }
    *out = json_integer_value(v);
    return 1;
}

int srv_native_parse(json_t *o, sd_gen_params *gp, int *return_tokens, int *post_probs,
                     json_t **fields, srv_reply *r) {
    json_t *v;
    if ((v = opt(o, "return_tokens"))) {
        if (!json_is_boolean(v)) return bad(r, "return_tokens", "must be true or false");
        *return_tokens = json_is_true(v);
    }
    /* cache_prompt: a request's output is the same with or without a cached prefix (the
     * batcher's rows are batch-invariant), so either value gives the same answer; the
     * prefix cache stays a server setting (--no-prefix-cache). */
    if ((v = opt(o, "cache_prompt")) && !json_is_boolean(v))
        return bad(r, "cache_prompt", "must be true or false");
    /* id_slot: the batcher picks the sequence; the answer does not depend on it. */
    int64_t i = 0;
    if (opt_int(o, "id_slot", -1, SD_MAX_SEQ, &i, r) < 0) return -1;
    int got;
    if ((got = opt_int(o, "speculative.n_max", 0, SD_MAX_DRAFT, &i, r)) < 0) return -1;
    if (got) gp->n_draft = (int32_t)i;
    if ((got = opt_int(o, "speculative.n_min", 0, SD_MAX_DRAFT, &i, r)) < 0) return -1;
    if (got) gp->draft_min = (int32_t)i;
    if ((v = opt(o, "speculative.p_min"))) {
        if (!json_is_number(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 1))
            return bad(r, "speculative.p_min", "must be a number in 0 .. 1");
        gp->draft_p_min = (float)json_number_value(v);
    }
    /* n_probs: each emitted token's logprob and the n most probable of its row (the
     * target's distribution, as the OpenAI logprobs; logprobs.c). */
    if ((v = opt(o, "n_probs"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > SD_MAX_TOP_LOGPROBS)
            return bad(r, "n_probs", "must be an integer in 0 .. 20");
        if (json_integer_value(v) > 0) {
            gp->logprobs = 1;
            gp->top_logprobs = (int32_t)json_integer_value(v);
        }
    }
    if ((v = opt(o, "post_sampling_probs"))) {
        if (!json_is_boolean(v)) return bad(r, "post_sampling_probs", "must be true or false");
        *post_probs = json_is_true(v);
    }
    if ((v = opt(o, "response_fields"))) {
        if (!json_is_array(v)) return bad(r, "response_fields", "must be an array of strings");
        size_t k;
        json_t *e;
        json_array_foreach(v, k, e) {
            if (!json_is_string(e)) return bad(r, "response_fields", "must hold strings");
        }
        if (json_array_size(v) > 0) *fields = json_incref(v); /* []: every field */
    }
    return 0;
}

static const char *stop_type(sd_stop_reason st) {
    switch (st) {
    case SD_STOP_EOS:
    case SD_STOP_GRAMMAR: /* the grammar's text is complete: an end, as EOS */
        return "eos";
    case SD_STOP_STRING:
        return "word";
    case SD_STOP_MAX_TOKENS:
    case SD_STOP_CONTEXT:
        return "limit";
    default:
        return "none";
    }
}

static double per(double a, double b) {
    return b > 0 && isfinite(a) ? a / b : 0.0;
}

static json_t *ids_json(const char *toks, size_t bytes) {
    json_t *a = json_array();
    for (size_t k = 0; k + sizeof(int32_t) <= bytes; k += sizeof(int32_t)) {
        int32_t id;
        memcpy(&id, toks + k, sizeof id);
        json_array_append_new(a, json_integer(id));
    }
    return a;
}

static json_t *text_json(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    return j ? j : json_string("");
}

/* What the request ran with, in llama-server's names. adaptive_target / adaptive_decay
 * are llama.cpp's adaptive-p sampler, which specdec does not have: the values that mean
 * "off" (target < 0). */
static json_t *settings(const srv_gen *g) {
    const sd_gen_params *p = &g->gp;
    json_t *j = json_pack(
        "{s:i,s:I,s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:b,s:b,s:i,s:f,s:f}", "n_predict",
        (int)p->n_predict, "seed", (json_int_t)p->seed, "temperature", (double)p->samp.temp,
        "top_k", (int)p->samp.top_k, "top_p", (double)p->samp.top_p, "min_p", (double)p->samp.min_p,
        "repeat_penalty", (double)p->samp.repeat_penalty, "repeat_last_n",
        (int)p->samp.repeat_last_n, "presence_penalty", (double)p->samp.presence_penalty,
        "frequency_penalty", (double)p->samp.freq_penalty, "ignore_eos", p->ignore_eos, "stream",
        g->stream, "n_probs", p->logprobs ? (int)p->top_logprobs : 0, "adaptive_target", -1.0,
        "adaptive_decay", 0.9);
    if (!j) return json_object();
    json_object_set_new(j, "speculative.n_max", json_integer(p->n_draft));
    json_object_set_new(j, "speculative.n_min", json_integer(p->draft_min));
    json_object_set_new(j, "speculative.p_min", json_real(p->draft_p_min));
    json_object_set_new(j, "model", json_string(g->srv->model_name));
    json_object_set_new(j, "logit_bias", g->bias_json ? json_incref(g->bias_json) : json_array());
    return j;
}

/* llama-server's timings of choice i: prompt_n counts the prompt positions evaluated
 * (cache_n came from the prefix cache), draft_n / draft_n_accepted the draft tokens. */
json_t *srv_native_timings(const srv_gen *g, int32_t i) {
    const sd_gen_stats *st = &g->ch[i].st;
    const int32_t cached = st->n_prompt_cached, prompt_n = g->ch[i].n_prompt - cached;
    /* The prompt's time runs to the first token (it comes from the prompt's last pass);
     * the rate of the rest is over the n - 1 steps after it, as llama-server counts. */
    const double pre = st->ttft_ms > 0 ? st->ttft_ms : st->t_prefill_ms;
    const double prompt_ms = pre, pred_ms = st->t_total_ms - pre;
    const int32_t steps = st->n_generated > 1 ? st->n_generated - 1 : 0;
    json_t *j = json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:i,s:i}", "cache_n", (int)cached,
                          "prompt_n", (int)prompt_n, "prompt_ms", prompt_ms, "prompt_per_token_ms",
                          per(prompt_ms, prompt_n), "prompt_per_second",
                          per(1e3 * prompt_n, prompt_ms), "predicted_n", (int)st->n_generated,
                          "predicted_ms", pred_ms, "predicted_per_token_ms", per(pred_ms, steps),
                          "predicted_per_second", steps ? per(1e3 * steps, pred_ms) : 0.0,
                          "draft_n", (int)st->n_drafted, "draft_n_accepted", (int)st->n_accepted);
    return j ? j : json_object();
}

/* The whole result of choice i (content and tokens as given). */
static json_t *result(const srv_gen *g, int32_t i, json_t *content, json_t *tokens) {
    const srv_choice *c = &g->ch[i];
    const int32_t n_gen = (int32_t)(c->toks_len / sizeof(int32_t));
    json_t *j = json_pack(
        "{s:i,s:o,s:o,s:i,s:b,s:s,s:i,s:i,s:o,s:b,s:b,s:s,s:s,s:i,s:o}", "index", (int)i, "content",
        content, "tokens", tokens, "id_slot", -1, "stop", 1, "model", g->srv->model_name,
        "tokens_predicted", (int)n_gen, "tokens_evaluated", (int)c->n_prompt, "generation_settings",
        settings(g), "has_new_line", c->text && memchr(c->text, '\n', c->len) != NULL, "truncated",
        c->stop == SD_STOP_CONTEXT || (c->ctx_limited && c->stop == SD_STOP_MAX_TOKENS),
        "stop_type", stop_type(c->stop), "stopping_word", "", "tokens_cached",
        (int)(c->n_prompt + n_gen), "timings", srv_native_timings(g, i));
    if (j && g->prompt_text)
        json_object_set_new(j, "prompt", text_json(g->prompt_text, strlen(g->prompt_text)));
    return j ? j : json_object();
}

/* The fields a request named ("a/b" reaches into b of a), each under its path. */
static json_t *project(json_t *full, json_t *fields) {
    json_t *out = json_object();
    size_t k;
    json_t *e;
    json_array_foreach(fields, k, e) {
        const char *path = json_string_value(e);
        json_t *at = full;
        char part[128];
        for (const char *p = path; at && *p;) {
            const char *slash = strchr(p, '/');
            const size_t n = slash ? (size_t)(slash - p) : strlen(p);
            if (n >= sizeof part) {
                at = NULL;
                break;
            }
            memcpy(part, p, n);
            part[n] = '\0';
            at = json_is_object(at) ? json_object_get(at, part) : NULL;
            p = slash ? slash + 1 : p + n;
        }
        if (at && at != full) json_object_set(out, path, at);
    }
    json_decref(full);
    return out;
}

json_t *srv_native_bias_json(const sd_vocab *v, const sd_gen_params *gp) {
    json_t *a = json_array();
    if (!a) return NULL;
    for (int32_t i = 0; i < gp->samp.n_logit_bias; i++)
        json_array_append_new(a, json_pack("{s:i,s:f}", "token", (int)gp->samp.logit_bias[i].id,
                                           "bias", (double)gp->samp.logit_bias[i].bias));
    if (gp->ignore_eos) {
        const int32_t eog[3] = {sd_vocab_eos(v), sd_vocab_eot(v), sd_vocab_eom(v)};
        for (int k = 0; k < 3; k++) {
            int dup = eog[k] < 0;
            for (int j = 0; j < k; j++)
                dup |= eog[j] == eog[k];
            if (!dup)
                json_array_append_new(a, json_pack("{s:i,s:n}", "token", (int)eog[k], "bias"));
        }
    }
    return a;
}

char *srv_native_prompt_text(const sd_vocab *v, const int32_t *ids, int32_t n) {
    char *out = NULL, piece[256];
    size_t len = 0, cap = 0;
    for (int32_t i = 0; i < n; i++) {
        int pl = sd_vocab_token_to_piece(v, ids[i], SD_VOCAB_UNPARSE_SPECIAL, piece, sizeof piece);
        if (pl < 0) continue;
        if (pl > (int)sizeof piece) pl = (int)sizeof piece;
        if (sd_buf_append(&out, &len, &cap, piece, (size_t)pl)) {
            free(out);
            return NULL;
        }
    }
    if (sd_buf_append(&out, &len, &cap, "", 1)) { /* the NUL */
        free(out);
        return NULL;
    }
    return out;
}

static void sse_put(srv_gen *g, json_t *j) {
    char *t = j ? json_dumps(j, SRV_JSON_FLAGS) : NULL;
    json_decref(j);
    if (!t || sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, "data: ", 6) ||
        sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, t, strlen(t)) ||
        sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, "\n\n", 2))
        g->oom = 1;
    free(t);
}

void srv_native_event(srv_gen *g, const sd_req_event *ev) {
    const srv_choice *c = &g->ch[ev->index];
    if (ev->len || ev->n_tokens > 0) {
        json_t *toks = json_array();
        for (int32_t k = 0; k < ev->n_tokens; k++)
            json_array_append_new(toks, json_integer(ev->tokens[k]));
        json_t *j = json_pack("{s:i,s:o,s:o,s:b,s:i,s:i,s:i}", "index", (int)ev->index, "content",
                              text_json(ev->text, ev->len), "tokens", toks, "stop", 0, "id_slot",
                              -1, "tokens_predicted", (int)(c->toks_len / sizeof(int32_t)),
                              "tokens_evaluated", (int)c->n_prompt);
        if (j && g->logprobs && ev->logprobs && ev->n_tokens > 0)
            json_object_set_new(j, "completion_probabilities",
                                srv_native_probs_json(sd_engine_vocab(g->srv->e), ev->logprobs,
                                                      ev->n_tokens, g->post_probs));
        sse_put(g, j);
    }
    if (ev->done) {
        json_t *j = result(g, ev->index, json_string(""), json_array());
        sse_put(g, g->fields ? project(j, g->fields) : j);
    }
}

void srv_native_final(srv_gen *g, srv_reply *r) {
    json_t *all = json_array();
    for (int32_t i = 0; i < g->n_choices; i++) {
        const srv_choice *c = &g->ch[i];
        json_t *j = result(g, i, text_json(c->text, c->len),
                           g->return_tokens ? ids_json(c->toks, c->toks_len) : json_array());
        if (g->logprobs)
            json_object_set_new(
                j, "completion_probabilities",
                srv_native_probs_json(sd_engine_vocab(g->srv->e), c->lp, c->n_lp, g->post_probs));
        json_array_append_new(all, g->fields ? project(j, g->fields) : j);
    }
    if (g->n_choices == 1) {
        json_t *one = json_incref(json_array_get(all, 0));
        json_decref(all);
        srv_json(r, 200, one);
    } else {
        srv_json(r, 200, all);
    }
}

void srv_slots(sd_server *s, srv_reply *r) {
    if (s->p.no_slots) {
        r->code = "not_supported";
        srv_error(r, 501, "not_supported_error", NULL,
                  "the /slots endpoint is off (start the server without --no-slots)");
        return;
    }
    sd_batcher_stats st;
    sd_batcher_get_stats(s->b, &st);
    json_t *a = json_array();
    /* The batcher keeps no fixed request-to-slot map that a client could use; the slots
     * report how many sequences are busy (the first n_running). */
    for (int32_t i = 0; i < s->p.n_slots; i++)
        json_array_append_new(a, json_pack("{s:i,s:i,s:b,s:b}", "id", (int)i, "n_ctx",
                                           (int)sd_batcher_n_ctx(s->b), "is_processing",
                                           i < st.n_running, "speculative",
                                           sd_engine_draft(s->e) != NULL));
    srv_json(r, 200, a);
}

void srv_apply_template(sd_server *s, const char *body, size_t len, srv_reply *r) {
    json_t *o = srv_parse_object(body, len, r);
    if (!o) return;
    char *out = NULL;
    size_t out_len = 0;
    if (srv_chat_text(s, o, 1, &out, &out_len, r) == 0)
        srv_json(r, 200, json_pack("{s:o}", "prompt", text_json(out, out_len)));
    free(out);
    json_decref(o);
}
