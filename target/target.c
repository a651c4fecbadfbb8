/* The target scorer: one batched verification pass per speculative step. */
#include "target/sd_target.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sd_scorer {
    const sd_model *model;
    sd_session *sess;
};

const sd_session *sd_scorer_session(const sd_scorer *s) {
    return s->sess;
}

int sd_scorer_shift(sd_scorer *s, int32_t n_keep, int32_t n_discard, sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "context shift: scorer is NULL");
    return sd_session_seq_shift(s->sess, 0, n_keep, n_discard, err);
}

int sd_scorer_init(const sd_model *m, const sd_session_params *p, sd_scorer **out, sd_error *err) {
    *out = NULL;
    if (p->n_batch < SD_MAX_DRAFT + 1)
        return sd_errorf(err, SD_ERR_ARG, "scorer: n_batch %d is smaller than %d (max draft + 1)",
                         p->n_batch, SD_MAX_DRAFT + 1);
    sd_scorer *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "scorer: out of memory");
    s->model = m;
    int rc = sd_session_init(m, p, &s->sess, err);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return SD_OK;
}

void sd_scorer_free(sd_scorer *s) {
    if (!s) return;
    sd_session_free(s->sess);
    free(s);
}

const sd_model *sd_scorer_model(const sd_scorer *s) {
    return s->model;
}
int32_t sd_scorer_n_ctx(const sd_scorer *s) {
    return sd_session_n_ctx(s->sess);
}

int sd_scorer_sync(sd_scorer *s, const int32_t *ctx, int32_t n_ctx, sd_error *err) {
    if (n_ctx < 1) return sd_errorf(err, SD_ERR_ARG, "scorer: empty context");
    return sd_session_seq_sync(s->sess, 0, ctx, n_ctx - 1, err);
}

/* Index of the first non-finite value (NaN, +-inf) of x[0 .. n), or -1. An OR over
 * "exponent bits all ones" first (branch-free, vectorizes: ~n/8 cycles), the scan for
 * the index only when there is one. */
static int64_t first_non_finite(const float *x, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7F800000u) == 0x7F800000u;
    }
    if (!bad) return -1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int64_t)i;
    return -1;
}

int sd_scorer_score(sd_scorer *s, const int32_t *ctx, int32_t n_ctx, const int32_t *draft,
                    int32_t k, float *logits, sd_error *err) {
    if (k < 0 || k > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "scorer: draft length %d outside [0, %d]", k,
                         SD_MAX_DRAFT);
    if ((int64_t)n_ctx + k > sd_session_n_ctx(s->sess))
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "target context full: %d committed + %d drafted tokens exceed %d", n_ctx,
                         k, sd_session_n_ctx(s->sess));
    int rc = sd_scorer_sync(s, ctx, n_ctx, err);
    if (rc) return rc;
    int32_t batch[SD_MAX_DRAFT + 1];
    batch[0] = ctx[n_ctx - 1];
    for (int32_t i = 0; i < k; i++)
        batch[i + 1] = draft[i];
    rc = sd_session_eval(s->sess, batch, k + 1, logits, k + 1, err);
    if (rc && err) {
        sd_error_prefix(err, rc, "%s: target", sd_model_path(s->model));
    }
    if (rc) return rc;
    /* Every row the verifier reads: a NaN would pass as token 0 (argmax) or as noise. */
    return sd_target_check_rows(s->model, logits, k + 1, err);
}

int sd_target_check_rows(const sd_model *m, const float *rows, int32_t n_rows, sd_error *err) {
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    const int64_t bad = first_non_finite(rows, (size_t)n_rows * (size_t)n_vocab);
    if (bad >= 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: target: logit %lld of row %lld is %g: non-finite logits (the "
                         "model's weights hold NaN or inf)",
                         sd_model_path(m), (long long)(bad % n_vocab), (long long)(bad / n_vocab),
                         (double)rows[bad]);
    return SD_OK;
}

void sd_scorer_commit(sd_scorer *s, const int32_t *ctx, int32_t n_ctx) {
    int32_t kept = sd_session_seq_keep_prefix(s->sess, 0, ctx, n_ctx - 1);
    SD_CHECK(kept == n_ctx - 1 && sd_session_seq_n_past(s->sess, 0) == n_ctx - 1,
             "target KV cache must hold exactly the committed tokens but the last");
    (void)kept;
}

int sd_scorer_score_tree(sd_scorer *s, const int32_t *ctx, int32_t n_ctx, const int32_t *tokens,
                         const int32_t *parent, int32_t n, float *logits, sd_error *err) {
    if (n < 0 || n > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "scorer: tree of %d nodes outside [0, %d]", n,
                         SD_MAX_DRAFT);
    if ((int64_t)n_ctx + n > sd_session_n_ctx(s->sess))
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "target context full: %d committed + %d tree nodes exceed %d", n_ctx, n,
                         sd_session_n_ctx(s->sess));
    int rc = sd_scorer_sync(s, ctx, n_ctx, err);
    if (rc) return rc;
    int32_t tok[SD_MAX_DRAFT + 1], par[SD_MAX_DRAFT + 1];
    tok[0] = ctx[n_ctx - 1];
    par[0] = -1;
    for (int32_t i = 0; i < n; i++) {
        tok[i + 1] = tokens[i];
        par[i + 1] = parent[i] < 0 ? 0 : parent[i] + 1;
        if (parent[i] >= i)
            return sd_errorf(err, SD_ERR_ARG, "scorer: tree node %d has parent %d", i, parent[i]);
    }
    rc = sd_session_seq_decode_tree(s->sess, 0, tok, par, n + 1, logits, err);
    if (rc && err) sd_error_prefix(err, rc, "%s: target", sd_model_path(s->model));
    if (rc) return rc;
    return sd_target_check_rows(s->model, logits, n + 1, err);
}

void sd_scorer_commit_tree(sd_scorer *s, int32_t n_ctx_scored, const int32_t *path, int32_t n_path,
                           const int32_t *ctx, int32_t n_ctx) {
    int32_t keep[SD_MAX_DRAFT + 1];
    keep[0] = 0; /* the root */
    for (int32_t i = 0; i < n_path && i < SD_MAX_DRAFT; i++)
        keep[i + 1] = path[i] + 1;
    const int rc = sd_session_seq_tree_keep(s->sess, 0, n_ctx_scored - 1, keep, n_path + 1, NULL);
    SD_CHECK(rc == SD_OK, "tree keep of the verifier's path");
    (void)rc;
    sd_scorer_commit(s, ctx, n_ctx);
}
