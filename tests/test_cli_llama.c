/*
 * The CLI as a llama.cpp user meets it:
 *   - --help works on every subcommand (exit 0, the usage on stdout, nothing on
 *     stderr), and --version prints the CMake project version;
 *   - llama.cpp's spellings that map to what specdec has do what they say: -ctk/-ctv
 *     (= --kv-type; K and V must agree), -cd (a draft context: fewer drafted tokens,
 *     same greedy output), --ignore-eos (EOS never emitted where it was), -e (prompt
 *     escapes, also as a unit: sd_cli_unescape), --no-display-prompt, --log-disable;
 *   - llama.cpp flags with no meaning here give one note each and change nothing;
 *   - tokenize --pieces prints "id -> 'piece'" lines consistent with the ids;
 *   - progress lines appear on stderr only when it is a terminal (script(1) gives one).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/common/sd_cli.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "testutil.h"
#include "pair_fixture.h"

TestSuite(cli_llama, .init = pair_setup, .fini = pair_teardown, .timeout = 600);

/* Run `specdec ARGS`; returns the exit status; out/err malloc'd. */
static int run(const char *args, char **out, char **err) {
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    return tu_run(cmd, out, err);
}

/* generate --json ARGS: the root object (asserted exit 0). */
static json_t *gen_json(const char *args, char **err_keep) {
    char full[16384];
    snprintf(full, sizeof full, "generate -m %s -t 1 --json %s", g_t, args);
    char *out = NULL, *err = NULL;
    int rc = run(full, &out, &err);
    cr_assert_eq(rc, 0, "'%s' exited %d: %s", full, rc, err);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    cr_assert_not_null(root, "'%s': not JSON: %s", full, out);
    free(out);
    if (err_keep)
        *err_keep = err;
    else
        free(err);
    return root;
}

static char *tokens_of(json_t *root) {
    return json_dumps(json_object_get(root, "tokens"), JSON_COMPACT);
}

static json_int_t stat_int(json_t *root, const char *key) {
    return json_integer_value(json_object_get(json_object_get(root, "stats"), key));
}

Test(cli_llama, help_on_every_subcommand) {
    const char *cmds[] = {"generate", "bench",    "perplexity", "synth",
                          "info",     "tokenize", "convert",    "quantize"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        for (int longform = 0; longform <= 1; longform++) {
            char args[256];
            snprintf(args, sizeof args, "%s %s", cmds[i], longform ? "--help" : "-h");
            char *out = NULL, *err = NULL;
            int rc = run(args, &out, &err);
            cr_assert_eq(rc, 0, "'%s' exited %d: %s", args, rc, err);
            cr_assert_str_eq(err, "", "'%s' wrote to stderr: %s", args, err);
            cr_assert(strstr(out, "usage") || strstr(out, "options"), "'%s': %s", args, out);
            free(out);
            free(err);
        }
    }
}

Test(cli_llama, version) {
    char *out = NULL, *err = NULL;
    cr_assert_eq(run("--version", &out, &err), 0, "%s", err);
    char want[128];
    snprintf(want, sizeof want, "specdec %s", SD_PROJECT_VERSION);
    cr_assert(strncmp(out, want, strlen(want)) == 0, "'%s' does not start with '%s'", out, want);
    const char *nl = strchr(out, '\n');
    cr_assert(nl && nl[1] == '\0', "one line: %s", out);
    free(out);
    free(err);
}

/* A usage error: exit 2, one stderr line mentioning needle. */
static void expect_usage(const char *args, const char *needle) {
    char *out = NULL, *err = NULL;
    int rc = run(args, &out, &err);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", args, rc, err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "one stderr line: %s", err);
    cr_assert(strstr(err, needle), "'%s': '%s' lacks '%s'", args, err, needle);
    free(out);
    free(err);
}

Test(cli_llama, cache_types) {
    const char *base = "-p t5t6 -n 12 --temp 0";
    char args[4096];
    snprintf(args, sizeof args, "%s --kv-type f16", base);
    json_t *a = gen_json(args, NULL);
    snprintf(args, sizeof args, "%s -ctk f16 -ctv f16", base);
    json_t *b = gen_json(args, NULL);
    snprintf(args, sizeof args, "%s --cache-type-k f16", base);
    json_t *c = gen_json(args, NULL);
    char *ta = tokens_of(a), *tb = tokens_of(b), *tc = tokens_of(c);
    cr_assert_str_eq(ta, tb);
    cr_assert_str_eq(ta, tc);
    free(ta);
    free(tb);
    free(tc);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    snprintf(args, sizeof args, "generate -m %s -p t5 -ctk f16 -ctv f32", g_t);
    expect_usage(args, "share one element type");
    snprintf(args, sizeof args, "generate -m %s -p t5 -ctv f16 --kv-type f32", g_t);
    expect_usage(args, "share one element type");
    snprintf(args, sizeof args, "generate -m %s -p t5 -ctk q5_0", g_t);
    expect_usage(args, "q8_0 or q4_0");
}

Test(cli_llama, ctx_size_draft) {
    char args[4096];
    snprintf(args, sizeof args, "-md %s -p t5t6 -n 40 -k 3 --temp 0 --draft-policy fixed", g_d);
    json_t *full = gen_json(args, NULL);
    snprintf(args, sizeof args, "-md %s -p t5t6 -n 40 -k 3 --temp 0 --draft-policy fixed -cd 16",
             g_d);
    json_t *cut = gen_json(args, NULL);
    char *tf = tokens_of(full), *tc = tokens_of(cut);
    cr_assert_str_eq(tf, tc, "greedy output changed with the draft's context");
    cr_assert_lt(stat_int(cut, "n_drafted"), stat_int(full, "n_drafted"),
                 "-cd 16 did not shorten the draft's context");
    cr_assert_gt(stat_int(cut, "n_drafted"), 0);
    free(tf);
    free(tc);
    json_decref(full);
    json_decref(cut);
}

/* True if token 2 (EOS of the test vocabulary) is among root's tokens. */
static int has_eos(json_t *root) {
    json_t *t = json_object_get(root, "tokens");
    for (size_t i = 0; i < json_array_size(t); i++)
        if (json_integer_value(json_array_get(t, i)) == 2) return 1;
    return 0;
}

Test(cli_llama, ignore_eos) {
    /* Sampling the whole distribution, EOS (~1/96 a token) ends some of 40 runs of 100
     * tokens with overwhelming probability (each run misses it with p ~ 0.35). */
    char args[4096];
    int found = 0;
    for (int seed = 1; seed <= 40 && !found; seed++) {
        for (int spec = 0; spec <= 1 && !found; spec++) {
            snprintf(args, sizeof args, "%s%s -p t5t6 -n 100 --temp 1 --top-k 0 --top-p 1 -s %d",
                     spec ? "-md " : "", spec ? g_d : "", seed);
            json_t *r = gen_json(args, NULL);
            const char *stop =
                json_string_value(json_object_get(json_object_get(r, "stats"), "stop"));
            if (!strcmp(stop, "eos")) {
                found = 1;
                char ig[4200];
                snprintf(ig, sizeof ig, "%s --ignore-eos", args);
                json_t *g = gen_json(ig, NULL);
                cr_assert_eq(stat_int(g, "n_generated"), 100, "seed %d: %s", seed, ig);
                cr_assert(!has_eos(g), "EOS emitted with --ignore-eos");
                cr_assert_str_eq(
                    json_string_value(json_object_get(json_object_get(g, "stats"), "stop")),
                    "max_tokens");
                json_decref(g);
            }
            json_decref(r);
        }
    }
    cr_assert(found, "no run ended at EOS: the test cannot check --ignore-eos");
}

Test(cli_llama, escape_unit) {
    struct {
        const char *in, *out;
    } cases[] = {
        {"a\\nb", "a\nb"},
        {"\\t\\r\\a\\b\\f\\v", "\t\r\a\b\f\v"},
        {"q\\\"x\\'y\\\\z", "q\"x'y\\z"},
        {"\\x41\\x4a\\x7", "AJ\x07"},
        {"keep \\q and \\", "keep \\q and \\"},
        {"\\?", "?"},
        {"plain", "plain"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", cases[i].in);
        size_t n = sd_cli_unescape(buf, strlen(buf));
        cr_assert_eq(n, strlen(cases[i].out), "'%s': length %zu", cases[i].in, n);
        cr_assert(!memcmp(buf, cases[i].out, n), "'%s' -> '%.*s'", cases[i].in, (int)n, buf);
    }
}

Test(cli_llama, escape_display_prompt_and_log_disable) {
    char args[4096];
    char *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "generate -m %s -p 'a\\tb' -n 2 --temp 0 -t 1 -e", g_t);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    cr_assert(strncmp(out, "a\tb", 3) == 0, "-e: the prompt was not unescaped: '%s'", out);
    cr_assert(strstr(err, "generated"), "statistics expected without --log-disable: %s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "generate -m %s -p 'a\\tb' -n 2 --temp 0 -t 1", g_t);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    cr_assert(strncmp(out, "a\\tb", 4) == 0, "without -e the prompt is as written: '%s'", out);
    free(out);
    free(err);
    snprintf(args, sizeof args,
             "generate -m %s -p t5t6 -n 2 --temp 0 -t 1 --no-display-prompt --log-disable", g_t);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    cr_assert(strncmp(out, "t5t6", 4) != 0, "--no-display-prompt echoed the prompt: '%s'", out);
    cr_assert_str_eq(err, "", "--log-disable: stderr was '%s'", err);
    free(out);
    free(err);
}

Test(cli_llama, meaningless_llama_flags_are_noted) {
    const char *base = "-p t5t6 -n 8 --temp 0";
    json_t *plain = gen_json(base, NULL);
    char args[4096], *err = NULL;
    snprintf(args, sizeof args, "%s -fa on -b 512 -ub 128 --mlock -no-cnv --numa distribute -fa",
             base);
    json_t *noted = gen_json(args, &err);
    char *a = tokens_of(plain), *b = tokens_of(noted);
    cr_assert_str_eq(a, b, "ignored flags changed the output");
    const char *notes[] = {"-fa on ignored",
                           "-b 512 ignored",
                           "-ub 128 ignored",
                           "--mlock ignored",
                           "--numa distribute ignored",
                           "-fa ignored"};
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++)
        cr_assert(strstr(err, notes[i]), "no note '%s' in: %s", notes[i], err);
    cr_assert_null(strstr(err, "-no-cnv"), "-no-cnv is what specdec does: no note: %s", err);
    /* One line each. */
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "specdec: note: ")); p++)
        lines++;
    cr_assert_eq(lines, 6, "%s", err);
    free(a);
    free(b);
    free(err);
    json_decref(plain);
    json_decref(noted);
    /* An unknown multi-letter single-dash flag is still an error by name. */
    snprintf(args, sizeof args, "generate -m %s -p t5 -xyz 3", g_t);
    expect_usage(args, "-xyz");
}

/* --pieces on the shipped TinyStories vocabulary (SentencePiece, 512 tokens): the lines'
 * ids are the --ids output, each piece is sd_vocab_token_to_piece's, and the pieces after
 * BOS spell the text with SentencePiece's leading space. */
Test(cli_llama, tokenize_pieces) {
    char model[2048], args[8192];
    tu_path(model, sizeof model, SD_SOURCE_DIR "/models", "tinystories-target-q8_0.gguf");
    tu_need_path(model, "scripts/train_pair.py makes it");
    const char *text = "Once upon a time";
    char *ids = NULL, *pieces = NULL, *err = NULL;
    snprintf(args, sizeof args, "tokenize -m %s -p '%s'", model, text);
    cr_assert_eq(run(args, &ids, &err), 0, "%s", err);
    free(err);
    snprintf(args, sizeof args, "tokenize -m %s -p '%s' --pieces --show-count", model, text);
    cr_assert_eq(run(args, &pieces, &err), 0, "%s", err);
    free(err);
    sd_error e = {0};
    sd_gguf *g = NULL;
    sd_vocab *v = NULL;
    cr_assert_eq(sd_gguf_open(model, &g, &e), 0, "%s", e.msg);
    cr_assert_eq(sd_vocab_load(g, &v, &e), 0, "%s", e.msg);
    char rebuilt[512] = "", spelled[512] = "";
    int n = 0, count = -1;
    for (char *line = strtok(pieces, "\n"); line; line = strtok(NULL, "\n")) {
        int id;
        if (sscanf(line, "tokens %d", &count) == 1) continue;
        cr_assert_eq(sscanf(line, "%d -> '", &id), 1, "unexpected line '%s'", line);
        const char *q = strstr(line, " -> '") + 5;
        const size_t len = strlen(q) - 1; /* without the closing quote */
        cr_assert_eq(q[len], '\'', "'%s'", line);
        char want[128];
        int wl = sd_vocab_token_to_piece(v, id, 0, want, sizeof want);
        cr_assert(wl >= 0 && (size_t)wl == len && !memcmp(q, want, len), "id %d: '%s'", id, line);
        snprintf(rebuilt + strlen(rebuilt), sizeof rebuilt - strlen(rebuilt), "%s%d", n ? " " : "",
                 id);
        if (n > 0) strncat(spelled, q, len < sizeof spelled - strlen(spelled) ? len : 0);
        n++;
    }
    cr_assert_eq(count, n, "--show-count says %d, %d lines", count, n);
    cr_assert(strncmp(ids, rebuilt, strlen(rebuilt)) == 0 && ids[strlen(rebuilt)] == '\n',
              "ids '%s', pieces' ids '%s'", ids, rebuilt);
    cr_assert_str_eq(spelled, " Once upon a time");
    sd_vocab_free(v);
    sd_gguf_close(g);
    free(ids);
    free(pieces);
}

/* Progress lines: under script(1) (stderr a terminal) they appear; through a pipe not. */
Test(cli_llama, progress_only_on_a_terminal) {
    char text[2048], q[2048], args[8192];
    tu_path(text, sizeof text, g_dir, "text.txt");
    const char *stories = "t5t6t7\n<|endoftext|>\nt8t9\n";
    cr_assert_eq(tu_write_file(text, stories, strlen(stories)), 0);
    tu_path(q, sizeof q, g_dir, "q.gguf");
    char *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "perplexity -m %s -f %s -t 1", g_t, text);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    cr_assert_str_eq(err, "", "progress on a pipe: %s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "quantize %s %s q8_0", g_t, q);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    cr_assert_null(strstr(err, "tensor 1/"), "progress on a pipe: %s", err);
    free(out);
    free(err);
    if (tu_run("command -v script >/dev/null", NULL, NULL) != 0)
        cr_skip_test("script(1) (util-linux) absent: the terminal case is not checked");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "script -qec \"%s perplexity -m %s -f %s -t 1\" /dev/null", SD_BINARY,
             g_t, text);
    cr_assert_eq(tu_run(cmd, &out, NULL), 0);
    cr_assert(strstr(out, "specdec perplexity: 2 stories"), "no progress on a terminal: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "script -qec \"%s quantize %s %s q4_0\" /dev/null", SD_BINARY, g_t,
             q);
    cr_assert_eq(tu_run(cmd, &out, NULL), 0);
    cr_assert(strstr(out, "specdec quantize: tensor 1/"), "no progress on a terminal: %s", out);
    free(out);
}

/* -cnv and -sys, which --help advertises, are --chat and --system: the same tokens (they
 * were refused as unknown options). */
Test(cli_llama, cnv_and_sys_are_chat_and_system) {
    char *a = NULL, *b = NULL;
    json_t *ja = gen_json("--temp 0 -n 6 --chat-template chatml -p t5 -cnv -sys 't7 t8'", NULL);
    json_t *jb =
        gen_json("--temp 0 -n 6 --chat-template chatml -p t5 --chat --system 't7 t8'", NULL);
    a = json_dumps(json_object_get(ja, "tokens"), JSON_COMPACT);
    b = json_dumps(json_object_get(jb, "tokens"), JSON_COMPACT);
    cr_expect_str_eq(a, b);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(ja, "stats"), "n_prompt")),
                 json_integer_value(json_object_get(json_object_get(jb, "stats"), "n_prompt")));
    /* the system message is in the prompt: more tokens than without it */
    json_t *jc = gen_json("--temp 0 -n 6 --chat-template chatml -p t5 -cnv", NULL);
    cr_expect_gt(json_integer_value(json_object_get(json_object_get(ja, "stats"), "n_prompt")),
                 json_integer_value(json_object_get(json_object_get(jc, "stats"), "n_prompt")));
    free(a);
    free(b);
    json_decref(ja);
    json_decref(jb);
    json_decref(jc);
    /* -sys without a chat is still the same usage error as --system */
    char args[4096];
    snprintf(args, sizeof args, "generate -m %s -p t5 -sys hello", g_t);
    cr_expect_eq(run(args, NULL, NULL), SD_EXIT_USAGE);
}

/* tokenize --special parses control-token texts (<s> here) as llama-tokenize does by
 * default; without it they are text, as in generate (--no-parse-special says so). The ids
 * are checked against the library's tokenizer with and without SD_VOCAB_PARSE_SPECIAL. */
Test(cli_llama, tokenize_special) {
    sd_gguf *g = NULL;
    sd_vocab *v = NULL;
    sd_error e = {0};
    cr_assert_eq(sd_gguf_open(g_t, &g, &e), SD_OK, "%s", e.msg);
    cr_assert_eq(sd_vocab_load(g, &v, &e), SD_OK, "%s", e.msg);
    const char *text = "t5<s>t6";
    char want[2][256];
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids = NULL;
        size_t n = 0;
        cr_assert_eq(
            sd_vocab_tokenize(v, text, strlen(text), sp ? SD_VOCAB_PARSE_SPECIAL : 0, &ids, &n, &e),
            SD_OK);
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            o += (size_t)snprintf(want[sp] + o, sizeof want[sp] - o, i ? " %d" : "%d", ids[i]);
        snprintf(want[sp] + o, sizeof want[sp] - o, "\n");
        free(ids);
    }
    cr_assert(strstr(want[1], " 1 "), "<s> (id 1) is one token with parsing: %s", want[1]);
    cr_assert_str_neq(want[0], want[1]);
    sd_vocab_free(v);
    sd_gguf_close(g);
    const char *flags[3] = {"", "--special", "--no-parse-special"};
    for (int i = 0; i < 3; i++) {
        char args[4096], *out = NULL;
        snprintf(args, sizeof args, "tokenize -m %s --no-bos -p '%s' %s", g_t, text, flags[i]);
        cr_assert_eq(run(args, &out, NULL), 0);
        cr_expect_str_eq(out, want[i == 1], "%s", args);
        free(out);
    }
}
