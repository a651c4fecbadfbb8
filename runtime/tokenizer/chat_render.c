/*
 * runtime/tokenizer/chat_render.c: sd_chat_render, the one chat renderer (the face:
 * sd_vocab.h, "chat rendering"). It picks a built-in formatter (chat.c) or the Jinja
 * engine (jinja_*.c) as the mode says, and handles what sits around the template:
 *   - the template's variables: messages (content parts joined with "\n"), tools,
 *     add_generation_prompt, enable_thinking, bos_token, eos_token, today's date as
 *     date_string ("03 Dec 2026") and datetime ("Dec 03 2026"), and the extra ones;
 *   - continuing the final (assistant) message: the messages before it are rendered
 *     with the assistant header, then its content follows (parts joined with "\n\n");
 *   - a leading bos_token dropped when the tokenizer adds BOS itself.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/tokenizer/chat_impl.h"
#include "runtime/tokenizer/sd_vocab.h"

sd_chat_inputs sd_chat_default_inputs(void) {
    sd_chat_inputs in;
    memset(&in, 0, sizeof in);
    in.add_generation_prompt = 1;
    in.enable_thinking = 1;
    in.bos_token = "";
    in.eos_token = "";
    in.mode = SD_CHAT_AUTO;
    return in;
}

/* A message's content as one string (a new reference): a string as is, null or absent
 * "", text parts joined with sep. NULL for anything else. */
static json_t *content_text(const json_t *c, const char *sep) {
    if (!c || json_is_null(c)) return json_string("");
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int ok = sd_buf_append(&buf, &len, &cap, "", 0) == 0;
    for (size_t i = 0; ok && i < json_array_size(c); i++) {
        const json_t *p = json_array_get(c, i), *t = json_object_get(p, "text");
        if (!t || !json_is_string(t)) {
            ok = 0;
            break;
        }
        if (i && sd_buf_append(&buf, &len, &cap, sep, strlen(sep))) ok = 0;
        if (ok && sd_buf_append(&buf, &len, &cap, json_string_value(t), json_string_length(t)))
            ok = 0;
    }
    json_t *s = ok ? json_stringn_nocheck(buf, len) : NULL;
    free(buf);
    return s;
}

/* The messages the template sees: copies with the content a string. */
static int normalize(const json_t *msgs, size_t n, json_t **out, sd_error *err) {
    json_t *a = json_array();
    if (!a) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
            json_decref(a);
            return sd_errorf(err, SD_ERR_ARG, "chat: message %zu has no role", i);
        }
        json_t *c = json_copy((json_t *)m), *t = content_text(json_object_get(m, "content"), "\n");
        if (!c || !t || json_object_set_new(c, "content", t) || json_array_append_new(a, c)) {
            json_decref(a);
            if (!t) json_decref(c);
            return sd_errorf(err, t ? SD_ERR_OOM : SD_ERR_ARG,
                             t ? "chat: out of memory"
                               : "chat: message %zu: content must be a string or text parts",
                             i);
        }
    }
    *out = a;
    return SD_OK;
}

/* Plain: what a built-in formatter renders exactly as the template would. */
static int plain(const sd_chat_inputs *in) {
    if (in->tools &&
        !(json_is_null(in->tools) || (json_is_array(in->tools) && json_array_size(in->tools) == 0)))
        return 0;
    if (in->extra && json_object_size(in->extra) > 0) return 0;
    return in->enable_thinking;
}

static int render_builtin(const char *tmpl, const json_t *msgs, int add_gen, char **out,
                          size_t *out_len, sd_error *err) {
    const size_t n = json_array_size(msgs);
    sd_chat_msg *m = calloc(n ? n : 1, sizeof *m);
    if (!m) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(msgs, i);
        m[i].role = json_string_value(json_object_get(x, "role"));
        m[i].content = json_string_value(json_object_get(x, "content"));
    }
    int rc = chat_apply_builtin(tmpl, m, n, add_gen, out, out_len, err);
    free(m);
    return rc;
}

static int render_jinja(const char *tmpl, const sd_chat_inputs *in, const json_t *msgs, int add_gen,
                        char **out, size_t *out_len, sd_error *err) {
    json_t *vars = json_object();
    if (!vars) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    int bad = json_object_set(vars, "messages", (json_t *)msgs);
    bad |= json_object_set_new(vars, "bos_token", json_string(in->bos_token ? in->bos_token : ""));
    bad |= json_object_set_new(vars, "eos_token", json_string(in->eos_token ? in->eos_token : ""));
    bad |= json_object_set_new(vars, "enable_thinking", json_boolean(in->enable_thinking));
    if (add_gen) bad |= json_object_set_new(vars, "add_generation_prompt", json_true());
    /* today's date under the names templates read it from (date_string: Llama 3.x) */
    time_t now = in->now ? (time_t)in->now : time(NULL);
    struct tm tm;
    char day[64];
    if (localtime_r(&now, &tm)) {
        if (strftime(day, sizeof day, "%b %d %Y", &tm))
            bad |= json_object_set_new(vars, "datetime", json_string(day));
        if (strftime(day, sizeof day, "%d %b %Y", &tm))
            bad |= json_object_set_new(vars, "date_string", json_string(day));
    }
    if (in->tools && json_is_array(in->tools))
        bad |= json_object_set(vars, "tools", (json_t *)in->tools);
    if (in->extra && json_is_object(in->extra))
        bad |= json_object_update_missing(vars, (json_t *)in->extra); /* adds, never replaces */
    if (bad) {
        json_decref(vars);
        return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    }
    sd_jinja *t = NULL;
    int rc = sd_jinja_parse(tmpl, strlen(tmpl), &t, err);
    if (rc == SD_OK) {
        sd_jinja_limits lim = sd_jinja_default_limits();
        lim.now = in->now;
        rc = sd_jinja_render(t, vars, &lim, out, out_len, err);
    }
    sd_jinja_free(t);
    json_decref(vars);
    return rc;
}

int sd_chat_render(const char *tmpl, const sd_chat_inputs *in, char **out, size_t *out_len,
                   sd_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!in || !in->messages || !json_is_array(in->messages))
        return sd_errorf(err, SD_ERR_ARG, "chat: the messages must be an array");
    if (!tmpl) return chat_apply_builtin(NULL, NULL, 0, 0, out, out_len, err); /* names why */
    size_t n = json_array_size(in->messages);
    int add_gen = in->add_generation_prompt;
    const json_t *last = n ? json_array_get(in->messages, n - 1) : NULL;
    json_t *cont = NULL;
    if (in->continue_final && last) {
        cont = content_text(json_object_get(last, "content"), "\n\n");
        if (!cont)
            return sd_errorf(err, SD_ERR_ARG, "chat: the final message's content must be text");
        n--;
        add_gen = 1;
    }
    json_t *msgs = NULL;
    int rc = normalize(in->messages, n, &msgs, err);
    if (rc) {
        json_decref(cont);
        return rc;
    }
    const int is_name = sd_chat_template_is_name(tmpl);
    const int jinja_tags = strstr(tmpl, "{{") || strstr(tmpl, "{%");
    int builtin;
    if (is_name || in->mode == SD_CHAT_BUILTIN)
        builtin = 1;
    else if (in->mode == SD_CHAT_JINJA)
        builtin = 0;
    else /* AUTO */
        builtin = !jinja_tags || (plain(in) && chat_builtin_recognises(tmpl));
    if (builtin) {
        rc = render_builtin(tmpl, msgs, add_gen, out, out_len, err);
    } else {
        rc = render_jinja(tmpl, in, msgs, add_gen, out, out_len, err);
        /* the engine cannot run this template: a built-in that knows it renders a plain chat */
        if ((rc == SD_ERR_UNSUPPORTED || rc == SD_ERR_FORMAT) && plain(in) &&
            chat_builtin_recognises(tmpl)) {
            sd_error e2 = {0};
            if (render_builtin(tmpl, msgs, add_gen, out, out_len, &e2) == SD_OK) rc = SD_OK;
        }
    }
    json_decref(msgs);
    if (rc == SD_OK && in->strip_bos && in->bos_token && in->bos_token[0]) {
        size_t bl = strlen(in->bos_token), ol = strlen(*out);
        if (ol >= bl && memcmp(*out, in->bos_token, bl) == 0) {
            memmove(*out, *out + bl, ol - bl + 1);
            if (out_len) *out_len -= bl;
        }
    }
    if (rc == SD_OK && cont && json_string_length(cont)) {
        size_t ol = out_len ? *out_len : strlen(*out), cap = ol + 1;
        char *o = *out;
        if (sd_buf_append(&o, &ol, &cap, json_string_value(cont), json_string_length(cont))) {
            free(*out);
            *out = NULL;
            rc = sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
        } else {
            *out = o;
            if (out_len) *out_len = ol;
        }
    }
    json_decref(cont);
    return rc;
}

int chat_apply_jinja_msgs(const char *tmpl, const sd_chat_msg *msgs, size_t n_msgs,
                          int add_generation_prompt, char **out, size_t *out_len, sd_error *err) {
    *out = NULL;
    json_t *a = json_array();
    if (!a) return sd_errorf(err, SD_ERR_OOM, "chat: out of memory");
    for (size_t i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            json_decref(a);
            return sd_errorf(err, SD_ERR_ARG, "chat: message %zu has no %s", i,
                             msgs[i].role ? "content" : "role");
        }
        if (json_array_append_new(
                a, json_pack("{s:s,s:s}", "role", msgs[i].role, "content", msgs[i].content))) {
            json_decref(a);
            return sd_errorf(err, SD_ERR_OOM, "chat: out of memory (or a message not UTF-8)");
        }
    }
    sd_chat_inputs in = sd_chat_default_inputs();
    in.messages = a;
    in.add_generation_prompt = add_generation_prompt;
    in.mode = SD_CHAT_JINJA;
    int rc = sd_chat_render(tmpl, &in, out, out_len, err);
    json_decref(a);
    return rc;
}

/* sd_chat_apply (sd_vocab.h): a template NAME, or a text a built-in formatter recognises, goes
 * to chat.c's formatters; other Jinja text to the Jinja engine with the messages as JSON. */
int sd_chat_apply(const char *tmpl_text, const sd_chat_msg *msgs, size_t n_msgs,
                  int add_generation_prompt, char **out, size_t *out_len, sd_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (tmpl_text && !sd_chat_template_is_name(tmpl_text) && !chat_builtin_recognises(tmpl_text) &&
        (strstr(tmpl_text, "{{") || strstr(tmpl_text, "{%")))
        return chat_apply_jinja_msgs(tmpl_text, msgs, n_msgs, add_generation_prompt, out, out_len,
                                     err);
    return chat_apply_builtin(tmpl_text, msgs, n_msgs, add_generation_prompt, out, out_len, err);
}
