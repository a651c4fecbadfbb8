/*
 * tests/test_ngram_chain.c: the two-proposer chain (draft/chain.c, ngram+llm): the n-gram is
 * asked first, the second proposer only when it has no match; commits reach both.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "verify/sd_verify.h"

TestSuite(ngram, .timeout = 600);

/* The chain asks the n-gram first and the second proposer only when it has no match. */
typedef struct fixed_proposer {
    sd_proposer base;
    int calls, commits;
} fixed_proposer;

static int fixed_propose(sd_proposer *b, const int32_t *ctx, int32_t n_ctx, int32_t k,
                         sd_proposal *out, sd_error *err) {
    (void)ctx;
    (void)n_ctx;
    (void)err;
    fixed_proposer *f = (fixed_proposer *)b;
    f->calls++;
    for (int32_t i = 0; i < k; i++)
        out->tokens[i] = 77;
    out->n = k;
    out->n_vocab = 1000;
    out->one_hot = 1;
    return SD_OK;
}
static void fixed_commit(sd_proposer *b, const int32_t *ctx, int32_t n_ctx) {
    (void)ctx;
    (void)n_ctx;
    ((fixed_proposer *)b)->commits++;
}
static void fixed_free(sd_proposer *b) {
    (void)b;
}
static const sd_proposer_ops fixed_ops = {
    .name = "fixed", .propose = fixed_propose, .commit = fixed_commit, .free = fixed_free};

Test(ngram, chain_falls_back_when_no_match) {
    sd_proposer *ng = tu_make_ngram(1, 4, 64, 1000);
    fixed_proposer f = {{&fixed_ops}, 0, 0};
    sd_proposer *chain = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_chain_init(ng, &f.base, "ngram+fixed", &chain, &err), 0, "%s",
                 err.msg);
    cr_assert_str_eq(sd_proposer_name(chain), "ngram+fixed");
    const int32_t t[] = {1, 2, 3, 1, 2};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(chain, t, 5, 2, &prop, &err), 0);
    cr_assert_eq(prop.tokens[0], 3); /* the n-gram's */
    cr_assert_eq(f.calls, 0);
    cr_assert_eq(sd_proposer_propose(chain, t, 3, 2, &prop, &err), 0); /* 1 2 3: no match */
    cr_assert_eq(prop.tokens[0], 77);
    cr_assert_eq(f.calls, 1);
    sd_proposer_commit(chain, t, 4);
    cr_assert_eq(f.commits, 1);
    sd_proposer_free(chain);
    cr_assert_eq(sd_proposer_chain_init(ng, NULL, "x", &chain, &err), SD_ERR_ARG);
    sd_proposer_free(chain); /* NULL after the failed init */
    sd_proposer_free(ng);
}
