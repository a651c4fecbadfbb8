/* srv_send_rest (runtime/server/reply.c): the interim 100 Continue that probes a
 * non-streamed request's connection is written with it, as much as the socket takes at each
 * event, and its rest before the answer. Checked on a loopback TCP pair whose buffers are
 * filled first, so the socket takes nothing until the other end reads: nothing is lost or
 * reordered, a wait runs out when nobody reads, and a reset peer is reported. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/server/server_impl.h"
#include "server_util.h"

typedef struct {
    int tx, rx; /* the sender's and the receiver's ends */
} pair;

/* A connected loopback pair with small buffers (4 KiB asked; the kernel doubles it): the
 * receiver connects (tcp_connect, its window small from the start), the sender is the
 * accepted end. */
static pair make_pair(void) {
    signal(SIGPIPE, SIG_IGN);
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(l, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(l, 1), 0);
    socklen_t al = sizeof a;
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
    const int small = 4096;
    pair p;
    p.rx = tcp_connect(ntohs(a.sin_port), small);
    cr_assert_geq(p.rx, 0, "connect: %s", strerror(errno));
    p.tx = accept(l, NULL, NULL);
    cr_assert_geq(p.tx, 0);
    cr_assert_eq(setsockopt(p.tx, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    close(l);
    return p;
}

/* Fill the sender's and the receiver's buffers with the byte pattern i % 251; returns the
 * bytes written. The socket takes nothing more (EAGAIN) when this returns. */
static size_t fill(int fd) {
    char b[512];
    size_t total = 0;
    for (;;) {
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (char)((total + i) % 251);
        const ssize_t n = send(fd, b, sizeof b, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "send: %s", strerror(errno));
            /* the loopback may move bytes over once more: full only if it stays so */
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, 50) == 0) return total;
            continue;
        }
        total += (size_t)n;
    }
}

typedef struct {
    int fd;
    char *got;
    size_t len, cap;
} reader;

static void *read_all(void *arg) {
    reader *r = arg;
    for (;;) {
        if (r->len == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 1 << 16;
            r->got = realloc(r->got, r->cap);
            if (!r->got) return NULL;
        }
        const ssize_t n = recv(r->fd, r->got + r->len, r->cap - r->len, 0);
        if (n <= 0) return NULL;
        r->len += (size_t)n;
    }
}

static const char k_msg[] = "HTTP/1.1 100 Continue\r\n\r\n";

Test(server_send, rest_waits_for_room_and_keeps_the_order) {
    pair p = make_pair();
    const size_t filled = fill(p.tx);
    cr_assert_gt(filled, 0);
    const size_t len = sizeof k_msg - 1;
    size_t sent = 0;
    /* no room, no wait: some bytes remain (the probe at an event) */
    cr_assert_eq(srv_send_rest(p.tx, k_msg, len, &sent, 0), 1);
    cr_assert_lt(sent, len);
    /* nobody reads: the wait runs out with bytes left */
    cr_assert_eq(srv_send_rest(p.tx, k_msg, len, &sent, 100), 1);
    cr_assert_lt(sent, len);
    /* a reader makes room: the rest goes out, after the filler, in order */
    reader r = {.fd = p.rx};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_all, &r), 0);
    cr_assert_eq(srv_send_rest(p.tx, k_msg, len, &sent, 10000), 0);
    cr_assert_eq(sent, len);
    cr_assert_eq(srv_send_rest(p.tx, k_msg, len, &sent, 0), 0, "nothing left to send");
    shutdown(p.tx, SHUT_WR);
    pthread_join(t, NULL);
    cr_assert_eq(r.len, filled + len);
    for (size_t i = 0; i < filled; i++)
        cr_assert_eq((unsigned char)r.got[i], i % 251, "filler byte %zu", i);
    cr_assert_eq(memcmp(r.got + filled, k_msg, len), 0);
    free(r.got);
    close(p.tx);
    close(p.rx);
}

Test(server_send, a_reset_peer_is_gone) {
    pair p = make_pair();
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    cr_assert_eq(setsockopt(p.rx, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(p.rx); /* a reset */
    for (int i = 0; i < 1000 && srv_peer_state(p.tx) != SRV_PEER_RESET; i++)
        usleep(2000);
    cr_assert_eq(srv_peer_state(p.tx), SRV_PEER_RESET);
    size_t sent = 0;
    cr_assert_eq(srv_send_rest(p.tx, k_msg, sizeof k_msg - 1, &sent, 1000), -1);
    close(p.tx);
}
