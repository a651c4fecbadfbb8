/*
 * The README's scripts as a new user meets them:
 *   - scripts/demo.sh names the package the build cannot find (cmake's own output went to
 *     /dev/null: only "A required package was not found" showed) and says which stage it
 *     is in (here jansson is hidden from pkg-config; the build folder is a temporary one);
 *   - scripts/deps.sh, which the three scripts call with the one package list
 *     (scripts/packages.txt): without root or sudo it names the exact apt-get command for
 *     the missing Debian packages and fails; as root it runs apt-get for those only, and
 *     retries a pip package with --break-system-packages where pip refuses an externally
 *     managed Python (dpkg-query, id, sudo, apt-get and python3 are stubs on PATH that
 *     record their arguments: nothing is installed);
 *   - .ci/run, scripts/demo.sh and scripts/test.sh keep no second copy of the list;
 *   - scripts/stories260k.sh reads llama2.c's stories260K from $SD_SHARED_DATA (it looked
 *     in ../shared/data whatever the variable said), and before building anything.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* An executable stub DIR/NAME with the shell text BODY. */
static void stub(const char *name, const char *body) {
    char p[600];
    snprintf(p, sizeof p, "%s/bin/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    fprintf(f, "#!/bin/sh\n%s", body);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(p, 0755), 0);
}

/* dpkg-query reports libjansson-dev (build) and chromium (test, optional) as not
 * installed, everything else as installed. */
static void stub_dpkg(void) {
    char d[600];
    snprintf(d, sizeof d, "%s/bin", g_dir);
    cr_assert_eq(mkdir(d, 0755), 0);
    stub("dpkg-query", "for a; do last=\"$a\"; done\n"
                       "case \"$last\" in libjansson-dev|chromium) echo 'un ';; *) echo 'ii ';; "
                       "esac\n");
    stub("apt-get", "echo \"apt-get $*\" >> \"$STUB_LOG\"\n");
}

static char *deps(const char *args, int *rc, char **err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && STUB_LOG=%s/log PATH=%s/bin:$PATH bash scripts/deps.sh %s",
             SD_SOURCE_DIR, g_dir, g_dir, args);
    *rc = tu_run(cmd, NULL, err);
    char p[600];
    snprintf(p, sizeof p, "%s/log", g_dir);
    size_t n = 0;
    char *log = (char *)tu_read_file(p, &n);
    return log ? log : strdup("");
}

Test(scripts, deps_without_root_names_the_apt_get_command) {
    stub_dpkg();
    stub("id", "echo 1000\n");
    stub("sudo", "exit 1\n");
    int rc;
    char *err = NULL, *log = deps("build test", &rc, &err);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "deps.sh: missing Debian packages; run: sudo apt-get install -y "
                          "--no-install-recommends libjansson-dev\n"),
              "%s", err);
    cr_expect(strstr(err, "optional, not installed (their tests skip): sudo apt-get install -y "
                          "--no-install-recommends chromium\n"),
              "%s", err);
    cr_expect_eq(*log, 0, "apt-get ran: %s", log);
    free(log);
    free(err);
    /* the build group alone (scripts/demo.sh) does not ask for chromium */
    log = deps("build", &rc, &err);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
    cr_expect_null(strstr(err, "chromium"), "%s", err);
    free(log);
    free(err);
}

Test(scripts, deps_as_root_installs_the_missing_and_retries_pip) {
    stub_dpkg();
    stub("id", "echo 0\n");
    /* python3: nothing imports; pip refuses unless --break-system-packages */
    stub("python3", "echo \"python3 $*\" >> \"$STUB_LOG\"\n"
                    "[ \"$1\" = -c ] && exit 1\n"
                    "case \"$*\" in *--break-system-packages*) exit 0;; esac\n"
                    "echo 'error: externally-managed-environment' >&2; exit 1\n");
    int rc;
    char *err = NULL, *log = deps("build test", &rc, &err);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
    cr_expect(strstr(log, "apt-get install -y -qq --no-install-recommends libjansson-dev\n"), "%s",
              log);
    cr_expect(strstr(log, "apt-get install -y -qq --no-install-recommends chromium\n"), "%s", log);
    cr_expect_null(strstr(log, "cmake"), "an installed package was installed again: %s", log);
    cr_expect(strstr(log, "python3 -c import gguf\n"), "%s", log);
    cr_expect(strstr(log, "--break-system-packages gguf\n"), "%s", log);
    cr_expect(strstr(log, "--break-system-packages openai\n"), "%s", log);
    free(log);
    free(err);
    /* --offline installs nothing and names the command */
    char p[600];
    snprintf(p, sizeof p, "%s/log", g_dir);
    cr_assert_eq(unlink(p), 0);
    log = deps("--offline build test", &rc, &err);
    cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "run: sudo apt-get install -y --no-install-recommends libjansson-dev"),
              "%s", err);
    cr_expect_null(strstr(log, "apt-get"), "%s", log);
    cr_expect_null(strstr(log, "pip"), "%s", log);
    free(log);
    free(err);
}

Test(scripts, one_package_list) {
    const char *files[] = {".ci/run", "scripts/demo.sh", "scripts/test.sh"};
    const char *calls[] = {"scripts/deps.sh build test fuzz", "scripts/deps.sh build",
                           "scripts/deps.sh \"${offline[@]}\" build test"};
    for (int i = 0; i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", SD_SOURCE_DIR, files[i]);
        size_t n = 0;
        char *text = (char *)tu_read_file(p, &n);
        cr_assert(text, "%s", p);
        cr_expect(strstr(text, calls[i]), "%s does not call %s", files[i], calls[i]);
        cr_expect_null(strstr(text, "apt-get install -"), "%s installs by itself", files[i]);
        cr_expect_null(strstr(text, "libjansson-dev"), "%s has its own list", files[i]);
        cr_expect_null(strstr(text, "pip install"), "%s installs by itself", files[i]);
        free(text);
    }
}
