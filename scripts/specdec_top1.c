/* Per-position top-1 of specdec on a token sequence (the counterpart of llamacpp_logits.c).
 *
 * usage: specdec_top1 MODEL.gguf IDS.txt [N_BATCH]
 *
 * IDS.txt: token ids, whitespace-separated, evaluated as one sequence from position 0 in a
 * session of exactly their count (CPU, F32 KV cache), N_BATCH (default 250) per
 * sd_session_eval call, logits for every position. Prints "pos top1 top2 gap" per
 * position (gap = logit(top1) - logit(top2), lowest id first on ties). Exit 1 on failure.
 * Built by scripts/arch_vs_llamacpp.py against the Release library. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/model/sd_model.h"
#include "top1_util.h"

int main(int argc, char **argv) {
    int32_t n_batch = 0;
    size_t n = 0;
    int32_t *ids = top1_args("specdec_top1", argc, argv, &n_batch, &n);
    if (!ids) return 1;
    sd_error err = {0};
    sd_model *m = NULL;
    if (sd_model_load(argv[1], &m, &err) != 0) {
        fprintf(stderr, "specdec_top1: %s\n", err.msg);
        return 1;
    }
    const int32_t n_vocab = sd_model_hparams(m)->n_vocab;
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = (int32_t)n;
    sp.n_batch = n_batch;
    sd_session *s = NULL;
    if (sd_session_init(m, &sp, &s, &err) != 0) {
        fprintf(stderr, "specdec_top1: %s\n", err.msg);
        return 1;
    }
    float *logits = malloc(sizeof *logits * (size_t)n_batch * (size_t)n_vocab);
    if (!logits) return 1;
    for (size_t i = 0; i < n; i += (size_t)n_batch) {
        int32_t k = n - i < (size_t)n_batch ? (int32_t)(n - i) : n_batch;
        if (sd_session_eval(s, ids + i, k, logits, k, &err) != 0) {
            fprintf(stderr, "specdec_top1: at position %zu: %s\n", i, err.msg);
            return 1;
        }
        for (int32_t j = 0; j < k; j++) {
            const float *row = logits + (size_t)j * (size_t)n_vocab;
            int32_t t1, t2;
            top1_top2(row, n_vocab, &t1, &t2);
            printf("%zu %d %d %.6f\n", i + (size_t)j, t1, t2, (double)(row[t1] - row[t2]));
        }
    }
    free(logits);
    sd_session_free(s);
    sd_model_free(m);
    free(ids);
    return 0;
}
