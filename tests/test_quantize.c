/*
 * tests/test_quantize.c: `specdec quantize` (runtime/convert/quantize.c) for the new
 * types and the llama.cpp-style mixes, and bad input around them:
 *   - every recipe writes a file whose types follow the documented rules (the K_M mixes'
 *     Q6_K tensors, llama.cpp's K-quant fallbacks for rows not a multiple of 256) and
 *     whose general.file_type is llama.cpp's LLAMA_FTYPE value;
 *   - gguf-py (the llama.cpp project's reader) opens every file and dequantizes every
 *     tensor to within the type's expected error of the F32 source, and to exactly what
 *     our reader + dequantizer give (skipped when gguf-py is missing);
 *   - a NaN or an infinity anywhere in the input is refused with the tensor named;
 *   - unknown type names; a K-quant tensor whose row length is not a multiple of 256
 *     in a file being loaded; scales that decode to NaN / inf.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/sd_quant.h"
#include "runtime/convert/sd_convert.h"
#include "runtime/gguf/sd_gguf.h"
#include "testutil.h"

#define SCRIPT SD_SOURCE_DIR "/scripts/gguf_ref.py"

static char g_dir[256];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(quantize, .init = setup, .fini = teardown);

static const char *python(void) {
    const char *p = getenv("SD_PYTHON");
    return p && *p ? p : "python3";
}

static int have_gguf_py(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s '%s' probe", python(), SCRIPT);
    return tu_run(cmd, NULL, NULL) == 0;
}

/* The file every recipe is tried on: the matrices a llama model has (names and row
 * lengths are all the rules look at) with few rows each, N(0, 1/16) F32 values: 8
 * layers (so the K_M layer rule has layers both ways) of attn_q / attn_v / ffn_up rows
 * of 256 and ffn_down rows of 320 (a multiple of 32, not of 256: the K-quant fallback),
 * token_embd and (tied == 0) output [64, 256], norms [256]. */
static void make_model(const char *path, int tied) {
    enum { ROWS = 16, E = 256, FF = 320, V = 64 };
    static float buf[V * FF];
    uint64_t st = 99;
    sd_gguf_writer *w = sd_gguf_writer_new();
    sd_gguf_set_str(w, "general.architecture", "llama");
    sd_gguf_set_u32(w, "llama.block_count", 8);
    sd_error err = {0};
    char name[64];
    for (int k = -1; k < 8 * 5 + 2; k++) {
        int64_t ne[2] = {E, ROWS};
        uint32_t nd = 2;
        if (k == -1) {
            snprintf(name, sizeof name, "token_embd.weight");
            ne[1] = V;
        } else if (k == 40) {
            snprintf(name, sizeof name, "output_norm.weight");
            nd = 1;
            ne[1] = 1;
        } else if (k == 41) {
            if (tied) continue;
            snprintf(name, sizeof name, "output.weight");
            ne[1] = V;
        } else {
            static const char *const m[] = {"attn_q", "attn_v", "ffn_up", "ffn_down", "attn_norm"};
            snprintf(name, sizeof name, "blk.%d.%s.weight", k / 5, m[k % 5]);
            if (k % 5 == 3) ne[0] = FF;
            if (k % 5 == 4) nd = 1, ne[1] = 1;
        }
        const int64_t n = ne[0] * ne[1];
        for (int64_t j = 0; j < n; j++) { /* Box-Muller from an LCG */
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const double u1 = ((double)(st >> 11) + 0.5) * 0x1p-53;
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const double u2 = (double)(st >> 11) * 0x1p-53;
            buf[j] =
                nd == 1 ? 1.0f : (float)(0.25 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        }
        cr_assert_eq(
            sd_gguf_add_tensor(w, name, SD_TYPE_F32, nd, ne, buf, (size_t)n * sizeof(float), &err),
            SD_OK, "%s", err.msg);
    }
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_OK, "%s", err.msg);
    sd_gguf_writer_free(w);
}

/* llama.cpp's use_more_bits(i, n) */
static int more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type the documented rules give tensor `name` (2-D, ne0 columns) in recipe r. */
static sd_type expected_type(const sd_quant_recipe *r, const char *name, int64_t ne0, int tied) {
    sd_type t = r->base;
    if (r->mix) {
        int layer = -1;
        sscanf(name, "blk.%d.", &layer);
        if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight")))
            t = SD_TYPE_Q6_K;
        else if ((strstr(name, "attn_v.weight") || strstr(name, "ffn_down.weight")) &&
                 more_bits(layer, 8))
            t = SD_TYPE_Q6_K;
    }
    if (ne0 % sd_type_block_elems(t) == 0) return t;
    /* llama.cpp's tensor_type_fallback */
    sd_type f = SD_TYPE_F16;
    if (t == SD_TYPE_Q2_K || t == SD_TYPE_Q3_K) f = SD_TYPE_Q4_0;
    if (t == SD_TYPE_Q4_K) f = SD_TYPE_Q5_0;
    if (t == SD_TYPE_Q5_K) f = SD_TYPE_Q5_1;
    if (t == SD_TYPE_Q6_K) f = SD_TYPE_Q8_0;
    return ne0 % sd_type_block_elems(f) == 0 ? f : SD_TYPE_F16;
}

/* Largest RMSE / RMS(x) expected for Gaussian weights (ours measured on N(0,1): Q2_K
 * 0.287, Q3_K 0.153, Q4_0 0.086, Q4_1 0.078, Q4_K 0.072, Q5_0 0.043, Q5_1 0.038, Q5_K
 * 0.036, Q6_K 0.018, Q8_0 0.0054), with 30% room for the small tensors' spread (4096
 * values: the RMSE estimate itself varies by about 1%). */
static double rel_rmse_bound(sd_type t) {
    switch (t) {
    case SD_TYPE_F32:
        return 0.0;
    case SD_TYPE_F16:
        return 3e-4;
    case SD_TYPE_BF16:
        return 2.5e-3;
    case SD_TYPE_Q8_0:
        return 0.0054 * 1.3;
    case SD_TYPE_Q4_0:
        return 0.086 * 1.3;
    case SD_TYPE_Q4_1:
        return 0.078 * 1.3;
    case SD_TYPE_Q5_0:
        return 0.043 * 1.3;
    case SD_TYPE_Q5_1:
        return 0.038 * 1.3;
    case SD_TYPE_Q2_K:
        return 0.287 * 1.3;
    case SD_TYPE_Q3_K:
        return 0.153 * 1.3;
    case SD_TYPE_Q4_K:
        return 0.072 * 1.3;
    case SD_TYPE_Q5_K:
        return 0.036 * 1.3;
    case SD_TYPE_Q6_K:
        return 0.018 * 1.3;
    default:
        return 0.0;
    }
}

/* Parse one "key": number from a JSON line (the script prints flat objects). */
static double jnum(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    cr_assert_not_null(p, "%s in %s", key, line);
    return strtod(p + strlen(pat), NULL);
}

static void jstr(const char *line, const char *key, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    cr_assert_not_null(p, "%s in %s", key, line);
    p += strlen(pat);
    size_t n = 0;
    while (p[n] && p[n] != '"' && n + 1 < cap) {
        out[n] = p[n];
        n++;
    }
    out[n] = '\0';
}

/* Our reader + dequantizer: RMSE of tensor t of g against the F32 tensor s. */
static double our_rmse(const sd_gguf_tensor *t, const sd_gguf_tensor *s) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->ne[d];
    float *y = malloc(sizeof(float) * (size_t)n);
    cr_assert_eq(sd_dequantize_row((sd_type)t->type, t->data, y, n), 0);
    const float *x = s->data;
    double e = 0;
    for (int64_t j = 0; j < n; j++)
        e += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
    free(y);
    return sqrt(e / (double)n);
}

/* Quantize the test model (tied or not) with recipe rname into g_dir; the output path
 * into out. Checks the types of every tensor, the fallback notes and file_type. */
static void make_and_check(const char *rname, int tied, char *out, size_t cap) {
    sd_quant_recipe r;
    cr_assert_eq(sd_quant_recipe_from_name(rname, &r), 0, "%s", rname);
    char src[512], oname[64];
    tu_path(src, sizeof src, g_dir, tied ? "src-tied.gguf" : "src.gguf");
    snprintf(oname, sizeof oname, "%s-%d.gguf", rname, tied);
    tu_path(out, cap, g_dir, oname);
    make_model(src, tied);
    sd_error err = {0};
    char *logbuf = NULL;
    size_t logn = 0;
    FILE *log = open_memstream(&logbuf, &logn);
    cr_assert_eq(sd_quantize_file_recipe(src, out, &r, log, NULL, NULL, &err), SD_OK, "%s: %s",
                 rname, err.msg);
    fclose(log);
    sd_gguf *g = NULL;
    cr_assert_eq(sd_gguf_open(out, &g, &err), SD_OK, "%s", err.msg);
    int64_t ft = -1;
    cr_assert_eq(sd_gguf_get_i64(g, "general.file_type", &ft, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(ft, (int64_t)r.ftype, "%s: file_type %lld", rname, (long long)ft);
    int n_q6 = 0, n_fallback = 0, n_fallback_want[SD_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        sd_type want = SD_TYPE_F32;
        if (t->n_dims == 2) want = expected_type(&r, t->name, t->ne[0], tied);
        cr_assert_eq(t->type, (uint32_t)want, "%s: %s is %s, expected %s", rname, t->name,
                     sd_type_name(t->type), sd_type_name(want));
        if (want == SD_TYPE_Q6_K && r.base != SD_TYPE_Q6_K) n_q6++;
        if (t->n_dims == 2 && t->ne[0] % sd_type_block_elems(r.base) != 0) {
            n_fallback++;
            n_fallback_want[t->type]++;
        }
    }
    /* One log line per stored type, with the count (not one line per tensor). */
    for (uint32_t ty = 0; ty < SD_TYPE_COUNT; ty++) {
        if (!n_fallback_want[ty]) continue;
        char line[1200];
        snprintf(line, sizeof line, "%s: %d %s stored as %s instead of ", out, n_fallback_want[ty],
                 n_fallback_want[ty] == 1 ? "matrix" : "matrices", sd_type_name(ty));
        const char *at = strstr(logbuf, line);
        cr_assert_not_null(at, "%s: no line '%s' in the log: %s", rname, line, logbuf);
        cr_assert_null(strstr(at + 1, line), "%s: '%s' twice: %s", rname, line, logbuf);
    }
    /* the classifier + attn_v of layers 0, 3, 6, 7 (ffn_down of those layers wants Q6_K
     * too, but its rows of 320 fall back to Q8_0) */
    if (r.mix) cr_assert_eq(n_q6, 5, "%s: Q6_K tensors %d", rname, n_q6);
    if (sd_type_block_elems(r.base) == 256)
        cr_assert_eq(n_fallback, 8, "%s: ffn_down of every layer falls back", rname);
    free(logbuf);
    sd_gguf_close(g);
}

static const char *const k_recipes[] = {"q4_1", "q5_0",   "q5_1",   "q2_k", "q3_k", "q4_k", "q5_k",
                                        "q6_k", "q4_k_m", "q5_k_m", "q8_0", "q4_0", "f16",  "bf16"};
#define N_RECIPES (sizeof k_recipes / sizeof k_recipes[0])

Test(quantize, every_recipe_types_and_file_type) {
    char out[512];
    for (size_t i = 0; i < N_RECIPES; i++)
        make_and_check(k_recipes[i], 0, out, sizeof out);
    make_and_check("q4_k_m", 1, out, sizeof out);
}

/* gguf-py opens every file, its tensors decode to within the type's error of the F32
 * source, and to exactly what our own reader + dequantizer give. */
Test(quantize, gguf_py_reads_every_recipe) {
    if (!have_gguf_py())
        cr_skip_test("%s cannot import gguf + numpy (pip install gguf): gguf-py check skipped",
                     python());
    char outs[N_RECIPES][512], src[512], cmd[16384];
    tu_path(src, sizeof src, g_dir, "src.gguf");
    size_t len = (size_t)snprintf(cmd, sizeof cmd, "%s '%s' compare '%s'", python(), SCRIPT, src);
    for (size_t i = 0; i < N_RECIPES; i++) {
        make_and_check(k_recipes[i], 0, outs[i], sizeof outs[i]);
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " '%s'", outs[i]);
    }
    char *py = NULL, *pe = NULL;
    cr_assert_eq(tu_run(cmd, &py, &pe), 0, "%s: %s", cmd, pe ? pe : "");
    sd_error err = {0};
    sd_gguf *s = NULL, *g = NULL;
    cr_assert_eq(sd_gguf_open(src, &s, &err), SD_OK, "%s", err.msg);
    sd_quant_recipe r = {0};
    int files = 0, lines = 0;
    for (char *line = strtok(py, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"file\"")) {
            if (g) cr_assert_eq(lines, (int)sd_gguf_n_tensors(g));
            sd_gguf_close(g);
            g = NULL;
            cr_assert_lt(files, (int)N_RECIPES);
            cr_assert_not_null(strstr(line, outs[files]), "%s", line);
            cr_assert_eq(sd_quant_recipe_from_name(k_recipes[files], &r), 0);
            cr_assert_eq(sd_gguf_open(outs[files], &g, &err), SD_OK, "%s", err.msg);
            files++;
            lines = 0;
            continue;
        }
        cr_assert_not_null(g, "output before a file line: %s", line);
        if (strstr(line, "general.file_type")) {
            cr_assert_eq((int64_t)jnum(line, "general.file_type"), (int64_t)r.ftype, "%s", r.name);
            continue;
        }
        char name[128], tname[16];
        jstr(line, "name", name, sizeof name);
        jstr(line, "type", tname, sizeof tname);
        const sd_gguf_tensor *t = sd_gguf_find_tensor(g, name);
        cr_assert_not_null(t, "gguf-py lists %s", name);
        cr_assert_str_eq(tname, sd_type_name(t->type), "%s", name);
        const double rmse = jnum(line, "rmse"), ref = jnum(line, "ref_rms");
        const double bound = rel_rmse_bound((sd_type)t->type) * ref;
        cr_assert_leq(rmse, bound, "%s %s (%s): gguf-py RMSE %g > %g", r.name, name, tname, rmse,
                      bound);
        const double ours = our_rmse(t, sd_gguf_find_tensor(s, name));
        cr_assert_leq(fabs(ours - rmse), 1e-6 * (ref + rmse) + 1e-12,
                      "%s %s: our RMSE %.9g, gguf-py's %.9g", r.name, name, ours, rmse);
        lines++;
    }
    cr_assert_eq(files, (int)N_RECIPES);
    if (g) cr_assert_eq(lines, (int)sd_gguf_n_tensors(g));
    sd_gguf_close(g);
    sd_gguf_close(s);
    free(py);
    free(pe);
}

Test(quantize, recipe_names) {
    sd_quant_recipe r;
    cr_assert_eq(sd_quant_recipe_from_name("Q4_K_M", &r), 0);
    cr_assert_eq(r.base, SD_TYPE_Q4_K);
    cr_assert_eq(r.ftype, 15u);
    cr_assert_eq(sd_quant_recipe_from_name("q5_k_m", &r), 0);
    cr_assert_eq(r.ftype, 17u);
    static const struct {
        const char *n;
        uint32_t ft;
    } ft[] = {{"q4_1", 3},  {"q5_0", 8},  {"q5_1", 9},  {"q2_k", 10}, {"q3_k", 11},
              {"q4_k", 14}, {"q5_k", 16}, {"q6_k", 18}, {"q8_0", 7},  {"q4_0", 2}};
    for (size_t i = 0; i < sizeof ft / sizeof ft[0]; i++) {
        cr_assert_eq(sd_quant_recipe_from_name(ft[i].n, &r), 0, "%s", ft[i].n);
        cr_assert_eq(r.ftype, ft[i].ft, "%s", ft[i].n);
        cr_assert_str_eq(sd_type_name(r.base), ft[i].n);
    }
    cr_assert_eq(sd_quant_recipe_from_name("q4_k_s", &r), -1);
    cr_assert_eq(sd_quant_recipe_from_name("q8_k", &r), -1);
    cr_assert_eq(sd_quant_recipe_from_name("", &r), -1);
    cr_assert_eq(sd_quant_recipe_from_name(NULL, &r), -1);
}

/* The CLI: an unknown type is a usage error naming it and listing the choices; a known
 * one writes the file. */
Test(quantize, cli_types) {
    char src[512], out[512], cmd[2048];
    tu_path(src, sizeof src, g_dir, "m.gguf");
    tu_path(out, sizeof out, g_dir, "m-q.gguf");
    make_model(src, 0);
    char *e = NULL;
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' q4_k_x", SD_BINARY, src, out);
    cr_assert_eq(tu_run(cmd, NULL, &e), 2);
    cr_assert_not_null(strstr(e, "q4_k_x"), "%s", e);
    cr_assert_not_null(strstr(e, "q4_k_m"), "%s", e);
    free(e);
    cr_assert_eq(tu_count_files(g_dir), 1, "nothing written");
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' Q5_K_M", SD_BINARY, src, out);
    cr_assert_eq(tu_run(cmd, NULL, &e), 0, "%s", e);
    free(e);
    snprintf(cmd, sizeof cmd, "'%s' info '%s'", SD_BINARY, out);
    char *o = NULL;
    cr_assert_eq(tu_run(cmd, &o, NULL), 0);
    cr_assert_not_null(strstr(o, "q5_k x"), "%s", o);
    cr_assert_not_null(strstr(o, "q6_k x"), "%s", o);
    free(o);
}

/* A GGUF with the tensors given (F32 [rows, cols], optional F16 copy), for the
 * non-finite tests. */
static void write_small(const char *path, int bad_kind) {
    enum { R = 6, C = 256 };
    static float a[R * C], nrm[C];
    static uint16_t h[R * C];
    uint64_t s = 3;
    for (int i = 0; i < R * C; i++)
        a[i] = (float)((double)(s = s * 6364136223846793005ull + 1442695040888963407ull) /
                           18446744073709551616.0 -
                       0.5);
    for (int i = 0; i < C; i++)
        nrm[i] = 1.0f;
    for (int i = 0; i < R * C; i++)
        h[i] = sd_fp32_to_fp16(a[i]);
    if (bad_kind == 1) a[2 * C + 17] = NAN;
    if (bad_kind == 2) nrm[100] = INFINITY;
    if (bad_kind == 3) h[4 * C + 3] = 0xFC00; /* -inf in an F16 source */
    sd_gguf_writer *w = sd_gguf_writer_new();
    sd_gguf_set_str(w, "general.architecture", "llama");
    const int64_t ne2[2] = {C, R}, ne1[1] = {C};
    sd_error err = {0};
    cr_assert_eq(
        sd_gguf_add_tensor(w, "blk.0.attn_q.weight", SD_TYPE_F32, 2, ne2, a, sizeof a, &err), SD_OK,
        "%s", err.msg);
    cr_assert_eq(
        sd_gguf_add_tensor(w, "blk.0.ffn_up.weight", SD_TYPE_F16, 2, ne2, h, sizeof h, &err), SD_OK,
        "%s", err.msg);
    cr_assert_eq(
        sd_gguf_add_tensor(w, "output_norm.weight", SD_TYPE_F32, 1, ne1, nrm, sizeof nrm, &err),
        SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_OK, "%s", err.msg);
    sd_gguf_writer_free(w);
}

/* issue 7: a NaN / inf in the input must not be rounded into an ordinary number. Before
 * the fix `quantize` wrote such a file (Q8_0: the NaN became q = 0) with exit 0. */
Test(quantize, refuses_nonfinite_input) {
    static const struct {
        int kind;
        const char *recipe, *tensor, *where, *what;
    } c[] = {
        {1, "q8_0", "blk.0.attn_q.weight", "row 2, col 17", "nan"},
        {1, "q4_k_m", "blk.0.attn_q.weight", "row 2, col 17", "nan"},
        {2, "q4_0", "output_norm.weight", "row 0, col 100", "inf"}, /* a copied tensor */
        {3, "q6_k", "blk.0.ffn_up.weight", "row 4, col 3", "-inf"}, /* from F16 */
        {3, "f16", "blk.0.ffn_up.weight", "row 4, col 3", "-inf"},  /* same type: copied */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char src[512], out[512];
        tu_path(src, sizeof src, g_dir, "bad.gguf");
        tu_path(out, sizeof out, g_dir, "bad-q.gguf");
        write_small(src, c[i].kind);
        sd_quant_recipe r;
        cr_assert_eq(sd_quant_recipe_from_name(c[i].recipe, &r), 0);
        sd_error err = {0};
        cr_assert_eq(sd_quantize_file_recipe(src, out, &r, NULL, NULL, NULL, &err), SD_ERR_FORMAT,
                     "%s: accepted a non-finite input", c[i].recipe);
        cr_assert_not_null(strstr(err.msg, c[i].tensor), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, c[i].where), "%s", err.msg);
        char what[32];
        snprintf(what, sizeof what, "is %s:", c[i].what);
        cr_assert_not_null(strstr(err.msg, what), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, src), "names the file: %s", err.msg);
        cr_assert_eq(tu_count_files(g_dir), 1, "no output left behind");
    }
    /* the same file without the bad value is fine */
    char src[512], out[512];
    tu_path(src, sizeof src, g_dir, "good.gguf");
    tu_path(out, sizeof out, g_dir, "good-q.gguf");
    write_small(src, 0);
    sd_error err = {0};
    cr_assert_eq(sd_quantize_file(src, out, SD_TYPE_Q8_0, NULL, &err), SD_OK, "%s", err.msg);
    /* and via the CLI: exit 1, one line naming the tensor */
    write_small(src, 1);
    char cmd[2048], *e = NULL;
    snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' q4_k", SD_BINARY, src, out);
    cr_assert_eq(tu_run(cmd, NULL, &e), 1);
    cr_assert_not_null(strstr(e, "blk.0.attn_q.weight"), "%s", e);
    free(e);
}

/* Bytes of a file, and the offset of the first occurrence of needle. */
static size_t find_bytes(const unsigned char *hay, size_t n, const void *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(hay + i, needle, m)) return i;
    cr_assert_fail("pattern not found");
    return 0;
}

/* Loading: a K-quant tensor whose row length is not a multiple of 256 (a hand-patched
 * file: ne[0] 512 -> 320) is refused with the tensor, the type and the block size
 * named; a block whose fp16 scale is NaN / inf is not looked for at load (a pass over
 * every weight), but sd_validate_row finds it and a matmul over it gives a non-finite
 * output (so the forward pass's non-finite-logit check catches it). */
Test(quantize, load_bad_kquant_rows_and_scales) {
    enum { R = 4, C = 512 };
    static float x[R * C];
    for (int i = 0; i < R * C; i++)
        x[i] = sinf((float)i);
    size_t rb;
    cr_assert_eq(sd_type_row_bytes(SD_TYPE_Q4_K, C, &rb), 0);
    unsigned char *q = malloc(rb * R);
    for (int r = 0; r < R; r++)
        sd_quantize_row(SD_TYPE_Q4_K, x + r * C, q + (size_t)r * rb, C);
    char path[512];
    tu_path(path, sizeof path, g_dir, "k.gguf");
    sd_gguf_writer *w = sd_gguf_writer_new();
    sd_gguf_set_str(w, "general.architecture", "llama");
    const int64_t ne[2] = {C, R};
    sd_error err = {0};
    cr_assert_eq(sd_gguf_add_tensor(w, "blk.0.attn_q.weight", SD_TYPE_Q4_K, 2, ne, q, rb * R, &err),
                 SD_OK, "%s", err.msg);
    cr_assert_eq(sd_gguf_writer_write(w, path, &err), SD_OK, "%s", err.msg);
    sd_gguf_writer_free(w);
    /* the writer itself refuses such a shape */
    w = sd_gguf_writer_new();
    const int64_t bad[2] = {320, R};
    cr_assert_neq(sd_gguf_add_tensor(w, "x.weight", SD_TYPE_Q4_K, 2, bad, q, rb * R, &err), SD_OK);
    sd_gguf_writer_free(w);

    size_t n = 0;
    unsigned char *f = tu_read_file(path, &n);
    cr_assert_not_null(f);
    /* tensor info: name, n_dims u32, ne[0] u64 ... */
    const size_t at = find_bytes(f, n, "blk.0.attn_q.weight", 19) + 19 + 4;
    const uint64_t ne0 = 320;
    memcpy(f + at, &ne0, 8);
    char patched[512];
    tu_path(patched, sizeof patched, g_dir, "k-320.gguf");
    cr_assert_eq(tu_write_file(patched, f, n), 0);
    sd_gguf *g = NULL;
    cr_assert_neq(sd_gguf_open(patched, &g, &err), SD_OK, "a 320-column Q4_K tensor loaded");
    cr_assert_null(g);
    cr_assert_not_null(strstr(err.msg, "blk.0.attn_q.weight"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "256"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "q4_k"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "320"), "%s", err.msg);

    /* a NaN scale (block 1 of row 2): loads, validation finds it, the matmul shows it */
    uint16_t nan16 = 0x7E00;
    memcpy(q + 2 * rb + sizeof(sd_block_q4_k), &nan16, 2);
    int64_t first = -1;
    cr_assert_eq(sd_validate_row(SD_TYPE_Q4_K, q + 2 * rb, C, &first), -1);
    cr_assert_eq(first, 256);
    cr_assert_eq(sd_validate_row(SD_TYPE_Q4_K, q + rb, C, &first), 0);
    size_t xb;
    cr_assert_eq(sd_activations_bytes(SD_TYPE_Q4_K, 1, C, &xb), 0);
    void *xq = aligned_alloc(64, (xb + 63) / 64 * 64);
    sd_quantize_activations(SD_TYPE_Q4_K, x, 1, C, xq);
    float y[R];
    sd_matmul_rows(SD_TYPE_Q4_K, q, rb, C, xq, 1, y, R, 0, R);
    cr_assert(isfinite(y[0]) && isfinite(y[1]) && isfinite(y[3]));
    cr_assert(!isfinite(y[2]), "a NaN scale must not vanish: %g", y[2]);
    free(xq);
    free(f);
    free(q);
}

/* The "tokens":[...] array of a generate --json output (malloc'd). */
static char *tokens_of(const char *json) {
    const char *p = strstr(json, "\"tokens\":[");
    cr_assert_not_null(p, "%s", json);
    const char *q = strchr(p, ']');
    cr_assert_not_null(q);
    return strndup(p, (size_t)(q - p + 1));
}

/* The new types through the whole runtime: a random llama model with K-quant-sized rows
 * quantized by each recipe loads and generates, and greedy speculative decoding with the
 * file as its own draft (batched verification of 5 tokens) gives exactly the tokens of
 * the target alone (single-token steps): batch == single on the new kernels. */
Test(quantize, generate_with_every_type) {
    char src[512];
    tu_path(src, sizeof src, g_dir, "r.gguf");
    tu_llama_spec s = tu_llama_default_spec();
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_layer = 2;
    cr_assert_eq(tu_make_llama(src, &s), 0);
    static const char *const rec[] = {"q4_1", "q5_0", "q5_1", "q2_k",  "q3_k",
                                      "q4_k", "q5_k", "q6_k", "q4_k_m"};
    for (size_t i = 0; i < sizeof rec / sizeof rec[0]; i++) {
        char out[512], name[64], cmd[4096];
        snprintf(name, sizeof name, "r-%s.gguf", rec[i]);
        tu_path(out, sizeof out, g_dir, name);
        sd_quant_recipe r;
        cr_assert_eq(sd_quant_recipe_from_name(rec[i], &r), 0);
        sd_error err = {0};
        cr_assert_eq(sd_quantize_file_recipe(src, out, &r, NULL, NULL, NULL, &err), SD_OK, "%s",
                     err.msg);
        char *spec = NULL, *alone = NULL, *e = NULL;
        snprintf(cmd, sizeof cmd,
                 "'%s' generate -m '%s' -md '%s' -p 't3 t4 t5' -n 16 --temp 0 -k 4 -t 1 --json",
                 SD_BINARY, out, out);
        cr_assert_eq(tu_run(cmd, &spec, &e), 0, "%s: %s", rec[i], e);
        free(e);
        snprintf(cmd, sizeof cmd,
                 "'%s' generate -m '%s' --no-draft -p 't3 t4 t5' -n 16 --temp 0 -t 1 --json",
                 SD_BINARY, out);
        cr_assert_eq(tu_run(cmd, &alone, &e), 0, "%s: %s", rec[i], e);
        free(e);
        char *ts = tokens_of(spec), *ta = tokens_of(alone);
        cr_assert_str_eq(ts, ta, "%s: speculative %s != target alone %s", rec[i], ts, ta);
        free(ts);
        free(ta);
        free(spec);
        free(alone);
    }
}

/* The requantization note is for a quantized -> quantized copy only: q8_0 -> f32 is exact
 * (int8 x fp16 products fit a float) and must not warn; q8_0 -> q4_0 does. */
Test(quantize, requantize_note_only_between_quantized_types) {
    char src[512], q8[512], out[512];
    tu_path(src, sizeof src, g_dir, "src.gguf");
    tu_path(q8, sizeof q8, g_dir, "q8.gguf");
    tu_path(out, sizeof out, g_dir, "out.gguf");
    make_model(src, 0);
    sd_error err = {0};
    cr_assert_eq(sd_quantize_file(src, q8, SD_TYPE_Q8_0, NULL, &err), SD_OK, "%s", err.msg);
    const sd_type to[] = {SD_TYPE_F32, SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_Q4_0};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        char *logbuf = NULL;
        size_t logn = 0;
        FILE *log = open_memstream(&logbuf, &logn);
        cr_assert_eq(sd_quantize_file(q8, out, to[i], log, &err), SD_OK, "%s", err.msg);
        fclose(log);
        const int noted = strstr(logbuf, "adds the errors of both") != NULL;
        cr_expect_eq(noted, to[i] == SD_TYPE_Q4_0, "q8_0 -> %s: %s", sd_type_name(to[i]), logbuf);
        free(logbuf);
    }
}
