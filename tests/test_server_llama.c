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
#define NT_LONG                                                                                    \
    "Once upon a time, there was a little girl named Lily who liked to play in the park with her " \
    "big red ball every day"

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

/* ---- POST /infill ---- */

#define LT_FIM SD_SOURCE_DIR "/models/downloaded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

/* A request body from a jansson pack (the test's strings escaped by jansson). */
static char *body_of(json_t *j) {
    cr_assert_not_null(j);
    char *b = json_dumps(j, JSON_COMPACT);
    cr_assert_not_null(b);
    json_decref(j);
    return b;
}

/* The ids of text (no BOS, control texts not parsed), from /tokenize. */
static json_t *tokens_of(const srv *s, const char *text) {
    char *b = body_of(json_pack("{s:s,s:b}", "content", text, "add_special", 0));
    json_t *t = http_json(s, "POST", "/tokenize", b, 200);
    free(b);
    json_t *ids = json_incref(json_object_get(t, "tokens"));
    json_decref(t);
    cr_assert(json_is_array(ids));
    return ids;
}

/* The text of ids [from, from + n), from /detokenize. */
static char *text_of(const srv *s, json_t *ids, size_t from, size_t n) {
    json_t *part = json_array();
    for (size_t i = from; i < from + n; i++)
        json_array_append(part, json_array_get(ids, i));
    char *b = body_of(json_pack("{s:o}", "tokens", part));
    json_t *d = http_json(s, "POST", "/detokenize", b, 200);
    free(b);
    char *t = strdup(jstr(d, "content"));
    json_decref(d);
    return t;
}

/* The prompt /infill builds on a FIM vocabulary (Qwen2.5-Coder's: <|repo_name|>,
 * <|file_sep|>, <|fim_prefix|> ...), written out here; with long inputs the prefix keeps its
 * last 3/4 of a batch and the suffix its first batch/4 - 2 - prompt tokens (/tokenize's
 * ids, cut here and /detokenize'd). */
Test(server_llama, infill_prompt_layout) {
    if (access(LT_FIM, R_OK) != 0) cr_skip_test("no %s (scripts/get_models.sh)", LT_FIM);
    srv s;
    srv_start(&s, "-m " LT_FIM " -c 512 -np 1 -b 64 -n 8 --temp 0");
    char *b = body_of(json_pack("{s:[{s:s,s:s}],s:s,s:s,s:s,s:i}", "input_extra", "filename", "a.h",
                                "text", "int f(void);\n", "input_prefix", "int main() {\n",
                                "prompt", "    return ", "input_suffix", "}\n", "n_predict", 2));
    json_t *a = http_json(&s, "POST", "/infill", b, 200);
    cr_expect_str_eq(jstr(a, "prompt"),
                     "<|repo_name|>myproject\n<|file_sep|>a.h\nint f(void);\n<|file_sep|>filename\n"
                     "<|fim_prefix|>int main() {\n    return <|fim_suffix|>}\n<|fim_middle|>");
    cr_expect_eq(jint(a, "tokens_predicted"), 2);
    json_decref(a);
    free(b);
    /* Long inputs: -b 64 keeps 48 prefix tokens and 16 - 2 - 0 = 14 suffix tokens. */
    char pre[2048] = "", suf[2048] = "";
    for (int i = 0; i < 60; i++) {
        char w[32];
        snprintf(w, sizeof w, "int a%d = %d;\n", i, i);
        strcat(pre, w);
        snprintf(w, sizeof w, "b%d();\n", i);
        strcat(suf, w);
    }
    json_t *tp = tokens_of(&s, pre), *ts = tokens_of(&s, suf);
    cr_assert_gt(json_array_size(tp), 48);
    cr_assert_gt(json_array_size(ts), 14);
    char *pre_kept = text_of(&s, tp, json_array_size(tp) - 48, 48);
    char *suf_kept = text_of(&s, ts, 0, 14);
    b = body_of(
        json_pack("{s:s,s:s,s:i}", "input_prefix", pre, "input_suffix", suf, "n_predict", 1));
    a = http_json(&s, "POST", "/infill", b, 200);
    char want[4096];
    snprintf(want, sizeof want,
             "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>%s"
             "<|fim_suffix|>%s<|fim_middle|>",
             pre_kept, suf_kept);
    cr_expect_str_eq(jstr(a, "prompt"), want);
    json_decref(a);
    json_decref(tp);
    json_decref(ts);
    free(pre_kept);
    free(suf_kept);
    free(b);
    srv_stop_ok(&s);
}

/* Malformed /infill fields are 400 (each named); a vocabulary without FIM tokens is 501. */
Test(server_llama, infill_refusals) {
    srv s;
    srv_start(&s, "-m " LT_TARGET " -c 256 -np 1");
    json_t *e =
        http_json(&s, "POST", "/infill", "{\"input_prefix\":\"a\",\"input_suffix\":\"b\"}", 501);
    cr_expect_str_eq(jstr(e, "error/type"), "not_supported_error");
    json_decref(e);
    srv_stop_ok(&s);
    if (access(LT_FIM, R_OK) != 0) cr_skip_test("no %s (scripts/get_models.sh)", LT_FIM);
    srv_start(&s, "-m " LT_FIM " -c 512 -np 1 -b 64 -n 8");
    const char *bad[] = {
        "{\"input_suffix\":\"b\"}",
        "{\"input_prefix\":\"a\"}",
        "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"prompt\":5}",
        "{\"input_prefix\":[\"a\",-1],\"input_suffix\":\"b\"}",
        "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":{}}",
        "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{}]}",
        "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"filename\":\"ok\"}]}",
        "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"filename\":1,"
        "\"text\":\"x\"}]}",
        "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"text\":4}]}",
        "[1]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *r = http_json(&s, "POST", "/infill", bad[i], 400);
        cr_expect_str_eq(jstr(r, "error/type"), "invalid_request_error", "%s", bad[i]);
        json_decref(r);
    }
    srv_stop_ok(&s);
}

/* llama-server's --alias list and --tags: /v1/models lists them sorted without repeats, the
 * id is the first alias in byte order, and answers carry that id; one plain --alias (or none)
 * is the one alias. */
Test(server_llama, model_aliases_and_tags) {
    srv s;
    srv_start(&s, "-m " LT_TARGET " -c 256 -np 1 --alias tinyllama-2,fim,code,fim --tags "
                  "small,chat,fim");
    json_t *m = http_json(&s, "GET", "/v1/models", NULL, 200);
    json_t *d = json_array_get(json_object_get(m, "data"), 0);
    cr_expect_str_eq(jstr(d, "id"), "code");
    const char *al[] = {"code", "fim", "tinyllama-2"}, *tg[] = {"chat", "fim", "small"};
    json_t *ja = json_object_get(d, "aliases"), *jt = json_object_get(d, "tags");
    cr_assert_eq(json_array_size(ja), 3);
    cr_assert_eq(json_array_size(jt), 3);
    for (size_t i = 0; i < 3; i++) {
        cr_expect_str_eq(json_string_value(json_array_get(ja, i)), al[i]);
        cr_expect_str_eq(json_string_value(json_array_get(jt, i)), tg[i]);
    }
    json_t *c = http_json(&s, "POST", "/v1/completions",
                          "{\"prompt\":\"Once\",\"max_tokens\":1,\"temperature\":0}", 200);
    cr_expect_str_eq(jstr(c, "model"), "code");
    json_decref(c);
    json_decref(m);
    srv_stop_ok(&s);
    srv_start(&s, "-m " LT_TARGET " -c 256 -np 1 --alias one");
    m = http_json(&s, "GET", "/v1/models", NULL, 200);
    d = json_array_get(json_object_get(m, "data"), 0);
    cr_expect_str_eq(jstr(d, "id"), "one");
    cr_expect_eq(json_array_size(json_object_get(d, "aliases")), 1);
    cr_expect_eq(json_array_size(json_object_get(d, "tags")), 0);
    json_decref(m);
    srv_stop_ok(&s);
}

/* POST /slots/N?action=erase drops the prefix cache's idle blocks: a prompt served from the
 * cache before (cache_n > 0) is evaluated whole after it (cache_n 0, prompt_n its length from
 * /tokenize); n_erased counts whole blocks (-kv-block 16). save / restore are 501 without
 * --slot-save-path, a slot out of range or an unknown action 400. */
Test(server_llama, slot_erase) {
    srv s;
    srv_start(&s, "-m " LT_TARGET " -c 512 -np 2");
    const char *body = "{\"prompt\":\"" NT_LONG "\",\"n_predict\":4,\"temperature\":0}";
    char *tb = body_of(json_pack("{s:s,s:b}", "content", NT_LONG, "add_special", 1));
    json_t *tk = http_json(&s, "POST", "/tokenize", tb, 200);
    const int64_t n_prompt = (int64_t)json_array_size(json_object_get(tk, "tokens"));
    cr_assert_gt(n_prompt, 32);
    json_t *a = http_json(&s, "POST", "/completion", body, 200);
    json_t *b = http_json(&s, "POST", "/completion", body, 200);
    cr_expect_gt(jint(b, "timings/cache_n"), 0);
    json_t *e = http_json(&s, "POST", "/slots/1?action=erase", NULL, 200);
    cr_expect_eq(jint(e, "id_slot"), 1);
    cr_expect_gt(jint(e, "n_erased"), 0);
    cr_expect_eq(jint(e, "n_erased") % 16, 0);
    json_t *c = http_json(&s, "POST", "/completion", body, 200);
    cr_expect_eq(jint(c, "timings/cache_n"), 0);
    cr_expect_eq(jint(c, "timings/prompt_n"), n_prompt);
    cr_expect_str_eq(jstr(c, "content"), jstr(a, "content"));
    const char *bad[] = {"/slots/2?action=erase", "/slots/0", "/slots/0?action=drop"};
    for (size_t i = 0; i < 3; i++) {
        json_t *r = http_json(&s, "POST", bad[i], NULL, 400);
        json_decref(r);
    }
    json_t *sv = http_json(&s, "POST", "/slots/0?action=save", "{\"filename\":\"x.bin\"}", 501);
    cr_expect_str_eq(jstr(sv, "error/type"), "not_supported_error");
    json_decref(sv);
    json_decref(tk);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(e);
    free(tb);
    srv_stop_ok(&s);
}
