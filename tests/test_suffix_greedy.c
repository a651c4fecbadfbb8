/*
 * tests/test_suffix_greedy.c: the suffix proposer end to end. Greedy: every K (fixed 1..8,
 * adaptive) gives the target-alone tokens, on a random pair (sd_generate), the shipped
 * TinyStories pair and SmolLM2-135M (skipped when absent; through sd_engine_generate with
 * --draft-type suffix). Gumbel sampling: the same seed gives the target-alone text for
 * every K and policy (a one-hot draft token is accepted iff it is the target's keyed
 * Gumbel argmax at its position). The batcher's cross-request cache: outputs equal target
 * alone, and its memory bound held under a 1,000-request load.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/batcher_impl.h" /* the batcher's suffix cache, read in place */
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "engine_util.h"
#include "server_util.h" /* g_dir, the serve child and its requests */

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(suffix_greedy, .init = setup, .fini = teardown, .timeout = 900);

/* Every K in ks (fixed) and adaptive at the largest: the target-alone tokens. Returns the
 * suffix acceptance (accepted / drafted) over the runs, *drafted the drafted tokens. */
static double all_k_equal(sd_engine *e, const sd_gen_params *gp, const int32_t *prompt,
                          int32_t n_prompt, const int32_t *ks, int n_ks, const char *name,
                          int64_t *drafted) {
    int32_t *ref = malloc((size_t)gp->n_predict * sizeof *ref);
    int32_t *got = malloc((size_t)gp->n_predict * sizeof *got);
    cr_assert(ref && got);
    sd_gen_stats st;
    const int32_t n_ref =
        eu_generate(e, gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompt, n_prompt, ref, &st);
    int64_t d = 0, a = 0;
    for (int i = 0; i <= n_ks; i++) {
        const sd_k_policy pol = i < n_ks ? SD_K_FIXED : SD_K_ADAPTIVE;
        const int32_t k = i < n_ks ? ks[i] : ks[n_ks - 1];
        const int32_t n = eu_generate(e, gp, SD_DRAFT_SUFFIX, pol, k, prompt, n_prompt, got, &st);
        cr_assert_eq(n, n_ref, "%s suffix %s K=%d: %d tokens, target alone %d", name,
                     sd_k_policy_name(pol), k, n, n_ref);
        for (int32_t j = 0; j < n; j++)
            cr_assert_eq(got[j], ref[j], "%s suffix %s K=%d: token %d is %d, target alone %d", name,
                         sd_k_policy_name(pol), k, j, got[j], ref[j]);
        cr_assert_eq(st.n_drafted_lookup, st.n_drafted, "suffix drafts count as lookup drafts");
        cr_assert_leq(st.n_accepted, st.n_drafted);
        d += st.n_drafted;
        a += st.n_accepted;
    }
    free(ref);
    free(got);
    *drafted = d;
    return d ? (double)a / (double)d : 0.0;
}

static sd_engine *open_engine(const char *target, const char *draft) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = target;
    ep.draft = draft;
    ep.n_threads = 1;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    cr_assert_str_eq(sd_proposer_name(sd_engine_proposer_of(e, SD_DRAFT_SUFFIX)), "suffix");
    return e;
}

/* An engine holding only the models of target (1 thread, KV cache kv_type), for a batcher. */
static sd_engine *open_models_only(const char *target, sd_type kv_type) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = target;
    ep.n_threads = 1;
    ep.kv_type = kv_type;
    ep.models_only = 1;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

Test(suffix_greedy, random_pair_every_k) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *e = open_engine(t, d);
    const int32_t prompts[3][12] = {{1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9},
                                    {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50},
                                    {1, 90, 3, 77, 90, 3, 60, 61, 90, 3, 77, 90}};
    const int32_t ks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = 64;
    gp.samp.temp = 0.0f;
    int64_t drafted = 0, all = 0;
    double acc = 0.0;
    for (int p = 0; p < 3; p++) {
        char name[32];
        snprintf(name, sizeof name, "prompt %d", p);
        acc += all_k_equal(e, &gp, prompts[p], 12, ks, 8, name, &drafted);
        all += drafted;
    }
    fprintf(stderr, "  random pair: suffix greedy acceptance %.3f (mean of 3 prompts)\n", acc / 3);
    cr_assert_gt(all, 0, "the suffix proposer never drafted: the test proves little");
    cr_assert_gt(acc, 0.0, "no suffix draft was ever accepted: the test proves little");
    sd_engine_free(e);
}

static void text_prompts(sd_engine *e, const char *const *texts, int n_texts, int32_t n_predict,
                         const int32_t *ks, int n_ks, const char *what) {
    const sd_vocab *v = sd_engine_vocab(e);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.samp.temp = 0.0f;
    for (int i = 0; i < n_texts; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(v, texts[i], strlen(texts[i]), 1, &ids, &n, &err), 0, "%s",
                     err.msg);
        char name[64];
        snprintf(name, sizeof name, "%s '%.20s...'", what, texts[i]);
        int64_t drafted = 0;
        const double acc = all_k_equal(e, &gp, ids, (int32_t)n, ks, n_ks, name, &drafted);
        fprintf(stderr, "  %s: suffix greedy acceptance %.3f of %lld drafted\n", name, acc,
                (long long)drafted);
        free(ids);
    }
}

Test(suffix_greedy, shipped_tinystories_pair) {
    const char *tp = SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf";
    const char *dp = SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf";
    tu_need_path(tp, "the shipped TinyStories pair");
    tu_need_path(dp, "the shipped TinyStories pair");
    sd_engine *e = open_engine(tp, dp);
    const char *texts[] = {
        "Once upon a time",
        "Lily had a red ball. She liked to play with the red ball in the park. One day, Lily",
        "Rewrite the story: Tom saw a big dog. The dog was brown. Tom gave the dog a bone. "
        "Story: Tom saw",
    };
    const int32_t ks[6] = {1, 2, 3, 4, 6, 8};
    text_prompts(e, texts, 3, 96, ks, 6, "tinystories");
    sd_engine_free(e);
}

Test(suffix_greedy, smollm2) {
    const char *env = getenv("SD_SMOL_MODEL");
    const char *mp =
        env && *env ? env : SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf";
    tu_need_path(mp, "fetched by `bash scripts/get_models.sh`");
    sd_engine *e = open_engine(mp, NULL);
    const char *texts[] = {
        "Copy this text exactly: The quick brown fox jumps over the lazy dog. The dog sleeps "
        "under the old tree by the river. Copy: The quick brown fox",
    };
    const int32_t ks[3] = {2, 4, 8};
    text_prompts(e, texts, 1, 48, ks, 3, "smollm2");
    sd_engine_free(e);
}

Test(suffix_greedy, gumbel_same_seed_equals_target_alone) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *e = open_engine(t, d);
    enum { N = 48 };
    const int32_t prompt[12] = {1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9};
    int64_t drafted = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = N;
        gp.samp.temp = 0.9f;
        gp.samp.top_k = 0;
        gp.samp.top_p = 0.95f;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.seed = seed;
        int32_t ref[N], got[N];
        sd_gen_stats st;
        const int32_t n_ref =
            eu_generate(e, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompt, 12, ref, &st);
        const sd_k_policy pols[] = {SD_K_FIXED, SD_K_ADAPTIVE, SD_K_SWEEP};
        for (int pi = 0; pi < 3; pi++)
            for (int32_t k = 1; k <= 8; k += (k < 4 ? 1 : 4)) {
                const int32_t n =
                    eu_generate(e, &gp, SD_DRAFT_SUFFIX, pols[pi], k, prompt, 12, got, &st);
                cr_assert_eq(n, n_ref, "seed %llu %s K %d: %d tokens vs %d",
                             (unsigned long long)seed, sd_k_policy_name(pols[pi]), k, n, n_ref);
                for (int32_t i = 0; i < n; i++)
                    cr_assert_eq(got[i], ref[i], "seed %llu %s K %d: token %d differs",
                                 (unsigned long long)seed, sd_k_policy_name(pols[pi]), k, i);
                drafted += st.n_drafted;
            }
    }
    cr_assert_gt(drafted, 0, "the suffix proposer never drafted: the test proves little");
    sd_engine_free(e);
}

/* generate --draft-type suffix: the greedy tokens of --draft-type none; --suffix-factor
 * and the config key suffix_factor take effect (a factor too small to draft a token for
 * any match drafts nothing); bad values (and serve's --suffix-cache-mb) are one-line
 * errors naming the flag or key. */
Test(suffix_greedy, cli_flags_and_keys) {
    char t[2048], d[2048], cmd[8192], cfg[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    const char *runs[4] = {"--draft-type none", "--draft-type suffix",
                           "--draft-type suffix --suffix-factor 0.000001", "CONFIG"};
    tu_path(cfg, sizeof cfg, g_dir, "sx.json");
    char json[4096];
    snprintf(json, sizeof json,
             "{\"target\": \"%s\", \"draft_type\": \"suffix\", \"suffix_factor\": 0.000001, "
             "\"suffix_min_prob\": 0.5}",
             t);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    char *outs[4];
    eu_cli_same_tokens(t, cfg, 4, runs, 4, outs);
    cr_assert(strstr(outs[1], "\"draft_type\":\"suffix\"") ||
                  strstr(outs[1], "\"draft_type\": \"suffix\""),
              "%s", outs[1]);
    cr_assert_gt(eu_json_long(outs[1], "n_drafted"), 0, "suffix drafted nothing");
    cr_assert_eq(eu_json_long(outs[2], "n_drafted"), 0, "--suffix-factor was not applied");
    cr_assert_eq(eu_json_long(outs[3], "n_drafted"), 0, "the key suffix_factor was not applied");
    for (int i = 0; i < 4; i++)
        free(outs[i]);
    const char *bad[][2] = {{"--suffix-factor 0", "--suffix-factor"},
                            {"--suffix-factor 65", "--suffix-factor"},
                            {"--suffix-min-prob 1.5", "--suffix-min-prob"},
                            {"--draft-type suffixes", "--draft-type"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "generate -m %s -p t5t6 -n 4 %s", t, bad[i][0]);
        tu_expect_cli_error(cmd, bad[i][1]);
    }
    snprintf(cmd, sizeof cmd, "serve -m %s --port 0 --suffix-cache-mb -1", t);
    tu_expect_cli_error(cmd, "--suffix-cache-mb");
    const char *keys[][2] = {{"\"suffix_factor\": 0", "suffix_factor"},
                             {"\"suffix_min_prob\": -1", "suffix_min_prob"},
                             {"\"suffix_factor\": \"big\"", "suffix_factor"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        snprintf(json, sizeof json, "{\"target\": \"%s\", %s}", t, keys[i][0]);
        cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
        snprintf(cmd, sizeof cmd, "generate --config %s -p t5t6 -n 4", cfg);
        tu_expect_cli_error(cmd, keys[i][1]);
    }
}

/* ---- the batcher with the cross-request cache ---- */

/* Requests of draft type suffix through a batcher with a suffix cache, twice over the
 * same prompts: every output is the target-alone text, and the second round, whose
 * answers are in the cache, accepts more drafted tokens. */
Test(suffix_greedy, batcher_with_the_suffix_cache) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *ref = open_engine(t, NULL);
    sd_engine *e = open_models_only(t, SD_TYPE_F32);
    sd_error err = {0};
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
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
    int64_t accepted[2] = {0, 0};
    eu_batcher_equals_generate(ref, b, &gp, &prompts[0][0], NP, 16, SD_DRAFT_SUFFIX, 4, 2, NULL,
                               accepted);
    fprintf(stderr,
            "  batcher: accepted %lld drafted tokens without the answers cached, %lld "
            "with\n",
            (long long)accepted[0], (long long)accepted[1]);
    cr_assert_gt(accepted[1], accepted[0], "the cache of the first round's answers was not used");
    sd_batcher_free(b);
    sd_engine_free(e);
    sd_engine_free(ref);
}

static uint64_t next_rand(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* The cross-request cache's memory bound under a 1,000-request load: suffix requests two at
 * a time through a batcher of two slots with a 48 KiB cache, their prompts built of shared
 * phrases (so the cache is consulted and drafts). After every pair of requests the cache's
 * allocation is what it was at creation and within the budget, its tokens and separators
 * within its capacity; it fills up and drops documents over and over; and every 25th
 * request's output equals its prompt's target-alone output (an engine without drafting). */
Test(suffix_greedy, cache_memory_bound_under_1000_requests) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    sd_engine *ref = open_engine(t, NULL);
    sd_engine *e = open_models_only(t, sd_engine_default_params().kv_type);
    sd_error err = {0};
    const size_t budget = 48 << 10;
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.suffix_cache_bytes = budget;
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    const sd_suffix_cache *c = b->suffix_cache;
    cr_assert_not_null(c);
    const size_t bytes = sd_suffix_cache_bytes(c);
    const int32_t cap = sd_suffix_cache_capacity(c);
    cr_assert_leq(bytes, budget);
    const int32_t nv = sd_model_hparams(sd_engine_target(e))->n_vocab;
    enum { N_REQ = 1000, N_PHRASE = 24, PHRASE = 6, NPRED = 10, MAXP = 64 };
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = NPRED;
    gp.samp.temp = 0.0f;
    gp.draft_type = SD_DRAFT_SUFFIX;
    gp.k_policy = SD_K_FIXED;
    gp.n_draft = 4;
    uint64_t s = 0x5eed;
    int32_t prompts[2][MAXP], n_p[2];
    int64_t drops = 0, checked = 0, drafted = 0, accepted = 0, max_docs = 0;
    int32_t docs_before = 0;
    for (int r = 0; r < N_REQ; r += 2) {
        eu_out o[2];
        for (int q = 0; q < 2; q++) {
            /* BOS, then 2..8 phrases of PHRASE ids each (from N_PHRASE fixed ones) */
            int32_t n = 0;
            prompts[q][n++] = 1;
            const int n_ph = 2 + (int)(next_rand(&s) % 7);
            for (int ph = 0; ph < n_ph; ph++) {
                const int32_t which = (int32_t)(next_rand(&s) % N_PHRASE);
                for (int32_t i = 0; i < PHRASE; i++)
                    prompts[q][n++] = 3 + (which * 7 + i * 13 + which * i) % (nv - 3);
            }
            n_p[q] = n;
            memset(&o[q], 0, sizeof o[q]);
            eu_submit(b, prompts[q], n, &gp, eu_collect, &o[q]);
        }
        eu_drain(b, 0);
        const int32_t docs = sd_suffix_cache_n_docs(c);
        cr_assert_eq(sd_suffix_cache_bytes(c), bytes, "request %d: the cache's allocation moved",
                     r);
        cr_assert_leq(sd_suffix_cache_n_tokens(c) + docs, cap, "request %d: over capacity", r);
        if (docs < docs_before + 2) drops++; /* making room dropped earlier documents */
        docs_before = docs;
        if (docs > max_docs) max_docs = docs;
        for (int q = 0; q < 2; q++) {
            cr_assert(o[q].done, "request %d did not finish", r + q);
            drafted += o[q].st.n_drafted;
            accepted += o[q].st.n_accepted;
            if ((r + q) % 25) continue;
            int32_t want[NPRED];
            sd_gen_stats st;
            const int32_t nw =
                eu_generate(ref, &gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompts[q], n_p[q], want, &st);
            cr_assert_eq(o[q].n, nw, "request %d: %d tokens, target alone %d", r + q, o[q].n, nw);
            for (int32_t i = 0; i < nw; i++)
                cr_assert_eq(o[q].toks[i], want[i], "request %d: token %d differs", r + q, i);
            checked++;
        }
    }
    int64_t hits = 0;
    for (int i = 0; i < bp.n_parallel; i++)
        hits += sd_proposer_suffix_cache_hits(b->suffix[i]);
    fprintf(stderr,
            "  cache of %zu bytes (budget %zu): %d positions, at most %lld documents, %lld "
            "rounds dropped some; %lld drafted, %lld accepted, %lld cache proposals\n",
            bytes, budget, cap, (long long)max_docs, (long long)drops, (long long)drafted,
            (long long)accepted, (long long)hits);
    cr_assert_eq(checked, N_REQ / 25);
    cr_assert_gt(drops, N_REQ / 20, "the cache rarely filled: the bound was hardly exercised");
    cr_assert_gt(hits, 0, "the cache never drafted: it was not used");
    cr_assert_gt(accepted, 0);
    sd_batcher_free(b);
    sd_engine_free(e);
    sd_engine_free(ref);
}

/* ---- --suffix-resume and the key suffix_resume reach the proposer ---- */

typedef struct replay_counts {
    long passes, drafted, accepted, byte_hits;
} replay_counts;

/* The suffix proposer with params sp replayed over the greedy output out[0 .. n_out) of
 * prompt[0 .. n_prompt), as a fixed-K generation drafts (greedy speculative decoding emits
 * the target's own tokens, so what is accepted follows from them): each pass proposes up to
 * min(k, n_out - generated - 1) tokens, accepts the longest prefix equal to out, emits one
 * more and commits. Passes: those that emit tokens (the prompt's last token is the first
 * one's row, as generate and serve count them). gv: the target's token bytes (byte-level
 * matching, as the engine attaches them), NULL: none. */
static replay_counts replay_suffix(const sd_suffix_params *sp, int32_t n_vocab,
                                   const sd_grammar_vocab *gv, const int32_t *prompt,
                                   int32_t n_prompt, const int32_t *out, int32_t n_out, int32_t k) {
    sd_suffix_params q = *sp;
    q.n_ctx = n_prompt + n_out + 1;
    sd_proposer *p = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_suffix_init(&q, n_vocab, &p, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_proposer_suffix_set_bytes(p, gv, &err), SD_OK, "%s", err.msg);
    int32_t *ctx = malloc((size_t)(n_prompt + n_out) * sizeof *ctx);
    cr_assert_not_null(ctx);
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    replay_counts c = {0, 0, 0, 0};
    int32_t n = n_prompt, gen = 0;
    while (gen < n_out) {
        const int32_t kk = k < n_out - gen - 1 ? k : n_out - gen - 1;
        int32_t a = 0;
        if (kk > 0) {
            sd_proposal prop;
            memset(&prop, 0, sizeof prop);
            cr_assert_eq(sd_proposer_propose(p, ctx, n, kk, &prop, &err), SD_OK, "%s", err.msg);
            cr_assert_leq(prop.n, kk);
            while (a < prop.n && prop.tokens[a] == out[gen + a])
                a++;
            c.drafted += prop.n;
        }
        const int32_t e = a + 1 < n_out - gen ? a + 1 : n_out - gen;
        memcpy(ctx + n, out + gen, (size_t)e * sizeof *ctx);
        n += e;
        gen += e;
        c.accepted += a;
        c.passes++;
        sd_proposer_commit(p, ctx, n);
    }
    c.byte_hits = sd_proposer_suffix_byte_hits(p);
    sd_proposer_free(p);
    free(ctx);
    return c;
}

/* The ids of "tokens": [...] in a JSON text (*ids malloc'd); their count. */
static int32_t json_tokens(const char *json, int32_t **ids) {
    const char *a = strstr(json, "\"tokens\":[");
    cr_assert_not_null(a, "%s", json);
    a += strlen("\"tokens\":[");
    int32_t n = 0, cap = 64;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    cr_assert_not_null(v);
    while (*a && *a != ']') {
        char *end = NULL;
        const long x = strtol(a, &end, 10);
        cr_assert_neq(end, a, "not a token list: %s", a);
        if (n == cap) {
            cap *= 2;
            v = realloc(v, (size_t)cap * sizeof *v);
            cr_assert_not_null(v);
        }
        v[n++] = (int32_t)x;
        a = end;
        if (*a == ',') a++;
    }
    *ids = v;
    return n;
}

/* generate, bench's settings and serve all read --suffix-resume N (and the config key
 * suffix_resume) into the suffix proposer: on the random pair, the passes, drafted and
 * accepted tokens of each run equal a replay of the suffix proposer with that resume over
 * the run's own greedy tokens (computed here through the draft face, not read from the
 * run), for resume 0 (off), 2 (the default) and 16; the replays of 0 and 16 differ (else a
 * flag that never arrived would pass), and every run's tokens are target alone's. Bad
 * values are one-line errors naming the flag or key. */
Test(suffix_greedy, suffix_resume_reaches_the_proposer) {
    char t[2048], d[2048], cmd[8192], cfg[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    const char *prompt = "t26t47t41t29t65t13t26t47t41t29t65t43";
    enum { N = 96, K = 8 }; /* the prompt and N fit the random pair's 128 positions */
    sd_engine *e = open_engine(t, NULL);
    const int32_t n_vocab = sd_vocab_n_tokens(sd_engine_vocab(e));
    int32_t *pids = NULL;
    const int32_t n_prompt = eu_prompt(e, prompt, &pids);
    const sd_grammar_vocab *gv = NULL; /* the replay's byte-level matching: the engine's */
    sd_error gerr = {0};
    cr_assert_eq(sd_engine_grammar_vocab(e, &gv, &gerr), SD_OK, "%s", gerr.msg);
    tu_path(cfg, sizeof cfg, g_dir, "resume.json");
    char json[4096];
    snprintf(json, sizeof json,
             "{\"target\": \"%s\", \"draft_type\": \"suffix\", \"suffix_resume\": 0}", t);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    /* the model or the config, the flags, the resume the proposer must then have (-1: no
     * drafting, the reference) */
    const struct {
        int config;
        const char *flags;
        int32_t resume;
    } runs[] = {{0, "--draft-type none", -1},
                {0, "--draft-type suffix", 2},
                {0, "--draft-type suffix --suffix-resume 0", 0},
                {0, "--draft-type suffix --suffix-resume 16", 16},
                {1, "", 0},
                {1, "--suffix-resume 16", 16}};
    int32_t *ref = NULL, n_ref = 0;
    replay_counts want[SD_MAX_DRAFT + 1];
    int have[SD_MAX_DRAFT + 1] = {0};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        char args[4096];
        snprintf(args, sizeof args, "%s %s %s", runs[r].config ? "--config" : "-m",
                 runs[r].config ? cfg : t, runs[r].flags);
        snprintf(cmd, sizeof cmd,
                 "%s generate %s -t 1 --no-display-prompt -p %s -n %d --temp 0 --ignore-eos -k %d "
                 "--draft-policy fixed --json",
                 SD_BINARY, args, prompt, N, K);
        char *out = NULL, *err = NULL;
        cr_assert_eq(tu_run(cmd, &out, &err), 0, "%s: %s", cmd, err);
        free(err);
        int32_t *ids = NULL;
        const int32_t n = json_tokens(out, &ids);
        cr_assert_eq(n, N, "%s: %d tokens", runs[r].flags, n);
        cr_assert_eq(eu_json_long(out, "n_prompt"), n_prompt, "%s: the prompt's tokens",
                     runs[r].flags);
        if (!ref) {
            ref = ids;
            n_ref = n;
            free(out);
            continue;
        }
        for (int32_t i = 0; i < n; i++)
            cr_assert_eq(ids[i], ref[i], "%s: token %d differs from target alone", runs[r].flags,
                         i);
        free(ids);
        const int32_t rs = runs[r].resume;
        if (!have[rs]) {
            sd_suffix_params sp = sd_suffix_default_params();
            sp.resume = rs;
            want[rs] = replay_suffix(&sp, n_vocab, gv, pids, n_prompt, ref, n_ref, K);
            have[rs] = 1;
        }
        cr_assert_eq(eu_json_long(out, "n_target_passes"), want[rs].passes,
                     "%s: %ld passes, the replay with resume %d %ld", runs[r].flags,
                     eu_json_long(out, "n_target_passes"), rs, want[rs].passes);
        cr_assert_eq(eu_json_long(out, "n_drafted"), want[rs].drafted,
                     "%s: %ld drafted, the replay with resume %d %ld", runs[r].flags,
                     eu_json_long(out, "n_drafted"), rs, want[rs].drafted);
        cr_assert_eq(eu_json_long(out, "n_accepted"), want[rs].accepted,
                     "%s: %ld accepted, the replay with resume %d %ld", runs[r].flags,
                     eu_json_long(out, "n_accepted"), rs, want[rs].accepted);
        free(out);
    }
    fprintf(stderr,
            "  --suffix-resume 0 / 2 / 16: %ld / %ld / %ld drafted, %ld / %ld / %ld passes, %ld / "
            "%ld / %ld byte-level proposals\n",
            want[0].drafted, want[2].drafted, want[16].drafted, want[0].passes, want[2].passes,
            want[16].passes, want[0].byte_hits, want[2].byte_hits, want[16].byte_hits);
    cr_assert(want[0].drafted != want[16].drafted || want[0].passes != want[16].passes,
              "resume 0 and 16 draft alike on this prompt: the test proves nothing");
    /* serve: the same request's statistics with each server's --suffix-resume */
    char body[1024];
    snprintf(body, sizeof body,
             "{\"prompt\": \"%s\", \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": true}",
             prompt, N);
    const int32_t srs[2] = {0, 16};
    for (int i = 0; i < 2; i++) {
        srv s;
        char args[2560];
        snprintf(args, sizeof args,
                 "-m %s -np 1 -k %d --draft-type suffix --draft-policy fixed --suffix-resume %d", t,
                 K, srs[i]);
        srv_start(&s, args);
        json_t *j = http_json(&s, "POST", "/v1/completions", body, 200);
        json_t *sp = json_object_get(j, "speculative");
        cr_assert_not_null(sp);
        cr_assert_eq(json_integer_value(json_object_get(sp, "drafted")), want[srs[i]].drafted,
                     "serve --suffix-resume %d: %lld drafted, the replay %ld", srs[i],
                     (long long)json_integer_value(json_object_get(sp, "drafted")),
                     want[srs[i]].drafted);
        cr_assert_eq(json_integer_value(json_object_get(sp, "accepted")), want[srs[i]].accepted);
        cr_assert_eq(json_integer_value(json_object_get(sp, "target_passes")), want[srs[i]].passes);
        json_decref(j);
        srv_stop_ok(&s);
    }
    free(ref);
    free(pids);
    sd_engine_free(e);
    const char *bad[] = {"--suffix-resume 17", "--suffix-resume -1", "--suffix-resume two"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "generate -m %s -p t5t6 -n 4 %s", t, bad[i]);
        tu_expect_cli_error(cmd, "--suffix-resume");
    }
    snprintf(cmd, sizeof cmd, "serve -m %s --port 0 --suffix-resume 17", t);
    tu_expect_cli_error(cmd, "--suffix-resume");
    const char *keys[] = {"\"suffix_resume\": 17", "\"suffix_resume\": -1",
                          "\"suffix_resume\": 1.5", "\"suffix_resume\": \"2\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        snprintf(json, sizeof json, "{\"target\": \"%s\", %s}", t, keys[i]);
        cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
        snprintf(cmd, sizeof cmd, "generate --config %s -p t5t6 -n 4", cfg);
        tu_expect_cli_error(cmd, "suffix_resume");
    }
}
