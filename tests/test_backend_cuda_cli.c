/*
 * tests/test_backend_cuda_cli.c: the device flags without a GPU (what CI sees): the CUDA
 * backend's init names why it cannot run ("no CUDA device found (cudaGetDeviceCount: ...)"
 * in a CUDA build, "built without CUDA" in a CPU build); `--device cuda` fails with that one
 * line; llama.cpp's `-ngl 99` gives a one-line note and runs on the CPU; `--tensor-split 2
 * --device cpu` (simulated ranks) runs; unequal `-ts` shares, `-sm layer` and a bad config
 * "device" are refused with one line. Where a GPU is present the no-GPU cases skip.
 *
 * The CUDA backend is a module loaded on demand (runtime/backend/cuda/sd_cuda.h): a CPU run,
 * `specdec --version` and a CPU session map none of libcudart, cuBLAS, NCCL or the module
 * (checked in /proc/self/maps in-process and with the dynamic loader's own LD_DEBUG=libs
 * trace of the program, each with a positive control that shows the check can fail); a
 * missing module, a file that is not a shared object and a shared object that is not the
 * module are one-line errors naming the file.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/sd_backend.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"
#include "pair_fixture.h"

TestSuite(device_cli, .init = pair_setup, .fini = pair_teardown, .timeout = 300);

/* The program under test: SD_BINARY, or $SD_TEST_SPECDEC (scripts/gpu_check.sh runs these
 * tests from a carried folder, where the build's path does not exist). */
static const char *specdec_bin(void) {
    const char *e = getenv("SD_TEST_SPECDEC");
    return e && *e ? e : SD_BINARY;
}

static int gpu_present(void) {
    int32_t n = 0;
    return sd_backend_device_count(SD_DEVICE_CUDA, &n, NULL) == SD_OK && n > 0;
}

/* The reason the CUDA backend gives when it cannot run here. */
static void check_unavailable_reason(const char *msg) {
#ifdef SD_TEST_CUDA_BUILD
    cr_assert(strstr(msg, "no CUDA device found (cudaGetDeviceCount: ") ||
                  strstr(msg, "cannot run this build's kernels"),
              "%s", msg);
#else
    cr_assert(strstr(msg, "built without CUDA"), "%s", msg);
#endif
}

Test(device_cli, cuda_init_says_why_it_cannot_run) {
    if (gpu_present()) cr_skip_test("a CUDA device is present: nothing to refuse");
    sd_backend_params p = {0};
    p.n_batch = 4, p.max_cols = 64, p.n_ctx = 16;
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_backend_init(SD_DEVICE_CUDA, &p, &be, &err), SD_ERR_UNSUPPORTED, "%s", err.msg);
    cr_assert_null(be);
    check_unavailable_reason(err.msg);
    int32_t n = 7;
    sd_error_clear(&err);
    cr_assert_eq(sd_backend_device_count(SD_DEVICE_CUDA, &n, &err), SD_ERR_UNSUPPORTED);
    cr_assert_eq(n, 0);
    check_unavailable_reason(err.msg);
    /* A session on the GPU fails the same way, and leaves nothing behind (LSan). */
    sd_model *m = NULL;
    sd_error_clear(&err);
    cr_assert_eq(sd_model_load(g_t, &m, &err), 0, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sp.device = SD_DEVICE_CUDA;
    sd_session *s = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_ERR_UNSUPPORTED, "%s", err.msg);
    cr_assert_null(s);
    check_unavailable_reason(err.msg);
    sp.n_split = 2; /* a split over GPUs too */
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), SD_ERR_UNSUPPORTED, "%s", err.msg);
    cr_assert_null(s);
    sd_model_free(m);
}

/* Run `specdec ARGS`: exit status, stdout and stderr (malloc'd). */
static int run(const char *args, char **out, char **err) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s", specdec_bin(), args);
    return tu_run(cmd, out, err);
}

/* A failing run with one stderr line "specdec: ..." containing needle. */
static void expect_one_line_error(const char *args, int want_rc, const char *needle) {
    char *out = NULL, *err = NULL;
    const int rc = run(args, &out, &err);
    cr_assert_eq(rc, want_rc, "'%s' exited %d: %s", args, rc, err ? err : "");
    cr_assert(err && strncmp(err, "specdec: ", 9) == 0, "'%s': stderr '%s'", args, err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': expected one stderr line, got '%s'", args, err);
    cr_assert(strstr(err, needle), "'%s': '%s' does not mention '%s'", args, err, needle);
    free(out);
    free(err);
}

Test(device_cli, device_cuda_without_gpu_is_one_clear_line) {
    if (gpu_present()) cr_skip_test("a CUDA device is present: nothing to refuse");
    char args[4200];
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --device cuda", g_t);
#ifdef SD_TEST_CUDA_BUILD
    expect_one_line_error(args, 1, "no CUDA device found");
#else
    expect_one_line_error(args, 1, "built without CUDA");
#endif
}

Test(device_cli, ngl_without_gpu_notes_and_runs_on_cpu) {
    if (gpu_present()) cr_skip_test("a CUDA device is present: -ngl uses it");
    char args[4200], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "generate -m %s -md %s -p hi -n 4 --temp 0 -ngl 99 -ngld 99", g_t,
             g_d);
    const int rc = run(args, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(err, "specdec: -ngl: ") && strstr(err, "; running on the CPU\n"), "%s", err);
    cr_assert(strstr(err, "specdec: -ngld: "), "%s", err);
    free(out);
    free(err);
}

Test(device_cli, tensor_split_on_cpu_runs_and_bad_splits_are_refused) {
    char args[4200], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "generate -m %s -p hi -n 4 --temp 0 --device cpu --tensor-split 2",
             g_t);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "generate -m %s -p hi -n 4 -ts 3,1", g_t);
    expect_one_line_error(args, 2, "only equal shares");
    snprintf(args, sizeof args, "generate -m %s -p hi -n 4 -sm layer", g_t);
    expect_one_line_error(args, 2, "-sm row or --tensor-split N");
    snprintf(args, sizeof args, "generate -m %s -p hi -n 4 --device tpu", g_t);
    expect_one_line_error(args, 2, "expected cpu or cuda");
    /* The test model has 2 KV heads: 3 ranks cannot hold whole heads. */
    snprintf(args, sizeof args, "generate -m %s -p hi -n 4 --device cpu -ts 1,1,1", g_t);
    expect_one_line_error(args, 1, "n_head_kv 2 is not divisible by 3");
}

Test(device_cli, config_device_key) {
    char cfg[2100], args[4200], *out = NULL, *err = NULL;
    tu_path(cfg, sizeof cfg, g_dir, "c.json");
    char text[4400];
    snprintf(text, sizeof text, "{\"target\": \"%s\", \"device\": \"cpu\", \"tensor_split\": 2}",
             g_t);
    cr_assert_eq(tu_write_file(cfg, text, strlen(text)), 0);
    snprintf(args, sizeof args, "generate --config %s -p hi -n 3 --temp 0", cfg);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    snprintf(text, sizeof text, "{\"target\": \"%s\", \"device\": \"gpu0\"}", g_t);
    cr_assert_eq(tu_write_file(cfg, text, strlen(text)), 0);
    expect_one_line_error(args, 1, "key 'device': expected \"cpu\" or \"cuda\"");
}

Test(device_cli, compare_split_against_unsplit_on_cpu) {
    char args[8400], json[2100], *out = NULL, *err = NULL;
    tu_path(json, sizeof json, g_dir, "cmp.json");
    snprintf(args, sizeof args, "compare -m %s --device cpu --tensor-split 2 -n 20 -t 2 --json %s",
             g_t, json);
    cr_assert_eq(run(args, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "single steps: 0 of 17 positions differ"), "%s", out);
    size_t len = 0;
    char *text = (char *)tu_read_file(json, &len);
    cr_assert_not_null(text);
    cr_assert(strstr(text, "\"batch_invariant\": true"), "%s", text);
    cr_assert(strstr(text, "\"top1_agreement\": 1.0"), "%s", text);
    free(text);
    free(out);
    free(err);
    if (gpu_present()) return;
    snprintf(args, sizeof args, "compare -m %s -n 4", g_t); /* --device cuda by default */
#ifdef SD_TEST_CUDA_BUILD
    expect_one_line_error(args, 1, "no CUDA device found");
#else
    expect_one_line_error(args, 1, "built without CUDA");
#endif
}

/* ---- the module is loaded only when a CUDA device is asked for ---- */

/* /proc/self/maps, malloc'd (proc files have no size: read to the end). */
static char *read_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f, "cannot open /proc/self/maps");
    size_t n = 0, cap = 1 << 16;
    char *b = malloc(cap);
    cr_assert_not_null(b);
    for (size_t got; (got = fread(b + n, 1, cap - 1 - n, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            b = realloc(b, cap);
            cr_assert_not_null(b);
        }
    }
    fclose(f);
    b[n] = '\0';
    return b;
}

/* 1 if this process maps a file whose name contains needle. */
static int maps_have(const char *needle) {
    char *maps = read_maps();
    const int found = strstr(maps, needle) != NULL;
    free(maps);
    return found;
}

static const char *const k_cuda_libs[] = {"libcudart", "libcublas", "libnccl", "libspecdec_cuda"};

Test(device_cli, cpu_session_maps_no_cuda_library) {
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(g_t, &m, &err), 0, "%s", err.msg);
    sd_session_params sp = sd_session_default_params();
    sd_session *s = NULL;
    cr_assert_eq(sd_session_init(m, &sp, &s, &err), 0, "%s", err.msg);
    const int32_t toks[3] = {1, 5, 9};
    float *logits = malloc((size_t)sd_model_hparams(m)->n_vocab * sizeof(float));
    cr_assert_eq(sd_session_eval(s, toks, 3, logits, 1, &err), 0, "%s", err.msg);
    cr_assert(maps_have("libc.so"), "the maps check sees libc"); /* the check works */
    for (size_t i = 0; i < sizeof k_cuda_libs / sizeof k_cuda_libs[0]; i++)
        cr_assert(!maps_have(k_cuda_libs[i]), "a CPU session mapped %s", k_cuda_libs[i]);
    free(logits);
    sd_session_free(s);
    sd_model_free(m);
#ifdef SD_TEST_CUDA_BUILD
    /* Positive control: asking for a CUDA device loads the module and the CUDA runtime. */
    int32_t n = 0;
    sd_backend_device_count(SD_DEVICE_CUDA, &n, NULL);
    cr_assert(maps_have("libspecdec_cuda"), "asking for CUDA did not load the module");
#endif
}

/* The dynamic loader's trace of `specdec ARGS` (LD_DEBUG=libs) names no CUDA library. */
static void expect_no_cuda_loaded(const char *args) {
    char cmd[8400], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "LD_DEBUG=libs %s %s", specdec_bin(), args);
    const int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "'%s' exited %d", args, rc);
    cr_assert(err && strstr(err, "libc.so"), "'%s': no loader trace (LD_DEBUG unsupported?)", args);
    for (size_t i = 0; i < sizeof k_cuda_libs / sizeof k_cuda_libs[0]; i++)
        cr_assert(!strstr(err, k_cuda_libs[i]), "'%s' loaded %s", args, k_cuda_libs[i]);
    free(out);
    free(err);
}

Test(device_cli, version_and_cpu_run_load_no_cuda_library) {
    expect_no_cuda_loaded("--version");
    char args[4200];
    snprintf(args, sizeof args, "generate -m %s -p hi -n 3 --temp 0", g_t);
    expect_no_cuda_loaded(args);
#ifdef SD_TEST_CUDA_BUILD
    /* Positive control: --device cuda loads the module (whether or not a GPU is there; the
     * CUDA runtime is in it or among its dependencies). */
    char cmd[8400], *err = NULL;
    snprintf(cmd, sizeof cmd, "LD_DEBUG=libs %s generate -m %s -p hi -n 2 --device cuda",
             specdec_bin(), g_t);
    tu_run(cmd, NULL, &err);
    cr_assert(err && strstr(err, "libspecdec_cuda"),
              "--device cuda did not load the module: %.2000s", err ? err : "");
    free(err);
#endif
}

/* `SD_CUDA_MODULE=PATH specdec generate --device cuda`: one line naming PATH and why. */
static void expect_module_error(const char *module, const char *needle) {
    char args[8400];
    snprintf(args, sizeof args, "generate -m %s -p hi -n 2 --device cuda", g_t);
    char *out = NULL, *err = NULL, cmd[9000];
    snprintf(cmd, sizeof cmd, "SD_CUDA_MODULE='%s' %s %s", module, specdec_bin(), args);
    const int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 1, "module %s: exit %d: %s", module, rc, err ? err : "");
    cr_assert(err && strncmp(err, "specdec: ", 9) == 0, "stderr '%s'", err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "expected one stderr line, got '%s'", err);
#ifdef SD_TEST_CUDA_BUILD
    cr_assert(strstr(err, module) && strstr(err, needle), "'%s' does not name %s and '%s'", err,
              module, needle);
#else
    (void)needle;
    cr_assert(strstr(err, "built without CUDA"), "%s", err);
#endif
    free(out);
    free(err);
}

/* The path of a shared object this process maps (libm: every C program here has it). */
static void mapped_path(const char *needle, char *out, size_t cap) {
    char *maps = read_maps();
    char *hit = strstr(maps, needle);
    cr_assert_not_null(hit, "no %s in /proc/self/maps", needle);
    char *start = hit;
    while (start > maps && start[-1] != ' ')
        start--;
    char *end = strchr(hit, '\n');
    cr_assert((size_t)(end - start) < cap);
    memcpy(out, start, (size_t)(end - start));
    out[end - start] = '\0';
    free(maps);
}

Test(device_cli, missing_or_broken_module_is_one_line) {
    char bad[2100], so[1024];
    expect_module_error("/nonexistent/libspecdec_cuda.so", "no such file");
    tu_path(bad, sizeof bad, g_dir, "libspecdec_cuda.so");
    cr_assert_eq(tu_write_file(bad, "not a shared object\n", 20), 0);
    expect_module_error(bad, "cannot load the CUDA backend module");
    mapped_path("libm.so", so, sizeof so);
    expect_module_error(so, "is not a specdec CUDA backend module");
    /* The library says the same through its error record. */
    setenv("SD_CUDA_MODULE", bad, 1);
    sd_backend_params p = {0};
    p.n_batch = 4, p.max_cols = 64, p.n_ctx = 16;
    sd_backend *be = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_backend_init(SD_DEVICE_CUDA, &p, &be, &err), SD_ERR_UNSUPPORTED, "%s", err.msg);
    cr_assert_null(be);
#ifdef SD_TEST_CUDA_BUILD
    cr_assert(strstr(err.msg, bad), "%s", err.msg);
#endif
    unsetenv("SD_CUDA_MODULE");
}
