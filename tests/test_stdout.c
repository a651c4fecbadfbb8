/*
 * Writes to stdout are checked: every command that prints results exits non-zero with
 * one stderr line "specdec: stdout: ..." when its stdout cannot take them (/dev/full:
 * every write fails with ENOSPC), and exits 0 when it can (/dev/null), so the failure
 * is the output's, not the arguments'.
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
    const char *text = "t5t6t7t8t9\n<|endoftext|>\nt9t8t7t6t5t4\n";
    cr_assert_eq(
        tu_write_file(tu_path(g_text, sizeof g_text, g_dir, "text.txt"), text, strlen(text)), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(stdout_checked, .init = setup, .fini = teardown, .timeout = 300);

/* `specdec ARGS > /dev/null` exits 0; `specdec ARGS > /dev/full` exits 1 with one
 * stderr line naming stdout. */
static void check(const char *args) {
    char cmd[8192];
    char *err = NULL;
    snprintf(cmd, sizeof cmd, "%s %s > /dev/null", SD_BINARY, args);
    int rc = tu_run(cmd, NULL, &err);
    cr_assert_eq(rc, 0, "'%s' > /dev/null exited %d: %s", args, rc, err);
    free(err);
    snprintf(cmd, sizeof cmd, "%s %s > /dev/full", SD_BINARY, args);
    rc = tu_run(cmd, NULL, &err);
    cr_assert_eq(rc, 1, "'%s' > /dev/full exited %d (want 1): %s", args, rc, err);
    cr_assert(err && strncmp(err, "specdec: ", 9) == 0, "'%s': stderr '%s'", args, err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': expected one stderr line, got '%s'", args, err);
    cr_assert(strstr(err, "stdout"), "'%s': the error does not name stdout: '%s'", args, err);
    free(err);
}

Test(stdout_checked, generate_json_and_text) {
    char args[8192];
    snprintf(args, sizeof args, "generate -m %s -md %s -p t5t6 -n 8 --temp 0 -t 1 --json", g_t,
             g_d);
    check(args);
    /* text mode: the prompt and the tokens are streamed; the statistics (stderr) only
     * follow a successful run */
    snprintf(args, sizeof args, "generate -m %s -md %s -p t5t6 -n 8 --temp 0 -t 1", g_t, g_d);
    check(args);
}

Test(stdout_checked, tokenize_info_perplexity) {
    char args[8192];
    snprintf(args, sizeof args, "tokenize -m %s -p t5t6", g_t);
    check(args);
    snprintf(args, sizeof args, "info %s", g_t);
    check(args);
    snprintf(args, sizeof args, "perplexity -m %s -f %s -t 1", g_t, g_text);
    check(args);
    check("--version");
    check("--help");
}

Test(stdout_checked, bench_ab_and_kernels) {
    char args[8192];
    snprintf(args, sizeof args,
             "bench -m %s -md %s -p t5t6 --runs 1 -n 6 -k 2 --warmup 0 --reps 1 -t 1", g_t, g_d);
    check(args);
    snprintf(args, sizeof args,
             "bench --kernels -m %s --bw-mib 1 --reps 1 --prefill 4 --pos 4 -t 1", g_t);
    check(args);
}
