/*
 * The fused greedy classifier: sd_backend_cpu_matmul_argmax and sd_session_seq_eval_argmax
 * give the argmax of the row the matmul / sd_session_eval writes, computed here by a
 * plain scan of that row (the lowest index on ties), for
 *   - every weight type the CPU runs (packed and GGUF-row layouts), rows not a multiple
 *     of 16, a limit n_rows below the matrix's rows, 1, 2 and 3 threads with the ops
 *     threaded (SD_CPU_PAR_MIN_WORK=0) and inline;
 *   - ties: several identical rows hold the row maximum, far apart (so with 2-3 threads
 *     a higher copy may be computed before a lower one); the expected index is the
 *     lowest copy, and the test checks the tie is really there (>= 2 maxima);
 *   - NaN: a NaN row gives -1, and a NaN row beyond the limit n_rows does not;
 *   - sessions: a random llama model (tied and untied classifier), decode steps at
 *     increasing positions, the full and a trimmed head, against sd_session_eval's row.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/sd_backend.h"
#include "runtime/model/sd_model.h"
#include "testutil.h"

static uint64_t g_rng = 77;
static float unif(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Argmax of l[0 .. n) by a scan (lowest index on ties), -1 on NaN; *n_max: how many
 * entries equal the maximum. */
static int64_t scan(const float *l, int64_t n, int64_t *n_max) {
    int64_t b = 0;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        nan |= isnan(l[i]);
        if (l[i] > l[b]) b = i;
    }
    *n_max = 0;
    for (int64_t i = 0; i < n; i++)
        *n_max += l[i] == l[b];
    return nan ? -1 : b;
}

TestSuite(greedy_head, .timeout = 600);

static void check_type(sd_type t, int threaded) {
    const int64_t rows = 1000, cols = 256;
    const int64_t copies[4] = {5, 300, 301, 999}; /* identical rows: the maxima */
    size_t rb = 0;
    cr_assert_eq(sd_type_row_bytes(t, cols, &rb), 0);
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    uint8_t *wd = malloc(rb * (size_t)rows);
    for (int64_t i = 0; i < rows * cols; i++)
        wf[i] = unif();
    for (int64_t r = 0; r < rows; r++)
        cr_assert_eq(sd_quantize_row(t, wf + r * cols, wd + r * rb, cols), 0);
    for (int c = 1; c < 4; c++)
        memcpy(wd + copies[c] * rb, wd + copies[0] * rb, rb);
    /* x along the copied row (dequantized): its dot product is the largest by far */
    float *x = malloc(sizeof(float) * (size_t)cols), *y = malloc(sizeof(float) * (size_t)rows);
    sd_dequantize_row(t, wd + copies[0] * rb, x, cols);
    for (int nt = 1; nt <= 3; nt++) {
        sd_backend_params bp = {nt, 4, cols, 32, 0, NULL, 0};
        sd_backend *be = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
        sd_weight W = {t, rows, cols, rb, wd, SD_LAYOUT_ROWS};
        cr_assert_eq(be->ops->prepare_weight(be, &W, &err), SD_OK, "%s", err.msg);
        be->ops->matmul(be, &W, x, 1, y);
        const int64_t limits[4] = {rows, 999, 301, 4};
        for (int k = 0; k < 4; k++) {
            int64_t n_max = 0;
            const int64_t want = scan(y, limits[k], &n_max);
            if (limits[k] > 300)
                cr_assert(n_max >= 2 && (want == 5),
                          "%s: the test's tie is not there (%lld maxima, argmax %lld)",
                          sd_type_name(t), (long long)n_max, (long long)want);
            for (int rep = 0; rep < 3; rep++) {
                const int64_t got = sd_backend_cpu_matmul_argmax(be, &W, x, limits[k]);
                cr_assert_eq(got, want, "%s, %d threads (%s), n_rows %lld: argmax %lld, want %lld",
                             sd_type_name(t), nt, threaded ? "threaded" : "inline",
                             (long long)limits[k], (long long)got, (long long)want);
            }
        }
        /* a random x: whatever the maximum, the same index as the row's scan */
        float *xr = malloc(sizeof(float) * (size_t)cols);
        for (int trial = 0; trial < 4; trial++) {
            for (int64_t i = 0; i < cols; i++)
                xr[i] = 3.0f * unif();
            be->ops->matmul(be, &W, xr, 1, y);
            int64_t n_max = 0;
            const int64_t want = scan(y, rows, &n_max);
            cr_assert_eq(sd_backend_cpu_matmul_argmax(be, &W, xr, rows), want, "%s random x",
                         sd_type_name(t));
        }
        free(xr);
        sd_backend_free(be);
    }
    free(x);
    free(y);
    free(wd);
    free(wf);
}

static const sd_type k_types[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q8_0,
                                  SD_TYPE_Q4_0, SD_TYPE_Q4_1, SD_TYPE_Q5_0, SD_TYPE_Q5_1,
                                  SD_TYPE_Q2_K, SD_TYPE_Q3_K, SD_TYPE_Q4_K, SD_TYPE_Q5_K,
                                  SD_TYPE_Q6_K};

Test(greedy_head, backend_argmax_equals_row_scan_threaded) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        check_type(k_types[i], 1);
    unsetenv("SD_CPU_PAR_MIN_WORK");
}

Test(greedy_head, backend_argmax_equals_row_scan_inline) {
    setenv("SD_CPU_PAR_MIN_WORK", "1e18", 1);
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        check_type(k_types[i], 0);
    unsetenv("SD_CPU_PAR_MIN_WORK");
}

Test(greedy_head, backend_argmax_nan) {
    setenv("SD_CPU_PAR_MIN_WORK", "0", 1);
    const int64_t rows = 200, cols = 64;
    float *w = malloc(sizeof(float) * (size_t)(rows * cols)), x[64];
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = unif();
    for (int i = 0; i < cols; i++)
        x[i] = unif();
    w[150 * cols + 3] = NAN;
    for (int nt = 1; nt <= 2; nt++) {
        sd_backend_params bp = {nt, 4, cols, 32, 0, NULL, 0};
        sd_backend *be = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_backend_cpu_init(&bp, &be, &err), SD_OK, "%s", err.msg);
        sd_weight W = {SD_TYPE_F32, rows, cols, sizeof(float) * cols, w, SD_LAYOUT_ROWS};
        float y[200];
        be->ops->matmul(be, &W, x, 1, y);
        cr_assert(isnan(y[150]));
        int64_t n_max;
        cr_assert_eq(sd_backend_cpu_matmul_argmax(be, &W, x, rows), -1, "NaN row: -1");
        cr_assert_eq(sd_backend_cpu_matmul_argmax(be, &W, x, 150), scan(y, 150, &n_max),
                     "a NaN row past n_rows is not read");
        sd_backend_free(be);
    }
    free(w);
    unsetenv("SD_CPU_PAR_MIN_WORK");
}

static void check_session(int tied, sd_type wtype) {
    char dir[1024], path[2048];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    tu_llama_spec spec = tu_llama_default_spec();
    spec.tied = tied;
    spec.wtype = wtype;
    tu_path(path, sizeof path, dir, "m.gguf");
    cr_assert_eq(tu_make_llama(path, &spec), 0);
    sd_model *m = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_model_load(path, &m, &err), SD_OK, "%s", err.msg);
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    float *row = malloc(sizeof(float) * (size_t)nv), *scratch = malloc(sizeof(float) * (size_t)nv);
    for (int nt = 1; nt <= 2; nt++) {
        for (int trim = 0; trim < 2; trim++) {
            sd_session_params sp = sd_session_default_params();
            sp.n_threads = nt;
            sd_session *a = NULL, *b = NULL;
            cr_assert_eq(sd_session_init(m, &sp, &a, &err), SD_OK, "%s", err.msg);
            cr_assert_eq(sd_session_init(m, &sp, &b, &err), SD_OK, "%s", err.msg);
            if (trim) {
                int32_t ids[48];
                for (int32_t j = 0; j < 48; j++)
                    ids[j] = nv - 1 - 2 * j; /* descending: entry order != id order */
                cr_assert_eq(sd_session_set_output_rows(a, ids, 48, &err), SD_OK, "%s", err.msg);
                cr_assert_eq(sd_session_set_output_rows(b, ids, 48, &err), SD_OK, "%s", err.msg);
            }
            const int32_t nl = sd_session_n_logits(a);
            int32_t tok = 1;
            for (int step = 0; step < 12; step++) {
                cr_assert_eq(sd_session_eval(a, &tok, 1, row, 1, &err), SD_OK, "%s", err.msg);
                const int32_t lim = step % 3 == 2 ? nl - 7 : nl; /* a limit now and then */
                int32_t got = -2;
                cr_assert_eq(sd_session_seq_eval_argmax(b, 0, &tok, 1, lim, scratch, &got, &err),
                             SD_OK, "%s", err.msg);
                int64_t n_max;
                const int64_t want = scan(row, lim, &n_max);
                cr_assert_eq(got, want, "tied %d, trim %d, %d threads, step %d: %d, want %lld",
                             tied, trim, nt, step, got, (long long)want);
                cr_assert_eq(sd_session_seq_n_past(a, 0), sd_session_seq_n_past(b, 0));
                tok = (int32_t)((want * 7 + step) % nv); /* follow the model a little */
                if (tok < 3) tok = 3;
            }
            int32_t got = 0;
            cr_assert_eq(sd_session_seq_eval_argmax(b, 0, &tok, 1, nl + 1, scratch, &got, &err),
                         SD_ERR_ARG, "n_rows past the row is refused");
            cr_assert_eq(got, -1);
            sd_session_free(a);
            sd_session_free(b);
        }
    }
    free(row);
    free(scratch);
    sd_model_free(m);
    tu_rmdir(dir);
}

Test(greedy_head, session_argmax_equals_eval_row) {
    check_session(0, SD_TYPE_Q8_0);
    check_session(1, SD_TYPE_Q4_0);
    check_session(0, SD_TYPE_F32);
}
