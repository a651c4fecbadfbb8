/*
 * tests/test_swa_paged.c: a paged KV cache under a sliding window gives its blocks back.
 *
 * A Mistral-shaped random file (every layer windowed: llama.attention.sliding_window 64)
 * runs on a paged session whose pool is far smaller than the positions generated (10
 * blocks of 16 for 600 positions): it can only get through if the blocks behind the
 * window (and SD_KV_WINDOW_SLACK) return to the pool. The reference is the same
 * operations on a contiguous (unpaged) cache, which keeps every key and reads the
 * window's: every logits row must be equal bit for bit, passes of several rows and
 * rollbacks of rejected "drafts" included, and the pool's used blocks stay below
 * (W + slack + pass) / block + 2 after every pass. Then the limits: a rollback into the
 * released range is refused, a rollback past the slack is refused at the next pass, and
 * sd_session_seq_keep_prefix restarts from 0 there. Last, serve's path: the batcher's
 * greedy output on the windowed file equals a contiguous session's greedy loop, target
 * alone and with n-gram drafts, with the pool's used blocks bounded the same way.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"
#include "engine_util.h"

#define W     64  /* the window */
#define BS    16  /* positions per block */
#define CTX   640 /* positions per sequence */
#define NPOS  600 /* positions generated */
#define PASS  5   /* rows of a "verification" pass */
#define NBLK  10  /* the pool: 160 positions, far fewer than NPOS */
#define BOUND ((W + SD_KV_WINDOW_SLACK + PASS + BS - 1) / BS + 2)

static char g_dir[1024], g_model[1200];

static void setup(void) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_ctx = CTX;
    sp.sliding_window = W;
    tu_path(g_model, sizeof g_model, g_dir, "mistral-w64.gguf");
    cr_assert_eq(tu_make_llama(g_model, &sp), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(swa_paged, .init = setup, .fini = teardown, .timeout = 600);

static sd_model *load(void) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(g_model, &m, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_model_hparams(m)->sliding_window, W);
    return m;
}

static sd_session *session(const sd_model *m, int paged) {
    sd_session_params p = sd_session_default_params();
    p.n_ctx = CTX;
    p.n_batch = 32;
    p.n_threads = 1;
    p.kv_type = SD_TYPE_F16;
    if (paged) {
        p.n_seq = 1;
        p.kv_block = BS;
        p.n_kv_blocks = NBLK;
    }
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    return s;
}

static int32_t used_blocks(const sd_session *s) {
    sd_kv_pool_stats st;
    sd_session_kv_stats(s, &st);
    return st.n_blocks - st.n_free;
}

/* Both sessions run the same batch; their logits rows must be the same bits. */
static void eval_both(sd_session *c, sd_session *p, const int32_t *toks, int32_t n, float *lc,
                      float *lp, int32_t nv) {
    sd_error err = {0};
    cr_assert_eq(sd_session_eval(c, toks, n, lc, n, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_eval(p, toks, n, lp, n, &err), SD_OK, "paged, at %d: %s",
                 sd_session_seq_n_past(p, 0), err.msg);
    cr_assert_eq(memcmp(lc, lp, (size_t)n * nv * sizeof(float)), 0,
                 "paged logits differ from the contiguous cache's before position %d",
                 sd_session_seq_n_past(p, 0));
    cr_assert_eq(sd_session_kv_check(p, &err), SD_OK, "%s", err.msg);
}

Test(swa_paged, blocks_behind_the_window_are_freed_and_logits_equal) {
    sd_model *m = load();
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session *c = session(m, 0), *p = session(m, 1);
    float *lc = malloc((size_t)32 * nv * sizeof(float));
    float *lp = malloc((size_t)32 * nv * sizeof(float));
    int32_t prompt[20];
    for (int32_t i = 0; i < 20; i++)
        prompt[i] = 3 + (i * 7) % 40;
    eval_both(c, p, prompt, 20, lc, lp, nv);
    int32_t next = sd_argmax(lp + (size_t)19 * nv, nv), max_used = used_blocks(p), step = 0;
    sd_error err = {0};
    while (sd_session_seq_n_past(p, 0) + PASS <= NPOS) {
        /* a pass as verification runs it: the pending token and a "draft" of PASS - 1 */
        int32_t rows[PASS] = {next};
        for (int32_t i = 1; i < PASS; i++)
            rows[i] = 3 + (next * 5 + i * 11 + step) % (nv - 3);
        const int32_t n0 = sd_session_seq_n_past(p, 0);
        eval_both(c, p, rows, PASS, lc, lp, nv);
        if (used_blocks(p) > max_used) max_used = used_blocks(p);
        /* accept 1 .. PASS rows; the rest roll back, on both */
        const int32_t keep = 1 + step % PASS;
        cr_assert_eq(sd_session_seq_truncate(c, 0, n0 + keep, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_truncate(p, 0, n0 + keep, &err), SD_OK, "%s", err.msg);
        next = sd_argmax(lp + (size_t)(keep - 1) * nv, nv);
        step++;
    }
    cr_expect_geq(sd_session_seq_n_past(p, 0), NPOS - PASS, "stopped early");
    cr_expect_leq(max_used, BOUND, "the pool held %d blocks (bound %d)", max_used, BOUND);
    cr_expect_leq(max_used, NBLK);
    /* the blocks before the window went back: the sequence maps fewer than its positions */
    sd_kv_pool_stats st;
    sd_session_kv_stats(p, &st);
    cr_expect_lt(st.n_blocks - st.n_free, sd_session_kv_blocks_for(p, sd_session_seq_n_past(p, 0)));
    free(lc);
    free(lp);
    sd_session_free(c);
    sd_session_free(p);
    sd_model_free(m);
}

/* Rollbacks further back than the slack: refused where rows are gone (nothing changes),
 * and a pass that would read released keys fails by name; keep_prefix then restarts. */
Test(swa_paged, rollback_into_released_rows_is_refused) {
    sd_model *m = load();
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session *p = session(m, 1), *c = session(m, 0);
    float *l = malloc((size_t)32 * nv * sizeof(float));
    float *l2 = malloc((size_t)32 * nv * sizeof(float));
    int32_t toks[320];
    for (int32_t i = 0; i < 320; i++)
        toks[i] = 3 + (i * 13) % (nv - 3);
    sd_error err = {0};
    for (int32_t i = 0; i < 320; i += 32)
        cr_assert_eq(sd_session_eval(p, toks + i, 32, l, 1, &err), SD_OK, "%s", err.msg);
    /* 320 positions: blocks wholly before 320 - W + 1 - slack = 225 are released (14) */
    const int32_t first = ((320 - W + 1 - SD_KV_WINDOW_SLACK) / BS) * BS;
    cr_assert_eq(used_blocks(p), 20 - first / BS);
    cr_expect_eq(sd_session_seq_truncate(p, 0, first, &err), SD_ERR_ARG, "into released rows");
    cr_expect_eq(sd_session_seq_n_past(p, 0), 320, "a refused truncate changed the sequence");
    /* allowed (rows there), but the next pass would read keys before `first` */
    cr_assert_eq(sd_session_seq_truncate(p, 0, first + 8, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(sd_session_eval(p, toks + first + 8, 1, l, 1, &err), SD_ERR_CONTEXT);
    cr_expect(strstr(err.msg, "sliding window") != NULL, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(p, 0), first + 8, "a refused pass changed the sequence");
    /* the same tokens: the common prefix is all of them, but it cannot be reused */
    cr_expect_eq(sd_session_seq_keep_prefix(p, 0, toks, 300), 0);
    cr_expect_eq(sd_session_seq_n_past(p, 0), 0);
    cr_expect_eq(used_blocks(p), 0);
    /* and from 0 it gives the contiguous cache's bits again */
    cr_assert_eq(sd_session_eval(p, toks, 32, l, 32, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_eval(c, toks, 32, l2, 32, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(memcmp(l, l2, (size_t)32 * nv * sizeof(float)), 0);
    cr_assert_eq(sd_session_kv_check(p, &err), SD_OK, "%s", err.msg);
    free(l);
    free(l2);
    sd_session_free(p);
    sd_session_free(c);
    sd_model_free(m);
}

/* ---- serve's path: the batcher ---- */

#define NPRED 400

Test(swa_paged, batcher_greedy_equals_unpaged_with_bounded_blocks) {
    sd_engine_params ep = eu_engine_params(g_model, NULL, CTX, 1);
    ep.kv_type = SD_TYPE_F16;
    ep.models_only = 1;
    sd_engine *e = eu_engine_open(&ep);
    sd_error err = {0};
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.kv_block = BS;
    bp.n_batch = 32;
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int32_t prompt[2][24];
    for (int r = 0; r < 2; r++)
        for (int32_t i = 0; i < 24; i++)
            prompt[r][i] = i == 0 ? 1 : 3 + (i * (r + 3) + r * 5) % 13;
    static eu_out o[2];
    memset(o, 0, sizeof o);
    for (int r = 0; r < 2; r++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = NPRED;
        gp.samp.temp = 0.0f;
        gp.ignore_eos = 1;
        gp.draft_type = r == 0 ? SD_DRAFT_NONE : SD_DRAFT_NGRAM;
        gp.n_draft = r == 0 ? 0 : 4;
        eu_submit(b, prompt[r], 24, &gp, eu_collect, &o[r]);
    }
    int32_t max_used = 0;
    for (int guard = 0; sd_batcher_busy(b); guard++) {
        eu_step(b, guard, 1);
        sd_batcher_stats st;
        sd_batcher_get_stats(b, &st);
        const int32_t used = st.kv.n_blocks - st.kv.n_free - st.kv.n_cached_idle;
        if (used > max_used) max_used = used;
    }
    /* two sequences, each within the window's blocks (a prefill chunk of 32 rows) */
    const int32_t bound = 2 * ((W + SD_KV_WINDOW_SLACK + 32 + BS - 1) / BS + 2);
    cr_expect_leq(max_used, bound, "the pool held %d blocks (bound %d, %d positions)", max_used,
                  bound, 24 + NPRED);
    sd_model *m = load();
    int32_t ref[NPRED];
    for (int r = 0; r < 2; r++) {
        cr_assert(o[r].done);
        cr_assert_eq(o[r].n, NPRED, "request %d: %d tokens", r, o[r].n);
        {
            sd_session *rs = session(m, 0);
            eu_greedy_ref(rs, m, prompt[r], 24, ref, NPRED);
            sd_session_free(rs);
        }
        for (int32_t i = 0; i < NPRED; i++)
            cr_assert_eq(o[r].toks[i], ref[i], "request %d, token %d: %d, unpaged %d", r, i,
                         o[r].toks[i], ref[i]);
    }
    sd_model_free(m);
    sd_batcher_free(b);
    sd_engine_free(e);
}
