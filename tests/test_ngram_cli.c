/*
 * tests/test_ngram_cli.c: the n-gram flags and keys through `specdec generate`: bad input
 * gives one line naming the flag, key or file and a non-zero exit; --lookup-cache is
 * created, then read and grown by the next run.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "verify/sd_verify.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(ngram, .init = setup, .fini = teardown, .timeout = 600);

/* ------------------------------------------------------------------------------------ */
/* Bad input through the CLI: one line naming the flag, key or file; exit non-zero.      */

Test(ngram, cli_bad_input) {
    char t[2048], d[2048], args[8192], cfg[2048], junk[2048];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    const char *bad[][2] = {
        {"--draft-type eagle", "--draft-type"},
        {"--spec-type ngram-mod", "--draft-type"},
        {"--ngram-min 0", "--ngram-min"},
        {"--ngram-max 17", "--ngram-max"},
        {"--ngram-min 5", "--ngram-min"},
        {"--ngram-min 3 --ngram-max 2", "--ngram-max"},
        {"--draft-p-min 1.5", "--draft-p-min"},
        {"--draft-p-min -0.1", "--draft-p-min"},
        {"--draft-min 17", "--draft-min"},
        {"--draft-policy sometimes", "--draft-policy"},
        {"--spec-ngram-size-n 0", "--spec-ngram-size-n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 %s", t, bad[i][0]);
        tu_expect_cli_error(args, bad[i][1]);
    }
    /* llm without a draft model */
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type llm", t);
    tu_expect_cli_error(args, "--draft-type llm");
    /* config keys */
    const char *keys[][2] = {{"\"draft_type\": \"eagle\"", "draft_type"},
                             {"\"ngram_min\": 0", "ngram_min"},
                             {"\"ngram_min\": 4, \"ngram_max\": 2", "ngram_min"},
                             {"\"draft_p_min\": 2", "draft_p_min"},
                             {"\"draft_policy\": 1", "draft_policy"}};
    tu_path(cfg, sizeof cfg, g_dir, "pair.json");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char json[4096];
        snprintf(json, sizeof json, "{\"target\": \"%s\", %s}", t, keys[i][0]);
        cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
        snprintf(args, sizeof args, "generate --config %s -p t5t6 -n 4", cfg);
        tu_expect_cli_error(args, keys[i][1]);
    }
    /* lookup caches: not a cache, truncated, another vocabulary */
    tu_path(junk, sizeof junk, g_dir, "junk.cache");
    cr_assert_eq(tu_write_file(junk, "hello\n", 6), 0);
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type ngram --lookup-cache %s",
             t, junk);
    tu_expect_cli_error(args, junk);
    char lc[2048];
    tu_path(lc, sizeof lc, g_dir, "real.cache");
    snprintf(args, sizeof args,
             "%s generate -m %s -p t5t6t7t5t6 -n 8 --draft-type ngram --lookup-cache %s", SD_BINARY,
             t, lc);
    cr_assert_eq(tu_run(args, NULL, NULL), 0, "making a cache failed");
    size_t n = 0;
    unsigned char *img = tu_read_file(lc, &n);
    cr_assert(img && n > 48);
    cr_assert_eq(tu_write_file(junk, img, n - 9), 0);
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type ngram --lookup-cache %s",
             t, junk);
    tu_expect_cli_error(args, "truncated");
    free(img);
    /* the draft model has the same vocabulary; a model with another one does not */
    char other[2048];
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 80;
    cr_assert_eq(tu_make_llama(tu_path(other, sizeof other, g_dir, "other.gguf"), &s), 0);
    snprintf(args, sizeof args, "generate -m %s -p t5t6 -n 4 --draft-type ngram --lookup-cache %s",
             other, lc);
    tu_expect_cli_error(args, "another vocabulary");
    /* a good run with the cache: updated, never left as a temporary file */
    snprintf(args, sizeof args,
             "%s generate -m %s -p t5t6t7t5t6 -n 8 --draft-type ngram --lookup-cache %s", SD_BINARY,
             t, lc);
    cr_assert_eq(tu_run(args, NULL, NULL), 0);
    size_t n2 = 0;
    unsigned char *img2 = tu_read_file(lc, &n2);
    cr_assert(img2 && n2 > n, "the cache did not grow (%zu -> %zu bytes)", n, n2);
    cr_assert_eq(img2[24], 2, "expected 2 documents after 2 runs, found %d", img2[24]);
    free(img2);
}
