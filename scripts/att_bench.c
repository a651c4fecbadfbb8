/*
 * scripts/att_bench.c: the CPU attention kernels of one level alone (attn.h: scores and value
 * sums of one block of heads over one span of keys), in cache, 1 thread, best of --reps
 * calls each. Not a test. Build against a Release library and run, e.g.:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -I. -Iinclude scripts/att_bench.c build/libspecdec_lib.a \
 *      -fopenmp -lpthread -lm -o att_bench && ./att_bench avx2 6 128 133
 * (the 1.5B's block: 6 query heads of one KV head, head dim 128, 133 F16 keys).
 * usage: att_bench [level] [heads] [head_dim] [keys] [reps]   (F16 keys and values)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/cpu/attn.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
    const char *lvl = argc > 1 ? argv[1] : "avx2";
    const int nh = argc > 2 ? atoi(argv[2]) : 6, hd = argc > 3 ? atoi(argv[3]) : 128;
    const int span = argc > 4 ? atoi(argv[4]) : 133, reps = argc > 5 ? atoi(argv[5]) : 3000;
    const sd_att_kernels *ak = sd_cpu_att_by_name(lvl);
    if (!ak || nh < 1 || nh > SD_ATT_HB || hd < 1 || span < 1 || reps < 1) {
        fprintf(stderr, "att_bench: level '%s' not run here, or bad sizes\n", lvl);
        return 2;
    }
    const int kvd = 2 * hd; /* rows of two KV heads, as a cache row holds */
    uint16_t *kv = malloc((size_t)span * (size_t)kvd * 2);
    float *q = malloc((size_t)nh * (size_t)hd * 4), *out = malloc((size_t)nh * (size_t)hd * 4);
    float *sc = malloc((size_t)nh * (size_t)span * 4);
    if (!kv || !q || !out || !sc) return 1;
    for (int i = 0; i < span * kvd; i++)
        kv[i] = sd_fp32_to_fp16((float)((i * 37) % 101) / 101.0f - 0.5f);
    for (int i = 0; i < nh * hd; i++)
        q[i] = (float)((i * 13) % 17) / 17.0f;
    double bs = 1e30, bv = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_ms();
        ak->scores(q, nh, hd, kv, (size_t)kvd * 2, SD_TYPE_F16, span, 0.088f, sc, (size_t)span);
        const double t1 = now_ms();
        memset(out, 0, (size_t)nh * (size_t)hd * 4);
        const double t2 = now_ms();
        ak->vsum(sc, (size_t)span, nh, hd, kv, (size_t)kvd * 2, SD_TYPE_F16, span, out);
        const double t3 = now_ms();
        bs = t1 - t0 < bs ? t1 - t0 : bs;
        bv = t3 - t2 < bv ? t3 - t2 : bv;
    }
    printf(
        "{\"level\": \"%s\", \"heads\": %d, \"head_dim\": %d, \"keys\": %d, \"scores_us\": %.3f, "
        "\"vsum_us\": %.3f, \"check\": %.6g}\n",
        lvl, nh, hd, span, bs * 1e3, bv * 1e3, (double)out[nh * hd - 1]);
    free(kv);
    free(q);
    free(out);
    free(sc);
    return 0;
}
