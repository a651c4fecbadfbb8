/*
 * runtime/server: `specdec serve`, an OpenAI-compatible HTTP server (libmicrohttpd: a pool
 * of http_threads polling threads (epoll) shared by every connection, a waiting request's
 * connection suspended until its engine callback resumes it; JSON with jansson) in front of a
 * batcher (runtime/engine's sd_batcher: continuous batching over a paged KV cache). Owns the HTTP
 * daemon, the listening socket and each request's output buffers. May include every library face
 * (runtime/engine's above all); the CLI (tools/cmd_serve.c) makes it.
 *
 * Endpoints:
 *   POST /v1/completions        prompt (string, or token ids) -> text; stream: true gives
 *   POST /v1/chat/completions   server-sent events in the OpenAI format; messages in the
 *                               model's chat template; max_tokens, temperature, top_p,
 *                               top_k, seed, stop, n, stream_options.include_usage,
 *                               ignore_eos, draft_max / draft_type / draft_policy
 *                               (specdec's); usage counts; per-request speculation
 *                               statistics in "speculative"
 *   GET  /v1/models             the model
 *   GET  /health                {"status":"ok"} (HEAD too)
 *   GET  /props                 a llama-server-shaped summary (model, context, slots)
 *   GET  /metrics               Prometheus text (requests, queue depth, KV blocks, tokens/s,
 *                               acceptance rate, tokens per pass, ...)
 *   POST /tokenize, /detokenize llama-server's bodies
 *   GET  /                      the chat page (one HTML file embedded in the binary)
 * Faults: malformed JSON or a field of the wrong type -> 400 with an OpenAI error body
 * naming the field; unknown route 404 (a known route with another method 405); a body
 * over max_body 413; prompt + max_tokens beyond a sequence's context 400; a full queue
 * 503 with Retry-After; a missing or wrong API key 401 ("Authorization: Bearer KEY", the
 * scheme in any case, or "X-Api-Key: KEY"; compared in constant time; /, /health and
 * OPTIONS are open); HTTP/1.1 without Host 400; a path with a decoded NUL 404; grammar /
 * json_schema / logprobs and the like refused by name (400). A client that goes away
 * cancels its request (its blocks are freed at the next step); one that half-closed its
 * side after sending the request (shutdown(SHUT_WR)) is answered; slow clients never
 * stall the engine (output is buffered per request). Connections: at most
 * max_connections open (more are closed at accept); a connection whose request (headers
 * and body) has not fully arrived timeout_s after it opened (or after its previous
 * answer) is closed, however slowly it drips, and one that takes no data for timeout_s
 * while an answer is being sent too. CORS: an Origin in cors_origins (a comma list, or
 * "*"; an entry "localhost": every http(s) origin on localhost, 127.0.0.1 or [::1], any
 * port) gets Access-Control-Allow-Origin on every answer; OPTIONS on a known path is a
 * 200 preflight with an empty body (methods GET, POST, OPTIONS; headers Authorization,
 * Content-Type, X-Api-Key). sd_server_stop stops accepting, lets in-flight requests finish for
 * shutdown_timeout_s and cancels the rest.
 */
#ifndef SD_SERVER_H
#define SD_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/sd_base.h"
#include "runtime/engine/sd_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_server sd_server;

typedef struct sd_server_params {
    const char *host;          /* addresses to bind, all on one port: a name or a literal,
                                * or a comma list of up to 8 ("127.0.0.1,::1"; an IPv6 one
                                * may be in brackets), each its own HTTP threads and
                                * max_connections; "127.0.0.1" */
    int port;                  /* 0: any free port (sd_server_port says which) */
    const char *api_key;       /* NULL: no key ("" is refused: SD_ERR_ARG) */
    size_t max_body;           /* most bytes of a request body (1 MiB) */
    int32_t max_connections;   /* open connections at once (1024) */
    int32_t timeout_s;         /* a request's arrival deadline and the idle limit (60) */
    int32_t http_threads;      /* threads polling the connections (4) */
    const char *cors_origins;  /* NULL: no CORS headers; "*" or "https://a,https://b";
                                * "localhost": the local origins */
    int32_t n_slots;           /* /props's total_slots (the batcher's n_parallel; 1) */
    int32_t n_batch;           /* the batcher's -b: /infill's budget (512) */
    int no_slots;              /* 1: GET /slots answers 501 (llama-server's --no-slots) */
    int no_metrics;            /* 1: GET /metrics answers 501 (llama-server without --metrics) */
    int no_ui;                 /* 1: no chat page: GET / answers 404 (--no-ui) */
    const char *model_name;    /* the id /v1/models lists (NULL: the target's file name) */
    const char *model_tags;    /* "x,y": /v1/models' tags (NULL: none); model_name "a,b": aliases */
    const char *chat_template; /* NULL: the model's tokenizer.chat_template */
    int chat_mode;             /* sd_chat_mode: SD_CHAT_JINJA (default), _AUTO, _BUILTIN */
    int enable_thinking;       /* the templates' enable_thinking (1; 0: --reasoning off) */
    int verbose;               /* 1: answers carry llama-server's __verbose (--verbose) */
    /* 1: llama-server's --context-shift: a choice that fills its sequence's context keeps
     * the first n_keep tokens (a request's "n_keep", 0 by default, BOS besides), drops the
     * older half of the rest and goes on, until its n_predict (sd_ctx_shift_*; the shifted
     * window is evaluated afresh). Not for n > 1, a grammar or logit_bias (those stop at
     * the context). */
    int context_shift;
    /* llama-server's --slot-save-path: the folder of POST /slots/N?action=save|restore's
     * files (NULL: those actions answer 501) */
    const char *slot_save_path;
    /* A request's defaults: n_predict (max_tokens), n_draft (K), samp, seed, draft_type,
     * k_policy, draft_p_min, draft_min, ignore_eos. */
    sd_gen_params gen;
    double shutdown_timeout_s; /* in-flight requests' grace after a stop (30) */
    /* One line per event worth logging (start, errors, shutdown), or NULL. */
    void (*log)(void *user, const char *line);
    void *log_user;
} sd_server_params;

sd_server_params sd_server_default_params(void);

/* llama-server's synthetic acceptance (benchmarking its verification path) for a draft of
 * n_max (K) tokens: rates "P0,P1,..." (--spec-synth-rates: K unconditional chances, each
 * in [0, 1], not increasing: P_i = the chance positions 0 .. i are all accepted) or, with
 * rates NULL, length >= 0 (--spec-synth-len: the mean accepted length, target token
 * included, in [1, K + 1]: one chance p for every position). Writes the conditional
 * chances cond[0 .. *n_out) (caller's, [SD_MAX_DRAFT]) for sd_gen_params.synth_accept.
 * Errors: SD_ERR_ARG (both given, a bad number, a count other than K, an increase). */
int sd_server_synth_rates(const char *rates, double length, int32_t n_max, double *cond,
                          int32_t *n_out, sd_error *err);

/* Bind p->host:p->port and start the HTTP threads over batcher b (made from engine e;
 * neither owned). Errors: SD_ERR_ARG (a bad host or port, naming it), SD_ERR_IO (bind or
 * listen failed, with the reason), SD_ERR_OOM. */
int sd_server_init(sd_engine *e, sd_batcher *b, const sd_server_params *p, sd_server **out,
                   sd_error *err);
/* The port bound (the one chosen when p->port was 0). */
int sd_server_port(const sd_server *s);
/* Run the engine on the calling thread until sd_server_stop, then shut down as the top of
 * this file says. Returns SD_OK, or the first engine error (requests of a failed pass are
 * answered with it; the server goes on). */
int sd_server_run(sd_server *s, sd_error *err);
/* Ask sd_server_run to return. Async-signal-safe (it sets a flag). */
void sd_server_stop(sd_server *s);
/* Stop the daemon (if sd_server_run did not) and free. NULL accepted. */
void sd_server_free(sd_server *s);

#ifdef __cplusplus
}
#endif
#endif /* SD_SERVER_H */
