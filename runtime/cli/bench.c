/*
 * specdec bench: the A/B benchmark that measures what speculative decoding buys, and
 * (--kernels) what the forward pass achieves against the machine's memory bandwidth.
 *
 * A/B mode
 *   specdec bench [--config F] [-m TARGET] [-md DRAFT] [-f PROMPTS | -p TEXT]
 *                 [--runs N] [--k-list 1,2,4,8 | -k K] [-n N] [--temp T] [--top-k N]
 *                 [--top-p P] [--seed S] [-t N] [-c N] [--no-bos] [--warmup N]
 *                 [--reps N] [--json FILE]
 * Models are loaded once. For each K, for run i = 0 .. N-1: prompt i mod n_prompts,
 * seed S + i; side A generates with the target alone, then side B speculatively with K
 * drafted tokens (ABAB), both through sd_generate and the same scorer (its KV cache is
 * emptied before each run so neither side inherits the other's prefill). Greedy by
 * default (--temp 0): each B run's tokens must equal its A run's ("greedy_match").
 *   tokens/s  emitted tokens / decode time (prefill excluded), median / min / max
 *   speedup   median (and min, max) of the per-pair ratios B tok/s / A tok/s
 *   acceptance rate a = accepted / drafted over the K's B runs; mean accepted tokens
 *             per target pass = accepted / target passes; per-position acceptance
 *   TTFT      start of prefill -> first token, p50 / p90 over runs
 *   ITL       per-token inter-token latency, p50 / p90 over every token of the side's
 *             runs: a block of n tokens emitted by one step t ms after the previous
 *             block counts n latencies of t / n; the first token is TTFT and the other
 *             tokens of the first block count 0 (so the mean equals the stats' ITL)
 *   predicted speedup  (1 - a^(K+1)) / ((1 - a) (K c + v))  (Leviathan et al. 2023,
 *             eq. 1 and Thm 3.8 with the verification cost measured rather than assumed
 *             equal to a decode step); a -> 1 gives (K + 1) / (K c + v);
 *             c = draft decode step / target decode step, v = target (K+1)-token
 *             verification pass / target decode step: sd_session_eval timed on their own
 *             sessions at position n_prompt + n/2, median of --reps, in the same process
 *             before the runs.
 *
 * Kernels mode
 *   specdec bench --kernels -m TARGET [-md DRAFT] [-t N] [--bw-mib M] [--pos P]
 *                 [--prefill N] [--reps N] [--json FILE]
 *   memory roof            the best streaming read of an M MiB buffer (default 2048) at
 *                          1 thread and at N threads (runtime/cli/roof.c: per-thread
 *                          contiguous slices, widest loads, best of max(10, --reps)
 *                          passes), measured before and again after the models; the
 *                          fractions use the best N-thread figure; --no-roof skips it
 *                          (fractions null; scripts/vs_llamacpp.sh measures it once)
 *   per model              weight bytes (sd_model_weight_bytes) and a decode step at
 *                          position P (median): achieved GB/s = weight bytes / step
 *                          time, beside the bandwidth; the verification pass for
 *                          K+1 = 1..17 tokens relative to one decode step; prefill of N
 *                          tokens from an empty cache with logits for every token:
 *                          tokens/s and GFLOP/s = 2 * params * N / time (params: every
 *                          matrix a token passes through, classifier included, the
 *                          embedding lookup and attention scores excluded).
 *
 * Roof mode
 *   specdec bench --roof [-t N] [--bw-mib M] [--reps N] [--roof-kernel K] [--json FILE]
 *   the memory roof alone (no model) at 1 thread and at N threads (0 / unset: all cores);
 *   --roof-kernel avx512|avx2|scalar forces the loads (default: the widest).
 * Tables go to stdout, progress to stderr, --json FILE gets every record.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "quant/sd_quant.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/config.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "verify/sd_verify.h"

#define MAX_KS 16
#define HINT   "see 'specdec bench --help'"

static int usage(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

static void bench_help(FILE *f) {
    fprintf(f, "usage: specdec bench [options]            A/B: target alone vs speculative\n"
               "       specdec bench --kernels [options]  bandwidth, verification cost, prefill\n"
               "  --config FILE          pair config (generate's keys); flags override it\n"
               "  --target FILE (-m)     target GGUF\n"
               "  --draft FILE  (-md)    draft GGUF\n"
               "  --prompt-file F (-f)   prompts, one a line (run i uses prompt i mod n)\n"
               "  --prompt TEXT (-p)     a single prompt\n"
               "  --runs N               A/B pairs per K (default 3)\n"
               "  --k-list L             comma-separated K values, e.g. 1,2,4,8\n"
               "  -k K                   a single K (default: the config's, else 4)\n"
               "  -n N                   tokens per run (default: the config's, else 128)\n"
               "  --temp T               temperature (default 0: greedy, checked token for token)\n"
               "  --top-k N, --top-p P   sampling warps (defaults 40, 0.95)\n"
               "  --seed S               seed of run 0 (run i uses S + i; default 42)\n"
               "  --threads N (-t)       threads, 0 = all cores\n"
               "  --ctx-size N (-c)      context size, 0 = the target's\n"
               "  --no-bos               do not prepend BOS\n"
               "  --kv-type f32|f16      KV-cache element type (default: the config's, else f32)\n"
               "  --warmup N             untimed A/B pairs before measuring (default 1)\n"
               "  --reps N               repetitions of each timed step (default 9)\n"
               "  --json FILE            write per-run records and the summary as JSON\n"
               "  --kernels              kernels mode: also --bw-mib M (default 2048),\n"
               "                         --pos P (default 128), --prefill N (default 128)\n"
               "  --roof                 the memory roof alone (best streaming read at 1 and\n"
               "                         N threads); --roof-kernel avx512|avx2|scalar;\n"
               "                         --no-roof: kernels mode without it\n");
}

/* ---------------------------------------------------------------- small helpers */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* p-quantile (linear interpolation between order statistics) of x[0..n); 0 if n == 0. */
static double quantile(const double *x, size_t n, double p) {
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

static double vmin(const double *x, size_t n) {
    double m = n ? x[0] : 0.0;
    for (size_t i = 1; i < n; i++)
        m = x[i] < m ? x[i] : m;
    return m;
}

static double vmax(const double *x, size_t n) {
    double m = n ? x[0] : 0.0;
    for (size_t i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static int dvec_push(dvec *d, double x) {
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

static void dvec_free(dvec *d) {
    free(d->v);
    memset(d, 0, sizeof *d);
}

/* "1,2,4,8" -> ks; returns the count or -1. */
static int parse_k_list(const char *s, int32_t *ks) {
    int n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int64_t k;
        if (n >= MAX_KS || sd_cli_parse_i64(tok, 1, SD_MAX_DRAFT, &k)) return -1;
        ks[n++] = (int32_t)k;
    }
    return n > 0 ? n : -1;
}

/* Read prompts, one a line (empty lines skipped, a trailing '\r' dropped). */
static int read_prompts(const char *path, char ***out, int *n_out, sd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return sd_errorf(err, SD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char **v = NULL;
    int n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int rc = SD_OK;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
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
    if (rc) {
        for (int i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return rc;
    }
    *out = v;
    *n_out = n;
    return SD_OK;
}

static int write_json(json_t *root, const char *path, sd_error *err) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return sd_errorf(err, SD_ERR_ARG, "%.200s...: path too long", path);
    if (json_dump_file(root, tmp, JSON_INDENT(1) | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(8))) {
        unlink(tmp);
        return sd_errorf(err, SD_ERR_IO, "%s: cannot write JSON", path);
    }
    if (rename(tmp, path)) {
        unlink(tmp);
        return sd_errorf(err, SD_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp,
                         strerror(errno));
    }
    return SD_OK;
}

/* JSON number that stays valid for NaN / inf (-> null). */
static json_t *jnum(double x) {
    return isfinite(x) ? json_real(x) : json_null();
}

static json_t *jstats3(const double *x, size_t n) {
    return json_pack("{s:o,s:o,s:o}", "median", jnum(quantile(x, n, 0.5)), "min", jnum(vmin(x, n)),
                     "max", jnum(vmax(x, n)));
}

static json_t *jpct(const double *x, size_t n) {
    return json_pack("{s:o,s:o}", "p50", jnum(quantile(x, n, 0.5)), "p90",
                     jnum(quantile(x, n, 0.9)));
}

/* ---------------------------------------------------------------- step timing */

/* Fill ctx[0..n) with the prompt's tokens then a repeating pattern of ids. */
static void make_fill(int32_t *ctx, int32_t n, const int32_t *prompt, int32_t n_prompt,
                      int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++)
        ctx[i] = i < n_prompt ? prompt[i] : (int32_t)(3 + (i * 7919) % (n_vocab - 3));
}

/* Median time (ms) of evaluating n tokens with logits for all of them on top of
 * ctx[0..pos) in session s, after one untimed pass; the cache is rolled back after each
 * repetition. */
static int time_eval(sd_session *s, const int32_t *ctx, int32_t pos, int32_t n, int reps,
                     float *logits, double *med_ms, sd_error *err) {
    int rc = sd_session_sync(s, ctx, pos, err);
    /* One untimed pass first (page faults of the mapping, cold caches). */
    if (!rc) rc = sd_session_eval(s, ctx + pos, n, logits, n, err);
    if (!rc) rc = sd_session_truncate(s, pos, err);
    if (rc) return rc;
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    for (int r = 0; r < reps && !rc; r++) {
        const double t0 = sd_time_ms();
        rc = sd_session_eval(s, ctx + pos, n, logits, n, err);
        t[r] = sd_time_ms() - t0;
        if (!rc) rc = sd_session_truncate(s, pos, err);
    }
    if (!rc) *med_ms = quantile(t, (size_t)reps, 0.5);
    free(t);
    return rc;
}

/* ---------------------------------------------------------------- options */

typedef struct bench_cli {
    sd_cli_gen_opts g; /* the generation flags; -n, -k and --seed are bench's own */
    const char *json;
    int kernels, roof, no_roof;
    const char *roof_kernel; /* NULL: the widest loads */
    int32_t ks[MAX_KS];
    int n_ks; /* 0: -k and --k-list absent */
    int64_t runs, warmup, reps, bw_mib, pos, prefill;
} bench_cli;

enum {
    OPT_RUNS = SD_CLI_OPT_OWN,
    OPT_KLIST,
    OPT_WARMUP,
    OPT_REPS,
    OPT_JSON,
    OPT_KERNELS,
    OPT_BW,
    OPT_POS,
    OPT_PREFILL,
    OPT_ROOF,
    OPT_ROOF_KERNEL,
    OPT_NO_ROOF,
};

static int bench_option(int o, const char *arg, void *user) {
    bench_cli *c = user;
    switch (o) {
    case OPT_RUNS:
        if (sd_cli_parse_i64(arg, 1, 100000, &c->runs))
            return usage("--runs: expected an integer >= 1, found '%s'", arg);
        break;
    case OPT_KLIST:
        if ((c->n_ks = parse_k_list(arg, c->ks)) < 0)
            return usage("--k-list: expected up to 16 comma-separated integers in [1, 16], "
                         "found '%s'",
                         arg);
        break;
    case 'k':
        if (sd_cli_parse_i64(arg, 1, SD_MAX_DRAFT, &c->g.k))
            return usage("-k: expected an integer in [1, 16], found '%s'", arg);
        c->ks[0] = (int32_t)c->g.k;
        c->n_ks = 1;
        c->g.has_k = 1;
        break;
    case 'n':
        if (sd_cli_parse_i64(arg, 1, INT32_MAX / 4, &c->g.n))
            return usage("-n/--max-tokens: expected an integer >= 1, found '%s'", arg);
        c->g.has_n = 1;
        break;
    case 's': /* run i uses seed S + i */
        if (sd_cli_parse_i64(arg, 0, INT64_MAX / 2, &c->g.seed))
            return usage("--seed: expected an integer >= 0, found '%s'", arg);
        c->g.has_seed = 1;
        break;
    case OPT_WARMUP:
        if (sd_cli_parse_i64(arg, 0, 1000, &c->warmup))
            return usage("--warmup: expected an integer >= 0, found '%s'", arg);
        break;
    case OPT_REPS:
        if (sd_cli_parse_i64(arg, 1, 100000, &c->reps))
            return usage("--reps: expected an integer >= 1, found '%s'", arg);
        break;
    case OPT_JSON:
        c->json = arg;
        break;
    case OPT_KERNELS:
        c->kernels = 1;
        break;
    case OPT_ROOF:
        c->roof = 1;
        break;
    case OPT_NO_ROOF:
        c->no_roof = 1;
        break;
    case OPT_ROOF_KERNEL:
        if (strcmp(arg, "avx512") && strcmp(arg, "avx2") && strcmp(arg, "scalar"))
            return usage("--roof-kernel: expected avx512, avx2 or scalar, found '%s'", arg);
        c->roof_kernel = arg;
        break;
    case OPT_BW:
        if (sd_cli_parse_i64(arg, 1, 1 << 24, &c->bw_mib))
            return usage("--bw-mib: expected an integer >= 1, found '%s'", arg);
        break;
    case OPT_POS:
        if (sd_cli_parse_i64(arg, 0, INT32_MAX / 2, &c->pos))
            return usage("--pos: expected an integer >= 0, found '%s'", arg);
        break;
    case OPT_PREFILL:
        if (sd_cli_parse_i64(arg, 1, 1 << 16, &c->prefill))
            return usage("--prefill: expected an integer >= 1, found '%s'", arg);
        break;
    case 'h':
        bench_help(stdout);
        return -1;
    default:
        return SD_CLI_PASS;
    }
    return 0;
}

static int parse_bench(int argc, char **argv, bench_cli *c) {
    static const struct option opts[] = {
        SD_CLI_GEN_LONGOPTS,
        {"runs", required_argument, 0, OPT_RUNS},
        {"k-list", required_argument, 0, OPT_KLIST},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"reps", required_argument, 0, OPT_REPS},
        {"json", required_argument, 0, OPT_JSON},
        {"kernels", no_argument, 0, OPT_KERNELS},
        {"bw-mib", required_argument, 0, OPT_BW},
        {"pos", required_argument, 0, OPT_POS},
        {"prefill", required_argument, 0, OPT_PREFILL},
        {"roof", no_argument, 0, OPT_ROOF},
        {"roof-kernel", required_argument, 0, OPT_ROOF_KERNEL},
        {"no-roof", no_argument, 0, OPT_NO_ROOF},
        {0, 0, 0, 0},
    };
    memset(c, 0, sizeof *c);
    c->runs = 3;
    c->warmup = 1;
    c->reps = 9;
    c->bw_mib = 2048;
    c->pos = 128;
    c->prefill = 128;
    return sd_cli_gen_parse(argc, argv, opts, HINT, &c->g, bench_option, c);
}

/* ---------------------------------------------------------------- kernels mode */

/* The roof at 1 thread (skipped when nth == 1) and at nth threads. */
static int measure_roof(const bench_cli *c, int32_t nth, sd_cli_roof *r1, sd_cli_roof *rn,
                        sd_error *err) {
    const int32_t passes = (int32_t)(c->reps < 10 ? 10 : c->reps);
    fprintf(stderr, "specdec bench: memory roof (%lld MiB, %d passes, 1%s%.0d thread%s)\n",
            (long long)c->bw_mib, passes, nth > 1 ? " and " : "", nth > 1 ? nth : 0,
            nth > 1 ? "s" : "");
    int rc = sd_cli_roof_measure(c->bw_mib, nth, passes, c->roof_kernel, rn, err);
    if (!rc && nth > 1) rc = sd_cli_roof_measure(c->bw_mib, 1, passes, c->roof_kernel, r1, err);
    if (!rc && nth == 1) *r1 = *rn;
    return rc;
}

static json_t *roof_json(const sd_cli_roof *r) {
    if (!r->kernel) return json_null(); /* not measured */
    return json_pack("{s:i,s:o,s:o,s:s,s:I,s:i}", "threads", r->threads, "gbps", jnum(r->gbps),
                     "gbps_median", jnum(r->gbps_median), "kernel", r->kernel, "buffer_mib",
                     (json_int_t)(r->bytes >> 20), "passes", r->passes);
}

static int run_roof(const bench_cli *c, const sd_cli_pair *p, sd_error *err) {
    const int32_t nth = p->threads > 0 ? p->threads : sd_n_cores();
    sd_cli_roof r1, rn;
    int rc = measure_roof(c, nth, &r1, &rn, err);
    if (rc) return rc;
    printf("memory roof (%s loads, %lld MiB, best / median of %d passes): 1 thread %.2f / %.2f "
           "GB/s",
           rn.kernel, (long long)c->bw_mib, rn.passes, r1.gbps, r1.gbps_median);
    if (nth > 1) printf(", %d threads %.2f / %.2f GB/s", nth, rn.gbps, rn.gbps_median);
    printf("\n");
    if (!c->json) return SD_OK;
    json_t *root =
        json_pack("{s:s,s:{s:i,s:i,s:s},s:{s:o,s:o}}", "mode", "roof", "machine", "n_cores",
                  sd_n_cores(), "threads", nth, "kernels", sd_quant_kernels_name(), "roof", "t1",
                  roof_json(&r1), "tn", roof_json(&rn));
    rc = root ? write_json(root, c->json, err)
              : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    json_decref(root);
    return rc;
}

/* Matrix parameters one token passes through: every 2-D tensor but the embedding
 * (counted once more when it is the tied classifier). Also the embedding's bytes. */
static void model_params(const sd_model *m, double *params, size_t *embd_bytes, int *tied) {
    const sd_gguf *g = sd_model_gguf(m);
    double p = 0;
    *embd_bytes = 0;
    *tied = sd_gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        const double ne = (double)t->ne[0] * (double)t->ne[1];
        if (!strcmp(t->name, "token_embd.weight")) {
            *embd_bytes = t->nbytes;
            if (*tied) p += ne;
        } else if (t->n_dims >= 2) {
            p += ne;
        }
    }
    *params = p;
}

static int kernels_model(const char *role, const sd_model *m, const bench_cli *c,
                         const sd_cli_pair *p, double bw, json_t *jmodels, sd_error *err) {
    const sd_hparams *hp = sd_model_hparams(m);
    const int32_t n_verify_max = SD_MAX_DRAFT + 1;
    int32_t n_pre = (int32_t)c->prefill;
    int32_t pos = (int32_t)c->pos;
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = p->threads;
    sp.n_ctx = hp->n_ctx_train;
    sp.kv_type = p->kv_type && !strcmp(p->kv_type, "f16") ? SD_TYPE_F16 : SD_TYPE_F32;
    if (n_pre > sp.n_ctx) n_pre = sp.n_ctx;
    if (pos + n_verify_max > sp.n_ctx) pos = sp.n_ctx - n_verify_max;
    if (pos < 0) return sd_errorf(err, SD_ERR_ARG, "bench: context of %s is too short", role);
    sp.n_batch = n_pre > n_verify_max ? n_pre : n_verify_max;
    sd_session *s = NULL;
    int rc = sd_session_init(m, &sp, &s, err);
    if (rc) return rc;
    const int32_t n_fill = pos + (n_pre > n_verify_max ? n_pre : n_verify_max);
    int32_t *ctx = malloc((size_t)n_fill * sizeof *ctx);
    float *logits = malloc((size_t)sp.n_batch * (size_t)hp->n_vocab * sizeof(float));
    if (!ctx || !logits) {
        rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        goto done;
    }
    const int32_t bos = 1 < hp->n_vocab ? 1 : 0;
    make_fill(ctx, n_fill, &bos, 1, hp->n_vocab);
    const int reps = (int)c->reps;
    double params;
    size_t embd_bytes;
    int tied;
    model_params(m, &params, &embd_bytes, &tied);
    const size_t wbytes = sd_model_weight_bytes(m);
    /* A decode step reads one embedding row, not the table (unless it is the classifier). */
    const size_t streamed = tied ? wbytes : wbytes - embd_bytes;
    fprintf(stderr, "specdec bench: %s: decode and verification passes at position %d\n", role,
            pos);
    double t1 = 0;
    json_t *jver = json_array();
    printf("\n%s %s: %.1f M matrix params, weights %.1f MiB (%.1f MiB streamed per step)\n", role,
           sd_model_path(m), params / 1e6, wbytes / 1048576.0, streamed / 1048576.0);
    printf("  K+1  verify ms  x decode step\n");
    for (int32_t n = 1; n <= n_verify_max && !rc; n++) {
        double ms;
        rc = time_eval(s, ctx, pos, n, reps, logits, &ms, err);
        if (rc) break;
        if (n == 1) t1 = ms;
        printf("  %3d  %9.3f  %6.2f\n", n, ms, ms / t1);
        json_array_append_new(jver, json_pack("{s:i,s:o,s:o}", "n_tokens", n, "ms", jnum(ms),
                                              "rel_decode", jnum(ms / t1)));
    }
    if (rc) {
        json_decref(jver);
        goto done;
    }
    fprintf(stderr, "specdec bench: %s: prefill of %d tokens\n", role, n_pre);
    double pre_ms = 0;
    {
        const int pre_reps = reps < 3 ? reps : 3;
        double *t = malloc((size_t)pre_reps * sizeof *t);
        if (!t) rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        for (int r = 0; r < pre_reps && !rc; r++) {
            rc = sd_session_truncate(s, 0, err);
            const double t0 = sd_time_ms();
            if (!rc) rc = sd_session_eval(s, ctx, n_pre, logits, n_pre, err);
            t[r] = sd_time_ms() - t0;
        }
        if (!rc) pre_ms = quantile(t, (size_t)pre_reps, 0.5);
        free(t);
    }
    if (rc) {
        json_decref(jver);
        goto done;
    }
    const double dec_gbps = wbytes / (t1 * 1e-3) / 1e9;
    const double str_gbps = streamed / (t1 * 1e-3) / 1e9;
    const double pre_tps = n_pre / (pre_ms * 1e-3);
    const double gflops = 2.0 * params * n_pre / (pre_ms * 1e-3) / 1e9;
    printf("  decode step %.3f ms: %.2f GB/s of weights (%.2f GB/s streamed)", t1, dec_gbps,
           str_gbps);
    if (isfinite(bw)) printf(", %.0f%% of %.2f GB/s", 100.0 * str_gbps / bw, bw);
    printf("\n");
    printf("  prefill %d tokens: %.3f ms, %.1f tokens/s, %.2f GFLOP/s (2 * params * tokens)\n",
           n_pre, pre_ms, pre_tps, gflops);
    json_t *rel = json_object();
    for (int32_t n = 5; n <= n_verify_max; n += 4) {
        char key[8];
        snprintf(key, sizeof key, "%d", n);
        json_object_set(rel, key,
                        json_object_get(json_array_get(jver, (size_t)n - 1), "rel_decode"));
    }
    json_array_append_new(
        jmodels,
        json_pack("{s:s,s:s,s:I,s:I,s:o,s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:i,s:o,s:o,s:o}}", "role",
                  role, "path", sd_model_path(m), "weight_bytes", (json_int_t)wbytes,
                  "streamed_bytes", (json_int_t)streamed, "params", jnum(params), "pos", pos,
                  "decode_ms", jnum(t1), "decode_gbps", jnum(dec_gbps), "decode_gbps_streamed",
                  jnum(str_gbps), "fraction_of_bandwidth", jnum(str_gbps / bw), "verify", jver,
                  "verify_rel_decode", rel, "prefill", "n_tokens", n_pre, "ms", jnum(pre_ms),
                  "tokens_per_s", jnum(pre_tps), "gflops", jnum(gflops)));
done:
    free(ctx);
    free(logits);
    sd_session_free(s);
    return rc;
}

static int run_kernels(const bench_cli *c, const sd_cli_pair *p, sd_error *err) {
    sd_model *tm = NULL, *dm = NULL;
    json_t *root = NULL, *jmodels = json_array();
    int rc = sd_model_load(p->target, &tm, err);
    if (!rc && p->draft) rc = sd_model_load(p->draft, &dm, err);
    const int32_t nth = p->threads > 0 ? p->threads : sd_n_cores();
    const int32_t passes = (int32_t)(c->reps < 10 ? 10 : c->reps);
    const int roof = !c->no_roof;
    sd_cli_roof r1 = {0}, rn = {0}, rn_after = {0};
    double bw = NAN; /* NaN without the roof: fractions become null */
    if (!rc && roof) rc = measure_roof(c, nth, &r1, &rn, err);
    /* Fractions use the roof measured before the models; it is measured again after them
     * and the JSON reports the best of both (a shared machine makes either low). */
    if (!rc) {
        printf("machine: %d cores, %d threads, kernels %s", sd_n_cores(), nth,
               sd_quant_kernels_name());
        if (roof) {
            bw = rn.gbps;
            printf(", memory roof %.2f GB/s at 1 thread, %.2f GB/s at %d (best streaming read "
                   "of %lld MiB, %s loads)",
                   r1.gbps, rn.gbps, nth, (long long)c->bw_mib, rn.kernel);
        }
        printf("\n");
        rc = kernels_model("target", tm, c, p, bw, jmodels, err);
    }
    if (!rc && dm) rc = kernels_model("draft", dm, c, p, bw, jmodels, err);
    if (!rc && roof)
        rc = sd_cli_roof_measure(c->bw_mib, nth, passes, c->roof_kernel, &rn_after, err);
    if (!rc && roof) {
        bw = rn_after.gbps > rn.gbps ? rn_after.gbps : rn.gbps;
        printf("\nmemory roof at %d threads: %.2f GB/s before, %.2f GB/s after the models; best "
               "%.2f\n",
               nth, rn.gbps, rn_after.gbps, bw);
        for (size_t i = 0; i < json_array_size(jmodels); i++) {
            json_t *mo = json_array_get(jmodels, i);
            const double g = json_real_value(json_object_get(mo, "decode_gbps_streamed"));
            json_object_set_new(mo, "fraction_of_bandwidth", jnum(g / bw));
            printf("%s decode: %.2f GB/s streamed = %.0f%% of %.2f GB/s\n",
                   json_string_value(json_object_get(mo, "role")), g, 100.0 * g / bw, bw);
        }
    }
    if (!rc && c->json) {
        json_t *jroof = roof ? json_pack("{s:o,s:o,s:o}", "t1", roof_json(&r1), "tn",
                                         roof_json(&rn), "tn_after", roof_json(&rn_after))
                             : json_null();
        root =
            json_pack("{s:s,s:{s:i,s:i,s:s,s:o,s:o,s:o,s:I},s:o,s:O}", "mode", "kernels", "machine",
                      "n_cores", sd_n_cores(), "threads", nth, "kernels", sd_quant_kernels_name(),
                      "mem_read_gbps", jnum(bw), "mem_read_gbps_before", jnum(roof ? rn.gbps : NAN),
                      "mem_read_gbps_after", jnum(roof ? rn_after.gbps : NAN), "mem_buffer_mib",
                      (json_int_t)c->bw_mib, "roof", jroof, "models", jmodels);
        rc = root ? write_json(root, c->json, err)
                  : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    }
    json_decref(root);
    json_decref(jmodels);
    sd_model_free(dm);
    sd_model_free(tm);
    return rc;
}

/* ---------------------------------------------------------------- A/B mode */

typedef struct itl_rec {
    double t_prev;
    int first_done;
    dvec *samples;
    int oom;
} itl_rec;

static int itl_cb(void *user, const int32_t *tokens, int32_t n) {
    (void)tokens;
    itl_rec *r = user;
    const double now = sd_time_ms();
    if (!r->first_done) {
        r->first_done = 1;
        for (int32_t i = 1; i < n; i++)
            r->oom |= dvec_push(r->samples, 0.0);
    } else {
        const double gap = (now - r->t_prev) / n;
        for (int32_t i = 0; i < n; i++)
            r->oom |= dvec_push(r->samples, gap);
    }
    r->t_prev = now;
    return 0;
}

typedef struct side_acc { /* one side (A or B) of one K */
    dvec tps, ttft, itl;
    int64_t n_gen, n_passes, n_drafted, n_accepted;
    int64_t drafted_at[SD_MAX_DRAFT], accepted_at[SD_MAX_DRAFT];
} side_acc;

static void side_free(side_acc *s) {
    dvec_free(&s->tps);
    dvec_free(&s->ttft);
    dvec_free(&s->itl);
}

typedef struct ab_ctx {
    const bench_cli *c;
    const sd_cli_pair *p;
    int32_t **prompt_ids;
    int32_t *n_prompt_ids;
    int n_prompts;
    int32_t eos;
    int32_t *out_a, *out_b;
} ab_ctx;

/* One generation; draft K = 0 for target alone. Fills st and the accumulators. */
static int one_run(ab_ctx *a, int pi, uint64_t seed, int32_t k, int32_t *out, side_acc *acc,
                   sd_gen_stats *st, sd_error *err) {
    sd_gen_params gp = a->p->gp;
    gp.seed = seed;
    gp.n_draft = k > 0 ? k : gp.n_draft;
    sd_proposer *prop = NULL;
    int rc = SD_OK;
    if (k > 0)
        rc = sd_proposer_llm_init(a->p->dm, &a->p->dsp, &gp.samp, sd_rng_stream_seed(seed, 1),
                                  sd_model_hparams(a->p->tm)->n_vocab, &prop, err);
    /* Empty the target's KV cache: each run prefills its prompt from scratch. */
    if (!rc) rc = sd_scorer_sync(a->p->scorer, a->prompt_ids[pi], 1, err);
    dvec scratch = {0};
    itl_rec rec = {0, 0, acc ? &acc->itl : &scratch, 0};
    if (!rc)
        rc = sd_generate(a->p->scorer, prop, a->prompt_ids[pi], a->n_prompt_ids[pi], a->eos, &gp,
                         itl_cb, &rec, out, gp.n_predict, st, err);
    sd_proposer_free(prop);
    dvec_free(&scratch);
    if (!rc && rec.oom) rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    if (rc || !acc) return rc;
    int e = dvec_push(&acc->tps, sd_stats_tokens_per_s(st));
    e |= dvec_push(&acc->ttft, st->ttft_ms);
    if (e) return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
    acc->n_gen += st->n_generated;
    acc->n_passes += st->n_target_passes;
    acc->n_drafted += st->n_drafted;
    acc->n_accepted += st->n_accepted;
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        acc->drafted_at[i] += st->drafted_at[i];
        acc->accepted_at[i] += st->accepted_at[i];
    }
    return SD_OK;
}

static json_t *run_record(int32_t k, int64_t run, int pi, uint64_t seed, const char *side,
                          const sd_gen_stats *st, int32_t k_used) {
    json_t *pp = json_array();
    for (int32_t i = 0; i < k_used; i++)
        json_array_append_new(
            pp, jnum(st->drafted_at[i] ? (double)st->accepted_at[i] / st->drafted_at[i] : 0.0));
    return json_pack(
        "{s:i,s:I,s:i,s:I,s:s,s:i,s:i,s:i,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
        "s:s}",
        "k", k, "run", (json_int_t)run, "prompt_index", pi, "seed", (json_int_t)seed, "side", side,
        "n_prompt", st->n_prompt, "n_generated", st->n_generated, "n_target_passes",
        st->n_target_passes, "n_drafted", st->n_drafted, "n_accepted", st->n_accepted,
        "acceptance_rate", jnum(sd_stats_acceptance_rate(st)), "tokens_per_pass",
        jnum(sd_stats_tokens_per_pass(st)), "per_position_acceptance", pp, "tokens_per_s",
        jnum(sd_stats_tokens_per_s(st)), "ttft_ms", jnum(st->ttft_ms), "itl_ms",
        jnum(sd_stats_itl_ms(st)), "t_prefill_ms", jnum(st->t_prefill_ms), "t_draft_ms",
        jnum(st->t_draft_ms), "t_verify_ms", jnum(st->t_verify_ms), "t_sample_ms",
        jnum(st->t_sample_ms), "t_total_ms", jnum(st->t_total_ms), "stop",
        sd_stop_reason_str(st->stop));
}

static json_t *side_json(const side_acc *s, int spec, int32_t k) {
    json_t *o = json_pack("{s:o,s:o,s:o,s:I,s:I,s:i}", "tokens_per_s", jstats3(s->tps.v, s->tps.n),
                          "ttft_ms", jpct(s->ttft.v, s->ttft.n), "itl_ms", jpct(s->itl.v, s->itl.n),
                          "n_generated", (json_int_t)s->n_gen, "n_target_passes",
                          (json_int_t)s->n_passes, "n_runs", (int)s->tps.n);
    if (spec) {
        json_t *pp = json_array();
        for (int32_t i = 0; i < k; i++)
            json_array_append_new(
                pp, jnum(s->drafted_at[i] ? (double)s->accepted_at[i] / s->drafted_at[i] : 0.0));
        json_object_set_new(o, "n_drafted", json_integer(s->n_drafted));
        json_object_set_new(o, "n_accepted", json_integer(s->n_accepted));
        json_object_set_new(o, "per_position_acceptance", pp);
    }
    json_object_set_new(o, "tokens_per_pass",
                        jnum(s->n_passes ? (double)s->n_gen / s->n_passes : 0.0));
    return o;
}

static double predicted_speedup(double a, int32_t k, double c, double v) {
    const double den = (double)k * c + v;
    if (!(den > 0)) return NAN;
    if (a >= 1.0 - 1e-12) return (k + 1) / den;
    return (1.0 - pow(a, k + 1)) / ((1.0 - a) * den);
}

static int run_ab(const bench_cli *c, sd_cli_pair *p, char **prompts, int n_prompts,
                  sd_error *err) {
    ab_ctx a = {0};
    a.c = c;
    a.p = p;
    json_t *jruns = json_array(), *jsum = json_array(), *root = NULL;
    sd_session *ts = NULL, *ds = NULL;
    int32_t *fill = NULL;
    float *logits = NULL;
    int rc = sd_cli_pair_load(&c->g, p, err);
    if (rc) goto done;
    const char *target = p->target, *draft = p->draft;
    const int threads = p->threads;
    const int32_t ctx = p->ctx;
    const sd_hparams *th = sd_model_hparams(p->tm);
    const sd_vocab *vocab = sd_model_vocab(p->tm);
    const int greedy = p->gp.samp.temp <= 0.0f;
    int32_t ks[MAX_KS];
    int n_ks = c->n_ks;
    memcpy(ks, c->ks, sizeof ks);
    if (n_ks == 0) {
        ks[0] = p->cfg.has_draft_tokens ? p->cfg.draft_tokens : 4;
        n_ks = 1;
    }
    a.eos = sd_vocab_eos(vocab);
    a.n_prompts = n_prompts;
    a.prompt_ids = calloc((size_t)n_prompts, sizeof *a.prompt_ids);
    a.n_prompt_ids = calloc((size_t)n_prompts, sizeof *a.n_prompt_ids);
    a.out_a = malloc((size_t)p->gp.n_predict * sizeof(int32_t));
    a.out_b = malloc((size_t)p->gp.n_predict * sizeof(int32_t));
    if (!a.prompt_ids || !a.n_prompt_ids || !a.out_a || !a.out_b) {
        rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        goto done;
    }
    const int add_bos = !c->g.no_bos && sd_vocab_add_bos(vocab);
    int32_t max_prompt = 0;
    for (int i = 0; i < n_prompts; i++) {
        size_t n = 0;
        if ((rc = sd_vocab_tokenize(vocab, prompts[i], strlen(prompts[i]), add_bos,
                                    &a.prompt_ids[i], &n, err)))
            goto done;
        if (n == 0 || n + 1 > (size_t)ctx) {
            rc = sd_errorf(err, SD_ERR_CONTEXT, "bench: prompt %d is %zu tokens (context %d)", i, n,
                           ctx);
            goto done;
        }
        a.n_prompt_ids[i] = (int32_t)n;
        if ((int32_t)n > max_prompt) max_prompt = (int32_t)n;
    }

    /* Step costs c and v, measured before the runs on sessions of their own. */
    const int32_t n_vocab = th->n_vocab;
    int32_t pos = a.n_prompt_ids[0] + p->gp.n_predict / 2;
    if (pos + SD_MAX_DRAFT + 1 > p->dsp.n_ctx) pos = p->dsp.n_ctx - SD_MAX_DRAFT - 1;
    if (pos < 1) pos = 1;
    fill = malloc((size_t)(pos + SD_MAX_DRAFT + 1) * sizeof *fill);
    logits = malloc((size_t)(SD_MAX_DRAFT + 1) * (size_t)n_vocab * sizeof(float));
    if (!fill || !logits) {
        rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        goto done;
    }
    make_fill(fill, pos + SD_MAX_DRAFT + 1, a.prompt_ids[0], a.n_prompt_ids[0], n_vocab);
    sd_session_params tsp = p->sp, dsp = p->dsp;
    tsp.n_ctx = dsp.n_ctx = pos + SD_MAX_DRAFT + 1;
    tsp.n_batch = dsp.n_batch = SD_MAX_DRAFT + 1;
    if ((rc = sd_session_init(p->tm, &tsp, &ts, err))) goto done;
    if ((rc = sd_session_init(p->dm, &dsp, &ds, err))) goto done;
    const int reps = (int)c->reps;
    double t_tstep, t_dstep, t_ver[MAX_KS];
    fprintf(stderr, "specdec bench: timing decode steps and verification passes at position %d\n",
            pos);
    if ((rc = time_eval(ts, fill, pos, 1, reps, logits, &t_tstep, err))) goto done;
    if ((rc = time_eval(ds, fill, pos, 1, reps, logits, &t_dstep, err))) goto done;
    for (int ki = 0; ki < n_ks; ki++)
        if ((rc = time_eval(ts, fill, pos, ks[ki] + 1, reps, logits, &t_ver[ki], err))) goto done;
    sd_session_free(ts);
    sd_session_free(ds);
    ts = ds = NULL;
    const double cost_c = t_dstep / t_tstep;

    /* Warm-up pairs (not recorded). */
    sd_gen_stats st_a, st_b;
    for (int64_t w = 0; w < c->warmup; w++) {
        fprintf(stderr, "specdec bench: warm-up %lld/%lld\n", (long long)w + 1,
                (long long)c->warmup);
        const int pi = (int)(w % n_prompts);
        if ((rc = one_run(&a, pi, p->gp.seed + (uint64_t)w, 0, a.out_a, NULL, &st_a, err)) ||
            (rc = one_run(&a, pi, p->gp.seed + (uint64_t)w, ks[0], a.out_b, NULL, &st_b, err)))
            goto done;
    }

    printf("target %s (%.1f MiB), draft %s (%.1f MiB), %d threads, %s sampling, n = %d, "
           "%lld runs per K, %d prompts\n",
           target, sd_model_weight_bytes(p->tm) / 1048576.0, draft,
           sd_model_weight_bytes(p->dm) / 1048576.0, threads > 0 ? threads : sd_n_cores(),
           greedy ? "greedy" : "random", p->gp.n_predict, (long long)c->runs, n_prompts);
    printf("step costs at position %d: target decode %.3f ms, draft decode %.3f ms (c = %.4f)\n",
           pos, t_tstep, t_dstep, cost_c);
    printf("%3s %22s %22s %7s %7s %6s %6s %6s %15s %15s %6s %s\n", "K", "target tok/s",
           "spec tok/s", "speedup", "predict", "accept", "acc/ps", "v", "TTFT p50/p90 ms",
           "ITL p50/p90 ms", "c", "match");
    int all_match = 1;
    for (int ki = 0; ki < n_ks; ki++) {
        const int32_t k = ks[ki];
        side_acc sa = {0}, sb = {0};
        dvec ratios = {0};
        int match_k = 1;
        for (int64_t r = 0; r < c->runs && !rc; r++) {
            const int pi = (int)(r % n_prompts);
            const uint64_t seed = p->gp.seed + (uint64_t)r;
            fprintf(stderr, "specdec bench: K=%d run %lld/%lld (prompt %d)\n", k, (long long)r + 1,
                    (long long)c->runs, pi);
            if ((rc = one_run(&a, pi, seed, 0, a.out_a, &sa, &st_a, err))) break;
            if ((rc = one_run(&a, pi, seed, k, a.out_b, &sb, &st_b, err))) break;
            const double ta = sd_stats_tokens_per_s(&st_a), tb = sd_stats_tokens_per_s(&st_b);
            const double ratio = ta > 0 ? tb / ta : NAN;
            if (dvec_push(&ratios, ratio)) {
                rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
                break;
            }
            int match = st_a.n_generated == st_b.n_generated &&
                        !memcmp(a.out_a, a.out_b, (size_t)st_a.n_generated * sizeof(int32_t));
            if (greedy && !match) {
                match_k = 0;
                fprintf(stderr,
                        "specdec bench: K=%d run %lld: speculative tokens differ from "
                        "target-alone tokens (greedy)\n",
                        k, (long long)r);
            }
            json_t *ra = run_record(k, r, pi, seed, "target", &st_a, 0);
            json_t *rb = run_record(k, r, pi, seed, "spec", &st_b, k);
            json_object_set_new(rb, "speedup", jnum(ratio));
            json_object_set_new(rb, "greedy_match", greedy ? json_boolean(match) : json_null());
            json_array_append_new(jruns, ra);
            json_array_append_new(jruns, rb);
        }
        if (rc) {
            side_free(&sa);
            side_free(&sb);
            dvec_free(&ratios);
            goto done;
        }
        all_match &= match_k;
        const double acc = sb.n_drafted ? (double)sb.n_accepted / sb.n_drafted : 0.0;
        const double acc_pass = sb.n_passes ? (double)sb.n_accepted / sb.n_passes : 0.0;
        const double v = t_ver[ki] / t_tstep;
        const double pred = predicted_speedup(acc, k, cost_c, v);
        const double sp_med = quantile(ratios.v, ratios.n, 0.5);
        char ta[64], tb[64], tt[64], ti[64];
        snprintf(ta, sizeof ta, "%.2f [%.2f,%.2f]", quantile(sa.tps.v, sa.tps.n, 0.5),
                 vmin(sa.tps.v, sa.tps.n), vmax(sa.tps.v, sa.tps.n));
        snprintf(tb, sizeof tb, "%.2f [%.2f,%.2f]", quantile(sb.tps.v, sb.tps.n, 0.5),
                 vmin(sb.tps.v, sb.tps.n), vmax(sb.tps.v, sb.tps.n));
        snprintf(tt, sizeof tt, "%.1f/%.1f", quantile(sb.ttft.v, sb.ttft.n, 0.5),
                 quantile(sb.ttft.v, sb.ttft.n, 0.9));
        snprintf(ti, sizeof ti, "%.1f/%.1f", quantile(sb.itl.v, sb.itl.n, 0.5),
                 quantile(sb.itl.v, sb.itl.n, 0.9));
        printf("%3d %22s %22s %7.3f %7.3f %6.3f %6.3f %6.3f %15s %15s %6.4f %s\n", k, ta, tb,
               sp_med, pred, acc, acc_pass, v, tt, ti, cost_c,
               greedy ? (match_k ? "yes" : "NO") : "-");
        fflush(stdout);
        json_t *sum = json_pack(
            "{s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "k", k, "target",
            side_json(&sa, 0, k), "spec", side_json(&sb, 1, k), "speedup",
            jstats3(ratios.v, ratios.n), "predicted_speedup", jnum(pred), "acceptance_rate",
            jnum(acc), "mean_accepted_per_pass", jnum(acc_pass), "c", jnum(cost_c), "v", jnum(v),
            "t_target_step_ms", jnum(t_tstep), "t_draft_step_ms", jnum(t_dstep), "t_verify_pass_ms",
            jnum(t_ver[ki]), "greedy_match", greedy ? json_boolean(match_k) : json_null());
        json_array_append_new(jsum, sum);
        side_free(&sa);
        side_free(&sb);
        dvec_free(&ratios);
    }
    if (greedy)
        printf("greedy speculative output %s target-alone output in every run\n",
               all_match ? "equals" : "DIFFERS FROM");
    printf("speedup: median of per-pair tok/s ratios; predict: (1 - a^(K+1)) / ((1 - a)(K c + v)) "
           "with a = accept\n");
    if (c->json) {
        json_t *kl = json_array();
        for (int i = 0; i < n_ks; i++)
            json_array_append_new(kl, json_integer(ks[i]));
        root = json_pack(
            "{s:s,s:s,s:s,s:I,s:I,s:{s:i,s:i,s:s},s:{s:i,s:f,s:i,s:f,s:I,s:I,s:i,s:o,s:i,s:I,"
            "s:I,s:i,s:s},s:{s:i,s:o,s:o,s:o},s:o,s:O,s:O}",
            "mode", "ab", "target", target, "draft", draft, "target_weight_bytes",
            (json_int_t)sd_model_weight_bytes(p->tm), "draft_weight_bytes",
            (json_int_t)sd_model_weight_bytes(p->dm), "machine", "n_cores", sd_n_cores(), "threads",
            threads > 0 ? threads : sd_n_cores(), "kernels", sd_quant_kernels_name(), "params",
            "n_predict", p->gp.n_predict, "temp", (double)p->gp.samp.temp, "top_k",
            p->gp.samp.top_k, "top_p", (double)p->gp.samp.top_p, "seed", (json_int_t)p->gp.seed,
            "runs", (json_int_t)c->runs, "n_prompts", n_prompts, "k_list", kl, "ctx", ctx, "warmup",
            (json_int_t)c->warmup, "reps", (json_int_t)c->reps, "max_prompt_tokens", max_prompt,
            "kv_type", p->kv_type ? p->kv_type : "f32", "costs", "pos", pos, "t_target_step_ms",
            jnum(t_tstep), "t_draft_step_ms", jnum(t_dstep), "c", jnum(cost_c), "greedy_match",
            greedy ? json_boolean(all_match) : json_null(), "summary", jsum, "runs", jruns);
        rc = root ? write_json(root, c->json, err)
                  : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    }
done:
    json_decref(root);
    json_decref(jsum);
    json_decref(jruns);
    free(fill);
    free(logits);
    sd_session_free(ts);
    sd_session_free(ds);
    if (a.prompt_ids)
        for (int i = 0; i < n_prompts; i++)
            free(a.prompt_ids[i]);
    free(a.prompt_ids);
    free(a.n_prompt_ids);
    free(a.out_a);
    free(a.out_b);
    return rc;
}

static const char *k_default_prompts[] = {
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog",
    "In a small village by the sea, there lived an old fisherman who",
    "def fibonacci(n):",
};

int sd_cmd_bench(int argc, char **argv) {
    bench_cli c;
    int prc = parse_bench(argc, argv, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    sd_error err = {0};
    sd_cli_pair p = {0};
    p.gp = sd_gen_default_params();
    p.gp.samp.temp = 0.0f; /* greedy unless asked */
    char **prompts = NULL;
    int n_prompts = 0, own_prompts = 0;
    int rc = SD_OK, code = EXIT_FAILURE;
    if ((rc = sd_cli_pair_resolve(&c.g, &p, &err))) goto done;
    if (c.roof) {
        rc = run_roof(&c, &p, &err);
        if (!rc) code = EXIT_SUCCESS;
        goto done;
    }
    if (!p.target) {
        code = usage("%s", "bench: no target model: pass --target FILE (-m) or --config FILE");
        goto done;
    }
    if (c.kernels) {
        rc = run_kernels(&c, &p, &err);
        if (!rc) code = EXIT_SUCCESS;
        goto done;
    }
    if (!p.draft) {
        code = usage("%s", "bench: no draft model: pass --draft FILE (-md) or --config FILE");
        goto done;
    }
    if (c.g.prompt && c.g.prompt_file) {
        code = usage("%s", "bench: give either --prompt or --prompt-file, not both");
        goto done;
    }
    if (c.g.prompt_file) {
        if ((rc = read_prompts(c.g.prompt_file, &prompts, &n_prompts, &err))) goto done;
        own_prompts = 1;
    } else if (c.g.prompt || p.cfg.prompt) {
        static char *one[1];
        one[0] = (char *)(c.g.prompt ? c.g.prompt : p.cfg.prompt);
        prompts = one;
        n_prompts = 1;
    } else {
        prompts = (char **)k_default_prompts;
        n_prompts = (int)(sizeof k_default_prompts / sizeof k_default_prompts[0]);
    }
    rc = run_ab(&c, &p, prompts, n_prompts, &err);
    if (!rc) code = EXIT_SUCCESS;
done:
    if (rc) code = sd_cli_fail(&err);
    if (own_prompts) {
        for (int i = 0; i < n_prompts; i++)
            free(prompts[i]);
        free(prompts);
    }
    sd_cli_pair_free(&p);
    return code;
}
