/* The CLI's lowest pieces (see cli.h): the usage message and the number parsers every
 * flag parser calls (cli_flags.c, cli_common.c, the commands). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/common/sd_cli.h"

int sd_cli_usage(const char *hint, const char *fmt, const char *arg) {
    fprintf(stderr, "specdec: ");
    fprintf(stderr, fmt, arg);
    if (hint) fprintf(stderr, " (%s)", hint);
    fprintf(stderr, "\n");
    return SD_EXIT_USAGE;
}

int sd_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int sd_cli_parse_f64(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}
