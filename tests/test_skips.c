/*
 * Skip accounting (scripts/test_report.py, run by scripts/test.sh after each ctest run):
 * every test file's skips are counted with their reasons, and a test that skipped for a
 * data file that is present fails the run; so is a test file that left no report. The
 * skips here are real ones: test_detok run against an empty vocabulary folder
 * ($SD_LLAMACPP_VOCAB, the only one it then looks in), whose tu_need_path messages the
 * report reads.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/testutil.h"

static char g_dir[256];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    (void)tu_run(cmd, NULL, NULL);
}

TestSuite(skips, .init = setup, .fini = teardown, .timeout = 120);

/* Run the report over g_dir/build for the named test files; its stdout into *out. */
static int report(const char *names, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 %s/scripts/test_report.py %s/build %s", SD_SOURCE_DIR, g_dir,
             names);
    return tu_run(cmd, out, NULL);
}

Test(skips, counted_with_reasons_and_a_skip_for_present_data_fails) {
    if (tu_run("python3 -c 'import json'", NULL, NULL) != 0)
        cr_skip_test("needs: python3 (scripts/test.sh runs the report with it)");
    char build[512], crit[600], data[512], cmd[2048];
    snprintf(build, sizeof build, "%s/build", g_dir);
    snprintf(crit, sizeof crit, "%s/criterion", build);
    snprintf(data, sizeof data, "%s/data", g_dir);
    cr_assert_eq(mkdir(build, 0700), 0);
    cr_assert_eq(mkdir(crit, 0700), 0);
    cr_assert_eq(mkdir(data, 0700), 0);
    /* A real test file, every test of which needs a vocabulary the data folder lacks (run
     * without BXFI_MAP, which would make it take itself for one of our own workers). */
    snprintf(cmd, sizeof cmd,
             "env -u BXFI_MAP SD_SHARED_DATA=%s SD_LLAMACPP_VOCAB=%s/vocab ./test_detok --jobs 1 "
             "--json=%s/test_detok.json",
             data, data, crit);
    char *so = NULL, *se = NULL;
    const int rc = tu_run(cmd, &so, &se);
    cr_assert_eq(rc, 0, "%s: exit %d: %s %s", cmd, rc, so, se);
    free(so);
    free(se);
    char *out = NULL;
    cr_assert_eq(report("test_detok", &out), 0, "%s", out);
    /* "test_detok: 9 tests, 0 ran, 9 skipped: absent (...) [9 tests]: DATA/vocab/{...}" */
    cr_expect(strstr(out, "test_detok: 9 tests, 0 ran, 9 skipped: absent ("), "%s", out);
    cr_expect(strstr(out, "ggml-vocab-llama-spm.gguf"), "%s", out);
    cr_expect(strstr(out, "9 skipped"), "%s", out);
    free(out);

    /* The data appears: the same skips now fail the run, naming the test and the file. */
    char vocab[600], spm[700];
    snprintf(vocab, sizeof vocab, "%s/vocab", data);
    snprintf(spm, sizeof spm, "%s/ggml-vocab-llama-spm.gguf", vocab);
    cr_assert_eq(mkdir(vocab, 0700), 0);
    cr_assert_eq(tu_write_file(spm, "", 0), 0);
    cr_assert_eq(report("test_detok", &out), 1, "%s", out);
    cr_expect(strstr(out, "FAIL test_detok: detok::") && strstr(out, spm) &&
                  strstr(out, "which is present: it must run"),
              "%s", out);
    free(out);

    /* A test file that wrote no report (it did not run, or died before the end) fails. */
    cr_assert_eq(report("test_detok_never_ran", &out), 1, "%s", out);
    cr_expect(strstr(out, "FAIL test_detok_never_ran: no test report"), "%s", out);
    free(out);
}
