/* verify/tree.c: token-tree verification for greedy and Gumbel sampling (see sd_verify.h,
 * "token trees"). */
#include "verify/sd_verify.h"

#include <string.h>

/* The target's choice at a row: greedy the argmax (lowest id on ties), Gumbel the keyed
 * Gumbel-max token at pos; -1 for a NaN logit (greedy) or a row without a positive
 * entry (Gumbel). */
static int32_t choice(const sd_sampling_params *sp, const float *row, int32_t n_vocab,
                      uint64_t seed, int64_t pos) {
    if (sp->temp > 0.0f) return sd_gumbel_sample(row, n_vocab, NULL, seed, pos);
    return sd_argmax_checked(row, n_vocab);
}

int sd_verify_tree_keyed(const sd_sampling_params *sp, const int32_t *tokens, const int32_t *parent,
                         int32_t n, sd_verify_row_fn rows, void *user, int32_t n_vocab,
                         uint64_t seed, int64_t pos0, sd_verify_result *res, int32_t *path,
                         sd_error *err) {
    static const char fn[] = "sd_verify_tree_keyed";
    if (!sp || !rows || !res || !path || (n > 0 && (!tokens || !parent)))
        return sd_errorf(err, SD_ERR_ARG, "%s: NULL argument", fn);
    if (n < 0 || n > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "%s: %d nodes, expected 0 .. %d", fn, n, SD_MAX_DRAFT);
    if (n_vocab < 1) return sd_errorf(err, SD_ERR_ARG, "%s: n_vocab = %d", fn, n_vocab);
    if (sp->temp > 0.0f && sp->spec != SD_SPEC_GUMBEL)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: token trees are verified under greedy or Gumbel sampling only "
                         "(rejection sampling takes a chain)",
                         fn);
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return sd_errorf(err, SD_ERR_ARG, "%s: node %d has token %d, expected [0, %d)", fn, i,
                             tokens[i], n_vocab);
        if (parent[i] < -1 || parent[i] >= i)
            return sd_errorf(err, SD_ERR_ARG, "%s: node %d has parent %d, expected -1 .. %d", fn, i,
                             parent[i], i - 1);
    }
    sd_verify_result r;
    memset(&r, 0, sizeof r);
    int32_t p[SD_MAX_DRAFT];
    int32_t cur = -1; /* the root */
    for (int32_t depth = 0;; depth++) {
        const float *row = rows(user, cur + 1, err);
        if (!row) return err && err->status != SD_OK ? err->status : SD_ERR_ARG;
        const int32_t y = choice(sp, row, n_vocab, seed, pos0 + depth);
        if (y < 0)
            return sd_errorf(err, SD_ERR_ARG, "%s: target row %d has %s", fn, cur + 1,
                             sp->temp > 0.0f ? "no positive entry" : "a NaN logit");
        r.tokens[depth] = y;
        int32_t next = -1;
        for (int32_t c = cur + 1; c < n && next < 0; c++)
            if (parent[c] == cur && tokens[c] == y) next = c;
        if (next < 0) break; /* y is the correction, or at a leaf the bonus */
        p[r.n_accepted++] = next;
        cur = next;
    }
    r.n_tokens = r.n_accepted + 1;
    *res = r;
    memcpy(path, p, (size_t)r.n_accepted * sizeof *p);
    return SD_OK;
}
