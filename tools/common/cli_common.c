/* Pieces the CLI commands share (see cli.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/backend/sd_backend.h"
#include "tools/common/sd_cli.h"
#include "runtime/tokenizer/sd_vocab.h"

/* ---- messages, files ---- */

/* Library messages name a setting in the library's terms, in parentheses ("(n_ctx)");
 * the CLI shows the flag that sets it. */
static const char *const k_param_flags[][2] = {
    {"(n_ctx)", "(-c/--ctx-size)"},
    {"(n_ctx_draft)", "(-cd/--ctx-size-draft)"},
    {"(draft)", "(-md/--draft FILE)"},
    {"(template name)", "(--chat-template NAME)"},
};

void sd_cli_flag_names(const char *msg, char *out, size_t cap) {
    size_t o = 0;
    for (const char *s = msg; *s && o + 1 < cap;) {
        size_t j = 0, n = sizeof k_param_flags / sizeof k_param_flags[0];
        while (j < n && strncmp(s, k_param_flags[j][0], strlen(k_param_flags[j][0])))
            j++;
        if (j < n) {
            o += (size_t)snprintf(out + o, cap - o, "%s", k_param_flags[j][1]);
            if (o >= cap) o = cap - 1;
            s += strlen(k_param_flags[j][0]);
        } else {
            out[o++] = *s++;
        }
    }
    out[o < cap ? o : cap - 1] = '\0';
}

int sd_cli_fail(const sd_error *err) {
    char msg[2 * SD_ERROR_MSG_MAX];
    sd_cli_flag_names(err->msg[0] ? err->msg : sd_status_str(err->status), msg, sizeof msg);
    fprintf(stderr, "specdec: %s\n", msg);
    return EXIT_FAILURE;
}

int32_t sd_cli_cap_threads(int64_t n, int force) {
    const int cores = sd_n_cores();
    if (n <= cores || force) return (int32_t)n;
    fprintf(stderr,
            "specdec: %lld threads is more than the %d cores this process may use (they would "
            "wait for each other and run far slower); using %d (--threads-force keeps %lld)\n",
            (long long)n, cores, cores, (long long)n);
    return cores;
}

int sd_cli_read_file(const char *path, char **out, size_t *len, sd_error *err) {
    const int is_stdin = !strcmp(path, "-");
    /* A named file must be a regular one (a FIFO would block, a folder reads as an error). */
    const int fd = is_stdin ? -1 : sd_file_open_regular(path, err);
    if (!is_stdin && fd < 0) return SD_ERR_IO;
    FILE *f = is_stdin ? stdin : fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
    }
    if (is_stdin) path = "standard input";
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - n < 2) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    const int bad = ferror(f), e = errno;
    if (is_stdin)
        clearerr(stdin);
    else
        fclose(f);
    if (!buf) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory reading file", path);
    if (bad) {
        free(buf);
        return sd_errorf(err, SD_ERR_IO, "%s: read error: %s", path, strerror(e ? e : EIO));
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return SD_OK;
}

/* ---- generation flags ---- */

/* "cpu" / "cuda" (llama.cpp's "none" is the CPU, "CUDA0" the first GPU): 0 and *out, or -1. */
static int parse_device(const char *s, int *out) {
    if (!strcasecmp(s, "cpu") || !strcasecmp(s, "none")) {
        *out = SD_DEVICE_CPU;
        return 0;
    }
    if (!strcasecmp(s, "cuda") || !strcasecmp(s, "cuda0") || !strcasecmp(s, "gpu")) {
        *out = SD_DEVICE_CUDA;
        return 0;
    }
    return -1;
}

/* --tensor-split: a rank count N, or llama.cpp's list of shares (equal ones only: one
 * rank per entry). 0 and *n, or -1 with a reason in why. */
static int parse_split(const char *s, int32_t *n, const char **why) {
    *why = "expected a number of GPUs N >= 1 or a list of equal shares such as 1,1";
    if (!strchr(s, ',')) {
        int64_t v;
        if (sd_cli_parse_i64(s, 1, 64, &v)) return -1;
        *n = (int32_t)v;
        return 0;
    }
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    double first = -1.0;
    int32_t count = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        double v;
        if (sd_cli_parse_f64(tok, 0.0, 1e9, &v) || v <= 0.0) return -1;
        if (first < 0.0) first = v;
        if (v != first) {
            *why = "only equal shares are supported (tensor parallelism splits every layer "
                   "evenly, one rank per GPU)";
            return -1;
        }
        if (++count > 64) return -1;
    }
    if (count == 0) return -1;
    *n = count;
    return 0;
}

/* One shared flag: 0, a usage exit status, or SD_CLI_NOT_SHARED. */
static int gen_option(int o, const char *arg, sd_cli_gen_opts *g) {
    const char *h = g->hint;
    switch (o) {
    case SD_CLI_OPT_CONFIG:
        g->config = arg;
        break;
    case 'm':
    case SD_CLI_OPT_TARGET:
        g->target = arg;
        break;
    case SD_CLI_OPT_DRAFT:
        g->draft = arg;
        break;
    case 'p':
        g->prompt = arg;
        break;
    case 'f':
        g->prompt_file = arg;
        break;
    case 'n':
        if (sd_cli_parse_i64(arg, -1, INT32_MAX / 2, &g->n) || g->n == 0)
            return sd_cli_usage(h,
                                "-n/--max-tokens: expected an integer in [1, 1073741823] (or "
                                "-1: until EOS or the context is full), found '%s'",
                                arg);
        g->has_n = 1;
        break;
    case 'k':
        if (sd_cli_parse_i64(arg, 1, SD_MAX_DRAFT, &g->k))
            return sd_cli_usage(h, "-k/--draft-tokens: expected an integer in [1, 16], found '%s'",
                                arg);
        g->has_k = 1;
        break;
    case SD_CLI_OPT_TEMP:
        if (sd_cli_parse_f64(arg, 0.0, 1e6, &g->temp))
            return sd_cli_usage(h, "--temp: expected a number in [0, 1e6] (0 = greedy), found '%s'",
                                arg);
        g->has_temp = 1;
        break;
    case SD_CLI_OPT_TOP_K:
        if (sd_cli_parse_i64(arg, 0, INT32_MAX, &g->top_k))
            return sd_cli_usage(h, "--top-k: expected an integer in [0, 2147483647], found '%s'",
                                arg);
        g->has_top_k = 1;
        break;
    case SD_CLI_OPT_TOP_P:
        if (sd_cli_parse_f64(arg, 1e-9, 1.0, &g->top_p))
            return sd_cli_usage(h, "--top-p: expected a number in (0, 1], found '%s'", arg);
        g->has_top_p = 1;
        break;
    case 's':
        if (sd_cli_parse_i64(arg, 0, INT64_MAX, &g->seed))
            return sd_cli_usage(h,
                                "-s/--seed: expected an integer in [0, 9223372036854775807], "
                                "found '%s'",
                                arg);
        g->has_seed = 1;
        break;
    case 't':
        if (sd_cli_parse_i64(arg, 0, 1024, &g->threads))
            return sd_cli_usage(h, "-t/--threads: expected an integer in [0, 1024], found '%s'",
                                arg);
        g->has_threads = 1;
        break;
    case 'c':
        if (sd_cli_parse_i64(arg, 0, INT32_MAX, &g->ctx))
            return sd_cli_usage(
                h, "-c/--ctx-size: expected an integer in [0, 2147483647], found '%s'", arg);
        g->has_ctx = 1;
        break;
    case SD_CLI_OPT_NO_BOS:
        g->no_bos = 1;
        break;
    case SD_CLI_OPT_KV_TYPE:
        if (strcmp(arg, "f32") && strcmp(arg, "f16") && strcmp(arg, "q8_0") && strcmp(arg, "q4_0"))
            return sd_cli_usage(h, "--kv-type: expected f32, f16, q8_0 or q4_0, found '%s'", arg);
        g->kv_type = arg;
        break;
    case SD_CLI_OPT_DEVICE:
    case SD_CLI_OPT_DEVICE_DRAFT:
        if (parse_device(arg, o == SD_CLI_OPT_DEVICE ? &g->device : &g->device_draft))
            return sd_cli_usage(h,
                                o == SD_CLI_OPT_DEVICE
                                    ? "--device: expected cpu or cuda, found '%s'"
                                    : "--device-draft: expected cpu or cuda, "
                                      "found '%s'",
                                arg);
        break;
    case SD_CLI_OPT_NGL:
    case SD_CLI_OPT_NGL_DRAFT: {
        int64_t v = 1;
        if (strcmp(arg, "all") && sd_cli_parse_i64(arg, 0, INT32_MAX, &v))
            return sd_cli_usage(h,
                                "-ngl: expected a number of layers in [0, 2147483647] (any N > "
                                "0: every layer on the GPU), found '%s'",
                                arg);
        *(o == SD_CLI_OPT_NGL ? &g->ngl : &g->ngl_draft) = v > 0;
        break;
    }
    case SD_CLI_OPT_TENSOR_SPLIT: {
        const char *why;
        if (parse_split(arg, &g->n_split, &why)) {
            char fmt[256];
            snprintf(fmt, sizeof fmt, "--tensor-split: %s; found '%%s'", why);
            return sd_cli_usage(h, fmt, arg);
        }
        g->has_split = 1;
        break;
    }
    case SD_CLI_OPT_SPLIT_MODE:
        if (!strcmp(arg, "none")) {
            if (!g->has_split) g->n_split = 0;
        } else if (!strcmp(arg, "row")) {
            if (!g->has_split) g->n_split = -1; /* every GPU; --tensor-split sets the count */
        } else if (!strcmp(arg, "layer")) {
            return sd_cli_usage(h,
                                "-sm %s: specdec splits each layer across GPUs (tensor "
                                "parallelism): use -sm row or --tensor-split N",
                                arg);
        } else {
            return sd_cli_usage(h, "--split-mode: expected none or row, found '%s'", arg);
        }
        break;
    default:
        return sd_cli_extra_option(o, arg, g);
    }
    return 0;
}

/* One drafting flag (SD_CLI_DRAFT_LONGOPTS): 0, a usage exit status, or SD_CLI_NOT_SHARED. */
static int draft_option(int o, const char *arg, sd_cli_gen_opts *g) {
    const char *h = g->hint;
    switch (o) {
    case SD_CLI_OPT_DRAFT_TYPE:
        if (sd_draft_type_parse(arg, &g->draft_type) || g->draft_type == SD_DRAFT_AUTO)
            return sd_cli_usage(h, "--draft-type: expected " SD_DRAFT_TYPE_NAMES ", found '%s'",
                                arg);
        g->has_draft_type = 1;
        break;
    case SD_CLI_OPT_NGRAM_MIN:
    case SD_CLI_OPT_NGRAM_MAX:
    case SD_CLI_OPT_NGRAM_SIZE_N: {
        int64_t v;
        if (sd_cli_parse_i64(arg, 1, SD_NGRAM_MAX, &v))
            return sd_cli_usage(h,
                                o == SD_CLI_OPT_NGRAM_MIN   ? "--ngram-min: expected an integer in "
                                                              "[1, 16], found '%s'"
                                : o == SD_CLI_OPT_NGRAM_MAX ? "--ngram-max: expected an integer in "
                                                              "[1, 16], found '%s'"
                                                            : "--spec-ngram-size-n: expected an "
                                                              "integer in [1, 16], found '%s'",
                                arg);
        if (o != SD_CLI_OPT_NGRAM_MAX) {
            g->ngram_min = v;
            g->has_ngram_min = 1;
        }
        if (o != SD_CLI_OPT_NGRAM_MIN) {
            g->ngram_max = v;
            g->has_ngram_max = 1;
        }
        break;
    }
    case SD_CLI_OPT_DRAFT_P_MIN:
        if (sd_cli_parse_f64(arg, 0.0, 1.0, &g->p_min))
            return sd_cli_usage(h, "--draft-p-min: expected a number in [0, 1], found '%s'", arg);
        g->has_p_min = 1;
        break;
    case SD_CLI_OPT_DRAFT_MIN:
        if (sd_cli_parse_i64(arg, 0, SD_MAX_DRAFT, &g->draft_min))
            return sd_cli_usage(h, "--draft-min: expected an integer in [0, 16], found '%s'", arg);
        g->has_draft_min = 1;
        break;
    case SD_CLI_OPT_CHAIN_DRAFT_MAX:
        if (sd_cli_parse_i64(arg, 0, SD_MAX_DRAFT, &g->chain_draft_max))
            return sd_cli_usage(h, "--chain-draft-max: expected an integer in [0, 16], found '%s'",
                                arg);
        g->has_chain_draft_max = 1;
        break;
    case SD_CLI_OPT_CHAIN_LONG_MATCH:
        if (sd_cli_parse_i64(arg, 0, SD_MAX_DRAFT, &g->chain_long_match))
            return sd_cli_usage(h, "--chain-long-match: expected an integer in [0, 16], found '%s'",
                                arg);
        g->has_chain_long_match = 1;
        break;
    case SD_CLI_OPT_SUFFIX_RESUME:
        if (sd_cli_parse_i64(arg, 0, SD_MAX_DRAFT, &g->suffix_resume))
            return sd_cli_usage(h, "--suffix-resume: expected an integer in [0, 16], found '%s'",
                                arg);
        g->has_suffix_resume = 1;
        break;
    case SD_CLI_OPT_DRAFT_POLICY:
        if (sd_k_policy_parse(arg, &g->policy))
            return sd_cli_usage(h, "--draft-policy: expected fixed or adaptive, found '%s'", arg);
        g->has_policy = 1;
        break;
    case SD_CLI_OPT_LOOKUP_CACHE:
        if (!*arg) return sd_cli_usage(h, "--lookup-cache: expected a file name, found '%s'", arg);
        g->lookup_cache = arg;
        break;
    case SD_CLI_OPT_SUFFIX_FACTOR:
        if (sd_cli_parse_f64(arg, 0.0, 64.0, &g->suffix_factor) || !(g->suffix_factor > 0.0))
            return sd_cli_usage(h, "--suffix-factor: expected a number in (0, 64], found '%s'",
                                arg);
        g->has_suffix_factor = 1;
        break;
    case SD_CLI_OPT_SUFFIX_COST:
        if (sd_cli_parse_f64(arg, 0.0, 16.0, &g->suffix_cost) || !(g->suffix_cost > 0.0))
            return sd_cli_usage(h, "--suffix-cost: expected a number in (0, 16], found '%s'", arg);
        g->has_suffix_cost = 1;
        break;
    case SD_CLI_OPT_SUFFIX_MIN_PROB:
        if (sd_cli_parse_f64(arg, 0.0, 1.0, &g->suffix_min_prob))
            return sd_cli_usage(h, "--suffix-min-prob: expected a number in [0, 1], found '%s'",
                                arg);
        g->has_suffix_min_prob = 1;
        break;
    case SD_CLI_OPT_DRAFT_TREE: {
        char w[32];
        const char *x = strchr(arg, 'x');
        const size_t nw = x ? (size_t)(x - arg) : strlen(arg);
        int64_t d = 0;
        int bad = nw == 0 || nw >= sizeof w;
        if (!bad) {
            memcpy(w, arg, nw);
            w[nw] = '\0';
            bad = sd_cli_parse_i64(w, 1, SD_MAX_DRAFT, &g->tree_width) ||
                  (x && sd_cli_parse_i64(x + 1, 1, SD_MAX_DRAFT, &d)) ||
                  g->tree_width * (d ? d : 1) > SD_MAX_DRAFT;
        }
        if (bad)
            return sd_cli_usage(h,
                                "--draft-tree: expected WxD (width x depth, both >= 1, W x D "
                                "<= 16) or W, found '%s'",
                                arg);
        g->tree_depth = d;
        break;
    }
    default:
        return SD_CLI_NOT_SHARED;
    }
    return 0;
}

int sd_cli_gen_parse(int argc, char **argv, const struct option *longopts, const char *hint,
                     sd_cli_gen_opts *g, int (*own)(int id, const char *arg, void *user),
                     void *user) {
    memset(g, 0, sizeof *g);
    g->hint = hint;
    g->device = g->device_draft = g->ngl = g->ngl_draft = -1;
    int rc = sd_cli_prescan(&argc, argv, SD_CLI_GEN_SHORTOPTS, longopts, hint);
    if (rc) return rc;
    opterr = 0;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, SD_CLI_GEN_SHORTOPTS, longopts, NULL)) != -1) {
        if (o == ':') return sd_cli_usage(hint, "option '%s' needs a value", argv[optind - 1]);
        rc = own(o, optarg, user);
        if (rc == SD_CLI_PASS) rc = gen_option(o, optarg, g);
        if (rc == SD_CLI_NOT_SHARED) rc = draft_option(o, optarg, g);
        if (rc == SD_CLI_NOT_SHARED)
            return sd_cli_usage(hint, "unknown option '%s'", argv[optind - 1]);
        if (rc) return rc;
    }
    if (optind < argc) return sd_cli_usage(hint, "unexpected argument '%s'", argv[optind]);
    return sd_cli_extra_finish(g);
}

/* ---- the pair ---- */

/* A device from (in order) --device, -ngl, the config's string, the default. -ngl N > 0
 * asks for the GPU where there is one: without one, a note and the CPU (llama.cpp's -ngl on
 * a CPU build). */
static sd_device resolve_device(int flag, int ngl, const char *cfg, sd_device def,
                                const char *ngl_name) {
    if (flag >= 0) return (sd_device)flag;
    if (ngl == 0) return SD_DEVICE_CPU;
    if (ngl > 0) {
        int32_t n = 0;
        sd_error e = {0};
        if (sd_backend_device_count(SD_DEVICE_CUDA, &n, &e) == SD_OK && n > 0)
            return SD_DEVICE_CUDA;
        fprintf(stderr, "specdec: %s: %s; running on the CPU\n", ngl_name, e.msg);
        return SD_DEVICE_CPU;
    }
    int d = (int)def;
    if (cfg) parse_device(cfg, &d);
    return (sd_device)d;
}

int sd_cli_pair_resolve(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err) {
    sd_config *cfg = &p->cfg;
    memset(cfg, 0, sizeof *cfg);
    if (g->config) {
        int rc = sd_config_load(g->config, cfg, err);
        if (rc) return rc;
    }
    sd_engine_params *ep = &p->ep;
    ep->target = g->target ? g->target : cfg->target;
    ep->draft = g->draft ? g->draft : cfg->draft;
    ep->n_threads = sd_cli_cap_threads(
        g->has_threads ? g->threads : (cfg->has_threads ? cfg->threads : 0), g->threads_force);
    ep->n_ctx = (int32_t)(g->has_ctx ? g->ctx : (cfg->has_ctx_size ? cfg->ctx_size : 0));
    ep->n_ctx_draft = g->has_ctx_draft ? (int32_t)g->ctx_draft : 0;
    p->kv_type = g->kv_type ? g->kv_type : cfg->kv_type;
    /* Unset: the engine's default (sd_engine_default_params, F16 for every command). */
    const sd_type kv_default = sd_engine_default_params().kv_type;
    if (p->kv_type && sd_type_from_name(p->kv_type, &ep->kv_type) != 0) ep->kv_type = kv_default;
    if (!p->kv_type) ep->kv_type = kv_default;
    ep->device = resolve_device(g->device, g->ngl, cfg->device, SD_DEVICE_CPU, "-ngl");
    ep->device_draft =
        resolve_device(g->device_draft, g->ngl_draft, cfg->device_draft, ep->device, "-ngld");
    ep->n_split = g->has_split || g->n_split != 0 ? g->n_split
                                                  : (cfg->has_tensor_split ? cfg->tensor_split : 0);
    sd_gen_params *gp = &ep->gen;
    if (cfg->has_max_tokens) gp->n_predict = cfg->max_tokens;
    if (cfg->has_draft_tokens) gp->n_draft = cfg->draft_tokens;
    if (cfg->has_temp) gp->samp.temp = cfg->temp;
    if (cfg->has_top_k) gp->samp.top_k = cfg->top_k;
    if (cfg->has_top_p) gp->samp.top_p = cfg->top_p;
    if (cfg->has_seed) gp->seed = cfg->seed;
    if (g->has_n) gp->n_predict = (int32_t)g->n;
    if (g->has_k) gp->n_draft = (int32_t)g->k;
    if (g->has_temp) gp->samp.temp = (float)g->temp;
    if (g->has_top_k) gp->samp.top_k = (int32_t)g->top_k;
    if (g->has_top_p) gp->samp.top_p = (float)g->top_p;
    if (g->has_seed) gp->seed = (uint64_t)g->seed;
    gp->ignore_eos = g->ignore_eos;
    /* Drafting: flag, else config, else the command's default. */
    if (cfg->has_draft_type) gp->draft_type = cfg->draft_type;
    if (cfg->has_draft_policy) gp->k_policy = cfg->draft_policy;
    if (cfg->has_draft_p_min) gp->draft_p_min = cfg->draft_p_min;
    if (cfg->has_draft_min) gp->draft_min = cfg->draft_min;
    if (cfg->has_ngram_min) ep->ngram.n_min = cfg->ngram_min;
    if (cfg->has_ngram_max) ep->ngram.n_max = cfg->ngram_max;
    if (g->has_draft_type) gp->draft_type = g->draft_type;
    if (g->has_policy) gp->k_policy = g->policy;
    if (g->has_p_min) gp->draft_p_min = (float)g->p_min;
    if (g->has_draft_min) gp->draft_min = (int32_t)g->draft_min;
    if (cfg->has_chain_draft_max) gp->chain_draft_max = cfg->chain_draft_max;
    if (cfg->has_chain_long_match) gp->chain_long_match = cfg->chain_long_match;
    if (g->has_chain_draft_max) gp->chain_draft_max = (int32_t)g->chain_draft_max;
    if (g->has_chain_long_match) gp->chain_long_match = (int32_t)g->chain_long_match;
    if (g->has_ngram_min) ep->ngram.n_min = (int32_t)g->ngram_min;
    if (g->has_ngram_max) ep->ngram.n_max = (int32_t)g->ngram_max;
    if (cfg->has_suffix_factor) ep->suffix.max_spec_factor = cfg->suffix_factor;
    if (cfg->has_suffix_min_prob) ep->suffix.min_token_prob = cfg->suffix_min_prob;
    if (g->has_suffix_factor) ep->suffix.max_spec_factor = (float)g->suffix_factor;
    if (g->has_suffix_min_prob) ep->suffix.min_token_prob = (float)g->suffix_min_prob;
    if (cfg->has_suffix_resume) ep->suffix.resume = cfg->suffix_resume;
    if (g->has_suffix_resume) ep->suffix.resume = (int32_t)g->suffix_resume;
    if (cfg->has_suffix_cost || g->has_suffix_cost) { /* the expected rule */
        ep->suffix.rule = SD_SUFFIX_RULE_EXPECTED;
        ep->suffix.draft_cost = (float)(g->has_suffix_cost ? g->suffix_cost : cfg->suffix_cost);
    }
    gp->tree_width = (int32_t)g->tree_width;
    if (g->tree_depth > 0) gp->n_draft = (int32_t)g->tree_depth;
    /* a tree takes a fixed K unless a policy was asked for (which is then refused) */
    if (g->tree_width > 0 && !g->has_policy && !cfg->has_draft_policy) gp->k_policy = SD_K_FIXED;
    p->lookup_cache = g->lookup_cache ? g->lookup_cache : cfg->lookup_cache;
    sd_cli_extra_apply(g, cfg, ep); /* sampling (min-p, penalties, spec) and the draft head */
    if (ep->ngram.n_min > ep->ngram.n_max) {
        char from_min[300], from_max[300];
        snprintf(from_min, sizeof from_min, "%s",
                 g->has_ngram_min ? "--ngram-min"
                                  : (cfg->has_ngram_min ? "key 'ngram_min'" : "the default"));
        snprintf(from_max, sizeof from_max, "%s",
                 g->has_ngram_max ? "--ngram-max"
                                  : (cfg->has_ngram_max ? "key 'ngram_max'" : "the default"));
        return sd_errorf(err, SD_ERR_ARG,
                         "%s%sn-gram sizes: minimum %d (%s) is larger than maximum %d (%s)",
                         (cfg->has_ngram_min || cfg->has_ngram_max) && g->config ? g->config : "",
                         (cfg->has_ngram_min || cfg->has_ngram_max) && g->config ? ": " : "",
                         ep->ngram.n_min, from_min, ep->ngram.n_max, from_max);
    }
    /* A model path that came from the config: its load errors name the config's key. */
    if (!g->target && cfg->target) {
        snprintf(p->target_origin, sizeof p->target_origin, "%s: key 'target'", g->config);
        ep->target_origin = p->target_origin;
    }
    if (!g->draft && cfg->draft) {
        snprintf(p->draft_origin, sizeof p->draft_origin, "%s: key 'draft'", g->config);
        ep->draft_origin = p->draft_origin;
    }
    return SD_OK;
}

static void log_note(void *user, const char *line) {
    (void)user;
    char msg[1024];
    sd_cli_flag_names(line, msg, sizeof msg);
    fprintf(stderr, "specdec: %s\n", msg);
}

int sd_cli_pair_load(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err) {
    p->ep.log = g->log_disable ? NULL : log_note;
    return sd_engine_init(&p->ep, &p->engine, err);
}

void sd_cli_pair_free(sd_cli_pair *p) {
    if (!p) return;
    sd_engine_free(p->engine);
    p->engine = NULL;
    sd_config_free(&p->cfg);
}
