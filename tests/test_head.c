/*
 * The trimmed draft head (FR-Spec): the model's output rows over a subset of the
 * vocabulary, the head file, and the LLM proposer with a head.
 *   - sd_session_set_output_rows: every entry of a trimmed logits row equals the full
 *     row's entry of its id bit for bit (F32 and Q8_0 heads, decode and batched passes);
 *     bad ids (range, repeats) are refused and leave the full head;
 *   - sd_draft_head_load: a file written here loads; each of a table of hand-made corrupt
 *     files (magic, version, vocabulary, size, checksum, an id out of range, a repeated
 *     id) is refused with the file named;
 *   - the proposer: greedy proposals are the argmax over the head (computed here from the
 *     full row), never an id outside it; in rejection sampling q is zero outside the head
 *     and sums to 1, and the first emitted token with a trimmed draft follows the target's
 *     p (chi-square, false-alarm rate 1e-4); a negative control (a q row claiming the
 *     full-vocabulary draft distribution while the tokens are drawn from the head) is
 *     rejected by the same test;
 *   - greedy speculative output with a trimmed draft equals target-alone output.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"
#include "pair_fixture.h"
#include "verify/sd_verify.h"

TestSuite(head, .init = pair_setup, .fini = pair_teardown, .timeout = 600);

/* Every other id from 3, and a few high ones: 40 distinct ids of the 96. */
static int32_t make_ids(int32_t *ids) {
    int32_t n = 0;
    for (int32_t v = 3; v < 80; v += 2)
        ids[n++] = v;
    ids[n++] = 95;
    return n;
}

static void check_rows(const char *path) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sd_session *full = NULL, *trim = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &full, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_init(m, &sp, &trim, &err), SD_OK, "%s", err.msg);
    int32_t ids[64];
    const int32_t n = make_ids(ids);
    cr_assert_eq(sd_session_set_output_rows(trim, ids, n, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_n_logits(trim), n);
    cr_assert_eq(sd_session_n_logits(full), nv);
    const int32_t toks[6] = {1, 7, 30, 44, 2, 90};
    float lf[6 * 96], lt[6 * 96];
    /* a batched pass of 4 rows, then 2 single decodes */
    cr_assert_eq(sd_session_eval(full, toks, 4, lf, 4, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_session_eval(trim, toks, 4, lt, 4, &err), SD_OK, "%s", err.msg);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(sd_session_eval(full, toks + 4 + r, 1, lf + (4 + r) * nv, 1, &err), SD_OK);
        cr_assert_eq(sd_session_eval(trim, toks + 4 + r, 1, lt + (4 + r) * n, 1, &err), SD_OK);
    }
    for (int r = 0; r < 6; r++)
        for (int32_t j = 0; j < n; j++)
            cr_assert(!memcmp(&lt[r * n + j], &lf[r * nv + ids[j]], sizeof(float)),
                      "%s: row %d, id %d: %g trimmed vs %g full", path, r, ids[j],
                      (double)lt[r * n + j], (double)lf[r * nv + ids[j]]);
    /* Bad ids: refused, and the session keeps its full head. */
    int32_t dup[3] = {4, 9, 4}, out_of[2] = {4, 96};
    cr_assert_eq(sd_session_set_output_rows(trim, dup, 3, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "repeated"), "%s", err.msg);
    cr_assert_eq(sd_session_n_logits(trim), nv);
    cr_assert_eq(sd_session_set_output_rows(trim, out_of, 2, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "outside"), "%s", err.msg);
    cr_assert_eq(sd_session_set_output_rows(trim, NULL, 0, &err), SD_OK);
    sd_session_free(full);
    sd_session_free(trim);
    sd_model_free(m);
}

Test(head, trimmed_rows_equal_the_full_rows_bit_for_bit) {
    check_rows(g_t); /* F32 head */
    check_rows(g_d); /* Q8_0 head */
}

/* ---- the head file ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* The fingerprint computed here from the token texts (independent of head.c). */
static uint64_t fingerprint(const sd_vocab *v) {
    const int32_t n = sd_vocab_n_tokens(v);
    const unsigned char sz[4] = {(unsigned char)n, (unsigned char)(n >> 8),
                                 (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
    uint64_t h = fnv(UINT64_C(0xcbf29ce484222325), sz, 4);
    for (int32_t i = 0; i < n; i++) {
        const char *t = sd_vocab_token_text(v, i);
        h = fnv(h, t, strlen(t) + 1);
    }
    return h;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A head file of ids[0 .. n) for (n_vocab, fp), with fields to spoil. */
static size_t make_file(unsigned char *b, const int32_t *ids, int32_t n, uint32_t n_vocab,
                        uint64_t fp, uint32_t version, int fix_sum) {
    memcpy(b, "SDHEAD\0\0", 8);
    put32(b + 8, version);
    put32(b + 12, n_vocab);
    put64(b + 16, fp);
    put32(b + 24, (uint32_t)n);
    put32(b + 28, 0);
    for (int32_t j = 0; j < n; j++)
        put32(b + 32 + 4 * j, (uint32_t)ids[j]);
    const size_t len = 32 + 4 * (size_t)n;
    put64(b + len, fix_sum ? fnv(UINT64_C(0xcbf29ce484222325), b, len) : 0);
    return len + 8;
}

Test(head, file_loads_and_corrupt_files_are_refused) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(g_t, &m, &err), SD_OK, "%s", err.msg);
    const sd_vocab *v = sd_model_vocab(m);
    const uint64_t fp = fingerprint(v);
    cr_assert_eq(sd_draft_vocab_fingerprint(v), fp, "the fingerprint differs from the format's");
    int32_t ids[64];
    const int32_t n = make_ids(ids);
    unsigned char b[512];
    char path[1200];
    tu_path(path, sizeof path, g_dir, "h.head");
    size_t len = make_file(b, ids, n, 96, fp, 1, 1);
    cr_assert_eq(tu_write_file(path, b, len), 0);
    int32_t *got = NULL, n_got = 0;
    cr_assert_eq(sd_draft_head_load(path, v, 0, &got, &n_got, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(n_got, n);
    cr_assert(!memcmp(got, ids, (size_t)n * sizeof *ids));
    free(got);
    cr_assert_eq(sd_draft_head_load(path, v, 10, &got, &n_got, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(n_got, 10);
    free(got);
    cr_assert_eq(sd_draft_head_load(path, v, n + 1, &got, &n_got, &err), SD_ERR_ARG);
    cr_assert_null(got);
    /* Corrupt files. */
    struct {
        const char *what, *msg;
        int status;
    } cases[] = {
        {"magic", "magic", SD_ERR_FORMAT},
        {"version", "version", SD_ERR_UNSUPPORTED},
        {"vocab", "another vocabulary", SD_ERR_MISMATCH},
        {"fingerprint", "another vocabulary", SD_ERR_MISMATCH},
        {"truncated", "expected", SD_ERR_FORMAT},
        {"checksum", "checksum", SD_ERR_FORMAT},
        {"range", "outside the vocabulary", SD_ERR_FORMAT},
        {"repeat", "repeated", SD_ERR_FORMAT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t bad_ids[64];
        memcpy(bad_ids, ids, sizeof ids);
        if (!strcmp(cases[c].what, "range")) bad_ids[5] = 96;
        if (!strcmp(cases[c].what, "repeat")) bad_ids[5] = bad_ids[2];
        len = make_file(b, bad_ids, n, !strcmp(cases[c].what, "vocab") ? 97 : 96,
                        !strcmp(cases[c].what, "fingerprint") ? fp ^ 1 : fp,
                        !strcmp(cases[c].what, "version") ? 2 : 1,
                        strcmp(cases[c].what, "checksum") != 0);
        if (!strcmp(cases[c].what, "magic")) b[0] = 'X';
        if (!strcmp(cases[c].what, "truncated")) len -= 5;
        cr_assert_eq(tu_write_file(path, b, len), 0);
        sd_error e2 = {0};
        got = NULL;
        const int rc = sd_draft_head_load(path, v, 0, &got, &n_got, &e2);
        cr_assert_eq(rc, cases[c].status, "%s: status %d (%s)", cases[c].what, rc, e2.msg);
        cr_assert(strstr(e2.msg, path) && strstr(e2.msg, cases[c].msg), "%s: '%s'", cases[c].what,
                  e2.msg);
        cr_assert_null(got);
    }
    cr_assert_eq(sd_draft_head_load("/no/such/file.head", v, 0, &got, &n_got, &err), SD_ERR_IO);
    sd_model_free(m);
}

/* ---- the proposer ---- */

Test(head, greedy_proposals_are_the_argmax_over_the_head) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(g_d, &m, &err), SD_OK, "%s", err.msg);
    int32_t ids[64];
    const int32_t n = make_ids(ids);
    sd_sampling_params samp = {.temp = 0.0f, .top_k = 0, .top_p = 1.0f};
    sd_session_params sp = sd_session_default_params();
    sd_proposer *p = NULL;
    cr_assert_eq(sd_proposer_llm_init(m, &sp, &samp, 1, 0, &p, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_proposer_llm_set_head(p, ids, n, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_proposer_llm_head_size(p), n);
    sd_session *ref = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &ref, &err), SD_OK, "%s", err.msg);
    const int32_t ctx[4] = {1, 20, 21, 22};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(p, ctx, 4, 6, &prop, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(prop.n, 6);
    cr_assert(prop.one_hot);
    float logits[96];
    cr_assert_eq(sd_session_eval(ref, ctx, 4, logits, 1, &err), SD_OK);
    for (int32_t i = 0; i < prop.n; i++) {
        int32_t best = ids[0];
        for (int32_t j = 1; j < n; j++)
            if (logits[ids[j]] > logits[best] || (logits[ids[j]] == logits[best] && ids[j] < best))
                best = ids[j];
        /* the head is in id order here, so "lowest entry" ties are "lowest id" ties */
        cr_assert_eq(prop.tokens[i], best, "token %d: %d, the head's argmax is %d", i,
                     prop.tokens[i], best);
        cr_assert_eq(sd_session_eval(ref, &prop.tokens[i], 1, logits, 1, &err), SD_OK);
    }
    /* Ids the draft does not share with the target, a repeat: refused, full head kept. */
    int32_t bad[2] = {3, 3};
    cr_assert_eq(sd_proposer_llm_set_head(p, bad, 2, &err), SD_ERR_ARG);
    cr_assert_eq(sd_proposer_llm_head_size(p), 0);
    sd_session_free(ref);
    sd_proposer_free(p);
    sd_model_free(m);
}

static double chi2_crit_1e4(int df) {
    const double z = 3.719016, a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* The first emitted token with a trimmed draft (rejection sampling, K = 3) over many
 * seeds, against the target's warped p computed from a plain decode step. */
Test(head, rejection_sampling_with_a_trimmed_draft_is_exact) {
    sd_error err = {0};
    sd_model *tm = NULL, *dm = NULL;
    cr_assert_eq(sd_model_load(g_t, &tm, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_model_load(g_d, &dm, &err), SD_OK, "%s", err.msg);
    const sd_sampling_params samp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f};
    const int32_t prompt[4] = {1, 7, 8, 9};
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = 1;
    /* The engine whose draft has the trimmed head (a head file of the make_ids set): the
     * runs go through its one path (sd_engine_generate), EOS ignored. */
    int32_t ids[64];
    const int32_t n = make_ids(ids);
    unsigned char hb[512];
    char hpath[1200];
    tu_path(hpath, sizeof hpath, g_dir, "h.head");
    const size_t hlen =
        make_file(hb, ids, n, 96, sd_draft_vocab_fingerprint(sd_model_vocab(tm)), 1, 1);
    cr_assert_eq(tu_write_file(hpath, hb, hlen), 0);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = g_d;
    ep.n_threads = 1;
    ep.draft_head = hpath;
    sd_engine *e = NULL;
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    /* p: the warp of the target's logits after the prompt (EOS masked, as the runs), on a
     * session made as the engine's. */
    sd_session_params esp = sd_engine_session_params(e, 0);
    esp.share_threads = NULL;
    sd_session *s = NULL;
    cr_assert_eq(sd_session_init(tm, &esp, &s, &err), SD_OK);
    float logits[96], p[96], q_full[96];
    int32_t scratch[96];
    cr_assert_eq(sd_session_eval(s, prompt, 4, logits, 1, &err), SD_OK);
    logits[sd_vocab_eos(sd_model_vocab(tm))] = -INFINITY;
    cr_assert_eq(sd_warp(&samp, logits, 96, p, scratch, &err), SD_OK);
    sd_session_free(s);
    /* The negative control's proposer: the same head, drawn as the engine's draft does. */
    sd_proposer *pr = NULL;
    cr_assert_eq(sd_proposer_llm_init(dm, &sp, &samp, 0, 96, &pr, &err), SD_OK);
    cr_assert_eq(sd_proposer_llm_set_head(pr, ids, n, &err), SD_OK, "%s", err.msg);
    /* The draft's full-vocabulary q after the prompt, for the negative control. */
    cr_assert_eq(sd_session_init(dm, &sp, &s, &err), SD_OK);
    cr_assert_eq(sd_session_eval(s, prompt, 4, logits, 1, &err), SD_OK);
    cr_assert_eq(sd_warp(&samp, logits, 96, q_full, scratch, &err), SD_OK);
    sd_session_free(s);
    const int trials = 12000;
    int64_t counts[96] = {0}, bad[96] = {0}, drafted = 0, accepted = 0;
    for (int t = 0; t < trials; t++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 4;
        gp.n_draft = 3;
        gp.samp = samp;
        gp.seed = 7919u * (uint64_t)t + 1;
        gp.draft_type = SD_DRAFT_LLM;
        gp.k_policy = SD_K_FIXED;
        gp.ignore_eos = 1;
        int32_t out[4];
        sd_gen_stats st;
        cr_assert_eq(sd_engine_generate(e, &gp, prompt, 4, NULL, NULL, out, 4, &st, &err), SD_OK,
                     "%s", err.msg);
        counts[out[0]]++;
        drafted += st.n_drafted;
        accepted += st.n_accepted;
        /* Negative control: draw x from the head (as the draft does) but verify against the
         * full-vocabulary q, as if the head did not exist. */
        sd_proposal prop;
        const int32_t ctx[4] = {1, 7, 8, 9};
        sd_proposer_reset(pr, &samp, gp.seed);
        cr_assert_eq(sd_proposer_propose(pr, ctx, 4, 1, &prop, &err), SD_OK);
        const int32_t x = prop.tokens[0];
        const double u = sd_key_uniform(gp.seed, 4, SD_DRAW_ACCEPT, 0);
        int32_t y = x;
        if (!(u < (double)p[x] / (double)q_full[x])) {
            float res[96];
            for (int v = 0; v < 96; v++)
                res[v] = p[v] > q_full[v] ? p[v] - q_full[v] : 0.0f;
            y = sd_sample(res, 96, sd_key_uniform(gp.seed, 4, SD_DRAW_TOKEN, 0));
        }
        bad[y]++;
        sd_proposer_commit(pr, ctx, 4);
    }
    int in_head[96] = {0};
    for (int32_t j = 0; j < n; j++)
        in_head[ids[j]] = 1;
    double stat[2] = {0, 0};
    int cells = 0;
    for (int k = 0; k < 2; k++) {
        const int64_t *c = k ? bad : counts;
        double pool_e = 0, pool_o = 0;
        cells = 0;
        for (int v = 0; v < 96; v++) {
            if (p[v] == 0.0f) {
                cr_assert(k || c[v] == 0, "token %d has p = 0", v);
                continue;
            }
            const double e = p[v] * trials;
            if (e < 5.0) {
                pool_e += e;
                pool_o += (double)c[v];
                continue;
            }
            stat[k] += (c[v] - e) * (c[v] - e) / e;
            cells++;
        }
        if (pool_e > 0) {
            stat[k] += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
            cells++;
        }
    }
    const double crit = chi2_crit_1e4(cells - 1);
    cr_log_info("trimmed head: chi-square %.1f, negative control %.1f, critical %.1f (df %d), "
                "acceptance %.3f",
                stat[0], stat[1], crit, cells - 1, drafted ? (double)accepted / drafted : 0.0);
    cr_assert_lt(stat[0], crit, "the first token does not follow p with a trimmed draft");
    cr_assert_gt(stat[1], crit, "the negative control passed: the test has no power");
    cr_assert_gt(drafted, 0);
    (void)in_head;
    sd_proposer_free(pr);
    sd_engine_free(e);
    sd_model_free(dm);
    sd_model_free(tm);
}

Test(head, greedy_speculative_with_a_trimmed_draft_equals_target_alone) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = g_d;
    ep.n_threads = 1;
    sd_engine *full = NULL, *trim = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &full, &err), SD_OK, "%s", err.msg);
    /* A head file with ids in frequency-like order: the make_ids set. */
    int32_t ids[64];
    const int32_t n = make_ids(ids);
    unsigned char b[512];
    char path[1200];
    tu_path(path, sizeof path, g_dir, "h.head");
    const size_t len =
        make_file(b, ids, n, 96, sd_draft_vocab_fingerprint(sd_engine_vocab(full)), 1, 1);
    cr_assert_eq(tu_write_file(path, b, len), 0);
    ep.draft_head = path;
    ep.draft_head_n = 24;
    cr_assert_eq(sd_engine_init(&ep, &trim, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_proposer_llm_head_size(sd_engine_proposer(trim)), 24);
    const int32_t prompts[3][4] = {{1, 5, 9, 13}, {1, 40, 41, 42}, {1, 90, 3, 77}};
    for (int pi = 0; pi < 3; pi++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = 40;
        gp.samp.temp = 0.0f;
        gp.draft_type = SD_DRAFT_NONE;
        int32_t ref[40], got[40];
        sd_gen_stats st, st2;
        cr_assert_eq(sd_engine_generate(full, &gp, prompts[pi], 4, NULL, NULL, ref, 40, &st, &err),
                     SD_OK, "%s", err.msg);
        for (int32_t k = 1; k <= 6; k += 2) {
            gp.draft_type = SD_DRAFT_LLM;
            gp.n_draft = k;
            cr_assert_eq(
                sd_engine_generate(trim, &gp, prompts[pi], 4, NULL, NULL, got, 40, &st2, &err),
                SD_OK, "%s", err.msg);
            cr_assert_eq(st2.n_generated, st.n_generated);
            cr_assert(!memcmp(got, ref, (size_t)st.n_generated * sizeof *got),
                      "prompt %d K %d: a trimmed draft changed the greedy output", pi, k);
            cr_assert_gt(st2.n_drafted, 0);
        }
    }
    sd_engine_free(trim);
    sd_engine_free(full);
}
