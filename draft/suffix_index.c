/*
 * draft/suffix_index.c: the suffix index under the suffix proposer (suffix.c) and the
 * cross-request cache (suffix_cache.c); its face is sd_draft.h, its layout suffix_impl.h.
 *
 * The index is a suffix automaton of the token text t[0 .. N), built online: each state
 * is a class of substrings with the same set of end positions (endpos: e such that the
 * string is t[e - len .. e)), `len` the longest of them, `link` the state of the longest
 * suffix in another class. Appending one token adds one state and at most one clone and
 * sets or redirects transitions: O(1) amortised, with transitions in one hash table keyed
 * by (state, token) (expected O(1)) and chained per state for the continuations.
 *
 * The counts. |endpos| of a state is the number of its occurrences, and the largest
 * end position its most recent one; both are sums / maxima over the states of its
 * subtree in the suffix-link tree that end a prefix of t. Appending makes the new state a
 * leaf and adds one occurrence (end position N) to every state on its path to the root;
 * a clone takes the place of the state it splits off (same subtree, same values). The
 * link tree is kept as a link-cut tree (splay trees over preferred paths, lazy "add to
 * the count, set the most recent end" tags), so a path update, a cut, a link and a
 * query each cost O(log N) amortised.
 *
 * The longest match: the state link(last) holds the longest suffix of t that also ends
 * at an earlier position e < N, so t[e] follows it there (its length is the match
 * length; O(1)). The continuations of a state are its transitions; the count of the
 * transition by token c is the number of occurrences of s c (s a string of the state),
 * i.e. the positions where s was followed by c.
 *
 * Rollback: the proposer keeps the index on committed tokens only, which only grow
 * during a generation; a context that is not an extension of the indexed tokens (a new
 * generation, a new request) rebuilds the index from their common prefix.
 */
#include <stdlib.h>
#include <string.h>

#include "draft/suffix_impl.h"

typedef struct sx_state {
    int32_t len;  /* longest string of the class */
    int32_t link; /* suffix link; -1 for the root (state 0, the empty string) */
    int32_t edge; /* first out-transition, -1: none */
} sx_state;

typedef struct sx_edge {
    int32_t from, tok, to;
    int32_t next; /* next out-transition of `from`, -1: none */
} sx_edge;

/* A link-cut tree node (per state). par: the splay parent, or for the root of a splay
 * tree the path parent (the tree parent of the path's top), -1: none. */
typedef struct sx_node {
    int32_t ch[2], par;
    int32_t cnt;  /* occurrences of the state's strings (valid once the tags above are pushed) */
    int32_t last; /* the most recent end position */
    int32_t add;  /* pending: add to cnt in the subtree */
    int32_t set;  /* pending: set last in the subtree (-1: none) */
} sx_node;

struct sd_suffix_index {
    int32_t cap; /* tokens it holds at most */
    int32_t n_toks;
    int32_t *toks; /* [cap] */
    sx_state *st;  /* [2 cap + 1] */
    sx_node *nd;   /* [2 cap + 1] */
    int32_t n_st, last;
    sx_edge *ed; /* [3 cap + 4] */
    int32_t n_ed;
    int32_t *slot; /* [mask + 1] edge index, -1: empty */
    size_t mask;
    int32_t *stack; /* [2 cap + 1] splay scratch */
};

static size_t slots_for(int32_t cap);

/* ---- transitions ---- */

static size_t edge_hash(int32_t from, int32_t tok) {
    return (size_t)sd_mix64(((uint64_t)(uint32_t)from << 32) | (uint32_t)tok);
}

/* The edge (from, tok), or -1. */
static int32_t edge_find(const sd_suffix_index *ix, int32_t from, int32_t tok) {
    for (size_t i = edge_hash(from, tok) & ix->mask;; i = (i + 1) & ix->mask) {
        const int32_t e = ix->slot[i];
        if (e < 0) return -1;
        if (ix->ed[e].from == from && ix->ed[e].tok == tok) return e;
    }
}

/* A new edge from -> to by tok (absent before). */
static void edge_add(sd_suffix_index *ix, int32_t from, int32_t tok, int32_t to) {
    const int32_t e = ix->n_ed++;
    SD_CHECK(e < 3 * ix->cap + 4, "suffix index: more transitions than a suffix automaton has");
    ix->ed[e] = (sx_edge){from, tok, to, ix->st[from].edge};
    ix->st[from].edge = e;
    size_t i = edge_hash(from, tok) & ix->mask;
    while (ix->slot[i] >= 0)
        i = (i + 1) & ix->mask;
    ix->slot[i] = e;
}

/* ---- the link-cut tree ---- */

static int is_splay_root(const sd_suffix_index *ix, int32_t x) {
    const int32_t p = ix->nd[x].par;
    return p < 0 || (ix->nd[p].ch[0] != x && ix->nd[p].ch[1] != x);
}

static void apply(sd_suffix_index *ix, int32_t x, int32_t add, int32_t set) {
    if (x < 0) return;
    sx_node *n = &ix->nd[x];
    n->cnt += add;
    n->add += add;
    if (set >= 0) n->last = n->set = set;
}

static void push(sd_suffix_index *ix, int32_t x) {
    sx_node *n = &ix->nd[x];
    if (n->add == 0 && n->set < 0) return;
    apply(ix, n->ch[0], n->add, n->set);
    apply(ix, n->ch[1], n->add, n->set);
    n->add = 0;
    n->set = -1;
}

static void rotate(sd_suffix_index *ix, int32_t x) {
    sx_node *nd = ix->nd;
    const int32_t p = nd[x].par, g = nd[p].par;
    const int dir = nd[p].ch[1] == x;
    const int32_t b = nd[x].ch[!dir];
    if (!is_splay_root(ix, p)) nd[g].ch[nd[g].ch[1] == p] = x;
    nd[x].par = g;
    nd[x].ch[!dir] = p;
    nd[p].par = x;
    nd[p].ch[dir] = b;
    if (b >= 0) nd[b].par = p;
}

static void splay(sd_suffix_index *ix, int32_t x) {
    int32_t n = 0;
    ix->stack[n++] = x;
    for (int32_t y = x; !is_splay_root(ix, y); y = ix->nd[y].par)
        ix->stack[n++] = ix->nd[y].par;
    while (n > 0)
        push(ix, ix->stack[--n]);
    while (!is_splay_root(ix, x)) {
        const int32_t p = ix->nd[x].par;
        if (!is_splay_root(ix, p)) {
            const int32_t g = ix->nd[p].par;
            const int zigzig = (ix->nd[g].ch[1] == p) == (ix->nd[p].ch[1] == x);
            rotate(ix, zigzig ? p : x);
        }
        rotate(ix, x);
    }
}

/* Make the root .. x path preferred and x the root of its splay tree (no right child). */
static void access(sd_suffix_index *ix, int32_t x) {
    for (int32_t y = -1, z = x; z >= 0; y = z, z = ix->nd[z].par) {
        splay(ix, z);
        ix->nd[z].ch[1] = y;
    }
    splay(ix, x);
}

/* Detach x (not the root) from its tree parent. */
static void cut(sd_suffix_index *ix, int32_t x) {
    access(ix, x);
    const int32_t l = ix->nd[x].ch[0];
    if (l >= 0) ix->nd[l].par = -1;
    ix->nd[x].ch[0] = -1;
}

/* x, a tree root that is also its splay tree's root with no left child, under p. */
static void link_under(sd_suffix_index *ix, int32_t x, int32_t p) {
    ix->nd[x].par = p;
}

/* ---- the automaton ---- */

static int32_t new_state(sd_suffix_index *ix, int32_t len) {
    const int32_t s = ix->n_st++;
    SD_CHECK(s < 2 * ix->cap + 1, "suffix index: more states than a suffix automaton has");
    ix->st[s] = (sx_state){len, -1, -1};
    ix->nd[s] = (sx_node){{-1, -1}, -1, 0, 0, 0, -1};
    return s;
}

void sd_suffix_index_clear(sd_suffix_index *ix) {
    ix->n_toks = 0;
    ix->n_st = 0;
    ix->n_ed = 0;
    memset(ix->slot, 0xff, (ix->mask + 1) * sizeof *ix->slot);
    ix->last = new_state(ix, 0); /* the root */
}

int sd_suffix_index_append(sd_suffix_index *ix, int32_t tok) {
    if (ix->n_toks >= ix->cap || tok < 0) return -1;
    ix->toks[ix->n_toks++] = tok;
    const int32_t end = ix->n_toks;
    const int32_t cur = new_state(ix, ix->st[ix->last].len + 1);
    int32_t p = ix->last, e = -1;
    while (p >= 0 && (e = edge_find(ix, p, tok)) < 0) {
        edge_add(ix, p, tok, cur);
        p = ix->st[p].link;
    }
    if (p < 0) {
        ix->st[cur].link = 0;
    } else {
        const int32_t q = ix->ed[e].to;
        if (ix->st[p].len + 1 == ix->st[q].len) {
            ix->st[cur].link = q;
        } else {
            const int32_t cl = new_state(ix, ix->st[p].len + 1);
            for (int32_t f = ix->st[q].edge; f >= 0; f = ix->ed[f].next)
                edge_add(ix, cl, ix->ed[f].tok, ix->ed[f].to);
            ix->st[cl].link = ix->st[q].link;
            /* In the link tree the clone takes q's place, q goes under it: the values of
             * the clone are q's (same subtree), its ancestors' do not change. */
            access(ix, q);
            ix->nd[cl].cnt = ix->nd[q].cnt;
            ix->nd[cl].last = ix->nd[q].last;
            cut(ix, q);
            link_under(ix, cl, ix->st[q].link);
            link_under(ix, q, cl);
            for (; p >= 0 && e >= 0 && ix->ed[e].to == q; p = ix->st[p].link) {
                ix->ed[e].to = cl;
                const int32_t pl = ix->st[p].link;
                e = pl >= 0 ? edge_find(ix, pl, tok) : -1;
            }
            ix->st[q].link = ix->st[cur].link = cl;
        }
    }
    /* cur ends a prefix: one occurrence of it and of every state on its path. */
    ix->nd[cur].cnt = 1;
    ix->nd[cur].last = end;
    const int32_t up = ix->st[cur].link;
    access(ix, up);
    apply(ix, up, 1, end);
    link_under(ix, cur, up);
    ix->last = cur;
    return 0;
}

int32_t suffix_state_count(sd_suffix_index *ix, int32_t s, int32_t *last) {
    access(ix, s);
    if (last) *last = ix->nd[s].last;
    return ix->nd[s].cnt;
}

int sd_suffix_index_init(int32_t cap, sd_suffix_index **out, sd_error *err) {
    *out = NULL;
    if (cap < 1 || cap > (INT32_MAX - 8) / 3)
        return sd_errorf(err, SD_ERR_ARG, "suffix index: capacity %d, expected 1 .. %d", cap,
                         (INT32_MAX - 8) / 3);
    const size_t n_st = 2 * (size_t)cap + 1, n_ed = 3 * (size_t)cap + 4;
    const size_t size = slots_for(cap);
    sd_suffix_index *ix = calloc(1, sizeof *ix);
    if (!ix) return sd_errorf(err, SD_ERR_OOM, "suffix index: out of memory");
    ix->cap = cap;
    ix->mask = size - 1;
    ix->toks = malloc((size_t)cap * sizeof *ix->toks);
    ix->st = malloc(n_st * sizeof *ix->st);
    ix->nd = malloc(n_st * sizeof *ix->nd);
    ix->stack = malloc(n_st * sizeof *ix->stack);
    ix->ed = malloc(n_ed * sizeof *ix->ed);
    ix->slot = malloc(size * sizeof *ix->slot);
    if (!ix->toks || !ix->st || !ix->nd || !ix->stack || !ix->ed || !ix->slot) {
        sd_suffix_index_free(ix);
        return sd_errorf(err, SD_ERR_OOM, "suffix index: out of memory for %d tokens", cap);
    }
    sd_suffix_index_clear(ix);
    *out = ix;
    return SD_OK;
}

void sd_suffix_index_free(sd_suffix_index *ix) {
    if (!ix) return;
    free(ix->toks);
    free(ix->st);
    free(ix->nd);
    free(ix->stack);
    free(ix->ed);
    free(ix->slot);
    free(ix);
}

/* The hash table's slots for cap tokens: a power of two, at least twice the transitions. */
static size_t slots_for(int32_t cap) {
    const size_t n_ed = 3 * (size_t)cap + 4;
    size_t size = 64;
    while (size < 2 * n_ed)
        size *= 2;
    return size;
}

size_t suffix_index_bytes_for(int32_t cap) {
    const size_t n_st = 2 * (size_t)cap + 1, n_ed = 3 * (size_t)cap + 4;
    return sizeof(sd_suffix_index) + (size_t)cap * sizeof(int32_t) +
           n_st * (sizeof(sx_state) + sizeof(sx_node) + sizeof(int32_t)) + n_ed * sizeof(sx_edge) +
           slots_for(cap) * sizeof(int32_t);
}

size_t sd_suffix_index_bytes(const sd_suffix_index *ix) {
    return suffix_index_bytes_for(ix->cap);
}

int32_t sd_suffix_index_n_tokens(const sd_suffix_index *ix) {
    return ix->n_toks;
}
int32_t sd_suffix_index_capacity(const sd_suffix_index *ix) {
    return ix->cap;
}
const int32_t *sd_suffix_index_tokens(const sd_suffix_index *ix) {
    return ix->toks;
}

void sd_suffix_index_truncate(sd_suffix_index *ix, int32_t n_keep) {
    if (n_keep >= ix->n_toks) return;
    if (n_keep < 0) n_keep = 0;
    const int32_t n = ix->n_toks;
    sd_suffix_index_clear(ix);
    /* The kept tokens are still in toks[0 .. n_keep): appending rewrites each in place. */
    for (int32_t i = 0; i < n_keep && i < n; i++)
        sd_suffix_index_append(ix, ix->toks[i]);
}

int32_t sd_suffix_index_match(const sd_suffix_index *ix) {
    const int32_t l = ix->st[ix->last].link;
    return l >= 0 ? ix->st[l].len : 0;
}

int64_t sd_suffix_index_count(sd_suffix_index *ix, const int32_t *q, int32_t n, int32_t *last) {
    if (last) *last = 0;
    if (n < 1) return 0;
    int32_t s = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t e = edge_find(ix, s, q[i]);
        if (e < 0) return 0;
        s = ix->ed[e].to;
    }
    return suffix_state_count(ix, s, last);
}

int32_t suffix_index_walk(const sd_suffix_index *ix, const int32_t *q, int32_t n, int32_t *len) {
    int32_t s = 0, l = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t e;
        while ((e = edge_find(ix, s, q[i])) < 0 && s != 0) {
            s = ix->st[s].link;
            l = ix->st[s].len;
        }
        if (e >= 0) {
            s = ix->ed[e].to;
            l++;
        } else {
            l = 0; /* at the root: q[i] does not occur */
        }
    }
    *len = l;
    return s;
}

int32_t suffix_index_match_state(const sd_suffix_index *ix, int32_t *len) {
    const int32_t l = ix->st[ix->last].link;
    *len = l >= 0 ? ix->st[l].len : 0;
    return l;
}

int suffix_index_best_edge(sd_suffix_index *ix, int32_t s, sx_follower *best, int64_t *total) {
    int64_t tot = 0;
    int32_t b = -1, best_cnt = 0, best_last = -1;
    for (int32_t f = ix->st[s].edge; f >= 0; f = ix->ed[f].next) {
        int32_t lst = 0;
        const int32_t c = suffix_state_count(ix, ix->ed[f].to, &lst);
        tot += c;
        if (c > best_cnt || (c == best_cnt && lst > best_last)) {
            b = f;
            best_cnt = c;
            best_last = lst;
        }
    }
    *total = tot;
    if (b < 0 || tot <= 0) return -1;
    *best = (sx_follower){ix->ed[b].tok, ix->ed[b].to, best_cnt, best_last};
    return 0;
}

int32_t suffix_index_top_edges(sd_suffix_index *ix, int32_t s, int32_t width, sx_follower *top,
                               int64_t *total) {
    int32_t n_top = 0;
    int64_t tot = 0;
    for (int32_t f = ix->st[s].edge; f >= 0; f = ix->ed[f].next) {
        int32_t lst = 0;
        const int32_t c = suffix_state_count(ix, ix->ed[f].to, &lst);
        tot += c;
        int32_t at = n_top; /* insertion into the ranked top `width` */
        while (at > 0 && (c > top[at - 1].cnt || (c == top[at - 1].cnt && lst > top[at - 1].last)))
            at--;
        if (at >= width) continue;
        if (n_top < width) n_top++;
        for (int32_t j = n_top - 1; j > at; j--)
            top[j] = top[j - 1];
        top[at] = (sx_follower){ix->ed[f].tok, ix->ed[f].to, c, lst};
    }
    *total = tot;
    return n_top;
}

int32_t suffix_index_follow(sd_suffix_index *ix, int32_t s, int32_t k, int32_t tok_limit,
                            int32_t *tokens, double *q, int32_t *ends) {
    int32_t n = 0;
    while (n < k) {
        sx_follower b;
        int64_t total = 0;
        if (suffix_index_best_edge(ix, s, &b, &total) || b.tok >= tok_limit) break;
        tokens[n] = b.tok;
        q[n] = (double)b.cnt / (double)total;
        ends[n] = b.last;
        n++;
        s = b.to;
    }
    return n;
}

int32_t suffix_index_chain(sd_suffix_index *ix, int32_t s, int32_t m, const sd_suffix_params *p,
                           int32_t k, int32_t tok_limit, int32_t *tokens, double *score,
                           double *prob, int32_t *last_end, int32_t *ends_out) {
    *score = 0.0;
    *prob = 1.0;
    *last_end = 0;
    if (m < p->n_min || m < 1) return 0;
    const double lim = (double)p->max_spec_factor * m;
    const int32_t n_max = lim < (double)k ? (int32_t)lim : k;
    double q[SD_MAX_DRAFT];
    int32_t ends[SD_MAX_DRAFT];
    const int32_t n_walk = suffix_index_follow(ix, s, n_max < SD_MAX_DRAFT ? n_max : SD_MAX_DRAFT,
                                               tok_limit, tokens, q, ends);
    double pr = 1.0;
    int32_t n = 0;
    for (; n < n_walk; n++) {
        const double next = pr * q[n];
        if (next < (double)p->min_token_prob) break;
        pr = next;
        *score += pr;
        *last_end = ends[n];
        if (ends_out) ends_out[n] = ends[n];
    }
    *prob = pr;
    return n;
}

int32_t sd_suffix_index_propose(sd_suffix_index *ix, const sd_suffix_params *p, int32_t k,
                                int32_t *tokens, int32_t *match, float *prob) {
    int32_t m = 0;
    const int32_t l = suffix_index_match_state(ix, &m);
    if (match) *match = m;
    double score = 0.0, pr = 1.0;
    int32_t last_end = 0;
    const int32_t n =
        l >= 0 ? suffix_index_chain(ix, l, m, p, k, INT32_MAX, tokens, &score, &pr, &last_end, NULL)
               : 0;
    if (prob) *prob = (float)pr;
    return n;
}
