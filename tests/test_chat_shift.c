/*
 * tests/test_chat_shift.c: --context-shift in the interactive chat (tools/chat_loop.c).
 *
 * A chat of many turns in a small context: without the shift it ends with a context
 * error; with it every turn is answered, and the conversation is shortened before an
 * answer that would not fit (its first `keep` tokens kept, the older half of the rest
 * dropped), the target's cache shifted, not recomputed: the batcher's prefix-cache copy
 * of the conversation (sd_engine_shift_cached), keys re-rotated, so after a shift the
 * cache still gives the kept conversation (n_cached > keep). The model has one layer and
 * an F32 cache, where a shifted cache equals a fresh evaluation to rounding
 * (tests/test_shift.c), so every answer must equal a fresh engine's greedy answer to the
 * conversation before it, token for token (the reference: target alone, a new engine per
 * turn, no cache).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/chat_loop.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"

static char g_dir[256], g_t[512], g_d[512];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec s = tu_llama_default_spec();
    s.n_layer = 1;
    s.n_ctx = 1024;
    cr_assert_eq(tu_make_llama(tu_path(g_t, sizeof g_t, g_dir, "t.gguf"), &s), 0);
    s.noise = 0.7f; /* a draft near the target: turns accept 2 .. 9 of 9 .. 24 drafts */
    s.noise_seed = 9;
    cr_assert_eq(tu_make_llama(tu_path(g_d, sizeof g_d, g_dir, "d.gguf"), &s), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(chat_shift, .init = setup, .fini = teardown, .timeout = 300);

#define N_CTX   192
#define MAXTURN 16

typedef struct turn_rec {
    int n;
    int32_t n_prompt[MAXTURN], n_answer[MAXTURN], n_cached[MAXTURN];
    int32_t *conv[MAXTURN]; /* the conversation after each answer (owned) */
    int32_t n_conv[MAXTURN];
} turn_rec;

static void on_turn(void *user, int turn, int32_t n_prompt, int32_t n_answer, int32_t n_cached,
                    const int32_t *conv, int32_t n_conv) {
    turn_rec *r = user;
    if (r->n < MAXTURN) {
        r->n_prompt[r->n] = n_prompt;
        r->n_answer[r->n] = n_answer;
        r->n_cached[r->n] = n_cached;
        r->conv[r->n] = malloc((size_t)n_conv * sizeof *conv);
        cr_assert(r->conv[r->n]);
        memcpy(r->conv[r->n], conv, (size_t)n_conv * sizeof *conv);
        r->n_conv[r->n] = n_conv;
    }
    r->n = turn;
}

static void rec_free(turn_rec *r) {
    for (int t = 0; t < r->n && t < MAXTURN; t++)
        free(r->conv[t]);
}

static sd_engine *open_engine_with(const char *draft) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = draft;
    ep.n_ctx = N_CTX;
    ep.n_threads = 1;
    ep.kv_type = SD_TYPE_F32;
    ep.gen.samp.temp = 0.0f;
    ep.gen.n_draft = draft ? 3 : 0;
    ep.gen.k_policy = SD_K_FIXED;
    ep.gen.draft_type = draft ? SD_DRAFT_LLM : SD_DRAFT_NONE;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

static sd_engine *open_engine(void) {
    return open_engine_with(NULL);
}

static const char k_lines[] = "t5 t6 t7\nt8 t9\nt10 t11\nt12 t13\nt14\nt15 t16\nt17\nt18 t19\n"
                              "t20\nt21 t22\n/exit\n";

/* Run the chat; returns its status, the record and the final conversation. */
static int chat(sd_engine *e, int shift, turn_rec *rec, int32_t **conv, int32_t *n_conv,
                sd_error *err) {
    FILE *in = fmemopen((void *)k_lines, sizeof k_lines - 1, "r");
    cr_assert(in);
    sd_cli_chat c;
    memset(&c, 0, sizeof c);
    c.engine = e;
    c.gen = sd_engine_params_of(e)->gen;
    c.max_tokens = 12;
    c.tmpl = "chatml";
    c.add_bos = 1;
    c.in = in;
    c.context_shift = shift;
    c.keep = 1; /* BOS */
    c.turn_done = on_turn;
    c.turn_user = rec;
    c.notes = getenv("SD_TEST_NOTES") != NULL; /* the per-turn statistics on stderr */
    int by_interrupt = -1;
    fflush(stdout);
    const int saved = dup(STDOUT_FILENO), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO); /* the answers */
    const int rc = sd_cli_chat_run(&c, conv, n_conv, &by_interrupt, err);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(devnull);
    fclose(in);
    return rc;
}

/* The answers of rec, each against a fresh engine's greedy answer to the conversation
 * before it; returns the turns the conversation was shortened before. */
static int check_fresh(const turn_rec *rec) {
    sd_error err = {0};
    int n_shift = 0;
    for (int t = 0; t < rec->n; t++) {
        cr_assert_gt(rec->n_answer[t], 0, "turn %d", t + 1);
        /* no shift during an answer (12 tokens fit in the quarter of the context kept free) */
        cr_assert_eq(rec->n_conv[t], rec->n_prompt[t] + rec->n_answer[t], "turn %d", t + 1);
        if (t > 0 && rec->n_prompt[t] < rec->n_conv[t - 1]) { /* shortened before turn t + 1 */
            n_shift++;
            /* the shortened conversation keeps the first token (keep 1) and drops a run */
            cr_assert_eq(rec->conv[t][0], rec->conv[t - 1][0]);
            /* the shifted cache kept the conversation (more than the kept BOS) */
            cr_expect_gt(rec->n_cached[t], 1, "turn %d: the cache was recomputed", t + 1);
            cr_expect_lt(rec->n_cached[t], rec->n_prompt[t], "turn %d", t + 1);
        }
        sd_engine *f = open_engine();
        sd_gen_params g = sd_engine_params_of(f)->gen;
        g.n_predict = rec->n_answer[t];
        int32_t out[16];
        sd_gen_stats st;
        cr_assert_eq(sd_engine_generate(f, &g, rec->conv[t], rec->n_prompt[t], NULL, NULL, out, 16,
                                        &st, &err),
                     SD_OK, "%s", err.msg);
        cr_assert_eq(st.n_generated, rec->n_answer[t]);
        cr_expect_eq(
            memcmp(out, rec->conv[t] + rec->n_prompt[t], sizeof out[0] * (size_t)st.n_generated), 0,
            "turn %d: the answer differs from a fresh run's on the conversation", t + 1);
        sd_engine_free(f);
    }
    return n_shift;
}

Test(chat_shift, a_long_chat_goes_on_and_every_answer_is_a_fresh_runs) {
    sd_error err = {0};
    turn_rec off = {0}, on = {0};
    int32_t *conv = NULL, n_conv = 0;
    sd_engine *e = open_engine();
    cr_assert_eq(chat(e, 0, &off, &conv, &n_conv, &err), SD_ERR_CONTEXT,
                 "without --context-shift the chat should outgrow %d positions (%d turns)", N_CTX,
                 off.n);
    free(conv);
    rec_free(&off);
    sd_engine_free(e);
    e = open_engine();
    cr_assert_eq(chat(e, 1, &on, &conv, &n_conv, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(on.n, 10, "%d turns answered", on.n);
    cr_assert_eq(n_conv, on.n_conv[on.n - 1]);
    cr_assert_eq(memcmp(conv, on.conv[on.n - 1], (size_t)n_conv * sizeof *conv), 0);
    const int n_shift = check_fresh(&on);
    cr_assert_geq(n_shift, 2, "%d shifts", n_shift);
    cr_log_info("%d turns, %d shifts; the last answer: %d tokens after %d (%d cached)", on.n,
                n_shift, on.n_answer[on.n - 1], on.n_prompt[on.n - 1], on.n_cached[on.n - 1]);
    free(conv);
    rec_free(&on);
    sd_engine_free(e);
}

/* With an LLM draft (K 3; its cache re-reads the shortened conversation after each shift,
 * the target's is shifted): greedy, so the same conversation as target alone. */
Test(chat_shift, a_draft_gives_the_same_conversation) {
    sd_error err = {0};
    turn_rec tr = {0}, dr = {0};
    int32_t *tc = NULL, *dc = NULL, nt = 0, nd = 0;
    sd_engine *e = open_engine();
    cr_assert_eq(chat(e, 1, &tr, &tc, &nt, &err), SD_OK, "%s", err.msg);
    sd_engine_free(e);
    e = open_engine_with(g_d);
    cr_assert_eq(chat(e, 1, &dr, &dc, &nd, &err), SD_OK, "%s", err.msg);
    sd_engine_free(e);
    cr_assert_eq(tr.n, dr.n);
    int n_shift = 0;
    for (int t = 0; t < tr.n; t++) {
        cr_assert_eq(tr.n_conv[t], dr.n_conv[t], "turn %d", t + 1);
        cr_expect_eq(memcmp(tr.conv[t], dr.conv[t], (size_t)tr.n_conv[t] * sizeof(int32_t)), 0,
                     "turn %d: the draft changed the conversation", t + 1);
        if (t > 0 && dr.n_prompt[t] < dr.n_conv[t - 1]) {
            n_shift++;
            cr_expect_gt(dr.n_cached[t], 1, "turn %d: the target's cache was recomputed", t + 1);
        }
    }
    cr_assert_geq(n_shift, 2);
    cr_assert_eq(nt, nd);
    free(tc);
    free(dc);
    rec_free(&tr);
    rec_free(&dr);
}
