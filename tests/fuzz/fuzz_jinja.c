/*
 * libFuzzer target: the Jinja engine (sd_jinja_parse, sd_jinja_render) on arbitrary
 * template texts, rendered over a fixed chat (messages with a tool call, tools,
 * add_generation_prompt, bos/eos tokens) with small limits, so every input ends quickly.
 * Checked: a render that succeeds reports its length (the text may hold NUL bytes from the
 * template: strlen <= len) and renders the same bytes a second time; a failing one leaves
 * no output. Seeds: corpus/jinja/ (small templates written for it and two real models'
 * chat templates).
 */
#include <jansson.h>
#include <string.h>

#include "runtime/tokenizer/sd_vocab.h"
#include "tests/fuzz/fuzz_util.h"

static const char *VARS =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}, "
    "{\"role\": \"tool\", \"content\": \"2\"}], \"tools\": [{\"type\": \"function\", "
    "\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
    "\"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *vars;
    if (!vars) vars = json_loads(VARS, 0, NULL);
    if (!vars) abort();
    sd_jinja *t = NULL;
    if (sd_jinja_parse((const char *)data, size, &t, NULL) != SD_OK) {
        if (t) abort();
        return 0;
    }
    sd_jinja_limits lim = sd_jinja_default_limits();
    lim.max_steps = 20000;
    lim.max_output = 1 << 16;
    lim.max_depth = 64;
    lim.now = 1764790000;
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    const int ra = sd_jinja_render(t, vars, &lim, &a, &na, NULL);
    const int rb = sd_jinja_render(t, vars, &lim, &b, &nb, NULL);
    if (ra != rb) abort();
    if (ra == SD_OK) {
        if (!a || strlen(a) > na || na > lim.max_output) abort();
        if (nb != na || memcmp(a, b, na) != 0) abort();
    } else if (a || b) {
        abort();
    }
    free(a);
    free(b);
    sd_jinja_free(t);
    return 0;
}
