/*
 * The README's scripts as a new user meets them:
 *   - scripts/demo.sh names the package the build cannot find (cmake's own output went to
 *     /dev/null: only "A required package was not found" showed) and says which stage it
 *     is in (here jansson is hidden from pkg-config; the build folder is a temporary one);
 *   - scripts/stories260k.sh reads llama2.c's stories260K from $SD_SHARED_DATA (it looked
 *     in ../shared/data whatever the variable said), and before building anything.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

TestSuite(scripts, .init = setup, .fini = teardown, .timeout = 300);

Test(scripts, demo_names_the_missing_package) {
    char cmd[2048], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "cd %s && SD_BUILD_DIR=%s/build PKG_CONFIG_LIBDIR=%s/no-pkgconfig bash "
             "scripts/demo.sh",
             SD_SOURCE_DIR, g_dir, g_dir);
    const int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "demo.sh: configuring"), "no stage line: %s", err);
    cr_expect(strstr(err, "demo.sh: missing: jansson (Debian: libjansson-dev)"), "%s", err);
    cr_expect(strstr(err, "/build/build.log"), "the log is not named: %s", err);
    cr_expect_null(strstr(err, "demo.sh: building"), "built after a failed configure: %s", err);
    cr_expect(!out || !*out, "%s", out);
    free(out);
    free(err);
}

Test(scripts, stories260k_reads_sd_shared_data) {
    const char *made[] = {"stories260K-f32.gguf", "stories260K-q4_0.gguf", "stories260K-q8_0.gguf"};
    int all = 1;
    for (int i = 0; i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/models/%s", SD_SOURCE_DIR, made[i]);
        all &= access(p, R_OK) == 0;
    }
    if (all)
        cr_skip_test("needs: models/stories260K-*.gguf not made yet (the script then converts "
                     "nothing and never reads the shared data)");
    char cmd[2048], *err = NULL;
    snprintf(cmd, sizeof cmd,
             "cd %s && SD_BUILD_DIR=%s/build SD_SHARED_DATA=%s/elsewhere bash "
             "scripts/stories260k.sh",
             SD_SOURCE_DIR, g_dir, g_dir);
    const int rc = tu_run(cmd, NULL, &err);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    char want[600];
    snprintf(want, sizeof want, "%s/elsewhere/models/stories260K.bin not found", g_dir);
    cr_expect(strstr(err, want), "stderr: %s", err);
    char build[600];
    snprintf(build, sizeof build, "%s/build", g_dir);
    cr_expect_neq(access(build, F_OK), 0, "it built before checking the data");
    free(err);
}
