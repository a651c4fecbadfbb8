/*
 * specdec bench: the A/B benchmark that measures what speculative decoding buys
 * (bench_ab.c), and (--kernels, bench_kernels.c) what the forward pass achieves against
 * the machine's memory bandwidth. This file: options, dispatch, shared helpers.
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

#include "runtime/cli/bench.h"
#include "runtime/engine/sd_engine.h"

#define HINT "see 'specdec bench --help'"

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
               "  --json FILE            write per-run records and the summary as JSON (checked\n"
               "                         writable, a regular file or absent, before the runs)\n"
               "  --kernels              kernels mode: also --bw-mib M (default 2048),\n"
               "                         --pos P (default 128), --prefill N (default 128),\n"
               "                         --profile (CPU: where a decode step and a pass of\n"
               "                         5 and 9 tokens spend their time, per op and type)\n"
               "  --roof                 the memory roof alone (best streaming read at 1 and\n"
               "                         N threads); --roof-kernel avx512|avx2|scalar;\n"
               "                         --no-roof: kernels mode without it\n"
               "  --draft-types LIST     draft types side by side on the same prompts of each\n"
               "                         -f file (repeatable; a category each, from its first\n"
               "                         line '# category: NAME' or its name): none, llm,\n"
               "                         llm-adaptive, ngram, ngram-adaptive, ngram+llm,\n"
               "                         ngram+llm-adaptive, suffix, suffix-adaptive,\n"
               "                         suffix+llm, suffix+llm-adaptive, or all;\n"
               "                         fixed types run each K of --k-list, adaptive ones\n"
               "                         K <= the largest; --runs N: prompts per file\n"
               "                         (default: all); drafting flags as\n"
               "                         generate's (--draft-p-min applies to adaptive types\n"
               "                         unless given: fixed types draft K, no cut-off)\n"
               "  generate's other flags (--threads-force, -ctk/-ctv, -cd, --ignore-eos, -e,\n"
               "  --log-disable) and its handling of llama.cpp flags apply too.\n"
               "A row is marked suspect (table and JSON) when its figures are outside what the\n"
               "model allows: speedup above K + 1, v below 0.9, or the measured speedup more\n"
               "than 2x off the predicted one (a busy machine: rerun).\n");
}

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
    if (!rc) *med_ms = bench_quantile(t, (size_t)reps, 0.5);
    free(t);
    return rc;
}

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

/* ---------------------------------------------------------------- options */

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
    OPT_DRAFT_TYPES,
    OPT_ROOF,
    OPT_ROOF_KERNEL,
    OPT_NO_ROOF,
    OPT_PROFILE,
};

static int bench_option(int o, const char *arg, void *user) {
    bench_cli *c = user;
    switch (o) {
    case OPT_RUNS:
        if (sd_cli_parse_i64(arg, 1, 100000, &c->runs))
            return bench_usage("--runs: expected an integer >= 1, found '%s'", arg);
        c->has_runs = 1;
        break;
    case 'f': /* repeatable: the side-by-side mode runs every file (a category each) */
        if (c->n_prompt_files >= MAX_PROMPT_FILES)
            return bench_usage("-f/--prompt-file: at most 16 files, found '%s' as the 17th", arg);
        c->prompt_files[c->n_prompt_files++] = arg;
        if (!c->g.prompt_file) c->g.prompt_file = arg;
        break;
    case OPT_DRAFT_TYPES:
        if (bench_parse_modes(arg, c)) return SD_EXIT_USAGE;
        break;
    case OPT_KLIST:
        if ((c->n_ks = parse_k_list(arg, c->ks)) < 0)
            return bench_usage("--k-list: expected up to 16 comma-separated integers in [1, 16], "
                               "found '%s'",
                               arg);
        break;
    case 'k':
        if (sd_cli_parse_i64(arg, 1, SD_MAX_DRAFT, &c->g.k))
            return bench_usage("-k: expected an integer in [1, 16], found '%s'", arg);
        c->ks[0] = (int32_t)c->g.k;
        c->n_ks = 1;
        c->g.has_k = 1;
        break;
    case 'n':
        if (sd_cli_parse_i64(arg, 1, INT32_MAX / 4, &c->g.n))
            return bench_usage("-n/--max-tokens: expected an integer >= 1, found '%s'", arg);
        c->g.has_n = 1;
        break;
    case 's': /* run i uses seed S + i */
        if (sd_cli_parse_i64(arg, 0, INT64_MAX / 2, &c->g.seed))
            return bench_usage("--seed: expected an integer >= 0, found '%s'", arg);
        c->g.has_seed = 1;
        break;
    case OPT_WARMUP:
        if (sd_cli_parse_i64(arg, 0, 1000, &c->warmup))
            return bench_usage("--warmup: expected an integer >= 0, found '%s'", arg);
        break;
    case OPT_REPS:
        if (sd_cli_parse_i64(arg, 1, 100000, &c->reps))
            return bench_usage("--reps: expected an integer >= 1, found '%s'", arg);
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
    case OPT_PROFILE:
        c->profile = 1;
        return 0;
    case OPT_NO_ROOF:
        c->no_roof = 1;
        break;
    case OPT_ROOF_KERNEL:
        if (strcmp(arg, "avx512") && strcmp(arg, "avx2") && strcmp(arg, "scalar"))
            return bench_usage("--roof-kernel: expected avx512, avx2 or scalar, found '%s'", arg);
        c->roof_kernel = arg;
        break;
    case OPT_BW:
        if (sd_cli_parse_i64(arg, 1, 1 << 24, &c->bw_mib))
            return bench_usage("--bw-mib: expected an integer >= 1, found '%s'", arg);
        break;
    case OPT_POS:
        if (sd_cli_parse_i64(arg, 0, INT32_MAX / 2, &c->pos))
            return bench_usage("--pos: expected an integer >= 0, found '%s'", arg);
        break;
    case OPT_PREFILL:
        if (sd_cli_parse_i64(arg, 1, 1 << 16, &c->prefill))
            return bench_usage("--prefill: expected an integer >= 1, found '%s'", arg);
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
        SD_CLI_EXTRA_LONGOPTS,
        SD_CLI_DRAFT_LONGOPTS,
        {"draft-types", required_argument, 0, OPT_DRAFT_TYPES},
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
        {"profile", no_argument, 0, OPT_PROFILE},
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

static const char *k_default_prompts[] = {
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog",
    "In a small village by the sea, there lived an old fisherman who",
    "def fibonacci(n):",
};

static void free_prompts(char **v, int n) {
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* The prompts, each malloc'd: --prompt-file (one a line), --prompt or the config's, else
 * the defaults; escapes processed with -e. */
static int get_prompts(const bench_cli *c, const sd_cli_pair *p, char ***out, int *n_out,
                       sd_error *err) {
    char **v = NULL;
    int n = 0, rc = SD_OK;
    if (c->g.prompt_file) {
        if ((rc = bench_read_prompts(c->g.prompt_file, &v, &n, NULL, err))) return rc;
    } else {
        const char *one = c->g.prompt ? c->g.prompt : p->cfg.prompt;
        const int nd = (int)(sizeof k_default_prompts / sizeof k_default_prompts[0]);
        const int want = one ? 1 : nd;
        if (!(v = calloc((size_t)want, sizeof *v)))
            return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        for (; n < want; n++)
            if (!(v[n] = strdup(one ? one : k_default_prompts[n]))) {
                free_prompts(v, n);
                return sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
            }
    }
    for (int i = 0; c->g.escape && i < n; i++)
        sd_cli_unescape(v[i], strlen(v[i]));
    *out = v;
    *n_out = n;
    return SD_OK;
}

int sd_cmd_bench(int argc, char **argv) {
    bench_cli c;
    int prc = parse_bench(argc, argv, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    sd_error err = {0};
    sd_cli_pair p = {0};
    p.ep = sd_engine_default_params();
    p.ep.gen.samp.temp = 0.0f; /* greedy unless asked */
    char **prompts = NULL;
    int n_prompts = 0;
    int rc = SD_OK, code = EXIT_FAILURE;
    if ((rc = sd_cli_pair_resolve(&c.g, &p, &err))) goto done;
    if (c.roof) {
        if (c.json && (rc = sd_cli_check_output(c.json, NULL, 0, &err))) goto done;
        rc = bench_run_roof(&c, &p, &err);
        if (!rc) code = EXIT_SUCCESS;
        goto done;
    }
    if (!p.ep.target) {
        code =
            bench_usage("%s", "bench: no target model: pass --target FILE (-m) or --config FILE");
        goto done;
    }
    /* The output must be writable before the benchmark, not found unwritable after it. */
    const char *inputs[4] = {p.ep.target, p.ep.draft, c.g.config, c.g.prompt_file};
    if (c.json && (rc = sd_cli_check_output(c.json, inputs, 4, &err))) goto done;
    if (c.kernels) {
        rc = bench_run_kernels(&c, &p, &err);
        if (!rc) code = EXIT_SUCCESS;
        goto done;
    }
    if (c.n_modes > 0) {
        if (c.g.prompt && c.n_prompt_files) {
            code = bench_usage("%s", "bench: give either --prompt or --prompt-file, not both");
            goto done;
        }
        rc = bench_run_modes(&c, &p, &err);
        if (!rc) code = EXIT_SUCCESS;
        goto done;
    }
    if (!p.ep.draft) {
        code = bench_usage("%s", "bench: no draft model: pass --draft FILE (-md) or --config FILE");
        goto done;
    }
    if (c.g.prompt && c.g.prompt_file) {
        code = bench_usage("%s", "bench: give either --prompt or --prompt-file, not both");
        goto done;
    }
    if ((rc = get_prompts(&c, &p, &prompts, &n_prompts, &err))) goto done;
    rc = bench_run_ab(&c, &p, prompts, n_prompts, &err);
    if (!rc) code = EXIT_SUCCESS;
done:
    if (rc) code = sd_cli_fail(&err);
    free_prompts(prompts, n_prompts);
    sd_cli_pair_free(&p);
    return code;
}
