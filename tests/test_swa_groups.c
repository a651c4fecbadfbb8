/*
 * tests/test_swa_groups.c: a paged KV cache with a block group per kind of layer gives the
 * local (sliding-window) layers' blocks back while the global layers keep theirs.
 *
 * A Gemma-3-shaped random file (scripts/make_arch.py gemma3: gemma3-w32.gguf, 6 layers,
 * layers 0-4 local with a window of 32, layer 5 global, context 1024) runs on a paged
 * session: its pool has two layer groups (kv/sd_kv.h), group 0 the global layer holding
 * every position and group 1 the 5 local layers, sized for the window alone. The
 * reference is the same operations on a contiguous cache, which keeps every key: every
 * logits row must be equal bit for bit over 600 positions, passes of 5 rows and rollbacks
 * of rejected "drafts" included; after every pass the local group maps at most
 * (W + slack + pass) / block + 2 blocks while the global group maps every position's; the
 * pool's storage is under half of what all layers' rows for every position need. Then a
 * rollback into the released range is refused and keep_prefix restarts from 0; last,
 * serve's path: the batcher's greedy output equals a contiguous greedy loop, target alone
 * and with n-gram drafts, with the local group bounded the same way.
 */
/* the harness's other checks (reference, tensor-parallel, speculative) are not used here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "arch_harness.h"
#include "engine_util.h"

#define W     32  /* the local layers' window (gemma3-w32.gguf) */
#define BS    16  /* positions per block */
#define CTX   640 /* positions per sequence */
#define NPOS  600 /* positions generated */
#define PASS  5   /* rows of a "verification" pass */
#define NB    32  /* the sessions' batch */
#define BOUND ((W + SD_KV_WINDOW_SLACK + PASS + BS - 1) / BS + 2)

static const int32_t k_tokens[] = {2, 7, 13, 22};

static void setup(void) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    g_ah.arch = "gemma3";
    g_ah.tokens = k_tokens;
    g_ah.n_tokens = 4;
    ah_setup();
}

TestSuite(swa_groups, .init = setup, .fini = ah_teardown, .timeout = 600);

static sd_model *load(void) {
    ah_make_files();
    sd_model *m = ah_load("gemma3-w32.gguf");
    const sd_hparams *hp = sd_model_hparams(m);
    cr_assert_eq(hp->sliding_window, W);
    cr_assert_eq(hp->n_layer, 6);
    cr_assert_eq(hp->n_swa_layers, 5);
    return m;
}

static sd_session *session(const sd_model *m, int paged) {
    sd_session_params p = sd_session_default_params();
    p.n_ctx = CTX;
    p.n_batch = NB;
    p.n_threads = 1;
    p.kv_type = SD_TYPE_F16;
    if (paged) {
        p.n_seq = 1;
        p.kv_block = BS;
    }
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    return s;
}

/* Blocks group g maps (neither free nor held by the prefix cache alone). */
static int32_t group_used(const sd_kv_pool_stats *st, int g) {
    return st->group_blocks[g] - st->group_free[g] - st->group_cached_idle[g];
}

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

Test(swa_groups, local_blocks_are_freed_global_kept_and_logits_equal) {
    sd_model *m = load();
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session *c = session(m, 0), *p = session(m, 1);
    sd_kv_pool_stats st;
    sd_session_kv_stats(p, &st);
    cr_assert_eq(st.n_group, 2, "a pool of two layer groups expected, got %d", st.n_group);
    cr_expect_eq(st.group_layers[0], 1, "group 0: the global layer");
    cr_expect_eq(st.group_layers[1], 5, "group 1: the local layers");
    cr_expect_eq(st.group_blocks[0], CTX / BS, "group 0 holds every position");
    cr_expect_lt(st.group_blocks[1], st.group_blocks[0], "group 1 is sized for the window");
    /* what one group of all 6 layers for every position of NPOS would take */
    const size_t all_layers =
        (size_t)((NPOS + BS - 1) / BS) * BS * 2 * 6 * sd_kv_type_row_bytes(SD_TYPE_F16, 64);
    cr_expect_lt(2 * st.storage_bytes, all_layers, "storage %zu bytes, all layers %zu",
                 st.storage_bytes, all_layers);
    float *lc = malloc((size_t)NB * nv * sizeof(float));
    float *lp = malloc((size_t)NB * nv * sizeof(float));
    int32_t prompt[20];
    for (int32_t i = 0; i < 20; i++)
        prompt[i] = 3 + (i * 7) % 40;
    eval_both(c, p, prompt, 20, lc, lp, nv);
    int32_t next = sd_argmax(lp + (size_t)19 * nv, nv), max_local = 0, step = 0;
    sd_error err = {0};
    while (sd_session_seq_n_past(p, 0) + PASS <= NPOS) {
        int32_t rows[PASS] = {next};
        for (int32_t i = 1; i < PASS; i++)
            rows[i] = 3 + (next * 5 + i * 11 + step) % (nv - 3);
        const int32_t n0 = sd_session_seq_n_past(p, 0);
        eval_both(c, p, rows, PASS, lc, lp, nv);
        sd_session_kv_stats(p, &st);
        if (group_used(&st, 1) > max_local) max_local = group_used(&st, 1);
        cr_assert_eq(group_used(&st, 0), sd_session_kv_blocks_for(p, n0 + PASS),
                     "the global group maps every position");
        const int32_t keep = 1 + step % PASS; /* the rest roll back, on both */
        cr_assert_eq(sd_session_seq_truncate(c, 0, n0 + keep, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_truncate(p, 0, n0 + keep, &err), SD_OK, "%s", err.msg);
        next = sd_argmax(lp + (size_t)(keep - 1) * nv, nv);
        step++;
    }
    cr_expect_geq(sd_session_seq_n_past(p, 0), NPOS - PASS, "stopped early");
    cr_expect_leq(max_local, BOUND, "the local group held %d blocks (bound %d)", max_local, BOUND);
    cr_expect_leq(st.group_peak_used[1], st.group_blocks[1]);
    sd_session_kv_stats(p, &st);
    cr_expect_gt(group_used(&st, 0), 2 * BOUND, "the global group grows with the positions");
    free(lc);
    free(lp);
    sd_session_free(c);
    sd_session_free(p);
    sd_model_free(m);
}

Test(swa_groups, rollback_into_released_rows_is_refused) {
    sd_model *m = load();
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session *p = session(m, 1), *c = session(m, 0);
    float *l = malloc((size_t)NB * nv * sizeof(float));
    float *l2 = malloc((size_t)NB * nv * sizeof(float));
    int32_t toks[320];
    for (int32_t i = 0; i < 320; i++)
        toks[i] = 3 + (i * 13) % (nv - 3);
    sd_error err = {0};
    for (int32_t i = 0; i < 320; i += NB)
        cr_assert_eq(sd_session_eval(p, toks + i, NB, l, 1, &err), SD_OK, "%s", err.msg);
    /* blocks wholly before 320 - W + 1 - slack = 257 are released in the local group */
    const int32_t first = ((320 - W + 1 - SD_KV_WINDOW_SLACK) / BS) * BS;
    sd_kv_pool_stats st;
    sd_session_kv_stats(p, &st);
    cr_assert_eq(group_used(&st, 1), 20 - first / BS);
    cr_assert_eq(group_used(&st, 0), 20);
    cr_expect_eq(sd_session_seq_truncate(p, 0, first, &err), SD_ERR_ARG, "into released rows");
    cr_expect_eq(sd_session_seq_n_past(p, 0), 320, "a refused truncate changed the sequence");
    cr_assert_eq(sd_session_seq_truncate(p, 0, first + 8, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(sd_session_eval(p, toks + first + 8, 1, l, 1, &err), SD_ERR_CONTEXT);
    cr_expect(strstr(err.msg, "sliding window") != NULL, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(p, 0), first + 8, "a refused pass changed the sequence");
    cr_expect_eq(sd_session_seq_keep_prefix(p, 0, toks, 300), 0);
    cr_expect_eq(sd_session_seq_n_past(p, 0), 0);
    sd_session_kv_stats(p, &st);
    cr_expect_eq(group_used(&st, 0) + group_used(&st, 1), 0);
    cr_assert_eq(sd_session_eval(p, toks, NB, l, NB, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_eval(c, toks, NB, l2, NB, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(memcmp(l, l2, (size_t)NB * nv * sizeof(float)), 0);
    cr_assert_eq(sd_session_kv_check(p, &err), SD_OK, "%s", err.msg);
    free(l);
    free(l2);
    sd_session_free(p);
    sd_session_free(c);
    sd_model_free(m);
}

/* ---- serve's path: the batcher ---- */

#define NPRED 400

typedef struct out {
    int32_t toks[NPRED];
    int32_t n;
    int done;
} out;

static int collect(void *user, const sd_req_event *ev) {
    out *o = user;
    for (int32_t i = 0; i < ev->n_tokens && o->n < NPRED; i++)
        o->toks[o->n++] = ev->tokens[i];
    if (ev->done) o->done = 1;
    return 0;
}

Test(swa_groups, batcher_greedy_equals_unpaged_with_bounded_local_blocks) {
    sd_model *m = load();
    char path[1200];
    ah_path("gemma3-w32.gguf", path, sizeof path);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = path;
    ep.n_ctx = CTX;
    ep.n_threads = 1;
    ep.kv_type = SD_TYPE_F16;
    ep.models_only = 1;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.kv_block = BS;
    bp.n_batch = NB;
    sd_batcher *b = NULL;
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int32_t prompt[2][24];
    for (int r = 0; r < 2; r++)
        for (int32_t i = 0; i < 24; i++)
            prompt[r][i] = i == 0 ? 2 : 3 + (i * (r + 3) + r * 5) % 13;
    out o[2];
    memset(o, 0, sizeof o);
    for (int r = 0; r < 2; r++) {
        sd_request q = {0};
        q.prompt = prompt[r];
        q.n_prompt = 24;
        q.gen = sd_gen_default_params();
        q.gen.n_predict = NPRED;
        q.gen.samp.temp = 0.0f;
        q.gen.ignore_eos = 1;
        q.gen.draft_type = r == 0 ? SD_DRAFT_NONE : SD_DRAFT_NGRAM;
        q.gen.n_draft = r == 0 ? 0 : 4;
        q.n_choices = 1;
        q.cb = collect;
        q.user = &o[r];
        cr_assert_eq(sd_batcher_submit(b, &q, NULL, &err), SD_OK, "%s", err.msg);
    }
    int32_t max_local = 0, max_global = 0;
    for (int guard = 0; sd_batcher_busy(b); guard++) {
        cr_assert_lt(guard, 100000, "the batcher does not finish");
        cr_assert_eq(sd_batcher_step(b, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_batcher_check(b, &err), SD_OK, "%s", err.msg);
        sd_batcher_stats st;
        sd_batcher_get_stats(b, &st);
        cr_assert_eq(st.kv.n_group, 2);
        if (group_used(&st.kv, 1) > max_local) max_local = group_used(&st.kv, 1);
        if (group_used(&st.kv, 0) > max_global) max_global = group_used(&st.kv, 0);
    }
    /* two sequences, each within the window's blocks (a prefill chunk of NB rows) */
    const int32_t bound = 2 * ((W + SD_KV_WINDOW_SLACK + NB + BS - 1) / BS + 2);
    cr_expect_leq(max_local, bound, "the local group held %d blocks (bound %d)", max_local, bound);
    cr_expect_gt(max_global, bound, "the global group held %d blocks", max_global);
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
