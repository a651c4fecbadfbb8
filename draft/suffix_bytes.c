/*
 * draft/suffix_bytes.c: the suffix proposer's byte-level matcher (suffix_impl.h). Where
 * the same text was tokenized differently (an edit boundary, a code fence: `:\n\n` + `def`
 * in the prompt, `\n` + `def` in the answer), the token-level match restarts short though
 * the bytes still match; this finds, among the text's token boundaries, the one whose
 * preceding bytes share the longest suffix with the text's bytes, so the proposer can draft
 * the tokens that followed that boundary, aligned to the current one.
 *
 * The text's bytes are the tokens' pieces concatenated (the target vocabulary's bytes,
 * sd_grammar_vocab). The boundary before token j (j >= 1) is the byte position end[j - 1];
 * each is filed under a hash of the SX_BYTES_KEY bytes before it, in a chain per bucket,
 * newest first (so the removal of the newest boundaries on a rollback is a pop at the
 * bucket's head). A match compares the bytes before each boundary of the current end's
 * bucket with the bytes before the end, backwards, at most SX_BYTES_MAX bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "draft/suffix_impl.h"

#define SX_BYTES_KEY     4 /* the bytes a boundary is filed under */
#define SX_BYTES_PER_TOK 8 /* byte capacity per token of capacity */
#define SX_BYTES_BUCKETS 4096

struct sx_bytes {
    const sd_grammar_vocab *tv; /* not owned */
    int32_t tok_cap, n_tok;
    int32_t byte_cap, n_bytes;
    int full;         /* a token did not fit (or a negative id): no more are indexed */
    unsigned char *b; /* [byte_cap] */
    int32_t *end;     /* [tok_cap] byte position after token i */
    int32_t *next;    /* [tok_cap] the boundary before token j: next in its bucket, -1 */
    int32_t *head;    /* [SX_BYTES_BUCKETS] newest boundary of the bucket, -1 */
};

static uint32_t key_hash(const unsigned char *p) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < SX_BYTES_KEY; i++)
        h = (h ^ p[i]) * 16777619u;
    return h % SX_BYTES_BUCKETS;
}

/* The boundary before token j (j >= 1) is filed when at least SX_BYTES_KEY bytes precede it. */
static int filed(const sx_bytes *x, int32_t j) {
    return j >= 1 && x->end[j - 1] >= SX_BYTES_KEY;
}

int sx_bytes_init(const sd_grammar_vocab *tv, int32_t tok_cap, sx_bytes **out, sd_error *err) {
    *out = NULL;
    if (!tv || tok_cap < 1 || tok_cap > INT32_MAX / SX_BYTES_PER_TOK)
        return sd_errorf(err, SD_ERR_ARG, "suffix bytes: capacity %d, expected 1 .. %d", tok_cap,
                         INT32_MAX / SX_BYTES_PER_TOK);
    sx_bytes *x = calloc(1, sizeof *x);
    if (!x) return sd_errorf(err, SD_ERR_OOM, "suffix bytes: out of memory");
    x->tv = tv;
    x->tok_cap = tok_cap;
    x->byte_cap = tok_cap * SX_BYTES_PER_TOK;
    x->b = malloc((size_t)x->byte_cap);
    x->end = malloc((size_t)tok_cap * sizeof *x->end);
    x->next = malloc((size_t)tok_cap * sizeof *x->next);
    x->head = malloc(SX_BYTES_BUCKETS * sizeof *x->head);
    if (!x->b || !x->end || !x->next || !x->head) {
        sx_bytes_free(x);
        return sd_errorf(err, SD_ERR_OOM, "suffix bytes: out of memory for %d tokens", tok_cap);
    }
    sx_bytes_truncate(x, 0);
    *out = x;
    return SD_OK;
}

void sx_bytes_free(sx_bytes *x) {
    if (!x) return;
    free(x->b);
    free(x->end);
    free(x->next);
    free(x->head);
    free(x);
}

int32_t sx_bytes_n_tokens(const sx_bytes *x) {
    return x->n_tok;
}

void sx_bytes_truncate(sx_bytes *x, int32_t n_keep) {
    if (n_keep <= 0) {
        memset(x->head, 0xff, SX_BYTES_BUCKETS * sizeof *x->head);
        x->n_tok = 0;
        x->n_bytes = 0;
        x->full = 0;
        return;
    }
    if (n_keep >= x->n_tok) return;
    for (int32_t j = x->n_tok - 1; j >= n_keep; j--) /* newest first: each heads its bucket */
        if (filed(x, j)) x->head[key_hash(x->b + x->end[j - 1] - SX_BYTES_KEY)] = x->next[j];
    x->n_tok = n_keep;
    x->n_bytes = x->end[n_keep - 1];
    x->full = 0;
}

int sx_bytes_append(sx_bytes *x, int32_t tok) {
    size_t len = 0;
    const char *p = x->full || tok < 0 ? NULL : sd_grammar_vocab_piece(x->tv, tok, &len);
    unsigned char mark[5];
    if (!x->full && tok >= 0 && (!p || len == 0)) { /* a control token: 0xff and its id */
        mark[0] = 0xff;
        for (int i = 0; i < 4; i++)
            mark[1 + i] = (unsigned char)((uint32_t)tok >> (8 * i));
        p = (const char *)mark;
        len = sizeof mark;
    }
    if (!p || x->n_tok >= x->tok_cap || len > (size_t)(x->byte_cap - x->n_bytes)) {
        x->full = 1; /* the bytes after it would not be the text's */
        return -1;
    }
    const int32_t j = x->n_tok;
    if (filed(x, j)) {
        const uint32_t h = key_hash(x->b + x->end[j - 1] - SX_BYTES_KEY);
        x->next[j] = x->head[h];
        x->head[h] = j;
    }
    memcpy(x->b + x->n_bytes, p, len);
    x->n_bytes += (int32_t)len;
    x->end[j] = x->n_bytes;
    x->n_tok++;
    return 0;
}

/* The common suffix of b[0 .. p) and b[0 .. e), at most max bytes. */
static int32_t common_suffix(const unsigned char *b, int32_t p, int32_t e, int32_t max) {
    int32_t l = 0;
    while (l < max && l < p && b[p - 1 - l] == b[e - 1 - l])
        l++;
    return l;
}

int32_t sx_bytes_match(const sx_bytes *x, int32_t min_bytes, int32_t *len) {
    *len = 0;
    const int32_t e = x->n_bytes;
    if (x->full || x->n_tok < 2 || e < SX_BYTES_KEY || min_bytes > SX_BYTES_MAX) return -1;
    if (min_bytes < SX_BYTES_KEY) min_bytes = SX_BYTES_KEY;
    int32_t best = -1, best_len = min_bytes - 1;
    for (int32_t j = x->head[key_hash(x->b + e - SX_BYTES_KEY)]; j >= 0; j = x->next[j]) {
        const int32_t l = common_suffix(x->b, x->end[j - 1], e, SX_BYTES_MAX);
        if (l > best_len) { /* newest first: a tie keeps the more recent */
            best = j;
            best_len = l;
            if (l == SX_BYTES_MAX) break;
        }
    }
    if (best >= 0) *len = best_len;
    return best;
}

int32_t sx_bytes_tokens_within(const sx_bytes *x, int32_t n_bytes) {
    const int32_t from = x->n_bytes - n_bytes;
    int32_t i = x->n_tok; /* tokens i .. n_tok lie inside: token i - 1 starts at or after from */
    while (i > 0 && (i >= 2 ? x->end[i - 2] : 0) >= from)
        i--;
    return x->n_tok - i;
}
