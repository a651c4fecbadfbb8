/*
 * Loading a vocabulary from GGUF (llama_vocab::impl::load in llama.cpp's
 * src/llama-vocab.cpp), the accessors, and the draft/target pair check.
 *
 * sd_vocab_load reads, in this order (each step one function below):
 *   1. the model type and pre-tokenizer: tokenizer.ggml.model ("llama" -> SPM, "gpt2" ->
 *      BPE) and tokenizer.ggml.pre, with llama.cpp's defaults per type and per
 *      pre-tokenizer (special ids, add_bos, add_space_prefix, clean_spaces, ignore_merges);
 *   2. the token texts: one arena, a text -> id hash table, duplicates rejected;
 *   3. scores and token types (one entry per token) -> attributes;
 *   4. special ids and the add_bos/add_eos/add_space_prefix keys;
 *   5. BPE: the merges (bpe.c);
 *   6. the byte-fallback table;
 *   7. llama.cpp's text-based fixups (special.c), the check that BPE normal tokens are
 *      GPT-2 text, and the special-token cache (special.c);
 *   8. tokenizer.chat_template.
 * Deviations from llama.cpp (stricter): scores/token_type must have exactly one entry per
 * token (llama.cpp accepts longer arrays); bos/eos/eot/eom/unk ids present but out of
 * range are errors (llama.cpp warns and keeps the default; we do that for pad/fim ids);
 * token texts must be valid UTF-8; BPE merges must name tokens. A BPE file without
 * tokenizer.ggml.pre uses "default", as llama.cpp (which warns).
 */
#include "runtime/tokenizer/vocab_impl.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tokenizer/unicode.h"

#define KEY_MODEL      "tokenizer.ggml.model"
#define KEY_PRE        "tokenizer.ggml.pre"
#define KEY_SCORES     "tokenizer.ggml.scores"
#define KEY_TYPES      "tokenizer.ggml.token_type"
#define KEY_ADD_BOS    "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS    "tokenizer.ggml.add_eos_token"
#define KEY_ADD_PREFIX "tokenizer.ggml.add_space_prefix"
#define KEY_BOS        "tokenizer.ggml.bos_token_id"
#define KEY_EOS        "tokenizer.ggml.eos_token_id"
#define KEY_CHAT       "tokenizer.chat_template"

enum { TT_NORMAL = 1, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE };

void sd_vocab_free(sd_vocab *v) {
    if (!v) return;
    free(v->path);
    free(v->pre_name);
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->ttype);
    free(v->attr);
    free(v->ht);
    free(v->special);
    free(v->eog);
    free(v->merges);
    free(v->mt);
    free(v->chat_template);
    free(v);
}

/* ------------------------------------------------------------------ 1. model type */

static int str_is(const char *s, size_t n, const char *lit) {
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

static int load_model_type(sd_vocab *v, const sd_gguf *g, sd_error *err) {
    const char *model, *pre = NULL;
    size_t model_len, pre_len = 0;
    int rc = sd_gguf_get_str(g, KEY_MODEL, &model, &model_len, err);
    if (rc != SD_OK) return rc;
    if (sd_gguf_find_key(g, KEY_PRE) >= 0 &&
        (rc = sd_gguf_get_str(g, KEY_PRE, &pre, &pre_len, err)) != SD_OK)
        return rc;
    if (pre) {
        v->pre_name = malloc(pre_len + 1);
        if (!v->pre_name) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", v->path);
        memcpy(v->pre_name, pre, pre_len);
        v->pre_name[pre_len] = '\0';
    }
    v->eot = v->eom = v->pad = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    if (str_is(model, model_len, "llama")) {
        v->type = SD_VOCAB_SPM;
        v->pre = PRE_NONE;
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_bos = 1;
        v->add_space_prefix = 1;
        return SD_OK;
    }
    if (str_is(model, model_len, "gpt2")) {
        v->type = SD_VOCAB_BPE;
        v->bos = v->eos = 11; /* llama.cpp's BPE defaults (disabled when out of range) */
        v->unk = -1;
        v->clean_spaces = 1;
        if (!pre) pre = "default", pre_len = 7;
        if (pretok_from_name(pre, pre_len, &v->pre, &v->add_bos, &v->clean_spaces,
                             &v->ignore_merges) != 0)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "%s: metadata key '%s' = '%.*s': unknown pre-tokenizer (supported: "
                             "%s)",
                             v->path, KEY_PRE, (int)(pre_len > 64 ? 64 : pre_len), pre,
                             pretok_supported_names());
        return SD_OK;
    }
    return sd_errorf(err, SD_ERR_UNSUPPORTED,
                     "%s: metadata key '%s' = '%.*s': tokenizer model not supported (only "
                     "'llama' SentencePiece and 'gpt2' byte-level BPE are)",
                     v->path, KEY_MODEL, (int)(model_len > 64 ? 64 : model_len), model);
}

/* ------------------------------------------------------------------ 2. token texts */

static int load_token_count(const sd_vocab *v, const sd_gguf *g, int32_t *n, sd_error *err) {
    if (sd_gguf_find_key(g, KEY_TOKENS) < 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: missing metadata key '%s'", v->path, KEY_TOKENS);
    sd_gguf_vtype et;
    uint64_t n64 = 0;
    const void *unused;
    int rc = sd_gguf_get_arr(g, KEY_TOKENS, &et, &n64, &unused, err);
    if (rc != SD_OK) return rc;
    if (et != SD_GGUF_STRING)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' must be an array of strings",
                         v->path, KEY_TOKENS);
    if (n64 == 0 || n64 > (uint64_t)INT32_MAX / 4)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' has %" PRIu64 " tokens",
                         v->path, KEY_TOKENS, n64);
    *n = (int32_t)n64;
    return SD_OK;
}

/* Copy the texts into one arena (empty texts become "[EMPTY_<id>]", as llama.cpp). */
static int load_texts(sd_vocab *v, const sd_gguf *g, sd_error *err) {
    const int64_t kv = sd_gguf_find_key(g, KEY_TOKENS);
    size_t total = 0;
    for (int32_t i = 0; i < v->n; i++) {
        const char *s;
        size_t l, at = 0;
        if (sd_gguf_arr_str(g, kv, (uint64_t)i, &s, &l) != SD_OK)
            return sd_errorf(err, SD_ERR_FORMAT, "%s: cannot read '%s'[%d]", v->path, KEY_TOKENS,
                             (int)i);
        if (l > UINT32_MAX / 2)
            return sd_errorf(err, SD_ERR_FORMAT, "%s: '%s'[%d] is %zu bytes long", v->path,
                             KEY_TOKENS, (int)i, l);
        if (!sd_utf8_valid(s, l, &at))
            return sd_errorf(err, SD_ERR_FORMAT,
                             "%s: '%s'[%d] is not valid UTF-8 (byte 0x%02X at offset %zu)", v->path,
                             KEY_TOKENS, (int)i, (unsigned char)s[at], at);
        if (sd_add_size(total, (l ? l : 24) + 1, &total) != 0)
            return sd_errorf(err, SD_ERR_OOM, "%s: vocabulary too large", v->path);
    }
    v->arena = malloc(total);
    if (!v->arena) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", v->path);
    size_t pos = 0;
    for (int32_t i = 0; i < v->n; i++) {
        const char *s;
        size_t l;
        sd_gguf_arr_str(g, kv, (uint64_t)i, &s, &l);
        v->off[i] = pos;
        if (l == 0) {
            l = (size_t)snprintf(v->arena + pos, 24, "[EMPTY_%d]", (int)i);
        } else {
            memcpy(v->arena + pos, s, l);
            v->arena[pos + l] = '\0';
        }
        v->len[i] = (uint32_t)l;
        if (v->len[i] > v->max_len) v->max_len = v->len[i];
        pos += l + 1;
    }
    return SD_OK;
}

/* text -> id, load factor <= 1/2; a second id with the same text is an error. */
static int build_hash(sd_vocab *v, sd_error *err) {
    size_t cap = 16;
    while (cap < 2 * (size_t)v->n)
        cap *= 2;
    v->ht = malloc(cap * sizeof *v->ht);
    if (!v->ht) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", v->path);
    memset(v->ht, 0xff, cap * sizeof *v->ht);
    v->ht_mask = cap - 1;
    for (int32_t i = 0; i < v->n; i++) {
        const uint64_t hash = vocab_hash(vocab_text(v, i), v->len[i]);
        size_t h = (size_t)hash & v->ht_mask;
        while (v->ht[h].id >= 0) {
            int32_t j = v->ht[h].id;
            if (v->len[j] == v->len[i] &&
                memcmp(vocab_text(v, j), vocab_text(v, i), v->len[i]) == 0) {
                char t[96];
                sd_text_render(vocab_text(v, i), v->len[i], t, sizeof t);
                return sd_errorf(err, SD_ERR_FORMAT,
                                 "%s: '%s': duplicate token text '%s' at ids %d and %d", v->path,
                                 KEY_TOKENS, t, (int)j, (int)i);
            }
            h = (h + 1) & v->ht_mask;
        }
        v->ht[h].id = i;
        v->ht[h].h = (uint32_t)(hash >> 32);
    }
    return SD_OK;
}

/* ------------------------------------------------------------------ 3. scores, types */

/* Numeric per-token array: absent -> *data = NULL; else exactly one entry per token. */
static int per_token_arr(const sd_vocab *v, const sd_gguf *g, const char *key, int want_score,
                         sd_gguf_vtype *et, const void **data, sd_error *err) {
    *data = NULL;
    if (sd_gguf_find_key(g, key) < 0) return SD_OK;
    uint64_t cnt = 0;
    int rc = sd_gguf_get_arr(g, key, et, &cnt, data, err);
    if (rc != SD_OK) return rc;
    int ok = want_score ? (*et == SD_GGUF_F32 || *et == SD_GGUF_I32) : (*et == SD_GGUF_I32);
    if (!ok)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: metadata key '%s' must be an array of %s",
                         v->path, key, want_score ? "f32 (or i32)" : "i32");
    if (cnt != (uint64_t)v->n)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: metadata key '%s' has %" PRIu64
                         " elements, expected %d (one per entry of '%s')",
                         v->path, key, cnt, (int)v->n, KEY_TOKENS);
    return SD_OK;
}

static uint16_t attr_of_type(int32_t t) {
    switch (t) {
    case TT_NORMAL:
        return ATTR_NORMAL;
    case TT_UNKNOWN:
        return ATTR_UNKNOWN;
    case TT_CONTROL:
        return ATTR_CONTROL;
    case TT_USER_DEFINED:
        return ATTR_USER_DEFINED;
    case TT_UNUSED:
        return ATTR_UNUSED;
    case TT_BYTE:
        return ATTR_BYTE;
    default:
        return ATTR_UNDEFINED;
    }
}

static int load_scores_types(sd_vocab *v, const sd_gguf *g, sd_error *err) {
    sd_gguf_vtype score_t = SD_GGUF_F32, type_t = SD_GGUF_I32;
    const void *scores, *types;
    int rc = per_token_arr(v, g, KEY_SCORES, 1, &score_t, &scores, err);
    if (rc == SD_OK) rc = per_token_arr(v, g, KEY_TYPES, 0, &type_t, &types, err);
    if (rc != SD_OK) return rc;
    for (int32_t i = 0; i < v->n; i++) {
        v->score[i] = 0.0f;
        if (scores && score_t == SD_GGUF_F32) {
            memcpy(&v->score[i], (const char *)scores + 4 * (size_t)i, 4);
        } else if (scores) {
            int32_t x;
            memcpy(&x, (const char *)scores + 4 * (size_t)i, 4);
            v->score[i] = (float)x;
        }
        int32_t t = TT_NORMAL; /* llama.cpp: no types -> all normal */
        if (types) memcpy(&t, (const char *)types + 4 * (size_t)i, 4);
        v->ttype[i] = (uint8_t)(t >= TT_NORMAL && t <= TT_BYTE ? t : 0);
        v->attr[i] = attr_of_type(t);
    }
    return SD_OK;
}

/* ------------------------------------------------------------------ 4. special ids */

/* Optional special id: absent -> keep *id (a default, disabled if out of range); present
 * -> must be < n when strict (negative means none), else out of range keeps *id. */
static int special_id(const sd_vocab *v, const sd_gguf *g, const char *key, int strict, int32_t *id,
                      sd_error *err) {
    if (*id >= v->n) *id = -1;
    if (sd_gguf_find_key(g, key) < 0) return SD_OK;
    int64_t x = -1;
    int rc = sd_gguf_get_i64(g, key, &x, err);
    if (rc != SD_OK) return rc;
    if (x >= v->n) {
        if (!strict) return SD_OK;
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: metadata key '%s' = %" PRId64 " is out of range (%d tokens)", v->path,
                         key, x, (int)v->n);
    }
    *id = x < 0 ? -1 : (int32_t)x;
    return SD_OK;
}

static int load_special_ids(sd_vocab *v, const sd_gguf *g, sd_error *err) {
    const struct {
        const char *key;
        int32_t *id;
        int strict;
    } keys[] = {
        {KEY_BOS, &v->bos, 1},
        {KEY_EOS, &v->eos, 1},
        {"tokenizer.ggml.eot_token_id", &v->eot, 1},
        {"tokenizer.ggml.eom_token_id", &v->eom, 1},
        {"tokenizer.ggml.unknown_token_id", &v->unk, 1},
        {"tokenizer.ggml.padding_token_id", &v->pad, 0},
        {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre, 0},
        {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf, 0},
        {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid, 0},
        {"tokenizer.ggml.prefix_token_id", &v->fim_pre, 0}, /* deprecated spellings */
        {"tokenizer.ggml.suffix_token_id", &v->fim_suf, 0},
        {"tokenizer.ggml.middle_token_id", &v->fim_mid, 0},
        {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad, 0},
        {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep, 0},
        {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep, 0},
    };
    int rc = SD_OK;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && rc == SD_OK; i++)
        rc = special_id(v, g, keys[i].key, keys[i].strict, keys[i].id, err);
    if (rc == SD_OK) rc = sd_gguf_get_bool_opt(g, KEY_ADD_BOS, &v->add_bos, err);
    if (rc == SD_OK) rc = sd_gguf_get_bool_opt(g, KEY_ADD_EOS, &v->add_eos, err);
    if (rc == SD_OK) rc = sd_gguf_get_bool_opt(g, KEY_ADD_PREFIX, &v->add_space_prefix, err);
    if (rc != SD_OK) return rc;
    v->add_bos = v->add_bos != 0;
    v->add_eos = v->add_eos != 0;
    v->add_space_prefix = v->add_space_prefix != 0;
    /* llama.cpp's check_add_special_token */
    if (v->add_bos && v->bos < 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: '%s' is true, but '%s' is not set", v->path,
                         KEY_ADD_BOS, KEY_BOS);
    if (v->add_eos && v->eos < 0)
        return sd_errorf(err, SD_ERR_FORMAT, "%s: '%s' is true, but '%s' is not set", v->path,
                         KEY_ADD_EOS, KEY_EOS);
    return SD_OK;
}

/* ------------------------------------------------------------------ 6. byte tokens */

/* SPM: llama_vocab::byte_to_token ("<0xNN>", else the 1-byte text). BPE: the token whose
 * text is the GPT-2 character of the byte. */
static void build_byte_tokens(sd_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id;
        if (v->type == SD_VOCAB_SPM) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = vocab_lookup(v, buf, 6);
            if (id < 0) {
                buf[0] = (char)b;
                id = vocab_lookup(v, buf, 1);
            }
        } else {
            id = vocab_lookup(v, buf, sd_utf8_encode(sd_gpt2_byte_to_cp((unsigned char)b), buf));
        }
        v->byte_tok[b] = id;
    }
}

/* ------------------------------------------------------------------ 8. chat template */

static int load_chat_template(sd_vocab *v, const sd_gguf *g, sd_error *err) {
    if (sd_gguf_find_key(g, KEY_CHAT) < 0) return SD_OK;
    const char *s;
    size_t l;
    int rc = sd_gguf_get_str(g, KEY_CHAT, &s, &l, err);
    if (rc != SD_OK) return rc;
    v->chat_template = malloc(l + 1);
    if (!v->chat_template) return sd_errorf(err, SD_ERR_OOM, "%s: out of memory", v->path);
    memcpy(v->chat_template, s, l);
    v->chat_template[l] = '\0';
    return SD_OK;
}

/* ------------------------------------------------------------------ load */

static int alloc_per_token(sd_vocab *v, sd_error *err) {
    size_t n = (size_t)v->n;
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    v->score = malloc(n * sizeof *v->score);
    v->ttype = malloc(n);
    v->attr = malloc(n * sizeof *v->attr);
    if (!v->off || !v->len || !v->score || !v->ttype || !v->attr)
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory loading the vocabulary", v->path);
    return SD_OK;
}

int sd_vocab_load(const sd_gguf *g, sd_vocab **out, sd_error *err) {
    *out = NULL;
    sd_vocab *v = calloc(1, sizeof *v);
    const char *path = sd_gguf_path(g);
    if (v) v->path = strdup(path ? path : "(gguf)");
    if (!v || !v->path) {
        sd_vocab_free(v);
        return sd_errorf(err, SD_ERR_OOM, "%s: out of memory loading the vocabulary", path);
    }
    int rc = load_model_type(v, g, err);
    if (rc == SD_OK) rc = load_token_count(v, g, &v->n, err);
    if (rc == SD_OK) rc = alloc_per_token(v, err);
    if (rc == SD_OK) rc = load_texts(v, g, err);
    if (rc == SD_OK) rc = build_hash(v, err);
    if (rc == SD_OK) rc = load_scores_types(v, g, err);
    if (rc == SD_OK) rc = load_special_ids(v, g, err);
    if (rc == SD_OK && v->type == SD_VOCAB_BPE) rc = bpe_load_merges(v, g, err);
    if (rc == SD_OK) build_byte_tokens(v);
    if (rc == SD_OK) rc = vocab_fixup_specials(v, err);
    if (rc == SD_OK) rc = vocab_build_special_cache(v, err);
    if (rc == SD_OK) rc = load_chat_template(v, g, err);
    if (rc != SD_OK) {
        sd_vocab_free(v);
        return rc;
    }
    *out = v;
    return SD_OK;
}

/* ------------------------------------------------------------------ accessors */

int32_t sd_vocab_n_tokens(const sd_vocab *v) {
    return v->n;
}
sd_vocab_type sd_vocab_get_type(const sd_vocab *v) {
    return v->type;
}
const char *sd_vocab_model_name(const sd_vocab *v) {
    return v->type == SD_VOCAB_BPE ? "gpt2" : "llama";
}
const char *sd_vocab_pre_name(const sd_vocab *v) {
    return v->pre_name ? v->pre_name : "";
}
int32_t sd_vocab_n_merges(const sd_vocab *v) {
    return v->n_merges;
}
int32_t sd_vocab_fim(const sd_vocab *v, sd_vocab_fim_kind kind) {
    switch (kind) {
    case SD_VOCAB_FIM_PRE:
        return v->fim_pre;
    case SD_VOCAB_FIM_SUF:
        return v->fim_suf;
    case SD_VOCAB_FIM_MID:
        return v->fim_mid;
    case SD_VOCAB_FIM_REP:
        return v->fim_rep;
    case SD_VOCAB_FIM_SEP:
        return v->fim_sep;
    }
    return -1;
}
int32_t sd_vocab_bos(const sd_vocab *v) {
    return v->bos;
}
int32_t sd_vocab_eos(const sd_vocab *v) {
    return v->eos;
}
int32_t sd_vocab_eot(const sd_vocab *v) {
    return v->eot;
}
int32_t sd_vocab_eom(const sd_vocab *v) {
    return v->eom;
}
int32_t sd_vocab_unk(const sd_vocab *v) {
    return v->unk;
}
int sd_vocab_add_bos(const sd_vocab *v) {
    return v->add_bos;
}
int sd_vocab_add_eos(const sd_vocab *v) {
    return v->add_eos;
}
const char *sd_vocab_token_text(const sd_vocab *v, int32_t id) {
    return id >= 0 && id < v->n ? vocab_text(v, id) : NULL;
}
int sd_vocab_token_type(const sd_vocab *v, int32_t id) {
    return id >= 0 && id < v->n ? v->ttype[id] : 0;
}
int sd_vocab_is_control(const sd_vocab *v, int32_t id) {
    return id >= 0 && id < v->n && (v->attr[id] & ATTR_CONTROL) != 0;
}
const char *sd_vocab_chat_template(const sd_vocab *v) {
    return v->chat_template;
}

int sd_vocab_is_eog(const sd_vocab *v, int32_t id) {
    int32_t lo = 0, hi = v->n_eog;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (v->eog[mid] == id) return 1;
        if (v->eog[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

const int32_t *sd_vocab_eog_ids(const sd_vocab *v, int32_t *n) {
    *n = v->n_eog;
    return v->eog;
}

/* ------------------------------------------------------------------ pairing */

/* Printable, bounded rendering of a token text for error messages. */
static void render(const sd_vocab *v, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= v->n)
        snprintf(buf, cap, "%s", id < 0 ? "(none)" : "(out of range)");
    else
        sd_text_render(vocab_text(v, id), v->len[id], buf, cap);
}

#define MISMATCH(...)                                                                              \
    sd_errorf(err, SD_ERR_MISMATCH, "draft vocabulary does not match target: " __VA_ARGS__)

static int pair_ids(const sd_vocab *t, const char *tp, const sd_vocab *d, const char *dp,
                    sd_error *err) {
    const struct {
        const char *name;
        int32_t a, b;
    } ids[] = {{"BOS", t->bos, d->bos},
               {"EOS", t->eos, d->eos},
               {"EOT", t->eot, d->eot},
               {"EOM", t->eom, d->eom}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].a != ids[i].b)
            return MISMATCH("%s has %s id %d, %s has %s id %d", tp, ids[i].name, (int)ids[i].a, dp,
                            ids[i].name, (int)ids[i].b);
    const struct {
        const char *key;
        int a, b;
    } flags[] = {{KEY_ADD_BOS, t->add_bos, d->add_bos}, {KEY_ADD_EOS, t->add_eos, d->add_eos}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].a != flags[i].b)
            return MISMATCH("%s has %s %s, %s has %s", tp, flags[i].key,
                            flags[i].a ? "true" : "false", dp, flags[i].b ? "true" : "false");
    return SD_OK;
}

static int pair_merges(const sd_vocab *t, const char *tp, const sd_vocab *d, const char *dp,
                       sd_error *err) {
    if (t->n_merges != d->n_merges)
        return MISMATCH("%s has %d merges, %s has %d (%s)", tp, (int)t->n_merges, dp,
                        (int)d->n_merges, KEY_MERGES);
    for (int32_t i = 0; i < t->n_merges; i++) {
        const merge_rule *a = &t->merges[i], *b = &d->merges[i];
        if (a->left == b->left && a->right == b->right) continue;
        char al[96], ar[96], bl[96], br[96];
        render(t, a->left, al, sizeof al);
        render(t, a->right, ar, sizeof ar);
        render(d, b->left, bl, sizeof bl);
        render(d, b->right, br, sizeof br);
        return MISMATCH("%s merge %d is '%s %s', %s merge %d is '%s %s' (%s)", tp, (int)i, al, ar,
                        dp, (int)i, bl, br, KEY_MERGES);
    }
    return SD_OK;
}

int sd_vocab_check_pair(const sd_vocab *target, const char *target_path, const sd_vocab *draft,
                        const char *draft_path, sd_error *err) {
    const char *tp = target_path ? target_path : "target", *dp = draft_path ? draft_path : "draft";
    const sd_vocab *t = target, *d = draft;
    if (t->type != d->type)
        return MISMATCH("%s has tokenizer model '%s', %s has '%s'", tp, sd_vocab_model_name(t), dp,
                        sd_vocab_model_name(d));
    if (t->type == SD_VOCAB_BPE && strcmp(sd_vocab_pre_name(t), sd_vocab_pre_name(d)) != 0)
        return MISMATCH("%s has pre-tokenizer '%s', %s has '%s' (tokenizer.ggml.pre)", tp,
                        sd_vocab_pre_name(t), dp, sd_vocab_pre_name(d));
    int rc = pair_ids(t, tp, d, dp, err);
    if (rc == SD_OK) rc = pair_merges(t, tp, d, dp, err);
    if (rc != SD_OK) return rc;
    int32_t diff = t->n > d->n ? t->n - d->n : d->n - t->n;
    if (diff > SD_VOCAB_MAX_SIZE_DIFF)
        return MISMATCH("%s has %d tokens, %s has %d (difference %d > %d)", tp, (int)t->n, dp,
                        (int)d->n, (int)diff, SD_VOCAB_MAX_SIZE_DIFF);
    int32_t n = t->n < d->n ? t->n : d->n;
    for (int32_t i = 0; i < n; i++) {
        if (t->len[i] == d->len[i] && memcmp(vocab_text(t, i), vocab_text(d, i), t->len[i]) == 0)
            continue;
        char a[128], b[128];
        render(t, i, a, sizeof a);
        render(d, i, b, sizeof b);
        return MISMATCH("%s id %d is '%s', %s id %d is '%s'", tp, (int)i, a, dp, (int)i, b);
    }
    return SD_OK;
}
