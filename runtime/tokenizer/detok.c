/*
 * Decoding: token_to_piece, detokenize (llama.cpp's llama_vocab::impl::token_to_piece and
 * ::detokenize) and the streaming detokenizer of sd_vocab.h.
 *
 * A piece, by the token's attributes (bits, as llama.cpp tests them):
 *   CONTROL or UNKNOWN without SD_VOCAB_UNPARSE_SPECIAL -> "";
 *   CONTROL, UNKNOWN or USER_DEFINED                    -> the text as stored;
 *   NORMAL: SPM "▁" -> " "; BPE each GPT-2 character -> its byte; a BPE token with a
 *           character outside that alphabet (Command-R's vocabulary has some, e.g. U+200D;
 *           no text tokenizes to them) is its text as written, as HF tokenizers' ByteLevel
 *           decoder does (llama.cpp writes "[UNK_BYTE_0x...]" there);
 *   BYTE: the byte of "<0xNN>" (llama.cpp: strtol of text[3..5), base 16);
 *   anything else (unused, undefined) -> "".
 * lstrip (detokenize's first token when add_space_prefix) drops one leading ' ' of the
 * piece.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab_impl.h"

static const char SPACE_ESC[3] = {'\xe2', '\x96', '\x81'};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Write c at buf[*n] if it fits, counting it either way; lstrip drops one leading ' '. */
static void put(char *buf, size_t cap, size_t *n, int *lstrip, char c) {
    if (*lstrip) {
        *lstrip = 0;
        if (c == ' ') return;
    }
    if (*n < cap) buf[*n] = c;
    (*n)++;
}

/* 1 if every character of t[0 .. tl) stands for a byte in GPT-2's mapping (token texts are
 * valid UTF-8: checked at load). */
static int gpt2_text(const char *t, size_t tl) {
    for (size_t i = 0; i < tl;) {
        size_t l = sd_utf8_lead_len((unsigned char)t[i]);
        uint32_t cp[4];
        if (l > tl - i) l = tl - i;
        sd_utf8_decode_lenient(t + i, l, cp);
        if (sd_gpt2_cp_to_byte(cp[0]) < 0) return 0;
        i += l;
    }
    return 1;
}

/* The piece of id (in range) into buf[0..cap); returns its full length. */
static size_t piece(const sd_vocab *v, int32_t id, unsigned flags, char *buf, size_t cap,
                    int lstrip) {
    const unsigned attr = v->attr[id];
    const char *t = vocab_text(v, id);
    const size_t tl = v->len[id];
    size_t n = 0;
    if (!(flags & SD_VOCAB_UNPARSE_SPECIAL) && (attr & (ATTR_CONTROL | ATTR_UNKNOWN))) return 0;
    if (attr & (ATTR_CONTROL | ATTR_UNKNOWN | ATTR_USER_DEFINED)) {
        for (size_t i = 0; i < tl; i++)
            put(buf, cap, &n, &lstrip, t[i]);
    } else if ((attr & ATTR_NORMAL) && v->type == SD_VOCAB_SPM) {
        for (size_t i = 0; i < tl;) {
            if (tl - i >= 3 && memcmp(t + i, SPACE_ESC, 3) == 0) {
                put(buf, cap, &n, &lstrip, ' ');
                i += 3;
            } else {
                put(buf, cap, &n, &lstrip, t[i++]);
            }
        }
    } else if (attr & ATTR_NORMAL) {
        const int gpt2 = gpt2_text(t, tl);
        for (size_t i = 0; i < tl;) {
            size_t l = sd_utf8_lead_len((unsigned char)t[i]);
            uint32_t cp[4];
            if (l > tl - i) l = tl - i;
            if (!gpt2) { /* the text as written */
                for (size_t k = 0; k < l; k++)
                    put(buf, cap, &n, &lstrip, t[i + k]);
            } else {
                sd_utf8_decode_lenient(t + i, l, cp);
                put(buf, cap, &n, &lstrip, (char)sd_gpt2_cp_to_byte(cp[0]));
            }
            i += l;
        }
    } else if (attr & ATTR_BYTE) {
        int b = 0;
        for (size_t i = 3; i < 5 && i < tl && hexval(t[i]) >= 0; i++)
            b = b * 16 + hexval(t[i]);
        put(buf, cap, &n, &lstrip, (char)b);
    }
    return n;
}

int sd_vocab_token_to_piece(const sd_vocab *v, int32_t id, unsigned flags, char *buf, size_t cap) {
    if (id < 0 || id >= v->n) return -1;
    size_t n = piece(v, id, flags, buf, cap, 0);
    return n > (size_t)INT_MAX ? INT_MAX : (int)n;
}

/* llama.cpp's clean_up_tokenization passes, in place on s[0..n); returns the new length.
 * Pass 2 overwrites the space after a " ' " with NUL as llama.cpp does, which a following
 * test of "previous character is a space" then sees. */
static size_t clean_spaces(char *s, size_t n) {
    size_t k = n ? 1 : 0, m;
    for (size_t i = 1; i < n; i++) { /* " ?" " !" " ." " ," */
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) k--;
        s[k++] = x;
    }
    m = k;
    k = m ? 1 : 0;
    for (size_t i = 1; i < m; i++) { /* " ' " -> "'" */
        char x = s[i];
        if (x == '\'' && i + 1 < m && s[i - 1] == ' ' && s[i + 1] == ' ') {
            k--;
            s[++i] = '\0';
        }
        s[k++] = x;
    }
    m = k;
    k = m ? 1 : 0;
    for (size_t i = 1; i < m; i++) { /* " 's" " 'm" " 're" " 've" lose the space */
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < m) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm')
                k--;
            else if (x1 != 't' && x1 != 'd' && i + 2 < m) {
                char x2 = s[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) k--;
            }
        }
        s[k++] = x;
    }
    return k;
}

int sd_vocab_detokenize(const sd_vocab *v, const int32_t *ids, size_t n_ids, unsigned flags,
                        char **out, size_t *out_len, sd_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= v->n)
            return sd_errorf(err, SD_ERR_ARG,
                             "detokenize: token id %d at position %zu is out of range (%d tokens)",
                             (int)ids[i], i, (int)v->n);
        /* a piece is never longer than the token text (+1 for byte tokens) */
        if (sd_add_size(total, (size_t)v->len[ids[i]] + 1, &total))
            return sd_errorf(err, SD_ERR_OOM, "detokenize: out of memory");
    }
    int remove_space = v->add_space_prefix;
    if ((flags & SD_VOCAB_REMOVE_SPECIAL) && v->add_bos && n_ids > 0 && ids[0] == v->bos) {
        remove_space = 0;
        ids++;
        n_ids--;
    }
    if ((flags & SD_VOCAB_REMOVE_SPECIAL) && v->add_eos && n_ids > 0 && ids[n_ids - 1] == v->eos)
        n_ids--;
    char *s = malloc(total + 1);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "detokenize: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n_ids; i++) {
        k += piece(v, ids[i], flags, s + k, total - k, remove_space);
        remove_space = 0;
    }
    if (v->clean_spaces) k = clean_spaces(s, k);
    s[k] = '\0';
    *out = s;
    if (out_len) *out_len = k;
    return SD_OK;
}

/* ------------------------------------------------------------------ streaming */

struct sd_detok {
    const sd_vocab *v;
    unsigned flags;
    char *pend; /* bytes not yet returned: at most one incomplete UTF-8 sequence */
    size_t n_pend, cap_pend;
    char *out; /* the chunk handed back last */
    size_t cap_out;
};

static int grow(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *q = realloc(*p, c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

int sd_detok_init(const sd_vocab *v, unsigned flags, sd_detok **out, sd_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return sd_errorf(err, SD_ERR_OOM, "detokenizer: out of memory");
    (*out)->v = v;
    (*out)->flags = flags;
    return SD_OK;
}

void sd_detok_free(sd_detok *d) {
    if (!d) return;
    free(d->pend);
    free(d->out);
    free(d);
}

static const char REPLACEMENT[3] = {'\xef', '\xbf', '\xbd'};

int sd_detok_push(sd_detok *d, int32_t id, const char **text, size_t *len, sd_error *err) {
    *text = "";
    *len = 0;
    if (id < 0 || id >= d->v->n)
        return sd_errorf(err, SD_ERR_ARG, "detokenizer: token id %d is out of range (%d tokens)",
                         (int)id, (int)d->v->n);
    size_t pl = piece(d->v, id, d->flags, NULL, 0, 0), need, out_need;
    /* pend grows to need + 1 so that it is never NULL, even when the first piece is "". */
    if (sd_add_size(d->n_pend, pl, &need) || sd_mul_size(need, 3, &out_need) ||
        grow(&d->pend, &d->cap_pend, need + 1) || grow(&d->out, &d->cap_out, out_need + 1))
        return sd_errorf(err, SD_ERR_OOM, "detokenizer: out of memory");
    piece(d->v, id, d->flags, d->pend + d->n_pend, pl, 0);
    d->n_pend = need;
    const unsigned char *p = (const unsigned char *)d->pend;
    size_t i = 0, k = 0;
    while (i < d->n_pend) {
        size_t bad = 0;
        int r = sd_utf8_check(p + i, d->n_pend - i, &bad);
        if (r == 0) break; /* incomplete: hold back */
        if (r > 0) {
            memcpy(d->out + k, p + i, (size_t)r);
            k += (size_t)r;
            i += (size_t)r;
        } else if (d->flags & SD_DETOK_REPLACE_INVALID) {
            memcpy(d->out + k, REPLACEMENT, 3);
            k += 3;
            i += bad;
        } else {
            memcpy(d->out + k, p + i, bad);
            k += bad;
            i += bad;
        }
    }
    memmove(d->pend, d->pend + i, d->n_pend - i);
    d->n_pend -= i;
    d->out[k] = '\0';
    *text = d->out;
    *len = k;
    return SD_OK;
}

void sd_detok_flush(sd_detok *d, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (d->n_pend == 0) return;
    /* the pending bytes are a proper prefix of one sequence: 1..3 bytes; out has room */
    if (d->flags & SD_DETOK_REPLACE_INVALID) {
        memcpy(d->out, REPLACEMENT, 3);
        *len = 3;
    } else {
        memcpy(d->out, d->pend, d->n_pend);
        *len = d->n_pend;
    }
    d->out[*len] = '\0';
    d->n_pend = 0;
    *text = d->out;
}
