/*
 * specdec perplexity's context: --ctx beyond the model's training context (128 for the
 * test model) is capped at it with one note on stderr, so the output is exactly that of
 * --ctx 128 (positions the model never saw are not scored); a text long enough to need
 * several windows makes the two differ if the cap is missing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char g_dir[1024];
static char g_t[2048], g_d[2048], g_text[2048];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
    /* One story of ~400 tokens ("t5t6..." pieces): more than three windows of 128. */
    char text[4096];
    size_t n = 0;
    for (int i = 0; i < 400; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "t%d", 3 + (i * 37) % 90);
    cr_assert_lt(n, sizeof text - 1);
    text[n++] = '\n';
    cr_assert_eq(tu_write_file(tu_path(g_text, sizeof g_text, g_dir, "long.txt"), text, n), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(perplexity, .init = setup, .fini = teardown, .timeout = 300);

static char *run_ok(const char *args, char **err) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -t 1 %s", SD_BINARY, g_t, g_text, args);
    char *out = NULL;
    int rc = tu_run(cmd, &out, err);
    cr_assert_eq(rc, 0, "'%s' exited %d: %s", cmd, rc, *err);
    return out;
}

Test(perplexity, ctx_beyond_training_is_capped) {
    char *e128 = NULL, *e1000 = NULL;
    char *o128 = run_ok("--ctx 128", &e128);
    char *o1000 = run_ok("--ctx 1000", &e1000);
    cr_assert(strstr(o128, "\nctx         128\n"), "%s", o128);
    cr_assert_str_eq(o1000, o128, "--ctx 1000 scored differently from the capped --ctx 128");
    cr_assert_str_eq(e128, "", "unexpected stderr for --ctx 128: %s", e128);
    /* One note naming the model, the asked and the training context. */
    cr_assert(strncmp(e1000, "specdec: ", 9) == 0, "%s", e1000);
    const char *nl = strchr(e1000, '\n');
    cr_assert(nl && nl[1] == '\0', "expected one note line, got '%s'", e1000);
    cr_assert(strstr(e1000, "1000") && strstr(e1000, "128") && strstr(e1000, g_t), "%s", e1000);
    /* Within the training context nothing is capped: --ctx 64 scores other windows. */
    char *e64 = NULL;
    char *o64 = run_ok("--ctx 64", &e64);
    cr_assert(strstr(o64, "\nctx         64\n"), "%s", o64);
    cr_assert_str_neq(o64, o128);
    free(o64);
    free(e64);
    free(o128);
    free(o1000);
    free(e128);
    free(e1000);
}
