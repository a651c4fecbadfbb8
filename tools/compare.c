/*
 * specdec compare: one model's logits on two placements, e.g. the GPU against the CPU, or a
 * tensor-parallel split against one device, and the determinism contract on the first.
 *
 *   specdec compare -m FILE.gguf [--device D] [--device-ref D] [--tensor-split N]
 *                   [-n N] [-t N] [--kv-type f32|f16] [--json FILE]
 *
 * N tokens (default 64: BOS, then a fixed pattern of ids) are evaluated from an empty cache
 * with logits for every position, three ways:
 *   decode path  : on --device (default cuda), in batches of 16 tokens (the batch-invariant
 *                  kernels of a device backend), against --device-ref (default cpu) run the
 *                  same way (with --tensor-split N: the split session against an unsplit
 *                  one on the same device);
 *   prefill path : on --device, the N tokens in one batch (cuBLAS on a GPU when N >= 18);
 *   single steps : on --device, the first 17 tokens one at a time, which must equal the
 *                  decode path's rows bit for bit (speculative verification relies on it).
 * For each path against the reference: top-1 agreement (fraction of positions whose
 * argmax is the same), the largest |logit difference| and that over the largest |logit|.
 * Output: a table on stdout, and with --json FILE one object. Exit 1 if the single steps
 * differ from the batch. Both print a digest (FNV-1a, 64 bits) of the tested placement's
 * logits bits on the decode and the prefill path: runs that must agree bit for bit (the
 * kernel sets, SD_KERNELS=scalar|avx2|avxvnni|avx512; two machines) can be compared by it.
 */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "runtime/model/sd_model.h"

#define CMP_HINT  "see 'specdec compare --help'"
#define CMP_CHUNK 16
#define CMP_STEPS 17

static void compare_help(FILE *f) {
    fprintf(f, "usage: specdec compare -m FILE.gguf [options]   logits on two placements\n"
               "  --device D       cpu or cuda: the placement under test (default cuda)\n"
               "  --device-ref D   the reference placement (default cpu)\n"
               "  --tensor-split N split the tested session over N ranks (reference: unsplit)\n"
               "  -n N             tokens evaluated (default 64)\n"
               "  -t N             CPU threads (default 0: all cores)\n"
               "  --kv-type T      f32 or f16 (default f32)\n"
               "  --json FILE      write the results as one JSON object\n");
}

typedef struct cmp_stats {
    double top1;     /* fraction of positions with the same argmax */
    double max_diff; /* max |a - b| */
    double max_rel;  /* max_diff / max |b| */
} cmp_stats;

static int32_t argmax(const float *x, int32_t n) {
    int32_t k = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[k]) k = i;
    return k;
}

static cmp_stats stats_of(const float *a, const float *b, int32_t rows, int32_t nv) {
    cmp_stats s = {0, 0, 0};
    double scale = 0;
    int32_t same = 0;
    for (int32_t r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * nv, *y = b + (size_t)r * nv;
        same += argmax(x, nv) == argmax(y, nv);
        for (int32_t j = 0; j < nv; j++) {
            const double d = fabs((double)x[j] - (double)y[j]);
            s.max_diff = d > s.max_diff || isnan(d) ? d : s.max_diff;
            scale = fmax(scale, fabs((double)y[j]));
        }
    }
    s.top1 = rows ? (double)same / rows : 0;
    s.max_rel = scale > 0 ? s.max_diff / scale : s.max_diff;
    return s;
}

/* Logits of toks[0 .. n) from an empty cache, chunk tokens per eval. */
static int eval_rows(sd_session *s, const int32_t *toks, int32_t n, int32_t chunk, int32_t nv,
                     float *out, sd_error *err) {
    int rc = sd_session_seq_truncate(s, 0, 0, err);
    for (int32_t i = 0; i < n && !rc; i += chunk) {
        const int32_t m = n - i < chunk ? n - i : chunk;
        rc = sd_session_eval(s, toks + i, m, out + (size_t)i * nv, m, err);
    }
    return rc;
}

/* FNV-1a (64 bits) of the bytes of n floats: a digest of logits bits. */
static uint64_t logits_digest(const float *x, size_t n) {
    return sd_fnv1a64(SD_FNV1A64_INIT, x, n * sizeof(float));
}

static json_t *jstats(const cmp_stats *s) {
    return json_pack("{s:f,s:f,s:f}", "top1_agreement", s->top1, "max_abs_logit_diff",
                     isfinite(s->max_diff) ? s->max_diff : -1.0, "max_rel_logit_diff",
                     isfinite(s->max_rel) ? s->max_rel : -1.0);
}

enum { OPT_JSON = SD_CLI_OPT_OWN, OPT_DEVICE_REF };

typedef struct cmp_cli {
    sd_cli_gen_opts g;
    const char *json;
    int device_ref;
} cmp_cli;

static int cmp_option(int o, const char *arg, void *user) {
    cmp_cli *c = user;
    switch (o) {
    case OPT_JSON:
        c->json = arg;
        return 0;
    case OPT_DEVICE_REF:
        if (!strcmp(arg, "cpu"))
            c->device_ref = SD_DEVICE_CPU;
        else if (!strcmp(arg, "cuda"))
            c->device_ref = SD_DEVICE_CUDA;
        else
            return sd_cli_usage(CMP_HINT, "--device-ref: expected cpu or cuda, found '%s'", arg);
        return 0;
    case 'n': /* any count >= 1 */
        if (sd_cli_parse_i64(arg, 1, 1 << 16, &c->g.n))
            return sd_cli_usage(CMP_HINT, "-n: expected an integer in [1, 65536], found '%s'", arg);
        c->g.has_n = 1;
        return 0;
    case 'h':
        compare_help(stdout);
        return -1;
    default:
        return SD_CLI_PASS;
    }
}

int sd_cmd_compare(int argc, char **argv) {
    static const struct option opts[] = {
        SD_CLI_GEN_LONGOPTS,
        {"json", required_argument, 0, OPT_JSON},
        {"device-ref", required_argument, 0, OPT_DEVICE_REF},
        {0, 0, 0, 0},
    };
    cmp_cli c;
    memset(&c, 0, sizeof c);
    c.device_ref = SD_DEVICE_CPU;
    int prc = sd_cli_gen_parse(argc, argv, opts, CMP_HINT, &c.g, cmp_option, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    if (!c.g.target) return sd_cli_usage(CMP_HINT, "%s", "compare: -m FILE.gguf is required");
    const sd_device dev = c.g.device >= 0 ? (sd_device)c.g.device : SD_DEVICE_CUDA;
    const sd_device ref_dev = (sd_device)c.device_ref;
    const int32_t n = c.g.has_n ? (int32_t)c.g.n : 64;
    const int32_t split = c.g.has_split || c.g.n_split ? c.g.n_split : 0;

    sd_error err = {0};
    sd_model *m = NULL;
    sd_session *a = NULL, *b = NULL;
    float *la = NULL, *lb = NULL, *lp = NULL, *l1 = NULL;
    int32_t *toks = NULL;
    json_t *root = NULL;
    int rc = sd_model_load(c.g.target, &m, &err), code = EXIT_FAILURE;
    if (rc) goto done;
    const sd_hparams *hp = sd_model_hparams(m);
    const int32_t nv = hp->n_vocab;
    if (n > hp->n_ctx_train) {
        rc = sd_errorf(&err, SD_ERR_ARG, "compare: -n %d exceeds %s's context %d", n, c.g.target,
                       hp->n_ctx_train);
        goto done;
    }
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = n > CMP_STEPS ? n : CMP_STEPS;
    if (sp.n_ctx > hp->n_ctx_train) sp.n_ctx = hp->n_ctx_train;
    sp.n_batch = n > CMP_STEPS ? n : CMP_STEPS;
    sp.n_threads = c.g.has_threads ? (int32_t)c.g.threads : 0;
    sp.kv_type = c.g.kv_type && !strcmp(c.g.kv_type, "f16") ? SD_TYPE_F16 : SD_TYPE_F32;
    sd_session_params rp = sp;
    sp.device = dev;
    sp.n_split = split;
    rp.device = split ? dev : ref_dev;
    if ((rc = sd_session_init(m, &sp, &a, &err)) || (rc = sd_session_init(m, &rp, &b, &err)))
        goto done;
    toks = malloc((size_t)n * sizeof *toks);
    la = malloc((size_t)n * nv * sizeof(float));
    lb = malloc((size_t)n * nv * sizeof(float));
    lp = malloc((size_t)n * nv * sizeof(float));
    l1 = malloc((size_t)nv * sizeof(float));
    if (!toks || !la || !lb || !lp || !l1) {
        rc = sd_errorf(&err, SD_ERR_OOM, "compare: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        toks[i] = i == 0 && nv > 1 ? 1 : (int32_t)(3 + ((int64_t)i * 7919) % (nv > 3 ? nv - 3 : 1));
    if ((rc = eval_rows(a, toks, n, CMP_CHUNK, nv, la, &err)) ||
        (rc = eval_rows(b, toks, n, CMP_CHUNK, nv, lb, &err)) ||
        (rc = eval_rows(a, toks, n, n, nv, lp, &err)))
        goto done;
    /* Single steps against the decode path's rows. */
    const int32_t steps = n < CMP_STEPS ? n : CMP_STEPS;
    int32_t n_diff = 0;
    if ((rc = sd_session_seq_truncate(a, 0, 0, &err))) goto done;
    for (int32_t i = 0; i < steps; i++) {
        if ((rc = sd_session_eval(a, toks + i, 1, l1, 1, &err))) goto done;
        n_diff += memcmp(l1, la + (size_t)i * nv, (size_t)nv * sizeof(float)) != 0;
    }
    const cmp_stats sd = stats_of(la, lb, n, nv), spf = stats_of(lp, lb, n, nv);
    char what[64], ref[64];
    snprintf(what, sizeof what, "%s%s", sd_device_name(dev), split ? " (split)" : "");
    if (split)
        snprintf(ref, sizeof ref, "%s (unsplit)", sd_device_name(dev));
    else
        snprintf(ref, sizeof ref, "%s", sd_device_name(ref_dev));
    printf("compare %s: %s against %s, %d tokens\n", c.g.target, what, ref, n);
    printf("  decode path  (batches of %d): top-1 agreement %.4f, max |diff| %.4g (%.3g of max "
           "|logit|)\n",
           CMP_CHUNK, sd.top1, sd.max_diff, sd.max_rel);
    printf("  prefill path (one batch of %d): top-1 agreement %.4f, max |diff| %.4g (%.3g)\n", n,
           spf.top1, spf.max_diff, spf.max_rel);
    printf("  single steps: %d of %d positions differ from the batched rows%s\n", n_diff, steps,
           n_diff ? " (DETERMINISM CONTRACT BROKEN)" : " (bit-identical)");
    char dd[17], dp[17];
    snprintf(dd, sizeof dd, "%016llx",
             (unsigned long long)logits_digest(la, (size_t)n * (size_t)nv));
    snprintf(dp, sizeof dp, "%016llx",
             (unsigned long long)logits_digest(lp, (size_t)n * (size_t)nv));
    printf("  logits digest (FNV-1a 64 of the float bits, %s): decode %s, prefill %s\n", what, dd,
           dp);
    if (c.json) {
        root = json_pack("{s:s,s:s,s:s,s:i,s:i,s:o,s:o,s:b,s:i,s:s,s:s}", "model", c.g.target,
                         "device", what, "reference", ref, "n_tokens", n, "tensor_split", split,
                         "decode_path", jstats(&sd), "prefill_path", jstats(&spf),
                         "batch_invariant", n_diff == 0, "single_step_rows_differing", n_diff,
                         "decode_logits_fnv1a64", dd, "prefill_logits_fnv1a64", dp);
        if (!root || json_dump_file(root, c.json, JSON_INDENT(1) | JSON_REAL_PRECISION(8))) {
            rc = sd_errorf(&err, SD_ERR_IO, "%s: cannot write JSON", c.json);
            goto done;
        }
    }
    code = n_diff ? EXIT_FAILURE : EXIT_SUCCESS;
    if (n_diff) fprintf(stderr, "specdec: compare: batched and single-token logits differ\n");
done:
    if (rc) code = sd_cli_fail(&err);
    json_decref(root);
    free(toks);
    free(la);
    free(lb);
    free(lp);
    free(l1);
    sd_session_free(a);
    sd_session_free(b);
    sd_model_free(m);
    return code;
}
