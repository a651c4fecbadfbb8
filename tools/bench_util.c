/*
 * specdec bench's shared helpers (see bench.h), below the options and dispatch (bench.c)
 * and the modes (bench_ab.c, bench_kernels.c, bench_modes.c), which call these and not
 * each other: the usage message, order statistics, the JSON writers, the timed evals, the
 * prompt files.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench.h"
#include "runtime/engine/sd_engine.h"

#define HINT "see 'specdec bench --help'"

int bench_usage(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

/* ---------------------------------------------------------------- small helpers */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* p-quantile (linear interpolation between order statistics) of x[0..n); 0 if n == 0. */
double bench_quantile(const double *x, size_t n, double p) {
    if (n == 0) return 0.0;
    double *s = malloc(n * sizeof *s);
    if (!s) return NAN;
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    const double pos = p * (double)(n - 1);
    const size_t i = (size_t)pos;
    const double f = pos - (double)i;
    const double v = i + 1 < n ? s[i] * (1.0 - f) + s[i + 1] * f : s[i];
    free(s);
    return v;
}

double bench_min(const double *x, size_t n) {
    double m = n ? x[0] : 0.0;
    for (size_t i = 1; i < n; i++)
        m = x[i] < m ? x[i] : m;
    return m;
}

double bench_max(const double *x, size_t n) {
    double m = n ? x[0] : 0.0;
    for (size_t i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

int bench_dvec_push(bench_dvec *d, double x) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        double *nv = realloc(d->v, cap * sizeof *nv);
        if (!nv) return -1;
        d->v = nv;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return 0;
}

void bench_dvec_free(bench_dvec *d) {
    free(d->v);
    memset(d, 0, sizeof *d);
}

int bench_write_json(json_t *root, const char *path, sd_error *err) {
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(8));
    if (!text) return sd_errorf(err, SD_ERR_OOM, "%s: cannot build JSON", path);
    size_t len = strlen(text);
    int rc = sd_cli_write_file_atomic(path, text, len, err);
    free(text);
    return rc;
}

int bench_suspect(int32_t k, double speedup, double predicted, double v, char *why, size_t cap) {
    size_t n = 0;
    why[0] = '\0';
    char part[3][160];
    int np = 0;
    if (isfinite(speedup) && speedup > (double)(k + 1))
        snprintf(part[np++], sizeof part[0],
                 "speedup %.2f above K + 1 = %d (the most one target pass can give)", speedup,
                 k + 1);
    if (isfinite(v) && v < BENCH_V_MIN)
        snprintf(part[np++], sizeof part[0],
                 "v = %.3f: a %d-token verification pass measured cheaper than one decode step "
                 "(below %.2f)",
                 v, k + 1, BENCH_V_MIN);
    if (isfinite(speedup) && isfinite(predicted) && speedup > 0 && predicted > 0 &&
        (speedup > BENCH_PRED_FACTOR * predicted || predicted > BENCH_PRED_FACTOR * speedup))
        snprintf(part[np++], sizeof part[0],
                 "measured speedup %.2f is %.2fx the predicted %.2f (more than %.0fx off)", speedup,
                 speedup / predicted, predicted, BENCH_PRED_FACTOR);
    for (int i = 0; i < np && n + 1 < cap; i++) {
        int w = snprintf(why + n, cap - n, "%s%s", i ? "; " : "", part[i]);
        n += w > 0 ? (size_t)w : 0; /* snprintf truncates and terminates past cap */
    }
    return np > 0;
}

/* JSON number that stays valid for NaN / inf (-> null). */
json_t *bench_jnum(double x) {
    return isfinite(x) ? json_real(x) : json_null();
}

json_t *bench_jstats3(const double *x, size_t n) {
    return json_pack("{s:o,s:o,s:o}", "median", bench_jnum(bench_quantile(x, n, 0.5)), "min",
                     bench_jnum(bench_min(x, n)), "max", bench_jnum(bench_max(x, n)));
}

json_t *bench_jpct(const double *x, size_t n) {
    return json_pack("{s:o,s:o}", "p50", bench_jnum(bench_quantile(x, n, 0.5)), "p90",
                     bench_jnum(bench_quantile(x, n, 0.9)));
}

/* ---------------------------------------------------------------- step timing */

/* Fill ctx[0..n) with the prompt's tokens then a repeating pattern of ids. */
void bench_make_fill(int32_t *ctx, int32_t n, const int32_t *prompt, int32_t n_prompt,
                     int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++)
        ctx[i] = i < n_prompt ? prompt[i] : (int32_t)(3 + (i * 7919) % (n_vocab - 3));
}

/* Median time (ms) of evaluating n tokens with logits for all of them on top of
 * ctx[0..pos) in session s, after one untimed pass; the cache is rolled back after each
 * repetition. */
int bench_time_eval(sd_session *s, const int32_t *ctx, int32_t pos, int32_t n, int reps,
                    float *logits, double *med_ms, sd_error *err) {
    int rc = sd_session_seq_sync(s, 0, ctx, pos, err);
    /* One untimed pass first (page faults of the mapping, cold caches). */
    if (!rc) rc = sd_session_eval(s, ctx + pos, n, logits, n, err);
    if (!rc) rc = sd_session_seq_truncate(s, 0, pos, err);
    if (rc) return rc;
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    for (int r = 0; r < reps && !rc; r++) {
        const double t0 = sd_time_ms();
        rc = sd_session_eval(s, ctx + pos, n, logits, n, err);
        t[r] = sd_time_ms() - t0;
        if (!rc) rc = sd_session_seq_truncate(s, 0, pos, err);
    }
    if (!rc) *med_ms = bench_quantile(t, (size_t)reps, 0.5);
    free(t);
    return rc;
}

void bench_free_prompts(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* The category of a prompt file: its "# category: NAME" first line, else its base name. */
static char *file_category(const char *path, const char *first_line) {
    static const char tag[] = "# category:";
    if (first_line && !strncmp(first_line, tag, sizeof tag - 1)) {
        const char *s = first_line + sizeof tag - 1;
        while (*s == ' ' || *s == '\t')
            s++;
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (n > 0) return strndup(s, n);
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return strndup(base, dot && dot > base ? (size_t)(dot - base) : strlen(base));
}

int bench_read_prompts(const char *path, char ***out, int *n_out, char **category, sd_error *err) {
    const int fd = sd_file_open_regular(path, err); /* never blocks on a FIFO */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return fd >= 0 ? sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path) : SD_ERR_IO;
    }
    char **v = NULL;
    int n = 0, cap = 0, first = 1;
    char *line = NULL, *cat = NULL;
    size_t lcap = 0;
    ssize_t len;
    int rc = SD_OK;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (first) {
            first = 0;
            if (!strncmp(line, "# category:", 11)) {
                if (!(cat = file_category(path, line))) {
                    rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
                    break;
                }
                continue;
            }
        }
        if (len == 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(line))) {
            rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
            break;
        }
        n++;
    }
    if (!rc && ferror(f)) rc = sd_errorf(err, SD_ERR_IO, "%s: read error", path);
    free(line);
    fclose(f);
    if (!rc && n == 0) rc = sd_errorf(err, SD_ERR_ARG, "%s: no prompts (one a line)", path);
    if (!rc && !cat && !(cat = file_category(path, NULL)))
        rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    if (rc) {
        bench_free_prompts(v, n);
        free(cat);
        return rc;
    }
    *out = v;
    *n_out = n;
    if (category)
        *category = cat;
    else
        free(cat);
    return SD_OK;
}
