/*
 * Streaming detokenizer (sd_detok): fed one token at a time it returns only complete
 * UTF-8, holding back a character split across tokens, and the concatenation of every
 * chunk plus the flush is the concatenation of the tokens' pieces byte for byte (raw
 * mode). Checked on every vector of every shared vocabulary (pieces from
 * sd_vocab_token_to_piece, validity by an RFC 3629 checker written here), and on byte
 * tokens of llama-spm whose expected output is known byte by byte.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "tests/testutil.h"

static sd_vocab *load_named(const char *name) {
    char path[1024];
    tu_llamacpp_vocab(name, path, sizeof path);
    tu_need_path(path, "llama.cpp's vocabularies: ../shared/data or scripts/get_vocabs.sh");
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "%s", err.msg);
    sd_vocab *v = NULL;
    int rc = sd_vocab_load(g, &v, &err);
    sd_gguf_close(g);
    cr_assert_eq(rc, SD_OK, "%s", err.msg);
    return v;
}

/* RFC 3629 validity (no overlongs, surrogates, > U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else
            return 0;
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t j = 2; j < len; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
        i += len;
    }
    return 1;
}

typedef struct text {
    char *p;
    size_t n;
} text;

static void append(text *t, const char *s, size_t n) {
    t->p = realloc(t->p, t->n + n + 1);
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static text pieces_of(const sd_vocab *v, const int32_t *ids, size_t n, unsigned flags) {
    text t = {NULL, 0};
    append(&t, "", 0);
    for (size_t i = 0; i < n; i++) {
        char buf[256];
        int l = sd_vocab_token_to_piece(v, ids[i], flags, buf, sizeof buf);
        cr_assert(l >= 0 && l <= (int)sizeof buf);
        append(&t, buf, (size_t)l);
    }
    return t;
}

/* Stream ids; every chunk valid UTF-8 when the pieces so far are; returns the total. */
static text stream(const sd_vocab *v, const int32_t *ids, size_t n, unsigned flags) {
    sd_detok *d = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_detok_init(v, flags, &d, &err), SD_OK);
    text t = {NULL, 0};
    append(&t, "", 0);
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        cr_assert_eq(sd_detok_push(d, ids[i], &s, &l, &err), SD_OK, "%s", err.msg);
        cr_assert_eq(strlen(s), l);
        if (flags & SD_DETOK_REPLACE_INVALID)
            cr_assert(valid_utf8((const unsigned char *)s, l), "chunk %zu not UTF-8", i);
        append(&t, s, l);
    }
    const char *s;
    size_t l;
    sd_detok_flush(d, &s, &l);
    append(&t, s, l);
    sd_detok_free(d);
    return t;
}

/* Every vector's ids (encoded here, checked against llama.cpp in test_tokenize.c). */
static void stream_vectors(const char *name) {
    sd_vocab *v = load_named(name);
    char path[1024];
    tu_llamacpp_vocab(name, path, sizeof path);
    cr_assert_lt(strlen(path) + 4, sizeof path);
    strcat(path, ".inp");
    size_t len = 0;
    char *inp = (char *)tu_read_file(path, &len);
    cr_assert_not_null(inp);
    size_t n_ok = 0, n_vec = 0;
    const char *sep = "\n__ggml_vocab_test__\n";
    for (char *p = inp; p;) {
        char *m = strstr(p, sep);
        if (m) *m = '\0';
        int32_t *ids = NULL;
        size_t n = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(v, p, strlen(p), 0, &ids, &n, &err), SD_OK);
        for (int mode = 0; mode < 2; mode++) {
            const unsigned flags = mode ? SD_DETOK_REPLACE_INVALID : 0;
            text want = pieces_of(v, ids, n, 0), got = stream(v, ids, n, flags);
            if (valid_utf8((const unsigned char *)want.p, want.n)) {
                /* valid text: both modes give exactly the pieces */
                cr_assert_eq(got.n, want.n, "%s: '%s'", name, p);
                cr_assert(memcmp(got.p, want.p, got.n) == 0, "%s: '%s'", name, p);
                n_ok += mode;
            } else if (!mode) {
                cr_assert(got.n == want.n && memcmp(got.p, want.p, got.n) == 0, "%s", name);
            }
            free(want.p);
            free(got.p);
        }
        free(ids);
        n_vec++;
        p = m ? m + strlen(sep) : NULL;
    }
    cr_assert_eq(n_ok, n_vec, "%s: %zu of %zu vectors decode to valid UTF-8", name, n_ok, n_vec);
    free(inp);
    sd_vocab_free(v);
}

Test(detok, vectors_llama_spm) {
    stream_vectors("llama-spm");
}
Test(detok, vectors_gpt_2) {
    stream_vectors("gpt-2");
}
Test(detok, vectors_llama_bpe) {
    stream_vectors("llama-bpe");
}
Test(detok, vectors_qwen2) {
    stream_vectors("qwen2");
}
Test(detok, vectors_deepseek_llm) {
    stream_vectors("deepseek-llm");
}
Test(detok, vectors_falcon) {
    stream_vectors("falcon");
}
Test(detok, vectors_starcoder) {
    stream_vectors("starcoder");
}

/* llama-spm byte tokens: <0xNN> is id 3 + NN. */
#define B(x) (3 + (x))

static void push_expect(sd_detok *d, int32_t id, const char *want, size_t want_len) {
    const char *s;
    size_t l;
    sd_error err = {0};
    cr_assert_eq(sd_detok_push(d, id, &s, &l, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(l, want_len, "id %d: %zu bytes out, expected %zu", (int)id, l, want_len);
    cr_assert(memcmp(s, want, l) == 0, "id %d", (int)id);
}

static void flush_expect(sd_detok *d, const char *want, size_t want_len) {
    const char *s;
    size_t l;
    sd_detok_flush(d, &s, &l);
    cr_assert_eq(l, want_len);
    cr_assert(memcmp(s, want, l) == 0);
}

Test(detok, held_back_and_invalid) {
    sd_vocab *v = load_named("llama-spm");
    sd_detok *raw = NULL, *rep = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_detok_init(v, 0, &raw, &err), SD_OK);
    cr_assert_eq(sd_detok_init(v, SD_DETOK_REPLACE_INVALID, &rep, &err), SD_OK);
    sd_detok *both[2] = {raw, rep};
    /* 🦙 F0 9F A6 99 in four byte tokens: nothing until the last */
    for (int k = 0; k < 2; k++) {
        push_expect(both[k], B(0xF0), "", 0);
        push_expect(both[k], B(0x9F), "", 0);
        push_expect(both[k], B(0xA6), "", 0);
        push_expect(both[k], B(0x99), "\xf0\x9f\xa6\x99", 4);
        /* a complete character and the start of the next in one push */
        push_expect(both[k], 15043, " Hello", 6); /* "▁Hello" */
        push_expect(both[k], B(0xC3), "", 0);
        push_expect(both[k], B(0xA9), "\xc3\xa9", 2);
    }
    /* 0xFF can start nothing: out at once (raw) or as U+FFFD */
    push_expect(raw, B(0xFF), "\xff", 1);
    push_expect(rep, B(0xFF), "\xef\xbf\xbd", 3);
    /* E2 then 'a' (id 29874 "a"): E2 is invalid once 'a' arrives */
    push_expect(raw, B(0xE2), "", 0);
    push_expect(rep, B(0xE2), "", 0);
    push_expect(raw, 29874,
                "\xe2"
                "a",
                2);
    push_expect(rep, 29874,
                "\xef\xbf\xbd"
                "a",
                4);
    /* overlong C0 80: C0 can start nothing, 80 is a lone continuation */
    push_expect(raw, B(0xC0), "\xc0", 1);
    push_expect(raw, B(0x80), "\x80", 1);
    push_expect(rep, B(0xC0), "\xef\xbf\xbd", 3);
    push_expect(rep, B(0x80), "\xef\xbf\xbd", 3);
    /* E0 80: E0 needs A0..BF next, so E0 alone is the invalid part, then 80 */
    push_expect(rep, B(0xE0), "", 0);
    push_expect(rep, B(0x80), "\xef\xbf\xbd\xef\xbf\xbd", 6);
    /* an incomplete character at the end comes out at the flush */
    push_expect(raw, B(0xE2), "", 0);
    push_expect(raw, B(0x96), "", 0);
    flush_expect(raw, "\xe2\x96", 2);
    push_expect(rep, B(0xE2), "", 0);
    push_expect(rep, B(0x96), "", 0);
    flush_expect(rep, "\xef\xbf\xbd", 3);
    /* the flush reset the stream */
    flush_expect(raw, "", 0);
    push_expect(raw, 15043, " Hello", 6);
    /* control tokens are "" unless unparse_special; out of range is an error */
    push_expect(raw, 2, "", 0);
    const char *s;
    size_t l;
    cr_assert_eq(sd_detok_push(raw, 32000, &s, &l, &err), SD_ERR_ARG);
    cr_assert_eq(l, 0);
    sd_detok_free(raw);
    sd_detok_free(rep);
    /* a control token ("") as the very first push of a new stream: nothing, and no NULL
     * buffer handed to memmove (UBSan's nonnull check in the sanitizer build) */
    sd_detok *fresh = NULL;
    cr_assert_eq(sd_detok_init(v, 0, &fresh, &err), SD_OK);
    push_expect(fresh, 1, "", 0);
    push_expect(fresh, 15043, " Hello", 6);
    sd_detok_free(fresh);
    sd_detok *sp = NULL;
    cr_assert_eq(sd_detok_init(v, SD_VOCAB_UNPARSE_SPECIAL, &sp, &err), SD_OK);
    push_expect(sp, 2, "</s>", 4);
    sd_detok_free(sp);
    sd_detok_free(NULL);
    sd_vocab_free(v);
}

/* Byte-level BPE: llama.cpp's own example " this is 🦙.cpp" (test-tokenizer-0's old list:
 * 420 374 11410 99 247 13 11055) has the llama split over three tokens. */
Test(detok, bpe_split_character) {
    sd_vocab *v = load_named("llama-bpe");
    int32_t ids[] = {420, 374, 11410, 99, 247, 13, 11055};
    sd_detok *d = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_detok_init(v, SD_DETOK_REPLACE_INVALID, &d, &err), SD_OK);
    push_expect(d, ids[0], " this", 5);
    push_expect(d, ids[1], " is", 3);
    push_expect(d, ids[2], " ", 1); /* " " + F0 9F held */
    push_expect(d, ids[3], "", 0);
    push_expect(d, ids[4], "\xf0\x9f\xa6\x99", 4);
    push_expect(d, ids[5], ".", 1);
    push_expect(d, ids[6], "cpp", 3);
    flush_expect(d, "", 0);
    sd_detok_free(d);
    sd_vocab_free(v);
}
