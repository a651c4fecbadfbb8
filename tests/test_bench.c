/*
 * specdec bench and specdec synth, through the binary:
 *   - the A/B bench JSON carries every documented field (per-run records and the
 *     per-K summary), greedy speculative runs match target-alone runs, and the
 *     predicted speedup is the stated formula of the recorded a, c and v;
 *   - bench --kernels JSON carries bandwidth, decode GB/s, verification costs and
 *     prefill throughput;
 *   - synth --preset tiny writes loadable, deterministic, never-all-zero models whose
 *     vocabularies pair, and whose greedy acceptance falls when --noise rises.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "testutil.h"

static char g_dir[1024];
static char g_t[2048], g_d[2048], g_prompts[2048];

static void write_file(const char *path, const char *text) {
    cr_assert_eq(tu_write_file(path, text, strlen(text)), 0, "cannot write %s", path);
}

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    cr_assert_eq(tu_make_test_pair(g_dir, g_t, sizeof g_t, g_d, sizeof g_d), 0);
    write_file(tu_path(g_prompts, sizeof g_prompts, g_dir, "prompts.txt"),
               "t5t6t7\n\nt10t11t12t13\n");
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(bench, .init = setup, .fini = teardown, .timeout = 600);

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    cr_assert_not_null(root, "%s: not JSON: %s (line %d)", path, je.text, je.line);
    return root;
}

/* obj[key] must exist (and be a number when want_num). */
static json_t *need(json_t *obj, const char *key, int want_num, const char *where) {
    json_t *v = json_object_get(obj, key);
    cr_assert_not_null(v, "%s: missing '%s'", where, key);
    if (want_num) cr_assert(json_is_number(v), "%s: '%s' is not a number", where, key);
    return v;
}

static double num(json_t *obj, const char *key, const char *where) {
    return json_number_value(need(obj, key, 1, where));
}

static void run_ok(const char *cmd, char **out_keep) {
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "'%s' exited %d: %s", cmd, rc, err ? err : "");
    if (out_keep)
        *out_keep = out;
    else
        free(out);
    free(err);
}

static void check_side(json_t *side, const char *where) {
    cr_assert(json_is_object(side), "%s: missing", where);
    json_t *tps = need(side, "tokens_per_s", 0, where);
    const double med = num(tps, "median", where), mn = num(tps, "min", where),
                 mx = num(tps, "max", where);
    cr_assert(mn > 0 && mn <= med && med <= mx, "%s: tokens/s %g %g %g", where, mn, med, mx);
    for (int i = 0; i < 2; i++) {
        json_t *p = need(side, i ? "itl_ms" : "ttft_ms", 0, where);
        const double p50 = num(p, "p50", where), p90 = num(p, "p90", where);
        cr_assert(p50 >= 0 && p50 <= p90, "%s: %s p50 %g p90 %g", where, i ? "itl" : "ttft", p50,
                  p90);
    }
    need(side, "tokens_per_pass", 1, where);
    need(side, "n_generated", 1, where);
}

Test(bench, ab_json_has_every_field) {
    char json_path[2048], cmd[32768];
    tu_path(json_path, sizeof json_path, g_dir, "ab.json");
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -md %s -f %s --runs 2 --k-list 1,2 -n 16 -t 1 -c 64 --warmup 0 "
             "--reps 3 --json %s",
             SD_BINARY, g_t, g_d, g_prompts, json_path);
    char *out = NULL;
    run_ok(cmd, &out);
    cr_assert(strstr(out, "speedup"), "no table on stdout: %s", out);
    free(out);
    json_t *root = load_json(json_path);
    need(root, "target", 0, "root");
    need(root, "draft", 0, "root");
    need(root, "target_weight_bytes", 1, "root");
    need(root, "machine", 0, "root");
    need(root, "params", 0, "root");
    json_t *costs = need(root, "costs", 0, "root");
    const double c_top = num(costs, "c", "costs");
    cr_assert(c_top > 0);
    cr_assert(json_is_true(need(root, "greedy_match", 0, "root")));

    json_t *sum = need(root, "summary", 0, "root");
    cr_assert_eq(json_array_size(sum), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *s = json_array_get(sum, i);
        const int k = (int)json_integer_value(need(s, "k", 0, "summary"));
        cr_assert_eq(k, (int)i + 1);
        check_side(need(s, "target", 0, "summary"), "summary.target");
        json_t *spec = need(s, "spec", 0, "summary");
        check_side(spec, "summary.spec");
        json_t *pp = need(spec, "per_position_acceptance", 0, "summary.spec");
        cr_assert_eq(json_array_size(pp), (size_t)k);
        json_t *spd = need(s, "speedup", 0, "summary");
        const double smed = num(spd, "median", "speedup");
        cr_assert(num(spd, "min", "speedup") <= smed && smed <= num(spd, "max", "speedup"));
        const double a = num(s, "acceptance_rate", "summary");
        cr_assert(a >= 0 && a <= 1);
        const double acc_pass = num(s, "mean_accepted_per_pass", "summary");
        cr_assert(acc_pass >= 0 && acc_pass <= k);
        const double c = num(s, "c", "summary"), v = num(s, "v", "summary");
        cr_assert(c > 0 && v > 0);
        cr_assert(fabs(c - c_top) <= 1e-9 * c_top);
        need(s, "t_target_step_ms", 1, "summary");
        need(s, "t_draft_step_ms", 1, "summary");
        need(s, "t_verify_pass_ms", 1, "summary");
        const double pred = num(s, "predicted_speedup", "summary");
        const double want =
            a >= 1.0 ? (k + 1) / (k * c + v) : (1 - pow(a, k + 1)) / ((1 - a) * (k * c + v));
        cr_assert(fabs(pred - want) <= 1e-5 * want, "K=%d: predicted %g, formula %g", k, pred,
                  want);
        cr_assert(json_is_true(need(s, "greedy_match", 0, "summary")));
    }

    json_t *runs = need(root, "runs", 0, "root");
    cr_assert_eq(json_array_size(runs), 2 * 2 * 2, "2 K values x 2 runs x 2 sides");
    const char *run_keys[] = {"k",
                              "run",
                              "prompt_index",
                              "seed",
                              "side",
                              "n_generated",
                              "tokens_per_s",
                              "ttft_ms",
                              "itl_ms",
                              "acceptance_rate",
                              "tokens_per_pass",
                              "per_position_acceptance",
                              "n_target_passes",
                              "n_drafted",
                              "n_accepted",
                              "t_draft_ms",
                              "t_verify_ms"};
    int n_spec = 0;
    for (size_t i = 0; i < json_array_size(runs); i++) {
        json_t *r = json_array_get(runs, i);
        for (size_t j = 0; j < sizeof run_keys / sizeof run_keys[0]; j++)
            need(r, run_keys[j], 0, "run");
        const char *side = json_string_value(json_object_get(r, "side"));
        cr_assert_not_null(side);
        /* ABAB: target alone first, then speculative, with the same seed and prompt. */
        cr_assert_str_eq(side, i % 2 ? "spec" : "target");
        const json_int_t n_gen = json_integer_value(json_object_get(r, "n_generated"));
        cr_assert(n_gen >= 1 && n_gen <= 16, "n_generated %lld", (long long)n_gen);
        if (i % 2) {
            json_t *prev = json_array_get(runs, i - 1);
            cr_assert(json_equal(json_object_get(r, "seed"), json_object_get(prev, "seed")));
            cr_assert(json_equal(json_object_get(r, "prompt_index"),
                                 json_object_get(prev, "prompt_index")));
            cr_assert(json_is_true(need(r, "greedy_match", 0, "run")));
            cr_assert(json_equal(json_object_get(r, "n_generated"),
                                 json_object_get(prev, "n_generated")));
            need(r, "speedup", 1, "run");
            n_spec++;
        }
    }
    cr_assert_eq(n_spec, 4);
    json_decref(root);
}

/* A pass's roofline (bench_kernels.c), recomputed from the fields it derives from: the
 * bytes are the model's streamed bytes, the multiply-adds params * tokens, the memory
 * bound bytes / the roof measured before the models, the compute bound multiply-adds /
 * the kernel set's peak (null on the scalar set), the larger bound named, and the
 * fraction bound / measured time. */
static void check_roofline(json_t *r, json_t *machine, json_t *mo, double n_tok, double ms) {
    const double rel = 1e-6;
    const double bytes = num(r, "bytes", "roofline"), macs = num(r, "macs", "roofline");
    cr_assert(fabs(bytes - num(mo, "streamed_bytes", "model")) <= rel * bytes);
    cr_assert(fabs(macs - n_tok * num(mo, "params", "model")) <= rel * macs);
    const double mem = num(r, "mem_bound_ms", "roofline");
    const double want_mem = bytes / (num(machine, "mem_read_gbps_before", "machine") * 1e9) * 1e3;
    cr_assert(fabs(mem - want_mem) <= rel * want_mem, "mem bound %g, want %g", mem, want_mem);
    json_t *peak = json_object_get(machine, "peak_macs_per_s");
    double bound = mem;
    if (json_is_number(peak)) {
        const double cmp = num(r, "compute_bound_ms", "roofline");
        const double want = macs / json_number_value(peak) * 1e3;
        cr_assert(fabs(cmp - want) <= rel * want, "compute bound %g, want %g", cmp, want);
        if (cmp > mem) bound = cmp;
    } else {
        cr_assert(json_is_null(json_object_get(r, "compute_bound_ms")));
    }
    const char *name = json_string_value(json_object_get(r, "bound"));
    cr_assert_not_null(name);
    cr_assert_str_eq(name, bound == mem ? "memory" : "compute");
    const double frac = num(r, "roof_fraction", "roofline");
    cr_assert(fabs(frac - bound / ms) <= 1e-4 * (bound / ms), "fraction %g, want %g", frac,
              bound / ms);
}

Test(bench, kernels_json) {
    char json_path[2048], cmd[32768];
    tu_path(json_path, sizeof json_path, g_dir, "kernels.json");
    snprintf(cmd, sizeof cmd,
             "%s bench --kernels -m %s -md %s -t 1 --bw-mib 16 --reps 3 --prefill 16 --pos 16 "
             "--json %s",
             SD_BINARY, g_t, g_d, json_path);
    run_ok(cmd, NULL);
    json_t *root = load_json(json_path);
    json_t *m = need(root, "machine", 0, "root");
    cr_assert(num(m, "mem_read_gbps", "machine") > 0);
    json_t *models = need(root, "models", 0, "root");
    cr_assert_eq(json_array_size(models), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *mo = json_array_get(models, i);
        cr_assert(num(mo, "weight_bytes", "model") > 0);
        cr_assert(num(mo, "params", "model") > 0);
        cr_assert(num(mo, "decode_ms", "model") > 0);
        cr_assert(num(mo, "decode_gbps", "model") > 0);
        need(mo, "fraction_of_bandwidth", 1, "model");
        json_t *ver = need(mo, "verify", 0, "model");
        cr_assert_eq(json_array_size(ver), 17, "K+1 = 1..17");
        for (size_t j = 0; j < 17; j++) {
            json_t *e = json_array_get(ver, j);
            cr_assert_eq(json_integer_value(json_object_get(e, "n_tokens")), (json_int_t)j + 1);
            cr_assert(num(e, "ms", "verify") > 0);
            if (j == 0) cr_assert(fabs(num(e, "rel_decode", "verify") - 1.0) < 1e-12);
            check_roofline(need(e, "roofline", 0, "verify"), m, mo, (double)j + 1,
                           num(e, "ms", "verify"));
        }
        json_t *rel = need(mo, "verify_rel_decode", 0, "model");
        need(rel, "5", 1, "verify_rel_decode");
        need(rel, "9", 1, "verify_rel_decode");
        json_t *pre = need(mo, "prefill", 0, "model");
        cr_assert_eq(json_integer_value(json_object_get(pre, "n_tokens")), 16);
        cr_assert(num(pre, "tokens_per_s", "prefill") > 0);
        cr_assert(num(pre, "gflops", "prefill") > 0);
        check_roofline(need(pre, "roofline", 0, "prefill"), m, mo, 16, num(pre, "ms", "prefill"));
    }
    json_decref(root);
}

/* Every tensor of a GGUF has at least one non-zero byte after its scales. */
static void check_not_all_zero(const char *path) {
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), 0, "%s", err.msg);
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        const unsigned char *b = t->data;
        size_t nz = 0;
        for (size_t j = 0; j < t->nbytes; j++)
            nz += b[j] != 0;
        cr_assert_gt(nz, t->nbytes / 4, "%s: tensor '%s' is mostly zeros", path, t->name);
    }
    sd_gguf_close(g);
}

static double synth_acceptance(const char *dir, const char *noise) {
    char cmd[32768], json_path[4096];
    snprintf(cmd, sizeof cmd, "%s synth --preset tiny --type q8_0 --noise %s --seed 3 -o %s",
             SD_BINARY, noise, dir);
    run_ok(cmd, NULL);
    snprintf(json_path, sizeof json_path, "%s/bench.json", dir);
    snprintf(cmd, sizeof cmd,
             "%s bench --config %s/pair.json -n 32 --runs 4 -k 4 -t 1 --warmup 0 --reps 1 "
             "--json %s",
             SD_BINARY, dir, json_path);
    run_ok(cmd, NULL);
    json_t *root = load_json(json_path);
    cr_assert(json_is_true(json_object_get(root, "greedy_match")));
    json_t *s = json_array_get(json_object_get(root, "summary"), 0);
    const double a = num(s, "acceptance_rate", "summary");
    json_decref(root);
    return a;
}

Test(bench, synth_tiny_pair) {
    char lo[2048], hi[2048], t1[2048], path[4096], path2[4096], cmd[32768];
    tu_path(lo, sizeof lo, g_dir, "synth_lo");
    tu_path(hi, sizeof hi, g_dir, "synth_hi");
    tu_path(t1, sizeof t1, g_dir, "synth_t1");
    const double a_lo = synth_acceptance(lo, "0.003");
    const double a_hi = synth_acceptance(hi, "0.3");
    cr_assert(a_lo > a_hi, "acceptance should fall as noise rises: %g (0.003) vs %g (0.3)", a_lo,
              a_hi);
    cr_assert(a_lo > 0.5, "low noise should give high acceptance, got %g", a_lo);
    cr_log_info("synth tiny: greedy acceptance %.3f at noise 0.003, %.3f at noise 0.3", a_lo, a_hi);

    /* Loadable, shaped as documented, never all zeros, vocabularies pair. */
    sd_error err = {0};
    sd_model *tm = NULL, *dm = NULL;
    snprintf(path, sizeof path, "%s/target.gguf", lo);
    snprintf(path2, sizeof path2, "%s/draft.gguf", lo);
    cr_assert_eq(sd_model_load(path, &tm, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_model_load(path2, &dm, &err), 0, "%s", err.msg);
    const sd_hparams *th = sd_model_hparams(tm), *dh = sd_model_hparams(dm);
    cr_assert_eq(th->n_embd, 128);
    cr_assert_eq(th->n_layer, 4);
    cr_assert_eq(dh->n_embd, 64);
    cr_assert_eq(th->n_vocab, dh->n_vocab);
    cr_assert_eq(sd_vocab_check_pair(sd_model_vocab(tm), path, sd_model_vocab(dm), path2, &err), 0,
                 "%s", err.msg);
    /* The vocabulary has byte tokens, so any text tokenizes. */
    const sd_vocab *v = sd_model_vocab(tm);
    cr_assert_str_eq(sd_vocab_token_text(v, 3), "<0x00>");
    cr_assert_eq(sd_vocab_token_type(v, 3), 6);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cr_assert_eq(
        sd_vocab_tokenize(v, "Hello, w\xc3\xb6rld!", 14, SD_VOCAB_ADD_SPECIAL, &ids, &n_ids, &err),
        0);
    cr_assert_gt(n_ids, 3);
    char *text = NULL;
    size_t text_len = 0;
    cr_assert_eq(sd_vocab_detokenize(v, ids + 1, n_ids - 1, 0, &text, &text_len, &err), 0);
    cr_assert_str_eq(text, "Hello, w\xc3\xb6rld!");
    free(text);
    free(ids);
    sd_model_free(tm);
    sd_model_free(dm);
    check_not_all_zero(path);
    check_not_all_zero(path2);

    /* Deterministic whatever the thread count. */
    snprintf(cmd, sizeof cmd,
             "(OMP_NUM_THREADS=1 %s synth --preset tiny --type q8_0 --noise 0.003 --seed 3 -o %s"
             " && cmp %s/target.gguf %s/target.gguf && cmp %s/draft.gguf %s/draft.gguf)",
             SD_BINARY, t1, lo, t1, lo, t1);
    run_ok(cmd, NULL);
    /* The other types load too. */
    snprintf(cmd, sizeof cmd,
             "(%s synth --preset tiny --type f16 --draft-type q4_0 --only target -o %s && "
             "%s info %s/target.gguf)",
             SD_BINARY, t1, SD_BINARY, t1);
    char *out = NULL;
    run_ok(cmd, &out);
    cr_assert(strstr(out, "f16"), "%s", out);
    free(out);
    char sub[2048];
    for (int i = 0; i < 3; i++) {
        const char *names[3] = {"synth_lo", "synth_hi", "synth_t1"};
        tu_path(sub, sizeof sub, g_dir, names[i]);
        tu_rmdir(sub);
    }
}

Test(bench, usage_errors) {
    char cmd[32768];
    const char *bad[] = {
        "synth --preset huge -o /tmp/x", "synth --noise 0 -o /tmp/x", "synth --type q3_k -o /tmp/x",
        "synth --preset tiny",           "bench --k-list 1,0",        "bench --runs 0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, bad[i]);
        char *err = NULL;
        int rc = tu_run(cmd, NULL, &err);
        cr_assert_eq(rc, 2, "'%s' exited %d (want 2)", bad[i], rc);
        cr_assert(err && strncmp(err, "specdec: ", 9) == 0, "'%s': stderr '%s'", bad[i], err);
        free(err);
    }
    snprintf(cmd, sizeof cmd, "%s bench -m %s -md /nonexistent.gguf -p hi", SD_BINARY, g_t);
    char *err = NULL;
    cr_assert_eq(tu_run(cmd, NULL, &err), 1);
    cr_assert(strstr(err, "/nonexistent.gguf"), "%s", err);
    free(err);
}
