/* runtime/server/server.c: the HTTP daemon (libmicrohttpd, one thread per connection),
 * routing, API keys, request bodies, the engine loop and the shutdown (see sd_server.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/server/server_impl.h"

/* After the engine is idle at shutdown, how long the answers may take to go out. */
#define SD_SERVER_FLUSH_MS 5000

sd_server_params sd_server_default_params(void) {
    sd_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_body = 1u << 20;
    p.max_connections = 256;
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

/* ---- replies ---- */

void srv_json(srv_reply *r, int status, json_t *j) {
    r->status = status;
    r->type = "application/json";
    r->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!r->body) {
        r->status = 500;
        r->body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                         "\"param\":null,\"code\":null}}");
    }
    r->len = r->body ? strlen(r->body) : 0;
}

void srv_error(srv_reply *r, int status, const char *type, const char *param, const char *fmt,
               ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", type, "param",
                          param ? json_string(param) : json_null(), "code", json_null());
    srv_json(r, status, e);
}

int srv_peer_gone(int fd) {
    if (fd < 0) return 0;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- routes ---- */

typedef enum route_id {
    R_PAGE,
    R_HEALTH,
    R_MODELS,
    R_METRICS,
    R_COMPLETIONS,
    R_CHAT,
    R_TOKENIZE,
    R_DETOKENIZE,
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
    {"POST", "/v1/completions", R_COMPLETIONS, 1},
    {"POST", "/completions", R_COMPLETIONS, 1},
    {"POST", "/v1/chat/completions", R_CHAT, 1},
    {"POST", "/chat/completions", R_CHAT, 1},
    {"POST", "/tokenize", R_TOKENIZE, 1},
    {"POST", "/detokenize", R_DETOKENIZE, 1},
};

/* The route of (method, url); NULL with *path_known set when only the method differs. */
static const route *find_route(const char *method, const char *url, int *path_known) {
    *path_known = 0;
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
        if (strcmp(url, k_routes[i].path)) continue;
        *path_known = 1;
        if (!strcmp(method, k_routes[i].method)) return &k_routes[i];
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

static int auth_ok(const sd_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key || !s->p.api_key[0]) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *given = NULL;
    if (h && strncmp(h, "Bearer ", 7) == 0) given = h + 7;
    return key_equal(given, s->p.api_key);
}

/* ---- connections ---- */

typedef struct conn {
    const route *rt;
    char *body;
    size_t len, cap;
    int answered; /* a reply was queued (early ones: before the body was read) */
} conn;

static enum MHD_Result queue_reply(sd_server *s, struct MHD_Connection *c, srv_reply *r) {
    struct MHD_Response *resp;
    if (r->stream) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, srv_stream_read, r->gen,
                                                 srv_stream_free);
        if (!resp) {
            srv_gen_unref(r->gen);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(r->body);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", r->type ? r->type : "application/json");
    }
    if (r->retry_after) MHD_add_response_header(resp, "Retry-After", r->retry_after);
    if (r->status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    const enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    const int cls = r->status / 100;
    if (cls >= 1 && cls <= 5) atomic_fetch_add(&s->http_by_class[cls], 1);
    atomic_fetch_add(&s->http_total, 1);
    return ret;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void dispatch(sd_server *s, struct MHD_Connection *c, conn *k, srv_reply *r) {
    switch (k->rt->id) {
    case R_PAGE:
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
    case R_COMPLETIONS:
    case R_CHAT:
        srv_generate(s, k->rt->id == R_CHAT, k->body ? k->body : "", k->len, conn_fd(c), r);
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **ptr) {
    (void)version;
    sd_server *s = cls;
    conn *k = *ptr;
    srv_reply r;
    memset(&r, 0, sizeof r);
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        *ptr = k;
        atomic_fetch_add(&s->n_open, 1);
        int known = 0;
        k->rt = find_route(method, url, &known);
        if (!k->rt) {
            if (known)
                srv_error(&r, 405, "invalid_request_error", NULL, "%s is not allowed on %s", method,
                          url);
            else
                srv_error(&r, 404, "not_found_error", NULL, "no route %s %s", method, url);
        } else if (k->rt->auth && !auth_ok(s, c)) {
            srv_error(&r, 401, "authentication_error", NULL,
                      "invalid or missing API key (Authorization: Bearer KEY)");
        } else {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
            char *end = NULL;
            const unsigned long long n = cl ? strtoull(cl, &end, 10) : 0;
            if (cl && end && *end == '\0' && n > s->p.max_body)
                srv_error(&r, 413, "invalid_request_error", NULL,
                          "request body of %llu bytes is over the limit of %zu bytes", n,
                          s->p.max_body);
            else
                return MHD_YES; /* the body follows */
        }
        k->answered = 1;
        return queue_reply(s, c, &r);
    }
    if (k->answered) { /* an early reply: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->len + n > s->p.max_body) {
            srv_error(&r, 413, "invalid_request_error", NULL,
                      "request body is over the limit of %zu bytes", s->p.max_body);
            k->answered = 1;
            return queue_reply(s, c, &r);
        }
        return sd_buf_append(&k->body, &k->len, &k->cap, upload, n) ? MHD_NO : MHD_YES;
    }
    dispatch(s, c, k, &r);
    k->answered = 1;
    return queue_reply(s, c, &r);
}

/* The request's answer was sent (or its connection dropped). */
static void on_completed(void *cls, struct MHD_Connection *c, void **ptr,
                         enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    sd_server *s = cls;
    conn *k = *ptr;
    if (!k) return;
    free(k->body);
    free(k);
    *ptr = NULL;
    atomic_fetch_sub(&s->n_open, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const sd_server *s = cls;
    if (!s->p.log) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    s->p.log(s->p.log_user, line);
}

/* A listening socket on host:port (SO_REUSEADDR; the first address the name gives). */
static int bind_listen(const char *host, int port, int *fd_out, int *port_out, int *v6,
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
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 128) != 0) {
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
    sd_server *s = calloc(1, sizeof *s);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "server: out of memory");
    s->e = e;
    s->b = b;
    s->p = *p;
    s->listen_fd = -1;
    atomic_store(&s->kv_ok, 1);
    s->t_start = sd_time_ms();
    const char *name = p->model_name;
    if (!name || !name[0]) {
        const char *path = sd_model_path(sd_engine_target(e));
        const char *slash = strrchr(path, '/');
        name = slash ? slash + 1 : path;
    }
    s->model_name = strdup(name);
    if (!s->model_name) {
        free(s);
        return sd_errorf(err, SD_ERR_OOM, "server: out of memory");
    }
    int v6 = 0;
    int rc =
        bind_listen(p->host ? p->host : "127.0.0.1", p->port, &s->listen_fd, &s->port, &v6, err);
    if (rc) {
        sd_server_free(s);
        return rc;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                            mhd_log, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (s->d) s->listen_fd = -1; /* the daemon closes it (or hands it back when quiesced) */
    if (!s->d) {
        sd_server_free(s);
        return sd_errorf(err, SD_ERR_IO, "server: libmicrohttpd did not start on port %d", p->port);
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
            continue;
        }
        if (!checked) { /* idle: the pools must balance */
            sd_error ce = {0};
            const int ok = sd_batcher_check(s->b, &ce) == SD_OK;
            atomic_store(&s->kv_ok, ok);
            if (!ok) logf_(s, "kv accounting: %s", ce.msg);
            checked = 1;
        }
        sd_batcher_wait(s->b, 50);
    }
    /* Shutdown: no new connections or requests, a grace period, then cancel the rest. */
    atomic_store(&s->stopping, 1);
    logf_(s, "stopping: finishing in-flight requests (up to %.0f s; a second signal cancels them)",
          s->p.shutdown_timeout_s);
    const MHD_socket lfd = MHD_quiesce_daemon(s->d);
    if (lfd != MHD_INVALID_SOCKET) {
        close((int)lfd);
        s->listen_fd = -1;
    }
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
    MHD_stop_daemon(s->d);
    s->d = NULL;
    sd_error ce = {0};
    if (sd_batcher_check(s->b, &ce) != SD_OK) logf_(s, "kv accounting: %s", ce.msg);
    logf_(s, "stopped");
    return rc_first;
}

void sd_server_free(sd_server *s) {
    if (!s) return;
    if (s->d) MHD_stop_daemon(s->d);
    if (s->listen_fd >= 0) close(s->listen_fd);
    free(s->model_name);
    free(s);
}
