/*
 * tests/test_server_llama.c: more of llama-server's surface on `specdec serve` (the fields
 * and error shapes llama.cpp's own server test suite asserts), end to end over curl on
 * 127.0.0.1 with a port the server picks.
 *
 * References are independent of the answer checked: a sequence's context is -c / -np as
 * given on the command line; a stream's token counts are the request's max_tokens (greedy,
 * ignore_eos) and the prompt's length from /apply-template + /tokenize.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_util.h"
#include "testutil.h"

#define LT_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(server_llama, .init = setup, .fini = teardown, .timeout = 300);

static json_t *jget(json_t *o, const char *path) {
    json_t *v = o;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "/"); k; k = strtok(NULL, "/"))
        v = json_object_get(v, k);
    return v;
}

static int64_t jint(json_t *o, const char *path) {
    json_t *v = jget(o, path);
    cr_assert(json_is_integer(v), "%s is not an integer", path);
    return json_integer_value(v);
}

static const char *jstr(json_t *o, const char *path) {
    json_t *v = jget(o, path);
    cr_assert(json_is_string(v), "%s is not a string", path);
    return json_string_value(v);
}

/* A chat body whose one user message repeats "Once upon a time " n times. */
static char *long_chat(int n, const char *extra) {
    size_t cap = (size_t)n * 17 + 256;
    char *b = malloc(cap);
    cr_assert_not_null(b);
    strcpy(b, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < n; i++)
        strcat(b, "Once upon a time ");
    strcat(b, "\"}]");
    strcat(b, extra);
    strcat(b, "}");
    return b;
}

/* A prompt over a sequence's context: llama-server's paths answer its error type
 * (exceed_context_size_error, with n_prompt_tokens and the sequence's n_ctx), the /v1/
 * routes OpenAI's; both carry code context_length_exceeded; a stream is refused the same
 * way, before it starts. */
Test(server_llama, context_overflow_error_types) {
    srv s;
    srv_start(&s, "-m " LT_TARGET " -c 256 -np 2"); /* 128 positions a sequence */
    char *body = long_chat(100, "");
    char *body_stream = long_chat(100, ",\"stream\":true");
    const char *paths[] = {"/chat/completions", "/v1/chat/completions", "/chat/completions"};
    const char *bodies[] = {body, body, body_stream};
    const char *types[] = {"exceed_context_size_error", "invalid_request_error",
                           "exceed_context_size_error"};
    for (int k = 0; k < 3; k++) {
        json_t *e = http_json(&s, "POST", paths[k], bodies[k], 400);
        cr_expect_str_eq(jstr(e, "error/type"), types[k], "%s", paths[k]);
        cr_expect_str_eq(jstr(e, "error/code"), "context_length_exceeded", "%s", paths[k]);
        cr_expect_eq(jint(e, "error/n_ctx"), 128, "%s", paths[k]);
        /* 100 x 4 words: at least 400 tokens whatever the template adds */
        cr_expect_geq(jint(e, "error/n_prompt_tokens"), 400, "%s", paths[k]);
        json_decref(e);
    }
    free(body);
    free(body_stream);
    srv_stop_ok(&s);
}

/* The last event of a data: stream before [DONE], parsed. */
static json_t *last_event(const char *sse) {
    const char *done = strstr(sse, "data: [DONE]");
    cr_assert_not_null(done, "no [DONE] in %s", sse);
    const char *p = sse, *last = NULL;
    for (const char *q; (q = strstr(p, "data: {")) && q < done; p = q + 1)
        last = q;
    cr_assert_not_null(last, "no event in %s", sse);
    const char *end = strstr(last, "\n\n");
    cr_assert_not_null(end);
    json_t *j = json_loadb(last + 6, (size_t)(end - last - 6), 0, NULL);
    cr_assert_not_null(j, "not JSON: %.*s", (int)(end - last), last);
    return j;
}

/* A chat stream's usage chunk (stream_options.include_usage) carries llama-server's timings
 * beside the usage: predicted_n the tokens generated, prompt_n + cache_n the prompt. */
Test(server_llama, stream_usage_carries_timings) {
    srv s;
    srv_start(&s, "-m " LT_TARGET " -c 512 -np 1");
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}]";
    char body[512];
    snprintf(body, sizeof body, "{%s}", msgs);
    json_t *t = http_json(&s, "POST", "/apply-template", body, 200);
    json_t *tb = json_pack("{s:s,s:b}", "content", jstr(t, "prompt"), "add_special", 1);
    char *tbody = json_dumps(tb, 0);
    json_t *tk = http_json(&s, "POST", "/tokenize", tbody, 200);
    const int64_t n_prompt = (int64_t)json_array_size(json_object_get(tk, "tokens"));
    cr_assert_gt(n_prompt, 0);
    snprintf(body, sizeof body,
             "{%s,\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true},\"timings_per_token\":true}",
             msgs);
    char *o = NULL;
    cr_assert_eq(http(&s, "POST", "/chat/completions", body, NULL, &o), 200);
    json_t *u = last_event(o);
    cr_expect_eq(json_array_size(json_object_get(u, "choices")), 0);
    cr_expect_eq(jint(u, "usage/completion_tokens"), 8);
    cr_expect_eq(jint(u, "timings/predicted_n"), 8);
    cr_expect_eq(jint(u, "usage/prompt_tokens"), n_prompt);
    cr_expect_eq(jint(u, "timings/prompt_n") + jint(u, "timings/cache_n"), n_prompt);
    cr_expect(json_is_number(jget(u, "timings/predicted_per_second")));
    cr_expect(json_is_number(jget(u, "timings/prompt_per_second")));
    json_decref(u);
    json_decref(t);
    json_decref(tb);
    json_decref(tk);
    free(tbody);
    free(o);
    srv_stop_ok(&s);
}
