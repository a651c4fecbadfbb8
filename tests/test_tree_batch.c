/*
 * tests/test_tree_batch.c: token trees in the batcher's one target pass
 * (sd_session_decode_trees): a pass holding one sequence's chain rows and another's token
 * tree gives every row the bits it gets in a pass of its own (the chain through
 * sd_session_decode, the tree through sd_session_seq_decode_tree), F32 and F16 caches, and
 * leaves the same K/V (after keeping one path of the tree, the next pass of each sequence
 * is bit-identical too); a bad parent is refused with the session unchanged. Then the
 * batcher: a tree request and a chain request run together give each the ids and counts
 * (drafted, accepted, passes) they get alone, and their passes are shared (the batcher's
 * target passes fewer than the two requests' together, where a tree pass of its own would
 * make them equal).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "engine_util.h"
#include "runtime/model/sd_model.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(tree_batch, .init = setup, .fini = teardown, .timeout = 600);

enum { L1 = 20, L2 = 13, NC = 5, NT = 7 };

static const int32_t k_tpar[NT] = {-1, 0, 0, 1, 2, 2, 4}; /* node 0: the root */

static sd_session *paged(const sd_model *m, sd_type kv) {
    sd_session_params p = sd_session_default_params();
    p.n_ctx = 128;
    p.n_batch = 64;
    p.n_threads = 1;
    p.kv_type = kv;
    p.n_seq = 3;
    p.kv_block = 8;
    sd_session *s = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_session_init(m, &p, &s, &err), SD_OK, "%s", err.msg);
    return s;
}

/* n tokens of seq with every row's logits into out (or the last one's when out is NULL:
 * into a scratch row). */
static void run(sd_session *s, int32_t seq, const int32_t *t, int32_t n, float *out, int32_t nv) {
    int32_t sq[64];
    int8_t want[64];
    for (int32_t i = 0; i < n; i++) {
        sq[i] = seq;
        want[i] = out != NULL || i == n - 1;
    }
    float *row = out ? NULL : malloc((size_t)nv * sizeof *row);
    sd_batch b = sd_batch_of(t, n);
    b.seq_id = sq;
    b.logits = want;
    sd_error err = {0};
    cr_assert_eq(sd_session_decode(s, &b, out ? out : row, &err), SD_OK, "%s", err.msg);
    free(row);
}

static void mixed_equals_apart(const sd_model *m, sd_type kv) {
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    int32_t p1[L1], p2[L2], ct[NC], tt[NT];
    for (int32_t i = 0; i < L1; i++)
        p1[i] = 1 + (i * 7 + 3) % (nv - 1);
    for (int32_t i = 0; i < L2; i++)
        p2[i] = 1 + (i * 11 + 5) % (nv - 1);
    for (int32_t i = 0; i < NC; i++)
        ct[i] = 1 + (i * 5 + 2) % (nv - 1);
    for (int32_t i = 0; i < NT; i++)
        tt[i] = 1 + (i * 13 + 1) % (nv - 1);
    const size_t row = (size_t)nv * sizeof(float);
    float *la = malloc(NC * row), *lt = malloc(NT * row), *lb = malloc((NC + NT) * row);
    float *na = malloc(row), *nb = malloc(row);
    cr_assert(la && lt && lb && na && nb);
    sd_error err = {0};
    sd_session *a = paged(m, kv), *b = paged(m, kv);
    for (int k = 0; k < 2; k++) {
        sd_session *s = k ? b : a;
        run(s, 1, p1, L1, NULL, nv);
        run(s, 2, p2, L2, NULL, nv);
    }
    /* apart: the chain pass, then the tree pass of its own */
    run(a, 1, ct, NC, la, nv);
    cr_assert_eq(sd_session_seq_decode_tree(a, 2, tt, k_tpar, NT, lt, &err), SD_OK, "%s", err.msg);
    /* together: one pass */
    int32_t tok[NC + NT], seq[NC + NT], par[NC + NT];
    int8_t want[NC + NT];
    for (int32_t i = 0; i < NC; i++) {
        tok[i] = ct[i];
        seq[i] = 1;
        par[i] = i - 1;
    }
    for (int32_t i = 0; i < NT; i++) {
        tok[NC + i] = tt[i];
        seq[NC + i] = 2;
        par[NC + i] = k_tpar[i];
    }
    memset(want, 1, sizeof want);
    sd_batch bt = sd_batch_of(tok, NC + NT);
    bt.seq_id = seq;
    bt.logits = want;
    /* a parent after its node (index 2 of the tree's run naming 2): refused, unchanged */
    par[NC + 2] = 2;
    cr_assert_eq(sd_session_decode_trees(b, &bt, par, lb, &err), SD_ERR_ARG);
    cr_assert_eq(sd_session_seq_n_past(b, 1), L1);
    cr_assert_eq(sd_session_seq_n_past(b, 2), L2);
    par[NC + 2] = k_tpar[2];
    cr_assert_eq(sd_session_decode_trees(b, &bt, par, lb, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(memcmp(lb, la, NC * row), 0, "%s: the chain rows differ", sd_type_name(kv));
    cr_expect_eq(memcmp(lb + (size_t)NC * nv, lt, NT * row), 0, "%s: the tree rows differ",
                 sd_type_name(kv));
    /* keep the path 0 -> 2 -> 5 in both, then one more token each: the same bits */
    static const int32_t path[3] = {0, 2, 5};
    for (int k = 0; k < 2; k++) {
        sd_session *s = k ? b : a;
        cr_assert_eq(sd_session_seq_tree_keep(s, 2, L2, path, 3, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_kv_check(s, &err), SD_OK, "%s", err.msg);
    }
    for (int32_t seqn = 1; seqn <= 2; seqn++) {
        const int32_t t = 3 + seqn;
        run(a, seqn, &t, 1, na, nv);
        run(b, seqn, &t, 1, nb, nv);
        cr_expect_eq(memcmp(na, nb, row), 0, "%s: sequence %d continues differently",
                     sd_type_name(kv), seqn);
    }
    sd_session_free(a);
    sd_session_free(b);
    free(la);
    free(lt);
    free(lb);
    free(na);
    free(nb);
}

Test(tree_batch, one_pass_of_chains_and_trees_equals_passes_apart) {
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_layer = 2;
    char path[1200];
    tu_path(path, sizeof path, g_dir, "m.gguf");
    cr_assert_eq(tu_make_llama(path, &sp), 0);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    mixed_equals_apart(m, SD_TYPE_F32);
    mixed_equals_apart(m, SD_TYPE_F16);
    sd_model_free(m);
}

/* One request (or both at once) through a fresh batcher of two slots on e. */
static void through(sd_engine *e, const int32_t *const *prompts, const int32_t *n_prompts,
                    const sd_gen_params *gps, const int *which, int n, eu_out *outs,
                    sd_batcher_stats *bst) {
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.k_max = 8;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    for (int i = 0; i < n; i++)
        eu_submit(b, prompts[which[i]], n_prompts[which[i]], &gps[which[i]], eu_collect,
                  &outs[which[i]]);
    eu_drain(b, 1);
    sd_batcher_get_stats(b, bst);
    sd_batcher_free(b);
}

Test(tree_batch, a_tree_and_a_chain_request_share_their_passes) {
    sd_engine *e = eu_tiny_engine(1);
    int32_t *pa = NULL, *pb = NULL;
    const int32_t na = eu_prompt(e, "Lily and Tom went to the park. They", &pa);
    const int32_t nb = eu_prompt(e, "Once upon a time, there was a little dog", &pb);
    const int32_t *prompts[2] = {pa, pb};
    const int32_t n_prompts[2] = {na, nb};
    sd_gen_params gps[2];
    for (int i = 0; i < 2; i++) {
        gps[i] = sd_gen_default_params();
        gps[i].n_predict = 48;
        gps[i].ignore_eos = 1;
        gps[i].samp.temp = 0.0f;
        gps[i].k_policy = SD_K_FIXED;
        gps[i].draft_type = SD_DRAFT_NGRAM;
        gps[i].n_draft = 4;
    }
    gps[0].tree_width = 2; /* request 0: token trees; request 1: chains */
    gps[0].n_draft = 3;
    eu_out alone[2], both[2];
    memset(alone, 0, sizeof alone);
    memset(both, 0, sizeof both);
    sd_batcher_stats st_alone[2], st_both;
    for (int i = 0; i < 2; i++)
        through(e, prompts, n_prompts, gps, (const int[]){i}, 1, alone, &st_alone[i]);
    through(e, prompts, n_prompts, gps, (const int[]){0, 1}, 2, both, &st_both);
    int32_t passes = 0;
    for (int i = 0; i < 2; i++) {
        cr_assert(alone[i].done && both[i].done);
        cr_assert_eq(both[i].n, alone[i].n, "request %d: %d tokens, alone %d", i, both[i].n,
                     alone[i].n);
        cr_assert_eq(memcmp(both[i].toks, alone[i].toks, (size_t)both[i].n * sizeof(int32_t)), 0,
                     "request %d: the ids differ from its run alone", i);
        cr_expect_eq(both[i].st.n_drafted, alone[i].st.n_drafted, "request %d", i);
        cr_expect_eq(both[i].st.n_accepted, alone[i].st.n_accepted, "request %d", i);
        cr_expect_eq(both[i].st.n_target_passes, alone[i].st.n_target_passes, "request %d", i);
        passes += both[i].st.n_target_passes;
    }
    cr_assert_gt(both[0].st.n_drafted, 0, "the tree request drafted nothing");
    cr_log_info("tree request %d passes, chain request %d; the batcher: %lld passes together",
                both[0].st.n_target_passes, both[1].st.n_target_passes,
                (long long)st_both.n_target_passes);
    /* the passes are shared: the prompts' pass and then one a step for both, so at most
     * the longer request's and two (a tree pass of its own per step would make them the
     * prompts' pass plus both requests' passes) */
    const int32_t most = both[0].st.n_target_passes > both[1].st.n_target_passes
                             ? both[0].st.n_target_passes
                             : both[1].st.n_target_passes;
    cr_assert_gt(passes - most, 2, "the requests overlap too little to tell");
    cr_expect_leq(st_both.n_target_passes, most + 2, "the tree request ran passes of its own");
    free(pa);
    free(pb);
    sd_engine_free(e);
}
