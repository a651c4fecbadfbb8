/*
 * tests/engine_util.h: the engine scaffolding the end-to-end tests share (test_grammar.c,
 * test_logprobs.c, test_face.c, the suffix, batcher and golden tests): an engine or a
 * public-face context on a pair with a few settings, a prompt's tokens, one generation
 * with a given draft type and K, and driving a batcher until it is idle.
 *
 * Included once by each test file, after testutil.h and criterion.h. Every helper fails
 * the test on an error (the error's message in the report) and is static inline, so a file
 * that uses a few builds without unused-function warnings.
 */
#ifndef SD_TESTS_ENGINE_UTIL_H
#define SD_TESTS_ENGINE_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/specdec.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"
#include "verify/sd_sample.h"

/* The shipped TinyStories pair. */
#define EU_TINY_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define EU_TINY_DRAFT  SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"

/* How many steps a batcher may take before a test says it does not finish. */
#define EU_MAX_STEPS 100000

/* The engine parameters of target + draft (NULL: target alone) with n_ctx positions (0:
 * the target's) and n_threads threads; the rest sd_engine_default_params's. */
static inline sd_engine_params eu_engine_params(const char *target, const char *draft,
                                                int32_t n_ctx, int32_t n_threads) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = target;
    ep.draft = draft;
    ep.n_ctx = n_ctx;
    ep.n_threads = n_threads;
    return ep;
}

/* An engine made with ep. */
static inline sd_engine *eu_engine_open(const sd_engine_params *ep) {
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

/* An engine on target + draft (see eu_engine_params); models_only: no single-sequence
 * sessions (a batcher's engine). */
static inline sd_engine *eu_engine(const char *target, const char *draft, int32_t n_ctx,
                                   int32_t n_threads, int models_only) {
    sd_engine_params ep = eu_engine_params(target, draft, n_ctx, n_threads);
    ep.models_only = models_only;
    return eu_engine_open(&ep);
}

/* Skips the test unless the shipped TinyStories pair is there. */
static inline void eu_need_tiny(void) {
    tu_need_path(EU_TINY_TARGET, "the shipped TinyStories target");
    tu_need_path(EU_TINY_DRAFT, "the shipped TinyStories draft");
}

/* The shipped TinyStories pair, 256 positions, one thread (skipped without the files). */
static inline sd_engine *eu_tiny_engine(int models_only) {
    eu_need_tiny();
    return eu_engine(EU_TINY_TARGET, EU_TINY_DRAFT, 256, 1, models_only);
}

/* A public-face context on target + draft (NULL: target alone). */
static inline sd_context *eu_context(const char *target, const char *draft, int32_t n_ctx,
                                     int32_t n_threads) {
    sd_context_params p = sd_context_default_params();
    p.target = target;
    p.draft = draft;
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    sd_context *ctx = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_context_init(&p, &ctx, &err), SD_OK, "%s", err.msg);
    cr_assert_not_null(ctx);
    return ctx;
}

/* The tokens of text in e's vocabulary (*ids malloc'd: the caller frees it); the count. */
static inline int32_t eu_prompt(sd_engine *e, const char *text, int32_t **ids) {
    sd_prompt_spec ps;
    memset(&ps, 0, sizeof ps);
    ps.text = text;
    ps.len = strlen(text);
    int32_t n = 0;
    sd_error err = {0};
    cr_assert_eq(sd_prompt_tokenize(sd_engine_vocab(e), &ps, ids, &n, &err), SD_OK, "%s", err.msg);
    return n;
}

/* sd_engine_generate of base with draft type t, policy pol and K k (0 when t is
 * SD_DRAFT_NONE); out holds base->n_predict tokens. Returns the tokens emitted. */
static inline int32_t eu_generate(sd_engine *e, const sd_gen_params *base, sd_draft_type t,
                                  sd_k_policy pol, int32_t k, const int32_t *prompt,
                                  int32_t n_prompt, int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = *base;
    gp.draft_type = t;
    gp.k_policy = pol;
    gp.n_draft = t == SD_DRAFT_NONE ? 0 : k;
    sd_error err = {0};
    cr_assert_eq(
        sd_engine_generate(e, &gp, prompt, n_prompt, NULL, NULL, out, gp.n_predict, st, &err),
        SD_OK, "%s", err.msg);
    return st->n_generated;
}

/* Submits one request of one choice: prompt, gen, and the callback cb(user). */
static inline void eu_submit(sd_batcher *b, const int32_t *prompt, int32_t n_prompt,
                             const sd_gen_params *gen, sd_req_cb cb, void *user) {
    sd_request r;
    memset(&r, 0, sizeof r);
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.gen = *gen;
    r.n_choices = 1;
    r.cb = cb;
    r.user = user;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
}

/* Step number `guard` of b: fails the test past EU_MAX_STEPS steps; with check, b's
 * accounting is checked after the step (sd_batcher_check). */
static inline void eu_step(sd_batcher *b, int guard, int check) {
    cr_assert_lt(guard, EU_MAX_STEPS, "the batcher does not finish");
    sd_error err = {0};
    cr_assert_eq(sd_batcher_step(b, &err), SD_OK, "%s", err.msg);
    if (check) cr_assert_eq(sd_batcher_check(b, &err), SD_OK, "%s", err.msg);
}

/* Steps b until nothing is running or queued (see eu_step). */
static inline void eu_drain(sd_batcher *b, int check) {
    for (int guard = 0; sd_batcher_busy(b); guard++)
        eu_step(b, guard, check);
}

/* What a request's callback collected (eu_collect): its tokens (the first EU_OUT_MAX), and
 * at the done event its stop reason and statistics. */
#define EU_OUT_MAX 512
typedef struct eu_out {
    int32_t toks[EU_OUT_MAX];
    int32_t n;
    int done;
    sd_stop_reason stop;
    sd_gen_stats st;
} eu_out;

/* The sd_req_cb of a one-choice request whose user is an eu_out. */
static inline int eu_collect(void *user, const sd_req_event *ev) {
    eu_out *o = user;
    for (int32_t i = 0; i < ev->n_tokens && o->n < EU_OUT_MAX; i++)
        o->toks[o->n++] = ev->tokens[i];
    if (ev->done) {
        o->done = 1;
        o->stop = ev->stop;
        o->st = *ev->stats;
    }
    return 0;
}

/* Generate against the batcher: each of the n_prompts prompts (rows of n_prompt ids)
 * through ref's sd_engine_generate with gp alone (no draft), then n_rounds times all of
 * them at once through b as requests of gp with draft type t and K k (fixed): every
 * request's output must be its prompt's target-alone output. drafted[round] and
 * accepted[round] (either NULL: not wanted) sum the round's statistics. */
static inline void eu_batcher_equals_generate(sd_engine *ref, sd_batcher *b,
                                              const sd_gen_params *gp, const int32_t *prompts,
                                              int n_prompts, int32_t n_prompt, sd_draft_type t,
                                              int32_t k, int n_rounds, int64_t *drafted,
                                              int64_t *accepted) {
    cr_assert_leq(gp->n_predict, EU_OUT_MAX);
    int32_t *want = malloc((size_t)n_prompts * (size_t)gp->n_predict * sizeof *want);
    int32_t *n_want = malloc((size_t)n_prompts * sizeof *n_want);
    eu_out *outs = malloc((size_t)n_prompts * sizeof *outs);
    cr_assert(want && n_want && outs);
    for (int p = 0; p < n_prompts; p++) {
        sd_gen_stats st;
        n_want[p] = eu_generate(ref, gp, SD_DRAFT_NONE, SD_K_FIXED, 0, prompts + p * n_prompt,
                                n_prompt, want + (size_t)p * (size_t)gp->n_predict, &st);
    }
    sd_gen_params rg = *gp;
    rg.n_draft = k;
    rg.draft_type = t;
    rg.k_policy = SD_K_FIXED;
    for (int round = 0; round < n_rounds; round++) {
        memset(outs, 0, (size_t)n_prompts * sizeof *outs);
        for (int p = 0; p < n_prompts; p++)
            eu_submit(b, prompts + p * n_prompt, n_prompt, &rg, eu_collect, &outs[p]);
        eu_drain(b, 0);
        if (drafted) drafted[round] = 0;
        if (accepted) accepted[round] = 0;
        for (int p = 0; p < n_prompts; p++) {
            cr_assert(outs[p].done);
            cr_assert_eq(outs[p].n, n_want[p], "round %d request %d: %d tokens, alone %d", round, p,
                         outs[p].n, n_want[p]);
            cr_assert(memcmp(outs[p].toks, want + (size_t)p * (size_t)gp->n_predict,
                             (size_t)outs[p].n * sizeof(int32_t)) == 0,
                      "round %d request %d differs from target alone", round, p);
            if (drafted) drafted[round] += outs[p].st.n_drafted;
            if (accepted) accepted[round] += outs[p].st.n_accepted;
        }
    }
    free(outs);
    free(n_want);
    free(want);
}

/* The value of "key": N in a JSON text, or -1. */
static inline long eu_json_long(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(json, pat);
    return at ? strtol(at + strlen(pat), NULL, 10) : -1;
}

/* `specdec generate --json` of the prompt t5t9t13t5t9t13t5t9, 48 tokens, greedy, K k
 * fixed, one thread, once per entry of runs: its flags after -m target, or "CONFIG": the
 * configuration file cfg in place of -m target. outs[i]: the output of runs[i] (malloc'd);
 * every run must give the "tokens" of the first. */
static inline void eu_cli_same_tokens(const char *target, const char *cfg, int k,
                                      const char *const *runs, int n_runs, char **outs) {
    char cmd[8192];
    for (int i = 0; i < n_runs; i++) {
        if (strcmp(runs[i], "CONFIG") != 0)
            snprintf(cmd, sizeof cmd,
                     "%s generate -m %s -t 1 --no-display-prompt -p t5t9t13t5t9t13t5t9 -n 48 "
                     "--temp 0 -k %d --draft-policy fixed --json %s",
                     SD_BINARY, target, k, runs[i]);
        else
            snprintf(cmd, sizeof cmd,
                     "%s generate --config %s -t 1 --no-display-prompt -p t5t9t13t5t9t13t5t9 -n "
                     "48 --temp 0 -k %d --draft-policy fixed --json",
                     SD_BINARY, cfg, k);
        char *e = NULL;
        cr_assert_eq(tu_run(cmd, &outs[i], &e), 0, "%s: %s", runs[i], e);
        free(e);
        const char *a = strstr(outs[i], "\"tokens\":["), *a0 = strstr(outs[0], "\"tokens\":[");
        cr_assert(a && a0);
        cr_assert_eq(strncmp(a, a0, (size_t)(strchr(a0, ']') - a0)), 0,
                     "%s: tokens differ from target alone", runs[i]);
    }
}

/* Greedy target alone on session s (a fresh contiguous session of model m), one token at a
 * time: ref[0..n_pred) after the prompt; end-of-generation ids never win (as a request
 * with ignore_eos). */
static inline void eu_greedy_ref(sd_session *s, const sd_model *m, const int32_t *prompt,
                                 int32_t n_prompt, int32_t *ref, int32_t n_pred) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *l = malloc((size_t)nv * sizeof(float));
    cr_assert_not_null(l);
    sd_error err = {0};
    cr_assert_eq(sd_session_eval(s, prompt, n_prompt, l, 1, &err), SD_OK, "%s", err.msg);
    const sd_vocab *v = sd_model_vocab(m);
    for (int32_t i = 0; i < n_pred; i++) {
        for (int32_t t = 0; t < nv; t++)
            if (t == sd_vocab_eos(v) || sd_vocab_is_eog(v, t)) l[t] = -INFINITY;
        ref[i] = sd_argmax(l, nv);
        if (i + 1 < n_pred)
            cr_assert_eq(sd_session_eval(s, &ref[i], 1, l, 1, &err), SD_OK, "%s", err.msg);
    }
    free(l);
}

/* Gumbel sampling with sp (temp > 0) and seed, target alone on session s (fresh,
 * contiguous, of model m), one token at a time: end-of-generation ids masked (-inf, as
 * ignore_eos), the row warped (sd_warp), the token sd_gumbel_sample keyed by (seed, the
 * context index it takes). No penalties or biases. */
static inline void eu_gumbel_ref(sd_session *s, const sd_model *m, const sd_sampling_params *sp,
                                 uint64_t seed, const int32_t *prompt, int32_t n_prompt,
                                 int32_t *ref, int32_t n_pred) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *l = malloc((size_t)nv * sizeof(float)), *p = malloc((size_t)nv * sizeof(float));
    int32_t *scratch = malloc((size_t)nv * sizeof(int32_t));
    cr_assert(l && p && scratch);
    sd_error err = {0};
    cr_assert_eq(sd_session_eval(s, prompt, n_prompt, l, 1, &err), SD_OK, "%s", err.msg);
    const sd_vocab *v = sd_model_vocab(m);
    for (int32_t i = 0; i < n_pred; i++) {
        for (int32_t t = 0; t < nv; t++)
            if (t == sd_vocab_eos(v) || sd_vocab_is_eog(v, t)) l[t] = -INFINITY;
        cr_assert_eq(sd_warp(sp, l, nv, p, scratch, &err), SD_OK, "%s", err.msg);
        ref[i] = sd_gumbel_sample(p, nv, NULL, seed, (int64_t)n_prompt + i);
        cr_assert_geq(ref[i], 0);
        if (i + 1 < n_pred)
            cr_assert_eq(sd_session_eval(s, &ref[i], 1, l, 1, &err), SD_OK, "%s", err.msg);
    }
    free(l);
    free(p);
    free(scratch);
}

#endif
