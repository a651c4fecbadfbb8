/*
 * The memory roof of `specdec bench` (tools/roof.c), white-box: the file is
 * compiled into this test (the CLI is not part of the library).
 *  - every read kernel this CPU runs (scalar, AVX2, AVX-512) returns the wrapping sum of
 *    all 64-bit words of its range, computed here by a plain loop: a kernel that skipped
 *    a load would report a bandwidth it did not read;
 *  - the per-thread slices cover the buffer exactly, contiguous and page-aligned, for
 *    thread counts that do not divide it;
 *  - sd_cli_roof_measure reports what it measured (threads, passes, buffer, kernel,
 *    best >= median > 0), picks the widest kernel the CPU has by default, and rejects
 *    bad arguments and kernels the CPU lacks with SD_ERR_ARG / SD_ERR_UNSUPPORTED;
 *  - the CLI: `bench --roof --json` and `bench --kernels --no-roof` JSON fields, and the
 *    usage error for an unknown --roof-kernel.
 * Speed goals (the probe reaching a plain loop) are a benchmark: scripts/roof_check.sh.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/roof.c"
#include "testutil.h"

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cpu_has(const char *k) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!strcmp(k, "avx512")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(k, "avx2")) return __builtin_cpu_supports("avx2");
#endif
    return !strcmp(k, "scalar");
}

Test(roof, kernels_read_every_word) {
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    enum { MAXB = 3 * 4096 };
    uint64_t *buf = aligned_alloc(64, MAXB);
    cr_assert_not_null(buf);
    uint64_t seed = 12345;
    for (size_t i = 0; i < MAXB / 8; i++)
        buf[i] = splitmix(&seed);
    int tested = 0;
    for (size_t k = 0; k < 3; k++) {
        const char *name = NULL;
        read_fn fn = pick_kernel(names[k], &name);
        if (!cpu_has(names[k])) {
            cr_assert_null(fn, "%s offered on a CPU without it", names[k]);
            continue;
        }
        cr_assert_not_null(fn, "%s not offered", names[k]);
        cr_assert_str_eq(name, names[k]);
        /* Lengths that are multiples of every kernel's step (512 B), offsets too. */
        for (size_t off = 0; off < MAXB; off += 512)
            for (size_t len = 512; off + len <= MAXB; len += 1536) {
                uint64_t want = 0;
                for (size_t i = off / 8; i < (off + len) / 8; i++)
                    want += buf[i];
                cr_assert_eq(fn((const unsigned char *)buf + off, len), want,
                             "%s: offset %zu length %zu", names[k], off, len);
            }
        tested++;
    }
    cr_assert_geq(tested, 1);
    free(buf);
}

Test(roof, slices_cover_the_buffer) {
    for (int64_t mib = 1; mib <= 3; mib++)
        for (int32_t t = 1; t <= 13; t++) {
            roof_run r = {0};
            r.bytes = (size_t)mib << 20;
            r.threads = t;
            size_t end = 0;
            for (int32_t i = 0; i < t; i++) {
                size_t b, n;
                slice(&r, i, &b, &n);
                cr_assert_eq(b, end, "mib %lld threads %d: slice %d starts at %zu, expected %zu",
                             (long long)mib, t, i, b, end);
                cr_assert_eq(b % ROOF_GRAIN, 0);
                cr_assert_eq(n % ROOF_GRAIN, 0);
                end = b + n;
            }
            cr_assert_eq(end, r.bytes, "mib %lld threads %d: slices end at %zu", (long long)mib, t,
                         end);
        }
}

Test(roof, measure_reports_what_it_measured) {
    const char *widest = cpu_has("avx512") ? "avx512" : cpu_has("avx2") ? "avx2" : "scalar";
    static const int32_t threads[] = {1, 2, 3};
    for (size_t i = 0; i < 3; i++) {
        sd_cli_roof r;
        sd_error err = {0};
        cr_assert_eq(sd_cli_roof_measure(8, threads[i], 3, NULL, &r, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(r.threads, threads[i]);
        cr_assert_eq(r.passes, 3);
        cr_assert_eq(r.bytes, (size_t)8 << 20);
        cr_assert_str_eq(r.kernel, widest);
        cr_assert(r.gbps > 0 && r.gbps >= r.gbps_median && r.gbps_median > 0, "%g / %g", r.gbps,
                  r.gbps_median);
    }
    sd_cli_roof r;
    sd_error err = {0};
    cr_assert_eq(sd_cli_roof_measure(4, 2, 2, "scalar", &r, &err), SD_OK, "%s", err.msg);
    cr_assert_str_eq(r.kernel, "scalar");
}

Test(roof, bad_arguments) {
    sd_cli_roof r;
    sd_error err = {0};
    cr_assert_eq(sd_cli_roof_measure(0, 1, 1, NULL, &r, &err), SD_ERR_ARG);
    cr_assert_eq(sd_cli_roof_measure(8, 0, 1, NULL, &r, &err), SD_ERR_ARG);
    cr_assert_eq(sd_cli_roof_measure(8, 1, 0, NULL, &r, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "passes") != NULL, "%s", err.msg);
    cr_assert_eq(sd_cli_roof_measure(8, 1, 1, "sse9", &r, &err), SD_ERR_UNSUPPORTED);
    if (!cpu_has("avx512")) {
        cr_assert_eq(sd_cli_roof_measure(8, 1, 1, "avx512", &r, &err), SD_ERR_UNSUPPORTED);
        cr_assert(strstr(err.msg, "avx512") != NULL, "%s", err.msg);
    }
}

/* ---- through the binary */

static json_t *run_json(const char *args, const char *path) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s bench %s --json %s", SD_BINARY, args, path);
    char *out = NULL, *errs = NULL;
    const int st = tu_run(cmd, &out, &errs);
    cr_assert_eq(st, 0, "%s: exit %d: %s", cmd, st, errs ? errs : "");
    free(out);
    free(errs);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    cr_assert_not_null(root, "%s: not JSON: %s", path, je.text);
    return root;
}

Test(roof, cli_roof_json) {
    char dir[1024], path[2048];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    tu_path(path, sizeof path, dir, "roof.json");
    json_t *root = run_json("--roof --bw-mib 8 -t 2 --reps 3", path);
    cr_assert_str_eq(json_string_value(json_object_get(root, "mode")), "roof");
    json_t *roof = json_object_get(root, "roof");
    cr_assert_not_null(roof);
    const char *keys[] = {"t1", "tn"};
    const int want_threads[] = {1, 2};
    for (int i = 0; i < 2; i++) {
        json_t *o = json_object_get(roof, keys[i]);
        cr_assert(json_is_object(o), "roof.%s", keys[i]);
        cr_assert_eq(json_integer_value(json_object_get(o, "threads")), want_threads[i]);
        cr_assert_eq(json_integer_value(json_object_get(o, "buffer_mib")), 8);
        cr_assert_eq(json_integer_value(json_object_get(o, "passes")), 10, "max(10, --reps)");
        cr_assert(json_number_value(json_object_get(o, "gbps")) > 0);
        cr_assert(json_number_value(json_object_get(o, "gbps")) >=
                  json_number_value(json_object_get(o, "gbps_median")));
    }
    json_decref(root);
    root = run_json("--roof --bw-mib 8 -t 1 --roof-kernel scalar", path);
    cr_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_object_get(root, "roof"), "tn"), "kernel")),
                     "scalar");
    json_decref(root);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s bench --roof --roof-kernel sse9", SD_BINARY);
    char *errs = NULL;
    cr_assert_eq(tu_run(cmd, NULL, &errs), 2);
    cr_assert(strstr(errs, "--roof-kernel") != NULL, "%s", errs);
    free(errs);
    tu_rmdir(dir);
}

Test(roof, cli_kernels_without_roof) {
    char dir[1024], path[2048], t[2048], d[2048], args[8192];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    cr_assert_eq(tu_make_test_pair(dir, t, sizeof t, d, sizeof d), 0);
    tu_path(path, sizeof path, dir, "k.json");
    snprintf(args, sizeof args, "--kernels --no-roof -m %s -t 1 --reps 1 --prefill 4 --pos 4", t);
    json_t *root = run_json(args, path);
    cr_assert(json_is_null(json_object_get(root, "roof")));
    json_t *m = json_array_get(json_object_get(root, "models"), 0);
    cr_assert(json_is_null(json_object_get(m, "fraction_of_bandwidth")));
    json_t *r0 = json_object_get(json_array_get(json_object_get(m, "verify"), 0), "roofline");
    cr_assert(json_is_object(r0));
    cr_assert(json_is_null(json_object_get(r0, "mem_bound_ms")), "no roof: no memory bound");
    cr_assert(json_number_value(json_object_get(m, "decode_ms")) > 0);
    json_decref(root);
    tu_rmdir(dir);
}
