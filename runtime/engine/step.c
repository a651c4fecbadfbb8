/* runtime/engine/step.c: the parts of a speculative pass shared by sd_generate and the
 * batcher (see step.h). */
#include "runtime/engine/step.h"

#include <math.h>
#include <string.h>

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
