/* Pieces the CLI commands share (see sd_cli.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quant/sd_quant.h"
#include "runtime/backend/sd_backend.h"
#include "runtime/cli/cli.h"
#include "runtime/tokenizer/sd_vocab.h"

/* ---- messages, numbers, files ---- */

int sd_cli_usage(const char *hint, const char *fmt, const char *arg) {
    fprintf(stderr, "specdec: ");
    fprintf(stderr, fmt, arg);
    if (hint) fprintf(stderr, " (%s)", hint);
    fprintf(stderr, "\n");
    return SD_EXIT_USAGE;
}

int sd_cli_fail(const sd_error *err) {
    fprintf(stderr, "specdec: %s\n", err->msg[0] ? err->msg : sd_status_str(err->status));
    return EXIT_FAILURE;
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

int sd_cli_read_file(const char *path, char **out, size_t *len, sd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return sd_errorf(err, SD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
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
    int bad = ferror(f);
    fclose(f);
    if (!buf) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory reading file", path);
    if (bad) {
        free(buf);
        return sd_errorf(err, SD_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return SD_OK;
}

/* ---- generation flags ---- */

/*
 * getopt would read llama.cpp's multi-letter single-dash flags that we do not know
 * (-ngl 99, -fa, -cd 256) as a short flag with a glued value (-n "gl"). Reject them by
 * name instead. Values of options that take one are skipped (a prompt may start with
 * '-'). Returns 0 or a usage-error exit status.
 */
static int reject_unknown_single_dash(int argc, char **argv, const char *shortopts,
                                      const struct option *longopts, const char *hint) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) break;
        if (a[0] != '-' || a[1] == '\0') continue;
        int takes_value = 0;
        if (a[1] == '-') {
            if (strchr(a, '=')) continue;
            for (const struct option *o = longopts; o->name; o++)
                if (!strcmp(a + 2, o->name)) takes_value = o->has_arg == required_argument;
        } else if (a[2] == '\0') {
            const char *c = strchr(shortopts, a[1]);
            takes_value = c && c[1] == ':';
        } else if ((a[1] >= 'a' && a[1] <= 'z') || (a[1] >= 'A' && a[1] <= 'Z')) {
            if (a[2] >= '0' && a[2] <= '9') continue; /* -n5, -t2: glued numbers are fine */
            return sd_cli_usage(hint, "unknown option '%s'", a);
        }
        if (takes_value) i++;
    }
    return 0;
}

#define NOT_SHARED (-3)

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

/* One shared flag: 0, a usage exit status, or NOT_SHARED. */
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
                                "-n/--max-tokens: expected an integer >= 1 (or -1: until "
                                "EOS or the context is full), found '%s'",
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
            return sd_cli_usage(h, "--temp: expected a number >= 0, found '%s'", arg);
        g->has_temp = 1;
        break;
    case SD_CLI_OPT_TOP_K:
        if (sd_cli_parse_i64(arg, 0, INT32_MAX, &g->top_k))
            return sd_cli_usage(h, "--top-k: expected an integer >= 0, found '%s'", arg);
        g->has_top_k = 1;
        break;
    case SD_CLI_OPT_TOP_P:
        if (sd_cli_parse_f64(arg, 1e-9, 1.0, &g->top_p))
            return sd_cli_usage(h, "--top-p: expected a number in (0, 1], found '%s'", arg);
        g->has_top_p = 1;
        break;
    case 's':
        if (sd_cli_parse_i64(arg, 0, INT64_MAX, &g->seed))
            return sd_cli_usage(h, "-s/--seed: expected an integer >= 0, found '%s'", arg);
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
            return sd_cli_usage(h, "-c/--ctx-size: expected an integer >= 0, found '%s'", arg);
        g->has_ctx = 1;
        break;
    case SD_CLI_OPT_NO_BOS:
        g->no_bos = 1;
        break;
    case SD_CLI_OPT_KV_TYPE:
        if (strcmp(arg, "f32") && strcmp(arg, "f16"))
            return sd_cli_usage(h, "--kv-type: expected f32 or f16, found '%s'", arg);
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
                                "-ngl: expected a number of layers >= 0 (any N > 0: every "
                                "layer on the GPU), found '%s'",
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
        return NOT_SHARED;
    }
    return 0;
}

int sd_cli_gen_parse(int argc, char **argv, const struct option *longopts, const char *hint,
                     sd_cli_gen_opts *g, int (*own)(int id, const char *arg, void *user),
                     void *user) {
    memset(g, 0, sizeof *g);
    g->hint = hint;
    g->device = g->device_draft = g->ngl = g->ngl_draft = -1;
    int rc = reject_unknown_single_dash(argc, argv, SD_CLI_GEN_SHORTOPTS, longopts, hint);
    if (rc) return rc;
    opterr = 0;
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, SD_CLI_GEN_SHORTOPTS, longopts, NULL)) != -1) {
        if (o == ':') return sd_cli_usage(hint, "option '%s' needs a value", argv[optind - 1]);
        rc = own(o, optarg, user);
        if (rc == SD_CLI_PASS) rc = gen_option(o, optarg, g);
        if (rc == NOT_SHARED) return sd_cli_usage(hint, "unknown option '%s'", argv[optind - 1]);
        if (rc) return rc;
    }
    if (optind < argc) return sd_cli_usage(hint, "unexpected argument '%s'", argv[optind]);
    return 0;
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
    p->target = g->target ? g->target : cfg->target;
    p->draft = g->draft ? g->draft : cfg->draft;
    p->threads = (int32_t)(g->has_threads ? g->threads : (cfg->has_threads ? cfg->threads : 0));
    p->ctx = (int32_t)(g->has_ctx ? g->ctx : (cfg->has_ctx_size ? cfg->ctx_size : 0));
    p->kv_type = g->kv_type ? g->kv_type : cfg->kv_type;
    p->device = resolve_device(g->device, g->ngl, cfg->device, SD_DEVICE_CPU, "-ngl");
    p->device_draft =
        resolve_device(g->device_draft, g->ngl_draft, cfg->device_draft, p->device, "-ngld");
    p->n_split = g->has_split || g->n_split != 0 ? g->n_split
                                                 : (cfg->has_tensor_split ? cfg->tensor_split : 0);
    sd_gen_params *gp = &p->gp;
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
    return SD_OK;
}

/* Prefix an error about a model named by a config file with the config and its key. */
static void note_config_key(sd_error *err, const char *cfg_path, const char *key) {
    sd_error_prefix(err, "%s: key '%s'", cfg_path, key);
}

int sd_cli_pair_load(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err) {
    int rc = sd_model_load(p->target, &p->tm, err);
    if (rc) {
        if (!g->target) note_config_key(err, g->config, "target");
        return rc;
    }
    const int32_t n_ctx_train = sd_model_hparams(p->tm)->n_ctx_train;
    if (p->ctx == 0 || p->ctx > n_ctx_train) {
        if (p->ctx > n_ctx_train)
            fprintf(stderr, "specdec: --ctx-size %d exceeds %s's training context %d; using %d\n",
                    p->ctx, p->target, n_ctx_train, n_ctx_train);
        p->ctx = n_ctx_train;
    }
    p->sp = sd_session_default_params();
    p->sp.n_ctx = p->ctx;
    p->sp.n_threads = p->threads;
    p->sp.kv_type = p->kv_type && !strcmp(p->kv_type, "f16") ? SD_TYPE_F16 : SD_TYPE_F32;
    p->sp.device = p->device;
    p->dsp = p->sp;
    p->dsp.device = p->device_draft; /* the draft is never split */
    p->sp.n_split = p->n_split;
    if (p->draft) {
        if ((rc = sd_model_load(p->draft, &p->dm, err))) {
            if (!g->draft) note_config_key(err, g->config, "draft");
            return rc;
        }
        if ((rc = sd_vocab_check_pair(sd_model_vocab(p->tm), p->target, sd_model_vocab(p->dm),
                                      p->draft, err)))
            return rc;
        const int32_t dctx = sd_model_hparams(p->dm)->n_ctx_train;
        if (p->dsp.n_ctx > dctx) p->dsp.n_ctx = dctx; /* drafting stops near the draft's limit */
    }
    return sd_scorer_init(p->tm, &p->sp, &p->scorer, err);
}

void sd_cli_pair_free(sd_cli_pair *p) {
    if (!p) return;
    sd_scorer_free(p->scorer);
    sd_model_free(p->dm);
    sd_model_free(p->tm);
    sd_config_free(&p->cfg);
    p->scorer = NULL;
    p->dm = p->tm = NULL;
}
