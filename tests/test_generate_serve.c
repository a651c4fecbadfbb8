/*
 * tests/test_generate_serve.c: one request through both commands (issue 24): `specdec
 * generate --json` and `specdec serve`'s /v1/completions, SmolLM2-135M with the project's
 * draft (configs/smollm2-135m-pair.json), K 4 fixed, 48 tokens, three prompts, greedy and
 * temperature 0.7 with one seed, must give the same text and the same drafted, accepted
 * and target-pass counts: both run the batcher's step (generate through a batcher of one
 * sequence, runtime/engine/gen_batch.c) with the same defaults (KV cache F16, sampling,
 * the draft's confidence cut-off). Skipped when models/downloaded lacks the target.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_util.h"
#include "testutil.h"

#define GS_TARGET SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GS_CONFIG SD_SOURCE_DIR "/configs/smollm2-135m-pair.json"

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(generate_serve, .init = setup, .fini = teardown, .timeout = 600);

static long long int_at(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    cr_assert(json_is_integer(v), "no integer \"%s\"", key);
    return json_integer_value(v);
}

/* One request through both clients: `cmd` (a `generate ... --json` command line) and body
 * POSTed to s's /v1/completions give the same text and the same drafted / accepted /
 * target-pass counts, and something was drafted; what names the case in messages.
 * Returns generate's text (malloc'd). */
static char *same_in_both_ex(srv *s, const char *cmd, json_t *body, const char *what,
                             int need_draft, long long *cached) {
    char *out = NULL, *e = NULL;
    cr_assert_eq(tu_run(cmd, &out, &e), 0, "%s: %s", cmd, e);
    json_error_t je;
    json_t *g = json_loads(out, 0, &je);
    cr_assert_not_null(g, "generate --json: %s", je.text);
    json_t *gs = json_object_get(g, "stats");
    cr_assert(json_is_object(gs));
    char *b = json_dumps(body, 0);
    json_t *a = http_json(s, "POST", "/v1/completions", b, 200);
    json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
    json_t *sp = json_object_get(a, "speculative");
    cr_assert(json_is_object(ch) && json_is_object(sp), "answer without choices[0] or "
                                                        "speculative");
    const char *gt = json_string_value(json_object_get(g, "text"));
    const char *st = json_string_value(json_object_get(ch, "text"));
    cr_assert(gt && st);
    cr_expect_str_eq(gt, st, "%s: generate '%s', serve '%s'", what, gt, st);
    cr_expect_eq(int_at(gs, "n_drafted"), int_at(sp, "drafted"), "%s: drafted", what);
    cr_expect_eq(int_at(gs, "n_accepted"), int_at(sp, "accepted"), "%s: accepted", what);
    cr_expect_eq(int_at(gs, "n_target_passes"), int_at(sp, "target_passes"), "%s: target passes",
                 what);
    if (need_draft) cr_assert_gt(int_at(gs, "n_drafted"), 0, "%s: nothing drafted", what);
    if (cached) {
        json_t *d = json_object_get(json_object_get(a, "usage"), "prompt_tokens_details");
        *cached = int_at(d, "cached_tokens");
    }
    char *text = strdup(gt);
    cr_assert_not_null(text);
    free(b);
    json_decref(a);
    json_decref(g);
    free(out);
    free(e);
    return text;
}

static char *same_in_both(srv *s, const char *cmd, json_t *body, const char *what) {
    return same_in_both_ex(s, cmd, body, what, 1, NULL);
}

Test(generate_serve, same_request_same_text_and_counts) {
    if (access(GS_TARGET, R_OK) != 0) cr_skip_test("%s is absent", GS_TARGET);
    static const char *const prompts[] = {"Once upon a time", "The capital of France is",
                                          "def fibonacci(n):"};
    static const double temps[] = {0.0, 0.7};
    srv s;
    srv_start(&s, "--config " GS_CONFIG " --draft-policy fixed -k 4 -np 1");
    for (int p = 0; p < 3; p++)
        for (int t = 0; t < 2; t++) {
            char cmd[4096];
            snprintf(cmd, sizeof cmd,
                     "%s generate --config %s --draft-policy fixed -k 4 -t 1 --no-display-prompt "
                     "-p '%s' -n 48 --temp %g --seed 7 --json",
                     SD_BINARY, GS_CONFIG, prompts[p], temps[t]);
            json_t *body = json_pack("{s:s, s:i, s:f, s:i}", "prompt", prompts[p], "max_tokens", 48,
                                     "temperature", temps[t], "seed", 7);
            char what[256];
            snprintf(what, sizeof what, "'%s', temp %g", prompts[p], temps[t]);
            free(same_in_both(&s, cmd, body, what));
            json_decref(body);
        }
    srv_stop_ok(&s);
}

/* Token trees in both commands (serve gains them: the batcher's tree pass): `generate
 * --draft-tree 2x3` and `serve --draft-tree 2x3`, n-gram and suffix trees on the shipped
 * TinyStories target, greedy and Gumbel sampling with one seed: the same text as each
 * other and as generate without a draft, the same drafted, accepted and target-pass
 * counts. */
#define GS_TINY SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"

Test(generate_serve, token_trees_in_both) {
    if (access(GS_TINY, R_OK) != 0) cr_skip_test("%s is absent", GS_TINY);
    static const char *const types[] = {"ngram", "suffix"};
    static const double temps[] = {0.0, 0.7};
    const char *prompt = "Lily and Tom went to the park. They played and played and";
    for (int d = 0; d < 2; d++) {
        char args[1024];
        snprintf(args, sizeof args,
                 "-m %s --draft-type %s --draft-tree 2x3 --spec-sampling gumbel -np 1", GS_TINY,
                 types[d]);
        srv s;
        srv_start(&s, args);
        for (int t = 0; t < 2; t++) {
            char cmd[4096], *e = NULL, *out0 = NULL;
            json_error_t je;
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s --no-draft --spec-sampling gumbel -t 1 "
                     "--no-display-prompt -p '%s' -n 48 --temp %g --seed 7 --ignore-eos --json",
                     SD_BINARY, GS_TINY, prompt, temps[t]);
            cr_assert_eq(tu_run(cmd, &out0, &e), 0, "%s: %s", cmd, e);
            free(e);
            json_t *g0 = json_loads(out0, 0, &je);
            cr_assert_not_null(g0, "generate --json: %s", je.text);
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s --draft-type %s --draft-tree 2x3 --spec-sampling gumbel "
                     "-t 1 --no-display-prompt -p '%s' -n 48 --temp %g --seed 7 --ignore-eos "
                     "--json",
                     SD_BINARY, GS_TINY, types[d], prompt, temps[t]);
            json_t *body = json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt", prompt, "max_tokens",
                                     48, "temperature", temps[t], "seed", 7, "ignore_eos", 1);
            char what[256];
            snprintf(what, sizeof what, "%s tree, temp %g", types[d], temps[t]);
            char *gt = same_in_both(&s, cmd, body, what);
            const char *alone = json_string_value(json_object_get(g0, "text"));
            cr_assert(alone);
            cr_expect_str_eq(gt, alone, "%s: generate '%s', no draft '%s'", what, gt, alone);
            free(gt);
            json_decref(body);
            json_decref(g0);
            free(out0);
        }
        srv_stop_ok(&s);
    }
}

/* A tensor-parallel target in both commands (`--tensor-split 2`: two simulated ranks on the
 * CPU, the batcher over split paged sessions): the shipped TinyStories pair, LLM draft, K 4
 * fixed, greedy and Gumbel with one seed: generate and serve give the same text and counts,
 * and the greedy text is the split target alone's (`--no-draft`, the same split). */
#define GS_TINY_DRAFT SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"

Test(generate_serve, tensor_split_in_both) {
    if (access(GS_TINY, R_OK) != 0) cr_skip_test("%s is absent", GS_TINY);
    const char *prompt = "Once upon a time";
    /* the split reaches serve's batcher: one its shape does not allow is refused, named */
    tu_expect_cli_error("serve -m " GS_TINY " -c 512 --tensor-split 3", "not divisible by 3");
    srv s;
    srv_start(&s, "-m " GS_TINY " -md " GS_TINY_DRAFT " --tensor-split 2 --draft-policy fixed "
                  "-k 4 -np 2");
    char cmd[4096], *out0 = NULL, *e = NULL;
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --no-draft --tensor-split 2 -t 2 --no-display-prompt -p '%s' "
             "-n 48 --temp 0 --ignore-eos --json",
             SD_BINARY, GS_TINY, prompt);
    cr_assert_eq(tu_run(cmd, &out0, &e), 0, "%s: %s", cmd, e);
    free(e);
    json_error_t je;
    json_t *g0 = json_loads(out0, 0, &je);
    cr_assert_not_null(g0, "generate --json: %s", je.text);
    const char *alone = json_string_value(json_object_get(g0, "text"));
    cr_assert(alone);
    static const double temps[] = {0.0, 0.7};
    for (int t = 0; t < 2; t++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s -md %s --tensor-split 2 --draft-policy fixed -k 4 -t 2 "
                 "--no-display-prompt -p '%s' -n 48 --temp %g --seed 7 --ignore-eos --json",
                 SD_BINARY, GS_TINY, GS_TINY_DRAFT, prompt, temps[t]);
        json_t *body = json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt", prompt, "max_tokens", 48,
                                 "temperature", temps[t], "seed", 7, "ignore_eos", 1);
        char what[256];
        snprintf(what, sizeof what, "tensor split 2, temp %g", temps[t]);
        char *gt = same_in_both(&s, cmd, body, what);
        if (temps[t] == 0.0)
            cr_expect_str_eq(gt, alone, "%s: generate '%s', the split target alone '%s'", what, gt,
                             alone);
        free(gt);
        json_decref(body);
    }
    json_decref(g0);
    free(out0);
    srv_stop_ok(&s);
}

/* Every sampling mode, draft type, the penalties, stop strings and a prefix-cache hit in both
 * commands (the golden test across both clients), on the shipped TinyStories pair
 * so that it runs wherever the repository is: greedy, Gumbel and rejection sampling (a
 * server each for the two speculative sampling modes: --spec-sampling is the server's), the
 * draft types llm, ngram, suffix, ngram+llm and suffix+llm, K 4 fixed, 40 tokens: generate
 * and serve give the same text and the same drafted / accepted / target-pass counts; greedy
 * text also equals the target alone's. Then the penalties (repeat, presence, frequency),
 * stop strings (the text ends before the first stop string, in both), and the same request
 * twice to serve (the second a prefix-cache hit, its cached_tokens > 0), each against
 * generate. */
Test(generate_serve, every_mode_in_both) {
    if (access(GS_TINY, R_OK) != 0 || access(GS_TINY_DRAFT, R_OK) != 0)
        cr_skip_test("the shipped TinyStories pair is absent");
    static const char *const types[] = {"llm", "ngram", "suffix", "ngram+llm", "suffix+llm"};
    static const char *const modes[] = {"gumbel", "rejection"};
    const char *prompt = "Lily and Tom went to the park. Lily and Tom went to the park. They";
    char cmd[4096], what[256], *out0 = NULL, *e = NULL;
    json_error_t je;
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s --no-draft -t 1 --no-display-prompt -p '%s' -n 40 --temp 0 "
             "--ignore-eos --json",
             SD_BINARY, GS_TINY, prompt);
    cr_assert_eq(tu_run(cmd, &out0, &e), 0, "%s: %s", cmd, e);
    free(e);
    json_t *g0 = json_loads(out0, 0, &je);
    cr_assert_not_null(g0, "generate --json: %s", je.text);
    const char *alone = json_string_value(json_object_get(g0, "text"));
    cr_assert(alone);
    long long model_free_drafted = 0;
    for (int m = 0; m < 2; m++) {
        char args[1024];
        snprintf(args, sizeof args,
                 "-m %s -md %s --spec-sampling %s --draft-policy fixed -k 4 -np 1 -t 1", GS_TINY,
                 GS_TINY_DRAFT, modes[m]);
        srv s;
        srv_start(&s, args);
        for (int d = 0; d < 5; d++)
            for (int t = 0; t < 2; t++) {
                const double temp = t ? 0.8 : 0.0;
                if (m == 1 && temp == 0.0) continue; /* greedy is the same in both modes */
                snprintf(cmd, sizeof cmd,
                         "%s generate -m %s -md %s --spec-sampling %s --draft-type %s "
                         "--draft-policy fixed -k 4 -t 1 --no-display-prompt -p '%s' -n 40 "
                         "--temp %g --seed 11 --ignore-eos --json",
                         SD_BINARY, GS_TINY, GS_TINY_DRAFT, modes[m], types[d], prompt, temp);
                json_t *body = json_pack("{s:s, s:i, s:f, s:i, s:b, s:s}", "prompt", prompt,
                                         "max_tokens", 40, "temperature", temp, "seed", 11,
                                         "ignore_eos", 1, "draft_type", types[d]);
                snprintf(what, sizeof what, "%s sampling, draft %s, temp %g", modes[m], types[d],
                         temp);
                const int has_llm = strstr(types[d], "llm") != NULL;
                char *gt = same_in_both_ex(&s, cmd, body, what, has_llm, NULL);
                if (!has_llm) {
                    json_t *g = NULL;
                    char *o = NULL, *e2 = NULL;
                    cr_assert_eq(tu_run(cmd, &o, &e2), 0);
                    g = json_loads(o, 0, &je);
                    cr_assert_not_null(g);
                    model_free_drafted += int_at(json_object_get(g, "stats"), "n_drafted");
                    json_decref(g);
                    free(o);
                    free(e2);
                }
                if (temp == 0.0)
                    cr_expect_str_eq(gt, alone, "%s: generate '%s', target alone '%s'", what, gt,
                                     alone);
                free(gt);
                json_decref(body);
            }
        if (m == 0) {
            /* penalties, greedy and sampled */
            for (int t = 0; t < 2; t++) {
                const double temp = t ? 0.8 : 0.0;
                snprintf(cmd, sizeof cmd,
                         "%s generate -m %s -md %s --draft-policy fixed -k 4 -t 1 "
                         "--no-display-prompt -p '%s' -n 40 --temp %g --seed 11 --ignore-eos "
                         "--repeat-penalty 1.3 --presence-penalty 0.5 --frequency-penalty 0.25 "
                         "--json",
                         SD_BINARY, GS_TINY, GS_TINY_DRAFT, prompt, temp);
                json_t *body = json_pack("{s:s, s:i, s:f, s:i, s:b, s:f, s:f, s:f}", "prompt",
                                         prompt, "max_tokens", 40, "temperature", temp, "seed", 11,
                                         "ignore_eos", 1, "repeat_penalty", 1.3, "presence_penalty",
                                         0.5, "frequency_penalty", 0.25);
                snprintf(what, sizeof what, "penalties, temp %g", temp);
                char *gt = same_in_both(&s, cmd, body, what);
                if (temp == 0.0)
                    cr_expect_str_neq(gt, alone,
                                      "penalties changed nothing: the case tests "
                                      "nothing");
                free(gt);
                json_decref(body);
            }
            /* stop strings: the text ends before the first one, in both */
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s -md %s --draft-policy fixed -k 4 -t 1 "
                     "--no-display-prompt -p '%s' -n 40 --temp 0 --stop ' ball' --stop 'xyzzy' "
                     "--json",
                     SD_BINARY, GS_TINY, GS_TINY_DRAFT, prompt);
            json_t *body = json_pack("{s:s, s:i, s:f, s:[s,s]}", "prompt", prompt, "max_tokens", 40,
                                     "temperature", 0.0, "stop", " ball", "xyzzy");
            char *gt = same_in_both_ex(&s, cmd, body, "stop strings", 0, NULL);
            const char *cut = strstr(alone, " ball");
            cr_assert_not_null(cut,
                               "the target alone's text '%s' has no ' ball': the stop case "
                               "tests nothing",
                               alone);
            cr_expect_eq(strlen(gt), (size_t)(cut - alone), "stop: '%s' against '%s'", gt, alone);
            cr_expect_eq(strncmp(gt, alone, (size_t)(cut - alone)), 0);
            free(gt);
            json_decref(body);
            /* the same request twice: the second is a prefix-cache hit with the same text */
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s -md %s --draft-policy fixed -k 4 -t 1 "
                     "--no-display-prompt -p '%s' -n 40 --temp 0.8 --seed 5 --ignore-eos --json",
                     SD_BINARY, GS_TINY, GS_TINY_DRAFT, prompt);
            body = json_pack("{s:s, s:i, s:f, s:i, s:b}", "prompt", prompt, "max_tokens", 40,
                             "temperature", 0.8, "seed", 5, "ignore_eos", 1);
            long long c1 = -1, c2 = -1;
            char *t1 = same_in_both_ex(&s, cmd, body, "first of two", 1, &c1);
            char *t2 = same_in_both_ex(&s, cmd, body, "second of two (prefix-cache hit)", 1, &c2);
            cr_expect_gt(c2, 0, "the second request read no cached tokens (first %lld)", c1);
            cr_expect_str_eq(t1, t2);
            free(t1);
            free(t2);
            json_decref(body);
        }
        srv_stop_ok(&s);
    }
    cr_expect_gt(model_free_drafted, 0, "the n-gram and suffix cases drafted nothing");
    json_decref(g0);
    free(out0);
}
