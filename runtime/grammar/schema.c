/* runtime/grammar/schema.c: JSON Schema -> GBNF (sd_json_schema_to_gbnf, sd_grammar.h). One pass
 * over the schema builds named rules (deduplicated by body); $refs get their rule name before their
 * body is built, so recursive schemas terminate. Every keyword is either handled, an annotation, or
 * refused by name. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/sd_base.h"
#include "runtime/grammar/sd_grammar.h"

/* Largest integer magnitude the grammars produce: 15 digits. */
#define SC_INT_LIMIT  999999999999999LL
#define SC_MAX_DEPTH  64
#define SC_MAX_VISITS 20000 /* subschemas converted in one schema (each repeat counts) */
#define SC_MAX_RULES  4096

/* The shared rules, emitted once each when used. */
#define SC_WS "ws ::= | \" \" | \"\\n\" [ ]{0,16}\n"
#define SC_CHAR                                                                                    \
    "char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] "    \
    "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n"
#define SC_VALUE                                                                                   \
    "value ::= object | array | string | number | boolean | null\n"                                \
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* " \
    ")? \"}\"\n"                                                                                   \
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"                              \
    "string ::= \"\\\"\" char* \"\\\"\"\n"                                                         \
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14}) (\".\" [0-9]{1,16})? ([eE] [-+]? "              \
    "[0-9]{1,3})?\n"                                                                               \
    "boolean ::= \"true\" | \"false\"\n"                                                           \
    "null ::= \"null\"\n"

enum { USE_WS = 1, USE_CHAR = 2, USE_VALUE = 4 };

typedef struct sb {
    char *p;
    size_t len, cap;
    int oom;
} sb;

static void sb_addn(sb *b, const char *s, size_t n) {
    if (!b->oom && sd_buf_append(&b->p, &b->len, &b->cap, s, n)) b->oom = 1;
}
static void sb_add(sb *b, const char *s) {
    sb_addn(b, s, strlen(s));
}
static void sb_addf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_addf(sb *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = 1;
        return;
    }
    sb_addn(b, tmp, (size_t)n);
}

typedef struct sc_rule {
    char *name, *body; /* body NULL: reserved ($ref being built) */
} sc_rule;

typedef struct sc_ref {
    char *ref, *name;
} sc_ref;

typedef struct conv {
    json_t *root;
    sc_rule *rules;
    size_t n_rules, cap_rules;
    sc_ref *refs;
    size_t n_refs, cap_refs;
    unsigned use;
    char path[512]; /* the JSON pointer of the schema being visited */
    int depth;
    long visits; /* subschemas converted: bounded (repeated subschemas multiply the work) */
    sd_error *err;
    int status; /* the first failure's status */
} conv;

static int fail(conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(conv *c, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->status) c->status = SD_ERR_ARG;
    /* One line: a control byte of a key or value (and of the path) shown as \xNN. */
    char line[sizeof msg + sizeof c->path + 16], shown[4 * sizeof line];
    snprintf(line, sizeof line, "%s: %s", c->path, msg);
    return sd_errorf(c->err, SD_ERR_ARG, "json_schema: %s", sd_one_line(line, shown, sizeof shown));
}

static int oom(conv *c) {
    if (!c->status) c->status = SD_ERR_OOM;
    return sd_errorf(c->err, SD_ERR_OOM, "json_schema: out of memory");
}

/* Path helpers: push "/seg" (returns the old length to pop to). */
static size_t path_push(conv *c, const char *seg) {
    const size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s", seg);
    return old;
}
static void path_pop(conv *c, size_t old) {
    c->path[old] = '\0';
}

/* ---- GBNF text ---- */

/* A GBNF string literal of s[0 .. n). */
static void lit(sb *o, const char *s, size_t n) {
    sb_add(o, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"')
            sb_add(o, "\\\"");
        else if (ch == '\\')
            sb_add(o, "\\\\");
        else if (ch == '\n')
            sb_add(o, "\\n");
        else if (ch == '\r')
            sb_add(o, "\\r");
        else if (ch == '\t')
            sb_add(o, "\\t");
        else if (ch < 0x20 || ch == 0x7F)
            sb_addf(o, "\\x%02X", ch);
        else
            sb_addn(o, (const char *)&ch, 1);
    }
    sb_add(o, "\"");
}

/* The literal of a JSON value, compact (how it appears in the output). */
static int lit_json(conv *c, sb *o, json_t *v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return oom(c);
    lit(o, t, strlen(t));
    free(t);
    return 0;
}

/* A character of a GBNF class (code point cp), escaped where needed. */
static void class_char(sb *o, unsigned cp) {
    if (cp == '\\' || cp == ']' || cp == '[' || cp == '^' || cp == '-') {
        char t[3] = {'\\', (char)cp, 0};
        sb_add(o, t);
    } else if (cp < 0x20 || cp == 0x7F) {
        sb_addf(o, "\\x%02X", cp);
    } else if (cp < 0x80) {
        char t[2] = {(char)cp, 0};
        sb_add(o, t);
    } else if (cp <= 0xFFFF) {
        sb_addf(o, "\\u%04X", cp);
    } else {
        sb_addf(o, "\\U%08X", cp);
    }
}

/* ---- rules ---- */

static int name_taken(conv *c, const char *name) {
    for (size_t i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) return 1;
    return !strcmp(name, "ws") || !strcmp(name, "char") || !strcmp(name, "value") ||
           !strcmp(name, "object") || !strcmp(name, "array") || !strcmp(name, "string") ||
           !strcmp(name, "number") || !strcmp(name, "boolean") || !strcmp(name, "null");
}

/* A fresh rule name from hint ([a-zA-Z0-9-], other characters become '-'). */
static char *fresh_name(conv *c, const char *hint) {
    char base[64];
    size_t n = 0;
    for (const char *p = hint; *p && n < 40; p++) {
        const char ch = *p;
        const int ok =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (ok)
            base[n++] = ch;
        else if (n > 0 && base[n - 1] != '-')
            base[n++] = '-';
    }
    while (n > 0 && base[n - 1] == '-')
        n--;
    if (n == 0) {
        memcpy(base, "r", 1);
        n = 1;
    }
    base[n] = '\0';
    char name[80];
    snprintf(name, sizeof name, "%s", base);
    for (int k = 1; name_taken(c, name); k++)
        snprintf(name, sizeof name, "%s-%d", base, k);
    return strdup(name);
}

/* Reserve a rule named after hint (body set later). Its index, or -1 (err set). */
static long reserve(conv *c, const char *hint) {
    if (c->n_rules >= SC_MAX_RULES)
        return fail(c, "the grammar needs more than %d rules", SC_MAX_RULES), -1;
    if (c->n_rules == c->cap_rules) {
        size_t cap = c->cap_rules ? 2 * c->cap_rules : 32;
        sc_rule *r = realloc(c->rules, cap * sizeof *r);
        if (!r) return oom(c), -1;
        c->rules = r;
        c->cap_rules = cap;
    }
    char *name = fresh_name(c, hint);
    if (!name) return oom(c), -1;
    c->rules[c->n_rules].name = name;
    c->rules[c->n_rules].body = NULL;
    return (long)c->n_rules++;
}

/* A rule with body b (taken; b->p freed): an existing rule of the same body is reused.
 * Its name into *name (points into the rule table), or NULL on failure. */
static const char *add_rule(conv *c, const char *hint, sb *b) {
    if (b->oom) {
        free(b->p);
        oom(c);
        return NULL;
    }
    for (size_t i = 0; i < c->n_rules; i++)
        if (c->rules[i].body && !strcmp(c->rules[i].body, b->p)) {
            free(b->p);
            return c->rules[i].name;
        }
    long k = reserve(c, hint);
    if (k < 0) {
        free(b->p);
        return NULL;
    }
    c->rules[k].body = b->p;
    return c->rules[k].name;
}

/* ---- numbers ---- */

static int n_digits(long long v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Strings of n digits from a to b (same length, a <= b), as a GBNF expression. */
static void digits_range(sb *o, const char *a, const char *b, size_t n) {
    if (n == 0) return;
    if (n == 1) {
        if (a[0] == b[0])
            sb_addf(o, "\"%c\"", a[0]);
        else
            sb_addf(o, "[%c-%c]", a[0], b[0]);
        return;
    }
    if (a[0] == b[0]) {
        sb_addf(o, "\"%c\" ", a[0]);
        digits_range(o, a + 1, b + 1, n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    nines[n - 1] = zeros[n - 1] = '\0';
    const int a_low = !strcmp(a + 1, zeros), b_high = !strcmp(b + 1, nines);
    /* [lo_d, hi_d] take any n - 1 digits after them. */
    const char lo_d = a_low ? a[0] : (char)(a[0] + 1), hi_d = b_high ? b[0] : (char)(b[0] - 1);
    int first = 1;
    sb_add(o, "(");
    if (!a_low) {
        sb_addf(o, "\"%c\" ", a[0]);
        digits_range(o, a + 1, nines, n - 1);
        first = 0;
    }
    if (lo_d <= hi_d) {
        if (!first) sb_add(o, " | ");
        if (lo_d == hi_d)
            sb_addf(o, "\"%c\"", lo_d);
        else
            sb_addf(o, "[%c-%c]", lo_d, hi_d);
        sb_addf(o, " [0-9]{%zu}", n - 1);
        first = 0;
    }
    if (!b_high) {
        if (!first) sb_add(o, " | ");
        sb_addf(o, "\"%c\" ", b[0]);
        digits_range(o, zeros, b + 1, n - 1);
    }
    sb_add(o, ")");
}

/* Decimal integers in [lo, hi], 0 <= lo <= hi <= SC_INT_LIMIT, no leading zeros. */
static void uint_range(sb *o, long long lo, long long hi) {
    const int dl = n_digits(lo), dh = n_digits(hi);
    sb_add(o, "(");
    for (int d = dl; d <= dh; d++) {
        long long a = lo, b = hi, p = 1;
        for (int k = 1; k < d; k++)
            p *= 10;
        if (d > dl) a = p;
        if (d < dh) b = p * 10 - 1;
        char as[24], bs[24];
        snprintf(as, sizeof as, "%lld", a);
        snprintf(bs, sizeof bs, "%lld", b);
        if (d > dl) sb_add(o, " | ");
        digits_range(o, as, bs, (size_t)d);
    }
    sb_add(o, ")");
}

/* A bound keyword's value: 0 absent, 1 read into *x, -1 error. Draft 4's boolean
 * exclusiveMinimum / exclusiveMaximum are read by the caller. */
static int bound(conv *c, json_t *s, const char *key, double *x) {
    json_t *v = json_object_get(s, key);
    if (!v || json_is_boolean(v)) return 0;
    if (!json_is_number(v)) return fail(c, "'%s' must be a number", key), -1;
    *x = json_number_value(v);
    if (!isfinite(*x)) return fail(c, "'%s' must be finite", key), -1;
    return 1;
}

/* The integer bounds of s: [*lo, *hi] (integral values the schema allows). */
static int int_bounds(conv *c, json_t *s, long long *lo, long long *hi) {
    double x;
    int r;
    *lo = -SC_INT_LIMIT;
    *hi = SC_INT_LIMIT;
    const int ex4_min = json_is_true(json_object_get(s, "exclusiveMinimum"));
    const int ex4_max = json_is_true(json_object_get(s, "exclusiveMaximum"));
    if ((r = bound(c, s, "minimum", &x)) < 0) return -1;
    if (r) {
        double v = ex4_min ? floor(x) + 1 : ceil(x);
        if (v > (double)SC_INT_LIMIT) return fail(c, "'minimum' %g is beyond 15 digits", x);
        if (v > (double)*lo) *lo = (long long)v;
    }
    if ((r = bound(c, s, "exclusiveMinimum", &x)) < 0) return -1;
    if (r) {
        double v = floor(x) + 1;
        if (v > (double)SC_INT_LIMIT)
            return fail(c, "'exclusiveMinimum' %g is beyond 15 digits", x);
        if (v > (double)*lo) *lo = (long long)v;
    }
    if ((r = bound(c, s, "maximum", &x)) < 0) return -1;
    if (r) {
        double v = ex4_max ? ceil(x) - 1 : floor(x);
        if (v < -(double)SC_INT_LIMIT) return fail(c, "'maximum' %g is beyond 15 digits", x);
        if (v < (double)*hi) *hi = (long long)v;
    }
    if ((r = bound(c, s, "exclusiveMaximum", &x)) < 0) return -1;
    if (r) {
        double v = ceil(x) - 1;
        if (v < -(double)SC_INT_LIMIT)
            return fail(c, "'exclusiveMaximum' %g is beyond 15 digits", x);
        if (v < (double)*hi) *hi = (long long)v;
    }
    if (*lo > *hi) return fail(c, "no integer lies between the bounds");
    return 0;
}

/* Integers in [lo, hi]; "-0" never. */
static void int_range(sb *o, long long lo, long long hi) {
    if (lo >= 0) {
        uint_range(o, lo, hi);
    } else if (hi < 0) {
        sb_add(o, "\"-\" ");
        uint_range(o, -hi, -lo);
    } else {
        sb_add(o, "(\"-\" ");
        uint_range(o, 1, -lo);
        sb_add(o, " | ");
        uint_range(o, 0, hi);
        sb_add(o, ")");
    }
}

static int has_bounds(json_t *s) {
    return json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
           json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum");
}

/* type integer / number into o. */
static int gen_number(conv *c, json_t *s, int integer, sb *o) {
    if (json_object_get(s, "multipleOf")) return fail(c, "'multipleOf' is not supported");
    if (!has_bounds(s)) {
        if (integer)
            sb_add(o, "\"-\"? (\"0\" | [1-9] [0-9]{0,14})");
        else
            sb_add(o, "number");
        if (!integer) c->use |= USE_VALUE;
        return 0;
    }
    long long lo, hi;
    if (int_bounds(c, s, &lo, &hi)) return -1;
    if (integer) {
        int_range(o, lo, hi);
        return 0;
    }
    /* A number: the integers in range, and k.f for those k where [k, k + 1) (or
     * (-(k + 1), -k] for -k) lies inside [lo, hi]. */
    const char *frac = " (\".\" [0-9]{1,6})?";
    sb_add(o, "(");
    int first = 1;
    if (hi >= 0) {
        const long long a = lo > 0 ? lo : 0;
        if (a <= hi - 1) {
            uint_range(o, a, hi - 1);
            sb_add(o, frac);
            sb_addf(o, " | \"%lld\"", hi);
        } else {
            sb_addf(o, "\"%lld\"", hi);
        }
        first = 0;
    }
    if (lo < 0) {
        if (!first) sb_add(o, " | ");
        const long long a = hi < -1 ? -hi : 1, b = -lo; /* -k for k in [a, b] */
        if (a <= b - 1) {
            sb_add(o, "\"-\" ");
            uint_range(o, a, b - 1);
            sb_add(o, frac);
            sb_addf(o, " | \"-%lld\"", b);
        } else {
            sb_addf(o, "\"-%lld\"", b);
        }
    }
    sb_add(o, ")");
    return 0;
}

/* ---- strings ---- */

/* The length keywords of s: [*mn, *mx] (mx -1: unbounded). */
static int get_count(conv *c, json_t *s, const char *key, long long *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    /* The grammar's repetition bound: a larger count would be refused by the parser, with
     * a message about GBNF the client never wrote. */
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > SD_GRAMMAR_MAX_REPEAT)
        return fail(c, "'%s' must be an integer in 0 .. %d", key, SD_GRAMMAR_MAX_REPEAT), -1;
    *out = json_integer_value(v);
    return 1;
}

static void repeat(sb *o, const char *x, long long mn, long long mx) {
    if (mx == 0) return;
    sb_add(o, x);
    if (mn == 0 && mx < 0)
        sb_add(o, "*");
    else if (mn == 1 && mx < 0)
        sb_add(o, "+");
    else if (mn == 0 && mx == 1)
        sb_add(o, "?");
    else if (mx < 0)
        sb_addf(o, "{%lld,}", mn);
    else if (mn == mx)
        sb_addf(o, "{%lld}", mn);
    else
        sb_addf(o, "{%lld,%lld}", mn, mx);
}

static const char *SC_DAY31 = "(\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
static const char *SC_DAY30 = "(\"0\" [1-9] | [12] [0-9] | \"30\")";
static const char *SC_DAY28 = "(\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])";

static void fmt_date(sb *o) {
    sb_addf(
        o,
        "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" %s | (\"0\" [469] | \"11\") \"-\" %s "
        "| \"02-\" %s)",
        SC_DAY31, SC_DAY30, SC_DAY28);
}

static void fmt_time(sb *o) {
    sb_add(o, "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
              "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])");
}

/* ---- pattern (a regular-expression subset) ---- */

typedef struct rx {
    const char *s;
    size_t i, n;
    conv *c;
    int bad;
    int depth; /* groups open */
} rx;

/* The safe character (no JSON escape needed) and its class text. */
#define SC_SAFE "[^\"\\\\\\x00-\\x1F\\x7F]"

/* A code point from UTF-8 at x->s + x->i (advances). */
static unsigned rx_cp(rx *x) {
    const unsigned char *p = (const unsigned char *)x->s + x->i;
    unsigned cp = p[0];
    size_t len = 1;
    if (cp >= 0xF0 && x->i + 3 < x->n + 1) {
        cp = ((cp & 7u) << 18) | ((p[1] & 63u) << 12) | ((p[2] & 63u) << 6) | (p[3] & 63u);
        len = 4;
    } else if (cp >= 0xE0 && x->i + 2 < x->n + 1) {
        cp = ((cp & 15u) << 12) | ((p[1] & 63u) << 6) | (p[2] & 63u);
        len = 3;
    } else if (cp >= 0xC0 && x->i + 1 < x->n + 1) {
        cp = ((cp & 31u) << 6) | (p[1] & 63u);
        len = 2;
    }
    x->i += len;
    return cp;
}

/* A literal character of the pattern as JSON text in the output. */
static void rx_lit_cp(sb *o, unsigned cp) {
    char t[8];
    if (cp == '"')
        lit(o, "\\\"", 2);
    else if (cp == '\\')
        lit(o, "\\\\", 2);
    else if (cp == '\n')
        lit(o, "\\n", 2);
    else if (cp == '\t')
        lit(o, "\\t", 2);
    else if (cp == '\r')
        lit(o, "\\r", 2);
    else if (cp < 0x20) {
        snprintf(t, sizeof t, "\\u%04x", cp);
        lit(o, t, 6);
    } else {
        size_t n = 0;
        if (cp < 0x80)
            t[n++] = (char)cp;
        else if (cp < 0x800) {
            t[n++] = (char)(0xC0 | (cp >> 6));
            t[n++] = (char)(0x80 | (cp & 63));
        } else if (cp < 0x10000) {
            t[n++] = (char)(0xE0 | (cp >> 12));
            t[n++] = (char)(0x80 | ((cp >> 6) & 63));
            t[n++] = (char)(0x80 | (cp & 63));
        } else {
            t[n++] = (char)(0xF0 | (cp >> 18));
            t[n++] = (char)(0x80 | ((cp >> 12) & 63));
            t[n++] = (char)(0x80 | ((cp >> 6) & 63));
            t[n++] = (char)(0x80 | (cp & 63));
        }
        lit(o, t, n);
    }
}

/* Class ranges of an escape (\d \w \s), or 0 if e is not one. */
static int rx_class_escape(char e, unsigned r[][2], int *n) {
    if (e == 'd') {
        r[(*n)][0] = '0', r[(*n)++][1] = '9';
    } else if (e == 'w') {
        r[(*n)][0] = 'a', r[(*n)++][1] = 'z';
        r[(*n)][0] = 'A', r[(*n)++][1] = 'Z';
        r[(*n)][0] = '0', r[(*n)++][1] = '9';
        r[(*n)][0] = '_', r[(*n)++][1] = '_';
    } else if (e == 's') {
        r[(*n)][0] = ' ', r[(*n)++][1] = ' ';
        r[(*n)][0] = '\t', r[(*n)++][1] = '\r'; /* \t \n \v \f \r */
    } else {
        return 0;
    }
    return 1;
}

static unsigned rx_simple_escape(char e) {
    switch (e) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    default:
        return (unsigned char)e;
    }
}

/* Emit a class: ranges r[0 .. n), negated or not. Characters that JSON must escape are
 * emitted as their escapes (", \, \t, \n, \r) or left out (other controls). */
static int rx_emit_class(sb *o, unsigned r[][2], int n, int neg) {
    if (neg) {
        sb_add(o, "[^\"\\\\\\x00-\\x1F\\x7F");
        for (int k = 0; k < n; k++) {
            class_char(o, r[k][0]);
            if (r[k][1] != r[k][0]) {
                sb_add(o, "-");
                class_char(o, r[k][1]);
            }
        }
        sb_add(o, "]");
        return 0;
    }
    int q = 0, bs = 0, tab = 0, nl = 0, cr = 0, plain = 0;
    sb cls = {0};
    for (int k = 0; k < n; k++) {
        unsigned a = r[k][0], b = r[k][1];
        for (unsigned ch = a; ch <= b && ch < 0x20; ch++) {
            tab |= ch == '\t';
            nl |= ch == '\n';
            cr |= ch == '\r';
        }
        if (a <= '"' && b >= '"') q = 1;
        if (a <= '\\' && b >= '\\') bs = 1;
        if (a < 0x20) a = 0x20;
        if (b < a) continue;
        /* Split around '"' (0x22), '\\' (0x5C) and 0x7F. */
        unsigned cuts[3] = {'"', '\\', 0x7F};
        unsigned lo = a;
        for (int j = 0; j < 3 && lo <= b; j++) {
            if (cuts[j] < lo || cuts[j] > b) continue;
            if (cuts[j] > lo) {
                class_char(&cls, lo);
                if (cuts[j] - 1 > lo) {
                    sb_add(&cls, "-");
                    class_char(&cls, cuts[j] - 1);
                }
                plain = 1;
            }
            lo = cuts[j] + 1;
        }
        if (lo <= b) {
            class_char(&cls, lo);
            if (b > lo) {
                sb_add(&cls, "-");
                class_char(&cls, b);
            }
            plain = 1;
        }
    }
    sb_add(o, "(");
    int first = 1;
    if (plain) {
        sb_add(o, "[");
        if (cls.p) sb_add(o, cls.p);
        sb_add(o, "]");
        first = 0;
    }
    const char *esc[5] = {"\"\\\\\\\"\"", "\"\\\\\\\\\"", "\"\\\\t\"", "\"\\\\n\"", "\"\\\\r\""};
    const int on[5] = {q, bs, tab, nl, cr};
    for (int k = 0; k < 5; k++) {
        if (!on[k]) continue;
        if (!first) sb_add(o, " | ");
        sb_add(o, esc[k]);
        first = 0;
    }
    sb_add(o, ")");
    if (cls.oom) o->oom = 1;
    free(cls.p);
    return first ? -1 : 0; /* -1: only control characters (nothing to emit) */
}

static void rx_alt(rx *x, sb *o);

static int rx_fail(rx *x, const char *what) {
    if (!x->bad) fail(x->c, "'pattern': %s (at offset %zu) is not supported", what, x->i);
    x->bad = 1;
    return -1;
}

/* One atom into o. */
static void rx_atom(rx *x, sb *o) {
    const char ch = x->s[x->i];
    if (ch == '(') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            if (x->i + 1 < x->n && x->s[x->i + 1] == ':')
                x->i += 2;
            else {
                rx_fail(x, "a lookaround or named group");
                return;
            }
        }
        if (++x->depth > SC_MAX_DEPTH) {
            rx_fail(x, "nesting deeper than 64 groups");
            return;
        }
        sb_add(o, "(");
        rx_alt(x, o);
        x->depth--;
        if (x->bad) return;
        if (x->i >= x->n || x->s[x->i] != ')') {
            rx_fail(x, "an unclosed group");
            return;
        }
        x->i++;
        sb_add(o, ")");
    } else if (ch == '[') {
        x->i++;
        int neg = 0;
        if (x->i < x->n && x->s[x->i] == '^') {
            neg = 1;
            x->i++;
        }
        unsigned r[96][2];
        int n = 0;
        int first = 1;
        while (x->i < x->n && (x->s[x->i] != ']' || first)) {
            first = 0;
            if (n >= 90) {
                rx_fail(x, "a class of more than 90 ranges");
                return;
            }
            unsigned a;
            if (x->s[x->i] == '\\' && x->i + 1 < x->n) {
                const char e = x->s[x->i + 1];
                x->i += 2;
                if (rx_class_escape(e, r, &n)) continue;
                if (e == 'D' || e == 'W' || e == 'S' || e == 'b' || e == 'u' || e == 'x') {
                    rx_fail(x, "this escape inside a class");
                    return;
                }
                a = rx_simple_escape(e);
            } else {
                a = rx_cp(x);
            }
            unsigned b = a;
            if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
                x->i++;
                if (x->s[x->i] == '\\' && x->i + 1 < x->n) {
                    b = rx_simple_escape(x->s[x->i + 1]);
                    x->i += 2;
                } else {
                    b = rx_cp(x);
                }
                if (b < a) {
                    rx_fail(x, "a reversed range");
                    return;
                }
            }
            r[n][0] = a;
            r[n++][1] = b;
        }
        if (x->i >= x->n) {
            rx_fail(x, "an unclosed class");
            return;
        }
        x->i++;
        if (rx_emit_class(o, r, n, neg)) rx_fail(x, "a class of control characters only");
    } else if (ch == '.') {
        x->i++;
        sb_add(o, SC_SAFE);
    } else if (ch == '\\') {
        if (x->i + 1 >= x->n) {
            rx_fail(x, "a trailing backslash");
            return;
        }
        const char e = x->s[x->i + 1];
        x->i += 2;
        unsigned r[8][2];
        int n = 0;
        if (rx_class_escape(e, r, &n)) {
            rx_emit_class(o, r, n, 0);
        } else if (e == 'D' || e == 'W' || e == 'S') {
            rx_class_escape((char)(e - 'A' + 'a'), r, &n);
            rx_emit_class(o, r, n, 1);
        } else if ((e >= '0' && e <= '9') || e == 'b' || e == 'B' || e == 'k' || e == 'p' ||
                   e == 'P' || e == 'u' || e == 'x' || e == 'c') {
            x->i -= 2;
            rx_fail(x, "this escape");
        } else {
            rx_lit_cp(o, rx_simple_escape(e));
        }
    } else if (ch == '^' || ch == '$') {
        rx_fail(x, "an anchor inside the pattern");
    } else if (ch == '*' || ch == '+' || ch == '?') {
        rx_fail(x, "a quantifier without an atom");
    } else {
        rx_lit_cp(o, rx_cp(x));
    }
}

/* A sequence of quantified atoms, up to '|' or ')' or the end. */
static void rx_seq(rx *x, sb *o) {
    int any = 0;
    while (!x->bad && x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        sb atom = {0};
        rx_atom(x, &atom);
        if (x->bad) {
            free(atom.p);
            return;
        }
        if (any) sb_add(o, " ");
        any = 1;
        long long mn = 1, mx = 1;
        if (x->i < x->n) {
            const char q = x->s[x->i];
            if (q == '*')
                mn = 0, mx = -1, x->i++;
            else if (q == '+')
                mn = 1, mx = -1, x->i++;
            else if (q == '?')
                mn = 0, mx = 1, x->i++;
            else if (q == '{') {
                char *end = NULL;
                mn = strtoll(x->s + x->i + 1, &end, 10);
                mx = mn;
                if (end == x->s + x->i + 1) {
                    /* not a repetition: the brace is the next atom (a literal) */
                } else {
                    if (*end == ',') {
                        char *e2 = NULL;
                        mx = strtoll(end + 1, &e2, 10);
                        if (e2 == end + 1) mx = -1;
                        end = e2;
                    }
                    if (*end != '}' || mn < 0 || mn > 1000 || mx > 1000 || (mx >= 0 && mx < mn)) {
                        free(atom.p);
                        rx_fail(x, "this repetition");
                        return;
                    }
                    x->i = (size_t)(end + 1 - x->s);
                }
            }
            if (x->i < x->n && x->s[x->i] == '?' && !(mn == 1 && mx == 1)) x->i++; /* lazy */
        }
        if (mn == 1 && mx == 1) {
            if (atom.p) sb_add(o, atom.p);
        } else {
            sb paren = {0};
            sb_add(&paren, "(");
            if (atom.p) sb_add(&paren, atom.p);
            sb_add(&paren, ")");
            repeat(o, paren.p ? paren.p : "()", mn, mx);
            free(paren.p);
        }
        if (atom.oom) o->oom = 1;
        free(atom.p);
    }
    if (!any) sb_add(o, "\"\"");
}

static void rx_alt(rx *x, sb *o) {
    rx_seq(x, o);
    while (!x->bad && x->i < x->n && x->s[x->i] == '|') {
        x->i++;
        sb_add(o, " | ");
        rx_seq(x, o);
    }
}

static int gen_pattern(conv *c, const char *pat, sb *o) {
    rx x = {pat, 0, strlen(pat), c, 0, 0};
    int anchored_start = 0, anchored_end = 0;
    if (x.n > 0 && pat[0] == '^') {
        anchored_start = 1;
        x.i = 1;
    }
    if (x.n > x.i && pat[x.n - 1] == '$' && !(x.n >= 2 && pat[x.n - 2] == '\\')) {
        anchored_end = 1;
        x.n--;
    }
    sb body = {0};
    rx_alt(&x, &body);
    if (!x.bad && x.i < x.n) rx_fail(&x, "an unbalanced ')'");
    if (x.bad) {
        free(body.p);
        return -1;
    }
    sb_add(o, "\"\\\"\" ");
    if (!anchored_start) sb_add(o, SC_SAFE "* ");
    sb_add(o, "(");
    if (body.p) sb_add(o, body.p);
    sb_add(o, ")");
    if (!anchored_end) sb_add(o, " " SC_SAFE "*");
    sb_add(o, " \"\\\"\"");
    if (body.oom) o->oom = 1;
    free(body.p);
    return 0;
}

static int gen_string(conv *c, json_t *s, sb *o) {
    long long mn = 0, mx = -1;
    int r1, r2;
    if ((r1 = get_count(c, s, "minLength", &mn)) < 0) return -1;
    if ((r2 = get_count(c, s, "maxLength", &mx)) < 0) return -1;
    if (mx >= 0 && mx < mn) return fail(c, "'maxLength' is below 'minLength'");
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) return fail(c, "'pattern' must be a string");
    if (fmt && !json_is_string(fmt)) return fail(c, "'format' must be a string");
    if ((pat || fmt) && (r1 || r2))
        return fail(c, "'%s' with 'minLength' / 'maxLength' is not supported",
                    pat ? "pattern" : "format");
    if (pat && fmt) return fail(c, "'pattern' with 'format' is not supported");
    if (pat) return gen_pattern(c, json_string_value(pat), o);
    if (fmt) {
        const char *f = json_string_value(fmt);
        sb_add(o, "\"\\\"\" ");
        if (!strcmp(f, "date"))
            fmt_date(o);
        else if (!strcmp(f, "time"))
            fmt_time(o);
        else if (!strcmp(f, "date-time")) {
            fmt_date(o);
            sb_add(o, " \"T\" ");
            fmt_time(o);
        } else if (!strcmp(f, "uuid")) {
            sb_add(o, "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                      "[0-9a-f]{12}");
        } else {
            return fail(c, "'format' \"%s\" is not supported (date, time, date-time, uuid are)", f);
        }
        sb_add(o, " \"\\\"\"");
        return 0;
    }
    c->use |= USE_CHAR;
    sb_add(o, "\"\\\"\" ");
    if (mx != 0) {
        repeat(o, "char", mn, mx);
        sb_add(o, " ");
    }
    sb_add(o, "\"\\\"\"");
    return 0;
}

/* ---- the schema walk ---- */

static int visit(conv *c, json_t *s, const char *hint, const char **name);

/* Keywords known: handled by a type, or annotations. */
static const char *const SC_ANNOTATIONS[] = {
    "title",         "description",     "$schema",          "$id",      "$comment",
    "default",       "examples",        "deprecated",       "readOnly", "writeOnly",
    "$defs",         "definitions",     "example",          "$anchor",  "strict",
    "discriminator", "contentEncoding", "contentMediaType", NULL};
static const char *const SC_HANDLED[] = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "nullable",
                                         "uniqueItems",
                                         "multipleOf",
                                         NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return 1;
    return 0;
}

/* Refuse what the walk does not do. */
static int check_keywords(conv *c, json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(SC_ANNOTATIONS, k)) continue;
        if (!in_list(SC_HANDLED, k)) return fail(c, "'%s' is not supported", k);
        if (!strcmp(k, "uniqueItems") && !json_is_false(v))
            return fail(c, "'uniqueItems' is not supported");
        if (!strcmp(k, "multipleOf")) return fail(c, "'multipleOf' is not supported");
    }
    return 0;
}

static json_t *resolve(conv *c, const char *ref) {
    if (strncmp(ref, "#/", 2) != 0) return NULL;
    json_t *at = c->root;
    const char *p = ref + 2;
    while (at && *p) {
        const char *slash = strchr(p, '/');
        const size_t n = slash ? (size_t)(slash - p) : strlen(p);
        char key[256];
        if (n >= sizeof key) return NULL; /* not cut to another name: not found */
        size_t m = 0;
        for (size_t i = 0; i < n && m + 1 < sizeof key; i++) { /* ~1 -> /, ~0 -> ~ */
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                key[m++] = p[i + 1] == '1' ? '/' : '~';
                i++;
            } else {
                key[m++] = p[i];
            }
        }
        key[m] = '\0';
        at = json_is_object(at) ? json_object_get(at, key) : NULL;
        p = slash ? slash + 1 : p + n;
    }
    return at;
}

static int gen_ref(conv *c, json_t *s, const char **name) {
    json_t *r = json_object_get(s, "$ref");
    if (!json_is_string(r)) return fail(c, "'$ref' must be a string");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (strcmp(k, "$ref") && !in_list(SC_ANNOTATIONS, k))
            return fail(c, "'%s' beside '$ref' is not supported", k);
    }
    const char *ref = json_string_value(r);
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) {
            *name = c->refs[i].name;
            return 0;
        }
    json_t *t = resolve(c, ref);
    if (!t)
        return fail(c, "'$ref' \"%s\" does not resolve (only #/$defs/... and #/definitions/...)",
                    ref);
    const char *last = strrchr(ref, '/');
    long k0 = reserve(c, last ? last + 1 : "ref");
    if (k0 < 0) return -1;
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? 2 * c->cap_refs : 16;
        sc_ref *nr = realloc(c->refs, cap * sizeof *nr);
        if (!nr) return oom(c);
        c->refs = nr;
        c->cap_refs = cap;
    }
    c->refs[c->n_refs].ref = strdup(ref);
    if (!c->refs[c->n_refs].ref) return oom(c);
    c->refs[c->n_refs++].name = c->rules[k0].name;
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref);
    const char *inner = NULL;
    int rc = visit(c, t, c->rules[k0].name, &inner);
    memcpy(c->path, saved, sizeof saved);
    if (rc) return rc;
    c->rules[k0].body = strdup(inner);
    if (!c->rules[k0].body) return oom(c);
    *name = c->rules[k0].name;
    return 0;
}

/* One "key": value member as GBNF: the key literal, ws, ':', ws, the value rule. */
static void member(sb *o, const char *key, const char *rule) {
    sb keyjson = {0};
    json_t *ks = json_string(key);
    char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
    json_decref(ks);
    if (!kt) {
        o->oom = 1;
        return;
    }
    lit(&keyjson, kt, strlen(kt));
    free(kt);
    if (keyjson.p) sb_add(o, keyjson.p);
    sb_addf(o, " ws \":\" ws %s ws", rule);
    if (keyjson.oom) o->oom = 1;
    free(keyjson.p);
}

/* The key texts other than names[0 .. n) (which share their first d bytes; plain ASCII
 * each): rule N(d) ::= (empty, unless a name ends at d) | a safe character that no name
 * continues with, then any safe characters | c N(d + 1) for each continuation c. Keys
 * are written without escapes (so "\u0069d" cannot spell a declared "id"). */
static int not_names(conv *c, const char **names, size_t n, size_t d, const char *hint,
                     const char **out) {
    if (d > 256) return fail(c, "a property name is longer than 256 characters");
    int end = 0;
    char kids[128];
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)names[i][d];
        if (!ch) {
            end = 1;
            continue;
        }
        if (ch < 0x20 || ch >= 0x7F || ch == '"' || ch == '\\')
            return fail(c,
                        "'additionalProperties' beside a property name that is not plain "
                        "ASCII (\"%s\") is not supported",
                        names[i]);
        if (!memchr(kids, ch, nk)) kids[nk++] = (char)ch;
    }
    sb b = {0};
    if (!end) sb_add(&b, "| ");
    sb_add(&b, "[^\"\\\\\\x00-\\x1F\\x7F");
    for (size_t k = 0; k < nk; k++)
        class_char(&b, (unsigned char)kids[k]);
    sb_add(&b, "] " SC_SAFE "*");
    for (size_t k = 0; k < nk; k++) {
        const char **sub = malloc(n * sizeof *sub);
        if (!sub) {
            free(b.p);
            return oom(c);
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (names[i][d] == kids[k]) sub[m++] = names[i];
        const char *r = NULL;
        int rc = not_names(c, sub, m, d + 1, hint, &r);
        free(sub);
        if (rc) {
            free(b.p);
            return rc;
        }
        sb_add(&b, " | [");
        class_char(&b, (unsigned char)kids[k]); /* a class of one character */
        sb_addf(&b, "] %s", r);
    }
    *out = add_rule(c, hint, &b);
    return *out ? 0 : -1;
}

typedef struct prop {
    const char *key;
    const char *rule;
    int required;
} prop;

static int gen_object(conv *c, json_t *s, const char *hint, sb *o) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array");
    c->use |= USE_WS;
    const size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    if (np == 0 && nr == 0 && (!addl || json_is_true(addl))) {
        c->use |= USE_VALUE;
        sb_add(o, "object");
        return 0;
    }
    prop *pp = calloc(np + nr + 1, sizeof *pp);
    if (!pp) return oom(c);
    size_t n = 0;
    int rc = 0;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) { /* jansson keeps insertion (schema) order */
        size_t old = path_push(c, "properties");
        size_t old2 = path_push(c, k);
        char h[96];
        snprintf(h, sizeof h, "%s-%s", hint, k);
        rc = visit(c, v, h, &pp[n].rule);
        path_pop(c, old2);
        path_pop(c, old);
        if (rc) goto out;
        pp[n++].key = k;
    }
    for (size_t i = 0; i < nr; i++) {
        json_t *e = json_array_get(req, i);
        if (!json_is_string(e)) {
            rc = fail(c, "'required' must hold strings");
            goto out;
        }
        size_t j = 0;
        while (j < n && strcmp(pp[j].key, json_string_value(e)))
            j++;
        if (j == n) {
            if (json_is_false(addl)) {
                rc = fail(c, "required \"%s\" is not in 'properties' and no other key is allowed",
                          json_string_value(e));
                goto out;
            }
            c->use |= USE_VALUE;
            pp[n].key = json_string_value(e);
            pp[n++].rule = "value";
        }
        pp[j].required = 1;
    }
    /* Extra keys: additionalProperties true or a schema (absent: none). */
    const char *extra = NULL;
    if (addl && !json_is_false(addl)) {
        if (json_is_true(addl)) {
            c->use |= USE_VALUE;
            extra = "value";
        } else if (json_is_object(addl)) {
            size_t old = path_push(c, "additionalProperties");
            char h[96];
            snprintf(h, sizeof h, "%s-additional", hint);
            rc = visit(c, addl, h, &extra);
            path_pop(c, old);
            if (rc) goto out;
        } else {
            rc = fail(c, "'additionalProperties' must be a boolean or a schema");
            goto out;
        }
    }
    const char *extra_kv = NULL;
    if (extra) {
        c->use |= USE_VALUE;
        const char *key = "string";
        if (n > 0) {
            const char **names = malloc(n * sizeof *names);
            if (!names) {
                rc = oom(c);
                goto out;
            }
            for (size_t i = 0; i < n; i++)
                names[i] = pp[i].key;
            char h[96];
            snprintf(h, sizeof h, "%s-other-key", hint);
            rc = not_names(c, names, n, 0, h, &key);
            free(names);
            if (rc) goto out;
            sb kb = {0};
            sb_addf(&kb, "\"\\\"\" %s \"\\\"\"", key);
            if (!(key = add_rule(c, h, &kb))) {
                rc = -1;
                goto out;
            }
        }
        sb b = {0};
        sb_addf(&b, "%s ws \":\" ws %s ws", key, extra);
        char h[96];
        snprintf(h, sizeof h, "%s-extra-kv", hint);
        if (!(extra_kv = add_rule(c, h, &b))) {
            rc = -1;
            goto out;
        }
    }
    /* Members in schema order, each optional one present or not: rule tail(i, f) is the
     * members from i on, f = 1 when none came before (no comma). tail(n, f) is the extra
     * keys. Built from the end. */
    const char *next[2] = {NULL, NULL}; /* tail(i + 1, 0), tail(i + 1, 1); NULL: empty */
    if (extra_kv) {
        for (int f = 0; f < 2; f++) {
            sb b = {0};
            sb_addf(&b, "( %s%s ( \",\" ws %s )* )?", f ? "" : "\",\" ws ", extra_kv, extra_kv);
            char h[96];
            snprintf(h, sizeof h, "%s-rest%s", hint, f ? "-first" : "");
            if (!(next[f] = add_rule(c, h, &b))) {
                rc = -1;
                goto out;
            }
        }
    }
    /* need[i * 2 + f]: tail(i, f) is referenced (from tail(0, 1) on). */
    unsigned char *need = calloc(2 * (n + 1), 1);
    if (!need) {
        rc = oom(c);
        goto out;
    }
    need[1] = 1;
    for (size_t i = 0; i < n; i++)
        for (int f = 0; f < 2; f++) {
            if (!need[i * 2 + f]) continue;
            need[(i + 1) * 2] = 1;
            if (!pp[i].required) need[(i + 1) * 2 + f] = 1;
        }
    for (size_t i = n; i-- > 0;) {
        const char *cur[2] = {NULL, NULL};
        for (int f = 0; f < 2; f++) {
            if (!need[i * 2 + f]) continue;
            sb b = {0};
            if (!pp[i].required) sb_add(&b, "( ");
            if (!f) sb_add(&b, "\",\" ws ");
            member(&b, pp[i].key, pp[i].rule);
            if (next[0]) sb_addf(&b, " %s", next[0]);
            if (!pp[i].required) {
                if (next[f])
                    sb_addf(&b, " ) | %s", next[f]);
                else
                    sb_add(&b, " )?");
            }
            char h[96];
            snprintf(h, sizeof h, "%s-%zu%s", hint, i, f ? "-first" : "");
            if (!(cur[f] = add_rule(c, h, &b))) {
                free(need);
                rc = -1;
                goto out;
            }
        }
        next[0] = cur[0];
        next[1] = cur[1];
    }
    free(need);
    if (next[1])
        sb_addf(o, "\"{\" ws %s \"}\"", next[1]);
    else
        sb_add(o, "\"{\" ws \"}\"");
out:
    free(pp);
    return rc;
}

static int gen_array(conv *c, json_t *s, const char *hint, sb *o) {
    long long mn = 0, mx = -1;
    if (get_count(c, s, "minItems", &mn) < 0 || get_count(c, s, "maxItems", &mx) < 0) return -1;
    if (mx >= 0 && mx < mn) return fail(c, "'maxItems' is below 'minItems'");
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (json_is_array(items)) { /* draft 4 .. 7's tuple form */
        if (prefix) return fail(c, "'items' as an array beside 'prefixItems' is not supported");
        prefix = items;
        items = NULL;
    }
    if (prefix && !json_is_array(prefix)) return fail(c, "'prefixItems' must be an array");
    c->use |= USE_WS;
    const size_t np = prefix ? json_array_size(prefix) : 0;
    if (mx >= 0 && (long long)np > mx)
        return fail(c, "'maxItems' below the number of 'prefixItems' is not supported");
    sb_add(o, "\"[\" ws");
    for (size_t i = 0; i < np; i++) {
        char seg[48], h[96];
        snprintf(seg, sizeof seg, "prefixItems/%zu", i);
        snprintf(h, sizeof h, "%s-%zu", hint, i);
        size_t old = path_push(c, seg);
        const char *r = NULL;
        int rc = visit(c, json_array_get(prefix, i), h, &r);
        path_pop(c, old);
        if (rc) return rc;
        sb_addf(o, " %s%s ws", i ? "\",\" ws " : "", r);
    }
    /* The rest: [rmn, rmx] items of the items schema (absent after a prefix: none unless
     * minItems needs more, then any value). */
    long long rmn = mn > (long long)np ? mn - (long long)np : 0;
    long long rmx = mx < 0 ? -1 : mx - (long long)np;
    const char *item = NULL;
    if (json_is_false(items) || (!items && np > 0 && rmn == 0)) {
        rmx = 0;
        if (rmn > 0) return fail(c, "'minItems' needs more items than 'items' allows");
    } else if (!items || json_is_true(items)) {
        c->use |= USE_VALUE;
        item = "value";
    } else {
        char h[96];
        snprintf(h, sizeof h, "%s-item", hint);
        size_t old = path_push(c, "items");
        int rc = visit(c, items, h, &item);
        path_pop(c, old);
        if (rc) return rc;
    }
    if (rmx != 0 && item) {
        char one[160];
        snprintf(one, sizeof one, "(\",\" ws %s ws)", item);
        if (np > 0) {
            sb_add(o, " ");
            repeat(o, one, rmn, rmx);
        } else if (rmn == 0) {
            sb_addf(o, " ( %s ws ", item);
            repeat(o, one, 0, rmx < 0 ? -1 : rmx - 1);
            sb_add(o, " )?");
        } else {
            sb_addf(o, " %s ws ", item);
            repeat(o, one, rmn - 1, rmx < 0 ? -1 : rmx - 1);
        }
    }
    sb_add(o, " \"]\"");
    return 0;
}

/* All of allOf's parts (objects, through $refs) merged into one object schema. */
static int merge_all_of(conv *c, json_t *s, json_t **out) {
    json_t *parts = json_object_get(s, "allOf");
    if (!json_is_array(parts) || json_array_size(parts) == 0)
        return fail(c, "'allOf' must be a non-empty array");
    json_t *m = json_object(), *props = json_object(), *req = json_array();
    if (!m || !props || !req) {
        json_decref(m);
        json_decref(props);
        json_decref(req);
        return oom(c);
    }
    int rc = 0;
    /* The parts with additionalProperties false: a key must be in each one's properties. */
    json_t *closed = json_array();
    if (!closed) {
        json_decref(m);
        json_decref(props);
        json_decref(req);
        return oom(c);
    }
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        for (int hops = 0; json_is_object(p) && json_object_get(p, "$ref") && hops < 16; hops++)
            p = resolve(c, json_string_value(json_object_get(p, "$ref"))
                               ? json_string_value(json_object_get(p, "$ref"))
                               : "");
        if (!json_is_object(p)) {
            rc = fail(c, "'allOf' part %zu is not an object schema (or its $ref does not resolve)",
                      i);
            break;
        }
        const char *k;
        json_t *v;
        json_object_foreach(p, k, v) {
            if (in_list(SC_ANNOTATIONS, k) || !strcmp(k, "properties") || !strcmp(k, "required"))
                continue;
            if (!strcmp(k, "type") && json_is_string(v) && !strcmp(json_string_value(v), "object"))
                continue;
            if (!strcmp(k, "additionalProperties")) {
                json_t *pp = json_object_get(p, "properties");
                if (json_is_false(v)) {
                    json_array_append_new(closed, pp ? json_incref(pp) : json_object());
                } else if (!json_is_true(v)) {
                    rc = fail(c,
                              "'allOf' part %zu: 'additionalProperties' as a schema is not "
                              "supported in allOf",
                              i);
                    break;
                }
                continue;
            }
            rc = fail(c, "'allOf' part %zu: '%s' is not supported in allOf (objects only)", i, k);
            break;
        }
        if (rc) break;
        json_t *pp = json_object_get(p, "properties"), *rq = json_object_get(p, "required");
        json_object_foreach(pp, k, v) {
            json_t *had = json_object_get(props, k);
            if (had && json_equal(had, v)) continue;
            if (had) {
                rc = fail(c,
                          "'allOf': property \"%s\" is in two parts with different schemas "
                          "(not supported)",
                          k);
                break;
            }
            json_object_set(props, k, v);
        }
        if (rc) break;
        if (json_is_array(rq)) json_array_extend(req, rq);
    }
    /* A key some closed part does not list is not allowed: dropped, or (if required)
     * refused. */
    const char *k;
    json_t *v, *tmp;
    json_object_foreach_safe(props, tmp, k, v) {
        size_t j;
        json_t *cp;
        int ok = 1;
        json_array_foreach(closed, j, cp) {
            if (!json_object_get(cp, k)) ok = 0;
        }
        if (ok || rc) continue;
        size_t r;
        json_t *e;
        json_array_foreach(req, r, e) {
            if (json_is_string(e) && !strcmp(json_string_value(e), k))
                rc = fail(c,
                          "'allOf': required \"%s\" is excluded by a part's "
                          "additionalProperties false",
                          k);
        }
        if (!rc) json_object_del(props, k);
    }
    json_decref(closed);
    json_object_set_new(m, "type", json_string("object"));
    json_object_set_new(m, "properties", props);
    json_object_set_new(m, "required", req);
    json_object_set_new(m, "additionalProperties", json_false()); /* absent: none (as above) */
    if (rc) {
        json_decref(m);
        return rc;
    }
    *out = m;
    return 0;
}

static int gen_type(conv *c, json_t *s, const char *t, const char *hint, sb *o) {
    if (!strcmp(t, "object")) return gen_object(c, s, hint, o);
    if (!strcmp(t, "array")) return gen_array(c, s, hint, o);
    if (!strcmp(t, "string")) return gen_string(c, s, o);
    if (!strcmp(t, "integer")) return gen_number(c, s, 1, o);
    if (!strcmp(t, "number")) return gen_number(c, s, 0, o);
    if (!strcmp(t, "boolean")) {
        sb_add(o, "(\"true\" | \"false\")");
        return 0;
    }
    if (!strcmp(t, "null")) {
        sb_add(o, "\"null\"");
        return 0;
    }
    return fail(c, "'type' \"%s\" is not a JSON Schema type", t);
}

/* The type a schema without "type" means, from its keywords (NULL: any value). */
static const char *implied_type(json_t *s) {
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
        json_object_get(s, "required"))
        return "object";
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems") ||
        json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
        return "array";
    if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
        json_object_get(s, "pattern") || json_object_get(s, "format"))
        return "string";
    if (has_bounds(s)) return "number";
    return NULL;
}

/* The body of schema s into o. */
static int gen_body(conv *c, json_t *s, const char *hint, sb *o) {
    if (json_is_true(s)) {
        c->use |= USE_VALUE | USE_WS;
        sb_add(o, "value");
        return 0;
    }
    if (json_is_false(s)) return fail(c, "the schema false matches nothing");
    if (!json_is_object(s)) return fail(c, "a schema must be an object or a boolean");
    if (check_keywords(c, s)) return -1;
    json_t *nullable = json_object_get(s, "nullable");
    if (nullable && !json_is_boolean(nullable)) return fail(c, "'nullable' must be a boolean");
    const int or_null = json_is_true(nullable);
    if (or_null) sb_add(o, "\"null\" | ");
    if (json_object_get(s, "$ref")) {
        const char *r = NULL;
        if (gen_ref(c, s, &r)) return -1;
        sb_add(o, r);
        return 0;
    }
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst || en) {
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) {
            if (strcmp(k, "const") && strcmp(k, "enum") && strcmp(k, "type") &&
                strcmp(k, "nullable") && !in_list(SC_ANNOTATIONS, k))
                return fail(c, "'%s' beside '%s' is not supported", k, cst ? "const" : "enum");
        }
        if (cst && en) return fail(c, "'const' with 'enum' is not supported");
        if (cst) return lit_json(c, o, cst);
        if (!json_is_array(en) || json_array_size(en) == 0)
            return fail(c, "'enum' must be a non-empty array");
        size_t i;
        json_t *e;
        json_t *ty = json_object_get(s, "type");
        int any = 0;
        json_array_foreach(en, i, e) {
            /* A "type" beside "enum" keeps the values of that type. */
            if (json_is_string(ty)) {
                const char *t = json_string_value(ty);
                const int keep = (!strcmp(t, "string") && json_is_string(e)) ||
                                 (!strcmp(t, "integer") && json_is_integer(e)) ||
                                 (!strcmp(t, "number") && json_is_number(e)) ||
                                 (!strcmp(t, "boolean") && json_is_boolean(e)) ||
                                 (!strcmp(t, "null") && json_is_null(e)) ||
                                 (!strcmp(t, "object") && json_is_object(e)) ||
                                 (!strcmp(t, "array") && json_is_array(e));
                if (!keep) continue;
            } else if (ty) {
                return fail(c, "'type' as a list beside 'enum' is not supported");
            }
            if (any) sb_add(o, " | ");
            if (lit_json(c, o, e)) return -1;
            any = 1;
        }
        if (!any) return fail(c, "no 'enum' value has the schema's 'type'");
        return 0;
    }
    json_t *any_of = json_object_get(s, "anyOf");
    if (!any_of) any_of = json_object_get(s, "oneOf");
    if (any_of) {
        const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) {
            if (strcmp(k, kw) && strcmp(k, "nullable") && !in_list(SC_ANNOTATIONS, k))
                return fail(c, "'%s' beside '%s' is not supported", k, kw);
        }
        if (!json_is_array(any_of) || json_array_size(any_of) == 0)
            return fail(c, "'%s' must be a non-empty array", kw);
        size_t i;
        json_t *e;
        json_array_foreach(any_of, i, e) {
            char seg[48], h[96];
            snprintf(seg, sizeof seg, "%s/%zu", kw, i);
            snprintf(h, sizeof h, "%s-%zu", hint, i);
            size_t old = path_push(c, seg);
            const char *r = NULL;
            int rc = visit(c, e, h, &r);
            path_pop(c, old);
            if (rc) return rc;
            sb_addf(o, "%s%s", i ? " | " : "", r);
        }
        return 0;
    }
    if (json_object_get(s, "allOf")) {
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) {
            if (strcmp(k, "allOf") && strcmp(k, "nullable") && !in_list(SC_ANNOTATIONS, k) &&
                !(!strcmp(k, "type") && json_is_string(v) &&
                  !strcmp(json_string_value(v), "object")))
                return fail(c, "'%s' beside 'allOf' is not supported", k);
        }
        json_t *m = NULL;
        if (merge_all_of(c, s, &m)) return -1;
        size_t old = path_push(c, "allOf");
        int rc = gen_object(c, m, hint, o);
        path_pop(c, old);
        json_decref(m);
        return rc;
    }
    json_t *ty = json_object_get(s, "type");
    if (json_is_array(ty)) {
        if (json_array_size(ty) == 0) return fail(c, "'type' must not be an empty list");
        size_t i;
        json_t *e;
        json_array_foreach(ty, i, e) {
            if (!json_is_string(e)) return fail(c, "'type' must hold strings");
            for (size_t j = 0; j < i; j++) /* a repeat would convert the same subschemas twice */
                if (json_equal(e, json_array_get(ty, j)))
                    return fail(c, "'type' lists '%s' twice", json_string_value(e));
            if (i) sb_add(o, " | ");
            if (gen_type(c, s, json_string_value(e), hint, o)) return -1;
        }
        return 0;
    }
    if (ty && !json_is_string(ty)) return fail(c, "'type' must be a string or a list of strings");
    const char *t = ty ? json_string_value(ty) : implied_type(s);
    if (!t) {
        c->use |= USE_VALUE | USE_WS;
        sb_add(o, "value");
        return 0;
    }
    return gen_type(c, s, t, hint, o);
}

/* The rule of schema s (a name in the table, or a shared rule's name) into *name. */
static int visit(conv *c, json_t *s, const char *hint, const char **name) {
    if (++c->depth > SC_MAX_DEPTH) {
        c->depth--;
        return fail(c, "the schema nests deeper than %d", SC_MAX_DEPTH);
    }
    if (++c->visits > SC_MAX_VISITS) {
        c->depth--;
        return fail(c, "the schema needs more than %d subschema conversions", SC_MAX_VISITS);
    }
    sb b = {0};
    int rc = gen_body(c, s, hint, &b);
    c->depth--;
    if (rc) {
        free(b.p);
        return rc;
    }
    /* A body that is one shared rule's name needs no rule of its own. */
    static const char *const shared[] = {"value", "object", "number", NULL};
    for (int i = 0; shared[i]; i++)
        if (b.p && !strcmp(b.p, shared[i])) {
            free(b.p);
            *name = shared[i];
            return 0;
        }
    *name = add_rule(c, hint, &b);
    return *name ? 0 : -1;
}

static void conv_free(conv *c) {
    for (size_t i = 0; i < c->n_rules; i++) {
        free(c->rules[i].name);
        free(c->rules[i].body);
    }
    free(c->rules);
    for (size_t i = 0; i < c->n_refs; i++)
        free(c->refs[i].ref);
    free(c->refs);
}

int sd_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, sd_error *err) {
    *gbnf = NULL;
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!root) { /* jansson quotes the input near the error: control bytes shown as \xNN */
        char text[4 * sizeof je.text];
        return sd_errorf(err, SD_ERR_ARG, "json_schema: not valid JSON (line %d, column %d: %s)",
                         je.line, je.column, sd_one_line(je.text, text, sizeof text));
    }
    conv c = {0};
    c.root = root;
    c.err = err;
    memcpy(c.path, "#", 2);
    const char *top = NULL;
    int rc = reserve(&c, "root") < 0 ? -1 : visit(&c, root, "root", &top);
    if (!rc && !(c.rules[0].body = strdup(top))) rc = oom(&c);
    sb o = {0};
    if (!rc) {
        /* root first, then the rules in the order made. */
        for (size_t i = 0; i < c.n_rules; i++) {
            sb_addf(&o, "%s ::= ", c.rules[i].name);
            sb_add(&o, c.rules[i].body ? c.rules[i].body : "\"\"");
            sb_add(&o, "\n");
        }
        if (c.use & (USE_VALUE | USE_WS)) sb_add(&o, SC_WS);
        if (c.use & (USE_VALUE | USE_CHAR)) sb_add(&o, SC_CHAR);
        if (c.use & USE_VALUE) sb_add(&o, SC_VALUE);
        if (o.oom) rc = oom(&c);
    }
    conv_free(&c);
    json_decref(root);
    if (rc) {
        free(o.p);
        return c.status ? c.status : SD_ERR_ARG;
    }
    *gbnf = o.p;
    return 0;
}
