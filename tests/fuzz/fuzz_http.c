/*
 * libFuzzer target: `specdec serve`'s request handling on raw HTTP bytes. One server (the
 * shipped TinyStories target and draft, 2 sequences of 256 positions, CORS "*", a 1 s
 * request deadline: an input that is an incomplete request is held until it, since the
 * server does not see a half-closed client's EOF before the request is whole) runs in this process
 * on 127.0.0.1 with a port it picks, its engine loop on a thread of its own, for the whole run.
 * Each input is sent as it is on a new connection (the bytes are the request line, headers and
 * body: pipelined requests, chunked bodies, bad framing, NUL bytes all come from the fuzzer), then
 * the client half- closes (shutdown(SHUT_WR)) and reads until the server closes. Checked: no
 * sanitizer report anywhere in the server; the server closes the connection within 8 s (the 1 s
 * deadline and a 256-token generation at most); an answer starts with "HTTP/1." and a status; no
 * answer is a 500 (a server error is a bug on any input: the invalid-UTF-8 error messages of issue
 * 25 answered 500 "out of memory"). Seeds: corpus/http/ (valid requests to every route, and
 * malformed ones).
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/server/sd_server.h"

#define FH_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define FH_DRAFT  SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"

static sd_engine *g_engine;
static sd_batcher *g_batcher;
static sd_server *g_server;
static int g_port;

static void *run_server(void *arg) {
    (void)arg;
    sd_error err = {0};
    (void)sd_server_run(g_server, &err);
    return NULL;
}

static void die(const char *what, const sd_error *err) {
    fprintf(stderr, "fuzz_http: %s: %s\n", what, err ? err->msg : strerror(errno));
    abort();
}

static void start(void) {
    sd_error err = {0};
    sd_engine_params ep = sd_engine_default_params();
    ep.target = FH_TARGET;
    ep.draft = FH_DRAFT;
    ep.n_ctx = 256;
    ep.n_threads = 1;
    ep.models_only = 1;
    if (sd_engine_init(&ep, &g_engine, &err)) die("engine", &err);
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 2;
    bp.n_ctx = sd_engine_n_ctx(g_engine);
    bp.k_max = 8;
    if (sd_batcher_init(g_engine, &bp, &g_batcher, &err)) die("batcher", &err);
    sd_server_params sp = sd_server_default_params();
    sp.host = "127.0.0.1";
    sp.port = 0;
    sp.timeout_s = 1;
    sp.http_threads = 2;
    sp.cors_origins = "*";
    sp.n_slots = 2;
    sp.gen = ep.gen;
    sp.gen.n_predict = 8;
    sp.shutdown_timeout_s = 1;
    if (sd_server_init(g_engine, g_batcher, &sp, &g_server, &err)) die("server", &err);
    g_port = sd_server_port(g_server);
    pthread_t t;
    if (pthread_create(&t, NULL, run_server, NULL)) die("thread", NULL);
    pthread_detach(t);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_server) start();
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket", NULL);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect", NULL);
    /* The server may answer (and close) before it has read everything: a failed send
     * (EPIPE, ECONNRESET) is an ordinary outcome, not a finding. */
    for (size_t off = 0; off < size;) {
        const ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    char head[64];
    size_t n_head = 0;
    const double t0 = now_s();
    for (;;) {
        const double left = 8.0 - (now_s() - t0);
        if (left <= 0) {
            fprintf(stderr, "fuzz_http: the server held the connection for 8 s\n");
            abort();
        }
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, (int)(left * 1e3) + 1) <= 0) continue;
        char buf[4096];
        const ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) break; /* closed (or reset) */
        const size_t take = (size_t)r < sizeof head - n_head ? (size_t)r : sizeof head - n_head;
        memcpy(head + n_head, buf, take);
        n_head += take;
    }
    close(fd);
    if (n_head > 0) {
        if (n_head < 12 || memcmp(head, "HTTP/1.", 7) != 0) {
            fprintf(stderr, "fuzz_http: an answer that is not HTTP: %.*s\n", (int)n_head, head);
            abort();
        }
        if (!memcmp(head + 9, "500", 3)) {
            fprintf(stderr, "fuzz_http: a 500 answer: %.*s\n", (int)n_head, head);
            abort();
        }
    }
    return 0;
}
