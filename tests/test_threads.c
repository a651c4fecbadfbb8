/*
 * --threads above the cores this process may use (sd_n_cores(): the affinity mask) is
 * capped at them with one note on stderr, in generate, bench and perplexity and from a
 * config's "threads"; --threads-force keeps it. The count asked is sd_n_cores() + 1, so
 * the test means the same on any machine and stays cheap even uncapped.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/sd_base.h"
#include "testutil.h"
#include "pair_fixture.h"

TestSuite(threads, .init = pair_setup, .fini = pair_teardown, .timeout = 300);

/* Run `specdec ARGS` (exit 0 asserted); its stderr, malloc'd. */
static char *stderr_of(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    char *err = NULL;
    int rc = tu_run(cmd, NULL, &err);
    cr_assert_eq(rc, 0, "'%s' exited %d: %s", args, rc, err);
    return err;
}

/* err holds the cap note: the asked count, the cores, "using N". */
static void expect_capped(const char *err, int asked, int cores, const char *what) {
    char want[128];
    snprintf(want, sizeof want, "specdec: %d threads is more than the %d cores", asked, cores);
    cr_assert(strstr(err, want), "%s: no cap note in: %s", what, err);
    snprintf(want, sizeof want, "using %d", cores);
    cr_assert(strstr(err, want), "%s: %s", what, err);
}

Test(threads, generate_and_perplexity_cap) {
    const int cores = sd_n_cores(), asked = cores + 1;
    char args[8192];
    snprintf(args, sizeof args, "generate -m %s -md %s -p t5t6 -n 6 --temp 0 -t %d --json", g_t,
             g_d, asked);
    char *err = stderr_of(args);
    expect_capped(err, asked, cores, "generate");
    free(err);
    snprintf(args, sizeof args,
             "generate -m %s -md %s -p t5t6 -n 6 --temp 0 -t %d --threads-force --json", g_t, g_d,
             asked);
    err = stderr_of(args);
    cr_assert_null(strstr(err, "threads is more than"), "--threads-force: %s", err);
    free(err);
    /* Within the cores: no note. */
    snprintf(args, sizeof args, "generate -m %s -md %s -p t5t6 -n 6 --temp 0 -t %d --json", g_t,
             g_d, cores);
    err = stderr_of(args);
    cr_assert_null(strstr(err, "threads is more than"), "-t %d: %s", cores, err);
    free(err);
    /* From a config. */
    char cfg[2048], json[4096];
    tu_path(cfg, sizeof cfg, g_dir, "c.json");
    snprintf(json, sizeof json, "{\"target\": \"%s\", \"threads\": %d}\n", g_t, asked);
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    snprintf(args, sizeof args, "generate --config %s -p t5 -n 2 --json", cfg);
    err = stderr_of(args);
    expect_capped(err, asked, cores, "config");
    free(err);
    /* perplexity. */
    char text[2048];
    tu_path(text, sizeof text, g_dir, "t.txt");
    cr_assert_eq(tu_write_file(text, "t5t6t7t8\n", 9), 0);
    snprintf(args, sizeof args, "perplexity -m %s -f %s -t %d", g_t, text, asked);
    err = stderr_of(args);
    expect_capped(err, asked, cores, "perplexity");
    free(err);
}

/* bench records the thread count it ran with. */
static int bench_threads(const char *extra) {
    char json_path[2048], args[8192];
    tu_path(json_path, sizeof json_path, g_dir, "b.json");
    snprintf(args, sizeof args,
             "bench -m %s -md %s -p t5t6 --runs 1 -n 6 -k 2 --warmup 0 --reps 1 %s --json %s", g_t,
             g_d, extra, json_path);
    free(stderr_of(args));
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    int t = (int)json_integer_value(json_object_get(json_object_get(root, "machine"), "threads"));
    json_decref(root);
    return t;
}

Test(threads, bench_cap) {
    const int cores = sd_n_cores(), asked = cores + 1;
    char extra[128];
    snprintf(extra, sizeof extra, "-t %d", asked);
    cr_assert_eq(bench_threads(extra), cores, "bench ran with more threads than cores");
    snprintf(extra, sizeof extra, "-t %d --threads-force", asked);
    cr_assert_eq(bench_threads(extra), asked, "--threads-force was not kept");
}
