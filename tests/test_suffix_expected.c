/*
 * tests/test_suffix_expected.c: the suffix proposer's expected rule (SD_SUFFIX_RULE_EXPECTED,
 * --suffix-cost). Its proposal is always a prefix of the most frequent follower chain (the
 * factor rule's chain without its limits, checked on random streams); a long match of a text
 * that is being copied drafts all K when drafting is cheap, and nothing when it costs more
 * than a pass can gain; drafts that keep being rejected teach it to draft less, accepted ones
 * to draft more again; a new text forgets what it learned; with the cross-request cache it
 * drafts from the cache where the context has no match. End to end: greedy output equal to
 * target alone for every K (1..16, fixed and adaptive) through generate and through the
 * batcher (serve) with the cache, and Gumbel sampling equal to target alone with the same
 * seed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "engine_util.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(suffix_expected, .init = setup, .fini = teardown, .timeout = 900);

static uint64_t rng_next(uint64_t *s) {
    *s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return *s >> 33;
}

static sd_suffix_params expected_params(float cost) {
    sd_suffix_params p = sd_suffix_default_params();
    p.rule = SD_SUFFIX_RULE_EXPECTED;
    p.draft_cost = cost;
    p.n_ctx = 4096;
    return p;
}

static sd_proposer *make(const sd_suffix_params *p) {
    sd_proposer *pr = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_suffix_init(p, 1000, &pr, &err), SD_OK, "%s", err.msg);
    return pr;
}

/* On random streams over small alphabets, the expected rule's proposal is a prefix of the
 * factor rule's proposal without limits (max_spec_factor huge, min_token_prob 0): the same
 * chain, cut where the expected gain is largest. */
Test(suffix_expected, proposal_is_a_prefix_of_the_follower_chain) {
    const sd_suffix_params ex = expected_params(0.1f);
    sd_suffix_params all = sd_suffix_default_params();
    all.max_spec_factor = 1e6f;
    all.min_token_prob = 0.0f;
    all.n_ctx = 4096;
    int64_t n_tok = 0, n_cut = 0, n_q = 0;
    for (int alpha = 2; alpha <= 16; alpha *= 2)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            sd_proposer *a = make(&ex), *b = make(&all);
            int32_t t[600];
            uint64_t s = seed * 977 + (uint64_t)alpha;
            for (int i = 0; i < 600; i++) /* a random text with copied stretches */
                t[i] = i >= 100 && rng_next(&s) % 4 ? t[i - 100 + (int)(rng_next(&s) % 3)]
                                                    : (int32_t)(rng_next(&s) % (uint64_t)alpha);
            for (int32_t n = 2; n <= 600; n++) {
                const int32_t k = 1 + n % SD_MAX_DRAFT;
                sd_proposal pa, pb;
                sd_error err = {0};
                cr_assert_eq(sd_proposer_propose(a, t, n, k, &pa, &err), SD_OK);
                cr_assert_eq(sd_proposer_propose(b, t, n, k, &pb, &err), SD_OK);
                cr_assert(pa.one_hot && pa.lookup && !pa.probs);
                cr_assert_leq(pa.n, pb.n, "alpha %d n %d k %d: %d tokens, the chain has %d", alpha,
                              n, k, pa.n, pb.n);
                for (int32_t i = 0; i < pa.n; i++)
                    cr_assert_eq(pa.tokens[i], pb.tokens[i], "alpha %d n %d: token %d differs",
                                 alpha, n, i);
                n_tok += pa.n;
                n_cut += pa.n < pb.n;
                n_q++;
                sd_proposer_commit(a, t, n);
                sd_proposer_commit(b, t, n);
            }
            sd_proposer_free(a);
            sd_proposer_free(b);
        }
    fprintf(stderr, "  %lld proposals, %lld tokens, %lld cut short\n", (long long)n_q,
            (long long)n_tok, (long long)n_cut);
    cr_assert_gt(n_tok, 1000, "few tokens proposed: the test proves little");
    cr_assert_gt(n_cut, 100, "the rule never cut a chain: the test proves little");
}

/* A text T of distinct ids, then its first 60 tokens again (the target copying it): the
 * match is 60 long and its follower unique, so a cheap draft takes all K, and one that
 * costs more than a pass can gain (cost 4: one drafted token costs 4 passes) takes none. */
Test(suffix_expected, long_match_drafts_all_k_when_cheap) {
    int32_t t[300];
    for (int i = 0; i < 200; i++)
        t[i] = 1 + i;
    for (int i = 0; i < 60; i++)
        t[200 + i] = t[i];
    const float costs[3] = {0.02f, 0.25f, 4.0f};
    const int32_t want_min[3] = {SD_MAX_DRAFT, 8, 0}, want_max[3] = {SD_MAX_DRAFT, 16, 0};
    for (int c = 0; c < 3; c++) {
        const sd_suffix_params p = expected_params(costs[c]);
        sd_proposer *pr = make(&p);
        sd_proposal prop;
        sd_error err = {0};
        cr_assert_eq(sd_proposer_propose(pr, t, 260, SD_MAX_DRAFT, &prop, &err), SD_OK);
        cr_assert_eq(sd_proposer_suffix_last_match(pr), 60);
        cr_assert(prop.n >= want_min[c] && prop.n <= want_max[c],
                  "cost %g: %d tokens, expected %d .. %d", (double)costs[c], prop.n, want_min[c],
                  want_max[c]);
        for (int32_t i = 0; i < prop.n; i++)
            cr_assert_eq(prop.tokens[i], t[60 + i]);
        sd_proposer_free(pr);
    }
}

/* The model learns: contexts that copy 4 tokens of earlier text (a match of at least 4)
 * after which the "target" never continues the copy (every draft rejected at its first
 * token) make the proposer draft less and less; a context that always continues the copy
 * (every draft accepted) makes it draft more than the priors alone. A new text forgets. */
static int64_t teach(sd_proposer *pr, int accept, int64_t *first, int64_t *last,
                     int64_t *prior_last) {
    static int32_t ctx[4000];
    int32_t n = 0;
    uint64_t s = 11;
    for (int i = 0; i < 300; i++)
        ctx[n++] = 1 + (int32_t)(rng_next(&s) % 200);
    sd_proposer_commit(pr, ctx, n);
    *first = *last = *prior_last = 0;
    for (int pass = 0; pass < 150; pass++) {
        const int32_t j = (int32_t)(rng_next(&s) % 250);
        for (int i = 0; i < 4; i++)
            ctx[n++] = ctx[j + i];
        sd_proposer_commit(pr, ctx, n);
        sd_proposal prop;
        sd_error err = {0};
        cr_assert_eq(sd_proposer_propose(pr, ctx, n, 8, &prop, &err), SD_OK);
        if (pass < 20) *first += prop.n;
        if (pass >= 130) {
            *last += prop.n;
            const sd_suffix_params fp = expected_params(0.3f);
            sd_proposer *fresh = make(&fp); /* the priors alone on the same context */
            sd_proposal pf;
            cr_assert_eq(sd_proposer_propose(fresh, ctx, n, 8, &pf, &err), SD_OK);
            *prior_last += pf.n;
            sd_proposer_free(fresh);
        }
        if (accept) { /* the target continues as drafted, then a token of its own */
            memcpy(ctx + n, prop.tokens, (size_t)prop.n * sizeof *ctx);
            n += prop.n;
        }
        ctx[n++] = 500 + pass; /* a token no draft proposes */
        sd_proposer_commit(pr, ctx, n);
    }
    return n;
}

Test(suffix_expected, outcomes_teach_it_how_far_to_draft) {
    const sd_suffix_params p = expected_params(0.3f);
    sd_proposer *rej = make(&p), *acc = make(&p);
    int64_t rf, rl, rp, af, al, ap;
    teach(rej, 0, &rf, &rl, &rp);
    teach(acc, 1, &af, &al, &ap);
    fprintf(stderr,
            "  drafted in the first / last 20 passes (priors alone on the last): all rejected "
            "%lld / %lld (%lld), all accepted %lld / %lld (%lld)\n",
            (long long)rf, (long long)rl, (long long)rp, (long long)af, (long long)al,
            (long long)ap);
    cr_assert_gt(rf, 0, "it never drafted: the test proves little");
    cr_assert_lt(rl * 2, rf, "rejections did not make it draft less (%lld -> %lld)", (long long)rf,
                 (long long)rl);
    cr_assert_lt(rl, rp, "rejections: %lld tokens, the priors alone %lld", (long long)rl,
                 (long long)rp);
    cr_assert_gt(al, ap, "acceptances did not make it draft more than the priors (%lld vs %lld)",
                 (long long)al, (long long)ap);
    /* A new text forgets: a context that does not extend the indexed one drafts as a fresh
     * proposer would. */
    int32_t ctx[300];
    uint64_t s = 99;
    for (int i = 0; i < 300; i++)
        ctx[i] = 1 + (int32_t)(rng_next(&s) % 20);
    sd_proposer *fresh = make(&p);
    int64_t na = 0, nb = 0;
    for (int32_t n = 50; n <= 300; n++) {
        sd_proposal a, b;
        sd_error err = {0};
        cr_assert_eq(sd_proposer_propose(rej, ctx, n, 8, &a, &err), SD_OK);
        cr_assert_eq(sd_proposer_propose(fresh, ctx, n, 8, &b, &err), SD_OK);
        cr_assert_eq(a.n, b.n, "n %d: a new text kept what the old one taught (%d vs %d)", n, a.n,
                     b.n);
        na += a.n;
        nb += b.n;
    }
    cr_assert_gt(na, 0);
    sd_proposer_free(fresh);
    sd_proposer_free(rej);
    sd_proposer_free(acc);
}

/* With the cache: a context without a match of its own drafts the cache's continuation. */
Test(suffix_expected, drafts_from_the_cache) {
    sd_error err = {0};
    sd_suffix_cache *c = NULL;
    cr_assert_eq(sd_suffix_cache_init(1000, 1 << 20, &c, &err), SD_OK);
    int32_t earlier[100];
    for (int i = 0; i < 100; i++)
        earlier[i] = 10 + i;
    cr_assert_eq(sd_suffix_cache_add(c, earlier, 100, &err), SD_OK);
    const sd_suffix_params p = expected_params(0.1f);
    sd_proposer *pr = make(&p);
    cr_assert_eq(sd_proposer_suffix_set_cache(pr, c, &err), SD_OK);
    int32_t ctx[40];
    ctx[0] = 900;
    for (int i = 1; i < 40; i++)
        ctx[i] = 10 + 20 + i; /* earlier[21 .. 60) */
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(pr, ctx, 40, 8, &prop, &err), SD_OK);
    cr_assert_eq(prop.n, 8, "a 39-token match in the cache drafts all 8 (%d)", prop.n);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(prop.tokens[i], 10 + 60 + i);
    cr_assert_eq(sd_proposer_suffix_cache_hits(pr), 1);
    sd_proposer_free(pr);
    sd_suffix_cache_free(c);
}

Test(suffix_expected, parameter_checks) {
    sd_suffix_params p = expected_params(0.25f);
    sd_error err = {0};
    cr_assert_eq(sd_suffix_check_params(&p, &err), SD_OK);
    p.draft_cost = -1.0f;
    cr_assert_eq(sd_suffix_check_params(&p, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "draft_cost"), "%s", err.msg);
    p = expected_params(0.25f);
    p.rule = (sd_suffix_rule)7;
    cr_assert_eq(sd_suffix_check_params(&p, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "rule"), "%s", err.msg);
    cr_assert_eq(sd_suffix_default_params().rule, SD_SUFFIX_RULE_FACTOR);
}

/* ---- end to end ---- */

static sd_engine *open_engine(const char *target, float cost) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = target;
    ep.n_threads = 1;
    ep.kv_type = SD_TYPE_F32;
    ep.suffix.rule = SD_SUFFIX_RULE_EXPECTED;
    ep.suffix.draft_cost = cost;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

/* Greedy and Gumbel: every K 1..16 fixed, and adaptive, gives the target-alone tokens. */
Test(suffix_expected, generate_equals_target_alone) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    enum { N = 64 };
    const int32_t prompts[3][12] = {{1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9},
                                    {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50},
                                    {1, 90, 3, 77, 90, 3, 60, 61, 90, 3, 77, 90}};
    int64_t drafted = 0, accepted = 0;
    const float costs[2] = {0.05f, 0.3f};
    for (int ci = 0; ci < 2; ci++) {
        sd_engine *e = open_engine(t, costs[ci]);
        for (int mode = 0; mode < 2; mode++) /* greedy, Gumbel */
            for (int p = 0; p < 3; p++) {
                sd_gen_params gp = sd_gen_default_params();
                gp.n_predict = N;
                gp.samp.temp = mode ? 0.9f : 0.0f;
                gp.samp.spec = SD_SPEC_GUMBEL;
                gp.seed = 5 + (uint64_t)p;
                int32_t ref[N], got[N];
                sd_gen_stats st;
                const int32_t n_ref =
                    eu_generate(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompts[p], 12, ref, &st);
                for (int32_t k = 1; k <= SD_MAX_DRAFT + 1; k++) {
                    const sd_k_policy pol = k <= SD_MAX_DRAFT ? SD_K_FIXED : SD_K_ADAPTIVE;
                    const int32_t kk = k <= SD_MAX_DRAFT ? k : SD_MAX_DRAFT;
                    const int32_t n =
                        eu_generate(e, &gp, SD_DRAFT_SUFFIX, pol, kk, prompts[p], 12, got, &st);
                    cr_assert_eq(n, n_ref, "cost %g mode %d prompt %d K %d: %d tokens vs %d",
                                 (double)costs[ci], mode, p, k, n, n_ref);
                    cr_assert(memcmp(got, ref, (size_t)n * sizeof *got) == 0,
                              "cost %g mode %d prompt %d K %d: differs from target alone",
                              (double)costs[ci], mode, p, k);
                    drafted += st.n_drafted;
                    accepted += st.n_accepted;
                }
            }
        sd_engine_free(e);
    }
    fprintf(stderr, "  drafted %lld, accepted %lld\n", (long long)drafted, (long long)accepted);
    cr_assert_gt(accepted, 0, "no draft was ever accepted: the test proves little");
}

/* The batcher (serve) with the cross-request cache, K 16: every request's output is the
 * target-alone text, twice over the same prompts. */
Test(suffix_expected, batcher_with_the_cache_equals_target_alone) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *ref = open_engine(t, 0.1f);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = t;
    ep.n_threads = 1;
    ep.kv_type = SD_TYPE_F32;
    ep.models_only = 1;
    ep.suffix.rule = SD_SUFFIX_RULE_EXPECTED;
    ep.suffix.draft_cost = 0.1f;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.k_max = SD_MAX_DRAFT;
    bp.suffix_cache_bytes = 1 << 20;
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    enum { NP = 4, NPRED = 48 };
    int32_t prompts[NP][16];
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = NPRED;
    gp.samp.temp = 0.0f;
    for (int p = 0; p < NP; p++) {
        prompts[p][0] = 1;
        for (int i = 1; i < 16; i++)
            prompts[p][i] = 3 + (i * (p + 2) + 7 * p) % 29;
    }
    int64_t drafted_by_round[2] = {0, 0};
    eu_batcher_equals_generate(ref, b, &gp, &prompts[0][0], NP, 16, SD_DRAFT_SUFFIX, SD_MAX_DRAFT,
                               2, drafted_by_round, NULL);
    const int64_t drafted = drafted_by_round[0] + drafted_by_round[1];
    cr_assert_gt(drafted, 0, "nothing drafted: the test proves little");
    sd_batcher_free(b);
    sd_engine_free(e);
    sd_engine_free(ref);
}

/* generate --suffix-cost C: the expected rule, the target-alone tokens; a cost no draft can
 * repay (16 passes a drafted token) drafts nothing, by flag and by the config key
 * suffix_cost; bad values are one-line errors naming the flag or key. */
Test(suffix_expected, cli_flag_and_key) {
    char t[2048], d[2048], cmd[8192], cfg[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    const char *runs[4] = {"--draft-type none", "--draft-type suffix --suffix-cost 0.01",
                           "--draft-type suffix --suffix-cost 16", "CONFIG"};
    tu_path(cfg, sizeof cfg, g_dir, "sx.json");
    char json[4096];
    snprintf(json, sizeof json,
             "{\"target\": \"%s\", \"draft_type\": \"suffix\", \"suffix_cost\": 16}", t);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    char *outs[4];
    eu_cli_same_tokens(t, cfg, 8, runs, 4, outs);
    cr_assert_gt(eu_json_long(outs[1], "n_drafted"), 0, "--suffix-cost 0.01 drafted nothing");
    cr_assert_eq(eu_json_long(outs[2], "n_drafted"), 0, "--suffix-cost 16 was not applied");
    cr_assert_eq(eu_json_long(outs[3], "n_drafted"), 0, "the key suffix_cost was not applied");
    for (int i = 0; i < 4; i++)
        free(outs[i]);
    const char *bad[] = {"--suffix-cost 0", "--suffix-cost 17", "--suffix-cost x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "generate -m %s -p t5t6 -n 4 %s", t, bad[i]);
        tu_expect_cli_error(cmd, "--suffix-cost");
    }
    snprintf(json, sizeof json, "{\"target\": \"%s\", \"suffix_cost\": 0}", t);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    snprintf(cmd, sizeof cmd, "generate --config %s -p t5t6 -n 4", cfg);
    tu_expect_cli_error(cmd, "suffix_cost");
}

/* The adaptive controller decides on or off; a proposer that sizes its own drafts (suffix,
 * sd_proposer_sizes_itself) is then asked for the largest K, so a long match is not clamped
 * to the K the average acceptance favours: every drafting pass of the adaptive policy has
 * K = n_draft (or the budget's cap near the end), and the output is target alone's. */
Test(suffix_expected, adaptive_policy_lets_the_match_size_the_draft) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *e = open_engine(t, 0.1f);
    cr_assert(sd_proposer_sizes_itself(sd_engine_proposer_of(e, SD_DRAFT_SUFFIX)));
    cr_assert(!sd_proposer_sizes_itself(sd_engine_proposer_of(e, SD_DRAFT_NGRAM)));
    enum { N = 96, K = 12 };
    const int32_t prompt[12] = {1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9};
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = N;
    gp.samp.temp = 0.0f;
    sd_pass_record rec[N + 1];
    gp.pass_trace = rec;
    gp.pass_trace_cap = N + 1;
    int32_t ref[N], got[N];
    sd_gen_stats st;
    const int32_t n_ref = eu_generate(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompt, 12, ref, &st);
    const int32_t n = eu_generate(e, &gp, SD_DRAFT_SUFFIX, SD_K_ADAPTIVE, K, prompt, 12, got, &st);
    cr_assert_eq(n, n_ref);
    cr_assert(memcmp(got, ref, (size_t)n * sizeof *got) == 0, "adaptive suffix differs");
    int32_t on = 0, full = 0, gen = 0;
    for (int32_t i = 0; i < st.n_target_passes && i <= N; i++) {
        const int32_t cap = N - gen - 1; /* sd_step_cap_k: one pass never passes the budget */
        if (rec[i].k_chosen > 0) {
            on++;
            cr_assert_eq(rec[i].k_chosen, cap < K ? cap : K, "pass %d: K %d, expected %d", i,
                         rec[i].k_chosen, cap < K ? cap : K);
            full += rec[i].k_chosen == K;
        }
        gen += rec[i].n_accepted + 1;
    }
    cr_assert_gt(on, 0, "the controller never drafted: the test proves little");
    cr_assert_gt(full, 0);
    sd_engine_free(e);
}
