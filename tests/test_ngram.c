/*
 * tests/test_ngram.c: the n-gram / prompt-lookup proposer's index (draft/ngram.c) against
 * an independent brute-force reference (a backward scan of the context, O(N n) per lookup):
 * matches found, the longest n-gram preferred, the most recent occurrence preferred, the
 * periodic continuation, nothing read past the context (sentinels after it never appear);
 * rollback: random appends, rollbacks to random prefixes and context switches, each
 * followed by a proposal that must equal the reference's (this also drives the index's
 * table rebuild); parameter checks. The other n-gram units have their own files:
 * test_ngram_chain.c, test_verify_onehot.c, test_ngram_greedy.c, test_ngram_cache.c,
 * test_ngram_cli.c, test_bench_draft_types.c, test_llm_catch_up.c.
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

/* ------------------------------------------------------------------------------------ */
/* Reference lookup                                                                      */

/*
 * Brute force: for n = n_max down to n_min (n <= N - 1 so an earlier occurrence can
 * exist), scan j = N - 1 down to n for t[j - n .. j) == t[N - n .. N); the first hit is
 * the most recent occurrence of the longest n-gram. The proposal is the sequence
 * e = t extended periodically (e[m] = e[m - (N - j)] for m >= N), e[j .. j + k).
 * Returns the match length (0: none) and writes k tokens.
 */
static int32_t ref_lookup(const int32_t *t, int32_t N, int32_t n_min, int32_t n_max, int32_t k,
                          int32_t *out) {
    for (int32_t n = n_max; n >= n_min; n--) {
        if (n > N - 1) continue;
        for (int32_t j = N - 1; j >= n; j--) {
            int eq = 1;
            for (int32_t i = 0; i < n && eq; i++)
                eq = t[j - n + i] == t[N - n + i];
            if (!eq) continue;
            int32_t *e = malloc((size_t)(N + k) * sizeof *e);
            cr_assert(e);
            memcpy(e, t, (size_t)N * sizeof *e);
            for (int32_t m = N; m < N + k; m++)
                e[m] = e[m - (N - j)];
            memcpy(out, e + j, (size_t)k * sizeof *out);
            free(e);
            return n;
        }
    }
    return 0;
}

/* Propose with k and compare with the reference (tokens and match length). */
static void expect_ref(sd_proposer *p, const int32_t *t, int32_t n, int32_t n_min, int32_t n_max,
                       int32_t k, const char *what) {
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose(p, t, n, k, &prop, &err), 0, "%s", err.msg);
    int32_t want[SD_MAX_DRAFT];
    const int32_t m = ref_lookup(t, n, n_min, n_max, k, want);
    cr_assert_eq(sd_proposer_ngram_last_match(p), m, "%s: match length %d, reference %d", what,
                 sd_proposer_ngram_last_match(p), m);
    cr_assert_eq(prop.n, m ? k : 0, "%s: %d tokens proposed, reference %d", what, prop.n,
                 m ? k : 0);
    cr_assert(prop.one_hot && prop.probs == NULL, "%s: n-gram proposals are one-hot", what);
    for (int32_t i = 0; i < prop.n; i++)
        cr_assert_eq(prop.tokens[i], want[i], "%s: token %d is %d, reference %d", what, i,
                     prop.tokens[i], want[i]);
}

/* ------------------------------------------------------------------------------------ */
/* Proposer                                                                              */

Test(ngram, match_found_and_followed) {
    sd_proposer *p = tu_make_ngram(1, 4, 64, 1000);
    /* ... 5 6 7 [8 9] ... 5 6 7 -> 8 9 5 6 */
    const int32_t t[] = {1, 5, 6, 7, 8, 9, 2, 3, 5, 6, 7};
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose(p, t, 11, 4, &prop, &err), 0, "%s", err.msg);
    cr_assert_eq(prop.n, 4);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 3);
    const int32_t want[] = {8, 9, 2, 3};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(prop.tokens[i], want[i], "token %d: %d, want %d", i, prop.tokens[i], want[i]);
    expect_ref(p, t, 11, 1, 4, 4, "match");
    /* No repeated token at all: no proposal. */
    const int32_t u[] = {1, 2, 3, 4, 5};
    cr_assert_eq(sd_proposer_propose(p, u, 5, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 0);
    sd_proposer_free(p);
}

Test(ngram, longest_match_preferred) {
    /* Last 1-gram "20" occurs most recently before 31; the last 2-gram "10 20" only
     * before 30: n_max >= 2 proposes 30, n_max = 1 proposes 31. */
    const int32_t t[] = {10, 20, 30, 11, 20, 31, 12, 10, 20};
    sd_proposal prop;
    sd_error err = {0};
    sd_proposer *p = tu_make_ngram(1, 4, 64, 1000);
    cr_assert_eq(sd_proposer_propose(p, t, 9, 1, &prop, &err), 0);
    cr_assert_eq(prop.n, 1);
    cr_assert_eq(prop.tokens[0], 30);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 2);
    sd_proposer_free(p);
    p = tu_make_ngram(1, 1, 64, 1000);
    cr_assert_eq(sd_proposer_propose(p, t, 9, 1, &prop, &err), 0);
    cr_assert_eq(prop.tokens[0], 31);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 1);
    sd_proposer_free(p);
    /* n_min = 3: the 2-gram is too short, no proposal. */
    p = tu_make_ngram(3, 4, 64, 1000);
    cr_assert_eq(sd_proposer_propose(p, t, 9, 1, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    sd_proposer_free(p);
}

Test(ngram, most_recent_occurrence_preferred) {
    const int32_t t[] = {10, 20, 30, 10, 20, 31, 10, 20, 32, 4, 10, 20};
    sd_proposal prop;
    sd_error err = {0};
    sd_proposer *p = tu_make_ngram(2, 2, 64, 1000);
    cr_assert_eq(sd_proposer_propose(p, t, 12, 2, &prop, &err), 0);
    cr_assert_eq(prop.n, 2);
    cr_assert_eq(prop.tokens[0], 32);
    cr_assert_eq(prop.tokens[1], 4);
    /* Growing the context one token at a time keeps the newest occurrence. */
    for (int32_t n = 3; n <= 12; n++)
        expect_ref(p, t, n, 2, 2, 3, "growing");
    sd_proposer_free(p);
}

Test(ngram, no_proposal_past_the_context) {
    /* The buffer continues past n_ctx with sentinels that must never be proposed. */
    int32_t buf[32];
    for (int i = 0; i < 32; i++)
        buf[i] = 999;
    const int32_t t[] = {1, 2, 3, 1, 2};
    memcpy(buf, t, sizeof t);
    sd_proposer *p = tu_make_ngram(1, 4, 64, 1000);
    sd_proposal prop;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_propose(p, buf, 5, 6, &prop, &err), 0);
    /* "1 2" -> 3 1 2, then the period 3 repeats: 3 1 2 3 1 2. */
    const int32_t want[] = {3, 1, 2, 3, 1, 2};
    cr_assert_eq(prop.n, 6);
    for (int i = 0; i < 6; i++) {
        cr_assert_neq(prop.tokens[i], 999, "token %d read past the context", i);
        cr_assert_eq(prop.tokens[i], want[i]);
    }
    /* A run of one token: the continuation repeats it. */
    const int32_t r[] = {4, 7, 7, 7};
    memcpy(buf, r, sizeof r);
    cr_assert_eq(sd_proposer_propose(p, buf, 4, 5, &prop, &err), 0);
    cr_assert_eq(prop.n, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(prop.tokens[i], 7);
    /* One token of context: nothing earlier to match. */
    cr_assert_eq(sd_proposer_propose(p, buf, 1, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    /* A context beyond the proposer's capacity: no proposal, no read beyond it. */
    sd_proposer *small = tu_make_ngram(1, 4, 8, 1000);
    int32_t big[16];
    for (int i = 0; i < 16; i++)
        big[i] = i % 3;
    cr_assert_eq(sd_proposer_propose(small, big, 16, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 0);
    cr_assert_eq(sd_proposer_propose(small, big, 8, 4, &prop, &err), 0);
    cr_assert_eq(prop.n, 4);
    sd_proposer_free(small);
    sd_proposer_free(p);
}

/* A tiny xorshift for the random sequences (the test's own, not the library's RNG). */
static uint32_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 11);
}

/* Random appends, rollbacks (commit with a shorter or diverging context) and context
 * switches; after each, the proposal equals the reference's. A small capacity and a
 * large alphabet make dead keys pile up, so the table is rebuilt many times. */
static void rollback_run(int32_t n_min, int32_t n_max, int32_t alphabet, int32_t cap, uint64_t seed,
                         int steps) {
    sd_proposer *p = tu_make_ngram(n_min, n_max, cap, 1000);
    int32_t *t = malloc((size_t)cap * sizeof *t);
    cr_assert(t);
    int32_t n = 1;
    t[0] = 1;
    uint64_t s = seed;
    for (int step = 0; step < steps; step++) {
        const uint32_t op = rnd(&s) % 10;
        if (op < 6) { /* append 1..6 tokens (a verification step) */
            const int32_t m = 1 + (int32_t)(rnd(&s) % 6);
            for (int32_t i = 0; i < m && n < cap; i++)
                t[n++] = (int32_t)(rnd(&s) % (uint32_t)alphabet);
        } else if (op < 9) { /* roll back to a random prefix, then diverge */
            n = 1 + (int32_t)(rnd(&s) % (uint32_t)n);
            if (n < cap && rnd(&s) % 2) t[n++] = alphabet + (int32_t)(rnd(&s) % 5);
        } else { /* a new context sharing only the first token */
            n = 1 + (int32_t)(rnd(&s) % (uint32_t)(cap / 2));
            for (int32_t i = 1; i < n; i++)
                t[i] = (int32_t)(rnd(&s) % (uint32_t)alphabet);
        }
        if (rnd(&s) % 2) sd_proposer_commit(p, t, n);
        char what[64];
        snprintf(what, sizeof what, "seed %llu step %d (n = %d)", (unsigned long long)seed, step,
                 n);
        expect_ref(p, t, n, n_min, n_max, 1 + (int32_t)(rnd(&s) % SD_MAX_DRAFT), what);
    }
    free(t);
    sd_proposer_free(p);
}

Test(ngram, rollback_matches_a_fresh_index) {
    rollback_run(1, 4, 4, 256, 11, 3000);  /* many matches, long ones */
    rollback_run(2, 3, 12, 128, 12, 3000); /* fewer */
    rollback_run(1, 16, 3, 96, 13, 2000);  /* the largest n */
    rollback_run(1, 2, 400, 48, 14, 4000); /* mostly new keys: rebuilds */
}

Test(ngram, parameters_checked) {
    const struct {
        int32_t n_min, n_max, n_ctx;
        const char *word;
    } bad[] = {{0, 4, 64, "n_min"}, {1, 0, 64, "n_max"},   {1, 17, 64, "n_max"},
               {5, 4, 64, "n_min"}, {17, 17, 64, "n_max"}, {1, 4, 0, "n_ctx"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sd_ngram_params p = {bad[i].n_min, bad[i].n_max, bad[i].n_ctx};
        sd_error err = {0};
        sd_proposer *prop = (sd_proposer *)&err; /* must be reset to NULL */
        cr_assert_eq(sd_proposer_ngram_init(&p, 100, &prop, &err), SD_ERR_ARG,
                     "n_min %d n_max %d n_ctx %d accepted", bad[i].n_min, bad[i].n_max,
                     bad[i].n_ctx);
        cr_assert_null(prop);
        cr_assert(strstr(err.msg, bad[i].word), "'%s' does not name %s", err.msg, bad[i].word);
    }
}
