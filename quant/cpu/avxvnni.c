/*
 * quant/cpu/avxvnni.c: AVX-VNNI kernels (kernel set "avxvnni": the 256-bit VEX vpdpbusd of
 * Intel client cores since Alder Lake and of AMD Zen 5, plus AVX2/FMA/F16C; checked by
 * the dispatcher in dispatch.c: CPUID leaf 7 sub-leaf 1 EAX bit 4 and the OS's AVX state).
 * No global -m flags: functions carry __attribute__((target(...))). Non-x86-64 builds
 * compile this file to nothing.
 *
 * Packed kernels (every quantized weight type): quant/cpu/x256.h with vpdpbusd for the
 * 4-byte products (no saturation: exact for every type; Q8_0 as w + 128 with part B's
 * offset correction). Float types and the activation quantizers: the avx2 set (lower).
 */
#include "quant/cpu/kernels.h"

#if defined(__x86_64__)

#define SD_T         __attribute__((target("avx2,fma,f16c,avxvnni")))
#define SD_X256_VNNI 1
#include "quant/cpu/x256.h"

const sd_kernel_set sd_kernels_avxvnni = {
    .name = "avxvnni",
    .lower = &sd_kernels_avx2,
    .peak = peak_loop,
    .k =
        {
            [SD_TYPE_Q8_0] = {NULL, p_q8_0},
            [SD_TYPE_Q4_0] = {NULL, p_q4_0},
            [SD_TYPE_Q5_0] = {NULL, p_q5_0},
            [SD_TYPE_Q4_1] = {NULL, p_q4_1},
            [SD_TYPE_Q5_1] = {NULL, p_q5_1},
            [SD_TYPE_Q2_K] = {NULL, p_q2_k},
            [SD_TYPE_Q3_K] = {NULL, p_q3_k},
            [SD_TYPE_Q4_K] = {NULL, p_q4_k},
            [SD_TYPE_Q5_K] = {NULL, p_q5_k},
            [SD_TYPE_Q6_K] = {NULL, p_q6_k},
        },
};

#else  /* !__x86_64__ */
typedef int sd_matmul_avxvnni_unused; /* ISO C forbids an empty translation unit */
#endif /* __x86_64__ */
