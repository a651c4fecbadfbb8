/*
 * llama.cpp's spellings on specdec's command line (see cli.h, "llama.cpp spellings"):
 *   - aliases: llama.cpp's multi-letter single-dash flags rewritten to specdec's long
 *     forms before getopt sees them (-md, -ctk, -ctv, -cd, -e, -cnv, -sys, -i, ...);
 *   - flags that map to what specdec has: --cache-type-k/-v (the one KV element type),
 *     --ctx-size-draft, --ignore-eos, --escape/--no-escape, --log-disable,
 *     --no-display-prompt, and specdec's own --threads-force;
 *   - llama.cpp flags that have no meaning here: one note on stderr each, then dropped
 *     (with their value), so a llama.cpp command line runs instead of failing on
 *     "unknown option"; those that name what specdec always does are dropped silently;
 *   - any other unknown multi-letter single-dash flag is an error by name (getopt would
 *     read "-ngl 99" as -n "gl").
 * Plus prompt escapes as llama.cpp's --escape processes them.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "tools/common/sd_cli.h"

/* ---- the table of llama.cpp flags without meaning here ---- */

typedef enum { TAKES_NOTHING, TAKES_VALUE, TAKES_ON_OFF } takes;

typedef struct ignored_flag {
    const char *names[3]; /* spellings; NULL-terminated */
    takes arg;            /* TAKES_ON_OFF: an optional on/off/auto word (-fa) */
    const char *why;      /* the note; NULL: it names what specdec always does (silent) */
} ignored_flag;

static const ignored_flag k_ignored[] = {
    {{"-fa", "--flash-attn"},
     TAKES_ON_OFF,
     "attention is always computed exactly by specdec's own kernels (no flash-attention switch)"},
    {{"-b", "--batch-size"},
     TAKES_VALUE,
     "the batch size is fixed: prompts are evaluated in chunks of the session's batch"},
    {{"-ub", "--ubatch-size"},
     TAKES_VALUE,
     "the batch size is fixed: prompts are evaluated in chunks of the session's batch"},
    {{"--mlock"}, TAKES_NOTHING, "model files are memory-mapped read-only, not locked in RAM"},
    {{"--no-mmap"}, TAKES_NOTHING, "model files are always memory-mapped"},
    {{"--numa"}, TAKES_VALUE, "no NUMA placement: the OS places the threads"},
    {{"-tb", "--threads-batch"},
     TAKES_VALUE,
     "one thread count (-t) serves prompt evaluation and decoding"},
    {{"-td", "--threads-draft"}, TAKES_VALUE, "the draft runs with the target's thread count (-t)"},
    {{"-tbd", "--threads-batch-draft"},
     TAKES_VALUE,
     "the draft runs with the target's thread count (-t)"},
    {{"-C", "--cpu-mask"},
     TAKES_VALUE,
     "no CPU mask: specdec uses the cores it may run on (set them with taskset)"},
    {{"-Cr", "--cpu-range"},
     TAKES_VALUE,
     "no CPU range: specdec uses the cores it may run on (set them with taskset)"},
    {{"--prio"}, TAKES_VALUE, "no thread priority setting"},
    {{"--poll"}, TAKES_VALUE, "no polling level: pool threads spin briefly, then sleep on a futex"},
    {{"--no-warmup"}, TAKES_NOTHING, "there is no warm-up run to skip"},
    {{"-co", "--color"}, TAKES_NOTHING, "output is never coloured"},
    {{"--no-perf"}, TAKES_NOTHING, "the statistics are always kept (--log-disable hides them)"},
    {{"--context-shift"}, TAKES_NOTHING, "no context shift: generation stops at the context limit"},
    {{"-np", "--parallel"}, TAKES_VALUE, "one sequence at a time"},
    {{"-cb", "--cont-batching"}, TAKES_NOTHING, "one sequence at a time"},
    {{"-kvu", "--kv-unified"}, TAKES_NOTHING, "one sequence, one KV cache"},
    /* What specdec always does: accepted without a note. */
    {{"-no-cnv", "--no-conversation"}, TAKES_NOTHING, NULL},
    {{"--no-context-shift"}, TAKES_NOTHING, NULL},
    {{"--simple-io"}, TAKES_NOTHING, NULL},
};

/* llama.cpp's multi-letter (or missing) short flags -> specdec's long options. */
static const char *const k_aliases[][2] = {
    {"-md", "--model-draft"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-cd", "--ctx-size-draft"},
    {"-e", "--escape"},
    {"-ngl", "--n-gpu-layers"},
    {"-ngld", "--n-gpu-layers-draft"},
    {"-ts", "--tensor-split"},
    {"-sm", "--split-mode"},
    {"-dev", "--device"},
    {"-devd", "--device-draft"},
    {"-cnv", "--chat"},
    {"-sys", "--system"},
    {"-i", "--interactive"},
    {"-j", "--json-schema"},
    {"-r", "--reverse-prompt"},
    /* serve's (other commands do not have them: the ignored table below notes them) */
    {"-np", "--parallel"},
    {"-b", "--batch-size"},
    {"-cb", "--cont-batching"},
    {"-kvu", "--kv-unified"},
};

static const ignored_flag *find_ignored(const char *a, size_t len) {
    for (size_t i = 0; i < sizeof k_ignored / sizeof k_ignored[0]; i++)
        for (int j = 0; j < 3 && k_ignored[i].names[j]; j++)
            if (strlen(k_ignored[i].names[j]) == len && !strncmp(a, k_ignored[i].names[j], len))
                return &k_ignored[i];
    return NULL;
}

static const struct option *find_long(const struct option *longopts, const char *name, size_t len) {
    for (const struct option *o = longopts; o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, name, len)) return o;
    return NULL;
}

static int is_on_off(const char *s) {
    static const char *const w[] = {"on", "off", "auto", "1", "0", "true", "false"};
    for (size_t i = 0; s && i < sizeof w / sizeof w[0]; i++)
        if (!strcmp(s, w[i])) return 1;
    return 0;
}

/* Does argv[i] (a known option) take the next word as its value? */
static int takes_next(const char *a, const char *shortopts, const struct option *longopts) {
    if (a[1] == '-') {
        if (strchr(a, '=')) return 0;
        const struct option *o = find_long(longopts, a + 2, strlen(a + 2));
        return o && o->has_arg == required_argument;
    }
    if (a[2] != '\0') return 0; /* -n5: glued value */
    const char *c = strchr(shortopts, a[1]);
    return c && c[1] == ':';
}

/* An alias of a: its long form when the command has that option, else a itself. */
static char *alias_of(char *a, const struct option *longopts) {
    for (size_t j = 0; j < sizeof k_aliases / sizeof k_aliases[0]; j++)
        if (!strcmp(a, k_aliases[j][0])) {
            const char *l = k_aliases[j][1];
            if (find_long(longopts, l + 2, strlen(l + 2))) return (char *)l;
        }
    return a;
}

/* A multi-letter single-dash word getopt would misread (-ngl as -n "gl"); glued
 * numbers (-n5, -t2) are fine. */
static int bad_single_dash(const char *a) {
    const int letter = (a[1] >= 'a' && a[1] <= 'z') || (a[1] >= 'A' && a[1] <= 'Z');
    return a[1] != '-' && a[2] != '\0' && letter && !(a[2] >= '0' && a[2] <= '9');
}

/* Drop the ignored flag at argv[*i] (and its value), with its note. 0 or a usage status. */
static int drop_ignored(const ignored_flag *ig, size_t name_len, int argc, char **argv, int *i,
                        int quiet, const char *hint) {
    const char *a = argv[*i], *value = NULL;
    if (a[name_len] == '=')
        value = a + name_len + 1;
    else if (ig->arg == TAKES_VALUE) {
        if (*i + 1 >= argc) return sd_cli_usage(hint, "option '%s' needs a value", a);
        value = argv[++*i];
    } else if (ig->arg == TAKES_ON_OFF && *i + 1 < argc && is_on_off(argv[*i + 1]))
        value = argv[++*i];
    if (ig->why && !quiet)
        fprintf(stderr, "specdec: note: %.*s%s%s ignored: %s\n", (int)name_len, a, value ? " " : "",
                value ? value : "", ig->why);
    return 0;
}

/* Is --log-disable among the options (values skipped)? Its notes are then silent too. */
static int log_disabled(int argc, char **argv, const char *shortopts,
                        const struct option *longopts) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--log-disable")) return 1;
        if (argv[i][0] == '-' && argv[i][1] && takes_next(argv[i], shortopts, longopts)) i++;
    }
    return 0;
}

int sd_cli_prescan(int *argc, char **argv, const char *shortopts, const struct option *longopts,
                   const char *hint) {
    const int quiet = log_disabled(*argc, argv, shortopts, longopts);
    int out = 1, i = 1;
    for (; i < *argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--")) break; /* the rest are operands */
        if (a[0] != '-' || a[1] == '\0') {
            argv[out++] = a;
            continue;
        }
        a = alias_of(a, longopts);
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        const size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const int known = a[1] == '-' && find_long(longopts, a + 2, name_len - 2);
        const ignored_flag *ig = known ? NULL : find_ignored(a, name_len);
        if (ig) {
            argv[i] = a;
            int rc = drop_ignored(ig, name_len, *argc, argv, &i, quiet, hint);
            if (rc) return rc;
            continue;
        }
        if (bad_single_dash(a)) return sd_cli_usage(hint, "unknown option '%s'", a);
        argv[out++] = a;
        /* The value of an option that takes one may start with '-' (a prompt). */
        if (takes_next(a, shortopts, longopts) && i + 1 < *argc) argv[out++] = argv[++i];
    }
    while (i < *argc)
        argv[out++] = argv[i++];
    for (int j = out; j < *argc; j++)
        argv[j] = NULL;
    *argc = out;
    return 0;
}

/* ---- the flags of this group ---- */

/* "f32", "f16", "q8_0", "q4_0" (llama.cpp's names of the KV types specdec has; the
 * quantized ones on the CPU), or NULL. */
static const char *kv_name(const char *arg) {
    static const char *const names[] = {"f32", "f16", "q8_0", "q4_0"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(arg, names[i])) return names[i];
    return NULL;
}

int sd_cli_extra_option(int o, const char *arg, sd_cli_gen_opts *g) {
    const char *h = g->hint;
    switch (o) {
    case SD_CLI_OPT_THREADS_FORCE:
        g->threads_force = 1;
        return 0;
    case SD_CLI_OPT_CACHE_TYPE_K:
    case SD_CLI_OPT_CACHE_TYPE_V: {
        const int is_k = o == SD_CLI_OPT_CACHE_TYPE_K;
        const char *t = kv_name(arg);
        if (!t)
            return sd_cli_usage(h,
                                is_k ? "-ctk/--cache-type-k: expected f32, f16, q8_0 or q4_0 (the "
                                       "KV-cache types specdec has), found '%s'"
                                     : "-ctv/--cache-type-v: expected f32, f16, q8_0 or q4_0 (the "
                                       "KV-cache types specdec has), found '%s'",
                                arg);
        *(is_k ? &g->cache_type_k : &g->cache_type_v) = t;
        return 0;
    }
    case SD_CLI_OPT_CTX_DRAFT:
        if (sd_cli_parse_i64(arg, 0, INT32_MAX, &g->ctx_draft))
            return sd_cli_usage(h,
                                "-cd/--ctx-size-draft: expected an integer in [0, 2147483647], "
                                "found '%s'",
                                arg);
        g->has_ctx_draft = 1;
        return 0;
    case SD_CLI_OPT_IGNORE_EOS:
        g->ignore_eos = 1;
        return 0;
    case SD_CLI_OPT_ESCAPE:
    case SD_CLI_OPT_NO_ESCAPE:
        g->escape = o == SD_CLI_OPT_ESCAPE;
        return 0;
    case SD_CLI_OPT_LOG_DISABLE:
        g->log_disable = 1;
        return 0;
    case SD_CLI_OPT_NO_DISPLAY_PROMPT:
        g->no_display_prompt = 1;
        return 0;
    case SD_CLI_OPT_SPEC_SAMPLING:
        if (sd_spec_sampling_parse(arg, &g->spec))
            return sd_cli_usage(h, "--spec-sampling: expected rejection or gumbel, found '%s'",
                                arg);
        g->has_spec = 1;
        return 0;
    case SD_CLI_OPT_MIN_P:
        if (sd_cli_parse_f64(arg, 0.0, 1.0, &g->min_p))
            return sd_cli_usage(h, "--min-p: expected a number in [0, 1], found '%s'", arg);
        g->has_min_p = 1;
        return 0;
    case SD_CLI_OPT_REPEAT_PENALTY:
    case SD_CLI_OPT_PRESENCE_PENALTY:
    case SD_CLI_OPT_FREQUENCY_PENALTY: {
        /* llama.cpp allows negative presence / frequency penalties (they favour
         * repeats); the repeat penalty is a factor > 0. */
        const int rep = o == SD_CLI_OPT_REPEAT_PENALTY;
        double v;
        if (sd_cli_parse_f64(arg, rep ? 0.0 : -100.0, 100.0, &v) || (rep && v <= 0.0))
            return sd_cli_usage(h,
                                rep ? "--repeat-penalty: expected a number in (0, 100], found '%s'"
                                : o == SD_CLI_OPT_PRESENCE_PENALTY
                                    ? "--presence-penalty: expected a number in [-100, 100], "
                                      "found '%s'"
                                    : "--frequency-penalty: expected a number in [-100, 100], "
                                      "found '%s'",
                                arg);
        if (rep) {
            g->repeat_penalty = v;
            g->has_repeat = 1;
        } else if (o == SD_CLI_OPT_PRESENCE_PENALTY) {
            g->presence_penalty = v;
            g->has_presence = 1;
        } else {
            g->frequency_penalty = v;
            g->has_frequency = 1;
        }
        return 0;
    }
    case SD_CLI_OPT_REPEAT_LAST_N:
        if (sd_cli_parse_i64(arg, 0, SD_PENALTY_MAX_N, &g->repeat_last_n))
            return sd_cli_usage(h, "--repeat-last-n: expected an integer in [0, 4096], found '%s'",
                                arg);
        g->has_last_n = 1;
        return 0;
    case SD_CLI_OPT_DRAFT_HEAD:
        if (!*arg) return sd_cli_usage(h, "--draft-head: expected a file name, found '%s'", arg);
        g->draft_head = arg;
        return 0;
    case SD_CLI_OPT_DRAFT_HEAD_N:
        if (sd_cli_parse_i64(arg, 0, INT32_MAX, &g->head_n))
            return sd_cli_usage(h, "--draft-head-n: expected an integer >= 0, found '%s'", arg);
        g->has_head_n = 1;
        return 0;
    default:
        return SD_CLI_NOT_SHARED;
    }
}

void sd_cli_extra_apply(const sd_cli_gen_opts *g, const sd_config *cfg, sd_engine_params *ep) {
    sd_sampling_params *sp = &ep->gen.samp;
    if (cfg->has_spec_sampling) sp->spec = cfg->spec_sampling;
    if (cfg->has_min_p) sp->min_p = cfg->min_p;
    if (cfg->has_repeat_penalty) sp->repeat_penalty = cfg->repeat_penalty;
    if (cfg->has_presence_penalty) sp->presence_penalty = cfg->presence_penalty;
    if (cfg->has_frequency_penalty) sp->freq_penalty = cfg->frequency_penalty;
    if (cfg->has_repeat_last_n) sp->repeat_last_n = cfg->repeat_last_n;
    if (g->has_spec) sp->spec = g->spec;
    if (g->has_min_p) sp->min_p = (float)g->min_p;
    if (g->has_repeat) sp->repeat_penalty = (float)g->repeat_penalty;
    if (g->has_presence) sp->presence_penalty = (float)g->presence_penalty;
    if (g->has_frequency) sp->freq_penalty = (float)g->frequency_penalty;
    if (g->has_last_n) sp->repeat_last_n = (int32_t)g->repeat_last_n;
    ep->draft_head = g->draft_head ? g->draft_head : cfg->draft_head;
    if (cfg->has_draft_head_n) ep->draft_head_n = cfg->draft_head_n;
    if (g->has_head_n) ep->draft_head_n = (int32_t)g->head_n;
}

int sd_cli_extra_finish(sd_cli_gen_opts *g) {
    /* One element type for K and V here: the flags that name one must agree. */
    const char *k = g->cache_type_k, *v = g->cache_type_v, *kv = g->kv_type;
    const char *t = k ? k : (v ? v : kv);
    if ((k && strcmp(k, t)) || (v && strcmp(v, t)) || (kv && strcmp(kv, t))) {
        char what[96];
        snprintf(what, sizeof what, "%s%s%s%s%s%s", k ? "-ctk " : "", k ? k : "",
                 v ? (k ? ", -ctv " : "-ctv ") : "", v ? v : "",
                 kv ? ((k || v) ? ", --kv-type " : "--kv-type ") : "", kv ? kv : "");
        return sd_cli_usage(g->hint, "the K and V caches share one element type here, found %s",
                            what);
    }
    g->kv_type = t;
    return 0;
}

uint64_t sd_cli_random_seed(void) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = sd_mix64((uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec) ^
            sd_mix64((uint64_t)getpid());
    }
    return s >> 1; /* a config's "seed" is an integer >= 0: keep it one */
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t sd_cli_unescape(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            s[o++] = s[i];
            continue;
        }
        const char c = s[++i];
        static const char from[] = "ntrabfv\\'\"?", to[] = "\n\t\r\a\b\f\v\\'\"?";
        const char *f = strchr(from, c);
        if (c && f) {
            s[o++] = to[f - from];
        } else if (c == 'x' && i + 1 < n && hex_digit(s[i + 1]) >= 0) {
            int v = hex_digit(s[++i]);
            if (i + 1 < n && hex_digit(s[i + 1]) >= 0) v = v * 16 + hex_digit(s[++i]);
            s[o++] = (char)v;
        } else { /* unknown: kept as written */
            s[o++] = '\\';
            s[o++] = c;
        }
    }
    if (o < n) s[o] = '\0';
    return o;
}
