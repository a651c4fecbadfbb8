/* draft/head.c: the vocabulary fingerprint of the drafters' files, and the trimmed
 * head's frequency table (see sd_draft.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/ngram_impl.h"

#define HEAD_MAGIC   "SDHEAD\0\0"
#define HEAD_VERSION 1u
#define HEAD_HEADER  32u
#define HEAD_MAX     (1u << 26) /* a head file larger than this is refused */

uint64_t sd_draft_vocab_fingerprint(const sd_vocab *v) {
    const int32_t n = sd_vocab_n_tokens(v);
    const unsigned char size[4] = {(unsigned char)n, (unsigned char)(n >> 8),
                                   (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
    uint64_t h = sd_fnv1a64(SD_FNV1A64_INIT, size, 4);
    for (int32_t id = 0; id < n; id++) {
        const char *t = sd_vocab_token_text(v, id);
        t = t ? t : "";
        h = sd_fnv1a64(h, t, strlen(t) + 1); /* with its NUL: "a","bc" != "ab","c" */
    }
    return h;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* The whole regular file path (opened without blocking: a FIFO is refused, not waited
 * on) into a malloc'd buffer. */
static int read_file(const char *path, unsigned char **out, size_t *len, sd_error *err) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return sd_errorf(err, SD_ERR_IO, "%s: cannot open draft head: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return sd_errorf(err, SD_ERR_IO, "%s: draft head is not a regular file", path);
    }
    if ((uint64_t)st.st_size > HEAD_MAX) {
        close(fd);
        return sd_errorf(err, SD_ERR_FORMAT, "%s: draft head of %lld bytes is larger than %u", path,
                         (long long)st.st_size, HEAD_MAX);
    }
    const size_t n = (size_t)st.st_size;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory reading the draft head", path);
    }
    size_t got = 0;
    while (got < n) {
        const ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(b);
        return sd_errorf(err, SD_ERR_IO, "%s: cannot read the draft head", path);
    }
    *out = b;
    *len = n;
    return SD_OK;
}

int sd_draft_head_load(const char *path, const sd_vocab *v, int32_t n_max, int32_t **ids,
                       int32_t *n, sd_error *err) {
    *ids = NULL;
    *n = 0;
    unsigned char *b = NULL;
    size_t len = 0;
    int rc = read_file(path, &b, &len, err);
    if (rc) return rc;
    const int32_t n_vocab = sd_vocab_n_tokens(v);
    int32_t *out = NULL;
    uint8_t *seen = NULL;
    if (len < HEAD_HEADER + 8 || memcmp(b, HEAD_MAGIC, 8)) {
        rc = len >= 8 && memcmp(b, HEAD_MAGIC, 8)
                 ? sd_errorf(err, SD_ERR_FORMAT, "%s: not a draft head file (bad magic)", path)
                 : sd_errorf(err, SD_ERR_FORMAT,
                             "%s: truncated draft head: %zu bytes, expected at least %u", path, len,
                             HEAD_HEADER + 8);
        goto done;
    }
    const uint32_t version = get_u32(b + 8), file_vocab = get_u32(b + 12);
    const uint64_t file_fp = get_u64(b + 16);
    const uint32_t n_ids = get_u32(b + 24);
    if (version != HEAD_VERSION) {
        rc = sd_errorf(err, SD_ERR_UNSUPPORTED,
                       "%s: draft head version %u, this specdec reads version %u", path, version,
                       HEAD_VERSION);
        goto done;
    }
    const uint64_t fp = sd_draft_vocab_fingerprint(v);
    if (file_vocab != (uint32_t)n_vocab || file_fp != fp) {
        rc = sd_errorf(err, SD_ERR_MISMATCH,
                       "%s: draft head is for another vocabulary (%u ids, fingerprint %016llx; "
                       "this model: %d ids, %016llx)",
                       path, file_vocab, (unsigned long long)file_fp, n_vocab,
                       (unsigned long long)fp);
        goto done;
    }
    const uint64_t want = HEAD_HEADER + 4ull * n_ids + 8;
    if (len != want) {
        rc = sd_errorf(err, SD_ERR_FORMAT, "%s: draft head of %zu bytes, expected %llu for %u ids",
                       path, len, (unsigned long long)want, n_ids);
        goto done;
    }
    if (sd_fnv1a64(SD_FNV1A64_INIT, b, len - 8) != get_u64(b + len - 8)) {
        rc = sd_errorf(err, SD_ERR_FORMAT, "%s: draft head is corrupt (checksum mismatch)", path);
        goto done;
    }
    if (n_max > 0 && (uint32_t)n_max > n_ids) {
        rc = sd_errorf(err, SD_ERR_ARG, "%s: draft head of %d ids asked, the file has %u", path,
                       n_max, n_ids);
        goto done;
    }
    const int32_t m = n_max > 0 ? n_max : (int32_t)n_ids;
    out = malloc((size_t)(m ? m : 1) * sizeof *out);
    seen = calloc((size_t)n_vocab, 1);
    if (!out || !seen) {
        rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory reading the draft head", path);
        goto done;
    }
    for (uint32_t j = 0; j < n_ids; j++) { /* every id is checked, also past n_max */
        const uint32_t id = get_u32(b + HEAD_HEADER + 4 * j);
        if (id >= (uint32_t)n_vocab || seen[id]) {
            rc = sd_errorf(err, SD_ERR_FORMAT, "%s: draft head id %u at index %u %s", path, id, j,
                           id >= (uint32_t)n_vocab ? "is outside the vocabulary" : "is repeated");
            goto done;
        }
        seen[id] = 1;
        if ((int32_t)j < m) out[j] = (int32_t)id;
    }
    *ids = out;
    *n = m;
    out = NULL;
done:
    free(out);
    free(seen);
    free(b);
    return rc;
}
