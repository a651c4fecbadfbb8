/* runtime/server/api.c: POST /v1/completions and /v1/chat/completions: the request body
 * (every field checked, errors naming it), the submission to the batcher, the engine's
 * callback filling the request's buffers, and the answer (one JSON object, or
 * server-sent events in the OpenAI format). */
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "runtime/grammar/sd_grammar.h"
#include "runtime/server/server_impl.h"

/* OpenAI's system_fingerprint in llama-server's form ("b" and the build): the version and
 * the backend that answered (the server runs on the CPU). */
#ifndef SD_SERVER_VERSION
#define SD_SERVER_VERSION "0"
#endif
#define SRV_FINGERPRINT "b" SD_SERVER_VERSION "-specdec-cpu"

/* ---- fields ---- */

/* The field key of o if present and not null, else NULL. */
static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int bad_field(srv_reply *r, const char *key, const char *what) {
    srv_error(r, 400, "invalid_request_error", key, "'%s' %s", key, what);
    return -1;
}

/* 0: absent (out untouched), 1: read, -1: a 400 reply was made. */
static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, srv_reply *r) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return bad_field(r, key, "must be an integer");
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        srv_error(r, 400, "invalid_request_error", key, "'%s' is %lld, expected %lld .. %lld", key,
                  (long long)x, (long long)lo, (long long)hi);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_reply *r) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return bad_field(r, key, "must be a number");
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        srv_error(r, 400, "invalid_request_error", key, "'%s' is %g, expected %g .. %g", key, x, lo,
                  hi);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_bool(json_t *o, const char *key, int *out, srv_reply *r) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad_field(r, key, "must be true or false");
    *out = json_is_true(v);
    return 1;
}

static int get_str(json_t *o, const char *key, const char **out, srv_reply *r) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_string(v)) return bad_field(r, key, "must be a string");
    *out = json_string_value(v);
    return 1;
}

/* Fields that ask for what this server does not do: refused by name, never ignored. */
static int refuse_unsupported(json_t *o, srv_reply *r) {
    json_t *v = field(o, "echo");
    if (v && !json_is_false(v)) return bad_field(r, "echo", "is not supported");
    v = field(o, "tools");
    if (v && (!json_is_array(v) || json_array_size(v) > 0))
        return bad_field(r, "tools", "is not supported");
    v = field(o, "best_of");
    if (v && !(json_is_integer(v) && json_integer_value(v) == 1))
        return bad_field(r, "best_of", "is not supported (only 1)");
    return 0;
}

/* A JSON Schema (the value v of field key) as GBNF into *gbnf (malloc'd); -1 with a 400
 * naming the field and the keyword. */
static int schema_gbnf(json_t *v, const char *key, char **gbnf, srv_reply *r) {
    if (!json_is_object(v) && !json_is_boolean(v))
        return bad_field(r, key, "must be a JSON Schema object");
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) {
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    sd_error err = {0};
    int rc = sd_json_schema_to_gbnf(text, strlen(text), gbnf, &err);
    free(text);
    if (rc == SD_ERR_OOM) {
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    if (rc) {
        srv_error(r, 400, "invalid_request_error", key, "'%s': %s", key, err.msg);
        return -1;
    }
    return 0;
}

/* Structured output: llama-server's "grammar" (GBNF) and "json_schema", OpenAI's
 * "response_format" (text, json_object, json_schema; llama-server's json_object with a
 * "schema"). At most one of them; the grammar is parsed here, so a bad one is a 400
 * naming the field. *gbnf: malloc'd GBNF, or NULL for unconstrained text. */
static int parse_structured(json_t *o, char **gbnf, srv_reply *r) {
    *gbnf = NULL;
    json_t *gr = field(o, "grammar"), *js = field(o, "json_schema"),
           *rf = field(o, "response_format");
    if (gr && json_is_string(gr) && !json_string_length(gr))
        gr = NULL; /* "": none (llama-server) */
    const char *key = NULL;
    if (rf) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!t || !json_is_string(t))
            return bad_field(
                r, "response_format",
                "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
        const char *ty = json_string_value(t);
        if (!strcmp(ty, "text")) {
            rf = NULL;
        } else if (strcmp(ty, "json_object") && strcmp(ty, "json_schema")) {
            return bad_field(r, "response_format.type", "must be text, json_object or json_schema");
        }
    }
    if (!!gr + !!js + !!rf > 1)
        return bad_field(r, gr ? "grammar" : "json_schema",
                         "goes alone: give one of grammar, json_schema and response_format");
    if (gr) {
        if (!json_is_string(gr)) return bad_field(r, "grammar", "must be a string (GBNF)");
        *gbnf = strdup(json_string_value(gr));
        key = "grammar";
    } else if (js) {
        if (schema_gbnf(js, "json_schema", gbnf, r)) return -1;
        key = "json_schema";
    } else if (rf) {
        const char *ty = json_string_value(json_object_get(rf, "type"));
        json_t *sc = NULL;
        if (!strcmp(ty, "json_schema")) {
            json_t *w = json_object_get(rf, "json_schema");
            if (!json_is_object(w))
                return bad_field(r, "response_format.json_schema",
                                 "must be an object with a \"schema\"");
            json_t *st = json_object_get(w, "strict");
            if (st && !json_is_null(st) && !json_is_boolean(st))
                return bad_field(r, "response_format.json_schema.strict", "must be true or false");
            sc = json_object_get(w, "schema");
            if (!sc) return bad_field(r, "response_format.json_schema.schema", "is required");
        } else {
            sc = field(rf, "schema"); /* llama-server: json_object with a schema */
        }
        key = "response_format";
        if (sc) {
            if (schema_gbnf(sc, "response_format", gbnf, r)) return -1;
        } else {
            *gbnf = strdup(sd_grammar_json_object);
        }
    } else {
        return 0;
    }
    if (!*gbnf) {
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    sd_grammar *g = NULL;
    sd_error err = {0};
    int rc = sd_grammar_parse(*gbnf, strlen(*gbnf), NULL, &g, &err);
    sd_grammar_free(g);
    if (rc) {
        free(*gbnf);
        *gbnf = NULL;
        if (rc == SD_ERR_OOM)
            srv_error(r, 500, "server_error", NULL, "out of memory");
        else
            srv_error(r, 400, "invalid_request_error", key, "'%s': %s", key, err.msg);
        return -1;
    }
    return 0;
}

/* What a request asks for, parsed. */
typedef struct gen_req {
    sd_gen_params gp;
    int has_max;
    int fill; /* llama-server's n_predict: a length beyond the context's room is cut to it
                 (OpenAI's max_tokens: a 400) */
    const char *stop[SD_MAX_STOP_STRINGS];
    int32_t n_stop;
    int32_t n;
    int stream, include_usage;
    int progress;        /* llama-server's return_progress (streams only) */
    sd_logit_bias *bias; /* gp.samp's logit biases (logprobs.c), freed after submission */
    char *grammar;       /* gp.grammar (GBNF, malloc'd), freed after submission */
} gen_req;

static int parse_common(sd_server *s, json_t *o, int chat, gen_req *q, srv_reply *r) {
    memset(q, 0, sizeof *q);
    q->gp = s->p.gen;
    q->n = 1;
    const char *model = NULL;
    if (get_str(o, "model", &model, r) < 0) return -1;
    int64_t i = 0;
    int got = get_int(o, "max_tokens", 1, INT32_MAX, &i, r);
    if (got == 0 && chat) got = get_int(o, "max_completion_tokens", 1, INT32_MAX, &i, r);
    if (got == 0) { /* llama-server's: -1 = until the context is full */
        got = get_int(o, "n_predict", -1, INT32_MAX, &i, r);
        if (got > 0) q->fill = 1;
        if (got > 0 && (i == -1 || i == 0)) i = INT32_MAX;
    }
    if (got < 0) return -1;
    if (got) {
        q->gp.n_predict = (int32_t)i;
        q->has_max = 1;
    }
    double x;
    if ((got = get_num(o, "temperature", 0, 100, &x, r)) < 0) return -1;
    if (got) q->gp.samp.temp = (float)x;
    if ((got = get_num(o, "top_p", 0, 1, &x, r)) < 0) return -1;
    if (got) q->gp.samp.top_p = (float)x;
    if ((got = get_int(o, "top_k", 0, INT32_MAX, &i, r)) < 0) return -1;
    if (got) q->gp.samp.top_k = (int32_t)i;
    if ((got = get_num(o, "min_p", 0, 1, &x, r)) < 0) return -1;
    if (got) q->gp.samp.min_p = (float)x;
    /* Penalties (OpenAI's presence / frequency, llama-server's repeat_penalty and
     * repeat_last_n) over the last repeat_last_n tokens. */
    if ((got = get_num(o, "presence_penalty", -2, 2, &x, r)) < 0) return -1;
    if (got) q->gp.samp.presence_penalty = (float)x;
    if ((got = get_num(o, "frequency_penalty", -2, 2, &x, r)) < 0) return -1;
    if (got) q->gp.samp.freq_penalty = (float)x;
    if ((got = get_num(o, "repeat_penalty", 0, 100, &x, r)) < 0) return -1;
    if (got) q->gp.samp.repeat_penalty = (float)x;
    if ((got = get_int(o, "repeat_last_n", 0, SD_PENALTY_MAX_N, &i, r)) < 0) return -1;
    if (got) q->gp.samp.repeat_last_n = (int32_t)i;
    if ((got = get_int(o, "seed", INT64_MIN, INT64_MAX, &i, r)) < 0) return -1;
    if (got) q->gp.seed = (uint64_t)i;
    if ((got = get_int(o, "n", 1, SD_MAX_CHOICES, &i, r)) < 0) return -1;
    if (got) q->n = (int32_t)i;
    if (get_bool(o, "stream", &q->stream, r) < 0) return -1;
    json_t *so = field(o, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad_field(r, "stream_options", "must be an object");
        if (get_bool(so, "include_usage", &q->include_usage, r) < 0) return -1;
    }
    if (get_bool(o, "return_progress", &q->progress, r) < 0) return -1;
    int ig = 0;
    if ((got = get_bool(o, "ignore_eos", &ig, r)) < 0) return -1;
    if (got) q->gp.ignore_eos = ig;
    json_t *stop = field(o, "stop");
    if (stop) {
        if (json_is_string(stop)) {
            q->stop[q->n_stop++] = json_string_value(stop);
        } else if (json_is_array(stop)) {
            if (json_array_size(stop) > SD_MAX_STOP_STRINGS)
                return bad_field(r, "stop", "has more than 8 strings");
            size_t k;
            json_t *e;
            json_array_foreach(stop, k, e) {
                if (!json_is_string(e)) return bad_field(r, "stop", "must hold strings");
                q->stop[q->n_stop++] = json_string_value(e);
            }
        } else {
            return bad_field(r, "stop", "must be a string or an array of strings");
        }
        for (int32_t k = 0; k < q->n_stop; k++)
            if (!q->stop[k][0]) return bad_field(r, "stop", "must not hold an empty string");
    }
    /* specdec's own: the draft of this request. */
    if ((got = get_int(o, "draft_max", 0, SD_MAX_DRAFT, &i, r)) < 0) return -1;
    if (got) q->gp.n_draft = (int32_t)i;
    const char *t = NULL;
    if (get_str(o, "draft_type", &t, r) < 0) return -1;
    if (t && sd_draft_type_parse(t, &q->gp.draft_type) != 0)
        return bad_field(r, "draft_type",
                         "must be one of none, llm, ngram, ngram+llm, suffix, suffix+llm");
    t = NULL;
    if (get_str(o, "draft_policy", &t, r) < 0) return -1;
    if (t && sd_k_policy_parse(t, &q->gp.k_policy) != 0)
        return bad_field(r, "draft_policy", "must be fixed or adaptive");
    if (srv_logprobs_parse(o, chat, sd_engine_vocab(s->e), &q->gp, &q->bias, r)) return -1;
    if (refuse_unsupported(o, r) || parse_structured(o, &q->grammar, r)) return -1;
    q->gp.grammar = q->grammar;
    return 0;
}

/* Chat messages: [{role, content: string | [{type: "text", text}] | null}]. *msgs and the
 * texts it points to are malloc'd into *buf (caller frees both). */
int srv_parse_messages(json_t *o, sd_chat_msg **msgs, size_t *n, char ***texts, srv_reply *r) {
    *msgs = NULL;
    *texts = NULL;
    *n = 0;
    json_t *m = json_object_get(o, "messages");
    if (!m) return bad_field(r, "messages", "is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return bad_field(r, "messages", "must be a non-empty array");
    const size_t nm = json_array_size(m);
    *msgs = calloc(nm, sizeof **msgs);
    *texts = calloc(nm, sizeof **texts);
    if (!*msgs || !*texts) {
        srv_error(r, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < nm; i++) {
        json_t *e = json_array_get(m, i);
        char key[48];
        snprintf(key, sizeof key, "messages[%zu]", i);
        if (!json_is_object(e)) return bad_field(r, key, "must be an object");
        json_t *role = json_object_get(e, "role"), *content = json_object_get(e, "content");
        snprintf(key, sizeof key, "messages[%zu].role", i);
        if (!role || !json_is_string(role)) return bad_field(r, key, "must be a string");
        const char *rs = json_string_value(role);
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return bad_field(r, key, "must be system, user or assistant");
        snprintf(key, sizeof key, "messages[%zu].content", i);
        size_t len = 0;
        char *text = NULL;
        if (!content || json_is_null(content)) {
            text = strdup("");
        } else if (json_is_string(content)) {
            text = strdup(json_string_value(content));
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *ty = json_is_object(part) ? json_object_get(part, "type") : NULL;
                json_t *tx = json_is_object(part) ? json_object_get(part, "text") : NULL;
                if (!ty || !json_is_string(ty) || strcmp(json_string_value(ty), "text") || !tx ||
                    !json_is_string(tx)) {
                    free(text);
                    return bad_field(r, key, "parts must be {\"type\": \"text\", \"text\": ...}");
                }
                /* Parts are joined with a newline (as llama-server), not glued. */
                const size_t add = strlen(json_string_value(tx)), sep = k > 0;
                char *nt = realloc(text, len + sep + add + 1);
                if (!nt) {
                    free(text);
                    srv_error(r, 500, "server_error", NULL, "out of memory");
                    return -1;
                }
                text = nt;
                if (sep) text[len++] = '\n';
                memcpy(text + len, json_string_value(tx), add + 1);
                len += add;
            }
            if (!text) text = strdup("");
        } else {
            return bad_field(r, key, "must be a string or an array of text parts");
        }
        if (!text) {
            srv_error(r, 500, "server_error", NULL, "out of memory");
            return -1;
        }
        (*texts)[i] = text;
        (*msgs)[i].role = rs;
        (*msgs)[i].content = text;
        *n = i + 1;
    }
    return 0;
}

/* One prompt of a completion: a string, one string in an array, or token ids. */
static int completion_prompt(sd_server *s, json_t *p, int32_t **ids, int32_t *n, srv_reply *r) {
    if (json_is_object(p)) { /* llama-server's {"prompt_string", "multimodal_data"} */
        if (field(p, "multimodal_data"))
            return bad_field(r, "prompt.multimodal_data", "is not supported (no media input)");
        p = json_object_get(p, "prompt_string");
        if (!p || !json_is_string(p))
            return bad_field(r, "prompt.prompt_string", "must be a string");
    }
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    const sd_vocab *v = sd_engine_vocab(s->e);
    if (json_is_string(p)) {
        sd_prompt_spec ps;
        memset(&ps, 0, sizeof ps);
        ps.text = json_string_value(p);
        ps.len = json_string_length(p);
        ps.special = 1; /* as llama-server: control-token texts in a prompt are tokens */
        sd_error err = {0};
        if (sd_prompt_tokenize(v, &ps, ids, n, &err)) {
            srv_error(r, 400, "invalid_request_error", "prompt", "prompt: %s", err.msg);
            return -1;
        }
        return 0;
    }
    int mixed = 0; /* token ids and strings in one sequence (llama-server's) */
    for (size_t k = 0; json_is_array(p) && k < json_array_size(p); k++)
        mixed |= json_is_string(json_array_get(p, k));
    if (mixed && json_is_integer(json_array_get(p, 0))) {
        const int32_t nv = sd_vocab_n_tokens(v);
        size_t len = 0, cap = 0;
        char *buf = NULL; /* int32 ids */
        for (size_t k = 0; k < json_array_size(p); k++) {
            json_t *e = json_array_get(p, k);
            int32_t one, *part = &one, n_part = 1, *got = NULL;
            if (json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < nv) {
                one = (int32_t)json_integer_value(e);
            } else if (json_is_string(e)) { /* no BOS inside the sequence */
                sd_prompt_spec ps;
                memset(&ps, 0, sizeof ps);
                ps.text = json_string_value(e);
                ps.len = json_string_length(e);
                ps.special = 1;
                ps.no_bos = 1;
                sd_error err = {0};
                if (sd_prompt_tokenize(v, &ps, &got, &n_part, &err)) {
                    free(buf);
                    srv_error(r, 400, "invalid_request_error", "prompt", "prompt: %s", err.msg);
                    return -1;
                }
                part = got;
            } else {
                free(buf);
                srv_error(r, 400, "invalid_request_error", "prompt",
                          "'prompt[%zu]' must be a token id in 0 .. %d or a string", k, nv - 1);
                return -1;
            }
            const int bad = sd_buf_append(&buf, &len, &cap, part, (size_t)n_part * sizeof *part);
            free(got);
            if (bad) {
                free(buf);
                srv_error(r, 500, "server_error", NULL, "out of memory");
                return -1;
            }
        }
        *ids = (int32_t *)(void *)buf;
        *n = (int32_t)(len / sizeof(int32_t));
        return 0;
    }
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        const size_t np = json_array_size(p);
        const int32_t nv = sd_vocab_n_tokens(v);
        *ids = malloc(np * sizeof **ids);
        if (!*ids) {
            srv_error(r, 500, "server_error", NULL, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < np; i++) {
            json_t *e = json_array_get(p, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= nv) {
                srv_error(r, 400, "invalid_request_error", "prompt",
                          "'prompt[%zu]' must be a token id in 0 .. %d", i, nv - 1);
                free(*ids);
                *ids = NULL;
                return -1;
            }
            (*ids)[i] = (int32_t)json_integer_value(e);
        }
        *n = (int32_t)np;
        return 0;
    }
    return bad_field(r, "prompt", "must be a string, one string in an array, or token ids");
}

/* The prompts of a completion: one (as completion_prompt), or a list of strings or token
 * id lists (one choice per prompt, as llama-server). *n_p counts the entries of pids
 * filled (for the caller to free, on failure too). */
static int completion_prompts(sd_server *s, json_t *o, int32_t **pids, int32_t *pn, int32_t *n_p,
                              srv_reply *r) {
    json_t *p = json_object_get(o, "prompt");
    if (!p) return bad_field(r, "prompt", "is required");
    if (!json_is_array(p) || json_array_size(p) < 2 || json_is_integer(json_array_get(p, 0))) {
        *n_p = 1;
        return completion_prompt(s, p, &pids[0], &pn[0], r);
    }
    if (json_array_size(p) > SD_MAX_CHOICES)
        return bad_field(r, "prompt", "holds more than 16 prompts");
    for (size_t k = 0; k < json_array_size(p); k++) {
        json_t *e = json_array_get(p, k);
        if (!json_is_string(e) && !json_is_object(e) &&
            !(json_is_array(e) && json_array_size(e) > 0))
            return bad_field(r, "prompt", "must be a string, token ids, or a list of those");
        *n_p = (int32_t)k + 1;
        if (completion_prompt(s, e, &pids[k], &pn[k], r)) return -1;
    }
    return 0;
}

/* ---- the record between the HTTP thread and the engine ---- */

void srv_gen_ref(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    g->refs++;
    pthread_mutex_unlock(&g->mu);
}

void srv_gen_closed(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    g->fd = -1;
    pthread_mutex_unlock(&g->mu);
}

void srv_gen_unref(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    const int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (!last) return;
    for (int32_t i = 0; i < g->n_choices; i++) {
        free(g->ch[i].text);
        free(g->ch[i].toks);
        free(g->ch[i].lp);
    }
    free(g->prompt0);
    json_decref(g->fields);
    json_decref(g->bias_json);
    free(g->prompt_text);
    free(g->sse);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* OpenAI's reasons, and vLLM's "abort" for a generation the server cut (the shutdown
 * grace ran out): neither a stop nor the budget. */
static const char *finish_reason(sd_stop_reason st) {
    switch (st) {
    case SD_STOP_MAX_TOKENS:
    case SD_STOP_CONTEXT:
        return "length";
    case SD_STOP_CANCEL:
        return "abort";
    case SD_STOP_NONE:
        return "error";
    default:
        return "stop";
    }
}

static double round4(double x) {
    return isfinite(x) ? round(x * 1e4) / 1e4 : 0.0;
}

/* specdec's statistics of choices [i0, i1). */
static json_t *spec_stats(const srv_gen *g, int32_t i0, int32_t i1) {
    int64_t drafted = 0, accepted = 0, passes = 0, gen = 0, drafts = 0;
    int64_t at[SD_MAX_DRAFT] = {0};
    double ttft = 0, tps = 0;
    for (int32_t i = i0; i < i1; i++) {
        const sd_gen_stats *st = &g->ch[i].st;
        drafted += st->n_drafted;
        accepted += st->n_accepted;
        passes += st->n_target_passes;
        gen += st->n_generated;
        for (int k = 1; k <= SD_MAX_DRAFT; k++)
            drafts += st->k_hist[k];
        for (int k = 0; k < SD_MAX_DRAFT; k++)
            at[k] += st->accepted_at[k];
        if (i == i0 || st->ttft_ms < ttft) ttft = st->ttft_ms;
        tps += sd_stats_tokens_per_s(st);
    }
    /* accepted_per_pos: accepted at draft position 0, 1, ... up to the last nonzero. */
    int n_at = SD_MAX_DRAFT;
    while (n_at > 0 && at[n_at - 1] == 0)
        n_at--;
    json_t *per_pos = json_array();
    for (int k = 0; k < n_at; k++)
        json_array_append_new(per_pos, json_integer((json_int_t)at[k]));
    /* Rounded to what a reader uses (4 decimals). */
    return json_pack("{s:I,s:I,s:I,s:f,s:I,s:f,s:f,s:f,s:I,s:o}", "tokens", (json_int_t)gen,
                     "drafted", (json_int_t)drafted, "accepted", (json_int_t)accepted,
                     "acceptance_rate", round4(drafted ? (double)accepted / (double)drafted : 0.0),
                     "target_passes", (json_int_t)passes, "tokens_per_pass",
                     round4(passes ? (double)gen / passes : 0.0), "tokens_per_s", round4(tps),
                     "ttft_ms", round4(ttft), "drafts", (json_int_t)drafts, "accepted_per_pos",
                     per_pos);
}

static json_t *usage(const srv_gen *g) {
    int64_t c = 0;
    for (int32_t i = 0; i < g->n_choices; i++)
        c += g->ch[i].st.n_generated;
    /* cached_tokens: the prompt positions the prefix cache gave (the first choice's; the
     * others share its prompt). */
    return json_pack("{s:i,s:I,s:I,s:{s:i}}", "prompt_tokens", (int)g->n_prompt,
                     "completion_tokens", (json_int_t)c, "total_tokens",
                     (json_int_t)(c + g->n_prompt), "prompt_tokens_details", "cached_tokens",
                     (int)g->ch[0].st.n_prompt_cached);
}

/* A string of n bytes (the engine gives UTF-8; anything else becomes an empty string). */
static json_t *jstr(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    return j ? j : json_string("");
}

/* Append one server-sent event holding j (a reference taken). Under g->mu. */
static void sse_event(srv_gen *g, json_t *j) {
    char *t = j ? json_dumps(j, SRV_JSON_FLAGS) : NULL;
    json_decref(j);
    if (!t || sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, "data: ", 6) ||
        sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, t, strlen(t)) ||
        sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, "\n\n", 2))
        g->oom = 1;
    free(t);
}

static json_t *chunk_head(const srv_gen *g) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", g->cmpl_id, "object",
                     g->chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)g->created, "model", g->srv->model_name, "system_fingerprint",
                     SRV_FINGERPRINT);
}

/* The stream's chunk for choice i: a text delta (with its tokens' logprobs lp, a
 * reference taken, or NULL), or the end of the choice. */
static void sse_choice(srv_gen *g, int32_t i, const char *text, size_t len, int done, json_t *lp) {
    srv_choice *c = &g->ch[i];
    if (g->chat && !c->role_sent) {
        /* The role first, alone (content null), as OpenAI's and llama-server's streams. */
        json_t *j0 = chunk_head(g);
        json_object_set_new(j0, "choices",
                            json_pack("[{s:i,s:{s:s,s:n},s:n,s:n}]", "index", (int)i, "delta",
                                      "role", "assistant", "content", "logprobs", "finish_reason"));
        sse_event(g, j0);
        c->role_sent = 1;
    }
    json_t *j = chunk_head(g), *ch = json_object();
    json_object_set_new(ch, "index", json_integer(i));
    if (g->chat) {
        json_t *delta = json_object();
        if (!c->role_sent) {
            json_object_set_new(delta, "role", json_string("assistant"));
            c->role_sent = 1;
        }
        if (len || !done) json_object_set_new(delta, "content", jstr(text, len));
        json_object_set_new(ch, "delta", delta);
    } else {
        json_object_set_new(ch, "text", jstr(text, len));
    }
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason",
                        done ? json_string(finish_reason(c->stop)) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    if (done) json_object_set_new(j, "speculative", spec_stats(g, i, i + 1));
    sse_event(g, j);
}

/* Resume the connection if it waits for news (under g->mu). */
static void wake(srv_gen *g) {
    if (!g->suspended) return;
    g->suspended = 0;
    MHD_resume_connection(g->conn);
}

/* The interim answer that probes a non-streamed request's connection: a 1xx an HTTP/1.1
 * client must read past before the final answer (RFC 9110, 15.2). */
static const char k_probe[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* On an event of g (under g->mu, !g->cancelled): a reset peer cancels. An EOF alone cannot
 * tell a client that closed from one that half-closed (shutdown(SHUT_WR)) and waits for its
 * answer: a non-streamed HTTP/1.1 request's connection (suspended, or its handler still
 * running: no other writer) is sent k_probe then, as much as the socket takes at each event
 * until all of it is out (the rest, if any, before the answer: srv_generate_finish). A
 * closed client's system answers those bytes with a reset, found at a later event; a
 * half-closed client reads past them to its answer. A stream needs no probe: its events are
 * those bytes. */
static void peer_check(srv_gen *g) {
    const int st = srv_peer_state(g->fd);
    if (st == SRV_PEER_RESET) {
        g->cancelled = 1;
    } else if (st == SRV_PEER_EOF && g->probe_ok && g->probe_sent < sizeof k_probe - 1) {
        if (srv_send_rest(g->fd, k_probe, sizeof k_probe - 1, &g->probe_sent, 0) < 0)
            g->cancelled = 1; /* the peer is gone already */
    }
}

/* llama-server's prompt_progress chunk of batcher request sub: total, cache and processed
 * positions of its prompt, time_ms since the first (with timings: the prompt's so far, no
 * token predicted yet). Under g->mu. */
static void sse_progress(srv_gen *g, srv_sub *sub, int32_t processed, const sd_gen_stats *st) {
    const double now = sd_time_ms();
    if (!sub->progress_n) {
        sub->t_progress0 = now;
        sub->progress_cache = st->n_prompt_cached;
    }
    sub->progress_n++;
    const int32_t total = g->ch[sub->base].n_prompt, cache = sub->progress_cache;
    const double ms = now - sub->t_progress0;
    const int32_t done = processed - cache;
    json_t *pp = json_pack("{s:i,s:i,s:i,s:f}", "total", (int)total, "cache", (int)cache,
                           "processed", (int)processed, "time_ms", ms);
    json_t *j;
    if (g->native) {
        j = json_pack("{s:i,s:s,s:[],s:b,s:i}", "index", (int)sub->base, "content", "", "tokens",
                      "stop", 0, "id_slot", -1);
        json_object_set_new(j, "timings",
                            json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f}", "cache_n",
                                      (int)cache, "prompt_n", (int)done, "prompt_ms", ms,
                                      "prompt_per_token_ms", done > 0 ? ms / done : 0.0,
                                      "prompt_per_second", ms > 0 ? 1e3 * done / ms : 0.0,
                                      "predicted_n", 0, "predicted_ms", 0.0,
                                      "predicted_per_token_ms", 0.0, "predicted_per_second", 0.0));
    } else {
        j = chunk_head(g);
        json_object_set_new(j, "choices", json_array());
    }
    json_object_set_new(j, "prompt_progress", pp);
    sse_event(g, j);
}

/* The engine's callback (the stepping thread). */
static int on_event(void *user, const sd_req_event *ev_sub) {
    srv_sub *sub = user;
    srv_gen *g = sub->g;
    sd_req_event e = *ev_sub; /* the choice's index among all the request's choices */
    e.index += sub->base;
    const sd_req_event *ev = &e;
    pthread_mutex_lock(&g->mu);
    if (ev->progress || (g->progress && !sub->progress_end && ev->n_tokens > 0)) {
        /* a prompt chunk went through; or the first token: the whole prompt did */
        const int end = !ev->progress;
        if (end) sub->progress_end = 1;
        sse_progress(g, sub, end ? g->ch[sub->base].n_prompt : ev->n_processed, ev->stats);
        if (ev->progress) {
            const int cancel = g->cancelled;
            wake(g);
            pthread_mutex_unlock(&g->mu);
            return cancel;
        }
    }
    srv_choice *c = &g->ch[ev->index];
    /* a context shift (the batcher's, gen.context_shift): llama-server's "truncated" */
    if (ev->n_ctx_shifts > 0) c->ctx_limited = 1;
    if (ev->len && sd_buf_append(&c->text, &c->len, &c->cap, ev->text, ev->len)) g->oom = 1;
    if (ev->n_tokens > 0 && sd_buf_append(&c->toks, &c->toks_len, &c->toks_cap, ev->tokens,
                                          (size_t)ev->n_tokens * sizeof *ev->tokens))
        g->oom = 1;
    json_t *lp = NULL; /* this event's tokens' logprobs */
    if (g->logprobs && ev->logprobs && ev->n_tokens > 0) {
        if (g->stream)
            lp = srv_logprobs_json(sd_engine_vocab(g->srv->e), g->chat, ev->logprobs, ev->n_tokens,
                                   &c->text_offset);
        else if (srv_logprobs_add(c, ev->logprobs, ev->n_tokens))
            g->oom = 1;
    }
    if (ev->done) {
        c->done = 1;
        c->stop = ev->stop;
        c->st = *ev->stats;
        if (ev->index == 0 && g->prompt0 && ev->n_ctx_shifts == 0)
            srv_slot_record(g->srv, g, &c->st);
        g->n_done++;
        sub->n_done++;
        srv_count_done(g->srv, &c->st);
    }
    if (g->stream && g->native) {
        json_decref(lp); /* llama-server's stream carries n_probs in its own shape */
        srv_native_event(g, ev);
    } else if (g->stream) {
        if (ev->len || lp) sse_choice(g, ev->index, ev->text, ev->len, 0, lp);
        if (ev->done) sse_choice(g, ev->index, NULL, 0, 1, NULL);
    }
    const int all = g->n_done == g->n_choices;
    if (all && g->stream && !g->native) {
        if (g->include_usage) {
            json_t *j = chunk_head(g);
            json_object_set_new(j, "choices", json_array());
            json_object_set_new(j, "usage", usage(g));
            /* llama-server's timings beside the usage (one choice: its own) */
            if (g->n_choices == 1) json_object_set_new(j, "timings", srv_native_timings(g, 0));
            sse_event(g, j);
        }
        if (sd_buf_append(&g->sse, &g->sse_len, &g->sse_cap, "data: [DONE]\n\n", 14)) g->oom = 1;
    }
    /* A client that reset the connection (suspended: nobody else looks) cancels; the done
     * events that follow wake the connection. */
    if (!all && !g->cancelled) peer_check(g);
    if (g->oom && !all) g->cancelled = 1;
    const int cancel = g->cancelled, sub_done = ev->done && sub->n_done == sub->n;
    /* before the wake: a client that reads /metrics after its answer sees it done */
    if (sub_done) atomic_fetch_sub(&g->srv->n_inflight, 1);
    if (all || g->stream) wake(g);
    pthread_mutex_unlock(&g->mu);
    if (sub_done) srv_gen_unref(g); /* this batcher request's reference */
    return cancel;
}

static void cancel_gen(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    const int pending = g->n_done < g->n_choices && !g->cancelled;
    g->cancelled = 1;
    int64_t ids[SD_MAX_CHOICES];
    const int32_t n = g->n_sub;
    for (int32_t k = 0; k < n; k++)
        ids[k] = g->sub[k].id;
    pthread_mutex_unlock(&g->mu);
    for (int32_t k = 0; pending && k < n; k++)
        if (ids[k]) sd_batcher_cancel(g->srv->b, ids[k]);
}

ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_gen *g = cls;
    pthread_mutex_lock(&g->mu);
    if (g->sse_off < g->sse_len) {
        size_t n = g->sse_len - g->sse_off;
        if (n > max) n = max;
        memcpy(buf, g->sse + g->sse_off, n);
        g->sse_off += n;
        if (g->sse_off == g->sse_len) g->sse_off = g->sse_len = 0;
        pthread_mutex_unlock(&g->mu);
        return (ssize_t)n;
    }
    if (g->n_done == g->n_choices) {
        pthread_mutex_unlock(&g->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (g->oom) {
        pthread_mutex_unlock(&g->mu);
        cancel_gen(g);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    /* Nothing to send yet: off the polling threads until the callback has news. */
    g->suspended = 1;
    MHD_suspend_connection(g->conn);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void srv_stream_free(void *cls) {
    srv_gen *g = cls;
    cancel_gen(g); /* a no-op when the request is complete */
    srv_gen_unref(g);
}

/* The answer of a finished non-streaming request. */
static void final_json(srv_gen *g, srv_reply *r) {
    json_t *choices = json_array();
    for (int32_t i = 0; i < g->n_choices; i++) {
        const srv_choice *c = &g->ch[i];
        json_t *ch;
        if (g->chat)
            ch = json_pack("{s:i,s:{s:s,s:o},s:n,s:s}", "index", (int)i, "message", "role",
                           "assistant", "content", jstr(c->text, c->len), "logprobs",
                           "finish_reason", finish_reason(c->stop));
        else
            ch = json_pack("{s:i,s:o,s:n,s:s}", "index", (int)i, "text", jstr(c->text, c->len),
                           "logprobs", "finish_reason", finish_reason(c->stop));
        size_t offset = 0;
        if (g->logprobs && ch)
            json_object_set_new(
                ch, "logprobs",
                srv_logprobs_json(sd_engine_vocab(g->srv->e), g->chat, c->lp, c->n_lp, &offset));
        json_array_append_new(choices, ch);
    }
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o}", "id", g->cmpl_id, "object",
                          g->chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)g->created, "model", g->srv->model_name, "system_fingerprint",
                          SRV_FINGERPRINT, "choices", choices, "usage", usage(g), "speculative",
                          spec_stats(g, 0, g->n_choices));
    if (j && g->verbose && g->prompt_text)
        json_object_set_new(j, "__verbose",
                            json_pack("{s:o,s:o}", "prompt",
                                      jstr(g->prompt_text, strlen(g->prompt_text)), "content",
                                      jstr(g->ch[0].text, g->ch[0].len)));
    srv_json(r, 200, j);
}

/* How long the end of a probe cut short (a full socket buffer) may wait for room before the
 * answer: a client that reads its answer makes room at once. */
#define SRV_PROBE_WAIT_MS 2000

void srv_generate_finish(srv_gen *g, srv_reply *r) {
    pthread_mutex_lock(&g->mu);
    const int complete = g->n_done == g->n_choices, oom = g->oom, cancelled = g->cancelled;
    size_t probe_sent = g->probe_sent;
    pthread_mutex_unlock(&g->mu);
    /* An answer after part of the probe would reach the client garbled: the rest of the
     * probe goes first, or the connection closes without an answer. */
    if (probe_sent > 0 &&
        srv_send_rest(g->fd, k_probe, sizeof k_probe - 1, &probe_sent, SRV_PROBE_WAIT_MS)) {
        cancel_gen(g);
        r->drop = 1;
        srv_gen_unref(g);
        return;
    }
    int failed = 0;
    for (int32_t i = 0; complete && i < g->n_choices; i++)
        failed |= g->ch[i].stop == SD_STOP_NONE;
    if (!complete || cancelled) {
        cancel_gen(g); /* the client left */
        srv_error(r, 499, "server_error", NULL, "client closed the connection");
    } else if (oom) {
        srv_error(r, 500, "server_error", NULL, "out of memory building the answer");
    } else if (failed) {
        srv_error(r, 500, "server_error", NULL,
                  "generation failed (the server log names the error)");
    } else if (g->native) {
        srv_native_final(g, r);
    } else {
        final_json(g, r);
    }
    srv_gen_unref(g);
}

void srv_generate(sd_server *s, srv_kind kind, const char *body, size_t len,
                  struct MHD_Connection *c, int fd, srv_reply *r) {
    const int chat = kind == SRV_CHAT;
    if (atomic_load(&s->stopping)) {
        srv_error(r, 503, "server_error", NULL, "the server is shutting down");
        r->retry_after = "5";
        return;
    }
    json_t *o = srv_parse_object(body, len, r);
    if (!o) return;
    gen_req q;
    memset(&q, 0, sizeof q);
    int32_t *ids = NULL, n_ids = 0;
    /* The prompts (one, or a completion's list): their ids, lengths, settings. */
    int32_t *pids[SD_MAX_CHOICES] = {0}, pn[SD_MAX_CHOICES] = {0}, n_p = 0;
    sd_gen_params gps[SD_MAX_CHOICES];
    int limited[SD_MAX_CHOICES] = {0};
    sd_chat_msg *msgs = NULL;
    char **texts = NULL;
    size_t n_msgs = 0;
    srv_gen *g = NULL;
    int return_tokens = 0, post_probs = 0;
    json_t *fields = NULL;
    if (parse_common(s, o, chat, &q, r)) goto done;
    if (kind == SRV_NATIVE && srv_native_parse(o, &q.gp, &return_tokens, &post_probs, &fields, r))
        goto done;
    if (chat) {
        if (srv_parse_messages(o, &msgs, &n_msgs, &texts, r)) goto done;
        /* The template's text (chat_prompt.c), tokenized with its control tokens. */
        char *chat_text = NULL;
        size_t chat_len = 0;
        if (srv_chat_text(s, o, 0, &chat_text, &chat_len, r)) goto done;
        sd_prompt_spec ps;
        memset(&ps, 0, sizeof ps);
        ps.text = chat_text;
        ps.len = chat_len;
        ps.special = 1;
        sd_error err = {0};
        const int trc = sd_prompt_tokenize(sd_engine_vocab(s->e), &ps, &ids, &n_ids, &err);
        free(chat_text);
        if (trc) {
            srv_error(r, 400, "invalid_request_error", "messages", "messages: %s", err.msg);
            goto done;
        }
        pids[0] = ids;
        pn[0] = n_ids;
        ids = NULL;
        n_p = 1;
    } else if (completion_prompts(s, o, pids, pn, &n_p, r)) {
        goto done;
    }
    if (n_p * q.n > SD_MAX_CHOICES) {
        srv_error(r, 400, "invalid_request_error", "n",
                  "%d prompts x n (%d) = %d choices: at most %d", n_p, q.n, n_p * q.n,
                  SD_MAX_CHOICES);
        goto done;
    }
    /* --context-shift: llama-server's n_keep (-1: the whole prompt), one choice (the
     * batcher shifts it: gen.context_shift) */
    int64_t n_keep = 0;
    if (get_int(o, "n_keep", -1, INT32_MAX, &n_keep, r) < 0) goto done;
    const int shift = s->p.context_shift && q.n == 1;
    const int32_t n_ctx = sd_batcher_n_ctx(s->b);
    const sd_gen_params gp0 = q.gp;
    int64_t n_prompt_all = 0;
    for (int32_t p = 0; p < n_p; p++) {
        n_ids = pn[p];
        q.gp = gp0;
        n_prompt_all += n_ids;
        if (n_ids >= n_ctx) {
            r->code = "context_length_exceeded";
            r->n_prompt_tokens = n_ids;
            r->n_ctx = n_ctx;
            /* llama-server's paths (/completion, /completions, /chat/completions) answer
             * with its error type, the OpenAI routes (/v1/...) with OpenAI's. */
            srv_error(r, 400,
                      kind == SRV_NATIVE || r->llama_path ? "exceed_context_size_error"
                                                          : "invalid_request_error",
                      chat ? "messages" : "prompt",
                      "the request exceeds the available context size: the prompt is %d tokens, "
                      "the context holds %d (with room for one more)",
                      n_ids, n_ctx);
            goto done;
        }
        if (shift) { /* the context is shifted when it fills: no cut */
            q.gp.context_shift = 1;
            q.gp.shift_keep = n_keep;
            gps[p] = q.gp;
            continue;
        }
        if ((!q.has_max || q.fill || kind == SRV_NATIVE) && q.gp.n_predict > n_ctx - n_ids) {
            q.gp.n_predict = n_ctx - n_ids;
            limited[p] = 1;
        }
        if ((int64_t)n_ids + q.gp.n_predict > n_ctx) {
            r->code = "context_length_exceeded";
            srv_error(r, 400, "invalid_request_error", "max_tokens",
                      "the prompt (%d tokens) plus max_tokens (%d) exceed the context of %d tokens",
                      n_ids, q.gp.n_predict, n_ctx);
            goto done;
        }
        gps[p] = q.gp;
    }
    g = calloc(1, sizeof *g);
    if (!g) {
        srv_error(r, 500, "server_error", NULL, "out of memory");
        goto done;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->srv = s;
    g->refs = 1 + n_p; /* the HTTP side and each batcher request */
    g->chat = chat;
    g->native = kind == SRV_NATIVE;
    g->return_tokens = return_tokens;
    g->post_probs = post_probs;
    if (g->native) g->bias_json = srv_native_bias_json(sd_engine_vocab(s->e), &q.gp);
    g->fields = fields;
    fields = NULL;
    g->gp = gps[0];
    g->gp.grammar = NULL; /* freed after submission (the batcher compiled it) */
    /* llama-server's debug field: the request's "verbose", else the server's --verbose */
    json_t *vb = json_object_get(o, "verbose");
    g->verbose = (vb ? json_is_true(vb) : s->p.verbose) && n_p == 1 && !g->native;
    if ((g->native || g->verbose) && n_p == 1)
        g->prompt_text = srv_native_prompt_text(sd_engine_vocab(s->e), pids[0], pn[0]);
    g->stream = q.stream;
    g->include_usage = q.include_usage;
    g->progress = q.progress && q.stream;
    g->logprobs = q.gp.logprobs;
    g->n_choices = n_p * q.n;
    g->n_prompt = (int32_t)n_prompt_all;
    for (int32_t p = 0; p < n_p; p++)
        for (int32_t i = 0; i < q.n; i++) {
            g->ch[p * q.n + i].n_prompt = pn[p];
            g->ch[p * q.n + i].ctx_limited = limited[p];
        }
    g->fd = fd;
    g->probe_ok = r->http11 && !q.stream;
    g->conn = c;
    g->created = (long long)time(NULL);
    /* llama-server's id_slot: the slot whose last sequence this request becomes
     * (--slot-save-path); the batcher still picks the sequence */
    g->id_slot = -1;
    json_t *js = json_object_get(o, "id_slot");
    if (json_is_integer(js) && json_integer_value(js) >= 0 && json_integer_value(js) < s->p.n_slots)
        g->id_slot = (int32_t)json_integer_value(js);
    if (s->p.slot_save_path) {
        g->prompt0 = malloc((size_t)pn[0] * sizeof *g->prompt0);
        if (!g->prompt0) {
            srv_error(r, 500, "server_error", NULL, "out of memory");
            goto done;
        }
        memcpy(g->prompt0, pids[0], (size_t)pn[0] * sizeof *g->prompt0);
        g->n_prompt0 = pn[0];
    }
    sd_request req;
    memset(&req, 0, sizeof req);
    req.stop = q.stop;
    req.n_stop = q.n_stop;
    req.n_choices = q.n;
    req.cb = on_event;
    req.progress = g->progress;
    sd_error err = {0};
    int rc = 0;
    int32_t n_sub = 0;
    for (; n_sub < n_p; n_sub++) { /* one batcher request per prompt */
        srv_sub *sb = &g->sub[n_sub];
        sb->g = g;
        sb->base = n_sub * q.n;
        sb->n = q.n;
        req.prompt = pids[n_sub];
        req.n_prompt = pn[n_sub];
        req.gen = gps[n_sub];
        req.user = sb;
        int64_t id = 0;
        atomic_fetch_add(&s->n_inflight, 1); /* before: its last event may come first */
        if ((rc = sd_batcher_submit(s->b, &req, &id, &err))) {
            atomic_fetch_sub(&s->n_inflight, 1);
            break;
        }
        pthread_mutex_lock(&g->mu);
        sb->id = id;
        g->n_sub = n_sub + 1;
        pthread_mutex_unlock(&g->mu);
    }
    g->id = g->sub[0].id;
    if (rc) {
        /* The requests already queued are cancelled (their callbacks let go of theirs);
         * the others never held one. The socket is no longer theirs to look at. */
        pthread_mutex_lock(&g->mu);
        g->fd = -1;
        pthread_mutex_unlock(&g->mu);
        if (n_sub > 0) cancel_gen(g);
        for (int32_t k = n_sub; k < n_p; k++)
            srv_gen_unref(g);
        if (rc == SD_ERR_BUSY) {
            srv_error(r, 503, "server_error", NULL, "%s", err.msg);
            r->retry_after = "1";
        } else if (rc == SD_ERR_CONTEXT || rc == SD_ERR_ARG || rc == SD_ERR_FORMAT ||
                   rc == SD_ERR_UNSUPPORTED) {
            if (rc == SD_ERR_CONTEXT) r->code = "context_length_exceeded";
            srv_error(r, 400, "invalid_request_error", rc == SD_ERR_CONTEXT ? "max_tokens" : NULL,
                      "%s", err.msg);
        } else {
            srv_error(r, 500, "server_error", NULL, "%s", err.msg);
        }
        goto done;
    }
    snprintf(g->cmpl_id, sizeof g->cmpl_id, "%s-%lld", chat ? "chatcmpl" : "cmpl",
             (long long)g->id);
    if (q.stream) { /* the reader streams it; its free callback lets go */
        r->status = 200;
        r->stream = 1;
        r->gen = g;
        g = NULL;
        goto done;
    }
    /* Wait off the polling threads: the callback resumes the connection at the end. */
    pthread_mutex_lock(&g->mu);
    if (g->n_done < g->n_choices) {
        g->suspended = 1;
        MHD_suspend_connection(c);
    }
    pthread_mutex_unlock(&g->mu);
    r->pending = 1;
    r->gen = g;
    g = NULL;
done:
    json_decref(fields);
    free(q.bias);    /* the batcher holds its own copy */
    free(q.grammar); /* and its compiled grammar */
    if (g) srv_gen_unref(g);
    if (texts)
        for (size_t i = 0; i < n_msgs; i++)
            free(texts[i]);
    free(texts);
    free(msgs);
    free(ids);
    for (int32_t p = 0; p < n_p; p++)
        free(pids[p]);
    json_decref(o);
}
