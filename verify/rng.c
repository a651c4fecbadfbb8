/* verify/rng.c: the caller-owned RNG (xoshiro256**, seeded through splitmix64).
 * Reference: Blackman & Vigna, https://prng.di.unimi.it/ (xoshiro256starstar.c,
 * splitmix64.c). No global state: every stream is an sd_rng the caller owns. */
#include "verify/sd_sample.h"

static uint64_t splitmix64_next(uint64_t *x) {
    return sd_mix64(*x += UINT64_C(0x9e3779b97f4a7c15));
}

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

void sd_rng_seed(sd_rng *r, uint64_t seed) {
    uint64_t x = seed;
    /* splitmix64 is a bijection on its counter, so the four words are never all zero
     * (the one state xoshiro must avoid). */
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64_next(&x);
}

uint64_t sd_rng_stream_seed(uint64_t seed, uint64_t stream) {
    if (stream == 0) return seed;
    uint64_t x = stream * UINT64_C(0xd1b54a32d192ed03);
    uint64_t h = splitmix64_next(&x);
    x = seed ^ h;
    return splitmix64_next(&x);
}

uint64_t sd_rng_next_u64(sd_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double sd_rng_uniform(sd_rng *r) {
    /* Top 53 bits -> k * 2^-53 for k in [0, 2^53): exact in a double, always < 1. */
    return (double)(sd_rng_next_u64(r) >> 11) * 0x1.0p-53;
}
