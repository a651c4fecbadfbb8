/*
 * specdec serve: the OpenAI-compatible HTTP server (runtime/server) over the batcher
 * (runtime/engine: continuous batching over a paged KV cache), with llama-server's flag
 * spellings where they mean the same. SIGINT / SIGTERM stop it: no new connections,
 * in-flight requests finish (a second signal cancels them), exit 0.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tools/tools.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/server/sd_server.h"

#define HINT "see 'specdec serve --help'"

enum {
    OPT_HOST = SD_CLI_OPT_OWN,
    OPT_PORT,
    OPT_PARALLEL,
    OPT_API_KEY,
    OPT_API_KEY_FILE,
    OPT_KV_BLOCK,
    OPT_MAX_QUEUE,
    OPT_MAX_BODY,
    OPT_ALIAS,
    OPT_TAGS,
    OPT_CHAT_TEMPLATE,
    OPT_NO_PREFIX_CACHE,
    OPT_BATCH,
    OPT_KV_UNIFIED,
    OPT_CONT_BATCHING,
    OPT_SHUTDOWN_TIMEOUT,
    OPT_NO_DRAFT,
    OPT_MAX_CONNECTIONS,
    OPT_TIMEOUT,
    OPT_THREADS_HTTP,
    OPT_CORS_ORIGINS,
    OPT_SUFFIX_CACHE_MB,
    OPT_SLOTS,
    OPT_NO_SLOTS,
    OPT_NO_UI,
    OPT_NO_METRICS,
    OPT_CHAT_TEMPLATE_FILE,
    OPT_JINJA,
    OPT_NO_JINJA,
    OPT_REASONING,
    OPT_VERBOSE,
    OPT_SPEC_SYNTH_RATES,
    OPT_SPEC_SYNTH_LEN,
    OPT_CONTEXT_SHIFT,
    OPT_NO_CONTEXT_SHIFT,
    OPT_SLOT_SAVE_PATH,
};

typedef struct serve_cli {
    sd_cli_gen_opts g;
    const char *host, *api_key, *api_key_file, *alias, *chat_template, *cors_origins;
    const char *chat_template_file, *tags, *synth_rates, *slot_save_path;
    double synth_len; /* -1: none */
    int chat_mode, no_thinking, verbose, context_shift;
    int64_t port, parallel, kv_block, max_queue, max_body, batch;
    int64_t max_connections, timeout, threads_http;
    double shutdown_timeout, suffix_cache_mb;
    int no_prefix_cache, kv_unified, no_draft, no_slots, no_ui, no_metrics;
} serve_cli;

static void serve_help(FILE *f) {
    fprintf(f,
            "usage: specdec serve -m TARGET.gguf [-md DRAFT.gguf] [options]\n"
            "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions\n"
            "(stream: true for server-sent events), GET /v1/models, /health, /metrics,\n"
            "POST /tokenize, /detokenize, and a chat page at GET /. Requests share one\n"
            "speculative target pass per step over a paged KV cache; each request's output\n"
            "is the same alone or beside others.\n"
            "\n"
            "  --host ADDR[,ADDR...]   addresses to bind, all on one port (127.0.0.1)\n"
            "  --port N                port, 0 = any free one (8080); printed at start\n"
            "  --parallel N     (-np)  sequences decoding at once (4)\n"
            "  --ctx-size N     (-c)   KV positions of the pool, all sequences together;\n"
            "                          each sequence gets N / parallel (llama-server's split),\n"
            "                          or N with --kv-unified (default 4096 x parallel, capped\n"
            "                          at the model's training context per sequence)\n"
            "  --kv-unified     (-kvu) a sequence may use the whole pool (admission still\n"
            "                          reserves each request's worst case)\n"
            "  --kv-type T             f32, f16, q8_0, q4_0 (-ctk / -ctv; default f16)\n"
            "  --kv-block N            positions per KV block (16)\n"
            "  --batch-size N   (-b)   most tokens of one target pass (512)\n"
            "  --max-queue N           requests waiting beyond the parallel ones (64); more:\n"
            "                          503 with Retry-After\n"
            "  --no-prefix-cache       do not reuse the KV blocks of earlier prompts\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'\n"
            "                          (not on /, /health, OPTIONS); --api-key-file FILE reads\n"
            "                          it from a file; an empty key is refused\n"
            "  --max-body N            largest request body in bytes (1048576); more: 413\n"
            "  --max-connections N     open connections at once (1024); more are closed at\n"
            "                          accept\n"
            "  --timeout S             seconds a request's headers and body may take to\n"
            "                          arrive, and that an answer may wait for its client to\n"
            "                          read (60); slower connections are closed\n"
            "  --threads-http N        threads polling the connections (4)\n"
            "  --cors-origins LIST     origins allowed to call from a browser: '*' or a comma\n"
            "                          list (none): Access-Control-Allow-Origin on answers,\n"
            "                          OPTIONS preflights answered\n"
            "  --no-slots              GET /slots answers 501 (--slots: on, the default)\n"
            "  --slot-save-path DIR    POST /slots/N?action=save|restore write and read the\n"
            "                          token files there ({\"filename\": NAME}, no path); a\n"
            "                          restore evaluates the tokens into the prefix cache\n"
            "  --no-ui                 no chat page (GET / answers 404)\n"
            "  --no-metrics            GET /metrics answers 501\n"
            "  --alias NAME            the model id /v1/models lists (the target's file name);\n"
            "                          a,b,c: its aliases, the id the first in byte order\n"
            "  --tags a,b              the model's tags (/v1/models' \"tags\")\n"
            "  --chat-template T       a template instead of the model's: a built-in name\n"
            "                          (chatml, llama3, ...) or a Jinja template's text\n"
            "  --chat-template-file F  the template (Jinja) in file F\n"
            "  --jinja                 render every template text with the Jinja engine (the\n"
            "                          default; a template it cannot run falls back to a\n"
            "                          built-in formatter that recognises it)\n"
            "  --no-jinja              built-in formatters only\n"
            "  --reasoning on|off|auto templates' enable_thinking (off: false; auto)\n"
            "  --verbose               answers carry __verbose {prompt, content} (a request's\n"
            "                          \"verbose\" field overrides)\n"
            "  --context-shift         a sequence that fills its context keeps its first\n"
            "                          n_keep tokens (a request's, 0; BOS besides), drops the\n"
            "                          older half of the rest and goes on to its n_predict\n"
            "                          (as generate --context-shift; not for n > 1, grammar\n"
            "                          or logit_bias requests); --no-context-shift: off, the\n"
            "                          default\n"
            "  --shutdown-timeout S    seconds in-flight requests get after SIGTERM (30)\n"
            "  --no-draft              target alone even with -md\n"
            "  --suffix-cache-mb M     a cache of earlier requests' prompts and outputs, at\n"
            "                          most M MiB (LRU by request), that --draft-type suffix\n"
            "                          also drafts from (0: none, the default)\n"
            "  --lookup-cache FILE     generate's n-gram cache: the n-gram drafts also look\n"
            "                          there (read once at start, never written)\n"
            "  --draft-head FILE, --draft-head-n N  the LLM draft scores only the first N\n"
            "                          ids of a head file (as generate)\n"
            "  --spec-synth-rates P0,P1,...  testing: K chances (not increasing) that draft\n"
            "                          positions 0 .. i are all accepted; a keyed coin\n"
            "                          forces rejections beyond them (a draft token is still\n"
            "                          accepted only when verification accepts it: the text\n"
            "                          is unchanged, only the counts move)\n"
            "  --spec-synth-len L      testing: the same with one chance per position, set\n"
            "                          for a mean accepted length L (1 .. K + 1)\n"
            "Request defaults (a request's fields override them): -n/--n-predict N (max\n"
            "tokens; -1 = the rest of the sequence's context, the default), --temp, --top-k,\n"
            "--top-p, --seed, --ignore-eos, -k/--draft-max K (4), --draft-type, --draft-policy\n"
            "(fixed: the K of every pass is the request's own, so sampled output is\n"
            "batch-invariant), --draft-p-min, --draft-min, --ngram-min/--ngram-max; and\n"
            "generate's --suffix-factor, --suffix-min-prob, --suffix-cost, --suffix-resume\n"
            "(every suffix draft). Models and threads: -m, -md, --config, -t,\n"
            "--threads-force. The server runs on the CPU.\n");
}

static int serve_option(int o, const char *arg, void *user) {
    serve_cli *c = user;
    const char *h = HINT;
    switch (o) {
    case OPT_HOST:
        c->host = arg;
        return 0;
    case OPT_PORT:
        if (sd_cli_parse_i64(arg, 0, 65535, &c->port))
            return sd_cli_usage(h, "--port: expected 0 .. 65535, found '%s'", arg);
        return 0;
    case OPT_PARALLEL:
        if (sd_cli_parse_i64(arg, 1, SD_MAX_SEQ, &c->parallel))
            return sd_cli_usage(h, "--parallel: expected 1 .. 1024, found '%s'", arg);
        return 0;
    case OPT_API_KEY:
        c->api_key = arg;
        return 0;
    case OPT_API_KEY_FILE:
        c->api_key_file = arg;
        return 0;
    case OPT_KV_BLOCK:
        if (sd_cli_parse_i64(arg, 1, SD_KV_MAX_BLOCK, &c->kv_block))
            return sd_cli_usage(h, "--kv-block: expected 1 .. 256, found '%s'", arg);
        return 0;
    case OPT_MAX_QUEUE:
        if (sd_cli_parse_i64(arg, 0, 1 << 20, &c->max_queue))
            return sd_cli_usage(h, "--max-queue: expected 0 .. 1048576, found '%s'", arg);
        return 0;
    case OPT_MAX_BODY:
        if (sd_cli_parse_i64(arg, 16, (int64_t)1 << 32, &c->max_body))
            return sd_cli_usage(h, "--max-body: expected 16 .. 4294967296, found '%s'", arg);
        return 0;
    case OPT_BATCH:
        if (sd_cli_parse_i64(arg, 1, 65536, &c->batch))
            return sd_cli_usage(h, "--batch-size: expected 1 .. 65536, found '%s'", arg);
        return 0;
    case OPT_ALIAS:
        c->alias = arg;
        return 0;
    case OPT_TAGS:
        c->tags = arg;
        return 0;
    case OPT_CHAT_TEMPLATE:
        c->chat_template = arg;
        return 0;
    case OPT_CHAT_TEMPLATE_FILE:
        c->chat_template_file = arg;
        return 0;
    case OPT_JINJA:
        c->chat_mode = SD_CHAT_JINJA;
        return 0;
    case OPT_NO_JINJA:
        c->chat_mode = SD_CHAT_BUILTIN;
        return 0;
    case OPT_VERBOSE:
        c->verbose = 1;
        return 0;
    case OPT_REASONING:
        if (strcmp(arg, "on") && strcmp(arg, "off") && strcmp(arg, "auto"))
            return sd_cli_usage(h, "--reasoning: expected on, off or auto, found '%s'", arg);
        c->no_thinking = !strcmp(arg, "off");
        return 0;
    case OPT_NO_PREFIX_CACHE:
        c->no_prefix_cache = 1;
        return 0;
    case OPT_KV_UNIFIED:
        c->kv_unified = 1;
        return 0;
    case OPT_CONT_BATCHING: /* always */
        return 0;
    case OPT_SHUTDOWN_TIMEOUT:
        if (sd_cli_parse_f64(arg, 0.0, 86400.0, &c->shutdown_timeout))
            return sd_cli_usage(h, "--shutdown-timeout: expected 0 .. 86400 seconds, found '%s'",
                                arg);
        return 0;
    case OPT_NO_DRAFT:
        c->no_draft = 1;
        return 0;
    case OPT_MAX_CONNECTIONS:
        if (sd_cli_parse_i64(arg, 1, 1 << 20, &c->max_connections))
            return sd_cli_usage(h, "--max-connections: expected 1 .. 1048576, found '%s'", arg);
        return 0;
    case OPT_TIMEOUT:
        if (sd_cli_parse_i64(arg, 1, 86400, &c->timeout))
            return sd_cli_usage(h, "--timeout: expected 1 .. 86400 seconds, found '%s'", arg);
        return 0;
    case OPT_THREADS_HTTP:
        if (sd_cli_parse_i64(arg, 1, 256, &c->threads_http))
            return sd_cli_usage(h, "--threads-http: expected 1 .. 256, found '%s'", arg);
        return 0;
    case OPT_CORS_ORIGINS:
        c->cors_origins = arg[0] ? arg : NULL;
        return 0;
    case OPT_SLOTS:
        c->no_slots = 0;
        return 0;
    case OPT_NO_SLOTS:
        c->no_slots = 1;
        return 0;
    case OPT_NO_UI:
        c->no_ui = 1;
        return 0;
    case OPT_NO_METRICS:
        c->no_metrics = 1;
        return 0;
    case OPT_SLOT_SAVE_PATH:
        c->slot_save_path = arg;
        return 0;
    case OPT_CONTEXT_SHIFT:
        c->context_shift = 1;
        return 0;
    case OPT_NO_CONTEXT_SHIFT:
        c->context_shift = 0;
        return 0;
    case OPT_SPEC_SYNTH_RATES:
        c->synth_rates = arg;
        return 0;
    case OPT_SPEC_SYNTH_LEN:
        if (sd_cli_parse_f64(arg, 1.0, SD_MAX_DRAFT + 1.0, &c->synth_len))
            return sd_cli_usage(h, "--spec-synth-len: expected 1 .. 17, found '%s'", arg);
        return 0;
    case OPT_SUFFIX_CACHE_MB:
        if (sd_cli_parse_f64(arg, 0.0, 65536.0, &c->suffix_cache_mb))
            return sd_cli_usage(h, "--suffix-cache-mb: expected 0 .. 65536 MiB, found '%s'", arg);
        return 0;
    case 'h':
        serve_help(stdout);
        return -1;
    default:
        return SD_CLI_PASS;
    }
}

static int parse_serve(int argc, char **argv, serve_cli *c) {
    static const struct option opts[] = {
        SD_CLI_GEN_LONGOPTS,
        SD_CLI_EXTRA_LONGOPTS,
        SD_CLI_DRAFT_LONGOPTS,
        {"host", required_argument, 0, OPT_HOST},
        {"port", required_argument, 0, OPT_PORT},
        {"parallel", required_argument, 0, OPT_PARALLEL},
        {"api-key", required_argument, 0, OPT_API_KEY},
        {"api-key-file", required_argument, 0, OPT_API_KEY_FILE},
        {"kv-block", required_argument, 0, OPT_KV_BLOCK},
        {"max-queue", required_argument, 0, OPT_MAX_QUEUE},
        {"max-body", required_argument, 0, OPT_MAX_BODY},
        {"batch-size", required_argument, 0, OPT_BATCH},
        {"alias", required_argument, 0, OPT_ALIAS},
        {"tags", required_argument, 0, OPT_TAGS},
        {"chat-template", required_argument, 0, OPT_CHAT_TEMPLATE},
        {"chat-template-file", required_argument, 0, OPT_CHAT_TEMPLATE_FILE},
        {"jinja", no_argument, 0, OPT_JINJA},
        {"no-jinja", no_argument, 0, OPT_NO_JINJA},
        {"reasoning", required_argument, 0, OPT_REASONING},
        {"verbose", no_argument, 0, OPT_VERBOSE},
        {"no-prefix-cache", no_argument, 0, OPT_NO_PREFIX_CACHE},
        {"kv-unified", no_argument, 0, OPT_KV_UNIFIED},
        {"cont-batching", no_argument, 0, OPT_CONT_BATCHING},
        {"shutdown-timeout", required_argument, 0, OPT_SHUTDOWN_TIMEOUT},
        {"no-draft", no_argument, 0, OPT_NO_DRAFT},
        {"max-connections", required_argument, 0, OPT_MAX_CONNECTIONS},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"threads-http", required_argument, 0, OPT_THREADS_HTTP},
        {"cors-origins", required_argument, 0, OPT_CORS_ORIGINS},
        {"suffix-cache-mb", required_argument, 0, OPT_SUFFIX_CACHE_MB},
        {"slots", no_argument, 0, OPT_SLOTS},
        {"no-slots", no_argument, 0, OPT_NO_SLOTS},
        {"no-ui", no_argument, 0, OPT_NO_UI},
        {"no-metrics", no_argument, 0, OPT_NO_METRICS},
        {"spec-synth-rates", required_argument, 0, OPT_SPEC_SYNTH_RATES},
        {"context-shift", no_argument, 0, OPT_CONTEXT_SHIFT},
        {"slot-save-path", required_argument, 0, OPT_SLOT_SAVE_PATH},
        {"no-context-shift", no_argument, 0, OPT_NO_CONTEXT_SHIFT},
        {"spec-synth-len", required_argument, 0, OPT_SPEC_SYNTH_LEN},
        {0, 0, 0, 0},
    };
    memset((char *)c + sizeof c->g, 0, sizeof *c - sizeof c->g);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->chat_mode = SD_CHAT_JINJA;
    c->parallel = 4;
    c->kv_block = 16;
    c->max_queue = 64;
    c->max_body = 1 << 20;
    c->batch = 512;
    c->shutdown_timeout = 30.0;
    c->max_connections = 1024;
    c->timeout = 60;
    c->threads_http = 4;
    c->synth_len = -1.0;
    return sd_cli_gen_parse(argc, argv, opts, HINT, &c->g, serve_option, c);
}

/* The server the signal handlers stop (one per process). */
static sd_server *volatile g_server;

static void on_signal(int sig) {
    (void)sig;
    sd_server *s = g_server;
    if (s) sd_server_stop(s);
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that left: the write fails, nothing else */
}

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "specdec: serve: %s\n", line);
}

static void note_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "specdec: note: %s\n", line);
}

/* Raise the soft limit on open files to want (at most the hard limit): each connection
 * holds a socket. A note when the hard limit is lower. */
/* "listening on http://ADDR:PORT" to f, one line per address of the --host list (an IPv6
 * literal in brackets), the first address first; with a prefix (stderr's summary line,
 * which ends with it), only the first address, after the prefix. */
static void print_listening(FILE *f, const char *prefix, const char *hosts, int port) {
    const char *p = hosts;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ",");
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        const int bare_v6 = memchr(p, ':', n) != NULL && p[0] != '[';
        fprintf(f, "%slistening on http://%s%.*s%s:%d\n", prefix, bare_v6 ? "[" : "", (int)n, p,
                bare_v6 ? "]" : "", port);
        p = strchr(p, ',');
        if (!p || prefix[0]) break;
        p++;
    }
}

static void raise_fd_limit(rlim_t want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    const rlim_t cap = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    rl.rlim_cur = cap;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (cap < want)
        fprintf(stderr,
                "specdec: note: open files limited to %llu (ulimit -n): fewer connections than "
                "--max-connections can be open\n",
                (unsigned long long)cap);
}

/* "2 x L layers x H KV heads x D head dim x B bytes" for the start-up line. */
static void print_kv(const char *what, const sd_model *m, const sd_kv_pool_stats *kv,
                     size_t bytes_per_token, const char *type) {
    const sd_hparams *hp = sd_model_hparams(m);
    const double per_elem =
        (double)bytes_per_token / (2.0 * hp->n_layer * hp->n_head_kv * hp->head_dim);
    const double total = (double)kv->storage_bytes;
    fprintf(stderr,
            "specdec: serve: %s KV %s: %zu bytes per token (2 x %d layers x %d KV heads x %d "
            "head dim x %.4g bytes), %d blocks of %d positions, %.1f MiB\n",
            what, type, bytes_per_token, hp->n_layer, hp->n_head_kv, hp->head_dim, per_elem,
            kv->n_blocks, kv->block_size, total / 1048576.0);
    if (kv->n_group > 1) /* interleaved local / global layers: a block group each */
        fprintf(stderr,
                "specdec: serve: %s KV layer groups: %d global layers in %d blocks (every "
                "position), %d local layers in %d blocks (their window)\n",
                what, kv->group_layers[0], kv->group_blocks[0], kv->group_layers[1],
                kv->group_blocks[1]);
}

int sd_cmd_serve(int argc, char **argv) {
    serve_cli c;
    int prc = parse_serve(argc, argv, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    sd_error err = {0};
    sd_cli_pair p = {0};
    sd_ngram_cache *lookup = NULL; /* --lookup-cache, read only */
    p.ep = sd_engine_default_params();
    p.ep.gen.k_policy = SD_K_FIXED;
    p.ep.gen.draft_p_min = 0.75f;
    p.ep.gen.draft_min = 1;
    sd_batcher *b = NULL;
    sd_server *srv = NULL;
    char *key = NULL, *tmpl_text = NULL;
    int rc = SD_OK, exit_code = EXIT_FAILURE;
    if ((rc = sd_cli_pair_resolve(&c.g, &p, &err))) goto done;
    if (c.no_draft) p.ep.draft = NULL;
    if (!p.ep.target) {
        exit_code = sd_cli_usage(HINT, "%s", "no target model: pass -m FILE (or --config)");
        goto done;
    }
    if (c.g.prompt || c.g.prompt_file) {
        exit_code = sd_cli_usage(HINT, "%s", "serve takes prompts over HTTP, not -p / -f");
        goto done;
    }
    if (c.chat_template_file) {
        size_t len = 0;
        if ((rc = sd_cli_read_file(c.chat_template_file, &tmpl_text, &len, &err))) goto done;
        if (strlen(tmpl_text) != len) {
            exit_code = sd_cli_usage(HINT, "--chat-template-file %s: the file holds a NUL byte",
                                     c.chat_template_file);
            goto done;
        }
        c.chat_template = tmpl_text;
    }
    if (c.api_key_file) {
        size_t len = 0;
        if ((rc = sd_cli_read_file(c.api_key_file, &key, &len, &err))) goto done;
        while (len && (key[len - 1] == '\n' || key[len - 1] == '\r'))
            key[--len] = '\0';
        if (strlen(key) != len) { /* a NUL would cut the key short */
            exit_code =
                sd_cli_usage(HINT, "--api-key-file %s: the key holds a NUL byte", c.api_key_file);
            goto done;
        }
        c.api_key = key;
    }
    /* An empty key would let every client in: a deployment that meant to require one
     * must not start open. */
    if (c.api_key && !c.api_key[0]) {
        exit_code = sd_cli_usage(HINT, "%s",
                                 c.api_key_file ? "--api-key-file: the file holds an empty key"
                                                : "--api-key: the key is empty");
        goto done;
    }
    /* The pool: -c positions over every sequence (default 4096 per sequence); a sequence
     * gets its share, or the whole with --kv-unified; capped at the training context. */
    const int64_t np = c.parallel;
    const int64_t total = c.g.has_ctx && c.g.ctx > 0 ? c.g.ctx : 4096 * np;
    int64_t per_seq = c.kv_unified ? total : total / np;
    if (per_seq < 1) {
        exit_code = sd_cli_usage(HINT, "%s", "--ctx-size is smaller than --parallel");
        goto done;
    }
    p.ep.n_ctx = (int32_t)(per_seq > INT32_MAX ? INT32_MAX : per_seq);
    p.ep.models_only = 1;
    p.ep.log = c.g.log_disable ? NULL : note_line;
    if ((rc = sd_cli_pair_load(&c.g, &p, &err))) goto done;
    sd_engine *e = p.engine;
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = (int32_t)np;
    bp.n_ctx = sd_engine_n_ctx(e);
    bp.kv_block = (int32_t)c.kv_block;
    /* and one block more per sequence: the batcher's quota of a sequence is the blocks of
     * its context and one (a full-context request with -np 1 fits the pool) */
    bp.n_kv_blocks = (int32_t)((total + c.kv_block - 1) / c.kv_block + np);
    bp.n_batch = (int32_t)c.batch;
    bp.max_queue = (int32_t)c.max_queue;
    bp.prefix_cache = !c.no_prefix_cache;
    bp.suffix_cache_bytes = (size_t)(c.suffix_cache_mb * 1048576.0);
    if (p.lookup_cache) { /* every sequence's n-gram drafts look there too (never written) */
        const uint64_t fp = sd_draft_vocab_fingerprint(sd_engine_vocab(e));
        const int32_t nv = sd_model_hparams(sd_engine_target(e))->n_vocab;
        if ((rc = sd_ngram_cache_load(p.lookup_cache, fp, nv, &p.ep.ngram, 0, &lookup, &err)))
            goto done;
        bp.lookup_cache = lookup;
    }
    sd_gen_params gp = p.ep.gen;
    if (!sd_engine_draft(e) && sd_draft_type_uses_llm(gp.draft_type)) {
        exit_code = sd_cli_usage(HINT, "--draft-type %s needs a draft model (-md FILE)",
                                 sd_draft_type_name(gp.draft_type));
        goto done;
    }
    if (gp.k_policy == SD_K_SWEEP) { /* refused by the batcher too (a request's) */
        exit_code = sd_cli_usage(HINT,
                                 "--draft-policy sweep%s: cost traces are recorded with "
                                 "generate, not serve",
                                 "");
        goto done;
    }
    double synth[SD_MAX_DRAFT];
    if (c.synth_rates || c.synth_len >= 0.0) {
        int32_t n_synth = 0;
        if ((rc = sd_server_synth_rates(c.synth_rates, c.synth_len, gp.n_draft > 0 ? gp.n_draft : 1,
                                        synth, &n_synth, &err)))
            goto done;
        gp.synth_accept = synth;
        gp.n_synth_accept = n_synth;
    }
    bp.k_max = gp.n_draft > 0 ? gp.n_draft : 1;
    if (bp.k_max < 8) bp.k_max = 8; /* requests may ask for more than the default K */
    /* --draft-tree WxD: a pass scores up to W x D nodes (the batcher's tree pass) */
    if (gp.tree_width > 0 && bp.k_max < gp.tree_width * gp.n_draft)
        bp.k_max = gp.tree_width * gp.n_draft;
    if (!sd_engine_draft(e) && gp.draft_type == SD_DRAFT_AUTO) gp.n_draft = 0;
    /* -n -1 (the default): the rest of the sequence's context. */
    if (!c.g.has_n || c.g.n < 0) gp.n_predict = INT32_MAX;
    if ((rc = sd_batcher_init(e, &bp, &b, &err))) goto done;
    sd_batcher_stats st;
    sd_batcher_get_stats(b, &st);
    const char *tname = sd_type_name((uint32_t)p.ep.kv_type);
    print_kv("target", sd_engine_target(e), &st.kv, st.kv_bytes_per_token, tname);
    if (sd_engine_draft(e))
        print_kv("draft", sd_engine_draft(e), &st.kv_draft, st.kv_bytes_per_token_draft, tname);
    sd_server_params sp = sd_server_default_params();
    sp.host = c.host;
    sp.port = (int)c.port;
    sp.api_key = c.api_key;
    sp.max_body = (size_t)c.max_body;
    sp.max_connections = (int32_t)c.max_connections;
    sp.timeout_s = (int32_t)c.timeout;
    sp.http_threads = (int32_t)c.threads_http;
    sp.cors_origins = c.cors_origins;
    sp.no_slots = c.no_slots;
    sp.no_ui = c.no_ui;
    sp.no_metrics = c.no_metrics;
    sp.n_slots = (int32_t)np;
    sp.n_batch = bp.n_batch;
    raise_fd_limit((rlim_t)c.max_connections + 64);
    sp.model_name = c.alias;
    sp.model_tags = c.tags;
    sp.chat_template = c.chat_template;
    sp.chat_mode = c.chat_mode;
    sp.enable_thinking = !c.no_thinking;
    sp.verbose = c.verbose;
    sp.context_shift = c.context_shift;
    sp.slot_save_path = c.slot_save_path;
    sp.gen = gp;
    if (sp.gen.n_predict == INT32_MAX) sp.gen.n_predict = sd_batcher_n_ctx(b);
    sp.shutdown_timeout_s = c.shutdown_timeout;
    sp.log = log_line;
    if ((rc = sd_server_init(e, b, &sp, &srv, &err))) goto done;
    g_server = srv;
    install_signals();
    char summary[256];
    snprintf(
        summary, sizeof summary, "specdec: serve: %d sequences of up to %d tokens, K %d (%s, %s), ",
        (int)np, sd_batcher_n_ctx(b), gp.n_draft,
        sd_draft_type_name(sd_engine_draft(e) && gp.draft_type == SD_DRAFT_AUTO ? SD_DRAFT_LLM
                                                                                : gp.draft_type),
        sd_k_policy_name(gp.k_policy));
    print_listening(stderr, summary, c.host, sd_server_port(srv));
    print_listening(stdout, "", c.host, sd_server_port(srv));
    fflush(stdout);
    rc = sd_server_run(srv, &err);
    g_server = NULL;
    if (rc) fprintf(stderr, "specdec: serve: an engine error was answered: %s\n", err.msg);
    rc = SD_OK;
    exit_code = EXIT_SUCCESS;
done:
    if (rc) exit_code = sd_cli_fail(&err);
    g_server = NULL;
    sd_server_free(srv);
    sd_batcher_free(b);
    sd_ngram_cache_free(lookup);
    sd_cli_pair_free(&p);
    free(key);
    free(tmpl_text);
    return exit_code;
}
