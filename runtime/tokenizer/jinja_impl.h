/*
 * runtime/tokenizer/jinja_impl.h: the Jinja subset's syntax tree, shared by the lexer and
 * parser (jinja_parse.c) and the evaluator (jinja_eval.c). Private to runtime/tokenizer.
 *
 * A parsed template is one N_BODY node; every node and string lives in the template's
 * arena (freed at once by sd_jinja_free). Constants are jansson values owned by the node.
 */
#ifndef SD_JINJA_IMPL_H
#define SD_JINJA_IMPL_H

#include <jansson.h>
#include <stddef.h>

#include "runtime/tokenizer/sd_vocab.h"

typedef enum jkind {
    /* statements */
    N_BODY,      /* kids: statements */
    N_TEXT,      /* s, slen: literal text */
    N_OUT,       /* a: expression to print */
    N_IF,        /* kids: cond0, body0, cond1, body1, ...; c: else body or NULL */
    N_FOR,       /* names[nn]: targets; a: iterable; b: body; c: else body; d: filter cond */
    N_SET,       /* names[0] (and s: attribute for `set ns.x`) ; a: value, or b: block body */
    N_MACRO,     /* s: name; names: params; kids: defaults (NULL entries); b: body */
    N_BREAK,     /* loop control */
    N_CONTINUE,  /* loop control */
    N_FILTERBLK, /* a: a filter node whose operand is NULL; b: body */
    /* expressions */
    N_LIT,    /* lit */
    N_NAME,   /* s */
    N_ATTR,   /* a.s */
    N_INDEX,  /* a[b] */
    N_SLICE,  /* a[b:c:d], each of b, c, d may be NULL */
    N_CALL,   /* a(kids..., kwn=kwv...) */
    N_FILTER, /* a | s(kids..., kwn=kwv...) */
    N_TEST,   /* a is [not] s(kids...); neg */
    N_NOT,    /* not a */
    N_NEG,    /* -a */
    N_POS,    /* +a */
    N_AND,    /* a and b */
    N_OR,     /* a or b */
    N_BIN,    /* a op b */
    N_COND,   /* a if b else c (c may be NULL) */
    N_LIST,   /* [kids] or a tuple */
    N_DICT,   /* {kids[0]: kids[1], ...} */
} jkind;

typedef enum jop {
    OP_EQ = 1,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
} jop;

typedef struct jnode jnode;
struct jnode {
    jkind kind;
    int op;  /* jop for N_BIN */
    int neg; /* N_TEST: `is not` */
    int line;
    char *s;
    size_t slen;
    jnode *a, *b, *c, *d;
    jnode **kids;
    size_t nk;
    char **names;
    size_t nn;
    char **kwn;
    jnode **kwv;
    size_t nkw;
    json_t *lit;
};

struct sd_jinja {
    jnode *root;
    void *arena;  /* a chain of allocations */
    json_t *lits; /* an array holding every constant (released at free) */
};

#endif /* SD_JINJA_IMPL_H */
