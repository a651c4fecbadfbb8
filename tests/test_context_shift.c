/*
 * `specdec generate --context-shift` (tools/cmd_generate.c): when the context is
 * full, the context keeps its first n_keep tokens (BOS, and --keep N prompt tokens),
 * drops the older half of the rest and generation goes on, the target's cache shifted
 * with its keys re-rotated (sd_session_seq_shift), not recomputed. Checked against a
 * reference written here, independent of the CLI's segment bookkeeping: greedy decoding
 * one token at a time, each token the argmax of a from-scratch evaluation of the current
 * context (a fresh session), the context shortened by the same rule whenever it reaches
 * n_ctx + 1 tokens. The models have one layer, where a shifted cache equals a fresh one
 * to rounding (tests/test_shift.c: 2.5e-7 with an F32 cache, which the CLI is given
 * here), so the token ids must be equal, with the target alone and with a draft (greedy
 * speculative == target alone). (With more layers a shift is an approximation, as in
 * llama.cpp: the kept rows remember the dropped run.) Without the flag generation stops
 * at the context as before; --context-shift with -n -1 is a usage error.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "testutil.h"

static char g_dir[1024], g_t[1200], g_d[1200];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    /* the tests' pair (tu_make_test_pair) with one layer */
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_layer = 1;
    cr_assert_eq(tu_make_llama(tu_path(g_t, sizeof g_t, g_dir, "t.gguf"), &sp), 0);
    sp.wtype = SD_TYPE_Q8_0;
    sp.noise = 0.3f;
    cr_assert_eq(tu_make_llama(tu_path(g_d, sizeof g_d, g_dir, "d.gguf"), &sp), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(context_shift, .init = setup, .fini = teardown, .timeout = 300);

#define PROMPT "t5 t9 t17 t30"
#define N_CTX  24
#define N_GEN  70

/* The CLI's token ids (--json), n of them. */
static int32_t cli_tokens(const char *extra, int32_t *ids, int32_t cap, char *stop, size_t scap) {
    char cmd[4096], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s %s -p '" PROMPT
             "' -c %d -n %d --temp 0 --ignore-eos -t 1 -ctk f32 --json",
             SD_BINARY, g_t, extra, N_CTX, N_GEN);
    const int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", cmd, rc, err);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    cr_assert(root, "not JSON: %s", out);
    json_t *toks = json_object_get(root, "tokens");
    cr_assert(json_is_array(toks), "%s", out);
    const int32_t n = (int32_t)json_array_size(toks);
    cr_assert_leq(n, cap);
    for (int32_t i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
    const char *s = json_string_value(json_object_get(json_object_get(root, "stats"), "stop"));
    snprintf(stop, scap, "%s", s ? s : "?");
    json_decref(root);
    free(out);
    free(err);
    return n;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The reference: N_GEN greedy tokens with the shift rule, every token from a fresh
 * evaluation of the whole current context. */
static void reference(int32_t n_keep_prompt, int32_t *ref) {
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(g_t, &m, &err), SD_OK, "%s", err.msg);
    const sd_vocab *v = sd_model_vocab(m);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cr_assert_eq(
        sd_vocab_tokenize(v, PROMPT, strlen(PROMPT), SD_VOCAB_ADD_SPECIAL, &ids, &n_ids, &err),
        SD_OK, "%s", err.msg);
    cr_assert_eq(ids[0], sd_vocab_bos(v));
    const int32_t n_keep = n_keep_prompt < 0 ? (int32_t)n_ids : 1 + n_keep_prompt;
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    int32_t cur[N_CTX + 1];
    int32_t n_cur = (int32_t)n_ids;
    memcpy(cur, ids, n_ids * sizeof *cur);
    float *logits = malloc((size_t)nv * sizeof(float));
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_threads = 1;
    for (int32_t i = 0; i < N_GEN; i++) {
        if (n_cur == N_CTX + 1) { /* full: keep n_keep, drop half of the rest */
            const int32_t n_discard = (n_cur - n_keep) / 2;
            memmove(cur + n_keep, cur + n_keep + n_discard,
                    (size_t)(n_cur - n_keep - n_discard) * sizeof *cur);
            n_cur -= n_discard;
        }
        sd_session *s = NULL;
        cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(sd_session_eval(s, cur, n_cur, logits, 1, &err), SD_OK, "%s", err.msg);
        sd_session_free(s);
        ref[i] = argmax(logits, nv);
        cur[n_cur++] = ref[i];
    }
    free(logits);
    free(ids);
    sd_model_free(m);
}

static void check(const char *extra, int32_t keep) {
    int32_t got[N_GEN + 8], ref[N_GEN];
    char stop[32];
    const int32_t n = cli_tokens(extra, got, N_GEN + 8, stop, sizeof stop);
    cr_assert_eq(n, N_GEN, "%s: %d tokens (stop %s), expected %d", extra, n, stop, N_GEN);
    reference(keep, ref);
    for (int32_t i = 0; i < N_GEN; i++)
        cr_assert_eq(got[i], ref[i], "%s: token %d is %d, the reference's %d", extra, i, got[i],
                     ref[i]);
}

Test(context_shift, target_alone_matches_the_reference) {
    check("--no-draft --context-shift", 0);
}

Test(context_shift, keep_matches_the_reference) {
    check("--no-draft --context-shift --keep 3", 3);
}

Test(context_shift, speculative_matches_the_reference) {
    char extra[1400];
    snprintf(extra, sizeof extra, "-md %s -k 3 --context-shift", g_d);
    check(extra, 0);
}

Test(context_shift, off_by_default_and_no_endless_run) {
    int32_t got[N_GEN + 8];
    char stop[32];
    const int32_t n = cli_tokens("--no-draft", got, N_GEN + 8, stop, sizeof stop);
    cr_expect_str_eq(stop, "context", "without --context-shift: stop %s after %d", stop, n);
    cr_expect_lt(n, N_GEN);
    char cmd[2048], *err = NULL;
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p x -n -1 --context-shift", SD_BINARY, g_t);
    cr_expect_neq(tu_run(cmd, NULL, &err), 0);
    cr_expect(strstr(err, "--context-shift with -n -1"), "%s", err);
    free(err);
}
