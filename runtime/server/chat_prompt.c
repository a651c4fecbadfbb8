/* runtime/server/chat_prompt.c: a chat request's prompt text (server_impl.h,
 * srv_chat_text): the template rendered by sd_chat_render with llama-server's request
 * fields around it (add_generation_prompt, continue_final_message and the assistant
 * prefill, chat_template_kwargs, reasoning_effort, tools for /apply-template), and the
 * count of its tokens (/chat/completions/input_tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/server/server_impl.h"

static int bad(srv_reply *r, const char *field, const char *what) {
    srv_error(r, 400, "invalid_request_error", field, "%s %s", field, what);
    return -1;
}

int srv_chat_text(sd_server *s, json_t *o, int allow_tools, char **text, size_t *len,
                  srv_reply *r) {
    *text = NULL;
    *len = 0;
    const sd_vocab *v = sd_engine_vocab(s->e);
    json_t *m = json_object_get(o, "messages");
    if (!m) return bad(r, "messages", "is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return bad(r, "messages", "must be a non-empty array");
    const size_t n = json_array_size(m);
    /* developer is system (OpenAI's newer name) */
    json_t *msgs = json_array();
    if (!msgs) return srv_error(r, 500, "server_error", NULL, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(m, i), *role = json_object_get(e, "role");
        if (!json_is_object(e) || !json_is_string(role)) {
            json_decref(msgs);
            return bad(r, "messages", "must be objects with a string role");
        }
        json_t *c = json_copy(e);
        if (c && !strcmp(json_string_value(role), "developer"))
            json_object_set_new(c, "role", json_string("system"));
        if (!c || json_array_append_new(msgs, c)) {
            json_decref(msgs);
            return srv_error(r, 500, "server_error", NULL, "out of memory"), -1;
        }
    }
    sd_chat_inputs in = sd_chat_default_inputs();
    in.messages = msgs;
    in.mode = (sd_chat_mode)s->p.chat_mode;
    in.enable_thinking = s->p.enable_thinking;
    json_t *f = json_object_get(o, "add_generation_prompt");
    if (f && !json_is_boolean(f)) {
        json_decref(msgs);
        return bad(r, "add_generation_prompt", "must be a boolean");
    }
    if (f) in.add_generation_prompt = json_is_true(f);
    f = json_object_get(o, "continue_final_message");
    const char *last_role = json_string_value(json_object_get(json_array_get(msgs, n - 1), "role"));
    if (f && !json_is_boolean(f) && !json_is_null(f)) {
        json_decref(msgs);
        return bad(r, "continue_final_message", "must be a boolean");
    }
    if (f && json_is_true(f)) {
        in.continue_final = 1;
    } else if (!f && !strcmp(last_role, "assistant")) {
        /* llama-server's assistant prefill: a final assistant message is continued */
        const char *prev =
            n >= 2 ? json_string_value(json_object_get(json_array_get(msgs, n - 2), "role")) : "";
        if (!strcmp(prev, "assistant")) {
            json_decref(msgs);
            return bad(r, "messages", "cannot end with two or more assistant messages");
        }
        in.continue_final = 1;
        in.add_generation_prompt = 0;
    }
    if (in.continue_final && in.add_generation_prompt) {
        json_decref(msgs);
        return bad(r, "continue_final_message", "and add_generation_prompt cannot both be true");
    }
    f = json_object_get(o, "chat_template_kwargs");
    if (f && !json_is_object(f) && !json_is_null(f)) {
        json_decref(msgs);
        return bad(r, "chat_template_kwargs", "must be an object");
    }
    if (f && json_is_object(f)) {
        /* The variables the server sets are not the request's to replace (a kwarg named
         * messages would render other messages than those counted and cached). */
        static const char *const k_reserved[] = {
            "messages",   "add_generation_prompt", "bos_token", "eos_token", "tools", "datetime",
            "date_string"};
        for (size_t i = 0; i < sizeof k_reserved / sizeof k_reserved[0]; i++)
            if (json_object_get(f, k_reserved[i])) {
                json_decref(msgs);
                char field[96];
                snprintf(field, sizeof field, "chat_template_kwargs.%s", k_reserved[i]);
                srv_error(r, 400, "invalid_request_error", field,
                          "%s is set by the server (its own request field, or the model's), "
                          "not by chat_template_kwargs",
                          field);
                return -1;
            }
        json_t *et = json_object_get(f, "enable_thinking");
        if (et && !json_is_boolean(et)) {
            json_decref(msgs);
            return bad(r, "chat_template_kwargs.enable_thinking", "must be a boolean");
        }
        if (et) in.enable_thinking = json_is_true(et);
        in.extra = f;
    }
    f = json_object_get(o, "reasoning_effort");
    if (f && json_is_string(f) && !strcmp(json_string_value(f), "none")) in.enable_thinking = 0;
    f = json_object_get(o, "tools");
    if (allow_tools && f && !json_is_null(f)) {
        if (!json_is_array(f)) {
            json_decref(msgs);
            return bad(r, "tools", "must be an array");
        }
        in.tools = f;
    }
    const int32_t bos = sd_vocab_bos(v), eos = sd_vocab_eos(v);
    in.bos_token = bos >= 0 ? sd_vocab_token_text(v, bos) : "";
    in.eos_token = eos >= 0 ? sd_vocab_token_text(v, eos) : "";
    in.strip_bos = sd_vocab_add_bos(v);
    const char *tmpl = s->p.chat_template;
    if (!tmpl) tmpl = sd_vocab_chat_template(v);
    if (!tmpl) tmpl = "chatml"; /* a model without a template: chatml, as llama-server */
    sd_error err = {0};
    int rc = sd_chat_render(tmpl, &in, text, len, &err);
    json_decref(msgs);
    if (rc) {
        srv_error(r, rc == SD_ERR_OOM ? 500 : 400,
                  rc == SD_ERR_OOM ? "server_error" : "invalid_request_error", "messages",
                  "messages: %s", err.msg);
        return -1;
    }
    return 0;
}

void srv_input_tokens(sd_server *s, const char *body, size_t len, srv_reply *r) {
    json_t *o = srv_parse_object(body, len, r);
    if (!o) return;
    char *text = NULL;
    size_t tl = 0;
    if (srv_chat_text(s, o, 1, &text, &tl, r) == 0) {
        sd_prompt_spec ps;
        memset(&ps, 0, sizeof ps);
        ps.text = text;
        ps.len = tl;
        ps.special = 1;
        int32_t *ids = NULL, n = 0;
        sd_error err = {0};
        if (sd_prompt_tokenize(sd_engine_vocab(s->e), &ps, &ids, &n, &err))
            srv_error(r, 400, "invalid_request_error", "messages", "messages: %s", err.msg);
        else
            srv_json(r, 200, json_pack("{s:i}", "input_tokens", (int)n));
        free(ids);
    }
    free(text);
    json_decref(o);
}
