/* verify/sample.c: default sampling parameters and their check, argmax, the
 * inverse-CDF draw and the keyed token draw. */
#include <math.h>
#include <string.h>

#include "verify/sd_sample.h"

sd_sampling_params sd_sampling_default_params(void) {
    sd_sampling_params sp;
    memset(&sp, 0, sizeof sp);
    sp.temp = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.0f;
    sp.repeat_penalty = 1.0f;
    sp.freq_penalty = 0.0f;
    sp.presence_penalty = 0.0f;
    sp.repeat_last_n = 64;
    sp.spec = SD_SPEC_GUMBEL;
    return sp;
}

const char *sd_spec_sampling_name(sd_spec_sampling s) {
    return s == SD_SPEC_GUMBEL ? "gumbel" : "rejection";
}

int sd_spec_sampling_parse(const char *s, sd_spec_sampling *out) {
    if (s && !strcmp(s, "rejection")) {
        *out = SD_SPEC_REJECTION;
        return 0;
    }
    if (s && !strcmp(s, "gumbel")) {
        *out = SD_SPEC_GUMBEL;
        return 0;
    }
    return -1;
}

int sd_sampling_check(const sd_sampling_params *sp, sd_error *err) {
    if (!sp) return sd_errorf(err, SD_ERR_ARG, "sampling: NULL parameters");
    if (!isfinite(sp->temp))
        return sd_errorf(err, SD_ERR_ARG, "sampling: temp = %g, expected a finite number",
                         (double)sp->temp);
    if (isnan(sp->top_p)) return sd_errorf(err, SD_ERR_ARG, "sampling: top_p is NaN");
    if (!(sp->min_p >= 0.0f && sp->min_p <= 1.0f))
        return sd_errorf(err, SD_ERR_ARG, "sampling: min_p = %g, expected in [0, 1]",
                         (double)sp->min_p);
    if (!(sp->repeat_penalty >= 0.0f) || !isfinite(sp->repeat_penalty))
        return sd_errorf(err, SD_ERR_ARG,
                         "sampling: repeat_penalty = %g, expected a finite number >= 0",
                         (double)sp->repeat_penalty);
    if (!isfinite(sp->freq_penalty) || !isfinite(sp->presence_penalty))
        return sd_errorf(
            err, SD_ERR_ARG,
            "sampling: freq_penalty = %g, presence_penalty = %g, expected finite numbers",
            (double)sp->freq_penalty, (double)sp->presence_penalty);
    if (sp->repeat_last_n < 0 || sp->repeat_last_n > SD_PENALTY_MAX_N)
        return sd_errorf(err, SD_ERR_ARG, "sampling: repeat_last_n = %d, expected 0 .. %d",
                         (int)sp->repeat_last_n, SD_PENALTY_MAX_N);
    if (sp->spec != SD_SPEC_REJECTION && sp->spec != SD_SPEC_GUMBEL)
        return sd_errorf(err, SD_ERR_ARG, "sampling: spec = %d, expected rejection or gumbel",
                         (int)sp->spec);
    if (sp->n_logit_bias < 0 || (sp->n_logit_bias > 0 && !sp->logit_bias))
        return sd_errorf(err, SD_ERR_ARG, "sampling: logit_bias: %d entries without an array",
                         (int)sp->n_logit_bias);
    for (int32_t i = 0; i < sp->n_logit_bias; i++) {
        const sd_logit_bias *b = &sp->logit_bias[i];
        if (b->id < 0)
            return sd_errorf(err, SD_ERR_ARG, "sampling: logit_bias: token id %d is negative",
                             (int)b->id);
        if (!(b->bias >= SD_LOGIT_BIAS_MIN && b->bias <= SD_LOGIT_BIAS_MAX))
            return sd_errorf(
                err, SD_ERR_ARG, "sampling: logit_bias: token %d has bias %g, expected %g .. %g",
                (int)b->id, (double)b->bias, (double)SD_LOGIT_BIAS_MIN, (double)SD_LOGIT_BIAS_MAX);
    }
    return SD_OK;
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

int32_t sd_sample_keyed(const sd_sampling_params *sp, const float *probs, int32_t n_vocab,
                        uint64_t seed, int64_t pos, sd_draw_purpose purpose) {
    if (!probs || n_vocab < 1) return -1;
    if (!(sp->temp > 0.0f)) return sd_argmax(probs, n_vocab);
    if (sp->spec == SD_SPEC_GUMBEL) return sd_gumbel_sample(probs, n_vocab, NULL, seed, pos);
    return sd_sample(probs, n_vocab, sd_key_uniform(seed, pos, purpose, 0));
}
