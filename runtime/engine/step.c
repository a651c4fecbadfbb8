/* runtime/engine/step.c: the parts of a speculative pass of the batcher's step (see
 * step.h). */
#include "runtime/engine/step.h"

#include <math.h>
#include <string.h>
#include <time.h>

int32_t sd_step_cap_k(const sd_gen_params *gp, int32_t k, int32_t n_generated, int32_t n_ctx,
                      int32_t n_ctx_max) {
    const int32_t budget = gp->n_predict - n_generated - 1;
    if (k > budget) k = budget;
    if (k > n_ctx_max - n_ctx) k = n_ctx_max - n_ctx;
    return k < 0 ? 0 : k;
}

int sd_step_is_stop(const sd_gen_params *gp, int32_t eos, int32_t t) {
    if (t == eos) return 1;
    for (int32_t i = 0; i < gp->n_stop_ids && i < SD_MAX_STOP_IDS; i++)
        if (gp->stop_ids[i] == t) return 1;
    return 0;
}

/* Row i of the pass's rows, whose history past the committed tokens is hist[0 .. n_hist). */
static const float *make_row(sd_step_pass *x, int32_t i, const int32_t *hist, int32_t n_hist,
                             sd_error *err) {
    const sd_gen_params *gp = x->gp;
    const int32_t nv = x->n_vocab;
    float *row = x->logits + (size_t)i * (size_t)nv;
    if (x->raw && !(x->raw_have >> i & 1u)) { /* the model's row, for the logprobs */
        memcpy(x->raw + (size_t)i * (size_t)nv, row, (size_t)nv * sizeof *row);
        x->raw_have |= 1u << i;
    }
    if (gp->samp.n_logit_bias) sd_logit_bias_apply(&gp->samp, row, nv, NULL);
    if (gp->ignore_eos) { /* EOS and the stop ids (end of turn) never win, as llama.cpp */
        if (x->eos >= 0 && x->eos < nv) row[x->eos] = -INFINITY;
        for (int32_t j = 0; j < gp->n_stop_ids && j < SD_MAX_STOP_IDS; j++)
            if (gp->stop_ids[j] >= 0 && gp->stop_ids[j] < nv) row[gp->stop_ids[j]] = -INFINITY;
    }
    if (x->gchain) { /* the grammar: -inf for every token it refuses after row i's history */
        const int64_t n_ok =
            sd_step_grammar_mask_row(x->gchain[i], gp, x->eos, x->gbits, row, nv, NULL);
        if (n_ok < 0) {
            sd_errorf(err, SD_ERR_OOM, "grammar: out of memory");
            return NULL;
        }
        if (n_ok == 0) { /* nothing may follow: a stand-in row whose token the pass drops */
            if (!x->g_dead || i + 1 < x->g_dead) x->g_dead = i + 1;
            row[0] = 0.0f;
        }
    }
    sd_penalize(&gp->samp, x->ctx, x->n_ctx, hist, n_hist, row, nv, NULL);
    if (!(gp->samp.temp > 0.0f)) return row; /* greedy verification reads the logits */
    float *p = x->probs + (size_t)i * (size_t)nv;
    return sd_warp(&gp->samp, row, nv, p, x->iscratch, err) ? NULL : p;
}

const float *sd_step_row(void *user, int32_t i, sd_error *err) {
    sd_step_pass *x = user;
    return make_row(x, i, x->draft, i, err);
}

const float *sd_step_tree_row(void *user, int32_t r, sd_error *err) {
    sd_step_pass *x = user;
    int32_t rev[SD_MAX_DRAFT], hist[SD_MAX_DRAFT], n = 0;
    for (int32_t a = r - 1; a >= 0 && n < SD_MAX_DRAFT; a = x->parent[a])
        rev[n++] = x->draft[a];
    for (int32_t j = 0; j < n; j++)
        hist[j] = rev[n - 1 - j];
    return make_row(x, r, hist, n, err);
}

int sd_step_finish(sd_step_pass *p, sd_verify_result *res, sd_error *err) {
    const double t = sd_time_ms();
    const int rc =
        p->parent
            ? sd_verify_tree_keyed(&p->gp->samp, p->draft, p->parent, p->k, sd_step_tree_row, p,
                                   p->n_vocab, p->seed, p->n_ctx, res, p->path, err)
            : sd_verify_keyed(&p->gp->samp, p->draft, p->k, p->k > 0 ? p->q : NULL, sd_step_row, p,
                              p->n_vocab, p->seed, p->n_ctx, p->residual, res, err);
    p->st->t_sample_ms += sd_time_ms() - t;
    if (rc) return rc;
    /* A row the grammar allowed nothing in ends the sequence before its token. */
    const int32_t g_cut = p->g_dead - 1;
    const int g_stop = p->g_dead > 0 && res->n_tokens > g_cut;
    if (g_stop) {
        res->n_tokens = g_cut;
        if (res->n_accepted > g_cut) res->n_accepted = g_cut;
    }
    const int lookup = p->k > 0 && p->lookup;
    sd_step_count_pass(p->st, p->k, lookup);
    if (p->parent) { /* a tree: drafted_at counts the depths drafted, not the nodes */
        int32_t depth[SD_MAX_DRAFT], max_depth = 0;
        for (int32_t i = 0; i < p->k; i++) {
            depth[i] = p->parent[i] < 0 ? 0 : depth[p->parent[i]] + 1;
            if (depth[i] + 1 > max_depth) max_depth = depth[i] + 1;
        }
        for (int32_t i = max_depth; i < p->k; i++)
            p->st->drafted_at[i]--;
    }
    p->n_committed = sd_step_commit(p->gp, p->eos, res->tokens, res->n_tokens, res->n_accepted,
                                    lookup, p->ctx, &p->n_ctx, p->st);
    if (g_stop && p->n_committed == g_cut && p->st->stop == SD_STOP_NONE)
        p->st->stop = SD_STOP_GRAMMAR;
    for (int32_t i = 0; p->gseq && i < p->n_committed; i++) {
        size_t len = 0;
        const char *piece = sd_grammar_vocab_piece(p->gp->grammar_vocab, res->tokens[i], &len);
        const int rc_g = sd_grammar_advance(p->gseq, piece, len, err);
        if (rc_g) /* the rows were masked: a refused token here is a bug */
            return sd_error_prefix(err, rc_g, "grammar: committed token %d", res->tokens[i]);
    }
    if (p->raw && p->lp) {
        const size_t nv = (size_t)p->n_vocab;
        int32_t n_top = p->gp->top_logprobs;
        if (n_top < 0) n_top = 0;
        if (n_top > SD_MAX_TOP_LOGPROBS) n_top = SD_MAX_TOP_LOGPROBS;
        for (int32_t i = 0; i < p->n_committed; i++) {
            /* A row verification never read is still the model's own. */
            const float *row =
                (p->raw_have >> i & 1u) ? p->raw + (size_t)i * nv : p->logits + (size_t)i * nv;
            sd_step_logprob(row, p->n_vocab, res->tokens[i], n_top, &p->lp[i]);
        }
    }
    return SD_OK;
}

void sd_step_logprob(const float *row, int32_t n_vocab, int32_t token, int32_t n_top,
                     sd_token_logprob *out) {
    double m = -INFINITY;
    for (int32_t j = 0; j < n_vocab; j++)
        if ((double)row[j] > m) m = row[j];
    double s = 0.0;
    if (isfinite(m))
        for (int32_t j = 0; j < n_vocab; j++)
            if (!isnan(row[j])) s += exp((double)row[j] - m);
    const double log_s = s > 0.0 ? log(s) : 0.0;
    out->token = token;
    out->logprob = token >= 0 && token < n_vocab ? ((double)row[token] - m) - log_s : -INFINITY;
    /* The n_top largest, kept sorted: a later entry enters only when strictly larger, so
     * ties keep the lower id. */
    int32_t n = 0;
    for (int32_t j = 0; j < n_vocab && n_top > 0; j++) {
        const float l = row[j];
        if (isnan(l) || (n == n_top && !(l > row[out->top_id[n - 1]]))) continue;
        int32_t at = n < n_top ? n++ : n - 1;
        while (at > 0 && l > row[out->top_id[at - 1]]) {
            out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        out->top_id[at] = j;
    }
    out->n_top = n;
    for (int32_t t = 0; t < n; t++)
        out->top_logprob[t] = ((double)row[out->top_id[t]] - m) - log_s;
}

void sd_step_count_pass(sd_gen_stats *st, int32_t k, int lookup) {
    st->n_target_passes++;
    st->k_hist[k]++;
    st->n_drafted += k;
    if (k > 0 && lookup) {
        st->n_passes_lookup++;
        st->n_drafted_lookup += k;
    }
    for (int32_t i = 0; i < k; i++)
        st->drafted_at[i]++;
}

int32_t sd_step_commit(const sd_gen_params *gp, int32_t eos, const int32_t *toks, int32_t n,
                       int32_t n_accepted, int lookup, int32_t *ctx, int32_t *n_ctx,
                       sd_gen_stats *st) {
    int32_t done = 0;
    for (int32_t i = 0; i < n; i++) {
        if (sd_step_is_stop(gp, eos, toks[i])) {
            st->stop = SD_STOP_EOS;
            st->n_stop_tokens = 1;
            break;
        }
        ctx[(*n_ctx)++] = toks[i];
        st->n_generated++;
        done++;
        if (i < n_accepted) {
            st->n_accepted++;
            st->accepted_at[i]++;
            if (lookup) st->n_accepted_lookup++;
        }
        if (st->n_generated >= gp->n_predict) {
            st->stop = SD_STOP_MAX_TOKENS;
            break;
        }
    }
    return done;
}

int sd_step_add_eog(sd_gen_params *g, const sd_vocab *v, sd_error *err) {
    int32_t n_eog = 0;
    const int32_t *eog = sd_vocab_eog_ids(v, &n_eog);
    const int32_t n_given = g->n_stop_ids;
    for (int32_t i = 0; i < n_eog; i++) {
        int have = 0;
        for (int32_t j = 0; j < g->n_stop_ids; j++)
            have |= g->stop_ids[j] == eog[i];
        if (have) continue;
        if (g->n_stop_ids == SD_MAX_STOP_IDS)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "%d end-of-generation tokens and %d stop ids: more than the %d "
                             "stop ids generation holds",
                             (int)n_eog, (int)n_given, SD_MAX_STOP_IDS);
        g->stop_ids[g->n_stop_ids++] = eog[i];
    }
    return SD_OK;
}

/* ---- grammar ---- */

int sd_step_grammar_compile(const sd_gen_params *gp, int32_t n_vocab, sd_grammar **out,
                            sd_error *err) {
    *out = NULL;
    if (!gp->grammar) return SD_OK;
    if (!gp->grammar_vocab || sd_grammar_vocab_size(gp->grammar_vocab) != n_vocab)
        return sd_errorf(err, SD_ERR_ARG,
                         "grammar: the request needs the target vocabulary's token bytes "
                         "(sd_gen_params.grammar_vocab of %d tokens)",
                         (int)n_vocab);
    if (gp->tree_width > 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "grammar: constrained decoding with draft trees is not supported (use "
                         "a chain: no --draft-tree)");
    return sd_grammar_parse(gp->grammar, strlen(gp->grammar), gp->grammar_root, out, err);
}

int32_t sd_step_grammar_ends(const sd_gen_params *gp, int32_t eos, int32_t *ends) {
    int32_t n = 0;
    if (eos >= 0) ends[n++] = eos;
    for (int32_t i = 0; i < gp->n_stop_ids && i < SD_MAX_STOP_IDS; i++)
        ends[n++] = gp->stop_ids[i];
    return n;
}

int sd_step_grammar_chain(const sd_grammar_state *seq, const sd_gen_params *gp, int32_t eos,
                          const int32_t *draft, int32_t *k, sd_grammar_state **chain,
                          sd_error *err) {
    int rc = sd_grammar_state_copy(chain[0], seq, err);
    if (rc) return rc;
    for (int32_t i = 0; i < *k; i++) {
        size_t len = 0;
        const char *piece = sd_grammar_vocab_piece(gp->grammar_vocab, draft[i], &len);
        if (!piece || len == 0 || sd_step_is_stop(gp, eos, draft[i])) {
            *k = i;
            break;
        }
        if ((rc = sd_grammar_state_copy(chain[i + 1], chain[i], err))) return rc;
        sd_error refused = {0};
        rc = sd_grammar_advance(chain[i + 1], piece, len, &refused);
        if (rc == SD_ERR_ARG) {
            *k = i;
            break;
        }
        if (rc) return sd_errorf(err, (sd_status)rc, "%s", refused.msg);
    }
    return SD_OK;
}

int64_t sd_step_grammar_mask_row(sd_grammar_state *state, const sd_gen_params *gp, int32_t eos,
                                 uint64_t *bits, float *l, int32_t n, const int32_t *ids) {
    int32_t ends[SD_MAX_STOP_IDS + 1];
    const int32_t n_end = sd_step_grammar_ends(gp, eos, ends);
    const sd_grammar_vocab *gv = gp->grammar_vocab;
    if (sd_grammar_mask(state, gv, ends, n_end, bits) < 0) return -1;
    const int32_t nv = sd_grammar_vocab_size(gv);
    int64_t left = 0;
    for (int32_t j = 0; j < n; j++) {
        const int32_t id = ids ? ids[j] : j;
        if (id < 0 || id >= nv || !(bits[id >> 6] >> (id & 63) & 1u))
            l[j] = -INFINITY;
        else if (l[j] > -INFINITY)
            left++;
    }
    return left;
}

double sd_step_clock_ms(sd_pass_clock c) {
    if (c != SD_CLOCK_THREAD_CPU) return sd_time_ms();
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return sd_time_ms();
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
