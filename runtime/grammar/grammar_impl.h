/* runtime/grammar/grammar_impl.h: PRIVATE to runtime/grammar. The compiled grammar.
 *
 * Every rule is a list of alternatives; every alternative a run of elements in el[]
 * ended by GE_END. An element is a character class (GE_CHARS: cls[arg]) or a reference
 * to a rule (GE_RULE: rules[arg]). A matcher stack holds positions in el[] (the next
 * element to match at each level); a position never points at a GE_END (a finished
 * alternative is popped at once), and the top of a live stack is always a GE_CHARS. */
#ifndef SD_GRAMMAR_IMPL_H
#define SD_GRAMMAR_IMPL_H

#include "runtime/grammar/sd_grammar.h"

/* Limits of one grammar (a schema of a few thousand fields fits well inside). */
#define GRAMMAR_MAX_RULES  65536
#define GRAMMAR_MAX_ELEMS  (1u << 22)
#define GRAMMAR_MAX_STACKS 4096 /* live parses of one state (an ambiguous grammar) */
#define GRAMMAR_MAX_EXPAND 2048 /* rule references expanded in a chain */
#define GRAMMAR_MAX_DEPTH  256  /* nested groups; the matcher's expansion is bounded by it too */
#define SD_STR_(x)         #x
#define SD_STR(x)          SD_STR_(x)

enum { GE_END = 0, GE_CHARS = 1, GE_RULE = 2 };

typedef struct gelem {
    uint32_t type;
    uint32_t arg;
} gelem;

/* A class: the code points of its ranges (sorted, disjoint, not adjacent), or with neg
 * every code point outside them. */
typedef struct gclass {
    uint32_t neg;
    uint32_t first; /* first range: rng[2 * first], rng[2 * first + 1] */
    uint32_t n;
} gclass;

struct sd_grammar {
    gelem *el;
    size_t n_el;
    uint32_t *alt_start; /* index in el of each alternative's first element */
    struct {
        uint32_t first_alt, n_alt;
    } * rules;
    uint32_t n_rules;
    gclass *cls;
    uint32_t n_cls;
    uint32_t *rng;
    uint32_t root;
};

/* The vocabulary's token bytes and their trie (vocab.c): node 0 is the root (the empty
 * prefix); a node's children in ascending byte order (first_child, next_sibling; -1:
 * none); the tokens whose bytes end at a node (tok_first, then tok_next[id]; -1: end). */
struct sd_grammar_vocab {
    int32_t n_vocab;
    char *bytes; /* every piece, concatenated */
    size_t *off; /* [n_vocab + 1]: piece i is bytes[off[i] .. off[i + 1]) */
    int32_t n_nodes;
    int32_t *first_child, *next_sibling, *tok_first; /* [n_nodes] */
    uint8_t *byte;                                   /* [n_nodes] the byte into the node */
    int32_t *tok_next;                               /* [n_vocab] */
};
#endif /* SD_GRAMMAR_IMPL_H */
