/*
 * tests/test_golden.c: the same request through both clients of the engine gives the
 * same tokens and the same statistics. One path is sd_engine_generate (specdec generate's:
 * a batcher of one sequence, runtime/engine/gen_batch.c), the other the batcher (specdec
 * serve's, several slots, run in-process as tests/test_batcher.c does); greedy and
 * Gumbel cases must also give the ids of the same request without a draft, and the
 * three_clients, sweep and context-stop tests compare with engine_util.h's independent
 * target-alone references (the old sd_generate loop is no longer a reference here). For greedy,
 * Gumbel and rejection sampling, n-gram, LLM and chained drafts and none, penalties, the confidence
 * cut-off, K fixed: the emitted ids, the stop reason, and the counts (generated, drafted, accepted,
 * target passes, the stop token, K histogram, per-position counts) must be equal, for a request
 * that finds its prompt in the batcher's prefix cache as for one that does not (each
 * request is served twice); the LLM cases also with a trimmed draft head in both clients,
 * the n-gram cases also with a lookup cache (sd_ngram_cache) in both.
 * With the adaptive K (greedy and Gumbel: the same ids, stop and stop token), each
 * client's K at every pass must be the one controller's, replayed from the client's own
 * pass records. Neither side is the reference of the other's text beyond that: greedy
 * output is checked against target-alone decoding elsewhere (test_spec, test_batcher).
 *
 * Also sd_stats_add (figures over several runs from the pooled counts).
 *
 * Pairs: the shipped TinyStories pair of models/ (runs everywhere) and SmolLM2-135M
 * with the project's draft (configs/smollm2-135m-pair.json; skipped when
 * models/downloaded lacks the target).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "engine_util.h"

#define TINY_T SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define TINY_D SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"
#define SMOL_T SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf"
#define SMOL_D SD_SOURCE_DIR "/models/smollm2-draft-q8_0.gguf"
#define MAXOUT 128
#define N_CTX  512

TestSuite(golden, .timeout = 900);

typedef struct got {
    int32_t toks[MAXOUT];
    int32_t n;
    int done;
    sd_stop_reason stop;
    sd_gen_stats st;
    char text[4096]; /* the streamed text */
    size_t len;
    sd_token_logprob lp[MAXOUT]; /* the events' logprobs (requests that ask) */
    int32_t n_lp;
} got;

static void add_text(got *g, const char *t, size_t len) {
    cr_assert_lt(g->len + len, sizeof g->text);
    memcpy(g->text + g->len, t, len);
    g->len += len;
    g->text[g->len] = '\0';
}

static int collect(void *user, const sd_req_event *ev) {
    got *g = user;
    for (int32_t i = 0; i < ev->n_tokens && g->n < MAXOUT; i++)
        g->toks[g->n++] = ev->tokens[i];
    for (int32_t i = 0; ev->logprobs && i < ev->n_tokens && g->n_lp < MAXOUT; i++)
        g->lp[g->n_lp++] = ev->logprobs[i];
    add_text(g, ev->text, ev->len);
    if (ev->done) {
        g->done = 1;
        g->stop = ev->stop;
        g->st = *ev->stats;
    }
    return 0;
}

static sd_engine *open_pair(const char *t, const char *d, const char *head) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = t;
    ep.draft = d;
    ep.draft_head = head;
    ep.n_threads = 2;
    ep.n_ctx = N_CTX;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

/* The request of one case. */
typedef struct gcase {
    const char *name;
    sd_draft_type type;
    float temp;
    sd_spec_sampling spec;
    float repeat_penalty;
    float p_min;  /* the LLM draft's confidence cut-off (generate's and serve's 0.75) */
    int adaptive; /* K by the adaptive controller (else fixed) */
} gcase;

static sd_gen_params params_of(const gcase *c, int32_t n_predict) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = 4;
    gp.k_policy = c->adaptive ? SD_K_ADAPTIVE : SD_K_FIXED;
    gp.draft_type = c->type;
    gp.seed = 7;
    gp.samp.temp = c->temp;
    gp.samp.spec = c->spec;
    if (c->repeat_penalty > 0.0f) gp.samp.repeat_penalty = c->repeat_penalty;
    gp.draft_p_min = c->p_min;
    gp.draft_min = c->p_min > 0.0f ? 1 : 0;
    return gp;
}

/* The batcher finished and gave generate's na ids ga. */
static void expect_same_ids(const char *what, const int32_t *ga, int32_t na, const got *b) {
    cr_assert(b->done, "%s: the batcher did not finish", what);
    int32_t diff = -1;
    for (int32_t i = 0; i < na && i < b->n && diff < 0; i++)
        if (ga[i] != b->toks[i]) diff = i;
    cr_expect(diff < 0 && na == b->n,
              "%s: generate gave %d tokens, serve %d; first difference at %d", what, na, b->n,
              diff);
}

static void compare(const char *what, const int32_t *ga, int32_t na, const sd_gen_stats *a,
                    const got *b) {
    expect_same_ids(what, ga, na, b);
    cr_expect_eq(a->stop, b->stop, "%s: stop %s vs %s", what, sd_stop_reason_str(a->stop),
                 sd_stop_reason_str(b->stop));
    const sd_gen_stats *s = &b->st;
    cr_expect_eq(a->n_generated, s->n_generated, "%s: generated %d vs %d", what, a->n_generated,
                 s->n_generated);
    cr_expect_eq(a->n_drafted, s->n_drafted, "%s: drafted %d vs %d", what, a->n_drafted,
                 s->n_drafted);
    cr_expect_eq(a->n_accepted, s->n_accepted, "%s: accepted %d vs %d", what, a->n_accepted,
                 s->n_accepted);
    cr_expect_eq(a->n_target_passes, s->n_target_passes, "%s: passes %d vs %d", what,
                 a->n_target_passes, s->n_target_passes);
    cr_expect_eq(a->n_stop_tokens, s->n_stop_tokens, "%s: stop tokens %d vs %d", what,
                 a->n_stop_tokens, s->n_stop_tokens);
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++)
        cr_expect_eq(a->k_hist[k], s->k_hist[k], "%s: passes at K = %d: %d vs %d", what, k,
                     a->k_hist[k], s->k_hist[k]);
    for (int32_t i = 0; i < SD_MAX_DRAFT; i++) {
        cr_expect_eq(a->drafted_at[i], s->drafted_at[i], "%s: drafted at %d", what, i);
        cr_expect_eq(a->accepted_at[i], s->accepted_at[i], "%s: accepted at %d", what, i);
    }
    cr_expect_eq(a->n_drafted_lookup, s->n_drafted_lookup, "%s: lookup drafted", what);
    cr_expect_eq(sd_stats_tokens_per_pass(a), sd_stats_tokens_per_pass(s), "%s: tokens per pass",
                 what);
}

/* The adaptive K: the K of every pass of a client must be the one controller's, replayed
 * here from the client's own pass records (what it measured and verified, the controller
 * fed as the client fed it: the timings differ between runs, so the Ks may too, but not
 * the rule that picks them). Alone in its pass the batcher's sequence uses the controller
 * as generate does (tests/test_adaptive_batch.c: batch mode). */
static void replay_k(const char *what, const char *client, sd_engine *e, const sd_gen_params *gp,
                     const sd_pass_record *rec, int32_t n) {
    sd_adaptive_params ap = sd_adaptive_default_params();
    ap.k_max = gp->n_draft;
    ap.draft_prior = sd_engine_draft_prior(e, gp->draft_type);
    sd_adaptive a;
    sd_error err = {0};
    cr_assert_eq(sd_adaptive_init(&a, &ap, &err), SD_OK, "%s", err.msg);
    cr_assert_gt(n, 0, "%s, %s: no pass recorded", what, client);
    for (int32_t i = 0; i < n; i++) {
        const int32_t k = sd_adaptive_next_k(&a);
        cr_assert_eq(rec[i].k_policy, k, "%s, %s: pass %d drafted for K %d, the controller's %d",
                     what, client, i, rec[i].k_policy, k);
        cr_assert_leq(rec[i].k_chosen, k, "%s, %s: pass %d", what, client, i);
        sd_adaptive_observe(&a, rec[i].n_drafted, rec[i].n_accepted, rec[i].t_draft_ms,
                            rec[i].t_pass_ms);
    }
}

static void compare_adaptive(const char *what, const int32_t *ga, int32_t na, const sd_gen_stats *a,
                             const got *b) {
    expect_same_ids(what, ga, na, b);
    cr_expect_eq(a->stop, b->stop, "%s: stop", what);
    cr_expect_eq(a->n_stop_tokens, b->st.n_stop_tokens, "%s: stop tokens", what);
}

#define MAXPASS (MAXOUT + 8)

/* head: a trimmed draft head file for both clients (then only the cases that draft with
 * the LLM run), or NULL; cache_doc: a text whose tokens make a lookup cache attached to
 * both clients' n-gram proposers (then only the n-gram cases run), or NULL. */
static void run_pair_ex(const char *t, const char *d, const char *head, const char *cache_doc,
                        const char *const *prompts, int n_prompts, int32_t n_predict) {
    static const gcase cases[] = {
        {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"greedy ngram", SD_DRAFT_NGRAM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel llm", SD_DRAFT_LLM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel ngram", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"rejection llm", SD_DRAFT_LLM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
        {"rejection ngram", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
        {"penalties llm", SD_DRAFT_LLM, 0.7f, SD_SPEC_REJECTION, 1.3f, 0.0f, 0},
        {"penalties greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 1.3f, 0.0f, 0},
        {"greedy llm p-min", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.75f, 0},
        {"rejection llm p-min", SD_DRAFT_LLM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.75f, 0},
        {"greedy ngram+llm", SD_DRAFT_NGRAM_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"rejection ngram+llm", SD_DRAFT_NGRAM_LLM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
        {"gumbel ngram+llm", SD_DRAFT_NGRAM_LLM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"penalties ngram+llm p-min", SD_DRAFT_NGRAM_LLM, 0.7f, SD_SPEC_REJECTION, 1.3f, 0.75f, 0},
        {"greedy suffix+llm", SD_DRAFT_SUFFIX_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"rejection suffix+llm", SD_DRAFT_SUFFIX_LLM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
        {"target alone", SD_DRAFT_NONE, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        /* Adaptive K: greedy and Gumbel sampling emit the same tokens whatever the K. */
        {"greedy llm adaptive", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 1},
        {"gumbel ngram adaptive", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 1},
        {"greedy ngram+llm adaptive", SD_DRAFT_NGRAM_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 1},
    };
    static sd_pass_record trace_g[MAXPASS], trace_b[MAXPASS];
    sd_engine *e = open_pair(t, d, head);
    sd_batcher_params bp = sd_batcher_default_params();
    sd_ngram_cache *cache = NULL;
    if (cache_doc) {
        sd_error e0 = {0};
        sd_prompt_spec ps = {0};
        ps.text = cache_doc;
        ps.len = strlen(cache_doc);
        int32_t *doc = NULL, n_doc = 0;
        cr_assert_eq(sd_prompt_tokenize(sd_engine_vocab(e), &ps, &doc, &n_doc, &e0), SD_OK);
        cr_assert_eq(sd_ngram_cache_init(sd_draft_vocab_fingerprint(sd_engine_vocab(e)),
                                         sd_vocab_n_tokens(sd_engine_vocab(e)),
                                         &sd_engine_params_of(e)->ngram, 0, &cache, &e0),
                     SD_OK, "%s", e0.msg);
        cr_assert_eq(sd_ngram_cache_add(cache, doc, n_doc, &e0), SD_OK, "%s", e0.msg);
        free(doc);
        cr_assert_eq(sd_engine_set_lookup_cache(e, cache, &e0), SD_OK, "%s", e0.msg);
        bp.lookup_cache = cache;
    }
    bp.n_parallel = 1;
    bp.prefix_cache = 1; /* the second run of a request reuses the first one's blocks */
    bp.kv_block = 4;     /* blocks the short prompts fill (the cache keeps whole blocks) */
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    for (int p = 0; p < n_prompts; p++) {
        sd_prompt_spec ps = {0};
        ps.text = prompts[p];
        ps.len = strlen(prompts[p]);
        int32_t *ids = NULL, n_ids = 0;
        cr_assert_eq(sd_prompt_tokenize(sd_engine_vocab(e), &ps, &ids, &n_ids, &err), SD_OK, "%s",
                     err.msg);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (head && !sd_draft_type_uses_llm(cases[c].type)) continue;
            if (cache && cases[c].type != SD_DRAFT_NGRAM && cases[c].type != SD_DRAFT_NGRAM_LLM)
                continue;
            char what[160];
            snprintf(what, sizeof what, "prompt %d, %s", p, cases[c].name);
            sd_gen_params gp = params_of(&cases[c], n_predict);
            gp.pass_trace = trace_g;
            gp.pass_trace_cap = MAXPASS;
            int32_t out[MAXOUT];
            sd_gen_stats st;
            cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out, MAXOUT, &st, &err),
                         SD_OK, "%s: %s", what, err.msg);
            if (cases[c].adaptive) { /* the off-pass count of generate's statistics */
                int32_t off = 0;
                for (int32_t i = 0; i < st.n_target_passes && i < MAXPASS; i++)
                    off += trace_g[i].state != SD_ADAPTIVE_ON && trace_g[i].k_chosen == 0;
                cr_expect_eq(st.n_off_passes, off, "%s: %d off passes, the records show %d", what,
                             (int)st.n_off_passes, (int)off);
            }
            /* greedy and Gumbel verification emit the target's own draws (keyed by seed
             * and position): the same request without a draft gives the same ids */
            if (cases[c].spec == SD_SPEC_GUMBEL && cases[c].type != SD_DRAFT_NONE) {
                sd_gen_params ga = gp;
                ga.draft_type = SD_DRAFT_NONE;
                ga.n_draft = 0;
                ga.pass_trace = NULL;
                int32_t alone[MAXOUT];
                sd_gen_stats sa;
                cr_assert_eq(
                    sd_engine_generate(e, &ga, ids, n_ids, NULL, NULL, alone, MAXOUT, &sa, &err),
                    SD_OK, "%s: %s", what, err.msg);
                cr_assert_eq(st.n_generated, sa.n_generated, "%s: %d tokens, target alone %d", what,
                             st.n_generated, sa.n_generated);
                cr_assert_eq(st.stop, sa.stop, "%s: stop %s, target alone %s", what,
                             sd_stop_reason_str(st.stop), sd_stop_reason_str(sa.stop));
                for (int32_t i = 0; i < sa.n_generated; i++)
                    cr_assert_eq(out[i], alone[i], "%s: token %d is %d, target alone %d", what, i,
                                 out[i], alone[i]);
            }
            for (int run = 0; run < 2; run++) {
                sd_batcher_stats bs0, bs1;
                sd_batcher_get_stats(b, &bs0);
                got g;
                memset(&g, 0, sizeof g);
                sd_request r = {0};
                r.prompt = ids;
                r.n_prompt = n_ids;
                r.gen = gp;
                r.gen.pass_trace = trace_b;
                r.n_choices = 1;
                r.cb = collect;
                r.user = &g;
                cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s: %s", what, err.msg);
                for (int guard = 0; sd_batcher_busy(b); guard++) {
                    cr_assert_lt(guard, 100000, "the batcher does not finish");
                    cr_assert_eq(sd_batcher_step(b, &err), SD_OK, "%s: %s", what, err.msg);
                }
                sd_batcher_get_stats(b, &bs1);
                char what_run[200];
                snprintf(what_run, sizeof what_run, "%s, %s", what,
                         bs1.n_prefix_hit_tokens > bs0.n_prefix_hit_tokens ? "prefix-cache hit"
                                                                           : "no cache hit");
                if (run == 1 && n_ids - 1 >= bp.kv_block) /* a whole block to cache */
                    cr_expect_gt(bs1.n_prefix_hit_tokens, bs0.n_prefix_hit_tokens,
                                 "%s: the second run found no cached prefix", what);
                if (cases[c].adaptive) {
                    compare_adaptive(what_run, out, st.n_generated, &st, &g);
                    replay_k(what_run, "generate", e, &gp, trace_g, st.n_target_passes);
                    replay_k(what_run, "serve", e, &gp, trace_b, g.st.n_target_passes);
                } else {
                    compare(what_run, out, st.n_generated, &st, &g);
                }
            }
        }
        free(ids);
    }
    sd_batcher_free(b);
    sd_engine_free(e);
    sd_ngram_cache_free(cache);
}

static void run_pair(const char *t, const char *d, const char *head, const char *const *prompts,
                     int n_prompts, int32_t n_predict) {
    run_pair_ex(t, d, head, NULL, prompts, n_prompts, n_predict);
}

Test(golden, tiny_pair) {
    static const char *const prompts[] = {"Once upon a time", "The little dog",
                                          "Lily and Tom went to the park. They"};
    run_pair(TINY_T, TINY_D, NULL, prompts, 3, 48);
}

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The trimmed draft head (sd_engine_params.draft_head) in both clients: a head file of
 * every other id of the first 2048 (the draft may then propose only those), written in the
 * format of draft/head.c (sd_draft.h). */
Test(golden, tiny_pair_trimmed_head) {
    char dir[512], path[1024];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    tu_path(path, sizeof path, dir, "tiny.head");
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    const int32_t n_vocab = sd_vocab_n_tokens(sd_engine_vocab(e));
    const int32_t n = n_vocab / 2 < 1024 ? n_vocab / 2 : 1024;
    const size_t len = 32 + 4 * (size_t)n;
    unsigned char *b = malloc(len + 8);
    cr_assert(b);
    memcpy(b, "SDHEAD\0\0", 8);
    put_le(b + 8, 1, 4);
    put_le(b + 12, (uint64_t)n_vocab, 4);
    put_le(b + 16, sd_draft_vocab_fingerprint(sd_engine_vocab(e)), 8);
    put_le(b + 24, (uint64_t)n, 4);
    put_le(b + 28, 0, 4);
    for (int32_t j = 0; j < n; j++)
        put_le(b + 32 + 4 * (size_t)j, (uint64_t)(2 * j), 4);
    put_le(b + len, sd_fnv1a64(SD_FNV1A64_INIT, b, len), 8);
    cr_assert_eq(tu_write_file(path, b, len + 8), 0);
    free(b);
    sd_engine_free(e);
    static const char *const prompts[] = {"Once upon a time", "The little dog"};
    run_pair(TINY_T, TINY_D, path, prompts, 2, 48);
    tu_rmdir(dir);
}

/* A lookup cache (generate's --lookup-cache) attached to both clients' n-gram proposers:
 * the prompts' continuations are in its document, so the n-gram drafts find matches there
 * that the prompts alone do not have. */
Test(golden, tiny_pair_lookup_cache) {
    static const char *const prompts[] = {"Once upon a time", "The little dog"};
    static const char doc[] =
        "Once upon a time, there was a little girl named Lily. She liked to play outside in "
        "the sun. The little dog was very happy. He liked to run and play with his ball in "
        "the park. One day, Lily and her mom went to the park. They saw a big tree.";
    run_pair_ex(TINY_T, TINY_D, NULL, doc, prompts, 2, 48);
}

Test(golden, smollm2_pair) {
    if (access(SMOL_T, R_OK) != 0) cr_skip_test("models/downloaded lacks SmolLM2-135M-Instruct");
    static const char *const prompts[] = {"Once upon a time", "The capital of France is",
                                          "def fibonacci(n):"};
    run_pair(SMOL_T, SMOL_D, NULL, prompts, 3, 48);
}

/* generate's text callback (sd_engine_generate_text): the text as streamed. */
static int collect_text(void *user, const int32_t *tokens, int32_t n, const char *text,
                        size_t len) {
    (void)tokens;
    (void)n;
    add_text(user, text, len);
    return 0;
}

/* Stop strings through both clients: sd_engine_generate_text (specdec generate --stop) and
 * a batcher request's stop: the same ids (every token of the pass that wrote the stop
 * string), the same statistics and stop reason, the same text, cut before the stop
 * string's first appearance in the full text. The stop string is taken from the middle of
 * each case's own full text; a second stop string that never appears rides along. */
Test(golden, tiny_pair_stop_strings) {
    static const gcase cases[] = {
        {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel ngram", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"rejection llm", SD_DRAFT_LLM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
        {"greedy ngram+llm", SD_DRAFT_NGRAM_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"target alone", SD_DRAFT_NONE, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
    };
    static const char *const prompts[] = {"Once upon a time", "The little dog"};
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 1;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int n_stopped = 0;
    for (int p = 0; p < 2; p++) {
        sd_prompt_spec ps = {0};
        ps.text = prompts[p];
        ps.len = strlen(prompts[p]);
        int32_t *ids = NULL, n_ids = 0;
        cr_assert_eq(sd_prompt_tokenize(sd_engine_vocab(e), &ps, &ids, &n_ids, &err), SD_OK);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char what[160];
            snprintf(what, sizeof what, "prompt %d, %s", p, cases[c].name);
            const sd_gen_params gp = params_of(&cases[c], 48);
            int32_t out[MAXOUT];
            sd_gen_stats st;
            /* the full text, no stop string */
            got full;
            memset(&full, 0, sizeof full);
            sd_stop_text *txt = NULL;
            cr_assert_eq(sd_stop_text_init(sd_engine_vocab(e), NULL, 0, SD_DETOK_REPLACE_INVALID,
                                           collect_text, &full, &txt, &err),
                         SD_OK);
            cr_assert_eq(sd_engine_generate_text(e, &gp, txt, ids, n_ids, out, MAXOUT, &st, &err),
                         SD_OK, "%s: %s", what, err.msg);
            sd_stop_text_finish(txt, &st);
            sd_stop_text_free(txt);
            cr_assert_neq(st.stop, SD_STOP_STRING, "%s", what);
            const int32_t n_full = st.n_generated;
            cr_assert_gt(full.len, 8, "%s: text '%s'", what, full.text);
            char stop[4];
            memcpy(stop, full.text + full.len / 2, 3);
            stop[3] = '\0';
            if (strlen(stop) < 3) continue; /* a NUL byte in the text */
            const size_t cut = (size_t)(strstr(full.text, stop) - full.text);
            const char *stops[] = {stop, "\x01never\x02"};

            got gen;
            memset(&gen, 0, sizeof gen);
            cr_assert_eq(sd_stop_text_init(sd_engine_vocab(e), stops, 2, SD_DETOK_REPLACE_INVALID,
                                           collect_text, &gen, &txt, &err),
                         SD_OK);
            cr_assert_eq(sd_engine_generate_text(e, &gp, txt, ids, n_ids, out, MAXOUT, &st, &err),
                         SD_OK, "%s: %s", what, err.msg);
            sd_stop_text_finish(txt, &st);
            sd_stop_text_free(txt);
            cr_expect_eq(st.stop, SD_STOP_STRING, "%s: stop %s", what, sd_stop_reason_str(st.stop));
            cr_expect_eq(gen.len, cut, "%s: text '%s', stop '%s' in '%s'", what, gen.text, stop,
                         full.text);
            cr_expect_eq(strncmp(gen.text, full.text, cut), 0, "%s", what);

            got g;
            memset(&g, 0, sizeof g);
            sd_request r = {0};
            r.prompt = ids;
            r.n_prompt = n_ids;
            r.gen = gp;
            r.stop = stops;
            r.n_stop = 2;
            r.n_choices = 1;
            r.cb = collect;
            r.user = &g;
            cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s: %s", what, err.msg);
            for (int guard = 0; sd_batcher_busy(b); guard++) {
                cr_assert_lt(guard, 100000, "the batcher does not finish");
                cr_assert_eq(sd_batcher_step(b, &err), SD_OK, "%s: %s", what, err.msg);
            }
            compare(what, out, st.n_generated, &st, &g);
            cr_expect_eq(g.len, gen.len, "%s: text '%s' vs '%s'", what, gen.text, g.text);
            cr_expect_eq(memcmp(g.text, gen.text, gen.len), 0, "%s: text '%s' vs '%s'", what,
                         gen.text, g.text);
            n_stopped += st.n_generated < n_full;
        }
        free(ids);
    }
    cr_assert_gt(n_stopped, 0, "no stop string ended a generation early");
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* Logprobs and a grammar through both clients: the same ids and statistics, and the same
 * logprobs for every emitted token, bit for bit (the target's raw rows, sd_step_logprob);
 * under the grammar every emitted token is one the grammar allows (the text is lower-case
 * letters and spaces). */
Test(golden, tiny_pair_logprobs_and_grammar) {
    static const gcase cases[] = {
        {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"rejection ngram", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
        {"gumbel ngram+llm", SD_DRAFT_NGRAM_LLM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
    };
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 1;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    sd_prompt_spec ps = {0};
    ps.text = "Once upon a time";
    ps.len = strlen(ps.text);
    int32_t *ids = NULL, n_ids = 0;
    cr_assert_eq(sd_prompt_tokenize(sd_engine_vocab(e), &ps, &ids, &n_ids, &err), SD_OK);
    static sd_token_logprob lp[MAXOUT];
    for (int grammar = 0; grammar <= 1; grammar++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char what[160];
            snprintf(what, sizeof what, "%s, %s", cases[c].name, grammar ? "grammar" : "logprobs");
            sd_gen_params gp = params_of(&cases[c], 32);
            if (grammar) {
                gp.grammar = "root ::= [a-z ]+";
            } else {
                gp.logprobs = 1;
                gp.top_logprobs = 3;
                gp.logprobs_out = lp;
            }
            int32_t out[MAXOUT];
            sd_gen_stats st;
            memset(lp, 0, sizeof lp);
            cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out, MAXOUT, &st, &err),
                         SD_OK, "%s: %s", what, err.msg);
            got g;
            memset(&g, 0, sizeof g);
            sd_request r = {0};
            r.prompt = ids;
            r.n_prompt = n_ids;
            r.gen = gp;
            r.n_choices = 1;
            r.cb = collect;
            r.user = &g;
            cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s: %s", what, err.msg);
            for (int guard = 0; sd_batcher_busy(b); guard++) {
                cr_assert_lt(guard, 100000, "the batcher does not finish");
                cr_assert_eq(sd_batcher_step(b, &err), SD_OK, "%s: %s", what, err.msg);
            }
            compare(what, out, st.n_generated, &st, &g);
            cr_assert_gt(st.n_generated, 0, "%s", what);
            if (grammar) {
                for (size_t i = 0; i < g.len; i++)
                    cr_expect((g.text[i] >= 'a' && g.text[i] <= 'z') || g.text[i] == ' ',
                              "%s: byte %d of '%s' outside the grammar", what, (int)i, g.text);
                continue;
            }
            cr_assert_eq(g.n_lp, st.n_generated, "%s: the batcher gave %d logprobs", what, g.n_lp);
            for (int32_t i = 0; i < st.n_generated; i++) {
                cr_expect_eq(lp[i].token, out[i], "%s: logprob %d's token", what, i);
                cr_expect_eq(lp[i].token, g.lp[i].token, "%s: token %d", what, i);
                cr_expect(lp[i].logprob == g.lp[i].logprob, "%s: logprob %d: %.17g vs %.17g", what,
                          i, lp[i].logprob, g.lp[i].logprob);
                cr_expect_eq(lp[i].n_top, 3);
                cr_expect_eq(g.lp[i].n_top, 3);
                for (int32_t t = 0; t < 3; t++) {
                    cr_expect_eq(lp[i].top_id[t], g.lp[i].top_id[t], "%s: %d top %d", what, i, t);
                    cr_expect(lp[i].top_logprob[t] == g.lp[i].top_logprob[t], "%s: %d top %d", what,
                              i, t);
                }
            }
        }
    free(ids);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* generate's prefix reuse: a run whose prompt extends the last run's context (a chat
 * turn) finds that prefix in the target's cache and continues exactly as a fresh engine
 * does (greedy: the first run's own continuation); an unrelated prompt finds none. The
 * one-slot batcher keeps the longest common prefix (all of the prompt but its last token,
 * which the first pass evaluates) in its prefix cache, which matches to the token (whole
 * 64-position blocks, then the partly filled last one). */
Test(golden, generate_counts_its_prefix_reuse) {
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_error err = {0};
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e,
                                    "Once upon a time, there was a little girl named Lily. She "
                                    "liked to play in the park with her dog. One day, Lily and "
                                    "her dog went to the park. They saw a big tree. Lily wanted "
                                    "to climb the tree, but her mom said no.",
                                    &ids);
    const gcase c = {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0};
    sd_gen_params gp = params_of(&c, 40);
    gp.ignore_eos = 1;
    const char *name = "generate";
    int32_t out1[MAXOUT], out2[MAXOUT], out3[MAXOUT];
    sd_gen_stats st1, st2, st3;
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out1, MAXOUT, &st1, &err),
                 SD_OK, "%s", err.msg);
    cr_assert_eq(st1.n_generated, 40);
    cr_assert_eq(st1.n_prompt_cached, 0, "%s: a fresh engine holds nothing", name);
    /* the next turn: the prompt and 10 tokens of the answer */
    const int32_t n_turn = n_ids + 10;
    int32_t *turn = malloc((size_t)n_turn * sizeof *turn);
    cr_assert_not_null(turn);
    memcpy(turn, ids, (size_t)n_ids * sizeof *turn);
    memcpy(turn + n_ids, out1, 10 * sizeof *turn);
    cr_assert_geq(n_turn - 1, 64, "the prompt fills a block");
    gp.n_predict = 30;
    cr_assert_eq(sd_engine_generate(e, &gp, turn, n_turn, NULL, NULL, out2, MAXOUT, &st2, &err),
                 SD_OK, "%s", err.msg);
    const int32_t want = n_turn - 1;
    cr_assert_eq(st2.n_prompt_cached, want, "%s: %d cached, expected %d", name, st2.n_prompt_cached,
                 want);
    cr_assert_eq(st2.n_generated, 30);
    cr_assert_eq(memcmp(out2, out1 + 10, 30 * sizeof *out2), 0, "%s: the turn continues as greedy",
                 name);
    /* the same through a fresh engine */
    sd_engine *f = open_pair(TINY_T, TINY_D, NULL);
    cr_assert_eq(sd_engine_generate(f, &gp, turn, n_turn, NULL, NULL, out3, MAXOUT, &st3, &err),
                 SD_OK, "%s", err.msg);
    cr_assert_eq(st3.n_prompt_cached, 0);
    cr_assert_eq(memcmp(out2, out3, 30 * sizeof *out2), 0);
    cr_assert_eq(st2.n_target_passes, st3.n_target_passes);
    cr_assert_eq(st2.n_accepted, st3.n_accepted);
    sd_engine_free(f);
    /* an unrelated prompt: nothing to reuse past a shared BOS */
    const int32_t other[2] = {ids[0], ids[n_ids - 1] + 1};
    cr_assert_eq(sd_engine_generate(e, &gp, other, 2, NULL, NULL, out2, MAXOUT, &st2, &err), SD_OK,
                 "%s", err.msg);
    cr_assert_leq(st2.n_prompt_cached, 1);
    free(turn);
    free(ids);
    sd_engine_free(e);
}

/* Figures over several runs (bench, a request's choices) come from their statistics added
 * up: the sum's derived figures are those of the pooled counts. */
Test(golden, stats_add_pools_the_counts) {
    sd_gen_stats a, b, sum;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&sum, 0, sizeof sum);
    a.n_generated = 10, a.n_stop_tokens = 1, a.n_target_passes = 4, a.n_drafted = 12;
    a.n_accepted = 7, a.drafted_at[0] = 4, a.accepted_at[0] = 3, a.k_hist[3] = 4;
    a.t_total_ms = 50.0, a.t_prefill_ms = 10.0;
    b.n_generated = 5, b.n_stop_tokens = 0, b.n_target_passes = 5, b.n_drafted = 0;
    b.k_hist[0] = 5, b.t_total_ms = 30.0, b.t_prefill_ms = 5.0;
    sd_stats_add(&sum, &a);
    sd_stats_add(&sum, &b);
    cr_assert_eq(sum.n_generated, 15);
    cr_assert_eq(sum.n_target_passes, 9);
    cr_assert_eq(sum.k_hist[0], 5);
    cr_assert_eq(sum.k_hist[3], 4);
    cr_assert_float_eq(sd_stats_tokens_per_pass(&sum), 16.0 / 9.0, 1e-12, "stop token included");
    cr_assert_float_eq(sd_stats_acceptance_rate(&sum), 7.0 / 12.0, 1e-12);
    cr_assert_float_eq(sd_stats_accept_at(&sum, 0), 3.0 / 4.0, 1e-12);
    cr_assert_float_eq(sd_stats_mean_k(&sum), 12.0 / 9.0, 1e-12);
    cr_assert_float_eq(sd_stats_tokens_per_s(&sum), 15.0 / (65.0 * 1e-3), 1e-9);
}

/* sd_engine_generate runs the batcher's step (a one-slot batcher over the paged pool):
 * the engine's single-sequence target cache stays untouched. */
Test(golden, generate_runs_the_batcher) {
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    const gcase c = {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0};
    sd_gen_params gp = params_of(&c, 32);
    sd_error err = {0};
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Once upon a time", &ids);
    const sd_session *ts = sd_scorer_session(sd_engine_scorer(e));
    int32_t out[MAXOUT];
    sd_gen_stats st;
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out, MAXOUT, &st, &err), SD_OK,
                 "%s", err.msg);
    cr_assert_gt(st.n_generated, 0);
    cr_assert_eq(sd_session_seq_n_past(ts, 0), 0, "generate ran the single-sequence sessions");
    free(ids);
    sd_engine_free(e);
}

/* Greedy and Gumbel sampling (a seed) through both ways to run a request: generate's
 * one-slot batcher and serve's batcher, with the LLM draft and the n-gram at K 4 fixed:
 * each equals the independent target-alone reference (engine_util.h: one token at a time
 * on a contiguous session, the draw computed there). */
/* The target alone on prompt ids[0 .. n_ids), its own session: greedy[0 .. n) and the
 * Gumbel-max draws of temperature 0.7 and seed 7, gumbel[0 .. n) (engine_util.h's
 * references, independent of the engine's loops). */
static void target_refs(sd_engine *e, const int32_t *ids, int32_t n_ids, int32_t *greedy,
                        int32_t *gumbel, int32_t n) {
    sd_error err = {0};
    for (int s = 0; s < 2; s++) {
        sd_session_params sp = sd_engine_session_params(e, 0);
        sp.share_threads = NULL;
        sd_session *rs = NULL;
        cr_assert_eq(sd_session_init(sd_engine_target(e), &sp, &rs, &err), SD_OK, "%s", err.msg);
        sd_sampling_params samp = sd_sampling_default_params();
        samp.temp = 0.7f;
        if (s == 0)
            eu_greedy_ref(rs, sd_engine_target(e), ids, n_ids, greedy, n);
        else
            eu_gumbel_ref(rs, sd_engine_target(e), &samp, 7, ids, n_ids, gumbel, n);
        sd_session_free(rs);
    }
}

Test(golden, three_clients_equal_the_references) {
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_error err = {0};
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Lily and Tom went to the park. They", &ids);
    enum { NP = 40 };
    int32_t ref[2][NP];
    target_refs(e, ids, n_ids, ref[0], ref[1], NP);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    static const gcase cases[] = {
        {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"greedy ngram", SD_DRAFT_NGRAM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel llm", SD_DRAFT_LLM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel ngram+llm", SD_DRAFT_NGRAM_LLM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sd_gen_params gp = params_of(&cases[c], NP);
        gp.ignore_eos = 1;
        const int32_t *want = ref[cases[c].temp > 0.0f];
        for (int client = 0; client < 2; client++) {
            got g;
            memset(&g, 0, sizeof g);
            static const char *const names[] = {"generate's batcher", "serve"};
            if (client == 0) {
                sd_gen_params gc = gp;
                cr_assert_eq(
                    sd_engine_generate(e, &gc, ids, n_ids, NULL, NULL, g.toks, MAXOUT, &g.st, &err),
                    SD_OK, "%s", err.msg);
                g.n = g.st.n_generated;
            } else {
                eu_submit(b, ids, n_ids, &gp, collect, &g);
                eu_drain(b, 1);
            }
            cr_assert_eq(g.n, NP, "%s, %s: %d tokens", cases[c].name, names[client], g.n);
            for (int32_t i = 0; i < NP; i++)
                cr_assert_eq(g.toks[i], want[i], "%s, %s: token %d is %d, the reference's %d",
                             cases[c].name, names[client], i, g.toks[i], want[i]);
            cr_assert_gt(g.st.n_drafted, 0, "%s, %s: nothing drafted", cases[c].name,
                         names[client]);
        }
    }
    free(ids);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* The sweep policy (K = pass mod (K + 1), every K in turn: cost traces) runs on the
 * batcher's step: generate picks the batcher for it, which gives the target alone's tokens
 * (greedy, and Gumbel with one seed: the independent references), records one K per pass
 * whose sum is the drafted count, and drafts K = 0, 1, .., K in turn with the LLM. */
Test(golden, sweep_through_the_batcher) {
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_error err = {0};
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Lily and Tom went to the park. They", &ids);
    enum { NP = 40, K = 3 };
    int32_t ref[2][NP];
    target_refs(e, ids, n_ids, ref[0], ref[1], NP);
    static const gcase cases[] = {
        {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel llm", SD_DRAFT_LLM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"greedy ngram+llm", SD_DRAFT_NGRAM_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sd_gen_params gp = params_of(&cases[c], NP);
        gp.ignore_eos = 1;
        gp.n_draft = K;
        gp.k_policy = SD_K_SWEEP;
        const int32_t *want = ref[cases[c].temp > 0.0f];
        uint8_t kt[NP + 1];
        sd_gen_stats st;
        gp.k_trace = kt;
        gp.k_trace_cap = NP + 1;
        int32_t out[MAXOUT];
        cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out, MAXOUT, &st, &err),
                     SD_OK, "%s", err.msg);
        cr_assert_eq(st.n_generated, NP, "%s: %d tokens", cases[c].name, (int)st.n_generated);
        for (int32_t i = 0; i < NP; i++)
            cr_assert_eq(out[i], want[i], "%s: token %d is %d, the reference's %d", cases[c].name,
                         i, out[i], want[i]);
        cr_assert_gt(st.n_drafted, 0, "%s: nothing drafted", cases[c].name);
        cr_assert_leq(st.n_target_passes, NP + 1, "%s", cases[c].name);
        int64_t drafted = 0;
        for (int32_t i = 0; i < st.n_target_passes; i++) {
            cr_assert_leq(kt[i], K, "%s: pass %d drafted %d", cases[c].name, i, kt[i]);
            drafted += kt[i];
        }
        cr_assert_eq(drafted, st.n_drafted, "%s: the K trace sums to %lld, drafted %lld",
                     cases[c].name, (long long)drafted, (long long)st.n_drafted);
        /* the LLM drafts the K asked: 0, 1, .., K in turn while the budget is far */
        for (int32_t i = 0; cases[c].type == SD_DRAFT_LLM && i < 2 * (K + 1); i++)
            cr_assert_eq(kt[i], i % (K + 1), "%s: pass %d drafted %d", cases[c].name, i, kt[i]);
    }
    free(ids);
    sd_engine_free(e);
}

/* A request past the context: generate emits until the context is full and stops with
 * "context" (the batcher's stop_at_context), N_CTX + 1 - prompt tokens (the last one never
 * fed back); greedy, they are the independent target-alone reference's. */
Test(golden, context_stop_in_both_loops) {
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_error err = {0};
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Once upon a time", &ids);
    static const gcase cases[] = {
        {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"rejection ngram", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_REJECTION, 0.0f, 0.0f, 0},
    };
    enum { NPRED = N_CTX + 40 };
    static int32_t a[NPRED], ref[N_CTX + 1], gumbel[N_CTX + 1];
    const int32_t n_fit = N_CTX + 1 - n_ids;
    target_refs(e, ids, n_ids, ref, gumbel, n_fit);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sd_gen_params gp = params_of(&cases[c], NPRED);
        gp.ignore_eos = 1;
        sd_gen_stats sa;
        cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, a, NPRED, &sa, &err), SD_OK,
                     "%s", err.msg);
        cr_assert_eq(sa.n_generated, n_fit, "%s: %d tokens", cases[c].name, sa.n_generated);
        cr_assert_eq(sa.stop, SD_STOP_CONTEXT, "%s: stop %s", cases[c].name,
                     sd_stop_reason_str(sa.stop));
        cr_assert_gt(sa.n_drafted, 0, "%s: nothing drafted", cases[c].name);
        if (cases[c].temp == 0.0f)
            for (int32_t i = 0; i < n_fit; i++)
                cr_assert_eq(a[i], ref[i], "%s: token %d is %d, the reference's %d", cases[c].name,
                             i, a[i], ref[i]);
    }
    free(ids);
    sd_engine_free(e);
}

/* Context shift (gp.context_shift) on the engine's one path, the batcher (generate's and
 * serve's): a full context keeps its first tokens and drops the older half of the rest,
 * and the shortened window is evaluated afresh in the sequence's blocks. On a one-layer
 * pair (F32 cache), through several shifts (70 tokens in a context of 24), --keep 0 and 3
 * (BOS besides): greedy target alone and greedy with the LLM and the n-gram drafts emit the
 * ids of an independent reference (shift_greedy_ref: plain decoding one token at a time,
 * the window rule applied by hand at each full context, the window evaluated afresh on a
 * fresh session); Gumbel sampling with the LLM draft emits the ids of Gumbel target alone
 * through the same shifts (the same seed); every emitted token's logprob entry is its own,
 * across the shifts, and the stop is MAX_TOKENS. Kept tokens that leave no room (n_keep >=
 * n_ctx / 2) end it at the context. */
static void shift_pair(char *dir, size_t cap, char *t, char *d, size_t pcap) {
    cr_assert_eq(tu_mkdtemp(dir, cap), 0);
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_layer = 1;
    cr_assert_eq(tu_make_llama(tu_path(t, pcap, dir, "t.gguf"), &sp), 0);
    sp.wtype = SD_TYPE_Q8_0;
    sp.noise = 0.3f;
    cr_assert_eq(tu_make_llama(tu_path(d, pcap, dir, "d.gguf"), &sp), 0);
}

/* Greedy target alone (EOS and end-of-generation ids masked, as ignore_eos) after
 * prompt[0 .. n_prompt) through context shifts, by hand: the context c holds at most n_ctx
 * evaluated positions; when it holds n_ctx + 1 tokens (the last one emitted, not
 * evaluated), it keeps its first n_keep (sd_ctx_shift_keep) and drops the older half of
 * the rest (sd_ctx_shift_window), and a fresh session evaluates the window. ref[0 .. n). */
static void shift_greedy_ref(sd_engine *e, const int32_t *prompt, int32_t n_prompt, int64_t keep,
                             int32_t *ref, int32_t n) {
    const sd_model *m = sd_engine_target(e);
    const sd_vocab *v = sd_model_vocab(m);
    const int32_t n_ctx = sd_engine_n_ctx(e), nv = sd_model_hparams(m)->n_vocab;
    const int32_t n_keep = sd_ctx_shift_keep(prompt, n_prompt, keep, sd_vocab_bos(v));
    int32_t *c = malloc(((size_t)n_ctx + 2) * sizeof *c);
    float *l = malloc((size_t)nv * sizeof *l);
    cr_assert(c && l);
    memcpy(c, prompt, (size_t)n_prompt * sizeof *c);
    int32_t n_cur = n_prompt, fresh = 1;
    sd_session *s = NULL;
    sd_error err = {0};
    for (int32_t i = 0; i < n; i++) {
        if (n_cur == n_ctx + 1) { /* full: shift */
            const int32_t d = sd_ctx_shift_window(c, n_cur, n_keep);
            cr_assert_gt(d, 0);
            n_cur -= d;
            fresh = 1;
        }
        if (fresh) { /* evaluate the window afresh */
            sd_session_free(s);
            s = NULL;
            sd_session_params sp = sd_engine_session_params(e, 0);
            sp.share_threads = NULL;
            cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
            cr_assert_eq(sd_session_eval(s, c, n_cur, l, 1, &err), SD_OK, "%s", err.msg);
            fresh = 0;
        } else {
            cr_assert_eq(sd_session_eval(s, &c[n_cur - 1], 1, l, 1, &err), SD_OK, "%s", err.msg);
        }
        for (int32_t t = 0; t < nv; t++)
            if (t == sd_vocab_eos(v) || sd_vocab_is_eog(v, t)) l[t] = -INFINITY;
        ref[i] = sd_argmax(l, nv);
        c[n_cur++] = ref[i];
    }
    sd_session_free(s);
    free(l);
    free(c);
}

Test(golden, context_shift_equals_the_reference) {
    char dir[1024], t[1200], d[1200];
    shift_pair(dir, sizeof dir, t, d, sizeof t);
    enum { CTX = 24, NGEN = 70 };
    sd_engine_params ep = eu_engine_params(t, d, CTX, 1);
    ep.kv_type = SD_TYPE_F32;
    sd_engine *e = eu_engine_open(&ep);
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "t5 t9 t17 t30", &ids);
    static const struct {
        const char *name;
        sd_draft_type type;
        float temp;
        int64_t keep;
    } cases[] = {
        {"greedy alone", SD_DRAFT_NONE, 0.0f, 0},     {"greedy llm", SD_DRAFT_LLM, 0.0f, 0},
        {"greedy ngram", SD_DRAFT_NGRAM, 0.0f, 3},    {"gumbel llm", SD_DRAFT_LLM, 0.7f, 0},
        {"greedy llm keep 3", SD_DRAFT_LLM, 0.0f, 3},
    };
    static sd_token_logprob la[NGEN], lb[NGEN];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = NGEN;
        gp.ignore_eos = 1;
        gp.seed = 7;
        gp.draft_type = cases[c].type;
        gp.n_draft = cases[c].type == SD_DRAFT_NONE ? 0 : 3;
        gp.samp.temp = cases[c].temp;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.context_shift = 1;
        gp.shift_keep = cases[c].keep;
        gp.logprobs = 1;
        int32_t a[NGEN], b[NGEN];
        sd_gen_stats sa, sb;
        sd_error err = {0};
        gp.logprobs_out = la;
        cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, a, NGEN, &sa, &err), SD_OK,
                     "%s: %s", cases[c].name, err.msg);
        cr_assert_eq(sa.n_generated, NGEN, "%s: %d tokens (stop %s)", cases[c].name, sa.n_generated,
                     sd_stop_reason_str(sa.stop));
        cr_assert_eq(sa.stop, SD_STOP_MAX_TOKENS, "%s", cases[c].name);
        cr_assert_eq(sa.n_prompt, n_ids, "%s: the prompt figures are the first segment's",
                     cases[c].name);
        if (cases[c].temp == 0.0f) { /* the independent reference */
            shift_greedy_ref(e, ids, n_ids, cases[c].keep, b, NGEN);
        } else { /* Gumbel target alone, the same seed, through the same shifts */
            sd_gen_params gl = gp;
            gl.draft_type = SD_DRAFT_NONE;
            gl.n_draft = 0;
            gl.logprobs_out = lb;
            cr_assert_eq(sd_engine_generate(e, &gl, ids, n_ids, NULL, NULL, b, NGEN, &sb, &err),
                         SD_OK, "%s: %s", cases[c].name, err.msg);
            cr_assert_eq(sb.n_generated, NGEN, "%s: target alone %d tokens", cases[c].name,
                         sb.n_generated);
            for (int32_t i = 0; i < NGEN; i++)
                cr_assert_eq(la[i].logprob, lb[i].logprob, "%s: logprob %d: %g, target alone %g",
                             cases[c].name, i, la[i].logprob, lb[i].logprob);
        }
        for (int32_t i = 0; i < NGEN; i++) {
            cr_assert_eq(a[i], b[i], "%s: token %d: %d, the reference's %d", cases[c].name, i, a[i],
                         b[i]);
            cr_assert_eq(la[i].token, a[i], "%s: logprob entry %d", cases[c].name, i);
        }
    }
    /* kept tokens that leave no room: it ends at the context */
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = NGEN;
    gp.ignore_eos = 1;
    gp.n_draft = 0;
    gp.context_shift = 1;
    gp.shift_keep = CTX; /* the whole prompt... */
    int32_t *big = malloc((size_t)CTX * sizeof *big);
    for (int32_t i = 0; i < CTX / 2 + 1; i++) /* ...of more than half the context */
        big[i] = ids[i % n_ids];
    {
        int32_t a[NGEN];
        sd_gen_stats sa;
        sd_error err = {0};
        cr_assert_eq(sd_engine_generate(e, &gp, big, CTX / 2 + 1, NULL, NULL, a, NGEN, &sa, &err),
                     SD_OK, "%s", err.msg);
        cr_assert_eq(sa.stop, SD_STOP_CONTEXT, "stop %s", sd_stop_reason_str(sa.stop));
        cr_assert_eq(sa.n_generated, CTX + 1 - (CTX / 2 + 1));
    }
    free(big);
    free(ids);
    sd_engine_free(e);
    tu_rmdir(dir);
}

/* Token trees (gp.tree_width: the n-gram and suffix proposers' trees) through the
 * batcher's step: each sequence's tree on its paged blocks in the step's one pass
 * (sd_session_decode_trees), verified by target choice, the accepted path kept
 * (sd_session_seq_tree_keep). Greedy and Gumbel sampling with a seed, trees of 1x4, 2x3,
 * 3x4 and 4x4, through generate's one-slot batcher and serve's batcher of two sequences:
 * every client's ids equal the independent target-alone reference, and the two clients'
 * counts (passes, drafted, accepted, per depth) are equal. */
Test(golden, trees_through_the_batcher) {
    sd_engine *e = open_pair(TINY_T, TINY_D, NULL);
    sd_error err = {0};
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Lily and Tom went to the park. They", &ids);
    enum { NP = 48 };
    int32_t ref[2][NP];
    target_refs(e, ids, n_ids, ref[0], ref[1], NP);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.k_max = SD_MAX_DRAFT; /* a 4x4 tree's 16 nodes */
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    static const gcase cases[] = {
        {"greedy ngram", SD_DRAFT_NGRAM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"greedy suffix", SD_DRAFT_SUFFIX, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel ngram", SD_DRAFT_NGRAM, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
        {"gumbel suffix", SD_DRAFT_SUFFIX, 0.7f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0},
    };
    static const int32_t shapes[][2] = {{1, 4}, {2, 3}, {3, 4}, {4, 4}};
    int64_t accepted = 0, branchy = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            char what[96];
            snprintf(what, sizeof what, "%s tree %dx%d", cases[c].name, shapes[s][0], shapes[s][1]);
            sd_gen_params gp = params_of(&cases[c], NP);
            gp.ignore_eos = 1;
            gp.tree_width = shapes[s][0];
            gp.n_draft = shapes[s][1];
            const int32_t *want = ref[cases[c].temp > 0.0f];
            got g[2];
            memset(g, 0, sizeof g);
            static const char *const names[] = {"generate's batcher", "serve"};
            for (int client = 0; client < 2; client++) {
                if (client == 0) {
                    sd_gen_params gc = gp;
                    cr_assert_eq(sd_engine_generate(e, &gc, ids, n_ids, NULL, NULL, g[client].toks,
                                                    MAXOUT, &g[client].st, &err),
                                 SD_OK, "%s, %s: %s", what, names[client], err.msg);
                    g[client].n = g[client].st.n_generated;
                    g[client].done = 1;
                    g[client].stop = g[client].st.stop;
                } else {
                    eu_submit(b, ids, n_ids, &gp, collect, &g[client]);
                    eu_drain(b, 1);
                }
                cr_assert_eq(g[client].n, NP, "%s, %s: %d tokens", what, names[client],
                             g[client].n);
                for (int32_t i = 0; i < NP; i++)
                    cr_assert_eq(g[client].toks[i], want[i],
                                 "%s, %s: token %d is %d, the reference's %d", what, names[client],
                                 i, g[client].toks[i], want[i]);
            }
            char w2[160];
            snprintf(w2, sizeof w2, "%s: %s vs %s", what, names[0], names[1]);
            compare(w2, g[0].toks, g[0].n, &g[0].st, &g[1]);
            accepted += g[0].st.n_accepted;
            int64_t depths = 0; /* drafted_at counts a tree's depths, n_drafted its nodes */
            for (int32_t i = 0; i < SD_MAX_DRAFT; i++)
                depths += g[0].st.drafted_at[i];
            branchy += g[0].st.n_drafted > depths;
        }
    cr_assert_gt(accepted, 0, "no tree draft was ever accepted: the test proves little");
    cr_assert_gt(branchy, 0, "no tree had more nodes than depths");
    /* serve's case: a tree request and a chain request (the LLM draft) in one batcher at
     * once, the chain in the shared pass, the tree in its own: both the reference's ids */
    {
        const gcase tc = {"greedy ngram", SD_DRAFT_NGRAM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0};
        const gcase cc = {"greedy llm", SD_DRAFT_LLM, 0.0f, SD_SPEC_GUMBEL, 0.0f, 0.0f, 0};
        sd_gen_params gt = params_of(&tc, NP), gc = params_of(&cc, NP);
        gt.ignore_eos = gc.ignore_eos = 1;
        gt.tree_width = 3;
        gt.n_draft = 4;
        got a, c2;
        memset(&a, 0, sizeof a);
        memset(&c2, 0, sizeof c2);
        eu_submit(b, ids, n_ids, &gt, collect, &a);
        eu_submit(b, ids, n_ids, &gc, collect, &c2);
        eu_drain(b, 1);
        cr_assert(a.done && c2.done);
        cr_assert_eq(a.n, NP);
        cr_assert_eq(c2.n, NP);
        for (int32_t i = 0; i < NP; i++) {
            cr_assert_eq(a.toks[i], ref[0][i], "tree beside a chain: token %d", i);
            cr_assert_eq(c2.toks[i], ref[0][i], "chain beside a tree: token %d", i);
        }
        cr_assert_gt(a.st.n_drafted, 0);
        cr_assert_gt(c2.st.n_drafted, 0);
    }
    free(ids);
    sd_batcher_free(b);
    sd_engine_free(e);
}
