/*
 * The speculative generation loop (see sd_engine.h). One pass of sd_generate:
 *   policy_k     the K of the pass (fixed, the controller, a sweep), capped by the budget
 *                and the context;
 *   draft_pass   the proposer's catch-up after passes without it (timed apart), then
 *                its proposal, timed on the controller's clock;
 *   score_pass   the target's one batched pass over [last, d1 .. dK];
 *   finish_pass  verification over rows made on demand (EOS masked, penalties, the
 *                warp), so rows after the first rejection cost nothing, the statistics,
 *                the commit up to EOS / stop ids (runtime/engine/step.c, as the batcher),
 *                and both caches rolled back to the committed tokens;
 * and the controller's observation. Each function keeps one concern; the two clocks (the
 * wall clock of the statistics, the controller's clock) meet only in draft_pass and
 * run_pass.
 */
#include "runtime/engine/sd_engine.h"
#include "runtime/engine/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sd_gen_params sd_gen_default_params(void) {
    sd_gen_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.n_draft = 4;
    p.samp = sd_sampling_default_params();
    p.seed = 42;
    p.n_stop_ids = 0;
    p.draft_type = SD_DRAFT_AUTO;
    p.k_policy = SD_K_FIXED;
    p.draft_p_min = 0.0f;
    p.draft_min = 0;
    p.clock = SD_CLOCK_AUTO;
    return p;
}

const char *sd_stop_reason_str(sd_stop_reason r) {
    switch (r) {
    case SD_STOP_NONE:
        return "none";
    case SD_STOP_EOS:
        return "eos";
    case SD_STOP_MAX_TOKENS:
        return "max_tokens";
    case SD_STOP_CONTEXT:
        return "context";
    case SD_STOP_STRING:
        return "stop";
    case SD_STOP_CANCEL:
        return "cancelled";
    case SD_STOP_GRAMMAR:
        return "grammar";
    }
    return "unknown";
}

double sd_stats_acceptance_rate(const sd_gen_stats *s) {
    return s->n_drafted > 0 ? (double)s->n_accepted / s->n_drafted : 0.0;
}

double sd_stats_accept_at(const sd_gen_stats *s, int32_t i) {
    if (i < 0 || i >= SD_MAX_DRAFT || s->drafted_at[i] == 0) return 0.0;
    return (double)s->accepted_at[i] / s->drafted_at[i];
}

double sd_stats_mean_k(const sd_gen_stats *s) {
    int64_t n = 0, sum = 0;
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++) {
        n += s->k_hist[k];
        sum += (int64_t)k * s->k_hist[k];
    }
    return n > 0 ? (double)sum / (double)n : 0.0;
}

double sd_stats_tokens_per_pass(const sd_gen_stats *s) {
    return s->n_target_passes > 0 ? (double)(s->n_generated + s->n_stop_tokens) / s->n_target_passes
                                  : 0.0;
}

void sd_stats_add(sd_gen_stats *sum, const sd_gen_stats *s) {
    sum->n_prompt += s->n_prompt;
    sum->n_prompt_cached += s->n_prompt_cached;
    sum->n_generated += s->n_generated;
    sum->n_target_passes += s->n_target_passes;
    sum->n_stop_tokens += s->n_stop_tokens;
    sum->n_drafted += s->n_drafted;
    sum->n_accepted += s->n_accepted;
    for (int32_t i = 0; i < SD_MAX_DRAFT; i++) {
        sum->drafted_at[i] += s->drafted_at[i];
        sum->accepted_at[i] += s->accepted_at[i];
    }
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++)
        sum->k_hist[k] += s->k_hist[k];
    sum->t_prefill_ms += s->t_prefill_ms;
    sum->t_draft_ms += s->t_draft_ms;
    sum->t_verify_ms += s->t_verify_ms;
    sum->t_sample_ms += s->t_sample_ms;
    sum->t_total_ms += s->t_total_ms;
    sum->ttft_ms += s->ttft_ms;
    sum->t_first_ms += s->t_first_ms;
    sum->n_off_passes += s->n_off_passes;
    sum->t_off_ms += s->t_off_ms;
    sum->n_switch_off += s->n_switch_off;
    sum->n_probes += s->n_probes;
    sum->n_passes_lookup += s->n_passes_lookup;
    sum->n_drafted_lookup += s->n_drafted_lookup;
    sum->n_accepted_lookup += s->n_accepted_lookup;
}

double sd_stats_tokens_per_s(const sd_gen_stats *s) {
    double t = s->t_total_ms - s->t_prefill_ms;
    return t > 0.0 ? s->n_generated / (t * 1e-3) : 0.0;
}

double sd_stats_itl_ms(const sd_gen_stats *s) {
    return s->n_generated > 1 ? (s->t_total_ms - s->t_first_ms) / (s->n_generated - 1) : 0.0;
}

/* One generation: its inputs, buffers (all allocated before the loop) and state. */
typedef struct gen_run {
    sd_scorer *target;
    sd_proposer *draft;
    const sd_gen_params *gp;
    int32_t eos, n_vocab, n_ctx_max;
    sd_gen_stats *st;
    int32_t *ctx;      /* [n_prompt + n_predict] committed tokens */
    int32_t n_ctx;     /* committed */
    float *logits;     /* [SD_MAX_DRAFT + 1, n_vocab] target rows */
    float *probs;      /* [SD_MAX_DRAFT + 1, n_vocab] warped target rows (temp > 0) */
    float *residual;   /* [n_vocab] */
    int32_t *iscratch; /* [n_vocab] */
    float *raw;        /* [SD_MAX_DRAFT + 1, n_vocab] the model's rows (logprobs), or NULL */
    sd_token_logprob lp[SD_MAX_DRAFT + 1]; /* a pass's committed tokens' logprobs */
    sd_adaptive ctl;
    int adaptive;
    sd_pass_clock clock;
    int32_t n_ctx_drafted; /* the context when the proposer last drafted */
    int catchup_expensive;
    int32_t tree_width; /* token trees of this width (gp->tree_width), 0: chains */
    /* The grammar (gp->grammar), or NULL: its state after the committed tokens, a pass's
     * chain of states (row i's), the mask scratch. */
    sd_grammar *grammar;
    sd_grammar_state *gseq;
    sd_grammar_state *gchain[SD_MAX_DRAFT + 1];
    uint64_t *gbits;
} gen_run;

static void gen_free(gen_run *g) {
    free(g->ctx);
    free(g->logits);
    free(g->probs);
    free(g->residual);
    free(g->iscratch);
    free(g->raw);
    for (int32_t i = 0; i <= SD_MAX_DRAFT; i++)
        sd_grammar_state_free(g->gchain[i]);
    sd_grammar_state_free(g->gseq);
    sd_grammar_free(g->grammar);
    free(g->gbits);
}

/* The grammar's state, chain and scratch (g->grammar compiled). */
static int gen_alloc_grammar(gen_run *g, sd_error *err) {
    int rc = sd_grammar_state_init(g->grammar, &g->gseq, err);
    for (int32_t i = 0; i <= SD_MAX_DRAFT && !rc; i++)
        rc = sd_grammar_state_clone(g->gseq, &g->gchain[i], err);
    if (rc) return rc;
    g->gbits = calloc(((size_t)g->n_vocab + 63) / 64, sizeof *g->gbits);
    return g->gbits ? SD_OK : sd_errorf(err, SD_ERR_OOM, "generate: out of memory");
}

static int gen_alloc(gen_run *g, int32_t cap_ctx, sd_error *err) {
    size_t rows;
    if (sd_mul_size((size_t)(SD_MAX_DRAFT + 1), (size_t)g->n_vocab, &rows) ||
        sd_mul_size(rows, sizeof(float), &rows))
        return sd_errorf(err, SD_ERR_OOM, "generate: vocabulary too large");
    g->ctx = malloc((size_t)cap_ctx * sizeof(int32_t));
    g->logits = malloc(rows);
    g->probs = malloc(rows);
    g->residual = malloc((size_t)g->n_vocab * sizeof(float));
    g->iscratch = malloc((size_t)g->n_vocab * sizeof(int32_t));
    if (g->gp->logprobs) g->raw = malloc(rows);
    if (!g->ctx || !g->logits || !g->probs || !g->residual || !g->iscratch ||
        (g->gp->logprobs && !g->raw))
        return sd_errorf(err, SD_ERR_OOM, "generate: out of memory");
    return SD_OK;
}

/* The policy's K for the next pass (0: target alone), capped so one pass never emits
 * past the budget or the context. *state: the controller's state before the pass. */
static int32_t policy_k(gen_run *g, sd_adaptive_state *state, int32_t *k_policy) {
    const sd_gen_params *gp = g->gp;
    *state = g->adaptive ? sd_adaptive_state_of(&g->ctl) : SD_ADAPTIVE_ON;
    int32_t k = 0;
    if (g->draft) {
        if (g->adaptive) {
            k = sd_adaptive_next_k(&g->ctl);
            /* The controller decides on or off; a proposer that sizes its drafts by its
             * match (suffix) may draft up to the largest K, not the average's best K. */
            if (k > 0 && sd_proposer_sizes_itself(g->draft)) k = gp->n_draft;
        } else if (gp->k_policy == SD_K_SWEEP)
            k = g->st->n_target_passes % (gp->n_draft + 1);
        else
            k = gp->n_draft;
    }
    *k_policy = k;
    return sd_step_cap_k(gp, k, g->st->n_generated, g->n_ctx, g->n_ctx_max);
}

/* Drafting for a pass of policy K k. After target-alone passes (was_off) the proposer
 * first catches up on the tokens it skipped, timed apart so the controller's per-token
 * draft cost stays the cost of drafting (windowed once that proved expensive).
 * *t_draft: the proposal's time on the controller's clock. */
static int draft_pass(gen_run *g, int32_t k, int was_off, sd_proposal *prop, double *t_draft,
                      sd_error *err) {
    *t_draft = 0.0;
    if (k == 0) return SD_OK;
    double t = sd_time_ms();
    if (was_off) {
        const int32_t lag = g->n_ctx - g->n_ctx_drafted;
        const int32_t window = g->catchup_expensive ? SD_CATCHUP_WINDOW : 0;
        const double c0 = sd_step_clock_ms(g->clock);
        int rc = sd_proposer_catch_up(g->draft, g->ctx, g->n_ctx, window, err);
        const double c1 = sd_step_clock_ms(g->clock), t1 = sd_time_ms();
        if (!window && lag >= SD_CATCHUP_WINDOW)
            g->catchup_expensive =
                (c1 - c0) / lag > SD_CATCHUP_BUDGET * sd_adaptive_pass_ms(&g->ctl, 1);
        g->st->t_draft_ms += t1 - t;
        t = t1;
        if (rc) return rc;
    }
    g->n_ctx_drafted = g->n_ctx;
    if (g->grammar) {
        int32_t ends[SD_MAX_STOP_IDS + 1];
        const int32_t n_end = sd_step_grammar_ends(g->gp, g->eos, ends);
        int rc = sd_proposer_set_grammar(g->draft, g->gseq, g->gp->grammar_vocab, ends, n_end, err);
        if (rc) return rc;
    }
    const double c0 = sd_step_clock_ms(g->clock);
    int rc = g->tree_width > 0
                 ? sd_proposer_propose_tree(g->draft, g->ctx, g->n_ctx, g->tree_width, k, prop, err)
                 : sd_proposer_propose(g->draft, g->ctx, g->n_ctx, k, prop, err);
    *t_draft = sd_step_clock_ms(g->clock) - c0;
    g->st->t_draft_ms += sd_time_ms() - t;
    if (rc) return rc;
    if (prop->n > 0 && prop->n_vocab != g->n_vocab)
        return sd_errorf(err, SD_ERR_MISMATCH,
                         "draft proposal rows have %d entries, the target vocabulary %d",
                         prop->n_vocab, g->n_vocab);
    return SD_OK;
}

/* Verify the pass's k drafted tokens (k = 0: the target-alone draw), count the pass and
 * commit (step.c), then roll both caches back to the committed tokens (the KV commit).
 * *n_new: the tokens emitted (copied to out). */
static int finish_pass(gen_run *g, const sd_proposal *prop, int32_t k, sd_verify_result *res,
                       int32_t *out, int32_t *n_new, sd_error *err) {
    const int32_t first_new = g->n_ctx, n_gen0 = g->st->n_generated;
    sd_step_pass p = {.gp = g->gp,
                      .eos = g->eos,
                      .n_vocab = g->n_vocab,
                      .seed = g->gp->seed,
                      .ctx = g->ctx,
                      .n_ctx = g->n_ctx,
                      .draft = prop->tokens,
                      .k = k,
                      .q = prop->one_hot ? NULL : prop->probs,
                      .lookup = prop->lookup,
                      .logits = g->logits,
                      .probs = g->probs,
                      .residual = g->residual,
                      .iscratch = g->iscratch,
                      .st = g->st,
                      .raw = g->raw,
                      .lp = g->raw ? g->lp : NULL,
                      .gseq = g->gseq,
                      .gchain = g->grammar ? g->gchain : NULL,
                      .gbits = g->gbits};
    int32_t path[SD_MAX_DRAFT];
    if (g->tree_width > 0 && k > 0) { /* a tree (a chain is one too: verified alike) */
        p.parent = prop->parent;
        p.path = path;
    }

    int rc = sd_step_finish(&p, res, err);
    /* Name the model: a NaN logit here means corrupt weights in that file. */
    if (rc)
        return sd_error_prefix(err, rc, "%s: verification failed",
                               sd_model_path(sd_scorer_model(g->target)));
    g->n_ctx = p.n_ctx;
    *n_new = g->n_ctx - first_new;
    memcpy(out + n_gen0, g->ctx + first_new, (size_t)*n_new * sizeof *out);
    if (g->raw) memcpy(g->gp->logprobs_out + n_gen0, g->lp, (size_t)*n_new * sizeof *g->lp);
    if (p.parent) /* the accepted path's KV rows follow the root; the other branches go */
        sd_scorer_commit_tree(g->target, first_new, path, res->n_accepted, g->ctx, g->n_ctx);
    else
        sd_scorer_commit(g->target, g->ctx, g->n_ctx);
    if (g->draft) sd_proposer_commit(g->draft, g->ctx, g->n_ctx);
    return SD_OK;
}

/* One pass: K, drafting, the target pass, verification, commit, the controller. Returns
 * the tokens emitted (>= 0) through *n_new. */
static int run_pass(gen_run *g, int32_t *out, int32_t *n_new, sd_error *err) {
    const sd_gen_params *gp = g->gp;
    sd_gen_stats *st = g->st;
    sd_adaptive_state state;
    int32_t k_policy = 0;
    const int32_t k_chosen = policy_k(g, &state, &k_policy);
    const int was_off = state != SD_ADAPTIVE_ON;
    sd_proposal prop = {0};
    prop.n_vocab = g->n_vocab;
    double t_draft = 0.0;
    int rc = draft_pass(g, k_chosen, was_off, &prop, &t_draft, err);
    if (rc) return rc;
    /* a tree's nodes each take a KV slot: keep the first ones (parents come first) that fit */
    if (g->tree_width > 0 && prop.n > g->n_ctx_max - g->n_ctx)
        prop.n = g->n_ctx_max - g->n_ctx > 0 ? g->n_ctx_max - g->n_ctx : 0;
    if (g->grammar) { /* the proposal cut at the first token the grammar refuses */
        int32_t n = k_chosen > 0 ? prop.n : 0;
        if ((rc = sd_step_grammar_chain(g->gseq, gp, g->eos, prop.tokens, &n, g->gchain, err)))
            return rc;
        prop.n = n;
    }
    const int32_t k = k_chosen > 0 ? prop.n : 0;
    if (gp->k_trace && st->n_target_passes < gp->k_trace_cap)
        gp->k_trace[st->n_target_passes] = (uint8_t)k;

    const double t_pass0 = sd_time_ms(), c_pass0 = sd_step_clock_ms(g->clock);
    rc = g->tree_width > 0 && k > 0
             ? sd_scorer_score_tree(g->target, g->ctx, g->n_ctx, prop.tokens, prop.parent, k,
                                    g->logits, err)
             : sd_scorer_score(g->target, g->ctx, g->n_ctx, prop.tokens, k, g->logits, err);
    st->t_verify_ms += sd_time_ms() - t_pass0;
    if (rc) return rc;
    sd_verify_result res;
    if ((rc = finish_pass(g, &prop, k, &res, out, n_new, err))) return rc;

    const double t_pass = sd_time_ms() - t_pass0, c_pass = sd_step_clock_ms(g->clock) - c_pass0;
    if (was_off && k_chosen == 0) {
        st->n_off_passes++;
        st->t_off_ms += t_pass;
    }
    if (g->adaptive) sd_adaptive_observe(&g->ctl, k, res.n_accepted, t_draft, c_pass);
    const int32_t i = st->n_target_passes - 1;
    if (gp->pass_trace && i < gp->pass_trace_cap) {
        sd_pass_record r = {
            k_chosen, k, res.n_accepted, (int32_t)state, t_draft, c_pass, 0, 0, 0, 0, k_policy, 0};
        if (g->adaptive) {
            r.k_best = sd_adaptive_best_k(&g->ctl);
            r.speedup = sd_adaptive_speedup(&g->ctl, r.k_best);
            const double v1 = sd_adaptive_pass_ms(&g->ctl, 1);
            r.c_rel = sd_adaptive_draft_ms(&g->ctl) / v1;
            r.v_rel = sd_adaptive_pass_ms(&g->ctl, r.k_best + 1) / v1;
        }
        gp->pass_trace[i] = r;
    }
    return SD_OK;
}

/* Arguments sd_generate checks before it allocates anything. */
static int check_args(const gen_run *g, int32_t n_prompt, int32_t cap_out, sd_error *err) {
    const sd_gen_params *gp = g->gp;
    if (n_prompt < 1) return sd_errorf(err, SD_ERR_ARG, "generate: empty prompt");
    if (gp->n_predict < 1 || cap_out < gp->n_predict)
        return sd_errorf(err, SD_ERR_ARG, "generate: n_predict %d must be >= 1 and <= %d",
                         gp->n_predict, cap_out);
    if (g->draft && (gp->n_draft < 1 || gp->n_draft > SD_MAX_DRAFT))
        return sd_errorf(err, SD_ERR_ARG, "generate: draft tokens %d outside [1, %d]", gp->n_draft,
                         SD_MAX_DRAFT);
    if (gp->tree_width < 0 || (int64_t)gp->tree_width * gp->n_draft > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "generate: draft tree %dx%d: width x depth must be <= %d",
                         gp->tree_width, gp->n_draft, SD_MAX_DRAFT);
    if (gp->tree_width > 0 && g->draft) {
        if (gp->k_policy != SD_K_FIXED)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "generate: draft trees take a fixed K (--draft-tree with "
                             "--draft-policy %s)",
                             sd_k_policy_name(gp->k_policy));
        if (gp->logprobs)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "generate: draft trees with logprobs are not supported (use a chain: "
                             "no --draft-tree)");
        if (gp->samp.temp > 0.0f && gp->samp.spec != SD_SPEC_GUMBEL)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "generate: draft trees are verified under greedy or Gumbel "
                             "sampling only (--spec-sampling gumbel), not rejection sampling");
    }
    int rc = sd_sampling_check(&gp->samp, err);
    if (rc) return sd_error_prefix(err, rc, "generate");
    for (int32_t i = 0; i < gp->samp.n_logit_bias; i++)
        if (gp->samp.logit_bias[i].id >= g->n_vocab)
            return sd_errorf(err, SD_ERR_ARG, "generate: logit_bias token id %d outside [0, %d)",
                             gp->samp.logit_bias[i].id, g->n_vocab);
    if (gp->logprobs &&
        (!gp->logprobs_out || gp->top_logprobs < 0 || gp->top_logprobs > SD_MAX_TOP_LOGPROBS))
        return sd_errorf(err, SD_ERR_ARG,
                         "generate: logprobs need logprobs_out and top_logprobs %d in 0 .. %d",
                         gp->top_logprobs, SD_MAX_TOP_LOGPROBS);
    if (n_prompt > g->n_ctx_max)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "prompt of %d tokens does not fit the context of %d tokens", n_prompt,
                         g->n_ctx_max);
    return SD_OK;
}

/* The prompt positions the target's cache already holds from the engine's last run (the
 * longest common prefix, as the prefill's sync keeps it, sd_session_keep_prefix): the
 * prefix reuse of one sequence, counted as the batcher counts its prefix-cache hits. */
static int32_t cached_prefix(const sd_scorer *target, const int32_t *prompt, int32_t n_prompt) {
    const sd_session *s = sd_scorer_session(target);
    const int32_t *have = sd_session_tokens(s);
    const int32_t n_have = sd_session_n_past(s);
    int32_t keep = 0;
    while (keep < n_have && keep < n_prompt - 1 && have[keep] == prompt[keep])
        keep++;
    return sd_session_seq_keep_floor(s, 0, keep);
}

int sd_generate(sd_scorer *target, sd_proposer *draft, const int32_t *prompt, int32_t n_prompt,
                int32_t eos, const sd_gen_params *gp, sd_token_cb cb, void *user, int32_t *out,
                int32_t cap_out, sd_gen_stats *st, sd_error *err) {
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    gen_run g;
    memset(&g, 0, sizeof g);
    g.target = target;
    g.draft = draft;
    g.gp = gp;
    g.eos = eos;
    g.st = st;
    g.n_ctx_max = sd_scorer_n_ctx(target);
    g.n_vocab = sd_model_hparams(sd_scorer_model(target))->n_vocab;
    int rc = check_args(&g, n_prompt, cap_out, err);
    if (rc) return rc;
    g.adaptive = draft && gp->k_policy == SD_K_ADAPTIVE;
    g.tree_width = draft ? gp->tree_width : 0;
    g.clock = gp->clock == SD_CLOCK_THREAD_CPU ? SD_CLOCK_THREAD_CPU : SD_CLOCK_WALL;
    if (g.adaptive) {
        sd_adaptive_params ap = sd_adaptive_default_params();
        ap.k_max = gp->n_draft;
        if (gp->draft_prior > 0.0) ap.draft_prior = gp->draft_prior;
        if ((rc = sd_adaptive_init(&g.ctl, &ap, err))) return rc;
    }
    /* At most n_ctx_max + 1 tokens are ever committed (the last is never fed back). */
    int64_t cap_ctx = (int64_t)n_prompt + gp->n_predict;
    if (cap_ctx > (int64_t)g.n_ctx_max + 1) cap_ctx = (int64_t)g.n_ctx_max + 1;
    if ((rc = gen_alloc(&g, (int32_t)cap_ctx, err))) goto done;
    if ((rc = sd_step_grammar_compile(gp, g.n_vocab, &g.grammar, err))) goto done;
    if (g.grammar && (rc = gen_alloc_grammar(&g, err))) goto done;
    memcpy(g.ctx, prompt, (size_t)n_prompt * sizeof(int32_t));
    g.n_ctx = g.n_ctx_drafted = n_prompt;

    /* The proposer draws with this generation's sampling and seed (keyed draws: the same
     * seed as the verifier's, its own purposes; Gumbel drafting shares the noise). */
    if (draft) sd_proposer_reset(draft, &gp->samp, gp->seed);
    st->n_prompt_cached = cached_prefix(target, prompt, n_prompt);
    const double t0 = sd_time_ms();
    rc = sd_scorer_sync(target, g.ctx, g.n_ctx, err); /* prefill */
    if (!rc && draft) rc = sd_proposer_prefill(draft, g.ctx, g.n_ctx, err);
    st->t_prefill_ms = sd_time_ms() - t0;
    while (!rc && st->n_generated < gp->n_predict) {
        if (g.n_ctx > g.n_ctx_max) {
            st->stop = SD_STOP_CONTEXT;
            break;
        }
        const int32_t first_new = g.n_ctx;
        int32_t n_new = 0;
        if ((rc = run_pass(&g, out, &n_new, err))) break;
        if (n_new > 0 && st->t_first_ms == 0.0) st->t_first_ms = st->ttft_ms = sd_time_ms() - t0;
        if (n_new > 0 && cb && cb(user, g.ctx + first_new, n_new)) break;
        if (st->stop != SD_STOP_NONE) break;
    }
    if (!rc && st->stop == SD_STOP_NONE && st->n_generated >= gp->n_predict)
        st->stop = SD_STOP_MAX_TOKENS;
    st->t_total_ms = sd_time_ms() - t0;
    if (g.adaptive) {
        st->n_switch_off = g.ctl.n_switch_off;
        st->n_probes = g.ctl.n_probes;
    }
done:
    gen_free(&g);
    return rc;
}
