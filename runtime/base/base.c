#include "runtime/base/sd_base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

const char *sd_status_str(sd_status st) {
    switch (st) {
    case SD_OK:
        return "ok";
    case SD_ERR_IO:
        return "io error";
    case SD_ERR_FORMAT:
        return "format error";
    case SD_ERR_UNSUPPORTED:
        return "unsupported";
    case SD_ERR_OOM:
        return "out of memory";
    case SD_ERR_ARG:
        return "bad argument";
    case SD_ERR_MISMATCH:
        return "mismatch";
    case SD_ERR_CONTEXT:
        return "context full";
    case SD_ERR_CONFIG:
        return "config error";
    case SD_ERR_BUSY:
        return "busy";
    }
    return "unknown status";
}

int sd_errorf(sd_error *err, sd_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return (int)st;
}

int sd_error_prefix(sd_error *err, int rc, const char *fmt, ...) {
    if (!err) return rc;
    char old[SD_ERROR_MSG_MAX], prefix[SD_ERROR_MSG_MAX];
    snprintf(old, sizeof old, "%s", err->msg);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Too long: the end of the old message is cut (the record stays one line). */
    if (snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old) >= (int)sizeof err->msg)
        err->msg[sizeof err->msg - 1] = '\0';
    return rc;
}

void sd_error_clear(sd_error *err) {
    if (err) {
        err->status = SD_OK;
        err->msg[0] = '\0';
    }
}

int sd_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int sd_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}

int sd_buf_append(char **buf, size_t *len, size_t *cap, const void *s, size_t n) {
    size_t need;
    if (sd_add_size(*len, n, &need) || sd_add_size(need, 1, &need)) return -1;
    if (need > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < need) {
            if (c > SIZE_MAX / 2) {
                c = need;
                break;
            }
            c *= 2;
        }
        char *p = realloc(*buf, c);
        if (!p) return -1;
        *buf = p;
        *cap = c;
    }
    if (n) memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

#ifdef SD_CHECKS
void sd_check_failed(const char *file, int line, const char *cond, const char *msg) {
    fprintf(stderr, "specdec internal check failed at %s:%d: %s (%s)\n", file, line, msg, cond);
    abort();
}
#endif

const char *sd_device_name(sd_device d) {
    switch (d) {
    case SD_DEVICE_CPU:
        return "cpu";
    case SD_DEVICE_CUDA:
        return "cuda";
    }
    return "unknown";
}

double sd_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int32_t sd_argmax_checked(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return -1;
        if (x[i] > x[best]) best = i;
    }
    return best;
}

int sd_n_cores(void) {
    /* The cores this process may run on (taskset, cgroup cpusets), not all online ones:
     * more threads than cores makes spin-waiting pool workers fight each other. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *sd_one_line(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    for (; *s && o + 8 < cap; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
        else
            buf[o++] = (char)c;
    }
    if (*s) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}
