/*
 * tests/test_server_logprobs.c: logprobs, top_logprobs and logit_bias on `specdec serve`
 * (the shipped TinyStories pair, 127.0.0.1, a port the server picks), driven with curl.
 *
 * References are independent of the server: `specdec generate --json --logprobs N` (the
 * CLI, target alone) gives each token's logprob and alternatives, which the completions
 * answer must carry (to the server's 15 significant digits; checked to 1e-5); with a draft (LLM,
 * n-gram) the answer's logprobs must be the same JSON as target alone's; a stream's chunks together
 * must be the non-streamed answer's logprobs; the shapes are OpenAI's (chat: content[] of {token,
 * logprob, bytes, top_logprobs}; completions: tokens, token_logprobs, top_logprobs, text_offset),
 * checked field by field. Bad input gets a 400 naming the field.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server_util.h"
#include "testutil.h"

#define TS_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define TS_DRAFT  SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"
#define PROMPT    "Once upon a time, there was a little girl named Lily."

static srv g_srv;

/* Start `specdec serve` with the pair. */
static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
    tu_need_path(TS_TARGET, "the shipped TinyStories target");
    tu_need_path(TS_DRAFT, "the shipped TinyStories draft");
    srv_start(&g_srv, "-m " TS_TARGET " -md " TS_DRAFT " -np 2 -c 1024");
}

static void teardown(void) {
    if (g_srv.pid > 0) srv_term(&g_srv, 30.0);
    tu_rmdir(g_dir);
}

TestSuite(server_logprobs, .init = setup, .fini = teardown, .timeout = 300);

/* POST body to path; the status, *out the answer (malloc'd). */
static int post(const char *path, const char *body, char **out) {
    return http(&g_srv, "POST", path, body, NULL, out);
}

static json_t *post_json(const char *path, const char *body) {
    char *o = NULL;
    const int code = post(path, body, &o);
    cr_assert_eq(code, 200, "%s %s: %d %s", path, body, code, o);
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j, "not JSON: %s", o);
    free(o);
    return j;
}

static json_t *choice0(json_t *j) {
    return json_array_get(json_object_get(j, "choices"), 0);
}

static int completion_tokens(json_t *j) {
    return (int)json_integer_value(
        json_object_get(json_object_get(j, "usage"), "completion_tokens"));
}

/* Completions' logprobs: one entry per token in every array, the tokens spell the text,
 * offsets count the characters before each token, at most `top` alternatives sorted by
 * logprob, the token's logprob at most the best alternative's. */
static void check_completion_shape(json_t *j, int top) {
    json_t *c = choice0(j), *lp = json_object_get(c, "logprobs");
    cr_assert(json_is_object(lp), "no logprobs object");
    json_t *toks = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    const size_t n = json_array_size(toks);
    cr_assert_eq(n, (size_t)completion_tokens(j));
    cr_assert_eq(json_array_size(lps), n);
    cr_assert_eq(json_array_size(tops), n);
    cr_assert_eq(json_array_size(offs), n);
    char text[4096] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = json_string_value(json_array_get(toks, i));
        cr_assert_not_null(t);
        cr_assert_eq(json_integer_value(json_array_get(offs, i)), (json_int_t)len, "offset %zu", i);
        cr_assert_lt(len + strlen(t), sizeof text);
        memcpy(text + len, t, strlen(t) + 1);
        len += strlen(t);
        const double x = json_number_value(json_array_get(lps, i));
        cr_assert(x <= 0.0, "logprob %zu is %g", i, x);
        json_t *alt = json_array_get(tops, i);
        cr_assert(json_is_object(alt));
        cr_assert(json_object_size(alt) >= 1 && json_object_size(alt) <= (size_t)top);
        double best = -INFINITY;
        const char *k;
        json_t *v;
        json_object_foreach(alt, k, v) {
            if (json_number_value(v) > best) best = json_number_value(v);
        }
        cr_assert(x <= best + 1e-9, "token %zu: %g above its best alternative %g", i, x, best);
    }
    cr_assert_str_eq(text, json_string_value(json_object_get(c, "text")),
                     "the tokens do not spell the text");
}

/* Chat's logprobs: content[] of {token, logprob, bytes, top_logprobs[top]} spelling the
 * message, bytes the token's, alternatives sorted. */
static void check_chat_shape(json_t *j, int top) {
    json_t *c = choice0(j), *content = json_object_get(json_object_get(c, "logprobs"), "content");
    cr_assert(json_is_array(content), "no logprobs.content");
    const size_t n = json_array_size(content);
    cr_assert_eq(n, (size_t)completion_tokens(j));
    char text[4096] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(content, i);
        const char *t = json_string_value(json_object_get(e, "token"));
        cr_assert_not_null(t);
        json_t *bytes = json_object_get(e, "bytes");
        cr_assert_eq(json_array_size(bytes), strlen(t));
        for (size_t b = 0; b < strlen(t); b++)
            cr_assert_eq(json_integer_value(json_array_get(bytes, b)), (unsigned char)t[b]);
        cr_assert_lt(len + strlen(t), sizeof text);
        memcpy(text + len, t, strlen(t) + 1);
        len += strlen(t);
        const double x = json_number_value(json_object_get(e, "logprob"));
        cr_assert(x <= 0.0);
        json_t *alt = json_object_get(e, "top_logprobs");
        cr_assert_eq(json_array_size(alt), (size_t)top);
        for (size_t a = 0; a < json_array_size(alt); a++) {
            json_t *ae = json_array_get(alt, a);
            cr_assert(json_is_string(json_object_get(ae, "token")));
            cr_assert(json_is_array(json_object_get(ae, "bytes")));
            if (a > 0)
                cr_assert(
                    json_number_value(json_object_get(ae, "logprob")) <=
                    json_number_value(json_object_get(json_array_get(alt, a - 1), "logprob")));
        }
        if (top > 0)
            cr_assert(x <=
                      json_number_value(json_object_get(json_array_get(alt, 0), "logprob")) + 1e-9);
    }
    cr_assert_str_eq(text,
                     json_string_value(json_object_get(json_object_get(c, "message"), "content")));
}

static const char *const k_drafts[] = {",\"draft_max\":0",
                                       ",\"draft_type\":\"llm\",\"draft_max\":4",
                                       ",\"draft_type\":\"ngram\",\"draft_max\":4"};

Test(server_logprobs, equal_with_and_without_draft_and_to_generate) {
    const char *temps[2] = {"\"temperature\":0", "\"temperature\":0.7,\"seed\":5"};
    char b[2048];
    for (int t = 0; t < 2; t++) {
        json_t *ref_c = NULL, *ref_h = NULL;
        for (int d = 0; d < 3; d++) {
            snprintf(b, sizeof b, "{\"prompt\":\"%s\",\"max_tokens\":40,%s,\"logprobs\":3%s}",
                     PROMPT, temps[t], k_drafts[d]);
            json_t *jc = post_json("/v1/completions", b);
            check_completion_shape(jc, 3);
            snprintf(b, sizeof b,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":40,"
                     "%s,\"logprobs\":true,\"top_logprobs\":3%s}",
                     PROMPT, temps[t], k_drafts[d]);
            json_t *jh = post_json("/v1/chat/completions", b);
            check_chat_shape(jh, 3);
            if (d == 1) /* the LLM draft drafted: the comparison is about speculation */
                cr_assert_gt(json_integer_value(
                                 json_object_get(json_object_get(jc, "speculative"), "drafted")),
                             0);
            if (d == 0) {
                ref_c = jc;
                ref_h = jh;
                continue;
            }
            cr_assert(json_equal(json_object_get(choice0(jc), "logprobs"),
                                 json_object_get(choice0(ref_c), "logprobs")),
                      "completions logprobs with draft %s differ from target alone", k_drafts[d]);
            cr_assert(json_equal(json_object_get(choice0(jh), "logprobs"),
                                 json_object_get(choice0(ref_h), "logprobs")),
                      "chat logprobs with draft %s differ from target alone", k_drafts[d]);
            json_decref(jc);
            json_decref(jh);
        }
        if (t == 0) { /* against the CLI, target alone (greedy, the same prompt tokens) */
            char pf[600], cmd[2048];
            snprintf(pf, sizeof pf, "%s/prompt.txt", g_dir);
            cr_assert_eq(tu_write_file(pf, PROMPT, strlen(PROMPT)), 0);
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s -f %s -n 40 --temp 0 -t 1 --no-draft --json --logprobs "
                     "3 --log-disable",
                     SD_BINARY, TS_TARGET, pf);
            char *o = NULL;
            cr_assert_eq(tu_run(cmd, &o, NULL), 0);
            json_t *g = json_loads(o, 0, NULL);
            cr_assert_not_null(g, "%s", o);
            json_t *glp = json_object_get(g, "logprobs");
            json_t *slp = json_object_get(choice0(ref_c), "logprobs");
            json_t *lps = json_object_get(slp, "token_logprobs"),
                   *tops = json_object_get(slp, "top_logprobs");
            cr_assert_eq(json_array_size(glp), json_array_size(lps));
            for (size_t i = 0; i < json_array_size(glp); i++) {
                json_t *e = json_array_get(glp, i);
                const double want = json_number_value(json_object_get(e, "logprob"));
                const double got = json_number_value(json_array_get(lps, i));
                cr_assert(fabs(got - want) <= 1e-5 * fabs(want) + 1e-9,
                          "token %zu: served %.9g, generate %.9g", i, got, want);
                json_t *gt = json_object_get(e, "top"), *st = json_array_get(tops, i);
                for (size_t a = 0; a < json_array_size(gt); a++) {
                    json_t *ga = json_array_get(gt, a);
                    json_t *sv =
                        json_object_get(st, json_string_value(json_object_get(ga, "text")));
                    cr_assert_not_null(sv, "alternative %zu of %zu missing", a, i);
                    const double w = json_number_value(json_object_get(ga, "logprob"));
                    cr_assert(fabs(json_number_value(sv) - w) <= 1e-5 * fabs(w) + 1e-9);
                }
            }
            json_decref(g);
            free(o);
        }
        json_decref(ref_c);
        json_decref(ref_h);
    }
}

/* The logprobs of a stream's chunks, joined (chat: the content entries; completions: each
 * array concatenated). */
static json_t *stream_logprobs(const char *sse, int chat) {
    json_t *all = chat ? json_pack("{s:[],s:n}", "content", "refusal")
                       : json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                                   "top_logprobs", "text_offset");
    int done = 0;
    for (const char *p = sse; (p = strstr(p, "data: ")); p += 6) {
        const char *e = strstr(p, "\n\n");
        cr_assert_not_null(e);
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = 1;
            break;
        }
        json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        cr_assert_not_null(j);
        json_t *c = choice0(j), *lp = c ? json_object_get(c, "logprobs") : NULL;
        if (lp && !json_is_null(lp)) {
            const char *k;
            json_t *v;
            json_object_foreach(lp, k, v) {
                if (json_is_array(v)) json_array_extend(json_object_get(all, k), v);
            }
        }
        json_decref(j);
    }
    cr_assert(done, "the stream did not end with [DONE]");
    return all;
}

Test(server_logprobs, streamed_equal_not_streamed) {
    char b[2048];
    for (int chat = 0; chat < 2; chat++) {
        const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
        for (int d = 0; d < 2; d++) {
            if (chat)
                snprintf(b, sizeof b,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":"
                         "30,\"temperature\":0.7,\"seed\":9,\"logprobs\":true,\"top_logprobs\":"
                         "2%s}",
                         PROMPT, k_drafts[d]);
            else
                snprintf(b, sizeof b,
                         "{\"prompt\":\"%s\",\"max_tokens\":30,\"temperature\":0.7,\"seed\":9,"
                         "\"logprobs\":2%s}",
                         PROMPT, k_drafts[d]);
            json_t *j = post_json(path, b);
            b[strlen(b) - 1] = '\0';
            strcat(b, ",\"stream\":true}");
            char *o = NULL;
            cr_assert_eq(post(path, b, &o), 200, "%s", o);
            json_t *s = stream_logprobs(o, chat);
            cr_assert(json_equal(s, json_object_get(choice0(j), "logprobs")),
                      "%s: the stream's logprobs differ from the answer's (%s)", path, k_drafts[d]);
            json_decref(s);
            json_decref(j);
            free(o);
        }
    }
}

static void expect_400(const char *path, const char *body, const char *param) {
    char *o = NULL;
    const int code = post(path, body, &o);
    cr_expect_eq(code, 400, "%s: %d %s", body, code, o);
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j, "%s", o);
    json_t *e = json_object_get(j, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "param")), param, "%s", o);
    const char *msg = json_string_value(json_object_get(e, "message"));
    cr_expect(msg && !strchr(msg, '\n'), "one line: %s", o);
    json_decref(j);
    free(o);
}

Test(server_logprobs, bad_input_names_the_field) {
    const char *c = "/v1/completions", *h = "/v1/chat/completions";
    expect_400(c, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs");
    expect_400(c, "{\"prompt\":\"a\",\"logprobs\":-1}", "logprobs");
    expect_400(c, "{\"prompt\":\"a\",\"logprobs\":\"3\"}", "logprobs");
    expect_400(c, "{\"prompt\":\"a\",\"top_logprobs\":3}", "top_logprobs");
    expect_400(h, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":3}",
               "logprobs");
    expect_400(h, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":3}",
               "top_logprobs");
    expect_400(h,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,"
               "\"top_logprobs\":21}",
               "top_logprobs");
    expect_400(c, "{\"prompt\":\"a\",\"logit_bias\":[1]}", "logit_bias");
    expect_400(c, "{\"prompt\":\"a\",\"logit_bias\":{\"abc\":true}}", "logit_bias");
    expect_400(c, "{\"prompt\":\"a\",\"logit_bias\":{\"512\":1}}", "logit_bias");
    expect_400(c, "{\"prompt\":\"a\",\"logit_bias\":{\"-1\":1}}", "logit_bias");
    expect_400(c, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":100.5}}", "logit_bias");
    expect_400(c, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":\"x\"}}", "logit_bias");
    expect_400(h,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logit_bias\":{\"5\":-101}}",
               "logit_bias");
    /* Still serving; no logprobs asked: null, as before. */
    json_t *j = post_json(c, "{\"prompt\":\"a\",\"max_tokens\":3,\"logit_bias\":{}}");
    cr_expect(json_is_null(json_object_get(choice0(j), "logprobs")));
    json_decref(j);
}

Test(server_logprobs, logit_bias_forces_and_bans_with_and_without_draft) {
    char b[2048];
    /* The greedy text and its first token's id (generate --json, target alone). */
    char pf[600], cmd[2048];
    snprintf(pf, sizeof pf, "%s/prompt.txt", g_dir);
    cr_assert_eq(tu_write_file(pf, PROMPT, strlen(PROMPT)), 0);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -f %s -n 20 --temp 0 -t 1 --json --log-disable",
             SD_BINARY, TS_TARGET, pf);
    char *o = NULL;
    cr_assert_eq(tu_run(cmd, &o, NULL), 0);
    json_t *g = json_loads(o, 0, NULL);
    free(o);
    cr_assert_not_null(g);
    const int first = (int)json_integer_value(json_array_get(json_object_get(g, "tokens"), 0));
    const char *plain = json_string_value(json_object_get(g, "text"));
    const int pick = first == 300 ? 301 : 300;
    char *texts[2][3];
    for (int ban = 0; ban < 2; ban++)
        for (int d = 0; d < 3; d++) {
            snprintf(b, sizeof b,
                     "{\"prompt\":\"%s\",\"max_tokens\":20,\"temperature\":0,\"logprobs\":0,"
                     "\"logit_bias\":{\"%d\":%s}%s}",
                     PROMPT, ban ? first : pick, ban ? "-100" : "100", k_drafts[d]);
            json_t *j = post_json("/v1/completions", b);
            texts[ban][d] = strdup(json_string_value(json_object_get(choice0(j), "text")));
            json_t *toks = json_object_get(json_object_get(choice0(j), "logprobs"), "tokens");
            if (!ban) /* +100: every token is the picked one */
                for (size_t i = 1; i < json_array_size(toks); i++)
                    cr_assert_str_eq(json_string_value(json_array_get(toks, i)),
                                     json_string_value(json_array_get(toks, 0)));
            json_decref(j);
            if (d > 0)
                cr_assert_str_eq(texts[ban][d], texts[ban][0], "%s: with draft %s",
                                 ban ? "ban" : "+100", k_drafts[d]);
        }
    cr_assert_str_neq(texts[1][0], plain, "the -100 ban changed nothing");
    cr_assert_str_neq(texts[0][0], plain, "the +100 bias changed nothing");
    for (int ban = 0; ban < 2; ban++)
        for (int d = 0; d < 3; d++)
            free(texts[ban][d]);
    json_decref(g);
}
