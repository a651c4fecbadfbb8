/*
 * Chat templates (llama.cpp llama-chat.cpp's detection and formatting; the expected
 * strings are written here from the templates' definitions), end-of-generation sets of
 * the shared vocabularies (llama.cpp's EOG rules applied by hand to each file's special
 * tokens), and special-token parsing of chat prompts on the real vocabularies.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "tests/testutil.h"

static sd_vocab *load_named(const char *name) {
    char path[1024];
    tu_llamacpp_vocab(name, path, sizeof path);
    tu_need_path(path, "llama.cpp's vocabularies: ../shared/data or scripts/get_vocabs.sh");
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    sd_vocab *v = NULL;
    int rc = sd_vocab_load(g, &v, &err);
    sd_gguf_close(g);
    cr_assert_eq(rc, SD_OK, "%s", err.msg);
    return v;
}

/* ------------------------------------------------------------------ detection */

/* Excerpts of the templates shipped with the models (what detection looks at). */
static const char *SMOLLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";
static const char *LLAMA3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
static const char *MISTRAL_V1 =
    "{%- for message in loop_messages %}{%- if loop.first and system_message is defined %}{{- ' "
    "[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' "
    "[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}{%- endfor %}";
static const char *MISTRAL_V3 = "{%- if tools is not none %}{{- \"[AVAILABLE_TOOLS] [\" }}{%- "
                                "endif %}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}";
static const char *MISTRAL_V3_TEKKEN =
    "{{- \"[AVAILABLE_TOOLS]\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}";
static const char *MISTRAL_V7 = "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' "
                                "}}{{- '[INST]' + message['content'] + '[/INST]' }}";
static const char *LLAMA2_STRIP =
    "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + "
    "messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% endif %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}";
static const char *LLAMA2_BOS = "{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content + ' [/INST]' }}";
static const char *LLAMA2_SYS = "{{ '[INST] <<SYS>>\\n' + content + ' [/INST]' }}";
static const char *LLAMA2 = "{{ '[INST] ' + content + ' [/INST]' }}";
static const char *PHI4 = "{{'<|im_start|>' + message['role'] + '<|im_sep|>' + "
                          "message['content'] + '<|im_end|>'}}";
static const char *PHI3 = "{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + "
                          "'<|end|>\\n'}}{{ '<|assistant|>\\n' }}";
static const char *GEMMA = "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
                           "'<end_of_turn>\\n' }}";
static const char *ZEPHYR = "{{ '<|user|>\\n' + message['content'] + '<|endoftext|>' }}";
static const char *CHATGLM4 = "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>";

static void expect_detect(const char *tmpl, const char *want) {
    const char *name = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_chat_template_detect(tmpl, &name, &err), SD_OK, "%s", err.msg);
    cr_assert_str_eq(name, want, "template '%.60s...'", tmpl);
}

Test(chat, detect) {
    expect_detect(SMOLLM2, "chatml");
    expect_detect(LLAMA3, "llama3");
    expect_detect(MISTRAL_V1, "mistral-v1");
    expect_detect(MISTRAL_V3, "mistral-v3");
    expect_detect(MISTRAL_V3_TEKKEN, "mistral-v3-tekken");
    expect_detect(MISTRAL_V7, "mistral-v7");
    expect_detect(LLAMA2_STRIP, "llama2-sys-strip");
    expect_detect(LLAMA2_BOS, "llama2-sys-bos");
    expect_detect(LLAMA2_SYS, "llama2-sys");
    expect_detect(LLAMA2, "llama2");
    expect_detect("mistral", "llama2"); /* starts with "mistral": the [INST] family */
    expect_detect(PHI4, "phi4");        /* <|im_start|> but also <|im_sep|> */
    expect_detect(PHI3, "phi3");
    expect_detect(GEMMA, "gemma");
    expect_detect(ZEPHYR, "zephyr");
    expect_detect("llama3", "llama3"); /* names are taken as they are */
    expect_detect("mistral-v7-tekken", "mistral-v7-tekken");
    expect_detect("chatml", "chatml");
}

Test(chat, unrecognised) {
    const char *name = (const char *)1;
    sd_error err = {0};
    cr_assert_eq(sd_chat_template_detect("{{ messages | tojson }}", &name, &err),
                 SD_ERR_UNSUPPORTED);
    cr_assert_null(name);
    /* the library names the setting in its own terms; the CLI maps it to the flag */
    cr_assert_not_null(strstr(err.msg, "(template name)"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "--"), "a CLI flag in a library message: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, "chatml"), "%s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'), "%s", err.msg);
    sd_error_clear(&err);
    cr_assert_eq(sd_chat_template_detect(CHATGLM4, &name, &err), SD_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(err.msg, "recognised as 'chatglm4'"), "%s", err.msg);
    sd_error_clear(&err);
    cr_assert_eq(sd_chat_template_detect(NULL, &name, &err), SD_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(err.msg, "tokenizer.chat_template"), "%s", err.msg);
    char *out = NULL;
    sd_chat_msg bad = {"user", NULL};
    cr_assert_eq(sd_chat_apply("chatml", &bad, 1, 1, &out, NULL, &err), SD_ERR_ARG);
    cr_assert_null(out);
}

/* ------------------------------------------------------------------ formatting */

static const sd_chat_msg CHAT[] = {
    {"system", "You are helpful."},
    {"user", "Hi!"},
    {"assistant", " Hello. "},
    {"user", "Bye"},
};
#define N_CHAT (sizeof CHAT / sizeof CHAT[0])

static void expect_format(const char *tmpl, int add_gen, const char *want) {
    char *out = NULL;
    size_t len = 0;
    sd_error err = {0};
    cr_assert_eq(sd_chat_apply(tmpl, CHAT, N_CHAT, add_gen, &out, &len, &err), SD_OK, "%s",
                 err.msg);
    cr_assert_eq(strlen(out), len);
    cr_assert_str_eq(out, want, "template %s", tmpl);
    free(out);
}

Test(chat, format) {
    expect_format(
        "chatml", 1,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n Hello. <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n");
    expect_format(
        SMOLLM2, 0,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n Hello. <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
    expect_format(LLAMA3, 1,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_format("llama2", 1,
                  "[INST] You are helpful.\nHi! [/INST] Hello. </s>[INST] Bye [/INST]");
    expect_format("llama2-sys", 1,
                  "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi! [/INST] Hello. </s>"
                  "[INST] Bye [/INST]");
    expect_format("llama2-sys-bos", 1,
                  "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi! [/INST] Hello. </s>"
                  "<s>[INST] Bye [/INST]");
    expect_format("llama2-sys-strip", 1,
                  "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi! [/INST]Hello.</s>"
                  "[INST] Bye [/INST]");
    expect_format("mistral-v1", 1,
                  " [INST] You are helpful.\n\nHi! [/INST]  Hello. </s> [INST] Bye [/INST]");
    expect_format("mistral-v3", 1,
                  "[INST] You are helpful.\n\nHi![/INST] Hello.</s>[INST] Bye[/INST]");
    expect_format("mistral-v3-tekken", 1,
                  "[INST]You are helpful.\n\nHi![/INST] Hello. </s>[INST]Bye[/INST]");
    expect_format("mistral-v7", 1,
                  "[SYSTEM_PROMPT] You are helpful.[/SYSTEM_PROMPT][INST] Hi![/INST]  Hello. </s>"
                  "[INST] Bye[/INST]");
    expect_format("mistral-v7-tekken", 1,
                  "[SYSTEM_PROMPT]You are helpful.[/SYSTEM_PROMPT][INST]Hi![/INST] Hello. </s>"
                  "[INST]Bye[/INST]");
    expect_format(
        "phi3", 1,
        "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n Hello. "
        "<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
    expect_format(
        "gemma", 1,
        "<start_of_turn>user\nYou are helpful.\n\nHi!<end_of_turn>\n<start_of_turn>model\n"
        "Hello.<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    expect_format(
        "zephyr", 1,
        "<|system|>\nYou are helpful.<|endoftext|>\n<|user|>\nHi!<|endoftext|>\n"
        "<|assistant|>\n Hello. <|endoftext|>\n<|user|>\nBye<|endoftext|>\n<|assistant|>\n");
    /* no messages: only the generation prompt */
    char *out = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_chat_apply("chatml", NULL, 0, 1, &out, NULL, &err), SD_OK);
    cr_assert_str_eq(out, "<|im_start|>assistant\n");
    free(out);
}

/* ------------------------------------------------------------------ vocabularies */

/* qwen2 carries a ChatML template; the formatted prompt tokenizes with its control tokens
 * (parse_special) and text pieces tokenized alone. */
Test(chat, qwen2_prompt) {
    sd_vocab *v = load_named("qwen2");
    const char *tmpl = sd_vocab_chat_template(v);
    cr_assert_not_null(tmpl);
    const char *name = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_chat_template_detect(tmpl, &name, &err), SD_OK, "%s", err.msg);
    cr_assert_str_eq(name, "chatml");
    sd_chat_msg m = {"user", "Hi"};
    char *prompt = NULL;
    cr_assert_eq(sd_chat_apply(tmpl, &m, 1, 1, &prompt, NULL, &err), SD_OK);
    cr_assert_str_eq(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    int32_t *ids = NULL, *part = NULL;
    size_t n = 0, np = 0;
    cr_assert_eq(sd_vocab_tokenize(v, prompt, strlen(prompt),
                                   SD_VOCAB_ADD_SPECIAL | SD_VOCAB_PARSE_SPECIAL, &ids, &n, &err),
                 SD_OK);
    /* qwen2: add_bos false; <|im_start|> 151644, <|im_end|> 151645 */
    cr_assert_eq(ids[0], 151644);
    cr_assert_eq(sd_vocab_tokenize(v, "user\nHi", 7, 0, &part, &np, &err), SD_OK);
    cr_assert(memcmp(ids + 1, part, np * sizeof *part) == 0);
    const size_t at = 1 + np; /* <|im_end|>, "\n", <|im_start|>, "assistant\n" */
    cr_assert_eq(ids[at], 151645);
    free(part);
    cr_assert_eq(sd_vocab_tokenize(v, "\n", 1, 0, &part, &np, &err), SD_OK);
    cr_assert_eq(np, 1);
    cr_assert_eq(ids[at + 1], part[0]);
    free(part);
    cr_assert_eq(ids[at + 2], 151644);
    cr_assert_eq(sd_vocab_tokenize(v, "assistant\n", 10, 0, &part, &np, &err), SD_OK);
    cr_assert_eq(n, at + 3 + np);
    cr_assert(memcmp(ids + at + 3, part, np * sizeof *part) == 0);
    free(part);
    /* generation stops on <|im_end|> and <|endoftext|> */
    cr_assert(sd_vocab_is_eog(v, 151645));
    cr_assert(sd_vocab_is_eog(v, 151643));
    cr_assert_eq(sd_vocab_eot(v), 151645);
    free(ids);
    free(prompt);
    sd_vocab_free(v);
}

Test(chat, llama3_prompt) {
    sd_vocab *v = load_named("llama-bpe");
    cr_assert_eq(sd_vocab_add_bos(v), 1);
    sd_chat_msg m = {"user", " Hi "};
    char *prompt = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_chat_apply("llama3", &m, 1, 1, &prompt, NULL, &err), SD_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(sd_vocab_tokenize(v, prompt, strlen(prompt),
                                   SD_VOCAB_ADD_SPECIAL | SD_VOCAB_PARSE_SPECIAL, &ids, &n, &err),
                 SD_OK);
    /* <|begin_of_text|> <|start_header_id|> "user" <|end_header_id|> "\n\n" "Hi" <|eot_id|>
     * <|start_header_id|> "assistant" <|end_header_id|> "\n\n"; "\n\n" is 271 (llama.cpp's
     * test list), "user" 882, "Hi" 13347, "assistant" 78191 */
    int32_t want[] = {128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271};
    cr_assert_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "id %zu: %d", i, (int)ids[i]);
    free(ids);
    /* without parse_special the header texts are plain text */
    cr_assert_eq(sd_vocab_tokenize(v, prompt, strlen(prompt), 0, &ids, &n, &err), SD_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_lt(ids[i], 128000);
    free(ids);
    free(prompt);
    cr_assert_eq(sd_vocab_eot(v), 128009);
    sd_vocab_free(v);
}

/* EOG per file: eos, eot/eom, FIM pad/repo/sep, and tokens with EOG texts (see sd_vocab.h):
 * llama-spm </s>; gpt-2 and falcon <|endoftext|>; llama-bpe <|end_of_text|> <|eot_id|>;
 * qwen2 <|endoftext|> <|im_end|> and its normal token "</s>" (128247, made control);
 * deepseek-llm <｜end▁of▁sentence｜>; starcoder <|endoftext|> and <fim_pad>. */
static void expect_eog(const char *name, const int32_t *want, int32_t n_want) {
    sd_vocab *v = load_named(name);
    int32_t n;
    const int32_t *eog = sd_vocab_eog_ids(v, &n);
    cr_assert_eq(n, n_want, "%s: %d EOG ids", name, (int)n);
    for (int32_t i = 0; i < n; i++)
        cr_assert_eq(eog[i], want[i], "%s: EOG %d is %d", name, (int)i, (int)eog[i]);
    for (int32_t i = 0; i < n; i++)
        cr_assert(sd_vocab_is_control(v, eog[i]), "%s: %d", name, (int)eog[i]);
    sd_vocab_free(v);
}

Test(chat, eog_sets) {
    expect_eog("llama-spm", (int32_t[]){2}, 1);
    expect_eog("gpt-2", (int32_t[]){50256}, 1);
    expect_eog("falcon", (int32_t[]){11}, 1);
    expect_eog("llama-bpe", (int32_t[]){128001, 128009}, 2);
    expect_eog("qwen2", (int32_t[]){128247, 151643, 151645}, 3);
    expect_eog("deepseek-llm", (int32_t[]){100001}, 1);
    expect_eog("starcoder", (int32_t[]){0, 4}, 2);
}
