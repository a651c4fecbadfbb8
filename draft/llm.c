/* LLM proposer: a small llama model run autoregressively with its own KV cache.
 *
 * Per drafted token: one decode step of the draft (its logits row: the full vocabulary,
 * or the trimmed head's ids), the penalties of the history, and then
 *   greedy            the argmax of the row (plus, with a cut-off, one pass for the
 *                     log-sum-exp): no probability row, the proposal is one-hot;
 *   temp > 0, gumbel  the warped row over the row's entries and its Gumbel-max draw
 *                     (noise keyed by the token ids): one-hot as well, no q rows;
 *   temp > 0, rejection  the warped row, its keyed inverse-CDF draw, and the q row over
 *                     the target's vocabulary the verifier needs (zero outside the row).
 * A row is drafted by sd_draft_row (below), the one rule the batcher's draft passes use too
 * (runtime/engine/batch_step.c), so generate and serve draft the same tokens.
 */
#include "draft/sd_draft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct llm_proposer {
    sd_proposer base; /* first member: sd_proposer* <-> llm_proposer* */
    const sd_model *model;
    sd_session *sess;
    sd_sampling_params samp;
    uint64_t seed;       /* the generation's seed: draws keyed (seed, position, purpose) */
    int32_t n_vocab;     /* the draft's */
    int32_t n_vocab_out; /* the target's: length of a q row */
    int32_t n_common;    /* min of the two: ids the draft may propose */
    /* The trimmed head (sd_proposer_llm_set_head): row entry j is token head[j]; col_of
     * maps an id to its entry (-1: not in the head). n_head 0: the full head, entry j =
     * token j for j < n_common. */
    int32_t n_head;
    int32_t *head;         /* [n_head] */
    int32_t *col_of;       /* [n_vocab] */
    float *logits;         /* [n_vocab] the row (n_row entries used) */
    float *qrow;           /* [n_vocab] its warped distribution */
    float *probs;          /* [SD_MAX_DRAFT, n_vocab_out] q rows (rejection sampling) */
    int32_t *warp_scratch; /* [n_vocab] */
    float p_min;           /* confidence cut-off (0: off) */
    int32_t n_min;         /* drafts at least this many before the cut-off applies */
    /* The draft's view of the context: ctx itself (off == 0), or after a windowed
     * catch-up ctx[0] followed by ctx[off ..] (its first token, then a recent window). */
    int32_t off;
    int32_t *view; /* [n_ctx of the session + 1] */
    /* The grammar (sd_proposer_set_grammar): the state after the committed tokens (not
     * owned; NULL: none), the token bytes, the end ids; gcur: its copy advanced along the
     * drafts; gbits: the mask [(n_vocab_out + 63) / 64]. */
    const sd_grammar_state *gstate;
    const sd_grammar_vocab *gv;
    int32_t gends[SD_DRAFT_MAX_ENDS];
    int32_t n_gends;
    sd_grammar_state *gcur;
    uint64_t *gbits;
} llm_proposer;

/* Entries of a logits row. */
static int32_t n_row(const llm_proposer *p) {
    return p->n_head ? p->n_head : p->n_common;
}

/* The token id of row entry j. */
static int32_t id_of(const llm_proposer *p, int32_t j) {
    return p->n_head ? p->head[j] : j;
}

/* The context as the draft sees it; *len its length. NULL: it does not fit the draft's
 * session (no room to draft). A context that no longer reaches past the window start
 * (a rollback, a new generation) goes back to the full view. */
static const int32_t *draft_view(llm_proposer *p, const int32_t *ctx, int32_t n, int32_t *len) {
    if (p->off > 0 && n <= p->off) p->off = 0;
    if (p->off == 0) {
        *len = n;
        return ctx;
    }
    *len = 1 + (n - p->off);
    if (*len > sd_session_n_ctx(p->sess) + 1) return NULL;
    p->view[0] = ctx[0];
    memcpy(p->view + 1, ctx + p->off, (size_t)(n - p->off) * sizeof *ctx);
    return p->view;
}

/*
 * Greedy confidence: the top probability of softmax(l[0 .. n)) at temperature 1, i.e.
 * 1 / sum_i exp(l_i - max) = exp(-(lse - max)), from the row maximum mx (one pass, the
 * one the argmax made) and one pass of float exponentials summed in double. Returns 0
 * as soon as the sum passes 1 / p_min (the confidence is then below p_min, whatever the
 * rest adds), so a row that stops the draft costs only the entries it needed.
 */
static double greedy_confidence(const float *l, int32_t n, float mx, float p_min) {
    if (isinf(mx)) return 1.0; /* +inf: its mass is shared by the +inf entries */
    const double limit = 1.0 / (double)p_min;
    double sum = 0.0;
    int32_t i = 0;
    for (; i + 1024 <= n; i += 1024) { /* blocks: the inner loop vectorises */
        float part = 0.0f;
        for (int32_t j = i; j < i + 1024; j++)
            part += expf(l[j] - mx);
        sum += (double)part;
        if (sum > limit) return 0.0;
    }
    for (; i < n; i++)
        sum += (double)expf(l[i] - mx);
    return sum > 0.0 ? 1.0 / sum : 1.0;
}

/* Top entry of a warped row. */
static double top_prob(const float *q, int32_t n) {
    float mx = 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (q[i] > mx) mx = q[i];
    return mx;
}

/* Name the draft model in an error from the session or the warp. */
static int draft_error(const llm_proposer *p, int rc, sd_error *err) {
    if (rc == SD_OK || !err) return rc;
    sd_error_prefix(err, rc, "%s: draft", sd_model_path(p->model));
    return rc;
}

int32_t sd_draft_room(const int32_t *ctx, int32_t n_ctx, int32_t k, int32_t n_ctx_draft,
                      int32_t n_vocab_draft) {
    if (k > n_ctx_draft - n_ctx + 1) k = n_ctx_draft - n_ctx + 1;
    for (int32_t i = 0; i < n_ctx && k > 0; i++)
        if (ctx[i] < 0 || ctx[i] >= n_vocab_draft) k = 0;
    return k < 0 ? 0 : k;
}

/* 1 if every id of ctx[0 .. n) is one the draft can evaluate. */
static int draft_knows(const llm_proposer *p, const int32_t *ctx, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ctx[i] < 0 || ctx[i] >= p->n_vocab) return 0;
    return 1;
}

static int llm_prefill(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    llm_proposer *p = (llm_proposer *)base;
    p->off = 0; /* the whole prompt */
    int32_t n = n_ctx - 1;
    if (n > sd_session_n_ctx(p->sess)) n = sd_session_n_ctx(p->sess);
    if (n < 1 || !draft_knows(p, ctx, n)) return SD_OK;
    return draft_error(p, sd_session_seq_sync(p->sess, 0, ctx, n, err), err);
}

/* Catch up on ctx; more than `window` tokens behind (window > 0): restart the view from
 * ctx[0] and the last `window` tokens before the last one, so the work is bounded. */
static int llm_catch_up(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t window,
                        sd_error *err) {
    llm_proposer *p = (llm_proposer *)base;
    if (n_ctx < 2) return SD_OK;
    int32_t len;
    const int32_t *v = draft_view(p, ctx, n_ctx, &len);
    if (window > 0) {
        /* Tokens to evaluate: view[0 .. len - 1) past the cached common prefix. */
        int32_t common = 0;
        const int32_t *cached = sd_session_seq_tokens(p->sess, 0);
        const int32_t n_past = sd_session_seq_n_past(p->sess, 0);
        while (v && common < n_past && common < len - 1 && cached[common] == v[common])
            common++;
        if ((!v || len - 1 - common > window) && n_ctx - 1 - window > 1) {
            p->off = n_ctx - 1 - window;
            v = draft_view(p, ctx, n_ctx, &len);
        }
    }
    if (!v || len - 1 > sd_session_n_ctx(p->sess) || !draft_knows(p, v, len - 1)) return SD_OK;
    return draft_error(p, sd_session_seq_sync(p->sess, 0, v, len - 1, err), err);
}

/*
 * The token entry *j of row l[0 .. n) (entry j is token ids[j]; ids NULL: token j) at
 * position pos: greedy the argmax, sampling the row warped into w[0 .. n) (scratch [n])
 * then the Gumbel-max draw or the keyed inverse-CDF draw. conf (NULL: no cut-off): the
 * draft's confidence (greedy_confidence, or the top of w). Kept out of line: inlined
 * into sd_draft_row, its exponential loop kept the sum in registers it had to spill
 * around expf (callgrind: 2 more instructions per entry of a greedy row).
 */
__attribute__((noinline)) static int pick(const sd_sampling_params *sp, float *l, int32_t n,
                                          const int32_t *ids, uint64_t seed, int64_t pos,
                                          float p_min, float *w, int32_t *scratch, int32_t *j,
                                          double *conf, sd_error *err) {
    if (!(sp->temp > 0.0f)) {
        *j = sd_argmax_checked(l, n); /* -1: a NaN logit */
        if (*j < 0)
            return sd_errorf(err, SD_ERR_ARG,
                             "a logit is NaN: non-finite logits (the model's weights hold NaN "
                             "or inf)");
        if (conf) *conf = greedy_confidence(l, n, l[*j], p_min);
        return SD_OK;
    }
    int rc = sd_warp(sp, l, n, w, scratch, err);
    if (rc) return rc;
    if (sp->spec == SD_SPEC_GUMBEL)
        *j = sd_gumbel_sample(w, n, ids, seed, pos);
    else
        *j = sd_sample(w, n, sd_key_uniform(seed, pos, SD_DRAW_DRAFT, 0));
    if (*j < 0) return sd_errorf(err, SD_ERR_ARG, "draft row has no positive entry");
    if (conf) *conf = top_prob(w, n);
    return SD_OK;
}

/* 1 if id is one of the rule's end ids. */
static int is_end(const sd_draft_rule *x, int32_t id) {
    for (int32_t i = 0; i < x->n_ends; i++)
        if (x->ends[i] == id) return 1;
    return 0;
}

/* Mask row l (x->n entries) with the tokens the grammar allows after the drafts so far
 * (x->gram): -inf for the others. Returns the entries left finite, not counting end ids
 * (0: stop drafting), or -1 on allocation failure. */
static int64_t grammar_mask(const sd_draft_rule *x, float *l) {
    if (sd_grammar_mask(x->gram, x->gv, x->ends, x->n_ends, x->gbits) < 0) return -1;
    const int32_t nv = sd_grammar_vocab_size(x->gv);
    int64_t left = 0;
    for (int32_t j = 0; j < x->n; j++) {
        const int32_t id = x->head ? x->head[j] : j;
        if (id >= nv || !(x->gbits[id >> 6] >> (id & 63) & 1u))
            l[j] = -INFINITY;
        else if (l[j] > -INFINITY && !is_end(x, id))
            left++;
    }
    return left;
}

int sd_draft_row(const sd_draft_rule *x, float *l, const int32_t *ctx, int32_t n_ctx,
                 const int32_t *d, int32_t i, float *q, int32_t *tok, sd_error *err) {
    const sd_sampling_params *sp = x->samp;
    const int32_t n = x->n;
    *tok = -1;
    /* The logit biases and penalties of the target's rows (step.c), on the draft's. */
    if (sp->n_logit_bias) sd_logit_bias_apply(sp, l, x->n_ids, x->col_of);
    if (sd_penalties_on(sp)) sd_penalize(sp, ctx, n_ctx, d, i, l, x->n_ids, x->col_of);
    if (x->gram) { /* nothing the grammar refuses; stop where only an end may come */
        const int64_t left = grammar_mask(x, l);
        if (left < 0) return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
        if (left == 0) return SD_OK;
    }
    /* Confidence cut-off: stop before a token the draft is unsure of, once n_min tokens
     * are drafted. */
    const int cut = x->p_min > 0.0f && i >= x->n_min;
    const int64_t pos = (int64_t)n_ctx + i;
    double conf = 1.0;
    int32_t j;
    float *w = q && !x->head ? q : x->qrow; /* the full head warps into q itself */
    int rc =
        pick(sp, l, n, x->head, x->seed, pos, x->p_min, w, x->scratch, &j, cut ? &conf : NULL, err);
    if (rc) return rc;
    if (cut && conf < (double)x->p_min) return SD_OK;
    const int32_t t = x->head ? x->head[j] : j;
    if (x->gram) { /* an end id is the target's to give; else the state moves on */
        size_t len = 0;
        const char *piece = sd_grammar_vocab_piece(x->gv, t, &len);
        if (is_end(x, t) || !piece || len == 0) return SD_OK;
        sd_error refused = {0};
        const int grc = sd_grammar_advance(x->gram, piece, len, &refused);
        if (grc == SD_ERR_OOM) return sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
        if (grc) return SD_OK; /* refused */
    }
    if (q && sp->temp > 0.0f) { /* q over the target's ids: zero outside the row */
        if (x->head) {
            memset(q, 0, (size_t)x->n_vocab_out * sizeof *q);
            for (int32_t c = 0; c < n; c++)
                q[x->head[c]] = x->qrow[c];
        } else {
            memset(q + n, 0, (size_t)(x->n_vocab_out - n) * sizeof *q);
        }
    }
    *tok = t;
    return SD_OK;
}

/* Greedy with nothing that reads draft position i's row (no penalties, no logit biases,
 * no confidence cut-off there): the classifier's argmax alone will do, no row written
 * (sd_session_seq_eval_argmax: the same index as the argmax of the row). */
static int argmax_only(const llm_proposer *p, int penalize, int32_t i) {
    return !(p->samp.temp > 0.0f) && !penalize && !p->samp.n_logit_bias && !p->gstate &&
           !(p->p_min > 0.0f && i >= p->n_min);
}

static int llm_propose(sd_proposer *base, const int32_t *ctx, int32_t n_ctx, int32_t k,
                       sd_proposal *out, sd_error *err) {
    llm_proposer *p = (llm_proposer *)base;
    const int32_t n_out = p->n_vocab_out;
    /* One-hot: greedy and Gumbel drafts are a function of the context and the keyed
     * noise, so verification needs no q rows. */
    const int rows = p->samp.temp > 0.0f && p->samp.spec == SD_SPEC_REJECTION;
    out->n = 0;
    out->n_vocab = n_out;
    out->one_hot = !rows;
    out->probs = rows ? p->probs : NULL;
    /* Positions and the penalties' history are those of the full context. */
    const int32_t *full = ctx;
    const int32_t n_full = n_ctx;
    const int penalize = sd_penalties_on(&p->samp);
    /* The draft's view: ctx, or its first token and a recent window (llm_catch_up). */
    int32_t n_view;
    const int32_t *view = draft_view(p, ctx, n_ctx, &n_view);
    if (!view) return SD_OK; /* does not fit the draft's context */
    ctx = view;
    n_ctx = n_view;
    /* Room in the draft's context, ids it has (sd_draft_room): else no proposal and the
     * target continues alone. */
    k = sd_draft_room(ctx, n_ctx, k, sd_session_n_ctx(p->sess), p->n_vocab);
    if (k < 1) return SD_OK;
    /* Roll back to the accepted prefix, then evaluate the rest of the context in one
     * batched pass (passes of n_batch when longer) whose last row gives the first
     * draft's logits: after a pass that accepted everything, or a chain's lookup tokens
     * (chain.c), the tokens the draft has not seen and the last one cost one pass. */
    int32_t i0 = sd_session_seq_keep_prefix(p->sess, 0, ctx, n_ctx - 1);
    const int32_t nb = sd_session_n_batch(p->sess);
    int rc = SD_OK;
    for (; n_ctx - i0 > nb && !rc; i0 += nb)
        rc = sd_session_eval(p->sess, ctx + i0, nb, NULL, 0, err);
    int32_t j0 = -1;
    if (!rc && argmax_only(p, penalize, 0))
        rc = sd_session_seq_eval_argmax(p->sess, 0, ctx + i0, n_ctx - i0, n_row(p), p->logits, &j0,
                                        err);
    else if (!rc)
        rc = sd_session_eval(p->sess, ctx + i0, n_ctx - i0, p->logits, 1, err);
    if (rc) return draft_error(p, rc, err);
    if (p->gstate && (rc = sd_grammar_state_copy(p->gcur, p->gstate, err))) return rc;
    /* The rule of every row not drafted by the argmax alone (draft/sd_draft.h). */
    const sd_draft_rule rule = {.samp = &p->samp,
                                .seed = p->seed,
                                .n = n_row(p),
                                .head = p->n_head ? p->head : NULL,
                                .col_of = p->n_head ? p->col_of : NULL,
                                .n_ids = p->n_head ? p->n_vocab : n_row(p),
                                .n_vocab_out = n_out,
                                .p_min = p->p_min,
                                .n_min = p->n_min,
                                .gram = p->gstate ? p->gcur : NULL,
                                .gv = p->gv,
                                .ends = p->gends,
                                .n_ends = p->n_gends,
                                .gbits = p->gbits,
                                .qrow = p->qrow,
                                .scratch = p->warp_scratch};
    int32_t tok = ctx[n_ctx - 1];
    for (int32_t i = 0; i < k; i++) {
        if (argmax_only(p, penalize, i)) {
            int32_t j = j0;
            if (i > 0) {
                rc = sd_session_seq_eval_argmax(p->sess, 0, &tok, 1, n_row(p), p->logits, &j, err);
                if (rc) return draft_error(p, rc, err);
            }
            if (j < 0)
                return draft_error(p,
                                   sd_errorf(err, SD_ERR_ARG,
                                             "a logit is NaN: non-finite logits (the model's "
                                             "weights hold NaN or inf)"),
                                   err);
            tok = id_of(p, j);
            out->tokens[i] = tok;
            out->n = i + 1;
            continue;
        }
        if (i > 0 && (rc = sd_session_eval(p->sess, &tok, 1, p->logits, 1, err)))
            return draft_error(p, rc, err);
        rc = sd_draft_row(&rule, p->logits, full, n_full, out->tokens, i,
                          rows ? p->probs + (size_t)i * n_out : NULL, &tok, err);
        if (rc) return draft_error(p, rc, err);
        if (tok < 0) break;
        out->tokens[i] = tok;
        out->n = i + 1;
    }
    return SD_OK;
}

static void llm_set_cutoff(sd_proposer *base, float p_min, int32_t n_min) {
    llm_proposer *p = (llm_proposer *)base;
    p->p_min = p_min > 0.0f ? p_min : 0.0f;
    p->n_min = n_min > 0 ? n_min : 0;
}

static void llm_commit(sd_proposer *base, const int32_t *ctx, int32_t n_ctx) {
    llm_proposer *p = (llm_proposer *)base;
    int32_t n_view = 0;
    const int32_t *view = draft_view(p, ctx, n_ctx, &n_view);
    if (!view) { /* longer than the draft's context: keep what still matches */
        view = p->view;
        n_view = sd_session_n_ctx(p->sess) + 1;
        memcpy(p->view + 1, ctx + p->off, (size_t)(n_view - 1) * sizeof *ctx);
        p->view[0] = ctx[0];
    }
    ctx = view;
    n_ctx = n_view;
    int32_t kept = sd_session_seq_keep_prefix(p->sess, 0, ctx, n_ctx);
    SD_CHECK(kept == sd_session_seq_n_past(p->sess, 0),
             "draft KV cache must hold only committed tokens");
    (void)kept;
}

static int llm_set_grammar(sd_proposer *base, const sd_grammar_state *state,
                           const sd_grammar_vocab *gv, const int32_t *ends, int32_t n_end,
                           sd_error *err) {
    llm_proposer *p = (llm_proposer *)base;
    p->gstate = NULL;
    if (!state) return SD_OK;
    if (sd_grammar_vocab_size(gv) < p->n_common)
        return sd_errorf(err, SD_ERR_ARG, "draft: grammar over %d tokens, the draft proposes %d",
                         sd_grammar_vocab_size(gv), p->n_common);
    int rc = p->gcur ? sd_grammar_state_copy(p->gcur, state, err)
                     : sd_grammar_state_clone(state, &p->gcur, err);
    if (rc) return rc;
    if (!p->gbits || p->gv != gv) {
        free(p->gbits);
        p->gbits = malloc(((size_t)sd_grammar_vocab_size(gv) + 63) / 64 * sizeof *p->gbits);
        if (!p->gbits) return sd_errorf(err, SD_ERR_OOM, "draft: out of memory");
    }
    p->gv = gv;
    memcpy(p->gends, ends, (size_t)n_end * sizeof *ends);
    p->n_gends = n_end;
    p->gstate = state;
    return SD_OK;
}

static void llm_reset(sd_proposer *base, const sd_sampling_params *samp, uint64_t seed) {
    llm_proposer *p = (llm_proposer *)base;
    p->gstate = NULL; /* a new generation: unconstrained until set again */
    p->off = 0;
    p->samp = *samp;
    p->seed = seed;
}

static void llm_free(sd_proposer *base) {
    llm_proposer *p = (llm_proposer *)base;
    sd_session_free(p->sess);
    free(p->logits);
    free(p->qrow);
    free(p->probs);
    free(p->warp_scratch);
    free(p->view);
    free(p->head);
    free(p->col_of);
    sd_grammar_state_free(p->gcur);
    free(p->gbits);
    free(p);
}

static const sd_proposer_ops llm_ops = {
    .name = "llm",
    .prefill = llm_prefill,
    .propose = llm_propose,
    .commit = llm_commit,
    .reset = llm_reset,
    .set_cutoff = llm_set_cutoff,
    .catch_up = llm_catch_up,
    .free = llm_free,
    .set_grammar = llm_set_grammar,
};

int sd_proposer_llm_init(const sd_model *m, const sd_session_params *sp,
                         const sd_sampling_params *samp, uint64_t seed, int32_t n_vocab_target,
                         sd_proposer **out, sd_error *err) {
    *out = NULL;
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    if (n_vocab_target < 0)
        return sd_errorf(err, SD_ERR_ARG, "draft: negative target vocabulary size %d",
                         n_vocab_target);
    int rc = sd_sampling_check(samp, err);
    if (rc) return rc;
    llm_proposer *p = calloc(1, sizeof *p);
    if (!p) return sd_errorf(err, SD_ERR_OOM, "draft: out of memory");
    p->base.ops = &llm_ops;
    p->model = m;
    p->samp = *samp;
    p->seed = seed;
    p->n_vocab = n_vocab;
    p->n_vocab_out = n_vocab_target > 0 ? n_vocab_target : n_vocab;
    p->n_common = p->n_vocab < p->n_vocab_out ? p->n_vocab : p->n_vocab_out;
    size_t n_probs;
    if (sd_mul_size((size_t)SD_MAX_DRAFT, (size_t)p->n_vocab_out, &n_probs) ||
        sd_mul_size(n_probs, sizeof(float), &n_probs)) {
        free(p);
        return sd_errorf(err, SD_ERR_OOM, "draft: vocabulary too large");
    }
    p->logits = malloc((size_t)n_vocab * sizeof(float));
    p->qrow = malloc((size_t)n_vocab * sizeof(float));
    p->probs = malloc(n_probs);
    p->warp_scratch = malloc((size_t)n_vocab * sizeof(int32_t));
    if (!p->logits || !p->qrow || !p->probs || !p->warp_scratch) {
        llm_free(&p->base);
        return sd_errorf(err, SD_ERR_OOM, "draft: out of memory");
    }
    rc = sd_session_init(m, sp, &p->sess, err);
    if (rc) {
        draft_error(p, rc, err); /* names the model: before p is freed */
        llm_free(&p->base);
        return rc;
    }
    p->view = malloc(((size_t)sd_session_n_ctx(p->sess) + 1) * sizeof *p->view);
    if (!p->view) {
        llm_free(&p->base);
        return sd_errorf(err, SD_ERR_OOM, "draft: out of memory");
    }
    *out = &p->base;
    return SD_OK;
}

const sd_session *sd_proposer_llm_session(const sd_proposer *base) {
    return base && base->ops == &llm_ops ? ((const llm_proposer *)base)->sess : NULL;
}

int sd_proposer_llm_set_head(sd_proposer *base, const int32_t *ids, int32_t n, sd_error *err) {
    if (!base || base->ops != &llm_ops)
        return sd_errorf(err, SD_ERR_ARG, "draft head: not an LLM proposer");
    llm_proposer *p = (llm_proposer *)base;
    if (n < 0 || n > p->n_common || (n > 0 && !ids))
        return sd_errorf(err, SD_ERR_ARG, "%s: draft head of %d ids, expected 0 .. %d",
                         sd_model_path(p->model), n, p->n_common);
    for (int32_t j = 0; j < n; j++)
        if (ids[j] < 0 || ids[j] >= p->n_common)
            return sd_errorf(err, SD_ERR_ARG,
                             "%s: draft head id %d at index %d: expected an id both models "
                             "have, in [0, %d)",
                             sd_model_path(p->model), ids[j], j, p->n_common);
    int32_t *head = n ? malloc((size_t)n * sizeof *head) : NULL;
    int32_t *col_of = n ? malloc((size_t)p->n_vocab * sizeof *col_of) : NULL;
    if (n && (!head || !col_of)) {
        free(head);
        free(col_of);
        return sd_errorf(err, SD_ERR_OOM, "draft head: out of memory");
    }
    int rc = sd_session_set_output_rows(p->sess, ids, n, err); /* checks repeats */
    if (rc) {
        free(head);
        free(col_of);
        sd_session_set_output_rows(p->sess, NULL, 0, NULL);
        free(p->head);
        free(p->col_of);
        p->head = p->col_of = NULL;
        p->n_head = 0;
        return draft_error(p, rc, err);
    }
    free(p->head);
    free(p->col_of);
    p->head = head;
    p->col_of = col_of;
    p->n_head = n;
    if (n) {
        memcpy(head, ids, (size_t)n * sizeof *head);
        for (int32_t v = 0; v < p->n_vocab; v++)
            col_of[v] = -1;
        for (int32_t j = 0; j < n; j++)
            col_of[ids[j]] = j;
    }
    return SD_OK;
}

int32_t sd_proposer_llm_head_size(const sd_proposer *base) {
    if (!base || base->ops != &llm_ops) return -1;
    return ((const llm_proposer *)base)->n_head;
}
