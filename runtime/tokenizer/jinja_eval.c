/*
 * runtime/tokenizer/jinja_eval.c: renders a parsed Jinja template (jinja_parse.c) over
 * jansson values. The face and the supported subset: sd_vocab.h, "Jinja chat templates".
 *
 * Values are jansson values with Python's meaning: objects are dicts (insertion order),
 * arrays are lists and tuples, integers and reals are numbers (1 == 1.0), null is None.
 * Jinja's undefined is a NULL value (r->failed tells an error from it): printed as "",
 * false, iterable as empty; attributes and items of it are undefined again. Every eval
 * returns a new reference (or NULL). Printing follows Python's str(): True, None, 1.0,
 * ['a', 1], {'k': 'v'}; tojson follows the chat-template renderers' json.dumps
 * (insertion order, ", " and ": ", non-ASCII kept). The caller's vars are deep-copied so
 * a template's list.append or `set ns.x` never changes them. Scopes are a stack of
 * objects: a for loop and a macro call push one, `set` writes the innermost.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/base/sd_base.h"
#include "runtime/tokenizer/jinja_impl.h"

#define MAX_ARGS           8
#define SD_JINJA_MAX_RANGE 1000000

typedef struct obuf {
    char *p;
    size_t n, cap;
} obuf;

typedef struct R {
    sd_jinja_limits lim;
    sd_error *err;
    int failed;
    json_t *frames[1024];
    int nf;
    obuf *out;
    int64_t steps;
    int depth;
    const jnode *macros[256];
    int nm;
} R;

typedef struct args {
    json_t *pos[MAX_ARGS];
    size_t np;
    const char *kwn[MAX_ARGS];
    json_t *kwv[MAX_ARGS];
    size_t nkw;
} args;

sd_jinja_limits sd_jinja_default_limits(void) {
    sd_jinja_limits l = {(size_t)4 << 20, 256, 5000000, 0};
    return l;
}

static void rfail(R *r, int st, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rfail(R *r, int st, int line, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    char m[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (line > 0)
        sd_errorf(r->err, (sd_status)st, "jinja template, line %d: %s", line, m);
    else
        sd_errorf(r->err, (sd_status)st, "jinja template: %s", m);
}

static json_t *oom(R *r) {
    rfail(r, SD_ERR_OOM, 0, "out of memory");
    return NULL;
}

static json_t *chk(R *r, json_t *v) {
    return v ? v : oom(r);
}

/* ------------------------------------------------------------------ text */

static int ob_add(R *r, obuf *b, const char *s, size_t n) {
    if (r->failed) return -1;
    if (b->n + n > r->lim.max_output) {
        rfail(r, SD_ERR_ARG, 0, "the output exceeds %zu bytes", r->lim.max_output);
        return -1;
    }
    if (n == 0 && b->p) return 0;
    if (sd_buf_append(&b->p, &b->n, &b->cap, s, n)) {
        oom(r);
        return -1;
    }
    return 0;
}

static int ob_str(R *r, obuf *b, const char *s) {
    return ob_add(r, b, s, strlen(s));
}

static const char *type_name(const json_t *v) {
    if (!v) return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "dict";
    case JSON_ARRAY:
        return "list";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "float";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "none";
    }
}

static void fmt_real(double d, char *buf, size_t cap) {
    if (isnan(d)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* Python writes 1e+16 as 1e+16 and 1.0 as 1.0 */
    if (!strpbrk(buf, ".eni")) {
        size_t n = strlen(buf);
        if (n + 2 < cap) memcpy(buf + n, ".0", 3);
    }
}

static int to_repr(R *r, obuf *b, const json_t *v);

/* Python's str() of a value. */
static int to_str(R *r, obuf *b, const json_t *v) {
    char buf[64];
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_STRING:
        return ob_add(r, b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return ob_str(r, b, buf);
    case JSON_REAL:
        fmt_real(json_real_value(v), buf, sizeof buf);
        return ob_str(r, b, buf);
    case JSON_TRUE:
        return ob_str(r, b, "True");
    case JSON_FALSE:
        return ob_str(r, b, "False");
    case JSON_NULL:
        return ob_str(r, b, "None");
    default:
        return to_repr(r, b, v);
    }
}

static int repr_string(R *r, obuf *b, const char *s, size_t n) {
    const char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    ob_add(r, b, &q, 1);
    for (size_t i = 0; i < n && !r->failed; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '\\' || c == (unsigned char)q) {
            e[0] = '\\';
            e[1] = (char)c;
            ob_add(r, b, e, 2);
        } else if (c == '\n') {
            ob_str(r, b, "\\n");
        } else if (c == '\r') {
            ob_str(r, b, "\\r");
        } else if (c == '\t') {
            ob_str(r, b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(e, sizeof e, "\\x%02x", c);
            ob_str(r, b, e);
        } else {
            ob_add(r, b, (const char *)&s[i], 1);
        }
    }
    return ob_add(r, b, &q, 1);
}

/* Python's repr() (lists and dicts print their items this way). */
static int to_repr(R *r, obuf *b, const json_t *v) {
    if (v && json_is_string(v))
        return repr_string(r, b, json_string_value(v), json_string_length(v));
    if (v && json_is_array(v)) {
        ob_str(r, b, "[");
        for (size_t i = 0; i < json_array_size(v) && !r->failed; i++) {
            if (i) ob_str(r, b, ", ");
            to_repr(r, b, json_array_get(v, i));
        }
        return ob_str(r, b, "]");
    }
    if (v && json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        ob_str(r, b, "{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first) ob_str(r, b, ", ");
            first = 0;
            repr_string(r, b, k, strlen(k));
            ob_str(r, b, ": ");
            to_repr(r, b, x);
        }
        return ob_str(r, b, "}");
    }
    return to_str(r, b, v);
}

static void json_string_out(R *r, obuf *b, const char *s, size_t n) {
    ob_str(r, b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n && !r->failed; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char u[8];
        if (c == '"')
            e = "\\\"";
        else if (c == '\\')
            e = "\\\\";
        else if (c == '\n')
            e = "\\n";
        else if (c == '\r')
            e = "\\r";
        else if (c == '\t')
            e = "\\t";
        else if (c == '\b')
            e = "\\b";
        else if (c == '\f')
            e = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            e = u;
        }
        if (e) {
            ob_add(r, b, s + run, i - run);
            ob_str(r, b, e);
            run = i + 1;
        }
    }
    ob_add(r, b, s + run, n - run);
    ob_str(r, b, "\"");
}

static void indent_out(R *r, obuf *b, int indent, int level) {
    ob_str(r, b, "\n");
    for (int i = 0; i < indent * level && !r->failed; i++)
        ob_str(r, b, " ");
}

/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none)). */
static void to_json(R *r, obuf *b, const json_t *v, int indent, int level) {
    char buf[64];
    if (r->failed) return;
    if (level > r->lim.max_depth) {
        rfail(r, SD_ERR_ARG, 0, "tojson: nesting deeper than %d", r->lim.max_depth);
        return;
    }
    if (!v || json_is_null(v)) {
        ob_str(r, b, "null");
        return;
    }
    switch (json_typeof(v)) {
    case JSON_STRING:
        json_string_out(r, b, json_string_value(v), json_string_length(v));
        return;
    case JSON_TRUE:
        ob_str(r, b, "true");
        return;
    case JSON_FALSE:
        ob_str(r, b, "false");
        return;
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        ob_str(r, b, buf);
        return;
    case JSON_REAL: {
        double d = json_real_value(v);
        if (isnan(d))
            ob_str(r, b, "NaN");
        else if (isinf(d))
            ob_str(r, b, d < 0 ? "-Infinity" : "Infinity");
        else {
            fmt_real(d, buf, sizeof buf);
            ob_str(r, b, buf);
        }
        return;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        ob_str(r, b, "[");
        for (size_t i = 0; i < n; i++) {
            if (i) ob_str(r, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) indent_out(r, b, indent, level + 1);
            to_json(r, b, json_array_get(v, i), indent, level + 1);
        }
        if (indent >= 0 && n) indent_out(r, b, indent, level);
        ob_str(r, b, "]");
        return;
    }
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        ob_str(r, b, "{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first) ob_str(r, b, indent >= 0 ? "," : ", ");
            first = 0;
            if (indent >= 0) indent_out(r, b, indent, level + 1);
            json_string_out(r, b, k, strlen(k));
            ob_str(r, b, ": ");
            to_json(r, b, x, indent, level + 1);
        }
        if (indent >= 0 && !first) indent_out(r, b, indent, level);
        ob_str(r, b, "}");
        return;
    }
    default:
        ob_str(r, b, "null");
    }
}

/* A new string value from a buffer (the buffer is freed). */
static json_t *ob_take(R *r, obuf *b) {
    json_t *s = r->failed ? NULL : json_stringn_nocheck(b->p ? b->p : "", b->n);
    free(b->p);
    b->p = NULL;
    if (!s && !r->failed) oom(r);
    return s;
}

static json_t *str_of(R *r, const json_t *v) {
    if (v && json_is_string(v)) return json_incref((json_t *)v);
    obuf b = {0};
    to_str(r, &b, v);
    return ob_take(r, &b);
}

/* ------------------------------------------------------------------ values */

static int truthy(const json_t *v) {
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0;
    case JSON_TRUE:
        return 1;
    default:
        return 0;
    }
}

static int is_num(const json_t *v) {
    return v && (json_is_integer(v) || json_is_real(v) || json_is_boolean(v));
}

static double num_of(const json_t *v) {
    if (json_is_integer(v)) return (double)json_integer_value(v);
    if (json_is_real(v)) return json_real_value(v);
    return json_is_true(v) ? 1 : 0;
}

static int is_intish(const json_t *v) {
    return v && (json_is_integer(v) || json_is_boolean(v));
}

static int64_t int_of(const json_t *v) {
    if (json_is_integer(v)) return json_integer_value(v);
    if (json_is_real(v)) { /* clamped: a cast of a value out of range is undefined */
        const double d = json_real_value(v);
        if (!(d == d)) return 0;
        if (d >= 9.2e18) return INT64_MAX;
        if (d <= -9.2e18) return INT64_MIN;
        return (int64_t)d;
    }
    return json_is_true(v) ? 1 : 0;
}

static int equal(const json_t *a, const json_t *b) {
    if (!a || !b) return !a && !b;
    if (is_num(a) && is_num(b)) {
        if (json_is_boolean(a) != json_is_boolean(b)) return 0;
        if (is_intish(a) && is_intish(b)) return int_of(a) == int_of(b);
        return num_of(a) == num_of(b);
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!equal(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *x;
        if (json_object_size(a) != json_object_size(b)) return 0;
        json_object_foreach((json_t *)a, k, x) {
            if (!equal(x, json_object_get(b, k))) return 0;
        }
        return 1;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* <0, 0, >0; *ok = 0 when the two cannot be ordered. */
static int order(const json_t *a, const json_t *b, int *ok) {
    *ok = 1;
    if (is_num(a) && is_num(b)) {
        double x = num_of(a), y = num_of(b);
        if (is_intish(a) && is_intish(b)) {
            int64_t i = int_of(a), j = int_of(b);
            return i < j ? -1 : i > j;
        }
        return x < y ? -1 : x > y;
    }
    if (a && b && json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
        return c ? c : (la < lb ? -1 : la > lb);
    }
    *ok = 0;
    return 0;
}

/* Code points of a UTF-8 string: offsets[0..n] (offsets[n] = byte length). */
static size_t *utf8_offsets(const char *s, size_t len, size_t *n) {
    size_t *o = malloc((len + 1) * sizeof *o);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) o[k++] = i;
    o[k] = len;
    *n = k;
    return o;
}

static size_t utf8_len(const char *s, size_t len) {
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* 1 when v is c or holds it (a reference cycle, which reference counting would leak). */
static int holds(const json_t *v, const json_t *c, int depth) {
    if (!v) return 0;
    if (v == c) return 1;
    if (depth > 64) return 1; /* deeper than any template builds: refuse as a cycle */
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (holds(json_array_get(v, i), c, depth + 1)) return 1;
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            if (holds(x, c, depth + 1)) return 1;
        }
    }
    return 0;
}

static json_t *lookup(R *r, const char *name) {
    for (int i = r->nf - 1; i >= 0; i--) {
        json_t *v = json_object_get(r->frames[i], name);
        if (v) return v;
    }
    return NULL;
}

/* ------------------------------------------------------------------ evaluation */

static json_t *ev(R *r, const jnode *n);
static int exec_body(R *r, const jnode *body);

static int step(R *r, int line) {
    if (r->failed) return -1;
    if (++r->steps > r->lim.max_steps) {
        rfail(r, SD_ERR_ARG, line, "more than %lld evaluation steps", (long long)r->lim.max_steps);
        return -1;
    }
    return 0;
}

/* n steps at once: building n list elements or string copies costs one step each, so the
 * step limit also bounds what a template can allocate. */
static int charge(R *r, int line, size_t n) {
    if (r->failed) return -1;
    if (n > (size_t)r->lim.max_steps || (int64_t)n > r->lim.max_steps - r->steps) {
        r->steps = r->lim.max_steps;
        return step(r, line);
    }
    r->steps += (int64_t)n;
    return 0;
}

static void args_free(args *a) {
    for (size_t i = 0; i < a->np; i++)
        json_decref(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++)
        json_decref(a->kwv[i]);
    a->np = a->nkw = 0;
}

static int eval_args(R *r, const jnode *n, json_t *first, args *a) {
    memset(a, 0, sizeof *a);
    if (first) a->pos[a->np++] = first;
    if (n->nk + a->np > MAX_ARGS || n->nkw > MAX_ARGS) {
        json_decref(first);
        a->np = 0;
        rfail(r, SD_ERR_UNSUPPORTED, n->line, "more than %d arguments", MAX_ARGS);
        return -1;
    }
    for (size_t i = 0; i < n->nk && !r->failed; i++)
        a->pos[a->np++] = ev(r, n->kids[i]);
    for (size_t i = 0; i < n->nkw && !r->failed; i++) {
        a->kwn[a->nkw] = n->kwn[i];
        a->kwv[a->nkw++] = ev(r, n->kwv[i]);
    }
    if (r->failed) {
        args_free(a);
        return -1;
    }
    return 0;
}

/* Argument i (positional) or name (keyword), borrowed; NULL when absent. */
static json_t *kwarg(const args *a, const char *name) {
    for (size_t k = 0; name && k < a->nkw; k++)
        if (strcmp(a->kwn[k], name) == 0) return a->kwv[k];
    return NULL;
}

static json_t *arg(const args *a, size_t i, const char *name) {
    if (i < a->np && i < MAX_ARGS) return a->pos[i];
    return kwarg(a, name);
}

static json_t *items_of(R *r, const json_t *v) {
    json_t *out = json_array();
    if (!out) return oom(r);
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        if (json_array_append_new(out, json_pack("[sO]", k, x))) {
            json_decref(out);
            return oom(r);
        }
    }
    return out;
}

/* The elements a for loop or a filter walks: a new array (strings: their characters,
 * dicts: their keys, undefined / none: empty). */
static json_t *iter_list(R *r, const json_t *v, int line) {
    if (!v || json_is_null(v)) return chk(r, json_array());
    if (json_is_array(v)) return json_incref((json_t *)v);
    json_t *out = json_array();
    if (!out) return oom(r);
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            (void)x;
            if (json_array_append_new(out, json_string(k))) goto nomem;
        }
        return out;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v), n;
        size_t *o = utf8_offsets(s, len, &n);
        if (!o) goto nomem;
        for (size_t i = 0; i < n; i++)
            if (json_array_append_new(out, json_stringn_nocheck(s + o[i], o[i + 1] - o[i]))) {
                free(o);
                goto nomem;
            }
        free(o);
        return out;
    }
    json_decref(out);
    rfail(r, SD_ERR_ARG, line, "cannot iterate over a %s", type_name(v));
    return NULL;
nomem:
    json_decref(out);
    return oom(r);
}

static json_t *get_attr(const json_t *obj, const char *name) {
    if (!obj) return NULL;
    if (json_is_object(obj)) return json_incref(json_object_get(obj, name));
    return NULL;
}

static json_t *get_index(R *r, const json_t *obj, const json_t *key, int line) {
    if (!obj || !key) return NULL;
    if (json_is_object(obj)) {
        if (json_is_string(key)) return json_incref(json_object_get(obj, json_string_value(key)));
        obuf b = {0};
        to_str(r, &b, key);
        json_t *v = b.p ? json_object_getn(obj, b.p, b.n) : NULL;
        free(b.p);
        return json_incref(v);
    }
    if (json_is_array(obj) || json_is_string(obj)) {
        if (!is_intish(key)) {
            rfail(r, SD_ERR_ARG, line, "a %s index must be an integer, not a %s", type_name(obj),
                  type_name(key));
            return NULL;
        }
        int64_t i = int_of(key);
        if (json_is_array(obj)) {
            int64_t n = (int64_t)json_array_size(obj);
            if (i < 0) i += n;
            return i >= 0 && i < n ? json_incref(json_array_get(obj, (size_t)i)) : NULL;
        }
        size_t n;
        size_t *o = utf8_offsets(json_string_value(obj), json_string_length(obj), &n);
        if (!o) return oom(r);
        if (i < 0) i += (int64_t)n;
        json_t *v = NULL;
        if (i >= 0 && i < (int64_t)n)
            v = chk(r, json_stringn_nocheck(json_string_value(obj) + o[i], o[i + 1] - o[i]));
        free(o);
        return v;
    }
    return NULL;
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static json_t *slice(R *r, const json_t *obj, const json_t *jb, const json_t *je, const json_t *js,
                     int line) {
    if (!obj) return NULL;
    if (!json_is_array(obj) && !json_is_string(obj)) {
        rfail(r, SD_ERR_ARG, line, "cannot slice a %s", type_name(obj));
        return NULL;
    }
    for (int k = 0; k < 3; k++) {
        const json_t *x = k == 0 ? jb : k == 1 ? je : js;
        if (x && !json_is_null(x) && !is_intish(x)) {
            rfail(r, SD_ERR_ARG, line, "slice bounds must be integers");
            return NULL;
        }
    }
    int64_t st = js && !json_is_null(js) ? int_of(js) : 1;
    if (st == 0) {
        rfail(r, SD_ERR_ARG, line, "slice step cannot be zero");
        return NULL;
    }
    size_t n = 0, *o = NULL;
    if (json_is_string(obj)) {
        o = utf8_offsets(json_string_value(obj), json_string_length(obj), &n);
        if (!o) return oom(r);
    } else {
        n = json_array_size(obj);
    }
    const int64_t len = (int64_t)n;
    int64_t b, e;
    if (st > 0) {
        b = jb && !json_is_null(jb) ? int_of(jb) : 0;
        e = je && !json_is_null(je) ? int_of(je) : len;
        if (b < 0) b += len;
        if (e < 0) e += len;
        b = clampi(b, 0, len);
        e = clampi(e, 0, len);
    } else {
        b = jb && !json_is_null(jb) ? int_of(jb) : len - 1;
        e = je && !json_is_null(je) ? int_of(je) : -len - 1;
        if (b < 0) b += len;
        if (e < 0) e += len;
        b = clampi(b, -1, len - 1);
        e = clampi(e, -1, len - 1);
    }
    json_t *out = NULL;
    if (o) {
        obuf ob = {0};
        const char *s = json_string_value(obj);
        ob_add(r, &ob, "", 0);
        for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
            ob_add(r, &ob, s + o[i], o[i + 1] - o[i]);
        free(o);
        return ob_take(r, &ob);
    }
    out = json_array();
    if (!out) return oom(r);
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
        if (json_array_append(out, json_array_get(obj, (size_t)i))) {
            json_decref(out);
            return oom(r);
        }
    return out;
}

static json_t *concat_str(R *r, const json_t *a, const json_t *b) {
    obuf o = {0};
    ob_add(r, &o, "", 0);
    to_str(r, &o, a);
    to_str(r, &o, b);
    return ob_take(r, &o);
}

static json_t *arith(R *r, int op, const json_t *a, const json_t *b, int line) {
    if (op == OP_CONCAT) return concat_str(r, a, b);
    /* undefined + string is the string, as chat-template engines render it (llama.cpp's
     * among them; Python's jinja2 raises) */
    if (op == OP_ADD && ((!a && b && json_is_string(b)) || (!b && a && json_is_string(a))))
        return concat_str(r, a, b);
    if (op == OP_ADD && a && b) {
        if (json_is_string(a) && json_is_string(b)) return concat_str(r, a, b);
        if (json_is_array(a) && json_is_array(b)) {
            if (charge(r, line, json_array_size(a) + json_array_size(b))) return NULL;
            json_t *out = json_copy((json_t *)a);
            if (!out || json_array_extend(out, (json_t *)b)) {
                json_decref(out);
                return oom(r);
            }
            return out;
        }
    }
    if (op == OP_MUL && a && b && (json_is_string(a) || json_is_array(a)) && is_intish(b)) {
        int64_t k = int_of(b);
        if (json_is_string(a)) {
            obuf o = {0};
            ob_add(r, &o, "", 0);
            for (int64_t i = 0; i < k && json_string_length(a) && !step(r, line); i++)
                ob_add(r, &o, json_string_value(a), json_string_length(a));
            return ob_take(r, &o);
        }
        json_t *out = json_array();
        for (int64_t i = 0; out && i < k && !r->failed; i++) {
            if (!json_array_size(a)) break;
            if (charge(r, line, json_array_size(a)) || json_array_extend(out, (json_t *)a)) break;
        }
        if (r->failed || !out) {
            json_decref(out);
            return out ? NULL : oom(r);
        }
        return out;
    }
    if (!is_num(a) || !is_num(b)) {
        static const char *names[] = {"",  "==", "!=", "<", "<=", ">", ">=", "in", "not in",
                                      "+", "-",  "*",  "/", "//", "%", "**", "~"};
        if (op == OP_MOD && a && json_is_string(a))
            rfail(r, SD_ERR_UNSUPPORTED, line, "string formatting with '%%' is not supported");
        else
            rfail(r, SD_ERR_ARG, line, "unsupported operand types for %s: %s and %s", names[op],
                  type_name(a), type_name(b));
        return NULL;
    }
    const int ints = is_intish(a) && is_intish(b);
    const int64_t i = int_of(a), j = int_of(b);
    const double x = num_of(a), y = num_of(b);
    switch (op) {
    case OP_ADD:
        return chk(r,
                   ints ? json_integer((json_int_t)((uint64_t)i + (uint64_t)j)) : json_real(x + y));
    case OP_SUB:
        return chk(r,
                   ints ? json_integer((json_int_t)((uint64_t)i - (uint64_t)j)) : json_real(x - y));
    case OP_MUL:
        return chk(r,
                   ints ? json_integer((json_int_t)((uint64_t)i * (uint64_t)j)) : json_real(x * y));
    case OP_DIV:
        if (y == 0) break;
        return chk(r, json_real(x / y));
    case OP_FLOORDIV:
    case OP_MOD:
        if (ints) {
            if (j == 0) break;
            if (i == INT64_MIN && j == -1) return chk(r, json_integer(op == OP_MOD ? 0 : i));
            int64_t q = i / j, m = i % j;
            if (m != 0 && ((m < 0) != (j < 0))) {
                q--;
                m += j;
            }
            return chk(r, json_integer(op == OP_MOD ? m : q));
        }
        if (y == 0) break;
        {
            double q = floor(x / y), m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return chk(r, json_real(op == OP_MOD ? m : q));
        }
    case OP_POW:
        if (ints && j >= 0) {
            int64_t v = 1;
            for (int64_t k = 0; k < j && k < 64; k++)
                v = (int64_t)((uint64_t)v * (uint64_t)i);
            return chk(r, json_integer(v));
        }
        return chk(r, json_real(pow(x, y)));
    default:
        break;
    }
    rfail(r, SD_ERR_ARG, line, "division by zero");
    return NULL;
}

static int contains(R *r, const json_t *hay, const json_t *needle, int line) {
    if (!hay) return 0;
    if (json_is_string(hay)) {
        if (!needle || !json_is_string(needle)) {
            rfail(r, SD_ERR_ARG, line, "'in <string>' needs a string on the left");
            return 0;
        }
        size_t hn = json_string_length(hay), nn = json_string_length(needle);
        if (nn == 0) return 1;
        return memmem(json_string_value(hay), hn, json_string_value(needle), nn) != NULL;
    }
    if (json_is_array(hay)) {
        for (size_t i = 0; i < json_array_size(hay); i++)
            if (equal(json_array_get(hay, i), needle)) return 1;
        return 0;
    }
    if (json_is_object(hay))
        return needle && json_is_string(needle) && json_object_get(hay, json_string_value(needle));
    rfail(r, SD_ERR_ARG, line, "'in' needs a string, list or dict on the right, not a %s",
          type_name(hay));
    return 0;
}

/* ------------------------------------------------------------------ tests */

static int run_test(R *r, const char *name, const json_t *v, const args *a, int line) {
    const json_t *x = arg(a, 0, NULL);
    if (!strcmp(name, "defined")) return v != NULL;
    if (!strcmp(name, "undefined")) return v == NULL;
    if (!strcmp(name, "none")) return v && json_is_null(v);
    if (!strcmp(name, "string")) return v && json_is_string(v);
    if (!strcmp(name, "number")) return v && (json_is_integer(v) || json_is_real(v));
    if (!strcmp(name, "integer")) return v && json_is_integer(v);
    if (!strcmp(name, "float")) return v && json_is_real(v);
    if (!strcmp(name, "boolean")) return v && json_is_boolean(v);
    if (!strcmp(name, "true")) return v && json_is_true(v);
    if (!strcmp(name, "false")) return v && json_is_false(v);
    if (!strcmp(name, "mapping")) return v && json_is_object(v);
    if (!strcmp(name, "iterable"))
        return v && (json_is_array(v) || json_is_object(v) || json_is_string(v));
    if (!strcmp(name, "sequence"))
        return v && (json_is_array(v) || json_is_object(v) || json_is_string(v));
    if (!strcmp(name, "callable")) return 0;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (!is_intish(v)) {
            rfail(r, SD_ERR_ARG, line, "'%s' needs an integer", name);
            return 0;
        }
        return (int)(((int_of(v) % 2) + 2) % 2) == (name[0] == 'o');
    }
    if (!strcmp(name, "divisibleby")) {
        if (!is_intish(v) || !is_intish(x) || int_of(x) == 0) {
            rfail(r, SD_ERR_ARG, line, "'divisibleby' needs integers (and a non-zero divisor)");
            return 0;
        }
        return int_of(v) % int_of(x) == 0;
    }
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") ||
        !strcmp(name, "sameas"))
        return equal(v, x);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !equal(v, x);
    if (!strcmp(name, "lt") || !strcmp(name, "le") || !strcmp(name, "gt") || !strcmp(name, "ge") ||
        !strcmp(name, "lessthan") || !strcmp(name, "greaterthan")) {
        int ok, c = order(v, x, &ok);
        if (!ok) {
            rfail(r, SD_ERR_ARG, line, "'%s' cannot compare a %s and a %s", name, type_name(v),
                  type_name(x));
            return 0;
        }
        if (name[0] == 'l') return name[1] == 'e' && name[2] == 0 ? c <= 0 : c < 0;
        return name[1] == 'e' && name[2] == 0 ? c >= 0 : c > 0;
    }
    if (!strcmp(name, "in")) return contains(r, x, v, line);
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (!v || !json_is_string(v)) return 0;
        const char *s = json_string_value(v);
        for (size_t i = 0; i < json_string_length(v); i++)
            if (name[0] == 'l' ? (s[i] >= 'A' && s[i] <= 'Z') : (s[i] >= 'a' && s[i] <= 'z'))
                return 0;
        return 1;
    }
    rfail(r, SD_ERR_UNSUPPORTED, line, "unknown test '%s'", name);
    return 0;
}

/* ------------------------------------------------------------------ filters and methods */

static int c_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* s.strip(chars) / lstrip / rstrip: which = 3 both, 1 left, 2 right. */
static json_t *strip(R *r, const json_t *v, const json_t *chars, int which) {
    const char *s = json_string_value(v);
    size_t a = 0, e = json_string_length(v);
    const char *set = chars && json_is_string(chars) ? json_string_value(chars) : NULL;
#define IN_SET(c) (set ? strchr(set, (c)) != NULL && (c) != 0 : c_space(c))
    if (which & 1)
        while (a < e && IN_SET(s[a]))
            a++;
    if (which & 2)
        while (e > a && IN_SET(s[e - 1]))
            e--;
#undef IN_SET
    return chk(r, json_stringn_nocheck(s + a, e - a));
}

static json_t *case_map(R *r, const json_t *v, int mode) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 title (ASCII letters) */
    obuf o = {0};
    ob_add(r, &o, json_string_value(v), json_string_length(v));
    int start = 1;
    for (size_t i = 0; i < o.n; i++) {
        char c = o.p[i];
        int up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && start);
        if (mode == 2 && i > 0) up = 0;
        if (up && c >= 'a' && c <= 'z') o.p[i] = (char)(c - 32);
        if (!up && c >= 'A' && c <= 'Z') o.p[i] = (char)(c + 32);
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (unsigned char)c >= 0x80;
        start = !alpha && !(c >= '0' && c <= '9');
    }
    return ob_take(r, &o);
}

static json_t *replace(R *r, const json_t *v, const json_t *from, const json_t *to,
                       const json_t *count) {
    const char *s = json_string_value(v), *f = json_string_value(from), *t = json_string_value(to);
    size_t n = json_string_length(v), fn = json_string_length(from), tn = json_string_length(to);
    int64_t left = count && is_intish(count) ? int_of(count) : -1;
    obuf o = {0};
    ob_add(r, &o, "", 0);
    size_t i = 0;
    if (fn == 0) { /* Python inserts `to` between every character */
        for (; i <= n && !r->failed; i++) {
            if (left != 0) {
                ob_add(r, &o, t, tn);
                if (left > 0) left--;
            }
            if (i < n) ob_add(r, &o, s + i, 1);
        }
        return ob_take(r, &o);
    }
    while (i < n && !r->failed) {
        const char *hit = left != 0 ? memmem(s + i, n - i, f, fn) : NULL;
        if (!hit) break;
        ob_add(r, &o, s + i, (size_t)(hit - (s + i)));
        ob_add(r, &o, t, tn);
        i = (size_t)(hit - s) + fn;
        if (left > 0) left--;
    }
    ob_add(r, &o, s + i, n - i);
    return ob_take(r, &o);
}

static json_t *split(R *r, const json_t *v, const json_t *sep, const json_t *maxsplit) {
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    int64_t left = maxsplit && is_intish(maxsplit) ? int_of(maxsplit) : -1;
    json_t *out = json_array();
    if (!out) return oom(r);
    if (!sep || json_is_null(sep)) {
        size_t i = 0;
        for (;;) {
            while (i < n && c_space(s[i]))
                i++;
            if (i >= n) break;
            size_t j = i;
            if (left == 0)
                j = n;
            else
                while (j < n && !c_space(s[j]))
                    j++;
            size_t e = j;
            if (left == 0)
                while (e > i && c_space(s[e - 1]))
                    e--;
            json_array_append_new(out, json_stringn_nocheck(s + i, e - i));
            if (left > 0) left--;
            i = j;
        }
        return out;
    }
    if (!json_is_string(sep) || json_string_length(sep) == 0) {
        json_decref(out);
        rfail(r, SD_ERR_ARG, 0, "split: the separator must be a non-empty string");
        return NULL;
    }
    const char *f = json_string_value(sep);
    size_t fn = json_string_length(sep), i = 0;
    for (;;) {
        const char *hit = left != 0 ? memmem(s + i, n - i, f, fn) : NULL;
        if (!hit) {
            json_array_append_new(out, json_stringn_nocheck(s + i, n - i));
            break;
        }
        json_array_append_new(out, json_stringn_nocheck(s + i, (size_t)(hit - (s + i))));
        i = (size_t)(hit - s) + fn;
        if (left > 0) left--;
    }
    return out;
}

static int starts_ends(const json_t *v, const json_t *x, int ends) {
    if (x && json_is_array(x)) {
        for (size_t i = 0; i < json_array_size(x); i++)
            if (starts_ends(v, json_array_get(x, i), ends)) return 1;
        return 0;
    }
    if (!x || !json_is_string(x)) return 0;
    size_t n = json_string_length(v), k = json_string_length(x);
    if (k > n) return 0;
    return memcmp(json_string_value(v) + (ends ? n - k : 0), json_string_value(x), k) == 0;
}

static json_t *join(R *r, const json_t *list, const json_t *sep, const json_t *attr) {
    json_t *items = iter_list(r, list, 0);
    if (!items) return NULL;
    obuf o = {0};
    ob_add(r, &o, "", 0);
    for (size_t i = 0; i < json_array_size(items) && !r->failed; i++) {
        if (i && sep) to_str(r, &o, sep);
        json_t *x = json_array_get(items, i);
        if (attr && json_is_string(attr)) x = json_object_get(x, json_string_value(attr));
        to_str(r, &o, x);
    }
    json_decref(items);
    return ob_take(r, &o);
}

static json_t *apply_filter(R *r, const char *name, json_t *v, const args *a, int line);

/* select / reject / selectattr / rejectattr */
static json_t *select_items(R *r, const char *name, const json_t *v, const args *a, int line) {
    const int by_attr = strstr(name, "attr") != NULL, keep = name[0] == 's';
    json_t *items = iter_list(r, v, line);
    if (!items) return NULL;
    json_t *out = json_array();
    const json_t *attr = by_attr ? arg(a, 0, NULL) : NULL;
    const json_t *test = arg(a, by_attr ? 1 : 0, NULL);
    if (by_attr && (!attr || !json_is_string(attr))) {
        json_decref(items);
        json_decref(out);
        rfail(r, SD_ERR_ARG, line, "%s needs an attribute name", name);
        return NULL;
    }
    if (test && !json_is_string(test)) {
        json_decref(items);
        json_decref(out);
        rfail(r, SD_ERR_ARG, line, "%s: the test must be a name", name);
        return NULL;
    }
    args ta = {0};
    for (size_t k = (size_t)(by_attr ? 2 : 1); k < a->np; k++)
        ta.pos[ta.np++] = a->pos[k];
    for (size_t i = 0; out && i < json_array_size(items) && !r->failed; i++) {
        json_t *x = json_array_get(items, i);
        const json_t *subj = by_attr ? json_object_get(x, json_string_value(attr)) : x;
        int ok = test ? run_test(r, json_string_value(test), subj, &ta, line) : truthy(subj);
        if (ok == keep && json_array_append(out, x)) break;
    }
    json_decref(items);
    if (r->failed || !out) {
        json_decref(out);
        return out ? NULL : oom(r);
    }
    return out;
}

static json_t *map_items(R *r, const json_t *v, const args *a, int line) {
    json_t *items = iter_list(r, v, line), *out = json_array();
    const json_t *attr = kwarg(a, "attribute"), *fname = arg(a, 0, NULL),
                 *def = kwarg(a, "default");
    if (!items || !out || (!attr && (!fname || !json_is_string(fname)))) {
        json_decref(items);
        json_decref(out);
        if (!r->failed) rfail(r, SD_ERR_ARG, line, "map needs attribute= or a filter name");
        return NULL;
    }
    for (size_t i = 0; i < json_array_size(items) && !r->failed; i++) {
        json_t *x = json_array_get(items, i), *y;
        if (attr) {
            y = json_is_string(attr) ? get_attr(x, json_string_value(attr)) : NULL;
            if (!y && def) y = json_incref((json_t *)def);
        } else {
            args fa = {0};
            for (size_t k = 1; k < a->np; k++)
                fa.pos[fa.np++] = a->pos[k];
            y = apply_filter(r, json_string_value(fname), json_incref(x), &fa, line);
        }
        if (r->failed) break;
        if (json_array_append_new(out, y ? y : json_null())) break;
    }
    json_decref(items);
    if (r->failed) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *sort_items(R *r, const json_t *v, const args *a, int line, int dict) {
    json_t *items = dict ? items_of(r, v) : iter_list(r, v, line);
    if (!items) return NULL;
    json_t *out = json_copy(items);
    json_decref(items);
    if (!out) return oom(r);
    const json_t *rev = arg(a, dict ? 1 : 0, "reverse"), *attr = kwarg(a, "attribute");
    const int desc = truthy(rev);
    size_t n = json_array_size(out);
    /* insertion sort: stable, as Python's */
    for (size_t i = 1; i < n && !r->failed; i++) {
        for (size_t j = i; j > 0; j--) {
            if (step(r, line)) break;
            json_t *x = json_array_get(out, j - 1), *y = json_array_get(out, j);
            const json_t *kx = x, *ky = y;
            if (dict) {
                kx = json_array_get(x, 0);
                ky = json_array_get(y, 0);
            } else if (attr && json_is_string(attr)) {
                kx = json_object_get(x, json_string_value(attr));
                ky = json_object_get(y, json_string_value(attr));
            }
            int ok, c = order(kx, ky, &ok);
            if (!ok) {
                rfail(r, SD_ERR_ARG, line, "sort: cannot order a %s and a %s", type_name(kx),
                      type_name(ky));
                break;
            }
            if (desc ? c >= 0 : c <= 0) break;
            json_incref(x);
            json_array_set(out, j - 1, y);
            json_array_set_new(out, j, x);
        }
    }
    if (r->failed) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *apply_filter(R *r, const char *name, json_t *v, const args *a, int line) {
    json_t *res = NULL;
    const json_t *a0 = arg(a, 0, NULL);
    const int is_s = v && json_is_string(v);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const json_t *b = arg(a, 1, "boolean");
        if (!v || (truthy(b) && !truthy(v))) {
            json_decref(v);
            const json_t *dv = arg(a, 0, "default_value");
            return dv ? json_incref((json_t *)dv) : chk(r, json_string(""));
        }
        return v;
    }
    if (!strcmp(name, "safe") || (!strcmp(name, "list") && v && json_is_array(v))) return v;
    if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") ||
        !strcmp(name, "capitalize") || !strcmp(name, "title")) {
        json_t *s = str_of(r, v);
        if (s) {
            if (name[0] == 't' && name[1] == 'r')
                res = strip(r, s, a0, 3);
            else
                res = case_map(r, s,
                               name[0] == 'l'   ? 0
                               : name[0] == 'u' ? 1
                               : name[0] == 'c' ? 2
                                                : 3);
        }
        json_decref(s);
    } else if (!strcmp(name, "tojson")) {
        const json_t *ind = arg(a, 0, "indent");
        obuf o = {0};
        ob_add(r, &o, "", 0);
        to_json(r, &o, v, ind && is_intish(ind) ? (int)clampi(int_of(ind), 0, 64) : -1, 0);
        res = ob_take(r, &o);
    } else if (!strcmp(name, "string")) {
        res = str_of(r, v);
    } else if (!strcmp(name, "length") || !strcmp(name, "count")) {
        size_t n = 0;
        if (is_s)
            n = utf8_len(json_string_value(v), json_string_length(v));
        else if (v && json_is_array(v))
            n = json_array_size(v);
        else if (v && json_is_object(v))
            n = json_object_size(v);
        else if (v) {
            rfail(r, SD_ERR_ARG, line, "a %s has no length", type_name(v));
            json_decref(v);
            return NULL;
        }
        res = chk(r, json_integer((json_int_t)n));
    } else if (!strcmp(name, "join")) {
        res = join(r, v, arg(a, 0, "d"), arg(a, 1, "attribute"));
    } else if (!strcmp(name, "items")) {
        if (!v || json_is_null(v))
            res = chk(r, json_array());
        else if (!json_is_object(v))
            rfail(r, SD_ERR_ARG, line, "items needs a dict, not a %s", type_name(v));
        else
            res = items_of(r, v);
    } else if (!strcmp(name, "dictsort")) {
        if (!v || !json_is_object(v))
            rfail(r, SD_ERR_ARG, line, "dictsort needs a dict, not a %s", type_name(v));
        else
            res = sort_items(r, v, a, line, 1);
    } else if (!strcmp(name, "sort")) {
        res = sort_items(r, v, a, line, 0);
    } else if (!strcmp(name, "replace")) {
        json_t *s = str_of(r, v), *f = str_of(r, a0), *t = str_of(r, arg(a, 1, "new"));
        if (s && f && t) res = replace(r, s, f, t, arg(a, 2, "count"));
        json_decref(s);
        json_decref(f);
        json_decref(t);
    } else if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") ||
               !strcmp(name, "select") || !strcmp(name, "reject")) {
        res = select_items(r, name, v, a, line);
    } else if (!strcmp(name, "map")) {
        res = map_items(r, v, a, line);
    } else if (!strcmp(name, "list")) {
        res = iter_list(r, v, line);
    } else if (!strcmp(name, "first") || !strcmp(name, "last")) {
        json_t *items = iter_list(r, v, line);
        size_t n = items ? json_array_size(items) : 0;
        if (n) res = json_incref(json_array_get(items, name[0] == 'f' ? 0 : n - 1));
        json_decref(items);
    } else if (!strcmp(name, "reverse")) {
        if (is_s) {
            json_t *m1 = json_integer(-1);
            res = m1 ? slice(r, v, NULL, NULL, m1, line) : oom(r);
            json_decref(m1);
        } else {
            json_t *items = iter_list(r, v, line);
            res = items ? json_array() : NULL;
            for (size_t i = items ? json_array_size(items) : 0; res && i > 0; i--)
                json_array_append(res, json_array_get(items, i - 1));
            json_decref(items);
        }
    } else if (!strcmp(name, "unique")) {
        json_t *items = iter_list(r, v, line);
        res = items ? json_array() : NULL;
        for (size_t i = 0; res && i < json_array_size(items); i++) {
            json_t *x = json_array_get(items, i);
            if (!contains(r, res, x, line)) json_array_append(res, x);
        }
        json_decref(items);
    } else if (!strcmp(name, "int")) {
        if (is_num(v))
            res = chk(r, json_integer(int_of(v)));
        else if (is_s) {
            char *end;
            long long x = strtoll(json_string_value(v), &end, 10);
            res = chk(r, json_integer(*end == 0 ? x : (a0 && is_intish(a0) ? int_of(a0) : 0)));
        } else
            res = chk(r, json_integer(a0 && is_intish(a0) ? int_of(a0) : 0));
    } else if (!strcmp(name, "float")) {
        if (is_num(v))
            res = chk(r, json_real(num_of(v)));
        else if (is_s) {
            char *end;
            double x = strtod(json_string_value(v), &end);
            res = chk(r, json_real(*end == 0 ? x : 0.0));
        } else
            res = chk(r, json_real(0.0));
    } else if (!strcmp(name, "abs")) {
        if (!is_num(v))
            rfail(r, SD_ERR_ARG, line, "abs needs a number");
        else
            res = chk(r, is_intish(v) ? json_integer(int_of(v) < 0 ? -int_of(v) : int_of(v))
                                      : json_real(fabs(num_of(v))));
    } else if (!strcmp(name, "round")) {
        const json_t *p = arg(a, 0, "precision");
        double m = pow(10, p && is_intish(p) ? (double)clampi(int_of(p), 0, 15) : 0);
        res = is_num(v) ? chk(r, json_real(nearbyint(num_of(v) * m) / m)) : NULL;
        if (!res && !r->failed) rfail(r, SD_ERR_ARG, line, "round needs a number");
    } else if (!strcmp(name, "sum") || !strcmp(name, "min") || !strcmp(name, "max")) {
        json_t *items = iter_list(r, v, line);
        if (items) {
            if (name[1] == 'u') {
                res = json_integer(0);
                for (size_t i = 0; res && i < json_array_size(items) && !r->failed; i++) {
                    json_t *t = arith(r, OP_ADD, res, json_array_get(items, i), line);
                    json_decref(res);
                    res = t;
                }
            } else {
                for (size_t i = 0; i < json_array_size(items) && !r->failed; i++) {
                    json_t *x = json_array_get(items, i);
                    int ok, c = res ? order(x, res, &ok) : (ok = 1, 0);
                    if (!ok) rfail(r, SD_ERR_ARG, line, "%s: values that cannot be ordered", name);
                    if (!res || (name[1] == 'i' ? c < 0 : c > 0)) {
                        json_decref(res);
                        res = json_incref(x);
                    }
                }
            }
            json_decref(items);
        }
    } else if (!strcmp(name, "indent")) {
        const json_t *w = arg(a, 0, "width"), *first = arg(a, 1, "first"),
                     *blank = arg(a, 2, "blank");
        json_t *s = str_of(r, v);
        obuf pad = {0}, o = {0};
        ob_add(r, &o, "", 0);
        if (w && json_is_string(w))
            to_str(r, &pad, w);
        else
            for (int64_t i = 0; i < (w && is_intish(w) ? clampi(int_of(w), 0, 256) : 4); i++)
                ob_add(r, &pad, " ", 1);
        if (s) {
            const char *p = json_string_value(s), *end = p + json_string_length(s);
            int line0 = 1;
            while (p <= end && !r->failed) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                const char *le = nl ? nl : end;
                int empty = le == p;
                if ((!line0 || truthy(first)) && (!empty || truthy(blank)))
                    ob_add(r, &o, pad.p ? pad.p : "", pad.n);
                ob_add(r, &o, p, (size_t)(le - p));
                if (!nl) break;
                ob_add(r, &o, "\n", 1);
                p = nl + 1;
                line0 = 0;
            }
        }
        free(pad.p);
        json_decref(s);
        res = ob_take(r, &o);
    } else if (!strcmp(name, "escape") || !strcmp(name, "e") || !strcmp(name, "forceescape")) {
        json_t *s = str_of(r, v);
        obuf o = {0};
        ob_add(r, &o, "", 0);
        for (size_t i = 0; s && i < json_string_length(s); i++) {
            char c = json_string_value(s)[i];
            const char *e = c == '&'    ? "&amp;"
                            : c == '<'  ? "&lt;"
                            : c == '>'  ? "&gt;"
                            : c == '"'  ? "&#34;"
                            : c == '\'' ? "&#39;"
                                        : NULL;
            if (e)
                ob_str(r, &o, e);
            else
                ob_add(r, &o, &c, 1);
        }
        json_decref(s);
        res = ob_take(r, &o);
    } else {
        rfail(r, SD_ERR_UNSUPPORTED, line, "unknown filter '%s'", name);
    }
    json_decref(v);
    if (!res && !r->failed && strcmp(name, "first") && strcmp(name, "last") &&
        strcmp(name, "min") && strcmp(name, "max"))
        oom(r);
    return res;
}

/* obj.name(args): string, dict and list methods. *handled = 0 when there is no such method. */
static json_t *call_method(R *r, json_t *obj, const char *name, const args *a, int line,
                           int *handled) {
    const json_t *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    *handled = 1;
    if (obj && json_is_string(obj)) {
        if (!strcmp(name, "strip")) return strip(r, obj, a0, 3);
        if (!strcmp(name, "lstrip")) return strip(r, obj, a0, 1);
        if (!strcmp(name, "rstrip")) return strip(r, obj, a0, 2);
        if (!strcmp(name, "lower")) return case_map(r, obj, 0);
        if (!strcmp(name, "upper")) return case_map(r, obj, 1);
        if (!strcmp(name, "capitalize")) return case_map(r, obj, 2);
        if (!strcmp(name, "title")) return case_map(r, obj, 3);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
            return chk(r, json_boolean(starts_ends(obj, a0, name[0] == 'e')));
        if (!strcmp(name, "split")) return split(r, obj, arg(a, 0, "sep"), arg(a, 1, "maxsplit"));
        if (!strcmp(name, "splitlines")) {
            json_t *nl = json_string("\n"), *parts = nl ? split(r, obj, nl, NULL) : oom(r);
            json_decref(nl);
            size_t n = parts ? json_array_size(parts) : 0;
            if (n && json_string_length(json_array_get(parts, n - 1)) == 0)
                json_array_remove(parts, n - 1);
            return parts;
        }
        if (!strcmp(name, "replace")) {
            if (!a0 || !a1 || !json_is_string(a0) || !json_is_string(a1)) {
                rfail(r, SD_ERR_ARG, line, "replace needs two strings");
                return NULL;
            }
            return replace(r, obj, a0, a1, arg(a, 2, NULL));
        }
        if (!strcmp(name, "find") || !strcmp(name, "count")) {
            if (!a0 || !json_is_string(a0)) {
                rfail(r, SD_ERR_ARG, line, "%s needs a string", name);
                return NULL;
            }
            const char *s = json_string_value(obj), *f = json_string_value(a0);
            size_t n = json_string_length(obj), fn = json_string_length(a0);
            if (name[0] == 'f') {
                const char *h = memmem(s, n, f, fn);
                return chk(r, json_integer(h ? (json_int_t)utf8_len(s, (size_t)(h - s)) : -1));
            }
            json_int_t c = 0;
            for (size_t i = 0; fn && i + fn <= n;) {
                const char *h = memmem(s + i, n - i, f, fn);
                if (!h) break;
                c++;
                i = (size_t)(h - s) + fn;
            }
            return chk(r, json_integer(fn ? c : (json_int_t)utf8_len(s, n) + 1));
        }
        if (!strcmp(name, "join")) return join(r, a0, obj, NULL);
    } else if (obj && json_is_object(obj)) {
        if (!strcmp(name, "items")) return items_of(r, obj);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            json_t *out = json_array();
            const char *k;
            json_t *x;
            json_object_foreach(obj, k, x) {
                if (!out ||
                    json_array_append_new(out, name[0] == 'k' ? json_string(k) : json_incref(x))) {
                    json_decref(out);
                    return oom(r);
                }
            }
            return out;
        }
        if (!strcmp(name, "get")) {
            json_t *v =
                a0 && json_is_string(a0) ? json_object_get(obj, json_string_value(a0)) : NULL;
            if (v) return json_incref(v);
            return a1 ? json_incref((json_t *)a1) : chk(r, json_null());
        }
    } else if (obj && json_is_array(obj)) {
        if ((!strcmp(name, "append") || !strcmp(name, "extend")) && holds(a0, obj, 0)) {
            rfail(r, SD_ERR_ARG, line, "a list cannot hold itself");
            return NULL;
        }
        if (!strcmp(name, "append")) {
            if (json_array_append(obj, a0 ? (json_t *)a0 : json_null())) return oom(r);
            return chk(r, json_null());
        }
        if (!strcmp(name, "extend")) {
            if (!a0 || !json_is_array(a0)) {
                rfail(r, SD_ERR_ARG, line, "extend needs a list");
                return NULL;
            }
            if (json_array_extend(obj, (json_t *)a0)) return oom(r);
            return chk(r, json_null());
        }
        if (!strcmp(name, "pop")) {
            int64_t n = (int64_t)json_array_size(obj), i = a0 && is_intish(a0) ? int_of(a0) : n - 1;
            if (i < 0) i += n;
            if (i < 0 || i >= n) {
                rfail(r, SD_ERR_ARG, line, "pop index out of range");
                return NULL;
            }
            json_t *v = json_incref(json_array_get(obj, (size_t)i));
            json_array_remove(obj, (size_t)i);
            return v;
        }
        if (!strcmp(name, "index")) {
            for (size_t i = 0; i < json_array_size(obj); i++)
                if (equal(json_array_get(obj, i), a0)) return chk(r, json_integer((json_int_t)i));
            rfail(r, SD_ERR_ARG, line, "index: the value is not in the list");
            return NULL;
        }
    }
    *handled = 0;
    return NULL;
}

/* ------------------------------------------------------------------ calls */

static json_t *call_macro(R *r, const jnode *m, const args *a, int line) {
    if (r->nf >= (int)(sizeof r->frames / sizeof r->frames[0]) || r->depth > r->lim.max_depth) {
        rfail(r, SD_ERR_ARG, line, "macro calls nested deeper than %d", r->lim.max_depth);
        return NULL;
    }
    if (a->np > m->nn) {
        rfail(r, SD_ERR_ARG, line, "macro '%s' takes %zu arguments, %zu given", m->s, m->nn, a->np);
        return NULL;
    }
    json_t *frame = json_object();
    if (!frame) return oom(r);
    r->frames[r->nf++] = frame;
    for (size_t i = 0; i < m->nn && !r->failed; i++) {
        json_t *v = arg(a, i, m->names[i]);
        if (v)
            json_object_set(frame, m->names[i], v);
        else if (m->kids[i]) {
            json_t *d = ev(r, m->kids[i]);
            if (d) json_object_set_new(frame, m->names[i], d);
        }
    }
    obuf *saved = r->out, body = {0};
    r->out = &body;
    ob_add(r, &body, "", 0);
    r->depth++;
    exec_body(r, m->b);
    r->depth--;
    r->out = saved;
    r->nf--;
    json_decref(frame);
    return ob_take(r, &body);
}

static json_t *strftime_now(R *r, const json_t *fmt, int line) {
    if (!fmt || !json_is_string(fmt)) {
        rfail(r, SD_ERR_ARG, line, "strftime_now needs a format string");
        return NULL;
    }
    time_t now = r->lim.now ? (time_t)r->lim.now : time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm)) {
        rfail(r, SD_ERR_ARG, line, "strftime_now: no local time");
        return NULL;
    }
    char buf[256];
    size_t n =
        json_string_length(fmt) < 128 ? strftime(buf, sizeof buf, json_string_value(fmt), &tm) : 0;
    if (n == 0 && json_string_length(fmt) > 0) {
        rfail(r, SD_ERR_ARG, line, "strftime_now: a format too long");
        return NULL;
    }
    return chk(r, json_stringn(buf, n));
}

static json_t *call_global(R *r, const char *name, const args *a, int line, int *handled) {
    *handled = 1;
    if (!strcmp(name, "raise_exception")) {
        const json_t *m = arg(a, 0, NULL);
        obuf o = {0};
        to_str(r, &o, m);
        if (!r->failed)
            rfail(r, SD_ERR_ARG, line, "raise_exception: %.*s", (int)(o.n > 180 ? 180 : o.n),
                  o.p ? o.p : "");
        free(o.p);
        return NULL;
    }
    if (!strcmp(name, "strftime_now")) return strftime_now(r, arg(a, 0, NULL), line);
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        json_t *o = json_object();
        if (!o) return oom(r);
        if (a->np && a->pos[0] && json_is_object(a->pos[0])) json_object_update(o, a->pos[0]);
        for (size_t i = 0; i < a->nkw; i++)
            if (json_object_set(o, a->kwn[i], a->kwv[i] ? a->kwv[i] : json_null())) {
                json_decref(o);
                return oom(r);
            }
        return o;
    }
    if (!strcmp(name, "range")) {
        int64_t b = 0, e = 0, s = 1;
        for (size_t i = 0; i < a->np; i++)
            if (!is_intish(a->pos[i])) {
                rfail(r, SD_ERR_ARG, line, "range needs integers");
                return NULL;
            }
        if (a->np == 1) e = int_of(a->pos[0]);
        if (a->np >= 2) {
            b = int_of(a->pos[0]);
            e = int_of(a->pos[1]);
        }
        if (a->np >= 3) s = int_of(a->pos[2]);
        if (a->np == 0 || a->np > 3 || s == 0 || s == INT64_MIN) {
            rfail(r, SD_ERR_ARG, line, "range takes 1 to 3 integers (a non-zero step)");
            return NULL;
        }
        /* a range is built whole: bound its length (memory), as the steps bound time */
        const double count =
            s > 0 ? ((double)e - (double)b) / (double)s : ((double)b - (double)e) / (double)-s;
        if (count > SD_JINJA_MAX_RANGE) {
            rfail(r, SD_ERR_ARG, line, "range of more than %d items", SD_JINJA_MAX_RANGE);
            return NULL;
        }
        json_t *out = json_array();
        for (int64_t i = b; out && (s > 0 ? i < e : i > e);) {
            if (step(r, line) || json_array_append_new(out, json_integer(i))) break;
            if (s > 0 ? i > INT64_MAX - s : i < INT64_MIN - s) break; /* the next is past e */
            i += s;
        }
        if (!out || r->failed) {
            json_decref(out);
            return out ? NULL : oom(r);
        }
        return out;
    }
    *handled = 0;
    return NULL;
}

static int is_callable_name(const R *r, const char *name) {
    static const char *const globals[] = {"raise_exception", "strftime_now", "namespace", "dict",
                                          "range"};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (!strcmp(name, globals[i])) return 1;
    for (int i = 0; i < r->nm; i++)
        if (!strcmp(r->macros[i]->s, name)) return 1;
    return 0;
}

static json_t *ev_call(R *r, const jnode *n) {
    const jnode *f = n->a;
    args a;
    if (f->kind == N_NAME) {
        json_t *var = lookup(r, f->s);
        if (!var) {
            for (int i = r->nm - 1; i >= 0; i--)
                if (!strcmp(r->macros[i]->s, f->s)) {
                    if (eval_args(r, n, NULL, &a)) return NULL;
                    json_t *v = call_macro(r, r->macros[i], &a, n->line);
                    args_free(&a);
                    return v;
                }
            if (eval_args(r, n, NULL, &a)) return NULL;
            int handled;
            json_t *v = call_global(r, f->s, &a, n->line, &handled);
            args_free(&a);
            if (!handled) rfail(r, SD_ERR_UNSUPPORTED, n->line, "unknown function '%s'", f->s);
            return v;
        }
    }
    if (f->kind == N_ATTR) {
        json_t *obj = ev(r, f->a);
        if (r->failed) return NULL;
        if (obj && json_is_object(obj) && !strcmp(f->s, "cycle") &&
            json_is_integer(json_object_get(obj, "index0"))) {
            /* loop.cycle(a, b, ...) */
            if (eval_args(r, n, NULL, &a)) {
                json_decref(obj);
                return NULL;
            }
            json_t *v =
                a.np ? json_incref(a.pos[int_of(json_object_get(obj, "index0")) % (int64_t)a.np])
                     : NULL;
            args_free(&a);
            json_decref(obj);
            return v;
        }
        if (eval_args(r, n, NULL, &a)) {
            json_decref(obj);
            return NULL;
        }
        int handled;
        json_t *v = call_method(r, obj, f->s, &a, n->line, &handled);
        if (!handled && !r->failed)
            rfail(r, SD_ERR_UNSUPPORTED, n->line, "a %s has no method '%s'", type_name(obj), f->s);
        args_free(&a);
        json_decref(obj);
        return v;
    }
    rfail(r, SD_ERR_UNSUPPORTED, n->line, "this value cannot be called");
    return NULL;
}

static json_t *ev_inner(R *r, const jnode *n) {
    switch (n->kind) {
    case N_LIT:
        return json_incref(n->lit);
    case N_NAME:
        return json_incref(lookup(r, n->s));
    case N_ATTR: {
        json_t *o = ev(r, n->a), *v = get_attr(o, n->s);
        if (!v && o && json_is_array(o) && n->s[0] >= '0' && n->s[0] <= '9') {
            json_t *k = json_integer(strtoll(n->s, NULL, 10));
            v = k ? get_index(r, o, k, n->line) : oom(r);
            json_decref(k);
        }
        json_decref(o);
        return v;
    }
    case N_INDEX: {
        json_t *o = ev(r, n->a), *k = r->failed ? NULL : ev(r, n->b);
        json_t *v = r->failed ? NULL : get_index(r, o, k, n->line);
        json_decref(o);
        json_decref(k);
        return v;
    }
    case N_SLICE: {
        json_t *o = ev(r, n->a), *b = n->b ? ev(r, n->b) : NULL, *e = n->c ? ev(r, n->c) : NULL,
               *s = n->d ? ev(r, n->d) : NULL;
        json_t *v = r->failed ? NULL : slice(r, o, b, e, s, n->line);
        json_decref(o);
        json_decref(b);
        json_decref(e);
        json_decref(s);
        return v;
    }
    case N_CALL:
        return ev_call(r, n);
    case N_FILTER: {
        json_t *v = ev(r, n->a);
        args a;
        if (r->failed || eval_args(r, n, NULL, &a)) {
            json_decref(v);
            return NULL;
        }
        json_t *out = apply_filter(r, n->s, v, &a, n->line);
        args_free(&a);
        return out;
    }
    case N_TEST: {
        /* a global function or a macro is defined (`strftime_now is defined`) */
        if (n->a->kind == N_NAME && (!strcmp(n->s, "defined") || !strcmp(n->s, "undefined")) &&
            !lookup(r, n->a->s) && is_callable_name(r, n->a->s))
            return chk(r, json_boolean((n->s[0] == 'd') != n->neg));
        json_t *v = ev(r, n->a);
        args a;
        if (r->failed || eval_args(r, n, NULL, &a)) {
            json_decref(v);
            return NULL;
        }
        int t = run_test(r, n->s, v, &a, n->line);
        args_free(&a);
        json_decref(v);
        return r->failed ? NULL : chk(r, json_boolean(n->neg ? !t : t));
    }
    case N_NOT: {
        json_t *v = ev(r, n->a);
        int t = truthy(v);
        json_decref(v);
        return r->failed ? NULL : chk(r, json_boolean(!t));
    }
    case N_NEG:
    case N_POS: {
        json_t *v = ev(r, n->a);
        if (r->failed) return NULL;
        if (!is_num(v)) {
            rfail(r, SD_ERR_ARG, n->line, "unary %c needs a number, not a %s",
                  n->kind == N_NEG ? '-' : '+', type_name(v));
            json_decref(v);
            return NULL;
        }
        json_t *out = n->kind == N_POS ? json_incref(v)
                      : is_intish(v)   ? json_integer((json_int_t)(0 - (uint64_t)int_of(v)))
                                       : json_real(-num_of(v));
        json_decref(v);
        return chk(r, out);
    }
    case N_AND:
    case N_OR: {
        json_t *v = ev(r, n->a);
        if (r->failed) return NULL;
        if (truthy(v) == (n->kind == N_OR)) return v;
        json_decref(v);
        return ev(r, n->b);
    }
    case N_BIN: {
        json_t *a = ev(r, n->a), *b = r->failed ? NULL : ev(r, n->b), *v = NULL;
        if (!r->failed) {
            int ok, c;
            switch (n->op) {
            case OP_EQ:
                v = json_boolean(equal(a, b));
                break;
            case OP_NE:
                v = json_boolean(!equal(a, b));
                break;
            case OP_LT:
            case OP_LE:
            case OP_GT:
            case OP_GE:
                c = order(a, b, &ok);
                if (!ok) {
                    rfail(r, SD_ERR_ARG, n->line, "cannot compare a %s and a %s", type_name(a),
                          type_name(b));
                    break;
                }
                v = json_boolean(n->op == OP_LT   ? c < 0
                                 : n->op == OP_LE ? c <= 0
                                 : n->op == OP_GT ? c > 0
                                                  : c >= 0);
                break;
            case OP_IN:
            case OP_NOTIN: {
                int t = contains(r, b, a, n->line);
                v = r->failed ? NULL : json_boolean(n->op == OP_IN ? t : !t);
                break;
            }
            default:
                v = arith(r, n->op, a, b, n->line);
                break;
            }
            if (!v && !r->failed) oom(r);
        }
        json_decref(a);
        json_decref(b);
        return v;
    }
    case N_COND: {
        json_t *c = ev(r, n->b);
        int t = truthy(c);
        json_decref(c);
        if (r->failed) return NULL;
        if (t) return ev(r, n->a);
        return n->c ? ev(r, n->c) : NULL;
    }
    case N_LIST: {
        json_t *out = json_array();
        if (!out) return oom(r);
        for (size_t i = 0; i < n->nk && !r->failed; i++) {
            json_t *v = ev(r, n->kids[i]);
            if (!r->failed && json_array_append_new(out, v ? v : json_null())) oom(r);
        }
        if (r->failed) {
            json_decref(out);
            return NULL;
        }
        return out;
    }
    case N_DICT: {
        json_t *out = json_object();
        if (!out) return oom(r);
        for (size_t i = 0; i + 1 < n->nk && !r->failed; i += 2) {
            json_t *k = ev(r, n->kids[i]), *v = r->failed ? NULL : ev(r, n->kids[i + 1]);
            json_t *ks = r->failed ? NULL : str_of(r, k);
            if (ks && json_object_setn_new(out, json_string_value(ks), json_string_length(ks),
                                           v ? v : json_null()))
                oom(r);
            else if (!ks)
                json_decref(v);
            json_decref(ks);
            json_decref(k);
        }
        if (r->failed) {
            json_decref(out);
            return NULL;
        }
        return out;
    }
    default:
        rfail(r, SD_ERR_UNSUPPORTED, n->line, "a statement where an expression belongs");
        return NULL;
    }
}

static json_t *ev(R *r, const jnode *n) {
    if (step(r, n->line)) return NULL;
    if (++r->depth > r->lim.max_depth) {
        rfail(r, SD_ERR_ARG, n->line, "expressions nested deeper than %d", r->lim.max_depth);
        r->depth--;
        return NULL;
    }
    json_t *v = ev_inner(r, n);
    r->depth--;
    if (r->failed) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------------ statements */

enum { FLOW_NONE = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static int set_var(R *r, const char *name, json_t *v) {
    if (json_object_set_new(r->frames[r->nf - 1], name, v ? v : json_null())) {
        oom(r);
        return -1;
    }
    return 0;
}

static int exec_for(R *r, const jnode *n) {
    json_t *src = ev(r, n->a);
    if (r->failed) return -1;
    json_t *all = iter_list(r, src, n->line);
    json_decref(src);
    if (!all) return -1;
    json_t *items = all;
    if (n->d) { /* the loop filter runs before the loop (loop.length counts what passes) */
        items = json_array();
        if (!items) {
            json_decref(all);
            oom(r);
            return -1;
        }
        json_t *frame = json_object();
        if (!frame || r->nf >= (int)(sizeof r->frames / sizeof r->frames[0])) {
            json_decref(frame);
            json_decref(all);
            json_decref(items);
            rfail(r, SD_ERR_ARG, n->line, "scopes nested too deep");
            return -1;
        }
        r->frames[r->nf++] = frame;
        for (size_t i = 0; i < json_array_size(all) && !r->failed; i++) {
            json_t *x = json_array_get(all, i);
            if (n->nn == 1)
                set_var(r, n->names[0], json_incref(x));
            else
                for (size_t k = 0; k < n->nn; k++)
                    set_var(r, n->names[k], json_incref(json_array_get(x, k)));
            json_t *c = ev(r, n->d);
            if (truthy(c)) json_array_append(items, x);
            json_decref(c);
        }
        r->nf--;
        json_decref(frame);
        json_decref(all);
        if (r->failed) {
            json_decref(items);
            return -1;
        }
    }
    const size_t len = json_array_size(items);
    json_t *frame = json_object();
    if (!frame || r->nf >= (int)(sizeof r->frames / sizeof r->frames[0])) {
        json_decref(frame);
        json_decref(items);
        rfail(r, SD_ERR_ARG, n->line, "scopes nested too deep");
        return -1;
    }
    r->frames[r->nf++] = frame;
    for (size_t i = 0; i < len && !r->failed; i++) {
        if (step(r, n->line)) break;
        json_t *x = json_array_get(items, i);
        if (n->nn == 1) {
            set_var(r, n->names[0], json_incref(x));
        } else {
            if (!json_is_array(x) || json_array_size(x) != n->nn) {
                rfail(r, SD_ERR_ARG, n->line, "cannot unpack a %s into %zu names", type_name(x),
                      n->nn);
                break;
            }
            for (size_t k = 0; k < n->nn; k++)
                set_var(r, n->names[k], json_incref(json_array_get(x, k)));
        }
        json_t *loop = json_pack("{s:I,s:I,s:I,s:I,s:b,s:b,s:I}", "index", (json_int_t)i + 1,
                                 "index0", (json_int_t)i, "revindex", (json_int_t)(len - i),
                                 "revindex0", (json_int_t)(len - i - 1), "first", i == 0, "last",
                                 i + 1 == len, "length", (json_int_t)len);
        if (!loop) {
            oom(r);
            break;
        }
        if (i > 0) json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (i + 1 < len) json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        set_var(r, "loop", loop);
        int rc = exec_body(r, n->b);
        if (rc == FLOW_BREAK) break;
    }
    r->nf--;
    json_decref(frame);
    json_decref(items);
    if (r->failed) return -1;
    if (len == 0 && n->c) return exec_body(r, n->c);
    return 0;
}

static int exec_stmt(R *r, const jnode *n) {
    if (step(r, n->line)) return -1;
    switch (n->kind) {
    case N_TEXT:
        return ob_add(r, r->out, n->s, n->slen);
    case N_OUT: {
        json_t *v = ev(r, n->a);
        if (!r->failed) to_str(r, r->out, v);
        json_decref(v);
        return r->failed ? -1 : 0;
    }
    case N_IF:
        for (size_t i = 0; i + 1 < n->nk; i += 2) {
            json_t *c = ev(r, n->kids[i]);
            int t = truthy(c);
            json_decref(c);
            if (r->failed) return -1;
            if (t) return exec_body(r, n->kids[i + 1]);
        }
        return n->c ? exec_body(r, n->c) : 0;
    case N_FOR:
        return exec_for(r, n);
    case N_SET: {
        json_t *v;
        if (n->a) {
            v = ev(r, n->a);
        } else {
            obuf *saved = r->out, body = {0};
            r->out = &body;
            ob_add(r, &body, "", 0);
            exec_body(r, n->b);
            r->out = saved;
            v = ob_take(r, &body);
        }
        if (r->failed) {
            json_decref(v);
            return -1;
        }
        if (n->s) {
            json_t *obj = lookup(r, n->names[0]);
            if (!obj || !json_is_object(obj)) {
                json_decref(v);
                rfail(r, SD_ERR_ARG, n->line, "cannot set an attribute of '%s' (a %s)", n->names[0],
                      type_name(obj));
                return -1;
            }
            if (holds(v, obj, 0)) {
                json_decref(v);
                rfail(r, SD_ERR_ARG, n->line, "'%s' cannot hold itself", n->names[0]);
                return -1;
            }
            if (json_object_set_new(obj, n->s, v ? v : json_null())) {
                oom(r);
                return -1;
            }
            return 0;
        }
        return set_var(r, n->names[0], v);
    }
    case N_MACRO:
        if (r->nm >= (int)(sizeof r->macros / sizeof r->macros[0])) {
            rfail(r, SD_ERR_ARG, n->line, "more than %zu macros",
                  sizeof r->macros / sizeof r->macros[0]);
            return -1;
        }
        r->macros[r->nm++] = n;
        return 0;
    case N_BREAK:
        return FLOW_BREAK;
    case N_CONTINUE:
        return FLOW_CONTINUE;
    case N_BODY:
        return exec_body(r, n);
    case N_FILTERBLK: {
        obuf *saved = r->out, body = {0};
        r->out = &body;
        ob_add(r, &body, "", 0);
        exec_body(r, n->b);
        r->out = saved;
        json_t *s = ob_take(r, &body);
        args a;
        if (r->failed || eval_args(r, n->a, NULL, &a)) {
            json_decref(s);
            return -1;
        }
        json_t *v = apply_filter(r, n->a->s, s, &a, n->line);
        args_free(&a);
        if (!r->failed) to_str(r, r->out, v);
        json_decref(v);
        return r->failed ? -1 : 0;
    }
    default:
        rfail(r, SD_ERR_UNSUPPORTED, n->line, "an expression where a statement belongs");
        return -1;
    }
}

static int exec_body(R *r, const jnode *body) {
    if (++r->depth > r->lim.max_depth) {
        rfail(r, SD_ERR_ARG, body->line, "blocks nested deeper than %d", r->lim.max_depth);
        r->depth--;
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < body->nk; i++) {
        rc = exec_stmt(r, body->kids[i]);
        if (rc != 0) break;
    }
    r->depth--;
    return r->failed ? -1 : rc;
}

int sd_jinja_render(const sd_jinja *t, const json_t *vars, const sd_jinja_limits *lim, char **out,
                    size_t *out_len, sd_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !t->root) return sd_errorf(err, SD_ERR_ARG, "jinja: no template");
    if (vars && !json_is_object(vars))
        return sd_errorf(err, SD_ERR_ARG, "jinja: the variables must be a JSON object");
    R *r = calloc(1, sizeof *r);
    if (!r) return sd_errorf(err, SD_ERR_OOM, "jinja: out of memory");
    r->lim = lim ? *lim : sd_jinja_default_limits();
    if (r->lim.max_depth <= 0) r->lim.max_depth = 1;
    r->err = err;
    json_t *globals = vars ? json_deep_copy(vars) : json_object();
    obuf o = {0};
    r->out = &o;
    if (!globals) {
        oom(r);
    } else {
        r->frames[r->nf++] = globals;
        ob_add(r, &o, "", 0);
        exec_body(r, t->root);
    }
    json_decref(globals);
    const int failed = r->failed;
    const int st = failed && err ? (int)err->status : failed ? SD_ERR_FORMAT : SD_OK;
    free(r);
    if (failed) {
        free(o.p);
        return st;
    }
    *out = o.p;
    if (out_len) *out_len = o.n;
    return SD_OK;
}
