/*
 * specdec synth: llama-shaped GGUF model pairs of real shapes with seeded random
 * weights, for benchmarks that need a TinyLlama-1.1B-sized target without downloading
 * one.
 *
 *   specdec synth [--preset tinyllama|llama7b|small|tiny] [--type f16|q8_0|q4_0]
 *                 [--draft-type T] [--noise S] [--seed N] [--only target|draft|both]
 *                 -o DIR
 * writes DIR/target.gguf, DIR/draft.gguf and DIR/pair.json (a generate/bench config
 * naming the two, K = 4, greedy), each to a temporary name renamed into place.
 *
 * Shapes (head_dim 64 for the real presets, so the draft's heads fit the target's):
 *   preset     role    dim  layers heads kv  ffn   vocab  ctx   params
 *   tinyllama  target  2048   22    32    4  5632  32000  2048  1.10 B (TinyLlama-1.1B)
 *              draft    512    8     8    4  1536  32000  2048  58.0 M (19x smaller)
 *   small      target  1024   12    16    4  2816  32000  2048   199 M
 *              draft    256    4     4    4   768  32000  2048  19.5 M (10x)
 *   llama7b    target  4096   32    32   32 11008  32000  4096  6.74 B (LLaMA-2-7B)
 *              draft   1024    8     8    8  2816  32000  4096   166 M (41x; head_dim 128)
 *   tiny       target   128    4     4    2   384    512   256  0.92 M (for tests)
 *              draft     64    2     2    2   192    512   256  0.15 M
 *
 * How the target embeds the draft, the noise and the vocabulary:
 * tools/synth_weights.c.
 *
 * All tensors are kept in memory until the writer writes the file (the writer
 * references tensor data until sd_gguf_writer_write): ~1.2 GB for the tinyllama target
 * in Q8_0, 2.2 GB in F16.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "tools/tools.h"
#include "tools/synth.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/base/sd_base.h"

#define HINT "see 'specdec synth --help'"

typedef struct preset {
    const char *name;
    synth_shape t, d;
} preset;

static const preset k_presets[] = {
    {"tinyllama", {32000, 2048, 22, 32, 4, 5632, 2048}, {32000, 512, 8, 8, 4, 1536, 2048}},
    {"llama7b", {32000, 4096, 32, 32, 32, 11008, 4096}, {32000, 1024, 8, 8, 8, 2816, 4096}},
    {"small", {32000, 1024, 12, 16, 4, 2816, 2048}, {32000, 256, 4, 4, 4, 768, 2048}},
    {"tiny", {512, 128, 4, 4, 2, 384, 256}, {512, 64, 2, 2, 2, 192, 256}},
};

/* ---------------------------------------------------------------- model writer */

typedef struct model_out {
    void **bufs;
    int n_bufs;
} model_out;

/* Generate tensor (k, layer) of the draft (is_target 0) or target, quantized to type
 * t (norms stay f32), and add it to w. */
static int gen_tensor(const synth_ctx *c, int is_target, synth_kind k, int layer, sd_type t,
                      sd_gguf_writer *w, model_out *mo, sd_error *err) {
    const synth_shape *s = is_target ? &c->t : &c->d;
    int64_t rows, cols;
    synth_kind_dims(s, k, &rows, &cols);
    const sd_type tt = synth_kind_is_norm(k) ? SD_TYPE_F32 : t;
    size_t row_bytes;
    if (sd_type_row_bytes(tt, cols, &row_bytes))
        return sd_errorf(err, SD_ERR_ARG, "synth: %lld columns are not a multiple of the %s block",
                         (long long)cols, sd_type_name(tt));
    const size_t nbytes = row_bytes * (size_t)rows;
    unsigned char *data = malloc(nbytes);
    if (!data) return sd_errorf(err, SD_ERR_OOM, "synth: out of memory (%zu bytes)", nbytes);
    mo->bufs[mo->n_bufs++] = data;
    const int64_t dcols_max = c->d.n_ff > c->d.n_embd ? c->d.n_ff : c->d.n_embd;
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        /* row: the target row, the draft row, and the draft row quantized (<= f32 size) */
        float *row = malloc((size_t)(cols + 2 * dcols_max) * sizeof(float));
        if (!row) oom = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!row) continue;
            if (is_target)
                synth_target_row(c, k, layer, r, cols, row, row + cols, row + cols + dcols_max);
            else
                synth_draft_row(c, k, layer, r, cols, row);
            sd_quantize_row(tt, row, data + (size_t)r * row_bytes, cols);
        }
        free(row);
    }
    if (oom) return sd_errorf(err, SD_ERR_OOM, "synth: out of memory");
    char name[96];
    synth_tensor_name(name, sizeof name, k, layer);
    int64_t ne[2] = {cols, rows};
    return sd_gguf_add_tensor(w, name, (uint32_t)tt, synth_kind_is_norm(k) ? 1 : 2, ne, data,
                              nbytes, err);
}

static int oom_if(int rc, sd_error *err) {
    return rc ? sd_errorf(err, SD_ERR_OOM, "synth: out of memory building metadata") : SD_OK;
}

static int write_model(const synth_ctx *c, const char *preset_name, int is_target, sd_type t,
                       const synth_vocab *v, const char *path, sd_error *err) {
    const synth_shape *s = is_target ? &c->t : &c->d;
    sd_gguf_writer *w = sd_gguf_writer_new();
    if (!w) return sd_errorf(err, SD_ERR_OOM, "synth: out of memory");
    model_out mo = {0};
    const int max_tensors = 4 + 9 * s->n_layer;
    mo.bufs = calloc((size_t)max_tensors, sizeof *mo.bufs);
    int rc = mo.bufs ? SD_OK : sd_errorf(err, SD_ERR_OOM, "synth: out of memory");
    char name[128];
    const int32_t hd = s->n_embd / s->n_head;
    snprintf(name, sizeof name, "specdec-synth-%s-%s", preset_name, is_target ? "target" : "draft");
    if (!rc) {
        int e = 0;
        /* The target's eps is the draft's scaled like its mean square (see the top). */
        const sd_llm_meta meta = {
            .arch = "llama",
            .name = name,
            .file_type = -1,
            .n_ctx = s->n_ctx,
            .n_embd = s->n_embd,
            .n_layer = s->n_layer,
            .n_ff = s->n_ff,
            .n_head = s->n_head,
            .n_head_kv = s->n_head_kv,
            .n_rot = hd,
            .rms_eps = is_target ? (float)(1e-5 * c->d.n_embd / c->t.n_embd) : 1e-5f,
            .rope_base = 10000.0f,
            .n_vocab = v->n,
            .tokens = (const char *const *)v->text,
            .scores = v->score,
            .token_type = v->type,
            .bos = 1,
            .eos = 2,
            .unk = 0,
            .add_bos = 1,
            .add_eos = -1,
            .add_space_prefix = -1,
        };
        e |= sd_gguf_set_llm_meta(w, &meta);
        e |= sd_gguf_set_str(w, "specdec.synth.preset", preset_name);
        e |= sd_gguf_set_str(w, "specdec.synth.role", is_target ? "target" : "draft");
        e |= sd_gguf_set_scalar(w, "specdec.synth.seed", SD_GGUF_U64, &c->seed);
        if (is_target) e |= sd_gguf_set_f32(w, "specdec.synth.noise", c->noise);
        rc = oom_if(e, err);
    }
    const double t0 = sd_time_ms();
    if (!rc) rc = gen_tensor(c, is_target, T_EMBD, 0, t, w, &mo, err);
    for (int l = 0; l < s->n_layer && !rc; l++) {
        for (synth_kind k = T_ATTN_NORM; k <= T_UP && !rc; k++)
            rc = gen_tensor(c, is_target, k, l, t, w, &mo, err);
        sd_cli_progress("\rspecdec synth: %s: layer %d/%d (%.1f s)", path, l + 1, s->n_layer,
                        (sd_time_ms() - t0) * 1e-3);
    }
    if (!rc) rc = gen_tensor(c, is_target, T_OUT_NORM, 0, t, w, &mo, err);
    if (!rc) rc = gen_tensor(c, is_target, T_OUT, 0, t, w, &mo, err);
    sd_cli_progress("\n");
    if (!rc) {
        sd_cli_progress("specdec synth: writing %s\n", path);
        sd_cli_temp_arm(path); /* a fatal signal removes the temporary */
        rc = sd_gguf_writer_write(w, path, err);
        sd_cli_temp_disarm();
    }
    sd_gguf_writer_free(w);
    for (int i = 0; i < mo.n_bufs; i++)
        free(mo.bufs[i]);
    free(mo.bufs);
    return rc;
}

static int64_t shape_params(const synth_shape *s) {
    int64_t total = 0;
    for (synth_kind k = T_EMBD; k <= T_OUT; k++) {
        int64_t r, c;
        synth_kind_dims(s, k, &r, &c);
        total += r * c * (synth_kind_per_layer(k) ? s->n_layer : 1);
    }
    return total;
}

/* The embedding of the draft in the target needs these; true for the presets. */
static int check_shapes(const synth_shape *t, const synth_shape *d, sd_error *err) {
    const int32_t hdt = t->n_embd / t->n_head, hdd = d->n_embd / d->n_head;
    if (t->n_vocab != d->n_vocab || t->n_ctx != d->n_ctx || hdt != hdd || d->n_embd > t->n_embd ||
        d->n_layer > t->n_layer || d->n_ff > t->n_ff || d->n_head_kv > t->n_head_kv ||
        t->n_head % t->n_head_kv || d->n_head % d->n_head_kv ||
        d->n_head / d->n_head_kv > t->n_head / t->n_head_kv || t->n_embd % t->n_head ||
        d->n_embd % d->n_head || d->n_embd % 32 || d->n_ff % 32 || t->n_embd % 32 || t->n_ff % 32)
        return sd_errorf(err, SD_ERR_ARG,
                         "synth: draft synth_shape does not embed in the target synth_shape");
    return SD_OK;
}

static void synth_help(FILE *f) {
    fprintf(
        f, "usage: specdec synth [options] -o DIR\n"
           "  writes DIR/target.gguf, DIR/draft.gguf and DIR/pair.json (a config for\n"
           "  generate/bench): a llama draft with seeded random weights and a target that\n"
           "  is a grown copy of it plus noise (see tools/synth.c)\n"
           "  --preset P     tinyllama (target 1.1B: dim 2048, 22 layers, 32 heads, 4 KV,\n"
           "                 FFN 5632, synth_vocab 32000, ctx 2048; draft 58M: dim 512, 8 layers,\n"
           "                 8 heads, 4 KV, FFN 1536), llama7b (target 6.7B: dim 4096, 32\n"
           "                 layers, 32 heads, FFN 11008, ctx 4096; draft 166M), small\n"
           "                 (199M / 19.5M), tiny (tests)\n"
           "                 (default tinyllama)\n"
           "  --type T       f16, q8_0 or q4_0 (or f32) for the weight matrices (default q8_0)\n"
           "  --draft-type T the draft's type (default: --type)\n"
           "  --noise S      target noise scale in [0.0001, 10]: larger S, lower acceptance\n"
           "                 (default 0.002: ~0.8 greedy acceptance for tinyllama q8_0)\n"
           "  --seed N       weights seed (default 1)\n"
           "  --only W       target, draft or both (default both)\n"
           "  -o DIR         output folder (created if absent)\n");
}

typedef struct synth_opts {
    const preset *pr;
    sd_type type, dtype;
    int has_dtype, want_t, want_d;
    double noise;
    unsigned long long seed;
    const char *out_dir;
} synth_opts;

enum { O_PRESET = 1000, O_TYPE, O_DTYPE, O_NOISE, O_SEED, O_ONLY };

/* One option of synth (not -h, -o): 0 or a usage status. */
static int synth_option(int o, const char *arg, synth_opts *s) {
    char *end;
    switch (o) {
    case O_PRESET:
        s->pr = NULL;
        for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
            if (!strcmp(arg, k_presets[i].name)) s->pr = &k_presets[i];
        if (!s->pr)
            return sd_cli_usage(
                NULL, "--preset: expected tinyllama, llama7b, small or tiny, found '%s'", arg);
        return 0;
    case O_TYPE:
    case O_DTYPE: {
        sd_type tt;
        if (sd_type_from_name(arg, &tt) ||
            (tt != SD_TYPE_F16 && tt != SD_TYPE_Q8_0 && tt != SD_TYPE_Q4_0 && tt != SD_TYPE_F32))
            return sd_cli_usage(NULL,
                                o == O_TYPE
                                    ? "--type: expected f16, q8_0 or q4_0, found '%s'"
                                    : "--draft-type: expected f16, q8_0 or q4_0, found '%s'",
                                arg);
        if (o == O_TYPE) {
            s->type = tt;
        } else {
            s->dtype = tt;
            s->has_dtype = 1;
        }
        return 0;
    }
    case O_NOISE:
        if (sd_cli_parse_f64(arg, 1e-4, 10.0, &s->noise))
            return sd_cli_usage(NULL, "--noise: expected a number in [0.0001, 10], found '%s'",
                                arg);
        return 0;
    case O_SEED:
        errno = 0;
        s->seed = strtoull(arg, &end, 10);
        if (errno || *end || !*arg || arg[0] == '-')
            return sd_cli_usage(NULL, "--seed: expected an integer >= 0, found '%s'", arg);
        return 0;
    case O_ONLY:
        s->want_t = !strcmp(arg, "target") || !strcmp(arg, "both");
        s->want_d = !strcmp(arg, "draft") || !strcmp(arg, "both");
        if (!s->want_t && !s->want_d)
            return sd_cli_usage(NULL, "--only: expected target, draft or both, found '%s'", arg);
        return 0;
    }
    return sd_cli_usage(HINT, "%s", "synth: unexpected option");
}

/* 0, -1 (help printed: exit 0) or a usage status. */
static int synth_parse(int argc, char **argv, synth_opts *s) {
    static const struct option opts[] = {
        {"preset", required_argument, 0, O_PRESET},
        {"type", required_argument, 0, O_TYPE},
        {"draft-type", required_argument, 0, O_DTYPE},
        {"noise", required_argument, 0, O_NOISE},
        {"seed", required_argument, 0, O_SEED},
        {"only", required_argument, 0, O_ONLY},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(s, 0, sizeof *s);
    s->pr = &k_presets[0];
    s->type = SD_TYPE_Q8_0;
    s->want_t = s->want_d = 1;
    s->noise = 0.002;
    s->seed = 1;
    opterr = 0;
    optind = 1;
    int o, rc;
    while ((o = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        if (o == 'o') {
            s->out_dir = optarg;
        } else if (o == 'h') {
            synth_help(stdout);
            return -1;
        } else if (o == ':') {
            return sd_cli_usage(HINT, "option '%s' needs a value", argv[optind - 1]);
        } else if (o == '?') {
            return sd_cli_usage(HINT, "unknown option '%s'", argv[optind - 1]);
        } else if ((rc = synth_option(o, optarg, s))) {
            return rc;
        }
    }
    if (optind < argc) return sd_cli_usage(HINT, "unexpected argument '%s'", argv[optind]);
    if (!s->out_dir) return sd_cli_usage(HINT, "%s", "synth: -o DIR is required");
    if (!s->has_dtype) s->dtype = s->type;
    return 0;
}

/* DIR/pair.json: a generate/bench config naming the two models, K = 4, greedy. */
static int write_pair_config(const synth_opts *s, const char *path, sd_error *err) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\n"
             "  \"description\": \"specdec synth --preset %s --type %s --draft-type %s "
             "--noise %g --seed %llu\",\n"
             "  \"target\": \"target.gguf\",\n"
             "  \"draft\": \"draft.gguf\",\n"
             "  \"draft_tokens\": 4,\n"
             "  \"max_tokens\": 128,\n"
             "  \"temp\": 0\n"
             "}\n",
             s->pr->name, sd_type_name(s->type), sd_type_name(s->dtype), s->noise, s->seed);
    return sd_cli_write_file_atomic(path, json, strlen(json), err);
}

/* The folder and the three output paths, each checked before any work. */
static int synth_outputs(const synth_opts *s, char (*paths)[4200], sd_error *err) {
    static const char *names[3] = {"target.gguf", "draft.gguf", "pair.json"};
    if (mkdir(s->out_dir, 0777) && errno != EEXIST)
        return sd_errorf(err, SD_ERR_IO, "%s: cannot create folder: %s", s->out_dir,
                         strerror(errno));
    for (int i = 0; i < 3; i++) {
        if (snprintf(paths[i], 4200, "%s/%s", s->out_dir, names[i]) >= 4200)
            return sd_errorf(err, SD_ERR_ARG, "%.200s...: path too long", s->out_dir);
        const int wanted = i == 0 ? s->want_t : (i == 1 ? s->want_d : s->want_t && s->want_d);
        int rc = wanted ? sd_cli_check_output(paths[i], NULL, 0, err) : SD_OK;
        if (rc) return rc;
    }
    return SD_OK;
}

int sd_cmd_synth(int argc, char **argv) {
    synth_opts s;
    int prc = synth_parse(argc, argv, &s);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    const preset *pr = s.pr;
    sd_error err = {0};
    char paths[3][4200]; /* target, draft, pair.json */
    int rc = check_shapes(&pr->t, &pr->d, &err);
    if (!rc) rc = synth_outputs(&s, paths, &err);
    synth_ctx c = {
        pr->t, pr->d, s.dtype, (uint64_t)s.seed, (float)s.noise, NULL, pr->t.n_embd / pr->t.n_head};
    synth_vocab v = {0};
    if (!rc) {
        c.draft_layer = malloc((size_t)c.t.n_layer * sizeof(int32_t));
        if (!c.draft_layer || synth_vocab_build(c.t.n_vocab, &v))
            rc = sd_errorf(&err, SD_ERR_OOM, "synth: out of memory");
    }
    if (!rc) {
        for (int l = 0; l < c.t.n_layer; l++)
            c.draft_layer[l] = -1;
        for (int j = 0; j < c.d.n_layer; j++)
            c.draft_layer[(int64_t)j * c.t.n_layer / c.d.n_layer] = j;
        fprintf(stderr,
                "specdec synth: preset %s, seed %llu, noise %g: target %.1f M params (%s), "
                "draft %.1f M params (%s)\n",
                pr->name, s.seed, s.noise, shape_params(&c.t) / 1e6, sd_type_name(s.type),
                shape_params(&c.d) / 1e6, sd_type_name(s.dtype));
    }
    if (!rc && s.want_d) rc = write_model(&c, pr->name, 0, s.dtype, &v, paths[1], &err);
    if (!rc && s.want_t) rc = write_model(&c, pr->name, 1, s.type, &v, paths[0], &err);
    if (!rc && s.want_t && s.want_d) rc = write_pair_config(&s, paths[2], &err);
    free(c.draft_layer);
    synth_vocab_free(&v);
    if (rc) return sd_cli_fail(&err);
    fprintf(stderr, "specdec synth: wrote %s%s%s%s%s\n", s.want_d ? paths[1] : "",
            s.want_d && s.want_t ? ", " : "", s.want_t ? paths[0] : "",
            s.want_t && s.want_d ? ", " : "", s.want_t && s.want_d ? paths[2] : "");
    return EXIT_SUCCESS;
}
