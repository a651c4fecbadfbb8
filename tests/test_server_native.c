/*
 * tests/test_server_native.c: `specdec serve`'s llama-server surface (runtime/server/
 * native.c and the fields beside the OpenAI ones), end to end over curl on 127.0.0.1
 * with a port the server picks.
 *
 * References are independent of the answer checked: the native /completion's text equals
 * /v1/completions' for the same greedy request, and its token ids detokenize (through
 * /detokenize) to that text (less the leading space a first piece loses); the counts come from
 * /tokenize; with a draft the greedy text equals the draft-less server's; cached positions are
 * whole KV blocks below the prompt's length, and llama-server's metric names sum what the answers
 * reported; the chatml text of /apply-template is written out here; byte-fallback pieces
 * concatenate to the UTF-8 bytes of the character.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/server/sd_server.h"
#include "server_util.h"
#include "testutil.h"

#define NT_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define NT_DRAFT  SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"
#define NT_PROMPT "Once upon a time, there was a little girl named Lily who"
#define NT_LONG_PROMPT                                                                             \
    NT_PROMPT " loved to play outside in the park with her big red ball. One day she met a "       \
              "small dog who wanted to play too"

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(server_native, .init = setup, .fini = teardown, .timeout = 300);

static json_t *req(const srv *s, const char *method, const char *path, const char *body, int want) {
    char *o = NULL;
    const int code = http_h(s, method, path, body, &o, NULL);
    cr_assert_eq(code, want, "%s %s: status %d, expected %d: %s", method, path, code, want, o);
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j, "%s %s: not JSON: %s", method, path, o);
    free(o);
    return j;
}

static int64_t jint(json_t *o, const char *path) {
    json_t *v = o;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "/"); k; k = strtok(NULL, "/"))
        v = json_object_get(v, k);
    cr_assert(json_is_integer(v), "%s is not an integer", path);
    return json_integer_value(v);
}

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    cr_assert(json_is_string(v), "%s is not a string", key);
    return json_string_value(v);
}

/* The prompt's token count with BOS, from /tokenize. */
static int64_t n_tokens(const srv *s, const char *text) {
    char body[512];
    snprintf(body, sizeof body, "{\"content\":\"%s\",\"add_special\":true}", text);
    json_t *t = req(s, "POST", "/tokenize", body, 200);
    const int64_t n = (int64_t)json_array_size(json_object_get(t, "tokens"));
    json_decref(t);
    return n;
}

Test(server_native, completion_matches_v1_and_its_tokens) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 2");
    json_t *v1 = req(&s, "POST", "/v1/completions",
                     "{\"prompt\":\"" NT_PROMPT "\",\"max_tokens\":16,\"temperature\":0}", 200);
    const char *want = json_string_value(
        json_object_get(json_array_get(json_object_get(v1, "choices"), 0), "text"));
    cr_assert_not_null(want);
    json_t *r = req(&s, "POST", "/completion",
                    "{\"prompt\":\"" NT_PROMPT
                    "\",\"n_predict\":16,\"temperature\":0,\"return_tokens\":true}",
                    200);
    cr_expect_str_eq(jstr(r, "content"), want);
    cr_expect_eq(jint(r, "tokens_predicted"), 16);
    cr_expect_eq(jint(r, "timings/predicted_n"), 16);
    const int64_t n_prompt = n_tokens(&s, NT_PROMPT);
    cr_expect_eq(jint(r, "tokens_evaluated"), n_prompt);
    cr_expect_eq(jint(r, "timings/prompt_n") + jint(r, "timings/cache_n"), n_prompt);
    cr_expect_str_eq(jstr(r, "stop_type"), "limit");
    cr_expect(json_is_false(json_object_get(r, "truncated")));
    cr_expect(json_is_true(json_object_get(r, "stop")));
    cr_expect_eq(jint(r, "generation_settings/n_predict"), 16);
    /* The ids detokenize to the text. */
    json_t *ids = json_object_get(r, "tokens");
    cr_assert_eq(json_array_size(ids), 16);
    char *ids_s = json_dumps(ids, JSON_COMPACT), body[2048];
    snprintf(body, sizeof body, "{\"tokens\":%s}", ids_s);
    free(ids_s);
    json_t *d = req(&s, "POST", "/detokenize", body, 200);
    /* (detokenizing from the start drops the first piece's leading space) */
    const char *dt = jstr(d, "content");
    cr_expect_str_eq(dt, want + (want[0] == ' ' && dt[0] != ' '));
    /* Without return_tokens: an empty list; response_fields: only those. */
    json_t *r2 = req(&s, "POST", "/completion",
                     "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":4,\"temperature\":0,"
                     "\"response_fields\":[\"content\",\"generation_settings/n_predict\"]}",
                     200);
    cr_expect_eq(json_object_size(r2), 2);
    cr_expect_eq(json_integer_value(json_object_get(r2, "generation_settings/n_predict")), 4);
    cr_expect_eq(strncmp(jstr(r2, "content"), want, strlen(jstr(r2, "content"))), 0);
    /* n_probs: out of range refused by name; else each token's logprob and the n most
     * probable of its row, the values the OpenAI route's logprobs give for the request. */
    json_t *e = req(&s, "POST", "/completion", "{\"prompt\":\"x\",\"n_probs\":21}", 400);
    cr_expect_str_eq(jstr(json_object_get(e, "error"), "param"), "n_probs");
    json_t *np = req(&s, "POST", "/completion",
                     "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":3,\"temperature\":0,"
                     "\"n_probs\":3}",
                     200);
    json_t *oa = req(&s, "POST", "/v1/completions",
                     "{\"prompt\":\"" NT_PROMPT "\",\"max_tokens\":3,\"temperature\":0,"
                     "\"logprobs\":3}",
                     200);
    json_t *cp = json_object_get(np, "completion_probabilities");
    json_t *tl = json_object_get(
        json_object_get(json_array_get(json_object_get(oa, "choices"), 0), "logprobs"),
        "token_logprobs");
    cr_assert_eq(json_array_size(cp), 3);
    cr_assert_eq(json_array_size(tl), 3);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(np, "generation_settings"), "n_probs")),
        3);
    for (size_t i = 0; i < 3; i++) {
        json_t *en = json_array_get(cp, i), *top = json_object_get(en, "top_logprobs");
        cr_assert_eq(json_array_size(top), 3);
        const double lp = json_number_value(json_object_get(en, "logprob"));
        cr_expect_leq(lp, 0.0);
        cr_expect_eq(lp, json_number_value(json_array_get(tl, i)), "token %zu", i);
        /* greedy: the emitted token is the row's most probable */
        cr_expect_eq(json_integer_value(json_object_get(en, "id")),
                     json_integer_value(json_object_get(json_array_get(top, 0), "id")));
        for (size_t t = 1; t < 3; t++)
            cr_expect_geq(json_number_value(json_object_get(json_array_get(top, t - 1), "logprob")),
                          json_number_value(json_object_get(json_array_get(top, t), "logprob")));
    }
    json_decref(np);
    json_decref(oa);
    json_decref(v1);
    json_decref(r);
    json_decref(r2);
    json_decref(d);
    json_decref(e);
    srv_stop_ok(&s);
}

Test(server_native, completion_stream_equals_whole) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 2");
    json_t *r = req(&s, "POST", "/completion",
                    "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":12,\"temperature\":0}", 200);
    char *o = NULL;
    cr_assert_eq(http_h(&s, "POST", "/completion",
                        "{\"prompt\":\"" NT_PROMPT
                        "\",\"n_predict\":12,\"temperature\":0,\"stream\":true}",
                        &o, NULL),
                 200);
    char text[4096] = "";
    int n_chunks = 0, n_final = 0;
    size_t n_ids = 0;
    for (char *line = strtok(o, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6)) continue;
        json_t *c = json_loads(line + 6, 0, NULL);
        cr_assert_not_null(c, "chunk: %s", line);
        if (json_is_true(json_object_get(c, "stop"))) {
            n_final++;
            cr_expect_str_eq(jstr(c, "stop_type"), "limit");
            cr_expect_eq(jint(c, "timings/predicted_n"), 12);
        } else {
            n_chunks++;
            n_ids += json_array_size(json_object_get(c, "tokens"));
            strncat(text, jstr(c, "content"), sizeof text - strlen(text) - 1);
        }
        json_decref(c);
    }
    cr_expect_eq(n_final, 1);
    cr_expect_gt(n_chunks, 0);
    cr_expect_eq(n_ids, 12);
    cr_expect_str_eq(text, jstr(r, "content"));
    free(o);
    json_decref(r);
    srv_stop_ok(&s);
}

Test(server_native, draft_gives_the_same_greedy_text) {
    const char *body = "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":24,\"temperature\":0,"
                       "\"speculative.n_max\":6,\"speculative.n_min\":2}";
    srv a, b;
    srv_start(&a, "-m " NT_TARGET " -c 512 -np 2");
    json_t *ra = req(&a, "POST", "/completion", body, 200);
    srv_stop_ok(&a);
    srv_start(&b, "-m " NT_TARGET " -md " NT_DRAFT " -c 512 -np 2");
    json_t *rb = req(&b, "POST", "/completion", body, 200);
    cr_expect_str_eq(jstr(rb, "content"), jstr(ra, "content"));
    cr_expect_gt(jint(rb, "timings/draft_n"), 0);
    cr_expect_leq(jint(rb, "timings/draft_n_accepted"), jint(rb, "timings/draft_n"));
    cr_expect_eq(jint(ra, "timings/draft_n"), 0);
    cr_expect_eq(jint(rb, "generation_settings/speculative.n_max"), 6);
    json_decref(ra);
    json_decref(rb);
    srv_stop_ok(&b);
}

/* One sequence over the whole pool (-c 64 -np 1): a request that fills its context is
 * served (the pool holds the batcher's quota of a sequence, its context's blocks and one),
 * making 64 - n_prompt tokens (the count from /tokenize), truncated by the context. */
Test(server_native, one_sequence_fills_the_whole_context) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 64 -np 1");
    const int64_t n_prompt = n_tokens(&s, NT_PROMPT);
    json_t *r = req(&s, "POST", "/completion",
                    "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":-1,\"temperature\":0,"
                    "\"ignore_eos\":true}",
                    200);
    cr_expect_eq(jint(r, "tokens_predicted"), 64 - n_prompt);
    cr_expect(json_is_true(json_object_get(r, "truncated")));
    json_decref(r);
    srv_stop_ok(&s);
}

/* --spec-synth-rates (llama-server's synthetic acceptance): rates 0 force a rejection at
 * every first draft position, so nothing is accepted though tokens were drafted, and the
 * sampled text is the draft-less server's, token for token; rates 1 with the target as its
 * own draft (every proposal agrees) accept every drafted token, the greedy text again the
 * draft-less one; the same request twice with rates in between gives the same counts (the
 * coins are keyed by the seed and the positions). */
Test(server_native, synth_rates_force_rejections_and_keep_the_text) {
    const char *sampled = "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":16,\"temperature\":0.2,"
                          "\"top_k\":5,\"seed\":4242,\"return_tokens\":true}";
    const char *greedy = "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":24,\"temperature\":0,"
                         "\"return_tokens\":true}";
    srv a, b;
    srv_start(&a, "-m " NT_TARGET " -c 512 -np 2");
    json_t *ra = req(&a, "POST", "/completion", sampled, 200);
    json_t *ga = req(&a, "POST", "/completion", greedy, 200);
    srv_stop_ok(&a);
    srv_start(&b, "-m " NT_TARGET " -md " NT_DRAFT " -c 512 -np 2 --draft-max 4 "
                  "--spec-synth-rates 0,0,0,0");
    json_t *rb = req(&b, "POST", "/completion", sampled, 200);
    cr_expect_gt(jint(rb, "timings/draft_n"), 0);
    cr_expect_eq(jint(rb, "timings/draft_n_accepted"), 0);
    cr_expect(json_equal(json_object_get(rb, "tokens"), json_object_get(ra, "tokens")));
    srv_stop_ok(&b);
    srv_start(&b, "-m " NT_TARGET " -md " NT_TARGET " -c 512 -np 2 --draft-max 4 "
                  "--spec-synth-rates 1,1,1,1");
    json_t *gb = req(&b, "POST", "/completion", greedy, 200);
    cr_expect_gt(jint(gb, "timings/draft_n"), 0);
    cr_expect_eq(jint(gb, "timings/draft_n_accepted"), jint(gb, "timings/draft_n"));
    cr_expect(json_equal(json_object_get(gb, "tokens"), json_object_get(ga, "tokens")));
    srv_stop_ok(&b);
    srv_start(&b, "-m " NT_TARGET " -md " NT_DRAFT " -c 512 -np 2 --draft-max 4 "
                  "--spec-synth-rates 0.75,0.5,0.25,0.125");
    json_t *c1 = req(&b, "POST", "/completion", sampled, 200);
    json_t *c2 = req(&b, "POST", "/completion", sampled, 200);
    cr_expect_gt(jint(c1, "timings/draft_n"), 0);
    cr_expect_eq(jint(c1, "timings/draft_n"), jint(c2, "timings/draft_n"));
    cr_expect_eq(jint(c1, "timings/draft_n_accepted"), jint(c2, "timings/draft_n_accepted"));
    cr_expect(json_equal(json_object_get(c1, "tokens"), json_object_get(ra, "tokens")));
    srv_stop_ok(&b);
    json_decref(ra);
    json_decref(ga);
    json_decref(rb);
    json_decref(gb);
    json_decref(c1);
    json_decref(c2);
}

/* The ids of a /completion answer's "tokens" (return_tokens). */
static int32_t ids_of(json_t *r, int32_t *out, int32_t cap) {
    json_t *a = json_object_get(r, "tokens");
    cr_assert(json_is_array(a));
    int32_t n = 0;
    for (size_t i = 0; i < json_array_size(a) && n < cap; i++)
        out[n++] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

/* --context-shift: a request past its sequence's context goes on to its n_predict. The
 * reference is built here from llama.cpp's rule: a segment stops when the context holds
 * C + 1 tokens (C = -c / -np = 96), keeps BOS (n_keep 0), drops the older half of the rest
 * ((C + 1 - 1) / 2 tokens after BOS); a server without the flag, given that window as the
 * prompt (token ids), must continue it with the tokens the shifted answer has next. The
 * same request with a draft gives the same tokens; the answer is truncated, its prompt
 * figures the request's prompt. */
Test(server_native, context_shift_continues_from_the_shifted_window) {
    enum { C = 96, N = 150 };
    srv a, b;
    srv_start(&a, "-m " NT_TARGET " -c 192 -np 2 --context-shift");
    const int64_t n_prompt = n_tokens(&a, NT_PROMPT);
    cr_assert_lt(n_prompt, C / 2);
    char body[4096];
    snprintf(body, sizeof body,
             "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":%d,\"temperature\":0,"
             "\"return_tokens\":true,\"ignore_eos\":true}",
             N);
    json_t *ra = req(&a, "POST", "/completion", body, 200);
    json_t *tk =
        req(&a, "POST", "/tokenize", "{\"content\":\"" NT_PROMPT "\",\"add_special\":true}", 200);
    srv_stop_ok(&a);
    cr_expect_eq(jint(ra, "timings/predicted_n"), N);
    cr_expect_eq(jint(ra, "timings/prompt_n") + jint(ra, "timings/cache_n"), n_prompt);
    cr_expect(json_is_true(json_object_get(ra, "truncated")));
    int32_t out[N], ctx[C + 1 + N];
    cr_assert_eq(ids_of(ra, out, N), N);
    /* the context at the first stop: the prompt and C + 1 - n_prompt tokens */
    json_t *pt = json_object_get(tk, "tokens");
    int32_t n_ctx = 0;
    for (size_t i = 0; i < json_array_size(pt); i++)
        ctx[n_ctx++] = (int32_t)json_integer_value(json_array_get(pt, i));
    const int32_t n1 = C + 1 - (int32_t)n_prompt;
    for (int32_t i = 0; i < n1; i++)
        ctx[n_ctx++] = out[i];
    const int32_t n_discard = (n_ctx - 1) / 2;
    /* the window: BOS, then what follows the dropped run */
    char *wb = malloc(16 * (size_t)n_ctx + 256), *w = wb;
    w += sprintf(w, "{\"prompt\":[%d", ctx[0]);
    for (int32_t i = 1 + n_discard; i < n_ctx; i++)
        w += sprintf(w, ",%d", ctx[i]);
    /* up to the context's end (the segment makes one more, to C + 1, then shifts) */
    const int32_t n_next = C - (n_ctx - n_discard);
    sprintf(w,
            "],\"n_predict\":%d,\"temperature\":0,\"return_tokens\":true,"
            "\"ignore_eos\":true}",
            n_next);
    srv_start(&b, "-m " NT_TARGET " -c 192 -np 2");
    json_t *rw = req(&b, "POST", "/completion", wb, 200);
    srv_stop_ok(&b);
    int32_t next[C];
    cr_assert_eq(ids_of(rw, next, C), n_next);
    for (int32_t i = 0; i < n_next; i++)
        cr_expect_eq(out[n1 + i], next[i], "token %d after the shift: %d, the window's %d", i,
                     out[n1 + i], next[i]);
    /* with a draft: the same tokens */
    srv_start(&b, "-m " NT_TARGET " -md " NT_DRAFT " -c 192 -np 2 --context-shift");
    json_t *rb = req(&b, "POST", "/completion", body, 200);
    srv_stop_ok(&b);
    cr_expect_gt(jint(rb, "timings/draft_n"), 0);
    cr_expect(json_equal(json_object_get(rb, "tokens"), json_object_get(ra, "tokens")));
    cr_expect_str_eq(jstr(rb, "content"), jstr(ra, "content"));
    free(wb);
    json_decref(ra);
    json_decref(rb);
    json_decref(rw);
    json_decref(tk);
}

/* The flags' arithmetic: rates to conditional chances, a mean length to the chance p with
 * p + ... + p^K = L - 1, and the refusals. */
Test(server_native, synth_rates_resolve) {
    double cond[SD_MAX_DRAFT];
    int32_t n = 0;
    sd_error err = {0};
    cr_assert_eq(sd_server_synth_rates("0.8,0.4,0.4,0", -1.0, 4, cond, &n, &err), SD_OK);
    cr_assert_eq(n, 4);
    cr_expect_float_eq(cond[0], 0.8, 1e-12);
    cr_expect_float_eq(cond[1], 0.5, 1e-12);
    cr_expect_float_eq(cond[2], 1.0, 1e-12);
    cr_expect_float_eq(cond[3], 0.0, 1e-12);
    cr_assert_eq(sd_server_synth_rates(NULL, 2.5, 3, cond, &n, &err), SD_OK);
    cr_assert_eq(n, 3);
    const double p = cond[0];
    cr_expect_float_eq(p + p * p + p * p * p, 1.5, 1e-9);
    cr_expect_float_eq(cond[2], p, 0.0);
    cr_assert_eq(sd_server_synth_rates(NULL, 4.0, 3, cond, &n, &err), SD_OK);
    cr_expect_float_eq(cond[0], 1.0, 0.0);
    cr_assert_eq(sd_server_synth_rates(NULL, 1.0, 3, cond, &n, &err), SD_OK);
    cr_expect_float_eq(cond[0], 0.0, 0.0);
    const char *bad[] = {"0.5,0.6", "0.5", "0.5,0.4,0.3", "x,0", "0.5;0.4", "1.5,1", "0.5,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(sd_server_synth_rates(bad[i], -1.0, 2, cond, &n, &err), SD_ERR_ARG, "%s",
                     bad[i]);
    cr_expect_eq(sd_server_synth_rates("1,1", 2.0, 2, cond, &n, &err), SD_ERR_ARG);
    cr_expect_eq(sd_server_synth_rates(NULL, 3.5, 2, cond, &n, &err), SD_ERR_ARG);
    cr_expect_eq(sd_server_synth_rates(NULL, 0.5, 2, cond, &n, &err), SD_ERR_ARG);
}

/* The prefix cache's positions: usage.prompt_tokens_details.cached_tokens, timings.cache_n,
 * and llama-server's metric names summing what the answers said. */
Test(server_native, cached_tokens_and_metrics) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 1 --kv-block 16");
    const int64_t n_prompt = n_tokens(&s, NT_PROMPT);
    cr_assert_gt(n_prompt, 17, "the prompt must cover a whole block");
    const char *body = "{\"prompt\":\"" NT_PROMPT "\",\"max_tokens\":4,\"temperature\":0}";
    json_t *a = req(&s, "POST", "/v1/completions", body, 200);
    json_t *b = req(&s, "POST", "/v1/completions", body, 200);
    cr_expect_eq(jint(a, "usage/prompt_tokens_details/cached_tokens"), 0);
    const int64_t cached = jint(b, "usage/prompt_tokens_details/cached_tokens");
    cr_expect_eq(cached, n_prompt - 1,
                 "the same prompt: all but its last token (fed for "
                 "its logits) from the cache, to the token");
    json_t *c = req(&s, "POST", "/completion",
                    "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":4,\"temperature\":0}", 200);
    cr_expect_eq(jint(c, "timings/cache_n"), cached);
    cr_expect_eq(jint(c, "timings/prompt_n"), n_prompt - cached);
    char *m = NULL, *h = NULL;
    cr_assert_eq(http_h(&s, "GET", "/metrics", NULL, &m, &h), 200);
    cr_expect_not_null(strstr(h, "Process-Start-Time-Unix: "));
    char want[128];
    snprintf(want, sizeof want, "\nllamacpp:prompt_tokens_cached_total %lld\n",
             (long long)(2 * cached));
    cr_expect_not_null(strstr(m, want), "want%s in %s", want, m);
    snprintf(want, sizeof want, "\nllamacpp:prompt_tokens_total %lld\n",
             (long long)(3 * n_prompt - 2 * cached));
    cr_expect_not_null(strstr(m, want), "want%s", want);
    cr_expect_not_null(strstr(m, "\nllamacpp:tokens_predicted_total 12\n"));
    cr_expect_not_null(strstr(m, "\n# TYPE llamacpp:requests_processing gauge\n"));
    /* counted by the server: 0 as soon as the answers are in */
    cr_expect_not_null(strstr(m, "\nllamacpp:requests_processing 0\n"), "%s", m);
    free(m);
    free(h);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    srv_stop_ok(&s);
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 1 --no-metrics --no-slots --no-ui");
    cr_expect_eq(http_h(&s, "GET", "/metrics", NULL, NULL, NULL), 501);
    cr_expect_eq(http_h(&s, "GET", "/slots", NULL, NULL, NULL), 501);
    cr_expect_eq(http_h(&s, "GET", "/", NULL, NULL, NULL), 404);
    srv_stop_ok(&s);
}

/* The token ids /tokenize gives text (BOS added) into ids (at most cap); the count. */
static int64_t token_ids(const srv *s, const char *text, int32_t *ids, int64_t cap) {
    json_t *tb = json_pack("{s:s,s:b}", "content", text, "add_special", 1);
    char *tbs = json_dumps(tb, JSON_COMPACT);
    json_t *t = req(s, "POST", "/tokenize", tbs, 200);
    json_t *a = json_object_get(t, "tokens");
    const int64_t n = (int64_t)json_array_size(a);
    for (int64_t i = 0; i < n && i < cap; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    json_decref(t);
    json_decref(tb);
    free(tbs);
    return n;
}

/* A greedy completion's text and its cached_tokens. */
static char *complete(const srv *s, const char *prompt, int64_t *cached) {
    json_t *rb = json_pack("{s:s,s:i,s:i}", "prompt", prompt, "max_tokens", 12, "temperature", 0);
    char *rbs = json_dumps(rb, JSON_COMPACT);
    json_t *r = req(s, "POST", "/v1/completions", rbs, 200);
    if (cached) *cached = jint(r, "usage/prompt_tokens_details/cached_tokens");
    char *text = strdup(jstr(json_array_get(json_object_get(r, "choices"), 0), "text"));
    json_decref(r);
    json_decref(rb);
    free(rbs);
    return text;
}

/* The prefix cache reuses the longest common prefix to the token: a request whose prompt
 * parts from an earlier one inside a KV block takes exactly the shared tokens (the common
 * prefix of the two /tokenize answers) from the cache, and its text equals its text on a
 * server without the prefix cache. */
Test(server_native, prefix_cache_reuses_to_the_token) {
    const char *pa = NT_PROMPT " loved her red ball very much.";
    const char *pb = NT_PROMPT " was very happy with her friends.";
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 1 --kv-block 16");
    int32_t ia[256], ib[256];
    const int64_t na = token_ids(&s, pa, ia, 256), nb = token_ids(&s, pb, ib, 256);
    int64_t lcp = 0;
    while (lcp < na && lcp < nb && ia[lcp] == ib[lcp])
        lcp++;
    cr_assert(lcp > 16 && lcp % 16 != 0 && lcp < nb - 1,
              "the prompts must part inside a block after the first: %lld shared of %lld",
              (long long)lcp, (long long)nb);
    int64_t cached_a = -1, cached_b = -1;
    char *ta = complete(&s, pa, &cached_a);
    char *tb = complete(&s, pb, &cached_b);
    cr_expect_eq(cached_a, 0);
    cr_expect_eq(cached_b, lcp, "cached %lld, shared %lld", (long long)cached_b, (long long)lcp);
    /* B again: all of its prompt but the last token; the same text */
    int64_t cached_b2 = -1;
    char *tb2 = complete(&s, pb, &cached_b2);
    cr_expect_eq(cached_b2, nb - 1);
    cr_expect_str_eq(tb2, tb);
    srv_stop_ok(&s);
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 1 --kv-block 16 --no-prefix-cache");
    int64_t cached_alone = -1;
    char *alone = complete(&s, pb, &cached_alone);
    cr_expect_eq(cached_alone, 0);
    cr_expect_str_eq(tb, alone, "with the cache: '%s', alone: '%s'", tb, alone);
    char *alone_a = complete(&s, pa, NULL);
    cr_expect_str_eq(ta, alone_a);
    srv_stop_ok(&s);
    free(ta);
    free(tb);
    free(tb2);
    free(alone);
    free(alone_a);
}

/* llama-server's n_predict fills the context's room (-1: all of it; truncated), OpenAI's
 * max_tokens past it is a 400; a prompt that does not fit names both sizes. */
Test(server_native, context_room) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 256 -np 2"); /* 128 positions a sequence */
    const int64_t n_prompt = n_tokens(&s, NT_PROMPT);
    json_t *r =
        req(&s, "POST", "/completion",
            "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":-1,\"temperature\":0,\"ignore_eos\":true}",
            200);
    cr_expect_eq(jint(r, "tokens_predicted"), 128 - n_prompt);
    cr_expect(json_is_true(json_object_get(r, "truncated")));
    json_t *v = req(&s, "POST", "/v1/completions",
                    "{\"prompt\":\"" NT_PROMPT "\",\"max_tokens\":1000}", 400);
    cr_expect_str_eq(jstr(json_object_get(v, "error"), "code"), "context_length_exceeded");
    char body[8192] = "{\"prompt\":\"";
    for (int i = 0; i < 100; i++)
        strcat(body, "Once upon a time ");
    strcat(body, "\"}");
    json_t *e = req(&s, "POST", "/completion", body, 400);
    json_t *err = json_object_get(e, "error");
    cr_expect_str_eq(jstr(err, "type"), "exceed_context_size_error");
    cr_expect_eq(jint(err, "n_ctx"), 128);
    cr_expect_gt(jint(err, "n_prompt_tokens"), 128);
    json_decref(r);
    json_decref(v);
    json_decref(e);
    srv_stop_ok(&s);
}

Test(server_native, slots_template_and_byte_pieces) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 2");
    json_t *sl = req(&s, "GET", "/slots", NULL, 200);
    cr_assert_eq(json_array_size(sl), 2);
    cr_expect_eq(jint(json_array_get(sl, 1), "n_ctx"), 256);
    cr_expect(json_is_false(json_object_get(json_array_get(sl, 0), "is_processing")));
    /* The model has no template: chatml, written out here. */
    json_t *t = req(&s, "POST", "/apply-template",
                    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be kind.\"},"
                    "{\"role\":\"user\",\"content\":\"Hi\"}]}",
                    200);
    cr_expect_str_eq(jstr(t, "prompt"), "<|im_start|>system\nBe kind.<|im_end|>\n"
                                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* A final assistant message is continued (the prefill), text parts joined by a blank
     * line; add_generation_prompt with continue_final_message is a 400. */
    json_t *pf = req(&s, "POST", "/apply-template",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":"
                     "\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"A\"},"
                     "{\"type\":\"text\",\"text\":\"B\"}]}]}",
                     200);
    cr_expect_str_eq(jstr(pf, "prompt"),
                     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nA\n\nB");
    json_decref(pf);
    json_decref(req(&s, "POST", "/apply-template",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                    "\"add_generation_prompt\":true,\"continue_final_message\":true}",
                    400));
    /* chat_template_kwargs adds variables; those the server sets are refused by name */
    const char *const reserved[] = {"messages", "add_generation_prompt", "bos_token", "tools"};
    for (int i = 0; i < 4; i++) {
        char kb[512];
        snprintf(kb, sizeof kb,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                 "\"chat_template_kwargs\":{\"%s\":[]}}",
                 reserved[i]);
        json_t *e = req(&s, "POST", "/apply-template", kb, 400);
        char want[96];
        snprintf(want, sizeof want, "chat_template_kwargs.%s", reserved[i]);
        const char *param =
            json_string_value(json_object_get(json_object_get(e, "error"), "param"));
        cr_expect(param && !strcmp(param, want), "param %s, expected %s", param, want);
        json_decref(e);
    }
    json_t *kw = req(&s, "POST", "/apply-template",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                     "\"chat_template_kwargs\":{\"custom\":1}}",
                     200);
    cr_expect_str_eq(jstr(kw, "prompt"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    json_decref(kw);
    /* input_tokens: the count /tokenize gives for the template's text (BOS added) */
    json_t *it = req(&s, "POST", "/chat/completions/input_tokens",
                     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be kind.\"},"
                     "{\"role\":\"user\",\"content\":\"Hi\"}]}",
                     200);
    char tb[512];
    json_t *pj = json_string(jstr(t, "prompt"));
    char *pjs = json_dumps(pj, JSON_ENCODE_ANY);
    snprintf(tb, sizeof tb, "{\"content\":%s,\"add_special\":true}", pjs);
    free(pjs);
    json_decref(pj);
    json_t *tk = req(&s, "POST", "/tokenize", tb, 200);
    cr_expect_eq(jint(it, "input_tokens"), (int)json_array_size(json_object_get(tk, "tokens")));
    json_decref(it);
    json_decref(tk);
    /* U+5ABD is not in the 512-token vocabulary: byte-fallback tokens, each piece its byte
     * values, together its UTF-8 encoding. */
    json_t *k = req(&s, "POST", "/tokenize", "{\"content\":\"\\u5abd\",\"with_pieces\":true}", 200);
    json_t *toks = json_object_get(k, "tokens");
    unsigned char got[16];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_t *p = json_object_get(json_array_get(toks, i), "piece");
        if (json_is_string(p)) { /* a leading space piece, if the vocabulary adds one */
            cr_expect_str_eq(json_string_value(p), " ");
            continue;
        }
        cr_assert(json_is_array(p));
        for (size_t b = 0; b < json_array_size(p) && n < sizeof got; b++)
            got[n++] = (unsigned char)json_integer_value(json_array_get(p, b));
    }
    cr_expect_eq(n, 3);
    cr_expect_eq(memcmp(got, "\xe5\xaa\xbd", 3), 0);
    json_decref(sl);
    json_decref(t);
    json_decref(k);
    srv_stop_ok(&s);
}

/* A list of prompts: one choice per prompt (OpenAI's route), one result per prompt
 * (llama-server's), each the text the prompt gives alone. */
Test(server_native, prompt_list) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 2");
    const char *prompts[3] = {"Once upon a time", "The cat", "Lily and Tom"};
    char body[512];
    char *alone[3];
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}",
                 prompts[i]);
        json_t *r = req(&s, "POST", "/v1/completions", body, 200);
        alone[i] = strdup(json_string_value(
            json_object_get(json_array_get(json_object_get(r, "choices"), 0), "text")));
        json_decref(r);
    }
    json_t *r = req(&s, "POST", "/v1/completions",
                    "{\"prompt\":[\"Once upon a time\",\"The cat\",\"Lily and Tom\"],"
                    "\"max_tokens\":8,\"temperature\":0}",
                    200);
    json_t *ch = json_object_get(r, "choices");
    cr_assert_eq(json_array_size(ch), 3);
    int64_t n_prompt = 0;
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(jint(json_array_get(ch, i), "index"), i);
        cr_expect_str_eq(jstr(json_array_get(ch, i), "text"), alone[i]);
        n_prompt += n_tokens(&s, prompts[i]);
    }
    cr_expect_eq(jint(r, "usage/prompt_tokens"), n_prompt);
    cr_expect_eq(jint(r, "usage/completion_tokens"), 24);
    json_t *nat = req(&s, "POST", "/completion",
                      "{\"prompt\":[\"Once upon a time\",\"The cat\"],\"n_predict\":8,"
                      "\"temperature\":0}",
                      200);
    cr_assert(json_is_array(nat));
    cr_assert_eq(json_array_size(nat), 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_str_eq(jstr(json_array_get(nat, i), "content"), alone[i]);
        cr_expect_eq(jint(json_array_get(nat, i), "tokens_evaluated"), n_tokens(&s, prompts[i]));
    }
    /* Token ids and text in one sequence: BOS then the text is the text's prompt. */
    json_t *mix =
        req(&s, "POST", "/completion",
            "{\"prompt\":[1,\"Once upon a time\"],\"n_predict\":8,\"temperature\":0}", 200);
    cr_expect_str_eq(jstr(mix, "content"), alone[0]);
    cr_expect_eq(jint(mix, "tokens_evaluated"), n_tokens(&s, prompts[0]));
    json_decref(mix);
    /* More choices than a request holds: a 400 naming n. */
    json_t *e = req(&s, "POST", "/v1/completions", "{\"prompt\":[\"a\",\"b\"],\"n\":9}", 400);
    cr_expect_str_eq(jstr(json_object_get(e, "error"), "param"), "n");
    for (int i = 0; i < 3; i++)
        free(alone[i]);
    json_decref(r);
    json_decref(nat);
    json_decref(e);
    srv_stop_ok(&s);
}

/* Chat templates go through the Jinja engine by default: SmolLM2's template adds its
 * default system message when the chat has none (the text below is the template's, as
 * Hugging Face's jinja2 renders it); --no-jinja's built-in chatml formatter leaves it out.
 * A chat request's prompt_tokens is /tokenize's count of /apply-template's text. */
Test(server_native, jinja_by_default_keeps_the_default_system_message) {
    const char *model = SD_SOURCE_DIR "/models/smollm2-draft-q8_0.gguf";
    const char *user = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    const char *sys_msg = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                          "trained by Hugging Face<|im_end|>\n";
    const char *rest = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    char want[512];
    for (int mode = 0; mode < 2; mode++) {
        char args[512];
        snprintf(args, sizeof args, "-m %s -c 512 -np 1%s", model, mode ? " --no-jinja" : "");
        srv s;
        srv_start(&s, args);
        snprintf(want, sizeof want, "%s%s", mode ? "" : sys_msg, rest);
        json_t *t = req(&s, "POST", "/apply-template", user, 200);
        cr_expect_str_eq(jstr(t, "prompt"), want, "mode %s", mode ? "--no-jinja" : "default");
        json_t *c = req(&s, "POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                        "\"max_tokens\":2,\"temperature\":0}",
                        200);
        json_t *tb = json_pack("{s:s,s:b}", "content", want, "add_special", 1);
        char *tbs = json_dumps(tb, JSON_COMPACT);
        json_t *k = req(&s, "POST", "/tokenize", tbs, 200);
        cr_expect_eq(jint(c, "usage/prompt_tokens"),
                     (int64_t)json_array_size(json_object_get(k, "tokens")));
        free(tbs);
        json_decref(tb);
        json_decref(k);
        json_decref(c);
        json_decref(t);
        srv_stop_ok(&s);
    }
}

/* The significant digits of the JSON number starting at p (leading zeros, sign, point and
 * exponent not counted); *end past it. */
static int sig_digits(const char *p, const char **end) {
    int n = 0, lead = 1;
    if (*p == '-') p++;
    for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
        if (*p == '.') continue;
        if (lead && *p == '0') continue;
        lead = 0;
        n++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    *end = p;
    return n;
}

/* Reals carry 15 significant digits: llama-server's predicted_per_second recomputed from
 * the printed predicted_ms and predicted_n (the rate is over n - 1 steps) agrees to 1e-12
 * relative (6 digits left ~1e-6), and no number of the raw answer has more than 15. */
Test(server_native, json_reals_carry_15_digits) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 1");
    char *o = NULL;
    const int code = http_h(&s, "POST", "/completion",
                            "{\"prompt\":\"" NT_PROMPT "\",\"n_predict\":16,\"ignore_eos\":true,"
                            "\"temperature\":0}",
                            &o, NULL);
    cr_assert_eq(code, 200, "%s", o);
    int most = 0;
    for (const char *p = o; *p;) {
        /* a number: after ':' , '[' or ',' outside strings (the answer's text is plain words) */
        if ((*p == ':' || *p == '[' || *p == ',') &&
            (p[1] == '-' || (p[1] >= '0' && p[1] <= '9'))) {
            const char *end;
            const int d = sig_digits(p + 1, &end);
            if (d > most) most = d;
            p = end;
        } else {
            p++;
        }
    }
    cr_expect_leq(most, 15, "a number with %d significant digits: %s", most, o);
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j);
    json_t *t = json_object_get(j, "timings");
    const double ms = json_number_value(json_object_get(t, "predicted_ms"));
    const double rate = json_number_value(json_object_get(t, "predicted_per_second"));
    cr_assert_eq(jint(t, "predicted_n"), 16);
    cr_assert_gt(ms, 0);
    const double want = 1e3 * 15 / ms;
    cr_expect(fabs(rate - want) <= 1e-12 * want,
              "predicted_per_second %.17g, from the printed "
              "predicted_ms %.17g",
              rate, want);
    json_decref(j);
    free(o);
    srv_stop_ok(&s);
}

/* The prompt_progress chunks of a stream with path's route: their "processed" values in
 * order into pr (at most cap; the count), total and cache checked the same in each, and
 * the text of the stream's choice 0 appended to text. */
static int progress_of(const srv *s, const char *path, const char *body, int32_t *pr, int cap,
                       int64_t *total, int64_t *cache, char *text, size_t text_cap) {
    char *o = NULL;
    cr_assert_eq(http_h(s, "POST", path, body, &o, NULL), 200, "%s", o);
    int n = 0;
    char *save = NULL; /* jint tokenizes its path with strtok */
    for (char *line = strtok_r(o, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "data: ", 6) || !strcmp(line, "data: [DONE]")) continue;
        json_t *c = json_loads(line + 6, 0, NULL);
        cr_assert_not_null(c, "chunk: %s", line);
        json_t *pp = json_object_get(c, "prompt_progress");
        if (pp) {
            cr_assert_lt(n, cap);
            if (n == 0) {
                *total = jint(pp, "total");
                *cache = jint(pp, "cache");
            }
            cr_expect_eq(jint(pp, "total"), *total);
            cr_expect_eq(jint(pp, "cache"), *cache);
            pr[n++] = (int32_t)jint(pp, "processed");
        } else {
            json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
            const char *t = json_string_value(json_object_get(ch, "text"));
            if (t) strncat(text, t, text_cap - strlen(text) - 1);
        }
        json_decref(c);
    }
    free(o);
    return n;
}

/* llama-server's return_progress: with -b 16 a prompt of n tokens is fed in chunks of 16
 * but its last token (which goes with the first decoding pass), so the chunks report 0
 * (cache 0), 16, 32, ... below n - 1, then n before the first token; the same prompt again
 * reports its cached n - 1, then n. The text equals the stream's without progress. */
Test(server_native, return_progress_reports_each_prompt_chunk) {
    srv s;
    srv_start(&s, "-m " NT_TARGET " -c 512 -np 1 -b 16");
    const char *prompt = NT_LONG_PROMPT;
    const int64_t n = n_tokens(&s, prompt);
    cr_assert_gt(n, 34, "the prompt must take three chunks or more");
    char body[1024];
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":6,\"temperature\":0,\"stream\":true%s}", prompt,
             ",\"return_progress\":true");
    int32_t pr[64];
    int64_t total = -1, cache = -1;
    char text[2048] = "", plain[2048] = "";
    int np = progress_of(&s, "/v1/completions", body, pr, 64, &total, &cache, text, sizeof text);
    int32_t want[64];
    int nw = 0;
    want[nw++] = 0;
    for (int32_t k = 16; k < n - 1; k += 16)
        want[nw++] = k;
    want[nw++] = (int32_t)n;
    cr_expect_eq(total, n);
    cr_expect_eq(cache, 0);
    cr_assert_eq(np, nw, "%d progress chunks, expected %d", np, nw);
    for (int i = 0; i < nw; i++)
        cr_expect_eq(pr[i], want[i], "chunk %d: processed %d, expected %d", i, pr[i], want[i]);
    /* again: the prefix cache holds all but the last token */
    char again[2048] = "";
    np = progress_of(&s, "/v1/completions", body, pr, 64, &total, &cache, again, sizeof again);
    cr_expect_eq(cache, n - 1);
    cr_assert_eq(np, 2);
    cr_expect_eq(pr[0], n - 1);
    cr_expect_eq(pr[1], n);
    cr_expect_str_eq(again, text);
    /* without return_progress: no progress chunk, the same text */
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s\",\"max_tokens\":6,\"temperature\":0,\"stream\":true}", prompt);
    np = progress_of(&s, "/v1/completions", body, pr, 64, &total, &cache, plain, sizeof plain);
    cr_expect_eq(np, 0);
    cr_expect_str_eq(plain, text);
    /* the native route's chunks carry the prompt's timings, none predicted yet */
    snprintf(body, sizeof body,
             "{\"prompt\":\"%s x\",\"n_predict\":2,\"stream\":true,\"return_progress\":true}",
             prompt);
    char *o = NULL;
    cr_assert_eq(http_h(&s, "POST", "/completion", body, &o, NULL), 200);
    const char *first = strstr(o, "\"prompt_progress\"");
    cr_assert_not_null(first, "%s", o);
    const char *line = first;
    while (line > o && line[-1] != '\n')
        line--;
    json_t *c = json_loads(line + 6, JSON_DISABLE_EOF_CHECK, NULL);
    cr_assert_not_null(c);
    cr_expect_eq(jint(c, "timings/predicted_n"), 0);
    cr_expect_eq(jint(c, "timings/prompt_n"), 0, "the first chunk: nothing evaluated yet");
    json_decref(c);
    free(o);
    srv_stop_ok(&s);
}
