/*
 * tools/common/sd_cli.h: what the commands of the specdec program (tools/, listed in
 * tools/tools.h) share, below them and not part of the library: messages, strict numbers,
 * reading a file, the generation flags of generate and bench with their merge over a pair
 * config and the loading of the pair (cli_common.c; configs: config.c); llama.cpp's
 * spellings (cli_flags.c); output files, signals and stdout (outfile.c). Includes only the
 * library's faces; nothing here calls a command.
 */
#ifndef SD_CLI_H
#define SD_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "tools/common/config.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/base/sd_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- messages, numbers, files ---- */

#define SD_EXIT_USAGE 2

/* Print "specdec: " + fmt (one %s, given arg) + " (HINT)" (nothing when hint is NULL)
 * and a newline on stderr; returns SD_EXIT_USAGE. */
int sd_cli_usage(const char *hint, const char *fmt, const char *arg);
/* Print "specdec: <err's message>" on stderr (the settings it names in the library's
 * terms shown as flags: sd_cli_flag_names); returns EXIT_FAILURE. */
int sd_cli_fail(const sd_error *err);
/* msg with each setting the library names in parentheses replaced by the flag that sets
 * it: "(n_ctx)" -> "(-c/--ctx-size)", "(n_ctx_draft)" -> "(-cd/--ctx-size-draft)",
 * "(draft)" -> "(-md/--draft FILE)", "(template name)" -> "(--chat-template NAME)".
 * Into out[cap], NUL-terminated (cut to fit). */
void sd_cli_flag_names(const char *msg, char *out, size_t cap);
/* A thread count for the models: n (0 = all cores) unless it exceeds sd_n_cores(), the
 * cores this process may use; then, unless force, one note on stderr and the core
 * count (more threads than cores wait for each other at every barrier: ~400x slower
 * measured on a 1.1B model with 64 threads on 2 cores). */
int32_t sd_cli_cap_threads(int64_t n, int force);

/* A random seed for --seed -1 (getrandom, else the clock and the pid), in [0, 2^63). */
uint64_t sd_cli_random_seed(void);

/* Strict numbers: all of s, in [lo, hi]. 0, or -1 (out untouched). */
int sd_cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int sd_cli_parse_f64(const char *s, double lo, double hi, double *out);
/* A whole file into a NUL-terminated malloc'd buffer (*len excludes the NUL). "-" is
 * standard input; a named file must be a regular one (sd_file_open_regular: a FIFO is
 * refused, not waited on). */
int sd_cli_read_file(const char *path, char **out, size_t *len, sd_error *err);

/* ---- outputs (tools/common/outfile.c) ---- */

/* Install the handlers that remove the armed temporary file on SIGINT, SIGTERM, SIGHUP,
 * SIGQUIT, SIGPIPE and SIGXFSZ and then end the process as the signal would (signals
 * the parent ignores stay ignored). Once, at start. */
void sd_cli_signals_install(void);
/* Arm: a fatal signal removes sd_file_temp_path(out_path), the temporary the writers
 * use for out_path, until sd_cli_temp_disarm. One at a time. */
void sd_cli_temp_arm(const char *out_path);
void sd_cli_temp_disarm(void);

/* Ctrl-C as a request to stop (generate: at the next token, with the statistics, the
 * lookup cache saved and exit status SD_EXIT_INTERRUPTED; the interactive chat: the
 * current answer). From sd_cli_interrupt_catch on, the first SIGINT sets a flag
 * (sd_cli_interrupted; system calls restart, SA_RESTART: a wait for input must poll); a
 * second one before sd_cli_interrupt_clear ends the process as SIGINT does (the armed
 * temporary removed).
 * Returns 1 if installed, 0 when SIGINT is ignored (a background job: it stays so). */
int sd_cli_interrupt_catch(void);
int sd_cli_interrupted(void);
void sd_cli_interrupt_clear(void);
#define SD_EXIT_INTERRUPTED 130 /* 128 + SIGINT, as a shell reports a process Ctrl-C ended */

/* Before any work: path may be replaced (sd_gguf_check_output: absent or a regular
 * file, none of the inputs), is writable if it exists, and its folder takes a new file
 * (the temporary is created and removed). 0, or an error naming path. */
int sd_cli_check_output(const char *path, const char *const *inputs, size_t n_inputs,
                        sd_error *err);
/* Write text[0 .. len) to path atomically (temporary, fsync, rename; armed for
 * signals; the temporary removed on every error). */
int sd_cli_write_file_atomic(const char *path, const char *text, size_t len, sd_error *err);

/* Flush stdout: 0 if everything written so far got there, else 1 after printing
 * "specdec: stdout: write error: ..." on stderr. */
int sd_cli_stdout_failed(void);
/* At exit: for a command that succeeded, flush and close stdout and turn a failure into
 * EXIT_FAILURE with one line on stderr; a failed command's status is kept. */
int sd_cli_finish_stdout(int exit_code);
/* Progress lines go to stderr only when it is a terminal (sd_cli_progress_on); a pipe
 * or a file gets only results, notes and errors. */
int sd_cli_progress_on(void);
void sd_cli_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- generation flags shared by generate and bench ---- */

/*
 *   --config FILE, --target/-m/--model FILE, --draft/-md/--model-draft FILE,
 *   --prompt/-p TEXT, --prompt-file/-f/--file FILE, --max-tokens/-n/--n-predict N,
 *   --draft-tokens/-k/--draft-max K, --temp T, --top-k N, --top-p P, --seed/-s S,
 *   --threads/-t N, --ctx-size/-c N, --no-bos, --kv-type f32|f16, --help/-h,
 *   --device/-dev cpu|cuda, --device-draft/-devd cpu|cuda, --n-gpu-layers/-ngl N and
 *   --n-gpu-layers-draft/-ngld N (llama.cpp's: N > 0 = every layer on the GPU, N = 0 = the
 *   CPU; where no GPU can be used, a one-line note and the CPU), --tensor-split/-ts N
 *   (the target over N GPUs; llama.cpp's list of equal shares such as 1,1 means the same),
 *   --split-mode/-sm none|row (row: over every GPU; layer is refused).
 * A command's option table starts with SD_CLI_GEN_LONGOPTS and adds its own, with ids
 * from SD_CLI_OPT_OWN on; the prescan (cli_flags.c, k_aliases) rewrites llama.cpp's
 * multi-letter short flags (-md, -ngl, -ngld, -ts, -sm, -dev, -devd) to long forms.
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
    SD_CLI_OPT_DEVICE,
    SD_CLI_OPT_DEVICE_DRAFT,
    SD_CLI_OPT_NGL,
    SD_CLI_OPT_NGL_DRAFT,
    SD_CLI_OPT_TENSOR_SPLIT,
    SD_CLI_OPT_SPLIT_MODE,
    SD_CLI_OPT_OWN = 1100, /* first id free for a command's own options */
};

/*
 * Drafting flags, shared by generate and bench (a command's table lists
 * SD_CLI_DRAFT_LONGOPTS after SD_CLI_GEN_LONGOPTS):
 *   --draft-type none|llm|ngram|ngram+llm|suffix|suffix+llm  (llama.cpp: --spec-type
 * draft-simple|ngram-simple)
 *   --ngram-min N, --ngram-max N            n-gram sizes matched, 1 .. 16 (default 2, 4)
 *   --spec-ngram-size-n N                   llama.cpp's ngram-simple size: min = max = N
 *   --draft-p-min P                         LLM draft confidence cut-off in [0, 1]
 *                                           (llama.cpp; also --spec-draft-p-min)
 *   --draft-min N                           drafted before the cut-off applies, 0 .. 16
 *                                           (llama.cpp; also --draft-n-min, --spec-draft-n-min)
 *   --draft-policy fixed|adaptive           fixed K, or the adaptive controller + auto-off
 *   --lookup-cache FILE                     persistent n-gram cache (read, then updated)
 *   --suffix-factor F                       suffix drafts at most F x match length tokens
 *                                           (0 < F <= 64, default 1)
 *   --suffix-min-prob P                     suffix draft stops before its continuation's
 *                                           empirical probability falls below P (default 0.1)
 *   --suffix-cost C                         suffix drafts by expected tokens per unit cost
 *                                           (SD_SUFFIX_RULE_EXPECTED), a drafted token costing
 *                                           C of a one-token pass (0 < C <= 16)
 *   --draft-tree WxD (or W)                 token trees: W alternatives for the first token,
 *                                           each a chain of D (or K) tokens, W x D <= 16, in
 *                                           one target pass (generate and bench; default: a
 *                                           chain)
 *   --chain-draft-max N                     ngram+llm / suffix+llm: the draft model's most
 *                                           tokens in a block, 0 .. 16 (0, default: K)
 *   --chain-long-match N                    ngram+llm / suffix+llm: a lookup of N or more
 *                                           tokens drafts alone, 0 .. 16 (0, default: K)
 *   --suffix-resume N                       suffix: after the target replaces a token in a
 *                                           copy, draft N tokens from where the copy goes on,
 *                                           0 .. 16 (0: off; default 2, sd_suffix_params)
 */
enum {
    SD_CLI_OPT_DRAFT_TYPE = 1020, /* 1020..1049: drafting; 1050..1099: cli_flags.c */
    SD_CLI_OPT_NGRAM_MIN,
    SD_CLI_OPT_NGRAM_MAX,
    SD_CLI_OPT_NGRAM_SIZE_N,
    SD_CLI_OPT_DRAFT_P_MIN,
    SD_CLI_OPT_DRAFT_MIN,
    SD_CLI_OPT_DRAFT_POLICY,
    SD_CLI_OPT_LOOKUP_CACHE,
    SD_CLI_OPT_SUFFIX_FACTOR,
    SD_CLI_OPT_SUFFIX_MIN_PROB,
    SD_CLI_OPT_DRAFT_TREE,
    SD_CLI_OPT_SUFFIX_COST,
    SD_CLI_OPT_CHAIN_DRAFT_MAX,
    SD_CLI_OPT_CHAIN_LONG_MATCH,
    SD_CLI_OPT_SUFFIX_RESUME,
};
_Static_assert(SD_CLI_OPT_SUFFIX_RESUME < 1050, "drafting option ids run into cli_flags.c's");

/* clang-format off */
#define SD_CLI_DRAFT_LONGOPTS                                                                      \
    {"draft-type", required_argument, 0, SD_CLI_OPT_DRAFT_TYPE},                                   \
    {"spec-type", required_argument, 0, SD_CLI_OPT_DRAFT_TYPE},                                    \
    {"ngram-min", required_argument, 0, SD_CLI_OPT_NGRAM_MIN},                                     \
    {"ngram-max", required_argument, 0, SD_CLI_OPT_NGRAM_MAX},                                     \
    {"spec-ngram-size-n", required_argument, 0, SD_CLI_OPT_NGRAM_SIZE_N},                          \
    {"draft-p-min", required_argument, 0, SD_CLI_OPT_DRAFT_P_MIN},                                 \
    {"spec-draft-p-min", required_argument, 0, SD_CLI_OPT_DRAFT_P_MIN},                            \
    {"draft-min", required_argument, 0, SD_CLI_OPT_DRAFT_MIN},                                     \
    {"draft-n-min", required_argument, 0, SD_CLI_OPT_DRAFT_MIN},                                   \
    {"spec-draft-n-min", required_argument, 0, SD_CLI_OPT_DRAFT_MIN},                              \
    {"draft-policy", required_argument, 0, SD_CLI_OPT_DRAFT_POLICY},                               \
    {"lookup-cache", required_argument, 0, SD_CLI_OPT_LOOKUP_CACHE},                               \
    {"suffix-factor", required_argument, 0, SD_CLI_OPT_SUFFIX_FACTOR},                             \
    {"suffix-min-prob", required_argument, 0, SD_CLI_OPT_SUFFIX_MIN_PROB},                         \
    {"draft-tree", required_argument, 0, SD_CLI_OPT_DRAFT_TREE},                                   \
    {"suffix-cost", required_argument, 0, SD_CLI_OPT_SUFFIX_COST},                                 \
    {"chain-draft-max", required_argument, 0, SD_CLI_OPT_CHAIN_DRAFT_MAX},                         \
    {"chain-long-match", required_argument, 0, SD_CLI_OPT_CHAIN_LONG_MATCH},                       \
    {"suffix-resume", required_argument, 0, SD_CLI_OPT_SUFFIX_RESUME}
/* clang-format on */

#define SD_CLI_GEN_SHORTOPTS ":m:p:f:n:k:s:t:c:hv"
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
        {"kv-type", required_argument, 0, SD_CLI_OPT_KV_TYPE},                                     \
        {"device", required_argument, 0, SD_CLI_OPT_DEVICE},                                       \
        {"device-draft", required_argument, 0, SD_CLI_OPT_DEVICE_DRAFT},                           \
        {"n-gpu-layers", required_argument, 0, SD_CLI_OPT_NGL},                                    \
        {"gpu-layers", required_argument, 0, SD_CLI_OPT_NGL},                                      \
        {"n-gpu-layers-draft", required_argument, 0, SD_CLI_OPT_NGL_DRAFT},                        \
        {"tensor-split", required_argument, 0, SD_CLI_OPT_TENSOR_SPLIT},                           \
        {"split-mode", required_argument, 0, SD_CLI_OPT_SPLIT_MODE}, {                             \
        "help", no_argument, 0, 'h'                                                                \
    }

typedef struct sd_cli_gen_opts {
    const char *hint; /* usage errors end with " (HINT)" */
    const char *config, *target, *draft, *prompt, *prompt_file;
    const char *kv_type; /* "f32", "f16" or NULL */
    int no_bos;
    /* devices: an explicit --device beats -ngl; -1 = not given */
    int device, device_draft, ngl, ngl_draft;
    int has_split;
    int32_t n_split; /* --tensor-split / -sm row (-1: every GPU) */
    int has_n, has_k, has_temp, has_top_k, has_top_p, has_seed, has_threads, has_ctx;
    int64_t n, k, top_k, seed, threads, ctx;
    double temp, top_p;
    /* The flags of tools/common/cli_flags.c (SD_CLI_EXTRA_LONGOPTS). */
    int threads_force;                       /* --threads-force: keep -t above the cores */
    const char *cache_type_k, *cache_type_v; /* -ctk / -ctv: "f32", "f16" or NULL */
    int has_ctx_draft;                       /* -cd/--ctx-size-draft N */
    int64_t ctx_draft;
    int ignore_eos;        /* --ignore-eos */
    int escape;            /* -e/--escape: process \n, \t, ... in the prompt */
    int log_disable;       /* --log-disable: no notes or statistics */
    int no_display_prompt; /* --no-display-prompt: do not echo the prompt */
    /* sampling and the draft head (sd_cli_extra_apply) */
    int has_spec, has_min_p, has_repeat, has_presence, has_frequency, has_last_n, has_head_n;
    sd_spec_sampling spec;
    double min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int64_t repeat_last_n, head_n;
    const char *draft_head;
    /* drafting (SD_CLI_DRAFT_LONGOPTS) */
    int has_draft_type, has_ngram_min, has_ngram_max, has_p_min, has_draft_min, has_policy;
    sd_draft_type draft_type;
    sd_k_policy policy;
    int64_t ngram_min, ngram_max, draft_min;
    double p_min;
    int has_suffix_factor, has_suffix_min_prob, has_suffix_cost;
    double suffix_factor, suffix_min_prob, suffix_cost;
    const char *lookup_cache;
    int64_t tree_width, tree_depth; /* --draft-tree WxD (depth 0: K) */
    int has_chain_draft_max, has_chain_long_match;
    int64_t chain_draft_max, chain_long_match;
    int has_suffix_resume;
    int64_t suffix_resume;
} sd_cli_gen_opts;

/* What a command's own-option callback returns for an option it leaves to the shared
 * parser. */
#define SD_CLI_PASS (-2)

/* ---- llama.cpp spellings (tools/common/cli_flags.c) ----
 *
 * Flags that map to what specdec has, shared by generate and bench (ids between the
 * shared group's and SD_CLI_OPT_OWN; a command's table lists SD_CLI_EXTRA_LONGOPTS
 * after SD_CLI_GEN_LONGOPTS):
 *   --threads-force           keep --threads above the cores this process may use
 *   -ctk/--cache-type-k T     KV-cache element type, f32 or f16 (K and V share it: -ctk,
 *   -ctv/--cache-type-v T     -ctv and --kv-type must agree)
 *   -cd/--ctx-size-draft N    the draft's context (0: the target's)
 *   --ignore-eos              EOS is never emitted (its logit is -inf)
 *   -e/--escape, --no-escape  process \n \t \r \\ \' \" \xHH ... in the prompt (default
 *                             off, unlike llama.cpp: a prompt is taken as written)
 *   --log-disable             no notes or statistics on stderr (errors still are)
 *   --no-display-prompt       generate does not echo the prompt
 * and the sampling and drafting settings of the real-pair work (merged over the config
 * by sd_cli_extra_apply):
 *   --spec-sampling rejection|gumbel  how speculative sampling draws (sd_spec_sampling)
 *   --min-p P                 min-p in [0, 1] (0: off)
 *   --repeat-penalty P, --presence-penalty P, --frequency-penalty P, --repeat-last-n N
 *                             llama.cpp's penalties (1, 0, 0, 64: off), target and draft alike
 *   --draft-head FILE, --draft-head-n N   the LLM draft scores only the first N ids of the
 *                             head file (FR-Spec's trimmed head; N 0: all of the file)
 */
enum {
    SD_CLI_OPT_THREADS_FORCE = 1050,
    SD_CLI_OPT_CACHE_TYPE_K,
    SD_CLI_OPT_CACHE_TYPE_V,
    SD_CLI_OPT_CTX_DRAFT,
    SD_CLI_OPT_IGNORE_EOS,
    SD_CLI_OPT_ESCAPE,
    SD_CLI_OPT_NO_ESCAPE,
    SD_CLI_OPT_LOG_DISABLE,
    SD_CLI_OPT_NO_DISPLAY_PROMPT,
    SD_CLI_OPT_SPEC_SAMPLING,
    SD_CLI_OPT_MIN_P,
    SD_CLI_OPT_REPEAT_PENALTY,
    SD_CLI_OPT_PRESENCE_PENALTY,
    SD_CLI_OPT_FREQUENCY_PENALTY,
    SD_CLI_OPT_REPEAT_LAST_N,
    SD_CLI_OPT_DRAFT_HEAD,
    SD_CLI_OPT_DRAFT_HEAD_N,
};

/* clang-format off */
#define SD_CLI_EXTRA_LONGOPTS                                          \
    {"threads-force", no_argument, 0, SD_CLI_OPT_THREADS_FORCE},       \
    {"cache-type-k", required_argument, 0, SD_CLI_OPT_CACHE_TYPE_K},   \
    {"cache-type-v", required_argument, 0, SD_CLI_OPT_CACHE_TYPE_V},   \
    {"ctx-size-draft", required_argument, 0, SD_CLI_OPT_CTX_DRAFT},    \
    {"ignore-eos", no_argument, 0, SD_CLI_OPT_IGNORE_EOS},             \
    {"escape", no_argument, 0, SD_CLI_OPT_ESCAPE},                     \
    {"no-escape", no_argument, 0, SD_CLI_OPT_NO_ESCAPE},               \
    {"log-disable", no_argument, 0, SD_CLI_OPT_LOG_DISABLE},           \
    {"no-display-prompt", no_argument, 0, SD_CLI_OPT_NO_DISPLAY_PROMPT}, \
    {"spec-sampling", required_argument, 0, SD_CLI_OPT_SPEC_SAMPLING}, \
    {"min-p", required_argument, 0, SD_CLI_OPT_MIN_P},                 \
    {"repeat-penalty", required_argument, 0, SD_CLI_OPT_REPEAT_PENALTY}, \
    {"presence-penalty", required_argument, 0, SD_CLI_OPT_PRESENCE_PENALTY}, \
    {"frequency-penalty", required_argument, 0, SD_CLI_OPT_FREQUENCY_PENALTY}, \
    {"repeat-last-n", required_argument, 0, SD_CLI_OPT_REPEAT_LAST_N}, \
    {"draft-head", required_argument, 0, SD_CLI_OPT_DRAFT_HEAD},       \
    {"draft-head-n", required_argument, 0, SD_CLI_OPT_DRAFT_HEAD_N}
/* clang-format on */

/* What sd_cli_extra_option returns for an id that is not one of this group. */
#define SD_CLI_NOT_SHARED (-3)

struct option;
/*
 * Before getopt: rewrite llama.cpp's aliases (-md, -ctk, -ctv, -cd, -e, -ngl, -ngld, -ts,
 * -sm, -dev, -devd, -cnv, -sys, -i) to long options
 * the command has; drop llama.cpp flags that have no meaning here (each with one note on
 * stderr, or silently when it names what specdec always does; the table and what each
 * means is in cli_flags.c) with their values; reject other multi-letter single-dash
 * flags by name. Values of the command's options are skipped (a prompt may start with
 * '-'). argv is compacted in place (*argc updated). 0 or a usage exit status.
 */
int sd_cli_prescan(int *argc, char **argv, const char *shortopts, const struct option *longopts,
                   const char *hint);
/* One flag of SD_CLI_EXTRA_LONGOPTS into *g: 0, a usage status or SD_CLI_NOT_SHARED. */
int sd_cli_extra_option(int id, const char *arg, sd_cli_gen_opts *g);
/* After parsing: -ctk, -ctv and --kv-type must agree; g->kv_type becomes the one type.
 * 0 or a usage status. */
int sd_cli_extra_finish(sd_cli_gen_opts *g);
/* The sampling and draft-head settings of this group into ep (flag, else the config's
 * key, else ep's default); a draft head named by the config is resolved against its
 * folder there. */
void sd_cli_extra_apply(const sd_cli_gen_opts *g, const sd_config *cfg, sd_engine_params *ep);
/* Process the escapes of s[0 .. n) in place as llama.cpp's --escape does: \n \t \r \a
 * \b \f \v \\ \' \" \? and \xH or \xHH; any other backslash is kept. Returns the new
 * length (s is NUL-terminated there when it shrank). */
size_t sd_cli_unescape(char *s, size_t n);

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

/* A target/draft pair: the flags merged over the config (sd_cli_pair_resolve), then the
 * engine that loads and pairs them (sd_cli_pair_load). */
typedef struct sd_cli_pair {
    sd_config cfg;       /* the --config file (all unset without one) */
    sd_engine_params ep; /* in: ep.gen holds the command's defaults; out: flags over config */
    const char *kv_type; /* "f32"/"f16" as given (flag, else config), or NULL */
    sd_engine *engine;   /* sd_cli_pair_load */
    char target_origin[320], draft_origin[320];
    const char *lookup_cache; /* flag, else config, or NULL */
} sd_cli_pair;

/* Load g->config (if any) into p->cfg and merge: p->ep gets the target, draft, threads,
 * context, KV type, generation and drafting settings (flag, else config, else p->ep's
 * default). Errors: the config's, and SD_ERR_ARG for n-gram sizes with min > max (naming
 * the flags or keys they came from). */
int sd_cli_pair_resolve(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err);

/* Make p->engine from p->ep (load errors of a model the config named are prefixed
 * "CFG: key 'K': "); notes (a capped context) go to stderr. */
int sd_cli_pair_load(const sd_cli_gen_opts *g, sd_cli_pair *p, sd_error *err);
void sd_cli_pair_free(sd_cli_pair *p); /* engine, config */

#ifdef __cplusplus
}
#endif
#endif /* SD_CLI_H */
