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
#include <stdatomic.h>

#include "runtime/server/sd_server.h"

struct MHD_Connection;

/* Every JSON answer and event: compact, reals with 6 significant digits. */
#define SRV_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(6))

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
} srv_reply;

/* One generation request (completions or chat) between the HTTP thread that owns the
 * connection and the engine thread's callback. Freed when both have let go. */
typedef struct srv_choice {
    char *text; /* the whole text so far (non-streaming answers) */
    size_t len, cap;
    int done, role_sent;
    sd_stop_reason stop;
    sd_gen_stats st;
    sd_token_logprob *lp; /* [n_lp] the tokens' logprobs (non-streaming, logprobs asked) */
    int32_t n_lp, cap_lp;
    size_t text_offset; /* completions' text_offset of the next token (streaming) */
} srv_choice;

typedef struct srv_gen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* the HTTP side, the engine side, and a stream's connection */
    struct sd_server *srv;
    int64_t id;
    int chat, stream, include_usage;
    int logprobs; /* the request asked for logprobs */
    int32_t n_choices, n_done, n_prompt;
    char cmpl_id[48];
    long long created;
    srv_choice ch[SD_MAX_CHOICES];
    char *sse; /* pending server-sent-event bytes: [sse_off, sse_len) not yet sent */
    size_t sse_len, sse_off, sse_cap;
    int oom;                     /* building the output ran out of memory */
    int cancelled;               /* the client is gone: the callback cancels */
    int fd;                      /* the connection's socket (reset checks on each event) */
    struct MHD_Connection *conn; /* the connection, resumed by the callback */
    int suspended;               /* conn is suspended waiting for news (under mu) */
} srv_gen;

struct sd_server {
    sd_engine *e;
    sd_batcher *b;
    sd_server_params p;
    char *model_name;
    struct MHD_Daemon *d;
    int listen_fd;
    int port;
    volatile sig_atomic_t stop;
    atomic_int stopping; /* the run loop is shutting down: generation answers 503 */
    /* Counters for /metrics. */
    atomic_llong http_by_class[6]; /* 1xx .. 5xx (index 1 .. 5) */
    atomic_llong http_total;
    atomic_int kv_ok;  /* the last idle accounting check passed (1) or failed (0) */
    atomic_int n_open; /* requests between their first callback and on_completed */
    double t_start;    /* ms */
    /* Open connections (deadline sweeps): a doubly linked list under conn_mu. */
    pthread_mutex_t conn_mu;
    struct srv_track *conns;
    double t_sweep; /* ms of the last sweep */
};

/* server.c */
/* An OpenAI-style error reply: {"error": {"message", "type", "param", "code"}}; the
 * message's invalid UTF-8 (a quoted path or field) becomes U+FFFD; code is r->code. */
void srv_error(srv_reply *r, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A JSON reply (takes the reference of j). */
void srv_json(srv_reply *r, int status, json_t *j);
/* 1 if the peer of socket fd reset the connection, else 0. An EOF is not a reset: a
 * client that shut its side after sending (shutdown(SHUT_WR)) still reads the answer;
 * one that closed is found when the answer (or a stream's next event) is written. */
int srv_peer_reset(int fd);

/* api.c: POST /v1/completions (chat 0) and /v1/chat/completions (chat 1) on connection
 * c (socket fd).
 * Fills r, or sets r->pending with r->gen: c was suspended until the generation ends
 * (or had ended already); then srv_generate_finish(r->gen, r) makes the answer. */
void srv_generate(sd_server *s, int chat, const char *body, size_t len, struct MHD_Connection *c,
                  int fd, srv_reply *r);
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

/* misc.c */
void srv_models(sd_server *s, srv_reply *r);
void srv_health(sd_server *s, srv_reply *r);
void srv_metrics(sd_server *s, srv_reply *r);
void srv_props(sd_server *s, srv_reply *r);
void srv_tokenize(sd_server *s, const char *body, size_t len, srv_reply *r);
void srv_detokenize(sd_server *s, const char *body, size_t len, srv_reply *r);
/* Parse a body as a JSON object; on failure a 400 reply naming the position. NULL then. */
json_t *srv_parse_object(const char *body, size_t len, srv_reply *r);

/* logprobs.c */
/* The request's logprobs / top_logprobs (chat: bool and 0 .. 20; completions: logprobs
 * 0 .. 20) and logit_bias ({"id": -100 .. 100}, ids below n_vocab) into gp; *bias
 * (malloc'd, the caller frees it once the request is submitted) holds the biases
 * gp->samp points to. 0, or -1 with a 400 naming the field in r. */
int srv_logprobs_parse(json_t *o, int chat, int32_t n_vocab, sd_gen_params *gp,
                       sd_logit_bias **bias, srv_reply *r);
/* The "logprobs" value of a choice (or a stream chunk) for tokens lp[0 .. n): chat
 * {"content": [...], "refusal": null}; completions {tokens, token_logprobs, top_logprobs,
 * text_offset}, the offsets counted from *offset (characters of the text), advanced. */
json_t *srv_logprobs_json(const sd_vocab *v, int chat, const sd_token_logprob *lp, int32_t n,
                          size_t *offset);
/* Append lp[0 .. n) to c's logprobs. 0, or -1 out of memory. */
int srv_logprobs_add(srv_choice *c, const sd_token_logprob *lp, int32_t n);

/* page.c (generated from runtime/server/chat.html at build time) */
extern const char sd_server_chat_page[];
extern const size_t sd_server_chat_page_len;

#endif /* SD_SERVER_IMPL_H */
