/*
 * tests/test_server_stop.c: `specdec serve`'s shutdown under connection pressure.
 *
 * SIGTERM while every connection slot is taken and clients keep connecting (each request on
 * a new connection, so the polling threads keep reaching their share of the limit and
 * taking the listening socket out of their set and back): the server exits 0 every round and
 * its log holds no libmicrohttpd fatal error. (The shutdown used to call
 * MHD_quiesce_daemon, which with libmicrohttpd's epoll threads raced a worker for that
 * socket and aborted the process, "Failed to remove listen FD from epoll set", about once in
 * ten soaks.) And after SIGTERM, while a stream in flight goes on, a new request is answered
 * 503 and its connection closed; a second SIGTERM cancels the stream, which still ends with
 * [DONE].
 *
 * Asserted on events (answers counted, a 503, the stream's end), never on how
 * far a thread got in wall-clock time; waits are bounded only so that a fault fails.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_util.h"
#include "testutil.h"

#define TS_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(server_stop, .init = setup, .fini = teardown, .timeout = 600);

/* The churning clients: each sends GET /health on a new connection (Connection: close) and
 * reads the answer, until stop is set or the server answers 503 (it is stopping). Counts
 * the answers that began with a 200 status line. No assertions here (Criterion asserts on
 * the test's thread only). */
typedef struct churn {
    int port;
    atomic_int stop;
    atomic_int n_ok;
} churn;

static void *churn_client(void *arg) {
    churn *c = arg;
    static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    while (!atomic_load(&c->stop)) {
        const int fd = tcp_connect(c->port, 0);
        if (fd < 0) {
            usleep(5000); /* refused: the server is stopping */
            continue;
        }
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
            char b[512];
            size_t n = 0;
            for (;;) { /* until the server closes (at most 10 s without a byte) */
                struct pollfd pf = {fd, POLLIN, 0};
                if (poll(&pf, 1, 10000) <= 0) break;
                const ssize_t r = recv(fd, b + n, sizeof b - 1 - n, 0);
                if (r <= 0) break;
                n += (size_t)r;
                if (n == sizeof b - 1) n = 0; /* only the status line matters */
            }
            b[n] = '\0';
            if (!strncmp(b, "HTTP/1.1 200", 12)) atomic_fetch_add(&c->n_ok, 1);
            if (!strncmp(b, "HTTP/1.1 503", 12)) { /* stopping: this client is done */
                close(fd);
                break;
            }
        }
        close(fd);
    }
    return NULL;
}

/* Rounds of: a server with 16 connection slots over 16 polling threads (one each: every
 * accepted connection puts its thread at its limit, every close takes it back), 32 clients
 * connecting without pause (the slots full, the rest in the listen queue), SIGTERM once 48
 * answers have come. Each round must end with exit 0 and a log without a libmicrohttpd
 * fatal error. With the quiesce (and the listening socket closed right after it), 5 runs
 * of this test aborted at rounds 3, 4, 26, 2 and 31 ("Failed to remove listen FD from epoll
 * set", daemon.c:5531 and :4940), so 60 rounds catch it. */
Test(server_stop, sigterm_at_the_connection_limit_exits_cleanly) {
    enum { ROUNDS = 60, CLIENTS = 32, ANSWERS = 48 };
    for (int round = 0; round < ROUNDS; round++) {
        srv s;
        srv_start(&s, "-m " TS_TARGET " --max-connections 16 --threads-http 16 --timeout 10");
        churn c;
        c.port = s.port;
        atomic_init(&c.stop, 0);
        atomic_init(&c.n_ok, 0);
        pthread_t th[CLIENTS];
        for (int i = 0; i < CLIENTS; i++)
            cr_assert_eq(pthread_create(&th[i], NULL, churn_client, &c), 0);
        const double t0 = now_s();
        while (atomic_load(&c.n_ok) < ANSWERS) {
            if (now_s() - t0 > 120) break; /* asserted below, after the threads are joined */
            usleep(5000);
        }
        const int answered = atomic_load(&c.n_ok);
        const int rc = srv_term(&s, 60);
        atomic_store(&c.stop, 1);
        for (int i = 0; i < CLIENTS; i++)
            pthread_join(th[i], NULL);
        char *log = slurp(s.log);
        cr_assert_geq(answered, ANSWERS, "round %d: %d answers in 120 s (log %s)", round, answered,
                      s.log);
        cr_assert_eq(rc, 0, "round %d: exit status %d after SIGTERM (log: %s)", round, rc,
                     log ? log : "(none)");
        cr_assert_null(strstr(log ? log : "", "Fatal error"), "round %d: %s", round, log);
        free(log);
        unlink(s.log); /* the next round's server appends to the same name */
    }
}

/* After SIGTERM, while a stream is still generating (the shutdown's grace), a new request
 * is answered 503 (a generation and /health alike: a load balancer takes the server out)
 * with Connection: close, and its connection is closed after the answer. A second SIGTERM
 * cancels the stream, which ends with finish_reason "abort" and [DONE]. */
Test(server_stop, sigterm_answers_503_while_draining) {
    char model[600];
    tu_path(model, sizeof model, g_dir, "slow.gguf");
    tu_llama_spec sp = tu_llama_default_spec();
    sp.n_embd = 768; /* ~40 MB of Q8_0: some hundred tokens a second on one thread */
    sp.n_layer = 6;
    sp.n_head = 12;
    sp.n_head_kv = 4;
    sp.n_ff = 2048;
    sp.n_ctx = 4096;
    sp.wtype = SD_TYPE_Q8_0;
    cr_assert_eq(tu_make_llama(model, &sp), 0);
    srv s;
    char args[1024];
    snprintf(args, sizeof args, "-m %s -np 1 --shutdown-timeout 600", model);
    srv_start(&s, args);
    char of[600], cmd[2048];
    snprintf(of, sizeof of, "%s/drain.sse", g_dir);
    snprintf(cmd, sizeof cmd,
             "exec curl -s -N -o %s -H 'Content-Type: application/json' --data-binary "
             "'{\"prompt\":\"t5 t6\",\"max_tokens\":3000,\"ignore_eos\":true,\"stream\":true}' "
             "http://127.0.0.1:%d/v1/completions",
             of, s.port);
    const pid_t client = spawn(cmd, -1, -1);
    const double t0 = now_s();
    struct stat st;
    while (stat(of, &st) != 0 || st.st_size < 200) { /* the stream is under way */
        cr_assert_lt(now_s() - t0, 120.0, "no stream data after 120 s");
        usleep(20000);
    }
    kill(s.pid, SIGTERM);
    /* The server stops between two steps of the stream's generation; a request sent
     * before that may still be answered 200, so the first 503 is awaited. */
    static const char *const reqs[2] = {
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 30\r\n\r\n{\"prompt\":\"t5\",\"max_tokens\":4}",
    };
    int got[2] = {0, 0};
    const double t1 = now_s();
    for (int i = 0; i < 2; i++) {
        while (!got[i] && now_s() - t1 < 60) {
            const int fd = tcp_connect(s.port, 0);
            cr_assert_geq(fd, 0, "connect while draining: %s", strerror(errno));
            cr_assert_eq(send(fd, reqs[i], strlen(reqs[i]), MSG_NOSIGNAL),
                         (ssize_t)strlen(reqs[i]));
            char b[4096];
            size_t n = 0;
            int closed = 0;
            for (;;) { /* until the server closes (at most 30 s without a byte) */
                struct pollfd pf = {fd, POLLIN, 0};
                if (poll(&pf, 1, 30000) <= 0) break;
                const ssize_t r = recv(fd, b + n, sizeof b - 1 - n, 0);
                if (r <= 0) {
                    closed = 1;
                    break;
                }
                n += (size_t)r;
                b[n] = '\0';
                if (n == sizeof b - 1) break;
                /* a 200 came before the stop (a kept-alive connection): done at its body's end */
                const char *h = strstr(b, "\r\n\r\n"), *cl = strcasestr(b, "Content-Length:");
                if (!strncmp(b, "HTTP/1.1 200", 12) && h && cl &&
                    (size_t)(b + n - (h + 4)) >= (size_t)atol(cl + 15))
                    break;
            }
            b[n] = '\0';
            close(fd);
            if (!strncmp(b, "HTTP/1.1 503", 12)) {
                got[i] = 1;
                cr_expect(closed, "request %d: the connection stayed open after the 503", i);
                cr_expect_not_null(strcasestr(b, "Connection: close"), "request %d: %s", i, b);
            } else {
                cr_assert(!strncmp(b, "HTTP/1.1 200", 12), "request %d while draining: %.300s", i,
                          b);
                usleep(10000);
            }
        }
    }
    char *partial = slurp(of);
    const int ended = partial && strstr(partial, "[DONE]") != NULL;
    free(partial);
    int wst = 0;
    const int alive = waitpid(s.pid, &wst, WNOHANG) == 0;
    if (!alive) {
        s.pid = 0;
        cr_assert_fail("the server exited before the stream ended (status %d)", wst);
    }
    cr_expect(got[0] && got[1], "no 503 while draining (/health %d, completion %d)", got[0],
              got[1]);
    cr_expect(!ended, "the stream had ended before the check");
    /* A second signal cancels the stream; the server exits 0. */
    const int rc = srv_stop(&s, 120);
    cr_expect_eq(rc, 0, "exit status %d", rc);
    waitpid(client, &wst, 0);
    char *o = slurp(of);
    cr_assert_not_null(o);
    cr_expect_not_null(strstr(o, "\"finish_reason\":\"abort\""), "the cut stream: %.300s", o);
    cr_expect_not_null(strstr(o, "data: [DONE]"), "the cut stream did not end with [DONE]");
    free(o);
}
