/*
 * scripts/pearl_probe.c: does drafting while the target verifies pay on this machine?
 * (PEARL, Liu et al., arXiv 2408.11850; issue 23.) Not a test: a benchmark, built and run
 * by scripts/pearl_probe.sh. It measures the premise before anything is built into the
 * engine: one speculative round of block K is
 *   in turn     the draft's K greedy steps (fused head), then the target's pass over
 *               [last, d1..dK], each on all T threads (what the engine does now);
 *   overlapped  the target's pass on T/2 threads while the draft's next K steps run on the
 *               other T/2 at the same time (PEARL's post-verify: drafting the next block
 *               while this one is verified), the round's time the later of the two.
 * Both forms do the same work; overlapped pays when the two streams, each on half the
 * cores, finish sooner than one after the other on all of them (on a machine whose memory
 * path one core can nearly fill, they cannot). Phases alternate (--rounds each, --reps
 * times), every step rolled back after it; min and median of the round times.
 *
 * usage: pearl_probe --target T.gguf --draft D.gguf [--threads 2] [--k 4] [--rounds 9]
 *                    [--reps 2] [--pos 128]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/sd_model.h"

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct side {
    sd_session *s;
    const int32_t *toks;   /* the target's pass: [k + 1]; the draft's first input: toks[0] */
    int32_t n, pos, draft; /* draft: n greedy steps; else one pass over n tokens */
    float *row;
    double ms;
    int rc;
    sd_error err;
} side;

static void *run_side(void *p) {
    side *d = p;
    const double t0 = sd_time_ms();
    if (d->draft) {
        int32_t tok = d->toks[0], best = 0;
        const int32_t nl = sd_session_n_logits(d->s);
        for (int32_t i = 0; i < d->n && !d->rc; i++) {
            d->rc = sd_session_seq_eval_argmax(d->s, 0, &tok, 1, nl, d->row, &best, &d->err);
            tok = best;
        }
    } else {
        d->rc = sd_session_eval(d->s, d->toks, d->n, d->row, d->n, &d->err);
    }
    d->ms = sd_time_ms() - t0;
    if (!d->rc) d->rc = sd_session_seq_truncate(d->s, 0, d->pos, &d->err);
    return NULL;
}

static int open_pair(const sd_model *mt, const sd_model *md, int32_t nt, int32_t n_ctx,
                     const int32_t *ctx, int32_t pos, sd_session **st, sd_session **sd,
                     sd_error *err) {
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = 32;
    sp.n_threads = nt;
    *st = *sd = NULL;
    int rc = sd_session_init(mt, &sp, st, err);
    if (!rc) rc = sd_session_init(md, &sp, sd, err);
    if (!rc) rc = sd_session_seq_sync(*st, 0, ctx, pos, err);
    if (!rc) rc = sd_session_seq_sync(*sd, 0, ctx, pos, err);
    return rc;
}

int main(int argc, char **argv) {
    const char *tpath = NULL, *dpath = NULL;
    int threads = 2, k = 4, rounds = 9, reps = 2, pos = 128;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--target"))
            tpath = argv[i + 1];
        else if (!strcmp(argv[i], "--draft"))
            dpath = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--k"))
            k = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pos"))
            pos = atoi(argv[i + 1]);
        else
            tpath = NULL, i = argc;
    }
    if (!tpath || !dpath || threads < 2 || k < 1 || k > 16 || rounds < 1 || reps < 1 || pos < 1) {
        fprintf(stderr,
                "usage: %s --target T --draft D [--threads 2..] [--k 1..16] [--rounds N] "
                "[--reps N] [--pos P]\n",
                argv[0]);
        return 2;
    }
    sd_error err = {0};
    sd_model *mt = NULL, *md = NULL;
    if (sd_model_load(tpath, &mt, &err) || sd_model_load(dpath, &md, &err)) {
        fprintf(stderr, "pearl_probe: %s\n", err.msg);
        return 1;
    }
    const int32_t n_ctx = pos + 2 * k + 8;
    int32_t *ctx = malloc((size_t)(pos + k + 1) * sizeof *ctx);
    for (int i = 0; i < pos + k + 1; i++)
        ctx[i] = (int32_t)((i * 7919 + 13) % 1000) + 1;
    const int32_t nv = sd_model_hparams(mt)->n_vocab > sd_model_hparams(md)->n_vocab
                           ? sd_model_hparams(mt)->n_vocab
                           : sd_model_hparams(md)->n_vocab;
    float *rt = malloc((size_t)nv * (size_t)(k + 1) * sizeof(float));
    float *rd = malloc((size_t)nv * sizeof(float));
    double *v[2] = {malloc((size_t)(rounds * reps) * sizeof(double)),
                    malloc((size_t)(rounds * reps) * sizeof(double))};
    double part[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [mode][draft, target] min ms */
    int n[2] = {0, 0};
    printf("kernels %s, %d threads, K %d, KV depth %d, %d rounds x %d alternations\n",
           sd_quant_kernels_name(), threads, k, pos, rounds, reps);
    for (int rep = 0; rep < reps; rep++) {
        for (int mode = 0; mode < 2; mode++) { /* 0: in turn, 1: overlapped */
            sd_session *st = NULL, *sd = NULL;
            const int32_t nt = mode ? threads / 2 : threads;
            int rc = open_pair(mt, md, nt, n_ctx, ctx, pos, &st, &sd, &err);
            side a = {st, ctx + pos, k + 1, pos, 0, rt, 0, 0, {0}};
            side b = {sd, ctx + pos, k, pos, 1, rd, 0, 0, {0}};
            for (int r = -1; r < rounds && !rc; r++) { /* one warm-up round */
                const double t0 = sd_time_ms();
                if (mode == 0) {
                    run_side(&b);
                    run_side(&a);
                } else {
                    pthread_t th;
                    if (pthread_create(&th, NULL, run_side, &b) != 0) {
                        rc = 1;
                        break;
                    }
                    run_side(&a);
                    pthread_join(th, NULL);
                }
                const double ms = sd_time_ms() - t0;
                rc = a.rc ? a.rc : b.rc;
                if (rc) err = a.rc ? a.err : b.err;
                if (rc || r < 0) continue;
                v[mode][n[mode]++] = ms;
                part[mode][0] = b.ms < part[mode][0] ? b.ms : part[mode][0];
                part[mode][1] = a.ms < part[mode][1] ? a.ms : part[mode][1];
            }
            sd_session_free(st);
            sd_session_free(sd);
            if (rc) {
                fprintf(stderr, "pearl_probe: %s\n", err.msg);
                return 1;
            }
        }
    }
    double med[2], mn[2];
    for (int m = 0; m < 2; m++) {
        qsort(v[m], (size_t)n[m], sizeof(double), cmp_d);
        mn[m] = v[m][0];
        med[m] = n[m] % 2 ? v[m][n[m] / 2] : 0.5 * (v[m][n[m] / 2 - 1] + v[m][n[m] / 2]);
        printf("  %-10s round min / median %.2f / %.2f ms (draft %d steps %.2f ms, target pass "
               "of %d %.2f ms, min each, %d thread%s each)\n",
               m ? "overlapped" : "in turn", mn[m], med[m], k, part[m][0], k + 1, part[m][1],
               m ? threads / 2 : threads, (m ? threads / 2 : threads) > 1 ? "s" : "");
    }
    printf("  overlapped / in turn: %.3f (min), %.3f (median); below 1: drafting while the "
           "target verifies would pay here\n",
           mn[1] / mn[0], med[1] / med[0]);
    free(v[0]);
    free(v[1]);
    free(rt);
    free(rd);
    free(ctx);
    sd_model_free(md);
    sd_model_free(mt);
    return 0;
}
