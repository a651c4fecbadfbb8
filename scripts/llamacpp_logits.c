/* Per-position top-1 of llama.cpp on a token sequence, through its public C API (llama.h).
 *
 * usage: llamacpp_logits MODEL.gguf IDS.txt [N_BATCH]
 *
 * IDS.txt: token ids, whitespace-separated. All ids go through one context of exactly
 * their count (one sequence from position 0), N_BATCH (default 250) per decode call, with
 * logits for every position. Prints one line per position: "pos top1 top2 gap", where
 * gap = logit(top1) - logit(top2) (lowest id first on ties). Exit 1 on any failure.
 * Built by scripts/arch_vs_llamacpp.py against the peer build (build-peer/native). */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"
#include "top1_util.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    int32_t n_batch = 0;
    size_t n_ids = 0;
    int32_t *ids = top1_args("llamacpp_logits", argc, argv, &n_batch, &n_ids);
    if (!ids) return 1;
    const int n = (int)n_ids;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llamacpp_logits: llama.cpp cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_ubatch = (uint32_t)n_batch;
    cp.n_seq_max = 1;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llamacpp_logits: no context of %d positions\n", n);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(n_batch, 0, 1);
    for (int i = 0; i < n; i += n_batch) {
        int m = n - i < n_batch ? n - i : n_batch;
        b.n_tokens = m;
        for (int j = 0; j < m; j++) {
            b.token[j] = ids[i + j];
            b.pos[j] = i + j;
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = 0;
            b.logits[j] = 1;
        }
        if (llama_decode(ctx, b) != 0) {
            fprintf(stderr, "llamacpp_logits: llama_decode failed at position %d\n", i);
            return 1;
        }
        for (int j = 0; j < m; j++) {
            const float *row = llama_get_logits_ith(ctx, j);
            if (!row) {
                fprintf(stderr, "llamacpp_logits: no logits at position %d\n", i + j);
                return 1;
            }
            int32_t t1, t2;
            top1_top2(row, n_vocab, &t1, &t2);
            printf("%d %d %d %.6f\n", i + j, t1, t2, (double)(row[t1] - row[t2]));
        }
    }
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
