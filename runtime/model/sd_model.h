/*
 * runtime/model: a llama-family model, immutable weights from an mmap'd GGUF (sd_model,
 * runtime/model/load.c), and run state (sd_session, runtime/model/forward.c: a backend,
 * the weights on it, the KV cache and scratch, all allocated once for n_ctx and n_batch).
 * Weights apart from run state, as llama.cpp's llama_model / llama_context. Owns: the
 * GGUF mapping, the vocabulary, per session its backend and buffers. May include
 * runtime/base, runtime/gguf, runtime/tokenizer, runtime/backend, quant, kv.
 *
 * Architecture "llama" (Touvron et al. 2023; llama.cpp llm_build_llama): token
 * embedding, n_layer blocks of
 *   h = x + Wo . Attn(RoPE(Wq . RMSNorm(x)), RoPE(Wk . RMSNorm(x)), Wv . RMSNorm(x))
 *   x' = h + W2 . (SiLU(W1 . RMSNorm(h)) * (W3 . RMSNorm(h)))      (SwiGLU)
 * then RMSNorm and the classifier (output.weight, or token_embd.weight when tied).
 * GQA: n_head query heads share n_head_kv K/V heads. RoPE: "normal" (adjacent pairs
 * (2i, 2i+1) rotated by theta = pos * base^(-2i/n_rot)), as llama.cpp LLAMA_ROPE_TYPE_NORM
 * after the converters' Q/K permutation.
 * Architectures (runtime/gguf's table holds what differs): "llama" (also Llama 3: rope
 * frequency factors rope_freqs.weight, linear rope scaling; mistral-style files: a
 * sliding window, <arch>.attention.sliding_window, applied by the CPU backend's attention
 * when smaller than the context), and "qwen2" (biases on Q, K, V;
 * NEOX-style RoPE pairs (i, i + n_rot/2), as llama.cpp's LLAMA_ROPE_TYPE_NEOX) and "qwen3"
 * (NEOX RoPE, no biases; each Q and K head RMS-normed by blk.N.attn_q_norm.weight /
 * attn_k_norm.weight [head_dim] before RoPE; head_dim from .attention.key_length).
 * GGUF keys and tensor names: the architecture table of runtime/gguf (sd_arch_key,
 * sd_arch_tensor): <arch>.context_length, .embedding_length, .block_count,
 * .feed_forward_length, .attention.head_count, .attention.head_count_kv,
 * .attention.layer_norm_rms_epsilon, .rope.freq_base (default 10000),
 * .rope.dimension_count (default head_dim), .attention.key_length and .value_length (the
 * head size, default n_embd / n_head; the two must be equal). Tensors: token_embd.weight,
 * blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_down,ffn_up}
 * .weight, output_norm.weight, output.weight (optional).
 */
#ifndef SD_MODEL_H
#define SD_MODEL_H

#include <stdint.h>

#include "kv/sd_kv.h"
#include "quant/sd_quant.h"
#include "runtime/base/sd_base.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sd_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train; /* llama.context_length */
    int32_t n_embd;      /* dim */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim; /* <arch>.attention.key_length, default n_embd / n_head; Q is
                         [n_head * head_dim], which may differ from n_embd (Qwen3) */
    int32_t n_ff;
    int32_t n_rot;
    float rms_eps;
    float rope_base;
    float rope_freq_scale;  /* 1 / <arch>.rope.scaling.factor (linear scaling); 1 = none */
    int rope_neox;          /* 1: NEOX-style pairs (qwen2), 0: adjacent pairs (llama) */
    int has_rope_factors;   /* rope_freqs.weight present (Llama 3 frequency factors) */
    int qkv_bias;           /* attn_q/k/v carry biases (qwen2) */
    int qk_norm;            /* per-head Q/K RMSNorm before RoPE (qwen3) */
    int32_t sliding_window; /* <arch>.attention.sliding_window; 0 = none */
    const char *arch;       /* "llama", "qwen2", "qwen3", "gemma3" (static string) */
    /* gemma3 (the architecture table's row, runtime/gguf/sd_gguf.h sd_arch): */
    int ffn_gelu;         /* FFN gate GELU (tanh approximation) instead of SiLU */
    int embd_scale;       /* embeddings multiplied by sqrt(n_embd) */
    int post_norms;       /* post_attention_norm / post_ffw_norm before the residual adds */
    int32_t n_swa_layers; /* layers that use the sliding window (n_layer without a
                             pattern; gemma3: 5 of every 6); 0 without a window */
    float rope_base_swa;  /* RoPE base of those layers (<arch>.rope.freq_base_swa, no linear
                             scaling); 0: they rotate as the global layers */
    float logit_softcap;  /* <arch>.final_logit_softcapping c: logits c tanh(z / c); 0 none */
    /* phi3 LongRoPE: rope_factors_long / _short (the long ones when a session's context
     * exceeds n_ctx_orig), the rotated values scaled by rope_attn_factor */
    int has_rope_long_short;
    int32_t n_ctx_orig;     /* <arch>.rope.scaling.original_context_length, else n_ctx_train */
    float rope_attn_factor; /* <arch>.rope.scaling.attn_factor, 1 = none */
} sd_hparams;

typedef struct sd_model sd_model;

/*
 * Load a llama GGUF: validates architecture, hyperparameters (positive, divisible,
 * bounded), every tensor's presence, type and shape, and the vocabulary.
 * Errors name the file and the key or tensor.
 */
int sd_model_load(const char *path, sd_model **out, sd_error *err);
void sd_model_free(sd_model *m); /* NULL accepted */

const sd_hparams *sd_model_hparams(const sd_model *m);
const sd_vocab *sd_model_vocab(const sd_model *m);
const char *sd_model_path(const sd_model *m);
/* Total bytes of weight data (what one decode step streams). */
size_t sd_model_weight_bytes(const sd_model *m);
/* The GGUF file (for `specdec info`). */
const sd_gguf *sd_model_gguf(const sd_model *m);

typedef struct sd_session sd_session;

typedef struct sd_session_params {
    int32_t n_ctx;     /* KV capacity; 0 = n_ctx_train */
    int32_t n_batch;   /* most tokens per pass (sd_session_decode, _seq_eval) (>= 1) */
    int32_t n_threads; /* 0 = all cores */
    /* Element type of the KV cache: SD_TYPE_F32 (the default: exact) or SD_TYPE_F16
     * (half the cache memory and half the bytes attention reads; K and V are rounded to
     * binary16 when stored, which moves logits by a small relative amount, see
     * tests/test_model.c). Batched evaluation stays bit-identical to single-token
     * evaluation with either type. 0 (a zeroed struct) is F32. */
    sd_type kv_type;   /* also SD_TYPE_Q8_0 / SD_TYPE_Q4_0 (CPU only): rows quantized when
                          stored, read in place (kv/sd_kv.h) */
    sd_device device;  /* where the forward pass runs (SD_DEVICE_CPU, the default) */
    int32_t n_outputs; /* most logits rows one eval returns; 0 = n_batch */
    /* Tensor parallelism (runtime/model/tp.h): 0 = one device (the default); N >= 1 = the
     * model split Megatron-style over N ranks of `device`, one thread each (CUDA: GPUs
     * 0 .. N-1 over NCCL; CPU: N threads simulating the ranks, n_threads shared among
     * them); -1 = every device present. n_head_kv must be divisible by N. The logits differ
     * from one device's by float reassociation of the row-parallel sums; N = 1 is
     * bit-identical; batched == single-token passes stays bit for bit. With n_seq > 0
     * every rank pages its shard of the cache alike (the seq_* calls reach every rank). */
    int32_t n_split;
    /* Several sequences over a paged KV cache (kv/: a pool of blocks, a block table per
     * sequence, copy-on-write, a prefix cache; on a CUDA device in device memory, F32 /
     * F16 rows): n_seq > 0 makes sequences 0 .. n_seq - 1 of up to n_ctx positions each over one
     * pool of n_kv_blocks blocks of kv_block positions; a batch (sd_batch) may then mix them. 0
     * (the default): one sequence in a contiguous cache of n_ctx positions. */
    int32_t n_seq;
    int32_t kv_block;    /* positions per block, 1 .. SD_KV_MAX_BLOCK; 0 = SD_DEFAULT_KV_BLOCK */
    int32_t n_kv_blocks; /* blocks in the pool; 0 = enough for every sequence at n_ctx */
    /* CPU: run on the thread pool of this other CPU session (a draft beside its target:
     * they take turns, so one set of workers serves both; see sd_backend_params), which
     * must be alive when this session is made (either may be freed first). NULL: its own. */
    const struct sd_session *share_threads;
} sd_session_params;

/* Most sequences a session holds, and the block size of a paged cache by default. */
#define SD_MAX_SEQ          1024
#define SD_DEFAULT_KV_BLOCK 16
/* A paged cache of a model whose every layer has a sliding window W (Mistral-shaped)
 * gives back the blocks wholly before position n - W + 1 - SD_KV_WINDOW_SLACK after each
 * pass (n: the sequence's committed positions), so a rollback of up to this many
 * positions (a rejected draft: at most SD_MAX_DRAFT + 1) still finds its window. A model
 * with global layers too (Gemma 3) gets a pool of two layer groups (kv/sd_kv.h): only the
 * local layers' group gives back its blocks; the global layers' keeps every position. */
#define SD_KV_WINDOW_SLACK 32

sd_session_params sd_session_default_params(void);

/* Make the backend for p->device, put the weights on it (CPU: mapped in place, no copy;
 * a device: uploaded once), and allocate KV cache and scratch for p (all buffers sized
 * here; eval allocates nothing). Errors: SD_ERR_ARG (including a kv_type other than F32 /
 * F16), SD_ERR_UNSUPPORTED (a device this build lacks), SD_ERR_OOM (naming what did not
 * fit). */
int sd_session_init(const sd_model *m, const sd_session_params *p, sd_session **out, sd_error *err);
void sd_session_free(sd_session *s); /* NULL accepted */
/* SD_OK if sessions can run on dev here (the CPU always; CUDA: a build with CUDA and at
 * least one GPU), else SD_ERR_UNSUPPORTED with the backend's reason ("no CUDA device
 * found (...)", "built without CUDA"), without making a session. */
int sd_session_device_check(sd_device dev, sd_error *err);
/* SD_OK if p's tensor split (p->n_split) can be made on m (the shape splits that many ways,
 * the devices are there; no split: SD_OK), else sd_session_init's error for it, without
 * making a session. */
int sd_session_split_check(const sd_model *m, const sd_session_params *p, sd_error *err);

/*
 * A batch of tokens for one forward pass (as llama.cpp's llama_batch). Each sequence's
 * tokens must be adjacent in the batch (one run per sequence) and continue its cache
 * (positions n_past(seq), n_past(seq) + 1, ...); a sequence id the session does not
 * hold (a contiguous cache: anything but 0) is SD_ERR_ARG, named. Every row's logits are
 * bit-identical whatever else the batch holds: every op is row by row except RoPE, the KV store and
 * attention, which run per sequence over its own cache.
 *   token  : int32 [n_tokens], each in [0, n_vocab)
 *   pos    : int32 [n_tokens] positions, or NULL for n_past, n_past + 1, ...
 *   seq_id : int32 [n_tokens] sequence ids, or NULL for all 0
 *   logits : int8 [n_tokens], non-zero = return this token's logits row; NULL = only the
 *            last token's
 */
typedef struct sd_batch {
    int32_t n_tokens;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq_id;
    const int8_t *logits;
} sd_batch;

/* The batch over tokens[0 .. n) with default positions and sequence, returning the
 * logits of the last token (set .logits to choose others). */
sd_batch sd_batch_of(const int32_t *tokens, int32_t n);

/*
 * Run the forward pass over a batch (1 .. n_batch tokens), appending their K/V to the
 * cache. logits: float [n_wanted, n_vocab] host memory, row j = the j-th token (in batch
 * order) whose logits flag is set; NULL when none is wanted. n_wanted <= n_outputs.
 * Same contract as sd_session_seq_eval (one code path), of which it is the general form.
 * Errors: SD_ERR_ARG, SD_ERR_UNSUPPORTED (see sd_batch), SD_ERR_CONTEXT, and a device
 * backend's errors. On error the session is unchanged.
 */
int sd_session_decode(sd_session *s, const sd_batch *b, float *logits, sd_error *err);

/*
 * Run the forward pass over n new tokens of sequence seq at its positions [n_past, n_past +
 * n) (n_past: sd_session_seq_n_past), appending their K/V to its cache: sd_session_decode
 * over a batch of one sequence. One code path serves prefill (n = prompt length), decode
 * (n = 1) and verification (n = K + 1): each weight matrix is read once per call, and the
 * logits of every position are bit-identical to evaluating the tokens one by one.
 *   tokens : int32 [n], each in [0, n_vocab)
 *   n      : 1 .. n_batch
 *   logits : float [n_out, n_vocab] for the LAST n_out positions (n_out in
 *            0..min(n, n_outputs)), or NULL when n_out == 0
 * Errors: SD_ERR_ARG (a bad sequence id, a bad token id, n out of range), SD_ERR_CONTEXT
 * (n_past + n > n_ctx). On error the session is unchanged.
 */
int sd_session_seq_eval(sd_session *s, int32_t seq, const int32_t *tokens, int32_t n, float *logits,
                        int32_t n_out, sd_error *err);
/* The one convenience over sequence 0 (kept for the many callers that hold a session of
 * one sequence: a contiguous cache is a session with one sequence, id 0):
 * sd_session_seq_eval(s, 0, ...). */
int sd_session_eval(sd_session *s, const int32_t *tokens, int32_t n, float *logits, int32_t n_out,
                    sd_error *err);

/*
 * Greedy step: as sd_session_seq_eval(s, seq, tokens, n, row, 1, err), but what the caller
 * gets is *best, the index of the largest of the last position's first n_rows logits (the
 * lowest index on ties; -1 if one of them is NaN): the argmax of the row sd_session_seq_eval
 * would return, always the same index. On the CPU backend the classifier keeps each
 * thread's best (value, index) as it computes its rows and writes no row (row is not
 * touched); elsewhere (device and tensor-parallel sessions) row is filled and scanned.
 *   row    : float [sd_session_n_logits(s)] scratch (host memory)
 *   n_rows : 1 .. sd_session_n_logits(s) (a draft proposes only ids both models share)
 * Errors: those of sd_session_seq_eval, and SD_ERR_ARG (n_rows out of range, NULL
 * pointers). On error the session is unchanged and *best is -1.
 */
int sd_session_seq_eval_argmax(sd_session *s, int32_t seq, const int32_t *tokens, int32_t n,
                               int32_t n_rows, float *row, int32_t *best, sd_error *err);

/* ---- token trees (one sequence of a session; the CPU backend) ----
 * A pass over n tree nodes after the n_past committed positions: node i has token
 * tokens[i] and parent parent[i] (-1: the committed context; else < i), its position is
 * n_past + its depth (a node on the context: depth 0), its K/V row goes to slot n_past + i,
 * and it attends to the committed context and its own ancestors only (and itself), in the
 * order a chain pass over its own path would (context, then ancestors by depth; masked keys
 * skipped, never added as -inf): every row's logits are bit-identical to the last row of
 * the chain pass over that path (tests/test_tree.c).
 *   tokens, parent : int32 [n], n in 1 .. min(SD_MAX_TREE, n_outputs)
 *   logits         : float [n, n_logits] (out), row i = node i
 * Afterwards the cache holds n_past + n positions (slot order), which are not a sequence;
 * the caller keeps one path with sd_session_seq_tree_keep (or truncates). Errors: SD_ERR_ARG
 * (a parent out of order, n, ids), SD_ERR_UNSUPPORTED (a backend without tree attention:
 * CUDA; tensor-parallel sessions; a sliding window), SD_ERR_CONTEXT; on error the
 * session is unchanged. A paged sequence: the keys are read and the rows written through
 * the sequence's block table, the logits bit-identical to a contiguous cache's
 * (tests/test_tree.c). */
int sd_session_seq_decode_tree(sd_session *s, int32_t seq, const int32_t *tokens,
                               const int32_t *parent, int32_t n, float *logits, sd_error *err);
/* sd_session_decode with token trees among the batch's runs (the batcher's one pass: the
 * chain rows of some sequences and the trees of others): parent int32 [b->n_tokens], each
 * row's parent in its sequence's run (an index into the run, below the row's own; -1: the
 * run's first row, the one after the cache). A run whose every row's parent is the row
 * before it is a chain (sd_session_decode's arithmetic); any other run is a token tree of
 * at most SD_MAX_TREE nodes (sd_session_seq_decode_tree's arithmetic: its logits and K/V
 * rows bit-identical to a tree pass of its own). parent NULL: sd_session_decode. Errors:
 * sd_session_decode's and sd_session_seq_decode_tree's; on error the session is
 * unchanged. */
int sd_session_decode_trees(sd_session *s, const sd_batch *b, const int32_t *parent, float *logits,
                            sd_error *err);
/* After a tree pass at slot pos0 (its n_past then): keep the nodes nodes[0 .. n_keep)
 * (ascending, nodes[j] >= j; a path of the tree, root first) at slots pos0 .. pos0 + n_keep
 * - 1, their K/V rows and token ids copied there, and drop every other row (the cache then
 * holds pos0 + n_keep positions, the bits a chain pass over the path leaves). Errors:
 * SD_ERR_ARG (ranges, order), SD_ERR_UNSUPPORTED (a backend without kv_copy). The rows
 * moved lie in the tree pass's own positions, which that pass made the sequence's own
 * (copy-on-write), so a paged sequence moves them inside its blocks. */
int sd_session_seq_tree_keep(sd_session *s, int32_t seq, int32_t pos0, const int32_t *nodes,
                             int32_t n_keep, sd_error *err);

/* Context shift (llama.cpp's --context-shift), without recomputing: drop sequence seq's
 * cached positions [n_keep, n_keep + n_discard) and move the later ones down by n_discard,
 * their keys re-rotated by RoPE to their new positions (values move as they are). The
 * sequence then holds n_past - n_discard positions whose tokens are the old ones without
 * the dropped run. Not the same as evaluating the shortened context afresh: the moved rows
 * of layers after the first still carry what their tokens attended to in the dropped run
 * (in a one-layer model the two agree to rounding). A contiguous cache moves its rows in
 * place; a paged sequence's moved rows are copied out first and written back into blocks of
 * its own (it is cut back to n_keep, then reserved: copy-on-write of a block the prefix
 * cache or a fork shares; transient host memory of 2 x layers x the moved rows), with the
 * same arithmetic, so it ends with the bits a contiguous cache's shift leaves. A
 * tensor-parallel group's paged sequence: every rank shifts its own KV heads. One argument
 * check for both. Errors: SD_ERR_ARG (bad id or range), SD_ERR_UNSUPPORTED (another
 * backend than the CPU, tensor parallelism on a contiguous cache, released rows,
 * rope.scaling.attn_factor; the sequence unchanged), SD_ERR_OOM (host memory: unchanged;
 * no block left for the reserve: the sequence then holds its first n_keep positions). */
int sd_session_seq_shift(sd_session *s, int32_t seq, int32_t n_keep, int32_t n_discard,
                         sd_error *err);

/* ---- several sequences (n_seq > 0: a paged KV cache) ----
 * Sequence ids are 0 .. sd_session_n_seq(s) - 1 (a contiguous cache: the one sequence 0).
 * Every call that reads or changes a cache names its sequence. Errors of the functions that
 * return a status: SD_ERR_ARG (a bad id or length). */
int32_t sd_session_n_seq(const sd_session *s); /* 1 for a contiguous cache */
int32_t sd_session_seq_n_past(const sd_session *s, int32_t seq);
/* int32 [sd_session_seq_n_past(s, seq)]: the ids whose K/V sequence seq holds. */
const int32_t *sd_session_seq_tokens(const sd_session *s, int32_t seq);
/* Roll sequence seq back to n_keep positions (its blocks past them return to the pool).
 * SD_ERR_ARG also for 0 < n_keep <= the first position still held (blocks behind a
 * sliding window were released, SD_KV_WINDOW_SLACK). */
int sd_session_seq_truncate(sd_session *s, int32_t seq, int32_t n_keep, sd_error *err);
/* keep, or 0 when a pass at position keep of sequence seq would read keys behind its
 * sliding window that were released (then only a restart from 0 can reuse the cache). */
int32_t sd_session_seq_keep_floor(const sd_session *s, int32_t seq, int32_t keep);
/* Roll seq back to the longest common prefix of its tokens and ctx[0 .. n) (0 when that
 * would need released blocks: sd_session_seq_keep_floor); returns the positions kept. */
int32_t sd_session_seq_keep_prefix(sd_session *s, int32_t seq, const int32_t *ctx, int32_t n);
/* Make the empty sequence dst share the first n positions of src (no copy; the first
 * write into a shared block copies it). Errors: SD_ERR_ARG. */
int sd_session_seq_fork(sd_session *s, int32_t dst, int32_t src, int32_t n, sd_error *err);
/* Prefix cache: the empty sequence seq takes the longest cached run of full blocks
 * matching tokens[0 .. n) and returns the positions it now holds (sd_kv_cache_attach);
 * store registers seq's full committed blocks (sd_kv_cache_store). 0 / no-op on a
 * contiguous cache. */
int32_t sd_session_seq_attach_prefix(sd_session *s, int32_t seq, const int32_t *tokens, int32_t n);
void sd_session_seq_store_prefix(sd_session *s, int32_t seq);
/* Drop the prefix cache's blocks that no sequence maps (sd_kv_pool_cache_clear). */
void sd_session_kv_clear_cache(sd_session *s);
/* The pool's accounting (sd_kv_pool_get_stats; a contiguous cache: one block). */
void sd_session_kv_stats(const sd_session *s, sd_kv_pool_stats *out);
/* Blocks free or evictable; blocks for n positions of one sequence. */
int32_t sd_session_kv_available(const sd_session *s);
int32_t sd_session_kv_blocks_for(const sd_session *s, int64_t n);
/* Check the pool's accounting against the blocks the sequences map (sd_kv_pool_check):
 * SD_OK or SD_ERR_ARG naming the inconsistency (a leak is a bug). */
int sd_session_kv_check(const sd_session *s, sd_error *err);
/* KV bytes per position of one sequence: 2 x layers x row bytes (KV heads x head dim
 * elements of the KV type). */
size_t sd_session_kv_bytes_per_token(const sd_session *s);

/*
 * Restrict the classifier to the rows ids[0 .. n) (a trimmed LM head, as FR-Spec's draft:
 * Zhao et al. 2025, arXiv 2502.14856): afterwards every logits row of sd_session_eval /
 * sd_session_decode has n entries, entry j being the logit of token ids[j] computed
 * with the same arithmetic as the full head computes it (each output row is its own
 * fixed-order dot product). The rows are copied once, here (n x the row bytes of
 * output.weight); the matmul then streams n rows instead of n_vocab.
 *   ids : int32 [n], distinct, each in [0, n_vocab); n in 0 .. n_vocab
 * n = 0 (ids may be NULL) restores the full head. Errors: SD_ERR_ARG (range, a
 * repeated id), SD_ERR_UNSUPPORTED (a tensor-parallel session), SD_ERR_OOM, a device's
 * upload error; on error the session keeps its full head.
 */
int sd_session_set_output_rows(sd_session *s, const int32_t *ids, int32_t n, sd_error *err);
/* Entries of a logits row: n_vocab, or the n of sd_session_set_output_rows. */
int32_t sd_session_n_logits(const sd_session *s);

int32_t sd_session_n_ctx(const sd_session *s);
int32_t sd_session_n_batch(const sd_session *s);
int32_t sd_session_n_outputs(const sd_session *s);
/* The device the session runs on. */
sd_device sd_session_device(const sd_session *s);

/* What the session's backend did with the weights at init: on the CPU, the matrices it
 * packed for its SIMD kernels (quant/sd_quant.h, Packed weights), the bytes of those
 * copies (memory the backend owns beyond the mapped file), the time packing took (ms,
 * wall clock) and the kernel set ("scalar", "avx2", "avx512"); zeros and the device
 * name elsewhere. A tensor-parallel session reports its rank 0. */
typedef struct sd_weights_info {
    int32_t n_packed;
    size_t packed_bytes;
    double packed_ms;
    const char *kernels;
} sd_weights_info;
sd_weights_info sd_session_weights_info(const sd_session *s);
/* The session's backend (runtime/backend/sd_backend.h), for tools that read its own
 * figures (the CPU backend's per-op timers); rank 0's for a tensor-parallel session. */
struct sd_backend;
struct sd_backend *sd_session_backend(const sd_session *s);
const sd_model *sd_session_model(const sd_session *s);

/*
 * Make sequence seq hold exactly ctx[0 .. n): keep the longest common prefix of its cached
 * tokens and ctx (sd_session_seq_keep_prefix), roll back the rest (O(1)), and evaluate
 * ctx[prefix .. n) in chunks of n_batch without logits. n = 0 empties it. (runtime/model/
 * sync.c) Errors: SD_ERR_CONTEXT (n > n_ctx), SD_ERR_ARG (bad sequence or token id); on
 * error the sequence holds a prefix of ctx.
 */
int sd_session_seq_sync(sd_session *s, int32_t seq, const int32_t *ctx, int32_t n, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_MODEL_H */
