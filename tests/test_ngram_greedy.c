/*
 * tests/test_ngram_greedy.c: greedy equality of every draft type (n-gram, ngram+llm, the LLM
 * draft) and K policy (fixed K = 1..8, adaptive) with the target alone, on random pairs and
 * on the shipped TinyStories pair; and sampled generation with the lookup cache.
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

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(ngram_greedy, .init = setup, .fini = teardown, .timeout = 900);

/* ------------------------------------------------------------------------------------ */
/* Greedy equality                                                                       */

/* A pair on the engine's one path (sd_engine_generate: the batcher's step over one
 * sequence), one thread. */
typedef struct gen_pair {
    sd_engine *e;
    const sd_model *tm;
} gen_pair;

static void gen_pair_open(gen_pair *g, const char *target, const char *draft) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = target;
    ep.draft = draft;
    ep.n_threads = 1;
    sd_error err = {0};
    g->e = NULL;
    cr_assert_eq(sd_engine_init(&ep, &g->e, &err), SD_OK, "%s", err.msg);
    g->tm = sd_engine_target(g->e);
}

static void gen_pair_close(gen_pair *g) {
    sd_engine_free(g->e);
    g->e = NULL;
}

/* Greedy generation with draft type t (SD_DRAFT_NONE: target alone), policy pol, K k and
 * the LLM draft's confidence cut-off p_min (after one token). eos >= 0: the vocabulary's
 * EOS stops generation; -1: it never wins (ignore_eos). */
static int32_t gen(gen_pair *g, sd_draft_type t, sd_k_policy pol, int32_t k, float p_min,
                   const int32_t *prompt, int32_t n_prompt, int32_t eos, int32_t n_predict,
                   int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = t == SD_DRAFT_NONE ? 0 : k;
    gp.draft_type = t;
    gp.samp.temp = 0.0f;
    gp.k_policy = pol;
    gp.draft_p_min = p_min;
    gp.draft_min = 1;
    gp.ignore_eos = eos < 0;
    sd_error err = {0};
    cr_assert_eq(
        sd_engine_generate(g->e, &gp, prompt, n_prompt, NULL, NULL, out, n_predict, st, &err), 0,
        "%s", err.msg);
    return st->n_generated;
}

/* Every draft type, K = 1..8 fixed and adaptive (K <= 8), with and without the
 * confidence cut-off: the tokens of target alone. Returns the n-gram acceptance. */
static double greedy_all(gen_pair *g, const int32_t *prompt, int32_t n_prompt, int32_t eos,
                         int32_t n_predict, const char *name) {
    int32_t *ref = malloc((size_t)n_predict * sizeof *ref);
    int32_t *got = malloc((size_t)n_predict * sizeof *got);
    cr_assert(ref && got);
    sd_gen_stats st;
    const int32_t n_ref =
        gen(g, SD_DRAFT_NONE, SD_K_FIXED, 0, 0, prompt, n_prompt, eos, n_predict, ref, &st);
    const sd_draft_type props[] = {SD_DRAFT_NGRAM, SD_DRAFT_NGRAM_LLM, SD_DRAFT_LLM};
    const char *names[] = {"ngram", "ngram+llm", "llm"};
    int64_t drafted = 0, accepted = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int pol = 0; pol <= 1; pol++)
            for (int32_t k = 1; k <= 8; k++)
                for (int cut = 0; cut <= 1; cut++) {
                    if (pol == SD_K_ADAPTIVE && k % 4 != 0) continue; /* k_max 4, 8 */
                    const int32_t n = gen(g, props[pi], (sd_k_policy)pol, k, cut ? 0.6f : 0.0f,
                                          prompt, n_prompt, eos, n_predict, got, &st);
                    cr_assert_eq(n, n_ref, "%s %s %s K=%d p-min %d: %d tokens, target alone %d",
                                 name, names[pi], pol ? "adaptive" : "fixed", k, cut, n, n_ref);
                    for (int32_t i = 0; i < n; i++)
                        cr_assert_eq(got[i], ref[i],
                                     "%s %s %s K=%d p-min %d: token %d is %d, target alone %d",
                                     name, names[pi], pol ? "adaptive" : "fixed", k, cut, i, got[i],
                                     ref[i]);
                    int64_t h = 0;
                    for (int32_t j = 0; j <= SD_MAX_DRAFT; j++)
                        h += st.k_hist[j];
                    cr_assert_eq(h, st.n_target_passes, "K histogram covers every pass");
                    if (pi == 0) {
                        cr_assert_eq(st.n_drafted_lookup, st.n_drafted);
                        cr_assert_eq(st.n_accepted_lookup, st.n_accepted);
                        drafted += st.n_drafted;
                        accepted += st.n_accepted;
                    }
                }
    free(ref);
    free(got);
    return drafted ? (double)accepted / drafted : 0.0;
}

Test(ngram_greedy, random_pairs) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    gen_pair g;
    gen_pair_open(&g, t, d);
    /* Prompts with repeats (the lookup finds matches at once) and without. */
    const int32_t prompts[3][12] = {{1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9},
                                    {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50},
                                    {1, 90, 3, 77, 90, 3, 60, 61, 90, 3, 77, 90}};
    double acc = 0.0;
    for (int pi = 0; pi < 3; pi++) {
        char name[32];
        snprintf(name, sizeof name, "prompt %d", pi);
        acc += greedy_all(&g, prompts[pi], 12, -1, 64, name);
    }
    fprintf(stderr, "  random pair: n-gram greedy acceptance %.3f (mean of 3 prompts)\n", acc / 3);
    cr_assert_gt(acc, 0.0, "the n-gram never had an accepted token: the test proves little");
    gen_pair_close(&g);
}

Test(ngram_greedy, shipped_tinystories_pair) {
    const char *tp = SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf";
    const char *dp = SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf";
    tu_need_path(tp, "the shipped TinyStories pair");
    tu_need_path(dp, "the shipped TinyStories pair");
    gen_pair g;
    gen_pair_open(&g, tp, dp);
    const sd_vocab *vocab = sd_engine_vocab(g.e);
    const char *texts[] = {
        "Once upon a time",
        "Lily had a red ball. She liked to play with the red ball in the park. One day, Lily",
        "Rewrite the story: Tom saw a big dog. The dog was brown. Tom gave the dog a bone. "
        "Story: Tom saw",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(vocab, texts[i], strlen(texts[i]), 1, &ids, &n, &err), 0,
                     "%s", err.msg);
        char name[64];
        snprintf(name, sizeof name, "'%.20s...'", texts[i]);
        const double acc = greedy_all(&g, ids, (int32_t)n, sd_vocab_eos(vocab), 96, name);
        fprintf(stderr, "  tinystories %s: n-gram greedy acceptance %.3f\n", name, acc);
        free(ids);
    }
    gen_pair_close(&g);
}

/* Sampling with one-hot proposals runs and emits valid ids (exactness is the chi-square
 * test above; this drives the one-hot verification path of the batcher's step). */
Test(ngram_greedy, sampled_generation_with_lookup) {
    char t[2048], d[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    gen_pair g;
    gen_pair_open(&g, t, d);
    const int32_t prompt[] = {1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5, 9};
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = 64;
    gp.n_draft = 4;
    gp.samp.temp = 0.7f;
    gp.draft_type = SD_DRAFT_NGRAM;
    gp.ignore_eos = 1;
    int32_t out[64];
    sd_gen_stats st;
    sd_error err = {0};
    for (int pol = 0; pol <= 1; pol++) {
        gp.k_policy = (sd_k_policy)pol;
        cr_assert_eq(sd_engine_generate(g.e, &gp, prompt, 12, NULL, NULL, out, 64, &st, &err), 0,
                     "%s", err.msg);
        cr_assert_eq(st.n_generated, 64);
        for (int i = 0; i < 64; i++)
            cr_assert(out[i] >= 0 && out[i] < 96);
    }
    gen_pair_close(&g);
}
