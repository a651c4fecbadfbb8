/*
 * scripts/kernel_ir.c: one packed matmul call per (type, kernel set, width), for counting
 * instructions under callgrind (scripts/kernel_ir.sh). Not a test, not a timer. The call
 * runs inside ir_region (never inlined), which kernel_ir.sh names to callgrind's
 * --toggle-collect, so the counts hold the kernel alone: no quantization, packing or
 * activation preparation. Prints what the counts are divided by: the 16-row x 256-column
 * tiles of the matrix ("super-blocks": one K-quant super-block of a 16-row group, or 8
 * blocks of a 32-element type).
 *
 * usage: kernel_ir --type q4_k --set avx2 --tok 5 [--rows 256] [--cols 4096]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"
#include "quant/sd_quant.h"

__attribute__((noinline)) void ir_region(sd_packed_kernel pk, const void *wp, int64_t rows,
                                         int64_t cols, const void *xq, int64_t nt, float *y) {
    pk(wp, rows, cols, xq, nt, y, rows, 0, (rows + 15) / 16);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    int64_t rows = 256, cols = 4096, nt = 1;
    const char *tn = "q4_k", *sn = "avx2";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols"))
            cols = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--tok"))
            nt = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--type"))
            tn = argv[i + 1];
        else if (!strcmp(argv[i], "--set"))
            sn = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    sd_type t;
    size_t rb, pb, xb;
    if (nt < 1 || nt > 512 || sd_type_from_name(tn, &t) || sd_type_row_bytes(t, cols, &rb) ||
        sd_pack_bytes(t, rows, cols, &pb)) {
        fprintf(stderr, "%s: no packed layout for %lld cols (or a bad --tok)\n", tn,
                (long long)cols);
        return 2;
    }
    const sd_kernel_set *ks = sd_kernel_set_by_name(sn);
    sd_packed_kernel pk = ks ? sd_kernel_packed_for_type(ks, t) : NULL;
    if (!pk) {
        fprintf(stderr, "set %s: not on this CPU or no packed kernel for %s\n", sn, tn);
        return 2;
    }
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    uint64_t s = 1;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        wf[i] = ((float)((s >> 40) & 0xffff) / 65536.0f - 0.5f) * 0.04f;
    }
    for (int64_t i = 0; i < nt * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    uint8_t *w = malloc(rb * (size_t)rows), *wp = aligned_alloc(64, (pb + 63) / 64 * 64);
    for (int64_t r = 0; r < rows; r++)
        sd_quantize_row(t, wf + r * cols, w + (size_t)r * rb, cols);
    sd_pack_groups(t, w, rb, rows, cols, 0, (rows + 15) / 16, wp);
    sd_kernel_act_bytes(ks, t, nt, cols, &xb);
    void *xq = aligned_alloc(64, (xb + 63) / 64 * 64);
    sd_kernel_prepare_rows(ks, t, x, nt, cols, 0, nt, xq);
    ir_region(pk, wp, rows, cols, xq, nt, y);
    double cs = 0;
    for (int64_t i = 0; i < nt * rows; i++)
        cs += y[i];
    printf("{\"type\": \"%s\", \"set\": \"%s\", \"n_tok\": %lld, \"tiles\": %lld, "
           "\"checksum\": %.6g}\n",
           tn, sn, (long long)nt, (long long)(((rows + 15) / 16) * (cols / 256)), cs);
    free(wf);
    free(x);
    free(y);
    free(w);
    free(wp);
    free(xq);
    return 0;
}
