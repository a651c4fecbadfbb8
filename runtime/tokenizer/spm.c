/*
 * SentencePiece (tokenizer.ggml.model = "llama"), matching llama.cpp's
 * llm_tokenizer_spm_session (src/llama-vocab.cpp) on one raw fragment:
 *   1. a " " is prepended when the caller asks (add_space_prefix and the fragment starts
 *      the text or follows a special token), then every ' ' becomes U+2581 "▁";
 *   2. the text is split into "UTF-8 characters" by the lead byte only (unicode.c's
 *      sd_utf8_lead_len, cut at the end of the text), as a doubly-linked list of symbols;
 *   3. every adjacent pair whose concatenation is a token goes into a max-heap keyed by
 *      (token score desc, left symbol index asc) - llama.cpp's std::priority_queue
 *      comparator. Pop: skip if either side was merged away or the sizes changed (stale),
 *      else merge right into left and push the two new pairs;
 *   4. each final symbol is emitted as its token, or else byte by byte as <0xNN> byte
 *      tokens (or the 1-byte text as a token); where neither exists we emit unk (llama.cpp
 *      would throw).
 * llama.cpp's rev_merge map (resegment of a final symbol that is not a token) is omitted:
 * every merged symbol is a token by construction, and an unmerged symbol (one lead-byte
 * chunk) can never equal the text of a pair, because its lead byte would claim the whole
 * pair. So resegment always ends in "token" or "bytes". Cost: O(n log n) in the text
 * length (the heap holds <= 3n entries); text -> id is the vocabulary's hash table.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab_impl.h"

/* "▁" U+2581 */
static const char SPACE_ESC[3] = {'\xe2', '\x96', '\x81'};

typedef struct sym {
    int32_t prev, next;
    uint32_t off, n; /* the escaped text is < 2^31 bytes */
} sym;

typedef struct bigram {
    int32_t left, right;
    float score;
    uint32_t size;
} bigram;

/* a pops before b: higher score, then smaller left index (llama.cpp's comparator). */
static int bg_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct session {
    const sd_vocab *v;
    const char *s;
    sym *syms;
    bigram *heap;
    size_t n_heap, heap_cap;
} session;

static int heap_push(session *ss, bigram x) {
    if (ss->n_heap == ss->heap_cap) {
        size_t cap = ss->heap_cap ? ss->heap_cap * 2 : 64;
        bigram *p = realloc(ss->heap, cap * sizeof *p);
        if (!p) return -1;
        ss->heap = p;
        ss->heap_cap = cap;
    }
    size_t i = ss->n_heap++;
    while (i > 0 && bg_before(&x, &ss->heap[(i - 1) / 2])) {
        ss->heap[i] = ss->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    ss->heap[i] = x;
    return 0;
}

static bigram heap_pop(session *ss) {
    bigram top = ss->heap[0], x = ss->heap[--ss->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= ss->n_heap) break;
        if (c + 1 < ss->n_heap && bg_before(&ss->heap[c + 1], &ss->heap[c])) c++;
        if (!bg_before(&ss->heap[c], &x)) break;
        ss->heap[i] = ss->heap[c];
        i = c;
    }
    if (ss->n_heap) ss->heap[i] = x;
    return top;
}

static int try_add_bigram(session *ss, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    uint32_t size = ss->syms[left].n + ss->syms[right].n;
    int32_t id = vocab_lookup(ss->v, ss->s + ss->syms[left].off, size);
    if (id < 0) return 0;
    bigram b = {left, right, ss->v->score[id], size};
    return heap_push(ss, b);
}

/* Byte-fallback id for byte c (unk if the vocab has no byte token for it). */
static int push_byte(const sd_vocab *v, unsigned char c, ids_buf *out, sd_error *err) {
    int32_t id = v->byte_tok[c];
    if (id < 0) id = v->unk;
    if (id < 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: tokenize: the vocabulary has no byte token <0x%02X> and no unknown "
                         "token",
                         v->path, c);
    if (ids_push(out, id)) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
    return SD_OK;
}

/* Bigram merging on the escaped text s[0..m). */
static int merge(const sd_vocab *v, const char *s, size_t m, ids_buf *out, sd_error *err) {
    if (m == 0) return SD_OK;
    if (m > (size_t)INT32_MAX - 1)
        return sd_errorf(err, SD_ERR_ARG, "tokenize: text of %zu bytes is too long", m);
    session ss = {v, s, NULL, NULL, 0, 0};
    ss.syms = malloc(m * sizeof *ss.syms); /* at most one symbol per byte */
    if (!ss.syms) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
    int rc = SD_OK;

    int32_t ns = 0;
    for (size_t off = 0; off < m;) {
        size_t l = sd_utf8_lead_len((unsigned char)s[off]);
        if (l > m - off) l = m - off;
        ss.syms[ns] = (sym){ns - 1, off + l == m ? -1 : ns + 1, (uint32_t)off, (uint32_t)l};
        off += l;
        ns++;
    }
    for (int32_t i = 1; i < ns; i++)
        if (try_add_bigram(&ss, i - 1, i)) goto oom;

    while (ss.n_heap > 0) {
        bigram b = heap_pop(&ss);
        sym *l = &ss.syms[b.left], *r = &ss.syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) ss.syms[r->next].prev = b.left;
        if (try_add_bigram(&ss, l->prev, b.left) || try_add_bigram(&ss, b.left, l->next)) goto oom;
    }

    for (int32_t i = 0; i != -1; i = ss.syms[i].next) {
        const sym *y = &ss.syms[i];
        int32_t id = vocab_lookup(v, s + y->off, y->n);
        if (id >= 0) {
            if (ids_push(out, id)) goto oom;
            continue;
        }
        for (uint32_t j = 0; j < y->n && rc == SD_OK; j++)
            rc = push_byte(v, (unsigned char)s[y->off + j], out, err);
        if (rc != SD_OK) goto done;
    }
    goto done;
oom:
    rc = sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
done:
    free(ss.syms);
    free(ss.heap);
    return rc;
}

int spm_tokenize(const sd_vocab *v, const char *t, size_t len, int prefix, ids_buf *out,
                 sd_error *err) {
    size_t n_sp = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++)
        n_sp += t[i] == ' ';
    size_t need;
    if (sd_mul_size(n_sp, 2, &need) || sd_add_size(need, len, &need) ||
        sd_add_size(need, prefix ? 1 : 0, &need))
        return sd_errorf(err, SD_ERR_ARG, "tokenize: text too long");
    char *d = malloc(need ? need : 1);
    if (!d) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
    size_t k = 0;
    if (prefix) {
        memcpy(d, SPACE_ESC, 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (t[i] == ' ') {
            memcpy(d + k, SPACE_ESC, 3);
            k += 3;
        } else {
            d[k++] = t[i];
        }
    }
    int rc = merge(v, d, k, out, err);
    free(d);
    return rc;
}
