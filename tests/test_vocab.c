/*
 * Tokenizer tests: llama.cpp's SPM test vectors (models/ggml-vocab-llama-spm.gguf with
 * its .inp/.out, split exactly as llama.cpp's tests/test-tokenizer-0.cpp does), the
 * vocabulary pairing check, and load errors on small vocab GGUFs written here.
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

#define VOCAB_DIR tu_shared("vocab")
#define SPM_GGUF  tu_shared("vocab/ggml-vocab-llama-spm.gguf")

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

static int shared_present(void) {
    return access(SPM_GGUF, R_OK) == 0;
}

static void skip_without_shared(void) {
    if (!shared_present())
        cr_skip_test("shared test data not found at %s (the vocab vectors need ../shared/data "
                     "or $SD_SHARED_DATA)",
                     SPM_GGUF);
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

/* The test strings, split as test-tokenizer-0.cpp: separator "\n__ggml_vocab_test__\n";
 * the newline before and after the marker line belongs to the separator. */
typedef struct vec {
    char *inp;
    size_t inp_len;
    int32_t *ids;
    size_t n_ids;
} vec;

static size_t load_vectors(const char *base, vec **out) {
    char p_inp[1024], p_out[1024];
    snprintf(p_inp, sizeof p_inp, "%s.inp", base);
    snprintf(p_out, sizeof p_out, "%s.out", base);
    size_t li = 0, lo = 0;
    char *inp = read_all(p_inp, &li);
    char *outs = read_all(p_out, &lo);
    cr_assert(inp && outs, "cannot read %s / %s", p_inp, p_out);

    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep);
    vec *v = NULL;
    size_t n = 0;
    size_t pos = 0;
    while (pos < li) {
        const char *m = memmem(inp + pos, li - pos, sep, sl);
        size_t end = m ? (size_t)(m - inp) : li;
        v = realloc(v, (n + 1) * sizeof *v);
        v[n].inp_len = end - pos;
        v[n].inp = malloc(v[n].inp_len + 1);
        memcpy(v[n].inp, inp + pos, v[n].inp_len);
        v[n].inp[v[n].inp_len] = '\0';
        v[n].ids = NULL;
        v[n].n_ids = 0;
        n++;
        if (!m) break;
        pos = end + sl;
    }

    /* .out: one line per input, ids separated by spaces. */
    size_t line = 0;
    char *save = NULL;
    char *s = outs;
    for (;;) {
        char *nl = strchr(s, '\n');
        if (!nl && *s == '\0') break;
        if (nl) *nl = '\0';
        cr_assert_lt(line, n, "%s has more lines than %s has inputs", p_out, p_inp);
        for (char *tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            v[line].ids = realloc(v[line].ids, (v[line].n_ids + 1) * sizeof(int32_t));
            v[line].ids[v[line].n_ids++] = (int32_t)strtol(tok, NULL, 10);
        }
        line++;
        if (!nl) break;
        s = nl + 1;
    }
    cr_assert_eq(line, n, "%s: %zu lines for %zu inputs", p_out, line, n);
    free(inp);
    free(outs);
    *out = v;
    return n;
}

static void free_vectors(vec *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i].inp);
        free(v[i].ids);
    }
    free(v);
}

static void fmt_ids(const int32_t *ids, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && k + 16 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? " " : "", (int)ids[i]);
}

/* ------------------------------------------------------------------ SPM vectors */

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

Test(vocab_spm, encode_matches_llama_cpp) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    vec *vs;
    size_t n = load_vectors(SPM_GGUF, &vs);
    cr_assert_eq(n, 46, "expected 46 test strings, got %zu", n);
    size_t pass = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(v, vs[i].inp, vs[i].inp_len, 0, &ids, &n_ids, &err), SD_OK,
                     "%s", err.msg);
        int ok = n_ids == vs[i].n_ids &&
                 (n_ids == 0 || memcmp(ids, vs[i].ids, n_ids * sizeof *ids) == 0);
        if (ok) {
            pass++;
        } else {
            char a[4096], b[4096];
            fmt_ids(ids, n_ids, a, sizeof a);
            fmt_ids(vs[i].ids, vs[i].n_ids, b, sizeof b);
            cr_log_error("vector %zu '%s':\n  got      %s\n  expected %s", i, vs[i].inp, a, b);
        }
        free(ids);
    }
    cr_log_info("llama-spm encode: %zu/%zu vectors pass", pass, n);
    cr_expect_eq(pass, n, "%zu of %zu vectors differ from llama.cpp", n - pass, n);
    free_vectors(vs, n);
    sd_vocab_free(v);
}

Test(vocab_spm, decode_roundtrip) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    vec *vs;
    size_t n = load_vectors(SPM_GGUF, &vs);
    size_t pass = 0;
    for (size_t i = 0; i < n; i++) {
        char *s = NULL;
        size_t sl = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_detokenize(v, vs[i].ids, vs[i].n_ids, &s, &sl, &err), SD_OK, "%s",
                     err.msg);
        cr_assert_eq(strlen(s), sl);
        if (sl == vs[i].inp_len && memcmp(s, vs[i].inp, sl) == 0)
            pass++;
        else
            cr_log_error("vector %zu: decoded '%s', expected '%s'", i, s, vs[i].inp);
        free(s);
    }
    cr_log_info("llama-spm decode: %zu/%zu vectors pass", pass, n);
    cr_expect_eq(pass, n);
    free_vectors(vs, n);
    sd_vocab_free(v);
}

Test(vocab_spm, bos_and_pieces) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    int32_t *ids;
    size_t n;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, "Hello world", 11, 1, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 15043);
    cr_assert_eq(ids[2], 3186);
    /* llama.cpp: only the first token's leading space is stripped; BOS is that token. */
    char *s;
    size_t sl;
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, " Hello world");
    free(s);
    cr_assert_eq(sd_vocab_detokenize(v, ids + 1, n - 1, &s, &sl, &err), SD_OK);
    cr_assert_str_eq(s, "Hello world");
    free(s);
    free(ids);

    cr_assert_eq(sd_vocab_tokenize(v, "", 0, 1, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(ids[0], 1);
    free(ids);
    cr_assert_eq(sd_vocab_tokenize(v, "", 0, 0, &ids, &n, &err), SD_OK);
    cr_assert_eq(n, 0);
    free(ids);

    char buf[64];
    cr_assert_eq(sd_vocab_token_to_piece(v, 15043, buf, sizeof buf), 6);
    cr_assert(memcmp(buf, " Hello", 6) == 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 15043, buf, 2), 6); /* too small: full length */
    cr_assert_eq(sd_vocab_token_to_piece(v, 13, buf, sizeof buf), 1);
    cr_assert_eq(buf[0], '\n');
    cr_assert_eq(sd_vocab_token_to_piece(v, 1, buf, sizeof buf), 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 2, buf, sizeof buf), 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 0, buf, sizeof buf), 0);
    cr_assert_eq(sd_vocab_token_to_piece(v, 32000, buf, sizeof buf), -1);
    cr_assert_eq(sd_vocab_token_to_piece(v, -5, buf, sizeof buf), -1);

    /* Control-token text is plain text (parse_special = false): "<s>" is not id 1. */
    cr_assert_eq(sd_vocab_tokenize(v, "<s>", 3, 0, &ids, &n, &err), SD_OK);
    cr_assert_gt(n, 1);
    for (size_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 1);
    free(ids);

    int32_t bad = 40000;
    cr_assert_eq(sd_vocab_detokenize(v, &bad, 1, &s, &sl, &err), SD_ERR_ARG);
    sd_vocab_free(v);
}

/* Tokenizing must scale (heap + hash table): 200 KB of story text, round trip. */
Test(vocab_spm, long_text_roundtrip, .timeout = 60) {
    skip_without_shared();
    sd_vocab *v = load_vocab_file(SPM_GGUF);
    size_t len = 0;
    char *txt = read_all(tu_shared("tinystories/valid.txt"), &len);
    if (!txt) cr_skip_test("tinystories/valid.txt missing");
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
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, &s, &sl, &err), SD_OK);
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
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, &s, &sl, &err), SD_OK);
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

/* Other tokenizer models are refused cleanly. */
Test(vocab_spm, other_models_unsupported) {
    skip_without_shared();
    const char *files[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-falcon.gguf",
                           "ggml-vocab-starcoder.gguf", "ggml-vocab-deepseek-llm.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, files[i]);
        sd_gguf *g = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "open %s: %s", path, err.msg);
        sd_vocab *v = (sd_vocab *)1;
        cr_assert_eq(sd_vocab_load(g, &v, &err), SD_ERR_UNSUPPORTED, "%s: %s", path, err.msg);
        cr_assert_null(v);
        cr_assert_eq(err.status, SD_ERR_UNSUPPORTED);
        cr_assert_null(strchr(err.msg, '\n'), "one-line message: %s", err.msg);
        cr_assert_not_null(strstr(err.msg, "gpt2"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, files[i]), "%s", err.msg);
        sd_gguf_close(g);
    }
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
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, &s, &sl, &err), SD_OK);
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
    o.model = "gpt2";
    write_tiny("gpt2.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(err.msg, "gpt2"), "%s", err.msg);

    /* Missing scores are allowed (llama.cpp: all 0.0). */
    o = tiny_default();
    o.omit_scores = 1;
    write_tiny("noscores.gguf", o, p, sizeof p);
    sd_error_clear(&err);
    cr_assert_eq(try_load(p, &v, &err), SD_OK, "%s", err.msg);
    sd_vocab_free(v);
}
