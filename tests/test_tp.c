/*
 * tests/test_tp.c: tensor parallelism (runtime/model/tp.h) with N simulated ranks on the CPU
 * (one thread and one CPU backend per rank, the in-process all-reduce):
 *   - sharded logits equal the unsharded ones for N = 1, 2, 3, 4: bit for bit for N = 1; for
 *     N > 1 within |a - b| <= 1e-5 max|logit| (F32) and 2e-2 max|logit| (Q8_0 / Q4_0). Why
 *     those bounds: only the two row-parallel products per layer (attention output, down)
 *     change, from one dot product to N partial dots summed in rank order, i.e. float
 *     reassociation, at most ~n u sum|terms| per product (u = 2^-24, n <= 768 terms) and in
 *     practice a few ulp, carried through 2 layers and the classifier: measured 5e-7 of
 *     max|logit| for F32 (N = 2, 3, 4). With Q8_0 / Q4_0 weights the next matmul quantizes
 *     its activations, which absorbs those ulps (measured: bit-identical logits), but a
 *     rounding that falls on a tie can flip and move a logit by about one quantization
 *     step, 1/127 of a block's largest value: the bound allows that;
 *   - top-1 agrees wherever the unsharded top-2 gap exceeds twice the difference;
 *   - a sharded batch is bit-identical to the same tokens one at a time (the determinism
 *     contract survives the split), so greedy speculative == target alone when sharded;
 *   - a split the shape does not allow (n_head_kv not divisible by N) is refused, named.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "target/sd_target.h"
#include "testutil.h"

static char g_dir[1024];
static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}
TestSuite(tp, .init = setup, .fini = teardown, .timeout = 600);

/* A model that splits 1, 2, 3 and 4 ways: 12 KV heads (24 query heads of 16), FFN 768, and
 * row-parallel slices (384 / N, 768 / N columns) of whole 32-blocks. */
static sd_model *tp_model(sd_type wt, const char *name) {
    tu_llama_spec spec = tu_llama_default_spec();
    spec.n_vocab = 300;
    spec.n_embd = 384;
    spec.n_head = 24;
    spec.n_head_kv = 12;
    spec.n_ff = 768;
    spec.n_layer = 2;
    spec.n_ctx = 64;
    spec.wtype = wt;
    char path[1100];
    tu_path(path, sizeof path, g_dir, name);
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

static sd_session *open_session(const sd_model *m, int32_t n_split) {
    sd_session_params sp = sd_session_default_params();
    sp.n_split = n_split;
    sp.n_threads = n_split > 1 ? n_split : 1; /* one thread per rank */
    sp.n_batch = 32;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), 0, "split %d: %s", n_split, err.msg);
    return s;
}

enum { NT = 11 };

static void eval_all(sd_session *s, const int32_t *toks, float *logits) {
    sd_error err = {0};
    cr_assert_eq(sd_session_truncate(s, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_session_eval(s, toks, NT, logits, NT, &err), 0, "%s", err.msg);
}

static void check_split_equals_unsharded(sd_type wt, double tol) {
    sd_model *m = tp_model(wt, "tp.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    int32_t toks[NT];
    for (int i = 0; i < NT; i++)
        toks[i] = (i * 53 + 7) % nv; /* ids spread over every rank's vocabulary slice */
    float *ref = malloc((size_t)NT * nv * 4), *got = malloc((size_t)NT * nv * 4),
          *one = malloc((size_t)nv * 4);
    cr_assert(ref && got && one);
    sd_session *s0 = open_session(m, 0);
    eval_all(s0, toks, ref);
    sd_session_free(s0);
    double scale = 0;
    for (int i = 0; i < NT * nv; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int32_t n = 1; n <= 4; n++) {
        sd_session *s = open_session(m, n);
        cr_assert_eq(sd_session_model(s), m, "the handle reports the unsharded model");
        eval_all(s, toks, got);
        double diff = 0;
        for (int i = 0; i < NT * nv; i++)
            diff = fmax(diff, fabs((double)got[i] - ref[i]));
        if (n == 1)
            cr_assert_eq(memcmp(got, ref, (size_t)NT * nv * 4), 0,
                         "%s: one rank is not bit-identical (max diff %.3g)", sd_type_name(wt),
                         diff);
        cr_assert(diff <= tol * scale, "%s split %d: max |sharded - unsharded| %.3g > %.3g",
                  sd_type_name(wt), n, diff, tol * scale);
        for (int t = 0; t < NT; t++) {
            const float *a = got + (size_t)t * nv, *b = ref + (size_t)t * nv;
            int ia = 0, ib = 0;
            for (int j = 1; j < nv; j++) {
                if (a[j] > a[ia]) ia = j;
                if (b[j] > b[ib]) ib = j;
            }
            float gap = INFINITY;
            for (int j = 0; j < nv; j++)
                if (j != ib) gap = fminf(gap, b[ib] - b[j]);
            if (gap > 2 * diff)
                cr_assert_eq(ia, ib, "split %d token %d: top-1 %d vs %d", n, t, ia, ib);
        }
        /* Batched == one token at a time, bit for bit, inside the split. */
        sd_error err = {0};
        cr_assert_eq(sd_session_truncate(s, 0, &err), 0, "%s", err.msg);
        for (int t = 0; t < NT; t++) {
            cr_assert_eq(sd_session_eval(s, toks + t, 1, one, 1, &err), 0, "%s", err.msg);
            cr_assert_eq(memcmp(one, got + (size_t)t * nv, (size_t)nv * 4), 0,
                         "%s split %d: token %d alone differs from the batch", sd_type_name(wt), n,
                         t);
        }
        cr_assert_eq(sd_session_n_past(s), NT);
        sd_session_free(s);
    }
    free(ref);
    free(got);
    free(one);
    sd_model_free(m);
}

Test(tp, f32_split_1_to_4) {
    check_split_equals_unsharded(SD_TYPE_F32, 1e-5);
}

Test(tp, q8_0_split_1_to_4) {
    check_split_equals_unsharded(SD_TYPE_Q8_0, 2e-2);
}

Test(tp, q4_0_split_1_to_4) {
    check_split_equals_unsharded(SD_TYPE_Q4_0, 2e-2);
}

Test(tp, refuses_a_split_the_shape_does_not_allow) {
    sd_model *m = tp_model(SD_TYPE_F32, "tp.gguf"); /* 12 KV heads */
    sd_session_params sp = sd_session_default_params();
    sd_session *s = NULL;
    sd_error err = {0};
    sp.n_split = 5;
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "n_head_kv 12 is not divisible by 5"), "%s", err.msg);
    cr_assert_null(s);
    sd_model_free(m);
    /* Q8_0 with FFN 768 / 8 = 96 columns per rank is fine, but 384 / 8 = 48 attention-output
     * columns are not whole blocks of 32. */
    tu_llama_spec spec = tu_llama_default_spec();
    spec.n_embd = 384, spec.n_head = 8, spec.n_head_kv = 8, spec.n_ff = 768,
    spec.wtype = SD_TYPE_Q8_0;
    char path[1100];
    cr_assert_eq(tu_make_llama(tu_path(path, sizeof path, g_dir, "q.gguf"), &spec), 0);
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    sp.n_split = 8;
    sd_error_clear(&err);
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "attn_output") && strstr(err.msg, "not whole blocks"), "%s", err.msg);
    /* Every device present: one CPU. */
    sp.n_split = -1;
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), 0, "%s", err.msg);
    sd_session_free(s);
    sd_model_free(m);
}

/* Greedy speculative decoding with a 3-way split target equals the split target alone. */
Test(tp, greedy_speculative_equals_target_alone_when_split) {
    sd_model *tm = tp_model(SD_TYPE_F32, "t.gguf");
    tu_llama_spec spec = tu_llama_default_spec(); /* a small draft on the same vocabulary */
    spec.n_vocab = 300;
    spec.n_ctx = 64;
    spec.wtype = SD_TYPE_Q8_0;
    char path[1100];
    cr_assert_eq(tu_make_llama(tu_path(path, sizeof path, g_dir, "d.gguf"), &spec), 0);
    sd_model *dm = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &dm, &err), 0, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sp.n_split = 3;
    sp.n_threads = 3;
    sd_scorer *sc = NULL;
    cr_assert_eq(sd_scorer_init(tm, &sp, &sc, &err), 0, "%s", err.msg);
    sd_sampling_params samp = sd_sampling_default_params();
    samp.temp = 0.0f;
    sd_session_params dsp = sd_session_default_params();
    dsp.n_threads = 1;
    sd_proposer *prop = NULL;
    cr_assert_eq(sd_proposer_llm_init(dm, &dsp, &samp, 7, 300, &prop, &err), 0, "%s", err.msg);
    const int32_t prompt[4] = {1, 40, 90, 250}, n_pred = 40;
    int32_t ref[40], got[40];
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_pred;
    gp.samp.temp = 0.0f;
    sd_gen_stats st;
    cr_assert_eq(sd_generate(sc, NULL, prompt, 4, 2, &gp, NULL, NULL, ref, n_pred, &st, &err), 0,
                 "%s", err.msg);
    const int32_t n_ref = st.n_generated;
    for (int32_t k = 1; k <= 6; k += 5) {
        gp.n_draft = k;
        cr_assert_eq(sd_generate(sc, prop, prompt, 4, 2, &gp, NULL, NULL, got, n_pred, &st, &err),
                     0, "%s", err.msg);
        cr_assert_eq(st.n_generated, n_ref);
        for (int32_t i = 0; i < n_ref; i++)
            cr_assert_eq(got[i], ref[i], "K=%d: token %d is %d, target alone %d", k, i, got[i],
                         ref[i]);
    }
    sd_proposer_free(prop);
    sd_scorer_free(sc);
    sd_model_free(dm);
    sd_model_free(tm);
}
