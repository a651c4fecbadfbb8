/*
 * tests/test_server_slots.c: `specdec serve --slot-save-path`'s POST /slots/N?action=save
 * and restore (runtime/server/slot_action.c), end to end over curl on 127.0.0.1.
 *
 * References are independent of the answers checked: the saved file is read back here
 * byte by byte (llama-server's header, the packed token list, specdec's trailer) and its
 * tokens compared with /tokenize's ids of the prompt followed by the answer's own ids; a
 * restore is checked by its effect (the next request with that prompt finds every
 * position but the last in the prefix cache, after an erase emptied it). Bad names and
 * damaged files are built here and must each get a 400, the server staying up.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server_util.h"
#include "testutil.h"

#define SL_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define SL_PROMPT "Once upon a time, there was a little girl named Lily who"

static char g_slots[600];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    snprintf(g_slots, sizeof g_slots, "%s/slots", g_dir);
    cr_assert_eq(mkdir(g_slots, 0700), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(server_slots, .init = setup, .fini = teardown, .timeout = 300);

static json_t *req(const srv *s, const char *path, const char *body, int want) {
    char *o = NULL;
    const int code = http_h(s, "POST", path, body, &o, NULL);
    cr_assert_eq(code, want, "POST %s %s: status %d, expected %d: %s", path, body, code, want, o);
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j, "POST %s: not JSON: %s", path, o);
    free(o);
    return j;
}

static int64_t jint(json_t *o, const char *a, const char *b) {
    json_t *v = json_object_get(o, a);
    if (b) v = json_object_get(v, b);
    cr_assert(json_is_integer(v), "%s/%s is not an integer", a, b ? b : "");
    return json_integer_value(v);
}

static uint32_t u32_at(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void start(srv *s) {
    char args[1024];
    snprintf(args, sizeof args, "-m " SL_TARGET " -c 512 -np 2 --slot-save-path %s", g_slots);
    srv_start(s, args);
}

Test(server_slots, save_writes_the_sequence_and_restore_fills_the_cache) {
    srv s;
    start(&s);
    json_t *tk = req(&s, "/tokenize", "{\"content\":\"" SL_PROMPT "\",\"add_special\":true}", 200);
    json_t *pt = json_object_get(tk, "tokens");
    const int32_t n_prompt = (int32_t)json_array_size(pt);
    json_t *a = req(&s, "/completion",
                    "{\"prompt\":\"" SL_PROMPT "\",\"n_predict\":8,\"temperature\":0,"
                    "\"return_tokens\":true,\"id_slot\":1}",
                    200);
    json_t *out = json_object_get(a, "tokens");
    cr_assert_eq(json_array_size(out), 8);
    json_t *sv = req(&s, "/slots/1?action=save", "{\"filename\":\"s1.bin\"}", 200);
    /* the KV held the prompt and the output but its last token */
    const int32_t n = n_prompt + 8 - 1;
    cr_expect_eq(jint(sv, "n_saved", NULL), n);
    cr_expect_eq(jint(sv, "id_slot", NULL), 1);
    char path[700];
    snprintf(path, sizeof path, "%s/s1.bin", g_slots);
    size_t len = 0;
    unsigned char *f = tu_read_file(path, &len);
    cr_assert_not_null(f);
    cr_expect_eq(jint(sv, "n_written", NULL), (int64_t)len);
    cr_assert_eq(len, 12 + 4 * (3 + (size_t)n) + 20);
    cr_expect_eq(u32_at(f), 0x67677371u);
    cr_expect_eq(u32_at(f + 4), 3u);
    cr_expect_eq(u32_at(f + 8), (uint32_t)(3 + n));
    cr_expect_eq(u32_at(f + 12), 0xFFFFFFFFu);
    cr_expect_eq(u32_at(f + 20), (uint32_t)n);
    for (int32_t i = 0; i < n; i++) {
        const int64_t want = i < n_prompt
                                 ? json_integer_value(json_array_get(pt, (size_t)i))
                                 : json_integer_value(json_array_get(out, (size_t)(i - n_prompt)));
        cr_expect_eq((int64_t)(int32_t)u32_at(f + 24 + 4 * (size_t)i), want, "token %d", i);
    }
    cr_expect_eq(memcmp(f + 24 + 4 * (size_t)n, "SDSQ", 4), 0);
    /* erase, then restore into slot 0: the same prompt finds all but its last position */
    json_decref(req(&s, "/slots/1?action=erase", "", 200));
    json_t *rs = req(&s, "/slots/0?action=restore", "{\"filename\":\"s1.bin\"}", 200);
    cr_expect_eq(jint(rs, "n_restored", NULL), n);
    cr_expect_eq(jint(rs, "n_read", NULL), (int64_t)len);
    json_t *b = req(&s, "/completion",
                    "{\"prompt\":\"" SL_PROMPT "\",\"n_predict\":8,\"temperature\":0,"
                    "\"return_tokens\":true,\"id_slot\":0}",
                    200);
    cr_expect_eq(jint(b, "timings", "cache_n"), n_prompt - 1);
    cr_expect_eq(jint(b, "timings", "prompt_n"), 1);
    cr_expect(json_equal(json_object_get(b, "tokens"), out));
    /* the older file layout (a plain token list) restores too */
    unsigned char *plain = malloc(len);
    memcpy(plain, f, 12);
    const uint32_t words = (uint32_t)n;
    memcpy(plain + 8, &words, 4);
    memcpy(plain + 12, f + 24, 4 * (size_t)n + 20);
    snprintf(path, sizeof path, "%s/plain.bin", g_slots);
    cr_assert_eq(tu_write_file(path, plain, len - 12), 0);
    json_t *rp = req(&s, "/slots/1?action=restore", "{\"filename\":\"plain.bin\"}", 200);
    cr_expect_eq(jint(rp, "n_restored", NULL), n);
    free(plain);
    json_decref(rp);
    free(f);
    json_decref(tk);
    json_decref(a);
    json_decref(sv);
    json_decref(rs);
    json_decref(b);
    srv_stop_ok(&s);
}

/* A damaged copy of a good file (len bytes at f), written as name. */
static void write_damaged(const char *name, const unsigned char *f, size_t len) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", g_slots, name);
    cr_assert_eq(tu_write_file(path, f, len), 0);
}

Test(server_slots, bad_names_and_damaged_files_are_400) {
    srv s;
    start(&s);
    json_decref(
        req(&s, "/completion",
            "{\"prompt\":\"" SL_PROMPT "\",\"n_predict\":4,\"temperature\":0,\"id_slot\":0}", 200));
    const char *names[] = {
        "{\"filename\":\"../x.bin\"}", "{\"filename\":\"a/b.bin\"}", "{\"filename\":\"\"}",
        "{\"filename\":\"..\"}",       "{\"filename\":7}",           "{}",
        "{\"filename\":\"a\\\\b\"}",   "{\"filename\":\"x\\u0001\"}"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        json_decref(req(&s, "/slots/0?action=save", names[i], 400));
        json_decref(req(&s, "/slots/0?action=restore", names[i], 400));
    }
    json_decref(req(&s, "/slots/0?action=restore", "{\"filename\":\"missing.bin\"}", 400));
    /* a slot that never held a sequence */
    json_decref(req(&s, "/slots/1?action=save", "{\"filename\":\"none.bin\"}", 400));
    json_decref(req(&s, "/slots/0?action=save", "{\"filename\":\"good.bin\"}", 200));
    char path[700];
    snprintf(path, sizeof path, "%s/good.bin", g_slots);
    size_t len = 0;
    unsigned char *f = tu_read_file(path, &len);
    cr_assert_not_null(f);
    unsigned char *d = malloc(len + 8);
    const char *bad[] = {"trunc.bin", "short.bin", "magic.bin",  "version.bin",
                         "vocab.bin", "token.bin", "longer.bin", "count.bin"};
    write_damaged(bad[0], f, len - 3);
    write_damaged(bad[1], f, 5);
    memcpy(d, f, len);
    d[0] ^= 0xFF;
    write_damaged(bad[2], d, len);
    memcpy(d, f, len);
    d[4] = 9;
    write_damaged(bad[3], d, len);
    memcpy(d, f, len);
    d[len - 10] ^= 0x5A; /* the vocabulary fingerprint */
    write_damaged(bad[4], d, len);
    memcpy(d, f, len);
    const int32_t big = 1 << 30;
    memcpy(d + 24, &big, 4);
    write_damaged(bad[5], d, len);
    memcpy(d, f, len);
    memset(d + len, 0, 8); /* bytes after the trailer (another layout's KV state) */
    write_damaged(bad[6], d, len + 8);
    memcpy(d, f, len);
    d[20] ^= 1; /* the packed count disagrees with the payload size */
    write_damaged(bad[7], d, len);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"filename\":\"%s\"}", bad[i]);
        json_t *e = req(&s, "/slots/0?action=restore", body, 400);
        const char *msg =
            json_string_value(json_object_get(json_object_get(e, "error"), "message"));
        cr_expect(msg && !strchr(msg, '\n'), "%s: %s", bad[i], msg ? msg : "(no message)");
        json_decref(e);
    }
    json_decref(req(&s, "/slots/0?action=restore", "{\"filename\":\"good.bin\"}", 200));
    free(d);
    free(f);
    srv_stop_ok(&s);
}

Test(server_slots, without_a_save_path_save_and_restore_are_501) {
    srv s;
    srv_start(&s, "-m " SL_TARGET " -c 512 -np 2");
    json_decref(req(&s, "/slots/0?action=save", "{\"filename\":\"a.bin\"}", 501));
    json_decref(req(&s, "/slots/0?action=restore", "{\"filename\":\"a.bin\"}", 501));
    json_decref(req(&s, "/slots/0?action=erase", "", 200));
    srv_stop_ok(&s);
}
