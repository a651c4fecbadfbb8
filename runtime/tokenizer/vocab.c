/*
 * SentencePiece (SPM) vocabulary and tokenizer, matching llama.cpp's llm_tokenizer_spm
 * (src/llama-vocab.cpp) on encode and decode. See runtime/sd_vocab.h.
 *
 * Encode (llama_vocab::impl::tokenize, LLAMA_VOCAB_TYPE_SPM, parse_special = false):
 *   1. Partition the text on USER-DEFINED tokens (token_type 4), longest text first:
 *      llama.cpp does this even with parse_special = false. Control (3) and unknown (2)
 *      tokens are NOT split out: "<s>" in the text is tokenized as plain text.
 *      (parse_special = true is not offered yet.)
 *   2. Each raw-text fragment that follows the start or a user-defined token gets a " "
 *      prepended when add_space_prefix; then every ' ' becomes U+2581 "▁".
 *   3. The fragment is split into "UTF-8 characters" by the lead byte only (llama.cpp's
 *      unicode_len_utf8: 0xxx/10xx -> 1, 110x -> 2, 1110 -> 3, 1111 -> 4 bytes, cut at
 *      the end of the text), as a doubly-linked list of symbols.
 *   4. Every adjacent pair whose concatenation is a token goes into a max-heap keyed by
 *      (token score desc, left symbol index asc) - the exact order of llama.cpp's
 *      std::priority_queue comparator. Pop: skip if either side was merged away or the
 *      sizes changed (stale), else merge right into left and push the two new pairs.
 *   5. Each final symbol is emitted as its token, or else byte by byte as <0xNN> byte
 *      tokens (llama_vocab::byte_to_token: "<0xNN>" upper-case hex, else the one-byte
 *      text as a token). Where neither exists we emit unk (llama.cpp would throw).
 *   llama.cpp's rev_merge map (used by resegment for a final symbol that is not a
 *   token) is omitted: every merged symbol is a token by construction, and an unmerged
 *   symbol (one lead-byte chunk) can never equal the text of a pair, because its lead
 *   byte would claim the whole pair. So resegment always ends in "token" or "bytes".
 *   Cost: O(n log n) in the text length (the heap holds <= 3n entries); text->id is an
 *   open-addressing hash table built at load.
 *
 * Decode (token_to_piece with special = false, llama_detokenize with remove_special =
 * false, unparse_special = false, clean_spaces = false as for SPM):
 *   normal -> text with "▁" -> " "; byte -> the byte; user-defined -> raw text;
 *   control/unknown/unused/undefined -> "". When add_space_prefix, ONE leading ' ' is
 *   stripped from the piece of the FIRST token of the sequence only (llama.cpp's
 *   remove_space/lstrip). A leading BOS is that first token: its piece is empty, so
 *   after a BOS nothing is stripped ([BOS, "▁Hello"] -> " Hello", as in llama.cpp).
 *   Hence decode(encode(s, add_bos = 0)) == s.
 *
 * Load deviations from llama.cpp (stricter, documented in sd_vocab.h): scores/token
 * types must have exactly one entry per token (llama.cpp accepts longer arrays); a
 * special-token id present in the file but out of range is an error (llama.cpp warns
 * and keeps the default). Like llama.cpp: missing scores -> 0.0, missing token types ->
 * normal, an empty token text becomes "[EMPTY_<id>]", duplicate token texts are
 * rejected. llama.cpp's text-based attribute fixups (e.g. forcing "<|im_end|>" to
 * control) are not applied: they do not concern SPM llama vocabularies.
 */
#include "runtime/tokenizer/sd_vocab.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL      "tokenizer.ggml.model"
#define KEY_TOKENS     "tokenizer.ggml.tokens"
#define KEY_SCORES     "tokenizer.ggml.scores"
#define KEY_TYPES      "tokenizer.ggml.token_type"
#define KEY_BOS        "tokenizer.ggml.bos_token_id"
#define KEY_EOS        "tokenizer.ggml.eos_token_id"
#define KEY_UNK        "tokenizer.ggml.unknown_token_id"
#define KEY_ADD_BOS    "tokenizer.ggml.add_bos_token"
#define KEY_ADD_PREFIX "tokenizer.ggml.add_space_prefix"

enum {
    TT_UNDEFINED = 0,
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

/* "▁" U+2581 */
static const char SPACE_ESC[3] = {'\xe2', '\x96', '\x81'};

struct sd_vocab {
    int32_t n;
    char *arena; /* all token texts, each NUL-terminated */
    size_t *off; /* text of id i: arena + off[i], len[i] bytes */
    uint32_t *len;
    float *score;
    uint8_t *type; /* TT_*; values outside 1..6 stored as 0 */
    int32_t *ht;   /* open addressing, -1 = empty */
    size_t ht_mask;
    uint32_t max_len; /* longest token text */
    int32_t byte_tok[256];
    int32_t bos, eos, unk;
    int add_bos, add_space_prefix;
    int32_t *user; /* user-defined token ids, longest text first */
    int32_t n_user;
};

/* ------------------------------------------------------------------ hash table */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static const char *tok_text(const sd_vocab *v, int32_t id) {
    return v->arena + v->off[id];
}

/* id of the token whose text is s[0..n), or -1. */
static int32_t lookup(const sd_vocab *v, const char *s, size_t n) {
    if (n > v->max_len) return -1;
    size_t i = (size_t)hash_bytes(s, n) & v->ht_mask;
    for (;;) {
        int32_t id = v->ht[i];
        if (id < 0) return -1;
        if (v->len[id] == n && memcmp(tok_text(v, id), s, n) == 0) return id;
        i = (i + 1) & v->ht_mask;
    }
}

/* ------------------------------------------------------------------ load */

void sd_vocab_free(sd_vocab *v) {
    if (!v) return;
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->type);
    free(v->ht);
    free(v->user);
    free(v);
}

/* Optional special id: absent -> keep *id (the llama default, disabled if out of
 * range); present -> must be < n (negative means none). */
static int load_special(const sd_gguf *g, const char *key, int32_t n, int32_t *id, sd_error *err) {
    if (sd_gguf_find_key(g, key) < 0) {
        if (*id >= n) *id = -1;
        return SD_OK;
    }
    int64_t x = -1;
    int rc = sd_gguf_get_i64(g, key, &x, err);
    if (rc != SD_OK) return rc;
    if (x >= n)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: metadata key '%s' = %" PRId64 " is out of range (%d tokens)",
                         sd_gguf_path(g), key, x, (int)n);
    *id = x < 0 ? -1 : (int32_t)x;
    return SD_OK;
}

/* Numeric per-token array (scores or types): absent -> *data = NULL. */
static int load_per_token_arr(const sd_gguf *g, const char *key, int32_t n, int want_score,
                              sd_gguf_vtype *et, const void **data, sd_error *err) {
    *data = NULL;
    if (sd_gguf_find_key(g, key) < 0) return SD_OK;
    uint64_t cnt = 0;
    int rc = sd_gguf_get_arr(g, key, et, &cnt, data, err);
    if (rc != SD_OK) return rc;
    int ok = want_score ? (*et == SD_GGUF_F32 || *et == SD_GGUF_I32) : (*et == SD_GGUF_I32);
    if (!ok)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' must be an array of %s",
                         sd_gguf_path(g), key, want_score ? "f32 (or i32)" : "i32");
    if (cnt != (uint64_t)n)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: metadata key '%s' has %" PRIu64
                         " elements, expected %d (one per entry of '%s')",
                         sd_gguf_path(g), key, cnt, (int)n, KEY_TOKENS);
    return SD_OK;
}

/* User-defined token order: longest text first, then lower id. */
typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_len_id(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int sd_vocab_load(const sd_gguf *g, sd_vocab **out, sd_error *err) {
    *out = NULL;
    const char *path = sd_gguf_path(g);
    const char *model;
    size_t model_len;
    int rc = sd_gguf_get_str(g, KEY_MODEL, &model, &model_len, err);
    if (rc != SD_OK) return rc;
    if (model_len != 5 || memcmp(model, "llama", 5) != 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "%s: tokenizer model '%.*s' (%s) is not supported: only 'llama' "
                         "(SentencePiece) vocabularies are",
                         path, (int)(model_len > 64 ? 64 : model_len), model, KEY_MODEL);

    int64_t kv_tok = sd_gguf_find_key(g, KEY_TOKENS);
    if (kv_tok < 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: missing metadata key '%s'", path, KEY_TOKENS);
    sd_gguf_vtype et;
    uint64_t n64 = 0;
    const void *unused_data;
    rc = sd_gguf_get_arr(g, KEY_TOKENS, &et, &n64, &unused_data, err);
    if (rc != SD_OK) return rc;
    if (et != SD_GGUF_STRING)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' must be an array of strings",
                         path, KEY_TOKENS);
    if (n64 == 0 || n64 > (uint64_t)INT32_MAX / 4)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' has %" PRIu64 " tokens", path,
                         KEY_TOKENS, n64);
    int32_t n = (int32_t)n64;

    sd_gguf_vtype score_t = SD_GGUF_F32, type_t = SD_GGUF_I32;
    const void *scores = NULL, *types = NULL;
    rc = load_per_token_arr(g, KEY_SCORES, n, 1, &score_t, &scores, err);
    if (rc != SD_OK) return rc;
    rc = load_per_token_arr(g, KEY_TYPES, n, 0, &type_t, &types, err);
    if (rc != SD_OK) return rc;

    sd_vocab *v = calloc(1, sizeof *v);
    if (!v) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory loading the vocabulary", path);
    v->n = n;
    v->bos = 1; /* llama.cpp's defaults for tokenizer.ggml.model = "llama" */
    v->eos = 2;
    v->unk = 0;
    v->add_bos = 1;
    v->add_space_prefix = 1;
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->score = malloc((size_t)n * sizeof *v->score);
    v->type = malloc((size_t)n);
    if (!v->off || !v->len || !v->score || !v->type) goto oom;

    /* Texts: size the arena first (empty tokens become "[EMPTY_<id>]"). */
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        if (sd_gguf_arr_str(g, kv_tok, (uint64_t)i, &s, &l) != SD_OK) {
            sd_vocab_free(v);
            return sd_errorf(err, SD_ERR_FORMAT, "%s: cannot read '%s'[%d]", path, KEY_TOKENS,
                             (int)i);
        }
        if (l == 0) l = 24;
        if (l > UINT32_MAX / 2) {
            sd_vocab_free(v);
            return sd_errorf(err, SD_ERR_FORMAT, "%s: '%s'[%d] is %zu bytes long", path, KEY_TOKENS,
                             (int)i, l);
        }
        if (sd_add_size(total, l + 1, &total) != 0) goto oom;
    }
    v->arena = malloc(total);
    if (!v->arena) goto oom;
    size_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        sd_gguf_arr_str(g, kv_tok, (uint64_t)i, &s, &l);
        v->off[i] = pos;
        if (l == 0) {
            int w = snprintf(v->arena + pos, 24, "[EMPTY_%d]", (int)i);
            l = (size_t)w;
        } else {
            memcpy(v->arena + pos, s, l);
            v->arena[pos + l] = '\0';
        }
        v->len[i] = (uint32_t)l;
        if (v->len[i] > v->max_len) v->max_len = v->len[i];
        pos += l + 1;

        if (scores && score_t == SD_GGUF_F32) {
            memcpy(&v->score[i], (const char *)scores + 4 * (size_t)i, 4);
        } else if (scores) {
            int32_t x;
            memcpy(&x, (const char *)scores + 4 * (size_t)i, 4);
            v->score[i] = (float)x;
        } else {
            v->score[i] = 0.0f;
        }
        int32_t t = TT_NORMAL;
        if (types) memcpy(&t, (const char *)types + 4 * (size_t)i, 4);
        v->type[i] = (uint8_t)(t >= TT_NORMAL && t <= TT_BYTE ? t : TT_UNDEFINED);
    }

    /* Hash table, load factor <= 1/2. */
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    v->ht = malloc(cap * sizeof *v->ht);
    if (!v->ht) goto oom;
    memset(v->ht, 0xff, cap * sizeof *v->ht);
    v->ht_mask = cap - 1;
    for (int32_t i = 0; i < n; i++) {
        size_t h = (size_t)hash_bytes(tok_text(v, i), v->len[i]) & v->ht_mask;
        while (v->ht[h] >= 0) {
            int32_t j = v->ht[h];
            if (v->len[j] == v->len[i] && memcmp(tok_text(v, j), tok_text(v, i), v->len[i]) == 0) {
                int rc2 = sd_errorf(err, SD_ERR_FORMAT,
                                    "%s: '%s': duplicate token text '%.64s' at ids %d and %d", path,
                                    KEY_TOKENS, tok_text(v, i), (int)j, (int)i);
                sd_vocab_free(v);
                return rc2;
            }
            h = (h + 1) & v->ht_mask;
        }
        v->ht[h] = i;
    }

    /* Byte fallback table (llama_vocab::byte_to_token for SPM). */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        int32_t id = lookup(v, buf, 6);
        if (id < 0) {
            char c = (char)b;
            id = lookup(v, &c, 1);
        }
        v->byte_tok[b] = id;
    }

    /* Special ids and flags. */
    if ((rc = load_special(g, KEY_BOS, n, &v->bos, err)) != SD_OK ||
        (rc = load_special(g, KEY_EOS, n, &v->eos, err)) != SD_OK ||
        (rc = load_special(g, KEY_UNK, n, &v->unk, err)) != SD_OK ||
        (rc = sd_gguf_get_bool_opt(g, KEY_ADD_BOS, &v->add_bos, err)) != SD_OK ||
        (rc = sd_gguf_get_bool_opt(g, KEY_ADD_PREFIX, &v->add_space_prefix, err)) != SD_OK) {
        sd_vocab_free(v);
        return rc;
    }
    v->add_bos = v->add_bos != 0;
    v->add_space_prefix = v->add_space_prefix != 0;

    /* User-defined tokens, longest first (llama.cpp sorts cache_special_tokens by text
     * length with std::sort, so its order among equal lengths is unspecified; we use id). */
    for (int32_t i = 0; i < n; i++)
        v->n_user += v->type[i] == TT_USER_DEFINED;
    if (v->n_user) {
        v->user = malloc((size_t)v->n_user * sizeof *v->user);
        len_id *tmp = malloc((size_t)v->n_user * sizeof *tmp);
        if (!v->user || !tmp) {
            free(tmp);
            goto oom;
        }
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (v->type[i] == TT_USER_DEFINED) tmp[k++] = (len_id){v->len[i], i};
        qsort(tmp, (size_t)v->n_user, sizeof *tmp, cmp_len_id);
        for (k = 0; k < v->n_user; k++)
            v->user[k] = tmp[k].id;
        free(tmp);
    }

    *out = v;
    return SD_OK;

oom:
    sd_vocab_free(v);
    return sd_errorf(err, SD_ERR_OOM, "%s: out of memory loading the vocabulary", path);
}

/* ------------------------------------------------------------------ accessors */

int32_t sd_vocab_n_tokens(const sd_vocab *v) {
    return v->n;
}
int32_t sd_vocab_bos(const sd_vocab *v) {
    return v->bos;
}
int32_t sd_vocab_eos(const sd_vocab *v) {
    return v->eos;
}
int32_t sd_vocab_unk(const sd_vocab *v) {
    return v->unk;
}
int sd_vocab_add_bos(const sd_vocab *v) {
    return v->add_bos;
}
const char *sd_vocab_model_name(const sd_vocab *v) {
    (void)v;
    return "llama";
}
const char *sd_vocab_token_text(const sd_vocab *v, int32_t id) {
    return id >= 0 && id < v->n ? tok_text(v, id) : NULL;
}
int sd_vocab_token_type(const sd_vocab *v, int32_t id) {
    return id >= 0 && id < v->n ? v->type[id] : 0;
}

/* ------------------------------------------------------------------ encode */

typedef struct ids_buf {
    int32_t *p;
    size_t n, cap;
} ids_buf;

static int ids_push(ids_buf *b, int32_t id) {
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

typedef struct heap {
    bigram *p;
    size_t n, cap;
} heap;

static int heap_push(heap *h, bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        bigram *p = realloc(h->p, cap * sizeof *p);
        if (!p) return -1;
        h->p = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!bg_before(&x, &h->p[par])) break;
        h->p[i] = h->p[par];
        i = par;
    }
    h->p[i] = x;
    return 0;
}

static bigram heap_pop(heap *h) {
    bigram top = h->p[0];
    bigram x = h->p[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bg_before(&h->p[c + 1], &h->p[c])) c++;
        if (!bg_before(&h->p[c], &x)) break;
        h->p[i] = h->p[c];
        i = c;
    }
    if (h->n) h->p[i] = x;
    return top;
}

typedef struct spm_session {
    const sd_vocab *v;
    const char *s;
    sym *syms;
    heap h;
} spm_session;

static int try_add_bigram(spm_session *ss, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    uint32_t size = ss->syms[left].n + ss->syms[right].n;
    int32_t id = lookup(ss->v, ss->s + ss->syms[left].off, size);
    if (id < 0) return 0;
    bigram b = {left, right, ss->v->score[id], size};
    return heap_push(&ss->h, b);
}

/* Byte-fallback id for byte c (unk if the vocab has no byte token for it). */
static int push_byte(const sd_vocab *v, unsigned char c, ids_buf *out, sd_error *err) {
    int32_t id = v->byte_tok[c];
    if (id < 0) id = v->unk;
    if (id < 0)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "tokenize: the vocabulary has no byte token <0x%02X> and no unknown token",
                         c);
    if (ids_push(out, id)) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
    return SD_OK;
}

/* llm_tokenizer_spm_session::tokenize on the escaped text s[0..m). */
static int spm_tokenize(const sd_vocab *v, const char *s, size_t m, ids_buf *out, sd_error *err) {
    static const uint8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    if (m == 0) return SD_OK;
    if (m > (size_t)INT32_MAX - 1)
        return sd_errorf(err, SD_ERR_ARG, "tokenize: text of %zu bytes is too long", m);
    spm_session ss = {v, s, NULL, {NULL, 0, 0}};
    ss.syms = malloc(m * sizeof *ss.syms); /* at most one symbol per byte */
    if (!ss.syms) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
    int rc = SD_OK;

    int32_t ns = 0;
    for (size_t off = 0; off < m;) {
        size_t l = utf8_len[(unsigned char)s[off] >> 4];
        if (l > m - off) l = m - off;
        sym *y = &ss.syms[ns];
        y->off = (uint32_t)off;
        y->n = (uint32_t)l;
        off += l;
        y->prev = ns - 1;
        y->next = off == m ? -1 : ns + 1;
        ns++;
    }

    for (int32_t i = 1; i < ns; i++)
        if (try_add_bigram(&ss, i - 1, i)) goto oom;

    while (ss.h.n > 0) {
        bigram b = heap_pop(&ss.h);
        sym *l = &ss.syms[b.left], *r = &ss.syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) ss.syms[r->next].prev = b.left;
        if (try_add_bigram(&ss, l->prev, b.left)) goto oom;
        if (try_add_bigram(&ss, b.left, l->next)) goto oom;
    }

    for (int32_t i = 0; i != -1; i = ss.syms[i].next) {
        const sym *y = &ss.syms[i];
        int32_t id = lookup(v, s + y->off, y->n);
        if (id >= 0) {
            if (ids_push(out, id)) goto oom;
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            rc = push_byte(v, (unsigned char)s[y->off + j], out, err);
            if (rc != SD_OK) goto done;
        }
    }
    goto done;

oom:
    rc = sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
done:
    free(ss.syms);
    free(ss.h.p);
    return rc;
}

/* Tokenize one raw fragment: optional " " prefix, escape spaces, SPM. *scratch is a
 * reusable buffer. */
static int encode_fragment(const sd_vocab *v, const char *t, size_t len, int prefix, char **scratch,
                           size_t *scratch_cap, ids_buf *out, sd_error *err) {
    size_t n_sp = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++)
        n_sp += t[i] == ' ';
    size_t need;
    if (sd_mul_size(n_sp, 2, &need) || sd_add_size(need, len, &need) ||
        sd_add_size(need, prefix ? 1 : 0, &need))
        return sd_errorf(err, SD_ERR_ARG, "tokenize: text too long");
    if (need > *scratch_cap) {
        char *p = realloc(*scratch, need);
        if (!p) return sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
        *scratch = p;
        *scratch_cap = need;
    }
    char *d = *scratch;
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
    return spm_tokenize(v, d, k, out, err);
}

typedef struct frag {
    int32_t id; /* -1: raw text */
    size_t off, len;
} frag;

typedef struct frag_buf {
    frag *p;
    size_t n, cap;
} frag_buf;

static int frag_push(frag_buf *b, int32_t id, size_t off, size_t len) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        frag *p = realloc(b->p, cap * sizeof *p);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = (frag){id, off, len};
    return 0;
}

/* tokenizer_st_partition with parse_special = false: split raw fragments at every
 * (leftmost, non-overlapping) occurrence of each user-defined token, longest first. */
static int partition_user(const sd_vocab *v, const char *text, size_t len, frag_buf *fb) {
    if (frag_push(fb, -1, 0, len)) return -1;
    for (int32_t u = 0; u < v->n_user; u++) {
        int32_t id = v->user[u];
        const char *tt = tok_text(v, id);
        size_t tl = v->len[id];
        frag_buf nb = {NULL, 0, 0};
        for (size_t f = 0; f < fb->n; f++) {
            frag fr = fb->p[f];
            if (fr.id >= 0) {
                if (frag_push(&nb, fr.id, fr.off, fr.len)) goto oom;
                continue;
            }
            size_t base = fr.off, rem = fr.len;
            for (;;) {
                const char *m = rem >= tl ? memmem(text + base, rem, tt, tl) : NULL;
                if (!m) {
                    if (rem > 0 && frag_push(&nb, -1, base, rem)) goto oom;
                    break;
                }
                size_t mo = (size_t)(m - text);
                if (mo > base && frag_push(&nb, -1, base, mo - base)) goto oom;
                if (frag_push(&nb, id, mo, tl)) goto oom;
                rem -= (mo - base) + tl;
                base = mo + tl;
            }
            continue;
        oom:
            free(nb.p);
            return -1;
        }
        free(fb->p);
        *fb = nb;
    }
    return 0;
}

int sd_vocab_tokenize(const sd_vocab *v, const char *text, size_t len, int add_bos, int32_t **ids,
                      size_t *n_ids, sd_error *err) {
    *ids = NULL;
    *n_ids = 0;
    ids_buf out = {NULL, 0, 0};
    frag_buf fb = {NULL, 0, 0};
    char *scratch = NULL;
    size_t scratch_cap = 0;
    int rc = SD_OK;

    if (add_bos && v->bos >= 0 && ids_push(&out, v->bos)) goto oom;
    if (len > 0) {
        if (partition_user(v, text, len, &fb)) goto oom;
        int prev_special = 1; /* the first fragment gets the space prefix */
        for (size_t f = 0; f < fb.n; f++) {
            if (fb.p[f].id >= 0) {
                if (ids_push(&out, fb.p[f].id)) goto oom;
                prev_special = 1;
                continue;
            }
            rc = encode_fragment(v, text + fb.p[f].off, fb.p[f].len,
                                 v->add_space_prefix && prev_special, &scratch, &scratch_cap, &out,
                                 err);
            if (rc != SD_OK) goto done;
            prev_special = 0;
        }
    }
    if (out.n == 0) {
        /* malloc(0) may return NULL: hand back a valid pointer anyway. */
        out.p = malloc(sizeof *out.p);
        if (!out.p) goto oom;
    }
    *ids = out.p;
    *n_ids = out.n;
    out.p = NULL;
    goto done;

oom:
    rc = sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
done:
    free(out.p);
    free(fb.p);
    free(scratch);
    return rc;
}

/* ------------------------------------------------------------------ decode */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Piece of id written to buf (at most cap bytes), skipping up to lstrip leading spaces;
 * returns the piece length. id must be in range. */
static size_t piece(const sd_vocab *v, int32_t id, char *buf, size_t cap, int lstrip) {
    const char *t = tok_text(v, id);
    size_t tl = v->len[id];
    size_t n = 0;
    switch (v->type[id]) {
    case TT_USER_DEFINED:
        for (size_t i = 0; i < tl; i++) {
            if (lstrip && n == 0 && t[i] == ' ') {
                lstrip = 0;
                continue;
            }
            if (n < cap) buf[n] = t[i];
            n++;
        }
        return n;
    case TT_NORMAL:
        for (size_t i = 0; i < tl;) {
            char c;
            if (tl - i >= 3 && memcmp(t + i, SPACE_ESC, 3) == 0) {
                c = ' ';
                i += 3;
            } else {
                c = t[i++];
            }
            if (lstrip && n == 0 && c == ' ') {
                lstrip = 0;
                continue;
            }
            lstrip = 0;
            if (n < cap) buf[n] = c;
            n++;
        }
        return n;
    case TT_BYTE: {
        /* llama.cpp: strtol(text.substr(3, 2), 16) */
        int b = 0;
        for (size_t i = 3; i < 5 && i < tl && hexval(t[i]) >= 0; i++)
            b = b * 16 + hexval(t[i]);
        char c = (char)b;
        if (lstrip && c == ' ') return 0;
        if (cap > 0) buf[0] = c;
        return 1;
    }
    default: /* control, unknown, unused, undefined */
        return 0;
    }
}

int sd_vocab_token_to_piece(const sd_vocab *v, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= v->n) return -1;
    size_t n = piece(v, id, buf, cap, 0);
    return n > (size_t)INT_MAX ? INT_MAX : (int)n;
}

int sd_vocab_detokenize(const sd_vocab *v, const int32_t *ids, size_t n_ids, char **out,
                        size_t *out_len, sd_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= v->n)
            return sd_errorf(err, SD_ERR_ARG,
                             "detokenize: token id %d at position %zu is out of "
                             "range (%d tokens)",
                             (int)ids[i], i, (int)v->n);
        /* upper bound: a piece is never longer than the token text (+1 for bytes) */
        if (sd_add_size(total, (size_t)v->len[ids[i]] + 1, &total))
            return sd_errorf(err, SD_ERR_OOM, "detokenize: out of memory");
    }
    char *s = malloc(total + 1);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "detokenize: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_ids; i++)
        k += piece(v, ids[i], s + k, total - k, i == 0 && v->add_space_prefix);
    s[k] = '\0';
    *out = s;
    if (out_len) *out_len = k;
    return SD_OK;
}

/* ------------------------------------------------------------------ pairing */

/* Printable, bounded rendering of a token text for error messages. */
static void render(const sd_vocab *v, int32_t id, char *buf, size_t cap) {
    const char *t = tok_text(v, id);
    size_t k = 0;
    for (uint32_t i = 0; i < v->len[id] && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\')
            k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
        else
            buf[k++] = (char)c;
    }
    buf[k] = '\0';
}

int sd_vocab_check_pair(const sd_vocab *target, const char *target_path, const sd_vocab *draft,
                        const char *draft_path, sd_error *err) {
    const char *tp = target_path ? target_path : "target", *dp = draft_path ? draft_path : "draft";
#define MISMATCH(...)                                                                              \
    sd_errorf(err, SD_ERR_MISMATCH, "draft vocabulary does not match target: " __VA_ARGS__)
    /* model type: both are "llama" (the only kind sd_vocab_load accepts) */
    if (target->bos != draft->bos)
        return MISMATCH("%s has BOS id %d, %s has BOS id %d", tp, (int)target->bos, dp,
                        (int)draft->bos);
    if (target->eos != draft->eos)
        return MISMATCH("%s has EOS id %d, %s has EOS id %d", tp, (int)target->eos, dp,
                        (int)draft->eos);
    if (target->add_bos != draft->add_bos)
        return MISMATCH("%s has add_bos_token %s, %s has %s", tp,
                        target->add_bos ? "true" : "false", dp, draft->add_bos ? "true" : "false");
    int32_t diff = target->n > draft->n ? target->n - draft->n : draft->n - target->n;
    if (diff > SD_VOCAB_MAX_SIZE_DIFF)
        return MISMATCH("%s has %d tokens, %s has %d (difference %d > %d)", tp, (int)target->n, dp,
                        (int)draft->n, (int)diff, SD_VOCAB_MAX_SIZE_DIFF);
    int32_t n = target->n < draft->n ? target->n : draft->n;
    for (int32_t i = 0; i < n; i++) {
        if (target->len[i] == draft->len[i] &&
            memcmp(tok_text(target, i), tok_text(draft, i), target->len[i]) == 0)
            continue;
        char a[128], b[128];
        render(target, i, a, sizeof a);
        render(draft, i, b, sizeof b);
        return MISMATCH("%s id %d is '%s', %s id %d is '%s'", tp, (int)i, a, dp, (int)i, b);
    }
#undef MISMATCH
    return SD_OK;
}
