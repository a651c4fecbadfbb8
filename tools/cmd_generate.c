/*
 * specdec generate: speculative (or target-alone) generation through the engine
 * (runtime/engine), streaming the text to stdout and the statistics to stderr, or one
 * JSON object (--json). Most of the length is the help text and the JSON record; every
 * function is short.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/chat_loop.h"
#include "tools/tools.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/grammar/sd_grammar.h"
#include "runtime/tokenizer/sd_vocab.h"

#define HINT "see 'specdec generate --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

enum {
    OPT_NO_DRAFT = SD_CLI_OPT_OWN,
    OPT_JSON,
    OPT_CHAT,
    OPT_CHAT_TEMPLATE,
    OPT_SYSTEM,
    OPT_SPECIAL,
    OPT_VERBOSE,
    OPT_INTERACTIVE,
    OPT_CONTEXT_SHIFT,
    OPT_KEEP,
    OPT_LOGPROBS,
    OPT_GRAMMAR,
    OPT_GRAMMAR_FILE,
    OPT_JSON_SCHEMA,
    OPT_JSON_SCHEMA_FILE,
    OPT_STOP
};

typedef struct gen_cli {
    sd_cli_gen_opts g;
    int no_draft, json;
    int chat;                  /* --chat (-cnv): format the prompt with a chat template */
    const char *chat_template; /* --chat-template NAME (or Jinja text); NULL: the model's */
    const char *system;        /* --system (-sys): a system message in chat mode */
    int special;               /* --special: control-token texts in the prompt are tokens */
    int random_seed;           /* --seed -1: a random seed, printed */
    int verbose;               /* -v/--verbose: the settings and every pass on stderr */
    int interactive;           /* -i/--interactive: --chat goes on after the prompt's answer */
    int context_shift;         /* --context-shift: a full context drops its older half */
    long keep;                 /* --keep N: prompt tokens a shift keeps (-1: all), BOS aside */
    int logprobs;              /* --logprobs N: 1 + N, 0 when not given */
    const char *grammar;       /* --grammar TEXT: GBNF the output must follow */
    const char *grammar_file;  /* --grammar-file FILE: the same from a file */
    const char *schema;        /* --json-schema (-j) TEXT: a JSON Schema, compiled to GBNF */
    const char *schema_file;   /* --json-schema-file FILE: the same from a file */
    /* --stop / -r (--reverse-prompt) TEXT, repeatable: the text ends before the first
     * appearance of one (sd_engine_generate_text, as a server request's "stop") */
    const char *stop[SD_MAX_STOP_STRINGS];
    int32_t n_stop;
} gen_cli;

static int generate_option(int o, const char *arg, void *user) {
    gen_cli *c = user;
    switch (o) {
    case OPT_NO_DRAFT:
        c->no_draft = 1;
        return 0;
    case OPT_JSON:
        c->json = 1;
        return 0;
    case OPT_CHAT:
        c->chat = 1;
        return 0;
    case OPT_CHAT_TEMPLATE:
        c->chat_template = arg;
        c->chat = 1;
        return 0;
    case OPT_SYSTEM:
        c->system = arg;
        return 0;
    case OPT_SPECIAL:
        c->special = 1;
        return 0;
    case 's': /* llama.cpp's --seed -1: a random seed (the shared parser takes the rest) */
        if (strcmp(arg, "-1")) return SD_CLI_PASS;
        c->random_seed = 1;
        return 0;
    case 'v':
    case OPT_VERBOSE:
        c->verbose = 1;
        return 0;
    case OPT_INTERACTIVE:
        c->interactive = 1;
        return 0;
    case OPT_CONTEXT_SHIFT:
        c->context_shift = 1;
        return 0;
    case OPT_KEEP: {
        char *end = NULL;
        errno = 0;
        const long v = strtol(arg, &end, 10);
        if (errno || end == arg || *end || v < -1 || v > INT32_MAX)
            return usage_error("--keep: expected an integer >= -1, found '%s'", arg);
        c->keep = v;
        return 0;
    }
    case OPT_LOGPROBS: {
        char *end = NULL;
        errno = 0;
        const long v = strtol(arg, &end, 10);
        if (errno || end == arg || *end || v < 0 || v > SD_MAX_TOP_LOGPROBS)
            return usage_error("--logprobs: expected an integer in 0 .. 20, found '%s'", arg);
        c->logprobs = 1 + (int)v;
        return 0;
    }
    case OPT_GRAMMAR:
    case OPT_GRAMMAR_FILE:
    case OPT_JSON_SCHEMA:
    case OPT_JSON_SCHEMA_FILE:
        if (c->grammar || c->grammar_file || c->schema || c->schema_file)
            return usage_error("%s", "--grammar, --grammar-file, --json-schema (-j), "
                                     "--json-schema-file: give one of them");
        *(o == OPT_GRAMMAR        ? &c->grammar
          : o == OPT_GRAMMAR_FILE ? &c->grammar_file
          : o == OPT_JSON_SCHEMA  ? &c->schema
                                  : &c->schema_file) = arg;
        return 0;
    case OPT_STOP:
        if (!arg[0]) return usage_error("%s", "--stop (-r, --reverse-prompt): an empty string");
        if (c->n_stop == SD_MAX_STOP_STRINGS)
            return usage_error("%s", "--stop (-r, --reverse-prompt): at most 8 stop strings");
        c->stop[c->n_stop++] = arg;
        return 0;
    case 'h':
        sd_cli_generate_help(stdout);
        return -1;
    default:
        return SD_CLI_PASS;
    }
}

static int parse_generate(int argc, char **argv, gen_cli *c) {
    static const struct option opts[] = {
        SD_CLI_GEN_LONGOPTS,
        SD_CLI_EXTRA_LONGOPTS,
        SD_CLI_DRAFT_LONGOPTS,
        {"no-draft", no_argument, 0, OPT_NO_DRAFT},
        {"json", no_argument, 0, OPT_JSON},
        {"chat", no_argument, 0, OPT_CHAT},
        {"conversation", no_argument, 0, OPT_CHAT},
        {"chat-template", required_argument, 0, OPT_CHAT_TEMPLATE},
        {"system", required_argument, 0, OPT_SYSTEM},
        {"system-prompt", required_argument, 0, OPT_SYSTEM},
        {"special", no_argument, 0, OPT_SPECIAL},
        {"verbose", no_argument, 0, OPT_VERBOSE},
        {"interactive", no_argument, 0, OPT_INTERACTIVE},
        {"context-shift", no_argument, 0, OPT_CONTEXT_SHIFT},
        {"keep", required_argument, 0, OPT_KEEP},
        {"logprobs", required_argument, 0, OPT_LOGPROBS},
        {"grammar", required_argument, 0, OPT_GRAMMAR},
        {"grammar-file", required_argument, 0, OPT_GRAMMAR_FILE},
        {"json-schema", required_argument, 0, OPT_JSON_SCHEMA},
        {"json-schema-file", required_argument, 0, OPT_JSON_SCHEMA_FILE},
        {"stop", required_argument, 0, OPT_STOP},
        {"reverse-prompt", required_argument, 0, OPT_STOP},
        {0, 0, 0, 0},
    };
    memset((char *)c + sizeof c->g, 0, sizeof *c - sizeof c->g);
    int rc = sd_cli_gen_parse(argc, argv, opts, HINT, &c->g, generate_option, c);
    if (!rc && c->system && !c->chat)
        return usage_error("%s", "--system needs --chat (the system message goes into the chat "
                                 "template)");
    if (!rc && c->interactive && !c->chat)
        return usage_error("%s", "--interactive is a conversation: give --chat (-cnv) too");
    if (!rc && c->context_shift && c->g.has_n && c->g.n == -1)
        return usage_error("%s", "--context-shift with -n -1 would never stop: give -n N");
    if (!rc && c->logprobs && !c->json)
        return usage_error("%s", "--logprobs N: the logprobs are part of --json's output");
    return rc;
}

/* The tokens' text through the engine's streaming detokenizer and stop strings
 * (sd_stop_text): in text mode written to stdout as it becomes final (raw bytes, a
 * character split across tokens written once it is complete, bytes that may start a stop
 * string once they do not); in --json mode kept for the record (invalid UTF-8 replaced).
 * Both modes stop at Ctrl-C (sd_cli_interrupted). */
typedef struct stream_ctx {
    int json;      /* 1: --json, nothing is written while generating */
    int write_err; /* errno of a failed write to stdout (generation stops), or 0 */
    int stopped;   /* stopped by Ctrl-C */
} stream_ctx;

/* Write bytes to stdout and flush; on failure remember errno (EIO if none). 0 or -1. */
static int stream_write(stream_ctx *s, const void *p, size_t n) {
    errno = 0;
    if ((n && fwrite(p, 1, n, stdout) != n) || fflush(stdout) != 0) {
        s->write_err = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

static int stream_text(void *user, const int32_t *tokens, int32_t n, const char *text, size_t len) {
    (void)tokens;
    (void)n;
    stream_ctx *s = user;
    if (!s->json && stream_write(s, text, len)) return 1; /* stop: the output is lost */
    if (sd_cli_interrupted()) return s->stopped = 1;
    return 0;
}

/* The stop reason as printed: Ctrl-C stops generation with none of the engine's reasons. */
static const char *stop_name(const sd_gen_stats *st) {
    return st->stop == SD_STOP_NONE && sd_cli_interrupted() ? "interrupted"
                                                            : sd_stop_reason_str(st->stop);
}

/* "0:12 1:3 4:30": the passes of each K chosen, zero counts left out. */
static void format_k_hist(const sd_gen_stats *st, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int32_t k = 0; k <= SD_MAX_DRAFT && o < cap; k++)
        if (st->k_hist[k])
            o += (size_t)snprintf(buf + o, cap - o, "%s%d:%d", o ? " " : "", k, st->k_hist[k]);
}

/* "0.123", or "-" when nothing was drafted there (0 / 0). */
static const char *ratio_str(int64_t num, int64_t den, char *buf, size_t cap) {
    if (den <= 0) return "-";
    snprintf(buf, cap, "%.3f", (double)num / (double)den);
    return buf;
}

static void print_stats(const sd_gen_stats *st, const sd_gen_params *gp, int with_draft,
                        int32_t k) {
    FILE *f = stderr;
    char b[32];
    fprintf(f, "\n\n");
    fprintf(f, "generated       %d tokens (prompt %d), stop: %s\n", st->n_generated, st->n_prompt,
            stop_name(st));
    fprintf(f, "target passes   %d\n", st->n_target_passes);
    if (with_draft) {
        const int adaptive = gp->k_policy == SD_K_ADAPTIVE;
        fprintf(f, "drafted         %d (%s, K = %d%s", st->n_drafted,
                sd_draft_type_name(gp->draft_type), k, adaptive ? " at most, adaptive" : "");
        if (gp->draft_p_min > 0.0f)
            fprintf(f, ", p-min %.2f after %d", (double)gp->draft_p_min, gp->draft_min);
        if (gp->samp.temp > 0.0f) fprintf(f, ", %s sampling", sd_spec_sampling_name(gp->samp.spec));
        fprintf(f, ")\n");
        fprintf(f, "accepted        %d\n", st->n_accepted);
        fprintf(f, "acceptance rate %s   (accepted / drafted)\n",
                ratio_str(st->n_accepted, st->n_drafted, b, sizeof b));
        fprintf(f, "per position   ");
        for (int32_t i = 0; i < k; i++)
            fprintf(f, " %s", ratio_str(st->accepted_at[i], st->drafted_at[i], b, sizeof b));
        fprintf(f, "   (accepted / drafted at draft position i; - = never drafted)\n");
        char hist[256];
        format_k_hist(st, hist, sizeof hist);
        fprintf(f, "K drafted       %s   (K:passes; mean %.2f; 0 = target alone)\n", hist,
                sd_stats_mean_k(st));
        if (adaptive)
            fprintf(f, "speculation off %d passes, %.2f ms (switched off %d times, %d probes)\n",
                    st->n_off_passes, st->t_off_ms, st->n_switch_off, st->n_probes);
        if (st->n_passes_lookup)
            fprintf(f, "n-gram lookup   %d passes, %d drafted, %d accepted\n", st->n_passes_lookup,
                    st->n_drafted_lookup, st->n_accepted_lookup);
    }
    fprintf(f, "tokens/pass     %s   (emitted, the stop token included / target passes)\n",
            ratio_str(st->n_generated + st->n_stop_tokens, st->n_target_passes, b, sizeof b));
    fprintf(f, "speed           %.2f tokens/s (decode, prefill excluded)\n",
            sd_stats_tokens_per_s(st));
    fprintf(f, "TTFT            %.2f ms\n", st->ttft_ms);
    fprintf(f, "ITL             %.3f ms (mean)\n", sd_stats_itl_ms(st));
    fprintf(f, "time            prefill %.2f ms, draft %.2f ms, verify %.2f ms, sampling %.2f ms\n",
            st->t_prefill_ms, st->t_draft_ms, st->t_verify_ms, st->t_sample_ms);
}

/* The drafting part of the JSON stats: policy, K histogram and trace, auto-off, lookup. */
static void json_drafting(json_t *stats, const sd_gen_stats *st, const sd_gen_params *gp,
                          int with_draft) {
    json_t *hist = json_array();
    for (int32_t k = 0; k <= SD_MAX_DRAFT; k++)
        json_array_append_new(hist, json_integer(st->k_hist[k]));
    json_t *trace = json_array();
    for (int32_t i = 0; gp->k_trace && i < st->n_target_passes && i < gp->k_trace_cap; i++)
        json_array_append_new(trace, json_integer(gp->k_trace[i]));
    json_object_set_new(stats, "draft_type",
                        json_string(with_draft ? sd_draft_type_name(gp->draft_type) : "none"));
    json_object_set_new(stats, "draft_policy", json_string(sd_k_policy_name(gp->k_policy)));
    json_object_set_new(stats, "draft_p_min", json_real(gp->draft_p_min));
    json_object_set_new(stats, "draft_min", json_integer(gp->draft_min));
    json_object_set_new(stats, "k_hist", hist);
    json_object_set_new(stats, "k_trace", trace);
    json_object_set_new(stats, "mean_k", json_real(sd_stats_mean_k(st)));
    json_object_set_new(stats, "n_off_passes", json_integer(st->n_off_passes));
    json_object_set_new(stats, "t_off_ms", json_real(st->t_off_ms));
    json_object_set_new(stats, "n_switch_off", json_integer(st->n_switch_off));
    json_object_set_new(stats, "n_probes", json_integer(st->n_probes));
    json_object_set_new(stats, "n_passes_lookup", json_integer(st->n_passes_lookup));
    json_object_set_new(stats, "n_drafted_lookup", json_integer(st->n_drafted_lookup));
    json_object_set_new(stats, "n_accepted_lookup", json_integer(st->n_accepted_lookup));
    json_object_set_new(stats, "seed", json_integer((json_int_t)gp->seed));
    json_object_set_new(stats, "spec_sampling", json_string(sd_spec_sampling_name(gp->samp.spec)));
    if (!gp->pass_trace) return;
    /* --verbose: every pass as the controller saw it. */
    json_t *passes = json_array();
    for (int32_t i = 0; i < st->n_target_passes && i < gp->pass_trace_cap; i++) {
        const sd_pass_record *r = &gp->pass_trace[i];
        json_array_append_new(passes, json_pack("{s:i, s:i, s:i, s:i, s:f, s:f}", "k", r->k_chosen,
                                                "drafted", r->n_drafted, "accepted", r->n_accepted,
                                                "state", r->state, "t_draft_ms", r->t_draft_ms,
                                                "t_pass_ms", r->t_pass_ms));
    }
    json_object_set_new(stats, "passes", passes);
}

/* -v: every pass on stderr. */
static void print_passes(const sd_gen_stats *st, const sd_gen_params *gp) {
    static const char *const states[] = {"on", "off", "probe"};
    fprintf(stderr, "pass  K  drafted accepted state  draft ms   pass ms   then: K*  S(K*)  "
                    "c/v(1) v(K*+1)/v(1)\n");
    for (int32_t i = 0; i < st->n_target_passes && i < gp->pass_trace_cap; i++) {
        const sd_pass_record *r = &gp->pass_trace[i];
        fprintf(stderr, "%4d %2d %8d %8d %-5s %9.3f %9.3f %9d %6.3f %7.3f %7.3f\n", i, r->k_chosen,
                r->n_drafted, r->n_accepted,
                r->state >= 0 && r->state <= 2 ? states[r->state] : "?", r->t_draft_ms,
                r->t_pass_ms, r->k_best, r->speedup, r->c_rel, r->v_rel);
    }
}

/* -v: the settings the run uses, before it. */
static void print_settings(const sd_gen_params *gp, const sd_engine_params *ep,
                           const char *proposer, const sd_engine *e) {
    const sd_sampling_params *sp = &gp->samp;
    char split[32] = "no split";
    if (ep->n_split) snprintf(split, sizeof split, "split %d", ep->n_split);
    fprintf(stderr,
            "specdec: engine: KV %s, context %d (draft %d), device %s (draft %s), %s, %d "
            "threads\n",
            sd_type_name((uint32_t)ep->kv_type), sd_engine_n_ctx(e), sd_engine_n_ctx_draft(e),
            sd_device_name(ep->device), sd_device_name(ep->device_draft), split,
            ep->n_threads > 0 ? ep->n_threads : sd_n_cores());
    fprintf(stderr,
            "specdec: sampling: temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g "
            "(last %d), presence %g, frequency %g, %s, seed %llu\n",
            (double)sp->temp, sp->top_k, (double)sp->top_p, (double)sp->min_p,
            (double)sp->repeat_penalty, sp->repeat_last_n, (double)sp->presence_penalty,
            (double)sp->freq_penalty, sd_spec_sampling_name(sp->spec),
            (unsigned long long)gp->seed);
    fprintf(stderr,
            "specdec: drafting: %s, K %d, policy %s, p-min %g after %d, n-gram %d..%d, head %s "
            "(%d ids)\n",
            proposer, gp->n_draft, sd_k_policy_name(gp->k_policy), (double)gp->draft_p_min,
            gp->draft_min, ep->ngram.n_min, ep->ngram.n_max,
            ep->draft_head ? ep->draft_head : "full", ep->draft_head ? ep->draft_head_n : 0);
}

/* A token's text (NULL: its bytes are not whole UTF-8: a part of a character). */
static json_t *token_json(const sd_vocab *vocab, int32_t id, double lp) {
    char buf[256];
    int n = sd_vocab_token_to_piece(vocab, id, 0, buf, sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    json_t *text = json_stringn(buf, (size_t)n);
    return json_pack("{s:i,s:o,s:f}", "id", (int)id, "text", text ? text : json_null(), "logprob",
                     isfinite(lp) ? lp : -9999.0);
}

/* --logprobs N: per emitted token {id, text, logprob, top: [{id, text, logprob}]} (the
 * target's raw distribution, see sd_token_logprob), full double precision. */
static json_t *logprobs_json(const sd_vocab *vocab, const sd_token_logprob *lp, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) {
        json_t *e = token_json(vocab, lp[i].token, lp[i].logprob), *top = json_array();
        for (int32_t t = 0; t < lp[i].n_top; t++)
            json_array_append_new(top, token_json(vocab, lp[i].top_id[t], lp[i].top_logprob[t]));
        json_object_set_new(e, "top", top);
        json_array_append_new(a, e);
    }
    return a;
}

/* The JSON record. text: the generated text exactly as streamed (the concatenated pieces:
 * a continuation keeps its leading space, unlike a detokenization of the ids alone), cut
 * at a stop string, valid UTF-8 as jansson needs: the streaming detokenizer replaced each
 * invalid sequence (a byte-fallback token, a character cut at -n) with U+FFFD, as a text
 * decoder would. */
static int print_json(const sd_vocab *vocab, const char *text, size_t text_len, const int32_t *toks,
                      int32_t n, const sd_gen_stats *st, const sd_gen_params *gp, int with_draft,
                      int32_t k, sd_error *err) {
    json_t *ids = json_array();
    for (int32_t i = 0; i < n; i++)
        json_array_append_new(ids, json_integer(toks[i]));
    json_t *ppa = json_array();
    for (int32_t i = 0; i < k; i++) /* null: never drafted at i */
        json_array_append_new(ppa, st->drafted_at[i] ? json_real(sd_stats_accept_at(st, i))
                                                     : json_null());
    json_t *stats = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:o, s:f, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}",
        "n_prompt", st->n_prompt, "n_generated", st->n_generated, "n_target_passes",
        st->n_target_passes, "n_drafted", st->n_drafted, "n_accepted", st->n_accepted,
        "acceptance_rate", st->n_drafted ? json_real(sd_stats_acceptance_rate(st)) : json_null(),
        "tokens_per_pass", sd_stats_tokens_per_pass(st), "per_position_acceptance", ppa,
        "tokens_per_s", sd_stats_tokens_per_s(st), "ttft_ms", st->ttft_ms, "itl_ms",
        sd_stats_itl_ms(st), "t_prefill_ms", st->t_prefill_ms, "t_draft_ms", st->t_draft_ms,
        "t_verify_ms", st->t_verify_ms, "t_sample_ms", st->t_sample_ms, "stop", stop_name(st));
    if (stats) json_drafting(stats, st, gp, with_draft);
    json_t *root =
        json_pack("{s:s%, s:o, s:o}", "text", text, text_len, "tokens", ids, "stats", stats);
    if (root && gp->logprobs)
        json_object_set_new(root, "logprobs", logprobs_json(vocab, gp->logprobs_out, n));
    if (!root) return sd_errorf(err, SD_ERR_OOM, "json: cannot build output");
    char *s = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "json: cannot build output");
    errno = 0;
    const int bad = puts(s) < 0 || fflush(stdout) != 0;
    free(s);
    if (bad)
        return sd_errorf(err, SD_ERR_IO, "stdout: write error: %s", strerror(errno ? errno : EIO));
    return SD_OK;
}

void sd_cli_generate_help(FILE *f) {
    fprintf(f, "generate options (llama.cpp spellings in parentheses):\n"
               "  --config FILE            JSON pair config (flags override it)\n"
               "  --target FILE   (-m, --model)         target GGUF\n"
               "  --draft FILE    (-md, --model-draft)  draft GGUF\n"
               "  --no-draft               target alone (the A side of an A/B run)\n"
               "  --prompt TEXT   (-p)     prompt text\n"
               "  --prompt-file F (-f)     read the prompt from a file (- : standard input)\n"
               "  --max-tokens N  (-n, --n-predict)    tokens to generate (default 128)\n"
               "  --draft-tokens K (-k, --draft-max)   tokens drafted per step, 1..16 (default 4;\n"
               "                           with --draft-policy adaptive: the most)\n"
               "  --temp T                 temperature, 0 = greedy (default 0.8)\n"
               "  --top-k N                top-k, 0 = off (default 40)\n"
               "  --top-p P                top-p, 1 = off (default 0.95)\n"
               "  --seed S        (-s)     seed of every draw (default 42; -1: a random seed,\n"
               "                           printed)\n"
               "  --min-p P                min-p: keep tokens with p >= P p_max (0 = off)\n"
               "  --repeat-penalty P       divide repeated tokens' logits by P (1 = off)\n"
               "  --presence-penalty P, --frequency-penalty P   subtract P (times the count)\n"
               "                           from repeated tokens' logits (0 = off)\n"
               "  --repeat-last-n N        tokens the penalties look back over (64)\n"
               "  --spec-sampling M        rejection or gumbel (default): how speculative\n"
               "                           sampling draws; gumbel prints the text target alone\n"
               "                           prints with the same seed, whatever the draft and K\n"
               "  --threads N     (-t)     threads, 0 = all cores (default 0)\n"
               "  --ctx-size N    (-c)     context size, 0 = the target's (default 0)\n"
               "  --context-shift          a full context keeps its first tokens (BOS and\n"
               "                           --keep N of the prompt; -1: all of it), drops the\n"
               "                           older half of the rest and goes on (off by default)\n"
               "  --no-bos                 do not prepend BOS to the prompt\n"
               "  --kv-type f32|f16        KV-cache element type (default f16)\n"
               "  --device cpu|cuda (-dev) where the target runs (default cpu)\n"
               "  --device-draft D (-devd) where the draft runs (default: --device)\n"
               "  -ngl N, -ngld N          llama.cpp's GPU layers: N > 0 runs the target (draft)\n"
               "                           on the GPU, every layer; 0 the CPU\n"
               "  --tensor-split N (-ts)   split the target over N GPUs (tensor parallel;\n"
               "                           -ts 1,1 and -sm row, every GPU, mean the same)\n"
               "  --json                   print one JSON object on stdout instead of text\n"
               "  --logprobs N             with --json: each token's logprob and its N (0..20)\n"
               "                           most probable alternatives (the target's raw\n"
               "                           distribution: before temperature, penalties)\n"
               "  --chat          (-cnv)   the prompt is a user message in the model's chat\n"
               "                           template (ChatML, Llama 3, Mistral/Llama 2, ...);\n"
               "                           generation stops at its end of turn. Without a\n"
               "                           prompt (or with -i): an interactive chat, one turn\n"
               "                           a line from stdin ('\\' at the end continues it),\n"
               "                           /exit to end, Ctrl-C stops the current answer;\n"
               "                           earlier turns stay in the KV cache; -n bounds each\n"
               "                           answer (default: to its end of turn)\n"
               "  --interactive   (-i)     with --chat: go on reading turns after the prompt's\n"
               "                           answer\n"
               "  --chat-template NAME     a built-in template instead of the model's\n"
               "  --system TEXT   (-sys)   a system message (with --chat)\n"
               "  --special                control tokens written in the prompt (<|im_start|>)\n"
               "                           are tokens, not text\n"
               "  --threads-force          keep --threads above the cores this process may use\n"
               "                           (otherwise capped at them, with a note)\n"
               "  -ctk, -ctv T (--cache-type-k, --cache-type-v)  KV-cache type f32|f16: one\n"
               "                           type for K and V (they must agree with --kv-type)\n"
               "  -cd N (--ctx-size-draft) the draft's context, 0 = the target's\n"
               "  --ignore-eos             never emit EOS (its logit is -inf): run to -n\n"
               "  --stop TEXT (-r, --reverse-prompt)  end the text before TEXT (repeat for up\n"
               "                           to 8): stops after the pass that wrote it, stop\n"
               "                           \"stop\" (as a server request's \"stop\")\n"
               "  --grammar TEXT           constrain the output to a GBNF grammar (llama.cpp's\n"
               "                           syntax, start rule root); exact with any draft\n"
               "  --grammar-file FILE      the same, the grammar read from FILE\n"
               "  -j (--json-schema) TEXT  constrain the output to JSON valid against a JSON\n"
               "                           Schema (compiled to a grammar; docs/serving.md)\n"
               "  --json-schema-file FILE  the same, the schema read from FILE\n"
               "  -e (--escape)            process \\n \\t \\r \\\\ \\' \\\" \\xHH in the prompt\n"
               "                           (--no-escape: as written, the default)\n"
               "  --no-display-prompt      do not echo the prompt before the text\n"
               "  --log-disable            no notes or statistics on stderr (errors still)\n"
               "  -v (--verbose)           the settings before the run and every pass after it\n"
               "                           (with --json: stats.passes)\n"
               "drafting:\n"
               "  --draft-type T  (--spec-type)  none|llm|ngram|ngram+llm|suffix|suffix+llm\n"
               "                           (default: llm with a draft model, else none;\n"
               "                           X+llm: the match continued by the draft model in\n"
               "                           the same block); llama.cpp's\n"
               "                           draft-simple, ngram-simple; ngram and suffix need no\n"
               "                           draft model\n"
               "  --draft-policy P         fixed (K every pass) or adaptive (K chosen each pass,\n"
               "                           target alone while drafting does not pay; default)\n"
               "  --draft-p-min P (--spec-draft-p-min)  LLM draft stops below this top\n"
               "                           probability, 0 = off (default 0.75, llama.cpp's)\n"
               "  --draft-min N   (--draft-n-min)  tokens drafted before the cut-off (default 1)\n"
               "  --ngram-min N, --ngram-max N     n-gram sizes matched, 1..16 (default 2, 4);\n"
               "                           --spec-ngram-size-n N sets both (llama.cpp)\n"
               "  --lookup-cache FILE      n-gram cache kept across runs (read, then updated)\n"
               "  --suffix-factor F        suffix drafts at most F x its match length (default 1)\n"
               "  --suffix-min-prob P      suffix draft stops before its continuation's\n"
               "                           frequency-based probability falls below P (0.1)\n"
               "  --suffix-cost C          suffix drafts the length with the most expected\n"
               "                           tokens per unit cost, a drafted token costing C of\n"
               "                           a one-token pass, from acceptance it learns by match\n"
               "                           length (default: --suffix-factor's rule)\n"
               "  --suffix-resume N        after the target replaces a token inside a copy,\n"
               "                           suffix drafts N tokens from where the copied text\n"
               "                           goes on (0..16, 0 = off; default 2)\n"
               "  --draft-tree WxD         token trees: W alternatives for the first token, each\n"
               "                           a chain of D tokens (W x D <= 16; W alone: D = K),\n"
               "                           one target pass; greedy or Gumbel (default: chain)\n"
               "  --chain-draft-max N      ngram+llm / suffix+llm: the draft model drafts at\n"
               "                           most N tokens of a block (0 = K, the default)\n"
               "  --chain-long-match N     ngram+llm / suffix+llm: a lookup of N or more tokens\n"
               "                           drafts alone, up to K (0 = K, the default)\n"
               "  --draft-head FILE        the LLM draft scores only the ids of this head file\n"
               "                           (FR-Spec's trimmed head: exact, cheaper drafting)\n"
               "  --draft-head-n N         the first N ids of it (0 = all)\n"
               "  --draft-policy sweep     every K in turn (for recording cost traces with -v)\n"
               "llama.cpp flags with no meaning here (-fa, -b, -ub, --mlock, --no-mmap, --numa,\n"
               "-tb, -td, -C, -Cr, --prio, --poll, --no-warmup, -co, --no-perf, -np, -cb,\n"
               "-kvu, --context-shift) are ignored with a one-line note; -no-cnv, --simple-io\n"
               "and --no-context-shift name what specdec always does and are accepted.\n");
}

/* The interactive chat: --chat with -i, or with no prompt at all (flag or config). */
static int gen_interactive(const gen_cli *c, const sd_cli_pair *p) {
    return c->chat && (c->interactive || (!c->g.prompt && !c->g.prompt_file && !p->cfg.prompt));
}

/* Usage errors the parser cannot see: no target, --draft N, two prompts. 0 or a status. */
static int gen_check_args(const gen_cli *c, const sd_cli_pair *p) {
    if (!p->ep.target)
        return usage_error("%s", "no target model: pass --target FILE (-m) or --config FILE");
    if (c->n_stop && gen_interactive(c, p))
        return usage_error("%s", "--stop (-r, --reverse-prompt) in the interactive chat: each "
                                 "answer ends at the chat template's end of turn; stop strings "
                                 "are for one generation (give a prompt, no --interactive)");
    if (c->g.draft && !c->no_draft) {
        /* llama.cpp's old `--draft N` was a token count; here --draft is a file. */
        const char *d = c->g.draft;
        while (*d >= '0' && *d <= '9')
            d++;
        if (*d == '\0' && access(c->g.draft, F_OK) != 0)
            return usage_error("--draft takes the draft model file, found '%s' (for the "
                               "number of draft tokens use -k/--draft-max)",
                               c->g.draft);
    }
    if (c->g.prompt && c->g.prompt_file)
        return usage_error("%s", "give either --prompt or --prompt-file, not both");
    if (gen_interactive(c, p) && c->json)
        return usage_error("%s", "--json prints one answer: not with an interactive chat (give "
                                 "--chat a prompt with -p, without -i)");
    if (gen_interactive(c, p) && c->g.prompt_file && !strcmp(c->g.prompt_file, "-"))
        return usage_error("%s", "-f -: standard input holds the interactive chat's turns");
    return 0;
}

/* The prompt (from --prompt-file, --prompt or the config; escapes processed with -e)
 * into a malloc'd *buf of *len bytes. */
static int gen_prompt(const gen_cli *c, const sd_cli_pair *p, char **buf, size_t *len,
                      sd_error *err) {
    if (c->g.prompt_file) {
        int rc = sd_cli_read_file(c->g.prompt_file, buf, len, err);
        if (rc) return rc;
    } else {
        const char *s = c->g.prompt ? c->g.prompt : (p->cfg.prompt ? p->cfg.prompt : "");
        if (!(*buf = strdup(s))) return sd_errorf(err, SD_ERR_OOM, "out of memory for the prompt");
        *len = strlen(s);
    }
    if (c->g.escape) *len = sd_cli_unescape(*buf, *len);
    return SD_OK;
}

/* Tokenize the prompt through the engine's one prompt path (sd_prompt_tokenize: BOS unless
 * --no-bos; --chat: the prompt as the user's message, after --system's, in the chat
 * template, --chat-template else the model's tokenizer.chat_template, with the assistant
 * header) and size gp->n_predict to what the context can ever emit. */
static int gen_tokenize(const gen_cli *c, sd_engine *e, const char *prompt, size_t len,
                        int32_t **ids, size_t *n_ids, sd_gen_params *gp, sd_error *err) {
    const int32_t ctx = sd_engine_n_ctx(e);
    const char *path = sd_model_path(sd_engine_target(e));
    sd_chat_msg msgs[2];
    size_t n_msgs = 0;
    sd_prompt_spec ps = {0};
    ps.no_bos = c->g.no_bos;
    if (c->chat) {
        if (c->system) msgs[n_msgs++] = (sd_chat_msg){"system", c->system};
        msgs[n_msgs++] = (sd_chat_msg){"user", prompt};
        ps.messages = msgs;
        ps.n_messages = n_msgs;
        ps.tmpl = c->chat_template;
    } else {
        ps.text = prompt;
        ps.len = len;
        ps.special = c->special;
    }
    int32_t n = 0;
    int rc = sd_prompt_tokenize(sd_engine_vocab(e), &ps, ids, &n, err);
    if (rc == SD_ERR_UNSUPPORTED && c->chat && !c->chat_template)
        return sd_error_prefix(err, rc, "%s: --chat (pass --chat-template NAME)", path);
    if (rc && c->chat && !c->chat_template) return sd_error_prefix(err, rc, "%s", path);
    if (rc) return rc;
    *n_ids = (size_t)n;
    if (*n_ids > (size_t)ctx)
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "prompt is %zu tokens, longer than the context of %d tokens (--ctx-size)",
                         *n_ids, ctx);
    /* -n -1: until EOS or the context is full (one more than fits, so the stop is "context"). */
    if (c->g.has_n && c->g.n == -1) gp->n_predict = ctx - (int32_t)*n_ids + 2;
    /* No more than ctx - n_ids + 1 tokens can ever be emitted without a context shift: size
     * nothing beyond that. */
    if (!c->context_shift && gp->n_predict > ctx - (int32_t)*n_ids + 2)
        gp->n_predict = ctx - (int32_t)*n_ids + 2;
    /* --context-shift, --keep: the engine shifts a full context and goes on (either path) */
    gp->context_shift = c->context_shift;
    gp->shift_keep = c->keep;
    if (gp->n_predict < 1) gp->n_predict = 1;
    return SD_OK;
}

/* Generate into out[gp->n_predict], streaming the prompt (unless --no-display-prompt)
 * and the text in text mode; a failed write to stdout stops it and is the error. *txt:
 * the text (cut at a stop string; the caller frees it). */
static int gen_run(const gen_cli *c, sd_engine *e, const sd_gen_params *gp, const char *prompt,
                   size_t prompt_len, const int32_t *ids, size_t n_ids, int32_t *out,
                   sd_gen_stats *st, sd_stop_text **txt, sd_error *err) {
    stream_ctx sc = {c->json, 0, 0};
    int rc = sd_stop_text_init(sd_engine_vocab(e), c->stop, c->n_stop,
                               c->json ? SD_DETOK_REPLACE_INVALID : 0, stream_text, &sc, txt, err);
    if (rc) return rc;
    if (c->json || c->g.no_display_prompt ||
        (stream_write(&sc, prompt, prompt_len) == 0 &&
         (!c->chat || stream_write(&sc, "\n", 1) == 0)))
        rc = sd_engine_generate_text(e, gp, *txt, ids, (int32_t)n_ids, out, gp->n_predict, st, err);
    /* kept tokens that leave no room: the engine stopped at the context */
    if (!rc && c->context_shift && !sc.write_err && st->stop == SD_STOP_CONTEXT &&
        st->n_generated < gp->n_predict)
        rc = sd_errorf(
            err, SD_ERR_CONTEXT, "--context-shift: %d kept tokens leave no room in a context of %d",
            sd_ctx_shift_keep(ids, (int32_t)n_ids, c->keep, sd_vocab_bos(sd_engine_vocab(e))),
            sd_engine_n_ctx(e));
    /* a character the last token left incomplete (raw), bytes held back for a stop string */
    if (!rc && !sc.write_err) sd_stop_text_finish(*txt, st);
    if (!rc && sc.write_err)
        rc = sd_errorf(err, SD_ERR_IO, "stdout: write error: %s", strerror(sc.write_err));
    return rc;
}

/* --lookup-cache: read the cache (a missing file starts an empty one) and give it to the
 * n-gram proposer; after the run it is updated with this prompt and output. */
static int gen_open_cache(sd_cli_pair *p, sd_engine *e, sd_draft_type type, sd_ngram_cache **cache,
                          sd_error *err) {
    const uint64_t fp = sd_draft_vocab_fingerprint(sd_engine_vocab(e));
    const int32_t nv = sd_model_hparams(sd_engine_target(e))->n_vocab;
    int rc = sd_ngram_cache_load(p->lookup_cache, fp, nv, &p->ep.ngram, 0, cache, err);
    if (rc == SD_ERR_IO && errno == ENOENT) {
        sd_error_clear(err);
        rc = sd_ngram_cache_init(fp, nv, &p->ep.ngram, 0, cache, err);
    }
    if (!rc) rc = sd_engine_set_lookup_cache(e, *cache, err);
    if (!rc && type != SD_DRAFT_NGRAM && type != SD_DRAFT_NGRAM_LLM)
        fprintf(stderr, "specdec: --lookup-cache: only --draft-type ngram and ngram+llm read "
                        "it; it is still updated\n");
    return rc;
}

/* doc[0 .. n) becomes a document of the cache, saved atomically. */
static int gen_save_doc(const sd_cli_pair *p, sd_ngram_cache *cache, const int32_t *doc, int32_t n,
                        sd_error *err) {
    int rc = sd_ngram_cache_add(cache, doc, n, err);
    sd_cli_temp_arm(p->lookup_cache); /* a fatal signal removes the cache's temporary */
    if (!rc) rc = sd_ngram_cache_save(cache, p->lookup_cache, err);
    sd_cli_temp_disarm();
    return rc;
}

/* This run becomes a document of the cache (prompt, then output). */
static int gen_save_cache(const sd_cli_pair *p, sd_ngram_cache *cache, const int32_t *ids,
                          size_t n_ids, const int32_t *out, const sd_gen_stats *st, sd_error *err) {
    int32_t *doc = malloc(((size_t)n_ids + (size_t)st->n_generated) * sizeof *doc);
    if (!doc) return sd_errorf(err, SD_ERR_OOM, "out of memory updating the lookup cache");
    memcpy(doc, ids, n_ids * sizeof *doc);
    memcpy(doc + n_ids, out, (size_t)st->n_generated * sizeof *doc);
    int rc = gen_save_doc(p, cache, doc, (int32_t)(n_ids + (size_t)st->n_generated), err);
    free(doc);
    return rc;
}

/* The interactive chat (tools/chat_loop.c) after the pair is loaded: first is the
 * first user message (-p, -f) or NULL. *exit_code: 0, or SD_EXIT_INTERRUPTED when Ctrl-C
 * ended it. The whole conversation becomes one document of the lookup cache. */
static int gen_chat_interactive(const gen_cli *c, const sd_cli_pair *p, sd_engine *e,
                                const sd_gen_params *gp, const char *first, sd_ngram_cache *cache,
                                int *exit_code, sd_error *err) {
    const sd_vocab *vocab = sd_engine_vocab(e);
    const char *path = sd_model_path(sd_engine_target(e));
    sd_cli_chat ch;
    memset(&ch, 0, sizeof ch);
    ch.engine = e;
    ch.gen = *gp;
    /* -n (or max_tokens) bounds each answer; else it runs to its end of turn */
    ch.max_tokens = c->g.has_n ? (int32_t)c->g.n : (p->cfg.has_max_tokens ? p->cfg.max_tokens : -1);
    ch.tmpl = c->chat_template ? c->chat_template : sd_vocab_chat_template(vocab);
    if (!ch.tmpl)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: --chat: the model has no tokenizer.chat_template; pass "
                         "--chat-template NAME (one of %s)",
                         path, sd_chat_template_names());
    char origin[512];
    snprintf(origin, sizeof origin, "%s: tokenizer.chat_template", path);
    ch.tmpl_origin = c->chat_template ? NULL : origin;
    ch.system = c->system;
    ch.first = first;
    ch.add_bos = !c->g.no_bos;
    ch.escape = c->g.escape;
    ch.notes = !c->g.log_disable;
    ch.echo_first = !c->g.no_display_prompt;
    ch.in = stdin;
    ch.prompt = isatty(STDIN_FILENO);
    ch.context_shift = c->context_shift;
    /* BOS (when added) and --keep N tokens of the conversation's start (-1: none more) */
    ch.keep =
        (ch.add_bos && sd_vocab_add_bos(vocab) ? 1 : 0) + (c->keep > 0 ? (int32_t)c->keep : 0);
    int32_t *conv = NULL, n_conv = 0;
    int by_interrupt = 0;
    int rc = sd_cli_chat_run(&ch, &conv, &n_conv, &by_interrupt, err);
    if (!rc && cache && n_conv > 0) rc = gen_save_doc(p, cache, conv, n_conv, err);
    free(conv);
    *exit_code = by_interrupt ? SD_EXIT_INTERRUPTED : EXIT_SUCCESS;
    return rc;
}

int sd_cmd_generate(int argc, char **argv) {
    gen_cli c;
    int prc = parse_generate(argc, argv, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    /* Ctrl-C stops at the next token (the statistics printed, the lookup cache saved, exit
     * status 130); in the interactive chat it stops the current answer. */
    sd_cli_interrupt_catch();

    sd_error err = {0};
    sd_cli_pair p = {0};
    p.ep = sd_engine_default_params();
    char *prompt = NULL;
    size_t prompt_len = 0, n_ids = 0;
    int32_t *prompt_ids = NULL, *out = NULL;
    uint8_t *k_trace = NULL;
    sd_pass_record *passes = NULL;
    sd_token_logprob *lps = NULL; /* --logprobs N */
    char *grammar_buf = NULL;     /* --grammar-file's text */
    sd_ngram_cache *cache = NULL;
    sd_stop_text *txt = NULL; /* the generated text (stop strings) */
    int rc = SD_OK, exit_code = EXIT_FAILURE;
    const int notes = !c.g.log_disable;

    /* generate's drafting defaults: the adaptive policy, llama.cpp's --draft-p-min, and
     * one token drafted before the cut-off applies (whether drafting pays at all is the
     * controller's call; the cut-off only says how far to go). */
    p.ep.gen.k_policy = SD_K_ADAPTIVE;
    p.ep.gen.draft_p_min = 0.75f;
    p.ep.gen.draft_min = 1;
    if ((rc = sd_cli_pair_resolve(&c.g, &p, &err))) goto done;
    if (c.no_draft) p.ep.draft = NULL;
    if (!c.chat && p.cfg.has_chat) c.chat = p.cfg.chat; /* the config's "chat" */
    if (c.system && !c.chat) {
        exit_code = usage_error("%s", "--system needs --chat (the system message goes into the "
                                      "chat template)");
        goto done;
    }
    if (c.random_seed) p.ep.gen.seed = sd_cli_random_seed();
    if ((exit_code = gen_check_args(&c, &p))) goto done;
    exit_code = EXIT_FAILURE;
    if ((rc = gen_prompt(&c, &p, &prompt, &prompt_len, &err))) goto done;
    /* The lookup cache is rewritten after the run: a path that cannot take it (a missing
     * folder, a FIFO, a model file) fails now, not after the whole generation. */
    const char *models[2] = {p.ep.target, p.ep.draft};
    if (p.lookup_cache && (rc = sd_cli_check_output(p.lookup_cache, models, 2, &err))) goto done;
    if ((rc = sd_cli_pair_load(&c.g, &p, &err))) goto done;
    sd_engine *e = p.engine;
    sd_gen_params gp = p.ep.gen;
    if (c.no_draft) gp.draft_type = SD_DRAFT_NONE;
    if (c.grammar_file) {
        size_t glen = 0;
        if ((rc = sd_cli_read_file(c.grammar_file, &grammar_buf, &glen, &err))) goto done;
        gp.grammar = grammar_buf;
    } else if (c.grammar) {
        gp.grammar = c.grammar;
    } else if (c.schema || c.schema_file) {
        char *schema = NULL;
        size_t slen = 0;
        if (c.schema_file) {
            if ((rc = sd_cli_read_file(c.schema_file, &schema, &slen, &err))) goto done;
        } else if (!(schema = strdup(c.schema))) {
            rc = sd_errorf(&err, SD_ERR_OOM, "out of memory");
            goto done;
        } else {
            slen = strlen(schema);
        }
        rc = sd_json_schema_to_gbnf(schema, slen, &grammar_buf, &err);
        if (rc && c.schema_file) sd_error_prefix(&err, rc, "%s", c.schema_file);
        free(schema);
        if (rc) goto done;
        gp.grammar = grammar_buf;
    }
    const int with_draft = sd_engine_has_proposer(e, gp.draft_type);
    if (!with_draft && sd_draft_type_uses_llm(gp.draft_type)) {
        exit_code = usage_error("--draft-type %s needs a draft model: pass --draft FILE (-md)",
                                sd_draft_type_name(gp.draft_type));
        goto done;
    }
    if (!with_draft) gp.n_draft = 0;
    if (p.lookup_cache && (rc = gen_open_cache(&p, e, gp.draft_type, &cache, &err))) goto done;
    if (gen_interactive(&c, &p)) {
        const int have_first = c.g.prompt || c.g.prompt_file || p.cfg.prompt;
        rc = gen_chat_interactive(&c, &p, e, &gp, have_first ? prompt : NULL, cache, &exit_code,
                                  &err);
        goto done;
    }
    if ((rc = gen_tokenize(&c, e, prompt, prompt_len, &prompt_ids, &n_ids, &gp, &err))) goto done;
    if (notes && c.no_draft && (c.g.draft || p.cfg.draft))
        fprintf(stderr, "specdec: --no-draft: ignoring the draft model, target alone\n");
    else if (notes && !with_draft && gp.draft_type == SD_DRAFT_AUTO)
        fprintf(stderr, "specdec: no draft model (-md FILE, or --draft-type ngram): generating "
                        "with the target alone\n");
    out = malloc((size_t)gp.n_predict * sizeof(int32_t));
    if (c.logprobs) { /* --logprobs N */
        lps = malloc((size_t)gp.n_predict * sizeof *lps);
        gp.logprobs = 1;
        gp.top_logprobs = c.logprobs - 1;
        gp.logprobs_out = lps;
    }
    /* Passes <= tokens + 1 (a last pass may emit only EOS). */
    k_trace = malloc((size_t)gp.n_predict + 1);
    gp.k_trace = k_trace;
    gp.k_trace_cap = k_trace ? gp.n_predict + 1 : 0;
    if (c.verbose) {
        passes = malloc(((size_t)gp.n_predict + 1) * sizeof *passes);
        gp.pass_trace = passes;
        gp.pass_trace_cap = passes ? gp.n_predict + 1 : 0;
    }
    if (notes && c.random_seed)
        fprintf(stderr, "specdec: --seed -1: seed %llu\n", (unsigned long long)gp.seed);
    if (notes && c.verbose) {
        const sd_draft_type shown = gp.draft_type == SD_DRAFT_AUTO ? SD_DRAFT_LLM : gp.draft_type;
        print_settings(&gp, &p.ep, with_draft ? sd_draft_type_name(shown) : "none", e);
    }
    if (!out || !k_trace || (c.verbose && !passes) || (c.logprobs && !lps)) {
        rc = sd_errorf(&err, SD_ERR_OOM, "out of memory for %d output tokens", gp.n_predict);
        goto done;
    }
    sd_gen_stats st;
    if ((rc = gen_run(&c, e, &gp, prompt, prompt_len, prompt_ids, n_ids, out, &st, &txt, &err)))
        goto done;
    if (cache && (rc = gen_save_cache(&p, cache, prompt_ids, n_ids, out, &st, &err))) goto done;
    if (notes && st.stop == SD_STOP_CONTEXT)
        fprintf(stderr, "\nspecdec: stopped at the context limit of %d tokens\n",
                sd_engine_n_ctx(e));
    const int32_t k_shown = with_draft ? gp.n_draft : 0;
    size_t text_len = 0;
    const char *text = sd_stop_text_get(txt, &text_len);
    if (c.json && (rc = print_json(sd_engine_vocab(e), text, text_len, out, st.n_generated, &st,
                                   &gp, with_draft, k_shown, &err)))
        goto done;
    if (notes) print_stats(&st, &gp, with_draft, k_shown);
    if (notes && c.verbose) print_passes(&st, &gp);
    exit_code =
        st.stop == SD_STOP_NONE && sd_cli_interrupted() ? SD_EXIT_INTERRUPTED : EXIT_SUCCESS;
done:
    if (rc) exit_code = sd_cli_fail(&err);
    free(grammar_buf);
    sd_stop_text_free(txt);
    free(lps);
    free(out);
    free(k_trace);
    free(passes);
    free(prompt_ids);
    free(prompt);
    sd_cli_pair_free(&p);
    sd_ngram_cache_free(cache); /* after the engine, whose n-gram proposer points at it */
    return exit_code;
}
