/*
 * Tokenizer against llama.cpp's test vectors: every vocabulary of ../shared/data/vocab
 * (ggml-vocab-*.gguf with .inp/.out, copied from llama.cpp's models/, see
 * shared/data/SOURCES.md), split exactly as llama.cpp's tests/test-tokenizer-0.cpp does.
 *
 * What llama.cpp's test-tokenizer-0 asserts: encode(input, add_special = false,
 * parse_special = false) == .out, for every vector. We assert the same, and decode the
 * expected ids (detokenize with remove_special = false, unparse_special = false): the
 * input itself for vocabularies without clean_spaces (SPM, deepseek-llm, qwen2), and the
 * input after the clean-up rules (written independently below from llama.cpp's
 * description: " ?"/" !"/" ."/" ," -> no space, " ' " -> "'", " 's"/" 'm"/" 're"/" 've"
 * -> no space) for the others.
 * Plus two round trips from llama.cpp's test-tokenizer-1-bpe (disabled there for slowness,
 * so run only where they hold, see each test): every token's text survives
 * detokenize -> tokenize(parse_special) -> detokenize, and every code point survives
 * tokenize -> detokenize.
 * Tests skip (cr_skip_test) when ../shared is absent.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab_impl.h"
#include "tests/testutil.h"

static void vocab_path(char *buf, size_t cap, const char *name) {
    tu_llamacpp_vocab(name, buf, cap);
}

static void skip_without(const char *path) {
    tu_need_path(path, "llama.cpp's vocabularies: ../shared/data or scripts/get_vocabs.sh");
}

static sd_vocab *load_named(const char *name) {
    char path[1024];
    vocab_path(path, sizeof path, name);
    skip_without(path);
    sd_gguf *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_gguf_open(path, &g, &err), SD_OK, "open %s: %s", path, err.msg);
    sd_vocab *v = NULL;
    double t0 = sd_time_ms();
    int rc = sd_vocab_load(g, &v, &err);
    cr_log_info("%s: loaded in %.1f ms", name, sd_time_ms() - t0);
    sd_gguf_close(g);
    cr_assert_eq(rc, SD_OK, "load %s: %s", path, err.msg);
    return v;
}

/* ------------------------------------------------------------------ vectors */

typedef struct vec {
    char *inp;
    size_t inp_len;
    int32_t *ids;
    size_t n_ids;
} vec;

/* Inputs separated by "\n__ggml_vocab_test__\n" (test-tokenizer-0's split), one .out line
 * of space-separated ids per input. */
static size_t load_vectors(const char *name, vec **out) {
    char p_inp[1100], p_out[1100], base[1024];
    vocab_path(base, sizeof base, name);
    snprintf(p_inp, sizeof p_inp, "%s.inp", base);
    snprintf(p_out, sizeof p_out, "%s.out", base);
    size_t li = 0, lo = 0;
    char *inp = (char *)tu_read_file(p_inp, &li);
    char *outs = (char *)tu_read_file(p_out, &lo);
    cr_assert(inp && outs, "cannot read %s / %s", p_inp, p_out);
    const char *sep = "\n__ggml_vocab_test__\n";
    const size_t sl = strlen(sep);
    vec *v = NULL;
    size_t n = 0;
    for (size_t pos = 0; pos < li;) {
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
    size_t line = 0;
    char *save = NULL;
    for (char *s = outs;;) {
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

/* One left-to-right pass replacing each occurrence of a pattern (tried in order). */
static char *replace_pass(const char *s, const char *const (*pairs)[2], size_t n_pairs) {
    size_t len = strlen(s), k = 0;
    char *o = malloc(len + 1);
    for (size_t i = 0; i < len;) {
        size_t j;
        for (j = 0; j < n_pairs; j++) {
            size_t pl = strlen(pairs[j][0]);
            if (strncmp(s + i, pairs[j][0], pl) == 0) {
                size_t rl = strlen(pairs[j][1]);
                memcpy(o + k, pairs[j][1], rl);
                k += rl;
                i += pl;
                break;
            }
        }
        if (j == n_pairs) o[k++] = s[i++];
    }
    o[k] = '\0';
    return o;
}

/* The detokenizer's clean_spaces rules, as three passes of replacements. */
static char *clean_up(const char *s) {
    static const char *const p1[][2] = {{" ?", "?"}, {" !", "!"}, {" .", "."}, {" ,", ","}};
    static const char *const p2[][2] = {{" ' ", "'"}};
    static const char *const p3[][2] = {
        {" 's", "'s"}, {" 'm", "'m"}, {" 're", "'re"}, {" 've", "'ve"}};
    char *a = replace_pass(s, p1, 4), *b = replace_pass(a, p2, 1), *c = replace_pass(b, p3, 4);
    free(a);
    free(b);
    return c;
}

typedef struct vocab_case {
    const char *name;
    size_t n_vectors;
    int clean_spaces;
} vocab_case;

static void check_vectors(vocab_case vc) {
    sd_vocab *v = load_named(vc.name);
    vec *vs;
    size_t n = load_vectors(vc.name, &vs);
    cr_assert_eq(n, vc.n_vectors, "%s: expected %zu test strings, got %zu", vc.name, vc.n_vectors,
                 n);
    size_t enc_ok = 0, dec_ok = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        sd_error err = {0};
        cr_assert_eq(sd_vocab_tokenize(v, vs[i].inp, vs[i].inp_len, 0, &ids, &n_ids, &err), SD_OK,
                     "%s", err.msg);
        if (n_ids == vs[i].n_ids && (n_ids == 0 || !memcmp(ids, vs[i].ids, n_ids * sizeof *ids))) {
            enc_ok++;
        } else {
            char a[4096], b[4096];
            fmt_ids(ids, n_ids, a, sizeof a);
            fmt_ids(vs[i].ids, vs[i].n_ids, b, sizeof b);
            cr_log_error("%s vector %zu '%s':\n  got      %s\n  expected %s", vc.name, i, vs[i].inp,
                         a, b);
        }
        free(ids);

        char *s = NULL;
        size_t sl = 0;
        cr_assert_eq(sd_vocab_detokenize(v, vs[i].ids, vs[i].n_ids, 0, &s, &sl, &err), SD_OK, "%s",
                     err.msg);
        cr_assert_eq(strlen(s), sl);
        char *want = vc.clean_spaces ? clean_up(vs[i].inp) : strdup(vs[i].inp);
        if (strcmp(s, want) == 0)
            dec_ok++;
        else
            cr_log_error("%s vector %zu: decoded '%s', expected '%s'", vc.name, i, s, want);
        free(want);
        free(s);
    }
    cr_log_info("%s: encode %zu/%zu, decode %zu/%zu vectors as llama.cpp", vc.name, enc_ok, n,
                dec_ok, n);
    cr_expect_eq(enc_ok, n, "%s: %zu of %zu encodings differ from llama.cpp", vc.name, n - enc_ok,
                 n);
    cr_expect_eq(dec_ok, n, "%s: %zu of %zu decodings differ", vc.name, n - dec_ok, n);
    free_vectors(vs, n);
    sd_vocab_free(v);
}

Test(vectors, llama_spm) {
    check_vectors((vocab_case){"llama-spm", 46, 0});
}
Test(vectors, gpt_2) {
    check_vectors((vocab_case){"gpt-2", 46, 1});
}
Test(vectors, llama_bpe) {
    check_vectors((vocab_case){"llama-bpe", 46, 1});
}
Test(vectors, qwen2) {
    check_vectors((vocab_case){"qwen2", 46, 0});
}
Test(vectors, deepseek_llm) {
    check_vectors((vocab_case){"deepseek-llm", 46, 0});
}
Test(vectors, falcon) {
    check_vectors((vocab_case){"falcon", 46, 1});
}
Test(vectors, starcoder) {
    check_vectors((vocab_case){"starcoder", 46, 1});
}
/* llama.cpp's vocabularies beyond ../shared/data (scripts/get_vocabs.sh fetches them):
 * the deepseek-coder and qwen35 pre-tokenizers, Command-R's vocabulary (normal tokens
 * outside GPT-2's byte alphabet), and three more spellings already supported. */
Test(vectors, deepseek_coder) {
    check_vectors((vocab_case){"deepseek-coder", 46, 0});
}
Test(vectors, qwen35) {
    check_vectors((vocab_case){"qwen35", 50, 0});
}
Test(vectors, command_r) {
    check_vectors((vocab_case){"command-r", 46, 0});
}
Test(vectors, refact) {
    check_vectors((vocab_case){"refact", 46, 1});
}
Test(vectors, mpt) {
    check_vectors((vocab_case){"mpt", 46, 1});
}
Test(vectors, phi_3) {
    check_vectors((vocab_case){"phi-3", 46, 0});
}

/* ------------------------------------------------------------------ round trips */

static char *detok(const sd_vocab *v, const int32_t *ids, size_t n, unsigned flags) {
    char *s = NULL;
    size_t sl = 0;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_detokenize(v, ids, n, flags, &s, &sl, &err), SD_OK, "%s", err.msg);
    return s;
}

/* 1 if llama.cpp's unicode_cpts_from_utf8 decodes s without a substitution (lead byte
 * structure only: it threw std::invalid_argument otherwise when test-tokenizer-1 was
 * written, and the test skipped such tokens). */
static int llama_utf8_ok(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0, n = strlen(s); i < n;) {
        size_t l = u[i] < 0x80   ? 1
                   : u[i] < 0xC0 ? 0
                   : u[i] < 0xE0 ? 2
                   : u[i] < 0xF0 ? 3
                   : u[i] < 0xF8 ? 4
                                 : 0;
        if (l == 0 || i + l > n) return 0;
        for (size_t j = 1; j < l; j++)
            if ((u[i + j] & 0xC0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

/* test-tokenizer-1-{bpe,spm}: every token's text (unparse_special) tokenized with
 * parse_special decodes back to the same text; texts that are not UTF-8 (single bytes of
 * a multi-byte character) are skipped, as there. */
static void token_round_trip(const char *name) {
    sd_vocab *v = load_named(name);
    const int32_t n = sd_vocab_n_tokens(v);
    int32_t bad = 0;
    for (int32_t id = 0; id < n; id++) {
        char *str = detok(v, &id, 1, SD_VOCAB_UNPARSE_SPECIAL);
        if (!llama_utf8_ok(str)) {
            free(str);
            continue;
        }
        int32_t *ids = NULL;
        size_t n_ids = 0;
        sd_error err = {0};
        cr_assert_eq(
            sd_vocab_tokenize(v, str, strlen(str), SD_VOCAB_PARSE_SPECIAL, &ids, &n_ids, &err),
            SD_OK, "%s", err.msg);
        char *check = detok(v, ids, n_ids, SD_VOCAB_UNPARSE_SPECIAL);
        if (strcmp(check, str) != 0 && bad++ < 5)
            cr_log_error("%s: token %d decodes to '%s' but its tokenization decodes to '%s'", name,
                         (int)id, str, check);
        free(check);
        free(ids);
        free(str);
    }
    cr_expect_eq(bad, 0, "%s: %d of %d tokens do not round-trip", name, (int)bad, (int)n);
    sd_vocab_free(v);
}

Test(round_trip, tokens_llama_spm) {
    token_round_trip("llama-spm");
}
Test(round_trip, tokens_gpt_2) {
    token_round_trip("gpt-2");
}
Test(round_trip, tokens_llama_bpe) {
    token_round_trip("llama-bpe");
}
Test(round_trip, tokens_qwen2) {
    token_round_trip("qwen2");
}
Test(round_trip, tokens_deepseek_llm) {
    token_round_trip("deepseek-llm");
}
Test(round_trip, tokens_falcon) {
    token_round_trip("falcon");
}
Test(round_trip, tokens_starcoder) {
    token_round_trip("starcoder");
}
Test(round_trip, tokens_deepseek_coder) {
    token_round_trip("deepseek-coder");
}
Test(round_trip, tokens_qwen35) {
    token_round_trip("qwen35");
}
Test(round_trip, tokens_command_r) {
    token_round_trip("command-r");
}

/* GPT-2 byte -> code point (bytes_to_unicode of GPT-2's encoder.py), written here again. */
static unsigned gpt2_char(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE));
    return 256 + n;
}

static size_t utf8_of(unsigned cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)),
               o[2] = (char)(0x80 | (cp & 63)), 3;
    return o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63)),
           o[2] = (char)(0x80 | ((cp >> 6) & 63)), o[3] = (char)(0x80 | (cp & 63)), 4;
}

/* test-tokenizer-1: every code point (but surrogates and U+40000..U+E0000) tokenized
 * (spm: parse_special, as there) decodes back. A byte-level vocabulary without a token for
 * some byte's GPT-2 character (falcon, starcoder) drops that byte, as llama.cpp does. */
static void codepoint_round_trip(const char *name, int spm) {
    sd_vocab *v = load_named(name);
    int has_byte[256];
    for (unsigned b = 0; b < 256; b++) {
        char t[4];
        size_t tl = utf8_of(gpt2_char(b), t);
        has_byte[b] = spm;
        for (int32_t id = 0; !spm && id < sd_vocab_n_tokens(v) && !has_byte[b]; id++)
            has_byte[b] = strlen(sd_vocab_token_text(v, id)) == tl &&
                          memcmp(sd_vocab_token_text(v, id), t, tl) == 0;
    }
    size_t bad = 0, n = 0;
    for (unsigned cp = 0; cp < 0x110000; cp++) {
        if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x40000 && cp <= 0xE0000)) continue;
        if (spm && cp == 0x2581) continue;
        char str[8], want[8];
        size_t sl = utf8_of(cp, str), wl = 0;
        str[sl] = '\0';
        for (size_t i = 0; i < sl; i++)
            if (has_byte[(unsigned char)str[i]]) want[wl++] = str[i];
        want[wl] = '\0';
        int32_t *ids = NULL;
        size_t n_ids = 0;
        sd_error err = {0};
        cr_assert_eq(
            sd_vocab_tokenize(v, str, sl, spm ? SD_VOCAB_PARSE_SPECIAL : 0, &ids, &n_ids, &err),
            SD_OK, "%s", err.msg);
        char *check = detok(v, ids, n_ids, SD_VOCAB_UNPARSE_SPECIAL);
        if (strcmp(check, want) != 0 && bad++ < 5)
            cr_log_error("%s: U+%04X decodes to '%s' (%zu bytes)", name, cp, check, strlen(check));
        n++;
        free(check);
        free(ids);
    }
    cr_expect_eq(bad, 0, "%s: %zu of %zu code points do not round-trip", name, bad, n);
    sd_vocab_free(v);
}

Test(round_trip, codepoints_llama_spm, .timeout = 600) {
    codepoint_round_trip("llama-spm", 1);
}
Test(round_trip, codepoints_gpt_2, .timeout = 600) {
    codepoint_round_trip("gpt-2", 0);
}
Test(round_trip, codepoints_llama_bpe, .timeout = 600) {
    codepoint_round_trip("llama-bpe", 0);
}
Test(round_trip, codepoints_qwen2, .timeout = 600) {
    codepoint_round_trip("qwen2", 0);
}
Test(round_trip, codepoints_deepseek_llm, .timeout = 600) {
    codepoint_round_trip("deepseek-llm", 0);
}
Test(round_trip, codepoints_falcon, .timeout = 600) {
    codepoint_round_trip("falcon", 0);
}
Test(round_trip, codepoints_starcoder, .timeout = 600) {
    codepoint_round_trip("starcoder", 0);
}

/* ------------------------------------------------------------------ long inputs */

/* 200 KB of stories and a 64 KB word with no pre-tokenizer split round-trip through the
 * BPE merging (qwen2: no clean_spaces, so decode(encode(x)) == x); the timeout only
 * guards against a hang: speed is measured by scripts/bench_tokenize.sh. */
Test(long_input, bpe_round_trip, .timeout = 300) {
    sd_vocab *v = load_named("qwen2");
    size_t len = 0;
    tu_need_path(tu_shared("tinystories/valid.txt"), "TinyStories text, in ../shared/data");
    char *txt = (char *)tu_read_file(tu_shared("tinystories/valid.txt"), &len);
    cr_assert_not_null(txt);
    if (len > 200000) len = 200000;
    while (len > 0 && ((unsigned char)txt[len] & 0xC0) == 0x80)
        len--; /* whole characters */
    const size_t word = 65536;
    txt = realloc(txt, len + word + 1);
    for (size_t i = 0; i < word; i++)
        txt[len + i] = "abcab"[i % 5];
    len += word;
    int32_t *ids = NULL;
    size_t n = 0;
    sd_error err = {0};
    cr_assert_eq(sd_vocab_tokenize(v, txt, len, 0, &ids, &n, &err), SD_OK, "%s", err.msg);
    cr_assert_gt(n, 200000 / 8);
    char *s = detok(v, ids, n, 0);
    cr_assert_eq(strlen(s), len);
    cr_assert(memcmp(s, txt, len) == 0, "round trip differs");
    free(s);
    free(ids);
    free(txt);
    sd_vocab_free(v);
}

/* ------------------------------------------------------------------ pairing */

Test(pairing, shared_vocabularies) {
    const char *names[] = {"llama-spm",    "gpt-2",  "llama-bpe", "qwen2",
                           "deepseek-llm", "falcon", "starcoder"};
    sd_vocab *v[7];
    for (int i = 0; i < 7; i++)
        v[i] = load_named(names[i]);
    sd_error err = {0};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(sd_vocab_check_pair(v[i], "t.gguf", v[i], "d.gguf", &err), SD_OK, "%s: %s",
                     names[i], err.msg);
    /* every pair of different files differs, and the message names both */
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 7; j++) {
            if (i == j) continue;
            sd_error_clear(&err);
            cr_assert_eq(sd_vocab_check_pair(v[i], names[i], v[j], names[j], &err), SD_ERR_MISMATCH,
                         "%s vs %s", names[i], names[j]);
            cr_assert_not_null(strstr(err.msg, names[i]), "%s", err.msg);
            cr_assert_not_null(strstr(err.msg, names[j]), "%s", err.msg);
            cr_assert_null(strchr(err.msg, '\n'), "%s", err.msg);
        }
    cr_assert_eq(sd_vocab_check_pair(v[2], "llama-bpe.gguf", v[3], "qwen2.gguf", &err),
                 SD_ERR_MISMATCH);
    cr_assert_str_eq(err.msg, "draft vocabulary does not match target: llama-bpe.gguf has "
                              "pre-tokenizer 'llama-bpe', qwen2.gguf has 'qwen2' "
                              "(tokenizer.ggml.pre)");
    for (int i = 0; i < 7; i++)
        sd_vocab_free(v[i]);
}

/* ------------------------------------------------------------------ pre-tokenizers */

/* The words pretok_split makes of text, as their UTF-8 joined by '|'. */
static void split_words(pre_type pre, const char *text, char *out, size_t cap) {
    const size_t n = strlen(text);
    uint32_t *cps = malloc((n + 1) * sizeof *cps);
    const size_t n_cps = sd_utf8_decode_lenient(text, n, cps);
    size_t *lens = NULL, n_lens = 0, o = 0, at = 0;
    cr_assert_eq(pretok_split(pre, cps, n_cps, &lens, &n_lens), 0);
    out[0] = '\0';
    for (size_t w = 0; w < n_lens; w++) {
        if (w && o + 1 < cap) out[o++] = '|';
        for (size_t k = 0; k < lens[w]; k++) {
            char u8[4];
            const size_t l = sd_utf8_encode(cps[at++], u8);
            for (size_t j = 0; j < l && o + 1 < cap; j++)
                out[o++] = u8[j];
        }
        out[o] = '\0';
    }
    cr_assert_eq(at, n_cps, "the words do not cover the text");
    free(lens);
    free(cps);
}

/* deepseek-coder's and qwen35's splits, worked out by hand from their regex lists (llama.cpp
 * LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_CODER: [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK]+, \p{N};
 * QWEN35: Qwen2's regex with [\p{L}\p{M}]+ letter runs), so they run without the fetched
 * vocabularies; qwen2 on the same text shows what the marks change. */
Test(pretok, deepseek_coder_and_qwen35_splits) {
    char got[256];
    split_words(PRE_DEEPSEEK_CODER,
                "Hello, world! 123\n\xe4\xb8\xad\xe6\x96\x87"
                "ab",
                got, sizeof got);
    cr_expect_str_eq(got, "Hello|,| world|!| |1|2|3|\n|\xe4\xb8\xad\xe6\x96\x87|ab");
    const char *marks = "xe\xcc\x81y e\xcc\x81 12"; /* e + U+0301 COMBINING ACUTE ACCENT */
    split_words(PRE_QWEN35, marks, got, sizeof got);
    cr_expect_str_eq(got, "xe\xcc\x81y| e\xcc\x81| |1|2");
    split_words(PRE_QWEN2, marks, got, sizeof got);
    cr_expect_str_eq(got, "xe|\xcc\x81y| e|\xcc\x81| |1|2");
    /* the names llama.cpp gives them */
    pre_type pre;
    int add_bos = -1, clean = -1, ignore = -1;
    cr_assert_eq(pretok_from_name("deepseek-coder", 14, &pre, &add_bos, &clean, &ignore), 0);
    cr_expect(pre == PRE_DEEPSEEK_CODER && !clean && !add_bos && !ignore);
    cr_assert_eq(pretok_from_name("qwen35", 6, &pre, &add_bos, &clean, &ignore), 0);
    cr_expect(pre == PRE_QWEN35 && !clean && !add_bos && !ignore);
}
