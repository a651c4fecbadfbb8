/*
 * `specdec generate`'s sampling and drafting flags end to end (the binary on the tests'
 * random pair): --seed -1 prints the seed it drew and rerunning with that seed prints the
 * same text; -v prints the settings and one line per pass (as many as the JSON's
 * n_target_passes); the statistics print "-" for a rate with nothing drafted; penalties,
 * --min-p and --spec-sampling are taken from flags and from config keys; bad values are
 * one-line usage errors naming the flag, or the config file and key.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "pair_fixture.h"

TestSuite(gen_flags, .init = pair_setup, .fini = pair_teardown, .timeout = 300);

/* The "tokens":[...] array of a JSON output (malloc'd), the part that must repeat. */
static char *tokens_of(const char *json) {
    const char *a = strstr(json, "\"tokens\":["), *b = a ? strchr(a, ']') : NULL;
    cr_assert(a && b, "no tokens in '%s'", json);
    return strndup(a, (size_t)(b - a + 1));
}

/* Run generate with args on the pair; returns the status, stdout and stderr. */
static int gen(const char *args, char **out, char **err) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -md %s -t 1 --no-display-prompt %s", SD_BINARY,
             g_t, g_d, args);
    return tu_run(cmd, out, err);
}

Test(gen_flags, seed_minus_one_is_printed_and_repeats) {
    char *out = NULL, *err = NULL;
    cr_assert_eq(gen("-p t5 -n 24 --temp 0.9 --seed -1", &out, &err), 0, "%s", err);
    const char *s = strstr(err, "--seed -1: seed ");
    cr_assert(s, "no seed printed: %s", err);
    unsigned long long seed = strtoull(s + strlen("--seed -1: seed "), NULL, 10);
    char args[256], *out2 = NULL, *err2 = NULL;
    snprintf(args, sizeof args, "-p t5 -n 24 --temp 0.9 --seed %llu", seed);
    cr_assert_eq(gen(args, &out2, &err2), 0, "%s", err2);
    cr_assert_str_eq(out, out2, "the printed seed does not reproduce the text");
    free(out);
    free(err);
    free(out2);
    free(err2);
}

Test(gen_flags, verbose_prints_every_pass) {
    char *out = NULL, *err = NULL;
    cr_assert_eq(gen("-p t5 -n 20 --temp 0 -v --json", &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "specdec: sampling: temp 0"), "%s", err);
    cr_assert(strstr(err, "specdec: drafting: llm"), "%s", err);
    const char *np = strstr(out, "\"n_target_passes\":");
    cr_assert(np);
    const int passes = atoi(np + strlen("\"n_target_passes\":"));
    /* one table line per pass after the header */
    const char *h = strstr(err, "pass  K  drafted");
    cr_assert(h, "%s", err);
    int lines = 0;
    for (const char *c = strchr(h, '\n'); c && c[1]; c = strchr(c + 1, '\n'))
        lines += c[1] == ' ';
    cr_assert_eq(lines, passes, "%d pass lines, %d passes", lines, passes);
    cr_assert(strstr(out, "\"passes\":["), "no stats.passes in the JSON");
    free(out);
    free(err);
}

Test(gen_flags, rates_with_nothing_drafted_print_a_dash) {
    char *out = NULL, *err = NULL;
    cr_assert_eq(gen("-p t5 -n 8 --temp 0 -cd 1", &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "acceptance rate -"), "%s", err);
    cr_assert(strstr(err, "K drafted       0:"), "%s", err);
    cr_assert(!strstr(err, "0/0"));
    free(out);
    free(err);
}

Test(gen_flags, sampling_flags_and_config_keys) {
    char *a = NULL, *b = NULL, *err = NULL;
    /* penalties change the greedy text; the same settings from a config give the same */
    cr_assert_eq(gen("-p t5 -n 32 --temp 0 --json", &a, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(gen("-p t5 -n 32 --temp 0 --repeat-penalty 1.8 --presence-penalty 0.5 "
                     "--repeat-last-n 16 --json",
                     &b, &err),
                 0, "%s", err);
    free(err);
    char *ta = tokens_of(a), *tb = tokens_of(b);
    cr_assert_str_neq(ta, tb, "the penalties changed nothing");
    char cfg[1200], args[2048];
    tu_path(cfg, sizeof cfg, g_dir, "c.json");
    const char *json = "{\"repeat_penalty\": 1.8, \"presence_penalty\": 0.5, \"repeat_last_n\": "
                       "16, \"min_p\": 0.0, \"spec_sampling\": \"gumbel\"}";
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    snprintf(args, sizeof args, "--config %s -p t5 -n 32 --temp 0 --json", cfg);
    char *c = NULL;
    cr_assert_eq(gen(args, &c, &err), 0, "%s", err);
    free(err);
    char *tc = tokens_of(c);
    cr_assert_str_eq(tb, tc, "the config's penalties differ from the flags'");
    free(ta);
    free(tb);
    free(tc);
    free(a);
    free(b);
    free(c);
    /* Bad values: one line naming the flag or the key. */
    const char *bad[][2] = {{"--min-p 2", "--min-p"},
                            {"--spec-sampling maybe", "--spec-sampling"},
                            {"--repeat-penalty 0", "--repeat-penalty"},
                            {"--repeat-last-n 5000", "--repeat-last-n"},
                            {"--draft-policy sometimes", "--draft-policy"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "-p t5 -n 4 %s", bad[i][0]);
        char *o = NULL, *e = NULL;
        cr_assert_eq(gen(args, &o, &e), 2, "%s: %s", bad[i][0], e);
        cr_assert(strstr(e, bad[i][1]), "%s: '%s'", bad[i][0], e);
        cr_assert_eq(strchr(e, '\n'), e + strlen(e) - 1, "not one line: '%s'", e);
        free(o);
        free(e);
    }
    json = "{\"spec_sampling\": \"maybe\"}";
    cr_assert_eq(tu_write_file(cfg, json, strlen(json)), 0);
    snprintf(args, sizeof args, "--config %s -p t5 -n 4", cfg);
    char *o = NULL, *e = NULL;
    cr_assert_neq(gen(args, &o, &e), 0);
    cr_assert(strstr(e, cfg) && strstr(e, "spec_sampling"), "'%s'", e);
    free(o);
    free(e);
}
