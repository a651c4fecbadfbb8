/* runtime/server/reply.c: what every endpoint answers with (a JSON body, an OpenAI-style
 * error record with its message made valid UTF-8), the JSON body parser, the growing text
 * buffer of /metrics, and the peer-reset probe; below every endpoint file, so they call down
 * into it and never into each other's router (server.c). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "runtime/server/server_impl.h"

/* ---- replies ---- */

void srv_json(srv_reply *r, int status, json_t *j) {
    r->status = status;
    r->type = "application/json";
    r->body = j ? json_dumps(j, SRV_JSON_FLAGS) : NULL;
    json_decref(j);
    if (!r->body) {
        r->status = 500;
        r->body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                         "\"param\":null,\"code\":null}}");
    }
    r->len = r->body ? strlen(r->body) : 0;
}

/* Copy src into dst (cap >= 4) as valid UTF-8: each byte that does not start a
 * well-formed sequence (overlong, surrogate, beyond U+10FFFF, cut) becomes U+FFFD; a NUL
 * ends it; the output is cut at a character boundary to fit. */
static void utf8_clean(char *dst, size_t cap, const char *src) {
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)src;
    while (*p) {
        size_t n = 0;
        const unsigned c = p[0];
        if (c < 0x80)
            n = 1;
        else if (c >= 0xc2 && c <= 0xdf)
            n = 2;
        else if (c >= 0xe0 && c <= 0xef)
            n = 3;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 4;
        int ok = n > 0;
        for (size_t i = 1; ok && i < n; i++)
            ok = (p[i] & 0xc0) == 0x80;
        if (ok && n == 3) {
            const unsigned v = (c & 0x0f) << 12 | (p[1] & 0x3f) << 6 | (p[2] & 0x3f);
            ok = v >= 0x800 && !(v >= 0xd800 && v <= 0xdfff);
        } else if (ok && n == 4) {
            const unsigned v = (c & 0x07) << 18 | (p[1] & 0x3f) << 12 | (p[2] & 0x3f) << 6;
            ok = v >= 0x10000 && v <= 0x10ffff;
        }
        const char *piece = ok ? (const char *)p : "\xef\xbf\xbd";
        const size_t len = ok ? n : 3;
        if (o + len + 1 > cap) break;
        memcpy(dst + o, piece, len);
        o += len;
        p += ok ? n : 1;
    }
    dst[o] = '\0';
}

void srv_error(srv_reply *r, int status, const char *type, const char *param, const char *fmt,
               ...) {
    char raw[640], msg[640 * 3];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    utf8_clean(msg, sizeof msg, raw);
    const char *code = r->code;
    json_t *e = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", type, "param",
                          param ? json_string(param) : json_null(), "code",
                          code ? json_string(code) : json_null());
    if (e && r->n_ctx > 0) {
        json_t *o = json_object_get(e, "error");
        json_object_set_new(o, "n_prompt_tokens", json_integer(r->n_prompt_tokens));
        json_object_set_new(o, "n_ctx", json_integer(r->n_ctx));
    }
    srv_json(r, status, e);
}

int srv_peer_state(int fd) {
    if (fd < 0) return SRV_PEER_OPEN;
    /* A reset that comes after the peer's EOF is not reported by recv (the EOF is, first),
     * so the connection's state is read: TCP_CLOSE once reset, CLOSE_WAIT while a
     * half-closed peer still reads. */
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE)
        return SRV_PEER_RESET;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return SRV_PEER_EOF;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return SRV_PEER_RESET;
    return SRV_PEER_OPEN;
}

int srv_send_rest(int fd, const char *buf, size_t len, size_t *sent, int wait_ms) {
    const double t_end = sd_time_ms() + wait_ms;
    while (*sent < len) {
        const ssize_t n = send(fd, buf + *sent, len - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            *sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        const double left = t_end - sd_time_ms();
        if (left <= 0) return 1;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (poll(&pf, 1, (int)left + 1) < 0 && errno != EINTR) return -1;
    }
    return 0;
}

/* ---- request bodies ---- */

json_t *srv_parse_object(const char *body, size_t len, srv_reply *r) {
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        srv_error(r, 400, "invalid_request_error", NULL, "malformed JSON at line %d, column %d: %s",
                  je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        srv_error(r, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        return NULL;
    }
    return o;
}

/* ---- text buffers ---- */

void srv_vmprintf(srv_mbuf *m, const char *fmt, va_list ap0) {
    if (m->oom) return;
    for (;;) {
        va_list ap;
        va_copy(ap, ap0);
        const int n = vsnprintf(m->b ? m->b + m->len : NULL, m->b ? m->cap - m->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            m->oom = 1;
            return;
        }
        if (m->b && m->len + (size_t)n < m->cap) {
            m->len += (size_t)n;
            return;
        }
        size_t cap = m->cap ? m->cap * 2 : 4096;
        while (cap < m->len + (size_t)n + 1)
            cap *= 2;
        char *nb = realloc(m->b, cap);
        if (!nb) {
            m->oom = 1;
            return;
        }
        m->b = nb;
        m->cap = cap;
    }
}

void srv_mprintf(srv_mbuf *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    srv_vmprintf(m, fmt, ap);
    va_end(ap);
}
