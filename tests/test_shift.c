/*
 * tests/test_shift.c: sd_session_seq_shift, the context shift that re-rotates the cached keys
 * instead of recomputing them.
 *
 * The reference is the shortened context evaluated afresh in a new session. In a model of
 * one layer the cached K and V of a token depend only on the token and its position (the
 * layer's input is the embedding), so the shifted cache must equal the fresh one up to the
 * rounding of rotating twice: the logits of the tokens that follow agree within 1e-5 (max
 * norm, relative; F32 cache; measured 2.5e-7) or 2e-3 (F16 cache, measured 4.4e-4, whose re-rotated
 * keys are rounded to binary16 twice), and their argmax is the same. With two layers the two differ
 * by more than rounding (0.51 here: the moved rows of the second layer still carry what their
 * tokens attended to in the dropped run): checked too, so that the one-layer agreement is not the
 * shift doing nothing. sd_session_seq_shift on a paged sequence whose blocks a fork shares
 * leaves the bits the contiguous shift leaves (the logits that follow are equal byte for
 * byte, F32 and F16 caches, two layers) and the fork's rows untouched. Then the limits:
 * bad ranges and ids, refused alike by the contiguous and the paged shift.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/sd_model.h"
#include "testutil.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(shift, .init = setup, .fini = teardown, .timeout = 300);

#define N0    48 /* tokens before the shift */
#define KEEP  5
#define DROP  20
#define NNEXT 8 /* tokens after it */
#define CTX   64

static sd_model *make(int32_t n_layer, const char *name) {
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_layer = n_layer;
    char path[1200];
    tu_path(path, sizeof path, g_dir, name);
    cr_assert_eq(tu_make_llama(path, &sp), 0);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    return m;
}

static sd_session *session(const sd_model *m, sd_type kv, int32_t n_seq) {
    sd_session_params p = sd_session_default_params();
    p.n_ctx = CTX;
    p.n_batch = CTX;
    p.n_threads = 1;
    p.kv_type = kv;
    p.n_seq = n_seq;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    return s;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Shift after N0 tokens, then NNEXT more; the same NNEXT after the shortened context
 * evaluated afresh. Returns the max-norm relative difference of their logits; *same_top1:
 * 1 if every row's argmax agrees. */
static double shifted_vs_fresh(const sd_model *m, sd_type kv, int *same_top1) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    int32_t toks[N0 + NNEXT], cut[N0 + NNEXT];
    for (int32_t i = 0; i < N0 + NNEXT; i++)
        toks[i] = i == 0 ? 1 : 3 + (i * 17 + 5) % (nv - 3);
    float *ls = malloc((size_t)NNEXT * nv * sizeof(float));
    float *lf = malloc((size_t)NNEXT * nv * sizeof(float));
    sd_error err = {0};
    sd_session *s = session(m, kv, 0);
    cr_assert_eq(sd_session_eval(s, toks, N0, NULL, 0, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_shift(s, 0, KEEP, DROP, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_n_past(s, 0), N0 - DROP);
    /* the token mirror follows: the old tokens without the dropped run */
    memcpy(cut, toks, KEEP * sizeof *cut);
    memcpy(cut + KEEP, toks + KEEP + DROP, (size_t)(N0 + NNEXT - KEEP - DROP) * sizeof *cut);
    cr_assert_eq(memcmp(sd_session_seq_tokens(s, 0), cut, (size_t)(N0 - DROP) * sizeof *cut), 0);
    cr_assert_eq(sd_session_eval(s, toks + N0, NNEXT, ls, NNEXT, &err), SD_OK, "%s", err.msg);
    sd_session *f = session(m, kv, 0);
    cr_assert_eq(sd_session_eval(f, cut, N0 - DROP + NNEXT, lf, NNEXT, &err), SD_OK, "%s", err.msg);
    double num = 0.0, den = 0.0;
    *same_top1 = 1;
    for (int32_t r = 0; r < NNEXT; r++) {
        const float *a = ls + (size_t)r * nv, *b = lf + (size_t)r * nv;
        for (int32_t i = 0; i < nv; i++) {
            num = fmax(num, fabs((double)a[i] - b[i]));
            den = fmax(den, fabs((double)b[i]));
        }
        *same_top1 &= argmax(a, nv) == argmax(b, nv);
    }
    sd_session_free(s);
    sd_session_free(f);
    free(ls);
    free(lf);
    return den > 0 ? num / den : num;
}

Test(shift, one_layer_equals_a_fresh_evaluation) {
    sd_model *m = make(1, "l1.gguf");
    int top1 = 0;
    double e = shifted_vs_fresh(m, SD_TYPE_F32, &top1);
    cr_log_info("one layer, f32 cache: shifted vs fresh %.3g", e);
    cr_expect_leq(e, 1e-5, "f32 cache: %.3g", e);
    cr_expect(top1, "f32 cache: an argmax differs");
    e = shifted_vs_fresh(m, SD_TYPE_F16, &top1);
    cr_log_info("one layer, f16 cache: shifted vs fresh %.3g", e);
    cr_expect_leq(e, 2e-3, "f16 cache: %.3g", e);
    cr_expect(top1, "f16 cache: an argmax differs");
    sd_model_free(m);
}

/* Two layers: not a recompute (the difference is far above the one-layer rounding). */
Test(shift, two_layers_keep_what_the_dropped_run_left) {
    sd_model *m = make(2, "l2.gguf");
    int top1 = 0;
    const double e = shifted_vs_fresh(m, SD_TYPE_F32, &top1);
    cr_log_info("two layers, f32 cache: shifted vs fresh %.3g, same argmax %d", e, top1);
    cr_expect_gt(e, 1e-3, "two layers: the shift equals a recompute (%.3g)?", e);
    sd_model_free(m);
}

/* Sequence 1 of a paged session (blocks of 8, forked into sequence 2 first, so its blocks
 * are shared) shifted with sd_session_seq_shift: the logits of the tokens after it equal
 * the contiguous shift's byte for byte; sequence 2 still answers as an unshifted cache. */
static void paged_vs_contiguous(const sd_model *m, sd_type kv) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    int32_t toks[N0 + NNEXT], seq1[N0 + NNEXT], seq2[N0 + NNEXT];
    for (int32_t i = 0; i < N0 + NNEXT; i++) {
        toks[i] = i == 0 ? 1 : 3 + (i * 13 + 7) % (nv - 3);
        seq1[i] = 1;
        seq2[i] = 2;
    }
    const size_t bytes = (size_t)NNEXT * nv * sizeof(float);
    float *lc = malloc(bytes), *lp = malloc(bytes), *lu = malloc(bytes), *lf = malloc(bytes);
    cr_assert(lc && lp && lu && lf);
    sd_error err = {0};
    /* the contiguous shift, and an unshifted contiguous run */
    sd_session *c = session(m, kv, 0);
    cr_assert_eq(sd_session_eval(c, toks, N0, NULL, 0, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_shift(c, 0, KEEP, DROP, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_eval(c, toks + N0, NNEXT, lc, NNEXT, &err), SD_OK, "%s", err.msg);
    sd_session *u = session(m, kv, 0);
    cr_assert_eq(sd_session_eval(u, toks, N0 + NNEXT, lu, NNEXT, &err), SD_OK, "%s", err.msg);
    /* the paged one */
    sd_session_params p = sd_session_default_params();
    p.n_ctx = CTX;
    p.n_batch = CTX;
    p.n_threads = 1;
    p.kv_type = kv;
    p.n_seq = 3;
    p.kv_block = 8;
    sd_session *s = NULL;
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    sd_batch b = sd_batch_of(toks, N0);
    b.seq_id = seq1;
    cr_assert_eq(sd_session_decode(s, &b, lf, &err), SD_OK, "%s", err.msg); /* a row */
    cr_assert_eq(sd_session_seq_fork(s, 2, 1, N0, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_shift(s, 1, KEEP, DROP, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_n_past(s, 1), N0 - DROP);
    cr_assert_eq(memcmp(sd_session_seq_tokens(s, 1), sd_session_seq_tokens(c, 0),
                        (size_t)(N0 - DROP) * sizeof(int32_t)),
                 0);
    cr_assert_eq(sd_session_kv_check(s, &err), SD_OK, "%s", err.msg);
    int8_t want[NNEXT];
    memset(want, 1, sizeof want);
    b = sd_batch_of(toks + N0, NNEXT);
    b.seq_id = seq1;
    b.logits = want;
    cr_assert_eq(sd_session_decode(s, &b, lp, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(memcmp(lp, lc, bytes), 0, "%s cache: the paged shift differs from the contiguous",
                 sd_type_name(kv));
    b.seq_id = seq2; /* the fork kept its rows: as the unshifted run */
    cr_assert_eq(sd_session_decode(s, &b, lf, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(memcmp(lf, lu, bytes), 0, "%s cache: the fork's rows changed", sd_type_name(kv));
    cr_assert_eq(sd_session_kv_check(s, &err), SD_OK, "%s", err.msg);
    /* the limits of the paged call */
    cr_expect_eq(sd_session_seq_shift(s, 1, 2, 0, &err), SD_ERR_ARG, "nothing dropped");
    cr_expect_eq(sd_session_seq_shift(s, 1, N0, N0, &err), SD_ERR_ARG, "beyond the sequence");
    cr_expect_eq(sd_session_seq_shift(s, 3, 2, 4, &err), SD_ERR_ARG, "no sequence 3");
    sd_session_free(s);
    sd_session_free(c);
    sd_session_free(u);
    free(lc);
    free(lp);
    free(lu);
    free(lf);
}

Test(shift, paged_sequence_equals_the_contiguous_shift_bit_for_bit) {
    sd_model *m = make(2, "l2.gguf");
    paged_vs_contiguous(m, SD_TYPE_F32);
    paged_vs_contiguous(m, SD_TYPE_F16);
    sd_model_free(m);
}

/* The contiguous and the paged shift share one argument check: a bad range is refused by
 * both with the same message and leaves both sequences as they were; a bad sequence id is
 * refused by both. */
Test(shift, limits) {
    sd_model *m = make(1, "l1.gguf");
    sd_session *s = session(m, SD_TYPE_F32, 0);
    sd_session *p = session(m, SD_TYPE_F32, 2);
    int32_t toks[10] = {1, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    sd_error err = {0}, perr = {0};
    cr_assert_eq(sd_session_seq_eval(s, 0, toks, 10, NULL, 0, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_eval(p, 1, toks, 10, NULL, 0, &err), SD_OK, "%s", err.msg);
    const int32_t bad[3][2] = {
        {5, 6} /* beyond the cache */, {2, 0} /* nothing dropped */, {-1, 2}};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(sd_session_seq_shift(s, 0, bad[i][0], bad[i][1], &err), SD_ERR_ARG);
        cr_expect_eq(sd_session_seq_shift(p, 1, bad[i][0], bad[i][1], &perr), SD_ERR_ARG);
        /* the same words but for the sequence's id */
        cr_expect(strstr(err.msg, "context shift of sequence 0: keep") != NULL, "%s", err.msg);
        cr_expect(strstr(perr.msg, "context shift of sequence 1: keep") != NULL, "%s", perr.msg);
        cr_expect_str_eq(strchr(err.msg, ':'), strchr(perr.msg, ':'));
    }
    cr_expect_eq(sd_session_seq_n_past(s, 0), 10, "a refused shift changed the cache");
    cr_expect_eq(sd_session_seq_n_past(p, 1), 10, "a refused shift changed the sequence");
    cr_expect_eq(sd_session_seq_shift(s, 1, 2, 4, &err), SD_ERR_ARG, "no sequence 1");
    cr_expect_eq(sd_session_seq_shift(p, 2, 2, 4, &err), SD_ERR_ARG, "no sequence 2");
    /* all after the kept */
    cr_expect_eq(sd_session_seq_shift(s, 0, 2, 8, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(s, 0), 2);
    cr_expect_eq(sd_session_seq_shift(p, 1, 2, 8, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(p, 1), 2);
    sd_session_free(p);
    sd_session_free(s);
    sd_model_free(m);
}
