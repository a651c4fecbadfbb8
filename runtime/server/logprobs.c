/* runtime/server/logprobs.c: the request fields logprobs, top_logprobs and logit_bias
 * (checked, into the engine's sd_gen_params), and the logprobs of emitted tokens in
 * OpenAI's two shapes (chat: content[] of {token, logprob, bytes, top_logprobs[]};
 * completions: {tokens, token_logprobs, top_logprobs, text_offset}). The values are the
 * engine's (sd_token_logprob: the target's raw distribution, the same with a draft or
 * without), printed with the server's 15 significant digits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/server/server_impl.h"

static int bad(srv_reply *r, const char *key, const char *what) {
    srv_error(r, 400, "invalid_request_error", key, "'%s' %s", key, what);
    return -1;
}

/* The biases being collected. */
typedef struct bias_set {
    sd_logit_bias *b;
    size_t n, cap;
} bias_set;

static int bias_push(bias_set *bs, int32_t id, float bias, srv_reply *r) {
    if (bs->n == bs->cap) {
        size_t cap = bs->cap ? bs->cap * 2 : 16;
        sd_logit_bias *nb = realloc(bs->b, cap * sizeof *nb);
        if (!nb) {
            srv_error(r, 500, "server_error", NULL, "out of memory");
            return -1;
        }
        bs->b = nb;
        bs->cap = cap;
    }
    bs->b[bs->n].id = id;
    bs->b[bs->n].bias = bias;
    bs->n++;
    return 0;
}

/* One entry: the key (a token id, as a number or decimal string, or a text whose every
 * token gets the bias, llama-server's form) and the bias (a number in -100 .. 100, or
 * false: the token banned, as -100). */
static int bias_entry(const sd_vocab *v, json_t *key, const char *skey, json_t *x, bias_set *bs,
                      srv_reply *r) {
    float b;
    if (json_is_false(x)) {
        b = SD_LOGIT_BIAS_MIN;
    } else if (json_is_number(x)) {
        const double d = json_number_value(x);
        if (!(d >= SD_LOGIT_BIAS_MIN && d <= SD_LOGIT_BIAS_MAX)) {
            srv_error(r, 400, "invalid_request_error", "logit_bias",
                      "'logit_bias' value %g is out of range, expected -100 .. 100 (or false)", d);
            return -1;
        }
        b = (float)d;
    } else {
        return bad(r, "logit_bias", "values must be numbers in -100 .. 100 or false");
    }
    const int32_t n_vocab = sd_vocab_n_tokens(v);
    if (key && json_is_integer(key)) {
        const json_int_t id = json_integer_value(key);
        if (id < 0 || id >= n_vocab) {
            srv_error(r, 400, "invalid_request_error", "logit_bias",
                      "'logit_bias' token id %lld is not in 0 .. %d", (long long)id, n_vocab - 1);
            return -1;
        }
        return bias_push(bs, (int32_t)id, b, r);
    }
    const char *s = key ? json_string_value(key) : skey;
    if (!s) return bad(r, "logit_bias", "keys must be token ids or texts");
    char *end = NULL;
    errno = 0;
    const long id = strtol(s, &end, 10);
    if (s[0] && !*end && !errno) { /* a decimal id (OpenAI's keys) */
        if (id < 0 || id >= n_vocab) {
            srv_error(r, 400, "invalid_request_error", "logit_bias",
                      "'logit_bias' key '%s' is not a token id in 0 .. %d", s, n_vocab - 1);
            return -1;
        }
        return bias_push(bs, (int32_t)id, b, r);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    if (sd_vocab_tokenize(v, s, strlen(s), 0, &ids, &n, &err)) {
        srv_error(r, 400, "invalid_request_error", "logit_bias", "'logit_bias' text: %s", err.msg);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = bias_push(bs, ids[i], b, r);
    free(ids);
    return rc;
}

/* logit_bias: {"id" or "text": bias, ...} (OpenAI's form; llama-server also takes texts) or
 * [[id or text, bias], ...] (llama-server's). */
static int parse_bias(json_t *v_, const sd_vocab *v, sd_sampling_params *sp, sd_logit_bias **bias,
                      srv_reply *r) {
    bias_set bs = {0};
    int rc = 0;
    if (json_is_object(v_)) {
        const char *key;
        json_t *x;
        json_object_foreach(v_, key, x) {
            if ((rc = bias_entry(v, NULL, key, x, &bs, r))) break;
        }
    } else if (json_is_array(v_)) {
        size_t i;
        json_t *e;
        json_array_foreach(v_, i, e) {
            if (!json_is_array(e) || json_array_size(e) != 2) {
                rc = bad(r, "logit_bias", "entries must be [token id or text, bias] pairs");
                break;
            }
            json_t *k = json_array_get(e, 0);
            if (!json_is_integer(k) && !json_is_string(k)) {
                rc = bad(r, "logit_bias", "entries must be [token id or text, bias] pairs");
                break;
            }
            if ((rc = bias_entry(v, k, NULL, json_array_get(e, 1), &bs, r))) break;
        }
    } else {
        return bad(r, "logit_bias", "must be an object of token id: bias (or [id, bias] pairs)");
    }
    if (rc || bs.n > (size_t)INT32_MAX) {
        free(bs.b);
        return rc ? rc : bad(r, "logit_bias", "has too many entries");
    }
    *bias = bs.b;
    sp->logit_bias = bs.b;
    sp->n_logit_bias = (int32_t)bs.n;
    return 0;
}

int srv_logprobs_parse(json_t *o, int chat, const sd_vocab *v, sd_gen_params *gp,
                       sd_logit_bias **bias, srv_reply *r) {
    *bias = NULL;
    gp->logprobs = 0;
    gp->top_logprobs = 0;
    json_t *lp = json_object_get(o, "logprobs"), *top = json_object_get(o, "top_logprobs");
    if (lp && json_is_null(lp)) lp = NULL;
    if (top && json_is_null(top)) top = NULL;
    if (chat) { /* logprobs: bool, top_logprobs: 0 .. 20 (needs logprobs) */
        if (lp && !json_is_boolean(lp)) return bad(r, "logprobs", "must be true or false");
        gp->logprobs = lp && json_is_true(lp);
        if (top) {
            if (!json_is_integer(top) || json_integer_value(top) < 0 ||
                json_integer_value(top) > SD_MAX_TOP_LOGPROBS)
                return bad(r, "top_logprobs", "must be an integer in 0 .. 20");
            if (!gp->logprobs) return bad(r, "top_logprobs", "needs \"logprobs\": true");
            gp->top_logprobs = (int32_t)json_integer_value(top);
        }
    } else { /* logprobs: the alternatives per token, 0 .. 20 (false: none) */
        if (top) return bad(r, "top_logprobs", "is a chat field (completions: \"logprobs\": N)");
        if (lp && !json_is_false(lp)) {
            if (!json_is_integer(lp) || json_integer_value(lp) < 0 ||
                json_integer_value(lp) > SD_MAX_TOP_LOGPROBS)
                return bad(r, "logprobs", "must be an integer in 0 .. 20");
            gp->logprobs = 1;
            gp->top_logprobs = (int32_t)json_integer_value(lp);
        }
    }
    json_t *b = json_object_get(o, "logit_bias");
    if (b && !json_is_null(b)) return parse_bias(b, v, &gp->samp, bias, r);
    return 0;
}

/* The bytes of token id (its piece) into buf[cap]; their length (cut at cap). */
static size_t piece(const sd_vocab *v, int32_t id, char *buf, size_t cap) {
    const int n = sd_vocab_token_to_piece(v, id, 0, buf, cap);
    if (n < 0) return 0;
    return (size_t)n < cap ? (size_t)n : cap;
}

/* The length of the well-formed UTF-8 sequence at s[0 .. n), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    unsigned cp = c & (0xFFu >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* A JSON string of the bytes s[0 .. n) with every byte that is not part of well-formed
 * UTF-8 (a token that holds part of a character) as U+FFFD. */
static json_t *token_str(const char *s, size_t n) {
    char out[4 * 256];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 <= sizeof out;) {
        const size_t l = utf8_seq((const unsigned char *)s + i, n - i);
        if (l == 0 || l == 1) {
            if (l == 1 && s[i] != '\0') {
                out[o++] = s[i];
            } else {
                memcpy(out + o, "\xEF\xBF\xBD", 3);
                o += 3;
            }
            i++;
            continue;
        }
        memcpy(out + o, s + i, l);
        o += l;
        i += l;
    }
    json_t *j = json_stringn(out, o);
    return j ? j : json_string("");
}

static json_t *bytes_of(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* -inf (a token of probability 0) as OpenAI's floor, JSON has no infinity. */
static json_t *lp_real(double x) {
    return json_real(isfinite(x) ? x : -9999.0);
}

/* One chat entry: {token, logprob, bytes} (+ top_logprobs when top). */
static json_t *chat_entry(const sd_vocab *v, int32_t id, double lp, const sd_token_logprob *top) {
    char buf[256];
    const size_t n = piece(v, id, buf, sizeof buf);
    json_t *e = json_object();
    json_object_set_new(e, "token", token_str(buf, n));
    json_object_set_new(e, "logprob", lp_real(lp));
    json_object_set_new(e, "bytes", bytes_of(buf, n));
    if (top) {
        json_t *a = json_array();
        for (int32_t t = 0; t < top->n_top; t++)
            json_array_append_new(a, chat_entry(v, top->top_id[t], top->top_logprob[t], NULL));
        json_object_set_new(e, "top_logprobs", a);
    }
    return e;
}

/* Characters of s[0 .. n): bytes that do not continue a UTF-8 sequence. */
static size_t n_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

json_t *srv_logprobs_json(const sd_vocab *v, int chat, const sd_token_logprob *lp, int32_t n,
                          size_t *offset) {
    if (chat) {
        json_t *content = json_array();
        for (int32_t i = 0; i < n; i++)
            json_array_append_new(content, chat_entry(v, lp[i].token, lp[i].logprob, &lp[i]));
        return json_pack("{s:o,s:n}", "content", content, "refusal");
    }
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    char buf[256];
    for (int32_t i = 0; i < n; i++) {
        const size_t len = piece(v, lp[i].token, buf, sizeof buf);
        json_array_append_new(toks, token_str(buf, len));
        json_array_append_new(lps, lp_real(lp[i].logprob));
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += n_chars(buf, len);
        json_t *top = json_object();
        for (int32_t t = 0; t < lp[i].n_top; t++) {
            const size_t tl = piece(v, lp[i].top_id[t], buf, sizeof buf);
            json_t *k = token_str(buf, tl);
            /* Two ids with one text: the first (the more probable) stays. */
            if (!json_object_get(top, json_string_value(k)))
                json_object_set_new(top, json_string_value(k), lp_real(lp[i].top_logprob[t]));
            json_decref(k);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offs);
}

/* One completion_probabilities entry: {id, token, bytes, logprob | prob}. */
static json_t *native_entry(const sd_vocab *v, int32_t id, double lp, int post) {
    char buf[256];
    const size_t n = piece(v, id, buf, sizeof buf);
    json_t *e = json_object();
    json_object_set_new(e, "id", json_integer(id));
    json_object_set_new(e, "token", token_str(buf, n));
    json_object_set_new(e, "bytes", bytes_of(buf, n));
    json_object_set_new(e, post ? "prob" : "logprob", post ? json_real(exp(lp)) : lp_real(lp));
    return e;
}

json_t *srv_native_probs_json(const sd_vocab *v, const sd_token_logprob *lp, int32_t n, int post) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++) {
        json_t *e = native_entry(v, lp[i].token, lp[i].logprob, post), *top = json_array();
        for (int32_t t = 0; t < lp[i].n_top; t++)
            if (!post || exp(lp[i].top_logprob[t]) > 0)
                json_array_append_new(top,
                                      native_entry(v, lp[i].top_id[t], lp[i].top_logprob[t], post));
        json_object_set_new(e, post ? "top_probs" : "top_logprobs", top);
        json_array_append_new(a, e);
    }
    return a ? a : json_array();
}

int srv_logprobs_add(srv_choice *c, const sd_token_logprob *lp, int32_t n) {
    if (n <= 0) return 0;
    if (c->n_lp + n > c->cap_lp) {
        int32_t cap = c->cap_lp ? c->cap_lp : 64;
        while (cap < c->n_lp + n)
            cap *= 2;
        sd_token_logprob *p = realloc(c->lp, (size_t)cap * sizeof *p);
        if (!p) return -1;
        c->lp = p;
        c->cap_lp = cap;
    }
    memcpy(c->lp + c->n_lp, lp, (size_t)n * sizeof *lp);
    c->n_lp += n;
    return 0;
}
