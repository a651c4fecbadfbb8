/*
 * tools/bench.h: PRIVATE to the bench command (bench.c: options and dispatch;
 * bench_kernels.c: --kernels; bench_ab.c: the A/B runs): the options and the small
 * statistics / JSON helpers they share.
 */
#ifndef SD_CLI_BENCH_H
#define SD_CLI_BENCH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/tools.h"
#include "runtime/model/sd_model.h"

#define MAX_KS           16
#define MAX_PROMPT_FILES 16
#define MAX_MODES        16

typedef struct bench_cli {
    sd_cli_gen_opts g; /* the generation flags; -n, -k and --seed are bench's own */
    const char *json;
    int kernels, roof, no_roof, profile;
    const char *roof_kernel; /* NULL: the widest loads */
    int32_t ks[MAX_KS];
    int n_ks; /* 0: -k and --k-list absent */
    int64_t runs, warmup, reps, bw_mib, pos, prefill;
    int has_runs;
    int64_t rounds; /* --rounds N (the side-by-side mode): every variant N times per prompt */
    /* -f FILE, repeatable (the A/B mode reads the first) */
    const char *prompt_files[MAX_PROMPT_FILES];
    int n_prompt_files;
    /* --draft-types LIST: the side-by-side mode (bench_modes.c); indices into its table */
    int modes[MAX_MODES];
    int n_modes;
} bench_cli;

/* Usage error with bench's hint; returns SD_EXIT_USAGE. */
int bench_usage(const char *fmt, const char *arg);

/* p-quantile (linear interpolation between order statistics) of x[0..n); 0 if n == 0. */
double bench_quantile(const double *x, size_t n, double p);
double bench_min(const double *x, size_t n);
double bench_max(const double *x, size_t n);

/* A growable vector of doubles. */
typedef struct bench_dvec {
    double *v;
    size_t n, cap;
} bench_dvec;
int bench_dvec_push(bench_dvec *d, double x); /* 0, or -1 on OOM */
void bench_dvec_free(bench_dvec *d);

/* JSON helpers: a real (null for NaN/inf); {median, min, max}; {p50, p90}; write a
 * document atomically to path. */
json_t *bench_jnum(double x);
json_t *bench_jstats3(const double *x, size_t n);
json_t *bench_jpct(const double *x, size_t n);
int bench_write_json(json_t *root, const char *path, sd_error *err);

/* ctx[0 .. n): the prompt, then a deterministic filler of valid ids. */
void bench_make_fill(int32_t *ctx, int32_t n, const int32_t *prompt, int32_t n_prompt,
                     int32_t n_vocab);
/* Median ms over reps of evaluating ctx[pos .. pos + n) after the cache holds ctx[0 .. pos)
 * (logits for all n rows into logits). */
int bench_time_eval(sd_session *s, const int32_t *ctx, int32_t pos, int32_t n, int reps,
                    float *logits, double *ms, sd_error *err);

/*
 * Figures outside what the model of speculative decoding allows, which only a busy or
 * unsteady machine produces (the timings of the two sides are then not comparable):
 *   - speedup above K + 1: a target pass emits at most K + 1 tokens and costs at least
 *     one decode step (v >= 1), so the speedup is at most (K + 1) / v <= K + 1;
 *   - v below BENCH_V_MIN: a (K+1)-token verification pass measured cheaper than one
 *     decode step beyond timing noise (it does strictly more work);
 *   - measured speedup more than BENCH_PRED_FACTOR times off the predicted one (above or
 *     below), the prediction being from the same run's a, c and v.
 * Non-finite figures are not judged. Returns 1 (reasons "; "-joined into why[cap]) or 0
 * (why = "").
 */
#define BENCH_V_MIN       0.9
#define BENCH_PRED_FACTOR 2.0
int bench_suspect(int32_t k, double speedup, double predicted, double v, char *why, size_t cap);

/*
 * Prompts of a file, one a line (empty lines skipped, a trailing '\r' dropped). A first
 * line "# category: NAME" names the file's category (else the file name without folder
 * and extension): *category is malloc'd. Errors: SD_ERR_IO, SD_ERR_ARG (no prompts).
 */
int bench_read_prompts(const char *path, char ***out, int *n_out, char **category, sd_error *err);
void bench_free_prompts(char **v, int n);

/* --draft-types LIST -> c->modes (names: bench_modes.c). -1 and a usage message if bad. */
int bench_parse_modes(const char *list, bench_cli *c);

/* The three modes. */
int bench_run_kernels(const bench_cli *c, const sd_cli_pair *p, sd_error *err);
/* --roof: the memory roof alone, at 1 and N threads (bench_kernels.c). */
int bench_run_roof(const bench_cli *c, const sd_cli_pair *p, sd_error *err);
int bench_run_ab(const bench_cli *c, sd_cli_pair *p, char **prompts, int n_prompts, sd_error *err);
/* Draft types side by side on the same prompts of each file (bench_modes.c). */
int bench_run_modes(const bench_cli *c, sd_cli_pair *p, sd_error *err);

#endif /* SD_CLI_BENCH_H */
