/*
 * tests/test_server.c: `specdec serve` end to end, on 127.0.0.1 with a port the server
 * picks (--port 0, read from its first line), driven with curl; every test is bounded
 * in time and stops its server (SIGTERM, exit status 0 checked).
 *
 * References are independent of the server: `specdec generate --json` (target alone,
 * greedy) gives the text of a completion, which the server must return for the same
 * prompt with a draft model, streamed or not, alone or among 8 concurrent requests (all
 * of them). Faults each get their status and an OpenAI error body naming the field.
 * After every test the KV pools balance: nothing is queued or running, every block in
 * use is held by the prefix cache alone, and the server's idle accounting check passed.
 * The openai Python client (tests/server_openai.py) and the chat page in headless
 * Chromium run when those are installed (else the tests skip, saying so).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server_util.h"
#include "testutil.h"

#define TS_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define TS_DRAFT  SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(server, .init = setup, .fini = teardown, .timeout = 300);

/* A /proc file (size 0 to stat: read until EOF). */
static char *slurp_proc(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (size_t r; (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (cap - n < 4096) b = realloc(b, cap *= 2);
    }
    b[n] = '\0';
    fclose(f);
    return b;
}

/* Read from fd until the peer closes or timeout s pass without it; the bytes read
 * (NUL-terminated, NUL bytes kept in *n); *closed: 1 if the peer closed. */
static char *read_until_close(int fd, double timeout, size_t *n, int *closed) {
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    *closed = 0;
    const double t0 = now_s();
    for (;;) {
        const double left = timeout - (now_s() - t0);
        if (left <= 0) break;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, (int)(left * 1e3) + 1) <= 0) continue;
        if (len == cap) b = realloc(b, (cap *= 2) + 1);
        const ssize_t r = recv(fd, b + len, cap - len, 0);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        len += (size_t)r;
    }
    b[len] = '\0';
    if (n) *n = len;
    return b;
}

/* Send n bytes of a raw request on a new connection (then shutdown(SHUT_WR) when
 * shut_wr) and read until the server closes (at most timeout s); the answer's bytes. */
static char *raw_http(const srv *s, const char *req, size_t n, int shut_wr, double timeout,
                      int *closed) {
    const int fd = tcp_connect(s->port, 0);
    cr_assert_geq(fd, 0, "connect: %s", strerror(errno));
    cr_assert_eq(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
    if (shut_wr) shutdown(fd, SHUT_WR);
    char *o = read_until_close(fd, timeout, NULL, closed);
    close(fd);
    return o;
}

/* The final answer of raw bytes: past the interim 1xx answers ("HTTP/1.1 100 Continue"
 * and its blank line), which an HTTP/1.1 client reads past (RFC 9110, 15.2). */
static const char *raw_final(const char *o) {
    while (!strncmp(o, "HTTP/1.1 1", 10)) {
        const char *e = strstr(o, "\r\n\r\n");
        if (!e) break;
        o = e + 4;
    }
    return o;
}

/* The status of a raw answer ("HTTP/1.1 200 OK..."), 0 if none. */
static int raw_status(const char *o) {
    o = raw_final(o);
    return strncmp(o, "HTTP/1.", 7) == 0 ? atoi(o + 9) : 0;
}

/* The body of a raw answer (after the blank line), parsed as JSON (asserted). */
static json_t *raw_json(const char *o) {
    const char *b = strstr(raw_final(o), "\r\n\r\n");
    cr_assert_not_null(b, "no header end: %s", o);
    json_t *j = json_loads(b + 4, 0, NULL);
    cr_assert_not_null(j, "the body is not JSON: %s", o);
    return j;
}

/* Nothing queued or running, then: every block in use is the prefix cache's alone, and
 * the server's accounting check passed. The idle check runs when the engine goes idle,
 * so the state is polled until it holds (bounded at 60 s: a bound, not a measure). */
static void expect_pools_balance(const srv *s) {
    const double t0 = now_s();
    for (;;) {
        const int idle = metric(s, "requests_running") == 0 && metric(s, "queue_depth") == 0;
        const int ok =
            idle && metric(s, "kv_accounting_ok") == 1 &&
            metric(s, "kv_blocks_used") == metric(s, "kv_blocks_cached_idle") &&
            metric(s, "kv_draft_blocks_used") == metric(s, "kv_draft_blocks_cached_idle");
        if (ok) break;
        if (now_s() - t0 > 60.0) {
            cr_expect(idle, "requests still running 60 s after the test");
            cr_expect_eq(metric(s, "kv_accounting_ok"), 1, "KV accounting failed (server log)");
            cr_expect_eq(metric(s, "kv_blocks_used"), metric(s, "kv_blocks_cached_idle"),
                         "target blocks held after every request ended");
            cr_expect_eq(metric(s, "kv_draft_blocks_used"),
                         metric(s, "kv_draft_blocks_cached_idle"),
                         "draft blocks held after every request ended");
            return;
        }
        usleep(50000);
    }
}

/* specdec generate's greedy text (target alone, F16 KV as the server). */
static char *generate_text(const char *model, const char *prompt, int n) {
    char pf[600], cmd[4096];
    snprintf(pf, sizeof pf, "%s/prompt.txt", g_dir);
    cr_assert_eq(tu_write_file(pf, prompt, strlen(prompt)), 0);
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -f %s -n %d --temp 0 --kv-type f16 -t 1 --json --log-disable",
             SD_BINARY, model, pf, n);
    char *o = NULL;
    cr_assert_eq(tu_run(cmd, &o, NULL), 0, "generate failed");
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j);
    char *t = strdup(json_string_value(json_object_get(j, "text")));
    json_decref(j);
    free(o);
    return t;
}

static char *completion_body(const char *prompt, int n, int stream, const char *extra) {
    json_t *j = json_pack("{s:s,s:i,s:f,s:b}", "prompt", prompt, "max_tokens", n, "temperature",
                          0.0, "stream", stream);
    char *b = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (extra) { /* splice ,"k":v before the closing brace */
        char *nb = malloc(strlen(b) + strlen(extra) + 2);
        b[strlen(b) - 1] = '\0';
        sprintf(nb, "%s,%s}", b, extra);
        free(b);
        b = nb;
    }
    return b;
}

/* The text of a stream of server-sent events (choice 0), checking its shape. */
static char *sse_text(const char *sse, int chat, const char **finish) {
    size_t cap = strlen(sse) + 1, len = 0;
    char *t = calloc(1, cap);
    int done = 0;
    static char fin[32];
    fin[0] = '\0';
    for (const char *p = sse; (p = strstr(p, "data: ")); p += 6) {
        const char *e = strstr(p, "\n\n");
        cr_assert_not_null(e, "an event without its blank line");
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = 1;
            break;
        }
        json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        cr_assert_not_null(j, "an event that is not JSON");
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        if (c) {
            json_t *piece = chat ? json_object_get(json_object_get(c, "delta"), "content")
                                 : json_object_get(c, "text");
            if (piece && json_is_string(piece)) {
                memcpy(t + len, json_string_value(piece), json_string_length(piece));
                len += json_string_length(piece);
            }
            json_t *f = json_object_get(c, "finish_reason");
            if (f && json_is_string(f)) snprintf(fin, sizeof fin, "%s", json_string_value(f));
        }
        json_decref(j);
    }
    cr_assert(done, "the stream did not end with data: [DONE]");
    if (finish) *finish = fin;
    return t;
}

static const char *const k_prompts[8] = {
    "Once upon a time, there was a little girl named Lily.",
    "Tom had a big red ball.",
    "One day, a cat and a dog went to the park.",
    "The sun was hot and the sky was blue.",
    "Sara loved to eat apples.",
    "Once upon a time, there was a little boy named Tim.",
    "Ben saw a bird in the tree.",
    "Mom said, \"Let's go to the store.\"",
};

Test(server, completions_equal_target_alone_streamed_or_not) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " -md " TS_DRAFT " -np 4 -k 4");
    json_t *h = http_json(&s, "GET", "/health", NULL, 200);
    cr_expect_str_eq(json_string_value(json_object_get(h, "status")), "ok");
    json_decref(h);
    json_t *m = http_json(&s, "GET", "/v1/models", NULL, 200);
    cr_expect_str_eq(
        json_string_value(json_object_get(json_array_get(json_object_get(m, "data"), 0), "id")),
        "tinystories-target-q8_0.gguf");
    json_decref(m);
    for (int i = 0; i < 3; i++) {
        char *ref = generate_text(TS_TARGET, k_prompts[i], 60);
        char *b = completion_body(k_prompts[i], 60, 0, NULL);
        json_t *j = http_json(&s, "POST", "/v1/completions", b, 200);
        free(b);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        cr_assert_str_eq(json_string_value(json_object_get(c, "text")), ref,
                         "prompt %d: the server's text differs from target alone", i);
        json_t *u = json_object_get(j, "usage");
        cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")),
                     json_integer_value(json_object_get(u, "prompt_tokens")) +
                         json_integer_value(json_object_get(u, "completion_tokens")));
        json_t *sp = json_object_get(j, "speculative");
        cr_expect_gt(json_integer_value(json_object_get(sp, "drafted")), 0, "no drafting");
        cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
        /* Streamed: the same text, piece by piece. */
        b = completion_body(k_prompts[i], 60, 1, NULL);
        char *o = NULL;
        cr_assert_eq(http(&s, "POST", "/v1/completions", b, NULL, &o), 200);
        const char *fin = NULL;
        char *st = sse_text(o, 0, &fin);
        cr_assert_str_eq(st, ref, "prompt %d: streamed text differs", i);
        cr_expect_str_eq(fin, json_string_value(json_object_get(c, "finish_reason")));
        free(st);
        free(o);
        free(b);
        json_decref(j);
        free(ref);
    }
    /* tokenize / detokenize round trip. */
    json_t *t = http_json(&s, "POST", "/tokenize", "{\"content\":\"Once upon a time\"}", 200);
    json_t *ids = json_object_get(t, "tokens");
    cr_assert_gt(json_array_size(ids), 0);
    json_t *tj = json_pack("{s:O}", "tokens", ids);
    char *tb = json_dumps(tj, JSON_COMPACT);
    json_decref(tj);
    json_t *d = http_json(&s, "POST", "/detokenize", tb, 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "content")), "Once upon a time");
    free(tb);
    json_decref(t);
    json_decref(d);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0, "exit status after SIGTERM");
}

/* 8 concurrent requests (4 slots: some wait), half streamed: every one equals its own
 * output alone (100% of requests). */
Test(server, concurrent_requests_equal_alone) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " -md " TS_DRAFT " -np 4 -k 3 --draft-type ngram+llm");
    char *alone[8];
    for (int i = 0; i < 8; i++) {
        char *b = completion_body(k_prompts[i], 48, 0, NULL);
        json_t *j = http_json(&s, "POST", "/v1/completions", b, 200);
        alone[i] = strdup(json_string_value(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")));
        json_decref(j);
        free(b);
    }
    /* All at once: a shell that starts 8 curls and waits for them. */
    char script[8192] = "", bf[600], of[600];
    size_t n = 0;
    for (int i = 0; i < 8; i++) {
        char *b = completion_body(k_prompts[i], 48, i % 2, NULL);
        snprintf(bf, sizeof bf, "%s/cb-%d", g_dir, i);
        cr_assert_eq(tu_write_file(bf, b, strlen(b)), 0);
        free(b);
        snprintf(of, sizeof of, "%s/co-%d", g_dir, i);
        n += (size_t)snprintf(script + n, sizeof script - n,
                              "curl -s -N --max-time 120 -o %s -H 'Content-Type: application/json' "
                              "--data-binary @%s http://127.0.0.1:%d/v1/completions & ",
                              of, bf, s.port);
    }
    snprintf(script + n, sizeof script - n, "wait");
    cr_assert_eq(tu_run(script, NULL, NULL), 0);
    for (int i = 0; i < 8; i++) {
        snprintf(of, sizeof of, "%s/co-%d", g_dir, i);
        char *o = slurp(of);
        cr_assert_not_null(o);
        char *text;
        if (i % 2) {
            text = sse_text(o, 0, NULL);
        } else {
            json_t *j = json_loads(o, 0, NULL);
            cr_assert_not_null(j, "request %d: %s", i, o);
            text = strdup(json_string_value(
                json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")));
            json_decref(j);
        }
        cr_assert_str_eq(text, alone[i], "request %d under concurrency differs from alone", i);
        free(text);
        free(o);
        free(alone[i]);
    }
    cr_expect_geq(metric(&s, "requests_finished_total"), 16);
    cr_expect_gt(metric(&s, "accepted_tokens_total"), 0);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

Test(server, chat_streamed_equals_not_and_n_choices) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " -md " TS_DRAFT " -np 4 --chat-template chatml");
    const char *body = "{\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story.\"},"
                       "{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
                       "\"max_tokens\":40,\"temperature\":0%s}";
    char b[4096];
    snprintf(b, sizeof b, body, "");
    json_t *j = http_json(&s, "POST", "/v1/chat/completions", b, 200);
    cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    const char *text = json_string_value(json_object_get(msg, "content"));
    snprintf(b, sizeof b, body, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    char *o = NULL;
    cr_assert_eq(http(&s, "POST", "/v1/chat/completions", b, NULL, &o), 200);
    char *st = sse_text(o, 1, NULL);
    cr_expect_str_eq(st, text, "streamed chat text differs");
    cr_expect_not_null(strstr(o, "\"role\":\"assistant\""), "the first delta names the role");
    cr_expect_not_null(strstr(o, "\"usage\":{"), "include_usage: a usage chunk");
    free(st);
    free(o);
    json_decref(j);
    /* n = 3 sampled choices: three answers, usage counts every completion token. */
    snprintf(b, sizeof b,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
             "\"max_tokens\":30,\"temperature\":1.0,\"seed\":5,\"n\":3}");
    j = http_json(&s, "POST", "/v1/chat/completions", b, 200);
    json_t *ch = json_object_get(j, "choices");
    cr_assert_eq(json_array_size(ch), 3);
    cr_expect_gt(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 0);
    json_decref(j);
    /* A shared system prompt is prefilled once: the next request reuses its blocks. */
    char sys[2048] = "";
    for (int i = 0; i < 12; i++)
        strcat(sys, "Once upon a time, there was a little girl named Lily. ");
    const double hit0 = metric(&s, "prefix_cache_hit_tokens_total");
    const double prompt0 = metric(&s, "prompt_tokens_total");
    for (int q = 0; q < 2; q++) {
        snprintf(b, sizeof b,
                 "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},{\"role\":\"user\","
                 "\"content\":\"%s\"}],\"max_tokens\":8,\"temperature\":0}",
                 sys, q ? "Tom had a ball." : "Sara ate an apple.");
        j = http_json(&s, "POST", "/v1/chat/completions", b, 200);
        json_decref(j);
    }
    const double hits = metric(&s, "prefix_cache_hit_tokens_total") - hit0;
    const double first = (metric(&s, "prompt_tokens_total") - prompt0) / 2;
    cr_expect_gt(hits, 0.6 * first, "the second request reused %g of ~%g prompt positions", hits,
                 first);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

static void expect_error(const srv *s, const char *method, const char *path, const char *body,
                         const char *extra, int want, const char *param, const char *words) {
    char *o = NULL;
    const int code = http(s, method, path, body, extra, &o);
    cr_expect_eq(code, want, "%s %s %s: status %d, expected %d (%s)", method, path,
                 body ? body : "", code, want, o);
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j, "error body is not JSON: %s", o);
    json_t *e = json_object_get(j, "error");
    cr_assert(json_is_object(e), "no error object: %s", o);
    cr_expect(json_is_string(json_object_get(e, "message")));
    cr_expect(json_is_string(json_object_get(e, "type")));
    if (param) cr_expect_str_eq(json_string_value(json_object_get(e, "param")), param, "%s", o);
    if (words)
        cr_expect_not_null(strstr(json_string_value(json_object_get(e, "message")), words),
                           "'%s' not in %s", words, o);
    json_decref(j);
    free(o);
}

Test(server, faults_get_their_status_and_name_the_field) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " -np 2 -c 1024 --max-body 2048");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\": \"hi\",", NULL, 400, NULL,
                 "malformed JSON");
    expect_error(&s, "POST", "/v1/completions", "[1,2]", NULL, 400, NULL, "JSON object");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"ten\"}", NULL,
                 400, "max_tokens", "integer");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"temperature\":\"hot\"}", NULL,
                 400, "temperature", "number");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"stream\":1}", NULL, 400,
                 "stream", "true or false");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"stop\":[1]}", NULL, 400,
                 "stop", NULL);
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"n\":0}", NULL, 400, "n", NULL);
    expect_error(&s, "POST", "/v1/completions", "{\"max_tokens\":3}", NULL, 400, "prompt",
                 "required");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":[1,99999]}", NULL, 400, "prompt",
                 "token id");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"logprobs\":21}", NULL, 400,
                 "logprobs", "0 .. 20");
    expect_error(&s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"cat\"}]}", NULL,
                 400, "messages[0].role", NULL);
    expect_error(&s, "POST", "/v1/chat/completions", "{\"messages\":5}", NULL, 400, "messages",
                 NULL);
    /* A sequence holds 1024 / 2 = 512 positions. */
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":600}", NULL,
                 400, "max_tokens", "exceed the context");
    expect_error(&s, "POST", "/v1/completions",
                 "{\"prompt\":\"a\",\"max_tokens\":4,\"draft_type\":\"llm\",\"draft_max\":2}", NULL,
                 400, NULL, "draft model");
    expect_error(&s, "GET", "/v1/nothing", NULL, NULL, 404, NULL, NULL);
    expect_error(&s, "GET", "/v1/completions", NULL, NULL, 405, NULL, NULL);
    /* A body over --max-body 2048. */
    char big[4096];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, "{\"prompt\":\"", 11);
    expect_error(&s, "POST", "/v1/completions", big, NULL, 413, NULL, "limit");
    /* The server is still fine. */
    json_t *j = http_json(&s, "POST", "/v1/completions",
                          "{\"prompt\":\"Once\",\"max_tokens\":5,\"temperature\":0}", 200);
    json_decref(j);
    cr_expect_gt(metric(&s, "requests_rejected_total"), -1);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

Test(server, api_key_and_full_queue) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " -np 1 --api-key s3cret --max-queue 0");
    json_t *h = http_json(&s, "GET", "/health", NULL, 200); /* open */
    json_decref(h);
    expect_error(&s, "GET", "/v1/models", NULL, NULL, 401, NULL, "API key");
    expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cre'", 401, NULL,
                 NULL);
    expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret!'", 401, NULL,
                 NULL);
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\"}", NULL, 401, NULL, NULL);
    char *o = NULL;
    cr_expect_eq(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret'", &o), 200);
    free(o);
    /* --max-queue 0: no request can wait, so every one is turned away with Retry-After. */
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2}",
                 "-H 'Authorization: Bearer s3cret'", 503, NULL, "queue is full");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "curl -s -D - -o /dev/null -H 'Authorization: Bearer s3cret' --data-binary "
             "'{\"prompt\":\"a\"}' http://127.0.0.1:%d/v1/completions",
             s.port);
    char *hdr = NULL;
    tu_run(cmd, &hdr, NULL);
    cr_expect_not_null(strstr(hdr, "Retry-After: 1"), "headers: %s", hdr);
    free(hdr);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* A start that must fail: the exit status is 2 (usage) and stderr one line naming why. */
static void expect_refused_start(const char *args, const char *words) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 60 %s serve --port 0 -t 1 %s", SD_BINARY, args);
    char *o = NULL, *e = NULL;
    const int rc = tu_run(cmd, &o, &e);
    cr_expect_eq(rc, 2, "serve %s: exit %d (%s)", args, rc, o);
    cr_expect_null(strstr(o ? o : "", "listening"), "serve %s listened", args);
    cr_expect_not_null(strstr(e ? e : "", words), "'%s' not in: %s", words, e);
    cr_expect_eq(strchr(e ? e : "", '\n'), e ? strrchr(e, '\n') : NULL, "not one line: %s", e);
    free(e);
    free(o);
}

/* What a hostile client found (each once failed): every one gets an answer with its
 * status, or a close, and the server goes on. */
Test(server, hostile_clients_get_their_status) {
    /* An empty key would start an open server: refused at start. */
    char kf[600];
    tu_path(kf, sizeof kf, g_dir, "empty.key");
    cr_assert_eq(tu_write_file(kf, "\n", 1), 0);
    char args[1024];
    snprintf(args, sizeof args, "-m %s --api-key-file %s", TS_TARGET, kf);
    expect_refused_start(args, "empty key");
    expect_refused_start("-m " TS_TARGET " --api-key ''", "empty");
    srv s;
    srv_start(&s, "-m " TS_TARGET " -md " TS_DRAFT " -np 2 -k 4 --max-body 2048 --timeout 2");
    /* /tokenize read add_special after releasing the request (ASan stopped the server). */
    expect_error(&s, "POST", "/tokenize", "{\"content\":\"x\",\"add_special\":1}", NULL, 400,
                 "add_special", "true or false");
    expect_error(&s, "POST", "/tokenize", "{\"content\":\"x\",\"with_pieces\":\"y\"}", NULL, 400,
                 "with_pieces", "true or false");
    /* Invalid UTF-8 quoted in a message: 404 / 400 with a JSON body, not 500. */
    expect_error(&s, "GET", "/%FF%FE", NULL, NULL, 404, NULL, "no route");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"\xff\":1,}", NULL, 400, NULL,
                 "malformed JSON");
    /* A decoded NUL does not cut the path. */
    expect_error(&s, "GET", "/health%00x", NULL, NULL, 404, NULL, NULL);
    int closed = 0;
    /* HTTP/1.1 without Host: 400; HTTP/1.0 without it is fine. */
    const char *nohost = "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n";
    char *o = raw_http(&s, nohost, strlen(nohost), 0, 60, &closed);
    cr_expect_eq(raw_status(o), 400, "%s", o);
    free(o);
    const char *h10 = "GET /health HTTP/1.0\r\n\r\n";
    o = raw_http(&s, h10, strlen(h10), 0, 60, &closed);
    cr_expect_eq(raw_status(o), 200, "%s", o);
    free(o);
    /* The body's length given twice (two Content-Length, or one beside chunked): 400. */
    const char *const twice[] = {
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        "Content-Length: 50\r\nConnection: close\r\n\r\n{\"a\":",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"};
    for (int i = 0; i < 2; i++) {
        o = raw_http(&s, twice[i], strlen(twice[i]), 0, 60, &closed);
        cr_expect_eq(raw_status(o), 400, "%s", o);
        cr_expect_not_null(strstr(o, "given twice"), "%s", o);
        free(o);
    }
    /* HEAD /health: 200 without a body. */
    const char *head = "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    o = raw_http(&s, head, strlen(head), 0, 60, &closed);
    cr_expect_eq(raw_status(o), 200, "%s", o);
    cr_expect_null(strstr(o, "status"), "HEAD answered with a body: %s", o);
    free(o);
    /* A chunked body over --max-body: 413 (and counted once, as it went out). */
    const double e4 = metric(&s, "http_responses_total{class=\"4xx\"}");
    size_t cap = 8192, n = 0;
    char *big = malloc(cap);
    n += (size_t)snprintf(big, cap,
                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 6; i++) {
        n += (size_t)snprintf(big + n, cap - n, "200\r\n");
        memset(big + n, 'a', 512);
        n += 512;
        n += (size_t)snprintf(big + n, cap - n, "\r\n");
    }
    n += (size_t)snprintf(big + n, cap - n, "0\r\n\r\n");
    o = raw_http(&s, big, n, 0, 60, &closed);
    cr_expect_eq(raw_status(o), 413, "%s", o);
    free(o);
    free(big);
    cr_expect_eq(metric(&s, "http_responses_total{class=\"4xx\"}") - e4, 1,
                 "4xx answers counted: one 413 went out");
    /* Statistics are printed with few digits: tokens_per_pass (8 tokens in 3 passes here)
     * and acceptance_rate are rounded to 4 decimals, their text at most 6 characters. */
    const char *cb = "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0}";
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(cb), cb);
    o = raw_http(&s, req, strlen(req), 0, 120, &closed);
    cr_expect_eq(raw_status(o), 200, "%s", o);
    json_t *j = raw_json(o);
    json_t *sp = json_object_get(j, "speculative");
    const double dr = (double)json_integer_value(json_object_get(sp, "drafted"));
    const double ac = (double)json_integer_value(json_object_get(sp, "accepted"));
    const double tk = (double)json_integer_value(json_object_get(sp, "tokens"));
    const double ps = (double)json_integer_value(json_object_get(sp, "target_passes"));
    cr_expect_gt(dr, 0);
    cr_expect_gt(ps, 0);
    const double want_ar = dr > 0 ? round(ac / dr * 1e4) / 1e4 : 0;
    const double want_tp = ps > 0 ? round(tk / ps * 1e4) / 1e4 : 0;
    cr_expect_lt(fabs(json_number_value(json_object_get(sp, "acceptance_rate")) - want_ar), 1e-12);
    cr_expect_lt(fabs(json_number_value(json_object_get(sp, "tokens_per_pass")) - want_tp), 1e-12);
    const char *const keys[] = {"\"acceptance_rate\":", "\"tokens_per_pass\":"};
    for (int i = 0; i < 2; i++) {
        const char *v = strstr(o, keys[i]);
        cr_assert_not_null(v);
        v += strlen(keys[i]);
        cr_expect_leq(strcspn(v, ",}"), 6, "printed as %.24s", v);
    }
    cr_expect(json_is_string(json_object_get(j, "system_fingerprint")));
    json_decref(j);
    free(o);
    /* 1000 NUL bytes and a blank line: an error or a close (here --timeout 2 closes the
     * connection that never sent a request), never a connection held open. */
    char nul[1004];
    memset(nul, 0, 1000);
    memcpy(nul + 1000, "\r\n\r\n", 4);
    o = raw_http(&s, nul, sizeof nul, 0, 120, &closed);
    cr_expect(closed, "a connection of NUL bytes was held open for 120 s");
    cr_expect(raw_status(o) == 0 || raw_status(o) == 400, "%s", o);
    free(o);
    /* The server is fine, and logged no client event as an error. */
    j = http_json(&s, "GET", "/health", NULL, 200);
    json_decref(j);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
    char *log = slurp(s.log);
    cr_expect_null(strstr(log, "rror"), "the server log has an error line:\n%s", log);
    free(log);
}

/* A client that half-closes (shutdown(SHUT_WR)) before its request is whole can never
 * complete it: the connection is closed (or answered) at once, not held until --timeout
 * (600 s here: the 60 s bound tells them apart). Cut in the headers, in a chunked body and
 * in a Content-Length body; the three wait side by side. */
Test(server, half_closed_incomplete_request_is_closed) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " --timeout 600");
    const char *const parts[] = {
        "POST /v1/completions HTTP/1.1\r\nHo",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\n{\"pro",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro",
    };
    enum { N = sizeof parts / sizeof parts[0] };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = tcp_connect(s.port, 0);
        cr_assert_geq(fds[i], 0, "connect: %s", strerror(errno));
        const size_t n = strlen(parts[i]);
        cr_assert_eq(send(fds[i], parts[i], n, MSG_NOSIGNAL), (ssize_t)n);
        shutdown(fds[i], SHUT_WR);
    }
    const double t0 = now_s();
    for (int i = 0; i < N; i++) {
        const double left = 60 - (now_s() - t0);
        int closed = 0;
        char *o = read_until_close(fds[i], left > 1 ? left : 1, NULL, &closed);
        cr_expect(closed, "a half-closed incomplete request (%d) was held open", i);
        cr_expect(raw_status(o) == 0 || raw_status(o) == 400, "%d: %s", i, o);
        free(o);
        close(fds[i]);
    }
    json_t *j = http_json(&s, "GET", "/health", NULL, 200);
    json_decref(j);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* 512 idle or dripping sockets (a slot each, no thread each) leave the server on the air;
 * the ones that never finish a request are closed at --timeout however they drip. */
Test(server, idle_and_dripping_connections_do_not_block) {
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    const rlim_t need = 512 + 256;
    if (rl.rlim_cur < need) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
            cr_skip_test("open files limited to %llu (ulimit -n)", (unsigned long long)rl.rlim_max);
        rl.rlim_cur = need;
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    srv s;
    srv_start(&s, "-m " TS_TARGET " -np 2 --timeout 3 --max-connections 1024");
    enum { N = 512 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = tcp_connect(s.port, 0);
        cr_assert_geq(fds[i], 0, "connect %d: %s", i, strerror(errno));
        if (i % 2) { /* half a request line */
            const char *part = "POST /v1/completions HTTP/1.1\r\nHo";
            cr_assert_eq(send(fds[i], part, strlen(part), MSG_NOSIGNAL), (ssize_t)strlen(part));
        }
    }
    /* With all of them open, a request is served. */
    json_t *j = http_json(&s, "POST", "/v1/completions",
                          "{\"prompt\":\"Once\",\"max_tokens\":4,\"temperature\":0}", 200);
    json_decref(j);
    /* One socket drips a byte of its headers at a time: closed at its deadline although it
     * is never idle (bounded by 120 s: a bound, not a measure). */
    const double t0 = now_s();
    int dripped = 0, drip_closed = 0;
    while (!drip_closed && now_s() - t0 < 120) {
        if (send(fds[1], "x", 1, MSG_NOSIGNAL) != 1) drip_closed = 1;
        struct pollfd pf = {fds[1], POLLIN, 0};
        if (poll(&pf, 1, 200) > 0) {
            char c;
            if (recv(fds[1], &c, 1, MSG_DONTWAIT) <= 0) drip_closed = 1;
        }
        dripped++;
    }
    cr_expect(drip_closed, "a dripping connection (%d bytes) was never closed", dripped);
    /* Every other one is closed too (each read returns EOF or an error). */
    int n_closed = 0;
    for (int i = 0; i < N; i++) {
        int closed = 0;
        char *o = read_until_close(fds[i], 120 - (now_s() - t0) > 1 ? 120 - (now_s() - t0) : 1,
                                   NULL, &closed);
        n_closed += closed;
        free(o);
        close(fds[i]);
    }
    cr_expect_eq(n_closed, N, "%d of %d silent connections closed", n_closed, N);
    j = http_json(&s, "GET", "/health", NULL, 200);
    json_decref(j);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* Silent sockets that take every connection slot (--max-connections) do not keep a new
 * client waiting for --timeout (600 s here): with half the slots or more taken, a
 * connection without a whole request is closed after a few seconds, and the waiting
 * client is served (curl's 120 s bound tells them apart). */
Test(server, full_connection_slots_free_silent_sockets) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " --timeout 600 --max-connections 32");
    enum { N = 40 }; /* all the slots, and some waiting in the listen queue */
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = tcp_connect(s.port, 0);
        cr_assert_geq(fds[i], 0, "connect %d: %s", i, strerror(errno));
    }
    json_t *j = http_json(&s, "POST", "/v1/completions",
                          "{\"prompt\":\"Once\",\"max_tokens\":2,\"temperature\":0}", 200);
    json_decref(j);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* CORS: the allowed origins get Access-Control-Allow-Origin on every answer and a 200
 * preflight (llama-server's); other origins get nothing; "localhost" allows the local
 * origins only; X-Api-Key is a key. */
static char *headers_of(const srv *s, const char *method, const char *path, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 60 -o /dev/null -D - -X %s %s http://127.0.0.1:%d%s", method,
             extra, s->port, path);
    char *o = NULL;
    tu_run(cmd, &o, NULL);
    return o ? o : strdup("");
}

Test(server, cors_and_x_api_key) {
    srv s;
    srv_start(&s,
              "-m " TS_TARGET " -np 1 --api-key k3y --cors-origins 'http://a.test, http://b.test'");
    char *h = headers_of(&s, "OPTIONS", "/v1/chat/completions",
                         "-H 'Origin: http://b.test' -H 'Access-Control-Request-Method: POST'");
    cr_expect_not_null(strstr(h, " 200"), "%s", h);
    cr_expect_not_null(strstr(h, "Access-Control-Allow-Origin: http://b.test"), "%s", h);
    cr_expect_not_null(strstr(h, "Access-Control-Allow-Methods:"), "%s", h);
    cr_expect_not_null(strstr(h, "Authorization"), "%s", h);
    free(h);
    h = headers_of(&s, "GET", "/v1/models", "-H 'Origin: http://a.test' -H 'X-Api-Key: k3y'");
    cr_expect_not_null(strstr(h, " 200"), "%s", h);
    cr_expect_not_null(strstr(h, "Access-Control-Allow-Origin: http://a.test"), "%s", h);
    free(h);
    /* An error answer carries it too (the page must be able to read the 401). */
    h = headers_of(&s, "GET", "/v1/models", "-H 'Origin: http://a.test' -H 'X-Api-Key: nope'");
    cr_expect_not_null(strstr(h, " 401"), "%s", h);
    cr_expect_not_null(strstr(h, "Access-Control-Allow-Origin: http://a.test"), "%s", h);
    free(h);
    h = headers_of(&s, "GET", "/v1/models",
                   "-H 'Origin: http://c.test' -H 'authorization: bearer k3y'");
    cr_expect_not_null(strstr(h, " 200"), "lowercase bearer: %s", h);
    cr_expect_null(strstr(h, "Access-Control"), "an origin not listed: %s", h);
    free(h);
    cr_expect_eq(srv_stop(&s, 30), 0);
    srv_start(&s, "-m " TS_TARGET " -np 1");
    h = headers_of(&s, "GET", "/health", "-H 'Origin: http://a.test'");
    cr_expect_null(strstr(h, "Access-Control"), "no --cors-origins: %s", h);
    free(h);
    cr_expect_eq(srv_stop(&s, 30), 0);
    /* "localhost": http(s) on localhost, 127.0.0.1 or [::1], any port, reflected */
    srv_start(&s, "-m " TS_TARGET " -np 1 --cors-origins localhost");
    const char *const local[4] = {"http://localhost", "http://127.0.0.1:3000", "https://[::1]:8080",
                                  "HTTP://LOCALHOST:1"};
    const char *const remote[5] = {"http://evil.com", "http://localhost.evil.com",
                                   "http://notlocalhost", "http://localhost:80x",
                                   "ftp://localhost"};
    for (int i = 0; i < 9; i++) {
        const char *o = i < 4 ? local[i] : remote[i - 4];
        char hdr[256], want[256];
        snprintf(hdr, sizeof hdr, "-H 'Origin: %s' -H 'Access-Control-Request-Method: POST'", o);
        h = headers_of(&s, "OPTIONS", "/completions", hdr);
        cr_expect_not_null(strstr(h, " 200"), "%s: %s", o, h);
        snprintf(want, sizeof want, "Access-Control-Allow-Origin: %s\r\n", o);
        if (i < 4)
            cr_expect_not_null(strstr(h, want), "%s: %s", o, h);
        else
            cr_expect_null(strstr(h, "Access-Control"), "%s: %s", o, h);
        free(h);
    }
    cr_expect_eq(srv_stop(&s, 30), 0);
    srv_start(&s, "-m " TS_TARGET " -np 1 --cors-origins '*'");
    h = headers_of(&s, "POST", "/tokenize",
                   "-H 'Origin: http://z.test' --data-binary '{\"content\":\"a\"}'");
    cr_expect_not_null(strstr(h, "Access-Control-Allow-Origin: *"), "%s", h);
    free(h);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* llama-server's surface: /props, /chat/completions without /v1 and the chatml fallback
 * (the test model has no template), a bad grammar and an unsupported schema keyword named
 * in a 400 (structured output itself: scripts/schema_check.py), and the context
 * overflow's code. */
Test(server, llama_server_compatibility) {
    srv s;
    srv_start(&s, "-m " TS_TARGET " -np 2 -c 1024");
    json_t *p = http_json(&s, "GET", "/props", NULL, 200);
    cr_expect_eq(json_integer_value(json_object_get(p, "total_slots")), 2);
    cr_expect_eq(json_integer_value(
                     json_object_get(json_object_get(p, "default_generation_settings"), "n_ctx")),
                 512);
    json_decref(p);
    json_t *j = http_json(&s, "POST", "/chat/completions",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"n_predict\":3,"
                          "\"temperature\":0}",
                          200);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 3);
    json_decref(j);
    expect_error(&s, "POST", "/v1/completions",
                 "{\"prompt\":\"a\",\"grammar\":\"root ::= x-undefined\"}", NULL, 400, "grammar",
                 "grammar:1:");
    expect_error(&s, "POST", "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"json_schema\":"
                 "{\"not\":{}}}",
                 NULL, 400, "json_schema", "'not' is not supported");
    char *o = NULL;
    cr_expect_eq(
        http(&s, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":600}", NULL, &o),
        400);
    json_t *eo = json_loads(o, 0, NULL);
    json_t *e = json_object_get(eo, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")), "context_length_exceeded", "%s",
                     o);
    json_decref(eo);
    free(o);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* A bigger random model, slow enough that a long request is still running when the test
 * acts on it. */
static void slow_model(char *path, size_t cap) {
    tu_path(path, cap, g_dir, "slow.gguf");
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_embd = 768; /* ~40 MB of Q8_0: some hundred tokens a second on one thread */
    sp.n_layer = 6;
    sp.n_head = 12;
    sp.n_head_kv = 4;
    sp.n_ff = 2048;
    sp.n_ctx = 4096;
    sp.wtype = SD_TYPE_Q8_0;
    cr_assert_eq(tu_make_llama(path, &sp), 0);
}

/* Start a stream of n tokens in the background (output to file of); returns its pid. */
static pid_t long_stream(const srv *s, const char *of, const char *curl_opts, int n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec curl -s -N %s -o %s -H 'Content-Type: application/json' --data-binary "
             "'{\"prompt\":\"t5 t6\",\"max_tokens\":%d,\"ignore_eos\":true,\"stream\":true}' "
             "http://127.0.0.1:%d/v1/completions",
             curl_opts, of, n, s->port);
    return spawn(cmd, -1, -1);
}

static void wait_bytes(const char *path, off_t n, double timeout) {
    const double t0 = now_s();
    struct stat st;
    while (stat(path, &st) != 0 || st.st_size < n) {
        cr_assert_lt(now_s() - t0, timeout, "%s: no stream data after %g s", path, timeout);
        usleep(20000);
    }
}

/* Bytes waiting unread in socket fd's receive queue. */
static int unread_bytes(int fd) {
    int n = 0;
    cr_assert_eq(ioctl(fd, FIONREAD, &n), 0);
    return n;
}

/* A client that goes away cancels its request; a client that never reads stalls nothing.
 * Asserted by events, not by time: the stalled client is a socket with a small receive
 * buffer that this test never reads, so while it holds unread bytes it has provably not
 * consumed its stream; during that, a fast client gets its whole answer and the stalled
 * client's own generation runs to its end (finished, not cancelled). Then the stalled
 * client reads, and its stream is whole (every event was kept for it). Waits are bounded
 * (120 s each) only so that a fault fails instead of hanging. */
Test(server, disconnect_cancels_and_slow_clients_do_not_stall) {
    char model[600];
    slow_model(model, sizeof model);
    srv s;
    char args[1024];
    /* --timeout: the stalled client must outlive the generation on any machine. */
    snprintf(args, sizeof args, "-m %s -np 3 --timeout 3600", model);
    srv_start(&s, args);
    char of[600];
    snprintf(of, sizeof of, "%s/long.sse", g_dir);
    const pid_t c = long_stream(&s, of, "", 3000);
    wait_bytes(of, 200, 120);
    cr_expect_eq(metric(&s, "requests_running"), 1);
    kill(c, SIGKILL); /* the client goes away mid-stream */
    waitpid(c, NULL, 0);
    await_metric(&s, "requests_cancelled_total", 1, 120.0,
                 "the server never cancelled the request of a client that went away");
    cr_expect_eq(metric(&s, "requests_finished_total"), 0, "the 3000 tokens were generated");
    expect_pools_balance(&s);
    /* A non-streamed request whose client closes (close(): an EOF, no reset, as llama.cpp's
     * test_cancel_request does at its read timeout) is cancelled too: the server's probe
     * (an interim 100 Continue) draws the closed socket's reset. */
    const char *cb = "{\"prompt\":\"t5\",\"max_tokens\":3000,\"ignore_eos\":true}";
    char creq[1024];
    snprintf(creq, sizeof creq,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(cb), cb);
    const int cfd = tcp_connect(s.port, 0);
    cr_assert_geq(cfd, 0);
    cr_assert_eq(send(cfd, creq, strlen(creq), MSG_NOSIGNAL), (ssize_t)strlen(creq));
    /* admitted: generating */
    await_metric(&s, "requests_running", 1, 120.0, "the non-streamed request never ran");
    close(cfd);
    await_metric(&s, "requests_cancelled_total", 2, 120.0,
                 "the server never cancelled the non-streamed request of a client that closed");
    cr_expect_eq(metric(&s, "requests_finished_total"), 0, "the 3000 tokens were generated");
    expect_pools_balance(&s);
    /* A client that half-closes (shutdown(SHUT_WR)) after its request is answered, not
     * taken for gone (300 tokens: its EOF is there long before the answer; the probe's
     * interim 100 comes before it). */
    const char *hb = "{\"prompt\":\"t5\",\"max_tokens\":300,\"ignore_eos\":true}";
    char hreq[1024];
    snprintf(hreq, sizeof hreq,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(hb), hb);
    int hclosed = 0;
    char *ho = raw_http(&s, hreq, strlen(hreq), 1, 120, &hclosed);
    cr_expect_eq(raw_status(ho), 200, "half-closed client: %.300s", ho);
    json_t *hj = raw_json(ho);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(hj, "usage"), "completion_tokens")),
        300);
    json_decref(hj);
    free(ho);
    cr_expect_eq(metric(&s, "requests_cancelled_total"), 2,
                 "the half-closed request was cancelled");
    /* Kept alive (HTTP/1.1, no Connection: close) and half-closed: the server closes after
     * the answer, not at --timeout (3600 s here: the 120 s bound tells them apart). */
    const char *ka = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    int kclosed = 0;
    char *ko = raw_http(&s, ka, strlen(ka), 1, 120, &kclosed);
    cr_expect_eq(raw_status(ko), 200, "half-closed keep-alive client: %.300s", ko);
    cr_expect(kclosed, "a half-closed keep-alive connection was left open after its answer");
    free(ko);
    /* The stalled client: HTTP/1.0 (the stream is close-delimited: its bytes are the
     * events), 1500 tokens, never read until its generation has ended. */
    const double g0 = metric(&s, "tokens_generated_total");
    const double f0 = metric(&s, "requests_finished_total");
    const double c0 = metric(&s, "requests_cancelled_total");
    const int sfd = tcp_connect(s.port, 4096);
    cr_assert_geq(sfd, 0);
    const char *body = "{\"prompt\":\"t5 t6\",\"max_tokens\":1500,\"ignore_eos\":true,"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    cr_assert_eq(send(sfd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    double t0 = now_s();
    while (unread_bytes(sfd) == 0) { /* its stream has started */
        cr_assert_lt(now_s() - t0, 120.0, "the stalled client's stream never started");
        usleep(20000);
    }
    /* A fast client, while the stalled one has read nothing: its whole answer. */
    json_t *j = http_json(&s, "POST", "/v1/completions",
                          "{\"prompt\":\"t7\",\"max_tokens\":20,\"ignore_eos\":true}", 200);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 20);
    json_decref(j);
    /* The stalled client's generation ends while it still has read nothing. */
    t0 = now_s();
    while (metric(&s, "requests_finished_total") - f0 < 2) {
        cr_assert_lt(now_s() - t0, 120.0,
                     "the stalled client's generation did not end: %g of 1500 tokens",
                     metric(&s, "tokens_generated_total") - g0 - 20);
        usleep(50000);
    }
    cr_expect_eq(metric(&s, "requests_cancelled_total"), c0, "a request was cancelled");
    cr_expect_geq(metric(&s, "tokens_generated_total") - g0, 1500 + 20);
    cr_expect_gt(unread_bytes(sfd), 0, "the stalled client was not stalled");
    /* Now it reads: every event was kept for it, and the stream ends properly. */
    int closed = 0;
    size_t n = 0;
    char *o = read_until_close(sfd, 120, &n, &closed);
    close(sfd);
    cr_expect(closed, "the stalled client's stream did not end");
    cr_expect_eq(raw_status(o), 200, "%.200s", o);
    const char *sse = strstr(o, "\r\n\r\n");
    cr_assert_not_null(sse);
    const char *fin = NULL;
    char *text = sse_text(sse + 4, 0, &fin);
    cr_expect_str_eq(fin, "length", "the stalled client's stream ran to max_tokens");
    cr_expect_not_null(strstr(sse, "\"completion_tokens\":1500"),
                       "the stalled client's stream is not whole (its usage chunk)");
    free(text);
    free(o);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
    /* A client that went away is an ordinary event: no error line in the log. */
    char *log = slurp(s.log);
    cr_expect_null(strstr(log ? log : "", "rror"), "the server log has an error line:\n%s", log);
    free(log);
}

/* SIGTERM with a stream in flight: the stream finishes, the server exits 0; with a zero
 * grace the stream is cancelled and still ends properly, saying so (finish_reason
 * "abort", not "stop"). And it binds only 127.0.0.1. */
Test(server, sigterm_finishes_in_flight_and_binds_loopback) {
    char model[600];
    slow_model(model, sizeof model);
    srv s;
    char args[1024];
    snprintf(args, sizeof args, "-m %s -np 2", model);
    srv_start(&s, args);
    /* /proc/net/tcp: the listening socket is 127.0.0.1:port (0100007F), state 0A. */
    char *tcp = slurp_proc("/proc/net/tcp");
    char want[64];
    snprintf(want, sizeof want, "0100007F:%04X 00000000:0000 0A", s.port);
    cr_expect_not_null(strstr(tcp, want), "not listening on 127.0.0.1:%d only", s.port);
    snprintf(want, sizeof want, "00000000:%04X", s.port);
    cr_expect_null(strstr(tcp, want), "listening on 0.0.0.0");
    free(tcp);
    char of[600];
    snprintf(of, sizeof of, "%s/term.sse", g_dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec curl -s -N -o %s -H 'Content-Type: application/json' --data-binary "
             "'{\"prompt\":\"t5\",\"max_tokens\":300,\"ignore_eos\":true,\"stream\":true}' "
             "http://127.0.0.1:%d/v1/completions",
             of, s.port);
    const pid_t c = spawn(cmd, -1, -1);
    wait_bytes(of, 100, 120);
    /* in flight: llama-server's requests_processing counts it (the server's own count) */
    char *mt = NULL;
    cr_assert_eq(http(&s, "GET", "/metrics", NULL, NULL, &mt), 200);
    cr_expect_eq(metric_in(mt, "llamacpp:requests_processing"), 1.0, "%s", mt);
    cr_expect_eq(metric_in(mt, "llamacpp:requests_deferred"), 0.0);
    free(mt);
    cr_expect_eq(srv_stop(&s, 60), 0, "exit status after SIGTERM");
    int st = 0;
    waitpid(c, &st, 0);
    char *o = slurp(of);
    const char *fin = NULL;
    char *t = sse_text(o, 0, &fin);
    cr_expect_str_eq(fin, "length", "the in-flight stream ran to its max_tokens");
    free(t);
    free(o);
    /* Zero grace: cancelled at once, the stream still ends with [DONE]. */
    snprintf(of, sizeof of, "%s/term0.sse", g_dir);
    snprintf(args, sizeof args, "-m %s -np 2 --shutdown-timeout 0", model);
    srv_start(&s, args);
    snprintf(cmd, sizeof cmd,
             "exec curl -s -N -o %s -H 'Content-Type: application/json' --data-binary "
             "'{\"prompt\":\"t5\",\"max_tokens\":3000,\"ignore_eos\":true,\"stream\":true}' "
             "http://127.0.0.1:%d/v1/completions",
             of, s.port);
    const pid_t c2 = spawn(cmd, -1, -1);
    wait_bytes(of, 100, 120);
    cr_expect_eq(srv_stop(&s, 120), 0);
    waitpid(c2, &st, 0);
    o = slurp(of);
    t = sse_text(o, 0, &fin);
    cr_expect_str_eq(fin, "abort", "a stream cut by the shutdown ends with finish_reason abort");
    int events = 0; /* a zero grace did not wait for the 3000 tokens */
    for (const char *p = o; (p = strstr(p, "\"text\":")); p++)
        events++;
    cr_expect_lt(events, 3000, "the stream ran to its end: %d events", events);
    free(t);
    free(o);
}

/* --host takes a list: each address is bound on the one port (and only those: 127.0.0.1
 * in /proc/net/tcp, ::1 in /proc/net/tcp6, listening), a greedy completion through either
 * gives the same text; an empty address in the list is refused at start. */
Test(server, host_list_binds_each_address) {
    const int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6;
    memset(&a6, 0, sizeof a6);
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_loopback;
    const int v6_ok = probe >= 0 && bind(probe, (struct sockaddr *)&a6, sizeof a6) == 0;
    if (probe >= 0) close(probe);
    if (!v6_ok) cr_skip_test("IPv6 loopback is unavailable");
    srv s;
    srv_start(&s, "-m " TS_TARGET " -np 1 --host '127.0.0.1, [::1]'");
    char want[96];
    char *tcp = slurp_proc("/proc/net/tcp");
    snprintf(want, sizeof want, "0100007F:%04X 00000000:0000 0A", s.port);
    cr_expect_not_null(strstr(tcp, want), "not listening on 127.0.0.1:%d", s.port);
    free(tcp);
    tcp = slurp_proc("/proc/net/tcp6");
    snprintf(want, sizeof want, "00000000000000000000000001000000:%04X", s.port);
    const char *l6 = strstr(tcp, want);
    cr_expect(l6 && strstr(l6, " 0A "), "not listening on [::1]:%d", s.port);
    snprintf(want, sizeof want, "00000000000000000000000000000000:%04X", s.port);
    cr_expect_null(strstr(tcp, want), "listening on [::]");
    free(tcp);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0}";
    char *via4 = NULL, *via6 = NULL;
    json_t *j4 = http_json(&s, "POST", "/v1/completions", body, 200);
    char bf[700], cmd[2048];
    snprintf(bf, sizeof bf, "%s/host6.json", g_dir);
    cr_assert_eq(tu_write_file(bf, body, strlen(body)), 0);
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 60 -H 'Content-Type: application/json' --data-binary @%s "
             "'http://[::1]:%d/v1/completions'",
             bf, s.port);
    cr_assert_eq(tu_run(cmd, &via6, NULL), 0);
    json_t *j6 = json_loads(via6, 0, NULL);
    cr_assert_not_null(j6, "through [::1]: %s", via6);
    via4 = strdup(json_string_value(
        json_object_get(json_array_get(json_object_get(j4, "choices"), 0), "text")));
    const char *t6 = json_string_value(
        json_object_get(json_array_get(json_object_get(j6, "choices"), 0), "text"));
    cr_assert_not_null(t6);
    cr_expect_str_eq(t6, via4);
    free(via4);
    free(via6);
    json_decref(j4);
    json_decref(j6);
    srv_stop_ok(&s);
    char *err = NULL;
    snprintf(cmd, sizeof cmd, "%s serve -m %s --port 0 --host '127.0.0.1,,::1'", SD_BINARY,
             TS_TARGET);
    cr_expect_neq(tu_run(cmd, NULL, &err), 0, "an empty address was accepted");
    cr_expect(err && strstr(err, "empty address"), "stderr: %s", err ? err : "");
    free(err);
}

/* The openai Python package against the server (tests/server_openai.py). */
Test(server, openai_python_client) {
    if (tu_run("python3 -c 'import openai' 2>/dev/null", NULL, NULL) != 0)
        cr_skip_test("the openai Python package is not installed (pip install openai)");
    srv s;
    srv_start(&s, "-m " TS_TARGET " -md " TS_DRAFT " -np 4 --chat-template chatml");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "timeout 240 python3 %s/tests/server_openai.py http://127.0.0.1:%d/v1", SD_SOURCE_DIR,
             s.port);
    char *o = NULL, *e = NULL;
    const int rc = tu_run(cmd, &o, &e);
    cr_expect_eq(rc, 0, "server_openai.py failed:\n%s\n%s", o, e);
    free(o);
    free(e);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
}

/* The chat page in headless Chromium (tests/server_page.py over the DevTools pipe): an
 * answer streams in, equals the API's, shows its statistics; the screenshot of the page
 * with the answer differs from the empty page's. */
Test(server, chat_page_in_headless_chromium, .timeout = 300) {
    const char *chrome = NULL;
    const char *cands[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                           "/usr/bin/google-chrome"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        if (!chrome && access(cands[i], X_OK) == 0) chrome = cands[i];
    if (!chrome) cr_skip_test("no Chromium (apt install chromium)");
    srv s;
    srv_start(&s, "-m " TS_TARGET " -md " TS_DRAFT " -np 2 --chat-template chatml");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 200 python3 %s/tests/server_page.py %s http://127.0.0.1:%d %s", SD_SOURCE_DIR,
             chrome, s.port, g_dir);
    char *o = NULL, *e = NULL;
    const int rc = tu_run(cmd, &o, &e);
    cr_expect_eq(rc, 0, "server_page.py failed:\n%s\n%s", o, e);
    cr_log_info("%s", o);
    free(o);
    free(e);
    expect_pools_balance(&s);
    cr_expect_eq(srv_stop(&s, 30), 0);
}
