/*
 * Vocabulary tests: loading (metadata, llama.cpp's defaults), the SPM tokenizer's corner
 * cases on llama.cpp's llama-spm vocabulary, special-token parsing, and small SPM and
 * byte-level BPE vocabularies written here (expected ids worked out by hand from the
 * merge rules) with their mutations: every bad-input case is a one-line error naming the
 * file and the key, never a crash. Draft/target pairing for both kinds. The vectors of
 * every shared vocabulary are in test_tokenize.c.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "tests/testutil.h"

/* llama.cpp's SentencePiece test vocabulary, wherever tu_llamacpp_vocab finds it. */
static const char *spm_gguf(void) {
    static char buf[1024];
    return tu_llamacpp_vocab("llama-spm", buf, sizeof buf);
}
#define SPM_GGUF spm_gguf()

/* ------------------------------------------------------------------ helpers */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    for (;;) {
        if (n == cap) b = realloc(b, (cap *= 2) + 1);
        size_t r = fread(b + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    fclose(f);
    b[n] = '\0';
    *len = n;
    return b;
}

static void skip_without_shared(void) {
    tu_need_path(SPM_GGUF, "llama.cpp's vocabularies: ../shared/data or scripts/get_vocabs.sh");
}

static sd_vocab *load_vocab_file(const char *path) {
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "open %s: %s", path, err.msg);
    sd_vocab *v = NULL;
    int rc = sd_vocab_load(g, &v, &err);
    sd_gguf_close(g);
    cr_assert_eq(rc, SD_OK, "load %s: %s", path, err.msg);
    return v;
}

/* ------------------------------------------------------------------ SPM (llama-spm) */

Test(vocab_spm, metadata) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    cr_assert_eq(sd_vocab_n_tokens(v), 32000);
    cr_assert_eq(sd_vocab_bos(v), 1);
    cr_assert_eq(sd_vocab_eos(v), 2);
    cr_assert_eq(sd_vocab_unk(v), 0);
    cr_assert_eq(sd_vocab_add_bos(v), 1);
    cr_assert_str_eq(sd_vocab_model_name(v), "llama");
    cr_assert_str_eq(sd_vocab_token_text(v, 1), "<s>");
    cr_assert_str_eq(sd_vocab_token_text(v, 15043), "\xe2\x96\x81Hello");
    cr_assert_null(sd_vocab_token_text(v, 32000));
    cr_assert_null(sd_vocab_token_text(v, -1));
    cr_assert_eq(sd_vocab_token_type(v, 0), 2);
    cr_assert_eq(sd_vocab_token_type(v, 1), 3);
    cr_assert_eq(sd_vocab_token_type(v, 13), 6);
    cr_assert_eq(sd_vocab_token_type(v, 15043), 1);
    cr_assert_eq(sd_vocab_token_type(v, 32000), 0);
    sd_vocab_free(v);
}

Test(vocab_spm, bos_and_pieces) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    int32_t *ids;
    size_t n;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, "Hello world", 11, SD_VOCAB_ADD_SPECIAL, &ids, &n, &err),
                 SD_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 15043);
    cr_assert_eq(ids[2], 3186);
    /* llama.cpp: only the first token's leading space is stripped; BOS is that token. */
    char *s;
    size_t sl;
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, 0, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, " Hello world");
    free(s);
    cr_assert_eq(sd_vocab_detokenize(v, ids + 1, n - 1, 0, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, "Hello world");
    free(s);
    free(ids);

    cr_assert_eq(sd_vocab_tokenize(v, "", 0, SD_VOCAB_ADD_SPECIAL, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(ids[0], 1);
    free(ids);
    cr_assert_eq(sd_vocab_tokenize(v, "", 0, 0, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 0);
    free(ids);

    char buf[64];
    cr_assert_eq(sd_vocab_token_to_piece(v, 15043, 0, buf, sizeof buf), 6);
    cr_assert(memcmp(buf, " Hello", 6) == 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 15043, 0, buf, 2), 6); /* too small: full length */
    cr_assert_eq(sd_vocab_token_to_piece(v, 13, 0, buf, sizeof buf), 1);
    cr_assert_eq(buf[0], '\n');
    cr_assert_eq(sd_vocab_token_to_piece(v, 1, 0, buf, sizeof buf), 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 2, 0, buf, sizeof buf), 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 0, 0, buf, sizeof buf), 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 32000, 0, buf, sizeof buf), -1);
    cr_assert_eq(sd_vocab_token_to_piece(v, -5, 0, buf, sizeof buf), -1);

    /* Control-token text is plain text (parse_special = false): "<s>" is not id 1. */
    cr_assert_eq(sd_vocab_tokenize(v, "<s>", 3, 0, &ids, &n, &err), SD_OK);
    cr_assert_gt(n, 1);
    for (size_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 1);
    free(ids);
    /* With parse_special it is the token, and the text after it gets the space prefix
     * again (llama.cpp's is_prev_special): "<s>Hello</s>" -> <s> ▁Hello </s>. */
    cr_assert_eq(sd_vocab_tokenize(v, "<s>Hello</s>", 12, SD_VOCAB_PARSE_SPECIAL, &ids, &n, &err),
                 SD_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 15043);
    cr_assert_eq(ids[2], 2);
    /* decoded: control tokens are "" unless unparse_special */
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, 0, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, " Hello");
    free(s);
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, SD_VOCAB_UNPARSE_SPECIAL, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, "<s> Hello</s>");
    free(s);
    /* remove_special drops the BOS add_special adds (add_bos) and no space is stripped */
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, SD_VOCAB_REMOVE_SPECIAL | SD_VOCAB_UNPARSE_SPECIAL,
                                     &s, &sl, &err),
                 SD_OK);
    cr_assert_str_eq(s, " Hello</s>");
    free(s);
    char cbuf[8];
    cr_assert_eq(sd_vocab_token_to_piece(v, 1, SD_VOCAB_UNPARSE_SPECIAL, cbuf, sizeof cbuf), 3);
    cr_assert(memcmp(cbuf, "<s>", 3) == 0);
    free(ids);
    cr_assert_eq(sd_vocab_eos(v), 2);
    cr_assert(sd_vocab_is_eog(v, 2));
    cr_assert(!sd_vocab_is_eog(v, 1));
    cr_assert_eq(sd_vocab_eot(v), -1);
    cr_assert_eq(sd_vocab_get_type(v), SD_VOCAB_SPM);
    cr_assert_eq(sd_vocab_n_merges(v), 0);

    int32_t bad = 40000;
    cr_assert_eq(sd_vocab_detokenize(v, &bad, 1, 0, &s, &sl, &err), SD_ERR_ARG);
    sd_vocab_free(v);
}

/* Tokenizing must scale (heap + hash table): 200 KB of story text, round trip. */
Test(vocab_spm, long_text_roundtrip, .timeout = 60) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    size_t len = 0;
    tu_need_path(tu_shared("tinystories/valid.txt"), "TinyStories text, in ../shared/data");
    char *txt = read_all(tu_shared("tinystories/valid.txt"), &len);
    cr_assert_not_null(txt);
    if (len > 200000) len = 200000;
    while (len > 0 && ((unsigned char)txt[len] & 0xC0) == 0x80)
        len--; /* whole chars */
    int32_t *ids;
    size_t n;
    sd_error err = {0};
    double t0 = sd_time_ms();
    cr_assert_eq(sd_vocab_tokenize(v, txt, len, 0, &ids, &n, &err), SD_OK, "%s", err.msg);
    double t1 = sd_time_ms();
    cr_log_info("tokenized %zu bytes into %zu tokens in %.1f ms", len, n, t1 - t0);
    cr_assert_gt(n, len / 8);
    char *s;
    size_t sl;
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, 0, &s, &sl, &err), SD_OK);
    cr_assert_eq(sl, len);
    cr_assert(memcmp(s, txt, len) == 0, "round trip of valid.txt differs");
    free(s);
    free(ids);
    free(txt);
    sd_vocab_free(v);
}

/* Invalid UTF-8 and every byte but ' ' survive via byte fallback. A space right after
 * a lead byte does not: spaces are escaped to "▁" (3 bytes) BEFORE the lead-byte split,
 * so "\xDF " splits as [DF E2] [96] [81] and decodes to DF E2 96 81. That is
 * llama.cpp's behaviour too (same algorithm), checked below. */
Test(vocab_spm, bytes_roundtrip) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    char in[512];
    for (int i = 0; i < 256; i++) {
        in[2 * i] = (char)(255 - i);
        in[2 * i + 1] = (char)i;
    }
    for (int i = 0; i < 512; i++)
        if (in[i] == ' ') in[i] = 'x';
    int32_t *ids;
    size_t n;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, in, sizeof in, 0, &ids, &n, &err), SD_OK);
    char *s;
    size_t sl;
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, 0, &s, &sl, &err), SD_OK);
    cr_assert_eq(sl, sizeof in);
    cr_assert(memcmp(s, in, sl) == 0);
    free(s);
    free(ids);

    cr_assert_eq(sd_vocab_tokenize(v, "\xDF x", 3, 0, &ids, &n, &err), SD_OK);
    int32_t want[] = {29871, 3 + 0xDF, 3 + 0xE2, 3 + 0x96, 3 + 0x81, 29916};
    cr_assert_eq(n, 6);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "id %zu: %d", i, (int)ids[i]);
    free(ids);
    sd_vocab_free(v);
}

/* ------------------------------------------------------------------ small vocab files */

static char tmpdir[512];

static void mk_tmp(void) {
    cr_assert_eq(tu_mkdtemp(tmpdir, sizeof tmpdir), 0, "mkdtemp: %s", strerror(errno));
}

static void rm_tmp(void) {
    if (tmpdir[0]) tu_rmdir(tmpdir);
}

/* A tiny SPM vocab: <unk> <s> </s>, 256 byte tokens, then a few pieces. */
#define N_TINY (3 + 256 + 6)
typedef struct tiny_opts {
    int omit_tokens, omit_scores, short_scores, short_types;
    int32_t change_id; /* -1: none */
    const char *change_text;
    int32_t bos;     /* -1: key absent */
    int32_t n_extra; /* extra tokens appended */
    const char *model;
    int user_defined; /* id N_TINY (needs n_extra >= 1) is "<U>", type 4 */
} tiny_opts;

static tiny_opts tiny_default(void) {
    tiny_opts o = {0};
    o.change_id = -1;
    o.bos = 1;
    o.model = "llama";
    return o;
}

static void write_tiny(const char *name, tiny_opts o, char *path_out, size_t cap) {
    static const char *pieces[6] = {"\xe2\x96\x81",
                                    "a",
                                    "b",
                                    "ab",
                                    "\xe2\x96\x81"
                                    "ab",
                                    "\xe2\x96\x81"
                                    "a"};
    int32_t n = N_TINY + o.n_extra;
    char **texts = calloc((size_t)n, sizeof *texts);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = calloc((size_t)n, sizeof *types);
    for (int32_t i = 0; i < n; i++) {
        texts[i] = malloc(32);
        types[i] = 1;
        if (i == 0)
            strcpy(texts[i], "<unk>"), types[i] = 2;
        else if (i == 1)
            strcpy(texts[i], "<s>"), types[i] = 3;
        else if (i == 2)
            strcpy(texts[i], "</s>"), types[i] = 3;
        else if (i < 259)
            snprintf(texts[i], 32, "<0x%02X>", i - 3), types[i] = 6;
        else if (i < N_TINY)
            strcpy(texts[i], pieces[i - 259]), scores[i] = (float)-(i - 259);
        else
            snprintf(texts[i], 32, "extra%d", i);
    }
    if (o.change_id >= 0) strcpy(texts[o.change_id], o.change_text);
    if (o.user_defined) {
        strcpy(texts[N_TINY], "<U>");
        types[N_TINY] = 4;
    }
    sd_gguf_writer *w = sd_gguf_writer_new();
    cr_assert_not_null(w);
    cr_assert_eq(sd_gguf_set_str(w, "general.architecture", "llama"), SD_OK);
    cr_assert_eq(sd_gguf_set_str(w, "tokenizer.ggml.model", o.model), SD_OK);
    if (!o.omit_tokens)
        cr_assert_eq(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts,
                                         (uint64_t)n),
                     SD_OK);
    if (!o.omit_scores)
        cr_assert_eq(sd_gguf_set_arr(w, "tokenizer.ggml.scores", SD_GGUF_F32, scores,
                                     (uint64_t)(n - (o.short_scores ? 1 : 0))),
                     SD_OK);
    cr_assert_eq(sd_gguf_set_arr(w, "tokenizer.ggml.token_type", SD_GGUF_I32, types,
                                 (uint64_t)(n - (o.short_types ? 1 : 0))),
                 SD_OK);
    if (o.bos >= 0)
        cr_assert_eq(sd_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)o.bos), SD_OK);
    cr_assert_eq(sd_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2), SD_OK);
    cr_assert_eq(sd_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0), SD_OK);
    tu_path(path_out, cap, tmpdir, name);
    sd_error err = {0};
    cr_assert_eq(sd_gguf_writer_write(w, path_out, &err), SD_OK, "%s", err.msg);
    sd_gguf_writer_free(w);
    for (int32_t i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(scores);
    free(types);
}

static int try_load(const char *path, sd_vocab **v, sd_error *err) {
    sd_gguf *g = NULL;
    int rc = sd_gguf_open(path, &g, err);
    cr_assert_eq(rc, SD_OK, "open %s: %s", path, err->msg);
    rc = sd_vocab_load(g, v, err);
    sd_gguf_close(g);
    return rc;
}

TestSuite(vocab_files, .init = mk_tmp, .fini = rm_tmp);

Test(vocab_files, tiny_vocab_encodes) {
    char p[512];
    write_tiny("t.gguf", tiny_default(), p, sizeof p);
    sd_vocab *v;
    sd_error err = {0};
    cr_assert_eq(try_load(p, &v, &err), SD_OK, "%s", err.msg);
    int32_t *ids;
    size_t n;
    /* "ab" -> "▁ab" (space prefix): "ab" (score -3) merges before "▁a" (-5), then
     * "▁" + "ab" -> "▁ab". */
    cr_assert_eq(sd_vocab_tokenize(v, "ab", 2, 0, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(ids[0], 263); /* "▁ab" */
    free(ids);
    /* "c" has no piece: byte fallback <0x63> = 3 + 0x63 */
    cr_assert_eq(sd_vocab_tokenize(v, "ac", 2, 0, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(ids[0], 264); /* "▁a" */
    cr_assert_eq(ids[1], 3 + 'c');
    free(ids);
    sd_vocab_free(v);
}

/* User-defined tokens are split out of the text even with parse_special = false, and
 * the text after one gets the space prefix again (llama.cpp's is_prev_special). */
Test(vocab_files, user_defined_tokens) {
    char p[512];
    tiny_opts o = tiny_default();
    o.n_extra = 1;
    o.user_defined = 1;
    write_tiny("ud.gguf", o, p, sizeof p);
    sd_vocab *v;
    sd_error err = {0};
    cr_assert_eq(try_load(p, &v, &err), SD_OK, "%s", err.msg);
    int32_t *ids;
    size_t n;
    cr_assert_eq(sd_vocab_tokenize(v, "a<U>b", 5, 0, &ids, &n, &err), SD_OK);
    int32_t want[] = {264, N_TINY, 259, 261}; /* "▁a" "<U>" "▁" "b" */
    cr_assert_eq(n, 4);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "id %zu: %d", i, (int)ids[i]);
    char *s;
    size_t sl;
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, 0, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, "a<U> b");
    free(s);
    free(ids);
    cr_assert_eq(sd_vocab_tokenize(v, "<U><U>", 6, 0, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(ids[0], N_TINY);
    cr_assert_eq(ids[1], N_TINY);
    free(ids);
    sd_vocab_free(v);
}

Test(vocab_files, pairing) {
    char pt[512], pd[512], pc[512], pb[512], pbig[512], psmall[512];
    write_tiny("target.gguf", tiny_default(), pt, sizeof pt);
    write_tiny("draft.gguf", tiny_default(), pd, sizeof pd);
    tiny_opts o = tiny_default();
    o.change_id = 37;
    o.change_text = "cd";
    write_tiny("changed.gguf", o, pc, sizeof pc);
    o = tiny_default();
    o.bos = 2;
    write_tiny("bos.gguf", o, pb, sizeof pb);
    o = tiny_default();
    o.n_extra = 200;
    write_tiny("big.gguf", o, pbig, sizeof pbig);
    o = tiny_default();
    o.n_extra = 100;
    write_tiny("small.gguf", o, psmall, sizeof psmall);

    sd_vocab *t, *d, *c, *b, *big, *small;
    sd_error err = {0};
    cr_assert_eq(try_load(pt, &t, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(try_load(pd, &d, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(try_load(pc, &c, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(try_load(pb, &b, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(try_load(pbig, &big, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(try_load(psmall, &small, &err), SD_OK, "%s", err.msg);

    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_vocab_check_pair(t, pt, t, pt, &err), SD_OK, "%s", err.msg);

    sd_error_clear(&err);
    cr_assert_eq(sd_vocab_check_pair(t, "target.gguf", c, "draft.gguf", &err), SD_ERR_MISMATCH);
    cr_assert_str_eq(err.msg, "draft vocabulary does not match target: target.gguf id 37 is "
                              "'<0x22>', draft.gguf id 37 is 'cd'");

    sd_error_clear(&err);
    cr_assert_eq(sd_vocab_check_pair(t, pt, b, pb, &err), SD_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "BOS"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, pt), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, pb), "%s", err.msg);

    /* 100 extra tokens: within SD_VOCAB_MAX_SIZE_DIFF; 200: not. */
    cr_assert_eq(sd_vocab_check_pair(t, pt, small, psmall, &err), SD_OK, "%s", err.msg);
    sd_error_clear(&err);
    cr_assert_eq(sd_vocab_check_pair(big, pbig, t, pt, &err), SD_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "tokens"), "%s", err.msg);

    sd_vocab_free(t);
    sd_vocab_free(d);
    sd_vocab_free(c);
    sd_vocab_free(b);
    sd_vocab_free(big);
    sd_vocab_free(small);
}

Test(vocab_files, load_errors_name_the_key) {
    char p[512];
    sd_vocab *v = NULL;
    sd_error err = {0};

    tiny_opts o = tiny_default();
    o.omit_tokens = 1;
    write_tiny("notok.gguf", o, p, sizeof p);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_FORMAT);
    cr_assert_null(v);
    cr_assert_not_null(strstr(err.msg, "tokenizer.ggml.tokens"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "notok.gguf"), "%s", err.msg);

    o = tiny_default();
    o.short_scores = 1;
    write_tiny("shortscores.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "tokenizer.ggml.scores"), "%s", err.msg);

    o = tiny_default();
    o.short_types = 1;
    write_tiny("shorttypes.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "tokenizer.ggml.token_type"), "%s", err.msg);

    o = tiny_default();
    o.bos = 5000;
    write_tiny("badbos.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "tokenizer.ggml.bos_token_id"), "%s", err.msg);

    o = tiny_default();
    o.change_id = 40;
    o.change_text = "ab"; /* duplicate of id 262 */
    write_tiny("dup.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "duplicate"), "%s", err.msg);

    o = tiny_default();
    o.model = "bert";
    write_tiny("bert.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(err.msg, "'bert'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "tokenizer.ggml.model"), "%s", err.msg);

    /* Missing scores are allowed (llama.cpp: all 0.0). */
    o = tiny_default();
    o.omit_scores = 1;
    write_tiny("noscores.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_OK, "%s", err.msg);
    sd_vocab_free(v);
}

/* ------------------------------------------------------------------ tiny BPE vocabulary */

/* ids 0..255: the GPT-2 character of byte i (bytes_to_unicode, written here again), then
 * the merge results, then special tokens. Merges (rank: rule): 0 "h e", 1 "Ġ t", 2 "Ġt he",
 * 3 "a b", 4 "ab c". */
#define BPE_HE     256
#define BPE_GT     257 /* "Ġt" */
#define BPE_GTHE   258 /* "Ġthe" */
#define BPE_AB     259
#define BPE_ABC    260
#define BPE_EOT    261 /* <|endoftext|> control */
#define BPE_IM_ST  262 /* <|im_start|> control */
#define BPE_IM_END 263 /* <|im_end|>: written NORMAL, llama.cpp's fixup makes it control */
#define BPE_USER   264 /* <U> user-defined */
#define N_TINY_BPE 265

static unsigned gpt2_char(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE));
    return 256 + n;
}

static void utf8_char(unsigned cp, char *o) {
    if (cp < 0x80)
        o[0] = (char)cp, o[1] = 0;
    else
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), o[2] = 0;
}

typedef struct bpe_opts {
    const char *pre; /* NULL: key absent */
    int omit_merges, short_types, n_extra;
    const char *merge3; /* replaces rule 3 "a b" */
    int32_t change_id;  /* -1: none */
    const char *change_text;
    int32_t change_type_id; /* -1: none */
    int32_t change_type;
    int add_bos, add_eos; /* -1: key absent */
    int32_t eos;          /* -2: key absent */
    const char *chat_template;
} bpe_opts;

static bpe_opts bpe_default(void) {
    bpe_opts o = {0};
    o.pre = "gpt-2";
    o.change_id = o.change_type_id = -1;
    o.add_bos = o.add_eos = -1;
    o.eos = BPE_EOT;
    return o;
}

static void write_bpe(const char *name, bpe_opts o, char *path_out, size_t cap) {
    static const char *extra[] = {"he",           "\xc4\xa0t",  "\xc4\xa0the",
                                  "ab",           "abc",        "<|endoftext|>",
                                  "<|im_start|>", "<|im_end|>", "<U>"};
    const int32_t n = N_TINY_BPE + o.n_extra;
    char **texts = calloc((size_t)n, sizeof *texts);
    int32_t *types = calloc((size_t)n, sizeof *types);
    for (int32_t i = 0; i < n; i++) {
        texts[i] = calloc(1, 32);
        types[i] = 1;
        if (i < 256)
            utf8_char(gpt2_char((unsigned)i), texts[i]);
        else if (i < N_TINY_BPE)
            strcpy(texts[i], extra[i - 256]);
        else
            snprintf(texts[i], 32, "[PAD%d]", (int)i), types[i] = 4;
    }
    types[BPE_EOT] = types[BPE_IM_ST] = 3;
    types[BPE_USER] = 4;
    if (o.change_id >= 0) strcpy(texts[o.change_id], o.change_text);
    if (o.change_type_id >= 0) types[o.change_type_id] = o.change_type;
    const char *merges[5] = {"h e", "\xc4\xa0 t", "\xc4\xa0t he", "a b", "ab c"};
    if (o.merge3) merges[3] = o.merge3;
    sd_gguf_writer *w = sd_gguf_writer_new();
    cr_assert_not_null(w);
    cr_assert_eq(sd_gguf_set_str(w, "general.architecture", "llama"), SD_OK);
    cr_assert_eq(sd_gguf_set_str(w, "tokenizer.ggml.model", "gpt2"), SD_OK);
    if (o.pre) cr_assert_eq(sd_gguf_set_str(w, "tokenizer.ggml.pre", o.pre), SD_OK);
    cr_assert_eq(
        sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, (uint64_t)n),
        SD_OK);
    cr_assert_eq(sd_gguf_set_arr(w, "tokenizer.ggml.token_type", SD_GGUF_I32, types,
                                 (uint64_t)(n - (o.short_types ? 1 : 0))),
                 SD_OK);
    if (!o.omit_merges)
        cr_assert_eq(sd_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 5), SD_OK);
    cr_assert_eq(sd_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", BPE_EOT), SD_OK);
    if (o.eos != -2) cr_assert_eq(sd_gguf_set_i32(w, "tokenizer.ggml.eos_token_id", o.eos), SD_OK);
    if (o.add_bos >= 0)
        cr_assert_eq(sd_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", o.add_bos), SD_OK);
    if (o.add_eos >= 0)
        cr_assert_eq(sd_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", o.add_eos), SD_OK);
    if (o.chat_template)
        cr_assert_eq(sd_gguf_set_str(w, "tokenizer.chat_template", o.chat_template), SD_OK);
    tu_path(path_out, cap, tmpdir, name);
    sd_error err = {0};
    cr_assert_eq(sd_gguf_writer_write(w, path_out, &err), SD_OK, "%s", err.msg);
    sd_gguf_writer_free(w);
    for (int32_t i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(types);
}

static sd_vocab *bpe_load(bpe_opts o) {
    char p[512];
    write_bpe("bpe.gguf", o, p, sizeof p);
    sd_vocab *v = NULL;
    sd_error err = {0};
    cr_assert_eq(try_load(p, &v, &err), SD_OK, "%s", err.msg);
    return v;
}

static void expect_ids(const sd_vocab *v, const char *text, unsigned flags, const int32_t *want,
                       size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, text, strlen(text), flags, &ids, &n, &err), SD_OK, "%s",
                 err.msg);
    cr_assert_eq(n, n_want, "'%s': %zu ids, expected %zu", text, n, n_want);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "'%s': id %zu is %d, expected %d", text, i, (int)ids[i],
                     (int)want[i]);
    free(ids);
}

static void expect_text(const sd_vocab *v, const int32_t *ids, size_t n, unsigned flags,
                        const char *want) {
    char *s = NULL;
    size_t sl = 0;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, flags, &s, &sl, &err), SD_OK, "%s", err.msg);
    cr_assert_str_eq(s, want);
    free(s);
}

TestSuite(vocab_bpe, .init = mk_tmp, .fini = rm_tmp);

Test(vocab_bpe, merges_by_rank) {
    sd_vocab *v = bpe_load(bpe_default());
    cr_assert_eq(sd_vocab_get_type(v), SD_VOCAB_BPE);
    cr_assert_str_eq(sd_vocab_model_name(v), "gpt2");
    cr_assert_str_eq(sd_vocab_pre_name(v), "gpt-2");
    cr_assert_eq(sd_vocab_n_merges(v), 5);
    cr_assert_eq(sd_vocab_add_bos(v), 0); /* BPE default, gpt-2 pre-tokenizer */
    /* "the" -> t h e: (h,e) rank 0 -> t he: no rule for (t, he). " the" -> Ġ t h e:
     * (h,e) rank 0, then (Ġ,t) rank 1, then (Ġt,he) rank 2 -> Ġthe. */
    expect_ids(v, "the the", 0, (int32_t[]){'t', BPE_HE, BPE_GTHE}, 3);
    /* "abc": (a,b) rank 3 -> ab c -> (ab,c) rank 4 -> abc; "cab": c (a,b) -> c ab */
    expect_ids(v, "abc cab", 0, (int32_t[]){BPE_ABC, ' ', 'c', BPE_AB}, 4);
    /* the words of the gpt2 pre-tokenizer: "'s" alone, " 123" together, spaces */
    expect_ids(v, "it's", 0, (int32_t[]){'i', 't', '\'', 's'}, 4);
    /* ids 0..255 are the bytes' characters: a space is id 32 ("Ġ"); "é" is C3 A9 */
    expect_ids(v, "\xc3\xa9", 0, (int32_t[]){0xC3, 0xA9}, 2);
    /* invalid UTF-8 becomes U+FFFD (EF BF BD) before byte encoding, as llama.cpp */
    expect_ids(v, "\xff", 0, (int32_t[]){0xEF, 0xBF, 0xBD}, 3);
    /* decoding: GPT-2 characters back to bytes; clean_spaces (gpt-2) drops " ," etc. */
    expect_text(v, (int32_t[]){'t', BPE_HE, BPE_GTHE}, 3, 0, "the the");
    expect_text(v, (int32_t[]){'a', ' ', ',', ' ', '?'}, 5, 0, "a,?");
    expect_text(v, (int32_t[]){0xC3, 0xA9}, 2, 0, "\xc3\xa9");
    char buf[8];
    cr_assert_eq(sd_vocab_token_to_piece(v, BPE_GT, 0, buf, sizeof buf), 2);
    cr_assert(memcmp(buf, " t", 2) == 0);
    sd_vocab_free(v);
}

Test(vocab_bpe, special_tokens) {
    sd_vocab *v = bpe_load(bpe_default());
    const char *t = "<|im_start|>the<|im_end|><U>";
    /* parse_special: control tokens split out; user-defined always */
    expect_ids(v, t, SD_VOCAB_PARSE_SPECIAL,
               (int32_t[]){BPE_IM_ST, 't', BPE_HE, BPE_IM_END, BPE_USER}, 5);
    /* without: "<|im_start|>" is text ("<", "|", ...), <U> is still a token */
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, t, strlen(t), 0, &ids, &n, &err), SD_OK);
    cr_assert_eq(ids[0], '<');
    cr_assert_eq(ids[n - 1], BPE_USER);
    for (size_t i = 0; i < n; i++)
        cr_assert(ids[i] != BPE_IM_ST && ids[i] != BPE_IM_END, "id %zu", i);
    free(ids);
    /* <|im_end|> was written normal: llama.cpp's fixup makes it control and end-of-gen */
    cr_assert(sd_vocab_is_control(v, BPE_IM_END));
    cr_assert(sd_vocab_is_eog(v, BPE_IM_END));
    cr_assert(sd_vocab_is_eog(v, BPE_EOT));
    cr_assert(!sd_vocab_is_eog(v, BPE_IM_ST));
    int32_t n_eog;
    const int32_t *eog = sd_vocab_eog_ids(v, &n_eog);
    cr_assert_eq(n_eog, 2);
    cr_assert_eq(eog[0], BPE_EOT);
    cr_assert_eq(eog[1], BPE_IM_END);
    /* eot: no key; <|im_end|> comes before <|endoftext|> in llama.cpp's end-of-turn list */
    cr_assert_eq(sd_vocab_eot(v), BPE_IM_END);
    /* decoding: control "" unless unparse_special; user-defined always as written */
    int32_t seq[] = {BPE_IM_ST, 't', BPE_IM_END, BPE_USER};
    expect_text(v, seq, 4, 0, "t<U>");
    expect_text(v, seq, 4, SD_VOCAB_UNPARSE_SPECIAL, "<|im_start|>t<|im_end|><U>");
    sd_vocab_free(v);
}

Test(vocab_bpe, add_special) {
    bpe_opts o = bpe_default();
    o.add_bos = 1;
    o.add_eos = 1;
    sd_vocab *v = bpe_load(o);
    expect_ids(v, "ab", SD_VOCAB_ADD_SPECIAL, (int32_t[]){BPE_EOT, BPE_AB, BPE_EOT}, 3);
    expect_ids(v, "", SD_VOCAB_ADD_SPECIAL, (int32_t[]){BPE_EOT, BPE_EOT}, 2);
    expect_ids(v, "", 0, NULL, 0);
    int32_t seq[] = {BPE_EOT, BPE_AB, BPE_EOT};
    expect_text(v, seq, 3, SD_VOCAB_UNPARSE_SPECIAL, "<|endoftext|>ab<|endoftext|>");
    expect_text(v, seq, 3, SD_VOCAB_UNPARSE_SPECIAL | SD_VOCAB_REMOVE_SPECIAL, "ab");
    sd_vocab_free(v);
    /* the Llama 3 pre-tokenizers default to add_bos (and ignore_merges) */
    o = bpe_default();
    o.pre = "llama-bpe";
    v = bpe_load(o);
    cr_assert_eq(sd_vocab_add_bos(v), 1);
    expect_ids(v, "the", SD_VOCAB_ADD_SPECIAL, (int32_t[]){BPE_EOT, 't', BPE_HE}, 3);
    sd_vocab_free(v);
}

/* One bad-input case: the load fails with status st and a one-line message naming the
 * file and each of the needles. */
static void expect_load_error(bpe_opts o, int st, const char *n1, const char *n2) {
    char p[512];
    write_bpe("bad.gguf", o, p, sizeof p);
    sd_vocab *v = (sd_vocab *)1;
    sd_error err = {0};
    cr_assert_eq(try_load(p, &v, &err), st, "expected status %d: '%s'", st, err.msg);
    cr_assert_null(v);
    cr_assert_null(strchr(err.msg, '\n'), "one-line message: %s", err.msg);
    cr_assert_not_null(strstr(err.msg, "bad.gguf"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, n1), "'%s' not in: %s", n1, err.msg);
    if (n2) cr_assert_not_null(strstr(err.msg, n2), "'%s' not in: %s", n2, err.msg);
}

Test(vocab_bpe, bad_input) {
    bpe_opts o = bpe_default();
    o.pre = "no-such-pre";
    expect_load_error(o, SD_ERR_UNSUPPORTED, "tokenizer.ggml.pre", "no-such-pre");
    o = bpe_default();
    o.omit_merges = 1;
    expect_load_error(o, SD_ERR_FORMAT, "tokenizer.ggml.merges", "missing");
    o = bpe_default();
    o.merge3 = "ab"; /* no space */
    expect_load_error(o, SD_ERR_FORMAT, "tokenizer.ggml.merges", "malformed");
    o = bpe_default();
    o.merge3 = "a zz"; /* right side not a token */
    expect_load_error(o, SD_ERR_FORMAT, "'tokenizer.ggml.merges'[3]", "not a token");
    o = bpe_default();
    o.merge3 = "b a"; /* "ba" is not a token */
    expect_load_error(o, SD_ERR_FORMAT, "merged text", "not a token");
    o = bpe_default();
    o.merge3 = "a "; /* empty right side */
    expect_load_error(o, SD_ERR_FORMAT, "'tokenizer.ggml.merges'[3]", NULL);
    o = bpe_default();
    o.change_id = BPE_ABC;
    o.change_text = "he"; /* duplicate of BPE_HE */
    expect_load_error(o, SD_ERR_FORMAT, "duplicate", "tokenizer.ggml.tokens");
    o = bpe_default();
    o.change_id = BPE_ABC;
    o.change_text = "a\xc3"; /* truncated UTF-8 */
    expect_load_error(o, SD_ERR_FORMAT, "'tokenizer.ggml.tokens'[260]", "UTF-8");
    o = bpe_default();
    o.short_types = 1;
    expect_load_error(o, SD_ERR_FORMAT, "tokenizer.ggml.token_type", "expected 265");
    o = bpe_default();
    o.add_eos = 1;
    o.eos = -1; /* none */
    expect_load_error(o, SD_ERR_FORMAT, "tokenizer.ggml.add_eos_token", "eos_token_id");
    o = bpe_default();
    o.eos = 4000;
    expect_load_error(o, SD_ERR_FORMAT, "tokenizer.ggml.eos_token_id", "out of range");
    /* a raw space is fine in a user-defined or control token */
    o = bpe_default();
    o.change_id = BPE_USER;
    o.change_text = "<a b>";
    sd_vocab *v = bpe_load(o);
    expect_ids(v, "x<a b>", 0, (int32_t[]){'x', BPE_USER}, 2);
    sd_vocab_free(v);
    /* no tokenizer.ggml.pre: "default", as llama.cpp */
    o = bpe_default();
    o.pre = NULL;
    v = bpe_load(o);
    cr_assert_str_eq(sd_vocab_pre_name(v), "");
    expect_ids(v, "the", 0, (int32_t[]){'t', BPE_HE}, 2);
    sd_vocab_free(v);
}

/* Normal tokens with characters outside GPT-2's byte alphabet (Command-R's vocabulary has
 * U+200D, llama.cpp loads it) load, and decode as their text as written (HF tokenizers'
 * ByteLevel decoder); no text tokenizes to them: the text's bytes are GPT-2 characters. */
Test(vocab_bpe, tokens_outside_the_byte_alphabet) {
    const char *const texts[2] = {"a c", "\xe2\x80\x8d"}; /* a raw space; U+200D */
    for (int i = 0; i < 2; i++) {
        bpe_opts o = bpe_default();
        o.change_id = 0; /* byte 0x00's token */
        o.change_text = texts[i];
        sd_vocab *v = bpe_load(o);
        expect_text(v, (int32_t[]){'x', 0, 'y'}, 3, 0, i ? "x\xe2\x80\x8dy" : "xa cy");
        char piece[16];
        cr_assert_eq(sd_vocab_token_to_piece(v, 0, 0, piece, sizeof piece), (int)strlen(texts[i]));
        cr_assert_eq(memcmp(piece, texts[i], strlen(texts[i])), 0);
        int32_t *ids = NULL;
        size_t n = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(v, texts[i], strlen(texts[i]), 0, &ids, &n, &err), SD_OK);
        for (size_t k = 0; k < n; k++)
            cr_expect_neq(ids[k], 0, "'%s' tokenized to the token of that text", texts[i]);
        char *back = NULL;
        size_t bl = 0;
        cr_assert_eq(sd_vocab_detokenize(v, ids, n, 0, &back, &bl, &err), SD_OK);
        cr_expect_str_eq(back, texts[i]);
        free(back);
        free(ids);
        sd_vocab_free(v);
    }
}

/* Random damage to every token text and merge line: the load succeeds or fails with a
 * one-line message naming the file, and what loads tokenizes and decodes (ASan-checked). */
Test(vocab_bpe, random_mutations) {
    uint64_t rng = 12345;
    for (int round = 0; round < 300; round++) {
        bpe_opts o = bpe_default();
        char text[8], merge[8];
        for (int i = 0; i < 7; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            text[i] = (char)(rng >> 56);
            merge[i] = (char)(rng >> 48);
        }
        text[1 + round % 6] = merge[1 + round % 5] = '\0';
        if (round % 3 == 0) merge[1] = ' ';
        o.change_id = (int32_t)(rng % N_TINY_BPE);
        o.change_text = text;
        o.merge3 = merge;
        if (round % 4 == 1) {
            o.change_type_id = (int32_t)((rng >> 20) % N_TINY_BPE);
            o.change_type = (int32_t)((rng >> 30) % 9) - 1;
        }
        char p[512];
        write_bpe("m.gguf", o, p, sizeof p);
        sd_vocab *v = NULL;
        sd_error err = {0};
        int rc = try_load(p, &v, &err);
        if (rc != SD_OK) {
            cr_assert_null(v);
            cr_assert_null(strchr(err.msg, '\n'), "%s", err.msg);
            cr_assert_not_null(strstr(err.msg, "m.gguf"), "%s", err.msg);
            continue;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        cr_assert_eq(
            sd_vocab_tokenize(v, "the abc <|im_end|>", 18, SD_VOCAB_PARSE_SPECIAL, &ids, &n, &err),
            SD_OK, "%s", err.msg);
        char *s = NULL;
        cr_assert_eq(sd_vocab_detokenize(v, ids, n, SD_VOCAB_UNPARSE_SPECIAL, &s, NULL, &err),
                     SD_OK);
        free(s);
        free(ids);
        sd_vocab_free(v);
    }
}

/* Pairing byte-level BPE vocabularies: same pre-tokenizer, merges and special ids; up to
 * 128 extra tokens (Qwen2.5-0.5B vs 7B). */
Test(vocab_bpe, pairing) {
    const char *pt = "target.gguf", *pd = "draft.gguf"; /* the names the messages give */
    sd_error err = {0};
    sd_vocab *t = bpe_load(bpe_default()), *d;
    bpe_opts o = bpe_default();
    o.n_extra = 128;
    d = bpe_load(o);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_OK, "%s", err.msg);
    sd_vocab_free(d);
    o.n_extra = 129;
    d = bpe_load(o);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "tokens"), "%s", err.msg);
    sd_vocab_free(d);

    o = bpe_default();
    o.pre = "llama-bpe";
    d = bpe_load(o);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_ERR_MISMATCH);
    cr_assert_str_eq(err.msg, "draft vocabulary does not match target: target.gguf has "
                              "pre-tokenizer 'gpt-2', draft.gguf has 'llama-bpe' "
                              "(tokenizer.ggml.pre)");
    sd_vocab_free(d);

    o = bpe_default();
    o.merge3 = "ab c"; /* rules 3 and 4 both "ab c": rank 3 differs */
    d = bpe_load(o);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_ERR_MISMATCH);
    cr_assert_str_eq(err.msg, "draft vocabulary does not match target: target.gguf merge 3 is "
                              "'a b', draft.gguf merge 3 is 'ab c' (tokenizer.ggml.merges)");
    sd_vocab_free(d);

    o = bpe_default();
    o.eos = BPE_IM_END;
    d = bpe_load(o);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "EOS"), "%s", err.msg);
    sd_vocab_free(d);

    o = bpe_default();
    o.change_id = BPE_USER;
    o.change_text = "<V>";
    d = bpe_load(o);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, pd, &err), SD_ERR_MISMATCH);
    cr_assert_str_eq(err.msg, "draft vocabulary does not match target: target.gguf id 264 is "
                              "'<U>', draft.gguf id 264 is '<V>'");
    sd_vocab_free(d);

    /* SPM vs BPE */
    char ps[512];
    write_tiny("spm.gguf", tiny_default(), ps, sizeof ps);
    cr_assert_eq(try_load(ps, &d, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_vocab_check_pair(t, pt, d, ps, &err), SD_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "tokenizer model 'gpt2'"), "%s", err.msg);
    sd_vocab_free(d);
    sd_vocab_free(t);
}

/* clean_spaces (gpt-2 and most BPE vocabularies), from llama.cpp's rules: a space before
 * ? ! . , goes; " ' " becomes "'" (and the space after it is no longer a space for the
 * next rule); a space before 's 'm 're 've goes, not before 't 'd 'll. */
Test(vocab_bpe, clean_spaces) {
    sd_vocab *v = bpe_load(bpe_default());
    static const char *const cases[][2] = {
        {"x , y . z ! w ?", "x, y. z! w?"},
        {" ' ' ", "'' "},
        {"a 's b 'm c 're d 've e 't f 'd g 'll", "a's b'm c're d've e 't f 'd g 'll"},
        {"  ,", " ,"},
        {"' '", "' '"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *in = cases[c][0];
        int32_t ids[64];
        size_t n = strlen(in);
        for (size_t i = 0; i < n; i++)
            ids[i] = (unsigned char)in[i]; /* id b is byte b's character */
        expect_text(v, ids, n, 0, cases[c][1]);
    }
    sd_vocab_free(v);
}
