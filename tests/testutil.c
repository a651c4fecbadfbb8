#include "testutil.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/convert/sd_convert.h"
#include "runtime/gguf/sd_gguf.h"

const char *tu_shared_data(void) {
    const char *d = getenv("SD_SHARED_DATA");
    return d && *d ? d : SD_SHARED_DATA_DEFAULT;
}

void tu_need_path(const char *path, const char *why) {
    if (access(path, R_OK) != 0) cr_skip_test("absent: %s (%s)", path, why);
}

char *tu_llamacpp_vocab(const char *name, char *buf, size_t cap) {
    const char *env = getenv("SD_LLAMACPP_VOCAB");
    if (env && *env) { /* the one folder looked in */
        if ((size_t)snprintf(buf, cap, "%s/ggml-vocab-%s.gguf", env, name) >= cap) abort();
        return buf;
    }
    const char *dirs[2] = {SD_SOURCE_DIR "/models/downloaded/vocab", tu_shared("vocab")};
    for (int i = 0; i < 2; i++) {
        if ((size_t)snprintf(buf, cap, "%s/ggml-vocab-%s.gguf", dirs[i], name) >= cap) abort();
        if (access(buf, R_OK) == 0) return buf;
    }
    return buf; /* the shared-data path, absent */
}

const char *tu_shared(const char *rel) {
    static char bufs[8][4096];
    static unsigned next;
    char *b = bufs[next++ % 8];
    tu_path(b, sizeof bufs[0], tu_shared_data(), rel);
    return b;
}

int tu_mkdtemp(char *buf, size_t cap) {
    const char *t = getenv("TMPDIR");
    if (!t || !*t) t = "/tmp";
    if ((size_t)snprintf(buf, cap, "%s/specdec-test-XXXXXX", t) >= cap) return -1;
    return mkdtemp(buf) ? 0 : -1;
}

void tu_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

char *tu_path(char *buf, size_t cap, const char *dir, const char *name) {
    if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap) {
        fprintf(stderr, "tu_path: path too long\n");
        abort();
    }
    return buf;
}

int tu_count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

int tu_write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = n && fwrite(buf, 1, n, f) != n;
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

unsigned char *tu_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    unsigned char *b = sz >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)sz + 1) : NULL;
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[sz] = '\0';
    *n = (size_t)sz;
    return b;
}

tu_llama_spec tu_llama_default_spec(void) {
    tu_llama_spec s = {0};
    s.n_vocab = 96;
    s.n_embd = 64;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 96;
    s.n_ctx = 128;
    s.seed = 1;
    s.noise = 0.0f;
    s.noise_seed = 2;
    s.wtype = SD_TYPE_F32;
    s.tied = 0;
    s.tok_prefix = "t";
    return s;
}

/* splitmix64 + Box-Muller: a small deterministic normal generator. */
static uint64_t sm64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *x) {
    return ((sm64(x) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double normal(uint64_t *x) {
    double u1 = unif(x), u2 = unif(x);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct tbuf {
    void *data;
    size_t nbytes;
} tbuf;

/* Fill a [rows, cols] tensor of type t (norms: t = F32 and values near 1). */
static int add_tensor(sd_gguf_writer *w, tbuf *keep, int *n_keep, const char *name, int64_t rows,
                      int64_t cols, sd_type t, int is_norm, const tu_llama_spec *s, uint64_t *rng,
                      uint64_t *nrng) {
    size_t row_bytes;
    if (sd_type_row_bytes(t, cols, &row_bytes)) return -1;
    size_t nbytes = row_bytes * (size_t)rows;
    float *f = malloc((size_t)cols * sizeof(float));
    unsigned char *data = malloc(nbytes);
    if (!f || !data) return -1;
    const double scale = 1.0 / sqrt((double)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double v = is_norm ? 1.0 + 0.1 * normal(rng) : scale * normal(rng);
            if (s->noise > 0) v += s->noise * (is_norm ? 0.1 : scale) * normal(nrng);
            f[c] = (float)v;
        }
        sd_quantize_row(t, f, data + (size_t)r * row_bytes, cols);
    }
    free(f);
    keep[(*n_keep)++] = (tbuf){data, nbytes};
    int64_t ne[2] = {cols, rows};
    sd_error err = {0};
    if (sd_gguf_add_tensor(w, name, (uint32_t)t, rows == 1 ? 1 : 2, ne, data, nbytes, &err)) {
        fprintf(stderr, "tu_make_llama: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int tu_make_llama(const char *path, const tu_llama_spec *s) {
    sd_gguf_writer *w = sd_gguf_writer_new();
    if (!w) return -1;
    const int max_tensors = 3 + 9 * s->n_layer;
    tbuf *keep = calloc((size_t)max_tensors, sizeof *keep);
    int n_keep = 0, rc = 0;
    uint64_t rng = s->seed * 0x1234567ull + 17, nrng = s->noise_seed * 0x7654321ull + 5;
    const int64_t head_dim = s->n_embd / s->n_head, kv_dim = head_dim * s->n_head_kv;
    char **toks = calloc((size_t)s->n_vocab, sizeof *toks);
    float *scores = calloc((size_t)s->n_vocab, sizeof *scores);
    int32_t *types = calloc((size_t)s->n_vocab, sizeof *types);
    for (int32_t i = 0; i < s->n_vocab; i++) {
        toks[i] = malloc(32);
        if (i == 0)
            strcpy(toks[i], "<unk>");
        else if (i == 1)
            strcpy(toks[i], "<s>");
        else if (i == 2)
            strcpy(toks[i], "</s>");
        else
            snprintf(toks[i], 32, "%.16s%d", s->tok_prefix ? s->tok_prefix : "t", i);
        types[i] = i == 0 ? 2 : (i < 3 ? 3 : 1);
        scores[i] = -(float)i;
    }
    const sd_llm_meta meta = {
        .arch = "llama",
        .name = "random-test-llama",
        .file_type = -1,
        .n_ctx = s->n_ctx,
        .n_embd = s->n_embd,
        .n_layer = s->n_layer,
        .n_ff = s->n_ff,
        .n_head = s->n_head,
        .n_head_kv = s->n_head_kv,
        .n_rot = (int32_t)head_dim,
        .rms_eps = 1e-5f,
        .rope_base = 10000.0f,
        .n_vocab = s->n_vocab,
        .tokens = (const char *const *)toks,
        .scores = scores,
        .token_type = types,
        .bos = 1,
        .eos = 2,
        .unk = 0,
        .add_bos = 1,
        .add_eos = -1,
        .add_space_prefix = -1,
    };
    if (sd_gguf_set_llm_meta(w, &meta) != SD_OK) rc = -1;
    if (s->sliding_window > 0 &&
        sd_gguf_set_u32(w, "llama.attention.sliding_window", (uint32_t)s->sliding_window) != SD_OK)
        rc = -1;

    char name[64];
    rc |= add_tensor(w, keep, &n_keep, "token_embd.weight", s->n_vocab, s->n_embd, s->wtype, 0, s,
                     &rng, &nrng);
    for (int32_t l = 0; l < s->n_layer && !rc; l++) {
        struct {
            const char *n;
            int64_t rows, cols;
            int norm;
        } t[9] = {
            {"attn_norm", 1, s->n_embd, 1},           {"attn_q", s->n_embd, s->n_embd, 0},
            {"attn_k", kv_dim, s->n_embd, 0},         {"attn_v", kv_dim, s->n_embd, 0},
            {"attn_output", s->n_embd, s->n_embd, 0}, {"ffn_norm", 1, s->n_embd, 1},
            {"ffn_gate", s->n_ff, s->n_embd, 0},      {"ffn_down", s->n_embd, s->n_ff, 0},
            {"ffn_up", s->n_ff, s->n_embd, 0},
        };
        for (int i = 0; i < 9 && !rc; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].n);
            rc |= add_tensor(w, keep, &n_keep, name, t[i].rows, t[i].cols,
                             t[i].norm ? SD_TYPE_F32 : s->wtype, t[i].norm, s, &rng, &nrng);
        }
    }
    if (!rc)
        rc |= add_tensor(w, keep, &n_keep, "output_norm.weight", 1, s->n_embd, SD_TYPE_F32, 1, s,
                         &rng, &nrng);
    if (!rc && s->nan_output_norm) {
        float *g = keep[n_keep - 1].data;
        for (int32_t i = 0; i < s->n_embd; i++)
            g[i] = NAN;
    }
    if (!rc && !s->tied)
        rc |= add_tensor(w, keep, &n_keep, "output.weight", s->n_vocab, s->n_embd, s->wtype, 0, s,
                         &rng, &nrng);
    sd_error err = {0};
    if (!rc && sd_gguf_writer_write(w, path, &err)) {
        fprintf(stderr, "tu_make_llama: %s\n", err.msg);
        rc = -1;
    }
    sd_gguf_writer_free(w);
    for (int i = 0; i < n_keep; i++)
        free(keep[i].data);
    free(keep);
    for (int32_t i = 0; i < s->n_vocab; i++)
        free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return rc ? -1 : 0;
}

int tu_make_test_pair(const char *dir, char *t, size_t tcap, char *d, size_t dcap) {
    tu_llama_spec s = tu_llama_default_spec();
    if (tu_make_llama(tu_path(t, tcap, dir, "t.gguf"), &s)) return -1;
    s.wtype = SD_TYPE_Q8_0;
    s.noise = 0.3f;
    return tu_make_llama(tu_path(d, dcap, dir, "d.gguf"), &s);
}

int tu_make_stories_pair(const char *dir) {
    const char *ckpt = tu_shared("models/stories260K.bin");
    const char *tok = tu_shared("models/tok512.bin");
    if (access(ckpt, R_OK) || access(tok, R_OK)) return 0;
    char f32[4096], q4[4096], q8[4096];
    tu_path(f32, sizeof f32, dir, "stories260K-f32.gguf");
    tu_path(q4, sizeof q4, dir, "stories260K-q4_0.gguf");
    tu_path(q8, sizeof q8, dir, "stories260K-q8_0.gguf");
    sd_error err = {0};
    if (sd_convert_llama2c(ckpt, tok, f32, &err) ||
        sd_quantize_file(f32, q4, SD_TYPE_Q4_0, NULL, &err) ||
        sd_quantize_file(f32, q8, SD_TYPE_Q8_0, NULL, &err)) {
        fprintf(stderr, "tu_make_stories_pair: %s\n", err.msg);
        return -1;
    }
    return 1;
}

int tu_make_llama2c(const char *ckpt, const char *tok) {
    const int32_t dim = 64, hid = 96, L = 2, nh = 4, nkv = 2, vocab = 6, seq = 8;
    const int32_t hdr[7] = {dim, hid, L, nh, nkv, vocab, seq};
    const size_t head = (size_t)(dim / nh), kv = head * (size_t)nkv;
    /* embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq re + im */
    const size_t n =
        (size_t)vocab * dim +
        (size_t)L * (dim + 2 * (size_t)dim * dim + 2 * kv * dim + dim + 3 * (size_t)hid * dim) +
        dim + (size_t)seq * head;
    FILE *f = fopen(ckpt, "wb");
    if (!f) return -1;
    int bad = fwrite(hdr, sizeof hdr, 1, f) != 1;
    uint64_t rng = 7;
    for (size_t i = 0; i < n && !bad; i++) {
        float v = (float)(0.1 * normal(&rng));
        bad = fwrite(&v, 4, 1, f) != 1;
    }
    bad |= fclose(f) != 0;
    static const char *toks[6] = {"<unk>", "\n<s>\n", "\n</s>\n", " a", " b", "c"};
    f = bad ? NULL : fopen(tok, "wb");
    if (!f) return -1;
    const int32_t max_len = 7;
    bad = fwrite(&max_len, 4, 1, f) != 1;
    for (int i = 0; i < vocab && !bad; i++) {
        const float score = -(float)i;
        const int32_t len = (int32_t)strlen(toks[i]);
        bad = fwrite(&score, 4, 1, f) != 1 || fwrite(&len, 4, 1, f) != 1 ||
              fwrite(toks[i], 1, (size_t)len, f) != (size_t)len;
    }
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

static char *slurp(FILE *f) {
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
    }
    if (b) b[n] = '\0';
    return b;
}

int tu_run(const char *cmd, char **out, char **err) {
    char errpath[] = "/tmp/specdec-stderr-XXXXXX";
    int fd = mkstemp(errpath);
    if (fd < 0) return -1;
    close(fd);
    size_t n = strlen(cmd) + strlen(errpath) + 16;
    char *full = malloc(n);
    snprintf(full, n, "%s 2>%s", cmd, errpath);
    FILE *p = popen(full, "r");
    free(full);
    if (!p) {
        unlink(errpath);
        return -1;
    }
    char *o = slurp(p);
    int st = pclose(p);
    FILE *ef = fopen(errpath, "r");
    char *e = ef ? slurp(ef) : NULL;
    if (ef) fclose(ef);
    unlink(errpath);
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

sd_proposer *tu_make_ngram(int32_t n_min, int32_t n_max, int32_t n_ctx, int32_t n_vocab) {
    sd_ngram_params p = sd_ngram_default_params();
    p.n_min = n_min;
    p.n_max = n_max;
    p.n_ctx = n_ctx;
    sd_proposer *prop = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_proposer_ngram_init(&p, n_vocab, &prop, &err), 0, "%s", err.msg);
    return prop;
}

void tu_expect_cli_error(const char *args, const char *word) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    char *out = NULL, *err = NULL;
    const int rc = tu_run(cmd, &out, &err);
    cr_assert_neq(rc, 0, "'%s' succeeded", args);
    cr_assert(err && strstr(err, word), "'%s': stderr '%s' does not name '%s'", args,
              err ? err : "", word);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': not one line: '%s'", args, err);
    free(out);
    free(err);
}
