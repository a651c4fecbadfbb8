/*
 * scripts/width_bench.c: the packed matmul kernels per pass width, widths interleaved.
 * For each type and kernel set: one packed [rows x cols] matrix (default 2048 x 2048, in
 * cache), then --reps rounds, each timing one call at every width of --toks in turn, so
 * load swings hit every width alike; the best round per width, and k(n) = ms(n) / ms(1).
 * A width that costs more than the next wider one is marked "<-". Not a test; built and
 * run by scripts/width_bench.sh (one thread).
 *
 * usage: width_bench [--rows R] [--cols C] [--reps N] [--types q4_k,q6_k,q5_0,q8_0]
 *                    [--sets avx2,avxvnni] [--toks 1..17 as a list]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"
#include "quant/sd_quant.h"
#include "bench_util.h"

int main(int argc, char **argv) {
    int64_t rows = 2048, cols = 2048;
    int reps = 41;
    const char *types = "q4_k,q6_k,q5_0,q8_0", *sets = "avx2,avxvnni",
               *toks_arg = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols"))
            cols = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--types"))
            types = argv[i + 1];
        else if (!strcmp(argv[i], "--sets"))
            sets = argv[i + 1];
        else if (!strcmp(argv[i], "--toks"))
            toks_arg = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int64_t toks[32];
    int max_tok = 1;
    const int n_toks = bench_parse_toks(toks_arg, toks, 32, 32, &max_tok);
    if (n_toks < 0) return 2;
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    float *x = malloc(sizeof(float) * (size_t)(max_tok * cols));
    float *y = malloc(sizeof(float) * (size_t)(max_tok * rows));
    uint64_t s = 1;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        wf[i] = ((float)((s >> 40) & 0xffff) / 65536.0f - 0.5f) * 0.04f;
    }
    for (int64_t i = 0; i < max_tok * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    char *ts = NULL;
    for (char *tn = strtok_r(list, ",", &ts); tn; tn = strtok_r(NULL, ",", &ts)) {
        sd_type t;
        size_t rb, pb;
        if (sd_type_from_name(tn, &t) || sd_type_row_bytes(t, cols, &rb) ||
            sd_pack_bytes(t, rows, cols, &pb)) {
            fprintf(stderr, "%s: no packed layout for %lld cols\n", tn, (long long)cols);
            return 2;
        }
        uint8_t *w = malloc(rb * (size_t)rows), *wp = aligned_alloc(64, (pb + 63) / 64 * 64);
        for (int64_t r = 0; r < rows; r++)
            sd_quantize_row(t, wf + r * cols, w + (size_t)r * rb, cols);
        sd_pack_groups(t, w, rb, rows, cols, 0, (rows + 15) / 16, wp);
        char sl[128];
        snprintf(sl, sizeof sl, "%s", sets);
        char *ss = NULL;
        for (char *sn = strtok_r(sl, ",", &ss); sn; sn = strtok_r(NULL, ",", &ss)) {
            const sd_kernel_set *ks = sd_kernel_set_by_name(sn);
            sd_packed_kernel pk = ks ? sd_kernel_packed_for_type(ks, t) : NULL;
            if (!pk) continue;
            void *xq[32];
            double best[32];
            for (int k = 0; k < n_toks; k++) {
                size_t xb;
                sd_kernel_act_bytes(ks, t, toks[k], cols, &xb);
                xq[k] = aligned_alloc(64, (xb + 63) / 64 * 64);
                sd_kernel_prepare_rows(ks, t, x, toks[k], cols, 0, toks[k], xq[k]);
                best[k] = 1e30;
            }
            for (int r = -1; r < reps; r++)
                for (int k = 0; k < n_toks; k++) {
                    const double t0 = bench_now_s();
                    pk(wp, rows, cols, xq[k], toks[k], y, rows, 0, (rows + 15) / 16);
                    const double dt = bench_now_s() - t0;
                    if (r >= 0 && dt < best[k]) best[k] = dt;
                }
            printf("%-5s %-8s ms (k(n)):", tn, sn);
            for (int k = 0; k < n_toks; k++) {
                const int worse = k + 1 < n_toks && best[k] > best[k + 1];
                printf(" %lld:%.3f(%.2f)%s", (long long)toks[k], best[k] * 1e3, best[k] / best[0],
                       worse ? "<-" : "");
                free(xq[k]);
            }
            printf("\n");
            fflush(stdout);
        }
        free(w);
        free(wp);
    }
    free(wf);
    free(x);
    free(y);
    return 0;
}
