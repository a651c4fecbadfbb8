/*
 * tests/pair_fixture.h: the suite fixture of the tests that run on the tests' random pair
 * (tu_make_test_pair): a temporary folder g_dir per test holding the target g_t and the
 * draft g_d, made by pair_setup and removed by pair_teardown:
 *     TestSuite(name, .init = pair_setup, .fini = pair_teardown, .timeout = 300);
 * Included once by each test file, after testutil.h and criterion.h.
 */
#ifndef SD_TESTS_PAIR_FIXTURE_H
#define SD_TESTS_PAIR_FIXTURE_H

#include <criterion/criterion.h>

#include "testutil.h"

static char g_dir[1024], g_t[2048], g_d[2048];

static void pair_setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
}

static void pair_teardown(void) {
    tu_rmdir(g_dir);
}

#endif
