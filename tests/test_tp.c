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
 *   - a split the shape does not allow (n_head_kv not divisible by N) is refused, named;
 *   - paged rank sessions (several sequences): every call that changes the KV state (a
 *     mixed batch, truncate, fork, prefix store / attach / clear, a token tree and its keep,
 *     a context shift: every rank re-rotates its own heads' keys) leaves the split session's pool
 * exactly as an unsplit paged session's (same positions, free and cached blocks;
 * sd_session_kv_check compares every rank's pool with rank 0's), with logits within the bounds
 * above (bit for bit for N = 1); a pass the full pool cannot hold fails with the unsplit session's
 * status and changes nothing on any rank;
 *   - the batcher on a split target (sd_engine_generate's one slot, N = 2, 3, 4, K = 1 and
 *     6; several requests at once with a prefix-cache hit): greedy speculative text (the
 *     LLM draft) equals the split target alone
 *     (one token at a time on a contiguous split session), bit for bit for F32 and Q8_0
 *     weights, and for F32 also the unsplit target alone.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "engine_util.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "verify/sd_sample.h"

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
static tu_llama_spec tp_spec(sd_type wt) {
    tu_llama_spec spec = tu_llama_default_spec();
    spec.n_vocab = 300;
    spec.n_embd = 384;
    spec.n_head = 24;
    spec.n_head_kv = 12;
    spec.n_ff = 768;
    spec.n_layer = 2;
    spec.n_ctx = 64;
    spec.wtype = wt;
    return spec;
}

static sd_model *tp_model(sd_type wt, const char *name) {
    const tu_llama_spec spec = tp_spec(wt);
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
    cr_assert_eq(sd_session_seq_truncate(s, 0, 0, &err), 0, "%s", err.msg);
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
        cr_assert_eq(sd_session_seq_truncate(s, 0, 0, &err), 0, "%s", err.msg);
        for (int t = 0; t < NT; t++) {
            cr_assert_eq(sd_session_eval(s, toks + t, 1, one, 1, &err), 0, "%s", err.msg);
            cr_assert_eq(memcmp(one, got + (size_t)t * nv, (size_t)nv * 4), 0,
                         "%s split %d: token %d alone differs from the batch", sd_type_name(wt), n,
                         t);
        }
        cr_assert_eq(sd_session_seq_n_past(s, 0), NT);
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

/* ---- paged rank sessions ---- */

enum { PG_SEQ = 3, PG_BLOCK = 4, PG_BLOCKS = 40 };

static sd_session *open_paged(const sd_model *m, int32_t n_split) {
    sd_session_params sp = sd_session_default_params();
    sp.n_split = n_split;
    sp.n_threads = n_split > 1 ? n_split : 1;
    sp.n_batch = 32;
    sp.n_seq = PG_SEQ;
    sp.kv_block = PG_BLOCK;
    sp.n_kv_blocks = PG_BLOCKS;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), 0, "split %d: %s", n_split, err.msg);
    return s;
}

/* The split session s is in the state of the unsplit one u: every sequence's positions and
 * tokens, the pool's free, cached and available blocks; and its ranks agree
 * (sd_session_kv_check compares each rank's pool with rank 0's). */
static void same_pool(const char *what, int32_t n, sd_session *s, sd_session *u) {
    sd_error err = {0};
    cr_assert_eq(sd_session_kv_check(s, &err), SD_OK, "split %d after %s: %s", n, what, err.msg);
    cr_assert_eq(sd_session_kv_check(u, &err), SD_OK, "unsplit after %s: %s", what, err.msg);
    for (int32_t q = 0; q < PG_SEQ; q++) {
        const int32_t np = sd_session_seq_n_past(u, q);
        cr_assert_eq(sd_session_seq_n_past(s, q), np,
                     "split %d after %s: sequence %d holds %d, "
                     "unsplit %d",
                     n, what, q, sd_session_seq_n_past(s, q), np);
        cr_assert_eq(memcmp(sd_session_seq_tokens(s, q), sd_session_seq_tokens(u, q),
                            (size_t)np * sizeof(int32_t)),
                     0, "split %d after %s: sequence %d's tokens", n, what, q);
    }
    sd_kv_pool_stats a, b;
    sd_session_kv_stats(s, &a);
    sd_session_kv_stats(u, &b);
    cr_assert(a.n_free == b.n_free && a.n_cached == b.n_cached &&
                  a.n_cached_idle == b.n_cached_idle && a.n_cow == b.n_cow,
              "split %d after %s: free %d cached %d idle %d cow %lld, unsplit %d %d %d %lld", n,
              what, a.n_free, a.n_cached, a.n_cached_idle, (long long)a.n_cow, b.n_free, b.n_cached,
              b.n_cached_idle, (long long)b.n_cow);
    cr_assert_eq(sd_session_kv_available(s), sd_session_kv_available(u));
}

/* rows [w, nv] of the split pass against the unsplit one's: bit for bit for N = 1, else
 * within tol of the largest logit. */
static void close_rows(const char *what, int32_t n, const float *got, const float *ref, int32_t w,
                       int32_t nv, double tol) {
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < (int64_t)w * nv; i++) {
        scale = fmax(scale, fabs(ref[i]));
        diff = fmax(diff, fabs((double)got[i] - ref[i]));
    }
    if (n == 1)
        cr_assert_eq(memcmp(got, ref, (size_t)w * (size_t)nv * 4), 0,
                     "%s: one rank is not bit-identical (max diff %.3g)", what, diff);
    cr_assert(diff <= tol * scale, "%s split %d: max |split - unsplit| %.3g > %.3g", what, n, diff,
              tol * scale);
}

Test(tp, paged_ranks_stay_in_step) {
    sd_model *m = tp_model(SD_TYPE_F32, "tp.gguf");
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *ref = malloc((size_t)16 * nv * 4), *got = malloc((size_t)16 * nv * 4);
    cr_assert(ref && got);
    sd_error err = {0};
    for (int32_t n = 1; n <= 4; n++) {
        if (n == 3) continue; /* 1, 2, 4 */
        sd_session *s = open_paged(m, n), *u = open_paged(m, 0);
        cr_assert_eq(sd_session_n_seq(s), PG_SEQ);
        /* A batch of three sequences: 6 + 3 + 5 tokens, every row wanted. */
        int32_t tok[14], seq[14];
        for (int i = 0; i < 14; i++) {
            tok[i] = (i * 71 + 11) % nv;
            seq[i] = i < 6 ? 0 : i < 9 ? 1 : 2;
        }
        sd_batch b = sd_batch_of(tok, 14);
        b.seq_id = seq;
        int8_t want[14];
        memset(want, 1, sizeof want);
        b.logits = want;
        cr_assert_eq(sd_session_decode(s, &b, got, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_decode(u, &b, ref, &err), SD_OK, "%s", err.msg);
        close_rows("mixed batch", n, got, ref, 14, nv, 1e-5);
        same_pool("a mixed batch", n, s, u);
        /* Truncate, fork (sharing blocks, a copy-on-write on the next write), decode. */
        for (sd_session *x = s; x; x = x == s ? u : NULL) {
            cr_assert_eq(sd_session_seq_truncate(x, 1, 1, &err), SD_OK, "%s", err.msg);
            cr_assert_eq(sd_session_seq_truncate(x, 2, 0, &err), SD_OK, "%s", err.msg);
            cr_assert_eq(sd_session_seq_fork(x, 2, 0, 5, &err), SD_OK, "%s", err.msg);
        }
        same_pool("truncate and fork", n, s, u);
        const int32_t t2[3] = {17, 230, 101}, s2[3] = {2, 2, 1};
        b = sd_batch_of(t2, 3);
        b.seq_id = s2;
        cr_assert_eq(sd_session_decode(s, &b, got, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_decode(u, &b, ref, &err), SD_OK, "%s", err.msg);
        close_rows("after a fork", n, got, ref, 1, nv, 1e-5);
        same_pool("a write after a fork", n, s, u);
        /* A context shift of sequence 2 (7 positions: keep 1, drop 2; every rank re-rotates
         * its own heads' keys), then a pass reading the shifted keys. */
        cr_assert_eq(sd_session_seq_n_past(u, 2), 7);
        cr_assert_eq(sd_session_seq_shift(s, 2, 1, 2, &err), SD_OK, "split %d: %s", n, err.msg);
        cr_assert_eq(sd_session_seq_shift(u, 2, 1, 2, &err), SD_OK, "%s", err.msg);
        same_pool("a context shift", n, s, u);
        const int32_t t3 = 44, s3 = 2;
        b = sd_batch_of(&t3, 1);
        b.seq_id = &s3;
        cr_assert_eq(sd_session_decode(s, &b, got, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_decode(u, &b, ref, &err), SD_OK, "%s", err.msg);
        close_rows("after a context shift", n, got, ref, 1, nv, 1e-5);
        /* A token tree on sequence 1 (root, two children, a grandchild), keep one path. */
        const int32_t tt[4] = {5, 90, 91, 250}, par[4] = {-1, 0, 0, 1}, keep[2] = {0, 1};
        cr_assert_eq(sd_session_seq_decode_tree(s, 1, tt, par, 4, got, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_decode_tree(u, 1, tt, par, 4, ref, &err), SD_OK, "%s", err.msg);
        close_rows("tree pass", n, got, ref, 4, nv, 1e-5);
        same_pool("a tree pass", n, s, u);
        const int32_t pos0 = sd_session_seq_n_past(u, 1) - 4;
        cr_assert_eq(sd_session_seq_tree_keep(s, 1, pos0, keep, 2, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_seq_tree_keep(u, 1, pos0, keep, 2, &err), SD_OK, "%s", err.msg);
        same_pool("a tree keep", n, s, u);
        /* Sequence 0's blocks into the prefix cache, dropped, attached again. */
        int32_t ctx[6];
        memcpy(ctx, sd_session_seq_tokens(u, 0), sizeof ctx);
        for (sd_session *x = s; x; x = x == s ? u : NULL) {
            sd_session_seq_store_prefix(x, 0);
            cr_assert_eq(sd_session_seq_truncate(x, 0, 0, &err), SD_OK, "%s", err.msg);
        }
        same_pool("a prefix store", n, s, u);
        const int32_t ga = sd_session_seq_attach_prefix(s, 0, ctx, 6),
                      gb = sd_session_seq_attach_prefix(u, 0, ctx, 6);
        cr_assert_eq(ga, gb);
        /* a full block and a partial leaf of 2 */
        cr_assert_eq(ga, 6, "the 6 positions are cached (got %d)", ga);
        same_pool("a prefix attach", n, s, u);
        cr_assert_eq(sd_session_seq_keep_prefix(s, 0, ctx, 2), 2);
        cr_assert_eq(sd_session_seq_keep_prefix(u, 0, ctx, 2), 2);
        same_pool("keep prefix", n, s, u);
        for (sd_session *x = s; x; x = x == s ? u : NULL) {
            for (int32_t q = 0; q < PG_SEQ; q++)
                cr_assert_eq(sd_session_seq_truncate(x, q, 0, &err), SD_OK, "%s", err.msg);
            sd_session_kv_clear_cache(x);
        }
        same_pool("clearing", n, s, u);
        /* Fill the pool (sequences 0 and 1: 64 positions, 16 blocks each; sequence 2: 32
         * positions, 8 blocks: all 40), then a pass that needs a 41st block fails alike on
         * every rank and leaves every rank as it was. */
        int32_t fill[32];
        for (int i = 0; i < 32; i++)
            fill[i] = (i * 37 + 5) % nv;
        for (int32_t q = 0; q < PG_SEQ; q++)
            for (int rep = 0; rep < (q < 2 ? 2 : 1); rep++) {
                int32_t sq[32];
                for (int i = 0; i < 32; i++)
                    sq[i] = q;
                b = sd_batch_of(fill, 32);
                b.seq_id = sq;
                cr_assert_eq(sd_session_decode(s, &b, got, &err), SD_OK, "%s", err.msg);
                cr_assert_eq(sd_session_decode(u, &b, ref, &err), SD_OK, "%s", err.msg);
            }
        close_rows("a full pool", n, got, ref, 1, nv, 1e-5);
        same_pool("filling the pool", n, s, u);
        cr_assert_eq(sd_session_kv_available(s), 0);
        const int32_t one = 7, two = 2;
        b = sd_batch_of(&one, 1);
        b.seq_id = &two;
        const int rs = sd_session_decode(s, &b, got, &err),
                  ru = sd_session_decode(u, &b, ref, &err);
        cr_assert_neq(ru, SD_OK, "a 41st block");
        cr_assert_eq(rs, ru, "split %d: status %d, unsplit %d", n, rs, ru);
        same_pool("a pass the pool cannot hold", n, s, u);
        for (sd_session *x = s; x; x = x == s ? u : NULL)
            for (int32_t q = 0; q < PG_SEQ; q++)
                cr_assert_eq(sd_session_seq_truncate(x, q, 0, &err), SD_OK, "%s", err.msg);
        same_pool("emptying", n, s, u);
        sd_kv_pool_stats st;
        sd_session_kv_stats(s, &st);
        cr_assert_eq(st.n_free, st.n_blocks, "every block is free again");
        cr_assert_eq(sd_session_kv_bytes_per_token(s), sd_session_kv_bytes_per_token(u),
                     "the group counts every rank's heads");
        sd_session_free(s);
        sd_session_free(u);
    }
    free(ref);
    free(got);
    sd_model_free(m);
}

/* ---- the batcher on a split target ---- */

/* The split pair in g_dir: t.gguf (tp_spec in wt) and d.gguf (the same model in Q8_0 with
 * noise: a draft that agrees often, not always). Paths into t and d. */
static void tp_pair(sd_type wt, char *t, char *d, size_t cap) {
    tu_llama_spec spec = tp_spec(wt);
    spec.n_ctx = 128;
    cr_assert_eq(tu_make_llama(tu_path(t, cap, g_dir, "t.gguf"), &spec), 0);
    spec.wtype = SD_TYPE_Q8_0;
    spec.noise = 0.3f;
    cr_assert_eq(tu_make_llama(tu_path(d, cap, g_dir, "d.gguf"), &spec), 0);
}

/* Greedy target alone (engine_util.h's reference: one token at a time, end-of-generation
 * ids masked) on a contiguous session of t with n_split ranks. */
static void target_alone(const char *t, int32_t n_split, const int32_t *prompt, int32_t n_prompt,
                         int32_t *ref, int32_t n_pred) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(t, &m, &err), 0, "%s", err.msg);
    sd_session *s = open_session(m, n_split);
    eu_greedy_ref(s, m, prompt, n_prompt, ref, n_pred);
    sd_session_free(s);
    sd_model_free(m);
}

enum { TP_PRED = 40, TP_PROMPT = 6 };

static void batcher_split_equals_target_alone(sd_type wt) {
    char t[1100], d[1100];
    tp_pair(wt, t, d, sizeof t);
    const int32_t prompt[TP_PROMPT] = {1, 40, 90, 250, 7, 133};
    int32_t alone[TP_PRED], split_alone[TP_PRED], out[TP_PRED];
    target_alone(t, 0, prompt, TP_PROMPT, alone, TP_PRED);
    for (int32_t n = 2; n <= 4; n++) {
        target_alone(t, n, prompt, TP_PROMPT, split_alone, TP_PRED);
        if (wt == SD_TYPE_F32)
            for (int32_t i = 0; i < TP_PRED; i++)
                cr_assert_eq(split_alone[i], alone[i],
                             "split %d target alone: token %d is %d, unsplit %d", n, i,
                             split_alone[i], alone[i]);
        sd_engine_params ep = eu_engine_params(t, d, 128, n);
        ep.n_split = n;
        ep.kv_type = SD_TYPE_F32; /* the reference's */
        sd_engine *e = eu_engine_open(&ep);
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = TP_PRED;
        gp.samp.temp = 0.0f;
        gp.ignore_eos = 1;
        for (int32_t k = 1; k <= 6; k += 5) {
            sd_gen_stats st;
            const int32_t got =
                eu_generate(e, &gp, SD_DRAFT_LLM, SD_K_FIXED, k, prompt, TP_PROMPT, out, &st);
            cr_assert_eq(got, TP_PRED);
            cr_assert_gt(st.n_drafted, 0);
            cr_assert_gt(st.n_accepted, 0, "the noisy draft agrees sometimes");
            for (int32_t i = 0; i < TP_PRED; i++)
                cr_assert_eq(out[i], split_alone[i],
                             "%s split %d K %d: token %d is %d, the split target alone %d",
                             sd_type_name(wt), n, k, i, out[i], split_alone[i]);
        }
        sd_engine_free(e);
    }
}

Test(tp, batcher_generate_equals_target_alone_f32) {
    batcher_split_equals_target_alone(SD_TYPE_F32);
}

Test(tp, batcher_generate_equals_target_alone_q8_0) {
    batcher_split_equals_target_alone(SD_TYPE_Q8_0);
}

/* Three requests at once in one batcher on a 2-way split target (LLM draft, K 4), twice:
 * the second round finds each prompt in the prefix cache; every request equals its prompt's
 * target alone; the batcher's accounting (both ranks' pools) is checked after every step. */
Test(tp, batcher_several_sequences_split) {
    char t[1100], d[1100];
    tp_pair(SD_TYPE_F32, t, d, sizeof t);
    enum { NP = 3 };
    int32_t prompts[NP][TP_PROMPT], ref[NP][TP_PRED], ref1[TP_PRED];
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < TP_PROMPT; i++)
            prompts[p][i] = (p * 97 + i * 31 + 3) % 300;
    for (int p = 0; p < NP; p++) {
        target_alone(t, 2, prompts[p], TP_PROMPT, ref[p], TP_PRED);
        target_alone(t, 0, prompts[p], TP_PROMPT, ref1, TP_PRED);
        cr_assert_eq(memcmp(ref[p], ref1, sizeof ref1), 0,
                     "prompt %d: split 2 target alone "
                     "differs from unsplit (F32)",
                     p);
    }
    sd_engine_params ep = eu_engine_params(t, d, 128, 2);
    ep.n_split = 2;
    ep.kv_type = SD_TYPE_F32; /* the reference's */
    ep.models_only = 1;
    sd_engine *e = eu_engine_open(&ep);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 4;
    bp.kv_block = 4; /* prompts of 6: a full block and a partial one each */
    bp.prefix_cache = 1;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = TP_PRED;
    gp.samp.temp = 0.0f;
    gp.ignore_eos = 1;
    gp.draft_type = SD_DRAFT_LLM;
    gp.k_policy = SD_K_FIXED;
    gp.n_draft = 4;
    eu_out outs[NP];
    for (int round = 0; round < 2; round++) {
        memset(outs, 0, sizeof outs);
        for (int p = 0; p < NP; p++)
            eu_submit(b, prompts[p], TP_PROMPT, &gp, eu_collect, &outs[p]);
        eu_drain(b, 1);
        int32_t cached = 0;
        for (int p = 0; p < NP; p++) {
            cr_assert(outs[p].done);
            cr_assert_eq(outs[p].n, TP_PRED);
            cr_assert_eq(memcmp(outs[p].toks, ref[p], sizeof ref[p]), 0,
                         "round %d request %d differs from its target alone", round, p);
            cached += outs[p].st.n_prompt_cached;
        }
        if (round == 0)
            cr_assert_eq(cached, 0);
        else
            cr_assert_eq(cached, NP * (TP_PROMPT - 1),
                         "round 2 reuses every prompt but its last token (evaluated for its row): "
                         "%d cached",
                         cached);
    }
    sd_batcher_free(b);
    sd_engine_free(e);
}
