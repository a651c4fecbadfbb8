/*
 * tests/test_chat_shift.c: --context-shift in the interactive chat (runtime/cli/chat_loop.c).
 *
 * A chat of many turns in a small context: without the shift it ends with a context
 * error; with it every turn is answered, the conversation is shortened before an answer
 * that would not fit (its first `keep` tokens kept, the older half of the rest dropped),
 * and the target's cache is shifted, not recomputed: after a shift the cache still holds
 * the kept conversation (n_cached > keep). The model has one layer and an F32 cache, where
 * a shifted cache equals a fresh evaluation to rounding (tests/test_shift.c), so the
 * answer after the last shift must equal a fresh engine's greedy answer to the shortened
 * conversation, token for token.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cli/chat_loop.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"

static char g_dir[256], g_t[512];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec s = tu_llama_default_spec();
    s.n_layer = 1;
    s.n_ctx = 1024;
    cr_assert_eq(tu_make_llama(tu_path(g_t, sizeof g_t, g_dir, "t.gguf"), &s), 0);
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
} turn_rec;

static void on_turn(void *user, int turn, int32_t n_prompt, int32_t n_answer, int32_t n_cached) {
    turn_rec *r = user;
    if (r->n < MAXTURN) {
        r->n_prompt[r->n] = n_prompt;
        r->n_answer[r->n] = n_answer;
        r->n_cached[r->n] = n_cached;
    }
    r->n = turn;
}

static sd_engine *open_engine(void) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.n_ctx = N_CTX;
    ep.n_threads = 1;
    ep.kv_type = SD_TYPE_F32;
    ep.gen.samp.temp = 0.0f;
    ep.gen.n_draft = 0;
    ep.gen.draft_type = SD_DRAFT_NONE;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
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

Test(chat_shift, a_long_chat_goes_on_and_the_last_answer_is_a_fresh_runs) {
    sd_error err = {0};
    turn_rec off = {0}, on = {0};
    int32_t *conv = NULL, n_conv = 0;
    sd_engine *e = open_engine();
    cr_assert_eq(chat(e, 0, &off, &conv, &n_conv, &err), SD_ERR_CONTEXT,
                 "without --context-shift the chat should outgrow %d positions (%d turns)", N_CTX,
                 off.n);
    free(conv);
    sd_engine_free(e);
    e = open_engine();
    cr_assert_eq(chat(e, 1, &on, &conv, &n_conv, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(on.n, 10, "%d turns answered", on.n);
    int last_shift = -1, n_shift = 0;
    for (int t = 1; t < on.n; t++) {
        cr_assert_gt(on.n_answer[t], 0);
        if (on.n_prompt[t] < on.n_prompt[t - 1] + on.n_answer[t - 1]) { /* shortened */
            last_shift = t;
            n_shift++;
            /* the shifted cache kept the conversation (more than the kept BOS) */
            cr_expect_gt(on.n_cached[t], 1, "turn %d: the cache was recomputed", t + 1);
        }
    }
    cr_assert_geq(last_shift, 1, "no shift happened");
    cr_log_info("%d turns, %d shifts, the last before turn %d; the last answer: %d tokens after "
                "%d (%d cached)",
                on.n, n_shift, last_shift + 1, on.n_answer[on.n - 1], on.n_prompt[on.n - 1],
                on.n_cached[on.n - 1]);
    /* the last answer (the cache holds shifted rows) equals a fresh engine's answer to the
     * conversation before it */
    const int last = on.n - 1;
    cr_assert_eq(n_conv, on.n_prompt[last] + on.n_answer[last]);
    sd_engine *f = open_engine();
    sd_gen_params g = sd_engine_params_of(f)->gen;
    g.n_predict = on.n_answer[last];
    int32_t out[16];
    sd_gen_stats st;
    cr_assert_eq(sd_engine_generate(f, &g, conv, on.n_prompt[last], NULL, NULL, out, 16, &st, &err),
                 SD_OK, "%s", err.msg);
    cr_assert_eq(st.n_generated, on.n_answer[last]);
    cr_expect_eq(memcmp(out, conv + on.n_prompt[last], sizeof out[0] * (size_t)st.n_generated), 0,
                 "the last answer differs from a fresh run's on the shortened conversation");
    sd_engine_free(f);
    free(conv);
    sd_engine_free(e);
}
