/*
 * tests/server_util.h: the helpers of the `specdec serve` tests (test_server*.c), kept in
 * one place: start a server on 127.0.0.1 with a port it picks (--port 0, read from its
 * first line) in a child that dies with the test, stop it with SIGTERM (exit status
 * returned), requests through curl, and /metrics values.
 *
 * Included once by each test file, after testutil.h and criterion.h; it owns the test's
 * temporary folder g_dir (the file's suite setup makes it with tu_mkdtemp). Every helper is
 * static inline, so a file that uses a few builds without unused-function warnings.
 */
#ifndef SD_TESTS_SERVER_UTIL_H
#define SD_TESTS_SERVER_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/* The test's temporary folder (bodies, answers, server logs). */
static char g_dir[512];

typedef struct srv {
    pid_t pid;
    int port;
    char log[600];
} srv;

/* A blocking TCP connection to 127.0.0.1:port (rcvbuf > 0: that receive buffer, set
 * before connecting so the window is small): the socket, or -1 with errno set. */
static inline int tcp_connect(int port, int rcvbuf) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Run the shell command cmd in a child that dies with this test (a failed assertion ends
 * the test process: its servers and clients must not outlive it); stdout to out_fd
 * (-1: inherited). */
static inline pid_t spawn(const char *cmd, int out_fd, int close_fd) {
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (out_fd >= 0) dup2(out_fd, 1);
        if (close_fd >= 0) close(close_fd);
        if (out_fd >= 0) close(out_fd);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* A file's bytes (NUL-terminated), or NULL. */
static inline char *slurp(const char *path) {
    size_t n = 0;
    return (char *)tu_read_file(path, &n);
}

/* Start `specdec serve ARGS --port 0` (one thread, stderr appended to s->log) and read
 * "listening on http://127.0.0.1:PORT" (at most 60 s). */
static inline void srv_start(srv *s, const char *args) {
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    snprintf(s->log, sizeof s->log, "%s/server-%d.log", g_dir, (int)getpid());
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s serve --host 127.0.0.1 --port 0 -t 1 %s 2>>%s", SD_BINARY,
             args, s->log);
    const pid_t pid = spawn(cmd, pfd[1], pfd[0]);
    close(pfd[1]);
    char line[256] = "";
    size_t n = 0;
    const double t0 = now_s();
    while (n + 1 < sizeof line && !strchr(line, '\n')) {
        struct pollfd pf = {pfd[0], POLLIN, 0};
        const double left = 60.0 - (now_s() - t0);
        cr_assert_gt(left, 0, "the server did not start in 60 s (log %s)", s->log);
        if (poll(&pf, 1, (int)(left * 1e3)) <= 0) continue;
        const ssize_t r = read(pfd[0], line + n, sizeof line - 1 - n);
        if (r <= 0) {
            char *log = slurp(s->log);
            cr_assert_fail("the server exited before listening: %s", log ? log : "(no log)");
        }
        n += (size_t)r;
        line[n] = '\0';
    }
    close(pfd[0]);
    const char *p = strstr(line, "http://127.0.0.1:");
    cr_assert_not_null(p, "first line: %s", line);
    s->port = atoi(p + strlen("http://127.0.0.1:"));
    s->pid = pid;
    cr_assert_gt(s->port, 0);
}

/* SIGTERM and wait at most timeout s (then SIGKILL): the exit status (128 + signal when
 * killed), or -1 when it had to be killed. */
static inline int srv_term(srv *s, double timeout) {
    kill(s->pid, SIGTERM);
    const double t0 = now_s();
    int st = 0;
    for (;;) {
        const pid_t w = waitpid(s->pid, &st, WNOHANG);
        if (w == s->pid) break;
        if (now_s() - t0 > timeout) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            s->pid = 0;
            return -1;
        }
        usleep(20000);
    }
    s->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* SIGTERM and wait (at most timeout s, asserted); the exit status. */
static inline int srv_stop(srv *s, double timeout) {
    const int rc = srv_term(s, timeout);
    cr_assert_neq(rc, -1, "the server did not stop within %g s after SIGTERM", timeout);
    return rc;
}

/* Stop the server and assert it exited with status 0. */
static inline void srv_stop_ok(srv *s) {
    const int rc = srv_stop(s, 60.0);
    cr_assert_eq(rc, 0, "the server's exit status %d (log %s)", rc, s->log);
}

/* An HTTP request through curl. body NULL: none; extra: more curl options (or NULL).
 * Returns the status; *out the body and *hdrs the headers (each may be NULL). */
static inline int http_full(const srv *s, const char *method, const char *path, const char *body,
                            const char *extra, char **out, char **hdrs) {
    static int seq;
    char bf[700], of[700], hf[700], cmd[4096];
    snprintf(bf, sizeof bf, "%s/body-%d", g_dir, seq);
    snprintf(hf, sizeof hf, "%s/hdr-%d", g_dir, seq);
    snprintf(of, sizeof of, "%s/out-%d", g_dir, seq++);
    if (body) cr_assert_eq(tu_write_file(bf, body, strlen(body)), 0);
    snprintf(cmd, sizeof cmd,
             "curl -s -N --max-time 120 -D %s -o %s -w '%%{http_code}' -X %s -H 'Content-Type: "
             "application/json' %s %s%s http://127.0.0.1:%d%s",
             hf, of, method, extra ? extra : "", body ? "--data-binary @" : "", body ? bf : "",
             s->port, path);
    char *o = NULL;
    tu_run(cmd, &o, NULL);
    const int code = o ? atoi(o) : 0;
    free(o);
    if (out) {
        *out = slurp(of);
        if (!*out) *out = strdup("");
    }
    if (hdrs) {
        *hdrs = slurp(hf);
        if (!*hdrs) *hdrs = strdup("");
    }
    return code;
}

/* The same without the headers. */
static inline int http(const srv *s, const char *method, const char *path, const char *body,
                       const char *extra, char **out) {
    return http_full(s, method, path, body, extra, out, NULL);
}

/* The same without extra curl options. */
static inline int http_h(const srv *s, const char *method, const char *path, const char *body,
                         char **out, char **hdrs) {
    return http_full(s, method, path, body, NULL, out, hdrs);
}

/* A request whose status must be want; its body parsed as JSON (asserted). */
static inline json_t *http_json(const srv *s, const char *method, const char *path,
                                const char *body, int want) {
    char *o = NULL;
    const int code = http(s, method, path, body, NULL, &o);
    cr_assert_eq(code, want, "%s %s: status %d, expected %d: %s", method, path, code, want, o);
    json_error_t je;
    json_t *j = json_loads(o, 0, &je);
    cr_assert_not_null(j, "%s %s: not JSON: %s", method, path, o);
    free(o);
    return j;
}

/* The value of the sample "KEY VALUE" in Prometheus text (key: the name with its labels,
 * exactly as written), -1 if absent. */
static inline double metric_in(const char *text, const char *key) {
    const size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, kl) && p[kl] == ' ') return atof(p + kl + 1);
    return -1;
}

/* The value of metric specdec_NAME (-1 if absent). */
static inline double metric(const srv *s, const char *name) {
    char *o = NULL;
    cr_assert_eq(http(s, "GET", "/metrics", NULL, NULL, &o), 200);
    char key[128];
    snprintf(key, sizeof key, "specdec_%s", name);
    const double v = metric_in(o, key);
    free(o);
    return v;
}

/* Wait until metric specdec_NAME reaches at_least (polled every 20 ms); fails the test
 * with what when timeout seconds pass first. */
static inline void await_metric(const srv *s, const char *name, double at_least, double timeout,
                                const char *what) {
    const double t0 = now_s();
    while (metric(s, name) < at_least) {
        cr_assert_lt(now_s() - t0, timeout, "%s (%s stayed below %g)", what, name, at_least);
        usleep(20000);
    }
}

#endif /* SD_TESTS_SERVER_UTIL_H */
