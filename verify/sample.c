/* verify/sample.c: default sampling parameters, argmax and the inverse-CDF draw. */
#include "verify/sd_sample.h"

sd_sampling_params sd_sampling_default_params(void) {
    sd_sampling_params sp;
    sp.temp = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    return sp;
}

int32_t sd_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    /* Strict '>' keeps the lowest index on ties. A NaN never wins against a number;
     * a NaN at index 0 is replaced by the first number that follows. */
    for (int32_t i = 1; i < n; i++) {
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
    }
    return best;
}

int32_t sd_sample(const float *probs, int32_t n_vocab, double u) {
    if (!probs || n_vocab < 1) return -1;
    double total = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (probs[i] > 0.0f) {
            total += (double)probs[i];
            last = i;
        }
    }
    if (last < 0) return -1;
    const double target = u * total;
    double cum = 0.0;
    /* Same summation order as 'total', so cum == total at 'last' and cum > target for
     * any u < 1: the loop always returns. The final return covers u >= 1 or NaN. */
    for (int32_t i = 0; i <= last; i++) {
        if (probs[i] > 0.0f) {
            cum += (double)probs[i];
            if (cum > target) return i;
        }
    }
    return last;
}
