/*
 * runtime/tokenizer/jinja_parse.c: the Jinja subset's lexer and parser (the face is in
 * sd_vocab.h, "Jinja chat templates"; the tree in jinja_impl.h).
 *
 * Lexing follows the settings chat templates are written for (those of the Hugging Face
 * tokenizers' renderer): trim_blocks (the first newline after a block or comment tag is
 * dropped) and lstrip_blocks (spaces and tabs from the start of a line up to a block or
 * comment tag are dropped, unless the tag opens with `{%+`), and `-` on either side of a
 * tag strips all whitespace on that side. Inside tags: names, integers, floats, quoted
 * strings with backslash escapes, and operators. Brackets nest, so `}}` inside a dict
 * literal does not end an expression.
 *
 * The parser is recursive descent with Jinja's precedence (lowest first): `x if c else y`,
 * `or`, `and`, `not`, comparisons and `in`, `+ -`, `~`, `* / // %`, `**`, unary `- +`,
 * then a primary with its postfixes (`.name`, `[i]`, `[a:b:c]`, calls) and filters / tests
 * (`| f(args)`, `is [not] t(args)`). Every error names the line and the construct; an
 * unsupported tag (`include`, `extends`, `call`, ...) is an error naming it. Nesting is
 * bounded (SD_JINJA_MAX_NEST) so a hostile template cannot overflow the stack here.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/sd_base.h"
#include "runtime/tokenizer/jinja_impl.h"

#define SD_JINJA_MAX_NEST 200

typedef enum ttype {
    K_TEXT,
    K_VBEG,
    K_VEND,
    K_BBEG,
    K_BEND,
    K_NAME,
    K_INT,
    K_FLOAT,
    K_STR,
    K_OP,
    K_EOF
} ttype;

typedef struct tok {
    ttype t;
    int line;
    const char *p; /* source text (K_TEXT: the kept range; K_NAME / K_OP: the token) */
    size_t n;
    char *sval; /* K_STR: decoded, malloc'd */
    size_t slen;
    int64_t ival;
    double fval;
} tok;

typedef struct arena_blk {
    struct arena_blk *next;
    max_align_t data[];
} arena_blk;

typedef struct P {
    const char *src;
    size_t len;
    tok *toks;
    size_t nt, capt, i;
    sd_jinja *t;
    int failed, nest;
    size_t line_pos;
    int line;
    sd_error *err;
} P;

static void *aalloc(P *p, size_t n) {
    arena_blk *b = calloc(1, sizeof *b + (n ? n : 1));
    if (!b) {
        if (!p->failed) sd_errorf(p->err, SD_ERR_OOM, "jinja: out of memory");
        p->failed = 1;
        return NULL;
    }
    b->next = p->t->arena;
    p->t->arena = b;
    return b->data;
}

static char *adup(P *p, const char *s, size_t n) {
    char *d = aalloc(p, n + 1);
    if (d) memcpy(d, s, n);
    return d;
}

static int fail(P *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(P *p, int line, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    sd_errorf(p->err, SD_ERR_FORMAT, "jinja template, line %d: %s", line, m);
    return -1;
}

/* ------------------------------------------------------------------ lexer */

/* The line of a source offset (offsets only grow while lexing, so count on from the last). */
static int line_at(P *p, size_t pos) {
    if (pos < p->line_pos) {
        p->line_pos = 0;
        p->line = 1;
    }
    for (; p->line_pos < pos && p->line_pos < p->len; p->line_pos++)
        p->line += p->src[p->line_pos] == '\n';
    return p->line;
}

static tok *push_tok(P *p, ttype t, size_t pos, size_t n) {
    if (p->nt == p->capt) {
        size_t cap = p->capt ? p->capt * 2 : 256;
        tok *nt = realloc(p->toks, cap * sizeof *nt);
        if (!nt) {
            fail(p, 0, "out of memory");
            return NULL;
        }
        p->toks = nt;
        p->capt = cap;
    }
    tok *k = &p->toks[p->nt++];
    memset(k, 0, sizeof *k);
    k->t = t;
    k->p = p->src + pos;
    k->n = n;
    k->line = line_at(p, pos);
    return k;
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static int is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t c) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* A quoted string at pos (src[pos] is the quote); *end is past the closing quote. */
static int lex_string(P *p, size_t pos, size_t *end, tok *k) {
    const char q = p->src[pos];
    size_t i = pos + 1;
    char *o = malloc(p->len - pos + 4);
    if (!o) return fail(p, k->line, "out of memory");
    size_t n = 0;
    while (i < p->len && p->src[i] != q) {
        char c = p->src[i];
        if (c != '\\' || i + 1 >= p->len) {
            o[n++] = c;
            i++;
            continue;
        }
        char e = p->src[i + 1];
        i += 2;
        switch (e) {
        case 'n':
            o[n++] = '\n';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case '0':
            o[n++] = '\0';
            break;
        case '\\':
            o[n++] = '\\';
            break;
        case '\'':
            o[n++] = '\'';
            break;
        case '"':
            o[n++] = '"';
            break;
        case '\n':
            break; /* a line continuation */
        case 'x':
        case 'u':
        case 'U': {
            const int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            int ok = i + (size_t)nd <= p->len;
            for (int d = 0; ok && d < nd; d++) {
                int h = hexval(p->src[i + (size_t)d]);
                if (h < 0) ok = 0;
                v = v * 16 + (uint32_t)(h < 0 ? 0 : h);
            }
            if (!ok || v > 0x10FFFF) {
                free(o);
                return fail(p, k->line, "bad \\%c escape in a string", e);
            }
            i += (size_t)nd;
            n += put_utf8(o + n, v);
            break;
        }
        default: /* unknown escapes keep their backslash */
            o[n++] = '\\';
            o[n++] = e;
        }
    }
    if (i >= p->len) {
        free(o);
        return fail(p, k->line, "unterminated string");
    }
    k->sval = o;
    k->slen = n;
    *end = i + 1;
    return 0;
}

/* The tokens of one tag, from pos up to and including its closer. */
static int lex_tag(P *p, size_t pos, int var, size_t *end, int *strip_after) {
    int depth = 0;
    size_t i = pos;
    const char close = var ? '}' : '%';
    for (;;) {
        while (i < p->len && is_ws(p->src[i]))
            i++;
        if (i >= p->len) return fail(p, line_at(p, pos), "unclosed %s tag", var ? "{{" : "{%");
        const char *s = p->src + i;
        const size_t rem = p->len - i;
        if (depth == 0) {
            if (rem >= 3 && s[0] == '-' && s[1] == close && s[2] == '}') {
                if (!push_tok(p, var ? K_VEND : K_BEND, i, 3)) return -1;
                *strip_after = 1;
                *end = i + 3;
                return 0;
            }
            if (rem >= 2 && s[0] == close && s[1] == '}') {
                if (!push_tok(p, var ? K_VEND : K_BEND, i, 2)) return -1;
                *strip_after = 0;
                *end = i + 2;
                return 0;
            }
        }
        char c = s[0];
        if (is_alpha(c)) {
            size_t n = 1;
            while (n < rem && (is_alpha(s[n]) || is_digit(s[n])))
                n++;
            if (!push_tok(p, K_NAME, i, n)) return -1;
            i += n;
        } else if (is_digit(c)) {
            size_t n = 0;
            int flt = 0;
            while (n < rem && (is_digit(s[n]) || s[n] == '_'))
                n++;
            if (n + 1 < rem && s[n] == '.' && is_digit(s[n + 1])) {
                flt = 1;
                n++;
                while (n < rem && is_digit(s[n]))
                    n++;
            }
            if (n < rem && (s[n] == 'e' || s[n] == 'E')) {
                size_t m = n + 1;
                if (m < rem && (s[m] == '+' || s[m] == '-')) m++;
                if (m < rem && is_digit(s[m])) {
                    flt = 1;
                    n = m;
                    while (n < rem && is_digit(s[n]))
                        n++;
                }
            }
            tok *k = push_tok(p, flt ? K_FLOAT : K_INT, i, n);
            if (!k) return -1;
            char buf[64];
            size_t bn = 0;
            for (size_t j = 0; j < n && bn + 1 < sizeof buf; j++)
                if (s[j] != '_') buf[bn++] = s[j];
            buf[bn] = 0;
            errno = 0;
            if (flt)
                k->fval = strtod(buf, NULL);
            else
                k->ival = strtoll(buf, NULL, 10);
            if (errno || n >= sizeof buf) return fail(p, k->line, "number out of range");
            i += n;
        } else if (c == '\'' || c == '"') {
            tok *k = push_tok(p, K_STR, i, 1);
            if (!k) return -1;
            if (lex_string(p, i, &i, k)) return -1;
        } else {
            static const char *two[] = {"==", "!=", "<=", ">=", "//", "**"};
            size_t n = 0;
            for (size_t j = 0; j < sizeof two / sizeof two[0]; j++)
                if (rem >= 2 && s[0] == two[j][0] && s[1] == two[j][1]) n = 2;
            if (!n) {
                if (!strchr("+-*/%~|.,:()[]{}<>=", c) || c == 0)
                    return fail(p, line_at(p, i), "unexpected character '%c'", c);
                n = 1;
                if (c == '(' || c == '[' || c == '{') depth++;
                if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            }
            if (!push_tok(p, K_OP, i, n)) return -1;
            i += n;
        }
    }
}

static int lex(P *p) {
    size_t pos = 0;
    int strip_next = 0, trim_nl = 0;
    for (;;) {
        size_t i = pos;
        while (i + 1 < p->len && !(p->src[i] == '{' && strchr("{%#", p->src[i + 1])))
            i++;
        const int found = i + 1 < p->len;
        if (!found) i = p->len;
        size_t ts = pos, te = i;
        if (strip_next) {
            while (ts < te && is_ws(p->src[ts]))
                ts++;
        } else if (trim_nl) {
            if (ts < te && p->src[ts] == '\n')
                ts++;
            else if (ts + 1 < te && p->src[ts] == '\r' && p->src[ts + 1] == '\n')
                ts += 2;
        }
        strip_next = trim_nl = 0;
        char kind = 0, mark = 0;
        if (found) {
            kind = p->src[i + 1];
            mark = i + 2 < p->len ? p->src[i + 2] : 0;
            if (mark == '-') {
                while (te > ts && is_ws(p->src[te - 1]))
                    te--;
            } else if (kind != '{' && mark != '+') {
                size_t k = te;
                while (k > ts && (p->src[k - 1] == ' ' || p->src[k - 1] == '\t'))
                    k--;
                if (k == 0 || p->src[k - 1] == '\n') te = k;
            }
        }
        if (te > ts && !push_tok(p, K_TEXT, ts, te - ts)) return -1;
        if (!found) break;
        size_t body = i + 2 + (mark == '-' || mark == '+');
        if (kind == '#') {
            size_t j = body;
            while (j + 1 < p->len && !(p->src[j] == '#' && p->src[j + 1] == '}'))
                j++;
            if (j + 1 >= p->len) return fail(p, line_at(p, i), "unclosed comment");
            if (j > body && p->src[j - 1] == '-')
                strip_next = 1;
            else
                trim_nl = 1;
            pos = j + 2;
            continue;
        }
        const int var = kind == '{';
        if (!push_tok(p, var ? K_VBEG : K_BBEG, i, 2)) return -1;
        int strip_after = 0;
        if (lex_tag(p, body, var, &pos, &strip_after)) return -1;
        if (strip_after)
            strip_next = 1;
        else if (!var)
            trim_nl = 1;
    }
    return push_tok(p, K_EOF, p->len, 0) ? 0 : -1;
}

/* ------------------------------------------------------------------ parser */

static tok *cur(P *p) {
    return &p->toks[p->i];
}
static int is_name(const tok *k, const char *s) {
    return k->t == K_NAME && k->n == strlen(s) && memcmp(k->p, s, k->n) == 0;
}
static int is_op(const tok *k, const char *s) {
    return k->t == K_OP && k->n == strlen(s) && memcmp(k->p, s, k->n) == 0;
}
static void advance(P *p) {
    if (p->toks[p->i].t != K_EOF) p->i++;
}

static const char *tok_desc(const tok *k, char *buf, size_t cap) {
    switch (k->t) {
    case K_EOF:
        return "the end of the template";
    case K_TEXT:
        return "text";
    case K_VBEG:
        return "'{{'";
    case K_VEND:
        return "'}}'";
    case K_BBEG:
        return "'{%'";
    case K_BEND:
        return "'%}'";
    case K_STR:
        return "a string";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(k->n > 40 ? 40 : k->n), k->p);
        return buf;
    }
}

static int expect_op(P *p, const char *s) {
    if (is_op(cur(p), s)) {
        advance(p);
        return 0;
    }
    char b[64];
    return fail(p, cur(p)->line, "expected '%s', found %s", s, tok_desc(cur(p), b, sizeof b));
}

static int expect_bend(P *p, const char *what) {
    if (cur(p)->t == K_BEND) {
        advance(p);
        return 0;
    }
    char b[64];
    return fail(p, cur(p)->line, "expected '%%}' after %s, found %s", what,
                tok_desc(cur(p), b, sizeof b));
}

static jnode *mk(P *p, jkind kind, int line) {
    jnode *n = aalloc(p, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = line;
    }
    return n;
}

typedef struct nvec {
    jnode **v;
    char **names;
    size_t n, cap;
} nvec;

static int nv_push(P *p, nvec *v, jnode *x, char *name) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        jnode **nv = realloc(v->v, cap * sizeof *nv);
        if (nv) v->v = nv;
        char **nn = nv ? realloc(v->names, cap * sizeof *nn) : NULL;
        if (nn) v->names = nn;
        if (!nv || !nn) return fail(p, 0, "out of memory");
        v->cap = cap;
    }
    v->v[v->n] = x;
    v->names[v->n] = name;
    v->n++;
    return 0;
}

static void nv_free(nvec *v) {
    free(v->v);
    free(v->names);
}

/* Move a vector's nodes (and names) into the arena. */
static int nv_finish(P *p, nvec *v, jnode ***kids, size_t *nk, char ***names) {
    *kids = NULL;
    *nk = v->n;
    if (names) *names = NULL;
    if (v->n) {
        *kids = aalloc(p, v->n * sizeof **kids);
        if (*kids) memcpy(*kids, v->v, v->n * sizeof **kids);
        if (names) {
            *names = aalloc(p, v->n * sizeof **names);
            if (*names) memcpy(*names, v->names, v->n * sizeof **names);
        }
    }
    nv_free(v);
    return p->failed ? -1 : 0;
}

static jnode *lit(P *p, json_t *v, int line) {
    if (!v || json_array_append_new(p->t->lits, v)) {
        fail(p, line, "out of memory");
        return NULL;
    }
    jnode *n = mk(p, N_LIT, line);
    if (n) n->lit = v;
    return n;
}

static jnode *parse_expr(P *p);
static jnode *parse_or(P *p);
static jnode *parse_unary(P *p, int with_filter);
static jnode *parse_primary(P *p);
static jnode *parse_postfix(P *p, jnode *e);

static int enter(P *p) {
    if (++p->nest > SD_JINJA_MAX_NEST)
        return fail(p, cur(p)->line, "nesting deeper than %d", SD_JINJA_MAX_NEST);
    return 0;
}

/* (args): positional expressions, then name=expr keywords. The '(' is current. */
static int parse_args(P *p, jnode *n) {
    advance(p);
    nvec pos = {0}, kw = {0};
    while (!p->failed && !is_op(cur(p), ")")) {
        if (cur(p)->t == K_NAME && is_op(&p->toks[p->i + 1], "=")) {
            char *name = adup(p, cur(p)->p, cur(p)->n);
            advance(p);
            advance(p);
            jnode *v = parse_expr(p);
            if (!v || nv_push(p, &kw, v, name)) break;
        } else {
            jnode *v = parse_expr(p);
            if (!v || nv_push(p, &pos, v, NULL)) break;
        }
        if (!is_op(cur(p), ",")) break;
        advance(p);
    }
    if (p->failed || expect_op(p, ")")) {
        nv_free(&pos);
        nv_free(&kw);
        return -1;
    }
    if (nv_finish(p, &pos, &n->kids, &n->nk, NULL)) {
        nv_free(&kw);
        return -1;
    }
    return nv_finish(p, &kw, &n->kwv, &n->nkw, &n->kwn);
}

static jnode *parse_filter_expr(P *p, jnode *e) {
    while (e && !p->failed) {
        tok *k = cur(p);
        if (is_op(k, "|")) {
            advance(p);
            if (cur(p)->t != K_NAME) {
                fail(p, cur(p)->line, "expected a filter name after '|'");
                return NULL;
            }
            jnode *f = mk(p, N_FILTER, k->line);
            if (!f) return NULL;
            f->a = e;
            f->s = adup(p, cur(p)->p, cur(p)->n);
            advance(p);
            if (is_op(cur(p), "(") && parse_args(p, f)) return NULL;
            e = f;
        } else if (is_name(k, "is")) {
            advance(p);
            jnode *t = mk(p, N_TEST, k->line);
            if (!t) return NULL;
            t->a = e;
            if (is_name(cur(p), "not")) {
                t->neg = 1;
                advance(p);
            }
            if (cur(p)->t != K_NAME) {
                fail(p, cur(p)->line, "expected a test name after 'is'");
                return NULL;
            }
            t->s = adup(p, cur(p)->p, cur(p)->n);
            advance(p);
            tok *n = cur(p);
            if (is_op(n, "(")) {
                if (parse_args(p, t)) return NULL;
            } else if ((n->t == K_NAME || n->t == K_STR || n->t == K_INT || n->t == K_FLOAT ||
                        is_op(n, "[") || is_op(n, "{")) &&
                       !is_name(n, "else") && !is_name(n, "or") && !is_name(n, "and")) {
                jnode *arg = parse_postfix(p, parse_primary(p));
                if (!arg) return NULL;
                t->kids = aalloc(p, sizeof *t->kids);
                if (!t->kids) return NULL;
                t->kids[0] = arg;
                t->nk = 1;
            }
            e = t;
        } else if (is_op(k, "(")) {
            jnode *c = mk(p, N_CALL, k->line);
            if (!c) return NULL;
            c->a = e;
            if (parse_args(p, c)) return NULL;
            e = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : e;
}

static jnode *parse_postfix(P *p, jnode *e) {
    while (e && !p->failed) {
        tok *k = cur(p);
        if (is_op(k, ".")) {
            advance(p);
            if (cur(p)->t != K_NAME && cur(p)->t != K_INT) {
                fail(p, cur(p)->line, "expected an attribute name after '.'");
                return NULL;
            }
            jnode *a = mk(p, N_ATTR, k->line);
            if (!a) return NULL;
            a->a = e;
            a->s = adup(p, cur(p)->p, cur(p)->n);
            advance(p);
            e = a;
        } else if (is_op(k, "[")) {
            advance(p);
            jnode *parts[3] = {NULL, NULL, NULL};
            int np = 0, slice = 0;
            for (;;) {
                if (!is_op(cur(p), ":") && !is_op(cur(p), "]")) {
                    parts[np] = parse_expr(p);
                    if (!parts[np]) return NULL;
                }
                if (is_op(cur(p), ":") && np < 2) {
                    slice = 1;
                    np++;
                    advance(p);
                    continue;
                }
                break;
            }
            if (expect_op(p, "]")) return NULL;
            jnode *x = mk(p, slice ? N_SLICE : N_INDEX, k->line);
            if (!x) return NULL;
            x->a = e;
            if (!slice && !parts[0]) {
                fail(p, k->line, "empty subscript");
                return NULL;
            }
            x->b = parts[0];
            x->c = parts[1];
            x->d = parts[2];
            e = x;
        } else if (is_op(k, "(")) {
            jnode *c = mk(p, N_CALL, k->line);
            if (!c) return NULL;
            c->a = e;
            if (parse_args(p, c)) return NULL;
            e = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : e;
}

static jnode *parse_primary(P *p) {
    tok *k = cur(p);
    char b[64];
    if (enter(p)) return NULL;
    jnode *r = NULL;
    if (k->t == K_NAME) {
        if (is_name(k, "true") || is_name(k, "True"))
            r = lit(p, json_true(), k->line);
        else if (is_name(k, "false") || is_name(k, "False"))
            r = lit(p, json_false(), k->line);
        else if (is_name(k, "none") || is_name(k, "None"))
            r = lit(p, json_null(), k->line);
        else if ((r = mk(p, N_NAME, k->line)))
            r->s = adup(p, k->p, k->n);
        advance(p);
    } else if (k->t == K_STR) {
        /* adjacent strings concatenate */
        size_t n = 0;
        for (size_t j = p->i; p->toks[j].t == K_STR; j++)
            n += p->toks[j].slen;
        char *s = malloc(n + 1);
        if (!s) {
            fail(p, k->line, "out of memory");
            p->nest--;
            return NULL;
        }
        n = 0;
        while (cur(p)->t == K_STR) {
            memcpy(s + n, cur(p)->sval, cur(p)->slen);
            n += cur(p)->slen;
            advance(p);
        }
        r = lit(p, json_stringn_nocheck(s, n), k->line);
        free(s);
    } else if (k->t == K_INT) {
        r = lit(p, json_integer(k->ival), k->line);
        advance(p);
    } else if (k->t == K_FLOAT) {
        r = lit(p, json_real(k->fval), k->line);
        advance(p);
    } else if (is_op(k, "(")) {
        advance(p);
        nvec v = {0};
        int tuple = 0;
        while (!p->failed && !is_op(cur(p), ")")) {
            jnode *e = parse_expr(p);
            if (!e || nv_push(p, &v, e, NULL)) break;
            if (!is_op(cur(p), ",")) break;
            tuple = 1;
            advance(p);
        }
        if (p->failed || expect_op(p, ")")) {
            nv_free(&v);
        } else if (v.n == 1 && !tuple) {
            r = v.v[0];
            nv_free(&v);
        } else if ((r = mk(p, N_LIST, k->line))) {
            if (nv_finish(p, &v, &r->kids, &r->nk, NULL)) r = NULL;
        } else {
            nv_free(&v);
        }
    } else if (is_op(k, "[") || is_op(k, "{")) {
        const int dict = is_op(k, "{");
        advance(p);
        nvec v = {0};
        const char *close = dict ? "}" : "]";
        while (!p->failed && !is_op(cur(p), close)) {
            jnode *e = parse_expr(p);
            if (!e || nv_push(p, &v, e, NULL)) break;
            if (dict) {
                if (expect_op(p, ":")) break;
                jnode *val = parse_expr(p);
                if (!val || nv_push(p, &v, val, NULL)) break;
            }
            if (!is_op(cur(p), ",")) break;
            advance(p);
        }
        if (p->failed || expect_op(p, close)) {
            nv_free(&v);
        } else if ((r = mk(p, dict ? N_DICT : N_LIST, k->line))) {
            if (nv_finish(p, &v, &r->kids, &r->nk, NULL)) r = NULL;
        } else {
            nv_free(&v);
        }
    } else {
        fail(p, k->line, "expected an expression, found %s", tok_desc(k, b, sizeof b));
    }
    p->nest--;
    return p->failed ? NULL : r;
}

static jnode *parse_unary(P *p, int with_filter) {
    tok *k = cur(p);
    jnode *e;
    if (enter(p)) return NULL;
    if (is_op(k, "-") || is_op(k, "+")) {
        advance(p);
        jnode *x = parse_unary(p, 0);
        e = x ? mk(p, is_op(k, "-") ? N_NEG : N_POS, k->line) : NULL;
        if (e) e->a = x;
    } else {
        e = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) e = parse_filter_expr(p, e);
    p->nest--;
    return p->failed ? NULL : e;
}

static jnode *bin(P *p, int op, jnode *a, jnode *b, int line) {
    if (!a || !b) return NULL;
    jnode *n = mk(p, N_BIN, line);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(P *p) {
    jnode *e = parse_unary(p, 1);
    while (e && is_op(cur(p), "**")) {
        int line = cur(p)->line;
        advance(p);
        e = bin(p, OP_POW, e, parse_unary(p, 1), line);
    }
    return e;
}

static jnode *parse_math2(P *p) {
    jnode *e = parse_pow(p);
    for (;;) {
        tok *k = cur(p);
        int op = is_op(k, "*")    ? OP_MUL
                 : is_op(k, "/")  ? OP_DIV
                 : is_op(k, "//") ? OP_FLOORDIV
                 : is_op(k, "%")  ? OP_MOD
                                  : 0;
        if (!e || !op) return e;
        advance(p);
        e = bin(p, op, e, parse_pow(p), k->line);
    }
}

static jnode *parse_concat(P *p) {
    jnode *e = parse_math2(p);
    while (e && is_op(cur(p), "~")) {
        int line = cur(p)->line;
        advance(p);
        e = bin(p, OP_CONCAT, e, parse_math2(p), line);
    }
    return e;
}

static jnode *parse_math1(P *p) {
    jnode *e = parse_concat(p);
    for (;;) {
        tok *k = cur(p);
        int op = is_op(k, "+") ? OP_ADD : is_op(k, "-") ? OP_SUB : 0;
        if (!e || !op) return e;
        advance(p);
        e = bin(p, op, e, parse_concat(p), k->line);
    }
}

static jnode *parse_compare(P *p) {
    jnode *e = parse_math1(p);
    for (;;) {
        tok *k = cur(p);
        int op = is_op(k, "==")     ? OP_EQ
                 : is_op(k, "!=")   ? OP_NE
                 : is_op(k, "<")    ? OP_LT
                 : is_op(k, "<=")   ? OP_LE
                 : is_op(k, ">")    ? OP_GT
                 : is_op(k, ">=")   ? OP_GE
                 : is_name(k, "in") ? OP_IN
                                    : 0;
        if (!op && is_name(k, "not") && is_name(&p->toks[p->i + 1], "in")) {
            advance(p);
            op = OP_NOTIN;
        }
        if (!e || !op) return e;
        advance(p);
        e = bin(p, op, e, parse_math1(p), k->line);
    }
}

static jnode *parse_not(P *p) {
    tok *k = cur(p);
    if (is_name(k, "not")) {
        advance(p);
        if (enter(p)) return NULL;
        jnode *x = parse_not(p);
        p->nest--;
        jnode *n = x ? mk(p, N_NOT, k->line) : NULL;
        if (n) n->a = x;
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(P *p) {
    jnode *e = parse_not(p);
    while (e && is_name(cur(p), "and")) {
        int line = cur(p)->line;
        advance(p);
        jnode *b = parse_not(p);
        jnode *n = b ? mk(p, N_AND, line) : NULL;
        if (!n) return NULL;
        n->a = e;
        n->b = b;
        e = n;
    }
    return e;
}

static jnode *parse_or(P *p) {
    jnode *e = parse_and(p);
    while (e && is_name(cur(p), "or")) {
        int line = cur(p)->line;
        advance(p);
        jnode *b = parse_and(p);
        jnode *n = b ? mk(p, N_OR, line) : NULL;
        if (!n) return NULL;
        n->a = e;
        n->b = b;
        e = n;
    }
    return e;
}

static jnode *parse_expr(P *p) {
    if (enter(p)) return NULL;
    jnode *e = parse_or(p);
    while (e && is_name(cur(p), "if")) {
        int line = cur(p)->line;
        advance(p);
        jnode *c = parse_or(p), *el = NULL;
        if (c && is_name(cur(p), "else")) {
            advance(p);
            el = parse_expr(p);
            if (!el) c = NULL;
        }
        jnode *n = c ? mk(p, N_COND, line) : NULL;
        if (!n) {
            e = NULL;
            break;
        }
        n->a = e;
        n->b = c;
        n->c = el;
        e = n;
    }
    p->nest--;
    return p->failed ? NULL : e;
}

/* ------------------------------------------------------------------ statements */

static jnode *parse_body(P *p, const char *const *stops, const char *what);

/* After `{%`: is the tag's first word one of stops? */
static int at_stop(P *p, const char *const *stops) {
    if (cur(p)->t != K_BBEG) return 0;
    for (size_t i = 0; stops && stops[i]; i++)
        if (is_name(&p->toks[p->i + 1], stops[i])) return 1;
    return 0;
}

static char *take_name(P *p, const char *what) {
    if (cur(p)->t != K_NAME) {
        char b[64];
        fail(p, cur(p)->line, "expected a name in %s, found %s", what,
             tok_desc(cur(p), b, sizeof b));
        return NULL;
    }
    char *s = adup(p, cur(p)->p, cur(p)->n);
    advance(p);
    return s;
}

/* `{% end... %}`: consume the BBEG, the word and the BEND. */
static int end_tag(P *p, const char *word) {
    advance(p);
    if (!is_name(cur(p), word)) {
        char b[64];
        return fail(p, cur(p)->line, "expected '%s', found %s", word,
                    tok_desc(cur(p), b, sizeof b));
    }
    advance(p);
    return expect_bend(p, word);
}

static jnode *parse_if(P *p, int line) {
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    jnode *n = mk(p, N_IF, line);
    nvec v = {0};
    if (!n) return NULL;
    for (;;) {
        jnode *c = parse_expr(p);
        if (!c || expect_bend(p, "if") || nv_push(p, &v, c, NULL)) break;
        jnode *b = parse_body(p, stops, "if");
        if (!b || nv_push(p, &v, b, NULL)) break;
        /* at {% elif / else / endif */
        tok *w = &p->toks[p->i + 1];
        if (is_name(w, "elif")) {
            advance(p);
            advance(p);
            continue;
        }
        if (is_name(w, "else")) {
            advance(p);
            advance(p);
            if (expect_bend(p, "else")) break;
            static const char *const s2[] = {"endif", NULL};
            n->c = parse_body(p, s2, "if");
            if (!n->c) break;
        }
        end_tag(p, "endif");
        break;
    }
    if (nv_finish(p, &v, &n->kids, &n->nk, NULL)) return NULL;
    return n;
}

static jnode *parse_for(P *p, int line) {
    jnode *n = mk(p, N_FOR, line);
    nvec v = {0};
    if (!n) return NULL;
    int paren = is_op(cur(p), "(");
    if (paren) advance(p);
    for (;;) {
        char *name = take_name(p, "for");
        if (!name || nv_push(p, &v, NULL, name)) break;
        if (!is_op(cur(p), ",")) break;
        advance(p);
    }
    if (paren && !p->failed) expect_op(p, ")");
    if (!p->failed && !is_name(cur(p), "in")) fail(p, cur(p)->line, "expected 'in' in for");
    if (p->failed) {
        nv_free(&v);
        return NULL;
    }
    n->nn = v.n;
    n->names = aalloc(p, v.n * sizeof *n->names);
    if (n->names) memcpy(n->names, v.names, v.n * sizeof *n->names);
    nv_free(&v);
    advance(p);
    n->a = parse_or(p);
    if (!n->a) return NULL;
    if (is_name(cur(p), "if")) {
        advance(p);
        n->d = parse_or(p);
        if (!n->d) return NULL;
    }
    if (is_name(cur(p), "recursive")) {
        fail(p, cur(p)->line, "recursive for loops are not supported");
        return NULL;
    }
    if (expect_bend(p, "for")) return NULL;
    static const char *const stops[] = {"else", "endfor", NULL};
    n->b = parse_body(p, stops, "for");
    if (!n->b) return NULL;
    if (is_name(&p->toks[p->i + 1], "else")) {
        advance(p);
        advance(p);
        if (expect_bend(p, "else")) return NULL;
        static const char *const s2[] = {"endfor", NULL};
        n->c = parse_body(p, s2, "for");
        if (!n->c) return NULL;
    }
    return end_tag(p, "endfor") ? NULL : n;
}

static jnode *parse_set(P *p, int line) {
    jnode *n = mk(p, N_SET, line);
    if (!n) return NULL;
    n->names = aalloc(p, sizeof *n->names);
    if (!n->names) return NULL;
    n->nn = 1;
    n->names[0] = take_name(p, "set");
    if (!n->names[0]) return NULL;
    if (is_op(cur(p), ".")) {
        advance(p);
        n->s = take_name(p, "set");
        if (!n->s) return NULL;
    }
    if (is_op(cur(p), ",")) {
        fail(p, line, "set with several targets is not supported");
        return NULL;
    }
    if (is_op(cur(p), "=")) {
        advance(p);
        n->a = parse_expr(p);
        if (!n->a) return NULL;
        /* `set x = a, b` makes a tuple */
        if (is_op(cur(p), ",")) {
            nvec v = {0};
            nv_push(p, &v, n->a, NULL);
            while (!p->failed && is_op(cur(p), ",")) {
                advance(p);
                if (cur(p)->t == K_BEND) break;
                jnode *e = parse_expr(p);
                if (!e || nv_push(p, &v, e, NULL)) break;
            }
            jnode *l = p->failed ? NULL : mk(p, N_LIST, line);
            if (!l) {
                nv_free(&v);
                return NULL;
            }
            if (nv_finish(p, &v, &l->kids, &l->nk, NULL)) return NULL;
            n->a = l;
        }
        return expect_bend(p, "set") ? NULL : n;
    }
    if (n->s) {
        fail(p, line, "a block set needs a plain name");
        return NULL;
    }
    if (expect_bend(p, "set")) return NULL;
    static const char *const stops[] = {"endset", NULL};
    n->b = parse_body(p, stops, "set");
    if (!n->b) return NULL;
    return end_tag(p, "endset") ? NULL : n;
}

static jnode *parse_macro(P *p, int line) {
    jnode *n = mk(p, N_MACRO, line);
    if (!n) return NULL;
    n->s = take_name(p, "macro");
    if (!n->s || expect_op(p, "(")) return NULL;
    nvec v = {0};
    while (!p->failed && !is_op(cur(p), ")")) {
        char *name = take_name(p, "macro parameters");
        jnode *def = NULL;
        if (name && is_op(cur(p), "=")) {
            advance(p);
            def = parse_expr(p);
            if (!def) break;
        }
        if (!name || nv_push(p, &v, def, name)) break;
        if (!is_op(cur(p), ",")) break;
        advance(p);
    }
    if (p->failed || expect_op(p, ")") || expect_bend(p, "macro")) {
        nv_free(&v);
        return NULL;
    }
    if (nv_finish(p, &v, &n->kids, &n->nk, &n->names)) return NULL;
    n->nn = n->nk;
    static const char *const stops[] = {"endmacro", NULL};
    n->b = parse_body(p, stops, "macro");
    if (!n->b) return NULL;
    return end_tag(p, "endmacro") ? NULL : n;
}

static jnode *parse_stmt(P *p) {
    tok *open = cur(p);
    advance(p); /* {% */
    tok *w = cur(p);
    const int line = open->line;
    if (w->t != K_NAME) {
        char b[64];
        fail(p, line, "expected a tag name after '{%%', found %s", tok_desc(w, b, sizeof b));
        return NULL;
    }
    advance(p);
    if (is_name(w, "if")) return parse_if(p, line);
    if (is_name(w, "for")) return parse_for(p, line);
    if (is_name(w, "set")) return parse_set(p, line);
    if (is_name(w, "macro")) return parse_macro(p, line);
    if (is_name(w, "break") || is_name(w, "continue")) {
        jnode *n = mk(p, is_name(w, "break") ? N_BREAK : N_CONTINUE, line);
        return n && !expect_bend(p, is_name(w, "break") ? "break" : "continue") ? n : NULL;
    }
    if (is_name(w, "generation")) {
        if (expect_bend(p, "generation")) return NULL;
        static const char *const stops[] = {"endgeneration", NULL};
        jnode *b = parse_body(p, stops, "generation");
        return b && !end_tag(p, "endgeneration") ? b : NULL;
    }
    if (is_name(w, "filter")) {
        jnode *n = mk(p, N_FILTERBLK, line), *f = mk(p, N_FILTER, line);
        if (!n || !f) return NULL;
        f->s = take_name(p, "filter");
        if (!f->s) return NULL;
        if (is_op(cur(p), "(") && parse_args(p, f)) return NULL;
        if (expect_bend(p, "filter")) return NULL;
        n->a = f;
        static const char *const stops[] = {"endfilter", NULL};
        n->b = parse_body(p, stops, "filter");
        return n->b && !end_tag(p, "endfilter") ? n : NULL;
    }
    fail(p, line, "unsupported tag '%.*s'", (int)(w->n > 40 ? 40 : w->n), w->p);
    return NULL;
}

static jnode *parse_body(P *p, const char *const *stops, const char *what) {
    jnode *body = mk(p, N_BODY, cur(p)->line);
    nvec v = {0};
    if (!body || enter(p)) return NULL;
    while (!p->failed) {
        tok *k = cur(p);
        if (k->t == K_EOF) {
            if (stops) fail(p, k->line, "unclosed '%s' (the template ends inside it)", what);
            break;
        }
        if (at_stop(p, stops)) break;
        jnode *n = NULL;
        if (k->t == K_TEXT) {
            n = mk(p, N_TEXT, k->line);
            if (n) {
                n->s = adup(p, k->p, k->n);
                n->slen = k->n;
            }
            advance(p);
        } else if (k->t == K_VBEG) {
            advance(p);
            jnode *e = parse_expr(p);
            if (e && cur(p)->t != K_VEND) {
                char b[64];
                fail(p, cur(p)->line, "expected '}}', found %s", tok_desc(cur(p), b, sizeof b));
            }
            advance(p);
            n = e && !p->failed ? mk(p, N_OUT, k->line) : NULL;
            if (n) n->a = e;
        } else if (k->t == K_BBEG) {
            tok *w = &p->toks[p->i + 1];
            if (w->t == K_NAME && (w->n >= 3 && (memcmp(w->p, "end", 3) == 0 ||
                                                 is_name(w, "elif") || is_name(w, "else")))) {
                fail(p, k->line, "unexpected '%.*s'%s%s", (int)(w->n > 40 ? 40 : w->n), w->p,
                     stops ? " inside " : "", stops ? what : "");
                break;
            }
            n = parse_stmt(p);
        } else {
            char b[64];
            fail(p, k->line, "unexpected %s", tok_desc(k, b, sizeof b));
        }
        if (!n || nv_push(p, &v, n, NULL)) break;
    }
    p->nest--;
    if (p->failed) {
        nv_free(&v);
        return NULL;
    }
    return nv_finish(p, &v, &body->kids, &body->nk, NULL) ? NULL : body;
}

int sd_jinja_parse(const char *src, size_t len, sd_jinja **out, sd_error *err) {
    *out = NULL;
    if (!src) return sd_errorf(err, SD_ERR_ARG, "jinja: no template");
    sd_jinja *t = calloc(1, sizeof *t);
    if (!t) return sd_errorf(err, SD_ERR_OOM, "jinja: out of memory");
    t->lits = json_array();
    P p = {.src = src, .len = len, .t = t, .line = 1, .err = err};
    if (!t->lits) fail(&p, 0, "out of memory");
    if (!p.failed && lex(&p) == 0) t->root = parse_body(&p, NULL, "template");
    for (size_t i = 0; i < p.nt; i++)
        free(p.toks[i].sval);
    free(p.toks);
    if (p.failed || !t->root) {
        if (!p.failed) sd_errorf(err, SD_ERR_FORMAT, "jinja: could not parse the template");
        sd_jinja_free(t);
        return err ? (int)err->status : SD_ERR_FORMAT;
    }
    *out = t;
    return SD_OK;
}

void sd_jinja_free(sd_jinja *t) {
    if (!t) return;
    arena_blk *b = t->arena;
    while (b) {
        arena_blk *n = b->next;
        free(b);
        b = n;
    }
    json_decref(t->lits);
    free(t);
}
