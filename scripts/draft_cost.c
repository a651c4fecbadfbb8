/*
 * scripts/draft_cost.c: what a draft token costs against a target step, c = draft step /
 * target step, beside the byte ratio (draft weight bytes streamed per step / target's).
 * Not a test: a benchmark, built and run by scripts/draft_cost.sh.
 *
 * For each thread count: both models' sessions (own thread pools), the context filled to
 * --pos positions, then --rounds rounds of, in turn,
 *   draft row      a draft decode step with its full logits row and the row's argmax
 *                  (sd_session_eval + a scan: what greedy drafting did before the fused
 *                  classifier)
 *   target         a target decode step (full logits row)
 *   draft argmax   a draft decode step through sd_session_seq_eval_argmax (the fused
 *                  classifier: greedy drafting now)
 * each step rolled back after it. Min and median over the rounds; interleaving keeps load
 * swings out of the ratios. Then the thread pool's hand-overs a step (runs handed to the
 * workers, their sleeps, the wake calls, runs its back-off kept on the caller:
 * sd_backend_cpu_pool_counts), the target's and the fused draft step's, counted over the
 * same rounds. --profile: one extra pass of --rounds argmax steps with the CPU backend's
 * per-op timers, printed per op kind and matmul type.
 *
 * usage: draft_cost --target T.gguf --draft D.gguf [--threads 1,2] [--rounds 15] [--pos 128]
 *                   [--profile]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/sd_backend.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/sd_model.h"

/* Weight bytes one decode step streams: every 2-D tensor but the embedding, which counts
 * only when it is the tied classifier. */
static double streamed_bytes(const sd_model *m) {
    const sd_gguf *g = sd_model_gguf(m);
    const int tied = sd_gguf_find_tensor(g, "output.weight") == NULL;
    double b = 0;
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        if (t->n_dims < 2) continue;
        if (!strcmp(t->name, "token_embd.weight") && !tied) continue;
        b += (double)t->nbytes;
    }
    return b;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double min_of(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static int32_t scan_argmax(const float *l, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* One decode step at position pos (then rolled back); mode 0: row + scan, 1: argmax. */
static int step(sd_session *s, int32_t tok, int32_t pos, float *row, int mode, int32_t *best,
                double *ms, sd_error *err) {
    const int32_t nl = sd_session_n_logits(s);
    const double t0 = sd_time_ms();
    int rc;
    if (mode == 0) {
        rc = sd_session_eval(s, &tok, 1, row, 1, err);
        if (!rc) *best = scan_argmax(row, nl);
    } else {
        rc = sd_session_seq_eval_argmax(s, 0, &tok, 1, nl, row, best, err);
    }
    *ms = sd_time_ms() - t0;
    if (!rc) rc = sd_session_seq_truncate(s, 0, pos, err);
    return rc;
}

/* *sum_before += *before, *sum_after += *after (pool counts around one step). */
static void add_counts(sd_cpu_pool_counts *sum_before, const sd_cpu_pool_counts *before,
                       sd_cpu_pool_counts *sum_after, const sd_cpu_pool_counts *after) {
    sum_before->runs += before->runs;
    sum_before->worker_sleeps += before->worker_sleeps;
    sum_before->caller_sleeps += before->caller_sleeps;
    sum_before->wakes += before->wakes;
    sum_before->kept += before->kept;
    sum_after->runs += after->runs;
    sum_after->worker_sleeps += after->worker_sleeps;
    sum_after->caller_sleeps += after->caller_sleeps;
    sum_after->wakes += after->wakes;
    sum_after->kept += after->kept;
}

static void print_profile(const char *what, sd_session *s, int rounds) {
    sd_cpu_profile pr;
    sd_backend_cpu_profile_get(sd_session_backend(s), &pr);
    printf("  profile %s (mean of %d):", what, rounds);
    for (int o = 0; o < SD_PROF_N; o++)
        if (pr.calls[o])
            printf(" %s %.3f ms (%lld)", sd_prof_op_name((sd_prof_op)o), pr.ms[o] / rounds,
                   (long long)(pr.calls[o] / rounds));
    printf("\n   matmul by type:");
    for (int t = 0; t < SD_TYPE_COUNT; t++)
        if (pr.matmul_calls[t])
            printf(" %s %.3f ms %.1f GB/s", sd_type_name((uint32_t)t), pr.matmul_ms[t] / rounds,
                   pr.matmul_bytes[t] / (pr.matmul_ms[t] * 1e-3) / 1e9);
    printf("\n");
}

int main(int argc, char **argv) {
    const char *tpath = NULL, *dpath = NULL, *threads = "1,2";
    int rounds = 15, pos = 128, profile = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile"))
            profile = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--target"))
            tpath = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--draft"))
            dpath = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
            threads = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--pos"))
            pos = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s --target T --draft D [--threads 1,2] [--rounds N] "
                    "[--pos P] [--profile]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!tpath || !dpath || rounds < 1 || pos < 1) {
        fprintf(stderr, "draft_cost: --target and --draft are required\n");
        return 2;
    }
    sd_error err = {0};
    sd_model *mt = NULL, *md = NULL;
    if (sd_model_load(tpath, &mt, &err) || sd_model_load(dpath, &md, &err)) {
        fprintf(stderr, "draft_cost: %s\n", err.msg);
        return 1;
    }
    const double bt = streamed_bytes(mt), bd = streamed_bytes(md);
    printf("kernels %s; streamed per step: target %.1f MB, draft %.1f MB, byte ratio %.3f\n",
           sd_quant_kernels_name(), bt / 1e6, bd / 1e6, bd / bt);
    int32_t *ctx = malloc((size_t)(pos + 1) * sizeof *ctx);
    const int32_t nv = sd_model_hparams(md)->n_vocab < sd_model_hparams(mt)->n_vocab
                           ? sd_model_hparams(md)->n_vocab
                           : sd_model_hparams(mt)->n_vocab;
    for (int i = 0; i <= pos; i++)
        ctx[i] = (int32_t)((i * 7919 + 13) % (nv > 1000 ? 1000 : nv)) + 1;
    double *v[3];
    for (int k = 0; k < 3; k++)
        v[k] = malloc((size_t)rounds * sizeof(double));
    float *row = malloc((size_t)(sd_model_hparams(mt)->n_vocab > sd_model_hparams(md)->n_vocab
                                     ? sd_model_hparams(mt)->n_vocab
                                     : sd_model_hparams(md)->n_vocab) *
                        sizeof(float));
    for (const char *p = threads; p && *p;) {
        const int nt = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
        sd_session_params sp = sd_session_default_params();
        sp.n_ctx = pos + 16;
        sp.n_batch = 32;
        sp.n_threads = nt;
        sd_session *st = NULL, *sdr = NULL;
        if (sd_session_init(mt, &sp, &st, &err) || sd_session_init(md, &sp, &sdr, &err) ||
            sd_session_seq_sync(st, 0, ctx, pos, &err) ||
            sd_session_seq_sync(sdr, 0, ctx, pos, &err)) {
            fprintf(stderr, "draft_cost: %s\n", err.msg);
            return 1;
        }
        int32_t b0 = 0, b1 = 0, bx = 0;
        double ms;
        int rc = 0;
        sd_cpu_pool_counts h[2][2]; /* [draft argmax, target][before, after], summed */
        memset(h, 0, sizeof h);
        for (int r = -2; r < rounds && !rc; r++) { /* 2 warm-up rounds */
            double t[3];
            sd_cpu_pool_counts c0, c1;
            rc = step(sdr, ctx[pos], pos, row, 0, &b0, &t[0], &err);
            sd_backend_cpu_pool_counts(sd_session_backend(st), &c0);
            if (!rc) rc = step(st, ctx[pos], pos, row, 0, &bx, &t[1], &err);
            sd_backend_cpu_pool_counts(sd_session_backend(st), &c1);
            if (r >= 0) add_counts(&h[1][0], &c0, &h[1][1], &c1);
            sd_backend_cpu_pool_counts(sd_session_backend(sdr), &c0);
            if (!rc) rc = step(sdr, ctx[pos], pos, row, 1, &b1, &t[2], &err);
            sd_backend_cpu_pool_counts(sd_session_backend(sdr), &c1);
            if (r >= 0) add_counts(&h[0][0], &c0, &h[0][1], &c1);
            if (!rc && b0 != b1) {
                fprintf(stderr, "draft_cost: argmax %d != the row's %d\n", b1, b0);
                return 1;
            }
            for (int k = 0; r >= 0 && k < 3; k++)
                v[k][r] = t[k];
        }
        if (rc) {
            fprintf(stderr, "draft_cost: %s\n", err.msg);
            return 1;
        }
        const double m0 = min_of(v[0], rounds), m1 = min_of(v[1], rounds),
                     m2 = min_of(v[2], rounds);
        const double d0 = median(v[0], rounds), d1 = median(v[1], rounds),
                     d2 = median(v[2], rounds);
        printf("threads %d (%d rounds, pos %d): min / median ms: draft row %.3f / %.3f, target "
               "%.3f / %.3f, draft argmax %.3f / %.3f\n",
               nt, rounds, pos, m0, d0, m1, d1, m2, d2);
        printf("  c (draft / target) row %.3f / %.3f, argmax %.3f / %.3f; c / byte ratio "
               "(argmax, min) %.2f; argmax / row %.3f / %.3f\n",
               m0 / m1, d0 / d1, m2 / m1, d2 / d1, (m2 / m1) / (bd / bt), m2 / m0, d2 / d0);
        for (int k = 0; k < 2; k++)
            printf("  hand-overs a %s step (mean): %.1f runs, %.1f worker sleeps, %.1f caller "
                   "sleeps, %.1f wake calls, %.1f runs kept on the caller (back-off)\n",
                   k ? "target" : "draft (argmax)", (double)(h[k][1].runs - h[k][0].runs) / rounds,
                   (double)(h[k][1].worker_sleeps - h[k][0].worker_sleeps) / rounds,
                   (double)(h[k][1].caller_sleeps - h[k][0].caller_sleeps) / rounds,
                   (double)(h[k][1].wakes - h[k][0].wakes) / rounds,
                   (double)(h[k][1].kept - h[k][0].kept) / rounds);
        if (profile) {
            sd_session *ss[2] = {sdr, st};
            for (int k = 0; k < 2 && !rc; k++) {
                sd_backend_cpu_profile_enable(sd_session_backend(ss[k]), 1);
                for (int r = 0; r < rounds && !rc; r++)
                    rc = step(ss[k], ctx[pos], pos, row, 1 - k, &b0, &ms, &err);
                print_profile(k ? "target (row)" : "draft (argmax)", ss[k], rounds);
                sd_backend_cpu_profile_enable(sd_session_backend(ss[k]), 0);
            }
        }
        sd_session_free(st);
        sd_session_free(sdr);
    }
    for (int k = 0; k < 3; k++)
        free(v[k]);
    free(row);
    free(ctx);
    sd_model_free(md);
    sd_model_free(mt);
    return 0;
}
