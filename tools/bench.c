/*
 * specdec bench: the A/B benchmark that measures what speculative decoding buys
 * (bench_ab.c), and (--kernels, bench_kernels.c) what the forward pass achieves against
 * the machine's memory bandwidth. This file: options and dispatch; the helpers the modes
 * share are in bench_util.c.
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

#include "tools/bench.h"
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
               "                         (default: all); --rounds N: each prompt's\n"
               "                         variants N times, every other round in reverse\n"
               "                         order (A B .. B A: a drifting load cancels), the\n"
               "                         rates pooled over the rounds; drafting flags as\n"
               "                         generate's (--draft-p-min applies to adaptive types\n"
               "                         unless given: fixed types draft K, no cut-off)\n"
               "  generate's other flags (--threads-force, -ctk/-ctv, -cd, --ignore-eos, -e,\n"
               "  --log-disable) and its handling of llama.cpp flags apply too.\n"
               "A row is marked suspect (table and JSON) when its figures are outside what the\n"
               "model allows: speedup above K + 1, v below 0.9, or the measured speedup more\n"
               "than 2x off the predicted one (a busy machine: rerun).\n");
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

/* ---------------------------------------------------------------- options */

enum {
    OPT_RUNS = SD_CLI_OPT_OWN,
    OPT_ROUNDS,
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
    case OPT_ROUNDS:
        if (sd_cli_parse_i64(arg, 1, 1000, &c->rounds))
            return bench_usage("--rounds: expected an integer in [1, 1000], found '%s'", arg);
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
        {"rounds", required_argument, 0, OPT_ROUNDS},
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
    c->rounds = 1;
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
