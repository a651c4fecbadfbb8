/*
 * llama2.c checkpoint + tokenizer -> GGUF (architecture "llama", all tensors F32).
 *
 * Input formats (karpathy/llama2.c, run.c read_checkpoint / build_tokenizer; export.py
 * legacy_export, tokenizer.py export):
 *   checkpoint: int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 *               (vocab_size < 0: the classifier is not shared and follows at the end),
 *               then float32, row-major [out, in]:
 *                 token_embedding [vocab, dim]      -> token_embd.weight   ne {dim, vocab}
 *                 rms_att         [L, dim]          -> blk.N.attn_norm.weight ne {dim}
 *                 wq              [L, dim, dim]     -> blk.N.attn_q.weight  ne {dim, dim}
 *                 wk              [L, kv_dim, dim]  -> blk.N.attn_k.weight  ne {dim, kv_dim}
 *                 wv              [L, kv_dim, dim]  -> blk.N.attn_v.weight  ne {dim, kv_dim}
 *                 wo              [L, dim, dim]     -> blk.N.attn_output.weight ne {dim, dim}
 *                 rms_ffn         [L, dim]          -> blk.N.ffn_norm.weight ne {dim}
 *                 w1              [L, hidden, dim]  -> blk.N.ffn_gate.weight ne {dim, hidden}
 *                 w2              [L, dim, hidden]  -> blk.N.ffn_down.weight ne {hidden, dim}
 *                 w3              [L, hidden, dim]  -> blk.N.ffn_up.weight   ne {dim, hidden}
 *                 rms_final       [dim]             -> output_norm.weight    ne {dim}
 *                 freq_cis_real   [seq, head/2]     (not stored: recomputed from rope base)
 *                 freq_cis_imag   [seq, head/2]     (not stored)
 *                 wcls            [vocab, dim]      -> output.weight (only when untied)
 *   tokenizer:  int32 max_token_length, then per token: float32 score, int32 len, len bytes.
 *               tokenizer.py writes BOS as "\n<s>\n", EOS as "\n</s>\n" and replaces
 *               SentencePiece's "▁" (U+2581) by a space; we undo both.
 *
 * RoPE layout (why Wq/Wk are NOT permuted):
 *   llama.cpp's convert_hf_to_gguf.py permutes Wq/Wk rows with
 *     w.reshape(n_head, 2, head_dim/2, dim).swapaxes(1, 2)
 *   because Hugging Face checkpoints were themselves permuted (transformers'
 *   convert_llama_weights_to_hf.py) from Meta's layout into the "rotate half" (NEOX)
 *   layout; the GGUF permute restores Meta's layout, in which each head's rotated pairs
 *   are adjacent rows (2i, 2i+1). llama.cpp runs arch "llama" with LLAMA_ROPE_TYPE_NORM,
 *   which rotates exactly those adjacent pairs with theta_i = base^(-2i/head_dim).
 *   A llama2.c checkpoint is already in Meta's layout: llama2.c's model.py applies RoPE
 *   with view_as_complex over reshape(..., -1, 2) (adjacent pairs), export.py's HF path
 *   un-permutes HF weights before writing, and run.c rotates (q[i], q[i+1]) for even i
 *   with freq = 10000^(-(i % head_size)/head_size), i.e. pair j = (i % head)/2 gets
 *   10000^(-2j/head): the same function as NORM RoPE. So the weights go across unchanged
 *   (identity), and applying the HF permute here would be wrong (it would pair row j with
 *   row j + head/2). tests/test_convert.c checks this numerically: run.c's RoPE on
 *   Wq x / Wk x from the checkpoint equals NORM RoPE on the same products computed from
 *   the GGUF tensors, and differs once the HF permutation is applied.
 */
#include "runtime/convert/sd_convert.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"

/* Sanity limits on the header (far above any llama2.c model; they keep the size
 * arithmetic and the tensor shapes sane). */
#define CK_MAX_VOCAB  (1 << 20)
#define CK_MAX_DIM    (1 << 16)
#define CK_MAX_HIDDEN (1 << 18)
#define CK_MAX_LAYERS 1024
#define CK_MAX_SEQ    (1 << 20)

typedef struct ck_config {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} ck_config;

/* A read-only mapping of a whole file. */
typedef struct mapped {
    const uint8_t *p;
    size_t size;
} mapped;

static int map_file(const char *path, mapped *m, sd_error *err) {
    m->p = NULL;
    m->size = 0;
    int fd = sd_file_open_regular(path, err); /* never blocks on a FIFO */
    if (fd < 0) return SD_ERR_IO;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return sd_errorf(err, SD_ERR_IO, "%s: stat: %s", path, strerror(e));
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return sd_errorf(err, SD_ERR_IO, "%s: file too large to map", path);
    }
    m->size = (size_t)sb.st_size;
    if (m->size == 0) { /* nothing to map; callers report the size */
        close(fd);
        return SD_OK;
    }
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return sd_errorf(err, SD_ERR_IO, "%s: mmap: %s", path, strerror(e));
    m->p = p;
    return SD_OK;
}

static void unmap_file(mapped *m) {
    if (m->p) munmap((void *)m->p, m->size);
    m->p = NULL;
}

/* Validate the header; on success *n_floats is the number of floats after it. */
static int check_config(const char *path, const ck_config *c, size_t file_size, int *shared,
                        size_t *n_floats, sd_error *err) {
    struct {
        const char *name;
        int32_t v, max;
    } f[] = {{"dim", c->dim, CK_MAX_DIM},
             {"hidden_dim", c->hidden_dim, CK_MAX_HIDDEN},
             {"n_layers", c->n_layers, CK_MAX_LAYERS},
             {"n_heads", c->n_heads, CK_MAX_DIM},
             {"n_kv_heads", c->n_kv_heads, CK_MAX_DIM},
             {"vocab_size", c->vocab_size == INT32_MIN ? 0 : abs(c->vocab_size), CK_MAX_VOCAB},
             {"seq_len", c->seq_len, CK_MAX_SEQ}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1 || f[i].v > f[i].max)
            return sd_errorf(
                err, SD_ERR_FORMAT, "%s: header.%s: expected 1..%" PRId32 "%s, found %" PRId32,
                path, f[i].name, f[i].max, strcmp(f[i].name, "vocab_size") ? "" : " in magnitude",
                strcmp(f[i].name, "vocab_size") ? f[i].v : c->vocab_size);
    if (c->dim % c->n_heads != 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.dim: expected a multiple of n_heads (%" PRId32
                         "), found %" PRId32,
                         path, c->n_heads, c->dim);
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header.n_kv_heads: expected a divisor of n_heads (%" PRId32
                         "), found %" PRId32,
                         path, c->n_heads, c->n_kv_heads);
    int32_t head = c->dim / c->n_heads;
    if (head % 2 != 0)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: header: head size dim/n_heads: expected even (RoPE pairs), found "
                         "%" PRId32,
                         path, head);
    *shared = c->vocab_size > 0;
    /* All factors are bounded above, but compute with overflow checks anyway. */
    size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, L = (size_t)c->n_layers;
    size_t vocab = (size_t)abs(c->vocab_size), seq = (size_t)c->seq_len;
    size_t kv_dim = dim / (size_t)c->n_heads * (size_t)c->n_kv_heads;
    size_t per_layer = 0, t, total = 0;
    int bad = 0;
    /* rms_att + wq + wk + wv + wo + rms_ffn + w1 + w2 + w3 */
    size_t terms[][2] = {{1, dim}, {dim, dim}, {kv_dim, dim}, {kv_dim, dim}, {dim, dim},
                         {1, dim}, {hid, dim}, {dim, hid},    {hid, dim}};
    for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++)
        bad |= sd_mul_size(terms[i][0], terms[i][1], &t) || sd_add_size(per_layer, t, &per_layer);
    bad |= sd_mul_size(per_layer, L, &total);
    bad |= sd_mul_size(vocab, dim, &t) || sd_add_size(total, t, &total); /* token_embedding */
    bad |= sd_add_size(total, dim, &total);                              /* rms_final */
    bad |= sd_mul_size(seq, (size_t)head, &t) || sd_add_size(total, t, &total); /* freq_cis */
    if (!*shared) bad |= sd_mul_size(vocab, dim, &t) || sd_add_size(total, t, &total);
    size_t bytes = 0;
    bad |= sd_mul_size(total, 4, &bytes) || sd_add_size(bytes, 28, &bytes);
    if (bad) return sd_errorf(err, SD_ERR_FORMAT, "%s: header: implied file size overflows", path);
    if (bytes != file_size)
        return sd_errorf(err, SD_ERR_FORMAT,
                         "%s: file size: expected %zu bytes (from the header: dim %" PRId32
                         ", hidden %" PRId32 ", layers %" PRId32 ", heads %" PRId32 "/%" PRId32
                         ", vocab %" PRId32 ", seq %" PRId32 "), found %zu",
                         path, bytes, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                         c->vocab_size, c->seq_len, file_size);
    *n_floats = total;
    return SD_OK;
}

/* ---- tokenizer */

typedef struct tok_vocab {
    int32_t n;
    char **tokens; /* GGUF text (NUL-terminated) */
    float *scores;
    int32_t *types;
} tok_vocab;

static void tok_free(tok_vocab *v) {
    if (v->tokens)
        for (int32_t i = 0; i < v->n; i++)
            free(v->tokens[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

/* llama.cpp token types (llama_token_type / gguf-py TokenType). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

static int is_byte_token(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]);
}

static int read_tokenizer(const char *path, int32_t want, tok_vocab *v, sd_error *err) {
    mapped m;
    int st = map_file(path, &m, err);
    if (st) return st;
    const uint8_t *p = m.p;
    size_t size = m.size, pos = 4;
    int32_t max_len;
    if (size < 4) {
        st = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: max_token_length: expected 4 bytes, found a %zu-byte file", path, size);
        goto out;
    }
    memcpy(&max_len, p, 4);
    if (max_len < 1 || max_len > (1 << 16)) {
        st = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: max_token_length: expected 1..65536, found %" PRId32, path, max_len);
        goto out;
    }
    /* Count the entries first: the tokenizer does not store its size. Each takes >= 8
     * bytes, so the count is bounded by the file size before anything is allocated. */
    int32_t n = 0;
    for (size_t q = 4; q < size; n++) {
        int32_t len;
        if (size - q < 8) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: token %" PRId32 ": expected score and length (8 bytes) at offset "
                           "%zu, found %zu bytes to end of file",
                           path, n, q, size - q);
            goto out;
        }
        memcpy(&len, p + q + 4, 4);
        if (len < 0 || len > max_len || (size_t)len > size - q - 8) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: token %" PRId32 ": length: expected 0..%" PRId32
                           " within the file, found %" PRId32,
                           path, n, max_len, len);
            goto out;
        }
        q += 8 + (size_t)len;
        if (n == INT32_MAX) break;
    }
    if (n != want) {
        st = sd_errorf(err, SD_ERR_MISMATCH,
                       "%s: vocabulary size: expected %" PRId32
                       " (the checkpoint's), found %" PRId32,
                       path, want, n);
        goto out;
    }
    v->n = n;
    v->tokens = calloc((size_t)n, sizeof *v->tokens);
    v->scores = malloc((size_t)n * sizeof *v->scores);
    v->types = malloc((size_t)n * sizeof *v->types);
    if (!v->tokens || !v->scores || !v->types) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t len;
        memcpy(&v->scores[i], p + pos, 4);
        memcpy(&len, p + pos + 4, 4);
        const uint8_t *s = p + pos + 8;
        pos += 8 + (size_t)len;
        if (memchr(s, 0, (size_t)len)) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: token %" PRId32 ": expected text without NUL bytes, found one",
                           path, i);
            goto out;
        }
        if (!isfinite(v->scores[i])) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: token %" PRId32 ": score: expected a finite "
                           "float, found %g",
                           path, i, (double)v->scores[i]);
            goto out;
        }
        /* Space -> U+2581 (3 bytes in UTF-8): at most 3x the length. */
        char *t = malloc(3 * (size_t)len + 1), *o = t;
        if (!t) {
            st = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
            goto out;
        }
        for (int32_t j = 0; j < len; j++) {
            if (s[j] == ' ') {
                memcpy(o, "\xe2\x96\x81", 3);
                o += 3;
            } else {
                *o++ = (char)s[j];
            }
        }
        *o = '\0';
        v->tokens[i] = t;
        v->types[i] = TT_NORMAL;
        if (i == 0) {
            v->types[i] = TT_UNKNOWN;
        } else if (i == 1 || i == 2) {
            /* tokenizer.py stores "\n<s>\n" / "\n</s>\n": restore the canonical text. */
            free(t);
            v->tokens[i] = strdup(i == 1 ? "<s>" : "</s>");
            if (!v->tokens[i]) {
                st = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
                goto out;
            }
            v->types[i] = TT_CONTROL;
        } else if (is_byte_token(t)) {
            v->types[i] = TT_BYTE;
        }
    }
    st = SD_OK;
out:
    unmap_file(&m);
    if (st) tok_free(v);
    return st;
}

/* "stories260K" from ".../stories260K.bin". */
static void model_name(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, n, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = '\0';
}

int sd_convert_llama2c(const char *ckpt_path, const char *tok_path, const char *out_path,
                       sd_error *err) {
    mapped ck = {0};
    tok_vocab voc = {0};
    sd_gguf_writer *w = NULL;
    /* Never write over an input or a non-regular file (checked again at write). */
    const char *inputs[2] = {ckpt_path, tok_path};
    int st = sd_gguf_check_output(out_path, inputs, 2, err);
    if (st) return st;
    if ((st = map_file(ckpt_path, &ck, err))) return st;
    ck_config c;
    if (ck.size < sizeof c) {
        st = sd_errorf(err, SD_ERR_FORMAT,
                       "%s: header: expected 28 bytes (7 int32), found a %zu-byte file", ckpt_path,
                       ck.size);
        goto out;
    }
    memcpy(&c, ck.p, sizeof c);
    int shared = 0;
    size_t n_floats = 0;
    if ((st = check_config(ckpt_path, &c, ck.size, &shared, &n_floats, err))) goto out;
    const int32_t vocab = abs(c.vocab_size);
    const int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers;
    const int64_t head = dim / c.n_heads, kv_dim = head * c.n_kv_heads;

    /* Weights are 4-byte aligned: the mapping is page aligned and the header is 28 bytes. */
    const float *wts = (const float *)(const void *)(ck.p + 28);
    for (size_t i = 0; i < n_floats; i++)
        if (!isfinite(wts[i])) {
            st = sd_errorf(err, SD_ERR_FORMAT,
                           "%s: weights: expected finite floats, found %g at float %zu", ckpt_path,
                           (double)wts[i], i);
            goto out;
        }

    if ((st = read_tokenizer(tok_path, vocab, &voc, err))) goto out;

    w = sd_gguf_writer_new();
    if (!w) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", out_path);
        goto out;
    }
    char name[256];
    model_name(ckpt_path, name, sizeof name);
    const sd_llm_meta meta = {
        .arch = "llama",
        .name = name,
        .file_type = 0, /* LLAMA_FTYPE_ALL_F32 */
        .n_ctx = c.seq_len,
        .n_embd = c.dim,
        .n_layer = c.n_layers,
        .n_ff = c.hidden_dim,
        .n_head = c.n_heads,
        .n_head_kv = c.n_kv_heads,
        .n_rot = head,
        .rms_eps = 1e-5f,
        .rope_base = 10000.0f,
        .n_vocab = voc.n,
        .write_vocab_size = 1,
        .tokens = (const char *const *)voc.tokens,
        .scores = voc.scores,
        .token_type = voc.types,
        .bos = 1,
        .eos = 2,
        .unk = 0,
        .add_bos = 1,
        .add_eos = 0,
        .add_space_prefix = 1,
    };
    const int ws = sd_gguf_set_llm_meta(w, &meta);
    if (ws) {
        st = sd_errorf(err, SD_ERR_OOM, "%s: metadata: out of memory", out_path);
        goto out;
    }

    /* Tensors in llama2.c file order; data referenced from the mapping (identity
     * layout, see the RoPE note at the top). */
    const float *p = wts;
    const float *tok_embd = p;
    p += (size_t)vocab * (size_t)dim;
    const float *rms_att = p;
    p += (size_t)(L * dim);
    const float *wq = p;
    p += (size_t)(L * dim * dim);
    const float *wk = p;
    p += (size_t)(L * kv_dim * dim);
    const float *wv = p;
    p += (size_t)(L * kv_dim * dim);
    const float *wo = p;
    p += (size_t)(L * dim * dim);
    const float *rms_ffn = p;
    p += (size_t)(L * dim);
    const float *w1 = p;
    p += (size_t)(L * hid * dim);
    const float *w2 = p;
    p += (size_t)(L * dim * hid);
    const float *w3 = p;
    p += (size_t)(L * hid * dim);
    const float *rms_final = p;
    p += (size_t)dim;
    p += (size_t)c.seq_len * (size_t)head; /* freq_cis_real + freq_cis_imag */
    const float *wcls = shared ? NULL : p;

#define ADD(nm, nd, n0, n1, ptr)                                                                   \
    do {                                                                                           \
        int64_t ne_[2] = {(n0), (n1)};                                                             \
        size_t nb_ = (size_t)(n0) * (size_t)(n1) * sizeof(float);                                  \
        if ((st = sd_gguf_add_tensor(w, (nm), SD_TYPE_F32, (nd), ne_, (ptr), nb_, err))) goto out; \
    } while (0)

    ADD("token_embd.weight", 2, dim, vocab, tok_embd);
    for (int64_t l = 0; l < L; l++) {
        char tn[64];
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".attn_norm.weight", l);
        ADD(tn, 1, dim, 1, rms_att + l * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".attn_q.weight", l);
        ADD(tn, 2, dim, dim, wq + l * dim * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".attn_k.weight", l);
        ADD(tn, 2, dim, kv_dim, wk + l * kv_dim * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".attn_v.weight", l);
        ADD(tn, 2, dim, kv_dim, wv + l * kv_dim * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".attn_output.weight", l);
        ADD(tn, 2, dim, dim, wo + l * dim * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".ffn_norm.weight", l);
        ADD(tn, 1, dim, 1, rms_ffn + l * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".ffn_gate.weight", l);
        ADD(tn, 2, dim, hid, w1 + l * hid * dim);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".ffn_down.weight", l);
        ADD(tn, 2, hid, dim, w2 + l * dim * hid);
        snprintf(tn, sizeof tn, "blk.%" PRId64 ".ffn_up.weight", l);
        ADD(tn, 2, dim, hid, w3 + l * hid * dim);
    }
    ADD("output_norm.weight", 1, dim, 1, rms_final);
    if (wcls) ADD("output.weight", 2, dim, vocab, wcls);
#undef ADD

    st = sd_gguf_writer_write(w, out_path, err);
out:
    sd_gguf_writer_free(w);
    tok_free(&voc);
    unmap_file(&ck);
    return st;
}
