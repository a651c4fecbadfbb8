/*
 * tests/test_logprobs.c: logprobs, top_logprobs and logit_bias under speculation, on the
 * shipped TinyStories pair (models/tinystories-{target,draft}-q8_0.gguf), through both
 * clients (sd_engine_generate and the batcher).
 *
 * References are computed here, independently of the engine: the target's row at every
 * emitted position is recomputed by a plain one-token-at-a-time loop on a fresh session
 * of the target (sd_session_eval), its log-softmax in long double and its top entries by
 * a full qsort; greedy reference text (with a banned token) is that loop's argmax. With
 * and without a draft (LLM, n-gram), greedy and Gumbel sampling at temperature 0.7 with a
 * seed, every emitted token's logprobs must be bit-identical to target-alone's.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"
#include "engine_util.h"

#define TARGET EU_TINY_TARGET
#define DRAFT  EU_TINY_DRAFT
#define NPRED  40
#define NTOP   5

TestSuite(logprobs, .timeout = 600);

static int32_t prompt(sd_engine *e, int32_t **ids) {
    return eu_prompt(e, "Once upon a time, there was a little girl named Lily. She", ids);
}

typedef struct run {
    int32_t toks[NPRED];
    sd_token_logprob lp[NPRED];
    int32_t n;
    sd_gen_stats st;
} run;

static void gen(sd_engine *e, sd_draft_type dt, float temp, const sd_logit_bias *bias,
                int32_t n_bias, int logprobs, run *r) {
    int32_t *ids = NULL;
    const int32_t n_ids = prompt(e, &ids);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = NPRED;
    gp.n_draft = dt == SD_DRAFT_NONE ? 0 : 4;
    gp.draft_type = dt;
    gp.k_policy = SD_K_FIXED;
    gp.samp.temp = temp;
    gp.seed = 1234;
    gp.samp.logit_bias = bias;
    gp.samp.n_logit_bias = n_bias;
    gp.logprobs = logprobs;
    gp.top_logprobs = NTOP;
    gp.logprobs_out = r->lp;
    memset(r, 0, sizeof *r);
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, r->toks, NPRED, &r->st, &err),
                 SD_OK, "%s", err.msg);
    r->n = r->st.n_generated;
    /* A run with a draft must draft, or the test says nothing about speculation. */
    if (dt != SD_DRAFT_NONE)
        cr_assert_gt(r->st.n_drafted, 0, "%s drafted nothing", sd_draft_type_name(dt));
    cr_assert_gt(r->n, 4, "too short a run to test anything");
    free(ids);
}

static void expect_same_bits(const run *a, const run *b, const char *what) {
    cr_assert_eq(a->n, b->n, "%s: %d tokens, target alone %d", what, a->n, b->n);
    for (int32_t i = 0; i < a->n; i++) {
        cr_assert_eq(a->toks[i], b->toks[i], "%s: token %d", what, i);
        const sd_token_logprob *x = &a->lp[i], *y = &b->lp[i];
        cr_assert_eq(x->token, a->toks[i], "%s: lp %d names token %d", what, i, x->token);
        cr_assert(memcmp(&x->logprob, &y->logprob, sizeof x->logprob) == 0,
                  "%s: logprob %d: %.17g vs target alone %.17g", what, i, x->logprob, y->logprob);
        cr_assert_eq(x->n_top, y->n_top, "%s: n_top %d", what, i);
        for (int32_t t = 0; t < x->n_top; t++) {
            cr_assert_eq(x->top_id[t], y->top_id[t], "%s: top %d of %d", what, t, i);
            cr_assert(memcmp(&x->top_logprob[t], &y->top_logprob[t], sizeof(double)) == 0,
                      "%s: top logprob %d of %d", what, t, i);
        }
    }
}

/* The raw rows of the target at each of r's positions, one token at a time. */
static float *ref_rows(sd_engine *e, const run *r, int32_t *nv_out) {
    const sd_model *m = sd_engine_target(e);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    int32_t *ids = NULL;
    const int32_t n_ids = prompt(e, &ids);
    sd_session_params sp = sd_engine_session_params(e, 0); /* the same KV type */
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    float *rows = malloc((size_t)r->n * (size_t)nv * sizeof *rows);
    cr_assert_not_null(rows);
    for (int32_t i = 0; i < n_ids; i++)
        cr_assert_eq(sd_session_eval(s, ids + i, 1, rows, 1, &err), SD_OK, "%s", err.msg);
    for (int32_t i = 1; i < r->n; i++)
        cr_assert_eq(sd_session_eval(s, &r->toks[i - 1], 1, rows + (size_t)i * nv, 1, &err), SD_OK,
                     "%s", err.msg);
    sd_session_free(s);
    free(ids);
    *nv_out = nv;
    return rows;
}

static const float *g_row;
static int by_logit_desc(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_row[i] != g_row[j]) return g_row[i] > g_row[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* Every logprob of r against an independent log-softmax (long double) and sort. */
static void expect_independent(sd_engine *e, const run *r) {
    int32_t nv = 0;
    float *rows = ref_rows(e, r, &nv);
    int32_t *order = malloc((size_t)nv * sizeof *order);
    for (int32_t i = 0; i < r->n; i++) {
        const float *row = rows + (size_t)i * nv;
        long double sum = 0.0L;
        for (int32_t j = 0; j < nv; j++)
            sum += expl((long double)row[j]);
        const long double lse = logl(sum);
        const sd_token_logprob *x = &r->lp[i];
        cr_assert_eq(x->token, r->toks[i]);
        const double want = (double)((long double)row[r->toks[i]] - lse);
        cr_assert(fabs(x->logprob - want) < 1e-6, "logprob %d: %.12g, independent %.12g", i,
                  x->logprob, want);
        cr_assert(x->logprob <= 0.0);
        for (int32_t j = 0; j < nv; j++)
            order[j] = j;
        g_row = row;
        qsort(order, (size_t)nv, sizeof *order, by_logit_desc);
        cr_assert_eq(x->n_top, NTOP);
        for (int32_t t = 0; t < NTOP; t++) {
            cr_assert_eq(x->top_id[t], order[t], "top %d of %d: %d, sorted %d", t, i, x->top_id[t],
                         order[t]);
            const double wt = (double)((long double)row[order[t]] - lse);
            cr_assert(fabs(x->top_logprob[t] - wt) < 1e-6, "top logprob %d of %d", t, i);
            if (t > 0) cr_assert(x->top_logprob[t] <= x->top_logprob[t - 1]);
            if (order[t] == x->token) cr_assert(x->top_logprob[t] == x->logprob);
        }
    }
    free(order);
    free(rows);
}

Test(logprobs, generate_greedy_equals_target_alone_and_reference) {
    sd_engine *e = eu_tiny_engine(0);
    static run alone, llm, ngram;
    gen(e, SD_DRAFT_NONE, 0.0f, NULL, 0, 1, &alone);
    expect_independent(e, &alone);
    gen(e, SD_DRAFT_LLM, 0.0f, NULL, 0, 1, &llm);
    expect_same_bits(&llm, &alone, "llm draft");
    gen(e, SD_DRAFT_NGRAM, 0.0f, NULL, 0, 1, &ngram);
    expect_same_bits(&ngram, &alone, "ngram draft");
    sd_engine_free(e);
}

Test(logprobs, generate_sampled_equals_target_alone_and_reference) {
    sd_engine *e = eu_tiny_engine(0);
    static run alone, llm, ngram;
    gen(e, SD_DRAFT_NONE, 0.7f, NULL, 0, 1, &alone);
    expect_independent(e, &alone);
    gen(e, SD_DRAFT_LLM, 0.7f, NULL, 0, 1, &llm);
    expect_same_bits(&llm, &alone, "llm draft, temp 0.7");
    gen(e, SD_DRAFT_NGRAM, 0.7f, NULL, 0, 1, &ngram);
    expect_same_bits(&ngram, &alone, "ngram draft, temp 0.7");
    sd_engine_free(e);
}

/* Greedy target alone with token `ban` at -inf, one token at a time (the reference). */
static int32_t greedy_banned(sd_engine *e, int32_t ban, int32_t *out) {
    const sd_model *m = sd_engine_target(e);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    const sd_vocab *v = sd_model_vocab(m);
    int32_t *ids = NULL;
    const int32_t n_ids = prompt(e, &ids);
    sd_session_params sp = sd_engine_session_params(e, 0); /* the same KV type */
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    float *l = malloc((size_t)nv * sizeof *l);
    for (int32_t i = 0; i < n_ids; i++)
        cr_assert_eq(sd_session_eval(s, ids + i, 1, l, 1, &err), SD_OK, "%s", err.msg);
    int32_t n = 0;
    while (n < NPRED) {
        l[ban] = -INFINITY;
        int32_t t = 0;
        for (int32_t j = 1; j < nv; j++)
            if (l[j] > l[t]) t = j;
        if (t == sd_vocab_eos(v) || sd_vocab_is_eog(v, t)) break;
        out[n++] = t;
        if (n == NPRED) break;
        cr_assert_eq(sd_session_eval(s, &t, 1, l, 1, &err), SD_OK, "%s", err.msg);
    }
    free(l);
    sd_session_free(s);
    free(ids);
    return n;
}

Test(logprobs, logit_bias_plus_100_forces_and_minus_100_bans) {
    sd_engine *e = eu_tiny_engine(0);
    static run plain, forced, ban_alone, ban_llm, ban_ngram;
    gen(e, SD_DRAFT_NONE, 0.0f, NULL, 0, 0, &plain);
    /* +100 on a token greedy does not emit first: greedy emits it. */
    const int32_t pick = plain.toks[0] == 300 ? 301 : 300;
    const sd_logit_bias plus = {pick, 100.0f};
    gen(e, SD_DRAFT_LLM, 0.0f, &plus, 1, 1, &forced);
    cr_assert_eq(forced.toks[0], pick, "the +100 token %d is not emitted (%d)", pick,
                 forced.toks[0]);
    /* Logprobs stay the model's raw distribution: the bias does not move them. */
    cr_assert(forced.lp[0].logprob < plain.lp[0].logprob || plain.toks[0] == pick);
    expect_independent(e, &forced);
    /* The draft's rows get the bias too: where the bias decides every token, every
     * drafted token is accepted (a draft without it would propose its own text). */
    int all = 1;
    for (int32_t i = 0; i < forced.n; i++)
        all &= forced.toks[i] == pick;
    cr_assert(all, "the +100 bias does not decide every token here: pick another");
    cr_assert_gt(forced.st.n_drafted, 0);
    cr_assert_eq(forced.st.n_accepted, forced.st.n_drafted);
    /* -100 bans the first greedy token: output equals target alone with the same ban, and
     * with a draft the same again. */
    const int32_t ban = plain.toks[0];
    const sd_logit_bias minus = {ban, -100.0f};
    int32_t ref[NPRED];
    const int32_t n_ref = greedy_banned(e, ban, ref);
    gen(e, SD_DRAFT_NONE, 0.0f, &minus, 1, 1, &ban_alone);
    cr_assert_eq(ban_alone.n, n_ref);
    for (int32_t i = 0; i < n_ref; i++) {
        cr_assert_eq(ban_alone.toks[i], ref[i], "token %d with the ban", i);
        cr_assert_neq(ban_alone.toks[i], ban);
    }
    expect_independent(e, &ban_alone); /* the raw rows: the ban is not in the logprobs */
    gen(e, SD_DRAFT_LLM, 0.0f, &minus, 1, 1, &ban_llm);
    expect_same_bits(&ban_llm, &ban_alone, "ban, llm draft");
    gen(e, SD_DRAFT_NGRAM, 0.0f, &minus, 1, 1, &ban_ngram);
    expect_same_bits(&ban_ngram, &ban_alone, "ban, ngram draft");
    sd_engine_free(e);
}

Test(logprobs, logit_bias_checked) {
    sd_engine *e = eu_tiny_engine(0);
    int32_t *ids = NULL;
    const int32_t n_ids = prompt(e, &ids);
    const int32_t nv = sd_model_hparams(sd_engine_target(e))->n_vocab;
    const sd_logit_bias bad[] = {{nv, 1.0f}, {-1, 1.0f}, {5, 101.0f}, {5, NAN}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 4;
        gp.samp.logit_bias = &bad[i];
        gp.samp.n_logit_bias = 1;
        int32_t out[4];
        sd_gen_stats st;
        sd_error err = {0};
        cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out, 4, &st, &err),
                     SD_ERR_ARG, "bad bias %zu accepted", i);
        cr_assert(strstr(err.msg, "logit_bias"), "%s", err.msg);
    }
    free(ids);
    sd_engine_free(e);
}

/* ---- the batcher ---- */

typedef struct bjob {
    run r;
    int done, bad;
} bjob;

static int collect(void *user, const sd_req_event *ev) {
    bjob *j = user;
    if (ev->n_tokens > 0 && !ev->logprobs) j->bad = 1;
    for (int32_t i = 0; i < ev->n_tokens && j->r.n < NPRED; i++) {
        j->r.toks[j->r.n] = ev->tokens[i];
        if (ev->logprobs) j->r.lp[j->r.n] = ev->logprobs[i];
        j->r.n++;
    }
    if (ev->done) {
        j->done = 1;
        j->r.st = *ev->stats;
    }
    return 0;
}

static void batch_run(sd_engine *e, float temp, const sd_logit_bias *bias, int32_t n_bias,
                      bjob *jobs) {
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 3;
    bp.n_ctx = 256;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int32_t *ids = NULL;
    const int32_t n_ids = prompt(e, &ids);
    const sd_draft_type dts[3] = {SD_DRAFT_NONE, SD_DRAFT_LLM, SD_DRAFT_NGRAM};
    for (int i = 0; i < 3; i++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = NPRED;
        gp.n_draft = dts[i] == SD_DRAFT_NONE ? 0 : 4;
        gp.draft_type = dts[i];
        gp.k_policy = SD_K_FIXED;
        gp.samp.temp = temp;
        gp.seed = 1234;
        gp.logprobs = 1;
        gp.top_logprobs = NTOP;
        gp.samp.logit_bias = bias;
        gp.samp.n_logit_bias = n_bias;
        eu_submit(b, ids, n_ids, &gp, collect, &jobs[i]);
    }
    free(ids);
    eu_drain(b, 0);
    for (int i = 0; i < 3; i++) {
        cr_assert(jobs[i].done);
        cr_assert(!jobs[i].bad, "an event without logprobs");
        if (dts[i] != SD_DRAFT_NONE) cr_assert_gt(jobs[i].r.st.n_drafted, 0, "drafted nothing");
    }
    sd_batcher_free(b);
}

Test(logprobs, batcher_equals_generate_with_and_without_draft) {
    sd_engine *e = eu_tiny_engine(0);
    static run alone_g, alone_s, ban_g;
    static bjob jg[3], js[3], jb[3];
    gen(e, SD_DRAFT_NONE, 0.0f, NULL, 0, 1, &alone_g);
    gen(e, SD_DRAFT_NONE, 0.7f, NULL, 0, 1, &alone_s);
    batch_run(e, 0.0f, NULL, 0, jg);
    batch_run(e, 0.7f, NULL, 0, js);
    const char *names[3] = {"batcher, no draft", "batcher, llm draft", "batcher, ngram draft"};
    for (int i = 0; i < 3; i++) {
        expect_same_bits(&jg[i].r, &alone_g, names[i]);
        expect_same_bits(&js[i].r, &alone_s, names[i]);
    }
    /* A ban through the batcher: the target-alone text with the ban, every draft type. */
    const sd_logit_bias minus = {alone_g.toks[0], -100.0f};
    gen(e, SD_DRAFT_NONE, 0.0f, &minus, 1, 1, &ban_g);
    batch_run(e, 0.0f, &minus, 1, jb);
    for (int i = 0; i < 3; i++)
        expect_same_bits(&jb[i].r, &ban_g, names[i]);
    sd_engine_free(e);
}

/* ---- specdec generate --json --logprobs N ---- */

/* The "logprobs" member of generate --json's output (malloc'd text), after checking the
 * run drafted when it had a draft. */
static char *cli_logprobs(const char *flags, int want_drafts) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -md %s -p 'Once upon a time, there was a little girl named Lily.'"
             " -n 40 --temp 0.7 --seed 7 -t 1 --json --logprobs 4 --log-disable %s",
             SD_BINARY, TARGET, DRAFT, flags);
    char *o = NULL;
    cr_assert_eq(tu_run(cmd, &o, NULL), 0, "%s", cmd);
    const char *drafted = strstr(o, "\"n_drafted\":");
    cr_assert_not_null(drafted);
    if (want_drafts) cr_assert_gt(atoi(drafted + 12), 0, "%s drafted nothing", flags);
    const char *lp = strstr(o, "\"logprobs\":[");
    cr_assert_not_null(lp, "no logprobs in %s", o);
    const char *end = strstr(lp, "]}]}");
    cr_assert_not_null(end);
    char *r = strndup(lp, (size_t)(end - lp));
    cr_assert_not_null(strstr(r, "\"top\":[{\"id\""));
    free(o);
    return r;
}

Test(logprobs, cli_json_logprobs_equal_with_and_without_draft) {
    eu_need_tiny();
    char *alone = cli_logprobs("--no-draft", 0);
    char *llm = cli_logprobs("--draft-policy fixed", 1);
    cr_expect_str_eq(llm, alone, "generate --logprobs with a draft differs from target alone");
    free(llm);
    free(alone);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p a -n 2 --logprobs 2", SD_BINARY, TARGET);
    char *o = NULL;
    cr_expect_neq(tu_run(cmd, NULL, &o), 0, "--logprobs without --json accepted");
    cr_expect_not_null(strstr(o, "--json"), "%s", o);
    free(o);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p a -n 2 --json --logprobs 21", SD_BINARY,
             TARGET);
    cr_expect_neq(tu_run(cmd, NULL, &o), 0, "--logprobs 21 accepted");
    cr_expect_not_null(strstr(o, "--logprobs"), "%s", o);
    free(o);
}
