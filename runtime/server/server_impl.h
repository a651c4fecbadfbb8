/*
 * runtime/server/server_impl.h: PRIVATE to runtime/server. The records shared by
 * server.c (daemon, routing, bodies, the run loop), api.c (completions and chat: request
 * parsing, the engine callback, JSON and server-sent events), misc.c (models, health,
 * metrics, tokenize, detokenize), logprobs.c (logprobs, top_logprobs, logit_bias) and
 * page.c (the chat page).
 */
#ifndef SD_SERVER_IMPL_H
#define SD_SERVER_IMPL_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "runtime/server/sd_server.h"

struct MHD_Connection;

/* Every JSON answer and event: compact, reals with 15 significant digits (what a double
 * holds exactly in decimal: a reader's arithmetic on two printed values, such as
 * llama-server's predicted_n / predicted_ms, matches the server's to ~1e-15; jansson's
 * default of 17 digits prints 0.1 as 0.10000000000000001). */
#define SRV_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* An HTTP answer built by a handler: status, body, content type, extra header. */
typedef struct srv_reply {
    int status;
    char *body; /* malloc'd */
    size_t len;
    const char *type;        /* content type (static) */
    const char *retry_after; /* "Retry-After" value, or NULL */
    int stream;              /* 1: body is NULL and gen streams (api.c) */
    int pending;             /* 1: no answer yet: the connection is (or was) suspended
                                until gen's generation ends (srv_generate_finish) */
    struct srv_gen *gen;     /* the stream's or the pending request's record */
    const char *code;        /* the error body's "code" (static), or NULL */
    const char *hdr_name;    /* one more header (static name), or NULL */
    char hdr_value[32];
    int32_t n_prompt_tokens, n_ctx; /* a context overflow: the error body carries both
                                       (llama-server's fields) when n_ctx > 0 */
    int llama_path; /* in: the request came on llama-server's path (no /v1/ prefix): a
                       context overflow is answered with its error type */
    int http11;     /* in: an HTTP/1.1 request (an interim 1xx answer may be sent to it) */
    int drop;       /* out: close the connection without an answer (the bytes already on it
                       cannot be followed by one intact) */
} srv_reply;

/* One generation request (completions or chat) between the HTTP thread that owns the
 * connection and the engine thread's callback. Freed when both have let go. */
typedef struct srv_choice {
    char *text; /* the whole text so far (non-streaming answers) */
    size_t len, cap;
    int done, role_sent;
    sd_stop_reason stop;
    sd_gen_stats st;
    char *toks; /* the ids emitted, int32 each (llama-server's /completion: "tokens") */
    size_t toks_len, toks_cap; /* bytes */
    int32_t n_prompt;          /* its prompt's tokens */
    int ctx_limited;           /* its n_predict was cut to the room left in the context */
    sd_token_logprob *lp;      /* [n_lp] the tokens' logprobs (non-streaming, logprobs asked) */
    int32_t n_lp, cap_lp;
    size_t text_offset; /* completions' text_offset of the next token (streaming) */
} srv_choice;

/* One batcher request of a generation (one per prompt of a prompt list): its callback's
 * user record. Its choices are [base, base + n) of the generation's. */
typedef struct srv_sub {
    struct srv_gen *g;
    int32_t base, n, n_done;
    int64_t id; /* the batcher's id (0 until submitted) */
    /* return_progress: prompt_progress chunks sent, the first one's time (ms) and cached
     * positions, and whether the last (the whole prompt) went out */
    int32_t progress_n, progress_cache;
    double t_progress0;
    int progress_end;
} srv_sub;

/* The three shapes of a generation answer. */
typedef enum srv_kind {
    SRV_COMPLETIONS = 0, /* POST /v1/completions (OpenAI) */
    SRV_CHAT = 1,        /* POST /v1/chat/completions (OpenAI) */
    SRV_NATIVE = 2,      /* POST /completion (llama-server's own shape, native.c) */
} srv_kind;

typedef struct srv_gen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* the HTTP side, the engine side, and a stream's connection */
    struct sd_server *srv;
    int64_t id;
    int chat, stream, include_usage;
    int logprobs;              /* the request asked for logprobs */
    int progress;              /* return_progress on a stream: prompt_progress chunks */
    int native, return_tokens; /* SRV_NATIVE; its "return_tokens" */
    int post_probs;            /* SRV_NATIVE n_probs as probabilities ("post_sampling_probs") */
    json_t *bias_json;         /* generation_settings.logit_bias: [{token, bias}] */
    json_t *fields;            /* SRV_NATIVE: "response_fields" (a reference), or NULL */
    char *prompt_text;         /* SRV_NATIVE: the prompt's ids as text, specials written */
    int verbose;               /* the answer carries __verbose {prompt, content} */
    sd_gen_params gp;          /* what the request runs with (its generation_settings) */
    int32_t n_choices, n_done, n_prompt; /* n_prompt: all prompts' tokens */
    srv_sub sub[SD_MAX_CHOICES];         /* the batcher requests, n_sub of them */
    int32_t n_sub;
    char cmpl_id[48];
    long long created;
    srv_choice ch[SD_MAX_CHOICES];
    char *sse; /* pending server-sent-event bytes: [sse_off, sse_len) not yet sent */
    size_t sse_len, sse_off, sse_cap;
    int oom;                     /* building the output ran out of memory */
    int cancelled;               /* the client is gone: the callback cancels */
    int fd;                      /* the connection's socket (reset checks on each event) */
    int probe_ok;                /* non-streamed HTTP/1.1: an EOF may be probed (api.c) */
    size_t probe_sent;           /* bytes of the probe sent (api.c k_probe) */
    struct MHD_Connection *conn; /* the connection, resumed by the callback */
    int suspended;               /* conn is suspended waiting for news (under mu) */
    int32_t id_slot;  /* the request's id_slot (-1: none; the least recently used slot) */
    int32_t *prompt0; /* the first prompt's ids (slot records, with --slot-save-path) */
    int32_t n_prompt0;
} srv_gen;

/* The most addresses --host lists ("127.0.0.1,::1"): one listening socket and one
 * libmicrohttpd daemon each. */
#define SRV_MAX_HOSTS 8

/* A growing text buffer (the /metrics answer): oom set once an append failed. */
typedef struct srv_mbuf {
    char *b;
    size_t len, cap;
    int oom;
} srv_mbuf;

/* A Prometheus histogram over fixed upper bounds (seconds): cumulative counts are made
 * when written; the sum is kept in microseconds. */
#define SRV_HIST_MAX 24
typedef struct srv_hist {
    atomic_llong n[SRV_HIST_MAX + 1]; /* [i]: observations in (le[i-1], le[i]]; last: above */
    atomic_llong count, sum_us;
} srv_hist;

/* vLLM's metric names (metrics_vllm.c), counted over finished choices (sequences). */
typedef struct srv_vllm {
    atomic_llong drafts, draft_tokens, accepted; /* spec_decode_num_* */
    atomic_llong accepted_at[SD_MAX_DRAFT];      /* ..._per_pos, by draft position */
    atomic_llong success[3];                     /* finished_reason stop, length, abort */
    srv_hist ttft, tpot, e2e;
} srv_vllm;

struct sd_server {
    sd_engine *e;
    sd_batcher *b;
    sd_server_params p;
    char *model_name;
    struct MHD_Daemon *d[SRV_MAX_HOSTS]; /* one daemon per address of p.host's list */
    int listen_fd[SRV_MAX_HOSTS];        /* sockets not (yet) a daemon's, or -1 */
    int n_d;                             /* addresses bound */
    int port;
    volatile sig_atomic_t stop;
    atomic_int stopping; /* the run loop is shutting down: generation answers 503 */
    /* Counters for /metrics. */
    atomic_llong http_by_class[6]; /* 1xx .. 5xx (index 1 .. 5) */
    atomic_llong http_total;
    /* Finished requests' sums for llama-server's metrics (api.c, at each choice's end):
     * prompt and decode time (us), passes that drafted, passes each request took part in,
     * the longest sequence (prompt + generated), and the tokens generated (counted here, before
     * the answer goes out: the batcher's own count of a finished request may come after it). */
    atomic_llong prompt_us, predicted_us, n_drafts, n_req_passes, n_tokens_max, n_predicted;
    double t_start_unix;   /* seconds since the epoch at start */
    atomic_int kv_ok;      /* the last idle accounting check passed (1) or failed (0) */
    atomic_int n_open;     /* requests between their first callback and on_completed */
    atomic_int n_inflight; /* batcher requests submitted whose last choice has not ended
                            * (llamacpp:requests_processing: these less the queued ones) */
    /* /slots/N?action=erase (slot_action.c): tickets asked and served by the stepping
     * thread, and the positions the last one dropped */
    atomic_llong erase_asked, erase_done, erase_n;
    double t_start; /* ms */
    /* Open connections (deadline sweeps): a doubly linked list under conn_mu. */
    pthread_mutex_t conn_mu;
    struct srv_track *conns;
    double t_sweep; /* ms of the last sweep */
    srv_vllm vllm;  /* vLLM's names on /metrics */
    /* --slot-save-path (slot_action.c): each slot's last sequence, the tokens its KV
     * cache held at the end (the prompt and the output but its last token), under slot_mu;
     * use: a counter for the least recently used slot (a request without id_slot) */
    pthread_mutex_t slot_mu;
    struct srv_slot_rec {
        int32_t *toks;
        int32_t n;
        long long use;
    } * slot_rec;
    long long slot_use;
};

/* server.c */
/* An OpenAI-style error reply: {"error": {"message", "type", "param", "code"}}; the
 * message's invalid UTF-8 (a quoted path or field) becomes U+FFFD; code is r->code. */
void srv_error(srv_reply *r, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A JSON reply (takes the reference of j). */
void srv_json(srv_reply *r, int status, json_t *j);
/* What the peer of socket fd has done, seen without reading: nothing (or sent more bytes),
 * shut its side (an EOF waiting: it closed, or only half-closed with shutdown(SHUT_WR) and
 * still reads), or reset the connection (an error waiting, or the connection closed: a
 * reset after the EOF). fd < 0: SRV_PEER_OPEN. */
enum { SRV_PEER_OPEN = 0, SRV_PEER_EOF = 1, SRV_PEER_RESET = 2 };
int srv_peer_state(int fd);

/* Send buf[*sent, len) on socket fd, advancing *sent by what went out. wait_ms 0: never
 * blocks (what the socket takes now); wait_ms > 0: waits for room up to wait_ms in all.
 * Returns 0 once every byte is sent, 1 while some remain (no room, or the wait ran out),
 * -1 when the peer is gone (a reset, a closed pipe). */
int srv_send_rest(int fd, const char *buf, size_t len, size_t *sent, int wait_ms);

/* api.c: POST /v1/completions (SRV_COMPLETIONS), /v1/chat/completions (SRV_CHAT) and
 * /completion (SRV_NATIVE) on connection c (socket fd).
 * Fills r, or sets r->pending with r->gen: c was suspended until the generation ends
 * (or had ended already); then srv_generate_finish(r->gen, r) makes the answer. */
void srv_generate(sd_server *s, srv_kind kind, const char *body, size_t len,
                  struct MHD_Connection *c, int fd, srv_reply *r);
/* The answer of a pending request; lets go of g (the HTTP side's reference). */
void srv_generate_finish(srv_gen *g, srv_reply *r);
/* The stream's content reader and its free callback (libmicrohttpd signatures). */
ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void srv_stream_free(void *cls);
/* Take / let go of one reference (the record is freed at the last). */
void srv_gen_ref(srv_gen *g);
void srv_gen_unref(srv_gen *g);
/* The connection is closing: its socket is no longer g's to look at. */
void srv_gen_closed(srv_gen *g);

/* native.c: llama-server's own shapes. */
/* Its request fields beyond the OpenAI ones (return_tokens, cache_prompt,
 * speculative.n_max / n_min / p_min, response_fields, id_slot, n_probs and
 * post_sampling_probs) into gp and g's flags; -1 with a 400 reply. */
int srv_native_parse(json_t *o, sd_gen_params *gp, int *return_tokens, int *post_probs,
                     json_t **fields, srv_reply *r);
/* generation_settings.logit_bias of a request: its biases, and with ignore_eos every
 * end-of-generation id at -inf (null), as [{"token": id, "bias": b}]. */
json_t *srv_native_bias_json(const sd_vocab *v, const sd_gen_params *gp);
/* The prompt's ids as text, control tokens written out (llama-server's "prompt"); malloc'd,
 * NULL when out of memory. */
char *srv_native_prompt_text(const sd_vocab *v, const int32_t *ids, int32_t n);
/* The stream's chunk for ev (under g->mu): a text delta, then at the end the whole
 * result with "stop": true. */
/* llama-server's "timings" object of choice i (a new reference; never NULL). */
json_t *srv_native_timings(const srv_gen *g, int32_t i);
void srv_native_event(srv_gen *g, const sd_req_event *ev);
/* The answer of a finished non-streaming /completion. */
void srv_native_final(srv_gen *g, srv_reply *r);
/* GET /slots (read-only) and POST /apply-template. */
void srv_slots(sd_server *s, srv_reply *r);
void srv_apply_template(sd_server *s, const char *body, size_t len, srv_reply *r);

/* Chat messages of body o (api.c): [{role, content: string | [{type: "text", text}] |
 * null}]; *msgs and *texts (each text malloc'd, *n of them) for the caller to free. -1 with
 * a 400 reply. */
int srv_parse_messages(json_t *o, sd_chat_msg **msgs, size_t *n, char ***texts, srv_reply *r);

/* chat_prompt.c: the chat prompt text of body o (messages, add_generation_prompt,
 * continue_final_message or an assistant prefill, chat_template_kwargs, reasoning_effort,
 * and tools when allow_tools) in the server's template (--chat-template, else the model's,
 * else chatml) as s->p.chat_mode says; *text malloc'd. -1 with a 400 reply. */
int srv_chat_text(sd_server *s, json_t *o, int allow_tools, char **text, size_t *len, srv_reply *r);
/* POST /chat/completions/input_tokens: {"input_tokens": N}, the prompt tokens a chat
 * request's messages make (llama-server's). */
void srv_input_tokens(sd_server *s, const char *body, size_t len, srv_reply *r);
/* slot_action.c: POST /slots/N?action=erase|save|restore (action NULL: none given). */
void srv_slot_action(sd_server *s, int32_t slot, const char *action, const char *body, size_t len,
                     srv_reply *r);
/* A finished choice 0 of g (its statistics st): the slot's last sequence (slot_action.c). */
void srv_slot_record(sd_server *s, const srv_gen *g, const sd_gen_stats *st);
/* slot_action.c: the stepping thread's side (between steps): serve the erases asked. */
void srv_slot_serve(sd_server *s);
/* infill.c: POST /infill (llama-server's fill-in-the-middle): the prompt built from the
 * vocabulary's FIM tokens, then answered as POST /completion. */
void srv_infill(sd_server *s, const char *body, size_t len, struct MHD_Connection *c, int fd,
                srv_reply *r);

/* misc.c */
/* Append printf-formatted text to m (m->oom set when out of memory; later appends do nothing). */
void srv_mprintf(srv_mbuf *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_vmprintf(srv_mbuf *m, const char *fmt, va_list ap);
/* Add a finished choice's statistics to llama-server's metric sums (any thread). */
void srv_count_done(sd_server *s, const sd_gen_stats *st);
void srv_models(sd_server *s, srv_reply *r);
/* The items of a comma-separated list, sorted in byte order, without repeats or empty
 * items (a new array; NULL: out of memory; an empty array for NULL). */
json_t *srv_csv_set(const char *csv);
void srv_health(sd_server *s, srv_reply *r);
void srv_metrics(sd_server *s, srv_reply *r);
void srv_props(sd_server *s, srv_reply *r);
void srv_tokenize(sd_server *s, const char *body, size_t len, srv_reply *r);
void srv_detokenize(sd_server *s, const char *body, size_t len, srv_reply *r);
/* Parse a body as a JSON object; on failure a 400 reply naming the position. NULL then. */
json_t *srv_parse_object(const char *body, size_t len, srv_reply *r);

/* metrics_vllm.c */
/* Count a finished choice's statistics under vLLM's names (any thread). */
void srv_vllm_count(srv_vllm *v, const sd_gen_stats *st);
/* Append vLLM's metrics to m: the counters above, and the batcher's gauges and token
 * counters from st, labelled model_name (escaped) and engine="0". */
void srv_vllm_write(srv_mbuf *m, const srv_vllm *v, const sd_batcher_stats *st,
                    const char *model_name);

/* logprobs.c */
/* The request's logprobs / top_logprobs (chat: bool and 0 .. 20; completions: logprobs
 * 0 .. 20) and logit_bias ({"id": -100 .. 100}, ids below v's size; llama-server's forms
 * too: a text key whose every token gets the bias, [[id or text, bias], ...], false for a
 * ban) into gp; *bias (malloc'd, the caller frees it once the request is submitted) holds
 * the biases gp->samp points to. 0, or -1 with a 400 naming the field in r. */
int srv_logprobs_parse(json_t *o, int chat, const sd_vocab *v, sd_gen_params *gp,
                       sd_logit_bias **bias, srv_reply *r);
/* The "logprobs" value of a choice (or a stream chunk) for tokens lp[0 .. n): chat
 * {"content": [...], "refusal": null}; completions {tokens, token_logprobs, top_logprobs,
 * text_offset}, the offsets counted from *offset (characters of the text), advanced. */
json_t *srv_logprobs_json(const sd_vocab *v, int chat, const sd_token_logprob *lp, int32_t n,
                          size_t *offset);
/* llama-server's completion_probabilities for tokens lp[0 .. n): [{id, token, bytes,
 * logprob, top_logprobs: [{id, token, bytes, logprob}]}], or with post: prob / top_probs
 * (exp of the logprobs; entries of probability 0 left out). */
json_t *srv_native_probs_json(const sd_vocab *v, const sd_token_logprob *lp, int32_t n, int post);
/* Append lp[0 .. n) to c's logprobs. 0, or -1 out of memory. */
int srv_logprobs_add(srv_choice *c, const sd_token_logprob *lp, int32_t n);

/* page.c (generated from runtime/server/chat.html at build time) */
extern const char sd_server_chat_page[];
extern const size_t sd_server_chat_page_len;

#endif /* SD_SERVER_IMPL_H */
