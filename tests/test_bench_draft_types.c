/*
 * tests/test_bench_draft_types.c: `specdec bench --draft-types`: every draft type side by
 * side per prompt category, greedy output equal to target alone in every run; bad
 * --draft-types values refused; --rounds N alternates the variants' order and pools them.
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

/* specdec bench --draft-types: every type side by side per category (from the
 * "# category:" line, else the file name), greedy output equal to none in every run. */
Test(ngram, bench_draft_types_side_by_side) {
    char t[2048], d[2048], f1[2048], f2[2048], js[2048], cmd[16384];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    tu_path(f1, sizeof f1, g_dir, "first.txt");
    tu_path(f2, sizeof f2, g_dir, "repeats.txt");
    tu_path(js, sizeof js, g_dir, "bench.json");
    const char *p1 = "# category: copy\nt5t6t7t8t5t6t7\nt9t10t11t9t10\n";
    const char *p2 = "t20t21t22t20t21t22t20\n";
    cr_assert_eq(tu_write_file(f1, p1, strlen(p1)), 0);
    cr_assert_eq(tu_write_file(f2, p2, strlen(p2)), 0);
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -md %s --draft-types all -f %s -f %s -n 24 -k 3 -t 1 --temp 0 "
             "--json %s",
             SD_BINARY, t, d, f1, f2, js);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "bench exited %d: %s", rc, err ? err : "");
    cr_assert(strstr(out, "copy") && strstr(out, "repeats") && strstr(out, "ngram-adaptive"),
              "table: %s", out);
    free(out);
    free(err);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    cr_assert_not_null(root, "bad JSON: %s", je.text);
    cr_assert(json_is_true(json_object_get(root, "greedy_match")));
    json_t *rows = json_object_get(root, "rows");
    const char *types[] = {"none",           "llm",       "llm-adaptive",      "ngram",
                           "ngram-adaptive", "ngram+llm", "ngram+llm-adaptive"};
    int seen[3][7] = {{0}};
    const char *cats[] = {"copy", "repeats", "all"};
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        const char *cat = json_string_value(json_object_get(r, "category"));
        const char *dr = json_string_value(json_object_get(r, "draft"));
        cr_assert(cat && dr);
        cr_assert(json_is_true(json_object_get(r, "greedy_match")), "%s %s: tokens differ", cat,
                  dr);
        const json_int_t gen = json_integer_value(json_object_get(r, "n_generated"));
        const json_int_t passes = json_integer_value(json_object_get(r, "n_target_passes"));
        const json_int_t drafted = json_integer_value(json_object_get(r, "n_drafted"));
        const json_int_t acc = json_integer_value(json_object_get(r, "n_accepted"));
        cr_assert(gen > 0 && passes > 0 && acc <= drafted, "%s %s: counts", cat, dr);
        json_t *hist = json_object_get(r, "k_hist");
        json_int_t hsum = 0;
        for (size_t k = 0; k < json_array_size(hist); k++)
            hsum += json_integer_value(json_array_get(hist, k));
        cr_assert_eq(hsum, passes, "%s %s: K histogram covers %lld of %lld passes", cat, dr,
                     (long long)hsum, (long long)passes);
        for (int c = 0; c < 3; c++)
            for (int ty = 0; ty < 7; ty++) {
                char want[64];
                snprintf(want, sizeof want, "%s ", types[ty]);
                if (!strcmp(cat, cats[c]) &&
                    (!strcmp(dr, types[ty]) || !strncmp(dr, want, strlen(want))))
                    seen[c][ty]++;
            }
        if (!strcmp(dr, "none")) cr_assert_eq(drafted, 0);
    }
    for (int c = 0; c < 3; c++)
        for (int ty = 0; ty < 7; ty++)
            cr_assert_eq(seen[c][ty], 1, "category %s: %d rows of %s", cats[c], seen[c][ty],
                         types[ty]);
    json_decref(root);
    /* A type that needs a draft model, without one: one line naming it. */
    snprintf(cmd, sizeof cmd, "bench -m %s --draft-types llm -f %s -n 8 --temp 0", t, f1);
    tu_expect_cli_error(cmd, "llm");
    snprintf(cmd, sizeof cmd, "bench -m %s --draft-types eagle -f %s", t, f1);
    tu_expect_cli_error(cmd, "--draft-types");
}

/* The record of (prompt, round, draft) in runs, or NULL. */
static json_t *run_of(json_t *runs, json_int_t prompt, json_int_t round, const char *draft) {
    for (size_t i = 0; i < json_array_size(runs); i++) {
        json_t *r = json_array_get(runs, i);
        if (json_integer_value(json_object_get(r, "prompt_index")) == prompt &&
            json_integer_value(json_object_get(r, "round")) == round &&
            !strcmp(json_string_value(json_object_get(r, "draft")), draft))
            return r;
    }
    return NULL;
}

/* --rounds 2: each prompt runs every variant twice, the second round in reverse order (none
 * first, then last), both rounds' counts equal (greedy drafting is deterministic), every
 * run's text equals the first none run's, and a row's counts are the sum of its runs'
 * (computed here from the run records); --rounds 0 is refused. */
Test(ngram, bench_rounds_alternate_and_pool) {
    char t[2048], d[2048], f1[2048], js[2048], cmd[16384];
    cr_assert_eq(tu_make_test_pair(g_dir, t, sizeof t, d, sizeof d), 0);
    tu_path(f1, sizeof f1, g_dir, "copy.txt");
    tu_path(js, sizeof js, g_dir, "rounds.json");
    const char *p1 = "# category: copy\nt5t6t7t8t5t6t7\nt9t10t11t9t10\n";
    cr_assert_eq(tu_write_file(f1, p1, strlen(p1)), 0);
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s --draft-types suffix-tree2,ngram,suffix -f %s -n 24 -k 3 -t 1 "
             "--temp 0 --rounds 2 --json %s",
             SD_BINARY, t, f1, js);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "bench exited %d: %s", rc, err ? err : "");
    free(out);
    free(err);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    cr_assert_not_null(root, "bad JSON: %s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(root, "rounds")), 2);
    cr_assert(json_is_true(json_object_get(root, "greedy_match")));
    json_t *runs = json_object_get(root, "runs");
    enum { NV = 4 };
    const char *order[NV] = {"none", "ngram K=3", "suffix K=3", "suffix-tree2 K=3"};
    cr_assert_eq(json_array_size(runs), 2 * 2 * NV, "2 prompts x 2 rounds x %d variants", NV);
    /* the records in the order they ran: per prompt, round 0 forward, round 1 backward */
    for (int p = 0; p < 2; p++)
        for (int rd = 0; rd < 2; rd++)
            for (int j = 0; j < NV; j++) {
                json_t *r = json_array_get(runs, (size_t)(p * 2 * NV + rd * NV + j));
                const char *want = order[rd ? NV - 1 - j : j];
                cr_assert_str_eq(json_string_value(json_object_get(r, "draft")), want,
                                 "prompt %d round %d position %d", p, rd, j);
                cr_assert_eq(json_integer_value(json_object_get(r, "round")), rd);
                cr_assert(json_is_true(json_object_get(r, "greedy_match")));
            }
    const char *keys[] = {"n_generated", "n_target_passes", "n_drafted", "n_accepted"};
    json_int_t drafted_all = 0;
    for (int v = 0; v < NV; v++) {
        json_int_t sum[4] = {0};
        for (int p = 0; p < 2; p++) {
            json_t *a = run_of(runs, p, 0, order[v]), *b = run_of(runs, p, 1, order[v]);
            cr_assert(a && b, "%s prompt %d: a round missing", order[v], p);
            for (int k = 0; k < 4; k++) {
                const json_int_t x = json_integer_value(json_object_get(a, keys[k]));
                cr_assert_eq(x, json_integer_value(json_object_get(b, keys[k])),
                             "%s prompt %d: %s differs between the rounds", order[v], p, keys[k]);
                sum[k] += 2 * x;
            }
        }
        json_t *rows = json_object_get(root, "rows"), *row = NULL;
        for (size_t i = 0; i < json_array_size(rows); i++) {
            json_t *r = json_array_get(rows, i);
            if (!strcmp(json_string_value(json_object_get(r, "draft")), order[v])) row = r;
        }
        cr_assert_not_null(row, "no row for %s", order[v]);
        cr_assert_eq(json_integer_value(json_object_get(row, "n_runs")), 2, "one entry a prompt");
        for (int k = 0; k < 4; k++)
            cr_assert_eq(json_integer_value(json_object_get(row, keys[k])), sum[k],
                         "%s: row %s is not the sum of its runs'", order[v], keys[k]);
        cr_assert(json_is_true(json_object_get(row, "greedy_match")));
        drafted_all += sum[2];
    }
    cr_assert_gt(drafted_all, 0, "nothing drafted: the rounds prove little");
    json_decref(root);
    snprintf(cmd, sizeof cmd, "bench -m %s --draft-types suffix -f %s -n 8 --rounds 0", t, f1);
    tu_expect_cli_error(cmd, "--rounds");
}
