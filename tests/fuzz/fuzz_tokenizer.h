/*
 * The tokenizer fuzz targets, fuzz_spm.c and fuzz_bpe.c (FUZZ_BPE 0 or 1 before including
 * this): one tokenizer (SentencePiece or byte-level BPE) on arbitrary text, and the two
 * decoders on what it produces. The first input byte picks the flags; the rest is the
 * text. Checked besides memory safety:
 *   - every id is in range;
 *   - the streaming detokenizer's chunks concatenate to the concatenated pieces byte for
 *     byte (its contract in sd_vocab.h), and with SD_DETOK_REPLACE_INVALID are valid UTF-8.
 * Vocabularies: $SD_FUZZ_VOCAB_SPM and $SD_FUZZ_VOCAB_BPE, else the ones shipped in models/
 * (the TinyStories target's SentencePiece vocabulary, the SmolLM2 draft's BPE one with its
 * smollm pre-tokenizer). Seeds: corpus/spm/, corpus/bpe/.
 */
#ifndef SD_FUZZ_TOKENIZER_H
#define SD_FUZZ_TOKENIZER_H
#include <string.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "tests/fuzz/fuzz_util.h"

static sd_vocab *g_vocab;

static sd_vocab *load(const char *env, const char *fallback) {
    const char *path = getenv(env);
    if (!path || !*path) path = fallback;
    sd_gguf *g = NULL;
    sd_vocab *v = NULL;
    sd_error err = {0};
    if (sd_gguf_open(path, &g, &err) || sd_vocab_load(g, &v, &err)) {
        fprintf(stderr, "fuzz: %s (set %s)\n", err.msg, env);
        exit(1);
    }
    sd_gguf_close(g);
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_vocab = FUZZ_BPE
                  ? load("SD_FUZZ_VOCAB_BPE", SD_SOURCE_DIR "/models/smollm2-draft-q8_0.gguf")
                  : load("SD_FUZZ_VOCAB_SPM", SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf");
    return 0;
}

/* 1 if s[0 .. n) is valid UTF-8 (RFC 3629), written here again. */
static int utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        size_t len = c < 0x80                   ? 1
                     : (c >= 0xC2 && c <= 0xDF) ? 2
                     : (c >= 0xE0 && c <= 0xEF) ? 3
                     : (c >= 0xF0 && c <= 0xF4) ? 4
                                                : 0;
        if (!len || i + len > n) return 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        if (len > 1 && (s[i + 1] < lo || s[i + 1] > hi)) return 0;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += len;
    }
    return 1;
}

/* Stream ids through sd_detok with flags; the concatenated output into a malloc'd buffer. */
static char *stream(const sd_vocab *v, const int32_t *ids, size_t n, unsigned flags, size_t *len) {
    sd_detok *d = NULL;
    if (sd_detok_init(v, flags, &d, NULL)) abort();
    size_t cap = 64, o = 0;
    char *buf = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *t = NULL;
        size_t tl = 0;
        if (i < n) {
            if (sd_detok_push(d, ids[i], &t, &tl, NULL)) abort();
        } else {
            sd_detok_flush(d, &t, &tl);
        }
        while (o + tl + 1 > cap)
            buf = realloc(buf, cap *= 2);
        if (tl) memcpy(buf + o, t, tl);
        o += tl;
    }
    sd_detok_free(d);
    *len = o;
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const sd_vocab *v = g_vocab;
    unsigned flags = 0;
    if (data[0] & 2) flags |= SD_VOCAB_ADD_SPECIAL;
    if (data[0] & 4) flags |= SD_VOCAB_PARSE_SPECIAL;
    const unsigned piece_flags = data[0] & 8 ? SD_VOCAB_UNPARSE_SPECIAL : 0;
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    if (sd_vocab_tokenize(v, (const char *)data + 1, size - 1, flags, &ids, &n, &err)) {
        free(ids);
        return 0;
    }
    const int32_t n_tok = sd_vocab_n_tokens(v);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_tok) abort();
    char *text = NULL;
    size_t text_len = 0;
    if (sd_vocab_detokenize(v, ids, n, piece_flags | (data[0] & 16 ? SD_VOCAB_REMOVE_SPECIAL : 0),
                            &text, &text_len, &err) == SD_OK)
        free(text);
    /* the pieces, concatenated */
    size_t cap = 64, o = 0;
    char *pieces = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        int l = sd_vocab_token_to_piece(v, ids[i], piece_flags, NULL, 0);
        if (l < 0) abort();
        while (o + (size_t)l + 1 > cap)
            pieces = realloc(pieces, cap *= 2);
        if (sd_vocab_token_to_piece(v, ids[i], piece_flags, pieces + o, cap - o) != l) abort();
        o += (size_t)l;
    }
    size_t raw_len = 0, clean_len = 0;
    char *raw = stream(v, ids, n, piece_flags, &raw_len);
    char *clean = stream(v, ids, n, piece_flags | SD_DETOK_REPLACE_INVALID, &clean_len);
    if (raw_len != o || (o && memcmp(raw, pieces, o))) abort();
    if (!utf8_ok((const unsigned char *)clean, clean_len)) abort();
    free(raw);
    free(clean);
    free(pieces);
    free(ids);
    return 0;
}

#endif
