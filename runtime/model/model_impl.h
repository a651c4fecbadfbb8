/*
 * runtime/model/model_impl.h: PRIVATE to runtime/model. The model as loaded (host
 * pointers into the mmap'd GGUF), shared by load.c (validation) and forward.c (sessions
 * and the forward pass).
 */
#ifndef SD_MODEL_IMPL_H
#define SD_MODEL_IMPL_H

#include "runtime/backend/sd_backend.h"
#include "runtime/model/sd_model.h"

/* Bounds on hyperparameters (well above any llama we run; they keep sizes sane). */
#define SD_MAX_EMBD          (1 << 16)
#define SD_MAX_LAYER         1024
#define SD_MAX_HEAD          1024
#define SD_MAX_FF            (1 << 18)
#define SD_MAX_VOCAB         (1 << 21)
#define SD_MAX_CTX           (1 << 24)
#define SD_MAX_BATCH         (1 << 16)
#define SD_DEFAULT_N_BATCH   512
#define SD_DEFAULT_RMS_EPS   1e-5f
#define SD_DEFAULT_ROPE_BASE 10000.0f

/* One block. Matrices and norms are host addresses (the mmap, resp. m->norms). */
typedef struct sd_layer {
    const float *attn_norm;    /* [n_embd] */
    const float *ffn_norm;     /* [n_embd] */
    sd_weight wq;              /* [n_embd, n_embd] */
    sd_weight wk;              /* [kv_dim, n_embd] */
    sd_weight wv;              /* [kv_dim, n_embd] */
    sd_weight wo;              /* [n_embd, n_embd] */
    sd_weight w_gate;          /* [n_ff, n_embd] */
    sd_weight w_down;          /* [n_embd, n_ff] */
    sd_weight w_up;            /* [n_ff, n_embd] */
    const float *bq, *bk, *bv; /* [n_embd], [kv_dim], [kv_dim] biases (qwen2), or NULL */
} sd_layer;

struct sd_model {
    char *path;
    sd_gguf *g;
    sd_vocab *vocab;
    sd_hparams hp;
    sd_weight tok_embd; /* [n_vocab, n_embd] */
    sd_weight output;   /* [n_vocab, n_embd]; == tok_embd when tied */
    int tied;
    const float *output_norm;  /* [n_embd] */
    const float *rope_factors; /* [n_rot / 2] (rope_freqs.weight), or NULL */
    float *norms;              /* owned copies of every 1-D vector (norms, biases, factors) */
    size_t norms_bytes;
    sd_layer *layers; /* [n_layer] */
    size_t weight_bytes;
};

#endif /* SD_MODEL_IMPL_H */
