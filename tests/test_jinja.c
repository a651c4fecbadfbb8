/*
 * The Jinja subset (runtime/tokenizer/jinja_*.c) and the chat renderer around it
 * (chat_render.c):
 *   - llama.cpp's chat templates (the models/templates of the llama-cpp-python 0.3.36 sdist,
 *     $SD_SUITE_SDIST or build-peer/src/llama_cpp_python-0.3.36) rendered over a few
 *     message lists and compared byte for byte with Python's jinja2 set up as chat-template
 *     renderers set it up (scripts/jinja_ref.py, run at test time; skipped with one line
 *     without jinja2 or the sdist);
 *   - small templates whose output is written out by hand (whitespace control, loops,
 *     namespace, macros, filters, tests, slicing, tojson);
 *   - malformed and hostile templates: an error naming the line and construct, never a
 *     crash, a hang or unbounded memory (step, depth and output limits).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/tokenizer/sd_vocab.h"
#include "tests/testutil.h"

#define NOW 1764790000LL /* 2025-12-03: strftime_now's clock in both renderers */

static int64_t g_max_steps; /* 0: the default limits */

/* Render src over vars (JSON text); returns the output (malloc'd) or NULL with *err. */
static char *render(const char *src, const char *vars_json, sd_error *err) {
    json_error_t je;
    json_t *vars = json_loads(vars_json ? vars_json : "{}", 0, &je);
    cr_assert(vars, "bad test JSON: %s", je.text);
    sd_jinja *t = NULL;
    char *out = NULL;
    size_t len = 0;
    if (sd_jinja_parse(src, strlen(src), &t, err) == SD_OK) {
        sd_jinja_limits lim = sd_jinja_default_limits();
        lim.now = NOW;
        if (g_max_steps) lim.max_steps = g_max_steps;
        if (sd_jinja_render(t, vars, &lim, &out, &len, err) == SD_OK)
            cr_assert_eq(strlen(out), len);
    }
    sd_jinja_free(t);
    json_decref(vars);
    return out;
}

static void expect(const char *src, const char *vars, const char *want) {
    sd_error err = {0};
    char *out = render(src, vars, &err);
    cr_assert(out, "template %s failed: %s", src, err.msg);
    cr_expect_str_eq(out, want, "template %s", src);
    free(out);
}

static void expect_error(const char *src, const char *vars, int status, const char *fragment) {
    sd_error err = {0};
    char *out = render(src, vars, &err);
    cr_assert_null(out, "template %s rendered '%s', expected an error", src, out ? out : "");
    cr_expect_eq(err.status, status, "template %s: status %d (%s)", src, err.status, err.msg);
    cr_expect(strstr(err.msg, fragment), "template %s: '%s' lacks '%s'", src, err.msg, fragment);
}

Test(jinja, expressions_and_filters) {
    expect("a{{ 1 + 2 * 3 }}b", NULL, "a7b");
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}", NULL,
           "3 -4 1 2 3.5 1024");
    expect("{{ 'a' ~ 1 ~ none ~ true }}", NULL, "a1NoneTrue");
    expect("{{ x | upper }} {{ x | length }} {{ x[1:3] }} {{ x[::-1] }} {{ x[-1] }}",
           "{\"x\": \"h\\u00e9llo\"}", "HéLLO 5 él olléh o");
    expect("{{ '  pad  ' | trim }}|{{ 'a,b' .split(',') | join('-') }}", NULL, "pad|a-b");
    expect("{{ d | tojson }}", "{\"d\": {\"b\": [1, 2.5, null, true], \"a\": \"\\u00e9\\n\"}}",
           "{\"b\": [1, 2.5, null, true], \"a\": \"é\\n\"}");
    expect("{{ d | tojson(indent=2) }}", "{\"d\": {\"k\": [1]}}", "{\n  \"k\": [\n    1\n  ]\n}");
    expect("{{ [1, 'a', {'k': none}] }}", NULL, "[1, 'a', {'k': None}]");
    expect("{{ y | default('dflt') }} {{ '' | default('e', true) }}", NULL, "dflt e");
    expect("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}",
           "{\"ms\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"bot\", \"c\": 2}, "
           "{\"role\": \"user\", \"c\": 3}]}",
           "1,3");
    expect("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}",
           "{\"d\": {\"z\": 1, \"a\": 2}}", "z=1;a=2;");
    expect("{% for k, v in d | dictsort %}{{ k }}{% endfor %}", "{\"d\": {\"z\": 1, \"a\": 2}}",
           "az");
    expect("{{ 'abcabc'.replace('b', 'X') }} {{ 'Hi'.startswith('H') }} {{ 'x' in 'xyz' }}", NULL,
           "aXcaXc True True");
    expect("{{ 'a' if 0 else 'b' }}{{ 'c' if 1 }}{{ not 1 }}", NULL, "bcFalse");
}

Test(jinja, statements_and_whitespace) {
    /* trim_blocks and lstrip_blocks: a block tag's own line leaves no trace */
    expect("A\n  {% if true %}\n  B\n  {% endif %}\nC", NULL, "A\n  B\nC");
    expect("A   {{- ' x ' -}}   B", NULL, "A x B");
    expect("A\n  {%+ if true %}B{% endif %}", NULL, "A\n  B");
    expect("{# note #}\nX", NULL, "X");
    expect("{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}"
           "{% endfor %}",
           "{\"xs\": [\"a\", \"b\", \"c\"]}", "1/3,2/3,3/3");
    expect("{% for x in xs if x > 1 %}{{ x }}{{ loop.first }}{% else %}none{% endfor %}",
           "{\"xs\": [1, 2, 3]}", "2True3False");
    expect("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
    expect("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}"
           "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
           NULL, "13");
    expect("{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}"
           "{% set local = 9 %}{% endfor %}{{ ns.n }}{{ local is defined }}",
           NULL, "6False");
    expect("{% macro greet(who, p='!') %}hi {{ who }}{{ p }}{% endmacro %}{{ greet('a') }} "
           "{{ greet('b', p='?') }}",
           NULL, "hi a! hi b?");
    expect("{% set b %}in{{ 1 }}{% endset %}[{{ b }}]", NULL, "[in1]");
    expect("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
    expect("{% if x is defined %}d{% elif y is none %}n{% else %}e{% endif %}", "{\"y\": null}",
           "n");
    expect("{{ strftime_now('%Y-%m-%d') if strftime_now is defined }}", NULL, "2025-12-03");
    expect("{{ 'x' * 3 }}{{ range(3) | list }}{{ range(1, 7, 2) | join }}", NULL,
           "xxx[0, 1, 2]135");
}

Test(jinja, malformed_templates_name_the_construct) {
    expect_error("{% if x %}never closed", NULL, SD_ERR_FORMAT, "unclosed 'if'");
    expect_error("a\n{% include 'x.j2' %}", NULL, SD_ERR_FORMAT,
                 "line 2: unsupported tag 'include'");
    expect_error("{{ 'abc }}", NULL, SD_ERR_FORMAT, "unterminated string");
    expect_error("{% endfor %}", NULL, SD_ERR_FORMAT, "unexpected 'endfor'");
    expect_error("{{ 1 + }}", NULL, SD_ERR_FORMAT, "expected an expression");
    expect_error("{{ x", NULL, SD_ERR_FORMAT, "unclosed {{ tag");
    expect_error("{{ x | nosuchfilter }}", NULL, SD_ERR_UNSUPPORTED,
                 "unknown filter 'nosuchfilter'");
    expect_error("{{ x is nosuchtest }}", NULL, SD_ERR_UNSUPPORTED, "unknown test 'nosuchtest'");
    expect_error("\n\n{{ raise_exception('roles must alternate') }}", NULL, SD_ERR_ARG,
                 "line 3: raise_exception: roles must alternate");
    expect_error("{{ 'a' - 1 }}", NULL, SD_ERR_ARG, "unsupported operand types for -");
    expect_error("{{ 1 / 0 }}", NULL, SD_ERR_ARG, "division by zero");
    expect_error("{{ '%s' % 1 }}", NULL, SD_ERR_UNSUPPORTED, "string formatting");
    expect_error("{{ nosuchfn() }}", NULL, SD_ERR_UNSUPPORTED, "unknown function 'nosuchfn'");
}

Test(jinja, hostile_templates_are_bounded) {
    g_max_steps = 200000; /* the default's behaviour, sooner */
    /* a loop that would run forever-ish: the step limit */
    expect_error("{% for i in range(1000000000) %}{% endfor %}", NULL, SD_ERR_ARG,
                 "range of more than");
    expect_error("{% for i in range(1000000) %}{{ i }}{% for j in range(1000000) %}{% endfor %}"
                 "{% endfor %}",
                 NULL, SD_ERR_ARG, "evaluation steps");
    /* output and string size */
    expect_error("{{ 'x' * 1000000000 }}", NULL, SD_ERR_ARG,
                 "evaluation steps"); /* a step a copy */
    expect_error("{% set s = namespace(v='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                 "{% set s.v = s.v ~ s.v %}{% endfor %}",
                 NULL, SD_ERR_ARG, "exceeds");
    /* repeats that cost no output: each copy (an empty string's, a list element) is a step */
    expect("{{ '' * 9223372036854775807 }}", NULL, ""); /* at once, not 2^63 empty copies */
    expect_error("{{ ('x' * 100) * 9223372036854775807 }}", NULL, SD_ERR_ARG, "exceeds");
    expect_error("{{ ((([0] * 1000) * 1000) * 1000) | length }}", NULL, SD_ERR_ARG,
                 "evaluation steps");
    expect_error("{% set ns = namespace(a=[1]) %}{% for i in range(64) %}"
                 "{% set ns.a = ns.a + ns.a %}{% endfor %}",
                 NULL, SD_ERR_ARG, "evaluation steps");
    expect("{{ ([] * 1000000000) | length }}", NULL, "0");
    /* numbers at the ends of the integers: clamped, no undefined cast or overflow */
    expect("{{ range(9223372036854775806, 9223372036854775807, 9223372036854775807) | length }}",
           NULL, "1");
    expect_error("{{ range(0, 10, -9223372036854775807 - 1) }}", NULL, SD_ERR_ARG, "non-zero step");
    /* a value holding itself (reference counting would leak the cycle) */
    expect_error("{% set ns = namespace(a=1) %}{% set ns.b = [ns] %}", NULL, SD_ERR_ARG,
                 "cannot hold itself");
    expect_error("{% set l = [] %}{% set m = [l] %}{{ l.append(m) }}", NULL, SD_ERR_ARG,
                 "cannot hold itself");
    /* recursion: a macro calling itself, and deep nesting in the source */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, SD_ERR_ARG,
                 "deeper than");
    char deep[4096];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 1000; i++)
        deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 1000; i++)
        deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_error(deep, NULL, SD_ERR_FORMAT, "nesting deeper than");
    char blocks[8192];
    n = 0;
    for (int i = 0; i < 600; i++)
        n += (size_t)snprintf(blocks + n, sizeof blocks - n, "{%% if 1 %%}");
    expect_error(blocks, NULL, SD_ERR_FORMAT, "nesting deeper than");
    /* a NUL byte and invalid UTF-8 in the source are text, not a crash */
    sd_jinja *t = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_jinja_parse("a\0b\xff{{ 1 }}", 11, &t, &err), SD_OK, "%s", err.msg);
    char *out = NULL;
    size_t len = 0;
    cr_assert_eq(sd_jinja_render(t, NULL, NULL, &out, &len, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(len, 5);
    cr_expect_eq(memcmp(out,
                        "a\0b\xff"
                        "1",
                        5),
                 0);
    free(out);
    sd_jinja_free(t);
}

/* ---- the chat renderer ---- */

static json_t *msgs3(void) {
    return json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:[{s:s,s:s},{s:s,s:s}]}]", "role", "system",
                     "content", "Book", "role", "user", "content", "What is the best book", "role",
                     "assistant", "content", "type", "text", "text", "Wh", "type", "text", "text",
                     "ill");
}

static const char *LLAMA3_JINJA =
    "{{- bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
    "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

Test(chat_render, continue_final_and_bos) {
    json_t *m = msgs3();
    sd_chat_inputs in = sd_chat_default_inputs();
    in.messages = m;
    in.mode = SD_CHAT_JINJA;
    in.bos_token = "<|begin_of_text|>";
    in.strip_bos = 1;
    in.add_generation_prompt = 0;
    in.continue_final = 1;
    char *out = NULL;
    size_t len = 0;
    sd_error err = {0};
    cr_assert_eq(sd_chat_render(LLAMA3_JINJA, &in, &out, &len, &err), SD_OK, "%s", err.msg);
    cr_expect_str_eq(out, "<|start_header_id|>system<|end_header_id|>\n\nBook<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nWhat is the best book"
                          "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nWh\n\nill");
    cr_expect_eq(len, strlen(out));
    free(out);
    /* the built-in llama3 formatter renders the same chat the same way (no BOS written) */
    in.mode = SD_CHAT_AUTO;
    char *b = NULL;
    cr_assert_eq(sd_chat_render("llama3", &in, &b, NULL, &err), SD_OK, "%s", err.msg);
    cr_expect_str_eq(b, "<|start_header_id|>system<|end_header_id|>\n\nBook<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nWhat is the best book"
                        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nWh\n\nill");
    free(b);
    json_decref(m);
}

Test(chat_render, modes) {
    json_t *m = json_pack("[{s:s,s:s}]", "role", "user", "content", "hi");
    sd_chat_inputs in = sd_chat_default_inputs();
    in.messages = m;
    char *out = NULL;
    sd_error err = {0};
    /* a text without tags: a (misspelt) name in AUTO, a template under --jinja */
    cr_expect_eq(sd_chat_render("chatmll", &in, &out, NULL, &err), SD_ERR_UNSUPPORTED);
    in.mode = SD_CHAT_JINJA;
    cr_assert_eq(sd_chat_render("This is not a chat template, it is", &in, &out, NULL, &err), SD_OK,
                 "%s", err.msg);
    cr_expect_str_eq(out, "This is not a chat template, it is");
    free(out);
    /* enable_thinking reaches the template; tools too */
    json_t *tools = json_pack("[{s:s}]", "name", "f");
    in.tools = tools;
    in.enable_thinking = 0;
    cr_assert_eq(sd_chat_render("{{ tools[0].name }}{{ enable_thinking }}{{ date_string is "
                                "defined }}",
                                &in, &out, NULL, &err),
                 SD_OK, "%s", err.msg);
    cr_expect_str_eq(out, "fFalseTrue");
    free(out);
    /* extra variables add names, never replace the renderer's own (messages, bos_token,
     * tools); a name of their own reaches the template */
    json_t *extra = json_pack("{s:[{s:s,s:s}],s:s,s:[],s:s}", "messages", "role", "user", "content",
                              "other", "bos_token", "EVIL", "tools", "custom", "v");
    in.extra = extra;
    in.bos_token = "<s>";
    cr_assert_eq(sd_chat_render("{% for m in messages %}[{{ m.content }}]{% endfor %}"
                                "{{ bos_token }}{{ tools | length }}{{ custom }}",
                                &in, &out, NULL, &err),
                 SD_OK, "%s", err.msg);
    cr_expect_str_eq(out, "[hi]<s>1v");
    free(out);
    in.extra = NULL;
    json_decref(extra);
    /* sd_chat_apply: an unrecognised Jinja text goes to the engine */
    sd_chat_msg cm[1] = {{"user", "hi"}};
    size_t len = 0;
    cr_assert_eq(sd_chat_apply("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                               "{% if add_generation_prompt %}>{% endif %}",
                               cm, 1, 1, &out, &len, &err),
                 SD_OK, "%s", err.msg);
    cr_expect_str_eq(out, "[user:hi]>");
    free(out);
    json_decref(tools);
    json_decref(m);
}

/* ---- llama.cpp's templates against Python's jinja2 ---- */

static const char *templates_dir(char *buf, size_t cap) {
    const char *sdist = getenv("SD_SUITE_SDIST");
    char def[1024];
    snprintf(def, sizeof def, "%s/build-peer/src/llama_cpp_python-0.3.36", SD_SOURCE_DIR);
    snprintf(buf, cap, "%s/vendor/llama.cpp/models/templates", sdist && *sdist ? sdist : def);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

static char *run_ref(const char *tmpl_path, const char *vars_path, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/jinja_ref.py' '%s' '%s' %lld 2>/dev/null",
             SD_SOURCE_DIR, tmpl_path, vars_path, NOW);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = realloc(buf, cap);
            cr_assert(buf);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (!buf) buf = calloc(1, 1);
    buf[len] = 0;
    return buf;
}

Test(jinja, llamacpp_templates_match_python_jinja2, .timeout = 600) {
    char dir[1200];
    if (!templates_dir(dir, sizeof dir))
        cr_skip_test("needs: llama.cpp's templates (the llama-cpp-python 0.3.36 sdist: "
                     "$SD_SUITE_SDIST or build-peer/src; scripts/llama_server_suite.sh "
                     "--fetch-only)");
    static const char *const names[] = {
        "meta-llama-Llama-3.1-8B-Instruct",
        "meta-llama-Llama-3.3-70B-Instruct",
        "meta-llama-Llama-3.2-3B-Instruct",
        "Qwen-Qwen3-0.6B",
        "Qwen-QwQ-32B",
        "Qwen-Qwen2.5-7B-Instruct",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
        "CohereForAI-c4ai-command-r-plus-tool_use",
        "mistralai-Mistral-Nemo-Instruct-2407",
        "google-gemma-2-2b-it",
        "microsoft-Phi-3.5-mini-instruct",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        "deepseek-ai-DeepSeek-V3.1",
        "HuggingFaceTB-SmolLM3-3B",
        "ibm-granite-granite-3.3-2B-Instruct",
    };
    static const char *const chats[] = {
        /* a system prompt, two turns */
        "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a test.\"}, {\"role\": "
        "\"user\", \"content\": \"What is today?\"}, {\"role\": \"assistant\", \"content\": "
        "\"Hi there\"}, {\"role\": \"user\", \"content\": \"ok  \"}], \"add_generation_prompt\": "
        "true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": true}",
        /* tools offered, thinking off, no generation prompt */
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Run it\"}], \"tools\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"python\", \"description\": \"Runs code.\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"code\": {\"type\": "
        "\"string\"}}, \"required\": [\"code\"]}}}], \"bos_token\": \"<s>\", \"eos_token\": "
        "\"</s>\", \"enable_thinking\": false}",
        /* a tool call and its result */
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Print hi\"}, {\"role\": "
        "\"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call_1\", \"type\": "
        "\"function\", \"function\": {\"name\": \"python\", \"arguments\": {\"code\": "
        "\"print('hi')\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"name\": "
        "\"python\", \"content\": \"hi\"}], \"add_generation_prompt\": true, \"bos_token\": "
        "\"<s>\", \"eos_token\": \"</s>\"}",
    };
    char tmp[512];
    cr_assert_eq(tu_mkdtemp(tmp, sizeof tmp), 0);
    char vars_path[700];
    int compared = 0;
    for (size_t c = 0; c < sizeof chats / sizeof chats[0]; c++) {
        snprintf(vars_path, sizeof vars_path, "%s/vars%zu.json", tmp, c);
        cr_assert_eq(tu_write_file(vars_path, chats[c], strlen(chats[c])), 0);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char path[1400];
            snprintf(path, sizeof path, "%s/%s.jinja", dir, names[i]);
            if (access(path, R_OK) != 0) continue;
            int st;
            char *want = run_ref(path, vars_path, &st);
            if (st == 77 || st == 127) {
                free(want);
                tu_rmdir(tmp);
                cr_skip_test("needs: jinja2 for the python3 on PATH (pip install jinja2)");
            }
            if (st != 0) { /* Python's own error (its sandbox): nothing to compare */
                free(want);
                continue;
            }
            size_t n = 0;
            unsigned char *src = tu_read_file(path, &n);
            cr_assert(src);
            char *s = malloc(n + 1);
            memcpy(s, src, n);
            s[n] = 0;
            free(src);
            sd_error err = {0};
            char *got = render(s, chats[c], &err);
            cr_expect(got, "%s (chat %zu): %s", names[i], c, err.msg);
            if (got) cr_expect_str_eq(got, want, "%s (chat %zu)", names[i], c);
            compared++;
            free(got);
            free(s);
            free(want);
        }
    }
    tu_rmdir(tmp);
    cr_expect_geq(compared, 30, "only %d renders compared", compared);
}
