/*
 * Built-in chat templates, as llama.cpp's src/llama-chat.cpp (the Jinja engine is
 * jinja_*.c, driven by chat_render.c):
 *   - sd_chat_template_detect: a template NAME is taken as is; otherwise the Jinja text of
 *     tokenizer.chat_template is classified by the marker strings llm_chat_detect_template
 *     looks for, in its order (the first rule that matches wins, so e.g. a ChatML template
 *     that also contains <|im_sep|> is phi4, not chatml).
 *   - chat_apply_builtin (sd_chat_apply, in chat_render.c, routes here): llm_chat_apply_template's
 *     formatting for the templates in FORMATS.
 *     Every template llama.cpp detects is recognised; those without a formatter here give
 *     a clear error naming what was recognised.
 * trim() is llama.cpp's: C-locale isspace at both ends.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/chat_impl.h"
#include "runtime/tokenizer/sd_vocab.h"

typedef enum tmpl {
    T_UNKNOWN = 0,
    T_CHATML,
    T_LLAMA2,
    T_LLAMA2_SYS,
    T_LLAMA2_SYS_BOS,
    T_LLAMA2_SYS_STRIP,
    T_MISTRAL_V1,
    T_MISTRAL_V3,
    T_MISTRAL_V3_TEKKEN,
    T_MISTRAL_V7,
    T_MISTRAL_V7_TEKKEN,
    T_PHI3,
    T_PHI4,
    T_FALCON3,
    T_ZEPHYR,
    T_MONARCH,
    T_GEMMA,
    T_ORION,
    T_OPENCHAT,
    T_VICUNA,
    T_VICUNA_ORCA,
    T_DEEPSEEK,
    T_DEEPSEEK2,
    T_DEEPSEEK3,
    T_COMMAND_R,
    T_LLAMA3,
    T_CHATGLM3,
    T_CHATGLM4,
    T_GLMEDGE,
    T_MINICPM,
    T_EXAONE3,
    T_EXAONE4,
    T_RWKV_WORLD,
    T_GRANITE,
    T_GIGACHAT,
    T_MEGREZ,
    T_YANDEX,
    T_BAILING,
    T_LLAMA4,
    T_SMOLVLM,
    T_DOTS1,
    T_HUNYUAN_MOE,
    T_HUNYUAN_DENSE,
    T_KIMI_K2,
} tmpl;

/* llama.cpp's LLM_CHAT_TEMPLATES names (dots1 has none there). */
static const struct {
    const char *name;
    tmpl t;
} NAMES[] = {
    {"chatml", T_CHATML},
    {"llama2", T_LLAMA2},
    {"llama2-sys", T_LLAMA2_SYS},
    {"llama2-sys-bos", T_LLAMA2_SYS_BOS},
    {"llama2-sys-strip", T_LLAMA2_SYS_STRIP},
    {"mistral-v1", T_MISTRAL_V1},
    {"mistral-v3", T_MISTRAL_V3},
    {"mistral-v3-tekken", T_MISTRAL_V3_TEKKEN},
    {"mistral-v7", T_MISTRAL_V7},
    {"mistral-v7-tekken", T_MISTRAL_V7_TEKKEN},
    {"phi3", T_PHI3},
    {"phi4", T_PHI4},
    {"falcon3", T_FALCON3},
    {"zephyr", T_ZEPHYR},
    {"monarch", T_MONARCH},
    {"gemma", T_GEMMA},
    {"orion", T_ORION},
    {"openchat", T_OPENCHAT},
    {"vicuna", T_VICUNA},
    {"vicuna-orca", T_VICUNA_ORCA},
    {"deepseek", T_DEEPSEEK},
    {"deepseek2", T_DEEPSEEK2},
    {"deepseek3", T_DEEPSEEK3},
    {"command-r", T_COMMAND_R},
    {"llama3", T_LLAMA3},
    {"chatglm3", T_CHATGLM3},
    {"chatglm4", T_CHATGLM4},
    {"glmedge", T_GLMEDGE},
    {"minicpm", T_MINICPM},
    {"exaone3", T_EXAONE3},
    {"exaone4", T_EXAONE4},
    {"rwkv-world", T_RWKV_WORLD},
    {"granite", T_GRANITE},
    {"gigachat", T_GIGACHAT},
    {"megrez", T_MEGREZ},
    {"yandex", T_YANDEX},
    {"bailing", T_BAILING},
    {"llama4", T_LLAMA4},
    {"smolvlm", T_SMOLVLM},
    {"dots1", T_DOTS1},
    {"hunyuan-moe", T_HUNYUAN_MOE},
    {"hunyuan-dense", T_HUNYUAN_DENSE},
    {"kimi-k2", T_KIMI_K2},
};
#define N_NAMES (sizeof NAMES / sizeof NAMES[0])

static const char *name_of(tmpl t) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (NAMES[i].t == t) return NAMES[i].name;
    return "unknown";
}

static int has(const char *s, const char *needle) {
    return strstr(s, needle) != NULL;
}

static tmpl detect_mistral_or_llama2(const char *s) {
    if (has(s, "[SYSTEM_PROMPT]")) return T_MISTRAL_V7;
    if (has(s, "' [INST] ' + system_message") || has(s, "[AVAILABLE_TOOLS]")) {
        if (has(s, " [INST]")) return T_MISTRAL_V1;
        if (has(s, "\"[INST]\"")) return T_MISTRAL_V3_TEKKEN;
        return T_MISTRAL_V3;
    }
    if (has(s, "content.strip()")) return T_LLAMA2_SYS_STRIP;
    if (has(s, "bos_token + '[INST]")) return T_LLAMA2_SYS_BOS;
    if (has(s, "<<SYS>>")) return T_LLAMA2_SYS;
    return T_LLAMA2;
}

/* llm_chat_detect_template. */
static tmpl detect(const char *s) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(s, NAMES[i].name) == 0) return NAMES[i].t;
    if (has(s, "<|im_start|>"))
        return has(s, "<|im_sep|>") ? T_PHI4 : has(s, "<end_of_utterance>") ? T_SMOLVLM : T_CHATML;
    if (strncmp(s, "mistral", 7) == 0 || has(s, "[INST]")) return detect_mistral_or_llama2(s);
    if (has(s, "<|assistant|>") && has(s, "<|end|>")) return T_PHI3;
    if (has(s, "[gMASK]<sop>")) return T_CHATGLM4;
    if (has(s, "<|assistant|>") && has(s, "<|user|>"))
        return has(s, "</s>") ? T_FALCON3 : T_GLMEDGE;
    if (has(s, "<|{{ item['role'] }}|>") && has(s, "<|begin_of_image|>")) return T_GLMEDGE;
    if (has(s, "<|user|>") && has(s, "<|endoftext|>")) return T_ZEPHYR;
    if (has(s, "bos_token + message['role']")) return T_MONARCH;
    if (has(s, "<start_of_turn>")) return T_GEMMA;
    if (has(s, "'\\n\\nAssistant: ' + eos_token")) return T_ORION;
    if (has(s, "GPT4 Correct ")) return T_OPENCHAT;
    if (has(s, "USER: ") && has(s, "ASSISTANT: "))
        return has(s, "SYSTEM: ") ? T_VICUNA_ORCA : T_VICUNA;
    if (has(s, "### Instruction:") && has(s, "<|EOT|>")) return T_DEEPSEEK;
    if (has(s, "<|START_OF_TURN_TOKEN|>") && has(s, "<|USER_TOKEN|>")) return T_COMMAND_R;
    if (has(s, "<|start_header_id|>") && has(s, "<|end_header_id|>")) return T_LLAMA3;
    if (has(s, "[gMASK]sop")) return T_CHATGLM3;
    if (has(s, "<\xe7\x94\xa8\xe6\x88\xb7>")) return T_MINICPM; /* <用户> */
    if (has(s, "'Assistant: ' + message['content'] + eos_token")) return T_DEEPSEEK2;
    if (has(s, "<\xef\xbd\x9c"
               "Assistant\xef\xbd\x9c>") &&
        has(s, "<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
        has(s, "<\xef\xbd\x9c"
               "end\xe2\x96\x81"
               "of\xe2\x96\x81"
               "sentence\xef\xbd\x9c>"))
        return T_DEEPSEEK3;
    if (has(s, "[|system|]") && has(s, "[|assistant|]") && has(s, "[|endofturn|]"))
        return has(s, "[|tool|]") ? T_EXAONE4 : T_EXAONE3;
    if (has(s, "rwkv-world") || has(s, "{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"))
        return T_RWKV_WORLD;
    if (has(s, "<|start_of_role|>")) return T_GRANITE;
    if (has(s, "message['role'] + additional_special_tokens[0] + message['content'] + "
               "additional_special_tokens[1]"))
        return T_GIGACHAT;
    if (has(s, "<|role_start|>")) return T_MEGREZ;
    if (has(s, " \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:"))
        return T_YANDEX; /* " Ассистент:" */
    if (has(s, "<role>ASSISTANT</role>") && has(s, "'HUMAN'")) return T_BAILING;
    if (has(s, "<|header_start|>") && has(s, "<|header_end|>")) return T_LLAMA4;
    if (has(s, "<|endofuserprompt|>")) return T_DOTS1;
    if (has(s, "<|startoftext|>") && has(s, "<|extra_4|>")) return T_HUNYUAN_MOE;
    if (has(s, "<\xef\xbd\x9chy_place\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81"
               "2\xef\xbd\x9c>") &&
        has(s, "<\xef\xbd\x9chy_place\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81"
               "3\xef\xbd\x9c>"))
        return T_HUNYUAN_DENSE;
    if (has(s, "<|im_assistant|>assistant<|im_middle|>")) return T_KIMI_K2;
    return T_UNKNOWN;
}

/* The templates sd_chat_apply formats. */
static const tmpl FORMATS[] = {
    T_CHATML,     T_LLAMA2,      T_LLAMA2_SYS,        T_LLAMA2_SYS_BOS, T_LLAMA2_SYS_STRIP,
    T_MISTRAL_V1, T_MISTRAL_V3,  T_MISTRAL_V3_TEKKEN, T_MISTRAL_V7,     T_MISTRAL_V7_TEKKEN,
    T_PHI3,       T_PHI4,        T_FALCON3,           T_ZEPHYR,         T_GEMMA,
    T_VICUNA,     T_VICUNA_ORCA, T_DEEPSEEK,          T_DEEPSEEK2,      T_DEEPSEEK3,
    T_COMMAND_R,  T_LLAMA3,      T_GRANITE,           T_LLAMA4,         T_SMOLVLM,
};
#define N_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

static int formats(tmpl t) {
    for (size_t i = 0; i < N_FORMATS; i++)
        if (FORMATS[i] == t) return 1;
    return 0;
}

const char *sd_chat_template_names(void) {
    return "chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, "
           "mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken, phi3, phi4, falcon3, "
           "zephyr, gemma, vicuna, vicuna-orca, deepseek, deepseek2, deepseek3, command-r, "
           "llama3, granite, llama4, smolvlm";
}

static int resolve(const char *s, tmpl *t, sd_error *err) {
    if (!s)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "no chat template (the model has no tokenizer.chat_template): name a "
                         "built-in one (template name), one of %s",
                         sd_chat_template_names());
    *t = detect(s);
    if (*t == T_UNKNOWN)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "chat template not recognised (begins '%.40s'): name a built-in one "
                         "(template name), one of %s",
                         s, sd_chat_template_names());
    if (!formats(*t))
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "chat template recognised as '%s', which specdec does not format: name a "
                         "built-in one (template name), one of %s",
                         name_of(*t), sd_chat_template_names());
    return SD_OK;
}

int sd_chat_template_detect(const char *s, const char **name, sd_error *err) {
    tmpl t = T_UNKNOWN;
    int rc = resolve(s, &t, err);
    *name = rc == SD_OK ? name_of(t) : NULL;
    return rc;
}

/* ------------------------------------------------------------------ formatting */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void addn(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (sd_buf_append(&b->p, &b->n, &b->cap, s, n)) b->oom = 1;
}

static void add(sbuf *b, const char *s) {
    addn(b, s, strlen(s));
}

static int c_isspace(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static void add_trim(sbuf *b, const char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && c_isspace(s[a]))
        a++;
    while (n > a && c_isspace(s[n - 1]))
        n--;
    addn(b, s + a, n - a);
}

static int is(const char *role, const char *r) {
    return strcmp(role, r) == 0;
}

static void fmt_mistral(sbuf *b, tmpl t, const sd_chat_msg *m, size_t n) {
    if (t == T_MISTRAL_V7 || t == T_MISTRAL_V7_TEKKEN) {
        const char *sp = t == T_MISTRAL_V7 ? " " : "";
        for (size_t i = 0; i < n; i++) {
            if (is(m[i].role, "system")) {
                add(b, "[SYSTEM_PROMPT]"), add(b, sp), add(b, m[i].content),
                    add(b, "[/SYSTEM_PROMPT]");
            } else if (is(m[i].role, "user")) {
                add(b, "[INST]"), add(b, sp), add(b, m[i].content), add(b, "[/INST]");
            } else {
                add(b, sp), add(b, m[i].content), add(b, "</s>");
            }
        }
        return;
    }
    const char *lead = t == T_MISTRAL_V1 ? " " : "", *trail = t == T_MISTRAL_V3_TEKKEN ? "" : " ";
    int in_turn = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) add(b, lead), add(b, "[INST]"), add(b, trail), in_turn = 1;
        if (is(m[i].role, "system")) {
            add(b, m[i].content), add(b, "\n\n");
        } else if (is(m[i].role, "user")) {
            add(b, m[i].content), add(b, lead), add(b, "[/INST]");
        } else {
            add(b, trail);
            if (t == T_MISTRAL_V3)
                add_trim(b, m[i].content);
            else
                add(b, m[i].content);
            add(b, "</s>");
            in_turn = 0;
        }
    }
}

static void fmt_llama2(sbuf *b, tmpl t, const sd_chat_msg *m, size_t n) {
    const int sys = t != T_LLAMA2, bos_in = t == T_LLAMA2_SYS_BOS, strip = t == T_LLAMA2_SYS_STRIP;
    int in_turn = 1; /* no BOS at the beginning */
    add(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) in_turn = 1, add(b, bos_in ? "<s>[INST] " : "[INST] ");
        void (*content)(sbuf *, const char *) = strip ? add_trim : add;
        if (is(m[i].role, "system")) {
            if (sys)
                add(b, "<<SYS>>\n"), content(b, m[i].content), add(b, "\n<</SYS>>\n\n");
            else
                content(b, m[i].content), add(b, "\n");
        } else if (is(m[i].role, "user")) {
            content(b, m[i].content), add(b, " [/INST]");
        } else {
            content(b, m[i].content), add(b, "</s>");
            in_turn = 0;
        }
    }
}

/* role-tagged templates: pre + role + mid + content + post per message, gen at the end */
static void fmt_tagged(sbuf *b, const sd_chat_msg *m, size_t n, const char *pre, const char *mid,
                       const char *post, int trim, const char *gen, int add_ass) {
    for (size_t i = 0; i < n; i++) {
        add(b, pre), add(b, m[i].role), add(b, mid);
        if (trim)
            add_trim(b, m[i].content);
        else
            add(b, m[i].content);
        add(b, post);
    }
    if (add_ass) add(b, gen);
}

static void fmt_gemma(sbuf *b, const sd_chat_msg *m, size_t n, int add_ass) {
    sbuf sys = {NULL, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        if (is(m[i].role, "system")) {
            add_trim(&sys, m[i].content);
            continue;
        }
        const char *role = is(m[i].role, "assistant") ? "model" : m[i].role;
        add(b, "<start_of_turn>"), add(b, role), add(b, "\n");
        if (sys.n && !is(role, "model")) addn(b, sys.p, sys.n), add(b, "\n\n"), sys.n = 0;
        add_trim(b, m[i].content), add(b, "<end_of_turn>\n");
    }
    if (sys.oom) b->oom = 1;
    free(sys.p);
    if (add_ass) add(b, "<start_of_turn>model\n");
}

/* system / user / assistant prefixes and suffixes (deepseek, vicuna, ...) */
typedef struct roles3 {
    const char *sys_pre, *sys_post, *user_pre, *user_post, *ass_pre, *ass_post, *gen;
    int trim;
} roles3;

static void fmt_roles(sbuf *b, const sd_chat_msg *m, size_t n, const roles3 *r, int add_ass) {
    for (size_t i = 0; i < n; i++) {
        const char *pre, *post;
        if (is(m[i].role, "system"))
            pre = r->sys_pre, post = r->sys_post;
        else if (is(m[i].role, "user"))
            pre = r->user_pre, post = r->user_post;
        else if (is(m[i].role, "assistant"))
            pre = r->ass_pre, post = r->ass_post;
        else
            continue;
        add(b, pre);
        if (r->trim)
            add_trim(b, m[i].content);
        else
            add(b, m[i].content);
        add(b, post);
    }
    if (add_ass) add(b, r->gen);
}

#define DS3_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS3_ASS                                                                                    \
    "<\xef\xbd\x9c"                                                                                \
    "Assistant\xef\xbd\x9c>"
#define DS3_EOS                                                                                    \
    "<\xef\xbd\x9c"                                                                                \
    "end\xe2\x96\x81"                                                                              \
    "of\xe2\x96\x81"                                                                               \
    "sentence\xef\xbd\x9c>"

static void format(sbuf *b, tmpl t, const sd_chat_msg *m, size_t n, int add_ass) {
    static const roles3 vicuna = {
        "", "\n\n", "USER: ", "\n", "ASSISTANT: ", "</s>\n", "ASSISTANT:", 0};
    static const roles3 vicuna_orca = {"SYSTEM: ",    "\n",     "USER: ",     "\n",
                                       "ASSISTANT: ", "</s>\n", "ASSISTANT:", 0};
    static const roles3 deepseek = {
        "", "", "### Instruction:\n", "\n", "### Response:\n", "\n<|EOT|>\n", "### Response:\n", 0};
    static const roles3 deepseek2 = {
        "", "\n\n", "User: ", "\n\n", "Assistant: ", DS3_EOS, "Assistant:", 0};
    static const roles3 deepseek3 = {"", "\n\n", DS3_USER, "", DS3_ASS, DS3_EOS, DS3_ASS, 0};
    static const roles3 command_r = {
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",  "<|END_OF_TURN_TOKEN|>",
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",    "<|END_OF_TURN_TOKEN|>",
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", 1};
    switch (t) {
    case T_CHATML:
        fmt_tagged(b, m, n, "<|im_start|>", "\n", "<|im_end|>\n", 0, "<|im_start|>assistant\n",
                   add_ass);
        break;
    case T_PHI4:
        fmt_tagged(b, m, n, "<|im_start|>", "<|im_sep|>", "<|im_end|>", 0,
                   "<|im_start|>assistant<|im_sep|>", add_ass);
        break;
    case T_PHI3:
        fmt_tagged(b, m, n, "<|", "|>\n", "<|end|>\n", 0, "<|assistant|>\n", add_ass);
        break;
    case T_FALCON3:
        fmt_tagged(b, m, n, "<|", "|>\n", "\n", 0, "<|assistant|>\n", add_ass);
        break;
    case T_ZEPHYR:
        fmt_tagged(b, m, n, "<|", "|>\n", "<|endoftext|>\n", 0, "<|assistant|>\n", add_ass);
        break;
    case T_LLAMA3:
        fmt_tagged(b, m, n, "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", 1,
                   "<|start_header_id|>assistant<|end_header_id|>\n\n", add_ass);
        break;
    case T_LLAMA4:
        fmt_tagged(b, m, n, "<|header_start|>", "<|header_end|>\n\n", "<|eot|>", 1,
                   "<|header_start|>assistant<|header_end|>\n\n", add_ass);
        break;
    case T_GRANITE: /* llama.cpp adds <|tool_call|> for role assistant_tool_call */
        for (size_t i = 0; i < n; i++) {
            add(b, "<|start_of_role|>"), add(b, m[i].role), add(b, "<|end_of_role|>");
            if (is(m[i].role, "assistant_tool_call")) add(b, "<|tool_call|>");
            add(b, m[i].content), add(b, "<|end_of_text|>\n");
        }
        if (add_ass) add(b, "<|start_of_role|>assistant<|end_of_role|>\n");
        break;
    case T_SMOLVLM:
        add(b, "<|im_start|>");
        for (size_t i = 0; i < n; i++) {
            if (is(m[i].role, "system"))
                add(b, m[i].content), add(b, "\n\n");
            else if (is(m[i].role, "user"))
                add(b, "User: "), add(b, m[i].content), add(b, "<end_of_utterance>\n");
            else
                add(b, "Assistant: "), add(b, m[i].content), add(b, "<end_of_utterance>\n");
        }
        if (add_ass) add(b, "Assistant:");
        break;
    case T_GEMMA:
        fmt_gemma(b, m, n, add_ass);
        break;
    case T_VICUNA:
        fmt_roles(b, m, n, &vicuna, add_ass);
        break;
    case T_VICUNA_ORCA:
        fmt_roles(b, m, n, &vicuna_orca, add_ass);
        break;
    case T_DEEPSEEK:
        fmt_roles(b, m, n, &deepseek, add_ass);
        break;
    case T_DEEPSEEK2:
        fmt_roles(b, m, n, &deepseek2, add_ass);
        break;
    case T_DEEPSEEK3:
        fmt_roles(b, m, n, &deepseek3, add_ass);
        break;
    case T_COMMAND_R:
        fmt_roles(b, m, n, &command_r, add_ass);
        break;
    case T_LLAMA2:
    case T_LLAMA2_SYS:
    case T_LLAMA2_SYS_BOS:
    case T_LLAMA2_SYS_STRIP:
        fmt_llama2(b, t, m, n);
        break;
    default:
        fmt_mistral(b, t, m, n);
        break; /* the five mistral templates */
    }
}

int sd_chat_template_is_name(const char *s) {
    for (size_t i = 0; s && i < N_NAMES; i++)
        if (strcmp(s, NAMES[i].name) == 0) return 1;
    return 0;
}

int chat_builtin_recognises(const char *s) {
    if (!s) return 0;
    tmpl t = detect(s);
    return t != T_UNKNOWN && formats(t);
}

int chat_apply_builtin(const char *tmpl_text, const sd_chat_msg *msgs, size_t n_msgs,
                       int add_generation_prompt, char **out, size_t *out_len, sd_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    tmpl t;
    int rc = resolve(tmpl_text, &t, err);
    if (rc != SD_OK) return rc;
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return sd_errorf(err, SD_ERR_ARG, "chat: message %zu has no %s", i,
                             msgs[i].role ? "content" : "role");
    sbuf b = {NULL, 0, 0, 0};
    add(&b, ""); /* a valid empty string even for no messages */
    format(&b, t, msgs, n_msgs, add_generation_prompt);
    if (b.oom) {
        free(b.p);
        return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return SD_OK;
}
