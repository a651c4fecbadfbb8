/* verify/keyed.c: draws keyed by (seed, position, purpose, index), and the Gumbel-max
 * draw over them (see sd_sample.h). Pure functions: no state at all. */
#include <math.h>

#include "verify/sd_sample.h"

/* Odd constants of the key schedule (golden ratio and two of Steele and Vigna's). */
#define K_SEED    UINT64_C(0x9e3779b97f4a7c15)
#define K_POS     UINT64_C(0xd1b54a32d192ed03)
#define K_PURPOSE UINT64_C(0xaef17502108ef2d9)

/* The stream of (seed, pos, purpose): a splitmix64 state; entry `index` of it is
 * sd_mix64(base + index * K_SEED), splitmix64's own sequence from that state. */
static uint64_t key_base(uint64_t seed, int64_t pos, sd_draw_purpose purpose) {
    uint64_t h = sd_mix64(seed + K_SEED);
    h = sd_mix64(h ^ ((uint64_t)pos * K_POS + 1));
    return sd_mix64(h ^ ((uint64_t)purpose * K_PURPOSE));
}

static inline double to_open_unit(uint64_t h) {
    return ((double)(h >> 11) + 0.5) * 0x1.0p-53;
}

double sd_key_uniform(uint64_t seed, int64_t pos, sd_draw_purpose purpose, uint64_t index) {
    return to_open_unit(sd_mix64(key_base(seed, pos, purpose) + index * K_SEED));
}

int32_t sd_gumbel_sample(const float *probs, int32_t n, const int32_t *ids, uint64_t seed,
                         int64_t pos) {
    if (!probs || n < 1) return -1;
    /* Start the race from the most probable entry (lowest id on ties): its E / p is a
     * small bound at once, so almost every other entry is excluded without a log. */
    int32_t best = -1;
    for (int32_t v = 0; v < n; v++)
        if (probs[v] > 0.0f && (best < 0 || probs[v] > probs[best])) best = v;
    if (best < 0) return -1;
    const uint64_t base = key_base(seed, pos, SD_DRAW_GUMBEL);
    const uint64_t id0 = (uint64_t)(ids ? ids[best] : best);
    double r_best = -log(to_open_unit(sd_mix64(base + id0 * K_SEED))) / (double)probs[best];
    const int32_t first = best;
    for (int32_t v = 0; v < n; v++) {
        const float pv = probs[v];
        if (!(pv > 0.0f) || v == first) continue;
        const uint64_t id = (uint64_t)(ids ? ids[v] : v);
        const double u = to_open_unit(sd_mix64(base + id * K_SEED));
        /* E = -log u >= 1 - u, so u <= 1 - r_best p gives E / p >= r_best: cannot win. */
        if (u <= 1.0 - r_best * (double)pv) continue;
        const double r = -log(u) / (double)pv;
        if (r < r_best || (r == r_best && v < best)) {
            r_best = r;
            best = v;
        }
    }
    return best;
}
