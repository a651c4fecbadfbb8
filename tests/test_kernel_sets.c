/*
 * tests/test_kernel_sets.c: the same GGUF gives the same logits, bit for bit, under every
 * kernel set this CPU runs (SD_KERNELS=scalar, avx2, avxvnni, avx512: matmul and attention
 * kernels), for every weight type: the whole forward pass, not one kernel.
 *
 * A random llama model (F32, rows of 256 so the K-quants apply) is quantized by `specdec
 * quantize` to each weight type; for each, `specdec compare --device cpu` runs under each
 * kernel set and prints the FNV-1a digest of the logits bits of 40 positions (decode path
 * in batches of 16, and the prefill path in one batch); every set must print the same
 * digests, and each run's prefill digest must equal its decode digest (batch invariance
 * across batch shapes). With F16 KV once more, and on SmolLM2-135M-Instruct when it has
 * been fetched (scripts/get_models.sh), which skips with a message otherwise.
 * White-box: quant/cpu/kernels.h says which sets this CPU runs.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quant/cpu/kernels.h"
#include "quant/sd_quant.h"
#include "testutil.h"

static const char *const k_sets[] = {"scalar", "avx2", "avxvnni", "avx512",
                                     "amx"}; /* amx: opt-in */

/* 1 if this CPU runs kernel set `name` (then SD_KERNELS=name selects it). */
static int set_runs(const char *name) {
    return sd_kernel_set_by_name(name) != NULL;
}

/* The two digests of one compare run under kernel set `set`; 0 on success. */
static int digests(const char *model, const char *set, const char *kv, const char *json,
                   char dec[17], char pre[17]) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "SD_KERNELS=%s '%s' compare -m '%s' --device cpu --device-ref cpu -n 40 -t 2 "
             "--kv-type %s --json '%s' >/dev/null 2>&1",
             set, SD_BINARY, model, kv, json);
    if (tu_run(cmd, NULL, NULL) != 0) return -1;
    size_t n = 0;
    char *j = (char *)tu_read_file(json, &n);
    if (!j) return -1;
    const char *d = strstr(j, "\"decode_logits_fnv1a64\": \"");
    const char *p = strstr(j, "\"prefill_logits_fnv1a64\": \"");
    int rc = -1;
    if (d && p) {
        memcpy(dec, d + strlen("\"decode_logits_fnv1a64\": \""), 16);
        memcpy(pre, p + strlen("\"prefill_logits_fnv1a64\": \""), 16);
        dec[16] = pre[16] = '\0';
        rc = 0;
    }
    free(j);
    return rc;
}

/* Every runnable set gives model's digests; returns the number of sets compared. */
static int check_model(const char *dir, const char *model, const char *kv, const char *what) {
    char json[1024], ref_d[17] = "", ref_p[17] = "";
    int n = 0;
    for (size_t si = 0; si < sizeof k_sets / sizeof k_sets[0]; si++) {
        if (!set_runs(k_sets[si])) {
            static int said[sizeof k_sets / sizeof k_sets[0]];
            if (!said[si]++)
                cr_log_info("kernel set %s skipped: this CPU does not run it", k_sets[si]);
            continue;
        }
        char d[17], p[17];
        tu_path(json, sizeof json, dir, "cmp.json");
        cr_assert_eq(digests(model, k_sets[si], kv, json, d, p), 0, "%s: compare failed (%s)", what,
                     k_sets[si]);
        cr_expect_str_eq(d, p, "%s, %s: prefill logits differ from the decode path's", what,
                         k_sets[si]);
        if (n == 0) {
            memcpy(ref_d, d, 17);
            memcpy(ref_p, p, 17);
        } else {
            cr_expect_str_eq(d, ref_d, "%s: kernels %s give other logits than %s", what, k_sets[si],
                             k_sets[0]);
            cr_expect_str_eq(p, ref_p, "%s: kernels %s, prefill path", what, k_sets[si]);
        }
        n++;
    }
    return n;
}

Test(kernel_sets, every_type_same_logits, .timeout = 600) {
    char dir[512], f32[1024], q[1024], cmd[4096];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_vocab = 300;
    sp.n_embd = 256;
    sp.n_ff = 512;
    sp.n_head = 4;
    sp.n_head_kv = 2;
    sp.n_layer = 2;
    tu_path(f32, sizeof f32, dir, "f32.gguf");
    cr_assert_eq(tu_make_llama(f32, &sp), 0);
    static const char *const types[] = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1", "q5_0",
                                        "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};
    int sets = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const char *model = f32;
        if (strcmp(types[ti], "f32") != 0) {
            tu_path(q, sizeof q, dir, "q.gguf");
            snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' %s >/dev/null 2>&1", SD_BINARY, f32,
                     q, types[ti]);
            cr_assert_eq(tu_run(cmd, NULL, NULL), 0, "quantize %s", types[ti]);
            model = q;
        }
        sets = check_model(dir, model, "f32", types[ti]);
        cr_assert_geq(sets, 1);
        if (!strcmp(types[ti], "q4_k")) check_model(dir, model, "f16", "q4_k, F16 KV cache");
    }
    cr_log_info("every weight type: the same logits under %d kernel set(s)", sets);
    tu_rmdir(dir);
}

Test(kernel_sets, smollm2_same_logits, .timeout = 600) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf",
             SD_SOURCE_DIR);
    struct stat st;
    if (stat(path, &st) != 0)
        cr_skip_test("SmolLM2-135M-Instruct.Q4_1.gguf not fetched (bash scripts/get_models.sh)");
    char dir[512];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    const int sets = check_model(dir, path, "f32", "SmolLM2-135M-Instruct Q4_1");
    cr_log_info("SmolLM2: the same logits under %d kernel set(s)", sets);
    tu_rmdir(dir);
}
