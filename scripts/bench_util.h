/* The parts scripts/bench_quant.c and scripts/width_bench.c share: a monotonic clock and
 * the --toks list (pass widths). Static functions; C11 with POSIX clock_gettime. */
#ifndef SD_SCRIPTS_BENCH_UTIL_H
#define SD_SCRIPTS_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The comma-separated widths of arg into toks[0..cap) (the first cap of them), each in
 * 1..max; *max_tok the largest (1 when there are none). Returns their count, or -1 with a
 * line on stderr for a width out of range. */
static int bench_parse_toks(const char *arg, int64_t *toks, int cap, int64_t max, int *max_tok) {
    char tl[256];
    snprintf(tl, sizeof tl, "%s", arg);
    int n = 0;
    *max_tok = 1;
    for (char *t = strtok(tl, ","); t && n < cap; t = strtok(NULL, ",")) {
        toks[n] = atoll(t);
        if (toks[n] < 1 || toks[n] > max) {
            fprintf(stderr, "--toks: %s out of range 1..%lld\n", t, (long long)max);
            return -1;
        }
        if (toks[n] > *max_tok) *max_tok = (int)toks[n];
        n++;
    }
    return n;
}

#endif
