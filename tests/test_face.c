/*
 * tests/test_face.c: the public face (include/specdec.h) on the shipped TinyStories pair.
 *   - sd_complete, greedy, with the draft model (fixed K and adaptive) and with n-gram
 *     drafting: the ids are the target-alone greedy ids of the engine
 *     (sd_engine_generate with no proposer, the reference the other tests check against
 *     llama.cpp-independent numbers), the pieces' text is the ids' pieces concatenated,
 *     and the statistics add up (ids given == n_generated, accepted <= drafted, the K
 *     histogram counts every pass);
 *   - the callback stops a completion; tokenize round-trips and reports the size needed;
 *   - sd_queue: three prompts at once give sd_complete's ids for each (fixed K); a stop
 *     string ends the text before it; a cancelled request gets one done event with
 *     SD_STOP_CANCEL; n_draft above the queue's k_max is refused;
 *   - errors: a missing file names its path (SD_ERR_IO), NULL arguments, an unknown draft
 *     type, stop strings in sd_complete.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/specdec.h"
#include "runtime/engine/sd_engine.h"
#include "testutil.h"
#include "engine_util.h"

#define TINY_T EU_TINY_TARGET
#define TINY_D EU_TINY_DRAFT
#define MAXOUT 256

TestSuite(face, .timeout = 600);

static sd_context *open_ctx(const char *draft) {
    return eu_context(TINY_T, draft, 512, 2);
}

/* What the callbacks received. */
typedef struct got {
    int32_t ids[MAXOUT];
    int32_t n;
    char text[4096];
    size_t len;
    int n_calls, stop_after; /* stop_after > 0: return 1 on that call */
    int done;
    sd_stop_reason stop;
    sd_gen_stats st;
} got;

static void add_text(got *g, const char *t, size_t len) {
    cr_assert_lt(g->len + len, sizeof g->text);
    memcpy(g->text + g->len, t, len);
    g->len += len;
    g->text[g->len] = '\0';
}

static int on_piece(void *user, const sd_piece *pc) {
    got *g = user;
    for (int32_t i = 0; i < pc->n_tokens; i++) {
        cr_assert_lt(g->n, MAXOUT);
        g->ids[g->n++] = pc->tokens[i];
    }
    add_text(g, pc->text, pc->len);
    return ++g->n_calls == g->stop_after;
}

static int on_event(void *user, const sd_event *ev) {
    got *g = user;
    cr_assert_eq(g->done, 0, "an event after the done event");
    for (int32_t i = 0; i < ev->n_tokens; i++) {
        cr_assert_lt(g->n, MAXOUT);
        g->ids[g->n++] = ev->tokens[i];
    }
    add_text(g, ev->text, ev->len);
    g->n_calls++;
    if (ev->done) {
        g->done = 1;
        g->stop = ev->stop;
        g->st = *ev->stats;
    }
    return 0;
}

/* The target-alone greedy ids after the prompt, through the engine itself. */
static int32_t reference_ids(const char *prompt, int32_t n_predict, int32_t *out) {
    sd_engine *e = eu_engine(TINY_T, NULL, 512, 2, 0);
    int32_t *ids = NULL;
    const int32_t n = eu_prompt(e, prompt, &ids);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = 0;
    gp.draft_type = SD_DRAFT_NONE;
    gp.samp.temp = 0.0f;
    sd_gen_stats st;
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n, NULL, NULL, out, n_predict, &st, &err), SD_OK,
                 "%s", err.msg);
    free(ids);
    sd_engine_free(e);
    return st.n_generated;
}

/* The ids' pieces concatenated. */
static void pieces_of(sd_context *ctx, const int32_t *ids, int32_t n, char *buf, size_t cap) {
    size_t len = 0;
    for (int32_t i = 0; i < n; i++) {
        const int m = sd_token_to_piece(ctx, ids[i], buf + len, cap - len - 1);
        cr_assert(m >= 0 && (size_t)m < cap - len - 1);
        len += (size_t)m;
    }
    buf[len] = '\0';
}

static void check_stats(const got *g, const sd_gen_stats *st, int32_t n_predict) {
    cr_assert_eq(st->n_generated, g->n);
    cr_assert_leq(st->n_accepted, st->n_drafted);
    int32_t passes = 0, drafted = 0;
    for (int k = 0; k <= SD_MAX_DRAFT; k++) {
        passes += st->k_hist[k];
        drafted += k * st->k_hist[k];
    }
    cr_assert_eq(passes, st->n_target_passes);
    cr_assert_eq(drafted, st->n_drafted);
    cr_assert(st->stop == SD_STOP_EOS || (st->stop == SD_STOP_MAX_TOKENS && g->n == n_predict),
              "stop %s after %d ids", sd_stop_reason_str(st->stop), (int)g->n);
    const double tpp = sd_stats_tokens_per_pass(st);
    cr_assert_float_eq(tpp, (double)(st->n_generated + st->n_stop_tokens) / st->n_target_passes,
                       1e-12);
}

static void greedy_case(const char *draft, const char *type, int adaptive) {
    const char *prompt = "Once upon a time, there was a little girl";
    const int32_t n_predict = 96;
    int32_t ref[MAXOUT];
    const int32_t n_ref = reference_ids(prompt, n_predict, ref);
    cr_assert_gt(n_ref, 8);

    sd_context *ctx = open_ctx(draft);
    sd_completion_params cp = sd_completion_default_params();
    cp.n_predict = n_predict;
    cp.temp = 0.0f;
    cp.n_draft = 4;
    cp.draft_type = type;
    cp.adaptive = adaptive;
    got g = {0};
    sd_gen_stats st;
    sd_error err = {0};
    cr_assert_eq(sd_complete(ctx, prompt, &cp, on_piece, &g, &st, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(g.n, n_ref, "%d ids, target alone %d", (int)g.n, (int)n_ref);
    for (int32_t i = 0; i < n_ref; i++)
        cr_assert_eq(g.ids[i], ref[i], "id %d: %d, target alone %d", (int)i, g.ids[i], ref[i]);
    char want[4096];
    pieces_of(ctx, ref, n_ref, want, sizeof want);
    cr_assert_str_eq(g.text, want);
    check_stats(&g, &st, n_predict);
    if (!adaptive) cr_assert_gt(st.n_drafted, 0, "fixed K = 4 drafted nothing");
    sd_context_free(ctx);
}

Test(face, complete_greedy_llm_fixed) {
    greedy_case(TINY_D, "llm", 0);
}
Test(face, complete_greedy_llm_adaptive) {
    greedy_case(TINY_D, NULL, 1);
}
Test(face, complete_greedy_ngram_no_draft_model) {
    greedy_case(NULL, "ngram", 0);
}

Test(face, callback_stops) {
    sd_context *ctx = open_ctx(TINY_D);
    sd_completion_params cp = sd_completion_default_params();
    cp.n_predict = 64;
    cp.ignore_eos = 1;
    got g = {0};
    g.stop_after = 2;
    sd_gen_stats st;
    sd_error err = {0};
    cr_assert_eq(sd_complete(ctx, "Once upon a time", &cp, on_piece, &g, &st, &err), SD_OK, "%s",
                 err.msg);
    cr_assert_eq(g.n_calls, 2);
    cr_assert_eq(st.stop, SD_STOP_NONE);
    cr_assert_lt(g.n, 64);
    sd_context_free(ctx);
}

Test(face, tokenize) {
    sd_context *ctx = open_ctx(NULL);
    const char *text = "Once upon a time, there was a cat.";
    int32_t ids[64], n = -1;
    sd_error err = {0};
    cr_assert_eq(sd_tokenize(ctx, text, strlen(text), 1, ids, 2, &n, &err), SD_ERR_ARG);
    cr_assert_gt(n, 2, "the size needed is reported");
    const int32_t need = n;
    cr_assert_eq(sd_tokenize(ctx, text, strlen(text), 1, ids, 64, &n, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(n, need);
    cr_assert_eq(ids[0], sd_token_bos(ctx));
    for (int32_t i = 0; i < n; i++)
        cr_assert(ids[i] >= 0 && ids[i] < sd_n_vocab(ctx));
    char buf[256];
    pieces_of(ctx, ids + 1, n - 1, buf, sizeof buf);
    /* SentencePiece: the text gets one leading space (add_space_prefix). */
    cr_assert_str_eq(buf + (buf[0] == ' '), text);
    cr_assert_eq(sd_token_to_piece(ctx, sd_n_vocab(ctx), buf, sizeof buf), -1);
    sd_context_free(ctx);
}

Test(face, errors) {
    sd_error err = {0};
    sd_context *ctx = (sd_context *)&err;
    sd_context_params p = sd_context_default_params();
    cr_assert_eq(sd_context_init(&p, &ctx, &err), SD_ERR_ARG);
    cr_assert_null(ctx, "*out is NULL on failure");
    cr_assert_eq(sd_context_init(NULL, &ctx, &err), SD_ERR_ARG);
    cr_assert_eq(sd_context_init(&p, NULL, NULL), SD_ERR_ARG);
    p.target = "/no/such/dir/target.gguf";
    cr_assert_eq(sd_context_init(&p, &ctx, &err), SD_ERR_IO);
    cr_assert(strstr(err.msg, "/no/such/dir/target.gguf"), "%s", err.msg);
    p.target = TINY_T;
    p.draft = "/no/such/dir/draft.gguf";
    cr_assert_eq(sd_context_init(&p, &ctx, &err), SD_ERR_IO);
    cr_assert(strstr(err.msg, "/no/such/dir/draft.gguf"), "%s", err.msg);
    sd_context_free(NULL);
    sd_queue_free(NULL);

    ctx = open_ctx(NULL);
    sd_completion_params cp = sd_completion_default_params();
    cp.draft_type = "bogus";
    cr_assert_eq(sd_complete(ctx, "x", &cp, NULL, NULL, NULL, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "bogus"), "%s", err.msg);
    cp = sd_completion_default_params();
    cp.draft_type = "llm"; /* no draft model */
    cr_assert_eq(sd_complete(ctx, "x", &cp, NULL, NULL, NULL, &err), SD_ERR_ARG);
    cp = sd_completion_default_params();
    const char *stop[] = {""};
    cp.stop = stop;
    cp.n_stop = 1;
    cr_assert_eq(sd_complete(ctx, "x", &cp, NULL, NULL, NULL, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
    cp = sd_completion_default_params();
    cp.n_predict = 0;
    cr_assert_eq(sd_complete(ctx, "x", &cp, NULL, NULL, NULL, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "n_predict"), "%s", err.msg);
    cp = sd_completion_default_params();
    cp.min_p = 2.0f;
    cr_assert_eq(sd_complete(ctx, "x", &cp, NULL, NULL, NULL, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "min_p"), "%s", err.msg);
    cr_assert_eq(sd_complete(ctx, NULL, NULL, NULL, NULL, NULL, &err), SD_ERR_ARG);
    cr_assert_eq(sd_complete(NULL, "x", NULL, NULL, NULL, NULL, NULL), SD_ERR_ARG);
    cr_assert_str_eq(sd_status_str(SD_ERR_IO), sd_status_str(SD_ERR_IO)); /* never NULL */
    cr_assert_not_null(sd_status_str((sd_status)99));
    sd_context_free(ctx);
}

Test(face, queue_matches_complete) {
    const char *prompts[3] = {"Once upon a time", "The little dog", "Lily and Tom went to the"};
    sd_context *ctx = open_ctx(TINY_D);
    sd_completion_params cp = sd_completion_default_params();
    cp.n_predict = 48;
    cp.temp = 0.0f;
    cp.adaptive = 0;
    cp.n_draft = 3;
    got alone[3], q[3];
    memset(alone, 0, sizeof alone);
    memset(q, 0, sizeof q);
    sd_error err = {0};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sd_complete(ctx, prompts[i], &cp, on_piece, &alone[i], &alone[i].st, &err),
                     SD_OK, "%s", err.msg);
    }
    /* Sampled too: the same seed gives the same ids in both (Gumbel verification). */
    sd_completion_params sp = cp;
    sp.temp = 0.8f;
    sp.seed = 7;
    got alone_s = {0}, q_s = {0};
    cr_assert_eq(sd_complete(ctx, prompts[0], &sp, on_piece, &alone_s, &alone_s.st, &err), SD_OK,
                 "%s", err.msg);

    sd_queue_params qp = sd_queue_default_params();
    qp.n_parallel = 2; /* one request waits for a slot */
    sd_queue *qu = NULL;
    cr_assert_eq(sd_queue_init(ctx, &qp, &qu, &err), SD_OK, "%s", err.msg);
    int64_t ids[4];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sd_queue_submit(qu, prompts[i], &cp, on_event, &q[i], &ids[i], &err), SD_OK,
                     "%s", err.msg);
    cr_assert_eq(sd_queue_submit(qu, prompts[0], &sp, on_event, &q_s, &ids[3], &err), SD_OK, "%s",
                 err.msg);
    for (int i = 1; i < 4; i++)
        cr_assert_gt(ids[i], ids[i - 1]);
    int steps = 0;
    while (sd_queue_busy(qu)) {
        cr_assert_eq(sd_queue_step(qu, &err), SD_OK, "%s", err.msg);
        cr_assert_lt(++steps, 10000);
    }
    for (int i = 0; i < 3; i++) {
        cr_assert(q[i].done);
        cr_assert_eq(q[i].n, alone[i].n, "prompt %d: %d ids, sd_complete %d", i, (int)q[i].n,
                     (int)alone[i].n);
        cr_assert_eq(memcmp(q[i].ids, alone[i].ids, (size_t)q[i].n * sizeof(int32_t)), 0);
        cr_assert_str_eq(q[i].text, alone[i].text);
        cr_assert_eq(q[i].stop, alone[i].st.stop);
        cr_assert_eq(q[i].st.n_generated, q[i].n);
    }
    cr_assert_eq(q_s.n, alone_s.n);
    cr_assert_eq(memcmp(q_s.ids, alone_s.ids, (size_t)q_s.n * sizeof(int32_t)), 0);

    /* A stop string: the text ends before its first appearance in the full text. */
    const char *full = alone[0].text;
    cr_assert_gt(strlen(full), 12);
    char stop_s[8];
    memcpy(stop_s, full + 8, 4); /* a piece from inside the text */
    stop_s[4] = '\0';
    const char *stops[] = {stop_s};
    sd_completion_params cs = cp;
    cs.stop = stops;
    cs.n_stop = 1;
    got gs = {0};
    cr_assert_eq(sd_queue_submit(qu, prompts[0], &cs, on_event, &gs, NULL, &err), SD_OK, "%s",
                 err.msg);
    while (sd_queue_busy(qu))
        cr_assert_eq(sd_queue_step(qu, &err), SD_OK, "%s", err.msg);
    cr_assert(gs.done);
    cr_assert_eq(gs.stop, SD_STOP_STRING);
    const size_t cut = (size_t)(strstr(full, stop_s) - full);
    cr_assert_eq(gs.len, cut, "text '%s', stop '%s'", gs.text, stop_s);
    cr_assert_eq(strncmp(gs.text, full, cut), 0);
    /* sd_complete with the same stop string: the same text, ids, stop and counts (both
     * clients search the text after each pass: runtime/engine/stop_text.c). */
    got gc1 = {0};
    cr_assert_eq(sd_complete(ctx, prompts[0], &cs, on_piece, &gc1, &gc1.st, &err), SD_OK, "%s",
                 err.msg);
    cr_assert_eq(gc1.st.stop, SD_STOP_STRING);
    cr_assert_eq(gc1.len, cut, "text '%s', stop '%s'", gc1.text, stop_s);
    cr_assert_eq(strncmp(gc1.text, full, cut), 0);
    cr_assert_eq(gc1.n, gs.n, "ids %d vs the queue's %d", gc1.n, gs.n);
    cr_assert_eq(memcmp(gc1.ids, gs.ids, (size_t)gs.n * sizeof(int32_t)), 0);
    cr_assert_eq(gc1.st.n_generated, gs.st.n_generated);
    cr_assert_eq(gc1.st.n_target_passes, gs.st.n_target_passes);
    cr_assert_lt(gc1.n, alone[0].n, "the stop string ended generation early");

    /* Cancel before the first step: one done event, SD_STOP_CANCEL, no ids. */
    got gc = {0};
    int64_t id = 0;
    cr_assert_eq(sd_queue_submit(qu, prompts[1], &cp, on_event, &gc, &id, &err), SD_OK, "%s",
                 err.msg);
    cr_assert_eq(sd_queue_cancel(qu, id), 0);
    while (sd_queue_busy(qu))
        cr_assert_eq(sd_queue_step(qu, &err), SD_OK, "%s", err.msg);
    cr_assert(gc.done);
    cr_assert_eq(gc.stop, SD_STOP_CANCEL);
    cr_assert_eq(gc.n, 0);
    cr_assert_eq(sd_queue_cancel(qu, id), -1, "a finished request is not found");

    /* n_draft above the queue's k_max. */
    sd_completion_params big = cp;
    big.n_draft = qp.k_max + 1;
    cr_assert_eq(sd_queue_submit(qu, prompts[0], &big, on_event, &gc, NULL, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "k_max"), "%s", err.msg);
    cr_assert_eq(sd_queue_busy(qu), 0);
    sd_queue_free(qu);
    sd_context_free(ctx);
}

/* A queue freed with requests still waiting: no callback, nothing leaked (ASan). */
Test(face, queue_free_with_requests) {
    sd_context *ctx = open_ctx(TINY_D);
    sd_queue_params qp = sd_queue_default_params();
    sd_queue *qu = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_queue_init(ctx, &qp, &qu, &err), SD_OK, "%s", err.msg);
    got g[3];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sd_queue_submit(qu, "Once upon a time", NULL, on_event, &g[i], NULL, &err),
                     SD_OK, "%s", err.msg);
    cr_assert_eq(sd_queue_step(qu, &err), SD_OK, "%s", err.msg);
    sd_queue_free(qu);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(g[i].done, 0);
    sd_context_free(ctx);
}
