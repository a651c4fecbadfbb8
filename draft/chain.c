/* draft/chain.c: chained drafting (see sd_draft.h, sd_proposer_chain_init): a lookup
 * proposer's match, continued in the same block by a second proposer (the LLM draft) from
 * the match's end. */
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"

typedef struct chain_proposer {
    sd_proposer base; /* first member */
    sd_proposer_ops ops;
    sd_proposer *first, *second; /* not owned */
    int32_t *ext;                /* [cap_ext] the context, then the first's tokens */
    int32_t cap_ext;
    float *probs; /* [SD_MAX_DRAFT, n_vocab_probs] a mixed block's q rows, or NULL */
    int32_t n_vocab_probs;
    sd_chain_counts counts;
    /* sd_proposer_chain_set_limits: the second's most tokens (0: the block's k) and the
     * kept lookup length from which the lookup drafts alone (0: k). */
    int32_t second_max, long_match;
    /* The grammar (sd_proposer_set_grammar; gstate NULL: none) and gext, the state after
     * the lookup tokens, which the second proposer continues from. */
    const sd_grammar_state *gstate;
    const sd_grammar_vocab *gv;
    int32_t gends[SD_DRAFT_MAX_ENDS];
    int32_t n_gends;
    sd_grammar_state *gext;
} chain_proposer;

/* The lookup tokens t[0 .. m) cut at the first the grammar refuses (or an end id), with
 * c->gext the state after the kept ones. Returns the tokens kept, or -1 with err set. */
static int32_t grammar_keep(chain_proposer *c, const int32_t *t, int32_t m, sd_error *err) {
    if (sd_grammar_state_copy(c->gext, c->gstate, err)) return -1;
    for (int32_t i = 0; i < m; i++) {
        for (int32_t j = 0; j < c->n_gends; j++)
            if (c->gends[j] == t[i]) return i;
        size_t len = 0;
        const char *piece = sd_grammar_vocab_piece(c->gv, t[i], &len);
        sd_error refused = {0};
        if (!piece || len == 0) return i;
        const int rc = sd_grammar_advance(c->gext, piece, len, &refused);
        if (rc == SD_ERR_ARG) return i;
        if (rc) {
            sd_errorf(err, (sd_status)rc, "%s", refused.msg);
            return -1;
        }
    }
    return m;
}

static int chain_set_grammar(sd_proposer *base, const sd_grammar_state *state,
                             const sd_grammar_vocab *gv, const int32_t *ends, int32_t n_end,
                             sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    c->gstate = NULL;
    if (!state) return sd_proposer_set_grammar(c->second, NULL, NULL, NULL, 0, err);
    int rc = c->gext ? sd_grammar_state_copy(c->gext, state, err)
                     : sd_grammar_state_clone(state, &c->gext, err);
    if (rc) return rc;
    c->gv = gv;
    memcpy(c->gends, ends, (size_t)n_end * sizeof *ends);
    c->n_gends = n_end;
    c->gstate = state;
    return SD_OK;
}

static int chain_prefill(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    int rc = sd_proposer_prefill(c->first, ctx, n_ctx, err);
    return rc ? rc : sd_proposer_prefill(c->second, ctx, n_ctx, err);
}

/* Room for n tokens of extended context: the buffer grows to the longest context seen
 * (doubling, so a generation reallocates O(log n) times, and none once it holds the
 * longest). */
static int ensure_ext(chain_proposer *c, int64_t n, sd_error *err) {
    if (n <= c->cap_ext) return SD_OK;
    int64_t cap = c->cap_ext > 0 ? c->cap_ext : 256;
    while (cap < n)
        cap *= 2;
    if (cap > INT32_MAX) cap = INT32_MAX;
    if (n > cap)
        return sd_errorf(err, SD_ERR_ARG, "draft chain: context of %lld tokens", (long long)n);
    int32_t *e = realloc(c->ext, (size_t)cap * sizeof *e);
    if (!e) return sd_errorf(err, SD_ERR_OOM, "draft chain: out of memory");
    c->ext = e;
    c->cap_ext = (int32_t)cap;
    return SD_OK;
}

/* q rows for a mixed block over n_vocab ids (allocated once per vocabulary size). */
static int ensure_probs(chain_proposer *c, int32_t n_vocab, sd_error *err) {
    if (c->probs && c->n_vocab_probs == n_vocab) return SD_OK;
    size_t n;
    if (n_vocab < 1 || sd_mul_size((size_t)SD_MAX_DRAFT, (size_t)n_vocab, &n) ||
        sd_mul_size(n, sizeof(float), &n))
        return sd_errorf(err, SD_ERR_ARG, "draft chain: vocabulary of %d ids", n_vocab);
    free(c->probs);
    c->probs = malloc(n);
    c->n_vocab_probs = c->probs ? n_vocab : 0;
    return c->probs ? SD_OK : sd_errorf(err, SD_ERR_OOM, "draft chain: out of memory");
}

/*
 * The first proposer's m tokens (those sd_chain_lookup_keep keeps); m >= k or m == 0:
 * that proposal alone (m == 0: the second's). 0 < m < k: the second proposes k - m more after the
 * context extended by the m tokens (its position, penalty history and keyed draws are those of the
 * extended context, so it drafts what it would draft had they been committed; an LLM draft
 * evaluates them in one batched pass with the context's last token, and commit rolls
 * its cache back to the accepted prefix). The block is one-hot when both parts are; else
 * (rejection sampling with an LLM draft) the m lookup rows are one-hot rows (q = delta_x:
 * verification accepts x with probability p(x), sd_verify_onehot's rule, draw for draw)
 * and the rest are the second's q rows.
 */
int32_t sd_chain_lookup_keep(const sd_proposer *first, int32_t m, int32_t k) {
    const int32_t len = sd_proposer_ngram_last_extent(first, k);
    return len >= 0 && len < m ? len : m;
}

static int chain_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                         sd_proposal *out, sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    int rc = sd_proposer_propose(c->first, ctx, n_ctx, k, out, err);
    if (rc) return rc;
    int32_t m = sd_chain_lookup_keep(c->first, out->n, k);
    if (c->gstate && m > 0 && (m = grammar_keep(c, out->tokens, m, err)) < 0) return SD_ERR_OOM;
    out->n = m;
    if (m >= k || (c->long_match > 0 && m >= c->long_match)) {
        c->counts.n_first++;
        return SD_OK;
    }
    /* the second's share of the block: what is left of k, at most second_max */
    const int32_t k2 = c->second_max > 0 && k - m > c->second_max ? c->second_max : k - m;
    if (c->gstate) { /* the second continues from the state after the kept lookup tokens */
        rc = sd_proposer_set_grammar(c->second, m > 0 ? c->gext : c->gstate, c->gv, c->gends,
                                     c->n_gends, err);
        if (rc) return rc;
    }
    if (m == 0) {
        rc = sd_proposer_propose(c->second, ctx, n_ctx, k2, out, err);
        if (!rc && out->n > 0) c->counts.n_second++;
        return rc;
    }
    if ((rc = ensure_ext(c, (int64_t)n_ctx + m, err))) return rc;
    memcpy(c->ext, ctx, (size_t)n_ctx * sizeof *ctx);
    memcpy(c->ext + n_ctx, out->tokens, (size_t)m * sizeof *ctx);
    sd_proposal sub;
    memset(&sub, 0, sizeof sub);
    sub.n_vocab = out->n_vocab;
    rc = sd_proposer_propose(c->second, c->ext, n_ctx + m, k2, &sub, err);
    if (rc) return rc;
    if (sub.n == 0) { /* nothing to add (the draft's context is full, a cut-off): the match */
        c->counts.n_first++;
        return SD_OK;
    }
    if (sub.n_vocab != out->n_vocab)
        return sd_errorf(err, SD_ERR_MISMATCH,
                         "draft chain: rows of %d entries after a lookup over %d ids", sub.n_vocab,
                         out->n_vocab);
    memcpy(out->tokens + m, sub.tokens, (size_t)sub.n * sizeof *sub.tokens);
    out->n = m + sub.n;
    out->lookup = 0; /* mixed: not a lookup-only pass in the statistics */
    c->counts.n_mixed++;
    c->counts.n_mixed_lookup += m;
    c->counts.n_mixed_second += sub.n;
    if (sub.one_hot) {
        out->one_hot = 1;
        out->probs = NULL;
        return SD_OK;
    }
    const int32_t nv = out->n_vocab;
    if ((rc = ensure_probs(c, nv, err))) return rc;
    memset(c->probs, 0, (size_t)m * (size_t)nv * sizeof *c->probs);
    for (int32_t i = 0; i < m; i++)
        c->probs[(size_t)i * (size_t)nv + (size_t)out->tokens[i]] = 1.0f;
    memcpy(c->probs + (size_t)m * (size_t)nv, sub.probs,
           (size_t)sub.n * (size_t)nv * sizeof *c->probs);
    out->one_hot = 0;
    out->probs = c->probs;
    return SD_OK;
}

static int chain_catch_up(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t window,
                          sd_error *err) {
    chain_proposer *c = (chain_proposer *)base;
    int rc = sd_proposer_catch_up(c->first, ctx, n_ctx, window, err);
    return rc ? rc : sd_proposer_catch_up(c->second, ctx, n_ctx, window, err);
}

static void chain_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    chain_proposer *c = (chain_proposer *)base;
    sd_proposer_commit(c->first, ctx, n_ctx);
    sd_proposer_commit(c->second, ctx, n_ctx);
}

static void chain_reset(sd_proposer *base, const sd_sampling_params *samp, uint64_t seed) {
    chain_proposer *c = (chain_proposer *)base;
    c->gstate = NULL;
    sd_proposer_reset(c->first, samp, seed);
    sd_proposer_reset(c->second, samp, seed);
}

static void chain_set_cutoff(sd_proposer *base, float p_min, int32_t n_min) {
    chain_proposer *c = (chain_proposer *)base;
    sd_proposer_set_cutoff(c->first, p_min, n_min);
    sd_proposer_set_cutoff(c->second, p_min, n_min);
}

static void chain_free(sd_proposer *base) {
    chain_proposer *c = (chain_proposer *)base;
    free(c->ext);
    free(c->probs);
    sd_grammar_state_free(c->gext);
    free(c);
}

int sd_proposer_chain_init(sd_proposer *first, sd_proposer *second, const char *name,
                           sd_proposer **out, sd_error *err) {
    *out = NULL;
    if (!first || !second) return sd_errorf(err, SD_ERR_ARG, "draft chain: NULL proposer");
    chain_proposer *c = calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "draft chain: out of memory");
    c->ops = (sd_proposer_ops){
        .name = name ? name : "chain",
        .prefill = chain_prefill,
        .propose = chain_propose,
        .commit = chain_commit,
        .reset = chain_reset,
        .set_cutoff = chain_set_cutoff,
        .catch_up = chain_catch_up,
        .free = chain_free,
        .set_grammar = chain_set_grammar,
    };
    c->base.ops = &c->ops;
    c->first = first;
    c->second = second;
    *out = &c->base;
    return SD_OK;
}

int sd_proposer_chain_set_limits(sd_proposer *p, int32_t second_max, int32_t long_match,
                                 sd_error *err) {
    if (!p || p->ops->propose != chain_propose)
        return sd_errorf(err, SD_ERR_ARG, "draft chain: limits on a proposer that is not a chain");
    if (second_max < 0 || second_max > SD_MAX_DRAFT || long_match < 0 || long_match > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG,
                         "draft chain: limits %d (draft model) and %d (long match), expected "
                         "0 .. %d each",
                         second_max, long_match, SD_MAX_DRAFT);
    chain_proposer *c = (chain_proposer *)p;
    c->second_max = second_max;
    c->long_match = long_match;
    return SD_OK;
}

int sd_proposer_chain_counts(const sd_proposer *p, sd_chain_counts *out) {
    memset(out, 0, sizeof *out);
    if (!p || p->ops->propose != chain_propose) return -1;
    *out = ((const chain_proposer *)p)->counts;
    return 0;
}
