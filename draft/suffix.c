/*
 * draft/suffix.c: the suffix-structure proposer (see sd_draft.h) over the suffix index of
 * suffix_index.c (a suffix automaton with occurrence counts: how it works, the top of that
 * file) and, when one is attached, the cross-request cache of suffix_cache.c.
 */
#include <stdlib.h>
#include <string.h>

#include "draft/suffix_impl.h"

/* ---- the proposer ---- */

/* The expected rule's acceptance model (sd_suffix_params.rule): a_i for a drafted token
 * from its source (0: the context, 1: the cross-request cache), the bucket of the match
 * length it follows (m + i for token i of a chain from a match of m) and whether its
 * follower was ambiguous (another token also followed the same string). */
#define SX_SRC     2
#define SX_MB      10
#define SX_KEYS    (SX_SRC * SX_MB * 2)
#define SX_PRIOR_W 4.0 /* the prior counts as this many drafted tokens */

/* Match length -> bucket: 1, 2, 3, 4, 5, 6-7, 8-11, 12-15, 16-31, 32+. */
static int32_t m_bucket(int32_t m) {
    static const int32_t lo[SX_MB] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 32};
    int32_t b = 0;
    while (b + 1 < SX_MB && m >= lo[b + 1])
        b++;
    return b;
}

/* The priors per bucket: the acceptance of a token after a match of that length, measured
 * on SmolLM2-135M's greedy answers to scripts/prompts/{rewrite,code-edit,doc-qa,agent-loop}
 * (docs/drafting.md); an ambiguous follower's prior is SX_AMBIG of it. */
static const double k_prior[SX_MB] = {0.30, 0.50, 0.65, 0.72, 0.85, 0.90, 0.92, 0.95, 0.97, 0.98};
#define SX_AMBIG 0.6

/* Resuming a copy (sd_suffix_params.resume): only a copy of at least SX_RESUME_MIN_RUN
 * tokens (the match the proposal followed plus the tokens accepted from it; shorter ones are
 * mostly new text whose match was a coincidence) is resumed, and resuming stops after
 * SX_RESUME_MISSES resumed proposals in a row rejected at their first token (the target has
 * left the copied text) until a match drafts again. Chosen on the replay of the real pair's
 * code-edit answers (docs/drafting.md, fifth round): runs of 4 and 8 predict within 1% of 6,
 * resuming after any copy 2.6% less. */
#define SX_RESUME_MISSES  1
#define SX_RESUME_MIN_RUN 6
#define SX_SUBS           8 /* replacements remembered (the oldest goes first) */

/* Byte-level matching (sd_proposer_suffix_set_bytes): a byte match drafts when it covers
 * more of the context's last tokens than the token-level match and at least n_min of them,
 * over at least SX_BYTES_MIN bytes. */
#define SX_BYTES_MIN 4

static int32_t model_key(int32_t src, int32_t m, double q) {
    return (src * SX_MB + m_bucket(m)) * 2 + (q < 1.0);
}

typedef struct suffix_proposer {
    sd_proposer base; /* first member */
    sd_suffix_params prm;
    sd_suffix_index *ix;    /* over the committed context */
    sd_suffix_cache *cache; /* earlier requests (not owned), or NULL */
    sx_bytes *bx;           /* the byte-level matcher over the same tokens, or NULL */
    int64_t byte_hits;      /* proposals from a byte match */
    int32_t n_vocab;
    int32_t last_match;
    int64_t cache_hits; /* proposals taken from the cache */
    /* the expected rule: accepted and reached drafted tokens per key since the index was
     * last rebuilt (a new generation) */
    double acc[SX_KEYS], seen[SX_KEYS];
    /* the last chain proposal, learned from at the next commit: its tokens, their keys,
     * and the context length it followed */
    int32_t pend_n, pend_at;
    int32_t pend_tok[SD_MAX_DRAFT], pend_key[SD_MAX_DRAFT];
    /* resuming a copy (sd_suffix_params.resume): the last proposal from the context (its
     * tokens, the context length it followed, and for each token the index position just
     * past its source occurrence), and the resume point it left: the position of the token
     * the target is expected to copy next once the context is cur_at tokens long (-1:
     * none); misses: resumed proposals in a row rejected at their first token */
    int32_t rs_n, rs_at, rs_run;
    int32_t rs_tok[SD_MAX_DRAFT], rs_next[SD_MAX_DRAFT];
    int32_t cur, cur_at, cur_run, misses, cur_sub, streak;
    /* replacements (sd_suffix_params.resume): source token from[i] that the target wrote as
     * to[i] where it resumed a copy; applied to later proposals from the context, dropped
     * when the target rejects one or leaves the copy right after it; rs_src: each token of
     * the last proposal as its source had it (before the replacements) */
    int32_t sub_from[SX_SUBS], sub_to[SX_SUBS], n_sub;
    int32_t rs_src[SD_MAX_DRAFT];
} suffix_proposer;

static double model_a(const suffix_proposer *p, int32_t key) {
    const double prior = k_prior[(key / 2) % SX_MB] * (key % 2 ? SX_AMBIG : 1.0);
    return (p->acc[key] + SX_PRIOR_W * prior) / (p->seen[key] + SX_PRIOR_W);
}

/* The expected rule on a chain of n_walk tokens (q: their followers' shares) from a match
 * of m in source src: the best length (0 .. n_walk), *keys[n_walk] the tokens' keys,
 * *gain the expected tokens per unit cost of that length (1: drafting nothing). */
static int32_t expected_len(const suffix_proposer *p, int32_t src, int32_t m, const double *q,
                            int32_t n_walk, int32_t *keys, double *gain) {
    const double cost = p->prm.draft_cost > 0.0f ? p->prm.draft_cost : 0.25;
    double pr = 1.0, sum = 0.0, best = 1.0;
    int32_t n = 0;
    for (int32_t i = 0; i < n_walk; i++) {
        keys[i] = model_key(src, m + i, q[i]);
        pr *= model_a(p, keys[i]);
        sum += pr;
        const double g = (1.0 + sum) / (1.0 + cost * (i + 1));
        if (g > best) {
            best = g;
            n = i + 1;
        }
    }
    *gain = best;
    return n;
}

/* Learn from the pending proposal against the committed ctx[0 .. n): its tokens up to the
 * first that differs were accepted, that one rejected; tokens past the context's end were
 * not verified (no outcome). */
static void learn(suffix_proposer *p, const int32_t *ctx, int32_t n) {
    const int32_t at = p->pend_at, np = p->pend_n;
    p->pend_n = 0;
    if (np == 0 || n <= at) return;
    int32_t a = 0;
    while (a < np && at + a < n && ctx[at + a] == p->pend_tok[a]) {
        p->acc[p->pend_key[a]] += 1.0;
        p->seen[p->pend_key[a]] += 1.0;
        a++;
    }
    if (a < np && at + a < n) p->seen[p->pend_key[a]] += 1.0;
}

/* The resume point after the last proposal from the context, against the committed
 * ctx[0 .. n) (the index still holds its first rs_at tokens): the target accepted a tokens
 * and then emitted y. If it rejected token a (source x), it replaced x by y: the copy goes
 * on past x, or past the token after x when y is that token (x deleted). If it accepted all,
 * its next token, a copy or not, takes the place of the source's next one. */
static int32_t sub_find(const suffix_proposer *p, int32_t from) {
    for (int32_t i = 0; i < p->n_sub; i++)
        if (p->sub_from[i] == from) return i;
    return -1;
}

static void sub_drop(suffix_proposer *p, int32_t from) {
    const int32_t i = sub_find(p, from);
    if (i < 0) return;
    memmove(p->sub_from + i, p->sub_from + i + 1, (size_t)(p->n_sub - i - 1) * sizeof(int32_t));
    memmove(p->sub_to + i, p->sub_to + i + 1, (size_t)(p->n_sub - i - 1) * sizeof(int32_t));
    p->n_sub--;
}

static void sub_add(suffix_proposer *p, int32_t from, int32_t to) {
    sub_drop(p, from);
    if (p->n_sub == SX_SUBS) sub_drop(p, p->sub_from[0]);
    p->sub_from[p->n_sub] = from;
    p->sub_to[p->n_sub++] = to;
}

static void resume_learn(suffix_proposer *p, const int32_t *ctx, int32_t n) {
    const int32_t at = p->rs_at, np = p->rs_n;
    const int was_resumed = p->cur_at == at && p->cur >= 0;
    p->rs_n = 0;
    p->cur = -1;
    if (np == 0 || n <= at) return;
    int32_t a = 0;
    while (a < np && at + a < n && ctx[at + a] == p->rs_tok[a])
        a++;
    if (at + a >= n) return; /* not verified yet */
    const int32_t y = ctx[at + a];
    if (a < np && p->rs_src[a] != p->rs_tok[a]) sub_drop(p, p->rs_src[a]); /* a wrong one */
    p->misses = was_resumed && a == 0 ? p->misses + 1 : 0;
    if (p->misses > 0 && p->cur_sub >= 0) sub_drop(p, p->cur_sub); /* the copy was left */
    p->cur_sub = -1;
    if (p->misses >= SX_RESUME_MISSES || p->rs_run + a < SX_RESUME_MIN_RUN) return;
    int32_t c = a < np ? p->rs_next[a] : p->rs_next[np - 1] + 1;
    if (a < np && c < sd_suffix_index_n_tokens(p->ix) && sd_suffix_index_tokens(p->ix)[c] == y)
        c++; /* a deletion */
    else if (a < np && p->rs_src[a] == p->rs_tok[a]) {
        sub_add(p, p->rs_src[a], y); /* a replacement */
        p->cur_sub = p->rs_src[a];
    }
    p->streak = was_resumed && a == np ? p->streak + a : 0;
    p->cur = c;
    p->cur_at = at + a + 1;
    p->cur_run = p->rs_run + a;
}

/* Make the index hold ctx[0 .. min(n, cap)): keep the common prefix (rebuilding from it
 * when ctx does not extend the indexed tokens: a new generation, which also forgets the
 * acceptance model and the pending proposal), append the rest. Before that, a pending
 * proposal that ctx extends is learned from. */
static void sync(suffix_proposer *p, const int32_t *ctx, int32_t n) {
    sd_suffix_index *ix = p->ix;
    const int32_t n_toks = sd_suffix_index_n_tokens(ix);
    const int32_t *toks = sd_suffix_index_tokens(ix);
    if (n > sd_suffix_index_capacity(ix)) n = sd_suffix_index_capacity(ix);
    const int32_t lim = n < n_toks ? n : n_toks;
    int32_t l = 0; /* the common prefix: whole in the usual case (the context extends it) */
    if (lim > 0 && memcmp(toks, ctx, (size_t)lim * sizeof *toks) == 0)
        l = lim;
    else
        while (l < lim && toks[l] == ctx[l])
            l++;
    if (p->pend_n > 0 && l >= p->pend_at) learn(p, ctx, n);
    if (p->rs_n > 0 && l >= p->rs_at) resume_learn(p, ctx, n);
    if (l < n_toks || n_toks == 0) { /* a new text */
        memset(p->acc, 0, sizeof p->acc);
        memset(p->seen, 0, sizeof p->seen);
        p->pend_n = 0;
        p->rs_n = 0;
        p->cur = -1;
        p->cur_sub = -1;
        p->misses = 0;
        p->n_sub = 0;
    }
    sd_suffix_index_truncate(ix, l);
    for (int32_t j = l; j < n; j++)
        if (sd_suffix_index_append(ix, ctx[j])) break; /* a negative id: stop indexing */
    if (p->bx) { /* the same tokens (the common prefix kept), until a token has no bytes */
        sx_bytes_truncate(p->bx, l);
        for (int32_t j = sx_bytes_n_tokens(p->bx); j < n; j++)
            if (sx_bytes_append(p->bx, ctx[j])) break;
    }
}

static int suffix_prefill(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    (void)err;
    sync((suffix_proposer *)base, ctx, n_ctx);
    return SD_OK;
}

static void suffix_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    sync((suffix_proposer *)base, ctx, n_ctx);
}

/* The expected rule's proposal: the context's chain and the cache's, each cut to its best
 * length; the one with the larger expected gain (the context's on a tie). */
static void propose_expected(suffix_proposer *p, const int32_t *ctx, int32_t n_ctx, int32_t k,
                             sd_proposal *out) {
    int32_t ends[SD_MAX_DRAFT];
    double q[SD_MAX_DRAFT], gain = 1.0;
    if (sd_suffix_index_n_tokens(p->ix) == n_ctx) {
        sd_suffix_index *ix = p->ix;
        int32_t m = 0;
        const int32_t l = suffix_index_match_state(ix, &m);
        p->last_match = m;
        if (l >= 0 && m >= p->prm.n_min) {
            const int32_t nw = suffix_index_follow(ix, l, k, INT32_MAX, out->tokens, q, ends);
            out->n = expected_len(p, 0, m, q, nw, p->pend_key, &gain);
        }
    }
    if (p->cache) {
        int32_t toks[SD_MAX_DRAFT], ck[SD_MAX_DRAFT], m = 0;
        const int32_t nw = suffix_cache_follow(p->cache, ctx, n_ctx, k, toks, q, ends, &m);
        double cg = 1.0;
        const int32_t n = m >= p->prm.n_min ? expected_len(p, 1, m, q, nw, ck, &cg) : 0;
        if (n > 0 && cg > gain) {
            memcpy(out->tokens, toks, (size_t)n * sizeof *toks);
            memcpy(p->pend_key, ck, (size_t)n * sizeof *ck);
            out->n = n;
            p->last_match = m;
            p->cache_hits++;
            suffix_cache_touch(p->cache, ends[n - 1]);
        }
    }
    p->pend_n = out->n;
    p->pend_at = n_ctx;
    memcpy(p->pend_tok, out->tokens, (size_t)out->n * sizeof *out->tokens);
}

/* The length of a resumed draft: resume tokens, more after resumed drafts accepted whole
 * (the tokens accepted in a row), at most k and the tokens the source has. */
static int32_t resume_len(const suffix_proposer *p, int32_t k, int32_t n_ctx) {
    int32_t n = p->prm.resume;
    if (p->streak > n) n = p->streak;
    if (n > k) n = k;
    if (n > n_ctx - p->cur) n = n_ctx - p->cur;
    return n;
}

static int suffix_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                          sd_proposal *out, sd_error *err) {
    (void)err;
    suffix_proposer *p = (suffix_proposer *)base;
    out->n = 0;
    out->n_vocab = p->n_vocab;
    out->probs = NULL;
    out->one_hot = 1;
    out->lookup = 1;
    p->last_match = 0;
    sync(p, ctx, n_ctx);
    if (p->prm.rule == SD_SUFFIX_RULE_EXPECTED) {
        propose_expected(p, ctx, n_ctx, k, out);
        return SD_OK;
    }
    double score = 0.0;
    p->rs_n = 0;
    if (sd_suffix_index_n_tokens(p->ix) == n_ctx) { /* else past the capacity: none */
        sd_suffix_index *ix = p->ix;
        int32_t m = 0;
        const int32_t l = suffix_index_match_state(ix, &m);
        double prob;
        int32_t last_end;
        p->last_match = m;
        if (l >= 0)
            out->n = suffix_index_chain(ix, l, m, &p->prm, k, INT32_MAX, out->tokens, &score, &prob,
                                        &last_end, p->rs_next);
        p->rs_run = m;
        if (p->prm.resume > 0 && p->cur >= 0 && p->cur_at == n_ctx && p->cur < n_ctx &&
            (out->n == 0 || p->cur_run > m) &&
            resume_len(p, k, n_ctx) > out->n) { /* resume the copy the target left */
            const int32_t n = resume_len(p, k, n_ctx);
            p->rs_run = p->cur_run;
            memcpy(out->tokens, sd_suffix_index_tokens(ix) + p->cur,
                   (size_t)n * sizeof *out->tokens);
            for (int32_t i = 0; i < n; i++)
                p->rs_next[i] = p->cur + i + 1;
            out->n = n;
        } else
            p->cur = -1;
        if (out->n == 0 && p->bx && sx_bytes_n_tokens(p->bx) == n_ctx) { /* the bytes */
            int32_t len = 0;
            const int32_t j = sx_bytes_match(p->bx, SX_BYTES_MIN, &len);
            const int32_t mb = j >= 0 ? sx_bytes_tokens_within(p->bx, len) : 0;
            const double lim = (double)p->prm.max_spec_factor * mb;
            int32_t n = lim < (double)k ? (int32_t)lim : k;
            if (n > n_ctx - j) n = n_ctx - j;
            if (mb > m && mb >= p->prm.n_min && n > 0) {
                memcpy(out->tokens, ctx + j, (size_t)n * sizeof *out->tokens);
                for (int32_t i = 0; i < n; i++)
                    p->rs_next[i] = j + i + 1;
                out->n = n;
                p->rs_run = mb;
                p->last_match = mb;
                p->byte_hits++;
                score = n; /* one occurrence: each token's share 1 */
            }
        }
        if (p->prm.resume > 0 && out->n > 0) {
            p->rs_n = out->n;
            p->rs_at = n_ctx;
            memcpy(p->rs_src, out->tokens, (size_t)out->n * sizeof *out->tokens);
            for (int32_t i = 0; i < out->n && p->n_sub > 0; i++) {
                const int32_t j = sub_find(p, out->tokens[i]);
                if (j >= 0) out->tokens[i] = p->sub_to[j];
            }
            memcpy(p->rs_tok, out->tokens, (size_t)out->n * sizeof *out->tokens);
        }
    }
    if (p->cache) { /* the earlier requests' proposal when it scores higher */
        int32_t toks[SD_MAX_DRAFT], m = 0;
        double sc = 0.0;
        const int32_t n = sd_suffix_cache_propose(p->cache, ctx, n_ctx, &p->prm, k, toks, &m, &sc);
        if (n > 0 && sc > score) {
            memcpy(out->tokens, toks, (size_t)n * sizeof *toks);
            out->n = n;
            p->last_match = m;
            p->cache_hits++;
            p->rs_n = 0; /* not a copy of the context: nothing to resume */
            p->cur = -1;
        }
    }
    return SD_OK;
}

/* The tree proposal from state s reached by a match of length m (sd_proposer_propose_tree):
 * the `width` most frequent followers of s (ties: the most recent), each whose probability
 * count / total is at least min_token_prob, each continued by the chain rule of
 * suffix_index_chain from that probability, every branch at most min(depth,
 * max_spec_factor * m) tokens deep. The first branch is the match's own chain. Depth-first
 * node order into tokens, parent [width * depth]. */
static int32_t suffix_tree(sd_suffix_index *ix, int32_t s, int32_t m, const sd_suffix_params *p,
                           int32_t width, int32_t depth, int32_t *tokens, int32_t *parent) {
    if (m < p->n_min || m < 1) return 0;
    const double lim = (double)p->max_spec_factor * m;
    const int32_t n_max = lim < (double)depth ? (int32_t)lim : depth;
    if (n_max < 1) return 0;
    sx_follower top[SD_MAX_DRAFT];
    int64_t total = 0;
    const int32_t n_top = suffix_index_top_edges(ix, s, width, top, &total);
    int32_t n = 0;
    for (int32_t b = 0; b < n_top && total > 0; b++) {
        double pr = (double)top[b].cnt / (double)total;
        if (pr < (double)p->min_token_prob) break; /* ranked: the rest are rarer */
        int32_t node = n, st = top[b].to;
        tokens[n] = top[b].tok;
        parent[n++] = -1;
        for (int32_t d = 1; d < n_max; d++) {
            sx_follower f;
            int64_t tot = 0;
            if (suffix_index_best_edge(ix, st, &f, &tot)) break;
            const double next = pr * (double)f.cnt / (double)tot;
            if (next < (double)p->min_token_prob) break;
            pr = next;
            tokens[n] = f.tok;
            parent[n] = node;
            node = n++;
            st = f.to;
        }
    }
    return n;
}

/* A tree whose first branch is the chain proposal (suffix_propose, as a chain of the same
 * depth drafts: the match's chain, a resumed copy with its renames, the byte match or the
 * cross-request cache's proposal), then the context match's other most frequent followers,
 * each continued by its chain (suffix_tree), leaving out a follower whose token is the
 * chain's first (siblings are distinct): at most width branches. So a tree drafts every
 * token the chain drafts and is accepted at least as far. The chain's learning (resuming,
 * the expected rule's outcomes) reads the committed text, the target's whichever branch it
 * took. */
static int suffix_propose_tree(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t width,
                               int32_t depth, sd_proposal *out, sd_error *err) {
    suffix_proposer *p = (suffix_proposer *)base;
    const int rc = suffix_propose(base, ctx, n_ctx, depth, out, err);
    if (rc) return rc;
    for (int32_t i = 0; i < out->n; i++)
        out->parent[i] = i - 1;
    if (width < 2 || sd_suffix_index_n_tokens(p->ix) != n_ctx) return SD_OK;
    int32_t m = 0;
    const int32_t l = suffix_index_match_state(p->ix, &m);
    if (l < 0) return SD_OK;
    int32_t tok[SD_MAX_DRAFT], par[SD_MAX_DRAFT];
    const int32_t nt = suffix_tree(p->ix, l, m, &p->prm, width, depth, tok, par);
    int32_t branches = out->n > 0;
    for (int32_t i = 0; i < nt && branches < width;) {
        int32_t j = i + 1; /* the branch: nodes i .. j - 1, a chain below its root */
        while (j < nt && par[j] >= 0)
            j++;
        if ((out->n == 0 || tok[i] != out->tokens[0]) && out->n + (j - i) <= SD_MAX_DRAFT) {
            const int32_t at = out->n;
            for (int32_t q = i; q < j; q++) {
                out->tokens[out->n] = tok[q];
                out->parent[out->n++] = par[q] < 0 ? -1 : at + (par[q] - i);
            }
            branches++;
        }
        i = j;
    }
    return SD_OK;
}

static void suffix_free(sd_proposer *base) {
    suffix_proposer *p = (suffix_proposer *)base;
    sx_bytes_free(p->bx);
    sd_suffix_index_free(p->ix);
    free(p);
}

static const sd_proposer_ops suffix_ops = {
    .name = "suffix",
    .prefill = suffix_prefill,
    .propose = suffix_propose,
    .commit = suffix_commit,
    .free = suffix_free,
    .propose_tree = suffix_propose_tree,
    .sizes_itself = 1,
};

sd_suffix_params sd_suffix_default_params(void) {
    sd_suffix_params p;
    p.max_spec_factor = 1.0f;
    p.min_token_prob = 0.1f;
    p.n_min = 2;
    p.n_ctx = 4096;
    p.rule = SD_SUFFIX_RULE_FACTOR;
    p.draft_cost = 0.25f;
    p.resume = 2;
    return p;
}

int sd_suffix_check_params(const sd_suffix_params *p, sd_error *err) {
    if (!p) return sd_errorf(err, SD_ERR_ARG, "suffix: NULL parameters");
    if (!(p->max_spec_factor > 0.0f) || p->max_spec_factor > 1e6f)
        return sd_errorf(err, SD_ERR_ARG, "suffix: max_spec_factor = %g, expected > 0",
                         (double)p->max_spec_factor);
    if (!(p->min_token_prob >= 0.0f && p->min_token_prob <= 1.0f))
        return sd_errorf(err, SD_ERR_ARG, "suffix: min_token_prob = %g, expected 0 .. 1",
                         (double)p->min_token_prob);
    if (p->n_min < 1)
        return sd_errorf(err, SD_ERR_ARG, "suffix: n_min = %d, expected >= 1", p->n_min);
    if (p->rule != SD_SUFFIX_RULE_FACTOR && p->rule != SD_SUFFIX_RULE_EXPECTED)
        return sd_errorf(err, SD_ERR_ARG, "suffix: rule = %d, expected 0 (factor) or 1 (expected)",
                         (int)p->rule);
    if (!(p->draft_cost >= 0.0f && p->draft_cost <= 16.0f))
        return sd_errorf(err, SD_ERR_ARG, "suffix: draft_cost = %g, expected 0 .. 16",
                         (double)p->draft_cost);
    if (p->resume < 0 || p->resume > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "suffix: resume = %d, expected 0 .. %d", p->resume,
                         SD_MAX_DRAFT);
    if (p->n_ctx < 1 || p->n_ctx > (INT32_MAX - 8) / 3)
        return sd_errorf(err, SD_ERR_ARG, "suffix: n_ctx = %d, expected 1 .. %d", p->n_ctx,
                         (INT32_MAX - 8) / 3);
    return SD_OK;
}

int sd_proposer_suffix_init(const sd_suffix_params *prm, int32_t n_vocab, sd_proposer **out,
                            sd_error *err) {
    *out = NULL;
    int rc = sd_suffix_check_params(prm, err);
    if (rc) return rc;
    if (n_vocab < 1)
        return sd_errorf(err, SD_ERR_ARG, "suffix: n_vocab = %d, expected >= 1", n_vocab);
    suffix_proposer *p = calloc(1, sizeof *p);
    if (!p) return sd_errorf(err, SD_ERR_OOM, "suffix: out of memory");
    p->base.ops = &suffix_ops;
    p->prm = *prm;
    p->n_vocab = n_vocab;
    p->cur = -1;
    p->cur_sub = -1;
    if ((rc = sd_suffix_index_init(prm->n_ctx, &p->ix, err))) {
        free(p);
        return rc;
    }
    *out = &p->base;
    return SD_OK;
}

int sd_proposer_suffix_set_cache(sd_proposer *p, sd_suffix_cache *c, sd_error *err) {
    if (!p || p->ops != &suffix_ops)
        return sd_errorf(err, SD_ERR_ARG, "suffix cache: not a suffix proposer");
    ((suffix_proposer *)p)->cache = c;
    return SD_OK;
}

int sd_proposer_suffix_set_bytes(sd_proposer *base, const sd_grammar_vocab *tv, sd_error *err) {
    if (!base || base->ops != &suffix_ops)
        return sd_errorf(err, SD_ERR_ARG, "suffix bytes: not a suffix proposer");
    suffix_proposer *p = (suffix_proposer *)base;
    sx_bytes *x = NULL;
    if (tv) {
        int rc = sx_bytes_init(tv, p->prm.n_ctx, &x, err);
        if (rc) return rc;
        const int32_t n = sd_suffix_index_n_tokens(p->ix); /* the tokens indexed so far */
        for (int32_t j = 0; j < n; j++)
            if (sx_bytes_append(x, sd_suffix_index_tokens(p->ix)[j])) break;
    }
    sx_bytes_free(p->bx);
    p->bx = x;
    return SD_OK;
}

int64_t sd_proposer_suffix_byte_hits(const sd_proposer *p) {
    if (!p || p->ops != &suffix_ops) return -1;
    return ((const suffix_proposer *)p)->byte_hits;
}

int64_t sd_proposer_suffix_cache_hits(const sd_proposer *p) {
    if (!p || p->ops != &suffix_ops) return -1;
    return ((const suffix_proposer *)p)->cache_hits;
}

int32_t sd_proposer_suffix_last_match(const sd_proposer *p) {
    if (!p || p->ops != &suffix_ops) return -1;
    return ((const suffix_proposer *)p)->last_match;
}
