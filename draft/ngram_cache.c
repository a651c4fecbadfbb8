/*
 * draft/ngram_cache.c: the persistent lookup cache (format and contract in sd_draft.h).
 * The documents are kept as one token array; the index (ngram_index, shared with the
 * proposer) holds them joined by separators and is rebuilt to fit whenever the documents
 * change (load, add), outside any decode loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/ngram_impl.h"

#define MAGIC    "SDNGRAM"
#define VERSION  1u
#define HEADER   40u
#define MAX_FILE (1u << 30) /* a cache file larger than this is refused */

struct sd_ngram_cache {
    uint64_t fingerprint;
    int32_t n_vocab, n_min, n_max;
    int64_t max_tokens;
    int32_t *doc_len; /* [n_docs] */
    int32_t n_docs;
    int32_t *toks; /* [n_tokens], the documents one after another */
    int64_t n_tokens;
    ngram_index ix;
};

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Index the documents joined by separators, into a fresh index (the old one is kept on
 * failure). */
static int rebuild_index(sd_ngram_cache *c, sd_error *err) {
    ngram_index ix;
    const int64_t cap = c->n_tokens + c->n_docs + 1;
    if (cap > INT32_MAX) return sd_errorf(err, SD_ERR_OOM, "lookup cache: too many tokens");
    int rc = ngram_index_init(&ix, c->n_min, c->n_max, (int32_t)cap, err);
    if (rc) return rc;
    int64_t o = 0;
    for (int32_t d = 0; d < c->n_docs; d++) {
        for (int32_t i = 0; i < c->doc_len[d]; i++)
            ngram_index_append(&ix, c->toks[o + i]);
        ngram_index_append(&ix, -1);
        o += c->doc_len[d];
    }
    ngram_index_free(&c->ix);
    c->ix = ix;
    return SD_OK;
}

int sd_ngram_cache_init(uint64_t fingerprint, int32_t n_vocab, const sd_ngram_params *np,
                        int64_t max_tokens, sd_ngram_cache **out, sd_error *err) {
    *out = NULL;
    sd_ngram_params p = *np;
    p.n_ctx = 1;
    int rc = sd_ngram_check_params(&p, err);
    if (rc) return rc;
    if (n_vocab < 1)
        return sd_errorf(err, SD_ERR_ARG, "lookup cache: n_vocab = %d, expected >= 1", n_vocab);
    if (max_tokens < 0 || max_tokens > INT32_MAX / 2)
        return sd_errorf(err, SD_ERR_ARG, "lookup cache: max_tokens = %lld out of range",
                         (long long)max_tokens);
    sd_ngram_cache *c = calloc(1, sizeof *c);
    if (!c) return sd_errorf(err, SD_ERR_OOM, "lookup cache: out of memory");
    c->fingerprint = fingerprint;
    c->n_vocab = n_vocab;
    c->n_min = p.n_min;
    c->n_max = p.n_max;
    c->max_tokens = max_tokens ? max_tokens : SD_NGRAM_CACHE_TOKENS;
    if ((rc = rebuild_index(c, err))) {
        free(c);
        return rc;
    }
    *out = c;
    return SD_OK;
}

void sd_ngram_cache_free(sd_ngram_cache *c) {
    if (!c) return;
    ngram_index_free(&c->ix);
    free(c->doc_len);
    free(c->toks);
    free(c);
}

int32_t sd_ngram_cache_n_docs(const sd_ngram_cache *c) {
    return c->n_docs;
}
int64_t sd_ngram_cache_n_tokens(const sd_ngram_cache *c) {
    return c->n_tokens;
}
const ngram_index *ngram_cache_index(const sd_ngram_cache *c) {
    return &c->ix;
}

/* Replace the documents by: the newest of the current ones that fit together with
 * toks[0 .. n) (itself cut to its last max_tokens tokens), then toks. All or nothing. */
static int set_docs(sd_ngram_cache *c, const int32_t *toks, int32_t n, sd_error *err) {
    if (n > c->max_tokens) {
        toks += n - c->max_tokens;
        n = (int32_t)c->max_tokens;
    }
    int32_t first = 0; /* first old document kept */
    int64_t kept = c->n_tokens;
    while (first < c->n_docs && kept + n > c->max_tokens)
        kept -= c->doc_len[first++];
    const int32_t n_docs = c->n_docs - first + (n > 0);
    int32_t *dl = malloc(((size_t)n_docs + 1) * sizeof *dl);
    int32_t *tk = malloc(((size_t)(kept + n) + 1) * sizeof *tk);
    if (!dl || !tk) {
        free(dl);
        free(tk);
        return sd_errorf(err, SD_ERR_OOM, "lookup cache: out of memory");
    }
    if (c->n_docs > first) /* (no pointer arithmetic on the NULL of an empty cache) */
        memcpy(dl, c->doc_len + first, (size_t)(c->n_docs - first) * sizeof *dl);
    if (kept > 0) memcpy(tk, c->toks + (c->n_tokens - kept), (size_t)kept * sizeof *tk);
    if (n > 0) {
        dl[n_docs - 1] = n;
        memcpy(tk + kept, toks, (size_t)n * sizeof *tk);
    }
    sd_ngram_cache old = *c;
    c->doc_len = dl;
    c->toks = tk;
    c->n_docs = n_docs;
    c->n_tokens = kept + n;
    int rc = rebuild_index(c, err);
    if (rc) { /* back to the old documents and index */
        free(dl);
        free(tk);
        c->doc_len = old.doc_len;
        c->toks = old.toks;
        c->n_docs = old.n_docs;
        c->n_tokens = old.n_tokens;
        return rc;
    }
    free(old.doc_len);
    free(old.toks);
    return SD_OK;
}

int sd_ngram_cache_add(sd_ngram_cache *c, const int32_t *toks, int32_t n, sd_error *err) {
    if (n < 0 || (n > 0 && !toks))
        return sd_errorf(err, SD_ERR_ARG, "lookup cache: bad document (%d tokens)", n);
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= c->n_vocab)
            return sd_errorf(err, SD_ERR_ARG,
                             "lookup cache: token %d of the document is %d, outside [0, %d)", i,
                             toks[i], c->n_vocab);
    return n > 0 ? set_docs(c, toks, n, err) : SD_OK;
}

/* ---- the file ---- */

static int read_all(const char *path, unsigned char **out, size_t *len, sd_error *err) {
    /* Callers read errno == ENOENT as "absent" (sd_file_open_regular keeps open's). */
    const int fd = sd_file_open_regular(path, err);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        const int e = errno;
        if (fd >= 0) {
            close(fd);
            sd_errorf(err, SD_ERR_IO, "%s: fdopen: %s", path, strerror(e));
        }
        sd_error_prefix(err, SD_ERR_IO, "lookup cache");
        errno = e;
        return SD_ERR_IO;
    }
    struct stat st;
    if (fstat(fileno(f), &st)) {
        fclose(f);
        sd_errorf(err, SD_ERR_IO, "%s: lookup cache: cannot stat", path);
        errno = EINVAL; /* never a stale ENOENT */
        return SD_ERR_IO;
    }
    if ((uint64_t)st.st_size > MAX_FILE) {
        fclose(f);
        return sd_errorf(err, SD_ERR_FORMAT, "%s: lookup cache of %lld bytes is larger than %u",
                         path, (long long)st.st_size, MAX_FILE);
    }
    const size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory reading the lookup cache", path);
    }
    const size_t r = fread(buf, 1, n, f);
    const int bad = ferror(f) || r != n;
    fclose(f);
    if (bad) {
        free(buf);
        sd_errorf(err, SD_ERR_IO, "%s: cannot read the lookup cache", path);
        errno = EIO;
        return SD_ERR_IO;
    }
    *out = buf;
    *len = n;
    return SD_OK;
}

int sd_ngram_cache_load(const char *path, uint64_t fingerprint, int32_t n_vocab,
                        const sd_ngram_params *np, int64_t max_tokens, sd_ngram_cache **out,
                        sd_error *err) {
    *out = NULL;
    unsigned char *b = NULL;
    size_t len = 0;
    int rc = read_all(path, &b, &len, err);
    if (rc) return rc;
    sd_ngram_cache *c = NULL;
    if (len < 8 || memcmp(b, MAGIC, 8) != 0) {
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: not a specdec lookup cache (no \"SDNGRAM\" magic at the start)", path);
        goto done;
    }
    if (len < HEADER + 8) {
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: truncated lookup cache: %zu bytes, the header and checksum alone "
                       "are %u",
                       path, len, HEADER + 8);
        goto done;
    }
    const uint32_t version = get_u32(b + 8), file_vocab = get_u32(b + 12);
    const uint64_t file_fp = get_u64(b + 16), n_tokens = get_u64(b + 32);
    const uint32_t n_docs = get_u32(b + 24);
    if (version != VERSION) {
        rc = sd_errorf(err, SD_ERR_UNSUPPORTED,
                       "%s: lookup cache version %u, this specdec reads version %u", path, version,
                       VERSION);
        goto done;
    }
    if (file_vocab != (uint32_t)n_vocab || file_fp != fingerprint) {
        rc = sd_errorf(err, SD_ERR_MISMATCH,
                       "%s: lookup cache is for another vocabulary (%u ids, fingerprint "
                       "%016llx; this model: %d ids, %016llx)",
                       path, file_vocab, (unsigned long long)file_fp, n_vocab,
                       (unsigned long long)fingerprint);
        goto done;
    }
    /* Expected size: 64-bit exact for any header (n_tokens above 2^40 cannot fit in a
     * file of at most 2^30 bytes, so it is reported without the product). */
    if (n_tokens > (UINT64_C(1) << 40)) {
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: truncated lookup cache: the header claims %llu tokens, found %zu "
                       "bytes",
                       path, (unsigned long long)n_tokens, len);
        goto done;
    }
    const uint64_t want = HEADER + 4ull * n_docs + 4ull * n_tokens + 8;
    if (len < want) {
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: truncated lookup cache: expected %llu bytes, found %zu", path,
                       (unsigned long long)want, len);
        goto done;
    }
    if (len > want) {
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: lookup cache has %zu bytes after its end (expected %llu bytes)", path,
                       len - (size_t)want, (unsigned long long)want);
        goto done;
    }
    if (sd_fnv1a64(SD_FNV1A64_INIT, b, len - 8) != get_u64(b + len - 8)) {
        rc = sd_errorf(err, SD_ERR_FORMAT, "%s: lookup cache is corrupt (checksum mismatch)", path);
        goto done;
    }
    uint64_t sum = 0;
    for (uint32_t d = 0; d < n_docs; d++)
        sum += get_u32(b + HEADER + 4 * d);
    if (sum != n_tokens) {
        rc = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: lookup cache documents hold %llu tokens, the header says %llu", path,
                       (unsigned long long)sum, (unsigned long long)n_tokens);
        goto done;
    }
    const unsigned char *tp = b + HEADER + 4ull * n_docs;
    for (uint64_t i = 0; i < n_tokens; i++) {
        const uint32_t t = get_u32(tp + 4 * i);
        if (t >= (uint32_t)n_vocab) {
            rc = sd_errorf(err, SD_ERR_FORMAT, "%s: lookup cache token %llu is %u, outside [0, %d)",
                           path, (unsigned long long)i, t, n_vocab);
            goto done;
        }
    }
    if ((rc = sd_ngram_cache_init(fingerprint, n_vocab, np, max_tokens, &c, err))) goto done;
    /* The newest documents that fit in max_tokens together (the newest alone cut to its
     * last max_tokens tokens), as adding them one by one would keep, indexed once. */
    {
        uint32_t first = n_docs;
        uint64_t kept = 0, skip = 0; /* skip: tokens dropped from the front of doc `first` */
        while (first > 0) {
            const uint32_t dl = get_u32(b + HEADER + 4 * (first - 1));
            if (kept + dl > (uint64_t)c->max_tokens) {
                if (kept == 0) { /* the newest document alone is too long */
                    skip = dl - (uint64_t)c->max_tokens;
                    kept = (uint64_t)c->max_tokens;
                    first--;
                }
                break;
            }
            kept += dl;
            first--;
        }
        uint32_t nd = 0;
        for (uint32_t d = first; d < n_docs; d++)
            nd += get_u32(b + HEADER + 4 * d) > 0;
        c->doc_len = malloc(((size_t)nd + 1) * sizeof *c->doc_len);
        c->toks = malloc(((size_t)kept + 1) * sizeof *c->toks);
        if (!c->doc_len || !c->toks) {
            rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory loading the lookup cache", path);
            goto done;
        }
        const unsigned char *src = tp + 4 * (n_tokens - kept);
        for (uint64_t i = 0; i < kept; i++)
            c->toks[i] = (int32_t)get_u32(src + 4 * i);
        nd = 0;
        for (uint32_t d = first; d < n_docs; d++) {
            uint64_t dl = get_u32(b + HEADER + 4 * d);
            if (d == first) dl -= skip;
            if (dl > 0) c->doc_len[nd++] = (int32_t)dl;
        }
        c->n_docs = (int32_t)nd;
        c->n_tokens = (int64_t)kept;
        rc = rebuild_index(c, err);
    }
    if (rc) sd_error_prefix(err, rc, "%s", path);
done:
    free(b);
    if (rc) {
        sd_ngram_cache_free(c);
        return rc;
    }
    *out = c;
    return SD_OK;
}

int sd_ngram_cache_save(const sd_ngram_cache *c, const char *path, sd_error *err) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return sd_errorf(err, SD_ERR_ARG,
                         "%s: not a regular file: the lookup cache is written only to one", path);
    const size_t len = HEADER + 4 * (size_t)c->n_docs + 4 * (size_t)c->n_tokens + 8;
    unsigned char *b = malloc(len);
    if (!b) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory writing the lookup cache", path);
    memset(b, 0, HEADER);
    memcpy(b, MAGIC, 8); /* with its NUL */
    put_u32(b + 8, VERSION);
    put_u32(b + 12, (uint32_t)c->n_vocab);
    put_u64(b + 16, c->fingerprint);
    put_u32(b + 24, (uint32_t)c->n_docs);
    put_u64(b + 32, (uint64_t)c->n_tokens);
    for (int32_t d = 0; d < c->n_docs; d++)
        put_u32(b + HEADER + 4 * (size_t)d, (uint32_t)c->doc_len[d]);
    unsigned char *tp = b + HEADER + 4 * (size_t)c->n_docs;
    for (int64_t i = 0; i < c->n_tokens; i++)
        put_u32(tp + 4 * (size_t)i, (uint32_t)c->toks[i]);
    put_u64(b + len - 8, sd_fnv1a64(SD_FNV1A64_INIT, b, len - 8));

    const int rc = sd_file_write_atomic(path, b, len, err);
    free(b);
    if (rc) sd_error_prefix(err, rc, "cannot write the lookup cache");
    return rc;
}

int sd_proposer_ngram_set_cache(sd_proposer *p, const sd_ngram_cache *c, sd_error *err) {
    if (ngram_proposer_set_cache(p, c ? ngram_cache_index(c) : NULL))
        return sd_errorf(err, SD_ERR_ARG,
                         "lookup cache: not an n-gram proposer, or its n-gram sizes differ from "
                         "the cache's");
    return SD_OK;
}
