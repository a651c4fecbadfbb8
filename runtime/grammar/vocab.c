/* runtime/grammar/vocab.c: a vocabulary's token bytes in a trie, built once, so a mask
 * walks each shared prefix of token bytes once per state (sd_grammar_mask). */
#include "runtime/grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct piece_ref {
    const char *p;
    size_t n;
    int32_t id;
} piece_ref;

static int piece_cmp(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    const size_t n = x->n < y->n ? x->n : y->n;
    const int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void sd_grammar_vocab_free(sd_grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->first_child);
    free(v->next_sibling);
    free(v->tok_first);
    free(v->byte);
    free(v->tok_next);
    free(v);
}

int sd_grammar_vocab_init(const char *const *pieces, const size_t *lens, int32_t n_vocab,
                          sd_grammar_vocab **out, sd_error *err) {
    if (out) *out = NULL;
    if (!pieces || !lens || !out || n_vocab < 1)
        return sd_errorf(err, SD_ERR_ARG, "grammar vocabulary: NULL argument or no tokens");
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (lens[i] && !pieces[i])
            return sd_errorf(err, SD_ERR_ARG, "grammar vocabulary: token %d has no bytes", i);
        if (lens[i] > SIZE_MAX / 2 - total || total + lens[i] >= INT32_MAX)
            return sd_errorf(err, SD_ERR_ARG, "grammar vocabulary: too many bytes");
        total += lens[i];
    }
    sd_grammar_vocab *v = calloc(1, sizeof *v);
    piece_ref *ref = malloc((size_t)n_vocab * sizeof *ref);
    int32_t *path = NULL, *last = NULL;
    if (!v || !ref) goto oom;
    v->n_vocab = n_vocab;
    const size_t max_nodes = total + 1;
    v->bytes = malloc(total ? total : 1);
    v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->first_child = malloc(max_nodes * sizeof *v->first_child);
    v->next_sibling = malloc(max_nodes * sizeof *v->next_sibling);
    v->tok_first = malloc(max_nodes * sizeof *v->tok_first);
    v->byte = malloc(max_nodes);
    v->tok_next = malloc((size_t)n_vocab * sizeof *v->tok_next);
    last = malloc(max_nodes * sizeof *last);
    if (!v->bytes || !v->off || !v->first_child || !v->next_sibling || !v->tok_first || !v->byte ||
        !v->tok_next || !last)
        goto oom;
    size_t o = 0, max_len = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->off[i] = o;
        if (lens[i]) memcpy(v->bytes + o, pieces[i], lens[i]);
        o += lens[i];
        if (lens[i] > max_len) max_len = lens[i];
        v->tok_next[i] = -1;
    }
    v->off[n_vocab] = o;
    for (int32_t i = 0; i < n_vocab; i++)
        ref[i] = (piece_ref){v->bytes + v->off[i], lens[i], i};
    qsort(ref, (size_t)n_vocab, sizeof *ref, piece_cmp);
    path = malloc((max_len + 1) * sizeof *path);
    if (!path) goto oom;
    /* the root */
    v->n_nodes = 1;
    v->first_child[0] = v->next_sibling[0] = v->tok_first[0] = last[0] = -1;
    v->byte[0] = 0;
    path[0] = 0;
    size_t depth = 0; /* path[0 .. depth] holds the previous piece's nodes */
    const piece_ref *prev = NULL;
    int32_t *tail = malloc(max_nodes * sizeof *tail); /* each node's last token */
    if (!tail) goto oom;
    tail[0] = -1;
    for (int32_t r = 0; r < n_vocab; r++) {
        const piece_ref *x = &ref[r];
        size_t lcp = 0;
        if (prev)
            while (lcp < x->n && lcp < prev->n && lcp < depth && x->p[lcp] == prev->p[lcp])
                lcp++;
        for (size_t i = lcp; i < x->n; i++) {
            const int32_t parent = path[i], c = v->n_nodes++;
            v->first_child[c] = v->next_sibling[c] = v->tok_first[c] = last[c] = tail[c] = -1;
            v->byte[c] = (uint8_t)x->p[i];
            if (last[parent] >= 0)
                v->next_sibling[last[parent]] = c;
            else
                v->first_child[parent] = c;
            last[parent] = c;
            path[i + 1] = c;
        }
        depth = x->n;
        const int32_t node = path[x->n];
        if (tail[node] >= 0)
            v->tok_next[tail[node]] = x->id;
        else
            v->tok_first[node] = x->id;
        tail[node] = x->id;
        prev = x;
    }
    free(tail);
    free(path);
    free(last);
    free(ref);
    *out = v;
    return SD_OK;
oom:
    free(path);
    free(last);
    free(ref);
    sd_grammar_vocab_free(v);
    return sd_errorf(err, SD_ERR_OOM, "grammar vocabulary: out of memory");
}

int32_t sd_grammar_vocab_size(const sd_grammar_vocab *v) {
    return v->n_vocab;
}

const char *sd_grammar_vocab_piece(const sd_grammar_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}
