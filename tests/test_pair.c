/*
 * The shipped TinyStories pair (models/tinystories-{target,draft}-{f32,q8_0}.gguf, made
 * by scripts/train_pair.py): the vocabularies pair (with each other and with
 * stories260K when ../shared is there), greedy speculative output equals target-alone
 * output token for token, the trained draft is accepted often enough to be worth
 * running, and `specdec perplexity` agrees with scripts/ref_loss.py (numpy float64).
 * Each test skips with a message when a model file is absent. $SD_PAIR_MODELS names
 * another folder holding the four files (e.g. a pair fresh from train_pair.py --out).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"

#define PYTHON "/usr/bin/python3"

static char g_dir[1024];
/* The pair's files: SD_SOURCE_DIR/models/, or $SD_PAIR_MODELS (to test another pair). */
static char TARGET_F32[2048], TARGET_Q8[2048], DRAFT_F32[2048], DRAFT_Q8[2048];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    const char *dir = getenv("SD_PAIR_MODELS");
    if (!dir || !*dir) dir = SD_SOURCE_DIR "/models";
    tu_path(TARGET_F32, sizeof TARGET_F32, dir, "tinystories-target-f32.gguf");
    tu_path(TARGET_Q8, sizeof TARGET_Q8, dir, "tinystories-target-q8_0.gguf");
    tu_path(DRAFT_F32, sizeof DRAFT_F32, dir, "tinystories-draft-f32.gguf");
    tu_path(DRAFT_Q8, sizeof DRAFT_Q8, dir, "tinystories-draft-q8_0.gguf");
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(pair, .init = setup, .fini = teardown, .timeout = 600);

static void need_models(void) {
    const char *files[] = {TARGET_F32, TARGET_Q8, DRAFT_F32, DRAFT_Q8};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        tu_need_path(files[i], "the shipped pair is made by scripts/train_pair.py");
}

static sd_model *load(const char *path) {
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

static void check_pair(const sd_model *t, const char *tp, const sd_model *d, const char *dp) {
    sd_error err = {0};
    cr_assert_eq(sd_vocab_check_pair(sd_model_vocab(t), tp, sd_model_vocab(d), dp, &err), 0, "%s",
                 err.msg);
}

Test(pair, vocabularies_pair_and_shapes) {
    need_models();
    sd_model *t = load(TARGET_F32), *tq = load(TARGET_Q8), *d = load(DRAFT_F32),
             *dq = load(DRAFT_Q8);
    check_pair(t, TARGET_F32, d, DRAFT_F32);
    check_pair(tq, TARGET_Q8, dq, DRAFT_Q8);
    check_pair(t, TARGET_F32, dq, DRAFT_Q8);
    const sd_hparams *ht = sd_model_hparams(t), *hd = sd_model_hparams(d);
    cr_assert_eq(ht->n_vocab, 512);
    cr_assert_eq(hd->n_vocab, 512);
    cr_assert_eq(sd_vocab_bos(sd_model_vocab(t)), 1);
    cr_assert_eq(sd_vocab_eos(sd_model_vocab(t)), 2);
    /* The draft is several times cheaper than the target per decode step. */
    cr_assert_gt(sd_model_weight_bytes(t), 5 * sd_model_weight_bytes(d), "target %zu, draft %zu",
                 sd_model_weight_bytes(t), sd_model_weight_bytes(d));
    sd_model_free(t);
    sd_model_free(tq);
    sd_model_free(d);
    sd_model_free(dq);
}

/* The pair shares stories260K's vocabulary (tok512), so it pairs with it too. */
Test(pair, pairs_with_stories260k) {
    need_models();
    tu_need_path(tu_shared("models/stories260K.bin"), "shared data: pairing with stories260K");
    tu_need_path(tu_shared("models/tok512.bin"), "shared data: pairing with stories260K");
    cr_assert_eq(tu_make_stories_pair(g_dir), 1);
    sd_model *t = load(TARGET_F32), *d = load(DRAFT_F32);
    char s260[2048];
    tu_path(s260, sizeof s260, g_dir, "stories260K-f32.gguf");
    sd_model *s = load(s260);
    check_pair(t, TARGET_F32, s, s260);
    check_pair(s, s260, d, DRAFT_F32);
    sd_model_free(s);
    sd_model_free(t);
    sd_model_free(d);
}

static int32_t *tokenize(const sd_model *m, const char *text, int32_t *n) {
    sd_error err = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cr_assert_eq(sd_vocab_tokenize(sd_model_vocab(m), text, strlen(text), SD_VOCAB_ADD_SPECIAL,
                                   &ids, &n_ids, &err),
                 0, "%s", err.msg);
    *n = (int32_t)n_ids;
    return ids;
}

/* Greedy generation of n_predict tokens through the engine's one path (sd_engine_generate),
 * drafting with the LLM draft at K k (fixed) when draft, else target alone; the
 * vocabulary's EOS ends it. */
static int32_t generate(sd_engine *e, int draft, const int32_t *prompt, int32_t n_prompt, int32_t k,
                        int32_t n_predict, int32_t *out, sd_gen_stats *st) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = n_predict;
    gp.n_draft = draft ? k : 0;
    gp.draft_type = draft ? SD_DRAFT_LLM : SD_DRAFT_NONE;
    gp.k_policy = SD_K_FIXED;
    gp.samp.temp = 0.0f;
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, &gp, prompt, n_prompt, NULL, NULL, out, n_predict, st, &err),
                 0, "%s", err.msg);
    return st->n_generated;
}

static void greedy_pair(const char *target, const char *draft, double min_acceptance) {
    static const char *prompts[] = {"Once upon a time", "Tom and his dog went to the park.",
                                    "The little bird was sad because"};
    static const int32_t ks[] = {1, 2, 4, 8};
    enum { N_PREDICT = 96 };
    sd_model *tm = load(target), *dm = load(draft);
    check_pair(tm, target, dm, draft);
    sd_engine_params ep = sd_engine_default_params();
    ep.target = target;
    ep.draft = draft;
    ep.n_threads = 1; /* tiny models: one thread is fastest, and a loaded box stays fair */
    sd_error err = {0};
    sd_engine *e = NULL;
    cr_assert_eq(sd_engine_init(&ep, &e, &err), 0, "%s", err.msg);
    int64_t drafted = 0, accepted = 0;
    for (size_t pi = 0; pi < sizeof prompts / sizeof prompts[0]; pi++) {
        int32_t n_prompt;
        int32_t *prompt = tokenize(tm, prompts[pi], &n_prompt);
        int32_t ref[N_PREDICT], got[N_PREDICT];
        sd_gen_stats st;
        int32_t n_ref = generate(e, 0, prompt, n_prompt, 1, N_PREDICT, ref, &st);
        cr_assert_gt(n_ref, 0);
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            int32_t n_got = generate(e, 1, prompt, n_prompt, ks[ki], N_PREDICT, got, &st);
            cr_assert_eq(n_got, n_ref, "'%s' K=%d: %d tokens, target alone %d", prompts[pi], ks[ki],
                         n_got, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(got[i], ref[i], "'%s' K=%d: token %d is %d, target alone %d",
                             prompts[pi], ks[ki], i, got[i], ref[i]);
            drafted += st.n_drafted;
            accepted += st.n_accepted;
        }
        free(prompt);
    }
    double acc = drafted ? (double)accepted / (double)drafted : 0.0;
    cr_log_info("%s drafting for %s: greedy acceptance %.3f (%lld / %lld)", draft, target, acc,
                (long long)accepted, (long long)drafted);
    cr_assert_geq(acc, min_acceptance, "greedy acceptance %.3f, expected >= %.2f", acc,
                  min_acceptance);
    sd_engine_free(e);
    sd_model_free(dm);
    sd_model_free(tm);
}

Test(pair, greedy_speculative_equals_target_alone_f32) {
    need_models();
    greedy_pair(TARGET_F32, DRAFT_F32, 0.35);
}

Test(pair, greedy_speculative_equals_target_alone_q8_0) {
    need_models();
    greedy_pair(TARGET_Q8, DRAFT_Q8, 0.35);
}

/* Two short stories of our own (a few hundred tokens), one blank story between them
 * that must be skipped; windows of 48 tokens so every story spans several windows. */
static const char k_text[] =
    "Once upon a time, there was a little cat named Mimi. Mimi liked to sit in the sun by the "
    "window. One day, a big red ball rolled into the room. Mimi jumped up and ran after it. The "
    "ball went under the bed, and Mimi could not reach it.\n\n"
    "Mimi's friend, a small dog named Max, came to help. \"I can get it!\" said Max. He pushed "
    "the ball out with his nose. Mimi was very happy. They played with the ball all day.\n"
    "<|endoftext|>\n"
    "\n"
    "<|endoftext|>\n"
    "Tom had a green boat. He took it to the pond every morning. The boat was fast and it made "
    "the ducks laugh. One windy day the boat went too far. Tom was sad, but his mom said, "
    "\"Let's walk around the pond.\" They found the boat near a tall tree. Tom smiled and "
    "hugged his mom.\n"
    "<|endoftext|>\n";

static const char *k_stories[] = {
    "Once upon a time, there was a little cat named Mimi. Mimi liked to sit in the sun by the "
    "window. One day, a big red ball rolled into the room. Mimi jumped up and ran after it. The "
    "ball went under the bed, and Mimi could not reach it.\n\n"
    "Mimi's friend, a small dog named Max, came to help. \"I can get it!\" said Max. He pushed "
    "the ball out with his nose. Mimi was very happy. They played with the ball all day.",
    "Tom had a green boat. He took it to the pond every morning. The boat was fast and it made "
    "the ducks laugh. One windy day the boat went too far. Tom was sad, but his mom said, "
    "\"Let's walk around the pond.\" They found the boat near a tall tree. Tom smiled and "
    "hugged his mom.",
};

static double read_key(const char *out, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = out; p && *p;) {
        if (!strncmp(p, key, kl) && p[kl] == ' ') return strtod(p + kl, NULL);
        p = strchr(p, '\n');
        if (p) p++;
    }
    cr_assert_fail("no '%s' line in:\n%s", key, out);
    return 0.0;
}

Test(pair, perplexity_matches_numpy_reference) {
    need_models();
    if (access(PYTHON, X_OK) != 0 || tu_run(PYTHON " -c 'import numpy'", NULL, NULL) != 0)
        cr_skip_test("%s with numpy absent: reference loss not computed", PYTHON);
    char text[2048], idsf[2048], cmd[8192];
    tu_path(text, sizeof text, g_dir, "stories.txt");
    tu_path(idsf, sizeof idsf, g_dir, "ids.txt");
    FILE *f = fopen(text, "wb");
    cr_assert(f);
    fputs(k_text, f);
    fclose(f);
    /* The reference gets the token ids from specdec's tokenizer (one story a line). */
    sd_model *m = load(TARGET_F32);
    f = fopen(idsf, "w");
    cr_assert(f);
    int64_t n_pred = 0;
    for (size_t i = 0; i < sizeof k_stories / sizeof k_stories[0]; i++) {
        int32_t n;
        int32_t *ids = tokenize(m, k_stories[i], &n);
        for (int32_t j = 0; j < n; j++)
            fprintf(f, j ? " %d" : "%d", ids[j]);
        fputc('\n', f);
        n_pred += n - 1;
        free(ids);
    }
    fclose(f);
    sd_model_free(m);

    char *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "%s perplexity -m '%s' -f '%s' --ctx 48 -t 1", SD_BINARY, TARGET_F32,
             text);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: %s", cmd, err);
    double c_nll = read_key(out, "nll"), c_tok = read_key(out, "tokens");
    cr_assert_eq(read_key(out, "stories"), 2.0, "blank story not skipped:\n%s", out);
    cr_assert_eq((int64_t)c_tok, n_pred, "predicted %g tokens, expected %lld", c_tok,
                 (long long)n_pred);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, PYTHON " '%s/scripts/ref_loss.py' '%s' 48 '%s'", SD_SOURCE_DIR,
             TARGET_F32, idsf);
    rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: %s", cmd, err);
    double r_nll = read_key(out, "nll"), r_tok = read_key(out, "tokens");
    cr_assert_eq(r_tok, c_tok);
    cr_log_info("perplexity: specdec %.9f, numpy %.9f nats/token over %lld tokens", c_nll, r_nll,
                (long long)n_pred);
    cr_assert_lt(fabs(c_nll - r_nll), 1e-4 * fabs(r_nll), "specdec %.9f vs numpy %.9f", c_nll,
                 r_nll);
    cr_assert_gt(n_pred, 150);
    free(out);
    free(err);
}
