/*
 * The plain streaming-read check that `specdec bench --roof` must reach: an OpenMP sum
 * of a 2 GiB buffer with one vector accumulator per thread (AVX-512 when the CPU has it,
 * else AVX2, chosen at run time), static schedule, best of 10 passes, at 1 and at all
 * threads. Nothing clever on purpose: no unrolling, no huge pages, no first touch by the
 * reading thread (the buffer is filled by memset on the main thread).
 * Build and run: scripts/roof_check.sh (prints both figures as JSON).
 * Usage: roof_plain [MiB (default 2048)] [passes (default 10)]
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const unsigned char *p, size_t n) {
    __m256i a = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 32)
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, a);
    return o[0] + o[1] + o[2] + o[3];
}

__attribute__((target("avx512f"))) static uint64_t sum_avx512(const unsigned char *p, size_t n) {
    __m512i a = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 64)
        a = _mm512_add_epi64(a, _mm512_load_si512((const void *)(p + i)));
    return (uint64_t)_mm512_reduce_add_epi64(a);
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 2048;
    const int passes = argc > 2 ? atoi(argv[2]) : 10;
    const size_t bytes = mib << 20;
    unsigned char *buf = aligned_alloc(4096, bytes);
    if (!buf || passes < 1) {
        fprintf(stderr, "roof_plain: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes);
    __builtin_cpu_init();
    const int wide = __builtin_cpu_supports("avx512f");
    const int all = omp_get_max_threads();
    volatile uint64_t sink = 0;
    printf("{\"buffer_mib\": %zu, \"passes\": %d, \"kernel\": \"%s\"", mib, passes,
           wide ? "avx512" : "avx2");
    for (int t = 1; t <= all; t += all > 1 ? all - 1 : 1) {
        double best = 0;
        for (int r = 0; r < passes; r++) {
            uint64_t s = 0;
            const double t0 = now_s();
#pragma omp parallel num_threads(t) reduction(+ : s)
            {
                const int id = omp_get_thread_num(), nt = omp_get_num_threads();
                const size_t per = bytes / (size_t)nt / 64 * 64;
                const size_t b = per * (size_t)id, n = id == nt - 1 ? bytes - b : per;
                s += wide ? sum_avx512(buf + b, n) : sum_avx2(buf + b, n);
            }
            const double g = (double)bytes / (now_s() - t0) / 1e9;
            sink += s;
            if (g > best) best = g;
        }
        printf(", \"t%d_gbps\": %.3f", t, best);
        if (all == 1) break;
    }
    printf(", \"threads\": %d}\n", all);
    free(buf);
    return 0;
}
