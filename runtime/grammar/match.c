/* runtime/grammar/match.c: the per-sequence state (a set of stacks of grammar positions
 * and a pending partial UTF-8 code point) and the allowed tokens of a state.
 *
 * Stacks are linked lists of nodes (pos, up) in an arena owned by the state, so stacks
 * that share their lower part share its nodes and pushing never copies a stack. A step
 * appends the new stacks' tops to a scratch list (buf) and any new nodes to the arena;
 * the mask's trie walk takes both back to their marks when it leaves a trie node, and
 * an advance keeps only the nodes its stacks reach (compaction). */
#include "runtime/grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct gnode {
    uint32_t pos; /* the element to match next at this level */
    int32_t up;   /* the level below (-1: none) */
} gnode;

/* A stack's top: a node index, or EMPTY (every level finished: the sentence may end). */
#define EMPTY (-1)

/* Masks kept per lineage of states (a sequence's state and its copies share one): the
 * trie walk's bits for a state, keyed by the state's contents (the pending code point
 * and every stack's positions top to bottom). A generation revisits few distinct states
 * (the inside of a string, of a number, after a key), so most masks are a copy. */
#define GCACHE_N 32

typedef struct gcache_entry {
    uint64_t hash, last_use;
    uint32_t *key; /* [n_key] */
    size_t n_key;
    uint64_t *bits; /* [n_words] the walk's bits (no end ids) */
    int64_t count;
} gcache_entry;

typedef struct gcache {
    int32_t refs;
    const sd_grammar_vocab *v; /* the vocabulary the entries are over */
    size_t n_words;
    uint64_t tick;
    int32_t n;
    gcache_entry e[GCACHE_N];
} gcache;

struct sd_grammar_state {
    const sd_grammar *g;
    gnode *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *tops; /* the live stacks */
    size_t n_tops, cap_tops;
    uint32_t cp; /* a pending code point's bits so far, and its continuation bytes to come */
    int32_t rem;
    int32_t *buf; /* scratch: segments of stack tops */
    size_t n_buf, cap_buf;
    int32_t *map; /* compaction: old node -> new node */
    size_t cap_map;
    int oom;       /* out of memory, or past a bound below (refused like out of memory) */
    int too_many;  /* past GRAMMAR_MAX_STACKS live parses or GRAMMAR_MAX_EXPAND nested rules */
    int depth;     /* expand's recursion */
    gcache *cache; /* shared with the states copied from this one */
    uint32_t *key; /* scratch: this state's cache key */
    size_t cap_key;
};

static void cache_release(gcache *c) {
    if (!c || --c->refs > 0) return;
    for (int32_t i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].bits);
    }
    free(c);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 4 / elem) return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int32_t push(sd_grammar_state *s, uint32_t pos, int32_t up) {
    if (s->n_nodes >= INT32_MAX ||
        grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) {
        s->oom = 1;
        return EMPTY;
    }
    s->nodes[s->n_nodes] = (gnode){pos, up};
    return (int32_t)s->n_nodes++;
}

static int stack_eq(const sd_grammar_state *s, int32_t a, int32_t b) {
    while (a != b) {
        if (a < 0 || b < 0 || s->nodes[a].pos != s->nodes[b].pos) return 0;
        a = s->nodes[a].up;
        b = s->nodes[b].up;
    }
    return 1;
}

/* Append top c to the segment buf[seg .. n_buf) unless an equal stack is there. */
static void add(sd_grammar_state *s, size_t seg, int32_t c) {
    for (size_t i = seg; i < s->n_buf; i++)
        if (stack_eq(s, s->buf[i], c)) return;
    if (s->n_buf - seg >= GRAMMAR_MAX_STACKS) { /* an ambiguous grammar: bounded work */
        s->oom = s->too_many = 1;
        return;
    }
    if (grow((void **)&s->buf, &s->cap_buf, s->n_buf + 1, sizeof *s->buf)) {
        s->oom = 1;
        return;
    }
    s->buf[s->n_buf++] = c;
}

/* Add stack c to the segment with its top expanded down to character classes: a rule
 * reference at the top becomes one stack per alternative of the rule (the reference's
 * continuation below the alternative's first element). Ends: no left recursion. */
static void expand_at(sd_grammar_state *s, size_t seg, int32_t c);

static void expand(sd_grammar_state *s, size_t seg, int32_t c) {
    if (s->oom) return;
    if (s->depth >= GRAMMAR_MAX_EXPAND) { /* a chain of rule references: bounded stack */
        s->oom = s->too_many = 1;
        return;
    }
    s->depth++;
    expand_at(s, seg, c);
    s->depth--;
}

static void expand_at(sd_grammar_state *s, size_t seg, int32_t c) {
    if (c == EMPTY) {
        add(s, seg, EMPTY);
        return;
    }
    const sd_grammar *g = s->g;
    const uint32_t pos = s->nodes[c].pos;
    const gelem e = g->el[pos];
    if (e.type == GE_CHARS) {
        add(s, seg, c);
        return;
    }
    const int32_t up = s->nodes[c].up;
    const int32_t cont = g->el[pos + 1].type == GE_END ? up : push(s, pos + 1, up);
    if (s->oom) return;
    const uint32_t a0 = g->rules[e.arg].first_alt, na = g->rules[e.arg].n_alt;
    for (uint32_t a = a0; a < a0 + na && !s->oom; a++) {
        const uint32_t start = g->alt_start[a];
        if (g->el[start].type == GE_END)
            expand(s, seg, cont);
        else
            expand(s, seg, push(s, start, cont));
    }
}

static int class_has(const sd_grammar *g, uint32_t k, uint32_t cp) {
    const gclass *c = &g->cls[k];
    const uint32_t *r = g->rng + 2 * (size_t)c->first;
    uint32_t lo = 0, hi = c->n; /* the first range whose end is >= cp */
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (r[2 * mid + 1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    const int in = lo < c->n && r[2 * lo] <= cp;
    return c->neg ? !in : in;
}

/* 1 if class k has a code point in [lo, hi]. */
static int class_meets(const sd_grammar *g, uint32_t k, uint32_t lo, uint32_t hi) {
    const gclass *c = &g->cls[k];
    const uint32_t *r = g->rng + 2 * (size_t)c->first;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->neg) {
            if (r[2 * i] <= lo && r[2 * i + 1] >= hi) return 0; /* all of it excluded */
        } else if (r[2 * i] <= hi && r[2 * i + 1] >= lo) {
            return 1;
        }
    }
    return c->neg;
}

/* 1 if class k holds every code point of [lo, hi]. */
static int class_covers(const sd_grammar *g, uint32_t k, uint32_t lo, uint32_t hi) {
    const gclass *c = &g->cls[k];
    const uint32_t *r = g->rng + 2 * (size_t)c->first;
    for (uint32_t i = 0; i < c->n; i++) {
        const int meets = r[2 * i] <= hi && r[2 * i + 1] >= lo;
        if (c->neg && meets) return 0;
        if (!c->neg && r[2 * i] <= lo && r[2 * i + 1] >= hi) return 1;
    }
    return c->neg;
}

/* A pending code point whose value no longer matters (CP_ANY): what is left of it can
 * only complete a valid code point that every stack kept takes. The automaton of a mask
 * then has one configuration for all of them instead of one per partial value. */
#define CP_ANY 0xFFFFFFFFu

/* The stacks of buf[in .. in + n) after code point cp (CP_ANY: one every stack takes),
 * appended as a new segment. */
static void step_cp(sd_grammar_state *s, size_t in, size_t n, uint32_t cp) {
    const sd_grammar *g = s->g;
    const size_t seg = s->n_buf;
    for (size_t i = 0; i < n && !s->oom; i++) {
        const int32_t t = s->buf[in + i];
        if (t == EMPTY) continue;
        const uint32_t pos = s->nodes[t].pos;
        if (cp != CP_ANY && !class_has(g, g->el[pos].arg, cp)) continue;
        const int32_t up = s->nodes[t].up;
        expand(s, seg, g->el[pos + 1].type == GE_END ? up : push(s, pos + 1, up));
    }
}

/* The stacks of buf[in .. in + n) that may take a code point in [lo, hi]. */
static void keep_range(sd_grammar_state *s, size_t in, size_t n, uint32_t lo, uint32_t hi) {
    for (size_t i = 0; i < n; i++) {
        const int32_t t = s->buf[in + i];
        if (t == EMPTY || !class_meets(s->g, s->g->el[s->nodes[t].pos].arg, lo, hi)) continue;
        if (grow((void **)&s->buf, &s->cap_buf, s->n_buf + 1, sizeof *s->buf)) {
            s->oom = 1;
            return;
        }
        s->buf[s->n_buf++] = t;
    }
}

/* A pending code point: *rem holds the continuation bytes still to come (bits 0-1) and
 * the sequence's length (bits 2-4); 0 when none is pending. */
#define REM_LEFT(r)  ((r)&3)
#define REM_TOTAL(r) ((r) >> 2)

/* The smallest code point a UTF-8 sequence of total bytes encodes (shorter forms of it
 * are overlong: refused, as every invalid sequence). */
static uint32_t min_of_length(int32_t total) {
    return total == 2 ? 0x80u : (total == 3 ? 0x800u : 0x10000u);
}

/* One byte: the stacks of buf[in .. in + n) with the pending code point (*cp, *rem)
 * after byte b, appended as a new segment; returns its size (0: refused). Only
 * well-formed UTF-8 passes: no overlong form, no surrogate, nothing above U+10FFFF. */
static size_t step_byte(sd_grammar_state *s, size_t in, size_t n, uint32_t *cp, int32_t *rem,
                        uint8_t b) {
    const size_t seg = s->n_buf;
    if (*rem > 0) {
        if ((b & 0xC0u) != 0x80u) return 0;
        if (*cp != CP_ANY) *cp = *cp << 6 | (b & 0x3Fu);
        *rem -= 1;
    } else if (b < 0x80u) {
        *cp = b;
    } else if (b >= 0xC2u && b <= 0xDFu) {
        *cp = b & 0x1Fu;
        *rem = 1 | 2 << 2;
    } else if (b >= 0xE0u && b <= 0xEFu) {
        *cp = b & 0x0Fu;
        *rem = 2 | 3 << 2;
    } else if (b >= 0xF0u && b <= 0xF4u) {
        *cp = b & 0x07u;
        *rem = 3 | 4 << 2;
    } else {
        return 0;
    }
    const int32_t left = REM_LEFT(*rem), total = REM_TOTAL(*rem);
    if (left == 0) {
        if (total > 0 && *cp != CP_ANY &&
            (*cp < min_of_length(total) || *cp > 0x10FFFFu || (*cp >= 0xD800u && *cp <= 0xDFFFu)))
            return 0;
        step_cp(s, in, n, *cp);
        *rem = 0;
        *cp = 0;                /* nothing pending: one configuration whatever the character was */
    } else if (*cp == CP_ANY) { /* every stack takes whatever completes it */
        if (grow((void **)&s->buf, &s->cap_buf, s->n_buf + n, sizeof *s->buf)) {
            s->oom = 1;
            return 0;
        }
        memmove(s->buf + s->n_buf, s->buf + in, n * sizeof *s->buf);
        s->n_buf += n;
    } else {
        const uint32_t shift = 6u * (uint32_t)left;
        const uint32_t raw_lo = *cp << shift, raw_hi = raw_lo | ((1u << shift) - 1u);
        uint32_t lo = raw_lo, hi = raw_hi;
        if (lo < min_of_length(total)) lo = min_of_length(total);
        if (hi > 0x10FFFFu) hi = 0x10FFFFu;
        if (lo > hi || (lo >= 0xD800u && hi <= 0xDFFFu)) return 0;
        keep_range(s, in, n, lo, hi);
        /* every completion valid (none overlong, above U+10FFFF or a surrogate) and taken
         * by every stack kept: the value no longer matters */
        int any = raw_lo >= min_of_length(total) && raw_hi <= 0x10FFFFu &&
                  !(raw_lo <= 0xDFFFu && raw_hi >= 0xD800u);
        for (size_t i = seg; i < s->n_buf && any; i++)
            any = class_covers(s->g, s->g->el[s->nodes[s->buf[i]].pos].arg, lo, hi);
        if (any && s->n_buf > seg) *cp = CP_ANY;
    }
    return s->oom ? 0 : s->n_buf - seg;
}

/* Run bytes over the live stacks; on success (*out_seg, *out_n) is the resulting
 * segment in buf and (*cp, *rem) the pending code point. Leaves nodes and buf grown:
 * the caller resets or compacts. Returns the stacks left (0: refused). */
static size_t run_bytes(sd_grammar_state *s, const char *bytes, size_t len, size_t *out_seg,
                        uint32_t *cp, int32_t *rem) {
    s->n_buf = 0;
    if (grow((void **)&s->buf, &s->cap_buf, s->n_tops + 1, sizeof *s->buf)) {
        s->oom = 1;
        return 0;
    }
    memcpy(s->buf, s->tops, s->n_tops * sizeof *s->buf);
    s->n_buf = s->n_tops;
    size_t seg = 0, n = s->n_tops;
    *cp = s->cp;
    *rem = s->rem;
    for (size_t i = 0; i < len && n > 0; i++) {
        const size_t next = s->n_buf;
        n = step_byte(s, seg, n, cp, rem, (uint8_t)bytes[i]);
        seg = next;
    }
    *out_seg = seg;
    return n;
}

/* Keep only the nodes the stacks buf[seg .. seg + n) reach, which become the live ones. */
static int compact(sd_grammar_state *s, size_t seg, size_t n) {
    if (grow((void **)&s->map, &s->cap_map, s->n_nodes + 1, sizeof *s->map) ||
        grow((void **)&s->tops, &s->cap_tops, n + 1, sizeof *s->tops))
        return -1;
    for (size_t i = 0; i < s->n_nodes; i++)
        s->map[i] = -2;
    /* new nodes are written over the old array from the front: a node's new index is
     * never above its old one when chains are copied bottom first, so copy through a
     * second array instead to stay simple */
    gnode *nn = malloc((s->n_nodes ? s->n_nodes : 1) * sizeof *nn);
    if (!nn) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t t = s->buf[seg + i];
        /* map the chain bottom-up: find the deepest unmapped node first */
        for (;;) {
            int32_t c = t, below = EMPTY;
            while (c != EMPTY && s->map[c] == -2) {
                below = c;
                c = s->nodes[c].up;
            }
            if (below == EMPTY) break; /* the whole chain is mapped */
            nn[m] = (gnode){s->nodes[below].pos, c == EMPTY ? EMPTY : s->map[c]};
            s->map[below] = (int32_t)m++;
        }
        s->tops[i] = t == EMPTY ? EMPTY : s->map[t];
    }
    free(s->nodes);
    s->nodes = nn;
    s->cap_nodes = s->n_nodes ? s->n_nodes : 1;
    s->n_nodes = m;
    s->n_tops = n;
    return 0;
}

int sd_grammar_state_init(const sd_grammar *g, sd_grammar_state **out, sd_error *err) {
    *out = NULL;
    sd_grammar_state *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    s->g = g;
    s->cache = calloc(1, sizeof *s->cache);
    if (!s->cache) {
        free(s);
        return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    }
    s->cache->refs = 1;
    const uint32_t a0 = g->rules[g->root].first_alt, na = g->rules[g->root].n_alt;
    for (uint32_t a = a0; a < a0 + na && !s->oom; a++) {
        const uint32_t start = g->alt_start[a];
        expand(s, 0, g->el[start].type == GE_END ? EMPTY : push(s, start, EMPTY));
    }
    if (s->oom || compact(s, 0, s->n_buf)) {
        const int too_many = s->too_many;
        sd_grammar_state_free(s);
        if (too_many)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "grammar: its start needs more than %d parses or rules nested more "
                             "than %d deep",
                             GRAMMAR_MAX_STACKS, GRAMMAR_MAX_EXPAND);
        return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    }
    *out = s;
    return SD_OK;
}

void sd_grammar_state_free(sd_grammar_state *s) {
    if (!s) return;
    free(s->nodes);
    free(s->tops);
    free(s->buf);
    free(s->map);
    free(s->key);
    cache_release(s->cache);
    free(s);
}

int sd_grammar_state_clone(const sd_grammar_state *src, sd_grammar_state **out, sd_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    const int rc = sd_grammar_state_copy(*out, src, err);
    if (rc) {
        sd_grammar_state_free(*out);
        *out = NULL;
    }
    return rc;
}

int sd_grammar_state_copy(sd_grammar_state *dst, const sd_grammar_state *src, sd_error *err) {
    if (dst == src) return SD_OK;
    if (grow((void **)&dst->nodes, &dst->cap_nodes, src->n_nodes + 1, sizeof *dst->nodes) ||
        grow((void **)&dst->tops, &dst->cap_tops, src->n_tops + 1, sizeof *dst->tops))
        return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    memcpy(dst->nodes, src->nodes, src->n_nodes * sizeof *dst->nodes);
    memcpy(dst->tops, src->tops, src->n_tops * sizeof *dst->tops);
    dst->g = src->g;
    dst->n_nodes = src->n_nodes;
    dst->n_tops = src->n_tops;
    dst->cp = src->cp;
    dst->rem = src->rem;
    if (dst->cache != src->cache) {
        cache_release(dst->cache);
        dst->cache = src->cache;
        dst->cache->refs++;
    }
    return SD_OK;
}

int sd_grammar_allows(sd_grammar_state *s, const char *bytes, size_t len) {
    const size_t mark = s->n_nodes;
    size_t seg;
    uint32_t cp;
    int32_t rem;
    const size_t n = run_bytes(s, bytes, len, &seg, &cp, &rem);
    s->n_nodes = mark;
    s->oom = s->too_many = 0;
    return n > 0;
}

int sd_grammar_advance(sd_grammar_state *s, const char *bytes, size_t len, sd_error *err) {
    const size_t mark = s->n_nodes;
    size_t seg;
    uint32_t cp;
    int32_t rem;
    const size_t n = run_bytes(s, bytes, len, &seg, &cp, &rem);
    if (s->oom) {
        const int too_many = s->too_many;
        s->n_nodes = mark;
        s->oom = s->too_many = 0;
        if (too_many)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "grammar: more than %d parses at once or rules nested more than %d "
                             "deep (an ambiguous or deeply recursive grammar)",
                             GRAMMAR_MAX_STACKS, GRAMMAR_MAX_EXPAND);
        return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    }
    if (n == 0) {
        s->n_nodes = mark;
        return sd_errorf(err, SD_ERR_ARG, "grammar: the text does not continue the grammar");
    }
    if (compact(s, seg, n)) {
        s->n_nodes = mark;
        return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
    }
    s->cp = cp;
    s->rem = rem;
    return SD_OK;
}

int sd_grammar_accepting(const sd_grammar_state *s) {
    if (s->rem > 0) return 0;
    for (size_t i = 0; i < s->n_tops; i++)
        if (s->tops[i] == EMPTY) return 1;
    return 0;
}

int sd_grammar_finished(const sd_grammar_state *s) {
    return sd_grammar_accepting(s) && s->n_tops == 1;
}

/* The key of the stacks tops[0 .. n) with pending code point (cp, rem), appended to
 * *key (growable, *len used, *cap allocated): cp, rem, n, then per stack its depth and
 * its positions top to bottom. Returns the key's start, or SIZE_MAX on allocation
 * failure. */
static size_t key_append(const sd_grammar_state *s, const int32_t *tops, size_t n, uint32_t cp,
                         int32_t rem, uint32_t **key, size_t *len, size_t *cap) {
    size_t need = 3;
    for (size_t i = 0; i < n; i++) {
        need++;
        for (int32_t t = tops[i]; t != EMPTY; t = s->nodes[t].up)
            need++;
    }
    if (grow((void **)key, cap, *len + need, sizeof **key)) return SIZE_MAX;
    const size_t start = *len;
    uint32_t *k = *key + start;
    size_t j = 0;
    k[j++] = cp;
    k[j++] = (uint32_t)rem;
    k[j++] = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        const size_t at = j++;
        for (int32_t t = tops[i]; t != EMPTY; t = s->nodes[t].up)
            k[j++] = s->nodes[t].pos;
        k[at] = (uint32_t)(j - at - 1);
    }
    *len += j;
    return start;
}

static uint64_t key_hash(const uint32_t *k, size_t n) {
    uint64_t h = SD_FNV1A64_INIT;
    for (size_t i = 0; i < n; i++)
        h = (h ^ k[i]) * UINT64_C(0x100000001b3);
    return h;
}

/*
 * The walk of one mask as an automaton built on demand: a configuration (the stacks and
 * the pending code point, interned by their key) and a byte lead to one configuration
 * (or none), so a transition is computed once per walk and every other trie edge with
 * the same configuration and byte is a table lookup. Inside a string, say, the stacks
 * come back to the same few configurations after every character, and the vocabulary's
 * million trie edges cost a hash probe each.
 */
typedef struct gwalk {
    sd_grammar_state *s;
    const sd_grammar_vocab *v;
    uint64_t *bits;
    uint32_t *keys; /* every configuration's key */
    size_t n_keys, cap_keys;
    size_t *koff; /* [n_cfg + 1] configuration i's key: keys[koff[i] .. koff[i + 1]) */
    size_t cap_koff;
    int32_t n_cfg;
    int32_t *cfg_slot; /* open addressing: configuration ids by key hash (-1: empty) */
    size_t cfg_cap;
    uint64_t *tr_key; /* open addressing: (id << 8 | byte) + 1, 0 empty */
    int32_t *tr_val;  /* the next configuration, -1: refused */
    size_t tr_cap, tr_n;
    int32_t *dense; /* [DENSE_CFG * 256] the first configurations' transitions (-2: not
                       known), the hot ones: a lookup without hashing */
    int oom;
} gwalk;

#define DENSE_CFG 256

static int32_t cfg_intern(gwalk *w, size_t start, size_t n) {
    const uint32_t *k = w->keys + start;
    const uint64_t h = key_hash(k, n);
    if ((size_t)(w->n_cfg + 1) * 2 > w->cfg_cap) { /* grow and rehash */
        const size_t cap = w->cfg_cap ? w->cfg_cap * 2 : 1024;
        int32_t *slot = malloc(cap * sizeof *slot);
        if (!slot) return w->oom = 1, -1;
        for (size_t i = 0; i < cap; i++)
            slot[i] = -1;
        for (int32_t c = 0; c < w->n_cfg; c++) {
            const size_t o = w->koff[c];
            size_t i = key_hash(w->keys + o, w->koff[c + 1] - o) & (cap - 1);
            while (slot[i] >= 0)
                i = (i + 1) & (cap - 1);
            slot[i] = c;
        }
        free(w->cfg_slot);
        w->cfg_slot = slot;
        w->cfg_cap = cap;
    }
    size_t i = h & (w->cfg_cap - 1);
    for (; w->cfg_slot[i] >= 0; i = (i + 1) & (w->cfg_cap - 1)) {
        const int32_t c = w->cfg_slot[i];
        const size_t o = w->koff[c], m = w->koff[c + 1] - o;
        if (m == n && !memcmp(w->keys + o, k, n * sizeof *k)) {
            w->n_keys = start; /* a known configuration: drop the appended key */
            return c;
        }
    }
    if (grow((void **)&w->koff, &w->cap_koff, (size_t)w->n_cfg + 2, sizeof *w->koff))
        return w->oom = 1, -1;
    const int32_t c = w->n_cfg++;
    w->koff[c] = start;
    w->koff[c + 1] = start + n;
    w->cfg_slot[i] = c;
    return c;
}

static int32_t cfg_step_slow(gwalk *w, int32_t c, uint8_t b);

/* Configuration c after byte b (-1: refused). */
static inline int32_t cfg_step(gwalk *w, int32_t c, uint8_t b) {
    if (c < DENSE_CFG) {
        int32_t *d = &w->dense[(size_t)c * 256 + b];
        if (*d == -2) *d = cfg_step_slow(w, c, b);
        return *d;
    }
    return cfg_step_slow(w, c, b);
}

/* The same through the hash table, computed on the state's scratch when not known. */
static int32_t cfg_step_slow(gwalk *w, int32_t c, uint8_t b) {
    const uint64_t tk = ((uint64_t)c << 8 | b) + 1;
    if (w->tr_cap && (w->tr_n + 1) * 2 <= w->tr_cap) {
        for (size_t i = (tk * UINT64_C(0x9E3779B97F4A7C15) >> 20) & (w->tr_cap - 1); w->tr_key[i];
             i = (i + 1) & (w->tr_cap - 1))
            if (w->tr_key[i] == tk) return w->tr_val[i];
    } else { /* grow the transition table, then look again */
        const size_t cap = w->tr_cap ? w->tr_cap * 2 : 4096;
        uint64_t *key = calloc(cap, sizeof *key);
        int32_t *val = malloc(cap * sizeof *val);
        if (!key || !val) {
            free(key);
            free(val);
            return w->oom = 1, -1;
        }
        for (size_t j = 0; j < w->tr_cap; j++) {
            if (!w->tr_key[j]) continue;
            size_t i = (w->tr_key[j] * UINT64_C(0x9E3779B97F4A7C15) >> 20) & (cap - 1);
            while (key[i])
                i = (i + 1) & (cap - 1);
            key[i] = w->tr_key[j];
            val[i] = w->tr_val[j];
        }
        free(w->tr_key);
        free(w->tr_val);
        w->tr_key = key;
        w->tr_val = val;
        w->tr_cap = cap;
        return cfg_step_slow(w, c, b);
    }
    /* not known: rebuild c's stacks on the scratch, step, intern the result */
    sd_grammar_state *s = w->s;
    const size_t mark_nodes = s->n_nodes;
    s->n_buf = 0;
    const uint32_t *k = w->keys + w->koff[c];
    uint32_t cp = k[0];
    int32_t rem = (int32_t)k[1];
    const size_t n = k[2];
    size_t j = 3;
    if (grow((void **)&s->buf, &s->cap_buf, n + 1, sizeof *s->buf)) return w->oom = 1, -1;
    for (size_t i = 0; i < n; i++) {
        const size_t depth = k[j++];
        int32_t up = EMPTY;
        for (size_t d = depth; d > 0; d--)
            up = push(s, k[j + d - 1], up);
        j += depth;
        s->buf[s->n_buf++] = up;
    }
    int32_t next = -1;
    const size_t m = s->oom ? 0 : step_byte(s, 0, n, &cp, &rem, b);
    if (s->oom) { /* (past a bound too: the mask fails rather than guess) */
        s->oom = s->too_many = 0;
        w->oom = 1;
    } else if (m > 0) {
        const size_t start =
            key_append(s, s->buf + n, m, cp, rem, &w->keys, &w->n_keys, &w->cap_keys);
        next = start == SIZE_MAX ? (w->oom = 1, -1) : cfg_intern(w, start, w->n_keys - start);
    }
    s->n_nodes = mark_nodes;
    s->n_buf = 0;
    if (w->oom) return -1;
    size_t i = (tk * UINT64_C(0x9E3779B97F4A7C15) >> 20) & (w->tr_cap - 1);
    while (w->tr_key[i])
        i = (i + 1) & (w->tr_cap - 1);
    w->tr_key[i] = tk;
    w->tr_val[i] = next;
    w->tr_n++;
    return next;
}

/* The trie walk below node, whose bytes led to configuration c. */
static int64_t walk(gwalk *w, int32_t node, int32_t c) {
    const sd_grammar_vocab *v = w->v;
    int64_t count = 0;
    for (int32_t ch = v->first_child[node]; ch >= 0; ch = v->next_sibling[ch]) {
        const int32_t next = cfg_step(w, c, v->byte[ch]);
        if (w->oom) return -1;
        if (next < 0) continue;
        for (int32_t t = v->tok_first[ch]; t >= 0; t = v->tok_next[t]) {
            w->bits[t >> 6] |= UINT64_C(1) << (t & 63);
            count++;
        }
        if (v->first_child[ch] >= 0) {
            const int64_t k = walk(w, ch, next);
            if (k < 0) return -1;
            count += k;
        }
    }
    return count;
}

/* The walk's bits for s over v into bits (cleared first); the count, or -1. */
static int64_t walk_all(sd_grammar_state *s, const sd_grammar_vocab *v, uint64_t *bits) {
    memset(bits, 0, ((size_t)v->n_vocab + 63) / 64 * sizeof *bits);
    gwalk w = {.s = s, .v = v, .bits = bits};
    int64_t count = -1;
    w.dense = malloc((size_t)DENSE_CFG * 256 * sizeof *w.dense);
    if (!w.dense) return -1;
    for (size_t i = 0; i < (size_t)DENSE_CFG * 256; i++)
        w.dense[i] = -2;
    const size_t start =
        key_append(s, s->tops, s->n_tops, s->cp, s->rem, &w.keys, &w.n_keys, &w.cap_keys);
    const int32_t c0 = start == SIZE_MAX ? -1 : cfg_intern(&w, start, w.n_keys - start);
    if (c0 >= 0) count = walk(&w, 0, c0);
    free(w.keys);
    free(w.koff);
    free(w.cfg_slot);
    free(w.tr_key);
    free(w.tr_val);
    free(w.dense);
    return w.oom ? -1 : count;
}

/* The walk's bits for s over v (cached), into bits; the count, or -1. */
static int64_t walk_cached(sd_grammar_state *s, const sd_grammar_vocab *v, uint64_t *bits) {
    const size_t n_words = ((size_t)v->n_vocab + 63) / 64;
    gcache *c = s->cache;
    if (c->v != v) { /* another vocabulary: start over */
        for (int32_t i = 0; i < c->n; i++) {
            free(c->e[i].key);
            free(c->e[i].bits);
        }
        c->n = 0;
        c->v = v;
        c->n_words = n_words;
    }
    size_t n_key = 0;
    if (key_append(s, s->tops, s->n_tops, s->cp, s->rem, &s->key, &n_key, &s->cap_key) == SIZE_MAX)
        n_key = 0;
    uint64_t h = SD_FNV1A64_INIT;
    for (size_t i = 0; i < n_key; i++)
        h = (h ^ s->key[i]) * UINT64_C(0x100000001b3);
    c->tick++;
    for (int32_t i = 0; n_key && i < c->n; i++) {
        gcache_entry *e = &c->e[i];
        if (e->hash == h && e->n_key == n_key && !memcmp(e->key, s->key, n_key * sizeof *s->key)) {
            e->last_use = c->tick;
            memcpy(bits, e->bits, n_words * sizeof *bits);
            return e->count;
        }
    }
    const int64_t count = walk_all(s, v, bits);
    if (count < 0) return -1;
    if (!n_key) return count;
    /* keep it: a free entry, else the least recently used */
    gcache_entry *e = NULL;
    if (c->n < GCACHE_N) {
        e = &c->e[c->n];
        memset(e, 0, sizeof *e);
        e->bits = malloc(n_words * sizeof *bits);
        if (!e->bits) return count;
        c->n++;
    } else {
        e = &c->e[0];
        for (int32_t i = 1; i < c->n; i++)
            if (c->e[i].last_use < e->last_use) e = &c->e[i];
    }
    uint32_t *key = realloc(e->key, n_key * sizeof *key);
    if (!key) return count;
    e->key = key;
    memcpy(e->key, s->key, n_key * sizeof *key);
    e->n_key = n_key;
    e->hash = h;
    e->last_use = c->tick;
    memcpy(e->bits, bits, n_words * sizeof *bits);
    e->count = count;
    return count;
}

int64_t sd_grammar_mask(sd_grammar_state *s, const sd_grammar_vocab *v, const int32_t *end_ids,
                        int32_t n_end, uint64_t *bits) {
    int64_t count = walk_cached(s, v, bits);
    if (count < 0) return -1;
    const int accept = sd_grammar_accepting(s);
    for (int32_t i = 0; i < n_end; i++) {
        const int32_t id = end_ids[i];
        if (id < 0 || id >= v->n_vocab) continue;
        const uint64_t bit = UINT64_C(1) << (id & 63);
        const int was = (bits[id >> 6] & bit) != 0;
        if (accept && !was) {
            bits[id >> 6] |= bit;
            count++;
        } else if (!accept && was) {
            bits[id >> 6] &= ~bit;
            count--;
        }
    }
    return count;
}

int sd_grammar_allows_token(sd_grammar_state *s, const sd_grammar_vocab *v, int32_t id,
                            const int32_t *end_ids, int32_t n_end) {
    if (id < 0 || id >= v->n_vocab) return 0;
    for (int32_t i = 0; i < n_end; i++)
        if (end_ids[i] == id) return sd_grammar_accepting(s);
    size_t len;
    const char *p = sd_grammar_vocab_piece(v, id, &len);
    return len > 0 && sd_grammar_allows(s, p, len);
}
