/*
 * Special tokens: llama.cpp's text-based fixups at load, and partitioning a text on
 * special-token texts before tokenizing (llama_vocab::impl::tokenizer_st_partition).
 *
 * Fixups (llama_vocab::impl::load, "auto-detect special tokens by text"), in llama.cpp's
 * order:
 *   1. EOT, EOM and the six FIM ids that the file does not set are found by text (lists
 *      below); each token found is made CONTROL. llama.cpp takes the first match in its
 *      hash map's iteration order (unspecified); we take the first text of the list that
 *      the vocabulary has, so Llama 3's EOT is <|eot_id|> (not <|end_of_text|>) and
 *      Qwen's <|im_end|> (not <|endoftext|>).
 *   2. The EOG (end-of-generation) set: the FIM pad/repo/sep ids, every token whose text is
 *      in EOG_TEXTS (each made CONTROL), the gpt-oss hack (<|channel|> <|message|>
 *      <|start|> <|constrain|> become USER_DEFINED), then eos, eot, eom; then the two
 *      exceptions: with <|return|> + <|call|> (or <|call(s)|> + <|flush|>) present,
 *      <|end|> leaves the set and becomes USER_DEFINED; with <|tool_response> present,
 *      </s> leaves the set and becomes NORMAL.
 * (llama.cpp's "unused" detection only adds an attribute nothing here reads.)
 *
 * Partitioning: every token with CONTROL, USER_DEFINED or UNKNOWN set is "special"; they
 * are tried longest text first (equal lengths by id: llama.cpp's std::sort leaves that
 * order unspecified), skipping CONTROL/UNKNOWN ones unless parse_special. For each, every
 * raw fragment is split at the leftmost non-overlapping occurrences of its text. To keep
 * this fast for vocabularies with thousands of special tokens (deepseek-llm has 2398
 * user-defined ones), one scan of the text first finds which special texts occur at all
 * (a byte filter on first bytes, then a hash lookup per distinct special length); only
 * those are used, which gives the same fragments since absent texts split nothing.
 * llama.cpp's LSTRIP/RSTRIP attributes are only set for a few model names (phi-3,
 * jina-v2, modern-bert) whose architectures specdec does not load; not applied.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/vocab_impl.h"

static const char *const EOT_TEXTS[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};
static const char *const EOM_TEXTS[] = {"<|eom_id|>"};
static const char *const FIM_PRE_TEXTS[] = {"<|fim_prefix|>",
                                            "<fim-prefix>",
                                            "<fim_prefix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "begin\xef\xbd\x9c>",
                                            "<PRE>",
                                            "\xe2\x96\x81<PRE>",
                                            "<|code_prefix|>",
                                            "<|prefix|>"};
static const char *const FIM_SUF_TEXTS[] = {"<|fim_suffix|>",
                                            "<fim-suffix>",
                                            "<fim_suffix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "hole\xef\xbd\x9c>",
                                            "<SUF>",
                                            "\xe2\x96\x81<SUF>",
                                            "<|code_suffix|>",
                                            "<|suffix|>"};
static const char *const FIM_MID_TEXTS[] = {"<|fim_middle|>",
                                            "<fim-middle>",
                                            "<fim_middle>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "end\xef\xbd\x9c>",
                                            "<MID>",
                                            "\xe2\x96\x81<MID>",
                                            "<|code_middle|>",
                                            "<|middle|>"};
static const char *const FIM_PAD_TEXTS[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                            "[PAD]"};
static const char *const FIM_REP_TEXTS[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                            "<reponame>"};
static const char *const FIM_SEP_TEXTS[] = {"<|file_sep|>"};
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "[e~[",
};
static const char *const GPT_OSS_USER_TEXTS[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                 "<|constrain|>"};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static int32_t find_text(const sd_vocab *v, const char *s) {
    return vocab_lookup(v, s, strlen(s));
}

/* The token of the first text of the list the vocabulary has, or -1. */
static int32_t first_of(const sd_vocab *v, const char *const *texts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = find_text(v, texts[i]);
        if (id >= 0) return id;
    }
    return -1;
}

static void detect(sd_vocab *v, int32_t *id, const char *const *texts, size_t n) {
    if (*id >= 0) return;
    *id = first_of(v, texts, n);
    if (*id >= 0) v->attr[*id] |= ATTR_CONTROL;
}

typedef struct id_set {
    int32_t *p;
    int32_t n, cap;
} id_set;

static int set_add(id_set *s, int32_t id) {
    if (id < 0) return 0;
    for (int32_t i = 0; i < s->n; i++)
        if (s->p[i] == id) return 0;
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 16;
        int32_t *p = realloc(s->p, (size_t)cap * sizeof *p);
        if (!p) return -1;
        s->p = p;
        s->cap = cap;
    }
    s->p[s->n++] = id;
    return 0;
}

static void set_remove(id_set *s, int32_t id) {
    for (int32_t i = 0; i < s->n; i++)
        if (s->p[i] == id) {
            s->p[i] = s->p[--s->n];
            return;
        }
}

static int set_has_text(const sd_vocab *v, const id_set *s, const char *text, int32_t *id) {
    const size_t tl = strlen(text);
    for (int32_t i = 0; i < s->n; i++)
        if (v->len[s->p[i]] == tl && memcmp(vocab_text(v, s->p[i]), text, tl) == 0) {
            if (id) *id = s->p[i];
            return 1;
        }
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int vocab_fixup_specials(sd_vocab *v, sd_error *err) {
    detect(v, &v->eot, EOT_TEXTS, N_OF(EOT_TEXTS));
    detect(v, &v->eom, EOM_TEXTS, N_OF(EOM_TEXTS));
    detect(v, &v->fim_pre, FIM_PRE_TEXTS, N_OF(FIM_PRE_TEXTS));
    detect(v, &v->fim_suf, FIM_SUF_TEXTS, N_OF(FIM_SUF_TEXTS));
    detect(v, &v->fim_mid, FIM_MID_TEXTS, N_OF(FIM_MID_TEXTS));
    detect(v, &v->fim_pad, FIM_PAD_TEXTS, N_OF(FIM_PAD_TEXTS));
    detect(v, &v->fim_rep, FIM_REP_TEXTS, N_OF(FIM_REP_TEXTS));
    detect(v, &v->fim_sep, FIM_SEP_TEXTS, N_OF(FIM_SEP_TEXTS));

    id_set eog = {NULL, 0, 0};
    int bad = set_add(&eog, v->fim_pad) || set_add(&eog, v->fim_rep) || set_add(&eog, v->fim_sep);
    for (size_t i = 0; i < N_OF(EOG_TEXTS) && !bad; i++) {
        int32_t id = find_text(v, EOG_TEXTS[i]);
        if (id < 0) continue;
        v->attr[id] |= ATTR_CONTROL;
        bad = set_add(&eog, id);
    }
    for (size_t i = 0; i < N_OF(GPT_OSS_USER_TEXTS); i++) {
        int32_t id = find_text(v, GPT_OSS_USER_TEXTS[i]);
        if (id >= 0) v->attr[id] = ATTR_USER_DEFINED;
    }
    if (!bad) bad = set_add(&eog, v->eos) || set_add(&eog, v->eot) || set_add(&eog, v->eom);
    if (bad) {
        free(eog.p);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", v->path);
    }
    /* harmony / solar-open: <|end|> is not an end of generation there */
    int32_t end_id = -1, s_id = -1;
    int has_return = set_has_text(v, &eog, "<|return|>", NULL);
    int has_call =
        set_has_text(v, &eog, "<|call|>", NULL) || set_has_text(v, &eog, "<|calls|>", NULL);
    int has_flush = set_has_text(v, &eog, "<|flush|>", NULL);
    if (set_has_text(v, &eog, "<|end|>", &end_id) &&
        ((has_return && has_call) || (has_call && has_flush))) {
        set_remove(&eog, end_id);
        v->attr[end_id] = ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is not one when <|tool_response> is */
    if (set_has_text(v, &eog, "<|tool_response>", NULL) && set_has_text(v, &eog, "</s>", &s_id)) {
        set_remove(&eog, s_id);
        v->attr[s_id] = ATTR_NORMAL;
    }
    if (eog.n) qsort(eog.p, (size_t)eog.n, sizeof *eog.p, cmp_i32);
    v->eog = eog.p;
    v->n_eog = eog.n;
    return SD_OK;
}

/* ------------------------------------------------------------------ special cache */

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_len_id(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int is_special(const sd_vocab *v, int32_t id) {
    return (v->attr[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) != 0;
}

static int usable(const sd_vocab *v, int32_t id, int parse_special) {
    return parse_special || !(v->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN));
}

int vocab_build_special_cache(sd_vocab *v, sd_error *err) {
    int32_t n = 0;
    for (int32_t i = 0; i < v->n; i++)
        n += is_special(v, i);
    if (n == 0) return SD_OK;
    len_id *tmp = malloc((size_t)n * sizeof *tmp);
    v->special = malloc((size_t)n * sizeof *v->special);
    if (!tmp || !v->special) {
        free(tmp);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", v->path);
    }
    int32_t k = 0;
    for (int32_t i = 0; i < v->n; i++)
        if (is_special(v, i)) tmp[k++] = (len_id){v->len[i], i};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_len_id);
    for (k = 0; k < n; k++)
        v->special[k] = tmp[k].id;
    v->n_special = n;
    free(tmp);
    for (int ps = 0; ps < 2; ps++) {
        for (int32_t i = 0; i < n; i++) {
            int32_t id = v->special[i];
            if (!usable(v, id, ps)) continue;
            v->sp_first[ps][(unsigned char)vocab_text(v, id)[0]] = 1;
            int seen = 0;
            for (int j = 0; j < v->n_sp_lens[ps] && j < SP_MAX_LENS && !seen; j++)
                seen = v->sp_lens[ps][j] == v->len[id];
            if (seen) continue;
            if (v->n_sp_lens[ps] < SP_MAX_LENS) v->sp_lens[ps][v->n_sp_lens[ps]] = v->len[id];
            if (v->n_sp_lens[ps] <= SP_MAX_LENS) v->n_sp_lens[ps]++;
        }
    }
    return SD_OK;
}

/* ------------------------------------------------------------------ partition */

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

/* The usable special tokens whose text occurs in text[0..len), in cache order. */
static int present_specials(const sd_vocab *v, const char *text, size_t len, int parse_special,
                            len_id **out, int32_t *n_out) {
    const uint8_t *first = v->sp_first[parse_special];
    const uint32_t *lens = v->sp_lens[parse_special];
    const int many = v->n_sp_lens[parse_special] > SP_MAX_LENS;
    const int n_lens = many ? 0 : v->n_sp_lens[parse_special];
    *out = NULL;
    *n_out = 0;
    if (v->n_sp_lens[parse_special] == 0) return 0;
    id_set found = {NULL, 0, 0};
    for (size_t p = 0; p < len; p++) {
        if (!first[(unsigned char)text[p]]) continue;
        if (many) { /* more than 64 distinct lengths: try every usable special here */
            for (int32_t i = 0; i < v->n_special; i++) {
                int32_t id = v->special[i];
                if (usable(v, id, parse_special) && v->len[id] <= len - p &&
                    memcmp(text + p, vocab_text(v, id), v->len[id]) == 0 && set_add(&found, id))
                    goto oom;
            }
            continue;
        }
        for (int j = 0; j < n_lens; j++) {
            if (lens[j] > len - p) continue;
            int32_t id = vocab_lookup(v, text + p, lens[j]);
            if (id >= 0 && is_special(v, id) && usable(v, id, parse_special) && set_add(&found, id))
                goto oom;
        }
    }
    if (found.n) {
        len_id *li = malloc((size_t)found.n * sizeof *li);
        if (!li) goto oom;
        for (int32_t i = 0; i < found.n; i++)
            li[i] = (len_id){v->len[found.p[i]], found.p[i]};
        qsort(li, (size_t)found.n, sizeof *li, cmp_len_id);
        *out = li;
        *n_out = found.n;
    }
    free(found.p);
    return 0;
oom:
    free(found.p);
    return -1;
}

/* Split the raw fragments of *fb at every occurrence of token id. */
static int split_on(const sd_vocab *v, const char *text, int32_t id, frag_buf *fb) {
    const char *tt = vocab_text(v, id);
    const size_t tl = v->len[id];
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
    }
    free(fb->p);
    *fb = nb;
    return 0;
oom:
    free(nb.p);
    return -1;
}

int vocab_partition(const sd_vocab *v, const char *text, size_t len, int parse_special,
                    frag_buf *out) {
    out->p = NULL;
    out->n = out->cap = 0;
    if (len == 0) return 0;
    if (frag_push(out, -1, 0, len)) return SD_ERR_OOM;
    len_id *ids;
    int32_t n_ids;
    if (present_specials(v, text, len, parse_special, &ids, &n_ids)) return SD_ERR_OOM;
    for (int32_t i = 0; i < n_ids; i++)
        if (split_on(v, text, ids[i].id, out)) {
            free(ids);
            return SD_ERR_OOM;
        }
    free(ids);
    return 0;
}
