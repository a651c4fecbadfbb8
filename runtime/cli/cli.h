/*
 * Sub-commands of the specdec CLI that live in their own files. Each takes the
 * arguments after "specdec" (argv[0] is the command name) and returns the process exit
 * status: 0 ok, 1 error (one line "specdec: ..." on stderr), 2 usage error.
 *
 *   specdec synth  (runtime/synth.c)  llama-shaped GGUF pairs of real shapes with seeded
 *                                     random weights: a draft and a target that is a
 *                                     grown copy of it plus noise (--noise dials how
 *                                     often they agree)
 *   specdec bench  (runtime/bench.c)  A/B benchmark (target alone vs speculative, ABAB,
 *                                     same seeds) with measured vs predicted speedup;
 *                                     --kernels: bandwidth, verification-pass cost,
 *                                     prefill throughput; --roof: the memory roof alone
 *   (runtime/roof.c)                  the memory roof: best streaming read, 1..T threads
 *   specdec perplexity (runtime/perplexity.c)  mean NLL (nats/token) and perplexity of
 *                                     a model over the stories of a text file
 *
 * Below them, the pieces the commands share (runtime/cli_common.c): messages, strict
 * number parsing, reading a file, and the generation flags of `generate` and `bench`
 * with their merge over a pair config and the loading of the pair.
 */
#ifndef SD_CLI_H
#define SD_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/cli/config.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/base/sd_base.h"
#include "target/sd_target.h"

#ifdef __cplusplus
extern "C" {
#endif

int sd_cmd_synth(int argc, char **argv);
int sd_cmd_bench(int argc, char **argv);
int sd_cmd_perplexity(int argc, char **argv);

/* ---- the memory roof (runtime/cli/roof.c) ---- */

typedef struct sd_cli_roof {
    int32_t threads, passes;
    size_t bytes;       /* buffer size */
    const char *kernel; /* loads used: "avx512", "avx2" or "scalar" (static strings) */
    double gbps;        /* best pass, 1e9 bytes/s */
    double gbps_median; /* median pass */
} sd_cli_roof;

/*
 * The best streaming read of a mib MiB buffer (huge pages requested) by `threads`
 * threads, each reading its own contiguous slice with the widest loads the CPU has
 * (kernel NULL) or the named ones ("avx512", "avx2", "scalar"); best and median of
 * `passes` timed passes after one untimed pass. Errors: SD_ERR_ARG (ranges: mib 1..2^24,
 * threads 1..4096, passes >= 1), SD_ERR_UNSUPPORTED (kernel not available), SD_ERR_OOM,
 * SD_ERR_IO (a thread could not start). Method: the comment at the top of roof.c.
 */
int sd_cli_roof_measure(int64_t mib, int32_t threads, int32_t passes, const char *kernel,
                        sd_cli_roof *out, sd_error *err);

/* ---- messages, numbers, files ---- */

#define SD_EXIT_USAGE 2

/* Print "specdec: " + fmt (one %s, given arg) + " (HINT)" (nothing when hint is NULL)
 * and a newline on stderr; returns SD_EXIT_USAGE. */
int sd_cli_usage(const char *hint, const char *fmt, const char *arg);
/* Print "specdec: <err's message>" on stderr; returns EXIT_FAILURE. */
int sd_cli_fail(const sd_error *err);
/* Strict numbers: all of s, in [lo, hi]. 0, or -1 (out untouched). */
int sd_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int sd_cli_parse_f64(const char *s, double lo, double hi, double *out);
/* A whole file into a NUL-terminated malloc'd buffer (*len excludes the NUL). */
int sd_cli_read_file(const char *path, char **out, size_t *len, sd_error *err);

/* ---- generation flags shared by generate and bench ---- */

/*
 *   --config FILE, --target/-m/--model FILE, --draft/-md/--model-draft FILE,
 *   --prompt/-p TEXT, --prompt-file/-f/--file FILE, --max-tokens/-n/--n-predict N,
 *   --draft-tokens/-k/--draft-max K, --temp T, --top-k N, --top-p P, --seed/-s S,
 *   --threads/-t N, --ctx-size/-c N, --no-bos, --kv-type f32|f16, --help/-h.
 * A command's option table starts with SD_CLI_GEN_LONGOPTS and adds its own, with ids
 * from SD_CLI_OPT_OWN on; main.c rewrites -md to --model-draft before parsing.
 */
enum {
    SD_CLI_OPT_CONFIG = 1000,
    SD_CLI_OPT_TARGET,
    SD_CLI_OPT_DRAFT,
    SD_CLI_OPT_TEMP,
    SD_CLI_OPT_TOP_K,
    SD_CLI_OPT_TOP_P,
    SD_CLI_OPT_NO_BOS,
    SD_CLI_OPT_KV_TYPE,
    SD_CLI_OPT_OWN = 1100, /* first id free for a command's own options */
};

#define SD_CLI_GEN_SHORTOPTS ":m:p:f:n:k:s:t:c:h"
/* Entries of a struct option table (needs <getopt.h>). */
#define SD_CLI_GEN_LONGOPTS                                                                        \
    {"config", required_argument, 0, SD_CLI_OPT_CONFIG},                                           \
        {"target", required_argument, 0, SD_CLI_OPT_TARGET},                                       \
        {"model", required_argument, 0, SD_CLI_OPT_TARGET},                                        \
        {"draft", required_argument, 0, SD_CLI_OPT_DRAFT},                                         \
        {"model-draft", required_argument, 0, SD_CLI_OPT_DRAFT},                                   \
        {"prompt", required_argument, 0, 'p'}, {"prompt-file", required_argument, 0, 'f'},         \
        {"file", required_argument, 0, 'f'}, {"max-tokens", required_argument, 0, 'n'},            \
        {"n-predict", required_argument, 0, 'n'}, {"draft-tokens", required_argument, 0, 'k'},     \
        {"draft-max", required_argument, 0, 'k'}, {"temp", required_argument, 0, SD_CLI_OPT_TEMP}, \
        {"top-k", required_argument, 0, SD_CLI_OPT_TOP_K},                                         \
        {"top-p", required_argument, 0, SD_CLI_OPT_TOP_P}, {"seed", required_argument, 0, 's'},    \
        {"threads", required_argument, 0, 't'}, {"ctx-size", required_argument, 0, 'c'},           \
        {"no-bos", no_argument, 0, SD_CLI_OPT_NO_BOS},                                             \
        {"kv-type", required_argument, 0, SD_CLI_OPT_KV_TYPE}, {                                   \
        "help", no_argument, 0, 'h'                                                                \
    }

typedef struct sd_cli_gen_opts {
    const char *hint; /* usage errors end with " (HINT)" */
    const char *config, *target, *draft, *prompt, *prompt_file;
    const char *kv_type; /* "f32", "f16" or NULL */
    int no_bos;
    int has_n, has_k, has_temp, has_top_k, has_top_p, has_seed, has_threads, has_ctx;
    int64_t n, k, top_k, seed, threads, ctx;
    double temp, top_p;
} sd_cli_gen_opts;

/* What a command's own-option callback returns for an option it leaves to the shared
 * parser. */
#define SD_CLI_PASS (-2)

struct option;
/*
 * Parse argv[1 .. argc) into *g (zeroed first; hint kept). Multi-letter single-dash
 * flags that are not known (llama.cpp's -ngl 99, -fa) are rejected by name. Each option
 * goes first to own(id, optarg, user), which returns 0 (taken), -1 (--help printed),
 * a usage exit status, or SD_CLI_PASS; the shared flags are parsed here with generate's
 * ranges: -n >= 1 or -1, -k 1..16, --seed >= 0 (a command wanting other ranges takes
 * the option itself). Returns 0, -1 (help: exit 0) or a usage exit status.
 */
int sd_cli_gen_parse(int argc, char **argv, const struct option *longopts, const char *hint,
                     sd_cli_gen_opts *g, int (*own)(int id, const char *arg, void *user),
                     void *user);

/* A target/draft pair: the flags merged over the config, then the loaded models. */
typedef struct sd_cli_pair {
    sd_config cfg;              /* the --config file (all unset without one) */
    const char *target, *draft; /* flag, else config; NULL: none */
    int32_t threads;            /* flag, else config, else 0 (all cores) */
    int32_t ctx;                /* flag, else config, else 0; sd_cli_pair_load resolves it */
    const char *kv_type;        /* flag, else config, else NULL (f32) */
    sd_gen_params gp;           /* in: the command's defaults; out: config, then flags */
    sd_model *tm, *dm;          /* sd_cli_pair_load: dm NULL when draft is NULL */
    sd_session_params sp, dsp;  /* target's; draft's (n_ctx capped at its context) */
    sd_scorer *scorer;          /* over tm with sp */
} sd_cli_pair;

/* Load g->config (if any) into p->cfg and merge. Set p->gp to the defaults first. */
int sd_cli_pair_resolve(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err);

/* Load p->target and (when set) p->draft, check that their vocabularies pair, resolve
 * p->ctx (0 or above the target's training context: that context, with a note on
 * stderr), fill p->sp and p->dsp, and make p->scorer. Load errors of a model that the
 * config named are prefixed "CFG: key 'K': ". */
int sd_cli_pair_load(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err);
void sd_cli_pair_free(sd_cli_pair *p); /* scorer, models, config */

#ifdef __cplusplus
}
#endif
#endif /* SD_CLI_H */
