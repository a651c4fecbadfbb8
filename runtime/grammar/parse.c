/* runtime/grammar/parse.c: GBNF text -> a compiled sd_grammar (see sd_grammar.h for the
 * syntax). Groups and repetitions become generated rules:
 *   x*      S ::= x S |            x+      x S
 *   x?      O ::= x |              x{m,n}  m copies of x, then O_{n-m} with
 *                                          O_1 ::= x | , O_j ::= x O_{j-1} |
 *   x{m,}   m copies of x, then S
 * Then nullable rules are found and left recursion refused (a rule that reaches itself
 * through a prefix that may be empty), so the matcher's expansion always ends. */
#include "runtime/grammar/grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Growable arrays of the parse. */
typedef struct seqv {
    gelem *e;
    size_t n, cap;
} seqv;

typedef struct rulev {
    char *name;
    seqv *alts;
    size_t n_alts, cap_alts;
    int defined;
    size_t ref_at; /* where it was first referenced (an undefined rule's error) */
} rulev;

typedef struct parser {
    const char *s;
    size_t len, pos;
    rulev *rules;
    size_t n_rules, cap_rules;
    gclass *cls;
    size_t n_cls, cap_cls;
    uint32_t *rng; /* pairs lo, hi */
    size_t n_rng, cap_rng;
    size_t n_pushed; /* elements pushed in all (copies by repetition included): bounded */
    int depth;       /* nesting of groups being parsed: bounded (the parser recurses) */
    sd_error *err;
    int rc;
} parser;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void where(const parser *p, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Record a syntax error at byte `at` (the first one wins). Returns -1. */
static int fail_at(parser *p, size_t at, const char *what) {
    if (p->rc) return -1;
    int line, col;
    where(p, at, &line, &col);
    p->rc = sd_errorf(p->err, SD_ERR_FORMAT, "grammar:%d:%d: %s", line, col, what);
    return -1;
}

static int oom(parser *p) {
    if (!p->rc) p->rc = sd_errorf(p->err, SD_ERR_OOM, "grammar: out of memory");
    return -1;
}

static int at_end(const parser *p) {
    return p->pos >= p->len;
}

static int peek(const parser *p) {
    return at_end(p) ? -1 : (unsigned char)p->s[p->pos];
}

static int is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skip spaces, newlines and comments. */
static void skip_space(parser *p) {
    while (!at_end(p)) {
        const int c = peek(p);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (!at_end(p) && p->s[p->pos] != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

/* 1 if a rule definition "name ::=" starts at p->pos. */
static int rule_starts(const parser *p) {
    size_t i = p->pos;
    while (i < p->len && is_name_char((unsigned char)p->s[i]))
        i++;
    if (i == p->pos) return 0;
    while (i < p->len && (p->s[i] == ' ' || p->s[i] == '\t'))
        i++;
    return i + 3 <= p->len && memcmp(p->s + i, "::=", 3) == 0;
}

static int32_t rule_find(parser *p, const char *name, size_t n, size_t at) {
    for (size_t i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == n && memcmp(p->rules[i].name, name, n) == 0)
            return (int32_t)i;
    if (p->n_rules >= GRAMMAR_MAX_RULES) return fail_at(p, at, "too many rules");
    if (grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) return oom(p);
    rulev *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(n + 1);
    if (!r->name) return oom(p);
    memcpy(r->name, name, n);
    r->name[n] = '\0';
    r->ref_at = at;
    return (int32_t)p->n_rules++;
}

/* A new generated rule named after its parent. */
static int32_t rule_new(parser *p, int32_t parent, size_t at) {
    char name[96];
    snprintf(name, sizeof name, "%.60s~%zu", p->rules[parent].name, p->n_rules);
    const int32_t r = rule_find(p, name, strlen(name), at);
    if (r >= 0) p->rules[r].defined = 1;
    return r;
}

static seqv *alt_new(parser *p, int32_t r) {
    rulev *rv = &p->rules[r];
    if (grow((void **)&rv->alts, &rv->cap_alts, rv->n_alts + 1, sizeof *rv->alts)) {
        oom(p);
        return NULL;
    }
    seqv *a = &rv->alts[rv->n_alts++];
    memset(a, 0, sizeof *a);
    return a;
}

static int seq_push(parser *p, seqv *s, gelem e) {
    /* Both bounds before anything grows: a short repeated item cannot allocate gigabytes. */
    if (s->n >= GRAMMAR_MAX_ELEMS || p->n_pushed >= 2 * (size_t)GRAMMAR_MAX_ELEMS)
        return fail_at(p, p->pos, "grammar too large");
    p->n_pushed++;
    if (grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) return oom(p);
    s->e[s->n++] = e;
    return 0;
}

static int seq_append(parser *p, seqv *s, const gelem *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (seq_push(p, s, e[i])) return -1;
    return 0;
}

/* A class of n_r ranges (pairs in r), negated or not; returns its index. */
static int32_t class_add(parser *p, const uint32_t *r, size_t n_r, int neg) {
    if (grow((void **)&p->cls, &p->cap_cls, p->n_cls + 1, sizeof *p->cls) ||
        grow((void **)&p->rng, &p->cap_rng, p->n_rng + 2 * n_r, sizeof *p->rng))
        return oom(p);
    /* sorted by lo, overlapping or adjacent ranges merged (the matcher's partial-UTF-8
     * test needs them disjoint and apart) */
    uint32_t *dst = p->rng + p->n_rng;
    memcpy(dst, r, 2 * n_r * sizeof *r);
    for (size_t i = 1; i < n_r; i++) { /* insertion sort: classes are short */
        uint32_t lo = dst[2 * i], hi = dst[2 * i + 1];
        size_t j = i;
        while (j > 0 && dst[2 * (j - 1)] > lo) {
            dst[2 * j] = dst[2 * (j - 1)];
            dst[2 * j + 1] = dst[2 * (j - 1) + 1];
            j--;
        }
        dst[2 * j] = lo;
        dst[2 * j + 1] = hi;
    }
    size_t m = 0;
    for (size_t i = 0; i < n_r; i++) {
        if (m > 0 && dst[2 * i] <= dst[2 * (m - 1) + 1] + 1) {
            if (dst[2 * i + 1] > dst[2 * (m - 1) + 1]) dst[2 * (m - 1) + 1] = dst[2 * i + 1];
        } else {
            dst[2 * m] = dst[2 * i];
            dst[2 * m + 1] = dst[2 * i + 1];
            m++;
        }
    }
    gclass *c = &p->cls[p->n_cls];
    c->neg = neg;
    c->first = (uint32_t)(p->n_rng / 2);
    c->n = (uint32_t)m;
    p->n_rng += 2 * m;
    return (int32_t)p->n_cls++;
}

/* One UTF-8 code point of the text (a literal or class character). */
static int decode_utf8(parser *p, uint32_t *cp) {
    const size_t at = p->pos;
    const unsigned char c = (unsigned char)p->s[p->pos++];
    int n = 0;
    if (c < 0x80) {
        *cp = c;
        return 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
        *cp = c & 0x1Fu;
        n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        *cp = c & 0x0Fu;
        n = 2;
    } else if (c >= 0xF0 && c <= 0xF4) {
        *cp = c & 0x07u;
        n = 3;
    } else {
        return fail_at(p, at, "invalid UTF-8");
    }
    for (int i = 0; i < n; i++) {
        if (at_end(p) || ((unsigned char)p->s[p->pos] & 0xC0u) != 0x80u)
            return fail_at(p, at, "invalid UTF-8");
        *cp = *cp << 6 | ((unsigned char)p->s[p->pos++] & 0x3Fu);
    }
    return 0;
}

static int hex_digits(parser *p, int n, uint32_t *cp) {
    const size_t at = p->pos;
    *cp = 0;
    for (int i = 0; i < n; i++) {
        const int c = peek(p);
        int v;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v = c - 'A' + 10;
        else
            return fail_at(p, at, "expected a hexadecimal digit");
        *cp = *cp << 4 | (uint32_t)v;
        p->pos++;
    }
    if (*cp > 0x10FFFFu) return fail_at(p, at, "code point above U+10FFFF");
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 code point. */
static int read_char(parser *p, uint32_t *cp) {
    if (at_end(p)) return fail_at(p, p->pos, "unexpected end of the grammar");
    if (peek(p) != '\\') return decode_utf8(p, cp);
    const size_t at = p->pos++;
    if (at_end(p)) return fail_at(p, at, "unexpected end after '\\'");
    const int c = (unsigned char)p->s[p->pos++];
    switch (c) {
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '/':
    case '^':
        *cp = (uint32_t)c;
        return 0;
    case 'x':
        return hex_digits(p, 2, cp);
    case 'u':
        return hex_digits(p, 4, cp);
    case 'U':
        return hex_digits(p, 8, cp);
    default:
        return fail_at(p, at,
                       "unknown escape (expected \\n \\r \\t \\\\ \\\" \\[ \\] \\- "
                       "\\/ \\xHH \\uHHHH \\UHHHHHHHH)");
    }
}

static int parse_alternatives(parser *p, int32_t rule, int nested);

static int parse_uint(parser *p, uint32_t *v) {
    const size_t at = p->pos;
    uint64_t x = 0;
    if (!(peek(p) >= '0' && peek(p) <= '9')) return fail_at(p, at, "expected a number");
    while (peek(p) >= '0' && peek(p) <= '9') {
        x = x * 10 + (uint64_t)(peek(p) - '0');
        if (x > SD_GRAMMAR_MAX_REPEAT) return fail_at(p, at, "repetition bound above 1024");
        p->pos++;
    }
    *v = (uint32_t)x;
    return 0;
}

/* Wrap seq's elements [start, n) (one item) into rule references per the repetition
 * [min, max] (max UINT32_MAX: unbounded). */
static int repeat(parser *p, int32_t parent, seqv *seq, size_t start, uint32_t min, uint32_t max,
                  size_t at) {
    const size_t n_item = seq->n - start;
    gelem *item = malloc(n_item * sizeof *item);
    if (!item) return oom(p);
    memcpy(item, seq->e + start, n_item * sizeof *item);
    seq->n = start;
    int rc = 0;
    for (uint32_t i = 0; i < min && !rc; i++)
        rc = seq_append(p, seq, item, n_item);
    if (!rc && max == UINT32_MAX) { /* S ::= item S | */
        const int32_t s = rule_new(p, parent, at);
        seqv *a = s < 0 ? NULL : alt_new(p, s);
        rc = !a || seq_append(p, a, item, n_item) ||
             seq_push(p, a, (gelem){GE_RULE, (uint32_t)s}) || !alt_new(p, s) ||
             seq_push(p, seq, (gelem){GE_RULE, (uint32_t)s});
    } else if (!rc && max > min) { /* O_1 ::= item | ;  O_j ::= item O_{j-1} | */
        int32_t prev = -1;
        for (uint32_t j = 0; j < max - min && !rc; j++) {
            const int32_t o = rule_new(p, parent, at);
            seqv *a = o < 0 ? NULL : alt_new(p, o);
            rc = !a || seq_append(p, a, item, n_item) ||
                 (prev >= 0 && seq_push(p, a, (gelem){GE_RULE, (uint32_t)prev})) || !alt_new(p, o);
            prev = o;
        }
        if (!rc) rc = seq_push(p, seq, (gelem){GE_RULE, (uint32_t)prev});
    }
    free(item);
    return rc ? -1 : 0;
}

/* A sequence of items (one alternative) into alternative `alt` of rule. */
static int parse_sequence(parser *p, int32_t rule, int nested) {
    seqv *seq = alt_new(p, rule);
    if (!seq) return -1;
    const size_t alt_i = p->rules[rule].n_alts - 1;
    for (;;) {
        skip_space(p);
        seq = &p->rules[rule].alts[alt_i]; /* the rule's alternatives may have moved */
        if (at_end(p) || peek(p) == '|' || peek(p) == ')') break;
        if (!nested && rule_starts(p)) break;
        const size_t start = seq->n, at = p->pos;
        const int c = peek(p);
        if (c == '"') {
            p->pos++;
            while (!at_end(p) && peek(p) != '"') {
                uint32_t cp;
                if (read_char(p, &cp)) return -1;
                const uint32_t r[2] = {cp, cp};
                const int32_t k = class_add(p, r, 1, 0);
                if (k < 0 || seq_push(p, seq, (gelem){GE_CHARS, (uint32_t)k})) return -1;
            }
            if (at_end(p)) return fail_at(p, at, "unterminated literal (expected '\"')");
            p->pos++;
            if (seq->n == start) continue; /* "" matches the empty string */
        } else if (c == '[') {
            p->pos++;
            int neg = 0;
            if (peek(p) == '^') {
                neg = 1;
                p->pos++;
            }
            uint32_t *r = NULL;
            size_t n_r = 0, cap_r = 0;
            while (!at_end(p) && peek(p) != ']') {
                uint32_t lo, hi;
                if (read_char(p, &lo)) {
                    free(r);
                    return -1;
                }
                hi = lo;
                if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
                    p->pos++;
                    const size_t at_hi = p->pos;
                    if (read_char(p, &hi)) {
                        free(r);
                        return -1;
                    }
                    if (hi < lo) {
                        free(r);
                        return fail_at(p, at_hi, "character range with its end below its start");
                    }
                }
                if (grow((void **)&r, &cap_r, 2 * (n_r + 1), sizeof *r)) {
                    free(r);
                    return oom(p);
                }
                r[2 * n_r] = lo;
                r[2 * n_r + 1] = hi;
                n_r++;
            }
            if (at_end(p)) {
                free(r);
                return fail_at(p, at, "unterminated character class (expected ']')");
            }
            p->pos++;
            if (n_r == 0 && !neg) {
                free(r);
                return fail_at(p, at, "empty character class");
            }
            const int32_t k = class_add(p, r, n_r, neg);
            free(r);
            if (k < 0 || seq_push(p, seq, (gelem){GE_CHARS, (uint32_t)k})) return -1;
        } else if (c == '.') {
            p->pos++;
            const uint32_t r[2] = {0, 0x10FFFFu};
            const int32_t k = class_add(p, r, 1, 0);
            if (k < 0 || seq_push(p, seq, (gelem){GE_CHARS, (uint32_t)k})) return -1;
        } else if (c == '(') {
            p->pos++;
            const int32_t g = rule_new(p, rule, at);
            if (g < 0 || parse_alternatives(p, g, 1)) return -1;
            skip_space(p);
            if (peek(p) != ')') return fail_at(p, p->pos, "expected ')'");
            p->pos++;
            seq = &p->rules[rule].alts[alt_i];
            if (seq_push(p, seq, (gelem){GE_RULE, (uint32_t)g})) return -1;
        } else if (is_name_char(c)) {
            size_t e = p->pos;
            while (e < p->len && is_name_char((unsigned char)p->s[e]))
                e++;
            const int32_t r = rule_find(p, p->s + p->pos, e - p->pos, at);
            if (r < 0) return -1;
            p->pos = e;
            seq = &p->rules[rule].alts[alt_i];
            if (seq_push(p, seq, (gelem){GE_RULE, (uint32_t)r})) return -1;
        } else {
            return fail_at(p, at, "expected a literal, a character class, '.', a rule name or '('");
        }
        /* postfix repetition of the item just read (no space before it) */
        uint32_t min = 1, max = 1;
        const size_t at_op = p->pos;
        const int op = peek(p);
        if (op == '*' || op == '+' || op == '?') {
            p->pos++;
            min = op == '+' ? 1 : 0;
            max = op == '?' ? 1 : UINT32_MAX;
        } else if (op == '{') {
            p->pos++;
            skip_space(p);
            if (parse_uint(p, &min)) return -1;
            skip_space(p);
            max = min;
            if (peek(p) == ',') {
                p->pos++;
                skip_space(p);
                max = UINT32_MAX;
                if (peek(p) != '}' && parse_uint(p, &max)) return -1;
                skip_space(p);
            }
            if (peek(p) != '}') return fail_at(p, p->pos, "expected '}'");
            p->pos++;
            if (max < min) return fail_at(p, at_op, "repetition {m,n} with n below m");
        } else {
            continue;
        }
        seq = &p->rules[rule].alts[alt_i];
        if (repeat(p, rule, seq, start, min, max, at_op)) return -1;
    }
    return 0;
}

static int parse_alternatives(parser *p, int32_t rule, int nested) {
    if (p->depth >= GRAMMAR_MAX_DEPTH)
        return fail_at(p, p->pos, "groups nested more than " SD_STR(GRAMMAR_MAX_DEPTH) " deep");
    p->depth++;
    int rc = parse_sequence(p, rule, nested);
    while (!rc) {
        skip_space(p);
        if (peek(p) != '|') break;
        p->pos++;
        rc = parse_sequence(p, rule, nested);
    }
    p->depth--;
    return rc ? -1 : 0;
}

static int parse_rules(parser *p) {
    for (;;) {
        skip_space(p);
        if (at_end(p)) return 0;
        const size_t at = p->pos;
        size_t e = p->pos;
        while (e < p->len && is_name_char((unsigned char)p->s[e]))
            e++;
        if (e == p->pos) return fail_at(p, at, "expected a rule name");
        const int32_t r = rule_find(p, p->s + p->pos, e - p->pos, at);
        if (r < 0) return -1;
        if (p->rules[r].defined) return fail_at(p, at, "rule defined twice");
        p->rules[r].defined = 1;
        p->pos = e;
        while (peek(p) == ' ' || peek(p) == '\t')
            p->pos++;
        if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
            return fail_at(p, p->pos, "expected '::='");
        p->pos += 3;
        if (parse_alternatives(p, r, 0)) return -1;
        skip_space(p);
        if (!at_end(p) && !rule_starts(p))
            return fail_at(p, p->pos, peek(p) == ')' ? "unbalanced ')'" : "expected a rule");
    }
}

/* Nullable rules, then left recursion: a rule reachable from itself through the first
 * element of an alternative after a prefix of nullable rules. */
static int check_left_recursion(parser *p) {
    const size_t n = p->n_rules;
    uint8_t *nullable = calloc(n ? n : 1, 1), *color = calloc(n ? n : 1, 1);
    uint32_t *stack = malloc((n ? n : 1) * sizeof *stack),
             *edge = malloc((n ? n : 1) * sizeof *edge);
    if (!nullable || !color || !stack || !edge) {
        free(nullable);
        free(color);
        free(stack);
        free(edge);
        return oom(p);
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (size_t a = 0; a < p->rules[r].n_alts && !nullable[r]; a++) {
                const seqv *s = &p->rules[r].alts[a];
                size_t i = 0;
                while (i < s->n && s->e[i].type == GE_RULE && nullable[s->e[i].arg])
                    i++;
                if (i == s->n) nullable[r] = changed = 1;
            }
        }
    }
    /* iterative DFS over left edges; color 1 on the path, 2 done */
    int rc = 0;
    for (size_t r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0]) continue;
        size_t depth = 0;
        stack[depth] = (uint32_t)r0;
        edge[depth] = 0;
        color[r0] = 1;
        depth = 1;
        while (depth > 0 && !rc) {
            const uint32_t r = stack[depth - 1];
            /* the edge-th left successor of r */
            uint32_t k = 0, next = UINT32_MAX;
            for (size_t a = 0; a < p->rules[r].n_alts && next == UINT32_MAX; a++) {
                const seqv *s = &p->rules[r].alts[a];
                for (size_t i = 0; i < s->n && s->e[i].type == GE_RULE; i++) {
                    if (k++ == edge[depth - 1]) {
                        next = s->e[i].arg;
                        break;
                    }
                    if (!nullable[s->e[i].arg]) break;
                }
            }
            if (next == UINT32_MAX) {
                color[r] = 2;
                depth--;
                continue;
            }
            edge[depth - 1]++;
            if (color[next] == 1) {
                int line, col;
                const rulev *rv = &p->rules[next];
                where(p, rv->ref_at, &line, &col);
                char name[72];
                snprintf(name, sizeof name, "%s", rv->name);
                char *tilde = strchr(name, '~'); /* a generated rule: name its parent */
                if (tilde) *tilde = '\0';
                rc = sd_errorf(p->err, SD_ERR_FORMAT,
                               "grammar:%d:%d: left recursion in rule '%s' (a rule that reaches "
                               "itself before consuming a character, e.g. a repetition of "
                               "something that can be empty)",
                               line, col, name);
            } else if (color[next] == 0) {
                color[next] = 1;
                stack[depth] = next;
                edge[depth] = 0;
                depth++;
            }
        }
    }
    free(nullable);
    free(color);
    free(stack);
    free(edge);
    if (rc) p->rc = rc;
    return rc ? -1 : 0;
}

static void parser_free(parser *p) {
    for (size_t i = 0; i < p->n_rules; i++) {
        for (size_t a = 0; a < p->rules[i].n_alts; a++)
            free(p->rules[i].alts[a].e);
        free(p->rules[i].alts);
        free(p->rules[i].name);
    }
    free(p->rules);
    free(p->cls);
    free(p->rng);
}

void sd_grammar_free(sd_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->alt_start);
    free(g->rules);
    free(g->cls);
    free(g->rng);
    free(g);
}

/* Flatten the parse into the matcher's arrays. */
static int compile(parser *p, int32_t root, sd_grammar **out) {
    size_t n_el = 0, n_alt = 0;
    for (size_t r = 0; r < p->n_rules; r++)
        for (size_t a = 0; a < p->rules[r].n_alts; a++, n_alt++)
            n_el += p->rules[r].alts[a].n + 1;
    if (n_el > GRAMMAR_MAX_ELEMS) return fail_at(p, 0, "grammar too large");
    sd_grammar *g = calloc(1, sizeof *g);
    if (!g) return oom(p);
    g->el = malloc((n_el ? n_el : 1) * sizeof *g->el);
    g->alt_start = malloc((n_alt ? n_alt : 1) * sizeof *g->alt_start);
    g->rules = malloc((p->n_rules ? p->n_rules : 1) * sizeof *g->rules);
    g->cls = malloc((p->n_cls ? p->n_cls : 1) * sizeof *g->cls);
    g->rng = malloc((p->n_rng ? p->n_rng : 1) * sizeof *g->rng);
    if (!g->el || !g->alt_start || !g->rules || !g->cls || !g->rng) {
        sd_grammar_free(g);
        return oom(p);
    }
    size_t e = 0, k = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        g->rules[r].first_alt = (uint32_t)k;
        g->rules[r].n_alt = (uint32_t)p->rules[r].n_alts;
        for (size_t a = 0; a < p->rules[r].n_alts; a++) {
            g->alt_start[k++] = (uint32_t)e;
            if (p->rules[r].alts[a].n)
                memcpy(g->el + e, p->rules[r].alts[a].e, p->rules[r].alts[a].n * sizeof *g->el);
            e += p->rules[r].alts[a].n;
            g->el[e++] = (gelem){GE_END, 0};
        }
    }
    if (p->n_cls) memcpy(g->cls, p->cls, p->n_cls * sizeof *g->cls);
    if (p->n_rng) memcpy(g->rng, p->rng, p->n_rng * sizeof *g->rng);
    g->n_el = n_el;
    g->n_rules = (uint32_t)p->n_rules;
    g->n_cls = (uint32_t)p->n_cls;
    g->root = (uint32_t)root;
    *out = g;
    return 0;
}

int sd_grammar_parse(const char *gbnf, size_t len, const char *root, sd_grammar **out,
                     sd_error *err) {
    if (out) *out = NULL;
    if (!gbnf || !out) return sd_errorf(err, SD_ERR_ARG, "grammar: NULL argument");
    if (!root) root = "root";
    parser p = {.s = gbnf, .len = len, .err = err};
    if (!parse_rules(&p)) {
        for (size_t r = 0; r < p.n_rules; r++)
            if (!p.rules[r].defined) {
                char what[128];
                snprintf(what, sizeof what, "rule '%.64s' is used but never defined",
                         p.rules[r].name);
                fail_at(&p, p.rules[r].ref_at, what);
                break;
            }
    }
    int32_t root_id = -1;
    if (!p.rc) {
        for (size_t r = 0; r < p.n_rules; r++)
            if (strcmp(p.rules[r].name, root) == 0) root_id = (int32_t)r;
        if (root_id < 0) p.rc = sd_errorf(err, SD_ERR_ARG, "grammar: no rule named '%.64s'", root);
    }
    if (!p.rc) check_left_recursion(&p);
    if (!p.rc) compile(&p, root_id, out);
    const int rc = p.rc;
    parser_free(&p);
    return rc;
}

const char *const sd_grammar_json_object =
    "# JSON whose top level is an object (response_format json_object)\n"
    "root    ::= object\n"
    "value   ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object  ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? \"}\" ws\n"
    "array   ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
    "string  ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" "
    "[0-9a-fA-F]{4} ) )* \"\\\"\" ws\n"
    "number  ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
    "( [eE] [-+]? [0-9]{1,4} )? ws\n"
    "ws      ::= [ \\t\\n]{0,20}\n";
