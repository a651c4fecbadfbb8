/*
 * Byte-level BPE (tokenizer.ggml.model = "gpt2"), matching llama.cpp's llm_tokenizer_bpe
 * and llm_tokenizer_bpe_session (src/llama-vocab.cpp).
 *
 * Merges: tokenizer.ggml.merges holds one "left right" string per rule, the rank being
 * the index. llama.cpp splits at the first space after the first byte and keys its ranks
 * by the two strings; we require both sides and their concatenation to be tokens (as HF
 * tokenizers' BPE does; every merge of the real vocabularies is) and key a hash table by
 * the two token ids, which is the same relation: BPE symbols are always token texts or
 * single GPT-2 characters, and a symbol that is not a token can never take part in a
 * merge. A repeated rule keeps its first rank (llama.cpp's unordered_map::emplace).
 *
 * Tokenizing one raw fragment (llm_tokenizer_bpe_session::tokenize):
 *   1. UTF-8 -> code points, invalid bytes -> U+FFFD (unicode.c), and pre-tokenize into
 *      words (pretok.c);
 *   2. each word -> UTF-8 -> every byte replaced by its GPT-2 character;
 *   3. with ignore_merges (Llama 3) a word that is a token is emitted as is;
 *   4. else the word's characters are symbols in a linked list, every adjacent pair with a
 *      merge rule goes into a min-heap keyed (rank, left index) - llama.cpp's comparator -
 *      and the best pair is merged until none is left; a popped pair whose sides changed
 *      since it was pushed is stale and skipped. O(m log m) for a word of m characters.
 *   5. each final symbol is emitted as its token; a symbol that is not a token (only a
 *      GPT-2 character the vocabulary lacks, e.g. falcon has no token for byte 0x03) is
 *      emitted byte by byte as 1-byte tokens where they exist and otherwise DROPPED, as
 *      llama.cpp does.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab_impl.h"

/* ------------------------------------------------------------------ merge table */

static uint64_t merge_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

int32_t bpe_rank(const sd_vocab *v, int32_t left, int32_t right, int32_t *result) {
    if (!v->mt || left < 0 || right < 0) return -1;
    const uint64_t key = merge_key(left, right);
    for (size_t i = (size_t)sd_mix64(key) & v->mt_mask;; i = (i + 1) & v->mt_mask) {
        const merge_slot *s = &v->mt[i];
        if (s->key == UINT64_MAX) return -1;
        if (s->key == key) {
            *result = s->result;
            return s->rank;
        }
    }
}

/* Insert unless present (the first rank wins). */
static void merge_insert(sd_vocab *v, int32_t left, int32_t right, int32_t rank, int32_t result) {
    const uint64_t key = merge_key(left, right);
    for (size_t i = (size_t)sd_mix64(key) & v->mt_mask;; i = (i + 1) & v->mt_mask) {
        merge_slot *s = &v->mt[i];
        if (s->key == key) return;
        if (s->key == UINT64_MAX) {
            *s = (merge_slot){key, rank, result};
            return;
        }
    }
}

/* One merge line being loaded: "left right" split at the first space after byte 0
 * (llama.cpp), the hashes of left, right and left + right. */
typedef struct merge_line {
    const char *s, *right; /* right == NULL: no space (malformed) */
    size_t l, ll, rl;
    uint64_t h[3];
} merge_line;

static void split_merge(const sd_vocab *v, merge_line *m) {
    m->right = m->l > 1 ? memchr(m->s + 1, ' ', m->l - 1) : NULL;
    if (!m->right) return;
    m->ll = (size_t)(m->right - m->s);
    m->right++;
    m->rl = m->l - m->ll - 1;
    const uint64_t hl = vocab_hash_more(VOCAB_HASH_INIT, m->s, m->ll);
    m->h[0] = vocab_hash_end(hl);
    m->h[1] = vocab_hash(m->right, m->rl);
    m->h[2] = vocab_hash_end(vocab_hash_more(hl, m->right, m->rl));
    for (int k = 0; k < 3; k++) /* the table is far larger than the caches */
        __builtin_prefetch(&v->ht[m->h[k] & v->ht_mask]);
}

/* Rule i's ids, or the error naming it. */
static int parse_merge(const sd_vocab *v, const merge_line *ml, int32_t i, char *scratch,
                       merge_rule *m, sd_error *err) {
    char shown[96];
    if (!ml->right) {
        sd_text_render(ml->s, ml->l, shown, sizeof shown);
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: '%s'[%d] = '%s' is malformed (expected 'left right')", v->path,
                         KEY_MERGES, (int)i, shown);
    }
    m->left = vocab_lookup_hashed(v, ml->s, ml->ll, ml->h[0]);
    m->right = vocab_lookup_hashed(v, ml->right, ml->rl, ml->h[1]);
    m->result = -1;
    if (m->left >= 0 && m->right >= 0 && ml->ll + ml->rl <= v->max_len) {
        memcpy(scratch, ml->s, ml->ll);
        memcpy(scratch + ml->ll, ml->right, ml->rl);
        m->result = vocab_lookup_hashed(v, scratch, ml->ll + ml->rl, ml->h[2]);
    }
    if (m->left < 0 || m->right < 0 || m->result < 0) {
        const char *what = m->left < 0    ? "its left side"
                           : m->right < 0 ? "its right side"
                                          : "the merged text";
        sd_text_render(ml->s, ml->l, shown, sizeof shown);
        return sd_errorf(err, SD_ERR_FORMAT, "%s: '%s'[%d] = '%s': %s is not a token", v->path,
                         KEY_MERGES, (int)i, shown, what);
    }
    return SD_OK;
}

/* Rules in batches: hash and prefetch a batch's table slots, then look them up. */
#define MERGE_BATCH 32

int bpe_load_merges(sd_vocab *v, const sd_gguf *g, sd_error *err) {
    const int64_t kv = sd_gguf_find_key(g, KEY_MERGES);
    if (kv < 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: missing metadata key '%s' (a byte-level BPE vocabulary needs merges)",
                         v->path, KEY_MERGES);
    sd_gguf_vtype et;
    uint64_t n64 = 0;
    const void *unused;
    int rc = sd_gguf_get_arr(g, KEY_MERGES, &et, &n64, &unused, err);
    if (rc != SD_OK) return rc;
    if (et != SD_GGUF_STRING)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' must be an array of strings",
                         v->path, KEY_MERGES);
    if (n64 > (uint64_t)INT32_MAX / 4)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' has %" PRIu64 " entries",
                         v->path, KEY_MERGES, n64);
    const int32_t n = (int32_t)n64;
    size_t cap = 16;
    while (cap < (size_t)n + (size_t)n / 2)
        cap *= 2;
    v->merges = malloc(((size_t)n ? (size_t)n : 1) * sizeof *v->merges);
    v->mt = malloc(cap * sizeof *v->mt);
    char *scratch = malloc((size_t)v->max_len + 1);
    if (!v->merges || !v->mt || !scratch) {
        free(scratch);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory for %d merges", v->path, (int)n);
    }
    for (size_t i = 0; i < cap; i++)
        v->mt[i].key = UINT64_MAX;
    v->mt_mask = cap - 1;
    merge_line batch[MERGE_BATCH];
    for (int32_t i0 = 0; i0 < n && rc == SD_OK; i0 += MERGE_BATCH) {
        const int32_t nb = n - i0 < MERGE_BATCH ? n - i0 : MERGE_BATCH;
        for (int32_t k = 0; k < nb && rc == SD_OK; k++) {
            merge_line *ml = &batch[k];
            if (sd_gguf_arr_str(g, kv, (uint64_t)(i0 + k), &ml->s, &ml->l) != SD_OK)
                rc = sd_errorf(err, SD_ERR_FORMAT, "%s: cannot read '%s'[%d]", v->path, KEY_MERGES,
                               (int)(i0 + k));
            else
                split_merge(v, ml);
        }
        for (int32_t k = 0; k < nb && rc == SD_OK; k++) {
            merge_rule *m = &v->merges[i0 + k];
            if ((rc = parse_merge(v, &batch[k], i0 + k, scratch, m, err)) != SD_OK) break;
            merge_insert(v, m->left, m->right, i0 + k, m->result);
        }
    }
    free(scratch);
    v->n_merges = n;
    return rc;
}

/* ------------------------------------------------------------------ merging one word */

typedef struct sym {
    int32_t prev, next;
    uint32_t off, n; /* text = word[off, off + n); n == 0: merged away */
    int32_t id;      /* token of the text, -1 if none */
} sym;

typedef struct bigram {
    int32_t left, right, rank, result;
    uint32_t size; /* left.n + right.n when pushed */
} bigram;

/* a pops before b: lower rank, then lower left index. */
static int before(const bigram *a, const bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct session {
    const sd_vocab *v;
    char *word; /* the GPT-2-mapped word */
    size_t word_cap;
    sym *syms;
    size_t syms_cap;
    bigram *heap;
    size_t n_heap, heap_cap;
} session;

static int heap_push(session *s, bigram x) {
    if (s->n_heap == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        bigram *p = realloc(s->heap, cap * sizeof *p);
        if (!p) return -1;
        s->heap = p;
        s->heap_cap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0 && before(&x, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = x;
    return 0;
}

static bigram heap_pop(session *s) {
    bigram top = s->heap[0], x = s->heap[--s->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->n_heap) break;
        if (c + 1 < s->n_heap && before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!before(&s->heap[c], &x)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->n_heap) s->heap[i] = x;
    return top;
}

static int add_bigram(session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    int32_t result;
    int32_t rank = bpe_rank(s->v, s->syms[left].id, s->syms[right].id, &result);
    if (rank < 0) return 0;
    bigram b = {left, right, rank, result, s->syms[left].n + s->syms[right].n};
    return heap_push(s, b);
}

static int emit_symbol(const session *s, const sym *y, ids_buf *out) {
    if (y->id >= 0) return ids_push(out, y->id);
    for (uint32_t j = 0; j < y->n; j++) { /* llama.cpp: 1-byte texts, else dropped */
        int32_t id = vocab_lookup(s->v, s->word + y->off + j, 1);
        if (id >= 0 && ids_push(out, id)) return -1;
    }
    return 0;
}

/* BPE over s->word[0, m). 0 or -1 (OOM). */
static int merge_word(session *s, size_t m, ids_buf *out) {
    const sd_vocab *v = s->v;
    if (v->ignore_merges) {
        int32_t id = vocab_lookup(v, s->word, m);
        if (id >= 0) return ids_push(out, id);
    }
    if (m > s->syms_cap) {
        sym *p = realloc(s->syms, m * sizeof *p);
        if (!p) return -1;
        s->syms = p;
        s->syms_cap = m;
    }
    int32_t ns = 0;
    for (size_t off = 0; off < m;) {
        size_t l = sd_utf8_lead_len((unsigned char)s->word[off]);
        if (l > m - off) l = m - off;
        sym *y = &s->syms[ns];
        *y = (sym){ns - 1, off + l == m ? -1 : ns + 1, (uint32_t)off, (uint32_t)l,
                   vocab_lookup(v, s->word + off, l)};
        off += l;
        ns++;
    }
    s->n_heap = 0;
    for (int32_t i = 1; i < ns; i++)
        if (add_bigram(s, i - 1, i)) return -1;
    while (s->n_heap > 0) {
        bigram b = heap_pop(s);
        sym *l = &s->syms[b.left], *r = &s->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        l->id = b.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = b.left;
        if (add_bigram(s, l->prev, b.left) || add_bigram(s, b.left, l->next)) return -1;
    }
    for (int32_t i = 0; i != -1; i = s->syms[i].next)
        if (emit_symbol(s, &s->syms[i], out)) return -1;
    return 0;
}

/* Code points cps[0, n) -> UTF-8 -> GPT-2 characters in s->word; returns the length. */
static size_t map_word(session *s, const uint32_t *cps, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char u8[4];
        size_t l = sd_utf8_encode(cps[i], u8);
        for (size_t j = 0; j < l; j++)
            k += sd_utf8_encode(sd_gpt2_byte_to_cp((unsigned char)u8[j]), s->word + k);
    }
    return k;
}

int bpe_tokenize(const sd_vocab *v, const char *text, size_t n, ids_buf *out, sd_error *err) {
    session s = {v, NULL, 0, NULL, 0, NULL, 0, 0};
    size_t *lens = NULL, n_lens = 0, cps_bytes;
    uint32_t *cps = NULL;
    int rc = SD_OK;
    if (sd_mul_size(n ? n : 1, sizeof *cps, &cps_bytes) || !(cps = malloc(cps_bytes))) goto oom;
    const size_t n_cps = sd_utf8_decode_lenient(text, n, cps);
    if (pretok_split(v->pre, cps, n_cps, &lens, &n_lens)) goto oom;
    size_t at = 0;
    for (size_t w = 0; w < n_lens; w++) {
        /* at most 4 UTF-8 bytes per code point, 2 per GPT-2 character */
        size_t need;
        if (sd_mul_size(lens[w], 8, &need)) goto oom;
        if (need > s.word_cap) {
            char *p = realloc(s.word, need);
            if (!p) goto oom;
            s.word = p;
            s.word_cap = need;
        }
        size_t m = map_word(&s, cps + at, lens[w]);
        at += lens[w];
        if (merge_word(&s, m, out)) goto oom;
    }
    goto done;
oom:
    rc = sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
done:
    free(cps);
    free(lens);
    free(s.word);
    free(s.syms);
    free(s.heap);
    return rc;
}
