/*
 * tools/synth.h: PRIVATE to specdec synth (synth.c: the command and the files;
 * synth_weights.c: the vocabulary and the rows of every tensor). Shapes [rows, cols].
 */
#ifndef SD_CLI_SYNTH_H
#define SD_CLI_SYNTH_H

#include <stdint.h>

#include "quant/sd_quant.h"

typedef struct synth_shape {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
} synth_shape;

typedef struct synth_vocab {
    int32_t n;
    char **text;
    float *score;
    int32_t *type;
} synth_vocab;

/* The vocabulary of n tokens (see synth_weights.c). 0, or -1 (OOM, n too small). */
int synth_vocab_build(int32_t n, synth_vocab *v);
void synth_vocab_free(synth_vocab *v);

typedef enum synth_kind {
    T_EMBD,
    T_ATTN_NORM,
    T_Q,
    T_K,
    T_V,
    T_O,
    T_FFN_NORM,
    T_GATE,
    T_DOWN,
    T_UP,
    T_OUT_NORM,
    T_OUT,
} synth_kind;

int synth_kind_per_layer(synth_kind k);
int synth_kind_is_norm(synth_kind k);
/* "blk.L.attn_q.weight", "token_embd.weight", ... */
void synth_tensor_name(char *buf, size_t cap, synth_kind k, int layer);
/* [rows, cols] of a tensor of kind k in a model of shape s (norms: [1, n]). */
void synth_kind_dims(const synth_shape *s, synth_kind k, int64_t *rows, int64_t *cols);

typedef struct synth_ctx {
    synth_shape t, d;
    sd_type dtype; /* the draft's matrix type */
    uint64_t seed;
    float noise;
    int32_t *draft_layer; /* [t.n_layer]: draft layer embedded in target layer l, or -1 */
    int64_t hd;           /* head_dim (same in both) */
} synth_ctx;

/* Row r of the draft's tensor (k, layer): cols floats into out. */
void synth_draft_row(const synth_ctx *c, synth_kind k, int layer, int64_t r, int64_t cols,
                     float *out);
/* Row r of the target's tensor (k, layer) into out[cols]; dbuf: scratch for a draft row
 * (>= the draft's widest row), qbuf: scratch for that row quantized. */
void synth_target_row(const synth_ctx *c, synth_kind k, int layer, int64_t r, int64_t cols,
                      float *out, float *dbuf, void *qbuf);

#endif /* SD_CLI_SYNTH_H */
