/*
 * Pre-tokenizers of byte-level BPE: split the code points of a raw fragment into words
 * before BPE merging, as llama.cpp's unicode_regex_split does for the regex list its
 * llm_tokenizer_bpe picks from tokenizer.ggml.pre.
 *
 * How: no regex engine. llama.cpp applies a LIST of regexes in turn; each one re-splits
 * every chunk the previous ones produced into its matches and the gaps between them
 * (std::regex_iterator over the chunk, so '$' is the chunk's end). We keep that structure:
 * a pre-tokenizer is a list of passes, and each pass is either
 *   - one of llama.cpp's two hand-written splitters, which we follow step by step
 *     (unicode_regex_split_custom_gpt2 for
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 *      and unicode_regex_split_custom_llama3 for
 *       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *       ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ ),
 *     or
 *   - a small "find the leftmost match" function for the simple regexes of the other
 *     lists (a character class repeated, an optional \s before it, \s+$, [0-9]{3}); a
 *     generic driver turns matches and gaps into chunks exactly as the regex iterator.
 * The Qwen2 regex is the Llama 3 one with \p{N} instead of \p{N}{1,3} (for this regex the
 * ECMAScript match at each position - ordered alternation, greedy with backtracking, (?!\S)
 * lookahead - is exactly what the Llama 3 splitter computes, with digit groups of one), and
 * Qwen3.5's is Qwen2's with letter runs [\p{L}\p{M}]+ that take combining marks (and
 * punctuation runs [^\s\p{L}\p{M}\p{N}]+ that do not); llama.cpp has a hand-written
 * splitter for each, which split_llama3 follows. Hand-written passes are linear in the chunk
 * length and allocate nothing but the output.
 *
 * Classes: llama.cpp runs regexes with \p{..} on a "collapsed" text (ASCII kept, other code
 * points replaced by a byte for their class, non-ASCII White_Space by \v) and the others
 * through std::wregex (non-ASCII White_Space replaced by \v). In both, \s is White_Space,
 * \p{X} is the Unicode class (ASCII: A-Za-z letters, 0-9 numbers, ASCII punctuation), and a
 * non-ASCII whitespace code point never matches a literal range: the predicates below do
 * the same on the code points.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab_impl.h"

#define WS  SD_UCD_WHITESPACE
#define LET SD_UCD_LETTER
#define NUM SD_UCD_NUMBER

/* The chunk list being split and the code points. */
typedef struct pctx {
    const uint32_t *cps;
    size_t *out;
    size_t n_out, cap_out;
    int oom;
} pctx;

static void emit(pctx *c, size_t len) {
    if (len == 0 || c->oom) return;
    if (c->n_out == c->cap_out) {
        size_t cap = c->cap_out ? c->cap_out * 2 : 64;
        size_t *p = realloc(c->out, cap * sizeof *p);
        if (!p) {
            c->oom = 1;
            return;
        }
        c->out = p;
        c->cap_out = cap;
    }
    c->out[c->n_out++] = len;
}

/* Flags of position i within [.., b); 0 outside (llama.cpp's OUT_OF_RANGE). */
static unsigned fl(const pctx *c, size_t i, size_t b) {
    return i < b ? sd_ucd_flags_of(c->cps[i]) : 0;
}
static uint32_t cp_at(const pctx *c, size_t i, size_t b) {
    return i < b ? c->cps[i] : 0xFFFFFFFFu;
}
static uint32_t ascii_lower(uint32_t x) {
    return x >= 'A' && x <= 'Z' ? x + 32 : x;
}

/* 's 't 'm 'd (2) or 're 've 'll (3) at pos, or 0; case-insensitive when icase (ASCII
 * tolower suffices: scripts/gen_unicode.py checks no other code point lower-cases to
 * these letters). */
static size_t contraction(const pctx *c, size_t pos, size_t b, int icase) {
    if (c->cps[pos] != '\'' || pos + 1 >= b) return 0;
    uint32_t x = c->cps[pos + 1];
    if (icase) x = ascii_lower(x);
    if (x == 's' || x == 't' || x == 'm' || x == 'd') return 2;
    if (pos + 2 >= b) return 0;
    uint32_t y = c->cps[pos + 2];
    if (icase) y = ascii_lower(y);
    if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l')) return 3;
    return 0;
}

/* Whitespace run at pos: its length, and (llama3) the end of its last \r or \n. */
static size_t ws_run(const pctx *c, size_t pos, size_t b, size_t *last_rn) {
    size_t k = 0;
    if (last_rn) *last_rn = 0;
    while (fl(c, pos + k, b) & WS) {
        uint32_t x = c->cps[pos + k];
        if (last_rn && (x == '\r' || x == '\n')) *last_rn = pos + k + 1;
        k++;
    }
    return k;
}

/* unicode_regex_split_custom_gpt2 on [a, b). */
static void split_gpt2(pctx *c, size_t a, size_t b) {
    size_t pos = a;
    while (pos < b) {
        const size_t start = pos;
        const uint32_t x = c->cps[pos];
        const unsigned f = fl(c, pos, b);
        size_t k = contraction(c, pos, b, 0);
        if (k) {
            emit(c, k);
            pos += k;
            continue;
        }
        const unsigned f2 = x == ' ' ? fl(c, pos + 1, b) : f;
        if (f2 & (LET | NUM)) { /* ' ?\p{L}+' | ' ?\p{N}+' */
            const unsigned cls = f2 & LET ? LET : NUM;
            pos += x == ' ';
            while (fl(c, pos, b) & cls)
                pos++;
        } else if (!(f2 & (WS | LET | NUM)) && f2) { /* ' ?[^\s\p{L}\p{N}]+' */
            pos += x == ' ';
            for (unsigned g = fl(c, pos, b); !(g & (WS | LET | NUM)) && g; g = fl(c, pos, b))
                pos++;
        } else {
            size_t nws = ws_run(c, pos, b, NULL);
            if (nws > 1 && pos + nws < b) /* '\s+(?!\S)' */
                pos += nws - 1;
            else if (nws > 0) /* '\s+' */
                pos += nws;
            else /* no match */
                pos++;
        }
        emit(c, pos - start);
    }
}

/* unicode_regex_split_custom_llama3 on [a, b), digit groups of up to max_digits; lm is the
 * class of letter runs: LET (\p{L}), or LET | MARK ([\p{L}\p{M}], Qwen3.5's
 * unicode_regex_split_custom_qwen35, whose punctuation runs then exclude marks too). */
static void split_llama3(pctx *c, size_t a, size_t b, size_t max_digits, unsigned lm) {
    size_t pos = a;
    while (pos < b) {
        const size_t start = pos;
        const uint32_t x = c->cps[pos];
        const unsigned f = fl(c, pos, b);
        size_t k = contraction(c, pos, b, 1); /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        if (k) {
            emit(c, k);
            pos += k;
            continue;
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ (lm: [\p{L}\p{M}]+) */
        if (!(x == '\r' || x == '\n' || (f & NUM)) && ((f & lm) || (fl(c, pos + 1, b) & lm))) {
            pos++;
            while (fl(c, pos, b) & lm)
                pos++;
            emit(c, pos - start);
            continue;
        }
        if (f & NUM) { /* \p{N}{1,max_digits}, repeatedly */
            size_t ini = pos;
            while (fl(c, pos, b) & NUM) {
                if (++pos - ini >= max_digits) {
                    emit(c, pos - ini);
                    ini = pos;
                }
            }
            emit(c, pos - ini);
            continue;
        }
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' (llama.cpp tests f, not f2, for "defined"; lm:
         * [^\s\p{L}\p{M}\p{N}]) */
        const unsigned f2 = x == ' ' ? fl(c, pos + 1, b) : f;
        if (!(f2 & (WS | lm | NUM)) && f) {
            pos += x == ' ';
            for (unsigned g = fl(c, pos, b); !(g & (WS | lm | NUM)) && g; g = fl(c, pos, b))
                pos++;
            for (uint32_t y = cp_at(c, pos, b); y == '\r' || y == '\n'; y = cp_at(c, pos, b))
                pos++;
            emit(c, pos - start);
            continue;
        }
        size_t last_rn;
        size_t nws = ws_run(c, pos, b, &last_rn);
        if (last_rn > 0) /* \s*[\r\n]+ */
            pos = last_rn;
        else if (nws > 1 && pos + nws < b) /* \s+(?!\S) */
            pos += nws - 1;
        else if (nws > 0) /* \s+ */
            pos += nws;
        else
            pos++;
        emit(c, pos - start);
    }
}

/* ------------------------------------------------------------------ simple regexes */

typedef struct range {
    uint32_t lo, hi;
} range;

/* The DeepSeek LLM pre-tokenizer's letter class (its tokenizer.json regex, as in
 * llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM): cased letters of selected scripts. */
static const range DS_LETTERS[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
/* [!-/:-~！-／：-～‘-‟　-。] */
static const range DS_PUNCT[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0xFF01, 0xFF0F},
                                 {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};
/* [一-龥ࠀ-一가-퟿] */
static const range DS_CJK[] = {{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}};

#define N_RANGES(a) (sizeof(a) / sizeof((a)[0]))

static int is_ws(uint32_t x) {
    return (sd_ucd_flags_of(x) & WS) != 0;
}

/* A literal class of std::wregex: non-ASCII whitespace was replaced by \v, so never in. */
static int in_ranges(uint32_t x, const range *r, size_t n) {
    if (x > 0x7F && is_ws(x)) return 0;
    for (size_t i = 0; i < n; i++)
        if (x >= r[i].lo && x <= r[i].hi) return 1;
    return 0;
}

typedef enum cls {
    CLS_CRLF,       /* [\r\n] */
    CLS_NUMBER,     /* \p{N} */
    CLS_PUNCT,      /* [\p{P}\$\+<=>\^~\|] */
    CLS_PUNCT_BT,   /* [\p{P}\$\+<=>\^~\|`] */
    CLS_DS_LETTERS, /* DS_LETTERS */
    CLS_DS_PUNCT,   /* DS_PUNCT */
    CLS_DS_CJK,     /* DS_CJK */
    CLS_LETTER,     /* \p{L} */
    CLS_P,          /* \p{P} (ASCII: !"#%&'()*,-./:;?@[\]_{}) */
} cls;

static int in_cls(uint32_t x, cls k) {
    switch (k) {
    case CLS_CRLF:
        return x == '\r' || x == '\n';
    case CLS_NUMBER:
        return (sd_ucd_flags_of(x) & NUM) != 0;
    case CLS_PUNCT:
    case CLS_PUNCT_BT:
        /* ASCII: \p{P} is !"#%&'()*,-./:;?@[\]_{}; with $+<=>^~| that is every ASCII
         * punctuation character but the backtick, which falcon's list adds. */
        if (x < 0x80)
            return ((x >= 0x21 && x <= 0x2F) || (x >= 0x3A && x <= 0x40) ||
                    (x >= 0x5B && x <= 0x60) || (x >= 0x7B && x <= 0x7E)) &&
                   (x != '`' || k == CLS_PUNCT_BT);
        return (sd_ucd_flags_of(x) & (SD_UCD_PUNCT | WS)) == SD_UCD_PUNCT;
    case CLS_DS_LETTERS:
        return in_ranges(x, DS_LETTERS, N_RANGES(DS_LETTERS));
    case CLS_DS_PUNCT:
        return in_ranges(x, DS_PUNCT, N_RANGES(DS_PUNCT));
    case CLS_DS_CJK:
        return in_ranges(x, DS_CJK, N_RANGES(DS_CJK));
    case CLS_LETTER: /* the table's ASCII letters are A-Za-z, its ASCII \p{P} as above */
        return (sd_ucd_flags_of(x) & LET) != 0;
    case CLS_P:
        return (sd_ucd_flags_of(x) & SD_UCD_PUNCT) != 0;
    }
    return 0;
}

/* What a simple regex looks like: [class], [class]+, \s?[class]+, \s+$, [0-9]{3}. */
typedef enum shape { SH_ONE, SH_RUN, SH_WS_OPT_RUN, SH_WS_TO_END, SH_DIGITS3 } shape;

/* Leftmost match in [from, b): 1 and [*ms, *me), or 0. */
static int find_match(const pctx *c, shape sh, cls k, size_t from, size_t b, size_t *ms,
                      size_t *me) {
    const uint32_t *x = c->cps;
    if (sh == SH_WS_TO_END) {
        size_t t = b;
        while (t > from && is_ws(x[t - 1]))
            t--;
        *ms = t;
        *me = b;
        return t < b;
    }
    for (size_t p = from; p < b; p++) {
        size_t q;
        if (sh == SH_DIGITS3) {
            if (p + 3 > b) return 0;
            if (!(x[p] >= '0' && x[p] <= '9' && x[p + 1] >= '0' && x[p + 1] <= '9' &&
                  x[p + 2] >= '0' && x[p + 2] <= '9'))
                continue;
            q = p + 3;
        } else if (in_cls(x[p], k)) {
            q = p + 1;
        } else if (sh == SH_WS_OPT_RUN && is_ws(x[p]) && p + 1 < b && in_cls(x[p + 1], k)) {
            q = p + 2;
        } else {
            continue;
        }
        if (sh != SH_ONE && sh != SH_DIGITS3)
            while (q < b && in_cls(x[q], k))
                q++;
        *ms = p;
        *me = q;
        return 1;
    }
    return 0;
}

/* std::regex_iterator over [a, b): gap, match, gap, match, ..., gap. */
static void split_match(pctx *c, shape sh, cls k, size_t a, size_t b) {
    size_t pos = a, ms, me;
    while (pos < b && find_match(c, sh, k, pos, b, &ms, &me)) {
        emit(c, ms - pos);
        emit(c, me - ms);
        pos = me;
    }
    emit(c, b - pos);
}

/* ------------------------------------------------------------------ pass lists */

typedef enum pass_kind { PASS_GPT2, PASS_LLAMA3, PASS_QWEN2, PASS_QWEN35, PASS_MATCH } pass_kind;

typedef struct pass {
    pass_kind kind;
    shape sh;
    cls k;
} pass;

/* The pass lists of llama.cpp's llm_tokenizer_bpe (the regexes in comments). */
static const pass GPT2 = {PASS_GPT2, SH_ONE, CLS_CRLF};

static pass match(shape sh, cls k) {
    return (pass){PASS_MATCH, sh, k};
}

static size_t passes_of(pre_type pre, pass *p) {
    size_t n = 0;
    switch (pre) {
    case PRE_NONE:
    case PRE_GPT2:
        p[n++] = GPT2;
        break;
    case PRE_LLAMA3:
        p[n++] = (pass){PASS_LLAMA3, SH_ONE, CLS_CRLF};
        break;
    case PRE_QWEN2:
        p[n++] = (pass){PASS_QWEN2, SH_ONE, CLS_CRLF};
        break;
    case PRE_QWEN35:
        p[n++] = (pass){PASS_QWEN35, SH_ONE, CLS_CRLF};
        break;
    case PRE_STARCODER: /* \p{N}, gpt2 */
        p[n++] = match(SH_ONE, CLS_NUMBER);
        p[n++] = GPT2;
        break;
    case PRE_FALCON: /* [\p{P}\$\+<=>\^~\|`]+, gpt2, [0-9][0-9][0-9] */
        p[n++] = match(SH_RUN, CLS_PUNCT_BT);
        p[n++] = GPT2;
        p[n++] = match(SH_DIGITS3, CLS_CRLF);
        break;
    case PRE_DEFAULT: /* [\p{P}\$\+<=>\^~\|]+, gpt2, \p{N}+, [0-9][0-9][0-9] */
        p[n++] = match(SH_RUN, CLS_PUNCT);
        p[n++] = GPT2;
        p[n++] = match(SH_RUN, CLS_NUMBER);
        p[n++] = match(SH_DIGITS3, CLS_CRLF);
        break;
    case PRE_DEEPSEEK_LLM: /* [\r\n], \s?[letters]+, \s?[punct]+, \s+$, [cjk]+, \p{N}+ */
        p[n++] = match(SH_ONE, CLS_CRLF);
        p[n++] = match(SH_WS_OPT_RUN, CLS_DS_LETTERS);
        p[n++] = match(SH_WS_OPT_RUN, CLS_DS_PUNCT);
        p[n++] = match(SH_WS_TO_END, CLS_CRLF);
        p[n++] = match(SH_RUN, CLS_DS_CJK);
        p[n++] = match(SH_RUN, CLS_NUMBER);
        break;
    case PRE_DEEPSEEK_CODER: /* [\r\n], \s?\p{L}+, \s?\p{P}+, [cjk]+, \p{N} */
        p[n++] = match(SH_ONE, CLS_CRLF);
        p[n++] = match(SH_WS_OPT_RUN, CLS_LETTER);
        p[n++] = match(SH_WS_OPT_RUN, CLS_P);
        p[n++] = match(SH_RUN, CLS_DS_CJK);
        p[n++] = match(SH_ONE, CLS_NUMBER);
        break;
    }
    return n;
}

int pretok_split(pre_type pre, const uint32_t *cps, size_t n, size_t **lens, size_t *n_lens) {
    *lens = NULL;
    *n_lens = 0;
    pass passes[8];
    size_t np = passes_of(pre, passes);
    size_t *chunks = malloc(sizeof *chunks);
    if (!chunks) return -1;
    chunks[0] = n;
    size_t n_chunks = n > 0;
    for (size_t i = 0; i < np; i++) {
        pctx c = {cps, NULL, 0, 0, 0};
        size_t a = 0;
        for (size_t j = 0; j < n_chunks; j++) {
            size_t b = a + chunks[j];
            switch (passes[i].kind) {
            case PASS_GPT2:
                split_gpt2(&c, a, b);
                break;
            case PASS_LLAMA3:
                split_llama3(&c, a, b, 3, LET);
                break;
            case PASS_QWEN2:
                split_llama3(&c, a, b, 1, LET);
                break;
            case PASS_QWEN35:
                split_llama3(&c, a, b, 1, LET | SD_UCD_MARK);
                break;
            case PASS_MATCH:
                split_match(&c, passes[i].sh, passes[i].k, a, b);
                break;
            }
            a = b;
        }
        free(chunks);
        if (c.oom) {
            free(c.out);
            return -1;
        }
        chunks = c.out;
        n_chunks = c.n_out;
    }
    *lens = chunks;
    *n_lens = n_chunks;
    return 0;
}

/* ------------------------------------------------------------------ names */

typedef struct pre_name {
    const char *name;
    pre_type pre;
    int add_bos, clean_spaces, ignore_merges;
} pre_name;

/* llama.cpp's llama_vocab::impl::load, tokenizer_pre -> pre_type and flags (BPE default:
 * add_bos false, clean_spaces true, ignore_merges false). */
static const pre_name PRE_NAMES[] = {
    {"default", PRE_DEFAULT, 0, 1, 0},
    {"llama3", PRE_LLAMA3, 1, 1, 1},
    {"llama-v3", PRE_LLAMA3, 1, 1, 1},
    {"llama-bpe", PRE_LLAMA3, 1, 1, 1},
    {"falcon3", PRE_LLAMA3, 1, 1, 1},
    {"falcon-h1", PRE_LLAMA3, 1, 1, 1},
    {"pixtral", PRE_LLAMA3, 1, 1, 1},
    {"midm-2.0", PRE_LLAMA3, 1, 1, 1},
    {"lfm2", PRE_LLAMA3, 1, 1, 1},
    {"dbrx", PRE_LLAMA3, 0, 1, 0},
    {"smaug-bpe", PRE_LLAMA3, 0, 1, 0},
    {"deepseek-llm", PRE_DEEPSEEK_LLM, 0, 0, 0},
    {"deepseek-coder", PRE_DEEPSEEK_CODER, 0, 0, 0},
    {"falcon", PRE_FALCON, 0, 1, 0},
    {"mpt", PRE_GPT2, 0, 1, 0},
    {"olmo", PRE_GPT2, 0, 1, 0},
    {"jais", PRE_GPT2, 0, 1, 0},
    {"gpt-2", PRE_GPT2, 0, 1, 0},
    {"phi-2", PRE_GPT2, 0, 1, 0},
    {"jina-es", PRE_GPT2, 0, 1, 0},
    {"jina-de", PRE_GPT2, 0, 1, 0},
    {"jina-v2-es", PRE_GPT2, 0, 1, 0},
    {"jina-v2-de", PRE_GPT2, 0, 1, 0},
    {"gigachat", PRE_GPT2, 0, 1, 0},
    {"a.x-4.0", PRE_GPT2, 0, 1, 0},
    {"mellum", PRE_GPT2, 0, 1, 0},
    {"exaone4", PRE_GPT2, 0, 1, 0},
    {"trillion", PRE_GPT2, 0, 0, 0},
    {"granite-docling", PRE_GPT2, 0, 0, 0},
    {"starcoder", PRE_STARCODER, 0, 1, 0},
    {"refact", PRE_STARCODER, 0, 1, 0},
    {"codeshell", PRE_STARCODER, 0, 1, 0},
    {"exaone", PRE_STARCODER, 0, 1, 0},
    {"minerva-7b", PRE_STARCODER, 0, 1, 0},
    {"mellum2", PRE_STARCODER, 0, 1, 0},
    {"command-r", PRE_STARCODER, 0, 0, 0},
    {"smollm", PRE_STARCODER, 0, 0, 0},
    {"qwen2", PRE_QWEN2, 0, 0, 0},
    {"qwen35", PRE_QWEN35, 0, 0, 0},
    {"deepseek-r1-qwen", PRE_QWEN2, 0, 0, 0},
    {"kormo", PRE_QWEN2, 0, 0, 0},
    {"f2llmv2", PRE_QWEN2, 0, 0, 0},
    {"hunyuan", PRE_QWEN2, 0, 0, 0},
    {"solar-open", PRE_QWEN2, 0, 0, 0},
    {"stablelm2", PRE_QWEN2, 0, 1, 0},
    {"megrez", PRE_QWEN2, 0, 1, 0},
};

int pretok_from_name(const char *name, size_t len, pre_type *pre, int *add_bos, int *clean_spaces,
                     int *ignore_merges) {
    for (size_t i = 0; i < N_RANGES(PRE_NAMES); i++) {
        const pre_name *p = &PRE_NAMES[i];
        if (strlen(p->name) == len && memcmp(p->name, name, len) == 0) {
            *pre = p->pre;
            *add_bos = p->add_bos;
            *clean_spaces = p->clean_spaces;
            *ignore_merges = p->ignore_merges;
            return 0;
        }
    }
    return -1;
}

const char *pretok_supported_names(void) {
    return "default, gpt-2, llama-bpe, qwen2, qwen35, smollm, starcoder, deepseek-llm, "
           "deepseek-coder, falcon, and their llama.cpp aliases: llama3, llama-v3, falcon3, dbrx, "
           "smaug-bpe, mpt, olmo, phi-2, stablelm2, command-r, refact, ...";
}
