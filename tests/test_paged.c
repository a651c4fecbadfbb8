/*
 * tests/test_paged.c: several sequences in one forward pass over a paged KV cache.
 *
 * The reference for every sequence is the same tokens run alone through a session with a
 * contiguous cache of the same element type (the single-sequence path, itself checked
 * against an independent float64 forward in test_model.c). Against it, bit for bit:
 *  - sequences interleaved in random batches (random run lengths, random order of the
 *    sequences inside a batch, rollbacks of "rejected drafts"), for F32, F16, Q8_0 and
 *    Q4_0 blocks, 1 and 2 threads;
 *  - a sequence that starts from a cached prefix (another sequence's stored blocks) or
 *    from a fork (copy-on-write on its first write);
 * and the pool's accounting balances after every test. Also: the Q8_0 / Q4_0 attention
 * against float64 over the dequantized rows, bad batches refused with the session
 * unchanged, and the memory per token of each type.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/sd_backend.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"

#define NV    96 /* vocabulary */
#define CTX   96 /* positions per sequence */
#define NSEQ  5
#define BATCH 64

static char g_dir[256], g_model[512];

static void setup(void) {
    /* Thread the small ops too, so the threaded paths run. */
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_embd = 128; /* 4 heads of 32: whole Q8_0 / Q4_0 blocks per head */
    sp.n_ff = 160;
    sp.n_vocab = NV;
    sp.n_ctx = CTX;
    sp.wtype = SD_TYPE_Q8_0;
    tu_path(g_model, sizeof g_model, g_dir, "m.gguf");
    cr_assert_eq(tu_make_llama(g_model, &sp), 0);
}

static void teardown(void) {
    tu_rmdir(g_dir);
}

static sd_model *load(void) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(g_model, &m, &err), SD_OK, "%s", err.msg);
    return m;
}

static sd_session *session(const sd_model *m, sd_type kv, int32_t n_seq, int32_t n_blocks,
                           int32_t n_threads) {
    sd_session_params p = sd_session_default_params();
    p.n_ctx = CTX;
    p.n_batch = BATCH;
    p.n_threads = n_threads;
    p.kv_type = kv;
    p.n_seq = n_seq;
    p.kv_block = 8;
    p.n_kv_blocks = n_blocks;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    return s;
}

static void check_accounting(const sd_session *s) {
    sd_error err = {0};
    cr_assert_eq(sd_session_kv_check(s, &err), SD_OK, "%s", err.msg);
}

/* Sequence i's tokens: a deterministic stream; sequences 0..2 share their first 20. */
static int32_t tok_of(int i, int32_t pos) {
    const int share = i < 3 && pos < 20;
    uint64_t z = (uint64_t)(share ? 77 : i + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)pos * 7919;
    z ^= z >> 31;
    z *= 0xBF58476D1CE4E5B9ull;
    return (int32_t)(3 + (z >> 40) % (NV - 3));
}

/* Logits of every position of sequence i alone (contiguous cache of type kv): ref[pos]. */
static float *reference(const sd_model *m, sd_type kv, int i, int32_t n) {
    sd_session *s = session(m, kv, 0, 0, 1);
    float *ref = malloc((size_t)n * NV * sizeof(float));
    int32_t toks[CTX];
    for (int32_t p = 0; p < n; p++)
        toks[p] = tok_of(i, p);
    sd_error err = {0};
    /* Chunks of 7: the single-sequence path is batch-invariant (test_model.c). */
    for (int32_t p = 0; p < n; p += 7) {
        const int32_t c = n - p < 7 ? n - p : 7;
        cr_assert_eq(sd_session_eval(s, toks + p, c, ref + (size_t)p * NV, c, &err), SD_OK, "%s",
                     err.msg);
    }
    sd_session_free(s);
    return ref;
}

/* Random interleaved batches over NSEQ sequences of n tokens each; with `rollback`, some
 * runs are evaluated with junk tokens after them that are then truncated away. */
static void interleave(sd_type kv, int32_t n_threads, int rollback, uint64_t seed) {
    sd_model *m = load();
    const int32_t n = 60;
    float *ref[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        ref[i] = reference(m, kv, i, n);
    sd_session *s = session(m, kv, NSEQ, 0, n_threads);
    cr_expect_eq(sd_session_n_seq(s), NSEQ);
    int32_t done[NSEQ] = {0};
    int32_t tok[BATCH], seq[BATCH], pos[BATCH];
    int8_t want[BATCH];
    float *logits = malloc((size_t)BATCH * NV * sizeof(float));
    sd_error err = {0};
    uint64_t r = seed;
    int n_batches = 0, n_mixed = 0;
    for (;;) {
        int left = 0;
        for (int i = 0; i < NSEQ; i++)
            left += done[i] < n;
        if (!left) break;
        /* A random order of the sequences, a random run of each (0 .. 9 tokens). */
        int order[NSEQ];
        for (int i = 0; i < NSEQ; i++)
            order[i] = i;
        for (int i = NSEQ - 1; i > 0; i--) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            const int j = (int)((r >> 33) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        int32_t nb = 0, junk[NSEQ] = {0}, runs = 0;
        int32_t start[NSEQ], len[NSEQ];
        for (int o = 0; o < NSEQ; o++) {
            const int i = order[o];
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            int32_t c = (int32_t)((r >> 35) % 10);
            if (c > n - done[i]) c = n - done[i];
            start[i] = nb;
            len[i] = c;
            if (c == 0) continue;
            runs++;
            /* "Draft" tokens past the real ones, rolled back after the pass. */
            junk[i] = rollback ? (int32_t)((r >> 50) % 4) : 0;
            if (done[i] + c + junk[i] > CTX) junk[i] = 0;
            for (int32_t t = 0; t < c + junk[i]; t++) {
                tok[nb] = t < c ? tok_of(i, done[i] + t) : (int32_t)(3 + (r >> (t + 7)) % 50);
                seq[nb] = i;
                pos[nb] = done[i] + t;
                want[nb] = t < c;
                nb++;
            }
        }
        if (nb == 0) continue;
        n_batches++;
        n_mixed += runs > 1;
        sd_batch b = {nb, tok, pos, seq, want};
        cr_assert_eq(sd_session_decode(s, &b, logits, &err), SD_OK, "%s", err.msg);
        int32_t row = 0;
        for (int32_t t = 0; t < nb; t++) {
            if (!want[t]) continue;
            const float *exp = ref[seq[t]] + (size_t)pos[t] * NV;
            cr_assert(memcmp(logits + (size_t)row * NV, exp, NV * sizeof(float)) == 0,
                      "%s kv, %d threads: sequence %d position %d differs from it alone",
                      sd_type_name(kv), n_threads, seq[t], pos[t]);
            row++;
        }
        for (int i = 0; i < NSEQ; i++) {
            if (!len[i]) continue;
            done[i] += len[i];
            if (junk[i]) cr_assert_eq(sd_session_seq_truncate(s, i, done[i], &err), SD_OK);
            cr_assert_eq(sd_session_seq_n_past(s, i), done[i]);
            (void)start;
        }
        check_accounting(s);
    }
    cr_expect_gt(n_mixed, 5, "batches should mix sequences");
    for (int i = 0; i < NSEQ; i++) {
        const int32_t *t = sd_session_seq_tokens(s, i);
        for (int32_t p = 0; p < n; p++)
            cr_assert_eq(t[p], tok_of(i, p), "token mirror of sequence %d", i);
        cr_assert_eq(sd_session_seq_truncate(s, i, 0, &err), SD_OK);
        free(ref[i]);
    }
    check_accounting(s);
    sd_kv_pool_stats st;
    sd_session_kv_stats(s, &st);
    cr_expect_eq(st.n_free, st.n_blocks, "every block back");
    free(logits);
    sd_session_free(s);
    sd_model_free(m);
}

TestSuite(paged, .init = setup, .fini = teardown);

Test(paged, interleaved_f32_equals_alone) {
    interleave(SD_TYPE_F32, 1, 0, 1);
    interleave(SD_TYPE_F32, 2, 1, 2);
}
Test(paged, interleaved_f16_equals_alone) {
    interleave(SD_TYPE_F16, 2, 1, 3);
}
Test(paged, interleaved_q8_0_equals_alone) {
    interleave(SD_TYPE_Q8_0, 1, 1, 4);
    interleave(SD_TYPE_Q8_0, 2, 0, 5);
}
Test(paged, interleaved_q4_0_equals_alone) {
    interleave(SD_TYPE_Q4_0, 2, 1, 6);
}

/* Run sequence i's tokens [from, to) in one batch next to sequence `other`'s next token
 * (so the pass is shared), checking every position's logits against ref. */
static void run_span(sd_session *s, int i, int32_t from, int32_t to, int other, int32_t other_pos,
                     const float *ref) {
    int32_t tok[BATCH], seq[BATCH], pos[BATCH];
    int8_t want[BATCH];
    int32_t nb = 0;
    for (int32_t p = from; p < to; p++, nb++) {
        tok[nb] = tok_of(i, p);
        seq[nb] = i;
        pos[nb] = p;
        want[nb] = 1;
    }
    tok[nb] = tok_of(other, other_pos);
    seq[nb] = other;
    pos[nb] = other_pos;
    want[nb++] = 0;
    float *logits = malloc((size_t)BATCH * NV * sizeof(float));
    sd_batch b = {nb, tok, pos, seq, want};
    sd_error err = {0};
    cr_assert_eq(sd_session_decode(s, &b, logits, &err), SD_OK, "%s", err.msg);
    for (int32_t p = from; p < to; p++)
        cr_assert(
            memcmp(logits + (size_t)(p - from) * NV, ref + (size_t)p * NV, NV * sizeof(float)) == 0,
            "sequence %d position %d", i, p);
    free(logits);
}

Test(paged, cached_prefix_and_fork_equal_alone) {
    sd_model *m = load();
    const sd_type types[2] = {SD_TYPE_F16, SD_TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++) {
        const sd_type kv = types[ti];
        float *r0 = reference(m, kv, 0, 40), *r1 = reference(m, kv, 1, 40);
        float *r2 = reference(m, kv, 2, 40), *r3 = reference(m, kv, 3, 40);
        sd_session *s = session(m, kv, 4, 0, 2);
        /* Sequence 0 computes 30 positions and stores its full blocks (3 of 8) and the
         * partial leaf of its last 6 positions. */
        run_span(s, 0, 0, 30, 3, 0, r0);
        sd_session_seq_store_prefix(s, 0);
        sd_kv_pool_stats st;
        sd_session_kv_stats(s, &st);
        cr_expect_eq(st.n_cached, 4);
        /* Sequence 1 shares the first 20 tokens: two full blocks and 4 positions of the
         * third, to the token. */
        int32_t toks[40];
        for (int32_t p = 0; p < 40; p++)
            toks[p] = tok_of(1, p);
        cr_expect_eq(sd_session_seq_attach_prefix(s, 1, toks, 40), 20);
        cr_expect_eq(sd_session_seq_n_past(s, 1), 20);
        run_span(s, 1, 20, 40, 3, 1, r1);
        /* Sequence 2 forks from 0 at 18 (inside a block: copy-on-write on its first
         * write), and 0 goes on writing its own block 2 (also shared now). */
        sd_error err = {0};
        cr_assert_eq(sd_session_seq_fork(s, 2, 0, 18, &err), SD_OK, "%s", err.msg);
        cr_expect_eq(sd_session_seq_fork(s, 2, 0, 4, &err), SD_ERR_ARG, "not empty");
        run_span(s, 2, 18, 40, 3, 2, r2);
        run_span(s, 0, 30, 40, 3, 3, r0);
        sd_session_kv_stats(s, &st);
        cr_expect_geq(st.n_cow, 1);
        check_accounting(s);
        /* Sequence 3 has its own tokens from position 0: nothing to reuse. */
        for (int32_t p = 0; p < 40; p++)
            toks[p] = tok_of(3, p);
        cr_assert_eq(sd_session_seq_truncate(s, 3, 0, &err), SD_OK);
        cr_expect_eq(sd_session_seq_attach_prefix(s, 3, toks, 40), 0);
        run_span(s, 3, 0, 40, 0, 40, r3);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(sd_session_seq_truncate(s, i, 0, &err), SD_OK);
        check_accounting(s);
        sd_session_kv_stats(s, &st);
        cr_expect_eq(st.n_free + st.n_cached_idle, st.n_blocks);
        free(r0);
        free(r1);
        free(r2);
        free(r3);
        sd_session_free(s);
    }
    sd_model_free(m);
}

Test(paged, bad_batches_leave_the_session_unchanged) {
    sd_model *m = load();
    sd_session *s = session(m, SD_TYPE_F16, 3, 0, 1);
    int32_t tok[4] = {5, 6, 7, 8}, seq[4] = {0, 1, 0, 1}, pos[4] = {0, 0, 1, 1};
    float *logits = malloc(4 * NV * sizeof(float));
    sd_error err = {0};
    sd_batch b = {4, tok, pos, seq, NULL};
    cr_expect_eq(sd_session_decode(s, &b, logits, &err), SD_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "adjacent") != NULL, "%s", err.msg);
    int32_t seq2[4] = {0, 0, 3, 3};
    b.seq_id = seq2;
    b.pos = NULL;
    cr_expect_eq(sd_session_decode(s, &b, logits, &err), SD_ERR_ARG);
    cr_expect(strstr(err.msg, "sequence id 3") != NULL, "%s", err.msg);
    int32_t seq3[4] = {0, 0, 1, 1}, pos3[4] = {0, 1, 1, 2};
    b.seq_id = seq3;
    b.pos = pos3;
    cr_expect_eq(sd_session_decode(s, &b, logits, &err), SD_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "position 1, expected 0") != NULL, "%s", err.msg);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(sd_session_seq_n_past(s, i), 0);
    check_accounting(s);
    sd_session_free(s);
    /* A pool too small for the batch: the error names the sequence, nothing is kept. */
    s = session(m, SD_TYPE_F16, 2, 3, 1); /* 3 blocks of 8 */
    int32_t t20[20], s20[20];
    for (int i = 0; i < 20; i++) {
        t20[i] = 3 + i;
        s20[i] = i < 10 ? 0 : 1;
    }
    sd_batch b20 = {20, t20, NULL, s20, NULL};
    cr_expect_eq(sd_session_decode(s, &b20, logits, &err), SD_ERR_OOM);
    cr_expect(strstr(err.msg, "sequence 1") != NULL, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(s, 0), 0);
    check_accounting(s);
    sd_kv_pool_stats st;
    sd_session_kv_stats(s, &st);
    cr_expect_eq(st.n_free, 3);
    sd_batch b16 = {16, t20, NULL, s20 + 2, NULL}; /* 8 + 8: fits */
    cr_expect_eq(sd_session_decode(s, &b16, logits, &err), SD_OK, "%s", err.msg);
    check_accounting(s);
    free(logits);
    sd_session_free(s);
    sd_model_free(m);
}

/* The one-sequence calls name their sequence: sd_session_seq_eval / _seq_eval_argmax /
 * _seq_sync on sequence 2 of a pool give the logits (bit for bit) and the argmax a
 * contiguous cache gives for the same tokens, touch no other sequence, and refuse an id
 * the session does not hold (a contiguous cache holds sequence 0 only). */
Test(paged, one_sequence_calls_name_their_sequence) {
    sd_model *m = load();
    sd_session *c = session(m, SD_TYPE_F16, 0, 0, 1), *p = session(m, SD_TYPE_F16, 3, 0, 1);
    int32_t tok[12];
    for (int i = 0; i < 12; i++)
        tok[i] = tok_of(1, i);
    float *lc = malloc(2 * NV * sizeof(float)), *lp = malloc(2 * NV * sizeof(float));
    cr_assert(lc && lp);
    sd_error err = {0};
    cr_assert_eq(sd_session_seq_eval(c, 0, tok, 10, lc, 2, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_eval(p, 2, tok, 10, lp, 2, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(memcmp(lc, lp, 2 * NV * sizeof(float)), 0, "sequence 2 != the contiguous cache");
    cr_expect_eq(sd_session_seq_n_past(p, 2), 10);
    cr_expect_eq(sd_session_seq_n_past(p, 0), 0);
    cr_expect_eq(sd_session_seq_n_past(p, 1), 0);
    cr_expect_eq(memcmp(sd_session_seq_tokens(p, 2), tok, 10 * sizeof(int32_t)), 0);
    /* the greedy step: the argmax of the row the contiguous cache returns */
    int32_t best_c = -1, best_p = -1;
    cr_assert_eq(sd_session_seq_eval(c, 0, &tok[10], 1, lc, 1, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_seq_eval_argmax(p, 2, &tok[10], 1, NV, lp, &best_p, &err), SD_OK, "%s",
                 err.msg);
    best_c = 0;
    for (int32_t j = 1; j < NV; j++)
        if (lc[j] > lc[best_c]) best_c = j;
    cr_expect_eq(best_p, best_c);
    /* sync: keeps the common prefix of sequence 2, evaluates the rest */
    cr_assert_eq(sd_session_seq_sync(p, 2, tok, 12, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(p, 2), 12);
    cr_expect_eq(sd_session_seq_n_past(p, 1), 0);
    /* ids the sessions do not hold */
    cr_expect_eq(sd_session_seq_eval(p, 3, tok, 1, NULL, 0, &err), SD_ERR_ARG);
    cr_expect(strstr(err.msg, "sequence 3") != NULL, "%s", err.msg);
    cr_expect_eq(sd_session_seq_eval(c, 1, tok, 1, NULL, 0, &err), SD_ERR_ARG);
    cr_expect_eq(sd_session_seq_eval_argmax(c, -1, tok, 1, NV, lc, &best_c, &err), SD_ERR_ARG);
    cr_expect_eq(sd_session_seq_sync(c, 1, tok, 1, &err), SD_ERR_ARG);
    const int32_t one[1] = {1};
    sd_batch b1 = sd_batch_of(tok, 1);
    b1.seq_id = one;
    cr_expect_eq(sd_session_decode(c, &b1, lc, &err), SD_ERR_ARG, "a batch of sequence 1");
    cr_expect(strstr(err.msg, "sequence id 1") != NULL, "%s", err.msg);
    cr_expect_eq(sd_session_seq_n_past(c, 0), 11, "a refused call changed the cache");
    check_accounting(p);
    free(lc);
    free(lp);
    sd_session_free(p);
    sd_session_free(c);
    sd_model_free(m);
}

Test(paged, memory_per_token) {
    sd_model *m = load();
    const sd_hparams *hp = sd_model_hparams(m);
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    sd_session *f16 = session(m, SD_TYPE_F16, 2, 0, 1);
    sd_session *q8 = session(m, SD_TYPE_Q8_0, 2, 0, 1);
    sd_session *q4 = session(m, SD_TYPE_Q4_0, 2, 0, 1);
    /* 2 x layers x KV heads x head dim x bytes per element. */
    cr_expect_eq(sd_session_kv_bytes_per_token(f16), 2 * hp->n_layer * kv_dim * 2);
    cr_expect_eq(sd_session_kv_bytes_per_token(q8), 2 * hp->n_layer * kv_dim / 32 * 34);
    cr_expect_eq(sd_session_kv_bytes_per_token(q4), 2 * hp->n_layer * kv_dim / 32 * 18);
    sd_session_free(f16);
    sd_session_free(q8);
    sd_session_free(q4);
    sd_model_free(m);
}

/* Quantized KV moves the logits a little: Q8_0 within a small relative distance of
 * F16, Q4_0 within a larger one (the stated perplexity change is measured on TinyStories
 * by scripts, docs/serving.md). */
Test(paged, quantized_kv_logits_close_to_f16) {
    sd_model *m = load();
    float *f16 = reference(m, SD_TYPE_F16, 4, 60), *q8 = reference(m, SD_TYPE_Q8_0, 4, 60);
    float *q4 = reference(m, SD_TYPE_Q4_0, 4, 60);
    double d8 = 0, d4 = 0, mx = 0;
    for (size_t i = 0; i < (size_t)60 * NV; i++) {
        mx = fmax(mx, fabs(f16[i]));
        d8 = fmax(d8, fabs((double)q8[i] - f16[i]));
        d4 = fmax(d4, fabs((double)q4[i] - f16[i]));
    }
    cr_expect_gt(d8, 0.0, "Q8_0 rows are rounded: the logits move");
    cr_expect_lt(d8 / mx, 0.05, "Q8_0: max |dlogit| / max |logit| = %g", d8 / mx);
    cr_expect_lt(d4 / mx, 0.5, "Q4_0: max |dlogit| / max |logit| = %g", d4 / mx);
    cr_expect_lt(d8, d4, "Q8_0 closer than Q4_0");
    free(f16);
    free(q8);
    free(q4);
    sd_model_free(m);
}

/* The CPU backend's attention over a paged cache of each element type against float64
 * over the rows the cache holds (dequantized by the reference dequantizer), and bit for
 * bit equal to the same rows in a contiguous cache. */
Test(paged, attention_over_blocks_against_float64) {
    enum { HD = 64, NH = 4, NHKV = 2, KVD = NHKV * HD, QD = NH * HD, NP = 37 };
    const sd_type types[4] = {SD_TYPE_F32, SD_TYPE_F16, SD_TYPE_Q8_0, SD_TYPE_Q4_0};
    sd_backend_params bp = {2, 8, 256, 64, 0, NULL, 0};
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
    float *k = malloc(NP * KVD * 4), *v = malloc(NP * KVD * 4), *q = malloc(QD * 4);
    float *kh = malloc(NP * KVD * 4), *vh = malloc(NP * KVD * 4);
    float *o = malloc(QD * 4), *oc = malloc(QD * 4);
    uint64_t r = 7;
    for (int i = 0; i < NP * KVD; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        k[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 4.0 - 2.0);
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < QD; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        q[i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
    }
    for (int ti = 0; ti < 4; ti++) {
        const sd_type t = types[ti];
        sd_kv_pool_params pp = {
            .n_layer = 1, .kv_dim = KVD, .block_size = 8, .n_blocks = 16, .type = t};
        sd_kv_pool *pool = NULL;
        cr_assert_eq(sd_kv_pool_init(&pp, &pool, &err), SD_OK, "%s", err.msg);
        sd_kv *filler = NULL, *kv = NULL, *cont = NULL;
        cr_assert_eq(sd_kv_seq_init(pool, 64, &filler, &err), SD_OK);
        cr_assert_eq(sd_kv_seq_init(pool, 64, &kv, &err), SD_OK);
        sd_kv_params cp = {1, 64, KVD, t, NULL};
        cr_assert_eq(sd_kv_init(&cp, &cont, &err), SD_OK);
        /* Interleave another sequence's blocks so kv's blocks are not adjacent. */
        for (int32_t p0 = 0; p0 < NP; p0 += 5) {
            const int32_t c = NP - p0 < 5 ? NP - p0 : 5;
            cr_assert_eq(sd_kv_reserve(filler, 8, &err), SD_OK); /* a block each round */
            sd_kv_commit(filler, 8);
            cr_assert_eq(sd_kv_reserve(kv, c, &err), SD_OK, "%s", err.msg);
            be->ops->kv_store(be, kv, 0, p0, c, KVD, k + p0 * KVD, v + p0 * KVD);
            sd_kv_commit(kv, c);
            be->ops->kv_store(be, cont, 0, p0, c, KVD, k + p0 * KVD, v + p0 * KVD);
        }
        cr_expect_neq((uint8_t *)sd_kv_k(kv, 0, 8),
                      (uint8_t *)sd_kv_k(kv, 0, 7) + sd_kv_row_bytes(kv), "blocks not adjacent");
        for (int32_t p = 0; p < NP; p++) {
            cr_assert_eq(sd_dequantize_row(t, sd_kv_k(kv, 0, p), kh + p * KVD, KVD), 0);
            cr_assert_eq(sd_dequantize_row(t, sd_kv_v(kv, 0, p), vh + p * KVD, KVD), 0);
        }
        be->ops->attention(be, q, kv, 0, NP - 1, 1, NH, NHKV, HD, o);
        be->ops->attention(be, q, cont, 0, NP - 1, 1, NH, NHKV, HD, oc);
        cr_expect(memcmp(o, oc, QD * 4) == 0, "%s: paged != contiguous", sd_type_name(t));
        double worst = 0;
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NHKV);
            double sc[NP], mx = -1e300, sum = 0;
            for (int j = 0; j < NP; j++) {
                double d = 0;
                for (int e = 0; e < HD; e++)
                    d += (double)q[h * HD + e] * kh[j * KVD + g * HD + e];
                sc[j] = d / sqrt((double)HD);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < NP; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < HD; e++) {
                double a = 0;
                for (int j = 0; j < NP; j++)
                    a += sc[j] / sum * vh[j * KVD + g * HD + e];
                worst = fmax(worst, fabs(a - o[h * HD + e]));
            }
        }
        cr_expect_lt(worst, 1e-5, "%s: |attention - float64| = %g", sd_type_name(t), worst);
        sd_kv_free(filler);
        sd_kv_free(kv);
        sd_kv_free(cont);
        sd_kv_pool_free(pool);
    }
    free(k);
    free(v);
    free(q);
    free(kh);
    free(vh);
    free(o);
    free(oc);
    sd_backend_free(be);
}
