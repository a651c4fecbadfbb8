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
    const float *attn_norm;       /* [n_embd] */
    const float *ffn_norm;        /* [n_embd] */
    sd_weight wq;                 /* [q_dim, n_embd], q_dim = n_head * head_dim */
    sd_weight wk;                 /* [kv_dim, n_embd] */
    sd_weight wv;                 /* [kv_dim, n_embd] */
    sd_weight wo;                 /* [n_embd, q_dim] */
    sd_weight w_gate;             /* [n_ff, n_embd] */
    sd_weight w_down;             /* [n_embd, n_ff] */
    sd_weight w_up;               /* [n_ff, n_embd] */
    const float *bq, *bk, *bv;    /* [q_dim], [kv_dim], [kv_dim] biases (qwen2), or NULL */
    const float *q_norm, *k_norm; /* [head_dim] per-head RMSNorm weights (qwen3), or NULL */
    const float *attn_post_norm;  /* [n_embd] sandwich norms (gemma3), or NULL */
    const float *ffn_post_norm;   /* [n_embd] */
    int swa;                      /* 1: a local layer (sliding window, hp.rope_base_swa) */
} sd_layer;

struct sd_model {
    char *path;
    sd_gguf *g;
    sd_vocab *vocab;
    sd_hparams hp;
    sd_weight tok_embd; /* [n_vocab, n_embd] */
    sd_weight output;   /* [n_vocab, n_embd]; == tok_embd when tied */
    int tied;
    const float *output_norm;            /* [n_embd] */
    const float *rope_factors;           /* [n_rot / 2] (rope_freqs.weight), or NULL */
    const float *rope_long, *rope_short; /* [n_rot / 2] each (phi3 LongRoPE), or NULL */
    float *norms; /* owned copies of every 1-D vector (norms, biases, factors) */
    size_t norms_bytes;
    sd_layer *layers; /* [n_layer] */
    size_t weight_bytes;
    /* A tensor-parallel shard (tp.c): its matrices live in this host region (owned by the
     * group) instead of the GGUF mapping, which place_weights puts on the backend instead;
     * NULL for a loaded model. */
    const void *shard_data;
    size_t shard_bytes;
};

/* ---- forward.c, for the tensor-parallel group (tp.c) ---- */
typedef struct sd_tp sd_tp;
typedef struct sd_tp_rank sd_tp_rank;
/* A rank's session: sd_session_init over shard model m, on device device_id, with the
 * hooks of rank r; r NULL (device_id 0): an ordinary session (session.c). */
int sd_session_init_rank(const sd_model *m, const sd_session_params *p, sd_tp_rank *r,
                         int32_t device_id, sd_session **out, sd_error *err);
/* sd_session_decode of this session alone (not its group); parent non-NULL: token trees
 * among the batch's runs (sd_session_decode_trees' parents: each row's in its run). */
int sd_session_decode_rank(sd_session *s, const sd_batch *b, int32_t n_last, const int32_t *parent,
                           float *logits, sd_error *err);
/* Undo this session's last successful decode_rank: each of its sequences' runs truncated
 * back to where it began (a group keeps its ranks in step when another rank failed). */
void sd_session_undo_rank(sd_session *s);
/* A call the group makes on every rank's session (its own thread's), the same call in the
 * same order on each, so the ranks' KV pools stay in step: its status, and in *value what
 * it answers (a count, a fingerprint), which every rank in step answers alike. */
typedef int (*sd_session_rank_fn)(sd_session *s, void *arg, int32_t *value, sd_error *err);
/* What a session asks of the group it leads: the fan-out of decode (and token-tree
 * passes) and of every call that changes the KV state (each: fn on every rank; SD_OK with
 * rank 0's *value when every rank answered alike, else the first failing rank's error, or
 * SD_ERR_ARG "out of step" when the ranks disagree: a bug), the unsharded model, and
 * freeing the group (every rank's session, this one included). The group layer (tp.c,
 * above forward.c) passes its own functions, so forward.c never names tp.c. */
typedef struct sd_session_group_ops {
    int (*decode)(sd_tp *g, const sd_batch *b, int32_t n_last, const int32_t *parent, float *logits,
                  sd_error *err);
    int (*each)(sd_tp *g, sd_session_rank_fn fn, void *arg, int32_t *value, sd_error *err);
    const sd_model *(*model)(const sd_tp *g);
    void (*free)(sd_tp *g);
} sd_session_group_ops;
/* Make s (rank 0) the handle of group g: its decode / truncate / seq_* calls / free reach
 * every rank through ops (static storage, owned by the group layer). */
void sd_session_set_group(sd_session *s, sd_tp *g, const sd_session_group_ops *ops);

#endif /* SD_MODEL_IMPL_H */
