/*
 * JSON Schema -> GBNF (runtime/grammar/schema.c), checked through the grammar part's own
 * parser and matcher: for each schema of tests/data/json_schema_cases.json, every "valid"
 * instance (valid against the schema, in the grammar's documented form) is accepted whole
 * by the compiled grammar, every "invalid" one (invalid against the schema) is refused,
 * and every "narrowed" one (valid against the schema but outside the documented subset:
 * an extra key where none is declared, 16-digit integers, ...) is refused too. The labels
 * were checked with Python's jsonschema (its draft's format checker); the file names
 * each case. Then the keywords that are refused by name, and the bounded whitespace.
 */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/sd_grammar.h"
#include "tests/testutil.h"

/* The grammar of schema text s (asserts it converts and parses). */
static sd_grammar *compile(const char *s, size_t len, const char *name) {
    char *gbnf = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_json_schema_to_gbnf(s, len, &gbnf, &err), SD_OK, "%s: %s", name, err.msg);
    sd_grammar *g = NULL;
    int rc = sd_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err);
    cr_assert_eq(rc, SD_OK, "%s: %s\n%s", name, err.msg, gbnf);
    free(gbnf);
    return g;
}

/* 1 if g accepts the whole of text. */
static int accepts(const sd_grammar *g, const char *text) {
    sd_grammar_state *st = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_grammar_state_init(g, &st, &err), SD_OK, "%s", err.msg);
    int ok = sd_grammar_advance(st, text, strlen(text), &err) == SD_OK && sd_grammar_accepting(st);
    sd_grammar_state_free(st);
    return ok;
}

Test(json_schema, cases_accept_valid_refuse_invalid) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/json_schema_cases.json", SD_SOURCE_DIR);
    json_error_t je;
    json_t *cases = json_load_file(path, 0, &je);
    cr_assert_not_null(cases, "%s: %s", path, je.text);
    cr_assert(json_array_size(cases) >= 30);
    size_t i;
    json_t *c;
    int n_valid = 0, n_refused = 0;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        char *s = json_dumps(json_object_get(c, "schema"), JSON_COMPACT);
        sd_grammar *g = compile(s, strlen(s), name);
        free(s);
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(c, "valid"), k, t) {
            cr_expect(accepts(g, json_string_value(t)), "%s: valid %s refused", name,
                      json_string_value(t));
            n_valid++;
        }
        const char *refused[] = {"invalid", "narrowed"};
        for (int r = 0; r < 2; r++) {
            json_array_foreach(json_object_get(c, refused[r]), k, t) {
                cr_expect(!accepts(g, json_string_value(t)), "%s: %s %s accepted", name, refused[r],
                          json_string_value(t));
                n_refused++;
            }
        }
        sd_grammar_free(g);
    }
    cr_assert(n_valid >= 60 && n_refused >= 80, "%d valid, %d refused", n_valid, n_refused);
    json_decref(cases);
}

/* Properties come out in schema order; an optional one may be left out anywhere. */
Test(json_schema, schema_order_and_optional_members) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"integer\"},"
                    "\"a\":{\"type\":\"integer\"},\"m\":{\"type\":\"integer\"}},"
                    "\"required\":[\"m\"]}";
    sd_grammar *g = compile(s, strlen(s), "order");
    cr_expect(accepts(g, "{\"z\":1,\"a\":2,\"m\":3}"));
    cr_expect(accepts(g, "{\"a\":2,\"m\":3}"));
    cr_expect(accepts(g, "{\"z\":1,\"m\":3}"));
    cr_expect(accepts(g, "{\"m\":3}"));
    cr_expect(!accepts(g, "{\"a\":2,\"z\":1,\"m\":3}")); /* valid JSON, not schema order */
    cr_expect(!accepts(g, "{\"m\":3,\"z\":1}"));
    cr_expect(!accepts(g, "{\"z\":1,\"a\":2}")); /* m required */
    cr_expect(!accepts(g, "{\"z\":1,,\"m\":3}"));
    sd_grammar_free(g);
}

/* additionalProperties as a schema (or true): an extra key is never a declared name (nor
 * a required one outside properties), whether that member came, was left out, or is
 * spelled with escapes; so no declared key appears twice. Two free extra keys can still be
 * equal: a context-free grammar cannot make an unbounded set of keys distinct (documented
 * in docs/serving.md). */
Test(json_schema, extra_keys_never_repeat_a_declared_name) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
                    "\"name\":{\"type\":\"string\"}},\"required\":[\"id\",\"kind\"],"
                    "\"additionalProperties\":{\"type\":\"number\"}}";
    sd_grammar *g = compile(s, strlen(s), "extra-keys");
    cr_expect(accepts(g, "{\"id\":1,\"kind\":2}"));
    cr_expect(accepts(g, "{\"id\":1,\"name\":\"a\",\"kind\":2,\"x\":3,\"i\":4,\"idx\":5}"));
    cr_expect(accepts(g, "{\"id\":1,\"kind\":2,\"nam\":3,\"names\":4,\"kinds\":5}"));
    cr_expect(!accepts(g, "{\"id\":1,\"kind\":2,\"id\":3}"));   /* a declared one again */
    cr_expect(!accepts(g, "{\"id\":1,\"kind\":2,\"name\":3}")); /* one left out, then extra */
    cr_expect(!accepts(g, "{\"id\":1,\"kind\":2,\"kind\":3}")); /* required, not in properties */
    cr_expect(!accepts(g, "{\"id\":1,\"kind\":2,\"\\u0069d\":3}")); /* "id" with an escape */
    /* the limit: two equal free extra keys are not told apart */
    cr_expect(accepts(g, "{\"id\":1,\"kind\":2,\"x\":3,\"x\":4}"));
    sd_grammar_free(g);
    const char *t = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                    "\"additionalProperties\":true}";
    g = compile(t, strlen(t), "extra-true");
    cr_expect(accepts(g, "{\"b\":[1]}"));
    cr_expect(!accepts(g, "{\"b\":[1],\"a\":1}")); /* a declared key after the extras */
    cr_expect(!accepts(g, "{\"a\":1,\"a\":2}"));
    sd_grammar_free(g);
}

/* Whitespace between tokens is bounded: a newline and at most 16 spaces. */
Test(json_schema, whitespace_is_bounded) {
    const char *s = "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}";
    sd_grammar *g = compile(s, strlen(s), "ws");
    cr_expect(accepts(g, "[true, false]"));
    cr_expect(accepts(g, "[\n                true]"));   /* 16 spaces */
    cr_expect(!accepts(g, "[\n                 true]")); /* 17 */
    cr_expect(!accepts(g, "[  true]"));                  /* two spaces without a newline */
    cr_expect(!accepts(g, " [true]"));                   /* nothing before the value */
    cr_expect(!accepts(g, "[true] "));                   /* nor after it */
    sd_grammar_free(g);
}

/* OpenAPI's nullable (not JSON Schema; jsonschema ignores it, so it is not in the file). */
Test(json_schema, nullable_adds_null) {
    const char *s = "{\"type\":\"integer\",\"nullable\":true}";
    sd_grammar *g = compile(s, strlen(s), "nullable");
    cr_expect(accepts(g, "null"));
    cr_expect(accepts(g, "42"));
    cr_expect(!accepts(g, "\"42\""));
    sd_grammar_free(g);
}

/* Every keyword that constrains and is not supported is refused by name, with its place. */
Test(json_schema, unsupported_keywords_refused_by_name) {
    static const struct {
        const char *schema, *words[2];
    } cases[] = {
        {"{\"type\":\"array\",\"uniqueItems\":true}", {"'uniqueItems'", "#"}},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"multipleOf\":2}}}",
         {"'multipleOf'", "#/properties/n"}},
        {"{\"type\":\"object\",\"minProperties\":1}", {"'minProperties'", "#"}},
        {"{\"type\":\"object\",\"patternProperties\":{\"^a\":{}}}", {"'patternProperties'", "#"}},
        {"{\"not\":{\"type\":\"string\"}}", {"'not'", "#"}},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", {"'contains'", "#"}},
        {"{\"if\":{},\"then\":{}}", {"'if'", "#"}},
        {"{\"type\":\"string\",\"format\":\"email\"}", {"'format' \"email\"", "#"}},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", {"'pattern'", "lookaround"}},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", {"'pattern'", "escape"}},
        {"{\"$ref\":\"http://example.com/s.json\"}", {"'$ref'", "does not resolve"}},
        {"{\"$ref\":\"#/$defs/missing\"}", {"'$ref'", "does not resolve"}},
        {"{\"type\":\"strange\"}", {"'type' \"strange\"", "#"}},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", {"'maxLength'", "#"}},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", {"no integer", "#"}},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", {"'type' beside 'anyOf'", "#"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}",
         {"false matches nothing", "#/properties/a"}},
        {"{\"type\":", {"not valid JSON", "line 1"}},
        /* a key with a newline (found by fuzz_json_schema): the message stays one line */
        {"{\"\\num\": [1]}", {"'\\x0Aum' is not supported", "#"}},
        /* bounds of the work a request can ask for */
        {"{\"type\":\"string\",\"maxLength\":5000}", {"'maxLength'", "0 .. 1024"}},
        {"{\"type\":[\"array\",\"array\"],\"items\":{}}", {"'type' lists 'array' twice", "#"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *gbnf = NULL;
        sd_error err = {0};
        int rc = sd_json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &gbnf, &err);
        cr_expect_eq(rc, SD_ERR_ARG, "%s: rc %d", cases[i].schema, rc);
        cr_expect_null(gbnf);
        for (int w = 0; w < 2; w++)
            cr_expect(strstr(err.msg, cases[i].words[w]) != NULL, "%s: '%s' lacks %s",
                      cases[i].schema, err.msg, cases[i].words[w]);
        cr_expect(strncmp(err.msg, "json_schema: ", 13) == 0, "%s", err.msg);
    }
}

/* A $ref segment longer than the resolver's buffer is not found (not cut to another name),
 * and a type list cannot convert the same subschemas twice at every level (2^depth). */
Test(json_schema, refs_and_repeats_are_bounded) {
    char s[2048];
    char name[400];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    char cut[256];
    memcpy(cut, name, 255);
    cut[255] = '\0';
    snprintf(s, sizeof s, "{\"$defs\":{\"%s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/%s\"}", cut,
             name);
    char *gbnf = NULL;
    sd_error err = {0};
    cr_expect_eq(sd_json_schema_to_gbnf(s, strlen(s), &gbnf, &err), SD_ERR_ARG, "%s", gbnf);
    cr_expect(strstr(err.msg, "'$ref'") != NULL, "%s", err.msg); /* (the name fills the rest) */
    free(gbnf);
    gbnf = NULL;
    /* 40 levels of a type list naming one container twice: 2^40 visits of the same items
     * without the check (refused at the first level) */
    size_t n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "{\"type\":[\"array\",\"array\"],\"items\":");
    n += (size_t)snprintf(s + n, sizeof s - n, "{\"type\":\"integer\"}");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "}");
    cr_assert_lt(n, sizeof s - 1);
    cr_expect_eq(sd_json_schema_to_gbnf(s, n, &gbnf, &err), SD_ERR_ARG);
    cr_expect(strstr(err.msg, "twice") != NULL, "%s", err.msg);
    free(gbnf);
    gbnf = NULL;
    /* 30 levels of anyOf, each converted once: fine */
    n = 0;
    for (int i = 0; i < 30; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "{\"anyOf\":[");
    n += (size_t)snprintf(s + n, sizeof s - n, "{\"type\":\"integer\"}");
    for (int i = 0; i < 30; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, ",{\"type\":\"null\"}]}");
    cr_assert_lt(n, sizeof s - 1);
    cr_expect_eq(sd_json_schema_to_gbnf(s, n, &gbnf, &err), SD_OK, "%s", err.msg);
    free(gbnf);
}

/* Annotations are no constraint: ignored. */
Test(json_schema, annotations_ignored) {
    const char *s =
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"title\":\"T\","
        "\"description\":\"d\",\"type\":\"boolean\",\"default\":true,\"examples\":[true]}";
    sd_grammar *g = compile(s, strlen(s), "annotations");
    cr_expect(accepts(g, "true"));
    cr_expect(!accepts(g, "1"));
    sd_grammar_free(g);
}

/* Integer ranges across digit counts: every value in [-1200, 1200] is accepted exactly
 * when it lies inside the bounds (the digit-range rules against plain comparison). */
Test(json_schema, integer_ranges_exact) {
    static const long long bounds[][2] = {{0, 0},   {7, 7},     {3, 47},      {-47, -3},
                                          {-9, 10}, {99, 1001}, {-1000, 999}, {100, 199},
                                          {1, 9},   {10, 99},   {-1, 0},      {5, 1100}};
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
        char s[128];
        snprintf(s, sizeof s, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}",
                 bounds[b][0], bounds[b][1]);
        sd_grammar *g = compile(s, strlen(s), s);
        for (long long v = -1200; v <= 1200; v++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", v);
            const int want = v >= bounds[b][0] && v <= bounds[b][1];
            cr_expect_eq(accepts(g, t), want, "%s: %lld", s, v);
        }
        sd_grammar_free(g);
    }
}

/* The built-in json_object grammar (response_format {"type": "json_object"}). */
Test(json_schema, json_object_grammar) {
    sd_grammar *g = NULL;
    sd_error err = {0};
    cr_assert_eq(
        sd_grammar_parse(sd_grammar_json_object, strlen(sd_grammar_json_object), NULL, &g, &err),
        SD_OK, "%s", err.msg);
    cr_expect(accepts(g, "{\"a\": [1, 2.5, \"x\", null, true]}"));
    cr_expect(!accepts(g, "[1]"));
    cr_expect(!accepts(g, "\"s\""));
    sd_grammar_free(g);
}

/* The CLI: --json-schema (-j) constrains generate's output (the greedy text with the draft
 * equals the text without it, and parses as the schema's object); a refused keyword and
 * two grammar flags at once are one-line errors. */
Test(json_schema, cli_json_schema) {
    const char *schema = "'{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
                         "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},"
                         "\"required\":[\"ok\",\"n\"]}'";
    char cmd[2048];
    char *out[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        snprintf(cmd, sizeof cmd,
                 "%s generate -m %s/models/tinystories-target-q8_0.gguf %s%s%s -p 'Once upon' "
                 "-n 64 --temp 0 --no-display-prompt -j %s 2>/dev/null",
                 SD_BINARY, SD_SOURCE_DIR, d ? "-md " : "--no-draft", d ? SD_SOURCE_DIR : "",
                 d ? "/models/tinystories-draft-q8_0.gguf" : "", schema);
        cr_assert_eq(tu_run(cmd, &out[d], NULL), 0, "%s", cmd);
    }
    cr_expect_str_eq(out[0], out[1]);
    json_error_t je;
    json_t *j = json_loads(out[0], JSON_DECODE_ANY, &je);
    cr_assert_not_null(j, "not JSON: '%s' (%s)", out[0], je.text);
    cr_expect(json_is_boolean(json_object_get(j, "ok")), "%s", out[0]);
    json_int_t n = json_integer_value(json_object_get(j, "n"));
    cr_expect(json_is_integer(json_object_get(j, "n")) && n >= 0 && n <= 9, "%s", out[0]);
    cr_expect_eq(json_object_size(j), 2, "%s", out[0]);
    json_decref(j);
    free(out[0]);
    free(out[1]);
    tu_expect_cli_error("generate -m " SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf -p x "
                        "-j '{\"type\":\"array\",\"uniqueItems\":true}'",
                        "'uniqueItems' is not supported");
    tu_expect_cli_error("generate -m " SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf -p x "
                        "-j '{}' --grammar 'root ::= \"a\"'",
                        "give one of them");
}
