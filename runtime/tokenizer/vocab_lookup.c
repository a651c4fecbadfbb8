/*
 * The lookups every tokenizer shares, below the loader (vocab_load.c) and the tokenizers
 * (spm.c, bpe.c, special.c, tokenize.c), which call these and not each other's: the
 * text -> id hash table that sd_vocab_load builds (vocab_hash, vocab_lookup_hashed,
 * vocab_lookup) and the growing id buffer (ids_push).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/vocab_impl.h"

uint64_t vocab_hash(const char *s, size_t n) {
    return vocab_hash_end(vocab_hash_more(VOCAB_HASH_INIT, s, n));
}

int32_t vocab_lookup_hashed(const sd_vocab *v, const char *s, size_t n, uint64_t h) {
    if (n > v->max_len) return -1;
    const uint32_t hi = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & v->ht_mask;; i = (i + 1) & v->ht_mask) {
        const int32_t id = v->ht[i].id;
        if (id < 0) return -1;
        if (v->ht[i].h == hi && v->len[id] == n && memcmp(vocab_text(v, id), s, n) == 0) return id;
    }
}

int32_t vocab_lookup(const sd_vocab *v, const char *s, size_t n) {
    if (n > v->max_len) return -1;
    return vocab_lookup_hashed(v, s, n, vocab_hash(s, n));
}

int ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *p = realloc(b->p, cap * sizeof *p);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = id;
    return 0;
}
