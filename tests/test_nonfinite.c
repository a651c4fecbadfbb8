/*
 * Non-finite logits are an error on every path: a model whose output_norm is NaN gives
 * NaN logits, and generate (greedy and sampled, target alone and speculative, the NaN
 * model as target or as draft) and perplexity must fail with a clean non-zero exit and a
 * last stderr line "specdec: ..." naming that model, instead of emitting token 0 (argmax
 * over NaN) or printing "nll nan" with exit 0. Nothing is generated: stdout holds at most
 * the echoed prompt.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "target/sd_target.h"
#include "testutil.h"

static char g_dir[1024];
static char g_t[2048], g_d[2048], g_nan[2048], g_nan_d[2048], g_text[2048];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
    tu_llama_spec s = tu_llama_default_spec();
    s.nan_output_norm = 1;
    cr_assert_eq(tu_make_llama(tu_path(g_nan, sizeof g_nan, g_dir, "nan-target.gguf"), &s), 0);
    s.noise = 0.3f; /* a NaN draft of the pair's shape */
    cr_assert_eq(tu_make_llama(tu_path(g_nan_d, sizeof g_nan_d, g_dir, "nan-draft.gguf"), &s), 0);
    const char *text = "t5t6t7t8t9t10\n<|endoftext|>\nt9t8t7t6t5t4\n";
    tu_path(g_text, sizeof g_text, g_dir, "text.txt");
    cr_assert_eq(tu_write_file(g_text, text, strlen(text)), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(nonfinite, .init = setup, .fini = teardown, .timeout = 300);

/* The last line of s (without its newline) into buf. */
static void last_line(const char *s, char *buf, size_t cap) {
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '\n')
        n--;
    size_t b = n;
    while (b > 0 && s[b - 1] != '\n')
        b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), s + b);
}

/* `specdec ARGS` exits 1; its last stderr line starts "specdec: " and names `model` and
 * the non-finite logits; stdout is empty or `stdout_want`. */
static void expect_nonfinite(const char *args, const char *model, const char *stdout_want) {
    char cmd[8192], last[4096];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "'%s' exited %d (want 1); stdout '%s'; stderr '%s'", args, rc, out, err);
    last_line(err, last, sizeof last);
    cr_assert(strncmp(last, "specdec: ", 9) == 0, "'%s': last stderr line '%s'", args, last);
    cr_assert(strstr(last, model), "'%s': '%s' does not name %s", args, last, model);
    cr_assert(strstr(last, "non-finite") || strstr(last, "NaN"),
              "'%s': '%s' does not say the logits are not finite", args, last);
    cr_assert_str_eq(out, stdout_want, "'%s': output was generated", args);
    free(out);
    free(err);
}

Test(nonfinite, generate_target_alone_greedy_and_sampled) {
    char args[8192];
    for (int sampled = 0; sampled <= 1; sampled++) {
        snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 8 -t 1 --temp %s --json", g_nan,
                 sampled ? "0.8" : "0");
        expect_nonfinite(args, g_nan, "");
        snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 8 -t 1 --temp %s", g_nan,
                 sampled ? "0.8" : "0");
        expect_nonfinite(args, g_nan, "t5t6");
    }
}

Test(nonfinite, generate_speculative_nan_target) {
    char args[8192];
    for (int sampled = 0; sampled <= 1; sampled++) {
        snprintf(args, sizeof args, "generate -m %s -md %s -p t5t6 -n 8 -k 3 -t 1 --temp %s --json",
                 g_nan, g_d, sampled ? "0.8" : "0");
        expect_nonfinite(args, g_nan, "");
    }
}

Test(nonfinite, generate_speculative_nan_draft) {
    char args[8192];
    for (int sampled = 0; sampled <= 1; sampled++) {
        snprintf(args, sizeof args, "generate -m %s -md %s -p t5t6 -n 8 -k 3 -t 1 --temp %s --json",
                 g_t, g_nan_d, sampled ? "0.8" : "0");
        expect_nonfinite(args, g_nan_d, "");
    }
}

Test(nonfinite, perplexity) {
    char args[8192];
    snprintf(args, sizeof args, "perplexity -m %s -f %s -t 1", g_nan, g_text);
    expect_nonfinite(args, g_nan, "");
}

/* The scorer itself, as a library user (a server) calls it: SD_ERR_FORMAT naming the
 * model on a plain decode step and on a verification pass of K + 1 rows. */
Test(nonfinite, scorer_reports_the_model) {
    sd_error err = {0};
    sd_model *m = NULL;
    cr_assert_eq(sd_model_load(g_nan, &m, &err), SD_OK, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = 32;
    sp.n_batch = SD_MAX_DRAFT + 1;
    sp.n_threads = 1;
    sd_scorer *s = NULL;
    cr_assert_eq(sd_scorer_init(m, &sp, &s, &err), SD_OK, "%s", err.msg);
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    float *logits = malloc((size_t)(SD_MAX_DRAFT + 1) * (size_t)n_vocab * sizeof(float));
    const int32_t ctx[3] = {1, 5, 6}, draft[3] = {7, 8, 9};
    for (int32_t k = 0; k <= 3; k += 3) {
        memset(&err, 0, sizeof err);
        cr_assert_eq(sd_scorer_score(s, ctx, 3, draft, k, logits, &err), SD_ERR_FORMAT,
                     "k = %d: %s", k, err.msg);
        cr_assert(strstr(err.msg, g_nan) && strstr(err.msg, "non-finite"), "%s", err.msg);
    }
    free(logits);
    sd_scorer_free(s);
    sd_model_free(m);
}
