/*
 * specdec bench's own checks:
 *   - --json PATH is checked before the benchmark starts: a missing folder, a FIFO, a
 *     folder, or one of the input models as PATH fail at once (nothing on stdout: the
 *     table's header comes before the runs) with one line naming PATH, and leave PATH
 *     as it was;
 *   - figures outside what the model of speculative decoding allows are flagged:
 *     bench_suspect's three rules at and around their limits, and every summary record
 *     of a real run carries "suspect" (a boolean equal to bench_suspect of the recorded
 *     speedup, prediction and v) and "suspect_reason" (a string exactly when suspect).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/bench.h"
#include "testutil.h"
#include "pair_fixture.h"

TestSuite(bench_checks, .init = pair_setup, .fini = pair_teardown, .timeout = 600);

/* `bench ... --json PATH` fails before running: exit 1, empty stdout, one stderr line
 * naming `needle`. */
static void expect_refused_early(const char *json_path, const char *mode, const char *needle) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "%s bench %s -m %s -md %s -p t5t6 --runs 2 -n 8 -k 2 --warmup 0 --reps 1 -t 1 "
             "--json %s",
             SD_BINARY, mode, g_t, g_d, json_path);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "'%s' exited %d: %s", cmd, rc, err);
    cr_assert_str_eq(out, "", "the benchmark ran before the output was checked: %s", out);
    cr_assert(strncmp(err, "specdec: ", 9) == 0, "%s", err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "expected one stderr line, got '%s'", err);
    cr_assert(strstr(err, needle), "'%s' does not name %s", err, needle);
    free(out);
    free(err);
}

Test(bench_checks, json_output_checked_before_running) {
    char missing[2048], fifo[2048], folder[2048];
    snprintf(missing, sizeof missing, "%s/no-such-folder/ab.json", g_dir);
    tu_path(fifo, sizeof fifo, g_dir, "ab.fifo");
    tu_path(folder, sizeof folder, g_dir, "ab.dir");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(mkdir(folder, 0755), 0);
    for (int kernels = 0; kernels <= 1; kernels++) {
        const char *mode = kernels ? "--kernels --bw-mib 1 --prefill 4 --pos 4" : "";
        expect_refused_early(missing, mode, missing);
        expect_refused_early(fifo, mode, fifo);
        expect_refused_early(folder, mode, folder);
        expect_refused_early(g_t, mode, "same file as the input");
    }
    struct stat st;
    cr_assert(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    cr_assert_eq(access(missing, F_OK), -1);
    size_t n = 0;
    unsigned char *b = tu_read_file(g_t, &n);
    cr_assert(b && n > 4 && !memcmp(b, "GGUF", 4), "the target model was overwritten");
    free(b);
    cr_assert_eq(tu_count_files(g_dir), 4, "a temporary was left behind");
}

Test(bench_checks, suspect_rules) {
    char why[512];
    /* Plausible: speedup below K + 1, v >= 0.9, within 2x of the prediction. */
    cr_assert_eq(bench_suspect(4, 2.0, 2.2, 1.3, why, sizeof why), 0, "%s", why);
    cr_assert_str_eq(why, "");
    cr_assert_eq(bench_suspect(4, 5.0, 4.9, 1.0, why, sizeof why), 0, "K + 1 itself: %s", why);
    cr_assert_eq(bench_suspect(4, 1.0, 1.0, 0.9, why, sizeof why), 0, "v = 0.9: %s", why);
    cr_assert_eq(bench_suspect(2, 2.0, 1.0, 1.1, why, sizeof why), 0, "exactly 2x: %s", why);
    /* The case: 13.35x measured against a prediction of 2.24 at K = 4. */
    cr_assert_eq(bench_suspect(4, 13.35, 2.24, 1.2, why, sizeof why), 1);
    cr_assert(strstr(why, "above K + 1 = 5"), "%s", why);
    cr_assert(strstr(why, "predicted 2.24"), "%s", why);
    /* v below 0.9 alone. */
    cr_assert_eq(bench_suspect(4, 1.5, 1.6, 0.85, why, sizeof why), 1);
    cr_assert(strstr(why, "v = 0.850") && !strstr(why, "above K"), "%s", why);
    /* Far below the prediction alone. */
    cr_assert_eq(bench_suspect(4, 0.7, 2.0, 1.2, why, sizeof why), 1);
    cr_assert(strstr(why, "0.35x the predicted"), "%s", why);
    /* Non-finite figures are not judged. */
    cr_assert_eq(bench_suspect(4, NAN, NAN, NAN, why, sizeof why), 0);
    /* A short buffer stays terminated. */
    char small[16];
    cr_assert_eq(bench_suspect(4, 13.35, 2.24, 0.5, small, sizeof small), 1);
    cr_assert_eq(strlen(small), sizeof small - 1);
}

Test(bench_checks, summary_records_carry_the_flag) {
    char json_path[2048], cmd[16384];
    tu_path(json_path, sizeof json_path, g_dir, "ab.json");
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -md %s -p t5t6t7 --runs 2 --k-list 1,3 -n 12 -t 1 --warmup 0 "
             "--reps 3 --json %s",
             SD_BINARY, g_t, g_d, json_path);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: %s", cmd, err);
    cr_assert(strstr(out, "suspect"), "the table has no suspect column: %s", out);
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *sum = json_object_get(root, "summary");
    cr_assert_eq(json_array_size(sum), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *s = json_array_get(sum, i);
        json_t *flag = json_object_get(s, "suspect"),
               *reason = json_object_get(s, "suspect_reason");
        cr_assert(json_is_boolean(flag), "summary[%zu] has no boolean 'suspect'", i);
        cr_assert_not_null(reason, "summary[%zu] has no 'suspect_reason'", i);
        const int k = (int)json_integer_value(json_object_get(s, "k"));
        const double sp =
            json_number_value(json_object_get(json_object_get(s, "speedup"), "median"));
        const double pred = json_number_value(json_object_get(s, "predicted_speedup"));
        const double v = json_number_value(json_object_get(s, "v"));
        char why[512];
        const int want = bench_suspect(k, sp, pred, v, why, sizeof why);
        cr_assert_eq(json_is_true(flag), want, "K=%d: suspect %d, the rules say %d", k,
                     json_is_true(flag), want);
        if (want) {
            cr_assert(json_is_string(reason) && strlen(json_string_value(reason)) > 0);
            cr_assert(strstr(out, "suspect: "), "a suspect row without its reason: %s", out);
        } else {
            cr_assert(json_is_null(reason));
        }
    }
    json_decref(root);
    free(out);
    free(err);
}
