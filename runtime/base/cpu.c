/*
 * runtime/base/cpu.c: CPU feature detection (sd_cpu_features_get, sd_base.h).
 *
 * CPUID leaf 1 ECX: FMA bit 12, OSXSAVE bit 27, AVX bit 28, F16C bit 29.
 * CPUID leaf 7 sub-leaf 0: EBX AVX2 bit 5, AVX512F 16, AVX512BW 30, AVX512VL 31;
 *   ECX AVX512_VNNI bit 11; EDX AMX-TILE bit 24, AMX-INT8 bit 25.
 * CPUID leaf 7 sub-leaf 1: EAX AVX512_BF16 bit 5.
 * XCR0 (XGETBV 0, valid when OSXSAVE): bits 1-2 (SSE, AVX state) for any AVX use;
 *   bits 5-7 (opmask, ZMM0-15 upper halves, ZMM16-31) for AVX-512 (Intel SDM vol. 1,
 *   13.3 "Enabling the XSAVE feature set and XSAVE-enabled features").
 */
#include "runtime/base/sd_base.h"

#include <pthread.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static sd_cpu_features g_cpu; /* written once under g_cpu_once, read-only afterwards */

#if defined(__x86_64__)
static unsigned long long read_xcr0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
    const bool fma = (c >> 12) & 1u, f16c = (c >> 29) & 1u;
    const unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    const bool os_avx = avx && (xcr0 & 0x6u) == 0x6u;
    const bool os_avx512 = os_avx && (xcr0 & 0xE0u) == 0xE0u;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d7);
        const unsigned max_sub = a;
        if (max_sub >= 1) __cpuid_count(7, 1, a71, b, c, d);
    }
    g_cpu.fma = os_avx && fma;
    g_cpu.f16c = os_avx && f16c;
    g_cpu.avx2 = os_avx && ((b7 >> 5) & 1u);
    g_cpu.avx512f = os_avx512 && ((b7 >> 16) & 1u);
    g_cpu.avx512bw = os_avx512 && ((b7 >> 30) & 1u);
    g_cpu.avx512vl = os_avx512 && ((b7 >> 31) & 1u);
    g_cpu.avx512vnni = os_avx512 && ((c7 >> 11) & 1u);
    g_cpu.avx512_bf16 = os_avx512 && ((a71 >> 5) & 1u);
    g_cpu.avx_vnni = os_avx && ((a71 >> 4) & 1u);
    g_cpu.amx_tile = (d7 >> 24) & 1u;
    g_cpu.amx_int8 = (d7 >> 25) & 1u;
}
#else
static void detect(void) {}
#endif

const sd_cpu_features *sd_cpu_features_get(void) {
    pthread_once(&g_cpu_once, detect);
    return &g_cpu;
}
