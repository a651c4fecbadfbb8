/*
 * tests/test_grammar.c: constrained decoding (runtime/grammar, and the engine's use of it).
 *
 *  - the GBNF parser: accepted syntax, and errors naming their line and column;
 *  - the matcher against brute force: for a few grammars, every byte string over a small
 *    alphabet up to a length is classified by a recognizer written here (a plain C
 *    predicate per grammar, independent of the matcher); a prefix is viable when some
 *    member of at most the enumerated length extends it. The matcher's viability
 *    (sd_grammar_advance succeeds) and membership (sd_grammar_accepting) must agree on
 *    every string, and its token masks (sd_grammar_mask) over a vocabulary of short byte
 *    strings (partial UTF-8 characters among them) with the brute-force viability of the
 *    extended string, the end id exactly on members;
 *  - the built-in JSON grammar against jansson: documents jansson writes are members, and
 *    every one-byte deletion of them is a member exactly when jansson parses it into an
 *    object;
 *  - exactness under speculation on the shipped TinyStories pair: greedy constrained output
 *    with a draft (llm, ngram, ngram+llm, suffix) equals the output without one, token for
 *    token, and Gumbel sampling for a seed too, through sd_engine_generate and the batcher;
 *    every output is matched by a POSIX regular expression equivalent to the grammar; a
 *    grammar that allows nothing more (with --ignore-eos) ends the run with
 *    SD_STOP_GRAMMAR; bad grammars and draft trees are refused.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/grammar/sd_grammar.h"
#include "testutil.h"
#include "engine_util.h"

TestSuite(grammar, .timeout = 900);

static sd_grammar *parse_ok(const char *gbnf) {
    sd_grammar *g = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err), SD_OK, "%s: %s", gbnf,
                 err.msg);
    return g;
}

/* 1 if s is viable, *member if a sentence. */
static int match(const sd_grammar *g, const char *s, size_t n, int *member) {
    sd_grammar_state *st = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_grammar_state_init(g, &st, &err), SD_OK);
    const int ok = sd_grammar_advance(st, s, n, &err) == SD_OK;
    *member = ok && sd_grammar_accepting(st);
    sd_grammar_state_free(st);
    return ok;
}

static int is_member(const sd_grammar *g, const char *s) {
    int m = 0;
    match(g, s, strlen(s), &m);
    return m;
}

/* ---- the parser ---- */

/* What a request's grammar can cost is bounded: elements (a short item repeated), nesting
 * (the parser recurses), live parses (an ambiguous grammar doubles them per byte). */
Test(grammar, hostile_grammars_are_bounded) {
    sd_grammar *g = NULL;
    sd_error err = {0};
    /* 4,000 alternatives of a 1,000-byte literal repeated 1,024 times: ~4e9 elements */
    const size_t lit = 1000, alts = 4000;
    size_t cap = alts * (lit + 16) + 64, n = 0;
    char *src = malloc(cap);
    cr_assert_not_null(src);
    n += (size_t)snprintf(src, cap, "root ::= ");
    for (size_t a = 0; a < alts; a++) {
        if (a) src[n++] = '|';
        src[n++] = '"';
        memset(src + n, 'x', lit);
        n += lit;
        n += (size_t)snprintf(src + n, cap - n, "\"{1024}");
    }
    cr_assert_lt(n, cap);
    cr_expect_eq(sd_grammar_parse(src, n, NULL, &g, &err), SD_ERR_FORMAT);
    cr_expect(strstr(err.msg, "grammar too large") != NULL, "%s", err.msg);
    cr_expect_null(g);
    /* 100,000 nested groups */
    n = (size_t)snprintf(src, cap, "root ::= ");
    for (int i = 0; i < 100000; i++)
        src[n++] = '(';
    src[n++] = '"';
    src[n++] = 'a';
    src[n++] = '"';
    for (int i = 0; i < 100000; i++)
        src[n++] = ')';
    cr_expect_eq(sd_grammar_parse(src, n, NULL, &g, &err), SD_ERR_FORMAT);
    cr_expect(strstr(err.msg, "nested more than") != NULL, "%s", err.msg);
    cr_expect_null(g);
    free(src);
    /* an ambiguous grammar: the parses double with every "a" until the bound */
    g = parse_ok("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"\"");
    sd_grammar_state *st = NULL;
    cr_assert_eq(sd_grammar_state_init(g, &st, &err), SD_OK, "%s", err.msg);
    int rc = SD_OK, i = 0;
    for (; i < 64 && rc == SD_OK; i++)
        rc = sd_grammar_advance(st, "a", 1, &err);
    cr_expect_eq(rc, SD_ERR_UNSUPPORTED, "after %d bytes: %d %s", i, rc, err.msg);
    cr_expect(strstr(err.msg, "parses at once") != NULL, "%s", err.msg);
    cr_expect_leq(i, 20, "the bound came after %d bytes", i);
    sd_grammar_state_free(st);
    sd_grammar_free(g);
}

Test(grammar, parser_errors_name_line_and_column) {
    static const struct {
        const char *gbnf;
        sd_status st;
        const char *prefix;
    } cases[] = {
        {"root ::= \"abc", SD_ERR_FORMAT, "grammar:1:10: unterminated literal"},
        {"root ::= [a-", SD_ERR_FORMAT, "grammar:1:10: unterminated character class"},
        {"root ::= foo", SD_ERR_FORMAT, "grammar:1:10: rule 'foo' is used but never defined"},
        {"root ::= a\na ::= \"x\"\na ::= \"y\"", SD_ERR_FORMAT, "grammar:3:1: rule defined twice"},
        {"root ::= x\nx ::= x \"a\" | \"b\"", SD_ERR_FORMAT,
         "grammar:1:10: left recursion in rule 'x'"},
        {"root ::= (\"a\"?)*", SD_ERR_FORMAT, "grammar:1:"},
        {"root ::= \"a\"{3,2}", SD_ERR_FORMAT, "grammar:1:13: repetition {m,n} with n below m"},
        {"root ::= \"a\"{2000}", SD_ERR_FORMAT, "grammar:1:14: repetition bound above 1024"},
        {"root \"a\"", SD_ERR_FORMAT, "grammar:1:6: expected '::='"},
        {"root ::= \"\\q\"", SD_ERR_FORMAT, "grammar:1:11: unknown escape"},
        {"root ::= ( \"a\"\n\n", SD_ERR_FORMAT, "grammar:3:1: expected ')'"},
        {"root ::= \"a\" )", SD_ERR_FORMAT, "grammar:1:14: unbalanced ')'"},
        {"root ::= [z-a]", SD_ERR_FORMAT, "grammar:1:13: character range with its end below"},
        {"root ::= \"a\"\n  # fine\n  | @", SD_ERR_FORMAT, "grammar:3:5: expected a literal"},
        {"start ::= \"a\"", SD_ERR_ARG, "grammar: no rule named 'root'"},
        {"root ::= []", SD_ERR_FORMAT, "grammar:1:10: empty character class"},
        {"root ::= \"\\xZZ\"", SD_ERR_FORMAT, "grammar:1:13: expected a hexadecimal digit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = NULL;
        sd_error err = {0};
        const int rc = sd_grammar_parse(cases[i].gbnf, strlen(cases[i].gbnf), NULL, &g, &err);
        cr_expect_eq(rc, (int)cases[i].st, "case %zu: status %d (%s)", i, rc, err.msg);
        cr_expect_null(g, "case %zu", i);
        cr_expect(strncmp(err.msg, cases[i].prefix, strlen(cases[i].prefix)) == 0,
                  "case %zu: '%s', expected it to start with '%s'", i, err.msg, cases[i].prefix);
    }
}

Test(grammar, parser_syntax) {
    /* comments, alternatives over lines, escapes, classes, '.', every repetition */
    sd_grammar *g = parse_ok("# a comment\n"
                             "root ::= greeting ( \",\" ws name )* \"!\"?  # trailing\n"
                             "greeting ::= \"hi\"\n"
                             "           | \"h\\u00e9llo\"\n"
                             "           | \"\\x41\\t\" [0-9]{2}\n"
                             "name ::= [A-Z] [a-z]{1,} | \"\\\"\" [^\"\\n]* \"\\\"\"\n"
                             "ws ::= [ \\t]{0,2}\n");
    cr_expect(is_member(g, "hi"));
    cr_expect(is_member(g, "h\xc3\xa9llo, Ann!"));
    cr_expect(is_member(g, "A\t42,Bo,  \"x y\"!"));
    cr_expect(!is_member(g, "A\t4"));
    cr_expect(!is_member(g, "hi,   Ann"), "three spaces: {0,2}");
    cr_expect(!is_member(g, "hi, ann"));
    cr_expect(!is_member(g, "hi, A"), "[a-z]{1,} needs one");
    sd_grammar_free(g);
    g = parse_ok("root ::= . . \"x\"{3} [^a-c\\]]");
    cr_expect(is_member(g, "\xe4\xb8\xad"
                           "axxx]") == 0);
    cr_expect(is_member(g, "\xe4\xb8\xad"
                           "axxxd"));
    cr_expect(!is_member(g, "abxxxb"));
    sd_grammar_free(g);
    g = parse_ok("root ::= \"\"");
    cr_expect(is_member(g, ""));
    cr_expect(!is_member(g, "a"));
    sd_grammar_free(g);
    /* only well-formed UTF-8: no overlong form (of '{' here), no surrogate, nothing above
     * U+10FFFF, and no prefix that can only go on as one of those */
    g = parse_ok("root ::= \"{\" | [\\u0080-\\U0010FFFF]");
    int m = 0;
    cr_expect(is_member(g, "{"));
    cr_expect(!match(g, "\xf0\x80\x81\xbb", 4, &m));
    cr_expect(!match(g, "\xf0\x80", 2, &m), "F0 80 can only be overlong");
    cr_expect(!match(g, "\xc1\xbb", 2, &m));
    cr_expect(!match(g, "\xe0\x81", 2, &m));
    cr_expect(match(g, "\xe0", 1, &m) && !m);
    cr_expect(!match(g, "\xed\xa0", 2, &m), "surrogates");
    cr_expect(!match(g, "\xf4\x90", 2, &m), "above U+10FFFF");
    cr_expect(is_member(g, "\xf4\x8f\xbf\xbf"));
    cr_expect(is_member(g, "\xed\x9f\xbf"));
    sd_grammar_free(g);
    /* another start rule */
    sd_grammar *h = NULL;
    sd_error err = {0};
    const char *two = "root ::= \"a\"\nother ::= \"b\"";
    cr_assert_eq(sd_grammar_parse(two, strlen(two), "other", &h, &err), SD_OK, "%s", err.msg);
    cr_expect(is_member(h, "b"));
    cr_expect(!is_member(h, "a"));
    sd_grammar_free(h);
}

/* ---- the matcher against brute force ---- */

/* Independent recognizers of byte strings s[0 .. n). */
static int rec_ab(const unsigned char *s, int n) { /* ("a" "b")* */
    if (n % 2) return 0;
    for (int i = 0; i < n; i++)
        if (s[i] != (i % 2 ? 'b' : 'a')) return 0;
    return 1;
}

static int rec_dyck(const unsigned char *s, int n) { /* ( "(" root ")" )* */
    int d = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] == '(')
            d++;
        else if (s[i] == ')' && d > 0)
            d--;
        else
            return 0;
    }
    return d == 0;
}

static int rec_rep(const unsigned char *s, int n) { /* "a"{2,4} "b"? | "c"{3,} */
    int i = 0;
    while (i < n && s[i] == 'a')
        i++;
    if (i >= 2 && i <= 4 && (i == n || (i == n - 1 && s[i] == 'b'))) return 1;
    for (i = 0; i < n; i++)
        if (s[i] != 'c') return 0;
    return n >= 3;
}

static int rec_list(const unsigned char *s, int n) { /* [a-b]+ ("," [a-b]+)* */
    int seg = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] == ',') {
            if (seg == 0) return 0;
            seg = 0;
        } else if (s[i] == 'a' || s[i] == 'b') {
            seg++;
        } else {
            return 0;
        }
    }
    return seg > 0;
}

/* UTF-8 decoding written here: lead bytes C2..DF (1 continuation), E0..EF (2), F0..F4
 * (3); -1 if s is not well formed (a bad byte, an overlong form, a surrogate, above
 * U+10FFFF). */
static int decode(const unsigned char *s, int n, uint32_t *cps) {
    int k = 0;
    for (int i = 0; i < n;) {
        int more;
        uint32_t cp;
        if (s[i] < 0x80) {
            cp = s[i];
            more = 0;
        } else if (s[i] >= 0xC2 && s[i] <= 0xDF) {
            cp = s[i] & 0x1F;
            more = 1;
        } else if (s[i] >= 0xE0 && s[i] <= 0xEF) {
            cp = s[i] & 0x0F;
            more = 2;
        } else if (s[i] >= 0xF0 && s[i] <= 0xF4) {
            cp = s[i] & 0x07;
            more = 3;
        } else {
            return -1;
        }
        i++;
        for (int j = 0; j < more; j++, i++) {
            if (i >= n || (s[i] & 0xC0) != 0x80) return -1;
            cp = cp << 6 | (s[i] & 0x3F);
        }
        const uint32_t min = more == 0 ? 0 : (more == 1 ? 0x80 : (more == 2 ? 0x800 : 0x10000));
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
        cps[k++] = cp;
    }
    return k;
}

static int rec_utf8(const unsigned char *s, int n) { /* [^.\u00e9]{1,2} "." */
    uint32_t cps[64];
    const int k = decode(s, n, cps);
    if (k < 2 || k > 3 || cps[k - 1] != '.') return 0;
    for (int i = 0; i < k - 1; i++)
        if (cps[i] == '.' || cps[i] == 0xE9) return 0;
    return 1;
}

static int rec_strict(const unsigned char *s, int n) { /* [\u0080-\U0010FFFF]? "." */
    uint32_t cps[64];
    const int k = decode(s, n, cps);
    return (k == 1 && cps[0] == '.') || (k == 2 && cps[0] >= 0x80 && cps[1] == '.');
}

static int rec_neg(const unsigned char *s, int n) { /* [^\u0800-\uFFFF] "." */
    uint32_t cps[64];
    const int k = decode(s, n, cps);
    return k == 2 && !(cps[0] >= 0x800 && cps[0] <= 0xFFFF) && cps[1] == '.';
}

typedef struct bf_case {
    const char *name, *gbnf;
    int (*rec)(const unsigned char *, int);
    const char *alphabet; /* the symbols (bytes) */
    int n_alpha;
    int l_max; /* strings enumerated up to this length */
    int l_v;   /* viability compared up to this length (completions fit in l_max) */
} bf_case;

static const bf_case k_cases[] = {
    {"ab", "root ::= (\"a\" \"b\")*", rec_ab, "abx", 3, 9, 8},
    {"dyck", "root ::= ( \"(\" root \")\" )*", rec_dyck, "()x", 3, 12, 6},
    {"rep", "root ::= \"a\"{2,4} \"b\"? | \"c\"{3,}", rec_rep, "abc", 3, 9, 7},
    {"list", "root ::= [a-b]+ (\",\" [a-b]+)*", rec_list, "ab,c", 4, 8, 7},
    {"utf8", "root ::= [^.\\u00e9]{1,2} \".\"", rec_utf8, "a.\xc3\xa9\xe4\xb8", 6, 7, 4},
    {"strict", "root ::= [\\u0080-\\U0010FFFF]? \".\"", rec_strict, ".\xe0\xf0\xf4\x80\x90\xa0\xed",
     8, 7, 3},
    {"neg", "root ::= [^\\u0800-\\uFFFF] \".\"", rec_neg, ".a\xc3\xe0\xf0\x80\x90\xa0", 8, 7, 3},
};

/* Strings up to l_max as base-n_alpha numbers: index = off[len] + digits. */
typedef struct bf {
    const bf_case *c;
    int64_t off[16];
    uint8_t *member, *viable;
} bf;

static int64_t bf_index(const bf *b, const unsigned char *sym, int len) {
    int64_t x = 0;
    for (int i = 0; i < len; i++)
        x = x * b->c->n_alpha + sym[i];
    return b->off[len] + x;
}

static void bf_fill(bf *b, const bf_case *c) {
    b->c = c;
    int64_t total = 0, pw = 1;
    for (int len = 0; len <= c->l_max; len++) {
        b->off[len] = total;
        total += pw;
        pw *= c->n_alpha;
    }
    b->member = calloc((size_t)total, 1);
    b->viable = calloc((size_t)total, 1);
    cr_assert(b->member && b->viable);
    unsigned char sym[16], bytes[16];
    int64_t count = 1;
    for (int len = 0; len <= c->l_max; len++, count *= c->n_alpha) {
        for (int64_t x = 0; x < count; x++) {
            int64_t y = x;
            for (int i = len - 1; i >= 0; i--) {
                sym[i] = (unsigned char)(y % c->n_alpha);
                y /= c->n_alpha;
                bytes[i] = (unsigned char)c->alphabet[sym[i]];
            }
            if (!c->rec(bytes, len)) continue;
            b->member[b->off[len] + x] = 1;
            for (int p = 0; p <= len; p++) /* every prefix of a member is viable */
                b->viable[bf_index(b, sym, p)] = 1;
        }
    }
}

/* Depth-first over the strings the matcher keeps alive, comparing as it goes. */
static void bf_walk(const bf *b, sd_grammar_state *st, unsigned char *sym, unsigned char *bytes,
                    int len, int64_t *checked) {
    const bf_case *c = b->c;
    const int64_t idx = bf_index(b, sym, len);
    cr_assert_eq(sd_grammar_accepting(st), b->member[idx], "%s: '%.*s' membership", c->name, len,
                 (const char *)bytes);
    (*checked)++;
    if (len == c->l_max) return;
    for (int a = 0; a < c->n_alpha; a++) {
        sym[len] = (unsigned char)a;
        bytes[len] = (unsigned char)c->alphabet[a];
        const int64_t j = bf_index(b, sym, len + 1);
        const int allows = sd_grammar_allows(st, (const char *)bytes + len, 1);
        if (len + 1 <= c->l_v)
            cr_assert_eq(allows, b->viable[j], "%s: '%.*s' viability", c->name, len + 1,
                         (const char *)bytes);
        if (!allows) { /* nothing longer: no member extends it */
            if (len + 1 <= c->l_max) cr_assert(!b->member[j], "%s: refused a member", c->name);
            continue;
        }
        sd_grammar_state *next = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_grammar_state_clone(st, &next, &err), SD_OK);
        cr_assert_eq(sd_grammar_advance(next, (const char *)bytes + len, 1, &err), SD_OK, "%s",
                     err.msg);
        bf_walk(b, next, sym, bytes, len + 1, checked);
        sd_grammar_state_free(next);
    }
}

Test(grammar, matcher_equals_brute_force) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const bf_case *c = &k_cases[i];
        bf b;
        bf_fill(&b, c);
        sd_grammar *g = parse_ok(c->gbnf);
        sd_grammar_state *st = NULL;
        sd_error err = {0};
        cr_assert_eq(sd_grammar_state_init(g, &st, &err), SD_OK);
        unsigned char sym[16], bytes[16];
        int64_t checked = 0;
        bf_walk(&b, st, sym, bytes, 0, &checked);
        cr_assert_geq(checked, c->l_max, "%s: too few strings alive", c->name);
        sd_grammar_state_free(st);
        sd_grammar_free(g);
        free(b.member);
        free(b.viable);
    }
}

/* The vocabulary of every string over the alphabet of 1 or 2 bytes, plus token 0: no
 * bytes (the end id). */
static sd_grammar_vocab *small_vocab(const bf_case *c, char (*store)[2], size_t *lens, int32_t *n) {
    int32_t k = 1;
    lens[0] = 0;
    for (int a = 0; a < c->n_alpha; a++) {
        store[k][0] = c->alphabet[a];
        lens[k++] = 1;
    }
    for (int a = 0; a < c->n_alpha; a++)
        for (int b2 = 0; b2 < c->n_alpha; b2++) {
            store[k][0] = c->alphabet[a];
            store[k][1] = c->alphabet[b2];
            lens[k++] = 2;
        }
    const char *pieces[128];
    for (int32_t i = 0; i < k; i++)
        pieces[i] = store[i];
    sd_grammar_vocab *v = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_grammar_vocab_init(pieces, lens, k, &v, &err), SD_OK, "%s", err.msg);
    *n = k;
    return v;
}

Test(grammar, masks_equal_brute_force) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const bf_case *c = &k_cases[i];
        bf b;
        bf_fill(&b, c);
        sd_grammar *g = parse_ok(c->gbnf);
        char store[128][2];
        size_t lens[128];
        int32_t nv = 0;
        sd_grammar_vocab *v = small_vocab(c, store, lens, &nv);
        const int32_t end = 0;
        /* every state reached by a string of up to l_v - 2 symbols (tokens fit after) */
        int64_t n_states = 0;
        for (int len = 0; len + 2 <= c->l_v; len++) {
            int64_t count = 1;
            for (int t = 0; t < len; t++)
                count *= c->n_alpha;
            for (int64_t x = 0; x < count; x++) {
                unsigned char sym[16], bytes[16];
                int64_t y = x;
                for (int t = len - 1; t >= 0; t--) {
                    sym[t] = (unsigned char)(y % c->n_alpha);
                    y /= c->n_alpha;
                    bytes[t] = (unsigned char)c->alphabet[sym[t]];
                }
                if (!b.viable[bf_index(&b, sym, len)]) continue;
                sd_grammar_state *st = NULL;
                sd_error err = {0};
                cr_assert_eq(sd_grammar_state_init(g, &st, &err), SD_OK);
                cr_assert_eq(sd_grammar_advance(st, (const char *)bytes, (size_t)len, &err), SD_OK);
                uint64_t bits[2] = {0, 0}, again[2] = {0, 0};
                const int64_t cnt = sd_grammar_mask(st, v, &end, 1, bits);
                cr_assert_eq(sd_grammar_mask(st, v, &end, 1, again), cnt); /* cached */
                cr_assert(memcmp(bits, again, sizeof bits) == 0);
                int64_t want_cnt = 0;
                for (int32_t t = 0; t < nv; t++) {
                    int want;
                    if (t == 0) {
                        want = b.member[bf_index(&b, sym, len)];
                    } else {
                        unsigned char ext[16];
                        memcpy(ext, sym, (size_t)len);
                        for (size_t q = 0; q < lens[t]; q++)
                            for (int a = 0; a < c->n_alpha; a++)
                                if (c->alphabet[a] == store[t][q])
                                    ext[len + (int)q] = (unsigned char)a;
                        want = b.viable[bf_index(&b, ext, len + (int)lens[t])];
                    }
                    const int got = (int)(bits[t >> 6] >> (t & 63) & 1u);
                    cr_assert_eq(got, want, "%s: after '%.*s' token %d ('%.*s')", c->name, len,
                                 (const char *)bytes, t, (int)lens[t], store[t]);
                    cr_assert_eq(sd_grammar_allows_token(st, v, t, &end, 1), want);
                    want_cnt += want;
                }
                cr_assert_eq(cnt, want_cnt, "%s: count", c->name);
                /* the same state reached token by token (a character split across tokens) */
                sd_grammar_state *st2 = NULL;
                cr_assert_eq(sd_grammar_state_init(g, &st2, &err), SD_OK);
                for (int t = 0; t < len; t++)
                    cr_assert_eq(sd_grammar_advance(st2, (const char *)bytes + t, 1, &err), SD_OK);
                uint64_t bits2[2] = {0, 0};
                cr_assert_eq(sd_grammar_mask(st2, v, &end, 1, bits2), cnt);
                cr_assert(memcmp(bits, bits2, sizeof bits) == 0);
                sd_grammar_state_free(st2);
                sd_grammar_state_free(st);
                n_states++;
            }
        }
        cr_assert_gt(n_states, 3, "%s", c->name);
        sd_grammar_vocab_free(v);
        sd_grammar_free(g);
        free(b.member);
        free(b.viable);
    }
}

/* ---- the built-in JSON grammar against jansson ---- */

static int jansson_object(const char *s) {
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    const int ok = j && json_is_object(j);
    json_decref(j);
    return ok;
}

static json_t *random_value(unsigned *seed, int depth) {
    const int kind = (int)(rand_r(seed) % (depth > 2 ? 5u : 7u));
    switch (kind) {
    case 0:
        return json_integer((json_int_t)(rand_r(seed) % 20001) - 10000);
    case 1:
        return json_real((double)(rand_r(seed) % 64) / 8.0 - 3.0);
    case 2: {
        static const char *const strs[] = {"",
                                           "cat",
                                           "a \"quote\"",
                                           "tab\there",
                                           "\xc3\xa9t\xc3\xa9",
                                           "\\slash/",
                                           "line\nbreak",
                                           "\xe4\xb8\xad\xe6\x96\x87"};
        return json_string(strs[rand_r(seed) % 8]);
    }
    case 3:
        return rand_r(seed) % 2 ? json_true() : json_false();
    case 4:
        return json_null();
    case 5: {
        json_t *a = json_array();
        for (unsigned n = rand_r(seed) % 4; n > 0; n--)
            json_array_append_new(a, random_value(seed, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (unsigned n = rand_r(seed) % 4; n > 0; n--) {
            char key[16];
            snprintf(key, sizeof key, "k%u", rand_r(seed) % 100);
            json_object_set_new(o, key, random_value(seed, depth + 1));
        }
        return o;
    }
    }
}

Test(grammar, json_grammar_equals_jansson) {
    sd_grammar *g = parse_ok(sd_grammar_json_object);
    unsigned seed = 12345;
    int64_t n_docs = 0, n_members = 0, n_mutants = 0;
    for (int d = 0; d < 150; d++) {
        json_t *o = json_object();
        for (unsigned n = rand_r(&seed) % 5; n > 0; n--) {
            char key[16];
            snprintf(key, sizeof key, "f%u", rand_r(&seed) % 1000);
            json_object_set_new(o, key, random_value(&seed, 1));
        }
        const size_t flags = d % 3 == 0 ? JSON_COMPACT : (d % 3 == 1 ? JSON_INDENT(2) : 0);
        char *s = json_dumps(o, flags | (d % 2 ? JSON_ENSURE_ASCII : 0));
        json_decref(o);
        cr_assert_not_null(s);
        cr_assert(is_member(g, s), "jansson's document refused: %s", s);
        n_docs++;
        /* every one-byte deletion: a member exactly when jansson reads an object */
        const size_t len = strlen(s);
        char *m = malloc(len + 1);
        for (size_t i = 0; i < len; i++) {
            memcpy(m, s, i);
            memcpy(m + i, s + i + 1, len - i);
            const int want = jansson_object(m), got = is_member(g, m);
            cr_assert_eq(got, want, "'%s' (from '%s'): grammar %d, jansson %d", m, s, got, want);
            n_members += got;
            n_mutants++;
        }
        free(m);
        free(s);
    }
    cr_assert_gt(n_members, 10, "deletions that stay JSON: %lld of %lld", (long long)n_members,
                 (long long)n_mutants);
    cr_assert(!is_member(g, "[1, 2]"), "the top level is an object");
    cr_assert(!is_member(g, "{\"a\": 01}"));
    cr_assert(!is_member(g, "{\"a\": \"\x01\"}"));
    cr_assert(!is_member(g, "{} {}"));
    sd_grammar_free(g);
    (void)n_docs;
}

/* ---- exactness under speculation, on the shipped TinyStories pair ---- */

#define TARGET EU_TINY_TARGET
#define DRAFT  EU_TINY_DRAFT
#define NPRED  96

/* A grammar that ends (then only EOS may come) and a regular expression for it. */
static const char *const k_story =
    "root ::= \" there was a \" word ( \" \" word ){3,14} \".\" ( \" \" cap ( \" \" word ){2,10} "
    "\".\" ){0,2}\n"
    "word ::= [a-z]{1,12}\n"
    "cap  ::= [A-Z] [a-z]{0,11}\n";
static const char *const k_story_re = "^ there was a [a-z]{1,12}( [a-z]{1,12}){3,14}\\."
                                      "( [A-Z][a-z]{0,11}( [a-z]{1,12}){2,10}\\.){0,2}$";

typedef struct run {
    int32_t toks[NPRED];
    int32_t n;
    sd_gen_stats st;
} run;

static sd_gen_params params(const char *grammar, sd_draft_type dt, float temp) {
    sd_gen_params gp = sd_gen_default_params();
    gp.n_predict = NPRED;
    gp.n_draft = dt == SD_DRAFT_NONE ? 0 : 4;
    gp.draft_type = dt;
    gp.k_policy = SD_K_FIXED;
    gp.samp.temp = temp;
    gp.samp.spec = SD_SPEC_GUMBEL;
    gp.seed = 777;
    gp.grammar = grammar;
    return gp;
}

static void gen(sd_engine *e, const char *grammar, sd_draft_type dt, float temp, run *r) {
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Once upon a time", &ids);
    sd_gen_params gp = params(grammar, dt, temp);
    memset(r, 0, sizeof *r);
    sd_error err = {0};
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, r->toks, NPRED, &r->st, &err),
                 SD_OK, "%s", err.msg);
    r->n = r->st.n_generated;
    if (dt != SD_DRAFT_NONE)
        cr_assert_gt(r->st.n_drafted, 0, "%s drafted nothing", sd_draft_type_name(dt));
    free(ids);
}

static char *text_of(sd_engine *e, const run *r) {
    char *s = calloc(1, 8192);
    size_t n = 0;
    for (int32_t i = 0; i < r->n; i++) {
        const int len = sd_vocab_token_to_piece(sd_engine_vocab(e), r->toks[i], 0, s + n, 8191 - n);
        cr_assert(len >= 0 && n + (size_t)len < 8191);
        n += (size_t)len;
    }
    return s;
}

/* The output is in the grammar's language: the regular expression matches it (the run
 * ended at EOS), or it is cut by the budget. */
static void expect_in_language(sd_engine *e, const run *r, const char *what) {
    char *s = text_of(e, r);
    if (r->st.stop == SD_STOP_EOS) {
        regex_t re;
        cr_assert_eq(regcomp(&re, k_story_re, REG_EXTENDED | REG_NOSUB), 0);
        cr_expect_eq(regexec(&re, s, 0, NULL, 0), 0, "%s: '%s' is not in the language", what, s);
        regfree(&re);
    } else {
        cr_expect_eq(r->st.stop, SD_STOP_MAX_TOKENS, "%s: stop %s", what,
                     sd_stop_reason_str(r->st.stop));
    }
    free(s);
}

static void expect_same(const run *a, const run *b, const char *what) {
    cr_assert_eq(a->n, b->n, "%s: %d tokens, target alone %d", what, a->n, b->n);
    for (int32_t i = 0; i < a->n; i++)
        cr_assert_eq(a->toks[i], b->toks[i], "%s: token %d", what, i);
    cr_assert_eq(a->st.stop, b->st.stop, "%s: stop", what);
}

Test(grammar, greedy_and_gumbel_exact_with_every_draft) {
    sd_engine *e = eu_tiny_engine(0);
    static run alone, other;
    const sd_draft_type dts[] = {SD_DRAFT_LLM, SD_DRAFT_NGRAM, SD_DRAFT_NGRAM_LLM, SD_DRAFT_SUFFIX,
                                 SD_DRAFT_SUFFIX_LLM};
    const float temps[] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        gen(e, k_story, SD_DRAFT_NONE, temps[t], &alone);
        cr_assert_gt(alone.n, 6);
        cr_assert_eq(alone.st.stop, SD_STOP_EOS, "the grammar ends the text: only EOS may follow");
        expect_in_language(e, &alone, "target alone");
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            if (t == 1 && dts[d] == SD_DRAFT_SUFFIX) continue; /* one-hot like ngram: enough */
            gen(e, k_story, dts[d], temps[t], &other);
            char what[64];
            snprintf(what, sizeof what, "%s, temp %.1f", sd_draft_type_name(dts[d]), temps[t]);
            expect_same(&other, &alone, what);
            expect_in_language(e, &other, what);
        }
    }
    /* the built-in JSON grammar: same text with and without a draft; jansson reads it
     * when the run ended */
    gen(e, sd_grammar_json_object, SD_DRAFT_NONE, 0.0f, &alone);
    gen(e, sd_grammar_json_object, SD_DRAFT_LLM, 0.0f, &other);
    expect_same(&other, &alone, "json, llm");
    char *s = text_of(e, &alone);
    if (alone.st.stop == SD_STOP_EOS) cr_expect(jansson_object(s), "not JSON: %s", s);
    cr_expect_eq(s[0], '{', "'%s'", s);
    free(s);
    sd_engine_free(e);
}

Test(grammar, finished_grammar_stops_with_reason) {
    sd_engine *e = eu_tiny_engine(0);
    static run alone, free_run, spec;
    /* with --ignore-eos, a grammar that is complete allows nothing: stop "grammar" */
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Once upon a time", &ids);
    for (int d = 0; d < 2; d++) {
        sd_gen_params gp = params(k_story, d ? SD_DRAFT_LLM : SD_DRAFT_NONE, 0.0f);
        gp.ignore_eos = 1;
        run *r = d ? &spec : &free_run;
        sd_error err = {0};
        cr_assert_eq(
            sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, r->toks, NPRED, &r->st, &err), SD_OK,
            "%s", err.msg);
        r->n = r->st.n_generated;
        cr_assert_eq(r->st.stop, SD_STOP_GRAMMAR, "stop %s", sd_stop_reason_str(r->st.stop));
    }
    expect_same(&spec, &free_run, "ignore_eos, llm");
    gen(e, k_story, SD_DRAFT_NONE, 0.0f, &alone); /* the same text, ended by EOS */
    cr_assert_eq(alone.n, free_run.n);
    cr_assert(memcmp(alone.toks, free_run.toks, (size_t)alone.n * sizeof *alone.toks) == 0);
    cr_assert_str_eq(sd_stop_reason_str(SD_STOP_GRAMMAR), "grammar");
    /* refused: a bad grammar (line and column), draft trees */
    sd_gen_params gp = params("root ::= \"a\"\nroot2 ::= (", SD_DRAFT_NONE, 0.0f);
    sd_error err = {0};
    run r;
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, r.toks, NPRED, &r.st, &err),
                 SD_ERR_FORMAT);
    cr_assert(strstr(err.msg, "grammar:2:12") != NULL, "%s", err.msg);
    gp = params(k_story, SD_DRAFT_NGRAM, 0.0f);
    gp.tree_width = 2;
    gp.n_draft = 4;
    cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, r.toks, NPRED, &r.st, &err),
                 SD_ERR_UNSUPPORTED, "%s", err.msg);
    free(ids);
    sd_engine_free(e);
}

/* ---- the batcher ---- */

typedef struct bjob {
    run r;
    int done;
} bjob;

static int collect(void *user, const sd_req_event *ev) {
    bjob *j = user;
    for (int32_t i = 0; i < ev->n_tokens && j->r.n < NPRED; i++)
        j->r.toks[j->r.n++] = ev->tokens[i];
    if (ev->done) {
        j->done = 1;
        j->r.st = *ev->stats;
    }
    return 0;
}

static void batch_run(sd_engine *e, const char *grammar, float temp, bjob *jobs) {
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_parallel = 4;
    bp.n_ctx = 256;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    int32_t *ids = NULL;
    const int32_t n_ids = eu_prompt(e, "Once upon a time", &ids);
    const sd_draft_type dts[4] = {SD_DRAFT_NONE, SD_DRAFT_LLM, SD_DRAFT_NGRAM, SD_DRAFT_NGRAM_LLM};
    for (int i = 0; i < 4; i++) {
        const sd_gen_params gp = params(grammar, dts[i], temp);
        eu_submit(b, ids, n_ids, &gp, collect, &jobs[i]);
    }
    free(ids);
    eu_drain(b, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert(jobs[i].done);
        jobs[i].r.n = jobs[i].r.st.n_generated;
        if (dts[i] != SD_DRAFT_NONE) cr_assert_gt(jobs[i].r.st.n_drafted, 0, "drafted nothing");
    }
    cr_assert_eq(sd_batcher_check(b, &err), SD_OK, "%s", err.msg);
    sd_batcher_free(b);
}

Test(grammar, batcher_equals_generate) {
    sd_engine *e = eu_tiny_engine(0);
    static run alone;
    static bjob jobs[4];
    const char *names[4] = {"batcher, none", "batcher, llm", "batcher, ngram",
                            "batcher, ngram+llm"};
    const float temps[] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        gen(e, k_story, SD_DRAFT_NONE, temps[t], &alone);
        memset(jobs, 0, sizeof jobs);
        batch_run(e, k_story, temps[t], jobs);
        for (int i = 0; i < 4; i++) {
            expect_same(&jobs[i].r, &alone, names[i]);
            expect_in_language(e, &jobs[i].r, names[i]);
        }
    }
    /* a bad grammar is refused at submission, naming where */
    sd_batcher_params bp = sd_batcher_default_params();
    bp.n_ctx = 256;
    sd_batcher *b = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_batcher_init(e, &bp, &b, &err), SD_OK, "%s", err.msg);
    const int32_t one = 1;
    sd_request r;
    memset(&r, 0, sizeof r);
    r.prompt = &one;
    r.n_prompt = 1;
    r.gen = params("root ::= [a-", SD_DRAFT_NONE, 0.0f);
    r.n_choices = 1;
    cr_assert_eq(sd_batcher_submit(b, &r, NULL, &err), SD_ERR_FORMAT);
    cr_assert(strstr(err.msg, "grammar:1:10") != NULL, "%s", err.msg);
    sd_batcher_free(b);
    sd_engine_free(e);
}

/* ---- the public face: sd_complete and sd_queue ---- */

typedef struct face_text {
    char s[4096];
    size_t n;
} face_text;

static int on_piece(void *user, const sd_piece *p) {
    face_text *t = user;
    if (t->n + p->len < sizeof t->s) {
        memcpy(t->s + t->n, p->text, p->len);
        t->n += p->len;
    }
    return 0;
}

static int on_event(void *user, const sd_event *ev) {
    face_text *t = user;
    if (t->n + ev->len < sizeof t->s) {
        memcpy(t->s + t->n, ev->text, ev->len);
        t->n += ev->len;
    }
    return 0;
}

Test(grammar, public_face_complete_and_queue) {
    eu_need_tiny();
    sd_context *ctx = eu_context(TARGET, DRAFT, 256, 1);
    sd_error err = {0};
    static face_text alone, spec, queued;
    const char *types[2] = {"none", "llm"};
    face_text *outs[2] = {&alone, &spec};
    for (int i = 0; i < 2; i++) {
        sd_completion_params p = sd_completion_default_params();
        p.n_predict = NPRED;
        p.temp = 0.0f;
        p.adaptive = 0;
        p.draft_type = types[i];
        p.grammar = k_story;
        sd_gen_stats st;
        cr_assert_eq(sd_complete(ctx, "Once upon a time", &p, on_piece, outs[i], &st, &err), SD_OK,
                     "%s", err.msg);
        cr_assert_eq(st.stop, SD_STOP_EOS);
        if (i == 1) cr_assert_gt(st.n_drafted, 0);
    }
    cr_assert_eq(spec.n, alone.n);
    cr_assert(memcmp(spec.s, alone.s, alone.n) == 0, "'%.*s' vs '%.*s'", (int)spec.n, spec.s,
              (int)alone.n, alone.s);
    regex_t re;
    cr_assert_eq(regcomp(&re, k_story_re, REG_EXTENDED | REG_NOSUB), 0);
    cr_expect_eq(regexec(&re, alone.s, 0, NULL, 0), 0, "'%s'", alone.s);
    regfree(&re);
    /* the queue (the batcher) gives the same text */
    sd_queue_params qp = sd_queue_default_params();
    qp.n_ctx = 256;
    sd_queue *q = NULL;
    cr_assert_eq(sd_queue_init(ctx, &qp, &q, &err), SD_OK, "%s", err.msg);
    sd_completion_params p = sd_completion_default_params();
    p.n_predict = NPRED;
    p.temp = 0.0f;
    p.adaptive = 0;
    p.draft_type = "llm";
    p.grammar = k_story;
    cr_assert_eq(sd_queue_submit(q, "Once upon a time", &p, on_event, &queued, NULL, &err), SD_OK,
                 "%s", err.msg);
    while (sd_queue_busy(q))
        cr_assert_eq(sd_queue_step(q, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(queued.n, alone.n);
    cr_assert(memcmp(queued.s, alone.s, alone.n) == 0);
    sd_queue_free(q);
    sd_context_free(ctx);
}

/* ---- a real instruct model (SmolLM2-135M-Instruct, when downloaded) and JSON ---- */

#define SMOL       SD_SOURCE_DIR "/models/downloaded/SmolLM2-135M-Instruct.Q4_1.gguf"
#define SMOL_DRAFT SD_SOURCE_DIR "/models/smollm2-draft-q8_0.gguf"

Test(grammar, smollm2_json_exact_with_draft) {
    tu_need_path(SMOL, "scripts/get_models.sh downloads it");
    tu_need_path(SMOL_DRAFT, "scripts/train_smollm2_draft.py makes it");
    sd_engine *e = eu_engine(SMOL, SMOL_DRAFT, 512, 1, 0);
    sd_error err = {0};
    const sd_chat_msg msg = {"user", "Describe a cat as a JSON object with its name, age and "
                                     "color."};
    sd_prompt_spec ps;
    memset(&ps, 0, sizeof ps);
    ps.messages = &msg;
    ps.n_messages = 1;
    int32_t *ids = NULL, n_ids = 0;
    cr_assert_eq(sd_prompt_tokenize(sd_engine_vocab(e), &ps, &ids, &n_ids, &err), SD_OK, "%s",
                 err.msg);
    enum { N = 160 };
    static int32_t out[3][N];
    sd_gen_stats st[3];
    const sd_draft_type dts[3] = {SD_DRAFT_NONE, SD_DRAFT_LLM, SD_DRAFT_NGRAM_LLM};
    for (int i = 0; i < 3; i++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = N;
        gp.n_draft = dts[i] == SD_DRAFT_NONE ? 0 : 4;
        gp.draft_type = dts[i];
        gp.k_policy = SD_K_FIXED;
        gp.samp.temp = 0.0f;
        gp.grammar = sd_grammar_json_object;
        cr_assert_eq(sd_engine_generate(e, &gp, ids, n_ids, NULL, NULL, out[i], N, &st[i], &err),
                     SD_OK, "%s", err.msg);
        if (i) {
            cr_assert_gt(st[i].n_drafted, 0);
            cr_assert_eq(st[i].n_generated, st[0].n_generated, "%s", sd_draft_type_name(dts[i]));
            cr_assert(memcmp(out[i], out[0], (size_t)st[0].n_generated * sizeof(int32_t)) == 0,
                      "%s", sd_draft_type_name(dts[i]));
        }
    }
    char *s = calloc(1, 16384);
    size_t n = 0;
    for (int32_t i = 0; i < st[0].n_generated; i++) {
        const int len = sd_vocab_token_to_piece(sd_engine_vocab(e), out[0][i], 0, s + n, 16383 - n);
        cr_assert(len >= 0 && n + (size_t)len < 16383);
        n += (size_t)len;
    }
    cr_assert_eq(s[0], '{', "'%s'", s);
    if (st[0].stop == SD_STOP_EOS) cr_assert(jansson_object(s), "not a JSON object: '%s'", s);
    free(s);
    free(ids);
    sd_engine_free(e);
}

/* ---- specdec generate --grammar / --grammar-file ---- */

Test(grammar, cli_flags) {
    eu_need_tiny();
    char dir[256], path[512];
    cr_assert_eq(tu_mkdtemp(dir, sizeof dir), 0);
    tu_path(path, sizeof path, dir, "story.gbnf");
    cr_assert_eq(tu_write_file(path, k_story, strlen(k_story)), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s generate -m %s -md %s -p 'Once upon a time' -n 96 --temp 0 -t 1 "
             "--draft-policy fixed --grammar-file %s --json",
             SD_BINARY, TARGET, DRAFT, path);
    char *out = NULL;
    cr_assert_eq(tu_run(cmd, &out, NULL), 0, "%s", cmd);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert_not_null(j, "%s", out);
    const char *text = json_string_value(json_object_get(j, "text"));
    cr_assert_not_null(text);
    regex_t re;
    cr_assert_eq(regcomp(&re, k_story_re, REG_EXTENDED | REG_NOSUB), 0);
    cr_expect_eq(regexec(&re, text, 0, NULL, 0), 0, "'%s'", text);
    regfree(&re);
    json_decref(j);
    free(out);
    /* a bad grammar: one line naming where; two grammars: a usage error */
    snprintf(cmd, sizeof cmd, "generate -m %s -p x -n 4 --log-disable --grammar 'root ::= \"a\" ('",
             TARGET);
    tu_expect_cli_error(cmd, "grammar:1:15");
    snprintf(cmd, sizeof cmd,
             "generate -m %s -p x -n 4 --log-disable --grammar 'root ::= \"a\"' --grammar-file %s",
             TARGET, path);
    tu_expect_cli_error(cmd, "--grammar-file");
    unlink(path);
    tu_rmdir(dir);
}
