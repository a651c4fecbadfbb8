/* runtime/server/server.c: the HTTP daemon (libmicrohttpd, a pool of polling threads),
 * connection deadlines, routing, API keys, CORS, request bodies, the engine loop and the
 * shutdown (see sd_server.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/server/server_impl.h"

/* After the engine is idle at shutdown, how long the answers may take to go out. */
#define SD_SERVER_FLUSH_MS 5000
/* How often the run loop closes connections past their deadline. */
#define SD_SERVER_SWEEP_MS 250
/* A connection whose peer has shut its side (EOF waiting) and whose request has not
 * arrived whole is closed once the EOF has been seen this long: that client can never
 * complete its request. The wait lets the polling thread hand a request that did arrive
 * whole (the EOF behind it) to on_request first. */
#define SD_SERVER_EOF_MS 1000
/* When half of --max-connections or more are open, a connection without a whole request
 * gets at most this long (not timeout_s): silent sockets that fill the slots would
 * otherwise keep every new client in the listen queue for timeout_s. */
#define SD_SERVER_PRESSURE_MS 5000

/* One open connection (MHD_OPTION_NOTIFY_CONNECTION), for the deadline sweep. */
typedef struct srv_track {
    struct srv_track *prev, *next;
    int fd;
    int busy;     /* its request has fully arrived (answered, waiting or sending) */
    double t0;    /* ms: opened, or its previous answer ended */
    int shut;     /* the sweep shut it down */
    double t_eof; /* ms: when the sweep first saw the peer's EOF while not busy, or 0 */
} srv_track;

sd_server_params sd_server_default_params(void) {
    sd_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_body = 1u << 20;
    p.max_connections = 1024;
    p.timeout_s = 60;
    p.http_threads = 4;
    p.n_slots = 1;
    p.n_batch = 512;
    p.enable_thinking = 1;
    p.chat_mode = SD_CHAT_JINJA;
    p.gen = sd_gen_default_params();
    p.shutdown_timeout_s = 30.0;
    return p;
}

static void logf_(const sd_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const sd_server *s, const char *fmt, ...) {
    if (!s->p.log) return;
    char line[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->p.log(s->p.log_user, line);
}

/* ---- routes ---- */

typedef enum route_id {
    R_PAGE,
    R_HEALTH,
    R_MODELS,
    R_METRICS,
    R_PROPS,
    R_COMPLETIONS,
    R_CHAT,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_NATIVE,
    R_SLOTS,
    R_APPLY_TEMPLATE,
    R_INPUT_TOKENS,
    R_INFILL,
    R_SLOT_ACTION,
} route_id;

typedef struct route {
    const char *method, *path;
    route_id id;
    int auth; /* needs the API key when one is set */
} route;

static const route k_routes[] = {
    {"GET", "/", R_PAGE, 0},
    {"GET", "/index.html", R_PAGE, 0},
    {"GET", "/health", R_HEALTH, 0},
    {"GET", "/v1/models", R_MODELS, 1},
    {"GET", "/models", R_MODELS, 1},
    {"GET", "/metrics", R_METRICS, 1},
    {"GET", "/props", R_PROPS, 1},
    {"POST", "/v1/completions", R_COMPLETIONS, 1},
    {"POST", "/completions", R_NATIVE, 1}, /* llama-server's: its own shape */
    {"POST", "/v1/chat/completions", R_CHAT, 1},
    {"POST", "/chat/completions", R_CHAT, 1},
    {"POST", "/tokenize", R_TOKENIZE, 1},
    {"POST", "/detokenize", R_DETOKENIZE, 1},
    /* llama-server's own (native.c) */
    {"POST", "/completion", R_NATIVE, 1},
    {"GET", "/slots", R_SLOTS, 1},
    {"POST", "/apply-template", R_APPLY_TEMPLATE, 1},
    {"POST", "/chat/completions/input_tokens", R_INPUT_TOKENS, 1},
    {"POST", "/infill", R_INFILL, 1},
    {"POST", "/slots/{id}", R_SLOT_ACTION, 1}, /* matched by slot_path */
    {"POST", "/v1/chat/completions/input_tokens", R_INPUT_TOKENS, 1},
};

/* The route of (method, url); NULL with *path_known set when only the method differs.
 * HEAD is GET without the body (libmicrohttpd drops it). */
/* "/slots/N" (N: 1 to 9 digits): N, else -1. */
static int32_t slot_path(const char *url) {
    if (strncmp(url, "/slots/", 7)) return -1;
    const char *d = url + 7;
    size_t n = strspn(d, "0123456789");
    if (n < 1 || n > 9 || d[n]) return -1;
    return (int32_t)atol(d);
}

static const route *find_route(const char *method, const char *url, int *path_known) {
    *path_known = 0;
    if (slot_path(url) >= 0) url = "/slots/{id}";
    const char *m = strcmp(method, "HEAD") ? method : "GET";
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
        if (strcmp(url, k_routes[i].path)) continue;
        *path_known = 1;
        if (!strcmp(m, k_routes[i].method)) return &k_routes[i];
    }
    return NULL;
}

/* Constant-time comparison of a presented key with the server's (length included). */
static int key_equal(const char *given, const char *key) {
    const size_t n = strlen(key), m = given ? strlen(given) : 0;
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)(i < m ? given[i] : 0);
    return diff == 0;
}

/* "Authorization: Bearer KEY" (the scheme in any case) or "X-Api-Key: KEY". */
static int auth_ok(const sd_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *given = NULL;
    if (h && strncasecmp(h, "Bearer", 6) == 0 && (h[6] == ' ' || h[6] == '\t')) {
        given = h + 6;
        while (*given == ' ' || *given == '\t')
            given++;
    }
    if (given && key_equal(given, s->p.api_key)) return 1;
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return x && key_equal(x, s->p.api_key);
}

/* 1 if origin (n bytes) is http(s)://localhost, 127.0.0.1 or [::1], with a port or not
 * (llama-server's "localhost" entry of --cors-origins). */
static int origin_is_local(const char *origin, size_t n) {
    const char *h = origin;
    if (n >= 7 && !strncasecmp(h, "http://", 7))
        h += 7;
    else if (n >= 8 && !strncasecmp(h, "https://", 8))
        h += 8;
    else
        return 0;
    const char *const hosts[3] = {"localhost", "127.0.0.1", "[::1]"};
    for (int i = 0; i < 3; i++) {
        const size_t hl = strlen(hosts[i]);
        if ((size_t)(origin + n - h) < hl || strncasecmp(h, hosts[i], hl)) continue;
        const char *p = h + hl;
        if (p == origin + n) return 1;
        if (*p != ':' || p + 1 == origin + n) return 0;
        for (p++; p < origin + n; p++)
            if (*p < '0' || *p > '9') return 0;
        return 1;
    }
    return 0;
}

/* 1 if origin is one of the comma list of allowed origins (or the list is "*"; an entry
 * "localhost" allows every local origin: origin_is_local). */
static int origin_allowed(const char *list, const char *origin) {
    if (!list || !list[0] || !origin || !origin[0]) return 0;
    const size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && t[-1] == ' ')
            t--;
        const size_t m = (size_t)(t - p);
        if ((m == 1 && *p == '*') || (m == n && strncasecmp(p, origin, n) == 0)) return 1;
        if (m == 9 && !strncasecmp(p, "localhost", 9) && origin_is_local(origin, n)) return 1;
        p = e;
    }
    return 0;
}

/* ---- connections ---- */

typedef struct conn {
    const route *rt;
    char *body;
    size_t len, cap;
    int answered;       /* a reply was queued (early ones: before the body was read) */
    int too_big;        /* the body passed max_body: the rest is read and dropped, then 413 */
    int preflight;      /* OPTIONS on a known path */
    const char *origin; /* the Origin to allow (the request's header), or NULL */
    srv_gen *gen;       /* a generation waiting for its end (r.pending) */
    srv_gen *sgen;      /* a stream's record (a reference: its socket forgotten at close) */
    int32_t slot;       /* R_SLOT_ACTION: the slot of the path */
    int http11;         /* the request is HTTP/1.1 */
} conn;

static srv_track *track_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void track_busy(sd_server *s, struct MHD_Connection *c, int busy) {
    srv_track *t = track_of(c);
    if (!t) return;
    pthread_mutex_lock(&s->conn_mu);
    t->busy = busy;
    t->t_eof = 0;
    if (!busy) t->t0 = sd_time_ms();
    pthread_mutex_unlock(&s->conn_mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    sd_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_track *t = calloc(1, sizeof *t);
        if (!t) return; /* not swept: MHD's idle timeout still applies */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        t->fd = ci ? ci->connect_fd : -1;
        t->t0 = sd_time_ms();
        pthread_mutex_lock(&s->conn_mu);
        t->next = s->conns;
        if (s->conns) s->conns->prev = t;
        s->conns = t;
        pthread_mutex_unlock(&s->conn_mu);
        *socket_context = t;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        srv_track *t = *socket_context;
        pthread_mutex_lock(&s->conn_mu);
        if (t->prev)
            t->prev->next = t->next;
        else
            s->conns = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&s->conn_mu);
        free(t);
        *socket_context = NULL;
    }
}

/* 1 if the peer of socket fd has shut its side (an EOF is waiting), else 0. */
static int peer_eof(int fd) {
    if (fd < 0) return 0;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Close (shutdown: the polling thread then sees the EOF and frees it) every connection
 * whose request has not fully arrived within timeout_s (SD_SERVER_PRESSURE_MS when half
 * the connection slots or more are taken), or whose peer half-closed
 * (shutdown(SHUT_WR)) before its request was whole: libmicrohttpd would hold that one
 * until timeout_s, waiting for bytes that cannot come. */
static void sweep(sd_server *s) {
    const double now = sd_time_ms();
    if (now - s->t_sweep < SD_SERVER_SWEEP_MS) return;
    s->t_sweep = now;
    double limit = s->p.timeout_s * 1e3;
    pthread_mutex_lock(&s->conn_mu);
    int n_open = 0;
    for (const srv_track *t = s->conns; t; t = t->next)
        n_open++;
    if (2 * n_open >= s->p.max_connections && limit > SD_SERVER_PRESSURE_MS)
        limit = SD_SERVER_PRESSURE_MS;
    for (srv_track *t = s->conns; t; t = t->next) {
        if (t->busy || t->shut || t->fd < 0) continue;
        int cut = now - t->t0 > limit;
        if (!cut && peer_eof(t->fd)) {
            if (t->t_eof == 0)
                t->t_eof = now;
            else
                cut = now - t->t_eof >= SD_SERVER_EOF_MS;
        } else if (!cut) {
            t->t_eof = 0;
        }
        if (cut) {
            shutdown(t->fd, SHUT_RDWR);
            t->shut = 1;
        }
    }
    pthread_mutex_unlock(&s->conn_mu);
}

static int conn_fd(struct MHD_Connection *c);

static enum MHD_Result queue_reply(sd_server *s, struct MHD_Connection *c, conn *k, srv_reply *r) {
    struct MHD_Response *resp;
    track_busy(s, c, 1);
    if (r->stream) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, srv_stream_read, r->gen,
                                                 srv_stream_free);
        if (!resp) {
            srv_stream_free(r->gen);
            return MHD_NO;
        }
        srv_gen_ref(r->gen);
        k->sgen = r->gen;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(r->body);
            return MHD_NO;
        }
        if (r->type) MHD_add_response_header(resp, "Content-Type", r->type);
    }
    if (r->retry_after) MHD_add_response_header(resp, "Retry-After", r->retry_after);
    if (r->hdr_name) MHD_add_response_header(resp, r->hdr_name, r->hdr_value);
    if (r->status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    /* A client that half-closed its side (shutdown(SHUT_WR)) sends no further request: the
     * connection closes after this answer, not timeout_s later (a reader that waits for
     * the EOF would wait that long). A request pipelined behind this one and read already
     * goes unanswered then. While the server stops, every connection closes after its
     * answer (the listening socket stays open until the daemon stops: sd_server_run). */
    if (atomic_load(&s->stopping) || peer_eof(conn_fd(c)))
        MHD_add_response_header(resp, "Connection", "close");
    if (k && k->origin) {
        const int any = !strcmp(s->p.cors_origins, "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", any ? "*" : k->origin);
        if (!any) MHD_add_response_header(resp, "Vary", "Origin");
        if (k->preflight) {
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type, X-Api-Key");
            MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        }
    }
    const enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) { /* only answers that go out are counted */
        const int cls = r->status / 100;
        if (cls >= 1 && cls <= 5) atomic_fetch_add(&s->http_by_class[cls], 1);
        atomic_fetch_add(&s->http_total, 1);
    }
    return ret;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void dispatch(sd_server *s, struct MHD_Connection *c, conn *k, srv_reply *r) {
    r->http11 = k->http11;
    switch (k->rt->id) {
    case R_PAGE:
        if (s->p.no_ui) {
            srv_error(r, 404, "invalid_request_error", NULL, "the chat page is off (--no-ui)");
            return;
        }
        r->status = 200;
        r->type = "text/html; charset=utf-8";
        r->body = malloc(sd_server_chat_page_len + 1);
        if (!r->body) {
            srv_error(r, 500, "server_error", NULL, "out of memory");
            return;
        }
        memcpy(r->body, sd_server_chat_page, sd_server_chat_page_len);
        r->len = sd_server_chat_page_len;
        return;
    case R_HEALTH:
        srv_health(s, r);
        return;
    case R_MODELS:
        srv_models(s, r);
        return;
    case R_METRICS:
        srv_metrics(s, r);
        return;
    case R_PROPS:
        srv_props(s, r);
        return;
    case R_COMPLETIONS:
    case R_CHAT:
    case R_NATIVE:
        r->llama_path = strncmp(k->rt->path, "/v1/", 4) != 0;
        srv_generate(s,
                     k->rt->id == R_CHAT     ? SRV_CHAT
                     : k->rt->id == R_NATIVE ? SRV_NATIVE
                                             : SRV_COMPLETIONS,
                     k->body ? k->body : "", k->len, c, conn_fd(c), r);
        return;
    case R_SLOTS:
        srv_slots(s, r);
        return;
    case R_APPLY_TEMPLATE:
        srv_apply_template(s, k->body ? k->body : "", k->len, r);
        return;
    case R_INFILL:
        r->llama_path = 1;
        srv_infill(s, k->body ? k->body : "", k->len, c, conn_fd(c), r);
        return;
    case R_SLOT_ACTION:
        srv_slot_action(s, k->slot, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action"),
                        k->body ? k->body : "", k->len, r);
        return;
    case R_INPUT_TOKENS:
        srv_input_tokens(s, k->body ? k->body : "", k->len, r);
        return;
    case R_TOKENIZE:
        srv_tokenize(s, k->body ? k->body : "", k->len, r);
        return;
    case R_DETOKENIZE:
        srv_detokenize(s, k->body ? k->body : "", k->len, r);
        return;
    }
    srv_error(r, 500, "server_error", NULL, "no handler");
}

static enum MHD_Result count_length_headers(void *cls, enum MHD_ValueKind kind, const char *key,
                                            const char *value) {
    (void)kind;
    (void)value;
    int *n = cls;
    if (key && (!strcasecmp(key, "Content-Length") || !strcasecmp(key, "Transfer-Encoding")))
        (*n)++;
    return MHD_YES;
}

/* The checks on a request's headers (its first callback): 0 to read the body, else an
 * early reply was made in r. */
static int check_head(sd_server *s, struct MHD_Connection *c, conn *k, const char *url,
                      const char *method, const char *version, srv_reply *r) {
    k->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
    if (k->http11 && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")) {
        srv_error(r, 400, "invalid_request_error", NULL, "HTTP/1.1 request without Host");
        return -1;
    }
    /* Two Content-Length headers, or one beside Transfer-Encoding: a body whose length two
     * parsers read differently (a proxy in front may frame it otherwise: smuggling). */
    int n_len = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_length_headers, &n_len);
    if (n_len > 1) {
        srv_error(r, 400, "invalid_request_error", NULL,
                  "the body's length is given twice (Content-Length, Transfer-Encoding)");
        return -1;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin_allowed(s->p.cors_origins, origin)) k->origin = origin;
    int known = 0;
    k->rt = find_route(method, url, &known);
    k->slot = slot_path(url);
    if (!k->rt && known && !strcmp(method, "OPTIONS")) { /* a CORS preflight */
        k->preflight = 1;
        r->status = 200; /* llama-server's (an empty body) */
        r->body = NULL;
        r->len = 0;
        return -1;
    }
    if (!k->rt) {
        if (known)
            srv_error(r, 405, "invalid_request_error", NULL, "%s is not allowed on %s", method,
                      url);
        else
            srv_error(r, 404, "not_found_error", NULL, "no route %s %s", method, url);
        return -1;
    }
    if (k->rt->auth && !auth_ok(s, c)) {
        srv_error(r, 401, "authentication_error", NULL,
                  "invalid or missing API key (Authorization: Bearer KEY, or X-Api-Key: KEY)");
        return -1;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    char *end = NULL;
    const unsigned long long n = cl ? strtoull(cl, &end, 10) : 0;
    if (cl && end && *end == '\0' && n > s->p.max_body) {
        srv_error(r, 413, "invalid_request_error", NULL,
                  "request body of %llu bytes is over the limit of %zu bytes", n, s->p.max_body);
        return -1;
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **ptr) {
    sd_server *s = cls;
    conn *k = *ptr;
    srv_reply r;
    memset(&r, 0, sizeof r);
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        *ptr = k;
        atomic_fetch_add(&s->n_open, 1);
        if (check_head(s, c, k, url, method, version, &r) == 0) return MHD_YES; /* body next */
        k->answered = 1;
        return queue_reply(s, c, k, &r);
    }
    if (k->answered) { /* an early reply: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->too_big || k->len + n > s->p.max_body) {
            k->too_big = 1; /* dropped; answered 413 once the body has been read */
            return MHD_YES;
        }
        return sd_buf_append(&k->body, &k->len, &k->cap, upload, n) ? MHD_NO : MHD_YES;
    }
    if (k->gen) { /* resumed: the generation ended */
        srv_generate_finish(k->gen, &r);
        k->gen = NULL;
        if (r.drop) { /* nothing can follow the bytes already sent intact */
            free(r.body);
            return MHD_NO;
        }
    } else if (k->too_big) {
        srv_error(&r, 413, "invalid_request_error", NULL,
                  "request body is over the limit of %zu bytes", s->p.max_body);
    } else {
        track_busy(s, c, 1);
        dispatch(s, c, k, &r);
        if (r.pending) {
            k->gen = r.gen;
            return MHD_YES; /* suspended (or called again at once if it has ended) */
        }
    }
    k->answered = 1;
    return queue_reply(s, c, k, &r);
}

/* The request's answer was sent (or its connection dropped). */
static void on_completed(void *cls, struct MHD_Connection *c, void **ptr,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    sd_server *s = cls;
    conn *k = *ptr;
    if (!k) return;
    if (k->sgen) { /* before the socket is closed (and its number reused) */
        srv_gen_closed(k->sgen);
        srv_gen_unref(k->sgen);
    }
    if (k->gen) { /* closed while pending (daemon stop): cancel and let go */
        srv_reply r;
        memset(&r, 0, sizeof r);
        srv_generate_finish(k->gen, &r);
        free(r.body);
    }
    free(k->body);
    free(k);
    *ptr = NULL;
    track_busy(s, c, 0);
    atomic_fetch_sub(&s->n_open, 1);
}

/* libmicrohttpd's lines, less those about clients that went away (an ordinary event). */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const sd_server *s = cls;
    if (!s->p.log) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    static const char *const k_quiet[] = {
        "closed by remote", "Connection reset", "Broken pipe",     "reported internal error",
        "Failed to send",   "timed out",        "socket is closed"};
    for (size_t i = 0; i < sizeof k_quiet / sizeof k_quiet[0]; i++)
        if (strstr(line, k_quiet[i])) return;
    s->p.log(s->p.log_user, line);
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* libmicrohttpd's unescaping of the path and the query, except %00: a decoded NUL would
 * cut the path ("/health%00x" served as /health), so it stays as it was written. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *str) {
    (void)cls;
    (void)c;
    char *w = str;
    for (const char *p = str; *p; p++) {
        int hi, lo;
        if (p[0] == '%' && (hi = hexv(p[1])) >= 0 && (lo = hexv(p[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return (size_t)(w - str);
}

/* A listening socket on host:port (SO_REUSEADDR; the first address the name gives); with
 * v6only an IPv6 socket takes no IPv4 connections (so "0.0.0.0,::" binds both). */
static int bind_listen(const char *host, int port, int v6only, int *fd_out, int *port_out, int *v6,
                       sd_error *err) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0 || !res)
        return sd_errorf(err, SD_ERR_ARG, "server: host '%s': %s", host, gai_strerror(g));
    const int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    if (fd < 0) {
        freeaddrinfo(res);
        return sd_errorf(err, SD_ERR_IO, "server: socket: %s", strerror(errno));
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (v6only && res->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        const int e = errno;
        close(fd);
        freeaddrinfo(res);
        return sd_errorf(err, SD_ERR_IO, "server: cannot listen on %s:%d: %s", host, port,
                         strerror(e));
    }
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return SD_OK;
}

/* Split a host list ("127.0.0.1, ::1", "[::1]") into at most SRV_MAX_HOSTS addresses in
 * buf (spaces and an IPv6 literal's brackets dropped), *n_out of them. SD_ERR_ARG: an
 * empty address, too many, or a list longer than buf. */
static int split_hosts(const char *list, char *buf, size_t cap, const char **out, int *n_out,
                       sd_error *err) {
    if (strlen(list) >= cap)
        return sd_errorf(err, SD_ERR_ARG, "server: host list longer than %zu bytes", cap - 1);
    memcpy(buf, list, strlen(list) + 1);
    int n = 0;
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        char *end = p + strlen(p);
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = '\0';
        if (*p == '[' && end > p + 1 && end[-1] == ']') {
            *--end = '\0';
            p++;
        }
        if (!*p)
            return sd_errorf(err, SD_ERR_ARG, "server: host '%s': an empty address in the list",
                             list);
        if (n == SRV_MAX_HOSTS)
            return sd_errorf(err, SD_ERR_ARG, "server: host '%s': more than %d addresses", list,
                             SRV_MAX_HOSTS);
        out[n++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    *n_out = n;
    return SD_OK;
}

int sd_server_init(sd_engine *e, sd_batcher *b, const sd_server_params *p, sd_server **out,
                   sd_error *err) {
    *out = NULL;
    if (!e || !b || !p) return sd_errorf(err, SD_ERR_ARG, "server: NULL engine or params");
    if (p->port < 0 || p->port > 65535)
        return sd_errorf(err, SD_ERR_ARG, "server: port %d, expected 0 .. 65535", p->port);
    if (p->max_body < 16)
        return sd_errorf(err, SD_ERR_ARG, "server: max_body %zu, expected >= 16", p->max_body);
    if (p->max_connections < 1)
        return sd_errorf(err, SD_ERR_ARG, "server: max_connections %d, expected >= 1",
                         p->max_connections);
    if (p->timeout_s < 1)
        return sd_errorf(err, SD_ERR_ARG, "server: timeout %d s, expected >= 1", p->timeout_s);
    if (p->http_threads < 1 || p->http_threads > 256)
        return sd_errorf(err, SD_ERR_ARG, "server: http_threads %d, expected 1 .. 256",
                         p->http_threads);
    if (p->api_key && !p->api_key[0])
        return sd_errorf(err, SD_ERR_ARG,
                         "server: an empty API key (it would let every client in)");
    sd_server *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "server: out of memory");
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_mutex_init(&s->slot_mu, NULL);
    s->e = e;
    s->b = b;
    s->p = *p;
    for (int i = 0; i < SRV_MAX_HOSTS; i++)
        s->listen_fd[i] = -1;
    s->slot_rec = calloc((size_t)(p->n_slots > 0 ? p->n_slots : 1), sizeof *s->slot_rec);
    if (!s->slot_rec) {
        sd_server_free(s);
        return sd_errorf(err, SD_ERR_OOM, "server: out of memory");
    }
    atomic_store(&s->kv_ok, 1);
    s->t_start = sd_time_ms();
    s->t_start_unix = (double)time(NULL);
    const char *name = p->model_name;
    if (!name || !name[0]) {
        const char *path = sd_model_path(sd_engine_target(e));
        const char *slash = strrchr(path, '/');
        name = slash ? slash + 1 : path;
    }
    /* an --alias list: the first in byte order is the id */
    json_t *aliases = name == p->model_name && strchr(name, ',') ? srv_csv_set(name) : NULL;
    if (aliases && json_array_size(aliases) > 0)
        name = json_string_value(json_array_get(aliases, 0));
    s->model_name = strdup(name);
    json_decref(aliases);
    if (!s->model_name) {
        sd_server_free(s);
        return sd_errorf(err, SD_ERR_OOM, "server: out of memory");
    }
    char hbuf[1024];
    const char *hosts[SRV_MAX_HOSTS];
    int n_hosts = 0;
    int rc = split_hosts(p->host ? p->host : "127.0.0.1", hbuf, sizeof hbuf, hosts, &n_hosts, err);
    if (rc) {
        sd_server_free(s);
        return rc;
    }
    /* Every address on one port: the first chooses it when p->port is 0. */
    int v6[SRV_MAX_HOSTS] = {0};
    for (int i = 0; i < n_hosts; i++) {
        rc = bind_listen(hosts[i], i ? s->port : p->port, n_hosts > 1, &s->listen_fd[i], &s->port,
                         &v6[i], err);
        if (rc) {
            sd_server_free(s);
            return rc;
        }
    }
    /* Per address, a pool of polling threads (epoll on Linux) for every connection: an
     * idle or slow socket costs a slot, not a thread; a waiting request is suspended. */
    for (int i = 0; i < n_hosts; i++) {
        unsigned flags =
            MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
        if (v6[i]) flags |= MHD_USE_IPv6;
        s->d[i] = MHD_start_daemon(
            flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd[i], MHD_OPTION_THREAD_POOL_SIZE,
            (unsigned)p->http_threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
            MHD_OPTION_UNESCAPE_CALLBACK, unescape, s, MHD_OPTION_END);
        if (!s->d[i]) {
            sd_server_free(s);
            return sd_errorf(err, SD_ERR_IO, "server: libmicrohttpd did not start on %s port %d",
                             hosts[i], p->port);
        }
        s->listen_fd[i] = -1; /* the daemon closes it */
        s->n_d = i + 1;
    }
    *out = s;
    return SD_OK;
}

int sd_server_port(const sd_server *s) {
    return s->port;
}

void sd_server_stop(sd_server *s) {
    if (s && s->stop < 100) s->stop++;
}

/* Steps until nothing is queued or running, or deadline_ms (sd_time_ms) passes, or a
 * second stop arrives (when watch_stop). */
static void drain(sd_server *s, double deadline_ms, int watch_stop, int *rc_first, sd_error *err) {
    sd_error e = {0};
    while (sd_batcher_busy(s->b) && sd_time_ms() < deadline_ms && !(watch_stop && s->stop > 1)) {
        int rc = sd_batcher_step(s->b, &e);
        if (rc) {
            logf_(s, "engine: %s", e.msg);
            if (!*rc_first) {
                *rc_first = rc;
                if (err) *err = e;
            }
        }
    }
}

int sd_server_run(sd_server *s, sd_error *err) {
    int rc_first = SD_OK, checked = 0;
    sd_error e = {0};
    while (!s->stop) {
        srv_slot_serve(s); /* between steps: an erase asked for */
        if (sd_batcher_busy(s->b)) {
            const int rc = sd_batcher_step(s->b, &e);
            checked = 0;
            if (rc) {
                logf_(s, "engine: %s", e.msg);
                if (!rc_first) {
                    rc_first = rc;
                    if (err) *err = e;
                }
            }
            sweep(s);
            continue;
        }
        sweep(s);
        if (!checked) { /* idle: the pools must balance */
            sd_error ce = {0};
            const int ok = sd_batcher_check(s->b, &ce) == SD_OK;
            atomic_store(&s->kv_ok, ok);
            if (!ok) logf_(s, "kv accounting: %s", ce.msg);
            checked = 1;
        }
        sd_batcher_wait(s->b, 50);
    }
    /* Shutdown: no new generations (answered 503, /health too), a grace period, then cancel
     * the rest. The daemons keep their listening sockets until MHD_stop_daemon: no
     * MHD_quiesce_daemon, which in libmicrohttpd 0.9.75 with a pool of epoll threads removes
     * the listening socket from each worker's epoll set while that worker may remove it
     * itself (it saw the quiesce flag, or reached its share of the connection limit); the
     * loser's epoll_ctl(DEL) fails and libmicrohttpd aborts the process ("Failed to remove
     * listen FD from epoll set", daemon.c:5531 and :4940; test_server_stop.c). */
    atomic_store(&s->stopping, 1);
    logf_(s, "stopping: finishing in-flight requests (up to %.0f s; a second signal cancels them)",
          s->p.shutdown_timeout_s);
    sd_batcher_close(s->b, 0);
    drain(s, sd_time_ms() + s->p.shutdown_timeout_s * 1e3, 1, &rc_first, err);
    if (sd_batcher_busy(s->b)) {
        logf_(s, "stopping: cancelling the requests still running");
        sd_batcher_close(s->b, 1);
        drain(s, 1e300, 0, &rc_first, err);
    }
    /* Every request has its answer, but the connection threads may still be sending
     * the last bytes (a stream's data: [DONE]): stopping the daemon now would cut them.
     * Wait until each answer has gone out (on_completed), for at most SD_SERVER_FLUSH_MS
     * (a client that does not read does not hold the exit longer). */
    const double flush_end = sd_time_ms() + SD_SERVER_FLUSH_MS;
    while (atomic_load(&s->n_open) > 0 && sd_time_ms() < flush_end)
        usleep(10000);
    if (atomic_load(&s->n_open) > 0)
        logf_(s, "stopping: %d answers not sent in %d ms: closing their connections",
              atomic_load(&s->n_open), SD_SERVER_FLUSH_MS);
    for (int i = 0; i < s->n_d; i++) {
        MHD_stop_daemon(s->d[i]);
        s->d[i] = NULL;
    }
    sd_error ce = {0};
    if (sd_batcher_check(s->b, &ce) != SD_OK) logf_(s, "kv accounting: %s", ce.msg);
    logf_(s, "stopped");
    return rc_first;
}

void sd_server_free(sd_server *s) {
    if (!s) return;
    for (int i = 0; i < SRV_MAX_HOSTS; i++) {
        if (s->d[i]) MHD_stop_daemon(s->d[i]);
        if (s->listen_fd[i] >= 0) close(s->listen_fd[i]);
    }
    free(s->model_name);
    pthread_mutex_destroy(&s->conn_mu);
    for (int32_t i = 0; s->slot_rec && i < (s->p.n_slots > 0 ? s->p.n_slots : 1); i++)
        free(s->slot_rec[i].toks);
    free(s->slot_rec);
    pthread_mutex_destroy(&s->slot_mu);
    free(s);
}
