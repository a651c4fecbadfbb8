/*
 * scripts/bench_quant.c: matmul row-kernel throughput per element type and kernel set,
 * in GB/s of weights streamed (weight bytes read per second), one thread. Not a test:
 * a benchmark printing one JSON object per line. Built and run by scripts/bench_quant.sh.
 *
 * For each type: a [rows x cols] weight matrix (default 4096 x 4096) from N(0, 1) values
 * through the reference quantizer; activations prepared once; then the kernel of each
 * available set over all rows (the packed kernel on a packed copy where the set has one,
 * as the CPU backend runs it), for each n_tok of --toks (default 1,2,5,9,17), repeated;
 * the best of --reps runs is reported (least disturbed by other load).
 * "hot": the same matrix each run (it may sit in L3: 9.4 MB for Q4_K, 32 MB L3 here);
 * "stream": --copies distinct copies cycled so each run reads from DRAM.
 *
 * usage: bench_quant [--rows R] [--cols C] [--reps N] [--copies K] [--types q4_0,q4_k,...]
 *                    [--toks 1,2,5,9,17] [--sets avx512,avx2]
 *                    [--ldy-pad P]   (output row stride rows + P; default 0 as the backend)
 *                    [--huge 1]      (weights 2 MiB aligned and offered to transparent huge
 *                                     pages, as the CPU backend maps them; default 0: 4 KiB
 *                                     pages, a TLB miss every 4 KiB of a stream)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"
#include "quant/sd_quant.h"
#include "bench_util.h"

static uint64_t g_s = 1;
static uint64_t rn(void) {
    uint64_t z = (g_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float gauss(void) {
    const double u1 = ((double)(rn() >> 11) + 0.5) * 0x1p-53, u2 = (double)(rn() >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* bytes of weights, 64-byte aligned, or with huge 2 MiB aligned and MADV_HUGEPAGE (a hint). */
static void *walloc(size_t bytes, int huge) {
    const size_t al = huge ? (size_t)2 << 20 : 64;
    const size_t n = (bytes + al - 1) / al * al;
    void *p = aligned_alloc(al, n);
#ifdef MADV_HUGEPAGE
    if (p && huge) (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

int main(int argc, char **argv) {
    int64_t rows = 4096, cols = 4096;
    int reps = 5, copies = 8, pad = 0, huge = 0;
    const char *types = "f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q2_k,q3_k,q4_k,q5_k,q6_k";
    const char *toks_arg = "1,2,5,9,17", *sets_arg = "avx512,avx2";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols"))
            cols = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--copies"))
            copies = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--types"))
            types = argv[i + 1];
        else if (!strcmp(argv[i], "--ldy-pad"))
            pad = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--huge"))
            huge = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--toks"))
            toks_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--sets"))
            sets_arg = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    int64_t toks[32];
    int max_tok = 1;
    const int n_toks = bench_parse_toks(toks_arg, toks, 32, 512, &max_tok);
    if (n_toks < 0) return 2;
    float *x = malloc(sizeof(float) * (size_t)(max_tok * cols));
    const int64_t ldy = rows + pad; /* y [n_tok, ldy], as the backend's y [n_tok, rows] */
    float *y = malloc(sizeof(float) * (size_t)(max_tok * ldy));
    for (int64_t i = 0; i < rows * cols; i++)
        wf[i] = gauss() * 0.02f;
    for (int64_t i = 0; i < max_tok * cols; i++)
        x[i] = gauss();
    char list[512];
    snprintf(list, sizeof list, "%s", types);
    char *ts = NULL;
    for (char *tok = strtok_r(list, ",", &ts); tok; tok = strtok_r(NULL, ",", &ts)) {
        sd_type t;
        if (sd_type_from_name(tok, &t)) {
            fprintf(stderr, "unknown type %s\n", tok);
            return 2;
        }
        size_t rb;
        if (sd_type_row_bytes(t, cols, &rb)) {
            fprintf(stderr, "%s: cols %lld not a multiple of its block\n", tok, (long long)cols);
            return 2;
        }
        const size_t mb = rb * (size_t)rows;
        size_t pb = 0;
        const int packable = sd_pack_bytes(t, rows, cols, &pb) == 0;
        const size_t alloc = packable && pb > mb ? pb : mb;
        unsigned char **w = malloc(sizeof *w * (size_t)copies);
        unsigned char **wp = malloc(sizeof *wp * (size_t)copies);
        for (int c = 0; c < copies; c++) {
            w[c] = walloc(alloc, huge);
            wp[c] = packable ? walloc(alloc, huge) : NULL;
            if (c == 0)
                for (int64_t r = 0; r < rows; r++)
                    sd_quantize_row(t, wf + r * cols, w[0] + (size_t)r * rb, cols);
            else { /* a distinct copy (identical pages could be merged by KSM and read from
                    * cache): bit 0 of one byte a line flipped, a quant or a mantissa bit */
                memcpy(w[c], w[0], mb);
                for (size_t j = (size_t)c % 64; j < mb; j += 64)
                    w[c][j] ^= 1u;
            }
            if (packable) sd_pack_groups(t, w[c], rb, rows, cols, 0, (rows + 15) / 16, wp[c]);
        }
        char sl[128];
        snprintf(sl, sizeof sl, "%s", sets_arg);
        char *ss = NULL;
        for (char *sn = strtok_r(sl, ",", &ss); sn; sn = strtok_r(NULL, ",", &ss)) {
            const sd_kernel_set *ks = sd_kernel_set_by_name(sn);
            if (!ks) continue;
            sd_packed_kernel pk = sd_kernel_packed_for_type(ks, t);
            if (!pk && sd_kernel_owner(ks, t) != ks) continue; /* a lower set's kernel */
            for (int ti = 0; ti < n_toks; ti++) {
                const int64_t nt = toks[ti];
                size_t xb;
                sd_kernel_act_bytes(ks, t, nt, cols, &xb);
                void *xq = aligned_alloc(64, (xb + 63) / 64 * 64);
                sd_kernel_prepare_rows(ks, t, x, nt, cols, 0, nt, xq);
                sd_rows_kernel k = sd_kernel_for_type(ks, t);
                for (int mode = 0; mode < 2; mode++) { /* 0 hot, 1 stream */
                    double best = 1e30, total = 0.0;
                    for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up */
                        const int c =
                            mode && rep >= 0 ? (rep + 1) % copies : 0; /* never the warm copy */
                        const double t0 = bench_now_s();
                        if (pk)
                            pk(wp[c], rows, cols, xq, nt, y, ldy, 0, (rows + 15) / 16);
                        else
                            k(w[c], rb, cols, xq, nt, y, ldy, 0, rows);
                        const double dt = bench_now_s() - t0;
                        if (rep >= 0 && dt < best) best = dt;
                        if (rep >= 0) total += dt;
                    }
                    printf(
                        "{\"type\": \"%s\", \"set\": \"%s\", \"packed\": %s, \"n_tok\": %lld, "
                        "\"mode\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"weight_mib\": %.2f, "
                        "\"ms\": %.3f, \"mean_ms\": %.3f, \"weight_gbps\": %.2f, "
                        "\"tok_rows_per_us\": %.1f}\n",
                        sd_type_name(t), ks->name, pk ? "true" : "false", (long long)nt,
                        mode ? "stream" : "hot", (long long)rows, (long long)cols,
                        (double)mb / 1048576.0, best * 1e3, total / reps * 1e3,
                        (double)mb / best * 1e-9, (double)(rows * nt) / best * 1e-6);
                    fflush(stdout);
                }
                free(xq);
            }
        }
        for (int c = 0; c < copies; c++)
            free(wp[c]);
        free(wp);
        for (int c = 0; c < copies; c++)
            free(w[c]);
        free(w);
    }
    free(wf);
    free(x);
    free(y);
    return 0;
}
