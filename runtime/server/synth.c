/*
 * runtime/server/synth.c: llama-server's synthetic acceptance flags (--spec-synth-rates,
 * --spec-synth-len) resolved to the per-position conditional acceptance chances of
 * sd_gen_params.synth_accept (the batcher's forced rejections; the text stays exact).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/server/sd_server.h"

/* rates[i] (unconditional: the chance that positions 0 .. i are all accepted) to
 * conditionals: cond[i] = rates[i] / rates[i - 1] (rates[-1] = 1; 0 after a 0). */
static void to_conditional(const double *rates, int32_t n, double *cond) {
    double prev = 1.0;
    for (int32_t i = 0; i < n; i++) {
        cond[i] = prev > 0.0 ? rates[i] / prev : 0.0;
        prev = rates[i];
    }
}

int sd_server_synth_rates(const char *rates, double length, int32_t n_max, double *cond,
                          int32_t *n_out, sd_error *err) {
    *n_out = 0;
    if (n_max < 1 || n_max > SD_MAX_DRAFT)
        return sd_errorf(err, SD_ERR_ARG, "synthetic acceptance: K %d is not in 1 .. %d", n_max,
                         SD_MAX_DRAFT);
    if (rates && length >= 0.0)
        return sd_errorf(err, SD_ERR_ARG, "%s",
                         "--spec-synth-rates and --spec-synth-len are mutually exclusive");
    double r[SD_MAX_DRAFT];
    if (rates) {
        int32_t n = 0;
        const char *p = rates;
        for (;;) {
            char *end = NULL;
            const double v = strtod(p, &end);
            if (end == p || !(v >= 0.0 && v <= 1.0))
                return sd_errorf(err, SD_ERR_ARG,
                                 "--spec-synth-rates: expected a number in [0, 1] at '%s'", p);
            if (n == n_max)
                return sd_errorf(err, SD_ERR_ARG, "--spec-synth-rates: more than K = %d values",
                                 n_max);
            if (n > 0 && v > r[n - 1])
                return sd_errorf(err, SD_ERR_ARG,
                                 "--spec-synth-rates: %g after %g: the rates must not increase", v,
                                 r[n - 1]);
            r[n++] = v;
            if (*end == '\0') break;
            if (*end != ',')
                return sd_errorf(err, SD_ERR_ARG,
                                 "--spec-synth-rates: expected ',' between values at '%s'", end);
            p = end + 1;
        }
        if (n != n_max)
            return sd_errorf(err, SD_ERR_ARG,
                             "--spec-synth-rates: %d values, expected K = %d (one per position)", n,
                             n_max);
        to_conditional(r, n, cond);
        *n_out = n;
        return SD_OK;
    }
    /* A mean accepted length L (the target's token included): one p for every position,
     * p + p^2 + ... + p^K = L - 1, found by bisection (as llama-server). */
    if (!(length >= 1.0 && length <= n_max + 1.0))
        return sd_errorf(err, SD_ERR_ARG,
                         "--spec-synth-len: expected a length in [1, %d], found %g", n_max + 1,
                         length);
    double p = 0.0;
    if (length == n_max + 1.0) {
        p = 1.0;
    } else if (length > 1.0) {
        double lo = 0.0, hi = 1.0;
        for (int i = 0; i < 60; i++) {
            const double mid = 0.5 * (lo + hi);
            double sum = 0.0, term = mid;
            for (int32_t j = 0; j < n_max; j++, term *= mid)
                sum += term;
            if (sum < length - 1.0)
                lo = mid;
            else
                hi = mid;
        }
        p = 0.5 * (lo + hi);
    }
    for (int32_t i = 0; i < n_max; i++)
        cond[i] = p;
    *n_out = n_max;
    return SD_OK;
}
