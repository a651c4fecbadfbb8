/*
 * tests/test_batcher.c: the multi-sequence engine (sd_batcher) on the tests' random pair.
 *
 * References are computed here, independently of the batcher: greedy decoding is a plain
 * loop of one-token evaluations and argmax on a single-sequence session of the target
 * (stopping at EOS), so every greedy output the batcher gives (any draft type, alone or
 * among others, with a cached prefix or not) must equal it token for token. Sampled
 * output has no such reference (the draws depend on the draft and K); for it the
 * batcher's own output alone is the reference of the same request among others (fixed
 * K), and choice i of an n-choice request equals a single request of seed + i.
 * After every test the pools' accounting balances and every block comes back.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"
#include "engine_util.h"

static char g_dir[1024], g_t[1200], g_d[1200];

static void setup(void) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(batcher, .init = setup, .fini = teardown, .timeout = 600);

#define MAXOUT 256

/* What the callbacks collected for one choice. */
typedef struct out {
    int32_t toks[MAXOUT];
    int32_t n;
    char text[4096];
    size_t len;
    int done, n_events, after_done;
    sd_stop_reason stop;
    sd_gen_stats st;
    int cancel_after; /* > 0: return 1 (cancel) once this many tokens arrived */
} out;

typedef struct job {
    out ch[SD_MAX_CHOICES];
} job;

static int collect(void *user, const sd_req_event *ev) {
    job *j = user;
    out *o = &j->ch[ev->index];
    if (o->done) o->after_done++;
    o->n_events++;
    for (int32_t i = 0; i < ev->n_tokens && o->n < MAXOUT; i++)
        o->toks[o->n++] = ev->tokens[i];
    if (o->len + ev->len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, ev->len);
        o->len += ev->len;
    }
    if (ev->done) {
        o->done = 1;
        o->stop = ev->stop;
        o->st = *ev->stats;
    }
    return o->cancel_after > 0 && o->n >= o->cancel_after;
}

static sd_engine *engine(int with_draft) {
    sd_engine_params ep = eu_engine_params(g_t, with_draft ? g_d : NULL, 0, 2);
    ep.kv_type = SD_TYPE_F16;
    ep.models_only = 1;
    return eu_engine_open(&ep);
}

static sd_batcher *batcher(sd_engine *e, int32_t n_parallel, int32_t n_blocks, int32_t n_batch) {
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = n_parallel;
    bp.n_kv_blocks = n_blocks;
    bp.kv_block = 8;
    bp.n_batch = n_batch;
    bp.draft_chunk = 8;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    return b;
}

static void expect_all_blocks_back(sd_batcher *b) {
    sd_error err = {0};
    cr_assert_eq(sd_batcher_check(b, &err), SD_OK, "%s", err.msg);
    sd_batcher_clear_cache(b);
    sd_batcher_stats st;
    sd_batcher_get_stats(b, &st);
    cr_expect_eq(st.kv.n_free, st.kv.n_blocks, "target blocks leaked");
    if (st.kv_draft.n_blocks) cr_expect_eq(st.kv_draft.n_free, st.kv_draft.n_blocks);
    cr_expect_eq(st.n_running, 0);
    cr_expect_eq(st.n_queued, 0);
}

/* Prompt p of length n: ids from a small alphabet (so n-grams repeat) with a shared head
 * for p < 4 (the prefix cache's case). */
static int32_t prompt_tok(int p, int32_t i) {
    if (p < 4 && i < 24) return 3 + (i * 7) % 11;
    return 3 + (int32_t)((i * (p + 3) + p * 5) % 13);
}

static void make_prompt(int p, int32_t n, int32_t *out) {
    out[0] = 1; /* BOS */
    for (int32_t i = 1; i < n; i++)
        out[i] = prompt_tok(p, i);
}

/* The reference: greedy target-alone decoding, one token at a time. */
static int32_t greedy_ref(const sd_model *m, const int32_t *prompt, int32_t n_prompt,
                          int32_t n_predict, int32_t *out) {
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 128;
    sp.kv_type = SD_TYPE_F16;
    sp.n_threads = 1;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab, eos = sd_vocab_eos(sd_model_vocab(m));
    float *l = malloc((size_t)nv * sizeof(float));
    for (int32_t i = 0; i < n_prompt; i++)
        cr_assert_eq(sd_session_eval(s, prompt + i, 1, l, 1, &err), SD_OK, "%s", err.msg);
    int32_t n = 0;
    while (n < n_predict) {
        const int32_t t = sd_argmax(l, nv);
        if (t == eos || sd_vocab_is_eog(sd_model_vocab(m), t)) break;
        out[n++] = t;
        if (n == n_predict) break;
        cr_assert_eq(sd_session_eval(s, &t, 1, l, 1, &err), SD_OK, "%s", err.msg);
    }
    free(l);
    sd_session_free(s);
    return n;
}

static sd_request request(const int32_t *prompt, int32_t n_prompt, int32_t n_predict,
                          sd_draft_type dt, int32_t k, float temp, uint64_t seed, job *j) {
    sd_request r;
    memset(&r, 0, sizeof r);
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.gen = sd_gen_default_params();
    r.gen.n_predict = n_predict;
    r.gen.n_draft = k;
    r.gen.draft_type = dt;
    r.gen.k_policy = SD_K_FIXED;
    r.gen.samp.temp = temp;
    r.gen.seed = seed;
    r.n_choices = 1;
    r.cb = collect;
    r.user = j;
    return r;
}

#define NREQ 8

/* 8 greedy requests of every draft type, 4 at a time, with prompts of 5 .. 40 tokens:
 * each equals the reference; the prefix cache was used. */
Test(batcher, greedy_concurrent_equals_target_alone) {
    sd_engine *e = engine(1);
    const sd_model *tm = sd_engine_target(e);
    int32_t prompts[NREQ][48], lens[NREQ], ref[NREQ][MAXOUT], n_ref[NREQ];
    const int32_t n_predict = 40;
    for (int p = 0; p < NREQ; p++) {
        lens[p] = 5 + (p * 5) % 36 + (p < 4 ? 26 : 0);
        if (lens[p] > 48) lens[p] = 48;
        make_prompt(p, lens[p], prompts[p]);
        n_ref[p] = greedy_ref(tm, prompts[p], lens[p], n_predict, ref[p]);
    }
    const sd_draft_type types[6] = {SD_DRAFT_NONE,      SD_DRAFT_LLM,    SD_DRAFT_NGRAM,
                                    SD_DRAFT_NGRAM_LLM, SD_DRAFT_SUFFIX, SD_DRAFT_SUFFIX_LLM};
    sd_batcher *b = batcher(e, 4, 0, 64);
    for (int ti = 0; ti < 6; ti++) {
        static job jobs[NREQ];
        memset(jobs, 0, sizeof jobs);
        sd_error err = {0};
        for (int p = 0; p < NREQ; p++) {
            sd_request r = request(prompts[p], lens[p], n_predict, types[ti], 1 + p % 4, 0.0f,
                                   (uint64_t)p, &jobs[p]);
            if (p % 2) r.gen.k_policy = SD_K_ADAPTIVE; /* the batch's K: the same tokens */
            cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
        }
        eu_drain(b, 1);
        int64_t n_drafted = 0;
        for (int p = 0; p < NREQ; p++) {
            const out *o = &jobs[p].ch[0];
            cr_assert(o->done, "request %d not done", p);
            cr_expect_eq(o->after_done, 0);
            cr_assert_eq(o->n, n_ref[p], "%s: request %d: %d tokens, alone %d",
                         sd_draft_type_name(types[ti]), p, o->n, n_ref[p]);
            cr_assert(memcmp(o->toks, ref[p], (size_t)o->n * sizeof(int32_t)) == 0,
                      "%s: request %d differs from target alone", sd_draft_type_name(types[ti]), p);
            cr_expect_eq(o->st.n_generated, o->n);
            cr_expect(o->stop == SD_STOP_EOS || o->stop == SD_STOP_MAX_TOKENS);
            n_drafted += o->st.n_drafted;
        }
        if (types[ti] == SD_DRAFT_SUFFIX)
            cr_expect_gt(n_drafted, 0, "the suffix proposer never drafted in the batcher");
    }
    sd_batcher_stats st;
    sd_batcher_get_stats(b, &st);
    cr_expect_gt(st.n_prefix_hit_tokens, 0, "prompts sharing 24 tokens reuse blocks");
    cr_expect_eq(st.n_finished, 6 * NREQ);
    cr_expect_gt(st.n_accepted, 0);
    expect_all_blocks_back(b);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* Sampled, fixed K, LLM draft: each request alone (n_parallel 1) equals itself among
 * others in another arrival order (n_parallel 4). */
Test(batcher, sampled_output_is_batch_invariant) {
    sd_engine *e = engine(1);
    int32_t prompts[NREQ][40];
    for (int p = 0; p < NREQ; p++)
        make_prompt(p, 10 + p * 3, prompts[p]);
    static job alone[NREQ], together[NREQ];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    sd_error err = {0};
    const sd_draft_type types[3] = {SD_DRAFT_LLM, SD_DRAFT_NGRAM, SD_DRAFT_NONE};
    sd_batcher *b1 = batcher(e, 1, 0, 64);
    for (int p = 0; p < NREQ; p++) {
        sd_request r = request(prompts[p], 10 + p * 3, 48, types[p % 3], 3, 0.9f,
                               1000 + (uint64_t)p, &alone[p]);
        if (p % 2 == 0) r.gen.samp.spec = SD_SPEC_REJECTION; /* q rows, fixed K */
        cr_assert_eq(sd_batcher_submit(b1, &r, NULL, &err), SD_OK, "%s", err.msg);
        eu_drain(b1, 1); /* one at a time */
    }
    expect_all_blocks_back(b1);
    sd_batcher_free(b1);
    sd_batcher *b4 = batcher(e, 4, 0, 24); /* a small n_batch: prompts in several chunks */
    for (int q = 0; q < NREQ; q++) {
        const int p = NREQ - 1 - q; /* reverse arrival */
        sd_request r = request(prompts[p], 10 + p * 3, 48, types[p % 3], 3, 0.9f,
                               1000 + (uint64_t)p, &together[p]);
        if (p % 2 == 0) r.gen.samp.spec = SD_SPEC_REJECTION;
        cr_assert_eq(sd_batcher_submit(b4, &r, NULL, &err), SD_OK, "%s", err.msg);
        if (q == 3) { /* some arrive while others run */
            sd_batcher_step(b4, &err);
            sd_batcher_step(b4, &err);
        }
    }
    eu_drain(b4, 1);
    int differ_from_first = 0;
    for (int p = 0; p < NREQ; p++) {
        const out *a = &alone[p].ch[0], *t = &together[p].ch[0];
        cr_assert(a->done && t->done);
        cr_assert_eq(t->n, a->n, "request %d: %d tokens together, %d alone", p, t->n, a->n);
        cr_assert(memcmp(t->toks, a->toks, (size_t)a->n * sizeof(int32_t)) == 0,
                  "request %d: sampled output differs beside others", p);
        cr_expect_eq(t->len, a->len);
        cr_expect(memcmp(t->text, a->text, a->len) == 0);
        differ_from_first |=
            p > 0 && (a->n != alone[0].ch[0].n ||
                      memcmp(a->toks, alone[0].ch[0].toks, (size_t)a->n * sizeof(int32_t)) != 0);
    }
    cr_expect(differ_from_first, "sampled outputs should vary across requests");
    expect_all_blocks_back(b4);
    sd_batcher_free(b4);
    sd_engine_free(e);
}

/* Gumbel sampling (the default): every request's sampled text, drafted with any draft
 * type and the adaptive K among others, equals sd_engine_generate's target-alone text of
 * the same seed (an independent loop over a single-sequence session). */
Test(batcher, gumbel_sampled_equals_generate_target_alone) {
    sd_engine *e = engine(1);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.n_threads = 1;
    ep.kv_type = SD_TYPE_F16;
    sd_engine *ref_e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &ref_e, &err), SD_OK, "%s", err.msg);
    int32_t prompts[NREQ][40], ref[NREQ][MAXOUT], n_ref[NREQ];
    for (int p = 0; p < NREQ; p++) {
        make_prompt(p, 8 + p * 4, prompts[p]);
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 40;
        gp.samp.temp = 0.9f;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.seed = 500 + (uint64_t)p;
        gp.n_draft = 0;
        gp.draft_type = SD_DRAFT_NONE;
        sd_gen_stats st;
        cr_assert_eq(sd_engine_generate(ref_e, &gp, prompts[p], 8 + p * 4, NULL, NULL, ref[p],
                                        MAXOUT, &st, &err),
                     SD_OK, "%s", err.msg);
        n_ref[p] = st.n_generated;
    }
    sd_batcher *b = batcher(e, 4, 0, 64);
    static job jobs[NREQ];
    memset(jobs, 0, sizeof jobs);
    const sd_draft_type types[5] = {SD_DRAFT_LLM, SD_DRAFT_NGRAM, SD_DRAFT_NGRAM_LLM, SD_DRAFT_NONE,
                                    SD_DRAFT_SUFFIX};
    for (int p = 0; p < NREQ; p++) {
        sd_request r = request(prompts[p], 8 + p * 4, 40, types[p % 5], 1 + p % 3, 0.9f,
                               500 + (uint64_t)p, &jobs[p]);
        r.gen.samp.spec = SD_SPEC_GUMBEL;
        r.gen.k_policy = p % 2 ? SD_K_ADAPTIVE : SD_K_FIXED;
        cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
    }
    eu_drain(b, 1);
    int64_t drafted = 0;
    for (int p = 0; p < NREQ; p++) {
        const out *o = &jobs[p].ch[0];
        cr_assert(o->done);
        cr_assert_eq(o->n, n_ref[p], "request %d: %d tokens, generate %d", p, o->n, n_ref[p]);
        cr_assert(memcmp(o->toks, ref[p], (size_t)o->n * sizeof(int32_t)) == 0,
                  "request %d: sampled text differs from generate's target alone", p);
        drafted += o->st.n_drafted;
    }
    cr_expect_gt(drafted, 0);
    expect_all_blocks_back(b);
    sd_batcher_free(b);
    sd_engine_free(ref_e);
    sd_engine_free(e);
}

/* n = 3 choices share the prompt's blocks: choice i equals the single request of seed + i
 * (sampled), and all equal target alone (greedy). */
Test(batcher, choices_share_the_prompt) {
    sd_engine *e = engine(1);
    int32_t prompt[30];
    make_prompt(5, 30, prompt);
    sd_batcher *b = batcher(e, 4, 0, 64);
    sd_error err = {0};
    static job multi, single[3];
    memset(&multi, 0, sizeof multi);
    memset(single, 0, sizeof single);
    sd_request r = request(prompt, 30, 32, SD_DRAFT_LLM, 2, 0.8f, 77, &multi);
    r.n_choices = 3;
    cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
    eu_drain(b, 1);
    for (int i = 0; i < 3; i++) {
        sd_request s = request(prompt, 30, 32, SD_DRAFT_LLM, 2, 0.8f, 77 + (uint64_t)i, &single[i]);
        cr_assert_eq(sd_batcher_submit(b, &s, NULL, &err), SD_OK, "%s", err.msg);
        eu_drain(b, 1);
        const out *m = &multi.ch[i], *o = &single[i].ch[0];
        cr_assert(m->done && o->done);
        cr_assert_eq(m->n, o->n, "choice %d", i);
        cr_assert(memcmp(m->toks, o->toks, (size_t)o->n * sizeof(int32_t)) == 0, "choice %d", i);
    }
    /* Greedy choices: all the target-alone output. */
    int32_t ref[MAXOUT];
    const int32_t n_ref = greedy_ref(sd_engine_target(e), prompt, 30, 32, ref);
    static job g;
    memset(&g, 0, sizeof g);
    r = request(prompt, 30, 32, SD_DRAFT_NGRAM_LLM, 3, 0.0f, 1, &g);
    r.n_choices = 2;
    cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
    eu_drain(b, 1);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(g.ch[i].n, n_ref);
        cr_assert(memcmp(g.ch[i].toks, ref, (size_t)n_ref * sizeof(int32_t)) == 0);
    }
    expect_all_blocks_back(b);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* Stop strings end the text before them, never give them out, and the tokens stop there
 * too; the streamed pieces add up to the whole text. */
Test(batcher, stop_strings) {
    sd_engine *e = engine(0);
    int32_t prompt[12], ref[MAXOUT];
    make_prompt(6, 12, prompt);
    const int32_t n_ref = greedy_ref(sd_engine_target(e), prompt, 12, 30, ref);
    cr_assert_geq(n_ref, 8);
    /* The text of the reference: pieces of the synthetic vocabulary ("t5" ...). */
    const sd_vocab *v = sd_engine_vocab(e);
    char full[4096] = "", piece[64];
    size_t offs[MAXOUT + 1];
    for (int32_t i = 0; i < n_ref; i++) {
        offs[i] = strlen(full);
        const int len = sd_vocab_token_to_piece(v, ref[i], 0, piece, sizeof piece - 1);
        piece[len] = '\0';
        strcat(full, piece);
    }
    offs[n_ref] = strlen(full);
    /* A stop string spanning the 5th and 6th tokens' text, cut inside each. */
    char stop[64];
    const size_t from = offs[4] + 1, to = offs[5] + 1;
    memcpy(stop, full + from, to - from);
    stop[to - from] = '\0';
    const char *stops[2] = {"never-there", stop};
    sd_batcher *b = batcher(e, 2, 0, 64);
    static job j;
    memset(&j, 0, sizeof j);
    sd_request r = request(prompt, 12, 30, SD_DRAFT_NONE, 0, 0.0f, 1, &j);
    r.stop = stops;
    r.n_stop = 2;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_OK, "%s", err.msg);
    eu_drain(b, 1);
    const out *o = &j.ch[0];
    cr_assert(o->done);
    cr_expect_eq(o->stop, SD_STOP_STRING);
    /* The text ends where the stop string's first occurrence starts. */
    const char *at = strstr(full, stop);
    cr_assert_not_null(at);
    cr_expect_eq(o->len, (size_t)(at - full), "text %zu bytes, expected %zu", o->len,
                 (size_t)(at - full));
    cr_expect(memcmp(o->text, full, o->len) == 0);
    cr_expect_leq(o->n, 6);
    cr_expect_gt(o->n_events, 1, "streamed in pieces");
    expect_all_blocks_back(b);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* A request the pool cannot hold yet waits; a full queue is SD_ERR_BUSY; a request
 * beyond the context or the pool is SD_ERR_CONTEXT; a cancelled request (running or
 * queued) ends with stop CANCEL and its blocks come back at once. */
Test(batcher, admission_queue_and_cancel) {
    sd_engine *e = engine(1);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 3;
    bp.n_kv_blocks = 24; /* 8 positions each: two requests of 80 positions at a time */
    bp.kv_block = 8;
    bp.n_batch = 32;
    bp.max_queue = 4;
    bp.draft_chunk = 8;
    bp.k_max = 2; /* a worst case of 40 + 40 + 1 + 2 positions: 11 blocks + 1 */
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int32_t prompt[40];
    make_prompt(7, 40, prompt);
    static job jobs[6];
    memset(jobs, 0, sizeof jobs);
    int64_t ids[6];
    for (int i = 0; i < 4; i++) {
        sd_request r = request(prompt, 40, 40, SD_DRAFT_LLM, 2, 0.0f, 1, &jobs[i]);
        cr_assert_eq(sd_batcher_submit(b, &r, &ids[i], &err), SD_OK, "%s", err.msg);
    }
    sd_request r5 = request(prompt, 40, 40, SD_DRAFT_NONE, 0, 0.0f, 1, &jobs[4]);
    cr_expect_eq(sd_batcher_submit(b, &r5, NULL, &err), SD_ERR_BUSY);
    sd_request big = request(prompt, 40, 100, SD_DRAFT_NONE, 0, 0.0f, 1, &jobs[5]);
    cr_expect_eq(sd_batcher_submit(b, &big, NULL, &err), SD_ERR_CONTEXT, "beyond n_ctx 128");
    cr_expect(strstr(err.msg, "context") != NULL, "%s", err.msg);
    sd_batcher_step(b, &err);
    sd_batcher_stats st;
    sd_batcher_get_stats(b, &st);
    cr_expect_eq(st.n_running, 2, "the pool holds two worst cases, not three");
    cr_expect_eq(st.n_queued, 2);
    /* Cancel a queued one and a running one. */
    cr_expect_eq(sd_batcher_cancel(b, ids[3]), 0);
    jobs[1].ch[0].cancel_after = 0;
    cr_expect_eq(sd_batcher_cancel(b, ids[0]), 0);
    cr_expect_eq(sd_batcher_cancel(b, 9999), -1);
    sd_batcher_step(b, &err);
    cr_expect(jobs[3].ch[0].done && jobs[3].ch[0].stop == SD_STOP_CANCEL);
    cr_expect(jobs[0].ch[0].done && jobs[0].ch[0].stop == SD_STOP_CANCEL);
    cr_assert_eq(sd_batcher_check(b, &err), SD_OK, "%s", err.msg);
    sd_batcher_get_stats(b, &st);
    cr_expect_eq(st.n_running, 2, "the waiting one got in");
    /* A callback that asks to cancel. */
    static job jc;
    memset(&jc, 0, sizeof jc);
    jc.ch[0].cancel_after = 3;
    sd_request rc = request(prompt, 40, 40, SD_DRAFT_NGRAM, 2, 0.0f, 1, &jc);
    cr_assert_eq(sd_batcher_submit(b, &rc, NULL, &err), SD_OK, "%s", err.msg);
    eu_drain(b, 1);
    cr_expect(jobs[1].ch[0].done && jobs[1].ch[0].stop != SD_STOP_CANCEL);
    cr_expect(jobs[2].ch[0].done && jobs[2].ch[0].stop != SD_STOP_CANCEL);
    cr_expect(jc.ch[0].done && jc.ch[0].stop == SD_STOP_CANCEL);
    cr_expect_geq(jc.ch[0].n, 3);
    sd_batcher_get_stats(b, &st);
    cr_expect_eq(st.n_cancelled, 3);
    cr_expect_eq(st.n_finished, 2);
    /* Closed: no more requests. */
    sd_batcher_close(b, 0);
    cr_expect_eq(sd_batcher_submit(b, &r5, NULL, &err), SD_ERR_BUSY);
    expect_all_blocks_back(b);
    sd_batcher_free(b);
    sd_engine_free(e);
}

Test(batcher, bad_requests) {
    sd_engine *e = engine(0);
    sd_batcher *b = batcher(e, 2, 0, 64);
    int32_t prompt[4] = {1, 5, 6, 7};
    static job j;
    sd_error err = {0};
    sd_request r = request(prompt, 4, 8, SD_DRAFT_LLM, 2, 0.0f, 1, &j);
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG, "no draft model");
    cr_expect(strstr(err.msg, "draft model") != NULL, "%s", err.msg);
    r = request(prompt, 0, 8, SD_DRAFT_NONE, 0, 0.0f, 1, &j);
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG);
    int32_t badp[2] = {1, 100000};
    r = request(badp, 2, 8, SD_DRAFT_NONE, 0, 0.0f, 1, &j);
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG);
    r = request(prompt, 4, 0, SD_DRAFT_NONE, 0, 0.0f, 1, &j);
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG);
    r = request(prompt, 4, 8, SD_DRAFT_NGRAM, 99, 0.0f, 1, &j);
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG);
    r = request(prompt, 4, 8, SD_DRAFT_NONE, 0, 0.0f, 1, &j);
    r.n_choices = 3;
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG, "more choices than slots");
    const char *empty[1] = {""};
    r.n_choices = 1;
    r.stop = empty;
    r.n_stop = 1;
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_ARG);
    /* what token trees do not take (an adaptive K): refused by name, not ignored */
    r = request(prompt, 4, 8, SD_DRAFT_NGRAM, 2, 0.0f, 1, &j);
    r.gen.tree_width = 2;
    r.gen.k_policy = SD_K_ADAPTIVE;
    cr_expect_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "tree") != NULL, "%s", err.msg);
    sd_batcher_stats st;
    sd_batcher_get_stats(b, &st);
    cr_expect_eq(st.n_rejected, 8);
    cr_expect_eq(st.n_submitted, 0);
    sd_batcher_free(b);
    sd_engine_free(e);
}
