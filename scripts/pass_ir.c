/*
 * scripts/pass_ir.c: instructions (callgrind Ir) of one whole-model pass over n tokens,
 * per width, as a load-independent proxy of v(n) = pass(n) / step where the pass is
 * compute-bound. Not a test: run by scripts/pass_ir.sh under
 * `valgrind --tool=callgrind --instr-atstart=no`; the model load and the context fill run
 * uninstrumented, then each width's pass (all n logits rows, as a verification pass
 * computes them) is counted alone and dumped as its own profile (callgrind_annotate per
 * function: kernels per type, activation quantization, attention, norms, the LM head).
 *
 * usage: pass_ir --model M.gguf [--widths 1,2,5,9] [--pos 32] [--threads 1]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <valgrind/callgrind.h>

#include "runtime/model/sd_model.h"

int main(int argc, char **argv) {
    const char *path = NULL, *widths = "1,2,5,9";
    int pos = 32, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            path = argv[i + 1];
        else if (!strcmp(argv[i], "--widths"))
            widths = argv[i + 1];
        else if (!strcmp(argv[i], "--pos"))
            pos = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    if (!path || pos < 1 || threads < 1) {
        fprintf(stderr, "usage: pass_ir --model M.gguf [--widths 1,2,5,9] [--pos 32]\n");
        return 2;
    }
    sd_error err = {0};
    sd_model *m = NULL;
    if (sd_model_load(path, &m, &err)) {
        fprintf(stderr, "pass_ir: %s\n", err.msg);
        return 1;
    }
    const int32_t nv = sd_model_hparams(m)->n_vocab;
    enum { WMAX = 32 };
    int32_t *ctx = malloc((size_t)(pos + WMAX) * sizeof *ctx);
    float *rows = malloc((size_t)WMAX * (size_t)nv * sizeof(float));
    if (!ctx || !rows) return 1;
    for (int i = 0; i < pos + WMAX; i++)
        ctx[i] = (int32_t)((i * 7919 + 13) % (nv > 1000 ? 1000 : nv)) + 1;
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = pos + WMAX + 1;
    sp.n_batch = WMAX;
    sp.n_threads = threads;
    sd_session *s = NULL;
    if (sd_session_init(m, &sp, &s, &err) || sd_session_seq_sync(s, 0, ctx, pos, &err)) {
        fprintf(stderr, "pass_ir: %s\n", err.msg);
        return 1;
    }
    /* one uncounted pass per width first: lazily built state (scratch sizes) stays out */
    for (const char *p = widths; p && *p;) {
        const int n = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
        if (n < 1 || n > WMAX) continue;
        if (sd_session_eval(s, ctx + pos, n, rows, n, &err) ||
            sd_session_seq_truncate(s, 0, pos, &err))
            return 1;
    }
    CALLGRIND_START_INSTRUMENTATION;
    for (const char *p = widths; p && *p;) {
        const int n = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
        if (n < 1 || n > WMAX) continue;
        char name[32];
        snprintf(name, sizeof name, "n=%d", n);
        CALLGRIND_ZERO_STATS;
        const int rc = sd_session_eval(s, ctx + pos, n, rows, n, &err);
        CALLGRIND_DUMP_STATS_AT(name);
        if (rc || sd_session_seq_truncate(s, 0, pos, &err)) {
            fprintf(stderr, "pass_ir: %s\n", err.msg);
            return 1;
        }
        printf("n=%d first logit %.6f\n", n, rows[0]);
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    sd_session_free(s);
    sd_model_free(m);
    free(ctx);
    free(rows);
    return 0;
}
