/*
 * The specdec CLI on bad input: each case exits non-zero with exactly one line on
 * stderr, "specdec: ..." naming the file or the field; never a crash. Plus the
 * --json output contract and the llama.cpp flag aliases.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/common/sd_cli.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "pair_fixture.h"

TestSuite(cli, .init = pair_setup, .fini = pair_teardown, .timeout = 300);

static void write_file(const char *path, const char *text) {
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0, "cannot write %s", path);
}

/* Run `specdec ARGS`; assert a failing exit, one stderr line starting "specdec: " and
 * containing `needle`. */
static void expect_error(const char *args, const char *needle) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert(rc > 0 && rc < 128, "'%s' exited %d (want a clean non-zero exit)", args, rc);
    cr_assert_not_null(err);
    cr_assert(strncmp(err, "specdec: ", 9) == 0, "'%s': stderr was '%s'", args, err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': expected one stderr line, got '%s'", args, err);
    cr_assert(strstr(err, needle), "'%s': stderr '%s' does not mention '%s'", args, err, needle);
    free(out);
    free(err);
}

Test(cli, missing_target_file) {
    expect_error("generate -m /nonexistent/model.gguf -p hi", "/nonexistent/model.gguf");
}

Test(cli, not_a_gguf) {
    char p[2048];
    tu_path(p, sizeof p, g_dir, "junk.gguf");
    write_file(p, "this is not a gguf file at all, just text\n");
    char args[4096];
    snprintf(args, sizeof args, "generate -m %s -p hi", p);
    expect_error(args, "junk.gguf");
    snprintf(args, sizeof args, "info %s", p);
    expect_error(args, "junk.gguf");
}

/* `generate --config DIR/name` with the given JSON fails naming `needle`. */
static void expect_config_error(const char *name, const char *json, const char *needle) {
    char p[2048], args[4096];
    tu_path(p, sizeof p, g_dir, name);
    write_file(p, json);
    snprintf(args, sizeof args, "generate --config %s", p);
    expect_error(args, needle);
}

Test(cli, bad_json_config) {
    expect_config_error("bad.json", "{ \"target\": \"t.gguf\", \n  \"draft_tokens\": 4,, }\n",
                        "bad.json:2");
}

Test(cli, unknown_config_key) {
    expect_config_error("unk.json", "{ \"target\": \"t.gguf\", \"draft_tokenz\": 4 }\n",
                        "draft_tokenz");
}

Test(cli, config_value_out_of_range) {
    expect_config_error("range.json", "{ \"target\": \"t.gguf\", \"draft_tokens\": 0 }\n",
                        "draft_tokens");
}

Test(cli, vocab_mismatch) {
    char p[2048], args[8192];
    tu_llama_spec s = tu_llama_default_spec();
    s.tok_prefix = "x";
    cr_assert_eq(tu_make_llama(tu_path(p, sizeof p, g_dir, "other.gguf"), &s), 0);
    snprintf(args, sizeof args, "generate -m %s -md %s -p hi -n 4", g_t, p);
    expect_error(args, "other.gguf");
}

Test(cli, prompt_longer_than_context) {
    char p[2048], args[8192];
    tu_path(p, sizeof p, g_dir, "long.txt");
    char text[1024];
    memset(text, 'a', 600);
    text[600] = '\0';
    write_file(p, text);
    snprintf(args, sizeof args, "generate -m %s -f %s -n 4", g_t, p);
    expect_error(args, "context");
}

Test(cli, bad_draft_tokens) {
    char args[8192];
    snprintf(args, sizeof args, "generate -m %s -md %s -p hi -k 0", g_t, g_d);
    expect_error(args, "-k");
    snprintf(args, sizeof args, "generate -m %s -md %s -p hi -k -3", g_t, g_d);
    expect_error(args, "-k");
    snprintf(args, sizeof args, "generate -m %s -md %s -p hi --draft-max 17", g_t, g_d);
    expect_error(args, "-k");
}

Test(cli, bad_flags) {
    char args[8192];
    snprintf(args, sizeof args, "generate -m %s -p hi --temp -1", g_t);
    expect_error(args, "--temp");
    snprintf(args, sizeof args, "generate -m %s -p hi --bogus", g_t);
    expect_error(args, "--bogus");
    expect_error("frobnicate", "frobnicate");
    expect_error("quantize a.gguf b.gguf q7_k", "q7_k");
}

/* --json: one object with the fixed keys; llama.cpp aliases; greedy spec == no-draft. */
Test(cli, json_output_and_aliases) {
    char cmd[8192];
    const char *keys[] = {"n_generated",
                          "n_target_passes",
                          "n_drafted",
                          "n_accepted",
                          "acceptance_rate",
                          "tokens_per_pass",
                          "per_position_acceptance",
                          "tokens_per_s",
                          "ttft_ms",
                          "itl_ms",
                          "t_draft_ms",
                          "t_verify_ms",
                          "t_sample_ms"};
    char *outs[2] = {NULL, NULL};
    for (int no_draft = 0; no_draft <= 1; no_draft++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s -md %s %s -p t5t6 -n 24 --draft-max 3 "
                 "--temp 0 -s 5 -t 1 -c 64 --json",
                 SD_BINARY, g_t, g_d, no_draft ? "--no-draft" : "");
        char *out = NULL, *err = NULL;
        int rc = tu_run(cmd, &out, &err);
        cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
        json_error_t je;
        json_t *root = json_loads(out, 0, &je);
        cr_assert_not_null(root, "not JSON: %s", out);
        cr_assert(json_is_string(json_object_get(root, "text")));
        json_t *toks = json_object_get(root, "tokens");
        cr_assert(json_is_array(toks));
        json_t *st = json_object_get(root, "stats");
        cr_assert(json_is_object(st));
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            cr_assert_not_null(json_object_get(st, keys[i]), "missing stats.%s", keys[i]);
        cr_assert_eq(json_integer_value(json_object_get(st, "n_generated")),
                     (json_int_t)json_array_size(toks));
        cr_assert_eq(json_array_size(toks), 24);
        if (!no_draft)
            cr_assert_gt(json_integer_value(json_object_get(st, "n_drafted")), 0);
        else
            cr_assert_eq(json_integer_value(json_object_get(st, "n_drafted")), 0);
        outs[no_draft] = json_dumps(toks, JSON_COMPACT);
        json_decref(root);
        free(out);
        free(err);
    }
    cr_assert_str_eq(outs[0], outs[1], "greedy speculative tokens differ from --no-draft");
    free(outs[0]);
    free(outs[1]);
}

Test(cli, tokenize_and_info) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p t5t6", SD_BINARY, g_t);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strncmp(out, "1 ", 2) == 0, "expected BOS first, got '%s'", out);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "%s info %s", SD_BINARY, g_t);
    rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "llama"), "%s", out);
    free(out);
    free(err);
}

/* Like expect_error, under `timeout 30`: a command that blocks fails (rc 124, no line). */
static void expect_error_soon(const char *args, const char *needle) {
    char a[8192];
    snprintf(a, sizeof a, "%s", args);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "timeout 30 %s %s </dev/null", SD_BINARY, a);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert(rc > 0 && rc < 128 && rc != 124, "'%s' exited %d (124: it blocked)", args, rc);
    cr_assert(err && strncmp(err, "specdec: ", 9) == 0, "'%s': stderr was '%s'", args, err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': expected one stderr line, got '%s'", args, err);
    cr_assert(strstr(err, needle), "'%s': stderr '%s' does not mention '%s'", args, err, needle);
    cr_assert(!out || !*out, "'%s' printed '%s' before failing", args, out);
    free(out);
    free(err);
}

/* A FIFO as any input path: refused at once by name, never waited on (open(2) of a FIFO
 * blocks until a writer comes; these hung forever before). */
Test(cli, fifo_inputs_are_refused_not_waited_on) {
    char ff[1200], out[1200];
    tu_path(ff, sizeof ff, g_dir, "ff");
    tu_path(out, sizeof out, g_dir, "out.gguf");
    cr_assert_eq(mkfifo(ff, 0600), 0);
    const char *const fmts[] = {
        "generate -m %1$s -p hi",
        "generate --config %1$s",
        "generate -m %2$s -f %1$s",
        "generate -m %2$s --draft-type ngram --lookup-cache %1$s -p hi -n 2",
        "quantize %1$s %3$s q8_0",
        "info %1$s",
        "tokenize -m %1$s -p hi",
        "tokenize -m %2$s -f %1$s",
        "convert %1$s %1$s %3$s",
        "perplexity -m %2$s -f %1$s",
        "bench -m %2$s -md %2$s -f %1$s -n 2 --runs 1",
    };
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        char args[4096];
        snprintf(args, sizeof args, fmts[i], ff, g_t, out);
        expect_error_soon(args, "is a FIFO, not a regular file");
    }
}

/* Messages that used to mislead (issue 19, item 8). */
Test(cli, messages_say_what_is_wrong) {
    char args[4096], cfg[1200], folder[1200];
    /* in range for "a number >= 0", out of the range actually accepted */
    snprintf(args, sizeof args, "generate -m %s -p hi --temp 1e308", g_t);
    expect_error_soon(args, "expected a number in [0, 1e6]");
    /* a folder as the config or the prompt file: named as a folder, not a JSON or read error */
    snprintf(args, sizeof args, "generate --config %s", g_dir);
    expect_error_soon(args, "is a folder, not a regular file");
    snprintf(args, sizeof args, "generate -m %s -f %s", g_t, g_dir);
    expect_error_soon(args, "is a folder, not a regular file");
    /* an empty model path in a config */
    tu_path(cfg, sizeof cfg, g_dir, "empty-draft.json");
    snprintf(args, sizeof args, "{\"target\": \"t.gguf\", \"draft\": \"\"}");
    write_file(cfg, args);
    snprintf(args, sizeof args, "generate --config %s", cfg);
    expect_error_soon(args, "key 'draft': expected a file name, found \"\"");
    /* a lookup cache that cannot be written fails before anything is generated (stdout
     * empty: expect_error_soon checks it) */
    tu_path(folder, sizeof folder, g_dir, "no-such-folder/x.bin");
    snprintf(args, sizeof args, "generate -m %s --draft-type ngram --lookup-cache %s -p hi -n 4",
             g_t, folder);
    expect_error_soon(args, folder);
}

static void collect_note(void *user, const char *line) {
    snprintf((char *)user, 512, "%s", line);
}

/* The library says what is wrong in its own terms (the setting's name in parentheses), and
 * the CLI shows the flag: neither knows the other's spelling. */
Test(cli, library_messages_name_settings_the_cli_names_flags) {
    char note[512] = "";
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.n_ctx = 100000; /* the test model's training context is 128 */
    ep.log = collect_note;
    ep.log_user = note;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    sd_engine_free(e);
    cr_assert(strstr(note, "context size 100000 (n_ctx) exceeds"), "note: '%s'", note);
    cr_assert_null(strstr(note, "--"), "a CLI flag in a library note: '%s'", note);

    char out[256];
    sd_cli_flag_names("a (n_ctx) b (n_ctx_draft) c (draft) d (template name) (other)", out,
                      sizeof out);
    cr_expect_str_eq(out, "a (-c/--ctx-size) b (-cd/--ctx-size-draft) c (-md/--draft FILE) d "
                          "(--chat-template NAME) (other)");
    sd_cli_flag_names("(n_ctx)(n_ctx)", out, 10); /* cut to fit, still terminated */
    cr_expect_eq(strlen(out), 9);

    char cmd[4096], *so = NULL, *se = NULL;
    snprintf(cmd, sizeof cmd, "%s generate -m %s -c 100000 -p t5 -n 2 --temp 0", SD_BINARY, g_t);
    cr_assert_eq(tu_run(cmd, &so, &se), 0, "%s", se);
    cr_expect(strstr(se, "specdec: context size 100000 (-c/--ctx-size) exceeds"), "stderr: %s", se);
    free(so);
    free(se);
    /* Neither a built-in name nor a Jinja text ({{ or {%): the flag is named. */
    snprintf(cmd, sizeof cmd, "generate -m %s --chat-template 'nosuchtemplate' -p hi", g_t);
    expect_error_soon(cmd, "(--chat-template NAME)");
}

/* A key or value with an escaped newline (found by tests/fuzz/fuzz_config.c): the message
 * stays one line, the control character shown as \x0A. */
Test(cli, config_strings_with_control_characters_stay_one_line) {
    expect_config_error("nl-key.json", "{\"target\": \"t.gguf\", \"draft_tok\\ns\": 4}\n",
                        "unknown key 'draft_tok\\x0As'");
    expect_config_error("nl-value.json", "{\"target\": \"t.gguf\", \"kv_type\": \"f3\\n2\"}\n",
                        "found \"f3\\x0A2\"");
}

/* Run `specdec generate` on the test pair (greedy, 24 tokens) with extra flags; the JSON
 * record. */
static json_t *generate_json(const char *extra) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -md %s -p t5t6 -n 24 --draft-max 3 --temp 0 -s 5 -t 1 -c 64 "
             "--json %s",
             SD_BINARY, g_t, g_d, extra);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "'%s': exit %d: %s", extra, rc, err);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    cr_assert_not_null(root, "not JSON: %s", out);
    free(out);
    free(err);
    return root;
}

/* --stop / -r (--reverse-prompt): the text ends before the first appearance of the stop
 * string in the full text, generation ends after the pass that wrote it (its tokens a
 * prefix of the full run's), stop "stop"; text mode writes the same text. */
Test(cli, stop_strings) {
    json_t *full = generate_json("");
    const char *text = json_string_value(json_object_get(full, "text"));
    cr_assert_not_null(text);
    const size_t n_full = strlen(text);
    cr_assert_gt(n_full, 12, "text '%s'", text);
    /* a stop string from the middle of the text, of shell-safe characters */
    char stop[8];
    size_t at = n_full / 2;
    while (at + 3 < n_full &&
           !(isalnum((unsigned char)text[at]) && isalnum((unsigned char)text[at + 1]) &&
             isalnum((unsigned char)text[at + 2])))
        at++;
    cr_assert_lt(at + 3, n_full, "no alphanumeric run in '%s'", text);
    memcpy(stop, text + at, 3);
    stop[3] = '\0';
    const size_t cut = (size_t)(strstr(text, stop) - text);
    json_t *toks_full = json_object_get(full, "tokens");

    const char *flags[] = {"--stop", "-r", "--reverse-prompt"};
    for (int f = 0; f < 3; f++) {
        char extra[64];
        snprintf(extra, sizeof extra, "%s %s --stop zzzzzz", flags[f], stop);
        json_t *got = generate_json(extra);
        const char *t = json_string_value(json_object_get(got, "text"));
        cr_assert_eq(strlen(t), cut, "%s %s: text '%s' of '%s'", flags[f], stop, t, text);
        cr_assert_eq(strncmp(t, text, cut), 0);
        json_t *st = json_object_get(got, "stats");
        cr_assert_str_eq(json_string_value(json_object_get(st, "stop")), "stop");
        json_t *toks = json_object_get(got, "tokens");
        const size_t n = json_array_size(toks);
        cr_assert_lt(n, json_array_size(toks_full), "generation went on past the stop string");
        cr_assert_eq((json_int_t)n, json_integer_value(json_object_get(st, "n_generated")));
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(json_integer_value(json_array_get(toks, i)),
                         json_integer_value(json_array_get(toks_full, i)), "token %zu", i);
        json_decref(got);
    }

    /* text mode: the same text on stdout (the prompt not echoed) */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -md %s -p t5t6 -n 24 --draft-max 3 --temp 0 -s 5 -t 1 -c 64 "
             "--no-display-prompt --log-disable -r %s",
             SD_BINARY, g_t, g_d, stop);
    char *out = NULL, *err = NULL;
    cr_assert_eq(tu_run(cmd, &out, &err), 0, "%s", err);
    cr_assert_eq(strlen(out), cut, "stdout '%s', want the first %zu bytes of '%s'", out, cut, text);
    cr_assert_eq(strncmp(out, text, cut), 0);
    free(out);
    free(err);
    json_decref(full);

    expect_error("generate -m x.gguf -p hi --stop ''", "empty");
    snprintf(cmd, sizeof cmd, "generate -m %s -md %s --chat -i -r x", g_t, g_d);
    expect_error(cmd, "interactive");
}
