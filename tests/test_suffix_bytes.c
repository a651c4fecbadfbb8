/*
 * tests/test_suffix_bytes.c: the suffix proposer's byte-level matcher (draft/suffix_bytes.c)
 * against a brute-force byte search on random token streams over a small vocabulary whose
 * pieces overlap (so the same bytes are often tokenized differently): after every appended
 * token, and after rollbacks, the boundary it returns and the match length equal a direct
 * scan of the concatenated bytes; then the proposer drafting across a boundary tokenized
 * differently (and nothing without the bytes attached), and its face.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "draft/suffix_impl.h"

TestSuite(suffix_bytes, .timeout = 600);

static uint64_t rng_next(uint64_t *s) {
    *s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return *s >> 33;
}

/* A vocabulary of n pieces over the alphabet "ab\n" (1 to 3 bytes, distinct) and, last, one
 * token without bytes (a control token). */
#define NV 24
static sd_grammar_vocab *small_vocab(char pieces[NV][4], size_t *lens) {
    static const char alpha[] = "ab\n";
    int32_t n = 0;
    for (int len = 1; len <= 3 && n < NV - 1; len++) {
        const int total = len == 1 ? 3 : len == 2 ? 9 : 27;
        for (int c = 0; c < total && n < NV - 1; c++) {
            int v = c;
            for (int i = 0; i < len; i++, v /= 3)
                pieces[n][i] = alpha[v % 3];
            pieces[n][len] = 0;
            lens[n++] = (size_t)len;
        }
    }
    pieces[NV - 1][0] = 0;
    lens[NV - 1] = 0;
    const char *ptr[NV];
    for (int i = 0; i < NV; i++)
        ptr[i] = pieces[i];
    sd_grammar_vocab *gv = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_grammar_vocab_init(ptr, lens, NV, &gv, &err), SD_OK, "%s", err.msg);
    return gv;
}

/* The bytes of toks[0 .. n) as the matcher sees them (a token without bytes: 0xff + its id,
 * 4 bytes little-endian), ends[i] the position after token i. */
static int32_t text_bytes(char pieces[NV][4], const size_t *lens, const int32_t *toks, int32_t n,
                          unsigned char *b, int32_t *ends) {
    int32_t e = 0;
    for (int32_t i = 0; i < n; i++) {
        if (lens[toks[i]] == 0) {
            b[e++] = 0xff;
            for (int k = 0; k < 4; k++)
                b[e++] = (unsigned char)((uint32_t)toks[i] >> (8 * k));
        } else {
            memcpy(b + e, pieces[toks[i]], lens[toks[i]]);
            e += (int32_t)lens[toks[i]];
        }
        ends[i] = e;
    }
    return e;
}

/* Brute force: over every boundary j (1 <= j < n, before token j) the common suffix of
 * b[0 .. ends[j - 1]) and b[0 .. E), at most SX_BYTES_MAX; the longest (the largest j on a
 * tie), if at least max(min_bytes, 4). */
static int32_t brute(const unsigned char *b, const int32_t *ends, int32_t n, int32_t min_bytes,
                     int32_t *len) {
    *len = 0;
    if (n < 2) return -1;
    const int32_t e = ends[n - 1];
    if (min_bytes < 4) min_bytes = 4;
    int32_t best = -1, best_len = 0;
    for (int32_t j = 1; j < n; j++) {
        const int32_t p = ends[j - 1];
        int32_t l = 0;
        while (l < SX_BYTES_MAX && l < p && b[p - 1 - l] == b[e - 1 - l])
            l++;
        if (l >= min_bytes && l >= best_len) {
            best = j;
            best_len = l;
        }
    }
    *len = best >= 0 ? best_len : 0;
    return best;
}

static int32_t brute_within(const int32_t *ends, int32_t n, int32_t n_bytes) {
    const int32_t from = ends[n - 1] - n_bytes;
    int32_t c = 0;
    for (int32_t i = n - 1; i >= 0 && (i ? ends[i - 1] : 0) >= from; i--)
        c++;
    return c;
}

/* A stream: mostly copies of earlier byte spans re-tokenized at random (mode 1) or random
 * tokens (mode 0), with the control token now and then. */
static void make_stream(uint64_t seed, int mode, char pieces[NV][4], const size_t *lens, int32_t *t,
                        int32_t n) {
    uint64_t s = seed;
    for (int32_t i = 0; i < n;) {
        if (mode == 1 && i > 8 &&
            rng_next(&s) % 4 != 0) { /* copy a span of earlier tokens' bytes */
            const int32_t from = (int32_t)(rng_next(&s) % (uint64_t)(i - 4));
            const int32_t span = 2 + (int32_t)(rng_next(&s) % 6);
            char buf[64];
            int32_t nb = 0;
            for (int32_t j = from; j < from + span && j < i; j++)
                if (lens[t[j]] > 0) {
                    memcpy(buf + nb, pieces[t[j]], lens[t[j]]);
                    nb += (int32_t)lens[t[j]];
                }
            for (int32_t o = 0; o < nb && i < n;) { /* re-tokenize: pieces of 1 to 3 bytes */
                int32_t l = 1 + (int32_t)(rng_next(&s) % 3);
                if (l > nb - o) l = nb - o;
                for (int32_t v = 0; v < NV - 1; v++)
                    if ((int32_t)lens[v] == l && memcmp(pieces[v], buf + o, (size_t)l) == 0) {
                        t[i++] = v;
                        break;
                    }
                o += l;
            }
        } else {
            t[i++] = rng_next(&s) % 50 == 0 ? NV - 1 : (int32_t)(rng_next(&s) % (NV - 1));
        }
    }
}

Test(suffix_bytes, match_equals_brute_force) {
    char pieces[NV][4];
    size_t lens[NV];
    sd_grammar_vocab *gv = small_vocab(pieces, lens);
    enum { N = 600 };
    int32_t t[N], ends[N];
    unsigned char b[N * 5];
    int64_t checks = 0, found = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        const int mode = (int)(seed % 2);
        make_stream(seed, mode, pieces, lens, t, N);
        sx_bytes *x = NULL;
        sd_error err = {0};
        cr_assert_eq(sx_bytes_init(gv, N, &x, &err), SD_OK, "%s", err.msg);
        uint64_t s = seed * 977;
        for (int32_t n = 1; n <= N; n++) {
            if (n > 20 && rng_next(&s) % 40 == 0) { /* a rollback, then the same tokens again */
                const int32_t keep = n - 1 - (int32_t)(rng_next(&s) % 16);
                sx_bytes_truncate(x, keep);
                cr_assert_eq(sx_bytes_n_tokens(x), keep);
                for (int32_t j = keep; j < n - 1; j++)
                    cr_assert_eq(sx_bytes_append(x, t[j]), 0);
            }
            cr_assert_eq(sx_bytes_append(x, t[n - 1]), 0);
            cr_assert_eq(sx_bytes_n_tokens(x), n);
            text_bytes(pieces, lens, t, n, b, ends);
            for (int32_t mb = 4; mb <= 8; mb += 4) {
                int32_t len = -1, blen = -1;
                const int32_t j = sx_bytes_match(x, mb, &len);
                const int32_t bj = brute(b, ends, n, mb, &blen);
                cr_assert_eq(j, bj, "seed %llu n %d min %d: boundary %d, brute force %d",
                             (unsigned long long)seed, n, mb, j, bj);
                cr_assert_eq(len, blen, "seed %llu n %d: length %d, brute force %d",
                             (unsigned long long)seed, n, len, blen);
                if (j >= 0)
                    cr_assert_eq(sx_bytes_tokens_within(x, len), brute_within(ends, n, len));
                checks++;
                found += j >= 0;
            }
        }
        sx_bytes_free(x);
    }
    cr_assert_gt(found, checks / 4, "matches found %lld of %lld", (long long)found,
                 (long long)checks);
    sd_grammar_vocab_free(gv);
}

Test(suffix_bytes, capacity_and_negative_ids) {
    char pieces[NV][4];
    size_t lens[NV];
    sd_grammar_vocab *gv = small_vocab(pieces, lens);
    sx_bytes *x = NULL;
    sd_error err = {0};
    cr_assert_eq(sx_bytes_init(gv, 4, &x, &err), SD_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sx_bytes_append(x, 20), 0); /* 3 bytes each */
    cr_assert_eq(sx_bytes_append(x, 0), -1);     /* past 4 tokens */
    cr_assert_eq(sx_bytes_n_tokens(x), 4);
    int32_t len = 0;
    cr_assert_eq(sx_bytes_match(x, 4, &len), -1, "indexing stopped: no match");
    sx_bytes_truncate(x, 2);
    cr_assert_eq(sx_bytes_append(x, 20), 0, "a truncate below the stop resumes it");
    cr_assert_eq(sx_bytes_append(x, -3), -1);
    cr_assert_eq(sx_bytes_append(x, 20), -1, "after a negative id nothing is indexed");
    sx_bytes_free(x);
    sx_bytes_free(NULL);
    cr_assert_neq(sx_bytes_init(gv, 0, &x, &err), SD_OK);
    cr_assert_null(x);
    sd_grammar_vocab_free(gv);
}

/* The prompt has `e` `\n\n` `def` ` f` `(x` ..., the answer `fg` `\n` `def`: the token-level
 * match is `def` alone (1 token: drafts nothing); the bytes `\ndef` (2 of the answer's
 * tokens) end at the prompt's boundary before ` f`, so the proposer drafts ` f` `(x`. */
Test(suffix_bytes, proposer_drafts_across_a_retokenized_boundary) {
    static const char *const pieces[] = {"cd", "e", "\n\n", "def", " f", "(x",
                                         "):", "k", "fg",   "\n",  "zz"};
    enum { V = sizeof pieces / sizeof *pieces };
    size_t lens[V];
    for (int i = 0; i < V; i++)
        lens[i] = strlen(pieces[i]);
    sd_grammar_vocab *gv = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_grammar_vocab_init(pieces, lens, V, &gv, &err), SD_OK, "%s", err.msg);
    const int32_t ctx[] = {0, 1, 2, 3, 4, 5, 6, 7, 10, 8, 9, 3};
    const int32_t n = sizeof ctx / sizeof *ctx;
    for (int with = 0; with <= 1; with++) {
        sd_suffix_params prm = sd_suffix_default_params();
        prm.n_ctx = 64;
        prm.resume = 0;
        sd_proposer *p = NULL;
        cr_assert_eq(sd_proposer_suffix_init(&prm, V, &p, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_proposer_prefill(p, ctx, 8, &err), SD_OK); /* the prompt, bytes later */
        if (with) cr_assert_eq(sd_proposer_suffix_set_bytes(p, gv, &err), SD_OK, "%s", err.msg);
        sd_proposal out = {0};
        cr_assert_eq(sd_proposer_propose(p, ctx, n, 8, &out, &err), SD_OK);
        cr_assert_eq(out.one_hot, 1);
        if (!with) {
            cr_assert_eq(out.n, 0, "the token-level match (1 token) drafts nothing");
            cr_assert_eq(sd_proposer_suffix_byte_hits(p), 0);
        } else {
            cr_assert_eq(out.n, 2, "2 tokens matched in bytes: 2 drafted, got %d", out.n);
            cr_assert_eq(out.tokens[0], 4);
            cr_assert_eq(out.tokens[1], 5);
            cr_assert_eq(sd_proposer_suffix_byte_hits(p), 1);
            cr_assert_eq(sd_proposer_suffix_last_match(p), 2);
            /* the target took ` f`: the token match (`def f`, 2 tokens) drafts `(x` `):`
             * itself (the byte match stays unused) */
            const int32_t ctx2[] = {0, 1, 2, 3, 4, 5, 6, 7, 10, 8, 9, 3, 4};
            cr_assert_eq(sd_proposer_propose(p, ctx2, n + 1, 8, &out, &err), SD_OK);
            cr_assert_eq(out.n, 2);
            cr_assert_eq(out.tokens[0], 5);
            cr_assert_eq(out.tokens[1], 6);
            cr_assert_eq(sd_proposer_suffix_byte_hits(p), 1);
            /* detached: nothing again on the first context */
            cr_assert_eq(sd_proposer_suffix_set_bytes(p, NULL, &err), SD_OK);
            cr_assert_eq(sd_proposer_propose(p, ctx, n, 8, &out, &err), SD_OK);
            cr_assert_eq(out.n, 0);
        }
        sd_proposer_free(p);
    }
    sd_proposer *ng = NULL;
    sd_ngram_params np = sd_ngram_default_params();
    cr_assert_eq(sd_proposer_ngram_init(&np, V, &ng, &err), SD_OK);
    cr_assert_eq(sd_proposer_suffix_set_bytes(ng, gv, &err), SD_ERR_ARG, "not a suffix proposer");
    cr_assert_eq(sd_proposer_suffix_byte_hits(ng), -1);
    sd_proposer_free(ng);
    sd_grammar_vocab_free(gv);
}
