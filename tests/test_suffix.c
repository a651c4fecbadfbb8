/*
 * tests/test_suffix.c: the suffix index (draft/suffix.c) against brute force on random
 * token streams over small alphabets (where repeats, overlaps and clones are frequent):
 * after every appended token the longest match, the occurrence count and most recent end
 * of random strings, and the whole proposal (most frequent follower chain, ties to the
 * most recent, the length limit and the probability cut-off) equal what a direct scan of
 * the text gives. Then rollback (truncate = a fresh build of the prefix), the capacity,
 * the proposer's face (sync, rebuild on a diverging context, one-hot proposals) and its
 * parameter checks.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"

TestSuite(suffix, .timeout = 600);

static uint64_t rng_next(uint64_t *s) {
    *s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return *s >> 33;
}

/* Longest common suffix of t[0 .. a) and t[0 .. b). */
static int32_t common_suffix(const int32_t *t, int32_t a, int32_t b) {
    int32_t l = 0;
    while (l < a && l < b && t[a - 1 - l] == t[b - 1 - l])
        l++;
    return l;
}

static int32_t brute_match(const int32_t *t, int32_t n) {
    int32_t best = 0;
    for (int32_t e = 1; e < n; e++) {
        const int32_t l = common_suffix(t, e, n);
        if (l > best) best = l;
    }
    return best;
}

/* Occurrences of q[0 .. m) in t[0 .. n), *last the largest end. */
static int64_t brute_count(const int32_t *t, int32_t n, const int32_t *q, int32_t m,
                           int32_t *last) {
    int64_t c = 0;
    *last = 0;
    for (int32_t e = m; e <= n; e++)
        if (memcmp(t + e - m, q, (size_t)m * sizeof *q) == 0) {
            c++;
            *last = e;
        }
    return c;
}

/* The proposal by direct scans: the chain grows from the match s = t[n - m .. n); at each
 * step every earlier occurrence of the chain's string that has a follower votes for it. */
static int32_t brute_propose(const int32_t *t, int32_t n, const sd_suffix_params *p, int32_t k,
                             int32_t alpha, int32_t *out, int32_t *match) {
    const int32_t m = brute_match(t, n);
    *match = m;
    if (m < p->n_min || m < 1) return 0;
    const double lim = (double)p->max_spec_factor * m;
    const int32_t n_max = lim < (double)k ? (int32_t)lim : k;
    int32_t cur[512 + SD_MAX_DRAFT];
    int32_t len = m;
    memcpy(cur, t + n - m, (size_t)m * sizeof *cur);
    double pr = 1.0;
    int32_t got = 0;
    int64_t cnt[16];
    int32_t lst[16];
    while (got < n_max) {
        memset(cnt, 0, sizeof cnt);
        memset(lst, 0, sizeof lst);
        for (int32_t e = len; e < n; e++)
            if (memcmp(t + e - len, cur, (size_t)len * sizeof *cur) == 0) {
                cnt[t[e]]++;
                lst[t[e]] = e + 1;
            }
        int64_t total = 0;
        int32_t best = -1;
        for (int32_t c = 0; c < alpha; c++) {
            total += cnt[c];
            if (cnt[c] > 0 &&
                (best < 0 || cnt[c] > cnt[best] || (cnt[c] == cnt[best] && lst[c] > lst[best])))
                best = c;
        }
        if (best < 0) break;
        const double next = pr * (double)cnt[best] / (double)total;
        if (next < (double)p->min_token_prob) break;
        pr = next;
        out[got++] = best;
        cur[len++] = best;
    }
    return got;
}

/* A stream of n tokens over alpha ids: random, or (mode 1) random with copied spans, as
 * an edit that repeats its prompt. */
static void make_stream(uint64_t seed, int32_t alpha, int mode, int32_t *t, int32_t n) {
    uint64_t s = seed;
    for (int32_t i = 0; i < n; i++) {
        if (mode == 1 && i > 8 && rng_next(&s) % 6 == 0) {
            const int32_t from = (int32_t)(rng_next(&s) % (uint64_t)(i - 4));
            const int32_t len = 2 + (int32_t)(rng_next(&s) % 12);
            for (int32_t j = 0; j < len && i < n; j++, i++)
                t[i] = t[from + j];
            i--;
            continue;
        }
        t[i] = (int32_t)(rng_next(&s) % (uint64_t)alpha);
    }
}

Test(suffix, matches_and_counts_equal_brute_force) {
    enum { N = 360 };
    int32_t t[N];
    int64_t n_match = 0, n_count = 0;
    sd_error err = {0};
    for (int32_t alpha = 1; alpha <= 8; alpha *= 2)
        for (int mode = 0; mode <= 1; mode++)
            for (uint64_t seed = 1; seed <= 4; seed++) {
                make_stream(seed * 977 + (uint64_t)alpha, alpha, mode, t, N);
                sd_suffix_index *ix = NULL;
                cr_assert_eq(sd_suffix_index_init(N, &ix, &err), SD_OK, "%s", err.msg);
                uint64_t s = seed;
                for (int32_t n = 1; n <= N; n++) {
                    cr_assert_eq(sd_suffix_index_append(ix, t[n - 1]), 0);
                    cr_assert_eq(sd_suffix_index_n_tokens(ix), n);
                    const int32_t m = sd_suffix_index_match(ix), want = brute_match(t, n);
                    cr_assert_eq(m, want, "alpha %d mode %d seed %llu n %d: match %d, brute %d",
                                 alpha, mode, (unsigned long long)seed, n, m, want);
                    n_match++;
                    /* Three strings: a substring of the text, its suffix of the match
                     * length + 1, a random string (often absent). */
                    int32_t q[12];
                    for (int w = 0; w < 3; w++) {
                        int32_t len = 1 + (int32_t)(rng_next(&s) % 8);
                        if (w == 0 && len <= n) {
                            const int32_t at = (int32_t)(rng_next(&s) % (uint64_t)(n - len + 1));
                            memcpy(q, t + at, (size_t)len * sizeof *q);
                        } else if (w == 1 && m + 1 <= n && m + 1 <= 12) {
                            len = m + 1;
                            memcpy(q, t + n - len, (size_t)len * sizeof *q);
                        } else {
                            if (len > 4) len = 4;
                            for (int32_t i = 0; i < len; i++)
                                q[i] = (int32_t)(rng_next(&s) % (uint64_t)alpha);
                        }
                        int32_t last = -1, blast = -1;
                        const int64_t c = sd_suffix_index_count(ix, q, len, &last);
                        const int64_t bc = brute_count(t, n, q, len, &blast);
                        cr_assert_eq(c, bc,
                                     "alpha %d seed %llu n %d: count of a %d-string %lld, "
                                     "brute %lld",
                                     alpha, (unsigned long long)seed, n, len, (long long)c,
                                     (long long)bc);
                        cr_assert_eq(last, blast, "n %d: most recent end %d, brute %d", n, last,
                                     blast);
                        n_count++;
                    }
                }
                sd_suffix_index_free(ix);
            }
    fprintf(stderr, "  %lld match and %lld count queries checked\n", (long long)n_match,
            (long long)n_count);
    cr_assert_gt(n_match, 1000);
}

Test(suffix, proposals_equal_brute_force) {
    enum { N = 240 };
    int32_t t[N];
    sd_error err = {0};
    const sd_suffix_params prms[4] = {
        {1.0f, 0.1f, 2, N, SD_SUFFIX_RULE_FACTOR, 0.0f, 0},
        {2.0f, 0.0f, 1, N, SD_SUFFIX_RULE_FACTOR, 0.0f, 0},
        {0.5f, 0.3f, 1, N, SD_SUFFIX_RULE_FACTOR, 0.0f, 0},
        {4.0f, 0.6f, 3, N, SD_SUFFIX_RULE_FACTOR, 0.0f, 0},
    };
    int64_t n_q = 0, n_tokens = 0, n_cut = 0;
    for (int32_t alpha = 2; alpha <= 8; alpha *= 2)
        for (int mode = 0; mode <= 1; mode++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                make_stream(seed * 31 + (uint64_t)alpha * 7 + (uint64_t)mode, alpha, mode, t, N);
                sd_suffix_index *ix = NULL;
                cr_assert_eq(sd_suffix_index_init(N, &ix, &err), SD_OK, "%s", err.msg);
                for (int32_t n = 1; n <= N; n++) {
                    cr_assert_eq(sd_suffix_index_append(ix, t[n - 1]), 0);
                    for (int pi = 0; pi < 4; pi++) {
                        const int32_t k = 1 + (n + pi) % 8;
                        int32_t got[SD_MAX_DRAFT], want[SD_MAX_DRAFT], m = -1, bm = -1;
                        float prob = -1.0f;
                        const int32_t ng =
                            sd_suffix_index_propose(ix, &prms[pi], k, got, &m, &prob);
                        const int32_t nw = brute_propose(t, n, &prms[pi], k, alpha, want, &bm);
                        cr_assert_eq(m, bm);
                        cr_assert_eq(ng, nw,
                                     "alpha %d mode %d seed %llu n %d params %d k %d: %d tokens, "
                                     "brute %d",
                                     alpha, mode, (unsigned long long)seed, n, pi, k, ng, nw);
                        for (int32_t i = 0; i < ng; i++)
                            cr_assert_eq(got[i], want[i],
                                         "n %d params %d: token %d is %d, brute %d", n, pi, i,
                                         got[i], want[i]);
                        cr_assert(prob >= prms[pi].min_token_prob && prob <= 1.0f);
                        n_q++;
                        n_tokens += ng;
                        n_cut += ng > 0 && ng < k;
                    }
                }
                sd_suffix_index_free(ix);
            }
    fprintf(stderr, "  %lld proposals (%lld tokens, %lld cut short) checked\n", (long long)n_q,
            (long long)n_tokens, (long long)n_cut);
    cr_assert_gt(n_tokens, 1000, "few tokens proposed: the test proves little");
    cr_assert_gt(n_cut, 100, "the limits never cut a proposal short");
}

Test(suffix, truncate_equals_a_fresh_build) {
    enum { N = 200 };
    int32_t t[N];
    make_stream(5, 3, 1, t, N);
    sd_error err = {0};
    sd_suffix_index *a = NULL, *b = NULL;
    cr_assert_eq(sd_suffix_index_init(N, &a, &err), SD_OK);
    cr_assert_eq(sd_suffix_index_init(N, &b, &err), SD_OK);
    const sd_suffix_params p = {2.0f, 0.0f, 1, N, SD_SUFFIX_RULE_FACTOR, 0.0f, 0};
    for (int32_t keep = 0; keep <= N; keep += 17) {
        sd_suffix_index_clear(a);
        for (int32_t i = 0; i < N; i++)
            cr_assert_eq(sd_suffix_index_append(a, t[i]), 0);
        sd_suffix_index_truncate(a, keep);
        sd_suffix_index_clear(b);
        for (int32_t i = 0; i < keep; i++)
            sd_suffix_index_append(b, t[i]);
        cr_assert_eq(sd_suffix_index_n_tokens(a), keep);
        cr_assert_eq(sd_suffix_index_match(a), sd_suffix_index_match(b));
        int32_t ga[SD_MAX_DRAFT], gb[SD_MAX_DRAFT];
        const int32_t na = sd_suffix_index_propose(a, &p, 8, ga, NULL, NULL);
        const int32_t nb = sd_suffix_index_propose(b, &p, 8, gb, NULL, NULL);
        cr_assert_eq(na, nb);
        cr_assert(na == 0 || memcmp(ga, gb, (size_t)na * sizeof *ga) == 0);
        if (keep >= 3) {
            int32_t la, lb;
            cr_assert_eq(sd_suffix_index_count(a, t + keep - 3, 3, &la),
                         sd_suffix_index_count(b, t + keep - 3, 3, &lb));
            cr_assert_eq(la, lb);
        }
    }
    sd_suffix_index_free(a);
    sd_suffix_index_free(b);
}

Test(suffix, capacity_and_bad_ids) {
    sd_error err = {0};
    sd_suffix_index *ix = NULL;
    cr_assert_eq(sd_suffix_index_init(0, &ix, &err), SD_ERR_ARG);
    cr_assert_null(ix);
    cr_assert_eq(sd_suffix_index_init(4, &ix, &err), SD_OK);
    cr_assert_eq(sd_suffix_index_capacity(ix), 4);
    cr_assert_eq(sd_suffix_index_append(ix, -1), -1);
    for (int32_t i = 0; i < 4; i++)
        cr_assert_eq(sd_suffix_index_append(ix, 7), 0);
    cr_assert_eq(sd_suffix_index_append(ix, 7), -1, "a full index takes no more");
    cr_assert_eq(sd_suffix_index_n_tokens(ix), 4);
    cr_assert_eq(sd_suffix_index_match(ix), 3); /* 7 7 7 7: "7 7 7" ends at 3 too */
    int32_t last = 0;
    const int32_t q[2] = {7, 7};
    cr_assert_eq(sd_suffix_index_count(ix, q, 2, &last), 3);
    cr_assert_eq(last, 4);
    cr_assert_gt(sd_suffix_index_bytes(ix), 4 * sizeof(int32_t));
    sd_suffix_index_free(ix);
    sd_suffix_index_free(NULL);
}

Test(suffix, proposer_face) {
    sd_error err = {0};
    sd_suffix_params p = sd_suffix_default_params();
    cr_assert_eq(sd_suffix_check_params(&p, &err), SD_OK);
    sd_suffix_params bad = p;
    bad.max_spec_factor = 0.0f;
    cr_assert_eq(sd_suffix_check_params(&bad, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "max_spec_factor"), "%s", err.msg);
    bad = p;
    bad.min_token_prob = 1.5f;
    cr_assert_eq(sd_suffix_check_params(&bad, &err), SD_ERR_ARG);
    bad = p;
    bad.n_min = 0;
    cr_assert_eq(sd_suffix_check_params(&bad, &err), SD_ERR_ARG);
    bad = p;
    bad.n_ctx = 0;
    sd_proposer *pr = NULL;
    cr_assert_eq(sd_proposer_suffix_init(&bad, 100, &pr, &err), SD_ERR_ARG);
    cr_assert_null(pr);

    p.n_ctx = 64;
    cr_assert_eq(sd_proposer_suffix_init(&p, 100, &pr, &err), SD_OK, "%s", err.msg);
    cr_assert_str_eq(sd_proposer_name(pr), "suffix");
    cr_assert_eq(sd_proposer_suffix_last_match(pr), 0);
    /* 10 11 12 13 14 | 20 | 10 11 12: the match "10 11 12" (3) continues 13 14 20 (each
     * followed once), at most 3 tokens (factor 1). */
    const int32_t ctx[] = {10, 11, 12, 13, 14, 20, 10, 11, 12};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_prefill(pr, ctx, 5, &err), SD_OK);
    cr_assert_eq(sd_proposer_propose(pr, ctx, 9, 8, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, 3);
    cr_assert(prop.one_hot && prop.lookup && !prop.probs);
    cr_assert_eq(prop.n_vocab, 100);
    cr_assert_eq(prop.tokens[0], 13);
    cr_assert_eq(prop.tokens[1], 14);
    cr_assert_eq(prop.tokens[2], 20);
    cr_assert_eq(sd_proposer_suffix_last_match(pr), 3);
    cr_assert_eq(sd_proposer_suffix_last_match(NULL), -1);
    /* A context that diverges (a new generation): the index is rebuilt for it. */
    const int32_t ctx2[] = {10, 11, 99, 10, 11};
    cr_assert_eq(sd_proposer_propose(pr, ctx2, 5, 4, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, 2); /* match "10 11" (2): 99 followed it, then 10 followed 99 */
    cr_assert_eq(prop.tokens[0], 99);
    cr_assert_eq(prop.tokens[1], 10);
    sd_proposer_commit(pr, ctx2, 0); /* emptied */
    cr_assert_eq(sd_proposer_propose(pr, ctx2, 2, 4, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, 0);
    /* Past the capacity: nothing. */
    int32_t big[80];
    for (int i = 0; i < 80; i++)
        big[i] = i % 4;
    cr_assert_eq(sd_proposer_propose(pr, big, 64, 4, &prop, &err), SD_OK);
    cr_assert_gt(prop.n, 0);
    cr_assert_eq(sd_proposer_propose(pr, big, 80, 4, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, 0);
    sd_proposer_free(pr);
}

/* ---- the cross-request cache ---- */

/* Brute force of the cache's proposal: T = doc 0, sep 0, doc 1, sep 1, ... (separators
 * n_vocab + d); the match is the longest suffix of the context's last 64 tokens that
 * occurs in T; the chain as in brute_propose, stopping at a separator. */
static int32_t brute_cache_propose(const int32_t *T, int32_t nT, int32_t n_vocab,
                                   const int32_t *ctx, int32_t n_ctx, const sd_suffix_params *p,
                                   int32_t k, int32_t *out, int32_t *match) {
    const int32_t w = n_ctx < 64 ? n_ctx : 64;
    int32_t m = 0;
    for (int32_t l = w; l >= 1 && m == 0; l--)
        for (int32_t e = l; e <= nT; e++)
            if (memcmp(T + e - l, ctx + n_ctx - l, (size_t)l * sizeof *T) == 0) {
                m = l;
                break;
            }
    *match = m;
    if (m < p->n_min || m < 1) return 0;
    const double lim = (double)p->max_spec_factor * m;
    const int32_t n_max = lim < (double)k ? (int32_t)lim : k;
    int32_t cur[64 + SD_MAX_DRAFT], len = m, got = 0;
    memcpy(cur, ctx + n_ctx - m, (size_t)m * sizeof *cur);
    double pr = 1.0;
    while (got < n_max) {
        /* followers: (token, count, last end), at most one per distinct token */
        int32_t tok[64], last[64], nf = 0;
        int64_t cnt[64], total = 0;
        for (int32_t e = len; e < nT; e++) {
            if (memcmp(T + e - len, cur, (size_t)len * sizeof *cur) != 0) continue;
            int32_t f = 0;
            while (f < nf && tok[f] != T[e])
                f++;
            if (f == nf) {
                cr_assert_lt(nf, 64);
                tok[nf] = T[e];
                cnt[nf] = 0;
                nf++;
            }
            cnt[f]++;
            last[f] = e + 1;
            total++;
        }
        int32_t best = -1;
        for (int32_t f = 0; f < nf; f++)
            if (best < 0 || cnt[f] > cnt[best] || (cnt[f] == cnt[best] && last[f] > last[best]))
                best = f;
        if (best < 0 || tok[best] >= n_vocab) break;
        const double next = pr * (double)cnt[best] / (double)total;
        if (next < (double)p->min_token_prob) break;
        pr = next;
        out[got++] = tok[best];
        cur[len++] = tok[best];
    }
    return got;
}

Test(suffix, cache_proposals_equal_brute_force) {
    enum { NV = 6, NDOC = 12 };
    sd_error err = {0};
    sd_suffix_cache *c = NULL;
    cr_assert_eq(sd_suffix_cache_init(NV, 1 << 20, &c, &err), SD_OK, "%s", err.msg);
    int32_t T[4096], nT = 0, doc[200];
    const sd_suffix_params p = {2.0f, 0.05f, 1, 4096, SD_SUFFIX_RULE_FACTOR, 0.0f, 0};
    int64_t n_tok = 0, n_q = 0;
    uint64_t s = 7;
    for (int d = 0; d < NDOC; d++) {
        const int32_t len = 20 + (int32_t)(rng_next(&s) % 150);
        make_stream(100 + (uint64_t)d, NV, 1, doc, len);
        cr_assert_eq(sd_suffix_cache_add(c, doc, len, &err), SD_OK, "%s", err.msg);
        memcpy(T + nT, doc, (size_t)len * sizeof *T);
        nT += len;
        T[nT++] = NV + d;
        cr_assert_eq(sd_suffix_cache_n_docs(c), d + 1, "no document dropped in 1 MiB");
        /* contexts: random streams and pieces of the documents */
        for (int qi = 0; qi < 40; qi++) {
            int32_t ctx[100];
            const int32_t n = 1 + (int32_t)(rng_next(&s) % 90);
            if (qi % 2) {
                make_stream(rng_next(&s), NV, 0, ctx, n);
            } else {
                const int32_t at = (int32_t)(rng_next(&s) % (uint64_t)(nT - 1));
                for (int32_t i = 0; i < n; i++) {
                    const int32_t v = at + i < nT ? T[at + i] : 0;
                    ctx[i] = v >= NV ? 0 : v;
                }
            }
            int32_t got[SD_MAX_DRAFT], want[SD_MAX_DRAFT], m = -1, bm = -1;
            double score = -1.0;
            const int32_t k = 1 + (int32_t)(rng_next(&s) % 8);
            const int32_t ng = sd_suffix_cache_propose(c, ctx, n, &p, k, got, &m, &score);
            const int32_t nw = brute_cache_propose(T, nT, NV, ctx, n, &p, k, want, &bm);
            cr_assert_eq(m, bm, "doc %d query %d: match %d, brute %d", d, qi, m, bm);
            cr_assert_eq(ng, nw, "doc %d query %d: %d tokens, brute %d", d, qi, ng, nw);
            for (int32_t i = 0; i < ng; i++)
                cr_assert_eq(got[i], want[i]);
            cr_assert(ng == 0 ? score == 0.0 : score > 0.0 && score <= ng);
            n_tok += ng;
            n_q++;
        }
    }
    fprintf(stderr, "  %lld cache proposals (%lld tokens) checked\n", (long long)n_q,
            (long long)n_tok);
    cr_assert_gt(n_tok, 200);
    cr_assert_eq(sd_suffix_cache_add(c, (const int32_t[]){1, NV}, 2, &err), SD_ERR_ARG);
    cr_assert_eq(sd_suffix_cache_n_docs(c), NDOC, "a refused document changes nothing");
    sd_suffix_cache_free(c);
}

/* 1,000 documents through a 256 KiB cache: the bytes never change and stay in the
 * budget, the newest document is always whole (its continuations are proposed, up to its
 * end and never past it), and the least recently used documents go first. */
Test(suffix, cache_memory_bound_and_lru) {
    enum { NV = 5000 };
    sd_error err = {0};
    sd_suffix_cache *c = NULL;
    const size_t budget = 256 << 10;
    cr_assert_eq(sd_suffix_cache_init(NV, 16, &c, &err), SD_ERR_ARG);
    cr_assert_eq(sd_suffix_cache_init(NV, budget, &c, &err), SD_OK, "%s", err.msg);
    const size_t bytes = sd_suffix_cache_bytes(c);
    const int32_t cap = sd_suffix_cache_capacity(c);
    cr_assert_leq(bytes, budget);
    cr_assert_gt(cap, 1000);
    const sd_suffix_params p = {8.0f, 0.0f, 1, 4096, SD_SUFFIX_RULE_FACTOR, 0.0f, 0};
    uint64_t s = 11;
    int32_t *doc = malloc(2000 * sizeof *doc);
    int64_t sum_docs = 0;
    for (int r = 0; r < 1000; r++) {
        const int32_t len = 10 + (int32_t)(rng_next(&s) % (r % 50 == 49 ? 1990 : 300));
        for (int32_t i = 0; i < len; i++)
            doc[i] = (int32_t)(rng_next(&s) % NV);
        cr_assert_eq(sd_suffix_cache_add(c, doc, len, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_suffix_cache_bytes(c), bytes);
        cr_assert_leq(sd_suffix_cache_n_tokens(c) + sd_suffix_cache_n_docs(c), cap);
        sum_docs += sd_suffix_cache_n_docs(c);
        /* the newest is whole: from a random point, its next tokens */
        const int32_t kept = len < cap - 1 ? len : cap - 1;
        const int32_t *d = doc + len - kept;
        const int32_t at = 3 + (int32_t)(rng_next(&s) % (uint64_t)(kept - 3));
        int32_t got[SD_MAX_DRAFT], m = 0;
        double score;
        const int32_t n = sd_suffix_cache_propose(c, d, at, &p, 8, got, &m, &score);
        const int32_t want = kept - at < 8 ? kept - at : 8;
        cr_assert_eq(n, want, "request %d: %d tokens from position %d of %d, expected %d", r, n, at,
                     kept, want);
        cr_assert(memcmp(got, d + at, (size_t)n * sizeof *got) == 0, "request %d", r);
    }
    fprintf(stderr, "  cache of %zu bytes: %d positions, %.1f documents held on average\n", bytes,
            cap, sum_docs / 1000.0);
    cr_assert_gt(sum_docs, 3 * 1000, "the cache kept too few documents");
    /* LRU: A, B, C fill most of it; a proposal from A; D makes room: B goes first. */
    sd_suffix_cache_free(c);
    cr_assert_eq(sd_suffix_cache_init(NV, budget, &c, &err), SD_OK);
    const int32_t L = cap * 3 / 10;
    int32_t *abcd = malloc((size_t)(4 * L) * sizeof *abcd);
    for (int32_t i = 0; i < 4 * L; i++)
        abcd[i] = (int32_t)(rng_next(&s) % NV);
    for (int d = 0; d < 3; d++)
        cr_assert_eq(sd_suffix_cache_add(c, abcd + d * L, L, &err), SD_OK);
    int32_t got[SD_MAX_DRAFT], m;
    double score;
    cr_assert_eq(sd_suffix_cache_propose(c, abcd, 10, &p, 4, got, &m, &score), 4); /* uses A */
    cr_assert_eq(sd_suffix_cache_add(c, abcd + 3 * L, L, &err), SD_OK);
    cr_assert_lt(sd_suffix_cache_n_docs(c), 4);
    cr_assert_eq(sd_suffix_cache_propose(c, abcd, 10, &p, 4, got, &m, &score), 4, "A was used");
    cr_assert_eq(sd_suffix_cache_propose(c, abcd + L, 10, &p, 4, got, &m, &score), 0,
                 "B, the least recently used, is still there");
    cr_assert_eq(sd_suffix_cache_propose(c, abcd + 3 * L, 10, &p, 4, got, &m, &score), 4);
    free(abcd);
    free(doc);
    sd_suffix_cache_free(c);
}

/* A suffix proposer with a cache: a context the cache continues better drafts from it. */
Test(suffix, proposer_with_cache) {
    sd_error err = {0};
    sd_suffix_cache *c = NULL;
    cr_assert_eq(sd_suffix_cache_init(100, 1 << 20, &c, &err), SD_OK);
    const int32_t earlier[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    cr_assert_eq(sd_suffix_cache_add(c, earlier, 12, &err), SD_OK);
    sd_suffix_params p = sd_suffix_default_params();
    p.n_ctx = 64;
    sd_proposer *pr = NULL;
    cr_assert_eq(sd_proposer_suffix_init(&p, 100, &pr, &err), SD_OK);
    cr_assert_eq(sd_proposer_suffix_set_cache(pr, c, &err), SD_OK);
    cr_assert_eq(sd_proposer_suffix_cache_hits(pr), 0);
    const int32_t ctx[] = {50, 51, 3, 4, 5, 6};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(pr, ctx, 6, 4, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, 4); /* the context alone has no match; the cache's is 4 long */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(prop.tokens[i], 7 + i);
    cr_assert_eq(sd_proposer_suffix_cache_hits(pr), 1);
    cr_assert_eq(sd_proposer_suffix_set_cache(NULL, c, &err), SD_ERR_ARG);
    sd_proposer_free(pr);
    sd_suffix_cache_free(c);
}

/* ---- resuming a copy after the target replaces one token (sd_suffix_params.resume) ---- */

/* Greedy drafting over a known answer, as the engine runs it: propose from the context,
 * accept the longest prefix equal to the answer, emit the answer's next token, commit.
 * props[i][0 .. 17): pass i's proposal (its length first). Returns the passes. */
static int32_t replay_answer(sd_proposer *pr, const int32_t *prompt, int32_t np,
                             const int32_t *answer, int32_t na, int32_t props[][SD_MAX_DRAFT + 1]) {
    sd_error err = {0};
    int32_t ctx[256], n = np, gen = 0, passes = 0;
    memcpy(ctx, prompt, (size_t)np * sizeof *ctx);
    cr_assert_eq(sd_proposer_prefill(pr, ctx, n, &err), SD_OK);
    while (gen < na) {
        sd_proposal prop;
        cr_assert_eq(sd_proposer_propose(pr, ctx, n, 16, &prop, &err), SD_OK);
        int32_t a = 0;
        while (a < prop.n && gen + a < na && prop.tokens[a] == answer[gen + a])
            a++;
        props[passes][0] = prop.n;
        memcpy(props[passes] + 1, prop.tokens, (size_t)prop.n * sizeof *prop.tokens);
        const int32_t e = gen + a + 1 <= na ? a + 1 : na - gen;
        memcpy(ctx + n, answer + gen, (size_t)e * sizeof *ctx);
        n += e;
        gen += e;
        passes++;
        sd_proposer_commit(pr, ctx, n);
    }
    return passes;
}

Test(suffix, resume_after_a_replaced_token) {
    /* The prompt: 20 distinct tokens 100 .. 119. Answers that copy it, each with one edit
     * after a copy of 8 tokens (7 is a new token before the copy). */
    int32_t prompt[20];
    for (int32_t i = 0; i < 20; i++)
        prompt[i] = 100 + i;
    enum { NA = 21 };
    const int32_t replaced[NA] = {7,   100, 101, 102, 103, 104, 105, 106, 107, 200, 109,
                                  110, 111, 112, 113, 114, 115, 116, 117, 118, 119};
    const int32_t deleted[NA - 1] = {7,   100, 101, 102, 103, 104, 105, 106, 107, 109,
                                     110, 111, 112, 113, 114, 115, 116, 117, 118, 119};
    const int32_t left[NA] = {7,   100, 101, 102, 103, 104, 105, 106, 107, 200, 300,
                              301, 302, 303, 304, 305, 306, 307, 308, 309, 310};
    const int32_t short_run[8] = {7, 100, 101, 102, 200, 109, 110, 111};
    int32_t props[64][SD_MAX_DRAFT + 1];
    sd_error err = {0};
    int32_t passes[2];
    for (int32_t on = 0; on <= 1; on++) {
        sd_suffix_params p = sd_suffix_default_params();
        p.resume = on ? 4 : 0;
        sd_proposer *pr = NULL;
        cr_assert_eq(sd_proposer_suffix_init(&p, 1000, &pr, &err), SD_OK, "%s", err.msg);
        /* Passes: 7 | 100 | 101 | 102 103 +104 | 105 106 107 (108 109 rejected) +200, so the
         * sixth proposal follows 200: without resuming no match drafts there; with it, the
         * copy goes on past 108 (replaced by 200): 109 110 111 112, all accepted. */
        passes[on] = replay_answer(pr, prompt, 20, replaced, NA, props);
        cr_assert_eq(props[4][0], 5, "the match of 5 drafts 5");
        cr_assert_eq(props[4][4], 108);
        if (on) {
            cr_assert_eq(props[5][0], 4, "resumed: %d tokens", props[5][0]);
            for (int32_t i = 0; i < 4; i++)
                cr_assert_eq(props[5][1 + i], 109 + i);
        } else
            cr_assert_eq(props[5][0], 0);
        /* 108 deleted: the target's 109 is the token after the replaced one, so the copy goes
         * on at 110. */
        replay_answer(pr, prompt, 20, deleted, NA - 1, props);
        if (on) {
            cr_assert_eq(props[5][0], 4);
            for (int32_t i = 0; i < 4; i++)
                cr_assert_eq(props[5][1 + i], 110 + i);
        } else
            cr_assert_eq(props[5][0], 0);
        /* The target leaves the copy after 200: the resumed 109 .. is rejected at its first
         * token (300), and resuming stops there (nothing follows 200 300 in the text). */
        replay_answer(pr, prompt, 20, left, NA, props);
        cr_assert_eq(props[5][0], on ? 4 : 0);
        cr_assert_eq(props[6][0], 0, "no second resumed proposal after a miss");
        /* A copy of 3 tokens (the match of 2 and one accepted) is too short to resume. */
        replay_answer(pr, prompt, 20, short_run, 8, props);
        cr_assert_eq(props[3][0], 2); /* 102 .. the match "100 101" drafts 102 103 */
        cr_assert_eq(props[4][0], 0, "a copy of 3 is not resumed: %d tokens", props[4][0]);
        sd_proposer_free(pr);
    }
    cr_assert_lt(passes[1], passes[0], "resuming saves passes: %d against %d", passes[1],
                 passes[0]);

    /* A rename: 108 occurs again in the prompt; the target wrote 200 for the first, so the
     * resumed draft writes 200 for the second. When the target keeps a 108 after all, the
     * replacement is dropped: no later proposal holds a 200. */
    const int32_t prompt2[22] = {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110,
                                 108, 111, 112, 113, 114, 108, 115, 116, 117, 118, 119};
    const int32_t renamed[23] = {7,   100, 101, 102, 103, 104, 105, 106, 107, 200, 109, 110,
                                 200, 111, 112, 113, 114, 200, 115, 116, 117, 118, 119};
    const int32_t kept[23] = {7,   100, 101, 102, 103, 104, 105, 106, 107, 200, 109, 110,
                              108, 111, 112, 113, 114, 108, 115, 116, 117, 118, 119};
    sd_suffix_params p = sd_suffix_default_params();
    cr_assert_eq(p.resume, 2, "the default");
    p.resume = 4;
    sd_proposer *pr = NULL;
    cr_assert_eq(sd_proposer_suffix_init(&p, 1000, &pr, &err), SD_OK, "%s", err.msg);
    int32_t n_pass = replay_answer(pr, prompt2, 22, renamed, 23, props);
    cr_assert_eq(props[5][0], 4);
    const int32_t want[4] = {109, 110, 200, 111};
    for (int32_t i = 0; i < 4; i++)
        cr_assert_eq(props[5][1 + i], want[i], "token %d: %d", i, props[5][1 + i]);
    int32_t n_pass_kept = replay_answer(pr, prompt2, 22, kept, 23, props);
    cr_assert_eq(props[5][3], 200, "the replacement is tried once");
    for (int32_t i = 6; i < n_pass_kept; i++)
        for (int32_t j = 0; j < props[i][0]; j++)
            cr_assert_neq(props[i][1 + j], 200, "pass %d still replaces 108", i);
    cr_assert_leq(n_pass, 8, "the rename is drafted: %d passes for 23 tokens", n_pass);
    sd_proposer_free(pr);
    sd_suffix_params bad = sd_suffix_default_params();
    bad.resume = SD_MAX_DRAFT + 1;
    cr_assert_eq(sd_suffix_check_params(&bad, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "resume"), "%s", err.msg);
}
