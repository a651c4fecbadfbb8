/*
 * scripts/narrow_bench.c: one decode matmul (1 token) of a given shape on 1 thread
 * against the CPU backend's 2-thread hand-over, weights streamed from memory (--copies
 * distinct packed copies cycled, more bytes than the L3 holds), alternating A B A B so
 * load swings hit both; the best and the median cycle per call. What the backend's
 * one-thread threshold for narrow matrices (SD_CPU_PAR_MIN_WORK, runtime/backend/cpu/ops.c)
 * is to be set from (on a quiet machine). Not a test; built and run by
 * scripts/narrow_bench.sh.
 *
 * usage: narrow_bench [--shapes q5_0:896x896,q4_k:896x4864,...] [--copies N] [--rounds N]
 *   shape = type:ROWSxCOLS (rows = output rows)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/sd_backend.h"

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static sd_type type_named(const char *s, size_t n) {
    for (int t = 0; t < SD_TYPE_COUNT; t++) {
        const char *nm = sd_type_name((uint32_t)t);
        if (nm && strlen(nm) == n && !strncmp(nm, s, n)) return (sd_type)t;
    }
    return SD_TYPE_COUNT;
}

int main(int argc, char **argv) {
    const char *shapes = "q5_0:128x896,q5_0:896x896,q5_0:1152x896,q8_0:896x896,q4_k:896x4864,"
                         "q6_k:896x4864,q5_0:9728x896,q4_k:256x1536,q4_k:1536x1536,"
                         "q4_k:2048x1536,q4_k:1536x8960";
    int copies = 0, rounds = 41;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--shapes"))
            shapes = argv[i + 1];
        else if (!strcmp(argv[i], "--copies"))
            copies = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
    }
    printf("kernels %s\n", sd_quant_kernels_name());
    for (const char *p = shapes; p && *p;) {
        const char *colon = strchr(p, ':');
        if (!colon) break;
        const sd_type t = type_named(p, (size_t)(colon - p));
        long long rows = 0, cols = 0;
        if (t == SD_TYPE_COUNT || sscanf(colon + 1, "%lldx%lld", &rows, &cols) != 2) {
            fprintf(stderr, "narrow_bench: bad shape %s\n", p);
            return 2;
        }
        p = strchr(p, ',');
        if (p) p++;
        size_t rb = 0;
        if (sd_type_row_bytes(t, cols, &rb)) return 2;
        const size_t bytes = rb * (size_t)rows;
        int nc = copies > 0 ? copies : (int)((96u << 20) / bytes) + 1; /* ~96 MB */
        float *wf = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)cols);
        float *y = malloc(sizeof(float) * (size_t)rows);
        uint8_t *wd = malloc(bytes);
        for (long long c = 0; c < cols; c++)
            wf[c] = x[c] = (float)((c * 37 % 101) - 50) / 50.0f;
        for (long long r = 0; r < rows; r++)
            sd_quantize_row(t, wf, wd + (size_t)r * rb, cols);
        sd_backend *be[2] = {NULL, NULL};
        sd_weight *W[2];
        sd_error err = {0};
        for (int k = 0; k < 2; k++) {
            sd_backend_params bp = {k + 1, 1, cols, 32, 0, NULL, 0};
            if (k) setenv("SD_CPU_PAR_MIN_WORK", "0", 1); /* the 2-thread backend hands over */
            if (sd_backend_cpu_init(&bp, &be[k], &err)) {
                fprintf(stderr, "narrow_bench: %s\n", err.msg);
                return 1;
            }
            unsetenv("SD_CPU_PAR_MIN_WORK");
            W[k] = malloc(sizeof(sd_weight) * (size_t)nc);
            for (int c = 0; c < nc; c++) {
                W[k][c] = (sd_weight){t, rows, cols, rb, wd, SD_LAYOUT_ROWS};
                if (be[k]->ops->prepare_weight(be[k], &W[k][c], &err)) return 1;
            }
        }
        double *v[2] = {malloc(sizeof(double) * (size_t)rounds),
                        malloc(sizeof(double) * (size_t)rounds)};
        for (int r = -2; r < rounds; r++)
            for (int k = 0; k < 2; k++) {
                const double t0 = sd_time_ms();
                for (int c = 0; c < nc; c++)
                    be[k]->ops->matmul(be[k], &W[k][c], x, 1, y);
                if (r >= 0) v[k][r] = (sd_time_ms() - t0) * 1e3 / nc;
            }
        qsort(v[0], (size_t)rounds, sizeof(double), cmp_d);
        qsort(v[1], (size_t)rounds, sizeof(double), cmp_d);
        printf("%-5s %6lldx%-6lld %8.0f elems %7.1f KB: us/call best 1t %.1f 2t %.1f (2t/1t %.2f), "
               "median 1t %.1f 2t %.1f (%.2f)\n",
               sd_type_name((uint32_t)t), rows, cols, (double)rows * (double)cols, bytes / 1e3,
               v[0][0], v[1][0], v[1][0] / v[0][0], v[0][rounds / 2], v[1][rounds / 2],
               v[1][rounds / 2] / v[0][rounds / 2]);
        fflush(stdout);
        for (int k = 0; k < 2; k++) {
            sd_backend_free(be[k]);
            free(W[k]);
            free(v[k]);
        }
        free(wf);
        free(x);
        free(y);
        free(wd);
    }
    return 0;
}
